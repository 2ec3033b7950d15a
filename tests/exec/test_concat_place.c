/* The in-core executor writes the inputs of a Concat with nothing outside
 * its axis (batch 1, channels) straight into their slices of its output
 * when they die at it (exec/session.c, merge_concat), and copies nothing;
 * otherwise the Concat copies as before.  Either way the output is the
 * concatenation, checked against a plain loop over the same inputs. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "hpdlf/exec.h"
#include "exec/exec_internal.h"

#define W 16 /* floats a row of each piece: 64 bytes, the slices stay aligned */

struct cat_graph {
	struct hp_graph *g;
	int64_t rows;
};

static int act(struct hp_graph *g, const char *name)
{
	int v = hp_graph_add_value(g, name, HP_VALUE_ACTIVATION, HP_UNDEFINED, NULL);

	assert_true(v >= 0);
	return v;
}

static int op(struct hp_graph *g, const char *name, const char *type, int n, const int *in, const char *out)
{
	int y = act(g, out);

	assert_true(hp_graph_add_node(g, name, type, n, in, 1, &y) >= 0);
	return y;
}

static void cat(struct hp_graph *g, const char *name, int n, const int *in, const char *out)
{
	struct hp_attr axis = { .name = "axis", .type = HP_ATTR_INT, .i = 1 };
	int y = act(g, out);
	int node = hp_graph_add_node(g, name, "Concat", n, in, 1, &y);

	assert_true(node >= 0);
	assert_true(hp_graph_add_attr(g, node, &axis) >= 0);
}

static void output(struct hp_graph *g, int v)
{
	g->outputs = realloc(g->outputs, (size_t)(g->noutputs + 1) * sizeof(int));
	g->outputs[g->noutputs++] = v;
}

/* x[rows, W] -> a = Relu(x), b = Sigmoid(x) -> c = Concat(a, b) -> d =
 * Concat(c, Neg(x)) -> y = Tanh(d); "twice" makes c Concat(a, a), "kept"
 * makes a a second output (alive after c). */
static struct hp_graph *build(int64_t rows, int twice, int kept)
{
	struct hp_graph *g = hp_graph_new("concat-place");
	struct hp_shape xs = { 2, { rows, W } };
	int x, a, b, c, n, d, in[2];

	assert_non_null(g);
	x = hp_graph_add_value(g, "x", HP_VALUE_INPUT, HP_F32, &xs);
	g->inputs = calloc(1, sizeof(int));
	g->inputs[g->ninputs++] = x;
	a = op(g, "relu", "Relu", 1, &x, "a");
	b = op(g, "sigmoid", "Sigmoid", 1, &x, "b");
	in[0] = a, in[1] = twice ? a : b;
	cat(g, "cat1", 2, in, "c");
	c = g->nvalues - 1;
	n = op(g, "neg", "Neg", 1, &x, "n");
	in[0] = c, in[1] = n;
	cat(g, "cat2", 2, in, "d");
	d = g->nvalues - 1;
	output(g, op(g, "tanh", "Tanh", 1, &d, "y"));
	if (kept)
		output(g, a);
	assert_int_equal(hp_graph_finalize(g), 0);
	assert_int_equal(hp_graph_infer(g), 0);
	return g;
}

static int value_named(const struct hp_graph *g, const char *name)
{
	for (int v = 0; v < g->nvalues; v++)
		if (!strcmp(g->values[v].name, name))
			return v;
	fail_msg("no value '%s'", name);
	return -1;
}

static const char *ptr(struct hp_session *s, const char *name)
{
	return hp_session_value_ptr(s, value_named(s->g, name));
}

/* Runs the graph on x and checks y against plain loops; returns the
 * session for the caller's look at its buffers. */
static struct hp_session *run(struct hp_graph *g, int64_t rows, int twice, int threads)
{
	struct hp_exec_opts o;
	struct hp_session *s;
	float *x = malloc((size_t)(rows * W) * sizeof *x), *y;
	struct hp_tensor tx = { .dtype = HP_F32, .shape = { 2, { rows, W } }, .data = x }, ty;

	assert_non_null(x);
	for (int64_t i = 0; i < rows * W; i++)
		x[i] = (float)((i * 37) % 23) / 4.0f - 2.5f;
	hp_exec_opts_init(&o, sizeof o);
	o.threads = threads;
	assert_int_equal(hp_session_create(g, &o, &s), 0);
	assert_int_equal(hp_session_set_input(s, "x", &tx), 0);
	assert_int_equal(hp_session_run(s), 0);
	assert_int_equal(hp_session_get_output(s, "y", &ty), 0);
	assert_int_equal(ty.shape.dims[1], 3 * W);
	y = ty.data;
	for (int64_t r = 0; r < rows; r++)
		for (int k = 0; k < 3 * W; k++) {
			float v = x[r * W + k % W], a = v > 0 ? v : 0, b = 1.0f / (1.0f + expf(-v));
			float want = tanhf(k < W ? a : k < 2 * W ? (twice ? a : b) : -v);
			assert_float_equal(y[r * 3 * W + k], want, 1e-5f);
		}
	free(x);
	hp_tensor_free(&ty);
	return s;
}

/* Batch 1: a and b are c's halves, c and Neg(x) are d's parts, so the
 * inputs of both Concats lie in d. */
static void test_batch1_in_place(void **state)
{
	(void)state;
	for (int threads = 1; threads <= 2; threads++) {
		struct hp_graph *g = build(1, 0, 0);
		struct hp_session *s = run(g, 1, 0, threads);
		const char *d = ptr(s, "d");
		assert_ptr_equal(ptr(s, "c"), d);
		assert_ptr_equal(ptr(s, "a"), d);
		assert_ptr_equal(ptr(s, "b"), d + W * sizeof(float));
		assert_ptr_equal(ptr(s, "n"), d + 2 * W * sizeof(float));
		hp_session_destroy(s);
		hp_graph_free(g);
	}
}

/* Two rows: each piece is two runs in the output, so the Concats copy. */
static void test_batch2_copies(void **state)
{
	struct hp_graph *g = build(2, 0, 0);
	struct hp_session *s = run(g, 2, 0, 1);

	(void)state; /* a Concat's input and output, alive together at it, apart */
	assert_ptr_not_equal(ptr(s, "a"), ptr(s, "c"));
	assert_ptr_not_equal(ptr(s, "c"), ptr(s, "d"));
	hp_session_destroy(s);
	hp_graph_free(g);
}

/* Concat(a, a) cannot hold a in two places, and a kept after its Concat
 * keeps bytes of its own; the later Concat still takes its inputs. */
static void test_shared_inputs_copy(void **state)
{
	(void)state;
	for (int kept = 0; kept <= 1; kept++) {
		struct hp_graph *g = build(1, !kept, kept);
		struct hp_session *s = run(g, 1, !kept, 1);
		assert_ptr_not_equal(ptr(s, "a"), ptr(s, "c"));
		assert_ptr_equal(ptr(s, "c"), ptr(s, "d"));
		hp_session_destroy(s);
		hp_graph_free(g);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_batch1_in_place),
		cmocka_unit_test(test_batch2_copies),
		cmocka_unit_test(test_shared_inputs_copy),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
