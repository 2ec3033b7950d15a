/* STAND-IN of the search API (tools/tune_run.h), for the runner's branch
 * alone: the lead deletes this file at the merge, when exec/tune_*.c (SPEC
 * parsing, ASHA, Bayesian optimisation) take its place.  Random search,
 * every trial trained to budget.max, no early stopping; in two jobs when
 * budget.min < max (0 -> min, then min -> max, continued from its
 * checkpoint as a promotion is), so that the runner's continuation path
 * runs before the real search arrives.  Deterministic: the configurations
 * come from the seed alone, the jobs from the order of the reports. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

#include "hpdlf/error.h"
#include "tools/tune_run.h"

enum { DIST_LOG_UNIFORM, DIST_UNIFORM, DIST_CHOICE };

struct dim {
	char *name;
	int kind;
	double lo, hi;
	char **choices;
	int nchoices;
};

struct hp_tune_spec {
	struct dim dims[TUNE_MAX_FLAGS];
	int ndims, trials, maximize;
	int64_t min_steps, max_steps;
	uint64_t seed;
};

struct trial {
	char *values[TUNE_MAX_FLAGS];
	int64_t at;            /* the step its last job reaches */
	int running, reported, failed, continued;
	double metric;
};

struct hp_tune {
	const struct hp_tune_spec *s;
	struct trial *tr;
	int issued;
	uint64_t rng;
	const char *names[TUNE_MAX_FLAGS];
};

static int bad(const char *field, const char *why)
{
	return hp_error(HP_EUSAGE, "SPEC: %s: %s", field, why);
}

static int parse_dim(struct dim *d, const char *name, json_object *o)
{
	json_object *v;
	char field[256];

	snprintf(field, sizeof field, "space.%s", name);
	if (!(d->name = strdup(name)))
		return hp_error(-ENOMEM, "out of memory");
	if (json_object_object_get_ex(o, "choice", &v) && json_object_is_type(v, json_type_array)) {
		d->kind = DIST_CHOICE;
		d->nchoices = (int)json_object_array_length(v);
		if (d->nchoices < 1 || !(d->choices = calloc((size_t)d->nchoices, sizeof *d->choices)))
			return bad(field, "choice needs at least one value");
		for (int i = 0; i < d->nchoices; i++)
			d->choices[i] = strdup(json_object_get_string(json_object_array_get_idx(v, (size_t)i)));
		return 0;
	}
	d->kind = json_object_object_get_ex(o, "log_uniform", &v) ? DIST_LOG_UNIFORM
		  : json_object_object_get_ex(o, "uniform", &v)   ? DIST_UNIFORM
								    : -1;
	if (d->kind < 0 || !json_object_is_type(v, json_type_array) || json_object_array_length(v) != 2)
		return bad(field, "expected {\"log_uniform\": [lo, hi]}, {\"uniform\": [lo, hi]} or {\"choice\": [...]}");
	d->lo = json_object_get_double(json_object_array_get_idx(v, 0));
	d->hi = json_object_get_double(json_object_array_get_idx(v, 1));
	if (!(d->lo <= d->hi) || (d->kind == DIST_LOG_UNIFORM && !(d->lo > 0)))
		return bad(field, "needs lo <= hi (and lo > 0 for log_uniform)");
	return 0;
}

static int parse_space(struct hp_tune_spec *s, json_object *root)
{
	json_object *space;
	int rc;

	if (!json_object_object_get_ex(root, "space", &space) || !json_object_is_type(space, json_type_object) ||
	    !json_object_object_length(space))
		return bad("space", "missing or empty (an object of flag name -> distribution)");
	json_object_object_foreach(space, key, val) {
		if (s->ndims == TUNE_MAX_FLAGS)
			return bad("space", "too many flags");
		if (!json_object_is_type(val, json_type_object))
			return bad("space", "each flag needs a distribution object");
		if ((rc = parse_dim(&s->dims[s->ndims++], key, val)) < 0)
			return rc;
	}
	return 0;
}

static int parse_rest(struct hp_tune_spec *s, json_object *root)
{
	json_object *b, *v, *o;

	if (!json_object_object_get_ex(root, "budget", &b) || !json_object_is_type(b, json_type_object))
		return bad("budget", "missing (e.g. {\"unit\": \"steps\", \"min\": 10, \"max\": 270})");
	if (json_object_object_get_ex(b, "unit", &v) && strcmp(json_object_get_string(v), "steps"))
		return bad("budget.unit", "only \"steps\" is known");
	if (!json_object_object_get_ex(b, "max", &v) || (s->max_steps = json_object_get_int64(v)) < 1)
		return bad("budget.max", "missing or below 1");
	s->min_steps = json_object_object_get_ex(b, "min", &v) ? json_object_get_int64(v) : s->max_steps;
	if (s->min_steps < 1 || s->min_steps > s->max_steps)
		return bad("budget.min", "below 1 or above budget.max");
	if (!json_object_object_get_ex(root, "trials", &v) || (s->trials = json_object_get_int(v)) < 1)
		return bad("trials", "missing or below 1");
	if (json_object_object_get_ex(root, "objective", &o) && json_object_object_get_ex(o, "mode", &v)) {
		if (strcmp(json_object_get_string(v), "min") && strcmp(json_object_get_string(v), "max"))
			return bad("objective.mode", "expected \"min\" or \"max\"");
		s->maximize = !strcmp(json_object_get_string(v), "max");
	}
	s->seed = json_object_object_get_ex(root, "seed", &v) ? (uint64_t)json_object_get_int64(v) : 1;
	return 0;
}

int hp_tune_spec_parse(const char *json_text, struct hp_tune_spec **out)
{
	json_object *root = json_tokener_parse(json_text);
	struct hp_tune_spec *s;
	int rc;

	*out = NULL;
	if (!root || !json_object_is_type(root, json_type_object)) {
		json_object_put(root);
		return bad("(document)", "not a JSON object");
	}
	if (!(s = calloc(1, sizeof *s))) {
		json_object_put(root);
		return hp_error(-ENOMEM, "out of memory");
	}
	rc = parse_space(s, root);
	if (rc == 0)
		rc = parse_rest(s, root);
	json_object_put(root);
	if (rc < 0) {
		hp_tune_spec_free(s);
		return rc;
	}
	*out = s;
	return 0;
}

void hp_tune_spec_free(struct hp_tune_spec *s)
{
	if (!s)
		return;
	for (int i = 0; i < s->ndims; i++) {
		for (int k = 0; k < s->dims[i].nchoices; k++)
			free(s->dims[i].choices[k]);
		free(s->dims[i].choices);
		free(s->dims[i].name);
	}
	free(s);
}

int hp_tune_create(const struct hp_tune_spec *s, struct hp_tune **out)
{
	struct hp_tune *t = calloc(1, sizeof *t);

	if (!t || !(t->tr = calloc((size_t)s->trials, sizeof *t->tr))) {
		free(t);
		return hp_error(-ENOMEM, "out of memory");
	}
	t->s = s;
	t->rng = s->seed * 0x9E3779B97F4A7C15ull + 1;
	for (int i = 0; i < s->ndims; i++)
		t->names[i] = s->dims[i].name;
	*out = t;
	return 0;
}

void hp_tune_free(struct hp_tune *t)
{
	if (!t)
		return;
	for (int i = 0; i < t->s->trials; i++)
		for (int k = 0; k < t->s->ndims; k++)
			free(t->tr[i].values[k]);
	free(t->tr);
	free(t);
}

static double uniform01(uint64_t *x)
{
	uint64_t z = (*x += 0x9E3779B97F4A7C15ull);

	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
	z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
	return (double)((z ^ (z >> 31)) >> 11) / 9007199254740992.0;
}

static char *draw(const struct dim *d, uint64_t *rng)
{
	double u = uniform01(rng);
	char buf[64];

	if (d->kind == DIST_CHOICE)
		return strdup(d->choices[(int)(u * d->nchoices) % d->nchoices]);
	snprintf(buf, sizeof buf, "%.4g",
		 d->kind == DIST_UNIFORM ? d->lo + u * (d->hi - d->lo) : exp(log(d->lo) + u * (log(d->hi) - log(d->lo))));
	return strdup(buf);
}

static void fill_job(struct hp_tune *t, int i, int64_t from, struct hp_tune_job *job)
{
	struct trial *tr = &t->tr[i];

	tr->at = from == 0 ? t->s->min_steps : t->s->max_steps;
	tr->running = 1;
	job->trial = i;
	job->from_step = from;
	job->to_step = tr->at;
	job->nflags = t->s->ndims;
	job->flag_names = t->names;
	job->flag_values = (const char *const *)tr->values;
}

int hp_tune_next(struct hp_tune *t, struct hp_tune_job *job)
{
	int busy = 0;

	for (int i = 0; i < t->issued; i++) { /* a trial done with its first job goes on */
		struct trial *tr = &t->tr[i];
		busy |= tr->running;
		if (!tr->running && !tr->failed && tr->at < t->s->max_steps) {
			tr->continued = 1;
			fill_job(t, i, tr->at, job);
			return 1;
		}
	}
	if (t->issued == t->s->trials)
		return busy ? 0 : 2;
	struct trial *tr = &t->tr[t->issued];
	for (int k = 0; k < t->s->ndims; k++)
		if (!(tr->values[k] = draw(&t->s->dims[k], &t->rng)))
			return hp_error(-ENOMEM, "out of memory");
	fill_job(t, t->issued++, 0, job);
	return 1;
}

int hp_tune_report(struct hp_tune *t, int trial, int64_t step, double metric, int failed)
{
	if (trial < 0 || trial >= t->issued || !t->tr[trial].running)
		return hp_error(HP_EUSAGE, "report of trial %d, which is not running", trial);
	(void)step;
	t->tr[trial].running = 0;
	t->tr[trial].reported = 1;
	t->tr[trial].failed = failed || !isfinite(metric);
	t->tr[trial].metric = metric;
	return 0;
}

const char *hp_tune_state(const struct hp_tune *t, int trial)
{
	const struct trial *tr = trial >= 0 && trial < t->issued ? &t->tr[trial] : NULL;

	if (!tr)
		return "stopped";
	if (tr->failed)
		return "failed";
	if (tr->running)
		return tr->continued ? "promoted" : "running";
	return tr->at < t->s->max_steps ? "promoted" : "done"; /* it will go on */
}

int hp_tune_best(const struct hp_tune *t, int *trial, double *metric)
{
	int best = -1;

	for (int i = 0; i < t->issued; i++) {
		const struct trial *r = &t->tr[i];
		if (!r->reported || r->running || r->failed || r->at < t->s->max_steps)
			continue;
		if (best < 0 || (t->s->maximize ? r->metric > t->tr[best].metric : r->metric < t->tr[best].metric))
			best = i;
	}
	if (best < 0)
		return hp_error(HP_EDATA, "no trial finished");
	*trial = best;
	*metric = t->tr[best].metric;
	return 0;
}
