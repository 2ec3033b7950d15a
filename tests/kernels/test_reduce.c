/* Reductions against a naive double reference: every axis subset of a 4-D
 * tensor with and without keepdims for all ten Reduce ops, axes as input
 * or attribute, negative and empty axes, noop_with_empty_axes, int32/int64,
 * empty reduced dims, accuracy of long sums, thread-count reproducibility,
 * ArgMax/ArgMin (ties, select_last_index, NaN) and errors. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "hpdlf/error.h"
#include "tests/kernels/harness.h"

static struct hp_pool *pool2;

static const char *const ops[] = {
	"ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd",
	"ReduceL1", "ReduceL2", "ReduceSumSquare", "ReduceLogSum", "ReduceLogSumExp",
};

static double get(const struct hp_tensor *t, int64_t i)
{
	switch (t->dtype) {
	case HP_F32: return ((const float *)t->data)[i];
	case HP_I32: return ((const int32_t *)t->data)[i];
	default: return (double)((const int64_t *)t->data)[i];
	}
}

/* Naive reference: output index of every input element, then the op. */
static void reference(int op, const struct hp_tensor *x, unsigned mask, double *out, int64_t nout)
{
	const struct hp_shape *s = &x->shape;
	int64_t n = hp_shape_numel(s), *cnt = calloc((size_t)nout + 1, sizeof *cnt);

	for (int64_t o = 0; o < nout; o++)
		out[o] = op == 4 ? 1 : op == 2 ? -INFINITY : op == 3 ? INFINITY : 0;
	for (int64_t i = 0; i < n; i++) {
		int64_t rem = i, o = 0, mul = 1;
		for (int d = s->rank - 1; d >= 0; d--) {
			int64_t c = rem % s->dims[d];
			rem /= s->dims[d];
			if (!((mask >> d) & 1)) {
				o += c * mul;
				mul *= s->dims[d];
			}
		}
		double v = get(x, i);
		cnt[o]++;
		switch (op) {
		case 2: out[o] = fmax(out[o], v); break;
		case 3: out[o] = fmin(out[o], v); break;
		case 4: out[o] *= v; break;
		case 5: out[o] += fabs(v); break;
		case 6: case 7: out[o] += v * v; break;
		case 9: out[o] += exp(v); break;
		default: out[o] += v; break;
		}
	}
	for (int64_t o = 0; o < nout; o++) {
		if (op == 1)
			out[o] = x->dtype == HP_F32 ? out[o] / (double)cnt[o] : trunc(out[o] / (double)cnt[o]);
		else if (op == 6)
			out[o] = sqrt(out[o]);
		else if (op == 8 || op == 9)
			out[o] = log(out[o]);
	}
	free(cnt);
}

static int run(const char *op, const struct hp_tensor *x, int naxes, const int64_t *axes, int as_input, int keep,
	       int noop, struct hp_tensor *y, struct hp_pool *pool)
{
	int64_t na = naxes;
	struct hp_tensor in[2] = { *x, kt_tensor(HP_I64, 1, &na) };
	struct hp_attr at[3];
	int nat = 0, rc;

	if (naxes)
		memcpy(in[1].data, axes, (size_t)naxes * sizeof *axes);
	at[nat++] = kt_int("keepdims", keep);
	if (noop)
		at[nat++] = kt_int("noop_with_empty_axes", 1);
	if (!as_input && naxes)
		at[nat++] = kt_ints("axes", naxes, axes);
	struct kt_case c = { .op = op, .nin = as_input ? 2 : 1, .in = in, .const_mask = 2, .nattrs = nat,
			     .attrs = at, .nout = 1, .pool = pool };
	rc = kt_run(&c, y);
	hp_tensor_free(&in[1]);
	return rc;
}

/* Expected output shape. */
static struct hp_shape out_shape(const struct hp_shape *s, unsigned mask, int keep)
{
	struct hp_shape o = { 0 };

	for (int d = 0; d < s->rank; d++)
		if (!((mask >> d) & 1))
			o.dims[o.rank++] = s->dims[d];
		else if (keep)
			o.dims[o.rank++] = 1;
	return o;
}

static double check(int op, const struct hp_tensor *x, unsigned mask, int keep, const struct hp_tensor *y)
{
	struct hp_shape want = out_shape(&x->shape, mask, keep);
	int64_t n = hp_shape_numel(&want);
	double *ref = malloc((size_t)(n ? n : 1) * sizeof *ref), err = 0;

	assert_true(hp_shape_equal(&want, &y->shape));
	assert_int_equal(y->dtype, x->dtype);
	reference(op, x, mask, ref, n);
	for (int64_t i = 0; i < n; i++) {
		double e = fabs(get(y, i) - ref[i]) / fmax(1, fabs(ref[i]));
		if (isinf(ref[i]) && get(y, i) == ref[i])
			e = 0;
		err = e > err || isnan(e) ? e : err;
	}
	free(ref);
	return err;
}

static void mask_axes(unsigned mask, int rank, int neg, int64_t *axes, int *na)
{
	*na = 0;
	for (int d = rank - 1; d >= 0; d--) /* reverse order on purpose */
		if ((mask >> d) & 1)
			axes[(*na)++] = neg ? d - rank : d;
}

static void test_all_axes(void **state)
{
	const int64_t dims[] = { 2, 3, 4, 5 };
	struct hp_tensor x = kt_tensor(HP_F32, 4, dims), y;

	(void)state;
	for (int op = 0; op < 10; op++) {
		kt_fill_random(&x, (unsigned)op + 1, op == 4 ? 0.5f : op == 8 ? 0.1f : -2, op == 4 ? 1.5f : 2);
		for (unsigned mask = 1; mask < 16; mask++)
			for (int keep = 0; keep < 2; keep++) {
				int64_t axes[4];
				int na;
				mask_axes(mask, 4, (int)mask & keep, axes, &na);
				assert_int_equal(run(ops[op], &x, na, axes, (int)(mask + (unsigned)op) & 1, keep, 0, &y, NULL), 0);
				double err = check(op, &x, mask, keep, &y);
				if (err > 1e-5)
					print_message("%s mask %x keep %d: err %g\n", ops[op], mask, keep, err);
				assert_true(err <= 1e-5);
				hp_tensor_free(&y);
			}
		/* Empty axes: all of them, or nothing with noop_with_empty_axes. */
		assert_int_equal(run(ops[op], &x, 0, NULL, 1, 0, 0, &y, NULL), 0);
		assert_true(check(op, &x, 15, 0, &y) <= 1e-5);
		hp_tensor_free(&y);
		assert_int_equal(run(ops[op], &x, 0, NULL, 0, 1, 0, &y, NULL), 0);
		assert_true(check(op, &x, 15, 1, &y) <= 1e-5);
		hp_tensor_free(&y);
		assert_int_equal(run(ops[op], &x, 0, NULL, 1, 1, 1, &y, NULL), 0);
		assert_memory_equal(y.data, x.data, hp_tensor_bytes(&x));
		hp_tensor_free(&y);
	}
	hp_tensor_free(&x);
}

/* Shapes with size-1 dims, long rows and columns (threads, column blocks). */
static void test_shapes_threads(void **state)
{
	struct { int rank; int64_t d[4]; unsigned mask; } cases[] = {
		{ 4, { 1, 3, 1, 5 }, 0x5 }, { 4, { 2, 1, 4, 1 }, 0x2 }, { 3, { 64, 1000, 1 }, 0x2 },
		{ 2, { 64, 1000 }, 0x1 }, { 2, { 3, 70000 }, 0x1 }, { 3, { 40, 30, 300 }, 0x5 },
		{ 3, { 7, 5000, 3 }, 0x2 }, { 1, { 1 }, 0x1 }, { 0, { 0 }, 0 },
		/* few outputs over many elements: the split path (chunks across runs) */
		{ 2, { 3, 70000 }, 0x3 }, { 3, { 5, 3, 30001 }, 0x5 }, { 1, { 300000 }, 0x1 },
	};

	(void)state;
	for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++)
		for (int op = 0; op < 10; op++) {
			struct hp_tensor x = kt_tensor(HP_F32, cases[k].rank, cases[k].d), y, y2;
			int64_t axes[4];
			int na;
			kt_fill_random(&x, (unsigned)(k * 10 + (size_t)op), op == 4 ? 0.9f : 0.1f, op == 4 ? 1.1f : 2);
			mask_axes(cases[k].mask, cases[k].rank, 0, axes, &na);
			if (!na) /* rank 0: reduce "all" (nothing) */
				assert_int_equal(run(ops[op], &x, 0, NULL, 1, 1, 0, &y, NULL), 0);
			else
				assert_int_equal(run(ops[op], &x, na, axes, 1, 1, 0, &y, NULL), 0);
			double err = check(op, &x, cases[k].mask, 1, &y);
			if (err > 1e-5)
				print_message("%s case %zu: err %g\n", ops[op], k, err);
			assert_true(err <= 1e-5);
			if (na) {
				assert_int_equal(run(ops[op], &x, na, axes, 1, 1, 0, &y2, pool2), 0);
				assert_memory_equal(y.data, y2.data, hp_tensor_bytes(&y));
				hp_tensor_free(&y2);
			}
			hp_tensor_free(&y);
			hp_tensor_free(&x);
		}
}

/* hpk_sum_f's order: eight double lanes over whole vectors of eight, the
 * rest into the first lanes, then ((0+4)+(1+5))+((2+6)+(3+7)). */
static double sum8(const float *x, int64_t n)
{
	double l[8] = { 0 };
	int64_t i = 0;

	for (; i + 8 <= n; i += 8)
		for (int k = 0; k < 8; k++)
			l[k] += x[i + k];
	for (int k = 0; i < n; i++, k++)
		l[k] += x[i];
	return ((l[0] + l[4]) + (l[1] + l[5])) + ((l[2] + l[6]) + (l[3] + l[7]));
}

/* ReduceSum and ReduceMean over the trailing axes of [N, C, H, W] (a
 * global pool's shape: reduce.c's path without offset divisions) bitwise
 * the documented order, 1 and 2 threads; data whose +-2^60 pairs make
 * any other order round otherwise. */
static void test_trailing_bits(void **state)
{
	static const int64_t shp[][4] = { { 1, 1280, 3, 3 }, { 2, 37, 3, 3 }, { 3, 5, 4, 5 }, { 1, 7, 1, 1 } };
	const int64_t axes[2] = { 2, 3 };

	(void)state;
	for (size_t t = 0; t < sizeof shp / sizeof shp[0]; t++)
		for (int mean = 0; mean < 2; mean++)
			for (int th = 0; th < 2; th++) {
				struct hp_tensor x = kt_tensor(HP_F32, 4, shp[t]), y;
				int64_t n = shp[t][2] * shp[t][3], np = shp[t][0] * shp[t][1];
				float *xv = x.data;
				kt_fill_random(&x, 7 + (unsigned)t, -2, 2);
				for (int64_t i = 0; i + 1 < np * n; i += 5)
					xv[i] = ldexpf(xv[i], 60), xv[i + 1] = -xv[i];
				assert_int_equal(run(mean ? "ReduceMean" : "ReduceSum", &x, 2, axes, 1, 1, 0, &y,
						     th ? pool2 : NULL), 0);
				for (int64_t o = 0; o < np; o++) {
					double sum = sum8(xv + o * n, n);
					float want = (float)(mean ? sum / (double)n : sum), got = ((float *)y.data)[o];
					if (memcmp(&want, &got, sizeof got))
						fail_msg("shape %zu %s output %lld: %a, want %a", t, mean ? "mean" : "sum",
							 (long long)o, (double)got, (double)want);
				}
				hp_tensor_free(&y);
				hp_tensor_free(&x);
			}
}

/* The split path's partition does not depend on the thread count: 1, 2
 * and 3 threads give the same bits. */
static void test_split_threads(void **state)
{
	int64_t d[2] = { 2, 400000 }, ax[2] = { 0, 1 };
	struct hp_tensor x = kt_tensor(HP_F32, 2, d), y1, y2, y3;
	struct hp_pool *pool3;

	(void)state;
	assert_int_equal(hp_pool_create(3, &pool3), 0);
	kt_fill_random(&x, 11, -1, 1);
	for (int op = 0; op < 10; op++) {
		if (op == 4 || op == 8)
			continue; /* Prod and LogSum of signed data are not the point here */
		assert_int_equal(run(ops[op], &x, 2, ax, 1, 0, 0, &y1, NULL), 0);
		assert_int_equal(run(ops[op], &x, 2, ax, 1, 0, 0, &y2, pool2), 0);
		assert_int_equal(run(ops[op], &x, 2, ax, 1, 0, 0, &y3, pool3), 0);
		assert_true(check(op, &x, 0x3, 0, &y1) <= 1e-5);
		assert_memory_equal(y1.data, y2.data, 4);
		assert_memory_equal(y1.data, y3.data, 4);
		hp_tensor_free(&y1);
		hp_tensor_free(&y2);
		hp_tensor_free(&y3);
	}
	hp_pool_destroy(pool3);
	hp_tensor_free(&x);
}

/* One long sum: double accumulation keeps it far below float rounding. */
static void test_accuracy(void **state)
{
	const int64_t n = 1 << 20;
	struct hp_tensor x = kt_tensor(HP_F32, 1, &n), y;
	int64_t ax = 0;
	double ref = 0;

	(void)state;
	kt_fill_random(&x, 3, 0, 1);
	for (int64_t i = 0; i < n; i++)
		ref += ((float *)x.data)[i];
	assert_int_equal(run("ReduceSum", &x, 1, &ax, 1, 0, 0, &y, pool2), 0);
	assert_true(fabs(((float *)y.data)[0] - ref) <= 0.6 * ref * 0x1p-23); /* within float rounding of exact */
	hp_tensor_free(&y);
	hp_tensor_free(&x);
}

static void test_int(void **state)
{
	const int64_t dims[] = { 3, 4, 5 };
	enum hp_dtype types[] = { HP_I32, HP_I64 };
	const int int_ops[] = { 0, 1, 2, 3, 4, 5, 7 };

	(void)state;
	for (int t = 0; t < 2; t++)
		for (size_t k = 0; k < sizeof int_ops / sizeof int_ops[0]; k++)
			for (unsigned mask = 1; mask < 8; mask++) {
				struct hp_tensor x = kt_tensor(types[t], 3, dims), y;
				int64_t axes[3];
				int na;
				for (int64_t i = 0; i < 60; i++) {
					int v = (int)((i * 7919 + (int64_t)mask * 31) % 11) - 5;
					if (int_ops[k] == 4)
						v = v % 2 ? -1 : 1;
					if (types[t] == HP_I32)
						((int32_t *)x.data)[i] = v;
					else
						((int64_t *)x.data)[i] = v;
				}
				mask_axes(mask, 3, 1, axes, &na);
				assert_int_equal(run(ops[int_ops[k]], &x, na, axes, 1, 0, 0, &y, NULL), 0);
				assert_true(check(int_ops[k], &x, mask, 0, &y) == 0);
				hp_tensor_free(&y);
				hp_tensor_free(&x);
			}
}

static void test_empty_dim(void **state)
{
	const int64_t dims[] = { 2, 0, 3 }, ax = 1;
	struct hp_tensor x = kt_tensor(HP_F32, 3, dims), y;
	const float want[] = { 0, NAN, -INFINITY, INFINITY, 1, 0, 0, 0, -INFINITY, -INFINITY };

	(void)state;
	for (int op = 0; op < 10; op++) {
		assert_int_equal(run(ops[op], &x, 1, &ax, 1, 0, 0, &y, NULL), 0);
		assert_int_equal(hp_shape_numel(&y.shape), 6);
		for (int i = 0; i < 6; i++) {
			float v = ((float *)y.data)[i];
			assert_true(isnan(want[op]) ? isnan(v) : v == want[op]);
		}
		hp_tensor_free(&y);
	}
	hp_tensor_free(&x);
}

static void test_errors(void **state)
{
	const int64_t dims[] = { 2, 3 }, rep[] = { 1, -1 }, bad[] = { 2 }, two = 2;
	struct hp_tensor x = kt_tensor(HP_F32, 2, dims), y, in[2] = { x, kt_tensor(HP_I64, 1, &two) };

	(void)state;
	assert_int_equal(run("ReduceSum", &x, 2, rep, 1, 1, 0, &y, NULL), HP_EMODEL);
	assert_non_null(strstr(hp_errmsg(), "node0"));
	assert_int_equal(run("ReduceMean", &x, 1, bad, 0, 1, 0, &y, NULL), HP_EMODEL);
	/* axes computed at run time cannot give a static output shape */
	struct kt_case c = { .op = "ReduceSum", .nin = 2, .in = in, .nout = 1 };
	assert_int_equal(kt_run(&c, &y), HP_EUNSUPPORTED);
	struct hp_tensor xb = kt_tensor(HP_BOOL, 2, dims);
	assert_int_equal(run("ReduceMax", &xb, 0, NULL, 1, 1, 0, &y, NULL), HP_EUNSUPPORTED);
	hp_tensor_free(&xb);
	hp_tensor_free(&in[1]);
	hp_tensor_free(&x);
}

/* ---- ArgMax / ArgMin ------------------------------------------------ */

static void arg_reference(int is_min, int last, const struct hp_tensor *x, int ax, int64_t *out)
{
	const struct hp_shape *s = &x->shape;
	int64_t outer = 1, len = s->dims[ax], inner = 1;

	for (int d = 0; d < ax; d++)
		outer *= s->dims[d];
	for (int d = ax + 1; d < s->rank; d++)
		inner *= s->dims[d];
	for (int64_t o = 0; o < outer; o++)
		for (int64_t i = 0; i < inner; i++) {
			int64_t best = 0;
			for (int64_t k = 1; k < len; k++) {
				double v = get(x, (o * len + k) * inner + i), b = get(x, (o * len + best) * inner + i);
				if (is_min ? (v < b || (last && v == b)) : (v > b || (last && v == b)))
					best = k;
			}
			out[o * inner + i] = best;
		}
}

static void test_argmax(void **state)
{
	const int64_t dims[] = { 3, 4, 5 };
	enum hp_dtype types[] = { HP_F32, HP_I64, HP_I32 };

	(void)state;
	for (int t = 0; t < 3; t++)
		for (int is_min = 0; is_min < 2; is_min++)
			for (int axis = -3; axis < 3; axis++)
				for (int flags = 0; flags < 4; flags++) {
					struct hp_tensor x = kt_tensor(types[t], 3, dims), y;
					int keep = flags & 1, last = flags >> 1, ax = axis < 0 ? axis + 3 : axis;
					int64_t want[60];
					struct hp_attr at[3] = { kt_int("axis", axis), kt_int("keepdims", keep),
								 kt_int("select_last_index", last) };
					for (int i = 0; i < 60; i++) { /* few distinct values: many ties */
						int v = (i * 37 + t) % 4;
						if (types[t] == HP_F32)
							((float *)x.data)[i] = (float)v;
						else if (types[t] == HP_I64)
							((int64_t *)x.data)[i] = v;
						else
							((int32_t *)x.data)[i] = v;
					}
					struct kt_case c = { .op = is_min ? "ArgMin" : "ArgMax", .nin = 1, .in = &x,
							     .nattrs = 3, .attrs = at, .nout = 1 };
					assert_int_equal(kt_run(&c, &y), 0);
					assert_int_equal(y.dtype, HP_I64);
					struct hp_shape ws = out_shape(&x.shape, 1u << ax, keep);
					assert_true(hp_shape_equal(&ws, &y.shape));
					arg_reference(is_min, last, &x, ax, want);
					assert_memory_equal(y.data, want, (size_t)hp_shape_numel(&ws) * sizeof(int64_t));
					hp_tensor_free(&y);
					hp_tensor_free(&x);
				}
}

static void test_argmax_nan(void **state)
{
	const int64_t d = 5;
	struct hp_tensor x = kt_tensor(HP_F32, 1, &d), y;
	const float v[] = { 1, NAN, 7, NAN, 2 };

	(void)state;
	memcpy(x.data, v, sizeof v);
	struct kt_case c = { .op = "ArgMax", .nin = 1, .in = &x, .nout = 1 };
	assert_int_equal(kt_run(&c, &y), 0);
	assert_int_equal(((int64_t *)y.data)[0], 1); /* numpy: first NaN */
	hp_tensor_free(&y);
	hp_tensor_free(&x);
}

static int setup(void **state)
{
	(void)state;
	return hp_pool_create(2, &pool2);
}

static int teardown(void **state)
{
	(void)state;
	hp_pool_destroy(pool2);
	return 0;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_all_axes),
		cmocka_unit_test(test_shapes_threads),
		cmocka_unit_test(test_split_threads),
		cmocka_unit_test(test_trailing_bits),
		cmocka_unit_test(test_accuracy),
		cmocka_unit_test(test_int),
		cmocka_unit_test(test_empty_dim),
		cmocka_unit_test(test_errors),
		cmocka_unit_test(test_argmax),
		cmocka_unit_test(test_argmax_nan),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
