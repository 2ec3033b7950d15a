/* Gemm and MatMul against plain triple loops: every transA/transB, alpha,
 * beta and C broadcast form; MatMul 1-D promotion, 2-D, batched and
 * broadcast batch dims; MatMulAcc; determinism with a pool; shape errors.
 * Split invariance (kernels/gemm_tile.h): a product cut at tile boundaries
 * into blocks that carry the whole's tiling (output columns concatenated,
 * reduction blocks chained) gives bitwise the whole's result, and so do 1
 * and 2 threads.  tk_gemm_grad_dw (a pipeline's weight gradient over all
 * micro-batches' rows) in every transA/transB layout against a loop.
 * Gemm with pack_b (gemm_panels.h: op(B) packed once, few rows) against
 * the same loops, and a packed weight changed in place: the next epoch
 * multiplies by the new values. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "hpdlf/error.h"
#include "kernels/blas.h"
#include "kernels/gemm_grad.h"
#include "kernels/gemm_panels.h"
#include "kernels/gemm_tile.h"
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

static int64_t pack_epoch; /* > 0: gemm_case's Gemm takes pack_b */

static void gemm_case(int64_t m, int64_t k, int64_t n, int ta, int tb, float alpha, float beta, int ccode)
{
	int64_t ad[2] = { ta ? k : m, ta ? m : k }, bd[2] = { tb ? n : k, tb ? k : n }, yd[2] = { m, n }, cs0, cs1;
	struct hp_tensor in[3], out, ref;
	struct hp_attr attrs[5] = { kt_int("transA", ta), kt_int("transB", tb), kt_float("alpha", alpha),
				    kt_float("beta", beta), kt_int("pack_b", pack_epoch) };
	struct kt_case c = { .op = "Gemm", .nin = ccode ? 3 : 2, .in = in, .nattrs = pack_epoch ? 5 : 4, .attrs = attrs,
			     .nout = 1 };
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

/* ---- split invariance --------------------------------------------------- */

/* Rows [r0, r0 + rn) or columns [c0, c0 + cn) of a row-major matrix (the
 * last two dims of t; leading dims kept). */
static struct hp_tensor sub(const struct hp_tensor *t, int rows, int64_t a0, int64_t an)
{
	struct hp_shape s = t->shape;
	int r = s.rank;
	int64_t nr = r > 1 ? s.dims[r - 2] : 1, nc = s.dims[r - 1], outer = hp_shape_numel(&s) / (nr * nc);
	struct hp_tensor o;

	s.dims[rows ? r - 2 : r - 1] = an;
	o = kt_tensor(HP_F32, s.rank, s.dims);
	for (int64_t b = 0; b < outer; b++)
		for (int64_t i = 0; i < (rows ? an : nr); i++)
			for (int64_t j = 0; j < (rows ? nc : an); j++)
				((float *)o.data)[(b * (rows ? an : nr) + i) * (rows ? nc : an) + j] =
					at(t, (b * nr + i + (rows ? a0 : 0)) * nc + j + (rows ? 0 : a0));
	return o;
}

struct prod {
	const char *op, *domain;
	int ta, tb;
	float alpha, beta;
	struct hp_pool *pool;
	const int64_t *tiles; /* NULL: none */
};

static struct hp_tensor run_prod(const struct prod *p, struct hp_tensor *a, struct hp_tensor *b,
				 struct hp_tensor *c)
{
	struct hp_tensor in[3] = { *a, *b }, out;
	struct hp_attr at[5];
	int na = 0;

	if (!strcmp(p->op, "Gemm")) {
		at[na++] = kt_int("transA", p->ta);
		at[na++] = kt_int("transB", p->tb);
		at[na++] = kt_float("alpha", p->alpha);
		at[na++] = kt_float("beta", p->beta);
	}
	if (p->tiles)
		at[na++] = kt_ints(HP_GEMM_TILE_ATTR, 3, p->tiles);
	if (c)
		in[2] = *c;
	struct kt_case kc = { .op = p->op, .domain = p->domain, .nin = c ? 3 : 2, .in = in, .nattrs = na,
			      .attrs = at, .nout = 1, .pool = p->pool };
	if (kt_run(&kc, &out) < 0)
		fail_msg("%s: %s", p->op, hp_errmsg());
	return out;
}

static void assert_bitwise(const struct hp_tensor *a, const struct hp_tensor *b, const char *what)
{
	if (!hp_shape_equal(&a->shape, &b->shape) || memcmp(a->data, b->data, hp_tensor_bytes(a)))
		fail_msg("%s: not bitwise equal", what);
}

/* Gemm(transB=1) cut along output features at `cuts` (multiples of nb):
 * each block's columns are those of the whole. */
static void feature_case(int64_t m, int64_t k, int64_t n, const int64_t *cuts, int nc, struct hp_pool *pool)
{
	struct hp_gemm_tiles t;
	int64_t ad[2] = { m, k }, bd[2] = { n, k }, cd[1] = { n }, tv[3];
	struct hp_tensor a = kt_tensor(HP_F32, 2, ad), b = kt_tensor(HP_F32, 2, bd), c = kt_tensor(HP_F32, 1, cd);
	struct prod p = { "Gemm", NULL, 0, 1, 0.75f, 1.5f, pool, NULL };

	hp_gemm_tiles(m, n, k, &t);
	tv[0] = t.mb, tv[1] = t.nb, tv[2] = t.kb;
	kt_fill_random(&a, 11, -1, 1);
	kt_fill_random(&b, 12, -1, 1);
	kt_fill_random(&c, 13, -1, 1);
	struct hp_tensor whole = run_prod(&p, &a, &b, &c);
	p.tiles = tv;
	for (int i = 0; i + 1 < nc; i++) {
		assert_int_equal(cuts[i] % t.nb, 0);
		struct hp_tensor bj = sub(&b, 1, cuts[i], cuts[i + 1] - cuts[i]);
		struct hp_tensor cj = { .dtype = HP_F32, .shape = { .rank = 1, .dims = { cuts[i + 1] - cuts[i] } },
					.data = (float *)c.data + cuts[i] };
		struct hp_tensor yj = run_prod(&p, &a, &bj, &cj), wj = sub(&whole, 0, cuts[i], cuts[i + 1] - cuts[i]);
		assert_bitwise(&yj, &wj, "Gemm feature block");
		hp_tensor_free(&bj);
		hp_tensor_free(&yj);
		hp_tensor_free(&wj);
	}
	hp_tensor_free(&whole);
	hp_tensor_free(&a);
	hp_tensor_free(&b);
	hp_tensor_free(&c);
}

/* A cut along K at `cuts` (multiples of kb): block 0 with C, block j adding
 * into block j - 1's result (Gemm beta 1, MatMulAcc) gives the whole. */
static void reduce_case(const char *op, int ra, const int64_t *ad, int64_t n, int ta, const int64_t *cuts, int nc,
			struct hp_pool *pool)
{
	int gemm = !strcmp(op, "Gemm");
	int64_t k = gemm && ta ? ad[0] : ad[ra - 1], m;
	int64_t bd[2] = { k, n }, cd[2], tv[3];
	struct hp_gemm_tiles t;
	struct hp_tensor a = kt_tensor(HP_F32, ra, ad), b = kt_tensor(HP_F32, 2, bd), c, s = { 0 };
	struct prod p = { op, NULL, ta, 0, gemm ? 1.25f : 1, 0.5f, pool, NULL };

	m = 1;
	for (int i = 0; i < ra; i++)
		m *= ad[i];
	m /= k;
	cd[0] = m, cd[1] = n;
	c = kt_tensor(HP_F32, 2, cd);
	hp_gemm_tiles(m, n, k, &t);
	tv[0] = t.mb, tv[1] = t.nb, tv[2] = t.kb;
	kt_fill_random(&a, 21, -1, 1);
	kt_fill_random(&b, 22, -1, 1);
	kt_fill_random(&c, 23, -1, 1);
	struct hp_tensor whole = run_prod(&p, &a, &b, gemm ? &c : NULL);
	p.tiles = tv;
	for (int i = 0; i + 1 < nc; i++) {
		int64_t kn = cuts[i + 1] - cuts[i];
		struct hp_tensor aj = sub(&a, gemm && ta, cuts[i], kn), bj = sub(&b, 1, cuts[i], kn), sj;
		assert_int_equal(cuts[i] % t.kb, 0);
		if (i > 0) {
			p.beta = 1;
			if (!gemm)
				p.op = "MatMulAcc", p.domain = "ai.hpdlf";
		}
		sj = run_prod(&p, &aj, &bj, i > 0 ? &s : gemm ? &c : NULL);
		hp_tensor_free(&s);
		s = sj;
		hp_tensor_free(&aj);
		hp_tensor_free(&bj);
	}
	assert_bitwise(&s, &whole, op);
	hp_tensor_free(&s);
	hp_tensor_free(&whole);
	hp_tensor_free(&a);
	hp_tensor_free(&b);
	hp_tensor_free(&c);
}

static void test_split_invariance(void **state)
{
	struct hp_pool *pool;

	(void)state;
	assert_int_equal(hp_pool_create(2, &pool), 0);
	for (int th = 0; th < 2; th++) {
		struct hp_pool *pl = th ? pool : NULL;
		/* N 250: nb 32, the last tile 26 wide; M 300: two row tiles (products
		 * above 16 MFLOP run on the pool) */
		feature_case(300, 256, 250, D(0, 96, 160, 250), 4, pl);
		feature_case(64, 256, 256, D(0, 32, 64, 96, 128, 160, 192, 224, 256), 9, pl);
		/* K 600: kb 64; blocks of one and of several K tiles */
		reduce_case("Gemm", 2, D(70, 600), 90, 0, D(0, 64, 256, 448, 600), 5, pl);
		reduce_case("Gemm", 2, D(600, 70), 90, 1, D(0, 192, 600), 3, pl);
		reduce_case("MatMul", 3, D(3, 40, 600), 200, 0, D(0, 128, 192, 600), 4, pl);
		reduce_case("MatMul", 2, D(16, 2048), 64, 0, D(0, 256, 512, 1792, 2048), 5, pl);
	}
	hp_pool_destroy(pool);
}

/* 1 and 2 threads give the same bits, for products with many tiles: as a
 * session with --threads 1 (BLAS on 1 thread, no pool) and 2 (both 2). */
static void test_thread_invariance(void **state)
{
	static const int64_t shapes[][3] = { { 600, 300, 520 }, { 64, 256, 256 }, { 5, 7, 3 }, { 1030, 300, 40 },
					     { 64, 2048, 2048 } };
	struct hp_pool *pool;

	(void)state;
	assert_int_equal(hp_pool_create(2, &pool), 0);
	for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
		for (int tb = 0; tb < 2; tb++) {
			int64_t m = shapes[i][0], k = shapes[i][1], n = shapes[i][2];
			int64_t ad[2] = { m, k }, bd[2] = { tb ? n : k, tb ? k : n };
			struct hp_tensor a = kt_tensor(HP_F32, 2, ad), b = kt_tensor(HP_F32, 2, bd);
			struct prod p = { "Gemm", NULL, 0, tb, 1, 1, NULL, NULL };
			kt_fill_random(&a, 31, -1, 1);
			kt_fill_random(&b, 32, -1, 1);
			hp_blas_threads(1);
			struct hp_tensor y1 = run_prod(&p, &a, &b, NULL);
			hp_blas_threads(2);
			p.pool = pool;
			struct hp_tensor y2 = run_prod(&p, &a, &b, NULL);
			assert_bitwise(&y1, &y2, "Gemm 1 vs 2 threads");
			p.op = "MatMul";
			if (!tb) {
				struct hp_tensor y3 = run_prod(&p, &a, &b, NULL);
				p.pool = NULL;
				hp_blas_threads(1);
				struct hp_tensor y4 = run_prod(&p, &a, &b, NULL);
				hp_blas_threads(2);
				assert_bitwise(&y3, &y4, "MatMul 1 vs 2 threads");
				hp_tensor_free(&y3);
				hp_tensor_free(&y4);
			}
			hp_tensor_free(&y1);
			hp_tensor_free(&y2);
			hp_tensor_free(&a);
			hp_tensor_free(&b);
		}
	hp_pool_destroy(pool);
}

/* MatMulAcc = C + A B (naive loops), batched; C must have Y's shape. */
static void test_matmul_acc(void **state)
{
	int64_t ad[3] = { 2, 5, 7 }, bd[3] = { 2, 7, 4 }, cd[3] = { 2, 5, 4 };
	struct hp_tensor a = kt_tensor(HP_F32, 3, ad), b = kt_tensor(HP_F32, 3, bd), c = kt_tensor(HP_F32, 3, cd);
	struct hp_tensor ref = kt_tensor(HP_F32, 3, cd), out;
	struct prod p = { "MatMulAcc", "ai.hpdlf", 0, 0, 1, 1, NULL, NULL };

	(void)state;
	kt_fill_random(&a, 41, -1, 1);
	kt_fill_random(&b, 42, -1, 1);
	kt_fill_random(&c, 43, -1, 1);
	for (int64_t q = 0; q < 2; q++)
		for (int64_t i = 0; i < 5; i++)
			for (int64_t j = 0; j < 4; j++) {
				double s = at(&c, (q * 5 + i) * 4 + j);
				for (int64_t l = 0; l < 7; l++)
					s += (double)at(&a, (q * 5 + i) * 7 + l) * at(&b, (q * 7 + l) * 4 + j);
				((float *)ref.data)[(q * 5 + i) * 4 + j] = (float)s;
			}
	out = run_prod(&p, &a, &b, &c);
	check_close(&out, &ref, "MatMulAcc");
	hp_tensor_free(&out);
	hp_tensor_free(&c);
	cd[2] = 1;
	c = kt_tensor(HP_F32, 3, cd);
	struct hp_tensor in[3] = { a, b, c };
	struct kt_case kc = { .op = "MatMulAcc", .domain = "ai.hpdlf", .nin = 3, .in = in, .nout = 1 };
	assert_int_equal(kt_run(&kc, &out), HP_ESHAPE);
	assert_non_null(strstr(hp_errmsg(), "Y's shape"));
	int64_t bad[2] = { 1, 2 };
	struct hp_attr at1 = kt_ints(HP_GEMM_TILE_ATTR, 2, bad);
	kc = (struct kt_case){ .op = "MatMul", .nin = 2, .in = in, .nattrs = 1, .attrs = &at1, .nout = 1 };
	assert_int_equal(kt_run(&kc, &out), HP_EMODEL);
	hp_tensor_free(&a);
	hp_tensor_free(&b);
	hp_tensor_free(&c);
	hp_tensor_free(&ref);
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

/* dW of Y = alpha op(X) op(W): op(X) rows x k, dY rows x n; dW is k x n
 * (n x k when tb), from a naive loop in double. */
static void grad_dw_case(int64_t rows, int64_t k, int64_t n, int ta, int tb, float alpha)
{
	float *x = malloc((size_t)(rows * k) * sizeof *x), *dy = malloc((size_t)(rows * n) * sizeof *dy);
	float *dw = malloc((size_t)(k * n) * sizeof *dw);
	double worst = 0;

	for (int64_t i = 0; i < rows * k; i++)
		x[i] = (float)((i * 37 % 101) - 50) / 50.0f;
	for (int64_t i = 0; i < rows * n; i++)
		dy[i] = (float)((i * 53 % 89) - 44) / 44.0f;
	for (int64_t i = 0; i < k * n; i++)
		dw[i] = 1e30f; /* overwritten, never added to */
	tk_gemm_grad_dw(x, dy, dw, rows, k, n, ta, tb, alpha);
	for (int64_t a = 0; a < k; a++)
		for (int64_t b = 0; b < n; b++) {
			double ref = 0, got = dw[tb ? b * k + a : a * n + b];
			for (int64_t r = 0; r < rows; r++)
				ref += (double)(ta ? x[a * rows + r] : x[r * k + a]) * dy[r * n + b];
			ref *= alpha;
			if (fabs(got - ref) / (fabs(ref) + 1) > worst)
				worst = fabs(got - ref) / (fabs(ref) + 1);
		}
	if (worst > 1e-5)
		fail_msg("tk_gemm_grad_dw rows %lld k %lld n %lld ta %d tb %d: error %g", (long long)rows, (long long)k,
			 (long long)n, ta, tb, worst);
	free(x);
	free(dy);
	free(dw);
}

static void test_grad_dw(void **state)
{
	(void)state;
	for (int ta = 0; ta < 2; ta++)
		for (int tb = 0; tb < 2; tb++) {
			grad_dw_case(48, 7, 5, ta, tb, 1.0f);
			grad_dw_case(33, 20, 17, ta, tb, 0.5f);
		}
}

static void test_gemm_packed(void **state)
{
	static const int64_t ms[] = { 1, 5, 6, 7, 13, 16, 64 }, ns[] = { 6, 16, 17, 40 };

	(void)state;
	if (!tk_panels_ok())
		skip();
	pack_epoch = 1;
	for (int t = 0; t < 4; t++)
		for (size_t i = 0; i < sizeof ms / sizeof *ms; i++)
			for (size_t j = 0; j < sizeof ns / sizeof *ns; j++)
				gemm_case(ms[i], 7 + 26 * (int64_t)(i & 1), ns[j], t & 1, t >> 1, i & 2 ? 0.5f : 1.0f,
					  -1.5f, (int)(j % 3) * 2 + 1);
	gemm_case(16, 1024, 96, 0, 0, 1, 1, 5);
	gemm_case(16, 1027, 96, 0, 1, 1, 1, 5); /* transposed B packed 8 x 8, a tail of 3 */
	pack_epoch = 0;
}

/* A packed weight changed in place is packed again at the next epoch. */
static void test_panels_epoch(void **state)
{
	enum { M = 9, K = 20, N = 35 };
	float a[M * K], b[K * N], y[M * N];
	struct tk_panels pk = { 0 };
	double worst = 0;

	(void)state;
	if (!tk_panels_ok())
		skip();
	for (int i = 0; i < M * K; i++)
		a[i] = (float)(i % 13) - 6;
	for (int e = 1; e <= 2; e++) {
		for (int i = 0; i < K * N; i++)
			b[i] = (float)((i * e) % 11) - 5;
		assert_int_equal(tk_panels_pack(&pk, b, N, 1, K, N, e), 0);
		assert_int_equal(tk_panels_mul(&pk, a, K, 1, M, 1.0f, y, N, 0, NULL), 0);
		for (int i = 0; i < M; i++)
			for (int j = 0; j < N; j++) {
				double r = 0;
				for (int q = 0; q < K; q++)
					r += (double)a[i * K + q] * b[q * N + j];
				worst = fabs(r - y[i * N + j]) > worst ? fabs(r - y[i * N + j]) : worst;
			}
		if (worst > 1e-3)
			fail_msg("epoch %d: packed product off by %g", e, worst);
	}
	tk_panels_free(&pk);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_gemm_all),
		cmocka_unit_test(test_matmul_all),
		cmocka_unit_test(test_determinism),
		cmocka_unit_test(test_split_invariance),
		cmocka_unit_test(test_thread_invariance),
		cmocka_unit_test(test_matmul_acc),
		cmocka_unit_test(test_errors),
		cmocka_unit_test(test_grad_dw),
		cmocka_unit_test(test_gemm_packed),
		cmocka_unit_test(test_panels_epoch),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
