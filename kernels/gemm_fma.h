/* Internal to kernels/: Gemm's and MatMul's own AVX2+FMA product
 * (gemm_fma.c), which gemm.c runs instead of OpenBLAS's tiles when alpha
 * is 1 and the CPU has AVX2 and FMA.
 *
 * Each output is one chain of fused multiply-adds over k = 0, 1, ..., K-1
 * in order, starting from beta C (or from 0): so its bits depend on no
 * cache blocking, tile, row band, output-column block or thread count, and
 * a product cut along K whose blocks each start from the previous block's
 * result (exec/split_weight.c's chained MatMulAcc / Gemm with beta 1) ends
 * with the whole product's bits. */
#ifndef HPDLF_KERNELS_GEMM_FMA_H
#define HPDLF_KERNELS_GEMM_FMA_H

#include <stdint.h>

#include "hpdlf/kernels.h"
#include "kernels/fused_impl.h"

/* nprob products Y_p (m x n, rows ldy apart (0: n), the p-th m*ldy
 * floats of y) = beta C_p + A_p op(B_p), then the epilogue epi (NULL:
 * none) on each element, indexed as y whole (addend in y's layout).
 * A_p(i, kk) = a[aoff[p] + i * ra + kk * rk], op(B_p)(kk, j) =
 * b[boff[p] + kk * sk + j * sj] (aoff, boff NULL: 0), C_p(i, j) =
 * c[p * cprob + i * cs0 + j * cs1] (c NULL: start from 0). */
struct hp_fma_prod {
	int64_t m, n, k, nprob;
	const float *a, *b, *c;
	int64_t ra, rk, sk, sj;
	const int64_t *aoff, *boff;
	int64_t cs0, cs1, cprob;
	float beta;
	float *y;
	int64_t ldy;
	const struct hp_epi *epi;
	const float *addend;
	/* op(B) packed once (hp_fma_pack_b), shared by every problem; NULL:
	 * b, sk, sj and boff, packed per column block as the product runs */
	const float *bpk;
};

/* The attribute of a MatMul, Gemm, FusedMatMul or FusedGemm whose input
 * B is op(B) packed by hp_fma_pack_b as [ceil(N / 16), K, 16]: N. */
#define HP_GEMM_PACKED_ATTR "packed_n"

/* Floats of op(B) (K x N) packed: panels of 16 columns (zeros past N),
 * each K rows of 16, the layout the product reads. */
int64_t hp_fma_packed_floats(int64_t k, int64_t n);
/* dst (hp_fma_packed_floats) = op(B) packed, op(B)(kk, j) = b[kk * sk + j * sj];
 * only when hp_fma_gemm_ok(). */
void hp_fma_pack_b(const float *b, int64_t sk, int64_t sj, int64_t k, int64_t n, float *dst);

/* 1 when this CPU runs hp_fma_gemm (x86-64 with AVX2 and FMA). */
int hp_fma_gemm_ok(void);
/* The product on the pool (alone below a few MFLOP); bitwise the same for
 * any pool.  Only when hp_fma_gemm_ok(). */
void hp_fma_gemm(const struct hp_fma_prod *p, struct hp_pool *pool);
/* Tests and benchmarks only: whether the product takes AVX-512 tiles of
 * two 16-column panels where the CPU has AVX-512 (the default) or AVX2
 * tiles of one; the same bits either way. */
void hp_fma_set_wide(int on);

#endif
