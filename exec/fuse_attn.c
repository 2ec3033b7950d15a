/* Attention into one FusedAttention (kernels/fused_attn.c, an online
 * softmax over tiles: the T x S scores are never held whole):
 *
 *   MatMul(Q, Kt) [Mul|Div by a constant scalar] [Add mask | Where(cond,
 *   fill, .) | Where(cond, ., fill)] Softmax(last axis) MatMul(., V)
 *
 * Transposes feeding Q, Kt or V are absorbed: the kernel reads the
 * Transpose's input through the composed permutation (a Transpose left
 * with no reader is removed); so is a Transpose that alone reads the
 * result (the kernel writes through its permutation).  Every intermediate must be read only by
 * the next node of the pattern.  The kernel rounds differently from the
 * chain, so the pass runs in core and out of core alike. */
#include <stdio.h>
#include <string.h>

#include "exec/fuse_internal.h"

struct attn_match {
	int mm1, scale, mask_node, sm, mm2;
	int q, k, v, mask;
	int64_t perm[3][HP_MAX_RANK];
	int rank[3];
	int mask_kind, when;
	double scale_by, fill;
	int tr, out;                /* a Transpose of the result absorbed (-1: none), the fused output */
	int64_t operm[HP_MAX_RANK];
	int orank;
};

/* A Transpose reading only the attention result: the kernel writes its
 * output directly (the heads' results side by side, ready for a Reshape). */
static void out_transpose(const struct hp_graph *g, struct attn_match *m)
{
	int y = g->nodes[m->mm2].outputs[0], t = hp_fz_only_reader(g, y);
	const int64_t *p = NULL;
	int r = g->values[y].shape.rank, np;

	m->tr = -1;
	m->out = y;
	m->orank = r;
	if (t < 0 || !hp_fz_is(&g->nodes[t], "Transpose"))
		return;
	np = hp_attr_ints(&g->nodes[t], "perm", &p);
	if (np > 0 && np != r)
		return;
	for (int i = 0; i < r; i++)
		m->operm[i] = np > 0 ? p[i] : r - 1 - i;
	m->tr = t;
	m->out = g->nodes[t].outputs[0];
}

/* Follow Transposes up from operand value v: the stored value and the
 * permutation that gives v from it. */
static int absorb(const struct hp_graph *g, int v, int64_t *perm, int *rank)
{
	int r = g->values[v].shape.rank, t;

	*rank = r;
	for (int i = 0; i < r; i++)
		perm[i] = i;
	while ((t = hp_fz_producer(g, v, "Transpose")) >= 0) {
		const int64_t *p = NULL;
		int64_t c[HP_MAX_RANK];
		int np = hp_attr_ints(&g->nodes[t], "perm", &p);
		if (np != r && np > 0)
			break;
		for (int i = 0; i < r; i++)
			c[i] = np > 0 ? p[perm[i]] : r - 1 - perm[i];
		memcpy(perm, c, sizeof c);
		v = g->nodes[t].inputs[0];
	}
	return v;
}

/* The constant scale between the scores and u: *u moves up past it. */
static int scale_of(const struct hp_graph *g, int *u, struct attn_match *m)
{
	int p = g->values[*u].producer, o;
	double c;

	m->scale = -1;
	m->scale_by = 1.0;
	if (p < 0 || hp_fz_only_reader(g, g->nodes[p].outputs[0]) < 0)
		return 1;
	if (hp_fz_is(&g->nodes[p], "Div") && g->nodes[p].ninputs == 2 && hp_fz_scalar(g, g->nodes[p].inputs[1], &c) && c != 0) {
		m->scale_by = 1.0 / c;
		*u = g->nodes[p].inputs[0];
	} else if (hp_fz_is(&g->nodes[p], "Mul") && g->nodes[p].ninputs == 2 &&
		   ((hp_fz_scalar(g, g->nodes[p].inputs[1], &c) && (o = g->nodes[p].inputs[0]) >= 0) ||
		    (hp_fz_scalar(g, g->nodes[p].inputs[0], &c) && (o = g->nodes[p].inputs[1]) >= 0))) {
		m->scale_by = c;
		*u = o;
	} else {
		return 1;
	}
	m->scale = p;
	return 1;
}

/* The mask between the (scaled) scores and the Softmax input *u. */
static int mask_of(const struct hp_graph *g, int *u, struct attn_match *m)
{
	int p = g->values[*u].producer;
	const struct hp_node *n = p >= 0 ? &g->nodes[p] : NULL;
	const struct hp_shape *ys = n ? &g->values[n->outputs[0]].shape : NULL;

	m->mask_node = m->mask = -1;
	m->mask_kind = 0;
	if (!n || hp_fz_only_reader(g, n->outputs[0]) < 0)
		return 1;
	for (int side = 0; side < 2 && hp_fz_is(n, "Add") && n->ninputs == 2; side++) {
		int c = n->inputs[side], k = n->inputs[1 - side], cp = g->values[c].producer;
		const struct hp_shape *ks = &g->values[k].shape;
		if (cp < 0 || !(hp_fz_is(&g->nodes[cp], "MatMul") || hp_fz_is(&g->nodes[cp], "Mul") ||
				hp_fz_is(&g->nodes[cp], "Div")) || g->values[k].dtype != HP_F32 || ks->rank < 2 ||
		    !hp_shape_equal(&g->values[c].shape, ys))
			continue;
		m->mask = k, m->mask_kind = 1, m->mask_node = p, *u = c;
		return 1;
	}
	if (hp_fz_is(n, "Where") && n->ninputs == 3 && g->values[n->inputs[0]].shape.rank >= 2) {
		for (int side = 1; side < 3; side++) {
			int c = n->inputs[3 - side];
			if (!hp_fz_scalar(g, n->inputs[side], &m->fill) || !hp_shape_equal(&g->values[c].shape, ys))
				continue;
			m->mask = n->inputs[0], m->mask_kind = 2, m->when = side == 1, m->mask_node = p, *u = c;
			return 1;
		}
	}
	return 1;
}

static int match_at(const struct hp_graph *g, int s, struct attn_match *m)
{
	const struct hp_node *n = &g->nodes[s];
	int r, u, opset13 = g->opset >= 13;
	int64_t ax;

	if (!hp_fz_is(n, "Softmax") || g->values[n->outputs[0]].dtype != HP_F32)
		return 0;
	r = g->values[n->outputs[0]].shape.rank;
	ax = hp_attr_int(n, "axis", opset13 ? -1 : 1);
	if (r < 2 || (ax < 0 ? ax + r : ax) != r - 1)
		return 0;
	m->sm = s;
	if ((m->mm2 = hp_fz_only_reader(g, n->outputs[0])) < 0 || !hp_fz_is(&g->nodes[m->mm2], "MatMul") ||
	    g->nodes[m->mm2].inputs[0] != n->outputs[0] || g->nodes[m->mm2].inputs[1] == n->outputs[0])
		return 0;
	u = n->inputs[0];
	if (hp_fz_only_reader(g, u) != s)
		return 0;
	mask_of(g, &u, m);
	scale_of(g, &u, m);
	if ((m->mm1 = hp_fz_producer(g, u, "MatMul")) < 0 || hp_fz_only_reader(g, u) < 0 || g->nodes[m->mm1].ninputs != 2)
		return 0;
	int ops[3] = { g->nodes[m->mm1].inputs[0], g->nodes[m->mm1].inputs[1], g->nodes[m->mm2].inputs[1] };
	for (int i = 0; i < 3; i++)
		if (g->values[ops[i]].shape.rank < 2 || g->values[ops[i]].dtype != HP_F32)
			return 0;
	m->q = absorb(g, ops[0], m->perm[0], &m->rank[0]);
	m->k = absorb(g, ops[1], m->perm[1], &m->rank[1]);
	m->v = absorb(g, ops[2], m->perm[2], &m->rank[2]);
	out_transpose(g, m);
	return 1;
}

static int rewrite(struct hp_graph *g, struct attn_match *m, struct hp_fuse_report *r)
{
	static const char *const pn[3] = { "qperm", "kperm", "vperm" };
	int in[4] = { m->q, m->k, m->v, m->mask }, out = m->out, f, rc = 0;
	int gone[6] = { m->mm1, m->scale, m->mask_node, m->sm, m->mm2, m->tr };
	char line[512];

	snprintf(line, sizeof line, "Attention (%s%s%s) into FusedAttention '%s'", m->scale >= 0 ? "scaled, " : "",
		 m->mask_kind == 1 ? "added mask" : m->mask_kind == 2 ? "Where mask" : "no mask",
		 m->tr >= 0 ? ", result transposed" : "", g->values[out].name);
	if ((f = hp_fz_add_node(g, g->values[out].name, "FusedAttention", 1, m->mask_kind ? 4 : 3, in, out)) < 0)
		return f;
	for (int i = 0; i < 3 && rc == 0; i++)
		rc = hp_fz_attr_ints(g, f, pn[i], m->perm[i], m->rank[i]);
	if (rc == 0 && m->tr >= 0)
		rc = hp_fz_attr_ints(g, f, "operm", m->operm, m->orank);
	if (rc == 0)
		rc = hp_fz_attr_float(g, f, "scale", (float)m->scale_by);
	if (rc == 0)
		rc = hp_fz_attr_int(g, f, "mask_kind", m->mask_kind);
	if (rc == 0 && m->mask_kind == 2)
		rc = hp_fz_attr_float(g, f, "mask_fill", (float)m->fill);
	if (rc == 0 && m->mask_kind == 2)
		rc = hp_fz_attr_int(g, f, "mask_when", m->when);
	if (rc < 0)
		return rc;
	hp_fz_note(r, "Attention", line);
	r->nodes_removed += 4 - (m->scale < 0) - (m->mask_node < 0) + (m->tr >= 0);
	hp_fz_remove(g, gone, 6);
	hp_fz_remove_dead(g);
	return 1;
}

int hp_fuse_attention(struct hp_graph *g, struct hp_fuse_report *r)
{
	struct attn_match m;

	for (int i = 0; i < g->nnodes; i++)
		if (match_at(g, i, &m))
			return rewrite(g, &m, r);
	return 0;
}
