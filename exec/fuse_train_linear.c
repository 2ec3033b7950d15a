/* Training's linear layers as torch exports them, MatMul(X, Transpose(W))
 * with W [N, K] a weight and X [..., K], into Gemm(X rows, W, transB 1):
 *
 *   X [.., K] -Flatten(axis r-1)-> [R, K] -Gemm(transB)-> [R, N] -Reshape-> Y [.., N]
 *
 * (X of rank 2 goes to the Gemm as it is).  Inference folds such a
 * Transpose once (fuse_const.c); training cannot, the weight changes, so
 * every step copied every weight and its gradient back (Transpose and
 * TransposeGrad: 7% of a GPT-2-style step).  The Gemm reads W transposed
 * in place, and its gradient writes dW in W's layout (kernels/gemm_grad.c).
 * Flatten and Reshape of contiguous rows are views.  The product's chains
 * are the MatMul's (gemm_fma.h); dX's run over N from the last column,
 * as GemmGrad's do for the feature cuts of a budget (exec/split_weight.c
 * cuts a transB Gemm along its output features, bitwise the whole).  Runs
 * in core and under a budget alike. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hpdlf/error.h"
#include "exec/fuse_internal.h"

/* W when v is Transpose(W), W a 2-D float value, perm [1, 0] (or none),
 * and v read by node `by` alone; else -1. */
static int weight_of(const struct hp_graph *g, int v, int by)
{
	int t = hp_fz_producer(g, v, "Transpose"), w;
	const int64_t *p = NULL;
	int np;

	if (t < 0 || g->nodes[t].ninputs != 1 || hp_fz_only_reader(g, v) != by)
		return -1;
	w = g->nodes[t].inputs[0];
	np = hp_attr_ints(&g->nodes[t], "perm", &p);
	if (w < 0 || g->values[w].shape.rank != 2 || g->values[w].dtype != HP_F32 ||
	    !(np <= 0 || (np == 2 && p[0] == 1 && p[1] == 0)))
		return -1;
	return w;
}

/* MatMul node mm (X, Transpose(w)) -> y into the Gemm (and its views). */
static int rewrite(struct hp_graph *g, int mm, int w, struct hp_fuse_report *r)
{
	int x = g->nodes[mm].inputs[0], y = g->nodes[mm].outputs[0], rank = g->values[x].shape.rank;
	int rows = x, y2 = y, in[2], f, rc;
	char name[600], line[700];

	snprintf(line, sizeof line, "MatMul '%s' of a transposed weight '%s' into a Gemm (transB)", g->nodes[mm].name,
		 g->values[w].name);
	if (rank > 2) {
		if ((rows = hp_fz_new_value(g, y, "rows")) < 0 || (y2 = hp_fz_new_value(g, y, "2d")) < 0)
			return rows < 0 ? rows : y2;
		snprintf(name, sizeof name, "%s/rows", g->nodes[mm].name);
		if ((f = hp_fz_add_node(g, name, "Flatten", 0, 1, &x, rows)) < 0 ||
		    (rc = hp_fz_attr_int(g, f, "axis", rank - 1)) < 0)
			return f < 0 ? f : rc;
		const struct hp_shape *ys = &g->values[y].shape;
		int sv = hp_fz_i64_init(g, g->values[y].name, ".shape", ys->dims, ys->rank), rin[2] = { y2, sv };
		snprintf(name, sizeof name, "%s/unrows", g->nodes[mm].name);
		if (sv < 0 || (f = hp_fz_add_node(g, name, "Reshape", 0, 2, rin, y)) < 0)
			return sv < 0 ? sv : f;
	}
	in[0] = rows, in[1] = w;
	snprintf(name, sizeof name, "%s/gemm", g->nodes[mm].name);
	if ((f = hp_fz_add_node(g, name, "Gemm", 0, 2, in, y2)) < 0 || (rc = hp_fz_attr_int(g, f, "transB", 1)) < 0)
		return f < 0 ? f : rc;
	hp_fz_note(r, "Transpose+MatMul (training)", line);
	hp_graph_remove_node(g, mm);
	hp_fz_remove_dead(g);
	return 1;
}

int hp_fuse_train_linear(struct hp_graph *g, struct hp_fuse_report *r)
{
	for (int i = 0; i < g->nnodes; i++) {
		const struct hp_node *n = &g->nodes[i];
		int w;
		if (!hp_fz_is(n, "MatMul") || n->folded || n->ninputs != 2 || n->noutputs != 1 || n->inputs[0] < 0 ||
		    n->inputs[1] < 0 || n->outputs[0] < 0 || g->values[n->inputs[0]].dtype != HP_F32 ||
		    g->values[n->inputs[0]].shape.rank < 2 || g->values[n->outputs[0]].dtype != HP_F32)
			continue;
		if ((w = weight_of(g, n->inputs[1], i)) >= 0)
			return rewrite(g, i, w, r);
	}
	return 0;
}
