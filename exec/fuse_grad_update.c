/* A Conv's filter gradient and its optimizer update into one
 * ConvGradFilterUpdate (kernels/conv_grad_update.c), after autodiff, in
 * core and under a budget alike (issue 17).
 *
 * Why: the update then holds W, its state and a piece of dW instead of W
 * and the whole dW (ResNet-18's stage-4 weights and their gradients are
 * 9 MiB each: at a quarter of its tensor peak the backward's tail waited
 * for a write-back at each of them).  The fused node is the update's, in
 * its place: it reads dY and X where the filter gradient did, and, as the
 * update did, waits for W's other readers (the data gradient reads the
 * old W; graph.c's topological sort), so W' still goes over W.
 *
 * Fused only where it is exact and alone: dW written by a ConvGradFilter
 * with no running sum (not a band's chain), read by the update alone and
 * no graph output, and a geometry whose filter gradient takes the packed
 * register tiles (the path that sums in pieces, each final: bitwise the
 * two nodes, tk_conv_filter_pieces), and where the fused step needs no
 * more than the two did (fits_beside).  Environment HPDLF_FUSE_GRAD_UPDATE=0
 * leaves every pair unfused (tests compare the two). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "hpdlf/error.h"
#include "exec/budget.h"
#include "exec/fuse.h"
#include "exec/fuse_internal.h"
#include "kernels/conv_impl.h"
#include "kernels/train_util.h"

static int is_internal(const struct hp_node *n, const char *op)
{
	/* the op first: every node of a training graph is asked, and most
	 * are in the domain */
	return !strcmp(n->op_type, op) && !strcmp(n->domain, "ai.hpdlf");
}

/* Bytes of value v as a step holds it (rounded as the planner rounds),
 * 0 for a constant. */
static uint64_t held(const struct hp_graph *g, int v)
{
	struct hp_tensor t;

	if (v < 0 || g->values[v].data)
		return 0;
	t = (struct hp_tensor){ .dtype = g->values[v].dtype, .shape = g->values[v].shape };
	return (hp_tensor_bytes(&t) + HP_BUDGET_ALIGN - 1) / HP_BUDGET_ALIGN * HP_BUDGET_ALIGN;
}

/* The fused step holds what neither node alone held: dY and X beside W
 * and its state, and the pieces' buffers beside the filter gradient's
 * workspace.  Fused only where it needs no more than the larger of the
 * two steps (W' and the state's next versions over the old ones, as the
 * planner lays them: ResNet-18's stage 4, whose update held 2 W = 18 MiB
 * against 11.6 fused, not its stages 2 and 3, whose activations outweigh
 * their weights), and its workspace is no larger than the graph's
 * largest (under a budget the session reserves that much for every
 * step): the smallest budget a graph needs never grows (a small
 * ConvTranspose's dW, whose pieces' buffers outweighed it, raised it
 * from 176 KiB to 648 KiB: test train-quarter). */
static int fits_beside(const struct hp_graph *g, int u, int f, size_t ws_fused, size_t ws_max)
{
	const struct hp_node *un = &g->nodes[u], *fn = &g->nodes[f];
	uint64_t state = 0, act = held(g, fn->inputs[0]) + held(g, fn->inputs[1]), dw = held(g, un->inputs[1]);
	uint64_t w = held(g, un->inputs[0]), filter = act + dw + fn->workspace, update = w + dw + un->workspace, fused;

	for (int j = 2; j < un->ninputs; j++)
		state += held(g, un->inputs[j]);
	update += state;
	fused = act + w + state + ws_fused;
	return ws_fused <= ws_max && fused <= (filter > update ? filter : update);
}

/* The ConvGradFilter node whose dW update u alone reads, or -1. */
static int fusable_filter(struct hp_graph *g, int u, size_t ws_max)
{
	const struct hp_node *n = &g->nodes[u];
	int adam = is_internal(n, "AdamUpdate"), dw = n->ninputs > 1 ? n->inputs[1] : -1, f;
	struct hp_rfilt q;
	struct hp_shape s;

	if ((!adam && !is_internal(n, "SGDUpdate")) || n->folded || dw < 0 || g->values[dw].is_output ||
	    g->values[dw].nconsumers != 1 || (f = g->values[dw].producer) < 0)
		return -1;
	n = &g->nodes[f];
	if (!is_internal(n, "ConvGradFilter") || n->folded || n->noutputs != 1 ||
	    (n->ninputs > 2 && n->inputs[2] >= 0))
		return -1;
	for (int j = 0; j < g->nodes[u].ninputs; j++)
		if (j != 1 && g->nodes[u].inputs[j] == dw)
			return -1;
	if (tk_conv_filter_pieces(g, n, &q, &s) != 1)
		return -1;
	return fits_beside(g, u, f, tk_conv_update_workspace(&q), ws_max) ? f : -1;
}

/* Update u becomes ConvGradFilterUpdate(dY, X, W, state...) with the
 * filter gradient f's attributes beside its own (f is removed after). */
static int rewrite(struct hp_graph *g, int u, int f)
{
	struct hp_node *n = &g->nodes[u];
	int adam = is_internal(n, "AdamUpdate"), nin = n->ninputs + 1, *in = malloc((size_t)nin * sizeof *in), rc;

	if (!in)
		return hp_error(-ENOMEM, "out of memory");
	in[0] = g->nodes[f].inputs[0];
	in[1] = g->nodes[f].inputs[1];
	in[2] = n->inputs[0];
	for (int j = 2; j < n->ninputs; j++)
		in[j + 1] = n->inputs[j];
	free(n->inputs);
	n->inputs = in;
	n->ninputs = nin;
	for (int k = 0; k < g->nodes[f].nattrs; k++)
		if ((rc = hp_graph_add_attr(g, u, &g->nodes[f].attrs[k])) < 0)
			return rc;
	return (rc = hp_fz_attr_int(g, u, "adam", adam)) < 0 ? rc : hp_fz_set_op(&g->nodes[u], "ConvGradFilterUpdate");
}

static int desc(const void *a, const void *b)
{
	return *(const int *)b - *(const int *)a;
}

static int disabled(void)
{
	const char *e = getenv("HPDLF_FUSE_GRAD_UPDATE");

	return e && !strcmp(e, "0");
}

int hp_fuse_grad_update(struct hp_graph *g)
{
	int fused = 0, rc;
	size_t ws_max = 0;

	if (disabled())
		return 0;
	for (int i = 0; i < g->nnodes; i++)
		ws_max = g->nodes[i].workspace > ws_max ? g->nodes[i].workspace : ws_max;
	/* every pair found and rewritten in one pass, the filter gradients
	 * removed after it and the graph relinked once: a pair's test reads
	 * only its own nodes and dW, which no other rewrite touches (once per
	 * pair, each a relink, was quadratic in the graph's convs) */
	int *fs = malloc(((size_t)g->nnodes + 1) * sizeof *fs);
	if (!fs)
		return hp_error(-ENOMEM, "out of memory");
	for (int u = 0, f; u < g->nnodes; u++)
		if ((f = fusable_filter(g, u, ws_max)) >= 0) {
			if ((rc = rewrite(g, u, f)) < 0) {
				free(fs);
				return rc;
			}
			fs[fused++] = f;
		}
	qsort(fs, (size_t)fused, sizeof *fs, desc); /* the last first: earlier indices stay */
	for (int k = 0; k < fused; k++)
		hp_graph_remove_node(g, fs[k]);
	free(fs);
	if (!fused)
		return 0;
	if ((rc = hp_graph_finalize(g)) < 0 || (rc = hp_graph_infer(g)) < 0)
		return rc;
	return fused;
}
