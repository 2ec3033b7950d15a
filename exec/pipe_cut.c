/* The choice of pipeline stages over the model's chain (see pipe_cut.h).
 *
 * Three exact passes over the chain, each a dynamic programme over (stage
 * k, end j) whose inner loop walks the start i down from j - 1:
 *   1. the slowest stage's time V: f[k][j] = min over i of
 *      max(f[k-1][i], t(i, j), x(j)), stages that fit the budget only
 *      (x(j): a micro-batch's transfer over cut j, for the link is a
 *      stage of the pipeline too);
 *   2. among partitions whose stages all take at most V (1 + tol), the
 *      fewest bytes over the cuts: g[k][j] = min over i of g[k-1][i] +
 *      cut[i] (tol: what the speed model cannot tell apart anyway);
 *   3. only when nothing fits: the smallest cap any partition fits in
 *      (bisection on the cap, each test O(P n) with a stack of maxima).
 * The walk stops once t(i, j) passes a bound on V (found first by
 * bisection with a greedy split that ignores memory, raised while the
 * budget leaves no partition under it) or the working set passes the cap,
 * so the work is about P * n * (the nodes of a stage) rather than P * n^2.
 * Phase 2 cannot be folded into 1: the prefix that is best on its slowest
 * stage is not always the one with the fewest bytes once a slower last
 * stage hides the difference. */
#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "hpdlf/error.h"
#include "exec/budget.h"
#include "exec/pipe_cut.h"

void hp_pipe_choose_opts_init(struct hp_pipe_choose_opts *o, size_t size)
{
	memset(o, 0, size);
	o->size = size;
	if (size >= offsetof(struct hp_pipe_choose_opts, tie_tolerance) + sizeof o->tie_tolerance)
		o->tie_tolerance = 0.01;
}

double hp_pipe_stage_ms(const struct hp_pipe_chain *c, int lo, int hi)
{
	double ms = 0;

	for (int k = lo; k < hi; k++)
		ms += c->fwd_ms[k] + c->bwd_ms[k] + c->opt_ms[k];
	return ms;
}

uint64_t hp_pipe_stage_need(const struct hp_pipe_chain *c, int lo, int hi)
{
	uint64_t m = 0;

	for (int k = lo; k < hi; k++)
		m = c->need[k] > m ? c->need[k] : m;
	return m + 2 * (c->cut[lo] + c->cut[hi]);
}

struct dp {
	const struct hp_pipe_chain *c;
	int n, P;
	uint64_t cap;      /* 0: unlimited */
	double *pre;       /* [n+1] prefix sums of the node times */
	double *f;         /* [P][n+1] */
	uint64_t *g;       /* [P][n+1] */
	int *arg;          /* [P][n+1] start of the last stage */
	int *lo, *hi;      /* [P] the ends stage k may have under the bound */
};

#define INF HUGE_VAL
#define NONE UINT64_MAX
#define AT(d, k, j) ((size_t)(k) * (size_t)((d)->n + 1) + (size_t)(j))

static double t_of(const struct dp *d, int i, int j)
{
	return d->pre[j] - d->pre[i];
}

/* A micro-batch's activation over cut j (0 at the chain's end): the link
 * is a stage of the pipeline too, between its neighbours. */
static double x_of(const struct dp *d, int j)
{
	return d->c->xfer_ms && j < d->n ? d->c->xfer_ms[j] : 0;
}

/* Within the slowest stage's time V, up to rounding of the sums. */
static int within(double t, double v)
{
	return t <= v + 1e-9 * fabs(v);
}

/* Can the chain be cut into at most P stages of at most T each (memory
 * ignored)?  Greedy: each stage as long as it may be. */
static int greedy_fits(const struct dp *d, double T)
{
	int stages = 1, i = 0;

	for (int j = 1; j <= d->n; j++)
		if (t_of(d, i, j) > T) {
			if (j - 1 == i || ++stages > d->P)
				return 0;
			i = j - 1;
			if (t_of(d, i, j) > T)
				return 0;
		}
	return 1;
}

/* An upper bound on the memory-blind optimum, tight to 1e-9. */
static double time_bound(const struct dp *d)
{
	double lo = 0, hi = d->pre[d->n];

	for (int it = 0; it < 200 && hi - lo > 1e-12 * hi; it++) {
		double mid = (lo + hi) / 2;
		if (greedy_fits(d, mid))
			hi = mid;
		else
			lo = mid;
	}
	return hi * (1 + 1e-9) + 1e-300;
}

/* The ends j stage k may have when every stage takes at most T, memory
 * aside: at most where k + 1 greedy stages from the left reach, at least
 * where P - 1 - k greedy stages from the right must start. */
static void end_ranges(struct dp *d, double T)
{
	int pos = 0, n = d->n, P = d->P;

	for (int k = 0; k < P; k++) {
		int j = pos < n ? pos + 1 : n;
		while (j < n && t_of(d, pos, j + 1) <= T)
			j++;
		d->hi[k] = j < n - (P - 1 - k) ? j : n - (P - 1 - k);
		pos = j;
	}
	pos = n;
	for (int k = P - 1; k >= 0; k--) {
		int i = pos > 0 ? pos - 1 : 0;
		d->lo[k] = pos > k + 1 ? pos : k + 1; /* the remaining stages start at or before pos */
		while (i > 0 && t_of(d, i - 1, pos) <= T)
			i--;
		pos = i;
	}
}

/* The first stage's working set, when it ends at j (0: too large). */
static int first_fits(const struct dp *d, int j, uint64_t *m)
{
	*m = 0;
	for (int i = 0; i < j; i++)
		*m = d->c->need[i] > *m ? d->c->need[i] : *m;
	return !d->cap || *m + 2 * d->c->cut[j] <= d->cap;
}

static void fill_none(struct dp *d)
{
	size_t cells = (size_t)d->P * (size_t)(d->n + 1);

	for (size_t x = 0; x < cells; x++) {
		d->f[x] = INF;
		d->g[x] = NONE;
	}
}

/* Phase 1 under the bound T: the slowest stage of the best partition
 * (INF: none within T fits the cap). */
static double phase_time(struct dp *d, double T)
{
	uint64_t m;

	fill_none(d);
	end_ranges(d, T);
	for (int j = d->lo[0]; j <= d->hi[0]; j++)
		if (t_of(d, 0, j) <= T && x_of(d, j) <= T && first_fits(d, j, &m))
			d->f[AT(d, 0, j)] = t_of(d, 0, j) > x_of(d, j) ? t_of(d, 0, j) : x_of(d, j);
	for (int k = 1; k < d->P; k++)
		for (int j = d->lo[k]; j <= d->hi[k]; j++) {
			double best = INF, x = x_of(d, j);
			m = 0;
			for (int i = j - 1; i >= d->lo[k - 1] && x <= T; i--) {
				double t = t_of(d, i, j), prev = d->f[AT(d, k - 1, i)];
				m = d->c->need[i] > m ? d->c->need[i] : m;
				if (t > T || (d->cap && m + 2 * d->c->cut[j] > d->cap))
					break;
				if (prev == INF || (d->cap && m + 2 * (d->c->cut[i] + d->c->cut[j]) > d->cap))
					continue;
				t = t > x ? t : x;
				prev = prev > t ? prev : t;
				best = prev < best ? prev : best;
			}
			d->f[AT(d, k, j)] = best;
		}
	return d->f[AT(d, d->P - 1, d->n)];
}

/* Phase 2: the fewest bytes over the cuts with every stage within V. */
static uint64_t phase_bytes(struct dp *d, double V)
{
	double T = V + 1e-9 * V;
	uint64_t m;

	fill_none(d);
	end_ranges(d, T);
	for (int j = d->lo[0]; j <= d->hi[0]; j++)
		if (within(t_of(d, 0, j), V) && within(x_of(d, j), V) && first_fits(d, j, &m)) {
			d->g[AT(d, 0, j)] = 0;
			d->f[AT(d, 0, j)] = t_of(d, 0, j) > x_of(d, j) ? t_of(d, 0, j) : x_of(d, j);
		}
	for (int k = 1; k < d->P; k++)
		for (int j = d->lo[k]; j <= d->hi[k]; j++) {
			uint64_t best = NONE;
			double slow = INF, x = x_of(d, j);
			int arg = -1;
			m = 0;
			for (int i = j - 1; i >= d->lo[k - 1] && within(x, V); i--) {
				uint64_t prev = d->g[AT(d, k - 1, i)];
				double t = t_of(d, i, j);
				m = d->c->need[i] > m ? d->c->need[i] : m;
				if (!within(t, V) || (d->cap && m + 2 * d->c->cut[j] > d->cap))
					break;
				if (prev == NONE || (d->cap && m + 2 * (d->c->cut[i] + d->c->cut[j]) > d->cap))
					continue;
				/* equal bytes: the faster (a tie-break along the path, not exact) */
				t = t > x ? t : x;
				t = t > d->f[AT(d, k - 1, i)] ? t : d->f[AT(d, k - 1, i)];
				if (prev + d->c->cut[i] < best || (prev + d->c->cut[i] == best && t < slow)) {
					best = prev + d->c->cut[i];
					slow = t;
					arg = i;
				}
			}
			d->g[AT(d, k, j)] = best;
			d->f[AT(d, k, j)] = slow;
			d->arg[AT(d, k, j)] = arg;
		}
	return d->g[AT(d, d->P - 1, d->n)];
}

/* Phase 3: can the chain be cut into P stages each of working set at most
 * C (time unbounded)?  reach[k][j]: nodes [0, j) in k + 1 such stages.
 * The last stage [i, j) fits when max(need[i..j)) + 2 cut[i] <= C - 2
 * cut[j]; over the reachable i the left side's minimum comes from a stack
 * of runs of i that share max(need[i..j)), each with its smallest 2 cut[i]
 * and the minimum of (max + that) below it, so each k takes O(n). */
struct run {
	uint64_t mu, minb, below; /* run's max need, its least 2 cut[i], min over it and the runs below */
};

static int fits_all(const struct dp *d, uint64_t C, char *prev, char *cur, struct run *st)
{
	const struct hp_pipe_chain *c = d->c;
	uint64_t m = 0;

	for (int j = 0; j <= d->n; j++) { /* the first stage: [0, j) */
		m = j ? (c->need[j - 1] > m ? c->need[j - 1] : m) : 0;
		prev[j] = j > 0 && m + 2 * c->cut[j] <= C;
	}
	for (int k = 1; k < d->P; k++) {
		int top = 0;
		for (int j = 0; j <= d->n; j++) {
			cur[j] = 0;
			if (j == 0)
				continue;
			struct run r = { c->need[j - 1], prev[j - 1] ? 2 * c->cut[j - 1] : NONE, NONE };
			while (top > 0 && st[top - 1].mu <= r.mu) /* their max over [i, j) is now need[j-1] */
				r.minb = st[--top].minb < r.minb ? st[top].minb : r.minb;
			r.below = r.minb == NONE ? NONE : r.mu + r.minb;
			if (top > 0 && st[top - 1].below < r.below)
				r.below = st[top - 1].below;
			st[top++] = r;
			cur[j] = 2 * c->cut[j] <= C && r.below <= C - 2 * c->cut[j];
		}
		memcpy(prev, cur, (size_t)d->n + 1);
	}
	return prev[d->n];
}

/* The smallest C that fits (bisection over the integers), or with
 * only_cap set, 1 if C = only_cap fits and 0 if not. */
static uint64_t phase_cap(struct dp *d, uint64_t only_cap)
{
	uint64_t lo = 0, hi = 0, maxcut = 0;
	char *a = malloc((size_t)d->n + 1), *b = malloc((size_t)d->n + 1);
	struct run *st = malloc(((size_t)d->n + 1) * sizeof *st);

	for (int k = 0; k < d->n; k++) {
		hi = d->c->need[k] > hi ? d->c->need[k] : hi;
		maxcut = d->c->cut[k] > maxcut ? d->c->cut[k] : maxcut;
	}
	hi += 4 * maxcut; /* every stage of every partition fits this */
	if (!a || !b || !st)
		lo = hi; /* out of memory: a true if loose figure (and "fits": phase 1 decides) */
	else if (only_cap)
		lo = hi = fits_all(d, only_cap, a, b, st);
	while (lo < hi) {
		uint64_t mid = lo + (hi - lo) / 2;
		if (fits_all(d, mid, a, b, st))
			hi = mid;
		else
			lo = mid + 1;
	}
	free(a);
	free(b);
	free(st);
	return only_cap && (!a || !b || !st) ? 1 : hi;
}

static int dp_alloc(struct dp *d)
{
	size_t cells = (size_t)d->P * (size_t)(d->n + 1);

	d->pre = calloc((size_t)d->n + 1, sizeof *d->pre);
	d->f = malloc(cells * sizeof *d->f);
	d->g = malloc(cells * sizeof *d->g);
	d->arg = malloc(cells * sizeof *d->arg);
	d->lo = malloc((size_t)d->P * sizeof *d->lo);
	d->hi = malloc((size_t)d->P * sizeof *d->hi);
	if (!d->pre || !d->f || !d->g || !d->arg || !d->lo || !d->hi)
		return hp_error(-ENOMEM, "out of memory choosing %d pipeline stages over %d nodes", d->P, d->n);
	for (int k = 0; k < d->n; k++)
		d->pre[k + 1] = d->pre[k] + d->c->fwd_ms[k] + d->c->bwd_ms[k] + d->c->opt_ms[k];
	return 0;
}

static void dp_free(struct dp *d)
{
	free(d->pre);
	free(d->f);
	free(d->g);
	free(d->arg);
	free(d->lo);
	free(d->hi);
}

/* Phase 1 with a bound raised until a partition fits (INF: none does). */
static double slowest_fitting(struct dp *d)
{
	double T = time_bound(d), total = d->pre[d->n], V;

	for (int j = 1; j < d->n; j++)
		total = x_of(d, j) > total ? x_of(d, j) : total; /* a cut's transfer may outlast the whole chain */
	total = total * (1 + 1e-9) + 1e-300;

	for (;;) {
		V = phase_time(d, T);
		if (V != INF || T >= total)
			return V;
		T = T * 1.5 < total ? T * 1.5 : total;
	}
}

static void trace_back(const struct dp *d, int *bounds)
{
	int j = d->n;

	bounds[d->P] = d->n;
	for (int k = d->P - 1; k > 0; k--) {
		j = d->arg[AT(d, k, j)];
		bounds[k] = j;
	}
	bounds[0] = 0;
}

int hp_pipe_partition(const struct hp_pipe_chain *c, int P, uint64_t cap, double tol, int *bounds, double *slowest,
		      uint64_t *crossing, uint64_t *min_cap)
{
	struct dp d = { .c = c, .n = c->n, .P = P, .cap = cap };
	double V;
	int rc;

	if (P < 1 || P > c->n)
		return hp_error(HP_EUSAGE, "%d pipeline stages over %d nodes: each stage needs a node", P, c->n);
	if ((rc = dp_alloc(&d)) == 0) {
		/* memory alone first: without a fitting partition, no need to
		 * raise the time bound up to the whole chain's */
		V = !cap || phase_cap(&d, cap) ? slowest_fitting(&d) : INF;
		if (V == INF) {
			d.cap = 0;
			*min_cap = phase_cap(&d, 0);
			rc = HP_EBUDGET;
		} else {
			*crossing = phase_bytes(&d, V * (1 + (tol > 0 ? tol : 0)));
			trace_back(&d, bounds);
			*slowest = 0;
			for (int s = 0; s < P; s++) { /* the chosen one's: at most V (1 + tol) */
				double t = t_of(&d, bounds[s], bounds[s + 1]), x = x_of(&d, bounds[s + 1]);
				t = t > x ? t : x;
				*slowest = t > *slowest ? t : *slowest;
			}
		}
	}
	dp_free(&d);
	return rc;
}

/* ---- the model's choice ---------------------------------------------------- */

/* Tensor bytes a stage's working set may take under a process budget. */
static uint64_t cap_of(uint64_t process)
{
	uint64_t t = hp_budget_tensors(process), s = hp_budget_staging(t);

	return t > s ? t - s : 1;
}

uint64_t hp_pipe_budget_for(uint64_t need)
{
	uint64_t b = need;

	for (int i = 0; i < 64; i++) { /* the staging reserve grows with the budget, stepwise */
		uint64_t nb = need + hp_budget_staging(b);
		if (nb <= b)
			break;
		b = nb;
	}
	return hp_budget_process_for(b);
}

void hp_pipe_opts_full(const struct hp_pipe_choose_opts *in, struct hp_pipe_choose_opts *o)
{
	hp_pipe_choose_opts_init(o, sizeof *o);
	if (in)
		memcpy(o, in, in->size < sizeof *o ? in->size : sizeof *o);
	o->size = sizeof *o;
	o->micro_batches = o->micro_batches > 0 ? o->micro_batches : 1;
}

int hp_pipe_choose_chain(const struct hp_graph *model, const struct hp_pipe_chain *c, int P,
			 const struct hp_pipe_choose_opts *o, int *bounds)
{
	uint64_t cap = o->budget ? cap_of(o->budget) : 0, crossing, min_cap = 0;
	double slowest;
	char a[32], b[32], d[32];
	int rc = hp_pipe_partition(c, P, cap, o->tie_tolerance, bounds, &slowest, &crossing, &min_cap);

	if (rc != HP_EBUDGET)
		return rc;
	return hp_error(HP_EBUDGET, "%s: no split into %d pipeline stages fits --budget %s per rank (a stage's "
			"largest kernel and its boundary buffers need %s at least); --budget %llu (%s) per rank would",
			model->path ? model->path : "model", P, hp_format_size(o->budget, a, sizeof a),
			hp_format_size(min_cap, b, sizeof b), (unsigned long long)hp_pipe_budget_for(min_cap),
			hp_format_size(hp_pipe_budget_for(min_cap), d, sizeof d));
}

int hp_pipe_choose(const struct hp_graph *model, int P, const struct hp_pipe_choose_opts *in, int *bounds)
{
	struct hp_pipe_choose_opts o;
	struct hp_pipe_chain c;
	int rc;

	hp_pipe_opts_full(in, &o);
	if (P < 1 || P > model->nnodes)
		return hp_error(HP_EUSAGE, "%s: %d pipeline stages over %d nodes: each stage needs a node",
				model->path ? model->path : "model", P, model->nnodes);
	if ((rc = hp_pipe_chain_build(model, &o, &c)) < 0)
		return rc;
	rc = hp_pipe_choose_chain(model, &c, P, &o, bounds);
	hp_pipe_chain_free(&c);
	return rc;
}
