/* Depthwise 3x3 and 5x5 forward at stride 2 on narrow planes (output rows
 * of at most 15 columns, AVX-512F): the lanes of a vector are output
 * positions of one channel, one output row of up to 16 - (K - 1) / 2
 * columns or two rows of up to 8 - (K - 1) / 2, and no transposes.
 *
 * Why: conv_dwc.c's flat kernel (3x3) and conv_dwkz.c (5x5) put sixteen
 * channels in the lanes, which costs a 16 x 16 transpose (about 70 FMAs'
 * time) per sixteen input positions in and per sixteen outputs out: at
 * stride 2 an output takes four input positions, so on MobileNetV2's
 * 14x14 -> 7x7 the transposes are most of the node (13.7 GFLOP/s per
 * CPU-second, 13% of sgemm).  Here each input row of a channel goes once
 * into a small buffer, split into its even and odd padded columns (one
 * permute), rows of even and odd index apart: then the taps (kh, kw) of
 * the outputs in a vector are one contiguous load (kw even: the even
 * columns from kw / 2 on, kw odd: the odd ones), two output rows of the
 * same vector reading neighbouring buffer rows.  Lanes past a row's
 * outputs compute what no one stores.
 *
 * Determinism: every output is the chain bias + w(0,0) x + ... of fused
 * multiply-adds in (kh, kw) order, taps in the padding as w * 0 read from
 * the buffer's zeros: conv_dw3.c's, conv_dwc.c's, conv_dwk.c's and
 * conv_dwkz.c's chain, so the same bits; it depends on the output's own
 * window alone, so planes among workers and bands of rows (halo rows the
 * same image rows, the band's top pad the same zeros) give the whole
 * node's bits.  The epilogue runs per plane after it (hp_epi_span), as
 * conv_dw.c's planes do.
 *
 * The stride-2 data gradient of 3x3 windows on narrow planes is here too
 * (below: lanes along a dX row, from a copy of dY with every element
 * twice). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/conv_impl.h"
#include "kernels/cpu.h"
#include "kernels/fused_impl.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define DWS_X86 1
#define DWS_TARGET __attribute__((target("avx512f,avx512dq,avx2,fma")))
#define DWS_INLINE __attribute__((always_inline)) inline
#endif

#define DWS_MAX_OH 16 /* output rows of a plane at most (the buffer on the stack) */
#define DWS_V 4       /* vectors of outputs at once (independent FMA chains) */
#define DWS_UNITS_PER_THREAD 8

static int dws_mode;

void hp_dws_set_mode(int mode)
{
	dws_mode = mode;
}

/* Floats of a buffer row (the even or the odd padded columns of one
 * padded row): 8 where two output rows share a vector, else 16; 0: g is
 * not this kernel's. */
static int dws_h(const struct hp_colgeom *g)
{
	int64_t r = (g->k[2] - 1) / 2, ow = g->grid[2];

	return ow <= 8 - r ? 8 : ow <= 16 - r ? 16 : 0;
}

int hp_dws_eligible(const struct hp_colgeom *g)
{
	return hp_cpu_avx512_fma() && g->img[0] == 1 && g->k[0] == 1 && g->k[1] == g->k[2] &&
	       (g->k[1] == 3 || g->k[1] == 5) && g->stride[1] == 2 && g->stride[2] == 2 && g->dil[1] == 1 &&
	       g->dil[2] == 1 && g->pad[1] >= 0 && g->pad[2] >= 0 && g->pad[2] < g->k[2] && g->grid[1] >= 1 &&
	       g->grid[1] <= DWS_MAX_OH && dws_h(g) > 0;
}

/* Auto: 3x3 only.  MobileNetV2's 14 -> 7 (576 channels) 35 -> 23 us and
 * 28 -> 14 (192) 31.5 -> 22.8 us against conv_dwc.c's flat kernel; the
 * 5x5 windows ran slower than conv_dwkz.c (12 -> 6, 96 channels, batch 2:
 * 8.5 against 11.4 us; 24 -> 12, 144: 24.7 against 28.3): 25 weights and
 * the accumulators fill the registers, GCC reloads weights.  (Two 3x3
 * planes interleaved, six FMA chains where a 6x6 plane has three, gained
 * 2% on 12 -> 6: not latency there, not kept.) */
int hp_dws_wanted(const struct hp_colgeom *g)
{
	return dws_mode >= 0 && hp_dws_eligible(g) && (dws_mode > 0 || g->k[1] == 3);
}

#ifdef DWS_X86
/* Buffer rows per list (one list per row parity and column parity): the
 * vectors' rows rounded up to whole vectors, the window's extra rows,
 * and one for loads that run past a list's last row. */
static int64_t dws_rows(const struct hp_colgeom *g, int h)
{
	int64_t p = 16 / h;

	int64_t n = (g->grid[1] + p - 1) / p * p + (g->k[1] - 1) / 2 + 1;

	return (n + p - 1) / p * p; /* whole pairs for dws_fill_h */
}

#define DWS_LIST (DWS_MAX_OH + 2 + 2) * 16 /* floats of a list at most */

/* Lanes l of a load at image column c0 + l that lie in [0, n). */
static inline __mmask16 dws_cols(int64_t c0, int64_t n)
{
	int64_t lo = -c0, hi = n - c0;

	lo = lo < 0 ? 0 : lo > 16 ? 16 : lo;
	hi = hi < 0 ? 0 : hi > 16 ? 16 : hi;
	return (__mmask16)(((1u << hi) - 1) & ~((1u << lo) - 1));
}

/* Clip(v) as conv_dw3.c's dw3_clip (a compare and a select each side, NaN
 * passes), then the lanes outside m as 0 (the padding stays 0). */
DWS_TARGET static inline __m512 dws_clip(__m512 v, const float *clip, __mmask16 m)
{
	if (!clip) /* the masked load's zeros */
		return v;
	__m512 lo = _mm512_set1_ps(clip[0]), hi = _mm512_set1_ps(clip[1]);
	__mmask16 gt = _mm512_cmp_ps_mask(v, hi, _CMP_GT_OQ), lt = _mm512_cmp_ps_mask(v, lo, _CMP_LT_OQ);

	return _mm512_maskz_mov_ps(m, _mm512_mask_mov_ps(_mm512_mask_mov_ps(v, gt, hi), lt, lo));
}

/* Image row xr (NULL: a row of the padding) as a vector of its padded
 * columns c0 .. c0 + 15 (image column c - p), m the lanes inside the
 * image (masked lanes are not read). */
DWS_TARGET static DWS_INLINE __m512 dws_load(const float *xr, int64_t c0, int64_t p, __mmask16 m, const float *clip)
{
	return xr ? dws_clip(_mm512_maskz_loadu_ps(m, xr + c0 - p), clip, m) : _mm512_setzero_ps();
}

/* One store of dws_fill_h: buffer floats at dst from image rows a and b
 * (offsets in the plane; -1: a row of the padding). */
struct dws_cp {
	int64_t a, b, dst;
};

/* dws_fill_h's stores for g and H, the rows wholly in the padding left
 * out (the caller zeroed them once); returns how many. */
static int dws_plan(const struct hp_colgeom *g, int h, struct dws_cp *cp)
{
	int64_t rows = dws_rows(g, h), lst = rows * h, n = g->img[1], w = g->img[2], step = h == 8 ? 2 : 1;
	int k = 0;

	for (int a = 0; a < 2; a++)
		for (int64_t r = 0; r < rows; r += step) {
			int64_t ih = 2 * r + a - g->pad[1], ih2 = ih + 2 * (step - 1);
			if (ih2 < 0 || ih >= n)
				continue;
			cp[k].a = ih >= 0 ? ih * w : -1;
			cp[k].b = step == 1 ? cp[k].a : ih2 < n ? ih2 * w : -1;
			cp[k++].dst = 2 * a * lst + r * h;
		}
	return k;
}

/* Input plane x into buf's four lists [row parity][column parity][rows][H]:
 * buffer row r of list (a, .) is padded row 2 r + a, its even padded
 * columns in list (a, 0), its odd ones in (a, 1).  H = 8: two buffer rows
 * from two image rows at once (one permute and one store per list and
 * pair, where a row alone took a permute and two half stores); 16: one
 * row's first 32 padded columns. */
DWS_TARGET static DWS_INLINE void dws_fill_h(const int H, const struct dws_cp *cp, int ncp, int64_t lst,
					     const float *x, int64_t p, const __mmask16 *m, const float *clip,
					     float *buf)
{
	const __m512i ie = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
	const __m512i io = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);

	for (int k = 0; k < ncp; k++) {
		const float *xa = cp[k].a >= 0 ? x + cp[k].a : NULL, *xb = cp[k].b >= 0 ? x + cp[k].b : NULL;
		__m512 u = dws_load(xa, 0, p, m[0], clip);
		__m512 v = H == 8 ? dws_load(xb, 0, p, m[0], clip) : dws_load(xb, 16, p, m[1], clip);
		_mm512_storeu_ps(buf + cp[k].dst, _mm512_permutex2var_ps(u, ie, v));
		_mm512_storeu_ps(buf + cp[k].dst + lst, _mm512_permutex2var_ps(u, io, v));
	}
}

/* N vectors of outputs (P = 16 / H output rows each) from vector v0 on:
 * tap (kh, kw) of every lane is one load from list (kh & 1, kw & 1), row
 * kh / 2 below the vector's first, column kw / 2 on; the chains in (kh,
 * kw) order from the bias. */
DWS_TARGET static DWS_INLINE void dws_vecs(const int K, const int H, const int N, const float *buf, int64_t lst,
					   const __m512 *wv, float bias, int64_t v0, __m512 *acc)
{
	const int P = 16 / H;

	for (int j = 0; j < N; j++)
		acc[j] = _mm512_set1_ps(bias);
#pragma GCC unroll 25
	for (int t = 0; t < K * K; t++) {
		int kh = t / K, kw = t % K;
		const float *s = buf + (2 * (kh & 1) + (kw & 1)) * lst + (v0 * P + kh / 2) * H + kw / 2;
#pragma GCC unroll 4
		for (int j = 0; j < N; j++)
			acc[j] = _mm512_fmadd_ps(wv[t], _mm512_loadu_ps(s + j * P * H), acc[j]);
	}
}

/* Vector v of the plane's outputs to y (ow columns, oh rows): its row's
 * first ow lanes, or (two rows a vector) lanes 0 .. ow - 1 and 8 .. 8 +
 * ow - 1 moved together, the second row only where the plane has it. */
DWS_TARGET static DWS_INLINE void dws_put(const int H, __m512 v, __m512i idx, float *y, int64_t vi, int64_t oh,
					  int64_t ow)
{
	if (H == 16) {
		_mm512_mask_storeu_ps(y + vi * ow, (__mmask16)((1u << ow) - 1), v);
		return;
	}
	int64_t r = 2 * vi, n = r + 1 < oh ? 2 * ow : ow;
	_mm512_mask_storeu_ps(y + r * ow, (__mmask16)((1u << n) - 1), _mm512_permutexvar_ps(idx, v));
}

DWS_TARGET static DWS_INLINE void dws_plane_kh(const int K, const int H, const struct hp_colgeom *g,
					       const float *buf, const float *w, float bias, float *y)
{
	int64_t oh = g->grid[1], ow = g->grid[2], lst = dws_rows(g, H) * H, nv = (oh + 16 / H - 1) / (16 / H);
	__m512 wv[25], acc[DWS_V];
	const __m512i iota = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
	/* lanes 8 .. 8 + ow - 1 after the first row's ow (in registers: a
	 * vector loaded from sixteen scalar stores waits for all of them) */
	__m512i idx = _mm512_mask_add_epi32(iota, (__mmask16)~((1u << ow) - 1), iota, _mm512_set1_epi32(8 - (int)ow));
	int64_t v0 = 0;

#pragma GCC unroll 25
	for (int t = 0; t < K * K; t++)
		wv[t] = _mm512_set1_ps(w[t]);
	for (; v0 + DWS_V <= nv; v0 += DWS_V) {
		dws_vecs(K, H, DWS_V, buf, lst, wv, bias, v0, acc);
		for (int j = 0; j < DWS_V; j++)
			dws_put(H, acc[j], idx, y, v0 + j, oh, ow);
	}
	switch (nv - v0) {
	case 3:
		dws_vecs(K, H, 3, buf, lst, wv, bias, v0, acc);
		break;
	case 2:
		dws_vecs(K, H, 2, buf, lst, wv, bias, v0, acc);
		break;
	case 1:
		dws_vecs(K, H, 1, buf, lst, wv, bias, v0, acc);
		break;
	default:
		return;
	}
	for (int j = 0; j < nv - v0; j++)
		dws_put(H, acc[j], idx, y, v0 + j, oh, ow);
}

struct dws_run {
	const struct hp_dw *d;
	const float *x, *w, *b;
	float *y;
};

/* The input plane of output plane i (flat (item, output channel)). */
static const float *dws_src(const struct hp_dw *d, const float *x, int64_t i)
{
	int64_t cout = d->cin * d->mult, n = i / cout, c = i % cout / d->mult;

	return x + (n * d->cin + c) * (d->xstride ? d->xstride : d->g.img_vol);
}

#define DWS_MAX_CP (2 * (DWS_MAX_OH + 4))

/* Planes [b, e): the next plane's input goes into the other buffer before
 * this plane's taps, so that its stores have long retired when the taps
 * load them (a load spanning two stores still in flight waits for both). */
DWS_TARGET static DWS_INLINE void dws_range_kh(const int K, const int H, const struct dws_run *r, int64_t b,
					       int64_t e)
{
	const struct hp_dw *d = r->d;
	const struct hp_colgeom *g = &d->g;
	int64_t cout = d->cin * d->mult, gv = g->grid_vol, lst = dws_rows(g, H) * H, p = g->pad[2];
	float buf[2][4 * DWS_LIST + 16] __attribute__((aligned(64)));
	__mmask16 m[2] = { dws_cols(-p, g->img[2]), dws_cols(16 - p, g->img[2]) };
	struct dws_cp cp[DWS_MAX_CP];
	int ncp = dws_plan(g, H, cp), cur = 0;

	memset(buf, 0, sizeof buf); /* the rows in the padding, once for all planes */
	if (b < e)
		dws_fill_h(H, cp, ncp, lst, dws_src(d, r->x, b), p, m, d->xclip, buf[0]);
	for (int64_t i = b; i < e; i++) {
		int next = i + 1 < e && dws_src(d, r->x, i + 1) != dws_src(d, r->x, i);
		if (next)
			dws_fill_h(H, cp, ncp, lst, dws_src(d, r->x, i + 1), p, m, d->xclip, buf[cur ^ 1]);
		dws_plane_kh(K, H, g, buf[cur], r->w + i % cout * g->kvol, r->b ? r->b[i % cout] : 0.0f,
			     r->y + i * gv);
		if (d->epi) /* the fused epilogue while the plane is in cache */
			hp_epi_span(d->epi, r->y, d->addend, i * gv, (i + 1) * gv);
		cur ^= next;
	}
}

DWS_TARGET static void dws_range(void *arg, int64_t b, int64_t e, int tid)
{
	const struct dws_run *r = arg;
	int h = dws_h(&r->d->g);

	(void)tid;
	if (r->d->g.k[1] == 3 && h == 8)
		dws_range_kh(3, 8, r, b, e);
	else if (r->d->g.k[1] == 3)
		dws_range_kh(3, 16, r, b, e);
	else if (h == 8)
		dws_range_kh(5, 8, r, b, e);
	else
		dws_range_kh(5, 16, r, b, e);
}

/* Planes [0, planes) through fn: stolen among the pool's workers in runs
 * of about DWS_UNITS_PER_THREAD a worker, or on the caller alone. */
static void dws_planes(struct hp_pool *pool, int64_t planes, hp_range_fn fn, void *arg)
{
	int saved, threads = hp_conv_threads_enter(pool, &saved);
	int64_t su = planes / ((int64_t)threads * DWS_UNITS_PER_THREAD);

	if (threads > 1)
		hp_conv_steal(pool, threads, planes, su < 1 ? 1 : su, fn, arg);
	else
		fn(arg, 0, planes, 0);
	hp_conv_threads_leave(saved);
}

void hp_dws_forward(const struct hp_dw *d, const float *x, const float *w, const float *b, float *y,
		    struct hp_pool *pool)
{
	struct dws_run r = { .d = d, .x = x, .w = w, .b = b, .y = y };

	if (d->scratch) /* one thread's call: the caller alone */
		pool = NULL;
	dws_planes(pool, d->batch * d->cin * d->mult, dws_range, &r);
}
/* ---- the data gradient at stride 2 (3x3, multiplier 1) ----
 * dX element (i, j) is the chain from 0 of fused multiply-adds over the
 * taps (kh, kw) whose dY position ((i + p - kh) / 2, (j + q - kw) / 2) is
 * whole, in (kh, kw) order, those outside dY as w * 0 (conv_dw3.c's
 * stride-2 dX rows and conv_dwc.c's chain).  Lanes along a dX row: a row
 * of dY copied with every element twice (u[2 + m] = dY[floor(m / 2)],
 * zeros outside dY) makes tap kw = 0 of the lanes with j + q even and
 * tap kw = 1 of the others one load (u from j + q), tap kw = 2 of the
 * even ones the load two floats before, added under their mask (the odd
 * lanes keep their sum: no rounding), the first load's weights w(kh, 0)
 * and w(kh, 1) alternating by lane.  So each lane's chain is its own in
 * (kh, kw) order, and no phase of dX is interleaved back: the copy is two
 * permutes per dY row, where conv_dwc.c's flat kernel transposed dY in
 * and dX out, 16 x 16 at a time. */

#define DWSU_W 48    /* floats of a doubled dY row: 2 zeros, 2 ow, zeros */
#define DWSU_ROWS 20 /* a zero row, dY's rows, the zero rows below */

int hp_dws_data_eligible(const struct hp_dw *d)
{
	const struct hp_colgeom *g = &d->g;
	int64_t p = g->pad[1], q = g->pad[2];

	return hp_cpu_avx512_fma() && d->mult == 1 && g->img[0] == 1 && g->k[0] == 1 && g->k[1] == 3 &&
	       g->k[2] == 3 && g->stride[1] == 2 && g->stride[2] == 2 && g->dil[1] == 1 && g->dil[2] == 1 &&
	       p >= 0 && q >= 0 && q <= 2 && g->img[2] <= 32 && g->grid[2] <= 15 && g->img[1] <= 32 &&
	       g->grid[1] + 2 <= DWSU_ROWS && (g->img[1] - 1 + p) / 2 + 2 <= DWSU_ROWS;
}

/* Auto: dX rows of 14 columns and more (a driver of hp_dw_data alone, CPU
 * time, against conv_dwc.c's flat kernel: 28 x 28 from 14 x 14, 192
 * channels, 36-38 -> 25 us; 14 x 14 from 7 x 7, 576: 28 -> 26; but 12 x 12
 * from 6 x 6, 240: 8.7 -> 9.6, twelve of sixteen lanes). */
int hp_dws_data_wanted(const struct hp_dw *d)
{
	return dws_mode >= 0 && hp_dws_data_eligible(d) && (dws_mode > 0 || d->g.img[2] >= 14);
}

/* dY plane y (oh rows of ow) into buffer rows 1 .. oh, each element
 * twice from float 2 on; the other rows stay the zeros written once. */
DWS_TARGET static DWS_INLINE void dwsu_fill(const float *y, int64_t oh, int64_t ow, float *buf)
{
	const __m512i i1 = _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6);
	const __m512i i2 = _mm512_setr_epi32(7, 7, 8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13, 14, 14);
	const __m512i i3 = _mm512_set1_epi32(15);
	__mmask16 m = (__mmask16)((1u << ow) - 1);

	for (int64_t r = 0; r < oh; r++) {
		__m512 v = _mm512_maskz_loadu_ps(m, y + r * ow);
		float *u = buf + (1 + r) * DWSU_W;
		_mm512_storeu_ps(u, _mm512_maskz_permutexvar_ps(0xfffc, i1, v));
		_mm512_storeu_ps(u + 16, _mm512_permutexvar_ps(i2, v));
		_mm512_storeu_ps(u + 32, _mm512_maskz_permutexvar_ps(0x0003, i3, v));
	}
}

/* N dX rows of row phase rho (NK taps kh: 0 and 2, or 1) from phase row
 * u0 on, NC vectors of sixteen columns each. */
DWS_TARGET static DWS_INLINE void dwsu_rows(const int NK, const int N, const int NC, const float *buf,
					    const __m512 *wa, const __m512 *w2, __mmask16 ev, int64_t i0, int64_t u0,
					    int64_t p, int64_t q, float *dx, int64_t iw)
{
	__m512 acc[4][2];

	for (int j = 0; j < N; j++)
		for (int c = 0; c < NC; c++)
			acc[j][c] = _mm512_setzero_ps();
#pragma GCC unroll 2
	for (int k = 0; k < NK; k++) {
		int kh = NK == 2 ? 2 * k : 1;
#pragma GCC unroll 4
		for (int j = 0; j < N; j++) {
			int64_t i = i0 + 2 * (u0 + j);
			const float *row = buf + ((i + p - kh) / 2 + 1) * DWSU_W + 2 + q;
#pragma GCC unroll 2
			for (int c = 0; c < NC; c++) {
				acc[j][c] = _mm512_fmadd_ps(wa[kh], _mm512_loadu_ps(row + 16 * c), acc[j][c]);
				acc[j][c] = _mm512_mask3_fmadd_ps(w2[kh], _mm512_loadu_ps(row + 16 * c - 2), acc[j][c], ev);
			}
		}
	}
	for (int j = 0; j < N; j++) {
		float *o = dx + (i0 + 2 * (u0 + j)) * iw;
		for (int c = 0; c < NC; c++)
			_mm512_mask_storeu_ps(o + 16 * c, (__mmask16)(iw - 16 * c >= 16 ? 0xffff : (1u << (iw - 16 * c)) - 1),
					      acc[j][c]);
	}
}

/* The rows of phase rho, four at a time. */
DWS_TARGET static DWS_INLINE void dwsu_phase(const int NK, const int NC, const float *buf, const __m512 *wa,
					     const __m512 *w2, __mmask16 ev, int64_t i0, int64_t nu, int64_t p, int64_t q,
					     float *dx, int64_t iw)
{
	int64_t u0 = 0;

	for (; u0 + 4 <= nu; u0 += 4)
		dwsu_rows(NK, 4, NC, buf, wa, w2, ev, i0, u0, p, q, dx, iw);
	switch (nu - u0) {
	case 3:
		dwsu_rows(NK, 3, NC, buf, wa, w2, ev, i0, u0, p, q, dx, iw);
		break;
	case 2:
		dwsu_rows(NK, 2, NC, buf, wa, w2, ev, i0, u0, p, q, dx, iw);
		break;
	case 1:
		dwsu_rows(NK, 1, NC, buf, wa, w2, ev, i0, u0, p, q, dx, iw);
		break;
	default:
		break;
	}
}

DWS_TARGET static DWS_INLINE void dwsu_plane(const int NC, const struct hp_colgeom *g, const float *buf,
					     const float *w, float *dx)
{
	int64_t p = g->pad[1], q = g->pad[2], ih = g->img[1], iw = g->img[2];
	/* lanes with j + q even: kw 0 and 2; the others kw 1 */
	__mmask16 ev = (__mmask16)(q & 1 ? 0xaaaa : 0x5555);
	__m512 wa[3], w2[3];

	for (int kh = 0; kh < 3; kh++) {
		wa[kh] = _mm512_mask_blend_ps(ev, _mm512_set1_ps(w[3 * kh + 1]), _mm512_set1_ps(w[3 * kh]));
		w2[kh] = _mm512_set1_ps(w[3 * kh + 2]);
	}
	for (int rho = 0; rho < 2; rho++) {
		int64_t i0 = (rho - p) & 1, nu = ih > i0 ? (ih - i0 + 1) / 2 : 0;
		if (rho == 0)
			dwsu_phase(2, NC, buf, wa, w2, ev, i0, nu, p, q, dx, iw);
		else
			dwsu_phase(1, NC, buf, wa, w2, ev, i0, nu, p, q, dx, iw);
	}
}

struct dwsu_run {
	const struct hp_dw *d;
	const float *dy, *w;
	float *dx;
};

/* Planes [b, e), the next plane's dY copied before this plane's taps (as
 * dws_range_kh does). */
DWS_TARGET static DWS_INLINE void dwsu_range_c(const int NC, const struct dwsu_run *r, int64_t b, int64_t e)
{
	const struct hp_dw *d = r->d;
	int64_t oh = d->g.grid[1], ow = d->g.grid[2];
	float buf[2][DWSU_ROWS * DWSU_W] __attribute__((aligned(64)));

	memset(buf, 0, sizeof buf);
	if (b < e)
		dwsu_fill(r->dy + b * d->g.grid_vol, oh, ow, buf[0]);
	for (int64_t i = b; i < e; i++) {
		if (i + 1 < e)
			dwsu_fill(r->dy + (i + 1) * d->g.grid_vol, oh, ow, buf[(i - b + 1) & 1]);
		dwsu_plane(NC, &d->g, buf[(i - b) & 1], r->w + i % d->cin * 9, r->dx + i * d->g.img_vol);
	}
}

DWS_TARGET static void dwsu_range(void *arg, int64_t b, int64_t e, int tid)
{
	const struct dwsu_run *r = arg;

	(void)tid;
	if (r->d->g.img[2] <= 16)
		dwsu_range_c(1, r, b, e);
	else
		dwsu_range_c(2, r, b, e);
}

void hp_dws_data(const struct hp_dw *d, const float *dy, const float *w, float *dx, struct hp_pool *pool)
{
	struct dwsu_run r = { .d = d, .dy = dy, .w = w, .dx = dx };

	dws_planes(pool, d->batch * d->cin, dwsu_range, &r);
}
#else
void hp_dws_forward(const struct hp_dw *d, const float *x, const float *w, const float *b, float *y,
		    struct hp_pool *pool)
{
	(void)d, (void)x, (void)w, (void)b, (void)y, (void)pool;
}

int hp_dws_data_eligible(const struct hp_dw *d)
{
	(void)d;
	return 0;
}

int hp_dws_data_wanted(const struct hp_dw *d)
{
	(void)d;
	return 0;
}

void hp_dws_data(const struct hp_dw *d, const float *dy, const float *w, float *dx, struct hp_pool *pool)
{
	(void)d, (void)dy, (void)w, (void)dx, (void)pool;
}
#endif
