/* Training ops: every backward kernel against central finite differences of
 * a naive float64 forward written here, losses against their formula and
 * FD, optimizers against a transcription of the torch.optim docs. */
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
#include "kernels/band.h"
#include "kernels/conv_grad_phase.h"
#include "kernels/conv_impl.h"
#include "tests/kernels/harness.h"

#define D "ai.hpdlf"

static struct hp_tensor T(int rank, ...)
{
	int64_t d[HP_MAX_RANK];
	va_list ap;

	va_start(ap, rank);
	for (int i = 0; i < rank; i++)
		d[i] = va_arg(ap, int);
	va_end(ap);
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

static double *dbl(const struct hp_tensor *t)
{
	int64_t n = numel(t);
	double *d = malloc((size_t)(n ? n : 1) * sizeof *d);

	for (int64_t i = 0; i < n; i++)
		d[i] = ((const float *)t->data)[i];
	return d;
}

static struct hp_pool *kt_pool; /* pool the ops run with (NULL: one thread) */

static void run(const char *op, int nin, const struct hp_tensor *in, int na, const struct hp_attr *a, int nout,
		struct hp_tensor *out)
{
	struct kt_case c = { .domain = D, .op = op, .nin = nin, .in = in, .nattrs = na, .attrs = a, .nout = nout,
			     .pool = kt_pool };
	int rc = kt_run(&c, out);

	if (rc < 0)
		fail_msg("%s: %s", op, hp_errmsg());
}

/* Compare a float tensor with a double reference: max error relative to
 * max(1, max |want|). */
static void close_to(const struct hp_tensor *got, const double *want, double tol, const char *what)
{
	int64_t n = numel(got);
	double err = 0, scale = 1;
	int64_t at = -1;

	for (int64_t i = 0; i < n; i++) {
		double e = fabs(((const float *)got->data)[i] - want[i]);
		if (!(e <= err)) {
			err = e;
			at = i;
		}
		if (fabs(want[i]) > scale)
			scale = fabs(want[i]);
	}
	if (!(err / scale <= tol))
		fail_msg("%s: error %.3g at %lld (got %.7g, want %.7g)", what, err / scale, (long long)at,
			 ((const float *)got->data)[at], want[at]);
}

/* Central differences of loss() with respect to x[0..n). */
typedef double (*loss_fn)(void *ctx);

static void fd_check(loss_fn loss, void *ctx, double *x, const struct hp_tensor *got, double tol, const char *what)
{
	int64_t n = numel(got);
	double *g = malloc((size_t)(n ? n : 1) * sizeof *g);

	for (int64_t i = 0; i < n; i++) {
		double s = x[i], h = 1e-6 * (fabs(s) > 1 ? fabs(s) : 1), lp, lm;
		x[i] = s + h;
		lp = loss(ctx);
		x[i] = s - h;
		lm = loss(ctx);
		x[i] = s;
		g[i] = (lp - lm) / (2 * h);
	}
	close_to(got, g, tol, what);
	free(g);
}

static void free_all(struct hp_tensor *t, int n)
{
	for (int i = 0; i < n; i++)
		hp_tensor_free(&t[i]);
}

/* ---- UnaryGrad ---------------------------------------------------------- */

struct un_ctx {
	const char *op;
	double *x, *dy, *y;
	int64_t n;
};

static double un_f(const char *op, double x)
{
	if (!strcmp(op, "Relu")) return x > 0 ? x : 0;
	if (!strcmp(op, "LeakyRelu")) return x > 0 ? x : 0.1 * x;
	if (!strcmp(op, "Elu")) return x > 0 ? x : 0.7 * (exp(x) - 1);
	if (!strcmp(op, "Selu")) return 1.0507009873554805 * (x > 0 ? x : 1.6732632423543772 * (exp(x) - 1));
	if (!strcmp(op, "Sigmoid")) return 1 / (1 + exp(-x));
	if (!strcmp(op, "HardSigmoid")) return fmax(0, fmin(1, 0.2 * x + 0.5));
	if (!strcmp(op, "HardSwish")) return x * fmax(0, fmin(6, x + 3)) / 6;
	if (!strcmp(op, "Tanh")) return tanh(x);
	if (!strcmp(op, "Softplus")) return log(1 + exp(x));
	if (!strcmp(op, "Softsign")) return x / (1 + fabs(x));
	if (!strcmp(op, "Exp")) return exp(x);
	if (!strcmp(op, "Log")) return log(x);
	if (!strcmp(op, "Sqrt")) return sqrt(x);
	if (!strcmp(op, "Reciprocal")) return 1 / x;
	if (!strcmp(op, "Neg")) return -x;
	if (!strcmp(op, "Abs")) return fabs(x);
	if (!strcmp(op, "Erf")) return erf(x);
	if (!strcmp(op, "Gelu")) return 0.5 * x * erfc(-x / sqrt(2.0));
	if (!strcmp(op, "GeluTanh")) return 0.5 * x * (1 + tanh(sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
	if (!strcmp(op, "Identity")) return x;
	if (!strcmp(op, "Clip")) return fmin(0.8, fmax(-0.5, x));
	if (!strcmp(op, "Sin")) return sin(x);
	if (!strcmp(op, "Cos")) return cos(x);
	if (!strcmp(op, "Mish")) return x * tanh(log1p(exp(x)));
	if (!strcmp(op, "Tan")) return tan(x);
	if (!strcmp(op, "Asin")) return asin(x);
	if (!strcmp(op, "Acos")) return acos(x);
	if (!strcmp(op, "Atan")) return atan(x);
	if (!strcmp(op, "Sinh")) return sinh(x);
	if (!strcmp(op, "Cosh")) return cosh(x);
	if (!strcmp(op, "Asinh")) return asinh(x);
	if (!strcmp(op, "Acosh")) return acosh(x);
	if (!strcmp(op, "Atanh")) return atanh(x);
	if (!strcmp(op, "Celu")) return x > 0 ? x : 0.6 * expm1(x / 0.6);
	if (!strcmp(op, "Shrink")) return x < -0.4 ? x + 2 : x > 0.4 ? x - 2 : 0; /* lambd 0.4, bias 2 */
	return NAN;
}

static double un_loss(void *p)
{
	struct un_ctx *c = p;
	double s = 0;

	for (int64_t i = 0; i < c->n; i++)
		s += c->dy[i] * un_f(c->op, c->x[i]);
	return s;
}

static void test_unary_grad(void **state)
{
	static const char *const ops[] = { "Relu", "LeakyRelu", "Elu", "Selu", "Sigmoid", "HardSigmoid",
					   "HardSwish", "Tanh", "Softplus", "Softsign", "Exp", "Log", "Sqrt",
					   "Reciprocal", "Neg", "Abs", "Erf", "Gelu", "GeluTanh", "Identity",
					   "Clip", "Sin", "Cos", "Mish", "Tan", "Asin", "Acos", "Atan", "Sinh",
					   "Cosh", "Asinh", "Acosh", "Atanh", "Celu", "Shrink" };
	(void)state;
	for (size_t k = 0; k < sizeof ops / sizeof ops[0]; k++) {
		int pos = !strcmp(ops[k], "Log") || !strcmp(ops[k], "Sqrt") || !strcmp(ops[k], "Reciprocal");
		/* inside each function's domain, away from poles */
		int unit = !strcmp(ops[k], "Asin") || !strcmp(ops[k], "Acos") || !strcmp(ops[k], "Atanh");
		float lo = pos ? 0.3f : unit ? -0.9f : !strcmp(ops[k], "Acosh") ? 1.2f : !strcmp(ops[k], "Tan") ? -1.2f : -3;
		float hi = unit ? 0.9f : !strcmp(ops[k], "Tan") ? 1.2f : 3;
		struct hp_tensor in[2] = { rnd(T(2, 3, 7), 1, -1, 1), rnd(T(2, 3, 7), 2, lo, hi) };
		struct hp_attr a[3] = { kt_string("op", ops[k]) };
		int na = 1;
		struct hp_tensor out;
		struct un_ctx c = { ops[k], dbl(&in[1]), dbl(&in[0]), NULL, numel(&in[0]) };
		if (!strcmp(ops[k], "LeakyRelu") || !strcmp(ops[k], "Elu") || !strcmp(ops[k], "Celu"))
			a[na++] = kt_float("alpha", !strcmp(ops[k], "Elu") ? 0.7f : !strcmp(ops[k], "Celu") ? 0.6f : 0.1f);
		if (!strcmp(ops[k], "Shrink")) {
			a[na++] = kt_float("lambd", 0.4f);
			a[na++] = kt_float("bias", 2.0f);
		}
		if (!strcmp(ops[k], "Clip")) {
			a[na++] = kt_float("min", -0.5f);
			a[na++] = kt_float("max", 0.8f);
		}
		run("UnaryGrad", 2, in, na, a, 1, &out);
		fd_check(un_loss, &c, c.x, &out, 1e-5, ops[k]);
		free(c.x);
		free(c.dy);
		hp_tensor_free(&out);
		free_all(in, 2);
	}
}

/* ---- BinaryGrad and WhereGrad: a [2,3,1], b [3,4] -> y [2,3,4] ----------- */

struct bin_ctx {
	const char *op;
	double *a, *b, *dy, scale;
	unsigned char *cond; /* Where: cond [2,1,4] */
};

static double bin_f(const char *op, double a, double b)
{
	if (!strcmp(op, "Add")) return a + b;
	if (!strcmp(op, "Sub")) return a - b;
	if (!strcmp(op, "Mul")) return a * b;
	if (!strcmp(op, "Div")) return a / b;
	if (!strcmp(op, "Pow")) return pow(a, b);
	if (!strcmp(op, "Max")) return fmax(a, b);
	return fmin(a, b);
}

static double bin_loss(void *p)
{
	struct bin_ctx *c = p;
	double s = 0;

	for (int i = 0; i < 2; i++)
		for (int j = 0; j < 3; j++)
			for (int k = 0; k < 4; k++) {
				double a = c->a[i * 3 + j], b = c->b[j * 4 + k], y;
				if (c->cond)
					y = c->cond[i * 4 + k] ? a : b;
				else
					y = bin_f(c->op, a, b);
				s += c->scale * c->dy[(i * 3 + j) * 4 + k] * y;
			}
	return s;
}

static void test_binary_grad(void **state)
{
	static const char *const ops[] = { "Add", "Sub", "Mul", "Div", "Pow", "Max", "Min" };
	int64_t as[3] = { 2, 3, 1 }, bs[2] = { 3, 4 };

	(void)state;
	for (size_t k = 0; k < sizeof ops / sizeof ops[0]; k++) {
		struct hp_tensor in[3] = { rnd(T(3, 2, 3, 4), 3, -1, 1), rnd(T(3, 2, 3, 1), 4, 0.5f, 2),
					   rnd(T(2, 3, 4), 5, 0.5f, 2) };
		struct hp_attr a[4] = { kt_string("op", ops[k]), kt_ints("a_shape", 3, as), kt_ints("b_shape", 2, bs),
					kt_float("scale", 0.5f) };
		struct hp_tensor out[2];
		struct bin_ctx c = { ops[k], dbl(&in[1]), dbl(&in[2]), dbl(&in[0]), 0.5, NULL };
		char what[64];
		run("BinaryGrad", 3, in, 4, a, 2, out);
		snprintf(what, sizeof what, "%s dA", ops[k]);
		fd_check(bin_loss, &c, c.a, &out[0], 1e-5, what);
		snprintf(what, sizeof what, "%s dB", ops[k]);
		fd_check(bin_loss, &c, c.b, &out[1], 1e-5, what);
		free(c.a);
		free(c.b);
		free(c.dy);
		free_all(out, 2);
		free_all(in, 3);
	}
}

static void test_where_grad(void **state)
{
	int64_t as[3] = { 2, 3, 1 }, bs[2] = { 3, 4 }, cs[3] = { 2, 1, 4 };
	struct hp_tensor in[2] = { rnd(T(3, 2, 3, 4), 6, -1, 1), kt_tensor(HP_BOOL, 3, cs) };
	struct hp_attr a[2] = { kt_ints("a_shape", 3, as), kt_ints("b_shape", 2, bs) };
	struct hp_tensor out[2], ta = rnd(T(3, 2, 3, 1), 7, -1, 1), tb = rnd(T(2, 3, 4), 8, -1, 1);
	unsigned char *cond = in[1].data;
	struct bin_ctx c = { "Where", dbl(&ta), dbl(&tb), dbl(&in[0]), 1, cond };

	(void)state;
	for (int i = 0; i < 8; i++)
		cond[i] = (unsigned char)((i * 5 + 1) % 3 != 0);
	run("WhereGrad", 2, in, 2, a, 2, out);
	fd_check(bin_loss, &c, c.a, &out[0], 1e-5, "Where dA");
	fd_check(bin_loss, &c, c.b, &out[1], 1e-5, "Where dB");
	free(c.a);
	free(c.b);
	free(c.dy);
	free_all(out, 2);
	free_all(in, 2);
	hp_tensor_free(&ta);
	hp_tensor_free(&tb);
}

/* ---- DropoutTrain / DropoutGrad ----------------------------------------- */

static void test_dropout(void **state)
{
	int64_t one[1] = { 1 };
	struct hp_tensor in[2] = { rnd(T(1, 4000), 9, 0.5f, 1.5f), kt_tensor(HP_I64, 0, one) };
	struct hp_attr a[2] = { kt_float("ratio", 0.3f), kt_int("seed", 42) };
	struct hp_tensor o1[2], o2[2], o3[2], g, gin[2];
	const float *x = in[0].data;
	int kept = 0, differ = 0;

	(void)state;
	run("DropoutTrain", 2, in, 2, a, 2, o1);
	run("DropoutTrain", 2, in, 2, a, 2, o2);
	*(int64_t *)in[1].data = 1;
	run("DropoutTrain", 2, in, 2, a, 2, o3);
	for (int i = 0; i < 4000; i++) {
		const unsigned char *m = o1[1].data;
		float y = ((const float *)o1[0].data)[i];
		kept += m[i];
		differ += m[i] != ((const unsigned char *)o3[1].data)[i];
		assert_true(m[i] ? fabs(y - x[i] / 0.7) < 1e-5 : y == 0.0f);
	}
	assert_memory_equal(o1[1].data, o2[1].data, 4000); /* same seed and step: same mask */
	assert_true(differ > 1000);                        /* next step: a new mask */
	assert_true(kept > 4000 * 0.7 - 150 && kept < 4000 * 0.7 + 150);
	gin[0] = rnd(T(1, 4000), 10, -1, 1);
	gin[1] = o1[1];
	run("DropoutGrad", 2, gin, 1, a, 1, &g);
	for (int i = 0; i < 4000; i++) {
		float want = ((const unsigned char *)o1[1].data)[i] ? ((const float *)gin[0].data)[i] / 0.7f : 0.0f;
		assert_true(fabs(((const float *)g.data)[i] - want) < 1e-5);
	}
	hp_tensor_free(&g);
	hp_tensor_free(&gin[0]);
	free_all(o1, 2);
	free_all(o2, 2);
	free_all(o3, 2);
	free_all(in, 2);
}

/* ---- MatMulGrad and GemmGrad -------------------------------------------- */

struct mm_ctx {
	double *a, *b, *dy;
	int ra, rb;          /* ranks as numpy sees them */
	int64_t ad[4], bd[4], yd[4];
	int ry;
};

/* Naive numpy matmul for the shapes of the test cases (rank <= 4). */
static double mm_loss(void *p)
{
	struct mm_ctx *c = p;
	int64_t a4[4], b4[4], y4[4], m, k, n, s = 0;
	double sum = 0;

	/* promote to [B0,B1,M,K] x [B0,B1,K,N] with broadcasting */
	for (int i = 0; i < 4; i++)
		a4[i] = b4[i] = y4[i] = 1;
	if (c->ra == 1) {
		a4[3] = c->ad[0];
	} else {
		for (int i = 0; i < c->ra; i++)
			a4[4 - c->ra + i] = c->ad[i];
	}
	if (c->rb == 1) {
		b4[2] = c->bd[0];
	} else {
		for (int i = 0; i < c->rb; i++)
			b4[4 - c->rb + i] = c->bd[i];
	}
	m = a4[2];
	k = a4[3];
	n = b4[3];
	y4[0] = a4[0] > b4[0] ? a4[0] : b4[0];
	y4[1] = a4[1] > b4[1] ? a4[1] : b4[1];
	for (int64_t i0 = 0; i0 < y4[0]; i0++)
		for (int64_t i1 = 0; i1 < y4[1]; i1++)
			for (int64_t r = 0; r < m; r++)
				for (int64_t q = 0; q < n; q++) {
					double v = 0;
					int64_t ab = ((a4[0] > 1 ? i0 : 0) * a4[1] + (a4[1] > 1 ? i1 : 0)) * m * k;
					int64_t bb = ((b4[0] > 1 ? i0 : 0) * b4[1] + (b4[1] > 1 ? i1 : 0)) * k * n;
					for (int64_t j = 0; j < k; j++)
						v += c->a[ab + r * k + j] * c->b[bb + j * n + q];
					sum += c->dy[s++] * v;
				}
	return sum;
}

static void mm_case(int ra, const int *ad, int rb, const int *bd, int ry, const int *yd)
{
	int64_t a64[4], b64[4], y64[4];
	struct hp_tensor in[3], out[2];
	struct mm_ctx c = { .ra = ra, .rb = rb, .ry = ry };

	for (int i = 0; i < 4; i++) {
		a64[i] = c.ad[i] = i < ra ? ad[i] : 0;
		b64[i] = c.bd[i] = i < rb ? bd[i] : 0;
		y64[i] = c.yd[i] = i < ry ? yd[i] : 0;
	}
	in[0] = kt_tensor(HP_F32, ry, y64);
	in[1] = kt_tensor(HP_F32, ra, a64);
	in[2] = kt_tensor(HP_F32, rb, b64);
	for (int i = 0; i < 3; i++)
		kt_fill_random(&in[i], 20 + (unsigned)i, -1, 1);
	c.dy = dbl(&in[0]);
	c.a = dbl(&in[1]);
	c.b = dbl(&in[2]);
	run("MatMulGrad", 3, in, 0, NULL, 2, out);
	fd_check(mm_loss, &c, c.a, &out[0], 1e-5, "MatMul dA");
	fd_check(mm_loss, &c, c.b, &out[1], 1e-5, "MatMul dB");
	free(c.a);
	free(c.b);
	free(c.dy);
	free_all(out, 2);
	free_all(in, 3);
}

static void test_matmul_grad(void **state)
{
	(void)state;
	mm_case(3, (int[]){ 2, 3, 4 }, 2, (int[]){ 4, 5 }, 3, (int[]){ 2, 3, 5 });
	mm_case(1, (int[]){ 4 }, 3, (int[]){ 2, 4, 3 }, 2, (int[]){ 2, 3 });
	mm_case(2, (int[]){ 3, 4 }, 1, (int[]){ 4 }, 1, (int[]){ 3 });
	mm_case(4, (int[]){ 2, 1, 3, 4 }, 3, (int[]){ 3, 4, 2 }, 4, (int[]){ 2, 3, 3, 2 });
	/* unbatched B: the batches fold into the rows of one product */
	mm_case(4, (int[]){ 2, 3, 5, 4 }, 2, (int[]){ 4, 3 }, 4, (int[]){ 2, 3, 5, 3 });
	mm_case(3, (int[]){ 2, 3, 4 }, 1, (int[]){ 4 }, 2, (int[]){ 2, 3 });
	/* both batched alike (attention): each product writes its own slices */
	mm_case(4, (int[]){ 2, 3, 4, 5 }, 4, (int[]){ 2, 3, 5, 6 }, 4, (int[]){ 2, 3, 4, 6 });
	/* B batched alike, A broadcast along one dim: dA sums, dB does not */
	mm_case(4, (int[]){ 2, 1, 4, 5 }, 4, (int[]){ 2, 3, 5, 2 }, 4, (int[]){ 2, 3, 4, 2 });
}

/* Attention's gradient products (both operands batched alike, above the
 * pool's threshold): on two threads bitwise one thread, and both against
 * the products written out in double. */
static void test_matmul_grad_pool(void **state)
{
	enum { B = 8, M = 40, K = 48, N = 40 };
	struct hp_tensor in[3] = { rnd(T(4, 2, 4, M, N), 24, -1, 1), rnd(T(4, 2, 4, M, K), 25, -1, 1),
				   rnd(T(4, 2, 4, K, N), 26, -1, 1) };
	struct hp_tensor one[2], two[2];
	struct hp_pool *pool;
	double *da = malloc(sizeof(double) * B * M * K), *db = malloc(sizeof(double) * B * K * N);
	const float *dy = in[0].data, *a = in[1].data, *b = in[2].data;

	(void)state;
	assert_int_equal(hp_pool_create(2, &pool), 0);
	run("MatMulGrad", 3, in, 0, NULL, 2, one);
	kt_pool = pool;
	run("MatMulGrad", 3, in, 0, NULL, 2, two);
	kt_pool = NULL;
	for (int o = 0; o < 2; o++)
		assert_memory_equal(one[o].data, two[o].data, (size_t)numel(&one[o]) * sizeof(float));
	for (int i = 0; i < B; i++) {
		for (int r = 0; r < M; r++)
			for (int q = 0; q < K; q++) { /* dA = dY B^T */
				double v = 0;
				for (int c = 0; c < N; c++)
					v += (double)dy[(i * M + r) * N + c] * b[(i * K + q) * N + c];
				da[(i * M + r) * K + q] = v;
			}
		for (int q = 0; q < K; q++)
			for (int c = 0; c < N; c++) { /* dB = A^T dY */
				double v = 0;
				for (int r = 0; r < M; r++)
					v += (double)a[(i * M + r) * K + q] * dy[(i * M + r) * N + c];
				db[(i * K + q) * N + c] = v;
			}
	}
	close_to(&two[0], da, 1e-5, "batched MatMul dA");
	close_to(&two[1], db, 1e-5, "batched MatMul dB");
	free(da);
	free(db);
	free_all(one, 2);
	free_all(two, 2);
	free_all(in, 3);
	hp_pool_destroy(pool);
}

struct gemm_ctx {
	double *a, *b, *dy, alpha;
	int ta, tb;
	int64_t m, k, n;
};

static double gemm_loss(void *p)
{
	struct gemm_ctx *c = p;
	double s = 0;

	for (int64_t i = 0; i < c->m; i++)
		for (int64_t j = 0; j < c->n; j++) {
			double v = 0;
			for (int64_t q = 0; q < c->k; q++)
				v += c->a[c->ta ? q * c->m + i : i * c->k + q] * c->b[c->tb ? j * c->k + q : q * c->n + j];
			s += c->dy[i * c->n + j] * c->alpha * v;
		}
	return s;
}

static void test_gemm_grad(void **state)
{
	(void)state;
	/* t & 4: pack_b (dA by a packed op(B)^T, gemm_panels.h) */
	for (int t = 0; t < 8; t++) {
		struct gemm_ctx c = { .alpha = 0.75, .ta = t & 1, .tb = (t >> 1) & 1, .m = 3, .k = 5, .n = 4 };
		struct hp_tensor in[3] = { rnd(T(2, 3, 4), 30, -1, 1), rnd(c.ta ? T(2, 5, 3) : T(2, 3, 5), 31, -1, 1),
					   rnd(c.tb ? T(2, 4, 5) : T(2, 5, 4), 32, -1, 1) };
		struct hp_attr a[4] = { kt_float("alpha", 0.75f), kt_int("transA", c.ta), kt_int("transB", c.tb),
					kt_int("pack_b", 1) };
		struct hp_tensor out[2];
		c.dy = dbl(&in[0]);
		c.a = dbl(&in[1]);
		c.b = dbl(&in[2]);
		run("GemmGrad", 3, in, t & 4 ? 4 : 3, a, 2, out);
		fd_check(gemm_loss, &c, c.a, &out[0], 1e-5, "Gemm dA");
		fd_check(gemm_loss, &c, c.b, &out[1], 1e-5, "Gemm dB");
		free(c.a);
		free(c.b);
		free(c.dy);
		free_all(out, 2);
		free_all(in, 3);
	}
}

/* ---- convolution -------------------------------------------------------- */

/* Geometry shared by the naive Conv and ConvTranspose below; spatial dims
 * beyond nsp are 1.  Conv: x is the big side; ConvTranspose: y is. */
struct cv_ctx {
	int nsp, transpose;
	int64_t n, cx, cy, group, xs[3], ys[3], k[3], s[3], d[3], p[3];
	double *x, *w, *b, *dy;
};

static int64_t vol(const int64_t *a)
{
	return a[0] * a[1] * a[2];
}

static double cv_loss(void *p)
{
	struct cv_ctx *c = p;
	int64_t cxg = c->cx / c->group, cyg = c->cy / c->group;
	const int64_t *big = c->transpose ? c->ys : c->xs, *small = c->transpose ? c->xs : c->ys;
	double *y = calloc((size_t)(c->n * c->cy * vol(c->ys)), sizeof *y), s = 0;

	for (int64_t n = 0; n < c->n; n++)
		for (int64_t g = 0; g < c->group; g++)
			for (int64_t co = 0; co < cyg; co++)
				for (int64_t ci = 0; ci < cxg; ci++)
					for (int64_t o = 0; o < vol(small); o++)
						for (int64_t kk = 0; kk < vol(c->k); kk++) {
							int64_t os[3] = { o / (small[1] * small[2]), o / small[2] % small[1], o % small[2] };
							int64_t ks[3] = { kk / (c->k[1] * c->k[2]), kk / c->k[2] % c->k[1], kk % c->k[2] };
							int64_t bi = 0, ok = 1;
							for (int q = 0; q < 3; q++) {
								int64_t i = os[q] * c->s[q] - c->p[q] + ks[q] * c->d[q];
								ok &= i >= 0 && i < big[q];
								bi = bi * big[q] + i;
							}
							if (!ok)
								continue;
							int64_t xc = g * cxg + ci, yc = g * cyg + co;
							if (!c->transpose) /* W [cy, cx/g, k] */
								y[(n * c->cy + yc) * vol(c->ys) + o] +=
									c->w[(yc * cxg + ci) * vol(c->k) + kk] *
									c->x[(n * c->cx + xc) * vol(c->xs) + bi];
							else /* W [cx, cy/g, k] */
								y[(n * c->cy + yc) * vol(c->ys) + bi] +=
									c->w[(xc * cyg + co) * vol(c->k) + kk] *
									c->x[(n * c->cx + xc) * vol(c->xs) + o];
						}
	for (int64_t n = 0; n < c->n; n++)
		for (int64_t co = 0; co < c->cy; co++)
			for (int64_t o = 0; o < vol(c->ys); o++) {
				int64_t i = (n * c->cy + co) * vol(c->ys) + o;
				s += c->dy[i] * (y[i] + c->b[co]);
			}
	free(y);
	return s;
}

static struct hp_tensor nd(int nsp, int64_t a, int64_t b, const int64_t *sp)
{
	int64_t d[5] = { a, b, sp[0], sp[1], sp[2] };

	if (nsp < 3) /* spatial dims live at the end in the [3] arrays */
		memmove(d + 2, sp + 3 - nsp, (size_t)nsp * sizeof *d);
	return kt_tensor(HP_F32, 2 + nsp, d);
}

static void cv_case(int transpose, int nsp, int group, const int *in_sp, const int *k, const int *s, const int *d,
		    const int *pb, const int *pe, const int *opad)
{
	struct cv_ctx c = { .nsp = nsp, .transpose = transpose, .n = 2, .cx = 4, .cy = 6, .group = group };
	int64_t st[3], dl[3], pads[6], ks[3], xsh[5];
	struct hp_tensor x, w, dy, out;
	char what[64];

	for (int q = 0; q < 3; q++) {
		int real = q >= 3 - nsp, j = q - (3 - nsp);
		c.xs[q] = real ? in_sp[j] : 1;
		c.k[q] = real ? k[j] : 1;
		c.s[q] = real ? s[j] : 1;
		c.d[q] = real ? d[j] : 1;
		c.p[q] = real ? pb[j] : 0;
		int64_t eff = (c.k[q] - 1) * c.d[q] + 1;
		c.ys[q] = !real ? 1 : transpose ? c.s[q] * (c.xs[q] - 1) + opad[j] + eff - pb[j] - pe[j]
					   : (c.xs[q] + pb[j] + pe[j] - eff) / c.s[q] + 1;
		if (real) {
			st[j] = c.s[q];
			dl[j] = c.d[q];
			pads[j] = pb[j];
			pads[nsp + j] = pe[j];
			ks[j] = c.k[q];
		}
	}
	x = rnd(nd(nsp, c.n, c.cx, c.xs), 40, -1, 1);
	w = rnd(transpose ? nd(nsp, c.cx, c.cy / group, c.k) : nd(nsp, c.cy, c.cx / group, c.k), 41, -1, 1);
	dy = rnd(nd(nsp, c.n, c.cy, c.ys), 42, -1, 1);
	c.x = dbl(&x);
	c.w = dbl(&w);
	c.dy = dbl(&dy);
	c.b = calloc((size_t)c.cy, sizeof *c.b);
	memcpy(xsh, x.shape.dims, sizeof xsh);
	struct hp_attr a[5] = { kt_int("group", group), kt_ints("strides", nsp, st), kt_ints("dilations", nsp, dl),
				kt_ints("pads", 2 * nsp, pads), kt_ints("x_shape", 2 + nsp, xsh) };
	struct hp_tensor din[2] = { dy, w };
	run(transpose ? "ConvTransposeGradData" : "ConvGradData", 2, din, 5, a, 1, &out);
	snprintf(what, sizeof what, "%s %dD dX", transpose ? "ConvTranspose" : "Conv", nsp);
	fd_check(cv_loss, &c, c.x, &out, 1e-5, what);
	hp_tensor_free(&out);
	a[4] = kt_ints("kernel_shape", nsp, ks);
	struct hp_tensor fin[2] = { dy, x };
	if (transpose) {
		fin[0] = x;
		fin[1] = dy;
	}
	run("ConvGradFilter", 2, fin, 5, a, 1, &out);
	snprintf(what, sizeof what, "%s %dD dW", transpose ? "ConvTranspose" : "Conv", nsp);
	fd_check(cv_loss, &c, c.w, &out, 1e-5, what);
	hp_tensor_free(&out);
	run("BiasGrad", 1, &dy, 0, NULL, 1, &out);
	fd_check(cv_loss, &c, c.b, &out, 1e-5, "dB");
	hp_tensor_free(&out);
	free(c.x);
	free(c.w);
	free(c.dy);
	free(c.b);
	hp_tensor_free(&x);
	hp_tensor_free(&w);
	hp_tensor_free(&dy);
}

static void test_conv_grad(void **state)
{
	(void)state;
	cv_case(0, 2, 2, (int[]){ 7, 6 }, (int[]){ 3, 2 }, (int[]){ 2, 1 }, (int[]){ 1, 2 }, (int[]){ 1, 0 },
		(int[]){ 1, 1 }, NULL);
	cv_case(0, 1, 1, (int[]){ 9 }, (int[]){ 3 }, (int[]){ 2 }, (int[]){ 2 }, (int[]){ 2 }, (int[]){ 1 }, NULL);
	cv_case(0, 3, 2, (int[]){ 4, 5, 4 }, (int[]){ 2, 3, 2 }, (int[]){ 1, 2, 1 }, (int[]){ 1, 1, 2 },
		(int[]){ 1, 1, 0 }, (int[]){ 0, 1, 1 }, NULL);
	cv_case(1, 2, 2, (int[]){ 4, 3 }, (int[]){ 3, 2 }, (int[]){ 2, 2 }, (int[]){ 1, 2 }, (int[]){ 1, 0 },
		(int[]){ 0, 1 }, (int[]){ 1, 0 });
	cv_case(1, 1, 1, (int[]){ 5 }, (int[]){ 4 }, (int[]){ 3 }, (int[]){ 1 }, (int[]){ 1 }, (int[]){ 2 },
		(int[]){ 2 });
	cv_case(1, 3, 1, (int[]){ 2, 3, 2 }, (int[]){ 2, 2, 3 }, (int[]){ 2, 1, 2 }, (int[]){ 1, 1, 1 },
		(int[]){ 0, 1, 1 }, (int[]){ 1, 0, 1 }, (int[]){ 1, 0, 0 });
}

/* Stride-1 gradients on the padded-slab paths (forced whatever the sizes:
 * ConvGradData as a Conv with mirrored W, ConvGradFilter from flat slab
 * columns): default tiles on one thread; small slab tiles and workspace
 * (chunks and tiles split) on two threads. */
static void test_conv_grad_slab(void **state)
{
	struct hp_pool *pool;

	(void)state;
	assert_int_equal(hp_pool_create(2, &pool), 0);
	hp_conv_set_shift(1);
	for (int v = 0; v < 2; v++) {
		kt_pool = v ? pool : NULL;
		hp_shift_set_tile_cols(v ? 9 : 0);
		hp_conv_set_ws_max(v ? 3000 * sizeof(float) : 0);
		cv_case(0, 3, 1, (int[]){ 3, 4, 5 }, (int[]){ 3, 3, 3 }, (int[]){ 1, 1, 1 }, (int[]){ 1, 1, 1 },
			(int[]){ 1, 1, 1 }, (int[]){ 1, 1, 1 }, NULL);
		cv_case(0, 3, 2, (int[]){ 4, 3, 4 }, (int[]){ 3, 2, 3 }, (int[]){ 1, 1, 1 }, (int[]){ 2, 1, 1 },
			(int[]){ 2, 0, 1 }, (int[]){ 1, 1, 2 }, NULL);
		cv_case(0, 2, 1, (int[]){ 6, 5 }, (int[]){ 3, 3 }, (int[]){ 1, 1 }, (int[]){ 1, 2 }, (int[]){ 0, 2 },
			(int[]){ 2, 1 }, NULL);
		/* small planes: the batch folded into the slab, groups */
		cv_case(0, 2, 2, (int[]){ 4, 4 }, (int[]){ 3, 3 }, (int[]){ 1, 1 }, (int[]){ 1, 1 }, (int[]){ 1, 1 },
			(int[]){ 1, 1 }, NULL);
	}
	kt_pool = NULL;
	hp_shift_set_tile_cols(0);
	hp_conv_set_ws_max(0);
	hp_conv_set_shift(0);
	hp_pool_destroy(pool);
}

/* ConvGradData of grouped Conv nodes on the grouped path (conv_grp.c,
 * forced: dY over W transposed and mirrored), on one and two threads:
 * groups of 2 and 3 channels, pads below and above the kernel's reach,
 * dilation, a 1x1 and a 5x3 kernel. */
/* ConvGradFilter on the grouped path (conv_grad_grp.c), replayed here in
 * scalar float: lane l of dW element e sums, by fused multiply-adds from
 * 0, the positions (row, column) of a unit with column = l mod L, rows in
 * order and columns in order; per unit, last first, dW += t(l0..l7), and
 * with 16 lanes + t(l8..l15), t(a..h) = ((a + b) + (c + d)) + ((e + f) +
 * (g + h)), from acc or 0.  Units: batch items (L = 16 if they have
 * several rows), or with a batch of one, rows (L = 8). */
struct gfc {
	int n, cin, cout, group, ih, iw, kh, kw, sh, sw, dh, dw, pt, pl, pb, pr;
};

static int gfc_oh(const struct gfc *c)
{
	return (c->ih + c->pt + c->pb - (c->kh - 1) * c->dh - 1) / c->sh + 1;
}

static int gfc_ow(const struct gfc *c)
{
	return (c->iw + c->pl + c->pr - (c->kw - 1) * c->dw - 1) / c->sw + 1;
}

static void gfc_ref(const struct gfc *c, const float *dy, const float *x, const float *acc, float *out, double *dbl_out)
{
	int cg = c->cin / c->group, mg = c->cout / c->group, rows = cg * c->kh * c->kw, oh = gfc_oh(c), ow = gfc_ow(c);
	int urows = c->n >= 2 ? oh : 1, lanes = urows > 1 ? 16 : 8;

	for (int g = 0; g < c->group; g++)
		for (int m = 0; m < mg; m++)
			for (int t = 0; t < rows; t++) {
				int e = (g * mg + m) * rows + t, ch = t / (c->kh * c->kw), ky = t % (c->kh * c->kw) / c->kw,
				    kx = t % c->kw;
				float o = acc ? acc[e] : 0;
				double od = acc ? acc[e] : 0;
				for (int nb = c->n - 1; nb >= 0; nb--)
					for (int u = oh / urows - 1; u >= 0; u--) {
						float l[16] = { 0 };
						for (int r = u * urows; r < (u + 1) * urows; r++)
							for (int q = 0; q < ow; q++) {
								int yy = r * c->sh + ky * c->dh - c->pt, xx = q * c->sw + kx * c->dw - c->pl;
								float xv = yy >= 0 && yy < c->ih && xx >= 0 && xx < c->iw
										   ? x[((nb * c->cin + g * cg + ch) * c->ih + yy) * c->iw + xx]
										   : 0.0f;
								float d = dy[((nb * c->cout + g * mg + m) * oh + r) * ow + q];
								l[q % lanes] = fmaf(d, xv, l[q % lanes]);
								od += (double)d * xv;
							}
						float t0 = ((l[0] + l[1]) + (l[2] + l[3])) + ((l[4] + l[5]) + (l[6] + l[7]));
						float t1 = ((l[8] + l[9]) + (l[10] + l[11])) + ((l[12] + l[13]) + (l[14] + l[15]));
						o = o + (lanes == 16 ? t0 + t1 : t0);
					}
				out[e] = o;
				dbl_out[e] = od;
			}
}

/* ConvGradFilter of c over items [i0, i1) of dy and x, from acc; units
 * of whole items if items (a band's node of the batch says so). */
static void gfc_run(const struct gfc *c, const struct hp_tensor *dy, const struct hp_tensor *x, int i0, int i1,
		    const struct hp_tensor *acc, int items, struct hp_tensor *out)
{
	int cg = c->cin / c->group, oh = gfc_oh(c), ow = gfc_ow(c);
	int64_t st[2] = { c->sh, c->sw }, dl[2] = { c->dh, c->dw }, pads[4] = { c->pt, c->pl, c->pb, c->pr },
		ks[2] = { c->kh, c->kw };
	struct hp_tensor in[3] = { T(4, i1 - i0, c->cout, oh, ow), T(4, i1 - i0, c->cin, c->ih, c->iw) };
	struct hp_attr a[6] = { kt_int("group", c->group), kt_ints("strides", 2, st), kt_ints("dilations", 2, dl),
				kt_ints("pads", 4, pads), kt_ints("kernel_shape", 2, ks), kt_int("hpdlf_unit_axis", 0) };

	memcpy(in[0].data, (const float *)dy->data + (size_t)i0 * c->cout * oh * ow,
	       (size_t)(i1 - i0) * c->cout * oh * ow * sizeof(float));
	memcpy(in[1].data, (const float *)x->data + (size_t)i0 * c->cin * c->ih * c->iw,
	       (size_t)(i1 - i0) * c->cin * c->ih * c->iw * sizeof(float));
	if (acc)
		in[2] = *acc;
	run("ConvGradFilter", acc ? 3 : 2, in, items ? 6 : 5, a, 1, out);
	(void)cg;
	hp_tensor_free(&in[0]);
	hp_tensor_free(&in[1]);
}

static void bitwise(const struct hp_tensor *a, const struct hp_tensor *b, const char *what)
{
	int64_t n = numel(a);

	assert_int_equal(n, numel(b));
	for (int64_t i = 0; i < n; i++)
		if (memcmp((const float *)a->data + i, (const float *)b->data + i, sizeof(float)))
			fail_msg("%s: element %lld: %.9g against %.9g", what, (long long)i, ((const float *)a->data)[i],
				 ((const float *)b->data)[i]);
}

/* The grouped path against its scalar replay (bitwise) and a float64
 * sum (close), from a running sum and from 0, on one and two threads; a
 * batch chained item by item (the bands of a batch) bitwise the whole.
 * Shapes (units of 16 positions and more, rows of 8 and more: the path's
 * own limits): ResNeXt's 4 per group at 1 and 3 items (rows and items as
 * units; 19 columns: a masked tail), 32 per group on a plane whose
 * staging takes two blocks (lanes kept between them), 3 in and 5 out per
 * group with stride 2, dilation 2 and uneven pads (edge tiles), a 1x1 of
 * 8 per group, and a column stride of 3. */
static void test_conv_grad_filter_grp(void **state)
{
	const struct gfc cases[] = {
		{ 1, 8, 8, 2, 9, 19, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1 },
		{ 3, 8, 8, 2, 9, 19, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1 },
		{ 2, 64, 64, 2, 20, 40, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1 },
		{ 1, 6, 10, 2, 13, 36, 3, 3, 2, 2, 2, 2, 2, 1, 0, 3 },
		{ 2, 6, 10, 2, 13, 36, 3, 3, 2, 2, 2, 2, 2, 1, 0, 3 },
		{ 2, 16, 4, 2, 7, 9, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0 },
		{ 2, 12, 8, 4, 8, 29, 3, 5, 1, 3, 1, 1, 1, 2, 1, 2 },
	};
	struct hp_pool *pool;

	(void)state;
	if (!hp_dot_available())
		skip();
	assert_int_equal(hp_pool_create(2, &pool), 0);
	hp_gfilt_set_colane(-1); /* the lane-tree tiles (the co-lane tiles: test_grad_chain.c) */
	for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
		const struct gfc *c = &cases[k];
		int cg = c->cin / c->group, oh = gfc_oh(c), ow = gfc_ow(c);
		struct hp_tensor dy = rnd(T(4, c->n, c->cout, oh, ow), 90 + (unsigned)k, -1, 1);
		struct hp_tensor x = rnd(T(4, c->n, c->cin, c->ih, c->iw), 100 + (unsigned)k, -1, 1);
		struct hp_tensor acc = rnd(T(4, c->cout, cg, c->kh, c->kw), 110 + (unsigned)k, -1, 1), out, ref;
		size_t ne = (size_t)numel(&acc);
		double *want = malloc(ne * sizeof *want);
		char what[96];
		for (int withacc = 0; withacc < 2; withacc++) {
			ref = T(4, c->cout, cg, c->kh, c->kw);
			gfc_ref(c, dy.data, x.data, withacc ? acc.data : NULL, ref.data, want);
			for (int v = 0; v < 4; v++) { /* 1 and 2 threads, then AVX2's tiles on 1 and 2 */
				kt_pool = v % 2 ? pool : NULL;
				hp_gfilt_set_avx2(v >= 2);
				gfc_run(c, &dy, &x, 0, c->n, withacc ? &acc : NULL, 0, &out);
				snprintf(what, sizeof what, "case %zu (acc %d, %d threads%s) against its replay", k, withacc,
					 v % 2 + 1, v >= 2 ? ", AVX2 tiles" : "");
				bitwise(&out, &ref, what);
				snprintf(what, sizeof what, "case %zu (acc %d) against float64", k, withacc);
				close_to(&out, want, 1e-5, what);
				hp_tensor_free(&out);
			}
			kt_pool = NULL;
			hp_gfilt_set_avx2(0);
			if (c->n >= 2) { /* items chained from the last, as bands of the batch */
				struct hp_tensor run_acc = { 0 }, step;
				for (int i = c->n - 1; i >= 0; i--) {
					const struct hp_tensor *from = i == c->n - 1 ? (withacc ? &acc : NULL) : &run_acc;
					gfc_run(c, &dy, &x, i, i + 1, from, 1, &step);
					if (i != c->n - 1)
						hp_tensor_free(&run_acc);
					run_acc = step;
				}
				snprintf(what, sizeof what, "case %zu (acc %d): items chained", k, withacc);
				bitwise(&run_acc, &ref, what);
				hp_tensor_free(&run_acc);
			}
			hp_tensor_free(&ref);
		}
		free(want);
		hp_tensor_free(&dy);
		hp_tensor_free(&x);
		hp_tensor_free(&acc);
	}
	hp_gfilt_set_colane(0);
	hp_pool_destroy(pool);
}

static void test_conv_grad_grp(void **state)
{
	struct hp_pool *pool;

	(void)state;
	if (!hp_dot_available())
		skip();
	assert_int_equal(hp_pool_create(2, &pool), 0);
	hp_conv_set_grp(1);
	for (int v = 0; v < 2; v++) {
		kt_pool = v ? pool : NULL;
		cv_case(0, 2, 2, (int[]){ 6, 7 }, (int[]){ 3, 3 }, (int[]){ 1, 1 }, (int[]){ 1, 1 }, (int[]){ 1, 1 },
			(int[]){ 1, 1 }, NULL);
		cv_case(0, 2, 2, (int[]){ 9, 5 }, (int[]){ 5, 3 }, (int[]){ 1, 1 }, (int[]){ 2, 1 }, (int[]){ 3, 0 },
			(int[]){ 1, 2 }, NULL);
		cv_case(0, 2, 2, (int[]){ 4, 6 }, (int[]){ 1, 1 }, (int[]){ 1, 1 }, (int[]){ 1, 1 }, (int[]){ 0, 0 },
			(int[]){ 0, 0 }, NULL);
		cv_case(0, 2, 2, (int[]){ 5, 5 }, (int[]){ 3, 3 }, (int[]){ 1, 1 }, (int[]){ 1, 1 }, (int[]){ 0, 0 },
			(int[]){ 0, 0 }, NULL);
	}
	kt_pool = NULL;
	hp_conv_set_grp(0);
	hp_pool_destroy(pool);
}

/* ConvGradData of a stride-1 Conv on the KxK path's AVX-512 tiles
 * (conv_kxk.c, W transposed and mirrored, packed per call), replayed
 * here in scalar float: dX[n][g, m][o] is one chain of fused
 * multiply-adds from 0 over k = (c, kd, kh, kw) of the flipped window,
 * taps in dY's padding included (w * 0), with W'[m][c][k] =
 * W[g, c][m][kvol - 1 - k], packed whole per call or per micro-tile
 * and k chunk; and a float64 sum beside it.  Row bands of
 * the first spatial axis with hpdlf_path = HP_CGD_PATH_KXK (4), their
 * dY rows and pads cut as exec/split_grad.c cuts them, are bitwise the
 * whole node's rows, also from dY rows beyond their windows' reach. */
struct kxd {
	int nsp, n, cx, cy, group;
	int xs[3], k[3], d[3], p[3]; /* spatial, first nsp used */
};

static int kxd_out(const struct kxd *c, int q)
{
	return c->xs[q] + 2 * c->p[q] - (c->k[q] - 1) * c->d[q];
}

static void kxd_ref(const struct kxd *c, const float *dy, const float *w, float *dx, double *want)
{
	int64_t X[3] = { 1, 1, 1 }, Y[3] = { 1, 1, 1 }, K[3] = { 1, 1, 1 }, Dl[3] = { 1, 1, 1 }, P[3] = { 0, 0, 0 };
	int cxg = c->cx / c->group, cyg = c->cy / c->group;

	for (int q = 0; q < c->nsp; q++) {
		int j = 3 - c->nsp + q;
		X[j] = c->xs[q];
		Y[j] = kxd_out(c, q);
		K[j] = c->k[q];
		Dl[j] = c->d[q];
		P[j] = (c->k[q] - 1) * c->d[q] - c->p[q]; /* the flipped Conv's pad */
	}
	int64_t xv = X[0] * X[1] * X[2], kv = K[0] * K[1] * K[2];
	for (int n = 0; n < c->n; n++)
		for (int g = 0; g < c->group; g++)
			for (int m = 0; m < cxg; m++)
				for (int64_t o = 0; o < xv; o++) {
					int64_t od = o / (X[1] * X[2]), oh = o / X[2] % X[1], ow = o % X[2];
					float acc = 0.0f;
					double sum = 0;
					for (int ch = 0; ch < cyg; ch++)
						for (int64_t t = 0; t < kv; t++) {
							int64_t td = t / (K[1] * K[2]), th = t / K[2] % K[1], tw = t % K[2];
							int64_t id = od - P[0] + td * Dl[0], ih = oh - P[1] + th * Dl[1],
								iw = ow - P[2] + tw * Dl[2];
							int in = id >= 0 && id < Y[0] && ih >= 0 && ih < Y[1] && iw >= 0 && iw < Y[2];
							float v = in ? dy[((int64_t)(n * c->cy + g * cyg + ch) * Y[0] + id) * Y[1] * Y[2] +
									  ih * Y[2] + iw]
								     : 0.0f;
							float wt = w[((int64_t)(g * cyg + ch) * cxg + m) * kv + kv - 1 - t];
							acc = fmaf(wt, v, acc);
							sum += (double)wt * v;
						}
					int64_t e = (int64_t)(n * c->cx + g * cxg + m) * xv + o;
					dx[e] = acc;
					want[e] = sum;
				}
}

static struct hp_tensor kxd_tensor(int nsp, int a, int b, const int *sp)
{
	int64_t d[5] = { a, b, sp[0], nsp > 1 ? sp[1] : 1, nsp > 2 ? sp[2] : 1 };

	return kt_tensor(HP_F32, 2 + nsp, d);
}

/* ConvGradData of c on dY rows [ya, ya + dyrows) of the first spatial
 * axis for X rows of x_shape xsh, pads pads, hpdlf_path path (< 0: none). */
static void kxd_run(const struct kxd *c, const struct hp_tensor *dy, const struct hp_tensor *w, int ya, int dyrows,
		    const int64_t *xsh, const int64_t *pads, int path, struct hp_tensor *out)
{
	int64_t dl[3], one[3] = { 1, 1, 1 }, inner = 1, ys[3];
	struct hp_tensor band;

	for (int q = 0; q < c->nsp; q++) {
		dl[q] = c->d[q];
		ys[q] = kxd_out(c, q);
		inner *= q ? ys[q] : 1;
	}
	ys[0] = dyrows;
	band = kxd_tensor(c->nsp, c->n, c->cy, (int[]){ (int)ys[0], (int)ys[1], (int)ys[2] });
	for (int64_t pl = 0; pl < (int64_t)c->n * c->cy; pl++)
		memcpy((float *)band.data + pl * dyrows * inner,
		       (const float *)dy->data + (pl * kxd_out(c, 0) + ya) * inner, (size_t)(dyrows * inner) * sizeof(float));
	struct hp_attr a[6] = { kt_int("group", c->group), kt_ints("strides", c->nsp, one),
				kt_ints("dilations", c->nsp, dl), kt_ints("pads", 2 * c->nsp, pads),
				kt_ints("x_shape", 2 + c->nsp, xsh), kt_int("hpdlf_path", path) };
	struct hp_tensor in[2] = { band, *w };
	run("ConvGradData", 2, in, path >= 0 ? 6 : 5, a, 1, out);
	hp_tensor_free(&band);
}

/* kxd's cases on hpdlf_path `path` (whole nodes also on the auto choice,
 * 2 threads): bitwise their replay, within 1e-5 of float64, and row
 * bands bitwise the whole. */
static int kxd_no_ext; /* bands only from the dY rows their windows reach (the grouped path) */

static void kxd_cases(const struct kxd *cases, size_t ncases, int path, struct hp_pool *pool)
{
	for (size_t k = 0; k < ncases; k++) {
		const struct kxd *c = &cases[k];
		int ys[3] = { 1, 1, 1 }, H = c->xs[0], Ho = kxd_out(c, 0), cut[3] = { 1, H / 2, H - 1 };
		int64_t xsh[5] = { c->n, c->cx, c->xs[0], c->xs[1], c->xs[2] }, pads[6] = { 0 }, inner = 1;
		for (int q = 0; q < c->nsp; q++) {
			ys[q] = kxd_out(c, q);
			pads[q] = pads[c->nsp + q] = c->p[q];
			inner *= q ? c->xs[q] : 1;
		}
		struct hp_tensor dy = kxd_tensor(c->nsp, c->n, c->cy, ys), out, whole, ref;
		struct hp_tensor w = kxd_tensor(c->nsp, c->cy, c->cx / c->group, c->k);
		char what[96];
		kt_fill_random(&dy, 120 + (unsigned)k, -1, 1);
		kt_fill_random(&w, 130 + (unsigned)k, -1, 1);
		ref = kxd_tensor(c->nsp, c->n, c->cx, c->xs);
		double *want = malloc((size_t)numel(&ref) * sizeof *want);
		kxd_ref(c, dy.data, w.data, ref.data, want);
		for (int v = 0; v < 2; v++) {
			kt_pool = v ? pool : NULL;
			kxd_run(c, &dy, &w, 0, Ho, xsh, pads, v ? -1 : path, &out);
			snprintf(what, sizeof what, "case %zu (%d threads) against its replay", k, v + 1);
			bitwise(&out, &ref, what);
			snprintf(what, sizeof what, "case %zu against float64", k);
			close_to(&out, want, 1e-5, what);
			hp_tensor_free(&out);
		}
		/* row bands [xa, xb) of the first spatial axis, as split_grad.c cuts them */
		whole = ref;
		for (int b = 0; b < 3; b++)
			for (int half = 0; half < 2; half++) {
				int xa = half ? cut[b] : 0, xb = half ? H : cut[b];
				int p = c->p[0], kd = (c->k[0] - 1) * c->d[0], ext = b == 1 && !kxd_no_ext ? 3 : 0;
				int ya = xa + p - kd > 0 ? xa + p - kd : 0, yb = xb + p < Ho ? xb + p : Ho;
				/* dY rows cut out beyond the windows' reach (a replaced
				 * path's tiles): the leading ones cropped */
				ya = ya - ext > 0 ? ya - ext : 0;
				yb = yb + ext < Ho ? yb + ext : Ho;
				int64_t bx[5], bp[6];
				if (xa >= xb || ya >= yb)
					continue;
				memcpy(bx, xsh, sizeof bx);
				memcpy(bp, pads, sizeof bp);
				bx[2] = xb - xa;
				bp[0] = xa + p - ya;
				bp[c->nsp] = (yb - ya - 1) + kd + 1 - (xb - xa) - bp[0];
				bp[c->nsp] = bp[c->nsp] > 0 ? bp[c->nsp] : 0;
				kt_pool = half ? pool : NULL;
				kxd_run(c, &dy, &w, ya, yb - ya, bx, bp, path, &out);
				for (int64_t pl = 0; pl < (int64_t)c->n * c->cx; pl++)
					for (int64_t i = 0; i < (xb - xa) * inner; i++) {
						float got = ((const float *)out.data)[pl * (xb - xa) * inner + i];
						float exp = ((const float *)whole.data)[(pl * H + xa) * inner + i];
						if (memcmp(&got, &exp, sizeof got))
							fail_msg("case %zu band [%d, %d): plane %lld element %lld: %.9g against %.9g",
								 k, xa, xb, (long long)pl, (long long)i, got, exp);
					}
				hp_tensor_free(&out);
			}
		kt_pool = NULL;
		free(want);
		hp_tensor_free(&ref);
		hp_tensor_free(&dy);
		hp_tensor_free(&w);
	}
}

static void test_conv_grad_kxk(void **state)
{
	const struct kxd cases[] = {
		/* K = 32 * 9 = 288: two k chunks; 20 rows: 4 uneven micro-tiles */
		{ 2, 2, 20, 32, 1, { 11, 37 }, { 3, 3 }, { 1, 1 }, { 1, 1 } },
		/* a 5x3 kernel, dilation 2 across, pads below and above the reach */
		{ 2, 1, 9, 12, 1, { 13, 21 }, { 5, 3 }, { 1, 2 }, { 3, 1 } },
		/* ResNet's small planes (blocks across batch items, W' packed per
		 * micro-tile) */
		{ 2, 4, 16, 24, 1, { 2, 2 }, { 3, 3 }, { 1, 1 }, { 1, 1 } },
		/* W' packed per micro-tile (one column block per group): windows
		 * cut by the k chunk (K = 360) */
		{ 2, 1, 14, 40, 1, { 5, 7 }, { 3, 3 }, { 1, 1 }, { 1, 1 } },
		/* groups */
		{ 2, 2, 16, 24, 2, { 7, 18 }, { 3, 3 }, { 1, 1 }, { 1, 1 } },
		/* 3-D, W' per micro-tile: windows of 27 taps */
		{ 3, 2, 9, 12, 1, { 2, 3, 3 }, { 3, 3, 3 }, { 1, 1, 1 }, { 1, 1, 1 } },
		/* 3-D, the U-Net's 3x3x3 */
		{ 3, 2, 8, 16, 1, { 5, 6, 19 }, { 3, 3, 3 }, { 1, 1, 1 }, { 1, 1, 1 } },
		{ 3, 1, 12, 10, 1, { 6, 4, 33 }, { 3, 2, 3 }, { 2, 1, 1 }, { 2, 0, 1 } },
	};
	struct hp_pool *pool;

	(void)state;
	if (!hp_kxk_available() || !hp_kxk_wide_ok())
		skip();
	assert_int_equal(hp_pool_create(2, &pool), 0);
	hp_conv_set_kxk(1);
	kxd_cases(cases, sizeof cases / sizeof cases[0], 4, pool);
	hp_conv_set_kxk(0);
	hp_pool_destroy(pool);
}

/* ConvGradData of grouped stride-1 Convs on 7-column planes through the
 * grouped path (conv_grp.c, hpdlf_path HP_CGD_PATH_GRP): its co-lane
 * tiles (16 or 32 channels of dX a group in the lanes) and its column
 * tiles (hp_grp_set_colane(-1)) both kxd's replay (the grouped path's
 * chains are the KxK path's), within 1e-5 of float64, 1 and 2 threads,
 * row bands bitwise the whole (from the dY rows their windows reach:
 * beyond them the path leaves its bands to col2im): row tiles of 2 and 1 (32 a group), of
 * 4 and 3 with a short last one (16 a group), 5x3 and 3x5 windows; and
 * groups of 8 at 3x3, 5x4 and 2x6 planes (the 8-lane tiles), of 32 at
 * 2x2, of 16 at 4x4 and 3x3 (the co-lane forward tiles from W^T). */
static void test_conv_grad_grp_colane(void **state)
{
	const struct kxd cases[] = {
		{ 2, 2, 64, 64, 2, { 7, 7 }, { 3, 3 }, { 1, 1 }, { 1, 1 } },
		{ 2, 1, 48, 30, 3, { 9, 7 }, { 3, 3 }, { 1, 1 }, { 1, 1 } },
		{ 2, 1, 32, 16, 2, { 6, 7 }, { 5, 3 }, { 1, 1 }, { 2, 1 } },
		{ 2, 2, 32, 64, 2, { 5, 7 }, { 3, 5 }, { 1, 1 }, { 1, 2 } },
		{ 2, 1, 96, 96, 3, { 7, 7 }, { 3, 3 }, { 2, 1 }, { 2, 1 } },
		/* groups of 8 at planes of 25 positions and fewer: the 8-lane
		 * co-lane forward tiles (gr_c8_block) over the flipped W */
		{ 2, 2, 24, 24, 3, { 3, 3 }, { 3, 3 }, { 1, 1 }, { 1, 1 } },
		{ 2, 1, 40, 40, 5, { 5, 4 }, { 3, 3 }, { 1, 1 }, { 1, 1 } },
		{ 2, 2, 16, 16, 2, { 2, 6 }, { 3, 5 }, { 1, 1 }, { 1, 2 } },
		/* 16 and 32 a group at planes of 16 positions and fewer: the
		 * co-lane forward tiles from W flipped into W^T (gr_cf_flip) */
		{ 2, 2, 64, 64, 2, { 2, 2 }, { 3, 3 }, { 1, 1 }, { 1, 1 } },
		{ 2, 1, 48, 48, 3, { 4, 4 }, { 3, 3 }, { 1, 1 }, { 1, 1 } },
		{ 2, 2, 32, 96, 2, { 3, 3 }, { 3, 3 }, { 1, 1 }, { 1, 1 } },
	};
	struct hp_pool *pool;

	(void)state;
	if (!hp_dot_available())
		skip();
	assert_int_equal(hp_pool_create(2, &pool), 0);
	hp_conv_set_grp(1);
	kxd_no_ext = 1;
	for (int m = 0; m < 2; m++) {
		hp_grp_set_colane(-m);
		kxd_cases(cases, sizeof cases / sizeof cases[0], HP_CGD_PATH_GRP, pool);
	}
	kxd_no_ext = 0;
	hp_grp_set_colane(0);
	hp_conv_set_grp(0);
	hp_pool_destroy(pool);
}

/* ConvGradData of a dense stride-1 Conv planned on the KxK path run on
 * conv_grp.c's dense co-lane tiles (hp_grp_dense_flip: W flipped per
 * call into the units' W^T), forced at any batch: the KxK path's chains,
 * so kxd's replay, 1 and 2 threads, row bands bitwise the whole (also
 * from dY rows beyond their windows' reach: the cropped plan); with the
 * 3x3 tiles that skip the padding's products (units of 32 channels, a
 * last one of 16) and without them; windows those tiles do not take
 * (5x3, dilation 2, no pads) on the other co-lane tiles; a W^T large
 * enough for the workers to share its flip.  Then a W with an
 * Inf: a skipped padding tap would leave a finite dX where the chain's
 * Inf * 0 makes it NaN, so those tiles must not run. */
static void test_conv_grad_kxk_grp(void **state)
{
	const struct kxd cases[] = {
		{ 2, 1, 32, 40, 1, { 5, 5 }, { 3, 3 }, { 1, 1 }, { 1, 1 } },
		{ 2, 2, 48, 24, 1, { 11, 9 }, { 3, 3 }, { 1, 1 }, { 1, 1 } },
		{ 2, 1, 64, 32, 1, { 3, 3 }, { 3, 3 }, { 1, 1 }, { 1, 1 } },
		{ 2, 1, 32, 16, 1, { 4, 30 }, { 3, 3 }, { 1, 1 }, { 1, 1 } },
		{ 2, 1, 32, 24, 1, { 6, 7 }, { 5, 3 }, { 1, 1 }, { 2, 1 } },
		{ 2, 1, 32, 20, 1, { 7, 7 }, { 3, 3 }, { 2, 2 }, { 2, 2 } },
		{ 2, 2, 16, 12, 1, { 6, 6 }, { 3, 3 }, { 1, 1 }, { 0, 0 } },
		/* W^T of 128 x 576 floats: flipped by the two workers */
		{ 2, 2, 128, 64, 1, { 6, 6 }, { 3, 3 }, { 1, 1 }, { 1, 1 } },
	};
	/* one item: each unit flips its W^T (gr_dflip_lazy); two: W^T whole */
	const struct kxd infs[2] = { { 2, 1, 32, 24, 1, { 4, 5 }, { 3, 3 }, { 1, 1 }, { 1, 1 } },
				     { 2, 2, 32, 24, 1, { 4, 5 }, { 3, 3 }, { 1, 1 }, { 1, 1 } } };
	struct hp_pool *pool;
	long before;

	(void)state;
	if (!hp_kxk_available() || !hp_kxk_wide_ok() || !hp_dot_available())
		skip();
	assert_int_equal(hp_pool_create(2, &pool), 0);
	hp_conv_set_kxk(1);
	hp_grp_set_dflip(1);
	for (int m = 0; m < 2; m++) {
		hp_grp_set_skip(-m);
		before = hp_grp_dflip_count();
		kxd_cases(cases, sizeof cases / sizeof cases[0], 4, pool);
		if (hp_grp_dflip_count() == before) /* hp_kxk_wide_ok: AVX-512F, as gr_512 */
			fail_msg("no dX ran on the dense co-lane tiles");
	}
	hp_grp_set_skip(0);
	for (int i = 0; i < 2; i++) {
		const struct kxd *inf = &infs[i];
		int ys[3] = { kxd_out(inf, 0), kxd_out(inf, 1), 1 };
		int64_t xsh[4] = { inf->n, inf->cx, inf->xs[0], inf->xs[1] }, pads[4] = { 1, 1, 1, 1 };
		struct hp_tensor dy = kxd_tensor(2, inf->n, inf->cy, ys), w = kxd_tensor(2, inf->cy, inf->cx, inf->k), out, ref;
		double *want;
		kt_fill_random(&dy, 140, -1, 1);
		kt_fill_random(&w, 141, -1, 1);
		((float *)w.data)[(3 * inf->cx + 5) * 9 + 8] = INFINITY; /* flipped: tap 0, a padding tap of row 0 */
		ref = kxd_tensor(2, inf->n, inf->cx, inf->xs);
		want = malloc((size_t)numel(&ref) * sizeof *want);
		kxd_ref(inf, dy.data, w.data, ref.data, want);
		assert_true(isnan(((const float *)ref.data)[5 * 20]));
		kxd_run(inf, &dy, &w, 0, ys[0], xsh, pads, 4, &out);
		bitwise(&out, &ref, i ? "a W with an Inf (two items) against its replay" : "a W with an Inf against its replay");
		hp_tensor_free(&out);
		free(want);
		hp_tensor_free(&ref);
		hp_tensor_free(&dy);
		hp_tensor_free(&w);
	}
	hp_grp_set_dflip(0);
	hp_conv_set_kxk(0);
	hp_pool_destroy(pool);
}

/* ConvGradData of a stride-1 Conv on tiny planes (conv_grad_tiny.c,
 * hpdlf_path HP_CGD_PATH_TINY): the KxK path's chains, so kxd's
 * replay; one to three vectors of columns in blocks of whole batch items
 * (the last one short), row tiles with tails, chunks of dY's channels,
 * dilations and pads beyond the window's reach, 1-D to 3-D. */
static void test_conv_grad_tiny(void **state)
{
	const struct kxd cases[] = {
		{ 2, 4, 16, 24, 1, { 2, 2 }, { 3, 3 }, { 1, 1 }, { 1, 1 } },
		{ 2, 7, 20, 12, 1, { 3, 3 }, { 3, 3 }, { 1, 1 }, { 1, 1 } },
		{ 2, 3, 9, 12, 1, { 4, 3 }, { 5, 3 }, { 1, 2 }, { 3, 1 } },
		{ 2, 2, 11, 100, 1, { 3, 3 }, { 3, 3 }, { 1, 1 }, { 1, 1 } },
		{ 3, 2, 9, 12, 1, { 2, 2, 3 }, { 3, 3, 3 }, { 1, 1, 1 }, { 1, 1, 1 } },
		{ 1, 5, 10, 33, 1, { 13 }, { 3 }, { 1 }, { 1 } },
	};
	struct hp_pool *pool;

	(void)state;
	if (!hp_tinyd_available())
		skip();
	assert_int_equal(hp_pool_create(2, &pool), 0);
	hp_cgd_set_tiny(1);
	kxd_cases(cases, sizeof cases / sizeof cases[0], HP_CGD_PATH_TINY, pool);
	hp_cgd_set_tiny(0);
	hp_pool_destroy(pool);
}

/* ConvGradData of a 1x1 stride-1 Conv on conv_pw.c's tiles (W read
 * transposed in place), replayed as kxd_ref does (every dX element one
 * chain over dY's channels from 0), within 1e-5 of float64, 1 and 2
 * threads; row bands of the first spatial axis with hpdlf_path =
 * HP_CGD_PATH_PW, from dY rows beyond their own (a replaced path's
 * tiles: pads), are bitwise the whole's.  The cases cover packed and
 * in-place panels, a fused tail column (7x7), k chunks (K > 256, and a
 * workspace cut to the least: 16 per chunk), 1-D and 3-D. */
static void test_conv_grad_pw(void **state)
{
	const struct kxd cases[] = {
		{ 2, 2, 20, 37, 1, { 11, 13 }, { 1, 1 }, { 1, 1 }, { 0, 0 } },
		{ 2, 1, 30, 300, 1, { 7, 7 }, { 1, 1 }, { 1, 1 }, { 0, 0 } },
		{ 2, 3, 13, 40, 1, { 5, 5 }, { 1, 1 }, { 1, 1 }, { 0, 0 } },
		{ 2, 4, 64, 256, 1, { 2, 2 }, { 1, 1 }, { 1, 1 }, { 0, 0 } },
		{ 3, 2, 9, 24, 1, { 3, 4, 5 }, { 1, 1, 1 }, { 1, 1, 1 }, { 0, 0, 0 } },
		{ 1, 2, 17, 33, 1, { 150 }, { 1 }, { 1 }, { 0 } },
		/* tiny planes (conv_pwt.c's tiles, W's rows read in place):
		 * 45 channels of dX (a unit of 32, a last one of 13: masked),
		 * 20 with K > 256 (the second vector masked), planes of one
		 * position (the items as columns: one tile of 5, two of 7;
		 * 24 and 50 channels), 1-D of 5 positions, 16 channels */
		{ 2, 2, 45, 70, 1, { 2, 2 }, { 1, 1 }, { 1, 1 }, { 0, 0 } },
		{ 2, 3, 20, 300, 1, { 3, 3 }, { 1, 1 }, { 1, 1 }, { 0, 0 } },
		{ 2, 5, 24, 33, 1, { 1, 1 }, { 1, 1 }, { 1, 1 }, { 0, 0 } },
		{ 2, 14, 50, 17, 1, { 1, 1 }, { 1, 1 }, { 1, 1 }, { 0, 0 } },
		{ 1, 2, 16, 40, 1, { 5 }, { 1 }, { 1 }, { 0 } },
	};
	struct hp_pool *pool;

	(void)state;
	if (!hp_pw_flip_available())
		skip();
	assert_int_equal(hp_pool_create(2, &pool), 0);
	hp_cgd_set_pw(1);
	for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
		const struct kxd *c = &cases[k];
		int ys[3] = { 1, 1, 1 }, H = c->xs[0], cut[3] = { 1, H / 2, H - 1 };
		int64_t xsh[5] = { c->n, c->cx, c->xs[0], c->xs[1], c->xs[2] }, pads[6] = { 0 }, inner = 1;
		for (int q = 0; q < c->nsp; q++) {
			ys[q] = kxd_out(c, q);
			inner *= q ? c->xs[q] : 1;
		}
		struct hp_tensor dy = kxd_tensor(c->nsp, c->n, c->cy, ys), out, ref;
		struct hp_tensor w = kxd_tensor(c->nsp, c->cy, c->cx, c->k);
		char what[96];
		kt_fill_random(&dy, 140 + (unsigned)k, -1, 1);
		kt_fill_random(&w, 150 + (unsigned)k, -1, 1);
		ref = kxd_tensor(c->nsp, c->n, c->cx, c->xs);
		double *want = malloc((size_t)numel(&ref) * sizeof *want);
		kxd_ref(c, dy.data, w.data, ref.data, want);
		for (int v = 0; v < 2; v++) {
			kt_pool = v ? pool : NULL;
			kxd_run(c, &dy, &w, 0, H, xsh, pads, v ? -1 : HP_CGD_PATH_PW, &out);
			snprintf(what, sizeof what, "1x1 case %zu (%d threads) against its replay", k, v + 1);
			bitwise(&out, &ref, what);
			snprintf(what, sizeof what, "1x1 case %zu against float64", k);
			close_to(&out, want, 1e-5, what);
			hp_tensor_free(&out);
		}
		/* X rows [xa, xb) from dY rows [ya, yb) reaching ext rows past them */
		for (int b = 0; b < 3; b++)
			for (int half = 0; half < 2; half++) {
				int xa = half ? cut[b] : 0, xb = half ? H : cut[b], ext = b == 1 ? 3 : b;
				int ya = xa - ext > 0 ? xa - ext : 0, yb = xb + ext < H ? xb + ext : H;
				int64_t bx[5], bp[6] = { 0 };
				if (xa >= xb)
					continue;
				memcpy(bx, xsh, sizeof bx);
				bx[2] = xb - xa;
				bp[0] = xa - ya;
				bp[c->nsp] = yb - xb;
				kt_pool = half ? pool : NULL;
				kxd_run(c, &dy, &w, ya, yb - ya, bx, bp, HP_CGD_PATH_PW, &out);
				for (int64_t pl = 0; pl < (int64_t)c->n * c->cx; pl++)
					for (int64_t i = 0; i < (xb - xa) * inner; i++) {
						float got = ((const float *)out.data)[pl * (xb - xa) * inner + i];
						float exp = ((const float *)ref.data)[(pl * H + xa) * inner + i];
						if (memcmp(&got, &exp, sizeof got))
							fail_msg("1x1 case %zu band [%d, %d) from [%d, %d): plane %lld element "
								 "%lld: %.9g against %.9g",
								 k, xa, xb, ya, yb, (long long)pl, (long long)i, got, exp);
					}
				hp_tensor_free(&out);
			}
		kt_pool = NULL;
		free(want);
		hp_tensor_free(&ref);
		hp_tensor_free(&dy);
		hp_tensor_free(&w);
	}
	hp_cgd_set_pw(0);
	hp_pool_destroy(pool);
}

/* ConvGradData of a strided Conv by phases (kernels/conv_grad_phase.c:
 * the KxK tiles, the 1x1 kernels' direct kernel, or lanes over positions
 * where the phases are as wide as dY's rows and there are 12 channels or
 * more, grouped too: unpaired, or the two phases of a row in pairs, which
 * run on 1 thread and on 2 threads respectively, and in the second half
 * of each band cut), replayed here in scalar float: dX[n][g, c][x] is one chain of fused
 * multiply-adds from 0 over (m, then the taps t with x + p - t * d = 0
 * (mod s) per dim, each dim's from the largest t down), taps whose dY
 * position y = (x + p - t * d) / s is out of range included (w * 0);
 * positions with no taps are 0.  Beside it a float64 sum.  On 1 and 2
 * threads, whole (forced) and with hpdlf_path = HP_CGD_PATH_PHASE; row
 * bands of the first spatial axis cut as exec/split_grad.c cuts them
 * (some with dY rows beyond the windows' reach) are bitwise the whole
 * node's rows. */
struct phd {
	int nsp, n, cx, cy, group;
	int xs[3], k[3], s[3], d[3], p[3]; /* spatial, first nsp used */
};

static int phd_out(const struct phd *c, int q)
{
	return (c->xs[q] + 2 * c->p[q] - (c->k[q] - 1) * c->d[q] - 1) / c->s[q] + 1;
}

static int64_t phd_fdiv(int64_t a, int64_t b)
{
	return a >= 0 ? a / b : -((-a + b - 1) / b);
}

static void phd_ref(const struct phd *c, const float *dy, const float *w, float *dx, double *want)
{
	int64_t X[3] = { 1, 1, 1 }, Y[3] = { 1, 1, 1 }, K[3] = { 1, 1, 1 }, S[3] = { 1, 1, 1 }, Dl[3] = { 1, 1, 1 },
		P[3] = { 0, 0, 0 };
	int cxg = c->cx / c->group, cyg = c->cy / c->group;

	for (int q = 0; q < c->nsp; q++) {
		int j = 3 - c->nsp + q;
		X[j] = c->xs[q];
		Y[j] = phd_out(c, q);
		K[j] = c->k[q];
		S[j] = c->s[q];
		Dl[j] = c->d[q];
		P[j] = c->p[q];
	}
	int64_t xv = X[0] * X[1] * X[2], kv = K[0] * K[1] * K[2];
	for (int n = 0; n < c->n; n++)
		for (int g = 0; g < c->group; g++)
			for (int m = 0; m < cxg; m++)
				for (int64_t o = 0; o < xv; o++) {
					int64_t pos[3] = { o / (X[1] * X[2]), o / X[2] % X[1], o % X[2] };
					int64_t taps[3][16], nt[3] = { 0, 0, 0 };
					float acc = 0.0f;
					double sum = 0;
					for (int j = 0; j < 3; j++) /* the largest tap first */
						for (int64_t t = K[j] - 1; t >= 0; t--)
							if ((pos[j] + P[j] - t * Dl[j]) % S[j] == 0)
								taps[j][nt[j]++] = t;
					for (int ch = 0; ch < cyg; ch++)
						for (int64_t a = 0; a < nt[0]; a++)
							for (int64_t b = 0; b < nt[1]; b++)
								for (int64_t e = 0; e < nt[2]; e++) {
									int64_t t[3] = { taps[0][a], taps[1][b], taps[2][e] }, y[3];
									int in = 1;
									for (int j = 0; j < 3; j++) {
										y[j] = phd_fdiv(pos[j] + P[j] - t[j] * Dl[j], S[j]);
										in &= y[j] >= 0 && y[j] < Y[j];
									}
									float v = in ? dy[((int64_t)(n * c->cy + g * cyg + ch) * Y[0] + y[0]) *
												  Y[1] * Y[2] +
											  y[1] * Y[2] + y[2]]
										     : 0.0f;
									float wt = w[((int64_t)(g * cyg + ch) * cxg + m) * kv +
										     (t[0] * K[1] + t[1]) * K[2] + t[2]];
									acc = fmaf(wt, v, acc);
									sum += (double)wt * v;
								}
					int64_t e = (int64_t)(n * c->cx + g * cxg + m) * xv + o;
					dx[e] = acc;
					want[e] = sum;
				}
}

static struct hp_tensor phd_tensor(int nsp, int a, int b, const int *sp)
{
	int64_t d[5] = { a, b, sp[0], nsp > 1 ? sp[1] : 1, nsp > 2 ? sp[2] : 1 };

	return kt_tensor(HP_F32, 2 + nsp, d);
}

/* ConvGradData of c on dY rows [ya, ya + dyrows) of the first spatial
 * axis for X rows of x_shape xsh, pads pads, hpdlf_path path (< 0: none). */
static void phd_run(const struct phd *c, const struct hp_tensor *dy, const struct hp_tensor *w, int ya, int dyrows,
		    const int64_t *xsh, const int64_t *pads, int path, struct hp_tensor *out)
{
	int64_t dl[3], st[3], inner = 1;
	int ys[3] = { 1, 1, 1 };
	struct hp_tensor band;

	for (int q = 0; q < c->nsp; q++) {
		dl[q] = c->d[q];
		st[q] = c->s[q];
		ys[q] = phd_out(c, q);
		inner *= q ? ys[q] : 1;
	}
	ys[0] = dyrows;
	band = phd_tensor(c->nsp, c->n, c->cy, ys);
	for (int64_t pl = 0; pl < (int64_t)c->n * c->cy; pl++)
		memcpy((float *)band.data + pl * dyrows * inner,
		       (const float *)dy->data + (pl * phd_out(c, 0) + ya) * inner, (size_t)(dyrows * inner) * sizeof(float));
	struct hp_attr a[6] = { kt_int("group", c->group), kt_ints("strides", c->nsp, st),
				kt_ints("dilations", c->nsp, dl), kt_ints("pads", 2 * c->nsp, pads),
				kt_ints("x_shape", 2 + c->nsp, xsh), kt_int("hpdlf_path", path) };
	struct hp_tensor in[2] = { band, *w };
	run("ConvGradData", 2, in, path >= 0 ? 6 : 5, a, 1, out);
	hp_tensor_free(&band);
}

static void test_conv_grad_phase(void **state)
{
	const struct phd cases[] = {
		/* ResNet's 3x3 stride 2, odd sizes: phases of 1, 2 and 4 taps */
		{ 2, 2, 20, 32, 1, { 11, 17 }, { 3, 3 }, { 2, 2 }, { 1, 1 }, { 1, 1 } },
		/* 1x1 stride 2: three phases of zeros */
		{ 2, 4, 16, 24, 1, { 8, 9 }, { 1, 1 }, { 2, 2 }, { 1, 1 }, { 0, 0 } },
		/* 1x1 (direct: no workspace): 40 channels (a block of 32 and
		 * 8), strides 2 and 3, a pad: positions whose tap leaves dY */
		{ 2, 2, 40, 16, 1, { 9, 7 }, { 1, 1 }, { 2, 3 }, { 1, 1 }, { 1, 0 } },
		{ 3, 1, 8, 12, 1, { 5, 6, 7 }, { 1, 1, 1 }, { 2, 2, 2 }, { 1, 1, 1 }, { 0, 0, 0 } },
		/* lanes: 72 positions a phase plane, 20 channels (two blocks of 12
		 * overlapping) */
		{ 2, 2, 20, 24, 1, { 16, 18 }, { 3, 3 }, { 2, 2 }, { 1, 1 }, { 1, 1 } },
		/* 3-D as wide as dY's rows (lanes), dilation 2 (lanes) */
		{ 3, 2, 16, 12, 1, { 5, 6, 8 }, { 3, 3, 3 }, { 2, 2, 2 }, { 1, 1, 1 }, { 1, 1, 1 } },
		{ 2, 1, 14, 12, 1, { 12, 14 }, { 3, 3 }, { 2, 2 }, { 2, 2 }, { 2, 2 } },
		/* lanes, phase planes of 6 and 4 positions: several per vector
		 * (items, and in 3-D depths) */
		{ 2, 3, 12, 16, 1, { 6, 4 }, { 3, 3 }, { 2, 2 }, { 1, 1 }, { 1, 1 } },
		{ 3, 2, 12, 8, 1, { 4, 4, 4 }, { 3, 3, 3 }, { 2, 2, 2 }, { 1, 1, 1 }, { 1, 1, 1 } },
		/* stride 3: nine phases */
		{ 2, 1, 9, 12, 1, { 15, 12 }, { 3, 3 }, { 3, 3 }, { 1, 1 }, { 1, 1 } },
		/* the 7x7 stem: windows of 49 taps (W' packed by scalars) */
		{ 2, 1, 3, 8, 1, { 13, 14 }, { 7, 7 }, { 2, 2 }, { 1, 1 }, { 3, 3 } },
		/* a 5x3 kernel, strides 3 and 2, dilation 2 across */
		{ 2, 1, 9, 12, 1, { 17, 15 }, { 5, 3 }, { 3, 2 }, { 1, 2 }, { 2, 1 } },
		/* ResNet's small planes (lanes: vectors of 4 positions) */
		{ 2, 4, 24, 40, 1, { 4, 4 }, { 3, 3 }, { 2, 2 }, { 1, 1 }, { 1, 1 } },
		/* blocks of 24 channels by one vector (every phase one vector):
		 * 40 and 30 channels (the last block overlapping the one before),
		 * 2 items of 2x3 phase planes; 3x3 phase planes of one item (one
		 * vector, blocks of 12 by a pair) */
		{ 2, 4, 40, 24, 1, { 4, 4 }, { 3, 3 }, { 2, 2 }, { 1, 1 }, { 1, 1 } },
		{ 2, 2, 30, 16, 1, { 4, 6 }, { 3, 3 }, { 2, 2 }, { 1, 1 }, { 1, 1 } },
		{ 2, 1, 26, 12, 1, { 6, 6 }, { 3, 3 }, { 2, 2 }, { 1, 1 }, { 1, 1 } },
		/* groups (dY rows of 5: in pairs; unpaired the KxK phases) */
		{ 2, 2, 16, 24, 2, { 9, 10 }, { 3, 3 }, { 2, 2 }, { 1, 1 }, { 1, 1 } },
		/* grouped lanes: 8 a group (ResNeXt's stride-2 3x3, blocks of 8),
		 * 16 a group (two blocks of 8 in each), 20 a group (blocks of 12,
		 * the second overlapping), 12 a group with 9 out a group; odd
		 * heights and a batch of 2 */
		{ 2, 2, 32, 32, 4, { 15, 16 }, { 3, 3 }, { 2, 2 }, { 1, 1 }, { 1, 1 } },
		{ 2, 1, 48, 24, 3, { 16, 18 }, { 3, 3 }, { 2, 2 }, { 1, 1 }, { 1, 1 } },
		{ 2, 2, 40, 16, 2, { 11, 16 }, { 3, 3 }, { 2, 2 }, { 1, 1 }, { 1, 1 } },
		{ 2, 1, 36, 27, 3, { 9, 20 }, { 3, 3 }, { 2, 2 }, { 1, 1 }, { 1, 1 } },
		/* dY rows of 7 and 3 (in pairs only; unpaired the KxK phases):
		 * ResNeXt's last stride-2 3x3, 32 a group, and phase planes of
		 * 9 positions, 2 items */
		{ 2, 1, 64, 32, 2, { 14, 14 }, { 3, 3 }, { 2, 2 }, { 1, 1 }, { 1, 1 } },
		{ 2, 2, 16, 16, 2, { 6, 6 }, { 3, 3 }, { 2, 2 }, { 1, 1 }, { 1, 1 } },
		/* grouped 3-D (eight phases, four pairs) and 1-D (bands cut the
		 * rows the pairs interleave) */
		{ 3, 1, 16, 16, 2, { 5, 6, 8 }, { 3, 3, 3 }, { 2, 2, 2 }, { 1, 1, 1 }, { 1, 1, 1 } },
		{ 1, 2, 16, 24, 2, { 34 }, { 3 }, { 2 }, { 1 }, { 1 } },
		/* two k chunks (K = 80 * 4 = 320), batch 1: W' per micro-tile */
		{ 2, 1, 14, 80, 1, { 7, 9 }, { 3, 3 }, { 2, 2 }, { 1, 1 }, { 1, 1 } },
		/* 3-D */
		{ 3, 2, 8, 12, 1, { 5, 6, 7 }, { 3, 3, 3 }, { 2, 2, 2 }, { 1, 1, 1 }, { 1, 1, 1 } },
	};
	struct hp_pool *pool;

	(void)state;
	if (!hp_kxk_available() || !hp_kxk_wide_ok())
		skip();
	assert_int_equal(hp_pool_create(2, &pool), 0);
	for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
		const struct phd *c = &cases[k];
		int ys[3] = { 1, 1, 1 }, H = c->xs[0], Ho = phd_out(c, 0), cut[3] = { 1, H / 2, H - 2 };
		int64_t xsh[5] = { c->n, c->cx, c->xs[0], c->xs[1], c->xs[2] }, pads[6] = { 0 }, inner = 1;
		for (int q = 0; q < c->nsp; q++) {
			ys[q] = phd_out(c, q);
			pads[q] = pads[c->nsp + q] = c->p[q];
			inner *= q ? c->xs[q] : 1;
		}
		struct hp_tensor dy = phd_tensor(c->nsp, c->n, c->cy, ys), out, whole, ref;
		struct hp_tensor w = phd_tensor(c->nsp, c->cy, c->cx / c->group, c->k);
		char what[96];
		kt_fill_random(&dy, 220 + (unsigned)k, -1, 1);
		kt_fill_random(&w, 230 + (unsigned)k, -1, 1);
		ref = phd_tensor(c->nsp, c->n, c->cx, c->xs);
		double *want = malloc((size_t)numel(&ref) * sizeof *want);
		phd_ref(c, dy.data, w.data, ref.data, want);
		for (int v = 0; v < 2; v++) {
			kt_pool = v ? pool : NULL;
			hp_cgp_set_mode(v ? 0 : 1);
			hp_cgp_set_pair(v ? 0 : -1); /* grouped lanes: unpaired, then in pairs */
			phd_run(c, &dy, &w, 0, Ho, xsh, pads, v ? HP_CGD_PATH_PHASE : -1, &out);
			hp_cgp_set_mode(0);
			hp_cgp_set_pair(0);
			snprintf(what, sizeof what, "case %zu (%d threads) against its replay", k, v + 1);
			bitwise(&out, &ref, what);
			snprintf(what, sizeof what, "case %zu against float64", k);
			close_to(&out, want, 1e-5, what);
			hp_tensor_free(&out);
		}
		/* row bands [xa, xb) of the first spatial axis, as split_grad.c cuts them */
		whole = ref;
		for (int b = 0; b < 3; b++)
			for (int half = 0; half < 2; half++) {
				int xa = half ? cut[b] : 0, xb = half ? H : cut[b];
				int p = c->p[0], s = c->s[0], kd = (c->k[0] - 1) * c->d[0], ext = b == 1 ? 2 : 0;
				int64_t ya = -phd_fdiv(-(xa + p - kd), s), yb = phd_fdiv(xb - 1 + p, s) + 1;
				ya = ya < phd_fdiv(xa + p, s) ? ya : phd_fdiv(xa + p, s);
				/* dY rows cut out beyond the windows' reach (a replaced
				 * path's tiles) */
				ya = ya - ext > 0 ? ya - ext : 0;
				yb = yb + ext < Ho ? yb + ext : Ho;
				int64_t bx[5], bp[6];
				if (xa >= xb || ya >= yb)
					continue;
				memcpy(bx, xsh, sizeof bx);
				memcpy(bp, pads, sizeof bp);
				bx[2] = xb - xa;
				bp[0] = xa + p - ya * s;
				bp[c->nsp] = (yb - ya - 1) * s + kd + 1 - (xb - xa) - bp[0];
				bp[c->nsp] = bp[c->nsp] > 0 ? bp[c->nsp] : 0;
				kt_pool = half ? pool : NULL;
				hp_cgp_set_pair(half ? 0 : -1);
				phd_run(c, &dy, &w, (int)ya, (int)(yb - ya), bx, bp, HP_CGD_PATH_PHASE, &out);
				hp_cgp_set_pair(0);
				for (int64_t pl = 0; pl < (int64_t)c->n * c->cx; pl++)
					for (int64_t i = 0; i < (xb - xa) * inner; i++) {
						float got = ((const float *)out.data)[pl * (xb - xa) * inner + i];
						float exp = ((const float *)whole.data)[(pl * H + xa) * inner + i];
						if (memcmp(&got, &exp, sizeof got))
							fail_msg("case %zu band [%d, %d): plane %lld element %lld: %.9g against %.9g",
								 k, xa, xb, (long long)pl, (long long)i, got, exp);
					}
				hp_tensor_free(&out);
			}
		kt_pool = NULL;
		free(want);
		hp_tensor_free(&ref);
		hp_tensor_free(&dy);
		hp_tensor_free(&w);
	}
	hp_pool_destroy(pool);
}

/* ---- pooling ------------------------------------------------------------- */

struct pool_ctx {
	int max, include_pad;
	int64_t planes, xs[2], ys[2], k[2], s[2], d[2], p[2], pe[2];
	double *x, *dy;
};

static double pool_loss(void *pp)
{
	struct pool_ctx *c = pp;
	double s = 0;

	for (int64_t pl = 0; pl < c->planes; pl++)
		for (int64_t oh = 0; oh < c->ys[0]; oh++)
			for (int64_t ow = 0; ow < c->ys[1]; ow++) {
				double m = -INFINITY, sum = 0;
				int64_t cnt = 0, h0 = oh * c->s[0] - c->p[0], w0 = ow * c->s[1] - c->p[1];
				int64_t h1 = h0 + c->k[0] < c->xs[0] + c->pe[0] ? h0 + c->k[0] : c->xs[0] + c->pe[0];
				int64_t w1 = w0 + c->k[1] < c->xs[1] + c->pe[1] ? w0 + c->k[1] : c->xs[1] + c->pe[1];
				for (int64_t a = 0; a < c->k[0]; a++)
					for (int64_t b = 0; b < c->k[1]; b++) {
						int64_t ih = h0 + a * c->d[0], iw = w0 + b * c->d[1];
						if (ih < 0 || iw < 0 || ih >= c->xs[0] || iw >= c->xs[1])
							continue;
						double v = c->x[(pl * c->xs[0] + ih) * c->xs[1] + iw];
						m = v > m ? v : m;
						sum += v;
						cnt++;
					}
				double y = c->max ? m : sum / (double)(c->include_pad ? (h1 - h0) * (w1 - w0) : cnt);
				s += c->dy[(pl * c->ys[0] + oh) * c->ys[1] + ow] * y;
			}
	return s;
}

static void pool_case(int max, int include_pad, int ceil_mode, int dil)
{
	struct pool_ctx c = { .max = max, .include_pad = include_pad, .planes = 6, .xs = { 7, 8 }, .k = { 3, 2 },
			      .s = { 2, 3 }, .d = { dil, 1 }, .p = { 1, 0 }, .pe = { 1, 1 } };
	int64_t xsh[4] = { 2, 3, 7, 8 }, pads[4] = { 1, 0, 1, 1 };
	struct hp_tensor x = rnd(T(4, 2, 3, 7, 8), 50, -1, 1), dy, out;

	for (int q = 0; q < 2; q++) {
		int64_t num = c.xs[q] + c.p[q] + c.pe[q] - ((c.k[q] - 1) * c.d[q] + 1);
		c.ys[q] = (ceil_mode ? (num + c.s[q] - 1) / c.s[q] : num / c.s[q]) + 1;
		if (ceil_mode && (c.ys[q] - 1) * c.s[q] >= c.xs[q] + c.p[q])
			c.ys[q]--; /* torch: the last window must start inside */
	}
	dy = rnd(T(4, 2, 3, (int)c.ys[0], (int)c.ys[1]), 51, -1, 1);
	c.x = dbl(&x);
	c.dy = dbl(&dy);
	struct hp_attr a[6] = { kt_ints("kernel_shape", 2, c.k), kt_ints("strides", 2, c.s), kt_ints("pads", 4, pads),
				kt_ints("dilations", 2, c.d), kt_ints("x_shape", 4, xsh),
				kt_int("count_include_pad", include_pad) };
	struct hp_tensor in[2] = { dy, x };
	if (max)
		run("MaxPoolGrad", 2, in, 4, a, 1, &out);
	else
		run("AveragePoolGrad", 1, in, 6, a, 1, &out);
	fd_check(pool_loss, &c, c.x, &out, 1e-5, max ? "MaxPool dX" : "AveragePool dX");
	hp_tensor_free(&out);
	free(c.x);
	free(c.dy);
	hp_tensor_free(&x);
	hp_tensor_free(&dy);
}

/* ConvGradData with attribute hpdlf_lean (the splitter's, where its
 * workspace decides the smallest budget: one worker's buffers) gives the
 * bits it gives without, alone and on a pool of 2: the column path
 * (strided, and the tiny U-Net's 3-D 3x3x3, which set its smallest
 * training budget), the KxK tiles, the slab path. */
static void test_conv_grad_lean(void **state)
{
	static const struct {
		int nsp, n, cx, cy, s, x[3], k;
	} cases[] = {
		{ 2, 2, 8, 16, 2, { 13, 18, 1 }, 3 }, { 3, 2, 16, 8, 1, { 8, 8, 8 }, 3 }, { 3, 1, 24, 32, 1, { 6, 7, 9 }, 3 },
		{ 2, 2, 32, 48, 1, { 15, 17, 1 }, 3 }, { 2, 1, 6, 16, 1, { 12, 12, 1 }, 5 },
	};
	struct hp_pool *pool;

	(void)state;
	assert_int_equal(hp_pool_create(2, &pool), 0);
	for (size_t t = 0; t < sizeof cases / sizeof cases[0]; t++) {
		int nsp = cases[t].nsp, ys[3] = { 1, 1, 1 }, ks[3] = { 1, 1, 1 };
		int64_t xsh[5] = { cases[t].n, cases[t].cx, 1, 1, 1 }, st[3], dl[3] = { 1, 1, 1 }, pads[6];
		for (int q = 0; q < nsp; q++) {
			int p = cases[t].k / 2;
			xsh[2 + q] = cases[t].x[q];
			ys[q] = (cases[t].x[q] + 2 * p - cases[t].k) / cases[t].s + 1;
			ks[q] = cases[t].k;
			st[q] = cases[t].s;
			pads[q] = pads[nsp + q] = p;
		}
		struct hp_tensor dy = kxd_tensor(nsp, cases[t].n, cases[t].cy, ys), w = kxd_tensor(nsp, cases[t].cy, cases[t].cx, ks);
		struct hp_tensor out[2][2];
		kt_fill_random(&dy, 140 + (unsigned)t, -1, 1);
		kt_fill_random(&w, 150 + (unsigned)t, -1, 1);
		for (int lean = 0; lean < 2; lean++)
			for (int v = 0; v < 2; v++) {
				struct hp_attr a[6] = { kt_int("group", 1), kt_ints("strides", nsp, st), kt_ints("dilations", nsp, dl),
							kt_ints("pads", 2 * nsp, pads), kt_ints("x_shape", 2 + nsp, xsh),
							kt_int("hpdlf_lean", 1) };
				struct hp_tensor din[2] = { dy, w };
				kt_pool = v ? pool : NULL;
				run("ConvGradData", 2, din, lean ? 6 : 5, a, 1, &out[lean][v]);
			}
		kt_pool = NULL;
		/* the same pool (without one OpenBLAS may thread its sgemms,
		 * whose bits then depend on its split) */
		for (int v = 0; v < 2; v++)
			if (memcmp(out[1][v].data, out[0][v].data, hp_tensor_bytes(&out[0][v])))
				fail_msg("case %zu: hpdlf_lean %s differs from the node's bits", t,
					 v ? "on a pool of 2" : "without a pool");
		for (int i = 0; i < 4; i++)
			hp_tensor_free(&out[i / 2][i % 2]);
		hp_tensor_free(&dy);
		hp_tensor_free(&w);
	}
	hp_pool_destroy(pool);
}

/* ConvTransposeGradData (the U-Net's up-sampling's dX: a strided Conv of
 * dY, chosen anew in every band node) gives each batch item the bits it
 * gives that item alone: out of core, training cuts a batch into bands of
 * items.  The first case picked the dot path for one item (64 columns) and
 * im2col for two, and the tiny U-Net's gradients came out an ulp off. */
static void test_convt_grad_items(void **state)
{
	static const struct {
		int nsp, n, cx, cy, x, k;
	} cases[] = { { 3, 2, 16, 8, 4, 2 }, { 3, 3, 8, 4, 8, 2 }, { 2, 2, 32, 16, 8, 2 }, { 2, 4, 24, 16, 4, 3 } };
	struct hp_pool *pool;

	(void)state;
	assert_int_equal(hp_pool_create(2, &pool), 0);
	kt_pool = pool;
	for (size_t t = 0; t < sizeof cases / sizeof cases[0]; t++) {
		int nsp = cases[t].nsp, k = cases[t].k, ys[3], ks[3] = { k, k, k };
		int64_t xsh[5] = { cases[t].n, cases[t].cx, cases[t].x, cases[t].x, cases[t].x }, st[3] = { k, k, k };
		int64_t dl[3] = { 1, 1, 1 }, pads[6] = { 0 };
		for (int q = 0; q < 3; q++)
			ys[q] = cases[t].x * k;
		struct hp_tensor dy = kxd_tensor(nsp, cases[t].n, cases[t].cy, ys), w = kxd_tensor(nsp, cases[t].cx, cases[t].cy, ks);
		struct hp_tensor whole, one;
		kt_fill_random(&dy, 160 + (unsigned)t, -1, 1);
		kt_fill_random(&w, 170 + (unsigned)t, -1, 1);
		struct hp_attr a[5] = { kt_int("group", 1), kt_ints("strides", nsp, st), kt_ints("dilations", nsp, dl),
					kt_ints("pads", 2 * nsp, pads), kt_ints("x_shape", 2 + nsp, xsh) };
		struct hp_tensor din[2] = { dy, w };
		run("ConvTransposeGradData", 2, din, 5, a, 1, &whole);
		size_t per = hp_tensor_bytes(&whole) / (size_t)cases[t].n, dper = hp_tensor_bytes(&dy) / (size_t)cases[t].n;
		for (int item = 0; item < cases[t].n; item++) {
			int64_t xs1[5], dsh[5];
			memcpy(xs1, xsh, sizeof xs1);
			memcpy(dsh, dy.shape.dims, sizeof dsh);
			xs1[0] = dsh[0] = 1;
			struct hp_tensor dy1 = kt_tensor(HP_F32, 2 + nsp, dsh);
			memcpy(dy1.data, (const char *)dy.data + (size_t)item * dper, dper);
			a[4] = kt_ints("x_shape", 2 + nsp, xs1);
			struct hp_tensor d1[2] = { dy1, w };
			run("ConvTransposeGradData", 2, d1, 5, a, 1, &one);
			if (memcmp(one.data, (const char *)whole.data + (size_t)item * per, per))
				fail_msg("case %zu: item %d alone differs from its part of the batch", t, item);
			hp_tensor_free(&one);
			hp_tensor_free(&dy1);
		}
		hp_tensor_free(&whole);
		hp_tensor_free(&dy);
		hp_tensor_free(&w);
	}
	kt_pool = NULL;
	hp_pool_destroy(pool);
}

/* ConvGradData, unpinned as the gradient products of a Conv's band nodes
 * are (out of core, training cuts a batch into bands of items before
 * autodiff), gives each batch item the bits it gives that item alone.
 * The 2-D shift path read the batch in its choice and its folding: for
 * two items SqueezeNet's Fire (3x3, 128 -> 32 at 11x11) took it, for one
 * col2im, and its gradients at a quarter of its peak came out an ulp
 * off; without that fix 11 of the first 14 geometries differ.  Nor may
 * the KxK path's choice read the batch (conv_grad.c kxk_ws_fits): with
 * the col2im workspace at the node's batch as its yardstick and its own
 * there (W' packed per micro-tile for one item of at most 128 positions),
 * cases 14-18 differ (128 <- 8 channels at 8x8, 3-D at 4^3); with the
 * shift path's at the node's batch, case 1; with its own at the node's
 * batch, cases 3, 10 and 16-18.  The last three: the 2-D U-Net's and
 * ResNet-18's. */
static void test_conv_grad_items(void **state)
{
	static const struct {
		int nd, n, cx, cy, x, k, p, s;
	} cases[] = { { 2, 2, 32, 128, 11, 3, 1, 1 }, { 2, 4, 64, 64, 16, 3, 1, 1 },  { 2, 2, 16, 16, 28, 3, 1, 1 },
		      { 2, 3, 8, 24, 9, 3, 1, 1 },    { 2, 2, 32, 64, 8, 3, 1, 2 },   { 2, 2, 48, 192, 5, 3, 1, 1 },
		      { 2, 2, 128, 128, 4, 3, 1, 1 }, { 2, 4, 6, 16, 12, 5, 0, 1 },   { 2, 2, 24, 24, 14, 1, 0, 1 },
		      { 2, 2, 64, 128, 16, 3, 1, 2 }, { 2, 4, 32, 32, 7, 3, 1, 1 },   { 2, 2, 64, 16, 13, 3, 1, 1 },
		      { 2, 8, 16, 16, 6, 3, 1, 1 },   { 2, 2, 10, 12, 19, 3, 1, 1 },  { 2, 2, 128, 8, 8, 3, 1, 1 },
		      { 2, 4, 256, 8, 11, 3, 1, 1 },  { 3, 2, 64, 64, 4, 3, 1, 1 },   { 3, 2, 16, 8, 3, 3, 1, 1 },
		      { 3, 4, 32, 64, 4, 3, 1, 1 },   { 2, 2, 128, 128, 16, 3, 1, 1 }, { 2, 4, 128, 128, 8, 3, 1, 1 },
		      { 2, 4, 256, 256, 4, 3, 1, 1 } };
	struct hp_pool *pool;

	(void)state;
	assert_int_equal(hp_pool_create(2, &pool), 0);
	for (int v = 0; v < 2; v++) {
		kt_pool = v ? pool : NULL;
		for (size_t t = 0; t < sizeof cases / sizeof cases[0]; t++) {
			int nd = cases[t].nd, x = cases[t].x, k = cases[t].k, p = cases[t].p, s = cases[t].s;
			int o = (x + 2 * p - k) / s + 1, ys[3] = { o, o, o }, ks[3] = { k, k, k };
			int64_t xsh[5] = { cases[t].n, cases[t].cx, x, x, x }, st[3] = { s, s, s }, dl[3] = { 1, 1, 1 };
			int64_t pads[6] = { p, p, p, p, p, p };
			struct hp_tensor dy = kxd_tensor(nd, cases[t].n, cases[t].cy, ys), w = kxd_tensor(nd, cases[t].cy, cases[t].cx, ks);
			struct hp_tensor whole, one;
			kt_fill_random(&dy, 180 + (unsigned)t, -1, 1);
			kt_fill_random(&w, 190 + (unsigned)t, -1, 1);
			struct hp_attr a[5] = { kt_int("group", 1), kt_ints("strides", nd, st), kt_ints("dilations", nd, dl),
						kt_ints("pads", 2 * nd, pads), kt_ints("x_shape", 2 + nd, xsh) };
			struct hp_tensor din[2] = { dy, w };
			run("ConvGradData", 2, din, 5, a, 1, &whole);
			size_t per = hp_tensor_bytes(&whole) / (size_t)cases[t].n, dper = hp_tensor_bytes(&dy) / (size_t)cases[t].n;
			for (int item = 0; item < cases[t].n; item++) {
				int64_t xs1[5], dsh[5];
				memcpy(xs1, xsh, sizeof xs1);
				memcpy(dsh, dy.shape.dims, sizeof dsh);
				xs1[0] = dsh[0] = 1;
				struct hp_tensor dy1 = kt_tensor(HP_F32, 2 + nd, dsh);
				memcpy(dy1.data, (const char *)dy.data + (size_t)item * dper, dper);
				a[4] = kt_ints("x_shape", 2 + nd, xs1);
				struct hp_tensor d1[2] = { dy1, w };
				run("ConvGradData", 2, d1, 5, a, 1, &one);
				if (memcmp(one.data, (const char *)whole.data + (size_t)item * per, per))
					fail_msg("case %zu (%s): item %d alone differs from its part of the batch", t,
						 v ? "pool of 2" : "no pool", item);
				a[4] = kt_ints("x_shape", 2 + nd, xsh);
				hp_tensor_free(&one);
				hp_tensor_free(&dy1);
			}
			hp_tensor_free(&whole);
			hp_tensor_free(&dy);
			hp_tensor_free(&w);
		}
	}
	kt_pool = NULL;
	hp_pool_destroy(pool);
}

static void test_pool_grad(void **state)
{
	(void)state;
	pool_case(1, 0, 0, 1);
	pool_case(1, 0, 1, 2);
	pool_case(0, 0, 0, 1);
	pool_case(0, 1, 0, 1);
	pool_case(0, 1, 1, 1);
	pool_case(0, 0, 1, 1);
}

/* ---- normalization and softmax ------------------------------------------ */

struct bn_ctx {
	int64_t n, c, inner;
	double *x, *sc, *b, *dy, eps;
	int layer; /* LayerNorm over the last `inner` values of each of n*c rows */
};

static double bn_loss(void *p)
{
	struct bn_ctx *c = p;
	double s = 0;

	for (int64_t ch = 0; ch < (c->layer ? c->n * c->c : c->c); ch++) {
		double mean = 0, var = 0, cnt = (double)(c->layer ? c->inner : c->n * c->inner);
		for (int pass = 0; pass < 3; pass++)
			for (int64_t b = 0; b < (c->layer ? 1 : c->n); b++)
				for (int64_t i = 0; i < c->inner; i++) {
					int64_t k = c->layer ? ch * c->inner + i : (b * c->c + ch) * c->inner + i;
					int64_t pi = c->layer ? i : ch;
					if (pass == 0)
						mean += c->x[k] / cnt;
					else if (pass == 1)
						var += (c->x[k] - mean) * (c->x[k] - mean) / cnt;
					else
						s += c->dy[k] * ((c->x[k] - mean) / sqrt(var + c->eps) * c->sc[pi] + c->b[pi]);
				}
	}
	return s;
}

static void test_batchnorm(void **state)
{
	struct hp_tensor in[5] = { rnd(T(4, 3, 4, 2, 3), 60, -2, 3), rnd(T(1, 4), 61, 0.5f, 1.5f),
				   rnd(T(1, 4), 62, -1, 1), rnd(T(1, 4), 63, -1, 1), rnd(T(1, 4), 64, 0.5f, 2) };
	struct hp_attr a[2] = { kt_float("epsilon", 1e-3f), kt_float("momentum", 0.8f) };
	struct hp_tensor out[3], dy = rnd(T(4, 3, 4, 2, 3), 65, -1, 1), g[3];
	struct bn_ctx c = { 3, 4, 6, dbl(&in[0]), dbl(&in[1]), dbl(&in[2]), dbl(&dy), 1e-3, 0 };
	double ym[72], rm[4], rv[4];

	(void)state;
	run("BatchNormTrain", 5, in, 2, a, 3, out);
	for (int ch = 0; ch < 4; ch++) { /* running stats as torch: 0.2 batch + 0.8 old, unbiased var */
		double mean = 0, var = 0;
		for (int b = 0; b < 3; b++)
			for (int i = 0; i < 6; i++)
				mean += c.x[(b * 4 + ch) * 6 + i] / 18;
		for (int b = 0; b < 3; b++)
			for (int i = 0; i < 6; i++)
				var += pow(c.x[(b * 4 + ch) * 6 + i] - mean, 2);
		rm[ch] = 0.8 * ((float *)in[3].data)[ch] + 0.2 * mean;
		rv[ch] = 0.8 * ((float *)in[4].data)[ch] + 0.2 * var / 17;
		for (int b = 0; b < 3; b++)
			for (int i = 0; i < 6; i++) {
				int k = (b * 4 + ch) * 6 + i;
				ym[k] = (c.x[k] - mean) / sqrt(var / 18 + 1e-3) * c.sc[ch] + c.b[ch];
			}
	}
	close_to(&out[0], ym, 1e-5, "BatchNormTrain Y");
	close_to(&out[1], rm, 1e-6, "BatchNormTrain running mean");
	close_to(&out[2], rv, 1e-6, "BatchNormTrain running var");
	struct hp_tensor gin[3] = { dy, in[0], in[1] };
	run("BatchNormGrad", 3, gin, 1, a, 3, g);
	fd_check(bn_loss, &c, c.x, &g[0], 1e-4, "BatchNorm dX");
	fd_check(bn_loss, &c, c.sc, &g[1], 1e-5, "BatchNorm dScale");
	fd_check(bn_loss, &c, c.b, &g[2], 1e-5, "BatchNorm dB");
	free(c.x);
	free(c.sc);
	free(c.b);
	free(c.dy);
	free_all(g, 3);
	free_all(out, 3);
	free_all(in, 5);
	hp_tensor_free(&dy);
}

/* |got - want| within ulps float32 ulps of want (want's own rounding is 1/2). */
static void near_ulps(float got, double want, double ulps, const char *what, int ch)
{
	double tol = ulps * ldexp(fabs(want), -23);

	if (!(fabs(got - want) <= tol))
		fail_msg("%s, channel %d: %.9g against %.9g (%.1f ulps, at most %.1f)", what, ch, got, want,
			 fabs(got - want) / ldexp(fabs(want), -23), ulps);
}

/* The sums of BatchNormTrain and BatchNormGrad over a channel of 2^20
 * elements, offset far from 0 as activations often are: accumulated in
 * double as PyTorch's CPU kernels do, the statistics and dScale/dB come
 * out within 2 ulps of the float64 value (rounding alone is 1/2); float
 * accumulators miss (planted: 8 float lanes put the mean of channel 0 8 ulps
 * off, and check_numerics.py's 2x-of-PyTorch criterion alone
 * does not see them).  Momentum 0 makes the running statistics the batch's
 * (the variance unbiased, as torch). */
static void test_batchnorm_sums(void **state)
{
	enum { N = 16, C = 2, S = 256 * 256 };
	const int64_t cnt = (int64_t)N * S;
	struct hp_tensor in[5] = { T(4, N, C, 256, 256), rnd(T(1, C), 71, 0.5f, 1.5f), rnd(T(1, C), 72, -1, 1),
				   rnd(T(1, C), 73, -1, 1), rnd(T(1, C), 74, 0.5f, 2) };
	struct hp_attr a[2] = { kt_float("epsilon", 1e-5f), kt_float("momentum", 0.0f) };
	struct hp_tensor out[3], dy = rnd(T(4, N, C, 256, 256), 75, 0.5f, 1.5f), g[3];
	const float lo[C] = { 99, -3 }, hi[C] = { 101, 5 };
	float *x = in[0].data, *d = dy.data;

	(void)state;
	kt_fill_random(&in[0], 76, 0, 1);
	for (int64_t b = 0; b < N; b++) /* channel c uniform in [lo, hi) */
		for (int c = 0; c < C; c++)
			for (int64_t i = 0; i < S; i++) {
				float *v = &x[(b * C + c) * S + i];
				*v = lo[c] + (hi[c] - lo[c]) * *v;
			}
	run("BatchNormTrain", 5, in, 2, a, 3, out);
	struct hp_tensor gin[3] = { dy, in[0], in[1] };
	run("BatchNormGrad", 3, gin, 1, a, 3, g);
	for (int c = 0; c < C; c++) {
		double mean = 0, var = 0, sdy = 0, sdyx = 0, inv, sc = ((float *)in[1].data)[c], bias = ((float *)in[2].data)[c];
		for (int64_t b = 0; b < N; b++)
			for (int64_t i = 0; i < S; i++)
				mean += x[(b * C + c) * S + i];
		mean /= (double)cnt;
		for (int64_t b = 0; b < N; b++)
			for (int64_t i = 0; i < S; i++)
				var += pow(x[(b * C + c) * S + i] - mean, 2);
		var /= (double)cnt;
		inv = 1 / sqrt(var + 1e-5);
		for (int64_t b = 0; b < N; b++)
			for (int64_t i = 0; i < S; i++) {
				int64_t k = (b * C + c) * S + i;
				sdy += d[k];
				sdyx += d[k] * (x[k] - mean) * inv;
			}
		near_ulps(((float *)out[1].data)[c], mean, 2, "BatchNormTrain running mean", c);
		near_ulps(((float *)out[2].data)[c], var * (double)cnt / (double)(cnt - 1), 2, "BatchNormTrain running var", c);
		near_ulps(((float *)g[2].data)[c], sdy, 2, "BatchNormGrad dB", c);
		near_ulps(((float *)g[1].data)[c], sdyx, 2, "BatchNormGrad dScale", c);
		for (int64_t b = 0; b < N; b += N - 1) /* first and last item: Y and dX from the exact statistics */
			for (int64_t i = 0; i < S; i += 97) {
				int64_t k = (b * C + c) * S + i;
				double xh = (x[k] - mean) * inv;
				double y = xh * sc + bias, dx = sc * inv * (d[k] - sdy / (double)cnt - xh * sdyx / (double)cnt);
				if (!(fabs(((float *)out[0].data)[k] - y) <= 1e-6 * (1 + fabs(y))))
					fail_msg("BatchNormTrain Y[%lld]: %.9g against %.9g", (long long)k, ((float *)out[0].data)[k], y);
				if (!(fabs(((float *)g[0].data)[k] - dx) <= 1e-6 * (1 + fabs(dx))))
					fail_msg("BatchNormGrad dX[%lld]: %.9g against %.9g", (long long)k, ((float *)g[0].data)[k], dx);
			}
	}
	free_all(g, 3);
	free_all(out, 3);
	free_all(in, 5);
	hp_tensor_free(&dy);
}

static void test_layernorm_grad(void **state)
{
	struct hp_tensor in[3] = { rnd(T(3, 2, 3, 5), 70, -1, 1), rnd(T(3, 2, 3, 5), 71, -2, 2), rnd(T(1, 5), 72, 0.5f, 1.5f) };
	struct hp_tensor bias = rnd(T(1, 5), 73, -1, 1), g[3];
	struct hp_attr a[2] = { kt_int("axis", -1), kt_float("epsilon", 1e-4f) };
	struct bn_ctx c = { 2, 3, 5, dbl(&in[1]), dbl(&in[2]), dbl(&bias), dbl(&in[0]), 1e-4, 1 };

	(void)state;
	run("LayerNormGrad", 3, in, 2, a, 3, g);
	fd_check(bn_loss, &c, c.x, &g[0], 1e-4, "LayerNorm dX");
	fd_check(bn_loss, &c, c.sc, &g[1], 1e-5, "LayerNorm dScale");
	fd_check(bn_loss, &c, c.b, &g[2], 1e-5, "LayerNorm dB");
	free(c.x);
	free(c.sc);
	free(c.b);
	free(c.dy);
	free_all(g, 3);
	free_all(in, 3);
	hp_tensor_free(&bias);
}

/* LayerNormGrad split over two threads (rows for dX, columns for dScale
 * and dB; 70 columns leave a tail after the 8-lane sums): bitwise one
 * thread, dX against the formula in double, dScale and dB against finite
 * differences. */
static void test_layernorm_grad_pool(void **state)
{
	enum { R = 300, LD = 70 };
	struct hp_tensor in[3] = { rnd(T(3, 3, 100, LD), 74, -1, 1), rnd(T(3, 3, 100, LD), 75, 1, 4),
				   rnd(T(1, LD), 76, 0.5f, 1.5f) };
	struct hp_tensor bias = rnd(T(1, LD), 77, -1, 1), one[3], two[3];
	struct hp_attr a[2] = { kt_int("axis", -1), kt_float("epsilon", 1e-5f) };
	struct bn_ctx c = { 3, 100, LD, dbl(&in[1]), dbl(&in[2]), dbl(&bias), dbl(&in[0]), 1e-5, 1 };
	double *dx = malloc(sizeof(double) * R * LD);
	struct hp_pool *pool;

	(void)state;
	assert_int_equal(hp_pool_create(2, &pool), 0);
	run("LayerNormGrad", 3, in, 2, a, 3, one);
	kt_pool = pool;
	run("LayerNormGrad", 3, in, 2, a, 3, two);
	kt_pool = NULL;
	for (int o = 0; o < 3; o++)
		assert_memory_equal(one[o].data, two[o].data, (size_t)numel(&one[o]) * sizeof(float));
	for (int r = 0; r < R; r++) {
		const double *x = c.x + r * LD, *dy = c.dy + r * LD;
		double mean = 0, var = 0, inv, mg = 0, mgx = 0;
		for (int i = 0; i < LD; i++)
			mean += x[i] / LD;
		for (int i = 0; i < LD; i++)
			var += (x[i] - mean) * (x[i] - mean) / LD;
		inv = 1 / sqrt(var + c.eps);
		for (int i = 0; i < LD; i++) {
			mg += dy[i] * c.sc[i] / LD;
			mgx += dy[i] * c.sc[i] * (x[i] - mean) * inv / LD;
		}
		for (int i = 0; i < LD; i++)
			dx[r * LD + i] = inv * (dy[i] * c.sc[i] - mg - (x[i] - mean) * inv * mgx);
	}
	close_to(&two[0], dx, 1e-5, "LayerNorm dX (2 threads)");
	fd_check(bn_loss, &c, c.sc, &two[1], 1e-5, "LayerNorm dScale (2 threads)");
	fd_check(bn_loss, &c, c.b, &two[2], 1e-5, "LayerNorm dB (2 threads)");
	free(dx);
	free(c.x);
	free(c.sc);
	free(c.b);
	free(c.dy);
	free_all(one, 3);
	free_all(two, 3);
	free_all(in, 3);
	hp_tensor_free(&bias);
	hp_pool_destroy(pool);
}

struct sm_ctx {
	double *x, *dy;
	int64_t outer, len, inner;
	int log;
};

static double sm_loss(void *p)
{
	struct sm_ctx *c = p;
	double s = 0;

	for (int64_t o = 0; o < c->outer; o++)
		for (int64_t i = 0; i < c->inner; i++) {
			double m = -INFINITY, z = 0;
			for (int64_t k = 0; k < c->len; k++)
				m = fmax(m, c->x[(o * c->len + k) * c->inner + i]);
			for (int64_t k = 0; k < c->len; k++)
				z += exp(c->x[(o * c->len + k) * c->inner + i] - m);
			for (int64_t k = 0; k < c->len; k++) {
				int64_t q = (o * c->len + k) * c->inner + i;
				double lp = c->x[q] - m - log(z);
				s += c->dy[q] * (c->log ? lp : exp(lp));
			}
		}
	return s;
}

static void test_softmax_grad(void **state)
{
	(void)state;
	for (int t = 0; t < 4; t++) {
		int logsm = t & 1, flat = t >> 1;
		struct hp_tensor x = rnd(T(3, 2, 3, 4), 80, -2, 2), dy = rnd(T(3, 2, 3, 4), 81, -1, 1), y, out;
		struct sm_ctx c = { dbl(&x), dbl(&dy), 2, flat ? 12 : 3, flat ? 1 : 4, logsm };
		struct hp_attr a[2] = { kt_int("axis", 1), kt_int("flatten", flat) };
		/* Y from the naive forward (the backward reads the forward's output):
		 * y[q] is the loss with dy = e_q. */
		y = T(3, 2, 3, 4);
		memset(c.dy, 0, 24 * sizeof *c.dy);
		for (int q = 0; q < 24; q++) {
			c.dy[q] = 1;
			((float *)y.data)[q] = (float)sm_loss(&c);
			c.dy[q] = 0;
		}
		free(c.dy);
		c.dy = dbl(&dy);
		struct hp_tensor in[2] = { dy, y };
		run(logsm ? "LogSoftmaxGrad" : "SoftmaxGrad", 2, in, 2, a, 1, &out);
		fd_check(sm_loss, &c, c.x, &out, 2e-5, logsm ? "LogSoftmax dX" : "Softmax dX");
		free(c.x);
		free(c.dy);
		hp_tensor_free(&out);
		hp_tensor_free(&x);
		hp_tensor_free(&dy);
		hp_tensor_free(&y);
	}
}

/* Attention's rows (a Softmax over the last axis, 70 long: eight-lane
 * sums with a tail): dX against y (dy - sum dy y) and dy - e^y sum dy in
 * double, and on two threads bitwise one. */
static void test_softmax_grad_rows(void **state)
{
	struct hp_pool *pool;

	(void)state;
	assert_int_equal(hp_pool_create(2, &pool), 0);
	for (int logsm = 0; logsm < 2; logsm++) {
		enum { R = 2 * 4 * 64, L = 70 };
		struct hp_tensor in[2] = { rnd(T(4, 2, 4, 64, L), 84, -1, 1), rnd(T(4, 2, 4, 64, L), 85, 0, 0.03f) }, one,
				 two;
		struct hp_attr a[1] = { kt_int("axis", -1) };
		const float *dy = in[0].data, *y = in[1].data;
		double *want = malloc(sizeof(double) * R * L);
		const char *op = logsm ? "LogSoftmaxGrad" : "SoftmaxGrad";
		run(op, 2, in, 1, a, 1, &one);
		kt_pool = pool;
		run(op, 2, in, 1, a, 1, &two);
		kt_pool = NULL;
		assert_memory_equal(one.data, two.data, sizeof(float) * R * L);
		for (int r = 0; r < R; r++) {
			double dot = 0;
			for (int c = 0; c < L; c++)
				dot += logsm ? dy[r * L + c] : (double)dy[r * L + c] * y[r * L + c];
			for (int c = 0; c < L; c++) {
				int k = r * L + c;
				want[k] = logsm ? dy[k] - exp(y[k]) * dot : y[k] * (dy[k] - dot);
			}
		}
		close_to(&one, want, 1e-6, op);
		free(want);
		hp_tensor_free(&one);
		hp_tensor_free(&two);
		free_all(in, 2);
	}
	hp_pool_destroy(pool);
}

/* ---- shape ops -------------------------------------------------------- */

/* Linear maps y = A x given as a gather list: y[i] = sum of x[src] * w;
 * the loss is dy . y, so the FD check covers any index mapping. */
struct lin_ctx {
	double *x, *dy;
	int64_t ny;
	int64_t *src;   /* per y element, up to 8 sources (-1: none) */
	double *w;
};

static double lin_loss(void *p)
{
	struct lin_ctx *c = p;
	double s = 0;

	for (int64_t i = 0; i < c->ny; i++)
		for (int k = 0; k < 8; k++)
			if (c->src[i * 8 + k] >= 0)
				s += c->dy[i] * c->w[i * 8 + k] * c->x[c->src[i * 8 + k]];
	return s;
}

static struct lin_ctx lin_new(const struct hp_tensor *x, const struct hp_tensor *dy)
{
	struct lin_ctx c = { dbl(x), dbl(dy), numel(dy), NULL, NULL };

	c.src = malloc((size_t)c.ny * 8 * sizeof *c.src);
	c.w = calloc((size_t)c.ny * 8, sizeof *c.w);
	for (int64_t i = 0; i < c.ny * 8; i++)
		c.src[i] = -1;
	return c;
}

static void lin_free(struct lin_ctx *c)
{
	free(c->x);
	free(c->dy);
	free(c->src);
	free(c->w);
}

static void lin_set(struct lin_ctx *c, int64_t i, int k, int64_t src, double w)
{
	c->src[i * 8 + k] = src;
	c->w[i * 8 + k] = w;
}

/* TransposeGrad runs Transpose's plan under the inverse permutation: the
 * tiled 2-D case (sides not multiples of the 32-wide tile), the batched
 * 2-D case and the copy-table case, each element checked exactly. */
static void test_transpose_grad_paths(void **state)
{
	static const struct { int r; int64_t dims[3], perm[3]; } cs[] = {
		{ 2, { 37, 70 }, { 1, 0 } }, { 3, { 3, 33, 65 }, { 0, 2, 1 } }, { 3, { 5, 7, 9 }, { 2, 0, 1 } },
	};

	(void)state;
	for (size_t k = 0; k < sizeof cs / sizeof cs[0]; k++) {
		int r = cs[k].r;
		int64_t ydims[3], xst[3] = { 0 }, n = 1;
		for (int i = 0; i < r; i++) {
			ydims[i] = cs[k].dims[cs[k].perm[i]];
			n *= cs[k].dims[i];
		}
		xst[r - 1] = 1;
		for (int i = r - 2; i >= 0; i--)
			xst[i] = xst[i + 1] * cs[k].dims[i + 1];
		struct hp_tensor dy = rnd(r == 2 ? T(2, ydims[0], ydims[1]) : T(3, ydims[0], ydims[1], ydims[2]), 92 + (int)k,
					  -1, 1), out;
		struct hp_attr a[1] = { kt_ints("perm", r, cs[k].perm) };
		run("TransposeGrad", 1, &dy, 1, a, 1, &out);
		const float *d = dy.data, *o = out.data;
		for (int64_t i = 0; i < n; i++) { /* dy's element i at y index (i0, i1, i2) is x[perm-mapped] */
			int64_t rem = i, off = 0;
			for (int j = r - 1; j >= 0; j--) {
				off += rem % ydims[j] * xst[cs[k].perm[j]];
				rem /= ydims[j];
			}
			assert_true(o[off] == d[i]);
		}
		for (int i = 0; i < r; i++)
			assert_int_equal(out.shape.dims[i], cs[k].dims[i]);
		hp_tensor_free(&out);
		hp_tensor_free(&dy);
	}
}

static void test_transpose_reshape_grad(void **state)
{
	int64_t perm[4] = { 2, 0, 3, 1 }, xs[4] = { 2, 3, 4, 5 };
	struct hp_tensor x = rnd(T(4, 2, 3, 4, 5), 90, -1, 1), dy = rnd(T(4, 4, 2, 5, 3), 91, -1, 1), out;
	struct lin_ctx c = lin_new(&x, &dy);
	struct hp_attr a[1] = { kt_ints("perm", 4, perm) };

	(void)state;
	for (int64_t i = 0; i < 120; i++) { /* y[a,b,c,d] = x[b,d,a,c] */
		int64_t y0 = i / 30, y1 = i / 15 % 2, y2 = i / 3 % 5, y3 = i % 3;
		lin_set(&c, i, 0, ((y1 * 3 + y3) * 4 + y0) * 5 + y2, 1);
	}
	run("TransposeGrad", 1, &dy, 1, a, 1, &out);
	fd_check(lin_loss, &c, c.x, &out, 1e-6, "Transpose dX");
	hp_tensor_free(&out);
	a[0] = kt_ints("shape", 4, xs);
	run("ReshapeGrad", 1, &dy, 1, a, 1, &out);
	assert_int_equal(out.shape.rank, 4);
	assert_int_equal(out.shape.dims[3], 5);
	assert_memory_equal(out.data, dy.data, 120 * sizeof(float));
	hp_tensor_free(&out);
	lin_free(&c);
	hp_tensor_free(&x);
	hp_tensor_free(&dy);
}

static void test_concat_split_grad(void **state)
{
	int64_t sizes[3] = { 1, 3, 2 }, xs[3] = { 2, 6, 3 };
	struct hp_tensor dy = rnd(T(3, 2, 6, 3), 100, -1, 1), out[3], whole;
	struct hp_attr a[3] = { kt_int("axis", -2), kt_ints("sizes", 3, sizes), kt_ints("x_shape", 3, xs) };
	const float *y = dy.data;

	(void)state;
	run("ConcatGrad", 1, &dy, 2, a, 3, out);
	for (int p = 0, off = 0; p < 3; off += (int)sizes[p], p++)
		for (int b = 0; b < 2; b++)
			for (int j = 0; j < sizes[p]; j++)
				for (int k = 0; k < 3; k++)
					assert_true(((float *)out[p].data)[(b * sizes[p] + j) * 3 + k] == y[(b * 6 + off + j) * 3 + k]);
	hp_tensor_free(&out[1]);
	out[1] = (struct hp_tensor){ .dtype = HP_F32 }; /* omitted piece: zeros */
	run("SplitGrad", 3, out, 3, a, 1, &whole);
	for (int b = 0; b < 2; b++)
		for (int j = 0; j < 6; j++)
			for (int k = 0; k < 3; k++) {
				float w = ((float *)whole.data)[(b * 6 + j) * 3 + k];
				assert_true(j >= 1 && j < 4 ? w == 0.0f : w == y[(b * 6 + j) * 3 + k]);
			}
	hp_tensor_free(&out[0]);
	hp_tensor_free(&out[2]);
	hp_tensor_free(&whole);
	hp_tensor_free(&dy);
}

static void test_slice_grad(void **state)
{
	/* x [5, 7]: axis 1 from 6 down to 1 step -2 (6, 4, 2), axis 0 from 1 to end (1..4) */
	int64_t xs[2] = { 5, 7 }, st[2] = { -1, 1 }, en[2] = { 0, 1000 }, ax[2] = { 1, 0 }, sp[2] = { -2, 1 };
	struct hp_tensor x = rnd(T(2, 5, 7), 110, -1, 1), dy = rnd(T(2, 4, 3), 111, -1, 1), out;
	struct hp_attr a[5] = { kt_ints("x_shape", 2, xs), kt_ints("starts", 2, st), kt_ints("ends", 2, en),
				kt_ints("axes", 2, ax), kt_ints("steps", 2, sp) };
	struct lin_ctx c = lin_new(&x, &dy);

	(void)state;
	for (int i = 0; i < 4; i++)
		for (int j = 0; j < 3; j++)
			lin_set(&c, i * 3 + j, 0, (i + 1) * 7 + (6 - 2 * j), 1);
	run("SliceGrad", 1, &dy, 5, a, 1, &out);
	fd_check(lin_loss, &c, c.x, &out, 1e-6, "Slice dX");
	hp_tensor_free(&out);
	lin_free(&c);
	hp_tensor_free(&x);
	hp_tensor_free(&dy);
}

/* Row bands (contiguous runs) against a naive scatter: x [2, 3, 6, 5]
 * rows 1..3 of axis 2 (runs of a plane's rows), then axis 3 cut too
 * (runs of one row's columns) and axis 1 whole. */
static void test_slice_grad_runs(void **state)
{
	static const int64_t xs[4] = { 2, 3, 6, 5 };
	static const int64_t cases[2][3][2] = { { { 2, 1 }, { 4, 4 }, { 3, 0 } }, { { 2, 1 }, { 4, 4 }, { 3, 1 } } };
	(void)state;
	for (int k = 0; k < 2; k++) {
		int64_t st[2] = { cases[k][0][1], cases[k][2][1] }, en[2] = { cases[k][1][0], 5 - (k == 1) };
		int64_t ax[2] = { 2, 3 }, h = en[0] - st[0], w = en[1] - st[1];
		struct hp_tensor dy = rnd(T(4, 2, 3, h, w), 130 + k, -1, 1), out;
		struct hp_attr a[4] = { kt_ints("x_shape", 4, xs), kt_ints("starts", 2, st), kt_ints("ends", 2, en),
					kt_ints("axes", 2, ax) };
		run("SliceGrad", 1, &dy, 4, a, 1, &out);
		const float *o = out.data, *d = dy.data;
		for (int64_t i = 0; i < 2 * 3 * 6 * 5; i++) {
			int64_t c = i % 5, r = i / 5 % 6, pl = i / 30, in = r >= st[0] && r < en[0] && c >= st[1] && c < en[1];
			float want = in ? d[(pl * h + r - st[0]) * w + c - st[1]] : 0.0f;
			assert_true(o[i] == want);
		}
		hp_tensor_free(&out);
		hp_tensor_free(&dy);
	}
}

static void test_gather_grad(void **state)
{
	int64_t xs[3] = { 2, 5, 3 }, id[2] = { 2, 2 };
	struct hp_tensor x = rnd(T(3, 2, 5, 3), 120, -1, 1), dy = rnd(T(4, 2, 2, 2, 3), 121, -1, 1), out;
	struct hp_tensor ix = kt_tensor(HP_I64, 2, id);
	int64_t idx[4] = { 1, -1, 4, 1 }; /* repeated and negative indices accumulate */
	struct hp_attr a[2] = { kt_int("axis", 1), kt_ints("x_shape", 3, xs) };
	struct lin_ctx c = lin_new(&x, &dy);

	(void)state;
	memcpy(ix.data, idx, sizeof idx);
	for (int o = 0; o < 2; o++)
		for (int j = 0; j < 4; j++)
			for (int i = 0; i < 3; i++)
				lin_set(&c, (o * 4 + j) * 3 + i, 0, (o * 5 + (idx[j] + 5) % 5) * 3 + i, 1);
	struct hp_tensor in[2] = { dy, ix };
	run("GatherGrad", 2, in, 2, a, 1, &out);
	fd_check(lin_loss, &c, c.x, &out, 1e-6, "Gather dX");
	hp_tensor_free(&out);
	lin_free(&c);
	hp_tensor_free(&x);
	hp_tensor_free(&dy);
	hp_tensor_free(&ix);
}

static void test_reduce_grad(void **state)
{
	int64_t xs[3] = { 2, 3, 4 }, axes[2] = { 0, -1 };
	struct hp_tensor x = rnd(T(3, 2, 3, 4), 130, -1, 1), dy = rnd(T(1, 3), 131, -1, 1), out;
	struct hp_tensor s = rnd(T(0), 132, -1, 1);
	struct hp_attr a[3] = { kt_ints("x_shape", 3, xs), kt_float("scale", 0.125f), kt_ints("axes", 2, axes) };
	struct lin_ctx c = lin_new(&x, &dy), c2 = lin_new(&x, &s);

	(void)state;
	for (int j = 0; j < 3; j++) /* y[j] = mean over i, k of x[i, j, k] */
		for (int q = 0; q < 8; q++)
			lin_set(&c, j, q, ((q / 4) * 3 + j) * 4 + q % 4, 0.125);
	run("ReduceGrad", 1, &dy, 3, a, 1, &out);
	fd_check(lin_loss, &c, c.x, &out, 1e-6, "ReduceMean dX");
	hp_tensor_free(&out);
	/* no axes: all of them (a scalar dY), here scaled as a mean of 24 */
	a[1] = kt_float("scale", 1.0f / 24);
	run("ReduceGrad", 1, &s, 2, a, 1, &out);
	for (int i = 0; i < 24; i++)
		assert_true(fabs(((float *)out.data)[i] - *(float *)s.data / 24) < 1e-7);
	hp_tensor_free(&out);
	hp_tensor_free(&s);
	lin_free(&c);
	lin_free(&c2);
	hp_tensor_free(&x);
	hp_tensor_free(&dy);
}

/* Resize forward (naive, per the ONNX formulas) as a linear map. */
static double rz_src(const char *ctm, int64_t o, double scale, int64_t in, int64_t out)
{
	if (!strcmp(ctm, "asymmetric"))
		return (double)o / scale;
	if (!strcmp(ctm, "align_corners"))
		return out > 1 ? (double)o * (double)(in - 1) / (double)(out - 1) : 0;
	return ((double)o + 0.5) / scale - 0.5;
}

static void rz_taps(const char *mode, const char *ctm, const char *nm, int64_t o, double scale, int64_t in,
		    int64_t out, int64_t *i, double *w)
{
	double x = rz_src(ctm, o, scale, in, out);

	if (!strcmp(mode, "nearest")) {
		double r = !strcmp(nm, "floor") ? floor(x) : x - floor(x) == 0.5 ? floor(x) : round(x);
		i[0] = i[1] = r < 0 ? 0 : r > in - 1 ? in - 1 : (int64_t)r;
		w[0] = 1;
		w[1] = 0;
		return;
	}
	x = fmin(fmax(x, 0), (double)(in - 1));
	i[0] = (int64_t)floor(x);
	i[1] = i[0] + 1 < in ? i[0] + 1 : in - 1;
	w[1] = x - (double)i[0];
	w[0] = 1 - w[1];
}

static void rz_case(const char *mode, const char *ctm, const char *nm, int oh, int ow)
{
	int64_t xs[4] = { 1, 2, 3, 4 };
	struct hp_tensor x = rnd(T(4, 1, 2, 3, 4), 140, -1, 1), dy = rnd(T(4, 1, 2, oh, ow), 141, -1, 1), out;
	struct hp_attr a[4] = { kt_ints("x_shape", 4, xs), kt_string("mode", mode),
				kt_string("coordinate_transformation_mode", ctm), kt_string("nearest_mode", nm) };
	struct lin_ctx c = lin_new(&x, &dy);
	char what[96];

	for (int p = 0; p < 2; p++)
		for (int h = 0; h < oh; h++)
			for (int w = 0; w < ow; w++) {
				int64_t ih[2], iw[2];
				double wh[2], ww[2];
				rz_taps(mode, ctm, nm, h, (double)oh / 3, 3, oh, ih, wh);
				rz_taps(mode, ctm, nm, w, (double)ow / 4, 4, ow, iw, ww);
				for (int k = 0; k < 4; k++)
					lin_set(&c, (p * oh + h) * ow + w, k, (p * 3 + ih[k >> 1]) * 4 + iw[k & 1],
						wh[k >> 1] * ww[k & 1]);
			}
	run("ResizeGrad", 1, &dy, 4, a, 1, &out);
	snprintf(what, sizeof what, "Resize %s %s dX", mode, ctm);
	fd_check(lin_loss, &c, c.x, &out, 1e-6, what);
	hp_tensor_free(&out);
	lin_free(&c);
	hp_tensor_free(&x);
	hp_tensor_free(&dy);
}

static void test_resize_grad(void **state)
{
	(void)state;
	rz_case("nearest", "asymmetric", "floor", 6, 8);
	rz_case("nearest", "half_pixel", "round_prefer_floor", 5, 7);
	rz_case("linear", "half_pixel", "", 6, 8);
	rz_case("linear", "align_corners", "", 5, 9);
	rz_case("linear", "pytorch_half_pixel", "", 7, 3);
}

/* ---- losses ------------------------------------------------------------ */

struct ce_ctx {
	double *x;
	const int64_t *lab;
	int64_t n, c, inner, ignore;
};

static double ce_loss(void *p)
{
	struct ce_ctx *c = p;
	double s = 0;
	int64_t cnt = 0;

	for (int64_t b = 0; b < c->n; b++)
		for (int64_t i = 0; i < c->inner; i++) {
			int64_t l = c->lab[b * c->inner + i];
			double z = 0;
			if (l == c->ignore)
				continue;
			for (int64_t k = 0; k < c->c; k++)
				z += exp(c->x[(b * c->c + k) * c->inner + i]);
			s += log(z) - c->x[(b * c->c + l) * c->inner + i];
			cnt++;
		}
	return s / (double)cnt;
}

static void test_cross_entropy(void **state)
{
	int64_t ld[2] = { 3, 4 }, one[1] = { 1 };
	struct hp_tensor in[3], out, g;
	int64_t labels[12] = { 0, 4, 2, -100, 1, 1, 3, 0, 4, 2, -100, 3 };
	struct ce_ctx c;

	(void)state;
	in[0] = kt_tensor(HP_F32, 0, one);
	*(float *)in[0].data = 1.0f;
	in[1] = rnd(T(3, 3, 5, 4), 150, -3, 3);
	in[2] = kt_tensor(HP_I64, 2, ld);
	memcpy(in[2].data, labels, sizeof labels);
	c = (struct ce_ctx){ dbl(&in[1]), labels, 3, 5, 4, -100 };
	run("SoftmaxCrossEntropy", 2, in + 1, 0, NULL, 1, &out);
	double want = ce_loss(&c);
	assert_true(fabs(*(float *)out.data - want) < 1e-5 * fmax(1, fabs(want)));
	run("SoftmaxCrossEntropyGrad", 3, in, 0, NULL, 1, &g);
	fd_check(ce_loss, &c, c.x, &g, 1e-5, "SoftmaxCrossEntropy dLogits");
	labels[5] = 7; /* out of range: a data error naming the node */
	memcpy(in[2].data, labels, sizeof labels);
	struct kt_case kc = { .domain = D, .op = "SoftmaxCrossEntropy", .nin = 2, .in = in + 1, .nout = 1 };
	struct hp_tensor bad;
	assert_int_equal(kt_run(&kc, &bad), HP_EDATA);
	assert_non_null(strstr(hp_errmsg(), "label 7"));
	free(c.x);
	hp_tensor_free(&out);
	hp_tensor_free(&g);
	free_all(in, 3);
}

/* The loss and its gradient again on a pool of 2: bitwise the same. */
static void ce_pool_same(const struct hp_tensor *in, const struct hp_tensor *out, const struct hp_tensor *g)
{
	struct hp_pool *pool;
	struct hp_tensor out2, g2;

	assert_int_equal(hp_pool_create(2, &pool), 0);
	kt_pool = pool;
	run("SoftmaxCrossEntropy", 2, in + 1, 0, NULL, 1, &out2);
	run("SoftmaxCrossEntropyGrad", 3, in, 0, NULL, 1, &g2);
	kt_pool = NULL;
	assert_memory_equal(out->data, out2.data, sizeof(float));
	assert_memory_equal(g->data, g2.data, (size_t)numel(g) * sizeof(float));
	hp_tensor_free(&out2);
	hp_tensor_free(&g2);
	hp_pool_destroy(pool);
}

/* The blocked paths over a wide vocabulary: positions along inner (more
 * than a block of them, ignored labels among them) and rows of contiguous
 * classes (inner 1): the loss and each dLogit against double loops, and
 * on two threads bitwise one. */
static void ce_wide_case(int64_t n, int64_t classes, int64_t inner, unsigned seed)
{
	int64_t xd[3] = { n, classes, inner }, ld[2] = { n, inner }, one[1] = { 1 }, cnt = 0;
	struct hp_tensor in[3], out, g;
	double sum = 0, scale;

	in[0] = kt_tensor(HP_F32, 0, one);
	*(float *)in[0].data = 0.75f;
	in[1] = kt_tensor(HP_F32, inner > 1 ? 3 : 2, xd);
	kt_fill_random(&in[1], seed, -8, 8);
	in[2] = kt_tensor(HP_I64, inner > 1 ? 2 : 1, ld);
	int64_t *lab = in[2].data, np = n * inner;
	const float *x = in[1].data;
	for (int64_t p = 0; p < np; p++)
		lab[p] = p % 7 == 3 ? -100 : (p * 37 + seed) % classes;
	run("SoftmaxCrossEntropy", 2, in + 1, 0, NULL, 1, &out);
	run("SoftmaxCrossEntropyGrad", 3, in, 0, NULL, 1, &g);
	ce_pool_same(in, &out, &g);
	double *lse = calloc((size_t)np, sizeof *lse);
	for (int64_t p = 0; p < np; p++) {
		int64_t o = p / inner, i = p % inner;
		double m = -INFINITY, z = 0;
		for (int64_t c = 0; c < classes; c++)
			m = fmax(m, x[(o * classes + c) * inner + i]);
		for (int64_t c = 0; c < classes; c++)
			z += exp(x[(o * classes + c) * inner + i] - m);
		lse[p] = m + log(z);
		if (lab[p] != -100)
			sum += lse[p] - x[(o * classes + lab[p]) * inner + i], cnt++;
	}
	assert_true(fabs(*(float *)out.data - sum / cnt) <= 1e-6 * fabs(sum / cnt));
	scale = 0.75 / cnt;
	for (int64_t k = 0; k < n * classes * inner; k++) {
		int64_t o = k / (classes * inner), c = k / inner % classes, i = k % inner, p = o * inner + i;
		double want = lab[p] == -100 ? 0 : scale * (exp(x[k] - lse[p]) - (c == lab[p]));
		if (!(fabs(((float *)g.data)[k] - want) <= 1e-6 * scale))
			fail_msg("SoftmaxCrossEntropyGrad [%lld, %lld, %lld] at %lld: got %.9g, want %.9g", (long long)n,
				 (long long)classes, (long long)inner, (long long)k, ((float *)g.data)[k], want);
	}
	free(lse);
	hp_tensor_free(&out);
	hp_tensor_free(&g);
	free_all(in, 3);
}

static void test_cross_entropy_wide(void **state)
{
	(void)state;
	ce_wide_case(3, 300, 70, 1);  /* a GPT's [batch, vocab, tokens] */
	ce_wide_case(50, 130, 1, 2);  /* [rows, classes] */
	ce_wide_case(300, 130, 1, 4); /* the same above the pool's threshold */
	ce_wide_case(2, 3, 5, 3);
}

struct mse_ctx {
	double *p, *t;
	int64_t n;
};

static double mse_loss(void *p)
{
	struct mse_ctx *c = p;
	double s = 0;

	for (int64_t i = 0; i < c->n; i++)
		s += (c->p[i] - c->t[i]) * (c->p[i] - c->t[i]);
	return s / (double)c->n;
}

static void test_mse(void **state)
{
	int64_t one[1] = { 1 };
	struct hp_tensor in[3] = { kt_tensor(HP_F32, 0, one), rnd(T(2, 4, 5), 160, -1, 1), rnd(T(2, 4, 5), 161, -1, 1) };
	struct hp_tensor out, g;
	struct mse_ctx c = { dbl(&in[1]), dbl(&in[2]), 20 };

	(void)state;
	*(float *)in[0].data = 0.5f; /* a non-unit upstream gradient scales the result */
	run("MSELoss", 2, in + 1, 0, NULL, 1, &out);
	assert_true(fabs(*(float *)out.data - mse_loss(&c)) < 1e-6);
	run("MSELossGrad", 3, in, 0, NULL, 1, &g);
	for (int i = 0; i < 20; i++)
		((float *)g.data)[i] *= 2; /* compare d(0.5 L) * 2 with dL */
	fd_check(mse_loss, &c, c.p, &g, 1e-5, "MSE dPred");
	free(c.p);
	free(c.t);
	hp_tensor_free(&out);
	hp_tensor_free(&g);
	free_all(in, 3);
}

static void test_grad_sum(void **state)
{
	struct hp_tensor in[3] = { rnd(T(2, 3, 4), 170, -1, 1), rnd(T(2, 3, 4), 171, -1, 1), rnd(T(2, 3, 4), 172, -1, 1) };
	struct hp_tensor out;
	double want[12];

	(void)state;
	for (int i = 0; i < 12; i++)
		want[i] = (double)((float *)in[0].data)[i] + ((float *)in[1].data)[i] + ((float *)in[2].data)[i];
	run("GradSum", 3, in, 0, NULL, 1, &out);
	close_to(&out, want, 1e-6, "GradSum");
	hp_tensor_free(&out);
	free_all(in, 3);
}

/* ---- optimizers: several steps against the torch.optim docs ------------ */

static void test_sgd(void **state)
{
	(void)state;
	for (int t = 0; t < 4; t++) {
		double lr = 0.1, mu = t ? 0.9 : 0, wd = t >= 2 ? 0.01 : 0;
		int nesterov = t == 3, nst = mu != 0;
		struct hp_tensor w = rnd(T(1, 10), 180, -1, 1), b = T(1, 10), out[2];
		double rw[10], rb[10] = { 0 };
		struct hp_attr a[4] = { kt_float("lr", (float)lr), kt_float("momentum", (float)mu),
					kt_float("weight_decay", (float)wd), kt_int("nesterov", nesterov) };
		for (int i = 0; i < 10; i++)
			rw[i] = ((float *)w.data)[i];
		for (int step = 1; step <= 4; step++) {
			struct hp_tensor gr = rnd(T(1, 10), 190 + (unsigned)step, -1, 1);
			struct hp_tensor in[3] = { w, gr, b };
			for (int i = 0; i < 10; i++) { /* torch.optim.SGD, algorithm box */
				double g = ((float *)gr.data)[i] + wd * rw[i];
				if (mu != 0) {
					rb[i] = step > 1 ? mu * rb[i] + g : g;
					g = nesterov ? g + mu * rb[i] : rb[i];
				}
				rw[i] -= lr * g;
			}
			run("SGDUpdate", 2 + nst, in, 4, a, 1 + nst, out);
			close_to(&out[0], rw, 1e-6, "SGD param");
			if (nst)
				close_to(&out[1], rb, 1e-6, "SGD momentum buffer");
			hp_tensor_free(&w);
			w = out[0];
			if (nst) {
				hp_tensor_free(&b);
				b = out[1];
			}
			hp_tensor_free(&gr);
		}
		hp_tensor_free(&w);
		hp_tensor_free(&b);
	}
}

static void test_adam(void **state)
{
	(void)state;
	for (int t = 0; t < 3; t++) {
		int decoupled = t == 2;
		double lr = 0.01, b1 = 0.8, b2 = 0.95, eps = 1e-6, wd = t ? 0.05 : 0;
		int64_t one[1] = { 1 };
		struct hp_tensor w = rnd(T(1, 10), 200, -1, 1), m = T(1, 10), v = T(1, 10), s = kt_tensor(HP_I64, 0, one);
		struct hp_tensor out[3];
		double rw[10], rm[10] = { 0 }, rv[10] = { 0 };
		struct hp_attr a[6] = { kt_float("lr", (float)lr), kt_float("beta1", (float)b1), kt_float("beta2", (float)b2),
					kt_float("epsilon", (float)eps), kt_float("weight_decay", (float)wd),
					kt_int("decoupled", decoupled) };
		for (int i = 0; i < 10; i++)
			rw[i] = ((float *)w.data)[i];
		for (int step = 1; step <= 5; step++) {
			struct hp_tensor gr = rnd(T(1, 10), 210 + (unsigned)step, -1, 1);
			struct hp_tensor in[5] = { w, gr, m, v, s };
			*(int64_t *)s.data = step;
			for (int i = 0; i < 10; i++) { /* torch.optim.Adam / AdamW, algorithm boxes */
				double g = ((float *)gr.data)[i];
				if (decoupled)
					rw[i] *= 1 - lr * wd;
				else
					g += wd * rw[i];
				rm[i] = b1 * rm[i] + (1 - b1) * g;
				rv[i] = b2 * rv[i] + (1 - b2) * g * g;
				double mh = rm[i] / (1 - pow(b1, step)), vh = rv[i] / (1 - pow(b2, step));
				rw[i] -= lr * mh / (sqrt(vh) + eps);
			}
			run("AdamUpdate", 5, in, 6, a, 3, out);
			close_to(&out[0], rw, 1e-5, decoupled ? "AdamW param" : "Adam param");
			close_to(&out[1], rm, 1e-6, "Adam exp_avg");
			close_to(&out[2], rv, 1e-6, "Adam exp_avg_sq");
			hp_tensor_free(&w);
			hp_tensor_free(&m);
			hp_tensor_free(&v);
			w = out[0];
			m = out[1];
			v = out[2];
			hp_tensor_free(&gr);
		}
		hp_tensor_free(&w);
		hp_tensor_free(&m);
		hp_tensor_free(&v);
		hp_tensor_free(&s);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_unary_grad),
		cmocka_unit_test(test_binary_grad),
		cmocka_unit_test(test_where_grad),
		cmocka_unit_test(test_dropout),
		cmocka_unit_test(test_matmul_grad),
		cmocka_unit_test(test_matmul_grad_pool),
		cmocka_unit_test(test_gemm_grad),
		cmocka_unit_test(test_conv_grad),
		cmocka_unit_test(test_conv_grad_slab),
		cmocka_unit_test(test_conv_grad_grp),
		cmocka_unit_test(test_conv_grad_kxk), cmocka_unit_test(test_conv_grad_kxk_grp),
		cmocka_unit_test(test_conv_grad_lean),
		cmocka_unit_test(test_convt_grad_items),
		cmocka_unit_test(test_conv_grad_items),
		cmocka_unit_test(test_conv_grad_phase),
		cmocka_unit_test(test_conv_grad_pw),
		cmocka_unit_test(test_conv_grad_tiny), cmocka_unit_test(test_conv_grad_grp_colane),
		cmocka_unit_test(test_conv_grad_filter_grp),
		cmocka_unit_test(test_pool_grad),
		cmocka_unit_test(test_batchnorm),
		cmocka_unit_test(test_batchnorm_sums),
		cmocka_unit_test(test_layernorm_grad),
		cmocka_unit_test(test_layernorm_grad_pool),
		cmocka_unit_test(test_softmax_grad),
		cmocka_unit_test(test_softmax_grad_rows),
		cmocka_unit_test(test_transpose_reshape_grad),
		cmocka_unit_test(test_transpose_grad_paths),
		cmocka_unit_test(test_concat_split_grad),
		cmocka_unit_test(test_slice_grad),
		cmocka_unit_test(test_slice_grad_runs),
		cmocka_unit_test(test_gather_grad),
		cmocka_unit_test(test_reduce_grad),
		cmocka_unit_test(test_resize_grad),
		cmocka_unit_test(test_cross_entropy),
		cmocka_unit_test(test_cross_entropy_wide),
		cmocka_unit_test(test_mse),
		cmocka_unit_test(test_grad_sum),
		cmocka_unit_test(test_sgd),
		cmocka_unit_test(test_adam),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
