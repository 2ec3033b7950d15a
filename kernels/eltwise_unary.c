/* Unary element-wise operators: activations, math functions, Clip, Not,
 * IsNaN/IsInf.  One descriptor per operator names its loop per dtype. */
#include <errno.h>
#include <float.h>
#include <inttypes.h>
#include <stdlib.h>

#include "kernels/eltwise_impl.h"

struct upar {
	float alpha, beta, gamma;
	float lo, hi;        /* Clip, float */
	int64_t ilo, ihi;    /* Clip, integers */
	int neg, pos;        /* IsInf */
};

typedef void (*ufn)(const struct upar *p, const void *x, void *y, int64_t n);

struct udesc {
	const char *name;
	ufn f32, i32, i64, b8;
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

LOOP_F(relu_f, v > 0.0f ? v : 0.0f)
LOOP(relu_i32, int32_t, int32_t, v > 0 ? v : 0)
LOOP(relu_i64, int64_t, int64_t, v > 0 ? v : 0)
LOOP_F(leaky_f, v * (v >= 0.0f ? 1.0f : p->alpha))
LOOP_F(sigmoid_f, hpk_sigmoidf(v))
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
LOOP(neg_i32, int32_t, int32_t, (int32_t)(0u - (uint32_t)v))
LOOP(neg_i64, int64_t, int64_t, (int64_t)(0u - (uint64_t)v))
LOOP_F(abs_f, fabsf(v))
LOOP(abs_i32, int32_t, int32_t, v < 0 ? (int32_t)(0u - (uint32_t)v) : v)
LOOP(abs_i64, int64_t, int64_t, v < 0 ? (int64_t)(0u - (uint64_t)v) : v)
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
LOOP(sign_i32, int32_t, int32_t, (int32_t)((v > 0) - (v < 0)))
LOOP(sign_i64, int64_t, int64_t, (int64_t)((v > 0) - (v < 0)))
LOOP_F(sin_f, sinf(v))
LOOP_F(cos_f, cosf(v))
/* Clip is min(max(x, lo), hi): hi wins when lo > hi; NaN passes through. */
#define CLIP(v, lo, hi) ((v) < (lo) ? ((lo) > (hi) ? (hi) : (lo)) : (v) > (hi) ? (hi) : (v))
LOOP_F(clip_f, CLIP(v, p->lo, p->hi))
LOOP(clip_i32, int32_t, int32_t, (int32_t)CLIP((int64_t)v, p->ilo, p->ihi))
LOOP(clip_i64, int64_t, int64_t, CLIP(v, p->ilo, p->ihi))
LOOP(not_b, uint8_t, uint8_t, !v)
LOOP(isnan_f, float, uint8_t, isnan(v) ? 1 : 0)
LOOP(isinf_f, float, uint8_t, isinf(v) && (v > 0 ? p->pos : p->neg))

static const float selu_alpha = 1.67326319217681884765625f, selu_gamma = 1.05070102214813232421875f;

static const struct udesc udescs[] = {
	{ "Relu", relu_f, relu_i32, relu_i64, NULL, 0, 1, 0, 0, 0 },
	{ "LeakyRelu", leaky_f, NULL, NULL, NULL, 0, 2, 0.01f, 0, 0 },
	{ "Sigmoid", sigmoid_f, NULL, NULL, NULL, 0, 8, 0, 0, 0 },
	{ "Tanh", tanh_f, NULL, NULL, NULL, 0, 12, 0, 0, 0 },
	{ "HardSigmoid", hsig_f, NULL, NULL, NULL, 0, 4, 0.2f, 0.5f, 0 },
	{ "HardSwish", hswish_f, NULL, NULL, NULL, 0, 5, 0, 0, 0 },
	{ "Erf", erf_f, NULL, NULL, NULL, 0, 16, 0, 0, 0 },
	{ "Exp", exp_f, NULL, NULL, NULL, 0, 8, 0, 0, 0 },
	{ "Log", log_f, NULL, NULL, NULL, 0, 8, 0, 0, 0 },
	{ "Neg", neg_f, neg_i32, neg_i64, NULL, 0, 1, 0, 0, 0 },
	{ "Abs", abs_f, abs_i32, abs_i64, NULL, 0, 1, 0, 0, 0 },
	{ "Sqrt", sqrt_f, NULL, NULL, NULL, 0, 4, 0, 0, 0 },
	{ "Reciprocal", recip_f, NULL, NULL, NULL, 0, 1, 0, 0, 0 },
	{ "Floor", floor_f, NULL, NULL, NULL, 0, 1, 0, 0, 0 },
	{ "Ceil", ceil_f, NULL, NULL, NULL, 0, 1, 0, 0, 0 },
	{ "Round", round_f, NULL, NULL, NULL, 0, 1, 0, 0, 0 },
	{ "Elu", elu_f, NULL, NULL, NULL, 0, 8, 1.0f, 0, 0 },
	{ "Selu", selu_f, NULL, NULL, NULL, 0, 9, selu_alpha, 0, selu_gamma },
	{ "Softplus", softplus_f, NULL, NULL, NULL, 0, 16, 0, 0, 0 },
	{ "Softsign", softsign_f, NULL, NULL, NULL, 0, 3, 0, 0, 0 },
	{ "ThresholdedRelu", thrrelu_f, NULL, NULL, NULL, 0, 1, 1.0f, 0, 0 },
	{ "Sign", sign_f, sign_i32, sign_i64, NULL, 0, 1, 0, 0, 0 },
	{ "Sin", sin_f, NULL, NULL, NULL, 0, 8, 0, 0, 0 },
	{ "Cos", cos_f, NULL, NULL, NULL, 0, 8, 0, 0, 0 },
	{ "Clip", clip_f, clip_i32, clip_i64, NULL, 0, 1, 0, 0, 0 },
	{ "Not", NULL, NULL, NULL, not_b, 0, 1, 0, 0, 0 },
	{ "IsNaN", isnan_f, NULL, NULL, NULL, HP_BOOL, 1, 0, 0, 0 },
	{ "IsInf", isinf_f, NULL, NULL, NULL, HP_BOOL, 1, 0, 0, 0 },
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
	switch (t) {
	case HP_F32: return d->f32;
	case HP_I32: return d->i32;
	case HP_I64: return d->i64;
	case HP_BOOL: return d->b8;
	default: return NULL;
	}
}

/* Clip: min/max as attributes (opset < 11) or scalar inputs 1 and 2, of
 * X's type or (as the importer makes them from attributes) float32. */
static int clip_prepare(const struct hp_graph *g, const struct hp_node *n, struct upriv *u, enum hp_dtype t)
{
	u->p.lo = hp_attr_float(n, "min", -FLT_MAX);
	u->p.hi = hp_attr_float(n, "max", FLT_MAX);
	u->p.ilo = t == HP_I32 ? INT32_MIN : INT64_MIN;
	u->p.ihi = t == HP_I32 ? INT32_MAX : INT64_MAX;
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
	for (int i = 1; i < a->nin; i++) {
		const struct hp_tensor *b = &a->in[i];
		double v;
		if (!b->data)
			continue;
		if (b->dtype == HP_F32)
			v = *(const float *)b->data;
		else if (b->dtype == HP_I32)
			v = *(const int32_t *)b->data;
		else
			v = (double)*(const int64_t *)b->data;
		if (a->in[0].dtype == HP_F32)
			*(i == 1 ? &p->lo : &p->hi) = (float)v;
		else if (b->dtype == HP_I64) /* exact beyond 2^53 */
			*(i == 1 ? &p->ilo : &p->ihi) = *(const int64_t *)b->data;
		else
			*(i == 1 ? &p->ilo : &p->ihi) = i == 1 ? (int64_t)ceil(v) : (int64_t)floor(v);
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
