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
static int lean_where_needed(struct hp_graph *c, uint64_t budget, uint64_t *minb)
{
	struct hp_plan_opts po = { .align = HP_BUDGET_ALIGN, .reserve_for = hp_budget_staging };
	struct hp_attr on = { .name = "hpdlf_lean", .type = HP_ATTR_INT, .i = 1 };
	int rc = 0;

	for (int i = 0; i < LEAN_TRIES && rc == 0 && *minb > budget; i++) {
		int s;
		hp_plan_min_budget_node(c, &po, &s);
		if (s < 0)
			break;
		struct hp_node *n = &c->nodes[s];
		size_t ws = n->workspace;
		if (n->folded || !n->op || strcmp(n->domain, "ai.hpdlf") ||
		    (strcmp(n->op_type, "ConvGradFilter") && strcmp(n->op_type, "ConvGradData")) ||
		    hp_attr_int(n, "hpdlf_lean", -1) >= 0)
			break;
		if ((rc = hp_graph_add_attr(c, s, &on)) < 0 || (rc = prepare_again(c, n)) < 0)
			break;
		if (n->workspace >= ws) { /* one worker already: as it was */
			n->attrs[n->nattrs - 1].i = 0;
			rc = prepare_again(c, n);
			break;
		}
		*minb = hp_split_min_budget(c);
	}
	return rc;
}

/* The graph cut into k bands (k = 1: as is), inferred and finished, and
 * made lean where that fits it into the budget (0: none); ahead: producers
 * cut ahead of their band-cut readers (inference); rejoin: with the bands
 * joined back where weights outweigh them (hp_split_bands). */
static int candidate(const struct hp_graph *g, int k, int lean, int ahead, int rejoin, uint64_t target,
		     uint64_t budget,
		     const struct hp_split_opts *so, struct hp_graph **out, struct hp_split_info *info)
{
	struct hp_graph *c;
	int rc = graph_clone(g, &c);

	*out = NULL;
	info->k = k;
	info->lean = lean;
	info->rejoined = 0;
	info->axis = -1;
	info->nsplit = 0;
	info->ahead = 0;
	info->ms = -1;
	/* not in training: the fixed model preferred the cut ahead for the
	 * U-Net of bench_ooc_targets.py at 22323K by 1 ms of 858, and the run
	 * then read 124.2 MiB a step where it read 87.3 (the plans of the
	 * forward graph and of the run differ there) */
	if (rc == 0 && k > 1)
		rc = hp_split_bands(c, k, so->training, lean, ahead && !so->training, target, &info->nsplit,
				    &info->axis, &info->ahead, rejoin ? &info->rejoined : NULL);
	if (rc == 0 && rejoin && !info->rejoined) { /* the same graph as without */
		hp_graph_free(c);
		return 0;
	}
	/* a second pass (weights of big matrix products) slots in here */
	if (rc == 0)
		rc = hp_graph_infer(c); /* the copy's kernels are not prepared yet */
	if (rc == 0 && so->finish)
		rc = so->finish(c, so->arg);
	if (rc < 0) {
		hp_graph_free(c);
		return rc;
	}
	info->min_after = hp_split_min_budget(c);
	if (budget && info->min_after > budget && (rc = lean_where_needed(c, budget, &info->min_after)) < 0) {
		hp_graph_free(c);
		return rc;
	}
	*out = c;
	return 0;
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
 * leaves a quarter of the budget for what the planner keeps resident);
 * while none fits, the smallest.  LeNet training at a quarter of its peak
 * fits with 4 bands but not within the target, and ran 1.6-1.9x faster so
 * than with the 8 bands that are. */
static void consider(struct hp_graph **keep, struct hp_split_info *ki, struct hp_graph *c, struct hp_split_info *ci,
		     uint64_t budget)
{
	int better = ki->min_after > budget ? ci->min_after < ki->min_after : 0;

	ci->ms = budget && ci->min_after <= budget ? hp_split_predicted_ms(c, budget) : -1;
	if (ci->min_after <= budget && ki->min_after <= budget)
		better = ki->ms < 0 || ci->ms < ki->ms;
	if (!better) {
		hp_graph_free(c);
		return;
	}
	hp_graph_free(*keep);
	*keep = c;
	*ki = *ci;
}

/* One pass over the band counts, splitting what needs more than cut (the
 * target, or below it: split_deeper); *keep and *ki hold the best graph so
 * far (the unsplit one on the first pass).  rejoin: each candidate that
 * fits the budget is also tried with its bands joined back where weights
 * outweigh them (hp_split_bands), kept when predicted faster.  Only the
 * pass at the budget given does: the smallest budget named (named_floor,
 * fall_back) is the plain cut's, whatever the budget. */
static int split_pass(const struct hp_graph *g, const struct hp_split_opts *so, uint64_t budget, uint64_t target,
		      uint64_t cut, int rejoin, struct hp_graph **keep, struct hp_split_info *ki)
{
	size_t nbc = sizeof band_counts / sizeof *band_counts;
	struct hp_split_info ci;
	struct hp_graph *c;
	int rc = 0, within = ki->min_after <= target, kw = 0;

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
	 * the plain cut read 58.3, and ran slower. */
	for (size_t i = 0; i < 2 * nbc && budget && (!within || kw); i++) {
		int lean = i >= nbc, k = band_counts[i % nbc];
		if (ki->k == 1 && ki->min_after <= budget)
			break; /* fits unsplit */
		if (kw && !lean)
			continue;
		if (kw && k >= kw)
			break;
		/* producers cut ahead of their band-cut readers, then (when
		 * that cut any) not: more bands can cost as well as save; each
		 * that fits also with its bands joined back (rejoin) */
		for (int ahead = 1, cut_any = 1; ahead >= 0 && cut_any && rc == 0; ahead--) {
			rc = candidate(g, k, lean, ahead, 0, cut, budget, so, &c, &ci);
			if (rc < 0)
				break;
			ci.min_before = ki->min_before;
			if (ci.min_after <= target && !within && !lean && so->training)
				kw = k;
			else if (ci.min_after <= target && lean)
				kw = 0; /* the one-worker pass ends here */
			within |= ci.min_after <= target;
			cut_any = ci.ahead > 0;
			int fits = ci.min_after <= budget;
			consider(keep, ki, c, &ci, budget);
			if (!rejoin || !fits || so->training) /* inference only: hp_split_bands */
				continue;
			rc = candidate(g, k, lean, ahead, 1, cut, budget, so, &c, &ci);
			if (rc < 0)
				break;
			if (c) {
				ci.min_before = ki->min_before;
				consider(keep, ki, c, &ci, budget);
			}
		}
	}
	return rc;
}

/* The graph a run at budget b splits to (b's own target), in *keep. */
static int pass_at(const struct hp_graph *g, const struct hp_split_opts *so, uint64_t b, struct hp_graph **keep,
		   struct hp_split_info *ki)
{
	uint64_t target = b - b / 4; /* split_target of a layout of b */
	int rc = candidate(g, 1, 0, 0, 0, target, b, so, keep, ki);

	if (rc < 0)
		return rc;
	ki->min_before = ki->min_after;
	return split_pass(g, so, b, target, target, 0, keep, ki);
}

/* Nothing fits the budget: the smallest candidate's figure may not be one
 * a run at that figure reaches, since nodes are split only when they need
 * more than the budget's target (a budget of 143360 bytes splits less than
 * one of 81056 and needed 147456).  So the figure to name is followed: the
 * split at the figure named, until the split at a figure fits it.  The
 * refusal and --plan (a 1-byte budget) then name a budget that runs, with
 * the graph a run at it uses. */
#define FIXPOINT_TRIES 8
static int fall_back(const struct hp_graph *g, const struct hp_split_opts *so, struct hp_graph **keep,
		     struct hp_split_info *ki)
{
	uint64_t b = ki->min_after, before = ki->min_before;
	int rc = 0;

	for (int i = 0; i < FIXPOINT_TRIES && rc == 0; i++) {
		struct hp_graph *c = NULL;
		struct hp_split_info ci;
		rc = pass_at(g, so, b, &c, &ci);
		if (rc < 0) {
			hp_graph_free(c);
			break;
		}
		hp_graph_free(*keep);
		*keep = c;
		*ki = ci;
		ki->min_before = before;
		if (ci.min_after == b)
			break; /* a run at b splits to this graph, which needs b */
		b = ci.min_after;
	}
	return rc;
}

/* The smallest budget named (what --plan names: the split for one byte,
 * followed to its fixpoint by fall_back), 0 on error; its graph in *out
 * when out is not NULL (the caller frees it). */
static uint64_t named_floor(const struct hp_graph *g, const struct hp_split_opts *so, struct hp_graph **out,
			    struct hp_split_info *oi)
{
	struct hp_graph *keep = NULL;
	struct hp_split_info ki;
	uint64_t floor = 0;

	if (candidate(g, 1, 0, 0, 0, 1, 1, so, &keep, &ki) == 0) {
		ki.min_before = ki.min_after;
		if (split_pass(g, so, 1, 1, 1, 0, &keep, &ki) == 0 && fall_back(g, so, &keep, &ki) == 0)
			floor = ki.min_after;
	}
	if (out && floor) {
		*out = keep;
		*oi = ki;
		return floor;
	}
	hp_graph_free(keep);
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
static int split_deeper(const struct hp_graph *g, const struct hp_split_opts *so, uint64_t budget,
			uint64_t target, struct hp_graph **keep, struct hp_split_info *ki)
{
	uint64_t cut = target, floor;
	struct hp_graph *fg = NULL;
	struct hp_split_info fi;
	int rc = 0;

	if (!budget || ki->min_after <= budget)
		return 0;
	floor = named_floor(g, so, &fg, &fi);
	if (!floor || budget < floor) {
		hp_graph_free(fg);
		return 0;
	}
	for (int i = 0; i < DEEPER_TRIES && rc == 0 && ki->min_after > budget; i++) {
		cut /= 2;
		rc = split_pass(g, so, budget, target, cut, 0, keep, ki);
	}
	if (rc == 0 && ki->min_after > budget && fi.min_after <= budget) {
		fi.min_before = ki->min_before;
		hp_graph_free(*keep);
		*keep = fg;
		*ki = fi;
		return 0;
	}
	hp_graph_free(fg);
	return rc;
}

int hp_split_for_budget(struct hp_graph *g, const struct hp_split_opts *so, struct hp_split_info *info)
{
	struct hp_graph *keep = NULL;
	struct hp_split_info ki;
	uint64_t budget = so->layout->budget, target = split_target(so->layout);
	int rc;

	rc = candidate(g, 1, 0, 0, 0, target, budget, so, &keep, &ki);
	if (rc < 0)
		return rc;
	ki.min_before = ki.min_after;
	rc = split_pass(g, so, budget, target, target, 1, &keep, &ki);
	if (rc == 0)
		rc = split_deeper(g, so, budget, target, &keep, &ki);
	if (rc == 0 && budget && ki.min_after > budget)
		rc = fall_back(g, so, &keep, &ki);
	if (rc < 0) {
		hp_graph_free(keep);
		return rc;
	}
	adopt(g, keep);
	if (info)
		*info = ki;
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
