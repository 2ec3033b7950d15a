/* Depthwise 3x3 weight gradient (ConvGradFilter), 2-D, stride 1 or 2,
 * undilated, with sixteen output channels in the lanes of a zmm register
 * (AVX-512F + FMA): conv_dwc.c's dW (eight channels in ymm lanes) at twice
 * the width, with 16 x 16 transposes and two output rows per pass.
 *
 * Why: conv_dwc.c's tiles ran MobileNetV2's dW at 16-50 GFLOP/s per
 * CPU-second (bench/bench_conv_libs.c, dw3x3-*), a fifth of what this
 * CPU's 512-bit FMAs do; its 8 x 8 transposes of X's and dY's rows cost
 * more shuffles per float than 16 x 16 ones, and each row's nine chains
 * loaded their X vectors alone where two rows share three of four
 * (stride 1) or one of five (stride 2) X rows.
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
#define DWG_SLOTS 8 /* ring of transposed X rows: a pass's five at stride 2, and the next's */

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

/* Floats of a worker's scratch: the ring, a zero row, two dY rows. */
size_t hp_dwg_scratch(const struct hp_colgeom *g)
{
	return (size_t)(((DWG_SLOTS + 1) * dwg_width(g) + 2 * dwg_owp(g)) * DWG_L);
}

#ifdef DWG_X86
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

/* Sixteen planes' floats at ps[l] + off, transposed into o[16][16]. */
DWG_TARGET __attribute__((noinline)) static void dwg_chunk(const float *const *ps, int64_t off, float *o)
{
	__m512 v[DWG_L];

	for (int l = 0; l < DWG_L; l++)
		v[l] = _mm512_loadu_ps(ps[l] + off);
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
static void dwg_fill(const float *const *ps, int nc, int64_t r, int64_t n, int64_t c0, int64_t width, float *row)
{
	for (int64_t p = 0; p < width; p += DWG_L) {
		__mmask16 m = dwg_mask(c0 + p, 0, n);
		if (m == 0xffff && nc == DWG_L)
			dwg_chunk(ps, r * n + c0 + p, row + p * DWG_L);
		else
			dwg_chunk_part(ps, m ? nc : 0, r * n + c0 + p, m, row + p * DWG_L);
	}
}

/* The transposed X row ih (the zero row outside the image) from the ring. */
static const float *dwg_get(const struct hp_colgeom *g, const float *const *xs, int nc, int64_t ih, float *ring,
			    int64_t *tags, const float *zero)
{
	int64_t wd = dwg_width(g), s = ih % DWG_SLOTS;

	if (ih < 0 || ih >= g->img[1])
		return zero;
	if (tags[s] != ih) {
		dwg_fill(xs, nc, ih, g->img[2], -g->pad[2], wd, ring + s * wd * DWG_L);
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
	__m512 A[9], B[9];

	for (int k = 0; k < 9; k++)
		A[k] = B[k] = _mm512_setzero_ps();
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

/* Grid rows q (and q + 1 when two) of the block's item: their chains into
 * a (and b). */
DWG_TARGET static void dwg_pass(const struct hp_colgeom *g, const float *const *xs, const float *const *dys, int nc,
				int64_t q, int two, float *scratch, int64_t *tags, __m512 *a, __m512 *b)
{
	int64_t wd = dwg_width(g), ow = g->grid[2], owp = dwg_owp(g), s = g->stride[1];
	float *zero = scratch + DWG_SLOTS * wd * DWG_L, *d0 = zero + wd * DWG_L, *d1 = d0 + owp * DWG_L;
	const float *x[5];

	for (int r = 0; r < (two ? (int)s + 3 : 3); r++)
		x[r] = dwg_get(g, xs, nc, q * s - g->pad[1] + r, scratch, tags, zero);
	dwg_fill(dys, nc, q, ow, 0, owp, d0);
	if (two)
		dwg_fill(dys, nc, q + 1, ow, 0, owp, d1);
	if (s == 1 && two)
		dwg_rows(1, 2, ow, x, d0, d1, a, b);
	else if (s == 1)
		dwg_rows(1, 1, ow, x, d0, d1, a, b);
	else if (two)
		dwg_rows(2, 2, ow, x, d0, d1, a, b);
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
	__m512 a[9], b[9];

	for (int i = 0; i < DWG_SLOTS; i++)
		tags[i] = -1;
	if (r->urows == 1) {
		for (int64_t q = rows - 1; q >= 0; q -= 2) {
			int two = q >= 1;
			dwg_pass(g, xs, dys, nc, two ? q - 1 : q, two, scratch, tags, a, b);
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
		for (int64_t q = q0; q < q1; q += 2) {
			int two = q + 1 < q1;
			dwg_pass(g, xs, dys, nc, q, two, scratch, tags, a, b);
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
	float t[9][DWG_L] = { { 0 } };
	const float *xs[DWG_L], *dys[DWG_L];
	__m512 out[9];

	for (int l = 0; l < nc; l++)
		for (int k = 0; k < 9; k++)
			t[k][l] = r->acc ? r->acc[(m0 + l) * 9 + k] : 0.0f;
	for (int k = 0; k < 9; k++)
		out[k] = _mm512_loadu_ps(t[k]);
	for (int64_t n = d->batch - 1; n >= 0; n--) {
		for (int l = 0; l < nc; l++) {
			int64_t m = m0 + l;
			xs[l] = r->x + (n * d->cin + m / d->mult) * g->img_vol;
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

	memset(scratch + DWG_SLOTS * dwg_width(g) * DWG_L, 0, (size_t)(dwg_width(g) * DWG_L) * sizeof(float));
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
