/* Depthwise KxK forward at small planes with sixteen channels in the zmm
 * lanes (AVX-512F + FMA): conv_dwk.c's geometries (2-D, K = 3 dilated, 5
 * or 7, stride 1 or 2) whose padded input plane is small enough to take
 * whole, from weights packed once ([block of 16][tap][16], hp_dwkz_pack).
 *
 * Why: conv_dwk.c runs eight channels a block and transposes every image
 * row, the block's weights and its output plane eight positions at a time
 * (8 x 8 transposes): on MNASNet's and EfficientNet-B0's 5x5 at 3x3 and
 * 6x6 planes those transposes cost more than the 25 multiply-adds per
 * output (20-34 GFLOP/s per CPU-second; oneDNN's blocked jit_dw, which
 * needs no transposes on nChw16c tensors, 75-105).  Here a block of
 * sixteen planes goes into the padded plane [Hp][Wp][16] as one flat run
 * of positions, sixteen a 16 x 16 transpose (a 3x3 plane: one in, one
 * out), as conv_dwc.c's flat 3x3 kernel does; the weights are loaded as
 * vectors from the pack (made once per node at fuse time in inference,
 * else per block, two 16 x 16 transposes for 25 taps); the outputs run
 * eight (or nine) at a time in flat order across rows, so a row of three
 * is no shorter chain.
 *
 * Determinism: every output is conv_dwk.c's chain, bias + w(0,0) x + ...
 * of fused multiply-adds in (kh, kw) order, taps in the padding as w * 0
 * read from the plane's zero positions; it depends on the weights and the
 * output's own window alone, so lanes, blocks, thread counts, bands and
 * the pack (moved values) give conv_dwk.c's bits.  The epilogue is
 * conv_dwk.c's in registers (Relu, Clip, HardSwish after an optional full
 * addend), others per plane after the block (hp_epi_span). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/conv_impl.h"
#include "kernels/cpu.h"
#include "kernels/fused_impl.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#include "kernels/simd_epi16.h"
#include "kernels/simd_tr16.h"
#define DKZ_X86 1
#define DKZ_TARGET __attribute__((target("avx512f,avx2,fma")))
#define DKZ_INLINE __attribute__((always_inline)) inline
#endif

#define DKZ_L 16       /* channels per block (the lanes) */
#define DKZ_STEP 9     /* outputs of a step at most (independent FMA chains) */
#define DKZ_MAXK 7
/* Padded input positions at most: the plane and the outputs stay in L1
 * (a 14x14 plane under a 5x5 window: 324 positions, 20 KiB); up to a 5x5
 * at stride 2 from 24x24 to 12x12 (27x27 positions, 46 KiB: MNASNet's
 * and EfficientNet-B0's at 96x96, conv_dwk.c's rows 12.5 us, these 9.4
 * at 48 channels). */
#define DKZ_MAX_IN 729
#define DKZ_MAX_OUT 256
#define DKZ_UNITS_PER_THREAD 8

static int dkz_mode;

void hp_dwkz_set_mode(int mode)
{
	dkz_mode = mode;
}

static int64_t dkz_hp(const struct hp_colgeom *g)
{
	return (g->grid[1] - 1) * g->stride[1] + (g->k[1] - 1) * g->dil[1] + 1;
}

static int64_t dkz_wp(const struct hp_colgeom *g)
{
	return (g->grid[2] - 1) * g->stride[2] + (g->k[2] - 1) * g->dil[2] + 1;
}

int hp_dwkz_on(const struct hp_colgeom *g)
{
	return dkz_mode >= 0 && hp_cpu_avx512_fma() && hp_dwk_eligible(g) && g->grid_vol >= 1 &&
	       g->grid_vol <= DKZ_MAX_OUT && dkz_hp(g) * dkz_wp(g) <= DKZ_MAX_IN;
}

int64_t hp_dwkz_packed_floats(int64_t cout, int64_t kvol)
{
	return (cout + DKZ_L - 1) / DKZ_L * kvol * DKZ_L;
}

void hp_dwkz_pack(const float *w, int64_t cout, int64_t kvol, float *dst)
{
	for (int64_t m0 = 0; m0 < cout; m0 += DKZ_L)
		for (int64_t t = 0; t < kvol; t++)
			for (int64_t l = 0; l < DKZ_L; l++)
				*dst++ = m0 + l < cout ? w[(m0 + l) * kvol + t] : 0.0f;
}

/* Floats of a worker's scratch: the padded plane, the output plane in
 * whole transposes plus a step's slack, one block's weights. */
static size_t dkz_floats(const struct hp_colgeom *g)
{
	int64_t outs = (g->grid_vol + DKZ_L - 1) / DKZ_L * DKZ_L + DKZ_STEP;

	return (size_t)((dkz_hp(g) * dkz_wp(g) + outs + g->kvol) * DKZ_L);
}

struct dkz_run {
	const struct hp_dw *d;
	const float *x, *w, *wp, *b;
	float *y;
	int64_t blocks;          /* channel blocks per item */
	float *scratch;          /* dkz_floats() per thread, the plane's padding cleared */
	int fin;                 /* the epilogue in registers as the planes are stored (else per plane after) */
};

#ifdef DKZ_X86
/* The block's weights, channels [m0, m0 + nc) of W [cout][kk], as
 * hp_dwkz_pack lays them out (lanes past nc 0), sixteen taps a transpose. */
DKZ_TARGET static void dkz_pack_block(const float *w, int64_t kk, int64_t m0, int nc, float *wp)
{
	for (int64_t t0 = 0; t0 < kk; t0 += DKZ_L) {
		__mmask16 m = kk - t0 >= DKZ_L ? 0xffff : (__mmask16)((1u << (kk - t0)) - 1);
		__m512 v[DKZ_L];
		for (int l = 0; l < DKZ_L; l++)
			v[l] = l < nc ? _mm512_maskz_loadu_ps(m, w + (m0 + l) * kk + t0) : _mm512_setzero_ps();
		hp_tr16_ps(v);
		for (int q = 0; q < DKZ_L && t0 + q < kk; q++)
			_mm512_storeu_ps(wp + (t0 + q) * DKZ_L, v[q]);
	}
}

/* W [cout][kk] as hp_dwkz_pack lays it out, into wp; wp. */
DKZ_TARGET static const float *dkz_pack_all(const float *w, int64_t cout, int64_t kk, float *wp)
{
	for (int64_t m0 = 0; m0 < cout; m0 += DKZ_L)
		dkz_pack_block(w, kk, m0, (int)(cout - m0 < DKZ_L ? cout - m0 : DKZ_L), wp + m0 * kk);
	return wp;
}

/* N outputs whose windows start at base[j] into out + j * 16: bias, then
 * the taps in (kh, kw) order, one weight vector for the N chains (rows dh,
 * columns D * 16 floats apart, or dw where D is 0).  A window row's N
 * pointers are set once and its taps are constant displacements from
 * them: nine pointers and a runtime offset per tap had spilled to xmm
 * registers (13% of the samples in moves back). */
DKZ_TARGET static DKZ_INLINE void dkz_step(const int N, const int K, const int D, int64_t dh, int64_t dw,
					   const float *const *base, const float *wt, __m512 b, float *out)
{
	__m512 acc[DKZ_STEP];

#pragma GCC unroll 9
	for (int j = 0; j < N; j++)
		acc[j] = b;
	for (int kh = 0; kh < K; kh++) {
		const float *rr[DKZ_STEP];
#pragma GCC unroll 9
		for (int j = 0; j < N; j++)
			rr[j] = base[j] + kh * dh;
#pragma GCC unroll 7
		for (int kw = 0; kw < K; kw++) {
			__m512 wv = _mm512_loadu_ps(wt + (kh * K + kw) * DKZ_L);
			int64_t off = D ? kw * D * DKZ_L : kw * dw;
#pragma GCC unroll 9
			for (int j = 0; j < N; j++)
				acc[j] = _mm512_fmadd_ps(wv, _mm512_loadu_ps(rr[j] + off), acc[j]);
		}
	}
#pragma GCC unroll 9
	for (int j = 0; j < N; j++)
		_mm512_storeu_ps(out + j * DKZ_L, acc[j]);
}

#define DKZ_STEPS(K)                                                                                        \
	DKZ_TARGET static void dkz_steps_##K(int n, int64_t dh, int64_t dw, const float *const *base,      \
					     const float *wt, __m512 b, float *out)                        \
	{                                                                                                   \
		if (dw != DKZ_L)                                                                            \
			dkz_step(8, K, 0, dh, dw, base, wt, b, out);                                       \
		else if (n == 9)                                                                            \
			dkz_step(9, K, 1, dh, dw, base, wt, b, out);                                       \
		else                                                                                        \
			dkz_step(8, K, 1, dh, dw, base, wt, b, out);                                       \
	}
DKZ_STEPS(3)
DKZ_STEPS(5)
DKZ_STEPS(7)

/* All outputs of the plane in flat order, eight at a time, nine where
 * that divides them and eight does not (3x3, 6x6 planes); a last step's
 * outputs past the plane read the last one's window and land in the
 * slack. */
DKZ_TARGET static void dkz_outputs(const struct hp_colgeom *g, const float *xp, const float *wt, __m512 b, float *out)
{
	int64_t vol = g->grid_vol, ow = g->grid[2], wp = dkz_wp(g), sh = g->stride[1] * wp * DKZ_L;
	int64_t sw = g->stride[2] * DKZ_L, dh = g->dil[1] * wp * DKZ_L, dw = g->dil[2] * DKZ_L, oh = 0, o = 0;
	int n = vol % 8 && vol % 9 == 0 && dw == DKZ_L ? 9 : 8; /* dilated columns: eight (dkz_steps_K) */
	const float *last = xp + (vol - 1) / ow * sh + (vol - 1) % ow * sw;

	for (int64_t t0 = 0; t0 < vol; t0 += n) {
		const float *base[DKZ_STEP];
		for (int j = 0; j < n; j++) {
			base[j] = t0 + j < vol ? xp + oh * sh + o * sw : last;
			if (t0 + j < vol && ++o == ow)
				o = 0, oh++;
		}
		switch (g->k[1]) {
		case 3: dkz_steps_3(n, dh, dw, base, wt, b, out + t0 * DKZ_L); break;
		case 5: dkz_steps_5(n, dh, dw, base, wt, b, out + t0 * DKZ_L); break;
		default: dkz_steps_7(n, dh, dw, base, wt, b, out + t0 * DKZ_L); break;
		}
	}
}

/* v = act(v) as conv_dwk.c's dwk_act computes it, operation for operation. */
DKZ_TARGET static DKZ_INLINE __m512 dkz_act(const int act, __m512 v, __m512 lo, __m512 hi)
{
	__m512 z = _mm512_setzero_ps();

	switch (act) {
	case HP_EPI_RELU: return _mm512_max_ps(z, v);
	case HP_EPI_CLIP: return hp_clip16_ps(v, lo, hi);
	case HP_EPI_HSWISH: return hp_hswish16_ps(v);
	default: return v;
	}
}

/* The block's outputs out[q][16] back to its nc planes ys[l] as
 * act(v + adds[l][q]) (ADD: the addends), sixteen positions a transpose,
 * nothing past a plane written. */
DKZ_TARGET static DKZ_INLINE void dkz_store_as(const int act, const int add, const float *out, int64_t vol, int nc,
					       float *const *ys, const float *const *adds, __m512 lo, __m512 hi)
{
	for (int64_t q = 0; q < vol; q += DKZ_L) {
		__mmask16 m = vol - q >= DKZ_L ? 0xffff : (__mmask16)((1u << (vol - q)) - 1);
		__m512 v[DKZ_L];
		for (int i = 0; i < DKZ_L; i++)
			v[i] = _mm512_loadu_ps(out + (q + i) * DKZ_L);
		hp_tr16_ps(v);
		for (int l = 0; l < nc; l++) {
			__m512 r = v[l];
			if (add)
				r = _mm512_add_ps(r, _mm512_maskz_loadu_ps(m, adds[l] + q));
			_mm512_mask_storeu_ps(ys[l] + q, m, dkz_act(act, r, lo, hi));
		}
	}
}

#define DKZ_STORE_ACT(A)                                                                                        \
	DKZ_TARGET static void dkz_store_##A(int add, const float *out, int64_t vol, int nc, float *const *ys,  \
					     const float *const *adds, __m512 lo, __m512 hi)                    \
	{                                                                                                       \
		if (add)                                                                                        \
			dkz_store_as(A, 1, out, vol, nc, ys, adds, lo, hi);                                     \
		else                                                                                            \
			dkz_store_as(A, 0, out, vol, nc, ys, adds, lo, hi);                                     \
	}
DKZ_STORE_ACT(HP_EPI_NONE)
DKZ_STORE_ACT(HP_EPI_RELU)
DKZ_STORE_ACT(HP_EPI_CLIP)
DKZ_STORE_ACT(HP_EPI_HSWISH)

/* The outputs back through the epilogue e (NULL: none). */
DKZ_TARGET static void dkz_store(const float *out, int64_t vol, int nc, float *const *ys, const struct hp_epi *e,
				 const float *const *adds)
{
	int add = e && e->add == HP_EPI_ADD_FULL;
	__m512 lo = _mm512_set1_ps(!e ? 0.0f : e->lo > e->hi ? e->hi : e->lo), hi = _mm512_set1_ps(e ? e->hi : 0.0f);

	switch (e ? e->act : HP_EPI_NONE) {
	case HP_EPI_RELU: dkz_store_HP_EPI_RELU(add, out, vol, nc, ys, adds, lo, hi); break;
	case HP_EPI_CLIP: dkz_store_HP_EPI_CLIP(add, out, vol, nc, ys, adds, lo, hi); break;
	case HP_EPI_HSWISH: dkz_store_HP_EPI_HSWISH(add, out, vol, nc, ys, adds, lo, hi); break;
	default: dkz_store_HP_EPI_NONE(add, out, vol, nc, ys, adds, lo, hi); break;
	}
}

/* Output channels [m0, m0 + nc) of item n. */
DKZ_TARGET static void dkz_block(const struct dkz_run *r, int64_t n, int64_t m0, int nc, float *scratch)
{
	const struct hp_dw *d = r->d;
	const struct hp_colgeom *g = &d->g;
	const struct hp_epi *e = r->fin ? d->epi : NULL;
	int64_t cout = d->cin * d->mult, vol = g->grid_vol, kk = g->kvol, hp = dkz_hp(g), wp = dkz_wp(g);
	float *out = scratch + hp * wp * DKZ_L, *wbuf = out + ((vol + DKZ_L - 1) / DKZ_L * DKZ_L + DKZ_STEP) * DKZ_L;
	const float *xs[DKZ_L], *adds[DKZ_L] = { 0 }, *wt = wbuf;
	float *ys[DKZ_L];
	__mmask16 lanes = (__mmask16)((1u << nc) - 1);
	__m512 b = r->b ? _mm512_maskz_loadu_ps(lanes, r->b + m0) : _mm512_setzero_ps();

	int64_t cs[DKZ_L];

	hp_dw_in_channels(m0, nc, d->mult, cs);
	for (int l = 0; l < nc; l++) {
		int64_t m = m0 + l;
		xs[l] = r->x + (n * d->cin + cs[l]) * (d->xstride ? d->xstride : g->img_vol);
		ys[l] = r->y + (n * cout + m) * vol;
		if (e && e->add == HP_EPI_ADD_FULL)
			adds[l] = d->addend + (n * cout + m) * vol;
	}
	if (r->wp)
		wt = r->wp + m0 * kk;
	else
		dkz_pack_block(r->w, kk, m0, nc, wbuf);
	hp_dwz_fill(g, xs, nc, NULL, scratch, hp, wp);
	dkz_outputs(g, scratch, wt, b, out);
	dkz_store(out, vol, nc, ys, e, adds);
	if (d->epi && !r->fin) /* other epilogues: the block's adjacent planes at once, in cache */
		hp_epi_span(d->epi, r->y, d->addend, ys[0] - r->y, ys[nc - 1] - r->y + vol);
}

/* Units are (item, block of output channels). */
static void dkz_range(void *arg, int64_t b, int64_t e, int tid)
{
	const struct dkz_run *r = arg;
	int64_t cout = r->d->cin * r->d->mult;
	float *scratch = r->scratch + (size_t)tid * dkz_floats(&r->d->g);

	for (int64_t i = b; i < e; i++) {
		int64_t n = i / r->blocks, m0 = i % r->blocks * DKZ_L;
		dkz_block(r, n, m0, (int)(cout - m0 < DKZ_L ? cout - m0 : DKZ_L), scratch);
	}
}
#endif

int hp_dwkz_forward(const struct hp_dw *d, const float *x, const float *w, const float *wp, const float *b, float *y,
		    struct hp_pool *pool)
{
#ifdef DKZ_X86
	struct dkz_run r = { .d = d, .x = x, .w = w, .wp = wp, .b = b, .y = y };
	const struct hp_epi *e = d->epi;
	int saved, threads;
	int64_t units, su, cout = d->cin * d->mult;
	size_t one = dkz_floats(&d->g), plane = (size_t)(dkz_hp(&d->g) * dkz_wp(&d->g) * DKZ_L);
	float *own = NULL;

	if (!hp_dwkz_on(&d->g))
		return -1;
	r.blocks = (cout + DKZ_L - 1) / DKZ_L;
	r.fin = e && (e->add == HP_EPI_ADD_NONE || (e->add == HP_EPI_ADD_FULL && d->addend)) &&
		(e->act == HP_EPI_NONE || e->act == HP_EPI_RELU || e->act == HP_EPI_CLIP || e->act == HP_EPI_HSWISH);
	threads = hp_conv_threads_enter(pool, &saved);
	units = d->batch * r.blocks;
	su = units / ((int64_t)threads * DKZ_UNITS_PER_THREAD);
	r.scratch = aligned_alloc(64, ((size_t)threads * one * sizeof(float) + 63) / 64 * 64);
	if (!r.scratch) {
		hp_conv_threads_leave(saved);
		return -1;
	}
	/* several items and no pack (training, dX): every block's weights once
	 * for all items, not once an item */
	if (!wp && d->batch > 1 && (own = malloc((size_t)hp_dwkz_packed_floats(cout, d->g.kvol) * sizeof *own)))
		r.wp = dkz_pack_all(w, cout, d->g.kvol, own);
	for (int t = 0; t < threads; t++) /* the padding: zeros for every block */
		memset(r.scratch + t * one, 0, plane * sizeof(float));
	hp_conv_steal(pool, threads, units, su < 1 ? 1 : su, dkz_range, &r);
	free(own);
	free(r.scratch);
	hp_conv_threads_leave(saved);
	return 0;
#else
	(void)d, (void)x, (void)w, (void)wp, (void)b, (void)y, (void)pool;
	return -1;
#endif
}
