/* Depthwise 3x3 forward, 2-D, stride 1 or 2, undilated, with eight
 * channels per register pass (AVX2 + FMA): the lanes of a vector are eight
 * output channels at one position, not eight positions of one channel.
 *
 * Why: conv_dw3.c runs one plane at a time, its vectors along a row.  On
 * MobileNetV2's 14x14 and 7x7 planes a row is one or two vectors (the
 * last masked), so building its padded rows, the masks and the calls cost
 * more than the nine taps; at stride 2 a row's inputs must be split into
 * even and odd columns first.  Here a block of eight planes is transposed
 * once, row by row, into rows of [position][8 channels] (zero positions
 * for the padding), every output is nine loads and nine FMAs whatever the
 * plane's width or the stride, and the block's output plane is transposed
 * back as one flat run of positions, so even a 7x7 plane is six whole
 * vectors per channel.
 *
 * Determinism: every output is the chain bias + w0 x0 + ... + w8 x8 of
 * fused multiply-adds in (kh, kw) order, taps in the padding included as
 * w * 0: conv_dw3.c's chain, so the two kernels give the same bits, and a
 * block's lanes, the thread count and bands of rows (whose halo rows are
 * the same image rows) change nothing.  The epilogue (Relu, Clip after an
 * optional full addend) is fused_epi.c's expression in registers. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/conv_impl.h"
#include "kernels/cpu.h"
#include "kernels/simd_tr16.h"
#include "kernels/fused_impl.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define DWC_X86 1
#define DWC_TARGET __attribute__((target("avx2,fma")))
#define DWC_INLINE __attribute__((always_inline)) inline
#endif

#define DWC_L 8     /* channels per block (the lanes) */
#define DWC_SLOTS 4 /* ring of transposed input rows: a step's three and the next's */
#define DWC_OB 8    /* outputs of a row per step (independent FMA chains) */
/* The block's output plane lives transposed in the scratch: planes up to
 * this many positions (64x64: 128 KiB, in L2). */
#define DWC_MAX_GRID 4096

static int dwc_mode;
static int dwz_on(const struct hp_colgeom *g);

void hp_dwc_set_mode(int mode)
{
	dwc_mode = mode;
}

int hp_dwc_eligible(const struct hp_colgeom *g)
{
	return hp_dw3_eligible(g) && g->grid_vol <= DWC_MAX_GRID;
}

/* Auto: output rows narrower than 14 (conv_dw3.c's rows are mostly masked
 * tails there: 7x7 planes 25.5 against 23.6 GFLOP/s per CPU-second).
 * Wider planes vectorize along their rows, loaded in place, with no
 * transposes (14x14: 42 against 37; stride 2 from 112x112: 40 against 30,
 * from 56x56: 35 against 28).  With clip (X read through Clip, conv_dw3.c's
 * rows then copy X into padded rows, split into even and odd columns at
 * stride 2): stride 2 and stride-1 rows narrower than 16, as measured
 * before those rows loaded in place.  With AVX-512, every plane the flat
 * sixteen-channel kernel takes (dwz_on: 7x7 53 against 23, 14x14 68
 * against 46, stride 2 from 14x14 29 against 20). */
int hp_dwc_wanted(const struct hp_colgeom *g, int clip)
{
	if (dwc_mode < 0 || !hp_dwc_eligible(g))
		return 0;
	if (dwc_mode > 0 || dwz_on(g))
		return 1;
	return clip ? g->stride[2] == 2 || g->grid[2] < 16 : g->grid[2] < 14;
}

/* Positions of a transposed input row: up to the last output's last tap,
 * whole vectors (the transposes go eight positions at a time). */
static int64_t dwc_width(const struct hp_colgeom *g)
{
	return ((g->grid[2] - 1) * g->stride[2] + 3 + 7) / 8 * 8;
}

/* ---- sixteen channels, small planes whole (AVX-512) ----
 * With AVX-512 a block is sixteen output channels, and a plane whose
 * padded input and output take at most DWZ_MAX positions of 16 floats is
 * transposed as one flat run of positions (a 7x7 plane: four 16 x 16
 * transposes in, four out, where rows of 9 positions took seven 8 x 8
 * ones in and seven out for eight channels) into [Hp][Wp][16] with the
 * padding as zeros; every output is the same nine loads and FMAs whatever
 * the stride.  The chain is the eight-lane one's, so the same bits.
 * DWZ_MAX takes 28x28 at stride 2 (forward 27 -> 30, dX 22 -> 27 GFLOP/s
 * per CPU-second), not 28x28 at stride 1 (level with conv_dw3.c's rows)
 * nor 56x56 at stride 2 (a third slower than they). */
#define DWZ_L 16
#define DWZ_MAX 1088

static int dwz_avx2;

void hp_dwc_set_avx2(int on)
{
	dwz_avx2 = on;
}

/* The padded input plane's rows and columns: up to the last output's taps. */
static int64_t dwz_hp(const struct hp_colgeom *g)
{
	return (g->grid[1] - 1) * g->stride[1] + 3;
}

static int64_t dwz_wp(const struct hp_colgeom *g)
{
	return (g->grid[2] - 1) * g->stride[2] + 3;
}

/* Floats of the flat kernel's scratch: the padded plane, the output plane
 * in whole transposes. */
static size_t dwz_floats(const struct hp_colgeom *g)
{
	return (size_t)((dwz_hp(g) * dwz_wp(g) + (g->grid_vol + DWZ_L - 1) / DWZ_L * DWZ_L) * DWZ_L);
}

/* Whether the flat sixteen-channel kernel runs g (geometry and CPU only). */
static int dwz_on(const struct hp_colgeom *g)
{
	return !dwz_avx2 && hp_cpu_avx512_fma() && hp_dwc_eligible(g) && dwz_floats(g) <= DWZ_MAX * DWZ_L;
}

int hp_dwz_packs(const struct hp_colgeom *g)
{
	/* conv_dwf.c and conv_dws.c read W as it is, and hp_dw_forward
	 * takes them before this kernel: a pack for their planes would be
	 * bytes of every inference plan that nothing reads */
	return hp_dwc_wanted(g, 0) && dwz_on(g) && !hp_dwf_wanted(g) && !hp_dws_wanted(g);
}

/* Floats of a worker's scratch: the ring, a zero row, the output plane;
 * or the flat kernel's. */
static size_t dwc_floats(const struct hp_colgeom *g)
{
	size_t a = (size_t)((DWC_SLOTS + 1) * dwc_width(g) * DWC_L + (g->grid_vol + 7) / 8 * 8 * DWC_L);
	size_t b = dwz_on(g) ? dwz_floats(g) : 0;

	return a > b ? a : b;
}

/* Callers that size one scratch for a node and run it in bands (fused_ir.c)
 * may run a band by the flat kernel where the node's geometry does not
 * qualify: room for any flat plane. */
size_t hp_dwc_scratch(const struct hp_colgeom *g)
{
	size_t a = dwc_floats(g);

	return hp_dwc_eligible(g) && a < DWZ_MAX * DWZ_L ? DWZ_MAX * DWZ_L : a;
}

struct dwc_run {
	const struct hp_dw *d;
	const float *x, *w, *b;
	float *y;
	int fin;                 /* the epilogue in registers (else per plane after) */
	int z;                   /* the flat sixteen-channel kernel (dwz_on) */
	int64_t lanes, blocks;   /* channels per block, blocks per item */
	float *scratch;          /* dwc_floats() per thread, zero rows cleared; NULL: none */
};

#ifdef DWC_X86
static const int32_t dwc_mask_src[16] = { -1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0 };

DWC_TARGET static DWC_INLINE __m256i dwc_mask(int64_t n)
{
	return _mm256_loadu_si256((const __m256i *)(dwc_mask_src + 8 - (n < 0 ? 0 : n > 8 ? 8 : n)));
}

/* The lanes l with column i - left + l in [0, n). */
DWC_TARGET static DWC_INLINE __m256i dwc_in(int64_t i, int64_t left, int64_t n)
{
	__m256i idx = _mm256_add_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7), _mm256_set1_epi32((int)(i - left)));

	return _mm256_andnot_si256(_mm256_cmpgt_epi32(_mm256_setzero_si256(), idx),
				   _mm256_cmpgt_epi32(_mm256_set1_epi32((int)n), idx));
}

/* Lanes l of image row x at column i - left + l where that lies in
 * [0, n), zeros elsewhere (masked lanes are not read). */
DWC_TARGET static DWC_INLINE __m256 dwc_row_vec(const float *x, int64_t i, int64_t left, int64_t n)
{
	if (i >= left && i - left + 8 <= n)
		return _mm256_loadu_ps(x + i - left);
	return _mm256_maskload_ps(x + i - left, dwc_in(i, left, n));
}

/* r[i] becomes column i of the 8x8 matrix whose rows were r[0..8). */
DWC_TARGET static DWC_INLINE void dwc_transpose(__m256 r[8])
{
	hp_tr8_ps(r);
}

/* v > hi ? hi : v, then (v < lo ? lo : that) as conv_dw3.c's dw3_clip:
 * min and max with these operand orders give the same values, NaN (the
 * second operand passes) and signed zeros included, as lo <= hi. */
DWC_TARGET static DWC_INLINE __m256 dwc_clip(__m256 v, __m256 lo, __m256 hi)
{
	return _mm256_max_ps(lo, _mm256_min_ps(hi, v));
}

/* Positions [p0, p1) (whole vectors inside the image row, eight planes)
 * of a transposed row: eight plain loads per step, nothing on the stack
 * (the general loop below kept its vectors there: a third of its time). */
DWC_TARGET static void dwc_fill8(const float *const *xs, int64_t off, int64_t p0, int64_t p1, float *row,
				 const float *clip)
{
	__m256 lo = _mm256_set1_ps(clip ? clip[0] : 0), hi = _mm256_set1_ps(clip ? clip[1] : 0);

	for (int64_t p = p0; p < p1; p += 8) {
		__m256 v[8];
		for (int l = 0; l < 8; l++)
			v[l] = _mm256_loadu_ps(xs[l] + off + p);
		if (clip)
			for (int l = 0; l < 8; l++)
				v[l] = dwc_clip(v[l], lo, hi);
		dwc_transpose(v);
		for (int q = 0; q < 8; q++)
			_mm256_storeu_ps(row + (p + q) * DWC_L, v[q]);
	}
}

/* Image row ih of the block's nc planes (xs[l]) as a transposed row,
 * positions [p0, p1) (multiples of 8): row[p][l] = plane l at column
 * p - left, zeros outside; with clip ({lo, hi}, hp_dw.xclip), the values
 * clipped as conv_dw3.c's dw3_clip does it, the zeros kept. */
#define DWC_FILL_SPAN(p0, p1)                                                                                       \
	for (int64_t p = (p0); p < (p1); p += 8) {                                                                   \
		__m256 v[8];                                                                                         \
		for (int l = 0; l < 8; l++)                                                                          \
			v[l] = l < nc ? dwc_row_vec(xs[l] + ih * n, p, left, n) : _mm256_setzero_ps();               \
		for (int l = 0; l < nc && clip; l++) {                                                               \
			__m256 r = _mm256_blendv_ps(v[l], hi, _mm256_cmp_ps(v[l], hi, _CMP_GT_OQ));                  \
			__m256 c = _mm256_blendv_ps(r, lo, _mm256_cmp_ps(v[l], lo, _CMP_LT_OQ));                     \
			if (p >= left && p - left + 8 <= n)                                                          \
				v[l] = c;                                                                            \
			else /* the padding's lanes stay 0 */                                                        \
				v[l] = _mm256_and_ps(c, _mm256_castsi256_ps(dwc_in(p, left, n)));                    \
		}                                                                                                    \
		dwc_transpose(v);                                                                                    \
		for (int q = 0; q < 8; q++)                                                                          \
			_mm256_storeu_ps(row + (p + q) * DWC_L, v[q]);                                               \
	}

/* The whole row in one loop (a loop over a span of it, as in
 * dwc_fill_wide, ran 4% slower on 7x7 and 14x14 planes). */
DWC_TARGET static void dwc_fill_row(const struct hp_colgeom *g, const float *const *xs, int nc, int64_t ih,
				    float *row, const float *clip)
{
	int64_t wd = dwc_width(g), left = g->pad[2], n = g->img[2];
	__m256 lo = _mm256_set1_ps(clip ? clip[0] : 0), hi = _mm256_set1_ps(clip ? clip[1] : 0);

	DWC_FILL_SPAN(0, wd)
}

/* A full block's row with whole vectors inside the image row from i0 to
 * i1: those by dwc_fill8 (25% off a stride-2 112x112 node), the ends as
 * above. */
DWC_TARGET static void dwc_fill_wide(const struct hp_colgeom *g, const float *const *xs, int nc, int64_t ih,
				     float *row, const float *clip, int64_t i0, int64_t i1)
{
	int64_t wd = dwc_width(g), left = g->pad[2], n = g->img[2];
	__m256 lo = _mm256_set1_ps(clip ? clip[0] : 0), hi = _mm256_set1_ps(clip ? clip[1] : 0);

	DWC_FILL_SPAN(0, i0)
	dwc_fill8(xs, ih * n - left, i0, i1, row, clip);
	DWC_FILL_SPAN(i1, wd)
}

/* Image row ih as a transposed row (rows of two or more whole vectors
 * inside the image by dwc_fill_wide). */
static void dwc_fill(const struct hp_colgeom *g, const float *const *xs, int nc, int64_t ih, float *row,
		     const float *clip)
{
	int64_t wd = dwc_width(g), left = g->pad[2], n = g->img[2];
	/* p >= left and p - left + 8 <= n, p a multiple of 8 */
	int64_t i0 = (left + 7) / 8 * 8, last = n + left - 8;
	int64_t i1 = nc == 8 && last >= i0 ? last / 8 * 8 + 8 : i0;

	i1 = i1 < wd ? i1 : wd;
	if (i1 - i0 >= 16)
		dwc_fill_wide(g, xs, nc, ih, row, clip, i0, i1);
	else
		dwc_fill_row(g, xs, nc, ih, row, clip);
}

/* N outputs of a row from o0, stride S: bias, then the nine taps in
 * (kh, kw) order, into out[o][8]. */
DWC_TARGET static DWC_INLINE void dwc_outs(const int N, const int S, const float *const *r, const __m256 *wv,
					   __m256 b, int64_t o0, float *out)
{
	__m256 acc[DWC_OB];

	for (int j = 0; j < N; j++)
		acc[j] = b;
	for (int kh = 0; kh < 3; kh++)
		for (int kw = 0; kw < 3; kw++)
			for (int j = 0; j < N; j++)
				acc[j] = _mm256_fmadd_ps(wv[3 * kh + kw],
							 _mm256_loadu_ps(r[kh] + ((o0 + j) * S + kw) * DWC_L), acc[j]);
	for (int j = 0; j < N; j++)
		_mm256_storeu_ps(out + (o0 + j) * DWC_L, acc[j]);
}

#define DWC_CASE(N)                                                                                   \
	case N:                                                                                        \
		if (s == 1)                                                                            \
			dwc_outs(N, 1, r, wv, b, o0, out);                                             \
		else                                                                                   \
			dwc_outs(N, 2, r, wv, b, o0, out);                                             \
		break;

/* One output row: out[o][8] for o < ow. */
DWC_TARGET static void dwc_row(int64_t s, int64_t ow, const float *const *r, const __m256 *wv, __m256 b, float *out)
{
	for (int64_t o0 = 0; o0 < ow; o0 += DWC_OB) {
		switch (ow - o0 < DWC_OB ? (int)(ow - o0) : DWC_OB) {
			DWC_CASE(1)
			DWC_CASE(2)
			DWC_CASE(3)
			DWC_CASE(4)
			DWC_CASE(5)
			DWC_CASE(6)
			DWC_CASE(7)
			DWC_CASE(8)
		default:
			break;
		}
	}
}

/* v = act(v + add) as fused_epi.c computes it (a compare and a select:
 * NaN passes; Clip's lo already min(lo, hi)). */
DWC_TARGET static DWC_INLINE __m256 dwc_finish(__m256 v, const struct hp_epi *e, const float *add, int64_t n)
{
	if (add)
		v = _mm256_add_ps(v, n >= 8 ? _mm256_loadu_ps(add) : _mm256_maskload_ps(add, dwc_mask(n)));
	if (e->act == HP_EPI_RELU) {
		v = _mm256_blendv_ps(v, _mm256_setzero_ps(), _mm256_cmp_ps(v, _mm256_setzero_ps(), _CMP_LT_OQ));
	} else if (e->act == HP_EPI_CLIP) {
		__m256 lo = _mm256_set1_ps(e->lo > e->hi ? e->hi : e->lo), hi = _mm256_set1_ps(e->hi);
		__m256 r = _mm256_blendv_ps(v, hi, _mm256_cmp_ps(v, hi, _CMP_GT_OQ));
		v = _mm256_blendv_ps(r, lo, _mm256_cmp_ps(v, lo, _CMP_LT_OQ));
	}
	return v;
}

/* The block's transposed output plane out[q][8] back to its nc planes
 * ys[l] (and their addends adds[l], or NULL), eight positions at a time;
 * the plane's last partial vector lane by lane, so nothing past a plane is
 * written (the next may be another worker's). */
DWC_TARGET static void dwc_store(const struct dwc_run *r, int64_t vol, const float *out, int nc, float *const *ys,
				 const float *const *adds)
{
	const struct hp_epi *e = r->fin ? r->d->epi : NULL;

	for (int64_t q = 0; q < vol; q += 8) {
		__m256 v[8];
		int64_t n = vol - q;
		for (int i = 0; i < 8; i++)
			v[i] = _mm256_loadu_ps(out + (q + i) * DWC_L);
		dwc_transpose(v);
		for (int l = 0; l < nc; l++) {
			__m256 o = e ? dwc_finish(v[l], e, adds[l] ? adds[l] + q : NULL, n) : v[l];
			if (n >= 8) {
				_mm256_storeu_ps(ys[l] + q, o);
			} else {
				float t[8];
				_mm256_storeu_ps(t, o);
				for (int64_t i = 0; i < n; i++)
					ys[l][q + i] = t[i];
			}
		}
	}
}

/* The transposed row of image row ih (a zero row outside the image), from
 * the ring: tags[] holds which image row each slot has. */
static const float *dwc_get(const struct hp_colgeom *g, const float *const *xs, int nc, int64_t ih, float *ring,
			    int64_t *tags, const float *zero, const float *clip)
{
	int64_t wd = dwc_width(g) * DWC_L, s = ih % DWC_SLOTS;

	if (ih < 0 || ih >= g->img[1])
		return zero;
	if (tags[s] != ih) {
		dwc_fill(g, xs, nc, ih, ring + s * wd, clip);
		tags[s] = ih;
	}
	return ring + s * wd;
}

/* Output channels [m0, m0 + nc) of item n. */
DWC_TARGET static void dwc_block(const struct dwc_run *r, int64_t n, int64_t m0, int nc, float *scratch)
{
	const struct hp_dw *d = r->d;
	const struct hp_colgeom *g = &d->g;
	int64_t cout = d->cin * d->mult, wd = dwc_width(g) * DWC_L, tags[DWC_SLOTS], ow = g->grid[2];
	float *zero = scratch + DWC_SLOTS * wd, *out = zero + wd;
	const float *xs[8], *adds[8] = { 0 };
	float *ys[8], wt[9][8] = { { 0 } }, bt[8] = { 0 };
	__m256 wv[9], b;
	int64_t cs[8];

	hp_dw_in_channels(m0, nc, d->mult, cs);
	for (int l = 0; l < nc; l++) {
		int64_t m = m0 + l, c = cs[l];
		xs[l] = r->x + (n * d->cin + c) * (d->xstride ? d->xstride : g->img_vol);
		ys[l] = r->y + (n * cout + m) * g->grid_vol;
		if (r->fin && d->epi->add == HP_EPI_ADD_FULL)
			adds[l] = d->addend + (n * cout + m) * g->grid_vol;
		for (int t = 0; t < 9; t++)
			wt[t][l] = r->w[m * 9 + t];
		bt[l] = r->b ? r->b[m] : 0.0f;
	}
	for (int t = 0; t < 9; t++)
		wv[t] = _mm256_loadu_ps(wt[t]);
	b = _mm256_loadu_ps(bt);
	for (int i = 0; i < DWC_SLOTS; i++)
		tags[i] = -1;
	for (int64_t oh = 0; oh < g->grid[1]; oh++) {
		const float *rows[3];
		for (int kh = 0; kh < 3; kh++)
			rows[kh] = dwc_get(g, xs, nc, oh * g->stride[1] - g->pad[1] + kh, scratch, tags, zero, d->xclip);
		dwc_row(g->stride[2], ow, rows, wv, b, out + oh * ow * DWC_L);
	}
	dwc_store(r, g->grid_vol, out, nc, ys, adds);
	if (d->epi && !r->fin) /* other epilogues: the block's adjacent planes at once, in cache */
		hp_epi_span(d->epi, r->y, d->addend, ys[0] - r->y, ys[nc - 1] - r->y + g->grid_vol);
}

#define DWZ_TARGET __attribute__((target("avx512f,avx2,fma")))

/* The block's nc planes xs[l] into the padded plane xp[hp][wp][16]
 * (clipped as dwc_clip where clip), sixteen positions a transpose; image
 * positions outside it (cropping pads) are not stored, the padding's
 * zeros are the caller's.  conv_dwkz.c's planes too. */
DWZ_TARGET void hp_dwz_fill(const struct hp_colgeom *g, const float *const *xs, int nc, const float *clip, float *xp,
			    int64_t hp, int64_t wp)
{
	int64_t vol = g->img_vol, w = g->img[2], ih = 0, iw = 0;
	int64_t ph = g->pad[1], pw = g->pad[2];
	__m512 lo = _mm512_set1_ps(clip ? clip[0] : 0), hi = _mm512_set1_ps(clip ? clip[1] : 0);

	if (ph >= 0 && pw >= 0 && g->img[1] + ph <= hp && w + pw <= wp) { /* every position inside: no tests */
		float *dst = xp + (ph * wp + pw) * DWZ_L;
		for (int64_t f = 0; f < vol; f += DWZ_L) {
			__mmask16 m = vol - f >= DWZ_L ? 0xffff : (__mmask16)((1u << (vol - f)) - 1);
			__m512 v[DWZ_L];
			for (int l = 0; l < DWZ_L; l++)
				v[l] = l < nc ? _mm512_maskz_loadu_ps(m, xs[l] + f) : _mm512_setzero_ps();
			for (int l = 0; l < nc && clip; l++)
				v[l] = _mm512_max_ps(lo, _mm512_min_ps(hi, v[l]));
			hp_tr16_ps(v);
#pragma GCC unroll 16
			for (int q = 0; q < DWZ_L; q++) {
				if (f + q >= vol)
					break;
				_mm512_storeu_ps(dst, v[q]);
				dst += DWZ_L;
				if (++iw == w)
					iw = 0, dst += (wp - w) * DWZ_L;
			}
		}
		return;
	}
	for (int64_t f = 0; f < vol; f += DWZ_L) {
		__mmask16 m = vol - f >= DWZ_L ? 0xffff : (__mmask16)((1u << (vol - f)) - 1);
		__m512 v[DWZ_L];
		for (int l = 0; l < DWZ_L; l++)
			v[l] = l < nc ? _mm512_maskz_loadu_ps(m, xs[l] + f) : _mm512_setzero_ps();
		for (int l = 0; l < nc && clip; l++)
			v[l] = _mm512_max_ps(lo, _mm512_min_ps(hi, v[l]));
		hp_tr16_ps(v);
#pragma GCC unroll 16
		for (int q = 0; q < DWZ_L; q++) {
			int64_t pr = ih + g->pad[1], pc = iw + g->pad[2];
			if (f + q < vol && pr >= 0 && pr < hp && pc >= 0 && pc < wp)
				_mm512_storeu_ps(xp + (pr * wp + pc) * DWZ_L, v[q]);
			if (++iw == w)
				iw = 0, ih++;
		}
	}
}

/* N outputs of a row from o0, stride S: bias, then the nine taps in
 * (kh, kw) order (dwc_outs' chain), into out[o][16]. */
DWZ_TARGET static DWC_INLINE void dwz_outs(const int N, const int S, const float *const *r, const __m512 *wv,
					   __m512 b, int64_t o0, float *out)
{
	__m512 acc[DWC_OB];

	for (int j = 0; j < N; j++)
		acc[j] = b;
	for (int kh = 0; kh < 3; kh++)
		for (int kw = 0; kw < 3; kw++)
			for (int j = 0; j < N; j++)
				acc[j] = _mm512_fmadd_ps(wv[3 * kh + kw],
							 _mm512_loadu_ps(r[kh] + ((o0 + j) * S + kw) * DWZ_L), acc[j]);
	for (int j = 0; j < N; j++)
		_mm512_storeu_ps(out + (o0 + j) * DWZ_L, acc[j]);
}

#define DWZ_CASE(N)                                                                                   \
	case N:                                                                                        \
		if (s == 1)                                                                            \
			dwz_outs(N, 1, r, wv, b, o0, out);                                             \
		else                                                                                   \
			dwz_outs(N, 2, r, wv, b, o0, out);                                             \
		break;

DWZ_TARGET static void dwz_row(int64_t s, int64_t ow, const float *const *r, const __m512 *wv, __m512 b, float *out)
{
	for (int64_t o0 = 0; o0 < ow; o0 += DWC_OB) {
		switch (ow - o0 < DWC_OB ? (int)(ow - o0) : DWC_OB) {
			DWZ_CASE(1)
			DWZ_CASE(2)
			DWZ_CASE(3)
			DWZ_CASE(4)
			DWZ_CASE(5)
			DWZ_CASE(6)
			DWZ_CASE(7)
			DWZ_CASE(8)
		default:
			break;
		}
	}
}

/* dwc_finish with sixteen lanes (m: the lanes of the addend to read). */
DWZ_TARGET static DWC_INLINE __m512 dwz_finish(__m512 v, const struct hp_epi *e, const float *add, __mmask16 m)
{
	__m512 z = _mm512_setzero_ps();

	if (add)
		v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(m, add));
	if (e->act == HP_EPI_RELU) {
		v = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(v, z, _CMP_LT_OQ), v, z);
	} else if (e->act == HP_EPI_CLIP) {
		__m512 lo = _mm512_set1_ps(e->lo > e->hi ? e->hi : e->lo), hi = _mm512_set1_ps(e->hi);
		__m512 r = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(v, hi, _CMP_GT_OQ), v, hi);
		v = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(v, lo, _CMP_LT_OQ), r, lo);
	}
	return v;
}

/* Cache lines [k0, k1) of the next block's sixteen planes (the first at
 * base, ps floats apart, n floats each) on their way to the cache: the
 * block's sixteen planes are read a transpose's sixteen positions at a
 * time, sixteen streams the hardware prefetchers do not follow (cold
 * 14x14 planes ran 15% slower than conv_dw3.c's rows without this).
 * Planes of up to DWZ_PF floats (a block's 16 KiB): 28x28 ones so ran the
 * forward a third slower from L2, the next block evicting this one. */
#define DWZ_PF 256

static DWC_INLINE void dwz_prefetch(const float *base, int64_t ps, int64_t n, int64_t k0, int64_t k1)
{
	int64_t npl = (n + DWZ_L - 1) / DWZ_L, l, j;

	if (npl <= 0) /* a band of no rows */
		return;
	l = k0 / npl, j = k0 % npl; /* one division, not one a line (they cost a quarter of 14x14's stride 2) */
	k1 = k1 < DWZ_L * npl ? k1 : DWZ_L * npl;
	for (int64_t k = k0; k < k1; k++) {
		__builtin_prefetch(base + l * ps + j * DWZ_L, 0, 3);
		if (++j == npl)
			j = 0, l++;
	}
}

/* Output channels [m0, m0 + nc) of item n by the flat kernel: scratch is
 * the padded plane (its padding zero) and the output plane. */
DWZ_TARGET static void dwz_block(const struct dwc_run *r, int64_t n, int64_t m0, int nc, float *scratch)
{
	const struct hp_dw *d = r->d;
	const struct hp_colgeom *g = &d->g;
	const struct hp_epi *e = r->fin ? d->epi : NULL;
	int64_t cout = d->cin * d->mult, ow = g->grid[2], wp = dwz_wp(g), s = g->stride[1], vol = g->grid_vol;
	float *out = scratch + dwz_hp(g) * wp * DWZ_L;
	const float *xs[DWZ_L], *adds[DWZ_L] = { 0 };
	float *ys[DWZ_L];
	__mmask16 lanes = (__mmask16)((1u << nc) - 1);
	__m512i idx = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
					 _mm512_set1_epi32(9));
	__m512 wv[9], b, z = _mm512_setzero_ps();
	int64_t cs[DWZ_L];

	hp_dw_in_channels(m0, nc, d->mult, cs);
	for (int l = 0; l < nc; l++) {
		int64_t m = m0 + l, c = cs[l];
		xs[l] = r->x + (n * d->cin + c) * (d->xstride ? d->xstride : g->img_vol);
		ys[l] = r->y + (n * cout + m) * vol;
		if (e && d->epi->add == HP_EPI_ADD_FULL)
			adds[l] = d->addend + (n * cout + m) * vol;
	}
	for (int t = 0; t < 9; t++) /* W[m0 + l][t] into lane l: packed once (hp_dwkz_pack), or gathered */
		wv[t] = d->wpack ? _mm512_loadu_ps(d->wpack + (m0 * 9 + t * DWZ_L))
				 : _mm512_mask_i32gather_ps(z, lanes, idx, r->w + m0 * 9 + t, 4);
	b = r->b ? _mm512_maskz_loadu_ps(lanes, r->b + m0) : z;
	hp_dwz_fill(g, xs, nc, d->xclip, scratch, dwz_hp(g), wp);
	for (int64_t oh = 0, ps = d->xstride ? d->xstride : g->img_vol,
		     pre = g->grid[1] > 0 ? (g->img_vol + g->grid[1] - 1) / g->grid[1] : 0;
	     oh < g->grid[1]; oh++) {
		const float *rows[3];
		for (int kh = 0; kh < 3; kh++)
			rows[kh] = scratch + (oh * s + kh) * wp * DWZ_L;
		if (d->mult == 1 && g->img_vol <= DWZ_PF) /* the next block's X, a share per row */
			dwz_prefetch(xs[0] + DWZ_L * ps, ps, g->img_vol, oh * pre, (oh + 1) * pre);
		dwz_row(g->stride[2], ow, rows, wv, b, out + oh * ow * DWZ_L);
	}
	for (int64_t q = 0; q < vol; q += DWZ_L) { /* back to the planes, nothing past them written */
		__mmask16 m = vol - q >= DWZ_L ? 0xffff : (__mmask16)((1u << (vol - q)) - 1);
		__m512 v[DWZ_L];
		for (int i = 0; i < DWZ_L; i++)
			v[i] = _mm512_loadu_ps(out + (q + i) * DWZ_L);
		hp_tr16_ps(v);
		for (int l = 0; l < nc; l++)
			_mm512_mask_storeu_ps(ys[l] + q, m, e ? dwz_finish(v[l], e, adds[l] ? adds[l] + q : NULL, m) : v[l]);
	}
	if (d->epi && !r->fin) /* other epilogues: the block's adjacent planes at once, in cache */
		hp_epi_span(d->epi, r->y, d->addend, ys[0] - r->y, ys[nc - 1] - r->y + vol);
}

/* Units are (item, block of output channels); a worker's scratch is its
 * slice of r->scratch (hp_dwc_forward's, or the caller's hp_dw.scratch). */
static void dwc_range(void *arg, int64_t b, int64_t e, int tid)
{
	const struct dwc_run *r = arg;
	int64_t cout = r->d->cin * r->d->mult, L = r->lanes;
	float *scratch = r->scratch ? r->scratch + (size_t)tid * dwc_floats(&r->d->g) : NULL;

	for (int64_t i = b; i < e && !scratch; i++) { /* conv_dw3.c's planes: less memory, the same bits */
		int64_t p0 = i / r->blocks * cout + i % r->blocks * L, m0 = i % r->blocks * L;
		hp_dw_planes(r->d, r->x, r->w, r->b, r->y, p0, p0 + (cout - m0 < L ? cout - m0 : L));
	}
	for (int64_t i = b; i < e && scratch; i++) { /* i = (item, block of output channels) */
		int64_t n = i / r->blocks, m0 = i % r->blocks * L;
		if (r->z)
			dwz_block(r, n, m0, (int)(cout - m0 < L ? cout - m0 : L), scratch);
		else
			dwc_block(r, n, m0, (int)(cout - m0 < L ? cout - m0 : L), scratch);
	}
}
#endif

#ifdef DWC_X86
/* ---- the weight gradient (ConvGradFilter) of the same geometries ----
 * Eight output channels in the lanes again: X's rows transposed into the
 * ring as above, dY's rows transposed eight positions at a time in
 * registers.  Tap k = (kh, kw) of a unit (grid rows [q0, q1) of one item)
 * is, per channel, the sum over its rows in order of each row's chain of
 * fused multiply-adds over the row's positions in order from 0 (a tap in
 * the padding adds dY * 0); dW adds the units from the last to the first
 * (conv_dw.c's order of units, which bands keep).  A unit's sums depend on
 * its own dY and X rows alone, so workers, blocks and bands of rows or
 * items give the same bits. */
struct dwc_frun {
	const struct hp_dw *d;
	const float *dy, *x, *acc;
	float *dw, *scratch;     /* dwc_ffloats() per thread */
	int64_t blocks, urows;
};

/* Floats of a worker's dW scratch: the ring and a zero row. */
static size_t dwc_ffloats(const struct hp_colgeom *g)
{
	return (size_t)((DWC_SLOTS + 1) * dwc_width(g) * DWC_L);
}

/* One row's nine chains: part[k] += (the chain over positions o of
 * dY[o] * X row kh at o s + kw, from 0), for the block's lanes. */
DWC_TARGET static void dwc_frow(int64_t s, int64_t ow, const float *const *dys, int nc, const float *const *r,
				__m256 *part)
{
	__m256 a[9];

	for (int k = 0; k < 9; k++)
		a[k] = _mm256_setzero_ps();
	for (int64_t o0 = 0; o0 < ow; o0 += 8) {
		__m256 v[8];
		int n = ow - o0 < 8 ? (int)(ow - o0) : 8;
		for (int l = 0; l < 8; l++)
			v[l] = l >= nc ? _mm256_setzero_ps()
			       : n == 8 ? _mm256_loadu_ps(dys[l] + o0)
					: _mm256_maskload_ps(dys[l] + o0, dwc_mask(n));
		dwc_transpose(v);
		for (int j = 0; j < n; j++) {
			int64_t p = (o0 + j) * s * DWC_L;
			for (int kh = 0; kh < 3; kh++)
				for (int kw = 0; kw < 3; kw++)
					a[3 * kh + kw] =
						_mm256_fmadd_ps(v[j], _mm256_loadu_ps(r[kh] + p + kw * DWC_L), a[3 * kh + kw]);
		}
	}
	for (int k = 0; k < 9; k++)
		part[k] = _mm256_add_ps(part[k], a[k]);
}

/* Output channels [m0, m0 + nc): dW = acc + the units, last first. */
DWC_TARGET static void dwc_fblock(const struct dwc_frun *r, int64_t m0, int nc, float *scratch)
{
	const struct hp_dw *d = r->d;
	const struct hp_colgeom *g = &d->g;
	int64_t wd = dwc_width(g) * DWC_L, tags[DWC_SLOTS], ow = g->grid[2], rows = g->grid[1];
	float *zero = scratch + DWC_SLOTS * wd, t[9][8] = { { 0 } };
	const float *xs[8], *dys[8];
	__m256 out[9];

	for (int l = 0; l < nc; l++)
		for (int k = 0; k < 9; k++)
			t[k][l] = r->acc ? r->acc[(m0 + l) * 9 + k] : 0.0f;
	for (int k = 0; k < 9; k++)
		out[k] = _mm256_loadu_ps(t[k]);
	int64_t cs[8];

	hp_dw_in_channels(m0, nc, d->mult, cs);
	for (int64_t n = d->batch - 1; n >= 0; n--) {
		for (int l = 0; l < nc; l++) {
			int64_t m = m0 + l;
			xs[l] = r->x + (n * d->cin + cs[l]) * g->img_vol;
			dys[l] = r->dy + (n * d->cin * d->mult + m) * g->grid_vol;
		}
		for (int i = 0; i < DWC_SLOTS; i++)
			tags[i] = -1;
		for (int64_t q0 = (rows - 1) / r->urows * r->urows; q0 >= 0; q0 -= r->urows) {
			int64_t q1 = q0 + r->urows < rows ? q0 + r->urows : rows;
			__m256 u[9];
			for (int k = 0; k < 9; k++)
				u[k] = _mm256_setzero_ps();
			for (int64_t q = q0; q < q1; q++) {
				const float *rw[3], *dq[8];
				for (int kh = 0; kh < 3; kh++)
					rw[kh] = dwc_get(g, xs, nc, q * g->stride[1] - g->pad[1] + kh, scratch, tags, zero, NULL);
				for (int l = 0; l < nc; l++)
					dq[l] = dys[l] + q * ow;
				dwc_frow(g->stride[2], ow, dq, nc, rw, u);
			}
			for (int k = 0; k < 9; k++)
				out[k] = _mm256_add_ps(out[k], u[k]);
		}
	}
	for (int k = 0; k < 9; k++)
		_mm256_storeu_ps(t[k], out[k]);
	for (int l = 0; l < nc; l++)
		for (int k = 0; k < 9; k++)
			r->dw[(m0 + l) * 9 + k] = t[k][l];
}

static void dwc_frange(void *arg, int64_t b, int64_t e, int tid)
{
	const struct dwc_frun *r = arg;
	int64_t cout = r->d->cin * r->d->mult;
	float *scratch = r->scratch + (size_t)tid * dwc_ffloats(&r->d->g);

	memset(scratch + DWC_SLOTS * dwc_width(&r->d->g) * DWC_L, 0,
	       (size_t)(dwc_width(&r->d->g) * DWC_L) * sizeof(float)); /* the zero row */
	for (int64_t i = b; i < e; i++)
		dwc_fblock(r, i * DWC_L, (int)(cout - i * DWC_L < DWC_L ? cout - i * DWC_L : DWC_L), scratch);
}
#endif

#ifdef DWC_X86
/* ---- the data gradient (ConvGradData) at stride 2 ----
 * dX's element (i, j) takes the taps (kh, kw) whose dY position
 * ((i + pad - kh) / 2, (j + pad - kw) / 2) is whole: eight channels in
 * the lanes, dY's rows transposed into the ring (a zero position left of
 * each row and zeros past it, zero rows outside dY), one chain of fused
 * multiply-adds from 0 per element over its taps in (kh, kw) order (those
 * outside dY as w * 0), then the row transposed back to the planes.  An
 * element's bits depend on its own dY window alone: blocks, workers and
 * bands of rows give the same. */
struct dwc_drun {
	const struct hp_dw *d;
	const float *dy, *w;
	float *dx, *scratch;     /* dwc_dfloats() per thread */
	struct hp_colgeom gy;    /* dY's rows as the ring's geometry */
	int z;                   /* the flat sixteen-channel kernel (dwz_data_on) */
	int64_t blocks;
};

/* The ring's geometry: image dY, one zero position on the left (pad 1),
 * rows as wide as the last dX column's leftmost tap needs. */
static void dwc_dgeom(const struct hp_colgeom *g, struct hp_colgeom *gy)
{
	int64_t last = (g->img[2] - 1 + g->pad[2]) / 2; /* the rightmost dY column a tap reaches */

	memset(gy, 0, sizeof *gy);
	gy->img[0] = gy->grid[0] = gy->k[0] = gy->k[1] = gy->k[2] = 1;
	gy->stride[0] = gy->stride[1] = gy->stride[2] = gy->dil[0] = gy->dil[1] = gy->dil[2] = 1;
	gy->img[1] = g->grid[1];
	gy->img[2] = g->grid[2];
	gy->grid[1] = 1;
	gy->grid[2] = last > 0 ? last : 1; /* dwc_width: >= last + 2 positions */
	gy->pad[2] = 1;
	hp_colgeom_finish(gy);
}

/* The flat sixteen-channel dX (small planes, AVX-512): dY's plane
 * transposed whole into [Yh][Yw][16] with a zero row above and a zero
 * column left of it and zeros past it as far as the last dX element's taps
 * reach, dX's plane [img][16] computed from it, then transposed back. */
static int64_t dwz_yh(const struct hp_colgeom *g)
{
	int64_t last = (g->img[1] - 1 + g->pad[1]) / 2 + 1;

	return (last > g->grid[1] ? last : g->grid[1]) + 1;
}

static int64_t dwz_yw(const struct hp_colgeom *g)
{
	int64_t last = (g->img[2] - 1 + g->pad[2]) / 2 + 1;

	return (last > g->grid[2] ? last : g->grid[2]) + 1;
}

static size_t dwz_dfloats(const struct hp_colgeom *g)
{
	return (size_t)((dwz_yh(g) * dwz_yw(g) + (g->img_vol + DWZ_L - 1) / DWZ_L * DWZ_L) * DWZ_L);
}

/* Whether the flat dX runs g (geometry and CPU only; pads of 0 or more,
 * so that a tap's dY row and column are at least -1). */
static int dwz_data_on(const struct hp_colgeom *g)
{
	return !dwz_avx2 && hp_cpu_avx512_fma() && hp_dw3_eligible(g) && g->stride[1] == 2 && g->pad[1] >= 0 &&
	       g->pad[2] >= 0 && dwz_dfloats(g) <= DWZ_MAX * DWZ_L;
}

static size_t dwc_dfloats(const struct hp_colgeom *g)
{
	struct hp_colgeom gy;
	size_t a, b = dwz_data_on(g) ? dwz_dfloats(g) : 0;

	dwc_dgeom(g, &gy);
	a = (size_t)((DWC_SLOTS + 1) * dwc_width(&gy) * DWC_L + (g->img[2] + 7) / 8 * 8 * DWC_L);
	return a > b ? a : b;
}

/* Channels [c0, c0 + nc) of item n. */
DWC_TARGET static void dwc_dblock(const struct dwc_drun *r, int64_t n, int64_t c0, int nc, float *scratch)
{
	const struct hp_dw *d = r->d;
	const struct hp_colgeom *g = &d->g;
	int64_t wd = dwc_width(&r->gy) * DWC_L, tags[DWC_SLOTS], iw = g->img[2], ph = g->pad[1], pw = g->pad[2];
	float *zero = scratch + DWC_SLOTS * wd, *out = zero + wd, wt[9][8] = { { 0 } };
	const float *dys[8];
	float *dxs[8];
	__m256 wv[9];

	for (int l = 0; l < nc; l++) {
		dys[l] = r->dy + (n * d->cin + c0 + l) * g->grid_vol;
		dxs[l] = r->dx + (n * d->cin + c0 + l) * g->img_vol;
		for (int t = 0; t < 9; t++)
			wt[t][l] = r->w[(c0 + l) * 9 + t];
	}
	for (int t = 0; t < 9; t++)
		wv[t] = _mm256_loadu_ps(wt[t]);
	for (int i = 0; i < DWC_SLOTS; i++)
		tags[i] = -1;
	for (int64_t i = 0; i < g->img[1]; i++) {
		const float *rows[3] = { NULL, NULL, NULL };
		for (int kh = 0; kh < 3; kh++)
			if (!((i + ph - kh) & 1))
				rows[kh] = dwc_get(&r->gy, dys, nc, (i + ph - kh) / 2, scratch, tags, zero, NULL);
		for (int64_t j = 0; j < iw; j++) {
			__m256 acc = _mm256_setzero_ps();
			int64_t b = j + pw;
			for (int kh = 0; kh < 3; kh++) {
				if (!rows[kh])
					continue;
				for (int kw = b & 1; kw < 3; kw += 2) /* (b - kw) even */
					acc = _mm256_fmadd_ps(wv[3 * kh + kw], _mm256_loadu_ps(rows[kh] + ((b - kw) / 2 + 1) * DWC_L),
							      acc);
			}
			_mm256_storeu_ps(out + j * DWC_L, acc);
		}
		/* the row back to the planes (dwc_store's loop without its
		 * epilogue: calling it ran dw3x3-s2's dX 15.2-15.7 -> 13.1 GF/s) */
		for (int64_t q = 0; q < iw; q += 8) {
			__m256 v[8];
			int64_t m = iw - q;
			for (int t = 0; t < 8; t++)
				v[t] = t < m ? _mm256_loadu_ps(out + (q + t) * DWC_L) : _mm256_setzero_ps();
			dwc_transpose(v);
			for (int l = 0; l < nc; l++) {
				float *dst = dxs[l] + i * iw + q;
				if (m >= 8) {
					_mm256_storeu_ps(dst, v[l]);
				} else {
					float t8[8];
					_mm256_storeu_ps(t8, v[l]);
					for (int64_t e = 0; e < m; e++)
						dst[e] = t8[e];
				}
			}
		}
	}
}

/* dX columns [j0, j0 + N) of one row (N <= 8) from the K dY rows y[k]
 * (taps kh[k], in order) of the padded dY plane: per element 0, then per
 * row its taps kw whose dY column is whole (E: whether j0 + pad is odd),
 * into out[j][16]. */
DWZ_TARGET static DWC_INLINE void dwz_dcols(const int N, const int E, int K, const float *const *y, const int *kh,
					    const __m512 *wv, int64_t j0, int64_t pw, float *out)
{
	__m512 acc[8];

	for (int j = 0; j < N; j++)
		acc[j] = _mm512_setzero_ps();
	for (int k = 0; k < K; k++) {
		const __m512 *w = wv + 3 * kh[k];
		for (int j = 0; j < N; j++) {
			int64_t b = j0 + j + pw; /* (b - kw) / 2 + 1: the column in the padded plane */
			if ((E + j) & 1) {
				acc[j] = _mm512_fmadd_ps(w[1], _mm512_loadu_ps(y[k] + ((b - 1) / 2 + 1) * DWZ_L), acc[j]);
			} else {
				acc[j] = _mm512_fmadd_ps(w[0], _mm512_loadu_ps(y[k] + (b / 2 + 1) * DWZ_L), acc[j]);
				acc[j] = _mm512_fmadd_ps(w[2], _mm512_loadu_ps(y[k] + (b / 2) * DWZ_L), acc[j]);
			}
		}
	}
	for (int j = 0; j < N; j++)
		_mm512_storeu_ps(out + (j0 + j) * DWZ_L, acc[j]);
}

#define DWZ_DCASE(N)                                                                                  \
	case 2 * N:                                                                                    \
		dwz_dcols(N, 0, k, y, kh, wv, j0, pw, orow);                                           \
		break;                                                                                 \
	case 2 * N + 1:                                                                                \
		dwz_dcols(N, 1, k, y, kh, wv, j0, pw, orow);                                           \
		break;

/* Channels [c0, c0 + nc) of item n by the flat kernel (scratch: the padded
 * dY plane, its margins zero, and dX's). */
DWZ_TARGET static void dwz_dblock(const struct dwc_drun *r, int64_t n, int64_t c0, int nc, float *scratch)
{
	const struct hp_dw *d = r->d;
	const struct hp_colgeom *g = &d->g;
	int64_t yw = dwz_yw(g), gw = g->grid[2], iw = g->img[2], vol = g->img_vol, gv = g->grid_vol, ph = g->pad[1];
	int64_t pw = g->pad[2], gi = 0, gj = 0;
	float *out = scratch + dwz_yh(g) * yw * DWZ_L, *dst = scratch + (yw + 1) * DWZ_L;
	const float *dys[DWZ_L];
	float *dxs[DWZ_L];
	__mmask16 lanes = (__mmask16)((1u << nc) - 1);
	__m512i idx = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
					 _mm512_set1_epi32(9));
	__m512 wv[9], z = _mm512_setzero_ps();

	for (int l = 0; l < nc; l++) {
		dys[l] = r->dy + (n * d->cin + c0 + l) * gv;
		dxs[l] = r->dx + (n * d->cin + c0 + l) * vol;
	}
	for (int t = 0; t < 9; t++)
		wv[t] = _mm512_mask_i32gather_ps(z, lanes, idx, r->w + c0 * 9 + t, 4);
	for (int64_t f = 0; f < gv; f += DWZ_L) { /* dY into the padded plane, from (1, 1) */
		__mmask16 m = gv - f >= DWZ_L ? 0xffff : (__mmask16)((1u << (gv - f)) - 1);
		__m512 v[DWZ_L];
		for (int l = 0; l < DWZ_L; l++)
			v[l] = l < nc ? _mm512_maskz_loadu_ps(m, dys[l] + f) : z;
		hp_tr16_ps(v);
#pragma GCC unroll 16
		for (int q = 0; q < DWZ_L; q++) {
			if (f + q >= gv)
				break;
			_mm512_storeu_ps(dst + (gi * yw + gj) * DWZ_L, v[q]);
			if (++gj == gw)
				gj = 0, gi++;
		}
	}
	for (int64_t i = 0; i < g->img[1]; i++) {
		const float *y[2];
		int kh[2], k = 0;
		for (int t = 0; t < 3; t++) {
			int64_t a = i + ph - t;
			if (a & 1)
				continue;
			kh[k] = t;
			y[k++] = scratch + (a / 2 + 1) * yw * DWZ_L;
		}
		float *orow = out + i * iw * DWZ_L;
		int64_t j0 = 0, pre = (gv + g->img[1] - 1) / g->img[1];
		if (gv <= DWZ_PF) /* the next block's dY */
			dwz_prefetch(dys[0] + DWZ_L * gv, gv, gv, i * pre, (i + 1) * pre);
		if (pw & 1)
			for (; j0 + 8 <= iw; j0 += 8)
				dwz_dcols(8, 1, k, y, kh, wv, j0, pw, orow);
		else
			for (; j0 + 8 <= iw; j0 += 8)
				dwz_dcols(8, 0, k, y, kh, wv, j0, pw, orow);
		switch (j0 < iw ? (int)(iw - j0) * 2 + (int)((j0 + pw) & 1) : 0) { /* the row's tail */
			DWZ_DCASE(1)
			DWZ_DCASE(2)
			DWZ_DCASE(3)
			DWZ_DCASE(4)
			DWZ_DCASE(5)
			DWZ_DCASE(6)
			DWZ_DCASE(7)
		default:
			break;
		}
	}
	for (int64_t q = 0; q < vol; q += DWZ_L) { /* back to the planes, nothing past them written */
		__mmask16 m = vol - q >= DWZ_L ? 0xffff : (__mmask16)((1u << (vol - q)) - 1);
		__m512 v[DWZ_L];
		for (int i = 0; i < DWZ_L; i++)
			v[i] = _mm512_loadu_ps(out + (q + i) * DWZ_L);
		hp_tr16_ps(v);
		for (int l = 0; l < nc; l++)
			_mm512_mask_storeu_ps(dxs[l] + q, m, v[l]);
	}
}

static void dwc_drange(void *arg, int64_t b, int64_t e, int tid)
{
	const struct dwc_drun *r = arg;
	float *scratch = r->scratch + (size_t)tid * dwc_dfloats(&r->d->g);
	int64_t wd = dwc_width(&r->gy) * DWC_L;

	if (r->z) { /* the padded dY plane's margins */
		memset(scratch, 0, (size_t)(dwz_yh(&r->d->g) * dwz_yw(&r->d->g) * DWZ_L) * sizeof(float));
		for (int64_t u = b; u < e; u++) {
			int64_t n = u / r->blocks, c0 = u % r->blocks * DWZ_L;
			dwz_dblock(r, n, c0, (int)(r->d->cin - c0 < DWZ_L ? r->d->cin - c0 : DWZ_L), scratch);
		}
		return;
	}
	memset(scratch + DWC_SLOTS * wd, 0, (size_t)wd * sizeof(float)); /* the zero row */
	for (int64_t u = b; u < e; u++) {
		int64_t n = u / r->blocks, c0 = u % r->blocks * DWC_L;
		dwc_dblock(r, n, c0, (int)(r->d->cin - c0 < DWC_L ? r->d->cin - c0 : DWC_L), scratch);
	}
}
#endif

int hp_dwc_data_eligible(const struct hp_dw *d)
{
#ifdef DWC_X86
	const struct hp_colgeom *g = &d->g;

	return d->mult == 1 && hp_dw3_eligible(g) && g->stride[1] == 2 && g->stride[2] == 2 && g->pad[2] >= 0;
#else
	(void)d;
	return 0;
#endif
}

int hp_dwc_data_flat(const struct hp_dw *d)
{
#ifdef DWC_X86
	return hp_dwc_data_eligible(d) && dwz_data_on(&d->g);
#else
	(void)d;
	return 0;
#endif
}

size_t hp_dwc_data_scratch(const struct hp_colgeom *g)
{
#ifdef DWC_X86
	return dwc_dfloats(g);
#else
	(void)g;
	return 0;
#endif
}

void hp_dwc_data(const struct hp_dw *d, const float *dy, const float *w, float *dx, float *ws, int threads,
		 struct hp_pool *pool)
{
#ifdef DWC_X86
	struct dwc_drun r = { .d = d, .dy = dy, .w = w, .dx = dx, .scratch = ws, .z = dwz_data_on(&d->g) };

	r.blocks = (d->cin + (r.z ? DWZ_L : DWC_L) - 1) / (r.z ? DWZ_L : DWC_L);

	dwc_dgeom(&d->g, &r.gy);
	hp_conv_parallel(pool, threads, d->batch * r.blocks, dwc_drange, &r);
#else
	(void)d, (void)dy, (void)w, (void)dx, (void)ws, (void)threads, (void)pool;
#endif
}

int hp_dwc_filter_eligible(const struct hp_colgeom *g)
{
#ifdef DWC_X86
	return hp_dw3_eligible(g);
#else
	(void)g;
	return 0;
#endif
}

size_t hp_dwc_filter_scratch(const struct hp_colgeom *g)
{
#ifdef DWC_X86
	size_t a = dwc_ffloats(g), b = hp_dwg_scratch(g); /* either kernel may run (tests switch) */

	return a > b ? a : b;
#else
	(void)g;
	return 0;
#endif
}

void hp_dwc_filter(const struct hp_dw *d, const float *dy, const float *x, const float *acc, float *dw, float *ws,
		   int threads, struct hp_pool *pool)
{
#ifdef DWC_X86
	int64_t ow = d->g.grid[2], rows = d->g.grid_vol / ow, urows = d->unit > 0 ? d->unit / ow : rows;
	struct dwc_frun r = { .d = d, .dy = dy, .x = x, .acc = acc, .dw = dw, .scratch = ws,
			      .blocks = (d->cin * d->mult + DWC_L - 1) / DWC_L, .urows = urows > 0 ? urows : rows };

	if (hp_dwg_available(&d->g)) { /* conv_dw_grad.c: sixteen channels, the same chains */
		hp_dwg_filter(d, dy, x, acc, dw, ws, threads, pool);
		return;
	}
	hp_conv_parallel(pool, threads, r.blocks, dwc_frange, &r);
#else
	(void)d, (void)dy, (void)x, (void)acc, (void)dw, (void)ws, (void)threads, (void)pool;
#endif
}

/* Blocks per stolen unit: about this many units a thread, so that a
 * thread done early takes a late one's blocks in small pieces. */
#define DWC_UNITS_PER_THREAD 8

#ifdef DWC_X86
/* The blocks over `threads` threads, each with its scratch: allocated for
 * all of them once per call (units are single blocks, and a thread may
 * run many: its share's, then a late share's), or the caller's. */
static void dwc_steal(struct dwc_run *r, struct hp_pool *pool, int threads)
{
	const struct hp_dw *d = r->d;
	int64_t units = d->batch * r->blocks, su = units / ((int64_t)threads * DWC_UNITS_PER_THREAD);
	size_t one = dwc_floats(&d->g), wd = (size_t)(dwc_width(&d->g) * DWC_L);
	size_t zp = (size_t)(dwz_hp(&d->g) * dwz_wp(&d->g) * DWZ_L);
	float *own = d->scratch ? NULL : malloc((size_t)threads * one * sizeof(float));

	r->scratch = d->scratch ? d->scratch : own;
	for (int t = 0; t < threads && r->scratch; t++) /* the zero row, or the flat plane's padding */
		if (r->z)
			memset(r->scratch + t * one, 0, zp * sizeof(float));
		else
			memset(r->scratch + t * one + DWC_SLOTS * wd, 0, wd * sizeof(float));
	hp_conv_steal(pool, threads, units, su < 1 ? 1 : su, dwc_range, r);
	free(own);
}
#endif

void hp_dwc_forward(const struct hp_dw *d, const float *x, const float *w, const float *b, float *y,
		    struct hp_pool *pool)
{
	struct dwc_run r = { .d = d, .x = x, .w = w, .b = b, .y = y };
	const struct hp_epi *e = d->epi;
	int saved, threads;

#ifdef DWC_X86
	r.z = dwz_on(&d->g);
#endif
	r.lanes = r.z ? DWZ_L : DWC_L;
	r.blocks = (d->cin * d->mult + r.lanes - 1) / r.lanes;
	r.fin = e && (e->add == HP_EPI_ADD_NONE || (e->add == HP_EPI_ADD_FULL && d->addend)) &&
		(e->act == HP_EPI_NONE || e->act == HP_EPI_RELU || e->act == HP_EPI_CLIP);
#ifdef DWC_X86
	threads = hp_conv_threads_enter(pool, &saved);
	dwc_steal(&r, pool, threads);
	hp_conv_threads_leave(saved);
#else
	(void)saved, (void)threads;
	hp_dw_planes(d, x, w, b, y, 0, d->batch * d->cin * d->mult);
#endif
}
