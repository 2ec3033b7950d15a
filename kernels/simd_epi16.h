/* Clip and HardSwish on sixteen lanes, operation for operation as
 * fma_finish (fma_tile.h) and conv_dwk.c's dwk_act compute them on eight,
 * so a tile that applies them in registers gives the unfused bits: Clip
 * by compares and selects (NaN passes; lo already min(lo, hi)), HardSwish
 * v * sat01(v * (1/6) + 0.5) uncontracted.  Shared by conv_pw.c's
 * pw_fin512 and conv_dwkz.c's dkz_act, whose Relus differ (a compare and
 * select against a max); the caller's target must include avx512f. */
#ifndef HPDLF_KERNELS_SIMD_EPI16_H
#define HPDLF_KERNELS_SIMD_EPI16_H

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

static inline __attribute__((always_inline, target("avx512f"))) __m512 hp_clip16_ps(__m512 v, __m512 lo, __m512 hi)
{
	__m512 t = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(v, hi, _CMP_GT_OQ), v, hi);

	return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(v, lo, _CMP_LT_OQ), t, lo);
}

static inline __attribute__((always_inline, target("avx512f"))) __m512 hp_hswish16_ps(__m512 v)
{
	__m512 z = _mm512_setzero_ps(), one = _mm512_set1_ps(1.0f);
	__m512 t = _mm512_add_ps(_mm512_mul_ps(v, _mm512_set1_ps(1.0f / 6.0f)), _mm512_set1_ps(0.5f));

	t = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(t, z, _CMP_LT_OQ), t, z);
	t = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(t, one, _CMP_GT_OQ), t, one);
	return _mm512_mul_ps(v, t);
}
#endif

#endif
