/* Internal: products of few rows with a weight packed once (gemm_panels.c).
 *
 * Gemm and GemmGrad take attribute pack_b = E > 0 (set by a pipeline
 * stage, exec/pipe_pack.c, on the nodes whose B is a parameter): with
 * few rows (at most TK_PANEL_MAX_ROWS) they multiply by a copy of the
 * operand (op(B), or op(B)^T for GemmGrad's dA) packed in column panels,
 * made again only when E or B's address changes (the stage bumps E after
 * each update), instead of OpenBLAS,
 * which packs the whole weight on every call: at 16 rows that packing
 * cost about as much as the multiply.  Other rounding than OpenBLAS's
 * (one sum per output in k order), so only where the caller accepts it. */
#ifndef HPDLF_KERNELS_GEMM_PANELS_H
#define HPDLF_KERNELS_GEMM_PANELS_H

#include <stdint.h>

#include "hpdlf/kernels.h"

#define TK_PANEL_MAX_ROWS 64

/* A weight packed for tk_panels_mul: op(B) K x N, element (kk, j) at
 * src[kk * sk + j * sj]. */
struct tk_panels {
	float *buf;
	uint64_t cap;               /* floats */
	int64_t k, n;
	const void *src;            /* the B it was made from */
	int64_t epoch;
};

/* 1 when this CPU runs the packed kernel (x86-64 with AVX2 and FMA). */
int tk_panels_ok(void);
/* Pack op(B) into pk unless it holds B's epoch already: 0 or -ENOMEM. */
int tk_panels_pack(struct tk_panels *pk, const float *src, int64_t sk, int64_t sj, int64_t k, int64_t n,
		   int64_t epoch);
void tk_panels_free(struct tk_panels *pk);
/* Y (m x N, row stride ldy) = alpha op(A) B + (add ? Y : 0), op(A)'s
 * element (i, kk) at a[i * ri + kk * rk]. */
int tk_panels_mul(const struct tk_panels *pk, const float *a, int64_t ri, int64_t rk, int64_t m, float alpha,
		  float *y, int64_t ldy, int add, struct hp_pool *pool);

#endif
