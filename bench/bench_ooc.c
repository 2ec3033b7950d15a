/* Out-of-core benchmark: each model in core, then at 50% and 25% of its
 * in-core tensor peak, as separate hpdlf-exec processes (so peak RSS is the
 * process's own).  Reports time ratios, peak RSS, bytes moved and the bound
 * max(compute time, bytes moved / tier bandwidth measured in this run).
 *
 *   hpdlf-bench-ooc [--exec PATH] [--reps N] [--threads N] [--dir DIR] [MODEL.onnx[:NAME=DIMS] ...]
 *
 * Without models it generates a wide MLP whose weights live in external
 * data and the README's 3D U-Net (48^3).  Ends with one JSON line. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <json-c/json.h>

#include "hpdlf/exec.h"
#include "hpdlf/graph.h"
#include "hpdlf/tensor.h"
#include "bench_fio.h"

#ifndef HPDLF_SOURCE_DIR
#define HPDLF_SOURCE_DIR "."
#endif
#ifndef HPDLF_EXEC_PATH
#define HPDLF_EXEC_PATH "hpdlf-exec"
#endif

struct result {
	double ms;
	uint64_t peak_tensor, peak_rss, bytes_read, bytes_written;
	double stall_ms;
	double cpu_ms;          /* the child's user + system CPU time per iteration (robust on a busy machine) */
	int ok;
};

static const char *exe = HPDLF_EXEC_PATH;
static char tmpdir[] = "/tmp/hpdlf-bench-ooc-XXXXXX";

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int64_t jget(json_object *o, const char *k)
{
	json_object *v;

	return json_object_object_get_ex(o, k, &v) ? json_object_get_int64(v) : 0;
}

/* One hpdlf-exec run; budget 0 is in core. */
static struct result run(const char *model, const char *shape, uint64_t budget, int reps, int threads)
{
	char stats[4200], b[64], r[32], t[32];
	const char *argv[24];
	struct result res = { 0 };
	int n = 0, st;
	pid_t pid;
	struct rusage ru;

	snprintf(stats, sizeof stats, "%s/stats.json", tmpdir);
	snprintf(b, sizeof b, "%llu", (unsigned long long)budget);
	snprintf(r, sizeof r, "%d", reps);
	snprintf(t, sizeof t, "%d", threads);
	argv[n++] = exe;
	argv[n++] = model;
	if (shape) {
		argv[n++] = "--shape";
		argv[n++] = shape;
	}
	argv[n++] = "--iterations", argv[n++] = r;
	argv[n++] = "--threads", argv[n++] = t;
	argv[n++] = "--stats-json", argv[n++] = stats;
	argv[n++] = "--quiet";
	if (budget)
		argv[n++] = "--budget", argv[n++] = b;
	argv[n] = NULL;
	unlink(stats);
	pid = fork();
	if (pid == 0) {
		setenv("TMPDIR", tmpdir, 1); /* the default spill file goes where bandwidth was measured */
		execv(exe, (char *const *)argv);
		_exit(127);
	}
	if (pid < 0 || wait4(pid, &st, 0, &ru) < 0 || !WIFEXITED(st) || WEXITSTATUS(st)) {
		fprintf(stderr, "hpdlf-bench-ooc: %s at budget %s failed\n", model, budget ? b : "in core");
		return res;
	}
	json_object *o = json_object_from_file(stats), *v, *tiers = NULL;
	if (!o)
		return res;
	if (json_object_object_get_ex(o, "ms_median", &v))
		res.ms = json_object_get_double(v);
	res.peak_tensor = (uint64_t)jget(o, "tensor_peak_bytes");
	res.peak_rss = (uint64_t)ru.ru_maxrss * 1024; /* measured by the kernel for the child */
	res.cpu_ms = ((double)ru.ru_utime.tv_sec + (double)ru.ru_stime.tv_sec) * 1e3 +
		     ((double)ru.ru_utime.tv_usec + (double)ru.ru_stime.tv_usec) / 1e3;
	res.cpu_ms /= reps;
	/* bytes of the last (steady-state) run: loads from the spill tier and
	 * from the model's own files, write-backs */
	res.bytes_read = (uint64_t)jget(o, "run_bytes_loaded");
	res.bytes_written = (uint64_t)jget(o, "run_bytes_written");
	if (json_object_object_get_ex(o, "stall_ms", &v))
		res.stall_ms = json_object_get_double(v);
	(void)tiers;
	json_object_put(o);
	res.ok = 1;
	return res;
}

/* Sequential O_DIRECT bandwidth of the spill directory in MB/s: the figure
 * the bound divides bytes moved by.  fio with io_uring at the store's queue
 * depth (32) and 1 MiB blocks, which is what the store's tier can reach; a
 * synchronous pread/pwrite loop (which understates it) only without fio. */
static void disk_bandwidth(double *rd, double *wr, const char **how)
{
	char path[4200];
	size_t bs = 1 << 20, total = 512u << 20;
	void *buf;
	int fd;
	double t0;

	*wr = hp_bench_fio(tmpdir, "write", "1M", total, 32, 0);
	*rd = *wr > 0 ? hp_bench_fio(tmpdir, "read", "1M", total, 32, 0) : -1;
	hp_bench_fio_cleanup(tmpdir);
	*how = "fio io_uring qd 32, 1 MiB";
	if (*rd > 0 && *wr > 0)
		return;
	*how = "pread/pwrite loop, 1 MiB (fio not found)";
	*rd = *wr = 0;
	snprintf(path, sizeof path, "%s/bw", tmpdir);
	if (posix_memalign(&buf, 4096, bs))
		return;
	memset(buf, 0x5a, bs);
	fd = open(path, O_RDWR | O_CREAT | O_DIRECT, 0600);
	if (fd < 0) {
		free(buf);
		return;
	}
	t0 = now_s();
	for (size_t off = 0; off < total; off += bs)
		if (pwrite(fd, buf, bs, (off_t)off) != (ssize_t)bs)
			goto out;
	fdatasync(fd);
	*wr = (double)total / 1e6 / (now_s() - t0);
	t0 = now_s();
	for (size_t off = 0; off < total; off += bs)
		if (pread(fd, buf, bs, (off_t)off) != (ssize_t)bs)
			goto out;
	*rd = (double)total / 1e6 / (now_s() - t0);
out:
	close(fd);
	unlink(path);
	free(buf);
}

/* The planner's smallest budget for the model as hpdlf-exec would run it
 * at `budget` (compiled as a session would be: weights and operators split
 * to fit when needed; 0 if it cannot tell). */
static uint64_t min_budget(const char *model, const char *shape, uint64_t budget)
{
	struct hp_graph *g;
	struct hp_exec_opts o;
	struct hp_plan_summary p = { 0 };
	char name[256];
	const char *eq = shape ? strchr(shape, '=') : NULL;
	struct hp_shape s;

	if (hp_graph_load(model, &g) < 0)
		return 0;
	if (eq && (size_t)(eq - shape) < sizeof name) {
		memcpy(name, shape, (size_t)(eq - shape));
		name[eq - shape] = 0;
		if (hp_shape_parse(eq + 1, &s) == 0)
			hp_graph_set_input_shape(g, name, &s);
	}
	hp_exec_opts_init(&o, sizeof o);
	o.budget = budget;
	if (hp_graph_infer(g) == 0 && hp_graph_compile(g, &o) == 0)
		hp_plan_summarize(g, &o, &p);
	hp_graph_free(g);
	return p.min_budget;
}

static void bench_model(const char *spec, int reps, int threads, double rd, double wr, json_object *out)
{
	char model[4096], *shape = NULL, *colon;
	static const double fractions[] = { 0.5, 0.25 };
	struct result in;
	json_object *m = json_object_new_object(), *runs = json_object_new_array();

	snprintf(model, sizeof model, "%s", spec);
	colon = strrchr(model, ':');
	if (colon && strchr(colon, '=')) {
		*colon = 0;
		shape = colon + 1;
	}
	in = run(model, shape, 0, reps, threads);
	json_object_object_add(m, "model", json_object_new_string(spec));
	if (!in.ok) {
		json_object_object_add(m, "error", json_object_new_string("in-core run failed"));
		json_object_array_add(out, m);
		json_object_put(runs);
		return;
	}
	json_object_object_add(m, "incore_ms", json_object_new_double(in.ms));
	json_object_object_add(m, "incore_cpu_ms_per_iteration", json_object_new_double(in.cpu_ms));
	json_object_object_add(m, "incore_peak_tensor_bytes", json_object_new_int64((int64_t)in.peak_tensor));
	json_object_object_add(m, "incore_peak_rss_bytes", json_object_new_int64((int64_t)in.peak_rss));
	fprintf(stderr, "%s: in core %.2f ms, tensor peak %.1f MiB, RSS %.1f MiB\n", spec, in.ms,
		(double)in.peak_tensor / 1048576, (double)in.peak_rss / 1048576);
	for (size_t i = 0; i < sizeof fractions / sizeof fractions[0]; i++) {
		uint64_t budget = (uint64_t)((double)in.peak_tensor * fractions[i]);
		uint64_t minb = min_budget(model, shape, budget);
		if (budget < minb) {
			fprintf(stderr, "  %.0f%% is below the smallest budget (%llu bytes): using that\n",
				fractions[i] * 100, (unsigned long long)minb);
			budget = minb;
		}
		struct result r = run(model, shape, budget, reps, threads);
		json_object *j = json_object_new_object();
		json_object_object_add(j, "fraction", json_object_new_double(fractions[i]));
		json_object_object_add(j, "budget_bytes", json_object_new_int64((int64_t)budget));
		if (!r.ok) {
			json_object_object_add(j, "error", json_object_new_string("run failed"));
			json_object_array_add(runs, j);
			continue;
		}
		double per_run_rd = (double)r.bytes_read, per_run_wr = (double)r.bytes_written;
		double io_ms = (rd > 0 ? per_run_rd / 1e3 / rd : 0) + (wr > 0 ? per_run_wr / 1e3 / wr : 0);
		double bound = io_ms > in.ms ? io_ms : in.ms;
		json_object_object_add(j, "ms", json_object_new_double(r.ms));
		json_object_object_add(j, "ratio_vs_incore", json_object_new_double(r.ms / in.ms));
		json_object_object_add(j, "bound_ms", json_object_new_double(bound));
		json_object_object_add(j, "fraction_of_bound", json_object_new_double(bound / r.ms));
		json_object_object_add(j, "io_limited", json_object_new_boolean(io_ms > in.ms));
		json_object_object_add(j, "peak_rss_bytes", json_object_new_int64((int64_t)r.peak_rss));
		json_object_object_add(j, "stall_ms", json_object_new_double(r.stall_ms));
		json_object_object_add(j, "cpu_ms_per_iteration", json_object_new_double(r.cpu_ms));
		json_object_object_add(j, "cpu_ratio_vs_incore", json_object_new_double(r.cpu_ms / in.cpu_ms));
		json_object_object_add(j, "rss_over_budget_bytes",
				       json_object_new_int64((int64_t)r.peak_rss - (int64_t)budget));
		json_object_object_add(j, "bytes_read_per_run", json_object_new_double(per_run_rd));
		json_object_object_add(j, "bytes_written_per_run", json_object_new_double(per_run_wr));
		json_object_array_add(runs, j);
		fprintf(stderr, "  budget %.0f%% (%.1f MiB): %.2f ms = %.3fx in core (CPU %.3fx), bound %.2f ms (%s), "
				"RSS %.1f MiB, read %.1f MiB/run, written %.1f MiB/run\n",
			fractions[i] * 100, (double)budget / 1048576, r.ms, r.ms / in.ms, r.cpu_ms / in.cpu_ms, bound,
			io_ms > in.ms ? "I/O" : "compute", (double)r.peak_rss / 1048576, per_run_rd / 1048576,
			per_run_wr / 1048576);
	}
	json_object_object_add(m, "runs", runs);
	json_object_array_add(out, m);
}

static int make_defaults(char *specs[2])
{
	char cmd[16384];

	snprintf(cmd, sizeof cmd,
		 "/usr/bin/python3 %s/tests/exec/make_models.py %s >/dev/null && "
		 "/usr/bin/python3 %s/tools/make_unet3d.py %s/unet3d.onnx >/dev/null",
		 HPDLF_SOURCE_DIR, tmpdir, HPDLF_SOURCE_DIR, tmpdir);
	if (system(cmd) != 0)
		return -EIO;
	if (asprintf(&specs[0], "%s/big_ext.onnx", tmpdir) < 0 ||
	    asprintf(&specs[1], "%s/unet3d.onnx:input=1x1x48x48x48", tmpdir) < 0)
		return -ENOMEM;
	return 0;
}

int main(int argc, char **argv)
{
	int reps = 5, threads = 0, nspec = 0;
	char **specs = calloc((size_t)argc + 2, sizeof *specs), cmd[4200];
	const char *base = NULL;
	double rd, wr;
	const char *how = "";
	json_object *models = json_object_new_array(), *top = json_object_new_object();

	for (int o = 1; o < argc; o++) {
		if (!strcmp(argv[o], "--reps") && o + 1 < argc)
			reps = atoi(argv[++o]);
		else if (!strcmp(argv[o], "--threads") && o + 1 < argc)
			threads = atoi(argv[++o]);
		else if (!strcmp(argv[o], "--exec") && o + 1 < argc)
			exe = argv[++o];
		else if (!strcmp(argv[o], "--dir") && o + 1 < argc)
			base = argv[++o];
		else if (argv[o][0] == '-') {
			fprintf(stderr, "usage: hpdlf-bench-ooc [--exec PATH] [--reps N] [--threads N] [--dir DIR] "
					"[MODEL.onnx[:NAME=DIMS] ...]\n");
			return 2;
		} else
			specs[nspec++] = argv[o];
	}
	if (base)
		snprintf(tmpdir, sizeof tmpdir, "%s", base);
	else if (!mkdtemp(tmpdir)) {
		perror("hpdlf-bench-ooc: mkdtemp");
		return 1;
	}
	if (reps < 1)
		reps = 1;
	if (!threads)
		threads = (int)sysconf(_SC_NPROCESSORS_ONLN);
	if (!nspec) {
		if (make_defaults(specs) < 0) {
			fprintf(stderr, "hpdlf-bench-ooc: cannot generate the default models (python3 with onnx)\n");
			return 1;
		}
		nspec = 2;
	}
	disk_bandwidth(&rd, &wr, &how);
	fprintf(stderr, "spill directory %s: O_DIRECT read %.0f MB/s, write %.0f MB/s (%s)\n", tmpdir, rd, wr, how);
	for (int i = 0; i < nspec; i++)
		bench_model(specs[i], reps, threads, rd, wr, models);
	json_object_object_add(top, "bench", json_object_new_string("ooc"));
	json_object_object_add(top, "threads", json_object_new_int(threads));
	json_object_object_add(top, "disk_read_MBps", json_object_new_double(rd));
	json_object_object_add(top, "disk_write_MBps", json_object_new_double(wr));
	json_object_object_add(top, "disk_measured_with", json_object_new_string(how));
	json_object_object_add(top, "models", models);
	printf("%s\n", json_object_to_json_string_ext(top, JSON_C_TO_STRING_PLAIN));
	json_object_put(top);
	if (!base) {
		snprintf(cmd, sizeof cmd, "rm -rf %s", tmpdir);
		if (system(cmd) != 0)
			fprintf(stderr, "hpdlf-bench-ooc: could not remove %s\n", tmpdir);
	}
	return 0;
}
