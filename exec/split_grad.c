/* Exact data gradients of window ops cut in rows (split.h,
 * hp_split_grad_exact).
 *
 * A band of a Conv or pooling reads a window of its input: its own rows
 * and halo rows of the neighbouring bands.  Autodiff gives each band the
 * gradient of its whole window, so an input row in a halo gets two partial
 * sums, added after the fact: not the whole kernel's bits.  Here each
 * band's ConvGradData (MaxPoolGrad, AveragePoolGrad) is replaced by the
 * whole kernel's rows for the input rows the band owns (from the dY rows
 * of every band they need, and for MaxPoolGrad the X rows under their
 * windows), padded with zeros to its window; the other bands' halo parts
 * then add zeros.  The pooling gradients add each output's share in output
 * order from zero, plane by plane (pool_grad.c), so any cut of rows whose
 * windows it holds whole is the whole's. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hpdlf/error.h"
#include "exec/split.h"
#include "kernels/band.h"

/* Band i of a group: its ConvGradData node and where its rows lie. */
struct gband {
	int node;
	const int64_t *t;      /* hpdlf_band (split_band.c tag_band) */
};

/* The rows one band computes exactly: owned [oa, ob) of the input, cut
 * [wa, wb) aligned to the kernel's tiles, from dY rows [ya, yb), pads on
 * the axis of that cut. */
struct cut {
	int64_t oa, ob, wa, wb, ya, yb, pl, ph;
};

/* The geometry of the group on its axis. */
struct ggeom {
	int axis, sp, nsp, pool;           /* pool: 1 MaxPoolGrad, 2 AveragePoolGrad */
	int64_t hin, hout, k, s, d, p;
	struct hp_cgd_bands cb;
	struct hp_shape xs, dys;           /* whole */
	int64_t pads[2 * HP_MAX_RANK];     /* whole */
};

enum { T_GROUP, T_I, T_N, T_AXIS, T_LO, T_HI, T_A, T_B, T_HIN, T_HOUT, T_PL, T_PH };

static int64_t at(const struct hp_node *n, const char *name, int i, int64_t dflt)
{
	const int64_t *v;
	int k = hp_attr_ints(n, name, &v);

	return i < k ? v[i] : dflt;
}

static int64_t floor_div(int64_t a, int64_t b)
{
	return a >= 0 ? a / b : -((-a + b - 1) / b);
}

static int x_shape(const struct hp_node *n, struct hp_shape *s)
{
	const int64_t *v;
	int k = hp_attr_ints(n, "x_shape", &v);

	if (k < 3 || k > HP_MAX_RANK)
		return -1;
	s->rank = k;
	memcpy(s->dims, v, (size_t)k * sizeof *v);
	return 0;
}

/* The bands of group `grp` in band order, among nodes[0..nn) (ascending
 * indices, a superset of the group's nodes); their count, or 0 when any is
 * missing or they disagree. */
static const char *const grad_ops[] = { "ConvGradData", "MaxPoolGrad", "AveragePoolGrad", NULL };

static int grad_op(const struct hp_node *n)
{
	for (int i = 0; grad_ops[i]; i++)
		if (!strcmp(n->op_type, grad_ops[i]))
			return i;
	return -1;
}

static int group_bands(const struct hp_graph *g, int64_t grp, const int *nodes, int nn, struct gband *b, int max)
{
	int nb = -1, op = -1;

	for (int k = 0; k < nn; k++) {
		int i = nodes[k];
		const struct hp_node *n = &g->nodes[i];
		const int64_t *t;
		if (grad_op(n) < 0 || hp_attr_ints(n, "hpdlf_band", &t) != HP_BAND_TAG_N || t[T_GROUP] != grp)
			continue;
		if (op >= 0 && grad_op(n) != op)
			return 0;
		op = grad_op(n);
		if ((nb >= 0 && t[T_N] != nb) || t[T_N] > max || t[T_I] < 0 || t[T_I] >= t[T_N] || b[t[T_I]].t)
			return 0;
		nb = (int)t[T_N];
		b[t[T_I]] = (struct gband){ .node = i, .t = t };
	}
	for (int i = 0; i < nb; i++)
		if (!b[i].t || (op == 0 && g->nodes[b[i].node].inputs[1] != g->nodes[b[0].node].inputs[1]))
			return 0;
	return nb > 1 ? nb : 0;
}

/* The whole node's geometry and kernel path; 0, or 1 when no cut in rows
 * is bitwise. */
static int whole_geom(struct hp_graph *g, const struct gband *b, struct ggeom *q)
{
	const struct hp_node *n = &g->nodes[b[0].node];
	int op = grad_op(n);

	q->pool = op;
	q->axis = (int)b[0].t[T_AXIS];
	if (op == 1)
		q->xs = g->values[n->inputs[1]].shape;
	else if (x_shape(n, &q->xs) < 0)
		return 1;
	if (q->axis < 2 || q->axis >= q->xs.rank)
		return 1;
	q->nsp = q->xs.rank - 2;
	q->sp = q->axis - 2;
	q->hin = b[0].t[T_HIN];
	q->hout = b[0].t[T_HOUT];
	q->xs.dims[q->axis] = q->hin;
	q->dys = g->values[n->inputs[0]].shape;
	q->dys.dims[q->axis] = q->hout;
	for (int i = 0; i < 2 * q->nsp; i++)
		q->pads[i] = at(n, "pads", i, 0);
	q->pads[q->sp] = b[0].t[T_PL];
	q->pads[q->sp + q->nsp] = b[0].t[T_PH];
	q->s = at(n, "strides", q->sp, 1);
	q->d = at(n, "dilations", q->sp, 1);
	q->p = b[0].t[T_PL];
	q->cb = (struct hp_cgd_bands){ .path = -1, .xalign = 1, .yalign = 1 };
	if (op) { /* pooling: plain loops, cut anywhere */
		q->k = at(n, "kernel_shape", q->sp, 0);
		return q->k < 1;
	}
	const struct hp_value *w = &g->values[n->inputs[1]];
	if (w->shape.rank != q->xs.rank)
		return 1;
	q->k = w->shape.dims[q->axis];
	return hp_conv_data_bands(g, n, &q->xs, &q->dys, q->pads, q->axis, &q->cb) < 0 ? 1 : 0;
}

/* Whether neighbouring bands' windows overlap (else each window's gradient
 * is already whole rows of its own). */
static int overlapping(const struct gband *b, int nb)
{
	for (int i = 0; i + 1 < nb; i++)
		if (b[i].t[T_B] > b[i + 1].t[T_A])
			return 1;
	return 0;
}

/* dY rows [ya, yb) whose windows reach X rows [xa, xb); kept where their
 * windows start at or below xa (pads >= 0). */
static void dy_span(const struct ggeom *q, int64_t xa, int64_t xb, int64_t *ya, int64_t *yb)
{
	int64_t lo = q->p - (q->k - 1) * q->d;

	*ya = -floor_div(-(xa + lo), q->s);
	*ya = *ya < floor_div(xa + q->p, q->s) ? *ya : floor_div(xa + q->p, q->s);
	*ya = *ya > 0 ? *ya : 0;
	*yb = floor_div(xb - 1 + q->p, q->s) + 1;
	*yb = *yb < q->hout ? *yb : q->hout;
}

/* A pooling band's cut: X rows under all the windows of its dY rows, so
 * every window (its maximum, its divisor) is the whole's. */
static int pool_cut(const struct ggeom *q, struct cut *c)
{
	dy_span(q, c->oa, c->ob, &c->ya, &c->yb);
	if (c->ya >= c->yb)
		return 1;
	int64_t x0 = c->ya * q->s - q->p, x1 = (c->yb - 1) * q->s - q->p + (q->k - 1) * q->d + 1;
	c->wa = x0 > 0 ? x0 : 0;
	c->wb = x1 < q->hin ? x1 : q->hin;
	c->pl = c->wa - x0;
	c->ph = c->wb == q->hin ? q->pads[q->sp + q->nsp] : 0;
	return c->wa > c->oa || c->wb < c->ob;
}

/* Band i's cut, owning input rows [own[i], own[i + 1]) of its window; 0,
 * or 1 when it cannot be made. */
static int band_cut(struct hp_graph *g, const struct ggeom *q, const struct gband *b, const int64_t *own, int i,
		    struct cut *c)
{
	const int64_t *t = b[i].t;
	int64_t a = q->cb.xalign, ya = q->cb.yalign;
	struct hp_shape xs = q->xs, dys = q->dys;
	int64_t pads[2 * HP_MAX_RANK];
	struct hp_cgd_bands cb = { .path = q->cb.path };

	c->oa = own[i];
	c->ob = own[i + 1];
	c->oa = c->oa > t[T_A] ? c->oa : t[T_A];
	c->ob = c->ob < t[T_B] ? c->ob : t[T_B];
	if (c->oa >= c->ob)
		return 1;
	if (q->pool)
		return pool_cut(q, c);
	c->wa = c->oa - c->oa % a;
	c->wb = (c->ob + a - 1) / a * a;
	c->wb = c->wb < q->hin ? c->wb : q->hin;
	dy_span(q, c->wa, c->wb, &c->ya, &c->yb);
	c->ya -= c->ya % ya; /* out to dY's tiles */
	c->yb = (c->yb + ya - 1) / ya * ya;
	c->yb = c->yb < q->hout ? c->yb : q->hout;
	if (c->ya >= c->yb)
		return 1;
	c->pl = c->wa + q->p - c->ya * q->s;
	c->ph = (c->yb - c->ya - 1) * q->s + (q->k - 1) * q->d + 1 - (c->wb - c->wa) - c->pl;
	c->ph = c->ph > 0 ? c->ph : 0;
	memcpy(pads, q->pads, sizeof pads);
	pads[q->sp] = c->pl;
	pads[q->sp + q->nsp] = c->ph;
	xs.dims[q->axis] = c->wb - c->wa;
	dys.dims[q->axis] = c->yb - c->ya;
	if (hp_conv_data_bands(g, &g->nodes[b[i].node], &xs, &dys, pads, q->axis, &cb) < 0)
		return 1;
	return cb.path != q->cb.path || cb.xalign != q->cb.xalign || cb.yalign != q->cb.yalign ||
	       cb.tiles != q->cb.tiles;
}

/* ---- building ---- */

static int new_value(struct hp_graph *g, const char *base, const char *what, const struct hp_shape *s)
{
	char name[512];

	snprintf(name, sizeof name, "%s/%s%d", base, what, g->nvalues);
	return hp_graph_add_value(g, name, HP_VALUE_ACTIVATION, HP_F32, s);
}

static int const_i64s(struct hp_graph *g, const char *base, int n, const int64_t *x)
{
	struct hp_shape s = { 1, { n } };
	char name[512];
	int v;

	snprintf(name, sizeof name, "%s/c%d", base, g->nvalues);
	if ((v = hp_graph_add_value(g, name, HP_VALUE_CONSTANT, HP_I64, &s)) < 0)
		return v;
	if (!(g->values[v].data = malloc((size_t)n * sizeof *x)))
		return hp_error(-ENOMEM, "out of memory");
	memcpy(g->values[v].data, x, (size_t)n * sizeof *x);
	g->values[v].src.kind = HP_BLOB_MEMORY;
	return v;
}

/* Node op(in) -> out, named after base, with the given schedule hint. */
static int add(struct hp_graph *g, const char *base, const char *op, int nin, const int *in, int out, int sched)
{
	char name[512];
	int node;

	snprintf(name, sizeof name, "%s/%s%d", base, op, g->nnodes);
	node = hp_graph_add_node(g, name, op, nin, in, 1, &out);
	if (node >= 0)
		g->nodes[node].sched = sched;
	return node;
}

/* out = rows [a, b) of v on the axis (v itself when whole; out < 0: new). */
static int slice(struct hp_graph *g, const char *base, int v, int axis, int64_t a, int64_t b, int out, int sched)
{
	struct hp_shape s = g->values[v].shape;
	int in[4] = { v, const_i64s(g, base, 1, &a), const_i64s(g, base, 1, &b) }, rc;
	int64_t ax = axis;

	in[3] = const_i64s(g, base, 1, &ax);
	for (int i = 1; i < 4; i++)
		if (in[i] < 0)
			return in[i];
	s.dims[axis] = b - a;
	if (out < 0 && (out = new_value(g, base, "rows", &s)) < 0)
		return out;
	rc = add(g, base, "Slice", 4, in, out, sched);
	return rc < 0 ? rc : out;
}

/* Rows [ya, yb) of a value cut into the group's bands: band j holds rows
 * [lo_j, hi_j) in value `val` (dY: the output rows and the grad's input 0;
 * X: the window rows and MaxPoolGrad's input 1); -1 when a row is in no
 * band. */
static int rows_from(struct hp_graph *g, const char *base, const struct gband *b, int nb, const struct ggeom *q,
		     int x, int64_t ya, int64_t yb, int sched)
{
	int parts[nb], np = 0, node;
	int64_t cur = ya;
	struct hp_shape s;

	for (int j = 0; j < nb && cur < yb; j++) {
		int64_t lo = b[j].t[x ? T_A : T_LO], hi = b[j].t[x ? T_B : T_HI], e = yb < hi ? yb : hi;
		int v = g->nodes[b[j].node].inputs[x];
		if (cur < lo || cur >= e)
			continue;
		parts[np] = cur == lo && e == hi ? v : slice(g, base, v, q->axis, cur - lo, e - lo, -1, sched);
		if (parts[np++] < 0)
			return parts[np - 1];
		cur = e;
	}
	if (cur < yb || !np)
		return HP_EINTERNAL;
	if (np == 1)
		return parts[0];
	s = g->values[parts[0]].shape;
	s.dims[q->axis] = yb - ya;
	int out = new_value(g, base, x ? "x" : "dy", &s);
	if (out < 0 || (node = add(g, base, "Concat", np, parts, out, sched)) < 0)
		return out < 0 ? out : node;
	struct hp_attr ax = { .name = "axis", .type = HP_ATTR_INT, .i = q->axis };
	return (node = hp_graph_add_attr(g, node, &ax)) < 0 ? node : out;
}

/* n's attributes but its geometry on the axis, and the path kept. */
static int copy_attrs(struct hp_graph *g, int from, int to, const struct ggeom *q, const struct cut *c)
{
	int64_t pads[2 * HP_MAX_RANK], xs[HP_MAX_RANK];
	struct hp_attr pa = { .name = "pads", .type = HP_ATTR_INTS, .n = 2 * q->nsp, .ints = pads };
	struct hp_attr xa = { .name = "x_shape", .type = HP_ATTR_INTS, .n = q->xs.rank, .ints = xs };
	struct hp_attr ka = { .name = "hpdlf_path", .type = HP_ATTR_INT, .i = q->cb.path };
	int rc;

	for (int i = 0; i < g->nodes[from].nattrs; i++) {
		const char *name = g->nodes[from].attrs[i].name;
		if (!strcmp(name, "pads") || !strcmp(name, "x_shape") || !strcmp(name, "hpdlf_path") ||
		    !strcmp(name, "hpdlf_band"))
			continue;
		if ((rc = hp_graph_add_attr(g, to, &g->nodes[from].attrs[i])) < 0)
			return rc;
	}
	memcpy(pads, q->pads, sizeof pads);
	pads[q->sp] = c->pl;
	pads[q->sp + q->nsp] = c->ph;
	memcpy(xs, q->xs.dims, sizeof xs);
	xs[q->axis] = c->wb - c->wa;
	if ((rc = hp_graph_add_attr(g, to, &pa)) < 0 || (q->pool != 1 && (rc = hp_graph_add_attr(g, to, &xa)) < 0))
		return rc;
	return q->pool ? 0 : hp_graph_add_attr(g, to, &ka);
}

/* Band i's exact rows into its window gradient (the old node's output). */
static int rebuild(struct hp_graph *g, const struct gband *b, int nb, int i, const struct ggeom *q, const struct cut *c)
{
	const struct hp_node *old = &g->nodes[b[i].node];
	int gx = old->outputs[0], sched = old->sched, nin = q->pool == 2 ? 1 : 2, rc, node;
	int64_t a = b[i].t[T_A], e = b[i].t[T_B];
	char base[400], op[32];
	struct hp_shape s = q->xs;

	snprintf(base, sizeof base, "%s/exact", old->name);
	snprintf(op, sizeof op, "%s", old->op_type);
	int in[2] = { rows_from(g, base, b, nb, q, 0, c->ya, c->yb, sched), g->nodes[b[i].node].inputs[nin - 1] };
	if (in[0] < 0)
		return in[0];
	if (q->pool == 1 && (in[1] = rows_from(g, base, b, nb, q, 1, c->wa, c->wb, sched)) < 0)
		return in[1];
	int cut = c->oa != c->wa || c->ob != c->wb, pad = c->oa != a || c->ob != e;
	s.dims[q->axis] = c->wb - c->wa;
	int out = cut || pad ? new_value(g, base, "gx", &s) : gx;
	if (out < 0 || (node = add(g, base, op, nin, in, out, sched)) < 0)
		return out < 0 ? out : node;
	char *dom = strdup("ai.hpdlf");
	if (!dom)
		return hp_error(-ENOMEM, "out of memory");
	free(g->nodes[node].domain);
	g->nodes[node].domain = dom;
	if ((rc = copy_attrs(g, b[i].node, node, q, c)) < 0 || !(cut || pad))
		return rc;
	int own = cut ? slice(g, base, out, q->axis, c->oa - c->wa, c->ob - c->wa, pad ? -1 : gx, sched) : out;
	if (own < 0 || !pad)
		return own < 0 ? own : 0;
	int64_t pads[2 * HP_MAX_RANK] = { 0 };
	pads[q->axis] = c->oa - a;
	pads[q->axis + q->xs.rank] = e - c->ob;
	int pin[2] = { own, const_i64s(g, base, 2 * q->xs.rank, pads) };
	if (pin[1] < 0)
		return pin[1];
	return (rc = add(g, base, "Pad", 2, pin, gx, sched)) < 0 ? rc : 0;
}

/* The bands' rows for hp_split_grad_prune, over all groups. */
struct rowsbuf {
	struct hp_band_rows *r;
	int n, cap;
};

/* The cuts of the group's bands: owning their input bands' rows
 * (hp_split_grad_owners), else, as before, from each window's start on;
 * 0, or 1 when neither can be made. */
static int group_cuts(struct hp_graph *g, const struct ggeom *q, const struct gband *b, int nb, struct cut *c,
		      struct hp_band_rows *r)
{
	int64_t own[65];

	for (int i = 0; i < nb; i++)
		r[i] = (struct hp_band_rows){ .gx = g->nodes[b[i].node].outputs[0], .axis = q->axis,
					      .a = b[i].t[T_A], .b = b[i].t[T_B] };
	own[0] = 0;
	own[nb] = q->hin;
	hp_split_grad_owners(g, r, nb, q->axis, own);
	for (int pass = 0; pass < 2; pass++) {
		int bad = 0;
		for (int i = 1; pass && i < nb; i++)
			own[i] = b[i].t[T_A];
		for (int i = 0; i < nb && !bad; i++)
			bad = band_cut(g, q, b, own, i, &c[i]);
		if (!bad)
			break;
		if (pass)
			return 1;
	}
	for (int i = 0; i < nb; i++) {
		r[i].oa = c[i].oa;
		r[i].ob = c[i].ob;
	}
	return 0;
}

static int keep_rows(struct rowsbuf *rb, const struct hp_band_rows *r, int nb)
{
	if (rb->n + nb > rb->cap) {
		int cap = 2 * (rb->n + nb);
		struct hp_band_rows *x = realloc(rb->r, (size_t)cap * sizeof *x);
		if (!x)
			return hp_error(-ENOMEM, "out of memory");
		rb->r = x;
		rb->cap = cap;
	}
	memcpy(rb->r + rb->n, r, (size_t)nb * sizeof *r);
	rb->n += nb;
	return 0;
}

/* Group grp rewritten: 1, or 0 when it stays as it is. */
static int exact_group(struct hp_graph *g, int64_t grp, const int *nodes, int nn, struct rowsbuf *rb)
{
	struct gband b[64] = { { 0 } };
	struct cut c[64];
	struct hp_band_rows r[64];
	struct ggeom q;
	int nb = group_bands(g, grp, nodes, nn, b, 64), old[64], rc;

	if (!nb || !overlapping(b, nb) || whole_geom(g, b, &q) || group_cuts(g, &q, b, nb, c, r))
		return 0;
	for (int i = 0; i < nb; i++) {
		old[i] = b[i].node;
		if ((rc = rebuild(g, b, nb, i, &q, &c[i])) < 0)
			return rc;
	}
	for (int i = 0; i < nb; i++) /* highest index first: removal moves later nodes down */
		for (int j = i + 1; j < nb; j++)
			if (old[j] > old[i]) {
				int x = old[i];
				old[i] = old[j];
				old[j] = x;
			}
	for (int i = 0; i < nb; i++)
		hp_graph_remove_node(g, old[i]);
	return (rc = keep_rows(rb, r, nb)) < 0 ? rc : 1;
}

/* Removed nodes before an original index (a Fenwick tree over the
 * original nodes): a node's index now, as hp_graph_remove_node moves
 * later nodes down and new nodes are appended. */
static void gone_add(int *f, int n, int i)
{
	for (i++; i <= n; i += i & -i)
		f[i]++;
}

static int gone_before(const int *f, int i)
{
	int s = 0;

	for (; i > 0; i -= i & -i)
		s += f[i];
	return s;
}

/* The band-tagged window gradients, gathered in one pass: rewriting a
 * group removes its nodes (later ones move down, order kept) and appends
 * untagged ones, so the groups come in the order of their first node as
 * a scan after each rewrite found them (that scan, and one of the whole
 * graph per group, took a fifth of a mobile net's --plan at --budget 1). */
int hp_split_grad_exact(struct hp_graph *g)
{
	int64_t *grp = NULL;
	int *orig = NULL, *cur = NULL, *gone = NULL, nt = 0, n0 = g->nnodes, count = 0, rc = hp_split_rnn_chain(g);
	struct rowsbuf rb = { 0 };

	if (rc < 0)
		return rc;
	n0 = g->nnodes;
	grp = malloc(((size_t)n0 + 1) * sizeof *grp);
	orig = malloc(((size_t)n0 + 1) * sizeof *orig);
	cur = malloc(((size_t)n0 + 1) * sizeof *cur);
	gone = calloc((size_t)n0 + 2, sizeof *gone);
	rc = grp && orig && cur && gone ? 0 : hp_error(-ENOMEM, "out of memory");
	for (int i = 0; rc == 0 && i < n0; i++) {
		const int64_t *t;
		if (grad_op(&g->nodes[i]) < 0 || hp_attr_ints(&g->nodes[i], "hpdlf_band", &t) != HP_BAND_TAG_N)
			continue;
		grp[nt] = t[T_GROUP];
		orig[nt++] = i;
	}
	for (int k = 0; rc >= 0 && k < nt; k++) {
		int seen = 0, nn = 0;
		for (int j = 0; j < k && !seen; j++)
			seen = grp[j] == grp[k];
		if (seen)
			continue;
		for (int j = k; j < nt; j++)
			if (grp[j] == grp[k])
				cur[nn++] = orig[j] - gone_before(gone, orig[j]);
		if ((rc = exact_group(g, grp[k], cur, nn, &rb)) > 0) {
			count += rc;
			for (int j = k; j < nt; j++)
				if (grp[j] == grp[k])
					gone_add(gone, n0, orig[j]);
		}
	}
	free(grp);
	free(orig);
	free(cur);
	free(gone);
	if (rc >= 0 && count)
		rc = hp_split_grad_prune(g, rb.r, rb.n);
	free(rb.r);
	if (rc >= 0 && count && ((rc = hp_graph_finalize(g)) < 0 || (rc = hp_graph_infer(g)) < 0))
		return rc;
	return rc < 0 ? rc : count;
}
