/* Unary element-wise operators: activations, math functions, Clip, Not,
 * IsNaN/IsInf.  One descriptor per operator names its loop per dtype. */
#include <errno.h>
#include <float.h>
#include <inttypes.h>
#include <stdlib.h>

#include "kernels/eltwise_impl.h"
#include "kernels/sigmoid512.h"

struct upar {
	float alpha, beta, gamma;
	union hpk_scalar lo, hi; /* Clip, in X's dtype */
	int neg, pos;            /* IsInf */
};

typedef void (*ufn)(const struct upar *p, const void *x, void *y, int64_t n);

struct udesc {
	const char *name;
	ufn fn[HPK_NDTYPES]; /* by input dtype */
	enum hp_dtype out;  /* HP_UNDEFINED: the input's dtype */
	float flops;        /* per element */
	float alpha, beta, gamma; /* attribute defaults */
};

struct upriv {
	const struct udesc *d;
	struct upar p;
	int clip_inputs;    /* Clip takes min/max from inputs 1, 2 */
};

#define LOOP(NAME, TX, TY, EXPR)                                                    \
	HPK_SIMD static void NAME(const struct upar *pv, const void *vx, void *vy, int64_t n) \
	{                                                                           \
		const struct upar par = *pv, *p = &par; /* not aliased by y */      \
		const TX *x = vx;                                                   \
		TY *y = vy;                                                         \
		(void)p;                                                            \
		for (int64_t i = 0; i < n; i++) {                                   \
			TX v = x[i];                                                \
			y[i] = (EXPR);                                              \
		}                                                                   \
	}

#define LOOP_F(NAME, EXPR) LOOP(NAME, float, float, EXPR)

/* max(0, x) keeping NaN (as ONNX's np.clip reference): one maxps */
LOOP_F(relu_f, v < 0.0f ? 0.0f : v)
LOOP_F(leaky_f, v * (v >= 0.0f ? 1.0f : p->alpha))
/* AVX-512 vectors by sigmoid512.c (the same bits), the rest here */
HPK_SIMD static void sigmoid_f(const struct upar *p, const void *vx, void *vy, int64_t n)
{
	const float *x = vx;
	float *y = vy;

	(void)p;
	for (int64_t i = hpk_sigmoid512(x, y, n, 0); i < n; i++)
		y[i] = hpk_sigmoidf(x[i]);
}
LOOP_F(tanh_f, hpk_tanhf(v))
/* max(0, min(1, t)) keeping NaN, as selects the compiler vectorizes */
static inline float sat01(float t)
{
	t = t < 0.0f ? 0.0f : t;
	return t > 1.0f ? 1.0f : t;
}

LOOP_F(hsig_f, sat01(p->alpha * v + p->beta))
LOOP_F(hswish_f, v * sat01(v * (1.0f / 6.0f) + 0.5f))
LOOP_F(erf_f, hpk_erff(v))
LOOP_F(exp_f, hpk_expf(v))
LOOP_F(log_f, logf(v))
LOOP_F(neg_f, -v)
LOOP_F(abs_f, fabsf(v))
LOOP_F(sqrt_f, sqrtf(v))
LOOP_F(recip_f, 1.0f / v)
LOOP_F(floor_f, floorf(v))
LOOP_F(ceil_f, ceilf(v))
LOOP_F(round_f, nearbyintf(v)) /* ties to even in the default rounding mode */
LOOP_F(elu_f, v > 0.0f ? v : p->alpha * expm1f(v))
LOOP_F(selu_f, p->gamma * (v > 0.0f ? v : p->alpha * expm1f(v)))
LOOP_F(softplus_f, fmaxf(v, 0.0f) + log1pf(expf(-fabsf(v))))
LOOP_F(softsign_f, v / (1.0f + fabsf(v)))
LOOP_F(thrrelu_f, v > p->alpha ? v : 0.0f)
LOOP_F(sign_f, v > 0.0f ? 1.0f : v < 0.0f ? -1.0f : v) /* keeps NaN and -0 */
LOOP_F(sin_f, sinf(v))
LOOP_F(cos_f, cosf(v))
LOOP_F(tan_f, tanf(v))
LOOP_F(asin_f, asinf(v))
LOOP_F(acos_f, acosf(v))
LOOP_F(atan_f, atanf(v))
LOOP_F(sinh_f, sinhf(v))
LOOP_F(cosh_f, coshf(v))
LOOP_F(asinh_f, asinhf(v))
LOOP_F(acosh_f, acoshf(v))
LOOP_F(atanh_f, atanhf(v))
/* max(0, x) + min(0, alpha (e^(x/alpha) - 1)) */
LOOP_F(celu_f, v > 0.0f ? v : p->alpha * expm1f(v / p->alpha))
/* Shrink: alpha holds lambd, beta bias (attributes read in prepare) */
LOOP_F(shrink_f, v < -p->alpha ? v + p->beta : v > p->alpha ? v - p->beta : 0.0f)

/* Integer and float64 forms over typegen.h's types; signed integers wrap
 * (-MIN is MIN) through the unsigned type W. */
#define DEF_SIGNED(A, S, T, D, W, LO, HI)                                   \
	LOOP(relu_##S, T, T, v < 0 ? 0 : v)                                 \
	LOOP(neg_##S, T, T, (T)((W)0 - (W)v))                               \
	LOOP(abs_##S, T, T, v < 0 ? (T)((W)0 - (W)v) : v)                   \
	LOOP(sign_##S, T, T, (T)((v > 0) - (v < 0)))
#define DEF_UNSIGNED(A, S, T, D, W, LO, HI)                                 \
	LOOP(relu_##S, T, T, v)                                             \
	LOOP(abs_##S, T, T, v)                                              \
	LOOP(sign_##S, T, T, (T)(v > 0))
HPK_SINT(DEF_SIGNED, _)
HPK_UINT(DEF_UNSIGNED, _)
LOOP(relu_f64, double, double, v < 0.0 ? 0.0 : v)
LOOP(neg_f64, double, double, -v)
LOOP(abs_f64, double, double, fabs(v))
LOOP(sign_f64, double, double, v > 0.0 ? 1.0 : v < 0.0 ? -1.0 : v)

/* Clip is min(max(x, lo), hi): hi wins when lo > hi; NaN passes through. */
#define CLIP(v, lo, hi) ((v) < (lo) ? ((lo) > (hi) ? (hi) : (lo)) : (v) > (hi) ? (hi) : (v))
#define DEF_CLIP(A, S, T, D, W, LO, HI) LOOP(clip_##S, T, T, CLIP(v, p->lo.S, p->hi.S))
HPK_NUM(DEF_CLIP, _)
LOOP(not_b, uint8_t, uint8_t, !v)
LOOP(isnan_f, float, uint8_t, isnan(v) ? 1 : 0)
LOOP(isinf_f, float, uint8_t, isinf(v) && (v > 0 ? p->pos : p->neg))

static const float selu_alpha = 1.67326319217681884765625f, selu_gamma = 1.05070102214813232421875f;

#define F32(f) { [HP_F32] = f }
#define INTS(A) HPK_INT(HPK_FN_ENTRY, A) [HP_F64] = A##_f64

static const struct udesc udescs[] = {
	{ "Relu", { [HP_F32] = relu_f, INTS(relu) }, 0, 1, 0, 0, 0 },
	{ "LeakyRelu", F32(leaky_f), 0, 2, 0.01f, 0, 0 },
	{ "Sigmoid", F32(sigmoid_f), 0, 8, 0, 0, 0 },
	{ "Tanh", F32(tanh_f), 0, 12, 0, 0, 0 },
	{ "HardSigmoid", F32(hsig_f), 0, 4, 0.2f, 0.5f, 0 },
	{ "HardSwish", F32(hswish_f), 0, 5, 0, 0, 0 },
	{ "Erf", F32(erf_f), 0, 16, 0, 0, 0 },
	{ "Exp", F32(exp_f), 0, 8, 0, 0, 0 },
	{ "Log", F32(log_f), 0, 8, 0, 0, 0 },
	{ "Neg", { [HP_F32] = neg_f, HPK_SINT(HPK_FN_ENTRY, neg) [HP_F64] = neg_f64 }, 0, 1, 0, 0, 0 },
	{ "Abs", { [HP_F32] = abs_f, INTS(abs) }, 0, 1, 0, 0, 0 },
	{ "Sqrt", F32(sqrt_f), 0, 4, 0, 0, 0 },
	{ "Reciprocal", F32(recip_f), 0, 1, 0, 0, 0 },
	{ "Floor", F32(floor_f), 0, 1, 0, 0, 0 },
	{ "Ceil", F32(ceil_f), 0, 1, 0, 0, 0 },
	{ "Round", F32(round_f), 0, 1, 0, 0, 0 },
	{ "Elu", F32(elu_f), 0, 8, 1.0f, 0, 0 },
	{ "Selu", F32(selu_f), 0, 9, selu_alpha, 0, selu_gamma },
	{ "Softplus", F32(softplus_f), 0, 16, 0, 0, 0 },
	{ "Softsign", F32(softsign_f), 0, 3, 0, 0, 0 },
	{ "ThresholdedRelu", F32(thrrelu_f), 0, 1, 1.0f, 0, 0 },
	{ "Sign", { [HP_F32] = sign_f, INTS(sign) }, 0, 1, 0, 0, 0 },
	{ "Sin", F32(sin_f), 0, 8, 0, 0, 0 },
	{ "Cos", F32(cos_f), 0, 8, 0, 0, 0 },
	{ "Tan", F32(tan_f), 0, 8, 0, 0, 0 },
	{ "Asin", F32(asin_f), 0, 8, 0, 0, 0 },
	{ "Acos", F32(acos_f), 0, 8, 0, 0, 0 },
	{ "Atan", F32(atan_f), 0, 8, 0, 0, 0 },
	{ "Sinh", F32(sinh_f), 0, 8, 0, 0, 0 },
	{ "Cosh", F32(cosh_f), 0, 8, 0, 0, 0 },
	{ "Asinh", F32(asinh_f), 0, 8, 0, 0, 0 },
	{ "Acosh", F32(acosh_f), 0, 8, 0, 0, 0 },
	{ "Atanh", F32(atanh_f), 0, 8, 0, 0, 0 },
	{ "Celu", F32(celu_f), 0, 8, 1.0f, 0, 0 },
	{ "Shrink", F32(shrink_f), 0, 2, 0.5f, 0, 0 },
	{ "Clip", { HPK_NUM(HPK_FN_ENTRY, clip) }, 0, 1, 0, 0, 0 },
	{ "Not", { [HP_BOOL] = not_b }, 0, 1, 0, 0, 0 },
	{ "IsNaN", F32(isnan_f), HP_BOOL, 1, 0, 0, 0 },
	{ "IsInf", F32(isinf_f), HP_BOOL, 1, 0, 0, 0 },
};

static const struct udesc *find_desc(const char *name)
{
	for (size_t i = 0; i < sizeof udescs / sizeof udescs[0]; i++)
		if (!strcmp(udescs[i].name, name))
			return &udescs[i];
	return NULL;
}

static ufn pick(const struct udesc *d, enum hp_dtype t)
{
	return (unsigned)t < HPK_NDTYPES ? d->fn[t] : NULL;
}

/* Clip's default bounds: the range of dtype t. */
static void type_range(enum hp_dtype t, union hpk_scalar *lo, union hpk_scalar *hi)
{
	switch (t) {
#define RANGE(A, S, T, D, W, LO, HI) case D: lo->S = LO; hi->S = HI; break;
	HPK_NUM(RANGE, _)
#undef RANGE
	default: break;
	}
}

/* A float bound v as dtype t; integers take the nearest value inside the
 * clip range (ceil for min, floor for max), saturated to the type.  NaN
 * leaves the bound as it was. */
static void bound_from_double(enum hp_dtype t, double v, int is_lo, union hpk_scalar *s)
{
	if (isnan(v))
		return;
	if (t == HP_F32 || t == HP_F64) {
		*s = t == HP_F32 ? (union hpk_scalar){ .f32 = (float)v } : (union hpk_scalar){ .f64 = v };
		return;
	}
	v = is_lo ? ceil(v) : floor(v);
	switch (t) {
#define SAT(A, S, T, D, W, LO, HI) case D: s->S = v <= (double)LO ? LO : v >= (double)HI ? HI : (T)v; break;
	HPK_INT(SAT, _)
#undef SAT
	default: break;
	}
}

/* Clip: min/max as attributes (opset < 11) or scalar inputs 1 and 2, of
 * X's type or (as the importer makes them from attributes) float32. */
static int clip_prepare(const struct hp_graph *g, const struct hp_node *n, struct upriv *u, enum hp_dtype t)
{
	const struct hp_attr *amin = hp_node_attr(n, "min"), *amax = hp_node_attr(n, "max");

	type_range(t, &u->p.lo, &u->p.hi);
	if (amin)
		bound_from_double(t, hp_attr_float(n, "min", 0), 1, &u->p.lo);
	if (amax)
		bound_from_double(t, hp_attr_float(n, "max", 0), 0, &u->p.hi);
	for (int i = 1; i < n->ninputs; i++) {
		const struct hp_value *v = hpk_in(g, n, i);
		if (!v)
			continue;
		if ((v->dtype != t && v->dtype != HP_F32) || hp_shape_numel(&v->shape) != 1)
			return hp_node_error(g, n, HP_ESHAPE, "%s must be a scalar %s, got %s of %" PRId64 " elements",
					     i == 1 ? "min" : "max", hp_dtype_name(t), hp_dtype_name(v->dtype),
					     hp_shape_numel(&v->shape));
		u->clip_inputs = 1;
	}
	return 0;
}

int hpk_unary_prepare(struct hp_graph *g, struct hp_node *n)
{
	const struct hp_value *x = hpk_in(g, n, 0);
	struct hp_value *y = hpk_out(g, n, 0);
	const struct udesc *d = find_desc(n->op_type);
	struct upriv *u;
	int rc = 0;

	if (!d || !x || !y)
		return hp_node_error(g, n, HP_EINTERNAL, "not a unary operator or missing input/output");
	if (!pick(d, x->dtype))
		return hp_node_error(g, n, HP_EUNSUPPORTED, "input dtype %s is not supported",
				     hp_dtype_name(x->dtype));
	u = calloc(1, sizeof *u);
	if (!u)
		return hp_node_error(g, n, -ENOMEM, "out of memory");
	u->d = d;
	u->p.alpha = hp_attr_float(n, "alpha", d->alpha);
	u->p.beta = hp_attr_float(n, "beta", d->beta);
	u->p.gamma = hp_attr_float(n, "gamma", d->gamma);
	if (!strcmp(d->name, "Shrink")) {
		u->p.alpha = hp_attr_float(n, "lambd", d->alpha);
		u->p.beta = hp_attr_float(n, "bias", 0.0f);
	}
	u->p.neg = (int)hp_attr_int(n, "detect_negative", 1);
	u->p.pos = (int)hp_attr_int(n, "detect_positive", 1);
	n->priv = u;
	if (!strcmp(d->name, "Clip"))
		rc = clip_prepare(g, n, u, x->dtype);
	if (rc < 0)
		return rc;
	y->dtype = d->out ? d->out : x->dtype;
	y->shape = x->shape;
	return 0;
}

struct urun {
	ufn f;
	const struct upar *p;
	const char *x;
	char *y;
	size_t sx, sy;
};

static void urange(void *arg, int64_t b, int64_t e, int tid)
{
	const struct urun *r = arg;

	(void)tid;
	r->f(r->p, r->x + (size_t)b * r->sx, r->y + (size_t)b * r->sy, e - b);
}

static void clip_bounds(const struct hp_kargs *a, struct upar *p)
{
	enum hp_dtype t = a->in[0].dtype;

	for (int i = 1; i < a->nin; i++) {
		const struct hp_tensor *b = &a->in[i];
		union hpk_scalar *s = i == 1 ? &p->lo : &p->hi;
		if (!b->data)
			continue;
		if (b->dtype == t)
			memcpy(s, b->data, hp_dtype_size(t));
		else
			bound_from_double(t, *(const float *)b->data, i == 1, s);
	}
}

int hpk_unary_run(const struct hp_node *n, const struct hp_kargs *a)
{
	const struct upriv *u = n->priv;
	struct upar p = u->p;
	struct urun r = { .p = &p, .x = a->in[0].data, .y = a->out[0].data };

	if (u->clip_inputs)
		clip_bounds(a, &p);
	r.f = pick(u->d, a->in[0].dtype);
	r.sx = hp_dtype_size(a->in[0].dtype);
	r.sy = hp_dtype_size(a->out[0].dtype);
	hp_parallel_for(a->pool, hp_shape_numel(&a->in[0].shape), HPK_GRAIN, urange, &r);
	return 0;
}

double hpk_unary_flops(const struct hp_graph *g, const struct hp_node *n)
{
	const struct upriv *u = n->priv;
	const struct hp_value *x = hpk_in(g, n, 0);

	return x ? (double)hp_shape_numel(&x->shape) * (u ? u->d->flops : 1) : 0;
}
