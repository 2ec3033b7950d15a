/* Depthwise 3x3 forward at stride 1 (2-D, undilated) whose output rows are
 * as wide as the input's ("same" column pads: left + right = 2), with
 * sixteen positions of one channel's flattened plane in the zmm lanes
 * (AVX-512F + FMA): no transposes, no copies.
 *
 * Why: conv_dwc.c (and conv_dwk.c, conv_dwkz.c) put 8 or 16 channels in
 * the lanes and pay NCHW <-> channel-block transposes (a 16 x 16 one about
 * 70 multiply-adds' time by their reports, where a 3x3 window over 16
 * positions is 9); conv_dw3.c puts a row in the lanes, which wastes most
 * of them on rows of 7 or 14.  With Wo == W, output p = oh * W + ow reads input
 * p + (kh - pt) * W + (kw - pl) under tap (kh, kw): one displacement a tap
 * for every position, so sixteen consecutive outputs of the plane, across
 * rows, are one vector and a tap is one unaligned load from X in place.
 * The loads zero the lanes whose tap falls outside the image (masks per
 * vector and tap, made once per call): such a tap adds w * 0, as a
 * zero-padded plane would.  A 7x7 plane is four vectors (49 of 64 lanes),
 * 14x14 thirteen (196 of 208).  Four planes of four vectors make a step:
 * sixteen independent chains sharing each tap's mask.
 *
 * Measured and not taken (kernel alone, 1 thread, CPU time): copying each
 * plane into a padded buffer [Ho + 2][W + 2] instead of masking (the row
 * copies, stored across cache lines and read back at once, cost as much
 * as the taps); loading a window row once and taking its taps by lane
 * shifts, and eight lanes instead of sixteen (neither faster); 5x5 and 7x7
 * windows (conv_dwkz.c's sixteen-channel blocks load whole 64-byte
 * positions, aligned, where 15 of 16 tap loads here split a cache line,
 * and their transposes are spread over 25 or 49 taps); planes wider than
 * 22 (conv_dw3.c's rows share each load among four output rows).
 *
 * Determinism: a lane's chain is the output's chain of the other depthwise
 * 3x3 kernels, bias + w0 x0 + ... + w8 x8 of fused multiply-adds in
 * (kh, kw) order, taps outside the image as w * 0 (a zeroed lane, not a
 * skipped one: the same sign of zero, the same NaN from an infinite
 * weight); it depends on the weights and the output's own window alone,
 * so lanes, steps, thread counts and bands of rows (a band's halo rows are
 * image rows, its padding the same zeros) give conv_dw3.c's and
 * conv_dwc.c's bits.  Epilogues per step after its planes are stored
 * (hp_epi_span), while they are in cache. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/conv_impl.h"
#include "kernels/cpu.h"
#include "kernels/fused_impl.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define DWF_X86 1
#define DWF_TARGET __attribute__((target("avx512f,avx2,fma")))
#define DWF_INLINE __attribute__((always_inline)) inline
#endif

#define DWF_K 3  /* the window */
#define DWF_KK (DWF_K * DWF_K)
#define DWF_L 16 /* positions a vector */
#define DWF_Q 4  /* planes a step (they share each tap's masks) */
#define DWF_V 4  /* vectors of a plane a step */
#define DWF_UNITS_PER_THREAD 8
/* Output rows this wide (auto), kernel alone against what ran before
 * (conv_dwc.c's sixteen channels from packed W, transposed; from 24,
 * conv_dw3.c's rows): 7 to 22 1.1-1.5x (7x7 1.09, 14x14 1.14, 12x12 1.5,
 * 18x18 1.42, 22x22 1.15); 3x3 planes slower (9 of 16 lanes), 6x6 level,
 * 24x24 0.91, 28x28 and wider slower still. */
#define DWF_MIN_W 7
#define DWF_MAX_W 22

static int dwf_mode;

void hp_dwf_set_mode(int mode)
{
	dwf_mode = mode;
}

int hp_dwf_eligible(const struct hp_colgeom *g)
{
	return hp_cpu_avx512_fma() && g->img[0] == 1 && g->grid[0] == 1 && g->k[0] == 1 && g->k[1] == DWF_K &&
	       g->k[2] == DWF_K && g->stride[1] == 1 && g->stride[2] == 1 && g->dil[1] == 1 && g->dil[2] == 1 &&
	       g->grid_vol >= 1 && g->grid[2] == g->img[2] && g->pad[2] >= 0 && g->pad[2] < DWF_K;
}

int hp_dwf_wanted(const struct hp_colgeom *g)
{
	if (dwf_mode < 0 || !hp_dwf_eligible(g))
		return 0;
	return dwf_mode > 0 || (g->grid[2] >= DWF_MIN_W && g->grid[2] <= DWF_MAX_W);
}

#ifdef DWF_X86
struct dwf_run {
	const struct hp_dw *d;
	const float *x, *w, *b;
	float *y;
	int64_t nv;            /* vectors of a plane's outputs */
	int64_t off[DWF_KK];   /* tap t's displacement from the output position */
	const __mmask16 *mask; /* [nv][9]: lanes whose tap t is inside the image */
};

/* mask[j][t]: the lanes of vector j (outputs j * 16 + l) whose tap t lies
 * in the image, none past the plane; each lane's output row and column
 * carried from vector to vector (no divisions: a 56x56 plane's table is
 * 28224 lanes x taps). */
DWF_TARGET static void dwf_masks(const struct hp_colgeom *g, int64_t nv, __mmask16 *mask)
{
	const __m512i wv = _mm512_set1_epi32((int)g->grid[2]), one = _mm512_set1_epi32(1);
	const __m512i zero = _mm512_setzero_si512(), hv = _mm512_set1_epi32((int)g->img[1]);
	__m512i ow = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
	__m512i oh = zero, p = ow;
	__mmask16 wrap, live, row[DWF_K], col[DWF_K];

	while ((wrap = _mm512_cmpge_epi32_mask(ow, wv))) /* rows narrower than 16 */
		ow = _mm512_mask_sub_epi32(ow, wrap, ow, wv), oh = _mm512_mask_add_epi32(oh, wrap, oh, one);
	for (int64_t j = 0; j < nv; j++) {
		live = _mm512_cmplt_epi32_mask(p, _mm512_set1_epi32((int)g->grid_vol));
		for (int i = 0; i < DWF_K; i++) {
			__m512i ih = _mm512_add_epi32(oh, _mm512_set1_epi32(i - (int)g->pad[1]));
			__m512i iw = _mm512_add_epi32(ow, _mm512_set1_epi32(i - (int)g->pad[2]));
			row[i] = _mm512_cmpge_epi32_mask(ih, zero) & _mm512_cmplt_epi32_mask(ih, hv);
			col[i] = _mm512_cmpge_epi32_mask(iw, zero) & _mm512_cmplt_epi32_mask(iw, wv);
		}
		for (int t = 0; t < DWF_KK; t++)
			mask[j * DWF_KK + t] = live & row[t / DWF_K] & col[t % DWF_K];
		p = _mm512_add_epi32(p, _mm512_set1_epi32(DWF_L));
		ow = _mm512_add_epi32(ow, _mm512_set1_epi32(DWF_L));
		while ((wrap = _mm512_cmpge_epi32_mask(ow, wv)))
			ow = _mm512_mask_sub_epi32(ow, wrap, ow, wv), oh = _mm512_mask_add_epi32(oh, wrap, oh, one);
	}
}

/* Vectors [j0, j0 + V) of Q planes: the chains, then the stores (the
 * plane's last vector masked).  Q and V are constants where this is
 * inlined. */
DWF_TARGET static DWF_INLINE void dwf_vecs(const struct dwf_run *r, const float *const *x, const float *const *w,
					   const float *bias, float *const *y, int64_t j0, int Q, int V)
{
	const int64_t vol = r->d->g.grid_vol, p0 = j0 * DWF_L;
	const __mmask16 *mk = r->mask + j0 * DWF_KK;
	__m512 acc[DWF_Q][DWF_V];

#pragma GCC unroll 4
	for (int q = 0; q < Q; q++)
#pragma GCC unroll 4
		for (int v = 0; v < V; v++)
			acc[q][v] = _mm512_set1_ps(bias[q]);
#pragma GCC unroll 9
	for (int t = 0; t < DWF_KK; t++) {
		/* lanes outside the image are not read: addresses as integers,
		 * lane 0's may lie before the plane */
		const uintptr_t o = (uintptr_t)((p0 + r->off[t]) * 4);
		__m512 wv[DWF_Q];
#pragma GCC unroll 4
		for (int q = 0; q < Q; q++)
			wv[q] = _mm512_set1_ps(w[q][t]);
#pragma GCC unroll 4
		for (int v = 0; v < V; v++) {
			const __mmask16 m = mk[v * DWF_KK + t];
#pragma GCC unroll 4
			for (int q = 0; q < Q; q++)
				acc[q][v] = _mm512_fmadd_ps(
					wv[q], _mm512_maskz_loadu_ps(m, (const float *)((uintptr_t)x[q] + o + 64 * (uintptr_t)v)),
					acc[q][v]);
		}
	}
#pragma GCC unroll 4
	for (int v = 0; v < V; v++) {
		int64_t p = p0 + v * DWF_L;
#pragma GCC unroll 4
		for (int q = 0; q < Q; q++)
			if (p + DWF_L <= vol)
				_mm512_storeu_ps(y[q] + p, acc[q][v]);
			else
				_mm512_mask_storeu_ps(y[q] + p, (__mmask16)((1u << (vol - p)) - 1), acc[q][v]);
	}
}

/* Q planes whole: steps of V vectors, the rest one by one. */
DWF_TARGET static DWF_INLINE void dwf_planes(const struct dwf_run *r, const float *const *x, const float *const *w,
					     const float *bias, float *const *y, int Q)
{
	int64_t j = 0;

	for (; j + DWF_V <= r->nv; j += DWF_V)
		dwf_vecs(r, x, w, bias, y, j, Q, DWF_V);
	for (; j < r->nv; j++)
		dwf_vecs(r, x, w, bias, y, j, Q, 1);
}

/* nq planes: a step of DWF_Q, or one by one. */
DWF_TARGET static void dwf_step(const struct dwf_run *r, const float *const *x, const float *const *w,
				const float *bias, float *const *y, int nq)
{
	if (nq == DWF_Q)
		dwf_planes(r, x, w, bias, y, DWF_Q);
	else
		for (int i = 0; i < nq; i++)
			dwf_planes(r, x + i, w + i, bias + i, y + i, 1);
}

/* Units are output planes (item, output channel), DWF_Q a step. */
static void dwf_range(void *arg, int64_t b, int64_t e, int tid)
{
	const struct dwf_run *r = arg;
	const struct hp_dw *d = r->d;
	const struct hp_colgeom *g = &d->g;
	int64_t cout = d->cin * d->mult, xs = d->xstride ? d->xstride : g->img_vol;
	int64_t m = b % cout, c = b / d->mult, k = b % d->mult; /* plane i reads input plane i / mult */
	const float *x[DWF_Q], *w[DWF_Q];
	float *y[DWF_Q], bias[DWF_Q];

	(void)tid;
	for (int64_t i = b; i < e; i += DWF_Q) {
		int nq = e - i < DWF_Q ? (int)(e - i) : DWF_Q;
		for (int q = 0; q < nq; q++) { /* input plane c (item and channel) counted, not divided */
			x[q] = r->x + c * xs;
			w[q] = r->w + m * DWF_KK;
			bias[q] = r->b ? r->b[m] : 0.0f;
			y[q] = r->y + (i + q) * g->grid_vol;
			if (++m == cout)
				m = 0;
			if (++k == d->mult)
				k = 0, c++;
		}
		dwf_step(r, x, w, bias, y, nq);
		if (d->epi) /* the planes' epilogue while they are in cache */
			hp_epi_span(d->epi, r->y, d->addend, i * g->grid_vol, (i + nq) * g->grid_vol);
	}
}
#endif

int hp_dwf_forward(const struct hp_dw *d, const float *x, const float *w, const float *b, float *y,
		   struct hp_pool *pool)
{
#ifdef DWF_X86
	struct dwf_run r = { .d = d, .x = x, .w = w, .b = b, .y = y };
	const struct hp_colgeom *g = &d->g;
	int saved, threads;
	int64_t planes = d->batch * d->cin * d->mult, su;
	__mmask16 *mask;

	if (!hp_dwf_eligible(g))
		return -1;
	r.nv = (g->grid_vol + DWF_L - 1) / DWF_L;
	for (int t = 0; t < DWF_KK; t++)
		r.off[t] = (t / DWF_K - g->pad[1]) * g->img[2] + t % DWF_K - g->pad[2];
	if (!(mask = malloc((size_t)(r.nv * DWF_KK) * sizeof *mask)))
		return -1;
	dwf_masks(g, r.nv, mask);
	r.mask = mask;
	threads = hp_conv_threads_enter(pool, &saved);
	su = planes / ((int64_t)threads * DWF_UNITS_PER_THREAD);
	su = (su < DWF_Q ? DWF_Q : su) / DWF_Q * DWF_Q; /* whole steps */
	hp_conv_steal(pool, threads, planes, su, dwf_range, &r);
	free(mask);
	hp_conv_threads_leave(saved);
	return 0;
#else
	(void)d, (void)x, (void)w, (void)b, (void)y, (void)pool;
	return -1;
#endif
}
