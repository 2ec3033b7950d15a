/* MatMulGrad and GemmGrad on the own FMA product (kernels/gemm_grad.c
 * over kernels/gemm_fma.c).
 *
 * The reference is the definition the out-of-core paths rely on, written
 * here with the C library's fmaf: every dA element one float chain
 * fmaf(dY(i, j), B(q, j), acc) over j = 0..N-1 in order from 0, every dB
 * element fmaf(A(r, q), dY(r, c), acc) over the rows r in order from 0;
 * the kernel must match it bit for bit.  A double loop bounds the chain's
 * error.  Then what follows from it, bitwise: 1 against 2 threads, and a
 * weight cut along K (exec/split_weight.c's MatMul and MatMulAcc blocks)
 * giving the whole's gradient elements.  Shapes: a linear layer's (batch
 * dims folded into rows, above the pool's threshold, sizes off the 6 x 16
 * tile and the 64-column unit) and attention's (both operands batched).
 * GemmGrad (alpha 1, every transA/transB): dB the same chains over the
 * rows; dA (transA 0) a chain over N from its last column to its first,
 * so that a weight cut along its output features, whose blocks chain dA
 * from the last block to the first (input 3), gets the whole's bits. */
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
#include "kernels/gemm_fma.h"
#include "tests/kernels/harness.h"

static struct hp_pool *pool2;

static struct hp_tensor tens(int rank, const int64_t *d, unsigned seed)
{
	struct hp_tensor t = kt_tensor(HP_F32, rank, d);

	kt_fill_random(&t, seed, -1, 1);
	return t;
}

static void run_op(const char *op, int nin, const struct hp_tensor *in, int nout, struct hp_tensor *out,
		   struct hp_pool *pool)
{
	struct kt_case c = { .domain = "ai.hpdlf", .op = op, .nin = nin, .in = in, .nout = nout, .pool = pool };

	if (kt_run(&c, out) < 0)
		fail_msg("%s: %s", op, hp_errmsg());
}

static void same_bits(const struct hp_tensor *a, const struct hp_tensor *b, const char *what)
{
	int64_t n = hp_shape_numel(&a->shape);

	assert_int_equal(n, hp_shape_numel(&b->shape));
	if (memcmp(a->data, b->data, (size_t)n * sizeof(float)))
		fail_msg("%s: not bitwise", what);
}

/* nb products of m x k by k x n (each operand its own slice), dY m x n. */
struct mm {
	int64_t nb, m, k, n;
	const float *dy, *a, *b;
};

/* dA and dB of product p, element (i, q) / (q, c), as fmaf chains and in
 * double. */
static float chain_da(const struct mm *g, int64_t p, int64_t i, int64_t q, double *d)
{
	const float *dy = g->dy + p * g->m * g->n + i * g->n, *b = g->b + p * g->k * g->n + q * g->n;
	float acc = 0;

	*d = 0;
	for (int64_t j = 0; j < g->n; j++) {
		acc = fmaf(dy[j], b[j], acc);
		*d += (double)dy[j] * b[j];
	}
	return acc;
}

static float chain_db(const struct mm *g, int64_t p, int64_t q, int64_t c, double *d)
{
	const float *a = g->a + p * g->m * g->k, *dy = g->dy + p * g->m * g->n;
	float acc = 0;

	*d = 0;
	for (int64_t r = 0; r < g->m; r++) {
		acc = fmaf(a[r * g->k + q], dy[r * g->n + c], acc);
		*d += (double)a[r * g->k + q] * dy[r * g->n + c];
	}
	return acc;
}

static void check_chains(const struct mm *g, const float *da, const float *db)
{
	double d, worst = 0;

	for (int64_t p = 0; p < g->nb; p++) {
		for (int64_t i = 0; i < g->m; i++)
			for (int64_t q = 0; q < g->k; q++) {
				float want = chain_da(g, p, i, q, &d), got = da[(p * g->m + i) * g->k + q];
				if (memcmp(&want, &got, sizeof want))
					fail_msg("dA[%lld][%lld][%lld] = %.9g, the chain %.9g", (long long)p, (long long)i,
						 (long long)q, got, want);
				worst = fmax(worst, fabs(got - d));
			}
		for (int64_t q = 0; q < g->k; q++)
			for (int64_t c = 0; c < g->n; c++) {
				float want = chain_db(g, p, q, c, &d), got = db[(p * g->k + q) * g->n + c];
				if (memcmp(&want, &got, sizeof want))
					fail_msg("dB[%lld][%lld][%lld] = %.9g, the chain %.9g", (long long)p, (long long)q,
						 (long long)c, got, want);
				worst = fmax(worst, fabs(got - d));
			}
	}
	assert_true(worst < 1e-4);
}

/* A linear layer [2, 3, R, K] x [K, N]: the rows fold into one product. */
static void linear_case(int64_t r, int64_t k, int64_t n)
{
	int64_t ad[] = { 2, 3, r, k }, bd[] = { k, n }, yd[] = { 2, 3, r, n };
	struct hp_tensor in[3] = { tens(4, yd, 71), tens(4, ad, 72), tens(2, bd, 73) }, one[2], two[2];
	struct mm g = { .nb = 1, .m = 6 * r, .k = k, .n = n, .dy = in[0].data, .a = in[1].data, .b = in[2].data };

	run_op("MatMulGrad", 3, in, 2, one, NULL);
	run_op("MatMulGrad", 3, in, 2, two, pool2);
	check_chains(&g, one[0].data, one[1].data);
	same_bits(&one[0], &two[0], "linear dA, 2 threads against 1");
	same_bits(&one[1], &two[1], "linear dB, 2 threads against 1");
	for (int i = 0; i < 3; i++)
		hp_tensor_free(&in[i]);
	for (int i = 0; i < 2; i++)
		hp_tensor_free(&one[i]), hp_tensor_free(&two[i]);
}

static void test_linear(void **state)
{
	(void)state;
	if (!hp_fma_gemm_ok())
		skip();
	linear_case(40, 100, 90); /* above the pool's threshold */
	linear_case(7, 37, 29);   /* below it, off every tile */
	linear_case(50, 33, 257); /* chains past a 256-long k chunk: dA's N, dB's 300 rows */
}

/* Attention's products [2, 4, M, K] x [2, 4, K, N]. */
static void test_batched(void **state)
{
	int64_t ad[] = { 2, 4, 70, 50 }, bd[] = { 2, 4, 50, 80 }, yd[] = { 2, 4, 70, 80 };
	struct hp_tensor in[3] = { tens(4, yd, 81), tens(4, ad, 82), tens(4, bd, 83) }, one[2], two[2];
	struct mm g = { .nb = 8, .m = 70, .k = 50, .n = 80, .dy = in[0].data, .a = in[1].data, .b = in[2].data };

	(void)state;
	if (!hp_fma_gemm_ok())
		skip();
	run_op("MatMulGrad", 3, in, 2, one, NULL);
	run_op("MatMulGrad", 3, in, 2, two, pool2);
	check_chains(&g, one[0].data, one[1].data);
	same_bits(&one[0], &two[0], "batched dA, 2 threads against 1");
	same_bits(&one[1], &two[1], "batched dB, 2 threads against 1");
	for (int i = 0; i < 3; i++)
		hp_tensor_free(&in[i]);
	for (int i = 0; i < 2; i++)
		hp_tensor_free(&one[i]), hp_tensor_free(&two[i]);
}

/* Columns [c0, c0 + w) of a rows x cols matrix. */
static struct hp_tensor cols_of(const struct hp_tensor *t, int64_t rows, int64_t cols, int64_t c0, int64_t w)
{
	int64_t d[] = { rows, w };
	struct hp_tensor s = kt_tensor(HP_F32, 2, d);

	for (int64_t r = 0; r < rows; r++)
		memcpy((float *)s.data + r * w, (const float *)t->data + r * cols + c0, (size_t)w * sizeof(float));
	return s;
}

/* A weight [K, N] cut along K into rows [0, 40) and [40, K): each block's
 * MatMulGrad (its columns of A, its rows of B, the whole dY) gives the
 * whole's dA columns and dB rows bit for bit. */
static void test_k_blocks(void **state)
{
	enum { M = 96, K = 100, N = 72, K0 = 40 };
	int64_t ad[] = { M, K }, bd[] = { K, N }, yd[] = { M, N };
	struct hp_tensor in[3] = { tens(2, yd, 91), tens(2, ad, 92), tens(2, bd, 93) }, whole[2];

	(void)state;
	if (!hp_fma_gemm_ok())
		skip();
	run_op("MatMulGrad", 3, in, 2, whole, pool2);
	for (int blk = 0; blk < 2; blk++) {
		int64_t k0 = blk ? K0 : 0, w = blk ? K - K0 : K0;
		struct hp_tensor b = cols_of(&in[2], 1, K * N, k0 * N, w * N), part[3] = { in[0], cols_of(&in[1], M, K, k0, w), b };
		struct hp_tensor out[2], want_da = cols_of(&whole[0], M, K, k0, w), want_db = cols_of(&whole[1], 1, K * N, k0 * N, w * N);
		int64_t bs[] = { w, N };
		part[2].shape.rank = 2;
		memcpy(part[2].shape.dims, bs, sizeof bs);
		run_op("MatMulGrad", 3, part, 2, out, blk ? NULL : pool2);
		want_db.shape = out[1].shape;
		same_bits(&out[0], &want_da, "K block's dA against the whole's columns");
		same_bits(&out[1], &want_db, "K block's dB against the whole's rows");
		hp_tensor_free(&part[1]), hp_tensor_free(&part[2]), hp_tensor_free(&want_da), hp_tensor_free(&want_db);
		hp_tensor_free(&out[0]), hp_tensor_free(&out[1]);
	}
	for (int i = 0; i < 3; i++)
		hp_tensor_free(&in[i]);
	hp_tensor_free(&whole[0]), hp_tensor_free(&whole[1]);
}

/* ---- GemmGrad(dY, A, B[, dA so far]) ---------------------------------- */

struct gg {
	int64_t m, k, n;
	int ta, tb;
	const float *dy, *a, *b;
};

static float op_a(const struct gg *g, int64_t i, int64_t q)
{
	return g->ta ? g->a[q * g->m + i] : g->a[i * g->k + q];
}

static float op_b(const struct gg *g, int64_t q, int64_t j)
{
	return g->tb ? g->b[j * g->k + q] : g->b[q * g->n + j];
}

/* dA(i, q): the chain over j from the last column to the first, from 0;
 * dB(q, j): the chain over the rows in order, from 0. */
static void check_gemm_chains(const struct gg *g, const float *da, const float *db)
{
	for (int64_t i = 0; da && i < g->m; i++)
		for (int64_t q = 0; q < g->k; q++) {
			float acc = 0, got = da[i * g->k + q];
			for (int64_t j = g->n - 1; j >= 0; j--)
				acc = fmaf(g->dy[i * g->n + j], op_b(g, q, j), acc);
			if (memcmp(&acc, &got, sizeof acc))
				fail_msg("Gemm ta %d tb %d: dA[%lld][%lld] = %.9g, the chain %.9g", g->ta, g->tb,
					 (long long)i, (long long)q, got, acc);
		}
	for (int64_t q = 0; q < g->k; q++)
		for (int64_t j = 0; j < g->n; j++) {
			float acc = 0, got = db[g->tb ? j * g->k + q : q * g->n + j];
			for (int64_t r = 0; r < g->m; r++)
				acc = fmaf(op_a(g, r, q), g->dy[r * g->n + j], acc);
			if (memcmp(&acc, &got, sizeof acc))
				fail_msg("Gemm ta %d tb %d: dB at (%lld, %lld) = %.9g, the chain %.9g", g->ta, g->tb,
					 (long long)q, (long long)j, got, acc);
		}
}

static void gemm_grad_run(const struct hp_tensor *in, int nin, int ta, int tb, struct hp_tensor *out,
			  struct hp_pool *pool)
{
	struct hp_attr at[2] = { kt_int("transA", ta), kt_int("transB", tb) };
	struct kt_case c = { .domain = "ai.hpdlf", .op = "GemmGrad", .nin = nin, .in = in, .nattrs = 2, .attrs = at,
			     .nout = 2, .pool = pool };

	if (kt_run(&c, out) < 0)
		fail_msg("GemmGrad: %s", hp_errmsg());
}

static void gemm_case(int64_t m, int64_t k, int64_t n, int ta, int tb)
{
	int64_t yd[] = { m, n }, ad[] = { ta ? k : m, ta ? m : k }, bd[] = { tb ? n : k, tb ? k : n };
	struct hp_tensor in[3] = { tens(2, yd, 101), tens(2, ad, 102), tens(2, bd, 103) }, one[2], two[2];
	struct gg g = { m, k, n, ta, tb, in[0].data, in[1].data, in[2].data };

	gemm_grad_run(in, 3, ta, tb, one, NULL);
	gemm_grad_run(in, 3, ta, tb, two, pool2);
	check_gemm_chains(&g, ta ? NULL : one[0].data, one[1].data); /* transA's dA: OpenBLAS's tiles */
	same_bits(&one[0], &two[0], "Gemm dA, 2 threads against 1");
	same_bits(&one[1], &two[1], "Gemm dB, 2 threads against 1");
	for (int i = 0; i < 3; i++)
		hp_tensor_free(&in[i]);
	for (int i = 0; i < 2; i++)
		hp_tensor_free(&one[i]), hp_tensor_free(&two[i]);
}

static void test_gemm(void **state)
{
	(void)state;
	if (!hp_fma_gemm_ok())
		skip();
	for (int t = 0; t < 4; t++) {
		gemm_case(16, 37, 29, t & 1, t >> 1);
		gemm_case(96, 100, 300, t & 1, t >> 1); /* above the pool's threshold, N past a chunk */
	}
}

/* A transB weight [N, K] cut along N (its output features) into rows
 * [0, 48) and [48, N), as exec/split_weight.c cuts it: the block of the
 * last rows runs first, the other starts from its dA (input 3).  The
 * chained dA is the whole's and each block's dB its rows, bit for bit. */
static void test_gemm_feature_blocks(void **state)
{
	enum { M = 40, K = 72, N = 112, N0 = 48 };
	int64_t yd[] = { M, N }, ad[] = { M, K }, bd[] = { N, K };
	struct hp_tensor in[3] = { tens(2, yd, 111), tens(2, ad, 112), tens(2, bd, 113) }, whole[2], hi[2], lo[2];

	(void)state;
	if (!hp_fma_gemm_ok())
		skip();
	gemm_grad_run(in, 3, 0, 1, whole, pool2);
	struct hp_tensor hin[3] = { cols_of(&in[0], M, N, N0, N - N0), in[1], cols_of(&in[2], 1, N * K, N0 * K, (N - N0) * K) };
	struct hp_tensor lin[4] = { cols_of(&in[0], M, N, 0, N0), in[1], cols_of(&in[2], 1, N * K, 0, N0 * K), { 0 } };
	hin[2].shape = (struct hp_shape){ .rank = 2, .dims = { N - N0, K } };
	lin[2].shape = (struct hp_shape){ .rank = 2, .dims = { N0, K } };
	gemm_grad_run(hin, 3, 0, 1, hi, NULL);
	lin[3] = hi[0];
	gemm_grad_run(lin, 4, 0, 1, lo, pool2);
	same_bits(&lo[0], &whole[0], "chained blocks' dA against the whole's");
	struct hp_tensor wlo = cols_of(&whole[1], 1, N * K, 0, N0 * K), whi = cols_of(&whole[1], 1, N * K, N0 * K, (N - N0) * K);
	wlo.shape = lo[1].shape, whi.shape = hi[1].shape;
	same_bits(&lo[1], &wlo, "first block's dB against the whole's rows");
	same_bits(&hi[1], &whi, "last block's dB against the whole's rows");
	hp_tensor_free(&wlo), hp_tensor_free(&whi);
	hp_tensor_free(&hin[0]), hp_tensor_free(&hin[2]), hp_tensor_free(&lin[0]), hp_tensor_free(&lin[2]);
	for (int i = 0; i < 2; i++)
		hp_tensor_free(&whole[i]), hp_tensor_free(&hi[i]), hp_tensor_free(&lo[i]);
	for (int i = 0; i < 3; i++)
		hp_tensor_free(&in[i]);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_linear),
		cmocka_unit_test(test_batched),
		cmocka_unit_test(test_k_blocks),
		cmocka_unit_test(test_gemm),
		cmocka_unit_test(test_gemm_feature_blocks),
	};
	int rc;

	if (hp_pool_create(2, &pool2) < 0)
		return 1;
	rc = cmocka_run_group_tests(tests, NULL, NULL);
	hp_pool_destroy(pool2);
	return rc;
}
