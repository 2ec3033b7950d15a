/* The tiers' footprint a plan predicts (--plan's "tier footprint"): the
 * most bytes the tiers below DRAM hold at once during a run, walked in the
 * plan's order the way the runtime places and frees copies. */
#include <errno.h>
#include <stdlib.h>

#include "hpdlf/error.h"
#include "hpdlf/exec.h"
#include "exec/exec_internal.h"
#include "exec/plan.h"

static uint64_t size_of(const struct hp_graph *g, int v)
{
	struct hp_tensor t = { .dtype = g->values[v].dtype, .shape = g->values[v].shape };

	return (hp_tensor_bytes(&t) + HP_BUDGET_ALIGN - 1) / HP_BUDGET_ALIGN * HP_BUDGET_ALIGN;
}

struct walk {
	const struct hp_graph *g;
	const struct hp_plan *p;
	char *on;               /* per value: has a copy below DRAM now */
	int *last_read;         /* per value: the last step reading it, -1: none */
	uint64_t cur, peak;
};

static void put(struct walk *w, int v, int on)
{
	if (v < 0 || w->on[v] == on)
		return;
	w->on[v] = (char)on;
	if (on) {
		w->cur += size_of(w->g, v);
		w->peak = w->cur > w->peak ? w->cur : w->peak;
	} else {
		w->cur -= size_of(w->g, v);
	}
}

/* Step k: its write-backs place copies; its outputs (pinned to be
 * overwritten) lose theirs; after it, the inputs it read last are dropped
 * (an activation) or discarded (the state's previous version, see
 * runtime.c state_read_done): their copies are freed. */
static void walk_step(struct walk *w, int k)
{
	const struct hp_node *nd = &w->g->nodes[w->p->node[k]];

	for (int a = w->p->act_begin[k]; a < w->p->act_begin[k + 1]; a++)
		if (w->p->acts[a].act == HP_ACT_WRITEBACK)
			put(w, w->p->acts[a].value, 1);
	for (int o = 0; o < nd->noutputs; o++)
		put(w, nd->outputs[o], 0);
	for (int j = 0; j < nd->ninputs; j++) {
		int v = nd->inputs[j];
		if (v >= 0 && (w->p->last_use[v] == k || (hp_plan_state_released(w->g, v) && w->last_read[v] == k)))
			put(w, v, 0);
	}
}

/* The state (weights, optimizer state, inputs) is on the tiers when a run
 * starts, each value once; the values the plan writes back besides it
 * (not the state's next versions, which take its place) are `swapped`,
 * each counted once; the walk gives the peak.  seen: scratch per value. */
static void walk_plan(struct walk *w, char *seen, uint64_t *state, uint64_t *swapped)
{
	const struct hp_graph *g = w->g;
	const struct hp_plan *p = w->p;

	for (int v = 0; v < g->nvalues; v++) {
		w->last_read[v] = -1;
		for (int u = p->use_start[v]; u < p->use_start[v + 1]; u++)
			if (p->uses[u] < p->nsteps && p->uses[u] > w->last_read[v])
				w->last_read[v] = p->uses[u];
		if ((g->values[v].kind == HP_VALUE_INITIALIZER || g->values[v].kind == HP_VALUE_INPUT) &&
		    p->last_use[v] >= 0)
			put(w, v, 1);
		seen[v] = w->on[v];
	}
	*state = w->cur;
	for (int v = 0; v < g->nvalues; v++)
		if (g->values[v].next >= 0)
			seen[g->values[v].next] = 1;
	for (int a = 0; a < p->nacts; a++) {
		int v = p->acts[a].value;
		if (p->acts[a].act == HP_ACT_WRITEBACK && !seen[v]) {
			seen[v] = 1;
			*swapped += size_of(g, v);
		}
	}
	for (int k = 0; k < p->nsteps; k++)
		walk_step(w, k);
}

int hp_plan_footprint_of(const struct hp_graph *g, const struct hp_plan *p, uint64_t *state, uint64_t *swapped,
			 uint64_t *peak)
{
	struct walk w = { .g = g, .p = p };
	char *seen = calloc((size_t)g->nvalues + 1, 1);
	int rc = 0;

	*state = *swapped = *peak = 0;
	w.on = calloc((size_t)g->nvalues + 1, 1);
	w.last_read = calloc((size_t)g->nvalues + 1, sizeof *w.last_read);
	if (seen && w.on && w.last_read) {
		walk_plan(&w, seen, state, swapped);
		*peak = w.peak;
	} else {
		rc = hp_error(-ENOMEM, "out of memory planning");
	}
	free(seen);
	free(w.on);
	free(w.last_read);
	return rc;
}

