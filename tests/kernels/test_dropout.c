/* Training-mode Dropout against ONNX's own reference (numpy's legacy
 * MT19937 through onnx.backend.test.case.node.dropout), run via
 * HPDLF_PYTHON: output and mask bit for bit for several seeds, ratios,
 * dtypes and shapes; training_mode and ratio as run-time inputs; the
 * default seed is reproducible and independent of the thread count; a
 * training Dropout is never folded nor an alias of its input. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "hpdlf/error.h"
#include "tests/kernels/harness.h"

static const int64_t no_dims[1];

struct dcase {
	int64_t seed;   /* -1: no seed attribute */
	float ratio;
	enum hp_dtype t;
	int rank;
	int64_t dims[3];
	unsigned cmask; /* which of ratio (2) and training_mode (4) are constants */
};

static const struct dcase cases[] = {
	{ 0, 0.5f, HP_F32, 3, { 3, 4, 5 }, 6 },
	{ 0, 0.75f, HP_F32, 3, { 3, 4, 5 }, 6 },
	{ 7, 0.3f, HP_F32, 2, { 37, 41 }, 0 },
	{ 12345, 0.1f, HP_F64, 1, { 2000 }, 2 },
	{ 4294967295, 0.9f, HP_F32, 2, { 700, 3 }, 4 },
};
#define NCASES ((int)(sizeof cases / sizeof cases[0]))

static const char pyscript[] =
	"import sys, numpy as np\n"
	"from onnx.backend.test.case.node.dropout import dropout\n"
	"d = sys.argv[1]\n"
	"for line in open(d + '/cases.txt'):\n"
	"    i, seed, ratio = line.split()\n"
	"    x = np.load('%s/x%s.npy' % (d, i))\n"
	"    y, m = dropout(x, np.float32(ratio), seed=int(seed), training_mode=True, return_mask=True)\n"
	"    np.save('%s/y%s.npy' % (d, i), y.astype(x.dtype))\n"
	"    np.save('%s/m%s.npy' % (d, i), m)\n";

static int run_dropout(const struct dcase *c, const struct hp_tensor *x, struct hp_tensor *out,
		       struct hp_pool *pool)
{
	struct hp_tensor in[3] = { *x, kt_tensor(HP_F32, 0, no_dims), kt_tensor(HP_BOOL, 0, no_dims) };
	struct hp_attr seed = kt_int("seed", c->seed);
	struct kt_case k = { .op = "Dropout", .nin = 3, .in = in, .const_mask = c->cmask, .nattrs = c->seed >= 0,
			     .attrs = &seed, .nout = 2, .pool = pool, .opset = 13 };
	int rc;

	*(float *)in[1].data = c->ratio;
	*(uint8_t *)in[2].data = 1;
	rc = kt_run(&k, out);
	if (rc < 0)
		print_message("Dropout: %s\n", hp_errmsg());
	hp_tensor_free(&in[1]);
	hp_tensor_free(&in[2]);
	return rc;
}

static void test_vs_onnx_reference(void **state)
{
	const char *py = getenv("HPDLF_PYTHON"), *tmp = getenv("TMPDIR");
	char dir[256], path[512], cmd[1024];
	FILE *f;

	(void)state;
	snprintf(dir, sizeof dir, "%s/hpdlf-dropout-XXXXXX", tmp && tmp[0] ? tmp : "/tmp");
	if (!py || !py[0] || !mkdtemp(dir))
		skip();
	snprintf(path, sizeof path, "%s/cases.txt", dir);
	assert_non_null(f = fopen(path, "w"));
	for (int i = 0; i < NCASES; i++) {
		struct hp_tensor x = kt_tensor(cases[i].t, cases[i].rank, cases[i].dims);
		kt_fill_random(&x, 40 + (unsigned)i, -3, 3);
		snprintf(path, sizeof path, "%s/x%d.npy", dir, i);
		assert_int_equal(hp_npy_write(path, &x), 0);
		hp_tensor_free(&x);
		fprintf(f, "%d %lld %.9g\n", i, (long long)cases[i].seed, (double)cases[i].ratio);
	}
	fclose(f);
	snprintf(path, sizeof path, "%s/ref.py", dir);
	assert_non_null(f = fopen(path, "w"));
	fputs(pyscript, f);
	fclose(f);
	snprintf(cmd, sizeof cmd, "%s %s/ref.py %s", py, dir, dir);
	assert_int_equal(system(cmd), 0);
	for (int i = 0; i < NCASES; i++) {
		struct hp_tensor x, y, m, out[2];
		int64_t kept = 0, n;
		snprintf(path, sizeof path, "%s/x%d.npy", dir, i);
		assert_int_equal(hp_npy_read(path, &x), 0);
		snprintf(path, sizeof path, "%s/y%d.npy", dir, i);
		assert_int_equal(hp_npy_read(path, &y), 0);
		snprintf(path, sizeof path, "%s/m%d.npy", dir, i);
		assert_int_equal(hp_npy_read(path, &m), 0);
		assert_int_equal(run_dropout(&cases[i], &x, out, NULL), 0);
		assert_int_equal(out[0].dtype, x.dtype);
		assert_int_equal(out[1].dtype, HP_BOOL);
		assert_memory_equal(out[1].data, m.data, hp_tensor_bytes(&m));
		assert_memory_equal(out[0].data, y.data, hp_tensor_bytes(&y));
		n = hp_shape_numel(&m.shape);
		for (int64_t k = 0; k < n; k++)
			kept += ((uint8_t *)m.data)[k];
		/* the draw is not degenerate: about 1 - ratio of the elements stay */
		assert_true(fabs((double)kept / (double)n - (1 - cases[i].ratio)) < 0.15);
		hp_tensor_free(&out[0]);
		hp_tensor_free(&out[1]);
		hp_tensor_free(&x);
		hp_tensor_free(&y);
		hp_tensor_free(&m);
	}
	snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
	(void)!system(cmd);
}

/* Without a seed attribute: the same mask on every run and thread count,
 * and a different one for a different seed. */
static void test_default_seed(void **state)
{
	struct dcase c = { -1, 0.5f, HP_F32, 2, { 64, 65 }, 6 }, c7 = c;
	struct hp_tensor x = kt_tensor(HP_F32, 2, c.dims), a[2], b[2], d[2];
	struct hp_pool *pool;

	(void)state;
	c7.seed = 7;
	kt_fill_random(&x, 5, 1, 2);
	assert_int_equal(hp_pool_create(2, &pool), 0);
	assert_int_equal(run_dropout(&c, &x, a, NULL), 0);
	assert_int_equal(run_dropout(&c, &x, b, pool), 0);
	assert_int_equal(run_dropout(&c7, &x, d, NULL), 0);
	assert_memory_equal(a[0].data, b[0].data, hp_tensor_bytes(&a[0]));
	assert_memory_equal(a[1].data, b[1].data, hp_tensor_bytes(&a[1]));
	assert_memory_not_equal(a[1].data, d[1].data, hp_tensor_bytes(&a[1]));
	for (int i = 0; i < 2; i++) {
		hp_tensor_free(&a[i]);
		hp_tensor_free(&b[i]);
		hp_tensor_free(&d[i]);
	}
	hp_pool_destroy(pool);
	hp_tensor_free(&x);
}

/* A constant X in training mode is not folded, and the op is neither an
 * alias of X nor foldable; in inference it stays an alias. */
static void test_flags(void **state)
{
	int64_t n = 16;
	struct hp_tensor x = kt_tensor(HP_F32, 1, &n);

	(void)state;
	kt_fill_random(&x, 9, -1, 1);
	for (int training = 0; training < 2; training++) {
		struct hp_graph *g = hp_graph_new("dropout");
		struct hp_shape s0 = { 0 };
		int ids[3], out, node;
		ids[0] = hp_graph_add_value(g, "x", HP_VALUE_CONSTANT, HP_F32, &x.shape);
		g->values[ids[0]].data = malloc(hp_tensor_bytes(&x));
		memcpy(g->values[ids[0]].data, x.data, hp_tensor_bytes(&x));
		g->values[ids[0]].src.kind = HP_BLOB_MEMORY;
		ids[1] = hp_graph_add_value(g, "r", HP_VALUE_CONSTANT, HP_F32, &s0);
		g->values[ids[1]].data = malloc(4);
		*(float *)g->values[ids[1]].data = 0.5f;
		g->values[ids[1]].src.kind = HP_BLOB_MEMORY;
		ids[2] = hp_graph_add_value(g, "t", HP_VALUE_CONSTANT, HP_BOOL, &s0);
		g->values[ids[2]].data = malloc(1);
		*(uint8_t *)g->values[ids[2]].data = (uint8_t)training;
		g->values[ids[2]].src.kind = HP_BLOB_MEMORY;
		out = hp_graph_add_value(g, "y", HP_VALUE_ACTIVATION, HP_UNDEFINED, NULL);
		node = hp_graph_add_node(g, "d", "Dropout", 3, ids, 1, &out);
		assert_true(node >= 0);
		assert_int_equal(hp_graph_infer(g), 0);
		if (training) {
			assert_false(g->nodes[node].folded);
			assert_true(g->nodes[node].op->flags & HP_OP_NO_FOLD);
			assert_false(g->nodes[node].op->flags & HP_OP_ALIAS);
		} else {
			assert_true(g->nodes[node].op->flags & HP_OP_ALIAS);
		}
		hp_graph_free(g);
	}
	hp_tensor_free(&x);
}

/* Errors: ratio outside [0, 1) in training; training on an integer X. */
static void test_errors(void **state)
{
	struct dcase c = { 1, 1.0f, HP_F32, 1, { 8 }, 6 };
	struct hp_tensor x = kt_tensor(HP_F32, 1, c.dims), xi = kt_tensor(HP_I32, 1, c.dims), out[2];

	(void)state;
	assert_int_equal(run_dropout(&c, &x, out, NULL), HP_EMODEL);
	assert_non_null(strstr(hp_errmsg(), "ratio"));
	c.cmask = 4; /* ratio at run time */
	assert_int_equal(run_dropout(&c, &x, out, NULL), HP_EDATA);
	assert_non_null(strstr(hp_errmsg(), "node0"));
	c.ratio = 0.5f;
	assert_int_equal(run_dropout(&c, &xi, out, NULL), HP_EUNSUPPORTED);
	hp_tensor_free(&x);
	hp_tensor_free(&xi);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_vs_onnx_reference),
		cmocka_unit_test(test_default_seed),
		cmocka_unit_test(test_flags),
		cmocka_unit_test(test_errors),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
