/* The budget layout (internal to exec/): the one place that turns a DRAM
 * budget into the limits derived from it.  The splitters, the planner, the
 * runtime and the store opener take a layout instead of interpreting the
 * budget themselves, so they agree on every figure:
 *
 *   budget = staging + workspace + usable
 *
 * chunk      the store's unit of paging.  Small budgets get small chunks so
 *            paging stays fine-grained: at most a 16th of the budget, and
 *            below 4 MiB a 64th (staging is two chunks, which a budget of
 *            a few hundred KiB must not lose to it); never below 8 KiB.
 * staging    kept free beside the plan for staging copies (inputs in,
 *            outputs and dataset rows out): one chunk copied at a time,
 *            its source and its destination.
 * workspace  kernel scratch resident for the session, one buffer per
 *            compute worker; 0 when the budget is too tight for that: each
 *            kernel's scratch is then its own, counted with its step.
 * usable     what the plan's steps and resident values get.
 *
 * hp_budget_layout_init depends on the budget alone (what the splitters
 * need: they run before the graph is final); hp_budget_layout adds the
 * workspace, which depends on the graph and the options.
 *
 * The budget the user gives (`process`) bounds the whole process from
 * HP_BUDGET_PROCESS_FROM (64 MiB) on: the process's fixed overhead
 * (libraries, the graph, threads, BLAS buffers: hp_budget_overhead,
 * measured once) is taken off it, and `budget` above is what is left for
 * tensors and the frame pool's bookkeeping of their pages, which grows with
 * the pool (hp_budget_pool_meta).  Below 64 MiB a process cannot hold its overhead and tensors
 * anyway: tensors get the budget itself, but never more than 64 MiB minus
 * the overhead (at least 16 MiB), so the tensor budget never falls as the
 * budget grows while the overhead stays under 48 MiB, and the peak RSS
 * stays under max(budget, 64 MiB).  With a larger overhead (libfabric's
 * stack for --store) budgets from 64 MiB to the overhead plus the tensors'
 * minimum are refused. */
#ifndef HPDLF_EXEC_BUDGET_H
#define HPDLF_EXEC_BUDGET_H

#include <stdint.h>

#include "hpdlf/graph.h"

struct hp_exec_opts;

struct hp_budget_layout {
	uint64_t budget;     /* DRAM bytes for tensors; 0: in core (then chunk,
			      * staging and usable are 0) */
	uint64_t chunk;      /* the store's chunk size */
	uint64_t staging;    /* bytes kept free for staging copies */
	uint64_t workspace;  /* resident kernel scratch of all workers (0: per
			      * kernel); in core, what the in-core plan counts */
	uint64_t usable;     /* budget - staging - workspace (0 if they exceed it) */
	int workers;         /* compute workers of the task net */
	uint64_t process;    /* the budget given: of the whole process (0: in core) */
	uint64_t overhead;   /* fixed overhead taken off it (0 below 64 MiB) */
};

/* From this budget on, the budget bounds the process's peak RSS. */
#define HP_BUDGET_PROCESS_FROM (64ull << 20)

/* The process's fixed overhead, measured at the first call (the resident
 * set then: libraries, the loaded graph, threads up so far) plus what the
 * runtime adds whatever the budget (BLAS buffers and stacks of the compute
 * and I/O threads, the plan, the net): rounded up to 2 MiB, so that two
 * processes of the same model (--plan and the run) agree on it. */
uint64_t hp_budget_overhead(void);
/* Measure it now, if not yet, with the model g loaded (NULL: none): the
 * caller's copies of its largest input and output count too, and
 * libfabric's growing buffers when a tier is remote.  `mode` tells runs
 * whose start-ups differ apart (training's data set is loaded by then):
 * the figure is kept per model and mode (overhead.c). */
void hp_budget_overhead_measure(const struct hp_graph *g, int remote, const char *mode);
/* The most of one OpenBLAS packing buffer the sgemm calls of g's kernels
 * touch (kernels/blas.h), in inference or also in training (blas_bound.c):
 * the overhead reserves it per core.  The legacy 6 MiB for a core or an
 * operator the bound does not model, or g NULL. */
int64_t hp_budget_blas_per_buffer(const struct hp_graph *g, int training);
/* The figure per buffer hp_budget_overhead reserved (0 before it). */
uint64_t hp_budget_blas_bound(void);
struct hs_tier_spec;
/* Whether any of the n tiers is remote (daemons). */
int hp_budget_tiers_remote(const struct hs_tier_spec *tiers, int n);
/* Fix the overhead instead of measuring it (tests; ranks that agree on
 * the largest one, so that they split their graphs alike). */
void hp_budget_overhead_set(uint64_t bytes);
/* The tensor budget of a process budget (0: 0, else at least 1), and the
 * smallest process budget whose tensor budget is at least `tensors`. */
uint64_t hp_budget_tensors(uint64_t process);
uint64_t hp_budget_process_for(uint64_t tensors);
/* The smallest budget of 64 MiB or more (one that bounds the whole
 * process) whose tensors get `tensors` bytes: with --store's overhead,
 * budgets between 64 MiB and this one are refused while a smaller one,
 * bounding tensors only, runs. */
uint64_t hp_budget_process_bound_for(uint64_t tensors);
/* The store's frame-pool bookkeeping for `bytes` of tensors, resident
 * beside them (from 64 MiB on the tensor budget leaves room for it). */
uint64_t hp_budget_pool_meta(uint64_t bytes);

/* The store's unit of DRAM accounting: tensors occupy multiples of it. */
#define HP_BUDGET_ALIGN 4096ull

/* The store's chunk size and the staging reserve at a budget (0: 0). */
uint64_t hp_budget_chunk(uint64_t budget);
uint64_t hp_budget_staging(uint64_t budget);

/* The layout of `budget` with per-kernel scratch (workspace 0). */
void hp_budget_layout_init(struct hp_budget_layout *l, uint64_t budget);
/* l as hp_budget_layout_init left it, for a tensor budget of tensors instead
 * (its chunk, staging and usable bytes with it). */
void hp_budget_layout_tensors(struct hp_budget_layout *l, uint64_t tensors);

/* Task-net compute workers for these options and thread count. */
int hp_exec_workers(const struct hp_exec_opts *o, int threads);
/* Largest kernel workspace of the graph, rounded to HP_BUDGET_ALIGN. */
uint64_t hp_plan_max_workspace(const struct hp_graph *g);

/* The layout for graph g (inferred, final) under options o: with one
 * resident scratch buffer per worker unless that does not leave room for
 * the graph's largest step. */
void hp_budget_layout(const struct hp_graph *g, const struct hp_exec_opts *o, struct hp_budget_layout *l);

#endif
