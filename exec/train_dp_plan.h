/* Data-parallel planning (internal to exec/ and tools/): the link the
 * ranks measured or were given, and the step predicted with the gradient
 * reductions (train_dp_plan.c). */
#ifndef HPDLF_EXEC_TRAIN_DP_PLAN_H
#define HPDLF_EXEC_TRAIN_DP_PLAN_H

#include "exec/plan_comm.h"

struct hp_trainer;
struct hp_exec_opts;
struct hp_plan;
struct hp_speed_compute;

/* A plan of g under o with the speed model (plan_api.c): measured when
 * not cached if `measure`, else the cached figures or the defaults (a run
 * under a budget must not pay a calibration's memory). */
int hp_plan_build_speed(const struct hp_graph *g, const struct hp_exec_opts *o, struct hp_plan **p,
			struct hp_speed_compute *sp, int measure);
/* The trainer's ranks (the launcher's or --plan's), its link and whether
 * the link was measured (1) or given (0). */
int hp_dp_plan_link(const struct hp_trainer *t, struct hp_link *l, int *measured);
/* The bytes per bucket of its reductions (--bucket or chosen; 0: the
 * planner could not say, train_dp.c's default). */
uint64_t hp_dp_plan_bucket_size(const struct hp_trainer *t);
/* The step of graph g (a trainer's, with its reductions) under o on
 * `ranks` ranks over link l. */
int hp_plan_comm_summarize(const struct hp_graph *g, const struct hp_exec_opts *o, const struct hp_link *l,
			   int ranks, struct hp_comm_pred *out);

#endif
