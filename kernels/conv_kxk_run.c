/* The KxK path's blocks of whole output-row runs: every 16-column panel of
 * the block lies in one output row read at stride 1 (rows of a multiple
 * of 16 outputs, 32 and more: the U-Net's 128-, 64- and 32-wide planes),
 * so the taps of a panel are the image's rows themselves, shifted by kw.
 *
 * Why: kx_pack finds each row per (panel, k chunk, block) through kx_row
 * and copies the rows at the image's left and right edges with scalar
 * loops; with 16 output channels (three micro-tiles share a panel) that
 * was a third of the kernel's time (perf, class u-128 of
 * hpdlf-bench-conv-libs).  Here:
 *  - the taps of a (block output row, k chunk) are found once, for all
 *    its panels; a panel reads them at its column's offset (the micro-
 *    tile adds it), padding rows read a row of zeros;
 *  - with few output channels (KR_MASK_TILES micro-tiles) the edge
 *    panels read the rows in place too, each tap under the mask of its
 *    kw's lanes inside the row (masked lanes read 0 and touch no memory):
 *    kr_copy had 16% of u-128's kernel samples, though mostly as the
 *    rows' first touch, which the micro-tiles then take over; with more,
 *    the edge panels copy their rows (zeros outside the image), each
 *    vector stored once, and the micro-tiles share the copy (always with
 *    AVX-512: kw_tile);
 *  - where the CPU has AVX-512, two panels side by side are one tile of
 *    6 channels x 32 columns in zmm registers (kw_tile), twice the flops
 *    per instruction;
 *  - the next output row's new image rows are prefetched;
 *  - the panels outermost when the chunk's weights of all the block's
 *    micro-tiles fit in L1, so a panel's rows are read from L1 by every
 *    micro-tile.
 * Each output is the same chain as kx_block's: k = (c, kd, kh, kw) in
 * order from its bias, padding taps included (w * 0 added), a chunk's
 * running sums stored to Y and reloaded; so the bits are the packed
 * path's, whatever the chunking (tests/kernels/test_conv.c). */
#include <stdint.h>
#include <string.h>

#include "kernels/conv_kxk.h"
#include "kernels/fused_impl.h"

static int kr_on = 1;

void hp_kxk_set_run(int on)
{
	kr_on = on;
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

#define KR_TARGET __attribute__((target("avx2,fma")))
#define KR_INLINE __attribute__((always_inline)) inline
/* Widest kernel row taken (wider ones pack). */
#define KR_MAXK 16
/* Panels outermost when the chunk's weights of the micro-tiles fit this. */
#define KR_W_L1 (16 << 10)
/* Edge panels read the image under lane masks up to this many micro-tiles
 * of output channels, and copy their rows (zeros outside) with more: a
 * masked tap costs each micro-tile, a copy is shared by all of them
 * (hpdlf-bench-conv-libs classes, 1 thread, one process, 200 calls each
 * way alternating, median GF/s, copies -> masks: u-128 (3 tiles) 74.5 ->
 * 76.0, u-dec128 (3) 73.3 -> 75.0; u-64 (6) 74.0 -> 73.1, u-32 (11)
 * 81.2 -> 72.0, u-dec32 (11) 81.5 -> 72.4). */
#define KR_MASK_TILES 3

static int64_t kr_min(int64_t a, int64_t b)
{
	return a < b ? a : b;
}

struct kr_panel {
	int64_t off;          /* image column of lane 0's first tap */
	int ncols;            /* output columns of the panel (1..16) */
	int edge;             /* some lane of some tap falls outside the row */
	int32_t *mask;        /* edge panels read under masks: per kw, -1 for the lanes inside the row */
	int hf;               /* with masks: bit h, lanes 8h .. 8h + 7 inside the row for every kw */
};

/* Accumulator (r, v) of a micro-tile: named registers, not an array (GCC
 * stored an array's 12 vectors to the stack at every kernel row). */
#define KR_ACC(r, v) c##r##v
#define KR_INIT(r)                                                                              \
	if (mr > r) {                                                                           \
		KR_ACC(r, 0) = kr_acc0(first, bias, r, full, y + r * ldy, sm[0]);               \
		KR_ACC(r, 1) = kr_acc0(first, bias, r, full, y + r * ldy + 8, sm[1]);           \
	}
#define KR_FMA(r)                                                                               \
	if (mr > r) {                                                                           \
		__m256 w = _mm256_broadcast_ss(a + r * lda);                                     \
		KR_ACC(r, 0) = _mm256_fmadd_ps(w, b0, KR_ACC(r, 0));                             \
		KR_ACC(r, 1) = _mm256_fmadd_ps(w, b1, KR_ACC(r, 1));                             \
	}
#define KR_OUT(r)                                                                               \
	if (mr > r) {                                                                           \
		acc[r][0] = KR_ACC(r, 0);                                                        \
		acc[r][1] = KR_ACC(r, 1);                                                        \
	}

/* A chain's start: the bias (or 0) on the first chunk, else the running
 * sum stored in y. */
KR_TARGET static KR_INLINE __m256 kr_acc0(int first, const float *bias, int r, int full, const float *y, __m256i m)
{
	if (first)
		return bias ? _mm256_set1_ps(bias[r]) : _mm256_setzero_ps();
	return full ? _mm256_loadu_ps(y) : _mm256_maskload_ps(y, m);
}

/* The chain of k over nk taps, tap k's 16 lanes at taps[k] + off, row r's
 * weights at a + r * lda (W in place, as kx_tile); then the stores and the
 * epilogue as kx_tile.  An edge panel (em not NULL) loads tap k under the
 * lanes of em's row k % k2 (kw): the lanes outside the image read 0, as
 * the zeros of a copy would (the same chain, the same bits); its halves
 * of 8 lanes inside the row for every kw (bits 0 and 1 of hf) load
 * plainly (masked loads cost more: with every tap masked, u-32's 3x3
 * ran at 68 GF/s, with its inner halves plain at 72, in one process). */
KR_TARGET static KR_INLINE void kr_tile(const int mr, int64_t nk, const float *const *taps, int64_t off, int ncols,
					const float *a, int64_t lda, float *y, int64_t ldy, int first, const float *bias,
					const struct hp_fma_fin *f, const float *add, const int32_t *em, int k2, int hf)
{
	__m256 c00 = _mm256_setzero_ps(), c01 = c00, c10 = c00, c11 = c00, c20 = c00, c21 = c00;
	__m256 c30 = c00, c31 = c00, c40 = c00, c41 = c00, c50 = c00, c51 = c00, acc[KX_MR][2];
	int full = ncols == KX_NR;
	__m256i sm[2] = { fma_mask(ncols), fma_mask(ncols - 8) };

	KR_INIT(0) KR_INIT(1) KR_INIT(2) KR_INIT(3) KR_INIT(4) KR_INIT(5)
	if (!em)
		for (int64_t k = 0; k < nk; k++, a++) {
			__m256 b0 = _mm256_loadu_ps(taps[k] + off), b1 = _mm256_loadu_ps(taps[k] + off + 8);
			KR_FMA(0) KR_FMA(1) KR_FMA(2) KR_FMA(3) KR_FMA(4) KR_FMA(5)
		}
	else
		for (int64_t k = 0; k < nk; taps += k2)
			for (int kw = 0; kw < k2; kw++, k++, a++) {
				const __m256i *m = (const __m256i *)(const void *)(em + kw * KX_NR);
				const float *t = taps[kw] + off;
				__m256 b0 = hf & 1 ? _mm256_loadu_ps(t) : _mm256_maskload_ps(t, _mm256_loadu_si256(m));
				__m256 b1 = hf & 2 ? _mm256_loadu_ps(t + 8)
						     : _mm256_maskload_ps(t + 8, _mm256_loadu_si256(m + 1));
				KR_FMA(0) KR_FMA(1) KR_FMA(2) KR_FMA(3) KR_FMA(4) KR_FMA(5)
			}
	KR_OUT(0) KR_OUT(1) KR_OUT(2) KR_OUT(3) KR_OUT(4) KR_OUT(5)
	fma_store_acc(acc, mr, 2, y, ldy, ncols, full);
	/* a pass of its own, as kx_tile's */
	if (f)
		fma_finish_tile(mr, ncols > 8 ? 2 : 1, y, ldy, ncols, f, add);
}

#define KR_CASE(R)                                                                      \
	case R:                                                                         \
		kr_tile(R, nk, taps, off, ncols, a, lda, y, ldy, first, bias, f, add, em, k2, hf); \
		break;

KR_TARGET static void kr_micro(int mr, int64_t nk, const float *const *taps, int64_t off, int ncols,
			       const float *a, int64_t lda, float *y, int64_t ldy, int first, const float *bias,
			       const struct hp_fma_fin *f, const float *add, const int32_t *em, int k2, int hf)
{
	switch (mr) {
		KR_CASE(1)
		KR_CASE(2)
		KR_CASE(3)
		KR_CASE(4)
		KR_CASE(5)
		KR_CASE(6)
	default:
		break;
	}
}

/* AVX-512 micro-tiles of two panels side by side (32 output columns, two
 * zmm accumulators per output channel, 12 chains at 6 channels): on this
 * project's Zen 5 machines a 512-bit FMA issues at the rate of a 256-bit
 * one, so a 16-lane panel is one register and the kernel does twice the
 * flops per instruction (class u-32 of hpdlf-bench-conv-libs: oneDNN's
 * blocked AVX-512 kernel 262 GF/s against these AVX2 tiles' 115).  Each
 * lane is the same chain as kr_tile's (one FMA per tap, k in order, from
 * the bias or the stored running sum), so the bits are kr_tile's.  Edge
 * panels always read copies of their rows (kr_copy), whatever the
 * channels: the tiles' masked 512-bit loads cost more than the copies
 * (hpdlf-bench-conv-libs --kxk 1 --fwd --reps 20, 1 thread, three runs
 * alternating, GF/s, masks -> copies: u-128 (3 tiles) 165 -> 180,
 * u-dec128 (3) 161 -> 172, u-128c3 136 -> 142; u-64 (6) copies -> masks
 * 181 -> 142, u-32 (11) 201 -> 160).  Only full panels (16 columns):
 * every run-node panel is one. */
#define KR_WIDE_TARGET __attribute__((target("avx512f,avx2,fma")))

static int kr_wide_on = 1;

void hp_kxk_set_wide(int on)
{
	kr_wide_on = on;
}

int hp_kxk_wide_ok(void)
{
	static int cached = -1;

	if (cached < 0)
		cached = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx2") &&
			 __builtin_cpu_supports("fma");
	return cached && kr_wide_on;
}

#define KW_INIT(r)                                                                              \
	if (mr > r) {                                                                           \
		p##r = first ? (bias ? _mm512_set1_ps(bias[r]) : _mm512_setzero_ps())           \
			     : _mm512_loadu_ps(y + r * ldy);                                    \
		q##r = first ? p##r : _mm512_loadu_ps(y + r * ldy + KX_NR);                    \
	}
#define KW_FMA(r)                                                                               \
	if (mr > r) {                                                                           \
		__m512 w = _mm512_set1_ps(a[r * lda]);                                          \
		p##r = _mm512_fmadd_ps(w, b0, p##r);                                            \
		q##r = _mm512_fmadd_ps(w, b1, q##r);                                            \
	}
#define KW_OUT(r)                                                                               \
	if (mr > r) {                                                                           \
		_mm512_storeu_ps(y + r * ldy, p##r);                                            \
		_mm512_storeu_ps(y + r * ldy + KX_NR, q##r);                                   \
	}

/* Rows r < mr of panels 0 and 1 (y and y + 16) over nk taps: panel i's
 * tap k at ti[k] + oi. */
KR_WIDE_TARGET static KR_INLINE void kw_tile(const int mr, int64_t nk, const float *const *t0, int64_t o0,
					     const float *const *t1, int64_t o1, const float *a, int64_t lda, float *y,
					     int64_t ldy, int first, const float *bias)
{
	__m512 p0 = _mm512_setzero_ps(), p1 = p0, p2 = p0, p3 = p0, p4 = p0, p5 = p0;
	__m512 q0 = p0, q1 = p0, q2 = p0, q3 = p0, q4 = p0, q5 = p0;

	KW_INIT(0) KW_INIT(1) KW_INIT(2) KW_INIT(3) KW_INIT(4) KW_INIT(5)
	for (int64_t k = 0; k < nk; k++, a++) {
		__m512 b0 = _mm512_loadu_ps(t0[k] + o0), b1 = _mm512_loadu_ps(t1[k] + o1);
		KW_FMA(0) KW_FMA(1) KW_FMA(2) KW_FMA(3) KW_FMA(4) KW_FMA(5)
	}
	KW_OUT(0) KW_OUT(1) KW_OUT(2) KW_OUT(3) KW_OUT(4) KW_OUT(5)
}

#define KW_CASE(R)                                                                      \
	case R:                                                                         \
		kw_tile(R, nk, t0, o0, t1, o1, a, lda, y, ldy, first, bias);            \
		break;

KR_WIDE_TARGET void hp_kxk_wide_micro(int mr, int64_t nk, const float *const *t0, int64_t o0, const float *const *t1,
				    int64_t o1, const float *a, int64_t lda, float *y, int64_t ldy, int first,
				    const float *bias, const struct hp_fma_fin *f, const float *add)
{
	switch (mr) {
		KW_CASE(1)
		KW_CASE(2)
		KW_CASE(3)
		KW_CASE(4)
		KW_CASE(5)
		KW_CASE(6)
	default:
		break;
	}
	/* a pass of its own, as kr_tile's */
	if (f) {
		fma_finish_tile(mr, 2, y, ldy, KX_NR, f, add);
		fma_finish_tile(mr, 2, y + KX_NR, ldy, KX_NR, f, add ? add + KX_NR : NULL);
	}
}

/* AVX-512 micro-tiles of one panel and two micro-tiles of rows (up to
 * 2 * KX_MR = 12 output channels, one zmm accumulator each): a block of a
 * single panel (ResNet-18's 2x2 planes at a batch of 4 are 16 columns in
 * all) has no second panel for kw_tile, and the AVX2 tile of one panel
 * does half the flops per instruction (class 3x3-tiny of
 * hpdlf-bench-conv-libs --fwd: 116 GF/s).  Twelve chains hide the FMAs'
 * latency as kw_tile's twelve do; the weights are broadcast from their
 * rows in place, so each tap's panel vector is loaded once for 12 FMAs.
 * Such blocks stream their weights (ResNet-18's stage 4: 27 MiB of them,
 * read once an inference, past L3 beside the rest): every 16 taps each
 * row prefetches the line of the next micro-tiles' row below it, so the
 * next tile finds its chunk of W in L1 (ResNet-18 at 64x64, 1 thread:
 * 1837 -> 1712 ms of CPU time for 220 inferences, one binary, 5 runs
 * alternating, medians).
 * Each lane is the same chain as kx_tile's (one FMA per tap, k in order,
 * from the bias or the stored running sum): the same bits. */
#define KT_INIT(r)                                                                              \
	if (mr > r)                                                                             \
		p##r = first ? (bias ? _mm512_set1_ps(bias[r]) : _mm512_setzero_ps())           \
			     : _mm512_maskz_loadu_ps(cm, y + r * ldy);
#define KT_FMA(r)                                                                               \
	if (mr > r)                                                                             \
		p##r = _mm512_fmadd_ps(_mm512_set1_ps(a[r * lda]), b0, p##r);
#define KT_OUT(r)                                                                               \
	if (mr > r)                                                                             \
		_mm512_mask_storeu_ps(y + r * ldy, cm, p##r);

KR_WIDE_TARGET static KR_INLINE void kt_tile(const int mr, int64_t nk, const float *const *t, const float *a,
					     int64_t lda, float *y, int64_t ldy, __mmask16 cm, int first,
					     const float *bias)
{
	__m512 p0 = _mm512_setzero_ps(), p1 = p0, p2 = p0, p3 = p0, p4 = p0, p5 = p0;
	__m512 p6 = p0, p7 = p0, p8 = p0, p9 = p0, p10 = p0, p11 = p0;

	KT_INIT(0) KT_INIT(1) KT_INIT(2) KT_INIT(3) KT_INIT(4) KT_INIT(5)
	KT_INIT(6) KT_INIT(7) KT_INIT(8) KT_INIT(9) KT_INIT(10) KT_INIT(11)
	for (int64_t k = 0; k < nk; k++, a++) {
		__m512 b0 = _mm512_maskz_loadu_ps(cm, t[k]);
		if ((k & 15) == 0) /* the next tile's rows, a line each (prefetches never fault) */
			for (int r = 0; r < mr; r++)
				_mm_prefetch((const char *)(a + (mr + r) * lda), _MM_HINT_T0);
		KT_FMA(0) KT_FMA(1) KT_FMA(2) KT_FMA(3) KT_FMA(4) KT_FMA(5)
		KT_FMA(6) KT_FMA(7) KT_FMA(8) KT_FMA(9) KT_FMA(10) KT_FMA(11)
	}
	KT_OUT(0) KT_OUT(1) KT_OUT(2) KT_OUT(3) KT_OUT(4) KT_OUT(5)
	KT_OUT(6) KT_OUT(7) KT_OUT(8) KT_OUT(9) KT_OUT(10) KT_OUT(11)
}

#define KT_CASE(R)                                                                      \
	case R:                                                                         \
		kt_tile(R, nk, t, a, lda, y, ldy, cm, first, bias);                     \
		break;

KR_WIDE_TARGET void hp_kxk_tall_micro(int mr, int64_t nk, const float *const *t, const float *a, int64_t lda,
				    float *y, int64_t ldy, int ncols, int first, const float *bias,
				    const struct hp_fma_fin *f, const float *add)
{
	__mmask16 cm = (__mmask16)((1u << ncols) - 1);

	switch (mr) {
		KT_CASE(1)
		KT_CASE(2)
		KT_CASE(3)
		KT_CASE(4)
		KT_CASE(5)
		KT_CASE(6)
		KT_CASE(7)
		KT_CASE(8)
		KT_CASE(9)
		KT_CASE(10)
		KT_CASE(11)
		KT_CASE(12)
	default:
		break;
	}
	/* a pass of its own, as kr_tile's */
	if (f)
		fma_finish_tile(mr, ncols > 8 ? 2 : 1, y, ldy, ncols, f, add);
}

/* Floats a panel's taps of one kernel row span: 16 lanes and the kw
 * shifts, in whole vectors. */
static int64_t kr_span(const struct hp_colgeom *g)
{
	return (KX_NR + (g->k[2] - 1) * g->dil[2] + 7) / 8 * 8;
}

/* Panel of n output columns from ow; an edge panel's masks go to mask
 * (k2 rows of 16 lanes) unless it is NULL (the panel copies its rows). */
static void kr_panel_of(const struct hp_colgeom *g, int64_t ow, int n, struct kr_panel *pn, int32_t *mask)
{
	pn->off = ow - g->pad[2];
	pn->ncols = n;
	pn->edge = pn->off < 0 || pn->off + (g->k[2] - 1) * g->dil[2] + KX_NR > g->img[2];
	pn->mask = pn->edge ? mask : NULL;
	pn->hf = 3;
	for (int64_t kw = 0; pn->mask && kw < g->k[2]; kw++)
		for (int q = 0; q < KX_NR; q++) {
			int64_t c = pn->off + kw * g->dil[2] + q;
			mask[kw * KX_NR + q] = c >= 0 && c < g->img[2] ? -1 : 0;
			if (!mask[kw * KX_NR + q])
				pn->hf &= ~(1 << (q / 8));
		}
}

/* dst[q] = row[off + q] inside the image row, 0 outside, q < len (a
 * multiple of 8): an edge panel's copy of one kernel row.  Each vector of
 * dst is stored once: plain loads inside the row, masked loads across its
 * ends (masked lanes are not read: no fault before or after the row);
 * scalar stores under the vectors the micro-tiles then read cost a
 * forwarding stall each. */
KR_TARGET static void kr_copy(const float *row, int64_t off, int64_t W, int64_t len, float *dst)
{
	__m256i iota = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);

	for (int64_t q = 0; q < len; q += 8) {
		int64_t c = off + q;
		__m256 v;
		if (c >= 0 && c + 8 <= W)
			v = _mm256_loadu_ps(row + c);
		else if (c + 8 <= 0 || c >= W)
			v = _mm256_setzero_ps();
		else {
			__m256i l = _mm256_add_epi32(iota, _mm256_set1_epi32((int32_t)c));
			__m256i in = _mm256_and_si256(_mm256_cmpgt_epi32(l, _mm256_set1_epi32(-1)),
						      _mm256_cmpgt_epi32(_mm256_set1_epi32((int32_t)W), l));
			v = _mm256_maskload_ps(row + c, in);
		}
		_mm256_storeu_ps(dst + q, v);
	}
}

/* taps[i * k2 + kw] for kernel rows i0 .. i0 + n - 1 (flat (c, kd, kh)) of
 * output row (od, oh): the image row, or zrow (zeros wherever a panel's
 * lanes inside the image read) in the padding, at column kw * dil. */
static void kr_row_taps(const struct hp_colgeom *g, const float *x, int64_t od, int64_t oh, int64_t i0, int64_t n,
			const float *zrow, const float **taps)
{
	int64_t k2 = g->k[2], c = i0 / (g->k[0] * g->k[1]), kd = i0 / g->k[1] % g->k[0], kh = i0 % g->k[1];

	/* (c, kd, kh) counted along, not divided out of i per row */
	for (int64_t i = 0; i < n; i++) {
		int64_t id = od * g->stride[0] - g->pad[0] + kd * g->dil[0];
		int64_t ih = oh * g->stride[1] - g->pad[1] + kh * g->dil[1];
		const float *row = x + c * g->img_vol + (id * g->img[1] + ih) * g->img[2];
		int in = id >= 0 && id < g->img[0] && ih >= 0 && ih < g->img[1];
		for (int64_t kw = 0; kw < k2; kw++)
			*taps++ = (in ? row : zrow) + kw * g->dil[2];
		if (++kh == g->k[1]) {
			kh = 0;
			if (++kd == g->k[0])
				kd = 0, c++;
		}
	}
}

/* Whether every block of the node is panels of single output rows (blocks
 * and panels start at multiples of 16 columns of a plane), and its blocks
 * span no batch items (kx_span: planes under 64 positions).  Rows of 32
 * and more: in 16-wide ones every panel is an edge panel, and the copies
 * of eight output rows a block cost more than packing (class u-16: 44
 * against 55 GF/s). */
static int kr_node_ok(const struct hp_conv *cv)
{
	return kr_on && cv->g.stride[2] == 1 && cv->g.k[2] <= KR_MAXK && cv->g.grid[2] % KX_NR == 0 &&
	       cv->g.grid[2] >= 2 * KX_NR && cv->yvol >= 64;
}

struct kr_block {
	const struct kx_run *r;
	int64_t j0, nc, np, t0, t1, ybase, M, K;
	const float *x, *w, *bias;
	int64_t rpc, span;                    /* kernel rows per chunk, kr_span */
	const float *zrow;                    /* W + span zeros: a padding row's taps */
	const float **rtab;                   /* per output row of the block: its taps (rpc * k2 each) */
	int copy;                             /* edge panels copy their rows (else masks) */
	const float **etab;                   /* copy: per edge panel, its taps into copies */
	float *copies;                        /* copy: the edge panels' copies of the rows */
	const float *const *ptaps[KX_NB / KX_NR]; /* per panel: its taps, at + off (copied: + 0) */
	struct kr_panel pn[KX_NB / KX_NR];
	int32_t masks[KX_NB / KX_NR][KR_MAXK * KX_NR]; /* of the edge panels */
};

/* One micro-tile of one panel over the chunk of kernel rows [i0, i0 + n). */
static void kr_one(const struct kr_block *b, int64_t p, int64_t t, int64_t i0, int64_t n, int last)
{
	const struct kx_run *r = b->r;
	const struct hp_conv *cv = r->cv;
	int64_t m0 = kx_tile_m0(b->M, r->mt, t), mr = kx_tile_rows(b->M, r->mt, t), k2 = cv->g.k[2];
	int64_t off = b->ybase + m0 * cv->yvol + b->j0 + p * KX_NR;
	const struct hp_fma_fin *fin = r->fin_ok && last ? &r->fin : NULL;
	int cp = b->copy && b->pn[p].edge;

	kr_micro((int)mr, n * k2, b->ptaps[p], cp ? 0 : b->pn[p].off, b->pn[p].ncols, b->w + m0 * b->K + i0 * k2,
		 b->K, r->y + off, cv->yvol, i0 == 0, b->bias ? b->bias + m0 : NULL, fin,
		 fin && r->fin_add ? r->addend + off : NULL, cp ? NULL : b->pn[p].mask, (int)k2, b->pn[p].hf);
}

/* Micro-tile t of panels p and p + 1 over the chunk of kernel rows
 * [i0, i0 + n) as one AVX-512 tile (kw_tile) when the machine has it and
 * both panels are full, else each as kr_one; the panels done (2 or 1,
 * whatever t). */
static int64_t kr_pair(const struct kr_block *b, int64_t p, int64_t t, int64_t i0, int64_t n, int last, int wide)
{
	const struct kx_run *r = b->r;
	const struct hp_conv *cv = r->cv;
	const struct kr_panel *p0 = &b->pn[p], *p1 = &b->pn[p + 1];
	int64_t m0, mr, k2 = cv->g.k[2], off;
	int c0, c1;

	if (!wide || !b->copy || p + 1 >= b->np || p0->ncols != KX_NR || p1->ncols != KX_NR) {
		kr_one(b, p, t, i0, n, last);
		return 1;
	}
	m0 = kx_tile_m0(b->M, r->mt, t);
	mr = kx_tile_rows(b->M, r->mt, t);
	off = b->ybase + m0 * cv->yvol + b->j0 + p * KX_NR;
	c0 = b->copy && p0->edge;
	c1 = b->copy && p1->edge;
	hp_kxk_wide_micro((int)mr, n * k2, b->ptaps[p], c0 ? 0 : p0->off, b->ptaps[p + 1], c1 ? 0 : p1->off,
		 b->w + m0 * b->K + i0 * k2, b->K, r->y + off, cv->yvol, i0 == 0, b->bias ? b->bias + m0 : NULL,
		 r->fin_ok && last ? &r->fin : NULL, r->fin_ok && last && r->fin_add ? r->addend + off : NULL);
	return 2;
}

/* An edge panel's taps of n kernel rows: copies of its rows (zeros
 * outside the image) from its output row's taps rt, at t. */
static void kr_edge_taps(struct kr_block *b, int64_t p, const float *const *rt, int64_t n, const float **t,
			 float **cp)
{
	const struct kr_panel *pn = &b->pn[p];
	const struct hp_colgeom *g = &b->r->cv->g;
	int64_t k2 = g->k[2];

	for (int64_t i = 0; i < n; i++, rt += k2) {
		const float *s = b->zrow;
		if (rt[0] != b->zrow) {
			kr_copy(rt[0], pn->off, g->img[2], b->span, *cp);
			s = *cp;
			*cp += b->span;
		}
		for (int64_t kw = 0; kw < k2; kw++)
			*t++ = s + (s != b->zrow ? kw * g->dil[2] : 0);
	}
}

/* The chunk's taps (per output row of the block, edge panels that copy
 * their own), then the micro-tiles. */
static void kr_chunk(struct kr_block *b, int64_t i0, int64_t n, int last)
{
	const struct hp_conv *cv = b->r->cv;
	int64_t o1 = cv->g.grid[1], o2 = cv->g.grid[2], prev = -1, nt = 0, ne = 0, k2 = cv->g.k[2];
	const float **rt = b->rtab;
	float *cp = b->copies;
	int pouter = (b->t1 - b->t0) * KX_MR * n * k2 * (int64_t)sizeof(float) <= KR_W_L1, wide = hp_kxk_wide_ok();

	for (int64_t p = 0; p < b->np; p++) {
		int64_t row = (b->j0 + p * KX_NR) / o2;
		if (row != prev) {
			rt = b->rtab + nt++ * b->rpc * k2;
			kr_row_taps(&cv->g, b->x, row / o1, row % o1, i0, n, b->zrow, rt);
		}
		b->ptaps[p] = rt;
		if (b->copy && b->pn[p].edge) {
			const float **et = b->etab + ne++ * b->rpc * k2;
			kr_edge_taps(b, p, rt, n, et, &cp);
			b->ptaps[p] = et;
		}
		prev = row;
	}
	if (pouter)
		for (int64_t p = 0, d = 1; p < b->np; p += d)
			for (int64_t t = b->t0; t < b->t1; t++)
				d = kr_pair(b, p, t, i0, n, last, wide);
	else
		for (int64_t t = b->t0; t < b->t1; t++)
			for (int64_t p = 0; p < b->np;)
				p += kr_pair(b, p, t, i0, n, last, wide);
}

/* The image rows the block after this one (the next output row) reads
 * first, towards L2: a 128-wide plane's block reads 16 channels' new rows
 * 64 KiB apart, a miss each at the block's first panel otherwise. */
KR_TARGET static void kr_prefetch_next(const struct kr_block *b)
{
	const struct hp_conv *cv = b->r->cv;
	const struct hp_colgeom *g = &cv->g;
	int64_t row = (b->j0 + b->nc) / g->grid[2], o1 = g->grid[1], W = g->img[2];
	int64_t ih = row % o1 * g->stride[1] - g->pad[1] + (g->k[1] - 1) * g->dil[1];
	int64_t id = row / o1 * g->stride[0] - g->pad[0] + (g->k[0] - 1) * g->dil[0];

	if (row >= g->grid_vol / g->grid[2] || ih < 0 || ih >= g->img[1] || id < 0 || id >= g->img[0])
		return;
	for (int64_t c = 0; c < cv->cin_g; c++) {
		const char *p = (const char *)(b->x + c * g->img_vol + (id * g->img[1] + ih) * W);
		for (int64_t q = 0; q < W * (int64_t)sizeof(float); q += 64)
			_mm_prefetch(p + q, _MM_HINT_T0);
	}
}

/* The block's geometry and its tables in the worker's panel area; 0 when
 * they do not fit it (the caller packs the block). */
static int kr_layout(struct kr_block *b, float *buf)
{
	const struct hp_conv *cv = b->r->cv;
	int64_t nrows = cv->cin_g * cv->g.k[0] * cv->g.k[1], k2 = cv->g.k[2], need, zlen, nedge = 0;

	b->np = (b->nc + KX_NR - 1) / KX_NR;
	b->span = kr_span(&cv->g);
	/* chunks of at most KX_KC taps, as even as whole kernel rows allow (a
	 * short last chunk would reload Y for a few taps) */
	b->rpc = kr_min(KX_KC / cv->g.k[2] > 0 ? KX_KC / cv->g.k[2] : 1, nrows);
	b->rpc = (nrows + (nrows + b->rpc - 1) / b->rpc - 1) / ((nrows + b->rpc - 1) / b->rpc);
	b->copy = hp_kxk_wide_ok() || b->r->mt > KR_MASK_TILES;
	for (int64_t p = 0; p < b->np; p++) {
		kr_panel_of(&cv->g, (b->j0 + p * KX_NR) % cv->g.grid[2], (int)kr_min(KX_NR, b->nc - p * KX_NR),
			    &b->pn[p], b->copy ? NULL : b->masks[p]);
		nedge += b->copy && b->pn[p].edge;
	}
	zlen = cv->g.img[2] + b->span;
	need = zlen + 2 * (b->np + nedge) * b->rpc * k2 + nedge * b->rpc * b->span;
	if (need > b->r->panel)
		return 0;
	memset(buf, 0, (size_t)zlen * sizeof(float));
	b->zrow = buf;
	b->rtab = (const float **)(void *)(buf + zlen);
	b->etab = b->rtab + b->np * b->rpc * k2;
	b->copies = buf + zlen + 2 * (b->np + nedge) * b->rpc * k2;
	return 1;
}

int hp_kxk_run_block(const struct kx_run *r, int64_t bg, int64_t j0, int64_t nc, int64_t t0, int64_t t1,
		     float *buf)
{
	const struct hp_conv *cv = r->cv;
	struct kr_block b = { .r = r, .j0 = j0, .nc = nc, .t0 = t0, .t1 = t1, .M = cv->cout_g, .K = cv->kdim };
	int64_t nb = bg / cv->group, g = bg % cv->group, nrows = cv->cin_g * cv->g.k[0] * cv->g.k[1];

	if (!kr_node_ok(cv) || r->span || r->wlazy || !kr_layout(&b, buf))
		return 0;
	b.x = r->x + (nb * cv->cin + g * cv->cin_g) * cv->xvol;
	b.w = r->w + g * b.M * b.K;
	b.bias = r->b ? r->b + g * b.M : NULL;
	b.ybase = (nb * cv->cout + g * b.M) * cv->yvol;
	kr_prefetch_next(&b);
	for (int64_t i0 = 0; i0 < nrows; i0 += b.rpc) {
		int64_t n = kr_min(b.rpc, nrows - i0);
		kr_chunk(&b, i0, n, i0 + n == nrows);
	}
	for (int64_t m = kx_tile_m0(b.M, r->mt, t0); r->epi && !r->fin_ok && m < kx_tile_m0(b.M, r->mt, t1); m++)
		hp_epi_span(r->epi, r->y, r->addend, b.ybase + m * cv->yvol + j0, b.ybase + m * cv->yvol + j0 + nc);
	return 1;
}

#else

void hp_kxk_set_wide(int on)
{
	(void)on;
}

int hp_kxk_wide_ok(void)
{
	return 0;
}

int hp_kxk_run_block(const struct kx_run *r, int64_t bg, int64_t j0, int64_t nc, int64_t t0, int64_t t1,
		     float *buf)
{
	(void)r, (void)bg, (void)j0, (void)nc, (void)t0, (void)t1, (void)buf;
	return 0;
}

#endif
