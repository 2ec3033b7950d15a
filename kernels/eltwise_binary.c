/* Broadcasting element-wise operators: arithmetic, comparisons, logic,
 * PRelu, variadic Max/Min/Sum/Mean and Where, over the segment walker. */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>

#include "kernels/eltwise_impl.h"

struct bpriv {
	const struct bdesc *d;
	hpk_seg_fn f;
	enum hp_dtype ta, tb; /* Pow's base and exponent types */
};

/* One loop per (stride pattern) so each variant vectorizes: s[k] is 0 for an
 * operand broadcast over the segment, 1 for a contiguous one. */
#define BLOOP(NAME, TA, TB, TO, EXPR)                                                      \
	static void NAME(const void *ctx, char *const *p, const int64_t *s, int64_t n)     \
	{                                                                                  \
		TO *o = (TO *)p[0];                                                        \
		const TA *pa = (const TA *)p[1];                                           \
		const TB *pb = (const TB *)p[2];                                           \
		(void)ctx;                                                                 \
		if (s[1] && s[2]) {                                                        \
			for (int64_t i = 0; i < n; i++) {                                  \
				TA a = pa[i];                                              \
				TB b = pb[i];                                              \
				o[i] = (EXPR);                                             \
			}                                                                  \
		} else if (s[1]) {                                                         \
			TB b = pb[0];                                                      \
			for (int64_t i = 0; i < n; i++) {                                  \
				TA a = pa[i];                                              \
				o[i] = (EXPR);                                             \
			}                                                                  \
		} else if (s[2]) {                                                         \
			TA a = pa[0];                                                      \
			for (int64_t i = 0; i < n; i++) {                                  \
				TB b = pb[i];                                              \
				o[i] = (EXPR);                                             \
			}                                                                  \
		} else {                                                                   \
			TA a = pa[0];                                                      \
			TB b = pb[0];                                                      \
			TO v = (EXPR);                                                     \
			for (int64_t i = 0; i < n; i++)                                    \
				o[i] = v;                                                  \
		}                                                                          \
	}

/* Same-type arithmetic for float, int32 and int64 (integers wrap). */
#define ARITH3(NAME, FEXPR, IEXPR32, IEXPR64)                   \
	BLOOP(NAME##_f, float, float, float, FEXPR)             \
	BLOOP(NAME##_i32, int32_t, int32_t, int32_t, IEXPR32)   \
	BLOOP(NAME##_i64, int64_t, int64_t, int64_t, IEXPR64)

#define WRAP32(op) ((int32_t)((uint32_t)a op (uint32_t)b))
#define WRAP64(op) ((int64_t)((uint64_t)a op (uint64_t)b))
/* Integer division truncates; x/0 gives 0 and MIN/-1 wraps instead of trapping. */
#define IDIV(T) (b == 0 ? (T)0 : b == -1 ? (T)(0u - (uint64_t)a) : (T)(a / b))
/* NaN-propagating max/min, as numpy's maximum/minimum. */
#define FMAX (a >= b || a != a ? a : b)
#define FMIN (a <= b || a != a ? a : b)

ARITH3(add, a + b, WRAP32(+), WRAP64(+))
ARITH3(sub, a - b, WRAP32(-), WRAP64(-))
ARITH3(mul, a * b, WRAP32(*), WRAP64(*))
ARITH3(div, a / b, IDIV(int32_t), IDIV(int64_t))
ARITH3(max, FMAX, a > b ? a : b, a > b ? a : b)
ARITH3(min, FMIN, a < b ? a : b, a < b ? a : b)
BLOOP(prelu_f, float, float, float, a < 0.0f ? a * b : a)

#define CMP4(NAME, EXPR)                                        \
	BLOOP(NAME##_f, float, float, uint8_t, EXPR)            \
	BLOOP(NAME##_i32, int32_t, int32_t, uint8_t, EXPR)      \
	BLOOP(NAME##_i64, int64_t, int64_t, uint8_t, EXPR)      \
	BLOOP(NAME##_b, uint8_t, uint8_t, uint8_t, EXPR)

CMP4(eq, a == b)
CMP4(lt, a < b)
CMP4(gt, a > b)
CMP4(le, a <= b)
CMP4(ge, a >= b)
BLOOP(and_b, uint8_t, uint8_t, uint8_t, (uint8_t)(a && b))
BLOOP(or_b, uint8_t, uint8_t, uint8_t, (uint8_t)(a || b))
BLOOP(xor_b, uint8_t, uint8_t, uint8_t, (uint8_t)(!a != !b))

/* Mod: fmod=1 truncates (C), fmod=0 takes the divisor's sign (Python). */
static inline int64_t imod(int64_t a, int64_t b, int c_style)
{
	int64_t r;

	if (b == 0)
		return 0;
	r = b == -1 ? 0 : a % b;
	if (!c_style && r != 0 && ((r < 0) != (b < 0)))
		r += b;
	return r;
}

BLOOP(fmod_f, float, float, float, fmodf(a, b))
BLOOP(mod_i32, int32_t, int32_t, int32_t, (int32_t)imod(a, b, 0))
BLOOP(mod_i64, int64_t, int64_t, int64_t, imod(a, b, 0))
BLOOP(cmod_i32, int32_t, int32_t, int32_t, (int32_t)imod(a, b, 1))
BLOOP(cmod_i64, int64_t, int64_t, int64_t, imod(a, b, 1))

BLOOP(pow_ff, float, float, float, powf(a, b))
static void pow_f2(const void *ctx, char *const *p, const int64_t *s, int64_t n)
{
	float *o = (float *)p[0];
	const float *a = (const float *)p[1];

	(void)ctx;
	(void)s;
	for (int64_t i = 0; i < n; i++)
		o[i] = a[i] * a[i];
}

static double load(const char *p, enum hp_dtype t)
{
	switch (t) {
	case HP_F32: return *(const float *)p;
	case HP_I32: return *(const int32_t *)p;
	default: return (double)*(const int64_t *)p;
	}
}

/* Pow over mixed types (integer base or exponent): computed in double. */
static void pow_any(const void *ctx, char *const *p, const int64_t *s, int64_t n)
{
	const struct bpriv *b = ctx;
	size_t za = hp_dtype_size(b->ta), zb = hp_dtype_size(b->tb);

	for (int64_t i = 0; i < n; i++) {
		double r = pow(load(p[1] + (size_t)(i * s[1]) * za, b->ta), load(p[2] + (size_t)(i * s[2]) * zb, b->tb));
		switch (b->ta) {
		case HP_F32: ((float *)p[0])[i] = (float)r; break;
		case HP_I32: ((int32_t *)p[0])[i] = isfinite(r) && fabs(r) < 2147483648.0 ? (int32_t)r : INT32_MIN; break;
		default: ((int64_t *)p[0])[i] = isfinite(r) && fabs(r) < 9.2e18 ? (int64_t)r : INT64_MIN; break;
		}
	}
}

/* Where: select by element size; the condition is bool. */
#define WLOOP(NAME, T)                                                                         \
	static void NAME(const void *ctx, char *const *p, const int64_t *s, int64_t n)         \
	{                                                                                      \
		T *o = (T *)p[0];                                                              \
		const uint8_t *c = (const uint8_t *)p[1];                                      \
		const T *x = (const T *)p[2], *y = (const T *)p[3];                            \
		int64_t sc = s[1], sx = s[2], sy = s[3];                                       \
		(void)ctx;                                                                     \
		if (sc && sx && sy) {                                                          \
			for (int64_t i = 0; i < n; i++)                                        \
				o[i] = c[i] ? x[i] : y[i];                                     \
		} else if (sc && !sx && sy) {                                                  \
			T xv = x[0];                                                           \
			for (int64_t i = 0; i < n; i++)                                        \
				o[i] = c[i] ? xv : y[i];                                       \
		} else if (sc && sx && !sy) {                                                  \
			T yv = y[0];                                                           \
			for (int64_t i = 0; i < n; i++)                                        \
				o[i] = c[i] ? x[i] : yv;                                       \
		} else {                                                                       \
			for (int64_t i = 0; i < n; i++)                                        \
				o[i] = c[i * sc] ? x[i * sx] : y[i * sy];                      \
		}                                                                              \
	}

WLOOP(where_1, uint8_t)
WLOOP(where_2, uint16_t)
WLOOP(where_4, uint32_t)
WLOOP(where_8, uint64_t)

/* Broadcast copy (variadic ops with one input). */
static void copy_seg(const void *ctx, char *const *p, const int64_t *s, int64_t n)
{
	size_t z = *(const size_t *)ctx;

	if (s[1]) {
		if (p[0] != p[1])
			memmove(p[0], p[1], (size_t)n * z);
		return;
	}
	for (int64_t i = 0; i < n; i++)
		memcpy(p[0] + (size_t)i * z, p[1], z);
}

enum bkind { BK_BINARY, BK_CMP, BK_LOGIC, BK_VARIADIC, BK_PRELU, BK_POW, BK_MOD, BK_WHERE };

struct bdesc {
	const char *name;
	enum bkind kind;
	hpk_seg_fn f32, i32, i64, b8;
	float flops;
};

static const struct bdesc bdescs[] = {
	{ "Add", BK_BINARY, add_f, add_i32, add_i64, NULL, 1 },
	{ "Sub", BK_BINARY, sub_f, sub_i32, sub_i64, NULL, 1 },
	{ "Mul", BK_BINARY, mul_f, mul_i32, mul_i64, NULL, 1 },
	{ "Div", BK_BINARY, div_f, div_i32, div_i64, NULL, 1 },
	{ "Pow", BK_POW, pow_ff, pow_any, pow_any, NULL, 8 },
	{ "Mod", BK_MOD, fmod_f, mod_i32, mod_i64, NULL, 4 },
	{ "PRelu", BK_PRELU, prelu_f, NULL, NULL, NULL, 2 },
	{ "Equal", BK_CMP, eq_f, eq_i32, eq_i64, eq_b, 1 },
	{ "Less", BK_CMP, lt_f, lt_i32, lt_i64, lt_b, 1 },
	{ "Greater", BK_CMP, gt_f, gt_i32, gt_i64, gt_b, 1 },
	{ "LessOrEqual", BK_CMP, le_f, le_i32, le_i64, le_b, 1 },
	{ "GreaterOrEqual", BK_CMP, ge_f, ge_i32, ge_i64, ge_b, 1 },
	{ "And", BK_LOGIC, NULL, NULL, NULL, and_b, 1 },
	{ "Or", BK_LOGIC, NULL, NULL, NULL, or_b, 1 },
	{ "Xor", BK_LOGIC, NULL, NULL, NULL, xor_b, 1 },
	{ "Max", BK_VARIADIC, max_f, max_i32, max_i64, NULL, 1 },
	{ "Min", BK_VARIADIC, min_f, min_i32, min_i64, NULL, 1 },
	{ "Sum", BK_VARIADIC, add_f, NULL, NULL, NULL, 1 },
	{ "Mean", BK_VARIADIC, add_f, NULL, NULL, NULL, 1 },
	{ "Where", BK_WHERE, NULL, NULL, NULL, NULL, 1 },
};

static hpk_seg_fn pick(const struct bdesc *d, enum hp_dtype t)
{
	switch (t) {
	case HP_F32: return d->f32;
	case HP_I32: return d->i32;
	case HP_I64: return d->i64;
	case HP_BOOL: return d->b8;
	default: return NULL;
	}
}

static hpk_seg_fn pick_where(size_t z)
{
	return z == 1 ? where_1 : z == 2 ? where_2 : z == 4 ? where_4 : z == 8 ? where_8 : NULL;
}

static int dtype_error(const struct hp_graph *g, const struct hp_node *n, int i)
{
	const struct hp_value *v = hpk_in(g, n, i), *v0 = hpk_in(g, n, 0);

	return hp_node_error(g, n, HP_ESHAPE, "input %d ('%s') has dtype %s, which %s", i, v->name,
			     hp_dtype_name(v->dtype),
			     i && v->dtype != v0->dtype ? "differs from the other inputs'" : "is not supported");
}

/* Input dtypes and the loop; returns the output dtype or an error. */
static int check_types(const struct hp_graph *g, const struct hp_node *n, struct bpriv *b)
{
	const struct bdesc *d = b->d;
	int first = d->kind == BK_WHERE ? 1 : 0;
	enum hp_dtype t = hpk_in(g, n, first)->dtype;

	for (int i = first + 1; i < n->ninputs; i++)
		if (hpk_in(g, n, i)->dtype != t && d->kind != BK_POW)
			return dtype_error(g, n, i);
	if (d->kind == BK_WHERE) {
		if (hpk_in(g, n, 0)->dtype != HP_BOOL)
			return dtype_error(g, n, 0);
		b->f = pick_where(hp_dtype_size(t));
		return b->f ? (int)t : dtype_error(g, n, 1);
	}
	b->ta = t;
	b->tb = hpk_in(g, n, n->ninputs - 1)->dtype;
	if (d->kind == BK_POW) {
		if ((t != HP_F32 && t != HP_I32 && t != HP_I64) ||
		    (b->tb != HP_F32 && b->tb != HP_I32 && b->tb != HP_I64))
			return dtype_error(g, n, t == HP_F32 || t == HP_I32 || t == HP_I64 ? 1 : 0);
		b->f = t == HP_F32 && b->tb == HP_F32 ? pow_ff : pow_any;
		return t;
	}
	if (d->kind == BK_MOD && t != HP_F32 && hp_attr_int(n, "fmod", 0))
		b->f = t == HP_I32 ? cmod_i32 : t == HP_I64 ? cmod_i64 : NULL;
	else if (d->kind == BK_MOD && t == HP_F32 && !hp_attr_int(n, "fmod", 0))
		return hp_node_error(g, n, HP_EMODEL, "float Mod needs fmod=1");
	else
		b->f = pick(d, t);
	if (!b->f)
		return dtype_error(g, n, 0);
	return d->kind == BK_CMP ? HP_BOOL : (int)t;
}

int hpk_binary_prepare(struct hp_graph *g, struct hp_node *n)
{
	const struct hp_shape *shapes[HPK_MAX_VARIADIC];
	struct hp_value *y = hpk_out(g, n, 0);
	struct bpriv *b;
	int rc, nin = n->ninputs;

	if (!y || nin > HPK_MAX_VARIADIC)
		return hp_node_error(g, n, HP_EMODEL, "missing output or too many inputs");
	for (int i = 0; i < nin; i++) {
		if (!hpk_in(g, n, i))
			return hp_node_error(g, n, HP_EMODEL, "input %d is omitted", i);
		shapes[i] = &hpk_in(g, n, i)->shape;
	}
	if (!(b = calloc(1, sizeof *b)))
		return hp_node_error(g, n, -ENOMEM, "out of memory");
	n->priv = b;
	for (size_t i = 0; i < sizeof bdescs / sizeof bdescs[0] && !b->d; i++)
		if (!strcmp(bdescs[i].name, n->op_type))
			b->d = &bdescs[i];
	if (!b->d)
		return hp_node_error(g, n, HP_EINTERNAL, "not a broadcasting operator");
	if ((rc = check_types(g, n, b)) < 0)
		return rc;
	y->dtype = (enum hp_dtype)rc;
	if ((rc = hpk_bcast_shape(g, n, shapes, nin, &y->shape)) < 0)
		return rc;
	if (b->d->kind == BK_PRELU && !hp_shape_equal(&y->shape, shapes[0]))
		return hp_node_error(g, n, HP_ESHAPE, "slope does not broadcast to X's shape (unidirectionally)");
	return 0;
}

/* out = in[0] op in[1] op ... , pairwise into the full output shape. */
static void run_variadic(const struct bpriv *b, const struct hp_kargs *a)
{
	const struct hp_tensor *ops[2];
	const void *data[2];
	struct hp_tensor acc = a->out[0];
	struct hpk_bcast plan;
	size_t z = hp_dtype_size(acc.dtype);

	if (a->nin == 1) {
		ops[0] = &a->in[0];
		data[0] = a->in[0].data;
		hpk_bcast_plan(&plan, &acc.shape, ops, 1, z);
		hpk_bcast_run(a->pool, &plan, acc.data, data, copy_seg, &z);
		return;
	}
	for (int i = 1; i < a->nin; i++) {
		ops[0] = i == 1 ? &a->in[0] : &acc;
		ops[1] = &a->in[i];
		data[0] = ops[0]->data;
		data[1] = ops[1]->data;
		hpk_bcast_plan(&plan, &acc.shape, ops, 2, z);
		hpk_bcast_run(a->pool, &plan, acc.data, data, b->f, b);
	}
}

static void div_n(void *arg, int64_t begin, int64_t end, int tid)
{
	const struct hp_kargs *a = arg;
	float *y = a->out[0].data, d = (float)a->nin;

	(void)tid;
	for (int64_t i = begin; i < end; i++)
		y[i] /= d;
}

int hpk_binary_run(const struct hp_node *n, const struct hp_kargs *a)
{
	const struct bpriv *b = n->priv;
	const struct hp_tensor *ops[HPK_BC_MAXIN];
	const void *data[HPK_BC_MAXIN];
	struct hpk_bcast plan;
	hpk_seg_fn f = b->f;

	if (b->d->kind == BK_VARIADIC) {
		run_variadic(b, a);
		if (!strcmp(b->d->name, "Mean"))
			hp_parallel_for(a->pool, hp_shape_numel(&a->out[0].shape), HPK_GRAIN, div_n, (void *)a);
		return 0;
	}
	for (int i = 0; i < a->nin; i++) {
		ops[i] = &a->in[i];
		data[i] = a->in[i].data;
	}
	if (f == pow_ff && hp_shape_numel(&a->in[1].shape) == 1 && *(const float *)a->in[1].data == 2.0f)
		f = pow_f2;
	hpk_bcast_plan(&plan, &a->out[0].shape, ops, a->nin, hp_dtype_size(a->out[0].dtype));
	hpk_bcast_run(a->pool, &plan, a->out[0].data, data, f, b);
	return 0;
}

double hpk_binary_flops(const struct hp_graph *g, const struct hp_node *n)
{
	const struct bpriv *b = n->priv;
	const struct hp_value *y = hpk_cout(g, n, 0);
	double per = b ? b->d->flops : 1;

	if (!y)
		return 0;
	if (b && b->d->kind == BK_VARIADIC)
		per *= n->ninputs > 1 ? n->ninputs - 1 : 1;
	return (double)hp_shape_numel(&y->shape) * per;
}
