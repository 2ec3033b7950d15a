/* Weight partitioning: a Gemm/MatMul whose weight is too large for the
 * budget becomes K products over row blocks of the weight, each block its
 * own initializer (value.part_of names the whole), so every step of the
 * forward, backward and optimizer touches one block at a time.
 *
 *   hp_graph_infer(g);
 *   hp_split_weights(g, &layout, &spec, 0);  // training: before hp_autodiff
 *   hp_split_weights(g, &layout, NULL, 0);   // inference: hp_compile does it
 *
 * Checkpoints and ONNX export keep writing the whole tensors: the helpers
 * below read and write a whole by its parts, a piece at a time. */
#ifndef HPDLF_EXEC_SPLIT_WEIGHT_H
#define HPDLF_EXEC_SPLIT_WEIGHT_H

#include <stdint.h>

#include "hpdlf/graph.h"
#include "hpdlf/train.h"
#include "exec/budget.h"

struct hp_session;
struct hp_trainer;

/* Partition every Gemm (weight B, transB 0 or 1) and MatMul (weight B)
 * with a constant rank-2 float weight whose steps would not fit the
 * layout's budget less its staging; K is the smallest that makes them fit
 * 85% of that (spec: training with
 * that optimizer, so backward and update steps count too; NULL:
 * inference).  The weight's outer axis is cut, so each block is a byte
 * range of the original: output features (transB=1, outputs concatenated)
 * or the reduction axis (transB=0 and MatMul, partial products summed).
 * Inference cuts only at the kernels' tile boundaries and chains the
 * partial sums (block j adds into block j - 1's result: Gemm beta 1,
 * MatMulAcc), so its outputs are bitwise those in core
 * (kernels/gemm_tile.h); training sums the blocks with Adds.
 * g must be inferred; it is re-inferred.  Returns the number of weights
 * partitioned, or a negative error.  Budget 0 (in core): nothing.
 * Inference also cuts an ungrouped Conv's weight along its output
 * channels (blocks of whole multiples of 8 channels, outputs concatenated
 * on axis 1, the whole's kernel path kept: bitwise in core).
 * update_cut (training): also keep any other weight whose optimizer update
 * would not fit in blocks of rows that the node reads through a Concat
 * (exact copies: bitwise); the trainer asks for it only when a first
 * build without it was refused for the budget, since the update is often
 * fused into the gradient and fits whole. */
int hp_split_weights(struct hp_graph *g, const struct hp_budget_layout *l, const struct hp_train_spec *spec,
		     int update_cut);

/* hp_split_weights; *would_cut (training without update_cut): 1 when
 * update_cut would have cut a weight more, else 0 (a build with update_cut
 * is then this one again). */
int hp_split_weights_ext(struct hp_graph *g, const struct hp_budget_layout *l, const struct hp_train_spec *spec,
			 int update_cut, int *would_cut);

/* What a training pass without update_cut chose where the budget decides:
 * the rows each candidate was cut in (its figures kept with them), and
 * the largest optimizer update the update_cut pass would weigh.  Which
 * weights are candidates, and how a cut rewrites the graph, depend on the
 * graph alone; so a pass over the same graph at another layout that
 * chooses alike (hp_ws_log_same) makes the same graph.  The floor probes
 * of --plan know a forward graph so without building it (train_floor.c). */
struct hp_ws_choice;
struct hp_ws_log {
	struct hp_ws_choice *choice;
	int n, cap;
	int copies;          /* tensors of a weight's size its update holds */
	int cut;             /* the layout had a budget (else nothing is cut) */
	uint64_t update_max; /* would_cut at any steps' budget below this (0: none) */
};

/* hp_split_weights_ext (training, update_cut 0), its choices into *log
 * (hp_ws_log_free it; empty on error). */
int hp_split_weights_log(struct hp_graph *g, const struct hp_budget_layout *l, const struct hp_train_spec *spec,
			 int update_cut, int *would_cut, struct hp_ws_log *log);
/* 1 when a pass at layout l over the graph the logged one cut (the same
 * spec) makes the same choices, and so the same graph; *would_cut: its
 * would_cut.  0 when any choice differs. */
int hp_ws_log_same(const struct hp_ws_log *log, const struct hp_budget_layout *l, int *would_cut);
void hp_ws_log_free(struct hp_ws_log *log);

/* Weights partitioned in g (wholes with parts). */
int hp_split_count(const struct hp_graph *g);
/* Weights the trainer partitioned. */
int hp_trainer_split_count(const struct hp_trainer *t);

/* Autodiff: optimizer state `state` of parameter `param`; when param is a
 * part, state becomes the same part of the whole state value NAME.suffix
 * (NAME the whole's name), created without uses if needed. */
int hp_part_state(struct hp_graph *g, int param, int state, const char *suffix);

/* Per value: 1 where a checkpoint keeps it whole: run-to-run state that is
 * no part, and the wholes of partitioned state.  calloc'd (free it), NULL
 * when out of memory. */
char *hp_whole_state(const struct hp_graph *g);

/* Bytes [at, at + len) of value v of the session's graph, read from or
 * written to v itself or, for a whole, to the parts that hold them. */
int hp_whole_read(struct hp_session *s, int v, uint64_t at, uint64_t len, void *dst);
int hp_whole_write(struct hp_session *s, int v, uint64_t at, uint64_t len, const void *src);

#endif
