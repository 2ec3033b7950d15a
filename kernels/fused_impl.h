/* Internal to kernels/: the epilogue the fused operators (fused.c) apply to
 * a product's output, y = act(y + addend), one element at a time.  Each
 * element is computed exactly as the unfused Add and activation kernels
 * compute it (same expressions, ISO C rounding without contraction), so a
 * fused node gives the bits of the nodes it replaced; exec/fuse_epi.c
 * relies on that to fuse only in core and leave the out-of-core graph
 * splittable (tests/exec/check_fuse.py checks fused against --no-fuse bit
 * for bit). */
#ifndef HPDLF_KERNELS_FUSED_IMPL_H
#define HPDLF_KERNELS_FUSED_IMPL_H

#include <stdint.h>

#include "hpdlf/graph.h"

/* HP_EPI_SILU: v * sigmoid(v), as Sigmoid and then Mul(v, s) compute it
 * (v itself where v is NaN). */
enum hp_epi_act {
	HP_EPI_NONE,
	HP_EPI_RELU,
	HP_EPI_CLIP,
	HP_EPI_SIGMOID,
	HP_EPI_HSWISH,
	HP_EPI_GELU,
	HP_EPI_GELU_TANH,
	HP_EPI_SILU
};

/* How the addend broadcasts over y (viewed as [outer, mid, inner]). */
enum hp_epi_add { HP_EPI_ADD_NONE, HP_EPI_ADD_FULL, HP_EPI_ADD_SCALAR, HP_EPI_ADD_MID };

struct hp_epi {
	enum hp_epi_act act;
	enum hp_epi_add add;
	float lo, hi;         /* Clip bounds */
	int64_t mid, inner;   /* ADD_MID: addend[(i / inner) % mid] */
};

/* The activation named by a fused node's "activation" attribute ("" for
 * none); -1 when unknown. */
int hp_epi_act_of(const char *name);
/* How an addend of shape a broadcasts onto y (shape ys): 0 and e->add set,
 * or -1 when it is not one of the forms above. */
int hp_epi_add_of(const struct hp_shape *ys, const struct hp_shape *a, struct hp_epi *e);
/* The same over elements [b, end) of y (addend indexed as y's), on the
 * calling thread; e->add must be NONE when there is no addend. */
void hp_epi_span(const struct hp_epi *e, float *y, const float *addend, int64_t b, int64_t end);
/* y[i] = act(y[i] + addend[...]) over n elements, on the pool. */
void hp_epi_run(const struct hp_epi *e, float *y, const float *addend, int64_t n, struct hp_pool *pool);
/* MatMul's and Gemm's kernels (gemm.c) with the epilogue e (NULL: none;
 * add NONE without an addend) applied to each output tile after its last
 * K tile, while it is in cache. */
struct hp_kargs;
int hp_matmul_run_epi(const struct hp_node *n, const struct hp_kargs *a, const struct hp_epi *e,
		      const float *addend);
int hp_gemm_run_epi(const struct hp_node *n, const struct hp_kargs *a, const struct hp_epi *e, const float *addend);

/* FusedInvRes (fused_ir.c), MobileNetV2's expansion, depthwise and
 * projection in one node: whether this machine runs it (AVX2 and FMA,
 * the kernels whose bits it reproduces). */
int hp_fir_available(void);
/* Tests only: output rows per band of the nodes prepared from now on (0:
 * from the cache budget). */
void hp_fir_set_band_rows(int64_t rows);
/* Tests only: tid 1 waits this many microseconds before its first band
 * of every run (0: never), so that tid 0 takes bands from its share's back
 * (hp_parallel_steal). */
void hp_fir_set_stall_us(int64_t us);
/* Whether a FusedInvRes node of an h x w input plane runs by blocked
 * channels where its 1x1 weights come transposed (inputs 8 and 9, made
 * once by exec/fuse_pack.c): AVX-512 and a plane up to 112x112. */
int hp_fir_packs(int64_t h, int64_t w);
/* Tests only: how the nodes prepared from now on run (0: by plane size,
 * 1: bands of rows, 2: blocks of channels, 3: blocked channels where the
 * transposed weights are given and AVX-512 runs, else as 2). */
void hp_fir_set_mode(int mode);

#endif
