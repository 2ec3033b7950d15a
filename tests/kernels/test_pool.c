/* Pooling kernels against a naive per-output reference. */
#include <inttypes.h>
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

struct pcfg {
	const char *op;              /* MaxPool, AveragePool, LpPool */
	int nsp;
	int64_t in[3], k[3], s[3], dl[3], pads[6];
	const char *auto_pad;        /* NULL: NOTSET */
	int ceil_mode, count_include_pad, storage_order, p, with_idx, explicit_pads, dil_attr;
};

/* Output size and pads exactly as the ONNX operator text states them. */
static int64_t ref_out_dim(const struct pcfg *c, int d, int64_t *pb, int64_t *pe)
{
	int64_t dk = (c->k[d] - 1) * c->dl[d] + 1, o;

	*pb = c->pads[d];
	*pe = c->pads[d + c->nsp];
	if (c->auto_pad && strncmp(c->auto_pad, "SAME", 4) == 0) {
		int64_t total;
		o = (int64_t)ceil((double)c->in[d] / (double)c->s[d]);
		total = (o - 1) * c->s[d] + dk - c->in[d];
		total = total > 0 ? total : 0;
		*pb = strcmp(c->auto_pad, "SAME_UPPER") == 0 ? total / 2 : (total + 1) / 2;
		*pe = total - *pb;
		return o;
	}
	if (c->auto_pad && strcmp(c->auto_pad, "VALID") == 0) {
		*pb = *pe = 0;
		return (int64_t)ceil((double)(c->in[d] - dk + 1) / (double)c->s[d]);
	}
	if (!c->ceil_mode)
		return (int64_t)floor((double)(c->in[d] + *pb + *pe - dk) / (double)c->s[d]) + 1;
	o = (int64_t)ceil((double)(c->in[d] + *pb + *pe - dk) / (double)c->s[d]) + 1;
	if ((o - 1) * c->s[d] >= c->in[d] + *pb)
		o--;
	return o;
}

/* Naive pooling of one output element of one plane. */
static float ref_window(const struct pcfg *c, const float *x, const int64_t *o, const int64_t *pb,
			const int64_t *pe, int64_t *arg)
{
	int64_t kk[3] = { 0 }, taps = 1, valid = 0, inpad = 0;
	double acc = 0;
	float m = -INFINITY;

	*arg = -1;
	for (int d = 0; d < c->nsp; d++)
		taps *= c->k[d];
	for (int64_t t = 0; t < taps; t++) {
		int64_t rem = t, pos[3], flat = 0, colmaj = 0, mul = 1;
		int ok = 1, inside_pad = 1;
		for (int d = c->nsp - 1; d >= 0; d--) {
			kk[d] = rem % c->k[d];
			rem /= c->k[d];
		}
		for (int d = 0; d < c->nsp; d++) {
			pos[d] = o[d] * c->s[d] - pb[d] + kk[d] * c->dl[d];
			ok &= pos[d] >= 0 && pos[d] < c->in[d];
			inside_pad &= pos[d] < c->in[d] + pe[d];
			flat = flat * c->in[d] + pos[d];
			colmaj += pos[d] * mul;
			mul *= c->in[d];
		}
		inpad += inside_pad;
		if (!ok)
			continue;
		valid++;
		float v = x[flat];
		if (!strcmp(c->op, "MaxPool")) {
			if (*arg < 0 || v > m) {
				m = v;
				*arg = c->storage_order ? colmaj : flat;
			}
		} else if (!strcmp(c->op, "AveragePool")) {
			acc += v;
		} else {
			acc += pow(fabs(v), c->p);
		}
	}
	if (!strcmp(c->op, "MaxPool"))
		return m;
	if (!strcmp(c->op, "LpPool"))
		return (float)pow(acc, 1.0 / c->p);
	return (float)(acc / (double)(c->count_include_pad ? inpad : valid));
}

static void check_pool(const struct pcfg *cfg, int64_t n, int64_t ch, unsigned seed, struct hp_pool *pool)
{
	struct pcfg cc = *cfg, *c = &cc;
	int64_t dims[5] = { n, ch }, odims[5] = { n, ch }, pb[3], pe[3], plane = 1, oplane = 1;
	struct hp_tensor x, out[2], ref, ridx;
	struct hp_attr at[9];
	int na = 0;

	for (int d = 0; d < c->nsp; d++) {
		c->dl[d] = c->dl[d] ? c->dl[d] : 1;
		dims[2 + d] = c->in[d];
		odims[2 + d] = ref_out_dim(c, d, &pb[d], &pe[d]);
		plane *= c->in[d];
		oplane *= odims[2 + d];
	}
	x = kt_tensor(HP_F32, 2 + c->nsp, dims);
	kt_fill_random(&x, seed, -3, 3);
	ref = kt_tensor(HP_F32, 2 + c->nsp, odims);
	ridx = kt_tensor(HP_I64, 2 + c->nsp, odims);
	for (int64_t pl = 0; pl < n * ch; pl++)
		for (int64_t i = 0; i < oplane; i++) {
			int64_t o[3], rem = i, arg;
			for (int d = c->nsp - 1; d >= 0; d--) {
				o[d] = rem % odims[2 + d];
				rem /= odims[2 + d];
			}
			((float *)ref.data)[pl * oplane + i] = ref_window(c, (float *)x.data + pl * plane, o, pb, pe, &arg);
			((int64_t *)ridx.data)[pl * oplane + i] = pl * plane + arg;
		}
	at[na++] = kt_ints("kernel_shape", c->nsp, c->k);
	at[na++] = kt_ints("strides", c->nsp, c->s);
	if (c->dil_attr)
		at[na++] = kt_ints("dilations", c->nsp, c->dl);
	if (c->explicit_pads)
		at[na++] = kt_ints("pads", 2 * c->nsp, c->pads);
	if (c->auto_pad)
		at[na++] = kt_string("auto_pad", c->auto_pad);
	at[na++] = kt_int("ceil_mode", c->ceil_mode);
	if (!strcmp(c->op, "AveragePool"))
		at[na++] = kt_int("count_include_pad", c->count_include_pad);
	if (!strcmp(c->op, "MaxPool"))
		at[na++] = kt_int("storage_order", c->storage_order);
	if (!strcmp(c->op, "LpPool"))
		at[na++] = kt_int("p", c->p);
	{
		struct kt_case kc = { .op = c->op, .nin = 1, .in = &x, .nattrs = na, .attrs = at,
				      .nout = c->with_idx ? 2 : 1, .pool = pool };
		assert_int_equal(kt_run(&kc, out), 0);
	}
	assert_true(kt_rel_err(&out[0], &ref) <= 1e-6);
	if (c->with_idx) {
		/* without Indices the same pooling takes the row path */
		struct kt_case kc = { .op = c->op, .nin = 1, .in = &x, .nattrs = na, .attrs = at, .nout = 1,
				      .pool = pool };
		struct hp_tensor y1;
		assert_int_equal(out[1].dtype, HP_I64);
		assert_memory_equal(out[1].data, ridx.data, hp_tensor_bytes(&ridx));
		hp_tensor_free(&out[1]);
		assert_int_equal(kt_run(&kc, &y1), 0);
		assert_memory_equal(y1.data, out[0].data, hp_tensor_bytes(&y1));
		hp_tensor_free(&y1);
	}
	hp_tensor_free(&out[0]);
	hp_tensor_free(&ref);
	hp_tensor_free(&ridx);
	hp_tensor_free(&x);
}

#define CFG(...) (&(struct pcfg){ __VA_ARGS__ })

static void test_maxpool(void **state)
{
	(void)state;
	check_pool(CFG(.op = "MaxPool", .nsp = 2, .in = { 7, 8 }, .k = { 3, 3 }, .s = { 1, 1 },
		       .pads = { 1, 1, 1, 1 }, .explicit_pads = 1, .with_idx = 1), 2, 3, 1, NULL);
	check_pool(CFG(.op = "MaxPool", .nsp = 2, .in = { 7, 8 }, .k = { 2, 3 }, .s = { 2, 2 },
		       .pads = { 0, 1, 1, 0 }, .explicit_pads = 1, .with_idx = 1, .storage_order = 1), 1, 2, 2, NULL);
	check_pool(CFG(.op = "MaxPool", .nsp = 2, .in = { 4, 4 }, .k = { 3, 3 }, .s = { 2, 2 }, .ceil_mode = 1,
		       .with_idx = 1), 1, 1, 3, NULL);
	check_pool(CFG(.op = "MaxPool", .nsp = 2, .in = { 9, 10 }, .k = { 2, 3 }, .s = { 3, 2 }, .ceil_mode = 1,
		       .pads = { 1, 0, 1, 2 }, .explicit_pads = 1), 1, 2, 4, NULL);
	check_pool(CFG(.op = "MaxPool", .nsp = 2, .in = { 9, 10 }, .k = { 3, 2 }, .s = { 1, 2 },
		       .dl = { 2, 3 }, .dil_attr = 1, .with_idx = 1), 1, 2, 5, NULL);
	check_pool(CFG(.op = "MaxPool", .nsp = 2, .in = { 7, 6 }, .k = { 3, 2 }, .s = { 2, 2 },
		       .auto_pad = "SAME_UPPER", .with_idx = 1), 1, 2, 6, NULL);
	check_pool(CFG(.op = "MaxPool", .nsp = 2, .in = { 7, 6 }, .k = { 3, 4 }, .s = { 2, 1 },
		       .auto_pad = "SAME_LOWER"), 1, 2, 7, NULL);
	check_pool(CFG(.op = "MaxPool", .nsp = 2, .in = { 7, 6 }, .k = { 3, 4 }, .s = { 2, 1 },
		       .auto_pad = "VALID"), 1, 2, 8, NULL);
	check_pool(CFG(.op = "MaxPool", .nsp = 1, .in = { 11 }, .k = { 3 }, .s = { 2 }, .pads = { 2, 1 },
		       .explicit_pads = 1, .with_idx = 1), 2, 3, 9, NULL);
	check_pool(CFG(.op = "MaxPool", .nsp = 3, .in = { 5, 6, 7 }, .k = { 2, 3, 2 }, .s = { 1, 2, 2 },
		       .pads = { 1, 0, 1, 0, 1, 1 }, .explicit_pads = 1, .with_idx = 1, .storage_order = 1), 1, 2, 10,
		   NULL);
}

static void test_maxpool_fast(void **state)
{
	struct hp_pool *pool;

	(void)state;
	assert_int_equal(hp_pool_create(2, &pool), 0);
	/* the U-Net case (2x2x2 stride 2), odd sizes drop the last row */
	check_pool(CFG(.op = "MaxPool", .nsp = 3, .in = { 8, 8, 8 }, .k = { 2, 2, 2 }, .s = { 2, 2, 2 }), 1, 4, 11,
		   pool);
	check_pool(CFG(.op = "MaxPool", .nsp = 3, .in = { 7, 9, 5 }, .k = { 2, 2, 2 }, .s = { 2, 2, 2 }), 2, 3, 12,
		   NULL);
	check_pool(CFG(.op = "MaxPool", .nsp = 2, .in = { 10, 7 }, .k = { 2, 2 }, .s = { 2, 2 }), 2, 3, 13, pool);
	check_pool(CFG(.op = "MaxPool", .nsp = 1, .in = { 9 }, .k = { 2 }, .s = { 2 }), 2, 3, 14, NULL);
	/* same kernel with indices goes through the general path */
	check_pool(CFG(.op = "MaxPool", .nsp = 3, .in = { 6, 4, 6 }, .k = { 2, 2, 2 }, .s = { 2, 2, 2 },
		       .with_idx = 1), 1, 2, 15, pool);
	hp_pool_destroy(pool);
}

/* 2x2 stride-2 MaxPool over two window rows (2-D, and 3-D with a unit
 * height), rows wide enough for the vector steps and their tails: bitwise
 * the selects m = v > m ? v : m from -inf over the taps in order (row by
 * row, left to right), with NaNs, signed zeros and -inf in the input. */
static void test_maxpool_2x2_bits(void **state)
{
	static const struct {
		int nsp;
		int64_t in[3];
	} cases[] = { { 2, { 5, 37 } }, { 2, { 4, 64 } }, { 2, { 3, 17 } }, { 3, { 4, 1, 40 } } };
	static const float odd[] = { NAN, -0.0f, 0.0f, -INFINITY, NAN, 0.0f, -0.0f };

	(void)state;
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		int nsp = cases[i].nsp;
		int64_t dims[5] = { 2, 3 }, od[5] = { 2, 3 }, k[3], rows = 1, W = cases[i].in[nsp - 1], plane = 1, op = 1;
		struct hp_attr at[2];
		struct hp_tensor x, y;
		for (int d = 0; d < nsp; d++) {
			k[d] = cases[i].in[d] > 1 ? 2 : 1;
			dims[2 + d] = cases[i].in[d];
			od[2 + d] = cases[i].in[d] / k[d];
			plane *= dims[2 + d];
			op *= od[2 + d];
		}
		rows = plane / W;
		x = kt_tensor(HP_F32, 2 + nsp, dims);
		kt_fill_random(&x, 70 + (unsigned)i, -2, 2);
		/* runs of three in seven: windows with two of them in a row */
		for (int64_t e = 0; e < hp_shape_numel(&x.shape); e++)
			if (e % 7 < 3)
				((float *)x.data)[e] = odd[(e / 7 * 3 + e % 7) % (sizeof odd / sizeof odd[0])];
		at[0] = kt_ints("kernel_shape", nsp, k);
		at[1] = kt_ints("strides", nsp, k);
		struct kt_case kc = { .op = "MaxPool", .nin = 1, .in = &x, .nattrs = 2, .attrs = at, .nout = 1 };
		assert_int_equal(kt_run(&kc, &y), 0);
		for (int64_t pl = 0; pl < 6; pl++)
			for (int64_t o = 0; o < op; o++) {
				int64_t orow = o / (W / 2), ow = o % (W / 2);
				const float *r0 = (const float *)x.data + pl * plane + 2 * orow * W;
				float m = -INFINITY, got = ((const float *)y.data)[pl * op + o];
				const float t[4] = { r0[2 * ow], r0[2 * ow + 1], r0[W + 2 * ow], r0[W + 2 * ow + 1] };
				for (int q = 0; q < 4; q++)
					m = t[q] > m ? t[q] : m;
				assert_true(rows >= 2 * (orow + 1));
				assert_memory_equal(&m, &got, sizeof m);
			}
		hp_tensor_free(&x);
		hp_tensor_free(&y);
	}
}

static void test_avgpool(void **state)
{
	(void)state;
	for (int cip = 0; cip < 2; cip++) {
		check_pool(CFG(.op = "AveragePool", .nsp = 2, .in = { 7, 8 }, .k = { 3, 3 }, .s = { 1, 1 },
			       .pads = { 1, 1, 1, 1 }, .explicit_pads = 1, .count_include_pad = cip), 2, 3, 20, NULL);
		check_pool(CFG(.op = "AveragePool", .nsp = 2, .in = { 9, 10 }, .k = { 2, 3 }, .s = { 3, 2 },
			       .ceil_mode = 1, .pads = { 1, 0, 1, 2 }, .explicit_pads = 1, .count_include_pad = cip),
			   1, 2, 21, NULL);
		check_pool(CFG(.op = "AveragePool", .nsp = 2, .in = { 5, 5 }, .k = { 3, 3 }, .s = { 2, 2 },
			       .ceil_mode = 1, .count_include_pad = cip), 1, 1, 22, NULL);
		check_pool(CFG(.op = "AveragePool", .nsp = 2, .in = { 7, 6 }, .k = { 3, 2 }, .s = { 2, 2 },
			       .auto_pad = "SAME_LOWER", .count_include_pad = cip), 1, 2, 23, NULL);
		check_pool(CFG(.op = "AveragePool", .nsp = 3, .in = { 4, 5, 6 }, .k = { 2, 2, 3 }, .s = { 2, 1, 2 },
			       .pads = { 0, 1, 1, 1, 0, 1 }, .explicit_pads = 1, .count_include_pad = cip), 1, 3, 24,
			   NULL);
		check_pool(CFG(.op = "AveragePool", .nsp = 1, .in = { 12 }, .k = { 3 }, .s = { 2 }, .dl = { 2 },
			       .dil_attr = 1, .pads = { 2, 2 }, .explicit_pads = 1, .count_include_pad = cip), 2, 2,
			   25, NULL);
	}
	check_pool(CFG(.op = "LpPool", .nsp = 2, .in = { 6, 7 }, .k = { 3, 2 }, .s = { 1, 2 }, .p = 2,
		       .pads = { 1, 0, 1, 1 }, .explicit_pads = 1), 1, 2, 26, NULL);
	check_pool(CFG(.op = "LpPool", .nsp = 1, .in = { 9 }, .k = { 3 }, .s = { 2 }, .p = 3), 1, 2, 27, NULL);
}

/* Pooling of enough window taps to run in parallel (2^20 and more; stolen
 * runs of planes):
 * the U-Net's 2x2 stride-2 MaxPool with and without Indices and a padded
 * 3x3 AveragePool, against the reference on one thread and on two with the
 * worker, the caller or neither delayed (hp_pool_test_delay), and two
 * threads bitwise one. */
static void steal_pool_case(const struct pcfg *c, int64_t n, int64_t ch, unsigned seed, struct hp_pool *pool)
{
	int64_t dims[4] = { n, ch, c->in[0], c->in[1] };
	struct hp_tensor x = kt_tensor(HP_F32, 4, dims), one[2], two[2];
	struct hp_attr at[4] = { kt_ints("kernel_shape", 2, c->k), kt_ints("strides", 2, c->s),
				 kt_ints("pads", 4, c->pads) };
	struct kt_case kc = { .op = c->op, .nin = 1, .in = &x, .nattrs = 3, .attrs = at, .nout = c->with_idx ? 2 : 1 };

	kt_fill_random(&x, seed, -3, 3);
	assert_int_equal(kt_run(&kc, one), 0);
	kc.pool = pool;
	for (int who = 1; who >= -1; who--) {
		if (who >= 0)
			hp_pool_test_delay(who, 2000000);
		check_pool(c, n, ch, seed, pool);
		assert_int_equal(kt_run(&kc, two), 0);
		hp_pool_test_delay(who == 1, 0);
		for (int o = 0; o < kc.nout; o++) {
			assert_memory_equal(one[o].data, two[o].data, hp_tensor_bytes(&one[o]));
			hp_tensor_free(&two[o]);
		}
	}
	for (int o = 0; o < kc.nout; o++)
		hp_tensor_free(&one[o]);
	hp_tensor_free(&x);
}

static void test_pool_steal(void **state)
{
	struct hp_pool *pool;

	(void)state;
	assert_int_equal(hp_pool_create(2, &pool), 0);
	for (int idx = 0; idx < 2; idx++)
		steal_pool_case(CFG(.op = "MaxPool", .nsp = 2, .in = { 128, 256 }, .k = { 2, 2 }, .s = { 2, 2 },
				    .explicit_pads = 1, .with_idx = idx), 2, 16, 40 + (unsigned)idx, pool);
	steal_pool_case(CFG(.op = "AveragePool", .nsp = 2, .in = { 100, 130 }, .k = { 3, 3 }, .s = { 1, 1 },
			    .pads = { 1, 1, 1, 1 }, .explicit_pads = 1), 2, 9, 42, pool);
	hp_pool_destroy(pool);
}

/* Rows wider than the row buffer (several column blocks), and a dilated
 * window wider than it (the per-output path), against the reference. */
static void test_wide_rows(void **state)
{
	struct hp_pool *pool;

	(void)state;
	assert_int_equal(hp_pool_create(2, &pool), 0);
	for (int cip = 0; cip < 2; cip++) {
		check_pool(CFG(.op = "AveragePool", .nsp = 1, .in = { 5000 }, .k = { 3 }, .s = { 1 }, .pads = { 1, 1 },
			       .explicit_pads = 1, .count_include_pad = cip), 1, 2, 30, pool);
		check_pool(CFG(.op = "AveragePool", .nsp = 2, .in = { 3, 4500 }, .k = { 2, 5 }, .s = { 1, 3 },
			       .pads = { 1, 2, 0, 2 }, .explicit_pads = 1, .count_include_pad = cip), 1, 1, 31, NULL);
	}
	check_pool(CFG(.op = "MaxPool", .nsp = 1, .in = { 5000 }, .k = { 4 }, .s = { 3 }, .pads = { 2, 2 },
		       .explicit_pads = 1, .with_idx = 1), 1, 2, 32, pool);
	check_pool(CFG(.op = "MaxPool", .nsp = 1, .in = { 3100 }, .k = { 3 }, .s = { 1 }, .dl = { 1500 },
		       .dil_attr = 1), 1, 1, 33, NULL);
	check_pool(CFG(.op = "AveragePool", .nsp = 1, .in = { 3100 }, .k = { 3 }, .s = { 2 }, .dl = { 1500 },
		       .dil_attr = 1), 1, 1, 34, NULL);
	hp_pool_destroy(pool);
}

/* Integer MaxPool equals the float reference on the same values; the
 * all-padding window of an integer type is the type's minimum. */
static void test_maxpool_int(void **state)
{
	static const enum hp_dtype types[] = { HP_U8, HP_I8, HP_F64 };
	int64_t dims[] = { 1, 2, 6, 7 };
	struct hp_attr at[3] = { kt_ints("kernel_shape", 2, (int64_t[]){ 3, 2 }),
				 kt_ints("strides", 2, (int64_t[]){ 2, 1 }),
				 kt_ints("pads", 4, (int64_t[]){ 1, 0, 1, 1 }) };
	struct hp_tensor xf = kt_tensor(HP_F32, 4, dims), yf, y;
	struct kt_case c = { .op = "MaxPool", .nin = 1, .in = &xf, .nattrs = 3, .attrs = at, .nout = 1 };

	(void)state;
	for (int t = 0; t < 3; t++) {
		struct hp_tensor x = kt_tensor(types[t], 4, dims);
		for (int i = 0; i < 84; i++) {
			int v = types[t] == HP_U8 ? (i * 37 + 11) % 256 : (i * 37 + 11) % 256 - 128;
			((float *)xf.data)[i] = (float)v;
			if (types[t] == HP_F64)
				((double *)x.data)[i] = v;
			else
				((uint8_t *)x.data)[i] = (uint8_t)v;
		}
		c.in = &xf;
		assert_int_equal(kt_run(&c, &yf), 0);
		c.in = &x;
		assert_int_equal(kt_run(&c, &y), 0);
		assert_int_equal(y.dtype, types[t]);
		for (int64_t i = 0; i < hp_shape_numel(&y.shape); i++) {
			double got = types[t] == HP_U8 ? ((uint8_t *)y.data)[i]
				   : types[t] == HP_I8 ? ((int8_t *)y.data)[i] : ((double *)y.data)[i];
			assert_true(got == ((float *)yf.data)[i]);
		}
		hp_tensor_free(&y);
		hp_tensor_free(&yf);
		/* Indices for integers: refused as unsupported */
		c.nout = 2;
		struct hp_tensor y2[2];
		assert_int_equal(kt_run(&c, y2), HP_EUNSUPPORTED);
		c.nout = 1;
		hp_tensor_free(&x);
	}
	/* AveragePool of uint8 is not supported */
	{
		struct hp_tensor x = kt_tensor(HP_U8, 4, dims);
		struct kt_case a = { .op = "AveragePool", .nin = 1, .in = &x, .nattrs = 1, .attrs = at, .nout = 1 };
		assert_int_equal(kt_run(&a, &y), HP_EUNSUPPORTED);
		hp_tensor_free(&x);
	}
	/* an all-padding window (pads >= kernel) gives the type's minimum */
	{
		int64_t d1[] = { 1, 1, 2 };
		struct hp_tensor x = kt_tensor(HP_I8, 3, d1);
		struct hp_attr a1[2] = { kt_ints("kernel_shape", 1, (int64_t[]){ 2 }),
					 kt_ints("pads", 2, (int64_t[]){ 2, 0 }) };
		struct kt_case a = { .op = "MaxPool", .nin = 1, .in = &x, .nattrs = 2, .attrs = a1, .nout = 1 };
		((int8_t *)x.data)[0] = 5;
		((int8_t *)x.data)[1] = -3;
		assert_int_equal(kt_run(&a, &y), 0);
		assert_int_equal(hp_shape_numel(&y.shape), 3);
		assert_int_equal(((int8_t *)y.data)[0], INT8_MIN);
		assert_int_equal(((int8_t *)y.data)[1], 5);
		assert_int_equal(((int8_t *)y.data)[2], 5);
		hp_tensor_free(&y);
		hp_tensor_free(&x);
	}
	hp_tensor_free(&xf);
}

/* The row path is bitwise the same on 1 and 2 threads. */
static void test_pool_threads(void **state)
{
	int64_t dims[] = { 1, 6, 9, 10, 11 };
	struct hp_attr at[3] = { kt_ints("kernel_shape", 3, (int64_t[]){ 3, 3, 3 }),
				 kt_ints("pads", 6, (int64_t[]){ 1, 1, 1, 1, 1, 1 }), kt_int("count_include_pad", 0) };
	struct hp_tensor x = kt_tensor(HP_F32, 5, dims), y1, y2;
	struct hp_pool *pool;

	(void)state;
	assert_int_equal(hp_pool_create(2, &pool), 0);
	kt_fill_random(&x, 77, -4, 4);
	for (int k = 0; k < 2; k++) {
		struct kt_case c = { .op = k ? "MaxPool" : "AveragePool", .nin = 1, .in = &x, .nattrs = 3 - k,
				     .attrs = at, .nout = 1 };
		assert_int_equal(kt_run(&c, &y1), 0);
		c.pool = pool;
		assert_int_equal(kt_run(&c, &y2), 0);
		assert_memory_equal(y1.data, y2.data, hp_tensor_bytes(&y1));
		hp_tensor_free(&y1);
		hp_tensor_free(&y2);
	}
	hp_tensor_free(&x);
	hp_pool_destroy(pool);
}

/* A MaxPool below POOL_PAR_MIN_TAPS (GoogLeNet's first at 96x96: 64x48x48,
 * 3x3 stride 2, ceil: 330K taps) takes the pool's workers while they poll
 * (hp_pool_polling), the same bits as on one thread; a worker held back
 * until the caller took every unit shows the node went to the pool
 * (hp_pool_stolen_units), within 2000 tries. */
static void nop_range(void *arg, int64_t b, int64_t e, int tid)
{
	(void)arg, (void)b, (void)e, (void)tid;
}

static void test_pool_polling(void **state)
{
	int64_t dims[] = { 1, 64, 48, 48 };
	struct hp_attr at[3] = { kt_ints("kernel_shape", 2, (int64_t[]){ 3, 3 }),
				 kt_ints("strides", 2, (int64_t[]){ 2, 2 }), kt_int("ceil_mode", 1) };
	struct hp_tensor x = kt_tensor(HP_F32, 4, dims), y1, y2;
	struct kt_case c = { .op = "MaxPool", .nin = 1, .in = &x, .nattrs = 3, .attrs = at, .nout = 1 };
	struct hp_pool *pool;
	int moved = 0;

	(void)state;
	assert_int_equal(hp_pool_create(2, &pool), 0);
	kt_fill_random(&x, 78, -4, 4);
	assert_int_equal(kt_run(&c, &y1), 0);
	c.pool = pool;
	for (int t = 0; t < 2000 && !moved; t++) {
		uint64_t stolen = hp_pool_stolen_units();
		hp_parallel_for(pool, 2, 1, nop_range, NULL); /* the worker up and polling */
		hp_pool_set_steal_stall_us(-1);
		assert_int_equal(kt_run(&c, &y2), 0);
		hp_pool_set_steal_stall_us(0);
		assert_memory_equal(y1.data, y2.data, hp_tensor_bytes(&y1));
		hp_tensor_free(&y2);
		moved = hp_pool_stolen_units() != stolen;
	}
	assert_true(moved || hp_pool_spin_ns() == 0);
	hp_tensor_free(&y1);
	hp_tensor_free(&x);
	hp_pool_destroy(pool);
}

static void test_global(void **state)
{
	static const char *ops[] = { "GlobalAveragePool", "GlobalMaxPool", "GlobalLpPool" };
	int64_t dims[] = { 2, 3, 4, 5, 6 };
	struct hp_tensor x = kt_tensor(HP_F32, 5, dims), out;

	(void)state;
	kt_fill_random(&x, 3, -2, 2);
	for (int k = 0; k < 3; k++) {
		struct kt_case c = { .op = ops[k], .nin = 1, .in = &x, .nout = 1 };
		assert_int_equal(kt_run(&c, &out), 0);
		assert_int_equal(out.shape.rank, 5);
		assert_int_equal(out.shape.dims[1], 3);
		assert_int_equal(out.shape.dims[4], 1);
		for (int pl = 0; pl < 6; pl++) {
			const float *p = (const float *)x.data + pl * 120;
			double s = 0, m = -INFINITY;
			for (int i = 0; i < 120; i++) {
				s += k == 2 ? (double)p[i] * p[i] : p[i];
				m = p[i] > m ? p[i] : m;
			}
			double want = k == 0 ? s / 120 : k == 1 ? m : sqrt(s);
			assert_float_equal(((float *)out.data)[pl], want, 1e-5);
		}
		hp_tensor_free(&out);
	}
	hp_tensor_free(&x);
}

/* GlobalAveragePool bitwise a plane's double sum in element order (the
 * AVX2 pass runs planes in groups of 8 and 16 as lanes, the rest scalar):
 * each run of 8 elements holds a pair +-2^60 v that cancels, the others
 * are lost while it is in the sum, so that another order of the adds (two
 * neighbours swapped) gives other float bits; 1 and 2 threads. */
static void test_global_avg_bits(void **state)
{
	static const int64_t shapes[][4] = { { 1, 37, 7, 7 }, { 2, 20, 48, 48 }, { 1, 1152, 3, 3 }, { 1, 16, 2, 2 },
					     { 3, 9, 1, 1 }, { 1, 24, 12, 12 } };
	struct hp_pool *pool;

	(void)state;
	assert_int_equal(hp_pool_create(2, &pool), 0);
	for (size_t t = 0; t < sizeof shapes / sizeof shapes[0]; t++) {
		struct hp_tensor x = kt_tensor(HP_F32, 4, shapes[t]), out;
		int64_t np = shapes[t][0] * shapes[t][1], n = shapes[t][2] * shapes[t][3];
		float *xv = x.data;
		kt_fill_random(&x, 11 + (unsigned)t, -2, 2);
		srand(5 + (unsigned)t);
		for (int64_t p = 0; p < np; p++)
			for (int64_t i = 0; i + 8 <= n; i += 8) {
				int a = rand() % 8, b = (a + 1 + rand() % 7) % 8;
				xv[p * n + i + a] = ldexpf(xv[p * n + i + a], 60);
				xv[p * n + i + b] = -xv[p * n + i + a];
			}
		for (int th = 0; th < 2; th++) {
			struct kt_case c = { .op = "GlobalAveragePool", .nin = 1, .in = &x, .nout = 1,
					     .pool = th ? pool : NULL };
			assert_int_equal(kt_run(&c, &out), 0);
			for (int64_t p = 0; p < np; p++) {
				double s = 0;
				for (int64_t i = 0; i < n; i++)
					s += xv[p * n + i];
				float want = (float)(s / (double)n), got = ((float *)out.data)[p];
				if (memcmp(&want, &got, sizeof want))
					fail_msg("shape %zu plane %" PRId64 ": %a, want %a", t, p, (double)got, (double)want);
			}
			hp_tensor_free(&out);
		}
		hp_tensor_free(&x);
	}
	hp_pool_destroy(pool);
}

static void test_pool_errors(void **state)
{
	int64_t dims[] = { 1, 1, 2, 2 };
	struct hp_tensor x = kt_tensor(HP_F32, 4, dims), out;
	struct hp_attr at[2] = { kt_ints("kernel_shape", 2, (int64_t[]){ 3, 3 }), kt_string("auto_pad", "BAD") };
	struct kt_case c = { .op = "MaxPool", .nin = 1, .in = &x, .nattrs = 1, .attrs = at, .nout = 1 };

	(void)state;
	assert_int_equal(kt_run(&c, &out), HP_ESHAPE); /* kernel larger than the input */
	assert_non_null(strstr(hp_errmsg(), "node0"));
	c.nattrs = 2;
	assert_int_equal(kt_run(&c, &out), HP_EUNSUPPORTED);
	at[0] = kt_ints("kernel_shape", 1, (int64_t[]){ 1 });
	c.nattrs = 1;
	assert_int_equal(kt_run(&c, &out), HP_EUNSUPPORTED);
	hp_tensor_free(&x);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_maxpool),
		cmocka_unit_test(test_maxpool_fast),
		cmocka_unit_test(test_maxpool_2x2_bits),
		cmocka_unit_test(test_avgpool),
		cmocka_unit_test(test_wide_rows),
		cmocka_unit_test(test_pool_steal),
		cmocka_unit_test(test_maxpool_int),
		cmocka_unit_test(test_pool_threads),
		cmocka_unit_test(test_pool_polling),
		cmocka_unit_test(test_global),
		cmocka_unit_test(test_global_avg_bits),
		cmocka_unit_test(test_pool_errors),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
