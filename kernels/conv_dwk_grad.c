/* Depthwise 5x5 and 7x7 weight gradient (ConvGradFilter), 2-D, stride 1
 * or 2, undilated, with sixteen output channels in the lanes of a zmm
 * register (AVX-512F + FMA): conv_dw_grad.c's 3x3 dW for the larger
 * windows.  X's rows and dY's rows of a block of sixteen planes are
 * transposed into rows of [position][16 channels] (zero positions for the
 * padding), X's held in a ring so that each is transposed once per item;
 * a grid row's K*K chains then run over its positions with one dY vector
 * and one X vector (a memory operand) per FMA, the window rows of a 7x7
 * in two passes (4 and 3 rows: 28 and 21 chains in registers).
 *
 * Why: conv_dw.c's generic loops (a pass of per-column partials per tap
 * and row, then a lane tree per unit) ran the nets' 5x5 dW at 1-3
 * GFLOP/s, about 30% of MnasNet's, MobileNetV3's and EfficientNet's
 * training step.  A KxK window does K*K / 9 times the 3x3's FMAs on each
 * transposed float, so the transposes that bound conv_dw_grad.c weigh
 * far less here.
 *
 * Determinism: conv_dwc.c's and conv_dw_grad.c's chain, for every window
 * size: tap k of channel m in a unit (grid rows [q0, q1) of one item) is
 * the sum over the unit's rows in order, from 0, of each row's chain of
 * fused multiply-adds over the row's positions in order from 0 (a tap in
 * the padding adds dY * 0); dW is acc (or 0) plus the units, from the
 * last item's last unit to the first item's first.  A unit of one row
 * adds 0 + its chain.  Blocks, workers and bands of rows or items (each
 * band starting from the sum of the bands after it) change no bit;
 * hp_dw_filter takes this path for every geometry hp_dkg_eligible()
 * names, whatever the batch, unit or band, so in core and out of core
 * agree.  These are not conv_dw.c's generic bits (per-column partials
 * summed by a lane tree); without AVX-512 the generic loops run. */
#include <stdint.h>
#include <string.h>

#include "kernels/conv_impl.h"
#include "kernels/cpu.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

#include "kernels/simd_tr16.h"
#define DKG_X86 1
#define DKG_TARGET __attribute__((target("avx512f,avx512vl,fma")))
#define DKG_INLINE __attribute__((always_inline)) inline
#endif

#define DKG_L 16    /* channels per block (the lanes) */
#define DKG_SLOTS 8 /* ring of transposed X rows: a window's (at most 7) and the next's first */
#define DKG_MAXKK 49

static int dkg_mode;

void hp_dkg_set_mode(int mode)
{
	dkg_mode = mode;
}

/* The geometry alone (not the mode nor the CPU): workspace sizes. */
static int dkg_shape(const struct hp_colgeom *g)
{
	int64_t k = g->k[1];

	return g->img[0] == 1 && g->k[0] == 1 && g->k[2] == k && (k == 5 || k == 7) && g->stride[1] == g->stride[2] &&
	       (g->stride[1] == 1 || g->stride[1] == 2) && g->dil[1] == 1 && g->dil[2] == 1;
}

int hp_dkg_eligible(const struct hp_colgeom *g)
{
#ifdef DKG_X86
	return dkg_mode >= 0 && dkg_shape(g) && hp_cpu_avx512_fma() && __builtin_cpu_supports("avx512vl");
#else
	(void)g;
	return 0;
#endif
}

/* Positions of a transposed X row: up to the last output's last tap,
 * whole transposes. */
static int64_t dkg_width(const struct hp_colgeom *g)
{
	return ((g->grid[2] - 1) * g->stride[2] + g->k[2] + DKG_L - 1) / DKG_L * DKG_L;
}

/* Positions of a transposed dY row. */
static int64_t dkg_owp(const struct hp_colgeom *g)
{
	return (g->grid[2] + DKG_L - 1) / DKG_L * DKG_L;
}

/* Small planes whole (conv_dw_grad.c's flat planes): X's rows that the
 * taps read, [Hp][Wp] positions with the padding as zeros, and dY's plane,
 * each transposed as one flat run of positions, where that takes at most
 * two thirds of the transposes row by row do (6x6 at 5x5: 6 against 12)
 * and fits in L1 (DKG_FLAT positions). */
#define DKG_FLAT 512

static int64_t dkg_hp(const struct hp_colgeom *g)
{
	return (g->grid[1] - 1) * g->stride[1] + g->k[1];
}

static int64_t dkg_wp(const struct hp_colgeom *g)
{
	return (g->grid[2] - 1) * g->stride[2] + g->k[2];
}

/* Floats of a worker's scratch: the ring, a zero row, a dY row; or the
 * whole planes (dY's rounded up to whole transposes). */
size_t hp_dkg_scratch(const struct hp_colgeom *g)
{
	int64_t ring, flat;

	if (!dkg_shape(g))
		return 0;
	ring = (DKG_SLOTS + 1) * dkg_width(g) + dkg_owp(g);
	flat = dkg_hp(g) * dkg_wp(g) + (g->grid_vol + DKG_L - 1) / DKG_L * DKG_L;
	return (size_t)((ring > flat ? ring : flat) * DKG_L);
}

/* ---- dX at stride 2 ---- */

/* dX of d at stride 2 here: multiplier 1, the dW path's windows. */
int hp_dkd_eligible(const struct hp_dw *d)
{
	return d->mult == 1 && d->g.stride[1] == 2 && hp_dkg_eligible(&d->g);
}

/* dY positions left of column 0 that a transposed dY row holds (zeros),
 * and its width: every tap of dkd_row's groups of DKD_N outputs of one
 * parity, whole transposes. */
#define DKD_N 8
static int64_t dkd_left(const struct hp_colgeom *g)
{
	int64_t lo = (g->pad[2] - (g->k[2] - 1)) >> 1; /* floor */

	return lo < 0 ? -lo : 0;
}

static int64_t dkd_width(const struct hp_colgeom *g)
{
	int64_t hi = (g->img[2] + 2 * DKD_N + g->pad[2]) >> 1, w = hi > g->grid[2] ? hi : g->grid[2];

	return (dkd_left(g) + w + 1 + DKG_L - 1) / DKG_L * DKG_L;
}

/* Positions of a dX row's transposed outputs (groups run past the row). */
static int64_t dkd_xw(const struct hp_colgeom *g)
{
	return (g->img[2] + 2 * DKD_N + DKG_L - 1) / DKG_L * DKG_L;
}

/* Floats of a worker's dX scratch: the dY ring, a zero row, the weights
 * in lanes, a row of outputs. */
size_t hp_dkd_scratch(const struct hp_colgeom *g)
{
	if (!dkg_shape(g) || g->stride[1] != 2)
		return 0;
	return (size_t)(((DKG_SLOTS + 1) * dkd_width(g) + DKG_MAXKK + DKG_L + dkd_xw(g)) * DKG_L);
}

#ifdef DKG_X86
static int dkg_flat(const struct hp_colgeom *g)
{
	int64_t flat = (g->img_vol + DKG_L - 1) / DKG_L + (g->grid_vol + DKG_L - 1) / DKG_L;
	int64_t rows = (g->img[1] * dkg_width(g) + g->grid[1] * dkg_owp(g)) / DKG_L;

	return dkg_hp(g) * dkg_wp(g) + g->grid_vol + DKG_L <= DKG_FLAT && 3 * flat <= 2 * rows;
}

struct dkg_run {
	const struct hp_dw *d;
	const float *dy, *x, *acc;
	float *dw, *scratch; /* hp_dkg_scratch() per thread */
	int64_t blocks, urows;
};

/* The lanes l with lo <= c + l < hi. */
static __mmask16 dkg_mask(int64_t c, int64_t lo, int64_t hi)
{
	int64_t a = lo - c, b = hi - c;

	a = a < 0 ? 0 : a;
	b = b > DKG_L ? DKG_L : b;
	return a >= b ? 0 : (__mmask16)(((1u << b) - 1) & ~((1u << a) - 1));
}

/* Sixteen planes' floats at ps[l] + off, transposed into o[16][16]. */
DKG_TARGET __attribute__((noinline)) static void dkg_chunk(const float *const *ps, int64_t off, float *o)
{
	__m512 v[DKG_L];

	for (int l = 0; l < DKG_L; l++)
		v[l] = _mm512_loadu_ps(ps[l] + off);
	hp_tr16_ps(v);
	for (int q = 0; q < DKG_L; q++)
		_mm512_storeu_ps(o + q * DKG_L, v[q]);
}

/* The same for the lanes in m of the first nc planes, zeros elsewhere
 * (masked lanes are not read). */
DKG_TARGET __attribute__((noinline)) static void dkg_chunk_part(const float *const *ps, int nc, int64_t off,
								 __mmask16 m, float *o)
{
	__m512 v[DKG_L];

	for (int l = 0; l < DKG_L; l++)
		v[l] = l < nc ? _mm512_maskz_loadu_ps(m, ps[l] + off) : _mm512_setzero_ps();
	hp_tr16_ps(v);
	for (int q = 0; q < DKG_L; q++)
		_mm512_storeu_ps(o + q * DKG_L, v[q]);
}

/* Row r of the block's nc planes (ps[l], rows of n floats) from column c0
 * on, as a transposed row of `width` positions: row[p][l] = plane l at
 * column c0 + p, zeros outside [0, n) and past the planes. */
static void dkg_fill(const float *const *ps, int nc, int64_t r, int64_t n, int64_t c0, int64_t width, float *row)
{
	for (int64_t p = 0; p < width; p += DKG_L) {
		__mmask16 m = dkg_mask(c0 + p, 0, n);
		if (m == 0xffff && nc == DKG_L)
			dkg_chunk(ps, r * n + c0 + p, row + p * DKG_L);
		else if (m)
			dkg_chunk_part(ps, nc, r * n + c0 + p, m, row + p * DKG_L);
		else
			memset(row + p * DKG_L, 0, DKG_L * DKG_L * sizeof *row);
	}
}

/* The transposed X row ih (the zero row outside the image) from the ring. */
static const float *dkg_get(const struct hp_colgeom *g, const float *const *xs, int nc, int64_t ih, float *ring,
			    int64_t *tags, const float *zero)
{
	int64_t wd = dkg_width(g), s = ih % DKG_SLOTS;

	if (ih < 0 || ih >= g->img[1])
		return zero;
	if (tags[s] != ih) {
		dkg_fill(xs, nc, ih, g->img[2], -g->pad[2], wd, ring + s * wd * DKG_L);
		tags[s] = ih;
	}
	return ring + s * wd * DKG_L;
}

/* R window rows' chains of one grid row (window K, stride S), each added
 * to its unit's sum: u[r K + kw] += the chain from 0 over positions o of
 * dY[o] * X row x[r] at o S + kw (added here: returned, GCC copied the
 * chains out with rep movs, a seventh of a 3x3 plane's time). */
DKG_TARGET static DKG_INLINE void dkg_rows(const int K, const int S, const int R, int64_t ow, const float *const *x,
					   const float *d, __m512 *u)
{
	__m512 A[4 * 7], z = _mm512_setzero_ps();

	/* Every loop over A unrolled (the 28 of a 7x7's first pass too, past
	 * GCC's own limit): one left rolled and GCC keeps A on the stack,
	 * storing and reloading all R K sums around the position loop (the
	 * sums stay in registers only inside it) */
	__asm__("" : "+v"(z)); /* else GCC zeroes A in memory (conv_dw_grad.c's dwg_rows) */
#pragma GCC unroll 28
	for (int k = 0; k < R * K; k++)
		A[k] = z;
	for (int64_t o = 0; o < ow; o++) {
		/* opaque: else GCC carries X vectors from one position to the
		 * next (stride 1) and spills the chains */
		int64_t xo = o * S * DKG_L;
		__asm__("" : "+r"(xo));
		__m512 g = _mm512_loadu_ps(d + o * DKG_L);
#pragma GCC unroll 4
		for (int r = 0; r < R; r++)
#pragma GCC unroll 7
			for (int kw = 0; kw < K; kw++)
				A[r * K + kw] = _mm512_fmadd_ps(g, _mm512_loadu_ps(x[r] + xo + kw * DKG_L), A[r * K + kw]);
	}
#pragma GCC unroll 28
	for (int k = 0; k < R * K; k++)
		u[k] = _mm512_add_ps(u[k], A[k]);
}

/* The block's item whole (dkg_flat): xp[Hp][Wp] = X's padded rows, dyp =
 * dY's plane, both transposed; xp's padding is zero from dkg_range (the
 * same positions for every item and block: clearing the plane per item
 * was a tenth of a 3x3 plane's dW). */
static void dkg_fill_flat(const struct hp_colgeom *g, const float *const *xs, const float *const *dys, int nc,
			  float *xp, float *dyp)
{
	int64_t hp = dkg_hp(g), wp = dkg_wp(g), vol = g->img_vol, w = g->img[2], ih = 0, iw = 0;
	float t[DKG_L * DKG_L];

	for (int64_t f = 0; f < vol; f += DKG_L) {
		__mmask16 m = dkg_mask(f, 0, vol);
		if (m == 0xffff && nc == DKG_L)
			dkg_chunk(xs, f, t);
		else
			dkg_chunk_part(xs, nc, f, m, t);
		for (int q = 0; q < DKG_L && f + q < vol; q++) {
			int64_t pr = ih + g->pad[1], pc = iw + g->pad[2];
			if (pr >= 0 && pr < hp && pc >= 0 && pc < wp)
				memcpy(xp + (pr * wp + pc) * DKG_L, t + q * DKG_L, DKG_L * sizeof *t);
			if (++iw == w)
				iw = 0, ih++;
		}
	}
	for (int64_t f = 0; f < g->grid_vol; f += DKG_L) {
		__mmask16 m = dkg_mask(f, 0, g->grid_vol);
		if (m == 0xffff && nc == DKG_L)
			dkg_chunk(dys, f, dyp + f * DKG_L);
		else
			dkg_chunk_part(dys, nc, f, m, dyp + f * DKG_L);
	}
}

/* Grid row q of the block's item: its K*K chains added to u; X's and dY's
 * rows from the ring and transposed here, or from the whole planes. */
DKG_TARGET static void dkg_pass(const struct hp_colgeom *g, const float *const *xs, const float *const *dys, int nc,
				int64_t q, int flat, float *scratch, int64_t *tags, __m512 *u)
{
	int64_t wd = dkg_width(g), ow = g->grid[2], owp = dkg_owp(g), s = g->stride[1], k = g->k[1];
	float *zero = scratch + DKG_SLOTS * wd * DKG_L, *d = zero + wd * DKG_L;
	const float *x[7];

	if (flat) {
		int64_t wp = dkg_wp(g);
		for (int r = 0; r < k; r++)
			x[r] = scratch + (q * s + r) * wp * DKG_L;
		d = scratch + dkg_hp(g) * wp * DKG_L + q * ow * DKG_L;
	} else {
		for (int r = 0; r < k; r++)
			x[r] = dkg_get(g, xs, nc, q * s - g->pad[1] + r, scratch, tags, zero);
		dkg_fill(dys, nc, q, ow, 0, owp, d);
	}
	if (k == 5 && s == 1)
		dkg_rows(5, 1, 5, ow, x, d, u);
	else if (k == 5)
		dkg_rows(5, 2, 5, ow, x, d, u);
	else if (s == 1) {
		dkg_rows(7, 1, 4, ow, x, d, u);
		dkg_rows(7, 1, 3, ow, x + 4, d, u + 28);
	} else {
		dkg_rows(7, 2, 4, ow, x, d, u);
		dkg_rows(7, 2, 3, ow, x + 4, d, u + 28);
	}
}

/* The item's units into out, the last first: a unit sums its rows' chains
 * in order from 0. */
DKG_TARGET static void dkg_item(const struct dkg_run *r, const float *const *xs, const float *const *dys, int nc,
				float *scratch, __m512 *out)
{
	const struct hp_colgeom *g = &r->d->g;
	int64_t rows = g->grid[1], tags[DKG_SLOTS], kk = g->kvol;
	int flat = dkg_flat(g);
	__m512 u[DKG_MAXKK];

	for (int i = 0; i < DKG_SLOTS; i++)
		tags[i] = -1;
	if (flat)
		dkg_fill_flat(g, xs, dys, nc, scratch, scratch + dkg_hp(g) * dkg_wp(g) * DKG_L);
	for (int64_t q0 = (rows - 1) / r->urows * r->urows; q0 >= 0; q0 -= r->urows) {
		int64_t q1 = q0 + r->urows < rows ? q0 + r->urows : rows;
		for (int64_t k = 0; k < kk; k++)
			u[k] = _mm512_setzero_ps();
		for (int64_t q = q0; q < q1; q++)
			dkg_pass(g, xs, dys, nc, q, flat, scratch, tags, u);
		for (int64_t k = 0; k < kk; k++)
			out[k] = _mm512_add_ps(out[k], u[k]);
	}
}

/* Output channels [m0, m0 + nc): dW = acc + the units, last first. */
DKG_TARGET static void dkg_block(const struct dkg_run *r, int64_t m0, int nc, float *scratch)
{
	const struct hp_dw *d = r->d;
	const struct hp_colgeom *g = &d->g;
	int64_t kk = g->kvol;
	const float *xs[DKG_L], *dys[DKG_L];
	__m512 out[DKG_MAXKK + DKG_L - 1], v[DKG_L];

	for (int64_t k0 = 0; k0 < kk; k0 += DKG_L) { /* acc[m0 + l][k] into lane l: transposes, not gathers */
		__mmask16 km = dkg_mask(k0, 0, kk);
		for (int l = 0; l < DKG_L; l++)
			v[l] = r->acc && l < nc ? _mm512_maskz_loadu_ps(km, r->acc + (m0 + l) * kk + k0) : _mm512_setzero_ps();
		if (r->acc)
			hp_tr16_ps(v);
		for (int q = 0; q < DKG_L; q++)
			out[k0 + q] = v[q];
	}
	int64_t cs[DKG_L];

	hp_dw_in_channels(m0, nc, d->mult, cs);
	for (int64_t n = d->batch - 1; n >= 0; n--) {
		for (int l = 0; l < nc; l++) {
			int64_t c = m0 + l;
			xs[l] = r->x + (n * d->cin + cs[l]) * g->img_vol;
			dys[l] = r->dy + (n * d->cin * d->mult + c) * g->grid_vol;
		}
		dkg_item(r, xs, dys, nc, scratch, out);
	}
	for (int64_t k0 = 0; k0 < kk; k0 += DKG_L) { /* lane l to dw[m0 + l][k] */
		__mmask16 km = dkg_mask(k0, 0, kk);
		for (int q = 0; q < DKG_L; q++)
			v[q] = out[k0 + q];
		hp_tr16_ps(v);
		for (int l = 0; l < nc; l++)
			_mm512_mask_storeu_ps(r->dw + (m0 + l) * kk + k0, km, v[l]);
	}
}

/* The transposed dY row yh (the zero row outside the grid) from the ring,
 * column 0 at position dkd_left(). */
static const float *dkd_get(const struct hp_colgeom *g, const float *const *ys, int nc, int64_t yh, float *ring,
			    int64_t *tags, const float *zero)
{
	int64_t wd = dkd_width(g), s = yh % DKG_SLOTS;

	if (yh < 0 || yh >= g->grid[1])
		return zero;
	if (tags[s] != yh) {
		dkg_fill(ys, nc, yh, g->grid[2], -dkd_left(g), wd, ring + s * wd * DKG_L);
		tags[s] = yh;
	}
	return ring + s * wd * DKG_L;
}

/* DKD_N outputs of one dX row, one parity: out[j] (position iw0 + 2 j) =
 * 0 + fmas over the taps (kh, kw) in order whose dY position is whole:
 * rows y[0..nr) (their kh in kh[]), columns kw = kw0, kw0 + 2, ... (nw of
 * them) at dY position b + j - (kw - kw0) / 2 (b: a position of the
 * transposed rows). */
DKG_TARGET static DKG_INLINE void dkd_group(const float *const *y, const int *kh, int nr, int kw0, int nw, int K,
					    int64_t b, const float *wt, float *out)
{
	__m512 A[DKD_N], z = _mm512_setzero_ps();

	__asm__("" : "+v"(z));
	for (int j = 0; j < DKD_N; j++)
		A[j] = z;
	for (int r = 0; r < nr; r++)
		for (int t = 0; t < nw; t++) {
			__m512 w = _mm512_loadu_ps(wt + (kh[r] * K + kw0 + 2 * t) * DKG_L);
			const float *yr = y[r] + (b - t) * DKG_L;
			for (int j = 0; j < DKD_N; j++)
				A[j] = _mm512_fmadd_ps(w, _mm512_loadu_ps(yr + j * DKG_L), A[j]);
		}
	for (int j = 0; j < DKD_N; j++)
		_mm512_storeu_ps(out + 2 * j * DKG_L, A[j]);
}

/* dX row ih of the block's item into xr[iw][16]. */
DKG_TARGET static void dkd_row(const struct hp_colgeom *g, const float *const *ys, int nc, int64_t ih, float *ring,
			       int64_t *tags, const float *zero, const float *wt, float *xr)
{
	int64_t iw = g->img[2], ph = g->pad[1], pw = g->pad[2], left = dkd_left(g);
	int K = (int)g->k[1], kh[4], nr = 0;
	const float *y[4];

	for (int k = 0; k < K; k++) /* the window rows whose dY row is whole, in order */
		if (((ih + ph - k) & 1) == 0) {
			kh[nr] = k;
			y[nr++] = dkd_get(g, ys, nc, (ih + ph - k) >> 1, ring, tags, zero);
		}
	for (int par = 0; par < 2 && par < iw; par++) {
		int kw0 = (int)((par + pw) & 1), nw = (K - kw0 + 1) / 2;
		for (int64_t i0 = par; i0 < iw; i0 += 2 * DKD_N) {
			int64_t b = ((i0 + pw - kw0) >> 1) + left;
			if (K == 5)
				dkd_group(y, kh, nr, kw0, nw, 5, b, wt, xr + i0 * DKG_L);
			else
				dkd_group(y, kh, nr, kw0, nw, 7, b, wt, xr + i0 * DKG_L);
		}
	}
}

struct dkd_run {
	const struct hp_dw *d;
	const float *dy, *w;
	float *dx, *scratch;
	int64_t blocks;
};

/* Units [b, e): (item, block of sixteen channels). */
DKG_TARGET static void dkd_range(void *arg, int64_t b, int64_t e, int tid)
{
	const struct dkd_run *r = arg;
	const struct hp_dw *d = r->d;
	const struct hp_colgeom *g = &d->g;
	int64_t wd = dkd_width(g), kk = g->kvol, iw = g->img[2], tags[DKG_SLOTS];
	float *ring = r->scratch + (size_t)tid * hp_dkd_scratch(g), *zero = ring + DKG_SLOTS * wd * DKG_L;
	float *wt = zero + wd * DKG_L, *xr = wt + (DKG_MAXKK + DKG_L) * DKG_L;
	const float *ys[DKG_L];
	float *xs[DKG_L];
	__m512 v[DKG_L];

	memset(zero, 0, (size_t)(wd * DKG_L) * sizeof *zero);
	for (int64_t u = b; u < e; u++) {
		int64_t n = u / r->blocks, c0 = u % r->blocks * DKG_L;
		int nc = (int)(d->cin - c0 < DKG_L ? d->cin - c0 : DKG_L);
		if (u == b || c0 != (u - 1) % r->blocks * DKG_L) /* the block's weights in lanes: wt[k][l] */
			for (int64_t k0 = 0; k0 < kk; k0 += DKG_L) {
				__mmask16 km = dkg_mask(k0, 0, kk);
				for (int l = 0; l < DKG_L; l++)
					v[l] = l < nc ? _mm512_maskz_loadu_ps(km, r->w + (c0 + l) * kk + k0) : _mm512_setzero_ps();
				hp_tr16_ps(v);
				for (int q = 0; q < DKG_L; q++)
					_mm512_storeu_ps(wt + (k0 + q) * DKG_L, v[q]);
			}
		for (int l = 0; l < nc; l++) {
			ys[l] = r->dy + (n * d->cin + c0 + l) * g->grid_vol;
			xs[l] = r->dx + (n * d->cin + c0 + l) * g->img_vol;
		}
		for (int i = 0; i < DKG_SLOTS; i++)
			tags[i] = -1;
		for (int64_t ih = 0; ih < g->img[1]; ih++) {
			dkd_row(g, ys, nc, ih, ring, tags, zero, wt, xr);
			for (int64_t p = 0; p < iw; p += DKG_L) { /* back to the planes */
				__mmask16 m = dkg_mask(p, 0, iw);
				for (int q = 0; q < DKG_L; q++)
					v[q] = _mm512_loadu_ps(xr + (p + q) * DKG_L);
				hp_tr16_ps(v);
				for (int l = 0; l < nc; l++)
					_mm512_mask_storeu_ps(xs[l] + ih * iw + p, m, v[l]);
			}
		}
	}
}

static void dkg_range(void *arg, int64_t b, int64_t e, int tid)
{
	const struct dkg_run *r = arg;
	const struct hp_colgeom *g = &r->d->g;
	int64_t cout = r->d->cin * r->d->mult;
	float *scratch = r->scratch + (size_t)tid * hp_dkg_scratch(g);

	if (!dkg_flat(g)) /* the zero row */
		memset(scratch + DKG_SLOTS * dkg_width(g) * DKG_L, 0, (size_t)(dkg_width(g) * DKG_L) * sizeof(float));
	else /* the padded plane's padding */
		memset(scratch, 0, (size_t)(dkg_hp(g) * dkg_wp(g) * DKG_L) * sizeof(float));
	for (int64_t i = b; i < e; i++)
		dkg_block(r, i * DKG_L, (int)(cout - i * DKG_L < DKG_L ? cout - i * DKG_L : DKG_L), scratch);
}
#endif

void hp_dkd_data(const struct hp_dw *d, const float *dy, const float *w, float *dx, float *ws, int threads,
		 struct hp_pool *pool)
{
#ifdef DKG_X86
	struct dkd_run r = { .d = d, .dy = dy, .w = w, .dx = dx, .scratch = ws,
			     .blocks = (d->cin + DKG_L - 1) / DKG_L };

	hp_conv_parallel(pool, threads, d->batch * r.blocks, dkd_range, &r);
#else
	(void)d, (void)dy, (void)w, (void)dx, (void)ws, (void)threads, (void)pool;
#endif
}

void hp_dkg_filter(const struct hp_dw *d, const float *dy, const float *x, const float *acc, float *dw, float *ws,
		   int threads, struct hp_pool *pool)
{
#ifdef DKG_X86
	int64_t ow = d->g.grid[2], rows = d->g.grid_vol / ow, urows = d->unit > 0 ? d->unit / ow : rows;
	struct dkg_run r = { .d = d, .dy = dy, .x = x, .acc = acc, .dw = dw, .scratch = ws,
			     .blocks = (d->cin * d->mult + DKG_L - 1) / DKG_L, .urows = urows > 0 ? urows : rows };

	hp_conv_parallel(pool, threads, r.blocks, dkg_range, &r);
#else
	(void)d, (void)dy, (void)x, (void)acc, (void)dw, (void)ws, (void)threads, (void)pool;
#endif
}
