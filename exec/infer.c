/* Shape inference and constant folding over the whole graph: the first
 * step of compiling (it resolves each node's operator and runs the kernels'
 * prepare, and runs kernels on constant inputs), hence in exec/ and not in
 * the IR's folder. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hpdlf/error.h"
#include "hpdlf/graph.h"
#include "exec/exec_internal.h"
#include "hpdlf/kernels.h"
#include "onnx/control.h"

/* Folded results larger than this stay run-time work: folding is for shape
 * arithmetic and small constants, not for precomputing weights in DRAM. */
#define FOLD_MAX_BYTES (16u << 20)

/* State (value.next: weights in training) changes from run to run. */
static int inputs_constant(const struct hp_graph *g, const struct hp_node *n)
{
	for (int i = 0; i < n->ninputs; i++)
		if (n->inputs[i] >= 0 && (!g->values[n->inputs[i]].data || g->values[n->inputs[i]].next >= 0))
			return 0;
	return 1;
}

static int fold_run(struct hp_graph *g, struct hp_node *n, struct hp_tensor *in, struct hp_tensor *out);

/* Heap arrays: a node may have more inputs than a stack frame should hold. */
static int fold(struct hp_graph *g, struct hp_node *n)
{
	struct hp_tensor *in = calloc((size_t)n->ninputs + 1, sizeof *in);
	struct hp_tensor *out = calloc((size_t)n->noutputs + 1, sizeof *out);
	int rc = in && out ? fold_run(g, n, in, out) : hp_error(-ENOMEM, "out of memory folding node '%s'", n->name);

	free(in);
	free(out);
	return rc;
}

static int fold_run(struct hp_graph *g, struct hp_node *n, struct hp_tensor *in, struct hp_tensor *out)
{
	struct hp_kargs a = { .nin = n->ninputs, .nout = n->noutputs, .in = in, .out = out };
	size_t total = 0;
	void *ws = NULL;
	int rc;

	for (int o = 0; o < n->noutputs; o++) {
		struct hp_value *v = n->outputs[o] >= 0 ? &g->values[n->outputs[o]] : NULL;
		struct hp_tensor t = { .dtype = v ? v->dtype : HP_UNDEFINED, .shape = v ? v->shape : (struct hp_shape){ 0 } };
		if (v && v->data)
			return 0; /* the op folded itself in prepare */
		total += v ? hp_tensor_bytes(&t) : 0;
	}
	if (total > FOLD_MAX_BYTES || n->workspace > FOLD_MAX_BYTES)
		return 0;
	for (int i = 0; i < n->ninputs; i++) {
		const struct hp_value *v = n->inputs[i] >= 0 ? &g->values[n->inputs[i]] : NULL;
		in[i] = (struct hp_tensor){ .dtype = v ? v->dtype : HP_UNDEFINED, .data = v ? v->data : NULL };
		if (v)
			in[i].shape = v->shape;
	}
	memset(out, 0, ((size_t)n->noutputs + 1) * sizeof *out);
	for (int o = 0; o < n->noutputs; o++) {
		struct hp_value *v = n->outputs[o] >= 0 ? &g->values[n->outputs[o]] : NULL;
		if (!v)
			continue;
		rc = hp_tensor_alloc(&out[o], v->dtype, &v->shape);
		if (rc < 0)
			goto fail;
	}
	if (n->workspace && !(ws = aligned_alloc(64, (n->workspace + 63) / 64 * 64))) {
		rc = hp_error(-ENOMEM, "out of memory folding node '%s'", n->name);
		goto fail;
	}
	a.ws = ws;
	a.ws_size = n->workspace;
	rc = n->op->run(n, &a);
	free(ws);
	if (rc < 0)
		goto fail;
	for (int o = 0; o < n->noutputs; o++) {
		struct hp_value *v = n->outputs[o] >= 0 ? &g->values[n->outputs[o]] : NULL;
		if (!v)
			continue;
		v->data = out[o].data;
		v->kind = HP_VALUE_CONSTANT;
		v->src.kind = HP_BLOB_MEMORY;
	}
	n->folded = 1;
	return 0;
fail:
	for (int o = 0; o < n->noutputs; o++)
		hp_tensor_free(&out[o]);
	return rc;
}

static int infer_node(struct hp_graph *g, struct hp_node *n)
{
	int rc, all_folded = 1;

	if (!n->op) {
		n->op = hp_op_find(n->domain, n->op_type);
		if (!n->op)
			return hp_node_error(g, n, HP_EUNSUPPORTED, "operator %s%s%s is not supported",
					     n->domain[0] ? n->domain : "", n->domain[0] ? "." : "", n->op_type);
	}
	if (n->ninputs < n->op->min_inputs || n->ninputs > n->op->max_inputs)
		return hp_node_error(g, n, HP_EMODEL, "has %d inputs, expected %d to %d", n->ninputs,
				     n->op->min_inputs, n->op->max_inputs);
	if (n->noutputs < n->op->min_outputs || n->noutputs > n->op->max_outputs)
		return hp_node_error(g, n, HP_EMODEL, "has %d outputs, expected %d to %d", n->noutputs,
				     n->op->min_outputs, n->op->max_outputs);
	for (int i = 0; i < n->ninputs; i++) {
		const struct hp_value *v = n->inputs[i] >= 0 ? &g->values[n->inputs[i]] : NULL;
		if (v && hp_shape_numel(&v->shape) < 0)
			return hp_node_error(g, n, HP_ESHAPE,
					     "input '%s' has no concrete shape (give it with --shape NAME=DIMS)",
					     v->name);
	}
	hp_node_release(n);
	n->workspace = 0;
	rc = n->op->prepare(g, n);
	if (rc < 0)
		return rc;
	for (int o = 0; o < n->noutputs; o++) {
		const struct hp_value *v = n->outputs[o] >= 0 ? &g->values[n->outputs[o]] : NULL;
		if (!v)
			continue;
		int64_t bytes = hp_shape_bytes(&v->shape, v->dtype);
		if (bytes == -2) {
			char sh[128];
			return hp_node_error(g, n, HP_ESHAPE, "output '%s' of shape %s would exceed %" PRIu64 " TiB",
					     v->name, hp_shape_str(&v->shape, sh, sizeof sh), HP_TENSOR_MAX_BYTES >> 40);
		}
		if (bytes < 0)
			return hp_node_error(g, n, HP_EINTERNAL, "prepare left output '%s' without shape or dtype",
					     v->name);
		if (!v->data)
			all_folded = 0;
	}
	if (all_folded) {
		n->folded = 1;
		return 0;
	}
	if (!(n->op->flags & HP_OP_NO_FOLD) && inputs_constant(g, n))
		return fold(g, n);
	return 0;
}

/* Every operator hpdlf lacks, with its node count and first node names,
 * in one message: a user sees the whole list at once, not one per try. */
struct missing {
	const char *op, *domain;
	int count;
	char names[160];
};

static void note_missing(struct missing *m, int *nm, int cap, const struct hp_node *n)
{
	int k = 0;
	size_t len;

	while (k < *nm && (strcmp(m[k].op, n->op_type) || strcmp(m[k].domain, n->domain)))
		k++;
	if (k == *nm) {
		if (*nm == cap)
			return;
		m[(*nm)++] = (struct missing){ .op = n->op_type, .domain = n->domain };
	}
	len = strlen(m[k].names);
	if (m[k].count < 3)
		snprintf(m[k].names + len, sizeof m[k].names - len, "%s'%s'", m[k].count ? ", " : "", n->name);
	else if (m[k].count == 3)
		snprintf(m[k].names + len, sizeof m[k].names - len, ", ...");
	m[k].count++;
}

/* hp_op_find through the last RECENT ops found: a graph the autodiff
 * made names a few ops over and over (the 10,001-node MLP's 1-byte step:
 * 63,000 nodes of about ten), and each search was a dozen strcmp
 * (the binary search, then the domain's). */
#define RECENT 4
struct recent {
	const struct hp_op *op[RECENT];
	const char *domain[RECENT], *op_type[RECENT]; /* the node's strings it was found for */
	int next;
};

static const struct hp_op *op_find_recent(struct recent *r, const char *domain, const char *op_type)
{
	const struct hp_op *op;

	if (!domain || !op_type)
		return hp_op_find(domain, op_type);
	for (int k = 0; k < RECENT; k++)
		if (r->op[k] && !strcmp(r->op_type[k], op_type) && !strcmp(r->domain[k], domain))
			return r->op[k];
	if ((op = hp_op_find(domain, op_type))) {
		r->op[r->next] = op;
		r->domain[r->next] = domain;
		r->op_type[r->next] = op_type;
		r->next = (r->next + 1) % RECENT;
	}
	return op;
}

static int check_supported(struct hp_graph *g)
{
	struct recent recent[1];
	struct missing m[32];
	char msg[900] = "";
	int nm = 0, nodes = 0, last = -1;

	memset(recent, 0, sizeof recent);
	/* the op found is kept (infer_node looks it up so), so that each
	 * node is searched for once */
	for (int i = 0; i < g->nnodes; i++)
		if (!g->nodes[i].op && !(g->nodes[i].op = op_find_recent(recent, g->nodes[i].domain, g->nodes[i].op_type))) {
			note_missing(m, &nm, 32, &g->nodes[i]);
			nodes++;
			last = i;
		}
	if (nodes == 1)
		return hp_node_error(g, &g->nodes[last], HP_EUNSUPPORTED, "operator %s%s%s is not supported",
				     g->nodes[last].domain[0] ? g->nodes[last].domain : "", g->nodes[last].domain[0] ? "." : "",
				     g->nodes[last].op_type);
	for (int k = 0; k < nm; k++) {
		size_t len = strlen(msg);
		snprintf(msg + len, sizeof msg - len, "%s%s%s%s (%d node%s: %s)", k ? ", " : "", m[k].domain,
			 m[k].domain[0] ? "." : "", m[k].op, m[k].count, m[k].count > 1 ? "s" : "", m[k].names);
	}
	return nodes ? hp_error(HP_EUNSUPPORTED, "%s: %d operator%s not supported: %s", g->path, nm,
					  nm > 1 ? "s are" : " is", msg) : 0;
}

int hp_graph_infer(struct hp_graph *g)
{
	int rc = check_supported(g);

	if (rc < 0)
		return rc;
	for (int i = 0; i < g->ninputs; i++) {
		const struct hp_value *v = &g->values[g->inputs[i]];
		char s[128];
		if (hp_shape_bytes(&v->shape, v->dtype) == -2)
			return hp_error(HP_ESHAPE, "%s: input '%s' of shape %s would exceed %" PRIu64 " TiB", g->path,
					v->name, hp_shape_str(&v->shape, s, sizeof s), HP_TENSOR_MAX_BYTES >> 40);
		if (hp_shape_numel(&v->shape) < 0) {
			return hp_error(HP_ESHAPE, "%s: input '%s' has dynamic shape %s; give it with --shape %s=DIMS or an input file",
					g->path, v->name, hp_shape_str(&v->shape, s, sizeof s), v->name);
		}
	}
	for (int i = 0; i < g->nnodes; i++) {
		/* If/Loop deferred by the importer fold once what precedes them
		 * has; the graph is re-sorted, so inference starts over (it is
		 * idempotent on the nodes done) */
		if (imp_is_deferred(&g->nodes[i]) && (rc = imp_expand_deferred(g, i)) != 0) {
			if (rc < 0)
				return rc;
			i = -1;
			continue;
		}
		if ((rc = infer_node(g, &g->nodes[i])) < 0)
			return rc;
	}
	return 0;
}
