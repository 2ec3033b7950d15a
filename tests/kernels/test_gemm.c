/* Gemm and MatMul against plain triple loops: every transA/transB, alpha,
 * beta and C broadcast form; MatMul 1-D promotion, 2-D, batched and
 * broadcast batch dims; determinism with a pool; shape errors. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "hpdlf/error.h"
#include "tests/kernels/harness.h"

static float at(const struct hp_tensor *t, int64_t i)
{
	return ((const float *)t->data)[i];
}

static void check_close(const struct hp_tensor *out, const struct hp_tensor *ref, const char *what)
{
	double err = kt_rel_err(out, ref);

	if (err < 0 || err > 1e-5)
		fail_msg("%s: rel err %g", what, err);
}

/* C shapes by code: 0 none, 1 scalar, 2 [N], 3 [1,N], 4 [M,1], 5 [M,N], 6 [1] */
static struct hp_tensor make_c(int code, int64_t m, int64_t n, int64_t *cs0, int64_t *cs1)
{
	int64_t d[2];
	struct hp_tensor c = { 0 };

	*cs0 = *cs1 = 0;
	switch (code) {
	case 1: c = kt_tensor(HP_F32, 0, d); break;
	case 2: d[0] = n; c = kt_tensor(HP_F32, 1, d); *cs1 = 1; break;
	case 3: d[0] = 1; d[1] = n; c = kt_tensor(HP_F32, 2, d); *cs1 = 1; break;
	case 4: d[0] = m; d[1] = 1; c = kt_tensor(HP_F32, 2, d); *cs0 = 1; break;
	case 5: d[0] = m; d[1] = n; c = kt_tensor(HP_F32, 2, d); *cs0 = n; *cs1 = 1; break;
	case 6: d[0] = 1; c = kt_tensor(HP_F32, 1, d); break;
	default: break;
	}
	if (c.data)
		kt_fill_random(&c, 99, -2, 2);
	return c;
}

static void gemm_case(int64_t m, int64_t k, int64_t n, int ta, int tb, float alpha, float beta, int ccode)
{
	int64_t ad[2] = { ta ? k : m, ta ? m : k }, bd[2] = { tb ? n : k, tb ? k : n }, yd[2] = { m, n }, cs0, cs1;
	struct hp_tensor in[3], out, ref;
	struct hp_attr attrs[4] = { kt_int("transA", ta), kt_int("transB", tb), kt_float("alpha", alpha),
				    kt_float("beta", beta) };
	struct kt_case c = { .op = "Gemm", .nin = ccode ? 3 : 2, .in = in, .nattrs = 4, .attrs = attrs, .nout = 1 };
	char what[128];

	in[0] = kt_tensor(HP_F32, 2, ad);
	in[1] = kt_tensor(HP_F32, 2, bd);
	in[2] = make_c(ccode, m, n, &cs0, &cs1);
	kt_fill_random(&in[0], (unsigned)(m * 7 + k), -1, 1);
	kt_fill_random(&in[1], (unsigned)(n * 5 + k), -1, 1);
	ref = kt_tensor(HP_F32, 2, yd);
	for (int64_t i = 0; i < m; i++)
		for (int64_t j = 0; j < n; j++) {
			double s = 0;
			for (int64_t p = 0; p < k; p++)
				s += (double)at(&in[0], ta ? p * m + i : i * k + p) * at(&in[1], tb ? j * k + p : p * n + j);
			s *= alpha;
			if (ccode)
				s += (double)beta * at(&in[2], i * cs0 + j * cs1);
			((float *)ref.data)[i * n + j] = (float)s;
		}
	snprintf(what, sizeof what, "Gemm %lldx%lldx%lld tA%d tB%d a%g b%g C%d", (long long)m, (long long)k,
		 (long long)n, ta, tb, alpha, beta, ccode);
	if (kt_run(&c, &out) < 0)
		fail_msg("%s: %s", what, hp_errmsg());
	check_close(&out, &ref, what);
	hp_tensor_free(&out);
	hp_tensor_free(&ref);
	for (int i = 0; i < 3; i++)
		hp_tensor_free(&in[i]);
}

static void test_gemm_all(void **state)
{
	static const float ab[][2] = { { 1, 1 }, { 0.5f, -2 }, { -1.5f, 0 } };

	(void)state;
	for (int ta = 0; ta < 2; ta++)
		for (int tb = 0; tb < 2; tb++)
			for (int c = 0; c <= 6; c++)
				for (size_t s = 0; s < 3; s++)
					gemm_case(5 + ta, 7 + c, 6 + tb, ta, tb, ab[s][0], ab[s][1], c);
	gemm_case(64, 130, 70, 1, 1, 1, 1, 5);
	gemm_case(1, 1, 1, 0, 0, 2, 3, 1);
}

/* Naive numpy-semantics matmul over explicit shapes. */
static void matmul_case(int ra, const int64_t *ad, int rb, const int64_t *bd, int ry, const int64_t *yd,
			struct hp_pool *pool)
{
	struct hp_tensor in[2], out, ref;
	struct kt_case c = { .op = "MatMul", .nin = 2, .in = in, .nout = 1, .pool = pool };
	int64_t m = ra == 1 ? 1 : ad[ra - 2], k = ad[ra - 1], n = rb == 1 ? 1 : bd[rb - 1];
	int64_t ny = 1, nbatch;
	int nb = ry - (ra > 1) - (rb > 1);

	in[0] = kt_tensor(HP_F32, ra, ad);
	in[1] = kt_tensor(HP_F32, rb, bd);
	kt_fill_random(&in[0], 3, -1, 1);
	kt_fill_random(&in[1], 4, -1, 1);
	ref = kt_tensor(HP_F32, ry, yd);
	for (int i = 0; i < ry; i++)
		ny *= yd[i];
	nbatch = ny / (m * n);
	for (int64_t bi = 0; bi < nbatch; bi++) {
		/* batch index -> offsets in A and B, broadcasting from the right */
		int64_t aoff = 0, boff = 0, rem = bi, as = m * k, bs = k * n;
		for (int d = nb - 1; d >= 0; d--) {
			int64_t idx = rem % yd[d], ja = d - (nb - (ra - 2)), jb = d - (nb - (rb - 2));
			rem /= yd[d];
			if (ra > 2 && ja >= 0) {
				aoff += (ad[ja] == 1 ? 0 : idx) * as;
				as *= ad[ja];
			}
			if (rb > 2 && jb >= 0) {
				boff += (bd[jb] == 1 ? 0 : idx) * bs;
				bs *= bd[jb];
			}
		}
		for (int64_t i = 0; i < m; i++)
			for (int64_t j = 0; j < n; j++) {
				double s = 0;
				for (int64_t p = 0; p < k; p++)
					s += (double)at(&in[0], aoff + i * k + p) * at(&in[1], boff + p * n + j);
				((float *)ref.data)[bi * m * n + i * n + j] = (float)s;
			}
	}
	if (kt_run(&c, &out) < 0)
		fail_msg("MatMul: %s", hp_errmsg());
	check_close(&out, &ref, "MatMul");
	hp_tensor_free(&out);
	hp_tensor_free(&ref);
	hp_tensor_free(&in[0]);
	hp_tensor_free(&in[1]);
}

#define D(...) (const int64_t[]){ __VA_ARGS__ }

static void test_matmul_all(void **state)
{
	(void)state;
	matmul_case(2, D(4, 5), 2, D(5, 3), 2, D(4, 3), NULL);
	matmul_case(1, D(5), 2, D(5, 3), 1, D(3), NULL);
	matmul_case(2, D(4, 5), 1, D(5), 1, D(4), NULL);
	matmul_case(1, D(5), 1, D(5), 0, D(0), NULL);
	matmul_case(3, D(2, 4, 5), 2, D(5, 3), 3, D(2, 4, 3), NULL);
	matmul_case(2, D(4, 5), 3, D(2, 5, 3), 3, D(2, 4, 3), NULL);
	matmul_case(3, D(2, 4, 5), 3, D(2, 5, 3), 3, D(2, 4, 3), NULL);
	matmul_case(4, D(2, 1, 4, 5), 3, D(3, 5, 6), 4, D(2, 3, 4, 6), NULL);
	matmul_case(3, D(1, 4, 5), 4, D(2, 3, 5, 6), 4, D(2, 3, 4, 6), NULL);
	matmul_case(3, D(3, 4, 5), 1, D(5), 2, D(3, 4), NULL);
	matmul_case(1, D(5), 3, D(3, 5, 2), 2, D(3, 2), NULL);
	matmul_case(4, D(2, 3, 4, 5), 2, D(5, 7), 4, D(2, 3, 4, 7), NULL);
}

static void test_determinism(void **state)
{
	int64_t ad[3] = { 3, 64, 96 }, bd[2] = { 96, 80 };
	struct hp_tensor in[2], a, b;
	struct hp_pool *pool;
	struct kt_case c = { .op = "MatMul", .nin = 2, .in = in, .nout = 1 };

	(void)state;
	assert_int_equal(hp_pool_create(2, &pool), 0);
	c.pool = pool;
	in[0] = kt_tensor(HP_F32, 3, ad);
	in[1] = kt_tensor(HP_F32, 2, bd);
	kt_fill_random(&in[0], 1, -1, 1);
	kt_fill_random(&in[1], 2, -1, 1);
	assert_int_equal(kt_run(&c, &a), 0);
	assert_int_equal(kt_run(&c, &b), 0);
	assert_memory_equal(a.data, b.data, hp_tensor_bytes(&a));
	hp_tensor_free(&a);
	hp_tensor_free(&b);
	matmul_case(3, D(2, 40, 50), 3, D(2, 50, 30), 3, D(2, 40, 30), pool);
	hp_tensor_free(&in[0]);
	hp_tensor_free(&in[1]);
	hp_pool_destroy(pool);
}

static void test_errors(void **state)
{
	int64_t ad[2] = { 4, 5 }, bd[2] = { 6, 3 }, cd[2] = { 3, 3 }, a3[3] = { 2, 4, 5 }, b3[3] = { 3, 5, 2 };
	struct hp_tensor in[3], out;
	struct kt_case c = { .op = "Gemm", .nin = 2, .in = in, .nout = 1 };

	(void)state;
	in[0] = kt_tensor(HP_F32, 2, ad);
	in[1] = kt_tensor(HP_F32, 2, bd);
	assert_int_equal(kt_run(&c, &out), HP_ESHAPE);
	assert_non_null(strstr(hp_errmsg(), "node0"));
	assert_non_null(strstr(hp_errmsg(), "inner dims"));
	c.op = "MatMul";
	assert_int_equal(kt_run(&c, &out), HP_ESHAPE);
	assert_non_null(strstr(hp_errmsg(), "node0"));
	hp_tensor_free(&in[1]);
	bd[0] = 5;
	in[1] = kt_tensor(HP_F32, 2, bd);
	in[2] = kt_tensor(HP_F32, 2, cd);
	c.op = "Gemm";
	c.nin = 3;
	assert_int_equal(kt_run(&c, &out), HP_ESHAPE);
	assert_non_null(strstr(hp_errmsg(), "not broadcastable"));
	for (int i = 0; i < 3; i++)
		hp_tensor_free(&in[i]);
	in[0] = kt_tensor(HP_F32, 3, a3);
	in[1] = kt_tensor(HP_F32, 3, b3);
	c.op = "MatMul";
	c.nin = 2;
	assert_int_equal(kt_run(&c, &out), HP_ESHAPE);
	assert_non_null(strstr(hp_errmsg(), "do not broadcast"));
	hp_tensor_free(&in[0]);
	hp_tensor_free(&in[1]);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_gemm_all),
		cmocka_unit_test(test_matmul_all),
		cmocka_unit_test(test_determinism),
		cmocka_unit_test(test_errors),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
