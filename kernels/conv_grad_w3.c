/* The weight gradient of a 2-D stride-1 convolution with a narrow window
 * (width <= 3: the 3x3 convolutions of U-Nets and ResNets) as direct dot
 * products over each batch item's plane, with AVX2+FMA.
 *
 * Why: through im2col or a padded slab, ConvGradFilter is an sgemm of
 * cin*kvol x cout outputs over a K of a tile's positions, tall and thin
 * (16..128 columns), which OpenBLAS packs per call; on the 2-D U-Net it
 * was the largest kernel of a training step.  Here an item's plane of one
 * input channel is copied once into a zero-padded buffer, and for each
 * kernel row 4 output channels x the window's columns (12 sums in
 * registers) run over every output position: per 8 positions 4 loads of
 * dY and 3 of X feed 12 fused multiply-adds.
 *
 * Every element of dW is one running sum in a fixed order, as
 * conv_grad.c's contract asks: from the running sum of the bands after
 * this one (or zero), the batch items from the last to the first, each
 * item's part summed in 8 float lanes over (rows, 8-column groups) in
 * order and the lanes added in one fixed tree.  Items are the units of
 * this path (the band axis is the batch), so a band of items adds what
 * the whole node adds, and no thread count or split changes a bit. */
#include <stdint.h>
#include <string.h>

#include "kernels/conv_impl.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define W3_X86 1
#define W3_TARGET __attribute__((target("avx2,fma")))
#endif

#define W3_MB 4 /* output channels per task */

int hp_w3_eligible(int nd, const int64_t *big, const int64_t *small, const int64_t *k, const int64_t *s,
		   const int64_t *d, int64_t group, int whole_items)
{
	if (!hp_dot_available() || !whole_items || group != 1 || nd != 2 || k[0] != 1 || big[0] != 1)
		return 0;
	/* rows of 64 and more: below, the plane's copy and the sums' ends
	 * weigh more, and the sgemm paths were faster (32x32 and 16x16 planes
	 * of 64 channels: 45 against 60 GF/s; 128x128 of 16 channels: 64
	 * against 39, 64x64 of 32: 61 against 50; hpdlf-bench-conv-libs) */
	if (k[2] > 3 || k[1] * k[2] < 2 || small[2] < 64)
		return 0;
	return s[1] == 1 && s[2] == 1 && d[1] == 1 && d[2] == 1;
}

/* Padded row length: the window's columns to the left, the row, and room
 * for the last 8-column group's widest shift. */
static int64_t w3_ldp(const struct hp_w3 *w)
{
	return (w->ow + 7) / 8 * 8 + w->kw + 8;
}

size_t hp_w3_workspace(const struct hp_w3 *w, int threads)
{
	return (size_t)threads * (size_t)(w->ih * w3_ldp(w)) * sizeof(float);
}

struct w3_run {
	const struct hp_w3 *w;
	const float *dy, *x, *acc;
	float *dw, *ws;
};

/* Plane ci of item b into buf: row i at buf + i * ldp, X's column c at
 * column c + pw, zeros around. */
static void w3_pad(const struct hp_w3 *w, const float *x, float *buf)
{
	int64_t ldp = w3_ldp(w);

	memset(buf, 0, (size_t)(w->ih * ldp) * sizeof *buf);
	for (int64_t i = 0; i < w->ih; i++)
		memcpy(buf + i * ldp + w->pw, x + i * w->iw, (size_t)w->iw * sizeof *x);
}

#ifdef W3_X86
static const int32_t w3_mask_src[16] = { -1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0 };

W3_TARGET static float w3_hsum(__m256 v)
{
	__m128 lo = _mm256_castps256_ps128(v), hi = _mm256_extractf128_ps(v, 1), s = _mm_add_ps(lo, hi);

	s = _mm_add_ps(s, _mm_movehl_ps(s, s));
	s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
	return _mm_cvtss_f32(s);
}

/* part[m][kw] = sum over the output rows whose input row is valid for
 * kernel row kh of dY[m] (mb rows, stride svol) times the padded plane
 * shifted by kw, for kw < nk (<= 3). */
W3_TARGET static inline __attribute__((always_inline)) void w3_row(const struct hp_w3 *w, const float *dy, const int mb,
								 const float *buf, int64_t kh, float part[W3_MB][3])
{
	__m256 acc[W3_MB][3];
	int64_t ldp = w3_ldp(w), oh0 = w->ph - kh, oh1 = w->ih + w->ph - kh, full = w->ow / 8 * 8;
	__m256i tail = _mm256_loadu_si256((const __m256i *)(w3_mask_src + 8 - (w->ow - full)));
	int nk = (int)w->kw;

	oh0 = oh0 > 0 ? oh0 : 0;
	oh1 = oh1 < w->oh ? oh1 : w->oh;
	for (int m = 0; m < W3_MB; m++)
		for (int k = 0; k < 3; k++)
			acc[m][k] = _mm256_setzero_ps();
	for (int64_t oh = oh0; oh < oh1; oh++) {
		const float *xr = buf + (oh + kh - w->ph) * ldp, *dr = dy + oh * w->ow;
		int64_t c = 0;
		for (; c < full; c += 8) {
			__m256 x0 = _mm256_loadu_ps(xr + c), x1 = _mm256_loadu_ps(xr + c + 1), x2 = _mm256_loadu_ps(xr + c + 2);
			for (int m = 0; m < mb; m++) {
				__m256 g = _mm256_loadu_ps(dr + m * w->svol + c);
				acc[m][0] = _mm256_fmadd_ps(g, x0, acc[m][0]);
				acc[m][1] = _mm256_fmadd_ps(g, x1, acc[m][1]);
				acc[m][2] = _mm256_fmadd_ps(g, x2, acc[m][2]);
			}
		}
		if (c < w->ow) { /* the row's last group, masked (the padded row is read within its zeros) */
			__m256 x0 = _mm256_maskload_ps(xr + c, tail), x1 = _mm256_maskload_ps(xr + c + 1, tail);
			__m256 x2 = _mm256_maskload_ps(xr + c + 2, tail);
			for (int m = 0; m < mb; m++) {
				__m256 g = _mm256_maskload_ps(dr + m * w->svol + c, tail);
				acc[m][0] = _mm256_fmadd_ps(g, x0, acc[m][0]);
				acc[m][1] = _mm256_fmadd_ps(g, x1, acc[m][1]);
				acc[m][2] = _mm256_fmadd_ps(g, x2, acc[m][2]);
			}
		}
	}
	for (int m = 0; m < mb; m++)
		for (int k = 0; k < nk; k++)
			part[m][k] = w3_hsum(acc[m][k]);
}

/* w3_row with mb a constant, so that the sums stay in registers. */
W3_TARGET static void w3_row_any(const struct hp_w3 *w, const float *dy, int mb, const float *buf, int64_t kh,
				 float part[W3_MB][3])
{
	switch (mb) {
	case 4: w3_row(w, dy, 4, buf, kh, part); break;
	case 3: w3_row(w, dy, 3, buf, kh, part); break;
	case 2: w3_row(w, dy, 2, buf, kh, part); break;
	default: w3_row(w, dy, 1, buf, kh, part); break;
	}
}

/* Tasks [t0, t1) of (block of W3_MB output channels) x (input channel). */
W3_TARGET static void w3_tasks(void *arg, int64_t t0, int64_t t1, int tid)
{
	const struct w3_run *r = arg;
	const struct hp_w3 *w = r->w;
	int64_t mblocks = (w->cout + W3_MB - 1) / W3_MB, kvol = w->kh * w->kw;
	float *buf = r->ws + (size_t)tid * (size_t)(w->ih * w3_ldp(w));

	for (int64_t t = t0; t < t1; t++) {
		int64_t m0 = t % mblocks * W3_MB, ci = t / mblocks;
		int mb = (int)(w->cout - m0 < W3_MB ? w->cout - m0 : W3_MB);
		for (int m = 0; m < mb; m++) /* the running sum: input 2, else zeros */
			for (int64_t q = 0; q < kvol; q++) {
				int64_t o = ((m0 + m) * w->cin + ci) * kvol + q;
				r->dw[o] = r->acc ? r->acc[o] : 0.0f;
			}
		for (int64_t b = w->batch - 1; b >= 0; b--) {
			w3_pad(w, r->x + (b * w->cin + ci) * w->ih * w->iw, buf);
			for (int64_t kh = 0; kh < w->kh; kh++) {
				float part[W3_MB][3];
				w3_row_any(w, r->dy + (b * w->cout + m0) * w->svol, mb, buf, kh, part);
				for (int m = 0; m < mb; m++)
					for (int64_t kw = 0; kw < w->kw; kw++)
						r->dw[((m0 + m) * w->cin + ci) * kvol + kh * w->kw + kw] += part[m][kw];
			}
		}
	}
}
#endif

void hp_w3_filter(const struct hp_w3 *w, const float *dy, const float *x, const float *acc, float *dw, float *ws,
		  struct hp_pool *pool)
{
#ifdef W3_X86
	struct w3_run r = { .w = w, .dy = dy, .x = x, .acc = acc, .dw = dw, .ws = ws };
	int saved, threads = hp_conv_threads_enter(pool, &saved);

	threads = threads < w->threads ? threads : w->threads;
	hp_conv_parallel(pool, threads, (w->cout + W3_MB - 1) / W3_MB * w->cin, w3_tasks, &r);
	hp_conv_threads_leave(saved);
#else
	(void)w, (void)dy, (void)x, (void)acc, (void)dw, (void)ws, (void)pool;
#endif
}
