/* Element-wise kernels against naive double-precision references:
 * unary activations and math, Clip forms, broadcasting binary ops over
 * many shape combinations, int32/int64 variants, comparisons, logic,
 * variadic ops, Where, in-place runs, thread-count reproducibility and
 * broadcast errors. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "hpdlf/error.h"
#include "tests/kernels/harness.h"

static struct hp_pool *pool2;

static struct hp_tensor mk(enum hp_dtype dt, int rank, ...)
{
	int64_t d[HP_MAX_RANK];
	va_list ap;

	va_start(ap, rank);
	for (int i = 0; i < rank; i++)
		d[i] = va_arg(ap, int);
	va_end(ap);
	return kt_tensor(dt, rank, d);
}

static int64_t numel(const struct hp_tensor *t)
{
	return hp_shape_numel(&t->shape);
}

static void fill_int(struct hp_tensor *t, unsigned seed, int lo, int hi)
{
	uint64_t x = seed * 2654435761u + 1;

	for (int64_t i = 0; i < numel(t); i++) {
		x = x * 6364136223846793005ull + 1442695040888963407ull;
		int v = lo + (int)((x >> 33) % (uint64_t)(hi - lo + 1));
		if (t->dtype == HP_I32)
			((int32_t *)t->data)[i] = v;
		else if (t->dtype == HP_I64)
			((int64_t *)t->data)[i] = v;
		else if (t->dtype == HP_BOOL)
			((uint8_t *)t->data)[i] = (uint8_t)(v & 1);
		else
			((float *)t->data)[i] = (float)v;
	}
}

/* Element as double whatever the dtype. */
static double get(const struct hp_tensor *t, int64_t i)
{
	switch (t->dtype) {
	case HP_F32: return ((const float *)t->data)[i];
	case HP_I32: return ((const int32_t *)t->data)[i];
	case HP_I64: return (double)((const int64_t *)t->data)[i];
	case HP_BOOL: return ((const uint8_t *)t->data)[i];
	default: fail(); return 0;
	}
}

/* Offset in `in` of output element `flat` under NumPy broadcasting. */
static int64_t bidx(const struct hp_shape *in, const struct hp_shape *out, int64_t flat)
{
	int64_t off = 0, stride = 1;

	for (int d = out->rank - 1, id = in->rank - 1; d >= 0; d--, id--) {
		int64_t c = flat % out->dims[d];
		flat /= out->dims[d];
		if (id < 0)
			continue;
		if (in->dims[id] != 1)
			off += c * stride;
		stride *= in->dims[id];
	}
	return off;
}

/* Reference broadcast shape computed independently of the kernel. */
static struct hp_shape bshape(int nin, const struct hp_tensor *in)
{
	struct hp_shape s = { 0 };

	for (int k = 0; k < nin; k++)
		if (in[k].shape.rank > s.rank)
			s.rank = in[k].shape.rank;
	for (int d = 0; d < s.rank; d++) {
		s.dims[d] = 1;
		for (int k = 0; k < nin; k++) {
			int id = d - (s.rank - in[k].shape.rank);
			if (id >= 0 && in[k].shape.dims[id] != 1)
				s.dims[d] = in[k].shape.dims[id];
		}
	}
	return s;
}

static int run1(const char *op, int nin, const struct hp_tensor *in, int nattrs, const struct hp_attr *attrs,
		struct hp_tensor *out, struct hp_pool *pool)
{
	struct kt_case c = { .op = op, .nin = nin, .in = in, .nattrs = nattrs, .attrs = attrs, .nout = 1,
			     .pool = pool };
	int rc = kt_run(&c, out);

	if (rc < 0)
		print_message("%s: %s\n", op, hp_errmsg());
	return rc;
}

static void free_all(int n, struct hp_tensor *t)
{
	for (int i = 0; i < n; i++)
		hp_tensor_free(&t[i]);
}

/* ---- unary ---------------------------------------------------------- */

typedef double (*dref)(double x, const double *p);

static double r_relu(double x, const double *p) { (void)p; return x > 0 ? x : 0; }
static double r_leaky(double x, const double *p) { return x >= 0 ? x : p[0] * x; }
static double r_sigmoid(double x, const double *p) { (void)p; return 1 / (1 + exp(-x)); }
static double r_tanh(double x, const double *p) { (void)p; return tanh(x); }
static double r_hsig(double x, const double *p) { return fmax(0, fmin(1, p[0] * x + p[1])); }
static double r_hswish(double x, const double *p) { (void)p; return x * fmax(0, fmin(1, x / 6 + 0.5)); }
static double r_erf(double x, const double *p) { (void)p; return erf(x); }
static double r_exp(double x, const double *p) { (void)p; return exp(x); }
static double r_log(double x, const double *p) { (void)p; return log(x); }
static double r_neg(double x, const double *p) { (void)p; return -x; }
static double r_abs(double x, const double *p) { (void)p; return fabs(x); }
static double r_sqrt(double x, const double *p) { (void)p; return sqrt(x); }
static double r_recip(double x, const double *p) { (void)p; return 1 / x; }
static double r_floor(double x, const double *p) { (void)p; return floor(x); }
static double r_ceil(double x, const double *p) { (void)p; return ceil(x); }
static double r_round(double x, const double *p) { (void)p; double r = floor(x + 0.5); return r - x == 0.5 && fmod(r, 2) != 0 ? r - 1 : r; }
static double r_elu(double x, const double *p) { return x > 0 ? x : p[0] * (exp(x) - 1); }
static double r_selu(double x, const double *p) { return p[1] * (x > 0 ? x : p[0] * (exp(x) - 1)); }
static double r_softplus(double x, const double *p) { (void)p; return log(1 + exp(x)); }
static double r_softsign(double x, const double *p) { (void)p; return x / (1 + fabs(x)); }
static double r_thr(double x, const double *p) { return x > p[0] ? x : 0; }
static double r_sign(double x, const double *p) { (void)p; return x > 0 ? 1 : x < 0 ? -1 : 0; }
static double r_sin(double x, const double *p) { (void)p; return sin(x); }
static double r_cos(double x, const double *p) { (void)p; return cos(x); }

struct ucase {
	const char *op;
	dref ref;
	float lo, hi;
	const char *a1, *a2;  /* attribute names, NULL: use defaults */
	double p0, p1;        /* reference parameters (attribute values or defaults) */
};

static const struct ucase ucases[] = {
	{ "Relu", r_relu, -5, 5, NULL, NULL, 0, 0 },
	{ "LeakyRelu", r_leaky, -5, 5, NULL, NULL, 0.01, 0 },
	{ "LeakyRelu", r_leaky, -5, 5, "alpha", NULL, 0.3, 0 },
	{ "Sigmoid", r_sigmoid, -20, 20, NULL, NULL, 0, 0 },
	{ "Tanh", r_tanh, -10, 10, NULL, NULL, 0, 0 },
	{ "Tanh", r_tanh, -0.7f, 0.7f, NULL, NULL, 0, 0 },
	{ "HardSigmoid", r_hsig, -6, 6, NULL, NULL, 0.2, 0.5 },
	{ "HardSigmoid", r_hsig, -6, 6, "alpha", "beta", 0.3, 0.4 },
	{ "HardSwish", r_hswish, -6, 6, NULL, NULL, 0, 0 },
	{ "Erf", r_erf, -4, 4, NULL, NULL, 0, 0 },
	{ "Erf", r_erf, -0.6f, 0.6f, NULL, NULL, 0, 0 },
	{ "Exp", r_exp, -80, 80, NULL, NULL, 0, 0 },
	{ "Exp", r_exp, -3, 3, NULL, NULL, 0, 0 },
	{ "Log", r_log, 1e-3f, 1e3f, NULL, NULL, 0, 0 },
	{ "Neg", r_neg, -5, 5, NULL, NULL, 0, 0 },
	{ "Abs", r_abs, -5, 5, NULL, NULL, 0, 0 },
	{ "Sqrt", r_sqrt, 0, 100, NULL, NULL, 0, 0 },
	{ "Reciprocal", r_recip, 0.5f, 8, NULL, NULL, 0, 0 },
	{ "Floor", r_floor, -5, 5, NULL, NULL, 0, 0 },
	{ "Ceil", r_ceil, -5, 5, NULL, NULL, 0, 0 },
	{ "Round", r_round, -5, 5, NULL, NULL, 0, 0 },
	{ "Elu", r_elu, -5, 5, NULL, NULL, 1.0, 0 },
	{ "Elu", r_elu, -5, 5, "alpha", NULL, 0.5, 0 },
	{ "Selu", r_selu, -5, 5, NULL, NULL, 1.67326319217681884765625, 1.05070102214813232421875 },
	{ "Selu", r_selu, -5, 5, "alpha", "gamma", 2.0, 3.0 },
	{ "Softplus", r_softplus, -30, 30, NULL, NULL, 0, 0 },
	{ "Softsign", r_softsign, -5, 5, NULL, NULL, 0, 0 },
	{ "ThresholdedRelu", r_thr, -5, 5, NULL, NULL, 1.0, 0 },
	{ "ThresholdedRelu", r_thr, -5, 5, "alpha", NULL, 2.0, 0 },
	{ "Sign", r_sign, -5, 5, NULL, NULL, 0, 0 },
	{ "Sin", r_sin, -7, 7, NULL, NULL, 0, 0 },
	{ "Cos", r_cos, -7, 7, NULL, NULL, 0, 0 },
};

/* Max relative error with a floor of 1 on the magnitude (as kt_rel_err),
 * against the double reference computed from the float input. */
static double check_unary(const struct ucase *u, const struct hp_tensor *x, const struct hp_tensor *y)
{
	double p[2] = { u->p0, u->p1 }, err = 0;

	for (int64_t i = 0; i < numel(x); i++) {
		double want = u->ref(get(x, i), p), got = get(y, i);
		double e = fabs(got - want) / fmax(1, fabs(want));
		if (!(e <= err))
			err = e;
	}
	return err;
}

static void test_unary_float(void **state)
{
	(void)state;
	for (size_t k = 0; k < sizeof ucases / sizeof ucases[0]; k++) {
		const struct ucase *u = &ucases[k];
		struct hp_attr at[2];
		int na = 0;
		struct hp_tensor x = mk(HP_F32, 3, 3, 7, 11), y;
		if (u->a1)
			at[na++] = kt_float(u->a1, (float)u->p0);
		if (u->a2)
			at[na++] = kt_float(u->a2, (float)u->p1);
		kt_fill_random(&x, (unsigned)k + 1, u->lo, u->hi);
		((float *)x.data)[0] = 0.0f;
		((float *)x.data)[1] = u->lo;
		((float *)x.data)[2] = u->hi;
		assert_int_equal(run1(u->op, 1, &x, na, at, &y, NULL), 0);
		assert_int_equal(y.dtype, HP_F32);
		assert_true(hp_shape_equal(&y.shape, &x.shape));
		double err = check_unary(u, &x, &y);
		if (err > 1e-5)
			print_message("%s [%g, %g]: rel err %g\n", u->op, u->lo, u->hi, err);
		assert_true(err <= 1e-5);
		free_all(1, &x);
		free_all(1, &y);
	}
}

/* Relative error on each element (no floor) where the value is not tiny:
 * the polynomial exp/tanh must be accurate across the whole range. */
static void test_exp_tanh_relative(void **state)
{
	const char *ops[] = { "Exp", "Tanh", "Sigmoid", "Erf" };
	double (*refs[])(double) = { exp, tanh, NULL, erf };

	(void)state;
	for (int k = 0; k < 4; k++) {
		struct hp_tensor x = mk(HP_F32, 1, 4001), y;
		for (int i = 0; i < 4001; i++)
			((float *)x.data)[i] = (float)(-87.0 + i * (175.0 / 4000));
		assert_int_equal(run1(ops[k], 1, &x, 0, NULL, &y, NULL), 0);
		for (int i = 0; i < 4001; i++) {
			double v = get(&x, i), want = refs[k] ? refs[k](v) : 1 / (1 + exp(-v));
			double got = get(&y, i);
			if (fabs(want) < 1e-30)
				continue;
			if (fabs(got - want) > 5e-7 * fabs(want))
				print_message("%s(%.9g) = %.9g, want %.9g\n", ops[k], v, got, want);
			assert_true(fabs(got - want) <= 5e-7 * fabs(want));
		}
		free_all(1, &x);
		free_all(1, &y);
	}
}

static void test_unary_special(void **state)
{
	float in[] = { NAN, INFINITY, -INFINITY, 100.0f, -100.0f, 88.7f, 89.0f, -88.0f, -0.0f };
	const int64_t d = 9;
	struct hp_tensor x = kt_tensor(HP_F32, 1, &d), y;

	(void)state;
	memcpy(x.data, in, sizeof in);
	assert_int_equal(run1("Exp", 1, &x, 0, NULL, &y, NULL), 0);
	const float *e = y.data;
	assert_true(isnan(e[0]));
	assert_true(isinf(e[1]) && e[1] > 0);
	assert_true(e[2] == 0.0f);
	assert_true(isinf(e[3]));
	assert_true(e[4] == 0.0f);
	assert_true(fabs(e[5] - exp(in[5])) <= 1e-6 * exp(in[5]));
	assert_true(isinf(e[6]));
	assert_true(fabs(e[7] - exp(-88.0)) <= 1.2e-38); /* below FLT_MIN: may flush to 0 */
	assert_true(e[8] == 1.0f);
	hp_tensor_free(&y);
	assert_int_equal(run1("Tanh", 1, &x, 0, NULL, &y, NULL), 0);
	e = y.data;
	assert_true(isnan(e[0]) && e[1] == 1.0f && e[2] == -1.0f && e[3] == 1.0f && e[4] == -1.0f);
	hp_tensor_free(&y);
	assert_int_equal(run1("Sigmoid", 1, &x, 0, NULL, &y, NULL), 0);
	e = y.data;
	assert_true(isnan(e[0]) && e[1] == 1.0f && e[2] == 0.0f && e[8] == 0.5f);
	hp_tensor_free(&y);
	assert_int_equal(run1("Relu", 1, &x, 0, NULL, &y, NULL), 0);
	e = y.data;
	assert_true(isnan(e[0]) && e[1] == INFINITY && e[2] == 0.0f && e[3] == 100.0f);
	hp_tensor_free(&y);
	assert_int_equal(run1("IsNaN", 1, &x, 0, NULL, &y, NULL), 0);
	assert_int_equal(y.dtype, HP_BOOL);
	for (int i = 0; i < 9; i++)
		assert_int_equal(((uint8_t *)y.data)[i], i == 0);
	hp_tensor_free(&y);
	struct hp_attr neg0 = kt_int("detect_negative", 0);
	assert_int_equal(run1("IsInf", 1, &x, 1, &neg0, &y, NULL), 0);
	for (int i = 0; i < 9; i++)
		assert_int_equal(((uint8_t *)y.data)[i], i == 1);
	free_all(1, &y);
	free_all(1, &x);
}

static void test_unary_int(void **state)
{
	const char *ops[] = { "Neg", "Abs", "Relu", "Sign" };
	enum hp_dtype types[] = { HP_I32, HP_I64 };

	(void)state;
	for (int t = 0; t < 2; t++) {
		for (int k = 0; k < 4; k++) {
			struct hp_tensor x = mk(types[t], 2, 5, 9), y;
			fill_int(&x, 7u + (unsigned)k, -1000, 1000);
			assert_int_equal(run1(ops[k], 1, &x, 0, NULL, &y, NULL), 0);
			assert_int_equal(y.dtype, types[t]);
			for (int64_t i = 0; i < numel(&x); i++) {
				double v = get(&x, i), want = k == 0 ? -v : k == 1 ? fabs(v) : k == 2 ? fmax(v, 0)
							: (v > 0) - (v < 0);
				assert_true(get(&y, i) == want);
			}
			free_all(1, &x);
			free_all(1, &y);
		}
	}
}

static void test_not(void **state)
{
	struct hp_tensor x = mk(HP_BOOL, 2, 4, 33), y;

	(void)state;
	fill_int(&x, 3, 0, 1);
	assert_int_equal(run1("Not", 1, &x, 0, NULL, &y, NULL), 0);
	assert_int_equal(y.dtype, HP_BOOL);
	for (int64_t i = 0; i < numel(&x); i++)
		assert_int_equal(((uint8_t *)y.data)[i], !((uint8_t *)x.data)[i]);
	free_all(1, &x);
	free_all(1, &y);
}

/* ---- Clip ----------------------------------------------------------- */

static void clip_check(const struct hp_tensor *x, const struct hp_tensor *y, double lo, double hi)
{
	for (int64_t i = 0; i < numel(x); i++) {
		double want = fmin(fmax(get(x, i), lo), hi);
		assert_true(get(y, i) == want);
	}
}

static void test_clip(void **state)
{
	const int64_t one = 1;
	struct hp_tensor x = mk(HP_F32, 3, 2, 3, 17), y, in[3];
	struct hp_tensor lo = kt_tensor(HP_F32, 0, &one), hi = kt_tensor(HP_F32, 0, &one);

	(void)state;
	kt_fill_random(&x, 11, -4, 4);
	*(float *)lo.data = -1.5f;
	*(float *)hi.data = 2.25f;
	for (int form = 0; form < 4; form++) { /* both, min only, max only, neither */
		for (unsigned cmask = 0; cmask < 2; cmask++) {
			struct kt_case c = { .op = "Clip", .nin = 3, .in = in, .nout = 1, .const_mask = cmask ? 6 : 0 };
			in[0] = x;
			in[1] = form == 0 || form == 1 ? lo : (struct hp_tensor){ 0 };
			in[2] = form == 0 || form == 2 ? hi : (struct hp_tensor){ 0 };
			assert_int_equal(kt_run(&c, &y), 0);
			clip_check(&x, &y, in[1].data ? -1.5 : -INFINITY, in[2].data ? 2.25 : INFINITY);
			hp_tensor_free(&y);
		}
	}
	/* A single input (min and max omitted entirely) and opset 6 attributes. */
	assert_int_equal(run1("Clip", 1, &x, 0, NULL, &y, NULL), 0);
	clip_check(&x, &y, -INFINITY, INFINITY);
	hp_tensor_free(&y);
	struct hp_attr at[2] = { kt_float("min", -0.5f), kt_float("max", 0.75f) };
	struct kt_case c6 = { .op = "Clip", .nin = 1, .in = &x, .nattrs = 2, .attrs = at, .nout = 1, .opset = 6 };
	assert_int_equal(kt_run(&c6, &y), 0);
	clip_check(&x, &y, -0.5, 0.75);
	hp_tensor_free(&y);
	c6.nattrs = 1;
	assert_int_equal(kt_run(&c6, &y), 0);
	clip_check(&x, &y, -0.5, INFINITY);
	hp_tensor_free(&y);
	/* min > max: every element becomes max. */
	*(float *)lo.data = 3.0f;
	*(float *)hi.data = 1.0f;
	in[0] = x, in[1] = lo, in[2] = hi;
	assert_int_equal(run1("Clip", 3, in, 0, NULL, &y, NULL), 0);
	for (int64_t i = 0; i < numel(&x); i++)
		assert_true(((float *)y.data)[i] == 1.0f);
	free_all(1, &y);
	free_all(1, &lo);
	free_all(1, &hi);
	free_all(1, &x);
}

static void test_clip_int(void **state)
{
	const int64_t one = 1;
	struct hp_tensor x = mk(HP_I64, 1, 50), lo = kt_tensor(HP_I64, 0, &one), y, in[3];

	(void)state;
	fill_int(&x, 5, -100, 100);
	*(int64_t *)lo.data = -7;
	in[0] = x, in[1] = lo, in[2] = (struct hp_tensor){ 0 };
	assert_int_equal(run1("Clip", 3, in, 0, NULL, &y, NULL), 0);
	clip_check(&x, &y, -7, INFINITY);
	free_all(1, &y);
	/* A float32 bound (the importer's form of attributes) converts to X's type. */
	struct hp_tensor flo = kt_tensor(HP_F32, 0, &one), blo = kt_tensor(HP_BOOL, 0, &one);
	*(float *)flo.data = -7.5f;
	in[1] = flo;
	assert_int_equal(run1("Clip", 2, in, 0, NULL, &y, NULL), 0);
	clip_check(&x, &y, -7, INFINITY);
	free_all(1, &y);
	/* Other bound types and non-scalars are refused. */
	in[1] = blo;
	assert_int_equal(run1("Clip", 2, in, 0, NULL, &y, NULL), HP_ESHAPE);
	in[1] = x;
	assert_int_equal(run1("Clip", 2, in, 0, NULL, &y, NULL), HP_ESHAPE);
	free_all(1, &flo);
	free_all(1, &blo);
	free_all(1, &lo);
	free_all(1, &x);
}

/* ---- broadcasting binary -------------------------------------------- */

struct bshapes {
	int ra, rb;
	int64_t a[5], b[5];
};

/* scalar, row, column, both sides, 5-D with size-1 dims, rank mismatch,
 * bias per channel, same shape, empty. */
static const struct bshapes shapes[] = {
	{ 2, 2, { 3, 4 }, { 3, 4 } },
	{ 2, 0, { 3, 4 }, { 0 } },
	{ 0, 3, { 0 }, { 2, 3, 4 } },
	{ 2, 1, { 3, 4 }, { 4 } },
	{ 2, 2, { 3, 4 }, { 3, 1 } },
	{ 2, 2, { 3, 1 }, { 1, 4 } },
	{ 2, 2, { 1, 4 }, { 3, 1 } },
	{ 5, 3, { 2, 1, 3, 1, 5 }, { 3, 4, 1 } },
	{ 5, 5, { 2, 1, 3, 1, 5 }, { 1, 4, 1, 6, 1 } },
	{ 1, 3, { 5 }, { 2, 3, 5 } },
	{ 4, 3, { 2, 3, 4, 5 }, { 3, 1, 1 } },
	{ 4, 4, { 1, 3, 1, 1 }, { 2, 3, 4, 5 } },
	{ 3, 1, { 2, 3, 1 }, { 1 } },
	{ 2, 2, { 0, 4 }, { 1, 4 } },
	{ 1, 1, { 70000 }, { 70000 } },
	{ 2, 1, { 300, 257 }, { 257 } },
	{ 3, 3, { 4, 300, 64 }, { 4, 300, 1 } },
};

typedef double (*bref)(double a, double b);
static double b_add(double a, double b) { return a + b; }
static double b_sub(double a, double b) { return a - b; }
static double b_mul(double a, double b) { return a * b; }
static double b_div(double a, double b) { return a / b; }
static double b_idiv(double a, double b) { return trunc(a / b); }
static double b_pow(double a, double b) { return pow(a, b); }
static double b_max(double a, double b) { return fmax(a, b); }
static double b_min(double a, double b) { return fmin(a, b); }
static double b_prelu(double a, double b) { return a < 0 ? a * b : a; }
static double b_eq(double a, double b) { return a == b; }
static double b_lt(double a, double b) { return a < b; }
static double b_gt(double a, double b) { return a > b; }
static double b_le(double a, double b) { return a <= b; }
static double b_ge(double a, double b) { return a >= b; }
static double b_and(double a, double b) { return a && b; }
static double b_or(double a, double b) { return a || b; }
static double b_xor(double a, double b) { return (a != 0) != (b != 0); }
static double b_fmod(double a, double b) { return fmod(a, b); }
static double b_pymod(double a, double b) { double r = fmod(a, b); return r != 0 && (r < 0) != (b < 0) ? r + b : r; }

/* Check out against ref over the independent broadcast; returns max rel err. */
static double check_binary(const struct hp_tensor *a, const struct hp_tensor *b, const struct hp_tensor *y,
			   bref ref)
{
	struct hp_tensor in[2] = { *a, *b };
	struct hp_shape s = bshape(2, in);
	double err = 0;

	assert_true(hp_shape_equal(&s, &y->shape));
	for (int64_t i = 0; i < hp_shape_numel(&s); i++) {
		double want = ref(get(a, bidx(&a->shape, &s, i)), get(b, bidx(&b->shape, &s, i)));
		double e = fabs(get(y, i) - want) / fmax(1, fabs(want));
		if (!(e <= err))
			err = e;
	}
	return err;
}

static void binary_case(const char *op, bref ref, enum hp_dtype ta, enum hp_dtype tb, const struct bshapes *sh,
			unsigned seed, double tol, int positive_b)
{
	struct hp_tensor in[2] = { kt_tensor(ta, sh->ra, sh->a), kt_tensor(tb, sh->rb, sh->b) }, y, y2;
	double err;

	if (ta == HP_F32)
		kt_fill_random(&in[0], seed, positive_b == 2 ? 0.1f : -3, 3);
	else
		fill_int(&in[0], seed, -50, 50);
	if (tb == HP_F32)
		kt_fill_random(&in[1], seed + 99, positive_b ? 0.5f : -3, 3);
	else
		fill_int(&in[1], seed + 99, positive_b ? 1 : -50, positive_b ? 4 : 50);
	/* a few exact ties for comparisons */
	if (numel(&in[0]) > 2 && numel(&in[1]) > 2 && ta == tb) {
		memcpy(in[0].data, in[1].data, hp_dtype_size(ta));
	}
	assert_int_equal(run1(op, 2, in, 0, NULL, &y, NULL), 0);
	err = check_binary(&in[0], &in[1], &y, ref);
	if (err > tol)
		print_message("%s %s/%s shape case %td: err %g\n", op, hp_dtype_name(ta), hp_dtype_name(tb),
			      sh - shapes, err);
	assert_true(err <= tol);
	/* Two threads: bitwise the same. */
	assert_int_equal(run1(op, 2, in, 0, NULL, &y2, pool2), 0);
	assert_memory_equal(y.data, y2.data, hp_tensor_bytes(&y));
	free_all(2, in);
	free_all(1, &y);
	free_all(1, &y2);
}

static void test_binary_float(void **state)
{
	struct { const char *op; bref ref; int pos; } ops[] = {
		{ "Add", b_add, 0 }, { "Sub", b_sub, 0 }, { "Mul", b_mul, 0 }, { "Div", b_div, 1 },
		{ "Pow", b_pow, 2 }, { "Max", b_max, 0 }, { "Min", b_min, 0 }, { "Sum", b_add, 0 },
	};

	(void)state;
	for (size_t k = 0; k < sizeof ops / sizeof ops[0]; k++)
		for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
			binary_case(ops[k].op, ops[k].ref, HP_F32, HP_F32, &shapes[s], (unsigned)(k * 31 + s),
				    1e-5, ops[k].pos);
	/* PRelu: slope broadcasts to X only. */
	binary_case("PRelu", b_prelu, HP_F32, HP_F32, &shapes[10], 1, 1e-6, 0);
	binary_case("PRelu", b_prelu, HP_F32, HP_F32, &shapes[3], 2, 1e-6, 0);
}

static void test_binary_int(void **state)
{
	struct { const char *op; bref ref; int pos; } ops[] = {
		{ "Add", b_add, 0 }, { "Sub", b_sub, 0 }, { "Mul", b_mul, 0 }, { "Div", b_idiv, 0 },
		{ "Max", b_max, 0 }, { "Min", b_min, 0 }, { "Mod", b_pymod, 1 },
	};
	enum hp_dtype types[] = { HP_I32, HP_I64 };

	(void)state;
	for (int t = 0; t < 2; t++)
		for (size_t k = 0; k < sizeof ops / sizeof ops[0]; k++)
			for (size_t s = 0; s < 12; s++)
				binary_case(ops[k].op, ops[k].ref, types[t], types[t], &shapes[s],
					    (unsigned)(k * 7 + s), 0, ops[k].pos || !strcmp(ops[k].op, "Div"));
	binary_case("Pow", b_pow, HP_F32, HP_I64, &shapes[3], 3, 1e-5, 1);
	binary_case("Pow", b_pow, HP_F32, HP_I32, &shapes[7], 4, 1e-5, 1);
	binary_case("Pow", b_pow, HP_I64, HP_I64, &shapes[4], 5, 0, 1);
}

static void test_mod(void **state)
{
	struct hp_tensor in[2] = { mk(HP_F32, 1, 40), mk(HP_F32, 1, 40) }, y;
	struct hp_attr fm = kt_int("fmod", 1);

	(void)state;
	kt_fill_random(&in[0], 1, -10, 10);
	kt_fill_random(&in[1], 2, 0.5f, 3);
	((float *)in[1].data)[0] = -2.5f;
	assert_int_equal(run1("Mod", 2, in, 1, &fm, &y, NULL), 0);
	assert_true(check_binary(&in[0], &in[1], &y, b_fmod) <= 1e-6);
	hp_tensor_free(&y);
	assert_int_equal(run1("Mod", 2, in, 0, NULL, &y, NULL), HP_EMODEL); /* float needs fmod=1 */
	free_all(2, in);
	in[0] = mk(HP_I64, 1, 40), in[1] = mk(HP_I64, 1, 1);
	fill_int(&in[0], 3, -20, 20);
	*(int64_t *)in[1].data = -3;
	assert_int_equal(run1("Mod", 2, in, 1, &fm, &y, NULL), 0);
	assert_true(check_binary(&in[0], &in[1], &y, b_fmod) == 0);
	free_all(1, &y);
	assert_int_equal(run1("Mod", 2, in, 0, NULL, &y, NULL), 0);
	assert_true(check_binary(&in[0], &in[1], &y, b_pymod) == 0);
	free_all(1, &y);
	free_all(2, in);
}

static void test_compare(void **state)
{
	struct { const char *op; bref ref; } ops[] = {
		{ "Equal", b_eq }, { "Less", b_lt }, { "Greater", b_gt }, { "LessOrEqual", b_le },
		{ "GreaterOrEqual", b_ge },
	};
	enum hp_dtype types[] = { HP_F32, HP_I32, HP_I64 };

	(void)state;
	for (int t = 0; t < 3; t++)
		for (size_t k = 0; k < sizeof ops / sizeof ops[0]; k++)
			for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s += 2) {
				struct hp_tensor in[2] = { kt_tensor(types[t], shapes[s].ra, shapes[s].a),
							   kt_tensor(types[t], shapes[s].rb, shapes[s].b) }, y;
				fill_int(&in[0], (unsigned)s, -3, 3); /* small range: many ties */
				fill_int(&in[1], (unsigned)s + 5, -3, 3);
				assert_int_equal(run1(ops[k].op, 2, in, 0, NULL, &y, NULL), 0);
				assert_int_equal(y.dtype, HP_BOOL);
				assert_true(check_binary(&in[0], &in[1], &y, ops[k].ref) == 0);
				free_all(2, in);
				free_all(1, &y);
			}
}

static void test_logic(void **state)
{
	struct { const char *op; bref ref; } ops[] = {
		{ "And", b_and }, { "Or", b_or }, { "Xor", b_xor }, { "Equal", b_eq },
	};

	(void)state;
	for (size_t k = 0; k < sizeof ops / sizeof ops[0]; k++)
		for (size_t s = 0; s < 12; s++) {
			struct hp_tensor in[2] = { kt_tensor(HP_BOOL, shapes[s].ra, shapes[s].a),
						   kt_tensor(HP_BOOL, shapes[s].rb, shapes[s].b) }, y;
			fill_int(&in[0], (unsigned)s, 0, 1);
			fill_int(&in[1], (unsigned)s + 5, 0, 1);
			assert_int_equal(run1(ops[k].op, 2, in, 0, NULL, &y, NULL), 0);
			assert_int_equal(y.dtype, HP_BOOL);
			assert_true(check_binary(&in[0], &in[1], &y, ops[k].ref) == 0);
			free_all(2, in);
			free_all(1, &y);
		}
}

/* Pow with a scalar exponent 2 takes the x*x path. */
static void test_pow_square(void **state)
{
	const int64_t one = 1;
	struct hp_tensor in[2] = { mk(HP_F32, 2, 7, 9), kt_tensor(HP_F32, 0, &one) }, y;

	(void)state;
	kt_fill_random(&in[0], 4, -5, 5);
	*(float *)in[1].data = 2.0f;
	assert_int_equal(run1("Pow", 2, in, 0, NULL, &y, NULL), 0);
	assert_true(check_binary(&in[0], &in[1], &y, b_pow) <= 1e-7);
	free_all(1, &y);
	*(float *)in[1].data = 0.5f;
	kt_fill_random(&in[0], 4, 0, 5);
	assert_int_equal(run1("Pow", 2, in, 0, NULL, &y, NULL), 0);
	assert_true(check_binary(&in[0], &in[1], &y, b_pow) <= 1e-6);
	free_all(1, &y);
	free_all(2, in);
}

/* ---- variadic and Where --------------------------------------------- */

static void test_variadic(void **state)
{
	const char *ops[] = { "Sum", "Mean", "Max", "Min" };
	const int64_t sa[] = { 2, 1, 4 }, sb[] = { 3, 1 }, sc[] = { 4 };

	(void)state;
	for (int k = 0; k < 4; k++) {
		for (int nin = 1; nin <= 3; nin++) {
			struct hp_tensor in[3] = { kt_tensor(HP_F32, 3, sa), kt_tensor(HP_F32, 2, sb),
						   kt_tensor(HP_F32, 1, sc) }, y;
			struct hp_shape s;
			for (int i = 0; i < 3; i++)
				kt_fill_random(&in[i], (unsigned)(k * 3 + i), -2, 2);
			assert_int_equal(run1(ops[k], nin, in, 0, NULL, &y, nin == 3 ? pool2 : NULL), 0);
			s = bshape(nin, in);
			assert_true(hp_shape_equal(&s, &y.shape));
			for (int64_t i = 0; i < hp_shape_numel(&s); i++) {
				double acc = get(&in[0], bidx(&in[0].shape, &s, i));
				for (int j = 1; j < nin; j++) {
					double v = get(&in[j], bidx(&in[j].shape, &s, i));
					acc = k < 2 ? acc + v : k == 2 ? fmax(acc, v) : fmin(acc, v);
				}
				if (k == 1)
					acc /= nin;
				assert_true(fabs(get(&y, i) - acc) <= 1e-6);
			}
			free_all(3, in);
			free_all(1, &y);
		}
	}
}

static void test_max_nan(void **state)
{
	struct hp_tensor in[2] = { mk(HP_F32, 1, 4), mk(HP_F32, 1, 4) }, y;
	float a[] = { NAN, 1, 2, NAN }, b[] = { 1, NAN, 3, NAN };

	(void)state;
	memcpy(in[0].data, a, sizeof a);
	memcpy(in[1].data, b, sizeof b);
	for (int k = 0; k < 2; k++) {
		assert_int_equal(run1(k ? "Min" : "Max", 2, in, 0, NULL, &y, NULL), 0);
		assert_true(isnan(((float *)y.data)[0]) && isnan(((float *)y.data)[1]) && isnan(((float *)y.data)[3]));
		assert_true(((float *)y.data)[2] == (k ? 2 : 3));
		free_all(1, &y);
	}
	free_all(2, in);
}

static void test_where(void **state)
{
	struct { int rc, rx, ry; int64_t c[4], x[4], y[4]; enum hp_dtype t; } cases[] = {
		{ 2, 2, 2, { 3, 4 }, { 3, 4 }, { 3, 4 }, HP_F32 },
		{ 2, 0, 2, { 3, 4 }, { 0 }, { 3, 4 }, HP_F32 },
		{ 2, 2, 0, { 3, 4 }, { 3, 4 }, { 0 }, HP_I64 },
		{ 3, 2, 1, { 2, 1, 4 }, { 3, 1 }, { 4 }, HP_F32 },
		{ 1, 3, 2, { 5 }, { 2, 1, 5 }, { 3, 1 }, HP_I32 },
		{ 4, 1, 4, { 1, 3, 1, 1 }, { 1 }, { 2, 3, 4, 5 }, HP_BOOL },
		{ 1, 1, 1, { 70001 }, { 70001 }, { 1 }, HP_F32 },
	};

	(void)state;
	for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
		struct hp_tensor in[3] = { kt_tensor(HP_BOOL, cases[k].rc, cases[k].c),
					   kt_tensor(cases[k].t, cases[k].rx, cases[k].x),
					   kt_tensor(cases[k].t, cases[k].ry, cases[k].y) }, y, y2;
		fill_int(&in[0], (unsigned)k, 0, 1);
		fill_int(&in[1], (unsigned)k + 1, -100, 100);
		fill_int(&in[2], (unsigned)k + 2, -100, 100);
		assert_int_equal(run1("Where", 3, in, 0, NULL, &y, NULL), 0);
		assert_int_equal(y.dtype, cases[k].t);
		struct hp_shape s = bshape(3, in);
		assert_true(hp_shape_equal(&s, &y.shape));
		for (int64_t i = 0; i < hp_shape_numel(&s); i++) {
			double c = get(&in[0], bidx(&in[0].shape, &s, i));
			double want = c ? get(&in[1], bidx(&in[1].shape, &s, i)) : get(&in[2], bidx(&in[2].shape, &s, i));
			assert_true(get(&y, i) == want);
		}
		assert_int_equal(run1("Where", 3, in, 0, NULL, &y2, pool2), 0);
		assert_memory_equal(y.data, y2.data, hp_tensor_bytes(&y));
		free_all(3, in);
		free_all(1, &y);
		free_all(1, &y2);
	}
}

/* ---- errors, in place, threads -------------------------------------- */

static void test_errors(void **state)
{
	struct hp_tensor in[3] = { mk(HP_F32, 2, 3, 4), mk(HP_F32, 1, 5), mk(HP_F32, 1, 4) }, y;

	(void)state;
	assert_int_equal(run1("Add", 2, in, 0, NULL, &y, NULL), HP_ESHAPE);
	assert_non_null(strstr(hp_errmsg(), "node0"));
	assert_non_null(strstr(hp_errmsg(), "Add"));
	assert_non_null(strstr(hp_errmsg(), "3x4"));
	assert_int_equal(run1("Max", 3, in, 0, NULL, &y, NULL), HP_ESHAPE);
	/* dtype mismatch */
	hp_tensor_free(&in[1]);
	in[1] = mk(HP_I64, 1, 4);
	assert_int_equal(run1("Mul", 2, in, 0, NULL, &y, NULL), HP_ESHAPE);
	assert_non_null(strstr(hp_errmsg(), "node0"));
	/* Where needs a bool condition */
	hp_tensor_free(&in[1]);
	struct hp_tensor w[3] = { in[0], in[2], in[2] };
	assert_int_equal(run1("Where", 3, w, 0, NULL, &y, NULL), HP_ESHAPE);
	/* PRelu slope must broadcast to X, not grow it */
	struct hp_tensor pr[2] = { in[2], in[0] };
	assert_int_equal(run1("PRelu", 2, pr, 0, NULL, &y, NULL), HP_ESHAPE);
	/* unsupported dtype */
	struct hp_tensor f64 = mk(HP_F64, 1, 3);
	assert_int_equal(run1("Sigmoid", 1, &f64, 0, NULL, &y, NULL), HP_EUNSUPPORTED);
	assert_int_equal(run1("Pow", 2, (struct hp_tensor[]){ f64, f64 }, 0, NULL, &y, NULL), HP_EUNSUPPORTED);
	hp_tensor_free(&f64);
	free_all(1, &in[0]);
	free_all(1, &in[2]);
}

/* Run an op with out[0] aliasing in[0] (as the executor does for
 * HP_OP_INPLACE ops); compare with the separate-buffer result. */
static void inplace_case(const char *op, int nin, struct hp_tensor *in)
{
	struct hp_graph *g = hp_graph_new("inplace");
	struct hp_tensor y, alias;
	int ids[3], oid, node;
	char name[8];

	assert_int_equal(run1(op, nin, in, 0, NULL, &y, NULL), 0);
	for (int i = 0; i < nin; i++) {
		snprintf(name, sizeof name, "i%d", i);
		ids[i] = hp_graph_add_value(g, name, HP_VALUE_INPUT, in[i].dtype, &in[i].shape);
	}
	oid = hp_graph_add_value(g, "o", HP_VALUE_ACTIVATION, HP_UNDEFINED, NULL);
	node = hp_graph_add_node(g, "n", op, nin, ids, 1, &oid);
	assert_true(node >= 0);
	assert_int_equal(hp_graph_infer(g), 0);
	assert_true(g->nodes[node].op->flags & HP_OP_INPLACE);
	alias = in[0];
	struct hp_kargs a = { .nin = nin, .in = in, .nout = 1, .out = &alias, .pool = pool2 };
	assert_int_equal(g->nodes[node].op->run(&g->nodes[node], &a), 0);
	assert_memory_equal(in[0].data, y.data, hp_tensor_bytes(&y));
	hp_tensor_free(&y);
	hp_graph_free(g);
}

static void test_inplace(void **state)
{
	struct hp_tensor in[2] = { mk(HP_F32, 3, 4, 300, 65), mk(HP_F32, 2, 300, 1) };

	(void)state;
	kt_fill_random(&in[0], 1, -3, 3);
	kt_fill_random(&in[1], 2, -3, 3);
	inplace_case("Add", 2, in);
	inplace_case("Mul", 2, in);
	inplace_case("Sigmoid", 1, in);
	inplace_case("Relu", 1, in);
	inplace_case("Sum", 2, in);
	free_all(2, in);
}

/* Large unary tensors split across threads give the same bits. */
static void test_threads(void **state)
{
	const char *ops[] = { "Exp", "Tanh", "Sigmoid", "Erf", "LeakyRelu" };
	struct hp_tensor x = mk(HP_F32, 2, 301, 777), y1, y2;

	(void)state;
	kt_fill_random(&x, 9, -9, 9);
	for (int k = 0; k < 5; k++) {
		assert_int_equal(run1(ops[k], 1, &x, 0, NULL, &y1, NULL), 0);
		assert_int_equal(run1(ops[k], 1, &x, 0, NULL, &y2, pool2), 0);
		assert_memory_equal(y1.data, y2.data, hp_tensor_bytes(&y1));
		free_all(1, &y1);
		free_all(1, &y2);
	}
	free_all(1, &x);
}

/* Mul of planes by one value each ([N, C, H, W] by [N, C, 1, 1], either
 * operand first: eltwise_binary.c's row path at planes up to 256, the
 * walker beyond) bitwise the float products, 1 and 2 threads; a scale of
 * [1, C, 1, 1] over a batch of 2 is no row plan (the walker). */
static void test_mul_rows(void **state)
{
	static const int shp[][6] = { { 1, 1152, 3, 3, 1, 1152 }, { 2, 5, 7, 7, 2, 5 }, { 1, 24, 16, 16, 1, 24 },
				      { 1, 3, 17, 17, 1, 3 }, { 2, 5, 7, 7, 1, 5 }, { 1, 7, 1, 1, 1, 7 } };

	(void)state;
	for (size_t t = 0; t < sizeof shp / sizeof shp[0]; t++)
		for (int first = 0; first < 2; first++)
			for (int th = 0; th < 2; th++) {
				const int *d = shp[t];
				struct hp_tensor in[2], y;
				in[first] = mk(HP_F32, 4, d[4], d[5], 1, 1);
				in[1 - first] = mk(HP_F32, 4, d[0], d[1], d[2], d[3]);
				kt_fill_random(&in[0], 3 + (unsigned)t, -3, 3);
				kt_fill_random(&in[1], 4 + (unsigned)t, -3, 3);
				assert_int_equal(run1("Mul", 2, in, 0, NULL, &y, th ? pool2 : NULL), 0);
				const float *x = in[1 - first].data, *v = in[first].data;
				int64_t plane = d[2] * d[3];
				for (int64_t i = 0; i < numel(&y); i++) {
					int64_t row = i / plane, vr = d[4] == d[0] ? row : row % d[1];
					float want = first ? x[i] * v[vr] : v[vr] * x[i], got = ((float *)y.data)[i];
					if (memcmp(&want, &got, sizeof got))
						fail_msg("shape %zu first %d at %lld: %a, want %a", t, first, (long long)i,
							 (double)got, (double)want);
				}
				free_all(2, in);
				free_all(1, &y);
			}
}

/* Constant inputs fold at inference time: the folded value is checked. */
static void test_folding(void **state)
{
	struct hp_tensor in[2] = { mk(HP_I64, 1, 4), mk(HP_I64, 0) }, y;
	struct kt_case c = { .op = "Mul", .nin = 2, .in = in, .const_mask = 3, .nout = 1 };

	(void)state;
	for (int i = 0; i < 4; i++)
		((int64_t *)in[0].data)[i] = i - 1;
	*(int64_t *)in[1].data = -3;
	assert_int_equal(kt_run(&c, &y), 0);
	for (int i = 0; i < 4; i++)
		assert_true(((int64_t *)y.data)[i] == -3 * (i - 1));
	free_all(1, &y);
	free_all(2, in);
}

static int setup(void **state)
{
	(void)state;
	return hp_pool_create(2, &pool2);
}

static int teardown(void **state)
{
	(void)state;
	hp_pool_destroy(pool2);
	return 0;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_unary_float),
		cmocka_unit_test(test_exp_tanh_relative),
		cmocka_unit_test(test_unary_special),
		cmocka_unit_test(test_unary_int),
		cmocka_unit_test(test_not),
		cmocka_unit_test(test_clip),
		cmocka_unit_test(test_clip_int),
		cmocka_unit_test(test_binary_float),
		cmocka_unit_test(test_binary_int),
		cmocka_unit_test(test_mod),
		cmocka_unit_test(test_compare),
		cmocka_unit_test(test_logic),
		cmocka_unit_test(test_pow_square),
		cmocka_unit_test(test_variadic),
		cmocka_unit_test(test_max_nan),
		cmocka_unit_test(test_where),
		cmocka_unit_test(test_errors),
		cmocka_unit_test(test_inplace),
		cmocka_unit_test(test_threads),
		cmocka_unit_test(test_mul_rows),
		cmocka_unit_test(test_folding),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
