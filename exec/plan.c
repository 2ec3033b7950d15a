/* Static memory planner: Belady eviction (and other victim policies),
 * write-back of live dirty values, budget-aware load hoisting and a
 * pipeline time model.  See plan.h.  This file sets a plan up (schedule,
 * use lists, smallest budget) and drives the simulation (plan_sim.h). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hpdlf/error.h"
#include "hpdlf/kernels.h"
#include "exec/comm.h"
#include "exec/plan.h"
#include "exec/plan_heap.h"
#include "exec/plan_sim.h"

/* A value the planner manages: it lives in the store (constants folded into
 * graph memory do not). */
static int managed(const struct hp_graph *g, int v)
{
	return v >= 0 && g->values[v].kind != HP_VALUE_CONSTANT;
}
static uint64_t value_size(const struct hp_graph *g, int v, uint64_t align)
{
	struct hp_tensor t = { .dtype = g->values[v].dtype, .shape = g->values[v].shape };
	uint64_t b = hp_tensor_bytes(&t);

	return align > 1 ? (b + align - 1) / align * align : b;
}
/* One pass over the values for what the schedule needs of each (the
 * value structs are some 230 bytes apart: each pass over them was a
 * stream of cache misses, five passes in all); *unused_init[v]: an
 * initializer that is no state and no output (not kept where no step
 * reads it). */
static void value_flags(struct sim *m, char *unused_init)
{
	const struct hp_graph *g = m->g;
	struct hp_plan *p = m->p;

	for (int v = 0; v < g->nvalues; v++) {
		const struct hp_value *val = &g->values[v];
		m->mgd[v] = managed(g, v);
		/* |=: an earlier value may have marked it as its next version */
		m->persist[v] |= val->is_output || val->next >= 0 || val->kind == HP_VALUE_INPUT ||
				 val->kind == HP_VALUE_INITIALIZER;
		if (val->next >= 0)
			m->persist[val->next] = 1;
		unused_init[v] = val->kind == HP_VALUE_INITIALIZER && val->next < 0 && !val->is_output;
		m->size[v] = value_size(g, v, m->o->align);
		m->last_evict[v] = -1;
		m->last_pin[v] = -1;
		p->last_use[v] = -1;
	}
}

static int build_schedule(struct sim *m)
{
	const struct hp_graph *g = m->g;
	struct hp_plan *p = m->p;
	int nuses = 0, nin = 0, nout = 0, *in_start, *in;
	char *unused_init;

	p->node = malloc(((size_t)g->nnodes + 1) * sizeof *p->node);
	p->last_use = malloc(((size_t)g->nvalues + 1) * sizeof *p->last_use);
	m->use_start = calloc((size_t)g->nvalues + 2, sizeof *m->use_start);
	unused_init = malloc((size_t)g->nvalues + 1);
	if (!p->node || !p->last_use || !m->use_start || !unused_init) {
		free(unused_init);
		return hp_error(-ENOMEM, "out of memory planning");
	}
	for (int i = 0; i < g->nnodes; i++)
		if (!g->nodes[i].folded) {
			p->node[p->nsteps++] = i;
			nin += g->nodes[i].ninputs;
			nout += g->nodes[i].noutputs;
		}
	value_flags(m, unused_init); /* persist starts 0 (sim_alloc) */
	/* each step's inputs and outputs copied out in the one pass that
	 * chases them (a cache miss a node: half of this function's time, when
	 * both passes below read them from the nodes), kept for
	 * hp_sim_step_need (min_budget missed again on each step's outputs) */
	m->in_start = in_start = malloc(((size_t)p->nsteps + 1) * sizeof *in_start);
	m->in = in = malloc(((size_t)nin + 1) * sizeof *in);
	m->out_start = malloc(((size_t)p->nsteps + 1) * sizeof *m->out_start);
	m->out = malloc(((size_t)nout + 1) * sizeof *m->out);
	if (!in_start || !in || !m->out_start || !m->out) {
		free(unused_init);
		return hp_error(-ENOMEM, "out of memory planning");
	}
	in_start[0] = m->out_start[0] = 0;
	for (int s = 0; s < p->nsteps; s++) {
		const struct hp_node *n = &g->nodes[p->node[s]];
		memcpy(in + in_start[s], n->inputs, (size_t)n->ninputs * sizeof *in);
		in_start[s + 1] = in_start[s] + n->ninputs;
		memcpy(m->out + m->out_start[s], n->outputs, (size_t)n->noutputs * sizeof *m->out);
		m->out_start[s + 1] = m->out_start[s] + n->noutputs;
		for (int k = in_start[s]; k < in_start[s + 1]; k++)
			if (mg(m, in[k])) {
				m->use_start[in[k] + 1]++;
				p->last_use[in[k]] = s;
				nuses++;
			}
	}
	for (int v = 0; v < g->nvalues; v++) {
		/* weights only folded away are not the runtime's business */
		if (unused_init[v] && !m->use_start[v + 1])
			m->persist[v] = 0;
		m->use_start[v + 1] += m->use_start[v];
		if (m->persist[v])
			p->last_use[v] = p->nsteps;
	}
	free(unused_init);
	m->uses = malloc(((size_t)nuses + 1) * sizeof *m->uses);
	if (!m->uses)
		return hp_error(-ENOMEM, "out of memory planning");
	memcpy(m->cursor, m->use_start, (size_t)g->nvalues * sizeof *m->cursor);
	for (int s = 0; s < p->nsteps; s++)
		for (int k = in_start[s]; k < in_start[s + 1]; k++) {
			int v = in[k];
			/* a value read twice by one node is one use */
			if (mg(m, v) && (m->cursor[v] == m->use_start[v] || m->uses[m->cursor[v] - 1] != s))
				m->uses[m->cursor[v]++] = s;
		}
	for (int v = 0; v < g->nvalues; v++) {
		/* compact: duplicates left holes at the end of each range */
		int end = m->cursor[v];
		for (int k = end; k < m->use_start[v + 1]; k++)
			m->uses[k] = NEVER;
		m->cursor[v] = m->use_start[v];
		m->nu[v] = 0;
	}
	return 0;
}
/* The smallest budget b with b >= need + reserve_for(b) (the reserve grows
 * with the budget, stepwise). */
static uint64_t with_reserve(const struct hp_plan_opts *o, uint64_t need)
{
	uint64_t b = need;

	for (int i = 0; o->reserve_for && i < 64; i++) {
		uint64_t nb = need + o->reserve_for(b);
		if (nb <= b)
			break;
		b = nb;
	}
	return b;
}

static uint64_t reserve_at(const struct hp_plan_opts *o)
{
	return o->reserve_for && o->budget ? o->reserve_for(o->budget) : 0;
}

/* Output o of node n may be laid over an input under some graph around
 * it (hp_plan_inplace_src's rules, without their conditions on the
 * values' lives). */
static int may_overlay(const struct hp_node *n, int o)
{
	if (o == 0 && (n->op->flags & (HP_OP_INPLACE | HP_OP_ALIAS)))
		return 1;
	return (n->op->flags & HP_OP_STATE_INPLACE) || (o > 0 && hp_comm_is_allreduce(n));
}

uint64_t hp_plan_node_need_floor(const struct hp_graph *g, int i, uint64_t align)
{
	const struct hp_node *n = &g->nodes[i];
	uint64_t need = 0;

	for (int j = 0; j < n->ninputs; j++) {
		int v = n->inputs[j], dup = 0;
		for (int k = 0; k < j; k++)
			dup |= n->inputs[k] == v;
		if (managed(g, v) && !dup)
			need += value_size(g, v, align);
	}
	for (int o = 0; o < n->noutputs; o++)
		if (managed(g, n->outputs[o]) && !may_overlay(n, o))
			need += value_size(g, n->outputs[o], align);
	return need;
}

uint64_t hp_plan_budget_for_need(const struct hp_plan_opts *o, uint64_t need)
{
	return with_reserve(o, need + o->workspace);
}

static int min_budget(struct sim *m)
{
	for (int s = 0; s < m->p->nsteps; s++) {
		uint64_t need = hp_sim_step_need(m, s);
		if (need > m->p->min_budget) {
			m->p->min_budget = need;
			m->p->min_step = s;
		}
	}
	m->step_max = m->p->min_budget;
	m->p->min_budget = with_reserve(m->o, m->p->min_budget + m->o->workspace);
	return 0;
}
static void sim_free(struct sim *m)
{
	free(m->size);
	free(m->cursor);
	free(m->nu);
	free(m->resident);
	free(m->dirty);
	free(m->below);
	free(m->pinned);
	free(m->persist);
	free(m->mgd);
	free(m->resident_list);
	free(m->resident_at);
	free(m->last_evict);
	free(m->last_pin);
	free(m->pre);
	free(m->step_peak);
	free(m->recs);
	free(m->until);
	free(m->hold);
	free(m->held);
	free(m->in_start);
	free(m->in);
	free(m->out_start);
	free(m->out);
	for (int c = 0; c < 4; c++)
		hp_vheap_free(&m->cand[c]);
}

static int sim_alloc(struct sim *m, int nv, int nn)
{
	size_t v = (size_t)nv + 1;

	m->size = calloc(v, sizeof *m->size);
	m->cursor = calloc(v, sizeof *m->cursor);
	m->nu = calloc(v, sizeof *m->nu);
	m->resident = calloc(v, 1);
	m->dirty = calloc(v, 1);
	m->below = calloc(v, 1);
	m->pinned = calloc(v, 1);
	m->persist = calloc(v, 1);
	m->mgd = calloc(v, 1);
	m->resident_list = calloc(v, sizeof *m->resident_list);
	m->resident_at = malloc(v * sizeof *m->resident_at);
	m->last_evict = calloc(v, sizeof *m->last_evict);
	m->last_pin = calloc(v, sizeof *m->last_pin);
	m->pre = malloc(v * sizeof *m->pre);
	m->step_peak = calloc((size_t)nn + 1, sizeof *m->step_peak);
	m->hold = calloc(v, sizeof *m->hold);
	m->held = calloc(v, sizeof *m->held);
	if (!m->size || !m->cursor || !m->nu || !m->resident || !m->dirty || !m->below || !m->pinned || !m->persist || !m->mgd ||
	    !m->resident_list || !m->resident_at || !m->last_evict || !m->last_pin || !m->step_peak || !m->hold || !m->held || !m->pre)
		return hp_error(-ENOMEM, "out of memory planning");
	memset(m->pre, 0xff, v * sizeof *m->pre); /* -1 */
	memset(m->resident_at, 0xff, v * sizeof *m->resident_at);
	return 0;
}
_Thread_local uint64_t hp_plan_needed;

/* The plan's skeleton in m (its schedule, use lists and smallest budget),
 * and HP_EBUDGET_OP where the budget is below that (hp_plan_needed the
 * figure to name); m->p allocated, the caller frees it (and m). */
static int plan_check(struct sim *m)
{
	const struct hp_graph *g = m->g;
	const struct hp_plan_opts *o = m->o;
	struct hp_plan *p = calloc(1, sizeof *p);
	uint64_t reserve, step_max;
	int rc;

	if (!p)
		return hp_error(-ENOMEM, "out of memory planning");
	m->p = p;
	p->start_resident = calloc((size_t)g->nvalues + 1, 1);
	if (!p->start_resident)
		return hp_error(-ENOMEM, "out of memory planning");
	/* the plan owns the use lists; the simulation borrows them */
	rc = sim_alloc(m, g->nvalues, g->nnodes);
	if (rc == 0)
		rc = build_schedule(m);
	p->use_start = m->use_start;
	p->uses = m->uses;
	if (rc < 0)
		return rc;
	min_budget(m);
	reserve = reserve_at(o);
	step_max = m->step_max;
	m->budget = o->budget ? o->budget - (o->budget > o->workspace + reserve ? o->workspace + reserve : o->budget)
			      : UINT64_MAX / 2;
	if (o->budget && (p->min_budget > o->budget || step_max + o->workspace + reserve > o->budget)) {
		const struct hp_node *n = &g->nodes[p->node[p->min_step]];
		char scratch[240] = "";
		if (o->workspace || reserve)
			snprintf(scratch, sizeof scratch, " beside %llu bytes of kernel scratch and %llu of staging",
				 (unsigned long long)o->workspace, (unsigned long long)reserve);
		/* the user's figure: the process budget whose tensor budget fits */
		hp_plan_needed = hp_budget_process_for(p->min_budget);
		if (hp_plan_needed != p->min_budget)
			snprintf(scratch + strlen(scratch), sizeof scratch - strlen(scratch),
				 ", and %llu bytes of the process's fixed overhead",
				 (unsigned long long)(hp_plan_needed - p->min_budget));
		/* below 64 MiB the budget bounds tensors only; where the fixed
		 * overhead fills those 64 MiB (--store), name the budget that
		 * bounds the whole process too */
		char bound[200] = "";
		uint64_t pb = hp_budget_process_bound_for(p->min_budget);
		if (hp_plan_needed < HP_BUDGET_PROCESS_FROM && hp_plan_needed + hp_budget_overhead() > HP_BUDGET_PROCESS_FROM)
			snprintf(bound, sizeof bound, ", or %llu bytes (--budget %lluK) to bound the whole process, "
				 "its fixed overhead of %llu bytes included", (unsigned long long)pb,
				 (unsigned long long)((pb + 1023) / 1024), (unsigned long long)hp_budget_overhead());
		return hp_node_error(g, n, HP_EBUDGET_OP, "needs %llu bytes at once (inputs, outputs and workspace)%s, "
				     "more than the budget for tensors of %llu bytes; the smallest budget that works is "
				     "%llu bytes (--budget %lluK)%s", (unsigned long long)step_max, scratch,
				     (unsigned long long)o->budget, (unsigned long long)hp_plan_needed,
				     (unsigned long long)((hp_plan_needed + 1023) / 1024), bound);
	}
	return 0;
}

static int plan_with(const struct hp_graph *g, const struct hp_plan_opts *o, int policy, struct hp_plan **out)
{
	struct sim m = { .g = g, .o = o, .policy = policy };
	int rc;

	*out = NULL;
	rc = plan_check(&m);
	if (rc == 0 && o->comm_ranks > 1 && o->comm_GBps > 0)
		rc = hp_sim_plan_flights(&m);
	if (rc == 0)
		rc = hp_sim_simulate(&m, 0);
	if (rc == 0)
		rc = hp_sim_simulate(&m, 1);
	if (rc != 0)
		goto fail;
	if ((rc = hp_sim_hoist_loads(&m)) < 0 || (rc = hp_sim_room_from(&m)) < 0)
		goto fail;
	m.p->peak_bytes += o->workspace;
	rc = hp_sim_emit_acts(&m);
	if (rc < 0)
		goto fail;
	hp_sim_time_model(&m);
	sim_free(&m);
	*out = m.p;
	return 0;
fail:
	sim_free(&m);
	hp_plan_free(m.p);
	return rc;
}

int hp_plan_check(const struct hp_graph *g, const struct hp_plan_opts *o, struct hp_plan **out)
{
	struct sim m = { .g = g, .o = o };
	int rc;

	*out = NULL;
	if (o->comm_ranks > 1 && o->comm_GBps > 0) /* held buffers can refuse a plan the check passes */
		return hp_plan_build(g, o, out);
	rc = plan_check(&m);
	sim_free(&m);
	if (rc == 0)
		*out = m.p;
	else
		hp_plan_free(m.p);
	return rc;
}

/* What plan_with's choice of victims costs, in a fixed model (the runtime
 * plans without the measured one, and --plan must print the plan a run
 * follows): each byte read and written at PLAN_READ_MBPS and
 * PLAN_WRITE_MBPS (besides the disk, the store copies and checksums every
 * byte on the compute lane: the U-Net's runs' CPU time grew with the bytes
 * moved), PLAN_REQ_US per request, little: at 48^3 and a quarter of its
 * peak a plan of 57 loads and 50.7 MiB moved ran with 4% more CPU than
 * Belady's of 137 loads and 34.8 MiB. */
#define PLAN_READ_MBPS 2200.0
#define PLAN_WRITE_MBPS 1500.0
#define PLAN_REQ_US 1.0
static double io_cost(const struct hp_plan *p)
{
	int wb = 0;

	for (int a = 0; a < p->nacts; a++)
		wb += p->acts[a].act == HP_ACT_WRITEBACK;
	return (double)p->bytes_loaded / PLAN_READ_MBPS + (double)p->bytes_written / PLAN_WRITE_MBPS +
	       (double)(p->loads + (uint64_t)wb) * PLAN_REQ_US;
}

/* The plan of each victim policy (under a budget that makes it move
 * anything), the cheapest by io_cost kept; ties keep the earlier policy
 * (Belady's first). */
int hp_plan_build_from(const struct hp_graph *g, const struct hp_plan_opts *o, struct hp_plan *belady,
		       struct hp_plan **out)
{
	struct hp_plan *best = belady;
	int rc = best ? 0 : plan_with(g, o, VICTIM_FARTHEST, &best);
	int npol = o->victims < VICTIM_NPOL ? o->victims : VICTIM_NPOL;
	double cost;

	*out = NULL;
	if (rc < 0)
		return rc;
	cost = io_cost(best);
	for (int pol = VICTIM_FARTHEST + 1; pol < npol && o->budget && best->bytes_loaded + best->bytes_written; pol++) {
		struct hp_plan *p = NULL;
		double c;
		if ((rc = plan_with(g, o, pol, &p)) < 0) {
			hp_plan_free(best);
			return rc;
		}
		c = io_cost(p);
		if (c < cost) {
			hp_plan_free(best);
			best = p;
			cost = c;
		} else {
			hp_plan_free(p);
		}
	}
	*out = best;
	return 0;
}

int hp_plan_build(const struct hp_graph *g, const struct hp_plan_opts *o, struct hp_plan **out)
{
	return hp_plan_build_from(g, o, NULL, out);
}

static uint64_t min_budget_at(const struct hp_graph *g, const struct hp_plan_opts *o, int *step, int *node)
{
	struct sim m = { .g = g, .o = o };
	struct hp_plan *p = calloc(1, sizeof *p);
	uint64_t minb = 0;

	if (node)
		*node = -1;
	if (!p)
		return 0;
	m.p = p;
	if (sim_alloc(&m, g->nvalues, g->nnodes) == 0 && build_schedule(&m) == 0) {
		p->use_start = m.use_start; /* hp_sim_step_need asks which updates are in place */
		p->uses = m.uses;
		min_budget(&m);
		minb = p->min_budget;
		if (step)
			*step = p->min_step;
		if (node && p->nsteps)
			*node = p->node[p->min_step];
	}
	p->use_start = m.use_start;
	p->uses = m.uses;
	sim_free(&m);
	hp_plan_free(p);
	return minb;
}

uint64_t hp_plan_min_budget(const struct hp_graph *g, const struct hp_plan_opts *o, int *step)
{
	return min_budget_at(g, o, step, NULL);
}

uint64_t hp_plan_min_budget_node(const struct hp_graph *g, const struct hp_plan_opts *o, int *node)
{
	return min_budget_at(g, o, NULL, node);
}
