/* One budget layout (exec/budget.c): for a range of budgets the layout's
 * figures match a table worked out by hand from the rules (chunk at most a
 * 16th of the budget, a 64th below 4 MiB, never below 8 KiB; staging two
 * chunks), and the planner's options, the splitters' smallest budget, the
 * session's store and the error of a too-small budget all see that layout.
 * The same graph compiled by hp_graph_compile (what --plan plans) and by
 * hp_session_create is the same graph with the same smallest budget. */
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
#include "hpdlf/store.h"
#include "exec/budget.h"
#include "exec/exec_internal.h"
#include "exec/plan.h"
#include "exec/split.h"

#define KIB 1024ull
#define MIB (1024ull * 1024)

static const struct {
	uint64_t budget, chunk;
} table[] = {
	{ 256 * KIB, 8 * KIB },   /* a 64th is 4 KiB: the 8 KiB floor */
	{ 512 * KIB, 8 * KIB },   /* a 64th */
	{ 1 * MIB, 16 * KIB },    /* a 64th */
	{ 3 * MIB, 32 * KIB },    /* a 64th is 48 KiB: the power of two below */
	{ 4 * MIB, 256 * KIB },   /* from 4 MiB on: a 16th */
	{ 48 * MIB, 2 * MIB },    /* a 16th is 3 MiB: 2 MiB */
	{ 64 * MIB, 2 * MIB },    /* tensors get 64 MiB less the pool's bookkeeping: a 16th is under 4 MiB */
	{ 1024 * MIB, 4 * MIB },  /* the default chunk */
};
#define NTABLE (sizeof table / sizeof *table)

/* Each 4 KiB page of the store's frame pool carries 9 bytes of
 * bookkeeping (two uint32_t links and an order byte, store/frames.h),
 * resident beside it: the tensors get the pool that fits with it. */
static uint64_t pool(uint64_t room)
{
	return room / (4096 + 9) * 4096;
}

/* What tensors get of a table budget (no fixed overhead in these tests
 * but test_overhead's). */
static uint64_t tensors_of(uint64_t budget)
{
	return budget < 64 * MIB ? budget : pool(budget);
}

static int value(struct hp_graph *g, const char *name, enum hp_value_kind kind, int64_t rows, int64_t cols)
{
	struct hp_shape s = { 2, { rows, cols } };
	int v = hp_graph_add_value(g, name, kind, HP_F32, &s);

	assert_true(v >= 0);
	if (kind == HP_VALUE_INPUT) {
		g->inputs = realloc(g->inputs, (size_t)(g->ninputs + 1) * sizeof(int));
		g->inputs[g->ninputs++] = v;
	}
	if (kind == HP_VALUE_INITIALIZER) {
		float *d = malloc((size_t)(rows * cols) * sizeof(float));
		for (int64_t i = 0; i < rows * cols; i++)
			d[i] = (float)(i % 7) * 0.125f;
		g->values[v].data = d;
		g->values[v].src.kind = HP_BLOB_MEMORY;
	}
	return v;
}

static int node(struct hp_graph *g, const char *name, const char *op, int a, int b)
{
	int in[2] = { a, b }, out = hp_graph_add_value(g, name, HP_VALUE_ACTIVATION, HP_UNDEFINED, NULL);

	assert_true(out >= 0);
	assert_true(hp_graph_add_node(g, name, op, b >= 0 ? 2 : 1, in, 1, &out) >= 0);
	return out;
}

/* x[64,256] -> MatMul w1[256,256] -> Relu -> MatMul w2[256,1024] -> Relu:
 * the second weight (1 MiB) alone exceeds the smaller budgets. */
static struct hp_graph *build(void)
{
	struct hp_graph *g = hp_graph_new("budget-test");
	int x, w1, w2, h;

	assert_non_null(g);
	x = value(g, "x", HP_VALUE_INPUT, 64, 256);
	w1 = value(g, "w1", HP_VALUE_INITIALIZER, 256, 256);
	w2 = value(g, "w2", HP_VALUE_INITIALIZER, 256, 1024);
	h = node(g, "mm1", "MatMul", x, w1);
	h = node(g, "relu1", "Relu", h, -1);
	h = node(g, "mm2", "MatMul", h, w2);
	h = node(g, "relu2", "Relu", h, -1);
	g->outputs = malloc(sizeof(int));
	g->outputs[g->noutputs++] = h;
	assert_int_equal(hp_graph_finalize(g), 0);
	assert_int_equal(hp_graph_infer(g), 0);
	return g;
}

static void opts(struct hp_exec_opts *o, uint64_t budget)
{
	hp_exec_opts_init(o, sizeof *o);
	o->threads = 1;
	o->budget = budget;
}

/* The figures, against the table and against each other. */
static void test_layout_table(void **state)
{
	(void)state;
	for (size_t i = 0; i < NTABLE; i++) {
		struct hp_budget_layout l;
		hp_budget_layout_init(&l, table[i].budget);
		print_message("budget %llu KiB: chunk %llu KiB, staging %llu KiB\n",
			      (unsigned long long)(table[i].budget / KIB), (unsigned long long)(l.chunk / KIB),
			      (unsigned long long)(l.staging / KIB));
		assert_int_equal(l.budget, tensors_of(table[i].budget));
		assert_int_equal(l.chunk, table[i].chunk);
		assert_int_equal(l.staging, 2 * table[i].chunk);
		assert_int_equal(l.workspace, 0);
		assert_int_equal(l.usable, tensors_of(table[i].budget) - 2 * table[i].chunk);
		assert_int_equal(hp_budget_chunk(tensors_of(table[i].budget)), table[i].chunk);
		assert_int_equal(hp_budget_staging(tensors_of(table[i].budget)), 2 * table[i].chunk);
	}
	struct hp_budget_layout z;
	hp_budget_layout_init(&z, 0); /* in core */
	assert_int_equal(z.chunk, 0);
	assert_int_equal(z.staging, 0);
	assert_int_equal(z.usable, 0);
}

/* The planner plans with the layout's budget, workspace, staging and chunk
 * (its tier model's request size); the splitters' smallest budget is the
 * planner's with per-kernel scratch. */
static void test_planner_and_splitter(void **state)
{
	struct hp_graph *g = build();

	(void)state;
	for (size_t i = 0; i < NTABLE; i++) {
		struct hp_exec_opts o;
		struct hp_budget_layout l;
		struct hp_plan_opts po, pk;
		opts(&o, table[i].budget);
		hp_budget_layout(g, &o, &l);
		assert_int_equal(l.chunk, table[i].chunk);
		assert_int_equal(l.staging + l.workspace + l.usable, tensors_of(table[i].budget));
		hp_plan_default_opts(&l, &po);
		assert_int_equal(po.budget, tensors_of(table[i].budget));
		assert_int_equal(po.workspace, l.workspace);
		assert_int_equal(po.chunk, table[i].chunk);
		assert_non_null(po.reserve_for);
		assert_int_equal(po.reserve_for(tensors_of(table[i].budget)), 2 * table[i].chunk);
		assert_int_equal(po.workers, l.workers);
		pk = po;
		pk.workspace = 0;
		assert_int_equal(hp_split_min_budget(g), hp_plan_min_budget(g, &pk, NULL));
	}
	hp_graph_free(g);
}

/* --plan's smallest budget for g compiled for `budget` (planned in core:
 * a plan under a budget below the smallest fails). */
static uint64_t summary_min(struct hp_graph *g, uint64_t budget)
{
	struct hp_exec_opts o;
	struct hp_plan_summary p;

	opts(&o, budget);
	assert_int_equal(hp_graph_compile(g, &o), 0);
	o.budget = 0;
	assert_int_equal(hp_plan_summarize(g, &o, &p), 0);
	return p.min_budget;
}

/* A session sees the layout the planner sees: the store's chunk and
 * budget are the layout's; below the smallest budget the error is
 * HP_EBUDGET_OP with the figure --plan names. */
static void test_session(void **state)
{
	struct hp_tensor x = { .dtype = HP_F32, .shape = { 2, { 64, 256 } } };
	int ran = 0, refused = 0;

	(void)state;
	x.data = calloc(64 * 256, sizeof(float));
	for (size_t i = 0; i < NTABLE; i++) {
		struct hp_graph *g = build(), *gp = build();
		struct hp_exec_opts o;
		struct hp_session *s;
		uint64_t min = summary_min(gp, table[i].budget);
		int rc;
		opts(&o, table[i].budget);
		rc = hp_session_create(g, &o, &s);
		/* the library compiles as --plan does */
		assert_int_equal(g->nnodes, gp->nnodes);
		assert_int_equal(g->nvalues, gp->nvalues);
		print_message("budget %llu KiB: smallest %llu KiB, %d nodes, create %d\n",
			      (unsigned long long)(table[i].budget / KIB), (unsigned long long)(min / KIB), g->nnodes, rc);
		if (min > table[i].budget) {
			assert_int_equal(rc, HP_EBUDGET_OP);
			assert_int_equal(hp_exec_min_budget(), min);
			refused++;
		} else {
			struct hp_budget_layout l;
			struct hs_store_stats st;
			assert_int_equal(rc, 0);
			hp_budget_layout(g, &o, &l);
			assert_memory_equal(&s->layout, &l, sizeof l);
			assert_int_equal(hs_chunk_size(hp_session_store(s)), table[i].chunk);
			assert_int_equal(hp_session_store_stats(s, &st), 0);
			assert_int_equal(st.budget, tensors_of(table[i].budget));
			assert_int_equal(hp_session_set_input(s, "x", &x), 0);
			assert_int_equal(hp_session_run(s), 0);
			hp_session_destroy(s);
			ran++;
		}
		hp_graph_free(g);
		hp_graph_free(gp);
	}
	free(x.data);
	assert_true(ran >= 4); /* from 4 MiB on it fits */
	(void)refused;
}

/* The weight splitter cuts w2 for the small budgets (what made them fit),
 * and leaves it whole where it fits. */
static void test_weight_split(void **state)
{
	(void)state;
	for (size_t i = 0; i < NTABLE; i++) {
		struct hp_graph *g = build();
		int n0 = g->nnodes;
		summary_min(g, table[i].budget);
		if (table[i].budget >= 64 * MIB)
			assert_int_equal(g->nnodes, n0);
		if (table[i].budget <= 1 * MIB)
			assert_true(g->nnodes > n0);
		hp_graph_free(g);
	}
}

/* From 64 MiB on the budget bounds the process: the fixed overhead is
 * taken off what tensors get; below, tensors get the budget up to 64 MiB
 * minus the overhead (at least 16 MiB).  The smallest process budget for a
 * tensor need is exact: it gives that need, one byte less does not. */
static void test_overhead(void **state)
{
	struct hp_budget_layout l;

	(void)state;
	hp_budget_overhead_set(20 * MIB);
	assert_int_equal(hp_budget_tensors(0), 0);
	assert_int_equal(hp_budget_tensors(1 * MIB), 1 * MIB);
	assert_int_equal(hp_budget_tensors(43 * MIB), 43 * MIB);
	assert_int_equal(hp_budget_tensors(44 * MIB), pool(44 * MIB));
	assert_int_equal(hp_budget_tensors(50 * MIB), pool(44 * MIB));
	assert_int_equal(hp_budget_tensors(64 * MIB), pool(44 * MIB));
	assert_int_equal(hp_budget_tensors(100 * MIB), pool(80 * MIB));
	hp_budget_layout_init(&l, 100 * MIB);
	assert_int_equal(l.process, 100 * MIB);
	assert_int_equal(l.overhead, 20 * MIB);
	assert_int_equal(l.budget, pool(80 * MIB));
	assert_true(l.budget + l.budget / 4096 * 9 <= 80 * MIB);
	assert_int_equal(l.chunk, 4 * MIB);
	assert_int_equal(l.staging + l.workspace + l.usable, l.budget);
	hp_budget_layout_init(&l, 10 * MIB);
	assert_int_equal(l.overhead, 0);
	assert_int_equal(l.budget, 10 * MIB);
	for (uint64_t b = 0, prev = 0; b < 200 * MIB; b += 997 * KIB + 13) {
		uint64_t t = hp_budget_tensors(b);
		assert_true(t >= prev); /* more budget never means fewer tensor bytes */
		if (b >= 64 * MIB)
			assert_int_equal(t, pool(b - 20 * MIB));
		prev = t;
	}
	for (uint64_t need = 1; need < 300 * MIB; need += 1531 * KIB + 7) {
		uint64_t b = hp_budget_process_for(need);
		assert_true(hp_budget_tensors(b) >= need);
		assert_true(hp_budget_tensors(b - 1) < need);
	}
	/* an overhead past 48 MiB (libfabric's stack): 16 MiB below 64 MiB,
	 * and from 64 MiB what is left of the budget */
	hp_budget_overhead_set(60 * MIB);
	assert_int_equal(hp_budget_tensors(10 * MIB), 10 * MIB);
	assert_int_equal(hp_budget_tensors(30 * MIB), 16 * MIB);
	assert_int_equal(hp_budget_tensors(64 * MIB), pool(4 * MIB));
	assert_int_equal(hp_budget_tensors(60 * MIB + 1), 16 * MIB);
	assert_int_equal(hp_budget_process_for(16 * MIB), 16 * MIB);
	assert_int_equal(hp_budget_process_for(16 * MIB + 1), 76 * MIB + 4096 + (16 * MIB / 4096 + 1) * 9);
	hp_budget_overhead_set(0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_overhead),
		cmocka_unit_test(test_layout_table),
		cmocka_unit_test(test_planner_and_splitter),
		cmocka_unit_test(test_session),
		cmocka_unit_test(test_weight_split),
	};

	/* the table's figures are tensor budgets: no fixed overhead */
	hp_budget_overhead_set(0);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
