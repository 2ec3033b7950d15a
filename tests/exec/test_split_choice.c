/* The band count the band pass keeps (exec/split.c): of the candidates it
 * tries (2, 3, 4, 6, ... bands with workspace for every worker, then with
 * one worker's, each with the producers of values read cut cut ahead and,
 * where that cut any, without, up to the first whose smallest budget
 * leaves a quarter of the budget free, then in inference more bands while
 * each count gives the fastest so far by 2%), those that fit the budget, the one
 * whose plan at the
 * budget is predicted fastest (hp_split_predicted_ms).  The candidates are
 * made here one by one with the band pass alone (hp_split_bands), and the
 * choice of hp_split_for_budget is checked against the fastest of them
 * over a range of budgets for LeNet at a batch of 64 (inference).  Some of
 * those budgets must choose otherwise than the rule before it (the first
 * candidate within the quarter, else the first that fits), and some must
 * choose one worker's workspace and some not, and some the producers cut
 * ahead and some not, or the test would not tell the rules apart. */
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
#include "hpdlf/exec.h"
#include "exec/budget.h"
#include "exec/plan.h"
#include "exec/split.h"
#include "exec/split_memo.h"

static const int counts[] = { 2, 3, 4, 6, 8, 12, 16, 24, 32 };
#define NCOUNTS (int)(sizeof counts / sizeof *counts)

static struct hp_graph *lenet(int64_t batch)
{
	const char *src = getenv("HPDLF_SOURCE_DIR");
	struct hp_shape s = { 4, { batch, 1, 8, 8 } };
	struct hp_graph *g = NULL;
	char path[1024];

	assert_non_null(src);
	snprintf(path, sizeof path, "%s/tests/models/lenet/model.onnx", src);
	assert_int_equal(hp_graph_load(path, &g), 0);
	assert_int_equal(hp_graph_set_input_shape(g, g->values[g->inputs[0]].name, &s), 0);
	assert_int_equal(hp_graph_infer(g), 0);
	return g;
}

struct cand {
	int k, lean, ahead;
	uint64_t min;
	double ms;
};

/* k bands (lean: band convolutions with one worker's workspace; ahead:
 * producers of values read cut cut too), as the band pass makes them. */
static void make(const struct hp_graph *g, int k, int lean, int ahead, uint64_t budget, uint64_t target,
		 struct cand *c)
{
	struct hp_graph *x = NULL;
	int nsplit = 0, axis = -1;

	assert_int_equal(hp_split_graph_copy(g, &x), 0);
	assert_int_equal(hp_split_bands(x, k, 0, lean, ahead, target, &nsplit, &axis, &c->ahead, NULL), 0);
	assert_int_equal(hp_graph_infer(x), 0);
	c->k = k;
	c->lean = lean;
	c->min = hp_split_min_budget(x);
	c->ms = c->min <= budget ? hp_split_predicted_ms(x, budget) : -1;
	hp_graph_free(x);
}

/* The band count hp_split_for_budget keeps at budget b; lean set when its
 * band convolutions got one worker's workspace. */
static int kept(const struct hp_graph *g, uint64_t b, int *lean, int *ahead, double *ms)
{
	struct hp_budget_layout l;
	struct hp_split_opts so = { .layout = &l };
	struct hp_split_info info;
	struct hp_graph *x = NULL;

	hp_budget_layout_init(&l, b);
	assert_int_equal(l.budget, b);
	assert_int_equal(hp_split_graph_copy(g, &x), 0);
	assert_int_equal(hp_graph_infer(x), 0);
	assert_int_equal(hp_split_for_budget(x, &so, &info), 0);
	hp_graph_free(x);
	*lean = info.lean;
	*ahead = info.ahead;
	*ms = info.ms;
	return info.k;
}

/* What a sweep of budgets saw: budgets checked, chosen otherwise than
 * the first candidate within the quarter, lean, cut ahead, and where the
 * counts after the first within the quarter gave the choice. */
struct tally {
	int checked, differ, leaner, aheads, more;
};

/* Budgets [b0, b1] by step: hp_split_for_budget's choice is the fastest of
 * the candidates the rule tries, made here one by one. */
static void sweep(const struct hp_graph *g, uint64_t b0, uint64_t b1, uint64_t step, struct tally *t)
{
	for (uint64_t b = b0; b <= b1; b += step) {
		struct cand c[4 * NCOUNTS], *best = NULL, *old = NULL, *first_fit = NULL;
		uint64_t target = b - b / 4;
		int lean, ahead, k, nc = 0, within = 0, kwithin = 0;
		double ms;
		if (hp_split_min_budget(g) <= b)
			continue; /* fits unsplit: nothing to choose */
		/* every worker's workspace first, then one worker's, up to the
		 * first within the target, and after it (inference) the next
		 * counts of every worker's workspace while each gives the best,
		 * 2% faster than the best before it;
		 * each cut ahead, then (if that cut any) not */
		for (int n = 0, more = 0; n < 2 * NCOUNTS && (!within || more); n++) {
			if (more && n >= NCOUNTS)
				break;
			double bar = more ? best->ms * (1 - 0.02) : HUGE_VAL; /* split.c's MORE_GAIN */
			for (int a = 1, any = 1; a >= 0 && any; a--) {
				struct cand *x = &c[nc++];
				make(g, counts[n % NCOUNTS], n >= NCOUNTS, a, b, target, x);
				any = x->ahead > 0;
				if (x->min <= b && (!best || x->ms < best->ms) && x->ms < bar)
					best = x;
				if (x->min <= b && !first_fit)
					first_fit = x;
				if (x->min <= target && !old)
					old = x;
				if (x->min <= target && !within)
					kwithin = x->k;
				within |= x->min <= target;
			}
			more = within && n < NCOUNTS && best && best->k == counts[n] && !best->lean;
		}
		assert_non_null(best);
		old = old ? old : first_fit;
		k = kept(g, b, &lean, &ahead, &ms);
		assert_int_equal(k, best->k);
		assert_int_equal(lean, best->lean);
		assert_int_equal(ahead, best->ahead);
		assert_true(ms == best->ms);
		assert_true(isfinite(ms) && ms > 0);
		t->checked++;
		t->leaner += lean;
		t->aheads += ahead > 0;
		t->differ += best->k != old->k || best->lean != old->lean;
		t->more += kwithin && !best->lean && best->k > kwithin;
	}
}

static void test_fastest_fit(void **state)
{
	struct hp_graph *g = lenet(64);
	struct tally t = { 0 };

	(void)state;
	sweep(g, 180000, 420000, 10000, &t);
	print_message("%d budgets checked, %d chose otherwise than the first within the quarter, %d lean, "
		      "%d cut ahead\n", t.checked, t.differ, t.leaner, t.aheads);
	assert_true(t.checked >= 5);
	assert_true(t.differ >= 1);
	assert_true(t.leaner >= 1 && t.leaner < t.checked);
	assert_true(t.aheads >= 1 && t.aheads < t.checked);
	hp_graph_free(g);
}

/* Inference tries the band counts after the first within the quarter
 * while each is predicted 2% faster than the best before it (split.c,
 * split_pass's more): LeNet at a batch of 256 keeps 8 bands where 6 are
 * the first within the quarter (524998 bytes), 4 where 3 are (691662).
 * A search that stops at the first within the quarter keeps 6 and 3 and
 * fails the sweep's check of the fastest; one that never goes on fails
 * the count below. */
static void test_more_bands(void **state)
{
	struct hp_graph *g = lenet(256);
	struct tally t = { 0 };

	(void)state;
	sweep(g, 524998, 691662, 166664 / 8, &t);
	print_message("%d budgets checked, %d kept more bands than the first within the quarter\n", t.checked,
		      t.more);
	assert_true(t.checked >= 5);
	assert_true(t.more >= 2);
	hp_graph_free(g);
}

/* The split memo's key (exec/split_memo.h): a copy hashes as its graph
 * (split.c's first candidate takes the copy's hash for the graph's), and
 * each field a plan or a cut reads changes it. */
static void test_copy_hash(void **state)
{
	struct hp_graph *g = lenet(64), *x = NULL;
	uint64_t h = hp_split_graph_hash(g);
	int v = g->nodes[1].inputs[0], n = g->nnodes - 1;

	(void)state;
	assert_int_equal(hp_split_graph_copy(g, &x), 0);
	assert_true(hp_split_graph_hash(x) == h);
	x->values[v].next = 0;
	assert_true(hp_split_graph_hash(x) != h);
	x->values[v].next = g->values[v].next;
	x->values[v].nconsumers++;
	assert_true(hp_split_graph_hash(x) != h);
	x->values[v].nconsumers--;
	x->values[v].dim_param[0] = strdup("N");
	assert_true(hp_split_graph_hash(x) != h);
	free(x->values[v].dim_param[0]);
	x->values[v].dim_param[0] = NULL;
	x->values[v].part_of = 1;
	assert_true(hp_split_graph_hash(x) != h);
	x->values[v].part_of = g->values[v].part_of;
	x->nodes[n].sched = 7;
	assert_true(hp_split_graph_hash(x) != h);
	x->nodes[n].sched = g->nodes[n].sched;
	x->nodes[n].folded = !g->nodes[n].folded;
	assert_true(hp_split_graph_hash(x) != h);
	x->nodes[n].folded = g->nodes[n].folded;
	assert_true(hp_split_graph_hash(x) == h);
	hp_graph_free(x);
	hp_graph_free(g);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_copy_hash),
		cmocka_unit_test(test_fastest_fit),
		cmocka_unit_test(test_more_bands),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
