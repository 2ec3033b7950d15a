/* ONNX importer: values, nodes, attributes, initializer bytes, shapes,
 * normalized operator forms and errors, checked against models and expected
 * data written at test time by make_import_models.py (onnx.helper + numpy).
 * Kernels are not needed: nothing here executes a node.
 *
 * argv[1]: the generator script; env HPDLF_PYTHON: python3 with onnx/numpy. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <inttypes.h>
#include <math.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "hpdlf/error.h"
#include "hpdlf/graph.h"
#include "hpdlf/tensor.h"

extern char **environ;

static char dir[] = "/tmp/hpdlf-test-import-XXXXXX";
static const char *script;

#ifdef HPDLF_SANITIZE
#define TIME_LIMIT 5.0 /* sanitizers slow everything down; memory is still checked */
#else
#define TIME_LIMIT 0.5
#endif

static const char *path_of(const char *name)
{
	static char buf[4][512];
	static int k;

	k = (k + 1) % 4;
	snprintf(buf[k], sizeof buf[k], "%s/%s", dir, name);
	return buf[k];
}

static int run_script(void)
{
	const char *py = getenv("HPDLF_PYTHON") ? getenv("HPDLF_PYTHON") : "python3";
	char *argv[] = { (char *)py, (char *)script, dir, "--big", NULL };
	pid_t pid;
	int st;

	if (posix_spawnp(&pid, py, NULL, NULL, argv, environ) != 0)
		return -1;
	if (waitpid(pid, &st, 0) < 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
		return -1;
	return 0;
}

static int rm_one(const char *p, const struct stat *sb, int flag, struct FTW *ftw)
{
	(void)sb;
	(void)flag;
	(void)ftw;
	return remove(p);
}

static int group_setup(void **state)
{
	(void)state;
	if (!mkdtemp(dir))
		return -1;
	return run_script();
}

static int group_teardown(void **state)
{
	(void)state;
	return nftw(dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

static struct hp_graph *load(const char *name)
{
	struct hp_graph *g = NULL;
	int rc = hp_graph_load(path_of(name), &g);

	if (rc < 0)
		fail_msg("loading %s: %d %s", name, rc, hp_errmsg());
	return g;
}

static int find(const struct hp_graph *g, const char *name)
{
	int v = hp_graph_find_value(g, name);

	if (v < 0)
		fail_msg("no value '%s'", name);
	return v;
}

static const struct hp_node *find_node(const struct hp_graph *g, const char *name)
{
	for (int i = 0; i < g->nnodes; i++)
		if (!strcmp(g->nodes[i].name, name))
			return &g->nodes[i];
	fail_msg("no node '%s'", name);
	return NULL;
}

/* Structural invariants every imported graph must hold. */
static void check_sane(const struct hp_graph *g)
{
	for (int i = 0; i < g->nvalues; i++)
		for (int j = i + 1; j < g->nvalues; j++)
			if (!strcmp(g->values[i].name, g->values[j].name))
				fail_msg("value name '%s' twice", g->values[i].name);
	for (int i = 0; i < g->nnodes; i++) {
		const struct hp_node *n = &g->nodes[i];
		assert_string_not_equal(n->op_type, "Constant");
		for (int j = 0; j < n->ninputs; j++) {
			assert_true(n->inputs[j] >= -1 && n->inputs[j] < g->nvalues);
			if (n->inputs[j] >= 0 && g->values[n->inputs[j]].producer >= 0)
				assert_true(g->values[n->inputs[j]].producer < i); /* sorted */
		}
		for (int j = 0; j < n->noutputs; j++)
			if (n->outputs[j] >= 0)
				assert_int_equal(g->values[n->outputs[j]].producer, i);
	}
	for (int i = 0; i < g->noutputs; i++)
		assert_true(g->values[g->outputs[i]].is_output);
}

/* The value's dtype, shape and bytes (via hp_graph_read_init) equal NAME.npy. */
static void check_bytes(const struct hp_graph *g, int v, const char *npy)
{
	const struct hp_value *val = &g->values[v];
	struct hp_tensor ref;
	void *got;
	size_t n;

	assert_int_equal(hp_npy_read(path_of(npy), &ref), 0);
	assert_int_equal(val->dtype, ref.dtype);
	if (!hp_shape_equal(&val->shape, &ref.shape))
		fail_msg("%s: shape differs from %s", val->name, npy);
	n = hp_tensor_bytes(&ref);
	got = malloc(n + 1);
	assert_non_null(got);
	assert_int_equal(hp_graph_read_init(g, v, got), 0);
	assert_memory_equal(got, ref.data, n);
	if (val->data)
		assert_memory_equal(val->data, ref.data, n);
	free(got);
	hp_tensor_free(&ref);
}

/* Bytes at [off, off+n) of a file equal NAME.npy's data: the recorded offset
 * is where the data really is. */
static void check_file_range(const char *file, uint64_t off, const char *npy)
{
	struct hp_tensor ref;
	size_t n;
	char *buf;
	int fd = open(file, O_RDONLY);

	assert_true(fd >= 0);
	assert_int_equal(hp_npy_read(path_of(npy), &ref), 0);
	n = hp_tensor_bytes(&ref);
	buf = malloc(n + 1);
	assert_int_equal(pread(fd, buf, n, (off_t)off), (ssize_t)n);
	assert_memory_equal(buf, ref.data, n);
	free(buf);
	close(fd);
	hp_tensor_free(&ref);
}

static FILE *open_list(const char *name)
{
	FILE *f = fopen(path_of(name), "r");

	assert_non_null(f);
	return f;
}

static void test_initializers(void **state)
{
	struct hp_graph *g = load("inits.onnx");
	FILE *f = open_list("inits.txt");
	char name[128], kind[16], npy[160];
	int count = 0, f16;

	(void)state;
	check_sane(g);
	assert_int_equal(g->opset, 13);
	assert_int_equal(g->ninputs, 0);
	while (fscanf(f, "%127s %15s", name, kind) == 2) {
		int v = find(g, name);
		const struct hp_value *val = &g->values[v];

		count++;
		assert_int_equal(val->kind, HP_VALUE_INITIALIZER);
		assert_int_equal(val->trainable, val->dtype == HP_F32);
		snprintf(npy, sizeof npy, "%s.npy", name);
		if (!strcmp(kind, "file")) {
			assert_int_equal(val->src.kind, HP_BLOB_FILE);
			assert_int_equal(val->src.file, 0);
			assert_null(val->data);
			assert_string_equal(g->files[0], path_of("inits.onnx"));
			check_file_range(g->files[0], val->src.offset, npy);
		} else {
			assert_int_equal(val->src.kind, HP_BLOB_MEMORY);
			assert_non_null(val->data);
		}
		check_bytes(g, v, npy);
	}
	fclose(f);
	assert_int_equal(count, 70);
	f16 = find(g, "unused_f16");
	assert_int_equal(g->values[f16].dtype, HP_F16);
	{
		/* float16 weights keep their bytes (nodes read a float32 Cast of them) */
		uint16_t buf[4];
		assert_int_equal(hp_graph_read_init(g, f16, buf), 0);
		for (int i = 0; i < 4; i++)
			assert_int_equal(buf[i], 0x3c00); /* 1.0 */
	}
	assert_int_equal(g->noutputs, count);
	hp_graph_free(g);
}

static void test_external(void **state)
{
	struct hp_graph *g = load("ext.onnx");
	FILE *f = open_list("ext.txt");
	char name[128], kind[16], file[64], npy[160];
	unsigned long long off;
	int count = 0;

	(void)state;
	check_sane(g);
	assert_int_equal(g->nfiles, 3); /* the model, w.bin, sub/w2.bin */
	while (fscanf(f, "%127s %15s %63s %llu", name, kind, file, &off) == 4) {
		int v = find(g, name);
		const struct hp_value *val = &g->values[v];

		count++;
		snprintf(npy, sizeof npy, "%s.npy", name);
		if (!strcmp(kind, "file")) {
			const char *fp;
			assert_int_equal(val->src.kind, HP_BLOB_FILE);
			assert_true(val->src.file >= 0 && val->src.file < g->nfiles);
			fp = g->files[val->src.file];
			if (strcmp(file, "model")) {
				assert_true(val->src.file > 0);
				assert_string_equal(fp + strlen(fp) - strlen(file), file);
				assert_int_equal(fp[strlen(fp) - strlen(file) - 1], '/');
				assert_int_equal(val->src.offset, off);
			} else {
				assert_int_equal(val->src.file, 0);
			}
			check_file_range(fp, val->src.offset, npy);
		} else {
			assert_int_equal(val->src.kind, HP_BLOB_MEMORY);
		}
		check_bytes(g, v, npy);
	}
	fclose(f);
	assert_int_equal(count, 6);
	hp_graph_free(g);
}

static void *slurp(const char *name, size_t *len)
{
	FILE *f = fopen(path_of(name), "rb");
	char *buf;
	long n;

	assert_non_null(f);
	fseek(f, 0, SEEK_END);
	n = ftell(f);
	fseek(f, 0, SEEK_SET);
	buf = malloc((size_t)n + 1);
	assert_int_equal(fread(buf, 1, (size_t)n, f), (size_t)n);
	fclose(f);
	*len = (size_t)n;
	return buf;
}

/* From a buffer: embedded bytes are copied (the buffer may go away). */
static void test_buffer(void **state)
{
	struct hp_graph *g;
	size_t len;
	void *buf = slurp("inits.onnx", &len);
	int v;

	(void)state;
	assert_int_equal(hp_graph_load_buffer(buf, len, "inits.onnx", NULL, &g), 0);
	memset(buf, 0, len);
	free(buf);
	v = find(g, "raw_float32_big");
	assert_int_equal(g->values[v].src.kind, HP_BLOB_MEMORY);
	check_bytes(g, v, "raw_float32_big.npy");
	check_bytes(g, find(g, "typed_int8_rank6"), "typed_int8_rank6.npy");
	hp_graph_free(g);

	buf = slurp("ext.onnx", &len);
	assert_int_equal(hp_graph_load_buffer(buf, len, "ext.onnx", NULL, &g), HP_EUSAGE);
	assert_non_null(strstr(hp_errmsg(), "e_a"));
	assert_int_equal(hp_graph_load_buffer(buf, len, "ext.onnx", dir, &g), 0);
	check_bytes(g, find(g, "e_a"), "e_a.npy");
	check_bytes(g, find(g, "e_d"), "e_d.npy");
	hp_graph_free(g);
	free(buf);
}

static void test_constants(void **state)
{
	static const char *const names[] = { "k_tensor", "k_typed", "k_float", "k_floats", "k_int",
					     "k_ints", "k_empty", "k_bool", "k_scalar_f64", "k_late" };
	struct hp_graph *g = load("consts.onnx");
	char npy[64];

	(void)state;
	check_sane(g);
	assert_int_equal(g->nnodes, 10); /* the Identity nodes; Constants became values */
	for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
		int v = find(g, names[i]);
		assert_int_equal(g->values[v].kind, HP_VALUE_CONSTANT);
		assert_int_equal(g->values[v].producer, -1);
		assert_non_null(g->values[v].data);
		assert_int_equal(g->values[v].nconsumers, 1);
		snprintf(npy, sizeof npy, "%s.npy", names[i]);
		check_bytes(g, v, npy);
	}
	hp_graph_free(g);
}

static void test_attributes(void **state)
{
	struct hp_graph *g = load("attrs.onnx");
	const struct hp_node *n = find_node(g, "allattrs");
	const struct hp_attr *a;
	const int64_t *iv;

	(void)state;
	check_sane(g);
	assert_string_equal(n->domain, "test.domain");
	assert_string_equal(find_node(g, "nosuch")->domain, "");
	assert_true(hp_attr_float(n, "f", 0) == 1.5f);
	assert_int_equal(hp_node_attr(n, "f")->type, HP_ATTR_FLOAT);
	assert_int_equal(hp_attr_int(n, "i", 0), -7);
	a = hp_node_attr(n, "s");
	assert_int_equal(a->type, HP_ATTR_STRING);
	assert_int_equal(a->slen, 11);
	assert_memory_equal(a->s, "hello\0world", 12);
	a = hp_node_attr(n, "t");
	assert_int_equal(a->type, HP_ATTR_TENSOR);
	assert_int_equal(a->t.dtype, HP_F32);
	assert_int_equal(a->t.shape.rank, 1);
	assert_int_equal(a->t.shape.dims[0], 2);
	assert_true(((float *)a->t.data)[0] == 0.5f && ((float *)a->t.data)[1] == -1.0f);
	a = hp_node_attr(n, "floats");
	assert_int_equal(a->type, HP_ATTR_FLOATS);
	assert_int_equal(a->n, 2);
	assert_true(a->floats[0] == 1.0f && a->floats[1] == 2.5f);
	assert_int_equal(hp_attr_ints(n, "ints", &iv), 3);
	assert_int_equal(iv[0], 1);
	assert_int_equal(iv[1], -2);
	assert_int_equal(iv[2], 3000000000LL);
	a = hp_node_attr(n, "strings");
	assert_int_equal(a->type, HP_ATTR_STRINGS);
	assert_int_equal(a->n, 3);
	assert_string_equal(a->strings[0], "a");
	assert_string_equal(a->strings[1], "bc");
	assert_string_equal(a->strings[2], "");
	/* unknown ops load; inference names the first one */
	assert_int_equal(hp_graph_infer(g), HP_EUNSUPPORTED);
	assert_non_null(strstr(hp_errmsg(), "attrs.onnx"));
	assert_non_null(strstr(hp_errmsg(), "'nosuch'"));
	assert_non_null(strstr(hp_errmsg(), "NoSuchOp"));
	hp_graph_free(g);
}

static void test_dynamic(void **state)
{
	struct hp_graph *g = load("dyn.onnx");
	const struct hp_value *x, *z, *s;
	struct hp_shape good = { 4, { 7, 3, 9, 5 } }, bad = { 4, { 7, 4, 9, 5 } };

	(void)state;
	check_sane(g);
	assert_int_equal(g->ninputs, 3); /* w is an initializer, not an input */
	x = &g->values[g->inputs[0]];
	z = &g->values[g->inputs[1]];
	s = &g->values[g->inputs[2]];
	assert_string_equal(x->name, "x");
	assert_string_equal(z->name, "z");
	assert_string_equal(s->name, "s");
	assert_int_equal(g->values[find(g, "w")].kind, HP_VALUE_INITIALIZER);
	assert_int_equal(x->kind, HP_VALUE_INPUT);
	assert_int_equal(x->dtype, HP_F32);
	assert_int_equal(x->shape.rank, 4);
	assert_int_equal(x->shape.dims[0], -1);
	assert_int_equal(x->shape.dims[1], 3);
	assert_int_equal(x->shape.dims[2], -1);
	assert_int_equal(x->shape.dims[3], 5);
	assert_string_equal(x->dim_param[0], "N");
	assert_null(x->dim_param[1]);
	assert_null(x->dim_param[2]);
	assert_int_equal(z->dtype, HP_I64);
	assert_int_equal(z->shape.rank, -1);
	assert_int_equal(s->dtype, HP_F64);
	assert_int_equal(s->shape.rank, 0);
	assert_int_equal(g->noutputs, 3);
	assert_string_equal(g->values[g->outputs[2]].name, "s"); /* an input can be an output */
	assert_true(g->values[find(g, "s")].is_output);
	assert_int_equal(hp_graph_set_input_shape(g, "x", &bad), HP_ESHAPE);
	assert_int_equal(hp_graph_set_input_shape(g, "x", &good), 0);
	hp_graph_free(g);
}

/* One "K=SPEC" of an expected-node line. */
static void check_slot(const struct hp_graph *g, const struct hp_node *n, const char *spec)
{
	int k = atoi(spec), v;
	const char *e = strchr(spec, '=') + 1;
	const struct hp_value *val;
	int count = 0, scalar;
	char list[256], *tok, *save;

	assert_true(k < n->ninputs);
	v = n->inputs[k];
	if (!strcmp(e, "x")) {
		assert_int_equal(v, -1);
		return;
	}
	if (e[0] == '@') {
		if (v != hp_graph_find_value(g, e + 1))
			fail_msg("node '%s' input %d is not '%s'", n->name, k, e + 1);
		return;
	}
	assert_true(v >= 0);
	val = &g->values[v];
	if (!val->data)
		fail_msg("node '%s' input %d ('%s') is not constant", n->name, k, val->name);
	scalar = !strncmp(e, "f32s:", 5);
	assert_int_equal(val->dtype, e[0] == 'i' ? HP_I64 : HP_F32);
	snprintf(list, sizeof list, "%s", strchr(e, ':') + 1);
	for (tok = strtok_r(list, ",", &save); tok; tok = strtok_r(NULL, ",", &save), count++) {
		if (e[0] == 'i')
			assert_int_equal(((int64_t *)val->data)[count], strtoll(tok, NULL, 10));
		else if (((float *)val->data)[count] != strtof(tok, NULL))
			fail_msg("node '%s' input %d [%d] = %g, expected %s", n->name, k, count, ((float *)val->data)[count], tok);
	}
	if (scalar) {
		assert_int_equal(val->shape.rank, 0);
	} else {
		assert_int_equal(val->shape.rank, 1);
		assert_int_equal(val->shape.dims[0], count);
	}
}

static void check_attr_spec(const struct hp_node *n, const char *spec)
{
	char name[64];
	const char *colon = strchr(spec, ':');
	const struct hp_attr *a;

	if (spec[0] == '-') {
		if (hp_node_attr(n, spec + 1))
			fail_msg("node '%s' still has attribute '%s'", n->name, spec + 1);
		return;
	}
	snprintf(name, sizeof name, "%.*s", (int)(colon - spec - 1), spec + 1);
	a = hp_node_attr(n, name);
	if (!a)
		fail_msg("node '%s' lacks attribute '%s'", n->name, name);
	if (a->type == HP_ATTR_INT)
		assert_int_equal(a->i, strtoll(colon + 1, NULL, 10));
	else if (a->type == HP_ATTR_FLOAT)
		assert_true(a->f == strtof(colon + 1, NULL));
	else if (a->type == HP_ATTR_STRING)
		assert_string_equal(a->s, colon + 1);
	else
		fail_msg("node '%s' attribute '%s' has type %d", n->name, name, a->type);
}

static void check_norm(int opset)
{
	char model[64], list[64], line[512];
	struct hp_graph *g;
	FILE *f;
	int lines = 0;

	snprintf(model, sizeof model, "norm_opset%d.onnx", opset);
	snprintf(list, sizeof list, "norm_opset%d.txt", opset);
	g = load(model);
	check_sane(g);
	assert_int_equal(g->opset, opset);
	f = open_list(list);
	while (fgets(line, sizeof line, f)) {
		char *save, *name = strtok_r(line, " \n", &save), *op = strtok_r(NULL, " \n", &save);
		const struct hp_node *n;
		char *tok;

		if (!name)
			continue;
		n = find_node(g, name);
		lines++;
		assert_string_equal(n->op_type, op);
		assert_int_equal(n->ninputs, atoi(strtok_r(NULL, " \n", &save)));
		while ((tok = strtok_r(NULL, " \n", &save))) {
			if (tok[0] >= '0' && tok[0] <= '9')
				check_slot(g, n, tok);
			else
				check_attr_spec(n, tok);
		}
	}
	fclose(f);
	assert_int_equal(g->nnodes, lines);
	hp_graph_free(g);
}

static void test_normalize(void **state)
{
	static const int opsets[] = { 7, 9, 10, 11, 13, 17 };

	(void)state;
	for (size_t i = 0; i < sizeof opsets / sizeof opsets[0]; i++)
		check_norm(opsets[i]);
}

static int code_of(const char *s)
{
	if (!strcmp(s, "EMODEL"))
		return HP_EMODEL;
	if (!strcmp(s, "EUNSUPPORTED"))
		return HP_EUNSUPPORTED;
	if (!strcmp(s, "ENOENT"))
		return -ENOENT;
	fail_msg("bad code %s", s);
	return 0;
}

static void test_bad_models(void **state)
{
	FILE *f = open_list("bad.txt");
	char line[1024], rel[256];
	int count = 0;

	(void)state;
	while (fgets(line, sizeof line, f)) {
		char *save, *file = strtok_r(line, "\t\n", &save), *code = strtok_r(NULL, "\t\n", &save), *sub;
		struct hp_graph *g = (void *)1;
		int rc;

		if (!file)
			continue;
		snprintf(rel, sizeof rel, "bad/%s", file);
		rc = hp_graph_load(path_of(rel), &g);
		/* CODE@infer: the model loads (control flow deferred to shape
		 * inference) and hp_graph_infer refuses it */
		if (strstr(code, "@infer")) {
			*strstr(code, "@infer") = 0;
			if (rc != 0)
				fail_msg("%s: load rc %d (%s), expected success", file, rc, hp_errmsg());
			rc = hp_graph_infer(g);
			hp_graph_free(g);
			g = NULL;
		}
		if (rc != code_of(code))
			fail_msg("%s: rc %d (%s), expected %s", file, rc, hp_errmsg(), code);
		assert_null(g);
		while ((sub = strtok_r(NULL, "\t\n", &save)))
			if (!strstr(hp_errmsg(), sub))
				fail_msg("%s: message '%s' lacks '%s'", file, hp_errmsg(), sub);
		count++;
	}
	fclose(f);
	assert_true(count >= 25);
	assert_int_equal(hp_graph_load(path_of("does-not-exist.onnx"), &(struct hp_graph *){ 0 }), -ENOENT);
	assert_non_null(strstr(hp_errmsg(), "does-not-exist.onnx"));
	assert_int_equal(hp_graph_load(dir, &(struct hp_graph *){ 0 }), -EISDIR);
}

/* Every prefix and many single-byte corruptions of valid models: an error
 * or a graph, never a crash (the sanitizer build makes this bite). */
static void test_truncations(void **state)
{
	static const char *const models[] = { "norm_opset9.onnx", "consts.onnx", "attrs.onnx", "dyn.onnx" };

	(void)state;
	for (size_t m = 0; m < sizeof models / sizeof models[0]; m++) {
		size_t len;
		uint8_t *buf = slurp(models[m], &len);
		int fails = 0;

		for (size_t l = 0; l < len; l++) {
			struct hp_graph *g;
			uint8_t *copy = malloc(l + 1);
			int rc;

			memcpy(copy, buf, l); /* exact-size heap copy: overreads are caught */
			rc = hp_graph_load_buffer(copy, l, models[m], NULL, &g);
			free(copy);
			if (rc < 0)
				fails++;
			else
				hp_graph_free(g);
		}
		assert_true(fails > (int)len / 2);
		for (size_t i = 0; i < len; i += 3) {
			struct hp_graph *g;
			uint8_t old = buf[i];
			buf[i] = (uint8_t)(old ^ (0x5a + i));
			if (hp_graph_load_buffer(buf, len, models[m], NULL, &g) == 0)
				hp_graph_free(g);
			buf[i] = old;
		}
		free(buf);
	}
}

/* Inputs the fuzzer (tests/fuzz) once crashed the importer with. */
static void test_fuzz_regressions(void **state)
{
	static const struct {
		const char *bytes;
		size_t len;
	} cases[] = {
		/* a graph with no nodes: memcpy(NULL, ..., 0) in the topological sort */
		{ "\x08\x78\x3a\x0e\x22\x0c\x0a\x0a\x0a\x08\x08\x01\x12\x04\x0a\x02\x08\x04\x62\x0f\x0a\x01\x79\x12\x0a\x0a\x08\x08\x01\x12\x04\x0a\x02\x08\x04\x42\x04\x0a\x00\x10\x0d", 41 },
	};

	(void)state;
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		struct hp_graph *g;
		void *copy = malloc(cases[i].len);

		memcpy(copy, cases[i].bytes, cases[i].len);
		if (hp_graph_load_buffer(copy, cases[i].len, "regression.onnx", NULL, &g) == 0)
			hp_graph_free(g);
		free(copy);
	}
}

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Peak resident set since the last reset (Linux clear_refs 5 resets it). */
static long long hwm_kb(int reset)
{
	char line[256];
	long long kb = -1;
	FILE *f;

	if (reset) {
		int fd = open("/proc/self/clear_refs", O_WRONLY);
		if (fd >= 0) {
			if (write(fd, "5", 1) != 1)
				kb = -2;
			close(fd);
		}
	}
	f = fopen("/proc/self/status", "r");
	if (!f)
		return -1;
	while (fgets(line, sizeof line, f))
		if (!strncmp(line, "VmHWM:", 6))
			kb = atoll(line + 6);
	fclose(f);
	return kb;
}

static void timed_load(const char *name, struct hp_graph **g, double *secs, long long *grown_kb)
{
	long long before = hwm_kb(1);
	double t0 = now();

	assert_int_equal(hp_graph_load(path_of(name), g), 0);
	*secs = now() - t0;
	*grown_kb = hwm_kb(0) - before;
	print_message("%s: loaded in %.1f ms, peak RSS grew %lld KiB\n", name, *secs * 1e3, *grown_kb);
}

/* 72 MiB of embedded raw_data: walked around, never read. */
static void test_embedded_memory(void **state)
{
	struct hp_graph *g;
	double secs;
	long long grown;

	(void)state;
	timed_load("emb.onnx", &g, &secs, &grown);
	assert_true(secs < TIME_LIMIT);
	assert_true(grown < 4 * 1024);
	for (int i = 0; i < 3; i++) {
		char name[8];
		snprintf(name, sizeof name, "emb%d", i);
		assert_int_equal(g->values[find(g, name)].src.kind, HP_BLOB_FILE);
	}
	check_bytes(g, find(g, "emb1"), "emb1.npy");
	hp_graph_free(g);
}

/* 4 GiB of weights in a sparse external file plus a tail past 4 GiB. */
static void test_big_external(void **state)
{
	struct hp_graph *g;
	double secs;
	long long grown;

	(void)state;
	timed_load("big.onnx", &g, &secs, &grown);
	assert_true(secs < TIME_LIMIT);
	assert_true(grown < 64 * 1024);
	for (int i = 0; i < 4; i++) {
		char name[8];
		const struct hp_value *v;
		snprintf(name, sizeof name, "big%d", i);
		v = &g->values[find(g, name)];
		assert_int_equal(v->src.kind, HP_BLOB_FILE);
		assert_int_equal(v->src.offset, (uint64_t)i << 30);
		assert_int_equal(v->src.length, 1ull << 30);
		assert_int_equal(v->shape.dims[0], 16384);
		assert_null(v->data);
	}
	assert_true(g->values[find(g, "tail")].src.offset > (4ull << 30));
	check_bytes(g, find(g, "tail"), "tail.npy");
	hp_graph_free(g);
}

/* A value added with another value's shape, while the value array grows:
 * the shape must be read before the array moves (exec/train_dp.c adds
 * each gradient's reduced copy so; under ASan, import-asan, reading it
 * after the realloc is a use after free). */
static void test_add_value_own_shape(void **state)
{
	struct hp_graph *g = hp_graph_new("grow");
	struct hp_shape s = { .rank = 2, .dims = { 3, 5 } };
	char name[32];

	(void)state;
	assert_non_null(g);
	assert_int_equal(hp_graph_add_value(g, "v0", HP_VALUE_ACTIVATION, HP_F32, &s), 0);
	for (int i = 1; i < 300; i++) {
		snprintf(name, sizeof name, "v%d", i);
		/* each value takes its predecessor's shape */
		struct hp_shape *prev = &g->values[i - 1].shape;
		int v = hp_graph_add_value(g, name, HP_VALUE_ACTIVATION, HP_F32, prev);
		assert_int_equal(v, i);
		assert_int_equal(g->values[v].shape.rank, 2);
		assert_int_equal(g->values[v].shape.dims[0], 3);
		assert_int_equal(g->values[v].shape.dims[1], 5);
	}
	assert_int_equal(hp_graph_add_value(g, "none", HP_VALUE_ACTIVATION, HP_F32, NULL), 300);
	assert_int_equal(g->values[300].shape.rank, -1);
	hp_graph_free(g);
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		/* memory tests first: they read the peak RSS */
		cmocka_unit_test(test_big_external),
		cmocka_unit_test(test_embedded_memory),
		cmocka_unit_test(test_initializers),
		cmocka_unit_test(test_external),
		cmocka_unit_test(test_buffer),
		cmocka_unit_test(test_constants),
		cmocka_unit_test(test_attributes),
		cmocka_unit_test(test_dynamic),
		cmocka_unit_test(test_normalize),
		cmocka_unit_test(test_bad_models),
		cmocka_unit_test(test_truncations),
		cmocka_unit_test(test_fuzz_regressions),
		cmocka_unit_test(test_add_value_own_shape),
	};

	if (argc < 2) {
		fprintf(stderr, "usage: %s make_import_models.py\n", argv[0]);
		return 2;
	}
	script = argv[1];
	return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
