/* Shape-family kernels against naive per-element references. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "hpdlf/error.h"
#include "kernels/threadpool.h" /* hp_pool_test_delay */
#include "tests/kernels/harness.h"

/* ---- helpers ------------------------------------------------------------ */

static const int64_t no_dims[1] = { 0 }; /* dims of a scalar */

static struct hp_tensor vec64(int n, const int64_t *v)
{
	int64_t d = n;
	struct hp_tensor t = kt_tensor(HP_I64, 1, &d);

	if (n)
		memcpy(t.data, v, (size_t)n * sizeof *v);
	return t;
}

static struct hp_tensor scalar64(int64_t v)
{
	struct hp_tensor t = kt_tensor(HP_I64, 0, no_dims);

	*(int64_t *)t.data = v;
	return t;
}

/* Tensor of dtype dt filled with distinct-ish pseudo-random bytes. */
static struct hp_tensor rnd(enum hp_dtype dt, int rank, const int64_t *dims, unsigned seed)
{
	struct hp_tensor t = kt_tensor(dt, rank, dims);
	size_t b = hp_tensor_bytes(&t);
	uint32_t x = seed * 2654435761u + 1;

	for (size_t i = 0; i < b; i++) {
		x = x * 1664525u + 1013904223u;
		((uint8_t *)t.data)[i] = (uint8_t)(x >> 24);
	}
	return t;
}

static int run(const char *op, int nin, const struct hp_tensor *in, unsigned cmask, int na,
	       const struct hp_attr *at, int nout, struct hp_tensor *out)
{
	struct kt_case c = { .op = op, .nin = nin, .in = in, .const_mask = cmask, .nattrs = na, .attrs = at,
			     .nout = nout };
	return kt_run(&c, out);
}

static void free_all(struct hp_tensor *t, int n)
{
	for (int i = 0; i < n; i++)
		hp_tensor_free(&t[i]);
}

static void strides(const struct hp_shape *s, int64_t *st)
{
	int64_t m = 1;

	for (int d = s->rank - 1; d >= 0; d--) {
		st[d] = m;
		m *= s->dims[d];
	}
}

/* Naive reference driver: for each output multi-index, map() returns the
 * flat input index or -1 for `fill`. */
typedef int64_t (*map_fn)(const void *ctx, const struct hp_shape *xs, const int64_t *oidx);

static struct hp_tensor ref_apply(const struct hp_tensor *x, const struct hp_shape *os, map_fn map,
				  const void *ctx, const void *fill)
{
	struct hp_tensor y = kt_tensor(x->dtype, os->rank, os->dims);
	size_t es = hp_dtype_size(x->dtype);
	int64_t n = hp_shape_numel(os), idx[HP_MAX_RANK] = { 0 };

	for (int64_t i = 0; i < n; i++) {
		int64_t k = map(ctx, &x->shape, idx);
		memcpy((char *)y.data + i * es, k < 0 ? fill : (const char *)x->data + k * es, es);
		for (int d = os->rank - 1; d >= 0; d--) {
			if (++idx[d] < os->dims[d])
				break;
			idx[d] = 0;
		}
	}
	return y;
}

static void assert_same(const struct hp_tensor *a, const struct hp_tensor *b)
{
	assert_int_equal(a->dtype, b->dtype);
	assert_int_equal(a->shape.rank, b->shape.rank);
	for (int d = 0; d < a->shape.rank; d++)
		assert_int_equal(a->shape.dims[d], b->shape.dims[d]);
	assert_memory_equal(a->data, b->data, hp_tensor_bytes(b));
}

/* ---- Reshape, Flatten, Squeeze, Unsqueeze ------------------------------ */

static void check_reshape(const int64_t *xd, int xr, const int64_t *sh, int sn, int allowzero,
			  const int64_t *want, int wr)
{
	struct hp_tensor in[2] = { rnd(HP_F32, xr, xd, 1), vec64(sn, sh) }, out;
	struct hp_attr a = kt_int("allowzero", allowzero);

	assert_int_equal(run("Reshape", 2, in, 2, 1, &a, 1, &out), 0);
	assert_int_equal(out.shape.rank, wr);
	for (int d = 0; d < wr; d++)
		assert_int_equal(out.shape.dims[d], want[d]);
	assert_memory_equal(out.data, in[0].data, hp_tensor_bytes(&in[0]));
	hp_tensor_free(&out);
	free_all(in, 2);
}

static void test_reshape(void **state)
{
	(void)state;
	check_reshape((int64_t[]){ 2, 3, 4 }, 3, (int64_t[]){ 4, -1 }, 2, 0, (int64_t[]){ 4, 6 }, 2);
	check_reshape((int64_t[]){ 2, 3, 4 }, 3, (int64_t[]){ 0, -1 }, 2, 0, (int64_t[]){ 2, 12 }, 2);
	check_reshape((int64_t[]){ 2, 3, 4 }, 3, (int64_t[]){ 0, 0, 2, 2 }, 4, 0, (int64_t[]){ 2, 3, 2, 2 }, 4);
	check_reshape((int64_t[]){ 2, 3, 4 }, 3, (int64_t[]){ -1 }, 1, 0, (int64_t[]){ 24 }, 1);
	check_reshape((int64_t[]){ 1 }, 1, NULL, 0, 0, NULL, 0);
	/* allowzero: 0 is a real zero dim */
	check_reshape((int64_t[]){ 0, 3 }, 2, (int64_t[]){ 3, 0 }, 2, 1, (int64_t[]){ 3, 0 }, 2);
}

static void test_reshape_errors(void **state)
{
	struct hp_tensor in[2] = { rnd(HP_F32, 2, (int64_t[]){ 2, 3 }, 1), vec64(2, (int64_t[]){ 4, 2 }) }, out;

	(void)state;
	assert_int_equal(run("Reshape", 2, in, 2, 0, NULL, 1, &out), HP_ESHAPE);
	assert_non_null(strstr(hp_errmsg(), "node0"));
	assert_non_null(strstr(hp_errmsg(), "Reshape"));
	/* the shape input is not a compile-time constant */
	assert_int_equal(run("Reshape", 2, in, 0, 0, NULL, 1, &out), HP_ENOTCONST);
	assert_non_null(strstr(hp_errmsg(), "node0"));
	assert_non_null(strstr(hp_errmsg(), "shape"));
	hp_tensor_free(&in[1]);
	in[1] = vec64(2, (int64_t[]){ -1, -1 });
	assert_int_equal(run("Reshape", 2, in, 2, 0, NULL, 1, &out), HP_ESHAPE);
	free_all(in, 2);
}

static void check_shape_only(const char *op, const int64_t *xd, int xr, int na, const struct hp_attr *at,
			     const struct hp_tensor *axes, const int64_t *want, int wr, int err)
{
	struct hp_tensor in[2] = { rnd(HP_I64, xr, xd, 7), { 0 } }, out;
	int rc;

	if (axes)
		in[1] = *axes;
	rc = run(op, axes ? 2 : 1, in, 2, na, at, 1, &out);
	assert_int_equal(rc, err);
	if (!err) {
		assert_int_equal(out.shape.rank, wr);
		for (int d = 0; d < wr; d++)
			assert_int_equal(out.shape.dims[d], want[d]);
		assert_memory_equal(out.data, in[0].data, hp_tensor_bytes(&in[0]));
		hp_tensor_free(&out);
	}
	hp_tensor_free(&in[0]);
}

static void test_flatten_squeeze_unsqueeze(void **state)
{
	int64_t x[] = { 2, 1, 3, 1 };
	struct hp_attr a;
	struct hp_tensor ax;

	(void)state;
	a = kt_int("axis", 0);
	check_shape_only("Flatten", x, 4, 1, &a, NULL, (int64_t[]){ 1, 6 }, 2, 0);
	a = kt_int("axis", -1);
	check_shape_only("Flatten", x, 4, 1, &a, NULL, (int64_t[]){ 6, 1 }, 2, 0);
	a = kt_int("axis", 4);
	check_shape_only("Flatten", x, 4, 1, &a, NULL, (int64_t[]){ 6, 1 }, 2, 0);
	check_shape_only("Flatten", x, 4, 0, NULL, NULL, (int64_t[]){ 2, 3 }, 2, 0);
	a = kt_int("axis", 5);
	check_shape_only("Flatten", x, 4, 1, &a, NULL, NULL, 0, HP_ESHAPE);

	check_shape_only("Squeeze", x, 4, 0, NULL, NULL, (int64_t[]){ 2, 3 }, 2, 0);
	ax = vec64(1, (int64_t[]){ -1 });
	check_shape_only("Squeeze", x, 4, 0, NULL, &ax, (int64_t[]){ 2, 1, 3 }, 3, 0);
	hp_tensor_free(&ax);
	a = kt_ints("axes", 1, (int64_t[]){ 1 });
	check_shape_only("Squeeze", x, 4, 1, &a, NULL, (int64_t[]){ 2, 3, 1 }, 3, 0);
	a = kt_ints("axes", 1, (int64_t[]){ 0 });
	check_shape_only("Squeeze", x, 4, 1, &a, NULL, NULL, 0, HP_ESHAPE);

	ax = vec64(2, (int64_t[]){ 0, -1 });
	check_shape_only("Unsqueeze", (int64_t[]){ 2, 3 }, 2, 0, NULL, &ax, (int64_t[]){ 1, 2, 3, 1 }, 4, 0);
	hp_tensor_free(&ax);
	a = kt_ints("axes", 2, (int64_t[]){ 3, 1 });
	check_shape_only("Unsqueeze", (int64_t[]){ 2, 3 }, 2, 1, &a, NULL, (int64_t[]){ 2, 1, 3, 1 }, 4, 0);
	a = kt_ints("axes", 2, (int64_t[]){ 1, 1 });
	check_shape_only("Unsqueeze", (int64_t[]){ 2, 3 }, 2, 1, &a, NULL, NULL, 0, HP_ESHAPE);
	check_shape_only("Identity", x, 4, 0, NULL, NULL, x, 4, 0);
}

/* ---- Transpose --------------------------------------------------------- */

static int64_t map_transpose(const void *ctx, const struct hp_shape *xs, const int64_t *o)
{
	const int *perm = ctx;
	int64_t st[HP_MAX_RANK], k = 0;

	strides(xs, st);
	for (int d = 0; d < xs->rank; d++)
		k += o[d] * st[perm[d]];
	return k;
}

static void check_transpose(enum hp_dtype dt, int rank, const int64_t *dims, const int *perm, unsigned seed)
{
	struct hp_tensor x = rnd(dt, rank, dims, seed), out, ref;
	struct hp_shape os = { .rank = rank };
	int64_t p64[HP_MAX_RANK];
	struct hp_attr a;

	for (int d = 0; d < rank; d++) {
		p64[d] = perm[d];
		os.dims[d] = dims[perm[d]];
	}
	a = kt_ints("perm", rank, p64);
	assert_int_equal(run("Transpose", 1, &x, 0, 1, &a, 1, &out), 0);
	ref = ref_apply(&x, &os, map_transpose, perm, NULL);
	assert_same(&out, &ref);
	free_all((struct hp_tensor[]){ x, out, ref }, 3);
}

static void test_transpose(void **state)
{
	static const enum hp_dtype dts[] = { HP_F32, HP_I64, HP_U8, HP_F16 };
	unsigned seed = 1;

	(void)state;
	check_transpose(HP_F32, 2, (int64_t[]){ 37, 70 }, (int[]){ 1, 0 }, 1);
	check_transpose(HP_F32, 4, (int64_t[]){ 2, 5, 9, 33 }, (int[]){ 0, 2, 3, 1 }, 2);
	check_transpose(HP_F32, 4, (int64_t[]){ 2, 33, 9, 5 }, (int[]){ 0, 3, 1, 2 }, 3);
	check_transpose(HP_F32, 3, (int64_t[]){ 1, 4, 1 }, (int[]){ 2, 0, 1 }, 4);
	for (int t = 0; t < 4; t++)
		for (int k = 0; k < 6; k++, seed++) {
			int64_t dims[5];
			int perm[5], rank = 2 + (int)(seed % 4);
			for (int d = 0; d < rank; d++) {
				dims[d] = 1 + (seed * 7 + (unsigned)d * 5) % 6;
				perm[d] = d;
			}
			for (int d = rank - 1; d > 0; d--) { /* deterministic shuffle */
				int j = (int)((seed * 31 + (unsigned)d * 17) % (unsigned)(d + 1)), tmp = perm[d];
				perm[d] = perm[j];
				perm[j] = tmp;
			}
			check_transpose(dts[t], rank, dims, perm, seed);
		}
	/* default perm: reversed */
	{
		struct hp_tensor x = rnd(HP_F32, 3, (int64_t[]){ 2, 3, 4 }, 5), out, ref;
		struct hp_shape os = { 3, { 4, 3, 2 } };
		assert_int_equal(run("Transpose", 1, &x, 0, 0, NULL, 1, &out), 0);
		ref = ref_apply(&x, &os, map_transpose, (int[]){ 2, 1, 0 }, NULL);
		assert_same(&out, &ref);
		free_all((struct hp_tensor[]){ x, out, ref }, 3);
	}
}

/* The blocked 2-D path in 8x8 register blocks (4-byte elements, whole
 * 32x32 tiles) beside its edge tiles, batched, on one and two threads,
 * against the naive index map. */
static void test_transpose_tiles(void **state)
{
	static const struct {
		int rank;
		int64_t dims[3];
		int perm[3];
	} cs[] = {
		{ 2, { 96, 64 }, { 1, 0 } }, { 2, { 64, 200 }, { 1, 0 } }, { 3, { 3, 64, 40 }, { 0, 2, 1 } },
		{ 2, { 256, 1024 }, { 1, 0 } }, { 3, { 2, 33, 65 }, { 0, 2, 1 } },
	};
	struct hp_pool *pool;

	(void)state;
	assert_int_equal(hp_pool_create(2, &pool), 0);
	for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++) {
		struct hp_tensor x = rnd(HP_F32, cs[i].rank, cs[i].dims, 40 + (unsigned)i), out[2], ref;
		struct hp_shape os = { .rank = cs[i].rank };
		int64_t p64[3];
		struct hp_attr a;
		for (int d = 0; d < cs[i].rank; d++) {
			p64[d] = cs[i].perm[d];
			os.dims[d] = cs[i].dims[cs[i].perm[d]];
		}
		a = kt_ints("perm", cs[i].rank, p64);
		for (int t = 0; t < 2; t++) {
			struct kt_case c = { .op = "Transpose", .nin = 1, .in = &x, .nattrs = 1, .attrs = &a, .nout = 1,
					     .pool = t ? pool : NULL };
			assert_int_equal(kt_run(&c, &out[t]), 0);
		}
		ref = ref_apply(&x, &os, map_transpose, cs[i].perm, NULL);
		assert_same(&out[0], &ref);
		assert_same(&out[1], &ref);
		free_all((struct hp_tensor[]){ x, out[0], out[1], ref }, 4);
	}
	hp_pool_destroy(pool);
}

/* ---- Concat / Split ---------------------------------------------------- */

/* Concat and Split of a few MiB (the parallel path, from 2 MiB: units of
 * 64 KiB of the whole that start inside pieces and outer rows) along
 * axes 0, 1 and 2, against index loops: on one thread, then on two with
 * the worker, the caller or neither delayed (hp_pool_test_delay: the other
 * thread steals the late one's units). */
static void check_concat(const struct hp_tensor *out, const struct hp_tensor *in, const int64_t (*d)[4], int axis)
{
	int64_t st[4] = { 0, d[0][axis], d[0][axis] + d[1][axis], 0 }, od[4];

	for (int q = 0; q < 4; q++)
		od[q] = q == axis ? st[2] + d[2][axis] : d[0][q];
	for (int64_t i = 0; i < od[0] * od[1] * od[2] * od[3]; i++) {
		int64_t ix[4], r = i, k = 0, pi = 0;
		for (int q = 3; q >= 0; q--) {
			ix[q] = r % od[q];
			r /= od[q];
		}
		while (k < 2 && ix[axis] >= st[k + 1])
			k++;
		ix[axis] -= st[k];
		for (int q = 0; q < 4; q++)
			pi = pi * d[k][q] + ix[q];
		if (memcmp((const float *)out->data + i, (const float *)in[k].data + pi, sizeof(float)))
			fail_msg("Concat along %d: element %lld", axis, (long long)i);
	}
}

static void concat_steal_case(int axis, struct hp_pool *pool)
{
	int64_t d[3][4], f = axis == 2 ? 20 : 1, w[3] = { 5 * f, 7 * f, f }; /* 2.3 MiB and more */
	struct hp_tensor in[3], out, parts[3];
	struct hp_attr a = kt_int("axis", axis);

	for (int k = 0; k < 3; k++) {
		const int64_t base[4] = { 6, 4, 77, 151 };
		for (int q = 0; q < 4; q++)
			d[k][q] = q == axis ? w[k] : base[q];
		in[k] = rnd(HP_F32, 4, d[k], 70 + (unsigned)k);
	}
	for (int who = 2; who >= -1; who--) {
		struct hp_tensor sin[2] = { { 0 }, vec64(3, w) };
		struct kt_case c = { .op = "Concat", .nin = 3, .in = in, .nattrs = 1, .attrs = &a, .nout = 1,
				     .pool = who < 2 ? pool : NULL };
		struct kt_case sc = { .op = "Split", .nin = 2, .in = sin, .const_mask = 2, .nattrs = 1, .attrs = &a, .nout = 3,
				      .pool = c.pool };
		if (who == 0 || who == 1)
			hp_pool_test_delay(who, 2000000);
		assert_int_equal(kt_run(&c, &out), 0);
		sin[0] = out;
		assert_int_equal(kt_run(&sc, parts), 0);
		hp_pool_test_delay(who == 1, 0);
		check_concat(&out, in, (const int64_t(*)[4])d, axis);
		for (int k = 0; k < 3; k++)
			assert_same(&parts[k], &in[k]);
		free_all(parts, 3);
		hp_tensor_free(&sin[1]);
		hp_tensor_free(&out);
	}
	free_all(in, 3);
}

static void test_concat_steal(void **state)
{
	struct hp_pool *pool;

	(void)state;
	assert_int_equal(hp_pool_create(2, &pool), 0);
	for (int axis = 0; axis < 3; axis++)
		concat_steal_case(axis, pool);
	hp_pool_destroy(pool);
}

static void test_concat_split(void **state)
{
	int64_t d0[] = { 2, 3, 4 }, d1[] = { 2, 1, 4 }, d2[] = { 2, 5, 4 };
	struct hp_tensor in[3] = { rnd(HP_F32, 3, d0, 1), rnd(HP_F32, 3, d1, 2), rnd(HP_F32, 3, d2, 3) };
	struct hp_tensor out, parts[3];
	struct hp_attr a = kt_int("axis", -2);
	const int64_t w[3] = { 3, 1, 5 };

	(void)state;
	assert_int_equal(run("Concat", 3, in, 0, 1, &a, 1, &out), 0);
	assert_int_equal(out.shape.dims[1], 9);
	for (int i = 0; i < 2; i++)
		for (int j = 0, src = 0, jj = 0; j < 9; j++, jj++) {
			if (jj == w[src]) {
				src++;
				jj = 0;
			}
			for (int k = 0; k < 4; k++)
				assert_memory_equal((float *)out.data + (i * 9 + j) * 4 + k,
						    (float *)in[src].data + (i * w[src] + jj) * 4 + k, 4);
		}
	/* Split back: split as input, attribute, and error for a wrong sum */
	{
		struct hp_tensor sin[2] = { out, vec64(3, w) };
		struct hp_attr sa[2] = { kt_int("axis", 1), kt_ints("split", 3, w) };
		assert_int_equal(run("Split", 2, sin, 2, 1, sa, 3, parts), 0);
		for (int k = 0; k < 3; k++)
			assert_same(&parts[k], &in[k]);
		free_all(parts, 3);
		assert_int_equal(run("Split", 1, sin, 0, 2, sa, 3, parts), 0);
		for (int k = 0; k < 3; k++)
			assert_same(&parts[k], &in[k]);
		free_all(parts, 3);
		((int64_t *)sin[1].data)[0] = 4;
		assert_int_equal(run("Split", 2, sin, 2, 1, sa, 3, parts), HP_ESHAPE);
		hp_tensor_free(&sin[1]);
	}
	/* equal split along axis 0 (2 parts of 1), uneven with num_outputs */
	{
		struct hp_attr sa[2] = { kt_int("axis", 0), kt_int("num_outputs", 2) };
		struct hp_tensor x = rnd(HP_U8, 1, (int64_t[]){ 5 }, 9);
		assert_int_equal(run("Split", 1, &out, 0, 1, sa, 2, parts), 0);
		assert_int_equal(parts[0].shape.dims[0], 1);
		assert_memory_equal(parts[1].data, (char *)out.data + 36 * 4, 36 * 4);
		free_all(parts, 2);
		assert_int_equal(run("Split", 1, &x, 0, 1, sa, 2, parts), HP_ESHAPE);
		assert_int_equal(run("Split", 1, &x, 0, 2, sa, 2, parts), 0);
		assert_int_equal(parts[0].shape.dims[0], 3);
		assert_int_equal(parts[1].shape.dims[0], 2);
		assert_memory_equal(parts[1].data, (char *)x.data + 3, 2);
		free_all(parts, 2);
		hp_tensor_free(&x);
	}
	hp_tensor_free(&out);
	free_all(in, 3);
}

/* ---- Slice ------------------------------------------------------------- */

/* CPython's PySlice_AdjustIndices (numpy's slicing), with the one place
 * where the ONNX spec differs: for a negative step, a start still negative
 * after adding the dim is clamped to 0 (numpy: empty slice). */
static int64_t py_slice(int64_t len, int64_t start, int64_t stop, int64_t step, int64_t *first)
{
	if (start < 0) {
		start += len;
		if (start < 0)
			start = step < 0 && len > 0 ? 0 : step < 0 ? -1 : 0;
	} else if (start >= len) {
		start = step < 0 ? len - 1 : len;
	}
	if (stop < 0) {
		stop += len;
		if (stop < 0)
			stop = step < 0 ? -1 : 0;
	} else if (stop >= len) {
		stop = step < 0 ? len - 1 : len;
	}
	*first = start;
	if (step < 0)
		return stop < start ? (start - stop - 1) / (-step) + 1 : 0;
	return start < stop ? (stop - start - 1) / step + 1 : 0;
}

struct slice_ctx {
	int64_t first[HP_MAX_RANK], step[HP_MAX_RANK];
};

static int64_t map_slice(const void *ctx, const struct hp_shape *xs, const int64_t *o)
{
	const struct slice_ctx *c = ctx;
	int64_t st[HP_MAX_RANK], k = 0;

	strides(xs, st);
	for (int d = 0; d < xs->rank; d++)
		k += (c->first[d] + o[d] * c->step[d]) * st[d];
	return k;
}

static void check_slice(const int64_t *dims, int rank, int n, const int64_t *st, const int64_t *en,
			const int64_t *ax, const int64_t *sp, int as_attr)
{
	struct hp_tensor x = rnd(HP_F32, rank, dims, 3), in[5], out, ref;
	struct slice_ctx c;
	struct hp_shape os = { .rank = rank };
	struct hp_attr at[3];
	int nin = 3, rc;

	for (int d = 0; d < rank; d++) {
		c.first[d] = 0;
		c.step[d] = 1;
		os.dims[d] = dims[d];
	}
	for (int i = 0; i < n; i++) {
		int d = (int)(ax ? (ax[i] < 0 ? ax[i] + rank : ax[i]) : i);
		int64_t s = sp ? sp[i] : 1;
		os.dims[d] = py_slice(dims[d], st[i], en[i], s, &c.first[d]);
		c.step[d] = s;
	}
	memset(in, 0, sizeof in);
	in[0] = x;
	if (as_attr) {
		at[0] = kt_ints("starts", n, st);
		at[1] = kt_ints("ends", n, en);
		at[2] = kt_ints("axes", n, ax);
		rc = run("Slice", 1, in, 0, ax ? 3 : 2, at, 1, &out);
	} else {
		in[1] = vec64(n, st);
		in[2] = vec64(n, en);
		if (ax) {
			in[3] = vec64(n, ax);
			nin = 4;
		}
		if (sp) {
			in[4] = vec64(n, sp);
			nin = 5;
		}
		rc = run("Slice", nin, in, 0x1e, 0, NULL, 1, &out);
	}
	assert_int_equal(rc, 0);
	ref = ref_apply(&x, &os, map_slice, &c, NULL);
	assert_same(&out, &ref);
	hp_tensor_free(&out);
	hp_tensor_free(&ref);
	free_all(in, 5);
}

static void test_slice(void **state)
{
	const int64_t d3[] = { 5, 6, 7 }, big = INT64_MAX, small = INT64_MIN;

	(void)state;
	check_slice(d3, 3, 2, (int64_t[]){ 1, 0 }, (int64_t[]){ 3, 4 }, NULL, NULL, 0);
	check_slice(d3, 3, 1, (int64_t[]){ 2 }, (int64_t[]){ big }, (int64_t[]){ -1 }, NULL, 0);
	check_slice(d3, 3, 1, (int64_t[]){ -1 }, (int64_t[]){ small }, (int64_t[]){ 1 }, (int64_t[]){ -1 }, 0);
	check_slice(d3, 3, 2, (int64_t[]){ -100, 100 }, (int64_t[]){ 100, -100 }, (int64_t[]){ 0, 2 },
		    (int64_t[]){ 2, -3 }, 0);
	check_slice(d3, 3, 3, (int64_t[]){ 4, 1, 6 }, (int64_t[]){ 1, 5, -8 }, (int64_t[]){ 0, 1, 2 },
		    (int64_t[]){ -2, 3, -1 }, 0);
	check_slice(d3, 3, 1, (int64_t[]){ 3 }, (int64_t[]){ 3 }, (int64_t[]){ 1 }, NULL, 0); /* empty */
	check_slice(d3, 3, 2, (int64_t[]){ 1, -3 }, (int64_t[]){ big, big }, (int64_t[]){ 0, -1 }, NULL, 1);
	/* many random cases against CPython's rule */
	for (unsigned s = 1; s < 200; s++) {
		int64_t st = (int64_t)(s * 7 % 17) - 8, en = (int64_t)(s * 13 % 19) - 9;
		int64_t sp = (int64_t)(s % 7) - 3;
		if (!sp)
			sp = 2;
		if (s % 11 == 0)
			en = sp > 0 ? big : small;
		check_slice(d3, 3, 1, &st, &en, (int64_t[]){ (int64_t)(s % 3) }, &sp, 0);
	}
	{
		struct hp_tensor in[5] = { rnd(HP_F32, 1, (int64_t[]){ 4 }, 1), vec64(1, (int64_t[]){ 0 }),
					   vec64(1, (int64_t[]){ 2 }), vec64(1, (int64_t[]){ 0 }),
					   vec64(1, (int64_t[]){ 0 }) }, out;
		assert_int_equal(run("Slice", 5, in, 0x1e, 0, NULL, 1, &out), HP_ESHAPE); /* step 0 */
		assert_int_equal(run("Slice", 3, in, 0x2, 0, NULL, 1, &out), HP_ENOTCONST); /* ends not const */
		assert_non_null(strstr(hp_errmsg(), "ends"));
		free_all(in, 5);
	}
}

/* ---- Gather ------------------------------------------------------------ */

static void check_gather(enum hp_dtype dt, enum hp_dtype it, const int64_t *xd, int xr, const int64_t *id,
			 int ir, int axis, unsigned seed)
{
	struct hp_tensor in[2] = { rnd(dt, xr, xd, seed), kt_tensor(it, ir, id) }, out;
	int64_t ni = hp_shape_numel(&in[1].shape), outer = 1, inner = hp_dtype_size(dt), ax = axis < 0 ? axis + xr : axis;
	struct hp_attr a = kt_int("axis", axis);

	for (int64_t i = 0; i < ni; i++) {
		int64_t v = (int64_t)((seed + (unsigned)i * 7) % (unsigned)(2 * xd[ax])) - xd[ax];
		if (it == HP_I64)
			((int64_t *)in[1].data)[i] = v;
		else
			((int32_t *)in[1].data)[i] = (int32_t)v;
	}
	for (int d = 0; d < ax; d++)
		outer *= xd[d];
	for (int d = (int)ax + 1; d < xr; d++)
		inner *= xd[d];
	assert_int_equal(run("Gather", 2, in, seed & 1 ? 2 : 0, 1, &a, 1, &out), 0);
	assert_int_equal(out.shape.rank, xr - 1 + ir);
	for (int64_t o = 0; o < outer; o++)
		for (int64_t i = 0; i < ni; i++) {
			int64_t k = it == HP_I64 ? ((int64_t *)in[1].data)[i] : ((int32_t *)in[1].data)[i];
			if (k < 0)
				k += xd[ax];
			assert_memory_equal((char *)out.data + (o * ni + i) * inner,
					    (char *)in[0].data + (o * xd[ax] + k) * inner, (size_t)inner);
		}
	hp_tensor_free(&out);
	free_all(in, 2);
}

static void test_gather(void **state)
{
	(void)state;
	check_gather(HP_F32, HP_I64, (int64_t[]){ 5, 4, 3 }, 3, (int64_t[]){ 2, 3 }, 2, 0, 1);
	check_gather(HP_F32, HP_I32, (int64_t[]){ 5, 4, 3 }, 3, (int64_t[]){ 7 }, 1, 1, 2);
	check_gather(HP_I64, HP_I64, (int64_t[]){ 5, 4, 3 }, 3, (int64_t[]){ 4 }, 1, -1, 3);
	check_gather(HP_U8, HP_I32, (int64_t[]){ 6 }, 1, no_dims, 0, 0, 4); /* scalar index */
	check_gather(HP_I64, HP_I64, (int64_t[]){ 3 }, 1, (int64_t[]){ 0 }, 1, 0, 5); /* no index */
	{
		struct hp_tensor in[2] = { rnd(HP_F32, 2, (int64_t[]){ 3, 2 }, 1), vec64(2, (int64_t[]){ 1, 3 }) }, out;
		assert_int_equal(run("Gather", 2, in, 0, 0, NULL, 1, &out), HP_EDATA);
		assert_non_null(strstr(hp_errmsg(), "node0"));
		assert_non_null(strstr(hp_errmsg(), "out of range"));
		/* same at compile time, when everything is constant */
		assert_int_equal(run("Gather", 2, in, 3, 0, NULL, 1, &out), HP_EDATA);
		((int64_t *)in[1].data)[1] = -4;
		assert_int_equal(run("Gather", 2, in, 0, 0, NULL, 1, &out), HP_EDATA);
		free_all(in, 2);
	}
}

static void test_gather_elements(void **state)
{
	struct hp_tensor in[2] = { rnd(HP_F32, 2, (int64_t[]){ 3, 4 }, 1), kt_tensor(HP_I64, 2, (int64_t[]){ 2, 4 }) };
	struct hp_tensor out;
	struct hp_attr a = kt_int("axis", 0);
	int64_t *ix = in[1].data;

	(void)state;
	for (int i = 0; i < 8; i++)
		ix[i] = (i * 5) % 6 - 3;
	assert_int_equal(run("GatherElements", 2, in, 0, 1, &a, 1, &out), 0);
	for (int i = 0; i < 2; i++)
		for (int j = 0; j < 4; j++) {
			int64_t k = ix[i * 4 + j] < 0 ? ix[i * 4 + j] + 3 : ix[i * 4 + j];
			assert_memory_equal((float *)out.data + i * 4 + j, (float *)in[0].data + k * 4 + j, 4);
		}
	hp_tensor_free(&out);
	ix[3] = 3;
	assert_int_equal(run("GatherElements", 2, in, 0, 1, &a, 1, &out), HP_EDATA);
	free_all(in, 2);
}

/* ---- Expand, Tile, Pad ------------------------------------------------- */

static int64_t map_expand(const void *ctx, const struct hp_shape *xs, const int64_t *o)
{
	int orank = *(const int *)ctx, lead = orank - xs->rank;
	int64_t st[HP_MAX_RANK], k = 0;

	strides(xs, st);
	for (int d = 0; d < xs->rank; d++)
		k += (xs->dims[d] == 1 ? 0 : o[d + lead]) * st[d];
	return k;
}

static int64_t map_tile(const void *ctx, const struct hp_shape *xs, const int64_t *o)
{
	int64_t st[HP_MAX_RANK], k = 0;

	(void)ctx;
	strides(xs, st);
	for (int d = 0; d < xs->rank; d++)
		k += (o[d] % xs->dims[d]) * st[d];
	return k;
}

static void test_expand_tile(void **state)
{
	struct hp_tensor in[2] = { rnd(HP_I64, 3, (int64_t[]){ 3, 1, 2 }, 1), vec64(4, (int64_t[]){ 2, 1, 4, 2 }) };
	struct hp_tensor out, ref;
	struct hp_shape os = { 4, { 2, 3, 4, 2 } };
	int orank = 4;

	(void)state;
	assert_int_equal(run("Expand", 2, in, 2, 0, NULL, 1, &out), 0);
	ref = ref_apply(&in[0], &os, map_expand, &orank, NULL);
	assert_same(&out, &ref);
	free_all((struct hp_tensor[]){ out, ref }, 2);
	/* shape smaller than the input: bidirectional, keeps input dims */
	hp_tensor_free(&in[1]);
	in[1] = vec64(2, (int64_t[]){ 1, 1 });
	assert_int_equal(run("Expand", 2, in, 2, 0, NULL, 1, &out), 0);
	assert_same(&out, &in[0]);
	hp_tensor_free(&out);
	hp_tensor_free(&in[1]);
	in[1] = vec64(1, (int64_t[]){ 3 });
	assert_int_equal(run("Expand", 2, in, 2, 0, NULL, 1, &out), HP_ESHAPE);
	assert_int_equal(run("Expand", 2, in, 0, 0, NULL, 1, &out), HP_ENOTCONST);

	hp_tensor_free(&in[1]);
	in[1] = vec64(3, (int64_t[]){ 2, 3, 2 });
	os = (struct hp_shape){ 3, { 6, 3, 4 } };
	assert_int_equal(run("Tile", 2, in, 2, 0, NULL, 1, &out), 0);
	ref = ref_apply(&in[0], &os, map_tile, NULL, NULL);
	assert_same(&out, &ref);
	free_all((struct hp_tensor[]){ out, ref }, 2);
	((int64_t *)in[1].data)[1] = 0;
	assert_int_equal(run("Tile", 2, in, 2, 0, NULL, 1, &out), 0);
	assert_int_equal(out.shape.dims[1], 0);
	hp_tensor_free(&out);
	free_all(in, 2);
}

struct pad_ctx {
	int mode; /* 0 constant, 1 reflect, 2 edge, 3 wrap */
	int64_t pb[HP_MAX_RANK];
};

static int64_t map_pad(const void *ctx, const struct hp_shape *xs, const int64_t *o)
{
	const struct pad_ctx *c = ctx;
	int64_t st[HP_MAX_RANK], k = 0;

	strides(xs, st);
	for (int d = 0; d < xs->rank; d++) {
		int64_t j = o[d] - c->pb[d], n = xs->dims[d];
		if (c->mode == 0 && (j < 0 || j >= n))
			return -1;
		if (c->mode == 2)
			j = j < 0 ? 0 : j >= n ? n - 1 : j;
		while (c->mode == 1 && n > 1 && (j < 0 || j >= n)) /* mirror until inside */
			j = j < 0 ? -j : 2 * (n - 1) - j;
		if (c->mode == 1 && n == 1)
			j = 0;
		while (c->mode == 3 && j < 0)
			j += n;
		if (c->mode == 3)
			j %= n;
		k += j * st[d];
	}
	return k;
}

static void check_pad(int mode, const int64_t *dims, int rank, const int64_t *pads, int as_attr)
{
	static const char *names[] = { "constant", "reflect", "edge", "wrap" };
	struct hp_tensor in[3] = { rnd(HP_F32, rank, dims, 5), vec64(2 * rank, pads), kt_tensor(HP_F32, 0, no_dims) };
	struct hp_tensor out, ref;
	struct hp_attr at[3] = { kt_string("mode", names[mode]), kt_ints("pads", 2 * rank, pads),
				 kt_float("value", 2.5f) };
	struct pad_ctx c = { .mode = mode };
	struct hp_shape os = { .rank = rank };
	float fill = 2.5f;

	*(float *)in[2].data = fill;
	for (int d = 0; d < rank; d++) {
		c.pb[d] = pads[d];
		os.dims[d] = dims[d] + pads[d] + pads[d + rank];
	}
	if (as_attr)
		assert_int_equal(run("Pad", 1, in, 0, 3, at, 1, &out), 0);
	else
		assert_int_equal(run("Pad", 3, in, 2, 1, at, 1, &out), 0);
	ref = ref_apply(&in[0], &os, map_pad, &c, &fill);
	assert_same(&out, &ref);
	free_all((struct hp_tensor[]){ out, ref }, 2);
	free_all(in, 3);
}

static void test_pad(void **state)
{
	(void)state;
	for (int m = 0; m < 4; m++) {
		check_pad(m, (int64_t[]){ 2, 3, 4 }, 3, (int64_t[]){ 0, 1, 2, 1, 0, 3 }, 0);
		check_pad(m, (int64_t[]){ 3, 4 }, 2, (int64_t[]){ 2, 3, 2, 3 }, 1);
		check_pad(m, (int64_t[]){ 5 }, 1, (int64_t[]){ 9, 11 }, 0); /* several reflections */
		check_pad(m, (int64_t[]){ 1, 4 }, 2, (int64_t[]){ 2, 0, 1, 0 }, 0);
	}
	check_pad(0, (int64_t[]){ 4, 5 }, 2, (int64_t[]){ -1, 2, 0, -3 }, 0); /* negative pads crop */
	check_pad(2, (int64_t[]){ 4, 5 }, 2, (int64_t[]){ -1, 2, 0, -3 }, 0);
}

/* ---- Cast -------------------------------------------------------------- */

static void test_cast(void **state)
{
	static const float fv[] = { 0.f, 1.5f, -1.5f, 2.9f, -2.9f, 100.25f, -0.f, 65504.f, 1e-7f, 3e-5f, 70000.f,
				    -1e30f, 0.333333f, 255.f, 7.f, 6.1035e-05f };
	int64_t n = sizeof fv / sizeof fv[0];
	struct hp_tensor x = kt_tensor(HP_F32, 1, &n), out, back;
	struct hp_attr a;

	(void)state;
	memcpy(x.data, fv, sizeof fv);
	a = kt_int("to", HP_I32);
	assert_int_equal(run("Cast", 1, &x, 0, 1, &a, 1, &out), 0);
	for (int i = 0; i < 7; i++)
		assert_int_equal(((int32_t *)out.data)[i], (int32_t)fv[i]); /* toward zero */
	hp_tensor_free(&out);
	a = kt_int("to", HP_I64);
	assert_int_equal(run("Cast", 1, &x, 1, 1, &a, 1, &out), 0); /* folded path */
	assert_int_equal(((int64_t *)out.data)[4], -2);
	assert_int_equal(((int64_t *)out.data)[5], 100);
	hp_tensor_free(&out);
	a = kt_int("to", HP_BOOL);
	assert_int_equal(run("Cast", 1, &x, 0, 1, &a, 1, &out), 0);
	for (int i = 0; i < n; i++)
		assert_int_equal(((uint8_t *)out.data)[i], fv[i] != 0);
	hp_tensor_free(&out);
	a = kt_int("to", HP_F16);
	assert_int_equal(run("Cast", 1, &x, 0, 1, &a, 1, &out), 0);
	for (int i = 0; i < n; i++) {
		_Float16 h = (_Float16)fv[i]; /* the compiler's conversion is the reference */
		assert_memory_equal((uint16_t *)out.data + i, &h, 2);
	}
	a = kt_int("to", HP_F32);
	assert_int_equal(run("Cast", 1, &out, 0, 1, &a, 1, &back), 0);
	for (int i = 0; i < n; i++) {
		_Float16 h;
		memcpy(&h, (uint16_t *)out.data + i, 2);
		assert_true(((float *)back.data)[i] == (float)h);
	}
	free_all((struct hp_tensor[]){ out, back }, 2);
	a = kt_int("to", HP_F64);
	assert_int_equal(run("Cast", 1, &x, 0, 1, &a, 1, &out), 0);
	for (int i = 0; i < n; i++)
		assert_true(((double *)out.data)[i] == (double)fv[i]);
	hp_tensor_free(&out);
	hp_tensor_free(&x);
	{
		static const int64_t iv[] = { -1, 255, 256, 1 << 20, -129, (int64_t)1 << 40, 0 };
		int64_t m = 7;
		struct hp_tensor y = kt_tensor(HP_I64, 1, &m);
		memcpy(y.data, iv, sizeof iv);
		a = kt_int("to", HP_U8);
		assert_int_equal(run("Cast", 1, &y, 0, 1, &a, 1, &out), 0);
		for (int i = 0; i < m; i++)
			assert_int_equal(((uint8_t *)out.data)[i], (uint8_t)iv[i]);
		hp_tensor_free(&out);
		a = kt_int("to", HP_I8);
		assert_int_equal(run("Cast", 1, &y, 0, 1, &a, 1, &out), 0);
		for (int i = 0; i < m; i++)
			assert_int_equal(((int8_t *)out.data)[i], (int8_t)iv[i]);
		hp_tensor_free(&out);
		a = kt_int("to", HP_F32);
		assert_int_equal(run("Cast", 1, &y, 0, 1, &a, 1, &out), 0);
		for (int i = 0; i < m; i++)
			assert_true(((float *)out.data)[i] == (float)iv[i]);
		hp_tensor_free(&out);
		hp_tensor_free(&y);
	}
}

/* bfloat16 bits as a double (NaN and inf included). */
static double bf16_val(uint16_t h)
{
	uint32_t b = (uint32_t)h << 16;
	float f;

	memcpy(&f, &b, 4);
	return f;
}

/* Round-to-nearest-even reference by distance to the two bfloat16
 * neighbours of x (ties to the even mantissa). */
static uint16_t bf16_rne_ref(float x)
{
	uint32_t b;
	uint16_t lo, hi;
	double dl, dh, ulp;

	memcpy(&b, &x, 4);
	lo = (uint16_t)(b >> 16);
	hi = (uint16_t)(lo + 1);
	if (isinf(x))
		return lo;
	if (isinf(bf16_val(hi)))
		ulp = fabs(bf16_val(lo)) - fabs(bf16_val((uint16_t)(lo - 1)));
	else
		ulp = fabs(bf16_val(hi)) - fabs(bf16_val(lo));
	dl = fabs((double)x - bf16_val(lo));
	dh = ulp - dl;
	return dl < dh || (dl == dh && !(lo & 1)) ? lo : hi;
}

/* Cast to bfloat16: truncation before opset 19 (ONNX's backend test
 * expects the upper 16 bits), round to nearest even from 19; NaN stays NaN. */
static void test_cast_bf16(void **state)
{
	static const uint32_t bits[] = { 0x3f808000u, /* 1 + 2^-8: tie, even is 1 */
					 0x3f818000u, /* 1 + 3 * 2^-8: tie, even is up */
					 0x3f80c000u, 0xbf80c000u, 0x3f807fffu, 0x7f7fffffu, 0xff7fffffu,
					 0x7f800000u, 0xff800000u, 0x00000001u, 0x80000000u, 0x7f800001u, /* NaN */
					 0xffc00000u, 0x3eaaaaabu, 0x4b7fffffu };
	int64_t n = sizeof bits / sizeof bits[0];
	struct hp_tensor x = kt_tensor(HP_F32, 1, &n), out;
	struct hp_attr a = kt_int("to", HP_BF16);

	(void)state;
	memcpy(x.data, bits, sizeof bits);
	for (int opset = 13; opset <= 19; opset += 6)
		for (int folded = 0; folded < 2; folded++) {
			struct kt_case c = { .op = "Cast", .nin = 1, .in = &x, .const_mask = (unsigned)folded,
					     .nattrs = 1, .attrs = &a, .nout = 1, .opset = opset };
			assert_int_equal(kt_run(&c, &out), 0);
			assert_int_equal(out.dtype, HP_BF16);
			for (int i = 0; i < n; i++) {
				uint16_t got = ((uint16_t *)out.data)[i];
				float f;
				memcpy(&f, &bits[i], 4);
				if (isnan(f)) {
					assert_true(isnan(bf16_val(got)));
					assert_int_equal(got & 0x8000, (bits[i] >> 16) & 0x8000);
				} else {
					assert_int_equal(got, opset < 19 ? (uint16_t)(bits[i] >> 16) : bf16_rne_ref(f));
				}
			}
			hp_tensor_free(&out);
		}
	hp_tensor_free(&x);
}

/* ---- Shape, Size, Constant, ConstantOfShape, Range, Dropout ------------ */

static void test_shape_size(void **state)
{
	struct hp_tensor x = rnd(HP_F32, 4, (int64_t[]){ 2, 3, 4, 5 }, 1), out;
	struct hp_attr at[2] = { kt_int("start", -3), kt_int("end", -1) };

	(void)state;
	assert_int_equal(run("Shape", 1, &x, 0, 0, NULL, 1, &out), 0);
	assert_int_equal(out.shape.dims[0], 4);
	for (int i = 0; i < 4; i++)
		assert_int_equal(((int64_t *)out.data)[i], x.shape.dims[i]);
	hp_tensor_free(&out);
	assert_int_equal(run("Shape", 1, &x, 0, 2, at, 1, &out), 0);
	assert_int_equal(out.shape.dims[0], 2);
	assert_int_equal(((int64_t *)out.data)[0], 3);
	assert_int_equal(((int64_t *)out.data)[1], 4);
	hp_tensor_free(&out);
	at[0] = kt_int("start", 10);
	assert_int_equal(run("Shape", 1, &x, 0, 1, at, 1, &out), 0);
	assert_int_equal(out.shape.dims[0], 0);
	hp_tensor_free(&out);
	assert_int_equal(run("Size", 1, &x, 0, 0, NULL, 1, &out), 0);
	assert_int_equal(out.shape.rank, 0);
	assert_int_equal(*(int64_t *)out.data, 120);
	hp_tensor_free(&out);
	hp_tensor_free(&x);
}

static void test_constants(void **state)
{
	struct hp_tensor out, in[3];
	struct hp_attr a;
	int64_t iv[] = { 4, -2, 7 };
	float fv[] = { 1.5f, -2.f };

	(void)state;
	a = kt_ints("value_ints", 3, iv);
	assert_int_equal(run("Constant", 0, NULL, 0, 1, &a, 1, &out), 0);
	assert_int_equal(out.dtype, HP_I64);
	assert_memory_equal(out.data, iv, sizeof iv);
	hp_tensor_free(&out);
	a = kt_floats("value_floats", 2, fv);
	assert_int_equal(run("Constant", 0, NULL, 0, 1, &a, 1, &out), 0);
	assert_memory_equal(out.data, fv, sizeof fv);
	hp_tensor_free(&out);
	a = kt_float("value_float", 3.25f);
	assert_int_equal(run("Constant", 0, NULL, 0, 1, &a, 1, &out), 0);
	assert_int_equal(out.shape.rank, 0);
	assert_true(*(float *)out.data == 3.25f);
	hp_tensor_free(&out);
	a = (struct hp_attr){ .name = "value", .type = HP_ATTR_TENSOR, .t = vec64(3, iv) };
	assert_int_equal(run("Constant", 0, NULL, 0, 1, &a, 1, &out), 0);
	assert_memory_equal(out.data, iv, sizeof iv);
	hp_tensor_free(&out);
	hp_tensor_free(&a.t);

	/* ConstantOfShape: default float 0, int64 value, empty shape -> scalar */
	in[0] = vec64(2, (int64_t[]){ 2, 3 });
	assert_int_equal(run("ConstantOfShape", 1, in, 1, 0, NULL, 1, &out), 0);
	assert_int_equal(out.dtype, HP_F32);
	for (int i = 0; i < 6; i++)
		assert_true(((float *)out.data)[i] == 0.f);
	hp_tensor_free(&out);
	a = (struct hp_attr){ .name = "value", .type = HP_ATTR_TENSOR, .t = vec64(1, (int64_t[]){ -9 }) };
	assert_int_equal(run("ConstantOfShape", 1, in, 1, 1, &a, 1, &out), 0);
	for (int i = 0; i < 6; i++)
		assert_int_equal(((int64_t *)out.data)[i], -9);
	hp_tensor_free(&out);
	assert_int_equal(run("ConstantOfShape", 1, in, 0, 1, &a, 1, &out), HP_ENOTCONST);
	hp_tensor_free(&a.t);
	hp_tensor_free(&in[0]);

	/* Range: int64 and float, negative delta, empty */
	static const int64_t rc[][3] = { { 1, 10, 3 }, { 10, 1, -3 }, { 5, 5, 1 }, { 0, -4, 1 }, { -3, 4, 2 } };
	for (int k = 0; k < 5; k++) {
		int64_t cnt = 0;
		for (int i = 0; i < 3; i++)
			in[i] = scalar64(rc[k][i]);
		assert_int_equal(run("Range", 3, in, 7, 0, NULL, 1, &out), 0);
		for (int64_t v = rc[k][0]; rc[k][2] > 0 ? v < rc[k][1] : v > rc[k][1]; v += rc[k][2])
			assert_int_equal(((int64_t *)out.data)[cnt++], v);
		assert_int_equal(out.shape.dims[0], cnt);
		hp_tensor_free(&out);
		free_all(in, 3);
	}
	{
		float fr[3] = { 0.5f, 2.1f, 0.4f };
		for (int i = 0; i < 3; i++) {
			in[i] = kt_tensor(HP_F32, 0, no_dims);
			*(float *)in[i].data = fr[i];
		}
		assert_int_equal(run("Range", 3, in, 7, 0, NULL, 1, &out), 0);
		assert_int_equal(out.shape.dims[0], 4); /* 0.5 0.9 1.3 1.7; the limit is exclusive */
		for (int i = 0; i < 4; i++)
			assert_float_equal(((float *)out.data)[i], 0.5 + 0.4 * i, 1e-6);
		hp_tensor_free(&out);
		assert_int_equal(run("Range", 3, in, 5, 0, NULL, 1, &out), HP_ENOTCONST);
		free_all(in, 3);
	}
}

static void test_dropout(void **state)
{
	struct hp_tensor in[3] = { rnd(HP_F32, 2, (int64_t[]){ 3, 5 }, 1), kt_tensor(HP_F32, 0, no_dims),
				   kt_tensor(HP_BOOL, 0, no_dims) }, out[2];

	(void)state;
	*(float *)in[1].data = 0.3f;
	assert_int_equal(run("Dropout", 2, in, 2, 0, NULL, 2, out), 0);
	assert_memory_equal(out[0].data, in[0].data, hp_tensor_bytes(&in[0]));
	assert_int_equal(out[1].dtype, HP_BOOL);
	for (int i = 0; i < 15; i++)
		assert_int_equal(((uint8_t *)out[1].data)[i], 1);
	free_all(out, 2);
	*(uint8_t *)in[2].data = 1; /* training mode: tested against numpy in test_dropout.c */
	assert_int_equal(run("Dropout", 3, in, 6, 0, NULL, 1, out), 0);
	hp_tensor_free(&out[0]);
	*(float *)in[1].data = 0.f; /* ratio 0 in training is still the identity */
	assert_int_equal(run("Dropout", 3, in, 6, 0, NULL, 1, out), 0);
	assert_memory_equal(out[0].data, in[0].data, hp_tensor_bytes(&in[0]));
	hp_tensor_free(&out[0]);
	free_all(in, 3);
}

/* ---- folding of a PyTorch-style shape chain ----------------------------- */

static int add_const(struct hp_graph *g, const char *name, const struct hp_tensor *t)
{
	int v = hp_graph_add_value(g, name, HP_VALUE_CONSTANT, t->dtype, &t->shape);
	size_t b = hp_tensor_bytes(t);

	g->values[v].data = malloc(b ? b : 1);
	memcpy(g->values[v].data, t->data, b);
	g->values[v].src.kind = HP_BLOB_MEMORY;
	return v;
}

static int add_act(struct hp_graph *g, const char *name)
{
	return hp_graph_add_value(g, name, HP_VALUE_ACTIVATION, HP_UNDEFINED, NULL);
}

static void test_fold_chain(void **state)
{
	struct hp_graph *g = hp_graph_new("chain");
	struct hp_shape xs = { 3, { 2, 3, 4 } };
	struct hp_tensor idx = scalar64(0), minus1 = vec64(1, (int64_t[]){ -1 }), ax0 = vec64(1, (int64_t[]){ 0 });
	int x, shp, b, bu, cat, y, ci, cm, ca, n;
	struct hp_attr axis0 = kt_int("axis", 0);

	(void)state;
	x = hp_graph_add_value(g, "x", HP_VALUE_INPUT, HP_F32, &xs);
	g->inputs = calloc(1, sizeof(int));
	g->inputs[g->ninputs++] = x;
	ci = add_const(g, "idx0", &idx);
	cm = add_const(g, "minus1", &minus1);
	ca = add_const(g, "axes0", &ax0);
	shp = add_act(g, "shape");
	b = add_act(g, "batch");
	bu = add_act(g, "batch_u");
	cat = add_act(g, "newshape");
	y = add_act(g, "y");
	/* added out of order on purpose: finalize sorts */
	hp_graph_add_node(g, "reshape", "Reshape", 2, (int[]){ x, cat }, 1, &y);
	hp_graph_add_node(g, "shape", "Shape", 1, &x, 1, &shp);
	hp_graph_add_node(g, "gather", "Gather", 2, (int[]){ shp, ci }, 1, &b);
	hp_graph_add_node(g, "unsq", "Unsqueeze", 2, (int[]){ b, ca }, 1, &bu);
	n = hp_graph_add_node(g, "concat", "Concat", 2, (int[]){ bu, cm }, 1, &cat);
	hp_graph_add_attr(g, n, &axis0);
	g->outputs = calloc(1, sizeof(int));
	g->outputs[g->noutputs++] = y;
	assert_int_equal(hp_graph_finalize(g), 0);
	assert_int_equal(hp_graph_infer(g), 0);
	assert_non_null(g->values[cat].data);
	assert_int_equal(((int64_t *)g->values[cat].data)[0], 2);
	assert_int_equal(((int64_t *)g->values[cat].data)[1], -1);
	assert_int_equal(g->values[y].shape.rank, 2);
	assert_int_equal(g->values[y].shape.dims[0], 2);
	assert_int_equal(g->values[y].shape.dims[1], 12);
	assert_null(g->values[y].data); /* depends on x: run time */
	for (int i = 0; i < g->nnodes; i++)
		assert_int_equal(g->nodes[i].folded, strcmp(g->nodes[i].name, "reshape") != 0);
	hp_graph_free(g);
	free_all((struct hp_tensor[]){ idx, minus1, ax0 }, 3);
}

/* ---- threads: same bytes with a pool ------------------------------------ */

static void test_pool_threads(void **state)
{
	struct hp_pool *pool;
	struct hp_tensor x = rnd(HP_F32, 4, (int64_t[]){ 3, 17, 19, 23 }, 4), o1, o2;
	struct hp_attr a = kt_ints("perm", 4, (int64_t[]){ 2, 0, 3, 1 });
	struct kt_case c = { .op = "Transpose", .nin = 1, .in = &x, .nattrs = 1, .attrs = &a, .nout = 1 };

	(void)state;
	assert_int_equal(hp_pool_create(2, &pool), 0);
	assert_int_equal(kt_run(&c, &o1), 0);
	c.pool = pool;
	assert_int_equal(kt_run(&c, &o2), 0);
	assert_same(&o1, &o2);
	free_all((struct hp_tensor[]){ o1, o2 }, 2);
	hp_pool_destroy(pool);
	hp_tensor_free(&x);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_reshape),
		cmocka_unit_test(test_reshape_errors),
		cmocka_unit_test(test_flatten_squeeze_unsqueeze),
		cmocka_unit_test(test_transpose),
		cmocka_unit_test(test_transpose_tiles),
		cmocka_unit_test(test_concat_split),
		cmocka_unit_test(test_concat_steal),
		cmocka_unit_test(test_slice),
		cmocka_unit_test(test_gather),
		cmocka_unit_test(test_gather_elements),
		cmocka_unit_test(test_expand_tile),
		cmocka_unit_test(test_pad),
		cmocka_unit_test(test_cast),
		cmocka_unit_test(test_cast_bf16),
		cmocka_unit_test(test_shape_size),
		cmocka_unit_test(test_constants),
		cmocka_unit_test(test_dropout),
		cmocka_unit_test(test_fold_chain),
		cmocka_unit_test(test_pool_threads),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
