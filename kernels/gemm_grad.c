/* Backward of MatMul (numpy semantics: 1-D operands, broadcast batch dims)
 * and Gemm, over OpenBLAS sgemm (domain ai.hpdlf). */
#include <cblas.h>
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "hpdlf/error.h"
#include "kernels/gemm_grad.h"
#include "kernels/train_util.h"

/* ---- MatMulGrad(dY, A, B) -> dA?, dB? ---------------------------------- */

struct mm_priv {
	int64_t m, k, n;
	struct hp_shape ab, bb, yb; /* batch shapes */
};

static void batch_of(const struct hp_shape *s, int vec_dims, struct hp_shape *b)
{
	b->rank = s->rank > vec_dims ? s->rank - 2 : 0;
	for (int i = 0; i < b->rank; i++)
		b->dims[i] = s->dims[i];
}

static int mm_prepare(struct hp_graph *g, struct hp_node *n)
{
	const struct hp_value *dy, *a, *b;
	struct mm_priv p;
	int rc;

	for (int i = 0; i < 3; i++)
		if ((rc = tk_need_f32(g, n, i, 0)) < 0)
			return rc;
	dy = tk_in(g, n, 0);
	a = tk_in(g, n, 1);
	b = tk_in(g, n, 2);
	if (a->shape.rank < 1 || b->shape.rank < 1)
		return hp_node_error(g, n, HP_ESHAPE, "MatMul operands must have rank >= 1");
	p.m = a->shape.rank == 1 ? 1 : a->shape.dims[a->shape.rank - 2];
	p.k = a->shape.dims[a->shape.rank - 1];
	p.n = b->shape.rank == 1 ? 1 : b->shape.dims[b->shape.rank - 1];
	if ((b->shape.rank == 1 ? b->shape.dims[0] : b->shape.dims[b->shape.rank - 2]) != p.k)
		return hp_node_error(g, n, HP_ESHAPE, "inner dimensions differ");
	batch_of(&a->shape, 1, &p.ab);
	batch_of(&b->shape, 1, &p.bb);
	if ((rc = tk_broadcast(g, n, &p.ab, &p.bb, &p.yb)) < 0)
		return rc;
	if (hp_shape_numel(&dy->shape) != hp_shape_numel(&p.yb) * p.m * p.n)
		return hp_node_error(g, n, HP_ESHAPE, "dY does not have MatMul's output size");
	if (!(n->priv = malloc(sizeof p)))
		return hp_node_error(g, n, -ENOMEM, "out of memory");
	memcpy(n->priv, &p, sizeof p);
	tk_set_out(g, n, 0, HP_F32, &a->shape);
	tk_set_out(g, n, 1, HP_F32, &b->shape);
	return 0;
}

static int mm_run(const struct hp_node *n, const struct hp_kargs *a)
{
	const struct mm_priv *p = n->priv;
	int64_t sa[HP_MAX_RANK], sb[HP_MAX_RANK], nb = hp_shape_numel(&p->yb);
	int64_t m = p->m, k = p->k, nn = p->n;
	const float *dy = a->in[0].data, *x = a->in[1].data, *w = a->in[2].data;
	float *dx = a->nout > 0 ? a->out[0].data : NULL, *dw = a->nout > 1 ? a->out[1].data : NULL;

	tk_bcast_strides(&p->yb, &p->ab, sa);
	tk_bcast_strides(&p->yb, &p->bb, sb);
	/* A linear layer ([batch.., m, k] x [k, n]): the batches are rows of one
	 * product, so dA and dB are one sgemm each over nb * m rows instead of
	 * nb thin ones (dB summed by sgemm rather than by beta = 1 per batch). */
	if (p->bb.rank == 0 && hp_shape_equal(&p->ab, &p->yb) && nb * m <= INT32_MAX)
		m *= nb, nb = 1;
	/* An operand with a batch of its own per product (attention's) or one
	 * product in all: each gradient element is written by one sgemm, which
	 * overwrites it (beta 0: the same bits as adding into zeros) instead of
	 * a memset first.  Broadcast operands sum over the products (beta 1). */
	int some = m > 0 && k > 0 && nn > 0; /* else sgemm may leave C as it is */
	float bx = some && (nb == 1 || hp_shape_equal(&p->ab, &p->yb)) ? 0.0f : 1.0f;
	float bw = some && (nb == 1 || hp_shape_equal(&p->bb, &p->yb)) ? 0.0f : 1.0f;
	if (dx && bx != 0.0f)
		memset(dx, 0, hp_tensor_bytes(&a->out[0]));
	if (dw && bw != 0.0f)
		memset(dw, 0, hp_tensor_bytes(&a->out[1]));
	for (int64_t i = 0; i < nb; i++) {
		int64_t ao = tk_offset(&p->yb, sa, i) * m * k, bo = tk_offset(&p->yb, sb, i) * k * nn;
		const float *dyi = dy + i * m * nn;
		if (dx) /* dA += dY B^T */
			cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)m, (int)k, (int)nn, 1.0f, dyi,
				    (int)nn, w + bo, (int)nn, bx, dx + ao, (int)k);
		if (dw) /* dB += A^T dY */
			cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)k, (int)nn, (int)m, 1.0f, x + ao,
				    (int)k, dyi, (int)nn, bw, dw + bo, (int)nn);
	}
	return 0;
}

static double mm_flops(const struct hp_graph *g, const struct hp_node *n)
{
	const struct mm_priv *p = n->priv;
	int outs = (n->noutputs > 0 && n->outputs[0] >= 0) + (n->noutputs > 1 && n->outputs[1] >= 0);

	(void)g;
	return p ? 2.0 * outs * (double)hp_shape_numel(&p->yb) * (double)(p->m * p->k * p->n) : 0;
}

const struct hp_op tk_op_matmul_grad = {
	.domain = TK_DOMAIN, .name = "MatMulGrad", .min_inputs = 3, .max_inputs = 3,
	.min_outputs = 1, .max_outputs = 2, .prepare = mm_prepare, .run = mm_run, .flops = mm_flops,
};

/* ---- GemmGrad(dY, A, B) -> dA?, dB?  (attrs alpha, transA, transB) -----
 * Y = alpha op(A) op(B) (+ beta C, whose gradient is a BinaryGrad).
 * accumulate = 1 (a pipeline stage's backward, exec/pipe_build.c): dB is
 * added to what its buffer holds, the sum over micro-batches that the
 * caller keeps there, instead of overwriting it.
 * defer_dw = 1 (the same, exec/pipe_defer.c): dB is not computed; the
 * caller keeps op(A) and dY of every micro-batch and computes the step's
 * dB in one tk_gemm_grad_dw over all their rows. */

static int gemm_prepare(struct hp_graph *g, struct hp_node *n)
{
	const struct hp_value *dy, *a, *b;
	int ta = (int)hp_attr_int(n, "transA", 0), tb = (int)hp_attr_int(n, "transB", 0), rc;
	int64_t m, k, nn;

	for (int i = 0; i < 3; i++)
		if ((rc = tk_need_f32(g, n, i, 0)) < 0)
			return rc;
	dy = tk_in(g, n, 0);
	a = tk_in(g, n, 1);
	b = tk_in(g, n, 2);
	if (a->shape.rank != 2 || b->shape.rank != 2 || dy->shape.rank != 2)
		return hp_node_error(g, n, HP_ESHAPE, "Gemm operands must be 2-D");
	m = a->shape.dims[ta];
	k = a->shape.dims[1 - ta];
	nn = b->shape.dims[1 - tb];
	if (b->shape.dims[tb] != k || dy->shape.dims[0] != m || dy->shape.dims[1] != nn)
		return hp_node_error(g, n, HP_ESHAPE, "operand shapes do not match dY");
	tk_set_out(g, n, 0, HP_F32, &a->shape);
	tk_set_out(g, n, 1, HP_F32, &b->shape);
	return 0;
}

static int gemm_run(const struct hp_node *n, const struct hp_kargs *a)
{
	int ta = (int)hp_attr_int(n, "transA", 0), tb = (int)hp_attr_int(n, "transB", 0);
	float alpha = hp_attr_float(n, "alpha", 1);
	const struct hp_shape *as = &a->in[1].shape, *bs = &a->in[2].shape;
	int m = (int)as->dims[ta], k = (int)as->dims[1 - ta], nn = (int)bs->dims[1 - tb];
	int lda = (int)as->dims[1], ldb = (int)bs->dims[1];
	const float *dy = a->in[0].data, *x = a->in[1].data, *w = a->in[2].data;
	float *dx = a->nout > 0 ? a->out[0].data : NULL, *dw = a->nout > 1 ? a->out[1].data : NULL;
	float bw = hp_attr_int(n, "accumulate", 0) ? 1.0f : 0.0f;

	if (hp_attr_int(n, "defer_dw", 0))
		dw = NULL;

	if (dx && !ta) /* dA = alpha dY op(B)^T */
		cblas_sgemm(CblasRowMajor, CblasNoTrans, tb ? CblasNoTrans : CblasTrans, m, k, nn, alpha, dy, nn,
			    w, ldb, 0.0f, dx, k);
	else if (dx) /* dA = alpha op(B) dY^T */
		cblas_sgemm(CblasRowMajor, tb ? CblasTrans : CblasNoTrans, CblasTrans, k, m, nn, alpha, w, ldb,
			    dy, nn, 0.0f, dx, m);
	if (dw && !tb) /* dB = alpha op(A)^T dY */
		cblas_sgemm(CblasRowMajor, ta ? CblasNoTrans : CblasTrans, CblasNoTrans, k, nn, m, alpha, x, lda,
			    dy, nn, bw, dw, nn);
	else if (dw) /* dB = alpha dY^T op(A) */
		cblas_sgemm(CblasRowMajor, CblasTrans, ta ? CblasTrans : CblasNoTrans, nn, k, m, alpha, dy, nn,
			    x, lda, bw, dw, k);
	return 0;
}

static double gemm_flops(const struct hp_graph *g, const struct hp_node *n)
{
	const struct hp_shape *dy = &g->values[n->inputs[0]].shape, *a = &g->values[n->inputs[1]].shape;

	return 2.0 * n->noutputs * (double)(dy->dims[0] * dy->dims[1]) *
	       (double)(a->dims[0] * a->dims[1] / (dy->dims[0] ? dy->dims[0] : 1));
}

/* Many micro-batches' rows make one GEMM of k x n outputs: at 16 rows a
 * 1024 x 1024 weight gradient per micro-batch is bound by reading and
 * writing dB itself, at 128 rows by the multiply. */
void tk_gemm_grad_dw(const float *x, const float *dy, float *dw, int64_t rows, int64_t k, int64_t n, int tb,
		     float alpha)
{
	if (!tb) /* dB = alpha A^T dY */
		cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)k, (int)n, (int)rows, alpha, x, (int)k, dy,
			    (int)n, 0.0f, dw, (int)n);
	else /* dB = alpha dY^T A */
		cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)n, (int)k, (int)rows, alpha, dy, (int)n, x,
			    (int)k, 0.0f, dw, (int)k);
}

const struct hp_op tk_op_gemm_grad = {
	.domain = TK_DOMAIN, .name = "GemmGrad", .min_inputs = 3, .max_inputs = 3,
	.min_outputs = 1, .max_outputs = 2, .prepare = gemm_prepare, .run = gemm_run, .flops = gemm_flops,
};
