/* GELU as exporters write it, into one FusedGelu (kernels/fused.c):
 *
 *   erf form   0.5 x (1 + erf(x / sqrt 2))   Div(x, 1.414..) or Mul(x, 0.707..),
 *              Erf, Add 1, then Mul x and Mul 0.5 (or Mul by Mul(x, 0.5))
 *   tanh form  0.5 x (1 + tanh(0.797.. (x + 0.044715 x^3)))   x^3 as
 *              Pow(x, 3) or Mul(x, Mul(x, x)); then the same tail
 *
 * (torch.onnx writes the first for F.gelu and the second for
 * approximate='tanh' and GPT-2's new_gelu).  Operand order of Add and Mul
 * is free; every intermediate must be read only inside the pattern.  The
 * fused kernel rounds differently from the chain (one expression in
 * float32), so the pass runs in core and out of core alike. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "exec/fuse_internal.h"

#define MAXN 16 /* the tanh form with x^3 as two Muls is 9 nodes */

struct gelu_match {
	int nodes[MAXN], n;
	int x, out;
	int tanh_form;
};

/* Binary node `node` (op) reads v and a constant scalar near want: 1. */
static int with_scalar(const struct hp_graph *g, int node, const char *op, int v, double want)
{
	double c;
	int o;

	return node >= 0 && hp_fz_is(&g->nodes[node], op) && (o = hp_fz_other(&g->nodes[node], v)) >= 0 &&
	       hp_fz_scalar(g, o, &c) && hp_fz_near(c, want);
}

static void take(struct gelu_match *m, int node)
{
	if (m->n < MAXN)
		m->nodes[m->n++] = node;
}

/* After erf/tanh output u: Add 1, then x * that * 0.5 in either grouping. */
static int tail(const struct hp_graph *g, int u, struct gelu_match *m)
{
	int a = hp_fz_only_reader(g, u), m1, m2, o, h;

	if (!with_scalar(g, a, "Add", u, 1.0))
		return 0;
	take(m, a);
	u = g->nodes[a].outputs[0];
	if ((m1 = hp_fz_only_reader(g, u)) < 0 || !hp_fz_is(&g->nodes[m1], "Mul") || (o = hp_fz_other(&g->nodes[m1], u)) < 0)
		return 0;
	take(m, m1);
	if (o == m->x) { /* (x * (1 + erf)) * 0.5 */
		m2 = hp_fz_only_reader(g, g->nodes[m1].outputs[0]);
		if (!with_scalar(g, m2, "Mul", g->nodes[m1].outputs[0], 0.5))
			return 0;
		take(m, m2);
		m->out = g->nodes[m2].outputs[0];
		return 1;
	}
	h = g->values[o].producer; /* (x * 0.5) * (1 + erf) */
	if (h < 0 || !with_scalar(g, h, "Mul", m->x, 0.5) || hp_fz_only_reader(g, o) != m1)
		return 0;
	take(m, h);
	m->out = g->nodes[m1].outputs[0];
	return 1;
}

/* Erf node e: its input is x / sqrt 2 (or x * 1/sqrt 2) read only by e. */
static int erf_form(const struct hp_graph *g, int e, struct gelu_match *m)
{
	int s = g->values[g->nodes[e].inputs[0]].producer;
	const struct hp_node *d = s >= 0 ? &g->nodes[s] : NULL;
	double c;

	if (!d || hp_fz_only_reader(g, d->outputs[0]) != e || d->ninputs != 2)
		return 0;
	if (hp_fz_is(d, "Div") && hp_fz_scalar(g, d->inputs[1], &c) && hp_fz_near(c, sqrt(2.0)))
		m->x = d->inputs[0];
	else if (hp_fz_is(d, "Mul") && hp_fz_scalar(g, d->inputs[1], &c) && hp_fz_near(c, sqrt(0.5)))
		m->x = d->inputs[0];
	else if (hp_fz_is(d, "Mul") && hp_fz_scalar(g, d->inputs[0], &c) && hp_fz_near(c, sqrt(0.5)))
		m->x = d->inputs[1];
	else
		return 0;
	take(m, s);
	take(m, e);
	return tail(g, g->nodes[e].outputs[0], m);
}

/* v is x^3 (Pow(x, 3), Mul(x, Mul(x, x)), Mul(Mul(x, x), x)), read once. */
static int cube_of(const struct hp_graph *g, int v, int x, struct gelu_match *m)
{
	int p = g->values[v].producer, q;
	const struct hp_node *n = p >= 0 ? &g->nodes[p] : NULL;

	if (!n || hp_fz_only_reader(g, v) < 0)
		return 0;
	if (with_scalar(g, p, "Pow", x, 3.0) && n->inputs[0] == x) {
		take(m, p);
		return 1;
	}
	if (!hp_fz_is(n, "Mul") || (q = hp_fz_other(n, x)) < 0 || (p = g->values[q].producer) < 0)
		return 0;
	if (!hp_fz_is(&g->nodes[p], "Mul") || g->nodes[p].inputs[0] != x || g->nodes[p].inputs[1] != x ||
	    hp_fz_only_reader(g, q) < 0)
		return 0;
	take(m, g->values[v].producer);
	take(m, p);
	return 1;
}

/* Tanh node t: its input is 0.797.. * (x + 0.044715 x^3). */
static int tanh_form(const struct hp_graph *g, int t, struct gelu_match *m)
{
	int u = g->nodes[t].inputs[0], s = g->values[u].producer, in, a, k, kp;
	const double beta = 0.79788456080286536; /* sqrt(2 / pi) */

	if (s < 0 || hp_fz_only_reader(g, u) != t || !hp_fz_is(&g->nodes[s], "Mul") || g->nodes[s].ninputs != 2)
		return 0;
	in = with_scalar(g, s, "Mul", g->nodes[s].inputs[0], beta) ? g->nodes[s].inputs[0] : g->nodes[s].inputs[1];
	if (!with_scalar(g, s, "Mul", in, beta) || (a = g->values[in].producer) < 0 || !hp_fz_is(&g->nodes[a], "Add") ||
	    hp_fz_only_reader(g, in) != s || g->nodes[a].ninputs != 2)
		return 0;
	for (int side = 0; side < 2; side++) {
		m->n = 0;
		k = g->nodes[a].inputs[side];
		m->x = g->nodes[a].inputs[1 - side];
		kp = g->values[k].producer;
		if (kp < 0 || hp_fz_only_reader(g, k) != a || !hp_fz_is(&g->nodes[kp], "Mul"))
			continue;
		int c0 = g->nodes[kp].inputs[0], c1 = g->nodes[kp].inputs[1];
		int cv = with_scalar(g, kp, "Mul", c0, 0.044715) ? c0 : with_scalar(g, kp, "Mul", c1, 0.044715) ? c1 : -1;
		if (cv < 0 || !cube_of(g, cv, m->x, m))
			continue;
		take(m, kp);
		take(m, a);
		take(m, s);
		take(m, t);
		m->tanh_form = 1;
		if (tail(g, g->nodes[t].outputs[0], m))
			return 1;
	}
	return 0;
}

static int rewrite(struct hp_graph *g, struct gelu_match *m, struct hp_fuse_report *r)
{
	char line[512];
	int f;

	snprintf(line, sizeof line, "Gelu (%s form, %d nodes) into FusedGelu '%s'", m->tanh_form ? "tanh" : "erf", m->n,
		 g->values[m->out].name);
	if ((f = hp_fz_add_node(g, g->values[m->out].name, "FusedGelu", 1, 1, &m->x, m->out)) < 0)
		return f;
	if ((f = hp_fz_attr_str(g, f, "approximate", m->tanh_form ? "tanh" : "none")) < 0)
		return f;
	hp_fz_note(r, m->tanh_form ? "Gelu (tanh form)" : "Gelu (erf form)", line);
	r->nodes_removed += m->n - 1;
	hp_fz_remove(g, m->nodes, m->n);
	return 1;
}

int hp_fuse_gelu(struct hp_graph *g, struct hp_fuse_report *r)
{
	for (int i = 0; i < g->nnodes; i++) {
		struct gelu_match m = { .n = 0 };
		if (g->values[g->nodes[i].outputs[0]].dtype != HP_F32)
			continue;
		if ((hp_fz_is(&g->nodes[i], "Erf") && erf_form(g, i, &m)) ||
		    (hp_fz_is(&g->nodes[i], "Tanh") && tanh_form(g, i, &m)))
			return rewrite(g, &m, r);
	}
	return 0;
}
