/* A trainer refused for its budget, known before it is built (see
 * train_floor.h).  The --plan floor search (tools/exec_plan.c) probes one
 * page below the smallest budget named to show that it does not fit;
 * each probe built a whole trainer (load, weight split, autodiff of the
 * unsplit candidate, the recompute search, the budget check): a third of
 * the CPU of --plan of the 10,001-node MLP of test plan-speed, to learn
 * that a Split of the weight blocks' input needs one page more.
 *
 * Every training graph a trainer makes of its forward graph keeps, with
 * their inputs and outputs, the forward nodes the band pass cannot cut at
 * the band count it keeps (split.h hp_split_train_floor: autodiff and the
 * recompute search add nodes and values, and leave those); so the step
 * needs at least their floor.  The trainer's retries build the forward
 * graph again with update_cut (when the first would cut a weight more),
 * and with finer splits (split_finer) only where the need the budget
 * check names lies within a sixteenth above the budget, which a floor
 * above that rules out. */
#include <stdint.h>
#include <string.h>

#include "exec/budget.h"
#include "exec/split.h"
#include "exec/split_weight.h"
#include "exec/train_floor.h"
#include "exec/train_internal.h"

/* The floor of the forward graph of o built with update_cut; *would_cut:
 * a build with update_cut would cut a weight more.  0: not known. */
static uint64_t forward_floor(const char *model, const struct hp_trainer_opts *o, int update_cut, int *would_cut)
{
	struct hp_trainer *t = NULL;
	struct hp_budget_layout l;
	struct hp_ws_log log = { 0 };
	uint64_t floor = update_cut ? 0 : hp_train_floor_known(model, o, would_cut);
	int rc;

	if (floor)
		return floor;
	*would_cut = 0;
	hp_train_floor_builds++;
	rc = hp_train_new(model, o, update_cut, 0, &t);
	if (rc == 0 && (t->nranks > 1 || t->pipe))
		rc = -1; /* not one rank's whole step */
	if (rc == 0)
		rc = hp_train_load(t);
	if (rc == 0 && hp_train_floor_noted(t))
		t->ws_log = &log;
	if (rc == 0)
		rc = hp_train_build_forward(t, &l);
	if (rc == 0) {
		floor = hp_split_train_floor(t->g);
		*would_cut = t->update_would_cut;
		if (t->ws_log)
			hp_train_floor_note(t, &log, floor);
	}
	hp_ws_log_free(&log);
	hp_trainer_destroy(t);
	return floor;
}

uint64_t hp_trainer_floor(const char *model, const struct hp_trainer_opts *o)
{
	struct hp_trainer_opts f;
	uint64_t floor, f1;
	int cut, again;

	hp_trainer_opts_init(&f, sizeof f);
	memcpy(&f, o, o->size < sizeof f ? o->size : sizeof f);
	f.size = sizeof f;
	if (!f.budget || !f.graph_only || f.no_split || f.pipeline > 1)
		return 0;
	floor = forward_floor(model, &f, 0, &cut);
	if (floor && cut) { /* hp_trainer_create's retry with update_cut */
		f1 = forward_floor(model, &f, 1, &again);
		floor = f1 < floor ? f1 : floor;
	}
	return floor;
}

int hp_trainer_sure_refused(const char *model, const struct hp_trainer_opts *o)
{
	struct hp_budget_layout l;
	uint64_t b = o->budget, floor = hp_trainer_floor(model, o);

	hp_budget_layout_init(&l, b);
	/* split_finer's need is the budget check's, process_for of a
	 * smallest budget no smaller than the floor */
	uint64_t need = hp_budget_process_for(floor);

	return floor > l.budget && need > b && need - b > b / 16;
}

uint64_t hp_trainer_refused_needs(const struct hp_trainer *t)
{
	return t && t->remat_refused ? t->remat_needed : 0;
}
