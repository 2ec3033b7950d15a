/* Operator splitting (internal to exec/): rewrite a graph into more,
 * smaller values and nodes so that the planner's smallest budget (its
 * largest single step) fits a memory budget.
 *
 * The band pass cuts chains of convolutional ops along one axis: the batch
 * axis when the batch has at least as many samples as bands, otherwise the
 * outermost spatial axis.  Each band of a chain stays its own value; a
 * window op (Conv, pooling) takes its halo rows as Slices of the
 * neighbouring bands, Concat'ed onto its band, with its pads on that axis
 * kept only at the outer edges.  Anything that cannot be banded
 * (reductions over the axis, BatchNormalization in training, graph
 * outputs; in training Gemm, MatMul and Flatten too) gets the bands
 * Concat'ed back first.  Inference cuts Gemm/MatMul by a weight and
 * Flatten along the batch rows where each row is its own FMA chains
 * (hp_node_rows_exact).  RNN, GRU and LSTM with layout 1 are cut in bands
 * of batch entries (each entry runs alone; their RNNGrads chain the weight
 * sums, split_rnn.c), and Squeeze, Unsqueeze and Reshape that keep the
 * batch axis carry the bands between layers.  Outputs are bitwise the
 * unsplit ones: the conv kernels cut their sgemms into tiles fixed by the
 * geometry (OpenBLAS rounds a column by the call's width), a Conv's bands
 * start at multiples of its tile (hp_node_band_align; a cut upstream that
 * is not aligned, or much coarser than k even bands, is cut again) and keep
 * the whole node's kernel path (attribute hpdlf_path); a Conv no band can
 * reproduce runs whole.  Candidates whose band convolutions get workspace
 * for one worker (attribute hpdlf_lean) follow those with every worker's.
 *
 * hp_split_for_budget tries band counts K = 1, 2, 3, 4, 6, ... on a copy
 * of the graph (band convolutions with every worker's workspace, then with
 * one worker's; in inference each first with the producers that band-cut
 * nodes read cut ahead of them, and, where that cut any, without) up to
 * the first whose smallest budget leaves a quarter of
 * the budget for what the planner keeps resident (in inference, then the
 * counts after it while each is predicted 2% faster than the best before
 * it), and keeps, of those that
 * fit the budget, the one whose plan at the budget is predicted fastest
 * (hp_split_predicted_ms: kernels, their count and the plan's loads and
 * write-backs, timed with a fixed model so that --plan and runs choose
 * alike).  When that splits nothing and nothing fits
 * (training: gradients need more than the forward ops the cut sees) at a
 * budget no smaller than the smallest one named, the cut is halved below
 * the target until a candidate fits.  While nothing fits, a candidate
 * whose forward steps alone need no less than the one kept (split.c
 * cut_floor), or whose band count keeps such steps uncut, is neither cut
 * nor differentiated: it could not be kept.  Deterministic. */
#ifndef HPDLF_EXEC_SPLIT_H
#define HPDLF_EXEC_SPLIT_H

#include <stdint.h>

#include "hpdlf/graph.h"
#include "exec/budget.h"

struct hp_split_opts {
	const struct hp_budget_layout *layout; /* budget 0: nothing to do */
	int training;           /* the graph will be trained: BatchNormalization,
				 * Dropout are barriers */
	/* Applied to each candidate after the rewrite and shape inference, and
	 * to the graph kept (e.g. autodiff, so that the budget is checked on the
	 * training graph); NULL: none.  The graph is always finished once. */
	int (*finish)(struct hp_graph *g, void *arg);
	void *arg;
	uint64_t *floor;        /* non-NULL: hp_split_train_floor of the graph given
				 * (a training search takes it on the way) */
};

struct hp_split_info {
	int k;                  /* bands of the graph kept (1: not split) */
	int axis;               /* 0: batch, 2: outermost spatial, -1: not split */
	int nsplit;             /* original nodes rewritten into bands */
	int lean;               /* band convolutions with one worker's workspace */
	int rejoined;           /* ops kept whole after a cut chain (hp_split_bands) */
	int ahead;              /* nodes cut ahead of their readers (hp_split_bands) */
	uint64_t min_before;    /* smallest budget unsplit (after finish) */
	uint64_t min_after;     /* ... of the graph kept */
	double ms;              /* its predicted step time at the budget
				 * (hp_split_predicted_ms), -1: not predicted */
};

/* Entries of attribute hpdlf_band, which the band pass gives each band of
 * a Conv in a training graph cut in rows (split_band.c tag_band). */
#define HP_BAND_TAG_N 12

/* After autodiff of a graph cut in rows: each band's data gradient of a
 * Conv (ConvGradData) becomes the whole kernel's rows for the input rows
 * that band owns, computed from the dY rows of every band they need, and
 * zeros elsewhere in its window.  The halo rows of neighbouring bands then
 * add zeros to exact sums instead of summing two partial ones, and
 * out-of-core training is bitwise the in-core one.  A band owns the rows
 * of its own input band where it can (hp_split_grad_owners), and the zero
 * pieces are then left out (hp_split_grad_prune).  Groups whose kernel
 * path cannot be cut in rows bit for bit stay as they are.  Returns the
 * number of groups rewritten or a negative error. */
int hp_split_grad_exact(struct hp_graph *g);

/* After autodiff of a graph whose recurrent nodes were cut into bands of
 * batch entries (attribute hpdlf_rnn_band): the GradSums of neighbouring
 * bands' weight gradients become one chain of running sums in float64
 * (split_rnn.c), so the bands add what the whole RNNGrad adds.  Returns
 * the sums chained or a negative error; g is finalized and inferred. */
int hp_split_rnn_chain(struct hp_graph *g);

/* One band of an exact group (split_grad_zero.c): gx its window gradient
 * (autodiff's ConvGradData/pooling gradient output), [a, b) its window
 * and [oa, ob) the rows it owns (whole rows of the input on `axis`). */
struct hp_band_rows {
	int gx, axis;
	int64_t a, b, oa, ob;
};

/* The rows bands 1 .. nb-1 own start at own[i] (own[0], own[nb] the
 * caller's): where the pieces of both neighbouring windows are cut (the
 * input's own band cuts), so that no halo piece holds owned rows; else at
 * the window's start. */
void hp_split_grad_owners(const struct hp_graph *g, const struct hp_band_rows *b, int nb, int axis, int64_t *own);

/* After the exact rewrite: the pieces of each band's window gradient
 * outside its owned rows are zero; those pieces, the band-sized
 * SliceGrads of them and their places in GradSums are removed and the
 * owned piece is the owned rows' node's output (no Pad, no ConcatGrad).
 * All or nothing: 0 (g unchanged) when a zero would reach another op.
 * Returns the bands pruned or a negative error; g needs finalizing. */
int hp_split_grad_prune(struct hp_graph *g, const struct hp_band_rows *b, int n);

/* g must have passed hp_graph_infer.  On success g is the graph kept,
 * inferred and finished; values keep their indices (new ones are appended,
 * values replaced by bands stay unused).  Returns 0 or a negative error. */
int hp_split_for_budget(struct hp_graph *g, const struct hp_split_opts *so, struct hp_split_info *info);

/* hp_graph_split for a layout: operators split only when the graph does
 * not fit l->budget unsplit.  *nsplit (may be NULL): operators rewritten. */
int hp_split_ops(struct hp_graph *g, const struct hp_budget_layout *l, int *nsplit);

/* The planner's smallest budget of g with per-kernel scratch (what the
 * runtime falls back to under a tight budget) and the staging reserve. */
uint64_t hp_split_min_budget(const struct hp_graph *g);

/* The band pass alone: cut g (inferred) into k bands where it helps;
 * `target` is the step size above which a whole value is cut; lean: the
 * band convolutions get workspace for one worker (attribute hpdlf_lean);
 * ahead: a node whose output is read in bands by a node cut for its own
 * need is cut too, though it needs less than the target (*nahead, may be
 * NULL: the nodes so cut).  rejoined NULL: a chain stays cut until an op
 * that cannot be banded; else (inference) the bands are joined back before
 * ops that fit the target whole and whose weights outweigh their banded
 * inputs (rejoin_here), and *rejoined is the number of ops kept whole so. */
int hp_split_bands(struct hp_graph *g, int k, int training, int lean, int ahead, uint64_t target, int *nsplit,
		   int *axis, int *nahead, int *rejoined);

/* Nodes of g (inferred) the band pass keeps as they are, whatever the
 * target and options, cutting in k bands: barrier[i] 1 where node i
 * allows no banding on the axis (its inputs are joined back whole for
 * it).  Returns 0 or a negative error. */
int hp_split_band_barriers(const struct hp_graph *g, int k, int training, char *barrier);
/* The axis the band pass cuts g in k bands on (rank of the input: none);
 * the barriers depend on k through it alone. */
int hp_split_band_axis(const struct hp_graph *g, int k, int training);

/* A floor under the smallest budget of every training graph
 * hp_split_for_budget can make of forward graph g (inferred), whatever
 * the budget: the least, over the band counts, of the forward steps the
 * band pass keeps as they are at that count (split.c cut_kept_floor; the
 * graph unsplit keeps them all).  0 on error. */
uint64_t hp_split_train_floor(const struct hp_graph *g);

/* The step time the band pass predicts for graph c (inferred) planned
 * under a tensor budget: its plan's time model with fixed figures (not the
 * measured speed model: --plan and runs must choose alike), plus a fixed
 * cost per kernel; HUGE_VAL when c cannot be planned there. */
double hp_split_predicted_ms(const struct hp_graph *c, uint64_t budget);

/* Tests: candidates that cut_floor (split.c) shows cannot be kept are
 * finished anyway, and hp_split_for_budget fails (HP_EINTERNAL) where one
 * needs less than its floor.  hp_split_floor_skips counts the candidates
 * found unfit by their floor (skipped unless checked).  Not thread-safe:
 * for single-threaded tests and figures. */
extern int hp_split_check_floors;
extern int hp_split_floor_skips;

/* A deep copy of g (values and nodes keep their indices; kernels are
 * prepared again by hp_graph_infer), and g taking a copy's contents over
 * (the copy, now holding the old graph, is freed). */
int hp_split_graph_copy(const struct hp_graph *g, struct hp_graph **out);
void hp_split_graph_adopt(struct hp_graph *g, struct hp_graph *c);

#endif
