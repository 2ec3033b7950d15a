/* The tune log: JSON lines appended by the runner alone (no database, no
 * lock between trials), one per event: a job started ("event": "start",
 * "step" its first step) and a job's result ("event": "result", "step"
 * the step it reached, the objective under its own name, null when not
 * finite).  Every line holds the trial, its configuration and its state.
 * Nothing in it depends on time, so a resumed search writes the lines an
 * uninterrupted one would. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <json-c/json.h>

#include "hpdlf/error.h"
#include "tools/tune_run.h"

int tune_job_copy(struct tune_job *dst, const struct hp_tune_job *src)
{
	memset(dst, 0, sizeof *dst);
	if (src->nflags > TUNE_MAX_FLAGS)
		return hp_error(HP_EUSAGE, "a trial with %d flags (at most %d)", src->nflags, TUNE_MAX_FLAGS);
	dst->trial = src->trial;
	dst->from_step = src->from_step;
	dst->to_step = src->to_step;
	for (int k = 0; k < src->nflags; k++) {
		dst->names[k] = strdup(src->flag_names[k]);
		dst->values[k] = strdup(src->flag_values[k]);
		dst->nflags = k + 1;
		if (!dst->names[k] || !dst->values[k])
			return hp_error(-ENOMEM, "out of memory");
	}
	return 0;
}

void tune_job_clear(struct tune_job *j)
{
	for (int k = 0; k < j->nflags; k++) {
		free(j->names[k]);
		free(j->values[k]);
	}
	memset(j, 0, sizeof *j);
}

/* A value that reads as a number goes out as one. */
static json_object *config_value(const char *v)
{
	char *end;
	double d = strtod(v, &end);

	if (*v && !*end && isfinite(d))
		return strchr(v, '.') || strchr(v, 'e') || strchr(v, 'E') ? json_object_new_double_s(d, v)
									    : json_object_new_int64(strtoll(v, NULL, 10));
	return json_object_new_string(v);
}

static json_object *line_of(const struct tune_job *j, int64_t step, const char *state, const char *event)
{
	json_object *o = json_object_new_object(), *cfg = json_object_new_object();

	json_object_object_add(o, "trial", json_object_new_int(j->trial));
	for (int k = 0; k < j->nflags; k++)
		json_object_object_add(cfg, j->names[k], config_value(j->values[k]));
	json_object_object_add(o, "config", cfg);
	json_object_object_add(o, "step", json_object_new_int64(step));
	json_object_object_add(o, "state", json_object_new_string(state));
	json_object_object_add(o, "event", json_object_new_string(event));
	return o;
}

static int put(FILE *f, json_object *o)
{
	int rc = fprintf(f, "%s\n", json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN)) < 0 || fflush(f) ||
		 fsync(fileno(f));

	json_object_put(o);
	return rc ? hp_error(-EIO, "cannot write the tune log") : 0;
}

int tune_log_start(FILE *f, const struct tune_job *j)
{
	json_object *o = line_of(j, j->from_step, j->from_step > 0 ? "promoted" : "running", "start");

	json_object_object_add(o, "to_step", json_object_new_int64(j->to_step));
	return put(f, o);
}

int tune_log_result(FILE *f, const struct tune_job *j, const char *metric, double v, const char *state)
{
	json_object *o = line_of(j, j->to_step, state, "result");

	json_object_object_add(o, metric, isfinite(v) ? json_object_new_double(v) : NULL);
	return put(f, o);
}

static int64_t get_i64(json_object *o, const char *key, int64_t dflt)
{
	json_object *v;

	return json_object_object_get_ex(o, key, &v) ? json_object_get_int64(v) : dflt;
}

/* 1 when the search's job has the logged configuration, else 0. */
static int same_config(const struct hp_tune_job *job, json_object *o)
{
	struct tune_job j;
	json_object *logged, *mine;
	int rc = tune_job_copy(&j, job), same;

	if (rc < 0)
		return rc;
	mine = line_of(&j, 0, "running", "start");
	same = json_object_object_get_ex(o, "config", &logged) &&
	       json_object_equal(logged, json_object_object_get(mine, "config"));
	json_object_put(mine);
	tune_job_clear(&j);
	return same;
}

/* A start line again through the search: the same trial and steps, or the
 * log is not this search's. */
static int replay_start(struct hp_tune *t, json_object *o, const char *path, int lineno, struct tune_job *running,
			int cap, int *n)
{
	struct hp_tune_job job;
	int rc = hp_tune_next(t, &job);
	int64_t trial = get_i64(o, "trial", -1), from = get_i64(o, "step", -1), to = get_i64(o, "to_step", -1);

	int same = rc == 1 && job.trial == trial && job.from_step == from && job.to_step == to;

	if (rc < 0)
		return rc;
	if (same && (same = same_config(&job, o)) < 0)
		return same;
	if (!same)
		return hp_error(HP_EUSAGE, "%s:%d: the log started trial %lld for steps %lld..%lld, the search now "
				"proposes %s: the SPEC or --parallel differ from the logged run (a new --tune-log starts "
				"afresh)", path, lineno, (long long)trial, (long long)from, (long long)to,
				rc == 1 ? "another job or configuration" : "none");
	if (*n == cap)
		return hp_error(HP_EDATA, "%s:%d: more jobs running than --parallel allows", path, lineno);
	return tune_job_copy(&running[(*n)++], &job);
}

struct replay {
	struct hp_tune *t;
	const char *path, *metric;
	struct tune_job *running;
	int cap, *n;
	tune_done_fn on_done;
	void *arg;
};

static int replay_result(const struct replay *p, json_object *o)
{
	struct tune_job *running = p->running;
	int *n = p->n, rc;
	json_object *m = NULL, *st;
	int trial = (int)get_i64(o, "trial", -1), failed;
	double v;

	json_object_object_get_ex(o, p->metric, &m);
	v = m ? json_object_get_double(m) : NAN;
	failed = json_object_object_get_ex(o, "state", &st) && !strcmp(json_object_get_string(st), "failed");
	if ((rc = hp_tune_report(p->t, trial, get_i64(o, "step", 0), failed ? NAN : v, failed)) < 0)
		return rc;
	for (int i = 0; i < *n; i++)
		if (running[i].trial == trial) {
			if (!failed && p->on_done && (rc = p->on_done(p->arg, &running[i])) < 0)
				return rc;
			tune_job_clear(&running[i]);
			memmove(&running[i], &running[i + 1], (size_t)(*n - i - 1) * sizeof *running);
			(*n)--;
			return 0;
		}
	return hp_error(HP_EDATA, "%s: a result of trial %d, which was not running", p->path, trial);
}

static int replay_line(const struct replay *p, const char *line, int lineno)
{
	json_object *o = json_tokener_parse(line), *ev;
	int rc;

	if (!o || !json_object_object_get_ex(o, "event", &ev)) {
		json_object_put(o);
		return hp_error(HP_EDATA, "%s:%d: not a line of a tune log", p->path, lineno);
	}
	if (!strcmp(json_object_get_string(ev), "start"))
		rc = replay_start(p->t, o, p->path, lineno, p->running, p->cap, p->n);
	else
		rc = replay_result(p, o);
	json_object_put(o);
	return rc;
}

int tune_log_replay(const char *path, struct hp_tune *t, const char *metric, struct tune_job *running, int cap,
		    int *nrunning, tune_done_fn on_done, void *arg)
{
	struct replay p = { t, path, metric, running, cap, nrunning, on_done, arg };
	FILE *f = fopen(path, "r+e");
	char *line = NULL;
	size_t lcap = 0;
	ssize_t len;
	long good = 0;
	int rc = 0, lineno = 0;

	*nrunning = 0;
	if (!f)
		return errno == ENOENT ? 0 : hp_error(-errno, "%s: %s", path, strerror(errno));
	while (rc == 0 && (len = getline(&line, &lcap, f)) > 0) {
		lineno++;
		if (line[len - 1] != '\n')
			break; /* the runner was killed writing it: dropped below */
		rc = replay_line(&p, line, lineno);
		good = ftell(f);
	}
	if (rc == 0 && ftruncate(fileno(f), good) < 0)
		rc = hp_error(-errno, "%s: %s", path, strerror(errno));
	free(line);
	fclose(f);
	return rc;
}
