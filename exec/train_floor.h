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

struct hp_trainer;

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
/* Nonzero: hp_trainer_create runs within a smaller figure without a
 * warning (the floor probes of --plan and of a refusal: a budget that
 * runs so runs). */
extern int hp_trainer_within_quiet;

/* The figure trainer t's step was refused with at its budget by its own
 * check (graph-only: the recompute search planned it and was refused,
 * with hp_exec_min_budget() then this figure): planned again at that
 * budget with the trainer's threads and tiers, the step is refused naming
 * it.  0: not known. */
uint64_t hp_trainer_refused_needs(const struct hp_trainer *t);

/* The forward graphs trainers build (load, weight split) are remembered
 * for the process by their weight split's choices (split_weight.h
 * hp_ws_log) and floor: a probe whose options differ in the budget alone,
 * and whose split would choose alike, is answered without building its
 * forward graph (--plan's probe one page below the smallest budget named
 * of the 10,001-node MLP of test plan-speed: a tenth of its CPU, the same
 * graph as the 1-byte trainer's).  The last one is kept. */
struct hp_ws_log;
/* Whether trainer t's forward graph is remembered (graph-only, under a
 * budget, one rank, no pipeline, update_cut 0, its own budget's split). */
int hp_train_floor_noted(const struct hp_trainer *t);
/* Remember t's forward graph by its split's choices and its floor
 * (hp_split_train_floor); the log's contents are taken (*log left empty). */
void hp_train_floor_note(const struct hp_trainer *t, struct hp_ws_log *log, uint64_t floor);
/* The floor of the forward graph of o (update_cut 0, o->budget) when the
 * one remembered is that graph: the same model and options but the
 * budget, and a weight split at o's budget that chooses alike; *would_cut
 * that split's.  0: not known. */
uint64_t hp_train_floor_known(const char *model, const struct hp_trainer_opts *o, int *would_cut);
/* Tests: forget it; forward graphs answered from it, and built, by
 * hp_trainer_floor (not thread-safe counters). */
void hp_train_floor_forget(void);
extern int hp_train_floor_memo_hits, hp_train_floor_builds;

#endif
