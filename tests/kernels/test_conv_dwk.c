/* Depthwise KxK forward by channel blocks (kernels/conv_dwk.c): 5x5, 7x7
 * and dilated 3x3 windows at stride 1 and 2.  Every output is the chain
 * the kernel promises bit for bit (bias, then fmaf over the taps in
 * (kh, kw) order, taps in the padding as w * 0; a scalar replay here),
 * within 1e-5 of double loops and of conv_dw.c's generic rows, the same
 * bits on a pool of 2, with the fused Add and Clip after it, and for
 * every band of output rows (its input rows with their halo, the band's
 * top pad, as exec/split_band.c cuts them) the rows of the whole.
 * With AVX-512, small planes run on conv_dwkz.c's sixteen lanes (the same
 * chains); test_flat16 holds them to eight lanes and to W packed once. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "kernels/conv_impl.h"
#include "kernels/cpu.h"
#include "kernels/eltwise_impl.h"
#include "kernels/fused_impl.h"
#include "tests/kernels/harness.h"

/* { n, c, mult, in, k, s, d, pb, pe } (2-D, square windows; every input
 * row read: geom()'s whole geometry assumes it) */
struct kc {
	int64_t n, c, mult, in[2], k, s, d[2], pb[2], pe[2];
};

static const struct kc cases[] = {
	/* the nets' layers: 5x5 pads 2 at stride 1 and 2, planes of 2 to 33 */
	{ 2, 13, 1, { 8, 8 }, 5, 1, { 1, 1 }, { 2, 2 }, { 2, 2 } },
	{ 1, 20, 1, { 33, 31 }, 5, 2, { 1, 1 }, { 2, 2 }, { 2, 2 } },
	{ 2, 9, 1, { 2, 2 }, 5, 1, { 1, 1 }, { 2, 2 }, { 2, 2 } },
	{ 1, 16, 1, { 4, 3 }, 5, 2, { 1, 1 }, { 2, 2 }, { 2, 2 } },
	{ 1, 8, 1, { 24, 24 }, 5, 1, { 1, 1 }, { 2, 2 }, { 2, 2 } },
	/* 7x7 (ConvNeXt's: pads 3), uneven pads, a multiplier */
	{ 1, 11, 1, { 14, 14 }, 7, 1, { 1, 1 }, { 3, 3 }, { 3, 3 } },
	{ 2, 5, 2, { 17, 12 }, 7, 2, { 1, 1 }, { 0, 3 }, { 2, 1 } },
	{ 1, 3, 1, { 9, 29 }, 7, 1, { 1, 1 }, { 1, 0 }, { 0, 2 } },
	/* dilated: 3x3 (conv_dw3.c's are undilated), 5x5, rows and columns apart */
	{ 1, 10, 1, { 15, 19 }, 3, 1, { 2, 2 }, { 2, 2 }, { 2, 2 } },
	{ 2, 7, 1, { 12, 16 }, 3, 2, { 1, 3 }, { 1, 3 }, { 0, 2 } },
	{ 1, 9, 1, { 12, 11 }, 5, 1, { 2, 1 }, { 4, 2 }, { 3, 2 } },
	/* planes narrower than eight outputs (the flat steps across rows):
	 * 3x3 and 6x6 planes (steps of nine), 5x5 (eight, the last past the
	 * plane), a dilated 3x3 on a 7x7 plane */
	{ 1, 20, 1, { 3, 3 }, 5, 1, { 1, 1 }, { 2, 2 }, { 2, 2 } },
	{ 2, 12, 1, { 6, 6 }, 5, 1, { 1, 1 }, { 2, 2 }, { 2, 2 } },
	{ 1, 19, 1, { 11, 11 }, 5, 2, { 1, 1 }, { 2, 2 }, { 2, 2 } },
	{ 1, 9, 1, { 5, 5 }, 7, 1, { 1, 1 }, { 3, 3 }, { 3, 3 } },
	{ 1, 10, 1, { 7, 7 }, 3, 1, { 2, 2 }, { 2, 2 }, { 2, 2 } },
	/* rows of eight and a tail (12x12: the tails eight at a time across
	 * rows), and a plane too large to hold whole (the ring, row by row) */
	{ 1, 11, 1, { 12, 12 }, 5, 1, { 1, 1 }, { 2, 2 }, { 2, 2 } },
	{ 1, 9, 1, { 24, 24 }, 5, 2, { 1, 1 }, { 2, 2 }, { 2, 2 } },
	{ 1, 3, 1, { 60, 61 }, 5, 1, { 1, 1 }, { 2, 2 }, { 2, 2 } },
	/* conv_dwkz.c's sixteen-lane planes: 1x1 planes, 7x7 from 14x14 at
	 * stride 2 (5x5 and 7x7 windows), 7x7 under a 7x7 window, channels
	 * past a block of sixteen with a multiplier, a dilated 3x3 at 6x6 */
	{ 1, 20, 1, { 1, 1 }, 5, 1, { 1, 1 }, { 2, 2 }, { 2, 2 } },
	{ 2, 17, 1, { 1, 1 }, 7, 1, { 1, 1 }, { 3, 3 }, { 3, 3 } },
	{ 1, 40, 1, { 14, 14 }, 7, 2, { 1, 1 }, { 3, 3 }, { 3, 3 } },
	{ 1, 33, 1, { 14, 14 }, 5, 2, { 1, 1 }, { 2, 2 }, { 2, 2 } },
	{ 1, 24, 1, { 7, 7 }, 7, 1, { 1, 1 }, { 3, 3 }, { 3, 3 } },
	{ 2, 18, 2, { 4, 4 }, 5, 2, { 1, 1 }, { 2, 2 }, { 2, 2 } },
	{ 1, 16, 1, { 6, 6 }, 3, 1, { 2, 2 }, { 2, 2 }, { 2, 2 } },
	/* its largest planes: 5x5 at stride 2 from 24x24 (27x27 padded, the
	 * 24x24 above too), 7x7 at 16x16 (22x22 padded, 256 outputs) */
	{ 2, 21, 1, { 24, 24 }, 5, 2, { 1, 1 }, { 2, 2 }, { 2, 2 } },
	{ 1, 17, 1, { 16, 16 }, 7, 1, { 1, 1 }, { 3, 3 }, { 3, 3 } },
};

static int64_t out_dim(const struct kc *t, int i)
{
	return (t->in[i] + t->pb[i] + t->pe[i] - (t->k - 1) * t->d[i] - 1) / t->s + 1;
}

/* The geometry of output rows [r0, r1) as conv_dw.c takes it: the band's
 * input rows [*i0, *i1) and what remains of the top pad above them. */
static struct hp_dw geom(const struct kc *t, int64_t r0, int64_t r1, int64_t *i0, int64_t *i1)
{
	struct hp_dw d = { .batch = t->n, .cin = t->c, .mult = t->mult };
	int64_t lo = r0 * t->s - t->pb[0], hi = (r1 - 1) * t->s - t->pb[0] + (t->k - 1) * t->d[0] + 1;

	*i0 = lo < 0 ? 0 : lo;
	*i1 = hi > t->in[0] ? t->in[0] : hi;
	d.g.img[0] = d.g.grid[0] = d.g.k[0] = d.g.stride[0] = d.g.dil[0] = 1;
	d.g.img[1] = *i1 - *i0, d.g.img[2] = t->in[1];
	d.g.grid[1] = r1 - r0, d.g.grid[2] = out_dim(t, 1);
	for (int i = 0; i < 2; i++)
		d.g.k[1 + i] = t->k, d.g.stride[1 + i] = t->s, d.g.dil[1 + i] = t->d[i], d.g.pad[1 + i] = t->pb[i];
	d.g.pad[1] = *i0 - lo;
	hp_colgeom_finish(&d.g);
	return d;
}

/* y as one chain per output: bias, then fmaf over (kh, kw), taps in the
 * padding as w * 0; then act(y + addend) as fused_epi.c computes it (add
 * NULL: none; Clip to [lo, hi]).  dbl: the taps in double instead,
 * padding skipped (the loops the chains approximate). */
static void chain_ref(const struct kc *t, const float *x, const float *w, const float *b, const float *add,
		      enum hp_epi_act act, float lo, float hi, float *y, double *dbl)
{
	int64_t oh = out_dim(t, 0), ow = out_dim(t, 1), m = t->c * t->mult, kk = t->k * t->k;

	for (int64_t n = 0; n < t->n; n++)
		for (int64_t o = 0; o < m; o++)
			for (int64_t i = 0; i < oh * ow; i++) {
				const float *xp = x + (n * t->c + o / t->mult) * t->in[0] * t->in[1];
				int64_t yi = (n * m + o) * oh * ow + i;
				float v = b[o];
				double dv = b[o];
				for (int64_t k = 0; k < kk; k++) {
					int64_t ih = i / ow * t->s - t->pb[0] + k / t->k * t->d[0];
					int64_t iw = i % ow * t->s - t->pb[1] + k % t->k * t->d[1];
					int in = ih >= 0 && ih < t->in[0] && iw >= 0 && iw < t->in[1];
					v = fmaf(w[o * kk + k], in ? xp[ih * t->in[1] + iw] : 0.0f, v);
					if (in)
						dv += (double)w[o * kk + k] * xp[ih * t->in[1] + iw];
				}
				if (add)
					v = v + add[yi];
				if (act == HP_EPI_CLIP)
					v = v < lo ? lo : v > hi ? hi : v;
				else if (act == HP_EPI_RELU)
					v = v < 0.0f ? 0.0f : v;
				else if (act == HP_EPI_HSWISH) {
					float s = v * (1.0f / 6.0f) + 0.5f;
					s = s < 0.0f ? 0.0f : s;
					v = v * (s > 1.0f ? 1.0f : s);
				} else if (act == HP_EPI_SIGMOID) {
					v = hpk_sigmoidf(v);
				}
				y[yi] = v;
				if (dbl)
					dbl[yi] = dv;
			}
}

static float *data(size_t n, unsigned seed)
{
	float *p = malloc(n * sizeof *p);
	uint32_t s = seed * 2654435761u + 7;

	for (size_t i = 0; i < n; i++) {
		s = s * 1664525u + 1013904223u;
		p[i] = (float)(s >> 8) / (float)(1u << 23) - 1.0f;
	}
	return p;
}

/* The whole node of case t (mode -1: conv_dw.c's generic rows). */
static void run(const struct kc *t, int mode, struct hp_pool *pool, const float *x, const float *w, const float *b,
		const struct hp_epi *epi, const float *add, float *y)
{
	int64_t i0, i1;
	struct hp_dw d = geom(t, 0, out_dim(t, 0), &i0, &i1);

	d.epi = epi;
	d.addend = add;
	hp_dwk_set_mode(mode);
	hp_dw_forward(&d, x, w, b, y, pool);
	hp_dwk_set_mode(0);
}

static void test_chains(void **state)
{
	struct hp_pool *pool;

	(void)state;
	if (!hp_dot_available())
		skip();
	assert_int_equal(hp_pool_create(2, &pool), 0);
	for (int ci = 0; ci < (int)(sizeof cases / sizeof cases[0]); ci++) {
		const struct kc *t = &cases[ci];
		int64_t m = t->c * t->mult, ny = t->n * m * out_dim(t, 0) * out_dim(t, 1), i0, i1;
		size_t nx = (size_t)(t->n * t->c * t->in[0] * t->in[1]);
		float *x = data(nx, 3 + ci), *w = data((size_t)(m * t->k * t->k), 5 + ci), *b = data((size_t)m, 7 + ci);
		float *add = data((size_t)ny, 9 + ci), *ref = malloc((size_t)ny * 4), *y = malloc((size_t)ny * 4);
		float *y2 = malloc((size_t)ny * 4);
		double *dref = malloc((size_t)ny * sizeof *dref);
		struct hp_epi clip = { .act = HP_EPI_CLIP, .add = HP_EPI_ADD_FULL, .lo = 0.0f, .hi = 0.5f };
		struct hp_dw whole = geom(t, 0, out_dim(t, 0), &i0, &i1);

		assert_true(hp_dwk_eligible(&whole.g));
		run(t, 0, NULL, x, w, b, NULL, NULL, y);
		chain_ref(t, x, w, b, NULL, HP_EPI_NONE, 0, 0, ref, dref);
		if (memcmp(y, ref, (size_t)ny * 4))
			fail_msg("case %d: not the fmaf chain of every output", ci);
		for (int64_t i = 0; i < ny; i++)
			if (fabs(y[i] - dref[i]) > 1e-5 * (double)(t->k * t->k))
				fail_msg("case %d: %g against loops %g at %lld", ci, y[i], dref[i], (long long)i);
		run(t, -1, NULL, x, w, b, NULL, NULL, y2); /* generic rows: other roundings, the same sums */
		for (int64_t i = 0; i < ny; i++)
			if (fabs(y[i] - y2[i]) > 1e-5 * (double)(t->k * t->k))
				fail_msg("case %d: %g against the generic rows' %g at %lld", ci, y[i], y2[i], (long long)i);
		run(t, 0, pool, x, w, b, NULL, NULL, y2);
		if (memcmp(y, y2, (size_t)ny * 4))
			fail_msg("case %d: a pool of 2 changes the bits", ci);
		run(t, 0, pool, x, w, b, &clip, add, y);
		chain_ref(t, x, w, b, add, HP_EPI_CLIP, 0.0f, 0.5f, ref, NULL);
		if (memcmp(y, ref, (size_t)ny * 4))
			fail_msg("case %d: the fused Add and Clip differ from fused_epi.c's", ci);
		/* Relu and HardSwish (in registers), Sigmoid (over the block's
		 * planes after it, its last n % 16 in vectors), alone and after
		 * the Add */
		for (int a = 0; a < 3; a++) {
			static const enum hp_epi_act acts[] = { HP_EPI_RELU, HP_EPI_HSWISH, HP_EPI_SIGMOID };
			struct hp_epi e = { .act = acts[a], .add = ci % 2 ? HP_EPI_ADD_FULL : HP_EPI_ADD_NONE };
			for (int64_t i = 0; i < ny; i += 7) /* some lanes exactly 0, some NaN: as the scalars treat them */
				add[i] = i % 3 ? -y2[i] : NAN;
			run(t, 0, ci % 3 ? pool : NULL, x, w, b, &e, ci % 2 ? add : NULL, y);
			chain_ref(t, x, w, b, ci % 2 ? add : NULL, e.act, 0, 0, ref, NULL);
			if (memcmp(y, ref, (size_t)ny * 4))
				fail_msg("case %d: the fused %s differs from fused_epi.c's", ci,
					 a == 2 ? "Sigmoid" : a ? "HardSwish" : "Relu");
		}
		free(x), free(w), free(b), free(add), free(ref), free(y), free(y2), free(dref);
	}
	hp_pool_destroy(pool);
}

/* Bands of output rows (their input rows and halo, the band's top pad) are
 * bitwise the rows of the whole, alone and on a pool of 2. */
static void test_bands(void **state)
{
	struct hp_pool *pool;

	(void)state;
	if (!hp_dot_available())
		skip();
	assert_int_equal(hp_pool_create(2, &pool), 0);
	for (int ci = 0; ci < (int)(sizeof cases / sizeof cases[0]); ci++) {
		const struct kc *t = &cases[ci];
		int64_t oh = out_dim(t, 0), ow = out_dim(t, 1), i0, i1, m = t->c * t->mult;
		size_t nx = (size_t)(t->n * t->c * t->in[0] * t->in[1]), ny = (size_t)(t->n * m * oh * ow);
		float *x = data(nx, 13 + ci), *w = data((size_t)(m * t->k * t->k), 15 + ci), *b = data((size_t)m, 17 + ci);
		float *y = malloc(ny * 4), *yb = malloc(ny * 4), *xb = malloc(nx * 4);

		run(t, 0, NULL, x, w, b, NULL, NULL, y);
		for (int64_t r0 = 0; r0 < oh; r0 += 1 + oh / 9)
			for (int64_t r1 = r0 + 1; r1 <= oh; r1 += 1 + oh / 7) {
				struct hp_dw band = geom(t, r0, r1, &i0, &i1);
				assert_true(hp_dwk_eligible(&band.g));
				for (int64_t p = 0; p < t->n * t->c; p++)
					memcpy(xb + p * (i1 - i0) * t->in[1], x + (p * t->in[0] + i0) * t->in[1],
					       (size_t)((i1 - i0) * t->in[1]) * 4);
				hp_dw_forward(&band, xb, w, b, yb, (r0 + r1) % 2 ? pool : NULL);
				for (int64_t p = 0; p < t->n * m; p++)
					if (memcmp(yb + p * (r1 - r0) * ow, y + (p * oh + r0) * ow, (size_t)((r1 - r0) * ow) * 4))
						fail_msg("case %d: band [%lld, %lld) differs from the whole", ci,
							 (long long)r0, (long long)r1);
			}
		free(x), free(w), free(b), free(y), free(yb), free(xb);
	}
	hp_pool_destroy(pool);
}

/* dX of a stride-1 case (multiplier 1) as the kernel's forward with the
 * mirrored window: each element 0 + fmaf over the taps in mirrored
 * (kh, kw) order, dY outside as 0 (a scalar replay); within 1e-5 of the
 * double loops and of the scatter loops (mode -1); a pool of 2 gives the
 * same bits. */
static void dx_ref(const struct kc *t, const float *dy, const float *w, float *dx, double *dbl)
{
	int64_t oh = out_dim(t, 0), ow = out_dim(t, 1), kk = t->k * t->k;

	for (int64_t pl = 0; pl < t->n * t->c; pl++)
		for (int64_t i = 0; i < t->in[0] * t->in[1]; i++) {
			float v = 0.0f;
			double dv = 0;
			for (int64_t k = kk - 1; k >= 0; k--) {
				int64_t yh = i / t->in[1] + t->pb[0] - k / t->k * t->d[0];
				int64_t yw = i % t->in[1] + t->pb[1] - k % t->k * t->d[1];
				int in = yh >= 0 && yh < oh && yw >= 0 && yw < ow;
				float g = in ? dy[(pl * oh + yh) * ow + yw] : 0.0f;
				v = fmaf(w[pl % t->c * kk + k], g, v);
				dv += (double)w[pl % t->c * kk + k] * g;
			}
			dx[pl * t->in[0] * t->in[1] + i] = v;
			dbl[pl * t->in[0] * t->in[1] + i] = dv;
		}
}

static void test_data_flip(void **state)
{
	struct hp_pool *pool;
	int tested = 0;

	(void)state;
	if (!hp_dot_available())
		skip();
	assert_int_equal(hp_pool_create(2, &pool), 0);
	for (int ci = 0; ci < (int)(sizeof cases / sizeof cases[0]); ci++) {
		const struct kc *t = &cases[ci];
		int64_t oh = out_dim(t, 0), ow = out_dim(t, 1), i0, i1;
		size_t nx = (size_t)(t->n * t->c * t->in[0] * t->in[1]), ny = (size_t)(t->n * t->c * oh * ow);
		struct hp_dw d = geom(t, 0, oh, &i0, &i1), f;
		if (t->s != 1 || t->mult != 1)
			continue;
		float *dy = data(ny, 41 + ci), *w = data((size_t)(t->c * t->k * t->k), 43 + ci);
		float *ref = malloc(nx * 4), *got = malloc(nx * 4), *ws = malloc(hp_dw_data_ws(&d) + 4);
		double *dref = malloc(nx * sizeof *dref);

		assert_true(hp_dwk_data_flip(&d, &f));
		assert_true(hp_dw_data_ws(&d) >= (size_t)(t->c * t->k * t->k) * 4);
		dx_ref(t, dy, w, ref, dref);
		for (int p = 0; p < 2; p++) {
			hp_dw_data(&d, dy, w, got, ws, p ? pool : NULL);
			if (memcmp(ref, got, nx * 4))
				fail_msg("case %d: dX is not the mirrored chain (%s)", ci, p ? "pool" : "alone");
		}
		for (size_t i = 0; i < nx; i++)
			if (fabs(got[i] - dref[i]) > 1e-5 * (double)(t->k * t->k))
				fail_msg("case %d: dX %g against loops %g at %zu", ci, got[i], dref[i], i);
		hp_dwk_set_mode(-1);
		hp_dw_data(&d, dy, w, got, ws, NULL);
		hp_dwk_set_mode(0);
		for (size_t i = 0; i < nx; i++)
			if (fabs(got[i] - ref[i]) > 1e-5 * (double)(t->k * t->k))
				fail_msg("case %d: dX %g against the scatter loops' %g at %zu", ci, ref[i], got[i], i);
		free(dy), free(w), free(ref), free(got), free(ws), free(dref);
		tested++;
	}
	assert_true(tested >= 5);
	hp_pool_destroy(pool);
}

/* The dX geometry of dX rows [r0, r1) from dY rows [y0, y1) (multiplier
 * 1), as conv_grad.c's bands of ConvGradData take it (the top pad
 * negative where y0 lies above the band). */
static struct hp_dw dx_geom(const struct kc *t, int64_t r0, int64_t r1, int64_t y0, int64_t y1)
{
	struct hp_dw d = { .batch = t->n, .cin = t->c, .mult = 1 };

	d.g.img[0] = d.g.grid[0] = d.g.k[0] = d.g.stride[0] = d.g.dil[0] = 1;
	d.g.img[1] = r1 - r0, d.g.img[2] = t->in[1];
	d.g.grid[1] = y1 - y0, d.g.grid[2] = out_dim(t, 1);
	for (int i = 0; i < 2; i++)
		d.g.k[1 + i] = t->k, d.g.stride[1 + i] = t->s, d.g.dil[1 + i] = t->d[i], d.g.pad[1 + i] = t->pb[i];
	d.g.pad[1] = t->pb[0] + r0 - t->s * y0;
	hp_colgeom_finish(&d.g);
	return d;
}

/* Bands of dX rows from the dY rows their windows reach (or one more
 * above) are bitwise the rows of the whole, on a pool of 2. */
static void test_data_bands(void **state)
{
	struct hp_pool *pool;

	(void)state;
	if (!hp_dot_available())
		skip();
	assert_int_equal(hp_pool_create(2, &pool), 0);
	for (int ci = 0; ci < (int)(sizeof cases / sizeof cases[0]); ci++) {
		const struct kc *t = &cases[ci];
		int64_t oh = out_dim(t, 0), ow = out_dim(t, 1), ih = t->in[0], iw = t->in[1], reach = (t->k - 1) * t->d[0];
		size_t nx = (size_t)(t->n * t->c * ih * iw), ny = (size_t)(t->n * t->c * oh * ow);
		if (t->s != 1 || t->mult != 1)
			continue;
		float *dy = data(ny, 51 + ci), *w = data((size_t)(t->c * t->k * t->k), 53 + ci);
		float *whole = malloc(nx * 4), *got = malloc(nx * 4), *dyb = malloc(ny * 4);
		struct hp_dw d = dx_geom(t, 0, ih, 0, oh);
		float *ws = malloc(hp_dw_data_ws(&d));

		hp_dw_data(&d, dy, w, whole, ws, NULL);
		for (int64_t r0 = 0; r0 < ih; r0 += 1 + ih / 6)
			for (int64_t r1 = r0 + 1; r1 <= ih; r1 += 1 + ih / 5)
				for (int wide = 0; wide < 2; wide++) {
					/* dY rows o with o = i + pb - kh dil for i in the band */
					int64_t y0 = r0 + t->pb[0] - reach - wide, y1 = r1 - 1 + t->pb[0] + 1;
					y0 = y0 < 0 ? 0 : y0, y1 = y1 > oh ? oh : y1;
					if (y0 >= y1)
						continue;
					struct hp_dw band = dx_geom(t, r0, r1, y0, y1);
					struct hp_dw f;
					assert_true(hp_dwk_data_flip(&band, &f));
					for (int64_t pl = 0; pl < t->n * t->c; pl++)
						memcpy(dyb + pl * (y1 - y0) * ow, dy + (pl * oh + y0) * ow,
						       (size_t)((y1 - y0) * ow) * 4);
					float *bws = malloc(hp_dw_data_ws(&band));
					hp_dw_data(&band, dyb, w, got, bws, pool);
					free(bws);
					for (int64_t pl = 0; pl < t->n * t->c; pl++)
						if (memcmp(got + pl * (r1 - r0) * iw, whole + (pl * ih + r0) * iw,
							   (size_t)((r1 - r0) * iw) * 4))
							fail_msg("case %d: dX band [%lld, %lld) from dY [%lld, %lld) differs", ci,
								 (long long)r0, (long long)r1, (long long)y0, (long long)y1);
				}
		free(dy), free(w), free(whole), free(got), free(dyb), free(ws);
	}
	hp_pool_destroy(pool);
}

/* ---- dX at stride 2 (conv_dwk_grad.c) ---- */

/* { n, c, mult, in, k, s, d, pb, pe }: stride 2, multiplier 1 (blocks of
 * 16 and partial ones, odd and even widths and pads) */
static const struct kc s2cases[] = {
	{ 1, 20, 1, { 33, 31 }, 5, 2, { 1, 1 }, { 2, 2 }, { 2, 2 } },
	{ 2, 13, 1, { 12, 12 }, 5, 2, { 1, 1 }, { 2, 2 }, { 2, 2 } },
	{ 1, 16, 1, { 4, 3 }, 5, 2, { 1, 1 }, { 2, 2 }, { 2, 2 } },
	{ 1, 33, 1, { 24, 24 }, 5, 2, { 1, 1 }, { 1, 2 }, { 2, 1 } },
	{ 1, 17, 1, { 14, 15 }, 7, 2, { 1, 1 }, { 3, 3 }, { 3, 3 } },
	{ 2, 5, 1, { 17, 12 }, 7, 2, { 1, 1 }, { 0, 3 }, { 2, 1 } },
	{ 1, 9, 1, { 7, 40 }, 5, 2, { 1, 1 }, { 0, 0 }, { 1, 1 } },
};

/* dX as the chain promised: per element 0, then fmaf over the taps (kh, kw)
 * in order whose dY position ((i + pb - kh) / 2, (j + pb - kw) / 2) is
 * whole, dY outside the grid as 0; dbl: the same in double, outside skipped. */
static void dx2_ref(const struct kc *t, const float *dy, const float *w, float *dx, double *dbl)
{
	int64_t oh = out_dim(t, 0), ow = out_dim(t, 1), kk = t->k * t->k;

	for (int64_t pl = 0; pl < t->n * t->c; pl++)
		for (int64_t i = 0; i < t->in[0] * t->in[1]; i++) {
			float v = 0.0f;
			double dv = 0;
			for (int64_t k = 0; k < kk; k++) {
				int64_t a = i / t->in[1] + t->pb[0] - k / t->k, b = i % t->in[1] + t->pb[1] - k % t->k;
				if ((a & 1) || (b & 1))
					continue;
				int in = a >= 0 && b >= 0 && a / 2 < oh && b / 2 < ow;
				float g = in ? dy[(pl * oh + a / 2) * ow + b / 2] : 0.0f;
				v = fmaf(w[pl % t->c * kk + k], g, v);
				dv += (double)w[pl % t->c * kk + k] * g;
			}
			dx[pl * t->in[0] * t->in[1] + i] = v;
			dbl[pl * t->in[0] * t->in[1] + i] = dv;
		}
}

/* Stride-2 dX is the chain bit for bit, alone and on a pool of 2; within
 * 1e-5 K^2 of double loops and of the scatter loops (mode -1); bands of dX
 * rows from the dY rows their windows reach (or one more above) are
 * bitwise the rows of the whole. */
static void test_data_s2(void **state)
{
	struct hp_pool *pool;

	(void)state;
	assert_int_equal(hp_pool_create(2, &pool), 0);
	for (int ci = 0; ci < (int)(sizeof s2cases / sizeof s2cases[0]); ci++) {
		const struct kc *t = &s2cases[ci];
		int64_t oh = out_dim(t, 0), ow = out_dim(t, 1), ih = t->in[0], iw = t->in[1];
		size_t nx = (size_t)(t->n * t->c * ih * iw), ny = (size_t)(t->n * t->c * oh * ow);
		struct hp_dw d = dx_geom(t, 0, ih, 0, oh);
		if (!hp_dkd_eligible(&d)) {
			hp_pool_destroy(pool);
			skip();
		}
		float *dy = data(ny, 61 + ci), *w = data((size_t)(t->c * t->k * t->k), 63 + ci), *dyb = malloc(ny * 4);
		float *ref = malloc(nx * 4), *got = malloc(nx * 4), *ws = malloc(hp_dw_data_ws(&d));
		double *dref = malloc(nx * sizeof *dref);

		dx2_ref(t, dy, w, ref, dref);
		for (int p = 0; p < 2; p++) {
			memset(got, 0x7f, nx * 4);
			hp_dw_data(&d, dy, w, got, ws, p ? pool : NULL);
			if (memcmp(ref, got, nx * 4))
				fail_msg("s2 case %d: dX is not the chain (%s)", ci, p ? "pool" : "alone");
		}
		for (size_t i = 0; i < nx; i++)
			if (fabs(got[i] - dref[i]) > 1e-5 * (double)(t->k * t->k))
				fail_msg("s2 case %d: dX %g against loops %g at %zu", ci, got[i], dref[i], i);
		hp_dkg_set_mode(-1);
		hp_dw_data(&d, dy, w, got, ws, NULL);
		hp_dkg_set_mode(0);
		for (size_t i = 0; i < nx; i++)
			if (fabs(got[i] - ref[i]) > 1e-5 * (double)(t->k * t->k))
				fail_msg("s2 case %d: dX %g against the scatter loops' %g at %zu", ci, ref[i], got[i], i);
		for (int64_t r0 = 0; r0 < ih; r0 += 1 + ih / 6)
			for (int64_t r1 = r0 + 1; r1 <= ih; r1 += 1 + ih / 5)
				for (int wide = 0; wide < 2; wide++) {
					/* dY rows o with 2 o = i + pb - kh for i in the band */
					int64_t y0 = (r0 + t->pb[0] - (t->k - 1) + 1) / 2 - wide, y1 = (r1 - 1 + t->pb[0]) / 2 + 1;
					y0 = y0 < 0 ? 0 : y0, y1 = y1 > oh ? oh : y1;
					if (y0 >= y1)
						continue;
					struct hp_dw band = dx_geom(t, r0, r1, y0, y1);
					assert_true(hp_dkd_eligible(&band));
					for (int64_t pl = 0; pl < t->n * t->c; pl++)
						memcpy(dyb + pl * (y1 - y0) * ow, dy + (pl * oh + y0) * ow,
						       (size_t)((y1 - y0) * ow) * 4);
					float *bws = malloc(hp_dw_data_ws(&band));
					hp_dw_data(&band, dyb, w, got, bws, (r0 + r1) % 2 ? pool : NULL);
					free(bws);
					for (int64_t pl = 0; pl < t->n * t->c; pl++)
						if (memcmp(got + pl * (r1 - r0) * iw, ref + (pl * ih + r0) * iw,
							   (size_t)((r1 - r0) * iw) * 4))
							fail_msg("s2 case %d: dX band [%lld, %lld) from dY [%lld, %lld) differs", ci,
								 (long long)r0, (long long)r1, (long long)y0, (long long)y1);
				}
		free(dy), free(w), free(dyb), free(ref), free(got), free(ws), free(dref);
	}
	hp_pool_destroy(pool);
}

/* ---- dW (conv_dwk_grad.c) ---- */

/* dW as the chain conv_dwk_grad.c promises (conv_dwc.c's): per channel and
 * tap, acc, then the units (urows grid rows of an item) from the last to
 * the first, each the sum from 0 over its rows in order of the row's fmaf
 * chain over its positions from 0 (taps in the padding as dY * 0).  dbl:
 * the same sums in double, padding skipped (from 0, any order). */
static void dwf_ref(const struct kc *t, const float *dy, const float *x, const float *acc, int64_t urows, float *dw,
		    double *dbl)
{
	int64_t oh = out_dim(t, 0), ow = out_dim(t, 1), m = t->c * t->mult, kk = t->k * t->k;

	for (int64_t o = 0; o < m; o++)
		for (int64_t k = 0; k < kk; k++) {
			float out = acc ? acc[o * kk + k] : 0.0f;
			double dv = 0.0;
			for (int64_t n = t->n - 1; n >= 0; n--) {
				const float *xp = x + (n * t->c + o / t->mult) * t->in[0] * t->in[1];
				const float *dyp = dy + (n * m + o) * oh * ow;
				for (int64_t q0 = (oh - 1) / urows * urows; q0 >= 0; q0 -= urows) {
					float u = 0.0f;
					for (int64_t q = q0; q < q0 + urows && q < oh; q++) {
						float a = 0.0f;
						for (int64_t j = 0; j < ow; j++) {
							int64_t ih = q * t->s - t->pb[0] + k / t->k * t->d[0];
							int64_t iw = j * t->s - t->pb[1] + k % t->k * t->d[1];
							int in = ih >= 0 && ih < t->in[0] && iw >= 0 && iw < t->in[1];
							a = fmaf(dyp[q * ow + j], in ? xp[ih * t->in[1] + iw] : 0.0f, a);
							if (in)
								dv += (double)dyp[q * ow + j] * xp[ih * t->in[1] + iw];
						}
						u = u + a;
					}
					out = out + u;
				}
			}
			dw[o * kk + k] = out;
			if (dbl)
				dbl[o * kk + k] = dv;
		}
}

/* hp_dw_filter of geometry d (unit: positions per unit, 0 an item; mode
 * -1: conv_dw.c's generic loops). */
static void dwf_run(struct hp_dw d, int64_t unit, int mode, const float *dy, const float *x, const float *acc,
		    float *dw, struct hp_pool *pool)
{
	float *ws = malloc(hp_dw_filter_ws(&d));

	d.unit = unit;
	hp_dkg_set_mode(mode);
	hp_dwp_set_mode(-1); /* rows of 24 and more: conv_dwp_grad.c's own chain (test_conv_dw) */
	hp_dw_filter(&d, dy, x, acc, dw, ws, pool);
	hp_dwp_set_mode(0);
	hp_dkg_set_mode(0);
	free(ws);
}

/* The undilated 5x5 and 7x7 cases: every dW element is the promised chain
 * bit for bit (units of one row, three rows and an item; from a running
 * sum and from 0; alone and on a pool of 2), within 1e-6 per term of
 * double loops and of the generic loops; bands chained as the band pass
 * chains them (the later band first, the earlier starting from its sums)
 * are bitwise the whole: bands of rows (their input rows and halo, the
 * band's top pad) with units of a row, bands of items with units of an
 * item. */
static void test_filter(void **state)
{
	struct hp_pool *pool;
	int ran = 0;

	(void)state;
	assert_int_equal(hp_pool_create(2, &pool), 0);
	for (int ci = 0; ci < (int)(sizeof cases / sizeof cases[0]); ci++) {
		const struct kc *t = &cases[ci];
		int64_t oh = out_dim(t, 0), ow = out_dim(t, 1), i0, i1, m = t->c * t->mult, kk = t->k * t->k;
		size_t nx = (size_t)(t->n * t->c * t->in[0] * t->in[1]), ny = (size_t)(t->n * m * oh * ow);
		struct hp_dw whole = geom(t, 0, oh, &i0, &i1);
		float *x, *dy, *acc, *ref, *got, *hi, *xb, *dyb;
		double *dbl, tol = 1e-6 * (double)(t->n * oh * ow);

		if (t->k < 5 || t->d[0] != 1 || t->d[1] != 1 || !hp_dkg_eligible(&whole.g))
			continue;
		ran++;
		x = data(nx, 23 + ci), dy = data(ny, 29 + ci), acc = data((size_t)(m * kk), 31 + ci);
		ref = malloc((size_t)(m * kk) * 4), got = malloc((size_t)(m * kk) * 4), hi = malloc((size_t)(m * kk) * 4);
		dbl = malloc((size_t)(m * kk) * sizeof *dbl), xb = malloc(nx * 4), dyb = malloc(ny * 4);
		for (int u = 0; u < 3; u++)
			for (int a = 0; a < 2; a++)
				for (int p = 0; p < 2; p++) {
					int64_t ur = u == 0 ? 1 : u == 1 ? oh : 3;
					dwf_ref(t, dy, x, a ? acc : NULL, ur, ref, NULL);
					dwf_run(whole, u == 1 ? 0 : ur * ow, 0, dy, x, a ? acc : NULL, got, p ? pool : NULL);
					if (memcmp(ref, got, (size_t)(m * kk) * 4))
						fail_msg("case %d: dW (units of %lld rows, %s, %s) is not the chain", ci,
							 (long long)ur, a ? "running sum" : "from 0", p ? "pool" : "alone");
				}
		dwf_ref(t, dy, x, NULL, 1, ref, dbl);
		dwf_run(whole, 0, -1, dy, x, NULL, hi, NULL); /* generic loops: other roundings, the same sums */
		for (int64_t i = 0; i < m * kk; i++)
			if (fabs(ref[i] - dbl[i]) > tol || fabs(ref[i] - hi[i]) > tol)
				fail_msg("case %d: dW %g against loops %g and the generic loops' %g at %lld", ci, ref[i],
					 dbl[i], hi[i], (long long)i);
		for (int64_t r = 1; t->n == 1 && r < oh; r += 1 + oh / 5) { /* bands of rows, units of a row */
			struct hp_dw up = geom(t, r, oh, &i0, &i1), lo;
			for (int64_t pl = 0; pl < t->c; pl++)
				memcpy(xb + pl * (i1 - i0) * t->in[1], x + (pl * t->in[0] + i0) * t->in[1],
				       (size_t)((i1 - i0) * t->in[1]) * 4);
			for (int64_t pl = 0; pl < m; pl++)
				memcpy(dyb + pl * (oh - r) * ow, dy + (pl * oh + r) * ow, (size_t)((oh - r) * ow) * 4);
			assert_true(hp_dkg_eligible(&up.g));
			dwf_run(up, ow, 0, dyb, xb, NULL, hi, NULL);
			lo = geom(t, 0, r, &i0, &i1);
			for (int64_t pl = 0; pl < t->c; pl++)
				memcpy(xb + pl * (i1 - i0) * t->in[1], x + (pl * t->in[0] + i0) * t->in[1],
				       (size_t)((i1 - i0) * t->in[1]) * 4);
			for (int64_t pl = 0; pl < m; pl++)
				memcpy(dyb + pl * r * ow, dy + pl * oh * ow, (size_t)(r * ow) * 4);
			dwf_run(lo, ow, 0, dyb, xb, hi, got, pool);
			if (memcmp(ref, got, (size_t)(m * kk) * 4))
				fail_msg("case %d: bands [%lld, %lld) after [0, %lld) differ from the whole", ci,
					 (long long)r, (long long)oh, (long long)r);
		}
		if (t->n >= 2) { /* bands of items, units of an item */
			struct hp_dw part = whole;
			int64_t xi = (size_t)(t->c * t->in[0] * t->in[1]), yi = m * oh * ow;
			dwf_ref(t, dy, x, NULL, oh, ref, NULL);
			part.batch = t->n - 1;
			dwf_run(part, 0, 0, dy + yi, x + xi, NULL, hi, pool);
			part.batch = 1;
			dwf_run(part, 0, 0, dy, x, hi, got, NULL);
			if (memcmp(ref, got, (size_t)(m * kk) * 4))
				fail_msg("case %d: items [1, %lld) then item 0 differ from the whole", ci, (long long)t->n);
		}
		free(x), free(dy), free(acc), free(ref), free(got), free(hi), free(dbl), free(xb), free(dyb);
	}
	hp_pool_destroy(pool);
	if (!ran)
		skip();
}

/* conv_dwkz.c's sixteen-lane planes: every case it takes gives the
 * scalar chains bitwise from W as it is (packed per block, or once for
 * all items), from W packed once (hp_dwkz_pack), and conv_dwk.c's eight
 * lanes (it off) the same, on a pool of 2 too, with the fused Add and
 * HardSwish. */
static void test_flat16(void **state)
{
	struct hp_pool *pool;
	int ran = 0;

	(void)state;
	if (!hp_dot_available())
		skip();
	assert_int_equal(hp_pool_create(2, &pool), 0);
	for (int ci = 0; ci < (int)(sizeof cases / sizeof cases[0]); ci++) {
		const struct kc *t = &cases[ci];
		int64_t m = t->c * t->mult, ny = t->n * m * out_dim(t, 0) * out_dim(t, 1), i0, i1, kk = t->k * t->k;
		struct hp_dw d = geom(t, 0, out_dim(t, 0), &i0, &i1);
		struct hp_epi hs = { .act = HP_EPI_HSWISH, .add = HP_EPI_ADD_FULL };
		if (!hp_dwkz_on(&d.g))
			continue;
		size_t nx = (size_t)(t->n * t->c * t->in[0] * t->in[1]);
		float *x = data(nx, 23 + ci), *w = data((size_t)(m * kk), 25 + ci), *b = data((size_t)m, 27 + ci);
		float *add = data((size_t)ny, 29 + ci), *ref = malloc((size_t)ny * 4), *y = malloc((size_t)ny * 4);
		float *wp = malloc((size_t)hp_dwkz_packed_floats(m, kk) * 4);
		hp_dwkz_pack(w, m, kk, wp);
		chain_ref(t, x, w, b, NULL, HP_EPI_NONE, 0, 0, ref, NULL);
		for (int v = 0; v < 6; v++) { /* W, W packed, eight lanes; alone, on a pool of 2 */
			hp_dwkz_set_mode(v % 3 == 2 ? -1 : 0);
			d.wpack = v % 3 == 1 ? wp : NULL;
			memset(y, 0xff, (size_t)ny * 4);
			hp_dw_forward(&d, x, w, b, y, v < 3 ? NULL : pool);
			if (memcmp(y, ref, (size_t)ny * 4))
				fail_msg("case %d: %s%s differs from the chains", ci,
					 v % 3 == 2 ? "eight lanes" : v % 3 ? "W packed" : "W", v < 3 ? "" : " on a pool");
		}
		hp_dwkz_set_mode(0);
		d.epi = &hs, d.addend = add, d.wpack = wp;
		hp_dw_forward(&d, x, w, b, y, pool);
		chain_ref(t, x, w, b, add, HP_EPI_HSWISH, 0, 0, ref, NULL);
		if (memcmp(y, ref, (size_t)ny * 4))
			fail_msg("case %d: W packed, the fused Add and HardSwish differ", ci);
		ran++;
		free(x), free(w), free(b), free(add), free(ref), free(y), free(wp);
	}
	hp_pool_destroy(pool);
	if (!ran)
		skip();
	assert_true(ran >= 12); /* the small planes above, not a vacuous pass */
}

/* Which geometries take the path: not the undilated 3x3 (conv_dw3.c),
 * not 3-D, stride 3 or unequal strides, nor 4x4 windows; and which take
 * conv_dwkz.c's whole planes. */
static void test_eligible(void **state)
{
	int64_t i0, i1;
	struct kc t = cases[0];
	struct hp_dw d;

	(void)state;
	if (!hp_dot_available())
		skip();
	t.k = 3;
	d = geom(&t, 0, out_dim(&t, 0), &i0, &i1);
	assert_false(hp_dwk_eligible(&d.g));
	t.k = 4;
	d = geom(&t, 0, out_dim(&t, 0), &i0, &i1);
	assert_false(hp_dwk_eligible(&d.g));
	t.k = 5, t.s = 3;
	d = geom(&t, 0, out_dim(&t, 0), &i0, &i1);
	assert_false(hp_dwk_eligible(&d.g));
	t.s = 2;
	d = geom(&t, 0, out_dim(&t, 0), &i0, &i1);
	assert_true(hp_dwk_eligible(&d.g));
	d.g.stride[1] = 1;
	assert_false(hp_dwk_eligible(&d.g));
	hp_dwk_set_mode(-1);
	d.g.stride[1] = 2;
	assert_false(hp_dwk_eligible(&d.g));
	hp_dwk_set_mode(0);
	/* conv_dwkz.c's planes: 24x24 -> 12x12 under 5x5 at stride 2 (27x27
	 * padded), not 26x26 -> 13x13 (29x29) nor 33x31 -> 17x16 (272 outputs) */
	if (!hp_cpu_avx512_fma())
		return;
	t = (struct kc){ 1, 16, 1, { 24, 24 }, 5, 2, { 1, 1 }, { 2, 2 }, { 2, 2 } };
	d = geom(&t, 0, out_dim(&t, 0), &i0, &i1);
	assert_true(hp_dwkz_on(&d.g));
	t.in[0] = t.in[1] = 26;
	d = geom(&t, 0, out_dim(&t, 0), &i0, &i1);
	assert_false(hp_dwkz_on(&d.g));
	t.in[0] = 33, t.in[1] = 31;
	d = geom(&t, 0, out_dim(&t, 0), &i0, &i1);
	assert_false(hp_dwkz_on(&d.g));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_chains),
		cmocka_unit_test(test_bands),
		cmocka_unit_test(test_data_flip),
		cmocka_unit_test(test_data_bands),
		cmocka_unit_test(test_filter),
		cmocka_unit_test(test_data_s2),
		cmocka_unit_test(test_eligible),
		cmocka_unit_test(test_flat16),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
