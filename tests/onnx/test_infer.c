/* Shape inference and constant folding (hp_graph_infer) over the shape
 * subgraphs of real exports: Upsample/Resize-10 after normalization, float32
 * scales computed from sizes, torch.arange at opset 9 (NonZero), torch.triu
 * (Trilu over ConstantOfShape), view() chains.  Models and numpy's expected
 * values are written at test time by make_infer_models.py; expect.txt says
 * which value must fold to what, which stays run-time work with which shape.
 *
 * argv[1]: the generator script; env HPDLF_PYTHON: python3 with onnx/numpy. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <ftw.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "hpdlf/error.h"
#include "hpdlf/graph.h"
#include "hpdlf/tensor.h"

extern char **environ;

static char dir[] = "/tmp/hpdlf-test-infer-XXXXXX";
static const char *script;

static const char *path_of(const char *name)
{
	static char buf[2][512];
	static int k;

	k = (k + 1) % 2;
	snprintf(buf[k], sizeof buf[k], "%s/%s", dir, name);
	return buf[k];
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
	const char *py = getenv("HPDLF_PYTHON") ? getenv("HPDLF_PYTHON") : "python3";
	char *argv[] = { (char *)py, (char *)script, dir, NULL };
	pid_t pid;
	int st;

	(void)state;
	if (!mkdtemp(dir))
		return -1;
	if (posix_spawnp(&pid, py, NULL, NULL, argv, environ) != 0)
		return -1;
	if (waitpid(pid, &st, 0) < 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
		return -1;
	return 0;
}

static int group_teardown(void **state)
{
	(void)state;
	return nftw(dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

/* "[d0,d1]" -> shape */
static void parse_dims(const char *s, struct hp_shape *out)
{
	char *end;

	memset(out, 0, sizeof *out);
	assert_true(s[0] == '[');
	for (s++; *s && *s != ']'; s = *end == ',' ? end + 1 : end) {
		assert_true(out->rank < HP_MAX_RANK);
		out->dims[out->rank++] = strtoll(s, &end, 10);
		assert_true(end != s);
	}
}

/* "x=1x2x3;skip=4x5" -> hp_graph_set_input_shape for each ("-": none). */
static void set_inputs(struct hp_graph *g, char *spec)
{
	char *save, *tok;

	if (!strcmp(spec, "-"))
		return;
	for (tok = strtok_r(spec, ";", &save); tok; tok = strtok_r(NULL, ";", &save)) {
		char *eq = strchr(tok, '='), *p, *end;
		struct hp_shape s = { 0 };

		assert_non_null(eq);
		*eq = 0;
		for (p = eq + 1; *p; p = *end == 'x' ? end + 1 : end) {
			s.dims[s.rank++] = strtoll(p, &end, 10);
			assert_true(end != p);
		}
		if (hp_graph_set_input_shape(g, tok, &s) < 0)
			fail_msg("input %s: %s", tok, hp_errmsg());
	}
}

static void check_const(const struct hp_graph *g, const struct hp_value *v, const char *npy)
{
	struct hp_tensor ref;

	if (!v->data || v->kind != HP_VALUE_CONSTANT)
		fail_msg("'%s' did not fold to a constant", v->name);
	assert_int_equal(hp_npy_read(path_of(npy), &ref), 0);
	assert_int_equal(v->dtype, ref.dtype);
	assert_true(hp_shape_equal(&v->shape, &ref.shape));
	if (memcmp(v->data, ref.data, hp_tensor_bytes(&ref)))
		fail_msg("%s: '%s' differs from %s", g->path, v->name, npy);
	hp_tensor_free(&ref);
}

/* One expect.txt line: MODEL INPUTS VALUE KIND DIMS|CODE [FILE]. */
static void check_line(char *line)
{
	char *save, *model = strtok_r(line, " \n", &save), *ins = strtok_r(NULL, " \n", &save);
	char *value = strtok_r(NULL, " \n", &save), *kind = strtok_r(NULL, " \n", &save);
	char *arg = strtok_r(NULL, " \n", &save), *file = strtok_r(NULL, " \n", &save);
	struct hp_graph *g = NULL;
	struct hp_shape want;
	const struct hp_value *v;
	int rc;

	assert_non_null(arg);
	if (hp_graph_load(path_of(model), &g) < 0)
		fail_msg("loading %s: %s", model, hp_errmsg());
	set_inputs(g, ins);
	rc = hp_graph_infer(g);
	if (!strcmp(kind, "error")) {
		assert_string_equal(arg, "ENOTCONST");
		if (rc != HP_ENOTCONST)
			fail_msg("%s: infer returned %d, expected HP_ENOTCONST (%s)", model, rc, hp_errmsg());
		assert_non_null(strstr(hp_errmsg(), "compile-time constant"));
		hp_graph_free(g);
		return;
	}
	if (rc < 0)
		fail_msg("%s: infer: %s", model, hp_errmsg());
	assert_true(hp_graph_find_value(g, value) >= 0);
	v = &g->values[hp_graph_find_value(g, value)];
	parse_dims(arg, &want);
	if (!hp_shape_equal(&v->shape, &want)) {
		char a[128], b[128];
		fail_msg("%s: '%s' has shape %s, expected %s", model, value, hp_shape_str(&v->shape, a, sizeof a),
			 hp_shape_str(&want, b, sizeof b));
	}
	if (!strcmp(kind, "const"))
		check_const(g, v, file);
	else if (v->data)
		fail_msg("%s: '%s' folded, but it depends on run-time inputs", model, value);
	hp_graph_free(g);
}

/* Every line of expect.txt about one of the given models (NULL-terminated). */
static void check_models(const char *const *models)
{
	FILE *f = fopen(path_of("expect.txt"), "r");
	char line[512];
	int seen = 0;

	assert_non_null(f);
	while (fgets(line, sizeof line, f)) {
		for (const char *const *m = models; *m; m++) {
			size_t n = strlen(*m);
			if (!strncmp(line, *m, n) && line[n] == ' ') {
				check_line(line);
				seen++;
			}
		}
	}
	fclose(f);
	assert_true(seen > 0);
}

/* A node is looked up by its domain as well as its op: infer.c's memo of
 * the ops it found last (a graph names a few ops over and over) must not
 * hand an ai.onnx Relu to a Relu of another domain, before it or after. */
static void test_op_by_domain(void **state)
{
	static const char *const domains[] = { "", "ai.onnx", "com.example", "" };
	struct hp_shape s = { 2, { 2, 3 } };
	struct hp_graph *g = hp_graph_new("op-domains");
	int v, node;

	(void)state;
	assert_non_null(g);
	v = hp_graph_add_value(g, "x", HP_VALUE_INPUT, HP_F32, &s);
	assert_true(v >= 0);
	g->inputs = malloc(sizeof *g->inputs);
	assert_non_null(g->inputs);
	g->inputs[g->ninputs++] = v;
	for (int k = 0; k < 4; k++) {
		char name[16];
		int out;
		snprintf(name, sizeof name, "y%d", k);
		out = hp_graph_add_value(g, name, HP_VALUE_ACTIVATION, HP_UNDEFINED, NULL);
		assert_true(out >= 0);
		snprintf(name, sizeof name, "relu%d", k);
		node = hp_graph_add_node(g, name, "Relu", 1, &v, 1, &out);
		assert_true(node >= 0);
		free(g->nodes[node].domain);
		g->nodes[node].domain = strdup(domains[k]);
		assert_non_null(g->nodes[node].domain);
		v = out;
	}
	assert_int_equal(hp_graph_finalize(g), 0);
	assert_int_equal(hp_graph_infer(g), HP_EUNSUPPORTED);
	assert_non_null(strstr(hp_errmsg(), "com.example"));
	assert_non_null(g->nodes[0].op);
	assert_true(g->nodes[1].op == g->nodes[0].op); /* ai.onnx is the default domain */
	assert_null(g->nodes[2].op);
	assert_true(g->nodes[3].op == g->nodes[0].op);
	hp_graph_free(g);
}

static void test_legacy_resize(void **state)
{
	static const char *const m[] = { "up9.onnx", "resize10.onnx", NULL };

	(void)state;
	check_models(m);
}

static void test_sized_upsample(void **state)
{
	static const char *const m[] = { "sized9.onnx", NULL };

	(void)state;
	check_models(m);
}

static void test_arange_nonzero(void **state)
{
	static const char *const m[] = { "arange9.onnx", "nonzero_rt.onnx", "nonzero_c.onnx", NULL };

	(void)state;
	check_models(m);
}

static void test_trilu_mask(void **state)
{
	static const char *const m[] = { "triu.onnx", NULL };

	(void)state;
	check_models(m);
}

static void test_view_chain(void **state)
{
	static const char *const m[] = { "chain.onnx", NULL };

	(void)state;
	check_models(m);
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_op_by_domain),
		cmocka_unit_test(test_legacy_resize),
		cmocka_unit_test(test_sized_upsample),
		cmocka_unit_test(test_arange_nonzero),
		cmocka_unit_test(test_trilu_mask),
		cmocka_unit_test(test_view_chain),
	};

	if (argc < 2) {
		fprintf(stderr, "usage: %s make_infer_models.py\n", argv[0]);
		return 2;
	}
	script = argv[1];
	return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
