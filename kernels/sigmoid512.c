/* Sigmoid and SiLU over float arrays in AVX-512 registers: hpk_sigmoidf's
 * operations (eltwise_impl.h) lane for lane, uncontracted, so the same
 * bits as its vectorized loops.  Why: EfficientNet-B0's sigmoids (a
 * million an inference at 96x96) were 14% of its time, and the compiled
 * loop spends a third of its instructions on the clamps and the overflow
 * factor, which no lane needs but those past +-87: here those run only
 * for a vector that holds such a lane (the other lanes' results are
 * exactly what the selects would leave: x * 1, x itself). */
#include "kernels/sigmoid512.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

#define S512 __attribute__((target("avx512f")))

static int has_avx512(void)
{
	static int cached = -1;

	if (cached < 0) {
		__builtin_cpu_init();
		cached = __builtin_cpu_supports("avx512f");
	}
	return cached;
}

/* hpk_expf(x), the clamps and the 2^128 split only in vectors that need them. */
S512 static inline __attribute__((always_inline)) __m512 exp16(__m512 x)
{
	const __m512 lo = _mm512_set1_ps(-87.33654f), hi = _mm512_set1_ps(88.72283f);
	const __m512 big = _mm512_set1_ps(12582912.0f);
	__mmask16 mlo = _mm512_cmp_ps_mask(x, lo, _CMP_LT_OQ), mhi = _mm512_cmp_ps_mask(x, hi, _CMP_GT_OQ), mbig;
	__m512 xc = x, t, n, r, p, y;
	__m512i e;

	if (mlo | mhi) {
		xc = _mm512_mask_blend_ps(mlo, xc, lo);
		xc = _mm512_mask_blend_ps(mhi, xc, hi);
	}
	t = _mm512_add_ps(_mm512_mul_ps(xc, _mm512_set1_ps(1.44269504088896341f)), big);
	n = _mm512_sub_ps(t, big);
	e = _mm512_sub_epi32(_mm512_castps_si512(t), _mm512_set1_epi32(0x4B400000));
	r = _mm512_sub_ps(xc, _mm512_mul_ps(n, _mm512_set1_ps(0.693359375f)));
	r = _mm512_sub_ps(r, _mm512_mul_ps(n, _mm512_set1_ps(-2.12194440e-4f)));
	p = _mm512_set1_ps(1.9875691500e-4f);
	p = _mm512_add_ps(_mm512_mul_ps(p, r), _mm512_set1_ps(1.3981999507e-3f));
	p = _mm512_add_ps(_mm512_mul_ps(p, r), _mm512_set1_ps(8.3334519073e-3f));
	p = _mm512_add_ps(_mm512_mul_ps(p, r), _mm512_set1_ps(4.1665795894e-2f));
	p = _mm512_add_ps(_mm512_mul_ps(p, r), _mm512_set1_ps(1.6666665459e-1f));
	p = _mm512_add_ps(_mm512_mul_ps(p, r), _mm512_set1_ps(5.0000001201e-1f));
	y = _mm512_add_ps(_mm512_add_ps(_mm512_mul_ps(_mm512_mul_ps(p, r), r), r), _mm512_set1_ps(1.0f));
	mbig = _mm512_cmpgt_epi32_mask(e, _mm512_set1_epi32(127));
	if (mbig) {
		y = _mm512_mask_mul_ps(y, mbig, y, _mm512_set1_ps(2.0f));
		e = _mm512_min_epi32(e, _mm512_set1_epi32(127));
	}
	y = _mm512_mul_ps(y, _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(e, _mm512_set1_epi32(127)), 23)));
	if (mlo | mhi) {
		y = _mm512_mask_blend_ps(mlo, y, _mm512_setzero_ps());
		y = _mm512_mask_blend_ps(mhi, y, _mm512_set1_ps(__builtin_inff()));
	}
	return y;
}

S512 static int64_t run512(const float *x, float *y, int64_t n, int silu)
{
	const __m512 one = _mm512_set1_ps(1.0f), sign = _mm512_set1_ps(-0.0f);
	int64_t i = 0;

	for (; i + 16 <= n; i += 16) {
		__m512 v = _mm512_loadu_ps(x + i);
		__m512 s = _mm512_div_ps(one, _mm512_add_ps(one, exp16(_mm512_castsi512_ps(_mm512_xor_si512(
							    _mm512_castps_si512(v), _mm512_castps_si512(sign))))));
		if (silu)
			s = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(v, v, _CMP_ORD_Q), v, _mm512_mul_ps(v, s));
		_mm512_storeu_ps(y + i, s);
	}
	return i;
}

int64_t hpk_sigmoid512(const float *x, float *y, int64_t n, int silu)
{
	return has_avx512() ? run512(x, y, n, silu) : 0;
}

#else

int64_t hpk_sigmoid512(const float *x, float *y, int64_t n, int silu)
{
	(void)x, (void)y, (void)n, (void)silu;
	return 0;
}

#endif
