/* The static memory planner (internal to exec/).
 *
 * The schedule is the graph's topological order without folded nodes.  The
 * planner simulates it once under the budget: a value's memory is released
 * at its last use; when room is needed the resident value whose next use is
 * farthest is evicted (Belady), written back only if it is dirty and needed
 * again (or, hp_plan_opts.victims, by other victim policies too: the plan
 * that moves least is kept); loads are then hoisted as early as the budget
 * allows so they
 * overlap the compute of earlier steps.  The runtime follows the plan; the
 * store stays the authority on residency, so a plan can only make a run
 * slower, never wrong. */
#ifndef HPDLF_EXEC_PLAN_H
#define HPDLF_EXEC_PLAN_H

#include <stdint.h>

#include "hpdlf/graph.h"
#include "exec/budget.h"

struct hp_speed_compute;

enum hp_plan_act {
	HP_ACT_LOAD = 1,      /* bring value into DRAM (issued before step) */
	HP_ACT_EVICT = 2,     /* drop a clean copy */
	HP_ACT_WRITEBACK = 3, /* write a dirty value below, then drop it */
	HP_ACT_FREE = 4,      /* last use passed: release */
};

struct hp_plan_act_rec {
	int value;
	enum hp_plan_act act;
	int for_step;         /* LOAD: the step that needs it */
};

struct hp_plan_opts {
	uint64_t budget;       /* bytes; 0 = unlimited */
	uint64_t align;        /* tensors occupy sizes rounded up to this */
	uint64_t workspace;    /* bytes the runtime reserves for kernel scratch: when
				* set, steps' own workspace is not counted again */
	/* bytes the runtime keeps free beside the plan at a budget, for staging
	 * copies (inputs in, outputs and dataset rows out); NULL: none */
	uint64_t (*reserve_for)(uint64_t budget);
	double gflops;         /* compute speed without a speed model */
	const struct hp_speed_compute *speed; /* measured per-kernel model, or NULL */
	int workers;           /* compute lanes of the time model (0: 1) */
	uint64_t chunk;        /* the store's chunk: one request of the tier model */
	double read_MBps, write_MBps; /* tier bandwidth model */
	double read_lat_us, write_lat_us; /* and the fixed cost of one request */
	int max_lookahead;     /* steps a load may be hoisted (0: unlimited) */
	/* Victim policies hp_plan_build tries, keeping the plan that moves
	 * least (plan.c io_cost): 0 or 1 Belady's farthest next use alone
	 * (what predictions of candidates use: split, remat), more: the others
	 * too (hp_plan_default_opts: all, the plan --plan prints and runs
	 * follow). */
	int victims;
	/* Data parallelism: a reduction step (hp_comm_is_allreduce) holds its
	 * buffers (gradients in, sums out) while it is in flight on the
	 * communication thread, until its predicted end: the reductions one
	 * after another, each 2(N-1)/N * bytes / bandwidth + 2(N-1) * latency
	 * (a reduce-scatter or an all-gather alone half of it), the kernels
	 * timed as the time model's compute.  The steps meanwhile get room
	 * beside them (evictions), so backward need not wait for a reduction
	 * to give its bytes back.  comm_ranks < 2 or no bandwidth: reductions
	 * are instant (hp_plan_default_opts fills these from the job). */
	int comm_ranks;
	double comm_GBps, comm_lat_us;
};

struct hp_plan {
	int nsteps;
	int *node;             /* node index per step */
	char *start_resident;  /* per value: resident when a run starts (steady state) */
	uint64_t start_bytes;  /* their bytes */
	int *last_use;         /* per value: last step reading it; nsteps = kept to the end; -1 unused */
	int *use_start, *uses; /* per value v: the steps reading it, ascending, in
				* uses[use_start[v] .. use_start[v+1]) (padded with HP_PLAN_NEVER) */
	int *act_begin;        /* acts before step s: acts[act_begin[s] .. act_begin[s+1]) */
	struct hp_plan_act_rec *acts;
	int nacts;
	uint64_t peak_bytes;   /* simulated high-water mark */
	/* per step s, 0..nsteps: bytes of the budget the plan leaves free from
	 * step s to the run's end (the budget less the most it holds at once
	 * from s on; at nsteps, less what the next run starts with), where a
	 * caller's read-ahead fits without taking room a planned load needs
	 * (the trainer's next batch, exec/train_data.c); NULL: none known */
	uint64_t *room_from;
	uint64_t min_budget;   /* the largest single-step need */
	int min_step;          /* the step with that need */
	uint64_t bytes_loaded, bytes_written;
	uint64_t loads, prefetched; /* loads, and those hoisted before their step */
	double compute_ms, io_ms, predicted_ms;
	double class_ms[2];    /* compute_ms split: sgemm-bound, memory-bound (speed.h) */
	int class_kernels[2];
	double dispatch_ms;    /* fixed per-kernel cost within compute_ms */
	double read_ms, write_ms; /* io_ms split */
};

#define HP_PLAN_NEVER (1 << 30)
#define HP_PLAN_VICTIMS 3 /* victim policies there are (plan.c) */
#define HP_PLAN_SMALL 8192     /* bytes: values of at most this many are the third policy's last victims */

/* First step after `step` that reads v, or HP_PLAN_NEVER. */
int hp_plan_next_use(const struct hp_plan *p, int v, int step);

/* The options the runtime plans with for a budget layout: its budget,
 * resident workspace, staging reserve and workers, the store's alignment,
 * the job's ranks and link (hp_comm_link); no speed model. */
void hp_plan_default_opts(const struct hp_budget_layout *l, struct hp_plan_opts *po);
/* The smallest budget under these options (the largest single step's need). */
uint64_t hp_plan_min_budget(const struct hp_graph *g, const struct hp_plan_opts *o, int *step);
/* The same, and in *node (when not NULL) the index in g->nodes of the
 * step with that need, -1 when there is none. */
uint64_t hp_plan_min_budget_node(const struct hp_graph *g, const struct hp_plan_opts *o, int *node);
/* A floor under node i's need (step_need) in any graph that holds it with
 * the same inputs and outputs, read by more nodes or not, with any
 * workspace: its distinct managed inputs and the outputs that no in-place
 * rule may lay over an input; the workspace is not counted. */
uint64_t hp_plan_node_need_floor(const struct hp_graph *g, int i, uint64_t align);
/* The smallest budget under these options for a largest step's need of
 * `need` bytes (with the kernel scratch and the staging reserve): what
 * hp_plan_min_budget returns for such a graph, monotone in need. */
uint64_t hp_plan_budget_for_need(const struct hp_plan_opts *o, uint64_t need);

/* Step s writes its output 0 into input 0's tensor (the op allows it, the
 * input dies there, same bytes, both activations of this run): the output
 * takes the input's memory over. */
int hp_plan_inplace(const struct hp_graph *g, const struct hp_plan *p, int s);
/* Step s is a bucket's AllReduce that writes each sum into its gradient's
 * tensor: every gradient dies there and its sum takes its bytes over
 * (output i over input i, i >= 1), so a reduction in flight holds one copy
 * of the bucket, not two.  The collective packs a piece before it
 * unpacks that piece's sums (comm_shard.c), so in place is exact. */
int hp_plan_comm_inplace(const struct hp_graph *g, const struct hp_plan *p, int s);
/* Output o of step s takes the bytes of its input returned over, -1: none.
 * Besides the two above, an optimizer update (HP_OP_STATE_INPLACE) writes
 * each next version of the state over the state it reads, when no later
 * step of the run reads that state: the update holds W and dW, not W, dW
 * and W' (and m, v once, not twice).  The state's old version is gone from
 * then on, as it was when its last reader discarded it (runtime.c). */
int hp_plan_inplace_src(const struct hp_graph *g, const struct hp_plan *p, int s, int o);
/* hp_plan_inplace_src(...) >= 0. */
int hp_plan_inplace_at(const struct hp_graph *g, const struct hp_plan *p, int s, int o);

/* Fails with HP_EBUDGET_OP when a step needs more than o->budget at once;
 * hp_plan_needed (this thread's) is then the plan's min_budget. */
int hp_plan_build(const struct hp_graph *g, const struct hp_plan_opts *o, struct hp_plan **out);
/* The same, with belady (taken: freed or handed out; NULL: none) the plan
 * of g under o by Belady's policy alone: hp_plan_build of g under o with
 * victims 0 (the recompute search's), which the other policies' plans are
 * weighed against. */
int hp_plan_build_from(const struct hp_graph *g, const struct hp_plan_opts *o, struct hp_plan *belady,
		       struct hp_plan **out);
/* hp_plan_build's check alone: *out holds the schedule, use lists and
 * smallest budget (min_budget, min_step; no acts, peak or times), and
 * HP_EBUDGET_OP as hp_plan_build where a step needs more than o->budget.
 * Without reductions in flight a plan that passes the check is built
 * (each step evicts anything not its own), so this is hp_plan_build's
 * answer without the simulation; with them it builds the plan. */
int hp_plan_check(const struct hp_graph *g, const struct hp_plan_opts *o, struct hp_plan **out);
/* The same, handing out a copy of the plan last built so (plan_shared.c)
 * when g's contents and every option are the same: the plan API's
 * figures of one step (summary, stash, footprint, a trainer's budget
 * check) plan it once. */
int hp_plan_build_shared(const struct hp_graph *g, const struct hp_plan_opts *o, struct hp_plan **out);
/* The same from belady, as hp_plan_build_from. */
int hp_plan_build_shared_from(const struct hp_graph *g, const struct hp_plan_opts *o, struct hp_plan *belady,
			      struct hp_plan **out);
/* Plans hp_plan_build_shared handed out again (tests). */
extern int hp_plan_shared_hits;
extern _Thread_local uint64_t hp_plan_needed;
void hp_plan_free(struct hp_plan *p);
/* The tiers' footprint the plan of g under o predicts (0, 0, 0 in core;
 * plan_foot.c): the state (weights, optimizer state, inputs) once, the
 * values it writes below DRAM besides (swapped activations, each counted
 * once), and the peak: the most the tiers hold at once, walking the plan's
 * order as the runtime places and frees copies (a swapped value's copy
 * lives to its last use; the state's previous version goes after its last
 * reader, hp_plan_state_released; its next version is placed when written
 * back).  The task net may fire a write-back before a release that the
 * plan's order puts first, so a run can exceed it by such overlaps. */
struct hp_exec_opts;
struct hp_plan_summary;
int hp_plan_footprint(const struct hp_graph *g, const struct hp_exec_opts *o, uint64_t *state, uint64_t *swapped,
		      uint64_t *peak);
/* hp_plan_footprint's figures (known 1), or nothing known (0). */
struct hp_plan_foot {
	uint64_t state, swapped, peak;
	int known;
};
/* hp_plan_summarize_stash, and the footprint of the plan it summarizes
 * where that is the plan hp_plan_footprint builds (its speed models read
 * from the cache; no reduction in flight): --plan's summary and footprint
 * of a step out of core, from one plan (the footprint planned it again
 * after two layouts and a hash of the 10,001-node MLP's 27,000 steps). */
struct hp_remat_figures;
int hp_plan_summarize_foot(const struct hp_graph *g, const struct hp_exec_opts *o, struct hp_plan_summary *out,
			   struct hp_remat_figures *stash, struct hp_plan_foot *foot);
/* The same of a plan already built. */
int hp_plan_footprint_of(const struct hp_graph *g, const struct hp_plan *p, uint64_t *state, uint64_t *swapped,
			 uint64_t *peak);
/* Value v is the state's previous version, which the runtime discards
 * after the last step of a run that reads it (its next version replaces it
 * at the run's end): a value with a `next`, kept in the store, not a graph
 * output nor an input, and written by no node (only read in a run). */
int hp_plan_state_released(const struct hp_graph *g, int v);
/* Write plan p of g as Graphviz (plan_dot.c). */
int hp_plan_dot(const struct hp_graph *g, const struct hp_plan *p, const struct hp_plan_opts *o, const char *path);

/* The options hp_plan_summarize plans g under o with: the budget layout
 * and the measured speed model, which *model holds (free() it after the
 * options' last use); measure 0: never measured, the cached figures or
 * the built-in defaults. */
int hp_plan_speed_opts(const struct hp_graph *g, const struct hp_exec_opts *o, struct hp_plan_opts *po, void **model,
		       int measure);
/* hp_plan_summarize's answer and its steps, budget, min_budget and
 * min_node (the rest 0) from hp_plan_check: no simulation where no
 * reduction is in flight.  --plan's smallest budget wants no more of the
 * plan at that figure (the 10,001-node MLP's: two simulations with
 * thousands of evictions each). */
int hp_plan_summarize_min(const struct hp_graph *g, const struct hp_exec_opts *o, struct hp_plan_summary *out);
/* hp_plan_summarize with belady (taken) the plan of g by Belady's policy
 * alone under the options it plans with (hp_plan_build_from). */
int hp_plan_summarize_from(const struct hp_graph *g, const struct hp_exec_opts *o, struct hp_plan *belady,
			   struct hp_plan_summary *out);

#endif
