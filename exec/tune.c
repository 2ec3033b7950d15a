/* The search state of tune.h: trials, their rungs, and the next job. */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "hpdlf/error.h"
#include "exec/tune_internal.h"

int hp_tune_create(const struct hp_tune_spec *s, struct hp_tune **out)
{
	struct hp_tune *t = calloc(1, sizeof *t);
	int rc = -ENOMEM;

	*out = NULL;
	if (!t)
		return -ENOMEM;
	t->s = s;
	if ((t->nrungs = hp_asha_rungs(s, &t->rungs)) < 0)
		goto fail;
	t->rung = calloc((size_t)t->nrungs, sizeof *t->rung);
	t->names = calloc((size_t)s->nparams, sizeof *t->names);
	if (!t->rung || !t->names)
		goto fail;
	for (int i = 0; i < s->nparams; i++)
		t->names[i] = s->params[i].name;
	if (s->algo == HP_TUNE_BO && (rc = hp_bo_create(s, &t->bo)) < 0)
		goto fail;
	*out = t;
	return 0;
fail:
	hp_tune_free(t);
	return rc;
}

void hp_tune_free(struct hp_tune *t)
{
	if (!t)
		return;
	for (int i = 0; i < t->n; i++) {
		for (int j = 0; t->tr[i].values && j < t->s->nparams; j++)
			free(t->tr[i].values[j]);
		free(t->tr[i].values);
		free(t->tr[i].u);
	}
	for (int k = 0; t->rung && k < t->nrungs; k++) {
		free(t->rung[k].trial);
		free(t->rung[k].key);
	}
	hp_bo_free(t->bo);
	free(t->tr);
	free(t->rung);
	free(t->rungs);
	free(t->names);
	free(t);
}

/* BO's proposal for trial id, told of the trials still without a result. */
static int propose(struct hp_tune *t, int id, double *u)
{
	const double **pending = malloc((size_t)(id ? id : 1) * sizeof *pending);
	int n = 0, rc;

	if (!pending)
		return -ENOMEM;
	for (int i = 0; i < id; i++)
		if (t->tr[i].state == HP_TRIAL_RUNNING)
			pending[n++] = t->tr[i].u;
	rc = hp_bo_propose(t->bo, id, n, pending, u);
	free(pending);
	return rc;
}

/* Configuration of the next new trial into u. */
static int configure(struct hp_tune *t, int id, double *u)
{
	struct hp_rng r = hp_rng_for(t->s->seed, (uint64_t)id, 0);
	int64_t pick;

	if (t->s->algo == HP_TUNE_GRID)
		hp_tune_grid_point(t->s, id, u);
	else if (t->bo)
		return propose(t, id, u);
	else if ((pick = hp_tune_finite_pick(t->s, t->s->seed, id)) >= 0)
		hp_tune_grid_point(t->s, pick, u);
	else
		hp_tune_sample(t->s, &r, u);
	return 0;
}

static int new_trial(struct hp_tune *t)
{
	struct hp_tune_trial *tr;
	int p = t->s->nparams, rc;

	if (t->n == t->cap) {
		int c = t->cap ? 2 * t->cap : 16;
		if (!(tr = realloc(t->tr, (size_t)c * sizeof *tr)))
			return -ENOMEM;
		t->tr = tr, t->cap = c;
	}
	tr = &t->tr[t->n];
	memset(tr, 0, sizeof *tr);
	tr->u = calloc((size_t)p ? (size_t)p : 1, sizeof *tr->u);
	tr->values = calloc((size_t)p ? (size_t)p : 1, sizeof *tr->values);
	if (!tr->u || !tr->values) {
		free(tr->u);
		free(tr->values);
		return -ENOMEM;
	}
	tr->reached = -1, tr->metric = NAN;
	t->n++;
	if ((rc = configure(t, t->n - 1, tr->u)) < 0 || (rc = hp_tune_format(t->s, tr->u, tr->values)) < 0)
		return rc;
	return t->n - 1;
}

static void fill_job(const struct hp_tune *t, int id, struct hp_tune_job *job)
{
	const struct hp_tune_trial *tr = &t->tr[id];

	*job = (struct hp_tune_job){
		.trial = id,
		.from_step = tr->reached < 0 ? 0 : t->rungs[tr->reached],
		.to_step = t->rungs[tr->job],
		.nflags = t->s->nparams,
		.flag_names = t->names,
		.flag_values = (const char *const *)tr->values,
	};
}

int hp_tune_next(struct hp_tune *t, struct hp_tune_job *job)
{
	int id = hp_asha_pick(t);

	if (id >= 0) {
		t->tr[id].job = t->tr[id].reached + 1;
		t->tr[id].state = HP_TRIAL_PROMOTED;
	} else if (t->n < t->s->trials) {
		if ((id = new_trial(t)) < 0)
			return id;
		t->tr[id].job = 0;
		t->tr[id].state = HP_TRIAL_RUNNING;
	} else {
		return t->active ? 0 : 2;
	}
	t->active++;
	fill_job(t, id, job);
	return 1;
}

int hp_tune_replay_job(struct hp_tune *t, int trial, int64_t to_step, struct hp_tune_job *job)
{
	int rc = hp_tune_next(t, job);

	if (rc < 0)
		return rc;
	if (rc != 1)
		return hp_error(HP_EUSAGE, "tune log: trial %d to %" PRId64 " was started, the search has no job to "
				"start now (another SPEC or seed?)", trial, to_step);
	if (job->trial != trial || job->to_step != to_step)
		return hp_error(HP_EUSAGE, "tune log: trial %d to %" PRId64 " was started, the search would start "
				"trial %d to %" PRId64 " (another SPEC or seed?)", trial, to_step, job->trial,
				job->to_step);
	return 0;
}

static int check_trial(const struct hp_tune *t, int trial)
{
	if (trial < 0 || trial >= t->n)
		return hp_error(HP_EUSAGE, "tune: no trial %d (%d started)", trial, t->n);
	return 0;
}

int hp_tune_report(struct hp_tune *t, int trial, int64_t step, double metric, int failed)
{
	struct hp_tune_trial *tr;
	int rc;

	if ((rc = check_trial(t, trial)) < 0)
		return rc;
	tr = &t->tr[trial];
	if (tr->job < 0)
		return hp_error(HP_EUSAGE, "tune: trial %d has no job running", trial);
	if (!failed && step != t->rungs[tr->job])
		return hp_error(HP_EUSAGE, "tune: trial %d reported step %" PRId64 ", its job ends at %" PRId64,
				trial, step, t->rungs[tr->job]);
	t->active--;
	tr->step = step, tr->metric = metric;
	if (failed || !isfinite(metric)) {
		tr->state = HP_TRIAL_FAILED, tr->job = -1;
		return 0;
	}
	tr->reached = tr->job, tr->job = -1;
	tr->state = tr->reached == t->nrungs - 1 ? HP_TRIAL_DONE : HP_TRIAL_STOPPED;
	if ((rc = hp_asha_record(&t->rung[tr->reached], trial, t->s->maximize ? -metric : metric)) < 0)
		return rc;
	return t->bo ? hp_bo_observe(t->bo, tr->u, step, metric) : 0;
}

const char *hp_tune_state(const struct hp_tune *t, int trial)
{
	static const char *const names[] = { "running", "promoted", "stopped", "done", "failed" };

	return trial >= 0 && trial < t->n ? names[t->tr[trial].state] : NULL;
}

int hp_tune_best(const struct hp_tune *t, int *trial, double *metric)
{
	for (int k = t->nrungs - 1; k >= 0; k--) {
		const struct hp_tune_rung *r = &t->rung[k];
		if (r->n) {
			*trial = r->trial[0];
			*metric = t->s->maximize ? -r->key[0] : r->key[0];
			return 0;
		}
	}
	return hp_error(-ENOENT, "tune: no trial has a result yet");
}

int hp_tune_ntrials(const struct hp_tune *t)
{
	return t->n;
}

int hp_tune_config(const struct hp_tune *t, int trial, int *nflags, const char *const **names,
		   const char *const **values)
{
	int rc = check_trial(t, trial);

	if (rc < 0)
		return rc;
	*nflags = t->s->nparams;
	*names = t->names;
	*values = (const char *const *)t->tr[trial].values;
	return 0;
}

int hp_tune_result(const struct hp_tune *t, int trial, int64_t *step, double *metric)
{
	int rc = check_trial(t, trial);

	if (rc < 0)
		return rc;
	*step = t->tr[trial].step;
	*metric = t->tr[trial].metric;
	return 0;
}

int hp_tune_rungs(const struct hp_tune *t, const int64_t **steps)
{
	*steps = t->rungs;
	return t->nrungs;
}

int hp_tune_rung_results(const struct hp_tune *t, int k)
{
	return k >= 0 && k < t->nrungs ? t->rung[k].n : 0;
}
