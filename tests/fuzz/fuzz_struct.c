/* Structure-aware fuzzing of import, inference and .npy reading (issue 23,
 * item 1).  Each case is built from a byte string: one operator (Reshape,
 * Pad, Tile, Slice, Range, Conv, ConvTranspose, pools, Gather, ...) whose
 * attributes, constant inputs, initializer shapes and input dims are drawn
 * mostly small and often extreme (0, -1, 2^31, 2^32, 2^56, 2^62,
 * INT64_MAX, INT64_MIN, ...), written as a valid ONNX model, loaded,
 * given an input shape as --shape would (hp_shape_parse), inferred and, if
 * it is small enough to run in a few milliseconds, run in core; then a
 * .npy file with an extreme header is read.  Whatever is refused must be
 * refused with an error; nothing may crash, overflow or hang (alarm 20 s).
 * Built in the sanitizer build (meson -Db_sanitize=address,undefined) the
 * same cases check every access.
 *
 *   fuzz_struct N [SEED]        N cases generated from SEED (default 1)
 *   fuzz_struct --replay FILE...  the cases held in the files (their bytes:
 *                                 regress_struct/ keeps those that crashed)
 *
 * A crash names its case ("case N of seed S") so it can be replayed: the
 * case's bytes are the generator's, written with --write-case. */
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "hpdlf/error.h"
#include "hpdlf/exec.h"
#include "hpdlf/graph.h"
#include "hpdlf/tensor.h"
#include "fuzz_struct.h"

static long g_case = -1;
static uint64_t g_seed;

static void on_crash(int sig)
{
	char msg[128];
	int n = snprintf(msg, sizeof msg, "\nfuzz_struct: signal %d in case %ld of seed %llu\n", sig, g_case,
			 (unsigned long long)g_seed);
	if (write(2, msg, (size_t)n) < 0)
		_exit(127);
	signal(sig, SIG_DFL);
	raise(sig);
}

struct counts {
	long cases, loaded, inferred, ran, refused, npy_ok, npy_refused, shapes;
};

static struct counts g_counts;

static int format_counts(char *buf, size_t len, const struct counts *c)
{
	return snprintf(buf, len, "fuzz_struct: %ld cases: %ld models loaded, %ld inferred, %ld ran, %ld refused; "
			"--shape applied %ld; .npy %ld read, %ld refused\n", c->cases, c->loaded, c->inferred, c->ran,
			c->refused, c->shapes, c->npy_ok, c->npy_refused);
}

static void print_counts(const struct counts *c)
{
	char buf[512];

	if (format_counts(buf, sizeof buf, c) > 0)
		fputs(buf, stdout);
	fflush(stdout);
}

/* SIGINT/SIGTERM: a long run stopped on time still reports its figures
 * (with write(): stdio may be inside a call). */
static void on_stop(int sig)
{
	char buf[512];
	int n = format_counts(buf, sizeof buf, &g_counts);

	(void)sig;
	if (n > 0 && write(1, buf, (size_t)n) < 0)
		_exit(1);
	_exit(0);
}

/* The values inference would hold: small enough to run in milliseconds? */
static int small_enough(const struct hp_graph *g)
{
	for (int v = 0; v < g->nvalues; v++) {
		int64_t n = hp_shape_numel(&g->values[v].shape);
		if (n < 0 || n > 4096)
			return 0;
	}
	return 1;
}

/* Fill every graph input: floats from the bytes, integers drawn as the
 * attributes are (extreme ones among them: Gather indices, shapes). */
static int feed(struct fz_rd *r, struct hp_session *s, const struct hp_graph *g)
{
	for (int i = 0; i < g->ninputs; i++) {
		const struct hp_value *val = &g->values[g->inputs[i]];
		struct hp_tensor t;
		int rc = hp_tensor_alloc(&t, val->dtype, &val->shape);
		if (rc < 0)
			return rc;
		int64_t n = hp_shape_numel(&val->shape);
		for (int64_t k = 0; k < n; k++) {
			if (val->dtype == HP_I64)
				((int64_t *)t.data)[k] = fz_int(r);
			else if (val->dtype == HP_F32)
				((float *)t.data)[k] = (float)fz_int(r) / 4.0f;
			else
				((uint8_t *)t.data)[k * hp_dtype_size(val->dtype)] = fz_byte(r);
		}
		rc = hp_session_set_input(s, val->name, &t);
		hp_tensor_free(&t);
		if (rc < 0)
			return rc;
	}
	return 0;
}

static void run(struct fz_rd *r, struct hp_graph *g, struct counts *c)
{
	struct hp_exec_opts o;
	struct hp_session *s;

	hp_exec_opts_init(&o, sizeof o);
	o.threads = 1;
	if (hp_session_create(g, &o, &s) < 0) {
		c->refused++;
		return;
	}
	if (feed(r, s, g) == 0 && hp_session_run(s) == 0) {
		c->ran++;
		for (int i = 0; i < g->noutputs; i++) {
			struct hp_tensor y;
			if (hp_session_get_output(s, g->values[g->outputs[i]].name, &y) == 0)
				hp_tensor_free(&y);
		}
	} else {
		c->refused++;
	}
	hp_session_destroy(s);
}

static void one_model(struct fz_rd *r, struct counts *c)
{
	struct fz_buf model = { 0 };
	struct hp_graph *g;

	fz_model(r, &model);
	if (hp_graph_load_buffer(model.p, model.n, "fuzz.onnx", NULL, &g) < 0) {
		c->refused++;
		free(model.p);
		return;
	}
	c->loaded++;
	if (fz_byte(r) < 64) { /* --shape x=... with extreme dims */
		char text[256];
		struct hp_shape sh;
		fz_shape_text(r, text, sizeof text);
		if (hp_shape_parse(text, &sh) == 0 && hp_graph_set_input_shape(g, "x", &sh) == 0)
			c->shapes++;
	}
	if (hp_graph_infer(g) == 0) {
		c->inferred++;
		if (small_enough(g))
			run(r, g, c);
	} else {
		c->refused++;
	}
	hp_graph_free(g);
	free(model.p);
}

static void one_npy(struct fz_rd *r, const char *path, struct counts *c)
{
	struct fz_buf npy = { 0 };
	struct hp_tensor t;

	fz_npy(r, &npy);
	FILE *f = fopen(path, "wb");
	if (!f || fwrite(npy.p, 1, npy.n, f) != npy.n || fclose(f)) {
		perror(path);
		exit(2);
	}
	free(npy.p);
	if (hp_npy_read(path, &t) == 0) {
		int64_t n = hp_shape_numel(&t.shape);
		if (n < 0 || (uint64_t)n * hp_dtype_size(t.dtype) > npy.n) /* read more than the file held */
			abort();
		hp_tensor_free(&t);
		c->npy_ok++;
	} else {
		c->npy_refused++;
	}
}

static void one(const uint8_t *data, size_t size, const char *npy_path, struct counts *c)
{
	struct fz_rd r = { data, size, 0 };

	alarm(20);
	one_model(&r, c);
	one_npy(&r, npy_path, c);
	alarm(0);
	c->cases++;
}

int main(int argc, char **argv)
{
	struct counts *c = &g_counts;
	char npy[] = "/tmp/hpdlf-fuzz-npy-XXXXXX";
	const char *tmpdir = getenv("TMPDIR");
	char path[4096];
	uint8_t buf[FZ_CASE_BYTES];

	if (argc < 2) {
		fprintf(stderr, "usage: fuzz_struct N [SEED] | --replay FILE | --write-case N SEED FILE\n");
		return 2;
	}
	snprintf(path, sizeof path, "%s/%s", tmpdir ? tmpdir : "/tmp", strrchr(npy, '/') + 1);
	int fd = mkstemp(path), anon = 0;
	if (fd < 0) {
		perror(path);
		return 2;
	}
	/* Unlinked at once and reached through /proc/self/fd (fopen and
	 * hp_npy_read follow that link to the open file): a crash, or a
	 * sanitizer's report, which exits without running our handlers,
	 * leaves no hpdlf-fuzz-npy-* file behind. */
	char fdpath[64];
	snprintf(fdpath, sizeof fdpath, "/proc/self/fd/%d", fd);
	if (access(fdpath, F_OK) == 0 && unlink(path) == 0) {
		snprintf(path, sizeof path, "%s", fdpath);
		anon = 1;
	} else {
		close(fd);
	}
	signal(SIGSEGV, on_crash);
	signal(SIGABRT, on_crash);
	signal(SIGALRM, on_crash);
	signal(SIGFPE, on_crash);
	signal(SIGINT, on_stop);
	signal(SIGTERM, on_stop);
	if (!strcmp(argv[1], "--replay") && argc > 2) {
		for (int i = 2; i < argc; i++) {
			FILE *f = fopen(argv[i], "rb");
			if (!f) {
				perror(argv[i]);
				return 2;
			}
			size_t n = fread(buf, 1, sizeof buf, f);
			fclose(f);
			g_case = i - 2;
			one(buf, n, path, c);
		}
	} else if (!strcmp(argv[1], "--write-case") && argc > 4) {
		fz_case_bytes(strtoull(argv[3], NULL, 10), strtol(argv[2], NULL, 10), buf);
		FILE *f = fopen(argv[4], "wb");
		if (!f || fwrite(buf, 1, sizeof buf, f) != sizeof buf || fclose(f))
			return 2;
	} else {
		long n = strtol(argv[1], NULL, 10);
		g_seed = argc > 2 ? strtoull(argv[2], NULL, 10) : 1;
		for (g_case = 0; g_case < n; g_case++) {
			fz_case_bytes(g_seed, g_case, buf);
			one(buf, sizeof buf, path, c);
			if ((g_case + 1) % 10000 == 0)
				print_counts(c);
		}
	}
	if (!anon)
		unlink(path);
	print_counts(c);
	return 0;
}
