/* FusedInvRes (domain ai.hpdlf): MobileNetV2's inverted residual block as
 * one node, made by exec/fuse_ir.c from the fused chain
 *
 *   E = Clip(Conv1x1(X, W1, B1))          expansion
 *   D = Clip(DepthwiseConv3x3(E, Wd, Bd))  stride 1 or 2
 *   Y = Conv1x1(D, W2, B2) [+ addend]      projection (the residual)
 *
 * inputs X, W1, B1, Wd, Bd, W2, B2 [, addend [, W1^T, W2^T]]; W1 and B1 absent: a block
 * without expansion (E = X, MobileNetV2's first; its depthwise rows read X
 * in place and the bands cost no halo).  Attributes strides (2),
 * pads (4: top, left, bottom, right) of the depthwise Conv, expand_min,
 * expand_max, dw_min, dw_max (the two Clips).
 *
 * Why: at 112x112 and 56x56 the expanded tensors E and D are 6x the
 * block's input and output; written by one node and read by the next they
 * went through memory, and those blocks ran at about 20 GFLOP/s.  Here a
 * worker takes a run of output rows and walks it in bands of a few rows:
 * the expansion rows the band needs (a halo of one or two rows, carried
 * over from the band before instead of recomputed), the band's depthwise
 * rows, then its projection, all in buffers of the worker that stay in
 * its cache.  E and D never exist whole.
 *
 * Planes below FIR_CHAN_PLANE (MobileNetV2's 7x7 blocks) run by blocks
 * of channels instead: a band of rows there is most of the plane, and the
 * rows above and below it that the depthwise rows read would be expanded
 * twice (once per thread, 2 rows of 7).  A worker takes a block of
 * FIR_CB expanded channels, computes its whole E plane in its buffer and
 * the depthwise planes from it into D (the node's workspace: 188 KiB at
 * 960 x 7 x 7); then the projection's rows are cut among the workers.
 * Two parallel runs instead of the unfused nodes' three, each stealing
 * (hp_parallel_steal): without polling each run waits for a worker's
 * wake-up.
 *
 * With AVX-512, and W1 and W2 also given transposed (inputs 8 and 9,
 * [cin][ce] and [ce][cout], each row rounded up to 16 with zeros: made
 * once by exec/fuse_pack.c), blocks whose input plane has at most 112x112
 * positions run by blocked channels (fir_bk_*, below): E and D as
 * [position][16 channels], no transposes in the depthwise stage.
 *
 * Bits: each stage is hpdlf's own kernel for that node, whose outputs are
 * each one fixed chain of fused multiply-adds: hp_pw_gemm (conv_pw.c's
 * chain over k from the bias, whatever the columns of a call), the
 * depthwise kernels on a band of rows (bitwise the whole plane,
 * tests/kernels/test_conv_dw.c) and fused_epi.c's Clip and Add.  So the
 * block gives the unfused nodes' bits, for any band height and thread
 * count (tests/kernels/test_fused_ir.c). */
#include <errno.h>
#include <float.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "hpdlf/error.h"
#include "kernels/conv_impl.h"
#include "kernels/fused_impl.h"
#include "kernels/threadpool.h"

/* Output rows per band.  Each band calls the three kernels once, whose
 * fixed costs per call (the depthwise kernels' row buffers, a product's
 * tails) grew past what the cache saves below about 8 rows (MobileNetV2's
 * blocks, one thread, CPU time: 1 row 10-40% slower than 8, 16 to 56 rows
 * no faster); at 8 the window of expanded rows is 0.3 to 1.5 MiB. */
#define FIR_ROWS 8
/* Output planes below this many positions run by blocks of channels (14x14
 * and up: bands of rows, measured 10-30% faster than the unfused nodes on
 * one thread, exec/fuse_ir.c). */
#define FIR_CHAN_PLANE 196
/* Input planes up to this many positions run by blocked channels where
 * W1 and W2 come transposed (AVX-512; MobileNetV2's blocks, one thread,
 * CPU time: 15-45% less than bands of rows, 19% at 112x112 with stride
 * 2; bands of rows whose E rows stay in L2 gained nothing there). */
#define FIR_BLK_PLANE 12544
/* Expanded channels per block: whole micro-tiles of conv_pw.c (6 rows)
 * and blocks of conv_dwc.c (8 channels); E's block of a 7x7 plane is
 * 9.4 KiB. */
#define FIR_CB 48
/* Projection rows (output channels) per tile: conv_pw.c's AVX-512 tiles
 * of a 7x7 plane (49 columns) are 8 rows; and tiles per stolen unit. */
#define FIR_PROJ_ROWS 8
#define FIR_PROJ_TILES 2

struct fir {
	int64_t n, cin, ce, cout, h, w, oh, ow;
	int64_t s, pt, pl;          /* depthwise stride, top and left pads */
	int64_t rows;               /* output rows per band */
	int64_t ecap;               /* E rows the window holds (fir_ecap) */
	struct hp_epi e1, e2, e3;   /* Clip of E, Clip of D, the projection's Add */
	float clip1[2];             /* e1 as the depthwise kernels apply it to E (hp_dw.xclip) */
	size_t dws;                 /* floats of the depthwise kernels' scratch */
	size_t per_thread;          /* floats of a worker's buffers */
	int expand;                 /* 0: no expansion (W1 absent), E is X */
	int chan;                   /* by blocks of channels (FIR_CHAN_PLANE) */
	size_t dsz;                 /* chan: floats of D at the workspace's start */
	struct hp_colgeom gfull;    /* chan: the depthwise geometry of the whole plane */
	int blk;                    /* chan by blocked channels (fir_bk_*): W1, W2 transposed given */
	int64_t cep, coutp;         /* blk: ce and cout rounded up to FIR_BV */
	int64_t hp, wp;             /* blk: E's padded plane */
	size_t bdsz, bper;          /* blk: floats of D, and of a worker's E block and tile */
};

static int64_t band_rows_set, stall_us;
static int mode_set;

void hp_fir_set_mode(int mode)
{
	mode_set = mode;
}

void hp_fir_set_band_rows(int64_t rows)
{
	band_rows_set = rows;
}

void hp_fir_set_stall_us(int64_t us)
{
	stall_us = us;
}

int hp_fir_available(void)
{
	return hp_pw_available() && hp_dot_available();
}

/* E rows the window holds: a band's and the next band's new ones, so
 * that the halo moves to the window's start every other band. */
static int64_t fir_ecap(const struct fir *f, int64_t rows)
{
	return (rows - 1) * f->s + 3 + rows * f->s;
}

static size_t fir_floats(const struct fir *f, int64_t rows)
{
	return (size_t)(f->ce * (fir_ecap(f, rows) * f->w + rows * f->ow)) + f->dws;
}

/* The depthwise geometry of a band: E rows [e0, e0 + erows) read for
 * output rows [r0, r0 + rows), pad_top of them above the image. */
static void fir_geom(const struct fir *f, int64_t erows, int64_t rows, int64_t pad_top, struct hp_colgeom *g)
{
	memset(g, 0, sizeof *g);
	g->img[0] = g->grid[0] = g->k[0] = g->stride[0] = g->dil[0] = 1;
	g->img[1] = erows, g->img[2] = f->w;
	g->grid[1] = rows, g->grid[2] = f->ow;
	g->k[1] = g->k[2] = 3;
	g->stride[1] = g->stride[2] = f->s;
	g->dil[1] = g->dil[2] = 1;
	g->pad[1] = pad_top, g->pad[2] = f->pl;
	hp_colgeom_finish(g);
}

/* A worker's window of E rows ([ce][ecap][w]) of item `item`: buffer
 * row 0 holds image row base, rows [base, top) are computed; s: the
 * depthwise kernels' scratch. */
struct fir_walk {
	float *e, *d, *s;
	int64_t item, base, top;
};

#define FIR_MAX_THREADS 8 /* hp_conv_ws_threads()'s bound */

struct fir_run {
	const struct fir *f;
	const float *x, *w1, *b1, *wd, *bd, *w2, *b2, *add;
	const float *w1t, *w2t;     /* blk: W1 as [cin][cep], W2 as [ce][coutp] (exec/fuse_pack.c) */
	float *y, *ws;
	int64_t bands;              /* bands per item */
	int64_t cblocks, ptiles;    /* chan: channel blocks, projection micro-tiles per item */
	int64_t runs;               /* blk: runs of position tiles per projection block */
	struct fir_walk walk[FIR_MAX_THREADS]; /* each tid's window */
};

/* E rows [e0, e1) of item n in the window: the rows the bands before left
 * there (moved to its start when the window is full), the others computed
 * and clipped.  Returns E row e0. */
static const float *fir_expand(const struct fir_run *r, struct fir_walk *k, int64_t n, int64_t e0, int64_t e1)
{
	const struct fir *f = r->f;
	int64_t ld = f->ecap * f->w, from = e0;

	if (k->base >= 0 && k->base <= e0 && k->top > e0) { /* the halo computed before */
		from = k->top < e1 ? k->top : e1;
		if (e1 - k->base > f->ecap) {
			for (int64_t m = 0; m < f->ce; m++)
				memmove(k->e + m * ld, k->e + m * ld + (e0 - k->base) * f->w,
					(size_t)((from - e0) * f->w) * sizeof(float));
			k->base = e0;
		}
	} else {
		k->base = e0;
		k->top = e0;
	}
	if (from < e1) {
		/* E's Clip is applied as the depthwise kernels read it (fir_band):
		 * a pass of its own over the window cost 10% of a 56x56 block,
		 * the window being larger than L2 there */
		hp_pw_gemm(f->ce, (e1 - from) * f->w, f->cin, r->w1, f->cin, r->x + (n * f->cin * f->h + from) * f->w,
			   f->h * f->w, r->b1, k->e + (from - k->base) * f->w, ld);
	}
	k->top = e1 > k->top ? e1 : k->top;
	return k->e + (e0 - k->base) * f->w;
}

/* Output rows [r0, r1) of item n: expansion, depthwise rows, projection. */
static void fir_band(const struct fir_run *r, struct fir_walk *k, int64_t n, int64_t r0, int64_t r1)
{
	const struct fir *f = r->f;
	int64_t lo = r0 * f->s - f->pt, hi = (r1 - 1) * f->s - f->pt + 3;
	int64_t e0 = lo < 0 ? 0 : lo, e1 = hi > f->h ? f->h : hi, cols = (r1 - r0) * f->ow;
	struct hp_dw d = { .batch = 1, .cin = f->ce, .mult = 1, .epi = &f->e2, .xstride = f->ecap * f->w,
			   .xclip = f->clip1, .scratch = k->s };
	float *y = r->y + n * f->cout * f->oh * f->ow;
	const float *e;

	if (f->expand) {
		e = fir_expand(r, k, n, e0, e1);
	} else { /* the depthwise rows read X in place */
		e = r->x + (n * f->cin * f->h + e0) * f->w;
		d.xstride = f->h * f->w, d.xclip = NULL;
	}

	fir_geom(f, e1 - e0, r1 - r0, e0 - lo, &d.g);
	hp_dw_forward(&d, e, r->wd, r->bd, k->d, NULL);
	/* the residual Add in the projection's registers (conv_pw.c's
	 * epilogue: y + add, as hp_epi_span) */
	if (f->e3.add != HP_EPI_ADD_NONE && r->add &&
	    hp_pw_gemm_epi(f->cout, cols, f->ce, r->w2, f->ce, k->d, cols, r->b2, y + r0 * f->ow, f->oh * f->ow,
			   &f->e3, r->add + (y - r->y) + r0 * f->ow))
		return;
	hp_pw_gemm(f->cout, cols, f->ce, r->w2, f->ce, k->d, cols, r->b2, y + r0 * f->ow, f->oh * f->ow);
	for (int64_t m = 0; m < f->cout && f->e3.add != HP_EPI_ADD_NONE && r->add; m++) {
		int64_t off = (n * f->cout + m) * f->oh * f->ow + r0 * f->ow;
		hp_epi_span(&f->e3, r->y, r->add, off, off + cols);
	}
}

/* Units are (item, band of output rows), bands of nearly equal heights;
 * a worker's window carries the halo over from one band to the next it
 * takes when they follow each other (its own share, front to back), and
 * starts afresh on a band taken from another share's back. */
static void fir_range(void *arg, int64_t b, int64_t e, int tid)
{
	struct fir_run *r = arg;
	const struct fir *f = r->f;
	struct fir_walk *k = &r->walk[tid];

	if (stall_us > 0 && tid == 1 && k->item == -1) {
		struct timespec t = { stall_us / 1000000, stall_us % 1000000 * 1000 };
		nanosleep(&t, NULL);
	}
	for (int64_t u = b; u < e; u++) {
		int64_t n = u / r->bands, q = u % r->bands;
		if (k->item != n)
			k->item = n, k->base = k->top = -1;
		fir_band(r, k, n, f->oh * q / r->bands, f->oh * (q + 1) / r->bands);
	}
}

/* Channel mode, first run: units are (item, block of FIR_CB expanded
 * channels); E's block in the worker's buffer, its depthwise planes into
 * D (the workspace's start), Clips as in fir_band. */
static void fir_ch_dw(void *arg, int64_t b, int64_t e, int tid)
{
	const struct fir_run *r = arg;
	const struct fir *f = r->f;
	int64_t hw = f->h * f->w, ohw = f->oh * f->ow;
	float *eb = r->ws + f->dsz + (size_t)tid * f->per_thread;

	for (int64_t u = b; u < e; u++) {
		int64_t n = u / r->cblocks, c0 = u % r->cblocks * FIR_CB;
		int64_t nc = f->ce - c0 < FIR_CB ? f->ce - c0 : FIR_CB;
		struct hp_dw d = { .g = f->gfull, .batch = 1, .cin = nc, .mult = 1, .epi = &f->e2, .xstride = hw,
				   .xclip = f->clip1, .scratch = eb + f->per_thread - f->dws };
		const float *src = eb;
		if (f->expand)
			hp_pw_gemm(nc, hw, f->cin, r->w1 + c0 * f->cin, f->cin, r->x + n * f->cin * hw, hw,
				   r->b1 ? r->b1 + c0 : NULL, eb, hw);
		else /* the depthwise planes read X in place */
			src = r->x + (n * f->cin + c0) * hw, d.xclip = NULL;
		hp_dw_forward(&d, src, r->wd + c0 * 9, r->bd ? r->bd + c0 : NULL, r->ws + (n * f->ce + c0) * ohw,
			      NULL);
	}
}

/* Channel mode, second run: units are (item, tile of FIR_PROJ_ROWS output
 * channels); runs of them within an item are one product over D. */
static void fir_ch_proj(void *arg, int64_t b, int64_t e, int tid)
{
	const struct fir_run *r = arg;
	const struct fir *f = r->f;
	int64_t ohw = f->oh * f->ow;

	(void)tid;
	while (b < e) {
		int64_t n = b / r->ptiles, t0 = b % r->ptiles, t1 = t0 + (e - b) < r->ptiles ? t0 + (e - b) : r->ptiles;
		int64_t m0 = t0 * FIR_PROJ_ROWS, m1 = t1 * FIR_PROJ_ROWS < f->cout ? t1 * FIR_PROJ_ROWS : f->cout;
		float *y = r->y + (n * f->cout + m0) * ohw;
		b += t1 - t0;
		if (f->e3.add != HP_EPI_ADD_NONE && r->add &&
		    hp_pw_gemm_epi(m1 - m0, ohw, f->ce, r->w2 + m0 * f->ce, f->ce, r->ws + n * f->ce * ohw, ohw,
				   r->b2 ? r->b2 + m0 : NULL, y, ohw, &f->e3, r->add + (y - r->y)))
			continue;
		hp_pw_gemm(m1 - m0, ohw, f->ce, r->w2 + m0 * f->ce, f->ce, r->ws + n * f->ce * ohw, ohw,
			   r->b2 ? r->b2 + m0 : NULL, y, ohw);
		for (int64_t m = m0; m < m1 && f->e3.add != HP_EPI_ADD_NONE && r->add; m++) {
			int64_t off = (n * f->cout + m) * ohw;
			hp_epi_span(&f->e3, r->y, r->add, off, off + ohw);
		}
	}
}

static void fir_ch_exec(struct fir_run *r, struct hp_pool *pool, int threads)
{
	const struct fir *f = r->f;

	r->cblocks = (f->ce + FIR_CB - 1) / FIR_CB;
	r->ptiles = (f->cout + FIR_PROJ_ROWS - 1) / FIR_PROJ_ROWS;
	hp_parallel_steal(threads > 1 ? pool : NULL, f->n * r->cblocks, 1, threads, fir_ch_dw, r);
	hp_parallel_steal(threads > 1 ? pool : NULL, f->n * r->ptiles, FIR_PROJ_TILES, threads, fir_ch_proj, r);
}

/* Channel mode's buffers: D, then per worker E's block and the depthwise
 * kernels' scratch for the whole plane. */
static void fir_ch_prepare(struct fir *f)
{
	fir_geom(f, f->h, f->oh, f->pt, &f->gfull);
	f->dws = (hp_dw_scratch(&f->gfull) + 15) / 16 * 16;
	f->dsz = (size_t)(f->n * f->ce * f->oh * f->ow + 15) / 16 * 16;
	f->per_thread = (size_t)(FIR_CB * f->h * f->w + 15) / 16 * 16 + f->dws;
}

/* ---- blocked channels (AVX-512) ----
 *
 * Channel mode with E and D as [position][16 channels]: the expansion
 * computes a vector of 16 channels at a position as bias + the chain over
 * k of W1^T[k][16] * x[k][p] (x broadcast; W1^T the transposed weights
 * made once, inputs 8 and 9), clipped, into a zero-padded plane; each
 * depthwise output is then the bias and nine FMAs over neighbouring
 * positions of that plane, no transposes; the projection broadcasts D's
 * values against W2^T[k][16] vectors and its tiles go back to Y's planes
 * (with the residual Add) through a small buffer.  Every output is the
 * same chain of fused multiply-adds as conv_pw.c's (from the bias, k in
 * order) and conv_dwc.c's (bias, taps in (kh, kw) order, padding as
 * w * 0), Clips as theirs: the unfused nodes' bits. */
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define FIR_X86 1
#define FIR_T512 __attribute__((target("avx512f,avx512vl,avx2,fma")))
#define FIR_INLINE __attribute__((always_inline)) inline
#endif

#define FIR_BV 16 /* lanes */
#define FIR_BC 32 /* expanded channels per unit, output channels per projection unit */
#define FIR_NP 14 /* positions per register tile (2 x 14 accumulators) */
#define FIR_QT 14 /* the projection's tiles per unit (a plane's above 196 positions) */

#ifdef FIR_X86
FIR_T512 static FIR_INLINE __mmask16 fir_lanes(int64_t n)
{
	return n >= 16 ? (__mmask16)0xffff : n <= 0 ? 0 : (__mmask16)((1u << n) - 1);
}

/* E's vectors at image positions [p0, p0 + NP) of channels [c0, c0 + 16 MV). */
FIR_T512 static FIR_INLINE void fir_bk_etile(const int MV, const int NP, const struct fir *f, const float *x,
					     const float *wt, const float *b, int64_t c0, int64_t p0, float *e)
{
	int64_t hw = f->h * f->w;
	__m512 acc[2][FIR_NP], wv[2], bv[2];
	__m512 lo = _mm512_set1_ps(f->clip1[0]), hi = _mm512_set1_ps(f->clip1[1]);

	#pragma GCC unroll 16
	for (int v = 0; v < MV; v++)
		bv[v] = b ? _mm512_maskz_loadu_ps(fir_lanes(f->ce - c0 - 16 * v), b + c0 + 16 * v) : _mm512_setzero_ps();
	#pragma GCC unroll 16
	for (int v = 0; v < MV; v++)
		#pragma GCC unroll 16
		for (int j = 0; j < NP; j++)
			acc[v][j] = bv[v];
	for (int64_t k = 0; k < f->cin; k++) {
		const float *xk = x + k * hw + p0;
		#pragma GCC unroll 16
		for (int v = 0; v < MV; v++)
			wv[v] = _mm512_loadu_ps(wt + k * f->cep + c0 + 16 * v);
		#pragma GCC unroll 16
		for (int j = 0; j < NP; j++) {
			__m512 xb = _mm512_set1_ps(xk[j]);
			#pragma GCC unroll 16
			for (int v = 0; v < MV; v++)
				acc[v][j] = _mm512_fmadd_ps(wv[v], xb, acc[v][j]);
		}
	}
	#pragma GCC unroll 16
	for (int64_t j = 0, ih = p0 / f->w, iw = p0 % f->w; j < NP; j++) {
		int64_t at = ((ih + f->pt) * f->wp + iw + f->pl) * FIR_BC;
		#pragma GCC unroll 16
		for (int v = 0; v < MV; v++) /* conv_dwc.c's dwc_clip, as the depthwise kernels read E */
			_mm512_storeu_ps(e + at + 16 * v, _mm512_max_ps(lo, _mm512_min_ps(hi, acc[v][j])));
		if (++iw == f->w)
			iw = 0, ih++;
	}
}

/* Y's vectors (output channels [m0, m0 + 16 MV)) at positions [q0, q0 + NP)
 * into t[j][FIR_BC] (position q0 + j). */
FIR_T512 static FIR_INLINE void fir_bk_ptile(const int MV, const int NP, const struct fir *f, const float *d,
					     const float *wt, const float *b, int64_t m0, int64_t q0, float *t)
{
	int64_t P = f->oh * f->ow;
	__m512 acc[2][FIR_NP], wv[2], bv[2];

	#pragma GCC unroll 16
	for (int v = 0; v < MV; v++)
		bv[v] = b ? _mm512_maskz_loadu_ps(fir_lanes(f->cout - m0 - 16 * v), b + m0 + 16 * v) : _mm512_setzero_ps();
	#pragma GCC unroll 16
	for (int v = 0; v < MV; v++)
		#pragma GCC unroll 16
		for (int j = 0; j < NP; j++)
			acc[v][j] = bv[v];
	for (int64_t k = 0; k < f->ce; k++) {
		const float *dk = d + ((k >> 4) * P + q0) * FIR_BV + (k & 15);
		#pragma GCC unroll 16
		for (int v = 0; v < MV; v++)
			wv[v] = _mm512_loadu_ps(wt + k * f->coutp + m0 + 16 * v);
		#pragma GCC unroll 16
		for (int j = 0; j < NP; j++) {
			__m512 db = _mm512_set1_ps(dk[j * FIR_BV]);
			#pragma GCC unroll 16
			for (int v = 0; v < MV; v++)
				acc[v][j] = _mm512_fmadd_ps(wv[v], db, acc[v][j]);
		}
	}
	#pragma GCC unroll 16
	for (int j = 0; j < NP; j++)
		#pragma GCC unroll 16
		for (int v = 0; v < MV; v++)
			_mm512_storeu_ps(t + j * FIR_BC + 16 * v, acc[v][j]);
}

#define FIR_NP_CASES(F, ...)                                                                                \
	switch (np) {                                                                                        \
	case 1: F(1, __VA_ARGS__); break;                                                                    \
	case 2: F(2, __VA_ARGS__); break;                                                                    \
	case 3: F(3, __VA_ARGS__); break;                                                                    \
	case 4: F(4, __VA_ARGS__); break;                                                                    \
	case 5: F(5, __VA_ARGS__); break;                                                                    \
	case 6: F(6, __VA_ARGS__); break;                                                                    \
	case 7: F(7, __VA_ARGS__); break;                                                                    \
	case 8: F(8, __VA_ARGS__); break;                                                                    \
	case 9: F(9, __VA_ARGS__); break;                                                                    \
	case 10: F(10, __VA_ARGS__); break;                                                                  \
	case 11: F(11, __VA_ARGS__); break;                                                                  \
	case 12: F(12, __VA_ARGS__); break;                                                                  \
	case 13: F(13, __VA_ARGS__); break;                                                                  \
	default: F(14, __VA_ARGS__); break;                                                                  \
	}
#define FIR_E1(NP, ...) fir_bk_etile(1, NP, __VA_ARGS__)
#define FIR_E2(NP, ...) fir_bk_etile(2, NP, __VA_ARGS__)
#define FIR_P1(NP, ...) fir_bk_ptile(1, NP, __VA_ARGS__)
#define FIR_P2(NP, ...) fir_bk_ptile(2, NP, __VA_ARGS__)

/* Runs of n positions as tiles of nearly equal sizes, at most FIR_NP. */
static int64_t fir_tiles(int64_t n)
{
	return (n + FIR_NP - 1) / FIR_NP;
}

/* E's image rows [e0, e1). */
FIR_T512 static void fir_bk_expand(const struct fir *f, int mv, const float *x, const float *wt, const float *b,
				   int64_t c0, int64_t e0, int64_t e1, float *e)
{
	int64_t pa = e0 * f->w, n = (e1 - e0) * f->w, nt = fir_tiles(n);

	for (int64_t i = 0; i < nt; i++) {
		int64_t p0 = pa + n * i / nt, np = pa + n * (i + 1) / nt - p0;
		if (mv == 2)
			FIR_NP_CASES(FIR_E2, f, x, wt, b, c0, p0, e)
		else
			FIR_NP_CASES(FIR_E1, f, x, wt, b, c0, p0, e)
	}
}

/* N outputs of a row at stride S: er at the first one's top left tap,
 * out at its vector. */
FIR_T512 static FIR_INLINE void fir_bk_dwn(const int S, const int N, const float *er, int64_t wp, const __m512 *w,
					   __m512 bv, __m512 lo, __m512 hi, float *out)
{
	__m512 a[8];

#pragma GCC unroll 8
	for (int j = 0; j < N; j++)
		a[j] = bv;
#pragma GCC unroll 3
	for (int kh = 0; kh < 3; kh++)
#pragma GCC unroll 3
		for (int kw = 0; kw < 3; kw++)
#pragma GCC unroll 8
			for (int j = 0; j < N; j++)
				a[j] = _mm512_fmadd_ps(w[3 * kh + kw], _mm512_loadu_ps(er + (kh * wp + j * S + kw) * FIR_BC), a[j]);
#pragma GCC unroll 8
	for (int j = 0; j < N; j++) {
		__m512 r = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(a[j], hi, _CMP_GT_OQ), a[j], hi);
		r = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(a[j], lo, _CMP_LT_OQ), r, lo);
		_mm512_storeu_ps(out + j * FIR_BV, r);
	}
}

#define FIR_DW_CASE(N)                                                                                   \
	case N:                                                                                          \
		if (s == 1)                                                                              \
			fir_bk_dwn(1, N, er + ox * FIR_BC, f->wp, w, bv, lo, hi, dr + ox * FIR_BV);     \
		else                                                                                     \
			fir_bk_dwn(2, N, er + 2 * ox * FIR_BC, f->wp, w, bv, lo, hi, dr + ox * FIR_BV); \
		break;

/* D's vectors of channels [c0, c0 + 16 mv), output rows [r0, r1), from
 * E's block: bias, the nine taps in (kh, kw) order, conv_dwc.c's
 * dwc_finish Clip; eight outputs of a row at a time (chains in flight). */
FIR_T512 static void fir_bk_dw(const struct fir *f, int mv, const float *wd, const float *bd, int64_t c0,
			       int64_t r0, int64_t r1, const float *e, float *d)
{
	int64_t P = f->oh * f->ow, s = f->s;
	__m512 hi = _mm512_set1_ps(f->e2.hi), lo = _mm512_set1_ps(f->e2.lo > f->e2.hi ? f->e2.hi : f->e2.lo);

	for (int v = 0; v < mv; v++) {
		int64_t c = c0 + 16 * v;
		__mmask16 mk = fir_lanes(f->ce - c);
		__m512i idx = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
						 _mm512_set1_epi32(9));
		__m512 w[9], bv = bd ? _mm512_maskz_loadu_ps(mk, bd + c) : _mm512_setzero_ps();
		float *dv = d + (c >> 4) * P * FIR_BV;
		for (int t = 0; t < 9; t++)
			w[t] = _mm512_mask_i32gather_ps(_mm512_setzero_ps(), mk, idx, wd + c * 9 + t, 4);
		for (int64_t oy = r0; oy < r1; oy++) {
			const float *er = e + (oy * s * f->wp) * FIR_BC + 16 * v;
			float *dr = dv + oy * f->ow * FIR_BV;
			for (int64_t ox = 0; ox < f->ow; ox += 8) {
				switch (f->ow - ox < 8 ? (int)(f->ow - ox) : 8) {
					FIR_DW_CASE(1)
					FIR_DW_CASE(2)
					FIR_DW_CASE(3)
					FIR_DW_CASE(4)
					FIR_DW_CASE(5)
					FIR_DW_CASE(6)
					FIR_DW_CASE(7)
					FIR_DW_CASE(8)
				default:
					break;
				}
			}
		}
	}
}

/* First run: units are (item, block of FIR_BC expanded channels, band of
 * output rows); a band expands the E rows it reads (its halo again). */
FIR_T512 static void fir_bk_edw(void *arg, int64_t b, int64_t e, int tid)
{
	const struct fir_run *r = arg;
	const struct fir *f = r->f;
	int64_t hw = f->h * f->w, P = f->oh * f->ow;
	float *eb = r->ws + f->bdsz + (size_t)tid * f->bper;

	/* the padding's positions: zeros (the image's are all written) */
	for (int64_t i = 0; i < f->hp; i++)
		for (int64_t j = 0; j < f->wp; j++)
			if (i < f->pt || i >= f->pt + f->h || j < f->pl || j >= f->pl + f->w) {
				_mm512_storeu_ps(eb + (i * f->wp + j) * FIR_BC, _mm512_setzero_ps());
				_mm512_storeu_ps(eb + (i * f->wp + j) * FIR_BC + 16, _mm512_setzero_ps());
			}
	for (int64_t u = b; u < e; u++) {
		int64_t n = u / (r->cblocks * r->bands), c0 = u / r->bands % r->cblocks * FIR_BC, q = u % r->bands;
		int64_t r0 = f->oh * q / r->bands, r1 = f->oh * (q + 1) / r->bands;
		int64_t e0 = r0 * f->s - f->pt, e1 = (r1 - 1) * f->s - f->pt + 3; /* E rows the band reads */
		int mv = f->cep - c0 >= FIR_BC ? 2 : 1;
		fir_bk_expand(f, mv, r->x + n * f->cin * hw, r->w1t, r->b1, c0, e0 < 0 ? 0 : e0, e1 > f->h ? f->h : e1, eb);
		fir_bk_dw(f, mv, r->wd, r->bd, c0, r0, r1, eb, r->ws + n * f->cep * P);
	}
}

/* r[i] becomes column i of the 16x16 matrix whose rows were r[0..16). */
FIR_T512 static FIR_INLINE void fir_tr16(__m512 r[16])
{
	__m512 t[16], u[16];

	for (int i = 0; i < 8; i++) {
		t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
		t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
	}
	for (int i = 0; i < 4; i++) { /* u[4i + j]: rows 4i..4i+3 of columns j, 4 + j, 8 + j, 12 + j */
		u[4 * i] = _mm512_shuffle_ps(t[4 * i], t[4 * i + 2], 0x44);
		u[4 * i + 1] = _mm512_shuffle_ps(t[4 * i], t[4 * i + 2], 0xee);
		u[4 * i + 2] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0x44);
		u[4 * i + 3] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0xee);
	}
	for (int j = 0; j < 4; j++) {
		__m512 a = _mm512_shuffle_f32x4(u[j], u[4 + j], 0x88), b = _mm512_shuffle_f32x4(u[j], u[4 + j], 0xdd);
		__m512 c = _mm512_shuffle_f32x4(u[8 + j], u[12 + j], 0x88), d = _mm512_shuffle_f32x4(u[8 + j], u[12 + j], 0xdd);
		r[j] = _mm512_shuffle_f32x4(a, c, 0x88);
		r[8 + j] = _mm512_shuffle_f32x4(a, c, 0xdd);
		r[4 + j] = _mm512_shuffle_f32x4(b, d, 0x88);
		r[12 + j] = _mm512_shuffle_f32x4(b, d, 0xdd);
	}
}

/* The projection's tile buffer t[q - qa][FIR_BC] (output channels
 * [m0, m0 + 16 mv), positions [qa, qb)) to Y's planes, + the addend as
 * conv_pw.c's epilogue (y + add): 16 positions at a time through a
 * transpose, the rest one by one. */
FIR_T512 static void fir_bk_out(const struct fir *f, const struct fir_run *r, int64_t n, int64_t m0, int mv,
				int64_t qa, int64_t qb, const float *t)
{
	int64_t P = f->oh * f->ow, q16 = qa + (qb - qa) / 16 * 16;
	int add = f->e3.add != HP_EPI_ADD_NONE && r->add;

	for (int v = 0; v < mv; v++) {
		int64_t nl = f->cout - m0 - 16 * v < 16 ? f->cout - m0 - 16 * v : 16;
		for (int64_t q = qa; q < q16; q += 16) {
			__m512 c[16];
			for (int i = 0; i < 16; i++)
				c[i] = _mm512_loadu_ps(t + (q - qa + i) * FIR_BC + 16 * v);
			fir_tr16(c);
			for (int64_t l = 0; l < nl; l++) {
				int64_t off = (n * f->cout + m0 + 16 * v + l) * P + q;
				_mm512_storeu_ps(r->y + off, add ? _mm512_add_ps(c[l], _mm512_loadu_ps(r->add + off)) : c[l]);
			}
		}
		for (int64_t l = 0; l < nl; l++) {
			int64_t off = (n * f->cout + m0 + 16 * v + l) * P;
			for (int64_t q = q16; q < qb; q++)
				r->y[off + q] = add ? t[(q - qa) * FIR_BC + 16 * v + l] + r->add[off + q]
						    : t[(q - qa) * FIR_BC + 16 * v + l];
		}
	}
}

/* Second run: units are (item, block of FIR_BC output channels, run of
 * FIR_QT tiles of positions); the tiles through the worker's buffer to
 * Y's planes, + the addend. */
FIR_T512 static void fir_bk_proj(void *arg, int64_t b, int64_t e, int tid)
{
	const struct fir_run *r = arg;
	const struct fir *f = r->f;
	int64_t P = f->oh * f->ow, nt = fir_tiles(P), runs = r->runs;
	float *t = r->ws + f->bdsz + (size_t)tid * f->bper + (size_t)(f->hp * f->wp * FIR_BC);

	for (int64_t u = b; u < e; u++) {
		int64_t n = u / (r->ptiles * runs), m0 = u / runs % r->ptiles * FIR_BC, k = u % runs;
		int64_t i0 = nt * k / runs, i1 = nt * (k + 1) / runs, qa = P * i0 / nt, qb = P * i1 / nt;
		int mv = f->coutp - m0 >= FIR_BC ? 2 : 1;
		const float *d = r->ws + n * f->cep * P;
		for (int64_t i = i0; i < i1; i++) {
			int64_t q0 = P * i / nt, np = P * (i + 1) / nt - q0;
			float *tq = t + (q0 - qa) * FIR_BC;
			if (mv == 2)
				FIR_NP_CASES(FIR_P2, f, d, r->w2t, r->b2, m0, q0, tq)
			else
				FIR_NP_CASES(FIR_P1, f, d, r->w2t, r->b2, m0, q0, tq)
		}
		fir_bk_out(f, r, n, m0, mv, qa, qb, t);
	}
}

static void fir_bk_exec(struct fir_run *r, struct hp_pool *pool, int threads)
{
	const struct fir *f = r->f;

	r->cblocks = (f->cep + FIR_BC - 1) / FIR_BC;
	r->ptiles = (f->coutp + FIR_BC - 1) / FIR_BC;
	/* a few blocks that the threads cannot share evenly (56x56: 144
	 * channels, 4.5 blocks) in bands of rows, one a thread */
	r->bands = 1;
	if (threads > 1 && f->n * r->cblocks < 4 * threads && f->n * r->cblocks % threads)
		r->bands = threads < f->oh ? threads : f->oh;
	if (band_rows_set > 0) /* tests */
		r->bands = (f->oh + band_rows_set - 1) / band_rows_set;
	hp_parallel_steal(threads > 1 ? pool : NULL, f->n * r->cblocks * r->bands, 1, threads, fir_bk_edw, r);
	/* at most FIR_QT tiles a unit, and 4 units a thread where the tiles
	 * allow (a 7x7 plane's 160 output channels: 5 blocks, cut 3 to 2) */
	int64_t nt = fir_tiles(f->oh * f->ow), units = f->n * r->ptiles;
	r->runs = (nt + FIR_QT - 1) / FIR_QT;
	if (threads > 1 && units * r->runs < 4 * threads)
		r->runs = (4 * threads + units - 1) / units < nt ? (4 * threads + units - 1) / units : nt;
	hp_parallel_steal(threads > 1 ? pool : NULL, units * r->runs, 1, threads, fir_bk_proj, r);
}
#endif

int hp_fir_packs(int64_t h, int64_t w)
{
#ifdef FIR_X86
	return __builtin_cpu_supports("avx512f") && h * w <= FIR_BLK_PLANE;
#else
	(void)h, (void)w;
	return 0;
#endif
}

/* Blocked channels' buffers: D ([item][cep / 16][position][16]), then per
 * worker E's padded block and the projection's tile buffer. */
static void fir_bk_prepare(struct fir *f)
{
	f->cep = (f->ce + FIR_BV - 1) / FIR_BV * FIR_BV;
	f->coutp = (f->cout + FIR_BV - 1) / FIR_BV * FIR_BV;
	f->hp = (f->oh - 1) * f->s + 3 > f->pt + f->h ? (f->oh - 1) * f->s + 3 : f->pt + f->h;
	f->wp = (f->ow - 1) * f->s + 3 > f->pl + f->w ? (f->ow - 1) * f->s + 3 : f->pl + f->w;
	f->bdsz = (size_t)(f->n * f->cep * f->oh * f->ow + 15) / 16 * 16;
	f->bper = (size_t)((f->hp * f->wp + FIR_QT * FIR_NP) * FIR_BC + 15) / 16 * 16;
}

/* ---- the operator ---- */

static int fir_shapes(struct hp_graph *g, struct hp_node *n, struct fir *f)
{
	const struct hp_shape *x = &g->values[n->inputs[0]].shape, *wd = &g->values[n->inputs[3]].shape;
	const struct hp_shape *w2 = &g->values[n->inputs[5]].shape;
	/* without W1 (MobileNetV2's first block), a 1x1 identity in its place */
	struct hp_shape id = { 4, { x->dims[1], x->dims[1], 1, 1 } };
	const struct hp_shape *w1 = n->inputs[1] >= 0 ? &g->values[n->inputs[1]].shape : &id;

	if (x->rank != 4 || w1->rank != 4 || wd->rank != 4 || w2->rank != 4)
		return hp_node_error(g, n, HP_ESHAPE, "X and the weights must be 4-D");
	f->n = x->dims[0], f->cin = x->dims[1], f->h = x->dims[2], f->w = x->dims[3];
	f->ce = w1->dims[0], f->cout = w2->dims[0], f->expand = n->inputs[1] >= 0;
	if ((!f->expand && n->inputs[2] >= 0) || w1->dims[1] != f->cin || w1->dims[2] != 1 || w1->dims[3] != 1 || wd->dims[0] != f->ce ||
	    wd->dims[1] != 1 || wd->dims[2] != 3 || wd->dims[3] != 3 || w2->dims[1] != f->ce || w2->dims[2] != 1 ||
	    w2->dims[3] != 1)
		return hp_node_error(g, n, HP_ESHAPE, "weights are not 1x1 [%lld, %lld], 3x3 depthwise [%lld], 1x1 "
						      "[*, %lld]", (long long)f->ce, (long long)f->cin,
				     (long long)f->ce, (long long)f->ce);
	for (int i = 2; i < 7; i += 2) {
		int64_t c = i == 6 ? f->cout : f->ce;
		if (n->inputs[i] >= 0 && hp_shape_numel(&g->values[n->inputs[i]].shape) != c)
			return hp_node_error(g, n, HP_ESHAPE, "bias %d has not %lld elements", i, (long long)c);
	}
	return 0;
}

static int fir_attrs(struct hp_graph *g, struct hp_node *n, struct fir *f)
{
	const int64_t *st = NULL, *pd = NULL;
	int ns = hp_attr_ints(n, "strides", &st), np = hp_attr_ints(n, "pads", &pd);

	if (ns != 2 || np != 4 || st[0] != st[1] || (st[0] != 1 && st[0] != 2))
		return hp_node_error(g, n, HP_EMODEL, "strides must be [1, 1] or [2, 2], with 4 pads");
	for (int i = 0; i < 4; i++) /* so that every band reads an image row */
		if (pd[i] < 0 || pd[i] > 2)
			return hp_node_error(g, n, HP_EMODEL, "pads must be 0, 1 or 2");
	f->s = st[0], f->pt = pd[0], f->pl = pd[1];
	f->oh = (f->h + pd[0] + pd[2] - 3) / f->s + 1;
	f->ow = (f->w + pd[1] + pd[3] - 3) / f->s + 1;
	if (f->oh < 1 || f->ow < 1)
		return hp_node_error(g, n, HP_ESHAPE, "the depthwise output is empty");
	f->e1 = (struct hp_epi){ .act = HP_EPI_CLIP, .lo = hp_attr_float(n, "expand_min", -FLT_MAX),
				 .hi = hp_attr_float(n, "expand_max", FLT_MAX) };
	f->e2 = (struct hp_epi){ .act = HP_EPI_CLIP, .lo = hp_attr_float(n, "dw_min", -FLT_MAX),
				 .hi = hp_attr_float(n, "dw_max", FLT_MAX) };
	f->e3 = (struct hp_epi){ .act = HP_EPI_NONE, .add = HP_EPI_ADD_NONE };
	f->clip1[0] = f->e1.lo > f->e1.hi ? f->e1.hi : f->e1.lo;
	f->clip1[1] = f->e1.hi;
	return 0;
}

static int fir_check(struct hp_graph *g, struct hp_node *n, struct fir *f)
{
	struct hp_value *y = &g->values[n->outputs[0]];
	int rc;

	for (int i = 0; i < n->ninputs; i++)
		if (n->inputs[i] >= 0 && g->values[n->inputs[i]].dtype != HP_F32)
			return hp_node_error(g, n, HP_EUNSUPPORTED, "only float32 is supported");
	if (!hp_fir_available())
		return hp_node_error(g, n, HP_EUNSUPPORTED, "needs AVX2 and FMA");
	if (n->inputs[0] < 0 || n->inputs[3] < 0 || n->inputs[5] < 0)
		return hp_node_error(g, n, HP_EMODEL, "X and the depthwise and projection weights are required");
	if ((rc = fir_shapes(g, n, f)) < 0 || (rc = fir_attrs(g, n, f)) < 0)
		return rc;
	y->dtype = HP_F32;
	y->shape = (struct hp_shape){ 4, { f->n, f->cout, f->oh, f->ow } };
	if (n->ninputs > 7 && n->inputs[7] >= 0) {
		if (!hp_shape_equal(&g->values[n->inputs[7]].shape, &y->shape))
			return hp_node_error(g, n, HP_ESHAPE, "the addend must have the output's shape");
		f->e3.add = HP_EPI_ADD_FULL;
	}
	if (n->ninputs > 8) { /* W1 and W2 transposed (exec/fuse_pack.c) */
		int64_t cep = (f->ce + 15) / 16 * 16, coutp = (f->cout + 15) / 16 * 16;
		struct hp_shape s1 = { 2, { f->cin, cep } }, s2 = { 2, { f->ce, coutp } };
		if (n->ninputs != 10 || n->inputs[8] < 0 || n->inputs[9] < 0 || !f->expand ||
		    !hp_shape_equal(&g->values[n->inputs[8]].shape, &s1) ||
		    !hp_shape_equal(&g->values[n->inputs[9]].shape, &s2))
			return hp_node_error(g, n, HP_ESHAPE, "transposed weights must be [%lld, %lld] and [%lld, %lld]",
					     (long long)f->cin, (long long)cep, (long long)f->ce, (long long)coutp);
	}
	return 0;
}

static int fir_prepare(struct hp_graph *gr, struct hp_node *n)
{
	struct fir *f = calloc(1, sizeof *f);
	struct hp_colgeom g;
	int rc;

	if (!f)
		return hp_node_error(gr, n, -ENOMEM, "out of memory");
	if ((rc = fir_check(gr, n, f)) < 0) {
		free(f);
		return rc;
	}
	f->chan = mode_set ? mode_set >= 2 : f->oh * f->ow < FIR_CHAN_PLANE;
	f->blk = n->ninputs > 8 && (mode_set == 3 || (!mode_set && hp_fir_packs(f->h, f->w)));
	/* without AVX-512 (hp_pw_set_avx2) the node runs as f->chan says */
	f->rows = band_rows_set > 0 ? band_rows_set : FIR_ROWS;
	f->rows = f->rows < f->oh ? f->rows : f->oh;
	f->ecap = f->expand ? fir_ecap(f, f->rows) : 0;
	/* the depthwise kernels' scratch for the tallest band: its widths
	 * are every band's, its output plane the largest */
	fir_geom(f, (f->rows - 1) * f->s + 3, f->rows, 0, &g);
	f->dws = (hp_dw_scratch(&g) + 15) / 16 * 16;
	f->per_thread = fir_floats(f, f->rows);
	if (f->chan)
		fir_ch_prepare(f);
	n->workspace = (f->dsz + (size_t)hp_conv_ws_threads() * f->per_thread) * sizeof(float);
	if (f->blk) {
		size_t bytes;
		fir_bk_prepare(f);
		bytes = (f->bdsz + (size_t)hp_conv_ws_threads() * f->bper) * sizeof(float);
		n->workspace = bytes > n->workspace ? bytes : n->workspace;
	}
	n->priv = f;
	return 0;
}

static int fir_exec(const struct hp_node *n, const struct hp_kargs *a)
{
	const struct fir *f = n->priv;
	const float *in[10] = { 0 };
	struct fir_run r = { .f = f, .y = a->out[0].data, .ws = a->ws };
	int saved, threads = hp_conv_threads_enter(a->pool, &saved);

	for (int i = 0; i < a->nin && i < 10; i++)
		in[i] = a->in[i].data;
	r.x = in[0], r.w1 = in[1], r.b1 = in[2], r.wd = in[3], r.bd = in[4], r.w2 = in[5], r.b2 = in[6];
	r.add = in[7], r.w1t = in[8], r.w2t = in[9];
	if (threads > hp_conv_ws_threads())
		threads = hp_conv_ws_threads();
	threads = threads < FIR_MAX_THREADS ? threads : FIR_MAX_THREADS;
#ifdef FIR_X86
	if (f->blk && hp_pw_512()) {
		fir_bk_exec(&r, a->pool, threads);
		hp_conv_threads_leave(saved);
		return 0;
	}
#endif
	if (f->chan) {
		fir_ch_exec(&r, a->pool, threads);
		hp_conv_threads_leave(saved);
		return 0;
	}
	/* bands of at most f->rows rows, their count a multiple of the
	 * threads, so that the shares are even when the workers come on time */
	r.bands = (f->oh + f->rows - 1) / f->rows;
	r.bands = (r.bands + threads - 1) / threads * threads;
	r.bands = r.bands < f->oh ? r.bands : f->oh;
	for (int t = 0; t < threads; t++) {
		float *ws = r.ws + (size_t)t * f->per_thread;
		r.walk[t] = (struct fir_walk){ .e = ws, .d = ws + f->ecap * f->ce * f->w,
					       .s = ws + f->per_thread - f->dws, .item = -1 };
	}
	hp_parallel_steal(threads > 1 ? a->pool : NULL, f->n * r.bands, 1, threads, fir_range, &r);
	hp_conv_threads_leave(saved);
	return 0;
}

static double fir_flops(const struct hp_graph *g, const struct hp_node *n)
{
	const struct fir *f = n->priv;

	(void)g;
	if (!f)
		return 0;
	return 2.0 * (double)f->n *
	       ((double)f->h * f->w * f->ce * f->cin * f->expand + (double)f->oh * f->ow * f->ce * (9 + f->cout));
}

const struct hp_op hp_op_fused_invres = {
	.domain = "ai.hpdlf", .name = "FusedInvRes", .min_inputs = 7, .max_inputs = 10, .min_outputs = 1,
	.max_outputs = 1, .prepare = fir_prepare, .run = fir_exec, .flops = fir_flops,
};
