/* OneHot, EyeLike, CumSum and TopK.  Each needs its shape argument (depth,
 * K) or axis as a compile-time constant (HP_ENOTCONST otherwise, which
 * hpdlf-exec answers by binding small inputs).  Numbers go through double
 * (float dtypes) or int64 (integers), so any numeric dtype works. */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/shape_util.h"
#include "kernels/index_impl.h"

struct ipriv {
	int axis;
	int64_t k;          /* OneHot depth, TopK K, EyeLike diagonal */
	int exclusive, reverse, largest;
};

static int new_ipriv(const struct hp_graph *g, struct hp_node *n, struct ipriv **p)
{
	if (!(*p = calloc(1, sizeof **p)))
		return hp_node_error(g, n, -ENOMEM, "out of memory");
	n->priv = *p;
	return 0;
}

static int is_float(enum hp_dtype t)
{
	return t == HP_F32 || t == HP_F64 || t == HP_F16 || t == HP_BF16;
}

/* A one-element constant input of any numeric dtype, as double. */
static int const_scalar(const struct hp_graph *g, const struct hp_node *n, int i, const char *what, double *v)
{
	const struct hp_value *x = hpks_in(g, n, i);

	if (!x || hp_shape_numel(&x->shape) != 1)
		return hp_node_error(g, n, HP_ESHAPE, "%s must hold one element", what);
	if (!x->data)
		return hp_node_error(g, n, HP_ENOTCONST, "%s must be a compile-time constant", what);
	*v = hpks_get_f(x->data, x->dtype, 0);
	return 0;
}

/* ---- OneHot(indices, depth, values [off, on]; axis) --------------------- */

static int onehot_prepare(struct hp_graph *g, struct hp_node *n)
{
	const struct hp_value *ix = hpks_in(g, n, 0), *vals = hpks_in(g, n, 2);
	struct hp_shape s = { .rank = ix->shape.rank + 1 };
	struct ipriv *p;
	double depth = 0;
	int rc = new_ipriv(g, n, &p);

	if (rc == 0)
		rc = const_scalar(g, n, 1, "depth", &depth);
	if (rc == 0)
		rc = hpks_axis(g, n, hp_attr_int(n, "axis", -1), s.rank, &p->axis);
	if (rc < 0)
		return rc;
	if (hp_shape_numel(&vals->shape) != 2 || depth < 1 || s.rank > HP_MAX_RANK)
		return hp_node_error(g, n, HP_ESHAPE, "values must be [off, on] and depth >= 1");
	p->k = (int64_t)depth;
	for (int d = 0, j = 0; d < s.rank; d++)
		s.dims[d] = d == p->axis ? p->k : ix->shape.dims[j++];
	hpks_set_out(g, n, 0, vals->dtype, &s);
	return 0;
}

static int onehot_run(const struct hp_node *n, const struct hp_kargs *a)
{
	const struct ipriv *p = n->priv;
	const struct hp_tensor *ix = &a->in[0], *v = &a->in[2];
	int64_t inner = hpk_prod_dims(&ix->shape, p->axis), outer = hp_shape_numel(&ix->shape) / (inner ? inner : 1);
	size_t es = hp_dtype_size(v->dtype);
	char *y = a->out[0].data;

	for (int64_t o = 0; o < outer; o++)
		for (int64_t c = 0; c < p->k; c++)
			for (int64_t i = 0; i < inner; i++) {
				double f = hpks_get_f(ix->data, ix->dtype, o * inner + i);
				int64_t t = (int64_t)f;
				t += t < 0 ? p->k : 0;
				memcpy(y + (size_t)((o * p->k + c) * inner + i) * es, (const char *)v->data + (t == c) * es, es);
			}
	return 0;
}

/* ---- EyeLike(input; dtype, k) ------------------------------------------- */

static int eyelike_prepare(struct hp_graph *g, struct hp_node *n)
{
	const struct hp_value *x = hpks_in(g, n, 0);
	struct ipriv *p;
	int rc = new_ipriv(g, n, &p);
	enum hp_dtype t = x->dtype;

	if (rc < 0)
		return rc;
	if (x->shape.rank != 2)
		return hp_node_error(g, n, HP_ESHAPE, "input must be 2-D, not rank %d", x->shape.rank);
	if (hp_node_attr(n, "dtype"))
		t = (enum hp_dtype)hp_attr_int(n, "dtype", HP_F32); /* enum values are ONNX's codes */
	if (!hp_dtype_size(t) || t == HP_STRING)
		return hp_node_error(g, n, HP_EUNSUPPORTED, "dtype %s is not supported", hp_dtype_name(t));
	p->k = hp_attr_int(n, "k", 0);
	hpks_set_out(g, n, 0, t, &x->shape);
	return 0;
}

static int eyelike_run(const struct hp_node *n, const struct hp_kargs *a)
{
	const struct ipriv *p = n->priv;
	struct hp_tensor *y = &a->out[0];
	int64_t rows = y->shape.dims[0], cols = y->shape.dims[1];

	memset(y->data, 0, hp_tensor_bytes(y));
	for (int64_t i = 0; i < rows; i++)
		if (i + p->k >= 0 && i + p->k < cols) {
			if (is_float(y->dtype))
				hpks_put_f(y->data, y->dtype, i * cols + i + p->k, 1.0);
			else
				hpki_put_i(y->data, y->dtype, i * cols + i + p->k, 1);
		}
	return 0;
}

/* ---- CumSum(x, axis; exclusive, reverse) -------------------------------- */

static int cumsum_prepare(struct hp_graph *g, struct hp_node *n)
{
	const struct hp_value *x = hpks_in(g, n, 0);
	struct ipriv *p;
	double axis = 0;
	int rc = new_ipriv(g, n, &p);

	if (rc == 0)
		rc = const_scalar(g, n, 1, "axis", &axis);
	if (rc == 0)
		rc = hpks_axis(g, n, (int64_t)axis, x->shape.rank, &p->axis);
	if (rc < 0)
		return rc;
	if (x->dtype == HP_BOOL || x->dtype == HP_STRING)
		return hp_node_error(g, n, HP_EUNSUPPORTED, "input dtype %s is not supported", hp_dtype_name(x->dtype));
	p->exclusive = (int)hp_attr_int(n, "exclusive", 0);
	p->reverse = (int)hp_attr_int(n, "reverse", 0);
	hpks_set_out(g, n, 0, x->dtype, &x->shape);
	return 0;
}

static int cumsum_run(const struct hp_node *n, const struct hp_kargs *a)
{
	const struct ipriv *p = n->priv;
	const struct hp_tensor *x = &a->in[0];
	int64_t dim = x->shape.dims[p->axis], inner = hpk_prod_dims(&x->shape, p->axis + 1);
	int64_t outer = dim && inner ? hp_shape_numel(&x->shape) / (dim * inner) : 0;
	int fl = is_float(x->dtype);

	for (int64_t o = 0; o < outer; o++)
		for (int64_t i = 0; i < inner; i++) {
			double sf = 0;
			int64_t si = 0;
			for (int64_t c = 0; c < dim; c++) {
				int64_t at = (o * dim + (p->reverse ? dim - 1 - c : c)) * inner + i;
				double vf = fl ? hpks_get_f(x->data, x->dtype, at) : 0;
				int64_t vi = fl ? 0 : hpks_get_i(x->data, x->dtype, at);
				if (!p->exclusive)
					sf += vf, si = (int64_t)((uint64_t)si + (uint64_t)vi);
				if (fl)
					hpks_put_f(a->out[0].data, x->dtype, at, sf);
				else
					hpki_put_i(a->out[0].data, x->dtype, at, si);
				if (p->exclusive)
					sf += vf, si = (int64_t)((uint64_t)si + (uint64_t)vi);
			}
		}
	return 0;
}

/* ---- TopK(x, K; axis, largest, sorted) -> (values, indices) ------------- */

static int topk_prepare(struct hp_graph *g, struct hp_node *n)
{
	const struct hp_value *x = hpks_in(g, n, 0);
	struct hp_shape s = x->shape;
	struct ipriv *p;
	double k;
	int rc = new_ipriv(g, n, &p);

	k = (double)hp_attr_int(n, "k", 0); /* opsets 1 to 9: an attribute */
	if (rc == 0 && hpks_in(g, n, 1))
		rc = const_scalar(g, n, 1, "K", &k);
	if (rc == 0)
		rc = hpks_axis(g, n, hp_attr_int(n, "axis", -1), x->shape.rank, &p->axis);
	if (rc < 0)
		return rc;
	if (k < 0 || k > (double)x->shape.dims[p->axis])
		return hp_node_error(g, n, HP_ESHAPE, "K %g is outside [0, %" PRId64 "]", k, x->shape.dims[p->axis]);
	p->k = (int64_t)k;
	p->largest = (int)hp_attr_int(n, "largest", 1);
	s.dims[p->axis] = p->k;
	hpks_set_out(g, n, 0, x->dtype, &s);
	hpks_set_out(g, n, 1, HP_I64, &s);
	n->workspace = (size_t)(p->k + 1) * (sizeof(double) + sizeof(int64_t));
	return 0;
}

/* Whether candidate (va, ia) goes before (vb, ib): by value, then index. */
static int before(int largest, double va, int64_t ia, double vb, int64_t ib)
{
	if (va != vb)
		return largest ? va > vb : va < vb;
	return ia < ib;
}

static int topk_run(const struct hp_node *n, const struct hp_kargs *a)
{
	const struct ipriv *p = n->priv;
	const struct hp_tensor *x = &a->in[0];
	int64_t dim = x->shape.dims[p->axis], inner = hpk_prod_dims(&x->shape, p->axis + 1);
	int64_t outer = dim && inner ? hp_shape_numel(&x->shape) / (dim * inner) : 0, *ix;
	double *v = a->ws;

	ix = (int64_t *)(v + p->k + 1);
	for (int64_t o = 0; o < outer; o++)
		for (int64_t i = 0; i < inner; i++) {
			int64_t m = 0; /* the best m so far, sorted, in v/ix (O(dim k)) */
			for (int64_t c = 0; c < dim && p->k; c++) {
				double val = hpks_get_f(x->data, x->dtype, (o * dim + c) * inner + i);
				int64_t j = m < p->k ? m++ : p->k;
				if (j == p->k && !before(p->largest, val, c, v[j - 1], ix[j - 1]))
					continue;
				j -= j == p->k;
				for (; j > 0 && before(p->largest, val, c, v[j - 1], ix[j - 1]); j--)
					v[j] = v[j - 1], ix[j] = ix[j - 1];
				v[j] = val, ix[j] = c;
			}
			for (int64_t c = 0; c < p->k; c++) {
				int64_t at = (o * p->k + c) * inner + i;
				size_t es = hp_dtype_size(x->dtype);
				memcpy((char *)a->out[0].data + (size_t)at * es,
				       (const char *)x->data + (size_t)((o * dim + ix[c]) * inner + i) * es, es);
				if (a->nout > 1 && a->out[1].data)
					((int64_t *)a->out[1].data)[at] = ix[c];
			}
		}
	return 0;
}

#define OP(var, nm, lo, hi, olo, ohi, prep, rn)                                                        \
	const struct hp_op var = { .domain = "", .name = nm, .min_inputs = lo, .max_inputs = hi,         \
				   .min_outputs = olo, .max_outputs = ohi, .prepare = prep, .run = rn }

OP(hpki_op_onehot, "OneHot", 3, 3, 1, 1, onehot_prepare, onehot_run);
OP(hpki_op_eyelike, "EyeLike", 1, 1, 1, 1, eyelike_prepare, eyelike_run);
OP(hpki_op_cumsum, "CumSum", 2, 2, 1, 1, cumsum_prepare, cumsum_run);
OP(hpki_op_topk, "TopK", 1, 2, 1, 2, topk_prepare, topk_run);
