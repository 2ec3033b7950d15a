/* ONNX ModelProto -> struct hp_graph.
 *
 * Memory: the model file is walked at the wire level with pread through a
 * 64 KiB window (wire.c), never mapped or read whole.  Each initializer
 * TensorProto is read without its raw_data field, whose byte offset in the
 * file is all that is kept (HP_BLOB_FILE): initializer bytes are not read at
 * load time (nor brought into the page cache or the RSS).  The rest of the
 * graph (nodes, attributes, inputs, outputs) is read, filtered to the fields
 * used here and decoded with the generated protobuf-c code; it is small next
 * to the weights.  Blobs are read later by hp_graph_read_init() or the store.
 * (A mapping was tried first: the kernel maps whole large folios of the page
 * cache on a fault, so touching each initializer's header put megabytes per
 * initializer in the RSS.)
 *
 * Loading from a buffer (hp_graph_load_buffer) copies embedded raw_data into
 * the graph instead, since the caller's buffer need not outlive the graph.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/file.h"
#include "hpdlf/error.h"
#include "onnx/import.h"
#include "onnx/normalize.h"
#include "onnx/wire.h"

/* ---- values by name ------------------------------------------------------ */

static uint32_t hash_name(const char *s)
{
	uint32_t h = 2166136261u;

	for (; *s; s++)
		h = (h ^ (uint8_t)*s) * 16777619u;
	return h;
}

int imp_find(const struct imp *im, const char *name)
{
	if (!im->nslots)
		return -1;
	for (uint32_t i = hash_name(name) & (im->nslots - 1);; i = (i + 1) & (im->nslots - 1)) {
		int v = im->slots[i];
		if (v < 0)
			return -1;
		if (!strcmp(im->g->values[v].name, name))
			return v;
	}
}

static void slot_put(int *slots, uint32_t nslots, const char *name, int v)
{
	uint32_t i = hash_name(name) & (nslots - 1);

	while (slots[i] >= 0)
		i = (i + 1) & (nslots - 1);
	slots[i] = v;
}

static int grow_slots(struct imp *im)
{
	uint32_t n = im->nslots ? im->nslots * 2 : 256;
	int *s;

	if (n > (1u << 30) || !(s = malloc((size_t)n * sizeof *s)))
		return hp_error(-ENOMEM, "out of memory indexing value names");
	for (uint32_t i = 0; i < n; i++)
		s[i] = -1;
	for (uint32_t i = 0; i < im->nslots; i++)
		if (im->slots[i] >= 0)
			slot_put(s, n, im->g->values[im->slots[i]].name, im->slots[i]);
	free(im->slots);
	im->slots = s;
	im->nslots = n;
	return 0;
}

int imp_add_value(struct imp *im, const char *name, enum hp_value_kind kind, enum hp_dtype dtype,
		  const struct hp_shape *shape)
{
	int v, rc;

	if (imp_find(im, name) >= 0)
		return hp_error(HP_EMODEL, "%s: value '%s' is defined twice", im->g->path, name);
	if (2 * (im->nused + 1) > im->nslots && (rc = grow_slots(im)) < 0)
		return rc;
	v = hp_graph_add_value(im->g, name, kind, dtype, shape);
	if (v < 0)
		return v;
	slot_put(im->slots, im->nslots, name, v);
	im->nused++;
	return v;
}

int imp_attach(struct imp *im, struct hp_graph *g)
{
	int rc;

	memset(im, 0, sizeof *im);
	im->g = g;
	im->in_memory = 1;
	im->src = (struct pb_src){ .fd = -1, .mem = (const uint8_t *)"", .size = 0 };
	if (!(im->file_size = calloc(1, sizeof *im->file_size)))
		return hp_error(-ENOMEM, "out of memory");
	for (int v = 0; v < g->nvalues; v++) {
		if (2 * (im->nused + 1) > im->nslots && (rc = grow_slots(im)) < 0)
			return rc;
		if (imp_find(im, g->values[v].name) >= 0)
			continue; /* the first of equal names, as on import */
		slot_put(im->slots, im->nslots, g->values[v].name, v);
		im->nused++;
	}
	return 0;
}

void imp_detach(struct imp *im)
{
	free(im->slots);
	free(im->alias);
	free(im->file_size);
	free(im->dir);
}

int imp_fresh_name(struct imp *im, const char *base, const char *suffix, char *out, size_t len)
{
	snprintf(out, len, "%s:%s", base, suffix);
	while (imp_find(im, out) >= 0)
		snprintf(out, len, "%s:%s.%d", base, suffix, ++im->serial);
	return 0;
}

int imp_add_constant(struct imp *im, const char *name, enum hp_dtype dtype, const struct hp_shape *shape,
		     void *data)
{
	int v = imp_add_value(im, name, HP_VALUE_CONSTANT, dtype, shape);

	if (v < 0) {
		free(data);
		return v;
	}
	im->g->values[v].data = data;
	im->g->values[v].src = (struct hp_blob){ .kind = HP_BLOB_MEMORY,
						 .length = hp_tensor_bytes(&(struct hp_tensor){ dtype, *shape, NULL }) };
	return v;
}

/* ---- model and graph wire walk ------------------------------------------- */

static int corrupt(struct imp *im, const char *where)
{
	return hp_error(HP_EMODEL, "%s: truncated or corrupt protobuf (%s)", im->g->path, where);
}

int imp_src_error(struct imp *im, int rc, const char *where)
{
	if (rc == -ENOMEM)
		return hp_error(rc, "%s: out of memory reading the %s", im->g->path, where);
	if (rc == -2)
		return hp_error(im->src.err, "%s: reading the %s: %s", im->g->path, where, strerror(-im->src.err));
	return corrupt(im, where);
}

static int append(struct imp *im, const struct pb_sfield *f, struct pb_buf *out, const char *where)
{
	int rc = pb_src_append(&im->src, f->start, f->next - f->start, out);

	return rc < 0 ? imp_src_error(im, rc, where) : 0;
}

/* One GraphProto occurrence: initializers are imported on the spot, the
 * fields the importer uses (node, name, input, output) are read into gr
 * (several occurrences concatenate, which is protobuf's merge). */
static int walk_graph(struct imp *im, uint64_t off, uint64_t len, struct pb_buf *gr)
{
	uint64_t pos = off;
	struct pb_sfield f;
	int rc;

	while ((rc = pb_src_next(&im->src, &pos, off + len, &f)) > 0) {
		if (f.num == 5 && f.wt == PB_LEN)
			rc = imp_initializer(im, f.off, f.len);
		else if (f.num == 5)
			rc = corrupt(im, "initializer");
		else if (f.num == 15)
			rc = hp_error(HP_EUNSUPPORTED, "%s: sparse initializers are not supported", im->g->path);
		else if (f.num == 1 || f.num == 2 || f.num == 11 || f.num == 12)
			rc = append(im, &f, gr, "graph");
		if (rc < 0)
			return rc;
	}
	return rc < 0 ? imp_src_error(im, rc, "graph") : 0;
}

static int unpack(struct imp *im, struct pb_buf *raw, enum pb_msg kind, void **out)
{
	struct pb_buf fb = { 0 };
	const char *where = kind == PB_MSG_MODEL ? "model" : "graph";
	int rc = pb_filter(raw->p ? raw->p : (const uint8_t *)"", raw->len, kind, &fb);

	if (rc < 0)
		rc = rc == -ENOMEM ? hp_error(rc, "out of memory") : corrupt(im, where);
	else if (kind == PB_MSG_MODEL)
		*out = onnx__model_proto__unpack(NULL, fb.len, fb.p ? fb.p : (const uint8_t *)"");
	else
		*out = onnx__graph_proto__unpack(NULL, fb.len, fb.p ? fb.p : (const uint8_t *)"");
	if (rc == 0 && !*out)
		rc = corrupt(im, where);
	pb_buf_free(&fb);
	return rc;
}

static int read_model(struct imp *im, Onnx__ModelProto **model, Onnx__GraphProto **graph)
{
	struct pb_buf mr = { 0 }, gr = { 0 };
	struct pb_sfield f;
	uint64_t pos = 0;
	int rc, ngraphs = 0;

	while ((rc = pb_src_next(&im->src, &pos, im->src.size, &f)) > 0) {
		if (f.num == 7 && f.wt == PB_LEN) {
			rc = walk_graph(im, f.off, f.len, &gr);
			ngraphs++;
		} else if (f.num == 7) {
			rc = corrupt(im, "model");
		} else if ((f.num >= 1 && f.num <= 5) || f.num == 8) {
			rc = append(im, &f, &mr, "model"); /* doc_string, functions, ... are skipped unread */
		}
		if (rc < 0)
			goto out;
	}
	if (rc < 0) {
		rc = imp_src_error(im, rc, "model");
		goto out;
	}
	if (!ngraphs) {
		rc = hp_error(HP_EMODEL, "%s: not an ONNX model (no graph)", im->g->path);
		goto out;
	}
	rc = unpack(im, &mr, PB_MSG_MODEL, (void **)model);
	if (rc == 0)
		rc = unpack(im, &gr, PB_MSG_GRAPH, (void **)graph);
out:
	pb_buf_free(&mr);
	pb_buf_free(&gr);
	return rc;
}

static int is_default_domain(const char *d)
{
	return !d || !*d || !strcmp(d, "ai.onnx");
}

/* Does any node use the default domain?  (Opset imports of domains no node
 * uses are ignored: exporters declare ai.onnx.ml and others out of habit.) */
static int uses_default_domain(const Onnx__GraphProto *gp)
{
	for (size_t i = 0; i < gp->n_node; i++)
		if (is_default_domain(gp->node[i]->domain))
			return 1;
	return 0;
}

static int set_opset(struct imp *im, const Onnx__ModelProto *m, const Onnx__GraphProto *gp)
{
	int found = 0;

	im->ir_version = m->has_ir_version ? m->ir_version : 0;
	for (size_t i = 0; i < m->n_opset_import; i++) {
		const char *d = m->opset_import[i]->domain;
		if (is_default_domain(d)) {
			im->g->opset = m->opset_import[i]->version;
			found = 1;
		}
	}
	/* IR versions 1 and 2 had no opset_import: their operators are opset 1 */
	if (!found && !m->n_opset_import && im->ir_version && im->ir_version < 3) {
		im->g->opset = 1;
		found = 1;
	}
	if (!found && uses_default_domain(gp))
		return hp_error(HP_EMODEL, "%s: the model uses ai.onnx operators but imports no ai.onnx opset", im->g->path);
	if (!found)
		im->g->opset = IMP_OPSET_MAX; /* no ai.onnx node: the opset says nothing */
	if (im->g->opset < IMP_OPSET_MIN || im->g->opset > IMP_OPSET_MAX)
		return hp_error(HP_EUNSUPPORTED, "%s: opset %" PRId64 " of ai.onnx is not supported (%d..%d); convert the "
				"model with onnx.version_converter.convert_version(model, %d)", im->g->path,
				im->g->opset, IMP_OPSET_MIN, IMP_OPSET_MAX,
				im->g->opset > IMP_OPSET_MAX ? IMP_OPSET_MAX : IMP_OPSET_MIN);
	if (m->producer_name) {
		char *p = strdup(m->producer_name);
		if (!p)
			return hp_error(-ENOMEM, "out of memory");
		free(im->g->producer);
		im->g->producer = p;
	}
	return 0;
}

/* ---- graph inputs and outputs --------------------------------------------- */

static int input_type(struct imp *im, const Onnx__ValueInfoProto *vi, enum hp_dtype *dtype, struct hp_shape *shape,
		      char **params)
{
	const Onnx__TypeProto *tp = vi->type;
	const Onnx__TypeProto__Tensor *tt;

	if (!tp || tp->value_case != ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE || !tp->tensor_type)
		return hp_error(HP_EUNSUPPORTED, "%s: input '%s' is not a tensor (sequences, maps, optionals are not supported)",
				im->g->path, vi->name);
	tt = tp->tensor_type;
	*dtype = tt->has_elem_type ? (enum hp_dtype)tt->elem_type : HP_UNDEFINED;
	if (!imp_dtype_supported(*dtype))
		return hp_error(HP_EUNSUPPORTED, "%s: input '%s' has element type %s, not supported (" IMP_SUPPORTED_LIST ")",
				im->g->path, vi->name, imp_dtype_name(*dtype));
	shape->rank = -1;
	if (!tt->shape)
		return 0;
	if (tt->shape->n_dim > HP_MAX_RANK)
		return hp_error(HP_EUNSUPPORTED, "%s: input '%s' has rank %zu, more than the %d supported", im->g->path,
				vi->name, tt->shape->n_dim, HP_MAX_RANK);
	shape->rank = (int)tt->shape->n_dim;
	for (int d = 0; d < shape->rank; d++) {
		const Onnx__TensorShapeProto__Dimension *dim = tt->shape->dim[d];
		shape->dims[d] = -1;
		if (dim->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE) {
			if (dim->dim_value < 0)
				return hp_error(HP_EMODEL, "%s: input '%s' has negative dim %" PRId64, im->g->path,
						vi->name, dim->dim_value);
			shape->dims[d] = dim->dim_value;
		} else if (dim->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM && dim->dim_param &&
			   dim->dim_param[0]) {
			params[d] = dim->dim_param;
		}
	}
	return 0;
}

static int add_inputs(struct imp *im, const Onnx__GraphProto *gp)
{
	struct hp_graph *g = im->g;

	g->inputs = calloc(gp->n_input + 1, sizeof *g->inputs);
	if (!g->inputs)
		return hp_error(-ENOMEM, "out of memory");
	for (size_t i = 0; i < gp->n_input; i++) {
		const Onnx__ValueInfoProto *vi = gp->input[i];
		char *params[HP_MAX_RANK] = { 0 };
		struct hp_shape shape = { 0 };
		enum hp_dtype dtype = HP_UNDEFINED;
		int v = vi->name ? imp_find(im, vi->name) : -1, rc;

		if (!vi->name || !vi->name[0])
			return hp_error(HP_EMODEL, "%s: graph input %zu has no name", g->path, i);
		if (v >= 0 && g->values[v].kind == HP_VALUE_INITIALIZER)
			continue; /* an initializer listed as input: it keeps its weight */
		if (v >= 0)
			return hp_error(HP_EMODEL, "%s: graph input '%s' is listed twice", g->path, vi->name);
		rc = input_type(im, vi, &dtype, &shape, params);
		if (rc < 0)
			return rc;
		v = imp_add_value(im, vi->name, HP_VALUE_INPUT, dtype, &shape);
		if (v < 0)
			return v;
		for (int d = 0; d < shape.rank; d++)
			if (params[d] && !(g->values[v].dim_param[d] = strdup(params[d])))
				return hp_error(-ENOMEM, "out of memory");
		g->inputs[g->ninputs++] = v;
	}
	return 0;
}

static int add_outputs(struct imp *im, const Onnx__GraphProto *gp)
{
	struct hp_graph *g = im->g;

	g->outputs = calloc(gp->n_output + 1, sizeof *g->outputs);
	if (!g->outputs)
		return hp_error(-ENOMEM, "out of memory");
	for (size_t i = 0; i < gp->n_output; i++) {
		const Onnx__ValueInfoProto *vi = gp->output[i];
		const char *name = vi->name ? vi->name : "";
		int v = imp_find(im, name);

		if (v < 0)
			return hp_error(HP_EMODEL, "%s: graph output '%s' is not produced by any node or initializer", g->path,
					name);
		if (vi->type && vi->type->value_case == ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE && vi->type->tensor_type &&
		    vi->type->tensor_type->has_elem_type &&
		    (v = imp_narrow_output(im, v, (enum hp_dtype)vi->type->tensor_type->elem_type)) < 0)
			return v;
		g->outputs[g->noutputs++] = v;
		g->values[v].is_output = 1;
	}
	return 0;
}

/* ---- nodes ---------------------------------------------------------------- */

/* Every node output becomes a value before any input is resolved, so nodes
 * may come in any order (the graph is sorted afterwards). */
static int declare_outputs(struct imp *im, const Onnx__GraphProto *gp)
{
	for (size_t i = 0; i < gp->n_node; i++) {
		const Onnx__NodeProto *n = gp->node[i];
		for (size_t o = 0; o < n->n_output; o++) {
			const char *name = n->output[o];
			int v;

			if (!name || !*name)
				continue;
			v = imp_find(im, name);
			if (v >= 0)
				return hp_error(HP_EMODEL, "%s: node '%s' (%s): output '%s' is already %s", im->g->path,
						n->name ? n->name : "", n->op_type ? n->op_type : "?", name,
						im->g->values[v].kind == HP_VALUE_ACTIVATION ? "produced by another node"
						: im->g->values[v].kind == HP_VALUE_INPUT ? "a graph input"
											  : "an initializer");
			v = imp_add_value(im, name, HP_VALUE_ACTIVATION, HP_UNDEFINED, NULL);
			if (v < 0)
				return v;
		}
	}
	return 0;
}

static void attr_free(struct hp_attr *a)
{
	free(a->name);
	free(a->s);
	free(a->ints);
	free(a->floats);
	for (int i = 0; a->strings && i < a->n; i++)
		free(a->strings[i]);
	free(a->strings);
	free(a->t.data);
	memset(a, 0, sizeof *a);
}

static void node_free(struct imp_node *n)
{
	for (int i = 0; i < n->nattrs; i++)
		attr_free(&n->attrs[i]);
	free(n->attrs);
	free(n->drop);
	free(n->inputs);
}

int imp_node_add_attr(struct imp_node *n, const struct hp_attr *a)
{
	if (n->nattrs >= n->attrs_cap)
		return hp_error(HP_EINTERNAL, "node '%s': no room for attribute '%s'", n->name, a->name);
	n->attrs[n->nattrs] = *a;
	n->drop[n->nattrs++] = 0;
	return 0;
}

static char *bytes_dup(const ProtobufCBinaryData *b)
{
	char *s = malloc(b->len + 1);

	if (s) {
		if (b->len)
			memcpy(s, b->data, b->len);
		s[b->len] = 0;
	}
	return s;
}

static int attr_type(const Onnx__AttributeProto *a)
{
	if (a->has_type && a->type)
		return a->type;
	/* IR v1 models carry no type: tell it by the field that is set */
	if (a->has_f)
		return HP_ATTR_FLOAT;
	if (a->has_i)
		return HP_ATTR_INT;
	if (a->has_s)
		return HP_ATTR_STRING;
	if (a->t)
		return HP_ATTR_TENSOR;
	if (a->n_floats)
		return HP_ATTR_FLOATS;
	if (a->n_ints)
		return HP_ATTR_INTS;
	if (a->n_strings)
		return HP_ATTR_STRINGS;
	return 0;
}

static int attr_lists(const Onnx__AttributeProto *a, struct hp_attr *out)
{
	size_t n = out->type == HP_ATTR_FLOATS ? a->n_floats : out->type == HP_ATTR_INTS ? a->n_ints : a->n_strings;

	if (n > INT_MAX / 8)
		return -ENOMEM;
	out->n = (int)n;
	if (out->type == HP_ATTR_FLOATS && !(out->floats = malloc(n * sizeof(float) + 1)))
		return -ENOMEM;
	if (out->type == HP_ATTR_INTS && !(out->ints = malloc(n * sizeof(int64_t) + 1)))
		return -ENOMEM;
	if (out->type == HP_ATTR_STRINGS && !(out->strings = calloc(n + 1, sizeof(char *))))
		return -ENOMEM;
	for (size_t i = 0; i < n; i++) {
		if (out->type == HP_ATTR_FLOATS)
			out->floats[i] = a->floats[i];
		else if (out->type == HP_ATTR_INTS)
			out->ints[i] = a->ints[i];
		else if (!(out->strings[i] = bytes_dup(&a->strings[i])))
			return -ENOMEM;
	}
	return 0;
}

static int attr_value(struct imp *im, const char *where, const Onnx__AttributeProto *a, struct hp_attr *out)
{
	int type = attr_type(a), rc = 0;

	if (!a->name || !a->name[0])
		return hp_error(HP_EMODEL, "%s: %s: an attribute has no name", im->g->path, where);
	if (type == ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__GRAPH || type == ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__GRAPHS)
		return hp_error(HP_EUNSUPPORTED, "%s: %s: attribute '%s' is a subgraph; control flow (If, Loop, Scan) is not supported",
				im->g->path, where, a->name);
	if (type < HP_ATTR_FLOAT || type > HP_ATTR_STRINGS || type == 5)
		return hp_error(HP_EUNSUPPORTED, "%s: %s: attribute '%s' has type %d, not supported (float, int, string, tensor and their lists)",
				im->g->path, where, a->name, type);
	out->type = (enum hp_attr_type)type;
	if (!(out->name = strdup(a->name)))
		return hp_error(-ENOMEM, "out of memory");
	out->f = a->f;
	out->i = a->i;
	if (type == HP_ATTR_STRING) {
		out->slen = a->s.len;
		if (!(out->s = bytes_dup(&a->s)))
			rc = -ENOMEM;
	} else if (type == HP_ATTR_TENSOR) {
		struct imp_raw raw = { .present = a->t && a->t->has_raw_data,
				       .p = a->t && a->t->raw_data.data ? a->t->raw_data.data : (const uint8_t *)"",
				       .len = a->t ? a->t->raw_data.len : 0 };
		char what[320];

		snprintf(what, sizeof what, "%s: attribute '%s'", where, a->name);
		if (!a->t)
			return hp_error(HP_EMODEL, "%s: %s has no tensor", im->g->path, what);
		return imp_tensor_load(im, a->t, &raw, what, &out->t);
	} else if (type >= HP_ATTR_FLOATS) {
		rc = attr_lists(a, out);
	}
	return rc < 0 ? hp_error(-ENOMEM, "out of memory") : 0;
}

/* One AttributeProto as an hp_attr; on failure *out holds nothing. */
static int convert_attr(struct imp *im, const char *where, const Onnx__AttributeProto *a, struct hp_attr *out)
{
	int rc;

	memset(out, 0, sizeof *out);
	rc = attr_value(im, where, a, out);
	if (rc < 0)
		attr_free(out);
	return rc;
}

/* A Constant node becomes a constant value; the node itself is dropped. */
static int constant_node(struct imp *im, const Onnx__NodeProto *n, const char *where)
{
	struct hp_value *v;
	struct hp_attr a;
	struct hp_tensor t = { 0 };
	int idx = n->n_output && n->output[0] ? imp_find(im, n->output[0]) : -1, rc;

	if (n->n_attribute != 1)
		return hp_error(HP_EMODEL, "%s: %s: needs exactly one value attribute, has %zu", im->g->path, where,
				n->n_attribute);
	rc = convert_attr(im, where, n->attribute[0], &a);
	if (rc < 0)
		return rc;
	if (!strcmp(a.name, "value") && a.type == HP_ATTR_TENSOR) {
		t = a.t;
		a.t.data = NULL;
	} else if ((!strcmp(a.name, "value_float") && a.type == HP_ATTR_FLOAT) ||
		   (!strcmp(a.name, "value_int") && a.type == HP_ATTR_INT)) {
		t.dtype = a.type == HP_ATTR_FLOAT ? HP_F32 : HP_I64;
		if ((t.data = malloc(8)) && a.type == HP_ATTR_FLOAT)
			memcpy(t.data, &a.f, 4);
		else if (t.data)
			memcpy(t.data, &a.i, 8);
	} else if ((!strcmp(a.name, "value_floats") && a.type == HP_ATTR_FLOATS) ||
		   (!strcmp(a.name, "value_ints") && a.type == HP_ATTR_INTS)) {
		t.dtype = a.type == HP_ATTR_FLOATS ? HP_F32 : HP_I64;
		t.shape = (struct hp_shape){ 1, { a.n } };
		t.data = a.type == HP_ATTR_FLOATS ? (void *)a.floats : (void *)a.ints;
		a.floats = NULL;
		a.ints = NULL;
		if (!t.data)
			t.data = malloc(1);
	} else {
		rc = hp_error(HP_EUNSUPPORTED, "%s: %s: attribute '%s' is not supported (value, value_float(s), value_int(s))",
			      im->g->path, where, a.name);
		attr_free(&a);
		return rc;
	}
	attr_free(&a);
	if (!t.data)
		return hp_error(-ENOMEM, "out of memory");
	if ((rc = imp_tensor_widen(im, &t, where)) < 0) {
		free(t.data);
		return rc;
	}
	if (idx < 0) {
		free(t.data);
		return 0;
	}
	v = &im->g->values[idx];
	v->kind = HP_VALUE_CONSTANT;
	v->dtype = t.dtype;
	v->shape = t.shape;
	v->data = t.data;
	v->src = (struct hp_blob){ .kind = HP_BLOB_MEMORY, .length = hp_tensor_bytes(&t) };
	return 0;
}

static int node_prepare(struct imp *im, const Onnx__NodeProto *np, const char *where, struct imp_node *n)
{
	int rc;

	if (np->n_input > INT_MAX / 8 || np->n_attribute > INT_MAX / 8 || np->n_output > INT_MAX / 8)
		return hp_error(HP_EMODEL, "%s: %s: too many inputs, outputs or attributes", im->g->path, where);
	n->inputs = malloc((np->n_input + IMP_NODE_SPARE) * sizeof *n->inputs);
	n->attrs = calloc(np->n_attribute + IMP_NODE_SPARE, sizeof *n->attrs);
	n->drop = calloc(np->n_attribute + IMP_NODE_SPARE, 1);
	if (!n->inputs || !n->attrs || !n->drop)
		return hp_error(-ENOMEM, "out of memory");
	n->noutputs = (int)np->n_output;
	n->inputs_cap = (int)np->n_input + IMP_NODE_SPARE;
	n->attrs_cap = (int)np->n_attribute + IMP_NODE_SPARE;
	for (size_t i = 0; i < np->n_input; i++) {
		const char *name = np->input[i];
		int v = name && *name ? imp_find(im, name) : -1;

		if (name && *name && v < 0)
			return hp_error(HP_EMODEL, "%s: %s: input '%s' is not defined (no graph input, initializer or node output has that name)",
					im->g->path, where, name);
		n->inputs[n->ninputs++] = v;
	}
	for (size_t i = 0; i < np->n_attribute; i++) {
		rc = convert_attr(im, where, np->attribute[i], &n->attrs[n->nattrs]);
		if (rc < 0)
			return rc;
		n->nattrs++;
	}
	return 0;
}

static int node_commit(struct imp *im, const Onnx__NodeProto *np, struct imp_node *n, const char *name)
{
	struct hp_graph *g = im->g;
	struct hp_node *hn;
	int *outs = malloc((np->n_output + 1) * sizeof *outs), idx, k = 0;

	if (!outs)
		return hp_error(-ENOMEM, "out of memory");
	for (size_t o = 0; o < np->n_output; o++)
		outs[o] = np->output[o] && *np->output[o] ? imp_find(im, np->output[o]) : -1;
	idx = hp_graph_add_node(g, name, n->op_type, n->ninputs, n->inputs, n->noutputs, outs);
	free(outs);
	if (idx < 0)
		return idx;
	hn = &g->nodes[idx];
	if (!is_default_domain(np->domain)) {
		char *d = strdup(np->domain);
		if (!d)
			return hp_error(-ENOMEM, "out of memory");
		free(hn->domain);
		hn->domain = d;
	}
	/* the kept attributes move into the node: no copies */
	for (int i = 0; i < n->nattrs; i++) {
		if (n->drop[i])
			attr_free(&n->attrs[i]);
		else
			n->attrs[k++] = n->attrs[i];
	}
	hn->attrs = n->attrs;
	hn->nattrs = k;
	n->attrs = NULL;
	n->nattrs = 0;
	return 0;
}

static int add_node(struct imp *im, const Onnx__NodeProto *np, size_t index)
{
	struct imp_node n = { 0 };
	const char *op = np->op_type ? np->op_type : "";
	char name[256], where[400];
	int rc;

	if (!*op)
		return hp_error(HP_EMODEL, "%s: node %zu has no op_type", im->g->path, index);
	if (np->name && *np->name)
		snprintf(name, sizeof name, "%s", np->name);
	else
		snprintf(name, sizeof name, "%.60s_%zu", op, index);
	snprintf(where, sizeof where, "node '%s' (%s)", name, op);
	if (is_default_domain(np->domain) && !strcmp(op, "Constant"))
		return constant_node(im, np, where);
	if (is_default_domain(np->domain) && imp_is_control(np))
		return imp_control(im, np, name);
	snprintf(n.op_type, sizeof n.op_type, "%s", op);
	n.name = name;
	rc = node_prepare(im, np, where, &n);
	if (rc == 0 && is_default_domain(np->domain))
		rc = imp_normalize(im, &n);
	/* half-precision inputs and weights are read through their float32
	 * Cast, made when a node first reads them */
	for (int i = 0; rc == 0 && i < n.ninputs; i++)
		if ((n.inputs[i] = imp_resolve(im, n.inputs[i])) < -1)
			rc = n.inputs[i];
	if (rc == 0)
		rc = node_commit(im, np, &n, name);
	node_free(&n);
	return rc;
}

int imp_add_node(struct imp *im, const Onnx__NodeProto *np, size_t index)
{
	return add_node(im, np, index);
}

/* Unsupported initializer dtypes fail only when something uses them. */
static int check_used(struct imp *im)
{
	struct hp_graph *g = im->g;

	for (int v = 0; v < g->nvalues; v++) {
		const struct hp_value *val = &g->values[v];
		if (val->kind == HP_VALUE_INITIALIZER && !imp_dtype_supported(val->dtype) &&
		    (val->nconsumers || val->is_output))
			return hp_error(HP_EUNSUPPORTED, "%s: initializer '%s' has dtype %s, not supported (" IMP_SUPPORTED_LIST ")",
					g->path, val->name, imp_dtype_name(val->dtype));
	}
	return 0;
}

static int build(struct imp *im)
{
	Onnx__ModelProto *m = NULL;
	Onnx__GraphProto *gp = NULL;
	int rc = read_model(im, &m, &gp);

	if (rc == 0)
		rc = set_opset(im, m, gp);
	if (rc == 0)
		rc = add_inputs(im, gp);
	if (rc == 0)
		rc = declare_outputs(im, gp);
	for (size_t i = 0; rc == 0 && i < gp->n_node; i++)
		rc = add_node(im, gp->node[i], i);
	if (rc == 0)
		rc = add_outputs(im, gp);
	if (rc == 0)
		rc = hp_graph_finalize(im->g);
	if (rc == 0)
		rc = check_used(im);
	if (m)
		onnx__model_proto__free_unpacked(m, NULL);
	if (gp)
		onnx__graph_proto__free_unpacked(gp, NULL);
	return rc;
}

static int import(struct imp *im, const char *name, struct hp_graph **out)
{
	int rc;

	*out = NULL;
	im->g = hp_graph_new(name);
	im->file_size = calloc(1, sizeof *im->file_size);
	if (!im->g || !im->file_size || !(im->g->files = calloc(1, sizeof *im->g->files)) ||
	    !(im->g->files[0] = strdup(name))) {
		rc = hp_error(-ENOMEM, "out of memory");
		goto out;
	}
	im->g->nfiles = 1;
	im->file_size[0] = im->src.size;
	rc = build(im);
out:
	free(im->slots);
	free(im->alias);
	free(im->file_size);
	free(im->dir);
	if (rc < 0)
		hp_graph_free(im->g);
	else
		*out = im->g;
	return rc;
}

int hp_graph_load_buffer(const void *buf, size_t len, const char *name, const char *base_dir,
			 struct hp_graph **out)
{
	struct imp im = { .in_memory = 1 };

	if (!out || (!buf && len))
		return hp_error(HP_EUSAGE, "hp_graph_load_buffer: NULL argument");
	if (!name)
		name = "model";
	if (base_dir && !(im.dir = strdup(base_dir)))
		return hp_error(-ENOMEM, "out of memory");
	im.src = (struct pb_src){ .fd = -1, .mem = buf ? buf : (const uint8_t *)"", .size = len };
	return import(&im, name, out);
}

static char *dir_of(const char *path)
{
	const char *slash = strrchr(path, '/');

	if (!slash)
		return strdup(".");
	if (slash == path)
		return strdup("/");
	return strndup(path, (size_t)(slash - path));
}

int hp_graph_load(const char *path, struct hp_graph **out)
{
	struct imp im = { 0 };
	struct stat st;
	int fd, rc;

	if (!path || !out)
		return hp_error(HP_EUSAGE, "hp_graph_load: NULL argument");
	*out = NULL;
	rc = hp_open_regular(path, NULL, &fd, &st);
	if (rc < 0)
		return rc;
	if (st.st_size == 0) {
		rc = hp_error(HP_EMODEL, "%s: empty file, not an ONNX model", path);
		goto out;
	}
	im.src = (struct pb_src){ .fd = fd, .size = (uint64_t)st.st_size, .win = malloc(PB_WINDOW) };
	im.dir = dir_of(path);
	if (!im.src.win || !im.dir) {
		free(im.dir);
		rc = hp_error(-ENOMEM, "out of memory");
		goto out;
	}
	rc = import(&im, path, out);
out:
	free(im.src.win);
	close(fd);
	return rc;
}
