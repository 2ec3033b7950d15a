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
 * budget), and some candidates were skipped. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hpdlf/error.h"
#include "hpdlf/train.h"
#include "exec/plan.h"
#include "exec/split.h"

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

/* A graph-only trainer of model m at budget b: its step's node count and
 * smallest budget (0 and the error where it was refused). */
static int build(const struct model *m, uint64_t b, int *nnodes, uint64_t *minb)
{
	char model[1024], x[1024], y[1024];
	struct hp_trainer_opts o;
	struct hp_trainer *t = NULL;
	int rc;

	path_of(m->name, "model.onnx", model, sizeof model);
	path_of(m->name, "x.npy", x, sizeof x);
	path_of(m->name, "y.npy", y, sizeof y);
	hp_trainer_opts_init(&o, sizeof o);
	o.data = x;
	o.labels = y;
	o.batch = m->batch;
	o.steps = 1;
	o.threads = 1;
	o.budget = b;
	o.graph_only = 1;
	rc = hp_trainer_create(model, &o, &t);
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

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(floors_hold),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
