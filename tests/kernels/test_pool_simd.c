/* MaxPool and AveragePool, bitwise against naive loops that fix the order
 * of operations (pool_simd.h): many geometries (1-3 spatial dims, odd
 * sizes, pads, ceil_mode, dilation, strides 1-3), inputs full of NaN,
 * signed zeros and infinities, at every SIMD level (AVX-512, AVX2, none),
 * on one thread and two. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "hpdlf/error.h"
#include "kernels/pool_simd.h"
#include "tests/kernels/harness.h"

struct geo {
	int nsp;
	int64_t in[3], k[3], s[3], dl[3], pads[6];
	int ceil_mode;
};

static int64_t out_dim(const struct geo *g, int d)
{
	int64_t dk = (g->k[d] - 1) * g->dl[d] + 1, span = g->in[d] + g->pads[d] + g->pads[d + g->nsp] - dk, o;

	if (!g->ceil_mode)
		return span / g->s[d] + 1;
	o = (span + g->s[d] - 1) / g->s[d] + 1;
	return (o - 1) * g->s[d] >= g->in[d] + g->pads[d] ? o - 1 : o;
}

/* The kernels' 2x2 stride-2 path (max2_plane) takes its taps row by row;
 * every other path column by column (w tap outermost). */
static int row_major(const struct geo *g, const int64_t *od)
{
	for (int d = 0; d < g->nsp; d++)
		if (g->k[d] != 2 || g->s[d] != 2 || g->dl[d] != 1 || g->pads[d] || od[d] != g->in[d] / 2)
			return 0;
	return 1;
}

/* One output of one plane: max by v > m ? v : m from -inf over the valid
 * taps, or the average of double column sums (rows in order, the first
 * taken as is) added to 0 in column order. */
static float ref_out(const struct geo *g, int avg, int cip, const float *x, const int64_t *o, int rm)
{
	int64_t K[3] = { 1, 1, 1 }, S[3] = { 1, 1, 1 }, L[3] = { 1, 1, 1 }, P[3] = { 0 }, E[3] = { 0 }, I[3] = { 1, 1, 1 };
	int64_t O[3] = { 0 }, nvalid = 0, npad = 1, off = 3 - g->nsp;
	double acc = 0;
	float m = -INFINITY;

	for (int d = 0; d < g->nsp; d++) {
		K[off + d] = g->k[d], S[off + d] = g->s[d], L[off + d] = g->dl[d], I[off + d] = g->in[d];
		P[off + d] = g->pads[d], E[off + d] = g->pads[d + g->nsp], O[off + d] = o[d];
	}
	for (int d = 0; d < 3; d++) {
		int64_t cp = 0;
		for (int64_t j = 0; j < K[d]; j++)
			cp += O[d] * S[d] - P[d] + j * L[d] < I[d] + E[d];
		npad *= cp;
	}
	for (int64_t t0 = 0; t0 < K[rm ? 0 : 2]; t0++) {
		double col = 0;
		int have = 0;
		for (int64_t t1 = 0; t1 < K[rm ? 1 : 0]; t1++)
			for (int64_t t2 = 0; t2 < K[rm ? 2 : 1]; t2++) {
				int64_t a = rm ? t0 : t1, b = rm ? t1 : t2, c = rm ? t2 : t0;
				int64_t p0 = O[0] * S[0] - P[0] + a * L[0], p1 = O[1] * S[1] - P[1] + b * L[1];
				int64_t p2 = O[2] * S[2] - P[2] + c * L[2];
				if (p0 < 0 || p0 >= I[0] || p1 < 0 || p1 >= I[1] || p2 < 0 || p2 >= I[2])
					continue;
				float v = x[(p0 * I[1] + p1) * I[2] + p2];
				nvalid++;
				m = v > m ? v : m;
				col = have ? col + v : v;
				have = 1;
			}
		if (have)
			acc += col;
	}
	if (!avg)
		return m;
	npad = cip ? npad : nvalid;
	return npad ? (float)(acc / (double)npad) : 0.f;
}

static const struct geo geos[] = {
	{ 2, { 8, 8 }, { 3, 3 }, { 1, 1 }, { 1, 1 }, { 1, 1, 1, 1 }, 1 },     /* GoogLeNet branch */
	{ 2, { 4, 4 }, { 3, 3 }, { 1, 1 }, { 1, 1 }, { 1, 1, 1, 1 }, 1 },
	{ 2, { 2, 2 }, { 3, 3 }, { 1, 1 }, { 1, 1 }, { 1, 1, 1, 1 }, 0 },
	{ 2, { 7, 37 }, { 3, 3 }, { 1, 1 }, { 1, 1 }, { 1, 1, 1, 1 }, 0 },
	{ 2, { 47, 47 }, { 3, 3 }, { 2, 2 }, { 1, 1 }, { 0 }, 1 },           /* SqueezeNet */
	{ 2, { 11, 11 }, { 3, 3 }, { 2, 2 }, { 1, 1 }, { 0 }, 1 },
	{ 2, { 16, 16 }, { 3, 3 }, { 2, 2 }, { 1, 1 }, { 0 }, 1 },           /* last window in the end pad */
	/* 3-wide stride-2 windows by permutes (plane_max_s2k3): GoogLeNet's
	 * 48 -> 24 (a last window one past the edge), outputs past one and
	 * two vectors, the last one's columns in the third register, a first
	 * tap on the last column; with a top pad (rows only), left pads of 1
	 * (ResNet's stem: lanes from the second on) and 2 */
	{ 2, { 5, 48 }, { 3, 3 }, { 2, 2 }, { 1, 1 }, { 0 }, 1 },
	{ 2, { 4, 67 }, { 3, 3 }, { 2, 2 }, { 1, 1 }, { 0 }, 1 },
	{ 2, { 3, 70 }, { 3, 3 }, { 2, 2 }, { 1, 1 }, { 0 }, 0 },
	{ 2, { 3, 33 }, { 3, 3 }, { 2, 2 }, { 1, 1 }, { 0 }, 1 },
	{ 2, { 7, 9 }, { 3, 3 }, { 2, 2 }, { 1, 1 }, { 1, 0, 1, 0 }, 1 },
	{ 2, { 6, 6 }, { 2, 3 }, { 2, 2 }, { 1, 1 }, { 0 }, 1 },
	{ 2, { 5, 36 }, { 3, 3 }, { 2, 2 }, { 1, 1 }, { 1, 1, 1, 1 }, 1 },
	{ 2, { 4, 41 }, { 3, 3 }, { 2, 2 }, { 1, 1 }, { 0, 2, 0, 2 }, 0 },
	{ 2, { 9, 33 }, { 3, 3 }, { 2, 2 }, { 1, 1 }, { 1, 1, 1, 1 }, 0 },   /* ResNet stem */
	{ 2, { 10, 70 }, { 2, 2 }, { 2, 2 }, { 1, 1 }, { 0 }, 0 },           /* U-Net 2x2 */
	{ 2, { 5, 41 }, { 2, 3 }, { 1, 2 }, { 1, 2 }, { 0, 2, 1, 1 }, 1 },   /* dilated w */
	{ 2, { 6, 29 }, { 4, 5 }, { 1, 1 }, { 2, 1 }, { 3, 2, 2, 4 }, 0 },   /* pads >= k/2 */
	{ 2, { 6, 31 }, { 3, 3 }, { 3, 3 }, { 1, 1 }, { 1, 1, 1, 1 }, 1 },   /* stride 3: scalar */
	{ 2, { 5, 9 }, { 1, 1 }, { 1, 1 }, { 1, 1 }, { 0 }, 0 },
	/* rows in groups whose column passes run first (three, the last short),
	 * and rows too wide for one block (one row at a time) */
	{ 2, { 81, 100 }, { 3, 3 }, { 2, 2 }, { 1, 1 }, { 1, 1, 1, 1 }, 0 },
	{ 2, { 3, 2100 }, { 3, 3 }, { 2, 2 }, { 1, 1 }, { 0 }, 1 },
	{ 1, { 53 }, { 3 }, { 1 }, { 1 }, { 1, 1 }, 0 },
	{ 1, { 50 }, { 5 }, { 2 }, { 2 }, { 3, 4 }, 1 },
	{ 3, { 5, 6, 19 }, { 3, 3, 3 }, { 1, 1, 1 }, { 1, 1, 1 }, { 1, 1, 1, 1, 1, 1 }, 0 },
	{ 3, { 5, 7, 21 }, { 2, 3, 3 }, { 2, 2, 2 }, { 1, 1, 1 }, { 0, 1, 1, 1, 1, 1 }, 1 },
	{ 3, { 4, 6, 8 }, { 2, 2, 2 }, { 2, 2, 2 }, { 1, 1, 1 }, { 0 }, 0 },
};

static void fill_odd(struct hp_tensor *x, unsigned seed, int with_inf)
{
	static const float odd[] = { NAN, -0.0f, 0.0f, INFINITY, -INFINITY, 0.0f, -0.0f, 1.0f, -1.0f };
	uint32_t r = seed * 2654435761u + 7;

	kt_fill_random(x, seed, -2, 2);
	for (int64_t e = 0; e < hp_shape_numel(&x->shape); e++) {
		r = r * 1664525u + 1013904223u;
		if ((r >> 24) % 3 == 0) {
			float v = odd[(r >> 8) % (sizeof odd / sizeof odd[0])];
			((float *)x->data)[e] = !with_inf && isinf(v) ? 0.5f : v;
		}
	}
}

static void check_geo(const struct geo *g, int avg, int cip, int64_t n, int64_t ch, struct hp_pool *pool,
		      unsigned seed)
{
	int64_t dims[5] = { n, ch }, od[5] = { n, ch }, plane = 1, oplane = 1;
	struct hp_attr at[6];
	struct hp_tensor x, y;
	int na = 0, rm;

	for (int d = 0; d < g->nsp; d++) {
		dims[2 + d] = g->in[d];
		od[2 + d] = out_dim(g, d);
		plane *= g->in[d];
		oplane *= od[2 + d];
	}
	rm = !avg && row_major(g, od + 2);
	x = kt_tensor(HP_F32, 2 + g->nsp, dims);
	fill_odd(&x, seed, !avg);
	at[na++] = kt_ints("kernel_shape", g->nsp, g->k);
	at[na++] = kt_ints("strides", g->nsp, g->s);
	at[na++] = kt_ints("dilations", g->nsp, g->dl);
	at[na++] = kt_ints("pads", 2 * g->nsp, g->pads);
	at[na++] = kt_int("ceil_mode", g->ceil_mode);
	if (avg)
		at[na++] = kt_int("count_include_pad", cip);
	{
		struct kt_case kc = { .op = avg ? "AveragePool" : "MaxPool", .nin = 1, .in = &x, .nattrs = na,
				      .attrs = at, .nout = 1, .pool = pool };
		assert_int_equal(kt_run(&kc, &y), 0);
	}
	for (int64_t pl = 0; pl < n * ch; pl++)
		for (int64_t i = 0; i < oplane; i++) {
			int64_t o[3], rem = i;
			for (int d = g->nsp - 1; d >= 0; d--) {
				o[d] = rem % od[2 + d];
				rem /= od[2 + d];
			}
			float want = ref_out(g, avg, cip, (const float *)x.data + pl * plane, o, rm);
			float got = ((const float *)y.data)[pl * oplane + i];
			if (memcmp(&want, &got, sizeof got))
				print_error("geometry in %lld,%lld,%lld k %lld,%lld,%lld s %lld: plane %lld output %lld: "
					    "%a, want %a\n", (long long)g->in[0], (long long)g->in[1], (long long)g->in[2],
					    (long long)g->k[0], (long long)g->k[1], (long long)g->k[2], (long long)g->s[0],
					    (long long)pl, (long long)i, (double)got, (double)want);
			assert_memory_equal(&want, &got, sizeof got);
		}
	hp_tensor_free(&x);
	hp_tensor_free(&y);
}

static void run_all(int avg)
{
	for (int isa = 2; isa >= 0; isa--) {
		hp_pool_test_isa(isa);
		for (size_t i = 0; i < sizeof geos / sizeof geos[0]; i++)
			for (int cip = 0; cip <= avg; cip++)
				check_geo(&geos[i], avg, cip, 2, 3, NULL, 100 + (unsigned)i);
	}
	hp_pool_test_isa(2);
}

static void test_max_bits(void **state)
{
	(void)state;
	run_all(0);
}

static void test_avg_bits(void **state)
{
	(void)state;
	run_all(1);
}

/* Enough taps (2^20 and more) to run on two threads: the runs of planes
 * start at outputs that are no multiple of 16 (plane of 61x59). */
static void test_threads_bits(void **state)
{
	static const struct geo g[] = {
		{ 2, { 61, 59 }, { 3, 3 }, { 1, 1 }, { 1, 1 }, { 1, 1, 1, 1 }, 0 },
		{ 2, { 61, 59 }, { 3, 3 }, { 2, 2 }, { 1, 1 }, { 1, 1, 1, 1 }, 1 },
	};
	struct hp_pool *pool;

	(void)state;
	assert_int_equal(hp_pool_create(2, &pool), 0);
	for (int isa = 2; isa >= 1; isa--) {
		hp_pool_test_isa(isa);
		for (int i = 0; i < 2; i++) {
			check_geo(&g[i], 0, 0, 2, 21, pool, 300 + (unsigned)i);
			check_geo(&g[i], 1, 1, 2, 21, pool, 310 + (unsigned)i);
		}
	}
	hp_pool_test_isa(2);
	hp_pool_destroy(pool);
}

/* MaxPoolGrad (2-D planes): dX = 0, then per output in order dX[first
 * maximum] += dY, the first maximum in row-major tap order where NaN
 * beats a number; dY holds -0 (0 + -0 is +0: the additions must happen). */
static void check_grad(const struct geo *g, unsigned seed)
{
	int64_t xd[4] = { 2, 3, g->in[0], g->in[1] }, yd[4] = { 2, 3, out_dim(g, 0), out_dim(g, 1) };
	int64_t P = g->in[0] * g->in[1], OP = yd[2] * yd[3];
	struct hp_tensor x = kt_tensor(HP_F32, 4, xd), dy = kt_tensor(HP_F32, 4, yd), in[2], got;
	struct hp_attr at[4] = { kt_ints("kernel_shape", 2, g->k), kt_ints("strides", 2, g->s),
				 kt_ints("pads", 4, g->pads), kt_ints("dilations", 2, g->dl) };
	float *want = calloc((size_t)(6 * P), sizeof(float));

	fill_odd(&x, seed, 1);
	kt_fill_random(&dy, seed + 1, -1, 1);
	for (int64_t i = 0; i < 6 * OP; i += 5)
		((float *)dy.data)[i] = -0.0f;
	in[0] = dy, in[1] = x;
	for (int64_t pl = 0; pl < 6; pl++)
		for (int64_t j = 0; j < OP; j++) {
			const float *xp = (const float *)x.data + pl * P;
			int64_t best = -1, oh = j / yd[3], ow = j % yd[3];
			float bv = 0;
			for (int64_t a = 0; a < g->k[0]; a++)
				for (int64_t b = 0; b < g->k[1]; b++) {
					int64_t h = oh * g->s[0] - g->pads[0] + a * g->dl[0];
					int64_t w = ow * g->s[1] - g->pads[1] + b * g->dl[1];
					if (h < 0 || h >= g->in[0] || w < 0 || w >= g->in[1])
						continue;
					float v = xp[h * g->in[1] + w];
					if (best < 0 || v > bv || (isnan(v) && !isnan(bv)))
						best = h * g->in[1] + w, bv = v;
				}
			if (best >= 0)
				want[pl * P + best] += ((const float *)dy.data)[pl * OP + j];
		}
	for (int isa = 2; isa >= 0; isa -= 2) {
		struct kt_case kc = { .domain = "ai.hpdlf", .op = "MaxPoolGrad", .nin = 2, .in = in, .nattrs = 4,
				      .attrs = at, .nout = 1 };
		hp_pool_test_isa(isa);
		assert_int_equal(kt_run(&kc, &got), 0);
		for (int64_t i = 0; i < 6 * P; i++)
			if (memcmp(&want[i], (const float *)got.data + i, sizeof(float)))
				fail_msg("MaxPoolGrad in %lldx%lld k %lld s %lld, isa %d: dX[%lld] = %a, want %a",
					 (long long)g->in[0], (long long)g->in[1], (long long)g->k[0], (long long)g->s[0],
					 isa, (long long)i, (double)((const float *)got.data)[i], (double)want[i]);
		hp_tensor_free(&got);
	}
	hp_pool_test_isa(2);
	free(want);
	hp_tensor_free(&x);
	hp_tensor_free(&dy);
}

static void test_grad_bits(void **state)
{
	(void)state;
	for (size_t i = 0; i < sizeof geos / sizeof geos[0]; i++)
		if (geos[i].nsp == 2)
			check_grad(&geos[i], 200 + (unsigned)i);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_max_bits),
		cmocka_unit_test(test_avg_bits),
		cmocka_unit_test(test_threads_bits),
		cmocka_unit_test(test_grad_bits),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
