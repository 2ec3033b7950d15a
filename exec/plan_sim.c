/* The planner's simulated runs: each step loads, makes room, preloads
 * and frees; a cold run, then the warm one the runtime follows, its loads
 * hoisted and its records sorted into the plan's actions.  See plan_sim.h. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "hpdlf/error.h"
#include "exec/plan.h"
#include "exec/plan_sim.h"

/* Kernel scratch, rounded like a tensor (the runtime makes it one). */
static uint64_t ws_size(const struct sim *m, const struct hp_node *n)
{
	uint64_t a = m->o->align > 1 ? m->o->align : 1;

	if (m->o->workspace)
		return 0; /* reserved once for all steps */
	return (n->workspace + a - 1) / a * a;
}
/* Bytes step s needs resident at once: distinct inputs, outputs, workspace.
 * Its edges from the schedule's flat copy where there is one (each
 * node's own arrays are a cache miss: three quarters of this function's
 * time on the 10,001-node MLP's training graphs). */
uint64_t hp_sim_step_need(struct sim *m, int s)
{
	const struct hp_node *n = &m->g->nodes[m->p->node[s]];
	const int *in = m->in ? m->in + m->in_start[s] : n->inputs;
	const int *out = m->out ? m->out + m->out_start[s] : n->outputs;
	uint64_t need = ws_size(m, n);

	for (int j = 0; j < n->ninputs; j++) {
		int v = in[j], dup = 0;
		for (int k = 0; k < j; k++)
			dup |= in[k] == v;
		if (mg(m, v) && !dup)
			need += m->size[v];
	}
	int comm = n->noutputs > 1 && hp_plan_comm_inplace(m->g, m->p, s);

	for (int o = 0; o < n->noutputs; o++)
		if (mg(m, out[o]) && hp_plan_inplace_src_edges(m->g, m->p, s, o, comm, in, out) < 0)
			need += m->size[out[o]];
	return need;
}

static void pin_step(struct sim *m, const struct hp_node *n, int on, int s)
{
	for (int j = 0; j < n->ninputs; j++)
		if (mg(m, n->inputs[j])) {
			m->pinned[n->inputs[j]] = (char)on;
			m->last_pin[n->inputs[j]] = s;
		}
	for (int o = 0; o < n->noutputs; o++)
		if (mg(m, n->outputs[o])) {
			m->pinned[n->outputs[o]] = (char)on;
			m->last_pin[n->outputs[o]] = s;
		}
}

/* Values below DRAM now that can be read in early (while step s runs):
 * weights, inputs, and activations this run already produced and wrote. */
static int loadable(struct sim *m, int v, int s)
{
	const struct hp_value *val = &m->g->values[v];

	if (!mg(m, v) || m->resident[v])
		return 0;
	if (val->kind == HP_VALUE_INITIALIZER || val->kind == HP_VALUE_INPUT)
		return 1;
	return m->below[v] && val->producer >= 0 && val->producer <= m->p->node[s];
}

/* While step s runs, read in the inputs of the next step that loads
 * anything, when the budget holds them beside step s's own values by
 * evicting only values needed after that step (the victim policy's
 * choice among them, made a step early).  Without this, memory full of
 * values kept for later runs would leave no room to overlap loads with
 * compute. */
static int preload(struct sim *m, int s, uint64_t ws)
{
	const struct hp_graph *g = m->g;
	struct hp_plan *p = m->p;
	uint64_t bytes = 0;
	int t, rc, first = m->nrecs;

	for (t = s + 1; t < p->nsteps && t <= s + 8; t++) {
		const struct hp_node *n = &g->nodes[p->node[t]];
		for (int j = 0; j < n->ninputs; j++)
			if (n->inputs[j] >= 0 && loadable(m, n->inputs[j], s))
				bytes += m->size[n->inputs[j]];
		if (bytes)
			break;
	}
	if (!bytes || t >= p->nsteps)
		return 0;
	const struct hp_node *n = &g->nodes[p->node[t]];
	while (m->cur + ws + bytes > m->budget) {
		int far, victim = hp_sim_pick_victim(m, m->policy, s, t, &far);
		if (victim < 0)
			return 0; /* evictions made so far were due anyway */
		if ((rc = hp_sim_drop(m, victim, far, s)) < 0)
			return rc;
	}
	for (int j = 0; j < n->ninputs; j++) {
		int v = n->inputs[j];
		if (v < 0 || !loadable(m, v, s))
			continue;
		hp_sim_set_resident(m, v, 1);
		hp_sim_cand_push(m, v, s);
		if ((rc = hp_sim_push(m, s, 1, v, HP_ACT_LOAD, t)) < 0)
			return rc;
		m->pre[v] = m->nrecs - 1;
		m->recs[m->nrecs - 1].nvictims = m->nrecs - 1 - first;
		first = m->nrecs;
		p->bytes_loaded += m->size[v];
		p->loads++;
	}
	return 0;
}
static int simulate_step(struct sim *m, int s)
{
	const struct hp_graph *g = m->g;
	struct hp_plan *p = m->p;
	const struct hp_node *n = &g->nodes[p->node[s]];
	int rc;

	hp_sim_release_holds(m, s, s);
	pin_step(m, n, 1, s);
	for (int j = 0; j < n->ninputs; j++) {
		int v = n->inputs[j];
		int first = m->nrecs;
		if (!mg(m, v) || m->resident[v])
			continue;
		if ((rc = hp_sim_make_room(m, m->size[v], s)) != 0)
			return rc;
		hp_sim_set_resident(m, v, 1);
		if ((rc = hp_sim_push(m, s, 1, v, HP_ACT_LOAD, s)) < 0)
			return rc;
		m->pre[v] = -1;
		m->recs[m->nrecs - 1].nvictims = m->nrecs - 1 - first;
		p->bytes_loaded += m->size[v];
		p->loads++;
	}
	int comm = n->noutputs > 1 && hp_plan_comm_inplace(g, p, s);

	for (int o = 0; o < n->noutputs; o++) {
		int j = hp_plan_inplace_src_with(g, p, s, o, comm);
		if (j < 0)
			continue;
		/* output o takes input j's bytes over */
		hp_sim_set_resident(m, n->inputs[j], 0);
		hp_sim_set_resident(m, n->outputs[o], 1);
		m->dirty[n->outputs[o]] = 1;
		m->below[n->outputs[o]] = 0;
		m->pinned[n->outputs[o]] = 1;
	}
	for (int o = 0; o < n->noutputs; o++) {
		int v = n->outputs[o];
		if (!mg(m, v) || m->resident[v])
			continue;
		if ((rc = hp_sim_make_room(m, m->size[v], s)) != 0)
			return rc;
		hp_sim_set_resident(m, v, 1);
		m->dirty[v] = 1;
		m->below[v] = 0;
	}
	if ((rc = hp_sim_make_room(m, ws_size(m, n), s)) != 0)
		return rc;
	if ((rc = preload(m, s, ws_size(m, n))) < 0)
		return rc;
	m->step_peak[s] = m->cur + ws_size(m, n);
	if (m->step_peak[s] > p->peak_bytes)
		p->peak_bytes = m->step_peak[s];
	pin_step(m, n, 0, s);
	if (m->until && m->until[s] > s + 1)
		hp_sim_hold_step(m, n, m->until[s]); /* a reduction in flight keeps its buffers */
	for (int j = 0; j < n->ninputs; j++) {
		int v = n->inputs[j];
		if (mg(m, v) && m->resident[v] && p->last_use[v] == s && !m->hold[v])
			hp_sim_set_resident(m, v, 0);
	}
	for (int o = 0; o < n->noutputs; o++) {
		int v = n->outputs[o];
		if (mg(m, v) && m->resident[v] && p->last_use[v] < 0 && !m->hold[v])
			hp_sim_set_resident(m, v, 0);
	}
	for (int k = 0; k < n->ninputs + n->noutputs; k++) /* unpinned: next read later, or written */
		hp_sim_cand_push(m, k < n->ninputs ? n->inputs[k] : n->outputs[k - n->ninputs], s);
	return m->cand_oom ? hp_error(-ENOMEM, "out of memory planning") : 0;
}

/* The step in [j, f] to issue a load at (read in `ld` ms, for step f),
 * when its room frees only once the write-backs issued at step j, `wb` ms
 * of them, are done.  The runtime grants budget in plan order: a load at
 * j that waits for them holds back every kernel after it (the write-back
 * of a just-updated 9-MiB weight stalled ResNet-18's backward 3-5 ms at
 * each of its last layers at 25% of its peak).  Issued at k, the kernels
 * from j to k run meanwhile, and the load still starts when its room is
 * free, as soon as the kernel before it is granted (at the latest when
 * that kernel starts; in a --trace the load put past a 10-ms data gradient
 * started beside it).  Too late, it is not in at step f.  Of the predicted
 * stalls (t: hp_sim_step_clock), the least; the earliest among equals. */
static int past_writeback(const double *t, int j, int f, double wb, double ld)
{
	double best_stall = 0;
	int best = -1;

	for (int k = j; k <= f; k++) {
		double d = t[k] - t[j], wait = wb > d ? wb - d : 0;
		double start = k > j && t[k - 1] - t[j] > wb ? t[k - 1] - t[j] : wb;
		double in = start + ld, due = t[f] - t[j] + wait;
		double stall = wait + (in > due ? in - due : 0);
		if (best < 0 || stall < best_stall - 1e-6) {
			best = k;
			best_stall = stall;
		}
	}
	return best;
}

/* Load x, hoisted to step j with room that a write-back at j frees
 * (wb[j] bytes of them; held beside the step's values they exceed the
 * budget): the step past_writeback names instead, its victims left at j
 * (their write-backs start as early as before).  Any step up to the one
 * it is for will do: the steps it no longer runs beside hold its bytes
 * less. */
static int defer_load(struct sim *m, const struct rec *x, int j, const uint64_t *wb, const double *t)
{
	int f = x->a.for_step >= x->step ? x->a.for_step : x->step, k;
	uint64_t v = m->size[x->a.value];

	if (j >= f || !wb[j] || m->step_peak[j] + wb[j] <= m->budget)
		return j;
	k = past_writeback(t, j, f, hp_sim_io_ms(m, 1, wb[j]), hp_sim_io_ms(m, 0, v));
	for (int i = j; i < k; i++)
		m->step_peak[i] -= v;
	return k;
}

/* Move each load to the earliest step where the budget leaves room for it,
 * never before the value's latest eviction.  The evictions made to room it
 * move along when their victims were last pinned earlier still: memory full
 * of values that wait to be evicted does not keep a load from starting.
 * Where that room comes from a write-back at that step, defer_load. */
int hp_sim_hoist_loads(struct sim *m)
{
	struct hp_plan *p = m->p;
	uint64_t *wb = calloc((size_t)p->nsteps + 1, sizeof *wb); /* bytes written back per step */
	double *t = hp_sim_step_clock(m);

	if (!wb || !t) {
		free(wb);
		free(t);
		return hp_error(-ENOMEM, "out of memory planning");
	}
	/* recs are in simulation order: last_evict tracks evictions seen so far */
	for (int v = 0; v < m->g->nvalues; v++)
		m->last_evict[v] = -1;
	for (int r = 0; r < m->nrecs; r++) {
		struct rec *x = &m->recs[r];
		int v = x->a.value, s = x->step, j = s, lo;
		int64_t delta = (int64_t)m->size[v];
		if (!x->a.act)
			continue; /* a preload taken back */
		if (x->a.act != HP_ACT_LOAD) {
			m->last_evict[v] = s;
			if (x->a.act == HP_ACT_WRITEBACK)
				wb[s] += m->size[v];
			continue;
		}
		lo = m->last_evict[v] + 1;
		for (int k = r - x->nvictims; k < r; k++) {
			if (m->recs[k].free_after + 1 > lo)
				lo = m->recs[k].free_after + 1;
			delta -= (int64_t)m->size[m->recs[k].a.value];
		}
		if (m->o->max_lookahead > 0 && s - m->o->max_lookahead > lo)
			lo = s - m->o->max_lookahead;
		while (j > lo && (int64_t)m->step_peak[j - 1] + delta <= (int64_t)m->budget)
			j--;
		for (int k = j; k < s; k++)
			m->step_peak[k] = (uint64_t)((int64_t)m->step_peak[k] + delta);
		for (int k = r - x->nvictims; k < r && j < s; k++) {
			if (m->recs[k].a.act == HP_ACT_WRITEBACK) {
				wb[s] -= m->size[m->recs[k].a.value];
				wb[j] += m->size[m->recs[k].a.value];
			}
			m->recs[k].step = j;
		}
		x->step = defer_load(m, x, j, wb, t);
		p->prefetched += x->step < s;
	}
	for (int s = 0; s < p->nsteps; s++)
		if (m->step_peak[s] > p->peak_bytes)
			p->peak_bytes = m->step_peak[s];
	free(wb);
	free(t);
	return 0;
}

/* p->room_from from the simulated peaks, hoisted loads included. */
int hp_sim_room_from(struct sim *m)
{
	struct hp_plan *p = m->p;
	uint64_t held = p->start_bytes;

	if (!(p->room_from = malloc(((size_t)p->nsteps + 1) * sizeof *p->room_from)))
		return hp_error(-ENOMEM, "out of memory planning");
	for (int s = p->nsteps; s >= 0; s--) {
		if (s < p->nsteps && m->step_peak[s] > held)
			held = m->step_peak[s];
		p->room_from[s] = m->budget > held ? m->budget - held : 0;
	}
	return 0;
}

static int cmp_rec(const void *a, const void *b)
{
	const struct rec *x = a, *y = b;

	if (x->step != y->step)
		return x->step - y->step;
	if (x->order != y->order)
		return x->order - y->order;
	return x->seq - y->seq;
}

int hp_sim_emit_acts(struct sim *m)
{
	struct hp_plan *p = m->p;

	if (m->nrecs) /* recs is NULL when nothing was recorded: qsort wants a pointer */
		qsort(m->recs, (size_t)m->nrecs, sizeof *m->recs, cmp_rec);
	p->acts = malloc(((size_t)m->nrecs + 1) * sizeof *p->acts);
	p->act_begin = calloc((size_t)p->nsteps + 2, sizeof *p->act_begin);
	if (!p->acts || !p->act_begin)
		return hp_error(-ENOMEM, "out of memory planning");
	p->nacts = 0;
	for (int r = 0; r < m->nrecs; r++) {
		if (!m->recs[r].a.act)
			continue;
		p->acts[p->nacts++] = m->recs[r].a;
		p->act_begin[m->recs[r].step + 1]++;
	}
	for (int s = 0; s <= p->nsteps; s++)
		p->act_begin[s + 1] += p->act_begin[s];
	return 0;
}
/* Inputs start resident where they fit (the user just wrote them). */
static void cold_start(struct sim *m)
{
	const struct hp_graph *g = m->g;

	for (int i = 0; i < g->ninputs; i++) {
		int v = g->inputs[i];
		if (m->persist[v] && !m->resident[v] && m->cur + m->size[v] <= m->budget) {
			hp_sim_set_resident(m, v, 1);
			m->dirty[v] = 1;
		}
	}
}

/* A training graph (state values have a next version): the caller writes
 * its inputs, the next batch, before every run. */
static int fed_each_run(const struct hp_graph *g)
{
	for (int v = 0; v < g->nvalues; v++)
		if (g->values[v].next >= 0)
			return 1;
	return 0;
}

/* Steady state: the next run starts with what this one kept resident.
 * The runtime reconciles at the start of each run (loads what the plan
 * expects resident, writes back or drops what it does not). */
static void warm_start(struct sim *m)
{
	struct hp_plan *p = m->p;

	for (int v = 0; v < m->g->nvalues; v++) {
		m->last_pin[v] = -1;
		if (!m->persist[v])
			m->below[v] = 0; /* this run's activations are written anew */
		p->start_resident[v] = m->resident[v] && m->persist[v];
		if (m->resident[v] && !m->persist[v])
			hp_sim_set_resident(m, v, 0);
		if (p->start_resident[v])
			p->start_bytes += m->size[v];
	}
	/* A training step's inputs are the next batch, which the caller writes
	 * before each run (hp_session_set_input: resident and dirty, as in the
	 * cold run).  Planned absent, the prologue wrote each back and the
	 * steps read it in again (LeNet at a quarter of its peak: 17 KiB a
	 * step, two synchronous writes, a load and a stall before the first
	 * kernel).  Inference reads its inputs back at the run's end instead
	 * (preload_next_run).  One the cold run left resident is the new
	 * batch too: dirty, its copy below the old batch's.  Left clean (the
	 * cold run had written it back and read it again), the plan evicted it
	 * unwritten and the run wrote it (hs_evict writes what is dirty):
	 * LeNet at 400000 B, 16 KiB a step more than --plan said. */
	for (int i = 0; i < m->g->ninputs && fed_each_run(m->g); i++) {
		int u = m->g->inputs[i];
		if (m->persist[u] && m->resident[u]) {
			m->dirty[u] = 1;
			m->below[u] = 0;
		} else if (m->persist[u] && m->use_start[u] < m->use_start[u + 1] &&
			   m->cur + m->size[u] <= m->budget) {
			hp_sim_set_resident(m, u, 1);
			m->dirty[u] = 1;
			p->start_resident[u] = 1;
			p->start_bytes += m->size[u];
		}
	}
	memcpy(m->cursor, m->use_start, (size_t)m->g->nvalues * sizeof *m->cursor);
	memset(m->nu, 0, (size_t)m->g->nvalues * sizeof *m->nu);
	memset(m->pre, 0xff, (size_t)m->g->nvalues * sizeof *m->pre); /* -1: the recs start anew */
	m->nrecs = 0;
	p->peak_bytes = p->bytes_loaded = p->bytes_written = p->loads = 0;
	memset(m->step_peak, 0, ((size_t)p->nsteps + 1) * sizeof *m->step_peak);
}

/* What the runtime does between two runs (runtime.c, end of a run): each
 * state value takes its update's tensor over, and its old tensor is
 * discarded.  Without this the next run's plan saw the updates resident
 * and the state absent: its prologue wrote the state back and read the
 * dead updates, and its first layers read the state again (0.3 of the
 * parameter bytes per Adam step more than the plan said). */
static void rotate_state(struct sim *m)
{
	for (int v = 0; v < m->g->nvalues; v++) {
		int nx = m->g->values[v].next;
		if (nx < 0 || !mg(m, v) || !mg(m, nx))
			continue;
		int r = m->resident[nx];
		if (m->resident[v])
			hp_sim_set_resident(m, v, 0);
		if (r) {
			hp_sim_set_resident(m, nx, 0);
			hp_sim_set_resident(m, v, 1);
		}
		m->dirty[v] = r && m->dirty[nx];
		m->below[v] = m->below[nx];
		m->dirty[nx] = m->below[nx] = 0;
	}
}

/* What the next run's reconciliation moves, counted into this run. */
static void count_reconcile(struct sim *m)
{
	struct hp_plan *p = m->p;
	int fed = fed_each_run(m->g);

	for (int v = 0; v < m->g->nvalues; v++) {
		int input = fed && m->g->values[v].kind == HP_VALUE_INPUT && mg(m, v) && m->persist[v] &&
			    m->use_start[v] < m->use_start[v + 1];
		if (input) { /* the caller's new batch: resident, dirty */
			if (!p->start_resident[v])
				p->bytes_written += m->size[v]; /* written back by the prologue */
			continue;
		}
		if (m->resident[v] && !p->start_resident[v] && m->dirty[v])
			p->bytes_written += m->size[v];
		if (!m->resident[v] && p->start_resident[v]) {
			p->bytes_loaded += m->size[v];
			p->loads++;
		}
	}
}

/* The graph inputs of an inference (no state value: nothing has a next
 * version) that this run's later steps pushed out, read back at its end
 * where the budget has room, in the order the next run reads them
 * (hp_sim_hoist_loads then moves each load as early as room allows): the next
 * run starts with them resident (warm_start) instead of waiting for them
 * at its first step, a stall with no kernel to hide it (4.6 MiB, 1.5-7 ms
 * of ResNet-18's batch of 32 at 112x112 out of core).  A load of this run
 * and no more bytes: the next run's does not happen. */
static int preload_next_run(struct sim *m)
{
	const struct hp_graph *g = m->g;
	int last = m->p->nsteps - 1, rc;

	if (last < 0)
		return 0;
	for (int v = 0; v < g->nvalues; v++)
		if (g->values[v].next >= 0)
			return 0;
	for (int i = 0; i < g->ninputs; i++) {
		int best = -1;
		/* the input the next run reads first among those left (few) */
		for (int k = 0; k < g->ninputs; k++) {
			int u = g->inputs[k];
			if (!mg(m, u) || !m->persist[u] || m->resident[u] || m->use_start[u] == m->use_start[u + 1] ||
			    m->step_peak[last] + m->size[u] > m->budget)
				continue;
			if (best < 0 || m->uses[m->use_start[u]] < m->uses[m->use_start[best]])
				best = u;
		}
		if (best < 0)
			break;
		hp_sim_set_resident(m, best, 1);
		m->step_peak[last] += m->size[best]; /* read in before the last step runs */
		if ((rc = hp_sim_push(m, last, 1, best, HP_ACT_LOAD, last)) < 0)
			return rc;
		m->p->bytes_loaded += m->size[best];
		m->p->loads++;
	}
	return 0;
}

/* One simulated run: cold (pass 0, from the inputs) or warm (pass 1, from
 * what the cold run left resident: the plan the runtime follows). */
int hp_sim_simulate(struct sim *m, int pass)
{
	const struct hp_graph *g = m->g;
	int rc;

	if (pass == 0)
		cold_start(m);
	else
		warm_start(m);
	m->cand[0].n = m->cand[1].n = m->cand[2].n = m->cand[3].n = 0; /* the run's next uses anew */
	for (int i = 0; i < m->nresident; i++)
		hp_sim_cand_push(m, m->resident_list[i], 0);
	for (int s = 0; s < m->p->nsteps; s++) {
		rc = simulate_step(m, s);
		if (rc == HP_EBUDGET)
			return hp_node_error(g, &g->nodes[m->p->node[s]], HP_EBUDGET, "does not fit in the budget (planner)");
		if (rc != 0)
			return rc;
	}
	hp_sim_release_holds(m, NEVER, NEVER); /* the run's end drains the reductions */
	if ((rc = preload_next_run(m)) < 0)
		return rc;
	rotate_state(m);
	m->p->peak_bytes = 0; /* exact again after preloads taken back */
	for (int s = 0; s < m->p->nsteps; s++)
		if (m->step_peak[s] > m->p->peak_bytes)
			m->p->peak_bytes = m->step_peak[s];
	if (pass == 1)
		count_reconcile(m);
	return 0;
}
