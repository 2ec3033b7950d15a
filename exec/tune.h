/* Hyperparameter search (issue 15): a SPEC, a scheduler that says which
 * trial to run next and to which budget, and the results fed back.  No
 * processes and no training here; hpdlf-exec's --tune runs the jobs.
 *
 *   struct hp_tune_spec *s;  struct hp_tune *t;  struct hp_tune_job j;
 *   if (hp_tune_spec_parse(text, &s) < 0)            // "space.lr.log_uniform[1]: ..."
 *           fprintf(stderr, "%s\n", hp_errmsg());
 *   hp_tune_create(s, &t);
 *   for (;;) {
 *           int rc = hp_tune_next(t, &j);              // 1 job, 0 wait, 2 finished
 *           if (rc == 2) break;
 *           if (rc == 1) start(j);                      // --lr=j.flag_values[0] ...
 *           else wait_one(&trial, &step, &metric, &failed),
 *                hp_tune_report(t, trial, step, metric, failed);
 *   }
 *   hp_tune_best(t, &trial, &metric);
 *
 * Algorithms: "asha" (default) samples configurations at random and stops
 * them early by asynchronous successive halving (Li et al. 2018): rungs at
 * grace_period*eta^k steps up to budget.max, a trial promoted to the next
 * rung as soon as it is in the top 1/eta of the trials that reached its
 * rung, never waiting for the others.  "bo" schedules the same way but a
 * Gaussian process proposes each new configuration (expected improvement;
 * the Cholesky factor grows by one row per result, Ram et al. 2019).
 * "random" and "grid" run every trial to budget.max (the baselines).
 *
 * Determinism: the state is a function of the seed and of the sequence of
 * hp_tune_next/hp_tune_report calls.  Resuming from a log, call them again
 * in the logged order (hp_tune_replay_job for every job-start line, which
 * is a next() checked against the log, a report() for every result line):
 * the search is then in the state it was in, and the jobs started but not
 * reported are the ones to restart.  With K trials at once the order of
 * reports depends on timing; a runner that wants the same search for the
 * same seed and K feeds reports in a fixed order (e.g. the order of jobs).
 *
 * Trial states: "running" (first job outstanding), "promoted" (a job to a
 * higher rung outstanding), "stopped" (reached a rung below the top and not
 * promoted; a later promotion may resume it, at the end it is final),
 * "done" (reached budget.max), "failed" (reported failed or a NaN metric).
 */
#ifndef HPDLF_EXEC_TUNE_H
#define HPDLF_EXEC_TUNE_H

#include <stdint.h>

struct hp_tune;      /* opaque search state */
struct hp_tune_spec; /* parsed SPEC */

/* Parse a SPEC (JSON text).  0, or HP_EUSAGE with a message naming the
 * field by its path ("space.lr.log_uniform[1]: ...", "budget.max: ..."). */
int hp_tune_spec_parse(const char *json_text, struct hp_tune_spec **out);
void hp_tune_spec_free(struct hp_tune_spec *s);

/* What a runner needs to know of a SPEC (pointers into s). */
struct hp_tune_spec_info {
	const char *metric;    /* objective.metric, e.g. "val_loss" */
	int maximize;          /* objective.mode == "max" */
	const char *unit;      /* budget.unit: "steps" or "epochs" */
	int64_t min, max;      /* budget.min, budget.max */
	int64_t grace_period;  /* first rung (budget.min unless given) */
	int trials;            /* trials to start (for grid: the grid's size) */
	const char *algorithm; /* "asha", "bo", "random" or "grid" */
	int reduction_factor;  /* eta */
	uint64_t seed;
	int parallel;          /* "parallel" (default 1); --parallel overrides */
	int nparams;           /* flags searched over */
};
void hp_tune_spec_info(const struct hp_tune_spec *s, struct hp_tune_spec_info *info);
/* Name of searched flag i (0 <= i < nparams), without "--"; NULL outside. */
const char *hp_tune_spec_param(const struct hp_tune_spec *s, int i);

/* The search state for s (s must outlive it). */
int hp_tune_create(const struct hp_tune_spec *s, struct hp_tune **out);
void hp_tune_free(struct hp_tune *t);

/* A job: run trial from from_step to to_step (budget units, cumulative:
 * from_step is where its last job ended, 0 for a new trial) with these
 * flags.  Names and values stay valid until hp_tune_free.  Doubles are
 * printed "%.17g", integers as integers, choices as given in SPEC. */
struct hp_tune_job {
	int trial;
	int64_t from_step, to_step;
	int nflags;
	const char *const *flag_names;
	const char *const *flag_values;
};
/* 1 and *job: start it.  0: nothing can start until a report comes.
 * 2: the search is finished. */
int hp_tune_next(struct hp_tune *t, struct hp_tune_job *job);
/* Result of trial's outstanding job: the objective at step (its to_step),
 * or failed (then step may be where it failed; a NaN metric fails too).
 * HP_EUSAGE for a trial without an outstanding job or another step. */
int hp_tune_report(struct hp_tune *t, int trial, int64_t step, double metric, int failed);
/* Replaying a log: a job-start line (trial, to_step) is hp_tune_next,
 * checked to give that job.  0 and *job, or HP_EUSAGE with a message when
 * the search would run another job (the log is of another SPEC or seed;
 * t is then of no further use). */
int hp_tune_replay_job(struct hp_tune *t, int trial, int64_t to_step, struct hp_tune_job *job);
/* State of a trial (see above); NULL for a trial not started. */
const char *hp_tune_state(const struct hp_tune *t, int trial);
/* The best trial at the highest budget any trial reached (ties: lowest
 * id).  0, or -ENOENT (with a message) while no trial has a result. */
int hp_tune_best(const struct hp_tune *t, int *trial, double *metric);

/* Trials started so far (ids are 0 .. n-1). */
int hp_tune_ntrials(const struct hp_tune *t);
/* Trial's flags (as in its jobs).  0 or HP_EUSAGE. */
int hp_tune_config(const struct hp_tune *t, int trial, int *nflags, const char *const **names,
		   const char *const **values);
/* Trial's last result: the step it reached and the metric there
 * (NaN and step 0 before its first result).  0 or HP_EUSAGE. */
int hp_tune_result(const struct hp_tune *t, int trial, int64_t *step, double *metric);

/* The rungs (for a live table): their count, and *steps the budget at
 * each (ascending, the last is budget.max; random and grid have one). */
int hp_tune_rungs(const struct hp_tune *t, const int64_t **steps);
/* Results recorded at rung k so far (0 outside). */
int hp_tune_rung_results(const struct hp_tune *t, int k);

#endif
