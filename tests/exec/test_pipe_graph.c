/* Pipeline cuts over a model graph (exec/pipe_graph.h, pipe_even.h): which
 * values cross each cut (a residual read two stages later crosses both),
 * which carry a gradient back, tied parameters refused, cuts by node name,
 * and the even partition's bounds. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <cmocka.h>

#include "hpdlf/error.h"
#include "exec/pipe_even.h"
#include "exec/pipe_graph.h"

enum { X, A, W1, B, C, D, W2, E, F, NV };

/* x -> n0 Relu A -> n1 MatMul(A, w1) B -> n2 Relu C -> n3 Add(C, A) D ->
 * n4 MatMul(D, w2) E -> n5 Add(E, A) F: A is read by stages 0, 1 and 2. */
static struct hp_graph *model(int tied)
{
	struct hp_graph *g = hp_graph_new("toy.onnx");
	struct hp_shape s = { .rank = 2, .dims = { 4, 8 } }, w = { .rank = 2, .dims = { 8, 8 } };
	static const char *names[NV] = { "x", "a", "w1", "b", "c", "d", "w2", "e", "f" };
	int io[][3] = { { X, -1, A }, { A, W1, B }, { B, -1, C }, { C, A, D }, { D, W2, E }, { E, A, F } };
	static const char *ops[] = { "Relu", "MatMul", "Relu", "Add", "MatMul", "Add" };
	static const char *nodes[] = { "n0", "n1", "n2", "n3", "n4", "n5" };

	assert_non_null(g);
	for (int v = 0; v < NV; v++) {
		int wt = v == W1 || v == W2;
		assert_int_equal(hp_graph_add_value(g, names[v], v == X ? HP_VALUE_INPUT : wt ? HP_VALUE_INITIALIZER
						    : HP_VALUE_ACTIVATION, HP_F32, wt ? &w : &s), v);
		g->values[v].trainable = wt;
	}
	if (tied)
		io[4][1] = W1;
	for (int i = 0; i < 6; i++) {
		int in[2] = { io[i][0], io[i][1] }, out[1] = { io[i][2] };
		assert_true(hp_graph_add_node(g, nodes[i], ops[i], in[1] < 0 ? 1 : 2, in, 1, out) >= 0);
	}
	g->inputs = malloc(sizeof *g->inputs);
	g->outputs = malloc(sizeof *g->outputs);
	g->inputs[0] = X;
	g->outputs[0] = F;
	g->ninputs = g->noutputs = 1;
	assert_int_equal(hp_graph_finalize(g), 0);
	return g;
}

static void crossing(void **state)
{
	struct hp_graph *g = model(0);
	const int bounds[] = { 0, 2, 4, 6 };
	struct hp_pipe_cut cuts[2];

	(void)state;
	assert_int_equal(hp_pipe_check_bounds(g, 3, bounds), 0);
	assert_int_equal(hp_pipe_boundaries(g, 3, bounds, F, cuts), 0);
	/* cut 0: a (read by n3 and forwarded to n5) and b (read by n2) */
	assert_int_equal(cuts[0].n, 2);
	assert_int_equal(cuts[0].vals[0], A);
	assert_int_equal(cuts[0].vals[1], B);
	assert_int_equal(cuts[0].ngrad, 2);
	assert_int_equal(cuts[0].bytes, 2 * 4 * 8 * 4);
	/* cut 1: a again (n5 reads it) and d */
	assert_int_equal(cuts[1].n, 2);
	assert_int_equal(cuts[1].vals[0], A);
	assert_int_equal(cuts[1].vals[1], D);
	hp_pipe_cuts_free(cuts, 2);
	/* the input itself crosses when a later stage reads it; no gradient goes back to it */
	g->nodes[5].inputs[1] = X;
	assert_int_equal(hp_graph_finalize(g), 0);
	assert_int_equal(hp_pipe_boundaries(g, 3, bounds, F, cuts), 0);
	assert_int_equal(cuts[1].n, 2);
	assert_int_equal(cuts[1].vals[0], X);
	assert_int_equal(cuts[1].grad[0], 0);
	assert_int_equal(cuts[1].ngrad, 1);
	hp_pipe_cuts_free(cuts, 2);
	hp_graph_free(g);
}

static void refusals(void **state)
{
	struct hp_graph *g = model(1), *h = model(0);
	const int bounds[] = { 0, 2, 4, 6 }, empty[] = { 0, 2, 2, 6 };
	const char *ok[] = { "n1", "n3" }, *bad[] = { "n1", "n9" }, *order[] = { "n3", "n1" };
	int b[4];

	(void)state;
	assert_int_equal(hp_pipe_check_bounds(g, 3, bounds), HP_EUSAGE); /* w1 read in stages 0 and 2 */
	assert_int_equal(hp_pipe_check_bounds(h, 3, empty), HP_EUSAGE);
	assert_int_equal(hp_pipe_bounds_from_names(h, 3, ok, 2, b), 0);
	assert_int_equal(b[1], 2);
	assert_int_equal(b[2], 4);
	assert_int_equal(b[3], 6);
	assert_int_equal(hp_pipe_bounds_from_names(h, 3, bad, 2, b), HP_EUSAGE);
	assert_int_equal(hp_pipe_bounds_from_names(h, 3, order, 2, b), HP_EUSAGE);
	assert_int_equal(hp_pipe_bounds_from_names(h, 3, ok, 1, b), HP_EUSAGE);
	hp_graph_free(g);
	hp_graph_free(h);
}

static void even(void **state)
{
	struct hp_graph *g = model(0);
	int b[7];

	(void)state;
	for (int P = 1; P <= 6; P++) {
		assert_int_equal(hp_pipe_even(g, P, b), 0);
		assert_int_equal(hp_pipe_check_bounds(g, P, b), 0);
	}
	/* two parameter nodes of equal weight: each half gets one */
	assert_int_equal(hp_pipe_even(g, 2, b), 0);
	assert_true(b[1] >= 2 && b[1] <= 4);
	assert_int_equal(hp_pipe_even(g, 7, b), HP_EUSAGE);
	hp_graph_free(g);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(crossing),
		cmocka_unit_test(refusals),
		cmocka_unit_test(even),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
