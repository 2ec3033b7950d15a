/* Inference benchmark: ms per inference and GFLOP/s of hpdlf in core, and the
 * ratio to ONNX Runtime measured in the same run when it is available.
 *
 *   hpdlf-bench-infer [--reps N] [--threads N] [--fuse-gain] [MODEL.onnx[:NAME=DIMS] ...]
 *
 * Without models it generates the 3D U-Net of the README (48^3, batch 1)
 * and a small one.  ONNX Runtime runs when `node` finds onnxruntime-node
 * (NODE_PATH, e.g. after `npm install --ignore-scripts onnxruntime-node@1.20.1`).
 * The graph is optimised for inference as hpdlf-exec does (exec/fuse.c);
 * HPDLF_BENCH_NO_FUSE=1 measures it as imported; --fuse-gain measures both
 * in the same loop (runs alternating) and reports the speed-up of the
 * optimised graph ("fuse_speedup", medians of wall time; "fuse_cpu_speedup"
 * of the process's CPU time, steadier on a shared machine) beside its
 * ratio to ORT.
 * Ends with one JSON line. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <json-c/json.h>

#include "hpdlf/error.h"
#include "hpdlf/exec.h"
#include "hpdlf/graph.h"
#include "hpdlf/tensor.h"
#include "exec/fuse.h"
#include "kernels/blas.h"

#ifndef HPDLF_SOURCE_DIR
#define HPDLF_SOURCE_DIR "."
#endif

static int cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

/* ONNX Runtime's median ms (-1 if it did not run); *cpu_per_wall gets its
 * CPU time over wall time in the timed runs (bench/ort_run.js), -1 if not
 * given. */
static double ort_ms(const char *model, const char *input, int reps, int threads, double *cpu_per_wall)
{
	char cmd[8192], line[1024];
	double ms = -1;
	FILE *f;

	*cpu_per_wall = -1;
	snprintf(cmd, sizeof cmd, "node %s/bench/ort_run.js '%s' '%s' %d %d 2>/dev/null", HPDLF_SOURCE_DIR, model,
		 input, reps, threads);
	f = popen(cmd, "r");
	if (!f)
		return -1;
	if (fgets(line, sizeof line, f)) {
		json_object *o = json_tokener_parse(line), *v;
		if (o && json_object_object_get_ex(o, "ms_median", &v))
			ms = json_object_get_double(v);
		if (o && json_object_object_get_ex(o, "cpu_per_wall", &v))
			*cpu_per_wall = json_object_get_double(v);
		json_object_put(o);
	}
	pclose(f);
	return ms;
}

static void fill(struct hp_tensor *t)
{
	int64_t n = hp_shape_numel(&t->shape);
	uint32_t x = 12345;

	for (int64_t i = 0; i < n && t->dtype == HP_F32; i++) {
		x = x * 1664525u + 1013904223u;
		((float *)t->data)[i] = (float)(x >> 8) / 16777216.0f * 2 - 1;
	}
}

/* Load model `path` (input NAME=DIMS when `colon`), optimise it for
 * inference unless !fuse, and open a session on it. */
static int open_model(const char *path, const char *colon, int fuse, int threads, struct hp_graph **g,
		      struct hp_session **s)
{
	struct hp_exec_opts o;
	int rc = hp_graph_load(path, g);

	if (rc == 0 && colon) {
		struct hp_shape sh;
		char name[256], *eq;
		snprintf(name, sizeof name, "%s", colon);
		eq = strchr(name, '=');
		*eq = 0;
		rc = hp_shape_parse(eq + 1, &sh);
		if (rc == 0)
			rc = hp_graph_set_input_shape(*g, name, &sh);
	}
	for (int i = 0; rc == 0 && i < (*g)->ninputs; i++) {
		struct hp_value *v = &(*g)->values[(*g)->inputs[i]];
		for (int d = 0; d < v->shape.rank; d++)
			if (v->shape.dims[d] < 0)
				v->shape.dims[d] = 1;
	}
	if (rc == 0)
		rc = hp_graph_infer(*g);
	if (rc == 0 && fuse) { /* as hpdlf-exec runs inference */
		struct hp_fuse_report fr;
		rc = hp_fuse_inference(*g, NULL, &fr);
		hp_fuse_report_free(&fr);
	}
	hp_exec_opts_init(&o, sizeof o);
	o.threads = threads;
	return rc == 0 ? hp_session_create(*g, &o, s) : rc;
}

static int set_input(struct hp_graph *g, struct hp_session *s, struct hp_tensor *x)
{
	const struct hp_value *v = &g->values[g->inputs[0]];
	int rc = x->data ? 0 : hp_tensor_alloc(x, v->dtype, &v->shape);

	if (rc == 0 && x->dtype == HP_F32)
		fill(x);
	return rc == 0 ? hp_session_set_input(s, v->name, x) : rc;
}

static double cpu_now_ms(void)
{
	struct timespec t;

	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
	return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

/* One timed run of session s: wall ms into *ms, the process's CPU ms into
 * *cpu (steadier than wall time on a machine shared with other jobs). */
static int timed(struct hp_session *s, double *ms, double *cpu, struct hp_run_stats *st)
{
	double c0 = cpu_now_ms();
	int rc = hp_session_run(s);

	*cpu = cpu_now_ms() - c0;
	hp_session_stats(s, st);
	*ms = st->ms;
	return rc;
}

/* Warm-up: WARM_MIN runs and at least WARM_MS of them (at most WARM_MAX
 * runs), as bench/ort_run.js does for ONNX Runtime.  One run was not
 * enough on 2 threads: GPT-2-style's median of 5 timed runs was 13.7 ms
 * against 8.7 ms for 30, the first runs after one warm-up being slow. */
#define WARM_MIN 3
#define WARM_MAX 200
#define WARM_MS 300.0
static int warm_up(struct hp_session *s)
{
	struct hp_run_stats st;
	double spent = 0;
	int rc = 0;

	for (int i = 0; rc == 0 && i < WARM_MAX && (i < WARM_MIN || spent < WARM_MS); i++) {
		rc = hp_session_run(s);
		hp_session_stats(s, &st);
		spent += st.ms;
	}
	return rc;
}

/* Run one model spec "PATH[:NAME=DIMS]"; adds a JSON object to `out`.
 * With fuse_gain the graph as imported is timed too, its runs alternating
 * with the optimised graph's in the same loop. */
static int bench_model(const char *spec, int reps, int threads, int fuse_gain, json_object *out)
{
	char path[4096], *colon, inpath[] = "/tmp/hpdlf-bench-XXXXXX.npy";
	struct hp_graph *g = NULL, *g0 = NULL;
	struct hp_session *s = NULL, *s0 = NULL;
	struct hp_tensor x = { 0 };
	struct hp_run_stats st, st0;
	double *ms = calloc((size_t)reps, sizeof *ms), *ms0 = calloc((size_t)reps, sizeof *ms0), med, ort, ort_cpu = -1;
	double *cpu = calloc((size_t)reps, sizeof *cpu), *cpu0 = calloc((size_t)reps, sizeof *cpu0);
	int rc, fd;

	snprintf(path, sizeof path, "%s", spec);
	colon = strrchr(path, ':');
	if (colon && strchr(colon, '='))
		*colon++ = 0;
	else
		colon = NULL;
	rc = open_model(path, colon, !getenv("HPDLF_BENCH_NO_FUSE"), threads, &g, &s);
	if (rc == 0 && fuse_gain)
		rc = open_model(path, colon, 0, threads, &g0, &s0);
	if (rc == 0)
		rc = set_input(g, s, &x);
	if (rc == 0 && s0)
		rc = set_input(g0, s0, &x);
	if (rc == 0)
		rc = warm_up(s);
	if (rc == 0 && s0)
		rc = warm_up(s0);
	for (int i = 0; rc == 0 && i < reps; i++) {
		rc = timed(s, &ms[i], &cpu[i], &st);
		if (rc == 0 && s0)
			rc = timed(s0, &ms0[i], &cpu0[i], &st0);
	}
	if (rc < 0) {
		fprintf(stderr, "hpdlf-bench-infer: %s\n", hp_errmsg());
		goto out;
	}
	qsort(ms, (size_t)reps, sizeof *ms, cmp);
	qsort(ms0, (size_t)reps, sizeof *ms0, cmp);
	qsort(cpu, (size_t)reps, sizeof *cpu, cmp);
	qsort(cpu0, (size_t)reps, sizeof *cpu0, cmp);
	med = ms[reps / 2];
	fd = mkstemps(inpath, 4);
	if (fd >= 0) {
		close(fd);
		hp_npy_write(inpath, &x);
	}
	ort = fd >= 0 ? ort_ms(path, inpath, reps, threads, &ort_cpu) : -1;
	unlink(inpath);
	json_object *m = json_object_new_object();
	json_object_object_add(m, "model", json_object_new_string(spec));
	json_object_object_add(m, "ms_median", json_object_new_double(med));
	json_object_object_add(m, "ms_min", json_object_new_double(ms[0]));
	json_object_object_add(m, "gflops", json_object_new_double(st.flops / med / 1e6));
	if (s0) {
		json_object_object_add(m, "unfused_ms_median", json_object_new_double(ms0[reps / 2]));
		json_object_object_add(m, "unfused_ms_min", json_object_new_double(ms0[0]));
		json_object_object_add(m, "fuse_speedup", json_object_new_double(ms0[reps / 2] / med));
		json_object_object_add(m, "cpu_ms_median", json_object_new_double(cpu[reps / 2]));
		json_object_object_add(m, "unfused_cpu_ms_median", json_object_new_double(cpu0[reps / 2]));
		json_object_object_add(m, "fuse_cpu_speedup", json_object_new_double(cpu0[reps / 2] / cpu[reps / 2]));
		fprintf(stderr, "%s: as imported %.3f ms median (min %.3f, CPU %.3f), optimised %.3f (min %.3f, CPU %.3f): "
			"speed-up %.3f (CPU time %.3f)\n", spec, ms0[reps / 2], ms0[0], cpu0[reps / 2], med, ms[0],
			cpu[reps / 2], ms0[reps / 2] / med, cpu0[reps / 2] / cpu[reps / 2]);
	}
	if (ort > 0) {
		json_object_object_add(m, "ort_ms_median", json_object_new_double(ort));
		json_object_object_add(m, "ratio_vs_ort", json_object_new_double(med / ort));
		if (s0)
			json_object_object_add(m, "unfused_ratio_vs_ort", json_object_new_double(ms0[reps / 2] / ort));
		if (ort_cpu >= 0) /* about the threads when ORT's workers spun */
			json_object_object_add(m, "ort_cpu_per_wall", json_object_new_double(ort_cpu));
	}
	fprintf(stderr, "%s: %.3f ms median (min %.3f), %.1f GFLOP/s%s", spec, med, ms[0], st.flops / med / 1e6,
		ort > 0 ? "" : ", ONNX Runtime not found\n");
	if (ort > 0)
		fprintf(stderr, ", ONNX Runtime %.3f ms: ratio %.3f\n", ort, med / ort);
	json_object_array_add(out, m);
out:
	hp_tensor_free(&x);
	hp_session_destroy(s);
	hp_session_destroy(s0);
	hp_graph_free(g);
	hp_graph_free(g0);
	free(ms);
	free(ms0);
	free(cpu);
	free(cpu0);
	return rc;
}

static int make_default(char *dir, char *specs[2])
{
	char cmd[8192];

	if (!mkdtemp(dir))
		return -errno;
	snprintf(cmd, sizeof cmd,
		 "/usr/bin/python3 %s/tools/make_unet3d.py %s/unet3d.onnx >/dev/null && "
		 "/usr/bin/python3 %s/tools/make_unet3d.py %s/unet3d_tiny.onnx --base 4 --levels 2 >/dev/null",
		 HPDLF_SOURCE_DIR, dir, HPDLF_SOURCE_DIR, dir);
	if (system(cmd) != 0)
		return -EIO;
	if (asprintf(&specs[0], "%s/unet3d.onnx:input=1x1x48x48x48", dir) < 0 ||
	    asprintf(&specs[1], "%s/unet3d_tiny.onnx:input=2x1x16x16x16", dir) < 0)
		return -ENOMEM;
	return 0;
}

int main(int argc, char **argv)
{
	int reps = 10, threads = 0, o, rc = 0, nspec = 0, fuse_gain = 0;
	char dir[] = "/tmp/hpdlf-bench-models-XXXXXX", *defaults[2] = { 0 }, **specs = argv;
	json_object *models = json_object_new_array(), *top = json_object_new_object();

	hp_blas_quiet_workers(); /* as hpdlf-exec does */

	for (o = 1; o < argc; o++) {
		if (!strcmp(argv[o], "--reps") && o + 1 < argc)
			reps = atoi(argv[++o]);
		else if (!strcmp(argv[o], "--threads") && o + 1 < argc)
			threads = atoi(argv[++o]);
		else if (!strcmp(argv[o], "--fuse-gain"))
			fuse_gain = 1;
		else
			specs[nspec++] = argv[o];
	}
	if (reps < 1)
		reps = 1;
	if (!threads)
		threads = (int)sysconf(_SC_NPROCESSORS_ONLN);
	if (!nspec) {
		if (make_default(dir, defaults) < 0) {
			fprintf(stderr, "hpdlf-bench-infer: cannot generate the default models (python3 with onnx)\n");
			return 1;
		}
		specs = defaults;
		nspec = 2;
	}
	for (int i = 0; i < nspec && rc == 0; i++)
		rc = bench_model(specs[i], reps, threads, fuse_gain, models);
	json_object_object_add(top, "bench", json_object_new_string("infer"));
	json_object_object_add(top, "threads", json_object_new_int(threads));
	json_object_object_add(top, "models", models);
	printf("%s\n", json_object_to_json_string_ext(top, JSON_C_TO_STRING_PLAIN));
	json_object_put(top);
	if (defaults[0]) {
		char cmd[256];
		snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
		if (system(cmd) != 0)
			fprintf(stderr, "hpdlf-bench-infer: could not remove %s\n", dir);
	}
	return rc < 0 ? 1 : 0;
}
