/* Internal to the training kernels (kernels/train.c and the kernels/..._grad.c files):
 * the ops they define and small shape helpers they share. */
#ifndef HPDLF_KERNELS_TRAIN_UTIL_H
#define HPDLF_KERNELS_TRAIN_UTIL_H

#include <stdint.h>

#include "hpdlf/graph.h"
#include "kernels/ops.h"

#define TK_DOMAIN "ai.hpdlf"

/* train.c: losses, optimizers, gradient sums, step counter */
extern const struct hp_op tk_op_grad_sum, tk_op_step_inc, tk_op_sce, tk_op_sce_grad, tk_op_mse,
	tk_op_mse_grad, tk_op_sgd, tk_op_adam;
/* eltwise_grad.c */
extern const struct hp_op tk_op_unary_grad, tk_op_binary_grad, tk_op_where_grad, tk_op_dropout_train,
	tk_op_dropout_grad;
/* gemm_grad.c */
extern const struct hp_op tk_op_matmul_grad, tk_op_gemm_grad;
/* conv_grad.c */
extern const struct hp_op tk_op_conv_grad_data, tk_op_conv_grad_filter, tk_op_convt_grad_data,
	tk_op_bias_grad;
/* conv_grad_update.c: a Conv's filter gradient and its optimizer update in one */
extern const struct hp_op tk_op_conv_grad_update;
struct hp_rfilt;
/* conv_grad.c: 1 and *q (the plan), *dw (dW's shape) when node n's
 * geometry (dY input 0, X input 1, ConvGradFilter's attributes) takes the
 * packed register tiles, which sum dW in pieces (hp_rfilt_run_pieces);
 * 0 when it takes another path; or a negative error. */
int tk_conv_filter_pieces(struct hp_graph *g, const struct hp_node *n, struct hp_rfilt *q, struct hp_shape *dw);
/* conv_grad_update.c: the workspace of ConvGradFilterUpdate on plan q. */
size_t tk_conv_update_workspace(const struct hp_rfilt *q);
/* pool_grad.c */
extern const struct hp_op tk_op_maxpool_grad, tk_op_avgpool_grad;
/* norm_grad.c */
extern const struct hp_op tk_op_bn_train, tk_op_bn_grad, tk_op_ln_grad, tk_op_softmax_grad,
	tk_op_logsoftmax_grad;
/* shape_grad.c */
extern const struct hp_op tk_op_reshape_grad, tk_op_transpose_grad, tk_op_concat_grad, tk_op_split_grad,
	tk_op_slice_grad, tk_op_gather_grad, tk_op_reduce_grad, tk_op_resize_grad;

/* rnn_grad.c: the backward of RNN, GRU and LSTM */
extern const struct hp_op tk_op_rnn_grad;
/* index_grad.c: GatherElements/TopK, ScatterElements/ScatterND, Pad/Tile */
extern const struct hp_op tk_op_gather_elements_grad, tk_op_scatter_grad, tk_op_pad_grad;

/* comm_op.c: a bucket's reduction over ranks (run by the executors) */
extern const struct hp_op tk_op_allreduce;
/* comm_shard_op.c: the collectives and slices of --shard (run by the executors) */
extern const struct hp_op tk_op_reduce_scatter, tk_op_all_gather, tk_op_shard_slice;

/* train.c: SGDUpdate's or AdamUpdate's loops over pieces of the tensors,
 * for a kernel that applies the update to each piece of the gradient as
 * it is final (conv_grad_update.c): every element gets the operations and
 * the bits of the whole update.  Init from node n (the update's
 * attributes), W as input w_in and its state after it (SGD: the momentum
 * buffer when n has 2 outputs; Adam: m, v, then the step), W' and the
 * state's next versions as outputs 0, 1, ... */
struct tk_update {
	int adam;
	_Alignas(8) unsigned char job[160]; /* train.c's jobs */
};
int tk_update_init(const struct hp_node *n, const struct hp_kargs *a, int adam, int w_in, struct tk_update *u);
/* Elements [at, at + len) of W (and its state), the gradient's at g. */
void tk_update_span(const struct tk_update *u, int64_t at, const float *g, int64_t len);

/* Input value i of n, or NULL when omitted. */
static inline struct hp_value *tk_in(struct hp_graph *g, const struct hp_node *n, int i)
{
	return i < n->ninputs && n->inputs[i] >= 0 ? &g->values[n->inputs[i]] : NULL;
}

/* Set output o's dtype and shape if the output is present. */
void tk_set_out(struct hp_graph *g, const struct hp_node *n, int o, enum hp_dtype dt, const struct hp_shape *s);
/* Fail unless input i is present and float32 (or absent when optional). */
int tk_need_f32(struct hp_graph *g, const struct hp_node *n, int i, int optional);
/* INTS attribute `name` as a shape; `required` fails when absent. */
int tk_attr_shape(struct hp_graph *g, const struct hp_node *n, const char *name, struct hp_shape *s,
		  int required);
/* Numpy broadcast of a and b into out; HP_ESHAPE (with message) if impossible. */
int tk_broadcast(struct hp_graph *g, const struct hp_node *n, const struct hp_shape *a,
		 const struct hp_shape *b, struct hp_shape *out);
/* Strides of `in` aligned right against `out` (0 on broadcast dims). */
void tk_bcast_strides(const struct hp_shape *out, const struct hp_shape *in, int64_t *st);
/* Offset into a tensor of strides st for the element at flat index i of shape s. */
int64_t tk_offset(const struct hp_shape *s, const int64_t *st, int64_t i);
void tk_strides(const struct hp_shape *s, int64_t *st);

/* ---- kernels/sce.c: SoftmaxCrossEntropy's inner loops ---- */
#define TK_SCE_BLOCK 64 /* positions at a time across a [classes, inner] slice */
void tk_sce_lse_cols(const float *x, int64_t classes, int64_t inner, int64_t i0, int np, double *lse);
double tk_sce_lse_row(const float *x, int64_t classes);
void tk_sce_grad_cols(const float *x, float *dx, int64_t classes, int64_t inner, int64_t i0, int np,
		      const double *lse, const int64_t *lab, const int *keep, double scale);
void tk_sce_grad_row(const float *x, float *dx, int64_t classes, double lse, int64_t lab, double scale);

#endif
