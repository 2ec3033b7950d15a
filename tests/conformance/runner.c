/* Conformance runner over ONNX's own backend node tests.
 *
 *   hpdlf-conformance CASES_DIR [--list-failures] [--only SUBSTR] [--threads N]
 *
 * CASES_DIR is what gen_cases.py wrote: one folder per case with model.onnx,
 * .npy tensors and a manifest.  Each case runs in a child process (a crash
 * or hang fails that case, not the run) and prints one line:
 *
 *   PASS|FAIL|UNSUPPORTED|OUTOFSCOPE|SKIP  test_name  [reason]
 *
 * then a total.  A case whose operators are all in the supported list below
 * must pass; a case using other operators passes or is reported unsupported
 * (refused with HP_EUNSUPPORTED, or HP_ENOTCONST for an input the runner
 * does not bind as a constant), but a wrong result is a failure whatever
 * the operator.  SKIP: the case's data is not tensors NumPy can hold
 * (strings, sequences, optionals).  OUTOFSCOPE: a case refused as
 * unsupported that gen_cases.py marked out of scope (training-only
 * operators, random draws); one that runs must still pass.  The total
 * counts both kinds as out of scope, by category, and the pass rate over
 * all cases and over those in scope.  Exit status 1
 * when any case failed.
 */
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "hpdlf/error.h"
#include "hpdlf/exec.h"
#include "hpdlf/graph.h"
#include "hpdlf/tensor.h"

/* The operators the foundation issue lists: every case of these must pass. */
static const char *const listed_ops[] = {
	"Conv", "ConvTranspose", "Gemm", "MatMul", "Relu", "LeakyRelu", "Sigmoid", "Tanh", "HardSigmoid",
	"HardSwish", "Clip", "Erf", "Exp", "Log", "Neg", "Add", "Sub", "Mul", "Div", "Pow", "Sqrt",
	"MaxPool", "AveragePool", "GlobalAveragePool", "BatchNormalization", "LayerNormalization",
	"Softmax", "LogSoftmax", "Concat", "Split", "Slice", "Reshape", "Flatten", "Transpose", "Squeeze",
	"Unsqueeze", "Gather", "Shape", "Cast", "Constant", "ConstantOfShape", "Range", "Identity",
	"Dropout", "ReduceMean", "ReduceSum", "Resize", "Where", "Expand", NULL,
};

#define CASE_TIMEOUT_S 60
#define RTOL 1e-3
#define ATOL 1e-7

enum verdict { V_PASS = 0, V_FAIL, V_UNSUPPORTED, V_SKIP, V_OUT_OF_SCOPE, V_COUNT };
static const char *const verdict_name[] = { "PASS", "FAIL", "UNSUPPORTED", "SKIP", "OUTOFSCOPE" };

struct entry {
	char kind[8];
	int set;
	char name[256];
	char file[256];
};

struct manifest {
	int n, nsets;
	struct entry e[64];
	char skip[256];
	char scope[256]; /* why the case is out of scope, or "" */
};

static int threads = 1;
/* 0: bind integer and one-element inputs as constants (as hpdlf-exec
 * does); 1: also every input of at most 64 elements, the retry hpdlf-exec
 * makes when an operator needs a constant (Resize's scales). */
static int bind_level;

static int read_manifest(const char *dir, struct manifest *m)
{
	char path[4096], line[1024];
	FILE *f;

	memset(m, 0, sizeof *m);
	snprintf(path, sizeof path, "%s/manifest", dir);
	if (!(f = fopen(path, "r")))
		return -errno;
	while (fgets(line, sizeof line, f)) {
		line[strcspn(line, "\n")] = 0;
		if (!strncmp(line, "skip ", 5)) {
			snprintf(m->skip, sizeof m->skip, "%s", line + 5);
			continue;
		}
		if (!strncmp(line, "outofscope ", 11)) {
			snprintf(m->scope, sizeof m->scope, "%s", line + 11);
			continue;
		}
		if (!line[0] || m->n == (int)(sizeof m->e / sizeof m->e[0]))
			continue;
		struct entry *e = &m->e[m->n];
		if (sscanf(line, "%7s %d %255s %255s", e->kind, &e->set, e->name, e->file) == 4) {
			m->n++;
			if (e->set + 1 > m->nsets)
				m->nsets = e->set + 1;
		}
	}
	fclose(f);
	return 0;
}

static int is_listed(const char *op)
{
	for (int i = 0; listed_ops[i]; i++)
		if (!strcmp(listed_ops[i], op))
			return 1;
	return 0;
}

/* Compare an output with its reference: ONNX's backend tolerance for
 * floats (|a - b| <= atol + rtol |b|, NaN equals NaN), exact otherwise. */
static int compare(const struct hp_tensor *got, const struct hp_tensor *want, char *why, size_t len)
{
	char a[128], b[128];
	int64_t n = hp_shape_numel(&want->shape);

	/* NumPy has no bfloat16: the reference holds its bits as uint16. */
	enum hp_dtype gdt = got->dtype == HP_BF16 && want->dtype == HP_U16 ? HP_U16 : got->dtype;

	if (gdt != want->dtype || !hp_shape_equal(&got->shape, &want->shape)) {
		snprintf(why, len, "got %s %s, expected %s %s", hp_dtype_name(got->dtype),
			 hp_shape_str(&got->shape, a, sizeof a), hp_dtype_name(want->dtype),
			 hp_shape_str(&want->shape, b, sizeof b));
		return -1;
	}
	for (int64_t i = 0; i < n; i++) {
		double x, y;
		switch (want->dtype) {
		case HP_F32: x = ((const float *)got->data)[i], y = ((const float *)want->data)[i]; break;
		case HP_F64: x = ((const double *)got->data)[i], y = ((const double *)want->data)[i]; break;
		default: {
			size_t es = hp_dtype_size(want->dtype);
			if (memcmp((const char *)got->data + i * es, (const char *)want->data + i * es, es)) {
				snprintf(why, len, "element %lld differs (exact %s compare)", (long long)i,
					 hp_dtype_name(want->dtype));
				return -1;
			}
			continue;
		}
		}
		if (isnan(x) && isnan(y))
			continue;
		if (isinf(y) && x == y)
			continue;
		if (!(fabs(x - y) <= ATOL + RTOL * fabs(y))) {
			snprintf(why, len, "element %lld: got %.9g, expected %.9g", (long long)i, x, y);
			return -1;
		}
	}
	return 0;
}

static int set_inputs(struct hp_graph *g, const char *dir, const struct manifest *m, int set,
		      struct hp_tensor *ins, int *nin)
{
	char path[4096];

	*nin = 0;
	for (int i = 0; i < m->n; i++) {
		const struct entry *e = &m->e[i];
		if (e->set != set || strcmp(e->kind, "input"))
			continue;
		snprintf(path, sizeof path, "%s/%s", dir, e->file);
		struct hp_tensor *t = &ins[*nin];
		int rc = hp_npy_read(path, t);
		if (rc < 0)
			return rc;
		(*nin)++;
		/* integer inputs (shape arguments, indices) and scalars (Range
		 * bounds, Clip limits): bind them so
		 * shape-setting operators see constants, as hpdlf-exec does */
		int64_t numel = hp_shape_numel(&t->shape);
		if (numel <= 1 || ((t->dtype == HP_I64 || t->dtype == HP_I32 || bind_level) && numel <= 64))
			rc = hp_graph_bind_input(g, e->name, t);
		else
			rc = hp_graph_set_input_shape(g, e->name, &t->shape);
		if (rc < 0)
			return rc;
	}
	return 0;
}

/* Run one data set: load, fix input shapes, infer, run, compare. */
static enum verdict run_set(const char *dir, const struct manifest *m, int set, char *why, size_t len)
{
	char path[4096];
	struct hp_graph *g = NULL;
	struct hp_session *s = NULL;
	struct hp_tensor ins[64] = { 0 };
	struct hp_exec_opts o;
	enum verdict v = V_FAIL;
	int nin = 0, rc;

	snprintf(path, sizeof path, "%s/model.onnx", dir);
	rc = hp_graph_load(path, &g);
	if (rc == 0)
		rc = set_inputs(g, dir, m, set, ins, &nin);
	if (rc == 0)
		rc = hp_graph_infer(g);
	hp_exec_opts_init(&o, sizeof o);
	o.threads = threads;
	if (rc == 0)
		rc = hp_session_create(g, &o, &s);
	for (int i = 0, k = 0; rc == 0 && i < m->n; i++)
		if (m->e[i].set == set && !strcmp(m->e[i].kind, "input")) {
			int v = hp_graph_find_value(g, m->e[i].name);
			if (g->values[v].kind == HP_VALUE_INPUT)
				rc = hp_session_set_input(s, m->e[i].name, &ins[k]);
			k++;
		}
	if (rc == 0)
		rc = hp_session_run(s);
	for (int i = 0; rc == 0 && i < m->n; i++) {
		const struct entry *e = &m->e[i];
		struct hp_tensor got = { 0 }, want = { 0 };
		if (e->set != set || strcmp(e->kind, "output"))
			continue;
		snprintf(path, sizeof path, "%s/%s", dir, e->file);
		rc = hp_npy_read(path, &want);
		if (rc == 0)
			rc = hp_session_get_output(s, e->name, &got);
		if (rc == 0 && compare(&got, &want, why, len) < 0) {
			char tmp[512];
			snprintf(tmp, sizeof tmp, "output '%s': %s", e->name, why);
			snprintf(why, len, "%s", tmp);
			rc = 1;
		}
		hp_tensor_free(&got);
		hp_tensor_free(&want);
	}
	if (rc == 0)
		v = V_PASS;
	else if (rc < 0) {
		snprintf(why, len, "%s", hp_errmsg()[0] ? hp_errmsg() : hp_strerror(rc));
		v = rc == HP_EUNSUPPORTED || rc == HP_ENOTCONST ? V_UNSUPPORTED : V_FAIL;
	}
	for (int i = 0; i < nin; i++)
		hp_tensor_free(&ins[i]);
	hp_session_destroy(s);
	hp_graph_free(g);
	return v;
}

/* Whether every operator of the case's model is in the listed set. */
static int case_listed(const char *dir)
{
	char path[4096];
	struct hp_graph *g;
	int listed = 1;

	snprintf(path, sizeof path, "%s/model.onnx", dir);
	if (hp_graph_load(path, &g) < 0)
		return 0;
	for (int i = 0; i < g->nnodes; i++)
		if (g->nodes[i].domain[0] || !is_listed(g->nodes[i].op_type))
			listed = 0;
	hp_graph_free(g);
	return listed;
}

static enum verdict run_case(const char *dir, char *why, size_t len)
{
	struct manifest m;
	enum verdict v = V_PASS;

	if (read_manifest(dir, &m) < 0) {
		snprintf(why, len, "no manifest");
		return V_FAIL;
	}
	if (m.skip[0]) {
		snprintf(why, len, "%s", m.skip);
		return V_SKIP;
	}
	for (int s = 0; s < m.nsets && v == V_PASS; s++) {
		bind_level = 0;
		v = run_set(dir, &m, s, why, len);
		if (v == V_UNSUPPORTED && strstr(why, "compile-time constant")) {
			bind_level = 1;
			v = run_set(dir, &m, s, why, len);
		}
	}
	if (v == V_UNSUPPORTED && case_listed(dir))
		v = V_FAIL;
	if (v == V_UNSUPPORTED && m.scope[0]) {
		snprintf(why, len, "%s", m.scope);
		v = V_OUT_OF_SCOPE;
	}
	return v;
}

/* Run a case in a child so that a crash or a hang is that case's failure. */
static enum verdict run_isolated(const char *dir, char *why, size_t len)
{
	int fd[2], status;
	pid_t pid;
	ssize_t got;

	if (pipe(fd) < 0)
		return run_case(dir, why, len);
	pid = fork();
	if (pid == 0) {
		close(fd[0]);
		alarm(CASE_TIMEOUT_S);
		why[0] = 0;
		unsigned char v = (unsigned char)run_case(dir, why, len);
		if (write(fd[1], &v, 1) != 1 || write(fd[1], why, strlen(why)) < 0)
			_exit(3);
		_exit(0);
	}
	close(fd[1]);
	unsigned char v = V_FAIL;
	got = read(fd[0], &v, 1);
	ssize_t w = got == 1 ? read(fd[0], why, len - 1) : 0;
	why[w > 0 ? w : 0] = 0;
	close(fd[0]);
	waitpid(pid, &status, 0);
	if (got != 1) {
		if (WIFSIGNALED(status))
			snprintf(why, len, "crashed: %s", strsignal(WTERMSIG(status)));
		else
			snprintf(why, len, "child exited with status %d", WEXITSTATUS(status));
		return V_FAIL;
	}
	return v < V_COUNT ? (enum verdict)v : V_FAIL;
}

/* Why a case's data is out of scope (gen_cases.py's skip reasons): a
 * tensor of strings (NumPy dtype object), a sequence or optional (not a
 * tensor), or other data it could not convert. */
enum { SK_STRING, SK_SEQUENCE, SK_OTHER, SK_COUNT };

static int skip_kind(const char *why)
{
	if (strstr(why, "dtype object"))
		return SK_STRING;
	return strstr(why, "not a tensor") ? SK_SEQUENCE : SK_OTHER;
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

int main(int argc, char **argv)
{
	const char *only = NULL, *root = NULL;
	int count[V_COUNT] = { 0 }, skips[SK_COUNT] = { 0 }, listed_total = 0, listed_pass = 0, listed_skip = 0, n = 0;
	char **names = NULL;
	struct dirent *de;
	DIR *d;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--only") && i + 1 < argc)
			only = argv[++i];
		else if (!strcmp(argv[i], "--threads") && i + 1 < argc)
			threads = atoi(argv[++i]);
		else if (argv[i][0] != '-' && !root)
			root = argv[i];
		else {
			fprintf(stderr, "usage: hpdlf-conformance CASES_DIR [--only SUBSTR] [--threads N]\n");
			return 2;
		}
	}
	if (!root || !(d = opendir(root))) {
		fprintf(stderr, "hpdlf-conformance: %s: %s\n", root ? root : "no cases directory given",
			root ? strerror(errno) : "see --help");
		return 2;
	}
	while ((de = readdir(d)))
		if (de->d_name[0] != '.' && (!only || strstr(de->d_name, only))) {
			names = realloc(names, (size_t)(n + 1) * sizeof *names);
			names[n++] = strdup(de->d_name);
		}
	closedir(d);
	qsort(names, (size_t)n, sizeof *names, cmp_str);
	for (int i = 0; i < n; i++) {
		char dir[4096], why[1024] = "";
		snprintf(dir, sizeof dir, "%s/%s", root, names[i]);
		enum verdict v = run_isolated(dir, why, sizeof why);
		int listed = case_listed(dir);
		count[v]++;
		if (v == V_SKIP)
			skips[skip_kind(why)]++;
		listed_total += listed;
		listed_pass += listed && v == V_PASS;
		listed_skip += listed && v == V_SKIP;
		printf("%-11s %s%s%s%s\n", verdict_name[v], names[i], listed ? " [listed]" : "", why[0] ? ": " : "", why);
		fflush(stdout);
		free(names[i]);
	}
	free(names);
	int scope = count[V_OUT_OF_SCOPE] + count[V_SKIP];
	printf("conformance: %d cases: %d passed (%.1f%%), %d failed, %d unsupported, %d out of scope "
	       "(%d training-only or random operators, %d strings, %d sequences or optionals, %d other data); "
	       "in scope %d/%d passed (%.1f%%); cases of listed ops: %d/%d passed, %d out of scope\n",
	       n, count[V_PASS], n ? 100.0 * count[V_PASS] / n : 0.0, count[V_FAIL], count[V_UNSUPPORTED], scope,
	       count[V_OUT_OF_SCOPE], skips[SK_STRING], skips[SK_SEQUENCE], skips[SK_OTHER], count[V_PASS], n - scope,
	       n - scope ? 100.0 * count[V_PASS] / (n - scope) : 0.0, listed_pass, listed_total, listed_skip);
	return count[V_FAIL] ? 1 : 0;
}
