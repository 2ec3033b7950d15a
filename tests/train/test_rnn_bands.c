/* Recurrent nodes cut into bands of batch entries (exec/split_band.c,
 * exec/split_rnn.c): a graph with one RNN, GRU or LSTM (layout 1) cut in
 * 3 uneven bands by the band pass, differentiated, its bands' weight sums
 * chained, computes the whole graph's loss and every parameter's gradient
 * bit for bit (weights, biases, peepholes, initial states). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "ad_harness.h"
#include "exec/autodiff.h"
#include "exec/split.h"
#include "hpdlf/error.h"
#include "hpdlf/graph.h"

struct rcase {
	const char *op, *direction;
	int seq_lens, peep;
};

static struct hp_attr iattr(const char *name, int64_t v)
{
	return (struct hp_attr){ .name = (char *)name, .type = HP_ATTR_INT, .i = v };
}

static int weighted(struct hp_graph *g, int y, const char *name, struct hp_shape s)
{
	char kn[64], pn[64], sn[64];
	struct hp_attr keep0 = iattr("keepdims", 0);
	int p;

	snprintf(kn, sizeof kn, "K_%s", name);
	snprintf(pn, sizeof pn, "p_%s", name);
	snprintf(sn, sizeof sn, "s_%s", name);
	p = node(g, "Mul", 2, (int[]){ y, value(g, kn, HP_VALUE_INPUT, HP_F32, s) }, act(g, pn), 0, NULL);
	return node(g, "ReduceSum", 1, &p, act(g, sn), 1, &keep0);
}

enum { S = 4, B = 5, I = 3, H = 2 };

/* X [B, S, I] (an input) through the op, loss = weighted sums of its
 * outputs; cut: the band pass in 3 bands first.  Returns the graph
 * differentiated, its RNNGrads' chains made; *nbands the recurrent bands. */
static struct hp_graph *build(const struct rcase *c, int cut, int *nbands)
{
	int G = !strcmp(c->op, "LSTM") ? 4 : !strcmp(c->op, "GRU") ? 3 : 1, lstm = G == 4;
	int D = strcmp(c->direction, "bidirectional") ? 1 : 2, in[8], out[3], s[3], k, nsplit = 0, axis = -1;
	struct hp_graph *g = hp_graph_new(c->op);
	struct hp_shape hs = shp(3, B, D, H);
	static const int64_t lens[B] = { 4, 2, 3, 1, 4 };
	struct hp_train_spec t;

	for (int j = 0; j < 8; j++)
		in[j] = -1;
	in[0] = value(g, "X", HP_VALUE_INPUT, HP_F32, shp(3, B, S, I));
	in[1] = param(g, "W", shp(3, D, G * H, I), 2, -0.8f, 0.8f);
	in[2] = param(g, "R", shp(3, D, G * H, H), 3, -0.8f, 0.8f);
	in[3] = param(g, "B", shp(2, D, 2 * G * H), 4, -0.5f, 0.5f);
	if (c->seq_lens)
		in[4] = const_i64(g, "lens", B, lens);
	in[5] = param(g, "h0", hs, 5, -0.5f, 0.5f);
	if (lstm)
		in[6] = param(g, "c0", hs, 6, -0.5f, 0.5f);
	if (lstm && c->peep)
		in[7] = param(g, "P", shp(2, D, 3 * H), 7, -0.5f, 0.5f);
	for (int o = 0; o < 2 + lstm; o++)
		out[o] = act(g, (const char *[]){ "y", "yh", "yc" }[o]);
	k = hp_graph_add_node(g, "rnn", c->op, lstm ? 8 : 6, in, 2 + lstm, out);
	assert_true(k >= 0);
	assert_int_equal(hp_graph_add_attr(g, k, &(struct hp_attr){ .name = "hidden_size", .type = HP_ATTR_INT, .i = H }), 0);
	assert_int_equal(hp_graph_add_attr(g, k, &(struct hp_attr){ .name = "layout", .type = HP_ATTR_INT, .i = 1 }), 0);
	struct hp_attr dir = str_attr("direction", c->direction);
	assert_int_equal(hp_graph_add_attr(g, k, &dir), 0);
	s[0] = weighted(g, out[0], "y", shp(4, B, S, D, H));
	s[1] = weighted(g, out[1], "h", hs);
	s[2] = node(g, "Add", 2, s, act(g, lstm ? "l2" : "loss"), 0, NULL);
	if (lstm)
		s[2] = node(g, "Add", 2, (int[]){ s[2], weighted(g, out[2], "c", hs) }, act(g, "loss"), 0, NULL);
	set_output(g, s[2]);
	assert_int_equal(hp_graph_finalize(g), 0);
	if (hp_graph_infer(g) < 0)
		fail_msg("%s", hp_errmsg());
	if (cut) {
		if (hp_split_bands(g, 3, 1, 0, 0, 1, &nsplit, &axis, NULL, NULL) < 0 || hp_graph_infer(g) < 0)
			fail_msg("%s", hp_errmsg());
		assert_int_equal(axis, 0);
		assert_true(nsplit >= 1);
	}
	hp_train_spec_init(&t, sizeof t);
	t.loss = HP_LOSS_OUTPUT;
	t.output = "loss";
	if (hp_autodiff(g, &t) < 0 || hp_split_grad_exact(g) < 0)
		fail_msg("%s", hp_errmsg());
	*nbands = 0;
	for (int i = 0; i < g->nnodes; i++)
		*nbands += !strcmp(g->nodes[i].op_type, c->op);
	return g;
}

static void fill(struct mini *m, int lstm)
{
	fill_inputs(m, "X", 1, -1, 1);
	fill_inputs(m, "K_y", 100, -1, 1);
	fill_inputs(m, "K_h", 101, -1, 1);
	if (lstm)
		fill_inputs(m, "K_c", 102, -1, 1);
}

static void check_case(const struct rcase *c)
{
	int lstm = !strcmp(c->op, "LSTM"), nw, nb, partial = 0, checked = 0;
	struct hp_graph *gw = build(c, 0, &nw), *gb = build(c, 1, &nb);
	struct mini mw, mb;

	assert_int_equal(nw, 1);
	assert_int_equal(nb, 3);
	mini_init(&mw, gw);
	mini_init(&mb, gb);
	fill(&mw, lstm);
	fill(&mb, lstm);
	float lw = loss_of(&mw), lb = loss_of(&mb);
	assert_memory_equal(&lw, &lb, sizeof lw);
	for (int p = 0; p < gw->nvalues; p++) {
		if (!gw->values[p].trainable)
			continue;
		int q = hp_graph_find_value(gb, gw->values[p].name);
		const struct hp_node *uw = update_of(gw, p), *ub = q >= 0 ? update_of(gb, q) : NULL;
		assert_non_null(uw);
		assert_non_null(ub);
		size_t n = (size_t)hp_shape_numel(&gw->values[p].shape) * sizeof(float);
		assert_int_equal(gb->values[ub->inputs[1]].dtype, HP_F32);
		if (memcmp(mini_data(&mw, uw->inputs[1]), mini_data(&mb, ub->inputs[1]), n))
			fail_msg("%s %s: the gradient of '%s' in bands differs from the whole's", c->op, c->direction,
				 gw->values[p].name);
		checked++;
	}
	assert_int_equal(checked, 4 + lstm + (lstm && c->peep));
	for (int i = 0; i < gb->nnodes; i++)
		partial += !strcmp(gb->nodes[i].op_type, "RNNGrad") && hp_attr_int(&gb->nodes[i], "partial", 0) != 0;
	assert_int_equal(partial, 2); /* the bands after the first hand on their sums */
	mini_free(&mw);
	mini_free(&mb);
	hp_graph_free(gw);
	hp_graph_free(gb);
}

static void test_bands_bitwise(void **state)
{
	static const struct rcase cases[] = {
		{ "LSTM", "bidirectional", 1, 1 },
		{ "LSTM", "forward", 0, 0 },
		{ "GRU", "bidirectional", 0, 0 },
		{ "GRU", "reverse", 1, 0 },
		{ "RNN", "forward", 0, 0 },
	};

	(void)state;
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
		check_case(&cases[i]);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_bands_bitwise),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
