/* Shape-only operators: Reshape, Flatten, Squeeze, Unsqueeze, Identity,
 * Shape, Size, Constant, ConstantOfShape, Range; and the family's table
 * (the other ops live in shape_index.c, shape_pad.c, shape_cast.c,
 * shape_dropout.c). */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/checked.h"
#include "kernels/ops.h"
#include "kernels/shape_util.h"

static int run_copy(const struct hp_node *n, const struct hp_kargs *a)
{
	(void)n;
	hpks_copy_bytes(a->out[0].data, a->in[0].data, hp_tensor_bytes(&a->in[0]));
	return 0;
}

static int out_numel_check(const struct hp_graph *g, const struct hp_node *n, const struct hp_value *x,
			   const struct hp_shape *s)
{
	char a[128], b[128];

	if (hp_shape_numel(s) == hp_shape_numel(&x->shape))
		return 0;
	return hp_node_error(g, n, HP_ESHAPE, "cannot reshape %s (%lld elements) to %s (%lld elements)",
			     hp_shape_str(&x->shape, a, sizeof a), (long long)hp_shape_numel(&x->shape),
			     hp_shape_str(s, b, sizeof b), (long long)hp_shape_numel(s));
}

static int reshape_prepare(struct hp_graph *g, struct hp_node *n)
{
	const struct hp_value *x = hpks_in(g, n, 0);
	int allowzero = (int)hp_attr_int(n, "allowzero", 0), cnt = 0, infer = -1, rc;
	int64_t sh[HP_MAX_RANK], known = 1;
	struct hp_shape s;

	rc = hpks_ints_input_or_attr(g, n, 1, "shape", sh, HP_MAX_RANK, &cnt);
	if (rc <= 0)
		return rc < 0 ? rc : hp_node_error(g, n, HP_EMODEL, "needs a 'shape' input");
	s.rank = cnt;
	for (int i = 0; i < cnt; i++) {
		int64_t d = sh[i];
		if (d == 0 && !allowzero) {
			if (i >= x->shape.rank)
				return hp_node_error(g, n, HP_ESHAPE, "shape[%d] = 0 copies a dim the input (rank %d) lacks",
						     i, x->shape.rank);
			d = x->shape.dims[i];
		} else if (d == -1) {
			if (infer >= 0)
				return hp_node_error(g, n, HP_ESHAPE, "shape has more than one -1");
			infer = i;
			continue;
		} else if (d < 0) {
			return hp_node_error(g, n, HP_ESHAPE, "shape[%d] = %lld is invalid", i, (long long)d);
		}
		int over = 0;
		s.dims[i] = d;
		known = hp_ck_mul(known, d, &over);
		if (over || known > HP_DIM_MAX)
			return hp_node_error(g, n, HP_ESHAPE, "shape[%d] = %lld makes more elements than any tensor holds",
					     i, (long long)d);
	}
	if (infer >= 0) {
		int64_t total = hp_shape_numel(&x->shape);
		if (allowzero && known == 0)
			return hp_node_error(g, n, HP_ESHAPE, "shape has both 0 (allowzero) and -1");
		s.dims[infer] = known ? total / known : 0;
	}
	rc = out_numel_check(g, n, x, &s);
	if (rc < 0)
		return rc;
	hpks_set_out(g, n, 0, x->dtype, &s);
	return 0;
}

static int flatten_prepare(struct hp_graph *g, struct hp_node *n)
{
	const struct hp_value *x = hpks_in(g, n, 0);
	int64_t axis = hp_attr_int(n, "axis", 1), outer = 1, inner = 1;
	struct hp_shape s = { .rank = 2 };

	if (axis < -x->shape.rank || axis > x->shape.rank)
		return hp_node_error(g, n, HP_ESHAPE, "axis %lld is out of range for rank %d", (long long)axis,
				     x->shape.rank);
	if (axis < 0)
		axis += x->shape.rank;
	for (int i = 0; i < x->shape.rank; i++)
		*(i < axis ? &outer : &inner) *= x->shape.dims[i];
	s.dims[0] = outer;
	s.dims[1] = inner;
	hpks_set_out(g, n, 0, x->dtype, &s);
	return 0;
}

static int squeeze_prepare(struct hp_graph *g, struct hp_node *n)
{
	const struct hp_value *x = hpks_in(g, n, 0);
	int64_t axes[HP_MAX_RANK];
	int drop[HP_MAX_RANK] = { 0 }, cnt = 0, rc, ax;
	struct hp_shape s = { 0 };

	rc = hpks_ints_input_or_attr(g, n, 1, "axes", axes, HP_MAX_RANK, &cnt);
	if (rc < 0)
		return rc;
	for (int i = 0; i < cnt; i++) {
		if ((rc = hpks_axis(g, n, axes[i], x->shape.rank, &ax)) < 0)
			return rc;
		if (x->shape.dims[ax] != 1)
			return hp_node_error(g, n, HP_ESHAPE, "cannot squeeze axis %d of size %lld", ax,
					     (long long)x->shape.dims[ax]);
		drop[ax] = 1;
	}
	for (int i = 0; i < x->shape.rank; i++)
		if (!(cnt ? drop[i] : x->shape.dims[i] == 1))
			s.dims[s.rank++] = x->shape.dims[i];
	hpks_set_out(g, n, 0, x->dtype, &s);
	return 0;
}

static int unsqueeze_prepare(struct hp_graph *g, struct hp_node *n)
{
	const struct hp_value *x = hpks_in(g, n, 0);
	int64_t axes[HP_MAX_RANK];
	int ins[HP_MAX_RANK] = { 0 }, cnt = 0, rc, ax, orank, k = 0;
	struct hp_shape s;

	rc = hpks_ints_input_or_attr(g, n, 1, "axes", axes, HP_MAX_RANK, &cnt);
	if (rc <= 0)
		return rc < 0 ? rc : hp_node_error(g, n, HP_EMODEL, "needs 'axes'");
	orank = x->shape.rank + cnt;
	if (orank > HP_MAX_RANK)
		return hp_node_error(g, n, HP_EUNSUPPORTED, "output rank %d exceeds %d", orank, HP_MAX_RANK);
	for (int i = 0; i < cnt; i++) {
		if ((rc = hpks_axis(g, n, axes[i], orank, &ax)) < 0)
			return rc;
		if (ins[ax]++)
			return hp_node_error(g, n, HP_ESHAPE, "axis %d given twice", ax);
	}
	s.rank = orank;
	for (int i = 0; i < orank; i++)
		s.dims[i] = ins[i] ? 1 : x->shape.dims[k++];
	hpks_set_out(g, n, 0, x->dtype, &s);
	return 0;
}

static int identity_prepare(struct hp_graph *g, struct hp_node *n)
{
	const struct hp_value *x = hpks_in(g, n, 0);

	hpks_set_out(g, n, 0, x->dtype, &x->shape);
	return 0;
}

static void shape_range(const struct hp_node *n, int rank, int64_t *b, int64_t *e)
{
	*b = hp_attr_int(n, "start", 0);
	*e = hp_attr_int(n, "end", rank);
	if (*b < 0)
		*b += rank;
	if (*e < 0)
		*e += rank;
	*b = *b < 0 ? 0 : *b > rank ? rank : *b;
	*e = *e < 0 ? 0 : *e > rank ? rank : *e;
	if (*e < *b)
		*e = *b;
}

static int shape_prepare(struct hp_graph *g, struct hp_node *n)
{
	const struct hp_value *x = hpks_in(g, n, 0);
	int64_t b, e, *d;
	struct hp_shape s = { .rank = 1 };

	shape_range(n, x->shape.rank, &b, &e);
	s.dims[0] = e - b;
	hpks_set_out(g, n, 0, HP_I64, &s);
	d = malloc((size_t)(e - b + 1) * sizeof *d);
	if (!d)
		return hp_node_error(g, n, -ENOMEM, "out of memory");
	memcpy(d, x->shape.dims + b, (size_t)(e - b) * sizeof *d);
	hpks_set_out_data(g, n, 0, d);
	return 0;
}

static int shape_run(const struct hp_node *n, const struct hp_kargs *a)
{
	int64_t b, e;

	shape_range(n, a->in[0].shape.rank, &b, &e);
	memcpy(a->out[0].data, a->in[0].shape.dims + b, (size_t)(e - b) * sizeof(int64_t));
	return 0;
}

static int size_prepare(struct hp_graph *g, struct hp_node *n)
{
	const struct hp_value *x = hpks_in(g, n, 0);
	struct hp_shape s = { .rank = 0 };
	int64_t *d = malloc(sizeof *d);

	if (!d)
		return hp_node_error(g, n, -ENOMEM, "out of memory");
	*d = hp_shape_numel(&x->shape);
	hpks_set_out(g, n, 0, HP_I64, &s);
	hpks_set_out_data(g, n, 0, d);
	return 0;
}

static int size_run(const struct hp_node *n, const struct hp_kargs *a)
{
	(void)n;
	*(int64_t *)a->out[0].data = hp_shape_numel(&a->in[0].shape);
	return 0;
}

/* Constant: the value as a tensor (shape/dtype/data pointing into the attr
 * or into `buf` for the scalar forms). */
static int constant_value(const struct hp_graph *g, const struct hp_node *n, struct hp_tensor *t,
			  void *buf, size_t cap)
{
	const struct hp_attr *a;

	memset(t, 0, sizeof *t);
	if ((a = hp_node_attr(n, "value")) && a->type == HP_ATTR_TENSOR) {
		*t = a->t;
		return 0;
	}
	t->data = buf;
	if ((a = hp_node_attr(n, "value_float")) || (a = hp_node_attr(n, "value_int"))) {
		t->dtype = a->type == HP_ATTR_FLOAT ? HP_F32 : HP_I64;
		if (t->dtype == HP_F32)
			memcpy(buf, &a->f, 4);
		else
			memcpy(buf, &a->i, 8);
		return 0;
	}
	if ((a = hp_node_attr(n, "value_floats")) || (a = hp_node_attr(n, "value_ints"))) {
		size_t es = a->type == HP_ATTR_FLOATS ? 4 : 8;
		t->dtype = es == 4 ? HP_F32 : HP_I64;
		t->shape.rank = 1;
		t->shape.dims[0] = a->n;
		if ((size_t)a->n * es > cap)
			t->data = es == 4 ? (void *)a->floats : (void *)a->ints;
		else if (a->n)
			memcpy(buf, es == 4 ? (void *)a->floats : (void *)a->ints, (size_t)a->n * es);
		return 0;
	}
	return hp_node_error(g, n, HP_EUNSUPPORTED, "needs a value, value_float(s) or value_int(s) attribute");
}

static int constant_prepare(struct hp_graph *g, struct hp_node *n)
{
	struct hp_tensor t;
	char buf[64];
	size_t b;
	void *d;
	int rc = constant_value(g, n, &t, buf, sizeof buf);

	if (rc < 0)
		return rc;
	if (!hp_dtype_size(t.dtype) || !t.data)
		return hp_node_error(g, n, HP_EUNSUPPORTED, "constant of type %s is not supported",
				     hp_dtype_name(t.dtype));
	hpks_set_out(g, n, 0, t.dtype, &t.shape);
	b = hp_tensor_bytes(&t);
	if (!(d = malloc(b ? b : 1)))
		return hp_node_error(g, n, -ENOMEM, "out of memory");
	memcpy(d, t.data, b);
	hpks_set_out_data(g, n, 0, d);
	return 0;
}

static int constant_run(const struct hp_node *n, const struct hp_kargs *a)
{
	struct hp_tensor t;
	char buf[64];
	int rc = constant_value(NULL, n, &t, buf, sizeof buf);

	if (rc < 0)
		return rc;
	memcpy(a->out[0].data, t.data, hp_tensor_bytes(&t));
	return 0;
}

static int cos_prepare(struct hp_graph *g, struct hp_node *n)
{
	int64_t dims[HP_MAX_RANK];
	int cnt, rc;
	struct hp_shape s;
	const struct hp_attr *v = hp_node_attr(n, "value");

	rc = hpks_const_ints(g, n, 0, "shape", dims, HP_MAX_RANK, &cnt);
	if (rc < 0)
		return rc;
	s.rank = cnt;
	for (int i = 0; i < cnt; i++) {
		if (dims[i] < 0)
			return hp_node_error(g, n, HP_ESHAPE, "shape[%d] = %lld is negative", i, (long long)dims[i]);
		s.dims[i] = dims[i];
	}
	if (v && (v->type != HP_ATTR_TENSOR || hp_shape_numel(&v->t.shape) != 1 || !hp_dtype_size(v->t.dtype)))
		return hp_node_error(g, n, HP_EMODEL, "value must be a one-element tensor");
	hpks_set_out(g, n, 0, v ? v->t.dtype : HP_F32, &s);
	return 0;
}

static int cos_run(const struct hp_node *n, const struct hp_kargs *a)
{
	const struct hp_attr *v = hp_node_attr(n, "value");
	const struct hp_tensor *o = &a->out[0];
	size_t es = hp_dtype_size(o->dtype);
	int64_t cnt = hp_shape_numel(&o->shape);
	char zero[16] = { 0 };
	const void *src = v ? v->t.data : zero;

	for (int64_t i = 0; i < cnt; i++)
		memcpy((char *)o->data + (size_t)i * es, src, es);
	return 0;
}

static int range_prepare(struct hp_graph *g, struct hp_node *n)
{
	const struct hp_value *v[3];
	struct hp_shape s = { .rank = 1 };
	int64_t cnt;

	for (int i = 0; i < 3; i++) {
		v[i] = hpks_in(g, n, i);
		if (!v[i]->data)
			return hp_node_error(g, n, HP_ENOTCONST,
					     "input %d ('%s') must be a compile-time constant (it sets the output shape)",
					     i, v[i]->name);
		if (hp_shape_numel(&v[i]->shape) != 1 || v[i]->dtype != v[0]->dtype)
			return hp_node_error(g, n, HP_ESHAPE, "start, limit, delta must be scalars of one type");
	}
	switch (v[0]->dtype) {
	case HP_I64: case HP_I32: case HP_I16: {
		int64_t st = hpks_get_i(v[0]->data, v[0]->dtype, 0), li = hpks_get_i(v[1]->data, v[0]->dtype, 0);
		int64_t de = hpks_get_i(v[2]->data, v[0]->dtype, 0);
		if (!de)
			return hp_node_error(g, n, HP_ESHAPE, "delta is 0");
		/* ceil((li - st) / de) without overflow: the span in 128 bits */
		__extension__ __int128 span = (__int128)li - st, q = span / de;
		if (q * de != span)
			q++;
		if (q > HP_DIM_MAX)
			return hp_node_error(g, n, HP_ESHAPE, "start %lld, limit %lld, delta %lld give more elements "
					     "than any tensor holds", (long long)st, (long long)li, (long long)de);
		cnt = q > 0 ? (int64_t)q : 0;
		break;
	}
	case HP_F32: case HP_F64: {
		double st = hpks_get_f(v[0]->data, v[0]->dtype, 0), li = hpks_get_f(v[1]->data, v[0]->dtype, 0);
		double de = hpks_get_f(v[2]->data, v[0]->dtype, 0);
		if (de == 0 || !isfinite(st) || !isfinite(li) || !isfinite(de))
			return hp_node_error(g, n, HP_ESHAPE, "delta is 0 or a bound is not finite");
		double q = ceil((li - st) / de);
		if (!(q <= (double)HP_DIM_MAX))
			return hp_node_error(g, n, HP_ESHAPE, "start %g, limit %g, delta %g give more elements than any "
					     "tensor holds", st, li, de);
		cnt = q > 0 ? (int64_t)q : 0;
		break;
	}
	default:
		return hp_node_error(g, n, HP_EUNSUPPORTED, "type %s", hp_dtype_name(v[0]->dtype));
	}
	s.dims[0] = cnt > 0 ? cnt : 0;
	hpks_set_out(g, n, 0, v[0]->dtype, &s);
	return 0;
}

static int range_run(const struct hp_node *n, const struct hp_kargs *a)
{
	const struct hp_tensor *o = &a->out[0];
	int64_t cnt = o->shape.dims[0];
	const void *s = a->in[0].data, *d = a->in[2].data;

	(void)n;
	switch (o->dtype) {
	case HP_F32:
		for (int64_t i = 0; i < cnt; i++)
			((float *)o->data)[i] = *(const float *)s + (float)i * *(const float *)d;
		break;
	case HP_F64:
		for (int64_t i = 0; i < cnt; i++)
			((double *)o->data)[i] = *(const double *)s + (double)i * *(const double *)d;
		break;
	/* integers: start + i * delta lies in [start, limit), but i * delta
	 * alone may not fit (2^56 * 128): computed modulo 2^64 (fuzz_struct) */
	case HP_I64:
		for (int64_t i = 0; i < cnt; i++)
			((int64_t *)o->data)[i] = (int64_t)((uint64_t)*(const int64_t *)s +
							    (uint64_t)i * (uint64_t)*(const int64_t *)d);
		break;
	case HP_I32:
		for (int64_t i = 0; i < cnt; i++)
			((int32_t *)o->data)[i] = (int32_t)(uint32_t)((uint64_t)(int64_t)*(const int32_t *)s +
								      (uint64_t)i * (uint64_t)(int64_t)*(const int32_t *)d);
		break;
	default:
		for (int64_t i = 0; i < cnt; i++)
			((int16_t *)o->data)[i] = (int16_t)(*(const int16_t *)s + i * *(const int16_t *)d);
		break;
	}
	return 0;
}

#define ALIAS_OP(var, nm, lo, hi, prep)                                                              \
	static const struct hp_op var = { .domain = "", .name = nm, .min_inputs = lo, .max_inputs = hi, \
					  .min_outputs = 1, .max_outputs = 1, .flags = HP_OP_ALIAS,     \
					  .prepare = prep, .run = run_copy }

ALIAS_OP(op_reshape, "Reshape", 1, 2, reshape_prepare);
ALIAS_OP(op_flatten, "Flatten", 1, 1, flatten_prepare);
ALIAS_OP(op_squeeze, "Squeeze", 1, 2, squeeze_prepare);
ALIAS_OP(op_unsqueeze, "Unsqueeze", 1, 2, unsqueeze_prepare);
ALIAS_OP(op_identity, "Identity", 1, 1, identity_prepare);

static const struct hp_op op_shape = {
	.domain = "", .name = "Shape", .min_inputs = 1, .max_inputs = 1, .min_outputs = 1, .max_outputs = 1,
	.prepare = shape_prepare, .run = shape_run,
};
static const struct hp_op op_size = {
	.domain = "", .name = "Size", .min_inputs = 1, .max_inputs = 1, .min_outputs = 1, .max_outputs = 1,
	.prepare = size_prepare, .run = size_run,
};
static const struct hp_op op_constant = {
	.domain = "", .name = "Constant", .min_inputs = 0, .max_inputs = 0, .min_outputs = 1, .max_outputs = 1,
	.prepare = constant_prepare, .run = constant_run,
};
static const struct hp_op op_cos = {
	.domain = "", .name = "ConstantOfShape", .min_inputs = 1, .max_inputs = 1, .min_outputs = 1,
	.max_outputs = 1, .prepare = cos_prepare, .run = cos_run,
};
static const struct hp_op op_range = {
	.domain = "", .name = "Range", .min_inputs = 3, .max_inputs = 3, .min_outputs = 1, .max_outputs = 1,
	.prepare = range_prepare, .run = range_run,
};

const struct hp_op *const hp_ops_shape[] = {
	&op_reshape, &op_flatten, &op_squeeze, &op_unsqueeze, &op_identity, &hpks_op_dropout, &op_shape,
	&op_size, &op_constant, &op_cos, &op_range,
	&hpks_op_cast, &hpks_op_transpose, &hpks_op_concat, &hpks_op_split, &hpks_op_slice,
	&hpks_op_gather, &hpks_op_gather_elements, &hpks_op_expand, &hpks_op_tile, &hpks_op_pad,
	NULL,
};
