/* The fixed tiling of Gemm and MatMul (kernels/gemm.c), shared with the
 * weight splitter (exec/split_weight.c).  Their forward products with
 * alpha 1 on AVX2+FMA CPUs run as FMA chains (gemm_fma.h) that need no
 * fixed tiling; the rest, and the gradients, run as below.
 *
 * OpenBLAS rounds an element differently depending on the dims of the
 * sgemm call that computes it and on its position in that call, but the
 * same call (same M, N, K, flags and operand values) gives the same bits
 * whatever the pointers, leading dims or thread.  So the kernels issue
 * one single-threaded sgemm per tile of mb rows x nb output columns x kb
 * of the reduction, tiles counted from 0 in the product's own (global)
 * coordinates, and accumulate the K tiles in order into Y (sgemm beta 1).
 * A product cut at tile boundaries whose blocks carry the whole product's
 * tiling (attribute HP_GEMM_TILE_ATTR = [mb, nb, kb]) issues the very
 * same calls: output-column blocks are concatenated, reduction blocks are
 * chained (block j accumulates into block j-1's result: Gemm C with
 * beta 1, MatMulAcc), so the results are bitwise those of the whole.
 * They are also independent of the thread count. */
#ifndef HPDLF_KERNELS_GEMM_TILE_H
#define HPDLF_KERNELS_GEMM_TILE_H

#include <stdint.h>

#include "hpdlf/graph.h"
#include "hpdlf/kernels.h"

#define HP_GEMM_TILE_ATTR "hpdlf_tile"

struct hp_gemm_tiles {
	int64_t mb, nb, kb;
};

/* The tiling of an M x N x K product (powers of two, from its dims only). */
void hp_gemm_tiles(int64_t m, int64_t n, int64_t k, struct hp_gemm_tiles *t);

/* The tiling node n runs with: its HP_GEMM_TILE_ATTR, else that of its
 * own dims.  Returns 0, or HP_EMODEL for a malformed attribute. */
int hp_gemm_node_tiles(const struct hp_node *n, int64_t m, int64_t nn, int64_t k, struct hp_gemm_tiles *t);

/* Y (m x n, row stride ldy) [+]= alpha op(A) op(B) in the fixed tiling:
 * tiles of t.mb rows x t.nb columns of Y, each one single-threaded sgemm
 * per t.kb of the reduction, accumulated in order (from the last K tile
 * to the first with reverse_k), tiles in parallel on the pool.  With
 * accumulate Y's contents are added to, else the first K tile overwrites
 * them.  The gradients of a Gemm (kernels/gemm_grad.c) run their products
 * this way in the forward product's tiling, so that a weight cut in
 * blocks at tile bounds (exec/split_weight.c) gives bitwise the same
 * gradients, the data gradient chained block by block (reverse_k). */
struct hp_gemm_call {
	int ta, tb, accumulate, reverse_k;
	int64_t m, n, k, lda, ldb, ldy;
	float alpha;
	const float *a, *b;
	float *y;
	struct hp_gemm_tiles t;
};
void hp_gemm_tiled(const struct hp_gemm_call *c, struct hp_pool *pool);

#endif
