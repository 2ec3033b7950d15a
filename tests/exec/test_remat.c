/* Recompute or swap (exec/remat.h): the chain DP against brute force over
 * every keep/swap/recompute choice of small chains, a case worked by
 * hand, the DP's time on a 10,000-node chain, and the whole pass on a
 * generated 10,000-node training graph (its time; what it recomputes). */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "hpdlf/error.h"
#include "hpdlf/exec.h"
#include "hpdlf/train.h"
#include "exec/budget.h"
#include "exec/plan.h"
#include "exec/remat.h"
#include "exec/speed.h"

static double clock_s(clockid_t c)
{
	struct timespec t;

	clock_gettime(c, &t);
	return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

/* Wall time (the machine may be loaded: CPU time is reported beside). */
static double now_s(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

/* The model of remat.h, evaluated straight from its text: the cost of a
 * choice, or INFINITY when it breaks a rule. */
static double model_cost(const struct hp_remat_item *it, int n, uint64_t mem, double lambda, const char *ch)
{
	uint64_t keep = 0, anchor = 0, seg = 0;
	double cost = 0, zero = 0;
	int zero_ok = 1;

	for (int i = 0; i < n; i++) {
		if (!it[i].bytes) { /* forward-only: recomputed with the item after it, if that one is */
			zero += it[i].recompute_ms;
			zero_ok &= it[i].can != 0;
			continue;
		}
		switch (ch[i]) {
		case HP_REMAT_KEEP:
			keep += it[i].bytes;
			anchor = seg = 0;
			if (keep > mem)
				return INFINITY; /* the turn */
			break;
		case HP_REMAT_SWAP:
			anchor = it[i].bytes;
			seg = 0;
			cost += lambda * it[i].swap_ms;
			if (keep + anchor > mem)
				return INFINITY; /* read back while its segment runs */
			break;
		case HP_REMAT_RECOMPUTE:
			if (!it[i].can || !zero_ok)
				return INFINITY;
			seg += it[i].bytes;
			cost += it[i].recompute_ms + zero;
			if (keep + anchor + seg > mem)
				return INFINITY; /* the segment's backward */
			break;
		default:
			return INFINITY;
		}
		zero = 0;
		zero_ok = 1;
	}
	return cost;
}

/* Minimum over all 3^n choices (forward-only items: KEEP). */
static double brute(const struct hp_remat_item *it, int n, uint64_t mem, double lambda)
{
	char ch[16];
	double best = INFINITY;
	long total = 1;

	for (int i = 0; i < n; i++)
		total *= 3;
	for (long code = 0; code < total; code++) {
		long c = code;
		int skip = 0;
		for (int i = 0; i < n; i++, c /= 3) {
			ch[i] = (char)(c % 3);
			skip |= !it[i].bytes && ch[i] != HP_REMAT_KEEP;
		}
		double x = skip ? INFINITY : model_cost(it, n, mem, lambda, ch);
		if (x < best)
			best = x;
	}
	return best;
}

static uint64_t rnd(uint64_t *s)
{
	*s = *s * 6364136223846793005ull + 1442695040888963407ull;
	return *s >> 33;
}

/* 400 random chains of 9 items (sizes multiples of the DP's unit, so the
 * DP is exact): the DP's cost is the brute-force minimum and its choice
 * has that cost under the model. */
static void test_dp_matches_brute_force(void **state)
{
	(void)state;
	uint64_t s = 17;
	const int n = 9, buckets = 12;
	const uint64_t unit = 4096, mem = unit * buckets;

	for (int round = 0; round < 400; round++) {
		struct hp_remat_item it[9];
		char ch[9];
		double cost, lambda = round % 3 == 0 ? 1 : round % 3 == 1 ? 0.5 : 0.25;
		for (int i = 0; i < n; i++) {
			it[i].bytes = rnd(&s) % 3 == 0 ? 0 : unit * (1 + rnd(&s) % 4);
			/* forward-only items cheap, so that recomputing through them pays */
			it[i].recompute_ms = (double)(1 + rnd(&s) % 100) / (it[i].bytes ? 10 : 1000);
			it[i].swap_ms = (double)(1 + rnd(&s) % 100) / 10;
			it[i].can = rnd(&s) % 3 != 0;
		}
		double want = brute(it, n, mem, lambda);
		int rc = hp_remat_chain(it, n, mem, buckets, lambda, ch, &cost);
		if (isinf(want)) {
			assert_int_equal(rc, HP_EBUDGET);
			continue;
		}
		assert_int_equal(rc, 0);
		assert_true(fabs(cost - want) < 1e-9);
		assert_true(fabs(model_cost(it, n, mem, lambda, ch) - want) < 1e-9);
	}
}

/* By hand, four items of one unit each: A a Gemm (20 ms to recompute, 6
 * to swap), then B, C, D element-wise (0.2, 0.1, 0.3 to recompute, 5 to
 * swap).  Memory for 2 units: nothing swap-free fits (K A, R B leaves C
 * and D nowhere to go: a second K fills the turn, R makes the segment 3);
 * one swap: K R S K = 0.2 + 5 = 5.2 (C read back beside A: 2 units),
 * S R K K = 6.2, K R S R breaks D's segment (A + C + D = 3).  Memory for
 * 3: K K R K = 0.1 (C recomputed beside A and B: 3), K R K K = 0.2. */
static void test_by_hand(void **state)
{
	(void)state;
	const uint64_t u = 1 << 20;
	struct hp_remat_item it[4] = {
		{ u, 20, 6, 1 }, { u, 0.2, 5, 1 }, { u, 0.1, 5, 1 }, { u, 0.3, 5, 1 },
	};
	char ch[4];
	double cost;

	assert_int_equal(hp_remat_chain(it, 4, 2 * u, 2, 1, ch, &cost), 0);
	assert_true(fabs(cost - 5.2) < 1e-9);
	assert_true(fabs(brute(it, 4, 2 * u, 1) - 5.2) < 1e-9);
	assert_memory_equal(ch, ((char[]){ HP_REMAT_KEEP, HP_REMAT_RECOMPUTE, HP_REMAT_SWAP, HP_REMAT_KEEP }), 4);
	assert_int_equal(hp_remat_chain(it, 4, 3 * u, 3, 1, ch, &cost), 0);
	assert_true(fabs(cost - 0.1) < 1e-9);
	assert_memory_equal(ch, ((char[]){ HP_REMAT_KEEP, HP_REMAT_KEEP, HP_REMAT_RECOMPUTE, HP_REMAT_KEEP }), 4);
}

/* The DP on a generated 10,000-item chain at the pass's 32 buckets. */
static void test_dp_time_10000(void **state)
{
	(void)state;
	enum { N = 10000 };
	struct hp_remat_item *it = calloc(N, sizeof *it);
	char *ch = malloc(N);
	uint64_t s = 5;
	double cost, t0;

	assert_non_null(it);
	for (int i = 0; i < N; i++)
		it[i] = (struct hp_remat_item){ 4096 * (1 + rnd(&s) % 64), (double)(rnd(&s) % 1000) / 1e3,
						(double)(rnd(&s) % 1000) / 1e3, 1 };
	t0 = now_s();
	double c0 = clock_s(CLOCK_PROCESS_CPUTIME_ID);
	assert_int_equal(hp_remat_chain(it, N, (uint64_t)4096 * 64 * 200, 32, 1, ch, &cost), 0);
	double dt = now_s() - t0;
	print_message("chain DP, 10000 items, 32 buckets: %.3f s (CPU %.3f s)\n", dt,
		      clock_s(CLOCK_PROCESS_CPUTIME_ID) - c0);
	assert_true(dt < 1.0);
	free(it);
	free(ch);
}

static int add_node(struct hp_graph *g, const char *op, int nin, const int *in, int out)
{
	char name[64];

	snprintf(name, sizeof name, "%s%d", op, g->nnodes);
	int k = hp_graph_add_node(g, name, op, nin, in, 1, &out);
	assert_true(k >= 0);
	return out;
}

/* x[16,64] -> MatMul W -> 9,998 alternating Tanh/Sigmoid -> MSE: a
 * 10,000-node forward (about 20,000 nodes once trained). */
static struct hp_graph *long_chain(int n)
{
	struct hp_graph *g = hp_graph_new("chain");
	struct hp_shape sx = { .rank = 2, .dims = { 16, 64 } }, sw = { .rank = 2, .dims = { 64, 64 } };
	int x = hp_graph_add_value(g, "x", HP_VALUE_INPUT, HP_F32, &sx);
	int w = hp_graph_add_value(g, "w", HP_VALUE_INITIALIZER, HP_F32, &sw);
	float *d = calloc(64 * 64, sizeof *d);

	for (int i = 0; i < 64; i++)
		d[i * 64 + i] = 0.5f;
	g->values[w].data = d;
	g->values[w].src.kind = HP_BLOB_MEMORY;
	g->values[w].trainable = 1;
	g->inputs = malloc(sizeof *g->inputs);
	g->inputs[g->ninputs++] = x;
	int in[2] = { x, w }, cur;
	cur = add_node(g, "MatMul", 2, in, hp_graph_add_value(g, "y0", HP_VALUE_ACTIVATION, HP_UNDEFINED, NULL));
	for (int i = 1; i < n; i++) {
		char name[32];
		snprintf(name, sizeof name, "y%d", i);
		cur = add_node(g, i % 2 ? "Tanh" : "Sigmoid", 1, &cur,
			       hp_graph_add_value(g, name, HP_VALUE_ACTIVATION, HP_UNDEFINED, NULL));
	}
	g->outputs = malloc(sizeof *g->outputs);
	g->outputs[g->noutputs++] = cur;
	g->values[cur].is_output = 1;
	assert_int_equal(hp_graph_finalize(g), 0);
	assert_int_equal(hp_graph_infer(g), 0);
	return g;
}

/* The whole pass (DP, the chosen copies written and planned) on the
 * trained 10,000-node chain under a budget of a quarter of its stash,
 * with a fixed speed model (a measured one depends on the machine's load):
 * kernels at 5 GB/s and 2 us each, a tier at 250/500 MB/s and 100 us per
 * request, where recomputing an element-wise activation beats swapping
 * it.  It recomputes, predicts a shorter step, and its time is reported. */
/* The chain of n nodes trained (MSE), and *po the plan options of a budget
 * of a quarter of its stash with the speed model sc. */
static struct hp_graph *trained_chain(int n, const struct hp_speed_compute *sc, struct hp_plan_opts *po)
{
	struct hp_graph *g = long_chain(n);
	struct hp_train_spec sp;
	struct hp_exec_opts o;
	struct hp_budget_layout l;

	hp_train_spec_init(&sp, sizeof sp);
	sp.loss = HP_LOSS_MSE;
	assert_int_equal(hp_autodiff(g, &sp), 0);
	hp_exec_opts_init(&o, sizeof o);
	o.threads = 1;
	o.budget = (uint64_t)n * 4096 / 4;
	hp_budget_layout(g, &o, &l);
	hp_plan_default_opts(&l, po);
	po->speed = sc;
	return g;
}

static void test_pass_10000(void **state)
{
	(void)state;
	struct hp_plan_opts po;
	struct hp_speed_compute sc = { .threads = 1, .flops = { 1e5, 1e6, 1e7, 1e8 }, .gflops = { 5, 10, 20, 20 },
				       .mem_GBps = 5, .dispatch_us = 2 };
	struct hp_graph *g = trained_chain(10000, &sc, &po);
	struct hp_remat_stats st;

	po.read_MBps = 500;
	po.write_MBps = 250;
	po.read_lat_us = po.write_lat_us = 100;
	int n0 = g->nnodes;
	double c0 = clock_s(CLOCK_PROCESS_CPUTIME_ID);
	assert_int_equal(hp_remat_plan(g, g->outputs[g->noutputs - 1], &po, &st), 0);
	print_message("pass on %d nodes (10000 forward): %.3f s (CPU %.3f s), %d recomputed, predicted step %.1f -> %.1f ms\n",
		      n0, st.plan_ms / 1e3, clock_s(CLOCK_PROCESS_CPUTIME_ID) - c0, st.nodes, st.before_ms, st.after_ms);
	assert_true(st.nodes > 0);
	assert_int_equal(g->nnodes, n0 + st.nodes);
	assert_true(st.after_ms < st.before_ms);
	hp_graph_free(g);
}

/* The most plan of g holds below DRAM at once. */
static uint64_t foot_peak(const struct hp_graph *g, const struct hp_plan_opts *po)
{
	struct hp_plan *p = NULL;
	uint64_t state, swapped, peak = 0;

	assert_int_equal(hp_plan_build(g, po, &p), 0);
	assert_int_equal(hp_plan_footprint_of(g, p, &state, &swapped, &peak), 0);
	hp_plan_free(p);
	return peak;
}

/* A tier so fast that swapping every activation beats recomputing any:
 * without a room nothing is recomputed; with the tiers' room below what
 * that plan holds at once, the pass recomputes until its plan fits the
 * room (a plan that swapped more than a bounded tier held was refused
 * before the run, where recomputing more fit). */
static void test_room(void **state)
{
	(void)state;
	struct hp_speed_compute sc = { .threads = 1, .flops = { 1e5, 1e6, 1e7, 1e8 }, .gflops = { 0.5, 1, 1, 1 },
				       .mem_GBps = 0.5, .dispatch_us = 20 };
	struct hp_plan_opts po;
	struct hp_remat_stats st;
	uint64_t peak0, room;

	for (int bounded = 0; bounded < 2; bounded++) {
		struct hp_graph *g = trained_chain(200, &sc, &po);
		po.read_MBps = po.write_MBps = 1e6;
		po.read_lat_us = po.write_lat_us = 0.01;
		peak0 = foot_peak(g, &po);
		room = bounded ? peak0 / 2 : 0;
		assert_int_equal(hp_remat_plan_room(g, g->outputs[g->noutputs - 1], &po, room, &st), 0);
		uint64_t peak = foot_peak(g, &po);
		print_message("room %llu: %d recomputed, tiers hold %llu at once (%llu without recomputation)\n",
			      (unsigned long long)room, st.nodes, (unsigned long long)peak, (unsigned long long)peak0);
		if (!bounded) {
			assert_int_equal(st.nodes, 0);
			assert_true(peak0 > 0);
		} else {
			assert_true(st.nodes > 0);
			assert_true(peak <= room);
		}
		hp_graph_free(g);
	}
}

/* A budget the step does not fit: the pass changes nothing and says it
 * was refused, leaving the figure a plan of the graph names (the
 * trainer's budget check takes that refusal for its own, exec/train.c
 * fits); a budget it fits is not refused. */
static void test_refused(void **state)
{
	(void)state;
	struct hp_speed_compute sc = { .threads = 1, .flops = { 1e5, 1e6, 1e7, 1e8 }, .gflops = { 5, 10, 20, 20 },
				       .mem_GBps = 5, .dispatch_us = 2 };
	struct hp_plan_opts po;
	struct hp_remat_stats st;
	struct hp_plan *p = NULL;
	struct hp_graph *g = trained_chain(200, &sc, &po);
	int n0 = g->nnodes, loss = g->outputs[g->noutputs - 1];

	assert_int_equal(hp_remat_plan(g, loss, &po, &st), 0);
	assert_int_equal(st.refused, 0);
	n0 = g->nnodes;
	po.budget = 4096;
	assert_int_equal(hp_remat_plan(g, loss, &po, &st), 0);
	assert_int_equal(st.refused, 1);
	assert_int_equal(g->nnodes, n0);
	uint64_t named = hp_exec_min_budget();
	assert_true(named > po.budget);
	hp_plan_needed = 0;
	assert_int_equal(hp_plan_build(g, &po, &p), HP_EBUDGET_OP);
	assert_true(hp_exec_min_budget() == named);
	hp_graph_free(g);
}

/* Two plans of one graph alike: schedule, moves and times. */
static void same_plan(const struct hp_plan *a, const struct hp_plan *b)
{
	assert_int_equal(a->nsteps, b->nsteps);
	assert_int_equal(a->nacts, b->nacts);
	assert_true(a->bytes_loaded == b->bytes_loaded && a->bytes_written == b->bytes_written);
	assert_true(a->loads == b->loads && a->prefetched == b->prefetched && a->peak_bytes == b->peak_bytes);
	assert_true(a->predicted_ms == b->predicted_ms);
	assert_memory_equal(a->node, b->node, (size_t)a->nsteps * sizeof *a->node);
	assert_memory_equal(a->acts, b->acts, (size_t)a->nacts * sizeof *a->acts);
}

/* The search's plan by Belady's policy (hp_remat_ext), which a trainer's
 * budget check weighs the other policies against (hp_plan_build_from):
 * the plan of the graph it leaves, whether it recomputes nothing (the
 * plan of g as it came) or chose recomputations (the plan of the chosen
 * candidate, adopted); built from it, the plan is hp_plan_build's.  Under
 * the built-in speed models (no cache: what it chooses does not depend
 * on figures measured under some load). */
static void test_belady_handed(void **state)
{
	(void)state;
	struct hp_speed_compute sc = { .threads = 1, .flops = { 1e5, 1e6, 1e7, 1e8 }, .gflops = { 5, 10, 20, 20 },
				       .mem_GBps = 5, .dispatch_us = 2 };
	int compared = 0, moved = 0, recomputing = 0;
	char *xdg = getenv("XDG_CACHE_HOME") ? strdup(getenv("XDG_CACHE_HOME")) : NULL;
	char *home = getenv("HOME") ? strdup(getenv("HOME")) : NULL;

	setenv("XDG_CACHE_HOME", "none", 1); /* relative: no cache (exec/speed_cache.c) */
	setenv("HOME", "none", 1);

	for (int q = 4; q <= 48; q++) { /* eighths: the window where it swaps is narrow */
		struct hp_plan_opts po;
		struct hp_exec_opts o;
		struct hp_remat_stats st;
		struct hp_plan *b = NULL, *p0 = NULL, *p = NULL, *pf = NULL;
		void *model = NULL;
		struct hp_graph *g = trained_chain(200, &sc, &po);
		hp_exec_opts_init(&o, sizeof o);
		o.threads = 1;
		o.budget = po.budget * (uint64_t)q / 8;
		assert_int_equal(hp_remat_ext(g, g->outputs[g->noutputs - 1], &o, 0, &st, &b), 0);
		print_message("budget %llu: %d recomputed\n", (unsigned long long)o.budget, st.nodes);
		recomputing += st.nodes > 0;
		assert_non_null(b);
		assert_int_equal(hp_plan_speed_opts(g, &o, &po, &model, 0), 0);
		po.victims = 0;
		assert_int_equal(hp_plan_build(g, &po, &p0), 0);
		same_plan(b, p0);
		po.victims = HP_PLAN_VICTIMS;
		assert_int_equal(hp_plan_build(g, &po, &p), 0);
		assert_int_equal(hp_plan_build_from(g, &po, b, &pf), 0);
		same_plan(p, pf);
		compared++;
		moved += p->bytes_loaded > 0;
		hp_plan_free(p0);
		hp_plan_free(p);
		hp_plan_free(pf);
		free(model);
		hp_graph_free(g);
	}
	print_message("%d plans compared, %d moving data, %d recomputing\n", compared, moved, recomputing);
	if (xdg)
		setenv("XDG_CACHE_HOME", xdg, 1);
	if (home)
		setenv("HOME", home, 1);
	free(xdg);
	free(home);
	assert_true(compared > 0 && moved > 0 && recomputing > 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_dp_matches_brute_force),
		cmocka_unit_test(test_by_hand),
		cmocka_unit_test(test_dp_time_10000),
		cmocka_unit_test(test_pass_10000),
		cmocka_unit_test(test_room),
		cmocka_unit_test(test_refused),
		cmocka_unit_test(test_belady_handed),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
