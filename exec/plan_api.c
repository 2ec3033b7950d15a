/* Public planning entry points: summary for --plan, Graphviz for --plan-dot. */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hpdlf/error.h"
#include "hpdlf/exec.h"
#include "common/cpus.h"
#include "exec/exec_internal.h"
#include "exec/plan.h"
#include "exec/remat.h"
#include "exec/speed.h"

uint64_t hp_exec_min_budget(void)
{
	return hp_plan_needed;
}

static uint64_t footprint_size(const struct hp_graph *g, int v);

struct speed_model {
	struct hp_speed_compute c;
	struct hp_speed_tier t;
};

/* Plan options with the measured speed model (cached after first use):
 * kernels on threads / workers threads; I/O at the first lower tier's
 * bandwidth (out of core only). */
static void speed_opts(const struct hp_graph *g, const struct hp_exec_opts *o, struct hp_plan_opts *po,
		       struct speed_model *sm, int measure)
{
	int threads = o && o->threads > 0 ? o->threads : hp_cpus_online();
	int recal = o && o->size >= offsetof(struct hp_exec_opts, recalibrate) + sizeof o->recalibrate && o->recalibrate;

	if (!measure)
		recal = -1;
	struct hp_budget_layout l;
	int ooc;

	hp_budget_layout(g, o, &l);
	hp_plan_default_opts(&l, po);
	ooc = po->budget > 0;
	if (!ooc)
		po->workers = 1; /* in core: one kernel at a time on all threads */
	hp_speed_compute_get(threads / po->workers > 0 ? threads / po->workers : 1, recal, &sm->c);
	po->speed = &sm->c;
	memset(&sm->t, 0, sizeof sm->t);
	if (ooc) {
		struct hs_tier_spec spill = { .kind = HS_TIER_NVME };
		int has = o->size >= offsetof(struct hp_exec_opts, tiers) + sizeof o->tiers && o->ntiers > 0;
		hp_speed_tier_get(has ? &o->tiers[0] : &spill, po->chunk, recal, &sm->t);
		po->read_MBps = sm->t.read_MBps;
		po->write_MBps = sm->t.write_MBps;
		po->read_lat_us = sm->t.read_lat_us;
		po->write_lat_us = sm->t.write_lat_us;
	}
}

int hp_plan_speed_opts(const struct hp_graph *g, const struct hp_exec_opts *o, struct hp_plan_opts *po, void **model,
		       int measure)
{
	struct speed_model *sm = calloc(1, sizeof *sm);

	*model = sm;
	if (!sm)
		return hp_error(-ENOMEM, "out of memory planning");
	speed_opts(g, o, po, sm, measure);
	return 0;
}

static void fill_speed(struct hp_plan_summary *out, const struct hp_plan *p, const struct hp_plan_opts *po,
		       const struct speed_model *sm)
{
	out->gflops = sm->c.gflops[HP_SPEED_NPTS - 1];
	out->flops_large = sm->c.flops[HP_SPEED_NPTS - 1];
	out->gflops_small = sm->c.gflops[0];
	out->flops_small = sm->c.flops[0];
	out->mem_GBps = sm->c.mem_GBps;
	out->dispatch_us = sm->c.dispatch_us;
	out->threads = sm->c.threads;
	out->workers = po->workers;
	out->compute_source = (int)sm->c.src;
	snprintf(out->compute_cache, sizeof out->compute_cache, "%s", sm->c.cache);
	out->read_MBps = po->read_MBps;
	out->write_MBps = po->write_MBps;
	out->read_lat_us = po->read_lat_us;
	out->write_lat_us = po->write_lat_us;
	out->tier_source = (int)sm->t.src;
	if (po->budget)
		snprintf(out->tier_name, sizeof out->tier_name, "%s", sm->t.name);
	snprintf(out->tier_cache, sizeof out->tier_cache, "%s", sm->t.cache);
	out->gemm_ms = p->class_ms[HP_KC_GEMM];
	out->mem_ms = p->class_ms[HP_KC_MEM];
	out->gemm_kernels = p->class_kernels[HP_KC_GEMM];
	out->mem_kernels = p->class_kernels[HP_KC_MEM];
	out->dispatch_ms = p->dispatch_ms;
	out->read_ms = p->read_ms;
	out->write_ms = p->write_ms;
}

/* The training step's stash by fate (a graph with run-to-run state; its
 * loss is its last output): kept, swapped, recomputed (remat.h). */
static int stash_figures(const struct hp_graph *g, const struct hp_plan *p, struct hp_remat_figures *out)
{
	char *fwd = calloc((size_t)g->nnodes + 1, 1), *pers = calloc((size_t)g->nvalues + 1, 2), *need = pers + g->nvalues;
	int rc = fwd && pers ? 0 : hp_error(-ENOMEM, "out of memory planning"), train = 0;

	for (int v = 0; rc == 0 && v < g->nvalues; v++)
		train |= g->values[v].next >= 0;
	if (rc == 0 && train && g->noutputs)
		rc = hp_remat_forward(g, g->outputs[g->noutputs - 1], fwd);
	if (rc == 0 && train) {
		hp_remat_persistent(g, pers);
		hp_remat_needed(g, fwd, pers, need);
		for (int a = 0; a < p->nacts; a++)
			if (p->acts[a].act == HP_ACT_WRITEBACK && need[p->acts[a].value] == 1)
				need[p->acts[a].value] = 2, out->swapped += footprint_size(g, p->acts[a].value);
		for (int v = 0; v < g->nvalues; v++)
			out->kept += need[v] == 1 ? footprint_size(g, v) : 0;
	}
	for (int i = 0; rc == 0 && i < g->nnodes; i++) {
		const struct hp_node *n = &g->nodes[i];
		if (n->folded || !hp_remat_is_copy(n))
			continue;
		out->nodes++;
		out->flops += n->op->flops ? n->op->flops(g, n) : 0;
		for (int o = 0; o < n->noutputs; o++)
			out->recomputed += n->outputs[o] >= 0 ? footprint_size(g, n->outputs[o]) : 0;
	}
	free(fwd);
	free(pers);
	return rc;
}

/* The summary's steps and smallest budget (the user's figure, and its node)
 * from plan p of g under po. */
static void fill_min(const struct hp_graph *g, const struct hp_exec_opts *o, const struct hp_plan *p,
		     struct hp_plan_opts *po, struct hp_plan_summary *out)
{
	out->steps = p->nsteps;
	out->budget = o ? o->budget : 0;
	out->min_budget = p->min_budget;
	out->min_node = p->nsteps ? g->nodes[p->node[p->min_step]].name : "";
	if (po->workspace) { /* per-kernel scratch may fit a smaller budget */
		uint64_t ws = po->workspace, m;
		int step = 0;
		po->workspace = 0;
		m = hp_plan_min_budget(g, po, &step);
		if (m && m < out->min_budget) {
			out->min_budget = m;
			out->min_node = g->nodes[p->node[step]].name;
		}
		po->workspace = ws;
	}
	out->min_budget = hp_budget_process_for(out->min_budget);
}

int hp_plan_summarize_min(const struct hp_graph *g, const struct hp_exec_opts *o, struct hp_plan_summary *out)
{
	struct hp_plan_opts po;
	struct hp_plan *p = NULL;
	void *sm = NULL;
	int rc = hp_plan_speed_opts(g, o, &po, &sm, 1);

	memset(out, 0, sizeof *out);
	if (rc == 0 && (rc = hp_plan_check(g, &po, &p)) == 0)
		fill_min(g, o, p, &po, out);
	hp_plan_free(p);
	free(sm);
	return rc;
}

static int summarize(const struct hp_graph *g, const struct hp_exec_opts *o, struct hp_plan *belady,
		     struct hp_plan_summary *out, struct hp_remat_figures *stash, struct hp_plan_foot *foot);

int hp_plan_summarize(const struct hp_graph *g, const struct hp_exec_opts *o, struct hp_plan_summary *out)
{
	return summarize(g, o, NULL, out, NULL, NULL);
}

int hp_plan_summarize_from(const struct hp_graph *g, const struct hp_exec_opts *o, struct hp_plan *belady,
			   struct hp_plan_summary *out)
{
	return summarize(g, o, belady, out, NULL, NULL);
}

int hp_plan_summarize_stash(const struct hp_graph *g, const struct hp_exec_opts *o, struct hp_plan_summary *out,
			    struct hp_remat_figures *stash)
{
	return summarize(g, o, NULL, out, stash, NULL);
}

int hp_plan_summarize_foot(const struct hp_graph *g, const struct hp_exec_opts *o, struct hp_plan_summary *out,
			   struct hp_remat_figures *stash, struct hp_plan_foot *foot)
{
	return summarize(g, o, NULL, out, stash, foot);
}

/* hp_plan_footprint plans with the cached speed models (never measured)
 * and, without reductions in flight, the summary's other options: where
 * the summary's models came from the cache, its plan is that one. */
static void foot_of(const struct hp_graph *g, const struct hp_plan *p, const struct hp_plan_opts *po,
		    const struct speed_model *sm, struct hp_plan_foot *foot)
{
	memset(foot, 0, sizeof *foot);
	if (!po->budget) {
		foot->known = 1; /* in core: none */
		return;
	}
	if ((po->comm_ranks >= 2 && po->comm_GBps > 0) || sm->c.src != HP_SPEED_CACHED || sm->t.src != HP_SPEED_CACHED)
		return;
	foot->known = hp_plan_footprint_of(g, p, &foot->state, &foot->swapped, &foot->peak) == 0;
}

static int summarize(const struct hp_graph *g, const struct hp_exec_opts *o, struct hp_plan *belady,
		     struct hp_plan_summary *out, struct hp_remat_figures *stash, struct hp_plan_foot *foot)
{
	struct hp_plan_opts po;
	struct hp_plan *p;
	int rc;

	struct speed_model *sm = calloc(1, sizeof *sm);

	memset(out, 0, sizeof *out);
	if (stash)
		memset(stash, 0, sizeof *stash);
	if (!sm) {
		hp_plan_free(belady);
		return hp_error(-ENOMEM, "out of memory planning");
	}
	speed_opts(g, o, &po, sm, 1);
	rc = hp_plan_build_shared_from(g, &po, belady, &p);
	if (rc == 0)
		fill_speed(out, p, &po, sm);
	if (rc == 0 && foot)
		foot_of(g, p, &po, sm, foot);
	free(sm);
	if (rc == 0 && stash && (rc = stash_figures(g, p, stash)) < 0)
		hp_plan_free(p);
	if (rc < 0)
		return rc;
	fill_min(g, o, p, &po, out);
	out->peak_bytes = p->peak_bytes;
	out->bytes_loaded = p->bytes_loaded;
	out->bytes_written = p->bytes_written;
	out->loads = p->loads;
	out->prefetched = p->prefetched;
	out->compute_ms = p->compute_ms;
	out->io_ms = p->io_ms;
	out->predicted_ms = p->predicted_ms;
	hp_plan_free(p);
	return 0;
}

int hp_remat_summarize(const struct hp_graph *g, const struct hp_exec_opts *o, struct hp_remat_figures *out)
{
	struct hp_plan_opts po;
	struct hp_plan *p = NULL;
	void *sm = NULL;
	int rc = hp_plan_speed_opts(g, o, &po, &sm, 1);

	memset(out, 0, sizeof *out);
	if (rc == 0)
		rc = hp_plan_build_shared(g, &po, &p);
	if (rc == 0)
		rc = stash_figures(g, p, out);
	hp_plan_free(p);
	free(sm);
	return rc;
}

int hp_plan_write_dot(const struct hp_graph *g, const struct hp_exec_opts *o, const char *path)
{
	struct speed_model *sm = calloc(1, sizeof *sm);
	struct hp_plan_opts po;
	struct hp_plan *p;
	int rc;

	if (!sm)
		return hp_error(-ENOMEM, "out of memory planning");
	speed_opts(g, o, &po, sm, 1);
	rc = hp_plan_build_shared(g, &po, &p);
	if (rc == 0)
		rc = hp_plan_dot(g, p, &po, path);
	hp_plan_free(p);
	free(sm);
	return rc;
}

int hp_plan_build_speed(const struct hp_graph *g, const struct hp_exec_opts *o, struct hp_plan **p,
			struct hp_speed_compute *sp, int measure)
{
	struct speed_model *sm = calloc(1, sizeof *sm);
	struct hp_plan_opts po;
	int rc;

	*p = NULL;
	if (!sm)
		return hp_error(-ENOMEM, "out of memory planning");
	speed_opts(g, o, &po, sm, measure);
	rc = hp_plan_build(g, &po, p);
	*sp = sm->c;
	free(sm);
	return rc;
}

static uint64_t footprint_size(const struct hp_graph *g, int v)
{
	struct hp_tensor t = { .dtype = g->values[v].dtype, .shape = g->values[v].shape };

	return (hp_tensor_bytes(&t) + HP_BUDGET_ALIGN - 1) / HP_BUDGET_ALIGN * HP_BUDGET_ALIGN;
}

int hp_plan_footprint(const struct hp_graph *g, const struct hp_exec_opts *o, uint64_t *state, uint64_t *swapped,
		      uint64_t *peak)
{
	struct hp_budget_layout l;
	struct hp_plan_opts po;
	struct hp_plan *p = NULL;
	void *sm = NULL;
	int rc = 0;

	*state = *swapped = *peak = 0;
	hp_budget_layout(g, o, &l);
	if (!l.budget)
		return 0;
	hp_plan_default_opts(&l, &po);
	/* without reductions in flight the acts do not depend on the time
	 * model: planned with the summary's figures (cached, never measured
	 * here), this is the plan --plan's summary built, handed out again */
	if (po.comm_ranks < 2 || po.comm_GBps <= 0)
		rc = hp_plan_speed_opts(g, o, &po, &sm, 0);
	if (rc == 0)
		rc = hp_plan_build_shared(g, &po, &p);
	if (rc == 0)
		rc = hp_plan_footprint_of(g, p, state, swapped, peak);
	hp_plan_free(p);
	free(sm);
	return rc;
}
