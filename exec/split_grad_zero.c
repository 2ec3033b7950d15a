/* The zeros of exact band gradients left out (split.h, hp_split_grad_owners
 * and hp_split_grad_prune).
 *
 * hp_split_grad_exact gives each band of a window op the whole kernel's
 * rows for the input rows it owns, padded with zeros to its window.  The
 * window is a Concat of pieces (a band, its neighbours' halo rows), so
 * autodiff splits that gradient again (ConcatGrad) and takes each halo
 * piece to its band as a band-sized tensor (SliceGrad) added to the
 * band's gradient (GradSum).  When a band owns the rows of its own input
 * band exactly, every halo piece is zero: the 3-D U-Net at a quarter of
 * its peak made 52 such band-sized, all-zero tensors a step, wrote 20 MiB
 * of them below DRAM and read them back to add them.  Here the owners are
 * cut where the pieces of both neighbouring windows are cut, and the zero
 * pieces, their SliceGrads and their places in the GradSums are removed;
 * the band's piece is the exact rows themselves (no Pad, no ConcatGrad).
 *
 * Bits: adding a zero is exact but for the sign of a zero (-0 + +0 = +0),
 * and the whole kernel adds none: without them the band's gradient is the
 * in-core one's rows, and every GradSum that stays adds the same non-zero
 * terms in the same order. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "hpdlf/error.h"
#include "exec/split.h"

/* Per value: its producer and its only reader (-1: none, or several);
 * the graph's own links are stale while the passes add nodes. */
struct links {
	int *prod, *reader;
};

static void links_free(struct links *l)
{
	free(l->prod);
	l->prod = l->reader = NULL;
}

static int links_build(const struct hp_graph *g, struct links *l)
{
	l->prod = malloc(2 * ((size_t)g->nvalues + 1) * sizeof *l->prod);
	if (!l->prod)
		return hp_error(-ENOMEM, "out of memory");
	l->reader = l->prod + g->nvalues + 1;
	for (int v = 0; v < g->nvalues; v++)
		l->prod[v] = l->reader[v] = -1;
	for (int i = 0; i < g->nnodes; i++) {
		const struct hp_node *n = &g->nodes[i];
		for (int o = 0; o < n->noutputs; o++)
			if (n->outputs[o] >= 0 && l->prod[n->outputs[o]] < 0)
				l->prod[n->outputs[o]] = i;
		for (int j = 0; j < n->ninputs; j++) {
			int v = n->inputs[j];
			if (v >= 0)
				l->reader[v] = l->reader[v] == -1 || l->reader[v] == i ? i : -2;
		}
	}
	for (int v = 0; v < g->nvalues; v++)
		l->reader[v] = l->reader[v] < 0 ? -1 : l->reader[v];
	return 0;
}

/* The ConcatGrad on `axis` that alone reads window gradient gx; -1 if none. */
static int window_split(const struct hp_graph *g, const struct links *l, int gx, int axis)
{
	int r = gx >= 0 ? l->reader[gx] : -1;
	const struct hp_node *n = r >= 0 ? &g->nodes[r] : NULL;

	if (!n || strcmp(n->op_type, "ConcatGrad") || hp_attr_int(n, "axis", -1) != axis)
		return -1;
	return r;
}

/* Whether row x (whole) is where a piece of the window at a starts or
 * ends. */
static int piece_cut(const struct hp_graph *g, int cg, int64_t a, int64_t x)
{
	const int64_t *sz;
	int k = hp_attr_ints(&g->nodes[cg], "sizes", &sz);

	if (x == a)
		return 1;
	for (int i = 0; i < k; i++)
		if ((a += sz[i]) == x)
			return 1;
	return 0;
}

void hp_split_grad_owners(const struct hp_graph *g, const struct hp_band_rows *b, int nb, int axis, int64_t *own)
{
	struct links l;
	int ok = links_build(g, &l) == 0;

	for (int i = 1; i < nb; i++) {
		int lo = ok ? window_split(g, &l, b[i - 1].gx, axis) : -1, hi = ok ? window_split(g, &l, b[i].gx, axis) : -1;
		own[i] = b[i].a;
		for (int64_t x = b[i - 1].b; lo >= 0 && hi >= 0 && x >= b[i].a && x > own[i - 1]; x--)
			if (piece_cut(g, lo, b[i - 1].a, x) && piece_cut(g, hi, b[i].a, x)) {
				own[i] = x;
				break;
			}
	}
	links_free(&l);
}

/* ---- pruning ---- */

struct prune {
	struct hp_graph *g;
	struct links l;
	char *kind;            /* per node: SLICEGRAD, GRADSUM, else 0 */
	int *rep;              /* per value: read instead of it (-1: itself) */
	char *zero;            /* per value: known all zero */
	char *dead;            /* per node: removed */
	int *src, *mine, n;    /* node src[i] makes value mine[i] instead (applied last) */
};

/* Band b's window gradient: its Pad (from the owned rows) and the
 * ConcatGrad into pieces.  The pieces outside the owned rows are marked
 * zero; when one piece is the owned rows, it becomes the owned rows'
 * node's output and the Pad and the ConcatGrad go.  0 when the band is
 * not that shape or has no zero piece (left as it is). */
static int prune_band(struct prune *p, const struct hp_band_rows *b, int axis)
{
	struct hp_graph *g = p->g;
	int pad = p->l.prod[b->gx], cg = window_split(g, &p->l, b->gx, axis), mine = -1, src, zeros = 0, other = 0;
	const int64_t *sz;

	if (pad < 0 || cg < 0 || strcmp(g->nodes[pad].op_type, "Pad"))
		return 0;
	int k = hp_attr_ints(&g->nodes[cg], "sizes", &sz);
	int64_t lo = b->a;
	for (int i = 0; i < k && i < g->nodes[cg].noutputs; lo += sz[i++]) {
		int v = g->nodes[cg].outputs[i];
		if (v < 0)
			continue;
		if (lo + sz[i] <= b->oa || lo >= b->ob)
			p->zero[v] = 1, zeros++;
		else if (lo == b->oa && lo + sz[i] == b->ob)
			mine = v;
		else
			other = 1;
	}
	src = p->l.prod[g->nodes[pad].inputs[0]];
	if (mine < 0 || other || src < 0 || g->nodes[src].noutputs != 1 || p->l.reader[g->nodes[pad].inputs[0]] != pad)
		return zeros > 0;
	p->src[p->n] = src;
	p->mine[p->n++] = mine;
	p->dead[pad] = p->dead[cg] = 1;
	return 1;
}

enum { OTHER = 0, SLICEGRAD, GRADSUM };

/* Zeros carried through: a SliceGrad of a zero is zero, a GradSum of
 * zeros alone is zero.  Then every reader of a zero must be one of those
 * (or removed already); 0 when one is not. */
static int spread(struct prune *p)
{
	struct hp_graph *g = p->g;
	int more = 1;

	while (more) {
		more = 0;
		for (int i = 0; i < g->nnodes; i++) {
			struct hp_node *n = &g->nodes[i];
			int all = n->ninputs > 0 && n->noutputs == 1 && n->outputs[0] >= 0 && !p->zero[n->outputs[0]];
			if (p->dead[i] || !p->kind[i])
				continue;
			for (int j = 0; all && j < n->ninputs; j++)
				all = n->inputs[j] >= 0 && p->zero[n->inputs[j]];
			if (all)
				p->zero[n->outputs[0]] = 1, more = 1;
		}
	}
	for (int i = 0; i < g->nnodes; i++)
		for (int j = 0; !p->dead[i] && !p->kind[i] && j < g->nodes[i].ninputs; j++)
			if (g->nodes[i].inputs[j] >= 0 && p->zero[g->nodes[i].inputs[j]])
				return 0;
	for (int k = 0; k < g->noutputs; k++)
		if (p->zero[g->outputs[k]])
			return 0;
	return 1;
}

static int is_output(const struct hp_graph *g, int v)
{
	for (int k = 0; k < g->noutputs; k++)
		if (g->outputs[k] == v)
			return 1;
	return 0;
}

static int resolve(const int *rep, int v)
{
	while (v >= 0 && rep[v] >= 0)
		v = rep[v];
	return v;
}

/* Zero SliceGrads and GradSums removed, zeros dropped from the other
 * GradSums; a GradSum left with one term is read as that term. */
static void apply(struct prune *p)
{
	struct hp_graph *g = p->g;

	for (int i = 0; i < g->nnodes; i++) {
		struct hp_node *n = &g->nodes[i];
		int m = 0;
		if (p->dead[i] || !p->kind[i])
			continue;
		if (p->zero[n->outputs[0]]) {
			p->dead[i] = 1;
			continue;
		}
		if (p->kind[i] != GRADSUM)
			continue;
		for (int j = 0; j < n->ninputs; j++)
			if (n->inputs[j] < 0 || !p->zero[n->inputs[j]])
				n->inputs[m++] = n->inputs[j];
		n->ninputs = m;
		if (m == 1 && !is_output(g, n->outputs[0])) {
			p->dead[i] = 1;
			p->rep[n->outputs[0]] = n->inputs[0];
		}
	}
	for (int i = 0; i < p->n; i++)
		g->nodes[p->src[i]].outputs[0] = p->mine[i];
	for (int i = 0; i < g->nnodes; i++)
		for (int j = 0; j < g->nodes[i].ninputs; j++)
			g->nodes[i].inputs[j] = resolve(p->rep, g->nodes[i].inputs[j]);
	for (int i = g->nnodes - 1; i >= 0; i--)
		if (p->dead[i])
			hp_graph_remove_node(g, i);
}

static void prune_free(struct prune *p)
{
	links_free(&p->l);
	free(p->zero);
	free(p->dead);
	free(p->src);
	free(p->rep);
	free(p->kind);
}

int hp_split_grad_prune(struct hp_graph *g, const struct hp_band_rows *b, int n)
{
	struct prune p = { .g = g };
	int count = 0;

	p.zero = calloc((size_t)g->nvalues + 1, 1);
	p.dead = calloc((size_t)g->nnodes + 1, 1);
	p.kind = calloc((size_t)g->nnodes + 1, 1);
	p.rep = malloc(((size_t)g->nvalues + 1) * sizeof *p.rep);
	p.src = malloc(2 * ((size_t)n + 1) * sizeof *p.src);
	p.mine = p.src ? p.src + n + 1 : NULL;
	if (!p.zero || !p.dead || !p.kind || !p.rep || !p.src || links_build(g, &p.l) < 0) {
		prune_free(&p);
		return hp_error(-ENOMEM, "out of memory");
	}
	for (int v = 0; v < g->nvalues; v++)
		p.rep[v] = -1;
	for (int i = 0; i < g->nnodes; i++)
		p.kind[i] = !strcmp(g->nodes[i].op_type, "SliceGrad") ? SLICEGRAD
			    : !strcmp(g->nodes[i].op_type, "GradSum") ? GRADSUM : OTHER;
	for (int i = 0; i < n; i++)
		count += prune_band(&p, &b[i], b[i].axis);
	if (count && spread(&p))
		apply(&p);
	else
		count = 0;
	prune_free(&p);
	return count;
}
