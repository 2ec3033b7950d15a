/* hpdlf kernels: the operator table, kernel arguments and the thread pool.
 *
 *   const struct hp_op *op = hp_op_find("", "Relu");
 *   // at compile time: op->prepare(g, node) sets output shapes, workspace, priv
 *   struct hp_kargs a = { .nin = 1, .in = &x, .nout = 1, .out = &y, .pool = pool };
 *   int rc = op->run(node, &a);
 *
 * Every operator (forward ONNX ops and, in domain "ai.hpdlf", the backward
 * and optimizer ops that autodiff emits) is one struct hp_op.  Kernels never
 * allocate tensor memory: inputs, outputs and workspace come from the caller
 * (the executor, which takes them from the tensor store), so the same kernel
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

/* Arguments of one kernel call. in[i].data is NULL for an omitted optional
 * input (node->inputs[i] == -1); out[i].data NULL for an omitted output. */
struct hp_kargs {
	int nin, nout;
	const struct hp_tensor *in;
	struct hp_tensor *out;
	void *ws;               /* node->workspace bytes, 64-byte aligned */
	size_t ws_size;
	struct hp_pool *pool;   /* may be NULL: run on the calling thread */
};

enum hp_op_flags {
	HP_OP_INPLACE = 1u << 0,     /* out[0] may alias in[0] (same size) */
	HP_OP_NO_FOLD = 1u << 1,     /* never constant-fold (random ops) */
	HP_OP_ALIAS = 1u << 2,       /* out[0] is in[0]'s bytes reinterpreted (Reshape...) */
};

struct hp_op {
	const char *domain;     /* "" = ai.onnx, "ai.hpdlf" = internal ops */
	const char *name;
	int min_inputs, max_inputs;
	int min_outputs, max_outputs;
	unsigned flags;
	/* Validate attributes and input dtypes/shapes (g->values[n->inputs[i]]),
	 * set output dtypes and concrete shapes, n->workspace and n->priv.  Input
	 * values whose ->data is set are compile-time constants (e.g. Reshape's
	 * shape); an op that needs one that is not constant fails HP_EUNSUPPORTED.
	 * An op may fold itself by setting an output value's data and kind
	 * HP_VALUE_CONSTANT (Shape does).  Errors name the node and op. */
	int (*prepare)(struct hp_graph *g, struct hp_node *n);
	/* Compute. Must not fail on shapes prepare accepted, except for data-
	 * dependent errors (Gather index out of range), which name the node. */
	int (*run)(const struct hp_node *n, const struct hp_kargs *a);
	/* Free n->priv (NULL: free(n->priv) is enough). */
	void (*release)(struct hp_node *n);
	/* Floating-point operations of one run (for GFLOP/s and the planner's
	 * time model); NULL: counted as numel(outputs). */
	double (*flops)(const struct hp_graph *g, const struct hp_node *n);
};

/* Look an operator up ("" or "ai.onnx" for the default domain). */
const struct hp_op *hp_op_find(const char *domain, const char *name);
/* All registered operators (for --help and the conformance runner). */
const struct hp_op *const *hp_op_list(int *count);

/* Helper for prepare functions: record "MODEL: node 'NAME' (OP): message". */
int hp_node_error(const struct hp_graph *g, const struct hp_node *n, int err, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

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
