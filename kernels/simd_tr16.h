/* A 16 x 16 transpose of floats in 16 zmm registers: lane i of r[j] ends
 * as lane j of r[i] (unpacks, then 128-bit lane shuffles, 64
 * instructions).  Shared by the AVX-512 gradient tiles (conv_grad_reg.c,
 * conv_grad_grp.c, conv_grad_pw.c) and conv_pwt.c, whose loads and stores around it
 * differ; the caller's target must include avx512f. */
#ifndef HPDLF_KERNELS_SIMD_TR16_H
#define HPDLF_KERNELS_SIMD_TR16_H

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

static inline __attribute__((always_inline, target("avx512f"))) void hp_tr16_ps(__m512 *r)
{
	__m512 t[16];

	for (int i = 0; i < 8; i++) {
		t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
		t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
	}
	for (int i = 0; i < 4; i++) {
		r[4 * i + 0] = _mm512_shuffle_ps(t[4 * i], t[4 * i + 2], 0x44);
		r[4 * i + 1] = _mm512_shuffle_ps(t[4 * i], t[4 * i + 2], 0xEE);
		r[4 * i + 2] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0x44);
		r[4 * i + 3] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0xEE);
	}
	for (int i = 0; i < 4; i++) {
		t[i] = _mm512_shuffle_f32x4(r[i], r[4 + i], 0x88);
		t[4 + i] = _mm512_shuffle_f32x4(r[i], r[4 + i], 0xDD);
		t[8 + i] = _mm512_shuffle_f32x4(r[8 + i], r[12 + i], 0x88);
		t[12 + i] = _mm512_shuffle_f32x4(r[8 + i], r[12 + i], 0xDD);
	}
	for (int i = 0; i < 4; i++) {
		r[i] = _mm512_shuffle_f32x4(t[i], t[8 + i], 0x88);
		r[8 + i] = _mm512_shuffle_f32x4(t[i], t[8 + i], 0xDD);
		r[4 + i] = _mm512_shuffle_f32x4(t[4 + i], t[12 + i], 0x88);
		r[12 + i] = _mm512_shuffle_f32x4(t[4 + i], t[12 + i], 0xDD);
	}
}

/* An 8 x 8 transpose of floats in 8 ymm registers: r[i] becomes column i
 * of the matrix whose rows were r[0..8).  Shared by the depthwise
 * channel-block kernels (conv_dwc.c, conv_dwk.c); the caller's target
 * must include avx. */
static inline __attribute__((always_inline, target("avx"))) void hp_tr8_ps(__m256 *r)
{
	__m256 t[8], s[8];

	for (int i = 0; i < 4; i++) {
		t[2 * i] = _mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]);
		t[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]);
	}
	for (int i = 0; i < 2; i++) {
		s[4 * i] = _mm256_shuffle_ps(t[4 * i], t[4 * i + 2], 0x44);
		s[4 * i + 1] = _mm256_shuffle_ps(t[4 * i], t[4 * i + 2], 0xee);
		s[4 * i + 2] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0x44);
		s[4 * i + 3] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0xee);
	}
	for (int i = 0; i < 4; i++) {
		r[i] = _mm256_permute2f128_ps(s[i], s[i + 4], 0x20);
		r[i + 4] = _mm256_permute2f128_ps(s[i], s[i + 4], 0x31);
	}
}
#endif

#endif
