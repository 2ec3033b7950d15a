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
 * rows, so in core and out of core agree.
 *
 * Small planes (MnasNet's and EfficientNet's 5x5 at 3x3 to 12x12) hold
 * the block's padded input and output planes whole and run the outputs
 * past a row's last step of eight eight or nine at a time across rows
 * (dwk_flat): a row of three outputs had been three dependent chains of 25
 * FMAs, latency-bound, a 12x12 plane's a third of its FMAs in four.  The
 * weights are transposed per block (no per-call pass).  The epilogue
 * (Relu, Clip, HardSwish, after an optional full addend) is fused_epi.c's
 * expression in registers as the planes are stored, others per plane
 * after the block (hp_epi_span, as conv_dw.c runs it).
 *
 * With AVX-512, planes of at most 256 outputs and 400 padded input
 * positions go to conv_dwkz.c instead (hp_dwkz_on): the same chains on
 * sixteen lanes, whole planes transposed sixteen positions at a time. */
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
/* Planes up to this many positions keep the block's whole transposed
 * output in the scratch (64x64: 128 KiB) and go back to the planes in one
 * pass; larger ones row by row with a carry. */
#define DWK_MAX_GRID 4096
/* Planes whose padded transposed input fits in this many floats (128 KiB)
 * take it whole and run their rows' tails across rows (dwk_flat). */
#define DWK_MAX_FLAT 32768
#define DWK_STEP 9 /* outputs of a flat step at most */

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

static int dwk_whole(const struct hp_colgeom *g)
{
	return g->grid_vol <= DWK_MAX_GRID;
}

/* Rows of the padded input plane the outputs reach (the top pad first). */
static int64_t dwk_prows(const struct hp_colgeom *g)
{
	return (g->grid[1] - 1) * g->stride[1] + (g->k[1] - 1) * g->dil[1] + 1;
}

/* Rows whose last outputs are not a whole step of eight, in planes small
 * enough to hold their padded input whole: those outputs would be chains
 * of four, two or one (a 3x3 plane's rows three chains of 25 dependent
 * FMAs, a 12x12 plane's a third of its FMAs in four chains), so they go
 * eight at a time across rows instead.  Every output is the same chain
 * either way. */
static int dwk_flat(const struct hp_colgeom *g)
{
	return dwk_whole(g) && g->grid[2] % 8 && g->pad[1] >= 0 &&
	       dwk_prows(g) * dwk_width(g) * DWK_L <= DWK_MAX_FLAT;
}

/* Floats of a worker's scratch: the padded input plane (flat) or the ring
 * and a zero row, then the block's output plane or a row of outputs with
 * the carry (and a vector's slack for the last transposes and the flat
 * steps past the plane's end). */
static size_t dwk_floats(const struct hp_colgeom *g)
{
	int64_t outs = dwk_whole(g) ? (g->grid_vol + 7) / 8 * 8 + DWK_L : g->grid[2] + 2 * DWK_L;
	int64_t in = dwk_flat(g) ? dwk_prows(g) : dwk_slots(g) + 1;

	return (size_t)(in * dwk_width(g) * DWK_L + outs * DWK_L);
}

struct dwk_run {
	const struct hp_dw *d;
	const float *x, *w, *b;
	float *y;
	int64_t blocks;          /* channel blocks per item */
	float *scratch;          /* dwk_floats() per thread, zero rows cleared */
	int fin;                 /* the epilogue in registers as the planes are stored (else per plane after) */
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

DWK_TARGET static void dwk_row_d(const struct hp_colgeom *g, int64_t ow, const float *const *r, const float *wt,
				 __m256 b, float *out)
{
	int64_t k = g->k[2], s = g->stride[2], dil = g->dil[2];
#define DWK_CALL_D(N) dwk_outs_d(N, k, s, dil, r, wt, b, o0, out)
	DWK_ROW(DWK_CALL_D);
#undef DWK_CALL_D
}

/* Outputs [0, ow) of a row: out[o][8]. */
DWK_TARGET static void dwk_row(const struct hp_colgeom *g, int64_t ow, const float *const *r, const float *wt, __m256 b,
			       float *out)
{
	if (g->dil[2] != 1) {
		dwk_row_d(g, ow, r, wt, b, out);
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

/* v = act(v) as fused_epi.c computes it, operation for operation: Relu
 * as max(0, v) (v where v is NaN or -0, as v < 0 ? 0 : v), Clip by
 * compares and selects (NaN passes; lo already min(lo, hi)), HardSwish
 * v * sat01(v * (1/6) + 0.5) without contraction. */
DWK_TARGET static DWK_INLINE __m256 dwk_act(const int act, __m256 v, __m256 lo, __m256 hi)
{
	__m256 z = _mm256_setzero_ps(), one = _mm256_set1_ps(1.0f), t;

	switch (act) {
	case HP_EPI_RELU: return _mm256_max_ps(z, v);
	case HP_EPI_CLIP:
		t = _mm256_blendv_ps(v, hi, _mm256_cmp_ps(v, hi, _CMP_GT_OQ));
		return _mm256_blendv_ps(t, lo, _mm256_cmp_ps(v, lo, _CMP_LT_OQ));
	case HP_EPI_HSWISH:
		t = _mm256_add_ps(_mm256_mul_ps(v, _mm256_set1_ps(1.0f / 6.0f)), _mm256_set1_ps(0.5f));
		t = _mm256_blendv_ps(t, z, _mm256_cmp_ps(t, z, _CMP_LT_OQ));
		t = _mm256_blendv_ps(t, one, _mm256_cmp_ps(t, one, _CMP_GT_OQ));
		return _mm256_mul_ps(v, t);
	default: return v;
	}
}

/* Transposed outputs out[q][8], q < cnt, back to the nc planes ys[l] at
 * positions q0 + q as act(v + adds[l][q0 + q]) (ADD: the addends), eight
 * at a time; a last partial vector lane by lane, so nothing past a plane
 * is written (the next may be another worker's). */
DWK_TARGET static DWK_INLINE void dwk_store_as(const int act, const int add, const float *out, int64_t cnt, int nc,
					       float *const *ys, int64_t q0, __m256 lo, __m256 hi,
					       const float *const *adds)
{
	for (int64_t q = 0; q < cnt; q += 8) {
		__m256 v[8];
		int64_t n = cnt - q;
		for (int i = 0; i < 8; i++)
			v[i] = _mm256_loadu_ps(out + (q + i) * DWK_L);
		dwk_transpose(v);
		for (int l = 0; l < nc; l++) {
			__m256 o = v[l];
			if (add)
				o = _mm256_add_ps(o, n >= 8 ? _mm256_loadu_ps(adds[l] + q0 + q)
							    : _mm256_maskload_ps(adds[l] + q0 + q, dwk_in(0, 0, n)));
			o = dwk_act(act, o, lo, hi);
			if (n >= 8) {
				_mm256_storeu_ps(ys[l] + q0 + q, o);
			} else {
				float t[8];
				_mm256_storeu_ps(t, o);
				for (int64_t i = 0; i < n; i++)
					ys[l][q0 + q + i] = t[i];
			}
		}
	}
}

#define DWK_STORE_ACT(A)                                                                                         \
	DWK_TARGET static void dwk_store_##A(int add, const float *out, int64_t cnt, int nc, float *const *ys,  \
					     int64_t q0, __m256 lo, __m256 hi, const float *const *adds)         \
	{                                                                                                        \
		if (add)                                                                                         \
			dwk_store_as(A, 1, out, cnt, nc, ys, q0, lo, hi, adds);                                  \
		else                                                                                             \
			dwk_store_as(A, 0, out, cnt, nc, ys, q0, lo, hi, adds);                                  \
	}
DWK_STORE_ACT(HP_EPI_NONE)
DWK_STORE_ACT(HP_EPI_RELU)
DWK_STORE_ACT(HP_EPI_CLIP)
DWK_STORE_ACT(HP_EPI_HSWISH)

/* The outputs back to the planes through the epilogue e (NULL: none; its
 * addends adds[l] when it adds them). */
DWK_TARGET static void dwk_store(const float *out, int64_t cnt, int nc, float *const *ys, int64_t q0,
				 const struct hp_epi *e, const float *const *adds)
{
	int add = e && e->add == HP_EPI_ADD_FULL;
	__m256 lo = _mm256_set1_ps(!e ? 0.0f : e->lo > e->hi ? e->hi : e->lo), hi = _mm256_set1_ps(e ? e->hi : 0.0f);

	switch (e ? e->act : HP_EPI_NONE) {
	case HP_EPI_RELU: dwk_store_HP_EPI_RELU(add, out, cnt, nc, ys, q0, lo, hi, adds); break;
	case HP_EPI_CLIP: dwk_store_HP_EPI_CLIP(add, out, cnt, nc, ys, q0, lo, hi, adds); break;
	case HP_EPI_HSWISH: dwk_store_HP_EPI_HSWISH(add, out, cnt, nc, ys, q0, lo, hi, adds); break;
	default: dwk_store_HP_EPI_NONE(add, out, cnt, nc, ys, q0, lo, hi, adds); break;
	}
}

/* The block's weights as [kvol][8] and its bias [8] (lanes past nc 0),
 * eight taps of eight channels a transpose. */
DWK_TARGET static void dwk_pack(const struct dwk_run *r, int64_t m0, int nc, float *wp)
{
	int64_t kk = r->d->g.kvol;
	float bt[DWK_L] = { 0 };

	for (int64_t t0 = 0; t0 < kk; t0 += 8) {
		__m256i in = dwk_in(0, 0, kk - t0);
		__m256 v[8];
		for (int l = 0; l < 8; l++)
			v[l] = l < nc ? _mm256_maskload_ps(r->w + (m0 + l) * kk + t0, in) : _mm256_setzero_ps();
		dwk_transpose(v);
		for (int q = 0; q < 8 && t0 + q < kk; q++)
			_mm256_storeu_ps(wp + (t0 + q) * DWK_L, v[q]);
	}
	for (int l = 0; l < nc && r->b; l++)
		bt[l] = r->b[m0 + l];
	memcpy(wp + kk * DWK_L, bt, sizeof bt);
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

/* N outputs at base[j] (their windows' first input in the padded plane,
 * rows wd floats apart; dil[0] rows, dil[1] columns) into out[j]: bias, then the taps in (kh, kw)
 * order, one weight vector for the N chains. */
DWK_TARGET static DWK_INLINE void dwk_step(const int N, const int K, const int64_t *dil, int64_t wd, const float *const *base,
					   const float *wt, __m256 b, float *const *out)
{
	__m256 acc[DWK_STEP];

#pragma GCC unroll 9
	for (int j = 0; j < N; j++)
		acc[j] = b;
	for (int kh = 0; kh < K; kh++)
#pragma GCC unroll 7
		for (int kw = 0; kw < K; kw++) {
			__m256 wv = _mm256_loadu_ps(wt + (kh * K + kw) * DWK_L);
			int64_t off = kh * dil[0] * wd + kw * dil[1] * DWK_L;
#pragma GCC unroll 9
			for (int j = 0; j < N; j++)
				acc[j] = _mm256_fmadd_ps(wv, _mm256_loadu_ps(base[j] + off), acc[j]);
		}
#pragma GCC unroll 9
	for (int j = 0; j < N; j++)
		_mm256_storeu_ps(out[j], acc[j]);
}

#define DWK_STEPS(K)                                                                                  \
	DWK_TARGET static void dwk_steps_##K(int n, const int64_t *dil, int64_t wd, const float *const *base, \
					     const float *wt, __m256 b, float *const *out)            \
	{                                                                                             \
		if (n == 9)                                                                           \
			dwk_step(9, K, dil, wd, base, wt, b, out);                                    \
		else                                                                                  \
			dwk_step(8, K, dil, wd, base, wt, b, out);                                    \
	}
DWK_STEPS(3)
DWK_STEPS(5)
DWK_STEPS(7)

/* The flat path's block: the padded plane xt (rows outside the image
 * zero since the scratch was cleared), each row's outputs by steps of
 * eight (dwk_row), then the rows' last ow % 8 outputs (all of them where
 * ow < 8) eight at a time across rows, nine where that divides them and
 * eight does not (3x3 and 6x6 planes); a last step repeats the last
 * output (the same bits twice). */
DWK_TARGET static void dwk_flat_block(const struct hp_colgeom *g, const float *const *xs, int nc, const float *wt,
				      __m256 b, float *xt, float *out)
{
	int64_t wd = dwk_width(g) * DWK_L, pr = dwk_prows(g), ow = g->grid[2], s = g->stride[1];
	int64_t ow8 = ow / 8 * 8, tw = ow - ow8, tails = g->grid[1] * tw;
	int n = tails % 8 && tails % 9 == 0 ? 9 : 8;

	for (int64_t ih = 0; ih < g->img[1]; ih++)
		if (ih + g->pad[1] < pr)
			dwk_fill(g, xs, nc, ih, xt + (ih + g->pad[1]) * wd);
	for (int64_t oh = 0; oh < g->grid[1] && ow8; oh++) {
		const float *rows[DWK_MAXK];
		for (int64_t kh = 0; kh < g->k[1]; kh++)
			rows[kh] = xt + (oh * s + kh * g->dil[1]) * wd;
		dwk_row(g, ow8, rows, wt, b, out + oh * ow * DWK_L);
	}
	for (int64_t t0 = 0; t0 < tails; t0 += n) {
		const float *base[DWK_STEP];
		float *outs[DWK_STEP];
		for (int j = 0; j < n; j++) {
			int64_t t = t0 + j < tails ? t0 + j : tails - 1, oh = t / tw, o = ow8 + t % tw;
			base[j] = xt + oh * s * wd + o * g->stride[2] * DWK_L;
			outs[j] = out + (oh * ow + o) * DWK_L;
		}
		switch (g->k[1]) {
		case 3: dwk_steps_3(n, g->dil + 1, wd, base, wt, b, outs); break;
		case 5: dwk_steps_5(n, g->dil + 1, wd, base, wt, b, outs); break;
		default: dwk_steps_7(n, g->dil + 1, wd, base, wt, b, outs); break;
		}
	}
}

/* Output channels [m0, m0 + nc) of item n. */
DWK_TARGET static void dwk_block(const struct dwk_run *r, int64_t n, int64_t m0, int nc, float *scratch)
{
	const struct hp_dw *d = r->d;
	const struct hp_colgeom *g = &d->g;
	int64_t cout = d->cin * d->mult, wd = dwk_width(g) * DWK_L, slots = dwk_slots(g), kk = g->kvol;
	int64_t tags[DWK_MAXSPAN], ow = g->grid[2], carry = 0, done = 0;
	float *zero = scratch + slots * wd, *out = zero + wd;
	const float *xs[8], *adds[8] = { 0 };
	const struct hp_epi *e = r->fin ? d->epi : NULL;
	float *ys[8], wt[(DWK_MAXK * DWK_MAXK + 1) * DWK_L];
	int whole = dwk_whole(g);
	__m256 b;

	int64_t cs[DWK_L];

	dwk_pack(r, m0, nc, wt);
	b = _mm256_loadu_ps(wt + kk * DWK_L);
	hp_dw_in_channels(m0, nc, d->mult, cs);
	for (int l = 0; l < nc; l++) {
		int64_t m = m0 + l, c = cs[l];
		xs[l] = r->x + (n * d->cin + c) * (d->xstride ? d->xstride : g->img_vol);
		ys[l] = r->y + (n * cout + m) * g->grid_vol;
		if (e && e->add == HP_EPI_ADD_FULL)
			adds[l] = d->addend + (n * cout + m) * g->grid_vol;
	}
	if (dwk_flat(g)) {
		out = scratch + dwk_prows(g) * wd;
		dwk_flat_block(g, xs, nc, wt, b, scratch, out);
	}
	for (int i = 0; i < DWK_MAXSPAN; i++)
		tags[i] = -1;
	for (int64_t oh = 0; oh < g->grid[1] && !dwk_flat(g); oh++) {
		const float *rows[DWK_MAXK];
		int64_t f;
		for (int64_t kh = 0; kh < g->k[1]; kh++)
			rows[kh] = dwk_get(g, xs, nc, oh * g->stride[1] - g->pad[1] + kh * g->dil[1], scratch, tags,
					   zero);
		dwk_row(g, ow, rows, wt, b, out + (whole ? oh * ow : carry) * DWK_L);
		if (whole)
			continue;
		carry += ow;
		f = oh + 1 == g->grid[1] ? carry : carry / 8 * 8; /* whole vectors, the plane's end */
		dwk_store(out, f, nc, ys, done, e, adds);
		done += f;
		carry -= f;
		memmove(out, out + f * DWK_L, (size_t)(carry * DWK_L) * sizeof *out);
	}
	if (whole)
		dwk_store(out, g->grid_vol, nc, ys, 0, e, adds);
	if (d->epi && !r->fin) /* other epilogues: the block's adjacent planes at once, in cache */
		hp_epi_span(d->epi, r->y, d->addend, ys[0] - r->y, ys[nc - 1] - r->y + g->grid_vol);
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
	const struct hp_epi *e = d->epi;
	int saved, threads;
	int64_t units, su, cout = d->cin * d->mult;
	size_t one = dwk_floats(&d->g), wd = (size_t)(dwk_width(&d->g) * DWK_L);

	if (hp_dwkz_on(&d->g) && hp_dwkz_forward(d, x, w, d->wpack, b, y, pool) == 0) /* small planes, AVX-512 */
		return 0;
	r.blocks = (cout + DWK_L - 1) / DWK_L;
	r.fin = e && (e->add == HP_EPI_ADD_NONE || (e->add == HP_EPI_ADD_FULL && d->addend)) &&
		(e->act == HP_EPI_NONE || e->act == HP_EPI_RELU || e->act == HP_EPI_CLIP || e->act == HP_EPI_HSWISH);
	threads = hp_conv_threads_enter(pool, &saved);
	units = d->batch * r.blocks;
	su = units / ((int64_t)threads * DWK_UNITS_PER_THREAD);
	r.scratch = malloc((size_t)threads * one * sizeof(float));
	if (!r.scratch) {
		hp_conv_threads_leave(saved);
		return -1;
	}
	for (int t = 0; t < threads; t++) /* the zero row, or the flat plane's padding rows */
		if (dwk_flat(&d->g))
			memset(r.scratch + t * one, 0, (size_t)dwk_prows(&d->g) * wd * sizeof(float));
		else
			memset(r.scratch + t * one + (size_t)dwk_slots(&d->g) * wd, 0, wd * sizeof(float));
	hp_conv_steal(pool, threads, units, su < 1 ? 1 : su, dwk_range, &r);
	free(r.scratch);
	hp_conv_threads_leave(saved);
	return 0;
#else
	(void)d, (void)x, (void)w, (void)b, (void)y, (void)pool;
	return -1;
#endif
}
