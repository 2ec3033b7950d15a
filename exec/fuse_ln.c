/* LayerNorm as torch.onnx writes it below opset 17,
 *
 *   m = ReduceMean(x, trailing axes)   d = Sub(x, m)
 *   v = ReduceMean(Pow(d, 2) or Mul(d, d), same axes)
 *   y = Div(d, Sqrt(Add(v, eps))) [* gamma] [+ beta]
 *
 * into one LayerNormalization (kernels/norm.c: statistics in double, one
 * row per thread in a fixed order).  Only when every intermediate is read
 * inside the pattern and gamma and beta broadcast over the normalized axes
 * alone.  LayerNormalization rounds differently from the chain, so the
 * pass runs in core and out of core alike. */
#include <stdio.h>
#include <string.h>

#include "exec/fuse_internal.h"

struct ln_match {
	int nodes[10], n;
	int x, gamma, beta, out;
	int axis;                   /* first normalized axis */
	double eps;
};

/* ReduceMean node r over trailing axes of its input with keepdims: the
 * first axis, or -1.  Axes from the attribute or a constant input. */
static int trailing_axes(const struct hp_graph *g, const struct hp_node *r)
{
	const struct hp_value *x = &g->values[r->inputs[0]], *av;
	const int64_t *ax = NULL;
	int n = hp_attr_ints(r, "axes", &ax), rank = x->shape.rank, seen = 0;

	if (hp_attr_int(r, "keepdims", 1) != 1 || rank < 1)
		return -1;
	if (n <= 0 && r->ninputs > 1 && r->inputs[1] >= 0) {
		av = &g->values[r->inputs[1]];
		if (!av->data || av->dtype != HP_I64)
			return -1;
		ax = av->data;
		n = (int)hp_shape_numel(&av->shape);
	}
	if (n <= 0 || n > rank)
		return -1;
	for (int i = 0; i < n; i++) {
		int64_t a = ax[i] < 0 ? ax[i] + rank : ax[i];
		if (a < rank - n || a >= rank || (seen >> a & 1))
			return -1;
		seen |= 1 << a;
	}
	return rank - n;
}

/* The two distinct nodes reading d (d no graph output), in *a and *b. */
static int two_readers(const struct hp_graph *g, int d, int *a, int *b)
{
	*a = *b = -1;
	if (g->values[d].is_output)
		return 0;
	for (int i = 0; i < g->nnodes; i++)
		for (int j = 0; j < g->nodes[i].ninputs; j++)
			if (g->nodes[i].inputs[j] == d) {
				if (*a < 0 || *a == i)
					*a = i;
				else if (*b < 0 || *b == i)
					*b = i;
				else
					return 0;
			}
	return *b >= 0;
}

/* Mul/Add node k reading v, other operand a float value broadcasting over
 * x's axes from `axis` on only: that operand, else -1. */
static int affine(const struct hp_graph *g, int k, int v, const char *op, const struct ln_match *m)
{
	const struct hp_shape *xs = &g->values[m->x].shape, *ps;
	int o;

	if (k < 0 || !hp_fz_is(&g->nodes[k], op) || (o = hp_fz_other(&g->nodes[k], v)) < 0 || g->values[o].dtype != HP_F32)
		return -1;
	ps = &g->values[o].shape;
	if (ps->rank > xs->rank || !hp_shape_equal(&g->values[g->nodes[k].outputs[0]].shape, xs))
		return -1;
	for (int i = 0; i < ps->rank; i++) {
		int xd = i + xs->rank - ps->rank;
		if (ps->dims[i] != 1 && (xd < m->axis || ps->dims[i] != xs->dims[xd]))
			return -1;
	}
	return o;
}

static int take(struct ln_match *m, int node)
{
	m->nodes[m->n++] = node;
	return node;
}

/* From Div(d, s): the optional gamma and beta. */
static void tail(const struct hp_graph *g, int div, struct ln_match *m)
{
	int v = g->nodes[div].outputs[0], k = hp_fz_only_reader(g, v);

	m->out = v;
	m->gamma = m->beta = -1;
	if ((m->gamma = affine(g, k, v, "Mul", m)) < 0)
		return;
	m->out = g->nodes[take(m, k)].outputs[0];
	k = hp_fz_only_reader(g, m->out);
	if ((m->beta = affine(g, k, m->out, "Add", m)) >= 0)
		m->out = g->nodes[take(m, k)].outputs[0];
}

static int match_at(const struct hp_graph *g, int r1, struct ln_match *m)
{
	const struct hp_node *n = &g->nodes[r1];
	int sub, d, p, q, sq, r2, ad, st, dv;
	double two;

	m->n = 0;
	if (!hp_fz_is(n, "ReduceMean") || (m->axis = trailing_axes(g, n)) < 0 || g->values[n->inputs[0]].dtype != HP_F32)
		return 0;
	m->x = n->inputs[0];
	if ((sub = hp_fz_only_reader(g, n->outputs[0])) < 0 || !hp_fz_is(&g->nodes[sub], "Sub") ||
	    g->nodes[sub].inputs[0] != m->x || g->nodes[sub].inputs[1] != n->outputs[0])
		return 0;
	d = g->nodes[sub].outputs[0];
	if (!two_readers(g, d, &p, &q))
		return 0;
	sq = hp_fz_is(&g->nodes[p], "Div") ? q : p;
	dv = sq == p ? q : p;
	if (!(hp_fz_is(&g->nodes[sq], "Mul") && g->nodes[sq].inputs[0] == d && g->nodes[sq].inputs[1] == d) &&
	    !(hp_fz_is(&g->nodes[sq], "Pow") && g->nodes[sq].inputs[0] == d && hp_fz_scalar(g, g->nodes[sq].inputs[1], &two) &&
	      two == 2.0))
		return 0;
	if ((r2 = hp_fz_only_reader(g, g->nodes[sq].outputs[0])) < 0 || !hp_fz_is(&g->nodes[r2], "ReduceMean") ||
	    trailing_axes(g, &g->nodes[r2]) != m->axis)
		return 0;
	if ((ad = hp_fz_only_reader(g, g->nodes[r2].outputs[0])) < 0 || !hp_fz_is(&g->nodes[ad], "Add") ||
	    !hp_fz_scalar(g, hp_fz_other(&g->nodes[ad], g->nodes[r2].outputs[0]), &m->eps))
		return 0;
	if ((st = hp_fz_only_reader(g, g->nodes[ad].outputs[0])) < 0 || !hp_fz_is(&g->nodes[st], "Sqrt") ||
	    hp_fz_only_reader(g, g->nodes[st].outputs[0]) != dv || !hp_fz_is(&g->nodes[dv], "Div") ||
	    g->nodes[dv].inputs[0] != d || g->nodes[dv].inputs[1] != g->nodes[st].outputs[0])
		return 0;
	int all[] = { r1, sub, sq, r2, ad, st, dv };
	for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
		take(m, all[i]);
	tail(g, dv, m);
	return m->gamma >= 0; /* LayerNormalization needs a scale */
}

static int rewrite(struct hp_graph *g, struct ln_match *m, struct hp_fuse_report *r)
{
	int in[3] = { m->x, m->gamma, m->beta }, f, rc;
	char line[512];

	snprintf(line, sizeof line, "LayerNorm (%d nodes) into LayerNormalization '%s'", m->n, g->values[m->out].name);
	if ((f = hp_fz_add_node(g, g->values[m->out].name, "LayerNormalization", 0, m->beta >= 0 ? 3 : 2, in, m->out)) < 0)
		return f;
	if ((rc = hp_fz_attr_int(g, f, "axis", m->axis)) < 0 || (rc = hp_fz_attr_float(g, f, "epsilon", (float)m->eps)) < 0)
		return rc;
	hp_fz_note(r, "LayerNorm", line);
	r->nodes_removed += m->n - 1;
	hp_fz_remove(g, m->nodes, m->n);
	return 1;
}

int hp_fuse_layernorm(struct hp_graph *g, struct hp_fuse_report *r)
{
	struct ln_match m;

	for (int i = 0; i < g->nnodes; i++)
		if (match_at(g, i, &m))
			return rewrite(g, &m, r);
	return 0;
}
