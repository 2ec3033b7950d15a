/* Internal to exec/fuse*.c: the pattern passes of the inference graph
 * optimisation and the helpers they share (fuse_util.c).
 *
 * A pass finds one match, rewrites it, and the driver (fuse.c) relinks the
 * graph (hp_graph_finalize) and asks again, so that indices and consumer
 * counts are always fresh.  A match never swallows a value that something
 * outside it reads, nor a graph output: only the last node's output
 * survives, written by the fused node. */
#ifndef HPDLF_EXEC_FUSE_INTERNAL_H
#define HPDLF_EXEC_FUSE_INTERNAL_H

#include <stdint.h>

#include "exec/fuse.h"

/* A pass: rewrites one match and returns 1, returns 0 when none is left,
 * or a negative error. */
typedef int (*hp_fuse_pass)(struct hp_graph *g, struct hp_fuse_report *r);

int hp_fuse_gelu(struct hp_graph *g, struct hp_fuse_report *r);      /* fuse_gelu.c */
int hp_fuse_layernorm(struct hp_graph *g, struct hp_fuse_report *r); /* fuse_ln.c */
int hp_fuse_attention(struct hp_graph *g, struct hp_fuse_report *r); /* fuse_attn.c */
int hp_fuse_epilogue(struct hp_graph *g, struct hp_fuse_report *r);  /* fuse_epi.c */
/* hp_fuse_epilogue on a graph the split pass rewrote: only a match whose
 * fused step needs at most what a step of the graph already does, as the
 * planner counts (exec/plan.c step_need, values rounded to align): io its
 * inputs and output, step those and its workspace. */
struct hp_fuse_cap {
	uint64_t align, io, step;
};
int hp_fuse_epilogue_within(struct hp_graph *g, struct hp_fuse_report *r, const struct hp_fuse_cap *cap);
int hp_fuse_transpose_gemm(struct hp_graph *g, struct hp_fuse_report *r); /* fuse_transpose.c */
int hp_fuse_invres(struct hp_graph *g, struct hp_fuse_report *r);   /* fuse_ir.c, after the epilogues */
/* BatchNormalization (+ Relu) before a 1x1 Conv into its prologue. */
int hp_fuse_prologue(struct hp_graph *g, struct hp_fuse_report *r); /* fuse_pro.c, after the epilogues */
/* Training's MatMul(X, Transpose(W)) into Gemm(X rows, W, transB). */
int hp_fuse_train_linear(struct hp_graph *g, struct hp_fuse_report *r); /* fuse_train_linear.c */
int hp_fuse_train_taps(struct hp_graph *g, struct hp_fuse_report *r);   /* fuse_train_taps.c */
/* A Conv cut to the taps that read its input (fuse_dil.c): per spatial
 * axis the kept taps [t0, t0 + k) of kin, the new pads and dilations
 * (1 where one tap is left). */
struct hp_fz_cut {
	int nd;
	int64_t k[3], t0[3], kin[3], dil[3], pb[3], pe[3];
};
/* 1 when node n, a float Conv of concrete shapes, has taps that read only
 * padding for every output and a cut that keeps the output: fills *c. */
int hp_fz_conv_cut(const struct hp_graph *g, const struct hp_node *n, struct hp_fz_cut *c);
/* Conv node ci becomes a Conv of the cut kernel on weight wv, in its
 * place (its attributes but the geometry), noted under `pattern`. */
int hp_fz_conv_recut(struct hp_graph *g, int ci, int wv, const struct hp_fz_cut *c, struct hp_fuse_report *r,
		     const char *pattern);
/* Every Transpose of a float constant at once (a cap on the bytes folded):
 * 1 when some folded, 0, or a negative error. */
int hp_fuse_const_transpose(struct hp_graph *g, struct hp_fuse_report *r, int spill); /* fuse_const.c */
/* Conv kernels cut to their taps that read input (not only padding) for
 * some output: 1 when some were, 0, or a negative error; spill: under a
 * budget (large sliced weights to the spill file). */
int hp_fuse_dead_taps(struct hp_graph *g, struct hp_fuse_report *r, int spill); /* fuse_dil.c */
int hp_fuse_pack_weights(struct hp_graph *g, struct hp_fuse_report *r); /* fuse_pack.c, in core, last */

/* ---- fuse_util.c ---- */

/* Node n is op of the default domain. */
int hp_fz_is(const struct hp_node *n, const char *op);
/* The node producing value v if it is op (default domain), else -1. */
int hp_fz_producer(const struct hp_graph *g, int v, const char *op);
/* The one node reading v (v no graph output), else -1. */
int hp_fz_only_reader(const struct hp_graph *g, int v);
/* Value v is a constant float scalar (any shape of one element); its value. */
int hp_fz_scalar(const struct hp_graph *g, int v, double *x);
/* Value v is a float constant or initializer held in memory or the file. */
int hp_fz_const(const struct hp_graph *g, int v);
/* Value v is fed by the user (an IR 3 model lists its weights among the
 * inputs, and --input may replace one): not a constant to fold. */
int hp_fz_user_fed(const struct hp_graph *g, int v);
/* A new float initializer of shape s held in memory (data, which it owns
 * from then on, freed on failure), named base + suffix (+ "#i" while the
 * name is taken); its value index. */
/* The value v stands for past Identity nodes (at most 16 hops): exporters
 * (torch's, for MobileNetV2's last BatchNorm) hand a node its statistics
 * through Identity nodes of an initializer. */
int hp_fz_past_identity(const struct hp_graph *g, int v);
/* A new activation named like's name + "." + what (made unique), its
 * dtype and shape left to shape inference; its value index. */
int hp_fz_new_value(struct hp_graph *g, int like, const char *what);
/* v's floats: its data, or a copy read from the model's file into *own
 * (for the caller to free); NULL when out of memory or unreadable. */
const float *hp_fz_load_f32(const struct hp_graph *g, int v, float **own);
/* A new int64 initializer [n] holding v (a Reshape's shape, a Slice's
 * starts), named base + suffix (made unique); its value index. */
int hp_fz_i64_init(struct hp_graph *g, const char *base, const char *suffix, const int64_t *v, int n);
int hp_fz_memory_init(struct hp_graph *g, const char *base, const char *suffix, const struct hp_shape *s, float *data);
/* Under a budget, weights the fusions compute go to a file, not to memory
 * beside the budget: the graph's spill file (an unlinked file in $TMPDIR,
 * or /tmp, open for the graph's life and named /proc/self/fd/N in
 * g->files; hp_graph_free closes it), made at the first call.  Its index
 * in g->files, *fd, and *at, the 4 KiB-aligned offset past its end where
 * the next weight goes; or a negative error. */
#define HP_FZ_SPILL_MIN_BYTES (1u << 20)  /* smaller folded weights stay in memory */
#define HP_FZ_SPILL_BLOCK_BYTES (4u << 20) /* computed and written a block at a time */
int hp_fz_spill(struct hp_graph *g, int *fd, uint64_t *at);
/* hp_fz_memory_init's initializer, its bytes those at `at` of g->files[file]. */
int hp_fz_file_init(struct hp_graph *g, const char *base, const char *suffix, const struct hp_shape *s, int file,
		    uint64_t at);
/* len bytes of file-backed initializer x from byte `at` of its bytes, read
 * from fd (x's file, named path in messages); 0 or an error naming both. */
int hp_fz_read_at(int fd, const char *path, const struct hp_value *x, uint64_t at, void *dst, size_t len);
/* len bytes at offset `at` of the spill file fd; 0 or an error naming what. */
int hp_fz_write_at(int fd, uint64_t at, const void *src, size_t len, const char *what);
/* |x - want| within 1e-6 of want (exporters round their constants). */
int hp_fz_near(double x, double want);
/* The input of binary node n that is not value v (-1 when both or none). */
int hp_fz_other(const struct hp_node *n, int v);
/* Append node (domain ai.hpdlf when hpdlf) and return its index. */
int hp_fz_add_node(struct hp_graph *g, const char *name, const char *op, int hpdlf, int nin, const int *in, int out);
int hp_fz_attr_int(struct hp_graph *g, int node, const char *name, int64_t v);
int hp_fz_attr_float(struct hp_graph *g, int node, const char *name, float v);
int hp_fz_attr_str(struct hp_graph *g, int node, const char *name, const char *v);
/* Node n becomes op of domain ai.hpdlf, its prepared state released. */
int hp_fz_set_op(struct hp_node *n, const char *op);
int hp_fz_attr_ints(struct hp_graph *g, int node, const char *name, const int64_t *v, int n);
/* Remove the nodes listed (indices, any order; -1 entries skipped). */
void hp_fz_remove(struct hp_graph *g, int *nodes, int n);
/* Remove nodes whose outputs nobody reads and are no graph output (the
 * Transposes an absorbed operand leaves behind). */
void hp_fz_remove_dead(struct hp_graph *g);
/* Record one fusion of `pattern` in the report: "pattern 'node'". */
void hp_fz_note(struct hp_fuse_report *r, const char *pattern, const char *line);

#endif
