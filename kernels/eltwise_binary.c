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

/* Same-type arithmetic over every numeric dtype (typegen.h): integers wrap
 * (computed in the unsigned type W), floats round as usual. */
#define DEF_WRAP(A, S, T, D, W, LO, HI)                       \
	BLOOP(add_##S, T, T, T, (T)((W)a + (W)b))             \
	BLOOP(sub_##S, T, T, T, (T)((W)a - (W)b))             \
	BLOOP(mul_##S, T, T, T, (T)((W)a * (W)b))
HPK_NUM(DEF_WRAP, _)

/* Integer division truncates; x/0 gives 0 and MIN/-1 wraps instead of trapping. */
#define DEF_DIV_S(A, S, T, D, W, LO, HI) \
	BLOOP(div_##S, T, T, T, b == 0 ? (T)0 : b == -1 ? (T)((W)0 - (W)a) : (T)(a / b))
#define DEF_DIV_U(A, S, T, D, W, LO, HI) BLOOP(div_##S, T, T, T, b == 0 ? (T)0 : (T)(a / b))
#define DEF_DIV_F(A, S, T, D, W, LO, HI) BLOOP(div_##S, T, T, T, a / b)
HPK_SINT(DEF_DIV_S, _)
HPK_UINT(DEF_DIV_U, _)
HPK_FLT(DEF_DIV_F, _)

/* Max/Min; floats propagate NaN, as numpy's maximum/minimum. */
#define DEF_MINMAX_I(A, S, T, D, W, LO, HI)           \
	BLOOP(max_##S, T, T, T, a > b ? a : b)        \
	BLOOP(min_##S, T, T, T, a < b ? a : b)
#define DEF_MINMAX_F(A, S, T, D, W, LO, HI)                   \
	BLOOP(max_##S, T, T, T, a >= b || a != a ? a : b)     \
	BLOOP(min_##S, T, T, T, a <= b || a != a ? a : b)
HPK_INT(DEF_MINMAX_I, _)
HPK_FLT(DEF_MINMAX_F, _)

/* PRelu for the signed types (an unsigned x is never negative: identity). */
#define DEF_PRELU_S(A, S, T, D, W, LO, HI) BLOOP(prelu_##S, T, T, T, a < 0 ? (T)((W)a * (W)b) : a)
#define DEF_PRELU_F(A, S, T, D, W, LO, HI) BLOOP(prelu_##S, T, T, T, a < 0 ? a * b : a)
HPK_SINT(DEF_PRELU_S, _)
HPK_FLT(DEF_PRELU_F, _)

#define DEF_CMP(A, S, T, D, W, LO, HI)                \
	BLOOP(eq_##S, T, T, uint8_t, a == b)          \
	BLOOP(lt_##S, T, T, uint8_t, a < b)           \
	BLOOP(gt_##S, T, T, uint8_t, a > b)           \
	BLOOP(le_##S, T, T, uint8_t, a <= b)          \
	BLOOP(ge_##S, T, T, uint8_t, a >= b)
HPK_NUM(DEF_CMP, _)
DEF_CMP(_, b, uint8_t, HP_BOOL, uint32_t, 0, 1)
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

#define DEF_MOD_S(A, S, T, D, W, LO, HI)                               \
	BLOOP(mod_##S, T, T, T, (T)imod(a, b, 0))                      \
	BLOOP(cmod_##S, T, T, T, (T)imod(a, b, 1))
#define DEF_MOD_U(A, S, T, D, W, LO, HI)                               \
	BLOOP(mod_##S, T, T, T, b == 0 ? (T)0 : (T)(a % b))            \
	BLOOP(cmod_##S, T, T, T, b == 0 ? (T)0 : (T)(a % b))
HPK_SINT(DEF_MOD_S, _)
HPK_UINT(DEF_MOD_U, _)
BLOOP(cmod_f32, float, float, float, fmodf(a, b))
BLOOP(cmod_f64, double, double, double, fmod(a, b))

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
	case HP_F64: return *(const double *)p; /* the exponent may be any numeric type */
	case HP_I8: return *(const int8_t *)p;
	case HP_U8: return *(const uint8_t *)p;
	case HP_I16: return *(const int16_t *)p;
	case HP_U16: return *(const uint16_t *)p;
	case HP_U32: return *(const uint32_t *)p;
	case HP_U64: return (double)*(const uint64_t *)p;
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
	hpk_seg_fn fn[HPK_NDTYPES]; /* by input dtype */
	float flops;
};

#define NUM(A) { HPK_NUM(HPK_FN_ENTRY, A) }
#define SIGNED(A) { HPK_SINT(HPK_FN_ENTRY, A) HPK_FLT(HPK_FN_ENTRY, A) }
#define CMP(A) { HPK_NUM(HPK_FN_ENTRY, A) [HP_BOOL] = A##_b }

static const struct bdesc bdescs[] = {
	{ "Add", BK_BINARY, NUM(add), 1 },
	{ "Sub", BK_BINARY, NUM(sub), 1 },
	{ "Mul", BK_BINARY, NUM(mul), 1 },
	{ "Div", BK_BINARY, NUM(div), 1 },
	{ "Pow", BK_POW, { [HP_F32] = pow_ff, [HP_I32] = pow_any, [HP_I64] = pow_any }, 8 },
	{ "Mod", BK_MOD, { HPK_INT(HPK_FN_ENTRY, mod) }, 4 },
	{ "PRelu", BK_PRELU, SIGNED(prelu), 2 },
	{ "Equal", BK_CMP, CMP(eq), 1 },
	{ "Less", BK_CMP, CMP(lt), 1 },
	{ "Greater", BK_CMP, CMP(gt), 1 },
	{ "LessOrEqual", BK_CMP, CMP(le), 1 },
	{ "GreaterOrEqual", BK_CMP, CMP(ge), 1 },
	{ "And", BK_LOGIC, { [HP_BOOL] = and_b }, 1 },
	{ "Or", BK_LOGIC, { [HP_BOOL] = or_b }, 1 },
	{ "Xor", BK_LOGIC, { [HP_BOOL] = xor_b }, 1 },
	{ "Max", BK_VARIADIC, NUM(max), 1 },
	{ "Min", BK_VARIADIC, NUM(min), 1 },
	{ "Sum", BK_VARIADIC, NUM(add), 1 },
	{ "Mean", BK_VARIADIC, { [HP_F32] = add_f32, [HP_F64] = add_f64 }, 1 },
	{ "Where", BK_WHERE, { 0 }, 1 },
};

/* Mod with fmod=1: C's truncating remainder (the only form floats have). */
static const hpk_seg_fn cmod_fns[HPK_NDTYPES] = NUM(cmod);

static hpk_seg_fn pick(const hpk_seg_fn *fn, enum hp_dtype t)
{
	return (unsigned)t < HPK_NDTYPES ? fn[t] : NULL;
}

static hpk_seg_fn pick_where(size_t z)
{
	return z == 1 ? where_1 : z == 2 ? where_2 : z == 4 ? where_4 : z == 8 ? where_8 : NULL;
}

/* A dtype no loop exists for is unsupported; inputs that disagree are a
 * malformed model. */
static int dtype_error(const struct hp_graph *g, const struct hp_node *n, int i)
{
	const struct hp_value *v = hpk_in(g, n, i), *v0 = hpk_in(g, n, 0);

	if (i && v->dtype != v0->dtype)
		return hp_node_error(g, n, HP_ESHAPE, "input %d ('%s') has dtype %s, which differs from input 0's (%s)",
				     i, v->name, hp_dtype_name(v->dtype), hp_dtype_name(v0->dtype));
	return hp_node_error(g, n, HP_EUNSUPPORTED, "input %d ('%s') has dtype %s, which is not supported", i,
			     v->name, hp_dtype_name(v->dtype));
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
			return hp_node_error(g, n, HP_ESHAPE, "condition has dtype %s, not bool",
					     hp_dtype_name(hpk_in(g, n, 0)->dtype));
		b->f = pick_where(hp_dtype_size(t));
		return b->f ? (int)t : dtype_error(g, n, 1);
	}
	b->ta = t;
	b->tb = hpk_in(g, n, n->ninputs - 1)->dtype;
	if (d->kind == BK_POW) {
		if (!pick(d->fn, t))
			return dtype_error(g, n, 0);
		if (b->tb == HP_BOOL || b->tb == HP_STRING || b->tb == HP_F16 || b->tb == HP_BF16 || !hp_dtype_size(b->tb))
			return dtype_error(g, n, 1);
		b->f = t == HP_F32 && b->tb == HP_F32 ? pow_ff : pow_any;
		return t;
	}
	if (d->kind == BK_MOD && hp_attr_int(n, "fmod", 0))
		b->f = pick(cmod_fns, t);
	else if (d->kind == BK_MOD && (t == HP_F32 || t == HP_F64))
		return hp_node_error(g, n, HP_EMODEL, "floating-point Mod needs fmod=1");
	else
		b->f = pick(d->fn, t);
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

	(void)tid;
	if (a->out[0].dtype == HP_F64) {
		double *y = a->out[0].data, d = a->nin;
		for (int64_t i = begin; i < end; i++)
			y[i] /= d;
		return;
	}
	float *y = a->out[0].data, d = (float)a->nin;
	for (int64_t i = begin; i < end; i++)
		y[i] /= d;
}

/* Float Mul of rows by one value each ([N, C, H, W] by [N, C, 1, 1]: the
 * squeeze-and-excitation blocks' scale): the walker's call per segment of
 * a plane cost more than the products at planes of 9 to 144 (EfficientNet-
 * B0's and MobileNetV3's late blocks, ~1 ns an element).  The same
 * products, each operand on its own side. */
struct rowmul {
	float *o;
	const float *x, *v;  /* rows of n; one value per row */
	int64_t n;
	int v_first;         /* Mul(v, x): v * x, as mul_f32 computes a * b */
};

HPK_SIMD static void rowmul_range(void *arg, int64_t b, int64_t e, int tid)
{
	const struct rowmul *r = arg;
	const int64_t n = r->n;

	(void)tid;
	for (int64_t row = b; row < e; row++) {
		const float *x = r->x + row * n, v = r->v[row];
		float *o = r->o + row * n;
		if (r->v_first)
			for (int64_t i = 0; i < n; i++)
				o[i] = v * x[i];
		else
			for (int64_t i = 0; i < n; i++)
				o[i] = x[i] * v;
	}
}

/* The row path for a coalesced [rows, n] plan whose operands are the rows
 * and one value per row, n below a few vectors; 0 if not. */
static int rowmul_run(const struct hpk_bcast *p, const struct hp_kargs *a)
{
	int k;

	if (p->rank != 2 || p->dims[1] > 256 || p->strides[0][0] != p->dims[1] || p->strides[0][1] != 1)
		return 0;
	for (k = 1; k <= 2; k++)
		if (p->strides[k][0] == 1 && p->strides[k][1] == 0 && p->strides[3 - k][0] == p->dims[1] &&
		    p->strides[3 - k][1] == 1)
			break;
	if (k > 2)
		return 0;
	struct rowmul r = { .o = a->out[0].data, .x = a->in[2 - k].data, .v = a->in[k - 1].data, .n = p->dims[1],
			    .v_first = k == 1 };
	hp_parallel_for(a->pool, p->dims[0], HPK_GRAIN / p->dims[1] + 1, rowmul_range, &r);
	return 1;
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
	if (f == mul_f32 && a->nin == 2 && rowmul_run(&plan, a))
		return 0;
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
