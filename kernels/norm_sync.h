/* Synchronized BatchNorm statistics over the ranks (norm_sync.c; internal
 * to kernels/, the setter to exec/). */
#ifndef HPDLF_KERNELS_NORM_SYNC_H
#define HPDLF_KERNELS_NORM_SYNC_H

#include <stddef.h>
#include <stdint.h>

/* The executor's sum of n doubles over the ranks, in place (NULL: alone). */
void hp_kernels_set_rank_sum(int (*fn)(double *buf, size_t n));
/* That sum (0 and nothing done when none is set); 0 or a negative error. */
int tk_rank_sum(double *buf, size_t n);
/* Per-channel mean and biased variance of X [N, C, ...] over the rows of
 * every rank, and their total count; two-pass in double. */
int tk_bn_sync_stats(const float *x, int64_t nb, int64_t ch, int64_t inner, double *mean, double *var,
		     double *count);

#endif
