/* Which float tensors training updates.
 *
 * Initializers are parameters.  So are float tensors that exporters
 * (Paddle2ONNX, tf2onnx) write as Constant nodes when they reach a
 * parameter slot of an operator (a Conv's weight, a BatchNorm's scale or
 * statistics, a bias added to a MatMul...) directly or through Identity
 * nodes: such a Constant becomes an initializer holding its value, and the
 * Identity chain is bypassed, so the rest of training (BatchNorm state,
 * export) treats both writings alike.  Constants elsewhere (a scale of 0.5,
 * shape arithmetic) stay constants, and so do the scale of ones and bias
 * of zeros of a GroupNorm decomposed through InstanceNormalization, and
 * every Constant of a PyTorch export (its parameters are initializers).
 * Parameters and running statistics
 * an exporter merged (Identity of another initializer of equal value) are
 * untied here, before anything cuts the graph (autodiff_untie.c: a
 * pipeline stage would otherwise receive LayerNorm 2's weight from stage 0
 * as an activation and train it tied to LayerNorm 1's; an evaluation graph
 * would read the root's trained bytes).  Then --freeze patterns clear the
 * trainable flag of the parameters they name. */
#include <errno.h>
#include <fnmatch.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hpdlf/error.h"
#include "exec/autodiff_internal.h"
#include "exec/train_params.h"

/* Input slots of an operator that hold parameters (bit i: input i); `big`:
 * only vectors count (a bias, not a factor of 0.5 nor a mask). */
static const struct {
	const char *op;
	unsigned slots;
	int big;
} param_slots[] = {
	{ "Conv", 0x6, 0 }, { "ConvTranspose", 0x6, 0 }, { "Gemm", 0x7, 0 }, { "MatMul", 0x3, 0 },
	{ "BatchNormalization", 0x1e, 0 }, { "InstanceNormalization", 0x6, 0 }, { "LayerNormalization", 0x6, 0 },
	{ "GroupNormalization", 0x6, 0 }, { "PRelu", 0x2, 0 }, { "LSTM", 0x0e, 0 }, { "GRU", 0x0e, 0 },
	{ "RNN", 0x0e, 0 }, { "Add", 0x3, 1 }, { "Mul", 0x3, 1 }, { "Gather", 0x1, 0 },
};

/* A float tensor from a Constant node: constant data, no producer (not
 * folded).  The importer's own float constants (Clip bounds, Pad values,
 * Resize scales) never sit in a parameter slot. */
static int constant_tensor(const struct hp_graph *g, int v)
{
	const struct hp_value *val = v >= 0 ? &g->values[v] : NULL;

	return val && val->kind == HP_VALUE_CONSTANT && val->producer < 0 && val->data && val->dtype == HP_F32 &&
	       val->next < 0;
}

/* More than one element, all along one dim ([C], [1, C, 1, 1]). */
static int vector(const struct hp_shape *s)
{
	int big = 0;

	for (int d = 0; d < s->rank; d++)
		big += s->dims[d] > 1;
	return big == 1;
}

static int slot_is_param(const struct hp_graph *g, const struct hp_node *n, int i)
{
	if (n->domain[0])
		return 0;
	for (size_t k = 0; k < sizeof param_slots / sizeof param_slots[0]; k++) {
		if (strcmp(param_slots[k].op, n->op_type) || !(param_slots[k].slots >> i & 1))
			continue;
		if (!param_slots[k].big)
			return 1;
		/* a bias or scale vector next to a computed operand (not a mask or
		 * a table of several dims: those stay constants) */
		return vector(&g->values[n->inputs[i]].shape) && n->ninputs == 2 &&
		       g->values[n->inputs[1 - i]].kind != HP_VALUE_CONSTANT;
	}
	return 0;
}

/* Nodes reading Identity(C) (any depth) read C itself; the graph outputs
 * keep their Identity. */
static void bypass_identities(struct hp_graph *g)
{
	for (int i = 0; i < g->nnodes; i++) {
		const struct hp_node *id = &g->nodes[i];
		if (strcmp(id->op_type, "Identity") || id->domain[0] || id->ninputs != 1 || id->noutputs != 1 ||
		    id->outputs[0] < 0 || !constant_tensor(g, id->inputs[0]))
			continue;
		for (int j = i + 1; j < g->nnodes; j++)
			for (int k = 0; k < g->nodes[j].ninputs; k++)
				if (g->nodes[j].inputs[k] == id->outputs[0])
					g->nodes[j].inputs[k] = id->inputs[0];
	}
}

/* Whether every element of constant v is x. */
static int all_equal(const struct hp_value *v, float x)
{
	const float *d = v->data;

	for (int64_t i = 0; i < hp_shape_numel(&v->shape); i++)
		if (d[i] != x)
			return 0;
	return 1;
}

/* The only node reading value v, or NULL. */
static const struct hp_node *sole_consumer(const struct hp_graph *g, int v)
{
	const struct hp_node *c = NULL;

	for (int i = 0; i < g->nnodes; i++)
		for (int k = 0; k < g->nodes[i].ninputs; k++)
			if (g->nodes[i].inputs[k] == v) {
				if (c && c != &g->nodes[i])
					return NULL;
				c = &g->nodes[i];
			}
	return c;
}

/* GroupNorm as exporters decompose it (PyTorch before opset 18,
 * Paddle2ONNX): Reshape to [N, groups, -1], InstanceNormalization with a
 * scale of ones and a bias of zeros, Reshape back, then Mul and Add by
 * the real weight and bias.  That scale and bias are the decomposition's
 * identity, not parameters: training them adds a degree of freedom the
 * source model does not have (a PyTorch GroupNorm net's losses parted
 * from PyTorch's at step 2). */
static int groupnorm_identity(const struct hp_graph *g, const struct hp_node *n)
{
	const struct hp_node *next;
	int in;

	if (strcmp(n->op_type, "InstanceNormalization") || n->ninputs != 3 || n->noutputs != 1 ||
	    !constant_tensor(g, n->inputs[1]) || !constant_tensor(g, n->inputs[2]) ||
	    !all_equal(&g->values[n->inputs[1]], 1.0f) || !all_equal(&g->values[n->inputs[2]], 0.0f))
		return 0;
	in = g->values[n->inputs[0]].producer;
	next = sole_consumer(g, n->outputs[0]);
	return in >= 0 && !strcmp(g->nodes[in].op_type, "Reshape") && next && !strcmp(next->op_type, "Reshape");
}

/* PyTorch's exporter writes every parameter and buffer as an
 * initializer; its Constant nodes are its own (GroupNorm's identity
 * above, a Normalize's mean and std), which PyTorch does not train. */
static int params_are_initializers(const struct hp_graph *g)
{
	return g->producer && !strcmp(g->producer, "pytorch");
}

static int promote(struct hp_graph *g, int64_t *count)
{
	bypass_identities(g);
	if (params_are_initializers(g))
		return hp_graph_finalize(g);
	for (int i = 0; i < g->nnodes; i++) {
		const struct hp_node *n = &g->nodes[i];
		if (groupnorm_identity(g, n))
			continue;
		for (int k = 0; k < n->ninputs; k++) {
			struct hp_value *v = n->inputs[k] >= 0 ? &g->values[n->inputs[k]] : NULL;
			if (!v || !constant_tensor(g, n->inputs[k]) || !slot_is_param(g, n, k))
				continue;
			v->kind = HP_VALUE_INITIALIZER;
			v->trainable = 1;
			v->src = (struct hp_blob){ .kind = HP_BLOB_MEMORY,
						   .length = hp_tensor_bytes(&(struct hp_tensor){ v->dtype, v->shape, NULL }) };
			(*count)++;
		}
	}
	return hp_graph_finalize(g);
}

static int is_param(const struct hp_value *v)
{
	return v->kind == HP_VALUE_INITIALIZER && (v->dtype == HP_F32 || v->dtype == HP_F16 || v->dtype == HP_BF16) &&
	       v->trainable && v->next < 0; /* half: trained in float32 (exec/autodiff_half.c) */
}

/* BatchNorm's running statistics are state, not parameters: neither
 * counted nor frozen (training updates them from the batches). */
static char *statistics(const struct hp_graph *g)
{
	char *st = calloc((size_t)g->nvalues + 1, 1);

	for (int i = 0; st && i < g->nnodes; i++)
		if (!strcmp(g->nodes[i].op_type, "BatchNormalization") && !g->nodes[i].domain[0])
			for (int k = 3; k < 5 && k < g->nodes[i].ninputs; k++)
				if (g->nodes[i].inputs[k] >= 0)
					st[g->nodes[i].inputs[k]] = 1;
	return st;
}

static int freeze(struct hp_graph *g, const char *pattern, const char *example, const char *stat,
		  struct hp_param_counts *pc)
{
	int hits = 0;

	for (int v = 0; v < g->nvalues; v++) {
		struct hp_value *val = &g->values[v];
		if (!is_param(val) || stat[v] || fnmatch(pattern, val->name, 0))
			continue;
		val->trainable = 0;
		pc->frozen += hp_shape_numel(&val->shape);
		pc->frozen_tensors++;
		hits++;
	}
	if (!hits)
		return hp_error(HP_EUSAGE, "--freeze %s: no parameter name matches (names are the model's "
				"initializers, e.g. '%s')", pattern, example);
	return 0;
}

int hp_train_params(struct hp_graph *g, const char *const *patterns, int npatterns, struct hp_param_counts *pc)
{
	const char *example = "(none)";
	char *stat;
	int rc;

	memset(pc, 0, sizeof *pc);
	pc->size = sizeof *pc;
	if ((rc = promote(g, &pc->from_constants)) < 0 || (rc = ad_untie_stats(g)) < 0)
		return rc;
	if (!(stat = statistics(g)))
		return hp_error(-ENOMEM, "out of memory");
	for (int v = g->nvalues - 1; v >= 0; v--)
		if (is_param(&g->values[v]) && !stat[v])
			example = g->values[v].name;
	for (int i = 0; i < npatterns && rc == 0; i++)
		rc = freeze(g, patterns[i], example, stat, pc);
	for (int v = 0; v < g->nvalues; v++)
		if (is_param(&g->values[v]) && !stat[v]) {
			pc->trained += hp_shape_numel(&g->values[v].shape);
			pc->trained_tensors++;
		}
	free(stat);
	return rc;
}
