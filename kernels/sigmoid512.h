/* Sigmoid and SiLU by AVX-512 (sigmoid512.c), bitwise hpk_sigmoidf. */
#ifndef HPDLF_KERNELS_SIGMOID512_H
#define HPDLF_KERNELS_SIGMOID512_H

#include <stdint.h>

/* y[i] = hpk_sigmoidf(x[i]) (silu: x[i] * that, x[i] itself where it is
 * NaN) for the first n / 16 * 16 elements; returns how many it did (0
 * without AVX-512F).  y may be x. */
int64_t hpk_sigmoid512(const float *x, float *y, int64_t n, int silu);

#endif
