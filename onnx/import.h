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
	int64_t ir_version;    /* the model's IR version (0: not given) */
	/* Values node inputs read instead of the one named: a float16 or
	 * bfloat16 initializer or graph input -> its float32 Cast (half.c). */
	int *alias;            /* per value index: the value read instead + 1, or 0 */
	int alias_cap;
	/* Names of the subgraph being inlined (control.c): its local names ->
	 * the parent's; NULL at the top level. */
	struct imp_scope *scope;
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

/* Is dtype one the importer reads (float32/64, int64/32, int8, uint8, bool,
 * and float16/bfloat16, which are computed in float32: half.c)? */
int imp_dtype_supported(int32_t dtype);
/* ONNX element type name ("float16", "string", "unknown"). */
const char *imp_dtype_name(int32_t dtype);
#define IMP_SUPPORTED_LIST "float32, float64, float16, bfloat16, int64, int32, int16, int8, uint64, uint32, uint16, uint8, bool"
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
#define IMP_NODE_SPARE 8
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

/* ---- building blocks of normalization rules (normalize_emit.c) ---- */
/* Index of n's attribute `name` not yet dropped, or -1. */
int imp_find_attr(const struct imp_node *n, const char *name);
/* Error "MODEL: node 'N' (OP): what 'detail'". */
int imp_node_err(struct imp *im, const struct imp_node *n, int err, const char *what, const char *detail);
/* Put value v at input slot `slot` of n (slots in between stay omitted). */
int imp_set_slot(struct imp *im, struct imp_node *n, int slot, int v, const char *attr);
/* A new int64 constant of `count` values (rank 1, or rank 0 when count < 0:
 * one scalar), named after n and suffix. */
int imp_const_i64(struct imp *im, const struct imp_node *n, const char *suffix, const int64_t *vals, int count);
/* A node the rewrite of n adds: op over inputs `in` (-1: omitted), with
 * attributes `attrs` (copied), one new output named after n and suffix;
 * returns the output's value index. */
int imp_emit(struct imp *im, const struct imp_node *n, const char *suffix, const char *op, int nin, const int *in,
	     int nattrs, const struct hp_attr *attrs);
/* Integer attribute `name` set (or replaced) on n. */
int imp_set_int_attr(struct imp_node *n, const char *name, int64_t v);
int imp_set_float_attr(struct imp_node *n, const char *name, float v);
int imp_set_string_attr(struct imp_node *n, const char *name, const char *v);

/* ---- half precision (half.c) ---- */
/* float16 / bfloat16 bytes -> float32 (n elements). */
void imp_half_to_f32(enum hp_dtype dt, const uint16_t *src, float *dst, uint64_t n);
/* float32 -> float16 / bfloat16, rounding to nearest even (export.c: a
 * half-precision weight trained in float32 goes back in its type). */
void imp_f32_to_half(enum hp_dtype dt, const float *src, uint16_t *dst, uint64_t n);
/* A Constant's or attribute tensor's half-precision data as float32, in place. */
int imp_tensor_widen(struct imp *im, struct hp_tensor *t, const char *what);
/* The value a node input reads for v: v itself, or for a float16/bfloat16
 * initializer or graph input its float32 Cast (added at the first read, so
 * a value no node reads stays unread).  -1 stays -1; < -1: an error. */
int imp_resolve(struct imp *im, int v);
/* A graph output declared float16/bfloat16 computed in float32: the value
 * is renamed and a Cast produces the declared name and type. */
int imp_narrow_output(struct imp *im, int v, enum hp_dtype declared);

/* ---- control flow (control.c) ---- */
/* One NodeProto into the graph (import.c): index names an unnamed node. */
int imp_add_node(struct imp *im, const Onnx__NodeProto *np, size_t index);
/* Is np an If, Loop or Scan that control.c inlines? */
int imp_is_control(const Onnx__NodeProto *np);
/* If, Loop, Scan: the chosen branch inlined or the loop unrolled into the
 * graph (their conditions and trip counts must be constants). */
int imp_control(struct imp *im, const Onnx__NodeProto *np, const char *name);
/* Scopes of inlined subgraphs: a name as the enclosing copies renamed it;
 * a root scope of one's own (control_defer.c). */
const char *imp_scope_map(const struct imp *im, const char *name);
struct imp_scope *imp_scope_new(void);
int imp_scope_bind(struct imp_scope *s, const char *from, const char *to);
void imp_scope_free(struct imp_scope *s);
/* An If or Loop whose condition or trip count is not a constant yet: a
 * placeholder node hp_graph_infer folds later (control_defer.c). */
int imp_defer_control(struct imp *im, const Onnx__NodeProto *np, const char *name);
/* An importer state over an existing graph (names indexed; nothing read
 * from a file), for folding deferred control flow; imp_detach frees it. */
int imp_attach(struct imp *im, struct hp_graph *g);
void imp_detach(struct imp *im);

#endif
