/* Gemm's and MatMul's own FMA product (kernels/gemm_fma.c).
 *
 * Checked against two references written here: a double-precision loop
 * (tolerance), and the definition the out-of-core paths rely on, one
 * float chain per output, y = fmaf(A(i, k), B(k, j), y) for k = 0..K-1 in
 * order from beta C (or 0), computed with the C library's fmaf, which
 * must match bit for bit.  Then the properties that follow from it, each
 * bitwise: 1 against 2 threads, row bands, output-column blocks and
 * reduction blocks chained through C (exec/split_weight.c), the fused
 * epilogue against the product then one pass of it, and MatMul / Gemm
 * nodes (kernels/gemm.c) against the chain.  Shapes: M, N, K around the
 * 6 x 16 micro-tile, the 64-column unit and the 256-k chunk, K = 0 and
 * 1, transposed operands, C absent, scalar, a row, a column, full, beta
 * 0.5, batched problems with a broadcast B. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "hpdlf/error.h"
#include "kernels/gemm_fma.h"
#include "tests/kernels/harness.h"

static struct hp_pool *pool2;

struct gcase {
	int64_t m, n, k;
	int ta, tb;
	int cform;      /* 0 none, 1 scalar, 2 row [N], 3 column [M, 1], 4 full */
	float beta;
};

struct gdata {
	const struct gcase *c;
	float *a, *b, *cm;
	int64_t lda, ldb, cs0, cs1;
};

static float *rnd(int64_t n, unsigned seed)
{
	float *p = malloc((size_t)(n ? n : 1) * sizeof *p);

	assert_non_null(p);
	for (int64_t i = 0; i < n; i++) {
		seed = seed * 1103515245u + 12345u;
		p[i] = (float)((seed >> 8) & 0xffff) / 32768.0f - 1.0f;
	}
	return p;
}

static void gdata_make(const struct gcase *c, struct gdata *d)
{
	static const int64_t ce[5][2] = { { 0, 0 }, { 1, 1 }, { 1, -1 }, { -1, 1 }, { -1, -1 } };
	int64_t cm = ce[c->cform][0] < 0 ? c->m : 1, cn = ce[c->cform][1] < 0 ? c->n : 1;

	d->c = c;
	d->a = rnd(c->m * c->k, 7);
	d->b = rnd(c->k * c->n, 9);
	d->cm = c->cform ? rnd(cm * cn, 11) : NULL;
	d->lda = c->ta ? c->m : c->k;
	d->ldb = c->tb ? c->k : c->n;
	d->cs0 = cm == 1 ? 0 : cn;
	d->cs1 = cn == 1 ? 0 : 1;
}

static void gdata_free(struct gdata *d)
{
	free(d->a);
	free(d->b);
	free(d->cm);
}

static float a_at(const struct gdata *d, int64_t i, int64_t k)
{
	return d->c->ta ? d->a[k * d->lda + i] : d->a[i * d->lda + k];
}

static float b_at(const struct gdata *d, int64_t k, int64_t j)
{
	return d->c->tb ? d->b[j * d->ldb + k] : d->b[k * d->ldb + j];
}

static float c_start(const struct gdata *d, int64_t i, int64_t j)
{
	return d->cm ? d->c->beta * d->cm[i * d->cs0 + j * d->cs1] : 0.0f;
}

/* The product's description over rows [i0, i0 + mi), columns [j0, j0 +
 * nj) and reduction [k0, k0 + kk) of d, into y (mi x nj); C from d, or
 * (chain) y's previous contents with beta 1. */
static struct hp_fma_prod prod_of(const struct gdata *d, int64_t i0, int64_t mi, int64_t j0, int64_t nj,
				  int64_t k0, int64_t kk, float *y, const float *chain)
{
	const struct gcase *c = d->c;
	struct hp_fma_prod p = {
		.m = mi, .n = nj, .k = kk, .nprob = 1, .y = y,
		.ra = c->ta ? 1 : d->lda, .rk = c->ta ? d->lda : 1,
		.sk = c->tb ? 1 : d->ldb, .sj = c->tb ? d->ldb : 1,
		.beta = c->beta, .c = d->cm, .cs0 = d->cs0, .cs1 = d->cs1,
	};

	p.a = d->a + i0 * p.ra + k0 * p.rk;
	p.b = d->b + k0 * p.sk + j0 * p.sj;
	if (d->cm)
		p.c = d->cm + i0 * d->cs0 + j0 * d->cs1;
	if (chain) {
		p.c = chain;
		p.cs0 = nj;
		p.cs1 = 1;
		p.beta = 1.0f;
	}
	return p;
}

static float *run_whole(const struct gdata *d, struct hp_pool *pool)
{
	float *y = malloc((size_t)(d->c->m * d->c->n + 1) * sizeof *y);
	struct hp_fma_prod p = prod_of(d, 0, d->c->m, 0, d->c->n, 0, d->c->k, y, NULL);

	assert_non_null(y);
	hp_fma_gemm(&p, pool);
	return y;
}

static void check_refs(const struct gdata *d, const float *y, const char *what)
{
	const struct gcase *c = d->c;

	for (int64_t i = 0; i < c->m; i++)
		for (int64_t j = 0; j < c->n; j++) {
			float f = c_start(d, i, j);
			double s = f, mag = fabs(f);
			for (int64_t k = 0; k < c->k; k++) {
				f = fmaf(a_at(d, i, k), b_at(d, k, j), f);
				s += (double)a_at(d, i, k) * b_at(d, k, j);
				mag += fabs((double)a_at(d, i, k) * b_at(d, k, j));
			}
			float got = y[i * c->n + j];
			if (fabs(got - s) > 1e-5 * (mag + 1))
				fail_msg("%s %" PRId64 "x%" PRId64 "x%" PRId64 " ta %d tb %d C %d: (%" PRId64 ", %" PRId64
					 ") %g against %g in double", what, c->m, c->n, c->k, c->ta, c->tb, c->cform, i, j,
					 got, s);
			if (memcmp(&got, &f, sizeof f))
				fail_msg("%s %" PRId64 "x%" PRId64 "x%" PRId64 " ta %d tb %d C %d: (%" PRId64 ", %" PRId64
					 ") %.9g is not the fmaf chain's %.9g", what, c->m, c->n, c->k, c->ta, c->tb,
					 c->cform, i, j, got, f);
		}
}

static void assert_same(const float *a, const float *b, int64_t n, const char *what, const struct gcase *c)
{
	if (memcmp(a, b, (size_t)n * sizeof *a))
		fail_msg("%s: %" PRId64 "x%" PRId64 "x%" PRId64 " ta %d tb %d C %d not bitwise the whole", what,
			 c->m, c->n, c->k, c->ta, c->tb, c->cform);
}

/* Row bands and column blocks at cuts not on any tile, each bitwise its
 * part of the whole. */
static void check_blocks(const struct gdata *d, const float *whole)
{
	const struct gcase *c = d->c;
	int64_t i0 = c->m / 3, j0 = c->n * 2 / 5, mi = c->m - i0, nj = c->n - j0;
	float *y = malloc((size_t)(c->m * c->n + 1) * sizeof *y), *w = malloc((size_t)(c->m * c->n + 1) * sizeof *w);
	struct hp_fma_prod p;

	assert_non_null(y);
	assert_non_null(w);
	p = prod_of(d, i0, mi, 0, c->n, 0, c->k, y, NULL);
	hp_fma_gemm(&p, pool2);
	assert_same(y, whole + i0 * c->n, mi * c->n, "row band", c);
	p = prod_of(d, 0, c->m, j0, nj, 0, c->k, y, NULL);
	hp_fma_gemm(&p, NULL);
	for (int64_t i = 0; i < c->m; i++)
		memcpy(w + i * nj, whole + i * c->n + j0, (size_t)nj * sizeof *w);
	assert_same(y, w, c->m * nj, "column block", c);
	free(y);
	free(w);
}

/* Reduction blocks [0, k1), [k1, k2), [k2, K), each starting from the
 * previous block's result as C with beta 1 (MatMulAcc, chained Gemm). */
static void check_chain(const struct gdata *d, const float *whole)
{
	const struct gcase *c = d->c;
	int64_t cut[4] = { 0, c->k / 3, c->k / 3 + (c->k + 1) / 2 - c->k / 4, c->k };
	float *y[2];
	int cur = 0;

	for (int s = 0; s < 2; s++) {
		y[s] = malloc((size_t)(c->m * c->n + 1) * sizeof *y[s]);
		assert_non_null(y[s]);
	}
	for (int b = 0; b < 3; b++, cur ^= 1) {
		struct hp_fma_prod p = prod_of(d, 0, c->m, 0, c->n, cut[b], cut[b + 1] - cut[b], y[cur],
					       b ? y[cur ^ 1] : NULL);
		hp_fma_gemm(&p, b == 1 ? pool2 : NULL);
	}
	assert_same(y[cur ^ 1], whole, c->m * c->n, "chained reduction blocks", c);
	free(y[0]);
	free(y[1]);
}

/* op(B) packed once (hp_fma_pack_b, exec's in-core weights): the same
 * chains, on 1 and 2 threads; the panels hold op(B) and zeros past N. */
static void check_packed(const struct gdata *d, const float *whole)
{
	const struct gcase *c = d->c;
	int64_t nf = hp_fma_packed_floats(c->k, c->n);
	float *bp = malloc((size_t)(nf + 1) * sizeof *bp), *y = malloc((size_t)(c->m * c->n + 1) * sizeof *y);
	struct hp_fma_prod p = prod_of(d, 0, c->m, 0, c->n, 0, c->k, y, NULL);

	assert_non_null(bp);
	assert_non_null(y);
	assert_int_equal(nf, (c->n + 15) / 16 * 16 * c->k);
	hp_fma_pack_b(d->b, p.sk, p.sj, c->k, c->n, bp);
	for (int64_t q = 0; q * 16 < c->n; q++)
		for (int64_t k = 0; k < c->k; k++)
			for (int64_t j = 0; j < 16; j++) {
				float want = q * 16 + j < c->n ? b_at(d, k, q * 16 + j) : 0.0f;
				if (memcmp(&bp[(q * c->k + k) * 16 + j], &want, sizeof want))
					fail_msg("packed B (%" PRId64 ", %" PRId64 ") of panel %" PRId64 " is not op(B)'s",
						 k, j, q);
			}
	p.bpk = bp;
	p.b = NULL;
	for (int t = 0; t < 2; t++) {
		memset(y, 0, (size_t)(c->m * c->n) * sizeof *y);
		hp_fma_gemm(&p, t ? pool2 : NULL);
		assert_same(y, whole, c->m * c->n, t ? "packed B, 2 threads" : "packed B", c);
	}
	free(bp);
	free(y);
}

static void gcase_run(const struct gcase *c)
{
	struct gdata d;
	float *y1, *y2;

	gdata_make(c, &d);
	y1 = run_whole(&d, NULL);
	y2 = run_whole(&d, pool2);
	check_refs(&d, y1, "one thread");
	assert_same(y2, y1, c->m * c->n, "2 threads", c);
	/* the AVX2 tiles alone (no AVX-512 pairs of panels): the same bits */
	hp_fma_set_wide(0);
	free(y2);
	y2 = run_whole(&d, pool2);
	hp_fma_set_wide(1);
	assert_same(y2, y1, c->m * c->n, "AVX2 tiles only", c);
	check_packed(&d, y1);
	if (c->m > 2 && c->n > 2) {
		check_blocks(&d, y1);
		check_chain(&d, y1);
	}
	free(y1);
	free(y2);
	gdata_free(&d);
}

static void test_shapes(void **state)
{
	static const struct gcase cs[] = {
		{ 1, 1, 1, 0, 0, 0, 1 },      { 7, 17, 1, 0, 0, 2, 1 },    { 6, 16, 5, 0, 0, 0, 1 },
		{ 13, 33, 70, 0, 0, 4, 1 },   { 5, 100, 300, 0, 1, 2, 1 }, { 31, 65, 257, 1, 0, 3, 0.5f },
		{ 64, 128, 128, 0, 0, 2, 1 }, { 70, 200, 530, 1, 1, 1, 1 }, { 256, 130, 64, 0, 1, 4, 0.5f },
		{ 12, 48, 1000, 0, 0, 0, 1 }, { 9, 9, 0, 0, 0, 0, 1 },     { 9, 9, 0, 0, 0, 4, 0.5f },
		{ 100, 7, 40, 1, 1, 3, 1 },   { 3, 300, 20, 0, 1, 1, 0 },
	};

	(void)state;
	for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++)
		gcase_run(&cs[i]);
}

/* Batched problems (MatMul's, not folded): A per problem, B shared by
 * every other pair (offsets), C none; each problem its own chain. */
static void test_batched(void **state)
{
	const int64_t np = 4, m = 20, n = 37, k = 45;
	float *a = rnd(np * m * k, 3), *b = rnd(2 * k * n, 5), *y1 = malloc(np * m * n * sizeof *y1),
	      *y2 = malloc(np * m * n * sizeof *y2);
	int64_t aoff[4], boff[4];

	(void)state;
	assert_non_null(y1);
	assert_non_null(y2);
	for (int64_t q = 0; q < np; q++) {
		aoff[q] = q * m * k;
		boff[q] = q / 2 * k * n;
	}
	struct hp_fma_prod p = { .m = m, .n = n, .k = k, .nprob = np, .a = a, .b = b, .ra = k, .rk = 1, .sk = n,
				 .sj = 1, .aoff = aoff, .boff = boff, .beta = 1, .y = y1 };
	hp_fma_gemm(&p, NULL);
	p.y = y2;
	hp_fma_gemm(&p, pool2);
	assert_memory_equal(y1, y2, np * m * n * sizeof *y1);
	for (int64_t q = 0; q < np; q++)
		for (int64_t i = 0; i < m; i++)
			for (int64_t j = 0; j < n; j++) {
				float f = 0;
				for (int64_t t = 0; t < k; t++)
					f = fmaf(a[aoff[q] + i * k + t], b[boff[q] + t * n + j], f);
				if (memcmp(&f, &y1[(q * m + i) * n + j], sizeof f))
					fail_msg("problem %" PRId64 " (%" PRId64 ", %" PRId64 "): %.9g, chain %.9g", q, i,
						 j, y1[(q * m + i) * n + j], f);
			}
	free(a);
	free(b);
	free(y1);
	free(y2);
}

/* The epilogue inside the units: bitwise the product, then one pass of
 * hp_epi_span over the whole output (what the unfused nodes compute). */
static void test_epilogue(void **state)
{
	const int64_t m = 50, n = 150, k = 300;
	float *a = rnd(m * k, 21), *b = rnd(k * n, 22), *bias = rnd(n, 23), *full = rnd(m * n, 24);
	float *y = malloc(m * n * sizeof *y), *r = malloc(m * n * sizeof *r);
	struct hp_epi es[3] = {
		{ .act = HP_EPI_GELU, .add = HP_EPI_ADD_MID, .mid = n, .inner = 1 },
		{ .act = HP_EPI_RELU, .add = HP_EPI_ADD_FULL },
		{ .act = HP_EPI_GELU_TANH, .add = HP_EPI_ADD_NONE },
	};
	const float *adds[3] = { bias, full, NULL };

	(void)state;
	assert_non_null(y);
	assert_non_null(r);
	for (int e = 0; e < 3; e++) {
		struct hp_fma_prod p = { .m = m, .n = n, .k = k, .nprob = 1, .a = a, .b = b, .ra = k, .rk = 1, .sk = n,
					 .sj = 1, .beta = 1, .y = r };
		hp_fma_gemm(&p, NULL);
		hp_epi_span(&es[e], r, adds[e], 0, m * n);
		p.y = y;
		p.epi = &es[e];
		p.addend = adds[e];
		hp_fma_gemm(&p, pool2);
		if (memcmp(y, r, m * n * sizeof *y))
			fail_msg("epilogue %d: fused differs from the product then the epilogue", e);
	}
	free(a);
	free(b);
	free(bias);
	free(full);
	free(y);
	free(r);
}

/* The threads share a product's units by claims from both ends (a thread
 * done with its own takes the other's tail): 300 runs on 2 threads, each
 * bitwise the 1-thread result, whichever thread took which units. */
static void test_claims(void **state)
{
	const int64_t m = 120, n = 256, k = 128;
	float *a = rnd(m * k, 31), *b = rnd(k * n, 32), *y1 = malloc(m * n * sizeof *y1), *y2 = malloc(m * n * sizeof *y2);
	struct hp_fma_prod p = { .m = m, .n = n, .k = k, .nprob = 1, .a = a, .b = b, .ra = k, .rk = 1, .sk = n,
				 .sj = 1, .beta = 1, .y = y1 };

	(void)state;
	assert_non_null(y1);
	assert_non_null(y2);
	hp_fma_gemm(&p, NULL);
	p.y = y2;
	for (int it = 0; it < 300; it++) {
		memset(y2, 0xff, m * n * sizeof *y2);
		hp_fma_gemm(&p, pool2);
		if (memcmp(y1, y2, m * n * sizeof *y1))
			fail_msg("run %d on 2 threads differs from 1 thread", it);
	}
	free(a);
	free(b);
	free(y1);
	free(y2);
}

/* MatMul (batch folded, and batched) and Gemm (transB, bias row) nodes:
 * the kernels' results are the chains. */
static void test_nodes(void **state)
{
	struct hp_tensor in[3], y;
	struct hp_attr tb = kt_int("transB", 1);

	(void)state;
	in[0] = kt_tensor(HP_F32, 3, (int64_t[]){ 2, 33, 70 });
	in[1] = kt_tensor(HP_F32, 2, (int64_t[]){ 70, 45 });
	kt_fill_random(&in[0], 1, -1, 1);
	kt_fill_random(&in[1], 2, -1, 1);
	struct kt_case mm = { .op = "MatMul", .nin = 2, .in = in, .nout = 1, .pool = pool2 };
	assert_int_equal(kt_run(&mm, &y), 0);
	const float *pa = in[0].data, *pb = in[1].data, *py = y.data;
	for (int64_t i = 0; i < 66; i++)
		for (int64_t j = 0; j < 45; j++) {
			float f = 0;
			for (int64_t t = 0; t < 70; t++)
				f = fmaf(pa[i * 70 + t], pb[t * 45 + j], f);
			if (memcmp(&f, &py[i * 45 + j], sizeof f))
				fail_msg("MatMul (%" PRId64 ", %" PRId64 "): %.9g, chain %.9g", i, j, py[i * 45 + j], f);
		}
	hp_tensor_free(&y);
	hp_tensor_free(&in[1]);
	in[1] = kt_tensor(HP_F32, 2, (int64_t[]){ 45, 70 });
	in[2] = kt_tensor(HP_F32, 1, (int64_t[]){ 45 });
	kt_fill_random(&in[1], 3, -1, 1);
	kt_fill_random(&in[2], 4, -1, 1);
	in[0].shape = (struct hp_shape){ .rank = 2, .dims = { 66, 70 } };
	struct kt_case gm = { .op = "Gemm", .nin = 3, .in = in, .nattrs = 1, .attrs = &tb, .nout = 1, .pool = pool2 };
	assert_int_equal(kt_run(&gm, &y), 0);
	pb = in[1].data;
	py = y.data;
	for (int64_t i = 0; i < 66; i++)
		for (int64_t j = 0; j < 45; j++) {
			float f = ((const float *)in[2].data)[j];
			for (int64_t t = 0; t < 70; t++)
				f = fmaf(pa[i * 70 + t], pb[j * 70 + t], f);
			if (memcmp(&f, &py[i * 45 + j], sizeof f))
				fail_msg("Gemm (%" PRId64 ", %" PRId64 "): %.9g, chain %.9g", i, j, py[i * 45 + j], f);
		}
	hp_tensor_free(&y);
	for (int i = 0; i < 3; i++)
		hp_tensor_free(&in[i]);
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

/* MatMul and Gemm (transB, bias) nodes whose B is packed (exec's
 * fuse_pack.c, attribute HP_GEMM_PACKED_ATTR): bitwise the same nodes on
 * B as it is; a B of another shape is refused. */
static void test_packed_nodes(void **state)
{
	const int64_t m = 33, k = 270, n = 45;
	struct hp_tensor in[3], pk, y1, y2;
	struct hp_attr at[2] = { kt_int("transB", 1), kt_int(HP_GEMM_PACKED_ATTR, n) };

	(void)state;
	in[0] = kt_tensor(HP_F32, 3, (int64_t[]){ 2, m, k });
	in[1] = kt_tensor(HP_F32, 2, (int64_t[]){ k, n });
	in[2] = kt_tensor(HP_F32, 1, (int64_t[]){ n });
	kt_fill_random(&in[0], 5, -1, 1);
	kt_fill_random(&in[1], 6, -1, 1);
	kt_fill_random(&in[2], 7, -1, 1);
	pk = kt_tensor(HP_F32, 3, (int64_t[]){ (n + 15) / 16, k, 16 });
	hp_fma_pack_b(in[1].data, n, 1, k, n, pk.data);
	struct kt_case mm = { .op = "MatMul", .nin = 2, .in = in, .nout = 1, .pool = pool2 };
	assert_int_equal(kt_run(&mm, &y1), 0);
	struct hp_tensor pin[3] = { in[0], pk, in[2] };
	struct kt_case mp = { .op = "MatMul", .nin = 2, .in = pin, .nattrs = 1, .attrs = &at[1], .nout = 1, .pool = pool2 };
	assert_int_equal(kt_run(&mp, &y2), 0);
	assert_same(y2.data, y1.data, 2 * m * n, "MatMul on a packed B", &(struct gcase){ m, n, k, 0, 0, 0, 1 });
	hp_tensor_free(&y1);
	hp_tensor_free(&y2);
	/* Gemm with transB: B stored [N, K], packed as op(B) */
	struct hp_tensor bt = kt_tensor(HP_F32, 2, (int64_t[]){ n, k });
	for (int64_t j = 0; j < n; j++)
		for (int64_t t = 0; t < k; t++)
			((float *)bt.data)[j * k + t] = ((const float *)in[1].data)[t * n + j];
	in[0].shape = (struct hp_shape){ .rank = 2, .dims = { 2 * m, k } };
	struct hp_tensor gin[3] = { in[0], bt, in[2] };
	struct kt_case gm = { .op = "Gemm", .nin = 3, .in = gin, .nattrs = 1, .attrs = at, .nout = 1, .pool = pool2 };
	assert_int_equal(kt_run(&gm, &y1), 0);
	hp_fma_pack_b(bt.data, 1, k, k, n, pk.data);
	pin[0] = in[0];
	struct kt_case gp = { .op = "Gemm", .nin = 3, .in = pin, .nattrs = 2, .attrs = at, .nout = 1, .pool = pool2 };
	assert_int_equal(kt_run(&gp, &y2), 0);
	assert_same(y2.data, y1.data, 2 * m * n, "Gemm transB on a packed B", &(struct gcase){ m, n, k, 0, 1, 2, 1 });
	hp_tensor_free(&y1);
	hp_tensor_free(&y2);
	/* a packed B that is not N = 45 columns: refused */
	struct hp_attr wrong = kt_int(HP_GEMM_PACKED_ATTR, 70);
	struct kt_case bad = { .op = "MatMul", .nin = 2, .in = pin, .nattrs = 1, .attrs = &wrong, .nout = 1 };
	assert_true(kt_run(&bad, &y1) < 0);
	hp_tensor_free(&bt);
	hp_tensor_free(&pk);
	for (int i = 0; i < 3; i++)
		hp_tensor_free(&in[i]);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_shapes),
		cmocka_unit_test(test_batched),
		cmocka_unit_test(test_epilogue),
		cmocka_unit_test(test_claims),
		cmocka_unit_test(test_nodes),
		cmocka_unit_test(test_packed_nodes),
	};

	if (!hp_fma_gemm_ok()) {
		printf("no AVX2+FMA: the FMA product is not used here\n");
		return 77;
	}
	return cmocka_run_group_tests(tests, setup, teardown);
}
