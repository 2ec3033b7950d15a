/* Static memory planner: Belady eviction (and other victim policies),
 * write-back of live dirty values, budget-aware load hoisting and a
 * pipeline time model.  See plan.h. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hpdlf/error.h"
#include "hpdlf/kernels.h"
#include "exec/comm.h"
#include "exec/plan.h"
#include "exec/plan_heap.h"
#include "exec/speed.h"

#define NEVER HP_PLAN_NEVER

struct rec {
	int step, order, seq;
	int free_after;       /* evictions: the victim's last pin before it */
	int nvictims;         /* loads: evictions made for it (the recs just before) */
	struct hp_plan_act_rec a;
};

struct sim {
	const struct hp_graph *g;
	const struct hp_plan_opts *o;
	struct hp_plan *p;
	uint64_t *size;
	int *use_start, *uses, *cursor; /* CSR of read steps per value */
	int *nu;                        /* per value: next_use's last answer (0: none since
					 * the cursors were reset) */
	char *resident, *dirty, *below, *pinned, *persist;
	char *mgd;                      /* per value: managed() */
	int *resident_list, nresident;
	int *resident_at;               /* v's index in resident_list, -1: none */
	int resident_twice;             /* a value was listed twice: look up by scan */
	int *last_evict;                /* step of a value's latest eviction, -1 */
	int *last_pin;                  /* step a value was last pinned, -1 */
	int *pre;                       /* rec of a value's latest preload, -1 */
	uint64_t cur, *step_peak;
	struct rec *recs;
	int nrecs, caprecs;
	uint64_t budget;
	uint64_t step_max;              /* the largest step's need (min_budget) */
	/* reductions in flight (plan_opts' comm_*): per step, the first step
	 * its buffers are free again (s + 1: at once); per value, the step its
	 * hold ends (0: not held), and the held values */
	int *until, *hold, *held, nheld;
	int policy;                     /* enum victim_policy */
	/* the values that may be evicted, clean [0] and dirty [1], by next
	 * use (cand_push: lazily, stale entries dropped at the top) */
	struct hp_vheap cand[2];
	int cand_oom;
};

static int push(struct sim *m, int step, int order, int value, enum hp_plan_act act, int for_step)
{
	if (m->nrecs == m->caprecs) {
		int cap = m->caprecs ? 2 * m->caprecs : 256;
		void *q = realloc(m->recs, (size_t)cap * sizeof *m->recs);
		if (!q)
			return hp_error(-ENOMEM, "out of memory planning");
		m->recs = q;
		m->caprecs = cap;
	}
	m->recs[m->nrecs] = (struct rec){ step, order, m->nrecs, m->last_pin[value], 0, { value, act, for_step } };
	m->nrecs++;
	return 0;
}

/* A value the planner manages: it lives in the store (constants folded into
 * graph memory do not). */
static int managed(const struct hp_graph *g, int v)
{
	return v >= 0 && g->values[v].kind != HP_VALUE_CONSTANT;
}

/* managed(), from the simulation's own array: the value structs are
 * scattered cache lines; the passes over every step read this flag for
 * each input and output (a third of their time on the 10,001-node MLP's
 * training graph). */
static int mg(const struct sim *m, int v)
{
	return v >= 0 && m->mgd[v];
}

static int next_use(struct sim *m, int v, int step)
{
	while (m->cursor[v] < m->use_start[v + 1] && m->uses[m->cursor[v]] <= step)
		m->cursor[v]++;
	if (m->cursor[v] < m->use_start[v + 1])
		return m->uses[m->cursor[v]];
	/* kept for the next run: its first use there (cyclic Belady) */
	if (m->persist[v] && m->use_start[v] < m->use_start[v + 1] && m->uses[m->use_start[v]] < NEVER)
		return m->p->nsteps + m->uses[m->use_start[v]];
	return m->persist[v] ? NEVER - 1 : NEVER;
}

static void set_resident(struct sim *m, int v, int on)
{
	int i = m->resident_at[v];

	if (on) {
		m->resident[v] = 1;
		m->resident_twice |= i >= 0;
		m->resident_at[v] = m->nresident;
		m->resident_list[m->nresident++] = v;
		m->cur += m->size[v];
		return;
	}
	m->resident[v] = 0;
	m->cur -= m->size[v];
	/* the first entry of v leaves, the last takes its place: a scan of
	 * the list did so in every 10,000-node step's eviction */
	for (i = m->resident_twice ? 0 : i; m->resident_twice && i < m->nresident && m->resident_list[i] != v; i++)
		;
	if (i < 0 || i >= m->nresident)
		return;
	m->resident_list[i] = m->resident_list[--m->nresident];
	m->resident_at[m->resident_list[i]] = i;
	m->resident_at[v] = -1;
}

static void release_holds(struct sim *m, int upto, int now);

/* The earliest hold to end (when nothing else can make room: the step
 * will wait for that reduction). */
static int first_hold(const struct sim *m)
{
	int e = NEVER;

	for (int i = 0; i < m->nheld; i++)
		e = m->hold[m->held[i]] < e ? m->hold[m->held[i]] : e;
	return e;
}

/* Victim policies (hp_plan_opts.victims: how many of them hp_plan_build
 * tries, keeping the plan that moves least).  Belady's farthest next use
 * counts evictions, not bytes: a dirty victim is written back and read
 * again, a clean one only read.  The 3-D U-Net of bench_ooc_targets.py
 * (64^3, 12 bands) at a quarter of its peak: Belady 64.8 MiB read and 52.1
 * written a run, clean first 61.3 and 46.1, and 4.5% less CPU a run (359.5
 * against 376.5 ms, medians of 5 alternating).  (Distance times bytes and
 * distance over bytes were tried too: they won rarely, and the first
 * planned a write-back of a graph input that runs do not make.) */
enum victim_policy {
	VICTIM_FARTHEST, /* farthest next use */
	VICTIM_CLEAN,    /* a clean victim's distance counts twice */
	VICTIM_NPOL
};

/* How much policy pol prefers evicting v (next use nu, finite, after
 * step): VICTIM_FARTHEST the next use itself (Belady). */
static double victim_score(const struct sim *m, int pol, int v, int nu, int step)
{
	double d = (double)(nu - step);

	if (pol == VICTIM_CLEAN)
		return m->dirty[v] ? d : 2 * d;
	return nu;
}

/* v's next use after step (cached: an answer after step is the answer
 * still, the cursor has not moved since). */
static int nu_at(struct sim *m, int v, int step)
{
	return m->nu[v] > step ? m->nu[v] : (m->nu[v] = next_use(m, v, step));
}

static int evictable(const struct sim *m, int v)
{
	return m->resident[v] && !m->pinned[v] && !m->hold[v];
}

/* v among the candidates if it may be evicted now (step): pushed again
 * wherever it may have become so, or its next use or dirt changed (the
 * end of a step that read or wrote it, a preload, a hold's end, a run's
 * start). */
static void cand_push(struct sim *m, int v, int step)
{
	if (mg(m, v) && evictable(m, v) && hp_vheap_push(&m->cand[m->dirty[v] != 0], nu_at(m, v, step), v) < 0)
		m->cand_oom = 1;
}

/* The first candidate of class c (its next use in *nu), stale entries
 * dropped; -1 if none. */
static int cand_top(struct sim *m, int c, int step, int *nu)
{
	struct hp_vheap *h = &m->cand[c];

	while (h->n) {
		struct hp_vent e = h->e[0];
		if (evictable(m, e.v) && (m->dirty[e.v] != 0) == c && nu_at(m, e.v, step) == e.nu) {
			*nu = e.nu;
			return e.v;
		}
		hp_vheap_pop(h);
		cand_push(m, e.v, step); /* evictable under a newer figure: never lost */
	}
	return -1;
}

/* The resident value neither pinned nor held and next read after step
 * `after` that policy pol evicts first, -1 if none; *far its next use.
 * Values never read again (or only by the next run, NEVER - 1) go first in
 * every policy, the farthest first; then the highest victim_score
 * (VICTIM_FARTHEST: Belady's choice, the farthest next use after `step`);
 * ties by value index for determinism.  Each policy's score grows with
 * the next use among clean values and among dirty ones, so the first of
 * each class (cand_top) is its best: a scan of every resident value at
 * each eviction was most of planning the 10,001-node MLP at 200M. */
static int pick_victim(struct sim *m, int pol, int step, int after, int *far)
{
	int v[2], nu[2] = { -1, -1 }, c;

	*far = -1;
	for (c = 0; c < 2; c++)
		if ((v[c] = cand_top(m, c, step, &nu[c])) >= 0 && nu[c] <= after)
			v[c] = -1;
	if (v[0] < 0 || v[1] < 0) {
		c = v[0] < 0;
	} else if (nu[0] >= NEVER - 1 || nu[1] >= NEVER - 1) {
		c = nu[1] > nu[0] || (nu[1] == nu[0] && v[1] < v[0]);
	} else {
		double s0 = victim_score(m, pol, v[0], nu[0], step), s1 = victim_score(m, pol, v[1], nu[1], step);
		c = s1 > s0 || (s1 == s0 && v[1] < v[0]);
	}
	if (v[c] >= 0)
		*far = nu[c];
	return v[c];
}

/* A preload not used yet when its value is evicted was wasted: it is
 * taken back (no read, no eviction) instead of read twice.  Memory that
 * the steps between needed more than preload foresaw pushed such loads
 * out: an 8 GiB Adam run read 0.13 of its parameters twice per step. */
static int cancel_preload(struct sim *m, int v, int step)
{
	int r = m->pre[v];

	if (r < 0 || m->recs[r].a.act != HP_ACT_LOAD || m->recs[r].a.value != v || m->last_pin[v] >= m->recs[r].step)
		return 0;
	m->recs[r].a.act = 0; /* dead: hoist_loads and emit_acts skip it */
	m->p->bytes_loaded -= m->size[v];
	m->p->loads--;
	for (int k = m->recs[r].step; k < step; k++)
		m->step_peak[k] -= m->size[v];
	m->pre[v] = -1;
	set_resident(m, v, 0);
	return 1;
}

/* Step `step` drops `victim` (farthest next use `far`): written back when
 * dirty and read again later, else evicted, or its unused preload undone. */
static int drop(struct sim *m, int victim, int far, int step)
{
	if (cancel_preload(m, victim, step))
		return 0;
	if (m->dirty[victim] && far < NEVER) {
		if (push(m, step, 0, victim, HP_ACT_WRITEBACK, -1) < 0)
			return -ENOMEM;
		m->p->bytes_written += m->size[victim];
		m->below[victim] = 1;
		m->dirty[victim] = 0;
	} else if (push(m, step, 0, victim, HP_ACT_EVICT, -1) < 0) {
		return -ENOMEM;
	}
	set_resident(m, victim, 0);
	return 0;
}

static int make_room(struct sim *m, uint64_t bytes, int step)
{
	while (m->cur + bytes > m->budget) {
		int far, victim = pick_victim(m, m->policy, step, step, &far);
		if (victim < 0 && m->nheld) {
			release_holds(m, first_hold(m), step);
			continue;
		}
		if (victim < 0)
			return HP_EBUDGET;
		if (drop(m, victim, far, step) < 0)
			return -ENOMEM;
	}
	return 0;
}

/* Kernel scratch, rounded like a tensor (the runtime makes it one). */
static uint64_t ws_size(const struct sim *m, const struct hp_node *n)
{
	uint64_t a = m->o->align > 1 ? m->o->align : 1;

	if (m->o->workspace)
		return 0; /* reserved once for all steps */
	return (n->workspace + a - 1) / a * a;
}

static uint64_t value_size(const struct hp_graph *g, int v, uint64_t align)
{
	struct hp_tensor t = { .dtype = g->values[v].dtype, .shape = g->values[v].shape };
	uint64_t b = hp_tensor_bytes(&t);

	return align > 1 ? (b + align - 1) / align * align : b;
}

static int build_schedule(struct sim *m)
{
	const struct hp_graph *g = m->g;
	struct hp_plan *p = m->p;
	int nuses = 0;

	p->node = malloc(((size_t)g->nnodes + 1) * sizeof *p->node);
	p->last_use = malloc(((size_t)g->nvalues + 1) * sizeof *p->last_use);
	m->use_start = calloc((size_t)g->nvalues + 2, sizeof *m->use_start);
	if (!p->node || !p->last_use || !m->use_start)
		return hp_error(-ENOMEM, "out of memory planning");
	for (int i = 0; i < g->nnodes; i++)
		if (!g->nodes[i].folded)
			p->node[p->nsteps++] = i;
	for (int v = 0; v < g->nvalues; v++) {
		const struct hp_value *val = &g->values[v];
		m->mgd[v] = managed(g, v);
		m->persist[v] = val->is_output || val->next >= 0 || val->kind == HP_VALUE_INPUT ||
				val->kind == HP_VALUE_INITIALIZER;
		m->size[v] = value_size(g, v, m->o->align);
		m->last_evict[v] = -1;
		m->last_pin[v] = -1;
		p->last_use[v] = -1;
	}
	for (int v = 0; v < g->nvalues; v++)
		if (g->values[v].next >= 0)
			m->persist[g->values[v].next] = 1;
	for (int s = 0; s < p->nsteps; s++) {
		const struct hp_node *n = &g->nodes[p->node[s]];
		for (int j = 0; j < n->ninputs; j++)
			if (mg(m, n->inputs[j])) {
				m->use_start[n->inputs[j] + 1]++;
				p->last_use[n->inputs[j]] = s;
				nuses++;
			}
	}
	for (int v = 0; v < g->nvalues; v++) {
		/* weights only folded away are not the runtime's business */
		if (g->values[v].kind == HP_VALUE_INITIALIZER && !m->use_start[v + 1] && g->values[v].next < 0 &&
		    !g->values[v].is_output)
			m->persist[v] = 0;
	}
	for (int v = 0; v < g->nvalues; v++) {
		m->use_start[v + 1] += m->use_start[v];
		if (m->persist[v])
			p->last_use[v] = p->nsteps;
	}
	m->uses = malloc(((size_t)nuses + 1) * sizeof *m->uses);
	if (!m->uses)
		return hp_error(-ENOMEM, "out of memory planning");
	memcpy(m->cursor, m->use_start, (size_t)g->nvalues * sizeof *m->cursor);
	for (int s = 0; s < p->nsteps; s++) {
		const struct hp_node *n = &g->nodes[p->node[s]];
		for (int j = 0; j < n->ninputs; j++) {
			int v = n->inputs[j];
			/* a value read twice by one node is one use */
			if (mg(m, v) && (m->cursor[v] == m->use_start[v] || m->uses[m->cursor[v] - 1] != s))
				m->uses[m->cursor[v]++] = s;
		}
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

/* Output o of step s may take input j's bytes over: both activations of
 * this run, the input dies there (read by no other input slot unless the
 * op allows it), the output is not kept, same dtype and bytes. */
static int pair_inplace(const struct hp_graph *g, const struct hp_plan *p, int s, int j, int o)
{
	const struct hp_node *n = &g->nodes[p->node[s]];
	int a = n->inputs[j], b = n->outputs[o];

	if (a < 0 || b < 0 || g->values[a].kind != HP_VALUE_ACTIVATION || g->values[b].kind != HP_VALUE_ACTIVATION)
		return 0;
	if (p->last_use[a] != s || p->last_use[b] >= p->nsteps || g->values[a].next >= 0 || g->values[b].next >= 0)
		return 0;
	if (g->values[a].dtype != g->values[b].dtype)
		return 0;
	struct hp_tensor ta = { .dtype = g->values[a].dtype, .shape = g->values[a].shape };
	struct hp_tensor tb = { .dtype = g->values[b].dtype, .shape = g->values[b].shape };
	if (hp_tensor_bytes(&ta) != hp_tensor_bytes(&tb) || !hp_tensor_bytes(&ta))
		return 0;
	for (int k = 0; k < n->ninputs; k++)
		if (k != j && n->inputs[k] == a && !(n->op->flags & HP_OP_INPLACE))
			return 0;
	return 1;
}

int hp_plan_inplace(const struct hp_graph *g, const struct hp_plan *p, int s)
{
	const struct hp_node *n = &g->nodes[p->node[s]];

	if (!(n->op->flags & (HP_OP_INPLACE | HP_OP_ALIAS)) || n->ninputs < 1 || n->noutputs < 1)
		return 0;
	return pair_inplace(g, p, s, 0, 0);
}

int hp_plan_comm_inplace(const struct hp_graph *g, const struct hp_plan *p, int s)
{
	const struct hp_node *n = &g->nodes[p->node[s]];

	if (!hp_comm_is_allreduce(n) || hp_comm_is_shard_op(n) || n->ninputs != n->noutputs || n->ninputs < 2)
		return 0;
	for (int i = 1; i < n->ninputs; i++)
		if (!pair_inplace(g, p, s, i, i))
			return 0;
	return 1;
}

int hp_plan_state_released(const struct hp_graph *g, int v)
{
	return v >= 0 && g->values[v].kind != HP_VALUE_CONSTANT && g->values[v].next >= 0 &&
	       !g->values[v].is_output && g->values[v].kind != HP_VALUE_INPUT && g->values[v].producer < 0;
}

/* Output o of update step s is the next version of one of its state
 * inputs, read by no later step of the run: the update writes it over
 * that input's bytes (issue 17: W' over W, v' over v). */
static int update_src(const struct hp_graph *g, const struct hp_plan *p, int s, int o)
{
	const struct hp_node *n = &g->nodes[p->node[s]];
	int b = n->outputs[o];

	if (!(n->op->flags & HP_OP_STATE_INPLACE) || b < 0 || g->values[b].is_output ||
	    g->values[b].producer != p->node[s])
		return -1;
	for (int j = 0; j < n->ninputs; j++) {
		int a = n->inputs[j];
		if (a < 0 || g->values[a].next != b)
			continue;
		if (!hp_plan_state_released(g, a) || hp_plan_next_use(p, a, s) != HP_PLAN_NEVER ||
		    g->values[a].dtype != g->values[b].dtype || !hp_shape_equal(&g->values[a].shape, &g->values[b].shape))
			return -1;
		for (int k = 0; k < n->ninputs; k++)
			if (k != j && n->inputs[k] == a)
				return -1;
		return j;
	}
	return -1;
}

/* hp_plan_inplace_src with comm = hp_plan_comm_inplace(g, p, s), which
 * holds for every output past the first: asked once per step, not per
 * output (a weight split's Split has up to 64). */
static int inplace_src_with(const struct hp_graph *g, const struct hp_plan *p, int s, int o, int comm)
{
	if (o == 0 && hp_plan_inplace(g, p, s))
		return 0;
	if (o > 0 && comm)
		return o;
	return update_src(g, p, s, o);
}

int hp_plan_inplace_src(const struct hp_graph *g, const struct hp_plan *p, int s, int o)
{
	return inplace_src_with(g, p, s, o, o > 0 && hp_plan_comm_inplace(g, p, s));
}

int hp_plan_inplace_at(const struct hp_graph *g, const struct hp_plan *p, int s, int o)
{
	return hp_plan_inplace_src(g, p, s, o) >= 0;
}

/* Bytes step s needs resident at once: distinct inputs, outputs, workspace. */
static uint64_t step_need(struct sim *m, int s)
{
	const struct hp_node *n = &m->g->nodes[m->p->node[s]];
	uint64_t need = ws_size(m, n);

	for (int j = 0; j < n->ninputs; j++) {
		int v = n->inputs[j], dup = 0;
		for (int k = 0; k < j; k++)
			dup |= n->inputs[k] == v;
		if (mg(m, v) && !dup)
			need += m->size[v];
	}
	int comm = n->noutputs > 1 && hp_plan_comm_inplace(m->g, m->p, s);

	for (int o = 0; o < n->noutputs; o++)
		if (mg(m, n->outputs[o]) && inplace_src_with(m->g, m->p, s, o, comm) < 0)
			need += m->size[n->outputs[o]];
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
		int far, victim = pick_victim(m, m->policy, s, t, &far);
		if (victim < 0)
			return 0; /* evictions made so far were due anyway */
		if ((rc = drop(m, victim, far, s)) < 0)
			return rc;
	}
	for (int j = 0; j < n->ninputs; j++) {
		int v = n->inputs[j];
		if (v < 0 || !loadable(m, v, s))
			continue;
		set_resident(m, v, 1);
		cand_push(m, v, s);
		if ((rc = push(m, s, 1, v, HP_ACT_LOAD, t)) < 0)
			return rc;
		m->pre[v] = m->nrecs - 1;
		m->recs[m->nrecs - 1].nvictims = m->nrecs - 1 - first;
		first = m->nrecs;
		p->bytes_loaded += m->size[v];
		p->loads++;
	}
	return 0;
}

/* ---- reductions in flight ---- */

/* Predicted ms of reduction step n over the options' link: a ring
 * allreduce of its bytes, a reduce-scatter or an all-gather half of it. */
static double comm_ms(const struct sim *m, const struct hp_node *n)
{
	double N = m->o->comm_ranks, in = 0, out = 0, hops;

	for (int j = 1; j < n->ninputs; j++)
		in += n->inputs[j] >= 0 ? (double)m->size[n->inputs[j]] : 0;
	for (int j = 1; j < n->noutputs; j++)
		out += n->outputs[j] >= 0 ? (double)m->size[n->outputs[j]] : 0;
	hops = hp_comm_is_shard_op(n) ? N - 1 : 2 * (N - 1);
	return hops / N * (in > out ? in : out) / (m->o->comm_GBps * 1e6) + hops * m->o->comm_lat_us / 1e3;
}

static double kernel_ms(const struct sim *m, const struct hp_node *n);

/* until[s] for every reduction step s: the kernels back to back on the
 * compute lanes (their work shared by the workers), the reductions one
 * after another from when they are issued (the communication thread's
 * FIFO); until[s] is the first step that starts after s's predicted end,
 * and never before the next reduction is issued: a reduction also lasts
 * until the slowest rank joins it, which no link figure predicts (on a
 * loaded machine a late peer stretched one past ten times its time), while
 * the FIFO starts the next one only after it, so a reduction still running
 * when the next is issued is the common case, not the exception. */
static int plan_flights(struct sim *m)
{
	const struct hp_plan *p = m->p;
	double *t0 = calloc((size_t)p->nsteps + 1, sizeof *t0), chain = 0;
	int w = m->o->workers > 0 ? m->o->workers : 1, prev = -1;

	m->until = calloc((size_t)p->nsteps + 1, sizeof *m->until);
	if (!t0 || !m->until) {
		free(t0);
		return hp_error(-ENOMEM, "out of memory planning");
	}
	for (int s = 0; s < p->nsteps; s++) {
		const struct hp_node *n = &m->g->nodes[p->node[s]];
		t0[s + 1] = t0[s] + (hp_comm_is_allreduce(n) ? 0 : kernel_ms(m, n) / w);
	}
	for (int s = 0; s < p->nsteps; s++) {
		const struct hp_node *n = &m->g->nodes[p->node[s]];
		int e = s + 1;
		if (!hp_comm_is_allreduce(n))
			continue;
		chain = (chain > t0[s + 1] ? chain : t0[s + 1]) + comm_ms(m, n);
		while (e < p->nsteps && t0[e] < chain)
			e++;
		m->until[s] = e < p->nsteps ? e : NEVER; /* past the end: held to the run's end */
		if (prev >= 0 && m->until[prev] < s + 1)
			m->until[prev] = s + 1;
		prev = s;
	}
	free(t0);
	return 0;
}

/* Reduction step n's inputs and outputs stay resident and are never
 * evicted until step `until`. */
static void hold_step(struct sim *m, const struct hp_node *n, int until)
{
	for (int k = 0; k < n->ninputs + n->noutputs; k++) {
		int v = k < n->ninputs ? n->inputs[k] : n->outputs[k - n->ninputs];
		if (!mg(m, v) || !m->resident[v] || m->hold[v])
			continue;
		m->hold[v] = until;
		m->held[m->nheld++] = v;
	}
}

/* Holds ending by step `upto` end; of their values, those whose last use
 * is before step `now` are freed (the others are needed still). */
static void release_holds(struct sim *m, int upto, int now)
{
	int k = 0;

	for (int i = 0; i < m->nheld; i++) {
		int v = m->held[i];
		if (m->hold[v] > upto) {
			m->held[k++] = v;
			continue;
		}
		m->hold[v] = 0;
		if (now < NEVER)
			m->last_pin[v] = now - 1; /* its eviction is not hoisted into the hold */
		if (m->resident[v] && m->p->last_use[v] < now && m->p->last_use[v] < m->p->nsteps)
			set_resident(m, v, 0);
		else if (now < NEVER)
			cand_push(m, v, now);
	}
	m->nheld = k;
}

static int simulate_step(struct sim *m, int s)
{
	const struct hp_graph *g = m->g;
	struct hp_plan *p = m->p;
	const struct hp_node *n = &g->nodes[p->node[s]];
	int rc;

	release_holds(m, s, s);
	pin_step(m, n, 1, s);
	for (int j = 0; j < n->ninputs; j++) {
		int v = n->inputs[j];
		int first = m->nrecs;
		if (!mg(m, v) || m->resident[v])
			continue;
		if ((rc = make_room(m, m->size[v], s)) != 0)
			return rc;
		set_resident(m, v, 1);
		if ((rc = push(m, s, 1, v, HP_ACT_LOAD, s)) < 0)
			return rc;
		m->pre[v] = -1;
		m->recs[m->nrecs - 1].nvictims = m->nrecs - 1 - first;
		p->bytes_loaded += m->size[v];
		p->loads++;
	}
	int comm = n->noutputs > 1 && hp_plan_comm_inplace(g, p, s);

	for (int o = 0; o < n->noutputs; o++) {
		int j = inplace_src_with(g, p, s, o, comm);
		if (j < 0)
			continue;
		/* output o takes input j's bytes over */
		set_resident(m, n->inputs[j], 0);
		set_resident(m, n->outputs[o], 1);
		m->dirty[n->outputs[o]] = 1;
		m->below[n->outputs[o]] = 0;
		m->pinned[n->outputs[o]] = 1;
	}
	for (int o = 0; o < n->noutputs; o++) {
		int v = n->outputs[o];
		if (!mg(m, v) || m->resident[v])
			continue;
		if ((rc = make_room(m, m->size[v], s)) != 0)
			return rc;
		set_resident(m, v, 1);
		m->dirty[v] = 1;
		m->below[v] = 0;
	}
	if ((rc = make_room(m, ws_size(m, n), s)) != 0)
		return rc;
	if ((rc = preload(m, s, ws_size(m, n))) < 0)
		return rc;
	m->step_peak[s] = m->cur + ws_size(m, n);
	if (m->step_peak[s] > p->peak_bytes)
		p->peak_bytes = m->step_peak[s];
	pin_step(m, n, 0, s);
	if (m->until && m->until[s] > s + 1)
		hold_step(m, n, m->until[s]); /* a reduction in flight keeps its buffers */
	for (int j = 0; j < n->ninputs; j++) {
		int v = n->inputs[j];
		if (mg(m, v) && m->resident[v] && p->last_use[v] == s && !m->hold[v])
			set_resident(m, v, 0);
	}
	for (int o = 0; o < n->noutputs; o++) {
		int v = n->outputs[o];
		if (mg(m, v) && m->resident[v] && p->last_use[v] < 0 && !m->hold[v])
			set_resident(m, v, 0);
	}
	for (int k = 0; k < n->ninputs + n->noutputs; k++) /* unpinned: next read later, or written */
		cand_push(m, k < n->ninputs ? n->inputs[k] : n->outputs[k - n->ninputs], s);
	return m->cand_oom ? hp_error(-ENOMEM, "out of memory planning") : 0;
}

/* Move each load to the earliest step where the budget leaves room for it,
 * never before the value's latest eviction.  The evictions made to room it
 * move along when their victims were last pinned earlier still: memory full
 * of values that wait to be evicted does not keep a load from starting. */
static void hoist_loads(struct sim *m)
{
	struct hp_plan *p = m->p;

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
		if (j == s)
			continue;
		x->step = j;
		p->prefetched++;
		for (int k = r - x->nvictims; k < r; k++)
			m->recs[k].step = j;
	}
	for (int s = 0; s < p->nsteps; s++)
		if (m->step_peak[s] > p->peak_bytes)
			p->peak_bytes = m->step_peak[s];
}

/* p->room_from from the simulated peaks, hoisted loads included. */
static int room_from(struct sim *m)
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

static int emit_acts(struct sim *m)
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

/* Milliseconds of step s's kernel: the measured per-kernel model, or the
 * flat GFLOP/s of the options. */
static double kernel_cls_ms(const struct sim *m, const struct hp_node *n, enum hp_kclass *cls)
{
	*cls = HP_KC_GEMM;
	if (m->o->speed)
		return hp_speed_kernel_ms(m->o->speed, m->g, n, cls);
	return (n->op->flops ? n->op->flops(m->g, n) : 0) / (m->o->gflops > 0 ? m->o->gflops : 50) / 1e6;
}

static double kernel_ms(const struct sim *m, const struct hp_node *n)
{
	enum hp_kclass cls;

	return kernel_cls_ms(m, n, &cls);
}

static double step_ms(struct sim *m, const struct hp_node *n, struct hp_plan *p)
{
	enum hp_kclass cls;
	double c = kernel_cls_ms(m, n, &cls);

	if (m->o->speed)
		p->dispatch_ms += m->o->speed->dispatch_us / 1e3;
	p->class_ms[cls] += c;
	p->class_kernels[cls]++;
	return c;
}

/* Issue step s's I/O on the one I/O lane at time `now`: loads make their
 * step ready, write-backs hold step s (they free the budget it needs). */
static double issue_io(struct sim *m, int s, double now, double *io, double *ready)
{
	struct hp_plan *p = m->p;
	double rd = m->o->read_MBps > 0 ? m->o->read_MBps : 1000, wr = m->o->write_MBps > 0 ? m->o->write_MBps : 1000;
	double wait = 0;

	for (int a = p->act_begin[s]; a < p->act_begin[s + 1]; a++) {
		const struct hp_plan_act_rec *x = &p->acts[a];
		double mb = (double)m->size[x->value] / 1e6, d;
		if (x->act != HP_ACT_WRITEBACK && x->act != HP_ACT_LOAD)
			continue;
		d = mb / (x->act == HP_ACT_WRITEBACK ? wr : rd) * 1e3 +
		    (x->act == HP_ACT_WRITEBACK ? m->o->write_lat_us : m->o->read_lat_us) / 1e3;
		*io = (*io > now ? *io : now) + d;
		*(x->act == HP_ACT_WRITEBACK ? &p->write_ms : &p->read_ms) += d;
		if (x->act == HP_ACT_WRITEBACK)
			wait = *io;
		else if (*io > ready[x->for_step])
			ready[x->for_step] = *io;
	}
	return wait;
}

/* Compute lanes (the task net's workers) and one I/O lane.  A step starts
 * on the first free lane once its inputs are computed, its loads are in
 * and the write-backs issued before it are done. */
static void time_model(struct sim *m)
{
	struct hp_plan *p = m->p;
	const struct hp_graph *g = m->g;
	int w = m->o->workers > 0 ? (m->o->workers < 64 ? m->o->workers : 64) : 1;
	double lane[64] = { 0 }, io = 0, end = 0;
	double *ready = calloc((size_t)p->nsteps + 1, sizeof *ready), *done = calloc((size_t)g->nvalues + 1, sizeof *done);

	if (!ready || !done)
		goto out;
	for (int s = 0; s < p->nsteps; s++) {
		const struct hp_node *n = &g->nodes[p->node[s]];
		int l = 0;
		for (int k = 1; k < w; k++)
			if (lane[k] < lane[l])
				l = k;
		double c = step_ms(m, n, p), t = issue_io(m, s, lane[l], &io, ready);
		if (ready[s] > t)
			t = ready[s];
		if (lane[l] > t)
			t = lane[l];
		for (int j = 0; j < n->ninputs; j++)
			if (n->inputs[j] >= 0 && done[n->inputs[j]] > t)
				t = done[n->inputs[j]];
		lane[l] = t + c;
		for (int j = 0; j < n->noutputs; j++)
			if (n->outputs[j] >= 0)
				done[n->outputs[j]] = lane[l];
		if (lane[l] > end)
			end = lane[l];
		p->compute_ms += c;
	}
	p->io_ms = p->read_ms + p->write_ms;
	p->predicted_ms = end;
out:
	free(ready);
	free(done);
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
		uint64_t need = step_need(m, s);
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
	hp_vheap_free(&m->cand[0]);
	hp_vheap_free(&m->cand[1]);
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

/* Inputs start resident where they fit (the user just wrote them). */
static void cold_start(struct sim *m)
{
	const struct hp_graph *g = m->g;

	for (int i = 0; i < g->ninputs; i++) {
		int v = g->inputs[i];
		if (m->persist[v] && !m->resident[v] && m->cur + m->size[v] <= m->budget) {
			set_resident(m, v, 1);
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
			set_resident(m, v, 0);
		if (p->start_resident[v])
			p->start_bytes += m->size[v];
	}
	/* A training step's inputs are the next batch, which the caller writes
	 * before each run (hp_session_set_input: resident and dirty, as in the
	 * cold run).  Planned absent, the prologue wrote each back and the
	 * steps read it in again (LeNet at a quarter of its peak: 17 KiB a
	 * step, two synchronous writes, a load and a stall before the first
	 * kernel).  Inference reads its inputs back at the run's end instead
	 * (preload_next_run). */
	for (int i = 0; i < m->g->ninputs && fed_each_run(m->g); i++) {
		int u = m->g->inputs[i];
		if (m->persist[u] && !m->resident[u] && m->use_start[u] < m->use_start[u + 1] &&
		    m->cur + m->size[u] <= m->budget) {
			set_resident(m, u, 1);
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
			set_resident(m, v, 0);
		if (r) {
			set_resident(m, nx, 0);
			set_resident(m, v, 1);
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
 * (hoist_loads then moves each load as early as room allows): the next
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
		set_resident(m, best, 1);
		m->step_peak[last] += m->size[best]; /* read in before the last step runs */
		if ((rc = push(m, last, 1, best, HP_ACT_LOAD, last)) < 0)
			return rc;
		m->p->bytes_loaded += m->size[best];
		m->p->loads++;
	}
	return 0;
}

/* One simulated run: cold (pass 0, from the inputs) or warm (pass 1, from
 * what the cold run left resident: the plan the runtime follows). */
static int simulate(struct sim *m, int pass)
{
	const struct hp_graph *g = m->g;
	int rc;

	if (pass == 0)
		cold_start(m);
	else
		warm_start(m);
	m->cand[0].n = m->cand[1].n = 0; /* the run's next uses anew */
	for (int i = 0; i < m->nresident; i++)
		cand_push(m, m->resident_list[i], 0);
	for (int s = 0; s < m->p->nsteps; s++) {
		rc = simulate_step(m, s);
		if (rc == HP_EBUDGET)
			return hp_node_error(g, &g->nodes[m->p->node[s]], HP_EBUDGET, "does not fit in the budget (planner)");
		if (rc != 0)
			return rc;
	}
	release_holds(m, NEVER, NEVER); /* the run's end drains the reductions */
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
		rc = plan_flights(&m);
	if (rc == 0)
		rc = simulate(&m, 0);
	if (rc == 0)
		rc = simulate(&m, 1);
	if (rc != 0)
		goto fail;
	hoist_loads(&m);
	if ((rc = room_from(&m)) < 0)
		goto fail;
	m.p->peak_bytes += o->workspace;
	rc = emit_acts(&m);
	if (rc < 0)
		goto fail;
	time_model(&m);
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
int hp_plan_build(const struct hp_graph *g, const struct hp_plan_opts *o, struct hp_plan **out)
{
	struct hp_plan *best = NULL;
	int rc = plan_with(g, o, VICTIM_FARTHEST, &best), npol = o->victims < VICTIM_NPOL ? o->victims : VICTIM_NPOL;
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
		p->use_start = m.use_start; /* step_need asks which updates are in place */
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

void hp_plan_free(struct hp_plan *p)
{
	if (!p)
		return;
	free(p->node);
	free(p->start_resident);
	free(p->last_use);
	free(p->use_start);
	free(p->uses);
	free(p->act_begin);
	free(p->acts);
	free(p->room_from);
	free(p);
}

int hp_plan_next_use(const struct hp_plan *p, int v, int step)
{
	int lo = p->use_start[v], hi = p->use_start[v + 1];

	while (lo < hi) {
		int mid = (lo + hi) / 2;
		if (p->uses[mid] <= step)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo < p->use_start[v + 1] ? p->uses[lo] : HP_PLAN_NEVER;
}
