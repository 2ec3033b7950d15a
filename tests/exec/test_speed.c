/* The speed model behind --plan: cache files (round trip, damage, foreign
 * keys), recovery of a damaged cache by measuring again, the interpolation
 * and per-kernel cost against formulas written out here, and hpdlf-exec
 * --plan end to end: its output parses, predictions are positive, out of
 * core is never predicted faster than in core, the bytes it plans per tier
 * are the bytes a real run moves (--stats-json), --train --plan plans the
 * whole step and --plan-dot writes Graphviz that `dot` accepts. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <fcntl.h>
#include <math.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <json-c/json.h>

#include "hpdlf/exec.h"
#include "hpdlf/graph.h"
#include "hpdlf/tensor.h"
#include "exec/exec_internal.h"
#include "exec/speed.h"

extern char **environ;
static char dir[] = "/tmp/hpdlf-test-speed-XXXXXX";
static const char *exe, *src;

static char *slurp(const char *path)
{
	FILE *f = fopen(path, "r");
	char *buf = calloc(1, 1 << 20);

	if (f) {
		size_t n = fread(buf, 1, (1 << 20) - 1, f);
		buf[n] = 0;
		fclose(f);
	}
	return buf;
}

static void spit(const char *path, const char *text, size_t n)
{
	FILE *f = fopen(path, "w");

	assert_non_null(f);
	assert_int_equal(fwrite(text, 1, n, f), n);
	fclose(f);
}

/* ---- cache files ---- */

static void test_cache_file(void **state)
{
	char path[4200];
	double v[3] = { 1.5, 2e9, 0.000123 }, r[3];
	char *text;

	(void)state;
	snprintf(path, sizeof path, "%s/c", dir);
	assert_int_equal(hp_speed_cache_read(path, "k", r, 3), -1); /* missing */
	hp_speed_cache_write(path, "k", v, 3);
	assert_int_equal(hp_speed_cache_read(path, "k", r, 3), 0);
	for (int i = 0; i < 3; i++)
		assert_true(fabs(r[i] - v[i]) <= 1e-8 * v[i]);
	assert_int_equal(hp_speed_cache_read(path, "other key", r, 3), -1);
	assert_int_equal(hp_speed_cache_read(path, "k", r, 2), -1);
	text = slurp(path);
	size_t n = strlen(text);
	char *digit = strstr(text, "1.5");
	assert_non_null(digit);
	digit[0] = '7'; /* one changed figure: the checksum no longer holds */
	spit(path, text, n);
	assert_int_equal(hp_speed_cache_read(path, "k", r, 3), -1);
	digit[0] = '1';
	spit(path, text, n - 10); /* truncated */
	assert_int_equal(hp_speed_cache_read(path, "k", r, 3), -1);
	spit(path, "", 0);
	assert_int_equal(hp_speed_cache_read(path, "k", r, 3), -1);
	spit(path, text, n); /* restored: valid again */
	assert_int_equal(hp_speed_cache_read(path, "k", r, 3), 0);
	free(text);
}

/* A damaged cache is measured again and rewritten; recalibrate measures. */
static void test_compute_cache(void **state)
{
	struct hp_speed_compute a, b, c;

	(void)state;
	unsetenv("HPDLF_RECALIBRATE");
	hp_speed_compute_get(1, 0, &a);
	assert_true(a.src == HP_SPEED_MEASURED || a.src == HP_SPEED_CACHED);
	assert_true(a.cache[0]);
	hp_speed_compute_get(1, 0, &b);
	assert_int_equal(b.src, HP_SPEED_CACHED);
	assert_true(fabs(b.mem_GBps - a.mem_GBps) <= 1e-8 * a.mem_GBps);
	assert_true(fabs(b.gflops[HP_SPEED_NPTS - 1] - a.gflops[HP_SPEED_NPTS - 1]) <= 1e-8 * a.gflops[HP_SPEED_NPTS - 1]);
	for (int i = 0; i < HP_SPEED_NPTS; i++) {
		assert_true(b.gflops[i] > 0.01 && b.gflops[i] < 1e5);
		assert_true(i == 0 || (b.flops[i] > b.flops[i - 1] && b.gflops[i] >= b.gflops[i - 1]));
	}
	assert_true(b.mem_GBps > 0.01 && b.dispatch_us > 0);
	spit(b.cache, "hpdlf-speed 1\ngarbage\n", 22);
	hp_speed_compute_get(1, 0, &c);
	assert_int_equal(c.src, HP_SPEED_MEASURED);
	hp_speed_compute_get(1, 0, &c);
	assert_int_equal(c.src, HP_SPEED_CACHED);
	setenv("HPDLF_RECALIBRATE", "1", 1);
	hp_speed_compute_get(1, 0, &c);
	unsetenv("HPDLF_RECALIBRATE");
	assert_int_equal(c.src, HP_SPEED_MEASURED);
	hp_speed_compute_get(1, 1, &c);
	assert_int_equal(c.src, HP_SPEED_MEASURED);
}

/* The tier model: bandwidths, and a fixed cost per request that was
 * measured (requests in flight through the store: a system call and a
 * completion each, never free; the probe once stopped after its first
 * request and reported the floor, 0.1 us), cached with the same figures.
 * The figure itself is a timing (each request's time less its bytes at
 * the streaming bandwidth): it was 0.2 us once under a loaded machine's
 * disk, so the check is that it was measured, above the floor, not that
 * it exceeds some speed. */
static void test_tier_probe(void **state)
{
	struct hs_tier_spec spec = { .kind = HS_TIER_NVME };
	struct hp_speed_tier a, b;
	const char *tmp0 = getenv("TMPDIR");
	char *tmp = tmp0 ? strdup(tmp0) : NULL;

	(void)state;
	unsetenv("HPDLF_RECALIBRATE");
	setenv("TMPDIR", dir, 1); /* the probe's file goes next to the spill file */
	hp_speed_tier_get(&spec, 16384, 1, &a);
	assert_int_equal(a.src, HP_SPEED_MEASURED);
	print_message("tier %s: read %.0f MB/s + %.1f us, write %.0f MB/s + %.1f us\n", a.name, a.read_MBps,
		      a.read_lat_us, a.write_MBps, a.write_lat_us);
	assert_true(a.read_MBps > 1 && a.write_MBps > 1);
	assert_true(a.read_lat_us > 0.1);
	hp_speed_tier_get(&spec, 16384, 0, &b);
	assert_int_equal(b.src, HP_SPEED_CACHED);
	assert_true(fabs(b.read_lat_us - a.read_lat_us) <= 1e-6 * a.read_lat_us);
	assert_true(fabs(b.write_lat_us - a.write_lat_us) <= 1e-6 * (a.write_lat_us + 1));
	if (tmp)
		setenv("TMPDIR", tmp, 1);
	else
		unsetenv("TMPDIR");
	free(tmp);
}

/* ---- the model ---- */

static void test_interpolation(void **state)
{
	struct hp_speed_compute sp = { .flops = { 1e6, 1e7, 1e8, 1e9 }, .gflops = { 10, 20, 40, 80 } };

	(void)state;
	assert_true(fabs(hp_speed_gemm_gflops(&sp, 1e3) - 10) < 1e-9);
	assert_true(fabs(hp_speed_gemm_gflops(&sp, 1e12) - 80) < 1e-9);
	assert_true(fabs(hp_speed_gemm_gflops(&sp, 1e8) - 40) < 1e-9);
	/* half way in log(FLOPs) between two points: half way in speed */
	assert_true(fabs(hp_speed_gemm_gflops(&sp, sqrt(1e7 * 1e8)) - 30) < 1e-9);
	assert_true(fabs(hp_speed_gemm_gflops(&sp, pow(10, 6.25)) - 12.5) < 1e-9);
}

/* x [1,4,8,8] -> Conv 3x3 pad 1 (8 filters) -> Relu. */
static struct hp_graph *conv_relu(void)
{
	struct hp_graph *g = hp_graph_new("t");
	struct hp_shape xs = { 4, { 1, 4, 8, 8 } }, ws = { 4, { 8, 4, 3, 3 } };
	int64_t ks[2] = { 3, 3 }, pads[4] = { 1, 1, 1, 1 };
	struct hp_attr a[2] = { { .name = "kernel_shape", .type = HP_ATTR_INTS, .n = 2, .ints = ks },
				{ .name = "pads", .type = HP_ATTR_INTS, .n = 4, .ints = pads } };
	int in[2], y, z, n;

	g->inputs = calloc(2, sizeof(int));
	g->outputs = calloc(1, sizeof(int));
	in[0] = hp_graph_add_value(g, "x", HP_VALUE_INPUT, HP_F32, &xs);
	in[1] = hp_graph_add_value(g, "w", HP_VALUE_INPUT, HP_F32, &ws);
	g->inputs[g->ninputs++] = in[0];
	g->inputs[g->ninputs++] = in[1];
	y = hp_graph_add_value(g, "y", HP_VALUE_ACTIVATION, HP_UNDEFINED, NULL);
	z = hp_graph_add_value(g, "z", HP_VALUE_ACTIVATION, HP_UNDEFINED, NULL);
	n = hp_graph_add_node(g, "conv", "Conv", 2, in, 1, &y);
	hp_graph_add_attr(g, n, &a[0]);
	hp_graph_add_attr(g, n, &a[1]);
	hp_graph_add_node(g, "relu", "Relu", 1, &y, 1, &z);
	g->outputs[g->noutputs++] = z;
	assert_int_equal(hp_graph_finalize(g), 0);
	assert_int_equal(hp_graph_infer(g), 0);
	return g;
}

static void test_kernel_cost(void **state)
{
	struct hp_speed_compute sp = { .flops = { 1e3, 1e4, 1e5, 1e6 }, .gflops = { 1, 2, 4, 8 },
				       .mem_GBps = 2, .dispatch_us = 3 };
	struct hp_graph *g = conv_relu();
	enum hp_kclass cls;
	double flops = 2.0 * 8 * 4 * 9 * 64; /* 2 * Cout * Cin * kh*kw * output pixels */
	double bytes = 4.0 * (4 * 64 + 8 * 4 * 9 + 8 * 64), relu_bytes = 4.0 * 2 * 8 * 64;
	double rate = 2 + (4 - 2) * log(flops / 1e4) / log(10), want;

	(void)state;
	for (int i = 0; i < g->nnodes; i++) {
		const struct hp_node *n = &g->nodes[i];
		double ms = hp_speed_kernel_ms(&sp, g, n, &cls);
		if (!strcmp(n->op_type, "Conv")) {
			assert_int_equal(cls, HP_KC_GEMM);
			want = 3e-3 + fmax(flops / rate / 1e6, bytes / 2 / 1e6);
		} else {
			assert_int_equal(cls, HP_KC_MEM);
			want = 3e-3 + relu_bytes / 2 / 1e6;
		}
		assert_true(fabs(ms - want) < 1e-9 * want);
	}
	hp_graph_free(g);
}

/* ---- hpdlf-exec --plan ---- */

/* Run hpdlf-exec with stdout into `out`; exit status. */
static int run(char *const argv[], const char *out)
{
	posix_spawn_file_actions_t fa;
	pid_t pid;
	int st;

	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_addopen(&fa, 1, out, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	if (posix_spawn(&pid, exe, &fa, NULL, argv, environ) != 0)
		return -1;
	posix_spawn_file_actions_destroy(&fa);
	if (waitpid(pid, &st, 0) < 0)
		return -1;
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

struct planned {
	int kernels;
	uint64_t peak, min, read, written;
	char tier[32];
	double ms, compute, io, gemm, mem;
};

static void parse_plan(const char *path, struct planned *p)
{
	char *t = slurp(path), *s;

	memset(p, 0, sizeof *p);
	print_message("%s", t);
	assert_non_null(s = strstr(t, ": "));
	assert_int_equal(sscanf(s, ": %d kernels", &p->kernels), 1);
	assert_non_null(s = strstr(t, "\n  tier "));
	assert_int_equal(sscanf(s, "\n  tier %31s read %*s %*s (%llu bytes)", p->tier, (unsigned long long *)&p->read), 2);
	assert_non_null(s = strstr(s, ", written "));
	assert_int_equal(sscanf(s, ", written %*s %*s (%llu bytes)", (unsigned long long *)&p->written), 1);
	assert_non_null(s = strstr(t, "predicted step time"));
	assert_int_equal(sscanf(s, "predicted step time %lf ms (%*[^:]: compute %lf ms, I/O %lf ms)", &p->ms, &p->compute,
				&p->io), 3);
	assert_non_null(s = strstr(t, "sgemm-bound"));
	assert_int_equal(sscanf(s, "sgemm-bound %*d kernels %lf ms", &p->gemm), 1);
	assert_non_null(s = strstr(t, "memory-bound "));
	assert_int_equal(sscanf(s, "memory-bound %*d kernels %lf ms", &p->mem), 1);
	/* consistent: compute is its classes, the step at least its lanes' work */
	assert_true(p->ms > 0 && p->compute > 0);
	assert_true(fabs(p->gemm + p->mem - p->compute) <= 0.02 + 1e-3 * p->compute);
	assert_true(p->ms >= p->compute - 0.01 && p->ms >= p->io - 0.01);
	free(t);
}

static void model_path(char *buf, size_t len, const char *file)
{
	snprintf(buf, len, "%s/tests/models/unet3d_tiny/%s", src, file);
}

static void plan_infer(uint64_t budget, struct planned *p)
{
	char model[4200], in[4300], out[4200], b[32];
	/* --no-fuse: the graph hp_plan_summarize plans (the tool fuses
	 * Conv+Relu in core, which the library call does not) */
	char *argv[] = { (char *)exe, model, "--plan", "--no-fuse", "--threads", "2", "--input", in, "--budget", b, NULL };

	model_path(model, sizeof model, "model.onnx");
	snprintf(in, sizeof in, "input=");
	model_path(in + 6, sizeof in - 6, "infer_x.npy");
	snprintf(b, sizeof b, "%llu", (unsigned long long)budget);
	if (!budget)
		argv[8] = NULL; /* in core: no --budget (--budget 0 is refused) */
	snprintf(out, sizeof out, "%s/plan.txt", dir);
	assert_int_equal(run(argv, out), 0);
	parse_plan(out, p);
}

/* Bytes tier `name` read and wrote in a run of `iters` iterations. */
static void run_tier_bytes(uint64_t budget, int iters, const char *name, uint64_t *rd, uint64_t *wr)
{
	char model[4200], in[4300], out[4200], js[4200], b[32], it[16];
	char *argv[] = { (char *)exe, model, "--quiet", "--threads", "2", "--input", in, "--budget", b,
			 "--iterations", it, "--stats-json", js, NULL };
	json_object *o, *tiers, *t, *x;

	model_path(model, sizeof model, "model.onnx");
	snprintf(in, sizeof in, "input=");
	model_path(in + 6, sizeof in - 6, "infer_x.npy");
	snprintf(b, sizeof b, "%llu", (unsigned long long)budget);
	snprintf(it, sizeof it, "%d", iters);
	snprintf(out, sizeof out, "%s/run.txt", dir);
	snprintf(js, sizeof js, "%s/stats.json", dir);
	assert_int_equal(run(argv, out), 0);
	assert_non_null(o = json_object_from_file(js));
	assert_true(json_object_object_get_ex(o, "tiers", &tiers));
	assert_true(json_object_object_get_ex(tiers, name, &t));
	assert_true(json_object_object_get_ex(t, "bytes_read", &x));
	*rd = (uint64_t)json_object_get_int64(x);
	assert_true(json_object_object_get_ex(t, "bytes_written", &x));
	*wr = (uint64_t)json_object_get_int64(x);
	json_object_put(o);
}

/* Planned bytes per tier = the bytes a steady-state run moves (the second
 * of two runs minus the first); out of core never predicted faster. */
static void test_plan_infer(void **state)
{
	struct planned in, ooc;
	struct hp_plan_summary sum;
	struct hp_exec_opts o;
	struct hp_graph *g;
	struct hp_shape xs = { 5, { 2, 1, 16, 16, 16 } };
	char model[4200];
	uint64_t budget, r1, w1, r2, w2, chunk;

	(void)state;
	model_path(model, sizeof model, "model.onnx");
	assert_int_equal(hp_graph_load(model, &g), 0);
	assert_int_equal(hp_graph_set_input_shape(g, "input", &xs), 0);
	assert_int_equal(hp_graph_infer(g), 0);
	hp_exec_opts_init(&o, sizeof o);
	o.threads = 2;
	assert_int_equal(hp_plan_summarize(g, &o, &sum), 0);
	hp_graph_free(g);
	/* a quarter of the way from the smallest budget to the in-core peak:
	 * the plan must page */
	budget = (sum.min_budget + (sum.peak_bytes - sum.min_budget) / 4) / 4096 * 4096;
	plan_infer(0, &in);
	assert_int_equal(in.read, 0);
	assert_int_equal(in.written, 0);
	assert_true(fabs(in.ms - sum.predicted_ms) <= 0.05 * sum.predicted_ms + 0.01); /* same cached model */
	plan_infer(budget, &ooc);
	assert_true(ooc.read > 0);
	assert_true(ooc.ms >= in.ms - 0.01);
	run_tier_bytes(budget, 1, ooc.tier, &r1, &w1);
	run_tier_bytes(budget, 2, ooc.tier, &r2, &w2);
	print_message("budget %llu, tier %s: planned read %llu written %llu; run 2 - run 1: read %llu written %llu\n",
		      (unsigned long long)budget, ooc.tier, (unsigned long long)ooc.read,
		      (unsigned long long)ooc.written, (unsigned long long)(r2 - r1), (unsigned long long)(w2 - w1));
	assert_int_equal(r2 - r1, ooc.read);
	chunk = hp_budget_chunk(budget);
	/* write-backs: within one chunk (the store writes whole dirty chunks) */
	assert_true(w2 - w1 <= ooc.written + chunk && ooc.written <= w2 - w1 + chunk);
}

static int has_dot(void)
{
	return system("dot -V >/dev/null 2>&1") == 0;
}

/* --train --plan plans forward, backward and optimizer; --plan-dot is
 * Graphviz with a box per step. */
static void test_plan_train(void **state)
{
	char model[4200], x[4200], y[4200], out[4200], dotf[4200], cmd[8600];
	char *argv[] = { (char *)exe, model, "--train", "--data", x, "--labels", y, "--batch", "2", "--steps", "1",
			 "--loss", "cross-entropy", "--threads", "2", "--plan", "--plan-dot", dotf, "--budget", "4M", NULL };
	struct planned tr, inf;
	char *d;

	(void)state;
	model_path(model, sizeof model, "model.onnx");
	model_path(x, sizeof x, "x.npy");
	model_path(y, sizeof y, "y.npy");
	snprintf(out, sizeof out, "%s/train_plan.txt", dir);
	snprintf(dotf, sizeof dotf, "%s/plan.dot", dir);
	assert_int_equal(run(argv, out), 0);
	parse_plan(out, &tr);
	plan_infer(0, &inf);
	assert_true(tr.kernels > 2 * inf.kernels);  /* backward and updates too */
	assert_true(tr.compute > inf.compute);
	d = slurp(dotf);
	assert_true(!strncmp(d, "digraph plan {", 14));
	snprintf(cmd, sizeof cmd, "k%d [", tr.kernels - 1);
	assert_non_null(strstr(d, cmd));
	assert_non_null(strstr(d, "budget 4.0 MiB"));
	free(d);
	if (has_dot()) {
		snprintf(cmd, sizeof cmd, "dot -Tsvg '%s' -o '%s/plan.svg'", dotf, dir);
		assert_int_equal(system(cmd), 0);
	} else {
		print_message("graphviz not installed: the .dot file is not rendered\n");
	}
}

static int setup(void **state)
{
	char cache[4200];

	(void)state;
	exe = getenv("HPDLF_EXEC");
	src = getenv("HPDLF_SOURCE_DIR");
	if (!exe || !src || !mkdtemp(dir))
		return -1;
	snprintf(cache, sizeof cache, "%s/cache", dir);
	setenv("XDG_CACHE_HOME", cache, 1); /* this test's own cache, for the child processes too */
	return 0;
}

static int teardown(void **state)
{
	char cmd[4300];

	(void)state;
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
	return system(cmd) == 0 ? 0 : -1;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_cache_file),
		cmocka_unit_test(test_interpolation),
		cmocka_unit_test(test_kernel_cost),
		cmocka_unit_test(test_compute_cache),
		cmocka_unit_test(test_tier_probe),
		cmocka_unit_test(test_plan_infer),
		cmocka_unit_test(test_plan_train),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
