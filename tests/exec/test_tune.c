/* The search of exec/tune.h without training: bad SPECs named by their
 * field, ASHA against the full grid of the configurations it tried on a
 * learning curve made here, failed trials, the grid, flag values that parse
 * back exactly, the same seed giving the same search, and a replayed log
 * giving the same state. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hpdlf/error.h"
#include "exec/tune.h"

/* --- bad SPECs ------------------------------------------------------- */

#define GOOD_SPACE "\"space\": {\"lr\": {\"log_uniform\": [1e-4, 1.0]}}"
#define GOOD_REST "\"objective\": {\"metric\": \"val_loss\"}, \"budget\": {\"min\": 10, \"max\": 270}, \"trials\": 9"

static void expect_bad(const char *spec, const char *field)
{
	struct hp_tune_spec *s = (struct hp_tune_spec *)1;
	int rc = hp_tune_spec_parse(spec, &s);

	if (rc != HP_EUSAGE || !strstr(hp_errmsg(), field))
		fail_msg("spec %s: rc %d, message '%s', expected it to name '%s'", spec, rc, hp_errmsg(), field);
	assert_null(s);
	assert_null(strchr(hp_errmsg(), '\n'));
	if (getenv("TUNE_SHOW"))
		print_message("%s\n", hp_errmsg());
}

static void test_spec_errors(void **state)
{
	(void)state;
	expect_bad("{\"space\": {\"lr\": {\"log_uniform\": [1e-4, 1e-5]}}, " GOOD_REST "}",
		   "space.lr.log_uniform[1]:");
	expect_bad("{\"space\": {\"lr\": {\"log_uniform\": [0, 1]}}, " GOOD_REST "}", "space.lr.log_uniform[0]:");
	expect_bad("{\"space\": {\"lr\": {\"log_uniform\": [1e-4, \"x\"]}}, " GOOD_REST "}",
		   "space.lr.log_uniform[1]: expected a number");
	expect_bad("{\"space\": {\"lr\": {\"log_uniform\": [1e-4]}}, " GOOD_REST "}", "space.lr.log_uniform:");
	expect_bad("{\"space\": {\"lr\": {\"normal\": [0, 1]}}, " GOOD_REST "}", "space.lr.normal: unknown");
	expect_bad("{\"space\": {\"batch\": {\"int_uniform\": [8, 16.5]}}, " GOOD_REST "}",
		   "space.batch.int_uniform[1]: expected an integer");
	expect_bad("{\"space\": {\"opt\": {\"choice\": [\"sgd\", true]}}, " GOOD_REST "}", "space.opt.choice[1]:");
	expect_bad("{\"space\": {\"opt\": {\"choice\": [\"sgd\", \"sgd\"]}}, " GOOD_REST "}", "space.opt.choice[1]:");
	expect_bad("{\"space\": {\"opt\": {\"choice\": []}}, " GOOD_REST "}", "space.opt.choice:");
	expect_bad("{\"space\": {\"--lr\": {\"uniform\": [0, 1]}}, " GOOD_REST "}", "space.--lr:");
	expect_bad("{\"space\": {}, " GOOD_REST "}", "space:");
	expect_bad("{" GOOD_SPACE ", \"objective\": {\"metric\": \"val_loss\", \"mode\": \"best\"}, "
		   "\"budget\": {\"min\": 10, \"max\": 270}, \"trials\": 9}", "objective.mode:");
	expect_bad("{" GOOD_SPACE ", \"objective\": {}, \"budget\": {\"min\": 10, \"max\": 270}, \"trials\": 9}",
		   "objective.metric:");
	expect_bad("{" GOOD_SPACE ", \"objective\": {\"metric\": \"val_loss\"}, "
		   "\"budget\": {\"min\": 10, \"max\": 5}, \"trials\": 9}", "budget.max:");
	expect_bad("{" GOOD_SPACE ", \"objective\": {\"metric\": \"val_loss\"}, "
		   "\"budget\": {\"unit\": \"hours\", \"min\": 1, \"max\": 5}, \"trials\": 9}", "budget.unit:");
	expect_bad("{" GOOD_SPACE ", " GOOD_REST ", \"reduction_factor\": 1}", "reduction_factor:");
	expect_bad("{" GOOD_SPACE ", " GOOD_REST ", \"algorithm\": \"hyperband\"}", "algorithm:");
	expect_bad("{" GOOD_SPACE ", " GOOD_REST ", \"reduction_fator\": 3}", "reduction_fator: unknown field");
	expect_bad("{" GOOD_SPACE ", " GOOD_REST ", \"grace_period\": 300}", "grace_period:");
	expect_bad("{" GOOD_SPACE ", " GOOD_REST ", \"bo\": {\"xi\": -1}}", "bo.xi:");
	expect_bad("{" GOOD_SPACE ", \"objective\": {\"metric\": \"val_loss\"}, \"budget\": {\"min\": 10, \"max\": 270}}",
		   "trials:");
	expect_bad("{" GOOD_SPACE ", " GOOD_REST ", \"algorithm\": \"grid\"}", "trials:");
	expect_bad("{" GOOD_SPACE ", " GOOD_REST, "not valid JSON");
	expect_bad("[1, 2]", "expected a JSON object");
}

static void test_spec_info(void **state)
{
	const char *text = "{\"space\": {\"lr\": {\"log_uniform\": [1e-4, 1.0]}, \"momentum\": {\"uniform\": [0.0, 0.99]},"
			   " \"optimizer\": {\"choice\": [\"sgd\", \"adam\"]}, \"batch\": {\"choice\": [32, 64]}},"
			   " \"objective\": {\"metric\": \"val_accuracy\", \"mode\": \"max\"},"
			   " \"budget\": {\"unit\": \"steps\", \"min\": 10, \"max\": 270},"
			   " \"trials\": 27, \"algorithm\": \"asha\", \"reduction_factor\": 3, \"seed\": 1, \"parallel\": 4}";
	struct hp_tune_spec *s;
	struct hp_tune_spec_info in;

	(void)state;
	assert_int_equal(hp_tune_spec_parse(text, &s), 0);
	hp_tune_spec_info(s, &in);
	assert_string_equal(in.metric, "val_accuracy");
	assert_int_equal(in.maximize, 1);
	assert_string_equal(in.unit, "steps");
	assert_int_equal(in.min, 10);
	assert_int_equal(in.max, 270);
	assert_int_equal(in.grace_period, 10);
	assert_int_equal(in.trials, 27);
	assert_string_equal(in.algorithm, "asha");
	assert_int_equal(in.reduction_factor, 3);
	assert_int_equal(in.seed, 1);
	assert_int_equal(in.parallel, 4);
	assert_int_equal(in.nparams, 4);
	assert_string_equal(hp_tune_spec_param(s, 0), "lr");
	assert_string_equal(hp_tune_spec_param(s, 3), "batch");
	assert_null(hp_tune_spec_param(s, 4));
	hp_tune_spec_free(s);
}

/* Mangled SPECs: each parses or fails with one line, and every one that
 * parses can run a search. */
static void test_spec_mutations(void **state)
{
	const char *good = "{\"space\": {\"lr\": {\"log_uniform\": [1e-4, 1.0]}, \"b\": {\"int_uniform\": [1, 9]},"
			   " \"o\": {\"choice\": [\"sgd\", 2]}}, \"objective\": {\"metric\": \"val_loss\"},"
			   " \"budget\": {\"min\": 1, \"max\": 9}, \"trials\": 5, \"algorithm\": \"bo\","
			   " \"bo\": {\"initial\": 2}}";
	static const char alphabet[] = "{}[]:,\"0123456789.-eE abcdlorstuvx_";
	char text[512];
	uint32_t r = 12345;
	int parsed = 0;

	(void)state;
	for (int it = 0; it < 3000; it++) {
		struct hp_tune_spec *s;
		snprintf(text, sizeof text, "%s", good);
		for (int k = 0; k < 1 + it % 3; k++) {
			r = r * 1664525u + 1013904223u;
			text[(r >> 8) % strlen(good)] = alphabet[(r >> 20) % (sizeof alphabet - 1)];
		}
		if (hp_tune_spec_parse(text, &s) < 0) {
			assert_true(*hp_errmsg() && !strchr(hp_errmsg(), '\n'));
			continue;
		}
		parsed++;
		struct hp_tune *t;
		struct hp_tune_job j;
		assert_int_equal(hp_tune_create(s, &t), 0);
		while (hp_tune_next(t, &j) == 1)
			assert_int_equal(hp_tune_report(t, j.trial, j.to_step, (double)(j.trial % 4), 0), 0);
		hp_tune_free(t);
		hp_tune_spec_free(s);
	}
	assert_true(parsed > 10);
}

/* --- a learning curve made here ---------------------------------------- */

struct cfg {
	double lr, mom;
	int adam;
};

static void decode(const struct hp_tune_job *j, struct cfg *c)
{
	memset(c, 0, sizeof *c);
	for (int i = 0; i < j->nflags; i++) {
		if (!strcmp(j->flag_names[i], "lr"))
			c->lr = strtod(j->flag_values[i], NULL);
		else if (!strcmp(j->flag_names[i], "momentum"))
			c->mom = strtod(j->flag_values[i], NULL);
		else if (!strcmp(j->flag_names[i], "optimizer"))
			c->adam = !strcmp(j->flag_values[i], "adam");
	}
}

/* The loss the curve settles at, and the loss after `step` steps: the
 * final loss plus a transient that differs between configurations, so the
 * order at a low rung is close to, not the same as, the final order. */
static double final_loss(const struct cfg *c)
{
	double a = log10(c->lr) + 1.7;
	return 0.2 + a * a + 2 * (c->mom - 0.8) * (c->mom - 0.8) + (c->adam ? 0 : 0.25);
}

static double curve(const struct cfg *c, int64_t step)
{
	double wiggle = 0.5 + 0.5 * sin(7 * c->mom + 3 * log(c->lr));
	return final_loss(c) + (0.4 + 2.0 * wiggle) * exp(-(double)step / 40.0);
}

static const char *asha_spec_fmt =
	"{\"space\": {\"lr\": {\"log_uniform\": [1e-4, 1.0]}, \"momentum\": {\"uniform\": [0.0, 0.99]},"
	" \"optimizer\": {\"choice\": [\"sgd\", \"adam\"]}},"
	" \"objective\": {\"metric\": \"val_loss\", \"mode\": \"min\"},"
	" \"budget\": {\"unit\": \"steps\", \"min\": 10, \"max\": 270},"
	" \"trials\": %d, \"algorithm\": \"%s\", \"reduction_factor\": 3, \"seed\": %d}";

static struct hp_tune_spec *make_spec(const char *algo, int trials, int seed)
{
	char text[1024];
	struct hp_tune_spec *s;

	snprintf(text, sizeof text, asha_spec_fmt, trials, algo, seed);
	if (hp_tune_spec_parse(text, &s) < 0)
		fail_msg("%s", hp_errmsg());
	return s;
}

/* --- a simulated runner: K workers, jobs of config-dependent speed ----- */

#define MAXEV 4096

struct event {
	int report;         /* 0: a job from next(), 1: a report */
	int trial;
	int64_t from, to;
	double metric;
	int failed;
	char values[3][40];
};

struct sim {
	int k;
	struct hp_tune_job run[16];
	double end[16];
	int nrun;
	double now;
	int64_t steps;         /* budget units spent */
	struct event ev[MAXEV];
	int nev;
	int fail_trial;        /* this trial diverges (-1: none) */
};

static void log_job(struct sim *m, const struct hp_tune_job *j)
{
	struct event *e = &m->ev[m->nev++];

	assert_true(m->nev < MAXEV);
	*e = (struct event){ .trial = j->trial, .from = j->from_step, .to = j->to_step };
	for (int i = 0; i < j->nflags && i < 3; i++)
		snprintf(e->values[i], sizeof e->values[i], "%s", j->flag_values[i]);
}

/* Finish the running job that ends first (ties: the lowest slot). */
static void finish_one(struct sim *m, struct hp_tune *t)
{
	int b = 0;
	struct cfg c;
	struct event *e;

	for (int i = 1; i < m->nrun; i++)
		if (m->end[i] < m->end[b])
			b = i;
	decode(&m->run[b], &c);
	e = &m->ev[m->nev++];
	*e = (struct event){ .report = 1, .trial = m->run[b].trial, .to = m->run[b].to_step,
			     .metric = curve(&c, m->run[b].to_step), .failed = m->run[b].trial == m->fail_trial };
	if (e->failed)
		e->metric = NAN;
	m->now = m->end[b];
	assert_int_equal(hp_tune_report(t, e->trial, e->to, e->metric, 0), 0);
	m->run[b] = m->run[m->nrun - 1];
	m->end[b] = m->end[m->nrun - 1];
	m->nrun--;
}

/* Run the search to the end (or for `limit` events); returns next()'s last code. */
static int simulate(struct sim *m, struct hp_tune *t, int limit)
{
	struct hp_tune_job j;
	struct cfg c;
	int rc = 0;

	while (m->nev < limit) {
		if (m->nrun < m->k && (rc = hp_tune_next(t, &j)) == 1) {
			decode(&j, &c);
			log_job(m, &j);
			m->run[m->nrun] = j;
			/* Larger learning rates run slower here: stragglers. */
			m->end[m->nrun++] = m->now + (double)(j.to_step - j.from_step) * (1.0 + 3 * c.lr);
			m->steps += j.to_step - j.from_step;
			continue;
		}
		assert_true(rc >= 0);
		if (rc == 2)
			break;
		assert_true(m->nrun > 0);
		finish_one(m, t);
	}
	return rc;
}

/* Trials whose loss at the first rung (10 steps) is below trial's. */
static int rank_at_first_rung(const struct hp_tune *t, int trial)
{
	struct hp_tune_job a, b;
	struct cfg ca, cb;
	int r = 0;

	hp_tune_config(t, trial, &a.nflags, &a.flag_names, &a.flag_values);
	decode(&a, &ca);
	for (int i = 0; i < hp_tune_ntrials(t); i++) {
		hp_tune_config(t, i, &b.nflags, &b.flag_names, &b.flag_values);
		decode(&b, &cb);
		r += curve(&cb, 10) < curve(&ca, 10);
	}
	return r;
}

/* ASHA's best is the configuration the full grid of its trials ranks best,
 * for several seeds, with 3 workers and stragglers, in fewer steps. */
static void test_asha_vs_grid(void **state)
{
	int hard = 0;

	(void)state;
	for (int seed = 1; seed <= 6; seed++) {
		struct hp_tune_spec *s = make_spec("asha", 27, seed);
		struct hp_tune *t;
		struct sim *m = calloc(1, sizeof *m);
		int best = -1, asha_best;
		double best_loss = INFINITY, metric;

		m->k = 3, m->fail_trial = -1;
		assert_int_equal(hp_tune_create(s, &t), 0);
		assert_int_equal(simulate(m, t, MAXEV), 2);
		assert_int_equal(hp_tune_ntrials(t), 27);
		/* The grid: every configuration ASHA tried, trained to the end. */
		for (int e = 0; e < m->nev; e++) {
			struct hp_tune_job j;
			struct cfg c;
			if (m->ev[e].report || m->ev[e].from)
				continue;
			assert_int_equal(hp_tune_config(t, m->ev[e].trial, &j.nflags, &j.flag_names, &j.flag_values), 0);
			decode(&j, &c);
			if (curve(&c, 270) < best_loss)
				best_loss = curve(&c, 270), best = m->ev[e].trial;
		}
		assert_int_equal(hp_tune_best(t, &asha_best, &metric), 0);
		if (asha_best != best)
			fail_msg("seed %d: ASHA's best is trial %d, the grid's %d", seed, asha_best, best);
		assert_float_equal(metric, best_loss, 1e-12);
		assert_string_equal(hp_tune_state(t, best), "done");
		hard += rank_at_first_rung(t, best) > 0;
		/* 27 trials to 270 steps: 7290; ASHA stops most early. */
		assert_true(m->steps * 3 < 27 * 270);
		hp_tune_free(t);
		hp_tune_spec_free(s);
		free(m);
	}
	/* The curves cross: ranking at the first rung alone would have missed. */
	assert_true(hard >= 2);
}

/* The rungs and the promotion rule, step by step on one worker. */
static void test_asha_rungs(void **state)
{
	struct hp_tune_spec *s = make_spec("asha", 9, 3);
	struct hp_tune *t;
	struct hp_tune_job j;
	int64_t seen[8] = { 0 };
	int promoted = 0, rc;

	(void)state;
	assert_int_equal(hp_tune_create(s, &t), 0);
	/* Nine trials at rung 0 (10 steps): promotions only once a rung's
	 * top third holds an unpromoted trial, i.e. after 3 results. */
	for (int i = 0; (rc = hp_tune_next(t, &j)) == 1; i++) {
		struct cfg c;
		decode(&j, &c);
		if (j.from_step)
			promoted++;
		assert_true(j.to_step == 10 || j.to_step == 30 || j.to_step == 90 || j.to_step == 270);
		assert_true(j.from_step == 0 || j.from_step * 3 == j.to_step);
		seen[j.to_step == 10 ? 0 : j.to_step == 30 ? 1 : j.to_step == 90 ? 2 : 3]++;
		if (i < 3)
			assert_int_equal(j.from_step, 0);
		assert_string_equal(hp_tune_state(t, j.trial), j.from_step ? "promoted" : "running");
		assert_int_equal(hp_tune_report(t, j.trial, j.to_step, curve(&c, j.to_step), 0), 0);
	}
	assert_int_equal(rc, 2);
	{
		const int64_t *steps;
		assert_int_equal(hp_tune_rungs(t, &steps), 4);
		assert_true(steps[0] == 10 && steps[1] == 30 && steps[2] == 90 && steps[3] == 270);
		for (int k = 0; k < 4; k++)
			assert_int_equal(hp_tune_rung_results(t, k), seen[k]);
		assert_int_equal(hp_tune_rung_results(t, 4), 0);
	}
	/* Every trial in a rung's final top third was promoted (and perhaps
	 * some that were in it only for a while). */
	assert_int_equal(seen[0], 9);
	assert_true(seen[1] >= 3 && seen[1] < 9);
	assert_true(seen[2] >= seen[1] / 3 && seen[2] < seen[1]);
	assert_true(seen[3] >= seen[2] / 3 && seen[3] <= seen[2]);
	assert_int_equal(promoted, seen[1] + seen[2] + seen[3]);
	assert_int_equal(hp_tune_report(t, 0, 10, 1.0, 0), HP_EUSAGE); /* no job running */
	assert_int_equal(hp_tune_report(t, 99, 10, 1.0, 0), HP_EUSAGE);
	assert_null(hp_tune_state(t, 9));
	hp_tune_free(t);
	hp_tune_spec_free(s);
}

/* Rungs when max is not grace*eta^k, and a metric to maximise: the
 * highest values are promoted and the best is the largest at the top. */
static void test_rungs_max_mode(void **state)
{
	const char *text = "{\"space\": {\"m\": {\"uniform\": [0, 1]}},"
			   " \"objective\": {\"metric\": \"val_accuracy\", \"mode\": \"max\"},"
			   " \"budget\": {\"min\": 5, \"max\": 200}, \"grace_period\": 10, \"trials\": 30,"
			   " \"reduction_factor\": 3}";
	struct hp_tune_spec *s;
	struct hp_tune *t;
	struct hp_tune_job j;
	const int64_t *steps;
	int best, top = -1;
	double metric, top_m = -1;

	(void)state;
	assert_int_equal(hp_tune_spec_parse(text, &s), 0);
	assert_int_equal(hp_tune_create(s, &t), 0);
	assert_int_equal(hp_tune_rungs(t, &steps), 4);
	assert_true(steps[0] == 10 && steps[1] == 30 && steps[2] == 90 && steps[3] == 200);
	while (hp_tune_next(t, &j) == 1) {
		double m = strtod(j.flag_values[0], NULL);
		/* Accuracy grows with steps, to m at the end. */
		double acc = m * (1 - exp(-(double)j.to_step / 20));
		if (j.to_step == 200 && acc > top_m)
			top_m = acc, top = j.trial;
		assert_int_equal(hp_tune_report(t, j.trial, j.to_step, acc, 0), 0);
	}
	assert_int_equal(hp_tune_best(t, &best, &metric), 0);
	assert_int_equal(best, top);
	assert_float_equal(metric, top_m, 0);
	/* The curves never cross: the largest m of all 30 is the best. */
	{
		int n, mx = 0;
		const char *const *names, *const *values;
		double mmax = -1;
		for (int i = 0; i < 30; i++) {
			hp_tune_config(t, i, &n, &names, &values);
			if (strtod(values[0], NULL) > mmax)
				mmax = strtod(values[0], NULL), mx = i;
		}
		assert_int_equal(mx, best);
		assert_string_equal(hp_tune_state(t, mx), "done");
	}
	hp_tune_free(t);
	hp_tune_spec_free(s);
}

/* A diverging trial is marked failed; the search finishes anyway. */
static void test_asha_failed(void **state)
{
	struct hp_tune_spec *s = make_spec("asha", 27, 2);
	struct hp_tune *t;
	struct sim *m = calloc(1, sizeof *m);
	int best;
	double metric;

	(void)state;
	m->k = 2, m->fail_trial = 4;
	assert_int_equal(hp_tune_create(s, &t), 0);
	assert_int_equal(simulate(m, t, MAXEV), 2);
	assert_string_equal(hp_tune_state(t, 4), "failed");
	assert_int_equal(hp_tune_best(t, &best, &metric), 0);
	assert_int_not_equal(best, 4);
	assert_true(isfinite(metric));
	for (int i = 0; i < hp_tune_ntrials(t); i++)
		assert_true(!strcmp(hp_tune_state(t, i), "failed") || !strcmp(hp_tune_state(t, i), "stopped") ||
			    !strcmp(hp_tune_state(t, i), "done"));
	hp_tune_free(t);
	hp_tune_spec_free(s);
	free(m);
}

/* The grid: every combination once, last flag fastest, to budget.max. */
static void test_grid(void **state)
{
	const char *text = "{\"space\": {\"lr\": {\"log_uniform\": [0.001, 0.1]}, \"batch\": {\"int_uniform\": [1, 2]},"
			   " \"opt\": {\"choice\": [\"sgd\", 0.5, 7]}},"
			   " \"objective\": {\"metric\": \"val_loss\"}, \"budget\": {\"min\": 5, \"max\": 45},"
			   " \"algorithm\": \"grid\", \"grid_points\": 3}";
	static const char *const lrs[] = { "0.001", "0.01", "0.1" }, *const opts[] = { "sgd", "0.5", "7" };
	struct hp_tune_spec *s;
	struct hp_tune *t;
	struct hp_tune_job j;
	int n = 0, rc;

	(void)state;
	assert_int_equal(hp_tune_spec_parse(text, &s), 0);
	assert_int_equal(hp_tune_create(s, &t), 0);
	while ((rc = hp_tune_next(t, &j)) == 1) {
		char want[3][32];
		snprintf(want[0], sizeof want[0], "%s", lrs[n / 6]);
		snprintf(want[1], sizeof want[1], "%d", 1 + (n / 3) % 2);
		snprintf(want[2], sizeof want[2], "%s", opts[n % 3]);
		assert_int_equal(j.trial, n);
		assert_int_equal(j.from_step, 0);
		assert_int_equal(j.to_step, 45);
		assert_int_equal(j.nflags, 3);
		assert_string_equal(j.flag_names[1], "batch");
		/* Log-scale midpoint: exactly 0.01 only up to rounding. */
		assert_float_equal(strtod(j.flag_values[0], NULL), strtod(want[0], NULL), 1e-15);
		assert_string_equal(j.flag_values[1], want[1]);
		assert_string_equal(j.flag_values[2], want[2]);
		assert_int_equal(hp_tune_report(t, j.trial, 45, n == 7 ? 0.5 : 1.0 + n, 0), 0);
		n++;
	}
	assert_int_equal(rc, 2);
	assert_int_equal(n, 18);
	{
		int best;
		double metric;
		assert_int_equal(hp_tune_best(t, &best, &metric), 0);
		assert_int_equal(best, 7);
		assert_float_equal(metric, 0.5, 0);
	}
	hp_tune_free(t);
	hp_tune_spec_free(s);
}

/* A finite space is drawn without replacement: 12 trials over 6 x 2
 * choices are the 12 configurations, each once; the 13th repeats one. */
static void test_finite_space(void **state)
{
	const char *algos[] = { "asha", "random" };

	(void)state;
	for (int a = 0; a < 2; a++) {
		char text[512], seen[12][64];
		struct hp_tune_spec *s;
		struct hp_tune *t;
		struct hp_tune_job j;
		int n = 0;
		snprintf(text, sizeof text, "{\"space\": {\"lr\": {\"choice\": [0.001, 0.003, 0.01, 0.03, 0.1, 0.3]},"
			 " \"optimizer\": {\"choice\": [\"sgd\", \"adam\"]}}, \"objective\": {\"metric\": \"val_loss\"},"
			 " \"budget\": {\"min\": 1, \"max\": 1}, \"trials\": 12, \"algorithm\": \"%s\", \"seed\": 5}",
			 algos[a]);
		assert_int_equal(hp_tune_spec_parse(text, &s), 0);
		assert_int_equal(hp_tune_create(s, &t), 0);
		while (hp_tune_next(t, &j) == 1) {
			assert_true(n < 12);
			snprintf(seen[n], sizeof seen[n], "%s %s", j.flag_values[0], j.flag_values[1]);
			for (int k = 0; k < n; k++)
				assert_string_not_equal(seen[k], seen[n]);
			n++;
			assert_int_equal(hp_tune_report(t, j.trial, 1, 1.0 / n, 0), 0);
		}
		assert_int_equal(n, 12);
		hp_tune_free(t);
		hp_tune_spec_free(s);
	}
}

/* Values print so that they parse back to the same number, inside bounds. */
static void test_values(void **state)
{
	const char *text = "{\"space\": {\"lr\": {\"log_uniform\": [1e-7, 3.0]}, \"m\": {\"uniform\": [-1.5, 2.25]},"
			   " \"k\": {\"int_uniform\": [-3, 1000000]}},"
			   " \"objective\": {\"metric\": \"val_loss\"}, \"budget\": {\"min\": 1, \"max\": 1},"
			   " \"trials\": 200, \"algorithm\": \"random\", \"seed\": 9}";
	struct hp_tune_spec *s;
	struct hp_tune *t;
	struct hp_tune_job j;

	(void)state;
	assert_int_equal(hp_tune_spec_parse(text, &s), 0);
	assert_int_equal(hp_tune_create(s, &t), 0);
	while (hp_tune_next(t, &j) == 1) {
		char *end, again[64];
		double lr = strtod(j.flag_values[0], &end), m;
		long long k;
		assert_int_equal(*end, 0);
		/* Canonical: the shortest of %.15g..%.17g that reads back
		 * (0.05, not 0.050000000000000003). */
		for (int prec = 15; prec <= 17; prec++) {
			snprintf(again, sizeof again, "%.*g", prec, lr);
			if (strtod(again, NULL) == lr)
				break;
		}
		assert_string_equal(again, j.flag_values[0]);
		assert_true(lr >= 1e-7 && lr <= 3.0);
		m = strtod(j.flag_values[1], &end);
		assert_int_equal(*end, 0);
		assert_true(m >= -1.5 && m <= 2.25);
		k = strtoll(j.flag_values[2], &end, 10);
		assert_int_equal(*end, 0);
		assert_true(k >= -3 && k <= 1000000);
		assert_int_equal(hp_tune_report(t, j.trial, 1, lr, 0), 0);
	}
	hp_tune_free(t);
	hp_tune_spec_free(s);
}

static void run_to_end(const char *algo, int seed, struct sim *m)
{
	struct hp_tune_spec *s = make_spec(algo, 27, seed);
	struct hp_tune *t;

	m->k = 3, m->fail_trial = 5;
	assert_int_equal(hp_tune_create(s, &t), 0);
	assert_int_equal(simulate(m, t, MAXEV), 2);
	hp_tune_free(t);
	hp_tune_spec_free(s);
}

static int same_events(const struct sim *a, const struct sim *b)
{
	if (a->nev != b->nev)
		return 0;
	for (int e = 0; e < a->nev; e++) {
		const struct event *x = &a->ev[e], *y = &b->ev[e];
		if (x->report != y->report || x->trial != y->trial || x->from != y->from || x->to != y->to ||
		    memcmp(x->values, y->values, sizeof x->values))
			return 0;
	}
	return 1;
}

/* The same seed gives the same jobs, configurations and promotions. */
static void test_determinism(void **state)
{
	static const char *const algos[] = { "asha", "bo", "random" };

	(void)state;
	for (int a = 0; a < 3; a++) {
		struct sim *m1 = calloc(1, sizeof *m1), *m2 = calloc(1, sizeof *m2), *m3 = calloc(1, sizeof *m3);
		run_to_end(algos[a], 4, m1);
		run_to_end(algos[a], 4, m2);
		run_to_end(algos[a], 5, m3);
		if (!same_events(m1, m2))
			fail_msg("%s: two runs with seed 4 differ", algos[a]);
		assert_false(same_events(m1, m3));
		free(m1);
		free(m2);
		free(m3);
	}
}

/* Replaying the first half of a run's calls (as a resumed runner would
 * from its log) gives the same trial states and best, and the search then
 * goes on exactly as the uninterrupted one did. */
static void replay_case(const char *algo)
{
	struct hp_tune_spec *s = make_spec(algo, 27, 7);
	struct hp_tune *t, *r;
	struct sim *m = calloc(1, sizeof *m), *rest = calloc(1, sizeof *rest);
	struct hp_tune_job j;
	int half, b1, b2;
	double x1, x2;

	assert_int_equal(hp_tune_create(s, &t), 0);
	m->k = 3, m->fail_trial = 2;
	simulate(m, t, 60);
	half = m->nev;
	assert_int_equal(hp_tune_create(s, &r), 0);
	for (int e = 0; e < half; e++) {
		const struct event *ev = &m->ev[e];
		if (ev->report) {
			assert_int_equal(hp_tune_report(r, ev->trial, ev->to, ev->metric, ev->failed), 0);
			continue;
		}
		assert_int_equal(hp_tune_replay_job(r, ev->trial, ev->to, &j), 0);
		assert_int_equal(j.trial, ev->trial);
		assert_string_equal(j.flag_values[0], ev->values[0]);
	}
	assert_int_equal(hp_tune_ntrials(r), hp_tune_ntrials(t));
	for (int i = 0; i < hp_tune_ntrials(t); i++)
		assert_string_equal(hp_tune_state(r, i), hp_tune_state(t, i));
	assert_int_equal(hp_tune_best(t, &b1, &x1), 0);
	assert_int_equal(hp_tune_best(r, &b2, &x2), 0);
	assert_int_equal(b1, b2);
	assert_float_equal(x1, x2, 0);
	/* A log of another search is refused. */
	{
		struct hp_tune *o;
		struct hp_tune_job oj;
		assert_int_equal(hp_tune_create(s, &o), 0);
		assert_int_equal(hp_tune_replay_job(o, 1, 10, &oj), HP_EUSAGE);
		assert_non_null(strstr(hp_errmsg(), "would start trial 0"));
		hp_tune_free(o);
	}
	/* Both continue with the same jobs outstanding: the same search. */
	*rest = *m;
	simulate(m, t, MAXEV);
	simulate(rest, r, MAXEV);
	if (!same_events(m, rest))
		fail_msg("%s: the replayed search went on differently", algo);
	hp_tune_free(t);
	hp_tune_free(r);
	hp_tune_spec_free(s);
	free(m);
	free(rest);
}

static void test_replay(void **state)
{
	(void)state;
	replay_case("asha");
	replay_case("bo");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_spec_errors),
		cmocka_unit_test(test_spec_info),
		cmocka_unit_test(test_spec_mutations),
		cmocka_unit_test(test_asha_rungs),
		cmocka_unit_test(test_asha_vs_grid),
		cmocka_unit_test(test_asha_failed),
		cmocka_unit_test(test_rungs_max_mode),
		cmocka_unit_test(test_grid),
		cmocka_unit_test(test_values),
		cmocka_unit_test(test_finite_space),
		cmocka_unit_test(test_determinism),
		cmocka_unit_test(test_replay),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
