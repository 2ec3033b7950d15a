/* The compile pipeline (internal to exec/): what hp_session_create does to
 * a graph before it runs it, in one place so that the library and the
 * program agree on every budget:
 *
 *   1. weight split: Gemm/MatMul weights too large for the budget are cut
 *      in row blocks (split_weight.h);
 *   2. operator split: when one operator still needs more than the budget,
 *      chains of convolutional ops are cut into bands (split.h);
 *   3. the budget layout of the graph kept (budget.h), which the planner,
 *      the runtime and the store opener take; the runtime then plans.
 *
 * Steps 1 and 2 happen only under a budget and without o->no_split
 * (o->no_weight_split skips step 1 alone). */
#ifndef HPDLF_EXEC_COMPILE_H
#define HPDLF_EXEC_COMPILE_H

#include "hpdlf/exec.h"
#include "exec/budget.h"

/* Rewrite g (inferred) for o and fill *l for the graph kept.  Returns 0 or
 * a negative error; on error g may be partly rewritten (still valid). */
int hp_compile(struct hp_graph *g, const struct hp_exec_opts *o, struct hp_budget_layout *l);

#endif
