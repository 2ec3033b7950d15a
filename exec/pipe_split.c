/* Pipeline training: a stage's backward graph split in two at the
 * boundary autodiff drew between the forward and the gradient nodes
 * (pipe.h).  The forward half also outputs every activation a gradient
 * node reads (the saved values); the backward half takes them as inputs
 * instead of computing the forward again.  A micro-batch in flight then
 * keeps its saved values between its forward and its backward, and the
 * stage computes its forward once, as one rank does. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "hpdlf/error.h"
#include "exec/pipe.h"

/* Per node of g: 1 if it is a forward node (every output among the
 * values the forward part had). */
static char *forward_nodes(const struct hp_graph *g, int nv0)
{
	char *f = calloc((size_t)g->nnodes + 1, 1);

	for (int i = 0; f && i < g->nnodes; i++) {
		f[i] = 1;
		for (int o = 0; o < g->nodes[i].noutputs; o++)
			if (g->nodes[i].outputs[o] >= nv0)
				f[i] = 0;
	}
	return f;
}

/* Per value: read by a gradient node. */
static char *read_by_backward(const struct hp_graph *g, const char *fwd)
{
	char *r = calloc((size_t)g->nvalues + 1, 1);

	for (int i = 0; r && i < g->nnodes; i++)
		for (int j = 0; !fwd[i] && j < g->nodes[i].ninputs; j++)
			if (g->nodes[i].inputs[j] >= 0)
				r[g->nodes[i].inputs[j]] = 1;
	return r;
}

/* The saved values: computed by forward nodes (not folded constants),
 * read by gradient nodes.  A run-to-run state a gradient node reads
 * (its value would be the next run's by the time it is read back) is
 * not split: HP_EUNSUPPORTED, and the caller recomputes instead. */
static int find_saved(const struct hp_graph *g, const char *fwd, const char *rb, int *saved, int *n)
{
	*n = 0;
	for (int v = 0; v < g->nvalues; v++) {
		const struct hp_value *val = &g->values[v];
		if (!rb[v])
			continue;
		if (val->next >= 0)
			return hp_error(HP_EUNSUPPORTED, "%s: the gradient reads the state '%s'", g->path, val->name);
		if (val->producer >= 0 && fwd[val->producer] && !val->data)
			saved[(*n)++] = v;
	}
	return 0;
}

static int set_outputs(struct hp_graph *g, const int *a, int na, const int *b, int nb)
{
	int *l = calloc((size_t)(na + nb) + 1, sizeof *l), n = 0;

	if (!l)
		return hp_error(-ENOMEM, "out of memory");
	for (int v = 0; v < g->nvalues; v++)
		g->values[v].is_output = 0;
	for (int k = 0; k < na + nb; k++) {
		int v = k < na ? a[k] : b[k - na];
		if (!g->values[v].is_output) {
			g->values[v].is_output = 1;
			l[n++] = v;
		}
	}
	free(g->outputs);
	g->outputs = l;
	g->noutputs = n;
	return 0;
}

/* gf keeps the forward nodes; outputs: the cut's values, then the saved. */
static int forward_half(struct hp_graph *gf, const char *fwd, const struct hp_pipe_cut *cout, const int *saved,
			int nsaved)
{
	int rc;

	for (int i = gf->nnodes - 1; i >= 0; i--)
		if (!fwd[i])
			hp_graph_remove_node(gf, i);
	if ((rc = set_outputs(gf, cout->vals, cout->n, saved, nsaved)) < 0 || (rc = hp_graph_finalize(gf)) < 0)
		return rc;
	return hp_graph_infer(gf);
}

/* The outputs gb keeps: those a gradient node computes, or inputs. */
static int backward_outputs(struct hp_graph *gb, const char *fwd)
{
	int *keep = calloc((size_t)gb->noutputs + 1, sizeof *keep), n = 0, rc;

	if (!keep)
		return hp_error(-ENOMEM, "out of memory");
	for (int k = 0; k < gb->noutputs; k++) {
		const struct hp_value *val = &gb->values[gb->outputs[k]];
		if ((val->producer >= 0 && !fwd[val->producer]) || val->kind == HP_VALUE_INPUT)
			keep[n++] = gb->outputs[k];
	}
	rc = set_outputs(gb, keep, n, NULL, 0);
	free(keep);
	return rc;
}

/* gb keeps the gradient nodes; the saved values become its inputs, and
 * state the forward nodes advanced stays with the forward graph. */
static int backward_half(struct hp_graph *gb, const char *fwd, const int *saved, int nsaved)
{
	int *l = realloc(gb->inputs, (size_t)(gb->ninputs + nsaved + 1) * sizeof *l), rc;

	if (!l)
		return hp_error(-ENOMEM, "out of memory");
	gb->inputs = l;
	if ((rc = backward_outputs(gb, fwd)) < 0)
		return rc;
	for (int v = 0; v < gb->nvalues; v++) {
		int nx = gb->values[v].next;
		if (nx >= 0 && gb->values[nx].producer >= 0 && fwd[gb->values[nx].producer])
			gb->values[v].next = -1;
	}
	for (int k = 0; k < nsaved; k++) {
		gb->values[saved[k]].kind = HP_VALUE_INPUT;
		l[gb->ninputs++] = saved[k];
	}
	for (int i = gb->nnodes - 1; i >= 0; i--)
		if (fwd[i])
			hp_graph_remove_node(gb, i);
	if ((rc = hp_graph_finalize(gb)) < 0)
		return rc;
	return hp_graph_infer(gb);
}

int hp_pipe_split(struct hp_graph *gf, struct hp_graph *gb, int nv0, const struct hp_pipe_cut *cout, int **saved,
		  int *nsaved)
{
	char *fwd = forward_nodes(gb, nv0), *rb = fwd ? read_by_backward(gb, fwd) : NULL;
	int *sv = calloc((size_t)gb->nvalues + 1, sizeof *sv), n = 0, rc;

	*saved = NULL;
	*nsaved = 0;
	if (!fwd || !rb || !sv)
		rc = hp_error(-ENOMEM, "out of memory");
	else if (gf->nnodes != gb->nnodes || gf->nvalues != gb->nvalues)
		rc = hp_error(HP_EINTERNAL, "%s: two builds of the stage differ", gb->path);
	else
		rc = find_saved(gb, fwd, rb, sv, &n);
	/* the forward half first: it reads gb's node marks, the same in gf */
	if (rc == 0)
		rc = forward_half(gf, fwd, cout, sv, n);
	if (rc == 0)
		rc = backward_half(gb, fwd, sv, n);
	free(fwd);
	free(rb);
	if (rc < 0) {
		free(sv);
		return rc;
	}
	*saved = sv;
	*nsaved = n;
	return 0;
}
