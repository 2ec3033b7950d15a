/* Rearrangements: DepthToSpace (DCR and CRD modes), SpaceToDepth,
 * Compress (its condition must be a compile-time constant: it sets the
 * output shape) and ReverseSequence.  Byte copies of any dtype. */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "common/checked.h"
#include "kernels/shape_util.h"
#include "kernels/index_impl.h"

struct xpriv {
	int64_t b;       /* block size */
	int crd;         /* DepthToSpace mode CRD */
	int axis;        /* Compress: -1 flattened; ReverseSequence: time axis */
	int batch_axis;
	int64_t *keep;   /* Compress: kept indices along the axis */
	int64_t nkeep;
};

static void xrelease(struct hp_node *n)
{
	struct xpriv *p = n->priv;

	if (p)
		free(p->keep);
	free(p);
	n->priv = NULL;
}

static int new_xpriv(const struct hp_graph *g, struct hp_node *n, struct xpriv **p)
{
	if (!(*p = calloc(1, sizeof **p)))
		return hp_node_error(g, n, -ENOMEM, "out of memory");
	n->priv = *p;
	return 0;
}

/* ---- DepthToSpace / SpaceToDepth over [N, C, H, W] ----------------------- */

static int d2s_prepare(struct hp_graph *g, struct hp_node *n)
{
	const struct hp_value *x = hpks_in(g, n, 0);
	int d2s = !strcmp(n->op_type, "DepthToSpace"), rc;
	struct hp_shape s = x->shape;
	const char *mode = hp_attr_string(n, "mode", "DCR");
	struct xpriv *p;
	int64_t b = hp_attr_int(n, "blocksize", 0);

	if ((rc = new_xpriv(g, n, &p)) < 0)
		return rc;
	if (x->shape.rank != 4 || b < 1)
		return hp_node_error(g, n, HP_ESHAPE, "input must be 4-D [N,C,H,W] and blocksize >= 1");
	int over = 0;
	int64_t bb = hp_ck_mul(b, b, &over); /* b * b wrapped to 0 and divided by it (fuzz_struct) */
	if (over || bb > HP_DIM_MAX)
		return hp_node_error(g, n, HP_ESHAPE, "blocksize %" PRId64 " is beyond any tensor", b);
	if (d2s ? s.dims[1] % bb : s.dims[2] % b || s.dims[3] % b)
		return hp_node_error(g, n, HP_ESHAPE, "dims are not divisible by the block size %" PRId64, b);
	if (d2s && strcmp(mode, "DCR") && strcmp(mode, "CRD"))
		return hp_node_error(g, n, HP_EMODEL, "mode '%s' is not DCR or CRD", mode);
	p->b = b;
	p->crd = d2s && !strcmp(mode, "CRD");
	s.dims[1] = d2s ? s.dims[1] / bb : hp_ck_mul(s.dims[1], bb, &over);
	s.dims[2] = d2s ? hp_ck_mul(s.dims[2], b, &over) : s.dims[2] / b;
	s.dims[3] = d2s ? hp_ck_mul(s.dims[3], b, &over) : s.dims[3] / b;
	if (over || hp_shape_bytes(&s, x->dtype) == -2)
		return hp_node_error(g, n, HP_ESHAPE, "blocksize %" PRId64 " makes an output beyond any tensor", b);
	hpks_set_out(g, n, 0, x->dtype, &s);
	return 0;
}

/* Depth-to-space element pairs: y[n, c, h b + i, w b + j] is x[n, ch, h, w]
 * with ch = (i b + j) C' + c (DCR) or c b^2 + i b + j (CRD); space-to-depth
 * is the DCR map read the other way. */
static int d2s_run(const struct hp_node *n, const struct hp_kargs *a)
{
	const struct xpriv *p = n->priv;
	int d2s = !strcmp(n->op_type, "DepthToSpace");
	const struct hp_shape *sp = d2s ? &a->out[0].shape : &a->in[0].shape; /* the spatial side */
	int64_t N = sp->dims[0], C = sp->dims[1], H = sp->dims[2] / p->b, W = sp->dims[3] / p->b, b = p->b;
	size_t es = hp_dtype_size(a->in[0].dtype);
	const char *x = a->in[0].data;
	char *y = a->out[0].data;

	for (int64_t nn = 0; nn < N; nn++)
		for (int64_t c = 0; c < C; c++)
			for (int64_t h = 0; h < H * b; h++)
				for (int64_t w = 0; w < W * b; w++) {
					int64_t i = h % b, j = w % b;
					int64_t ch = p->crd ? c * b * b + i * b + j : (i * b + j) * C + c;
					int64_t deep = ((nn * C * b * b + ch) * H + h / b) * W + w / b;
					int64_t flat = ((nn * C + c) * H * b + h) * W * b + w;
					memcpy(y + (size_t)(d2s ? flat : deep) * es, x + (size_t)(d2s ? deep : flat) * es, es);
				}
	return 0;
}

/* ---- Compress(input, condition; axis) ------------------------------------ */

static int compress_prepare(struct hp_graph *g, struct hp_node *n)
{
	const struct hp_value *x = hpks_in(g, n, 0), *c = hpks_in(g, n, 1);
	struct hp_shape s = { .rank = 1, .dims = { hp_shape_numel(&x->shape) } };
	int64_t nc = hp_shape_numel(&c->shape), dim;
	struct xpriv *p;
	int rc = new_xpriv(g, n, &p);

	p->axis = -1;
	if (rc == 0 && hp_node_attr(n, "axis"))
		rc = hpks_axis(g, n, hp_attr_int(n, "axis", 0), x->shape.rank, &p->axis);
	if (rc < 0)
		return rc;
	if (c->shape.rank != 1)
		return hp_node_error(g, n, HP_ESHAPE, "condition must be 1-D");
	if (!c->data)
		return hp_node_error(g, n, HP_ENOTCONST, "condition must be a compile-time constant (it sets the shape)");
	if (p->axis >= 0)
		s = x->shape;
	dim = s.dims[p->axis >= 0 ? p->axis : 0];
	if (!(p->keep = malloc((size_t)(nc + 1) * sizeof *p->keep)))
		return hp_node_error(g, n, -ENOMEM, "out of memory");
	for (int64_t i = 0; i < nc && i < dim; i++)
		if (hpks_get_i(c->data, c->dtype, i))
			p->keep[p->nkeep++] = i;
	s.dims[p->axis >= 0 ? p->axis : 0] = p->nkeep;
	hpks_set_out(g, n, 0, x->dtype, &s);
	return 0;
}

static int compress_run(const struct hp_node *n, const struct hp_kargs *a)
{
	const struct xpriv *p = n->priv;
	const struct hp_tensor *x = &a->in[0];
	int ax = p->axis >= 0 ? p->axis : 0;
	int64_t numel = hp_shape_numel(&x->shape), dim = p->axis >= 0 ? x->shape.dims[ax] : numel;
	int64_t inner = p->axis >= 0 ? hpk_prod_dims(&x->shape, ax + 1) : 1;
	int64_t outer = dim && inner ? numel / (dim * inner) : 0;
	size_t es = hp_dtype_size(x->dtype) * (size_t)inner;

	for (int64_t o = 0; o < outer; o++)
		for (int64_t k = 0; k < p->nkeep; k++)
			memcpy((char *)a->out[0].data + (size_t)(o * p->nkeep + k) * es,
			       (const char *)x->data + (size_t)(o * dim + p->keep[k]) * es, es);
	return 0;
}

/* ---- ReverseSequence(input, sequence_lens; batch_axis, time_axis) -------- */

static int revseq_prepare(struct hp_graph *g, struct hp_node *n)
{
	const struct hp_value *x = hpks_in(g, n, 0), *l = hpks_in(g, n, 1);
	struct xpriv *p;
	int rc = new_xpriv(g, n, &p);

	if (rc == 0)
		rc = hpks_axis(g, n, hp_attr_int(n, "time_axis", 0), x->shape.rank, &p->axis);
	if (rc == 0)
		rc = hpks_axis(g, n, hp_attr_int(n, "batch_axis", 1), x->shape.rank, &p->batch_axis);
	if (rc < 0)
		return rc;
	if (x->shape.rank < 2 || p->axis == p->batch_axis || p->axis > 1 || p->batch_axis > 1)
		return hp_node_error(g, n, HP_ESHAPE, "time and batch axes must be 0 and 1 (either way)");
	if ((l->dtype != HP_I64 && l->dtype != HP_I32) || l->shape.rank != 1 ||
	    l->shape.dims[0] != x->shape.dims[p->batch_axis])
		return hp_node_error(g, n, HP_ESHAPE, "sequence_lens must be 1-D integers, one per batch entry");
	hpks_set_out(g, n, 0, x->dtype, &x->shape);
	return 0;
}

static int revseq_run(const struct hp_node *n, const struct hp_kargs *a)
{
	const struct xpriv *p = n->priv;
	const struct hp_tensor *x = &a->in[0];
	int64_t T = x->shape.dims[p->axis], B = x->shape.dims[p->batch_axis], inner = hpk_prod_dims(&x->shape, 2);
	size_t es = hp_dtype_size(x->dtype) * (size_t)inner;

	for (int64_t b = 0; b < B; b++) {
		int64_t len = hpks_get_i(a->in[1].data, a->in[1].dtype, b);
		if (len < 0 || len > T)
			return hp_node_error(NULL, n, HP_EDATA, "sequence length %" PRId64 " is outside [0, %" PRId64 "]",
					     len, T);
		for (int64_t t = 0; t < T; t++) {
			int64_t src = t < len ? len - 1 - t : t;
			int64_t yo = p->axis == 0 ? t * B + b : b * T + t, xo = p->axis == 0 ? src * B + b : b * T + src;
			memcpy((char *)a->out[0].data + (size_t)yo * es, (const char *)x->data + (size_t)xo * es, es);
		}
	}
	return 0;
}

#define OP(var, nm, lo, hi, prep, rn, rel)                                                            \
	const struct hp_op var = { .domain = "", .name = nm, .min_inputs = lo, .max_inputs = hi,         \
				   .min_outputs = 1, .max_outputs = 1, .prepare = prep, .run = rn,         \
				   .release = rel }

OP(hpki_op_depth_to_space, "DepthToSpace", 1, 1, d2s_prepare, d2s_run, NULL);
OP(hpki_op_space_to_depth, "SpaceToDepth", 1, 1, d2s_prepare, d2s_run, NULL);
OP(hpki_op_compress, "Compress", 2, 2, compress_prepare, compress_run, xrelease);
OP(hpki_op_reverse_sequence, "ReverseSequence", 2, 2, revseq_prepare, revseq_run, NULL);
