/* Kernel benchmark: cblas_sgemm peak and the GFLOP/s of every Conv /
 * ConvTranspose layer of the 3D U-Net (tools/make_unet3d.py: base 16,
 * 3 levels, 48^3, batch 1), each layer run as a one-node graph through
 * prepare and run like the executor does.
 *
 *   hpdlf-bench-kernels [--reps N] [--threads N] [--size S] [--tile-kb K] [--shift-cols C]
 *                       [--shift 0|1|-1] [--backward]
 *
 * Two threading modes are measured per layer: "pool" (the pool's workers
 * take tiles, BLAS single-threaded) and "blas" (the caller alone, BLAS with
 * N threads).  --backward adds the gradient ops of every layer.  Prints
 * tables and JSON lines (medians). */
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "hpdlf/error.h"
#include "hpdlf/graph.h"
#include "hpdlf/kernels.h"
#include "kernels/blas.h"
#include "kernels/conv_impl.h"

struct layer {
	const char *name;
	int transpose;
	int64_t cin, cout, size, k; /* input spatial size (cube), kernel */
	int count;                  /* occurrences in the U-Net */
};

struct result {
	double gf_pool, gf_blas, gf_cpu1, ms_best;
};

static clockid_t clock_id = CLOCK_MONOTONIC;

/* Wall time, or this thread's CPU time for the single-thread efficiency
 * figures (robust when other processes share the cores). */
static double now_ms(void)
{
	struct timespec t;

	clock_gettime(clock_id, &t);
	return t.tv_sec * 1e3 + t.tv_nsec * 1e-6;
}

static int cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

static double median(double *v, int n)
{
	qsort(v, (size_t)n, sizeof *v, cmp);
	return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static void fill(float *p, size_t n, unsigned seed)
{
	uint32_t x = seed * 2654435761u + 1;

	for (size_t i = 0; i < n; i++) {
		x = x * 1664525u + 1013904223u;
		p[i] = (float)(x >> 8) / (float)(1u << 24) - 0.5f;
	}
}

static double sgemm_peak(int n, int reps, int threads)
{
	float *a = aligned_alloc(64, (size_t)n * n * 4), *b = aligned_alloc(64, (size_t)n * n * 4);
	float *c = aligned_alloc(64, (size_t)n * n * 4);
	double t[64];

	fill(a, (size_t)n * n, 1);
	fill(b, (size_t)n * n, 2);
	hp_blas_threads(threads);
	for (int r = 0; r <= reps; r++) {
		double t0 = now_ms();
		cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1, a, n, b, n, 0, c, n);
		if (r > 0) /* first call warms up */
			t[r - 1] = now_ms() - t0;
	}
	free(a);
	free(b);
	free(c);
	return 2.0 * n * n * n / (median(t, reps) * 1e6);
}

enum pass { FWD, BWD_DATA, BWD_FILTER };

/* One-node graph of a layer's forward, input-gradient or filter-gradient
 * op (ai.hpdlf ConvGrad*), with the inputs the executor would feed it. */
static struct hp_graph *layer_graph(const struct layer *l, int64_t size, enum pass pass)
{
	struct hp_graph *g = hp_graph_new("bench");
	int64_t os = l->transpose ? size * 2 : size, k = l->k;
	struct hp_shape xs = { 5, { 1, l->cin, size, size, size } }, ys = { 5, { 1, l->cout, os, os, os } };
	struct hp_shape ws = { 5, { l->transpose ? l->cin : l->cout, l->transpose ? l->cout : l->cin, k, k, k } };
	struct hp_shape bs = { 1, { l->cout } }, sh[3];
	int64_t ks[3] = { k, k, k }, pads[6], st[3] = { 2, 2, 2 };
	const char *op = l->transpose ? "ConvTranspose" : "Conv";
	int in[3], out, node, nin = 3;
	struct hp_attr a;

	for (int i = 0; i < 6; i++)
		pads[i] = l->transpose ? 0 : k / 2;
	sh[0] = xs, sh[1] = ws, sh[2] = bs;
	if (pass == BWD_DATA) {
		op = l->transpose ? "ConvTransposeGradData" : "ConvGradData";
		sh[0] = ys, sh[1] = ws, nin = 2;
	} else if (pass == BWD_FILTER) {
		op = "ConvGradFilter";
		sh[0] = l->transpose ? xs : ys, sh[1] = l->transpose ? ys : xs, nin = 2;
	}
	for (int i = 0; i < nin; i++) {
		char name[8] = { 'i', (char)('0' + i), 0 };
		in[i] = hp_graph_add_value(g, name, HP_VALUE_INPUT, HP_F32, &sh[i]);
	}
	out = hp_graph_add_value(g, "y", HP_VALUE_ACTIVATION, HP_UNDEFINED, NULL);
	g->inputs = calloc(3, sizeof(int));
	g->outputs = calloc(1, sizeof(int));
	for (int i = 0; i < nin; i++)
		g->inputs[g->ninputs++] = in[i];
	g->outputs[g->noutputs++] = out;
	node = hp_graph_add_node(g, l->name, op, nin, in, 1, &out);
	if (pass != FWD) {
		free(g->nodes[node].domain);
		g->nodes[node].domain = strdup("ai.hpdlf");
	}
	a = (struct hp_attr){ .name = "kernel_shape", .type = HP_ATTR_INTS, .n = 3, .ints = ks };
	hp_graph_add_attr(g, node, &a);
	a = (struct hp_attr){ .name = l->transpose ? "strides" : "pads", .type = HP_ATTR_INTS,
			      .n = l->transpose ? 3 : 6, .ints = l->transpose ? st : pads };
	hp_graph_add_attr(g, node, &a);
	if (pass == BWD_DATA) {
		a = (struct hp_attr){ .name = "x_shape", .type = HP_ATTR_INTS, .n = 5, .ints = xs.dims };
		hp_graph_add_attr(g, node, &a);
	}
	if (hp_graph_finalize(g) < 0 || hp_graph_infer(g) < 0) {
		fprintf(stderr, "bench: %s\n", hp_errmsg());
		exit(1);
	}
	return g;
}

/* Median ms of one layer in one threading mode. */
static double time_layer(struct hp_graph *g, struct hp_pool *pool, int policy, int threads, int reps)
{
	const struct hp_node *n = &g->nodes[0];
	int nin = n->ninputs;
	struct hp_tensor t[4];
	struct hp_kargs a = { .nin = nin, .in = t, .nout = 1, .out = &t[nin], .pool = pool };
	double ms[64];

	for (int i = 0; i <= nin; i++) {
		const struct hp_value *v = &g->values[i < nin ? n->inputs[i] : n->outputs[0]];
		hp_tensor_alloc(&t[i], HP_F32, &v->shape);
		fill(t[i].data, (size_t)hp_shape_numel(&v->shape), (unsigned)i + 3);
	}
	a.ws_size = n->workspace;
	a.ws = n->workspace ? aligned_alloc(64, (n->workspace + 63) / 64 * 64) : NULL;
	hp_conv_set_policy(policy);
	hp_blas_threads(threads);
	for (int r = 0; r <= reps; r++) {
		double t0 = now_ms();
		n->op->run(n, &a);
		if (r > 0)
			ms[r - 1] = now_ms() - t0;
	}
	hp_conv_set_policy(0);
	free(a.ws);
	for (int i = 0; i <= nin; i++)
		hp_tensor_free(&t[i]);
	return median(ms, reps);
}

static const struct layer layers[] = {
	{ "enc1a 1->16 @48", 0, 1, 16, 48, 3, 1 },
	{ "enc1b 16->16 @48", 0, 16, 16, 48, 3, 2 },
	{ "dec1a 32->16 @48", 0, 32, 16, 48, 3, 1 },
	{ "enc2a 16->32 @24", 0, 16, 32, 24, 3, 1 },
	{ "enc2b 32->32 @24", 0, 32, 32, 24, 3, 2 },
	{ "dec2a 64->32 @24", 0, 64, 32, 24, 3, 1 },
	{ "enc3a 32->64 @12", 0, 32, 64, 12, 3, 1 },
	{ "enc3b 64->64 @12", 0, 64, 64, 12, 3, 2 },
	{ "dec3a 128->64 @12", 0, 128, 64, 12, 3, 1 },
	{ "bott_a 64->128 @6", 0, 64, 128, 6, 3, 1 },
	{ "bott_b 128->128 @6", 0, 128, 128, 6, 3, 1 },
	{ "up3 T128->64 6->12", 1, 128, 64, 6, 2, 1 },
	{ "up2 T64->32 12->24", 1, 64, 32, 12, 2, 1 },
	{ "up1 T32->16 24->48", 1, 32, 16, 24, 2, 1 },
	{ "head 16->2 1x1 @48", 0, 16, 2, 48, 1, 1 },
};

/* Input- and filter-gradient ops of every layer (the first layer has no
 * input gradient): 1-thread CPU GFLOP/s and pool wall ms, each against
 * sgemm's peak measured in the same run (peak: N threads, peak1: one
 * thread's CPU time), per op and per pass (dX, dW) over the model. */
static void bench_backward(struct hp_pool *pool, int threads, int reps, double scale, double peak, double peak1)
{
	static const char *names[2] = { "dX", "dW" };
	double flops = 0, cpu = 0, wall = 0, pf[2] = { 0, 0 }, pc[2] = { 0, 0 }, pw[2] = { 0, 0 };
	int nl = (int)(sizeof layers / sizeof layers[0]);

	printf("\nbackward (ai.hpdlf ConvGradData / ConvTransposeGradData / ConvGradFilter):\n");
	printf("%-22s %4s %7s %9s %8s %8s %7s %7s\n", "layer", "op", "GFLOP", "pool GF/s", "1T cpu", "pool ms",
	       "%pool", "%1T");
	for (int i = 0; i < nl; i++)
		for (int p = 0; p < 2; p++) {
			const struct layer *l = &layers[i];
			int64_t s = (int64_t)(l->size * scale + 0.5);
			struct hp_graph *g;
			double f, tp, t1;
			if (i == 0 && p == 0)
				continue;
			g = layer_graph(l, s < 1 ? 1 : s, p ? BWD_FILTER : BWD_DATA);
			f = g->nodes[0].op->flops(g, &g->nodes[0]);
			tp = time_layer(g, pool, 1, 1, reps);
			clock_id = CLOCK_THREAD_CPUTIME_ID;
			t1 = time_layer(g, NULL, 1, 1, reps);
			clock_id = CLOCK_MONOTONIC;
			flops += f * l->count;
			cpu += t1 * l->count;
			wall += tp * l->count;
			pf[p] += f * l->count;
			pc[p] += t1 * l->count;
			pw[p] += tp * l->count;
			printf("%-22s %4s %7.3f %9.1f %8.1f %8.2f %6.0f%% %6.0f%%\n", l->name, names[p], f * 1e-9,
			       f / (tp * 1e6), f / (t1 * 1e6), tp, 100 * f / (tp * 1e6) / peak, 100 * f / (t1 * 1e6) / peak1);
			hp_graph_free(g);
		}
	for (int p = 0; p < 2; p++)
		printf("U-Net conv %s (x counts): %.2f GFLOP; pool %.1f GF/s (%.0f%% of sgemm's %.1f); 1 thread CPU %.1f GF/s "
		       "(%.0f%% of sgemm's %.1f)\n",
		       names[p], pf[p] * 1e-9, pf[p] / (pw[p] * 1e6), 100 * pf[p] / (pw[p] * 1e6) / peak, peak,
		       pf[p] / (pc[p] * 1e6), 100 * pf[p] / (pc[p] * 1e6) / peak1, peak1);
	printf("U-Net conv backward (x counts): %.2f GFLOP; pool %.1f ms on %d threads; 1 thread CPU %.1f ms (%.1f GF/s)\n",
	       flops * 1e-9, wall, threads, cpu, flops / (cpu * 1e6));
	printf("{\"bench\":\"kernels_backward\",\"threads\":%d,\"gflop\":%.3f,\"ms_pool\":%.2f,\"ms_cpu_1t\":%.2f,"
	       "\"gflops_1t_cpu\":%.1f,\"ratio_to_sgemm_pool\":%.3f,\"ratio_to_sgemm_1t_cpu\":%.3f",
	       threads, flops * 1e-9, wall, cpu, flops / (cpu * 1e6), flops / (wall * 1e6) / peak,
	       flops / (cpu * 1e6) / peak1);
	for (int p = 0; p < 2; p++)
		printf(",\"%s_gflops_pool\":%.1f,\"%s_gflops_1t_cpu\":%.1f,\"%s_ratio_pool\":%.3f,\"%s_ratio_1t_cpu\":%.3f",
		       names[p], pf[p] / (pw[p] * 1e6), names[p], pf[p] / (pc[p] * 1e6), names[p],
		       pf[p] / (pw[p] * 1e6) / peak, names[p], pf[p] / (pc[p] * 1e6) / peak1);
	printf("}\n");
}

int main(int argc, char **argv)
{
	int reps = 5, threads = 2, nl = (int)(sizeof layers / sizeof layers[0]), backward = 0;
	double peak, peak1, flops_total = 0, ms_pool = 0, ms_blas = 0, ms_best = 0, ms_cpu1 = 0, scale = 1;
	int64_t size = 48;
	struct result results[sizeof layers / sizeof layers[0]];
	struct hp_pool *pool;

	hp_blas_quiet_workers(); /* as hpdlf-exec does */

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--reps") && i + 1 < argc)
			reps = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--threads") && i + 1 < argc)
			threads = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--tile-kb") && i + 1 < argc)
			hp_conv_set_tile_bytes((size_t)atoll(argv[++i]) << 10);
		else if (!strcmp(argv[i], "--size") && i + 1 < argc)
			size = atoll(argv[++i]);
		else if (!strcmp(argv[i], "--shift-cols") && i + 1 < argc)
			hp_shift_set_tile_cols(atoll(argv[++i]));
		else if (!strcmp(argv[i], "--shift") && i + 1 < argc)
			hp_conv_set_shift(atoi(argv[++i]));
		else if (!strcmp(argv[i], "--backward"))
			backward = 1;
		else {
			fprintf(stderr,
				"usage: %s [--reps N] [--threads N] [--size S (multiple of 8)] [--tile-kb K] [--shift-cols C]\n"
				"          [--shift 0|1|-1] [--backward]\n",
				argv[0]);
			return 2;
		}
	}
	reps = reps < 1 ? 1 : reps > 63 ? 63 : reps;
	if (hp_pool_create(threads, &pool) < 0) {
		fprintf(stderr, "bench: %s\n", hp_errmsg());
		return 1;
	}
	scale = (double)size / 48;
	peak = sgemm_peak(2048, reps, threads);
	clock_id = CLOCK_THREAD_CPUTIME_ID;
	peak1 = sgemm_peak(2048, reps, 1);
	clock_id = CLOCK_MONOTONIC;
	printf("cblas_sgemm 2048^3: %.1f GFLOP/s wall on %d threads, %.1f per CPU-second on 1 thread\n\n", peak,
	       threads, peak1);
	printf("%-22s %7s %9s %9s %8s %7s %6s %6s\n", "layer", "GFLOP", "pool GF/s", "blas GF/s", "1T cpu", "best ms",
	       "%peak", "%1T");
	for (int i = 0; i < nl; i++) {
		const struct layer *l = &layers[i];
		struct result *res = &results[i];
		int64_t s = (int64_t)(l->size * scale + 0.5);
		struct hp_graph *g = layer_graph(l, s < 1 ? 1 : s, FWD);
		double f = g->nodes[0].op->flops(g, &g->nodes[0]);
		double tp = time_layer(g, pool, 1, 1, reps), tb = time_layer(g, pool, 2, threads, reps), t1;
		clock_id = CLOCK_THREAD_CPUTIME_ID;
		t1 = time_layer(g, NULL, 1, 1, reps);
		clock_id = CLOCK_MONOTONIC;
		res->gf_cpu1 = f / (t1 * 1e6);
		ms_cpu1 += t1 * l->count;
		res->gf_pool = f / (tp * 1e6);
		res->gf_blas = f / (tb * 1e6);
		res->ms_best = tp < tb ? tp : tb;
		flops_total += f * l->count;
		ms_pool += tp * l->count;
		ms_blas += tb * l->count;
		ms_best += res->ms_best * l->count;
		printf("%-22s %7.3f %9.1f %9.1f %8.1f %7.2f %5.0f%% %5.0f%%\n", l->name, f * 1e-9, res->gf_pool, res->gf_blas,
		       res->gf_cpu1, res->ms_best, 100 * (res->gf_pool > res->gf_blas ? res->gf_pool : res->gf_blas) / peak,
		       100 * res->gf_cpu1 / peak1);
		hp_graph_free(g);
	}
	printf("\nU-Net conv layers (x counts): %.2f GFLOP; pool %.1f ms (%.1f GF/s), blas %.1f ms (%.1f GF/s)\n",
	       flops_total * 1e-9, ms_pool, flops_total / (ms_pool * 1e6), ms_blas, flops_total / (ms_blas * 1e6));
	printf("1 thread, CPU time: %.1f ms (%.1f GF/s per CPU-second, %.0f%% of sgemm's)\n", ms_cpu1,
	       flops_total / (ms_cpu1 * 1e6), 100 * flops_total / (ms_cpu1 * 1e6) / peak1);
	printf("{\"bench\":\"kernels\",\"threads\":%d,\"reps\":%d,\"size\":%lld,\"sgemm_gflops\":%.1f,"
	       "\"sgemm_gflops_1t_cpu\":%.1f,\"unet_conv_gflops_1t_cpu\":%.1f,\"ratio_to_sgemm_1t_cpu\":%.3f,"
	       "\"unet_conv_gflop\":%.3f,\"unet_conv_ms_pool\":%.2f,\"unet_conv_ms_blas\":%.2f,"
	       "\"unet_conv_gflops_pool\":%.1f,\"unet_conv_gflops_blas\":%.1f,\"ratio_to_sgemm_pool\":%.3f,"
	       "\"ratio_to_sgemm_blas\":%.3f,\"layers\":[",
	       threads, reps, (long long)size, peak, peak1, flops_total / (ms_cpu1 * 1e6),
	       flops_total / (ms_cpu1 * 1e6) / peak1, flops_total * 1e-9, ms_pool, ms_blas,
	       flops_total / (ms_pool * 1e6), flops_total / (ms_blas * 1e6), flops_total / (ms_pool * 1e6) / peak,
	       flops_total / (ms_blas * 1e6) / peak);
	for (int i = 0; i < nl; i++)
		printf("%s{\"name\":\"%s\",\"gflops_pool\":%.1f,\"gflops_blas\":%.1f,\"ratio_pool\":%.3f,"
		       "\"ratio_blas\":%.3f,\"gflops_1t_cpu\":%.1f,\"ratio_1t_cpu\":%.3f}",
		       i ? "," : "", layers[i].name, results[i].gf_pool, results[i].gf_blas, results[i].gf_pool / peak,
		       results[i].gf_blas / peak, results[i].gf_cpu1, results[i].gf_cpu1 / peak1);
	printf("]}\n");
	if (backward)
		bench_backward(pool, threads, reps, scale, peak, peak1);
	hp_pool_destroy(pool);
	return 0;
}
