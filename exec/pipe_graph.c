/* Pipeline stages over the model graph: the values crossing each cut and
 * the graph of one stage (pipe_graph.h). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "hpdlf/error.h"
#include "exec/autodiff.h"
#include "exec/pipe_graph.h"

static int stage_of(int P, const int *bounds, int node)
{
	int s = 0;

	while (s + 1 < P && node >= bounds[s + 1])
		s++;
	return s;
}

static int is_param(const struct hp_value *v)
{
	return v->kind == HP_VALUE_INITIALIZER && v->trainable && v->dtype == HP_F32;
}

/* A BatchNormalization's running statistics (inputs 3, 4) are state the
 * node updates, not parameters the optimizer trains. */
static char *bn_stats(const struct hp_graph *g)
{
	char *st = calloc((size_t)g->nvalues + 1, 1);

	for (int i = 0; st && i < g->nnodes; i++) {
		const struct hp_node *n = &g->nodes[i];
		if (strcmp(n->op_type, "BatchNormalization"))
			continue;
		for (int k = 3; k < 5 && k < n->ninputs; k++)
			if (n->inputs[k] >= 0)
				st[n->inputs[k]] = 1;
	}
	return st;
}

/* Values computed at run time or fed: what a cut can carry. */
static int carried(const struct hp_value *v)
{
	return !v->data && (v->kind == HP_VALUE_INPUT || v->kind == HP_VALUE_ACTIVATION);
}

int hp_pipe_check_bounds(const struct hp_graph *g, int P, const int *bounds)
{
	int *first;

	if (P < 1 || bounds[0] != 0 || bounds[P] != g->nnodes)
		return hp_error(HP_EUSAGE, "%s: a partition into %d stages must cover nodes 0..%d", g->path, P,
				g->nnodes);
	for (int s = 0; s < P; s++)
		if (bounds[s + 1] <= bounds[s])
			return hp_error(HP_EUSAGE, "%s: stage %d of %d would have no node (%d stages need at least "
					"%d nodes; the model has %d)", g->path, s, P, P, P, g->nnodes);
	if (!(first = malloc(((size_t)g->nvalues + 1) * sizeof *first)))
		return hp_error(-ENOMEM, "out of memory");
	for (int v = 0; v < g->nvalues; v++)
		first[v] = -1;
	for (int i = 0; i < g->nnodes; i++) {
		int s = stage_of(P, bounds, i);
		for (int j = 0; j < g->nodes[i].ninputs; j++) {
			int v = g->nodes[i].inputs[j];
			if (v < 0 || !is_param(&g->values[v]))
				continue;
			if (first[v] >= 0 && first[v] != s) {
				int a = first[v];
				free(first);
				return hp_error(HP_EUSAGE, "%s: parameter '%s' is read in stage %d and in stage %d (tied "
						"weights): choose cuts that keep its uses in one stage", g->path,
						g->values[v].name, a, s);
			}
			first[v] = s;
		}
	}
	free(first);
	return 0;
}

/* Per value: the first stage that has it (-1: not carried) and the last
 * stage that reads it. */
static void value_span(const struct hp_graph *g, int P, const int *bounds, int loss_value, int *avail, int *last)
{
	for (int v = 0; v < g->nvalues; v++) {
		const struct hp_value *val = &g->values[v];
		avail[v] = !carried(val) ? -1 : val->kind == HP_VALUE_INPUT ? 0
			   : val->producer >= 0 ? stage_of(P, bounds, val->producer) : -1;
		last[v] = -1;
	}
	for (int i = 0; i < g->nnodes; i++)
		for (int j = 0; j < g->nodes[i].ninputs; j++) {
			int v = g->nodes[i].inputs[j], s = stage_of(P, bounds, i);
			if (v >= 0 && s > last[v])
				last[v] = s;
		}
	if (loss_value >= 0)
		last[loss_value] = P - 1;
}

static uint64_t vbytes(const struct hp_value *v)
{
	struct hp_tensor t = { .dtype = v->dtype, .shape = v->shape };

	return hp_tensor_bytes(&t);
}

static int fill_cut(const struct hp_graph *g, int c, const int *avail, const int *last, struct hp_pipe_cut *cut)
{
	memset(cut, 0, sizeof *cut);
	cut->vals = calloc((size_t)g->nvalues + 1, sizeof *cut->vals);
	cut->grad = calloc((size_t)g->nvalues + 1, 1);
	if (!cut->vals || !cut->grad)
		return hp_error(-ENOMEM, "out of memory");
	for (int v = 0; v < g->nvalues; v++) {
		const struct hp_value *val = &g->values[v];
		if (avail[v] < 0 || avail[v] > c || last[v] <= c)
			continue;
		cut->vals[cut->n] = v;
		cut->bytes += vbytes(val);
		cut->grad[cut->n++] = val->dtype == HP_F32 && val->kind != HP_VALUE_INPUT;
		if (cut->grad[cut->n - 1]) {
			cut->ngrad++;
			cut->grad_bytes += vbytes(val);
		}
	}
	return 0;
}

int hp_pipe_boundaries(const struct hp_graph *g, int P, const int *bounds, int loss_value, struct hp_pipe_cut *cuts)
{
	int *avail = malloc(((size_t)g->nvalues + 1) * sizeof *avail);
	int *last = malloc(((size_t)g->nvalues + 1) * sizeof *last), rc = 0;

	if (!avail || !last)
		rc = hp_error(-ENOMEM, "out of memory");
	if (rc == 0)
		value_span(g, P, bounds, loss_value, avail, last);
	for (int c = 0; c + 1 < P; c++)
		memset(&cuts[c], 0, sizeof cuts[c]);
	for (int c = 0; c + 1 < P && rc == 0; c++)
		rc = fill_cut(g, c, avail, last, &cuts[c]);
	free(avail);
	free(last);
	if (rc < 0)
		hp_pipe_cuts_free(cuts, P - 1);
	return rc;
}

void hp_pipe_cuts_free(struct hp_pipe_cut *cuts, int ncuts)
{
	for (int c = 0; cuts && c < ncuts; c++) {
		free(cuts[c].vals);
		free(cuts[c].grad);
		cuts[c].vals = NULL;
		cuts[c].grad = NULL;
		cuts[c].n = 0;
	}
}

static int node_named(const struct hp_graph *g, const char *name)
{
	for (int i = 0; i < g->nnodes; i++)
		if (g->nodes[i].name && !strcmp(g->nodes[i].name, name))
			return i;
	for (int i = 0; i < g->nnodes; i++) {
		const struct hp_node *n = &g->nodes[i];
		if ((!n->name || !n->name[0]) && n->noutputs && n->outputs[0] >= 0 &&
		    !strcmp(g->values[n->outputs[0]].name, name))
			return i;
	}
	return -1;
}

int hp_pipe_bounds_from_names(const struct hp_graph *g, int P, const char *const *names, int nnames, int *bounds)
{
	if (nnames != P - 1)
		return hp_error(HP_EUSAGE, "--pipeline-cuts names %d node%s; --pipeline %d needs %d", nnames,
				nnames == 1 ? "" : "s", P, P - 1);
	bounds[0] = 0;
	bounds[P] = g->nnodes;
	for (int k = 0; k < nnames; k++) {
		int i = node_named(g, names[k]);
		if (i < 0)
			return hp_error(HP_EUSAGE, "--pipeline-cuts: %s has no node named '%s'", g->path, names[k]);
		bounds[k + 1] = i + 1;
		if (bounds[k + 1] <= bounds[k] || i + 1 >= g->nnodes)
			return hp_error(HP_EUSAGE, "--pipeline-cuts: node '%s' (number %d of %d) leaves stage %d empty: "
					"name the cuts in the model's order, none the last node", names[k], i, g->nnodes,
					i + 1 >= g->nnodes ? k + 1 : k);
	}
	return 0;
}

int hp_pipe_stage_params(const struct hp_graph *g, const int *bounds, int s, int **params, int *count)
{
	char *in = calloc((size_t)g->nvalues + 1, 1), *st = bn_stats(g);
	int n = 0, *p = calloc((size_t)g->nvalues + 1, sizeof *p);

	if (!in || !p || !st) {
		free(in);
		free(p);
		free(st);
		return hp_error(-ENOMEM, "out of memory");
	}
	for (int i = bounds[s]; i < bounds[s + 1]; i++)
		for (int j = 0; j < g->nodes[i].ninputs; j++) {
			int v = g->nodes[i].inputs[j];
			if (v >= 0 && is_param(&g->values[v]) && !st[v])
				in[v] = 1;
		}
	for (int v = 0; v < g->nvalues; v++)
		if (in[v])
			p[n++] = v;
	free(in);
	free(st);
	*params = p;
	*count = n;
	return 0;
}

static int set_list(int **list, int *count, const int *vals, int n)
{
	int *l = calloc((size_t)n + 1, sizeof *l);

	if (!l)
		return hp_error(-ENOMEM, "out of memory");
	if (n)
		memcpy(l, vals, (size_t)n * sizeof *l);
	free(*list);
	*list = l;
	*count = n;
	return 0;
}

/* v becomes a graph input (appended to g->inputs). */
static int make_input(struct hp_graph *g, int v)
{
	struct hp_value *val = &g->values[v];
	int *l = realloc(g->inputs, (size_t)(g->ninputs + 1) * sizeof *l);

	if (!l)
		return hp_error(-ENOMEM, "out of memory");
	g->inputs = l;
	free(val->data);
	val->data = NULL;
	val->src.kind = HP_BLOB_NONE;
	val->kind = HP_VALUE_INPUT;
	val->trainable = 0;
	l[g->ninputs++] = v;
	return 0;
}

static int stage_io(struct hp_graph *g, int P, int s, const struct hp_pipe_cut *cuts, int loss_value)
{
	int rc = 0;

	if (s > 0) {
		int kept = g->ninputs;
		/* the model's inputs stay only where stage 0 is */
		g->ninputs = 0;
		for (int k = 0; k < kept; k++)
			g->values[g->inputs[k]].kind = HP_VALUE_ACTIVATION;
		for (int k = 0; k < cuts[s - 1].n && rc == 0; k++)
			rc = make_input(g, cuts[s - 1].vals[k]);
	}
	if (rc < 0)
		return rc;
	if (s + 1 < P)
		return set_list(&g->outputs, &g->noutputs, cuts[s].vals, cuts[s].n);
	return set_list(&g->outputs, &g->noutputs, &loss_value, loss_value >= 0 ? 1 : 0);
}

/* The model's constant folding computed some values from the parameters
 * once (a Transpose of a weight, say); as inputs they change every step,
 * so those nodes run again (hp_unfold_from, as autodiff does for the
 * 1-rank graph). */
static int unfold(struct hp_graph *g, const int *params, int np)
{
	char *live = calloc((size_t)g->nvalues + 1, 1);

	if (!live)
		return hp_error(-ENOMEM, "out of memory");
	for (int k = 0; k < np; k++)
		live[params[k]] = 1;
	return hp_unfold_from(g, live, 0);
}

int hp_pipe_stage_cut(struct hp_graph *g, int P, const int *bounds, int s, const struct hp_pipe_cut *cuts,
		      int loss_value, int params_as_inputs)
{
	int *params = NULL, np = 0, rc;

	if ((rc = hp_pipe_stage_params(g, bounds, s, &params, &np)) < 0)
		return rc;
	for (int i = g->nnodes - 1; i >= 0; i--)
		if (i < bounds[s] || i >= bounds[s + 1])
			hp_graph_remove_node(g, i);
	for (int v = 0; v < g->nvalues; v++)
		g->values[v].is_output = 0;
	rc = stage_io(g, P, s, cuts, loss_value);
	for (int k = 0; params_as_inputs && k < np && rc == 0; k++)
		rc = make_input(g, params[k]);
	if (rc == 0 && params_as_inputs)
		rc = unfold(g, params, np);
	free(params);
	if (rc == 0)
		rc = hp_graph_finalize(g);
	return rc < 0 ? rc : hp_graph_infer(g);
}
