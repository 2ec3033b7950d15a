/* Depthwise KxK forward, 2-D, K = 3, 5 or 7, stride 1 or 2, any dilation
 * (the geometries conv_dw3.c and conv_dwc.c do not take: 5x5 and 7x7
 * windows, dilated 3x3), with eight channels per register pass (AVX2 +
 * FMA): the lanes of a vector are eight output channels at one position.
 *
 * Why: conv_dw.c's generic rows add one tap of the window per pass over
 * an output row (25 or 49 loads and stores of every output), vectorized
 * only over whole vectors of a row: MnasNet, MobileNetV3 and
 * EfficientNet at small inputs (5x5 depthwise at 2x2 to 48x48 planes)
 * spent half their time there.  As in conv_dwc.c, a block of eight planes
 * is transposed once, row by row, into rows of [position][8 channels]
 * (zero positions for the padding), held in a ring of K * dil rows; a
 * step computes up to eight outputs of a row as eight independent chains,
 * every input vector of a window row loaded once for all the outputs
 * whose window holds it (undilated columns); each finished row is
 * transposed back to the planes eight positions at a time (the carry of
 * fewer than eight waits for the next row, so that even 2x2 planes are
 * whole vectors per block).
 *
 * Determinism: every output is the chain bias + w(0,0) x + ... of fused
 * multiply-adds in (kh, kw) order, taps in the padding included as w * 0
 * (read from the zero positions of the transposed rows).  The chain
 * depends on the weights and the output's own window alone, so the
 * block's lanes, the thread count and bands of rows or items (whose halo
 * rows are the same image rows, whose padding the same zeros) give the
 * whole node's bits.  These are not conv_dw.c's generic bits (it rounds
 * every product, skips the padding): hp_dw_forward takes this path for
 * every geometry hp_dwk_eligible() names, whatever the batch or a band's
 * rows, so in core and out of core agree.  The epilogue runs per plane
 * after the block (fused_epi.c's hp_epi_span, as conv_dw.c runs it). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/conv_impl.h"
#include "kernels/simd_tr16.h"
#include "kernels/fused_impl.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define DWK_X86 1
#define DWK_TARGET __attribute__((target("avx2,fma")))
#define DWK_INLINE __attribute__((always_inline)) inline
#endif

#define DWK_L 8        /* channels per block (the lanes) */
#define DWK_OB 8       /* outputs of a row per step (independent FMA chains) */
#define DWK_MAXK 7
#define DWK_MAXSPAN 32 /* ring slots at most: (K - 1) * dil + 1 rows */
#define DWK_UNITS_PER_THREAD 8

static int dwk_mode;

void hp_dwk_set_mode(int mode)
{
	dwk_mode = mode;
}

int hp_dwk_eligible(const struct hp_colgeom *g)
{
	int64_t k = g->k[1];

	if (dwk_mode < 0 || !hp_dot_available() || g->img[0] != 1 || g->k[0] != 1 || g->k[2] != k)
		return 0;
	if (k != 3 && k != 5 && k != 7)
		return 0;
	if (g->stride[1] != g->stride[2] || (g->stride[1] != 1 && g->stride[1] != 2))
		return 0;
	if (g->dil[1] < 1 || g->dil[2] < 1 || (k - 1) * g->dil[1] + 1 > DWK_MAXSPAN)
		return 0;
	return !hp_dw3_eligible(g); /* undilated 3x3: conv_dw3.c and conv_dwc.c */
}

#ifdef DWK_X86
/* Positions of a transposed input row: up to the last output's last tap,
 * whole vectors (the transposes go eight positions at a time). */
static int64_t dwk_width(const struct hp_colgeom *g)
{
	return ((g->grid[2] - 1) * g->stride[2] + (g->k[2] - 1) * g->dil[2] + 1 + 7) / 8 * 8;
}

static int64_t dwk_slots(const struct hp_colgeom *g)
{
	return (g->k[1] - 1) * g->dil[1] + 1;
}

/* Floats of a worker's scratch: the ring, a zero row, a row of outputs
 * with the carry (and a vector's slack for the last transposes). */
static size_t dwk_floats(const struct hp_colgeom *g)
{
	return (size_t)((dwk_slots(g) + 1) * dwk_width(g) * DWK_L + (g->grid[2] + 2 * DWK_L) * DWK_L);
}

struct dwk_run {
	const struct hp_dw *d;
	const float *x, *w, *b;
	float *y;
	int64_t blocks;          /* channel blocks per item */
	float *scratch;          /* dwk_floats() per thread, zero rows cleared */
	float *wp;               /* per block: W as [kvol][8], then the bias [8] (lanes past cout 0) */
};

/* The lanes l with column i - left + l in [0, n). */
DWK_TARGET static DWK_INLINE __m256i dwk_in(int64_t i, int64_t left, int64_t n)
{
	__m256i idx = _mm256_add_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7), _mm256_set1_epi32((int)(i - left)));

	return _mm256_andnot_si256(_mm256_cmpgt_epi32(_mm256_setzero_si256(), idx),
				   _mm256_cmpgt_epi32(_mm256_set1_epi32((int)n), idx));
}

/* r[i] becomes column i of the 8x8 matrix whose rows were r[0..8). */
DWK_TARGET static DWK_INLINE void dwk_transpose(__m256 r[8])
{
	hp_tr8_ps(r);
}

/* Image row ih of the block's nc planes (xs[l]) as a transposed row:
 * row[p][l] = plane l at column p - left, zeros outside (masked lanes are
 * not read); whole vectors inside the image by plain loads. */
DWK_TARGET static void dwk_fill(const struct hp_colgeom *g, const float *const *xs, int nc, int64_t ih, float *row)
{
	int64_t wd = dwk_width(g), left = g->pad[2], n = g->img[2];
	/* p >= left and p - left + 8 <= n, p a multiple of 8 */
	int64_t i0 = (left + 7) / 8 * 8, last = n + left - 8;
	int64_t i1 = nc == 8 && last >= i0 ? last / 8 * 8 + 8 : i0;

	for (int64_t p = 0; p < wd; p += 8) {
		__m256 v[8];
		if (p >= i0 && p < i1) {
			for (int l = 0; l < 8; l++)
				v[l] = _mm256_loadu_ps(xs[l] + ih * n + p - left);
		} else {
			__m256i in = dwk_in(p, left, n);
			for (int l = 0; l < 8; l++)
				v[l] = l < nc ? _mm256_maskload_ps(xs[l] + ih * n + p - left, in) : _mm256_setzero_ps();
		}
		dwk_transpose(v);
		for (int q = 0; q < 8; q++)
			_mm256_storeu_ps(row + (p + q) * DWK_L, v[q]);
	}
}

/* N outputs of a row from o0, stride S, K taps a row, undilated columns:
 * bias, then the taps in (kh, kw) order into out[o][8].  Each input
 * vector of a window row is loaded once and added to every output whose
 * window holds it; for one output they come in increasing kw. */
DWK_TARGET static DWK_INLINE void dwk_outs(const int N, const int K, const int S, const float *const *r,
					   const float *wt, __m256 b, int64_t o0, float *out)
{
	__m256 acc[DWK_OB];

#pragma GCC unroll 8
	for (int j = 0; j < N; j++)
		acc[j] = b;
	for (int kh = 0; kh < K; kh++) {
		const float *x = r[kh] + o0 * S * DWK_L;
#pragma GCC unroll 32
		for (int p = 0; p < S * (N - 1) + K; p++) {
			__m256 v = _mm256_loadu_ps(x + p * DWK_L);
#pragma GCC unroll 8
			for (int j = 0; j < N; j++) {
				int kw = p - S * j;
				if (kw >= 0 && kw < K)
					acc[j] = _mm256_fmadd_ps(_mm256_loadu_ps(wt + (kh * K + kw) * DWK_L), v, acc[j]);
			}
		}
	}
#pragma GCC unroll 8
	for (int j = 0; j < N; j++)
		_mm256_storeu_ps(out + (o0 + j) * DWK_L, acc[j]);
}

/* The same chains, any K, stride and column dilation (not unrolled). */
DWK_TARGET static DWK_INLINE void dwk_outs_d(const int N, int64_t k, int64_t s, int64_t dil, const float *const *r,
					     const float *wt, __m256 b, int64_t o0, float *out)
{
	__m256 acc[DWK_OB];

#pragma GCC unroll 8
	for (int j = 0; j < N; j++)
		acc[j] = b;
	for (int64_t kh = 0; kh < k; kh++)
		for (int64_t kw = 0; kw < k; kw++) {
			__m256 wv = _mm256_loadu_ps(wt + (kh * k + kw) * DWK_L);
#pragma GCC unroll 8
			for (int j = 0; j < N; j++)
				acc[j] = _mm256_fmadd_ps(wv, _mm256_loadu_ps(r[kh] + ((o0 + j) * s + kw * dil) * DWK_L),
							 acc[j]);
		}
#pragma GCC unroll 8
	for (int j = 0; j < N; j++)
		_mm256_storeu_ps(out + (o0 + j) * DWK_L, acc[j]);
}

/* A row's outputs by steps of 8, then 4, 2, 1. */
#define DWK_ROW(CALL)                                 \
	do {                                          \
		int64_t o0 = 0;                       \
		for (; o0 + 8 <= ow; o0 += 8)         \
			CALL(8);                      \
		if (ow - o0 >= 4) {                   \
			CALL(4);                      \
			o0 += 4;                      \
		}                                     \
		if (ow - o0 >= 2) {                   \
			CALL(2);                      \
			o0 += 2;                      \
		}                                     \
		if (ow - o0 >= 1)                     \
			CALL(1);                      \
	} while (0)

#define DWK_KS(K, S)                                                         \
	DWK_TARGET static void dwk_row_##K##_##S(int64_t ow, const float *const *r, const float *wt, __m256 b, \
						 float *out)                                                   \
	{                                                                                                      \
		DWK_ROW(DWK_CALL_##K##_##S);                                                                   \
	}
#define DWK_CALL_3_1(N) dwk_outs(N, 3, 1, r, wt, b, o0, out)
#define DWK_CALL_3_2(N) dwk_outs(N, 3, 2, r, wt, b, o0, out)
#define DWK_CALL_5_1(N) dwk_outs(N, 5, 1, r, wt, b, o0, out)
#define DWK_CALL_5_2(N) dwk_outs(N, 5, 2, r, wt, b, o0, out)
#define DWK_CALL_7_1(N) dwk_outs(N, 7, 1, r, wt, b, o0, out)
#define DWK_CALL_7_2(N) dwk_outs(N, 7, 2, r, wt, b, o0, out)
DWK_KS(3, 1)
DWK_KS(3, 2)
DWK_KS(5, 1)
DWK_KS(5, 2)
DWK_KS(7, 1)
DWK_KS(7, 2)

DWK_TARGET static void dwk_row_d(const struct hp_colgeom *g, const float *const *r, const float *wt, __m256 b,
				 float *out)
{
	int64_t ow = g->grid[2], k = g->k[2], s = g->stride[2], dil = g->dil[2];
#define DWK_CALL_D(N) dwk_outs_d(N, k, s, dil, r, wt, b, o0, out)
	DWK_ROW(DWK_CALL_D);
#undef DWK_CALL_D
}

/* One output row: out[o][8] for o < ow. */
DWK_TARGET static void dwk_row(const struct hp_colgeom *g, const float *const *r, const float *wt, __m256 b, float *out)
{
	int64_t ow = g->grid[2];

	if (g->dil[2] != 1) {
		dwk_row_d(g, r, wt, b, out);
		return;
	}
	switch (g->k[2] * 4 + g->stride[2]) {
	case 13: dwk_row_3_1(ow, r, wt, b, out); break;
	case 14: dwk_row_3_2(ow, r, wt, b, out); break;
	case 21: dwk_row_5_1(ow, r, wt, b, out); break;
	case 22: dwk_row_5_2(ow, r, wt, b, out); break;
	case 29: dwk_row_7_1(ow, r, wt, b, out); break;
	case 30: dwk_row_7_2(ow, r, wt, b, out); break;
	default: break;
	}
}

/* Transposed outputs out[q][8], q < cnt, back to the nc planes ys[l] at
 * positions q0 + q, eight at a time; a last partial vector lane by lane,
 * so nothing past a plane is written (the next may be another worker's). */
DWK_TARGET static void dwk_store(const float *out, int64_t cnt, int nc, float *const *ys, int64_t q0)
{
	for (int64_t q = 0; q < cnt; q += 8) {
		__m256 v[8];
		int64_t n = cnt - q;
		for (int i = 0; i < 8; i++)
			v[i] = _mm256_loadu_ps(out + (q + i) * DWK_L);
		dwk_transpose(v);
		for (int l = 0; l < nc; l++) {
			if (n >= 8) {
				_mm256_storeu_ps(ys[l] + q0 + q, v[l]);
			} else {
				float t[8];
				_mm256_storeu_ps(t, v[l]);
				for (int64_t i = 0; i < n; i++)
					ys[l][q0 + q + i] = t[i];
			}
		}
	}
}

/* The transposed row of image row ih (a zero row outside the image), from
 * the ring: tags[] holds which image row each slot has. */
static const float *dwk_get(const struct hp_colgeom *g, const float *const *xs, int nc, int64_t ih, float *ring,
			    int64_t *tags, const float *zero)
{
	int64_t wd = dwk_width(g) * DWK_L, s = ih % dwk_slots(g);

	if (ih < 0 || ih >= g->img[1])
		return zero;
	if (tags[s] != ih) {
		dwk_fill(g, xs, nc, ih, ring + s * wd);
		tags[s] = ih;
	}
	return ring + s * wd;
}

/* Output channels [m0, m0 + nc) of item n. */
DWK_TARGET static void dwk_block(const struct dwk_run *r, int64_t n, int64_t m0, int nc, float *scratch)
{
	const struct hp_dw *d = r->d;
	const struct hp_colgeom *g = &d->g;
	int64_t cout = d->cin * d->mult, wd = dwk_width(g) * DWK_L, slots = dwk_slots(g), kk = g->kvol;
	int64_t tags[DWK_MAXSPAN], ow = g->grid[2], carry = 0, done = 0;
	float *zero = scratch + slots * wd, *out = zero + wd;
	const float *xs[8], *wt = r->wp + m0 / DWK_L * (kk + 1) * DWK_L;
	float *ys[8];
	__m256 b = _mm256_loadu_ps(wt + kk * DWK_L);

	for (int l = 0; l < nc; l++) {
		int64_t m = m0 + l, c = m / d->mult;
		xs[l] = r->x + (n * d->cin + c) * (d->xstride ? d->xstride : g->img_vol);
		ys[l] = r->y + (n * cout + m) * g->grid_vol;
	}
	for (int i = 0; i < DWK_MAXSPAN; i++)
		tags[i] = -1;
	for (int64_t oh = 0; oh < g->grid[1]; oh++) {
		const float *rows[DWK_MAXK];
		int64_t f;
		for (int64_t kh = 0; kh < g->k[1]; kh++)
			rows[kh] = dwk_get(g, xs, nc, oh * g->stride[1] - g->pad[1] + kh * g->dil[1], scratch, tags,
					   zero);
		dwk_row(g, rows, wt, b, out + carry * DWK_L);
		carry += ow;
		f = oh + 1 == g->grid[1] ? carry : carry / 8 * 8; /* whole vectors, the plane's end */
		dwk_store(out, f, nc, ys, done);
		done += f;
		carry -= f;
		memmove(out, out + f * DWK_L, (size_t)(carry * DWK_L) * sizeof *out);
	}
	for (int l = 0; l < nc && d->epi; l++) /* the epilogue per plane, in cache */
		hp_epi_span(d->epi, r->y, d->addend, ys[l] - r->y, ys[l] - r->y + g->grid_vol);
}

/* Units are (item, block of output channels). */
static void dwk_range(void *arg, int64_t b, int64_t e, int tid)
{
	const struct dwk_run *r = arg;
	int64_t cout = r->d->cin * r->d->mult;
	float *scratch = r->scratch + (size_t)tid * dwk_floats(&r->d->g);

	for (int64_t i = b; i < e; i++) {
		int64_t n = i / r->blocks, m0 = i % r->blocks * DWK_L;
		dwk_block(r, n, m0, (int)(cout - m0 < DWK_L ? cout - m0 : DWK_L), scratch);
	}
}
#endif

/* A stride-1 dX as this path's forward (multiplier 1): dY as the image,
 * dX as the grid, pads (K - 1) dil - p, W mirrored (both axes), no bias,
 * as conv_dw.c's data_flip does it for the undilated 3x3: each dX element
 * 0 + its taps in mirrored (kh, kw) order of fused multiply-adds, those
 * outside dY as w * 0, so its bits depend on its own dY window alone and
 * bands of rows give the whole's.  0 where it does not apply. */
int hp_dwk_data_flip(const struct hp_dw *d, struct hp_dw *f)
{
	const struct hp_colgeom *g = &d->g;

	if (d->mult != 1 || g->img[0] != 1 || g->k[0] != 1 || g->stride[1] != 1 || g->stride[2] != 1 ||
	    g->pad[2] < 0 || g->pad[2] > (g->k[2] - 1) * g->dil[2])
		return 0;
	hp_dw_flip(d, f);
	return hp_dwk_eligible(&f->g);
}

int hp_dwk_forward(const struct hp_dw *d, const float *x, const float *w, const float *b, float *y,
		   struct hp_pool *pool)
{
#ifdef DWK_X86
	struct dwk_run r = { .d = d, .x = x, .w = w, .b = b, .y = y };
	int saved, threads;
	int64_t units, su, kk = d->g.kvol, cout = d->cin * d->mult;
	size_t one = dwk_floats(&d->g), wd = (size_t)(dwk_width(&d->g) * DWK_L);

	r.blocks = (cout + DWK_L - 1) / DWK_L;
	r.wp = malloc((size_t)(r.blocks * (kk + 1) * DWK_L) * sizeof(float));
	if (!r.wp)
		return -1;
	for (int64_t m = 0; m < r.blocks * DWK_L; m++) { /* the weights once per call, not per (item, block) */
		float *q = r.wp + m / DWK_L * (kk + 1) * DWK_L + m % DWK_L;
		for (int64_t t = 0; t < kk; t++)
			q[t * DWK_L] = m < cout ? w[m * kk + t] : 0.0f;
		q[kk * DWK_L] = m < cout && b ? b[m] : 0.0f;
	}
	threads = hp_conv_threads_enter(pool, &saved);
	units = d->batch * r.blocks;
	su = units / ((int64_t)threads * DWK_UNITS_PER_THREAD);
	r.scratch = malloc((size_t)threads * one * sizeof(float));
	if (!r.scratch) {
		free(r.wp);
		hp_conv_threads_leave(saved);
		return -1;
	}
	for (int t = 0; t < threads; t++) /* the zero row */
		memset(r.scratch + t * one + (size_t)dwk_slots(&d->g) * wd, 0, wd * sizeof(float));
	hp_conv_steal(pool, threads, units, su < 1 ? 1 : su, dwk_range, &r);
	free(r.scratch);
	free(r.wp);
	hp_conv_threads_leave(saved);
	return 0;
#else
	(void)d, (void)x, (void)w, (void)b, (void)y, (void)pool;
	return -1;
#endif
}
