/* Index operators: ScatterElements (and Scatter, its name before opset
 * 11), ScatterND and GatherND.  Copies are byte copies of any dtype; the
 * reductions (add, mul, max, min: opsets 16 and 18) go through double for
 * float and through int64 for integer dtypes.  Updates apply in index
 * order, so duplicate indices take the last update (reduction "none"), as
 * ONNX's reference does.  Every index is checked at run time. */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/shape_util.h"
#include "kernels/index_impl.h"

enum sred { SR_NONE, SR_ADD, SR_MUL, SR_MAX, SR_MIN };

struct spriv {
	int axis;
	enum sred red;
	int batch; /* GatherND batch_dims */
};

static int read_red(const struct hp_graph *g, const struct hp_node *n, enum sred *r)
{
	static const char *const names[] = { "none", "add", "mul", "max", "min" };
	const char *s = hp_attr_string(n, "reduction", "none");

	for (int i = 0; i < 5; i++)
		if (!strcmp(s, names[i])) {
			*r = (enum sred)i;
			return 0;
		}
	return hp_node_error(g, n, HP_EMODEL, "reduction '%s' is not none, add, mul, max or min", s);
}

static int is_float(enum hp_dtype t)
{
	return t == HP_F32 || t == HP_F64 || t == HP_F16 || t == HP_BF16;
}

/* dst[i] (op)= src[j], both of dtype t. */
static void apply(enum sred r, enum hp_dtype t, void *dst, int64_t i, const void *src, int64_t j)
{
	size_t es = hp_dtype_size(t);

	if (r == SR_NONE) {
		memcpy((char *)dst + (size_t)i * es, (const char *)src + (size_t)j * es, es);
		return;
	}
	if (is_float(t)) {
		double a = hpks_get_f(dst, t, i), b = hpks_get_f(src, t, j);
		a = r == SR_ADD ? a + b : r == SR_MUL ? a * b : r == SR_MAX ? (b > a ? b : a) : (b < a ? b : a);
		hpks_put_f(dst, t, i, a);
		return;
	}
	int64_t a = hpks_get_i(dst, t, i), b = hpks_get_i(src, t, j);
	a = r == SR_ADD ? (int64_t)((uint64_t)a + (uint64_t)b) : r == SR_MUL ? (int64_t)((uint64_t)a * (uint64_t)b)
	    : r == SR_MAX ? (b > a ? b : a) : (b < a ? b : a);
	hpki_put_i(dst, t, i, a);
}

static int idx_type(const struct hp_graph *g, const struct hp_node *n, const struct hp_value *ix)
{
	if (ix->dtype != HP_I64 && ix->dtype != HP_I32)
		return hp_node_error(g, n, HP_ESHAPE, "indices must be int32 or int64, not %s", hp_dtype_name(ix->dtype));
	return 0;
}

static int new_priv(const struct hp_graph *g, struct hp_node *n, struct spriv **p)
{
	if (!(*p = calloc(1, sizeof **p)))
		return hp_node_error(g, n, -ENOMEM, "out of memory");
	n->priv = *p;
	return read_red(g, n, &(*p)->red);
}

/* ---- ScatterElements(data, indices, updates) ---------------------------- */

static int se_prepare(struct hp_graph *g, struct hp_node *n)
{
	const struct hp_value *x = hpks_in(g, n, 0), *ix = hpks_in(g, n, 1), *u = hpks_in(g, n, 2);
	struct spriv *p;
	int rc = idx_type(g, n, ix);

	if (rc == 0)
		rc = new_priv(g, n, &p);
	if (rc == 0)
		rc = hpks_axis(g, n, hp_attr_int(n, "axis", 0), x->shape.rank, &p->axis);
	if (rc < 0)
		return rc;
	if (ix->shape.rank != x->shape.rank || !hp_shape_equal(&ix->shape, &u->shape) || u->dtype != x->dtype)
		return hp_node_error(g, n, HP_ESHAPE, "indices and updates must have one shape of data's rank");
	hpks_set_out(g, n, 0, x->dtype, &x->shape);
	return 0;
}

static int se_run(const struct hp_node *n, const struct hp_kargs *a)
{
	const struct spriv *p = n->priv;
	const struct hp_tensor *x = &a->in[0], *ix = &a->in[1], *u = &a->in[2];
	int64_t xs[HP_MAX_RANK], idx[HP_MAX_RANK] = { 0 }, cnt = hp_shape_numel(&ix->shape);
	int64_t dim = x->shape.dims[p->axis];

	hpks_copy_bytes(a->out[0].data, x->data, hp_tensor_bytes(x));
	hpks_strides(&x->shape, xs);
	for (int64_t t = 0; t < cnt; t++) {
		int64_t k = hpks_get_i(ix->data, ix->dtype, t), off = 0;
		if (k < -dim || k >= dim)
			return hp_node_error(NULL, n, HP_EDATA, "index %" PRId64 " (element %" PRId64
					     " of the indices) is out of range [-%" PRId64 ", %" PRId64 ")", k, t, dim, dim);
		k += k < 0 ? dim : 0;
		for (int d = 0; d < x->shape.rank; d++)
			off += (d == p->axis ? k : idx[d]) * xs[d];
		apply(p->red, x->dtype, a->out[0].data, off, u->data, t);
		hpki_next(idx, &ix->shape);
	}
	return 0;
}

/* ---- ScatterND(data, indices [..., k], updates) ------------------------ */

static int snd_prepare(struct hp_graph *g, struct hp_node *n)
{
	const struct hp_value *x = hpks_in(g, n, 0), *ix = hpks_in(g, n, 1), *u = hpks_in(g, n, 2);
	struct spriv *p;
	int rc = idx_type(g, n, ix), q = ix->shape.rank, k, ok;

	if (rc == 0)
		rc = new_priv(g, n, &p);
	if (rc < 0)
		return rc;
	k = q ? (int)ix->shape.dims[q - 1] : -1;
	ok = q >= 1 && k >= 0 && k <= x->shape.rank && u->dtype == x->dtype && u->shape.rank == q - 1 + x->shape.rank - k;
	for (int d = 0; ok && d < u->shape.rank; d++)
		ok = u->shape.dims[d] == (d < q - 1 ? ix->shape.dims[d] : x->shape.dims[k + d - (q - 1)]);
	if (!ok)
		return hp_node_error(g, n, HP_ESHAPE, "updates must be indices.shape[:-1] + data.shape[k:]");
	hpks_set_out(g, n, 0, x->dtype, &x->shape);
	return 0;
}

/* Element offset of index tuple `t` (k entries) in x; -1 when out of range. */
static int64_t tuple_offset(const struct hp_tensor *x, const int64_t *xs, const struct hp_tensor *ix, int64_t t,
			    int k, int first)
{
	int64_t off = 0;

	for (int j = 0; j < k; j++) {
		int64_t v = hpks_get_i(ix->data, ix->dtype, t * k + j), dim = x->shape.dims[first + j];
		if (v < -dim || v >= dim)
			return -1;
		off += (v < 0 ? v + dim : v) * xs[first + j];
	}
	return off;
}

static int snd_run(const struct hp_node *n, const struct hp_kargs *a)
{
	const struct spriv *p = n->priv;
	const struct hp_tensor *x = &a->in[0], *ix = &a->in[1], *u = &a->in[2];
	int k = (int)ix->shape.dims[ix->shape.rank - 1];
	int64_t xs[HP_MAX_RANK], slice = hpk_prod_dims(&x->shape, k), cnt = hp_shape_numel(&ix->shape) / (k ? k : 1);

	if (k == 0)
		cnt = hp_shape_numel(&u->shape) / (slice ? slice : 1);
	hpks_copy_bytes(a->out[0].data, x->data, hp_tensor_bytes(x));
	hpks_strides(&x->shape, xs);
	for (int64_t t = 0; t < cnt; t++) {
		int64_t off = tuple_offset(x, xs, ix, t, k, 0);
		if (off < 0)
			return hp_node_error(NULL, n, HP_EDATA, "index tuple %" PRId64 " is out of range", t);
		for (int64_t e = 0; e < slice; e++)
			apply(p->red, x->dtype, a->out[0].data, off + e, u->data, t * slice + e);
	}
	return 0;
}

/* ---- GatherND(data, indices [..., k]; batch_dims b) --------------------- */

static int gnd_prepare(struct hp_graph *g, struct hp_node *n)
{
	const struct hp_value *x = hpks_in(g, n, 0), *ix = hpks_in(g, n, 1);
	struct spriv *p;
	int rc = idx_type(g, n, ix), q = ix->shape.rank, b, k;
	struct hp_shape s = { 0 };

	if (rc == 0)
		rc = new_priv(g, n, &p);
	if (rc < 0)
		return rc;
	b = p->batch = (int)hp_attr_int(n, "batch_dims", 0);
	k = q ? (int)ix->shape.dims[q - 1] : -1;
	if (q < 1 || b < 0 || b >= q || b + k > x->shape.rank || k < 0)
		return hp_node_error(g, n, HP_ESHAPE, "indices [..., k] need batch_dims + k <= rank of data");
	for (int d = 0; d < b; d++)
		if (x->shape.dims[d] != ix->shape.dims[d])
			return hp_node_error(g, n, HP_ESHAPE, "batch dim %d differs between data and indices", d);
	for (int d = 0; d < q - 1; d++)
		s.dims[s.rank++] = ix->shape.dims[d];
	for (int d = b + k; d < x->shape.rank; d++)
		s.dims[s.rank++] = x->shape.dims[d];
	if (s.rank > HP_MAX_RANK)
		return hp_node_error(g, n, HP_EUNSUPPORTED, "output rank exceeds %d", HP_MAX_RANK);
	hpks_set_out(g, n, 0, x->dtype, &s);
	return 0;
}

static int gnd_run(const struct hp_node *n, const struct hp_kargs *a)
{
	const struct spriv *p = n->priv;
	const struct hp_tensor *x = &a->in[0], *ix = &a->in[1];
	int k = (int)ix->shape.dims[ix->shape.rank - 1], b = p->batch;
	int64_t xs[HP_MAX_RANK], slice = hpk_prod_dims(&x->shape, b + k), batches = 1, per;
	size_t es = hp_dtype_size(x->dtype);

	for (int d = 0; d < b; d++)
		batches *= x->shape.dims[d];
	per = hp_shape_numel(&ix->shape) / (k ? k : 1) / (batches ? batches : 1);
	if (k == 0)
		per = hp_shape_numel(&a->out[0].shape) / (slice ? slice : 1) / (batches ? batches : 1);
	hpks_strides(&x->shape, xs);
	for (int64_t t = 0; t < batches * per; t++) {
		int64_t off = tuple_offset(x, xs, ix, t, k, b);
		if (off < 0)
			return hp_node_error(NULL, n, HP_EDATA, "index tuple %" PRId64 " is out of range", t);
		off += b ? t / per * xs[b - 1] : 0;
		memcpy((char *)a->out[0].data + (size_t)(t * slice) * es, (const char *)x->data + (size_t)off * es,
		       (size_t)slice * es);
	}
	return 0;
}

#define OP(var, nm, lo, hi, prep, rn)                                                                 \
	const struct hp_op var = { .domain = "", .name = nm, .min_inputs = lo, .max_inputs = hi,         \
				   .min_outputs = 1, .max_outputs = 1, .prepare = prep, .run = rn }

OP(hpki_op_scatter_elements, "ScatterElements", 3, 3, se_prepare, se_run);
OP(hpki_op_scatter, "Scatter", 3, 3, se_prepare, se_run);
OP(hpki_op_scatter_nd, "ScatterND", 3, 3, snd_prepare, snd_run);
OP(hpki_op_gather_nd, "GatherND", 2, 2, gnd_prepare, gnd_run);
