/* Out-of-core execution: outputs bitwise equal to in-core at budgets from
 * generous down to the planner's minimum, peak RSS of the hpdlf-exec process
 * within budget + 128 MiB, and the documented error below the minimum.
 * Models are generated at test time (make_models.py). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <errno.h>
#include <math.h>
#include <fcntl.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <json-c/json.h>

#include "hpdlf/error.h"
#include "hpdlf/exec.h"
#include "hpdlf/graph.h"
#include "hpdlf/tensor.h"

#define RSS_SLACK (128ull << 20)

extern char **environ;
static char dir[] = "/tmp/hpdlf-test-ooc-XXXXXX";
static const char *exe;

struct child {
	int status;           /* exit status, or 128 + signal */
	uint64_t maxrss;      /* bytes */
};

static char errfile[4200];

/* Run hpdlf-exec with stderr into errfile. */
static struct child run_exec(char *const argv[])
{
	struct child c = { -1, 0 };
	posix_spawn_file_actions_t fa;
	struct rusage ru;
	pid_t pid;
	int st, rc;

	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_addopen(&fa, 2, errfile, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	rc = posix_spawn(&pid, exe, &fa, NULL, argv, environ);
	posix_spawn_file_actions_destroy(&fa);
	if (rc != 0)
		return c;
	if (wait4(pid, &st, 0, &ru) < 0)
		return c;
	c.status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
	c.maxrss = (uint64_t)ru.ru_maxrss * 1024;
	return c;
}

static int same_file(const char *a, const char *b)
{
	struct hp_tensor x, y;
	int same;

	if (hp_npy_read(a, &x) < 0)
		return 0;
	if (hp_npy_read(b, &y) < 0) {
		hp_tensor_free(&x);
		return 0;
	}
	same = x.dtype == y.dtype && hp_shape_equal(&x.shape, &y.shape) &&
	       !memcmp(x.data, y.data, hp_tensor_bytes(&x));
	hp_tensor_free(&x);
	hp_tensor_free(&y);
	return same;
}

static void write_input(const char *model, const char *path)
{
	struct hp_graph *g;
	struct hp_tensor t;
	uint32_t r = 99;

	assert_int_equal(hp_graph_load(model, &g), 0);
	const struct hp_value *v = &g->values[g->inputs[0]];
	assert_int_equal(hp_tensor_alloc(&t, v->dtype, &v->shape), 0);
	for (int64_t i = 0; i < hp_shape_numel(&t.shape); i++) {
		r = r * 1664525u + 1013904223u;
		((float *)t.data)[i] = (float)(r >> 8) / 16777216.0f - 0.5f;
	}
	assert_int_equal(hp_npy_write(path, &t), 0);
	hp_tensor_free(&t);
	hp_graph_free(g);
}

static void plan_of(const char *model, uint64_t budget, struct hp_plan_summary *p)
{
	struct hp_graph *g;
	struct hp_exec_opts o;

	assert_int_equal(hp_graph_load(model, &g), 0);
	assert_int_equal(hp_graph_infer(g), 0);
	hp_exec_opts_init(&o, sizeof o);
	o.budget = budget;
	assert_int_equal(hp_plan_summarize(g, &o, p), 0);
	hp_graph_free(g);
}

static char *slurp(const char *path)
{
	FILE *f = fopen(path, "r");
	char *buf = calloc(1, 1 << 16);

	if (f) {
		size_t n = fread(buf, 1, (1 << 16) - 1, f);
		buf[n] = 0;
		fclose(f);
	}
	return buf;
}

/* Run at `budget` (0: in core) and return the child's result; output in
 * out; `extra` (NULL-terminated, may be NULL) appended to the command. */
static struct child run_at_x(const char *model, const char *in, const char *out, uint64_t budget, const char *threads,
			     char *const *extra)
{
	char ibuf[4200], obuf[4200], bbuf[64];
	char *argv[32];
	int n = 0;

	snprintf(ibuf, sizeof ibuf, "x=%s", in);
	snprintf(obuf, sizeof obuf, "y=%s", out);
	argv[n++] = (char *)exe;
	argv[n++] = (char *)model;
	argv[n++] = "--input";
	argv[n++] = ibuf;
	argv[n++] = "--output";
	argv[n++] = obuf;
	argv[n++] = "--threads";
	argv[n++] = (char *)threads;
	argv[n++] = "--quiet";
	if (budget) {
		snprintf(bbuf, sizeof bbuf, "%llu", (unsigned long long)budget);
		argv[n++] = "--budget";
		argv[n++] = bbuf;
	}
	for (int i = 0; extra && extra[i] && n < 30; i++)
		argv[n++] = extra[i];
	argv[n] = NULL;
	return run_exec(argv);
}

static struct child run_at(const char *model, const char *in, const char *out, uint64_t budget, const char *threads)
{
	return run_at_x(model, in, out, budget, threads, NULL);
}

static void check_model(const char *name, int min_ratio_ok)
{
	char model[4200], in[4200], ref[4200], out[4200];
	struct hp_plan_summary p;
	struct child c;

	snprintf(model, sizeof model, "%s/%s.onnx", dir, name);
	snprintf(in, sizeof in, "%s/%s.in.npy", dir, name);
	snprintf(ref, sizeof ref, "%s/%s.ref.npy", dir, name);
	write_input(model, in);
	for (int th = 1; th <= 2; th++) {
		const char *threads = th == 1 ? "1" : "2";
		c = run_at(model, in, ref, 0, threads);
		assert_int_equal(c.status, 0);
		plan_of(model, 0, &p);
		uint64_t budgets[] = { p.peak_bytes * 2, p.peak_bytes, p.peak_bytes / 2, p.peak_bytes / 4,
				       p.min_budget };
		for (size_t i = 0; i < sizeof budgets / sizeof budgets[0]; i++) {
			uint64_t b = budgets[i] < p.min_budget ? p.min_budget : budgets[i];
			snprintf(out, sizeof out, "%s/%s.%zu.npy", dir, name, i);
			c = run_at(model, in, out, b, threads);
			print_message("%s threads %s budget %llu (min %llu): exit %d, peak RSS %llu\n", name, threads,
				      (unsigned long long)b, (unsigned long long)p.min_budget, c.status,
				      (unsigned long long)c.maxrss);
			assert_int_equal(c.status, 0);
			assert_true(same_file(ref, out));
			assert_true(c.maxrss <= b + RSS_SLACK);
		}
	}
	if (min_ratio_ok) {
		/* below the minimum: exit 2, one line naming the operator and the
		 * smallest budget that works (the planner's, asked independently) */
		char want[96], *err;
		c = run_at_x(model, in, out, p.min_budget - 4096, "1", (char *[]){ "--no-split", NULL });
		assert_int_equal(c.status, 2);
		err = slurp(errfile);
		snprintf(want, sizeof want, "the smallest budget that works is %llu bytes",
			 (unsigned long long)p.min_budget);
		print_message("%s", err);
		assert_non_null(strstr(err, "node '"));
		assert_non_null(strstr(err, want));
		assert_non_null(strchr(err, '\n'));
		assert_true(strchr(err, '\n')[1] == 0);
		free(err);
	}
}

static void test_mlp(void **state)
{
	(void)state;
	check_model("mlp", 1);
}

static void test_convnet(void **state)
{
	(void)state;
	check_model("convnet", 1);
}

/* Operator splitting: at a quarter of the in-core peak the graph is cut
 * into bands (asked independently through the library) or, where the
 * kernels' fixed tiles do not allow that fine a cut, at the smallest budget
 * the split reaches (well below the unsplit one).  The run fits and its
 * output is bitwise the in-core one at 1 and 2 threads: the conv kernels
 * tile by the geometry, and bands start on tile bounds. */
static void check_split(const char *name)
{
	char model[4200], in[4200], ref[4200], out[4200];
	struct hp_plan_summary p;
	struct hp_exec_opts o;
	struct hp_graph *g;
	struct child c;
	uint64_t budget, unsplit;
	int nsplit = 0;

	snprintf(model, sizeof model, "%s/%s.onnx", dir, name);
	snprintf(in, sizeof in, "%s/%s.in.npy", dir, name);
	snprintf(ref, sizeof ref, "%s/%s.ref.npy", dir, name);
	snprintf(out, sizeof out, "%s/%s.split.npy", dir, name);
	write_input(model, in);
	plan_of(model, 0, &p);
	budget = p.peak_bytes / 4;
	unsplit = p.min_budget;
	assert_true(unsplit > budget); /* unsplit it would not run */
	assert_int_equal(hp_graph_load(model, &g), 0);
	assert_int_equal(hp_graph_infer(g), 0);
	hp_exec_opts_init(&o, sizeof o);
	o.budget = budget;
	assert_int_equal(hp_graph_split(g, &o, &nsplit), 0);
	assert_true(nsplit > 0);
	if (hp_plan_summarize(g, &o, &p) < 0) {
		/* the smallest budget of the split graph */
		o.budget = 0;
		assert_int_equal(hp_plan_summarize(g, &o, &p), 0);
		print_message("%s: a quarter of the peak (%llu) is below the split's smallest budget %llu\n", name,
			      (unsigned long long)budget, (unsigned long long)p.min_budget);
		assert_true(p.min_budget < unsplit - unsplit / 3);
		budget = p.min_budget;
	}
	hp_graph_free(g);
	for (int t = 1; t <= 2; t++) {
		const char *th = t == 1 ? "1" : "2";
		assert_int_equal(run_at(model, in, ref, 0, th).status, 0);
		c = run_at(model, in, out, budget, th);
		print_message("%s: budget %llu (unsplit %llu), %d operators split, %s threads, exit %d\n", name,
			      (unsigned long long)budget, (unsigned long long)unsplit, nsplit, th, c.status);
		assert_int_equal(c.status, 0);
		assert_true(same_file(ref, out));
	}
}

static void test_split_unet3d(void **state)
{
	(void)state;
	check_split("unet3s");
}

static void test_split_batch(void **state)
{
	(void)state;
	check_split("convb");
}

static void test_branches(void **state)
{
	(void)state;
	check_model("branches", 1);
}

/* Weights ten times the budget, paged from the external-data file itself. */
static void test_big_external(void **state)
{
	char model[4200], in[4200], ref[4200], out[4200];
	struct hp_plan_summary p;
	struct child c;
	uint64_t budget;

	(void)state;
	snprintf(model, sizeof model, "%s/big_ext.onnx", dir);
	snprintf(in, sizeof in, "%s/big_ext.in.npy", dir);
	snprintf(ref, sizeof ref, "%s/big_ext.ref.npy", dir);
	snprintf(out, sizeof out, "%s/big_ext.out.npy", dir);
	write_input(model, in);
	plan_of(model, 0, &p);
	budget = p.peak_bytes / 10;
	if (budget < p.min_budget)
		budget = p.min_budget;
	print_message("big_ext: in-core peak %llu, budget %llu\n", (unsigned long long)p.peak_bytes,
		      (unsigned long long)budget);
	assert_true(p.peak_bytes >= 9 * budget);
	c = run_at(model, in, ref, 0, "2");
	assert_int_equal(c.status, 0);
	c = run_at(model, in, out, budget, "2");
	print_message("big_ext: exit %d, peak RSS %llu\n", c.status, (unsigned long long)c.maxrss);
	assert_int_equal(c.status, 0);
	assert_true(same_file(ref, out));
	assert_true(c.maxrss <= budget + RSS_SLACK);
}

/* Two task-net workers, each kernel on one thread: equal to in core on one
 * thread, at budgets down to the minimum. */
static void test_workers(void **state)
{
	char model[4200], in[4200], ref[4200], out[4200];
	struct hp_plan_summary p;
	char *extra[] = { "--workers", "2", NULL };
	struct child c;

	(void)state;
	snprintf(model, sizeof model, "%s/branches.onnx", dir);
	snprintf(in, sizeof in, "%s/branches.in.npy", dir);
	snprintf(ref, sizeof ref, "%s/branches.ref1.npy", dir);
	snprintf(out, sizeof out, "%s/branches.w2.npy", dir);
	write_input(model, in);
	c = run_at(model, in, ref, 0, "1");
	assert_int_equal(c.status, 0);
	plan_of(model, 0, &p);
	uint64_t budgets[] = { p.peak_bytes, p.peak_bytes / 2, p.min_budget };
	for (size_t i = 0; i < 3; i++) {
		uint64_t b = budgets[i] < p.min_budget ? p.min_budget : budgets[i];
		c = run_at_x(model, in, out, b, "2", extra);
		assert_int_equal(c.status, 0);
		assert_true(same_file(ref, out));
		assert_true(c.maxrss <= b + RSS_SLACK);
	}
}

/* --tier nvme=PATH:SIZE is the spill tier; --trace has a lane per worker
 * and I/O queue, resident-bytes counters per tier, bytes on I/O spans,
 * each run of the session as a span of its own lane (bench/
 * ooc_step_breakdown.py: the time between runs is the caller's), and with
 * HPDLF_TRACE_PIN_US=0 a "pin" span before every kernel's on the compute
 * lanes (room made for its tensors). */
static void test_tier_trace(void **state)
{
	char model[4200], in[4200], ref[4200], out[4200], tier[4300], tpath[4200], trace[4300];
	struct hp_plan_summary p;
	struct child c;
	struct stat sb;
	int counters = 0, io_bytes = 0, lanes = 0, pins = 0, kernels = 0, runs = 0;

	(void)state;
	snprintf(model, sizeof model, "%s/convnet.onnx", dir);
	snprintf(in, sizeof in, "%s/convnet.in.npy", dir);
	snprintf(ref, sizeof ref, "%s/convnet.tref.npy", dir);
	snprintf(out, sizeof out, "%s/convnet.tier.npy", dir);
	snprintf(tpath, sizeof tpath, "%s/tier.bin", dir);
	snprintf(tier, sizeof tier, "nvme=%s:64M", tpath);
	snprintf(trace, sizeof trace, "%s/trace.json", dir);
	write_input(model, in);
	c = run_at(model, in, ref, 0, "2");
	assert_int_equal(c.status, 0);
	plan_of(model, 0, &p);
	char *extra[] = { "--tier", tier, "--trace", trace, "--iterations", "2", NULL };
	setenv("HPDLF_TRACE_PIN_US", "0", 1);
	c = run_at_x(model, in, out, p.min_budget, "2", extra);
	unsetenv("HPDLF_TRACE_PIN_US");
	assert_int_equal(c.status, 0);
	assert_true(same_file(ref, out));
	/* the run created the spill file, so it removed it at exit (the trace
	 * below shows the tier was used) */
	assert_int_equal(stat(tpath, &sb), -1);
	assert_int_equal(errno, ENOENT);
	json_object *t = json_object_from_file(trace);
	assert_non_null(t);
	assert_true(json_object_is_type(t, json_type_array));
	for (size_t i = 0; i < json_object_array_length(t); i++) {
		json_object *e = json_object_array_get_idx(t, i), *ph, *args, *x;
		const char *k;
		if (!json_object_object_get_ex(e, "ph", &ph))
			continue;
		k = json_object_get_string(ph);
		json_object_object_get_ex(e, "args", &args);
		if (!strcmp(k, "C") && args && json_object_object_get_ex(args, "dram", &x) &&
		    json_object_object_get_ex(args, "nvme0", &x))
			counters++;
		if (!strcmp(k, "X") && args && json_object_object_get_ex(args, "bytes", &x) &&
		    json_object_object_get_ex(e, "tid", &x) && json_object_get_int(x) >= 100)
			io_bytes++;
		if (!strcmp(k, "M"))
			lanes++;
		if (!strcmp(k, "X") && json_object_object_get_ex(e, "tid", &x) && json_object_get_int(x) < 100 &&
		    json_object_object_get_ex(e, "cat", &x)) {
			const char *cat = json_object_get_string(x);
			pins += !strcmp(cat, "pin");
			kernels += strcmp(cat, "pin") && strcmp(cat, "unpin") && strcmp(cat, "stall") &&
				   strcmp(cat, "load") && strcmp(cat, "write-back") && strcmp(cat, "evict");
		}
		if (!strcmp(k, "X") && json_object_object_get_ex(e, "cat", &x) && !strcmp(json_object_get_string(x), "run") &&
		    json_object_object_get_ex(e, "tid", &x) && json_object_get_int(x) == 300)
			runs++;
	}
	json_object_put(t);
	print_message("trace: %d counters, %d I/O spans with bytes, %d lanes, %d pins for %d kernels, %d runs\n",
		      counters, io_bytes, lanes, pins, kernels, runs);
	assert_true(counters > 0);
	assert_true(io_bytes > 0);
	assert_true(lanes >= 3);
	assert_true(kernels > 0);
	assert_true(pins >= kernels); /* (aliasing kernels pin without a span of their own) */
	assert_true(runs >= 2); /* --iterations 2 */
}

static int setup(void **state)
{
	char cmd[8192];
	const char *py = getenv("HPDLF_PYTHON"), *src = getenv("HPDLF_SOURCE_DIR");

	(void)state;
	exe = getenv("HPDLF_EXEC");
	if (!exe || !src || !mkdtemp(dir))
		return -1;
	snprintf(errfile, sizeof errfile, "%s/stderr.txt", dir);
	snprintf(cmd, sizeof cmd, "%s %s/tests/exec/make_models.py %s", py ? py : "/usr/bin/python3", src, dir);
	return system(cmd) == 0 ? 0 : -1;
}

static int teardown(void **state)
{
	char cmd[4200];

	(void)state;
	snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
	return system(cmd) == 0 ? 0 : -1;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_mlp),
		cmocka_unit_test(test_convnet),
		cmocka_unit_test(test_branches),
		cmocka_unit_test(test_split_unet3d),
		cmocka_unit_test(test_split_batch),
		cmocka_unit_test(test_big_external),
		cmocka_unit_test(test_workers),
		cmocka_unit_test(test_tier_trace),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
