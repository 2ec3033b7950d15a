/* Depthwise 3x3 forward, 2-D, stride 1 or 2 (MobileNet's), with AVX2 and
 * FMA: output rows as vectors of 8 columns, each output the chain
 * bias + w0 x0 + ... + w8 x8 of fused multiply-adds in (kh, kw) order,
 * taps in the padding included as w * 0.
 *
 * Why: conv_dw.c's rows vectorize only over whole vectors of a row, so
 * MobileNetV2's 14x14 and 7x7 planes ran scalar (4-8 GFLOP/s), and at
 * stride 2 the loads were strided.  Here every row is whole vectors, the
 * last one masked, loaded from the image rows in place (masked loads at
 * the row's ends); with a clip (X read through Clip) input rows are
 * copied once each into a ring of zero-padded rows (at stride 2 split
 * into even and odd columns, so that all three taps of a row are
 * contiguous loads).  The stride-2 data gradient's rows are here too.
 *
 * Determinism: an output's chain depends on the weights and its nine
 * input values alone (zeros in the padding), so planes split among
 * workers and bands of rows or items (whose halo rows are the same image
 * rows, whose padding the same zeros) give the whole node's bits, with or
 * without the ring. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/conv_impl.h"
#include "kernels/cpu.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define DW3_X86 1
#define DW3_TARGET __attribute__((target("avx2,fma")))
#endif

#define DW3_SLOTS 16 /* ring of padded rows: a step's 3..9 and the next step's */
#define DW3_R 4       /* output rows per step (independent chains, shared loads) */

int hp_dw3_eligible(const struct hp_colgeom *g)
{
	return hp_dot_available() && g->img[0] == 1 && g->k[0] == 1 && g->k[1] == 3 && g->k[2] == 3 &&
	       g->dil[1] == 1 && g->dil[2] == 1 && g->stride[1] == g->stride[2] &&
	       (g->stride[1] == 1 || g->stride[1] == 2);
}

/* Floats of one padded row: room for the left pad, the image row and the
 * last vector's lanes past the output's end (stride 2: twice the
 * columns, split in halves). */
static int64_t dw3_width(const struct hp_colgeom *g)
{
	int64_t w = g->pad[2] + g->img[2], need = g->stride[2] * (g->grid[2] + 8) + 2;

	w = w > need ? w : need;
	return (w + 8 + 15) / 16 * 16; /* and a vector's slack past the image row */
}

size_t hp_dw3_scratch(const struct hp_colgeom *g)
{
	return (size_t)((DW3_SLOTS + 1) * dw3_width(g)) * sizeof(float);
}

#ifdef DW3_X86
static const int32_t dw3_mask_src[16] = { -1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0 };

DW3_TARGET static inline __m256i dw3_mask(int64_t n)
{
	return _mm256_loadu_si256((const __m256i *)(dw3_mask_src + 8 - (n < 0 ? 0 : n > 8 ? 8 : n)));
}

/* Clip(v) as the products' epilogues compute it (kernels/fma_tile.h's
 * fma_finish: a compare and a select each side, NaN passes), clip[0]
 * already min(lo, hi); clip NULL: v. */
DW3_TARGET static inline __m256 dw3_clip(__m256 v, const float *clip)
{
	if (!clip)
		return v;
	__m256 lo = _mm256_set1_ps(clip[0]), hi = _mm256_set1_ps(clip[1]);
	__m256 r = _mm256_blendv_ps(v, hi, _mm256_cmp_ps(v, hi, _CMP_GT_OQ));

	return _mm256_blendv_ps(r, lo, _mm256_cmp_ps(v, lo, _CMP_LT_OQ));
}

/* Lanes l of the padded row's vector at i whose image column i - left + l
 * lies in [0, n), loaded from x and clipped (zeros elsewhere, the padding
 * of the clipped image; masked lanes are not read). */
DW3_TARGET static inline __m256 dw3_pad_vec(const float *x, int64_t i, int64_t left, int64_t n, const float *clip)
{
	if (i >= left && i - left + 8 <= n) /* inside: masked loads are slow on AMD's cores too */
		return dw3_clip(_mm256_loadu_ps(x + i - left), clip);
	__m256i idx = _mm256_add_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7), _mm256_set1_epi32((int)(i - left)));
	__m256i in = _mm256_andnot_si256(_mm256_cmpgt_epi32(_mm256_setzero_si256(), idx),
					 _mm256_cmpgt_epi32(_mm256_set1_epi32((int)n), idx));

	return _mm256_and_ps(dw3_clip(_mm256_maskload_ps(x + i - left, in), clip), _mm256_castsi256_ps(in));
}

/* Image row x into a padded row: stride 1 as it is, stride 2 as its even
 * padded columns then its odd ones (halves of width / 2).  Every vector
 * of the row is built in registers and stored once: zeroing the row and
 * then storing the image over it at another alignment made the loads
 * that followed wait for the stores (failed store forwarding), which
 * cost 6x the taps; memset and memcpy calls cost more than the taps on
 * 7x7 planes, and masked stores are slow on AMD's cores. */
DW3_TARGET static void dw3_fill(const struct hp_colgeom *g, const float *x, float *row, const float *clip)
{
	int64_t wd = dw3_width(g), left = g->pad[2], n = g->img[2];

	if (g->stride[2] == 1) {
		for (int64_t i = 0; i < wd; i += 8)
			_mm256_storeu_ps(row + i, dw3_pad_vec(x, i, left, n, clip));
		return;
	}
	for (int64_t i = 0; i < wd; i += 16) {
		__m256 a = dw3_pad_vec(x, i, left, n, clip), b = dw3_pad_vec(x, i + 8, left, n, clip);
		__m256 e = _mm256_shuffle_ps(a, b, 0x88), o = _mm256_shuffle_ps(a, b, 0xdd);
		_mm256_storeu_ps(row + i / 2, _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(e), 0xd8)));
		_mm256_storeu_ps(row + wd / 2 + i / 2,
				 _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(o), 0xd8)));
	}
}

/* R output rows (stride S) from padded rows r[S * (R - 1) + 3]: vectors of
 * 8 columns, the last one masked.  Input row t serves output row j with
 * kh = t - S j, so each output's taps come in (kh, kw) order. */
DW3_TARGET static inline __attribute__((always_inline)) void
dw3_rows(const int R, const int S, const float *const *r, const __m256 *wv, __m256 b, float *y, int64_t ldy,
	 int64_t ow, int64_t o1, int64_t o2, int last)
{
	for (int64_t o = 0; o < ow; o += 8) {
		__m256 acc[DW3_R];
		for (int j = 0; j < R; j++)
			acc[j] = b;
		for (int t = 0; t < S * (R - 1) + 3; t++) {
			const float *p = r[t] + o;
			__m256 v0 = _mm256_loadu_ps(p), v1 = _mm256_loadu_ps(p + o1), v2 = _mm256_loadu_ps(p + o2);
			for (int j = 0; j < R; j++) {
				int kh = t - S * j;
				if (kh < 0 || kh > 2)
					continue;
				acc[j] = _mm256_fmadd_ps(wv[3 * kh], v0, acc[j]);
				acc[j] = _mm256_fmadd_ps(wv[3 * kh + 1], v1, acc[j]);
				acc[j] = _mm256_fmadd_ps(wv[3 * kh + 2], v2, acc[j]);
			}
		}
		for (int j = 0; j < R; j++) {
			float *q = y + j * ldy + o;
			if (o + 8 <= ow) {
				_mm256_storeu_ps(q, acc[j]);
			} else if (j < R - 1 || !last) { /* lanes past the row: the next row's values back */
				__m256 m = _mm256_castsi256_ps(dw3_mask(ow - o));
				_mm256_storeu_ps(q, _mm256_blendv_ps(_mm256_loadu_ps(q), acc[j], m));
			} else { /* the plane's last row: nothing past it may be written */
				_mm256_maskstore_ps(q, dw3_mask(ow - o), acc[j]);
			}
		}
	}
}

#define DW3_CASE(R)                                                                                   \
	case R:                                                                                        \
		if (s == 1)                                                                            \
			dw3_rows(R, 1, r, wv, b, y, ow, ow, 1, 2, last);                                     \
		else                                                                                   \
			dw3_rows(R, 2, r, wv, b, y, ow, ow, half, 1, last);                                  \
		break;

DW3_TARGET static void dw3_step(int rows, int64_t s, const float *const *r, const float *w, float bias, float *y,
				int64_t ow, int64_t half, int last)
{
	__m256 wv[9], b = _mm256_set1_ps(bias);

	for (int t = 0; t < 9; t++)
		wv[t] = _mm256_broadcast_ss(w + t);
	switch (rows) {
		DW3_CASE(1)
		DW3_CASE(2)
		DW3_CASE(3)
		DW3_CASE(4)
	default:
		break;
	}
}

/* ---- without the ring: vectors loaded from the image rows in place ----
 * The ring copies every input row once, a third of the time on 56x56
 * planes.  Here a column vector of outputs whose taps all lie inside the
 * image row loads them straight from it; one at either end of the row
 * loads with masks (lanes outside the row read as 0, the padding's value,
 * so the chains stay the ring's).  Rows outside the image are the zero
 * row.  At stride 2 a vector takes columns base .. base + 17 as four loads
 * and splits them into even and odd columns with one shuffle each, its
 * outputs in the lane order 0 1 4 5 2 3 6 7 (no lane-crossing permute per
 * input row), put back in order once per output vector before the store;
 * a lane's chain does not depend on where the lane is. */

/* Lane l of a load at image column i + l inside [0, n). */
DW3_TARGET static inline __m256i dw3_in(int64_t i, int64_t n)
{
	__m256i idx = _mm256_add_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7), _mm256_set1_epi32((int)i));

	return _mm256_andnot_si256(_mm256_cmpgt_epi32(_mm256_setzero_si256(), idx),
				   _mm256_cmpgt_epi32(_mm256_set1_epi32((int)n), idx));
}

/* The outputs' vectors to y's rows: whole, blended into the next row's
 * values, or (the plane's last row) masked. */
DW3_TARGET static inline __attribute__((always_inline)) void dw3_put(const int R, const __m256 *acc, float *y,
								     int64_t ldy, int64_t ow, int64_t o, int last)
{
	for (int j = 0; j < R; j++) {
		float *q = y + j * ldy + o;
		if (o + 8 <= ow) {
			_mm256_storeu_ps(q, acc[j]);
		} else if (j < R - 1 || !last) {
			__m256 m = _mm256_castsi256_ps(dw3_mask(ow - o));
			_mm256_storeu_ps(q, _mm256_blendv_ps(_mm256_loadu_ps(q), acc[j], m));
		} else {
			_mm256_maskstore_ps(q, dw3_mask(ow - o), acc[j]);
		}
	}
}

/* One column vector (outputs o .. o + 7) of R output rows at stride S from
 * image rows r[t] (t < S (R - 1) + 3), image column of output o's tap 0 at
 * base; E: with masks m[4] (the columns base + {0, 1, 2} at stride 1,
 * base + {0, 8, 2, 10} at stride 2). */
DW3_TARGET static inline __attribute__((always_inline)) void
dw3_col(const int R, const int S, const int E, const float *const *r, const __m256 *wv, __m256 b, int64_t base,
	const __m256i *m, __m256 *acc)
{
	for (int j = 0; j < R; j++)
		acc[j] = b;
#pragma GCC unroll 9
	for (int t = 0; t < S * (R - 1) + 3; t++) {
		const float *p = r[t] + base;
		__m256 v0, v1, v2;
		if (S == 1) {
			v0 = E ? _mm256_maskload_ps(p, m[0]) : _mm256_loadu_ps(p);
			v1 = E ? _mm256_maskload_ps(p + 1, m[1]) : _mm256_loadu_ps(p + 1);
			v2 = E ? _mm256_maskload_ps(p + 2, m[2]) : _mm256_loadu_ps(p + 2);
		} else {
			__m256 a = E ? _mm256_maskload_ps(p, m[0]) : _mm256_loadu_ps(p);
			__m256 c = E ? _mm256_maskload_ps(p + 8, m[1]) : _mm256_loadu_ps(p + 8);
			__m256 a2 = E ? _mm256_maskload_ps(p + 2, m[2]) : _mm256_loadu_ps(p + 2);
			__m256 c2 = E ? _mm256_maskload_ps(p + 10, m[3]) : _mm256_loadu_ps(p + 10);
			v0 = _mm256_shuffle_ps(a, c, 0x88);
			v1 = _mm256_shuffle_ps(a, c, 0xdd);
			v2 = _mm256_shuffle_ps(a2, c2, 0x88);
		}
#pragma GCC unroll 4
		for (int j = 0; j < R; j++) {
			int kh = t - S * j;
			if (kh < 0 || kh > 2)
				continue;
			acc[j] = _mm256_fmadd_ps(wv[3 * kh], v0, acc[j]);
			acc[j] = _mm256_fmadd_ps(wv[3 * kh + 1], v1, acc[j]);
			acc[j] = _mm256_fmadd_ps(wv[3 * kh + 2], v2, acc[j]);
		}
	}
	for (int j = 0; j < R && S == 2; j++) /* lanes 0 1 4 5 2 3 6 7 back in order */
		acc[j] = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(acc[j]), 0xd8));
}

/* R output rows, every column vector: those whose loads lie inside the
 * image row (columns [0, n)) without masks. */
DW3_TARGET static inline __attribute__((always_inline)) void
dw3_drows(const int R, const int S, const float *const *r, const __m256 *wv, __m256 b, float *y, int64_t ow,
	  int64_t p, int64_t n, int last)
{
	const int64_t span = S == 1 ? 10 : 18; /* columns a vector's loads cover */

	for (int64_t o = 0; o < ow; o += 8) {
		__m256 acc[DW3_R];
		int64_t base = o * S - p;
		if (base >= 0 && base + span <= n) {
			dw3_col(R, S, 0, r, wv, b, base, NULL, acc);
		} else {
			__m256i m[4];
			for (int k = 0; k < 4; k++)
				m[k] = dw3_in(base + (S == 1 ? k : (k & 1) * 8 + (k & 2)), n);
			dw3_col(R, S, 1, r, wv, b, base, m, acc);
		}
		dw3_put(R, acc, y, ow, ow, o, last);
	}
}

#define DW3_DCASE(R)                                                                                  \
	case R:                                                                                        \
		if (s == 1)                                                                            \
			dw3_drows(R, 1, r, wv, b, y, ow, p, n, last);                                  \
		else                                                                                   \
			dw3_drows(R, 2, r, wv, b, y, ow, p, n, last);                                  \
		break;

DW3_TARGET static void dw3_dstep(int rows, int64_t s, const float *const *r, const float *w, float bias, float *y,
				 int64_t ow, int64_t p, int64_t n, int last)
{
	__m256 wv[9], b = _mm256_set1_ps(bias);

	for (int t = 0; t < 9; t++)
		wv[t] = _mm256_broadcast_ss(w + t);
	switch (rows) {
		DW3_DCASE(1)
		DW3_DCASE(2)
		DW3_DCASE(3)
		DW3_DCASE(4)
	default:
		break;
	}
}

/* With AVX-512 where it runs: the columns whose loads lie inside the row
 * sixteen outputs at a time (at stride 2 each tap column one two-source
 * permute of the loaded columns, vpermt2ps, where AVX2 takes two shuffles
 * per sixteen and the final lane reorder), the rest as above.  The same
 * chains, so the same bits.  (All columns so, the ends by masked loads
 * and stores, ran 20% slower: 56x56 planes 69 against 86 GFLOP/s.) */
#define DW3_T512 __attribute__((target("avx512f,avx2,fma")))

/* Outputs o .. o + 15 of R rows, their loads inside the image row. */
DW3_T512 static inline __attribute__((always_inline)) void
dw3_col16(const int R, const int S, const float *const *r, const __m512 *wv, __m512 b, int64_t base, float *y,
	  int64_t ldy, int64_t o)
{
	const __m512i ie = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
	const __m512i io = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
	/* columns base + 2 + 2l: a2 from base + 2, c2 from base + 17 (so
	 * that nothing past base + 32 is read) */
	const __m512i i2 = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 17, 19, 21, 23, 25, 27, 29, 31);
	__m512 acc[DW3_R];

	for (int j = 0; j < R; j++)
		acc[j] = b;
#pragma GCC unroll 9
	for (int t = 0; t < S * (R - 1) + 3; t++) {
		const float *p = r[t] + base;
		__m512 v0, v1, v2;
		if (S == 1) {
			v0 = _mm512_loadu_ps(p);
			v1 = _mm512_loadu_ps(p + 1);
			v2 = _mm512_loadu_ps(p + 2);
		} else {
			__m512 a = _mm512_loadu_ps(p), c = _mm512_loadu_ps(p + 16);
			__m512 a2 = _mm512_loadu_ps(p + 2), c2 = _mm512_loadu_ps(p + 17);
			v0 = _mm512_permutex2var_ps(a, ie, c);
			v1 = _mm512_permutex2var_ps(a, io, c);
			v2 = _mm512_permutex2var_ps(a2, i2, c2);
		}
#pragma GCC unroll 4
		for (int j = 0; j < R; j++) {
			int kh = t - S * j;
			if (kh < 0 || kh > 2)
				continue;
			acc[j] = _mm512_fmadd_ps(wv[3 * kh], v0, acc[j]);
			acc[j] = _mm512_fmadd_ps(wv[3 * kh + 1], v1, acc[j]);
			acc[j] = _mm512_fmadd_ps(wv[3 * kh + 2], v2, acc[j]);
		}
	}
	for (int j = 0; j < R; j++)
		_mm512_storeu_ps(y + j * ldy + o, acc[j]);
}

DW3_T512 static inline __attribute__((always_inline)) void
dw3_drows512(const int R, const int S, const float *const *r, const __m256 *wv, __m256 b, const __m512 *wz,
	     __m512 bz, float *y, int64_t ow, int64_t p, int64_t n, int last)
{
	const int64_t span = S == 1 ? 18 : 33; /* columns a vector's loads cover */

	for (int64_t o = 0; o < ow;) {
		int64_t base = o * S - p;
		__m256 acc[DW3_R];
		if (o + 16 <= ow && base >= 0 && base + span <= n) {
			dw3_col16(R, S, r, wz, bz, base, y, ow, o);
			o += 16;
			continue;
		}
		if (base >= 0 && base + (S == 1 ? 10 : 18) <= n) {
			dw3_col(R, S, 0, r, wv, b, base, NULL, acc);
		} else {
			__m256i m[4];
			for (int k = 0; k < 4; k++)
				m[k] = dw3_in(base + (S == 1 ? k : (k & 1) * 8 + (k & 2)), n);
			dw3_col(R, S, 1, r, wv, b, base, m, acc);
		}
		dw3_put(R, acc, y, ow, ow, o, last);
		o += 8;
	}
}

#define DW3_ZCASE(R)                                                                                  \
	case R:                                                                                        \
		if (s == 1)                                                                            \
			dw3_drows512(R, 1, r, wv, b, wz, bz, y, ow, p, n, last);                       \
		else                                                                                   \
			dw3_drows512(R, 2, r, wv, b, wz, bz, y, ow, p, n, last);                       \
		break;

DW3_T512 static void dw3_dstep512(int rows, int64_t s, const float *const *r, const float *w, float bias, float *y,
				  int64_t ow, int64_t p, int64_t n, int last)
{
	__m256 wv[9], b = _mm256_set1_ps(bias);
	__m512 wz[9], bz = _mm512_set1_ps(bias);

	for (int t = 0; t < 9; t++)
		wv[t] = _mm256_broadcast_ss(w + t), wz[t] = _mm512_set1_ps(w[t]);
	switch (rows) {
		DW3_ZCASE(1)
		DW3_ZCASE(2)
		DW3_ZCASE(3)
		DW3_ZCASE(4)
	default:
		break;
	}
}

/* hp_dw3_plane without the ring (no clip): the zero row is the scratch's. */
static void dw3_direct(const struct hp_colgeom *g, const float *x, const float *w, float bias, float *y,
		       const float *zero)
{
	int64_t st = g->stride[1], oh_n = g->grid[1], n = g->img[2];
	int avx512 = hp_cpu_avx512_fma();

	for (int64_t oh = 0; oh < oh_n; oh += DW3_R) {
		int rows = (int)(oh_n - oh < DW3_R ? oh_n - oh : DW3_R);
		const float *r[2 * (DW3_R - 1) + 3];
		for (int t = 0; t < st * (rows - 1) + 3; t++) {
			int64_t ih = oh * st - g->pad[1] + t;
			r[t] = ih < 0 || ih >= g->img[1] ? zero : x + ih * n;
		}
		if (avx512)
			dw3_dstep512(rows, st, r, w, bias, y + oh * g->grid[2], g->grid[2], g->pad[2], n, oh + rows == oh_n);
		else
			dw3_dstep(rows, st, r, w, bias, y + oh * g->grid[2], g->grid[2], g->pad[2], n, oh + rows == oh_n);
	}
}

/* ---- the data gradient at stride 2, rows of dX as vectors ----
 * dX element (i, j) takes the taps (kh, kw) whose dY position
 * ((i + p - kh) / 2, (j + q - kw) / 2) is whole, in (kh, kw) order, those
 * outside dY as w * 0 (conv_dwc.c's chain, so the same bits).  Sixteen
 * columns of a dX row at a time: the eight whose j + q is even take taps
 * kw = 0 and 2 from dY columns c + l and c + l - 1, the eight others tap
 * kw = 1 from one of those two vectors, so both come from two contiguous
 * loads of each dY row, and one interleave (four shuffles) makes the
 * sixteen columns; conv_dwc.c transposed dY's rows into channel lanes and
 * back (16 GFLOP/s on 112x112 planes). */

/* dX columns [j0, j0 + 16) of one row from dY rows y[k] (K of them, taps
 * kh[k]; NULL: outside dY), eo: whether j0 + q is odd; E: dY columns by
 * masks m[2] (outside [0, gw) as 0). */
DW3_TARGET static inline __attribute__((always_inline)) void
dw3_dcols(const int K, const int E, const float *const *y, const int *kh, const __m256 *wv, int64_t c, int eo,
	  const __m256i *m, __m256 *lo, __m256 *hi)
{
	__m256 e = _mm256_setzero_ps(), o = _mm256_setzero_ps(), z = _mm256_setzero_ps();

	for (int k = 0; k < K; k++) {
		__m256 a = y[k] ? (E ? _mm256_maskload_ps(y[k] + c, m[0]) : _mm256_loadu_ps(y[k] + c)) : z;
		__m256 b = y[k] ? (E ? _mm256_maskload_ps(y[k] + c - 1, m[1]) : _mm256_loadu_ps(y[k] + c - 1)) : z;
		const __m256 *w = wv + 3 * kh[k];
		e = _mm256_fmadd_ps(w[0], a, e);
		e = _mm256_fmadd_ps(w[2], b, e);
		o = _mm256_fmadd_ps(w[1], eo ? b : a, o);
	}
	{
		__m256 f = eo ? o : e, s = eo ? e : o; /* column j0 first */
		__m256 l = _mm256_unpacklo_ps(f, s), h = _mm256_unpackhi_ps(f, s);
		*lo = _mm256_permute2f128_ps(l, h, 0x20);
		*hi = _mm256_permute2f128_ps(l, h, 0x31);
	}
}

/* The 8 floats v to q[0, n) (n < 8: the rest of q untouched). */
DW3_TARGET static inline void dw3_store_n(float *q, __m256 v, int64_t n)
{
	if (n >= 8)
		_mm256_storeu_ps(q, v);
	else if (n > 0)
		_mm256_maskstore_ps(q, dw3_mask(n), v);
}

DW3_TARGET static inline __attribute__((always_inline)) void
dw3_drow(const int K, const float *const *y, const int *kh, const __m256 *wv, float *dx, int64_t iw, int64_t gw,
	 int64_t q)
{
	for (int64_t j0 = 0; j0 < iw; j0 += 16) {
		int64_t c = (j0 + q + 1) >> 1; /* dY column of tap kw = 0 at column j0 or j0 + 1 */
		int eo = (int)((j0 + q) & 1);
		__m256 lo, hi;
		if (c - 1 >= 0 && c + 8 <= gw) {
			dw3_dcols(K, 0, y, kh, wv, c, eo, NULL, &lo, &hi);
		} else {
			__m256i m[2] = { dw3_in(c, gw), dw3_in(c - 1, gw) };
			dw3_dcols(K, 1, y, kh, wv, c, eo, m, &lo, &hi);
		}
		dw3_store_n(dx + j0, lo, iw - j0);
		dw3_store_n(dx + j0 + 8, hi, iw - j0 - 8);
	}
}

/* dX columns [j0, j0 + 32) with AVX-512 (dY columns c - 1 .. c + 15
 * inside the row): the interleave two permutes per 32 columns. */
DW3_T512 static inline __attribute__((always_inline)) void
dw3_dcols32(const int K, const float *const *y, const int *kh, const __m512 *wz, int64_t c, int eo, float *dx)
{
	const __m512i il = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
	const __m512i ih = _mm512_setr_epi32(8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31);
	__m512 e = _mm512_setzero_ps(), o = _mm512_setzero_ps(), z = _mm512_setzero_ps();

	for (int k = 0; k < K; k++) {
		__m512 a = y[k] ? _mm512_loadu_ps(y[k] + c) : z, b = y[k] ? _mm512_loadu_ps(y[k] + c - 1) : z;
		const __m512 *w = wz + 3 * kh[k];
		e = _mm512_fmadd_ps(w[0], a, e);
		e = _mm512_fmadd_ps(w[2], b, e);
		o = _mm512_fmadd_ps(w[1], eo ? b : a, o);
	}
	{
		__m512 f = eo ? o : e, s = eo ? e : o; /* column j0 first */
		_mm512_storeu_ps(dx, _mm512_permutex2var_ps(f, il, s));
		_mm512_storeu_ps(dx + 16, _mm512_permutex2var_ps(f, ih, s));
	}
}

DW3_T512 static inline __attribute__((always_inline)) void
dw3_drow512(const int K, const float *const *y, const int *kh, const __m256 *wv, const __m512 *wz, float *dx,
	    int64_t iw, int64_t gw, int64_t q)
{
	for (int64_t j0 = 0; j0 < iw;) {
		int64_t c = (j0 + q + 1) >> 1;
		int eo = (int)((j0 + q) & 1);
		__m256 lo, hi;
		if (j0 + 32 <= iw && c - 1 >= 0 && c + 16 <= gw) {
			dw3_dcols32(K, y, kh, wz, c, eo, dx + j0);
			j0 += 32;
			continue;
		}
		if (c - 1 >= 0 && c + 8 <= gw) {
			dw3_dcols(K, 0, y, kh, wv, c, eo, NULL, &lo, &hi);
		} else {
			__m256i m[2] = { dw3_in(c, gw), dw3_in(c - 1, gw) };
			dw3_dcols(K, 1, y, kh, wv, c, eo, m, &lo, &hi);
		}
		dw3_store_n(dx + j0, lo, iw - j0);
		dw3_store_n(dx + j0 + 8, hi, iw - j0 - 8);
		j0 += 16;
	}
}

DW3_T512 static void dw3_data_plane512(const struct hp_colgeom *g, const float *dy, const float *w, float *dx)
{
	int64_t iw = g->img[2], gw = g->grid[2];
	__m256 wv[9];
	__m512 wz[9];

	for (int t = 0; t < 9; t++)
		wv[t] = _mm256_broadcast_ss(w + t), wz[t] = _mm512_set1_ps(w[t]);
	for (int64_t i = 0; i < g->img[1]; i++) {
		const float *y[2];
		int kh[2], k = 0;
		for (int t = 0; t < 3; t++) {
			int64_t a = i + g->pad[1] - t;
			if (a & 1)
				continue;
			kh[k] = t;
			y[k++] = a < 0 || a / 2 >= g->grid[1] ? NULL : dy + a / 2 * gw;
		}
		if (k == 1)
			dw3_drow512(1, y, kh, wv, wz, dx + i * iw, iw, gw, g->pad[2]);
		else
			dw3_drow512(2, y, kh, wv, wz, dx + i * iw, iw, gw, g->pad[2]);
	}
}

int hp_dw3_data_eligible(const struct hp_colgeom *g)
{
	return hp_dw3_eligible(g) && g->stride[1] == 2 && g->pad[2] >= 0;
}

DW3_TARGET void hp_dw3_data_plane(const struct hp_colgeom *g, const float *dy, const float *w, float *dx)
{
	int64_t iw = g->img[2], gw = g->grid[2];
	__m256 wv[9];

	if (iw >= 48 && hp_cpu_avx512_fma()) { /* 14-wide rows ran 15% slower so */
		dw3_data_plane512(g, dy, w, dx);
		return;
	}
	for (int t = 0; t < 9; t++)
		wv[t] = _mm256_broadcast_ss(w + t);
	for (int64_t i = 0; i < g->img[1]; i++) {
		const float *y[2];
		int kh[2], k = 0;
		for (int t = 0; t < 3; t++) {
			int64_t a = i + g->pad[1] - t;
			if (a & 1)
				continue;
			kh[k] = t;
			y[k++] = a < 0 || a / 2 >= g->grid[1] ? NULL : dy + a / 2 * gw;
		}
		if (k == 1)
			dw3_drow(1, y, kh, wv, dx + i * iw, iw, gw, g->pad[2]);
		else
			dw3_drow(2, y, kh, wv, dx + i * iw, iw, gw, g->pad[2]);
	}
}

/* The padded row of image row ih (a zero row outside the image), from the
 * ring: tags[] holds which image row each slot has. */
static const float *dw3_get(const struct hp_colgeom *g, const float *x, int64_t ih, float *ring, int64_t *tags,
			    const float *zero, const float *clip)
{
	int64_t wd = dw3_width(g), s = ih % DW3_SLOTS;

	if (ih < 0 || ih >= g->img[1])
		return zero;
	if (tags[s] != ih) {
		dw3_fill(g, x + ih * g->img[2], ring + s * wd, clip);
		tags[s] = ih;
	}
	return ring + s * wd;
}

void hp_dw3_init(const struct hp_colgeom *g, float *scratch)
{
	memset(scratch + DW3_SLOTS * dw3_width(g), 0, (size_t)dw3_width(g) * sizeof(float));
}

void hp_dw3_plane(const struct hp_colgeom *g, const float *x, const float *w, float bias, float *y, float *scratch,
		  const float *clip)
{
	int64_t wd = dw3_width(g), tags[DW3_SLOTS], st = g->stride[1], oh_n = g->grid[1];
	const float *zero = scratch + DW3_SLOTS * wd;

	if (!clip) {
		dw3_direct(g, x, w, bias, y, zero);
		return;
	}
	for (int i = 0; i < DW3_SLOTS; i++)
		tags[i] = -1;
	for (int64_t oh = 0; oh < oh_n; oh += DW3_R) {
		int rows = (int)(oh_n - oh < DW3_R ? oh_n - oh : DW3_R);
		const float *r[2 * (DW3_R - 1) + 3];
		for (int t = 0; t < st * (rows - 1) + 3; t++)
			r[t] = dw3_get(g, x, oh * st - g->pad[1] + t, scratch, tags, zero, clip);
		dw3_step(rows, st, r, w, bias, y + oh * g->grid[2], g->grid[2], wd / 2, oh + rows == oh_n);
	}
}
#else
int hp_dw3_data_eligible(const struct hp_colgeom *g)
{
	(void)g;
	return 0;
}

void hp_dw3_data_plane(const struct hp_colgeom *g, const float *dy, const float *w, float *dx)
{
	(void)g, (void)dy, (void)w, (void)dx;
}

void hp_dw3_init(const struct hp_colgeom *g, float *scratch)
{
	(void)g, (void)scratch;
}

void hp_dw3_plane(const struct hp_colgeom *g, const float *x, const float *w, float bias, float *y, float *scratch,
		  const float *clip)
{
	(void)g, (void)x, (void)w, (void)bias, (void)y, (void)scratch, (void)clip;
}
#endif
