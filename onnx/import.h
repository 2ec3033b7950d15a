/* ONNX importer internals shared by import.c, tensors.c and normalize.c. */
#ifndef HPDLF_ONNX_IMPORT_H
#define HPDLF_ONNX_IMPORT_H

#include <stddef.h>
#include <stdint.h>

#include "hpdlf/graph.h"
#include "onnx/onnx.pb-c.h"
#include "onnx/wire.h"

/* Initializers up to this size are read at load time into value->data: shape
 * tensors, axes, scales and scalars must be compile-time constants for the
 * kernels' prepare and for constant folding.  Larger ones stay in their file
 * until hp_graph_read_init(). */
#define IMP_INLINE_MAX 4096

/* Largest tensor the importer accepts (bytes); guards size arithmetic. */
#define IMP_TENSOR_MAX (UINT64_C(1) << 48)

struct imp {
	struct hp_graph *g;
	struct pb_src src;     /* the model file (pread) or the caller's buffer */
	int in_memory;         /* loaded from a buffer: embedded bytes are copied */
	char *dir;             /* directory external data is relative to, or NULL */
	uint64_t *file_size;   /* size of each g->files entry (0: the model) */
	int *slots;            /* name -> value index, open addressing */
	uint32_t nslots, nused;
	int serial;            /* counter for generated names */
};

/* An embedded raw_data field: where its bytes are (in memory at p, or at
 * byte off of the model file when p is NULL). */
struct imp_raw {
	int present;
	const uint8_t *p;
	uint64_t off;
	uint64_t len;
};

/* Values by name (hash on top of hp_graph_add_value). */
int imp_find(const struct imp *im, const char *name);
int imp_add_value(struct imp *im, const char *name, enum hp_value_kind kind, enum hp_dtype dtype,
		  const struct hp_shape *shape);
/* A fresh name "base:suffix" (made unique) for values the importer creates. */
int imp_fresh_name(struct imp *im, const char *base, const char *suffix, char *out, size_t len);

/* Is dtype one the importer reads (float32/64, int64/32, int8, uint8, bool)? */
int imp_dtype_supported(int32_t dtype);
/* ONNX element type name ("float16", "string", "unknown"). */
const char *imp_dtype_name(int32_t dtype);
#define IMP_SUPPORTED_LIST "float32, float64, int64, int32, int8, uint8, bool"
/* Tensor dtype and dims, checked (rank, sizes). `what` names it in errors. */
int imp_tensor_desc(struct imp *im, const Onnx__TensorProto *t, const char *what, struct hp_tensor *desc);
/* Where the tensor's bytes are: blob FILE for external or (when allowed) raw
 * data in the model file, else materialized into *data (graph-owned). */
int imp_tensor_bytes(struct imp *im, const Onnx__TensorProto *t, const struct imp_raw *raw, const char *what,
		     const struct hp_tensor *desc, int may_defer, struct hp_blob *blob, void **data);
/* A whole tensor in memory (Constant values, TENSOR attributes). */
int imp_tensor_load(struct imp *im, const Onnx__TensorProto *t, const struct imp_raw *raw, const char *what,
		    struct hp_tensor *out);
/* One top-level initializer: its TensorProto is at [off, off+len) of the
 * model; everything but raw_data is read. */
int imp_initializer(struct imp *im, uint64_t off, uint64_t len);
/* Error for a failed pb_src_* call (-1 malformed, -2 read error, -ENOMEM). */
int imp_src_error(struct imp *im, int rc, const char *where);

/* A constant value with data (takes ownership of data). Returns its index. */
int imp_add_constant(struct imp *im, const char *name, enum hp_dtype dtype, const struct hp_shape *shape,
		     void *data);

/* A node on its way into the graph.  inputs and attrs have IMP_NODE_SPARE
 * free slots past their counts for what normalization appends. */
#define IMP_NODE_SPARE 4
struct imp_node {
	char op_type[64];
	const char *name;
	int ninputs, noutputs, inputs_cap;
	int *inputs;
	int nattrs, attrs_cap;
	struct hp_attr *attrs;
	unsigned char *drop;   /* per attribute: 1 = not carried over */
};
/* Rewrite one default-domain node to its newest form (normalize.c): may
 * change op_type, set input slots to new constants, drop attributes and add
 * new ones. */
int imp_normalize(struct imp *im, struct imp_node *n);
/* Append an attribute, taking ownership of its allocations. */
int imp_node_add_attr(struct imp_node *n, const struct hp_attr *a);

#endif
