/* Depthwise 3x3 and 5x5 weight gradient (ConvGradFilter), 2-D, stride 1
 * or 2, undilated, for grid rows of at least DWP_MINW outputs (with
 * units of one row DWP_MINW1, or DWP_MINW1S2 for 3x3 at stride 2), with
 * sixteen positions of one row in the lanes
 * of a zmm register (AVX-512F + FMA) and no transposes: for one channel,
 * X's window rows are read in place in whole vectors j (at stride 2 two
 * vectors split by vpermt2ps into even and odd columns), and dY's row
 * shifted by a to meet them, so that tap (kh, kw)'s chain takes
 * fma(dY[q][j - a ..], X[q s + kh - pad][..]) with a = kw (stride 1) or
 * kw / 2 (stride 2); masks zero the lanes outside either row.
 *
 * Why: conv_dw_grad.c and conv_dwk_grad.c put sixteen channels in the
 * lanes, which needs 16 x 16 transposes of X's and dY's rows; a transpose
 * costs about as much as 70 FMAs, and a 3x3 does 9 FMAs per transposed
 * vector, so the transposes were most of the time (MobileNetV2's dW at
 * 20-41% of sgemm's peak per CPU-second).  Here the row's a + 1 dY
 * vectors serve all its window rows, each X vector all its taps; what is
 * left is the unit's reduction of its K*K vectors to K*K sums (dwp_tree,
 * 2.8 shuffles and adds per vector).  With a batch of one a unit is a row,
 * and below DWP_MINW1 outputs that reduction a row costs more than the
 * channel lanes' transposes (rows of 28: 28 against 40 GFLOP/s at 3x3);
 * with units of items it pays from DWP_MINW.  7x7 windows stay with
 * conv_dwk_grad.c (49 FMAs a transposed vector: 72 against 58 GFLOP/s).
 *
 * Determinism (not conv_dwc.c's chain: these bits are this kernel's):
 * tap (kh, kw) of channel m in a unit (grid rows [q0, q1) of one item) is
 * sixteen lanes from 0; lane l takes one fused multiply-add per position
 * o of the unit's rows with (o + a) % 16 == l, rows in order from q0,
 * positions in order (a tap in the padding adds dY * 0); the unit's sum
 * is dwp_tree's fixed tree over the lanes, ((l0 + l8) + (l4 + l12)) +
 * ((l2 + l10) + (l6 + l14)) plus the same of the odd lanes; dW is acc (or
 * 0) plus the units' sums from the last item's last unit to the first
 * item's first.  Workers take whole channels, so threads change no bit;
 * bands of rows or items are whole units (each band starting from the
 * sums of the bands after it), so out of core is in core: hp_dw_filter
 * takes this path wherever hp_dwp_eligible() says, by geometry and unit
 * alone, which bands share with their node.  Rounding: within 1.2 ulp of
 * the sums' magnitude on average, as the row chains (tests/kernels'
 * bound; a 224x224 plane against double: 2.7 ulp with units of a row,
 * both, 1.15 against 0.94 with units of an item). */
#include <stdint.h>
#include <string.h>

#include "kernels/conv_impl.h"
#include "kernels/cpu.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

#define DWP_X86 1
#define DWP_TARGET __attribute__((target("avx512f,avx512vl,fma")))
#define DWP_INLINE __attribute__((always_inline)) inline
#endif

#define DWP_L 16     /* positions per vector (the lanes) */
#define DWP_MINW 24  /* narrowest grid row taken here, units of several rows */
#define DWP_MINW1 48 /* the same, units of one row */
/* and 3x3 at stride 2, rows in pairs (dwp_pair), where the channel lanes
 * transpose twice the X a row: rows of 28, 28.4 against 23.4 GFLOP/s
 * (5x5 there: 34 against 40) */
#define DWP_MINW1S2 28
#define DWP_MAXKK 25

static int dwp_mode;

void hp_dwp_set_mode(int mode)
{
	dwp_mode = mode;
}

/* The geometry alone (not the mode nor the CPU): workspace sizes. */
static int dwp_shape(const struct hp_colgeom *g)
{
	int64_t k = g->k[1];

	return g->img[0] == 1 && g->k[0] == 1 && g->k[2] == k && (k == 3 || k == 5) &&
	       g->stride[1] == g->stride[2] && (g->stride[1] == 1 || g->stride[1] == 2) && g->dil[1] == 1 &&
	       g->dil[2] == 1 && g->pad[1] >= 0 && g->pad[2] >= 0 && g->grid[2] >= DWP_MINW;
}

/* Grid rows per unit of d's sums. */
static int64_t dwp_urows(const struct hp_dw *d)
{
	int64_t ow = d->g.grid[2], rows = d->g.grid_vol / ow, ur = d->unit > 0 ? d->unit / ow : rows;

	return ur > 0 ? ur : rows;
}

int hp_dwp_eligible(const struct hp_dw *d)
{
#ifdef DWP_X86
	/* units of one row (a batch of one) reduce their K*K vectors a row:
	 * below DWP_MINW1 that costs more than the channel lanes' transposes
	 * (3x3 rows of 28 at stride 1: 28 against 40 GFLOP/s) */
	int64_t minw = DWP_MINW;

	if (dwp_urows(d) == 1)
		minw = d->g.stride[2] == 2 && d->g.k[2] == 3 ? DWP_MINW1S2 : DWP_MINW1;

	return dwp_mode >= 0 && dwp_shape(&d->g) && d->g.grid[2] >= minw && hp_cpu_avx512_fma() &&
	       __builtin_cpu_supports("avx512vl");
#else
	(void)d;
	return 0;
#endif
}

/* Floats of one padded X row's half (stride 1: the row; stride 2: its
 * even or its odd columns): every tap of the row's vectors, rounded up. */
static int64_t dwp_half(const struct hp_colgeom *g)
{
	return (g->grid[2] + 6 + DWP_L - 1) / DWP_L * DWP_L + DWP_L;
}

/* Floats of a worker's scratch: a zero row (two halves), an item's
 * units' sums (aligned), dwp_row's masks (8 a vector). */
size_t hp_dwp_scratch(const struct hp_colgeom *g)
{
	return dwp_shape(g) ? (size_t)(2 * dwp_half(g) + (g->grid[1] + 1) * 2 * DWP_L + dwp_half(g)) : 0;
}

#ifdef DWP_X86
struct dwp_run {
	const struct hp_dw *d;
	const float *dy, *x, *acc;
	float *dw, *scratch; /* hp_dwp_scratch() per thread */
	int64_t urows;
};

/* A worker's view of one channel's item: X's plane, a zero row for the
 * window rows outside it, the units' sums, the row vectors' masks. */
struct dwp_ctx {
	const struct hp_colgeom *g;
	const float *plane;
	float *zero;
	__m512 *sums; /* an item's units' sums, two vectors a unit */
	/* dwp_row's lanes inside the rows, [vector][8]: dY shifted by 0-6,
	 * then X's at stride 1; vectors [jlo, jhi] need none */
	__mmask16 *masks;
	int64_t nv, jlo, jhi;
	int64_t half;
};

/* The lanes l with 0 <= c + l < n. */
static __mmask16 dwp_mask(int64_t c, int64_t n)
{
	int64_t a = -c, b = n - c;

	a = a < 0 ? 0 : a;
	b = b > DWP_L ? DWP_L : b;
	return a >= b ? 0 : (__mmask16)(((1u << b) - 1) & ~((1u << a) - 1));
}

/* One grid row's vectors into the chains A[(kh - KH0) K + kw] for kh in
 * [KH0, KH0 + NKH): X's padded rows xr[kh] in aligned vectors j (stride
 * 2: even columns, odd at + half), dY's row dyr shifted to meet them: tap
 * kw reads dY[j - a] (zeros outside the row) with a = kw (stride 1) or
 * kw / 2 (stride 2), so that the row's a + 1 shifted dY vectors serve all
 * its window rows and no load of X splits a line (X shifted instead, two
 * of three loads split: 31 against 43 GFLOP/s at dw3x3). */
DWP_TARGET static DWP_INLINE void dwp_row(const int K, const int S, const int KH0, const int NKH,
					  const float *const *xr, const struct dwp_ctx *r, const float *dyr, __m512 *A)
{
	const int P0 = S == 1 ? K - 1 : (K - 1) / 2;
	const __mmask16 *mt = r->masks;
	const __m512i ev = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
	const __m512i od = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);

	for (int64_t j = 0, v = 0; v < r->nv; j += DWP_L, v++) {
		__m512 gv[5];
		int in = j >= r->jlo && j <= r->jhi;
		if (in) {
#pragma GCC unroll 5
			for (int a = 0; a <= P0; a++)
				gv[a] = _mm512_loadu_ps(dyr + j - a);
		} else {
#pragma GCC unroll 5
			for (int a = 0; a <= P0; a++)
				gv[a] = _mm512_maskz_loadu_ps(mt[v * 8 + a], dyr + j - a);
		}
#pragma GCC unroll 5
		for (int kh = 0; kh < NKH; kh++) {
			__m512 xe, xo;
			if (S == 1) { /* the image row itself, pad floats left */
				xe = in ? _mm512_loadu_ps(xr[KH0 + kh] + j)
					: _mm512_maskz_loadu_ps(mt[v * 8 + 7], xr[KH0 + kh] + j);
				xo = xe;
			} else { /* its even and odd columns from 32 */
				const float *x = xr[KH0 + kh] + 2 * j;
				__m512 a = in ? _mm512_loadu_ps(x) : _mm512_maskz_loadu_ps(mt[v * 8 + 6], x);
				__m512 b = in ? _mm512_loadu_ps(x + DWP_L) : _mm512_maskz_loadu_ps(mt[v * 8 + 7], x + DWP_L);
				xe = _mm512_permutex2var_ps(a, ev, b);
				xo = _mm512_permutex2var_ps(a, od, b);
			}
			/* in registers: else GCC folds the load into each of the K
			 * FMAs (12 loads for 9 FMAs at 3x3: load-bound) */
			__asm__("" : "+v"(xe), "+v"(xo));
#pragma GCC unroll 5
			for (int kw = 0; kw < K; kw++)
				A[kh * K + kw] = _mm512_fmadd_ps(S == 1 ? gv[kw] : gv[kw / 2], S == 1 || !(kw & 1) ? xe : xo,
								 A[kh * K + kw]);
		}
	}
}

/* dwp_row for two grid rows, each a unit of its own (3x3, units of a
 * row): chains A (dY row d0, X rows xr[0..3)) and B (d1, xr[S..S+3)),
 * each row's lanes as dwp_row's alone, the window rows the two share
 * loaded once (4 or 5 X rows for 6, 10 or 14 loads for 18 FMAs). */
DWP_TARGET static DWP_INLINE void dwp_row2(const int S, const float *const *xr, const struct dwp_ctx *r,
					   const float *d0, const float *d1, __m512 *A, __m512 *B)
{
	const int P0 = S == 1 ? 2 : 1;
	const __mmask16 *mt = r->masks;
	const __m512i ev = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
	const __m512i od = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);

	for (int64_t j = 0, v = 0; v < r->nv; j += DWP_L, v++) {
		__m512 ga[3], gb[3];
		int in = j >= r->jlo && j <= r->jhi;
#pragma GCC unroll 3
		for (int a = 0; a <= P0; a++) {
			ga[a] = in ? _mm512_loadu_ps(d0 + j - a) : _mm512_maskz_loadu_ps(mt[v * 8 + a], d0 + j - a);
			gb[a] = in ? _mm512_loadu_ps(d1 + j - a) : _mm512_maskz_loadu_ps(mt[v * 8 + a], d1 + j - a);
		}
#pragma GCC unroll 5
		for (int i = 0; i < 3 + S; i++) {
			__m512 xe, xo;
			if (S == 1) {
				xe = in ? _mm512_loadu_ps(xr[i] + j) : _mm512_maskz_loadu_ps(mt[v * 8 + 7], xr[i] + j);
				xo = xe;
			} else {
				const float *x = xr[i] + 2 * j;
				__m512 a = in ? _mm512_loadu_ps(x) : _mm512_maskz_loadu_ps(mt[v * 8 + 6], x);
				__m512 b = in ? _mm512_loadu_ps(x + DWP_L) : _mm512_maskz_loadu_ps(mt[v * 8 + 7], x + DWP_L);
				xe = _mm512_permutex2var_ps(a, ev, b);
				xo = _mm512_permutex2var_ps(a, od, b);
			}
			__asm__("" : "+v"(xe), "+v"(xo)); /* dwp_row's */
#pragma GCC unroll 3
			for (int kw = 0; kw < 3; kw++) {
				__m512 xv = S == 1 || !(kw & 1) ? xe : xo;
				if (i < 3)
					A[i * 3 + kw] = _mm512_fmadd_ps(S == 1 ? ga[kw] : ga[kw / 2], xv, A[i * 3 + kw]);
				if (i >= S)
					B[(i - S) * 3 + kw] = _mm512_fmadd_ps(S == 1 ? gb[kw] : gb[kw / 2], xv,
									      B[(i - S) * 3 + kw]);
			}
		}
	}
}

/* Lane l of the result: the tree sum of v[l]'s sixteen lanes (n <= 16,
 * the rest zeros), p_i = l_i + l_(i+8), r_i = p_i + p_(i+4), s_i = r_i +
 * r_(i+2), s_0 + s_1: four levels, each pairing two registers' halves,
 * quarters, pairs and floats (45 shuffles and adds for sixteen vectors,
 * against 8 a vector alone).  The inputs go in as w[4j + k] = v[4k + j]
 * so that the last level's lanes come out in order. */
DWP_TARGET static DWP_INLINE __m512 dwp_tree(const __m512 *v, int n)
{
	__m512 w[16], c[8], e[4], g[2];

#pragma GCC unroll 16
	for (int i = 0; i < 16; i++) {
		int src = 4 * (i & 3) + (i >> 2);
		w[i] = src < n ? v[src] : _mm512_setzero_ps();
	}
#pragma GCC unroll 8
	for (int i = 0; i < 8; i++)
		c[i] = _mm512_add_ps(_mm512_shuffle_f32x4(w[2 * i], w[2 * i + 1], 0x44),
				     _mm512_shuffle_f32x4(w[2 * i], w[2 * i + 1], 0xee));
#pragma GCC unroll 4
	for (int i = 0; i < 4; i++)
		e[i] = _mm512_add_ps(_mm512_shuffle_f32x4(c[2 * i], c[2 * i + 1], 0x88),
				     _mm512_shuffle_f32x4(c[2 * i], c[2 * i + 1], 0xdd));
#pragma GCC unroll 2
	for (int i = 0; i < 2; i++)
		g[i] = _mm512_add_ps(_mm512_shuffle_ps(e[2 * i], e[2 * i + 1], 0x44),
				     _mm512_shuffle_ps(e[2 * i], e[2 * i + 1], 0xee));
	return _mm512_add_ps(_mm512_shuffle_ps(g[0], g[1], 0x88), _mm512_shuffle_ps(g[0], g[1], 0xdd));
}

/* Grid rows [q0, q1) of one item, window rows [KH0, KH0 + NKH), into
 * u[(kh - KH0) K + kw]: the unit's lane chains. */
DWP_TARGET static DWP_INLINE void dwp_chains(const int K, const int S, const int KH0, const int NKH,
					     struct dwp_ctx *r, const float *dyp, int64_t q0, int64_t q1,
					     __m512 *u)
{
	const struct hp_colgeom *g = r->g;
	int64_t ow = g->grid[2], w = g->img[2];
	__m512 A[25], z = _mm512_setzero_ps();

	__asm__("" : "+v"(z)); /* conv_dw_grad.c's: else GCC zeroes A in memory */
#pragma GCC unroll 25
	for (int k = 0; k < NKH * K; k++)
		A[k] = z;
	for (int64_t q = q0; q < q1; q++) {
		const float *xr[5];
#pragma GCC unroll 5
		for (int kh = KH0; kh < KH0 + NKH; kh++) {
			int64_t ih = q * S - g->pad[1] + kh;
			/* X's rows in place, masked at their ends */
			xr[kh] = ih >= 0 && ih < g->img[1] ? r->plane + ih * w - g->pad[2] : r->zero;
		}
		dwp_row(K, S, KH0, NKH, xr, r, dyp + q * ow, A);
	}
#pragma GCC unroll 25
	for (int k = 0; k < NKH * K; k++)
		u[k] = A[k];
}

/* The unit's K*K lane chains, reduced: tap k's sum into out[k / 16]
 * lane k % 16. */
DWP_TARGET static DWP_INLINE void dwp_unit(const int K, const int S, struct dwp_ctx *r, const float *dyp,
					   int64_t q0, int64_t q1, __m512 *out)
{
	__m512 u[DWP_MAXKK];

	dwp_chains(K, S, 0, K, r, dyp, q0, q1, u);
#pragma GCC unroll 2
	for (int b = 0; b * 16 < K * K; b++)
		out[b] = dwp_tree(u + 16 * b, K * K - 16 * b < 16 ? K * K - 16 * b : 16);
}

/* Grid rows q and q + 1 as units of a row each (3x3): their sums into
 * out[0] and out[2] (lanes 0-8), one tree for both (a 16-vector tree and
 * a 2-vector one: 57 shuffles and adds for 72). */
DWP_TARGET static DWP_INLINE void dwp_pair(const int S, struct dwp_ctx *r, const float *dyp, int64_t q,
					   __m512 *out)
{
	const struct hp_colgeom *g = r->g;
	int64_t ow = g->grid[2], w = g->img[2];
	const float *xr[5];
	__m512 u[18], z = _mm512_setzero_ps();

	__asm__("" : "+v"(z)); /* dwp_chains' */
#pragma GCC unroll 18
	for (int k = 0; k < 18; k++)
		u[k] = z;
#pragma GCC unroll 5
	for (int i = 0; i < 3 + S; i++) {
		int64_t ih = q * S - g->pad[1] + i;
		xr[i] = ih >= 0 && ih < g->img[1] ? r->plane + ih * w - g->pad[2] : r->zero;
	}
	dwp_row2(S, xr, r, dyp + q * ow, dyp + (q + 1) * ow, u, u + 9);
	__m512 t16 = dwp_tree(u, 16), t2 = dwp_tree(u + 16, 2);
	out[0] = t16;                                                                   /* row q: lanes 0-8 */
	out[2] = _mm512_castsi512_ps(_mm512_alignr_epi32(_mm512_castps_si512(t2), _mm512_castps_si512(t16), 9));
}

/* Channel m's dW: acc, then the units from the last item's last. */
DWP_TARGET static DWP_INLINE void dwp_channel(const int K, const int S, const struct dwp_run *run,
					      struct dwp_ctx *r, int64_t m)
{
	const struct hp_dw *d = run->d;
	const struct hp_colgeom *g = &d->g;
	int64_t rows = g->grid[1], kk = K * K, ur = run->urows;
	__m512 out[2];
	float t[32];

	for (int b = 0; b < 2; b++) {
		__mmask16 mk = (__mmask16)(b * 16 >= kk ? 0 : kk - b * 16 >= 16 ? 0xffff : (1u << (kk - b * 16)) - 1);
		out[b] = run->acc ? _mm512_maskz_loadu_ps(mk, run->acc + m * kk + b * 16) : _mm512_setzero_ps();
	}
	for (int64_t n = d->batch - 1; n >= 0; n--) {
		const float *dyp = run->dy + (n * d->cin * d->mult + m) * g->grid_vol;
		int64_t nu = (rows + ur - 1) / ur;
		r->plane = run->x + (n * d->cin + m / d->mult) * g->img_vol;
		/* the units' sums first to last (X and dY read in memory
		 * order, as the prefetchers follow: the other way round their
		 * rows missed, 3x the taps' time at 112x112), added last to
		 * first */
		int64_t u = 0;
		if (K == 3 && ur == 1) /* units of a row: two at once */
			for (; u + 1 < nu; u += 2)
				dwp_pair(S, r, dyp, u, r->sums + u * 2);
		for (; u < nu; u++)
			dwp_unit(K, S, r, dyp, u * ur, u * ur + ur < rows ? u * ur + ur : rows, r->sums + u * 2);
		for (int64_t u = nu - 1; u >= 0; u--)
			for (int b = 0; b * 16 < kk; b++)
				out[b] = _mm512_add_ps(out[b], r->sums[u * 2 + b]);
	}
	for (int b = 0; b < 2; b++)
		_mm512_storeu_ps(t + 16 * b, out[b]);
	memcpy(run->dw + m * kk, t, (size_t)kk * sizeof(float));
}

#define DWP_CHANNELS(K, S)                                                                                    \
	DWP_TARGET __attribute__((noinline)) static void dwp_channels_##K##_##S(const struct dwp_run *run,    \
										 struct dwp_ctx *r, int64_t b, \
										 int64_t e)                     \
	{                                                                                                     \
		for (int64_t m = b; m < e; m++)                                                               \
			dwp_channel(K, S, run, r, m);                                                         \
	}
DWP_CHANNELS(3, 1)
DWP_CHANNELS(3, 2)
DWP_CHANNELS(5, 1)
DWP_CHANNELS(5, 2)

/* The row vectors' masks and the span of vectors that need none. */
static void dwp_masks(struct dwp_ctx *r)
{
	const struct hp_colgeom *g = r->g;
	int64_t ow = g->grid[2], w = g->img[2], p = g->pad[2], s = g->stride[2], p0 = s == 1 ? g->k[2] - 1 : g->k[2] / 2;

	r->nv = (ow + p0 + DWP_L - 1) / DWP_L;
	for (int64_t v = 0; v < r->nv; v++) {
		for (int a = 0; a < 7; a++)
			r->masks[v * 8 + a] = dwp_mask(v * DWP_L - a, ow);
		if (s == 1) {
			r->masks[v * 8 + 7] = dwp_mask(v * DWP_L - p, w);
		} else {
			r->masks[v * 8 + 6] = dwp_mask(2 * v * DWP_L - p, w);
			r->masks[v * 8 + 7] = dwp_mask(2 * v * DWP_L - p + DWP_L, w);
		}
	}
	/* j >= lo: no dY shift before the row, no X load before the pad;
	 * j <= hi: none past either row's end */
	int64_t xlo = s == 1 ? p : (p + 1) / 2, xhi = s == 1 ? w + p - DWP_L : (w + p - 2 * DWP_L) / 2;
	r->jlo = xlo > p0 ? xlo : p0;
	r->jhi = xhi < ow - DWP_L ? xhi : ow - DWP_L;
}

static void dwp_range(void *arg, int64_t b, int64_t e, int tid)
{
	const struct dwp_run *run = arg;
	const struct hp_colgeom *g = &run->d->g;
	struct dwp_ctx r = { .g = g, .half = dwp_half(g) };
	size_t n = hp_dwp_scratch(g);
	int k = (int)g->k[1], s = (int)g->stride[1];

	r.zero = run->scratch + (size_t)tid * n;
	memset(r.zero, 0, (size_t)(2 * r.half) * sizeof(float));
	r.sums = (__m512 *)(((uintptr_t)(r.zero + 2 * r.half) + 63) & ~(uintptr_t)63);
	r.masks = (__mmask16 *)(r.sums + 2 * g->grid[1]);
	dwp_masks(&r);
	if (k == 3)
		(s == 1 ? dwp_channels_3_1 : dwp_channels_3_2)(run, &r, b, e);
	else
		(s == 1 ? dwp_channels_5_1 : dwp_channels_5_2)(run, &r, b, e);
}
#endif

void hp_dwp_filter(const struct hp_dw *d, const float *dy, const float *x, const float *acc, float *dw, float *ws,
		   int threads, struct hp_pool *pool)
{
#ifdef DWP_X86
	struct dwp_run r = { .d = d, .dy = dy, .x = x, .acc = acc, .dw = dw, .scratch = ws, .urows = dwp_urows(d) };

	hp_conv_parallel(pool, threads, d->cin * d->mult, dwp_range, &r);
#else
	(void)d, (void)dy, (void)x, (void)acc, (void)dw, (void)ws, (void)threads, (void)pool;
#endif
}
