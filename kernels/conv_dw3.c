/* Depthwise 3x3 forward, 2-D, stride 1 or 2 (MobileNet's), with AVX2 and
 * FMA: output rows as vectors of 8 columns, each output the chain
 * bias + w0 x0 + ... + w8 x8 of fused multiply-adds in (kh, kw) order,
 * taps in the padding included as w * 0.
 *
 * Why: conv_dw.c's rows vectorize only over whole vectors of a row, so
 * MobileNetV2's 14x14 and 7x7 planes ran scalar (4-8 GFLOP/s), and at
 * stride 2 the loads were strided.  Here every row is whole vectors, the
 * last one masked, and input rows are copied once each into a ring of
 * zero-padded rows (at stride 2 split into even and odd columns, so that
 * all three taps of a row are contiguous loads).
 *
 * Determinism: an output's chain depends on the weights and its nine
 * input values alone (zeros in the padding), so planes split among
 * workers and bands of rows or items (whose halo rows are the same image
 * rows, whose padding the same zeros) give the whole node's bits. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/conv_impl.h"

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
