/* A Transpose feeding a matrix product, absorbed as a transposed operand:
 * MatMul(Transpose(A), B) or MatMul(A, Transpose(B)) of rank-2 operands
 * becomes Gemm(A, B) with transA/transB, which hands the layout to sgemm
 * instead of copying the matrix (a Transpose left with no reader is
 * removed).  Gemm may round differently from MatMul, so the pass runs in
 * core and out of core alike (Gemm splits out of core like MatMul). */
#include <stdio.h>

#include "exec/fuse_internal.h"

/* The input of a Transpose of a matrix producing v, or -1. */
static int transposed(const struct hp_graph *g, int v)
{
	int t = hp_fz_producer(g, v, "Transpose");
	const int64_t *p = NULL;
	int np;

	if (t < 0 || g->values[v].shape.rank != 2)
		return -1;
	np = hp_attr_ints(&g->nodes[t], "perm", &p);
	return np <= 0 || (np == 2 && p[0] == 1 && p[1] == 0) ? g->nodes[t].inputs[0] : -1;
}

static int rewrite(struct hp_graph *g, int mm, int a, int b, struct hp_fuse_report *r)
{
	int in[2] = { a >= 0 ? a : g->nodes[mm].inputs[0], b >= 0 ? b : g->nodes[mm].inputs[1] }, f, rc = 0;
	char line[512];

	snprintf(line, sizeof line, "Transpose into %s operand of MatMul '%s' (now a Gemm)",
		 a >= 0 && b >= 0 ? "both" : a >= 0 ? "the first" : "the second", g->nodes[mm].name);
	if ((f = hp_fz_add_node(g, g->nodes[mm].name, "Gemm", 0, 2, in, g->nodes[mm].outputs[0])) < 0)
		return f;
	if (a >= 0)
		rc = hp_fz_attr_int(g, f, "transA", 1);
	if (rc == 0 && b >= 0)
		rc = hp_fz_attr_int(g, f, "transB", 1);
	if (rc < 0)
		return rc;
	hp_fz_note(r, "Transpose+MatMul", line);
	hp_graph_remove_node(g, mm);
	hp_fz_remove_dead(g);
	return 1;
}

int hp_fuse_transpose_gemm(struct hp_graph *g, struct hp_fuse_report *r)
{
	for (int i = 0; i < g->nnodes; i++) {
		const struct hp_node *n = &g->nodes[i];
		int a, b;
		if (!hp_fz_is(n, "MatMul") || n->ninputs != 2 || n->folded || g->values[n->outputs[0]].dtype != HP_F32 ||
		    g->values[n->inputs[0]].shape.rank != 2 || g->values[n->inputs[1]].shape.rank != 2 ||
		    g->values[n->inputs[0]].dtype != HP_F32 || g->values[n->inputs[1]].dtype != HP_F32)
			continue;
		a = transposed(g, n->inputs[0]);
		b = transposed(g, n->inputs[1]);
		if (a >= 0 || b >= 0)
			return rewrite(g, i, a, b, r);
	}
	return 0;
}
