/* Gemm and MatMul over OpenBLAS cblas_sgemm.
 *
 * Both run one sgemm per (broadcast) batch on the calling thread with the
 * BLAS threads the executor set: OpenBLAS splits M and N, never K, so the
 * result is bitwise reproducible for a given thread count.  MatMul with an
 * unbatched B folds A's batch dims into M (one large sgemm).
 */
#include <cblas.h>
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "hpdlf/error.h"
#include "kernels/ops.h"

/* ---- Gemm ------------------------------------------------------------- */

struct gemm_p {
	int64_t m, n, k;
	int ta, tb;
	float alpha, beta;
	int64_t cs0, cs1; /* C strides over rows and columns (0: broadcast) */
	int has_c;
};

static int gemm_c_strides(struct hp_graph *g, struct hp_node *n, struct gemm_p *p, const struct hp_shape *c)
{
	int64_t d0 = 1, d1 = 1;
	char s[96];

	if (c->rank > 2)
		goto bad;
	if (c->rank == 2)
		d0 = c->dims[0];
	if (c->rank >= 1)
		d1 = c->dims[c->rank - 1];
	if ((d0 != 1 && d0 != p->m) || (d1 != 1 && d1 != p->n))
		goto bad;
	p->cs1 = d1 == 1 ? 0 : 1;
	p->cs0 = d0 == 1 ? 0 : d1;
	return 0;
bad:
	return hp_node_error(g, n, HP_ESHAPE, "C has shape %s, not broadcastable to [%" PRId64 ", %" PRId64 "]",
			     hp_shape_str(c, s, sizeof s), p->m, p->n);
}

static int gemm_prepare(struct hp_graph *g, struct hp_node *n)
{
	const struct hp_value *a = &g->values[n->inputs[0]], *b = &g->values[n->inputs[1]];
	struct hp_value *y = &g->values[n->outputs[0]];
	struct gemm_p *p;
	char as[96], bs[96];
	int64_t kb;
	int rc;

	if (a->dtype != HP_F32 || b->dtype != HP_F32)
		return hp_node_error(g, n, HP_EUNSUPPORTED, "only float32 is supported");
	if (a->shape.rank != 2 || b->shape.rank != 2)
		return hp_node_error(g, n, HP_ESHAPE, "A %s and B %s must be matrices",
				     hp_shape_str(&a->shape, as, sizeof as), hp_shape_str(&b->shape, bs, sizeof bs));
	if (!(p = calloc(1, sizeof *p)))
		return hp_node_error(g, n, -ENOMEM, "out of memory");
	p->ta = hp_attr_int(n, "transA", 0) != 0;
	p->tb = hp_attr_int(n, "transB", 0) != 0;
	p->alpha = hp_attr_float(n, "alpha", 1.0f);
	p->beta = hp_attr_float(n, "beta", 1.0f);
	p->m = a->shape.dims[p->ta ? 1 : 0];
	p->k = a->shape.dims[p->ta ? 0 : 1];
	kb = b->shape.dims[p->tb ? 1 : 0];
	p->n = b->shape.dims[p->tb ? 0 : 1];
	n->priv = p;
	if (kb != p->k)
		return hp_node_error(g, n, HP_ESHAPE,
				     "inner dims differ: A %s (transA=%d) and B %s (transB=%d) give K %" PRId64
				     " and %" PRId64,
				     hp_shape_str(&a->shape, as, sizeof as), p->ta, hp_shape_str(&b->shape, bs, sizeof bs),
				     p->tb, p->k, kb);
	p->has_c = n->ninputs > 2 && n->inputs[2] >= 0;
	if (p->has_c) {
		const struct hp_value *c = &g->values[n->inputs[2]];
		if (c->dtype != HP_F32)
			return hp_node_error(g, n, HP_EUNSUPPORTED, "C must be float32");
		if ((rc = gemm_c_strides(g, n, p, &c->shape)) < 0)
			return rc;
	}
	y->dtype = HP_F32;
	y->shape.rank = 2;
	y->shape.dims[0] = p->m;
	y->shape.dims[1] = p->n;
	return 0;
}

static int gemm_run(const struct hp_node *n, const struct hp_kargs *a)
{
	const struct gemm_p *p = n->priv;
	const float *c = p->has_c && a->nin > 2 ? a->in[2].data : NULL;
	float *y = a->out[0].data;
	int64_t lda = p->ta ? p->m : p->k, ldb = p->tb ? p->k : p->n;

	if (p->m == 0 || p->n == 0)
		return 0;
	for (int64_t i = 0; i < p->m; i++)
		for (int64_t j = 0; j < p->n; j++)
			y[i * p->n + j] = c ? p->beta * c[i * p->cs0 + j * p->cs1] : 0.0f;
	if (p->k == 0)
		return 0;
	cblas_sgemm(CblasRowMajor, p->ta ? CblasTrans : CblasNoTrans, p->tb ? CblasTrans : CblasNoTrans, (int)p->m,
		    (int)p->n, (int)p->k, p->alpha, a->in[0].data, (int)lda, a->in[1].data, (int)ldb, c ? 1.0f : 0.0f,
		    y, (int)p->n);
	return 0;
}

static double gemm_flops(const struct hp_graph *g, const struct hp_node *n)
{
	const struct gemm_p *p = n->priv;

	(void)g;
	return p ? 2.0 * p->m * p->n * p->k : 0;
}

/* ---- MatMul ----------------------------------------------------------- */

struct matmul_p {
	int64_t m, n, k;
	int nb;                      /* output batch dims */
	int64_t bdims[HP_MAX_RANK];  /* output batch shape */
	int64_t astr[HP_MAX_RANK];   /* element strides of A / B per batch dim (0: broadcast) */
	int64_t bstr[HP_MAX_RANK];
	int64_t batch;
	int fold;                    /* B unbatched, A contiguous: one sgemm of batch*m rows */
};

/* Batch strides of an operand with batch dims d[0..r) aligned right to nb. */
static void batch_strides(const int64_t *d, int r, int nb, int64_t mat, int64_t *str)
{
	int64_t s = mat;

	for (int i = nb - 1; i >= 0; i--) {
		int j = i - (nb - r);
		int64_t dim = j >= 0 ? d[j] : 1;
		str[i] = dim == 1 ? 0 : s;
		s *= dim;
	}
}

static int matmul_shapes(struct hp_graph *g, struct hp_node *n, struct matmul_p *p, const struct hp_shape *as,
			 const struct hp_shape *bs, struct hp_shape *ys)
{
	int ra = as->rank, rb = bs->rank, na, nbb;
	int64_t kb;
	char s1[96], s2[96];

	if (ra < 1 || rb < 1)
		return hp_node_error(g, n, HP_ESHAPE, "MatMul of a scalar (A %s, B %s)", hp_shape_str(as, s1, sizeof s1),
				     hp_shape_str(bs, s2, sizeof s2));
	p->m = ra == 1 ? 1 : as->dims[ra - 2];
	p->k = as->dims[ra - 1];
	kb = rb == 1 ? bs->dims[0] : bs->dims[rb - 2];
	p->n = rb == 1 ? 1 : bs->dims[rb - 1];
	if (kb != p->k)
		return hp_node_error(g, n, HP_ESHAPE, "inner dims differ: A %s, B %s (%" PRId64 " vs %" PRId64 ")",
				     hp_shape_str(as, s1, sizeof s1), hp_shape_str(bs, s2, sizeof s2), p->k, kb);
	na = ra > 2 ? ra - 2 : 0;
	nbb = rb > 2 ? rb - 2 : 0;
	p->nb = na > nbb ? na : nbb;
	p->batch = 1;
	for (int i = 0; i < p->nb; i++) {
		int ia = i - (p->nb - na), ib = i - (p->nb - nbb);
		int64_t da = ia >= 0 ? as->dims[ia] : 1, db = ib >= 0 ? bs->dims[ib] : 1;
		if (da != db && da != 1 && db != 1)
			return hp_node_error(g, n, HP_ESHAPE, "batch dims of A %s and B %s do not broadcast",
					     hp_shape_str(as, s1, sizeof s1), hp_shape_str(bs, s2, sizeof s2));
		p->bdims[i] = da == 1 ? db : da;
		p->batch *= p->bdims[i];
	}
	batch_strides(as->dims, na, p->nb, p->m * p->k, p->astr);
	batch_strides(bs->dims, nbb, p->nb, p->k * p->n, p->bstr);
	ys->rank = 0;
	for (int i = 0; i < p->nb; i++)
		ys->dims[ys->rank++] = p->bdims[i];
	if (ra > 1)
		ys->dims[ys->rank++] = p->m;
	if (rb > 1)
		ys->dims[ys->rank++] = p->n;
	p->fold = nbb == 0;
	for (int i = 0; i < na && p->fold; i++)
		p->fold = p->bdims[p->nb - na + i] == as->dims[i];
	return 0;
}

static int matmul_prepare(struct hp_graph *g, struct hp_node *n)
{
	const struct hp_value *a = &g->values[n->inputs[0]], *b = &g->values[n->inputs[1]];
	struct hp_value *y = &g->values[n->outputs[0]];
	struct matmul_p *p;

	if (a->dtype != HP_F32 || b->dtype != HP_F32)
		return hp_node_error(g, n, HP_EUNSUPPORTED, "only float32 is supported (A %s, B %s)",
				     hp_dtype_name(a->dtype), hp_dtype_name(b->dtype));
	if (!(p = calloc(1, sizeof *p)))
		return hp_node_error(g, n, -ENOMEM, "out of memory");
	n->priv = p;
	y->dtype = HP_F32;
	return matmul_shapes(g, n, p, &a->shape, &b->shape, &y->shape);
}

static void matmul_one(const struct matmul_p *p, int64_t m, const float *a, const float *b, float *y)
{
	if (p->k == 0) {
		memset(y, 0, (size_t)(m * p->n) * sizeof *y);
		return;
	}
	cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)m, (int)p->n, (int)p->k, 1.0f, a, (int)p->k, b,
		    (int)p->n, 0.0f, y, (int)p->n);
}

static int matmul_run(const struct hp_node *n, const struct hp_kargs *ka)
{
	const struct matmul_p *p = n->priv;
	const float *a = ka->in[0].data, *b = ka->in[1].data;
	float *y = ka->out[0].data;

	if (p->m == 0 || p->n == 0 || p->batch == 0)
		return 0;
	if (p->fold) {
		matmul_one(p, p->batch * p->m, a, b, y);
		return 0;
	}
	for (int64_t i = 0; i < p->batch; i++) {
		int64_t rem = i, ao = 0, bo = 0;
		for (int d = p->nb - 1; d >= 0; d--) {
			int64_t idx = rem % p->bdims[d];
			rem /= p->bdims[d];
			ao += idx * p->astr[d];
			bo += idx * p->bstr[d];
		}
		matmul_one(p, p->m, a + ao, b + bo, y + i * p->m * p->n);
	}
	return 0;
}

static double matmul_flops(const struct hp_graph *g, const struct hp_node *n)
{
	const struct matmul_p *p = n->priv;

	(void)g;
	return p ? 2.0 * p->batch * p->m * p->n * p->k : 0;
}

static const struct hp_op op_gemm = {
	.domain = "",
	.name = "Gemm",
	.min_inputs = 2,
	.max_inputs = 3,
	.min_outputs = 1,
	.max_outputs = 1,
	.prepare = gemm_prepare,
	.run = gemm_run,
	.flops = gemm_flops,
};

static const struct hp_op op_matmul = {
	.domain = "",
	.name = "MatMul",
	.min_inputs = 2,
	.max_inputs = 2,
	.min_outputs = 1,
	.max_outputs = 1,
	.prepare = matmul_prepare,
	.run = matmul_run,
	.flops = matmul_flops,
};

const struct hp_op *const hp_ops_gemm[] = { &op_gemm, &op_matmul, NULL };
