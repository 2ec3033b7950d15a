/* Depthwise 3x3 weight gradient (ConvGradFilter), 2-D, stride 1 or 2,
 * undilated, with sixteen output channels in the lanes of a zmm register
 * (AVX-512F + FMA): conv_dwc.c's dW (eight channels in ymm lanes) at twice
 * the width, with 16 x 16 transposes, two output rows per pass at stride
 * 1, and small planes transposed whole.
 *
 * Why: conv_dwc.c's tiles ran MobileNetV2's dW at 16-50 GFLOP/s per
 * CPU-second (bench/bench_conv_libs.c, dw3x3-*), a fifth of what this
 * CPU's 512-bit FMAs do; its 8 x 8 transposes of X's and dY's rows cost
 * more shuffles per float than 16 x 16 ones, and each row's nine chains
 * loaded their X vectors alone where two rows at stride 1 share three of
 * four X rows.  The transposes are still most of the time (a 16 x 16 one
 * costs about as much as 70 FMAs here); at stride 2 two rows a pass (one
 * X row of five shared) ran 35% slower than one, so it takes one.
 *
 * Determinism: the chain is conv_dwc.c's, lane for lane: tap k of channel
 * m in a unit (grid rows [q0, q1) of one item) is the sum over its rows in
 * order, from 0, of each row's chain of fused multiply-adds over the row's
 * positions in order from 0 (a tap in the padding adds dY * 0); dW is acc
 * (or 0) plus the units from the last item's last to the first item's
 * first.  Two rows in one pass keep two sets of chains and add them in
 * row order (the same unit) or unit order (units of one row, the later
 * first), so the bits are conv_dwc.c's: blocks, workers, ISA and bands of
 * rows or items change nothing. */
#include <stdint.h>
#include <string.h>

#include "kernels/conv_impl.h"
#include "kernels/cpu.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

#include "kernels/simd_tr16.h"
#define DWG_X86 1
#define DWG_TARGET __attribute__((target("avx512f,avx512vl,fma")))
#define DWG_INLINE __attribute__((always_inline)) inline
#endif

#define DWG_L 16    /* channels per block (the lanes) */
#define DWG_SLOTS 4 /* ring of transposed X rows: a pass's (at most four), and the next's */

static int dwg_avx2;

void hp_dwg_set_avx2(int on)
{
	dwg_avx2 = on;
}

int hp_dwg_available(const struct hp_colgeom *g)
{
#ifdef DWG_X86
	return !dwg_avx2 && hp_cpu_avx512_fma() && __builtin_cpu_supports("avx512vl") && hp_dw3_eligible(g);
#else
	(void)g;
	return 0;
#endif
}

/* Positions of a transposed X row: up to the last output's last tap,
 * whole transposes. */
static int64_t dwg_width(const struct hp_colgeom *g)
{
	return ((g->grid[2] - 1) * g->stride[2] + 3 + DWG_L - 1) / DWG_L * DWG_L;
}

/* Positions of a transposed dY row. */
static int64_t dwg_owp(const struct hp_colgeom *g)
{
	return (g->grid[2] + DWG_L - 1) / DWG_L * DWG_L;
}

/* Small planes whole: X's rows that the taps read, [Hp][Wp] positions with
 * the padding as zeros, and dY's plane, each transposed as one flat run
 * of positions, where that takes at most two thirds of the transposes row
 * by row do (a 7x7 plane's row of 9 positions is one transpose of 16; the
 * plane, 4 for 7 rows: dw3x3-7 29.6 -> 36 GFLOP/s; at 14x14, 26 of 28
 * and 17 of 21 transposes, the copies cost more) and fits in L1
 * (DWG_FLAT positions). */
#define DWG_FLAT 512

static int64_t dwg_hp(const struct hp_colgeom *g)
{
	return (g->grid[1] - 1) * g->stride[1] + 3;
}

static int64_t dwg_wp(const struct hp_colgeom *g)
{
	return (g->grid[2] - 1) * g->stride[2] + 3;
}

/* Floats of a worker's scratch: the ring, a zero row, two dY rows; or the
 * whole planes (dY's rounded up to whole transposes). */
size_t hp_dwg_scratch(const struct hp_colgeom *g)
{
	int64_t ring = (DWG_SLOTS + 1) * dwg_width(g) + 2 * dwg_owp(g);
	int64_t flat = dwg_hp(g) * dwg_wp(g) + (g->grid_vol + DWG_L - 1) / DWG_L * DWG_L;

	return (size_t)((ring > flat ? ring : flat) * DWG_L);
}

#ifdef DWG_X86
static int dwg_flat(const struct hp_colgeom *g)
{
	int64_t flat = (g->img_vol + DWG_L - 1) / DWG_L + (g->grid_vol + DWG_L - 1) / DWG_L;
	int64_t rows = (g->img[1] * dwg_width(g) + g->grid[1] * dwg_owp(g)) / DWG_L;

	return dwg_hp(g) * dwg_wp(g) + g->grid_vol + DWG_L <= DWG_FLAT && 3 * flat < 2 * rows;
}

struct dwg_run {
	const struct hp_dw *d;
	const float *dy, *x, *acc;
	float *dw, *scratch; /* hp_dwg_scratch() per thread */
	int64_t blocks, urows;
};

/* The lanes l with lo <= c + l < hi. */
static __mmask16 dwg_mask(int64_t c, int64_t lo, int64_t hi)
{
	int64_t a = lo - c, b = hi - c;

	a = a < 0 ? 0 : a;
	b = b > DWG_L ? DWG_L : b;
	return a >= b ? 0 : (__mmask16)(((1u << b) - 1) & ~((1u << a) - 1));
}

/* Sixteen planes' floats at ps[l] + off, transposed into o[16][16]; the
 * same at ps[l] + off + pf (pf != 0) on its way to the cache: the next
 * pass's rows, sixteen planes apart, more streams than the hardware
 * prefetchers follow (dw3x3-14 dW 57 -> 64 GFLOP/s per CPU-second, the
 * 14x14 stride-2 one 25 -> 28; the 56x56 ones level). */
DWG_TARGET __attribute__((noinline)) static void dwg_chunk(const float *const *ps, int64_t off, int64_t pf, float *o)
{
	__m512 v[DWG_L];

	for (int l = 0; l < DWG_L; l++)
		v[l] = _mm512_loadu_ps(ps[l] + off);
	for (int l = 0; l < DWG_L && pf; l++)
		__builtin_prefetch(ps[l] + off + pf, 0, 3);
	hp_tr16_ps(v);
	for (int q = 0; q < DWG_L; q++)
		_mm512_storeu_ps(o + q * DWG_L, v[q]);
}

/* The same for the lanes in m of the first nc planes, zeros elsewhere
 * (masked lanes are not read). */
DWG_TARGET __attribute__((noinline)) static void dwg_chunk_part(const float *const *ps, int nc, int64_t off,
								 __mmask16 m, float *o)
{
	__m512 v[DWG_L];

	for (int l = 0; l < DWG_L; l++)
		v[l] = l < nc ? _mm512_maskz_loadu_ps(m, ps[l] + off) : _mm512_setzero_ps();
	hp_tr16_ps(v);
	for (int q = 0; q < DWG_L; q++)
		_mm512_storeu_ps(o + q * DWG_L, v[q]);
}

/* Row r of the block's nc planes (ps[l], rows of n floats) from column c0
 * on, as a transposed row of `width` positions: row[p][l] = plane l at
 * column c0 + p, zeros outside [0, n) and past the planes.  Whole chunks
 * by a function of their own: inside the masked loop GCC kept the
 * transpose's registers on the stack (fills two thirds of the time). */
static void dwg_fill(const float *const *ps, int nc, int64_t r, int64_t n, int64_t c0, int64_t width, float *row,
		     int64_t pf)
{
	for (int64_t p = 0; p < width; p += DWG_L) {
		__mmask16 m = dwg_mask(c0 + p, 0, n);
		if (m == 0xffff && nc == DWG_L)
			dwg_chunk(ps, r * n + c0 + p, pf, row + p * DWG_L);
		else
			dwg_chunk_part(ps, m ? nc : 0, r * n + c0 + p, m, row + p * DWG_L);
	}
}

/* The transposed X row ih (the zero row outside the image) from the ring
 * (pf: dwg_chunk's). */
static const float *dwg_get(const struct hp_colgeom *g, const float *const *xs, int nc, int64_t ih, int64_t pf,
			    float *ring, int64_t *tags, const float *zero)
{
	int64_t wd = dwg_width(g), s = ih % DWG_SLOTS;

	if (ih < 0 || ih >= g->img[1])
		return zero;
	if (tags[s] != ih) {
		dwg_fill(xs, nc, ih, g->img[2], -g->pad[2], wd, ring + s * wd * DWG_L, pf);
		tags[s] = ih;
	}
	return ring + s * wd * DWG_L;
}

/* One or two rows' nine chains (R rows, stride S): a[k] (first row, dY
 * row d0, X rows x[0..3)) and b[k] (second row, d1, X rows x[S..S+3)),
 * each the chain from 0 over positions o of dY[o] * X at o S + kw. */
DWG_TARGET static DWG_INLINE void dwg_rows(const int S, const int R, int64_t ow, const float *const *x,
					   const float *d0, const float *d1, __m512 *a, __m512 *b)
{
	__m512 A[9], B[9], z = _mm512_setzero_ps();

	__asm__("" : "+v"(z)); /* else GCC zeroes A and B in memory (rep stos, a fifth of a 7x7 row's time) */
	for (int k = 0; k < 9; k++)
		A[k] = B[k] = z;
	for (int64_t o = 0; o < ow; o++) {
		__m512 g0 = _mm512_loadu_ps(d0 + o * DWG_L), g1 = R == 2 ? _mm512_loadu_ps(d1 + o * DWG_L) : g0;
		for (int r = 0; r < (R == 2 ? S + 3 : 3); r++)
			for (int kw = 0; kw < 3; kw++) {
				__m512 v = _mm512_loadu_ps(x[r] + (o * S + kw) * DWG_L);
				if (r < 3)
					A[3 * r + kw] = _mm512_fmadd_ps(g0, v, A[3 * r + kw]);
				if (R == 2 && r >= S)
					B[3 * (r - S) + kw] = _mm512_fmadd_ps(g1, v, B[3 * (r - S) + kw]);
			}
	}
	for (int k = 0; k < 9; k++) {
		a[k] = A[k];
		if (R == 2)
			b[k] = B[k];
	}
}

/* The block's item whole (dwg_flat): xp[Hp][Wp] = X's padded rows, dyp =
 * dY's plane, both transposed. */
DWG_TARGET static void dwg_fill_flat(const struct hp_colgeom *g, const float *const *xs, const float *const *dys,
				     int nc, float *xp, float *dyp)
{
	int64_t hp = dwg_hp(g), wp = dwg_wp(g), vol = g->img_vol, w = g->img[2], ih = 0, iw = 0;

	/* X's positions straight from the transpose's registers to their
	 * padded places (through a buffer and memcpy they cost more than the
	 * transposes); the padding's zeros are dwg_range's */
	for (int64_t f = 0; f < vol; f += DWG_L) {
		__mmask16 m = dwg_mask(f, 0, vol);
		__m512 v[DWG_L];
		for (int l = 0; l < DWG_L; l++)
			v[l] = l < nc ? _mm512_maskz_loadu_ps(m, xs[l] + f) : _mm512_setzero_ps();
		hp_tr16_ps(v);
#pragma GCC unroll 16
		for (int q = 0; q < DWG_L; q++) {
			int64_t pr = ih + g->pad[1], pc = iw + g->pad[2];
			if (f + q < vol && pr >= 0 && pr < hp && pc >= 0 && pc < wp)
				_mm512_storeu_ps(xp + (pr * wp + pc) * DWG_L, v[q]);
			if (++iw == w)
				iw = 0, ih++;
		}
	}
	for (int64_t f = 0; f < g->grid_vol; f += DWG_L) {
		__mmask16 m = dwg_mask(f, 0, g->grid_vol);
		if (m == 0xffff && nc == DWG_L)
			dwg_chunk(dys, f, 0, dyp + f * DWG_L);
		else
			dwg_chunk_part(dys, nc, f, m, dyp + f * DWG_L);
	}
}

/* Grid rows q (and q + 1 when two) of the block's item: their chains into
 * a (and b); X's and dY's rows from the ring and transposed here, or
 * from the whole planes (flat); dir: grid rows from this pass's to the
 * next's (prefetched).  Inlined: called, its chains went through memory
 * (dw3x3-7 48 -> 40 GFLOP/s per CPU-second). */
DWG_TARGET static DWG_INLINE void dwg_pass(const struct hp_colgeom *g, const float *const *xs,
					   const float *const *dys, int nc, int64_t q, int two, int flat, int dir,
					   float *scratch, int64_t *tags, __m512 *a, __m512 *b)
{
	int64_t wd = dwg_width(g), ow = g->grid[2], owp = dwg_owp(g), s = g->stride[1];
	float *zero = scratch + DWG_SLOTS * wd * DWG_L, *d0 = zero + wd * DWG_L, *d1 = d0 + owp * DWG_L;
	const float *x[4];

	if (flat) {
		int64_t wp = dwg_wp(g);
		for (int r = 0; r < (two ? (int)s + 3 : 3); r++)
			x[r] = scratch + (q * s + r) * wp * DWG_L;
		d0 = scratch + dwg_hp(g) * wp * DWG_L + q * ow * DWG_L;
		d1 = d0 + ow * DWG_L;
	} else {
		for (int r = 0; r < (two ? (int)s + 3 : 3); r++)
			x[r] = dwg_get(g, xs, nc, q * s - g->pad[1] + r, dir * s * g->img[2], scratch, tags, zero);
		dwg_fill(dys, nc, q, ow, 0, owp, d0, dir * ow);
		if (two)
			dwg_fill(dys, nc, q + 1, ow, 0, owp, d1, dir * ow);
	}
	if (s == 1 && two)
		dwg_rows(1, 2, ow, x, d0, d1, a, b);
	else if (s == 1)
		dwg_rows(1, 1, ow, x, d0, d1, a, b);
	else
		dwg_rows(2, 1, ow, x, d0, d1, a, b);
}

/* The item's units into out, the last first: a unit of several rows sums
 * their chains in order (two rows a pass); units of one row go two a
 * pass, the later one's added first. */
DWG_TARGET static void dwg_item(const struct dwg_run *r, const float *const *xs, const float *const *dys, int nc,
				float *scratch, __m512 *out)
{
	const struct hp_colgeom *g = &r->d->g;
	int64_t rows = g->grid[1], tags[DWG_SLOTS];
	int flat = dwg_flat(g), pairs = g->stride[1] == 1;
	__m512 a[9], b[9];

	for (int i = 0; i < DWG_SLOTS; i++)
		tags[i] = -1;
	if (flat)
		dwg_fill_flat(g, xs, dys, nc, scratch, scratch + dwg_hp(g) * dwg_wp(g) * DWG_L);
	if (r->urows == 1) {
		for (int64_t q = rows - 1; q >= 0; q -= 1 + pairs) {
			int two = q >= 1 && pairs;
			dwg_pass(g, xs, dys, nc, two ? q - 1 : q, two, flat, -1 - pairs, scratch, tags, a, b);
			for (int k = 0; k < 9 && two; k++) /* unit q: 0 + its row */
				out[k] = _mm512_add_ps(out[k], _mm512_add_ps(_mm512_setzero_ps(), b[k]));
			for (int k = 0; k < 9; k++)
				out[k] = _mm512_add_ps(out[k], _mm512_add_ps(_mm512_setzero_ps(), a[k]));
		}
		return;
	}
	for (int64_t q0 = (rows - 1) / r->urows * r->urows; q0 >= 0; q0 -= r->urows) {
		int64_t q1 = q0 + r->urows < rows ? q0 + r->urows : rows;
		__m512 u[9];
		for (int k = 0; k < 9; k++)
			u[k] = _mm512_setzero_ps();
		for (int64_t q = q0; q < q1; q += 1 + pairs) {
			int two = q + 1 < q1 && pairs;
			dwg_pass(g, xs, dys, nc, q, two, flat, 1 + pairs, scratch, tags, a, b);
			for (int k = 0; k < 9; k++) {
				u[k] = _mm512_add_ps(u[k], a[k]);
				if (two)
					u[k] = _mm512_add_ps(u[k], b[k]);
			}
		}
		for (int k = 0; k < 9; k++)
			out[k] = _mm512_add_ps(out[k], u[k]);
	}
}

/* Output channels [m0, m0 + nc): dW = acc + the units, last first. */
DWG_TARGET static void dwg_block(const struct dwg_run *r, int64_t m0, int nc, float *scratch)
{
	const struct hp_dw *d = r->d;
	const struct hp_colgeom *g = &d->g;
	float t[9][DWG_L];
	const float *xs[DWG_L], *dys[DWG_L];
	__m512i idx = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
					 _mm512_set1_epi32(9));
	__mmask16 m = (__mmask16)((1u << nc) - 1);
	__m512 out[9], z = _mm512_setzero_ps();

	__asm__("" : "+v"(z)); /* as in dwg_rows */
	for (int k = 0; k < 9; k++) /* acc[m0 + l][k] into lane l */
		out[k] = r->acc ? _mm512_mask_i32gather_ps(z, m, idx, r->acc + m0 * 9 + k, 4) : z;
	int64_t cs[16];

	hp_dw_in_channels(m0, nc, d->mult, cs);
	for (int64_t n = d->batch - 1; n >= 0; n--) {
		for (int l = 0; l < nc; l++) {
			int64_t m = m0 + l;
			xs[l] = r->x + (n * d->cin + cs[l]) * g->img_vol;
			dys[l] = r->dy + (n * d->cin * d->mult + m) * g->grid_vol;
		}
		dwg_item(r, xs, dys, nc, scratch, out);
	}
	for (int k = 0; k < 9; k++)
		_mm512_storeu_ps(t[k], out[k]);
	for (int l = 0; l < nc; l++)
		for (int k = 0; k < 9; k++)
			r->dw[(m0 + l) * 9 + k] = t[k][l];
}

static void dwg_range(void *arg, int64_t b, int64_t e, int tid)
{
	const struct dwg_run *r = arg;
	const struct hp_colgeom *g = &r->d->g;
	int64_t cout = r->d->cin * r->d->mult;
	float *scratch = r->scratch + (size_t)tid * hp_dwg_scratch(g);

	if (!dwg_flat(g)) /* the zero row */
		memset(scratch + DWG_SLOTS * dwg_width(g) * DWG_L, 0, (size_t)(dwg_width(g) * DWG_L) * sizeof(float));
	else /* the padded X plane's padding (its image positions are rewritten per item) */
		memset(scratch, 0, (size_t)(dwg_hp(g) * dwg_wp(g) * DWG_L) * sizeof(float));
	for (int64_t i = b; i < e; i++)
		dwg_block(r, i * DWG_L, (int)(cout - i * DWG_L < DWG_L ? cout - i * DWG_L : DWG_L), scratch);
}
#endif

void hp_dwg_filter(const struct hp_dw *d, const float *dy, const float *x, const float *acc, float *dw, float *ws,
		   int threads, struct hp_pool *pool)
{
#ifdef DWG_X86
	int64_t ow = d->g.grid[2], rows = d->g.grid_vol / ow, urows = d->unit > 0 ? d->unit / ow : rows;
	struct dwg_run r = { .d = d, .dy = dy, .x = x, .acc = acc, .dw = dw, .scratch = ws,
			     .blocks = (d->cin * d->mult + DWG_L - 1) / DWG_L, .urows = urows > 0 ? urows : rows };

	hp_conv_parallel(pool, threads, r.blocks, dwg_range, &r);
#else
	(void)d, (void)dy, (void)x, (void)acc, (void)dw, (void)ws, (void)threads, (void)pool;
#endif
}
