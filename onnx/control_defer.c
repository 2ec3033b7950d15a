/* If and Loop whose condition or trip count the model does not fix, kept
 * until shape inference knows them.
 *
 * A condition computed from a graph input the caller binds (--input of a
 * scalar, hp_graph_bind_input) or from shapes (Shape -> Gather -> Equal)
 * is known only once hp_graph_infer has folded what precedes it.  So
 * control.c leaves a placeholder node instead: domain ai.hpdlf, the
 * original op type, reading the node's inputs and then every outer-scope
 * value its subgraphs use, writing its outputs, with the NodeProto packed
 * in attribute "proto" and the outer names in "outer".  hp_graph_infer
 * (exec/infer.c) calls imp_expand_deferred when it reaches one: if the
 * decisive inputs are constants by then, the node is unpacked and folded
 * exactly as on import (control.c), with its names mapped onto the
 * placeholder's values; otherwise the placeholder's prepare refuses with
 * the reason (kernels/misc_ops.c). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hpdlf/error.h"
#include "onnx/control.h"
#include "onnx/import.h"

struct names {
	int n, cap;
	const char **v;
};

static int names_has(const struct names *s, const char *x)
{
	for (int i = 0; i < s->n; i++)
		if (!strcmp(s->v[i], x))
			return 1;
	return 0;
}

static int names_add(struct names *s, const char *x)
{
	if (!x || !*x || names_has(s, x))
		return 0;
	if (s->n == s->cap) {
		int cap = s->cap ? 2 * s->cap : 32;
		const char **p = realloc(s->v, (size_t)cap * sizeof *p);
		if (!p)
			return hp_error(-ENOMEM, "out of memory");
		s->v = p;
		s->cap = cap;
	}
	s->v[s->n++] = x;
	return 0;
}

static int walk_graph(const Onnx__GraphProto *gp, struct names *def, struct names *use);

/* Names node np defines and reads, its subgraphs' included. */
static int walk_node(const Onnx__NodeProto *np, struct names *def, struct names *use)
{
	int rc = 0;

	for (size_t i = 0; rc == 0 && i < np->n_input; i++)
		rc = names_add(use, np->input[i]);
	for (size_t o = 0; rc == 0 && o < np->n_output; o++)
		rc = names_add(def, np->output[o]);
	for (size_t a = 0; rc == 0 && a < np->n_attribute; a++) {
		const Onnx__AttributeProto *at = np->attribute[a];
		if (at->g)
			rc = walk_graph(at->g, def, use);
		for (size_t k = 0; rc == 0 && k < at->n_graphs; k++)
			rc = walk_graph(at->graphs[k], def, use);
	}
	return rc;
}

static int walk_graph(const Onnx__GraphProto *gp, struct names *def, struct names *use)
{
	int rc = 0;

	for (size_t i = 0; rc == 0 && i < gp->n_input; i++)
		rc = names_add(def, gp->input[i]->name);
	for (size_t i = 0; rc == 0 && i < gp->n_initializer; i++)
		rc = names_add(def, gp->initializer[i]->name);
	for (size_t i = 0; rc == 0 && i < gp->n_node; i++)
		rc = walk_node(gp->node[i], def, use);
	for (size_t i = 0; rc == 0 && i < gp->n_output; i++)
		rc = names_add(use, gp->output[i]->name);
	return rc;
}

/* The outer-scope names np's subgraphs read (not np's own inputs). */
static int outer_names(const Onnx__NodeProto *np, struct names *outer)
{
	struct names def = { 0 }, use = { 0 };
	int rc = 0;

	for (size_t a = 0; rc == 0 && a < np->n_attribute; a++) {
		const Onnx__AttributeProto *at = np->attribute[a];
		if (at->g)
			rc = walk_graph(at->g, &def, &use);
		for (size_t k = 0; rc == 0 && k < at->n_graphs; k++)
			rc = walk_graph(at->graphs[k], &def, &use);
	}
	for (int i = 0; rc == 0 && i < use.n; i++)
		if (!names_has(&def, use.v[i]))
			rc = names_add(outer, use.v[i]);
	free(def.v);
	free(use.v);
	return rc;
}

static int placeholder_attrs(struct hp_graph *g, int node, const Onnx__NodeProto *np, const struct names *outer)
{
	size_t len = onnx__node_proto__get_packed_size(np);
	char *buf = malloc(len + 1);
	int rc;

	if (!buf)
		return hp_error(-ENOMEM, "out of memory");
	onnx__node_proto__pack(np, (uint8_t *)buf);
	rc = hp_graph_add_attr(g, node, &(struct hp_attr){ .name = "proto", .type = HP_ATTR_STRING, .s = buf, .slen = len });
	free(buf);
	if (rc == 0)
		rc = hp_graph_add_attr(g, node, &(struct hp_attr){ .name = "outer", .type = HP_ATTR_STRINGS, .n = outer->n,
								   .strings = (char **)outer->v });
	if (rc == 0)
		rc = hp_graph_add_attr(g, node, &(struct hp_attr){ .name = "node_inputs", .type = HP_ATTR_INT,
								   .i = (int64_t)np->n_input });
	return rc;
}

int imp_defer_control(struct imp *im, const Onnx__NodeProto *np, const char *name)
{
	struct names outer = { 0 };
	int nin = (int)np->n_input, *in = NULL, *out = NULL, rc, node;
	char *dom;

	if ((rc = outer_names(np, &outer)) < 0)
		return rc;
	in = calloc((size_t)(nin + outer.n) + 1, sizeof *in);
	out = calloc(np->n_output + 1, sizeof *out);
	if (!in || !out) {
		rc = hp_error(-ENOMEM, "out of memory");
		goto done;
	}
	for (int i = 0; i < nin; i++)
		in[i] = np->input[i] && *np->input[i] ? imp_find(im, np->input[i]) : -1;
	for (int k = 0; k < outer.n; k++) /* outer names resolve through the enclosing copies */
		if ((in[nin + k] = imp_find(im, imp_scope_map(im, outer.v[k]))) < 0) {
			rc = hp_error(HP_EMODEL, "%s: %s '%s': its subgraph reads '%s', which is not defined", im->g->path,
				      np->op_type, name, outer.v[k]);
			goto done;
		}
	for (size_t o = 0; o < np->n_output; o++)
		out[o] = np->output[o] && *np->output[o] ? imp_find(im, np->output[o]) : -1;
	node = hp_graph_add_node(im->g, name, np->op_type, nin + outer.n, in, (int)np->n_output, out);
	if ((rc = node) < 0)
		goto done;
	if (!(dom = strdup("ai.hpdlf"))) {
		rc = hp_error(-ENOMEM, "out of memory");
		goto done;
	}
	free(im->g->nodes[node].domain);
	im->g->nodes[node].domain = dom;
	rc = placeholder_attrs(im->g, node, np, &outer);
done:
	free(in);
	free(out);
	free(outer.v);
	return rc < 0 ? rc : 0;
}

int imp_is_deferred(const struct hp_node *n)
{
	/* the op first: inference asks for every node, and the nodes a
	 * training graph adds are in the domain too */
	return (!strcmp(n->op_type, "If") || !strcmp(n->op_type, "Loop")) && !strcmp(n->domain, "ai.hpdlf") &&
	       hp_node_attr(n, "proto");
}

/* Are the inputs that decide the folding constants now? */
static int decidable(const struct hp_graph *g, const struct hp_node *n)
{
	int last = !strcmp(n->op_type, "If") ? 1 : 2;

	for (int i = 0; i < last && i < n->ninputs; i++)
		if (n->inputs[i] >= 0 && !g->values[n->inputs[i]].data)
			return 0;
	return 1;
}

/* Point np's inputs and outputs at the placeholder's values and map the
 * outer names onto its extra inputs (scope s); saved[] keeps np's own
 * strings for the free. */
static int rebind(struct imp *im, const struct hp_node *n, Onnx__NodeProto *np, struct imp_scope *s, char **saved)
{
	const struct hp_attr *outer = hp_node_attr(n, "outer");
	int nin = (int)hp_attr_int(n, "node_inputs", 0), rc = 0;

	if (nin != (int)np->n_input || !outer || nin + outer->n != n->ninputs || n->noutputs != (int)np->n_output)
		return hp_error(HP_EINTERNAL, "%s: node '%s': the deferred %s does not match its placeholder",
				im->g->path, n->name, n->op_type);
	for (int i = 0; i < nin; i++) {
		saved[i] = np->input[i];
		if (n->inputs[i] >= 0)
			np->input[i] = im->g->values[n->inputs[i]].name;
	}
	for (int o = 0; o < n->noutputs; o++) {
		saved[nin + o] = np->output[o];
		np->output[o] = n->outputs[o] >= 0 ? im->g->values[n->outputs[o]].name : (char *)"";
	}
	for (int k = 0; rc == 0 && k < outer->n; k++)
		rc = imp_scope_bind(s, outer->strings[k], im->g->values[n->inputs[nin + k]].name);
	return rc;
}

static int expand(struct imp *im, int node, Onnx__NodeProto *np)
{
	struct hp_graph *g = im->g;
	struct imp_scope *s = NULL;
	char **saved = calloc(np->n_input + np->n_output + 1, sizeof *saved), name[256];
	int nin = (int)np->n_input, rc;

	if (!saved || !(s = imp_scope_new()))
		rc = hp_error(-ENOMEM, "out of memory");
	else
		rc = rebind(im, &g->nodes[node], np, s, saved);
	if (rc == 0) {
		snprintf(name, sizeof name, "%s", g->nodes[node].name);
		hp_graph_remove_node(g, node); /* its outputs get their producers from the fold */
		im->scope = s;
		rc = imp_control(im, np, name);
		im->scope = NULL;
	}
	for (int i = 0; saved && i < nin; i++)
		if (saved[i])
			np->input[i] = saved[i];
	for (size_t o = 0; saved && o < np->n_output; o++)
		if (saved[nin + o])
			np->output[o] = saved[nin + o];
	imp_scope_free(s);
	free(saved);
	return rc;
}

int imp_expand_deferred(struct hp_graph *g, int node)
{
	const struct hp_attr *p = hp_node_attr(&g->nodes[node], "proto");
	Onnx__NodeProto *np;
	struct imp im;
	int rc;

	if (!decidable(g, &g->nodes[node]))
		return 0;
	if (!p || !(np = onnx__node_proto__unpack(NULL, p->slen, (const uint8_t *)p->s)))
		return hp_error(HP_EINTERNAL, "%s: node '%s': its packed subgraph does not unpack", g->path,
				g->nodes[node].name);
	rc = imp_attach(&im, g);
	if (rc == 0)
		rc = expand(&im, node, np);
	imp_detach(&im);
	onnx__node_proto__free_unpacked(np, NULL);
	if (rc == 0)
		rc = hp_graph_finalize(g);
	return rc < 0 ? rc : 1;
}
