/* Element-wise kernels on every numeric dtype (int8..uint64, float32,
 * float64) against numpy, run through HPDLF_PYTHON: arithmetic that wraps,
 * truncating integer Div, both Mod forms, Max/Min (NaN), PRelu,
 * comparisons, Clip with bounds of X's type, Neg/Abs/Relu/Sign, Sum/Mean.
 * Results must be the same bits as numpy's; broadcasting operands, full-
 * range random integers, divisors 0 and -1 are part of the inputs. */
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

static const enum hp_dtype all_types[] = { HP_I8, HP_U8, HP_I16, HP_U16, HP_I32, HP_U32,
					   HP_I64, HP_U64, HP_F32, HP_F64 };
#define NTYPES ((int)(sizeof all_types / sizeof all_types[0]))

static int is_signed(enum hp_dtype t)
{
	return t == HP_I8 || t == HP_I16 || t == HP_I32 || t == HP_I64;
}

static int is_flt(enum hp_dtype t)
{
	return t == HP_F32 || t == HP_F64;
}

/* One case: op over nin operands of dtype t (shapes below), attribute fmod. */
struct dcase {
	const char *op;
	int nin, fmod, ranks[3];
	int64_t dims[3][3];
	enum hp_dtype t;
};

static uint64_t rng(uint64_t *s)
{
	*s = *s * 6364136223846793005ull + 1442695040888963407ull;
	return *s ^ (*s >> 29);
}

/* Full-range integers (random bytes) with small values, 0, 1 and -1 mixed
 * in; floats in [-8, 8) with NaN, 0 and -0 mixed in. */
static void fill(struct hp_tensor *t, uint64_t seed, int nonan)
{
	size_t z = hp_dtype_size(t->dtype);
	int64_t n = hp_shape_numel(&t->shape);

	for (int64_t i = 0; i < n; i++) {
		uint64_t r = rng(&seed), kind = r % 8;
		char *p = (char *)t->data + (size_t)i * z;
		if (is_flt(t->dtype)) {
			double v = kind == 0 && !nonan ? NAN : kind == 1 ? 0.0 : kind == 2 ? -0.0 :
				   ((double)(rng(&seed) >> 11) / 9007199254740992.0) * 16 - 8;
			if (t->dtype == HP_F32)
				*(float *)p = (float)v;
			else
				*(double *)p = v;
			continue;
		}
		r = rng(&seed);
		if (kind == 0)
			r = 0;
		else if (kind == 1)
			r = 1;
		else if (kind == 2)
			r = ~0ull; /* -1, or the type's max when unsigned */
		else if (kind < 5)
			r = r % 19 - 9; /* small, either sign */
		memcpy(p, &r, z); /* little-endian: the low bytes */
	}
}

static const char pyscript[] =
	"import sys, functools, numpy as np\n"
	"np.seterr(all='ignore')\n"
	"d = sys.argv[1]\n"
	"def tdiv(a, b):\n"
	"    if a.dtype.kind == 'f': return a / b\n"
	"    q = np.floor_divide(a, b)\n"
	"    if a.dtype.kind == 'i':\n"
	"        q = q + ((np.mod(a, b) != 0) & ((a < 0) != (b < 0))).astype(a.dtype)\n"
	"    return np.where(b == 0, np.zeros_like(q), q)\n"
	"def relu(x): return np.maximum(x, np.zeros_like(x))\n"
	"def prelu(x, s): return np.where(x < 0, x * s, x)\n"
	"def clip(x, lo, hi): return np.minimum(np.maximum(x, lo), hi)\n"
	"f = {'Add': np.add, 'Sub': np.subtract, 'Mul': np.multiply, 'Div': tdiv, 'Max': lambda *a: functools.reduce(np.maximum, a),\n"
	"     'Min': lambda *a: functools.reduce(np.minimum, a), 'Mod0': np.mod, 'Mod1': np.fmod, 'PRelu': prelu, 'Equal': np.equal,\n"
	"     'Less': np.less, 'Greater': np.greater, 'LessOrEqual': np.less_equal,\n"
	"     'GreaterOrEqual': np.greater_equal, 'Neg': np.negative, 'Abs': np.abs, 'Relu': relu,\n"
	"     'Sign': np.sign, 'Clip': clip, 'Sum': lambda *a: sum(a[1:], a[0]),\n"
	"     'Mean': lambda *a: sum(a[1:], a[0]) / a[0].dtype.type(len(a))}\n"
	"for line in open(d + '/cases.txt'):\n"
	"    i, op, nin = line.split()\n"
	"    a = [np.load('%s/in%s_%d.npy' % (d, i, k)) for k in range(int(nin))]\n"
	"    y = np.asarray(f[op](*a))\n"
	"    if y.dtype != np.bool_: y = y.astype(a[0].dtype)\n"
	"    np.save('%s/out%s.npy' % (d, i), y)\n";

static int64_t numel(const struct hp_tensor *t)
{
	return hp_shape_numel(&t->shape);
}

/* Same bits for integers; floats compare by value (so -0 equals 0, as
 * numpy's maximum keeps -0 where Relu gives 0) and NaN equals NaN. */
static int same(const struct hp_tensor *a, const struct hp_tensor *b, int64_t *at)
{
	size_t z = hp_dtype_size(a->dtype);

	if (a->dtype != b->dtype || !hp_shape_equal(&a->shape, &b->shape))
		return 0;
	for (int64_t i = 0; i < numel(a); i++) {
		const char *p = (const char *)a->data + (size_t)i * z, *q = (const char *)b->data + (size_t)i * z;
		double u = a->dtype == HP_F32 ? *(const float *)p : a->dtype == HP_F64 ? *(const double *)p : 0;
		double v = a->dtype == HP_F32 ? *(const float *)q : a->dtype == HP_F64 ? *(const double *)q : 0;
		if (!memcmp(p, q, z) || (is_flt(a->dtype) && (u == v || (isnan(u) && isnan(v)))))
			continue;
		*at = i;
		return 0;
	}
	return 1;
}

static const struct {
	const char *op;
	int nin, fmod, types; /* types: 0 all, 1 signed and float, 2 float only */
} ops[] = {
	{ "Add", 2, 0, 0 }, { "Sub", 2, 0, 0 }, { "Mul", 2, 0, 0 }, { "Div", 2, 0, 0 },
	{ "Max", 2, 0, 0 }, { "Min", 2, 0, 0 }, { "Max", 3, 0, 0 }, { "Mod", 2, 0, 0 },
	{ "Mod", 2, 1, 0 }, { "PRelu", 2, 0, 1 }, { "Equal", 2, 0, 0 }, { "Less", 2, 0, 0 },
	{ "Greater", 2, 0, 0 }, { "LessOrEqual", 2, 0, 0 }, { "GreaterOrEqual", 2, 0, 0 },
	{ "Neg", 1, 0, 1 }, { "Abs", 1, 0, 0 }, { "Relu", 1, 0, 0 }, { "Sign", 1, 0, 0 },
	{ "Clip", 3, 0, 0 }, { "Sum", 3, 0, 0 }, { "Mean", 3, 0, 2 },
};
#define NOPS ((int)(sizeof ops / sizeof ops[0]))

/* Operand shapes: x 3x4x5; a second operand 4x1 (broadcast both ways) or
 * 3x4x5; a third 5; Clip's bounds and PRelu's slope fit their rules. */
static void shapes_of(const char *op, int k, int variant, struct hp_shape *s)
{
	static const struct hp_shape x = { 3, { 3, 4, 5 } }, col = { 2, { 4, 1 } }, row = { 1, { 5 } },
				     scalar = { 0, { 0 } };

	if (k == 0)
		*s = x;
	else if (!strcmp(op, "Clip"))
		*s = scalar;
	else if (!strcmp(op, "PRelu"))
		*s = variant ? x : row;
	else if (k == 1)
		*s = variant ? x : col;
	else
		*s = row;
}

static int wanted(int types, enum hp_dtype t)
{
	return types == 0 || (types == 1 && (is_signed(t) || is_flt(t))) || (types == 2 && is_flt(t));
}

static int run_case(const char *op, int nin, int fmod, struct hp_tensor *in, struct hp_tensor *y,
		    struct hp_pool *pool)
{
	struct hp_attr a = kt_int("fmod", fmod);
	struct kt_case c = { .op = op, .nin = nin, .in = in, .nattrs = !strcmp(op, "Mod"), .attrs = &a,
			     .nout = 1, .pool = pool };
	int rc = kt_run(&c, y);

	if (rc < 0)
		print_message("%s %s: %s\n", op, hp_dtype_name(in[0].dtype), hp_errmsg());
	return rc;
}

static void test_vs_numpy(void **state)
{
	const char *py = getenv("HPDLF_PYTHON"), *tmp = getenv("TMPDIR");
	char dir[256], path[512], cmd[1024];
	struct hp_pool *pool;
	int nc = 0;
	FILE *f;

	(void)state;
	snprintf(dir, sizeof dir, "%s/hpdlf-dtypes-XXXXXX", tmp && tmp[0] ? tmp : "/tmp");
	if (!py || !py[0] || !mkdtemp(dir))
		skip();
	snprintf(path, sizeof path, "%s/cases.txt", dir);
	assert_non_null(f = fopen(path, "w"));
	for (int o = 0; o < NOPS; o++)
		for (int ti = 0; ti < NTYPES; ti++)
			for (int v = 0; v < 2; v++, nc++) {
				enum hp_dtype t = all_types[ti];
				if (!wanted(ops[o].types, t) || (ops[o].fmod == 0 && !strcmp(ops[o].op, "Mod") && is_flt(t)))
					continue;
				for (int k = 0; k < ops[o].nin; k++) {
					struct hp_shape s;
					struct hp_tensor x;
					shapes_of(ops[o].op, k, v, &s);
					x = kt_tensor(t, s.rank, s.dims);
					fill(&x, (uint64_t)(nc * 7 + k + 1), !strcmp(ops[o].op, "Clip"));
					snprintf(path, sizeof path, "%s/in%d_%d.npy", dir, nc, k);
					assert_int_equal(hp_npy_write(path, &x), 0);
					hp_tensor_free(&x);
				}
				fprintf(f, "%d %s%s %d\n", nc, ops[o].op,
					strcmp(ops[o].op, "Mod") ? "" : ops[o].fmod ? "1" : "0", ops[o].nin);
			}
	fclose(f);
	snprintf(path, sizeof path, "%s/ref.py", dir);
	assert_non_null(f = fopen(path, "w"));
	fputs(pyscript, f);
	fclose(f);
	snprintf(cmd, sizeof cmd, "%s %s/ref.py %s", py, dir, dir);
	assert_int_equal(system(cmd), 0);
	assert_int_equal(hp_pool_create(2, &pool), 0);
	nc = 0;
	for (int o = 0; o < NOPS; o++)
		for (int ti = 0; ti < NTYPES; ti++)
			for (int v = 0; v < 2; v++, nc++) {
				enum hp_dtype t = all_types[ti];
				struct hp_tensor in[3], want, y, y2;
				int64_t at = -1;
				if (!wanted(ops[o].types, t) || (ops[o].fmod == 0 && !strcmp(ops[o].op, "Mod") && is_flt(t)))
					continue;
				for (int k = 0; k < ops[o].nin; k++) {
					snprintf(path, sizeof path, "%s/in%d_%d.npy", dir, nc, k);
					assert_int_equal(hp_npy_read(path, &in[k]), 0);
				}
				snprintf(path, sizeof path, "%s/out%d.npy", dir, nc);
				assert_int_equal(hp_npy_read(path, &want), 0);
				assert_int_equal(run_case(ops[o].op, ops[o].nin, ops[o].fmod, in, &y, NULL), 0);
				if (!same(&y, &want, &at))
					fail_msg("%s (fmod %d) on %s, variant %d: element %lld differs from numpy", ops[o].op,
						 ops[o].fmod, hp_dtype_name(t), v, (long long)at);
				assert_int_equal(run_case(ops[o].op, ops[o].nin, ops[o].fmod, in, &y2, pool), 0);
				assert_memory_equal(y.data, y2.data, hp_tensor_bytes(&y));
				for (int k = 0; k < ops[o].nin; k++)
					hp_tensor_free(&in[k]);
				hp_tensor_free(&want);
				hp_tensor_free(&y);
				hp_tensor_free(&y2);
			}
	hp_pool_destroy(pool);
	snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
	(void)!system(cmd);
}

/* Clip on integers with float32 bounds (the importer's form of opset < 11
 * attributes): the bound rounds inward and saturates to the type. */
static void test_clip_float_bounds(void **state)
{
	int64_t d = 6;
	struct hp_tensor in[3] = { kt_tensor(HP_U8, 1, &d), kt_tensor(HP_F32, 0, &d), kt_tensor(HP_F32, 0, &d) };
	static const uint8_t x[6] = { 0, 1, 2, 3, 200, 255 };
	struct hp_tensor y;

	(void)state;
	memcpy(in[0].data, x, sizeof x);
	*(float *)in[1].data = 1.5f;   /* min 2 */
	*(float *)in[2].data = 300.0f; /* max saturates to 255 */
	assert_int_equal(run_case("Clip", 3, 0, in, &y, NULL), 0);
	for (int i = 0; i < 6; i++)
		assert_int_equal(((uint8_t *)y.data)[i], x[i] < 2 ? 2 : x[i]);
	hp_tensor_free(&y);
	*(float *)in[1].data = -1e10f; /* min saturates to 0 */
	*(float *)in[2].data = 2.5f;   /* max 2 */
	assert_int_equal(run_case("Clip", 3, 0, in, &y, NULL), 0);
	for (int i = 0; i < 6; i++)
		assert_int_equal(((uint8_t *)y.data)[i], x[i] > 2 ? 2 : x[i]);
	hp_tensor_free(&y);
	for (int i = 0; i < 3; i++)
		hp_tensor_free(&in[i]);
}

/* What has no loop is refused as unsupported, not as a shape error. */
static void test_unsupported(void **state)
{
	int64_t d = 4;
	struct hp_tensor h[2] = { kt_tensor(HP_F16, 1, &d), kt_tensor(HP_F16, 1, &d) };
	struct hp_tensor u[2] = { kt_tensor(HP_U8, 1, &d), kt_tensor(HP_U8, 1, &d) };
	struct hp_tensor y;

	(void)state;
	assert_int_equal(run_case("Add", 2, 0, h, &y, NULL), HP_EUNSUPPORTED);
	assert_non_null(strstr(hp_errmsg(), "float16"));
	assert_int_equal(run_case("Max", 2, 0, h, &y, NULL), HP_EUNSUPPORTED);
	assert_int_equal(run_case("Neg", 1, 0, u, &y, NULL), HP_EUNSUPPORTED);
	assert_int_equal(run_case("Mean", 2, 0, u, &y, NULL), HP_EUNSUPPORTED);
	assert_int_equal(run_case("Exp", 1, 0, u, &y, NULL), HP_EUNSUPPORTED);
	/* operands that disagree are a malformed model */
	struct hp_tensor mix[2] = { u[0], h[1] };
	assert_int_equal(run_case("Add", 2, 0, mix, &y, NULL), HP_ESHAPE);
	for (int i = 0; i < 2; i++) {
		hp_tensor_free(&h[i]);
		hp_tensor_free(&u[i]);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_vs_numpy),
		cmocka_unit_test(test_clip_float_bounds),
		cmocka_unit_test(test_unsupported),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
