/* The band pass's floor (exec/split.c cut_floor): while no candidate fits
 * the budget, one whose forward steps alone need no less than the smallest
 * budget of the one kept is neither differentiated nor planned.  The floor
 * must lie at or below what the candidate comes to finished, or a skipped
 * one could have been kept.  Checked here on the test models trained
 * (LeNet: Conv, MaxPool, Gemm; the MLP; the 3-D U-Net: ConvTranspose,
 * Concat, BatchNormalization) at budgets from one byte to their unsplit
 * step's: with hp_split_check_floors every candidate is finished, and
 * hp_split_for_budget fails where one needs less than its floor; the same
 * trainers without the check keep the same graph (its step and smallest
 * budget), and some candidates were skipped.
 *
 * The same floors, of the forward graph alone, answer hpdlf-exec's floor
 * probes (exec/train_floor.h): where hp_trainer_sure_refused says a
 * trainer is refused it must not fit, and hp_trainer_floor must lie at or
 * below the smallest budget of the step built.  On these models the floor
 * lies far below that figure (tens of KiB), so only a gross error fails
 * here; on plan-speed's MLP it is the figure itself (36864 bytes). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hpdlf/error.h"
#include "hpdlf/exec.h"
#include "hpdlf/train.h"
#include "exec/plan.h"
#include "exec/split.h"
#include "exec/train_floor.h"

struct model {
	const char *name;
	int64_t batch;
};

static const struct model models[] = { { "lenet", 64 }, { "mlp", 32 }, { "unet3d_tiny", 2 } };

static void path_of(const char *name, const char *file, char *path, size_t n)
{
	const char *src = getenv("HPDLF_SOURCE_DIR");

	assert_non_null(src);
	snprintf(path, n, "%s/tests/models/%s/%s", src, name, file);
}

struct paths {
	char model[1024], x[1024], y[1024];
};

/* The options of a graph-only trainer of model m at budget b. */
static void opts_of(const struct model *m, uint64_t b, struct paths *p, struct hp_trainer_opts *o)
{
	path_of(m->name, "model.onnx", p->model, sizeof p->model);
	path_of(m->name, "x.npy", p->x, sizeof p->x);
	path_of(m->name, "y.npy", p->y, sizeof p->y);
	hp_trainer_opts_init(o, sizeof *o);
	o->data = p->x;
	o->labels = p->y;
	o->batch = m->batch;
	o->steps = 1;
	o->threads = 1;
	o->budget = b;
	o->graph_only = 1;
}

/* A graph-only trainer of model m at budget b: its step's node count and
 * smallest budget (0 and the error where it was refused). */
static int build(const struct model *m, uint64_t b, int *nnodes, uint64_t *minb)
{
	struct paths p;
	struct hp_trainer_opts o;
	struct hp_trainer *t = NULL;
	int rc;

	opts_of(m, b, &p, &o);
	rc = hp_trainer_create(p.model, &o, &t);
	*nnodes = 0;
	*minb = 0;
	if (rc == 0) {
		*nnodes = hp_trainer_graph(t)->nnodes;
		*minb = hp_split_min_budget(hp_trainer_graph(t));
	}
	hp_trainer_destroy(t);
	return rc;
}

static void floors_hold(void **state)
{
	int skips = 0;

	(void)state;
	for (size_t i = 0; i < sizeof models / sizeof *models; i++) {
		int n0, n1;
		uint64_t whole, m0, m1;
		assert_int_equal(build(&models[i], 0, &n0, &whole), 0);
		const uint64_t budgets[] = { 1, whole / 16, whole / 8, whole / 4 };
		for (size_t j = 0; j < sizeof budgets / sizeof *budgets; j++) {
			uint64_t b = budgets[j] ? budgets[j] : 1;
			hp_split_check_floors = 1;
			hp_split_floor_skips = 0;
			int r1 = build(&models[i], b, &n1, &m1);
			hp_split_check_floors = 0;
			if (r1 == HP_EINTERNAL)
				fail_msg("%s at %llu bytes: %s", models[i].name, (unsigned long long)b, hp_errmsg());
			print_message("%s at %llu bytes: rc %d, %d nodes, smallest budget %llu, %d skipped\n", models[i].name,
				      (unsigned long long)b, r1, n1, (unsigned long long)m1, hp_split_floor_skips);
			skips += hp_split_floor_skips;
			int r0 = build(&models[i], b, &n0, &m0);
			assert_int_equal(r0, r1);
			assert_int_equal(n0, n1);
			assert_true(m0 == m1);
		}
	}
	assert_true(skips > 0);
}

/* Whether a graph-only trainer of m at b plans its step at b, as
 * hpdlf-exec's floor search probes it (tools/exec_train.c floor_probe). */
static int trainer_fits(const struct model *m, uint64_t b)
{
	struct paths p;
	struct hp_trainer_opts o;
	struct hp_trainer *t = NULL;
	struct hp_plan_summary q;
	struct hp_exec_opts eo;
	int rc;

	opts_of(m, b, &p, &o);
	rc = hp_trainer_create(p.model, &o, &t);
	hp_exec_opts_init(&eo, sizeof eo);
	eo.threads = 1, eo.budget = b, eo.no_split = 1;
	if (rc == 0)
		rc = hp_plan_summarize(hp_trainer_graph(t), &eo, &q);
	hp_trainer_destroy(t);
	return rc == 0;
}

/* hp_trainer_sure_refused (exec/train_floor.h) answers the floor search's
 * probes from the forward graph: where it says refused, the trainer must
 * not fit.  Checked at budgets from one byte to the unsplit step's and
 * around the smallest budget the 1-byte trainer names (its probe lies one
 * page below); it must know some refusals, and not refuse that figure.
 * The 1-byte trainer knows its step refused naming the figure its plan
 * names (hpdlf-exec's --plan takes it instead of planning it again). */
static void sure_refusals_hold(void **state)
{
	int known = 0;

	(void)state;
	for (size_t i = 0; i < sizeof models / sizeof *models; i++) {
		const struct model *m = &models[i];
		struct paths p;
		struct hp_trainer_opts o;
		struct hp_trainer *t = NULL;
		int n;
		uint64_t whole;
		assert_int_equal(build(m, 0, &n, &whole), 0);
		opts_of(m, 1, &p, &o);
		assert_int_equal(hp_trainer_create(p.model, &o, &t), 0);
		hp_trainer_destroy(t);
		struct hp_plan_summary q;
		struct hp_exec_opts eo;
		hp_exec_opts_init(&eo, sizeof eo);
		eo.threads = 1, eo.budget = 1, eo.no_split = 1;
		opts_of(m, 1, &p, &o);
		assert_int_equal(hp_trainer_create(p.model, &o, &t), 0);
		uint64_t trainer_named = hp_trainer_refused_needs(t); /* --plan takes it for the plan below */
		hp_plan_needed = 0;
		assert_int_equal(hp_plan_summarize(hp_trainer_graph(t), &eo, &q), HP_EBUDGET_OP);
		hp_trainer_destroy(t);
		uint64_t named = hp_exec_min_budget();
		if (trainer_named != named)
			fail_msg("%s: the 1-byte trainer was refused naming %llu, its step's plan names %llu", m->name,
				 (unsigned long long)trainer_named, (unsigned long long)named);
		const uint64_t budgets[] = { 1, whole / 16, whole / 8, whole / 4, whole / 2, named - 4096, named - 1, named };
		for (size_t j = 0; j < sizeof budgets / sizeof *budgets; j++) {
			uint64_t b = budgets[j] ? budgets[j] : 1;
			opts_of(m, b, &p, &o);
			int sure = hp_trainer_sure_refused(p.model, &o), fits = trainer_fits(m, b), nn;
			uint64_t floor = hp_trainer_floor(p.model, &o), minb;
			int rc = build(m, b, &nn, &minb);
			print_message("%s at %llu bytes: %s, %s; floor %llu, the step's smallest budget %llu\n", m->name,
				      (unsigned long long)b, sure ? "sure to be refused" : "not known",
				      fits ? "fits" : "refused", (unsigned long long)floor, (unsigned long long)minb);
			if (rc == 0 && floor > minb)
				fail_msg("%s at %llu bytes: floor %llu above the step's %llu", m->name, (unsigned long long)b,
					 (unsigned long long)floor, (unsigned long long)minb);
			assert_int_not_equal(sure, -1);
			if (sure && fits)
				fail_msg("%s at %llu bytes: said refused, and fits", m->name, (unsigned long long)b);
			known += sure;
		}
		opts_of(m, named, &p, &o);
		assert_int_equal(hp_trainer_sure_refused(p.model, &o), 0);
	}
	assert_true(known > 0);
}

/* hp_trainer_floor of model m at budget b, with the forward graph
 * remembered from a graph-only trainer built at b0 (0: none remembered);
 * *hit: answered from it; *built: forward graphs it built. */
static uint64_t floor_after(const struct model *m, uint64_t b0, uint64_t b, int *hit, int *built)
{
	struct paths p;
	struct hp_trainer_opts o;
	struct hp_trainer *t = NULL;

	hp_train_floor_forget();
	if (b0) {
		opts_of(m, b0, &p, &o);
		assert_int_equal(hp_trainer_create(p.model, &o, &t), 0);
		hp_trainer_destroy(t);
	}
	opts_of(m, b, &p, &o);
	hp_train_floor_memo_hits = hp_train_floor_builds = 0;
	uint64_t floor = hp_trainer_floor(p.model, &o);
	*hit = hp_train_floor_memo_hits;
	*built = hp_train_floor_builds;
	return floor;
}

/* A probe's forward graph known from the one a trainer at another budget
 * built (exec/train_floor.c): only where the weight split chooses alike,
 * so its floor is the one the probe builds.  From trainers at one byte
 * and at the unsplit step's budget / 8, probes from one byte to that
 * budget: each floor the same as with nothing remembered, and the same
 * retry with update_cut built (its would_cut); some answered from memory,
 * and some not (their splits differ), some with that retry. */
static void floor_memo_agrees(void **state)
{
	int hits = 0, misses = 0, retries = 0;

	(void)state;
	for (size_t i = 0; i < sizeof models / sizeof *models; i++) {
		const struct model *m = &models[i];
		int n, hit;
		uint64_t whole;
		assert_int_equal(build(m, 0, &n, &whole), 0);
		const uint64_t from[] = { 1, whole / 8 };
		const uint64_t budgets[] = { 1, 4096, 40960, whole / 64, whole / 16, whole / 8, whole / 4 };
		for (size_t a = 0; a < sizeof from / sizeof *from; a++)
			for (size_t j = 0; j < sizeof budgets / sizeof *budgets; j++) {
				int built0, built;
				uint64_t b = budgets[j] ? budgets[j] : 1, fresh = floor_after(m, 0, b, &hit, &built0);
				uint64_t known = floor_after(m, from[a], b, &hit, &built);
				print_message("%s at %llu bytes after %llu: floor %llu, %s %llu\n", m->name,
					      (unsigned long long)b, (unsigned long long)from[a], (unsigned long long)fresh,
					      hit ? "remembered" : "built", (unsigned long long)known);
				if (known != fresh)
					fail_msg("%s at %llu bytes after a trainer at %llu: floor %llu, built %llu", m->name,
						 (unsigned long long)b, (unsigned long long)from[a], (unsigned long long)known,
						 (unsigned long long)fresh);
				if (hit && built != built0 - 1)
					fail_msg("%s at %llu bytes after a trainer at %llu: %d forward graphs built, %d "
						 "with nothing remembered", m->name, (unsigned long long)b,
						 (unsigned long long)from[a], built, built0);
				hits += hit > 0;
				misses += !hit;
				retries += hit && built;
			}
	}
	hp_train_floor_forget();
	assert_true(hits > 0);
	assert_true(misses > 0);
	assert_true(retries > 0);
}

/* --plan's footprint taken from its summary's plan (exec/plan.h
 * hp_plan_summarize_foot): where known, hp_plan_footprint's figures.
 * The test models trained at a quarter and a half of their unsplit step,
 * the speed models cached by a first summary. */
static void foot_from_summary(void **state)
{
	int known = 0, moved = 0;

	(void)state;
	for (size_t i = 0; i < sizeof models / sizeof *models; i++) {
		const struct model *m = &models[i];
		int n;
		uint64_t whole;
		assert_int_equal(build(m, 0, &n, &whole), 0);
		for (uint64_t d = 2; d <= 4; d += 2) {
			struct paths p;
			struct hp_trainer_opts o;
			struct hp_trainer *t = NULL;
			struct hp_plan_summary q;
			struct hp_plan_foot f;
			struct hp_exec_opts eo;
			uint64_t st, sw, pk;
			opts_of(m, whole / d, &p, &o);
			if (hp_trainer_create(p.model, &o, &t) < 0)
				continue;
			hp_exec_opts_init(&eo, sizeof eo);
			eo.threads = 1, eo.budget = whole / d, eo.no_split = 1;
			if (hp_plan_summarize(hp_trainer_graph(t), &eo, &q) == 0) {
				assert_int_equal(hp_plan_summarize_foot(hp_trainer_graph(t), &eo, &q, NULL, &f), 0);
				assert_int_equal(hp_plan_footprint(hp_trainer_graph(t), &eo, &st, &sw, &pk), 0);
				print_message("%s at %llu bytes: footprint %llu %llu %llu%s\n", m->name,
					      (unsigned long long)eo.budget, (unsigned long long)st, (unsigned long long)sw,
					      (unsigned long long)pk, f.known ? ", the summary's" : "");
				if (f.known && (f.state != st || f.swapped != sw || f.peak != pk))
					fail_msg("%s at %llu bytes: the summary's footprint %llu %llu %llu", m->name,
						 (unsigned long long)eo.budget, (unsigned long long)f.state,
						 (unsigned long long)f.swapped, (unsigned long long)f.peak);
				known += f.known;
				moved += f.known && sw > 0;
			}
			hp_trainer_destroy(t);
		}
	}
	assert_true(known > 0 && moved > 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(floors_hold),
		cmocka_unit_test(sure_refusals_hold),
		cmocka_unit_test(floor_memo_agrees),
		cmocka_unit_test(foot_from_summary),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
