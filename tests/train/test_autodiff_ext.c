/* Gradient rules of the recurrent, indexing and rearranging operators
 * (exec/autodiff_rules_ext.c) against central differences of a loss the
 * graph computes: every input of the operator that can carry a gradient
 * (X, weights, biases, initial states, peepholes, data and updates) is a
 * trainable parameter, and the loss reads every output (Y, Y_h, Y_c)
 * weighted by fixed random tensors, so each output's gradient path is
 * exercised. */
#include <math.h>
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
#include "hpdlf/error.h"
#include "hpdlf/graph.h"

static struct hp_attr iattr(const char *name, int64_t v)
{
	return (struct hp_attr){ .name = (char *)name, .type = HP_ATTR_INT, .i = v };
}

/* sum(y * K) with K a fixed random input named after y; returns the sum. */
static int weighted(struct hp_graph *g, int y, const char *name, struct hp_shape s)
{
	char kn[64], pn[64], sn[64];
	struct hp_attr keep0 = iattr("keepdims", 0);
	int k, p;

	snprintf(kn, sizeof kn, "K_%s", name);
	snprintf(pn, sizeof pn, "p_%s", name);
	snprintf(sn, sizeof sn, "s_%s", name);
	k = value(g, kn, HP_VALUE_INPUT, HP_F32, s);
	p = node(g, "Mul", 2, (int[]){ y, k }, act(g, pn), 0, NULL);
	return node(g, "ReduceSum", 1, &p, act(g, sn), 1, &keep0);
}

/* Differentiate g with its output "loss", fill the K_* inputs, check. */
static void check_graph(struct hp_graph *g, int nparams, int nk, const char *const *ks)
{
	struct hp_train_spec t;
	struct mini m;

	assert_int_equal(hp_graph_finalize(g), 0);
	hp_train_spec_init(&t, sizeof t);
	t.loss = HP_LOSS_OUTPUT;
	t.output = "loss";
	if (hp_autodiff(g, &t) < 0)
		fail_msg("%s", hp_errmsg());
	mini_init(&m, g);
	for (int i = 0; i < nk; i++)
		fill_inputs(&m, ks[i], 100 + (unsigned)i, -1, 1);
	check_gradients(&m, nparams);
	mini_free(&m);
	hp_graph_free(g);
}

struct rnn_case {
	const char *op;
	const char *direction;
	int layout, lbr, input_forget, seq_lens, peep;
	const char *acts; /* comma-separated activations, or NULL */
};

static int add_rnn_node(struct hp_graph *g, const struct rnn_case *c, const int *in, int nin, int nout, int *out,
			int hidden)
{
	const char *names[6];
	char buf[128];
	struct hp_attr a[6];
	int na = 0, k, nact = 0;

	k = hp_graph_add_node(g, "rnn", c->op, nin, in, nout, out);
	assert_true(k >= 0);
	a[na++] = iattr("hidden_size", hidden);
	a[na++] = str_attr("direction", c->direction);
	a[na++] = iattr("layout", c->layout);
	if (!strcmp(c->op, "GRU"))
		a[na++] = iattr("linear_before_reset", c->lbr);
	if (!strcmp(c->op, "LSTM"))
		a[na++] = iattr("input_forget", c->input_forget);
	if (c->acts) {
		snprintf(buf, sizeof buf, "%s", c->acts);
		for (char *tok = strtok(buf, ","); tok && nact < 6; tok = strtok(NULL, ","))
			names[nact++] = tok;
		a[na++] = (struct hp_attr){ .name = "activations", .type = HP_ATTR_STRINGS, .n = nact,
					    .strings = (char **)names };
	}
	for (int i = 0; i < na; i++)
		assert_int_equal(hp_graph_add_attr(g, k, &a[i]), 0);
	return k;
}

/* X[S, B, I] (or [B, S, I]) through the op; loss = weighted sums of Y, Y_h
 * (and Y_c); every forward input a parameter. */
static void check_rnn(const struct rnn_case *c)
{
	enum { S = 4, B = 3, I = 3, H = 2 };
	int G = !strcmp(c->op, "LSTM") ? 4 : !strcmp(c->op, "GRU") ? 3 : 1, lstm = G == 4;
	int D = strcmp(c->direction, "bidirectional") ? 1 : 2, in[8], out[3], nparams = 0, s[3];
	struct hp_graph *g = hp_graph_new(c->op);
	struct hp_shape xs = c->layout ? shp(3, B, S, I) : shp(3, S, B, I);
	struct hp_shape hs = c->layout ? shp(3, B, D, H) : shp(3, D, B, H);
	struct hp_shape ys = c->layout ? shp(4, B, S, D, H) : shp(4, S, D, B, H);
	static const int64_t lens[B] = { 4, 2, 3 };
	static const char *const ks[3] = { "K_y", "K_h", "K_c" };

	for (int k = 0; k < 8; k++)
		in[k] = -1;
	in[0] = param(g, "X", xs, 1, -1, 1);
	in[1] = param(g, "W", shp(3, D, G * H, I), 2, -0.8f, 0.8f);
	in[2] = param(g, "R", shp(3, D, G * H, H), 3, -0.8f, 0.8f);
	in[3] = param(g, "B", shp(2, D, 2 * G * H), 4, -0.5f, 0.5f);
	if (c->seq_lens)
		in[4] = const_i64(g, "lens", B, lens);
	in[5] = param(g, "h0", hs, 5, -0.5f, 0.5f);
	nparams = 5;
	if (lstm) {
		in[6] = param(g, "c0", hs, 6, -0.5f, 0.5f);
		nparams++;
		if (c->peep) {
			in[7] = param(g, "P", shp(2, D, 3 * H), 7, -0.5f, 0.5f);
			nparams++;
		}
	}
	for (int o = 0; o < 2 + lstm; o++)
		out[o] = act(g, (const char *[]){ "y", "yh", "yc" }[o]);
	add_rnn_node(g, c, in, lstm ? 8 : 6, 2 + lstm, out, H);
	s[0] = weighted(g, out[0], "y", ys);
	s[1] = weighted(g, out[1], "h", hs);
	s[2] = node(g, "Add", 2, s, act(g, lstm ? "l2" : "loss"), 0, NULL);
	if (lstm)
		s[2] = node(g, "Add", 2, (int[]){ s[2], weighted(g, out[2], "c", hs) }, act(g, "loss"), 0, NULL);
	set_output(g, s[2]);
	check_graph(g, nparams, 2 + lstm, ks);
}

static void test_lstm_grads(void **state)
{
	static const struct rnn_case cases[] = {
		{ "LSTM", "bidirectional", 0, 0, 0, 1, 1, NULL },
		{ "LSTM", "reverse", 1, 0, 1, 1, 1, NULL },
		{ "LSTM", "forward", 0, 0, 0, 0, 0, "HardSigmoid,Softsign,Tanh" },
	};

	(void)state;
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
		check_rnn(&cases[i]);
}

static void test_gru_grads(void **state)
{
	static const struct rnn_case cases[] = {
		{ "GRU", "bidirectional", 0, 0, 0, 1, 0, NULL },
		{ "GRU", "forward", 1, 1, 0, 0, 0, NULL },
		{ "GRU", "reverse", 0, 1, 0, 1, 0, "Sigmoid,Softsign" },
	};

	(void)state;
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
		check_rnn(&cases[i]);
}

static void test_rnn_grads(void **state)
{
	static const struct rnn_case cases[] = {
		{ "RNN", "bidirectional", 0, 0, 0, 1, 0, NULL },
		{ "RNN", "forward", 1, 0, 0, 0, 0, "Softsign" },
	};

	(void)state;
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
		check_rnn(&cases[i]);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_lstm_grads),
		cmocka_unit_test(test_gru_grads),
		cmocka_unit_test(test_rnn_grads),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
