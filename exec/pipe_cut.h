/* Pipeline stages chosen by the planner (internal to exec/ and tools/;
 * issue 14).
 *
 * A partition of the model over P stages is over the MODEL graph (the
 * forward graph as imported and inferred, before autodiff), whose nodes
 * are topologically sorted: bounds[0] = 0 < bounds[1] < ... < bounds[P] =
 * nnodes, and stage s runs the forward nodes [bounds[s], bounds[s+1]) with
 * their backward and their parameters' optimizer updates.  Values made
 * before bounds[s] and read from bounds[s] on cross the cut: their
 * activations go forward, their gradients (the same bytes) come back.
 *
 *   struct hp_pipe_choose_opts o;
 *   hp_pipe_choose_opts_init(&o, sizeof o);
 *   o.budget = 1ull << 30;  o.micro_batches = 8;  o.spec = &spec;
 *   int bounds[P + 1];
 *   if (hp_pipe_choose(model, P, &o, bounds) < 0) die(hp_errmsg());
 *
 * The choice (pipe_cut.c): contiguous stages minimising the slowest
 * stage's predicted time per micro-batch (forward + backward + optimizer
 * from the measured speed model, speed.h), each stage's working set
 * fitting its rank's budget; among partitions that tie on the slowest
 * stage (within o->tie_tolerance, 1%), the fewest bytes crossing the cuts.  Exact: a dynamic programme
 * over the chain whose windows are bounded by the slowest stage's time.
 *
 * The costs per model node (pipe_cost.c) come from the training graph of
 * the whole model: the model is loaded again from its file (model->path)
 * with the same input shapes, differentiated (hp_autodiff with o->spec) and
 * every kernel of the result is charged to the model node it derives from:
 * a forward node to itself, its gradient rule to it, a parameter's update
 * and gradient sum to the parameter's first reader, the loss to the last
 * node.
 *
 * Memory: parameters, gradients, optimizer state and the activations kept
 * for backward may page to the rank's lower tiers; what must fit its DRAM
 * budget is the stage's working set: its largest kernel's inputs, outputs
 * and scratch (the planner's smallest budget for an unsplit graph) plus
 * one buffer per direction at each of its cuts (activation in and its
 * gradient out, activation out and its gradient in).  Operators split for
 * the budget (hp_graph_split) could go lower: the estimate is
 * conservative. */
#ifndef HPDLF_EXEC_PIPE_CUT_H
#define HPDLF_EXEC_PIPE_CUT_H

#include <stddef.h>
#include <stdint.h>

#include "hpdlf/graph.h"
#include "hpdlf/train.h"

struct hp_speed_compute;

/* enum hp_pipe_schedule (1F1B, GPipe) is hpdlf/train.h's. */

struct hp_pipe_choose_opts {
	size_t size;                 /* sizeof the struct the caller knows (growth) */
	uint64_t budget;             /* --budget of each rank (a process budget, budget.h); 0: unlimited */
	int micro_batches;           /* M (0: 1); the model's batch is the micro-batch already */
	enum hp_pipe_schedule schedule;
	const struct hp_train_spec *spec; /* loss and optimizer (NULL: hp_train_spec_init's) */
	int threads;                 /* threads of each rank's kernels (0: all online cores) */
	const struct hp_speed_compute *speed; /* NULL: measured (cached, speed.h) */
	int recalibrate;             /* measure the speed model again */
	double link_GBps, link_lat_us; /* the link between stages (0: transfers not predicted) */
	/* Partitions whose slowest stage is within this fraction of the
	 * fastest possible tie (then the fewest bytes over the cuts win);
	 * hp_pipe_choose_opts_init: 0.01, below what the speed model can tell
	 * apart.  0: exact ties only. */
	double tie_tolerance;
	/* --freeze patterns (hp_trainer_opts'): frozen parameters get no
	 * gradient and no update. */
	const char *const *freeze;
	int nfreeze;
};

void hp_pipe_choose_opts_init(struct hp_pipe_choose_opts *o, size_t size);

/* The model as a chain: per node, what it costs per micro-batch. */
struct hp_pipe_chain {
	int n;                       /* model nodes */
	double *fwd_ms, *bwd_ms, *opt_ms; /* [n] predicted kernel times */
	uint64_t *need;              /* [n] largest working set of one of its kernels (aligned bytes) */
	uint64_t *cut;               /* [n+1] activation bytes crossing a cut before node c (0 at 0 and n) */
	int64_t *params;             /* [n] parameter elements it owns (first reader) */
	uint64_t *state;             /* [n] their bytes with gradients and optimizer state */
	uint64_t *acts;              /* [n] bytes of the activations it makes that backward reads */
	int nodes_kernels;           /* kernels of the training graph charged */
	double *xfer_ms;             /* [n+1] one micro-batch's activation over cut c, one way (its
				      * gradient comes back the other way at once); NULL: no link given */
};

/* Per-node costs of model (inferred, loaded from model->path) under o
 * (complete: hp_pipe_opts_full); hp_pipe_chain_free frees them. */
int hp_pipe_chain_build(const struct hp_graph *model, const struct hp_pipe_choose_opts *o, struct hp_pipe_chain *c);
void hp_pipe_chain_free(struct hp_pipe_chain *c);
/* The boundary bytes of model: cut[c] for c in [0, nnodes] (pipe_cost.c). */
int hp_pipe_cut_bytes(const struct hp_graph *model, uint64_t *cut);

/* The exact choice over a chain (pure, no I/O): P stages (a stage's time
 * is its kernels', or the transfer over its end cut if that is longer),
 * each stage's
 * working set (largest need + 2 * (cut at each end)) at most `cap` bytes
 * (0: unlimited); of the partitions whose slowest stage is within a
 * fraction `tol` of the fastest, the one with the fewest bytes over the
 * cuts.  0 with bounds[P+1] set, *slowest its slowest stage's ms and
 * *crossing its bytes over all cuts; HP_EBUDGET if no partition
 * fits, *min_cap then the smallest cap one would; HP_EUSAGE if P < 1 or
 * P > n. */
int hp_pipe_partition(const struct hp_pipe_chain *c, int P, uint64_t cap, double tol, int *bounds, double *slowest,
		      uint64_t *crossing, uint64_t *min_cap);
/* A stage's time per micro-batch and working set. */
double hp_pipe_stage_ms(const struct hp_pipe_chain *c, int lo, int hi);
uint64_t hp_pipe_stage_need(const struct hp_pipe_chain *c, int lo, int hi);

/* The options of a caller that knows a smaller struct, completed. */
void hp_pipe_opts_full(const struct hp_pipe_choose_opts *in, struct hp_pipe_choose_opts *o);
/* The smallest --budget per rank (a process budget) whose tensor budget
 * leaves `need` bytes beside the staging reserve. */
uint64_t hp_pipe_budget_for(uint64_t need);

/* Choose the P stages of model under o; 0 with bounds[P+1] set, or a
 * negative error (HP_EBUDGET naming the smallest --budget per rank that
 * fits) with the thread-local message set. */
int hp_pipe_choose(const struct hp_graph *model, int P, const struct hp_pipe_choose_opts *o, int *bounds);

/* The same over a chain already built (o complete). */
int hp_pipe_choose_chain(const struct hp_graph *model, const struct hp_pipe_chain *c, int P,
			 const struct hp_pipe_choose_opts *o, int *bounds);

/* What --plan prints of a partition (pipe_describe.c). */
struct hp_pipe_stage {
	int first, last;             /* model nodes [first, last] */
	const char *first_name, *last_name; /* graph-owned */
	int64_t params;
	uint64_t param_bytes, state_bytes; /* parameters; with gradients and optimizer state */
	double fwd_ms, bwd_ms, opt_ms, ms; /* per micro-batch */
	uint64_t need;               /* working set (tensor bytes) */
	uint64_t min_budget;         /* the --budget it needs (process, budget.h) */
	uint64_t peak_bytes;         /* in core: state + the activations backward reads, of the micro-batches
				      * in flight + buffers */
	int in_flight;               /* micro-batches whose activations it keeps */
	uint64_t cut_after;          /* activation bytes to the next stage (0 for the last) */
	double send_ms;              /* their transfer (and the gradient's back), per micro-batch */
};

struct hp_pipe_desc {
	int P, M;
	enum hp_pipe_schedule schedule;
	struct hp_pipe_stage *stages; /* [P] */
	double slowest_ms;           /* per micro-batch: a stage's kernels or a cut's transfer one way */
	double bubble;               /* (P-1)/(M+P-1): the schedule's idle fraction */
	double step_ms;              /* (M+P-1) * the slowest forward and backward (or link) + the
				      * slowest update + fill and drain transfers */
	double one_rank_ms;          /* M * the whole model's forward and backward + its updates */
	double efficiency;           /* one_rank_ms / (P * step_ms) */
	uint64_t crossing;           /* activation bytes over all cuts, per micro-batch */
};

/* Figures of partition bounds of model under o (the chain built again).
 * hp_pipe_desc_free frees them. */
int hp_pipe_describe(const struct hp_graph *model, int P, const int *bounds, const struct hp_pipe_choose_opts *o,
		     struct hp_pipe_desc *d);
/* The same from a chain already built. */
int hp_pipe_describe_chain(const struct hp_graph *model, const struct hp_pipe_chain *c, int P, const int *bounds,
			   const struct hp_pipe_choose_opts *o, struct hp_pipe_desc *d);
void hp_pipe_desc_free(struct hp_pipe_desc *d);

#endif
