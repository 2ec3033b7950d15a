/* Backward of elementwise ops (domain ai.hpdlf): unary activations and math,
 * broadcasting binary arithmetic (summing over broadcast dims), Where, and
 * training-mode Dropout with a counter-based seeded mask. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "hpdlf/error.h"
#include "kernels/eltwise_impl.h"
#include "kernels/train_util.h"

/* ---- UnaryGrad(dY, X) -> dX = dY * f'(X); attribute op names f ---------- */

enum unary {
	U_RELU, U_LEAKY, U_ELU, U_SELU, U_SIGMOID, U_HARDSIGMOID, U_HARDSWISH, U_TANH, U_SOFTPLUS,
	U_SOFTSIGN, U_EXP, U_LOG, U_SQRT, U_RECIP, U_NEG, U_ABS, U_ERF, U_GELU, U_GELU_TANH, U_IDENTITY,
	U_CLIP, U_SIN, U_COS, U_MISH, U_TAN, U_ASIN, U_ACOS, U_ATAN, U_SINH, U_COSH, U_ASINH, U_ACOSH,
	U_ATANH, U_CELU, U_SHRINK, U_COUNT
};

static const char *const unary_names[U_COUNT] = {
	"Relu", "LeakyRelu", "Elu", "Selu", "Sigmoid", "HardSigmoid", "HardSwish", "Tanh", "Softplus",
	"Softsign", "Exp", "Log", "Sqrt", "Reciprocal", "Neg", "Abs", "Erf", "Gelu", "GeluTanh", "Identity",
	"Clip", "Sin", "Cos", "Mish", "Tan", "Asin", "Acos", "Atan", "Sinh", "Cosh", "Asinh", "Acosh",
	"Atanh", "Celu", "Shrink",
};

struct unary_priv {
	enum unary op;
	double alpha, beta, lo, hi;
};

static int unary_prepare(struct hp_graph *g, struct hp_node *n)
{
	const char *name = hp_attr_string(n, "op", "");
	struct unary_priv *p;
	int rc = tk_need_f32(g, n, 0, 0), k;

	if (rc == 0)
		rc = tk_need_f32(g, n, 1, 0);
	if (rc < 0)
		return rc;
	for (k = 0; k < U_COUNT && strcmp(unary_names[k], name); k++)
		;
	if (k == U_COUNT)
		return hp_node_error(g, n, HP_EUNSUPPORTED, "no gradient for unary op '%s'", name);
	if (!hp_shape_equal(&tk_in(g, n, 0)->shape, &tk_in(g, n, 1)->shape))
		return hp_node_error(g, n, HP_ESHAPE, "dY and X shapes differ");
	p = calloc(1, sizeof *p);
	if (!p)
		return hp_node_error(g, n, -ENOMEM, "out of memory");
	p->op = (enum unary)k;
	p->alpha = hp_attr_float(n, "alpha", k == U_LEAKY ? 0.01f : k == U_SELU ? 1.67326319217681884765625f
					     : k == U_HARDSIGMOID ? 0.2f : 1.0f);
	p->beta = hp_attr_float(n, "beta", 0.5f);
	if (k == U_SELU)
		p->beta = hp_attr_float(n, "gamma", 1.05070102214813232421875f);
	if (k == U_SHRINK)
		p->alpha = hp_attr_float(n, "lambd", 0.5f);
	p->lo = hp_attr_float(n, "min", -INFINITY);
	p->hi = hp_attr_float(n, "max", INFINITY);
	n->priv = p;
	tk_set_out(g, n, 0, HP_F32, &tk_in(g, n, 1)->shape);
	return 0;
}

static double sigmoid(double x)
{
	return 1 / (1 + exp(-x));
}

/* f'(x) in double. */
static double unary_deriv(const struct unary_priv *p, double x)
{
	switch (p->op) {
	case U_RELU: return x > 0;
	case U_LEAKY: return x > 0 ? 1 : p->alpha;
	case U_ELU: return x > 0 ? 1 : p->alpha * exp(x);
	case U_SELU: return x > 0 ? p->beta : p->beta * p->alpha * exp(x);
	case U_SIGMOID: return sigmoid(x) * (1 - sigmoid(x));
	case U_HARDSIGMOID: {
		double y = p->alpha * x + p->beta;
		return y > 0 && y < 1 ? p->alpha : 0;
	}
	case U_HARDSWISH: return x < -3 ? 0 : x > 3 ? 1 : (2 * x + 3) / 6;
	case U_TANH: return 1 - tanh(x) * tanh(x);
	case U_SOFTPLUS: return sigmoid(x);
	case U_SOFTSIGN: return 1 / ((1 + fabs(x)) * (1 + fabs(x)));
	case U_EXP: return exp(x);
	case U_LOG: return 1 / x;
	case U_SQRT: return 0.5 / sqrt(x);
	case U_RECIP: return -1 / (x * x);
	case U_NEG: return -1;
	case U_ABS: return x > 0 ? 1 : x < 0 ? -1 : 0;
	case U_ERF: return 2 / sqrt(M_PI) * exp(-x * x);
	case U_GELU: return 0.5 * (1 + erf(x / sqrt(2))) + x * exp(-0.5 * x * x) / sqrt(2 * M_PI);
	case U_GELU_TANH: {
		double c = sqrt(2 / M_PI), u = c * (x + 0.044715 * x * x * x), t = tanh(u);
		return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * c * (1 + 3 * 0.044715 * x * x);
	}
	case U_IDENTITY: return 1;
	case U_CLIP: return x >= p->lo && x <= p->hi;
	case U_SIN: return cos(x);
	case U_COS: return -sin(x);
	case U_MISH: {
		double sp = log1p(exp(x)), t = tanh(sp);
		return t + x * (1 - t * t) * sigmoid(x);
	}
	case U_TAN: return 1 + tan(x) * tan(x);
	case U_ASIN: return 1 / sqrt(1 - x * x);
	case U_ACOS: return -1 / sqrt(1 - x * x);
	case U_ATAN: return 1 / (1 + x * x);
	case U_SINH: return cosh(x);
	case U_COSH: return sinh(x);
	case U_ASINH: return 1 / sqrt(x * x + 1);
	case U_ACOSH: return 1 / sqrt(x * x - 1);
	case U_ATANH: return 1 / (1 - x * x);
	case U_CELU: return x > 0 ? 1 : exp(x / p->alpha);
	case U_SHRINK: return x < -p->alpha || x > p->alpha;
	default: return 0;
	}
}

struct unary_job {
	const struct unary_priv *p;
	const float *dy, *x;
	float *dx;
};

/* ReluGrad, the common case: a select the compiler vectorizes. */
HPK_SIMD static void relu_grad(const float *dy, const float *x, float *dx, int64_t n)
{
	for (int64_t i = 0; i < n; i++)
		dx[i] = x[i] > 0 ? dy[i] : 0.0f;
}

/* ErfGrad, GELU's as exporters write it (a third of the element-wise time
 * of a GPT-2-style training step went to libm's exp in double): float
 * exp, vectorized, within a few float ulps of 2/sqrt(pi) e^-x^2. */
HPK_SIMD static void erf_grad(const float *dy, const float *x, float *dx, int64_t n)
{
	for (int64_t i = 0; i < n; i++)
		dx[i] = dy[i] * (1.12837916709551257f * hpk_expf(-(x[i] * x[i])));
}

/* GELU's gradient (training fuses the exporters' GELU into FusedGelu,
 * exec/fuse.h): Phi(x) + x phi(x) in float, vectorized, within a few float
 * ulps of the double formula (libm's erf and exp in double were about
 * 40 ns an element). */
HPK_SIMD static void gelu_grad(const float *dy, const float *x, float *dx, int64_t n)
{
	for (int64_t i = 0; i < n; i++) {
		float v = x[i];
		float d = 0.5f * (1.0f + hpk_erff(v * 0.70710678118654752f)) +
			  v * (0.39894228040143268f * hpk_expf(-0.5f * (v * v)));
		dx[i] = dy[i] * d;
	}
}

/* ClipGrad (ReLU6 in MobileNets: a quarter of their training step went to
 * the generic loop below): the same values, dy * 1 or dy * 0 (a signed
 * zero, NaN for NaN or infinite dy), as a select the compiler vectorizes. */
HPK_SIMD static void clip_grad(const float *dy, const float *x, float *dx, int64_t n, float lo, float hi)
{
	for (int64_t i = 0; i < n; i++)
		dx[i] = x[i] >= lo && x[i] <= hi ? dy[i] : dy[i] * 0.0f;
}

/* SigmoidGrad (SiLU / Swish and squeeze-excitation gates in EfficientNets:
 * the double loop below, two libm exps an element, was 16% of an
 * EfficientNet-B0 training step): sigma'(x) = e / (1 + e)^2 with
 * e = exp(-|x|), in float, vectorized; no cancellation at large |x|
 * (torch's y (1 - y) from the float output is 0 from |x| > 17 on). */
HPK_SIMD static void sigmoid_grad(const float *dy, const float *x, float *dx, int64_t n)
{
	for (int64_t i = 0; i < n; i++) {
		float e = hpk_expf(-fabsf(x[i])), d = 1.0f + e;
		dx[i] = dy[i] * (e / (d * d));
	}
}

/* TanhGrad (recurrent gates, GELU's tanh form): 1 - tanh^2(x) =
 * 4 e / (1 + e)^2 with e = exp(-2|x|), as sigmoid_grad. */
HPK_SIMD static void tanh_grad(const float *dy, const float *x, float *dx, int64_t n)
{
	for (int64_t i = 0; i < n; i++) {
		float e = hpk_expf(-2.0f * fabsf(x[i])), d = 1.0f + e;
		dx[i] = dy[i] * (4.0f * e / (d * d));
	}
}

/* HardSwish's and HardSigmoid's (MobileNetV3) and LeakyRelu's: selects and
 * a product the compiler vectorizes. */
HPK_SIMD static void hswish_grad(const float *dy, const float *x, float *dx, int64_t n)
{
	for (int64_t i = 0; i < n; i++) {
		float v = x[i];
		dx[i] = v < -3.0f ? dy[i] * 0.0f : v > 3.0f ? dy[i] : dy[i] * ((2.0f * v + 3.0f) / 6.0f);
	}
}

HPK_SIMD static void hsigmoid_grad(const float *dy, const float *x, float *dx, int64_t n, float alpha, float beta)
{
	for (int64_t i = 0; i < n; i++) {
		float y = alpha * x[i] + beta;
		dx[i] = dy[i] * (y > 0.0f && y < 1.0f ? alpha : 0.0f);
	}
}

HPK_SIMD static void leaky_grad(const float *dy, const float *x, float *dx, int64_t n, float alpha)
{
	for (int64_t i = 0; i < n; i++)
		dx[i] = dy[i] * (x[i] > 0.0f ? 1.0f : alpha);
}

/* The vectorized forms; 0 when op has none (the double loop then). */
static int unary_fast(const struct unary_job *j, int64_t b, int64_t e)
{
	const float *dy = j->dy + b, *x = j->x + b;
	float *dx = j->dx + b;

	switch (j->p->op) {
	case U_SIGMOID: sigmoid_grad(dy, x, dx, e - b); return 1;
	case U_TANH: tanh_grad(dy, x, dx, e - b); return 1;
	case U_HARDSWISH: hswish_grad(dy, x, dx, e - b); return 1;
	case U_HARDSIGMOID: hsigmoid_grad(dy, x, dx, e - b, (float)j->p->alpha, (float)j->p->beta); return 1;
	case U_LEAKY: leaky_grad(dy, x, dx, e - b, (float)j->p->alpha); return 1;
	default: return 0;
	}
}

static void unary_range(void *arg, int64_t b, int64_t e, int tid)
{
	const struct unary_job *j = arg;

	(void)tid;
	if (unary_fast(j, b, e))
		return;
	if (j->p->op == U_CLIP) {
		clip_grad(j->dy + b, j->x + b, j->dx + b, e - b, (float)j->p->lo, (float)j->p->hi);
		return;
	}
	if (j->p->op == U_RELU) {
		relu_grad(j->dy + b, j->x + b, j->dx + b, e - b);
		return;
	}
	if (j->p->op == U_ERF) {
		erf_grad(j->dy + b, j->x + b, j->dx + b, e - b);
		return;
	}
	if (j->p->op == U_GELU) {
		gelu_grad(j->dy + b, j->x + b, j->dx + b, e - b);
		return;
	}
	for (int64_t i = b; i < e; i++)
		j->dx[i] = (float)(j->dy[i] * unary_deriv(j->p, j->x[i]));
}

static int unary_run(const struct hp_node *n, const struct hp_kargs *a)
{
	struct unary_job j = { n->priv, a->in[0].data, a->in[1].data, a->out[0].data };
	/* GELU's and Erf's derivatives cost an exp (and an erf) an element,
	 * about 7 cycles: worth the pool from a quarter of the memory-bound
	 * ops' grain, as FusedGelu's forward (fused_epi.c); GPT-2-style's
	 * [256, 512] ran on one thread. */
	int64_t grain = j.p->op == U_GELU || j.p->op == U_ERF || j.p->op == U_SIGMOID || j.p->op == U_TANH
		? HPK_GRAIN / 4 : HPK_GRAIN;

	hp_parallel_for(a->pool, hp_shape_numel(&a->in[1].shape), grain, unary_range, &j);
	return 0;
}

const struct hp_op tk_op_unary_grad = {
	.domain = TK_DOMAIN, .name = "UnaryGrad", .min_inputs = 2, .max_inputs = 2,
	.min_outputs = 1, .max_outputs = 1, .prepare = unary_prepare, .run = unary_run,
};

/* ---- BinaryGrad(dY, A?, B?) -> dA?, dB?  (attrs op, a_shape, b_shape, scale)
 * A and B broadcast to Y; each gradient is summed back over the dims its
 * operand was broadcast along.  Add and Sub need neither operand. */

enum binary { B_ADD, B_SUB, B_MUL, B_DIV, B_POW, B_MAX, B_MIN, B_COUNT };
static const char *const binary_names[B_COUNT] = { "Add", "Sub", "Mul", "Div", "Pow", "Max", "Min" };

struct binary_priv {
	enum binary op;
	struct hp_shape a, b, y;
	double scale;
};

static int binary_prepare(struct hp_graph *g, struct hp_node *n)
{
	const char *name = hp_attr_string(n, "op", "");
	struct binary_priv p = { .scale = hp_attr_float(n, "scale", 1) };
	int rc, k;

	for (k = 0; k < B_COUNT && strcmp(binary_names[k], name); k++)
		;
	if (k == B_COUNT)
		return hp_node_error(g, n, HP_EUNSUPPORTED, "no gradient for binary op '%s'", name);
	p.op = (enum binary)k;
	if ((rc = tk_attr_shape(g, n, "a_shape", &p.a, 1)) < 0 || (rc = tk_attr_shape(g, n, "b_shape", &p.b, 1)) < 0 ||
	    (rc = tk_broadcast(g, n, &p.a, &p.b, &p.y)) < 0 || (rc = tk_need_f32(g, n, 0, 0)) < 0)
		return rc;
	if (!hp_shape_equal(&tk_in(g, n, 0)->shape, &p.y))
		return hp_node_error(g, n, HP_ESHAPE, "dY does not have the broadcast shape of A and B");
	for (int i = 1; i < 3; i++) {
		const struct hp_value *v = tk_in(g, n, i);
		if (k >= B_MUL && !v)
			return hp_node_error(g, n, HP_EMODEL, "%s needs both operands", name);
		if (v && ((rc = tk_need_f32(g, n, i, 0)) < 0 || !hp_shape_equal(&v->shape, i == 1 ? &p.a : &p.b)))
			return rc < 0 ? rc : hp_node_error(g, n, HP_ESHAPE, "operand %d does not match its shape attribute", i);
	}
	if (!(n->priv = malloc(sizeof p)))
		return hp_node_error(g, n, -ENOMEM, "out of memory");
	memcpy(n->priv, &p, sizeof p);
	tk_set_out(g, n, 0, HP_F32, &p.a);
	tk_set_out(g, n, 1, HP_F32, &p.b);
	n->workspace = (size_t)(hp_shape_numel(&p.a) + hp_shape_numel(&p.b)) * sizeof(double);
	return 0;
}

/* Partial derivatives of y = a op b. */
static void binary_partials(enum binary op, double a, double b, double *da, double *db)
{
	switch (op) {
	case B_ADD: *da = 1; *db = 1; break;
	case B_SUB: *da = 1; *db = -1; break;
	case B_MUL: *da = b; *db = a; break;
	case B_DIV: *da = 1 / b; *db = -a / (b * b); break;
	case B_POW:
		*da = b == 0 ? 0 : b * pow(a, b - 1);
		*db = a > 0 ? pow(a, b) * log(a) : 0;
		break;
	case B_MAX: *da = a > b ? 1 : a == b ? 0.5 : 0; *db = 1 - *da; break;
	case B_MIN: *da = a < b ? 1 : a == b ? 0.5 : 0; *db = 1 - *da; break;
	default: *da = *db = 0;
	}
}

static void store_sum(float *dst, const double *acc, int64_t len)
{
	if (dst)
		for (int64_t i = 0; i < len; i++)
			dst[i] = (float)acc[i];
}

/* One operand's gradient, walked with the broadcast engine: plan operand 0
 * is the full-shape one (dK itself, or dY when dK is a sum), then dY or the
 * double accumulator of dK, then X and Z when the partials need them. */
struct bin_job {
	enum binary op;
	int which;     /* 0: dA, 1: dB */
	int ix, iz;    /* plan operand holding X / Z, or 0 when absent */
	double scale;  /* scale, negated for dB of Sub */
};

/* The loops below are binary_partials' arithmetic specialized per op, operand
 * and stride pattern (X and Z contiguous or scalar over the segment), so
 * the switch leaves the inner loop and Mul/Div vectorize; every element and
 * every sum is computed by the same expressions in the same order, so the
 * bits are those of the generic loop.  P is the partial as an expression
 * of x = X[i] and z = Z[i] (in double). */
#define BIN_FULL(P)                                                                        \
	for (int64_t i = 0; i < n; i++) {                                                  \
		double x = xp[i * sx], z = zp[i * sz];                                     \
		(void)x, (void)z;                                                          \
		dk[i] = (float)(dy[i] * sc * (P));                                         \
	}
#define BIN_SUM(P)                                                                         \
	for (int64_t i = 0; i < n; i++) {                                                  \
		double x = xp[i * sx], z = zp[i * sz];                                     \
		(void)x, (void)z;                                                          \
		if (sa)                                                                    \
			acc[i] += dy[i] * sc * (P);                                        \
		else                                                                       \
			t += dy[i] * sc * (P);                                             \
	}

/* Pow's dA with a scalar exponent c: c * pow(x, c - 1) with pow(x, 1) = x
 * and pow(x, 2) = x * x exactly (a float squared fits a double), the
 * LayerNorm (x - mean)^2 and tanh-Gelu x^3 cases. */
#define BIN_POW_A(BODY, c)                                                                 \
	do {                                                                               \
		if ((c) == 2)                                                              \
			BODY(2.0 * x);                                                     \
		else if ((c) == 3)                                                         \
			BODY(3.0 * (x * x));                                               \
		else                                                                       \
			BODY((c) == 0 ? 0 : (c) * pow(x, (c) - 1));                        \
	} while (0)

/* One specialized segment; sx, sz are the constant strides of X and Z.  sa
 * is acc's stride when summing (0: one element), or -1 for the full path. */
static inline __attribute__((always_inline)) double
bin_seg_op(const struct bin_job *j, float *dk, double *acc, const float *dy, const float *xp, const float *zp,
	   int64_t sx, int64_t sz, int64_t sa, int64_t n)
{
	double sc = j->scale, t = 0, c = zp[0];
	int full = sa < 0;

	(void)c;
#define BIN_ANY(P)               \
	do {                     \
		if (full)        \
			BIN_FULL(P) \
		else             \
			BIN_SUM(P)  \
	} while (0)
	switch (j->op * 2 + j->which) {
	case B_MUL * 2: BIN_ANY(z); break;
	case B_MUL * 2 + 1: BIN_ANY(x); break;
	case B_DIV * 2: BIN_ANY(1 / z); break;
	case B_DIV * 2 + 1: BIN_ANY(-x / (z * z)); break;
	case B_POW * 2:
		if (sz == 0)
			BIN_POW_A(BIN_ANY, c);
		else
			BIN_ANY(z == 0 ? 0 : z * pow(x, z - 1));
		break;
	default: {
		for (int64_t i = 0; i < n; i++) {
			double da, db, p;
			binary_partials(j->op, xp[i * sx], zp[i * sz], &da, &db);
			p = j->which ? db : da;
			if (full)
				dk[i] = (float)(dy[i] * sc * p);
			else if (sa)
				acc[i] += dy[i] * sc * p;
			else
				t += dy[i] * sc * p;
		}
	}
	}
#undef BIN_ANY
	return t;
}

/* Dispatch on the stride pattern of X and Z so each loop has constants. */
static inline __attribute__((always_inline)) double
bin_seg_strided(const struct bin_job *j, float *dk, double *acc, const float *dy, char *const *p, const int64_t *s,
		int64_t sa, int64_t n)
{
	const float *xp = (const float *)p[j->ix], *zp = (const float *)p[j->iz];

	if (s[j->ix] && s[j->iz])
		return bin_seg_op(j, dk, acc, dy, xp, zp, 1, 1, sa, n);
	if (s[j->ix])
		return bin_seg_op(j, dk, acc, dy, xp, zp, 1, 0, sa, n);
	if (s[j->iz])
		return bin_seg_op(j, dk, acc, dy, xp, zp, 0, 1, sa, n);
	return bin_seg_op(j, dk, acc, dy, xp, zp, 0, 0, sa, n);
}

/* dK = dY * scale * partial, element by element (no broadcast of K). */
HPK_SIMD static void bin_seg_full(const void *ctx, char *const *p, const int64_t *s, int64_t n)
{
	const struct bin_job *j = ctx;
	const float *dy = (const float *)p[1];
	float *dk = (float *)p[0];

	if (j->op <= B_SUB) {
		for (int64_t i = 0; i < n; i++)
			dk[i] = (float)(dy[i] * j->scale);
		return;
	}
	bin_seg_strided(j, dk, NULL, dy, p, s, -1, n);
}

/* acc(K) += dY * scale * partial along one segment: K contiguous (s = 1)
 * or one element of K summed over the segment (s = 0). */
HPK_SIMD static void bin_seg_sum(const void *ctx, char *const *p, const int64_t *s, int64_t n)
{
	const struct bin_job *j = ctx;
	const float *dy = (const float *)p[0];
	double *acc = (double *)p[1];

	if (j->op <= B_SUB && s[1] == 0) {
		acc[0] += j->scale * hpk_sum_f(dy, n);
	} else if (j->op <= B_SUB) {
		for (int64_t i = 0; i < n; i++)
			acc[i] += dy[i] * j->scale;
	} else if (s[1] == 0) {
		double t = bin_seg_strided(j, NULL, acc, dy, p, s, 0, n);
		acc[0] += t;
	} else {
		bin_seg_strided(j, NULL, acc, dy, p, s, 1, n);
	}
}

/* Gradient of operand `which` into out (float, K's shape); acc is K-sized
 * double workspace.  Sums over broadcast dims run in one fixed order on the
 * calling thread; the rest in parallel. */
static void binary_one(const struct binary_priv *pr, const struct hp_kargs *a, int which, float *out, double *acc)
{
	const struct hp_shape *ks = which ? &pr->b : &pr->a;
	int64_t nk = hp_shape_numel(ks);
	int full = nk == hp_shape_numel(&pr->y), nin = 1;
	struct hp_tensor ak = { HP_F64, *ks, acc }, x = { HP_F32, pr->a, NULL }, z = { HP_F32, pr->b, NULL };
	const struct hp_tensor *in[HPK_BC_MAXIN] = { full ? &a->in[0] : &ak };
	const void *data[HPK_BC_MAXIN] = { in[0]->data };
	struct bin_job j = { .op = pr->op, .which = which, .scale = pr->scale * (which && pr->op == B_SUB ? -1 : 1) };
	struct hpk_bcast b;

	if (pr->op > B_SUB) { /* plan operand k is in[k - 1] */
		x.data = a->in[1].data;
		z.data = a->in[2].data;
		in[nin] = &x, data[nin++] = x.data, j.ix = nin;
		in[nin] = &z, data[nin++] = z.data, j.iz = nin;
	}
	hpk_bcast_plan(&b, &pr->y, in, nin, sizeof(float));
	if (full) {
		hpk_bcast_run(a->pool, &b, out, data, bin_seg_full, &j);
		return;
	}
	memset(acc, 0, (size_t)nk * sizeof *acc);
	hpk_bcast_run(NULL, &b, a->in[0].data, data, bin_seg_sum, &j);
	store_sum(out, acc, nk);
}

static int binary_run(const struct hp_node *n, const struct hp_kargs *a)
{
	const struct binary_priv *p = n->priv;
	double *acc = a->ws;

	if (n->noutputs > 0 && a->out[0].data)
		binary_one(p, a, 0, a->out[0].data, acc);
	if (n->noutputs > 1 && a->out[1].data)
		binary_one(p, a, 1, a->out[1].data, acc + hp_shape_numel(&p->a));
	return 0;
}

const struct hp_op tk_op_binary_grad = {
	.domain = TK_DOMAIN, .name = "BinaryGrad", .min_inputs = 1, .max_inputs = 3,
	.min_outputs = 1, .max_outputs = 2, .prepare = binary_prepare, .run = binary_run,
};

/* ---- WhereGrad(dY, cond) -> dA?, dB?  (attrs a_shape, b_shape) ---------- */

struct where_priv {
	struct hp_shape a, b, c, y;
};

static int where_prepare(struct hp_graph *g, struct hp_node *n)
{
	struct where_priv p;
	const struct hp_value *c = tk_in(g, n, 1);
	struct hp_shape ab;
	int rc;

	if ((rc = tk_attr_shape(g, n, "a_shape", &p.a, 1)) < 0 || (rc = tk_attr_shape(g, n, "b_shape", &p.b, 1)) < 0 ||
	    (rc = tk_need_f32(g, n, 0, 0)) < 0)
		return rc;
	if (!c || c->dtype != HP_BOOL)
		return hp_node_error(g, n, HP_EMODEL, "condition must be bool");
	p.c = c->shape;
	if ((rc = tk_broadcast(g, n, &p.a, &p.b, &ab)) < 0 || (rc = tk_broadcast(g, n, &ab, &p.c, &p.y)) < 0)
		return rc;
	if (!hp_shape_equal(&tk_in(g, n, 0)->shape, &p.y))
		return hp_node_error(g, n, HP_ESHAPE, "dY does not have the broadcast shape");
	if (!(n->priv = malloc(sizeof p)))
		return hp_node_error(g, n, -ENOMEM, "out of memory");
	memcpy(n->priv, &p, sizeof p);
	tk_set_out(g, n, 0, HP_F32, &p.a);
	tk_set_out(g, n, 1, HP_F32, &p.b);
	n->workspace = (size_t)(hp_shape_numel(&p.a) + hp_shape_numel(&p.b)) * sizeof(double);
	return 0;
}

static int where_run(const struct hp_node *n, const struct hp_kargs *a)
{
	const struct where_priv *p = n->priv;
	int64_t na = hp_shape_numel(&p->a), nb = hp_shape_numel(&p->b), ny = hp_shape_numel(&p->y);
	int64_t sa[HP_MAX_RANK], sb[HP_MAX_RANK], sc[HP_MAX_RANK];
	const float *dy = a->in[0].data;
	const uint8_t *c = a->in[1].data;
	double *acca = a->ws, *accb = acca + na;

	tk_bcast_strides(&p->y, &p->a, sa);
	tk_bcast_strides(&p->y, &p->b, sb);
	tk_bcast_strides(&p->y, &p->c, sc);
	memset(a->ws, 0, (size_t)(na + nb) * sizeof(double));
	for (int64_t i = 0; i < ny; i++) {
		if (c[tk_offset(&p->y, sc, i)])
			acca[tk_offset(&p->y, sa, i)] += dy[i];
		else
			accb[tk_offset(&p->y, sb, i)] += dy[i];
	}
	store_sum(n->noutputs > 0 ? a->out[0].data : NULL, acca, na);
	store_sum(n->noutputs > 1 ? a->out[1].data : NULL, accb, nb);
	return 0;
}

const struct hp_op tk_op_where_grad = {
	.domain = TK_DOMAIN, .name = "WhereGrad", .min_inputs = 2, .max_inputs = 2,
	.min_outputs = 1, .max_outputs = 2, .prepare = where_prepare, .run = where_run,
};

/* ---- DropoutTrain(X, step) -> Y, mask  (attrs ratio, seed) -------------
 * Element i of run `step` is kept when a hash of (seed, step, i) is >= ratio,
 * so the mask is seeded, new every step and independent of threads. */

static uint64_t mix64(uint64_t z)
{
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static int dropout_prepare(struct hp_graph *g, struct hp_node *n)
{
	const struct hp_value *x = tk_in(g, n, 0), *s = tk_in(g, n, 1);
	float ratio = hp_attr_float(n, "ratio", 0.5f);
	int rc = tk_need_f32(g, n, 0, 0);

	if (rc < 0)
		return rc;
	if (!s || s->dtype != HP_I64 || hp_shape_numel(&s->shape) != 1)
		return hp_node_error(g, n, HP_EMODEL, "input 1 must be the int64 step counter");
	if (!(ratio >= 0 && ratio < 1))
		return hp_node_error(g, n, HP_EMODEL, "ratio %g is not in [0, 1)", ratio);
	tk_set_out(g, n, 0, HP_F32, &x->shape);
	tk_set_out(g, n, 1, HP_BOOL, &x->shape);
	return 0;
}

static int dropout_run(const struct hp_node *n, const struct hp_kargs *a)
{
	int64_t len = hp_shape_numel(&a->in[0].shape), step = *(const int64_t *)a->in[1].data;
	double ratio = hp_attr_float(n, "ratio", 0.5f);
	float scale = (float)(1 / (1 - ratio));
	uint64_t base = mix64((uint64_t)hp_attr_int(n, "seed", 0) ^ mix64((uint64_t)step + 0x9e3779b97f4a7c15ull));
	const float *x = a->in[0].data;
	float *y = a->out[0].data;
	uint8_t *mask = n->noutputs > 1 ? a->out[1].data : NULL;

	for (int64_t i = 0; i < len; i++) {
		double u = (double)(mix64(base + (uint64_t)i * 0x9e3779b97f4a7c15ull) >> 11) * 0x1.0p-53;
		int keep = u >= ratio;
		y[i] = keep ? x[i] * scale : 0.0f;
		if (mask)
			mask[i] = (uint8_t)keep;
	}
	return 0;
}

const struct hp_op tk_op_dropout_train = {
	.domain = TK_DOMAIN, .name = "DropoutTrain", .min_inputs = 2, .max_inputs = 2,
	.min_outputs = 1, .max_outputs = 2, .flags = HP_OP_NO_FOLD,
	.prepare = dropout_prepare, .run = dropout_run,
};

/* DropoutGrad(dY, mask) -> dX  (attr ratio) */
static int dropout_grad_prepare(struct hp_graph *g, struct hp_node *n)
{
	const struct hp_value *m = tk_in(g, n, 1);
	int rc = tk_need_f32(g, n, 0, 0);

	if (rc < 0)
		return rc;
	if (!m || m->dtype != HP_BOOL || !hp_shape_equal(&m->shape, &tk_in(g, n, 0)->shape))
		return hp_node_error(g, n, HP_EMODEL, "mask must be bool with dY's shape");
	tk_set_out(g, n, 0, HP_F32, &m->shape);
	return 0;
}

static int dropout_grad_run(const struct hp_node *n, const struct hp_kargs *a)
{
	int64_t len = hp_shape_numel(&a->in[0].shape);
	float scale = (float)(1 / (1 - (double)hp_attr_float(n, "ratio", 0.5f)));
	const float *dy = a->in[0].data;
	const uint8_t *m = a->in[1].data;
	float *dx = a->out[0].data;

	for (int64_t i = 0; i < len; i++)
		dx[i] = m[i] ? dy[i] * scale : 0.0f;
	return 0;
}

const struct hp_op tk_op_dropout_grad = {
	.domain = TK_DOMAIN, .name = "DropoutGrad", .min_inputs = 2, .max_inputs = 2,
	.min_outputs = 1, .max_outputs = 1, .prepare = dropout_grad_prepare, .run = dropout_grad_run,
};
