/* The chain DP of recompute-or-swap (see remat.h for the model).
 *
 * Items are taken in forward order.  The state after an item is (k, q):
 * k units of KEEP bytes so far (the turn's memory, which only grows) and q
 * units held while the backward runs the open segment (the anchor's bytes
 * if it is SWAP, and the RECOMPUTE bytes after it).  KEEP closes the
 * segment (k += u, q = 0), SWAP closes it (q = u), RECOMPUTE extends it
 * (q += u); every state has k + q <= buckets.  The constraints of a
 * segment only involve k at its anchor and its own q, so the states are
 * exact and the DP is optimal in the model.  Back pointers (previous
 * state, 16 bits) are kept per item: n * states * 2 bytes. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "hpdlf/error.h"
#include "exec/remat.h"

#define INF 1e300

struct dp {
	int d, nstates;
	int *index;            /* (k, q) -> state, -1 outside k + q <= d */
	double *cur, *nxt;
	uint16_t *back;        /* per item and state: previous state */
	char *how;             /* per item and state: its decision */
};

static int st(const struct dp *p, int k, int q)
{
	return k + q <= p->d ? p->index[k * (p->d + 1) + q] : -1;
}

static void relax(struct dp *p, int item, int from, int k, int q, double c, char how)
{
	int to = st(p, k, q);

	if (to < 0 || c >= p->nxt[to])
		return;
	p->nxt[to] = c;
	p->back[(size_t)item * p->nstates + to] = (uint16_t)from;
	p->how[(size_t)item * p->nstates + to] = how;
}

/* Forward-only items' recompute time just before each item, and whether
 * they can all be recomputed. */
static void pending(const struct hp_remat_item *it, int n, double *zc, char *zok)
{
	double acc = 0;
	int ok = 1;

	for (int i = 0; i < n; i++) {
		zc[i] = acc;
		zok[i] = (char)ok;
		if (it[i].bytes) {
			acc = 0;
			ok = 1;
		} else {
			acc += it[i].recompute_ms;
			ok &= it[i].can != 0;
		}
	}
}

static void step(struct dp *p, const struct hp_remat_item *x, int item, int u, double zc, int zok, double lambda)
{
	for (int s = 0; s < p->nstates; s++)
		p->nxt[s] = INF;
	for (int k = 0; k <= p->d; k++)
		for (int q = 0; k + q <= p->d; q++) {
			int s = st(p, k, q);
			double c = p->cur[s];
			if (c >= INF)
				continue;
			if (u > p->d) { /* larger than the memory: swapped, read back in pieces */
				relax(p, item, s, k, 0, c + lambda * x->swap_ms, HP_REMAT_SWAP);
				continue;
			}
			relax(p, item, s, k + u, 0, c, HP_REMAT_KEEP);
			relax(p, item, s, k, u, c + lambda * x->swap_ms, HP_REMAT_SWAP);
			if (x->can && zok)
				relax(p, item, s, k, q + u, c + x->recompute_ms + zc, HP_REMAT_RECOMPUTE);
		}
	double *t = p->cur;
	p->cur = p->nxt;
	p->nxt = t;
}

static int dp_alloc(struct dp *p, int n, int d)
{
	p->d = d;
	p->index = malloc((size_t)(d + 1) * (size_t)(d + 1) * sizeof *p->index);
	if (!p->index)
		return hp_error(-ENOMEM, "out of memory planning recomputation");
	for (int k = 0; k <= d; k++)
		for (int q = 0; q <= d; q++)
			p->index[k * (d + 1) + q] = k + q <= d ? p->nstates++ : -1;
	p->cur = malloc((size_t)p->nstates * sizeof *p->cur);
	p->nxt = malloc((size_t)p->nstates * sizeof *p->nxt);
	p->back = malloc((size_t)(n ? n : 1) * (size_t)p->nstates * sizeof *p->back);
	p->how = malloc((size_t)(n ? n : 1) * (size_t)p->nstates);
	if (!p->cur || !p->nxt || !p->back || !p->how)
		return hp_error(-ENOMEM, "out of memory planning recomputation");
	return 0;
}

static void dp_free(struct dp *p)
{
	free(p->index);
	free(p->cur);
	free(p->nxt);
	free(p->back);
	free(p->how);
}

/* The best final state, then the decisions back to item 0. */
static int trace_back(struct dp *p, const struct hp_remat_item *it, int n, char *choice, double *cost)
{
	int best = -1;

	for (int s = 0; s < p->nstates; s++)
		if (p->cur[s] < INF && (best < 0 || p->cur[s] < p->cur[best]))
			best = s;
	if (best < 0)
		return hp_error(HP_EBUDGET, "no keep/swap/recompute choice fits the memory");
	*cost = p->cur[best];
	for (int i = n - 1; i >= 0; i--) {
		if (!it[i].bytes) {
			choice[i] = HP_REMAT_KEEP;
			continue;
		}
		choice[i] = p->how[(size_t)i * p->nstates + best];
		best = p->back[(size_t)i * p->nstates + best];
	}
	return 0;
}

int hp_remat_chain(const struct hp_remat_item *it, int n, uint64_t mem, int buckets, double lambda, char *choice,
		   double *cost)
{
	struct dp p = { 0 };
	double *zc = malloc((size_t)(n ? n : 1) * sizeof *zc);
	char *zok = malloc((size_t)(n ? n : 1));
	int rc;

	if (buckets < 1 || buckets > 180) /* states fit 16 bits */
		buckets = buckets < 1 ? 1 : 180;
	rc = zc && zok ? dp_alloc(&p, n, buckets) : hp_error(-ENOMEM, "out of memory planning recomputation");
	if (rc == 0) {
		double unit = mem ? (double)mem / buckets : 1;
		pending(it, n, zc, zok);
		for (int s = 0; s < p.nstates; s++)
			p.cur[s] = INF;
		p.cur[st(&p, 0, 0)] = 0;
		for (int i = 0; i < n; i++) {
			double u = ceil((double)it[i].bytes / unit - 1e-9);
			if (!it[i].bytes)
				continue;
			if (u > buckets)
				u = buckets + 1;
			step(&p, &it[i], i, (int)u, zc[i], zok[i], lambda);
		}
		rc = trace_back(&p, it, n, choice, cost);
	}
	dp_free(&p);
	free(zc);
	free(zok);
	return rc;
}
