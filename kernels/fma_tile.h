/* The register-tile epilogue shared by hpdlf's own AVX2+FMA products
 * (conv_pw.c, conv_kxk.c, gemm_fma.c; the 8x8 transpose also gemm_panels.c):
 * masks for a partial vector of columns, the fused Relu or Clip after a
 * full addend, and the stores of a micro-tile's rows.  The FMA chains themselves stay in each kernel (their operands
 * are laid out differently); this part is the same bits everywhere. */
#ifndef HPDLF_KERNELS_FMA_TILE_H
#define HPDLF_KERNELS_FMA_TILE_H

/* A micro-tile's epilogue in registers. */
struct hp_fma_fin {
	int act;                 /* HP_EPI_NONE, HP_EPI_RELU, HP_EPI_CLIP or HP_EPI_HSWISH */
	float lo, hi;            /* Clip: lo already min(lo, hi) as CLIP() takes it */
};

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#include <stdint.h>

#include "kernels/fused_impl.h"

#define FMA_TARGET __attribute__((target("avx2,fma")))
#define FMA_INLINE __attribute__((always_inline)) inline

static const int32_t fma_mask_src[16] = { -1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0 };

/* The first n (clamped to 0..8) lanes. */
FMA_TARGET static FMA_INLINE __m256i fma_mask(int n)
{
	n = n < 0 ? 0 : n > 8 ? 8 : n;
	return _mm256_loadu_si256((const __m256i *)(fma_mask_src + 8 - n));
}

FMA_TARGET static FMA_INLINE __m256 fma_finish(__m256 v, const struct hp_fma_fin *f, const float *add, __m256i mk,
					      int full)
{
	if (add)
		v = _mm256_add_ps(v, full ? _mm256_loadu_ps(add) : _mm256_maskload_ps(add, mk));
	if (f->act == HP_EPI_RELU)
		v = _mm256_blendv_ps(v, _mm256_setzero_ps(), _mm256_cmp_ps(v, _mm256_setzero_ps(), _CMP_LT_OQ));
	else if (f->act == HP_EPI_CLIP) {
		__m256 lo = _mm256_set1_ps(f->lo), hi = _mm256_set1_ps(f->hi);
		__m256 r = _mm256_blendv_ps(v, hi, _mm256_cmp_ps(v, hi, _CMP_GT_OQ));
		v = _mm256_blendv_ps(r, lo, _mm256_cmp_ps(v, lo, _CMP_LT_OQ));
	} else if (f->act == HP_EPI_HSWISH) { /* v * sat01(v * (1/6) + 0.5), fused_epi.c's, uncontracted */
		__m256 z = _mm256_setzero_ps(), one = _mm256_set1_ps(1.0f);
		__m256 t = _mm256_add_ps(_mm256_mul_ps(v, _mm256_set1_ps(1.0f / 6.0f)), _mm256_set1_ps(0.5f));
		t = _mm256_blendv_ps(t, z, _mm256_cmp_ps(t, z, _CMP_LT_OQ));
		t = _mm256_blendv_ps(t, one, _mm256_cmp_ps(t, one, _CMP_GT_OQ));
		v = _mm256_mul_ps(v, t);
	}
	return v;
}

/* The lanes of v below n (1..8) to q: masked stores are slow on AMD's
 * cores. */
FMA_TARGET static FMA_INLINE void fma_store_part(float *q, __m256 v, int n)
{
	float t[8];

	_mm256_storeu_ps(t, v);
	for (int i = 0; i < n; i++)
		q[i] = t[i];
}

/* Accumulators acc[r][v] (rows r < mr, nv vectors) to y's first ncols
 * columns, rows ldy apart; full: ncols == 8 * nv. */
FMA_TARGET static FMA_INLINE void fma_store_acc(__m256 acc[][2], int mr, int nv, float *y, int64_t ldy, int ncols,
					       int full)
{
	for (int r = 0; r < mr; r++)
		for (int v = 0; v < nv; v++) {
			if (full || ncols >= 8 * (v + 1))
				_mm256_storeu_ps(y + r * ldy + 8 * v, acc[r][v]);
			else
				fma_store_part(y + r * ldy + 8 * v, acc[r][v], ncols - 8 * v);
		}
}

/* d[r * ld + c] = s[c * ls + r] for an 8 x 8 block: eight columns of a
 * matrix (rows of its transpose) become eight rows of a panel ld wide. */
FMA_TARGET static inline void fma_transpose8(float *d, int64_t ld, const float *s, int64_t ls)
{
	__m256 r[8], t[8];

	for (int i = 0; i < 8; i++)
		r[i] = _mm256_loadu_ps(s + i * ls);
	for (int i = 0; i < 8; i += 2) {
		t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
		t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
	}
	for (int i = 0; i < 8; i += 4) {
		r[i] = _mm256_shuffle_ps(t[i], t[i + 2], 0x44);
		r[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], 0xee);
		r[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0x44);
		r[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0xee);
	}
	for (int i = 0; i < 4; i++) {
		_mm256_storeu_ps(d + i * ld, _mm256_permute2f128_ps(r[i], r[i + 4], 0x20));
		_mm256_storeu_ps(d + (i + 4) * ld, _mm256_permute2f128_ps(r[i], r[i + 4], 0x31));
	}
}

/* The epilogue over rows r < mr, nv vectors (ncols columns) of y, ldy
 * apart, with the addend at add in y's layout. */
FMA_TARGET static inline void fma_finish_tile(int mr, int nv, float *y, int64_t ldy, int ncols,
					      const struct hp_fma_fin *f, const float *add)
{
	__m256i mk[2] = { fma_mask(ncols), fma_mask(ncols - 8) };
	int full = ncols == 8 * nv;

	for (int r = 0; r < mr; r++)
		for (int v = 0; v < nv; v++) {
			float *q = y + r * ldy + 8 * v;
			__m256 o = fma_finish(full ? _mm256_loadu_ps(q) : _mm256_maskload_ps(q, mk[v]), f,
					      add ? add + r * ldy + 8 * v : NULL, mk[v], full);
			if (full || ncols >= 8 * (v + 1))
				_mm256_storeu_ps(q, o);
			else
				fma_store_part(q, o, ncols - 8 * v);
		}
}
#endif

#endif
