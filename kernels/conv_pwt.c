/* Pointwise Conv (conv_pw.c's nodes) at tiny planes: Y^T = X^T W^T, the
 * vectors over 16 output channels and each column (a position of one
 * item, or an item where the plane is one position) a broadcast.
 *
 * Why: conv_pw.c's vectors run over the columns of one (item, group), so
 * a plane of 4 positions filled a quarter of the lanes, one of a single
 * position (squeeze-and-excitation's 1x1s) a sixteenth; MNASNet's last
 * 1x1 (320 -> 1280 at 2x2, batch 2) ran at about 4 GFLOP/s.  Here the
 * lanes are output channels, so they are full wherever M is a multiple
 * of 16, whatever the plane.
 *
 * The bits: every output is conv_pw.c's chain, its bias (or 0) and then
 * one fused multiply-add per k = 0, 1, ..., K-1 in order, so the path
 * taken (and the threads, the bands of items and rows) never shows in
 * the results.  The fused epilogue (FusedConv) runs as hp_epi_span on
 * each item's rows of a unit once they are stored (each channel's run of
 * the unit's positions where a packed run cuts the plane), as conv_pw.c's
 * fallback does; its register epilogue gives those bits too.
 *
 * W^T: a unit (group, 16 or 32 output channels) transposes its rows of W
 * once into a panel [K][16 * nv] of its worker's share of conv_pw.c's
 * workspace (16 x 16 blocks transposed in registers), then runs every
 * item of the node over it.  Inference in core packs those panels once
 * instead (exec/fuse_pack.c: hp_pwt_pack, a FusedConv's input 4; the
 * per-run transposes were 6-15% of MNASNet's, MobileNetV3-Small's and
 * EfficientNet-B0's inference at 64-96 pixels).  ConvGradData's 1x1
 * (cv->wflip: dX = W^T dY, W [K][M]) has those panels already: its units
 * read W's rows in place, prefetched (W comes from memory in a training
 * step), masked past the last channel, with no workspace (conv_grad.c
 * takes the path for tiny planes whatever the replaced path's
 * workspace). */
#include <stdint.h>
#include <string.h>

#include "kernels/conv_impl.h"
#include "kernels/simd_tr16.h"
#include "kernels/fused_impl.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define PWT_X86 1
#define PWT_TARGET512 __attribute__((target("avx512f,avx512vl,avx2,fma")))
#define PWT_INLINE __attribute__((always_inline)) inline
#endif

/* Columns per tile: with two vectors of channels, 24 accumulators and the
 * two weight vectors fit the 32 zmm registers. */
#define PWT_MAX_P 12
/* Planes below this many positions take the path (auto mode). */
#define PWT_MAX_PLANE 16
#define PWT_MAX_TID 8
/* Rows of W ahead that the tiles reading W in place (wflip) prefetch. */
#define PWT_PFD 16

static int pwt_mode;

void hp_pwt_set_mode(int mode)
{
	pwt_mode = mode;
}

struct pwt_run {
	const struct hp_conv *cv;
	const float *x, *w, *b;
	const float *wt;    /* the panels packed once (hp_pwt_pack), or NULL */
	float *y, *ws;
	const struct hp_epi *epi;
	const float *addend;
	int nv;             /* vectors of 16 channels per unit */
	int64_t mt;         /* units of channels per group */
	int64_t pb, npb;    /* positions per unit and units per unit of channels (1: the whole plane) */
	int64_t per_thread; /* floats of a worker's panel */
};

#ifdef PWT_X86
/* r[i] (16 rows of 16) becomes its transpose: r[j] lane i = old r[i] lane j. */
PWT_TARGET512 static PWT_INLINE void pwt_tr16(__m512 r[16])
{
	hp_tr16_ps(r);
}

/* wt[k][ld] lanes [0, 16) = w[r][k] (rows lda apart) for r < mr, 0 past
 * them; k < K. */
PWT_TARGET512 static void pwt_pack16(const float *w, int64_t lda, int mr, int64_t K, float *wt, int64_t ld)
{
	__m512 r[16];

	for (int64_t k0 = 0; k0 < K; k0 += 16) {
		int kr = K - k0 < 16 ? (int)(K - k0) : 16;
		__mmask16 mk = (__mmask16)((1u << kr) - 1);
		for (int i = 0; i < mr; i++) /* W comes from L3 or memory: 16 streams */
			_mm_prefetch((const char *)(w + i * lda + k0 + 64), _MM_HINT_T0);
		for (int i = 0; i < 16; i++)
			r[i] = i < mr ? _mm512_maskz_loadu_ps(mk, w + i * lda + k0) : _mm512_setzero_ps();
		pwt_tr16(r);
		for (int i = 0; i < kr; i++)
			_mm512_storeu_ps(wt + (k0 + i) * ld, r[i]);
	}
}

/* t[p][16 * nv] = the chains of P columns (column p's X at x + p * cs,
 * rows ldx apart) for the panel's 16 * nv channels (panel rows ldw apart,
 * with LV W's own rows, prefetched; with MK, its last vector's lanes of
 * mk only, the others read as 0): from the bias (lanes below mr) or 0,
 * then fma(wt[k], x[k][p], acc) for k < K. */
PWT_TARGET512 static PWT_INLINE void pwt_tile(const int nv, const int P, const int MK, const int LV, int64_t K,
					      const float *wt, int64_t ldw, __mmask16 mk, const float *x,
					      int64_t ldx, int64_t cs, const float *bias, int mr, float *t)
{
	__m512 acc[2][PWT_MAX_P];
	__m512 b0 = _mm512_setzero_ps(), b1 = b0;

	if (bias) {
		b0 = _mm512_maskz_loadu_ps((__mmask16)(mr >= 16 ? 0xffff : (1u << mr) - 1), bias);
		if (nv > 1 && mr > 16)
			b1 = _mm512_maskz_loadu_ps((__mmask16)(mr >= 32 ? 0xffff : (1u << (mr - 16)) - 1), bias + 16);
	}
	for (int p = 0; p < P; p++) {
		acc[0][p] = b0;
		acc[1][p] = b1;
	}
	for (int64_t k = 0; k < K; k++) {
		const float *xk = x + k * ldx;
		__m512 w0, w1;
		if (LV) { /* W's rows in place, a row apart: from L3 or memory */
			_mm_prefetch((const char *)(wt + (k + PWT_PFD) * ldw), _MM_HINT_T0);
			if (nv > 1)
				_mm_prefetch((const char *)(wt + (k + PWT_PFD) * ldw + 16), _MM_HINT_T0);
		}
		if (nv > 1) {
			w0 = _mm512_loadu_ps(wt + k * ldw);
			w1 = MK ? _mm512_maskz_loadu_ps(mk, wt + k * ldw + 16) : _mm512_loadu_ps(wt + k * ldw + 16);
		} else {
			w0 = MK ? _mm512_maskz_loadu_ps(mk, wt + k * ldw) : _mm512_loadu_ps(wt + k * ldw);
			w1 = w0;
		}
		for (int p = 0; p < P; p++) {
			__m512 xb = _mm512_set1_ps(xk[p * cs]);
			acc[0][p] = _mm512_fmadd_ps(w0, xb, acc[0][p]);
			if (nv > 1)
				acc[1][p] = _mm512_fmadd_ps(w1, xb, acc[1][p]);
		}
	}
	for (int p = 0; p < P; p++)
		for (int v = 0; v < nv; v++)
			_mm512_storeu_ps(t + (p * nv + v) * 16, acc[v][p]);
}

/* Panels of rows 16 * nv apart (W^T packed here or at plan time) take
 * tiles with that stride a constant; W's rows in place (wflip) the
 * others, prefetching, masked only for a last unit of fewer channels
 * (masked loads throughout ran 1x1-t2's dX at 85 GF/s, not 190). */
#define PWT_CASE(P, CS)                                                                               \
	case P:                                                                                       \
		if (nv > 1 && ldw == 32 && mk == 0xffff)                                              \
			pwt_tile(2, P, 0, 0, K, wt, 32, mk, x, ldx, CS, bias, mr, t);                 \
		else if (nv > 1 && mk == 0xffff)                                                      \
			pwt_tile(2, P, 0, 1, K, wt, ldw, mk, x, ldx, CS, bias, mr, t);                \
		else if (nv > 1)                                                                      \
			pwt_tile(2, P, 1, 1, K, wt, ldw, mk, x, ldx, CS, bias, mr, t);                \
		else if (ldw == 16 && mk == 0xffff)                                                   \
			pwt_tile(1, P, 0, 0, K, wt, 16, mk, x, ldx, CS, bias, mr, t);                 \
		else if (mk == 0xffff)                                                                \
			pwt_tile(1, P, 0, 1, K, wt, ldw, mk, x, ldx, CS, bias, mr, t);                \
		else                                                                                  \
			pwt_tile(1, P, 1, 1, K, wt, ldw, mk, x, ldx, CS, bias, mr, t);                \
		break;

PWT_TARGET512 static void pwt_micro(int nv, int P, int64_t K, const float *wt, int64_t ldw, __mmask16 mk,
				    const float *x, int64_t ldx, int64_t cs, const float *bias, int mr, float *t)
{
	if (cs == 1) { /* positions of one item: constant offsets */
		switch (P) {
			PWT_CASE(1, 1) PWT_CASE(2, 1) PWT_CASE(3, 1) PWT_CASE(4, 1) PWT_CASE(5, 1) PWT_CASE(6, 1)
			PWT_CASE(7, 1) PWT_CASE(8, 1) PWT_CASE(9, 1) PWT_CASE(10, 1) PWT_CASE(11, 1) PWT_CASE(12, 1)
		default:
			break;
		}
		return;
	}
	switch (P) {
		PWT_CASE(1, cs) PWT_CASE(2, cs) PWT_CASE(3, cs) PWT_CASE(4, cs) PWT_CASE(5, cs) PWT_CASE(6, cs)
		PWT_CASE(7, cs) PWT_CASE(8, cs) PWT_CASE(9, cs) PWT_CASE(10, cs) PWT_CASE(11, cs) PWT_CASE(12, cs)
	default:
		break;
	}
}

/* y[l * yv + p] = t[p * ld + l] for channels l < mr and positions p < P
 * (P <= PWT_MAX_P): 16 x 16 transposes, each channel's run of positions
 * one masked store, as conv_grp.c's gr_cf_put.  Why: the scalar copies
 * were as many stores as the tile had fused multiply-adds where K is 16
 * or 32 (SqueezeNet's expand 1x1s). */
PWT_TARGET512 static void pwt_put(const float *t, int64_t ld, int mr, int P, float *y, int64_t yv)
{
	__mmask16 mk = (__mmask16)((1u << P) - 1);

	for (int v = 0; v * 16 < mr; v++) {
		__m512 r[16];
		int nl = mr - 16 * v < 16 ? mr - 16 * v : 16;
		for (int i = 0; i < 16; i++)
			r[i] = i < P ? _mm512_loadu_ps(t + i * ld + 16 * v) : _mm512_setzero_ps();
		pwt_tr16(r);
		for (int l = 0; l < nl; l++)
			_mm512_mask_storeu_ps(y + (16 * v + l) * yv, mk, r[l]);
	}
}

/* One unit: channels [m0, m0 + mr) of group g at positions [q0, q1) (all
 * of them where r->npb is 1) for every item. */
static void pwt_unit(const struct pwt_run *r, int64_t g, int64_t m0, int64_t q0, int64_t q1, float *buf)
{
	const struct hp_conv *cv = r->cv;
	int64_t K = cv->kdim, M = cv->cout_g, yv = cv->yvol;
	int mr = (int)(M - m0 < 16 * r->nv ? M - m0 : 16 * r->nv), nv = mr > 16 ? r->nv : 1;
	int64_t ld = 16 * nv; /* the panel's row: a last unit of 16 channels or fewer takes one vector */
	const float *bias = r->b ? r->b + g * M + m0 : NULL;
	float t[PWT_MAX_P * 32];
	const float *wt = buf;
	int64_t ldw = ld;
	__mmask16 mk = 0xffff;

	if (cv->wflip) { /* W [K][M] per group: its rows are the panel's, read in place */
		wt = r->w + g * M * K + m0;
		ldw = M;
		if (mr < 16 * nv)
			mk = (__mmask16)((1u << (mr - 16 * (nv - 1))) - 1);
	} else if (r->wt) { /* the panels packed at plan time (hp_pwt_pack) */
		wt = r->wt + m0 * K;
	} else {
		for (int v = 0; v * 16 < mr; v++)
			pwt_pack16(r->w + (g * M + m0 + 16 * v) * K, K, mr - 16 * v < 16 ? mr - 16 * v : 16, K,
				   buf + 16 * v, ld);
	}
	/* a plane of one position: the items are the columns */
	int64_t ncol = yv == 1 ? cv->batch : q1, nitem = yv == 1 ? 1 : cv->batch;
	int64_t xs = cv->cin * cv->xvol, ys = cv->cout * yv, ntile = (ncol - q0 + PWT_MAX_P - 1) / PWT_MAX_P;
	for (int64_t n = 0; n < nitem; n++) {
		const float *x = r->x + n * xs + g * cv->cin_g * cv->xvol;
		int64_t ybase = n * ys + (g * M + m0) * yv;
		for (int64_t c0 = q0, i = 0; c0 < ncol; i++) {
			int64_t P = (ncol - c0 + (ntile - i) - 1) / (ntile - i); /* tiles of near-equal width */
			pwt_micro(nv, (int)P, K, wt, ldw, mk, x + (yv == 1 ? c0 * xs : c0), cv->xvol,
				  yv == 1 ? xs : 1, bias, mr, t);
			if (yv > 1) {
				pwt_put(t, ld, mr, (int)P, r->y + ybase + c0, yv);
				c0 += P;
				continue;
			}
			for (int64_t p = 0; p < P; p++) {
				float *y = r->y + ybase + (yv == 1 ? (c0 + p) * ys : c0 + p);
				for (int l = 0; l < mr; l++)
					y[l * yv] = t[p * ld + l];
			}
			c0 += P;
		}
		for (int64_t i = 0; r->epi && i < (yv == 1 ? cv->batch : 1); i++) {
			int64_t b = ybase + i * ys;
			if (q0 == 0 && q1 == yv) {
				hp_epi_span(r->epi, r->y, r->addend, b, b + mr * yv);
				continue;
			}
			for (int l = 0; l < mr; l++) /* each channel's positions of the unit */
				hp_epi_span(r->epi, r->y, r->addend, b + l * yv + q0, b + l * yv + q1);
		}
	}
}

static void pwt_range(void *arg, int64_t b, int64_t e, int tid)
{
	struct pwt_run *r = arg;

	for (; b < e; b++) {
		int64_t u = b / r->npb, q0 = b % r->npb * r->pb, q1 = q0 + r->pb < r->cv->yvol ? q0 + r->pb : r->cv->yvol;
		if (r->npb == 1)
			q1 = r->cv->yvol;
		pwt_unit(r, u / r->mt, u % r->mt * 16 * r->nv, q0, q1,
			 r->per_thread ? r->ws + tid * r->per_thread : NULL);
	}
}
#endif

int hp_pwt_wanted(const struct hp_conv *cv, int64_t per_thread)
{
#ifdef PWT_X86
	if (pwt_mode < 0 || !hp_pw_512() || (!cv->wflip && cv->kdim * 16 > per_thread))
		return 0;
	return pwt_mode > 0 || cv->yvol < PWT_MAX_PLANE;
#else
	(void)cv, (void)per_thread;
	return 0;
#endif
}

/* The packed run's units: 32 channels where M > 16 (the last one 16 or
 * fewer: one vector), else one of M. */
static int pwt_packed_nv(int64_t m)
{
	return m > 16 ? 2 : 1;
}

int64_t hp_pwt_packed_floats(int64_t m, int64_t k)
{
	int64_t u = 16 * pwt_packed_nv(m), last = m - (m - 1) / u * u;

	return k * ((m - last) + (last > 16 ? 32 : 16));
}

void hp_pwt_pack(const float *w, int64_t m, int64_t k, float *dst)
{
	int64_t u = 16 * pwt_packed_nv(m);

	for (int64_t m0 = 0; m0 < m; m0 += u) {
		int64_t mr = m - m0 < u ? m - m0 : u, ld = mr > 16 ? 32 : 16;
		for (int64_t kk = 0; kk < k; kk++)
			for (int64_t l = 0; l < ld; l++)
				dst[m0 * k + kk * ld + l] = l < mr ? w[(m0 + l) * k + kk] : 0.0f;
	}
}

/* Packed once, planes of up to PWT_MAX_PACKED_PLANE positions take the
 * path too: ResNeXt-50's 1x1s at 4x4 (64x64 input, 512-1024 channels, 2 MB
 * of W each) streamed W from memory on conv_pw.c's tiles, six rows at a
 * time, at 1.5x ONNX Runtime's time; here a run reads the panels once, in
 * order (a chain of 20 such 1x1s, 40 MB of weights, 1 thread: 3.6-3.8 ms
 * against 2.3-2.5, ONNX Runtime 2.4-2.5).  Unpacked they stay on conv_pw.c,
 * which was faster there with W warm in cache than transposing it per
 * run (bench_conv_libs.c 1x1-t4r, -t4e: 171-176 GF/s a thread against
 * 143-152).  At 5x5 and 6x6 (SqueezeNet's last fires, GoogLeNet's
 * inception 4 at 96x96) conv_pw.c's tiles of 16-column panels filled 25
 * or 36 of 32 or 48 lanes (2 panels and a tail); here every lane is an
 * output: 480 -> 192 at 6x6 ran at 99 GF/s a thread transposing W per
 * run against conv_pw.c's 81 (bench_conv_libs.c g-4a-b1), and packed,
 * GoogLeNet's inference at batch 1 took 8% less CPU, SqueezeNet's 8%. */
#define PWT_MAX_PACKED_PLANE 36
/* Packed once, any plane where the node has 16 or 32 output channels
 * (one unit, every lane an output) and K of at least PWT_NARROW_MIN_K:
 * SqueezeNet's squeezes and GoogLeNet's reductions to 16 and 32 channels,
 * where conv_pw.c's tiles of 6 rows left 16 rows as 6 + 6 + 4 (bench_conv
 * _libs.c --pwt 2 against 0, GF/s a thread: sq-s23 79 -> 95, sq-s23b 77
 * -> 94, sq-s11 89 -> 100, sq-s11b 87 -> 103, g-3a-b3 78 -> 98, g-3a-b4
 * 86 -> 101).  With K of 16 or 32 conv_pw.c stays faster (the tiles'
 * transposes out cost as much as their products: sq-e1-23, 64 channels
 * from 16, 75 against 62), as with more channels (g-3a-b1, 64 from 192,
 * 98 and 102: a tie, left to conv_pw.c). */
#define PWT_NARROW_MIN_K 64
/* Positions per unit of those planes' runs, a multiple of the tile: a
 * node of one unit of channels would otherwise run on one thread. */
#define PWT_POS_BLOCK 96

static int pwt_narrow(const struct hp_conv *cv)
{
	return cv->cout_g % 16 == 0 && cv->cout_g <= 32 && cv->kdim >= PWT_NARROW_MIN_K;
}

int hp_pwt_packs(const struct hp_conv *cv)
{
	int tiny = hp_pwt_wanted(cv, INT64_MAX);
#ifdef PWT_X86
	tiny = tiny || (pwt_mode == 0 && hp_pw_512() && (cv->yvol <= PWT_MAX_PACKED_PLANE || pwt_narrow(cv)));
#endif
	return cv->direct && !cv->dw && !cv->dot && !cv->kxk && !cv->grp && !cv->shift && !cv->transpose &&
	       !cv->wflip && cv->group == 1 && hp_pw_available() && tiny;
}

int hp_pwt_forward_packed(const struct hp_conv *cv, const float *x, const float *wt, const float *b, float *y,
			  struct hp_pool *pool, const struct hp_epi *epi, const float *addend)
{
#ifdef PWT_X86
	struct pwt_run r = { .cv = cv, .x = x, .wt = wt, .b = b, .y = y, .addend = addend };
	struct hp_epi e;
	int saved, threads;

	if (!hp_pwt_packs(cv))
		return 0;
	if (epi) { /* as hp_conv_forward_epi: an omitted addend, the activation only */
		e = *epi;
		if (!addend)
			e.add = HP_EPI_ADD_NONE;
		r.epi = e.act == HP_EPI_NONE && e.add == HP_EPI_ADD_NONE ? NULL : &e;
	}
	threads = hp_conv_threads_enter(pool, &saved);
	r.nv = pwt_packed_nv(cv->cout_g);
	r.mt = (cv->cout_g + 16 * r.nv - 1) / (16 * r.nv);
	r.pb = PWT_POS_BLOCK;
	r.npb = cv->yvol > PWT_POS_BLOCK ? (cv->yvol + PWT_POS_BLOCK - 1) / PWT_POS_BLOCK : 1;
	threads = threads < PWT_MAX_TID ? threads : PWT_MAX_TID;
	threads = hp_conv_par_threads(pool, threads, hp_conv_flops(cv));
	hp_conv_steal(pool, threads, cv->group * r.mt * r.npb, 1, pwt_range, &r);
	hp_conv_threads_leave(saved);
	return 1;
#else
	(void)cv, (void)x, (void)wt, (void)b, (void)y, (void)pool, (void)epi, (void)addend;
	return 0;
#endif
}

void hp_pwt_forward(const struct hp_conv *cv, const float *x, const float *w, const float *b, float *y, float *ws,
		    int64_t per_thread, struct hp_pool *pool, const struct hp_epi *epi, const float *addend)
{
#ifdef PWT_X86
	struct pwt_run r = { .cv = cv, .x = x, .w = w, .b = b, .y = y, .ws = ws, .epi = epi, .addend = addend };
	int saved, threads = hp_conv_threads_enter(pool, &saved);
	int64_t cap = (int64_t)(cv->workspace / sizeof(float)), units;

	/* wflip: no panels (W's rows are read in place), no workspace */
	r.nv = (cv->wflip || cv->kdim * 32 <= per_thread) && cv->cout_g > 16 ? 2 : 1;
	r.per_thread = cv->wflip ? 0 : per_thread;
	r.mt = (cv->cout_g + 16 * r.nv - 1) / (16 * r.nv);
	r.npb = 1;
	units = cv->group * r.mt;
	if (!cv->wflip && threads > cap / per_thread)
		threads = (int)(cap / per_thread);
	threads = threads < PWT_MAX_TID ? threads : PWT_MAX_TID;
	threads = hp_conv_par_threads(pool, threads, hp_conv_flops(cv));
	hp_conv_steal(pool, threads, units, 1, pwt_range, &r);
	hp_conv_threads_leave(saved);
#else
	(void)cv, (void)x, (void)w, (void)b, (void)y, (void)ws, (void)per_thread, (void)pool, (void)epi, (void)addend;
#endif
}
