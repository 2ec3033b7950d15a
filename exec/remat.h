/* Recompute or swap, per activation (internal to exec/).
 *
 * Training under a budget: every activation the backward pass reads is
 * kept resident from the forward to its use, swapped out and prefetched
 * back (the planner's Belady write-back), or dropped after the forward and
 * recomputed from the nearest stashed inputs just before the backward
 * needs it.  The choice is made on the forward schedule taken as a chain
 * (remat_dp.c), then the recomputations are written into the graph as
 * copies of the forward nodes (same op, attributes and inputs, so the
 * same kernel and tiles: the recomputed values are bitwise the originals)
 * that the backward reads instead (remat.c).  They become RECOMPUTE
 * transitions of the task net and are scheduled as late as the graph
 * allows; the planner then swaps what still does not fit.
 *
 * The chain model (hp_remat_chain), items 1..n in forward order:
 *   bytes[i]  stashed bytes of item i (what the backward reads of it);
 *             items with 0 bytes are forward-only: recomputed, at
 *             recompute_ms, only as part of a recomputed item after them
 *   recompute_ms[i], swap_ms[i] (the write and the read back)
 *   can[i]    may be recomputed (deterministic, no run-to-run state)
 * A decision per stashed item: KEEP, SWAP or RECOMPUTE.  A RECOMPUTE item
 * is recomputed once, from the nearest earlier stashed item that is not
 * RECOMPUTE (its anchor; item 0, the graph input, is always an anchor)
 * through every item between, each such item held until the backward
 * reaches it.  Memory, for a budget mem of stash bytes:
 *   - at the turn from forward to backward: sum of KEEP bytes <= mem;
 *   - while the backward runs a segment (an anchor and the RECOMPUTE items
 *     after it up to the next anchor): KEEP bytes up to the anchor, the
 *     anchor's bytes if it is SWAP (read back), and the segment's
 *     RECOMPUTE bytes <= mem.
 *   An item larger than mem can only be SWAP, and is read back in pieces
 *   (its bytes count nowhere).
 * Cost: sum over RECOMPUTE items of recompute_ms of the item and of the
 * forward-only items just before it, plus lambda * swap_ms of SWAP items.
 * The DP (memory in `buckets` units of mem / buckets, item bytes rounded
 * up to units) is exact when bytes are multiples of the unit; it takes
 * O(n * buckets^2) time. */
#ifndef HPDLF_EXEC_REMAT_H
#define HPDLF_EXEC_REMAT_H

#include <stdint.h>

#include "hpdlf/graph.h"
#include "exec/budget.h"

enum hp_remat_choice {
	HP_REMAT_KEEP = 0,
	HP_REMAT_SWAP = 1,
	HP_REMAT_RECOMPUTE = 2,
};

struct hp_remat_item {
	uint64_t bytes;
	double recompute_ms, swap_ms;
	int can;
};

/* Minimum cost choice into choice[0..n) (forward-only items: KEEP); *cost
 * its cost.  HP_EBUDGET when no choice fits (mem too small). */
int hp_remat_chain(const struct hp_remat_item *it, int n, uint64_t mem, int buckets, double lambda, char *choice,
		   double *cost);

/* The suffix naming a recomputation node (its forward node's name + this),
 * and its sched hint (graph.h): above HP_REMAT_SCHED / 2, so that they run
 * when nothing else is ready, copies of later forward nodes first. */
#define HP_REMAT_SUFFIX ".recompute"
#define HP_REMAT_SCHED (1 << 24)
/* The hints of a band's backward nodes and of its recomputations, for a
 * forward band hint s = band + 1 (split_band.c): the bands in reverse,
 * the last band's first, each band's recomputations when its backward
 * waits for them.  A split weight's gradient sums the bands' parts in a
 * chain from the last band to the first (autodiff walks the forward
 * backwards), and the last band's activations are the ones still resident
 * when the forward ends: in the forward's order every band's data
 * gradient waited, written below DRAM, until the chain reached it, and
 * the recomputations (hinted after everything) all ran at the end.  Above
 * the unhinted 0 as band hints were, above HP_REMAT_SCHED / 2 (a band's
 * recomputation is one), below the other recomputations. */
#define HP_BAND_MAX (1 << 20)
#define HP_BAND_BWD_SCHED(s) (HP_REMAT_SCHED / 2 + 2 * (HP_BAND_MAX - (s)))
#define HP_BAND_REMAT_SCHED(s) (HP_BAND_BWD_SCHED(s) + 1)
#define HP_REMAT_LATE_MIN (HP_REMAT_SCHED / 2 + 2 * HP_BAND_MAX + 2)
/* Is node n a recomputation (a copy of a forward node the backward reads):
 * its name and its sched hint say so? */
int hp_remat_is_copy(const struct hp_node *n);

/* Graph analysis (remat_graph.c), arrays sized by the caller: fwd[i] node
 * i is an ancestor of value loss (not a recomputation); pers[v] value v
 * outlives a run or is not an activation; need[v] activation v of a
 * forward node is read by another node (the backward's stash). */
int hp_remat_forward(const struct hp_graph *g, int loss, char *fwd);
void hp_remat_persistent(const struct hp_graph *g, char *pers);
void hp_remat_needed(const struct hp_graph *g, const char *fwd, const char *pers, char *need);

struct hp_exec_opts;
/* --plan's figures of a training step (plan_api.c; a graph with run-to-run
 * state, its loss its last output): the activations the backward reads,
 * in bytes, by what the plan under o does with them: kept resident,
 * swapped (written below DRAM, read back), recomputed (by nodes copies of
 * forward nodes, flops FLOPs in all). */
struct hp_remat_figures {
	uint64_t kept, swapped, recomputed;
	double flops;
	int nodes;
};
int hp_remat_summarize(const struct hp_graph *g, const struct hp_exec_opts *o, struct hp_remat_figures *out);
/* hp_plan_summarize and hp_remat_summarize of g under o from one plan:
 * in core the plan API shares none (planning costs about what its hash
 * does), and --plan asked for both (the 10,001-node MLP: two in-core
 * plans of 27,000 steps). */
struct hp_plan_summary;
int hp_plan_summarize_stash(const struct hp_graph *g, const struct hp_exec_opts *o, struct hp_plan_summary *out,
			    struct hp_remat_figures *stash);

struct hp_remat_stats {
	int nodes;              /* forward nodes recomputed */
	uint64_t bytes;         /* bytes they produce anew */
	double flops;           /* and their FLOPs */
	double plan_ms;         /* time choosing */
	double before_ms, after_ms; /* predicted step time without and with */
	int refused;            /* the plan without recomputation was refused for the
				 * budget (HP_EBUDGET*: g unchanged, nothing chosen) */
};

/* Rewrite the training graph g (loss: its loss value) for the budget of
 * o: recompute what the chain model says beats keeping or swapping, when
 * the planner predicts a faster step with it (else g is unchanged).
 * Nothing in core.  measure: the speed model may be measured now (else the
 * cached figures or the defaults).  st may be NULL. */
int hp_remat(struct hp_graph *g, int loss, const struct hp_exec_opts *o, int measure, struct hp_remat_stats *st);
/* The same; *belady (may be NULL): when the search recomputes nothing, its
 * plan of g by Belady's policy alone under the options hp_plan_summarize
 * takes from o (victims aside), for hp_plan_summarize_from; else NULL. */
struct hp_plan;
int hp_remat_ext(struct hp_graph *g, int loss, const struct hp_exec_opts *o, int measure, struct hp_remat_stats *st,
		 struct hp_plan **belady);

/* The same with the planner's options given (their speed and tier model). */
struct hp_plan_opts;
int hp_remat_plan(struct hp_graph *g, int loss, const struct hp_plan_opts *po, struct hp_remat_stats *st);
/* The same, choosing only among plans that hold at most room bytes below
 * DRAM at once (the tiers' capacity; 0: not bounded): while the plan without
 * recomputation holds more, swaps are weighed 2, 4, ... 2^20 times their
 * time until a choice recomputes enough to fit; the fastest plan within
 * the room is kept (none: as without a room). */
int hp_remat_plan_room(struct hp_graph *g, int loss, const struct hp_plan_opts *po, uint64_t room,
		       struct hp_remat_stats *st);

#endif
