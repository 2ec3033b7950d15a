/* Trilu (run time, every k, both triangles, batched, any dtype, 1 and 2
 * threads) and NonZero (folded from a constant; refused at run time) against
 * naive loops. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "hpdlf/error.h"
#include "tests/kernels/harness.h"

static struct hp_pool *pool2;

/* y[b][i][j] = (upper ? j - i >= k : j - i <= k) ? x : 0, compared bytewise. */
static void check_trilu(const struct hp_tensor *x, const struct hp_tensor *y, int64_t k, int upper)
{
	int r = x->shape.rank;
	int64_t rows = x->shape.dims[r - 2], cols = x->shape.dims[r - 1], n = hp_shape_numel(&x->shape);
	size_t es = hp_dtype_size(x->dtype);
	static const char zero[16];

	assert_true(hp_shape_equal(&x->shape, &y->shape));
	for (int64_t e = 0; e < n; e++) {
		int64_t i = (e / cols) % rows, j = e % cols;
		int keep = upper ? j - i >= k : j - i <= k;
		const char *want = keep ? (const char *)x->data + e * (int64_t)es : zero;
		if (memcmp((const char *)y->data + e * (int64_t)es, want, es))
			fail_msg("k=%lld upper=%d: element %lld (row %lld col %lld) wrong", (long long)k, upper,
				 (long long)e, (long long)i, (long long)j);
	}
}

static void trilu_case(enum hp_dtype dt, int rank, const int64_t *dims, int64_t k, int upper, int has_k,
		       struct hp_pool *pool)
{
	int64_t no_dims[1] = { 0 };
	struct hp_tensor in[2] = { kt_tensor(dt, rank, dims), kt_tensor(HP_I64, 0, no_dims) }, out;
	struct hp_attr up = kt_int("upper", upper);
	struct kt_case c = { .op = "Trilu", .nin = has_k ? 2 : 1, .in = in, .nattrs = 1, .attrs = &up, .nout = 1,
			     .pool = pool };
	size_t b = hp_tensor_bytes(&in[0]);

	for (size_t i = 0; i < b; i++) /* nonzero bytes everywhere, so zeroing shows */
		((uint8_t *)in[0].data)[i] = (uint8_t)(1 + (i * 37 + (size_t)k * 11) % 251);
	*(int64_t *)in[1].data = k;
	assert_int_equal(kt_run(&c, &out), 0);
	check_trilu(&in[0], &out, has_k ? k : 0, upper);
	hp_tensor_free(&out);
	hp_tensor_free(&in[0]);
	hp_tensor_free(&in[1]);
}

static void test_trilu(void **state)
{
	static const int64_t square[] = { 5, 5 }, wide[] = { 2, 3, 4, 7 }, tall[] = { 3, 9, 2 };
	static const int64_t ks[] = { -100, -4, -1, 0, 1, 2, 6, 100 };

	(void)state;
	for (size_t i = 0; i < sizeof ks / sizeof ks[0]; i++)
		for (int upper = 0; upper < 2; upper++) {
			trilu_case(HP_F32, 2, square, ks[i], upper, 1, NULL);
			trilu_case(HP_F32, 4, wide, ks[i], upper, 1, pool2);
			trilu_case(HP_I64, 3, tall, ks[i], upper, 1, NULL);
			trilu_case(HP_BOOL, 4, wide, ks[i], upper, 1, pool2);
		}
	trilu_case(HP_F32, 4, wide, 3, 1, 0, NULL); /* k omitted: 0 */
	trilu_case(HP_F32, 4, wide, 3, 0, 0, pool2);
}

static void test_trilu_threads_bitwise(void **state)
{
	int64_t dims[] = { 4, 300, 300 }, no_dims[1] = { 0 }; /* 1200 rows: several ranges */
	struct hp_tensor in[2] = { kt_tensor(HP_F32, 3, dims), kt_tensor(HP_I64, 0, no_dims) }, o1, o2;
	struct hp_attr up = kt_int("upper", 0);
	struct kt_case c = { .op = "Trilu", .nin = 2, .in = in, .nattrs = 1, .attrs = &up, .nout = 1 };

	(void)state;
	kt_fill_random(&in[0], 3, -1, 1);
	*(int64_t *)in[1].data = 17;
	assert_int_equal(kt_run(&c, &o1), 0);
	c.pool = pool2;
	assert_int_equal(kt_run(&c, &o2), 0);
	assert_memory_equal(o1.data, o2.data, hp_tensor_bytes(&o1));
	check_trilu(&in[0], &o2, 17, 0);
	hp_tensor_free(&o1);
	hp_tensor_free(&o2);
	hp_tensor_free(&in[0]);
	hp_tensor_free(&in[1]);
}

static void test_trilu_errors(void **state)
{
	int64_t d1[] = { 6 }, d2[] = { 2, 2 }, no_dims[1] = { 0 };
	struct hp_tensor v = kt_tensor(HP_F32, 1, d1), m = kt_tensor(HP_F32, 2, d2), k32 = kt_tensor(HP_I32, 0, no_dims);
	struct hp_tensor in[2] = { m, k32 }, out;
	struct kt_case c = { .op = "Trilu", .nin = 1, .in = &v, .nout = 1 };

	(void)state;
	assert_int_equal(kt_run(&c, &out), HP_ESHAPE); /* rank 1 */
	c.in = in;
	c.nin = 2;
	assert_int_equal(kt_run(&c, &out), HP_ESHAPE); /* k not int64 */
	hp_tensor_free(&v);
	hp_tensor_free(&m);
	hp_tensor_free(&k32);
}

static void test_nonzero(void **state)
{
	int64_t dims[] = { 3, 4, 5 };
	struct hp_tensor x = kt_tensor(HP_F32, 3, dims), out;
	struct kt_case c = { .op = "NonZero", .nin = 1, .in = &x, .const_mask = 1, .nout = 1 };
	float *p = x.data;
	int64_t nz = 0, m = 0;

	(void)state;
	for (int i = 0; i < 60; i++) {
		p[i] = (i * 7) % 3 == 0 ? 0.0f : (float)i - 30.5f;
		nz += p[i] != 0;
	}
	assert_int_equal(kt_run(&c, &out), 0);
	assert_int_equal(out.dtype, HP_I64);
	assert_int_equal(out.shape.rank, 2);
	assert_int_equal(out.shape.dims[0], 3);
	assert_int_equal(out.shape.dims[1], nz);
	for (int a = 0; a < 3; a++)
		for (int b = 0; b < 4; b++)
			for (int e = 0; e < 5; e++) {
				const int64_t *o = out.data;
				if (p[(a * 4 + b) * 5 + e] == 0)
					continue;
				assert_int_equal(o[m], a);
				assert_int_equal(o[nz + m], b);
				assert_int_equal(o[2 * nz + m], e);
				m++;
			}
	hp_tensor_free(&out);
	c.const_mask = 0; /* a run-time input: the output shape is unknown */
	assert_int_equal(kt_run(&c, &out), HP_ENOTCONST);
	hp_tensor_free(&x);
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
		cmocka_unit_test(test_trilu),
		cmocka_unit_test(test_trilu_threads_bitwise),
		cmocka_unit_test(test_trilu_errors),
		cmocka_unit_test(test_nonzero),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
