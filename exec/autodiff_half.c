/* float16 and bfloat16 weights train in float32.
 *
 * The importer keeps a half-precision initializer's bytes and reads it
 * through a float32 Cast (onnx/half.c).  For training, each trainable one
 * becomes a float32 initializer holding its widened values (the master
 * weights the optimizer updates), and the nodes that read its Cast read it
 * directly; the Cast goes.  The export writes such a weight back in the
 * type the model declares (onnx/export.c rounds to nearest even). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "hpdlf/error.h"
#include "exec/autodiff_internal.h"
#include "kernels/shape_util.h"

static int is_half(enum hp_dtype t)
{
	return t == HP_F16 || t == HP_BF16;
}

static int widen(struct hp_graph *g, int v)
{
	struct hp_value *val = &g->values[v];
	int64_t n = hp_shape_numel(&val->shape);
	uint16_t *h = malloc((size_t)n * sizeof *h + 2);
	float *f = malloc((size_t)n * sizeof *f + 4);
	int rc = h && f ? hp_graph_read_init(g, v, h) : hp_error(-ENOMEM, "out of memory widening '%s'", val->name);

	for (int64_t i = 0; rc == 0 && i < n; i++)
		f[i] = val->dtype == HP_F16 ? hpks_f16_to_f32(h[i]) : hpks_bf16_to_f32(h[i]);
	free(h);
	if (rc < 0) {
		free(f);
		return rc;
	}
	free(val->data);
	val->data = f;
	val->dtype = HP_F32;
	val->src = (struct hp_blob){ .kind = HP_BLOB_MEMORY, .length = (uint64_t)n * sizeof *f };
	return 0;
}

static int is_output(const struct hp_graph *g, int v)
{
	for (int i = 0; i < g->noutputs; i++)
		if (g->outputs[i] == v)
			return 1;
	return 0;
}

/* Readers of Cast(v -> float32) read v; the Cast goes (kept, now a no-op,
 * if its output is a graph output). */
static void bypass_casts(struct hp_graph *g, int v)
{
	for (int i = g->nnodes - 1; i >= 0; i--) {
		const struct hp_node *c = &g->nodes[i];
		int out = c->noutputs == 1 ? c->outputs[0] : -1;
		if (strcmp(c->op_type, "Cast") || c->domain[0] || c->ninputs != 1 || c->inputs[0] != v || out < 0 ||
		    hp_attr_int(c, "to", 0) != HP_F32)
			continue;
		for (int j = 0; j < g->nnodes; j++)
			for (int k = 0; k < g->nodes[j].ninputs; k++)
				if (g->nodes[j].inputs[k] == out)
					g->nodes[j].inputs[k] = v;
		if (!is_output(g, out))
			hp_graph_remove_node(g, i);
	}
}

int ad_widen_half(struct hp_graph *g)
{
	int any = 0, rc;

	for (int v = 0; v < g->nvalues; v++) {
		struct hp_value *val = &g->values[v];
		if (val->kind != HP_VALUE_INITIALIZER || !val->trainable || !is_half(val->dtype) || val->next >= 0)
			continue;
		if ((rc = widen(g, v)) < 0)
			return rc;
		bypass_casts(g, v);
		any = 1;
	}
	return any ? hp_graph_finalize(g) : 0;
}
