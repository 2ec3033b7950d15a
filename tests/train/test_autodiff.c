/* Autodiff over whole graphs: every parameter's gradient (the input of its
 * update node) against central differences of the loss the same graph
 * computes, the update and state wiring through value.next, training-mode
 * BatchNormalization statistics, and loss decreasing over steps.  The graph
 * is run by a small in-test executor (node order, value.next carried).
 * Data parallelism: the gradient buckets' AllReduce nodes before the
 * updates, chained by their tokens (run here with their single-process
 * meaning: the gradient scaled by 1/ranks).  --shard optimizer/gradients:
 * each update on this rank's slice (the shard partition against plain
 * floor(n*r/N)), state of the slice's size, the parameters gathered, and
 * the slice's new values bitwise those of the unsharded graph. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "exec/autodiff.h"
#include "exec/shard.h"
#include "exec/train_dp.h"
#include "exec/train_shard.h"
#include "hpdlf/error.h"
#include "hpdlf/graph.h"
#include "hpdlf/kernels.h"
#include "ad_harness.h"

/* ---- graphs ------------------------------------------------------------ */

/* ids -> Gather(E) ; a = x * W1 + e + B1 ; h = Tanh(a) ; h2 = h * W1 (W1 fans
 * out) ; Concat(h, h2) -> Slice -> Reshape [4, 2, 5] -> Dropout -> logits. */
static struct hp_graph *mlp_graph(int dropout)
{
	struct hp_graph *g = hp_graph_new("mlp");
	int64_t st[1] = { 1 }, en[1] = { 11 }, ax[1] = { 1 }, rs[3] = { 4, 2, 5 };
	int x = value(g, "x", HP_VALUE_INPUT, HP_F32, shp(2, 4, 6));
	int ids = value(g, "ids", HP_VALUE_INPUT, HP_I64, shp(1, 4));
	int e = param(g, "E", shp(2, 10, 6), 1, -0.5f, 0.5f);
	int w1 = param(g, "W1", shp(1, 6), 2, -1, 1);
	int b1 = param(g, "B1", shp(2, 1, 6), 3, -0.5f, 0.5f);
	struct hp_attr axis1 = { .name = "axis", .type = HP_ATTR_INT, .i = 1 };
	struct hp_attr axis0 = { .name = "axis", .type = HP_ATTR_INT, .i = 0 };
	int ge, xw, a, a2, h, h2, c, s, r;

	ge = node(g, "Gather", 2, (int[]){ e, ids }, act(g, "e"), 1, &axis0);
	xw = node(g, "Mul", 2, (int[]){ x, w1 }, act(g, "xw"), 0, NULL);
	a = node(g, "Add", 2, (int[]){ xw, ge }, act(g, "a"), 0, NULL);
	a2 = node(g, "Add", 2, (int[]){ a, b1 }, act(g, "a2"), 0, NULL);
	h = node(g, "Tanh", 1, &a2, act(g, "h"), 0, NULL);
	h2 = node(g, "Mul", 2, (int[]){ h, w1 }, act(g, "h2"), 0, NULL);
	c = node(g, "Concat", 2, (int[]){ h, h2 }, act(g, "c"), 1, &axis1);
	s = node(g, "Slice", 4, (int[]){ c, const_i64(g, "st", 1, st), const_i64(g, "en", 1, en), const_i64(g, "ax", 1, ax) },
		 act(g, "s"), 0, NULL);
	r = node(g, "Reshape", 2, (int[]){ s, const_i64(g, "shape", 3, rs) }, act(g, dropout ? "r" : "logits"), 0, NULL);
	if (dropout) {
		struct hp_attr ratio = { .name = "ratio", .type = HP_ATTR_FLOAT, .f = 0.25f };
		r = node(g, "Dropout", 1, &r, act(g, "logits"), 1, &ratio);
	}
	set_output(g, r);
	assert_int_equal(hp_graph_finalize(g), 0);
	return g;
}

static void test_mlp_cross_entropy_grads(void **state)
{
	struct hp_graph *g = mlp_graph(1);
	struct hp_train_spec t;
	struct mini m;
	int grad_sums = 0;

	(void)state;
	hp_train_spec_init(&t, sizeof t);
	t.lr = 0.1;
	if (hp_autodiff(g, &t) < 0)
		fail_msg("%s", hp_errmsg());
	for (int i = 0; i < g->nnodes; i++)
		grad_sums += !strcmp(g->nodes[i].op_type, "GradSum");
	assert_true(grad_sums >= 2); /* W1 and h fan out */
	assert_int_equal(g->values[hp_graph_find_value(g, "labels")].dtype, HP_I64);
	mini_init(&m, g);
	fill_inputs(&m, "x", 5, -1, 1);
	fill_inputs(&m, "ids", 6, -10, 10); /* negative ids index from the end */
	fill_inputs(&m, "labels", 7, 0, 2);
	check_gradients(&m, 3);
	mini_free(&m);
	hp_graph_free(g);
}

/* SGD with momentum and Nesterov: after a run, W = W - lr * (g + mu * b). */
static void test_sgd_wiring_and_descent(void **state)
{
	struct hp_graph *g = mlp_graph(0);
	struct hp_train_spec t;
	struct mini m;
	float first = 0, last = 0;

	(void)state;
	hp_train_spec_init(&t, sizeof t);
	t.lr = 0.2;
	t.momentum = 0.5;
	t.nesterov = 1;
	assert_int_equal(hp_autodiff(g, &t), 0);
	mini_init(&m, g);
	fill_inputs(&m, "x", 5, -1, 1);
	fill_inputs(&m, "ids", 6, 0, 10);
	fill_inputs(&m, "labels", 7, 0, 2);
	int w1 = hp_graph_find_value(g, "W1");
	const struct hp_node *u = update_of(g, w1);
	float before[6], grad[6];
	memcpy(before, m.buf[w1], sizeof before);
	for (int step = 0; step < 30; step++) {
		float l = loss_of(&m);
		if (step == 0) {
			memcpy(grad, mini_data(&m, u->inputs[1]), sizeof grad);
			first = l;
		}
		last = l;
		mini_carry(&m);
		if (step == 0)
			for (int i = 0; i < 6; i++) /* b1 = g; d = g + mu b1 */
				assert_true(fabsf(((float *)m.buf[w1])[i] - (before[i] - 0.2f * (grad[i] + 0.5f * grad[i]))) < 1e-6f);
	}
	if (!(last < 0.8f * first))
		fail_msg("loss %g -> %g after 30 steps", first, last);
	mini_free(&m);
	hp_graph_free(g);
}

/* BatchNormalization in training: batch statistics, running statistics
 * moving by 1 - momentum, gradients through the batch statistics; MSE loss
 * and Adam with its step counter. */
static void test_batchnorm_mse_adam(void **state)
{
	struct hp_graph *g = hp_graph_new("bn");
	struct hp_train_spec t;
	struct mini m;
	int x = value(g, "x", HP_VALUE_INPUT, HP_F32, shp(3, 5, 3, 4));
	int sc = param(g, "scale", shp(1, 3), 11, 0.5f, 1.5f), b = param(g, "bias", shp(1, 3), 12, -0.5f, 0.5f);
	int mean = param(g, "mean", shp(1, 3), 13, -0.5f, 0.5f), var = param(g, "var", shp(1, 3), 14, 0.5f, 1.5f);
	int w = param(g, "W", shp(2, 1, 4), 15, -1, 1);
	struct hp_attr mom = { .name = "momentum", .type = HP_ATTR_FLOAT, .f = 0.75f };
	float rm0[3], rv0[3];

	(void)state;
	int y = node(g, "BatchNormalization", 5, (int[]){ x, sc, b, mean, var }, act(g, "y"), 1, &mom);
	int z = node(g, "Tanh", 1, &y, act(g, "z"), 0, NULL);
	set_output(g, node(g, "Mul", 2, (int[]){ z, w }, act(g, "out"), 0, NULL));
	assert_int_equal(hp_graph_finalize(g), 0);
	hp_train_spec_init(&t, sizeof t);
	t.loss = HP_LOSS_MSE;
	t.optimizer = HP_OPT_ADAM;
	t.lr = 0.05;
	if (hp_autodiff(g, &t) < 0)
		fail_msg("%s", hp_errmsg());
	assert_int_equal(g->values[mean].trainable, 0);
	assert_true(g->values[mean].next >= 0 && g->values[var].next >= 0);
	mini_init(&m, g);
	fill_inputs(&m, "x", 21, -2, 3);
	fill_inputs(&m, "labels", 22, -1, 1);
	check_gradients(&m, 3);
	memcpy(rm0, m.buf[mean], sizeof rm0);
	memcpy(rv0, m.buf[var], sizeof rv0);
	mini_run(&m);
	mini_carry(&m);
	for (int c = 0; c < 3; c++) { /* torch train mode with momentum 0.25 */
		const float *xv = m.buf[x];
		double s = 0, q = 0;
		for (int n = 0; n < 5; n++)
			for (int i = 0; i < 4; i++)
				s += xv[(n * 3 + c) * 4 + i];
		s /= 20;
		for (int n = 0; n < 5; n++)
			for (int i = 0; i < 4; i++)
				q += pow(xv[(n * 3 + c) * 4 + i] - s, 2);
		assert_true(fabs(((float *)m.buf[mean])[c] - (0.75 * rm0[c] + 0.25 * s)) < 1e-5);
		assert_true(fabs(((float *)m.buf[var])[c] - (0.75 * rv0[c] + 0.25 * q / 19)) < 1e-5);
	}
	assert_int_equal(*(int64_t *)m.buf[hp_graph_find_value(g, "train.step")], 1);
	mini_free(&m);
	hp_graph_free(g);
}

/* A weight used through nodes constant folding computed once (PyTorch
 * exports Linear as MatMul(x, Transpose(W)) without folding, tied
 * embeddings as Gather(E) and MatMul(h, Transpose(E))): the gradient must
 * reach W through them, and they must not be folded again. */
static void test_weight_behind_folded_nodes(void **state)
{
	struct hp_graph *g = hp_graph_new("tied");
	struct hp_attr perm = { .name = "perm", .type = HP_ATTR_INTS, .n = 2, .ints = (int64_t[]){ 1, 0 } };
	struct hp_attr axis0 = { .name = "axis", .type = HP_ATTR_INT, .i = 0 };
	struct hp_train_spec t;
	struct mini m;

	(void)state;
	int x = value(g, "x", HP_VALUE_INPUT, HP_F32, shp(2, 4, 3));
	int ids = value(g, "ids", HP_VALUE_INPUT, HP_I64, shp(1, 4));
	int e = param(g, "E", shp(2, 5, 3), 31, -1, 1);
	int half = param(g, "half", shp(0), 32, 0.5f, 0.5f);
	g->values[half].trainable = 0;
	int ge = node(g, "Gather", 2, (int[]){ e, ids }, act(g, "ge"), 1, &axis0);
	int h = node(g, "Add", 2, (int[]){ x, ge }, act(g, "h"), 0, NULL);
	int et = node(g, "Transpose", 1, &e, act(g, "et"), 1, &perm);
	int es = node(g, "Mul", 2, (int[]){ et, half }, act(g, "es"), 0, NULL);
	set_output(g, node(g, "MatMul", 2, (int[]){ h, es }, act(g, "logits"), 0, NULL));
	assert_int_equal(hp_graph_finalize(g), 0);
	assert_int_equal(hp_graph_infer(g), 0);
	assert_non_null(g->values[hp_graph_find_value(g, "es")].data); /* what inference does: folded */
	hp_train_spec_init(&t, sizeof t);
	if (hp_autodiff(g, &t) < 0)
		fail_msg("%s", hp_errmsg());
	for (int i = 0; i < g->nnodes; i++)
		if (!strcmp(g->nodes[i].op_type, "Transpose") || !strcmp(g->nodes[i].op_type, "Mul"))
			assert_false(g->nodes[i].folded);
	assert_null(g->values[hp_graph_find_value(g, "es")].data);
	mini_init(&m, g);
	fill_inputs(&m, "x", 33, -1, 1);
	fill_inputs(&m, "ids", 34, 0, 5);
	fill_inputs(&m, "labels", 35, 0, 5);
	check_gradients(&m, 1); /* both uses of E: Gather and the transposed MatMul */
	mini_free(&m);
	hp_graph_free(g);
}

/* output:NAME on a graph computing its own scalar; and clear errors. */
static void test_output_loss_and_errors(void **state)
{
	struct hp_graph *g = mlp_graph(0);
	struct hp_train_spec t;

	(void)state;
	hp_train_spec_init(&t, sizeof t);
	t.loss = HP_LOSS_OUTPUT;
	t.output = "logits";
	assert_int_equal(hp_autodiff(g, &t), HP_EUSAGE); /* not a scalar */
	assert_non_null(strstr(hp_errmsg(), "not a scalar"));
	t.output = "nope";
	assert_int_equal(hp_autodiff(g, &t), HP_EUSAGE);
	hp_graph_free(g);

	g = hp_graph_new("unsupported");
	int x = value(g, "x", HP_VALUE_INPUT, HP_F32, shp(2, 2, 3));
	int w = param(g, "W", shp(2, 2, 3), 1, -1, 1);
	int y = node(g, "Mul", 2, (int[]){ x, w }, act(g, "y"), 0, NULL);
	set_output(g, node(g, "Floor", 1, &y, act(g, "f"), 0, NULL));
	assert_int_equal(hp_graph_finalize(g), 0);
	hp_train_spec_init(&t, sizeof t);
	t.loss = HP_LOSS_MSE;
	assert_int_equal(hp_autodiff(g, &t), HP_EUNSUPPORTED);
	assert_non_null(strstr(hp_errmsg(), "Floor"));
	hp_graph_free(g);

	/* a running statistic the graph computes from its input: no state to keep */
	g = hp_graph_new("computed");
	x = value(g, "x", HP_VALUE_INPUT, HP_F32, shp(2, 4, 3));
	int sc = param(g, "bn.weight", shp(1, 3), 2, 1, 1), b = param(g, "bn.bias", shp(1, 3), 3, 0, 0);
	int rv = param(g, "bn.running_var", shp(1, 3), 4, 1, 2);
	int rm = node(g, "ReduceMean", 1, &x, act(g, "bn.running_mean"), 1,
		      &(struct hp_attr){ .name = "keepdims", .type = HP_ATTR_INT, .i = 0 });
	set_output(g, node(g, "BatchNormalization", 5, (int[]){ x, sc, b, rm, rv }, act(g, "y"), 0, NULL));
	assert_int_equal(hp_graph_finalize(g), 0);
	assert_int_equal(hp_autodiff(g, &t), HP_EUNSUPPORTED);
	assert_non_null(strstr(hp_errmsg(), "'bn.running_mean' is computed by the graph"));
	hp_graph_free(g);
}

/* A BatchNorm whose running statistics an exporter merged with its scale
 * and bias (PyTorch 1.13: Identity(bias) and, here, a chain
 * Identity(Identity(weight)); or the same initializer read twice), with
 * the weight W tied between two Muls.  Training gives each statistic its
 * own initializer named after the module, starting from the source's
 * bytes, updated as state while the parameters learn apart from them; W
 * stays one parameter. */
static void check_merged_bn(int shared)
{
	struct hp_graph *g = hp_graph_new("merged");
	struct hp_train_spec t;
	struct mini m;
	int x = value(g, "x", HP_VALUE_INPUT, HP_F32, shp(3, 5, 3, 4)), rm, rv, nid = 0, nupd = 0;
	int sc = param(g, "bn.weight", shp(1, 3), 2, 0.5f, 1.5f), b = param(g, "bn.bias", shp(1, 3), 3, -1, 1);
	int w = param(g, "W", shp(2, 1, 4), 4, -1, 1);
	float b0[3], sc0[3];

	memcpy(b0, g->values[b].data, sizeof b0);
	memcpy(sc0, g->values[sc].data, sizeof sc0);
	if (shared) {
		rm = b;
		rv = sc;
	} else {
		rm = node(g, "Identity", 1, &b, act(g, "bn.running_mean"), 0, NULL);
		rv = node(g, "Identity", 1, &sc, act(g, "sc.alias"), 0, NULL);
		rv = node(g, "Identity", 1, &rv, act(g, "bn.running_var"), 0, NULL);
	}
	int y = node(g, "BatchNormalization", 5, (int[]){ x, sc, b, rm, rv }, act(g, "y"), 0, NULL);
	int z = node(g, "Mul", 2, (int[]){ y, w }, act(g, "z"), 0, NULL);
	set_output(g, node(g, "Mul", 2, (int[]){ node(g, "Tanh", 1, &z, act(g, "tz"), 0, NULL), w },
			   act(g, "out"), 0, NULL));
	assert_int_equal(hp_graph_finalize(g), 0);
	assert_int_equal(hp_graph_infer(g), 0); /* as hpdlf-exec: the Identities fold */
	hp_train_spec_init(&t, sizeof t);
	t.loss = HP_LOSS_MSE;
	t.lr = 0.5;
	if (hp_autodiff(g, &t) < 0)
		fail_msg("%s", hp_errmsg());
	rm = hp_graph_find_value(g, "bn.running_mean");
	rv = hp_graph_find_value(g, "bn.running_var");
	for (int i = 0; i < g->nnodes; i++) {
		nid += !strcmp(g->nodes[i].op_type, "Identity");
		nupd += strstr(g->nodes[i].op_type, "Update") != NULL;
		if (!strcmp(g->nodes[i].op_type, "BatchNormTrain")) {
			assert_int_equal(g->nodes[i].inputs[3], rm);
			assert_int_equal(g->nodes[i].inputs[4], rv);
		}
	}
	assert_int_equal(nid, 0);
	assert_int_equal(nupd, 3); /* W (both uses), bn.weight, bn.bias */
	assert_true(rm >= 0 && rv >= 0 && rm != b && rv != sc);
	assert_true(g->values[rm].kind == HP_VALUE_INITIALIZER && !g->values[rm].trainable && g->values[rm].next >= 0);
	assert_true(g->values[rv].kind == HP_VALUE_INITIALIZER && !g->values[rv].trainable && g->values[rv].next >= 0);
	assert_true(g->values[b].trainable && g->values[sc].trainable && g->values[w].trainable);
	mini_init(&m, g);
	assert_memory_equal(m.buf[rm], b0, sizeof b0);
	assert_memory_equal(m.buf[rv], sc0, sizeof sc0);
	fill_inputs(&m, "x", 41, -2, 3);
	fill_inputs(&m, "labels", 42, -1, 1);
	check_gradients(&m, 3);
	mini_run(&m);
	mini_carry(&m);
	for (int c = 0; c < 3; c++) { /* momentum 0.9 from the merged source's values */
		const float *xv = m.buf[x];
		double s = 0, q = 0;
		for (int n = 0; n < 5; n++)
			for (int i = 0; i < 4; i++)
				s += xv[(n * 3 + c) * 4 + i] / 20;
		for (int n = 0; n < 5; n++)
			for (int i = 0; i < 4; i++)
				q += pow(xv[(n * 3 + c) * 4 + i] - s, 2);
		assert_true(fabs(((float *)m.buf[rm])[c] - (0.9 * b0[c] + 0.1 * s)) < 1e-5);
		assert_true(fabs(((float *)m.buf[rv])[c] - (0.9 * sc0[c] + 0.1 * q / 19)) < 1e-5);
		assert_true(((float *)m.buf[b])[c] != b0[c]); /* the bias learned: apart from the mean */
	}
	mini_free(&m);
	hp_graph_free(g);
}

static void test_merged_running_stats(void **state)
{
	(void)state;
	check_merged_bn(0);
	check_merged_bn(1);
}

static const struct hp_node *producer_of(const struct hp_graph *g, int v)
{
	return v >= 0 && g->values[v].producer >= 0 ? &g->nodes[g->values[v].producer] : NULL;
}

/* Every update reads an AllReduce output; the nodes form one token chain. */
static int check_reduce_wiring(const struct hp_graph *g)
{
	int nar = 0, prev_token = -1;

	for (int i = 0; i < g->nnodes; i++) {
		const struct hp_node *n = &g->nodes[i];
		if (!strcmp(n->op_type, "SGDUpdate")) {
			const struct hp_node *p = producer_of(g, n->inputs[1]);
			assert_non_null(p);
			assert_string_equal(p->op_type, "AllReduce");
		}
		if (strcmp(n->op_type, "AllReduce"))
			continue;
		assert_string_equal(n->domain, "ai.hpdlf");
		assert_int_equal(n->inputs[0], prev_token); /* the chain, in node order */
		assert_int_equal(hp_attr_int(n, "ranks", 0), 2);
		prev_token = n->outputs[0];
		nar++;
	}
	return nar;
}

static void test_dp_buckets(void **state)
{
	struct hp_train_spec t;
	struct mini m;
	int nb;

	(void)state;
	hp_train_spec_init(&t, sizeof t);
	t.lr = 0.2;
	for (int big = 0; big < 2; big++) {
		struct hp_graph *g = mlp_graph(0);
		assert_int_equal(hp_autodiff(g, &t), 0);
		if (hp_dp_insert_reduce(g, 2, big ? 1ull << 30 : 1, &nb) < 0)
			fail_msg("%s", hp_errmsg());
		assert_int_equal(nb, big ? 1 : 3); /* E, W1, B1: one bucket each, or one for all */
		assert_int_equal(check_reduce_wiring(g), nb);
		mini_init(&m, g);
		fill_inputs(&m, "x", 5, -1, 1);
		fill_inputs(&m, "ids", 6, 0, 10);
		fill_inputs(&m, "labels", 7, 0, 2);
		mini_run(&m);
		const struct hp_node *u = update_of(g, hp_graph_find_value(g, "W1"));
		const struct hp_node *p = producer_of(g, u->inputs[1]);
		int j = 1;
		while (p->outputs[j] != u->inputs[1])
			j++;
		const float *in = mini_data(&m, p->inputs[j]), *out = mini_data(&m, u->inputs[1]);
		for (int i = 0; i < 6; i++)
			assert_true(out[i] == in[i] * 0.5f);
		mini_free(&m);
		hp_graph_free(g);
	}
	nb = -1;
	struct hp_graph *g = mlp_graph(0);
	assert_int_equal(hp_autodiff(g, &t), 0);
	assert_int_equal(hp_dp_insert_reduce(g, 1, 0, &nb), 0); /* one rank: nothing */
	assert_int_equal(nb, 0);
	for (int i = 0; i < g->nnodes; i++)
		assert_string_not_equal(g->nodes[i].op_type, "AllReduce");
	hp_graph_free(g);
}

/* The shard partition: floor(n*r/N) without overflow, contiguous, covering. */
static void test_shard_range(void **state)
{
	const uint64_t ns[] = { 0, 1, 2, 5, 7, 1000000007ull, UINT64_MAX / 3, UINT64_MAX };
	const int Ns[] = { 1, 2, 3, 7, 64, 1000 };

	(void)state;
	for (size_t i = 0; i < sizeof ns / sizeof ns[0]; i++)
		for (size_t j = 0; j < sizeof Ns / sizeof Ns[0]; j++) {
			uint64_t n = ns[i], prev = 0, lo, hi;
			int N = Ns[j];
			for (int r = 0; r < N; r++) {
				hp_shard_range(n, r, N, &lo, &hi);
				assert_true(lo == (uint64_t)((unsigned __int128)n * (unsigned)r / (unsigned)N));
				assert_int_equal(lo, prev);
				assert_true(hi >= lo && hi - lo >= n / (uint64_t)N && hi - lo - n / (uint64_t)N <= 1);
				prev = hi;
			}
			assert_true(prev == n);
		}
}

static const struct hp_node *sliced_update(const struct hp_graph *g, int p)
{
	for (int i = 0; i < g->nnodes; i++) {
		const struct hp_node *n = &g->nodes[i], *s;
		if (strstr(n->op_type, "Update") && (s = producer_of(g, n->inputs[0])) &&
		    !strcmp(s->op_type, "ShardSlice") && s->inputs[0] == p)
			return n;
	}
	return NULL;
}

/* One collective chain: ReduceScatters, then as many AllGathers. */
static void check_shard_chain(const struct hp_graph *g, int nb)
{
	int rs = 0, ag = 0, prev = -1;

	for (int i = 0; i < g->nnodes; i++) {
		const struct hp_node *n = &g->nodes[i];
		assert_string_not_equal(n->op_type, "AllReduce");
		if (strcmp(n->op_type, "ReduceScatter") && strcmp(n->op_type, "AllGather"))
			continue;
		assert_int_equal(n->inputs[0], prev);
		prev = n->outputs[0];
		if (!strcmp(n->op_type, "ReduceScatter")) {
			assert_int_equal(ag, 0);
			rs++;
		} else {
			ag++;
		}
	}
	assert_int_equal(rs, nb);
	assert_int_equal(ag, nb);
}

static struct hp_graph *dp_graph(int ranks, int rank, enum hp_shard_mode mode)
{
	struct hp_train_spec t;
	struct hp_graph *g = mlp_graph(0);
	int nb;

	hp_train_spec_init(&t, sizeof t);
	t.lr = 0.2;
	t.momentum = 0.9;
	assert_int_equal(hp_autodiff(g, &t), 0);
	if (hp_dp_insert_reduce(g, ranks, 1, &nb) < 0 || hp_shard_insert(g, ranks, rank, mode) < 0)
		fail_msg("%s", hp_errmsg());
	assert_int_equal(nb, 3);
	return g;
}

static void run_step(struct mini *m)
{
	fill_inputs(m, "x", 5, -1, 1);
	fill_inputs(m, "ids", 6, 0, 10);
	fill_inputs(m, "labels", 7, 0, 2);
	mini_run(m);
}

/* Parameter p of the sharded graph s against the plain one: the update
 * runs on [lo, hi) with state of that size, the gathered value holds the
 * plain graph's new values there (single-process meaning: zeros elsewhere). */
static void check_param(struct mini *ms, struct mini *mp, const char *name, int rank, enum hp_shard_mode mode)
{
	const struct hp_graph *s = ms->g, *pg = mp->g;
	int p = hp_graph_find_value(s, name), pp = hp_graph_find_value(pg, name);
	uint64_t n = (uint64_t)hp_shape_numel(&s->values[p].shape), lo = n * (uint64_t)rank / 3,
		 hi = n * (uint64_t)(rank + 1) / 3;
	const struct hp_node *u = sliced_update(s, p), *up = update_of(pg, pp), *rs;

	assert_non_null(u);
	assert_int_equal(hp_attr_int(producer_of(s, u->inputs[0]), "lo", -1), (int64_t)lo);
	assert_int_equal(hp_attr_int(producer_of(s, u->inputs[0]), "hi", -1), (int64_t)hi);
	assert_int_equal(hp_shape_numel(&s->values[u->inputs[2]].shape), (int64_t)(hi - lo)); /* momentum */
	rs = producer_of(s, u->inputs[1]);
	if (mode == HP_SHARD_OPTIMIZER) { /* the whole reduced gradient stays */
		assert_string_equal(rs->op_type, "ShardSlice");
		rs = producer_of(s, rs->inputs[0]);
		assert_int_equal(hp_shape_numel(&s->values[rs->outputs[1]].shape), (int64_t)n);
	}
	assert_string_equal(rs->op_type, "ReduceScatter");
	assert_string_equal(producer_of(s, s->values[p].next)->op_type, "AllGather");
	assert_true(hp_shape_equal(&s->values[s->values[p].next].shape, &s->values[p].shape));
	const float *w = mini_data(ms, s->values[p].next), *wp = mini_data(mp, pg->values[pp].next);
	const float *b = mini_data(ms, u->outputs[1]), *bp = mini_data(mp, up->outputs[1]);
	for (uint64_t i = 0; i < n; i++)
		assert_true(i >= lo && i < hi ? w[i] == wp[i] && b[i - lo] == bp[i] : w[i] == 0);
}

/* --shard parameters: one token chain over every collective in node order. */
static void check_chain3(const struct hp_graph *g)
{
	int prev = -1, ag = 0;

	for (int i = 0; i < g->nnodes; i++) {
		const struct hp_node *n = &g->nodes[i];
		assert_string_not_equal(n->op_type, "AllReduce");
		if (strcmp(n->op_type, "ReduceScatter") && strcmp(n->op_type, "AllGather"))
			continue;
		assert_int_equal(n->inputs[0], prev);
		prev = n->outputs[0];
		ag += !strcmp(n->op_type, "AllGather");
	}
	assert_int_equal(ag, 4); /* E, W1, B1 before forward; W1 before backward */
}

/* The rank holds the slice of p as state (the model's bytes there), the
 * update reads and renews it, and nodes read p only through AllGathers. */
static void check_param3(const struct hp_graph *g, const char *name, int rank)
{
	char sname[64];
	int p = hp_graph_find_value(g, name), ws, gathers = 0;
	uint64_t n = (uint64_t)hp_shape_numel(&g->values[p].shape), lo = n * (uint64_t)rank / 3,
		 hi = n * (uint64_t)(rank + 1) / 3;

	snprintf(sname, sizeof sname, "%s.shard", name);
	ws = hp_graph_find_value(g, sname);
	assert_true(ws >= 0 && g->values[p].next == -1);
	assert_int_equal(hp_shape_numel(&g->values[ws].shape), (int64_t)(hi - lo));
	assert_memory_equal(g->values[ws].data, (const float *)g->values[p].data + lo, (hi - lo) * sizeof(float));
	const struct hp_node *u = producer_of(g, g->values[ws].next);
	assert_non_null(u);
	assert_true(strstr(u->op_type, "Update") && u->inputs[0] == ws);
	assert_string_equal(producer_of(g, u->inputs[1])->op_type, "ReduceScatter");
	for (int i = 0; i < g->nnodes; i++)
		for (int j = 0; j < g->nodes[i].ninputs; j++) {
			assert_int_not_equal(g->nodes[i].inputs[j], p);
			if (g->nodes[i].inputs[j] == ws && !strcmp(g->nodes[i].op_type, "AllGather")) {
				assert_true(hp_shape_equal(&g->values[g->nodes[i].outputs[1]].shape, &g->values[p].shape));
				gathers++;
			}
		}
	assert_int_equal(gathers, strcmp(name, "W1") ? 1 : 2); /* W1 feeds a Mul's backward */
}

static void test_shard_graph(void **state)
{
	const char *params[] = { "E", "W1", "B1" };
	struct mini ms, mp;

	(void)state;
	for (int mode = HP_SHARD_OPTIMIZER; mode <= HP_SHARD_GRADIENTS; mode++)
		for (int rank = 0; rank < 3; rank++) {
			struct hp_graph *s = dp_graph(3, rank, mode), *pg = dp_graph(3, rank, HP_SHARD_NONE);
			check_shard_chain(s, 3);
			mini_init(&ms, s);
			mini_init(&mp, pg);
			run_step(&ms);
			run_step(&mp);
			for (int k = 0; k < 3; k++)
				check_param(&ms, &mp, params[k], rank, mode);
			mini_free(&ms);
			mini_free(&mp);
			hp_graph_free(s);
			hp_graph_free(pg);
		}
	for (int rank = 0; rank < 3; rank++) {
		struct hp_graph *g = dp_graph(3, rank, HP_SHARD_PARAMETERS);
		for (int k = 0; k < 3; k++)
			check_param3(g, params[k], rank);
		check_chain3(g);
		hp_graph_free(g);
	}
}

/* The loss operators as in-graph losses (LossGrad) behind CumSum (its rule
 * emits a reversed CumSum): P -> CumSum(axis 1, reverse, exclusive) ->
 * SoftmaxCrossEntropyLoss(weights, ignore_index 2, mean), and
 * Q -> NegativeLogLikelihoodLoss(weights, none) -> ReduceSum; gradients of
 * P and Q against central differences. */
static void test_loss_ops_and_cumsum_grads(void **state)
{
	static const float wts[4] = { 0.5f, 1.5f, 1.0f, 2.0f };
	struct hp_graph *g = hp_graph_new("losses");
	int64_t ax[1] = { 1 };
	int p = param(g, "P", shp(3, 2, 4, 3), 1, -1, 1), q = param(g, "Q", shp(3, 3, 4, 2), 2, -2, 0);
	int lab = value(g, "lab", HP_VALUE_INPUT, HP_I64, shp(2, 2, 3));
	int tq = value(g, "tq", HP_VALUE_INPUT, HP_I64, shp(2, 3, 2)), w = const_f32(g, "w", 4, wts);
	struct hp_attr ca[2] = { { .name = "reverse", .type = HP_ATTR_INT, .i = 1 },
				 { .name = "exclusive", .type = HP_ATTR_INT, .i = 1 } };
	struct hp_attr sa[2] = { str_attr("reduction", "mean"), { .name = "ignore_index", .type = HP_ATTR_INT, .i = 2 } };
	struct hp_attr na[1] = { str_attr("reduction", "none") };
	struct hp_attr keep0 = { .name = "keepdims", .type = HP_ATTR_INT, .i = 0 };
	struct hp_train_spec t;
	struct mini m;
	int cs, sce, nll, rs;

	(void)state;
	cs = node(g, "CumSum", 2, (int[]){ p, const_i64(g, "axis", 1, ax) }, act(g, "cs"), 2, ca);
	sce = node(g, "SoftmaxCrossEntropyLoss", 3, (int[]){ cs, lab, w }, act(g, "sce"), 2, sa);
	nll = node(g, "NegativeLogLikelihoodLoss", 3, (int[]){ q, tq, w }, act(g, "nll"), 1, na);
	rs = node(g, "ReduceSum", 1, &nll, act(g, "nsum"), 1, &keep0);
	set_output(g, node(g, "Add", 2, (int[]){ sce, rs }, act(g, "loss"), 0, NULL));
	assert_int_equal(hp_graph_finalize(g), 0);
	hp_train_spec_init(&t, sizeof t);
	t.loss = HP_LOSS_OUTPUT;
	t.output = "loss";
	if (hp_autodiff(g, &t) < 0)
		fail_msg("%s", hp_errmsg());
	mini_init(&m, g);
	fill_inputs(&m, "lab", 8, 0, 4); /* some labels hit ignore_index 2 */
	fill_inputs(&m, "tq", 9, 0, 4);
	check_gradients(&m, 2);
	mini_free(&m);
	hp_graph_free(g);
}

/* P -> LRN(size 4) -> DepthToSpace(2) -> Tanh -> * W -> SpaceToDepth(2),
 * MSE: LRNGrad, and depth/space rules emitting each other's op; gradients
 * of P and W against differences. */
static void test_depth_space_grads(void **state)
{
	struct hp_graph *g = hp_graph_new("d2s");
	struct hp_attr bs = { .name = "blocksize", .type = HP_ATTR_INT, .i = 2 };
	struct hp_train_spec t;
	struct mini m;
	int p = param(g, "P", shp(4, 1, 8, 2, 3), 31, -1, 1), w = param(g, "W", shp(1, 6), 32, -1, 1), d, h, hw;

	(void)state;
	struct hp_attr lrn[4] = { { .name = "size", .type = HP_ATTR_INT, .i = 4 }, /* even: asymmetric window */
				  { .name = "alpha", .type = HP_ATTR_FLOAT, .f = 0.5f },
				  { .name = "beta", .type = HP_ATTR_FLOAT, .f = 0.75f },
				  { .name = "bias", .type = HP_ATTR_FLOAT, .f = 1.5f } };
	int l = node(g, "LRN", 1, &p, act(g, "l"), 4, lrn);
	d = node(g, "DepthToSpace", 1, &l, act(g, "d"), 1, &bs);
	h = node(g, "Tanh", 1, &d, act(g, "h"), 0, NULL);
	hw = node(g, "Mul", 2, (int[]){ h, w }, act(g, "hw"), 0, NULL);
	set_output(g, node(g, "SpaceToDepth", 1, &hw, act(g, "out"), 1, &bs));
	assert_int_equal(hp_graph_finalize(g), 0);
	hp_train_spec_init(&t, sizeof t);
	t.loss = HP_LOSS_MSE;
	if (hp_autodiff(g, &t) < 0)
		fail_msg("%s", hp_errmsg());
	mini_init(&m, g);
	fill_inputs(&m, "labels", 33, -1, 1);
	check_gradients(&m, 2);
	mini_free(&m);
	hp_graph_free(g);
}

/* x -> GroupNormalization(3 groups, per-group scale) -> InstanceNormalization
 * -> MSE: gradients of both norms' scales and biases, and through x's
 * path, against central differences. */
static void test_group_instance_norm_grads(void **state)
{
	struct hp_graph *g = hp_graph_new("gn");
	struct hp_attr ga[2] = { { .name = "num_groups", .type = HP_ATTR_INT, .i = 3 },
				 { .name = "epsilon", .type = HP_ATTR_FLOAT, .f = 1e-3f } };
	struct hp_train_spec t;
	struct mini m;
	int x = value(g, "x", HP_VALUE_INPUT, HP_F32, shp(4, 2, 6, 2, 3));
	int w = param(g, "W", shp(4, 2, 6, 2, 3), 41, -1, 1);
	int gs = param(g, "gs", shp(1, 3), 42, 0.5f, 1.5f), gb = param(g, "gb", shp(1, 3), 43, -0.5f, 0.5f);
	int is = param(g, "is", shp(1, 6), 44, 0.5f, 1.5f), ib = param(g, "ib", shp(1, 6), 45, -0.5f, 0.5f), xw, gn;

	(void)state;
	xw = node(g, "Mul", 2, (int[]){ x, w }, act(g, "xw"), 0, NULL);
	gn = node(g, "GroupNormalization", 3, (int[]){ xw, gs, gb }, act(g, "gn"), 2, ga);
	gn = node(g, "Tanh", 1, &gn, act(g, "t"), 0, NULL);
	set_output(g, node(g, "InstanceNormalization", 3, (int[]){ gn, is, ib }, act(g, "out"), 1, &ga[1]));
	assert_int_equal(hp_graph_finalize(g), 0);
	hp_train_spec_init(&t, sizeof t);
	t.loss = HP_LOSS_MSE;
	if (hp_autodiff(g, &t) < 0)
		fail_msg("%s", hp_errmsg());
	mini_init(&m, g);
	fill_inputs(&m, "x", 46, -2, 2);
	fill_inputs(&m, "labels", 47, -1, 1);
	check_gradients(&m, 5);
	mini_free(&m);
	hp_graph_free(g);
}

/* x (the model's input) -> InstanceNormalization -> Tanh -> * W, and x ->
 * GroupNormalization(2 groups) beside it, MSE: the norms' GroupNormGrad
 * wants no dX (as a PyTorch net starting with InstanceNorm2d(affine=True)
 * has; its prepare wrote dX's shape through a missing output and crashed
 * training); the scales' and biases' gradients against central
 * differences. */
static void test_norm_of_input_grads(void **state)
{
	struct hp_graph *g = hp_graph_new("normin");
	struct hp_attr ga[2] = { { .name = "num_groups", .type = HP_ATTR_INT, .i = 2 },
				 { .name = "epsilon", .type = HP_ATTR_FLOAT, .f = 1e-3f } };
	struct hp_train_spec t;
	struct mini m;
	int x = value(g, "x", HP_VALUE_INPUT, HP_F32, shp(4, 3, 4, 2, 5));
	int w = param(g, "W", shp(4, 3, 4, 2, 5), 51, -1, 1);
	int is = param(g, "is", shp(1, 4), 52, 0.5f, 1.5f), ib = param(g, "ib", shp(1, 4), 53, -0.5f, 0.5f);
	int gs = param(g, "gs", shp(1, 4), 54, 0.5f, 1.5f), gb = param(g, "gb", shp(1, 4), 55, -0.5f, 0.5f), h, k;

	(void)state;
	h = node(g, "InstanceNormalization", 3, (int[]){ x, is, ib }, act(g, "in"), 1, &ga[1]);
	h = node(g, "Tanh", 1, &h, act(g, "t"), 0, NULL);
	h = node(g, "Mul", 2, (int[]){ h, w }, act(g, "hw"), 0, NULL);
	k = node(g, "GroupNormalization", 3, (int[]){ x, gs, gb }, act(g, "gn"), 2, ga);
	set_output(g, node(g, "Add", 2, (int[]){ h, k }, act(g, "out"), 0, NULL));
	assert_int_equal(hp_graph_finalize(g), 0);
	hp_train_spec_init(&t, sizeof t);
	t.loss = HP_LOSS_MSE;
	if (hp_autodiff(g, &t) < 0)
		fail_msg("%s", hp_errmsg());
	mini_init(&m, g);
	fill_inputs(&m, "x", 56, -2, 2);
	fill_inputs(&m, "labels", 57, -1, 1);
	check_gradients(&m, 5);
	mini_free(&m);
	hp_graph_free(g);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_mlp_cross_entropy_grads),
		cmocka_unit_test(test_sgd_wiring_and_descent),
		cmocka_unit_test(test_batchnorm_mse_adam),
		cmocka_unit_test(test_weight_behind_folded_nodes),
		cmocka_unit_test(test_output_loss_and_errors),
		cmocka_unit_test(test_merged_running_stats),
		cmocka_unit_test(test_dp_buckets),
		cmocka_unit_test(test_shard_range),
		cmocka_unit_test(test_shard_graph),
		cmocka_unit_test(test_loss_ops_and_cumsum_grads),
		cmocka_unit_test(test_depth_space_grads),
		cmocka_unit_test(test_group_instance_norm_grads),
		cmocka_unit_test(test_norm_of_input_grads),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
