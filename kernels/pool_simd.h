/* SIMD passes of pooling.c (pool_simd.c): AVX-512F, else AVX2, else none.
 * A pass returns how much it did (0: not at this level) and the caller
 * does the rest with its scalar loop.  Every pass performs the operations
 * of that scalar loop in its order, so results are bitwise the scalar
 * code's.  Max: m = v > m ? v : m from -inf over the taps, w tap
 * outermost (the row path: column maxima first), so NaN is skipped and
 * of equal values (-0, +0) the first stays; the order being a fold of an
 * associative "first maximum", any bracketing of it gives the same bits,
 * and a padding tap read as -inf selects as a skipped one.  Average:
 * double column sums, then the columns added to 0 in order, one division
 * (a padding tap read as 0 adds nothing: the sum starts at +0). */
#ifndef HPDLF_KERNELS_POOL_SIMD_H
#define HPDLF_KERNELS_POOL_SIMD_H

#include <stdint.h>

/* 2 AVX-512F, 1 AVX2, 0 neither; at most the cap that tests set. */
int hp_pool_isa(void);
/* Tests: cap the level (0 scalar only, 1 AVX2 at most, 2 all). */
void hp_pool_test_isa(int cap);

/* b[i] = r[i] > b[i] ? r[i] : b[i] (first: b[i] = -inf); elements done. */
int64_t hp_pool_vmax_f32(float *b, const float *r, int64_t n, int first);
/* y[j] = fold over c < k of m = v > m ? v : m from -inf, v = b[s*j + c*dl],
 * for j < n, s 1 or 2; outputs done.  b must be readable 48 elements past
 * the last tap (whole vectors are loaded for a last partial one). */
int64_t hp_pool_hmax_f32(const float *b, float *y, int64_t n, int s, int k, int dl);
/* One plane of float32 MaxPool with w stride 1 or 2 (AVX-512F only; 0:
 * not done): per output row, the column maxima of its valid window rows
 * (rows in order, d then h) over the row's window extent, -inf in the
 * padding, then the w taps in order over those, all by vectors.  lo/hi:
 * each output index's valid tap range in d and h (pooling.c's tables). */
#define HP_POOL_PLANE_BUF 2048
#define HP_POOL_PLANE_ROWS 64
struct hp_pool_plane {
	int64_t in[3], out[3], k[3], s[3], dl[3], pb[3];
	const int64_t *lo[2], *hi[2];
	/* average only: count_include_pad, taps inside the padded extent in
	 * d and h, and each output column's divisor factor (w taps counted) */
	int include_pad;
	const int64_t *cpad[2];
	const double *hcnt;
};
int hp_pool_plane_max_f32(const struct hp_pool_plane *g, const float *x, float *y);
/* The same for float32 AveragePool: double column sums of the valid rows
 * (the first as is, then added in order; 0 in the padding), the w taps
 * added to 0 in order, divided by rows * hcnt[ow] (0 where that is 0):
 * the row path's operations, the padding's zeros adding nothing. */
int hp_pool_plane_avg_f32(const struct hp_pool_plane *g, const float *x, float *y);

/* Stride-1 MaxPool whose output planes are the input planes' size, over
 * the flat outputs [i0, i1) of all planes (AVX-512F only; 0: not done):
 * y[i] = fold over taps t < ntaps of m = v > m ? v : m from -inf, with
 * v = x[i + off[t]] where bit i % 16 of mask[t * per + i / 16 % per] is
 * set, the tap skipped otherwise (the masks repeat every per chunks of
 * 16).  A skipped lane keeps m, as skipping does. */
int hp_pool_fmax_f32(const float *x, float *y, int64_t i0, int64_t i1, const int32_t *off, const uint16_t *mask,
		     int64_t ntaps, int64_t per);
/* MaxPool's gradient over `planes` consecutive 2-D planes (AVX-512F, w stride 1 or 2; 0:
 * not done), as pool_grad.c's maxpool_plane_2d: per output in order, the
 * first valid tap in row-major order that beats all before it (greater,
 * or NaN over a number) gets dx[tap] += dy[output].  The argmax of 16
 * outputs is found by vectors, the additions stay scalar and in order. */
struct hp_pool_grad2d {
	int64_t H, W, OH, OW, kh, kw, sh, sw, ph, pw, dh, dw;
};
int hp_pool_grad_max2d_f32(const struct hp_pool_grad2d *g, const float *x, const float *dy, float *dx,
			   int64_t planes);
/* The same for stride-1 windows with dY the size of X, over the flat
 * outputs [i0, i1) of all planes, taps and masks as hp_pool_fmax_f32's
 * but in row-major tap order; dx[i + off[tap]] += dy[i] in order of i. */
int hp_pool_grad_flat_f32(const float *x, const float *dy, float *dx, int64_t i0, int64_t i1, const int32_t *off,
			  const uint16_t *mask, int64_t ntaps, int64_t per);
/* 2x2 stride-2 MaxPool of rows r0, r1: y[j] = max of r0[2j], r0[2j+1],
 * r1[2j], r1[2j+1] in that order from -inf; outputs done. */
int64_t hp_pool_max2_rows(const float *r0, const float *r1, float *y, int64_t n);
/* GlobalAveragePool over np consecutive planes of n floats (AVX2; 0: not
 * done): y[p] = (float)(s / n), s the double sum of plane p's elements
 * added to 0 one by one in order, as pooling.c's scalar loop adds them;
 * planes done (whole groups of 8, the caller does the rest). */
int64_t hp_pool_gavg_f32(const float *x, float *y, int64_t np, int64_t n);

#endif
