/* Normalizations against double references written from the ONNX formulas:
 * BatchNormalization (inference over 2-D..5-D, training_mode=1 at opset 15,
 * the 5-output training form of opset 9), LayerNormalization (axes, B
 * omitted, Mean/InvStdDev outputs, broadcast Scale), InstanceNormalization,
 * LpNormalization, thread reproducibility and errors. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "hpdlf/error.h"
#include "tests/kernels/harness.h"

static struct hp_pool *pool2;

static float f(const struct hp_tensor *t, int64_t i)
{
	return ((const float *)t->data)[i];
}

static double max_err(const struct hp_tensor *y, const double *want, int64_t n)
{
	double err = 0, scale = 1;

	assert_int_equal(hp_shape_numel(&y->shape), n);
	for (int64_t i = 0; i < n; i++) {
		double e = fabs(f(y, i) - want[i]);
		err = e > err || isnan(e) ? e : err;
		scale = fmax(scale, fabs(want[i]));
	}
	return err / scale;
}

/* ---- BatchNormalization --------------------------------------------- */

struct bn_in {
	struct hp_tensor t[5];
	int64_t n, c, s;
};

static struct bn_in bn_inputs(int rank, const int64_t *dims, unsigned seed, float xlo, float xhi)
{
	struct bn_in b;

	b.t[0] = kt_tensor(HP_F32, rank, dims);
	for (int i = 1; i < 5; i++)
		b.t[i] = kt_tensor(HP_F32, 1, &dims[1]);
	kt_fill_random(&b.t[0], seed, xlo, xhi);
	kt_fill_random(&b.t[1], seed + 1, -2, 2);
	kt_fill_random(&b.t[2], seed + 2, -1, 1);
	kt_fill_random(&b.t[3], seed + 3, xlo, xhi);
	kt_fill_random(&b.t[4], seed + 4, 0.1f, 2);
	b.n = dims[0];
	b.c = dims[1];
	b.s = 1;
	for (int d = 2; d < rank; d++)
		b.s *= dims[d];
	return b;
}

static void bn_free(struct bn_in *b)
{
	for (int i = 0; i < 5; i++)
		hp_tensor_free(&b->t[i]);
}

static void test_bn_inference(void **state)
{
	struct { int rank; int64_t d[5]; float lo, hi; } cases[] = {
		{ 2, { 4, 3 }, -3, 3 }, { 4, { 2, 3, 4, 5 }, -3, 3 }, { 5, { 1, 4, 3, 3, 3 }, -3, 3 },
		{ 3, { 2, 5, 7 }, 999, 1001 }, /* large mean: no cancellation from folding */
		{ 4, { 4, 8, 64, 64 }, -3, 3 },
	};

	(void)state;
	for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++)
		for (int with_eps = 0; with_eps < 2; with_eps++) {
			struct bn_in b = bn_inputs(cases[k].rank, cases[k].d, (unsigned)k * 10, cases[k].lo, cases[k].hi);
			int64_t total = b.n * b.c * b.s;
			double *want = malloc((size_t)total * sizeof *want), eps = with_eps ? 1e-2 : 1e-5;
			struct hp_attr at = kt_float("epsilon", (float)eps);
			struct kt_case c = { .op = "BatchNormalization", .nin = 5, .in = b.t, .nattrs = with_eps,
					     .attrs = &at, .nout = 1, .const_mask = 0x1e };
			struct hp_tensor y, y2;
			for (int64_t i = 0; i < total; i++) {
				int64_t ch = i / b.s % b.c;
				want[i] = f(&b.t[1], ch) * ((double)f(&b.t[0], i) - f(&b.t[3], ch)) /
					  sqrt((double)f(&b.t[4], ch) + (float)eps) + f(&b.t[2], ch);
			}
			assert_int_equal(kt_run(&c, &y), 0);
			double err = max_err(&y, want, total);
			if (err > 1e-5)
				print_message("bn case %zu: err %g\n", k, err);
			assert_true(err <= 1e-5);
			c.pool = pool2;
			assert_int_equal(kt_run(&c, &y2), 0);
			assert_memory_equal(y.data, y2.data, hp_tensor_bytes(&y));
			hp_tensor_free(&y);
			hp_tensor_free(&y2);
			free(want);
			bn_free(&b);
		}
}

/* Batch statistics per channel (population variance), in double. */
static void bn_batch_stats(const struct bn_in *b, double *mean, double *var)
{
	for (int64_t c = 0; c < b->c; c++) {
		double s = 0, q = 0, cnt = (double)(b->n * b->s);
		for (int64_t n = 0; n < b->n; n++)
			for (int64_t i = 0; i < b->s; i++)
				s += f(&b->t[0], (n * b->c + c) * b->s + i);
		mean[c] = s / cnt;
		for (int64_t n = 0; n < b->n; n++)
			for (int64_t i = 0; i < b->s; i++) {
				double d = f(&b->t[0], (n * b->c + c) * b->s + i) - mean[c];
				q += d * d;
			}
		var[c] = q / cnt;
	}
}

static void bn_training_case(int opset, int nout)
{
	const int64_t dims[] = { 3, 4, 5, 6 };
	struct bn_in b = bn_inputs(4, dims, 77, -2, 4);
	int64_t total = b.n * b.c * b.s;
	double mean[4], var[4], *want = malloc((size_t)total * sizeof *want), mom = 0.8;
	struct hp_attr at[2] = { kt_float("momentum", (float)mom), kt_int("training_mode", 1) };
	struct kt_case c = { .op = "BatchNormalization", .nin = 5, .in = b.t, .nattrs = opset >= 14 ? 2 : 1,
			     .attrs = at, .nout = nout, .opset = opset, .pool = pool2 };
	struct hp_tensor y[5];

	bn_batch_stats(&b, mean, var);
	for (int64_t i = 0; i < total; i++) {
		int64_t ch = i / b.s % b.c;
		want[i] = f(&b.t[1], ch) * (f(&b.t[0], i) - mean[ch]) / sqrt(var[ch] + 1e-5) + f(&b.t[2], ch);
	}
	assert_int_equal(kt_run(&c, y), 0);
	assert_true(max_err(&y[0], want, total) <= 1e-5);
	for (int64_t ch = 0; ch < 4; ch++) {
		double rm = f(&b.t[3], ch) * mom + mean[ch] * (1 - mom), rv = f(&b.t[4], ch) * mom + var[ch] * (1 - mom);
		assert_true(fabs(f(&y[1], ch) - rm) <= 1e-5 * fmax(1, fabs(rm)));
		assert_true(fabs(f(&y[2], ch) - rv) <= 1e-5 * fmax(1, fabs(rv)));
		if (nout == 5) {
			assert_true(fabs(f(&y[3], ch) - mean[ch]) <= 1e-5 * fmax(1, fabs(mean[ch])));
			assert_true(fabs(f(&y[4], ch) - var[ch]) <= 1e-5 * fmax(1, fabs(var[ch])));
		}
	}
	for (int o = 0; o < nout; o++)
		hp_tensor_free(&y[o]);
	free(want);
	bn_free(&b);
}

static void test_bn_training(void **state)
{
	(void)state;
	bn_training_case(15, 3);
	bn_training_case(14, 3);
	bn_training_case(9, 5);
}

static void test_bn_errors(void **state)
{
	const int64_t dims[] = { 2, 3, 4 }, bad = 4;
	struct bn_in b = bn_inputs(3, dims, 1, -1, 1);
	struct kt_case c = { .op = "BatchNormalization", .nin = 5, .in = b.t, .nout = 3, .opset = 15 };
	struct hp_tensor y[3];

	(void)state;
	assert_int_equal(kt_run(&c, y), HP_EMODEL); /* extra outputs without training_mode */
	assert_non_null(strstr(hp_errmsg(), "node0"));
	hp_tensor_free(&b.t[4]);
	b.t[4] = kt_tensor(HP_F32, 1, &bad);
	c.nout = 1;
	assert_int_equal(kt_run(&c, y), HP_ESHAPE);
	bn_free(&b);
}

/* ---- LayerNormalization --------------------------------------------- */

static void ln_case(int rank, const int64_t *dims, int axis, int srank, const int64_t *sdims, int with_b, int nout)
{
	struct hp_tensor in[3] = { kt_tensor(HP_F32, rank, dims), kt_tensor(HP_F32, srank, sdims),
				   with_b ? kt_tensor(HP_F32, srank, sdims) : (struct hp_tensor){ 0 } }, y[3];
	int ax = axis < 0 ? axis + rank : axis;
	int64_t rows = 1, d = 1, total;
	struct hp_attr at[2] = { kt_int("axis", axis), kt_float("epsilon", 1e-3f) };
	struct kt_case c = { .op = "LayerNormalization", .nin = with_b ? 3 : 2, .in = in, .nattrs = 2, .attrs = at,
			     .nout = nout, .const_mask = 6 };

	for (int i = 0; i < rank; i++)
		*(i < ax ? &rows : &d) *= dims[i];
	total = rows * d;
	kt_fill_random(&in[0], (unsigned)(rank * 10 + ax), -3, 5);
	kt_fill_random(&in[1], 2, -2, 2);
	if (with_b)
		kt_fill_random(&in[2], 3, -1, 1);
	double *want = malloc((size_t)total * sizeof *want), *mean = malloc((size_t)rows * sizeof(double));
	double *inv = malloc((size_t)rows * sizeof(double));
	struct hp_shape ns = { .rank = rank - ax };
	memcpy(ns.dims, dims + ax, (size_t)ns.rank * sizeof *dims);
	for (int64_t r = 0; r < rows; r++) {
		double s = 0, q = 0;
		for (int64_t i = 0; i < d; i++)
			s += f(&in[0], r * d + i);
		mean[r] = s / (double)d;
		for (int64_t i = 0; i < d; i++)
			q += (f(&in[0], r * d + i) - mean[r]) * (f(&in[0], r * d + i) - mean[r]);
		inv[r] = 1 / sqrt(q / (double)d + (double)1e-3f);
		for (int64_t i = 0; i < d; i++) {
			/* broadcast Scale/B over the normalized dims, right-aligned */
			int64_t rem = i, off = 0, st = 1;
			for (int k = ns.rank - 1, sk = srank - 1; k >= 0; k--, sk--) {
				int64_t cc = rem % ns.dims[k];
				rem /= ns.dims[k];
				if (sk < 0)
					continue;
				if (sdims[sk] != 1)
					off += cc * st;
				st *= sdims[sk];
			}
			want[r * d + i] = (f(&in[0], r * d + i) - mean[r]) * inv[r] * f(&in[1], off) +
					  (with_b ? f(&in[2], off) : 0);
		}
	}
	assert_int_equal(kt_run(&c, y), 0);
	double err = max_err(&y[0], want, total);
	if (err > 1e-5)
		print_message("ln rank %d axis %d: err %g\n", rank, axis, err);
	assert_true(err <= 1e-5);
	for (int o = 1; o < nout; o++) {
		assert_int_equal(y[o].shape.rank, rank);
		for (int k = 0; k < rank; k++)
			assert_int_equal(y[o].shape.dims[k], k < ax ? dims[k] : 1);
		assert_true(max_err(&y[o], o == 1 ? mean : inv, rows) <= 1e-5);
	}
	for (int o = 0; o < nout; o++)
		hp_tensor_free(&y[o]);
	for (int i = 0; i < 3; i++)
		hp_tensor_free(&in[i]);
	free(want);
	free(mean);
	free(inv);
}

static void test_layernorm(void **state)
{
	const int64_t d3[] = { 2, 3, 8 }, s8[] = { 8 }, s38[] = { 3, 8 }, s31[] = { 3, 1 }, s18[] = { 1, 8 };
	const int64_t big[] = { 512, 768 }, s768[] = { 768 }, one[] = { 1 };

	(void)state;
	ln_case(3, d3, -1, 1, s8, 1, 3);
	ln_case(3, d3, -1, 1, s8, 0, 1);
	ln_case(3, d3, 2, 2, s18, 1, 2);   /* leading 1 before the axis */
	ln_case(3, d3, 1, 2, s38, 1, 3);
	ln_case(3, d3, 1, 2, s31, 1, 3);   /* broadcast over the last dim */
	ln_case(3, d3, 1, 1, s8, 0, 3);
	ln_case(3, d3, 0, 2, s38, 1, 3);
	ln_case(3, d3, -2, 1, one, 1, 1);
	ln_case(2, big, -1, 1, s768, 1, 3); /* BERT-sized rows, threads */
}

static void test_layernorm_threads(void **state)
{
	const int64_t d[] = { 300, 257 }, s[] = { 257 };
	struct hp_tensor in[3] = { kt_tensor(HP_F32, 2, d), kt_tensor(HP_F32, 1, s), kt_tensor(HP_F32, 1, s) }, y1, y2;
	struct kt_case c = { .op = "LayerNormalization", .nin = 3, .in = in, .nout = 1 };

	(void)state;
	for (int i = 0; i < 3; i++)
		kt_fill_random(&in[i], (unsigned)i + 40, -2, 2);
	assert_int_equal(kt_run(&c, &y1), 0);
	c.pool = pool2;
	assert_int_equal(kt_run(&c, &y2), 0);
	assert_memory_equal(y1.data, y2.data, hp_tensor_bytes(&y1));
	hp_tensor_free(&y2);
	/* B of a shape that does not broadcast to the normalized dims */
	hp_tensor_free(&in[2]);
	in[2] = kt_tensor(HP_F32, 1, d);
	assert_int_equal(kt_run(&c, &y2), HP_ESHAPE);
	assert_non_null(strstr(hp_errmsg(), "node0"));
	for (int i = 0; i < 3; i++)
		hp_tensor_free(&in[i]);
	hp_tensor_free(&y1);
	hp_tensor_free(&y2);
}

/* ---- InstanceNormalization, LpNormalization -------------------------- */

static void test_instancenorm(void **state)
{
	struct { int rank; int64_t d[4]; } cases[] = { { 4, { 2, 3, 4, 5 } }, { 3, { 1, 2, 7 } }, { 4, { 2, 4, 64, 64 } } };

	(void)state;
	for (size_t k = 0; k < 3; k++) {
		struct hp_tensor in[3] = { kt_tensor(HP_F32, cases[k].rank, cases[k].d),
					   kt_tensor(HP_F32, 1, &cases[k].d[1]), kt_tensor(HP_F32, 1, &cases[k].d[1]) }, y;
		int64_t nc = cases[k].d[0] * cases[k].d[1], s = hp_shape_numel(&in[0].shape) / nc;
		double *want = malloc((size_t)(nc * s) * sizeof *want);
		struct kt_case c = { .op = "InstanceNormalization", .nin = 3, .in = in, .nout = 1, .pool = pool2 };
		for (int i = 0; i < 3; i++)
			kt_fill_random(&in[i], (unsigned)(k * 3 + (size_t)i), -2, 3);
		for (int64_t u = 0; u < nc; u++) {
			double m = 0, v = 0;
			int64_t ch = u % cases[k].d[1];
			for (int64_t i = 0; i < s; i++)
				m += f(&in[0], u * s + i);
			m /= (double)s;
			for (int64_t i = 0; i < s; i++)
				v += (f(&in[0], u * s + i) - m) * (f(&in[0], u * s + i) - m);
			v /= (double)s;
			for (int64_t i = 0; i < s; i++)
				want[u * s + i] = f(&in[1], ch) * (f(&in[0], u * s + i) - m) / sqrt(v + 1e-5) + f(&in[2], ch);
		}
		assert_int_equal(kt_run(&c, &y), 0);
		assert_true(max_err(&y, want, nc * s) <= 1e-5);
		hp_tensor_free(&y);
		free(want);
		for (int i = 0; i < 3; i++)
			hp_tensor_free(&in[i]);
	}
}

static void test_lpnorm(void **state)
{
	const int64_t d[] = { 3, 4, 5 };

	(void)state;
	for (int p = 1; p <= 2; p++)
		for (int axis = -3; axis < 3; axis++) {
			struct hp_tensor x = kt_tensor(HP_F32, 3, d), y;
			struct hp_attr at[2] = { kt_int("p", p), kt_int("axis", axis) };
			struct kt_case c = { .op = "LpNormalization", .nin = 1, .in = &x, .nattrs = 2, .attrs = at, .nout = 1 };
			int ax = axis < 0 ? axis + 3 : axis;
			int64_t st = ax == 2 ? 1 : ax == 1 ? 5 : 20;
			double want[60];
			kt_fill_random(&x, (unsigned)(p * 10 + ax), -3, 3);
			for (int64_t i = 0; i < 60; i++) {
				int64_t base = i - (i / st % d[ax]) * st;
				double s = 0;
				for (int64_t k = 0; k < d[ax]; k++)
					s += p == 1 ? fabs(f(&x, base + k * st)) : (double)f(&x, base + k * st) * f(&x, base + k * st);
				want[i] = f(&x, i) / (p == 1 ? s : sqrt(s));
			}
			assert_int_equal(kt_run(&c, &y), 0);
			assert_true(max_err(&y, want, 60) <= 1e-6);
			hp_tensor_free(&y);
			hp_tensor_free(&x);
		}
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
		cmocka_unit_test(test_bn_inference),
		cmocka_unit_test(test_bn_training),
		cmocka_unit_test(test_bn_errors),
		cmocka_unit_test(test_layernorm),
		cmocka_unit_test(test_layernorm_threads),
		cmocka_unit_test(test_instancenorm),
		cmocka_unit_test(test_lpnorm),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
