/* Pipeline training (internal to exec/train*.c and pipe*.c): the model cut
 * into P stages over P ranks (times D replicas), each running the
 * micro-batches of every step in a 1F1B or GPipe order.
 *
 * A stage runs three graphs, all cut from the same model (pipe_graph.h):
 *   forward   its nodes, parameters as inputs: the activations it sends on,
 *             and those its gradient reads (the saved values);
 *   backward  the gradient of its nodes (autodiff seeded by the gradients
 *             the next stage sends back, or by the loss on the last stage)
 *             reading the saved values of the micro-batch (pipe_split.c):
 *             a micro-batch in flight keeps them in its slot until its
 *             backward, inside the stage's budget; outputs the gradients
 *             of the parameters and of the stage's inputs (sent back).
 *             A stage whose gradient reads run-to-run state cannot be
 *             split: its backward recomputes the forward from the saved
 *             inputs instead (p->split 0);
 *   optimizer the parameters as trainable weights, their summed gradients
 *             as inputs, the updates autodiff emits for one rank (the same
 *             state names, so checkpoints and numbers are the 1-rank run's).
 * The last stage has no forward graph: its backward graph is its forward.
 * Gradients of a step's micro-batches are summed in float32 in micro-batch
 * order (a deferred Gemm or MatMul weight gradient, pipe_defer.c: by one
 * GEMM over all their rows), summed over the stage's D replicas, scaled by 1 / (M D) (every
 * loss is a mean over its micro-batch), then the optimizer runs and the
 * other two graphs read its parameters in place (in core; copied out of
 * core). */
#ifndef HPDLF_EXEC_PIPE_H
#define HPDLF_EXEC_PIPE_H

#include <stdint.h>

#include <json-c/json.h>

#include "exec/pipe_graph.h"

/* --trace: the lane of a stage's waits for its messages (pipe_step.c) */
#define HP_PIPE_LANE 201

struct hp_trainer;
struct hp_session;
struct hp_comm_req;

/* A micro-batch in flight: its inputs kept for the backward, and the
 * messages of it still travelling. */
struct hp_pipe_slot {
	void *in;                   /* cut s-1's values (stage 0: the data rows) */
	void *gout;                 /* cut s's gradients, received */
	void *out, *gin;            /* cut s's values and cut s-1's gradients, being sent */
	struct hp_comm_req *rin, *rgout, *sout, *sgin;
	void *saved;                /* the saved values of its forward (p->split) */
};

struct hp_pipe {
	int P, M, D, stage, replica, gpipe;
	int *bounds;
	struct hp_pipe_cut *cuts;
	int64_t mb;                 /* rows of a micro-batch */
	struct hp_graph *gf, *go;   /* forward and optimizer (the backward is the trainer's t->g) */
	struct hp_session *sf, *so;
	int np, *params;            /* the stage's parameters (value indices, the same in every graph) */
	uint64_t *poff, nparam;     /* each one's offset in acc (elements), their total */
	int *pgrad;                 /* per parameter: its gradient in the backward graph, -1: none */
	int *ograd;                 /* per parameter: the optimizer graph's input for its gradient */
	int *ingrad;                /* per value of cut s-1: its gradient in the backward graph */
	int *seed;                  /* per value of cut s: the backward graph's input of its gradient */
	int vin, vlab, vloss;       /* in the backward graph (stage 0's data input, the last's labels, loss) */
	float *acc, *tmp;
	int nslot;
	struct hp_pipe_slot *slot;
	void *ybuf, *ytmp;          /* a micro-batch's labels (last stage; ytmp: int32 file rows) */
	double loss_sum;            /* this step's micro-batch losses (last stage) */
	int split;                  /* the backward reads saved values (else it recomputes) */
	int nsaved, *saved;         /* the saved values (indices in both graphs) */
	uint64_t saved_bytes;       /* of one micro-batch */
	char *acc_direct;           /* per parameter: 1 its GemmGrad adds into acc itself (in core), 2 deferred */
	int model_nodes;            /* of the whole model (t->g before the stage replaced it) */
	int ndefer;                 /* weight gradients computed once per step (pipe_defer.c) */
	struct hp_pipe_defer *defer;
	int64_t pack_epoch;         /* weights packed once per step (pipe_pack.c; 0: none) */
	uint64_t pack_bytes;        /* their packed copies */
	int *packb, npackb, *packf, npackf; /* the nodes marked, in the backward and forward graphs */
	int sharded;                /* the optimizer graph reduces and shards the gradients (pipe_shard.c) */
};

/* This rank's place (t->pipe): stage, pipeline, micro-batch rows; checks
 * that P divides the ranks and M x D the batch (HP_EUSAGE). */
int hp_pipe_setup(struct hp_trainer *t);
/* Build the stage of this rank (t->rank) and the sessions: after the data
 * set is open and the ranks joined.  Sets t->g, t->s (the backward's). */
int hp_pipe_build(struct hp_trainer *t);
/* One training step over the rows hp_train_rows chose: every
 * micro-batch, then the update; *loss the global batch's mean loss on
 * every rank. */
int hp_pipe_step(struct hp_trainer *t, double *loss);
/* What the step's summed gradients are multiplied by: 1 / (M D), or 1
 * when a sharded stage's optimizer divides them itself. */
float hp_pipe_grad_scale(const struct hp_pipe *p);
void hp_pipe_free(struct hp_pipe *p);

/* The partition of the trainer's model into P stages: the named cuts, or
 * the planner's choice (pipe_cut.c) made on rank 0 and broadcast. */
int hp_pipe_bounds(const struct hp_trainer *t, int P, int *bounds);

/* Checkpoints (pipe_ckpt.c): collective, the whole model in one
 * committed checkpoint that resumes at any P; reading loads the stage's
 * part of any checkpoint (train_ckpt_load.c). */
int hp_pipe_ckpt_write(struct hp_trainer *t);
int hp_pipe_ckpt_read(struct hp_trainer *t);

/* Split the stage's backward graph gb (its forward nodes, then their
 * gradient; autodiff's fwd_values nv0) in two: gf, a second build of the
 * same graph, keeps the forward nodes and outputs cut cout's values and
 * the saved values; gb keeps the gradient nodes with the saved values
 * as inputs.  *saved (malloc'd): their indices, the same in both graphs.
 * HP_EUNSUPPORTED when the gradient reads run-to-run state (neither graph
 * changed then). */
int hp_pipe_split(struct hp_graph *gf, struct hp_graph *gb, int nv0, const struct hp_pipe_cut *cout, int **saved,
		  int *nsaved);

/* A copy of the model as the trainer prepared it: the data input's batch
 * the micro-batch, parameters promoted, inferred (pipe_build.c). */
int hp_pipe_model_copy(struct hp_trainer *t, struct hp_graph **out);

/* The stage's state as a checkpoint lists it (pipe_ckpt.c): a JSON array
 * of {name, dtype, shape, elements, bytes, graph, value}, and piece
 * [at, at + n) of entry e's tensor. */
json_object *hp_pipe_state_list(struct hp_trainer *t);
int hp_pipe_state_read(struct hp_trainer *t, json_object *e, uint64_t at, size_t n, void *buf);

/* --export-onnx of a pipeline (pipe_export.c), collective: rank 0 writes
 * the whole trained model, reading each stage's tensors from the rank
 * that holds it piece by piece as the exporter asks for them. */
int hp_pipe_export(struct hp_trainer *t, const char *path, int external);

/* Where a stage's bytes live (pipe_mem.c): b[] the budgets of the
 * backward, forward and optimizer sessions (0: in core); in core, mark
 * the GemmGrads that add a parameter's gradient into p->acc themselves
 * (before the backward's session is made) and bind them (after). */
int hp_pipe_budgets(struct hp_trainer *t, const struct hp_graph *gb, uint64_t b[3]);
/* rc of making session k (0 backward, 1 forward, 2 optimizer) with its
 * share b: a budget refusal prefixed with the stage and the session. */
int hp_pipe_budget_error(const struct hp_trainer *t, int k, uint64_t b, int rc);
int hp_pipe_mark_direct(struct hp_trainer *t, struct hp_graph *gb);
int hp_pipe_bind_direct(struct hp_trainer *t);
/* Before each backward: the step's first (first 1) overwrites those sums,
 * the others add; hp_pipe_zero_acc zeroes the rest of p->acc. */
void hp_pipe_direct_first(struct hp_trainer *t, int first);
void hp_pipe_zero_acc(struct hp_pipe *p);

/* Weight gradients once per step (pipe_defer.c), with M > 1: the
 * GemmGrads and MatMulGrads whose dB is a parameter's gradient leave it
 * to one GEMM over the step's rows.  Mark before the budgets are shared
 * and the backward's session is made (after hp_pipe_mark_direct); keep
 * after each micro-batch's backward; run after the last, before the
 * update, scaled by the update's 1 / (M D) (hp_pipe_grad_scale).  hp_pipe_defer_bytes: the rows they keep. */
int hp_pipe_mark_defer(struct hp_trainer *t, struct hp_graph *gb);
uint64_t hp_pipe_defer_bytes(const struct hp_pipe *p);
int hp_pipe_defer_keep(struct hp_trainer *t, int m);
void hp_pipe_defer_run(struct hp_trainer *t, float scale);
void hp_pipe_defer_free(struct hp_pipe *p);

/* Weights packed once per step (pipe_pack.c): mark the nodes that
 * multiply by a parameter after hp_pipe_mark_defer, before the budgets
 * are shared and the sessions made; bump after each update.
 * hp_pipe_pack_bytes: their copies. */
int hp_pipe_mark_pack(struct hp_trainer *t, struct hp_graph *gb);
uint64_t hp_pipe_pack_bytes(const struct hp_pipe *p);
void hp_pipe_pack_bump(struct hp_trainer *t);

/* --shard and --sync-bn among the stage's D replicas (pipe_shard.c):
 * after the stage's graphs are built (gb the backward's), before the
 * budgets are shared and the sessions made. */
int hp_pipe_shard(struct hp_trainer *t, struct hp_graph *gb);
/* Checkpoints: bytes [at, at + len) of the whole of sliced float32 state
 * v (n elements; session s) gathered from the replicas into buf on each;
 * collective over the group. */
int hp_pipe_gather_slice(struct hp_session *s, int v, uint64_t n, uint64_t at, size_t len, void *buf);

/* The stage's parameters between the optimizer and the other graphs. */
int hp_pipe_sync_params(struct hp_pipe *p, struct hp_session *sb);

#endif
