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

/* An int64 constant of shape s. */
static int const_idx(struct hp_graph *g, const char *name, struct hp_shape s, const int64_t *vals)
{
	int v = value(g, name, HP_VALUE_CONSTANT, HP_I64, s);
	size_t bytes = (size_t)hp_shape_numel(&s) * sizeof(int64_t);
	int64_t *d = malloc(bytes);

	memcpy(d, vals, bytes);
	g->values[v].data = d;
	g->values[v].src.kind = HP_BLOB_MEMORY;
	return v;
}

/* loss = the sum of the weighted sums named in ws[0..n) */
static void sum_into_loss(struct hp_graph *g, int n, const int *ws)
{
	int acc = ws[0];

	for (int i = 1; i < n; i++) {
		char nm[32];
		snprintf(nm, sizeof nm, i == n - 1 ? "loss" : "acc%d", i);
		acc = node(g, "Add", 2, (int[]){ acc, ws[i] }, act(g, nm), 0, NULL);
	}
	set_output(g, acc);
}

/* GatherElements (repeated indices: contributions add), TopK's values,
 * ScatterElements (reduction none, two updates to one place: the last
 * written keeps it, the other gets no gradient), ScatterND (add). */
static void test_index_grads(void **state)
{
	static const int64_t gi[8] = { 0, 2, 1, 0, 2, 2, 0, 1 }, si[4] = { 3, 3, 1, 2 }, ni[2] = { 2, 0 }, kk[1] = { 2 };
	static const char *const ks[4] = { "K_ge", "K_tk", "K_se", "K_sn" };
	struct hp_graph *g = hp_graph_new("index");
	int p = param(g, "P", shp(2, 3, 4), 1, -1, 1), q = param(g, "Q", shp(2, 3, 5), 2, -1, 1);
	int d = param(g, "D", shp(2, 3, 4), 3, -1, 1), u = param(g, "U", shp(2, 2, 2), 4, -1, 1);
	int d2 = param(g, "D2", shp(2, 4, 3), 5, -1, 1), u2 = param(g, "U2", shp(2, 2, 3), 6, -1, 1), w[4], tk[2];
	struct hp_attr ax0 = iattr("axis", 0), ax1 = iattr("axis", 1), red = str_attr("reduction", "add");
	float *qd = g->values[q].data;

	(void)state;
	for (int i = 0; i < 15; i++) /* distinct by 0.1 or more: no tie within the differences' step */
		qd[i] = (float)((i * 7) % 15) * 0.13f - 1;
	w[0] = weighted(g, node(g, "GatherElements", 2, (int[]){ p, const_idx(g, "gi", shp(2, 2, 4), gi) },
				act(g, "ge"), 1, &ax0), "ge", shp(2, 2, 4));
	tk[0] = act(g, "tv");
	tk[1] = act(g, "ti");
	int k = hp_graph_add_node(g, "topk", "TopK", 2, (int[]){ q, const_i64(g, "k", 1, kk) }, 2, tk);
	assert_int_equal(hp_graph_add_attr(g, k, &ax1), 0);
	w[1] = weighted(g, tk[0], "tk", shp(2, 3, 2));
	w[2] = weighted(g, node(g, "ScatterElements", 3, (int[]){ d, const_idx(g, "si", shp(2, 2, 2), si), u },
				act(g, "se"), 1, &ax1), "se", shp(2, 3, 4));
	w[3] = weighted(g, node(g, "ScatterND", 3, (int[]){ d2, const_idx(g, "ni", shp(2, 2, 1), ni), u2 },
				act(g, "sn"), 1, &red), "sn", shp(2, 4, 3));
	sum_into_loss(g, 4, w);
	check_graph(g, 6, 4, ks);
}

/* Pad in every mode (constant with a negative pad that crops, reflect,
 * edge, wrap, and pads of some axes only) and Tile. */
static void test_pad_tile_grads(void **state)
{
	static const char *const modes[4] = { "constant", "reflect", "edge", "wrap" };
	static const int64_t pads[4][4] = { { 1, -1, 2, 1 }, { 2, 1, 1, 2 }, { 0, 3, 2, 0 }, { 3, 2, 1, 4 } };
	static const int64_t axes[1] = { -1 }, p1[2] = { 2, 1 }, reps[2] = { 2, 3 };
	static const char *const ks[6] = { "K_pad0", "K_pad1", "K_pad2", "K_pad3", "K_axes", "K_tile" };
	struct hp_graph *g = hp_graph_new("pad");
	int w[6];

	(void)state;
	for (int m = 0; m < 4; m++) {
		char pn[16], cn[16], yn[16];
		snprintf(pn, sizeof pn, "X%d", m);
		snprintf(cn, sizeof cn, "pads%d", m);
		snprintf(yn, sizeof yn, "pad%d", m);
		int x = param(g, pn, shp(2, 3, 4), 10 + (unsigned)m, -1, 1);
		struct hp_attr mode = str_attr("mode", modes[m]);
		int y = node(g, "Pad", 2, (int[]){ x, const_i64(g, cn, 4, pads[m]) }, act(g, yn), 1, &mode);
		w[m] = weighted(g, y, yn, shp(2, 3 + pads[m][0] + pads[m][2], 4 + pads[m][1] + pads[m][3]));
	}
	struct hp_attr refl = str_attr("mode", "reflect");
	int xa = param(g, "XA", shp(2, 2, 3), 20, -1, 1);
	int ya = node(g, "Pad", 4, (int[]){ xa, const_i64(g, "pa", 2, p1), -1, const_i64(g, "ax", 1, axes) },
		      act(g, "ya"), 1, &refl);
	w[4] = weighted(g, ya, "axes", shp(2, 2, 6));
	int xt = param(g, "XT", shp(2, 2, 3), 21, -1, 1);
	w[5] = weighted(g, node(g, "Tile", 2, (int[]){ xt, const_i64(g, "reps", 2, reps) }, act(g, "yt"), 0, NULL),
			"tile", shp(2, 4, 9));
	sum_into_loss(g, 6, w);
	check_graph(g, 6, 6, ks);
}

/* Einsum: batched matmul, an implicit output, an ellipsis, three operands. */
static void test_einsum_grads(void **state)
{
	static const char *const ks[4] = { "K_bmm", "K_imp", "K_ell", "K_three" };
	struct hp_graph *g = hp_graph_new("einsum");
	struct hp_attr e[4] = { str_attr("equation", "bij,bjk->bik"), str_attr("equation", "ij, j"),
				str_attr("equation", "...ij,jk->...ik"), str_attr("equation", "ij,jk,kl->li") };
	int a = param(g, "A", shp(3, 2, 3, 4), 1, -1, 1), b = param(g, "B", shp(3, 2, 4, 2), 2, -1, 1);
	int m = param(g, "M", shp(2, 3, 4), 3, -1, 1), v = param(g, "V", shp(1, 4), 4, -1, 1);
	int x = param(g, "X", shp(4, 2, 2, 3, 4), 5, -1, 1), y = param(g, "Y", shp(2, 4, 2), 6, -1, 1);
	int p = param(g, "P", shp(2, 2, 3), 7, -1, 1), q = param(g, "Q", shp(2, 3, 2), 8, -1, 1);
	int r = param(g, "R", shp(2, 2, 4), 9, -1, 1), w[4];

	(void)state;
	w[0] = weighted(g, node(g, "Einsum", 2, (int[]){ a, b }, act(g, "bmm"), 1, &e[0]), "bmm", shp(3, 2, 3, 2));
	w[1] = weighted(g, node(g, "Einsum", 2, (int[]){ m, v }, act(g, "imp"), 1, &e[1]), "imp", shp(1, 3));
	w[2] = weighted(g, node(g, "Einsum", 2, (int[]){ x, y }, act(g, "ell"), 1, &e[2]), "ell", shp(4, 2, 2, 3, 2));
	w[3] = weighted(g, node(g, "Einsum", 3, (int[]){ p, q, r }, act(g, "three"), 1, &e[3]), "three", shp(2, 4, 2));
	sum_into_loss(g, 4, w);
	check_graph(g, 9, 4, ks);
}

/* Refused cleanly: a diagonal operand, a Scatter that multiplies. */
static void test_refusals(void **state)
{
	static const int64_t si[2] = { 0, 1 };
	struct hp_graph *g = hp_graph_new("refuse");
	struct hp_attr diag = str_attr("equation", "ii->i");
	int a = param(g, "A", shp(2, 3, 3), 1, -1, 1);
	struct hp_train_spec t;

	(void)state;
	set_output(g, node(g, "ReduceSum", 1, (int[]){ node(g, "Einsum", 1, &a, act(g, "d"), 1, &diag) }, act(g, "loss"),
			   0, NULL));
	assert_int_equal(hp_graph_finalize(g), 0);
	hp_train_spec_init(&t, sizeof t);
	t.loss = HP_LOSS_OUTPUT;
	t.output = "loss";
	assert_int_equal(hp_autodiff(g, &t), HP_EUNSUPPORTED);
	assert_non_null(strstr(hp_errmsg(), "diagonal"));
	hp_graph_free(g);

	g = hp_graph_new("refuse2");
	struct hp_attr mul = str_attr("reduction", "mul");
	int d = param(g, "D", shp(1, 3), 2, -1, 1), u = param(g, "U", shp(1, 2), 3, -1, 1);
	int s = node(g, "ScatterElements", 3, (int[]){ d, const_i64(g, "si", 2, si), u }, act(g, "s"), 1, &mul);
	set_output(g, node(g, "ReduceSum", 1, &s, act(g, "loss"), 0, NULL));
	assert_int_equal(hp_graph_finalize(g), 0);
	assert_int_equal(hp_autodiff(g, &t), HP_EUNSUPPORTED);
	assert_non_null(strstr(hp_errmsg(), "reduction"));
	hp_graph_free(g);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_lstm_grads),
		cmocka_unit_test(test_gru_grads),
		cmocka_unit_test(test_rnn_grads),
		cmocka_unit_test(test_index_grads),
		cmocka_unit_test(test_pad_tile_grads),
		cmocka_unit_test(test_einsum_grads),
		cmocka_unit_test(test_refusals),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
