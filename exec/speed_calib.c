/* Calibration of the per-kernel speed model: real kernels timed through
 * in-core sessions (so pool, BLAS threading and dispatch are the executor's
 * own), the figures cached.  Runs sessions: only the plan API
 * (plan_api.c) calls it, never the planner.  See speed.h. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "hpdlf/error.h"
#include "hpdlf/exec.h"
#include "hpdlf/kernels.h"
#include "exec/speed.h"

/* Guesses when nothing can be measured (the development machine). */
#define DEFAULT_GFLOPS 60.0
#define DEFAULT_GBPS 8.0
#define DEFAULT_DISPATCH_US 5.0

static double now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

static int add_input(struct hp_graph *g, const char *name, const struct hp_shape *s)
{
	int v = hp_graph_add_value(g, name, HP_VALUE_INPUT, HP_F32, s);

	if (v >= 0)
		g->inputs[g->ninputs++] = v;
	return v;
}

/* A graph of one op over freshly named inputs (shapes given), or of `chain`
 * unary ops in a row. */
static struct hp_graph *op_graph(const char *op, int nin, const struct hp_shape *shapes, int chain,
				 const struct hp_attr *attrs, int nattrs)
{
	struct hp_graph *g = hp_graph_new("calibration");
	int in[4], out = -1, node;
	char name[16];

	if (!g || !(g->inputs = calloc(4, sizeof(int))) || !(g->outputs = calloc(1, sizeof(int))))
		goto fail;
	for (int i = 0; i < nin; i++) {
		snprintf(name, sizeof name, "x%d", i);
		if ((in[i] = add_input(g, name, &shapes[i])) < 0)
			goto fail;
	}
	for (int k = 0; k < chain; k++) {
		snprintf(name, sizeof name, "y%d", k);
		out = hp_graph_add_value(g, name, HP_VALUE_ACTIVATION, HP_UNDEFINED, NULL);
		if (out < 0 || (node = hp_graph_add_node(g, name, op, nin, in, 1, &out)) < 0)
			goto fail;
		for (int a = 0; a < nattrs; a++)
			if (hp_graph_add_attr(g, node, &attrs[a]) < 0)
				goto fail;
		in[0] = out;
	}
	g->outputs[g->noutputs++] = out;
	if (hp_graph_finalize(g) < 0 || hp_graph_infer(g) < 0)
		goto fail;
	return g;
fail:
	hp_graph_free(g);
	return NULL;
}

/* Median wall ms of one run of g on `threads` threads (at least 5 runs and
 * ~40 ms after a warm-up run): on a shared machine the typical speed, which
 * is what a run will see, not the best; < 0 on failure. */
static double time_graph(struct hp_graph *g, int threads)
{
	struct hp_exec_opts o;
	struct hp_session *s = NULL;
	double ms[50], med = -1, spent = 0;
	int n = 0;

	if (!g)
		return -1;
	hp_exec_opts_init(&o, sizeof o);
	o.threads = threads;
	if (hp_session_create(g, &o, &s) < 0)
		goto out;
	for (int i = 0; i < g->ninputs; i++) {
		const struct hp_value *v = &g->values[g->inputs[i]];
		struct hp_tensor t;
		if (hp_tensor_alloc(&t, v->dtype, &v->shape) < 0)
			goto out;
		for (int64_t k = 0; k < hp_shape_numel(&v->shape); k++)
			((float *)t.data)[k] = 0.01f * (float)(k % 13);
		int rc = hp_session_set_input(s, v->name, &t);
		hp_tensor_free(&t);
		if (rc < 0)
			goto out;
	}
	for (int r = 0; r < 6 || (spent < 40 && r < 50); r++) {
		double t0 = now_ms();
		if (hp_session_run(s) < 0)
			goto out;
		if (r > 0)
			spent += (ms[n++] = now_ms() - t0);
	}
	qsort(ms, (size_t)n, sizeof *ms, cmp_double);
	med = ms[n / 2];
out:
	hp_session_destroy(s);
	hp_graph_free(g);
	return med;
}

/* 3x3x3 Conv, padded, c -> c channels over s^3 voxels: GFLOP/s points. */
static int measure_gemm(struct hp_speed_compute *sp)
{
	static const int pts[HP_SPEED_NPTS][2] = { { 4, 8 }, { 16, 8 }, { 32, 12 }, { 32, 24 } };
	int64_t ks[3] = { 3, 3, 3 }, pads[6] = { 1, 1, 1, 1, 1, 1 };
	struct hp_attr at[2] = { { .name = "kernel_shape", .type = HP_ATTR_INTS, .n = 3, .ints = ks },
				 { .name = "pads", .type = HP_ATTR_INTS, .n = 6, .ints = pads } };

	for (int i = 0; i < HP_SPEED_NPTS; i++) {
		int64_t c = pts[i][0], s = pts[i][1];
		struct hp_shape sh[2] = { { 5, { 1, c, s, s, s } }, { 5, { c, c, 3, 3, 3 } } };
		double flops = 2.0 * 27 * (double)(c * c) * (double)(s * s * s);
		double ms = time_graph(op_graph("Conv", 2, sh, 1, at, 2), sp->threads);
		if (ms <= 0)
			return -1;
		ms -= sp->dispatch_us / 1e3;
		sp->flops[i] = flops;
		sp->gflops[i] = flops / (ms > 1e-4 ? ms : 1e-4) / 1e6;
		/* larger problems run at least as fast: a slower point is noise */
		if (i && sp->gflops[i] < sp->gflops[i - 1])
			sp->gflops[i] = sp->gflops[i - 1];
	}
	return 0;
}

static int measure_compute(struct hp_speed_compute *sp)
{
	enum { CHAIN = 64, N = 1 << 23 };
	struct hp_shape tiny = { 1, { 16 } }, big[2] = { { 1, { N } }, { 1, { N } } };
	double ms;

	ms = time_graph(op_graph("Relu", 1, &tiny, CHAIN, NULL, 0), sp->threads);
	if (ms <= 0)
		return -1;
	sp->dispatch_us = ms * 1e3 / CHAIN;
	ms = time_graph(op_graph("Add", 2, big, 1, NULL, 0), sp->threads);
	if (ms <= 0)
		return -1;
	ms -= sp->dispatch_us / 1e3;
	sp->mem_GBps = 3.0 * 4 * N / (ms > 1e-4 ? ms : 1e-4) / 1e6;
	return measure_gemm(sp);
}

/* Cache record: dispatch, GB/s, then (flops, GFLOP/s) pairs. */
enum { NREC = 2 + 2 * HP_SPEED_NPTS };

static void to_rec(const struct hp_speed_compute *sp, double *v)
{
	v[0] = sp->dispatch_us;
	v[1] = sp->mem_GBps;
	for (int i = 0; i < HP_SPEED_NPTS; i++) {
		v[2 + 2 * i] = sp->flops[i];
		v[3 + 2 * i] = sp->gflops[i];
	}
}

static int from_rec(struct hp_speed_compute *sp, const double *v)
{
	sp->dispatch_us = v[0];
	sp->mem_GBps = v[1];
	for (int i = 0; i < HP_SPEED_NPTS; i++) {
		sp->flops[i] = v[2 + 2 * i];
		sp->gflops[i] = v[3 + 2 * i];
		if (i && sp->flops[i] <= sp->flops[i - 1])
			return -1;
	}
	return 0;
}

static void set_defaults(struct hp_speed_compute *sp)
{
	sp->dispatch_us = DEFAULT_DISPATCH_US;
	sp->mem_GBps = DEFAULT_GBPS;
	for (int i = 0; i < HP_SPEED_NPTS; i++) {
		sp->flops[i] = 1e6 * pow(10, i);
		sp->gflops[i] = DEFAULT_GFLOPS;
	}
	sp->src = HP_SPEED_DEFAULT;
}

void hp_speed_compute_get(int threads, int recalibrate, struct hp_speed_compute *out)
{
	char key[300];
	double rec[NREC];

	memset(out, 0, sizeof *out);
	out->threads = threads > 0 ? threads : 1;
	hp_speed_machine_key(out->threads, key, sizeof key);
	if (hp_speed_cache_path("compute", key, out->cache, sizeof out->cache) < 0)
		out->cache[0] = 0;
	int never = recalibrate < 0; /* the cached figures or the defaults */

	recalibrate = !never && (recalibrate || hp_speed_recalibrate_env());
	if (!recalibrate && out->cache[0] && hp_speed_cache_read(out->cache, key, rec, NREC) == 0 &&
	    from_rec(out, rec) == 0) {
		out->src = HP_SPEED_CACHED;
		return;
	}
	if (never) {
		set_defaults(out);
		return;
	}
	if (measure_compute(out) < 0) {
		set_defaults(out); /* never cached: measure again next time */
		hp_error(0, "%s", ""); /* the failed calibration's message is not the caller's */
		return;
	}
	out->src = HP_SPEED_MEASURED;
	to_rec(out, rec);
	if (out->cache[0])
		hp_speed_cache_write(out->cache, key, rec, NREC);
}

