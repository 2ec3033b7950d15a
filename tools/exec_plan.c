/* hpdlf-exec --plan: the plan's summary (memory, bytes per tier, the
 * predicted time and the speed model behind it), the smallest budget a run
 * takes, the backward's stash and the tiers' footprint. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "hpdlf/error.h"
#include "hpdlf/exec.h"
#include "hpdlf/graph.h"
#include "hpdlf/tensor.h"
#include "exec/budget.h"
#include "exec/plan.h"
#include "exec/remat.h"
#include "tools/exec_cli.h"

static const char *source(int src, const char *cache)
{
	return src == 1 ? (cache[0] ? "measured now, cached" : "measured now") : src == 2 ? "cached" : "built-in default";
}

/* The process's peak: its fixed overhead, the tensors' peak and the
 * staging kept beside them, and the store's bookkeeping of those pages
 * (exec/budget.h). */
static uint64_t rss_peak(const struct hp_plan_summary *p)
{
	uint64_t t = hp_budget_tensors(p->budget), pool = p->peak_bytes + (t ? hp_budget_staging(t) : 0);

	return hp_budget_overhead() + pool + (t ? hp_budget_pool_meta(pool) : 0);
}

/* The --plan summary: memory, bytes per tier and the predicted time with
 * the speed model behind it. */
static void print_plan(const struct hp_plan_summary *p, const char *what, const struct cli *c)
{
	char a[32], b[32], node[1024];

	printf("plan for %s%s: %d kernels, budget %s\n", c->model, what, p->steps,
	       p->budget ? hp_format_size(p->budget, a, sizeof a) : "unlimited (in core)");
	printf("  peak tensor memory   %s\n", hp_format_size(p->peak_bytes, a, sizeof a));
	printf("  peak RSS (predicted) %s (fixed overhead %s", hp_format_size(rss_peak(p), a, sizeof a),
	       hp_format_size(hp_budget_overhead(), b, sizeof b));
	if (p->budget >= HP_BUDGET_PROCESS_FROM)
		printf(", taken off the budget: %s for tensors", hp_format_size(hp_budget_tensors(p->budget), a, sizeof a));
	else if (p->budget)
		printf(" beside the budget: below 64 MiB it bounds tensors only");
	printf(")\n");
	printf("  smallest budget      %s = %llu bytes (node '%s')\n", hp_format_size(p->min_budget, b, sizeof b),
	       (unsigned long long)p->min_budget, hp_escape(p->min_node, node, sizeof node));
	printf("  tier %-15s read %s (%llu bytes) in %llu loads (%llu prefetched early), written %s (%llu bytes)\n",
	       p->tier_name[0] ? p->tier_name : "(none)", hp_format_size(p->bytes_loaded, a, sizeof a),
	       (unsigned long long)p->bytes_loaded, (unsigned long long)p->loads, (unsigned long long)p->prefetched,
	       hp_format_size(p->bytes_written, b, sizeof b), (unsigned long long)p->bytes_written);
	printf("  predicted step time  %.2f ms (%s-bound: compute %.2f ms, I/O %.2f ms)\n", p->predicted_ms,
	       p->io_ms > p->compute_ms ? "I/O" : "compute", p->compute_ms, p->io_ms);
	printf("    sgemm-bound        %3d kernels %9.2f ms  (%.1f GFLOP/s at %.2g FLOP .. %.1f at %.2g)\n",
	       p->gemm_kernels, p->gemm_ms, p->gflops_small, p->flops_small, p->gflops, p->flops_large);
	printf("    memory-bound       %3d kernels %9.2f ms  (%.1f GB/s)\n", p->mem_kernels, p->mem_ms, p->mem_GBps);
	printf("    of which dispatch              %9.2f ms  (%.1f us per kernel)\n", p->dispatch_ms, p->dispatch_us);
	printf("    compute model      %d thread%s per kernel, %d lane%s: %s\n", p->threads, p->threads > 1 ? "s" : "",
	       p->workers, p->workers > 1 ? "s" : "", source(p->compute_source, p->compute_cache));
	if (p->tier_name[0]) {
		printf("    I/O read           %9.2f ms  (%.0f MB/s + %.0f us per load)\n", p->read_ms, p->read_MBps,
		       p->read_lat_us);
		printf("    I/O write          %9.2f ms  (%.0f MB/s + %.0f us per write-back)\n", p->write_ms,
		       p->write_MBps, p->write_lat_us);
		printf("    tier model         %s: %s\n", p->tier_name, source(p->tier_source, p->tier_cache));
	}
}

int (*exec_floor_probe)(uint64_t b, char *node, size_t n, void *arg);
void *exec_floor_arg;
uint64_t exec_gmin_named;

/* Probes of a search: a complete one takes at most 2 log2(pages) + 2 of
 * them (46 from 4 GiB), so the figure named does not depend on the
 * machine's speed or load; a search that runs out of them, or of
 * FLOOR_PROBE_SECONDS of CPU on a graph whose probes take seconds, keeps
 * the best found. */
#define FLOOR_PROBES 48
#define FLOOR_PROBE_SECONDS 60.0

/* Below gmin's figure: a run splits for its own budget, and may fit a
 * smaller one than the graph split for 1 byte (lenet training: 131072
 * against 143360).  Searched on HP_BUDGET_ALIGN downwards from the
 * figure: steps of 1, 2, 4, ... pages while runs fit, then bisection
 * between the last that did not and the last that did, so that the
 * figure named runs and one page less (any budget one byte less) is
 * refused.  The floor lies close below the figure (ResNet-18 training:
 * 6 pages below 5208), where a bisection from 0 spent its
 * time on probes far below and named 5208.  The search is bounded by a
 * count of probes, not by time: bounded by 3 s of CPU, efficientnet_b0's
 * training named 8.1 MiB in one run and 4.6 in another on a loaded
 * machine (its floor is 3.2 MiB, 21 probes down). */
static int floor_fits(uint64_t pages, struct hp_plan_summary *p, char *node, size_t n)
{
	char at[1024];

	if (exec_floor_probe(pages * HP_BUDGET_ALIGN, at, sizeof at, exec_floor_arg) <= 0)
		return 0;
	p->min_budget = pages * HP_BUDGET_ALIGN;
	snprintf(node, n, "%s", at);
	p->min_node = node;
	return 1;
}

static int floor_time_up(const struct timespec *t0, int *probes)
{
	struct timespec t;

	if (++*probes >= FLOOR_PROBES)
		return 1;
	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
	return (double)(t.tv_sec - t0->tv_sec) + 1e-9 * (double)(t.tv_nsec - t0->tv_nsec) > FLOOR_PROBE_SECONDS;
}

static void floor_below(struct hp_plan_summary *p, char *node, size_t n)
{
	uint64_t lo = 0, hi = p->min_budget / HP_BUDGET_ALIGN, step = 1;
	struct timespec t0;
	int probes = 0;

	if (!exec_floor_probe)
		return;
	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t0);
	while (hi > step) { /* gallop: lo ends as a page count that does not fit (0: none found) */
		if (!floor_fits(hi - step, p, node, n)) {
			lo = hi - step;
			break;
		}
		hi -= step;
		step *= 2;
		if (floor_time_up(&t0, &probes))
			return;
	}
	while (hi - lo > 1) {
		uint64_t mid = lo + (hi - lo) / 2;
		if (floor_fits(mid, p, node, n))
			hi = mid;
		else
			lo = mid;
		if (floor_time_up(&t0, &probes))
			return;
	}
}

uint64_t exec_floor_search(uint64_t from, char *node, size_t n)
{
	struct hp_plan_summary p;

	memset(&p, 0, sizeof p);
	p.min_budget = from;
	floor_below(&p, node, n);
	return p.min_budget;
}

/* The smallest budget of gmin (compiled for 1 byte) into p: the figure a
 * run below it is refused with, then planned at that figure for its node;
 * for training, lower where a run fits (floor_below). */
static int smallest_budget(const struct hp_graph *gmin, const struct hp_exec_opts *o, struct hp_plan_summary *p)
{
	static char node[1024];
	struct hp_exec_opts o1 = *o;
	struct hp_plan_summary *q = malloc(sizeof *q);
	int rc;

	if (!q)
		return hp_error(-ENOMEM, "out of memory");
	o1.budget = 1;
	o1.no_split = 1;
	rc = exec_gmin_named ? HP_EBUDGET_OP : hp_plan_summarize_min(gmin, &o1, q);
	if (rc == HP_EBUDGET_OP) {
		p->min_budget = o1.budget = exec_gmin_named ? exec_gmin_named : hp_exec_min_budget();
		rc = hp_plan_summarize_min(gmin, &o1, q);
		if (rc == 0 && q->min_budget == p->min_budget) {
			snprintf(node, sizeof node, "%s", q->min_node);
			p->min_node = node;
		}
		if (rc >= 0)
			floor_below(p, node, sizeof node);
	}
	free(q);
	return rc < 0 ? rc : 0;
}

/* A training step's activations by fate: kept, swapped, recomputed (exec/remat.h). */
static void print_stash(const struct hp_remat_figures *f)
{
	char a[32], b[32], d[32];

	if (!(f->kept || f->swapped || f->recomputed))
		return;
	printf("  backward's stash     kept %s, swapped %s, recomputed %s (%d node%s, %.4g MFLOP)\n",
	       hp_format_size(f->kept, a, sizeof a), hp_format_size(f->swapped, b, sizeof b),
	       hp_format_size(f->recomputed, d, sizeof d), f->nodes, f->nodes == 1 ? "" : "s", f->flops / 1e6);
}

int exec_plan_only(const struct hp_graph *g, const struct hp_exec_opts *o, const struct cli *c, const char *what,
		   const struct hp_graph *gmin)
{
	struct hp_plan_summary p;
	int rc;

	if (c->plan_dot && (rc = hp_plan_write_dot(g, o, c->plan_dot)) < 0)
		return rc;
	if (!c->plan)
		return 0;
	struct hp_plan_foot f;
	struct hp_remat_figures stash;
	char a[32], b[32], t[32];

	rc = hp_plan_summarize_foot(g, o, &p, &stash, &f);
	if (rc == 0 && !f.known)
		rc = hp_plan_footprint(g, o, &f.state, &f.swapped, &f.peak);
	uint64_t state = f.state, swapped = f.swapped, foot = f.peak;
	if (rc == 0 && gmin)
		rc = smallest_budget(gmin, o, &p);
	if (rc < 0)
		return rc;
	print_plan(&p, what, c);
	print_stash(&stash);
	if (o->budget)
		printf("  tier footprint       %s at most at once (state %s once, swapped values %s)\n",
		       hp_format_size(foot, t, sizeof t), hp_format_size(state, a, sizeof a),
		       hp_format_size(swapped, b, sizeof b));
	return 0;
}
