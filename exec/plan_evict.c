/* The planner's victims: the records of its actions, which values are
 * resident, the eviction candidates and the policies that choose among
 * them, and the holds of reductions in flight.  See plan_sim.h. */
#include <errno.h>
#include <stdlib.h>

#include "hpdlf/error.h"
#include "exec/plan.h"
#include "exec/plan_heap.h"
#include "exec/plan_sim.h"

int hp_sim_push(struct sim *m, int step, int order, int value, enum hp_plan_act act, int for_step)
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
void hp_sim_set_resident(struct sim *m, int v, int on)
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
/* The earliest hold to end (when nothing else can make room: the step
 * will wait for that reduction). */
static int first_hold(const struct sim *m)
{
	int e = NEVER;

	for (int i = 0; i < m->nheld; i++)
		e = m->hold[m->held[i]] < e ? m->hold[m->held[i]] : e;
	return e;
}
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
/* v's class of candidates: clean 0, dirty 1, and 2 more for small values
 * under VICTIM_SMALL_LAST (clean 2, dirty 3). */
static int cand_class(const struct sim *m, int v)
{
	return (m->dirty[v] != 0) + 2 * (m->policy == VICTIM_SMALL_LAST && m->size[v] <= HP_PLAN_SMALL);
}
/* v among the candidates if it may be evicted now (step): pushed again
 * wherever it may have become so, or its next use or dirt changed (the
 * end of a step that read or wrote it, a preload, a hold's end, a run's
 * start). */
void hp_sim_cand_push(struct sim *m, int v, int step)
{
	if (mg(m, v) && evictable(m, v) && hp_vheap_push(&m->cand[cand_class(m, v)], nu_at(m, v, step), v) < 0)
		m->cand_oom = 1;
}
/* The first candidate of class c (its next use in *nu), stale entries
 * dropped; -1 if none. */
static int cand_top(struct sim *m, int c, int step, int *nu)
{
	struct hp_vheap *h = &m->cand[c];

	while (h->n) {
		struct hp_vent e = h->e[0];
		if (evictable(m, e.v) && cand_class(m, e.v) == c && nu_at(m, e.v, step) == e.nu) {
			*nu = e.nu;
			return e.v;
		}
		hp_vheap_pop(h);
		hp_sim_cand_push(m, e.v, step); /* evictable under a newer figure: never lost */
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
 * each eviction was most of planning the 10,001-node MLP at 200M.
 * pick_in chooses among the classes base (clean) and base + 1 (dirty). */
static int pick_in(struct sim *m, int pol, int base, int step, int after, int *far)
{
	int v[2], nu[2] = { -1, -1 }, c;

	*far = -1;
	for (c = 0; c < 2; c++)
		if ((v[c] = cand_top(m, base + c, step, &nu[c])) >= 0 && nu[c] <= after)
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
/* VICTIM_SMALL_LAST: a small value goes first only when it is dead (no
 * write, no read back), else after every large one.  Each eviction of a
 * value read again costs a request each way, whatever its size: LeNet at
 * a quarter of its peak wrote back and reloaded its biases, bias
 * gradients and first-layer weights (40 B to 5 KiB) a few times a step:
 * 29 loads and 22 write-backs a step, against 17 and 18 with this policy,
 * for 20 KiB more written (--plan). */
static int pick_small_last(struct sim *m, int step, int after, int *far)
{
	int fs, small = pick_in(m, VICTIM_FARTHEST, 2, step, after, &fs);
	int large;

	if (small >= 0 && fs >= NEVER)
		return *far = fs, small;
	large = pick_in(m, VICTIM_FARTHEST, 0, step, after, far);
	if (large >= 0 || after > step)
		return large; /* a preload (after > step) waits rather than evict one */
	*far = fs;
	return small;
}
int hp_sim_pick_victim(struct sim *m, int pol, int step, int after, int *far)
{
	if (pol == VICTIM_SMALL_LAST)
		return pick_small_last(m, step, after, far);
	return pick_in(m, pol, 0, step, after, far);
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
	m->recs[r].a.act = 0; /* dead: hp_sim_hoist_loads and hp_sim_emit_acts skip it */
	m->p->bytes_loaded -= m->size[v];
	m->p->loads--;
	for (int k = m->recs[r].step; k < step; k++)
		m->step_peak[k] -= m->size[v];
	m->pre[v] = -1;
	hp_sim_set_resident(m, v, 0);
	return 1;
}
/* Step `step` drops `victim` (farthest next use `far`): written back when
 * dirty and read again later, else evicted, or its unused preload undone. */
int hp_sim_drop(struct sim *m, int victim, int far, int step)
{
	if (cancel_preload(m, victim, step))
		return 0;
	if (m->dirty[victim] && far < NEVER) {
		if (hp_sim_push(m, step, 0, victim, HP_ACT_WRITEBACK, -1) < 0)
			return -ENOMEM;
		m->p->bytes_written += m->size[victim];
		m->below[victim] = 1;
		m->dirty[victim] = 0;
	} else if (hp_sim_push(m, step, 0, victim, HP_ACT_EVICT, -1) < 0) {
		return -ENOMEM;
	}
	hp_sim_set_resident(m, victim, 0);
	return 0;
}
int hp_sim_make_room(struct sim *m, uint64_t bytes, int step)
{
	while (m->cur + bytes > m->budget) {
		int far, victim = hp_sim_pick_victim(m, m->policy, step, step, &far);
		if (victim < 0 && m->nheld) {
			hp_sim_release_holds(m, first_hold(m), step);
			continue;
		}
		if (victim < 0)
			return HP_EBUDGET;
		if (hp_sim_drop(m, victim, far, step) < 0)
			return -ENOMEM;
	}
	return 0;
}
/* Reduction step n's inputs and outputs stay resident and are never
 * evicted until step `until`. */
void hp_sim_hold_step(struct sim *m, const struct hp_node *n, int until)
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
void hp_sim_release_holds(struct sim *m, int upto, int now)
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
			hp_sim_set_resident(m, v, 0);
		else if (now < NEVER)
			hp_sim_cand_push(m, v, now);
	}
	m->nheld = k;
}
