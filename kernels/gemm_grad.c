/* Backward of MatMul (numpy semantics: 1-D operands, broadcast batch dims)
 * and Gemm, over OpenBLAS sgemm (domain ai.hpdlf). */
#include <cblas.h>
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "hpdlf/error.h"
#include "kernels/blas.h"
#include "kernels/gemm_fma.h"
#include "kernels/gemm_grad.h"
#include "kernels/gemm_tile.h"
#include "kernels/gemm_panels.h"
#include "kernels/train_util.h"

/* ---- MatMulGrad(dY, A, B) -> dA?, dB? ----------------------------------
 * defer_dw = 1 (a pipeline stage's backward, exec/pipe_defer.c): dB is
 * not computed; the caller sums it over the step's rows itself. */

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

/* A weight (B 2-D) and all rows of A as one product (M x K by K x N): dA's
 * and dB's tiles are the forward product's ([mb, nb, kb], the node's
 * attribute or its dims'), each one sgemm over the whole reduction.  A
 * block of a weight cut along K (split_weight.c: its rows, A's columns)
 * then computes the same sgemms as the whole weight's gradients for its
 * rows and columns, bit for bit. */
static int mm_tiled(const struct hp_node *n, const struct hp_kargs *a, int64_t m, int64_t k, int64_t nn, float *dx,
		    float *dw)
{
	const float *dy = a->in[0].data, *x = a->in[1].data, *w = a->in[2].data;
	struct hp_gemm_tiles t;

	if (hp_gemm_node_tiles(n, m, nn, k, &t) < 0)
		return HP_EMODEL;
	if (dx) /* dA = dY B^T */
		hp_gemm_tiled(&(struct hp_gemm_call){ .ta = 0, .tb = 1, .m = m, .n = k, .k = nn, .lda = nn, .ldb = nn,
						      .ldy = k, .alpha = 1.0f, .a = dy, .b = w, .y = dx,
						      .t = { .mb = t.mb, .nb = t.kb, .kb = nn > 0 ? nn : 1 } }, a->pool);
	if (dw) /* dB = A^T dY */
		hp_gemm_tiled(&(struct hp_gemm_call){ .ta = 1, .tb = 0, .m = k, .n = nn, .k = m, .lda = k, .ldb = nn,
						      .ldy = nn, .alpha = 1.0f, .a = x, .b = dy, .y = dw,
						      .t = { .mb = t.kb, .nb = nn > 0 ? nn : 1, .kb = m > 0 ? m : 1 } }, a->pool);
	return 0;
}

/* The own FMA product (gemm_fma.h) where the CPU has it, as the forward
 * MatMul: each gradient element is one chain of FMAs over its whole
 * reduction in order (dA over N, dB over the rows), so a weight cut along
 * K (MatMulAcc blocks) gets the whole's elements bit for bit, whatever the
 * pool.  dY, A and B are read in place; OpenBLAS's tiles repacked dY for
 * every tile (MatMulGrad was half of a GPT-2-style training step).
 * nprob products, p-th at aoff/boff (NULL: one product), each writing its
 * own dA and dB. */
static void mm_fma(const struct hp_kargs *a, int64_t nprob, const int64_t *aoff, const int64_t *boff,
		   const int64_t *yoff, int64_t m, int64_t k, int64_t nn, float *dx, float *dw)
{
	const float *dy = a->in[0].data, *x = a->in[1].data, *w = a->in[2].data;

	if (dx) /* dA (m x k) = dY (m x nn) B^T, B^T(j, q) = B[q][j] */
		hp_fma_gemm(&(struct hp_fma_prod){ .m = m, .n = k, .k = nn, .nprob = nprob, .a = dy, .ra = nn, .rk = 1,
						   .aoff = yoff, .b = w, .sk = 1, .sj = nn, .boff = boff, .y = dx },
			    a->pool);
	if (dw) /* dB (k x nn) = A^T dY, A^T(q, r) = A[r][q] */
		hp_fma_gemm(&(struct hp_fma_prod){ .m = k, .n = nn, .k = m, .nprob = nprob, .a = x, .ra = 1, .rk = k,
						   .aoff = aoff, .b = dy, .sk = nn, .sj = 1, .boff = yoff, .y = dw },
			    a->pool);
}

/* Below this the pool's wake-up costs more than the second thread gains. */
#define MM_BATCH_PAR_MIN_FLOPS 1e6

struct mm_batch {
	const struct mm_priv *p;
	const int64_t *sa, *sb;
	int64_t m, k, nn;
	float bx, bw;
	const float *dy, *x, *w;
	float *dx, *dw;
};

/* Products [b, e) of a batched MatMul's gradients. */
static void mm_batch_range(void *arg, int64_t b, int64_t e, int tid)
{
	const struct mm_batch *j = arg;
	int64_t m = j->m, k = j->k, nn = j->nn;

	(void)tid;
	for (int64_t i = b; i < e; i++) {
		int64_t ao = tk_offset(&j->p->yb, j->sa, i) * m * k, bo = tk_offset(&j->p->yb, j->sb, i) * k * nn;
		const float *dyi = j->dy + i * m * nn;
		if (j->dx) /* dA += dY B^T */
			hp_sgemm(CblasNoTrans, CblasTrans, (int)m, (int)k, (int)nn, 1.0f, dyi,
				    (int)nn, j->w + bo, (int)nn, j->bx, j->dx + ao, (int)k);
		if (j->dw) /* dB += A^T dY */
			hp_sgemm(CblasTrans, CblasNoTrans, (int)k, (int)nn, (int)m, 1.0f, j->x + ao,
				    (int)k, dyi, (int)nn, j->bw, j->dw + bo, (int)nn);
	}
}

/* Products that each own their dA and dB slices (attention's) as one FMA
 * call per gradient: 0, or -ENOMEM (then one sgemm per product). */
static int mm_fma_batch(const struct hp_kargs *a, const struct mm_priv *p, const int64_t *sa, const int64_t *sb,
			int64_t nb, float *dx, float *dw)
{
	int64_t *off = malloc((size_t)(3 * nb) * sizeof *off);

	if (!off)
		return -ENOMEM;
	for (int64_t i = 0; i < nb; i++) {
		off[i] = tk_offset(&p->yb, sa, i) * p->m * p->k;
		off[nb + i] = tk_offset(&p->yb, sb, i) * p->k * p->n;
		off[2 * nb + i] = i * p->m * p->n;
	}
	mm_fma(a, nb, off, off + nb, off + 2 * nb, p->m, p->k, p->n, dx, dw);
	free(off);
	return 0;
}

static int mm_run(const struct hp_node *n, const struct hp_kargs *a)
{
	const struct mm_priv *p = n->priv;
	int64_t sa[HP_MAX_RANK], sb[HP_MAX_RANK], nb = hp_shape_numel(&p->yb);
	int64_t m = p->m, k = p->k, nn = p->n;
	const float *dy = a->in[0].data, *x = a->in[1].data, *w = a->in[2].data;
	float *dx = a->nout > 0 ? a->out[0].data : NULL, *dw = a->nout > 1 ? a->out[1].data : NULL;

	if (hp_attr_int(n, "defer_dw", 0))
		dw = NULL;
	tk_bcast_strides(&p->yb, &p->ab, sa);
	tk_bcast_strides(&p->yb, &p->bb, sb);
	/* A linear layer ([batch.., m, k] x [k, n]): the batches are rows of one
	 * product, so dA and dB are one sgemm each over nb * m rows instead of
	 * nb thin ones (dB summed by sgemm rather than by beta = 1 per batch). */
	if (p->bb.rank == 0 && hp_shape_equal(&p->ab, &p->yb) && nb * m <= INT32_MAX)
		m *= nb, nb = 1;
	if (nb == 1 && p->bb.rank == 0 && hp_fma_gemm_ok()) {
		mm_fma(a, 1, NULL, NULL, NULL, m, k, nn, dx, dw);
		return 0;
	}
	if (nb == 1 && p->bb.rank == 0)
		return mm_tiled(n, a, m, k, nn, dx, dw);
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
	if (bx == 0.0f && bw == 0.0f && nb > 1 && hp_fma_gemm_ok() && mm_fma_batch(a, p, sa, sb, nb, dx, dw) == 0)
		return 0;
	struct mm_batch j = { .p = p, .sa = sa, .sb = sb, .m = m, .k = k, .nn = nn, .bx = bx, .bw = bw,
			      .dy = dy, .x = x, .w = w, .dx = dx, .dw = dw };
	/* products that each own their outputs (attention's) run on the pool,
	 * one single-threaded sgemm each: the same calls whatever the split */
	struct hp_pool *pool = bx == 0.0f && bw == 0.0f && nb > 1 &&
					       2.0 * (double)(nb * m * k) * (double)nn >= MM_BATCH_PAR_MIN_FLOPS
				       ? a->pool
				       : NULL;
	hp_blas_serial_enter();
	hp_parallel_for(pool, nb, 1, mm_batch_range, &j);
	hp_blas_serial_leave();
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
	if (n->ninputs > 3 && n->inputs[3] >= 0 &&
	    (tk_in(g, n, 3)->dtype != HP_F32 || !hp_shape_equal(&tk_in(g, n, 3)->shape, &a->shape)))
		return hp_node_error(g, n, HP_ESHAPE, "the running sum of dA (input 3) must be float and A's shape");
	struct hp_gemm_tiles t;
	if (hp_gemm_node_tiles(n, m, nn, k, &t) < 0)
		return hp_node_error(g, n, HP_EMODEL, "attribute %s must be 3 positive ints", HP_GEMM_TILE_ATTR);
	tk_set_out(g, n, 0, HP_F32, &a->shape);
	tk_set_out(g, n, 1, HP_F32, &b->shape);
	/* for pack_b: op(B)^T packed once (gemm_panels.h); the attribute may
	 * come after this prepare */
	if (!(n->priv = calloc(1, sizeof(struct tk_panels))))
		return hp_node_error(g, n, -ENOMEM, "out of memory");
	return 0;
}

static void gemm_release(struct hp_node *n)
{
	if (n->priv)
		tk_panels_free(n->priv);
	free(n->priv);
}

/* pack_b, transA 0, few rows: dA (m x k) = alpha dY op(B)^T, op(B)^T
 * (nn x k) packed once per epoch.  0, or -ENOMEM (then OpenBLAS). */
static int grad_panels(const struct hp_node *n, const struct hp_kargs *a, int m, int k, int nn, int tb, float alpha)
{
	int ldb = (int)a->in[2].shape.dims[1];
	int rc = tk_panels_pack(n->priv, a->in[2].data, tb ? ldb : 1, tb ? 1 : ldb, nn, k,
				hp_attr_int(n, "pack_b", 0));

	return rc < 0 ? rc : tk_panels_mul(n->priv, a->in[0].data, nn, 1, m, alpha, a->out[0].data, k, 0, a->pool);
}

/* dB as FMA chains over the rows (gemm_fma.h), alpha 1: each element's
 * bits depend on no tile, so the blocks of a weight cut along either axis
 * (exec/split_weight.c) compute the whole's elements bit for bit.  With
 * OpenBLAS's tiles a feature cut's blocks rounded differently from the
 * whole when a block was narrower than the whole's tile (the autoenc
 * reference's input layer in 6 blocks of 16 rows differed in the last
 * place after one step). */
static void gemm_dw_fma(const struct hp_kargs *a, int64_t m, int64_t k, int64_t nn, int ta, int tb, int64_t lda,
			float *dw)
{
	const float *dy = a->in[0].data, *x = a->in[1].data;

	if (!tb) /* dB (k x nn) = op(A)^T dY, op(A)^T(q, i) = op(A)(i, q) */
		hp_fma_gemm(&(struct hp_fma_prod){ .m = k, .n = nn, .k = m, .nprob = 1, .a = x, .ra = ta ? lda : 1,
						   .rk = ta ? 1 : lda, .b = dy, .sk = nn, .sj = 1, .y = dw },
			    a->pool);
	else /* dB (nn x k) = dY^T op(A) */
		hp_fma_gemm(&(struct hp_fma_prod){ .m = nn, .n = k, .k = m, .nprob = 1, .a = dy, .ra = 1, .rk = nn,
						   .b = x, .sk = ta ? 1 : lda, .sj = ta ? lda : 1, .y = dw },
			    a->pool);
}

/* dA = dY op(B)^T (transA 0, alpha 1) as FMA chains over N from its last
 * column to its first (negative strides), each from the running sum of
 * the blocks after this one (input 3) or from 0: the blocks of a feature
 * cut, chained by autodiff.c, continue the whole's chains bit for bit. */
static void gemm_dx_fma(const struct hp_kargs *a, int64_t m, int64_t k, int64_t nn, int tb, int64_t ldb,
			const float *acc, float *dx)
{
	const float *dy = a->in[0].data, *w = a->in[2].data;
	int64_t last = nn > 0 ? nn - 1 : 0;

	hp_fma_gemm(&(struct hp_fma_prod){ .m = m, .n = k, .k = nn, .nprob = 1, .a = dy + last, .ra = nn, .rk = -1,
					   .b = tb ? w + last * ldb : w + last, .sk = tb ? -ldb : -1,
					   .sj = tb ? 1 : ldb, .c = acc, .cs0 = k, .cs1 = 1, .beta = 1.0f, .y = dx },
		    a->pool);
}

/* The four products run in the forward product's tiling (gemm_tile.h):
 * a weight cut in blocks at tile bounds gets its gradients bit for bit
 * from the same sgemm calls as the whole weight.  dA sums over N, the
 * axis a feature cut splits: its N tiles run from the last to the first,
 * and a block's node starts from the sum of the blocks after it (input
 * 3, chained by autodiff.c), as the whole node runs them. */
static int gemm_run(const struct hp_node *n, const struct hp_kargs *a)
{
	int ta = (int)hp_attr_int(n, "transA", 0), tb = (int)hp_attr_int(n, "transB", 0);
	float alpha = hp_attr_float(n, "alpha", 1);
	const struct hp_shape *as = &a->in[1].shape, *bs = &a->in[2].shape;
	int64_t m = as->dims[ta], k = as->dims[1 - ta], nn = bs->dims[1 - tb], lda = as->dims[1], ldb = bs->dims[1];
	const float *dy = a->in[0].data, *x = a->in[1].data, *w = a->in[2].data;
	const float *acc = a->nin > 3 ? a->in[3].data : NULL;
	float *dx = a->nout > 0 ? a->out[0].data : NULL, *dw = a->nout > 1 ? a->out[1].data : NULL;
	struct hp_gemm_tiles t;

	if (hp_gemm_node_tiles(n, m, nn, k, &t) < 0)
		return HP_EMODEL;
	if (hp_attr_int(n, "defer_dw", 0))
		dw = NULL;
	if (dx && !ta && alpha == 1.0f && hp_attr_int(n, "pack_b", 0) <= 0 && hp_fma_gemm_ok()) {
		gemm_dx_fma(a, m, k, nn, tb, ldb, acc, dx);
		dx = NULL;
	}
	if (dx && acc)
		memcpy(dx, acc, (size_t)(m * k) * sizeof *dx);
	else if (dx && !ta && hp_attr_int(n, "pack_b", 0) > 0 && m <= TK_PANEL_MAX_ROWS && tk_panels_ok() &&
		 grad_panels(n, a, (int)m, (int)k, (int)nn, tb, alpha) == 0)
		dx = NULL; /* dA done, by the packed op(B)^T (a pipeline stage's, exec/pipe_pack.c) */
	if (dx && !ta) /* dA = alpha dY op(B)^T */
		hp_gemm_tiled(&(struct hp_gemm_call){ .ta = 0, .tb = !tb, .accumulate = acc != NULL, .reverse_k = 1,
						      .m = m, .n = k, .k = nn, .lda = nn, .ldb = ldb, .ldy = k,
						      .alpha = alpha, .a = dy, .b = w, .y = dx,
						      .t = { .mb = t.mb, .nb = t.kb, .kb = t.nb } }, a->pool);
	else if (dx) /* dA = alpha op(B) dY^T */
		hp_gemm_tiled(&(struct hp_gemm_call){ .ta = tb, .tb = 1, .accumulate = acc != NULL, .reverse_k = 1,
						      .m = k, .n = m, .k = nn, .lda = ldb, .ldb = nn, .ldy = m,
						      .alpha = alpha, .a = w, .b = dy, .y = dx,
						      .t = { .mb = t.kb, .nb = t.mb, .kb = t.nb } }, a->pool);
	if (dw && alpha == 1.0f && !hp_attr_int(n, "accumulate", 0) && hp_fma_gemm_ok()) {
		gemm_dw_fma(a, m, k, nn, ta, tb, lda, dw);
		dw = NULL;
	}
	if (dw && !tb) /* dB = alpha op(A)^T dY */
		hp_gemm_tiled(&(struct hp_gemm_call){ .ta = !ta, .tb = 0, .accumulate = hp_attr_int(n, "accumulate", 0) != 0,
						      .m = k, .n = nn, .k = m, .lda = lda, .ldb = nn, .ldy = nn,
						      .alpha = alpha, .a = x, .b = dy, .y = dw,
						      .t = { .mb = t.kb, .nb = t.nb, .kb = t.mb } }, a->pool);
	else if (dw) /* dB = alpha dY^T op(A) */
		hp_gemm_tiled(&(struct hp_gemm_call){ .ta = 1, .tb = ta, .accumulate = hp_attr_int(n, "accumulate", 0) != 0,
						      .m = nn, .n = k, .k = m, .lda = nn, .ldb = lda, .ldy = k,
						      .alpha = alpha, .a = dy, .b = x, .y = dw,
						      .t = { .mb = t.nb, .nb = t.kb, .kb = t.mb } }, a->pool);
	return 0;
}

/* Each product it computes: an output autodiff left out (dA of a layer
 * reading the data, -1) costs nothing; the pipeline planner (exec/pipe_cost.c)
 * would otherwise see a first stage as slow as the others. */
static double gemm_flops(const struct hp_graph *g, const struct hp_node *n)
{
	const struct hp_shape *dy = &g->values[n->inputs[0]].shape, *a = &g->values[n->inputs[1]].shape;
	int outs = 0;

	for (int o = 0; o < n->noutputs; o++)
		outs += n->outputs[o] >= 0;
	return 2.0 * outs * (double)(dy->dims[0] * dy->dims[1]) *
	       (double)(a->dims[0] * a->dims[1] / (dy->dims[0] ? dy->dims[0] : 1));
}

/* Many micro-batches' rows make one GEMM of k x n outputs: at 16 rows a
 * 1024 x 1024 weight gradient per micro-batch is bound by reading and
 * writing dB itself, at 128 rows by the multiply. */
void tk_gemm_grad_dw(const float *x, const float *dy, float *dw, int64_t rows, int64_t k, int64_t n, int ta, int tb,
		     float alpha)
{
	int ldx = ta ? (int)rows : (int)k;

	if (!tb) /* dB = alpha op(A)^T dY */
		hp_sgemm(ta ? CblasNoTrans : CblasTrans, CblasNoTrans, (int)k, (int)n, (int)rows,
			    alpha, x, ldx, dy, (int)n, 0.0f, dw, (int)n);
	else /* dB = alpha dY^T op(A) */
		hp_sgemm(CblasTrans, ta ? CblasTrans : CblasNoTrans, (int)n, (int)k, (int)rows,
			    alpha, dy, (int)n, x, ldx, 0.0f, dw, (int)k);
}

const struct hp_op tk_op_gemm_grad = {
	.domain = TK_DOMAIN, .name = "GemmGrad", .min_inputs = 3, .max_inputs = 4,
	.min_outputs = 1, .max_outputs = 2, .prepare = gemm_prepare, .run = gemm_run, .release = gemm_release,
	.flops = gemm_flops,
};
