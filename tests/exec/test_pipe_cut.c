/* The choice of pipeline stages over a chain (exec/pipe_cut.c) against a
 * brute-force search over every cut set, computed here with plain loops,
 * on random small chains (with and without a link whose transfers pace
 * the pipeline); and the cases issue 14 names: a heavy node alone
 * in its stage, a balanced chain split evenly, ties going to the smaller
 * boundary, the smallest cap when nothing fits, 10k nodes over 64 stages
 * fast. */
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
#include "exec/pipe_cut.h"
#include "exec/speed.h"

#define MAXN 10000

struct chain_buf {
	struct hp_pipe_chain c;
	double fwd[MAXN], bwd[MAXN], opt[MAXN], xfer[MAXN + 1];
	uint64_t need[MAXN], cut[MAXN + 1], state[MAXN], acts[MAXN];
	int64_t params[MAXN];
};

static struct chain_buf *chain_new(int n)
{
	struct chain_buf *b = calloc(1, sizeof *b);

	assert_non_null(b);
	b->c = (struct hp_pipe_chain){ .n = n, .fwd_ms = b->fwd, .bwd_ms = b->bwd, .opt_ms = b->opt, .need = b->need,
				       .cut = b->cut, .params = b->params, .state = b->state, .acts = b->acts };
	return b;
}

static uint64_t rnd_state = 88172645463325252ull;

static uint64_t rnd(void)
{
	rnd_state ^= rnd_state << 13;
	rnd_state ^= rnd_state >> 7;
	rnd_state ^= rnd_state << 17;
	return rnd_state;
}

/* ---- the reference: every cut set ------------------------------------------ */

struct best {
	int found;
	double limit;      /* > 0: second pass, fewest bytes among slowest <= limit */
	double slowest;
	uint64_t bytes, min_mem;
	int bounds[16];
};

static void score(const struct chain_buf *b, int P, const int *bd, uint64_t cap, struct best *r)
{
	double slow = 0;
	uint64_t bytes = 0, mem = 0;
	int fits = 1;

	for (int s = 0; s < P; s++) {
		double t = 0;
		uint64_t m = 0;
		for (int k = bd[s]; k < bd[s + 1]; k++) {
			t += b->fwd[k] + b->bwd[k] + b->opt[k];
			m = b->need[k] > m ? b->need[k] : m;
		}
		if (b->c.xfer_ms && s + 1 < P && b->xfer[bd[s + 1]] > t)
			t = b->xfer[bd[s + 1]]; /* the link paces the pipeline */
		m += 2 * (b->cut[bd[s]] + b->cut[bd[s + 1]]);
		slow = t > slow ? t : slow;
		mem = m > mem ? m : mem;
		fits &= !cap || m <= cap;
		bytes += s ? b->cut[bd[s]] : 0;
	}
	r->min_mem = mem < r->min_mem ? mem : r->min_mem;
	if (!fits || (r->limit > 0 && slow > r->limit))
		return;
	if (r->limit > 0 ? !r->found || bytes < r->bytes
			 : !r->found || slow < r->slowest || (slow == r->slowest && bytes < r->bytes)) {
		r->found = 1;
		r->slowest = slow;
		r->bytes = bytes;
		memcpy(r->bounds, bd, (size_t)(P + 1) * sizeof *bd);
	}
}

static void brute(const struct chain_buf *b, int P, uint64_t cap, int s, int *bd, struct best *r)
{
	int n = b->c.n;

	if (s == P) {
		if (bd[P - 1] < n) {
			bd[P] = n;
			score(b, P, bd, cap, r);
		}
		return;
	}
	for (int c = bd[s - 1] + 1; c <= n - (P - s); c++) {
		bd[s] = c;
		brute(b, P, cap, s + 1, bd, r);
	}
}

static void enumerate(const struct chain_buf *b, int P, uint64_t cap, struct best *r)
{
	int bd[17] = { 0 };

	if (P == 1) {
		bd[1] = b->c.n;
		score(b, 1, bd, cap, r);
		return;
	}
	brute(b, P, cap, 1, bd, r);
}

/* The fastest slowest stage V; then, within V (1 + tol), the fewest bytes. */
static void reference(const struct chain_buf *b, int P, uint64_t cap, double tol, struct best *r)
{
	memset(r, 0, sizeof *r);
	r->min_mem = UINT64_MAX;
	enumerate(b, P, cap, r);
	if (!r->found || tol <= 0)
		return;
	r->limit = r->slowest * (1 + tol);
	r->limit += 1e-9 * r->limit;
	r->found = 0;
	enumerate(b, P, cap, r);
}

static void random_chain(struct chain_buf *b, int n)
{
	b->c.n = n;
	for (int k = 0; k < n; k++) {
		b->fwd[k] = (double)(1 + rnd() % 9);
		b->bwd[k] = (double)(rnd() % 12);
		b->opt[k] = (double)(rnd() % 3);
		b->need[k] = 1 + rnd() % 100;
		b->cut[k] = k ? rnd() % 40 : 0;
		b->xfer[k] = k ? (double)(rnd() % 40) : 0;
	}
	b->cut[n] = 0;
	b->xfer[n] = 0;
	b->c.xfer_ms = rnd() % 2 ? b->xfer : NULL;
}

static void test_against_brute_force(void **state)
{
	struct chain_buf *b = chain_new(1);
	int cases = 0, infeasible = 0;

	(void)state;
	for (int it = 0; it < 3000; it++) {
		int n = 1 + (int)(rnd() % 10), P = 1 + (int)(rnd() % (n < 6 ? n : 6)), bounds[17];
		uint64_t cap = rnd() % 3 ? 0 : 60 + rnd() % 120, crossing = 0, min_cap = 0;
		double slowest = 0, tol = rnd() % 2 ? 0 : 0.15;
		struct best r;
		random_chain(b, n);
		reference(b, P, cap, tol, &r);
		int rc = hp_pipe_partition(&b->c, P, cap, tol, bounds, &slowest, &crossing, &min_cap);
		if (!r.found) {
			assert_int_equal(rc, HP_EBUDGET);
			assert_int_equal(min_cap, r.min_mem); /* the smallest cap any cut set fits in */
			infeasible++;
			continue;
		}
		assert_int_equal(rc, 0);
		assert_true(tol > 0 || slowest == r.slowest);
		assert_int_equal(crossing, r.bytes);
		/* the bounds returned achieve what they claim */
		struct best mine = { .min_mem = UINT64_MAX, .limit = r.limit };
		score(b, P, bounds, cap, &mine);
		assert_true(mine.found && mine.slowest == slowest && mine.bytes == r.bytes);
		if (tol <= 0)
			assert_true(mine.slowest == r.slowest);
		cases++;
	}
	assert_true(cases > 1000 && infeasible > 50);
	free(b);
}

/* 8 nodes, one 20 times the others: alone in its stage. */
static void test_heavy_node_alone(void **state)
{
	struct chain_buf *b = chain_new(8);
	int bounds[4];
	double slowest;
	uint64_t crossing, min_cap;

	(void)state;
	for (int k = 0; k < 8; k++)
		b->fwd[k] = k == 3 ? 20 : 1;
	assert_int_equal(hp_pipe_partition(&b->c, 3, 0, 0, bounds, &slowest, &crossing, &min_cap), 0);
	assert_true(slowest == 20);
	assert_int_equal(bounds[1], 3);
	assert_int_equal(bounds[2], 4);
	free(b);
}

static void test_balanced_even(void **state)
{
	struct chain_buf *b = chain_new(12);
	int bounds[5];
	double slowest;
	uint64_t crossing, min_cap;

	(void)state;
	for (int k = 0; k < 12; k++) {
		b->fwd[k] = 1;
		b->bwd[k] = 2;
		b->cut[k] = k ? 100 : 0;
	}
	assert_int_equal(hp_pipe_partition(&b->c, 4, 0, 0, bounds, &slowest, &crossing, &min_cap), 0);
	for (int s = 0; s <= 4; s++)
		assert_int_equal(bounds[s], 3 * s);
	assert_true(slowest == 9);
	assert_int_equal(crossing, 300);
	free(b);
}

/* [1, 1, 1] over 2 stages: cut at 1 or at 2 tie on the slowest stage (2);
 * the cut with fewer bytes wins, whichever side it is on. */
static void test_tie_smaller_boundary(void **state)
{
	struct chain_buf *b = chain_new(3);
	int bounds[3];
	double slowest;
	uint64_t crossing, min_cap;

	(void)state;
	for (int k = 0; k < 3; k++)
		b->fwd[k] = 1;
	b->cut[1] = 100;
	b->cut[2] = 10;
	assert_int_equal(hp_pipe_partition(&b->c, 2, 0, 0, bounds, &slowest, &crossing, &min_cap), 0);
	assert_int_equal(bounds[1], 2);
	assert_int_equal(crossing, 10);
	b->cut[1] = 5;
	assert_int_equal(hp_pipe_partition(&b->c, 2, 0, 0, bounds, &slowest, &crossing, &min_cap), 0);
	assert_int_equal(bounds[1], 1);
	assert_int_equal(crossing, 5);
	free(b);
}

/* Needs [10, 50, 10, 10], cuts 0|4|1|30|0 over 2 stages: the cuts' working
 * sets are max(need) + 2 (cut_lo + cut_hi): at 1: 10+8, 50+8; at 2: 50+2,
 * 10+2; at 3: 50+60, 10+60.  The smallest cap is 52 (cut at 2), although
 * the fastest cut is elsewhere; a cap of 51 fits none. */
/* [4, 5, 5] over 2 stages: the cut at 1 gives 10, at 2 gives 9 (fastest)
 * but carries 100 bytes against 1: within 15% the cheaper cut wins,
 * exactly the faster one. */
static void test_tolerance(void **state)
{
	struct chain_buf *b = chain_new(3);
	int bounds[3];
	double slowest;
	uint64_t crossing, min_cap;

	(void)state;
	b->fwd[0] = 4;
	b->fwd[1] = b->fwd[2] = 5;
	b->cut[1] = 1;
	b->cut[2] = 100;
	assert_int_equal(hp_pipe_partition(&b->c, 2, 0, 0, bounds, &slowest, &crossing, &min_cap), 0);
	assert_int_equal(bounds[1], 2);
	assert_true(slowest == 9);
	assert_int_equal(hp_pipe_partition(&b->c, 2, 0, 0.15, bounds, &slowest, &crossing, &min_cap), 0);
	assert_int_equal(bounds[1], 1);
	assert_true(slowest == 10);
	assert_int_equal(crossing, 1);
	assert_int_equal(hp_pipe_partition(&b->c, 2, 0, 0.1, bounds, &slowest, &crossing, &min_cap), 0);
	assert_int_equal(bounds[1], 2); /* 10 > 9 * 1.1 */
	free(b);
}

/* [1, 1, 1, 1] over 2 stages: the middle cut, unless its transfer (10)
 * outlasts what either other cut costs (3, transfer 0.5). */
static void test_link_paces(void **state)
{
	struct chain_buf *b = chain_new(4);
	int bounds[3];
	double slowest;
	uint64_t crossing, min_cap;

	(void)state;
	for (int k = 0; k < 4; k++)
		b->fwd[k] = 1;
	assert_int_equal(hp_pipe_partition(&b->c, 2, 0, 0, bounds, &slowest, &crossing, &min_cap), 0);
	assert_int_equal(bounds[1], 2);
	b->xfer[1] = b->xfer[3] = 0.5;
	b->xfer[2] = 10;
	b->c.xfer_ms = b->xfer;
	assert_int_equal(hp_pipe_partition(&b->c, 2, 0, 0, bounds, &slowest, &crossing, &min_cap), 0);
	assert_true(bounds[1] == 1 || bounds[1] == 3);
	assert_true(slowest == 3);
	free(b);
}

static void test_budget_smallest_cap(void **state)
{
	struct chain_buf *b = chain_new(4);
	static const uint64_t need[4] = { 10, 50, 10, 10 }, cut[5] = { 0, 4, 1, 30, 0 };
	int bounds[3];
	double slowest;
	uint64_t crossing, min_cap = 0;

	(void)state;
	for (int k = 0; k < 4; k++) {
		b->fwd[k] = k == 3 ? 5 : 1;
		b->need[k] = need[k];
	}
	memcpy(b->cut, cut, sizeof cut);
	assert_int_equal(hp_pipe_partition(&b->c, 2, 0, 0, bounds, &slowest, &crossing, &min_cap), 0);
	assert_int_equal(bounds[1], 3); /* unlimited: the heavy last node alone */
	assert_int_equal(hp_pipe_partition(&b->c, 2, 51, 0, bounds, &slowest, &crossing, &min_cap), HP_EBUDGET);
	assert_int_equal(min_cap, 52);
	assert_int_equal(hp_pipe_partition(&b->c, 2, 52, 0, bounds, &slowest, &crossing, &min_cap), 0);
	assert_int_equal(bounds[1], 2);
	assert_true(slowest == 6);
	free(b);
}

static void test_too_many_stages(void **state)
{
	struct chain_buf *b = chain_new(3);
	int bounds[5];
	double slowest;
	uint64_t crossing, min_cap;

	(void)state;
	assert_int_equal(hp_pipe_partition(&b->c, 4, 0, 0, bounds, &slowest, &crossing, &min_cap), HP_EUSAGE);
	assert_non_null(strstr(hp_errmsg(), "4 pipeline stages over 3 nodes"));
	free(b);
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts); /* CPU: the machine is shared */
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* 10k nodes over 64 stages, with and without a binding cap, and refused. */
static void test_large_fast(void **state)
{
	struct chain_buf *b = chain_new(MAXN);
	int bounds[65];
	double slowest, t0, dt;
	uint64_t crossing, min_cap;

	(void)state;
	random_chain(b, MAXN);
	t0 = now_s();
	assert_int_equal(hp_pipe_partition(&b->c, 64, 0, 0, bounds, &slowest, &crossing, &min_cap), 0);
	assert_int_equal(hp_pipe_partition(&b->c, 64, 150, 0, bounds, &slowest, &crossing, &min_cap), 0);
	for (int s = 0; s < 64; s++) {
		assert_true(bounds[s] < bounds[s + 1]);
		assert_true(hp_pipe_stage_need(&b->c, bounds[s], bounds[s + 1]) <= 150);
		assert_true(hp_pipe_stage_ms(&b->c, bounds[s], bounds[s + 1]) <= slowest * (1 + 1e-9));
	}
	/* and a cap just below the smallest that fits: refused, naming it */
	for (int k = 0; k < MAXN; k++) {
		b->need[k] = 50;
		b->cut[k] = k ? 1 + rnd() % 40 : 0;
	}
	assert_int_equal(hp_pipe_partition(&b->c, 64, 53, 0, bounds, &slowest, &crossing, &min_cap), HP_EBUDGET);
	assert_int_equal(min_cap, 54); /* 63 cuts of 1 byte exist among 10000 */
	dt = now_s() - t0;
	printf("10000 nodes over 64 stages, three times: %.3f s of CPU\n", dt);
	assert_true(dt < 1.0); /* about 0.05 s */
	free(b);
}

/* hp_pipe_choose on a model file (the source tree's MLP: Gemm 64x256,
 * Relu, Gemm 256x256, Relu, Gemm 256x10) with a fixed speed model: the
 * bounds cover the nodes, describe agrees with them, a budget too small is
 * HP_EBUDGET naming one that works, a graph without nodes is refused. */
static void test_choose_model(void **state)
{
	const char *src = getenv("HPDLF_SOURCE_DIR");
	struct hp_speed_compute sp = { .threads = 1, .flops = { 1e5, 1e6, 1e7, 1e8 }, .gflops = { 5, 10, 20, 40 },
				       .mem_GBps = 10, .dispatch_us = 1 };
	struct hp_pipe_choose_opts o;
	struct hp_pipe_desc d;
	struct hp_shape s = { 2, { 30, 64 } };
	struct hp_graph *g = NULL, *bare = hp_graph_new("bare");
	char path[4096];
	int bounds[3];

	(void)state;
	if (!src)
		skip();
	snprintf(path, sizeof path, "%s/tests/models/mlp/model.onnx", src);
	assert_int_equal(hp_graph_load(path, &g), 0);
	assert_int_equal(hp_graph_set_input_shape(g, "input", &s), 0);
	assert_int_equal(hp_graph_infer(g), 0);
	hp_pipe_choose_opts_init(&o, sizeof o);
	o.speed = &sp;
	o.micro_batches = 2;
	assert_int_equal(hp_pipe_choose(g, 2, &o, bounds), 0);
	assert_true(bounds[0] == 0 && bounds[1] > 0 && bounds[1] < 5 && bounds[2] == 5);
	assert_int_equal(hp_pipe_describe(g, 2, bounds, &o, &d), 0);
	assert_int_equal(d.stages[0].last + 1, d.stages[1].first);
	assert_int_equal(d.stages[0].params + d.stages[1].params, 64 * 256 + 256 + 256 * 256 + 256 + 256 * 10 + 10);
	assert_true(d.bubble > 0.333 && d.bubble < 0.334); /* (2-1)/(2+2-1) */
	assert_true(d.slowest_ms >= d.stages[0].ms && d.slowest_ms >= d.stages[1].ms);
	assert_true(d.stages[1].cut_after == 0 && d.stages[0].cut_after == 30 * 256 * 4); /* every cut: one [30, 256] */
	hp_pipe_desc_free(&d);
	o.budget = 4096;
	assert_int_equal(hp_pipe_choose(g, 2, &o, bounds), HP_EBUDGET);
	assert_non_null(strstr(hp_errmsg(), "per rank would"));
	assert_int_equal(hp_pipe_choose(bare, 1, &o, bounds), HP_EUSAGE); /* no nodes: each stage needs one */
	hp_graph_free(bare);
	hp_graph_free(g);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_against_brute_force), cmocka_unit_test(test_heavy_node_alone),
		cmocka_unit_test(test_balanced_even),	     cmocka_unit_test(test_tie_smaller_boundary),
		cmocka_unit_test(test_budget_smallest_cap), cmocka_unit_test(test_too_many_stages),
		cmocka_unit_test(test_large_fast),	     cmocka_unit_test(test_tolerance),
		cmocka_unit_test(test_choose_model),	     cmocka_unit_test(test_link_paces),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
