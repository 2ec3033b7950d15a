/* Operator splitting for a budget (see split.h): candidates are rewritten
 * copies of the graph; the first that fits replaces it. */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "hpdlf/error.h"
#include "hpdlf/kernels.h"
#include "exec/exec_internal.h"
#include "exec/plan.h"
#include "exec/split.h"
#include "exec/split_memo.h"
#include "hpdlf/exec.h"

/* Band counts tried, in order. */
static const int band_counts[] = { 2, 3, 4, 6, 8, 12, 16, 24, 32 };

uint64_t hp_split_min_budget(const struct hp_graph *g)
{
	struct hp_plan_opts po = { .align = HP_BUDGET_ALIGN, .reserve_for = hp_budget_staging };

	return hp_plan_min_budget(g, &po, NULL);
}

static int copy_value(struct hp_graph *d, const struct hp_value *v)
{
	int i = hp_graph_add_value(d, v->name, v->kind, v->dtype, &v->shape);
	struct hp_value *c;

	if (i < 0)
		return i;
	c = &d->values[i];
	for (int k = 0; k < HP_MAX_RANK; k++)
		if (v->dim_param[k] && !(c->dim_param[k] = strdup(v->dim_param[k])))
			return hp_error(-ENOMEM, "out of memory");
	if (v->data) {
		struct hp_tensor t = { .dtype = v->dtype, .shape = v->shape };
		size_t n = hp_tensor_bytes(&t);
		if (!(c->data = malloc(n ? n : 1)))
			return hp_error(-ENOMEM, "out of memory");
		memcpy(c->data, v->data, n);
	}
	c->src = v->src;
	c->producer = v->producer;
	c->nconsumers = v->nconsumers;
	c->is_output = v->is_output;
	c->part_of = v->part_of;
	c->part_offset = v->part_offset;
	c->trainable = v->trainable;
	c->next = v->next;
	return 0;
}

static int copy_node(struct hp_graph *d, const struct hp_node *n)
{
	int i = hp_graph_add_node(d, n->name, n->op_type, n->ninputs, n->inputs, n->noutputs, n->outputs), rc;

	if (i < 0)
		return i;
	free(d->nodes[i].domain);
	if (!(d->nodes[i].domain = strdup(n->domain)))
		return hp_error(-ENOMEM, "out of memory");
	d->nodes[i].op = n->op;
	d->nodes[i].folded = n->folded;
	d->nodes[i].sched = n->sched;
	d->nodes[i].workspace = n->workspace; /* for the band pass; infer prepares again */
	for (int a = 0; a < n->nattrs; a++)
		if ((rc = hp_graph_add_attr(d, i, &n->attrs[a])) < 0)
			return rc;
	return 0;
}

static int copy_ints(int **dst, const int *src, int n)
{
	*dst = malloc((size_t)(n ? n : 1) * sizeof **dst);
	if (!*dst)
		return hp_error(-ENOMEM, "out of memory");
	if (n)
		memcpy(*dst, src, (size_t)n * sizeof **dst);
	return 0;
}

/* A deep copy (values keep their indices; kernels prepare again at infer). */
static int graph_clone(const struct hp_graph *g, struct hp_graph **out)
{
	struct hp_graph *d = hp_graph_new(g->path);
	int rc = d ? 0 : hp_error(-ENOMEM, "out of memory");

	if (rc == 0) {
		free(d->producer);
		d->producer = strdup(g->producer);
		d->opset = g->opset;
		d->files = calloc((size_t)g->nfiles + 1, sizeof *d->files);
		rc = d->producer && d->files ? 0 : hp_error(-ENOMEM, "out of memory");
	}
	for (int i = 0; rc == 0 && i < g->nfiles; i++, d->nfiles++) {
		char own[64];
		int fd;
		/* a file the graph holds open (exec/fuse_const.c): the clone
		 * holds its own descriptor, which hp_graph_free closes */
		if (i > 0 && !strncmp(g->files[i], "/proc/self/fd/", 14)) {
			if ((fd = fcntl(atoi(g->files[i] + 14), F_DUPFD_CLOEXEC, 0)) < 0) {
				rc = hp_error(-errno, "cannot duplicate %s: %s", g->files[i], strerror(errno));
				break;
			}
			snprintf(own, sizeof own, "/proc/self/fd/%d", fd);
			if (!(d->files[i] = strdup(own))) {
				close(fd);
				rc = hp_error(-ENOMEM, "out of memory");
			}
		} else if (!(d->files[i] = strdup(g->files[i]))) {
			rc = hp_error(-ENOMEM, "out of memory");
		}
	}
	for (int v = 0; rc == 0 && v < g->nvalues; v++)
		rc = copy_value(d, &g->values[v]);
	for (int i = 0; rc == 0 && i < g->nnodes; i++)
		rc = copy_node(d, &g->nodes[i]);
	if (rc == 0 && (rc = copy_ints(&d->inputs, g->inputs, g->ninputs)) == 0)
		d->ninputs = g->ninputs;
	if (rc == 0 && (rc = copy_ints(&d->outputs, g->outputs, g->noutputs)) == 0)
		d->noutputs = g->noutputs;
	if (rc < 0) {
		hp_graph_free(d);
		d = NULL;
	}
	*out = d;
	return rc;
}

/* The smallest budget a split aims at: a quarter of the budget is left for
 * what the planner keeps resident. */
static uint64_t split_target(const struct hp_budget_layout *l)
{
	return l->budget - l->budget / 4;
}

static int prepare_again(struct hp_graph *g, struct hp_node *n)
{
	hp_node_release(n);
	n->workspace = 0;
	return n->op->prepare(g, n);
}

/* While the step that needs most is a filter gradient (ConvGradFilter,
 * after autodiff: the cut sees the forward ops only) that holds buffers
 * for every worker, that node alone gets one worker's (attribute
 * hpdlf_lean: its shares run in turn on one thread, the same sgemms and
 * sums, conv_grad.c) until the graph fits the budget.  A band's filter
 * gradient holds its X band with the halo, its dY band and the buffers:
 * in the 3-D U-Net of bench_ooc_targets.py trained at a batch of 1 the
 * first decoder convolution's (X 9.7 MB, dY 4.7 MB, workspace 6.8 MB of
 * which 3.4 the second worker's) set the smallest budget of every band
 * count up to 32; the smallest budget named fell from 7245824 bytes to
 * 6410240.  (At a quarter of its peak, 22858956 bytes, its 2-band
 * candidate then needs 23166976 for the forward band convolution, whose
 * one-worker form is the lean candidates' and slower there; 3 bands are
 * kept.)  Deterministic in the budget: a smaller budget leans the same
 * nodes first, so the smallest budget named still runs. */
#define LEAN_TRIES 64
static uint64_t split_min_node(const struct hp_graph *g, int *node)
{
	struct hp_plan_opts po = { .align = HP_BUDGET_ALIGN, .reserve_for = hp_budget_staging };

	return hp_plan_min_budget_node(g, &po, node);
}

/* *minb: the smallest budget of c, node s the one that sets it
 * (split_min_node); *changed: a node was given the attribute. */
static int lean_where_needed(struct hp_graph *c, uint64_t budget, uint64_t *minb, int s, int *changed)
{
	struct hp_attr on = { .name = "hpdlf_lean", .type = HP_ATTR_INT, .i = 1 };
	int rc = 0;

	for (int i = 0; i < LEAN_TRIES && rc == 0 && *minb > budget; i++) {
		if (s < 0)
			break;
		struct hp_node *n = &c->nodes[s];
		size_t ws = n->workspace;
		if (n->folded || !n->op || strcmp(n->domain, "ai.hpdlf") ||
		    (strcmp(n->op_type, "ConvGradFilter") && strcmp(n->op_type, "ConvGradData")) ||
		    hp_attr_int(n, "hpdlf_lean", -1) >= 0)
			break;
		*changed = 1;
		if ((rc = hp_graph_add_attr(c, s, &on)) < 0 || (rc = prepare_again(c, n)) < 0)
			break;
		if (n->workspace >= ws) { /* one worker already: as it was */
			n->attrs[n->nattrs - 1].i = 0;
			rc = prepare_again(c, n);
			break;
		}
		*minb = split_min_node(c, &s);
	}
	return rc;
}

/* A candidate: the graph cut into k bands (k = 1: as is) with cut as the
 * target, made lean where that fits it into budget; ahead: producers cut
 * ahead of their band-cut readers (inference); rejoin: with the bands
 * joined back where weights outweigh them (hp_split_bands). */
struct recipe {
	int k, lean, ahead, rejoin;
	uint64_t cut, budget;
	uint64_t skip_at; /* not a recipe's part: see cut_floor (0: build) */
};

/* The candidate kept so far: its graph, or (g NULL) the recipe that
 * builds it, with its figures. */
struct kept {
	struct hp_graph *g;
	struct recipe r;
	struct hp_split_info i;
};

/* The graphs a search tries are the forward graph g cut; ctx keys their
 * figures in the memo (split_memo.h).  g1: the unsplit candidate, built
 * first (at budget b1, figures i1; any1: the lean pass was tried and
 * changed nothing), until the search keeps it (kept_build). */
#define NBC (int)(sizeof band_counts / sizeof *band_counts)
struct search {
	const struct hp_graph *g;
	const struct hp_split_opts *so;
	uint64_t ctx;
	struct hp_graph *g1;
	struct hp_split_info i1;
	uint64_t b1;
	int any1;
	uint64_t kept_floor[NBC]; /* per band count: cut_kept_floor, 0 none */
	int *lean;                /* lean_cuts(g) once known, else -1 (search_lean) */
};

static void kept_set(struct kept *k, struct hp_graph *c, const struct recipe *r, const struct hp_split_info *i)
{
	hp_graph_free(k->g);
	k->g = c;
	k->r = *r;
	k->r.skip_at = 0; /* built from its recipe: in full */
	k->i = *i;
}

int hp_split_check_floors;
int hp_split_floor_skips;

/* Nodes the training finish rewrites or removes (autodiff.c's
 * train_rewrite, autodiff_untie.c, autodiff_half.c): their steps in the
 * forward graph need not be steps of the training graph. */
static int rewritten_by_finish(const struct hp_node *n)
{
	static const char *const ops[] = { "BatchNormalization", "Dropout", "Identity", "Cast" };

	for (size_t j = 0; j < sizeof ops / sizeof *ops; j++)
		if (!strcmp(n->op_type, ops[j]) && (!n->domain[0] || !strcmp(n->domain, "ai.onnx")))
			return 1;
	return 0;
}

/* A floor under the smallest budget of cut graph c (inferred) finished:
 * the finish (autodiff) keeps each forward node's inputs and outputs and
 * adds readers, values and nodes, and the lean pass grows or shrinks only
 * gradients' workspace, so each forward step needs at least its inputs
 * and the outputs no in-place rule may lay over them
 * (hp_plan_node_need_floor).  A candidate whose floor is no smaller than
 * the smallest budget of the one kept, while that does not fit, cannot
 * be kept (consider) and is not finished: the band counts of a 10,000-node
 * MLP trained at one byte were each differentiated, to need no less than
 * the graph unsplit (the weight blocks' Split of the first layer's input
 * sets both).  hp_split_check_floors (tests): finished anyway, and an
 * error where the floor lies above the figure. */
static uint64_t nodes_floor(const struct hp_graph *c, const char *only)
{
	struct hp_plan_opts po = { .align = HP_BUDGET_ALIGN, .reserve_for = hp_budget_staging };
	uint64_t most = 0;

	for (int i = 0; i < c->nnodes; i++) {
		const struct hp_node *n = &c->nodes[i];
		uint64_t need;
		if (n->folded || !n->op || rewritten_by_finish(n) || (only && !only[i]))
			continue;
		if ((need = hp_plan_node_need_floor(c, i, po.align)) > most)
			most = need;
	}
	return hp_plan_budget_for_need(&po, most);
}

static uint64_t cut_floor(const struct hp_graph *c)
{
	return nodes_floor(c, NULL);
}

/* A floor under every cut of forward graph g (inferred) in k bands
 * finished: the band pass keeps the nodes that allow no banding as they
 * are (hp_split_band_barriers), so cut_floor of those alone holds for
 * each cut, which need not be made to be skipped (a probe of the MLP's
 * floor search cut it in 9 band counts, to no use); 0 on error. */
static uint64_t cut_kept_floor(const struct hp_graph *g, int k, int training)
{
	char *barrier = malloc((size_t)g->nnodes + 1);
	uint64_t floor = 0;

	if (barrier && hp_split_band_barriers(g, k, training, barrier) == 0)
		floor = nodes_floor(g, barrier);
	free(barrier);
	return floor;
}

/* cut_kept_floor of forward graph g (training) for each band count;
 * counts whose band axis is the previous count's share its floor. */
static void kept_floors(const struct hp_graph *g, uint64_t *floor)
{
	for (int i = 0; i < NBC; i++) {
		int axis = hp_split_band_axis(g, band_counts[i], 1);
		floor[i] = i && axis == hp_split_band_axis(g, band_counts[i - 1], 1) ? floor[i - 1]
										     : cut_kept_floor(g, band_counts[i], 1);
	}
}

static uint64_t least_floor(const uint64_t *floor)
{
	uint64_t least = UINT64_MAX;

	for (int i = 0; i < NBC; i++)
		least = floor[i] < least ? floor[i] : least;
	return least;
}

uint64_t hp_split_train_floor(const struct hp_graph *g)
{
	uint64_t floor[NBC];

	kept_floors(g, floor);
	return least_floor(floor);
}

/* The candidate's figures after the band cut: inferred, finished, its
 * smallest budget taken and made lean where that fits it into the budget
 * (*any_below: as lean at every budget below its figure), and with want_ms
 * its predicted time where it fits (consider); *fin (may be NULL): the
 * hash of the graph finished. */
static int candidate_finish(struct hp_graph *c, const struct recipe *r, const struct hp_split_opts *so, int want_ms,
			    struct hp_split_info *info, int *any_below, uint64_t *fin)
{
	int rc = hp_graph_infer(c), changed = 0, s; /* the copy's kernels are not prepared yet */
	uint64_t floor = rc == 0 && r->skip_at && so->finish ? cut_floor(c) : 0;

	if (floor && floor >= r->skip_at) {
		hp_split_floor_skips++;
		if (!hp_split_check_floors) {
			info->min_after = floor;
			return 1;
		}
	}
	/* a second pass (weights of big matrix products) slots in here */
	if (rc == 0 && so->finish)
		rc = so->finish(c, so->arg);
	if (rc < 0)
		return rc;
	if (fin)
		*fin = hp_split_graph_hash(c);
	info->min_after = split_min_node(c, &s);
	*any_below = 0;
	if (r->budget && info->min_after > r->budget) {
		if ((rc = lean_where_needed(c, r->budget, &info->min_after, s, &changed)) < 0)
			return rc;
		*any_below = !changed;
	}
	info->ms = want_ms && r->budget && info->min_after <= r->budget ? hp_split_predicted_ms(c, r->budget) : -1;
	if (hp_split_check_floors && floor > info->min_after)
		return hp_error(HP_EINTERNAL, "%s: split candidate of %d bands needs %llu bytes, below its floor of %llu",
				c->path, r->k, (unsigned long long)info->min_after, (unsigned long long)floor);
	return 0;
}

/* Whether the band pass's lean flag can change g's cut: it marks Conv,
 * ConvTranspose and pooling nodes only (split_band.c); without them a
 * lean recipe cuts as the plain one. */
static int lean_cuts(const struct hp_graph *g)
{
	static const char *const marked[] = { "Conv", "ConvTranspose", "MaxPool", "AveragePool" };

	for (int i = 0; i < g->nnodes; i++)
		for (size_t j = 0; !g->nodes[i].domain[0] && j < sizeof marked / sizeof *marked; j++)
			if (!strcmp(g->nodes[i].op_type, marked[j]))
				return 1;
	return 0;
}

/* lean_cuts of the search's graph, which does not change during it:
 * scanned once (a scan a candidate was 3% of the 10,001-node MLP's
 * --plan, whose 1-byte search asked 18 times). */
static int search_lean(const struct search *x)
{
	if (*x->lean < 0)
		*x->lean = lean_cuts(x->g);
	return *x->lean;
}

/* The floor of every cut of x->g in k bands (0: none known). */
static uint64_t kept_floor_of(const struct search *x, int k)
{
	for (int i = 0; i < NBC; i++)
		if (band_counts[i] == k)
			return x->kept_floor[i];
	return 0;
}

/* The figures of cut graph h (1: found): remembered for r's budget, or a
 * floor (cut_floor) from which it cannot be kept (then its min_after). */
static int memo_figures(uint64_t ctx, uint64_t h, const struct recipe *r, int want_ms, struct hp_split_info *info)
{
	struct hp_split_info found;
	uint64_t floor;

	if (hp_split_memo_find(ctx, h, r->budget, want_ms, &found)) {
		info->min_after = found.min_after;
		info->ms = found.ms;
		return 1;
	}
	if (!r->skip_at || hp_split_check_floors || !hp_split_memo_floor_find(ctx, h, &floor) || floor < r->skip_at)
		return 0;
	hp_split_floor_skips++;
	info->min_after = floor;
	return 1;
}

/* Candidate r of g into *out with its figures in *info.  *out is NULL
 * when its figures were found in the memo under ctx (build 0: they may
 * be; 1: the graph is wanted), and for a rejoin that joined nothing back
 * (info->rejoined 0: the same graph as without).  want_ms: its predicted
 * time at the budget where it fits. */
static int candidate(const struct search *x, const struct recipe *r, int build, int want_ms, struct hp_graph **out,
		     struct hp_split_info *info)
{
	const struct hp_graph *g = x->g;
	const struct hp_split_opts *so = x->so;
	struct hp_graph *c;
	uint64_t h = 0, ctx = x->ctx, kf = r->skip_at ? kept_floor_of(x, r->k) : 0;
	uint64_t cut = r->k > 1 ? r->cut : 0; /* unsplit: any target */
	int rc, any_below = 0, known, lean = r->lean && search_lean(x);

	*out = NULL;
	info->k = r->k;
	info->lean = r->lean;
	info->rejoined = 0;
	info->axis = -1;
	info->nsplit = 0;
	info->ahead = 0;
	info->ms = -1;
	if (kf && kf >= r->skip_at) { /* cannot be kept, however cut */
		hp_split_floor_skips++;
		if (!hp_split_check_floors) {
			info->min_after = kf;
			return 0;
		}
	}
	known = ctx && !build && hp_split_memo_cut_find(ctx, r->k, lean, r->ahead, r->rejoin, cut, &h, info);
	if (known && !h)
		return 0; /* a rejoin that joins nothing back */
	if (known && memo_figures(ctx, h, r, want_ms, info))
		return 0;
	rc = graph_clone(g, &c);
	/* not in training: the fixed model preferred the cut ahead for the
	 * U-Net of bench_ooc_targets.py at 22323K by 1 ms of 858, and the run
	 * then read 124.2 MiB a step where it read 87.3 (the plans of the
	 * forward graph and of the run differ there) */
	if (rc == 0 && r->k > 1)
		rc = hp_split_bands(c, r->k, so->training, r->lean, r->ahead && !so->training, r->cut, &info->nsplit,
				    &info->axis, &info->ahead, r->rejoin ? &info->rejoined : NULL);
	if (rc == 0 && r->rejoin && !info->rejoined) { /* the same graph as without */
		hp_split_memo_cut_add(ctx, r->k, lean, r->ahead, r->rejoin, cut, 0, info);
		hp_graph_free(c);
		return 0;
	}
	if (rc == 0 && ctx && !known) {
		h = hp_split_graph_hash(c);
		hp_split_memo_cut_add(ctx, r->k, lean, r->ahead, r->rejoin, cut, h, info);
	}
	if (rc == 0 && ctx && !build && memo_figures(ctx, h, r, want_ms, info)) {
		hp_graph_free(c);
		return 0;
	}
	if (rc == 0)
		rc = candidate_finish(c, r, so, want_ms, info, &any_below, NULL);
	if (rc == 1) { /* not finished: it cannot be kept (cut_floor) */
		hp_split_memo_floor_add(ctx, h, info->min_after);
		hp_graph_free(c);
		return 0;
	}
	if (rc == 0 && hp_split_check_floors && kf > info->min_after)
		rc = hp_error(HP_EINTERNAL, "%s: split candidate of %d bands needs %llu bytes, below the floor of its "
			      "uncut nodes, %llu", g->path, r->k, (unsigned long long)info->min_after,
			      (unsigned long long)kf);
	if (rc < 0) {
		hp_graph_free(c);
		return rc;
	}
	if (ctx) /* (one that fits without its predicted time is not taken where that is wanted) */
		hp_split_memo_add(ctx, h, r->budget, any_below, info);
	*out = c;
	return 0;
}

/* The unsplit candidate built first is the one at budget b: the same
 * budget, or one at which the lean pass changes it no more than at b1 (it
 * tries nothing where the graph fits, and found nothing to change). */
static int first_is(const struct search *x, uint64_t b)
{
	uint64_t m = x->i1.min_after;

	return x->g1 && (b == x->b1 || x->any1 || (x->b1 >= m && b >= m));
}

/* The unsplit candidate r of g into x->g1, and ctx, the memo's key: the
 * hash of the forward graph and of it finished (which carries the
 * finish's options, a trainer's); its figures are remembered so. */
static int first_candidate(struct search *x, const struct recipe *r)
{
	struct hp_split_info *info = &x->i1;
	uint64_t fin = 0, h;
	int rc;

	memset(info, 0, sizeof *info);
	info->k = 1;
	info->axis = -1;
	info->ms = -1;
	x->b1 = r->budget;
	if ((rc = graph_clone(x->g, &x->g1)) < 0)
		return rc;
	h = hp_split_graph_hash(x->g1); /* the clone's is x->g's: it copies every field hashed */
	if ((rc = candidate_finish(x->g1, r, x->so, 0, info, &x->any1, &fin)) < 0)
		return rc;
	x->ctx = fin ^ h;
	x->ctx = x->ctx ? x->ctx : 1;
	hp_split_memo_cut_add(x->ctx, 1, 0, 0, 0, 0, h, info);
	hp_split_memo_add(x->ctx, h, r->budget, x->any1, info);
	return 0;
}

/* The kept candidate's graph, built from its recipe if it has none.  It
 * comes to the figures remembered (a candidate is a function of its cut
 * graph and ctx); should it not, its own figures are taken, those of the
 * graph that runs, and the log says so. */
static int kept_build(struct search *x, struct kept *k)
{
	const struct hp_graph *g = x->g;
	struct hp_split_info i = k->i;
	int rc;

	if (k->g)
		return 0;
	if (k->r.k == 1 && first_is(x, k->r.budget)) {
		k->g = x->g1;
		x->g1 = NULL;
		i = x->i1;
		rc = 0;
	} else {
		rc = candidate(x, &k->r, 1, 0, &k->g, &i);
	}
	if (rc == 0 && !k->g)
		return hp_error(HP_EINTERNAL, "split candidate of %d bands was not built", k->r.k);
	if (rc == 0 && i.min_after != k->i.min_after) {
		hp_log(HP_LOG_WARN, "%s: split candidate of %d bands came to %llu bytes where %llu were remembered",
		       g->path, k->r.k, (unsigned long long)i.min_after, (unsigned long long)k->i.min_after);
		k->i.min_after = i.min_after;
	}
	return rc;
}

/* g takes c's contents; c (now the old graph) is freed. */
static void adopt(struct hp_graph *g, struct hp_graph *c)
{
	struct hp_graph t = *g;

	*g = *c;
	*c = t;
	hp_graph_free(c);
}

/* The predicted step time of candidate c under the budget: the planner's
 * own schedule at that budget (its loads and write-backs), timed with a
 * fixed model, not the measured one, so that --plan and a run (which
 * never measures) choose alike:
 *   - kernels at SPLIT_GFLOPS (those with one worker's workspace: their
 *     FLOPs twice, lean_ms), plus SPLIT_KERNEL_US each (pinning, dispatch,
 *     the pool's wake-up: about what LeNet's kernels cost out of core
 *     beside their FLOPs);
 *   - each load or write-back SPLIT_IO_US of latency on one I/O lane plus
 *     its bytes at the tiers' default bandwidths, and SPLIT_IO_CPU_US on
 *     the compute lane (below 4 MiB the compute worker submits and reaps
 *     I/O itself; the store maps the chunks in and out).
 * More bands cost kernels and, once the schedule overflows the budget, I/O
 * of small pieces; fewer bands may not fit.  LeNet's inference at 260000
 * bytes ran 1.4-2.1x faster in 8 bands with 2 loads than in 4 with 16,
 * which a model without the I/O's CPU preferred.  A plan that fails (it
 * should not: the candidate fits) predicts HUGE_VAL. */
#define SPLIT_GFLOPS 50.0
#define SPLIT_KERNEL_US 20.0
#define SPLIT_IO_US 100.0
#define SPLIT_IO_CPU_US 50.0
#define SPLIT_READ_MBPS 2200.0
#define SPLIT_WRITE_MBPS 1500.0
/* inference's further band counts: kept only this much faster (split_pass) */
#define MORE_GAIN 0.02
/* Kernels with one worker's workspace (attribute hpdlf_lean, which a
 * band convolution's gradients share) run their tiles on one thread: their
 * FLOPs again, as on one of the development machine's two. */
static double lean_ms(const struct hp_graph *c)
{
	double flops = 0;

	for (int i = 0; i < c->nnodes; i++) {
		const struct hp_node *n = &c->nodes[i];
		if (!n->folded && hp_attr_int(n, "hpdlf_lean", 0) && n->op && n->op->flops)
			flops += n->op->flops(c, n);
	}
	return flops / SPLIT_GFLOPS / 1e6;
}

double hp_split_predicted_ms(const struct hp_graph *c, uint64_t budget)
{
	struct hp_plan_opts po = { .budget = budget, .align = HP_BUDGET_ALIGN, .reserve_for = hp_budget_staging };
	struct hp_plan *p = NULL;
	double ms;
	int requests = 0;

	po.gflops = SPLIT_GFLOPS;
	po.read_MBps = SPLIT_READ_MBPS;
	po.write_MBps = SPLIT_WRITE_MBPS;
	po.read_lat_us = po.write_lat_us = SPLIT_IO_US;
	if (hp_plan_build(c, &po, &p) < 0)
		return HUGE_VAL;
	for (int a = 0; a < p->nacts; a++)
		if (p->acts[a].act == HP_ACT_LOAD || p->acts[a].act == HP_ACT_WRITEBACK)
			requests++;
	ms = p->predicted_ms + (p->nsteps * SPLIT_KERNEL_US + requests * SPLIT_IO_CPU_US) / 1e3 + lean_ms(c);
	hp_plan_free(p);
	return ms;
}

/* Keep, of the candidates that fit the budget, the one predicted fastest
 * (hp_split_predicted_ms; the passes stop at the first within the target, which
 * leaves a quarter of the budget for what the planner keeps resident, or in
 * inference at the first after it not predicted faster: split_pass);
 * while none fits, the smallest.  LeNet training at a quarter of its peak
 * fits with 4 bands but not within the target, and ran 1.6-1.9x faster so
 * than with the 8 bands that are.  bar: a candidate that fits is kept only
 * when predicted faster than that too (HUGE_VAL: no bar). */
static void consider(struct kept *keep, struct hp_graph *c, const struct hp_split_info *ci, const struct recipe *r,
		     uint64_t budget, double bar)
{
	const struct hp_split_info *ki = &keep->i;
	int better = ki->min_after > budget ? ci->min_after < ki->min_after : 0;

	if (ci->min_after <= budget && ki->min_after <= budget)
		better = (ki->ms < 0 || ci->ms < ki->ms) && ci->ms < bar;
	if (!better) {
		hp_graph_free(c);
		return;
	}
	kept_set(keep, c, r, ci);
}

/* One pass over the band counts, splitting what needs more than cut (the
 * target, or below it: split_deeper); *keep holds the best candidate so
 * far (the unsplit one on the first pass).  rejoin: each candidate that
 * fits the budget is also tried with its bands joined back where weights
 * outweigh them (hp_split_bands), kept when predicted faster.  Only the
 * pass at the budget given does: the smallest budget named (named_floor,
 * fall_back) is the plain cut's, whatever the budget. */
static int split_pass(const struct search *x, uint64_t budget, uint64_t target, uint64_t cut, int rejoin,
		      struct kept *keep)
{
	size_t nbc = sizeof band_counts / sizeof *band_counts;
	const struct hp_split_opts *so = x->so;
	struct hp_split_info ci;
	struct hp_graph *c;
	int rc = 0, within = keep->i.min_after <= target, kw = 0, more = 0;

	/* band counts with workspaces for every worker, then (while none is
	 * within the target) with one worker's: the kernels then run their
	 * tiles on one thread, which hp_split_predicted_ms counts.  In
	 * training, when a cut with every worker's workspace is within the
	 * target at kw bands, the one-worker cuts of fewer bands are tried
	 * still: fewer, larger bands can be faster than more on two threads
	 * (LeNet's training at a quarter of its peak, once its convolutions'
	 * panels shrank to their bands: 12 bands and 335 kernels where 4
	 * one-worker bands ran 91, predicted 25.5 against 14.6 ms).  Not in
	 * inference: the 3-D U-Net of bench_ooc_targets.py at a quarter took
	 * a one-worker cut predicted faster that read 115.8 MiB a run where
	 * the plain cut read 58.3, and ran slower.
	 * more: in inference, at the budget given (rejoin), once a count is
	 * within the target, the next counts are tried while each is kept,
	 * predicted MORE_GAIN faster than the one kept before it: the first
	 * count within the target may leave the schedule little room.  The
	 * 3-D U-Net of bench_ooc_targets.py at half its peak (28753412 bytes)
	 * took 4 bands (predicted 614 ms) that wrote and read back each 8-MiB
	 * band of its last Concat around the convolution after it (59.6 MB
	 * written and 63.8 MB read a run, stalls of 18-35 ms a run); it now
	 * takes 6 bands joined back where weights outweigh them (585 ms:
	 * 21.7 MiB read and 17.4 written a run, stalls of 3-15 ms); 8 (580)
	 * fall short of the gain and end the pass.  The gain: the fixed model
	 * prices a kernel at SPLIT_KERNEL_US where pins and unpins out of
	 * core took ~200 us each under load, and EfficientNet-B0 at half its
	 * peak (batch 16) took 4 bands for 0.4% predicted over 3 (13 kernels
	 * more for the same bytes, ~9% more task-clock in 7 pairs, planning
	 * included).  The smallest budget named is the plain cut's (rejoin 0)
	 * and does not change. */
	for (size_t i = 0; i < 2 * nbc && budget && (!within || kw || more); i++) {
		int lean = i >= nbc, k = band_counts[i % nbc];
		if (keep->i.k == 1 && keep->i.min_after <= budget)
			break; /* fits unsplit */
		if (more && lean)
			break; /* only more plain bands */
		double bar = more ? keep->i.ms * (1 - MORE_GAIN) : HUGE_VAL;
		if (kw && !lean)
			continue;
		if (kw && k >= kw)
			break;
		/* producers cut ahead of their band-cut readers, then (when
		 * that cut any) not: more bands can cost as well as save; each
		 * that fits also with its bands joined back (rejoin) */
		for (int ahead = 1, cut_any = 1; ahead >= 0 && cut_any && rc == 0; ahead--) {
			struct recipe r = { .k = k, .lean = lean, .ahead = ahead, .cut = cut, .budget = budget };
			if (keep->i.min_after > budget) /* while nothing fits, the smallest is kept */
				r.skip_at = keep->i.min_after;
			rc = candidate(x, &r, 0, 1, &c, &ci);
			if (rc < 0)
				break;
			ci.min_before = keep->i.min_before;
			if (ci.min_after <= target && !within && !lean && so->training)
				kw = k;
			else if (ci.min_after <= target && lean)
				kw = 0; /* the one-worker pass ends here */
			within |= ci.min_after <= target;
			cut_any = ci.ahead > 0;
			int fits = ci.min_after <= budget;
			consider(keep, c, &ci, &r, budget, bar);
			if (!rejoin || !fits || so->training) /* inference only: hp_split_bands */
				continue;
			r.rejoin = 1;
			r.skip_at = 0;
			rc = candidate(x, &r, 0, 1, &c, &ci);
			if (rc < 0)
				break;
			if (ci.rejoined) {
				ci.min_before = keep->i.min_before;
				consider(keep, c, &ci, &r, budget, bar);
			}
		}
		more = rejoin && !so->training && !lean && within && keep->r.k == k;
	}
	return rc;
}

/* The graph a run at budget b splits to (b's own target), in *keep. */
static int pass_at(const struct search *x, uint64_t b, struct kept *keep)
{
	uint64_t target = b - b / 4; /* split_target of a layout of b */
	struct recipe r = { .k = 1, .cut = target, .budget = b };
	struct hp_split_info ci;
	struct hp_graph *c;
	int rc = candidate(x, &r, 0, 0, &c, &ci);

	if (rc < 0)
		return rc;
	kept_set(keep, c, &r, &ci);
	keep->i.min_before = keep->i.min_after;
	return split_pass(x, b, target, target, 0, keep);
}

/* Nothing fits the budget: the smallest candidate's figure may not be one
 * a run at that figure reaches, since nodes are split only when they need
 * more than the budget's target (a budget of 143360 bytes splits less than
 * one of 81056 and needed 147456).  So the figure to name is followed: the
 * split at the figure named, until the split at a figure fits it.  The
 * refusal and --plan (a 1-byte budget) then name a budget that runs, with
 * the graph a run at it uses. */
#define FIXPOINT_TRIES 8
static int fall_back(const struct search *x, struct kept *keep)
{
	uint64_t b = keep->i.min_after, before = keep->i.min_before;
	int rc = 0;

	for (int i = 0; i < FIXPOINT_TRIES && rc == 0; i++) {
		struct kept c = { 0 };
		rc = pass_at(x, b, &c);
		if (rc < 0) {
			hp_graph_free(c.g);
			break;
		}
		hp_graph_free(keep->g);
		*keep = c;
		keep->i.min_before = before;
		if (c.i.min_after == b)
			break; /* a run at b splits to this graph, which needs b */
		b = c.i.min_after;
	}
	return rc;
}

/* The smallest budget named (what --plan names: the split for one byte,
 * followed to its fixpoint by fall_back), 0 on error; its candidate in
 * *out when out is not NULL (the caller frees its graph). */
static uint64_t named_floor(const struct search *x, struct kept *out)
{
	struct recipe r = { .k = 1, .cut = 1, .budget = 1 };
	struct kept keep = { 0 };
	struct hp_split_info ci;
	struct hp_graph *c;
	uint64_t floor = 0;

	if (candidate(x, &r, 0, 0, &c, &ci) == 0) {
		kept_set(&keep, c, &r, &ci);
		keep.i.min_before = keep.i.min_after;
		if (split_pass(x, 1, 1, 1, 0, &keep) == 0 && fall_back(x, &keep) == 0)
			floor = keep.i.min_after;
	}
	if (out && floor) {
		*out = keep;
		return floor;
	}
	hp_graph_free(keep.g);
	return floor;
}

/* Nothing fits at a budget from the smallest one named up: the forward
 * graph is split before autodiff, so the cut sees forward ops only, while
 * their gradients need about three times their activations (a Relu's
 * reads y and dy and writes dx); and a budget's target decides which nodes
 * are cut.  Budgets between the two were refused (lenet training:
 * 400000-819199 bytes, naming 819200, while 204800-300000 ran; the 3-D
 * U-Net of bench_ooc_targets.py at batch 1: 7.3-23.3 MB, naming 23.3 MB,
 * while 7245824 bytes ran).  Then passes cut at half the target, halved
 * again up to DEEPER_TRIES times, until a candidate fits; failing that the
 * graph of the smallest budget named, which needs no more than this one.
 * So every budget from the figure named up runs, and one byte less is
 * refused as before. */
#define DEEPER_TRIES 6
static int split_deeper(const struct search *x, uint64_t budget, uint64_t target, struct kept *keep)
{
	uint64_t cut = target, floor;
	struct kept f = { 0 };
	int rc = 0;

	if (!budget || keep->i.min_after <= budget)
		return 0;
	floor = named_floor(x, &f);
	if (!floor || budget < floor) {
		hp_graph_free(f.g);
		return 0;
	}
	for (int i = 0; i < DEEPER_TRIES && rc == 0 && keep->i.min_after > budget; i++) {
		cut /= 2;
		rc = split_pass(x, budget, target, cut, 0, keep);
	}
	if (rc == 0 && keep->i.min_after > budget && f.i.min_after <= budget) {
		f.i.min_before = keep->i.min_before;
		hp_graph_free(keep->g);
		*keep = f;
		return 0;
	}
	hp_graph_free(f.g);
	return rc;
}

/* The unsplit candidate is built first: the hash of its finished graph
 * keys the memo (a trainer's options show in its training graph). */
int hp_split_for_budget(struct hp_graph *g, const struct hp_split_opts *so, struct hp_split_info *info)
{
	uint64_t budget = so->layout->budget, target = split_target(so->layout);
	struct recipe r = { .k = 1, .cut = target, .budget = budget };
	int lean = -1;
	struct search x = { .g = g, .so = so, .lean = &lean };
	struct kept keep = { 0 };
	int rc;

	if ((rc = first_candidate(&x, &r)) < 0) {
		hp_graph_free(x.g1);
		return rc;
	}
	kept_set(&keep, NULL, &r, &x.i1);
	keep.i.min_before = keep.i.min_after;
	/* training only: its band pass cuts no producer ahead, so a cut
	 * not made reports what it would have (split_pass's cut_any) */
	if (so->training && so->finish && keep.i.min_after > budget)
		kept_floors(g, x.kept_floor);
	if (so->floor)
		*so->floor = x.kept_floor[0] ? least_floor(x.kept_floor) : hp_split_train_floor(g);
	rc = split_pass(&x, budget, target, target, 1, &keep);
	if (rc == 0)
		rc = split_deeper(&x, budget, target, &keep);
	if (rc == 0 && budget && keep.i.min_after > budget)
		rc = fall_back(&x, &keep);
	if (rc == 0)
		rc = kept_build(&x, &keep);
	hp_graph_free(x.g1);
	if (rc < 0) {
		hp_graph_free(keep.g);
		return rc;
	}
	adopt(g, keep.g);
	if (info)
		*info = keep.i;
	return 0;
}

int hp_split_ops(struct hp_graph *g, const struct hp_budget_layout *l, int *nsplit)
{
	struct hp_split_opts so = { .layout = l };
	struct hp_split_info info = { 0 };
	int rc = 0;

	if (l->budget && hp_split_min_budget(g) > l->budget)
		rc = hp_split_for_budget(g, &so, &info);
	if (nsplit)
		*nsplit = info.nsplit;
	return rc;
}

int hp_graph_split(struct hp_graph *g, const struct hp_exec_opts *o, int *nsplit)
{
	int off = o && o->size >= offsetof(struct hp_exec_opts, no_split) + sizeof o->no_split && o->no_split;
	struct hp_budget_layout l;

	hp_budget_layout_init(&l, o && !off ? o->budget : 0);
	return hp_split_ops(g, &l, nsplit);
}

/* For other rewrites that try a candidate on a copy (remat.c). */
int hp_split_graph_copy(const struct hp_graph *g, struct hp_graph **out)
{
	return graph_clone(g, out);
}

void hp_split_graph_adopt(struct hp_graph *g, struct hp_graph *c)
{
	adopt(g, c);
}
