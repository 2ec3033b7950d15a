/* Test harness: run one operator as a one-node graph through the real
 * import-side path (hp_graph_infer: prepare + folding) and the kernel. */
#ifndef HPDLF_TESTS_HARNESS_H
#define HPDLF_TESTS_HARNESS_H

#include "hpdlf/graph.h"
#include "hpdlf/kernels.h"
#include "hpdlf/tensor.h"

/* Attribute constructors (the harness copies them). */
struct hp_attr kt_int(const char *name, int64_t v);
struct hp_attr kt_float(const char *name, float v);
struct hp_attr kt_string(const char *name, const char *s);
struct hp_attr kt_ints(const char *name, int n, const int64_t *v);
struct hp_attr kt_floats(const char *name, int n, const float *v);

struct kt_case {
	const char *domain;          /* NULL: ai.onnx */
	const char *op;
	int nin;
	const struct hp_tensor *in;  /* in[i].data NULL: omitted optional input */
	unsigned const_mask;         /* bit i: input i is a compile-time constant */
	int nattrs;
	const struct hp_attr *attrs;
	int nout;
	struct hp_pool *pool;        /* NULL: single thread */
	int opset;                   /* ai.onnx opset of the graph; 0: hp_graph_new's default */
};

/* Run; out[0..nout) receive freshly allocated results (hp_tensor_free them).
 * Returns the first error of infer or run (message in hp_errmsg()). */
int kt_run(const struct kt_case *c, struct hp_tensor *out);

/* Tensor helpers for tests. */
struct hp_tensor kt_tensor(enum hp_dtype dt, int rank, const int64_t *dims); /* zeroed */
void kt_fill_random(struct hp_tensor *t, unsigned seed, float lo, float hi);
/* max |a-b| / max(1, max|b|) over float32 tensors of equal shape; -1 on shape mismatch. */
double kt_rel_err(const struct hp_tensor *a, const struct hp_tensor *b);

#endif
