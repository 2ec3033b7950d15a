/* FusedInvRes (kernels/fused_ir.c): MobileNetV2's expansion, depthwise and
 * projection in one node, run in bands of rows.
 *  - bitwise the three nodes it replaces (FusedConv 1x1 + Clip, FusedConv
 *    depthwise + Clip, Conv 1x1 or FusedConv 1x1 + Add), each run alone;
 *  - within 1e-5 of nested loops in double (Clip in between);
 *  - by blocked channels, bitwise a scalar replay of the chains (fmaf);
 *  - the same bits for every band height and on 1 or 2 threads, also when
 *    one thread comes late and the other takes its bands from the back;
 *  - the same for the blocks of channels that small planes run by, and for
 *    their blocked form (AVX-512; W1 and W2 transposed as inputs 8 and 9,
 *    as exec/fuse_pack.c gives them), whose AVX2 fallback is the former. */
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
#include "kernels/conv_impl.h"
#include "kernels/fused_impl.h"
#include "kernels/threadpool.h"
#include "tests/kernels/harness.h"

struct ic {
	int64_t n, cin, ce, cout, h, w, s, pads[4];
	int add;
	int noexp;   /* no expansion (W1 absent): the depthwise Conv reads X */
};

/* Odd sizes, stride 1 and 2, pads 0..2 on either side, channel counts no
 * multiple of 6, 8 or 16, a K past conv_pw.c's 256-deep chunks, and a
 * residual Add; MobileNetV2's 56x56 block. */
static const struct ic cases[] = {
	{ 1, 5, 13, 7, 11, 9, 1, { 1, 1, 1, 1 }, 1, 0 },
	{ 2, 3, 10, 4, 12, 13, 2, { 1, 1, 1, 1 }, 0, 0 },
	{ 1, 7, 9, 5, 15, 10, 2, { 0, 1, 2, 0 }, 0, 0 },
	{ 1, 4, 6, 9, 9, 17, 1, { 2, 0, 0, 2 }, 0, 0 },
	{ 1, 6, 300, 6, 8, 7, 1, { 1, 1, 1, 1 }, 1, 0 },
	{ 1, 24, 144, 24, 56, 56, 1, { 1, 1, 1, 1 }, 1, 0 },
	{ 1, 16, 96, 24, 30, 30, 2, { 1, 1, 1, 1 }, 0, 0 },
	{ 1, 8, 8, 5, 13, 11, 1, { 1, 1, 1, 1 }, 0, 1 },
	{ 2, 9, 9, 7, 12, 17, 1, { 0, 1, 2, 0 }, 1, 1 },
	{ 1, 11, 11, 6, 15, 14, 2, { 1, 1, 1, 1 }, 0, 1 },
	{ 1, 32, 32, 16, 40, 40, 1, { 1, 1, 1, 1 }, 0, 1 },
	/* MobileNetV2's 7x7 blocks (blocks of channels unless forced) */
	{ 1, 160, 960, 160, 7, 7, 1, { 1, 1, 1, 1 }, 1, 0 },
	{ 1, 96, 576, 160, 14, 14, 2, { 1, 1, 1, 1 }, 0, 0 },
	{ 2, 300, 100, 13, 9, 8, 1, { 1, 0, 1, 2 }, 1, 0 },
	{ 2, 50, 50, 20, 6, 5, 2, { 2, 1, 0, 1 }, 0, 1 },
	/* blocked channels: a last block of 16 channels, of fewer than 16
	 * (expanded and output), K past 256, odd pads at stride 2 */
	{ 2, 7, 48, 48, 9, 8, 2, { 0, 1, 2, 0 }, 1, 0 },
	{ 1, 13, 40, 20, 5, 6, 1, { 2, 0, 1, 2 }, 1, 0 },
	{ 1, 300, 272, 33, 4, 3, 1, { 1, 1, 1, 1 }, 0, 0 },
};

/* The expansion's Clip floor: 0 as in MobileNetV2, or above 0, where the
 * depthwise padding must stay 0 while E's values are clipped as read. */
static float lo1;

#define NCASES ((int)(sizeof cases / sizeof cases[0]))

static int64_t odim(const struct ic *t, int i)
{
	return ((i == 0 ? t->h : t->w) + t->pads[i] + t->pads[i + 2] - 3) / t->s + 1;
}

struct data {
	struct hp_tensor x, w1, b1, wd, bd, w2, b2, add;
	struct hp_tensor w1t, w2t; /* [cin][ce rounded to 16], [ce][cout rounded to 16], zeros past */
};

/* w [m][k] as [k][m rounded up to 16]. */
static struct hp_tensor transposed(const struct hp_tensor *w, int64_t m, int64_t k)
{
	int64_t dims[2] = { k, (m + 15) / 16 * 16 };
	struct hp_tensor t = kt_tensor(HP_F32, 2, dims);
	const float *a = w->data;
	float *b = t.data;

	for (int64_t kk = 0; kk < k; kk++)
		for (int64_t r = 0; r < dims[1]; r++)
			b[kk * dims[1] + r] = r < m ? a[r * k + kk] : 0.0f;
	return t;
}

static void make(const struct ic *t, unsigned seed, struct data *d)
{
	int64_t xs[4] = { t->n, t->cin, t->h, t->w }, w1[4] = { t->ce, t->cin, 1, 1 }, wd[4] = { t->ce, 1, 3, 3 };
	int64_t w2[4] = { t->cout, t->ce, 1, 1 }, ys[4] = { t->n, t->cout, odim(t, 0), odim(t, 1) };

	d->x = kt_tensor(HP_F32, 4, xs);
	d->w1 = kt_tensor(HP_F32, 4, w1);
	d->b1 = kt_tensor(HP_F32, 1, &t->ce);
	d->wd = kt_tensor(HP_F32, 4, wd);
	d->bd = kt_tensor(HP_F32, 1, &t->ce);
	d->w2 = kt_tensor(HP_F32, 4, w2);
	d->b2 = kt_tensor(HP_F32, 1, &t->cout);
	d->add = kt_tensor(HP_F32, 4, ys);
	kt_fill_random(&d->x, seed, -2, 2);
	kt_fill_random(&d->w1, seed + 1, -0.5f, 0.5f);
	kt_fill_random(&d->b1, seed + 2, -0.5f, 1);
	kt_fill_random(&d->wd, seed + 3, -0.5f, 0.5f);
	kt_fill_random(&d->bd, seed + 4, -0.5f, 1);
	kt_fill_random(&d->w2, seed + 5, -0.5f, 0.5f);
	kt_fill_random(&d->b2, seed + 6, -1, 1);
	kt_fill_random(&d->add, seed + 7, -1, 1);
	d->w1t = transposed(&d->w1, t->ce, t->cin);
	d->w2t = transposed(&d->w2, t->cout, t->ce);
}

static void drop(struct data *d)
{
	struct hp_tensor *all[] = { &d->x, &d->w1, &d->b1, &d->wd, &d->bd, &d->w2, &d->b2, &d->add, &d->w1t, &d->w2t };

	for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
		hp_tensor_free(all[i]);
}

/* One Conv-like node: op (Conv or FusedConv) over in[0..nin). */
static void node(const char *op, int nin, const struct hp_tensor *in, int64_t group, int64_t k, int64_t s,
		 const int64_t *pads, const char *act, struct hp_pool *pool, struct hp_tensor *out)
{
	int64_t ks[2] = { k, k }, st[2] = { s, s }, zero[4] = { 0 };
	struct hp_attr a[8];
	int na = 0;

	a[na++] = kt_ints("kernel_shape", 2, ks);
	a[na++] = kt_ints("strides", 2, st);
	a[na++] = kt_ints("pads", 4, pads ? pads : zero);
	a[na++] = kt_int("group", group);
	if (act) {
		a[na++] = kt_string("activation", act);
		a[na++] = kt_float("clip_min", k == 1 ? lo1 : 0.0f);
		a[na++] = kt_float("clip_max", 1.5f);
	}
	struct kt_case c = { .domain = act ? "ai.hpdlf" : NULL, .op = op, .nin = nin, .in = in, .nattrs = na,
			     .attrs = a, .nout = 1, .pool = pool };
	if (kt_run(&c, out) < 0)
		fail_msg("%s: %s", op, hp_errmsg());
}

/* The three nodes as the graph held them before the fusion. */
static void unfused(const struct ic *t, const struct data *d, struct hp_tensor *y)
{
	struct hp_tensor e = { 0 }, dd, in[4];

	in[0] = d->x, in[1] = d->w1, in[2] = d->b1;
	if (!t->noexp)
		node("FusedConv", 3, in, 1, 1, 1, NULL, "Clip", NULL, &e);
	in[0] = t->noexp ? d->x : e, in[1] = d->wd, in[2] = d->bd;
	node("FusedConv", 3, in, t->ce, 3, t->s, t->pads, "Clip", NULL, &dd);
	in[0] = dd, in[1] = d->w2, in[2] = d->b2, in[3] = d->add;
	if (t->add)
		node("FusedConv", 4, in, 1, 1, 1, NULL, "", NULL, y);
	else
		node("Conv", 3, in, 1, 1, 1, NULL, NULL, NULL, y);
	if (!t->noexp)
		hp_tensor_free(&e);
	hp_tensor_free(&dd);
}

/* packed: with W1 and W2 transposed (inputs 8 and 9). */
static void fused(const struct ic *t, const struct data *d, int packed, struct hp_pool *pool, struct hp_tensor *y)
{
	struct hp_tensor in[10] = { d->x, d->w1, d->b1, d->wd, d->bd, d->w2, d->b2, d->add, d->w1t, d->w2t };
	int64_t st[2] = { t->s, t->s };
	struct hp_attr a[6] = { kt_ints("strides", 2, st), kt_ints("pads", 4, t->pads), kt_float("expand_min", lo1),
				kt_float("expand_max", 1.5f), kt_float("dw_min", 0.0f), kt_float("dw_max", 1.5f) };
	struct kt_case c = { .domain = "ai.hpdlf", .op = "FusedInvRes", .nin = t->add ? 8 : 7, .in = in, .nattrs = 6,
			     .attrs = a, .nout = 1, .pool = pool };

	if (t->noexp) /* absent inputs */
		in[1].data = in[2].data = NULL;
	if (packed && !t->noexp) {
		c.nin = 10;
		if (!t->add)
			in[7].data = NULL;
	}
	if (kt_run(&c, y) < 0)
		fail_msg("FusedInvRes: %s", hp_errmsg());
}


static double clip(double v, double lo)
{
	return v < lo ? lo : v > 1.5 ? 1.5 : v;
}

/* Nested loops in double; the Clips of the float kernels' own values
 * decide where a value sits at a bound, so compare with a tolerance. */
static void loops(const struct ic *t, const struct data *d, double *y)
{
	int64_t oh = odim(t, 0), ow = odim(t, 1), hw = t->h * t->w;
	const float *x = d->x.data, *w1 = d->w1.data, *b1 = d->b1.data, *wd = d->wd.data, *bd = d->bd.data;
	const float *w2 = d->w2.data, *b2 = d->b2.data, *ad = d->add.data;
	double *e = calloc((size_t)(t->ce * hw), sizeof *e), *dd = calloc((size_t)(t->ce * oh * ow), sizeof *dd);

	for (int64_t n = 0; n < t->n; n++) {
		for (int64_t m = 0; m < t->ce; m++)
			for (int64_t p = 0; p < hw; p++) {
				double v = b1[m];
				for (int64_t k = 0; k < t->cin; k++)
					v += (double)w1[m * t->cin + k] * x[(n * t->cin + k) * hw + p];
				e[m * hw + p] = t->noexp ? x[(n * t->cin + m) * hw + p] : clip(v, lo1);
			}
		for (int64_t m = 0; m < t->ce; m++)
			for (int64_t p = 0; p < oh * ow; p++) {
				double v = bd[m];
				for (int k = 0; k < 9; k++) {
					int64_t ih = p / ow * t->s - t->pads[0] + k / 3, iw = p % ow * t->s - t->pads[1] + k % 3;
					if (ih >= 0 && ih < t->h && iw >= 0 && iw < t->w)
						v += (double)wd[m * 9 + k] * e[m * hw + ih * t->w + iw];
				}
				dd[m * oh * ow + p] = clip(v, 0);
			}
		for (int64_t m = 0; m < t->cout; m++)
			for (int64_t p = 0; p < oh * ow; p++) {
				int64_t yi = (n * t->cout + m) * oh * ow + p;
				double v = b2[m] + (t->add ? ad[yi] : 0.0);
				for (int64_t k = 0; k < t->ce; k++)
					v += (double)w2[m * t->ce + k] * dd[k * oh * ow + p];
				y[yi] = v;
			}
	}
	free(e);
	free(dd);
}

/* Whether the node runs more than one unit in some parallel run: bands of
 * rows (chan 0; an even count from 2 rows), or blocks of 48 expanded
 * channels, or pairs of 8-row tiles of the projection (chan 1), or
 * blocks of 32 expanded or output channels (chan 2, blocked). */
static int parallel(const struct ic *t, int chan)
{
	if (!chan)
		return t->n * odim(t, 0) >= 2;
	if (chan == 2 && !t->noexp && hp_pw_512())
		return t->n * ((t->ce + 31) / 32) >= 2 || t->n * ((t->cout + 31) / 32) >= 2;
	return t->n * ((t->ce + 47) / 48) >= 2 || t->n * ((t->cout + 15) / 16) >= 2;
}

static void test_against_unfused(void **state)
{
	struct hp_pool *pool;

	(void)state;
	if (!hp_fir_available())
		skip();
	assert_int_equal(hp_pool_create(2, &pool), 0);
	for (int ci = 0; ci < 2 * NCASES; ci++) { /* the second round with E's Clip from 0.25 */
		const struct ic *t = &cases[ci % NCASES];
		struct data d;
		struct hp_tensor want, got;

		lo1 = ci < NCASES ? 0.0f : 0.25f;
		int64_t ny;
		double *ref, mx = 1, err = 0;

		make(t, 40 + (unsigned)ci, &d);
		unfused(t, &d, &want);
		ny = hp_shape_numel(&want.shape);
		/* bands of rows, blocks of channels, blocked channels (then
		 * again with the AVX2 tiles: the blocks of channels), 1 thread, 2,
		 * and 2 whose worker comes late (the caller takes its units) */
		for (int p = 0; p < 12; p++) {
			static const char *const how[] = { "bands of rows", "blocks of channels", "blocked channels",
							   "blocked channels, AVX2" };
			uint64_t stolen = hp_pool_stolen_units();
			hp_fir_set_mode(1 + (p / 3 < 3 ? p / 3 : 2));
			hp_pw_set_avx2(p / 3 == 3);
			hp_pool_set_steal_stall_us(p % 3 == 2 ? -1 : 0);
			fused(t, &d, p / 3 >= 2, p % 3 ? pool : NULL, &got);
			hp_pool_set_steal_stall_us(0);
			hp_pw_set_avx2(0);
			hp_fir_set_mode(0);
			if (memcmp(got.data, want.data, (size_t)ny * sizeof(float)))
				fail_msg("case %d (%s, %s): not the unfused nodes' bits", ci, how[p / 3],
					 p % 3 == 0 ? "1 thread" : p % 3 == 1 ? "2 threads" : "2, one late");
			if (p % 3 == 2 && parallel(t, p / 3 == 2 ? 2 : p / 3 ? 1 : 0) && hp_pool_stolen_units() == stolen)
				fail_msg("case %d: nothing stolen from a late worker", ci);
			hp_tensor_free(&got);
		}
		ref = malloc((size_t)ny * sizeof *ref);
		loops(t, &d, ref);
		for (int64_t i = 0; i < ny; i++) {
			double e = ((const float *)want.data)[i] - ref[i];
			mx = ref[i] > mx ? ref[i] : -ref[i] > mx ? -ref[i] : mx;
			err = e > err ? e : -e > err ? -e : err;
		}
		if (err / mx > 1e-5)
			fail_msg("case %d: rel err %g against loops", ci, err / mx);
		free(ref);
		hp_tensor_free(&want);
		drop(&d);
	}
	lo1 = 0.0f;
	hp_pool_destroy(pool);
}

/* Every band height (1 row up to the whole plane) gives the same bits, on
 * 1 and 2 threads (runs of rows cut in two, halos carried over or not);
 * also by blocked channels, whose bands expand their halo rows again. */
static void test_bands(void **state)
{
	struct hp_pool *pool;

	(void)state;
	if (!hp_fir_available())
		skip();
	assert_int_equal(hp_pool_create(2, &pool), 0);
	for (int ci = 0; ci < 2 * NCASES; ci++) {
		const struct ic *t = &cases[ci % NCASES];
		int blk = ci >= NCASES;
		struct data d;
		struct hp_tensor whole, got;

		if (blk && t->noexp)
			continue;
		make(t, 70 + (unsigned)ci, &d);
		hp_fir_set_mode(blk ? 3 : 1); /* bands, whatever the plane */
		hp_fir_set_band_rows(odim(t, 0));
		fused(t, &d, blk, NULL, &whole);
		for (int64_t rows = 1; rows < odim(t, 0); rows += 1 + rows / 2)
			for (int p = 0; p < 3; p++) {
				hp_fir_set_band_rows(rows);
				hp_fir_set_stall_us(p == 2 ? 2000 : 0); /* the caller takes tid 1's bands */
				fused(t, &d, blk, p ? pool : NULL, &got);
				if (memcmp(got.data, whole.data, (size_t)hp_shape_numel(&whole.shape) * sizeof(float)))
					fail_msg("case %d: bands of %lld rows (%s%s) differ from the whole", ci % NCASES,
						 (long long)rows, p == 0 ? "1 thread" : p == 1 ? "2 threads" : "2, one late",
						 blk ? ", blocked channels" : "");
				hp_tensor_free(&got);
			}
		hp_fir_set_band_rows(0);
		hp_fir_set_stall_us(0);
		hp_fir_set_mode(0);
		hp_tensor_free(&whole);
		drop(&d);
	}
	hp_pool_destroy(pool);
}

/* The chains in scalar fmaf: E from its bias over k, clipped; each
 * depthwise output from its bias over the nine taps in (kh, kw) order
 * (padding as w * 0), clipped; Y from its bias over k, + the addend. */
static void replay(const struct ic *t, const struct data *d, float *y)
{
	int64_t oh = odim(t, 0), ow = odim(t, 1), hw = t->h * t->w, P = oh * ow;
	const float *x = d->x.data, *w1 = d->w1.data, *b1 = d->b1.data, *wd = d->wd.data, *bd = d->bd.data;
	const float *w2 = d->w2.data, *b2 = d->b2.data, *ad = d->add.data;
	float *e = malloc((size_t)(t->ce * hw) * sizeof *e), *dd = malloc((size_t)(t->ce * P) * sizeof *dd);

	for (int64_t n = 0; n < t->n; n++) {
		for (int64_t m = 0; m < t->ce; m++)
			for (int64_t p = 0; p < hw; p++) {
				float v = b1[m];
				for (int64_t k = 0; k < t->cin; k++)
					v = fmaf(w1[m * t->cin + k], x[(n * t->cin + k) * hw + p], v);
				e[m * hw + p] = v > 1.5f ? 1.5f : v < lo1 ? lo1 : v;
			}
		for (int64_t m = 0; m < t->ce; m++)
			for (int64_t p = 0; p < P; p++) {
				float v = bd[m];
				for (int k = 0; k < 9; k++) {
					int64_t ih = p / ow * t->s - t->pads[0] + k / 3, iw = p % ow * t->s - t->pads[1] + k % 3;
					int in = ih >= 0 && ih < t->h && iw >= 0 && iw < t->w;
					v = fmaf(wd[m * 9 + k], in ? e[m * hw + ih * t->w + iw] : 0.0f, v);
				}
				dd[m * P + p] = v > 1.5f ? 1.5f : v < 0.0f ? 0.0f : v;
			}
		for (int64_t m = 0; m < t->cout; m++)
			for (int64_t p = 0; p < P; p++) {
				int64_t yi = (n * t->cout + m) * P + p;
				float v = b2[m];
				for (int64_t k = 0; k < t->ce; k++)
					v = fmaf(w2[m * t->ce + k], dd[k * P + p], v);
				y[yi] = t->add ? v + ad[yi] : v;
			}
	}
	free(e);
	free(dd);
}

/* Blocked channels (where AVX-512 runs them) give the scalar replay's
 * bits, on 1 and 2 threads. */
static void test_blocked_replay(void **state)
{
	struct hp_pool *pool;

	(void)state;
	if (!hp_fir_available() || !hp_pw_512())
		skip();
	assert_int_equal(hp_pool_create(2, &pool), 0);
	for (int ci = 0; ci < 2 * NCASES; ci++) {
		const struct ic *t = &cases[ci % NCASES];
		struct data d;
		struct hp_tensor got;
		float *want;
		int64_t ny = t->n * t->cout * odim(t, 0) * odim(t, 1);

		if (t->noexp)
			continue;
		lo1 = ci < NCASES ? 0.0f : 0.25f;
		make(t, 90 + (unsigned)ci, &d);
		want = malloc((size_t)ny * sizeof *want);
		replay(t, &d, want);
		for (int p = 0; p < 2; p++) {
			hp_fir_set_mode(3);
			fused(t, &d, 1, p ? pool : NULL, &got);
			hp_fir_set_mode(0);
			if (memcmp(got.data, want, (size_t)ny * sizeof(float)))
				fail_msg("case %d: blocked channels (%d thread%s) not the scalar replay's bits", ci % NCASES,
					 p + 1, p ? "s" : "");
			hp_tensor_free(&got);
		}
		free(want);
		drop(&d);
	}
	lo1 = 0.0f;
	hp_pool_destroy(pool);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_against_unfused),
		cmocka_unit_test(test_bands),
		cmocka_unit_test(test_blocked_replay),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
