/* Whether a graph-only trainer is sure not to fit its budget, known from
 * its forward graph alone (internal to exec/ and hpdlf-exec's --plan):
 *
 *   if (hp_trainer_sure_refused(model, &o) == 1)
 *           ;  // hp_trainer_create at o.budget plans a step that does not fit
 */
#ifndef HPDLF_EXEC_TRAIN_FLOOR_H
#define HPDLF_EXEC_TRAIN_FLOOR_H

#include <stdint.h>

#include "hpdlf/train.h"

/* A floor under the smallest budget (tensor bytes, split.c's figure)
 * of the step of every trainer hp_trainer_create may build from o at
 * o->budget (graph_only, one rank, no pipeline) before split_finer's
 * retries; 0: not known. */
uint64_t hp_trainer_floor(const char *model, const struct hp_trainer_opts *o);

/* 1 when the step of every trainer hp_trainer_create may build from o
 * (graph_only, one rank, no pipeline, under o->budget) needs more than the
 * budget's tensors, so that planning it at o->budget is refused; 0 when
 * that is not known (any error, or a floor within reach of the budget).
 * Builds the forward graph (load, weight split) only, never the training
 * graph. */
int hp_trainer_sure_refused(const char *model, const struct hp_trainer_opts *o);

/* The budget t runs within: the one given, or the smaller figure its
 * refusal named where the budget given left its step less room
 * (exec/train.c, create_within). */
uint64_t hp_trainer_run_budget(const struct hp_trainer *t);

#endif
