/* Fast paths of the training kernels: tensors big enough to be split over
 * a 2-thread pool, broadcast patterns the coalesced BinaryGrad walks
 * (bias sums, inner and outer reductions), tiled MaxPoolGrad windows with
 * ties and NaN, and the vectorized optimizer loops.  Each result is checked
 * against a naive loop written here and, threaded, for the same bits as
 * the single-thread run. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "hpdlf/error.h"
#include "tests/kernels/harness.h"

#define D "ai.hpdlf"

static struct hp_pool *pool;

static struct hp_tensor Tn(int rank, const int64_t *d)
{
	return kt_tensor(HP_F32, rank, d);
}

static struct hp_tensor rnd(struct hp_tensor t, unsigned seed, float lo, float hi)
{
	kt_fill_random(&t, seed, lo, hi);
	return t;
}

static int64_t numel(const struct hp_tensor *t)
{
	return hp_shape_numel(&t->shape);
}

static float *F(const struct hp_tensor *t)
{
	return t->data;
}

/* Run op single-threaded into out1 and on the pool into out2. */
static void run2(const char *op, int nin, const struct hp_tensor *in, int na, const struct hp_attr *a, int nout,
		 struct hp_tensor *out1, struct hp_tensor *out2)
{
	struct kt_case c = { .domain = D, .op = op, .nin = nin, .in = in, .nattrs = na, .attrs = a, .nout = nout };

	if (kt_run(&c, out1) < 0)
		fail_msg("%s: %s", op, hp_errmsg());
	c.pool = pool;
	if (kt_run(&c, out2) < 0)
		fail_msg("%s (2 threads): %s", op, hp_errmsg());
}

static void same_bits(const struct hp_tensor *a, const struct hp_tensor *b, const char *what)
{
	if (numel(a) != numel(b) || memcmp(a->data, b->data, hp_tensor_bytes(a)))
		fail_msg("%s: 2 threads differ from 1", what);
}

/* max |got - want| / max(1, max |want|) <= tol */
static void close_to(const struct hp_tensor *got, const double *want, double tol, const char *what)
{
	double err = 0, scale = 1;
	int64_t at = 0;

	for (int64_t i = 0; i < numel(got); i++) {
		double e = fabs(F(got)[i] - want[i]);
		if (!(e <= err))
			err = e, at = i;
		scale = fabs(want[i]) > scale ? fabs(want[i]) : scale;
	}
	if (!(err / scale <= tol))
		fail_msg("%s: error %.3g at %lld (got %.9g, want %.9g)", what, err / scale, (long long)at,
			 F(got)[at], want[at]);
}

static void free_all(struct hp_tensor *t, int n)
{
	for (int i = 0; i < n; i++)
		hp_tensor_free(&t[i]);
}

/* ---- UnaryGrad ----------------------------------------------------------- */

static void test_relu_grad(void **state)
{
	int64_t d[2] = { 7, 14289 }; /* 100023 elements: several ranges */
	struct hp_tensor in[2] = { rnd(Tn(2, d), 1, -1, 1), rnd(Tn(2, d), 2, -1, 1) }, o1, o2;
	struct hp_attr a = kt_string("op", "Relu");

	(void)state;
	F(&in[1])[5] = 0.0f;
	F(&in[1])[6] = -0.0f;
	F(&in[1])[7] = NAN;
	run2("UnaryGrad", 2, in, 1, &a, 1, &o1, &o2);
	for (int64_t i = 0; i < numel(&o1); i++) {
		float want = F(&in[1])[i] > 0 ? F(&in[0])[i] : 0.0f;
		if (memcmp(&F(&o1)[i], &want, sizeof want))
			fail_msg("ReluGrad at %lld: got %g, want %g", (long long)i, F(&o1)[i], want);
	}
	same_bits(&o1, &o2, "ReluGrad");
	hp_tensor_free(&o1);
	hp_tensor_free(&o2);
	free_all(in, 2);
}

/* ErfGrad (GELU's) over normal values and far tails (e^-x^2 underflows),
 * against 2/sqrt(pi) e^-x^2 dy in double, and 2 threads bitwise 1. */
static void test_erf_grad(void **state)
{
	int64_t d[1] = { 70001 };
	struct hp_tensor in[2] = { rnd(Tn(1, d), 5, -2, 2), rnd(Tn(1, d), 6, -4, 4) }, o1, o2;
	struct hp_attr a = kt_string("op", "Erf");
	double *want = malloc((size_t)d[0] * sizeof *want);

	(void)state;
	F(&in[1])[0] = 0.0f;
	F(&in[1])[1] = 12.0f;
	F(&in[1])[2] = -30.0f;
	run2("UnaryGrad", 2, in, 1, &a, 1, &o1, &o2);
	for (int64_t i = 0; i < d[0]; i++) {
		double x = F(&in[1])[i];
		want[i] = F(&in[0])[i] * 2 / sqrt(M_PI) * exp(-x * x);
	}
	close_to(&o1, want, 1e-6, "ErfGrad");
	same_bits(&o1, &o2, "ErfGrad");
	free(want);
	hp_tensor_free(&o1);
	hp_tensor_free(&o2);
	free_all(in, 2);
}

/* GELU's vectorized gradient (training's FusedGelu): against the
 * derivative in double, including the tails where erf saturates, and
 * bitwise on two threads. */
static void test_gelu_grad(void **state)
{
	int64_t d[1] = { 70001 };
	struct hp_tensor in[2] = { rnd(Tn(1, d), 7, -1, 1), rnd(Tn(1, d), 8, -6, 6) }, o1, o2;
	struct hp_attr a = kt_string("op", "Gelu");
	double *want = malloc((size_t)d[0] * sizeof *want);

	(void)state;
	F(&in[1])[0] = 0.0f;
	F(&in[1])[1] = 12.0f;
	F(&in[1])[2] = -30.0f;
	run2("UnaryGrad", 2, in, 1, &a, 1, &o1, &o2);
	for (int64_t i = 0; i < d[0]; i++) {
		double x = F(&in[1])[i];
		want[i] = F(&in[0])[i] * (0.5 * erfc(-x / sqrt(2.0)) + x * exp(-0.5 * x * x) / sqrt(2 * M_PI));
	}
	close_to(&o1, want, 1e-6, "GeluGrad");
	same_bits(&o1, &o2, "GeluGrad");
	free(want);
	hp_tensor_free(&o1);
	hp_tensor_free(&o2);
	free_all(in, 2);
}

/* SigmoidGrad and TanhGrad far out in the tails too: each element within
 * 1e-5 of the double derivative relative to itself (y (1 - y) and
 * 1 - tanh^2 from float values are 0 there), 1 thread bitwise 2. */
static void test_tail_grads(void **state)
{
	int64_t d[1] = { 70001 };
	static const char *const ops[] = { "Sigmoid", "Tanh" };

	(void)state;
	for (int k = 0; k < 2; k++) {
		struct hp_tensor in[2] = { rnd(Tn(1, d), 5, -1, 1), rnd(Tn(1, d), 6, -9, 9) }, o1, o2;
		struct hp_attr a = kt_string("op", ops[k]);
		static const float tails[] = { 20.0f, -20.0f, 40.0f, -40.0f, 15.5f, -0.0f, 1e-20f, -87.0f };
		for (int i = 0; i < 8; i++)
			F(&in[1])[i] = tails[i];
		run2("UnaryGrad", 2, in, 1, &a, 1, &o1, &o2);
		for (int64_t i = 0; i < d[0]; i++) {
			double x = F(&in[1])[i], dy = F(&in[0])[i], w;
			if (k == 0) {
				double e = exp(-fabs(x));
				w = dy * e / ((1 + e) * (1 + e));
			} else {
				double c = cosh(x);
				w = dy / (c * c);
			}
			if (!(fabs(F(&o1)[i] - w) <= 1e-5 * fabs(w) + 1e-37))
				fail_msg("%sGrad at x = %.9g: got %.9g, want %.9g", ops[k], x, F(&o1)[i], w);
		}
		same_bits(&o1, &o2, ops[k]);
		hp_tensor_free(&o1);
		hp_tensor_free(&o2);
		free_all(in, 2);
	}
}

static void test_tanh_grad(void **state)
{
	int64_t d[1] = { 70001 };
	struct hp_tensor in[2] = { rnd(Tn(1, d), 3, -1, 1), rnd(Tn(1, d), 4, -3, 3) }, o1, o2;
	struct hp_attr a = kt_string("op", "Tanh");
	double *want = malloc((size_t)d[0] * sizeof *want);

	(void)state;
	run2("UnaryGrad", 2, in, 1, &a, 1, &o1, &o2);
	for (int64_t i = 0; i < d[0]; i++) {
		double t = tanh(F(&in[1])[i]);
		want[i] = F(&in[0])[i] * (1 - t * t);
	}
	close_to(&o1, want, 1e-6, "TanhGrad");
	same_bits(&o1, &o2, "TanhGrad");
	free(want);
	hp_tensor_free(&o1);
	hp_tensor_free(&o2);
	free_all(in, 2);
}

/* ---- BinaryGrad over broadcast patterns ----------------------------------- */

/* Offset into a (right-aligned, broadcast) shape for y's multi-index. */
static int64_t bcast_off(const struct hp_shape *y, const int64_t *idx, const struct hp_shape *s)
{
	int64_t off = 0;

	for (int d = 0; d < s->rank; d++) {
		int yd = d + y->rank - s->rank;
		off = off * s->dims[d] + (s->dims[d] == 1 ? 0 : idx[yd]);
	}
	return off;
}

static void partials(const char *op, double a, double b, double *da, double *db)
{
	if (!strcmp(op, "Add"))
		*da = 1, *db = 1;
	else if (!strcmp(op, "Sub"))
		*da = 1, *db = -1;
	else if (!strcmp(op, "Mul"))
		*da = b, *db = a;
	else if (!strcmp(op, "Div"))
		*da = 1 / b, *db = -a / (b * b);
	else /* Pow */
		*da = b == 0 ? 0 : b * pow(a, b - 1), *db = a > 0 ? pow(a, b) * log(a) : 0;
}

struct bcase {
	const char *op;
	int ra, rb, ry;
	int64_t a[4], b[4], y[4];
	float scale;
	float alo;  /* A drawn from [alo, 2]; 0: [0.5, 2] */
	int fixb;   /* B filled with bval (Pow's exponent) */
	float bval;
};

/* A gradient of the output's shape has one term per element, so the
 * kernel's float must be the naive double product rounded, bit for bit;
 * NaN (0^-0.5 and the like) only has to stay NaN. */
static void exact_to(const struct hp_tensor *got, const double *want, const char *what)
{
	for (int64_t i = 0; i < numel(got); i++) {
		float w = (float)want[i];
		if (memcmp(&F(got)[i], &w, sizeof w) && !(isnan(w) && isnan(F(got)[i])))
			fail_msg("%s: at %lld got %.9g, want %.9g", what, (long long)i, F(got)[i], w);
	}
}

static void binary_case(const struct bcase *k, unsigned seed)
{
	struct hp_shape ys = { .rank = k->ry }, as = { .rank = k->ra }, bs = { .rank = k->rb };
	struct hp_tensor in[3], o1[2], o2[2];
	struct hp_attr at[4] = { kt_string("op", k->op), kt_ints("a_shape", k->ra, k->a), kt_ints("b_shape", k->rb, k->b),
				 kt_float("scale", k->scale) };
	int64_t idx[4] = { 0 }, ny;
	double *wa, *wb;
	int fa, fb;

	memcpy(ys.dims, k->y, sizeof k->y);
	memcpy(as.dims, k->a, sizeof k->a);
	memcpy(bs.dims, k->b, sizeof k->b);
	ny = hp_shape_numel(&ys);
	fa = hp_shape_equal(&as, &ys), fb = hp_shape_equal(&bs, &ys);
	in[0] = rnd(Tn(k->ry, k->y), seed, -1, 1);
	in[1] = rnd(Tn(k->ra, k->a), seed + 1, k->alo ? k->alo : 0.5f, 2);
	in[2] = rnd(Tn(k->rb, k->b), seed + 2, 0.5f, 2);
	for (int64_t i = 0; k->fixb && i < numel(&in[2]); i++)
		F(&in[2])[i] = k->bval;
	if (k->alo < 0 && numel(&in[1]) > 4) { /* signed zeros and specials */
		F(&in[1])[0] = 0.0f, F(&in[1])[1] = -0.0f, F(&in[1])[2] = INFINITY, F(&in[1])[3] = NAN;
	}
	wa = calloc((size_t)hp_shape_numel(&as), sizeof *wa);
	wb = calloc((size_t)hp_shape_numel(&bs), sizeof *wb);
	for (int64_t i = 0; i < ny; i++) {
		int64_t oa = bcast_off(&ys, idx, &as), ob = bcast_off(&ys, idx, &bs);
		double da, db, g = F(&in[0])[i] * (double)k->scale;
		partials(k->op, F(&in[1])[oa], F(&in[2])[ob], &da, &db);
		if (fa) /* one term: stored, not added to +0, so -0 stays -0 */
			wa[oa] = g * da;
		else
			wa[oa] += g * da;
		if (fb)
			wb[ob] = g * db;
		else
			wb[ob] += g * db;
		for (int d = k->ry - 1; d >= 0 && ++idx[d] == k->y[d]; d--)
			idx[d] = 0;
	}
	run2("BinaryGrad", 3, in, 4, at, 2, o1, o2);
	if (fa)
		exact_to(&o1[0], wa, k->op);
	else
		close_to(&o1[0], wa, 1e-6, k->op);
	if (fb)
		exact_to(&o1[1], wb, k->op);
	else if (k->alo >= 0)
		close_to(&o1[1], wb, 1e-6, k->op);
	same_bits(&o1[0], &o2[0], k->op);
	same_bits(&o1[1], &o2[1], k->op);
	free(wa);
	free(wb);
	free_all(o1, 2);
	free_all(o2, 2);
	free_all(in, 3);
}

static void test_binary_grad_bcast(void **state)
{
	static const struct bcase cases[] = {
		/* Gemm bias: [64,600] + [600], dA parallel, dB summed over rows */
		{ "Add", 2, 1, 2, { 64, 600 }, { 600 }, { 64, 600 }, 1.0f, 0, 0, 0 },
		/* conv-style bias [C,1,1]: each element summed over a contiguous run */
		{ "Sub", 4, 3, 4, { 2, 3, 5, 7 }, { 3, 1, 1 }, { 2, 3, 5, 7 }, 0.5f, 0, 0, 0 },
		/* both operands reduced */
		{ "Mul", 3, 2, 3, { 4, 1, 6 }, { 5, 1 }, { 4, 5, 6 }, 1.0f, 0, 0, 0 },
		/* B is a column: reduced along the contiguous dim with partials */
		{ "Div", 2, 2, 2, { 40, 1000 }, { 40, 1 }, { 40, 1000 }, 2.0f, 0, 0, 0 },
		/* B a row, A a scalar-like [1,1] */
		{ "Mul", 2, 2, 2, { 1, 1 }, { 3, 9 }, { 3, 9 }, 1.0f, 0, 0, 0 },
	};
	static const struct bcase fast[] = {
		/* LayerNorm's (x - mean)^2 and tanh-Gelu's x^3: the scalar-exponent
		 * shortcuts, over signed values, zeros, inf and NaN, in parallel */
		{ "Pow", 3, 1, 3, { 4, 64, 600 }, { 1 }, { 4, 64, 600 }, 1.0f, -2, 1, 2.0f },
		{ "Pow", 3, 1, 3, { 4, 64, 600 }, { 1 }, { 4, 64, 600 }, 0.5f, -2, 1, 3.0f },
		/* other scalar exponents take pow() itself */
		{ "Pow", 2, 0, 2, { 300, 500 }, { 0 }, { 300, 500 }, 1.0f, 0, 1, 0.5f },
		{ "Pow", 2, 0, 2, { 30, 50 }, { 0 }, { 30, 50 }, 1.0f, -2, 1, 1.0f },
		{ "Pow", 2, 0, 2, { 30, 50 }, { 0 }, { 30, 50 }, 1.0f, -2, 1, 0.0f },
		/* tensor exponent, both full */
		{ "Pow", 2, 2, 2, { 300, 500 }, { 300, 500 }, { 300, 500 }, 2.0f, 0, 0, 0 },
		/* X contiguous, Z scalar per segment (LayerNorm's divide), dB a row sum */
		{ "Div", 3, 3, 3, { 4, 64, 600 }, { 4, 64, 1 }, { 4, 64, 600 }, 1.0f, 0, 0, 0 },
		{ "Mul", 3, 3, 3, { 4, 64, 600 }, { 4, 64, 1 }, { 4, 64, 600 }, 1.0f, 0, 0, 0 },
		/* X scalar per segment, Z contiguous; dA summed per row */
		{ "Mul", 2, 2, 2, { 300, 1 }, { 300, 500 }, { 300, 500 }, 1.0f, 0, 0, 0 },
		{ "Div", 2, 2, 2, { 300, 1 }, { 300, 500 }, { 300, 500 }, 0.25f, 0, 0, 0 },
		/* LayerNorm's gamma: dB summed over rows into a contiguous row */
		{ "Mul", 2, 1, 2, { 300, 500 }, { 500 }, { 300, 500 }, 1.0f, 0, 0, 0 },
		{ "Pow", 2, 1, 2, { 300, 500 }, { 500 }, { 300, 500 }, 1.0f, 0, 0, 0 },
	};

	(void)state;
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
		binary_case(&cases[i], 10 + 3 * (unsigned)i);
	for (size_t i = 0; i < sizeof fast / sizeof fast[0]; i++)
		binary_case(&fast[i], 50 + 3 * (unsigned)i);
}

/* ---- ReduceGrad: dY broadcast back over the reduced axes ------------------ */

static void reduce_case(int nax, const int64_t *axes, unsigned seed)
{
	int64_t xs[3] = { 8, 64, 300 }, ks[3] = { 8, 64, 300 }, idx[3] = { 0 };
	struct hp_attr a[3] = { kt_ints("x_shape", 3, xs), kt_float("scale", 1.0f / 3), kt_ints("axes", nax, axes) };
	struct hp_tensor dy, o1, o2;

	for (int i = 0; i < (nax ? nax : 3); i++)
		ks[nax ? (axes[i] + 3) % 3 : i] = 1;
	dy = rnd(Tn(3, ks), seed, -1, 1);
	run2("ReduceGrad", 1, &dy, nax ? 3 : 2, a, 1, &o1, &o2);
	for (int64_t i = 0; i < numel(&o1); i++) {
		int64_t off = 0;
		for (int d = 0; d < 3; d++)
			off = off * ks[d] + (ks[d] == 1 ? 0 : idx[d]);
		float want = F(&dy)[off] * (1.0f / 3);
		if (memcmp(&F(&o1)[i], &want, sizeof want))
			fail_msg("ReduceGrad axes %d: at %lld got %g, want %g", nax, (long long)i, F(&o1)[i], want);
		for (int d = 2; d >= 0 && ++idx[d] == xs[d]; d--)
			idx[d] = 0;
	}
	same_bits(&o1, &o2, "ReduceGrad");
	hp_tensor_free(&o1);
	hp_tensor_free(&o2);
	hp_tensor_free(&dy);
}

static void test_reduce_grad_bcast(void **state)
{
	static const int64_t inner[1] = { -1 }, middle[1] = { 1 }, outer[1] = { 0 }, ends[2] = { 0, 2 };

	(void)state;
	reduce_case(1, inner, 70); /* LayerNorm's mean: one value per row */
	reduce_case(1, middle, 71);
	reduce_case(1, outer, 72);
	reduce_case(2, ends, 73);
	reduce_case(0, NULL, 74); /* all axes */
}

/* ---- MaxPoolGrad on disjoint windows --------------------------------------- */

/* dX of max pooling with k = s (no pads): dY to each window's first maximum
 * (NaN counts as the maximum), over a [planes, D, H, W] volume. */
static double *maxpool_ref(const float *x, const float *dy, int64_t planes, const int64_t *big, const int64_t *k,
			   const int64_t *small)
{
	int64_t bv = big[0] * big[1] * big[2], j = 0;
	double *dx = calloc((size_t)(planes * bv), sizeof *dx);

	for (int64_t p = 0; p < planes; p++)
		for (int64_t o0 = 0; o0 < small[0]; o0++)
			for (int64_t o1 = 0; o1 < small[1]; o1++)
				for (int64_t o2 = 0; o2 < small[2]; o2++, j++) {
					int64_t best = -1;
					for (int64_t a = 0; a < k[0]; a++)
						for (int64_t b = 0; b < k[1]; b++)
							for (int64_t c = 0; c < k[2]; c++) {
								int64_t f = p * bv + ((o0 * k[0] + a) * big[1] + o1 * k[1] + b) * big[2] +
									    o2 * k[2] + c;
								if (best < 0 || (isnan(x[f]) && !isnan(x[best])) ||
								    (!isnan(x[best]) && x[f] > x[best]))
									best = f;
							}
					dx[best] += dy[j];
				}
	return dx;
}

/* rank 4 or 5 input; spatial dims padded to 3 with 1s; quantized values make ties. */
static void maxpool_case(int rank, const int64_t *xd, const int64_t *kk, int quantize, unsigned seed)
{
	int64_t yd[5], big[3] = { 1, 1, 1 }, k[3] = { 1, 1, 1 }, small[3] = { 1, 1, 1 }, planes = xd[0] * xd[1];
	int nsp = rank - 2;
	struct hp_tensor in[2], o1, o2;
	double *want;

	yd[0] = xd[0], yd[1] = xd[1];
	for (int q = 0; q < nsp; q++) {
		yd[2 + q] = xd[2 + q] / kk[q];
		big[3 - nsp + q] = xd[2 + q];
		k[3 - nsp + q] = kk[q];
		small[3 - nsp + q] = yd[2 + q];
	}
	in[0] = rnd(Tn(rank, yd), seed, -1, 1);
	in[1] = rnd(Tn(rank, xd), seed + 1, -1, 1);
	for (int64_t i = 0; quantize && i < numel(&in[1]); i++)
		F(&in[1])[i] = roundf(F(&in[1])[i] * 2) / 2;
	if (quantize)
		F(&in[1])[3] = NAN;
	struct hp_attr at[2] = { kt_ints("kernel_shape", nsp, kk), kt_ints("strides", nsp, kk) };
	run2("MaxPoolGrad", 2, in, 2, at, 1, &o1, &o2);
	want = maxpool_ref(F(&in[1]), F(&in[0]), planes, big, k, small);
	close_to(&o1, want, 0, "MaxPoolGrad");
	same_bits(&o1, &o2, "MaxPoolGrad");
	free(want);
	hp_tensor_free(&o1);
	hp_tensor_free(&o2);
	free_all(in, 2);
}

/* Central differences of sum(dY * maxpool(X)) for a tie-free X. */
static void maxpool_fd(void)
{
	int64_t xd[5] = { 1, 2, 5, 4, 6 }, k[3] = { 2, 2, 3 }, yd[5] = { 1, 2, 2, 2, 2 };
	int64_t big[3] = { 5, 4, 6 }, small[3] = { 2, 2, 2 };
	struct hp_tensor in[2] = { rnd(Tn(5, yd), 40, -1, 1), rnd(Tn(5, xd), 41, -1, 1) }, o1, o2;
	struct hp_attr at[2] = { kt_ints("kernel_shape", 3, k), kt_ints("strides", 3, k) };
	int64_t n = numel(&in[1]);
	double *g = malloc((size_t)n * sizeof *g);

	run2("MaxPoolGrad", 2, in, 2, at, 1, &o1, &o2);
	for (int64_t i = 0; i < n; i++) {
		float s = F(&in[1])[i], h = 1e-3f;
		double lp = 0, lm = 0, *r;
		F(&in[1])[i] = s + h;
		r = maxpool_ref(F(&in[1]), F(&in[0]), 2, big, k, small);
		/* loss = sum dY * max: the reference dX at X+h dotted with X is it */
		for (int64_t j = 0; j < n; j++)
			lp += r[j] * F(&in[1])[j];
		free(r);
		F(&in[1])[i] = s - h;
		r = maxpool_ref(F(&in[1]), F(&in[0]), 2, big, k, small);
		for (int64_t j = 0; j < n; j++)
			lm += r[j] * F(&in[1])[j];
		free(r);
		F(&in[1])[i] = s;
		g[i] = (lp - lm) / (2.0 * h);
	}
	close_to(&o1, g, 1e-3, "MaxPoolGrad FD");
	free(g);
	hp_tensor_free(&o1);
	hp_tensor_free(&o2);
	free_all(in, 2);
}

static void test_maxpool_grad_tiled(void **state)
{
	int64_t x2[4] = { 2, 3, 9, 8 }, k2[2] = { 2, 2 };
	int64_t x3[5] = { 1, 4, 6, 5, 4 }, k3[3] = { 2, 2, 2 };
	int64_t xb[5] = { 2, 32, 8, 16, 16 }, k33[3] = { 3, 3, 3 }, x33[5] = { 1, 2, 7, 6, 9 };

	(void)state;
	maxpool_case(4, x2, k2, 1, 30); /* ties, NaN, odd height (last row in no window) */
	maxpool_case(5, x3, k3, 1, 32);
	maxpool_case(5, xb, k3, 0, 34); /* 64 planes of 2048: split over the pool */
	maxpool_case(5, x33, k33, 1, 36);
	maxpool_fd();
}

/* Overlapping and padded windows in 1 or 2 spatial dims (3x3 stride 1 or
 * 2 pads 1, asymmetric pads, dilation, windows past the end): each dY to
 * its window's first maximum (NaN wins), against a scan of every tap. */
struct ovl {
	int nsp;
	int64_t x[4], k[2], s[2], p[4], d[2];
};

static void maxpool_ovl_case(const struct ovl *o, unsigned seed)
{
	int64_t yd[4] = { o->x[0], o->x[1], 1, 1 }, xd[4] = { o->x[0], o->x[1], o->x[2], o->nsp > 1 ? o->x[3] : 1 };
	int64_t hw[2] = { xd[2], xd[3] }, k[2] = { o->k[0], o->nsp > 1 ? o->k[1] : 1 }, st[2] = { o->s[0], 1 };
	int64_t pb[2] = { o->p[0], 0 }, dl[2] = { o->d[0], 1 }, pe0 = o->nsp > 1 ? o->p[2] : o->p[1];
	int64_t pe[2] = { pe0, o->nsp > 1 ? o->p[3] : 0 };

	if (o->nsp > 1)
		st[1] = o->s[1], pb[1] = o->p[1], dl[1] = o->d[1];
	for (int q = 0; q < 2; q++)
		yd[2 + q] = (hw[q] + pb[q] + pe[q] - ((k[q] - 1) * dl[q] + 1)) / st[q] + 1;
	int rank = 2 + o->nsp;
	struct hp_tensor in[2] = { rnd(Tn(rank, yd), seed, -1, 1), rnd(Tn(rank, xd), seed + 1, -1, 1) }, o1, o2;
	for (int64_t i = 0; i < numel(&in[1]); i++)
		F(&in[1])[i] = roundf(F(&in[1])[i] * 3) / 3; /* ties */
	F(&in[1])[5] = NAN;
	struct hp_attr at[4] = { kt_ints("kernel_shape", o->nsp, o->k), kt_ints("strides", o->nsp, o->s),
				 kt_ints("pads", 2 * o->nsp, o->p), kt_ints("dilations", o->nsp, o->d) };
	int64_t planes = xd[0] * xd[1], bv = hw[0] * hw[1], j = 0;
	/* float sums in dY's order, as the kernel adds (overlapping windows
	 * send several dY to one element) */
	float *acc = calloc((size_t)(planes * bv), sizeof *acc);
	double *want = calloc((size_t)(planes * bv), sizeof *want);
	const float *x = F(&in[1]), *dy = F(&in[0]);
	for (int64_t pl = 0; pl < planes; pl++)
		for (int64_t a = 0; a < yd[2]; a++)
			for (int64_t b = 0; b < yd[3]; b++, j++) {
				int64_t best = -1;
				for (int64_t u = 0; u < k[0]; u++)
					for (int64_t v = 0; v < k[1]; v++) {
						int64_t h = a * st[0] - pb[0] + u * dl[0], w = b * st[1] - pb[1] + v * dl[1];
						if (h < 0 || h >= hw[0] || w < 0 || w >= hw[1])
							continue;
						int64_t f = pl * bv + h * hw[1] + w;
						if (best < 0 || (isnan(x[f]) && !isnan(x[best])) || (!isnan(x[best]) && x[f] > x[best]))
							best = f;
					}
				if (best >= 0)
					acc[best] += dy[j];
			}
	for (int64_t i = 0; i < planes * bv; i++)
		want[i] = acc[i];
	free(acc);
	run2("MaxPoolGrad", 2, in, 4, at, 1, &o1, &o2);
	close_to(&o1, want, 0, "MaxPoolGrad (overlapping windows)");
	same_bits(&o1, &o2, "MaxPoolGrad (overlapping windows)");
	free(want);
	hp_tensor_free(&o1);
	hp_tensor_free(&o2);
	free_all(in, 2);
}

static void test_maxpool_grad_overlap(void **state)
{
	static const struct ovl cases[] = {
		{ 2, { 2, 3, 9, 8 }, { 3, 3 }, { 1, 1 }, { 1, 1, 1, 1 }, { 1, 1 } },    /* inception's pool */
		{ 2, { 2, 24, 17, 16 }, { 3, 3 }, { 2, 2 }, { 1, 1, 1, 1 }, { 1, 1 } }, /* a stem's, on the pool */
		{ 2, { 1, 2, 7, 8 }, { 3, 2 }, { 2, 3 }, { 1, 0, 2, 1 }, { 2, 1 } },   /* asymmetric, dilated */
		{ 2, { 1, 2, 5, 6 }, { 2, 2 }, { 1, 1 }, { 0, 0, 0, 0 }, { 1, 1 } },   /* overlap, no pads */
		{ 1, { 2, 3, 11 }, { 3 }, { 1 }, { 1, 1 }, { 1 } },                     /* 1-D */
		{ 1, { 1, 2, 10 }, { 4 }, { 3 }, { 2, 3 }, { 1 } },                     /* 1-D, past the end */
	};
	(void)state;
	for (unsigned i = 0; i < sizeof cases / sizeof cases[0]; i++)
		maxpool_ovl_case(&cases[i], 60 + 2 * i);
}

/* ---- optimizers and GradSum ------------------------------------------------- */

static void test_sgd_fast(void **state)
{
	int64_t d[1] = { 100003 };
	(void)state;
	for (int v = 0; v < 4; v++) {
		float lr = 0.1f, mu = v >= 2 ? 0.9f : 0, wd = v & 1 ? 0.01f : 0;
		int nest = v == 3;
		struct hp_tensor in[3] = { rnd(Tn(1, d), 50, -1, 1), rnd(Tn(1, d), 51, -1, 1), rnd(Tn(1, d), 52, -1, 1) };
		struct hp_tensor o1[2], o2[2];
		struct hp_attr at[4] = { kt_float("lr", lr), kt_float("momentum", mu), kt_float("weight_decay", wd),
					 kt_int("nesterov", nest) };
		double *ww = malloc((size_t)d[0] * sizeof *ww), *wb = malloc((size_t)d[0] * sizeof *wb);
		int nin = mu != 0 ? 3 : 2;
		for (int64_t i = 0; i < d[0]; i++) {
			double w = F(&in[0])[i], gr = F(&in[1])[i] + (double)wd * w, b = mu * (double)F(&in[2])[i] + gr;
			wb[i] = b;
			ww[i] = w - lr * (mu == 0 ? gr : nest ? gr + mu * b : b);
		}
		run2("SGDUpdate", nin, in, 4, at, nin - 1, o1, o2);
		close_to(&o1[0], ww, 1e-6, "SGD weight");
		same_bits(&o1[0], &o2[0], "SGD weight");
		if (nin == 3) {
			close_to(&o1[1], wb, 1e-6, "SGD momentum");
			same_bits(&o1[1], &o2[1], "SGD momentum");
		}
		free(ww);
		free(wb);
		free_all(o1, nin - 1);
		free_all(o2, nin - 1);
		free_all(in, 3);
	}
}

static void test_adam_fast(void **state)
{
	int64_t d[1] = { 90001 }, one[1] = { 1 };
	(void)state;
	for (int v = 0; v < 2; v++) {
		struct hp_tensor in[5] = { rnd(Tn(1, d), 60, -1, 1), rnd(Tn(1, d), 61, -1, 1), rnd(Tn(1, d), 62, -0.1f, 0.1f),
					   rnd(Tn(1, d), 63, 0, 0.01f), kt_tensor(HP_I64, 1, one) };
		struct hp_tensor o1[3], o2[3];
		double lr = 0.001f, wd = 0.01f, b1 = 0.9f, b2 = 0.999f, eps = 1e-8f, bc1, bc2;
		struct hp_attr at[3] = { kt_float("lr", (float)lr), kt_float("weight_decay", (float)wd),
					 kt_int("decoupled", v) };
		double *ww = malloc((size_t)d[0] * sizeof *ww);
		int64_t step = 3;
		*(int64_t *)in[4].data = step;
		bc1 = 1 - pow(b1, (double)step);
		bc2 = 1 - pow(b2, (double)step);
		for (int64_t i = 0; i < d[0]; i++) {
			double w = F(&in[0])[i], gr = F(&in[1])[i];
			if (v)
				w *= 1 - lr * wd;
			else
				gr += wd * w;
			double m = b1 * F(&in[2])[i] + (1 - b1) * gr, s = b2 * F(&in[3])[i] + (1 - b2) * gr * gr;
			ww[i] = w - lr / bc1 * m / (sqrt(s) / sqrt(bc2) + eps);
		}
		run2("AdamUpdate", 5, in, 3, at, 3, o1, o2);
		close_to(&o1[0], ww, 1e-6, v ? "AdamW weight" : "Adam weight");
		for (int k = 0; k < 3; k++)
			same_bits(&o1[k], &o2[k], "Adam");
		free(ww);
		free_all(o1, 3);
		free_all(o2, 3);
		free_all(in, 5);
	}
}

static void test_grad_sum_fast(void **state)
{
	int64_t d[2] = { 3, 40000 };
	struct hp_tensor in[3] = { rnd(Tn(2, d), 70, -1, 1), rnd(Tn(2, d), 71, -1, 1), rnd(Tn(2, d), 72, -1, 1) };
	struct hp_tensor o1, o2;

	(void)state;
	run2("GradSum", 3, in, 0, NULL, 1, &o1, &o2);
	for (int64_t i = 0; i < numel(&o1); i++) {
		float want = F(&in[0])[i];
		want += F(&in[1])[i];
		want += F(&in[2])[i];
		if (F(&o1)[i] != want)
			fail_msg("GradSum at %lld: got %.9g, want %.9g", (long long)i, F(&o1)[i], want);
	}
	same_bits(&o1, &o2, "GradSum");
	hp_tensor_free(&o1);
	hp_tensor_free(&o2);
	free_all(in, 3);
}

/* GradSum in place (HP_OP_INPLACE: the planner may give the output input
 * 0's tensor): the same bits as into a new tensor, also when a later input
 * is that tensor too (y = (a + b) + a, not (a + b) + (a + b)). */
static void test_grad_sum_inplace(void **state)
{
	int64_t d[1] = { 100003 }, n = d[0];
	struct hp_tensor in[3] = { rnd(Tn(1, d), 73, -1, 1), rnd(Tn(1, d), 74, -1, 1), rnd(Tn(1, d), 75, -1, 1) };
	const struct hp_op *op = hp_op_find(D, "GradSum");
	float *y = malloc((size_t)n * sizeof *y);

	(void)state;
	assert_non_null(op);
	assert_true(op->flags & HP_OP_INPLACE);
	for (int dup = 0; dup < 2; dup++)
		for (int th = 0; th < 2; th++) {
			struct hp_node node = { .ninputs = 3, .noutputs = 1 };
			struct hp_tensor ai[3] = { in[0], in[1], dup ? in[0] : in[2] }, out = in[0];
			struct hp_kargs ka = { .nin = 3, .nout = 1, .in = ai, .out = &out, .pool = th ? pool : NULL };
			memcpy(y, in[0].data, (size_t)n * sizeof *y);
			ai[0].data = out.data = y;
			if (dup)
				ai[2].data = y;
			assert_int_equal(op->run(&node, &ka), 0);
			for (int64_t i = 0; i < n; i++) {
				float want = F(&in[0])[i];
				want += F(&in[1])[i];
				want += dup ? F(&in[0])[i] : F(&in[2])[i];
				if (memcmp(&y[i], &want, sizeof want))
					fail_msg("GradSum in place (%s, %d threads) at %lld: got %.9g, want %.9g",
						 dup ? "input 0 twice" : "distinct inputs", th + 1, (long long)i, y[i], want);
			}
		}
	free(y);
	free_all(in, 3);
}

static int setup(void **state)
{
	(void)state;
	return hp_pool_create(2, &pool);
}

static int teardown(void **state)
{
	(void)state;
	hp_pool_destroy(pool);
	return 0;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_relu_grad),
		cmocka_unit_test(test_tanh_grad),
		cmocka_unit_test(test_tail_grads),
		cmocka_unit_test(test_erf_grad),
		cmocka_unit_test(test_gelu_grad),
		cmocka_unit_test(test_binary_grad_bcast),
		cmocka_unit_test(test_reduce_grad_bcast),
		cmocka_unit_test(test_maxpool_grad_tiled),
		cmocka_unit_test(test_maxpool_grad_overlap),
		cmocka_unit_test(test_sgd_fast),
		cmocka_unit_test(test_adam_fast),
		cmocka_unit_test(test_grad_sum_fast),
		cmocka_unit_test(test_grad_sum_inplace),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
