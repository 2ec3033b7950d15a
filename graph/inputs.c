/* Fixing a graph's inputs: concrete shapes for dynamic dims, or inputs bound
 * to constants before inference. */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "hpdlf/error.h"
#include "hpdlf/graph.h"

/* An input no node reads (CastLike's `like` once it became a Cast, an
 * exporter's leftover): whatever it is given is ignored. */
static int unread(const struct hp_value *v)
{
	return v->kind == HP_VALUE_INPUT && !v->nconsumers && !v->is_output;
}

int hp_graph_set_input_shape(struct hp_graph *g, const char *name, const struct hp_shape *s)
{
	int v = hp_graph_find_value(g, name);
	struct hp_value *val;
	char want[128], got[128];

	if (v < 0 || g->values[v].kind != HP_VALUE_INPUT)
		return hp_error(HP_EUSAGE, "%s: no graph input named '%s'", g->path, name);
	val = &g->values[v];
	if (unread(val) && val->shape.rank >= 0 && hp_shape_numel(&val->shape) >= 0)
		return 0; /* its declared shape stands */
	hp_shape_str(&val->shape, want, sizeof want);
	hp_shape_str(s, got, sizeof got);
	if (hp_shape_bytes(s, val->dtype) == -2)
		return hp_error(HP_ESHAPE, "%s: input '%s' of shape %s would exceed %" PRIu64 " TiB", g->path, name,
				got, HP_TENSOR_MAX_BYTES >> 40);
	if (val->shape.rank >= 0 && val->shape.rank != s->rank)
		return hp_error(HP_ESHAPE, "%s: input '%s' has shape %s, given %s (rank %d, expected %d)", g->path,
				name, want, got, s->rank, val->shape.rank);
	for (int i = 0; val->shape.rank >= 0 && i < s->rank; i++)
		if (val->shape.dims[i] >= 0 && val->shape.dims[i] != s->dims[i])
			return hp_error(HP_ESHAPE, "%s: input '%s' has shape %s, given %s (dim %d must be %" PRId64 ")",
					g->path, name, want, got, i, val->shape.dims[i]);
	val->shape = *s;
	return 0;
}

/* An initializer given a value of its own (IR < 4 lists weights among the
 * graph inputs; ONNX Runtime lets a caller feed them): same dtype and shape,
 * and it stays an initializer (a weight, when training). */
static int bind_initializer(struct hp_graph *g, int v, const struct hp_tensor *t)
{
	struct hp_value *val = &g->values[v];
	size_t bytes = hp_tensor_bytes(t);
	char want[128], got[128];
	void *data;

	if (val->dtype != t->dtype || val->shape.rank != t->shape.rank ||
	    memcmp(val->shape.dims, t->shape.dims, (size_t)t->shape.rank * sizeof t->shape.dims[0]))
		return hp_error(HP_ESHAPE, "%s: initializer '%s' is %s %s, given %s %s", g->path, val->name,
				hp_dtype_name(val->dtype), hp_shape_str(&val->shape, want, sizeof want),
				hp_dtype_name(t->dtype), hp_shape_str(&t->shape, got, sizeof got));
	if (!(data = malloc(bytes ? bytes : 1)))
		return hp_error(-ENOMEM, "out of memory binding initializer '%s'", val->name);
	memcpy(data, t->data, bytes);
	free(val->data);
	val->data = data;
	val->src = (struct hp_blob){ .kind = HP_BLOB_MEMORY, .length = bytes };
	return 0;
}

int hp_graph_bind_input(struct hp_graph *g, const char *name, const struct hp_tensor *t)
{
	int v = hp_graph_find_value(g, name), rc;
	struct hp_value *val;
	size_t bytes = hp_tensor_bytes(t);

	if (v >= 0 && g->values[v].kind == HP_VALUE_INITIALIZER)
		return bind_initializer(g, v, t);
	if (v >= 0 && unread(&g->values[v]) && hp_shape_numel(&g->values[v].shape) >= 0)
		return 0; /* stays an input no node reads */
	rc = hp_graph_set_input_shape(g, name, &t->shape);
	if (rc < 0)
		return rc;
	val = &g->values[v];
	if (val->dtype != t->dtype && !(val->dtype == HP_BF16 && t->dtype == HP_U16)) /* bfloat16 bits */
		return hp_error(HP_ESHAPE, "%s: input '%s' is %s, given %s", g->path, name, hp_dtype_name(val->dtype),
				hp_dtype_name(t->dtype));
	val->data = malloc(bytes ? bytes : 1);
	if (!val->data)
		return hp_error(-ENOMEM, "out of memory binding input '%s'", name);
	memcpy(val->data, t->data, bytes);
	val->kind = HP_VALUE_CONSTANT;
	val->src.kind = HP_BLOB_MEMORY;
	for (int i = 0, k = 0; i < g->ninputs; i++)
		if (g->inputs[i] != v)
			g->inputs[k++] = g->inputs[i];
	g->ninputs--;
	return 0;
}
