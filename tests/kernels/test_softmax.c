/* Softmax, LogSoftmax and Hardmax against a double reference written
 * independently: opset 11 (2-D coercion) vs opset 13 (per axis), every axis
 * of a 4-D tensor, negative axes, column blocks wider than the kernel's,
 * large magnitudes (stability), ties in Hardmax, threads and errors. */
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

/* Reference: normalize over groups of elements that share every coordinate
 * outside the reduced dims [ax, ax_end). */
static void reference(const char *op, const struct hp_tensor *x, int ax, int ax_end, double *out)
{
	const struct hp_shape *s = &x->shape;
	int64_t outer = 1, len = 1, inner = 1;
	const float *v = x->data;

	for (int d = 0; d < s->rank; d++)
		*(d < ax ? &outer : d < ax_end ? &len : &inner) *= s->dims[d];
	for (int64_t o = 0; o < outer; o++)
		for (int64_t i = 0; i < inner; i++) {
			double m = -INFINITY, sum = 0;
			int64_t arg = 0;
#define AT(k) ((o * len + (k)) * inner + i)
			for (int64_t k = 0; k < len; k++)
				if (v[AT(k)] > m) {
					m = v[AT(k)];
					arg = k;
				}
			for (int64_t k = 0; k < len; k++)
				sum += exp((double)v[AT(k)] - m);
			for (int64_t k = 0; k < len; k++) {
				double e = exp((double)v[AT(k)] - m);
				if (!strcmp(op, "Softmax"))
					out[AT(k)] = e / sum;
				else if (!strcmp(op, "LogSoftmax"))
					out[AT(k)] = (double)v[AT(k)] - m - log(sum);
				else
					out[AT(k)] = k == arg;
			}
#undef AT
		}
}

static double rel_err(const struct hp_tensor *y, const double *want)
{
	double err = 0, scale = 1;
	int64_t n = hp_shape_numel(&y->shape);

	for (int64_t i = 0; i < n; i++) {
		double e = fabs(((const float *)y->data)[i] - want[i]);
		err = e > err || isnan(e) ? e : err;
		scale = fabs(want[i]) > scale ? fabs(want[i]) : scale;
	}
	return err / scale;
}

static int run(const char *op, int opset, const struct hp_tensor *x, int has_axis, int64_t axis,
	       struct hp_tensor *y, struct hp_pool *pool)
{
	struct hp_attr a = kt_int("axis", axis);
	struct kt_case c = { .op = op, .nin = 1, .in = x, .nattrs = has_axis, .attrs = &a, .nout = 1,
			     .pool = pool, .opset = opset };
	return kt_run(&c, y);
}

static void check(const char *op, int opset, const int64_t *dims, int rank, int has_axis, int64_t axis,
		  float lo, float hi)
{
	struct hp_tensor x = kt_tensor(HP_F32, rank, dims), y, y2;
	int64_t n = hp_shape_numel(&x.shape);
	double *want = malloc((size_t)n * sizeof *want), err;
	int ax = (int)(has_axis ? axis : opset < 13 ? 1 : -1);

	if (ax < 0)
		ax += rank;
	kt_fill_random(&x, (unsigned)(opset * 100 + ax * 7 + rank), lo, hi);
	reference(op, &x, ax, opset < 13 ? rank : ax + 1, want);
	assert_int_equal(run(op, opset, &x, has_axis, axis, &y, NULL), 0);
	err = rel_err(&y, want);
	if (err > 1e-5)
		print_message("%s opset %d rank %d axis %d: err %g\n", op, opset, rank, ax, err);
	assert_true(err <= 1e-5);
	assert_int_equal(run(op, opset, &x, has_axis, axis, &y2, pool2), 0);
	assert_memory_equal(y.data, y2.data, hp_tensor_bytes(&y));
	hp_tensor_free(&x);
	hp_tensor_free(&y);
	hp_tensor_free(&y2);
	free(want);
}

static const char *const ops[] = { "Softmax", "LogSoftmax", "Hardmax" };

static void test_axes(void **state)
{
	const int64_t d4[] = { 2, 3, 4, 5 };

	(void)state;
	for (int k = 0; k < 3; k++) {
		for (int opset = 11; opset <= 13; opset += 2) {
			check(ops[k], opset, d4, 4, 0, 0, -3, 3);
			for (int axis = -4; axis < 4; axis++)
				check(ops[k], opset, d4, 4, 1, axis, -3, 3);
		}
	}
}

/* The same input and axis give different answers at opset 11 and 13. */
static void test_opset_semantics_differ(void **state)
{
	const int64_t d[] = { 2, 3, 4 };
	struct hp_tensor x = kt_tensor(HP_F32, 3, d), y11, y13;
	double row = 0;

	(void)state;
	kt_fill_random(&x, 5, -2, 2);
	assert_int_equal(run("Softmax", 11, &x, 1, 1, &y11, NULL), 0);
	assert_int_equal(run("Softmax", 13, &x, 1, 1, &y13, NULL), 0);
	/* opset 11: each batch's 12 values sum to 1; opset 13: each column of 3. */
	for (int i = 0; i < 12; i++)
		row += ((float *)y11.data)[i];
	assert_true(fabs(row - 1) < 1e-6);
	row = 0;
	for (int k = 0; k < 3; k++)
		row += ((float *)y13.data)[k * 4];
	assert_true(fabs(row - 1) < 1e-6);
	assert_memory_not_equal(y11.data, y13.data, hp_tensor_bytes(&y11));
	hp_tensor_free(&x);
	hp_tensor_free(&y11);
	hp_tensor_free(&y13);
}

static void test_shapes(void **state)
{
	const int64_t wide[] = { 2, 7, 300 }, rows[] = { 64, 1000 }, one[] = { 37 }, big[] = { 3, 2, 1 };

	(void)state;
	for (int k = 0; k < 3; k++) {
		check(ops[k], 13, wide, 3, 1, 1, -3, 3);   /* inner 300 > one column block */
		check(ops[k], 13, wide, 3, 1, 0, -3, 3);
		check(ops[k], 13, rows, 2, 0, 0, -5, 5);   /* many rows: threads */
		check(ops[k], 11, rows, 2, 1, 0, -5, 5);
		check(ops[k], 13, one, 1, 0, 0, -5, 5);
		check(ops[k], 13, wide, 3, 1, -1, 500, 1000); /* large values: max subtraction */
		check(ops[k], 13, wide, 3, 1, -1, -1000, -500);
		check(ops[k], 13, big, 3, 1, 2, -1, 1);    /* axis of length 1 */
	}
}

static void test_hardmax_ties(void **state)
{
	const int64_t d[] = { 2, 4 };
	struct hp_tensor x = kt_tensor(HP_F32, 2, d), y;
	const float v[] = { 1, 3, 3, 2, 5, 5, 5, 5 }, want[] = { 0, 1, 0, 0, 1, 0, 0, 0 };

	(void)state;
	memcpy(x.data, v, sizeof v);
	assert_int_equal(run("Hardmax", 13, &x, 0, 0, &y, NULL), 0);
	assert_memory_equal(y.data, want, sizeof want);
	hp_tensor_free(&x);
	hp_tensor_free(&y);
}

static void test_errors(void **state)
{
	const int64_t d[] = { 2, 4 };
	struct hp_tensor x = kt_tensor(HP_F32, 2, d), xi = kt_tensor(HP_I64, 2, d), y;

	(void)state;
	assert_int_equal(run("Softmax", 13, &x, 1, 2, &y, NULL), HP_EMODEL);
	assert_non_null(strstr(hp_errmsg(), "node0"));
	assert_int_equal(run("Softmax", 13, &x, 1, -3, &y, NULL), HP_EMODEL);
	assert_int_equal(run("LogSoftmax", 13, &xi, 0, 0, &y, NULL), HP_EUNSUPPORTED);
	hp_tensor_free(&x);
	hp_tensor_free(&xi);
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
		cmocka_unit_test(test_axes),
		cmocka_unit_test(test_opset_semantics_differ),
		cmocka_unit_test(test_shapes),
		cmocka_unit_test(test_hardmax_ties),
		cmocka_unit_test(test_errors),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
