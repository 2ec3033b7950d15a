/* ConvGradFilter of 2-D grouped convolutions with 2-32 channels per group
 * (conv_grad_grp.c): ResNeXt's and RegNet's layers.  Through im2col each
 * (unit, group) was one sgemm of M = the group's output channels (4-32)
 * by N = its taps (cin_g x kvol, 36-288) over K = the unit's positions,
 * 13-15 GF/s a thread on ResNeXt's first stage (bench/bench_conv_libs.c,
 * class grouped, pass dW); here 54, and 98 on a batch of 8.
 *
 * The group's input rows are staged once per block of output rows, zero
 * padded and split into column phases at strides, so that a tap's row of
 * positions is one contiguous load.  A micro-tile is 4 output channels x
 * 4 taps of one group; lane l of an element sums the unit's positions
 * whose column is l mod L (L = 16 for units of several rows, 8 for units
 * of one row), each lane one chain of fused multiply-adds over its
 * positions, rows in order and columns in order (lane sums wait in the
 * worker's buffer between staged blocks).  At the unit's end each
 * element's lanes are added in one fixed tree,
 *     t(l0..l7) [+ t(l8..l15)],  t(a..h) = ((a + b) + (c + d)) + ((e + f) + (g + h)),
 * and that sum is added to dW.  Units run from the last to the first, as
 * on the sgemm path (conv_grad.c): a unit is a batch item, or with a
 * batch of one a row of the output, the cuts a band of the node can make,
 * and a band's node starts from the sum of the bands after it, so bands
 * give the bits of the whole node.  Nothing depends on the thread that
 * runs a group, so the workers steal groups (hp_conv_steal).  AVX-512
 * runs 16 lanes in one vector, AVX2 in two: the same chains.
 *
 * Where AVX-512F is present, conv_grad.c takes the co-lane tiles below
 * instead (hp_gfilt_colane: groups of 2, 4, 8 or 16k input channels, and
 * of 16 / cg groups' output channels at most 16): lanes over 16 input
 * channels, no lane trees, each element one running sum in conv_grad_reg.c's
 * order.  bench_conv_libs.c, pass dW, GF/s per CPU-second (above / co-lane,
 * alternating, medians of 5): ResNeXt 4 a group at 28x28 54 / 132, batch 8
 * 75 / 116, RegNet's 8 a group 59 / 158, stride 2 39 / 111; 16 a group at
 * 14x14 and 32 at 7x7 (before: conv_grad_reg.c's tiles over output
 * channels) 62 / 175 and 52 / 139.  A slab is 16 input channels; where
 * the groups do not fill the last one (RegNetY-400MF's 13 and 55 groups
 * of 8), its other lanes are staged as zeros and not stored (the tiles
 * had refused odd counts of groups of 8: pass dW at batch 1, classes
 * grouped-w8-12 and -w8-3, 12 -> 54 and 3.3 -> 23 GF/s; 55 groups at
 * 7x7, 7.5 -> 52). */
#include <stdint.h>
#include <string.h>

#include "kernels/conv_impl.h"
#include "kernels/simd_tr16.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define GF_X86 1
#define GF_TARGET __attribute__((target("avx2,fma")))
/* the same code with AVX-512VL's 32 vector registers: a 4x4 tile's 16
 * accumulators and 8 operands fit (with 16, GCC keeps accumulators on
 * the stack: 37 GF/s against 60 on ResNeXt's batch of 8) */
#define GF_TARGET512 __attribute__((target("avx2,fma,avx512f,avx512vl")))
#endif

#define GF_MAX_CH 32           /* channels per group, in and out */
#define GF_STAGE_FLOATS 16384  /* a row block's staged input: 64 KiB */
#define GF_MAX_STRIDE 8
/* Units of at least this many positions, rows of at least 8: each unit
 * pays its lanes' trees, each row its masked tail.  bench_conv_libs.c,
 * pass dW, GF/s a thread (sgemm path / here, alternating): ResNeXt's 4
 * per group at 28x28, batch 1 (units: rows of 28) 15 / 54, batch 8 (16
 * lanes) 25 / 98; RegNet's 8 per group 31 / 58; 8 per group at stride 2
 * 21 / 39.
 * In an earlier version (16 ymm registers, accumulators spilled), 16 per
 * group on 14x14 rows ran at 31 / 28 and 32 per group on 7x7 at 27 / 15:
 * those stay on the sgemm path. */
#define GF_MIN_UNIT 16

/* Staged floats per channel and input row: the stride's column phases of
 * the padded row, each pq long. */
static int64_t gf_pq(const struct hp_gfilt *q)
{
	int64_t sw = q->geo.stride[2], pw = (q->geo.grid[2] - 1) * sw + (q->geo.k[2] - 1) * q->geo.dil[2] + 1;

	return (pw + sw - 1) / sw;
}

/* Input rows staged for rb output rows. */
static int64_t gf_in_rows(const struct hp_gfilt *q, int64_t rb)
{
	return (rb - 1) * q->geo.stride[1] + (q->geo.k[1] - 1) * q->geo.dil[1] + 1;
}

int hp_gfilt_plan(struct hp_gfilt *q, const struct hp_colgeom *geo, int64_t n, int64_t cin, int64_t cout,
		  int64_t group, int64_t unit, int threads)
{
	int64_t cg = group > 0 ? cin / group : 0, mg = group > 0 ? cout / group : 0;

	memset(q, 0, sizeof *q);
	/* -1 (tests, benchmarks) or a forced shift mode asks for the sgemm paths */
	if (hp_conv_grp_mode() < 0 || hp_conv_shift_mode() != 0 || !hp_dot_available() || group < 2 || cg < 2 ||
	    cg > GF_MAX_CH || mg < 1 || mg > GF_MAX_CH || geo->img[0] != 1 || geo->grid[0] != 1 || geo->k[0] != 1 ||
	    geo->stride[2] > GF_MAX_STRIDE || unit % geo->grid[2] != 0 || unit < GF_MIN_UNIT || geo->grid[2] < 8)
		return 0;
	q->geo = *geo;
	q->n = n, q->cin = cin, q->cout = cout, q->group = group, q->cg = cg, q->mg = mg;
	q->bvol = geo->img_vol, q->svol = geo->grid_vol, q->rows = cg * geo->kvol;
	q->unit = unit;
	/* output rows per staged block: as many as fit the staging, at least one */
	int64_t per_in_row = cg * geo->stride[2] * gf_pq(q), rb = geo->grid[1];
	while (rb > 1 && gf_in_rows(q, rb) * per_in_row > GF_STAGE_FLOATS)
		rb = (rb + 1) / 2;
	q->chunk = rb;
	/* units of several rows (batch items) take 16 lanes, 16 positions a
	 * vector; rows alone take 8, whose trees then cost half (ResNeXt's 28
	 * columns: rows 53 GF/s with 8 lanes, 44 with 16; items 61 and 99) */
	q->lanes = unit / geo->grid[2] > 1 ? 16 : 8;
	q->threads = threads > 0 ? threads : 1;
	return 1;
}

/* Lane sums of a micro-tile: 4 x 4 x 16 floats per (channel block, tap block). */
#define GF_TILE_FLOATS 256
static int64_t gf_lp_at(const struct hp_gfilt *q, int64_t m0, int64_t t0)
{
	return (m0 / 4 * ((q->rows + 3) / 4) + t0 / 4) * GF_TILE_FLOATS;
}

static size_t gf_stage_floats(const struct hp_gfilt *q)
{
	return (size_t)(gf_in_rows(q, q->chunk) * q->cg * q->geo.stride[2] * gf_pq(q) + 16);
}

static size_t gf_per_worker(const struct hp_gfilt *q)
{
	return gf_stage_floats(q) + (size_t)gf_lp_at(q, (q->mg + 3) / 4 * 4, 0) + 16;
}


static int gf_avx2; /* tests: the AVX2 tiles even where AVX-512 exists */

void hp_gfilt_set_avx2(int on)
{
	gf_avx2 = on;
}

/* ---- the co-lane tiles ----
 * A slab is 16 consecutive input channels: 16 / cg whole groups (cg 2,
 * 4, 8, 16) or 16 of one group's (cg a multiple of 16).  Lane l holds
 * the dW elements of input channel 16 s + l; a tile is up to GC_TM
 * output channels (of each lane's own group) x up to GC_TT taps, each
 * accumulator a vector of 16 such elements.  Per position, a tile loads
 * one staged input vector per tap (the slab's channels at one column,
 * staged transposed and zero padded: no masks) and per output channel
 * one dY vector: a broadcast of dY where a slab is one group's, else a
 * permute of dY's 16 / cg groups' channels at that position (packed per
 * chunk), so each lane reads its own group's dY.  No lane trees: every
 * element is one running sum in conv_grad_reg.c's order (see
 * hp_gfilt_colane), its state in the worker's buffer between chunks. */
static int gc_mode;

void hp_gfilt_set_colane(int mode)
{
	gc_mode = mode;
}

#define GC_TM 3             /* output channels per tile */
#define GC_TT 9             /* taps per tile */
#define GC_BLK 64           /* positions per block (conv_grad_reg.c's RF_BLK) */
#define GC_BLK_MIN 16       /* units this long and longer sum in blocks */
#define GC_STAGE 16384      /* staged floats per chunk (rows of at least one output row) */
#define GC_SEGS 256         /* segments per chunk at most */

static int64_t gc_in_rows(const struct hp_gfilt *q, int64_t rb)
{
	return (rb - 1) * q->geo.stride[1] + (q->geo.k[1] - 1) * q->geo.dil[1] + 1;
}

static size_t gc_per_worker(const struct hp_gfilt *q)
{
	int64_t rb = q->chunk, ow = q->geo.grid[2], kvol = q->geo.k[1] * q->geo.k[2];

	return (size_t)(gc_in_rows(q, rb) * q->pw * 16 + (q->sg > 1 ? rb * ow * 16 : 0) + 2 * q->mg * kvol * 16 + 16);
}

size_t hp_gfilt_workspace(const struct hp_gfilt *q)
{
	return (q->cl ? gc_per_worker(q) : gf_per_worker(q)) * (size_t)q->threads * sizeof(float);
}

int hp_gfilt_colane(struct hp_gfilt *q, const struct hp_colgeom *geo, int64_t n, int64_t cin, int64_t cout,
		    int64_t group, int64_t unit, int threads, size_t ws_max)
{
	int64_t cg = group > 0 ? cin / group : 0, mg = group > 0 ? cout / group : 0, sg = cg >= 16 ? 1 : cg > 0 ? 16 / cg : 0;
	int ok;

	memset(q, 0, sizeof *q);
#ifdef GF_X86
	ok = __builtin_cpu_supports("avx512f") != 0;
#else
	ok = 0;
#endif
	ok &= gc_mode >= 0 && hp_conv_grp_mode() >= 0 && hp_conv_shift_mode() == 0 && group >= 2 && cg >= 2 && mg >= 1;
	/* an odd number of groups of 8 (RegNet's 13 and 55) ends in a slab of
	 * one group: its other lanes staged as zeros and not stored */
	ok &= cg >= 16 ? cg % 16 == 0 : 16 % cg == 0 && sg * mg <= 16;
	ok &= geo->img[0] == 1 && geo->grid[0] == 1 && geo->k[0] == 1 && unit % geo->grid[2] == 0 && unit >= 1;
	ok &= geo->kvol <= 64 && geo->img_vol * 16 < INT32_MAX && geo->grid_vol * 16 < INT32_MAX;
	ok &= geo->grid[2] / GC_BLK + 2 <= GC_SEGS && geo->pad[1] >= 0 && geo->pad[2] >= 0;
	if (!ok)
		return 0;
	q->geo = *geo;
	q->n = n, q->cin = cin, q->cout = cout, q->group = group, q->cg = cg, q->mg = mg;
	q->bvol = geo->img_vol, q->svol = geo->grid_vol, q->rows = cg * geo->kvol;
	q->unit = unit;
	q->cl = 1;
	q->sg = sg;
	q->slabs = (cin + 15) / 16;
	q->blk = unit >= GC_BLK_MIN ? GC_BLK : 0;
	q->pw = (geo->grid[2] - 1) * geo->stride[2] + (geo->k[2] - 1) * geo->dil[2] + 1;
	/* output rows per chunk: as many as the staging holds, at least one */
	q->threads = threads > 0 ? threads : 1;
	for (q->chunk = geo->grid[1]; q->chunk > 1; q->chunk = (q->chunk + 1) / 2)
		if (gc_in_rows(q, q->chunk) * q->pw * 16 <= GC_STAGE && q->chunk * (geo->grid[2] / GC_BLK + 2) <= GC_SEGS &&
		    (!ws_max || hp_gfilt_workspace(q) <= ws_max))
			break;
	return 1;
}

#ifdef GF_X86

/* dW[e] += tree(lanes[e][0..16)): the order the vector paths add them in. */
static float gf_tree8(const float *l)
{
	return ((l[0] + l[1]) + (l[2] + l[3])) + ((l[4] + l[5]) + (l[6] + l[7]));
}

static float gf_tree(const float *l)
{
	return gf_tree8(l) + gf_tree8(l + 8);
}

struct gf_run {
	const struct hp_gfilt *q;
	const float *dy, *x, *acc;
	float *dw, *ws;
};

static GF_TARGET __m256i gf_mask(int64_t n)
{
	static const int32_t m[16] = { -1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0 };

	return _mm256_loadu_si256((const __m256i *)(m + 8 - (n < 8 ? n : 8)));
}

/* The hadd tree of 8 lane vectors a..h into [tree8(a), .., tree8(d)] (t0)
 * and [tree8(e), .., tree8(h)] (t1). */
static inline __attribute__((always_inline)) GF_TARGET void gf_hadd8(__m256 a, __m256 b, __m256 c, __m256 d, __m256 e,
								  __m256 f, __m256 g, __m256 h, __m128 *t0,
								  __m128 *t1)
{
	__m256 s0 = _mm256_hadd_ps(_mm256_hadd_ps(a, b), _mm256_hadd_ps(c, d));
	__m256 s1 = _mm256_hadd_ps(_mm256_hadd_ps(e, f), _mm256_hadd_ps(g, h));

	*t0 = _mm_add_ps(_mm256_castps256_ps128(s0), _mm256_extractf128_ps(s0, 1));
	*t1 = _mm_add_ps(_mm256_castps256_ps128(s1), _mm256_extractf128_ps(s1, 1));
}

/* dW rows w0 and w1 at 4 taps += tree8(lo lanes) + tree8(hi lanes) of two
 * channels' 4 accumulators each (lo[0..4) and hi[0..4) the first's). */
static inline __attribute__((always_inline)) GF_TARGET void gf_put2x4(const __m256 *lo0, const __m256 *hi0,
								   const __m256 *lo1, const __m256 *hi1, float *w0,
								   float *w1)
{
	__m128 a0, a1, b0, b1;

	gf_hadd8(lo0[0], lo0[1], lo0[2], lo0[3], lo1[0], lo1[1], lo1[2], lo1[3], &a0, &a1);
	gf_hadd8(hi0[0], hi0[1], hi0[2], hi0[3], hi1[0], hi1[1], hi1[2], hi1[3], &b0, &b1);
	_mm_storeu_ps(w0, _mm_add_ps(_mm_loadu_ps(w0), _mm_add_ps(a0, b0)));
	_mm_storeu_ps(w1, _mm_add_ps(_mm_loadu_ps(w1), _mm_add_ps(a1, b1)));
}

/* One micro-tile of mr <= 4 output channels x nr <= 4 taps over nu units
 * of ur output rows of ow positions each, the last unit first: dy[i] the
 * channels' first rows (next row dstep on), col[j] the taps' staged first
 * rows (next row cstep on).  16 lanes: column q of a row goes to lane
 * q mod 16, here two vectors of 8 (a[i][j][0] lanes 0-7, [1] 8-15).  Each
 * unit's lanes start at 0, or (not first: one unit continued) from lp
 * [4][4] x 16; they end in lp (not last) or, added in gf_tree's order, in
 * dW rows dw[i] (stride ldw) at taps [0, nr). */
static inline __attribute__((always_inline)) GF_TARGET void
gf_tile(int mr, int nr, int hw, const float *const *dy, const float *const *col, int64_t nu, int64_t ur, int64_t ow,
	int64_t dstep, int64_t cstep, float *lp, int first, int last, float *dw, int64_t ldw)
{
	int64_t nv = ow / 8, tail = ow % 8;
	__m256i m = gf_mask(tail);

	for (int64_t un = nu - 1; un >= 0; un--) {
		__m256 a[4][4][2];
		for (int i = 0; i < 4; i++) /* (the unused ones too: variable mr, nr leave GCC unsure) */
			for (int j = 0; j < 4; j++)
				a[i][j][0] = a[i][j][1] = _mm256_setzero_ps();
		if (!first)
			for (int i = 0; i < mr; i++)
				for (int j = 0; j < nr; j++)
					for (int h = 0; h < hw; h++)
						a[i][j][h] = _mm256_loadu_ps(lp + (i * 4 + j) * 16 + h * 8);
		for (int64_t r = un * ur; r < (un + 1) * ur; r++) {
			const float *dp[4], *cp[4];
			for (int i = 0; i < mr; i++)
				dp[i] = dy[i] + r * dstep;
			for (int j = 0; j < nr; j++)
				cp[j] = col[j] + r * cstep;
			for (int64_t v = 0; v <= nv; v++) {
				int h = hw == 2 ? (int)(v & 1) : 0;
				__m256 d[4], c[4];
				if (v == nv && !tail)
					break;
				for (int i = 0; i < mr; i++) /* masked lanes read 0: +0 * 0 leaves them */
					d[i] = v < nv ? _mm256_loadu_ps(dp[i] + v * 8) : _mm256_maskload_ps(dp[i] + v * 8, m);
				for (int j = 0; j < nr; j++)
					c[j] = v < nv ? _mm256_loadu_ps(cp[j] + v * 8) : _mm256_maskload_ps(cp[j] + v * 8, m);
				for (int i = 0; i < mr; i++)
					for (int j = 0; j < nr; j++)
						a[i][j][h] = _mm256_fmadd_ps(d[i], c[j], a[i][j][h]);
			}
		}
		if (!last) {
			for (int i = 0; i < mr; i++)
				for (int j = 0; j < nr; j++)
					for (int h = 0; h < hw; h++)
						_mm256_storeu_ps(lp + (i * 4 + j) * 16 + h * 8, a[i][j][h]);
			continue;
		}
		if (hw == 1 && nr == 4 && mr % 2 == 0) { /* two channels' 4 taps per tree of hadds */
			for (int i = 0; i < mr; i += 2) {
				__m128 t0, t1;
				float *w0 = dw + i * ldw, *w1 = w0 + ldw;
				gf_hadd8(a[i][0][0], a[i][1][0], a[i][2][0], a[i][3][0], a[i + 1][0][0], a[i + 1][1][0],
					 a[i + 1][2][0], a[i + 1][3][0], &t0, &t1);
				_mm_storeu_ps(w0, _mm_add_ps(_mm_loadu_ps(w0), t0));
				_mm_storeu_ps(w1, _mm_add_ps(_mm_loadu_ps(w1), t1));
			}
			continue;
		}
		for (int i = 0; i < mr; i++)
			for (int j = 0; j < nr; j++) {
				float l[16];
				_mm256_storeu_ps(l, a[i][j][0]);
				_mm256_storeu_ps(l + 8, a[i][j][1]);
				dw[i * ldw + j] += hw == 2 ? gf_tree(l) : gf_tree8(l);
			}
	}
}

/* The 4 x 4 tile in AVX-512: one 16-lane vector per accumulator. */
static GF_TARGET512 void gf_tile44_512(const float *const *dy, const float *const *col, int64_t nu, int64_t ur,
				       int64_t ow, int64_t dstep, int64_t cstep, float *lp, int first, int last, float *dw,
				       int64_t ldw)
{
	int64_t nv = ow / 16, tail = ow % 16;
	__mmask16 m = (__mmask16)((1u << tail) - 1);

	for (int64_t un = nu - 1; un >= 0; un--) {
		__m512 a[4][4];
		for (int i = 0; i < 4; i++)
			for (int j = 0; j < 4; j++)
				a[i][j] = first ? _mm512_setzero_ps() : _mm512_loadu_ps(lp + (i * 4 + j) * 16);
		for (int64_t r = un * ur; r < (un + 1) * ur; r++) {
			const float *dp[4], *cp[4];
			for (int i = 0; i < 4; i++)
				dp[i] = dy[i] + r * dstep;
			for (int j = 0; j < 4; j++)
				cp[j] = col[j] + r * cstep;
			for (int64_t v = 0; v < nv; v++) {
				__m512 d[4], c[4];
				for (int i = 0; i < 4; i++)
					d[i] = _mm512_loadu_ps(dp[i] + v * 16);
				for (int j = 0; j < 4; j++)
					c[j] = _mm512_loadu_ps(cp[j] + v * 16);
				for (int i = 0; i < 4; i++)
					for (int j = 0; j < 4; j++)
						a[i][j] = _mm512_fmadd_ps(d[i], c[j], a[i][j]);
			}
			if (tail) { /* masked lanes read 0: +0 * 0 leaves them */
				__m512 d[4], c[4];
				for (int i = 0; i < 4; i++)
					d[i] = _mm512_maskz_loadu_ps(m, dp[i] + nv * 16);
				for (int j = 0; j < 4; j++)
					c[j] = _mm512_maskz_loadu_ps(m, cp[j] + nv * 16);
				for (int i = 0; i < 4; i++)
					for (int j = 0; j < 4; j++)
						a[i][j] = _mm512_fmadd_ps(d[i], c[j], a[i][j]);
			}
		}
		if (!last) {
			for (int i = 0; i < 4; i++)
				for (int j = 0; j < 4; j++)
					_mm512_storeu_ps(lp + (i * 4 + j) * 16, a[i][j]);
			continue;
		}
		for (int i = 0; i < 4; i += 2) {
			__m256 lo0[4], hi0[4], lo1[4], hi1[4];
			for (int j = 0; j < 4; j++) {
				lo0[j] = _mm512_castps512_ps256(a[i][j]);
				hi0[j] = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(a[i][j]), 1));
				lo1[j] = _mm512_castps512_ps256(a[i + 1][j]);
				hi1[j] = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(a[i + 1][j]), 1));
			}
			gf_put2x4(lo0, hi0, lo1, hi1, dw + i * ldw, dw + (i + 1) * ldw);
		}
	}
}

static int gf_wide(void)
{
	static int cached = -1;

	if (cached < 0)
		cached = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl");
	return cached && !gf_avx2;
}

/* The other tiles: the same sums.  8 lanes: the 4 x 4 tile in 16
 * registers of 8 (AVX-512VL's 32 hold them; AVX2's 16 spill).  16 lanes
 * without AVX-512: a full tile in two halves of 2 taps. */
static GF_TARGET void gf_tile_small(int mr, int nr, int hw, const float *const *dy, const float *const *col,
				    int64_t nu, int64_t ur, int64_t ow, int64_t dstep, int64_t cstep, float *lp, int first,
				    int last, float *dw, int64_t ldw)
{
	gf_tile(mr, nr, hw, dy, col, nu, ur, ow, dstep, cstep, lp, first, last, dw, ldw);
}

static GF_TARGET void gf_tile44_8(const float *const *dy, const float *const *col, int64_t nu, int64_t ur, int64_t ow,
				  int64_t dstep, int64_t cstep, float *lp, int first, int last, float *dw, int64_t ldw)
{
	gf_tile(4, 4, 1, dy, col, nu, ur, ow, dstep, cstep, lp, first, last, dw, ldw);
}

static GF_TARGET512 void gf_tile44_8w(const float *const *dy, const float *const *col, int64_t nu, int64_t ur,
				      int64_t ow, int64_t dstep, int64_t cstep, float *lp, int first, int last, float *dw,
				      int64_t ldw)
{
	gf_tile(4, 4, 1, dy, col, nu, ur, ow, dstep, cstep, lp, first, last, dw, ldw);
}

static GF_TARGET void gf_tile42_16(const float *const *dy, const float *const *col, int64_t nu, int64_t ur,
				   int64_t ow, int64_t dstep, int64_t cstep, float *lp, int first, int last, float *dw,
				   int64_t ldw)
{
	gf_tile(4, 2, 2, dy, col, nu, ur, ow, dstep, cstep, lp, first, last, dw, ldw);
}

static void gf_tile_any(int lanes, int mr, int nr, const float *const *dy, const float *const *col, int64_t nu,
			int64_t ur, int64_t ow, int64_t dstep, int64_t cstep, float *lp, int first, int last, float *dw,
			int64_t ldw)
{
	if (mr != 4 || nr != 4)
		gf_tile_small(mr, nr, lanes / 8, dy, col, nu, ur, ow, dstep, cstep, lp, first, last, dw, ldw);
	else if (lanes == 16 && gf_wide())
		gf_tile44_512(dy, col, nu, ur, ow, dstep, cstep, lp, first, last, dw, ldw);
	else if (lanes == 16) { /* lp's layout is [4][4] x 16 whatever the tile: taps 2-3 at 2 */
		gf_tile42_16(dy, col, nu, ur, ow, dstep, cstep, lp, first, last, dw, ldw);
		gf_tile42_16(dy, col + 2, nu, ur, ow, dstep, cstep, lp + 2 * 16, first, last, dw + 2, ldw);
	} else if (gf_wide()) {
		gf_tile44_8w(dy, col, nu, ur, ow, dstep, cstep, lp, first, last, dw, ldw);
	} else {
		gf_tile44_8(dy, col, nu, ur, ow, dstep, cstep, lp, first, last, dw, ldw);
	}
}

/* The padded input rows of output rows [b0, b1) of channels [0, cg) at
 * img, each split into its stride's column phases (gf_pq floats each). */
static void gf_stage(const struct hp_gfilt *q, const float *img, int64_t b0, int64_t b1, float *st)
{
	const struct hp_colgeom *g = &q->geo;
	int64_t sw = g->stride[2], pq = gf_pq(q), nr = gf_in_rows(q, b1 - b0), ih = g->img[1], iw = g->img[2];
	int64_t top = b0 * g->stride[1] - g->pad[1], left = g->pad[2];

	for (int64_t c = 0; c < q->cg; c++)
		for (int64_t r = 0; r < nr; r++) {
			int64_t y = top + r;
			const float *src = y >= 0 && y < ih ? img + (c * ih + y) * iw : NULL;
			if (sw == 1) { /* zeros, the row, zeros */
				float *dst = st + (c * nr + r) * pq;
				int64_t a = left < pq ? left : pq, b = src ? (left + iw < pq ? left + iw : pq) : a;
				memset(dst, 0, (size_t)a * sizeof *dst);
				if (b > a)
					memcpy(dst + a, src + (a - left), (size_t)(b - a) * sizeof *dst);
				memset(dst + b, 0, (size_t)(pq - b) * sizeof *dst);
				continue;
			}
			for (int64_t f = 0; f < sw; f++) {
				float *dst = st + ((c * nr + r) * sw + f) * pq;
				/* columns k * sw + f - left inside the row: k in [ka, kb) */
				int64_t ka = left > f ? (left - f + sw - 1) / sw : 0, kb = (iw + left - f + sw - 1) / sw;
				ka = ka < pq ? ka : pq;
				kb = !src ? ka : kb < pq ? kb : pq;
				kb = kb > ka ? kb : ka;
				int64_t o = f - left;
				memset(dst, 0, (size_t)ka * sizeof *dst);
				if (sw == 2) /* a constant stride: GCC deinterleaves in vectors */
					for (int64_t k = ka; k < kb; k++)
						dst[k] = src[2 * k + o];
				else
					for (int64_t k = ka; k < kb; k++)
						dst[k] = src[k * sw + o];
				memset(dst + kb, 0, (size_t)(pq - kb) * sizeof *dst);
			}
		}
}

/* The micro-tiles of output rows [b0, b1) staged at st (from its row
 * sb0), in units of ur rows, the last first: lanes from lp unless first,
 * trees into dW at last. */
static void gf_block(const struct hp_gfilt *q, const float *dyg, const float *st, int64_t sb0, int64_t sb1,
		     int64_t b0, int64_t b1, int64_t ur, float *lp, int first, int last, float *dw)
{
	const struct hp_colgeom *geo = &q->geo;
	int64_t rows = q->rows, mg = q->mg, ow = geo->grid[2], sw = geo->stride[2], pq = gf_pq(q);
	int64_t kw = geo->k[2], kv = geo->k[1] * kw, nin = gf_in_rows(q, sb1 - sb0);
	const float *base = st + (b0 - sb0) * geo->stride[1] * sw * pq;

	for (int64_t m0 = 0; m0 < mg; m0 += 4)
		for (int64_t t0 = 0; t0 < rows; t0 += 4) {
			int mr = (int)(mg - m0 < 4 ? mg - m0 : 4), nr = (int)(rows - t0 < 4 ? rows - t0 : 4);
			const float *dp[4], *cp[4];
			for (int i = 0; i < mr; i++)
				dp[i] = dyg + (m0 + i) * q->svol + b0 * ow;
			for (int j = 0; j < nr; j++) {
				int64_t t = t0 + j, c = t / kv, y = t % kv / kw, x = t % kw, dx = x * geo->dil[2];
				cp[j] = base + ((c * nin + y * geo->dil[1]) * sw + dx % sw) * pq + dx / sw;
			}
			gf_tile_any(q->lanes, mr, nr, dp, cp, (b1 - b0) / ur, ur, ow, ow, geo->stride[1] * sw * pq,
				    lp + gf_lp_at(q, m0, t0), first, last, dw + m0 * rows + t0, rows);
		}
}

/* Group g: its dW rows from the running sum (or 0), then every unit, the
 * last first.  Units of rows share a staged block of q->chunk rows;
 * units longer than that take it in blocks, their lanes kept in between. */
static void gf_group(const struct gf_run *r, int64_t g, float *ws)
{
	const struct hp_gfilt *q = r->q;
	int64_t rows = q->rows, mg = q->mg, oh = q->geo.grid[1], urows = q->unit / q->geo.grid[2];
	float *st = ws, *lp = ws + gf_stage_floats(q);
	float *dw = r->dw + g * mg * rows;

	if (r->acc)
		memcpy(dw, r->acc + g * mg * rows, (size_t)(mg * rows) * sizeof *dw);
	else
		memset(dw, 0, (size_t)(mg * rows) * sizeof *dw);
	for (int64_t nb = q->n - 1; nb >= 0; nb--) {
		const float *img = r->x + (nb * q->cin + g * q->cg) * q->bvol;
		const float *dyg = r->dy + (nb * q->cout + g * mg) * q->svol;
		if (urows <= q->chunk) {
			int64_t per = q->chunk / urows * urows, nblk = (oh + per - 1) / per;
			for (int64_t k = nblk - 1; k >= 0; k--) {
				int64_t s0 = k * per, s1 = s0 + per < oh ? s0 + per : oh;
				gf_stage(q, img, s0, s1, st);
				gf_block(q, dyg, st, s0, s1, s0, s1, urows, lp, 1, 1, dw);
			}
			continue;
		}
		for (int64_t r0 = oh - urows; r0 >= 0; r0 -= urows)
			for (int64_t b0 = r0; b0 < r0 + urows; b0 += q->chunk) {
				int64_t b1 = b0 + q->chunk < r0 + urows ? b0 + q->chunk : r0 + urows;
				gf_stage(q, img, b0, b1, st);
				gf_block(q, dyg, st, b0, b1, b0, b1, b1 - b0, lp, b0 == r0, b1 == r0 + urows, dw);
			}
	}
}

static void gf_range(void *arg, int64_t b, int64_t e, int tid)
{
	const struct gf_run *r = arg;

	for (int64_t g = b; g < e; g++)
		gf_group(r, g, r->ws + (size_t)tid * gf_per_worker(r->q));
}

#define GC_TARGET __attribute__((target("avx2,fma,avx512f")))

/* A run of positions of one output row inside one block (or chain):
 * staged input at xo floats on, dY at doff, npos positions; reset: a
 * block starts here (accumulators from 0), fold: one ends here (added to
 * the sum). */
struct gc_seg {
	int32_t xo, doff, npos;
	int32_t nrow, xrs, drs; /* rows of npos (chains: a chunk's), steps to the next */
	uint8_t reset, fold;
};

/* One tile over a chunk's segments: accumulators from the sums sb
 * (chains: q->blk 0), or from the block in progress pb unless the first
 * segment starts one; per position the staged input vector of each tap
 * (toff[]) and per output channel dY, a permute of the packed vector
 * (perm) or (one group) a broadcast, channels dm apart; blocks that end
 * are added to sb, one still going is left in pb (ld: floats per output
 * channel in sb and pb). */
static inline __attribute__((always_inline)) GC_TARGET void
gc_tile_impl(const int TM, const int TT, const int BC, const float *xb, int64_t xstep, const int64_t *toff,
	     const float *db, int64_t dstep, int64_t dm, const __m512i *perm, const struct gc_seg *sg, int nseg,
	     float *sb, float *pb, int64_t ld, int chain)
{
	__m512 a[GC_TM][GC_TT];
	const float *from = chain ? sb : pb;

	for (int i = 0; i < TM; i++)
		for (int t = 0; t < TT; t++)
			a[i][t] = chain || !sg[0].reset ? _mm512_loadu_ps(from + i * ld + t * 16) : _mm512_setzero_ps();
	for (int k = 0; k < nseg; k++) {
		if (!chain && sg[k].reset && k)
			for (int i = 0; i < TM; i++)
				for (int t = 0; t < TT; t++)
					a[i][t] = _mm512_setzero_ps();
		for (int64_t rr = 0; rr < sg[k].nrow; rr++)
		for (int64_t p = 0, np = sg[k].npos, o = sg[k].xo + rr * sg[k].xrs, e = sg[k].doff + rr * sg[k].drs; p < np; p++) {
			const float *xp = xb + o + p * xstep, *dp = db + e + p * dstep;
			__m512 d[GC_TM];
			if (BC) {
				for (int i = 0; i < TM; i++)
					d[i] = _mm512_set1_ps(dp[i * dm]);
			} else {
				__m512 v = _mm512_loadu_ps(dp);
				for (int i = 0; i < TM; i++)
					d[i] = _mm512_permutexvar_ps(perm[i], v);
			}
			for (int t = 0; t < TT; t++) {
				__m512 x = _mm512_loadu_ps(xp + toff[t]);
				for (int i = 0; i < TM; i++)
					a[i][t] = _mm512_fmadd_ps(d[i], x, a[i][t]);
			}
		}
		if (!chain && sg[k].fold)
			for (int i = 0; i < TM; i++)
				for (int t = 0; t < TT; t++) {
					float *o = sb + i * ld + t * 16;
					_mm512_storeu_ps(o, _mm512_add_ps(_mm512_loadu_ps(o), a[i][t]));
				}
	}
	if (chain || !sg[nseg - 1].fold)
		for (int i = 0; i < TM; i++)
			for (int t = 0; t < TT; t++)
				_mm512_storeu_ps((chain ? sb : pb) + i * ld + t * 16, a[i][t]);
}

typedef void (*gc_tile_fn)(const float *, int64_t, const int64_t *, const float *, int64_t, int64_t, const __m512i *,
			   const struct gc_seg *, int, float *, float *, int64_t, int);

#define GC_INST(TM, TT, BC)                                                                                         \
	static GC_TARGET void gc_tile_##TM##_##TT##_##BC(const float *xb, int64_t xstep, const int64_t *toff,      \
							  const float *db, int64_t dstep, int64_t dm,              \
							  const __m512i *perm, const struct gc_seg *sg, int nseg,  \
							  float *sb, float *pb, int64_t ld, int chain)             \
	{                                                                                                           \
		gc_tile_impl(TM, TT, BC, xb, xstep, toff, db, dstep, dm, perm, sg, nseg, sb, pb, ld, chain);       \
	}
#define GC_INST_T(TM, BC)                                                                                           \
	GC_INST(TM, 1, BC) GC_INST(TM, 2, BC) GC_INST(TM, 3, BC) GC_INST(TM, 4, BC) GC_INST(TM, 5, BC)              \
	GC_INST(TM, 6, BC) GC_INST(TM, 7, BC) GC_INST(TM, 8, BC) GC_INST(TM, 9, BC)
GC_INST_T(1, 0)
GC_INST_T(2, 0)
GC_INST_T(3, 0)
GC_INST_T(1, 1)
GC_INST_T(2, 1)
GC_INST_T(3, 1)
#define GC_ROW_T(TM, BC)                                                                                            \
	{ gc_tile_##TM##_1_##BC, gc_tile_##TM##_2_##BC, gc_tile_##TM##_3_##BC, gc_tile_##TM##_4_##BC,              \
	  gc_tile_##TM##_5_##BC, gc_tile_##TM##_6_##BC, gc_tile_##TM##_7_##BC, gc_tile_##TM##_8_##BC,              \
	  gc_tile_##TM##_9_##BC }
static const gc_tile_fn gc_tiles[2][GC_TM][GC_TT] = { { GC_ROW_T(1, 0), GC_ROW_T(2, 0), GC_ROW_T(3, 0) },
						       { GC_ROW_T(1, 1), GC_ROW_T(2, 1), GC_ROW_T(3, 1) } };

/* Rows i < nr of src (at so[i]) at columns [0, n), zero in rows nr..15,
 * transposed: column j (16 floats, the first w) to dst + dof[j], j < n:
 * a 16 x 16 transpose in registers. */
static inline __attribute__((always_inline)) GC_TARGET void gc_tr16x(const float *src, const int64_t *so, int n, int nr,
								  float *dst, const int64_t *dof, int w)
{
	__m512 r[16];
	__mmask16 m = (__mmask16)((1u << n) - 1), mw = (__mmask16)((1u << w) - 1);

	for (int i = 0; i < 16; i++)
		r[i] = i < nr ? _mm512_maskz_loadu_ps(m, src + so[i]) : _mm512_setzero_ps();
	hp_tr16_ps(r);
	for (int i = 0; i < n; i++)
		_mm512_mask_storeu_ps(dst + dof[i], mw, r[i]);
}

static const int64_t gc_i16[16] = { 0, 16, 32, 48, 64, 80, 96, 112, 128, 144, 160, 176, 192, 208, 224, 240 };

/* dst [n][16] = rows [0, nr) (ld apart) of src at columns [0, n), zero
 * in rows nr..15. */
static GC_TARGET void gc_tr16(const float *src, int64_t ld, int n, int nr, float *dst)
{
	int64_t so[16];

	for (int i = 0; i < 16; i++)
		so[i] = i * ld;
	gc_tr16x(src, so, n, nr, dst, gc_i16, 16);
}

/* The slab's running sums sb [m][t][16] from dW-shaped w (to_sb) or
 * back: lane l's row of kvol taps at w + m * cg * kvol + off[l], lanes
 * l < nl (the others 0 in sb, and not stored). */
static GC_TARGET void gc_sums(const struct hp_gfilt *q, float *w, const int64_t *off, int nl, float *sb, int to_sb)
{
	int64_t kvol = q->geo.kvol;

	for (int64_t m = 0; m < q->mg; m++) {
		float *wm = w + m * q->cg * kvol, *sm = sb + m * kvol * 16;
		if (kvol > 16) {
			for (int l = 0; l < 16; l++)
				for (int64_t t = 0; t < kvol; t++)
					if (l >= nl) /* a lane past the channels */
						sm[t * 16 + l] = to_sb ? 0.0f : sm[t * 16 + l];
					else if (to_sb)
						sm[t * 16 + l] = wm[off[l] + t];
					else
						wm[off[l] + t] = sm[t * 16 + l];
		} else if (to_sb) {
			gc_tr16x(wm, off, (int)kvol, nl, sm, gc_i16, 16);
		} else {
			gc_tr16x(sm, gc_i16, nl, (int)kvol, wm, off, (int)kvol);
		}
	}
}

/* Stages input rows [y0, y0 + nr) (padded coordinates: row y0 is input
 * row y0 - pad) of the slab's nl channels of item img into st: [row][pw
 * columns][16 channels], zeros outside the input and in lanes nl.. */
static GC_TARGET void gc_stage(const struct hp_gfilt *q, const float *img, int nl, int64_t y0, int64_t nr, float *st)
{
	const struct hp_colgeom *g = &q->geo;
	int64_t ih = g->img[1], iw = g->img[2], pl = g->pad[2], pw = q->pw;
	int64_t xe = iw < pw - pl ? iw : pw - pl; /* columns [0, xe) of a row are staged */

	for (int64_t r = 0; r < nr; r++) {
		int64_t y = y0 + r - g->pad[1];
		float *dst = st + r * pw * 16;
		if (y < 0 || y >= ih || xe <= 0) {
			memset(dst, 0, (size_t)(pw * 16) * sizeof *dst);
			continue;
		}
		memset(dst, 0, (size_t)(pl * 16) * sizeof *dst);
		for (int64_t x = 0; x < xe; x += 16)
			gc_tr16(img + y * iw + x, q->bvol, (int)(xe - x < 16 ? xe - x : 16), nl, dst + (pl + x) * 16);
		memset(dst + (pl + xe) * 16, 0, (size_t)((pw - pl - xe) * 16) * sizeof *dst);
	}
}

struct gc_ctx {
	const struct hp_gfilt *q;
	const float *dy;  /* the item's dY, at the slab's first group */
	const float *st;  /* staged rows of the chunk */
	const float *dyt; /* packed dY of the chunk (groups per slab > 1) */
	int64_t toff[64];
	__m512i perm[64];
	float *sb, *pb;
};

/* Output row y (the chunk's row y - cy0) of a unit whose position j0 is
 * the row's first: its segments, appended at sg[*ns]; chains take a
 * chunk's rows in one segment, the next row below (down: units of rows,
 * the last first) or above. */
static void gc_row_segs(const struct hp_gfilt *q, int64_t y, int64_t cy0, int64_t j0, int down, struct gc_seg *sg,
			int *ns)
{
	const struct hp_colgeom *g = &q->geo;
	int64_t ow = g->grid[2], blk = q->blk ? q->blk : ow, unit = q->unit, bc = q->sg == 1;

	if (!q->blk && *ns) { /* chains: one more row of the chunk's segment */
		sg[0].nrow++;
		return;
	}

	for (int64_t x = 0; x < ow;) {
		int64_t j = j0 + x, e = (j / blk + 1) * blk - j0; /* the block's end in this row */
		e = e < ow ? e : ow;
		struct gc_seg *o = &sg[(*ns)++];
		o->xo = (int32_t)(((y - cy0) * g->stride[1] * q->pw + x * g->stride[2]) * 16);
		o->doff = (int32_t)(bc ? y * ow + x : ((y - cy0) * ow + x) * 16);
		o->npos = (int32_t)(e - x);
		o->nrow = 1;
		o->xrs = (int32_t)((down ? -1 : 1) * g->stride[1] * q->pw * 16); /* units of rows: rows from the last */
		o->drs = (int32_t)((down ? -1 : 1) * (bc ? ow : ow * 16));
		o->reset = j % blk == 0;
		o->fold = (j0 + e) % blk == 0 || j0 + e == unit;
		x = e;
	}
}

/* Every tile of the chunk over its segments. */
static void gc_tiles_run(const struct gc_ctx *c, const struct gc_seg *segs, int ns)
{
	const struct hp_gfilt *q = c->q;
	const struct hp_colgeom *g = &q->geo;
	int64_t kvol = g->k[1] * g->k[2], ld = kvol * 16;
	int bc = q->sg == 1;

	/* tiles of 3 output channels, the last two of 2 where 1 would be left
	 * (a tile of 1 loads a tap's vector per multiply-add) */
	for (int64_t m0 = 0, tm; m0 < q->mg; m0 += tm)
		for (int64_t t0 = 0; t0 < kvol; t0 += GC_TT) {
			int64_t left = q->mg - m0;
			tm = left == 4 ? 2 : left < GC_TM ? left : GC_TM;
			int tt = (int)(kvol - t0 < GC_TT ? kvol - t0 : GC_TT);
			gc_tiles[bc][(int)tm - 1][tt - 1](c->st, g->stride[2] * 16, c->toff + t0, bc ? c->dy + m0 * q->svol : c->dyt,
						     bc ? 1 : 16, q->svol, c->perm + m0, segs, ns, c->sb + m0 * ld + t0 * 16,
						     c->pb + m0 * ld + t0 * 16, ld, q->blk == 0);
		}
}

static GC_TARGET void gc_slab(const struct gf_run *r, int64_t s, float *ws)
{
	const struct hp_gfilt *q = r->q;
	const struct hp_colgeom *g = &q->geo;
	int64_t kvol = g->k[1] * g->k[2], ow = g->grid[2], oh = g->grid[1], cg = q->cg, mg = q->mg, rb = q->chunk;
	int64_t urows = q->unit / ow, g0 = s * 16 / cg, nin = gc_in_rows(q, rb);
	int nl = (int)(q->cin - s * 16 < 16 ? q->cin - s * 16 : 16); /* the slab's channels */
	struct gc_ctx c = { .q = q };
	struct gc_seg segs[GC_SEGS];
	float *st = ws, *dyt = st + nin * q->pw * 16, *sb = dyt + (q->sg > 1 ? rb * ow * 16 : 0), *pb = sb + mg * kvol * 16;

	c.st = st, c.dyt = dyt, c.sb = sb, c.pb = pb;
	for (int64_t t = 0; t < kvol; t++)
		c.toff[t] = (t / g->k[2] * g->dil[1] * q->pw + t % g->k[2] * g->dil[2]) * 16;
	for (int64_t m = 0; m < (q->sg > 1 ? mg : 0); m++) {
		int32_t ix[16];
		for (int l = 0; l < 16; l++)
			ix[l] = (int32_t)(q->sg > 1 ? l / cg * mg + m : 0);
		c.perm[m] = _mm512_loadu_si512(ix);
	}
	int64_t off[16]; /* lane l's dW row (output channel 0 of its group) */
	for (int l = 0; l < 16; l++) {
		int64_t ch = s * 16 + l, gi = ch / cg, ci = ch % cg;
		off[l] = ((gi - g0) * mg * cg + ci) * kvol;
	}
	float *dwb = r->dw + g0 * mg * cg * kvol; /* the slab's first group's */
	if (r->acc) /* the running sums from acc or 0 */
		gc_sums(q, (float *)r->acc + g0 * mg * cg * kvol, off, nl, sb, 1);
	else
		memset(sb, 0, (size_t)(mg * kvol * 16) * sizeof *sb);
	for (int64_t nb = q->n - 1; nb >= 0; nb--) {
		const float *img = r->x + (nb * q->cin + s * 16) * q->bvol;
		c.dy = r->dy + (nb * q->cout + g0 * mg) * q->svol;
		int64_t nch = (oh + rb - 1) / rb;
		for (int64_t kk = 0; kk < nch; kk++) {
			/* units of rows: chunks and rows from the last; of items: in order */
			int64_t k = urows == 1 ? nch - 1 - kk : kk, y0 = k * rb, y1 = y0 + rb < oh ? y0 + rb : oh;
			gc_stage(q, img, nl, y0 * g->stride[1], gc_in_rows(q, y1 - y0), st);
			if (q->sg > 1) /* dY of the slab's groups, [position][channel] */
				for (int64_t p = y0 * ow; p < y1 * ow; p += 16)
					gc_tr16(c.dy + p, q->svol, (int)(y1 * ow - p < 16 ? y1 * ow - p : 16), (int)(nl / cg * mg),
						dyt + (p - y0 * ow) * 16);
			int ns = 0;
			for (int64_t yy = y0; yy < y1; yy++) {
				int64_t y = urows == 1 ? y1 - 1 - (yy - y0) : yy;
				gc_row_segs(q, y, y0, urows == 1 ? 0 : y * ow, urows == 1, segs, &ns);
			}
			gc_tiles_run(&c, segs, ns);
		}
	}
	gc_sums(q, dwb, off, nl, sb, 0);
}

static void gc_range(void *arg, int64_t b, int64_t e, int tid)
{
	const struct gf_run *r = arg;

	for (int64_t s = b; s < e; s++)
		gc_slab(r, s, r->ws + (size_t)tid * gc_per_worker(r->q));
}

#endif

void hp_gfilt_run(const struct hp_gfilt *q, const float *dy, const float *x, const float *acc, float *dw, float *ws,
		  struct hp_pool *pool)
{
#ifdef GF_X86
	struct gf_run r = { .q = q, .dy = dy, .x = x, .acc = acc, .dw = dw, .ws = ws };
	int saved, threads = hp_conv_threads_enter(pool, &saved);

	threads = threads < q->threads ? threads : q->threads;
	if (q->cl)
		hp_conv_steal(pool, threads, q->slabs, 1, gc_range, &r);
	else
		hp_conv_steal(pool, threads, q->group, 1, gf_range, &r);
	hp_conv_threads_leave(saved);
#else
	(void)q, (void)dy, (void)x, (void)acc, (void)dw, (void)ws, (void)pool;
#endif
}
