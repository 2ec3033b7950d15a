/* ConvGradFilter of stride-1 convolutions with few output channels and
 * few taps over AVX-512 tiles with positions in the lanes
 * (conv_grad_lane.c): LeNet's first Conv (1 -> 6 channels, 5x5 at 28x28,
 * batch 64).
 *
 * Why: there dW is 6 x 25 elements and the reduction 64 x 24 x 24
 * positions long.  Through im2col that is sgemms of 25 x 6 outputs a tile
 * (24 GF/s a CPU-second, bench_conv_libs.c lenet-c1 pass dW); the
 * register tiles of conv_grad_reg.c pack a position's taps to feed 6
 * multiply-adds, and the co-lane tiles leave 10 of 16 lanes idle.  Here
 * the lanes are 16 positions: with dY's rows padded to X's padded row
 * length PW (= ow + (k[2] - 1) d[2]), a tap (channel, kh, kw) of a stride-1
 * window is X's padded image shifted by one offset, so a vector of 16
 * padded positions of dY meets one unaligned load of X per tap: a tile of
 * mc output channels x nt taps (mc * nt <= 25 accumulators) runs mc + nt
 * loads into mc * nt fused multiply-adds, and nothing is transposed.
 * X is copied (into a padded image, per unit) only where the Conv has
 * pads, dY only where PW != ow.
 *
 * Every element of dW is one sum in one order:
 *     s = acc (or 0); then the batch items (the units; only units of
 *     whole items take this path) from the last to the first:
 *         lane l (0..15) = chain of fmaf from 0 over the vectors v of the
 *             item, position 16 v + l of the padded flat plane [0, L),
 *             L = (oh - 1) PW + ow (padding columns: dY 0, X as copied);
 *         s = s + tree(lanes), tree: r8[i] = l[i] + l[i + 8], r4[i] =
 *             r8[i] + r8[i + 4], r2[i] = r4[i] + r4[i + 2], r2[0] + r2[1].
 * A band of items that starts from the sum of the bands after it (input
 * acc) ends with the whole node's bits; each element is computed by one
 * thread, so no thread count changes a bit (tests/kernels/
 * test_grad_chain.c, lf_replay). */
#include <stdint.h>
#include <string.h>

#include "kernels/conv_impl.h"
#include "kernels/cpu.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define LF_X86 1
#define LF_TARGET __attribute__((target("avx2,fma,avx512f")))
#endif

#define LF_MC 8 /* output channels per tile at most */

static int lf_mode; /* 0 auto, 1 wherever it can run, -1 never */

void hp_lfilt_set_mode(int mode)
{
	lf_mode = mode;
}

/* Taps per tile by output channels per tile: mc * nt accumulators, mc
 * vectors of dY and one of X within 32 registers. */
static const int lf_nt[LF_MC + 1] = { 0, 16, 12, 8, 6, 5, 4, 3, 2 };

/* Auto: fewer than 8 output channels (from 8 on the co-lane tiles of
 * conv_grad_reg.c run), at most 64 taps, windows wider than 3 (narrower
 * ones keep conv_grad_w3.c's path), items of 64 positions and more. */
static int lf_wanted(const struct hp_colgeom *geo, int64_t cin, int64_t cout)
{
	return cout < 8 && cin * geo->kvol <= 64 && geo->k[2] > 3 && geo->grid_vol >= 64;
}

int hp_lfilt_plan(struct hp_lfilt *q, const struct hp_colgeom *geo, int64_t n, int64_t cin, int64_t cout,
		  int64_t group, int64_t unit, int threads)
{
	memset(q, 0, sizeof *q);
	if (lf_mode < 0 || hp_conv_shift_mode() != 0 || !hp_cpu_avx512_fma() || group != 1 || n < 1 || cin < 1 ||
	    cout < 1 || unit != geo->grid_vol || geo->img[0] != 1 || geo->grid[0] != 1 || geo->k[0] != 1 ||
	    geo->stride[1] != 1 || geo->stride[2] != 1 || geo->grid_vol < 1 || cin * geo->img_vol >= INT32_MAX)
		return 0;
	if (lf_mode == 0 && !lf_wanted(geo, cin, cout))
		return 0;
	q->geo = *geo;
	q->n = n, q->cin = cin, q->cout = cout, q->taps = cin * geo->kvol;
	q->pw = geo->grid[2] + (geo->k[2] - 1) * geo->dil[2];
	q->xh = geo->grid[1] + (geo->k[1] - 1) * geo->dil[1];
	q->len = (geo->grid[1] - 1) * q->pw + geo->grid[2];
	q->copy_x = geo->pad[1] != 0 || geo->pad[2] != 0 || q->pw != geo->img[2] || q->xh != geo->img[1];
	q->copy_dy = q->pw != geo->grid[2];
	q->ncb = (cout + LF_MC - 1) / LF_MC;
	q->mc = (cout + q->ncb - 1) / q->ncb;
	q->nt = lf_nt[q->mc];
	q->ntb = (q->taps + q->nt - 1) / q->nt;
	q->tiles = q->ncb * q->ntb;
	int64_t w = threads > 0 ? threads : 1;
	q->workers = (int)(w < q->tiles ? w : q->tiles);
	q->per_worker = (q->copy_dy ? (size_t)(cout * q->len) : 0) + (q->copy_x ? (size_t)(cin * q->xh * q->pw) : 0);
	q->per_worker = (q->per_worker + 15) / 16 * 16;
	return 1;
}

size_t hp_lfilt_workspace(const struct hp_lfilt *q)
{
	return (size_t)q->workers * q->per_worker * sizeof(float);
}

int hp_lfilt_fit(struct hp_lfilt *q, size_t bytes)
{
	if (lf_mode > 0 || q->per_worker == 0)
		return 1;
	size_t w = bytes / (q->per_worker * sizeof(float));
	if (w < 1)
		return 0;
	q->workers = (int)(w < (size_t)q->workers ? (int64_t)w : q->workers);
	return 1;
}

#ifdef LF_X86
/* The tree of the header over one vector of lanes. */
static inline __attribute__((always_inline)) LF_TARGET float lf_tree(__m512 a)
{
	__m256 h = _mm256_add_ps(_mm512_castps512_ps256(a), _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(a), 1)));
	__m128 x = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
	__m128 y = _mm_add_ps(x, _mm_movehl_ps(x, x));
	__m128 z = _mm_add_ss(y, _mm_shuffle_ps(y, y, 1));
	return _mm_cvtss_f32(z);
}

/* One tile over one item: output channels m0.. (mc of them, those past
 * cout repeat the last and are not stored), taps t0.. (likewise), dY at
 * dyp ([cout][ldy]), X at xp (the padded image, channel stride cs), the
 * sums at dw ([cout][taps]: s = s + tree). */
static inline __attribute__((always_inline)) LF_TARGET void lf_tile(const int MC, const int NT,
								 const struct hp_lfilt *q, int64_t m0,
								 int64_t t0, const float *dyp, int64_t ldy,
								 const float *xp, int64_t cs, float *dw)
{
	const struct hp_colgeom *g = &q->geo;
	const float *yr[LF_MC], *xr[16];
	__m512 a[LF_MC * 16];
	int64_t kv = g->kvol, len = q->len;

	for (int m = 0; m < MC; m++) {
		int64_t mm = m0 + m < q->cout ? m0 + m : q->cout - 1;
		yr[m] = dyp + mm * ldy;
	}
	for (int t = 0; t < NT; t++) {
		int64_t tt = t0 + t < q->taps ? t0 + t : q->taps - 1, ci = tt / kv, kk = tt % kv;
		xr[t] = xp + ci * cs + kk / g->k[2] * g->dil[1] * q->pw + kk % g->k[2] * g->dil[2];
	}
	for (int i = 0; i < MC * NT; i++)
		a[i] = _mm512_setzero_ps();
	int64_t p = 0;
	for (; p + 16 <= len; p += 16) {
		__m512 y[LF_MC];
		for (int m = 0; m < MC; m++)
			y[m] = _mm512_loadu_ps(yr[m] + p);
		for (int t = 0; t < NT; t++) {
			__m512 x = _mm512_loadu_ps(xr[t] + p);
			for (int m = 0; m < MC; m++)
				a[m * NT + t] = _mm512_fmadd_ps(y[m], x, a[m * NT + t]);
		}
	}
	if (p < len) {
		__mmask16 k = (__mmask16)((1u << (len - p)) - 1);
		__m512 y[LF_MC];
		for (int m = 0; m < MC; m++)
			y[m] = _mm512_maskz_loadu_ps(k, yr[m] + p);
		for (int t = 0; t < NT; t++) {
			__m512 x = _mm512_maskz_loadu_ps(k, xr[t] + p);
			for (int m = 0; m < MC; m++)
				a[m * NT + t] = _mm512_fmadd_ps(y[m], x, a[m * NT + t]);
		}
	}
	for (int m = 0; m < MC && m0 + m < q->cout; m++)
		for (int t = 0; t < NT && t0 + t < q->taps; t++) {
			float *s = dw + (m0 + m) * q->taps + t0 + t;
			*s = *s + lf_tree(a[m * NT + t]);
		}
}

#define LF_FN(MC, NT)                                                                                          \
	static LF_TARGET void lf_tile_##MC##_##NT(const struct hp_lfilt *q, int64_t m0, int64_t t0,            \
						  const float *dyp, int64_t ldy, const float *xp, int64_t cs,  \
						  float *dw)                                                   \
	{                                                                                                      \
		lf_tile(MC, NT, q, m0, t0, dyp, ldy, xp, cs, dw);                                              \
	}
/* as lf_nt, and every shorter block of taps (a tail block) */
#define LF_FN2(MC) LF_FN(MC, 1) LF_FN(MC, 2)
#define LF_FN3(MC) LF_FN2(MC) LF_FN(MC, 3)
#define LF_FN4(MC) LF_FN3(MC) LF_FN(MC, 4)
#define LF_FN5(MC) LF_FN4(MC) LF_FN(MC, 5)
#define LF_FN6(MC) LF_FN5(MC) LF_FN(MC, 6)
#define LF_FN8(MC) LF_FN6(MC) LF_FN(MC, 7) LF_FN(MC, 8)
#define LF_FN12(MC) LF_FN8(MC) LF_FN(MC, 9) LF_FN(MC, 10) LF_FN(MC, 11) LF_FN(MC, 12)
#define LF_FN16(MC) LF_FN12(MC) LF_FN(MC, 13) LF_FN(MC, 14) LF_FN(MC, 15) LF_FN(MC, 16)
LF_FN16(1)
LF_FN12(2)
LF_FN8(3)
LF_FN6(4)
LF_FN5(5)
LF_FN4(6)
LF_FN3(7)
LF_FN2(8)

typedef void (*lf_tile_fn)(const struct hp_lfilt *, int64_t, int64_t, const float *, int64_t, const float *, int64_t,
			   float *);
#define LF_P2(MC) lf_tile_##MC##_1, lf_tile_##MC##_2
#define LF_P3(MC) LF_P2(MC), lf_tile_##MC##_3
#define LF_P4(MC) LF_P3(MC), lf_tile_##MC##_4
#define LF_P5(MC) LF_P4(MC), lf_tile_##MC##_5
#define LF_P6(MC) LF_P5(MC), lf_tile_##MC##_6
#define LF_P8(MC) LF_P6(MC), lf_tile_##MC##_7, lf_tile_##MC##_8
#define LF_P12(MC) LF_P8(MC), lf_tile_##MC##_9, lf_tile_##MC##_10, lf_tile_##MC##_11, lf_tile_##MC##_12
#define LF_P16(MC) LF_P12(MC), lf_tile_##MC##_13, lf_tile_##MC##_14, lf_tile_##MC##_15, lf_tile_##MC##_16
/* [mc][nt - 1] */
static const lf_tile_fn lf_tiles[LF_MC + 1][16] = {
	{ NULL },   { LF_P16(1) }, { LF_P12(2) }, { LF_P8(3) }, { LF_P6(4) },
	{ LF_P5(5) }, { LF_P4(6) },  { LF_P3(7) },  { LF_P2(8) },
};
#endif

struct lf_run {
	const struct hp_lfilt *q;
	const float *dy, *x;
	float *dw, *ws;
	int shares;
};

/* dY of one item with rows of pw (zeros past ow), the first len floats of
 * each channel. */
static void lf_copy_dy(const struct hp_lfilt *q, const float *dy, float *dst)
{
	int64_t oh = q->geo.grid[1], ow = q->geo.grid[2];

	for (int64_t m = 0; m < q->cout; m++)
		for (int64_t r = 0; r < oh; r++) {
			float *d = dst + m * q->len + r * q->pw;
			memcpy(d, dy + (m * oh + r) * ow, (size_t)ow * sizeof *d);
			if (r + 1 < oh)
				memset(d + ow, 0, (size_t)(q->pw - ow) * sizeof *d);
		}
}

/* X of one item as its padded image: xh rows of pw, zeros in the pads. */
static void lf_copy_x(const struct hp_lfilt *q, const float *x, float *dst)
{
	const struct hp_colgeom *g = &q->geo;
	int64_t ih = g->img[1], iw = g->img[2], pt = g->pad[1], pl = g->pad[2];

	for (int64_t c = 0; c < q->cin; c++)
		for (int64_t r = 0; r < q->xh; r++) {
			float *d = dst + (c * q->xh + r) * q->pw;
			int64_t i = r - pt;
			if (i < 0 || i >= ih) {
				memset(d, 0, (size_t)q->pw * sizeof *d);
				continue;
			}
			const float *s = x + (c * ih + i) * iw;
			for (int64_t j = 0; j < q->pw; j++) {
				int64_t col = j - pl;
				d[j] = col >= 0 && col < iw ? s[col] : 0.0f;
			}
		}
}

static void lf_work(void *arg, int64_t b, int64_t e, int tid)
{
#ifdef LF_X86
	const struct lf_run *r = arg;
	const struct hp_lfilt *q = r->q;
	const struct hp_colgeom *g = &q->geo;
	float *buf = r->ws + (size_t)tid * q->per_worker;
	float *ybuf = buf, *xbuf = buf + (q->copy_dy ? q->cout * q->len : 0);

	for (int64_t s = b; s < e; s++) {
		int64_t k0 = q->tiles * s / r->shares, k1 = q->tiles * (s + 1) / r->shares;
		for (int64_t u = q->n - 1; u >= 0; u--) {
			const float *dyp = r->dy + u * q->cout * g->grid_vol, *xp = r->x + u * q->cin * g->img_vol;
			int64_t ldy = g->grid_vol, cs = g->img_vol;
			if (q->copy_dy) {
				lf_copy_dy(q, dyp, ybuf);
				dyp = ybuf, ldy = q->len;
			}
			if (q->copy_x) {
				lf_copy_x(q, xp, xbuf);
				xp = xbuf, cs = q->xh * q->pw;
			}
			for (int64_t k = k0; k < k1; k++) { /* a tail block of taps in a shorter tile */
				int64_t t0 = k % q->ntb * q->nt, nt = q->taps - t0 < q->nt ? q->taps - t0 : q->nt;
				lf_tiles[q->mc][nt - 1](q, k / q->ntb * q->mc, t0, dyp, ldy, xp, cs, r->dw);
			}
		}
	}
#else
	(void)arg, (void)b, (void)e, (void)tid;
#endif
}

void hp_lfilt_run(const struct hp_lfilt *q, const float *dy, const float *x, const float *acc, float *dw, float *ws,
		  struct hp_pool *pool)
{
	struct lf_run r = { .q = q, .dy = dy, .x = x, .dw = dw, .ws = ws };
	int saved, threads = hp_conv_threads_enter(pool, &saved);

	if (acc)
		memcpy(dw, acc, (size_t)(q->cout * q->taps) * sizeof *dw);
	else
		memset(dw, 0, (size_t)(q->cout * q->taps) * sizeof *dw);
	threads = threads < q->workers ? threads : q->workers;
	r.shares = threads > 1 ? threads : 1;
	/* at most a worker per share (tid < threads): its buffers are the tid's */
	hp_conv_parallel(pool, threads, r.shares, lf_work, &r);
	hp_conv_threads_leave(saved);
}
