/* The lazy GP of exec/tune_gp.h against references written here: its
 * factor grown a row at a time equals LAPACK's dpotrf of the whole kernel
 * matrix (built with this file's own Matern 5/2), its posterior equals a
 * naive O(n^3) one (Gauss-Jordan inverse), refits raise the likelihood;
 * and Bayesian optimisation through tune.h beats random search with the
 * same seeds on a 1-D objective. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hpdlf/error.h"
#include "exec/tune.h"
#include "exec/tune_gp.h"

extern void dpotrf_(const char *uplo, const int *n, double *a, const int *lda, int *info);

#define D 3

static uint64_t rs = 88172645463325252ull;

static double unit(void)
{
	rs ^= rs << 13, rs ^= rs >> 7, rs ^= rs << 17;
	return (double)(rs >> 11) / 9007199254740992.0;
}

/* Matern 5/2 written out again; dim 2 is categorical (index). */
static double matern(const double *a, const double *b, const double *ls, double sf2)
{
	double r2 = 0;

	for (int k = 0; k < D; k++) {
		double t = k == 2 ? (a[k] == b[k] ? 0.0 : 1.0) : a[k] - b[k];
		r2 += (t / ls[k]) * (t / ls[k]);
	}
	double r = sqrt(5 * r2);
	return sf2 * (1 + r + 5 * r2 / 3) * exp(-r);
}

static void random_point(double *x)
{
	x[0] = unit(), x[1] = unit(), x[2] = floor(unit() * 3);
}

/* Largest |L_gp - chol(K + noise I)| over the lower triangle. */
static double factor_error(const struct hp_gp *gp)
{
	int n = gp->n, info;
	double *a = malloc((size_t)n * n * sizeof *a), err = 0;

	for (int j = 0; j < n; j++)
		for (int i = 0; i < n; i++)
			a[i + j * n] = matern(gp->x + i * D, gp->x + j * D, gp->ls, gp->sf2) + (i == j ? gp->noise : 0);
	dpotrf_("L", &n, a, &n, &info);
	assert_int_equal(info, 0);
	for (int i = 0; i < n; i++)
		for (int j = 0; j <= i; j++)
			err = fmax(err, fabs(hp_gp_factor_at(gp, i, j) - a[i + j * n]));
	free(a);
	return err;
}

static void test_lazy_factor(void **state)
{
	static const unsigned char cat[D] = { 0, 0, 1 };
	double ls[D] = { 0.2, 0.5, 0.8 }, x[D];
	struct hp_gp gp;

	(void)state;
	assert_int_equal(hp_gp_init(&gp, D, cat), 0);
	assert_int_equal(hp_gp_set_hyper(&gp, ls, 1.7, 1e-3), 0);
	for (int i = 0; i < 150; i++) {
		random_point(x);
		assert_int_equal(hp_gp_add(&gp, x, sin(5 * x[0]) + x[1] * x[2]), 0);
		if (i == 9 || i == 70 || i == 149)
			assert_true(factor_error(&gp) < 1e-10);
	}
	/* New hyperparameters: a full refactor, then lazy rows again. */
	ls[0] = 0.05;
	assert_int_equal(hp_gp_set_hyper(&gp, ls, 0.6, 1e-5), 0);
	assert_true(factor_error(&gp) < 1e-10);
	for (int i = 0; i < 50; i++) {
		random_point(x);
		assert_int_equal(hp_gp_add(&gp, x, cos(3 * x[1])), 0);
	}
	assert_true(factor_error(&gp) < 1e-10);
	hp_gp_free(&gp);
}

/* A point added twice with almost no noise: K is singular; the GP raises
 * the noise and stays a valid factor of K + noise I. */
static void test_repeated_point(void **state)
{
	double ls[D] = { 0.3, 0.3, 1 }, x[D] = { 0.5, 0.5, 1 };
	struct hp_gp gp;

	(void)state;
	assert_int_equal(hp_gp_init(&gp, D, (const unsigned char[D]){ 0, 0, 1 }), 0);
	assert_int_equal(hp_gp_set_hyper(&gp, ls, 1, 1e-14), 0);
	for (int i = 0; i < 4; i++)
		assert_int_equal(hp_gp_add(&gp, x, 1.0 + i), 0);
	assert_true(gp.noise > 1e-14);
	assert_true(factor_error(&gp) < 1e-10);
	hp_gp_free(&gp);
}

/* Inverse of a (n x n) by Gauss-Jordan with partial pivoting. */
static void invert(double *a, double *inv, int n)
{
	for (int i = 0; i < n * n; i++)
		inv[i] = i % (n + 1) == 0;
	for (int c = 0; c < n; c++) {
		int p = c;
		for (int r = c + 1; r < n; r++)
			if (fabs(a[r * n + c]) > fabs(a[p * n + c]))
				p = r;
		for (int k = 0; k < n; k++) {
			double t = a[c * n + k];
			a[c * n + k] = a[p * n + k], a[p * n + k] = t;
			t = inv[c * n + k], inv[c * n + k] = inv[p * n + k], inv[p * n + k] = t;
		}
		double d = a[c * n + c];
		for (int k = 0; k < n; k++)
			a[c * n + k] /= d, inv[c * n + k] /= d;
		for (int r = 0; r < n; r++) {
			double f = a[r * n + c];
			if (r == c || f == 0)
				continue;
			for (int k = 0; k < n; k++)
				a[r * n + k] -= f * a[c * n + k], inv[r * n + k] -= f * inv[c * n + k];
		}
	}
}

/* Posterior of standardised targets (population sd), back in y's units. */
static void naive_posterior(const struct hp_gp *gp, const double *xs, double *mean, double *var)
{
	int n = gp->n;
	double *a = malloc((size_t)n * n * sizeof *a), *inv = malloc((size_t)n * n * sizeof *inv);
	double *k = malloc((size_t)n * sizeof *k), ym = 0, ss = 0;

	for (int i = 0; i < n; i++)
		ym += gp->y[i] / n;
	for (int i = 0; i < n; i++)
		ss += (gp->y[i] - ym) * (gp->y[i] - ym) / n;
	for (int i = 0; i < n; i++)
		for (int j = 0; j < n; j++)
			a[i * n + j] = matern(gp->x + i * D, gp->x + j * D, gp->ls, gp->sf2) + (i == j ? gp->noise : 0);
	invert(a, inv, n);
	for (int i = 0; i < n; i++)
		k[i] = matern(gp->x + i * D, xs, gp->ls, gp->sf2);
	*mean = ym, *var = matern(xs, xs, gp->ls, gp->sf2);
	for (int i = 0; i < n; i++)
		for (int j = 0; j < n; j++) {
			*mean += k[i] * inv[i * n + j] * (gp->y[j] - ym);
			*var -= k[i] * inv[i * n + j] * k[j];
		}
	*var *= ss;
	free(a);
	free(inv);
	free(k);
}

static void test_posterior(void **state)
{
	double ls[D] = { 0.25, 0.4, 0.7 }, x[D], xs[40 * D], mean[40], var[40];
	struct hp_gp gp;

	(void)state;
	assert_int_equal(hp_gp_init(&gp, D, (const unsigned char[D]){ 0, 0, 1 }), 0);
	assert_int_equal(hp_gp_set_hyper(&gp, ls, 1.3, 1e-2), 0);
	/* 300 points: more than one block of the batched solve. */
	for (int i = 0; i < 300; i++) {
		random_point(x);
		assert_int_equal(hp_gp_add(&gp, x, 3 + 2 * sin(4 * x[0]) * x[1] + x[2]), 0);
	}
	for (int c = 0; c < 40; c++)
		random_point(xs + c * D);
	memcpy(xs, gp.x + 17 * D, D * sizeof *xs); /* one at a data point */
	assert_int_equal(hp_gp_predict(&gp, 40, xs, mean, var), 0);
	for (int c = 0; c < 40; c++) {
		double m, v;
		naive_posterior(&gp, xs + c * D, &m, &v);
		assert_float_equal(mean[c], m, 1e-8 * (1 + fabs(m)));
		assert_float_equal(var[c], fmax(v, 0), 1e-8);
	}
	hp_gp_free(&gp);
}

/* A refit finds hyperparameters at least as likely as where it started,
 * on a function with a known short length scale, and refactors all data. */
static void test_fit(void **state)
{
	double ls[D] = { 2, 2, 2 }, x[D], before, after;
	struct hp_gp gp;

	(void)state;
	assert_int_equal(hp_gp_init(&gp, D, (const unsigned char[D]){ 0, 0, 1 }), 0);
	assert_int_equal(hp_gp_set_hyper(&gp, ls, 1, 1e-2), 0);
	for (int i = 0; i < 120; i++) {
		random_point(x);
		assert_int_equal(hp_gp_add(&gp, x, sin(12 * x[0])), 0);
	}
	assert_int_equal(hp_gp_lml(&gp, &before), 0);
	assert_int_equal(hp_gp_fit(&gp, 1000), 0);
	assert_int_equal(hp_gp_lml(&gp, &after), 0);
	assert_true(after > before + 1);
	assert_true(gp.ls[0] < 1 && gp.ls[1] > gp.ls[0]); /* x1 and x2 matter less */
	assert_true(factor_error(&gp) < 1e-10);
	hp_gp_free(&gp);
}

/* --- BO against random search ---------------------------------------- */

/* A shifted sine bowl on [0, 1]: local minima, one global. */
static double bowl(double x)
{
	return 4 * (x - 0.63) * (x - 0.63) + 0.3 * sin(25 * x);
}

#define CAP 120

/* Evaluations until one is within tol of the optimum (CAP if never). */
static int evaluations(const char *algo, int seed, double fstar, double tol)
{
	char text[512];
	struct hp_tune_spec *s;
	struct hp_tune *t;
	struct hp_tune_job j;
	int n = 0;

	snprintf(text, sizeof text,
		 "{\"space\": {\"x\": {\"uniform\": [0, 1]}}, \"objective\": {\"metric\": \"loss\"},"
		 " \"budget\": {\"min\": 1, \"max\": 1}, \"trials\": %d, \"algorithm\": \"%s\", \"seed\": %d}",
		 CAP, algo, seed);
	assert_int_equal(hp_tune_spec_parse(text, &s), 0);
	assert_int_equal(hp_tune_create(s, &t), 0);
	while (hp_tune_next(t, &j) == 1) {
		double f = bowl(strtod(j.flag_values[0], NULL));
		n++;
		assert_int_equal(hp_tune_report(t, j.trial, 1, f, 0), 0);
		if (f - fstar < tol)
			break;
	}
	hp_tune_free(t);
	hp_tune_spec_free(s);
	return n;
}

static void test_bo_vs_random(void **state)
{
	double fstar = INFINITY;
	int bo = 0, rnd = 0, seeds = 8;

	(void)state;
	for (int i = 0; i <= 1000000; i++)
		fstar = fmin(fstar, bowl(i / 1e6));
	for (int seed = 1; seed <= seeds; seed++) {
		int b = evaluations("bo", seed, fstar, 2e-3), r = evaluations("random", seed, fstar, 2e-3);
		print_message("seed %d: BO %d evaluations, random %d\n", seed, b, r);
		assert_true(b < CAP); /* BO always gets there */
		bo += b, rnd += r;
	}
	print_message("mean: BO %.1f, random %.1f\n", (double)bo / seeds, (double)rnd / seeds);
	assert_true(2 * bo < rnd);
}

/* Trials proposed while others have no result yet go elsewhere, not all
 * to where EI peaks. */
static void test_bo_pending(void **state)
{
	const char *text = "{\"space\": {\"x\": {\"uniform\": [0, 1]}}, \"objective\": {\"metric\": \"loss\"},"
			   " \"budget\": {\"min\": 1, \"max\": 1}, \"trials\": 20, \"algorithm\": \"bo\","
			   " \"seed\": 3, \"bo\": {\"initial\": 5}}";
	struct hp_tune_spec *s;
	struct hp_tune *t;
	struct hp_tune_job j;
	double x[4];

	(void)state;
	assert_int_equal(hp_tune_spec_parse(text, &s), 0);
	assert_int_equal(hp_tune_create(s, &t), 0);
	for (int i = 0; i < 5; i++) {
		assert_int_equal(hp_tune_next(t, &j), 1);
		assert_int_equal(hp_tune_report(t, j.trial, 1, bowl(strtod(j.flag_values[0], NULL)), 0), 0);
	}
	for (int i = 0; i < 4; i++) {
		assert_int_equal(hp_tune_next(t, &j), 1);
		x[i] = strtod(j.flag_values[0], NULL);
		for (int k = 0; k < i; k++)
			if (fabs(x[i] - x[k]) < 0.02)
				fail_msg("proposals %d and %d with no result between: x = %.4f and %.4f", k, i, x[k], x[i]);
	}
	hp_tune_free(t);
	hp_tune_spec_free(s);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_lazy_factor),
		cmocka_unit_test(test_repeated_point),
		cmocka_unit_test(test_posterior),
		cmocka_unit_test(test_fit),
		cmocka_unit_test(test_bo_vs_random),
		cmocka_unit_test(test_bo_pending),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
