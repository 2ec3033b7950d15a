/* ConvGradFilter of ungrouped convolutions with 16-64 output channels,
 * of any stride, over AVX-512 co-lane tiles (conv_grad_stem.c):
 * MobileNetV2's stem, 3 -> 32, 3x3 of stride 2 at 224x224, batch 1 (and
 * ResNet's 7x7 stem, the 2-D U-Net's 3x3s on rows of 64 and more: the
 * auto rule, sf_wanted).
 *
 * Why: there dW is 32 x 27 elements and the reduction 112 x 112
 * positions long; at a batch of one its units are rows of 112 positions
 * (conv_grad.c, hp_filter_unit_axis), and the sgemm path runs a 27 x 32 x
 * 112 sgemm a row (50 GF/s a CPU-second, bench_conv_libs.c 3x3-s2-mb pass
 * dW).  conv_grad_reg.c's co-lane tiles ran it at 107 but pack dY in
 * chunks for all channels with a table of row segments, about 16 KiB a
 * worker, where the sgemm path's workspace (which plans and band cuts
 * were made with) is 15.5 KiB in all.  Here a worker owns 16 output
 * channels (the lanes) and every tap: a tile of up to 28 accumulators
 * (window rows of a channel and a tap row x k[2] taps) takes, per
 * position, one vector of dY (packed [position][16], a block of 64
 * positions at a time through 16 x 16 register transposes: 4 KiB) and
 * one broadcast of X per tap, read where X lies (a row outside the input
 * reads a row of zeros, a column outside it a 0, the edge positions
 * only), into fused multiply-adds.  The sums of its taps wait in its
 * buffer between blocks (1.7 KiB for 27 taps); two workers and the row of
 * zeros take 12.3 KiB.  Where a worker's sums of every tap would not fit
 * the replaced path's workspace (288 taps of the U-Net's 32-channel
 * layers), a vector of channels is split into jobs of its tiles, each
 * packing its own dY.
 *
 * Every element of dW is one running sum in conv_grad_reg.c's order:
 *     s = acc (or 0); then the units (batch items, or with a batch of one
 *     the rows: conv_grad.c's units) from the last to the first, each
 *     unit's positions in order; units shorter than 16 positions as one
 *     chain s = fma(dy, x, s), longer ones in blocks of 64 positions, each
 *     a chain from 0 added to s; positions whose tap leaves the input
 *     take x = 0.
 * So a band of units that starts from the sum of the bands after it
 * (input acc) ends with the whole node's bits, and no thread count
 * changes a bit: each element is computed by one worker, in that order
 * (tests/kernels/test_grad_chain.c, rf_replay). */
#include <stdint.h>
#include <string.h>

#include "kernels/conv_grad_stem.h"
#include "kernels/cpu.h"
#include "kernels/simd_tr16.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define SF_X86 1
#define SF_TARGET __attribute__((target("avx2,fma,avx512f")))
#endif

#define SF_BLK 64     /* positions per block of a unit's sum */
#define SF_BLK_MIN 16 /* units this long and longer sum in blocks */
#define SF_RMAX 9     /* window rows per tile at most */

static int sf_mode; /* 0 auto, 1 wherever it can run (2: in splits of a tile), -1 never */

void hp_sfilt_set_mode(int mode)
{
	sf_mode = mode;
}

/* Window rows per tile by taps per row: 27, 25 and 28 accumulators. */
static int sf_rows(int64_t kw)
{
	return kw == 3 ? 9 : kw == 5 ? 5 : kw == 7 ? 4 : 0;
}

/* Auto: 16 to 64 output channels; at most 4 input channels of stride 2
 * and more along rows (stems), or stride 1 on rows of 64 and more (where
 * conv_grad_w3.c ran with whole items).  bench_conv_libs.c, pass dW, GF/s a CPU-second
 * (path before / here, one run alternating): 3x3-s2-mb (MobileNetV2's
 * stem, 3 -> 32 at 224x224 of stride 2, batch 1: the sgemm path) 51-52 /
 * 128-131; 7x7-s2 (ResNet's stem at 64x64, 3 -> 64, batch 4: the packed
 * register tiles) 117-122 / 144-171; the 2-D U-Net's layers at batch 2
 * (conv_grad_w3.c): u-64 (32 -> 32 at 64x64) 89-93 / 179-184, 3x3-u128
 * (16 -> 16 at 128x128) 92-97 / 157-168, u-dec128 (32 -> 16) 92-99 /
 * 167-181.  Rows of 32 (u-32, conv_grad_reg.c's co-lane tiles: 177-180
 * / 187-188) and of 16 or less (3x3-r16 172 / 171, 3x3-r8 161 / 137,
 * 3x3-small 141 / 53) keep their paths. */
static int sf_wanted(const struct hp_colgeom *geo, int64_t cin, int64_t cout)
{
	if (cout < 16 || cout > 64)
		return 0;
	/* two jobs at least (a vector of channels x its tiles), as the path
	 * replaced runs on two threads: the U-Net's 3 -> 16 at 128x128 keeps
	 * conv_grad_w3.c (104 GF/s; here 137 on one worker, 102 in two tiles) */
	if (geo->stride[1] == 1 && geo->stride[2] == 1)
		return geo->grid[2] >= 64 && geo->k[2] <= 3 && (cout > 16 || cin * geo->k[1] > sf_rows(geo->k[2]));
	return cin <= 4 && geo->stride[2] >= 2;
}

/* Taps of split j of ns: tiles [ntile j / ns, ntile (j + 1) / ns), tile
 * i the window rows [trows i / ntile, trows (i + 1) / ntile). */
static void sf_tiles_of(const struct hp_sfilt *q, int64_t j, int64_t ns, int64_t *t0, int64_t *t1)
{
	*t0 = q->ntile * j / ns;
	*t1 = q->ntile * (j + 1) / ns;
}

static int64_t sf_row(const struct hp_sfilt *q, int64_t tile)
{
	return q->trows * tile / q->ntile;
}

/* ns splits of the tiles a vector of channels, at most w workers. */
static void sf_split(struct hp_sfilt *q, int64_t ns, int64_t w)
{
	int64_t most = 0, jobs = q->ncv * ns;

	for (int64_t j = 0; j < ns; j++) {
		int64_t t0, t1;
		sf_tiles_of(q, j, ns, &t0, &t1);
		most = sf_row(q, t1) - sf_row(q, t0) > most ? sf_row(q, t1) - sf_row(q, t0) : most;
	}
	q->splits = ns;
	q->workers = (int)(w < jobs ? w : jobs);
	q->per_worker = (size_t)((q->kc + most * q->geo.k[2]) * 16);
}

int hp_sfilt_plan(struct hp_sfilt *q, const struct hp_colgeom *geo, int64_t n, int64_t cin, int64_t cout,
		  int64_t group, int64_t unit, int threads)
{
	memset(q, 0, sizeof *q);
	/* a forced shift mode (tests, benchmarks) asks for the sgemm paths */
	if (sf_mode < 0 || hp_conv_shift_mode() != 0 || !hp_cpu_avx512_fma() || group != 1 || n < 1 || cin < 1 ||
	    cout < 1 || unit < 1 || geo->grid_vol % unit || geo->img[0] != 1 || geo->grid[0] != 1 || geo->k[0] != 1 ||
	    geo->dil[2] != 1 || !sf_rows(geo->k[2]) || cin * geo->img_vol >= INT32_MAX)
		return 0;
	if (sf_mode == 0 && !sf_wanted(geo, cin, cout))
		return 0;
	q->geo = *geo;
	q->n = n, q->cin = cin, q->cout = cout, q->taps = cin * geo->kvol, q->unit = unit;
	q->blk = unit >= SF_BLK_MIN ? SF_BLK : 0;
	q->kc = q->blk && unit > q->blk ? q->blk : unit;
	q->trows = cin * geo->k[1];
	q->ncv = (cout + 15) / 16;
	q->rt = sf_rows(geo->k[2]);
	q->ntile = (int)((q->trows + q->rt - 1) / q->rt);
	q->threads = threads > 0 ? threads : 1;
	sf_split(q, 1, q->threads);
	q->zero = (size_t)(geo->img[2] + 15) / 16 * 16;
	return 1;
}

size_t hp_sfilt_workspace(const struct hp_sfilt *q)
{
	return ((size_t)q->workers * q->per_worker + q->zero) * sizeof(float);
}

int hp_sfilt_fit(struct hp_sfilt *q, size_t bytes, int lean)
{
	int64_t w0 = lean ? 1 : q->threads;

	if (sf_mode > 0) { /* tests: 2, every tile its own split */
		sf_split(q, sf_mode > 1 ? q->ntile : 1, w0);
		return 1;
	}
	/* the most workers, then the fewest splits (each packs dY again) */
	for (int64_t w = w0; w >= 1; w--)
		for (int64_t ns = 1; ns <= q->ntile; ns++) {
			sf_split(q, ns, w);
			if ((q->workers == w || ns == q->ntile) && hp_sfilt_workspace(q) <= bytes)
				return 1;
		}
	return 0;
}

/* A row segment of a block: dY row oh, columns [w0, w0 + cnt), at
 * position yk of the packed block. */
struct sf_seg {
	int64_t oh, w0, cnt, yk;
};

#ifdef SF_X86
/* One tile: window rows [wr0, wr0 + R) x KW taps over the segments of a
 * block, the sums at s ([tap][16], the tile's first tap): chain, one
 * chain from s; else a chain from 0 added to s. */
static inline __attribute__((always_inline)) SF_TARGET void sf_tile(const int R, const int KW,
								 const struct hp_sfilt *q,
								 const struct sf_seg *seg, int nseg,
								 const float *xi, const float *zero, int64_t wr0,
								 const float *y, float *s, int chain)
{
	const struct hp_colgeom *g = &q->geo;
	int64_t ih = g->img[1], iw = g->img[2], s1 = g->stride[1], s2 = g->stride[2], p2 = g->pad[2];
	__m512 a[SF_RMAX * 7];
	const float *xr[SF_RMAX];

#pragma GCC unroll 32
	for (int i = 0; i < R * KW; i++)
		a[i] = chain ? _mm512_loadu_ps(s + i * 16) : _mm512_setzero_ps();
	for (int e = 0; e < nseg; e++) {
		const struct sf_seg *sg = &seg[e];
		const float *yp = y + sg->yk * 16;
		for (int r = 0; r < R; r++) {
			int64_t wr = wr0 + r, c = wr / g->k[1], kh = wr % g->k[1];
			int64_t row = sg->oh * s1 + kh * g->dil[1] - g->pad[1];
			xr[r] = row >= 0 && row < ih ? xi + c * g->img_vol + row * iw : zero;
		}
		/* positions [ka, kb) read every tap inside the row */
		int64_t ka = 0, kb = sg->cnt;
		while (ka < kb && (sg->w0 + ka) * s2 - p2 < 0)
			ka++;
		while (kb > ka && (sg->w0 + kb - 1) * s2 + KW - 1 - p2 >= iw)
			kb--;
		for (int64_t k = 0; k < sg->cnt; k++) {
			if (k == ka && ka < kb) { /* the inner positions */
				int64_t c0 = (sg->w0 + ka) * s2 - p2;
				for (; k < kb; k++, c0 += s2) {
					__m512 v = _mm512_loadu_ps(yp + k * 16);
					for (int r = 0; r < R; r++)
						for (int j = 0; j < KW; j++)
							a[r * KW + j] = _mm512_fmadd_ps(v, _mm512_set1_ps(xr[r][c0 + j]),
											a[r * KW + j]);
				}
				if (k >= sg->cnt)
					break;
			}
			__m512 v = _mm512_loadu_ps(yp + k * 16);
			int64_t c0 = (sg->w0 + k) * s2 - p2;
			for (int r = 0; r < R; r++)
				for (int j = 0; j < KW; j++) {
					int64_t col = c0 + j;
					float xv = col >= 0 && col < iw ? xr[r][col] : 0.0f;
					a[r * KW + j] = _mm512_fmadd_ps(v, _mm512_set1_ps(xv), a[r * KW + j]);
				}
		}
	}
#pragma GCC unroll 32
	for (int i = 0; i < R * KW; i++)
		_mm512_storeu_ps(s + i * 16, chain ? a[i] : _mm512_add_ps(_mm512_loadu_ps(s + i * 16), a[i]));
}

#define SF_FN(R, KW)                                                                                           \
	static SF_TARGET void sf_tile_##R##_##KW(const struct hp_sfilt *q, const struct sf_seg *seg, int nseg, \
						 const float *xi, const float *zero, int64_t wr0, const float *y, \
						 float *s, int chain)                                          \
	{                                                                                                      \
		sf_tile(R, KW, q, seg, nseg, xi, zero, wr0, y, s, chain);                                      \
	}
#define SF_FN4(KW) SF_FN(1, KW) SF_FN(2, KW) SF_FN(3, KW) SF_FN(4, KW)
SF_FN4(3)
SF_FN(5, 3)
SF_FN(6, 3)
SF_FN(7, 3)
SF_FN(8, 3)
SF_FN(9, 3)
SF_FN4(5)
SF_FN(5, 5)
SF_FN4(7)

typedef void (*sf_tile_fn)(const struct hp_sfilt *, const struct sf_seg *, int, const float *, const float *,
			   int64_t, const float *, float *, int);
#define SF_P4(KW) sf_tile_1_##KW, sf_tile_2_##KW, sf_tile_3_##KW, sf_tile_4_##KW
/* [k[2] == 3 ? 0 : k[2] == 5 ? 1 : 2][rows - 1] */
static const sf_tile_fn sf_tiles[3][SF_RMAX] = {
	{ SF_P4(3), sf_tile_5_3, sf_tile_6_3, sf_tile_7_3, sf_tile_8_3, sf_tile_9_3 },
	{ SF_P4(5), sf_tile_5_5 },
	{ SF_P4(7) },
};

/* dY of output channels [m0, m0 + 16) (those past cout: 0) at positions
 * [p0, p0 + cnt) of an item, as y[position][16]. */
static SF_TARGET void sf_pack(const struct hp_sfilt *q, const float *dyi, int64_t m0, int64_t p0, int64_t cnt,
			      float *y)
{
	int64_t sv = q->geo.grid_vol;

	for (int64_t k0 = 0; k0 < cnt; k0 += 16) {
		int64_t nk = cnt - k0 < 16 ? cnt - k0 : 16;
		__mmask16 mk = (__mmask16)((1u << nk) - 1);
		__m512 r[16];
		for (int l = 0; l < 16; l++)
			r[l] = m0 + l < q->cout ? _mm512_maskz_loadu_ps(mk, dyi + (m0 + l) * sv + p0 + k0)
						: _mm512_setzero_ps();
		hp_tr16_ps(r);
		for (int64_t k = 0; k < nk; k++)
			_mm512_storeu_ps(y + (k0 + k) * 16, r[k]);
	}
}
#endif

struct sf_run {
	const struct hp_sfilt *q;
	const float *dy, *x, *acc;
	float *dw, *ws;
};

/* The row segments of positions [p0, p0 + cnt) of an item. */
static int sf_segs(const struct hp_sfilt *q, int64_t p0, int64_t cnt, struct sf_seg *seg)
{
	int64_t ow = q->geo.grid[2];
	int n = 0;

	for (int64_t k = 0; k < cnt;) {
		int64_t p = p0 + k, w0 = p % ow, len = ow - w0 < cnt - k ? ow - w0 : cnt - k;
		seg[n++] = (struct sf_seg){ .oh = p / ow, .w0 = w0, .cnt = len, .yk = k };
		k += len;
	}
	return n;
}

/* Job j: output channels [16 cv, 16 cv + 16) (cv = j / splits) for the
 * taps of split j % splits, from acc (or 0) over the units from the last
 * to the first. */
static void sf_job(const struct sf_run *r, int64_t j, float *buf)
{
#ifdef SF_X86
	const struct hp_sfilt *q = r->q;
	const struct hp_colgeom *g = &q->geo;
	float *y = buf, *s = buf + q->kc * 16;
	int64_t m0 = j / q->splits * 16, upi = g->grid_vol / q->unit, kwi = g->k[2] == 3 ? 0 : g->k[2] == 5 ? 1 : 2;
	int64_t i0, i1;
	struct sf_seg seg[SF_BLK + 1];

	sf_tiles_of(q, j % q->splits, q->splits, &i0, &i1);
	int64_t ta = sf_row(q, i0) * g->k[2], tb = sf_row(q, i1) * g->k[2]; /* the split's taps */
	s -= ta * 16; /* s[t * 16 + l] for t in [ta, tb) */
	for (int64_t t = ta; t < tb; t++)
		for (int64_t l = 0; l < 16; l++)
			s[t * 16 + l] = r->acc && m0 + l < q->cout ? r->acc[(m0 + l) * q->taps + t] : 0.0f;
	for (int64_t u = q->n * upi - 1; u >= 0; u--) {
		int64_t item = u / upi, base = u % upi * q->unit;
		const float *dyi = r->dy + item * q->cout * g->grid_vol, *xi = r->x + item * q->cin * g->img_vol;
		for (int64_t b0 = 0; b0 < q->unit; b0 += q->kc) {
			int64_t cnt = q->unit - b0 < q->kc ? q->unit - b0 : q->kc;
			sf_pack(q, dyi, m0, base + b0, cnt, y);
			int nseg = sf_segs(q, base + b0, cnt, seg);
			for (int64_t i = i0; i < i1; i++) {
				int64_t w0 = sf_row(q, i), w1 = sf_row(q, i + 1);
				sf_tiles[kwi][w1 - w0 - 1](q, seg, nseg, xi, r->ws, w0, y, s + w0 * g->k[2] * 16,
							    q->blk == 0);
			}
		}
	}
	for (int64_t l = 0; l < 16 && m0 + l < q->cout; l++)
		for (int64_t t = ta; t < tb; t++)
			r->dw[(m0 + l) * q->taps + t] = s[t * 16 + l];
#else
	(void)r, (void)j, (void)buf;
#endif
}

static void sf_work(void *arg, int64_t b, int64_t e, int tid)
{
	const struct sf_run *r = arg;

	for (int64_t j = b; j < e; j++)
		sf_job(r, j, r->ws + r->q->zero + (size_t)tid * r->q->per_worker);
}

void hp_sfilt_run(const struct hp_sfilt *q, const float *dy, const float *x, const float *acc, float *dw, float *ws,
		  struct hp_pool *pool)
{
	struct sf_run r = { .q = q, .dy = dy, .x = x, .acc = acc, .dw = dw, .ws = ws };
	int saved, threads = hp_conv_threads_enter(pool, &saved);

	memset(ws, 0, q->zero * sizeof *ws);
	threads = threads < q->workers ? threads : q->workers;
	/* at most a worker per share (tid < threads): its buffers are the tid's */
	hp_conv_parallel(pool, threads, q->ncv * q->splits, sf_work, &r);
	hp_conv_threads_leave(saved);
}
