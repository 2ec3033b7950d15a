/* Whether this CPU runs AVX-512F and FMA, asked once per file (the
 * gradient tiles' test: conv_grad_lane.c, conv_grad_pw.c, conv_grad_reg.c,
 * conv_grad_tiny.c); 0 where the compiler cannot target x86-64. */
#ifndef HPDLF_KERNELS_CPU_H
#define HPDLF_KERNELS_CPU_H

static inline int hp_cpu_avx512_fma(void)
{
#if defined(__x86_64__) && defined(__GNUC__)
	static int cached = -1;

	if (cached < 0)
		cached = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("fma");
	return cached;
#else
	return 0;
#endif
}

#endif
