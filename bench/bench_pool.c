/* Pooling benchmark (issue 16): MaxPool and AveragePool forward on the
 * shapes of real exports (SqueezeNet 1.1 at 96x96 batch 2, GoogLeNet at
 * 64x64, ResNet-18's stem pool at 64x64 batch 4, the U-Net's 2x2), each
 * a one-node graph run through prepare and run as the executor does, on
 * the calling thread.  Time is this thread's CPU time (robust on a shared
 * machine); GB/s counts the inputs read once and the output written once.
 *
 *   hpdlf-bench-pool [--reps N] [--rounds R] [--only SUBSTRING]
 *
 * Prints a table and one JSON line (medians over the rounds). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "hpdlf/error.h"
#include "hpdlf/graph.h"
#include "hpdlf/kernels.h"

struct pcase {
	const char *name, *op;
	int64_t n, c, h, w, k, s, pad;
	int ceil_mode, include_pad, count;
};

static const struct pcase cases[] = {
	{ "squeeze_mp1 2x64x47", "MaxPool", 2, 64, 47, 47, 3, 2, 0, 1, 0, 1 },
	{ "squeeze_mp2 2x128x23", "MaxPool", 2, 128, 23, 23, 3, 2, 0, 1, 0, 1 },
	{ "squeeze_mp3 2x256x11", "MaxPool", 2, 256, 11, 11, 3, 2, 0, 1, 0, 1 },
	{ "goog_mp1 64x32 s2", "MaxPool", 1, 64, 32, 32, 3, 2, 0, 1, 0, 1 },
	{ "goog_mp2 192x16 s2", "MaxPool", 1, 192, 16, 16, 3, 2, 0, 1, 0, 1 },
	{ "goog_br 192x8 s1p1", "MaxPool", 1, 192, 8, 8, 3, 1, 1, 1, 0, 1 },
	{ "goog_br 512x4 s1p1", "MaxPool", 1, 512, 4, 4, 3, 1, 1, 1, 0, 3 },
	{ "goog_br 832x2 s1p1", "MaxPool", 1, 832, 2, 2, 3, 1, 1, 1, 0, 2 },
	{ "resnet_stem 4x64x32 p1", "MaxPool", 4, 64, 32, 32, 3, 2, 1, 0, 0, 1 },
	{ "s1p1 1x64x56", "MaxPool", 1, 64, 56, 56, 3, 1, 1, 0, 0, 1 },
	{ "unet 2x2 2x16x128", "MaxPool", 2, 16, 128, 128, 2, 2, 0, 0, 0, 1 },
	{ "avg s1p1 1x64x56", "AveragePool", 1, 64, 56, 56, 3, 1, 1, 0, 0, 1 },
	{ "avg s1p1 incl 1x64x56", "AveragePool", 1, 64, 56, 56, 3, 1, 1, 0, 1, 1 },
	{ "avg 2x2 s2 2x64x32", "AveragePool", 2, 64, 32, 32, 2, 2, 0, 0, 0, 1 },
	/* MaxPool's gradient (ai.hpdlf MaxPoolGrad: dY, X -> dX) in a GoogLeNet
	 * training step at batch 8 */
	{ "grad goog_mp1 8x64x32 s2", "MaxPoolGrad", 8, 64, 32, 32, 3, 2, 0, 1, 0, 1 },
	{ "grad goog_mp3 8x480x8 s2", "MaxPoolGrad", 8, 480, 8, 8, 3, 2, 0, 1, 0, 1 },
	{ "grad goog_br 8x192x8 s1p1", "MaxPoolGrad", 8, 192, 8, 8, 3, 1, 1, 1, 0, 1 },
	{ "grad goog_br 8x512x4 s1p1", "MaxPoolGrad", 8, 512, 4, 4, 3, 1, 1, 1, 0, 3 },
};

static double cpu_ms(void)
{
	struct timespec t;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
	return t.tv_sec * 1e3 + t.tv_nsec * 1e-6;
}

static int cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

/* Output size of one dim (floor or ceil_mode, the last window starting
 * inside the input or its begin pad). */
static int64_t out_dim(const struct pcase *pc, int64_t in)
{
	int64_t span = in + 2 * pc->pad - pc->k, o = (pc->ceil_mode ? span + pc->s - 1 : span) / pc->s + 1;

	return pc->ceil_mode && (o - 1) * pc->s >= in + pc->pad ? o - 1 : o;
}

static struct hp_graph *pool_graph(const struct pcase *pc)
{
	struct hp_graph *g = hp_graph_new("bench");
	struct hp_shape xs = { 4, { pc->n, pc->c, pc->h, pc->w } };
	struct hp_shape ys = { 4, { pc->n, pc->c, out_dim(pc, pc->h), out_dim(pc, pc->w) } };
	int64_t ks[2] = { pc->k, pc->k }, st[2] = { pc->s, pc->s }, pads[4] = { pc->pad, pc->pad, pc->pad, pc->pad };
	int grad = !strcmp(pc->op, "MaxPoolGrad"), in[2], out, node;
	struct hp_attr a;

	in[0] = hp_graph_add_value(g, grad ? "dy" : "x", HP_VALUE_INPUT, HP_F32, grad ? &ys : &xs);
	if (grad)
		in[1] = hp_graph_add_value(g, "x", HP_VALUE_INPUT, HP_F32, &xs);
	out = hp_graph_add_value(g, "y", HP_VALUE_ACTIVATION, HP_UNDEFINED, NULL);
	g->inputs = calloc(2, sizeof(int));
	g->outputs = calloc(1, sizeof(int));
	for (int i = 0; i <= grad; i++)
		g->inputs[g->ninputs++] = in[i];
	g->outputs[g->noutputs++] = out;
	node = hp_graph_add_node(g, pc->name, pc->op, 1 + grad, in, 1, &out);
	if (grad) {
		free(g->nodes[node].domain);
		g->nodes[node].domain = strdup("ai.hpdlf");
	}
	a = (struct hp_attr){ .name = "kernel_shape", .type = HP_ATTR_INTS, .n = 2, .ints = ks };
	hp_graph_add_attr(g, node, &a);
	a = (struct hp_attr){ .name = "strides", .type = HP_ATTR_INTS, .n = 2, .ints = st };
	hp_graph_add_attr(g, node, &a);
	a = (struct hp_attr){ .name = "pads", .type = HP_ATTR_INTS, .n = 4, .ints = pads };
	hp_graph_add_attr(g, node, &a);
	if (!grad) {
		a = (struct hp_attr){ .name = "ceil_mode", .type = HP_ATTR_INT, .i = pc->ceil_mode };
		hp_graph_add_attr(g, node, &a);
	}
	if (!strcmp(pc->op, "AveragePool")) {
		a = (struct hp_attr){ .name = "count_include_pad", .type = HP_ATTR_INT, .i = pc->include_pad };
		hp_graph_add_attr(g, node, &a);
	}
	if (hp_graph_finalize(g) < 0 || hp_graph_infer(g) < 0) {
		fprintf(stderr, "bench_pool: %s\n", hp_errmsg());
		exit(1);
	}
	return g;
}

/* Median CPU ms of one run of the case over `rounds` rounds of `reps` runs. */
static double time_case(const struct pcase *pc, struct hp_pool *pool, int reps, int rounds, double *bytes)
{
	struct hp_graph *g = pool_graph(pc);
	const struct hp_node *n = &g->nodes[0];
	int nin = n->ninputs;
	struct hp_tensor t[3];
	struct hp_kargs a = { .nin = nin, .in = t, .nout = 1, .out = &t[nin], .pool = pool };
	double ms[64];

	for (int i = 0; i <= nin; i++) {
		const struct hp_value *v = &g->values[i == nin ? n->outputs[0] : n->inputs[i]];
		hp_tensor_alloc(&t[i], HP_F32, &v->shape);
		for (int64_t e = 0; e < hp_shape_numel(&v->shape); e++)
			((float *)t[i].data)[e] = (float)((e * 7919) % 1000) * 1e-3f - 0.5f;
	}
	*bytes = 0;
	for (int i = 0; i <= nin; i++)
		*bytes += (double)hp_tensor_bytes(&t[i]);
	n->op->run(n, &a);
	for (int r = 0; r < rounds; r++) {
		double t0 = cpu_ms();
		for (int i = 0; i < reps; i++)
			n->op->run(n, &a);
		ms[r] = (cpu_ms() - t0) / reps;
	}
	for (int i = 0; i <= nin; i++)
		hp_tensor_free(&t[i]);
	hp_graph_free(g);
	qsort(ms, (size_t)rounds, sizeof *ms, cmp);
	return ms[rounds / 2];
}

int main(int argc, char **argv)
{
	int reps = 200, rounds = 7, nc = (int)(sizeof cases / sizeof cases[0]);
	double total = 0, bytes_total = 0, ms[sizeof cases / sizeof cases[0]], gbs[sizeof cases / sizeof cases[0]];
	struct hp_pool *pool;
	const char *only = NULL;

	for (int i = 1; i + 1 < argc; i += 2) {
		if (!strcmp(argv[i], "--reps"))
			reps = atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "--rounds"))
			rounds = atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "--only"))
			only = argv[i + 1];
	}
	rounds = rounds < 1 ? 1 : rounds > 64 ? 64 : rounds;
	reps = reps < 1 ? 1 : reps;
	if (hp_pool_create(1, &pool) < 0) {
		fprintf(stderr, "bench_pool: %s\n", hp_errmsg());
		return 1;
	}
	printf("%-24s %9s %8s %8s\n", "case", "cpu us", "GB/s", "x count");
	for (int i = 0; i < nc; i++) {
		double b;
		if (only && !strstr(cases[i].name, only)) {
			ms[i] = gbs[i] = 0;
			continue;
		}
		ms[i] = time_case(&cases[i], pool, reps, rounds, &b);
		gbs[i] = b / (ms[i] * 1e6);
		total += ms[i] * cases[i].count;
		bytes_total += b * cases[i].count;
		printf("%-24s %9.2f %8.2f %8d\n", cases[i].name, ms[i] * 1e3, gbs[i], cases[i].count);
	}
	hp_pool_destroy(pool);
	printf("{\"bench\":\"pool\",\"threads\":1,\"reps\":%d,\"rounds\":%d,\"total_us\":%.2f,\"gbs_all\":%.2f,\"cases\":[",
	       reps, rounds, total * 1e3, bytes_total / (total * 1e6));
	for (int i = 0, first = 1; i < nc; i++)
		if (ms[i] > 0) {
			printf("%s{\"name\":\"%s\",\"us\":%.2f,\"gbs\":%.2f}", first ? "" : ",", cases[i].name,
			       ms[i] * 1e3, gbs[i]);
			first = 0;
		}
	printf("]}\n");
	return 0;
}
