/* hpdlf graph IR: values, nodes and attributes, imported from ONNX.
 *
 *   struct hp_graph *g;
 *   if (hp_graph_load("model.onnx", &g) < 0) die(hp_errmsg());
 *   struct hp_shape s = { 4, { 1, 1, 48, 48 } };
 *   hp_graph_set_input_shape(g, "input", &s);
 *   if (hp_graph_infer(g) < 0) die(hp_errmsg());     // shapes + constant folding
 *   ...
 *   hp_graph_free(g);
 *
 * The graph owns names, attributes and small constants (shape tensors, folded
 * values).  Weights are not read at load time: an initializer records where
 * its bytes are (hp_blob) and hp_graph_read_init() copies them on request, so
 * a model of many GB opens in milliseconds and never sits in memory whole.
 *
 * Import normalizes operators to their newest form: attributes that later
 * opsets moved to inputs (Split 'split', Squeeze/Unsqueeze 'axes', Clip
 * min/max, Reduce* 'axes', Pad 'pads', Resize/Upsample 'scales', Slice
 * starts/ends/axes, ...) become constant inputs, so kernels see one form
 * (the form of opset 21; onnx/normalize.c holds the table of every version
 * change from opset 1 on).  float16 and bfloat16 weights and inputs keep
 * their type and are read by nodes through a Cast to float32 the importer
 * adds; an output declared half precision gets a Cast back.
 *
 * ABI rule: the structs below are public by value (users walk g->values
 * and g->nodes), so changing one's layout (a member added, removed,
 * resized or moved) changes the soname: bump hpdlf_soversion in
 * meson.build and record the ABI in hpdlf.abi (tests/api/check_abi.py fails
 * until both are done).  The same holds for every public struct and enum.
 */
#ifndef HPDLF_GRAPH_H
#define HPDLF_GRAPH_H

#include <stddef.h>
#include <stdint.h>

#include "hpdlf/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

enum hp_attr_type {
	HP_ATTR_FLOAT = 1,
	HP_ATTR_INT = 2,
	HP_ATTR_STRING = 3,
	HP_ATTR_TENSOR = 4,
	HP_ATTR_FLOATS = 6,
	HP_ATTR_INTS = 7,
	HP_ATTR_STRINGS = 8,
};

struct hp_attr {
	char *name;
	enum hp_attr_type type;
	int64_t i;
	float f;
	char *s;           /* STRING (NUL-terminated; bytes may contain NUL: see slen) */
	size_t slen;
	int64_t *ints;     /* INTS */
	float *floats;     /* FLOATS */
	char **strings;    /* STRINGS */
	int n;             /* element count of INTS/FLOATS/STRINGS */
	struct hp_tensor t; /* TENSOR (data owned by the graph) */
};

/* Where an initializer's bytes live. */
enum hp_blob_kind {
	HP_BLOB_NONE = 0,
	HP_BLOB_FILE = 1,   /* raw little-endian bytes at offset in a file */
	HP_BLOB_MEMORY = 2, /* already in graph-owned memory (value->data) */
};

struct hp_blob {
	enum hp_blob_kind kind;
	int file;          /* index into hp_graph.files */
	uint64_t offset;
	uint64_t length;
};

enum hp_value_kind {
	HP_VALUE_INPUT = 1,        /* graph input fed by the user */
	HP_VALUE_INITIALIZER = 2,  /* weight from the model */
	HP_VALUE_CONSTANT = 3,     /* Constant node or folded: data is set */
	HP_VALUE_ACTIVATION = 4,   /* produced by a node at run time */
};

struct hp_value {
	char *name;
	enum hp_value_kind kind;
	enum hp_dtype dtype;
	struct hp_shape shape;     /* -1 dims until inference resolves them */
	char *dim_param[HP_MAX_RANK]; /* symbolic dim names from the model, or NULL */
	void *data;                /* materialized constant data, graph-owned, or NULL */
	struct hp_blob src;        /* initializer bytes not yet materialized */
	int producer;              /* node index, -1 if none */
	int nconsumers;            /* number of (node, slot) uses */
	int is_output;             /* a graph output */
	int trainable;             /* initializer that training updates */
	int next;                  /* run-to-run state (weights, optimizer moments, BN running
				    * stats): after each run this value takes the contents of
				    * value `next`, which lives to the end of the run; -1: none.
				    * An initializer without bytes (src.kind NONE) starts zeroed. */
	int part_of;               /* a block of a partitioned weight (exec/split_weight.c): this
				    * value's bytes are those of value part_of from byte
				    * part_offset on; part_of keeps the whole's name and shape
				    * but no uses.  -1: none */
	uint64_t part_offset;
};

struct hp_node {
	char *name;
	char *op_type;
	char *domain;              /* "" for ai.onnx */
	const struct hp_op *op;    /* resolved by hp_graph_infer */
	int ninputs, noutputs;
	int *inputs;               /* value indices; -1 for an omitted optional input */
	int *outputs;              /* value indices; -1 for an omitted optional output */
	int nattrs;
	struct hp_attr *attrs;
	void *priv;                /* op parameters set by op->prepare (freed by op->release or free()) */
	size_t workspace;          /* scratch bytes the kernel needs, set by prepare */
	int folded;                /* outputs were computed at compile time */
	int sched;                 /* ordering hint (0: none): among ready nodes the topological
				    * sort takes smaller hints first, e.g. band i + 1 of a split
				    * operator, so that bands run depth first; a node that reads
				    * a value and writes its next version (an optimizer update)
				    * waits for the value's other readers, unless its hint is
				    * HP_SCHED_EAGER */
};

/* A node's sched hint: run first among ready nodes, and, writing a
 * value's next version, as soon as its inputs are there (before the
 * value's other readers: the old version and the new one both held). */
#define HP_SCHED_EAGER (-2)

struct hp_graph {
	char *path;                /* model file */
	int64_t opset;             /* ai.onnx opset version */
	char *producer;            /* producer_name */
	int nvalues, nnodes;
	struct hp_value *values;
	struct hp_node *nodes;     /* topologically sorted */
	int ninputs, noutputs;
	int *inputs;               /* user-fed values, in model order */
	int *outputs;              /* graph outputs, in model order */
	int nfiles;
	char **files;              /* files blobs refer to: [0] the model, then external data */
	int values_cap, nodes_cap; /* internal growth */
};

/* ---- the operator contract ------------------------------------------------
 * What a node's op points at.  kernels/ implements it (hp_op_find in
 * hpdlf/kernels.h); the IR declares it because a node owns the state its
 * op prepared and hp_graph_free releases it through op->release. */

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
	HP_OP_STATE_INPLACE = 1u << 3, /* elementwise: an output that is an input's next
					* version (hp_value.next) may alias that input */
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

/* Helper for prepare functions: record "MODEL: node 'NAME' (OP): message". */
int hp_node_error(const struct hp_graph *g, const struct hp_node *n, int err, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

/* ---- loading, inference, building ------------------------------------- */

/* Import an ONNX model (any opset 1..21 of ai.onnx, IR versions 3..10). Errors: -ENOENT etc. for
 * I/O, HP_EMODEL for malformed protobuf or graph, HP_EUNSUPPORTED. */
int hp_graph_load(const char *path, struct hp_graph **out);
/* Same from a memory buffer; `base_dir` resolves external data (may be NULL). */
int hp_graph_load_buffer(const void *buf, size_t len, const char *name, const char *base_dir,
			 struct hp_graph **out);
void hp_graph_free(struct hp_graph *g);

int hp_graph_find_value(const struct hp_graph *g, const char *name); /* index or -1 */
/* Fix the shape of a graph input with dynamic dims (checked against known
 * dims; an input no node reads keeps a static declared shape and takes any). */
int hp_graph_set_input_shape(struct hp_graph *g, const char *name, const struct hp_shape *s);
/* Turn graph input `name` into a compile-time constant holding a copy of t
 * (dtype and shape must fit the input).  For shape arguments that a model
 * takes as inputs (Reshape's shape, Expand's shape...): the nodes reading it
 * then fold.  The input leaves g->inputs.  An initializer (IR < 4 models
 * list their weights among the graph inputs) takes t's contents instead of
 * its own and stays an initializer; dtype and shape must be its own. */
int hp_graph_bind_input(struct hp_graph *g, const char *name, const struct hp_tensor *t);
/* Shape/dtype inference over all nodes plus constant folding of everything
 * computable from constants (PyTorch's Shape->Gather->Concat->Reshape chains).
 * Every input shape must be concrete; errors name node and op. */
int hp_graph_infer(struct hp_graph *g);

/* Copy an initializer's bytes (hp_tensor_bytes of its dtype/shape) into dst,
 * converting typed-field storage; works for HP_BLOB_FILE and MEMORY. */
int hp_graph_read_init(const struct hp_graph *g, int value, void *dst);

/* Attribute lookup; NULL if absent. */
const struct hp_attr *hp_node_attr(const struct hp_node *n, const char *name);
int64_t hp_attr_int(const struct hp_node *n, const char *name, int64_t dflt);
float hp_attr_float(const struct hp_node *n, const char *name, float dflt);
const char *hp_attr_string(const struct hp_node *n, const char *name, const char *dflt);
/* INTS attribute: count, or -1 if absent; *v points into the graph. */
int hp_attr_ints(const struct hp_node *n, const char *name, const int64_t **v);

/* Graph building (used by the importer, autodiff and tests). Returns the new
 * index or a negative error. Names are copied. */
int hp_graph_add_value(struct hp_graph *g, const char *name, enum hp_value_kind kind,
		       enum hp_dtype dtype, const struct hp_shape *shape);
int hp_graph_add_node(struct hp_graph *g, const char *name, const char *op_type, int ninputs,
		      const int *inputs, int noutputs, const int *outputs);
/* Attach a copy of an attribute to node `node`. */
int hp_graph_add_attr(struct hp_graph *g, int node, const struct hp_attr *a);
/* Remove node i and free what it owns; later nodes move down one index
 * (hp_graph_finalize recounts producers and consumers). */
void hp_graph_remove_node(struct hp_graph *g, int i);
struct hp_graph *hp_graph_new(const char *name);
/* Re-sort nodes topologically and recount consumers/producers. */
int hp_graph_finalize(struct hp_graph *g);

/* ---- the model file's own fields ------------------------------------------ */

/* What a ModelProto says about itself (hpdlf-exec --info). */
struct hp_model_info {
	size_t size;               /* sizeof the struct the caller knows (growth) */
	int64_t ir_version;        /* 0: not given */
	int64_t opset;             /* ai.onnx opset imported (1 for IR 1-2 models); 0: none */
	int ndomains;              /* other operator domains imported (at most 8 listed) */
	char domains[8][64];
	int64_t domain_versions[8];
	char producer[64];
	char producer_version[32];
};

/* Read those fields from the top level of the file (the graph is not
 * read).  Set info->size first. */
int hp_model_info(const char *path, struct hp_model_info *info);

#ifdef __cplusplus
}
#endif
#endif
