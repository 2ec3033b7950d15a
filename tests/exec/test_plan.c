/* The static planner: its act list replayed by an independent checker
 * (every kernel finds its inputs resident, resident bytes never exceed the
 * budget, nothing is loaded twice or evicted while absent), the budget
 * error below the minimum, planning a 10,000-node graph in well under a
 * second of CPU time, data parallelism's reductions: summed in place
 * over their gradients, their sums never evicted while in flight (until
 * the next reduction is issued), a budget too tight for that still
 * planned, an inference's input read back at a run's end for the next
 * run, an optimizer update ordered after the other readers of its
 * weight so that it writes in place, and a load whose room a write-back
 * frees issued past the kernels that cover the write. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "hpdlf/error.h"
#include "hpdlf/exec.h"
#include "exec/plan.h"
#include "exec/plan_heap.h"

static int value(struct hp_graph *g, const char *name, enum hp_value_kind kind, int rows)
{
	struct hp_shape s = { 2, { rows, 256 } };
	int v = hp_graph_add_value(g, name, kind, HP_F32, &s);

	assert_true(v >= 0);
	if (kind == HP_VALUE_INPUT) {
		g->inputs = realloc(g->inputs, (size_t)(g->ninputs + 1) * sizeof(int));
		g->inputs[g->ninputs++] = v;
	}
	if (kind == HP_VALUE_INITIALIZER) {
		g->values[v].data = calloc((size_t)rows * 256, sizeof(float));
		g->values[v].src.kind = HP_BLOB_MEMORY;
	}
	return v;
}

/* A chain with weights shared at a distance, skip connections and
 * activations of varying size: n nodes, deterministic from seed. */
static struct hp_graph *build_skips(int n, int nweights, uint32_t seed, int skip)
{
	struct hp_graph *g = hp_graph_new("plan-test");
	int *h = malloc((size_t)(n + 1) * sizeof *h), *w = malloc((size_t)nweights * sizeof *w);
	char name[32];

	assert_non_null(g);
	h[0] = value(g, "x", HP_VALUE_INPUT, 64);
	for (int k = 0; k < nweights; k++) {
		snprintf(name, sizeof name, "w%d", k);
		w[k] = value(g, name, HP_VALUE_INITIALIZER, 64);
	}
	for (int i = 1; i <= n; i++) {
		int in[2], out;
		seed = seed * 1664525u + 1013904223u;
		snprintf(name, sizeof name, "h%d", i);
		out = hp_graph_add_value(g, name, HP_VALUE_ACTIVATION, HP_UNDEFINED, NULL);
		in[0] = h[i - 1];
		if ((seed >> 8) % 3 == 0) {
			assert_true(hp_graph_add_node(g, name, "Relu", 1, in, 1, &out) >= 0);
		} else {
			in[1] = (seed >> 8) % 3 == 1 ? w[(seed >> 12) % (uint32_t)nweights]
						      : h[i > skip ? i - 1 - (int)((seed >> 12) % (uint32_t)skip) : 0];
			assert_true(hp_graph_add_node(g, name, "Add", 2, in, 1, &out) >= 0);
		}
		h[i] = out;
	}
	g->outputs = malloc(sizeof(int));
	g->outputs[g->noutputs++] = h[n];
	assert_int_equal(hp_graph_finalize(g), 0);
	assert_int_equal(hp_graph_infer(g), 0);
	free(h);
	free(w);
	return g;
}

static struct hp_graph *build(int n, int nweights, uint32_t seed)
{
	return build_skips(n, nweights, seed, 7);
}

static uint64_t size_of(const struct hp_graph *g, int v)
{
	struct hp_tensor t = { .dtype = g->values[v].dtype, .shape = g->values[v].shape };
	uint64_t b = (hp_tensor_bytes(&t) + 4095) / 4096 * 4096;

	return b ? b : 4096;
}

static int managed(const struct hp_graph *g, int v)
{
	return v >= 0 && g->values[v].kind != HP_VALUE_CONSTANT;
}

static int inplace_steps;

/* res[v]: 1 resident, 2 loaded and not read since (a load evicted in that
 * state was read for nothing: the plan must not make one) */
static void apply_act(const struct hp_graph *g, const struct hp_plan_act_rec *x, char *res, uint64_t *cur,
		      uint64_t budget, int s)
{
	if (x->act == HP_ACT_LOAD) {
		assert_false(res[x->value]);   /* loaded while resident */
		assert_true(x->for_step >= s);
		res[x->value] = 2;
		*cur += size_of(g, x->value);
		assert_true(*cur <= budget);
	} else {
		assert_int_not_equal(res[x->value], 2); /* a load evicted before its read */
		assert_true(res[x->value]);    /* evicted while absent */
		res[x->value] = 0;
		*cur -= size_of(g, x->value);
	}
}

/* Replay the plan's acts and kernels against the budget. */
static void replay(const struct hp_graph *g, const struct hp_plan *p, uint64_t budget)
{
	char *res = calloc((size_t)g->nvalues, 1);
	uint64_t cur = 0, peak = 0;

	for (int v = 0; v < g->nvalues; v++)
		if (p->start_resident[v]) {
			res[v] = 1;
			cur += size_of(g, v);
		}
	assert_true(cur <= budget);
	for (int s = 0; s < p->nsteps; s++) {
		const struct hp_node *n = &g->nodes[p->node[s]];
		for (int a = p->act_begin[s]; a < p->act_begin[s + 1]; a++)
			apply_act(g, &p->acts[a], res, &cur, budget, s);
		for (int j = 0; j < n->ninputs; j++)
			if (managed(g, n->inputs[j])) {
				assert_true(res[n->inputs[j]]); /* a kernel without its input */
				res[n->inputs[j]] = 1;
			}
		for (int o = 0; o < n->noutputs; o++) {
			if (!hp_plan_inplace_at(g, p, s, o))
				continue;
			/* the output takes its input's bytes: legal only if the
			 * input is resident, dies here and has the same size */
			int a = n->inputs[o], b = n->outputs[o];
			assert_true(res[a] && !res[b]);
			assert_int_equal(p->last_use[a], s);
			assert_int_equal(size_of(g, a), size_of(g, b));
			res[a] = 0;
			res[b] = 1;
			inplace_steps++;
		}
		for (int o = 0; o < n->noutputs; o++)
			if (managed(g, n->outputs[o]) && !res[n->outputs[o]]) {
				res[n->outputs[o]] = 1;
				cur += size_of(g, n->outputs[o]);
			}
		assert_true(cur <= budget);
		peak = cur > peak ? cur : peak;
		for (int j = 0; j < n->ninputs; j++) {
			int v = n->inputs[j];
			if (managed(g, v) && res[v] && p->last_use[v] == s) {
				res[v] = 0;
				cur -= size_of(g, v);
			}
		}
		for (int o = 0; o < n->noutputs; o++) {
			int v = n->outputs[o];
			if (managed(g, v) && res[v] && p->last_use[v] < 0) {
				res[v] = 0;
				cur -= size_of(g, v);
			}
		}
	}
	assert_true(peak <= p->peak_bytes);
	free(res);
}

static struct hp_plan *plan_victims(const struct hp_graph *g, uint64_t budget, int victims)
{
	struct hp_plan_opts o = { .budget = budget, .align = 4096, .gflops = 50, .read_MBps = 2000, .write_MBps = 1500,
				  .victims = victims };
	struct hp_plan *p;

	int rc = hp_plan_build(g, &o, &p);

	if (rc < 0)
		print_message("budget %llu: %s\n", (unsigned long long)budget, hp_errmsg());
	assert_int_equal(rc, 0);
	return p;
}

static struct hp_plan *plan(const struct hp_graph *g, uint64_t budget)
{
	return plan_victims(g, budget, 0);
}

static void test_replay(void **state)
{
	(void)state;
	for (uint32_t seed = 1; seed <= 6; seed++) {
		struct hp_graph *g = build(300, 1 + (int)seed * 5, seed);
		struct hp_plan *p = plan(g, 0);
		uint64_t peak = p->peak_bytes, minb = p->min_budget;
		hp_plan_free(p);
		uint64_t budgets[] = { peak, peak / 2, peak / 4, peak / 8, minb + 8192, minb };
		for (size_t i = 0; i < sizeof budgets / sizeof budgets[0]; i++) {
			uint64_t b = budgets[i] < minb ? minb : budgets[i];
			p = plan(g, b);
			replay(g, p, b);
			if (b < peak)
				assert_true(p->bytes_loaded > 0);
			hp_plan_free(p);
		}
		hp_graph_free(g);
	}
	assert_true(inplace_steps > 0); /* Relu over a dying input runs in place */
}

/* What a plan's I/O costs by plan.c's io_cost: bytes at 2200 and 1500
 * MB/s, 1 us a request. */
static double moved(const struct hp_plan *p)
{
	int wb = 0;

	for (int a = 0; a < p->nacts; a++)
		wb += p->acts[a].act == HP_ACT_WRITEBACK;
	return (double)p->bytes_loaded / 2200 + (double)p->bytes_written / 1500 + (double)(p->loads + (uint64_t)wb);
}

/* Every victim policy (hp_plan_default_opts): the plan kept replays within
 * the budget and costs no more than Belady's alone (victims 0), and less
 * somewhere (the weights are clean: evicting one costs a read, evicting an
 * activation a write and a read). */
static void test_victim_policies(void **state)
{
	int fewer = 0, cases = 0;

	(void)state;
	for (uint32_t seed = 1; seed <= 6; seed++) {
		/* skip connections up to 40 steps back, a few weights read often */
		struct hp_graph *g = build_skips(300, 1 + (int)seed, seed, 40);
		struct hp_plan *p = plan(g, 0);
		uint64_t peak = p->peak_bytes, minb = p->min_budget;
		hp_plan_free(p);
		for (int d = 2; d <= 12; d++) {
			uint64_t b = peak / (uint64_t)d < minb ? minb : peak / (uint64_t)d;
			struct hp_plan *one = plan(g, b), *all = plan_victims(g, b, HP_PLAN_VICTIMS);
			replay(g, all, b);
			assert_true(moved(all) <= moved(one) + 1e-6);
			fewer += moved(all) < moved(one);
			cases++;
			hp_plan_free(one);
			hp_plan_free(all);
		}
		hp_graph_free(g);
	}
	print_message("%d of %d plans cost less with every victim policy than with Belady's alone\n", fewer, cases);
	assert_true(fewer >= 1);
}

/* VICTIM_SMALL_LAST: a step that needs more room than a small value
 * frees.  Belady's farthest next use drops the 4-KiB weight w first (read
 * again only at the last step), then the 64-KiB h1 anyway, and reads w
 * back: a request for nothing.  The policies together keep w resident
 * (h1 alone makes the room) and choose that plan: one load fewer. */
static void test_small_last(void **state)
{
	enum { K = 8 };
	struct hp_graph *g = hp_graph_new("plan-test");
	int x = value(g, "x", HP_VALUE_INPUT, 64), w = value(g, "w", HP_VALUE_INITIALIZER, 1), h[K + 2];
	uint64_t b = 3 * 65536 + 4096 + 8192; /* three large values, w and less than one more */
	char name[32];
	int wloads[2] = { 0, 0 };

	(void)state;
	for (int i = 1; i <= K + 1; i++) {
		snprintf(name, sizeof name, "h%d", i);
		h[i] = hp_graph_add_value(g, name, HP_VALUE_ACTIVATION, HP_UNDEFINED, NULL);
	}
	for (int i = 1; i <= K + 1; i++) {
		/* h2, h3: Relu of a value read later (not in place); h4..h(K-1)
		 * read their two predecessors, so three large values at once */
		int in[2] = { i == 1 ? x : h[i - 1], i == 1 || i == K + 1 ? w : i == K ? h[1] : h[i - 2] };
		snprintf(name, sizeof name, "n%d", i);
		assert_true(hp_graph_add_node(g, name, i == 2 || i == 3 ? "Relu" : "Add", i == 2 || i == 3 ? 1 : 2, in, 1,
					      &h[i]) >= 0);
	}
	g->outputs = malloc(sizeof(int));
	g->outputs[g->noutputs++] = h[K + 1];
	assert_int_equal(hp_graph_finalize(g), 0);
	assert_int_equal(hp_graph_infer(g), 0);
	struct hp_plan *one = plan(g, b), *all = plan_victims(g, b, HP_PLAN_VICTIMS);
	replay(g, all, b);
	for (int a = 0; a < one->nacts; a++)
		wloads[0] += one->acts[a].value == w && one->acts[a].act == HP_ACT_LOAD;
	for (int a = 0; a < all->nacts; a++)
		wloads[1] += all->acts[a].value == w && all->acts[a].act == HP_ACT_LOAD;
	print_message("loads of w a run: Belady's %d, every policy's %d; loads %llu and %llu\n", wloads[0], wloads[1],
		      (unsigned long long)one->loads, (unsigned long long)all->loads);
	assert_int_equal(wloads[0], 1);
	assert_int_equal(wloads[1], 0);
	assert_true(all->loads < one->loads);
	assert_true(moved(all) < moved(one));
	hp_plan_free(one);
	hp_plan_free(all);
	hp_graph_free(g);
}

/* Two plans are the same plan: acts, steps, figures. */
static void assert_same_plan(const struct hp_plan *a, const struct hp_plan *b)
{
	assert_int_equal(a->nsteps, b->nsteps);
	assert_int_equal(a->nacts, b->nacts);
	assert_memory_equal(a->node, b->node, (size_t)a->nsteps * sizeof *a->node);
	assert_memory_equal(a->acts, b->acts, (size_t)a->nacts * sizeof *a->acts);
	assert_memory_equal(a->act_begin, b->act_begin, ((size_t)a->nsteps + 1) * sizeof *a->act_begin);
	assert_true(a->peak_bytes == b->peak_bytes && a->min_budget == b->min_budget);
	assert_true(a->bytes_loaded == b->bytes_loaded && a->bytes_written == b->bytes_written);
	assert_true(a->predicted_ms == b->predicted_ms);
}

/* hp_plan_build_shared hands out the plan hp_plan_build makes, built once
 * for the same graph and options, and built again where the graph's
 * contents (a node's workspace) or an option (the budget) changed. */
static void test_shared(void **state)
{
	struct hp_graph *g = build(300, 6, 3);
	struct hp_plan *p = plan(g, 0), *a, *b, *fresh;
	uint64_t peak = p->peak_bytes;
	struct hp_plan_opts o = { .budget = peak / 3, .align = 4096, .gflops = 50, .read_MBps = 2000,
				  .write_MBps = 1500 };
	int hits;

	(void)state;
	hp_plan_free(p);
	assert_int_equal(hp_plan_build_shared(g, &o, &a), 0);
	hits = hp_plan_shared_hits;
	assert_int_equal(hp_plan_build_shared(g, &o, &b), 0);
	assert_int_equal(hp_plan_shared_hits, hits + 1);
	assert_int_equal(hp_plan_build(g, &o, &fresh), 0);
	assert_same_plan(a, fresh);
	assert_same_plan(b, fresh);
	hp_plan_free(a), hp_plan_free(b), hp_plan_free(fresh);
	g->nodes[g->nnodes / 2].workspace += 3 * 4096; /* another graph now */
	assert_int_equal(hp_plan_build_shared(g, &o, &a), 0);
	assert_int_equal(hp_plan_shared_hits, hits + 1);
	assert_int_equal(hp_plan_build(g, &o, &fresh), 0);
	assert_same_plan(a, fresh);
	hp_plan_free(a), hp_plan_free(fresh);
	o.budget = peak / 2;
	assert_int_equal(hp_plan_build_shared(g, &o, &a), 0);
	assert_int_equal(hp_plan_shared_hits, hits + 1);
	assert_int_equal(hp_plan_build(g, &o, &fresh), 0);
	assert_same_plan(a, fresh);
	hp_plan_free(a), hp_plan_free(fresh);
	hp_graph_free(g);
}

static void test_below_minimum(void **state)
{
	struct hp_graph *g = build(50, 3, 9);
	struct hp_plan_opts o = { .align = 4096 };
	struct hp_plan *p = plan(g, 0);
	uint64_t want_min = p->min_budget;
	char want[64];

	(void)state;
	o.budget = p->min_budget - 4096;
	snprintf(want, sizeof want, "smallest budget that works is %llu bytes", (unsigned long long)p->min_budget);
	hp_plan_free(p);
	assert_int_equal(hp_plan_build(g, &o, &p), HP_EBUDGET_OP);
	assert_int_equal(hp_plan_needed, want_min);
	assert_int_equal(hp_exec_min_budget(), want_min);
	assert_non_null(strstr(hp_errmsg(), "node '"));
	assert_non_null(strstr(hp_errmsg(), want));
	hp_graph_free(g);
}

/* hp_plan_check answers as hp_plan_build does without simulating:
 * refused below the smallest budget with the same figure and message,
 * and from that figure up a plan is built (each step can evict anything
 * but its own values), with the same smallest budget and step. */
static void test_check(void **state)
{
	(void)state;
	for (uint32_t seed = 1; seed <= 4; seed++) {
		struct hp_graph *g = build(200, 2 + (int)seed * 3, seed);
		struct hp_plan *p = plan(g, 0), *c = NULL, *b = NULL;
		uint64_t minb = p->min_budget, budgets[] = { 4096, minb - 4096, minb - 1, minb, minb + 4096, 2 * minb };
		char msg[1024];
		hp_plan_free(p);
		for (size_t i = 0; i < sizeof budgets / sizeof *budgets; i++) {
			struct hp_plan_opts o = { .align = 4096, .budget = budgets[i] };
			int rb = hp_plan_build(g, &o, &b);
			snprintf(msg, sizeof msg, "%s", hp_errmsg());
			uint64_t nb = hp_plan_needed;
			int rc = hp_plan_check(g, &o, &c);
			assert_int_equal(rc, rb);
			assert_int_equal(rc, budgets[i] < minb ? HP_EBUDGET_OP : 0);
			if (rc < 0) {
				assert_string_equal(hp_errmsg(), msg);
				assert_int_equal(hp_plan_needed, nb);
				continue;
			}
			assert_int_equal(c->min_budget, b->min_budget);
			assert_int_equal(c->min_step, b->min_step);
			assert_int_equal(c->nsteps, b->nsteps);
			hp_plan_free(c);
			hp_plan_free(b);
		}
		hp_graph_free(g);
	}
}

static double cpu_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void test_10k_nodes(void **state)
{
	struct hp_graph *g = build(10000, 200, 3);
	struct hp_plan *p = plan(g, 0);
	uint64_t budget = p->peak_bytes / 6 > p->min_budget ? p->peak_bytes / 6 : p->min_budget;
	double t0;

	(void)state;
	hp_plan_free(p);
	t0 = cpu_s();
	p = plan(g, budget);
	double dt = cpu_s() - t0;
	print_message("10,000 nodes, budget %llu: planned in %.3f s CPU, %d acts, %llu bytes loaded\n",
		      (unsigned long long)budget, dt, p->nacts, (unsigned long long)p->bytes_loaded);
	assert_true(dt < 1.0);
	assert_true(p->bytes_loaded > 0);
	replay(g, p, budget);
	hp_plan_free(p);
	hp_graph_free(g);
}

/* Backward-like: a chain of Relu; every 10th step a "gradient" (a Relu
 * of the chain) goes into an AllReduce (token chained); the sums are read
 * at the end only, as the optimizer updates read them.  *sums: their
 * values, *nsums how many. */
static struct hp_graph *build_dp(int n, int *sums, int *nsums)
{
	struct hp_graph *g = hp_graph_new("plan-dp");
	struct hp_attr ranks = { .name = (char *)"ranks", .type = HP_ATTR_INT, .i = 2 };
	int h = value(g, "x", HP_VALUE_INPUT, 64), tok = -1, acc;
	char name[32];

	assert_non_null(g);
	*nsums = 0;
	for (int i = 1; i <= n; i++) {
		int out;
		snprintf(name, sizeof name, "h%d", i);
		out = hp_graph_add_value(g, name, HP_VALUE_ACTIVATION, HP_UNDEFINED, NULL);
		assert_true(hp_graph_add_node(g, name, "Relu", 1, &h, 1, &out) >= 0);
		h = out;
		if (i % 10)
			continue;
		int gr, in[2], outs[2], node;
		snprintf(name, sizeof name, "g%d", i);
		gr = hp_graph_add_value(g, name, HP_VALUE_ACTIVATION, HP_UNDEFINED, NULL);
		assert_true(hp_graph_add_node(g, name, "Relu", 1, &h, 1, &gr) >= 0);
		snprintf(name, sizeof name, "t%d", i);
		outs[0] = hp_graph_add_value(g, name, HP_VALUE_ACTIVATION, HP_UNDEFINED, NULL);
		snprintf(name, sizeof name, "s%d", i);
		outs[1] = hp_graph_add_value(g, name, HP_VALUE_ACTIVATION, HP_UNDEFINED, NULL);
		in[0] = tok;
		in[1] = gr;
		snprintf(name, sizeof name, "allreduce%d", i);
		assert_true((node = hp_graph_add_node(g, name, "AllReduce", 2, in, 2, outs)) >= 0);
		free(g->nodes[node].domain);
		g->nodes[node].domain = strdup("ai.hpdlf");
		assert_true(hp_graph_add_attr(g, node, &ranks) >= 0);
		tok = outs[0];
		sums[(*nsums)++] = outs[1];
	}
	acc = h;
	for (int k = 0; k < *nsums; k++) {
		int in[2] = { acc, sums[k] }, out;
		snprintf(name, sizeof name, "u%d", k);
		out = hp_graph_add_value(g, name, HP_VALUE_ACTIVATION, HP_UNDEFINED, NULL);
		assert_true(hp_graph_add_node(g, name, "Add", 2, in, 1, &out) >= 0);
		acc = out;
	}
	g->outputs = malloc(sizeof(int));
	g->outputs[g->noutputs++] = acc;
	assert_int_equal(hp_graph_finalize(g), 0);
	assert_int_equal(hp_graph_infer(g), 0);
	return g;
}

static struct hp_plan *plan_dp(const struct hp_graph *g, uint64_t budget, int ranks)
{
	/* a link fast enough that each reduction is predicted done before the
	 * next is issued: held until then (a late peer stretches it) */
	struct hp_plan_opts o = { .budget = budget, .align = 4096, .gflops = 50, .read_MBps = 2000,
				  .write_MBps = 1500, .comm_ranks = ranks, .comm_GBps = 1000, .comm_lat_us = 0 };
	struct hp_plan *p;

	assert_int_equal(hp_plan_build(g, &o, &p), 0);
	return p;
}

/* Acts that evict or write back a reduction's sum between its step and
 * the next reduction's (both included): while it is in flight. */
static int evicted_in_flight(const struct hp_plan *p, const int *red, int nred, const int *sums)
{
	int n = 0;

	for (int k = 0; k + 1 < nred; k++)
		for (int a = p->act_begin[red[k] + 1]; a < p->act_begin[red[k + 1] + 1]; a++)
			n += p->acts[a].value == sums[k] && p->acts[a].act != HP_ACT_LOAD;
	return n;
}

static void test_reductions_in_flight(void **state)
{
	int sums[64], nsums, red[64], nred = 0;
	struct hp_graph *g = build_dp(120, sums, &nsums);
	struct hp_plan *p = plan_dp(g, 0, 2);
	uint64_t minb = p->min_budget, sum_bytes = size_of(g, sums[0]);

	(void)state;
	for (int s = 0; s < p->nsteps; s++)
		if (!strcmp(g->nodes[p->node[s]].op_type, "AllReduce")) {
			assert_true(hp_plan_comm_inplace(g, p, s)); /* the gradient dies there */
			red[nred++] = s;
		}
	assert_int_equal(nred, nsums);
	hp_plan_free(p);
	/* room for the chain and two buckets in flight: the sums stay until
	 * the next reduction is issued, whatever the budget pressure */
	uint64_t budget = minb + 3 * sum_bytes;
	p = plan_dp(g, budget, 2);
	replay(g, p, budget);
	assert_int_equal(evicted_in_flight(p, red, nred, sums), 0);
	assert_true(p->bytes_written > 0); /* the budget is tight: sums go below later */
	hp_plan_free(p);
	/* one rank: nothing is in flight, and Belady writes sums back early */
	p = plan_dp(g, budget, 1);
	replay(g, p, budget);
	assert_true(evicted_in_flight(p, red, nred, sums) > 0);
	hp_plan_free(p);
	/* at the smallest budget the holds give way (the steps wait) */
	p = plan_dp(g, minb, 2);
	replay(g, p, minb);
	hp_plan_free(p);
	hp_graph_free(g);
}

/* An inference whose input x is read by its first and third steps, then
 * pushed out by a step that needs most of the budget (a Sum of three
 * activations): the plan reads x back at the run's end, where the last
 * step (a product down to one column) leaves room, so that the next run starts with x
 * resident instead of loading it before its first step, with nothing to
 * overlap that load with.  The same bytes a run: the first step's load is
 * gone. */
static void test_inputs_back_at_end(void **state)
{
	struct hp_graph *g = hp_graph_new("plan-test");
	int x = value(g, "x", HP_VALUE_INPUT, 64), w[3], h[6];
	int in[6][3], nin[6] = { 2, 2, 2, 3, 2, 2 };
	const char *op[6] = { "Add", "Add", "Add", "Sum", "Add", "MatMul" };
	uint64_t b = 3 * 65536; /* the Sum (in place) and x do not fit with the weights */
	struct hp_shape col = { 2, { 256, 1 } };
	char name[32];
	int first = 0;

	(void)state;
	for (int k = 0; k < 3; k++) {
		snprintf(name, sizeof name, "w%d", k);
		w[k] = value(g, name, HP_VALUE_INITIALIZER, 1);
	}
	int wm = hp_graph_add_value(g, "wm", HP_VALUE_INITIALIZER, HP_F32, &col); /* the end: [64, 1] */
	assert_true(wm >= 0);
	g->values[wm].data = calloc(256, sizeof(float));
	g->values[wm].src.kind = HP_BLOB_MEMORY;
	for (int i = 0; i < 6; i++) {
		snprintf(name, sizeof name, "h%d", i);
		h[i] = hp_graph_add_value(g, name, HP_VALUE_ACTIVATION, HP_UNDEFINED, NULL);
	}
	memcpy(in, (int[6][3]){ { x, w[0] }, { h[0], w[1] }, { h[1], x }, { h[2], h[0], w[2] }, { h[3], w[2] }, { h[4], wm } },
	       sizeof in);
	for (int i = 0; i < 6; i++) {
		snprintf(name, sizeof name, "n%d", i);
		assert_true(hp_graph_add_node(g, name, op[i], nin[i], in[i], 1, &h[i]) >= 0);
	}
	g->outputs = malloc(sizeof(int));
	g->outputs[g->noutputs++] = h[5];
	assert_int_equal(hp_graph_finalize(g), 0);
	assert_int_equal(hp_graph_infer(g), 0);
	struct hp_plan *p = plan(g, b);
	replay(g, p, b);
	for (int a = p->act_begin[0]; a < p->act_begin[1]; a++)
		first |= p->acts[a].act == HP_ACT_LOAD && p->acts[a].value == x;
	print_message("x resident at the start %d, loaded for the first step %d, %llu bytes loaded a run\n",
		      p->start_resident[x], first, (unsigned long long)p->bytes_loaded);
	assert_true(p->start_resident[x]);
	assert_false(first);
	/* x twice (for the third step, and at the end instead of for the
	 * first), the four weights once: what it read without the end's load */
	assert_int_equal(p->bytes_loaded, 2 * 65536 + 4 * 4096);
	hp_plan_free(p);
	hp_graph_free(g);
}

/* A training run (a state value with a next version: the caller writes
 * the next batch before each run) whose input x is read by its first
 * and last steps and pushed out between them by a Sum that needs most of
 * the budget: x is read back for the last step and is still resident
 * when the run ends, but the next batch overwrites that clean copy, so
 * the warm run's eviction of x writes it back.  Planned as a clean
 * eviction, LeNet's runs at 400000 bytes wrote 16 KiB a step more than
 * their plan said (test batch-io). */
static void test_fed_input_dirty(void **state)
{
	struct hp_graph *g = hp_graph_new("plan-test");
	int x = value(g, "x", HP_VALUE_INPUT, 64), w[3], h[5], wn;
	int in[5][3], nin[5] = { 2, 2, 3, 2, 2 };
	const char *op[5] = { "Add", "Add", "Sum", "Add", "Add" };
	uint64_t b = 3 * 65536;
	char name[32];
	int evicts = 0, writes = 0;

	(void)state;
	for (int k = 0; k < 3; k++) {
		snprintf(name, sizeof name, "w%d", k);
		w[k] = value(g, name, HP_VALUE_INITIALIZER, 1);
	}
	for (int i = 0; i < 4; i++) {
		snprintf(name, sizeof name, "h%d", i);
		h[i] = hp_graph_add_value(g, name, HP_VALUE_ACTIVATION, HP_UNDEFINED, NULL);
	}
	wn = h[4] = hp_graph_add_value(g, "w0'", HP_VALUE_ACTIVATION, HP_UNDEFINED, NULL);
	memcpy(in, (int[5][3]){ { x, w[0] }, { h[0], w[1] }, { h[1], h[0], w[2] }, { h[2], x }, { w[0], w[0] } },
	       sizeof in);
	for (int i = 0; i < 5; i++) {
		snprintf(name, sizeof name, "n%d", i);
		assert_true(hp_graph_add_node(g, name, op[i], nin[i], in[i], 1, &h[i]) >= 0);
	}
	g->values[w[0]].next = wn;
	g->outputs = malloc(2 * sizeof(int));
	g->outputs[g->noutputs++] = h[3];
	g->outputs[g->noutputs++] = wn;
	assert_int_equal(hp_graph_finalize(g), 0);
	assert_int_equal(hp_graph_infer(g), 0);
	struct hp_plan *p = plan(g, b);
	for (int a = 0; a < p->nacts; a++) {
		evicts += p->acts[a].value == x && p->acts[a].act == HP_ACT_EVICT;
		writes += p->acts[a].value == x && p->acts[a].act == HP_ACT_WRITEBACK;
	}
	print_message("x resident at the start %d: written back %d, dropped clean %d; %llu bytes written a run\n",
		      p->start_resident[x], writes, evicts, (unsigned long long)p->bytes_written);
	assert_true(p->start_resident[x]);
	assert_int_equal(evicts, 0);
	assert_int_equal(writes, 1);
	assert_true(p->bytes_written >= 65536);
	hp_plan_free(p);
	hp_graph_free(g);
}

/* An update SGDUpdate(W, dW) -> W' ready (dW done) before another node
 * that reads W (a Conv's data gradient after its filter gradient): the
 * graph's order makes it wait for that reader, and the plan writes W'
 * over W's bytes, so the step holds W and dW, not 3 W (issue 17).  A
 * reader that needs W' itself cannot wait so: sorted without the wait;
 * an update hinted HP_SCHED_EAGER does not wait. */
static void update_after_readers(int cycle, int eager)
{
	struct hp_graph *g = hp_graph_new("plan-test");
	int x = value(g, "x", HP_VALUE_INPUT, 64), w = value(g, "w", HP_VALUE_INITIALIZER, 64), h[5], un = -1, rn = -1;
	char name[32];

	for (int i = 0; i < 5; i++) {
		snprintf(name, sizeof name, "h%d", i);
		h[i] = hp_graph_add_value(g, name, HP_VALUE_ACTIVATION, HP_UNDEFINED, NULL);
	}
	int w2 = hp_graph_add_value(g, "w'", HP_VALUE_ACTIVATION, HP_UNDEFINED, NULL);
	/* h0 = Relu(x) (the "dW"); upd(w, h0) -> w'; two Relus; reader = Add(h2, w);
	 * with cycle reader = Add(h2, w') and both = Add(h3, w) */
	assert_true(hp_graph_add_node(g, "dw", "Relu", 1, &x, 1, &h[0]) >= 0);
	int upd = hp_graph_add_node(g, "upd", "SGDUpdate", 2, (int[]){ w, h[0] }, 1, &w2);
	assert_true(upd >= 0);
	free(g->nodes[upd].domain);
	g->nodes[upd].domain = strdup("ai.hpdlf");
	g->nodes[upd].sched = eager ? HP_SCHED_EAGER : -1;
	assert_true(hp_graph_add_node(g, "r1", "Relu", 1, &h[0], 1, &h[1]) >= 0);
	assert_true(hp_graph_add_node(g, "r2", "Relu", 1, &h[1], 1, &h[2]) >= 0);
	assert_true(hp_graph_add_node(g, "reader", "Add", 2, (int[]){ h[2], cycle ? w2 : w }, 1, &h[3]) >= 0);
	if (cycle)
		assert_true(hp_graph_add_node(g, "both", "Add", 2, (int[]){ h[3], w }, 1, &h[4]) >= 0);
	g->values[w].next = w2;
	g->outputs = malloc(sizeof(int));
	g->outputs[g->noutputs++] = h[cycle ? 4 : 3];
	assert_int_equal(hp_graph_finalize(g), 0);
	assert_int_equal(hp_graph_infer(g), 0);
	for (int i = 0; i < g->nnodes; i++) {
		un = !strcmp(g->nodes[i].name, "upd") ? i : un;
		rn = !strcmp(g->nodes[i].name, "reader") ? i : rn;
	}
	print_message("cycle %d eager %d: the update at %d, the other reader of w at %d\n", cycle, eager, un, rn);
	assert_true(un >= 0 && rn >= 0);
	if (cycle || eager) {
		assert_true(un < rn);
		hp_graph_free(g);
		return;
	}
	assert_true(un > rn);
	struct hp_plan *p = plan(g, 1 << 30);
	assert_int_equal(p->node[p->nsteps - 1], un);
	assert_int_equal(hp_plan_inplace_src(g, p, p->nsteps - 1, 0), 0);
	/* the largest step holds three 64-row values (the reader's h2, w and
	 * h3; the update's w and h0, w' over w), not four */
	print_message("smallest budget %llu\n", (unsigned long long)p->min_budget);
	assert_int_equal(p->min_budget, 3 * 65536);
	hp_plan_free(p);
	hp_graph_free(g);
}

static void test_update_after_readers(void **state)
{
	(void)state;
	update_after_readers(0, 0);
	update_after_readers(1, 0);
	update_after_readers(0, 1);
}

/* A load whose room frees only when a write-back issued at its step is
 * done: the runtime grants budget in plan order, so every kernel after
 * such a load waits for the write (issue 17: ResNet-18's backward stalled
 * so on each 9-MiB weight).  Here u, read by the last step, gets its room
 * from x's write-back at step 1; a MatMul at step 3 takes longer than the
 * write (2.1 ms at 1 GFLOP/s against 1.3 ms at 50 MB/s).  u is loaded
 * after the MatMul's step starts (it still has 2 steps to come in), not
 * beside the write-back at step 1 (where it went before), and the plan
 * stays within the budget. */
static void test_load_past_writeback(void **state)
{
	struct hp_graph *g = hp_graph_new("plan-test");
	struct hp_shape narrow = { 2, { 256, 64 } }, small = { 2, { 64, 64 } };
	int x = value(g, "x", HP_VALUE_INPUT, 64), w = value(g, "w", HP_VALUE_INITIALIZER, 64);
	int m = hp_graph_add_value(g, "m", HP_VALUE_INITIALIZER, HP_F32, &narrow);
	int u = hp_graph_add_value(g, "u", HP_VALUE_INITIALIZER, HP_F32, &small);
	const char *names[] = { "dw", "w'", "r1", "mm", "r2", "out" };
	uint64_t b = 176 << 10;
	int h[6], su = -1, smm = -1;

	(void)state;
	assert_true(m >= 0 && u >= 0);
	g->values[m].data = calloc(256 * 64, sizeof(float));
	g->values[u].data = calloc(64 * 64, sizeof(float));
	g->values[m].src.kind = g->values[u].src.kind = HP_BLOB_MEMORY;
	for (int i = 0; i < 6; i++)
		h[i] = hp_graph_add_value(g, names[i], HP_VALUE_ACTIVATION, HP_UNDEFINED, NULL);
	assert_true(hp_graph_add_node(g, "dw", "Relu", 1, &x, 1, &h[0]) >= 0);
	int upd = hp_graph_add_node(g, "upd", "SGDUpdate", 2, (int[]){ w, h[0] }, 1, &h[1]);
	assert_true(upd >= 0);
	free(g->nodes[upd].domain);
	g->nodes[upd].domain = strdup("ai.hpdlf");
	assert_true(hp_graph_add_node(g, "r1", "Relu", 1, &h[0], 1, &h[2]) >= 0);
	assert_true(hp_graph_add_node(g, "mm", "MatMul", 2, (int[]){ h[2], m }, 1, &h[3]) >= 0);
	assert_true(hp_graph_add_node(g, "r2", "Relu", 1, &h[3], 1, &h[4]) >= 0);
	assert_true(hp_graph_add_node(g, "out", "Add", 2, (int[]){ h[4], u }, 1, &h[5]) >= 0);
	g->values[w].next = h[1];
	g->outputs = malloc(sizeof(int));
	g->outputs[g->noutputs++] = h[5];
	assert_int_equal(hp_graph_finalize(g), 0);
	assert_int_equal(hp_graph_infer(g), 0);

	struct hp_plan_opts o = { .budget = b, .align = 4096, .gflops = 1, .read_MBps = 2000, .write_MBps = 50 };
	struct hp_plan *p;
	assert_int_equal(hp_plan_build(g, &o, &p), 0);
	for (int s = 0; s < p->nsteps; s++) {
		for (int a = p->act_begin[s]; a < p->act_begin[s + 1]; a++)
			if (p->acts[a].act == HP_ACT_LOAD && p->acts[a].value == u)
				su = s;
		smm = !strcmp(g->nodes[p->node[s]].name, "mm") ? s : smm;
	}
	print_message("u loaded at step %d, the MatMul at %d, peak %llu of %llu bytes\n", su, smm,
		      (unsigned long long)p->peak_bytes, (unsigned long long)b);
	assert_true(smm >= 0 && su > smm && su < p->nsteps - 1);
	assert_true(p->peak_bytes <= b);
	hp_plan_free(p);
	hp_graph_free(g);
}

/* The eviction candidates' heap (exec/plan_heap.h) hands its entries out
 * in Belady's order with the planner's ties: the later next use first,
 * equal ones by the smaller value; against a sort of the same entries. */
static int vent_cmp(const void *a, const void *b)
{
	const struct hp_vent *x = a, *y = b;

	return x->nu != y->nu ? (x->nu > y->nu ? -1 : 1) : (x->v > y->v) - (x->v < y->v);
}

static void test_victim_heap(void **state)
{
	enum { N = 3000 };
	static struct hp_vent want[N];
	struct hp_vheap h = { 0 };
	uint64_t x = 88172645463325252ull;

	(void)state;
	for (int i = 0; i < N; i++) {
		x ^= x << 13, x ^= x >> 7, x ^= x << 17;
		want[i] = (struct hp_vent){ (int)(x % 97), (int)((x >> 20) % 50) }; /* many ties */
		assert_int_equal(hp_vheap_push(&h, want[i].nu, want[i].v), 0);
	}
	qsort(want, N, sizeof *want, vent_cmp);
	for (int i = 0; i < N; i++) {
		assert_int_equal(h.n, N - i);
		assert_int_equal(h.e[0].nu, want[i].nu);
		assert_int_equal(h.e[0].v, want[i].v);
		hp_vheap_pop(&h);
	}
	assert_int_equal(h.n, 0);
	hp_vheap_free(&h);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_replay),
		cmocka_unit_test(test_victim_policies),
		cmocka_unit_test(test_small_last),
		cmocka_unit_test(test_victim_heap),
		cmocka_unit_test(test_shared),
		cmocka_unit_test(test_below_minimum),
		cmocka_unit_test(test_check),
		cmocka_unit_test(test_10k_nodes),
		cmocka_unit_test(test_reductions_in_flight),
		cmocka_unit_test(test_inputs_back_at_end),
		cmocka_unit_test(test_fed_input_dirty),
		cmocka_unit_test(test_update_after_readers),
		cmocka_unit_test(test_load_past_writeback),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
