/* The co-lane forward tiles of conv_grp.c's grouped and dense
 * convolutions (split from conv_grp.c, which keeps the staging, the column
 * tiles and the dispatch): the lanes are output channels and a tile a few
 * output positions of a unit, for planes too small for the column tiles:
 * 16 or 32 channels a group (gr_cf_*), groups of 8 channels (gr_c8_*),
 * and 3x3 windows whose tiles skip the padding (gr_cs_*).  Each output is
 * the column tiles' chain (its bias, then one fused multiply-add per tap
 * in order), so which tiles run changes no bit (conv_grp.c's head
 * comment). */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "kernels/conv_grp_impl.h"
#include "kernels/fused_impl.h"
#include "kernels/simd_tr16.h"

static int gr_cs_mode; /* 0 auto, -1 never: the 3x3 tiles that skip the padding (gr_cs_block) */

void hp_grp_set_skip(int mode)
{
	gr_cs_mode = mode;
}

/* ---- co-lane forward tiles: tiny planes ----
 * ResNeXt's 3x3 grouped convs at 64 pixels run on 4x4 and 2x2 planes (16
 * and 32 channels a group): a unit's run of columns there is 16 or 6
 * long, and the column tiles computed 24-48 columns for it (5-8 GF/s a
 * thread on the 2x2 planes).  Here, as for ConvGradData's 7-column planes,
 * the lanes are 16 output channels (two vectors where the group has a
 * multiple of 32) and a tile P output positions of the unit, each a
 * broadcast of its staged input per tap: the weights of a group as W^T
 * [k][cout_g], transposed by the unit into its worker's panel.  Every
 * output is the column tiles' chain (its bias, then one fused
 * multiply-add per k in order, padding taps as zeros), so the bits do not
 * change with the path. */
#define GR_CF_MAX_P 24

#ifdef GR_X86
/* wt[k][ld] lanes [0, 16) = w[i][k] (rows lda apart), i < 16, k < K. */
static GR_TARGET512 void gr_cf_pack16(const float *w, int64_t lda, int64_t K, float *wt, int64_t ld)
{
	__m512 r[16];

	for (int64_t k0 = 0; k0 < K; k0 += 16) {
		int kr = K - k0 < 16 ? (int)(K - k0) : 16;
		__mmask16 mk = (__mmask16)((1u << kr) - 1);
		for (int i = 0; i < 16; i++)
			r[i] = _mm512_maskz_loadu_ps(mk, w + i * lda + k0);
		hp_tr16_ps(r);
		for (int i = 0; i < kr; i++)
			_mm512_storeu_ps(wt + (k0 + i) * ld, r[i]);
	}
}

/* t[p][16 * NV] = the chains of P positions (staged at s + off[k] +
 * pos[p]) for the panel's 16 * NV channels (rows ldw apart). */
static inline __attribute__((always_inline)) GR_TARGET512 void gr_cf_tile(const int NV, const int P,
									   const float *s, const int32_t *off,
									   const int32_t *pos, int64_t kdim,
									   const float *wt, int64_t ldw,
									   const float *bias, float *t)
{
	__m512 a[2][GR_CF_MAX_P];

	#pragma GCC unroll 16
	for (int v = 0; v < NV; v++) {
		__m512 b = bias ? _mm512_loadu_ps(bias + 16 * v) : _mm512_setzero_ps();
		#pragma GCC unroll 16
		for (int i = 0; i < P; i++)
			a[v][i] = b;
	}
	for (int64_t k = 0; k < kdim; k++) {
		const float *p = s + off[k];
		__m512 w[2];
		#pragma GCC unroll 16
		for (int v = 0; v < NV; v++)
			w[v] = _mm512_loadu_ps(wt + k * ldw + 16 * v);
		#pragma GCC unroll 16
		for (int i = 0; i < P; i++) {
			__m512 x = _mm512_set1_ps(p[pos[i]]);
			#pragma GCC unroll 16
			for (int v = 0; v < NV; v++)
				a[v][i] = _mm512_fmadd_ps(w[v], x, a[v][i]);
		}
	}
	#pragma GCC unroll 16
	for (int i = 0; i < P; i++)
		#pragma GCC unroll 16
		for (int v = 0; v < NV; v++)
			_mm512_storeu_ps(t + (i * NV + v) * 16, a[v][i]);
}

#define GR_CF_FN(NV, P)                                                                                       \
	static GR_TARGET512 void gr_cf_##NV##_##P(const float *s, const int32_t *off, const int32_t *pos,      \
						  int64_t kdim, const float *wt, int64_t ldw, const float *bias,  \
						  float *t)                                                       \
	{                                                                                                     \
		gr_cf_tile(NV, P, s, off, pos, kdim, wt, ldw, bias, t);                                       \
	}
GR_CF_FN(2, 4)
GR_CF_FN(2, 5)
GR_CF_FN(2, 6)
GR_CF_FN(2, 7)
GR_CF_FN(2, 8)
GR_CF_FN(2, 9)
GR_CF_FN(2, 10)
GR_CF_FN(2, 11)
GR_CF_FN(2, 12)
GR_CF_FN(1, 4)
GR_CF_FN(1, 8)
GR_CF_FN(1, 12)
GR_CF_FN(1, 16)
GR_CF_FN(1, 20)
GR_CF_FN(1, 24)

typedef void (*gr_cf_fn)(const float *, const int32_t *, const int32_t *, int64_t, const float *, int64_t,
			 const float *, float *);

/* The tile of at least p positions (p <= 12 with two vectors, <= 24 with one). */
static gr_cf_fn gr_cf_pick(int nv, int p, int *P)
{
	static const gr_cf_fn two[13] = { gr_cf_2_4, gr_cf_2_4, gr_cf_2_4, gr_cf_2_4, gr_cf_2_4,
					  gr_cf_2_5, gr_cf_2_6, gr_cf_2_7, gr_cf_2_8, gr_cf_2_9,
					  gr_cf_2_10, gr_cf_2_11, gr_cf_2_12 };
	static const gr_cf_fn one[7] = { gr_cf_1_4, gr_cf_1_4, gr_cf_1_8, gr_cf_1_12, gr_cf_1_16, gr_cf_1_20, gr_cf_1_24 };

	if (nv == 2) {
		*P = p < 4 ? 4 : p;
		return two[p];
	}
	*P = p <= 4 ? 4 : (p + 3) / 4 * 4;
	return one[(p + 3) / 4];
}

/* y[l * yv + i] = t[i][l] for lanes l < 16 * nv, positions i < valid:
 * 16 x 16 transposes, each channel's run of positions one masked store
 * (the scalar copies cost a fifth of SqueezeNet's 5x5 convs). */
static GR_TARGET512 void gr_cf_put(const float *t, int nv, int valid, float *y, int64_t yv)
{
	for (int v = 0; v < nv; v++)
		for (int i0 = 0; i0 < valid; i0 += 16) {
			__m512 r[16];
			int n = valid - i0 < 16 ? valid - i0 : 16;
			for (int i = 0; i < 16; i++)
				r[i] = i < n ? _mm512_loadu_ps(t + ((i0 + i) * nv + v) * 16) : _mm512_setzero_ps();
			hp_tr16_ps(r);
			__mmask16 mk = (__mmask16)((1u << n) - 1);
			for (int l = 0; l < 16; l++)
				_mm512_mask_storeu_ps(y + (16 * v + l) * yv + i0, mk, r[l]);
		}
}

/* ---- co-lane forward tiles for groups of 8 output channels ----
 * RegNet's groups of 8 channels at small planes (RegNetY-400MF at 96
 * pixels: 6x6 and 3x3) ran on the column tiles, whose 24 columns held a
 * 3x3 plane's run of 13 (9 kept: 23 GF/s a thread in
 * bench/bench_conv_libs.c, class grouped-w8-3) and a 6x6 plane's 46 in
 * 48.  Here the lanes are the group's 8 output channels, one ymm vector
 * (AVX-512VL: 32 of them, and each position's staged input is a
 * broadcast folded into its fused multiply-add), a tile up to
 * GR_C8_MAX_P positions of the unit: per tap k, one vector of W^T
 * ([k][8]) and one FMA per position.  Every output is the column tiles'
 * chain (its bias, then one fused multiply-add per k in order, padding
 * taps as zeros), so the bits do not change with the path. */
#define GR_C8_MAX_P 24
#define GR_TARGET512VL __attribute__((target("avx512f,avx512vl,avx2,fma")))

/* wt[k][8] = w[i][k] (rows kdim apart), i < 8: 8 x 8 transposes. */
static GR_TARGET512VL void gr_c8_pack(const float *w, int64_t kdim, float *wt)
{
	__m256 r[8];

	for (int64_t k0 = 0; k0 < kdim; k0 += 8) {
		int kr = kdim - k0 < 8 ? (int)(kdim - k0) : 8;
		__mmask8 mk = (__mmask8)((1u << kr) - 1);
		for (int i = 0; i < 8; i++)
			r[i] = _mm256_maskz_loadu_ps(mk, w + i * kdim + k0);
		hp_tr8_ps(r);
		if (kr == 8) /* unrolled: GCC makes the loop a memcpy from the stack */
			for (int i = 0; i < 8; i++)
				_mm256_storeu_ps(wt + (k0 + i) * 8, r[i]);
		else
			for (int i = 0; i < kr; i++)
				_mm256_storeu_ps(wt + (k0 + i) * 8, r[i]);
	}
}

/* The chains of P positions (staged at s + off[k] + pos[p]) for the 8
 * channels of panel wt, the first `valid` stored into y (channel l's
 * plane at y + l * yv) through 8 x 8 transposes and masked stores. */
static inline __attribute__((always_inline)) GR_TARGET512VL void gr_c8_tile(const int P, const float *s,
									     const int32_t *off, const int32_t *pos,
									     int64_t kdim, const float *wt,
									     const float *bias, float *y, int64_t yv,
									     int valid)
{
	__m256 a[GR_C8_MAX_P], b = bias ? _mm256_loadu_ps(bias) : _mm256_setzero_ps();

	#pragma GCC unroll 24
	for (int i = 0; i < P; i++)
		a[i] = b;
	for (int64_t k = 0; k < kdim; k++) {
		const float *p = s + off[k];
		__m256 w = _mm256_loadu_ps(wt + 8 * k);
		#pragma GCC unroll 24
		for (int i = 0; i < P; i++)
			a[i] = _mm256_fmadd_ps(w, _mm256_set1_ps(p[pos[i]]), a[i]);
	}
	#pragma GCC unroll 3
	for (int i0 = 0; i0 < P; i0 += 8) {
		__m256 r[8];
		int n = valid - i0 < 8 ? valid - i0 : 8;
		#pragma GCC unroll 8
		for (int i = 0; i < 8; i++)
			r[i] = i0 + i < P ? a[i0 + i] : _mm256_setzero_ps();
		hp_tr8_ps(r);
		__mmask8 mk = (__mmask8)((1u << n) - 1);
		#pragma GCC unroll 8
		for (int l = 0; l < 8; l++)
			_mm256_mask_storeu_ps(y + l * yv + i0, mk, r[l]);
	}
}

typedef void (*gr_c8_fn)(const float *, const int32_t *, const int32_t *, int64_t, const float *, const float *,
			 float *, int64_t, int);

#define GR_C8_FN(P)                                                                                           \
	static GR_TARGET512VL void gr_c8_##P(const float *s, const int32_t *off, const int32_t *pos,          \
					     int64_t kdim, const float *wt, const float *bias, float *y,      \
					     int64_t yv, int valid)                                           \
	{                                                                                                     \
		gr_c8_tile(P, s, off, pos, kdim, wt, bias, y, yv, valid);                                     \
	}
GR_C8_FN(1)
GR_C8_FN(2)
GR_C8_FN(3)
GR_C8_FN(4)
GR_C8_FN(5)
GR_C8_FN(6)
GR_C8_FN(7)
GR_C8_FN(8)
GR_C8_FN(9)
GR_C8_FN(10)
GR_C8_FN(11)
GR_C8_FN(12)
GR_C8_FN(13)
GR_C8_FN(14)
GR_C8_FN(15)
GR_C8_FN(16)
GR_C8_FN(17)
GR_C8_FN(18)
GR_C8_FN(19)
GR_C8_FN(20)
GR_C8_FN(21)
GR_C8_FN(22)
GR_C8_FN(23)
GR_C8_FN(24)

/* Positions [0, len) of the unit from output row oh0 (staging st, taps
 * off) for the group's 8 channels (panel wt, W^T [k][8]) into y (the
 * first channel's plane from row oh0): tiles as even as the widest
 * allows, each exactly its positions. */
static void gr_c8_block(const struct gr_geom *q, int64_t len, const float *st, const int32_t *off,
			const float *wt, const float *bias, float *y)
{
	static const gr_c8_fn fns[GR_C8_MAX_P + 1] = {
		NULL,	  gr_c8_1,  gr_c8_2,  gr_c8_3,	gr_c8_4,  gr_c8_5,  gr_c8_6,  gr_c8_7,	gr_c8_8,
		gr_c8_9,  gr_c8_10, gr_c8_11, gr_c8_12, gr_c8_13, gr_c8_14, gr_c8_15, gr_c8_16, gr_c8_17,
		gr_c8_18, gr_c8_19, gr_c8_20, gr_c8_21, gr_c8_22, gr_c8_23, gr_c8_24,
	};
	int64_t yv = q->oh * q->ow, ntile = (len + GR_C8_MAX_P - 1) / GR_C8_MAX_P;
	int32_t pos[GR_C8_MAX_P];

	/* position j0 + i at staged row h, column c: counted, not divided (a
	 * division per position cost a 3x3 plane's unit a fifth of its products) */
	for (int64_t j0 = 0, tl = 0, h = 0, c = 0; j0 < len; tl++) {
		int valid = (int)((len - j0 + (ntile - tl) - 1) / (ntile - tl));
		for (int i = 0; i < valid; i++) {
			pos[i] = (int32_t)(h * q->phw + c);
			if (++c == q->ow)
				c = 0, h++;
		}
		fns[valid](st, off, pos, q->kdim, wt, bias, y + j0, yv, valid);
		j0 += valid;
	}
}

/* ---- co-lane 3x3 tiles that skip the padding ----
 * A 3x3 Conv of stride 1 and pads 1 at 5x5 (SqueezeNet's last expands)
 * spends 40 of every 225 products of a plane on the zero padding, at 3x3
 * (GoogLeNet's inception5) 104 of 225; ONNX Runtime and oneDNN never
 * multiply it.  These tiles are R whole rows (or a row's segment) x P
 * columns x 32 channels: per (c, kh) the three vectors of W^T's kw taps
 * in registers, then each staged input element of a row broadcast once
 * and multiplied into the (up to three) positions that read it, in order
 * of the element, so that every position still takes its taps in order
 * of k = (c, kh, kw).  A row runs only the kh that read rows of the
 * image (khm, 3 bits a row), and no row the element left of column 0 or
 * right of the last column.
 *
 * Exactness: a skipped product is w * (+0) = +-0 for finite w, and
 * acc + (+-0) == acc bit for bit unless acc is -0, which a chain started
 * from +0 (no bias) or from a bias other than -0 never is (x + y is -0
 * only for -0 + -0 in round-to-nearest).  So with W finite, which the
 * packer promises (exec/fuse_pack.c packs no W with an Inf or NaN) and
 * the per-unit packs and flips check (gr_nonfinite, hp_grp_cf_flip_unit), and no
 * bias of -0 (checked per unit), every output has the bits of the full
 * chain that the other tiles and paths compute, in core and out of core. */
#define GR_CS_MAXP 12 /* positions a tile: 24 accumulators, 6 of W, 1 broadcast */

static inline __attribute__((always_inline)) GR_TARGET512 void gr_cs_tile(const int NV, const int R, const int P,
									   const float *s, int64_t cin, int64_t plane,
									   int64_t phw, unsigned khm, int e0, int e1,
									   const float *wt, const float *bias, float *t)
{
	int kh0 = 0, kh1 = 3, L = 16 * NV;
	__m512 a[2][GR_CS_MAXP];

	#pragma GCC unroll 16
	for (int v = 0; v < NV; v++) {
		__m512 b = bias ? _mm512_loadu_ps(bias + 16 * v) : _mm512_setzero_ps();
		#pragma GCC unroll 16
		for (int i = 0; i < R * P; i++)
			a[v][i] = b;
	}
	while (kh0 < 3 && !(khm & (01111u << kh0))) /* the kh some row reads (3 bits a row) */
		kh0++;
	while (kh1 > kh0 && !(khm & (01111u << (kh1 - 1))))
		kh1--;
	for (int64_t c = 0; c < cin; c++)
		for (int kh = kh0; kh < kh1; kh++) {
			const float *p = s + c * plane + kh * phw, *w = wt + (c * 9 + kh * 3) * L;
			__m512 w00 = _mm512_loadu_ps(w), w10 = _mm512_loadu_ps(w + L), w20 = _mm512_loadu_ps(w + 2 * L);
			__m512 w01 = w00, w11 = w10, w21 = w20;
			if (NV == 2)
				w01 = _mm512_loadu_ps(w + 16), w11 = _mm512_loadu_ps(w + L + 16),
				w21 = _mm512_loadu_ps(w + 2 * L + 16);
			#pragma GCC unroll 16
			for (int r = 0; r < R; r++) {
				if (!(khm >> (3 * r + kh) & 1)) /* row r's tap kh reads padding */
					continue;
				#pragma GCC unroll 16
				for (int e = 0; e <= P + 1; e++) {
					if ((e == 0 && e0) || (e == P + 1 && e1))
						continue;
					__m512 x = _mm512_set1_ps(p[r * phw + e]);
					__m512 *q = a[0] + r * P, *u = a[1] + r * P;
					if (e < P) { /* kw 0 of position e */
						q[e] = _mm512_fmadd_ps(w00, x, q[e]);
						if (NV == 2)
							u[e] = _mm512_fmadd_ps(w01, x, u[e]);
					}
					if (e >= 1 && e - 1 < P) { /* kw 1 of position e - 1 */
						q[e - 1] = _mm512_fmadd_ps(w10, x, q[e - 1]);
						if (NV == 2)
							u[e - 1] = _mm512_fmadd_ps(w11, x, u[e - 1]);
					}
					if (e >= 2) { /* kw 2 of position e - 2 */
						q[e - 2] = _mm512_fmadd_ps(w20, x, q[e - 2]);
						if (NV == 2)
							u[e - 2] = _mm512_fmadd_ps(w21, x, u[e - 2]);
					}
				}
			}
		}
	#pragma GCC unroll 16
	for (int i = 0; i < R * P; i++)
		#pragma GCC unroll 2
		for (int v = 0; v < NV; v++)
			_mm512_storeu_ps(t + i * L + 16 * v, a[v][i]);
}

typedef void (*gr_cs_fn)(const float *, int64_t, int64_t, int64_t, unsigned, int, int, const float *, const float *,
			 float *);

/* gr_cs_NV_R_P: NV vectors of channels (units of 32 or, the last, 16) */
#define GR_CS_FN(NV, R, P)                                                                                      \
	static GR_TARGET512 void gr_cs_##NV##_##R##_##P(const float *s, int64_t cin, int64_t plane, int64_t phw, \
							unsigned khm, int e0, int e1, const float *wt,          \
							const float *bias, float *t)                            \
	{                                                                                                       \
		gr_cs_tile(NV, R, P, s, cin, plane, phw, khm, e0, e1, wt, bias, t);                            \
	}
#define GR_CS_FNS(NV)        \
	GR_CS_FN(NV, 1, 3)   \
	GR_CS_FN(NV, 2, 3)   \
	GR_CS_FN(NV, 3, 3)   \
	GR_CS_FN(NV, 4, 3)   \
	GR_CS_FN(NV, 1, 4)   \
	GR_CS_FN(NV, 2, 4)   \
	GR_CS_FN(NV, 3, 4)   \
	GR_CS_FN(NV, 1, 5)   \
	GR_CS_FN(NV, 2, 5)   \
	GR_CS_FN(NV, 1, 6)   \
	GR_CS_FN(NV, 2, 6)   \
	GR_CS_FN(NV, 1, 7)   \
	GR_CS_FN(NV, 1, 8)   \
	GR_CS_FN(NV, 1, 9)   \
	GR_CS_FN(NV, 1, 10)  \
	GR_CS_FN(NV, 1, 11)  \
	GR_CS_FN(NV, 1, 12)
GR_CS_FNS(1)
GR_CS_FNS(2)

/* The tile of R rows of P columns (R * P <= GR_CS_MAXP, P >= 3), nv vectors. */
#define GR_CS_ROW(NV)                                                                                             \
	{                                                                                                         \
		[3] = { NULL, gr_cs_##NV##_1_3, gr_cs_##NV##_2_3, gr_cs_##NV##_3_3, gr_cs_##NV##_4_3 },         \
		[4] = { NULL, gr_cs_##NV##_1_4, gr_cs_##NV##_2_4, gr_cs_##NV##_3_4 },                           \
		[5] = { NULL, gr_cs_##NV##_1_5, gr_cs_##NV##_2_5 }, [6] = { NULL, gr_cs_##NV##_1_6, gr_cs_##NV##_2_6 }, \
		[7] = { NULL, gr_cs_##NV##_1_7 }, [8] = { NULL, gr_cs_##NV##_1_8 }, [9] = { NULL, gr_cs_##NV##_1_9 },  \
		[10] = { NULL, gr_cs_##NV##_1_10 }, [11] = { NULL, gr_cs_##NV##_1_11 },                          \
		[12] = { NULL, gr_cs_##NV##_1_12 },                                                              \
	}
static gr_cs_fn gr_cs_pick(int nv, int R, int P)
{
	static const gr_cs_fn t[2][GR_CS_MAXP + 1][5] = { GR_CS_ROW(1), GR_CS_ROW(2) };

	return t[nv - 1][P][R];
}

/* Whether any of the n floats (a multiple of 16) is an Inf or a NaN. */
static GR_TARGET512 int gr_nonfinite(const float *p, int64_t n)
{
	__m512i ex = _mm512_set1_epi32(0x7f800000);
	__mmask16 bad = 0;

	for (int64_t i = 0; i < n; i += 16)
		bad |= _mm512_cmpeq_epi32_mask(_mm512_and_si512(_mm512_loadu_si512(p + i), ex), ex);
	return bad != 0;
}

/* The unit's 32 (or 16) channels from co on these tiles: W^T packed once (and so
 * finite) or per unit (hp_grp_dense_unpacked's nodes: training's
 * forwards, out of core) or flipped per call, and seen finite, a
 * 3x3 window of stride and dilation 1 that pads one column on each side,
 * at least 3 columns, and no bias lane of -0. */
static int gr_cs_ok(const struct gr_run *r, int64_t cb, const float *bias, int nonfinite)
{
	const struct gr_geom *q = &r->q;

	if (gr_cs_mode < 0 || nonfinite || !r->dense || (cb != 32 && cb != 16) || q->kh != 3 || q->kw != 3 || q->sh != 1 ||
	    q->sw != 1 || q->dh != 1 || q->dw != 1 || q->pl != 1 || q->ow != q->iw || q->ow < 3)
		return 0;
	for (int64_t i = 0; bias && i < cb; i++)
		if (bias[i] == 0.0f && signbit(bias[i]))
			return 0;
	return 1;
}

/* The taps kh of output row oh that read rows of the image: bit kh. */
static unsigned gr_cs_rows(const struct gr_geom *q, int64_t oh)
{
	unsigned m = 0;

	for (int64_t kh = 0; kh < 3; kh++) /* kh reads row oh - pt + kh */
		if (oh - q->pt + kh >= 0 && oh - q->pt + kh < q->ih)
			m |= 1u << kh;
	return m;
}

/* Rows [oh0, oh1) of the 32 channels whose panel is wt (the unit's
 * staging st), into y (channel co's plane): whole rows in tiles of up to
 * GR_CS_MAXP positions, as even as the widest allows, each row running
 * the kh it reads; wider rows cut into even segments. */
static void gr_cs_block(const struct gr_run *r, int nv, int64_t oh0, int64_t oh1, const float *st, const float *wt,
			const float *bias, float *y)
{
	const struct gr_geom *q = &r->q;
	int64_t yv = q->oh * q->ow, ow = q->ow, cin = r->cv->cin_g;
	float t[GR_CS_MAXP * 32];

	if (ow <= GR_CS_MAXP) {
		int64_t rmax = GR_CS_MAXP / ow, nt = (oh1 - oh0 + rmax - 1) / rmax;
		for (int64_t i = 0, h = oh0; i < nt; i++) {
			int R = (int)((oh1 - h + (nt - i) - 1) / (nt - i));
			unsigned khm = 0;
			for (int j = 0; j < R; j++)
				khm |= gr_cs_rows(q, h + j) << (3 * j);
			gr_cs_pick(nv, R, (int)ow)(st + (h - oh0) * q->phw, cin, q->plane, q->phw, khm, 1, 1, wt, bias, t);
			gr_cf_put(t, nv, (int)(R * ow), y + h * ow, yv);
			h += R;
		}
		return;
	}
	for (int64_t h = oh0, ns = (ow + GR_CS_MAXP - 1) / GR_CS_MAXP; h < oh1; h++)
		for (int64_t i = 0, c0 = 0; i < ns; i++) {
			int P = (int)((ow - c0 + (ns - i) - 1) / (ns - i));
			gr_cs_pick(nv, 1, P)(st + (h - oh0) * q->phw + c0, cin, q->plane, q->phw, gr_cs_rows(q, h),
					     c0 == 0, c0 + P == ow, wt, bias, t);
			gr_cf_put(t, nv, P, y + h * ow + c0, yv);
			c0 += P;
		}
}

/* gr_block's outputs on the co-lane forward tiles: W^T of group g into
 * the panel, then tiles of the unit's positions (as even as the widest
 * tile allows; positions past the last one repeat it and are not
 * stored). */
void hp_grp_cf_block(const struct gr_run *r, int64_t n, int64_t g, int64_t oh0, int64_t oh1, int64_t m0,
		     const float *st, const int32_t *off, float *panel)
{
	const struct hp_conv *cv = r->cv;
	const struct gr_geom *q = &r->q;
	int64_t yv = q->oh * q->ow, mg = cv->cout_g, kdim = q->kdim, len = (oh1 - oh0) * q->ow;
	int64_t cb = mg - m0 < r->cb ? mg - m0 : r->cb; /* the unit's channels */
	int nv = cb % 32 ? 1 : 2;
	float t[GR_CF_MAX_P * 32];
	int32_t pos[GR_CF_MAX_P];

	int nonfinite = r->nonfinite;

	if (r->wt) /* the unit's panel [k][cb] (hp_grp_pack), read only */
		panel = (float *)r->wt + (g * mg + m0) * kdim;
	else if (r->dflip)
		nonfinite = hp_grp_cf_flip_unit(cv, r->w, m0, cb, panel);
	else if (r->dense) { /* the unit's alone, as hp_grp_pack lays it out */
		for (int64_t m = m0; m < m0 + cb; m += 16)
			gr_cf_pack16(r->w + m * kdim, kdim, kdim, panel + m - m0, cb);
		nonfinite = gr_nonfinite(panel, kdim * cb);
	}
	else if (mg == 8)
		gr_c8_pack(r->w + g * mg * kdim, kdim, panel);
	else
		for (int64_t m = 0; m < mg; m += 16)
			gr_cf_pack16(r->w + (g * mg + m) * kdim, kdim, kdim, panel + m, mg);
	if (!r->dense && mg == 8) {
		gr_c8_block(q, len, st, off, panel, r->b ? r->b + g * mg : NULL,
			    r->y + (n * cv->cout + g * mg) * yv + oh0 * q->ow);
		return;
	}
	if (gr_cs_ok(r, cb, r->b ? r->b + g * mg + m0 : NULL, nonfinite)) {
		gr_cs_block(r, (int)(cb / 16), oh0, oh1, st, panel, r->b ? r->b + g * mg + m0 : NULL,
			    r->y + (n * cv->cout + g * mg + m0) * yv);
		return;
	}
	for (int64_t m = m0; m < m0 + cb; m += 16 * nv) {
		int64_t co = g * mg + m;
		const float *bias = r->b ? r->b + co : NULL;
		float *y = r->y + (n * cv->cout + co) * yv + oh0 * q->ow;
		/* tiles as even as the widest allows (25 positions: 9, 8, 8,
		 * not 12, 12 and a tile of 4 for one) */
		int64_t pmax = nv == 2 ? 12 : 24, ntile = (len + pmax - 1) / pmax;
		for (int64_t j0 = 0, tl = 0; j0 < len; tl++) {
			int valid = (int)((len - j0 + (ntile - tl) - 1) / (ntile - tl)), P;
			gr_cf_fn fn = gr_cf_pick(nv, valid, &P);
			for (int i = 0; i < P; i++) {
				int64_t j = j0 + (i < valid ? i : valid - 1);
				pos[i] = (int32_t)(j / q->ow * q->phw + j % q->ow);
			}
			fn(st, off, pos, kdim, panel + m - m0, cb, bias, t);
			gr_cf_put(t, nv, valid, y + j0, yv);
			j0 += valid;
		}
	}
}

/* gr_flip's w'^T [group][cin_g][kv][cout_g] (cout_g a multiple of 16,
 * kv <= 16) in AVX-512: per (group, input channel) and 16 output
 * channels, their rows of taps loaded reversed and transposed 16 x 16.
 * ConvGradData of ResNeXt's 32 channels a group at 2x2 (grouped-t2, pass
 * dX) spent 39% in gr_flip512 and 38% in column tiles of 24 columns for
 * a run of 6; here the co-lane forward tiles run from this W^T as from W
 * packed once. */
GR_TARGET512 void hp_grp_cf_flip(const struct hp_conv *cv, const float *w, float *f)
{
	int64_t kv = cv->g.k[1] * cv->g.k[2], mg = cv->cout_g, cg = cv->cin_g;
	__mmask16 mk = (__mmask16)((1u << kv) - 1);
	int32_t rev[16];
	__m512 r[16];

	for (int t = 0; t < 16; t++)
		rev[t] = t < kv ? (int32_t)(kv - 1 - t) : t;
	__m512i idx = _mm512_loadu_si512(rev);
	for (int64_t g = 0; g < cv->group; g++)
		for (int64_t j = 0; j < cg; j++) {
			const float *src = w + ((g * cg + j) * mg) * kv; /* [mi][kv] rows */
			float *dst = f + (g * cg + j) * kv * mg;
			for (int64_t m0 = 0; m0 < mg; m0 += 16) {
				for (int i = 0; i < 16; i++)
					r[i] = _mm512_permutexvar_ps(idx, _mm512_maskz_loadu_ps(mk, src + (m0 + i) * kv));
				hp_tr16_ps(r);
				for (int64_t t = 0; t < kv; t++)
					_mm512_storeu_ps(dst + t * mg + m0, r[t]);
			}
		}
}

/* hp_grp_cf_flip's W^T for one group, a unit's panel of cb channels
 * (32, or 16 for an odd last one) [kdim][cb], as hp_grp_pack lays out a
 * Conv's W: the flip, transpose and pack of the KxK path's W' in one
 * pass.  Returns whether a weight is an Inf or a NaN (its exponent all
 * ones), whose products with padding taps the skipping tiles must not
 * drop. */
#define GR_FLIP_AHEAD 4
GR_TARGET512 int hp_grp_cf_flip_unit(const struct hp_conv *cv, const float *w, int64_t u, int64_t cb, float *dst)
{
	int64_t kv = cv->g.k[1] * cv->g.k[2], mg = cv->cout, cg = cv->cin_g;
	__mmask16 mk = (__mmask16)((1u << kv) - 1), bad = 0;
	__m512i ex = _mm512_set1_epi32(0x7f800000);
	__m512 r[16];

	/* rows loaded as they are, the taps reversed by where the
	 * transposed vectors go, the exponents checked on those kv vectors */
	for (int64_t j = 0; j < cg; j++, dst += kv * cb) {
		const float *src = w + j * mg * kv; /* [m][kv] rows of input channel j */
		/* the unit's rows of channel j + GR_FLIP_AHEAD: cb * kv floats
		 * every mg * kv, a stride the prefetchers did not follow (the
		 * loads took 40% of a 2.6 MB W's flip) */
		if (j + GR_FLIP_AHEAD < cg)
			for (int64_t l = 0; l < cb * kv; l += 16)
				_mm_prefetch((const char *)(src + GR_FLIP_AHEAD * mg * kv + u * kv + l), _MM_HINT_T0);
		for (int64_t m0 = u; m0 < u + cb; m0 += 16) {
			for (int i = 0; i < 16; i++)
				r[i] = _mm512_maskz_loadu_ps(mk, src + (m0 + i) * kv);
			hp_tr16_ps(r);
			for (int64_t t = 0; t < kv; t++) {
				__m512i e = _mm512_and_si512(_mm512_castps_si512(r[t]), ex);
				bad |= _mm512_cmpeq_epi32_mask(e, ex);
				_mm512_storeu_ps(dst + (kv - 1 - t) * cb + m0 - u, r[t]);
			}
		}
	}
	return bad != 0;
}

#endif
