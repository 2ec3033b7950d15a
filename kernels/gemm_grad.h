/* Internal: Gemm's weight gradient over rows gathered by the caller
 * (a pipeline stage's micro-batches, exec/pipe_defer.c). */
#ifndef HPDLF_KERNELS_GEMM_GRAD_H
#define HPDLF_KERNELS_GEMM_GRAD_H

#include <stdint.h>

/* dw (k x n, or n x k when tb) = alpha op(x)^T dy (transposed when tb),
 * op(x) rows x k (x itself, or x k x rows when ta) and dy rows x n
 * row-major: GemmGrad's (and MatMulGrad's, ta tb 0 alpha 1) dB over all
 * the rows at once, overwriting dw. */
void tk_gemm_grad_dw(const float *x, const float *dy, float *dw, int64_t rows, int64_t k, int64_t n, int ta, int tb,
		     float alpha);

#endif
