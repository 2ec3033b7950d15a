/* Internal to kernels/: helpers shared by the shape, pooling and resize
 * families (attribute and constant-input reading, axis normalization, and a
 * table-driven strided copy used by Slice, Expand, Tile, Pad, Transpose). */
#ifndef HPDLF_KERNELS_SHAPE_UTIL_H
#define HPDLF_KERNELS_SHAPE_UTIL_H

#include <stdint.h>

#include "hpdlf/error.h"
#include "hpdlf/graph.h"
#include "hpdlf/kernels.h"

/* Ops of the shape family defined outside shape_ops.c (which holds the table). */
extern const struct hp_op hpks_op_cast;            /* shape_cast.c */
extern const struct hp_op hpks_op_dropout;         /* shape_dropout.c */
extern const struct hp_op hpks_op_transpose;       /* shape_index.c */
/* Transpose's plan for node n's input 0 under perm (output axis i is
 * input axis perm[i], as in ONNX), kept in n->priv, and its run; also
 * TransposeGrad's, under the inverse of the forward's perm (shape_grad.c). */
int hpks_transpose_plan(struct hp_graph *g, struct hp_node *n, const int *perm);
int hpks_transpose_run(const struct hp_node *n, const struct hp_kargs *a);
extern const struct hp_op hpks_op_concat;
extern const struct hp_op hpks_op_split;
extern const struct hp_op hpks_op_slice;
extern const struct hp_op hpks_op_gather;
extern const struct hp_op hpks_op_gather_elements;
extern const struct hp_op hpks_op_expand;          /* shape_pad.c */
extern const struct hp_op hpks_op_tile;
extern const struct hp_op hpks_op_pad;

/* Input value `i` of n, NULL when omitted or absent. */
const struct hp_value *hpks_in(const struct hp_graph *g, const struct hp_node *n, int i);
/* Set output `o`'s dtype and shape (no-op for an omitted output). */
void hpks_set_out(struct hp_graph *g, const struct hp_node *n, int o, enum hp_dtype dt,
		  const struct hp_shape *s);
/* Mark output `o` as folded: take ownership of malloc'd `data`. */
void hpks_set_out_data(struct hp_graph *g, const struct hp_node *n, int o, void *data);

/* Read integer input `i` (int32 or int64, any shape) as int64.  It must be a
 * compile-time constant: otherwise HP_ENOTCONST naming `what`.  At most
 * `max` elements; *count receives the element count. */
int hpks_const_ints(const struct hp_graph *g, const struct hp_node *n, int i, const char *what,
		    int64_t *v, int max, int *count);
/* Same for a float input (float32/float64/float16 accepted as numbers). */
int hpks_const_floats(const struct hp_graph *g, const struct hp_node *n, int i, const char *what,
		      double *v, int max, int *count);
/* Integer list given either by input `i` (when present) or attribute `attr`
 * (when present); returns 1 if found, 0 if neither, <0 on error. */
int hpks_ints_input_or_attr(const struct hp_graph *g, const struct hp_node *n, int i, const char *attr,
			    int64_t *v, int max, int *count);
/* Normalize axis into [0, rank) (negative counts from the end). */
int hpks_axis(const struct hp_graph *g, const struct hp_node *n, int64_t axis, int rank, int *out);

/* Element `idx` of a tensor of any numeric dtype, as double / int64. */
double hpks_get_f(const void *data, enum hp_dtype dt, int64_t idx);
int64_t hpks_get_i(const void *data, enum hp_dtype dt, int64_t idx);
/* Store `v` as element `idx` of type dt (integers truncate toward zero). */
void hpks_put_f(void *data, enum hp_dtype dt, int64_t idx, double v);

/* Half precision conversions (round to nearest even). */
float hpks_f16_to_f32(uint16_t h);
uint16_t hpks_f32_to_f16(float f);
float hpks_bf16_to_f32(uint16_t h);
uint16_t hpks_f32_to_bf16(float f);

/* Table-driven copy: output element at multi-index (i_0..i_{r-1}) is source
 * element sum_d off[d][i_d], or `fill` when any off[d][i_d] < 0. */
struct hpks_copy {
	int rank;                       /* >= 1 */
	int64_t dims[HP_MAX_RANK];
	int64_t *off[HP_MAX_RANK];
	size_t esize;
	int inner_contig;               /* off[rank-1][i] == off[rank-1][0] + i, no fill */
	int64_t inner_lo, inner_hi;     /* else if >= 0: fill outside [lo, hi), contiguous inside */
	unsigned char fill[16];
};

/* Allocate a block holding `extra` bytes followed by offset tables for dims
 * (set c->off[d]); returns the block (free() it) or NULL.  Tables hold one
 * entry per index of every dimension: more than HPKS_TABLE_MAX in all (a
 * dimension of 2^28, 2 GiB of offsets) is refused (NULL, errno E2BIG), as
 * filling them would take longer than any run could; hpks_copy_error turns
 * a NULL into the error naming the node. */
#define HPKS_TABLE_MAX ((size_t)1 << 28)
void *hpks_copy_alloc(struct hpks_copy *c, int rank, const int64_t *dims, size_t esize, size_t extra);
int hpks_copy_error(const struct hp_graph *g, const struct hp_node *n);
void hpks_copy_finish(struct hpks_copy *c); /* compute inner_contig */
void hpks_copy_run(const struct hpks_copy *c, const void *src, void *dst, struct hp_pool *pool);

/* Row-major strides (in elements) of a shape. */
void hpks_strides(const struct hp_shape *s, int64_t *st);

/* Byte copy helper for alias ops whose output may or may not share memory. */
void hpks_copy_bytes(void *dst, const void *src, size_t n);

/* Pad's modes (shape_pad.c); HPKS_PAD_TILE only for PadGrad (Tile's backward). */
enum { HPKS_PAD_CONSTANT, HPKS_PAD_REFLECT, HPKS_PAD_EDGE, HPKS_PAD_WRAP, HPKS_PAD_TILE };
/* Mode named m (constant, reflect, edge, wrap), or -1. */
int hpks_pad_mode(const char *m);
/* Input index along a dim of size dim that Pad copies output index j (input
 * coordinates, before the begin pad is added) from; -1 for the constant fill. */
int64_t hpks_pad_src(int mode, int64_t j, int64_t dim);

#endif
