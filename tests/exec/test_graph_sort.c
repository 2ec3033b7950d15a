/* hp_graph_finalize's topological sort (graph/graph.c) against a plain
 * reference: Kahn's algorithm choosing, among ready nodes, the smallest
 * (sched hint, order of becoming ready), written here as an O(n^2) scan
 * with no heap and no flat edge arrays.  On random graphs in random order
 * with random hints: the same order, and the producers and consumer
 * counts a fresh count gives (the sort renumbers the producers itself
 * instead of linking the graph again).  With optimizer-like updates (a
 * value's next version written by a node that reads it): the order is
 * topological, every other reader of the value runs before its writer
 * (unless hinted HP_SCHED_EAGER) and the producers are right.  The
 * order asked for without sorting (graph/sort.h) is the one finalize
 * then gives. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "hpdlf/graph.h"
#include "graph/sort.h"

#define MAXN 160

static unsigned rnd(unsigned *s)
{
	*s = *s * 1103515245u + 12345u;
	return (*s >> 16) & 0x7fff;
}

/* A random DAG of n nodes (each reads 1-3 earlier values, some twice, and
 * writes 1-2), added in a shuffled order with hints from {-1, 0, 1, 2}. */
static struct hp_graph *random_graph(unsigned seed, int n)
{
	struct hp_graph *g = hp_graph_new("sort-test");
	int order[MAXN], outv[MAXN][2], nout[MAXN];
	char name[32];
	unsigned s = seed;
	int nin0 = 2, in0[2];

	assert_non_null(g);
	for (int k = 0; k < nin0; k++) {
		snprintf(name, sizeof name, "x%d", k);
		in0[k] = hp_graph_add_value(g, name, HP_VALUE_INPUT, HP_F32, NULL);
		assert_true(in0[k] >= 0);
	}
	for (int i = 0; i < n; i++) {
		nout[i] = 1 + (int)(rnd(&s) % 2);
		for (int o = 0; o < nout[i]; o++) {
			snprintf(name, sizeof name, "v%d_%d", i, o);
			outv[i][o] = hp_graph_add_value(g, name, HP_VALUE_ACTIVATION, HP_F32, NULL);
			assert_true(outv[i][o] >= 0);
		}
		order[i] = i;
	}
	for (int i = n - 1; i > 0; i--) {
		int j = (int)(rnd(&s) % (unsigned)(i + 1)), t = order[i];
		order[i] = order[j];
		order[j] = t;
	}
	for (int k = 0; k < n; k++) {
		int i = order[k], in[3], nin = 1 + (int)(rnd(&s) % 3), node;
		for (int j = 0; j < nin; j++) {
			int p = i ? (int)(rnd(&s) % (unsigned)(i + 1)) - 1 : -1; /* -1: a graph input */
			in[j] = p < 0 ? in0[rnd(&s) % 2] : outv[p][rnd(&s) % (unsigned)nout[p]];
		}
		if (nin > 1 && rnd(&s) % 4 == 0)
			in[1] = in[0]; /* read twice */
		snprintf(name, sizeof name, "n%d", i);
		node = hp_graph_add_node(g, name, "Sum", nin, in, nout[i], outv[i]);
		assert_true(node >= 0);
		g->nodes[node].sched = (int)(rnd(&s) % 4) - 1;
	}
	return g;
}

/* The reference order of g's nodes (no waits for next versions): names. */
static void reference_order(const struct hp_graph *g, char names[][32])
{
	int n = g->nnodes, indeg[MAXN] = { 0 }, ready[MAXN], nready = 0;
	int64_t key[MAXN];
	int64_t seq = 0;
	int producer[4 * MAXN];

	for (int v = 0; v < g->nvalues; v++)
		producer[v] = -1;
	for (int i = 0; i < n; i++)
		for (int o = 0; o < g->nodes[i].noutputs; o++)
			producer[g->nodes[i].outputs[o]] = i;
	for (int i = 0; i < n; i++)
		for (int j = 0; j < g->nodes[i].ninputs; j++)
			indeg[i] += producer[g->nodes[i].inputs[j]] >= 0;
	for (int i = 0; i < n; i++)
		if (!indeg[i]) {
			key[nready] = (int64_t)g->nodes[i].sched * ((int64_t)1 << 32) + seq++;
			ready[nready++] = i;
		}
	for (int out = 0; out < n; out++) {
		int best = 0;
		assert_true(nready > 0);
		for (int r = 1; r < nready; r++)
			if (key[r] < key[best])
				best = r;
		int i = ready[best];
		ready[best] = ready[--nready];
		key[best] = key[nready];
		snprintf(names[out], 32, "%s", g->nodes[i].name);
		/* each output's readers in node order, once per input that reads it */
		for (int o = 0; o < g->nodes[i].noutputs; o++)
			for (int c = 0; c < n; c++)
				for (int j = 0; j < g->nodes[c].ninputs; j++)
					if (g->nodes[c].inputs[j] == g->nodes[i].outputs[o] && --indeg[c] == 0) {
						key[nready] = (int64_t)g->nodes[c].sched * ((int64_t)1 << 32) + seq++;
						ready[nready++] = c;
					}
	}
}

/* Producers and consumer counts as a fresh count gives them; topological. */
static void check_links(const struct hp_graph *g)
{
	for (int v = 0; v < g->nvalues; v++) {
		int prod = -1, cons = 0;
		for (int i = 0; i < g->nnodes; i++) {
			for (int o = 0; o < g->nodes[i].noutputs; o++)
				if (g->nodes[i].outputs[o] == v)
					prod = i;
			for (int j = 0; j < g->nodes[i].ninputs; j++)
				cons += g->nodes[i].inputs[j] == v;
		}
		assert_int_equal(g->values[v].producer, prod);
		assert_int_equal(g->values[v].nconsumers, cons);
	}
	for (int i = 0; i < g->nnodes; i++)
		for (int j = 0; j < g->nodes[i].ninputs; j++)
			assert_true(g->values[g->nodes[i].inputs[j]].producer < i);
}

static void test_order_and_links(void **state)
{
	(void)state;
	for (unsigned seed = 1; seed <= 60; seed++) {
		struct hp_graph *g = random_graph(seed, 10 + (int)(seed * 7 % 150));
		static char want[MAXN][32];
		reference_order(g, want);
		assert_int_equal(hp_graph_finalize(g), 0);
		for (int i = 0; i < g->nnodes; i++)
			assert_string_equal(g->nodes[i].name, want[i]);
		check_links(g);
		assert_int_equal(hp_graph_finalize(g), 0); /* again, on a sorted graph */
		check_links(g);
		hp_graph_free(g);
	}
}

/* Updates: node "u<k>" reads w<k> and a gradient, writes w<k>' (next of
 * w<k>), after 3 other readers "r<k>_<r>"; eager[k]: hinted eager. */
static void add_updates(struct hp_graph *g, unsigned seed, int nw, int *w, int *eager)
{
	unsigned s = seed * 77u;
	char name[32];

	for (int k = 0; k < nw; k++) {
		snprintf(name, sizeof name, "w%d", k);
		w[k] = hp_graph_add_value(g, name, HP_VALUE_INITIALIZER, HP_F32, NULL);
		snprintf(name, sizeof name, "w%d'", k);
		int nx = hp_graph_add_value(g, name, HP_VALUE_ACTIVATION, HP_F32, NULL);
		g->values[w[k]].next = nx;
		for (int r = 0; r < 3; r++) {
			int in[2] = { w[k], 2 }, out;
			snprintf(name, sizeof name, "r%d_%d.out", k, r);
			out = hp_graph_add_value(g, name, HP_VALUE_ACTIVATION, HP_F32, NULL);
			snprintf(name, sizeof name, "r%d_%d", k, r);
			assert_true(hp_graph_add_node(g, name, "Sum", 2, in, 1, &out) >= 0);
		}
		int in[2] = { w[k], 3 }, node;
		snprintf(name, sizeof name, "u%d", k);
		node = hp_graph_add_node(g, name, "Sum", 2, in, 1, &nx);
		assert_true(node >= 0);
		eager[k] = rnd(&s) % 3 == 0;
		g->nodes[node].sched = eager[k] ? HP_SCHED_EAGER : -1;
	}
}

/* Every other reader of an update's weight runs before it unless it is
 * hinted eager. */
static void test_updates_wait(void **state)
{
	(void)state;
	for (unsigned seed = 1; seed <= 30; seed++) {
		struct hp_graph *g = random_graph(seed, 40);
		int nw = 3, w[3], eager[3];
		add_updates(g, seed, nw, w, eager);
		assert_int_equal(hp_graph_finalize(g), 0);
		check_links(g);
		for (int k = 0; k < nw; k++) {
			int u = g->values[g->values[w[k]].next].producer, last_reader = -1;
			for (int i = 0; i < g->nnodes; i++)
				for (int j = 0; i != u && j < g->nodes[i].ninputs; j++)
					if (g->nodes[i].inputs[j] == w[k])
						last_reader = i;
			if (!eager[k])
				assert_true(last_reader < u);
		}
		hp_graph_free(g);
	}
}

/* hp_graph_sort_order (graph/sort.h) gives the order finalize then gives
 * with the same hints, and leaves the graph as it was: on finalized
 * random graphs with updates, hints redrawn (updates made eager or not,
 * other nodes' hints from {-1, 0, 1, 2}); NULL hints keep a sorted graph
 * where it is; a graph changed since finalize is not answered (1). */
static void test_sort_order(void **state)
{
	(void)state;
	for (unsigned seed = 1; seed <= 40; seed++) {
		struct hp_graph *g = random_graph(seed, 50);
		int nw = 3, w[3], eager[3], order[MAXN + 20], sched[MAXN + 20], prod[4 * MAXN];
		const char *name[MAXN + 20];
		unsigned s = seed * 31u;
		add_updates(g, seed, nw, w, eager);
		assert_int_equal(hp_graph_finalize(g), 0);
		assert_true(g->nnodes <= MAXN + 20 && g->nvalues <= 4 * MAXN);
		assert_int_equal(hp_graph_sort_order(g, NULL, order), 0);
		for (int i = 0; i < g->nnodes; i++)
			assert_int_equal(order[i], i);
		for (int i = 0; i < g->nnodes; i++) {
			name[i] = g->nodes[i].name;
			sched[i] = g->nodes[i].sched;
			if (sched[i] == -1 || sched[i] == HP_SCHED_EAGER)
				sched[i] = rnd(&s) % 2 ? HP_SCHED_EAGER : -1;
			else if (rnd(&s) % 4 == 0)
				sched[i] = (int)(rnd(&s) % 4) - 1;
		}
		for (int v = 0; v < g->nvalues; v++)
			prod[v] = g->values[v].producer;
		assert_int_equal(hp_graph_sort_order(g, sched, order), 0);
		for (int i = 0; i < g->nnodes; i++) /* unchanged */
			assert_ptr_equal(g->nodes[i].name, name[i]);
		for (int v = 0; v < g->nvalues; v++)
			assert_int_equal(g->values[v].producer, prod[v]);
		for (int i = 0; i < g->nnodes; i++)
			g->nodes[i].sched = sched[i];
		assert_int_equal(hp_graph_finalize(g), 0);
		for (int i = 0; i < g->nnodes; i++)
			assert_ptr_equal(g->nodes[i].name, name[order[i]]);
		int in[1] = { 0 }, out = hp_graph_add_value(g, "late", HP_VALUE_ACTIVATION, HP_F32, NULL);
		assert_true(hp_graph_add_node(g, "late", "Relu", 1, in, 1, &out) >= 0);
		assert_int_equal(hp_graph_sort_order(g, NULL, order), 1); /* not linked since */
		hp_graph_free(g);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_order_and_links),
		cmocka_unit_test(test_updates_wait),
		cmocka_unit_test(test_sort_order),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
