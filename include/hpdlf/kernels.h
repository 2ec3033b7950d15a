/* hpdlf kernels: the operator table, kernel arguments and the thread pool.
 *
 *   const struct hp_op *op = hp_op_find("", "Relu");
 *   // at compile time: op->prepare(g, node) sets output shapes, workspace, priv
 *   struct hp_kargs a = { .nin = 1, .in = &x, .nout = 1, .out = &y, .pool = pool };
 *   int rc = op->run(node, &a);
 *
 * Every operator (forward ONNX ops and, in domain "ai.hpdlf", the backward
 * and optimizer ops that autodiff emits) is one struct hp_op, declared in
 * hpdlf/graph.h beside the nodes that point at it.  Kernels never allocate
 * tensor memory: inputs, outputs and workspace come from the caller (the
 * executor, which takes them from the tensor store), so the same kernel
 * runs in core and out of core.  Kernels are deterministic: for a given
 * thread count the result is bitwise reproducible.
 */
#ifndef HPDLF_KERNELS_H
#define HPDLF_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include "hpdlf/graph.h"
#include "hpdlf/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

struct hp_pool;

/* Look an operator up ("" or "ai.onnx" for the default domain). */
const struct hp_op *hp_op_find(const char *domain, const char *name);
/* All registered operators (for --help and the conformance runner). */
const struct hp_op *const *hp_op_list(int *count);

/* ---- thread pool ------------------------------------------------------ */

/* fn is called with disjoint [begin, end) ranges covering [0, n); tid is the
 * worker index (0..size-1).  The split depends only on n, grain and the pool
 * size, so per-range partial results combine in a fixed order. */
typedef void (*hp_range_fn)(void *arg, int64_t begin, int64_t end, int tid);

int hp_pool_create(int nthreads, struct hp_pool **out);
void hp_pool_destroy(struct hp_pool *p);
int hp_pool_size(const struct hp_pool *p); /* 1 for NULL */
/* Run fn over [0, n) in ranges of at least `grain` items; returns when done.
 * Callable with p == NULL (runs inline). Not reentrant from inside fn. */
void hp_parallel_for(struct hp_pool *p, int64_t n, int64_t grain, hp_range_fn fn, void *arg);

#ifdef __cplusplus
}
#endif
#endif
