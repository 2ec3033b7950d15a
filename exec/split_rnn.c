/* Recurrent nodes cut into bands of batch entries (see split.h): the
 * weight gradients of the bands chained into the whole node's sum.
 *
 * The band pass (split_band.c) gives each band of an RNN, GRU or LSTM
 * attribute hpdlf_rnn_band = { first entry, end, whole batch }, which
 * autodiff copies onto its RNNGrad.  Each band's forward and data
 * gradients are the whole node's rows (every entry is computed alone, in
 * double, kernels/rnn.c); its weight gradients are partial sums, which
 * autodiff adds with GradSums in float, last band first.  The whole node
 * adds in double over its entries from the last to the first and rounds
 * once (kernels/rnn_grad.c), so here each GradSum of two neighbouring
 * bands' weight gradients (the later band's sum, then the earlier band's)
 * becomes the earlier band's RNNGrad continuing the later one's running
 * sum (its input 11-14; the later band writes that sum in float64,
 * attribute "partial"): the chain adds what the whole adds, bit for bit. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "hpdlf/error.h"
#include "exec/exec_internal.h"
#include "exec/split.h"

#define RG_BASE 3              /* RNNGrad's forward inputs start here */
#define RG_ACC (RG_BASE + 8)   /* its running sums of outputs 1, 2, 3, 7 */

static int is_rnn_grad(const struct hp_node *n)
{
	return !strcmp(n->domain, "ai.hpdlf") && !strcmp(n->op_type, "RNNGrad");
}

/* Index of the running sum of output k (1, 2, 3, 7), -1 for the others. */
static int acc_slot(int k)
{
	return k >= 1 && k <= 3 ? k - 1 : k == 7 ? 3 : -1;
}

static int out_slot(const struct hp_node *n, int v)
{
	for (int o = 0; o < n->noutputs; o++)
		if (n->outputs[o] == v)
			return o;
	return -1;
}

static int band_of(const struct hp_node *n, int64_t *lo, int64_t *hi, int64_t *whole)
{
	const int64_t *t;

	if (hp_attr_ints(n, "hpdlf_rnn_band", &t) != 3)
		return 0;
	*lo = t[0], *hi = t[1], *whole = t[2];
	return 1;
}

/* Attribute "partial" of node i with bit k set. */
static int set_partial(struct hp_graph *g, int i, int k)
{
	struct hp_node *n = &g->nodes[i];

	for (int a = 0; a < n->nattrs; a++)
		if (!strcmp(n->attrs[a].name, "partial")) {
			n->attrs[a].i |= (int64_t)1 << k;
			return 0;
		}
	return hp_graph_add_attr(g, i, &(struct hp_attr){ .name = "partial", .type = HP_ATTR_INT,
							  .i = (int64_t)1 << k });
}

/* GradSum node s adds a (the later band's sum) and c (the earlier's):
 * chain them; 1 if done, 0 if s is no such sum, < 0 on error. */
static int chain_sum(struct hp_graph *g, int s, const int *prod)
{
	const struct hp_node *sum = &g->nodes[s];
	int a, c, pa, pc, k, ka, slot, *in;
	int64_t alo, ahi, aw, clo, chi, cw;

	if (strcmp(sum->op_type, "GradSum") || sum->ninputs != 2 || sum->noutputs != 1)
		return 0;
	a = sum->inputs[0], c = sum->inputs[1];
	if (a < 0 || c < 0 || (pa = prod[a]) < 0 || (pc = prod[c]) < 0 || pa == pc ||
	    !is_rnn_grad(&g->nodes[pa]) || !is_rnn_grad(&g->nodes[pc]))
		return 0;
	k = out_slot(&g->nodes[pc], c);
	ka = out_slot(&g->nodes[pa], a);
	slot = acc_slot(k);
	if (slot < 0 || ka != k || g->values[a].nconsumers != 1 || g->values[c].nconsumers != 1 ||
	    g->nodes[pa].inputs[RG_BASE + k] != g->nodes[pc].inputs[RG_BASE + k] ||
	    !band_of(&g->nodes[pa], &alo, &ahi, &aw) || !band_of(&g->nodes[pc], &clo, &chi, &cw) ||
	    aw != cw || alo != chi || strcmp(hp_attr_string(&g->nodes[pa], "op", ""), hp_attr_string(&g->nodes[pc], "op", "")))
		return 0;
	if (g->nodes[pc].ninputs > RG_ACC + slot && g->nodes[pc].inputs[RG_ACC + slot] >= 0)
		return 0;
	if (g->nodes[pc].ninputs < RG_ACC + 4) {
		if (!(in = realloc(g->nodes[pc].inputs, (RG_ACC + 4) * sizeof *in)))
			return hp_error(-ENOMEM, "out of memory");
		for (int j = g->nodes[pc].ninputs; j < RG_ACC + 4; j++)
			in[j] = -1;
		g->nodes[pc].inputs = in;
		g->nodes[pc].ninputs = RG_ACC + 4;
	}
	if (set_partial(g, pa, k) < 0)
		return hp_error(-ENOMEM, "out of memory");
	g->nodes[pc].inputs[RG_ACC + slot] = a;
	g->nodes[pc].outputs[k] = g->nodes[s].outputs[0];
	return 1;
}

int hp_split_rnn_chain(struct hp_graph *g)
{
	int *prod, count = 0, rc = 0, any = 0;
	char *dead;

	for (int i = 0; i < g->nnodes && !any; i++)
		any = is_rnn_grad(&g->nodes[i]) && hp_node_attr(&g->nodes[i], "hpdlf_rnn_band");
	if (!any)
		return 0;
	prod = malloc(((size_t)g->nvalues + 1) * sizeof *prod);
	dead = calloc((size_t)g->nnodes + 1, 1);
	if (!prod || !dead) {
		free(prod), free(dead);
		return hp_error(-ENOMEM, "out of memory");
	}
	for (int v = 0; v < g->nvalues; v++)
		prod[v] = -1;
	for (int i = 0; i < g->nnodes; i++)
		for (int o = 0; o < g->nodes[i].noutputs; o++)
			if (g->nodes[i].outputs[o] >= 0)
				prod[g->nodes[i].outputs[o]] = i;
	/* in node order: a chain's sums come last band first, and each sum
	 * rewritten makes its output the next sum's first term's */
	for (int i = 0; i < g->nnodes && rc >= 0; i++) {
		if ((rc = chain_sum(g, i, prod)) <= 0)
			continue;
		int pc = prod[g->nodes[i].inputs[1]];
		prod[g->nodes[i].outputs[0]] = pc;
		dead[i] = 1;
		count++;
	}
	for (int i = g->nnodes - 1; rc >= 0 && i >= 0; i--)
		if (dead[i])
			hp_graph_remove_node(g, i);
	free(prod);
	free(dead);
	if (rc >= 0 && count && ((rc = hp_graph_finalize(g)) < 0 || (rc = hp_graph_infer(g)) < 0))
		return rc;
	return rc < 0 ? rc : count;
}
