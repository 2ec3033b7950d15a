/* Resize/Upsample against (1) a direct C transcription of the ONNX operator
 * definition (nested 1-D interpolation with edge-padded neighbours, as the
 * ONNX reference does it) and (2) ONNX's own numpy reference
 * (onnx.backend.test.case.node.resize), run through HPDLF_PYTHON. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "hpdlf/error.h"
#include "tests/kernels/harness.h"

/* Case tables below list leading fields positionally; the rest are zero. */
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"

struct rcase {
	const char *mode, *coord, *nearest;
	double a;
	int exclude;
	float extrap;
	int rank;
	int64_t in[5];
	float scales[5];      /* used when sizes[0] == 0 */
	int64_t sizes[5];
	float roi[10];        /* tf_crop_and_resize */
};

/* ---- reference ---------------------------------------------------------- */

static int ref_coeffs(const struct rcase *c, double ratio, double *w)
{
	if (!strcmp(c->mode, "nearest")) {
		const char *m = c->nearest ? c->nearest : "round_prefer_floor";
		int up;
		if (ratio == 1.0)
			up = 1;
		else if (!strcmp(m, "round_prefer_floor"))
			up = ratio > 0.5;
		else if (!strcmp(m, "round_prefer_ceil"))
			up = ratio >= 0.5;
		else
			up = !strcmp(m, "ceil");
		w[0] = !up;
		w[1] = up;
		return 2;
	}
	if (!strcmp(c->mode, "linear")) {
		w[0] = 1 - ratio;
		w[1] = ratio;
		return 2;
	}
	double A = c->a != 0 ? c->a : -0.75, r = ratio;
	w[0] = ((A * (r + 1) - 5 * A) * (r + 1) + 8 * A) * (r + 1) - 4 * A;
	w[1] = ((A + 2) * r - (A + 3)) * r * r + 1;
	w[2] = ((A + 2) * (1 - r) - (A + 3)) * (1 - r) * (1 - r) + 1;
	w[3] = ((A * ((1 - r) + 1) - 5 * A) * ((1 - r) + 1) + 8 * A) * ((1 - r) + 1) - 4 * A;
	return 4;
}

/* The n indexes of [0, limit) nearest to x, ties to the smaller, ascending. */
static void neighbours(double x, int n, int64_t limit, int64_t *out)
{
	int cnt = 0;
	char *used = calloc((size_t)limit, 1);

	while (cnt < n) {
		int64_t best = -1;
		for (int64_t i = 0; i < limit; i++)
			if (!used[i] && (best < 0 || fabs(x - (double)i) < fabs(x - (double)best)))
				best = i;
		if (best < 0)
			break;
		used[best] = 1;
		cnt++;
	}
	cnt = 0;
	for (int64_t i = 0; i < limit; i++)
		if (used[i])
			out[cnt++] = i;
	free(used);
}

static double ref_1d(const struct rcase *c, const double *data, int64_t n, double scale, double x, double r0,
		     double r1)
{
	double outw = scale * (double)n, xo, w[4], sum = 0, res = 0;
	int64_t idx[4];
	int t, pad;

	if (!strcmp(c->coord, "align_corners")) {
		xo = outw == 1 ? 0 : x * (double)(n - 1) / (outw - 1);
	} else if (!strcmp(c->coord, "asymmetric")) {
		xo = x / scale;
	} else if (!strcmp(c->coord, "tf_crop_and_resize")) {
		xo = outw == 1 ? (r1 - r0) * (double)(n - 1) / 2 : x * (r1 - r0) * (double)(n - 1) / (outw - 1);
		xo += r0 * (double)(n - 1);
		if (xo < 0 || xo > (double)(n - 1))
			return c->extrap;
	} else if (!strcmp(c->coord, "pytorch_half_pixel")) {
		xo = outw > 1 ? (x + 0.5) / scale - 0.5 : 0; /* the spec: 0 for length 1 */
	} else if (!strcmp(c->coord, "tf_half_pixel_for_nn")) {
		xo = (x + 0.5) / scale;
	} else {
		xo = (x + 0.5) / scale - 0.5;
	}
	t = ref_coeffs(c, xo == floor(xo) ? 1.0 : xo - floor(xo), w);
	pad = (t + 1) / 2;
	neighbours(xo + pad, t, n + 2 * pad, idx);
	for (int k = 0; k < t; k++) {
		idx[k] -= pad;
		if (c->exclude && (idx[k] < 0 || idx[k] >= n))
			w[k] = 0;
		sum += w[k];
	}
	for (int k = 0; k < t; k++) {
		int64_t j = idx[k] < 0 ? 0 : idx[k] >= n ? n - 1 : idx[k];
		res += (c->exclude ? w[k] / sum : w[k]) * data[j];
	}
	return res;
}

/* interpolate_nd_with_x: inner axes first, then the outer one. */
static double ref_nd(const struct rcase *c, const float *x, int rank, const int64_t *dims, const double *sc,
		     const int64_t *o, const double *roi, int full)
{
	int64_t n = dims[0], inner = 1;
	double *vals = malloc((size_t)n * sizeof *vals), r;

	for (int d = 1; d < rank; d++)
		inner *= dims[d];
	for (int64_t i = 0; i < n; i++)
		vals[i] = rank == 1 ? x[i] : ref_nd(c, x + i * inner, rank - 1, dims + 1, sc + 1, o + 1, roi + 1, full);
	r = ref_1d(c, vals, n, sc[0], (double)o[0], roi[0], roi[full]);
	free(vals);
	return r;
}

static void out_dims(const struct rcase *c, int64_t *od, double *sc)
{
	for (int d = 0; d < c->rank; d++) {
		if (c->sizes[0]) {
			od[d] = c->sizes[d];
			sc[d] = (double)c->sizes[d] / (double)c->in[d];
		} else {
			sc[d] = c->scales[d];
			od[d] = (int64_t)floor((double)c->scales[d] * (double)c->in[d]);
		}
	}
}

static struct hp_tensor reference(const struct rcase *c, const struct hp_tensor *x)
{
	int64_t od[5], o[5] = { 0 }, total;
	double sc[5], roi[10];
	struct hp_tensor y;

	out_dims(c, od, sc);
	y = kt_tensor(HP_F32, c->rank, od);
	total = hp_shape_numel(&y.shape);
	for (int d = 0; d < c->rank; d++) {
		roi[d] = c->roi[d + c->rank] != 0 ? c->roi[d] : 0;
		roi[d + c->rank] = c->roi[d + c->rank] != 0 ? c->roi[d + c->rank] : 1;
	}
	for (int64_t i = 0; i < total; i++) {
		((float *)y.data)[i] = (float)ref_nd(c, x->data, c->rank, c->in, sc, o, roi, c->rank);
		for (int d = c->rank - 1; d >= 0; d--) {
			if (++o[d] < od[d])
				break;
			o[d] = 0;
		}
	}
	return y;
}

/* ---- running the kernel ------------------------------------------------- */

static int run_resize(const struct rcase *c, const struct hp_tensor *x, struct hp_pool *pool, struct hp_tensor *out)
{
	struct hp_tensor in[4] = { *x };
	struct hp_attr at[6];
	int na = 0, rc;
	int64_t r = c->rank, r2 = 2 * c->rank;

	at[na++] = kt_string("mode", c->mode);
	at[na++] = kt_string("coordinate_transformation_mode", c->coord);
	if (c->nearest)
		at[na++] = kt_string("nearest_mode", c->nearest);
	if (c->a != 0)
		at[na++] = kt_float("cubic_coeff_a", (float)c->a);
	at[na++] = kt_int("exclude_outside", c->exclude);
	at[na++] = kt_float("extrapolation_value", c->extrap);
	if (!strcmp(c->coord, "tf_crop_and_resize")) {
		in[1] = kt_tensor(HP_F32, 1, &r2);
		memcpy(in[1].data, c->roi, (size_t)r2 * sizeof(float));
	}
	if (c->sizes[0]) {
		in[3] = kt_tensor(HP_I64, 1, &r);
		memcpy(in[3].data, c->sizes, (size_t)r * sizeof(int64_t));
	} else {
		in[2] = kt_tensor(HP_F32, 1, &r);
		memcpy(in[2].data, c->scales, (size_t)r * sizeof(float));
	}
	{
		struct kt_case kc = { .op = "Resize", .nin = 4, .in = in, .const_mask = 0xe, .nattrs = na,
				      .attrs = at, .nout = 1, .pool = pool };
		rc = kt_run(&kc, out);
	}
	for (int i = 1; i < 4; i++)
		hp_tensor_free(&in[i]);
	return rc;
}

static void check_case(const struct rcase *c, struct hp_pool *pool)
{
	struct hp_tensor x = kt_tensor(HP_F32, c->rank, c->in), out, ref;

	kt_fill_random(&x, (unsigned)(c->in[c->rank - 1] * 31 + c->rank), -2, 2);
	assert_int_equal(run_resize(c, &x, pool, &out), 0);
	ref = reference(c, &x);
	if (!(kt_rel_err(&out, &ref) <= 2e-6))
		fail_msg("mode %s coord %s nearest %s: rel err %g", c->mode, c->coord, c->nearest ? c->nearest : "-",
			 kt_rel_err(&out, &ref));
	hp_tensor_free(&out);
	hp_tensor_free(&ref);
	hp_tensor_free(&x);
}

static const char *const coords[] = { "half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric" };

static void test_nearest(void **state)
{
	static const char *const nms[] = { "round_prefer_floor", "round_prefer_ceil", "floor", "ceil" };

	(void)state;
	for (int k = 0; k < 4; k++)
		for (int m = 0; m < 4; m++) {
			struct rcase up = { "nearest", coords[k], nms[m], 0, 0, 0, 4, { 1, 2, 3, 4 },
					    { 1, 1, 2.5f, 1.75f } };
			struct rcase down = { "nearest", coords[k], nms[m], 0, 0, 0, 4, { 2, 1, 7, 9 },
					      { 1, 1, 0.6f, 0.45f } };
			struct rcase sz = { "nearest", coords[k], nms[m], 0, 0, 0, 3, { 2, 5, 4 }, { 0 }, { 2, 8, 3 } };
			check_case(&up, NULL);
			check_case(&down, NULL);
			check_case(&sz, NULL);
		}
	struct rcase nn = { "nearest", "tf_half_pixel_for_nn", NULL, 0, 0, 0, 4, { 1, 2, 5, 4 }, { 1, 1, 1.6f, 2 } };
	check_case(&nn, NULL);
}

static void test_linear(void **state)
{
	struct hp_pool *pool;

	(void)state;
	assert_int_equal(hp_pool_create(2, &pool), 0);
	for (int k = 0; k < 4; k++) {
		struct rcase up = { "linear", coords[k], NULL, 0, 0, 0, 4, { 1, 2, 4, 5 }, { 1, 1, 2, 1.5f } };
		struct rcase down = { "linear", coords[k], NULL, 0, 0, 0, 4, { 1, 2, 7, 9 }, { 1, 1, 0.6f, 0.3f } };
		struct rcase sz = { "linear", coords[k], NULL, 0, 0, 0, 4, { 1, 3, 4, 4 }, { 0 }, { 1, 3, 7, 1 } };
		struct rcase tri = { "linear", coords[k], NULL, 0, 0, 0, 5, { 1, 2, 3, 4, 3 }, { 1, 1, 2, 1.5f, 2 } };
		struct rcase ch = { "linear", coords[k], NULL, 0, 0, 0, 3, { 4, 3, 5 }, { 1, 2, 0.8f } };
		check_case(&up, pool);
		check_case(&down, NULL);
		check_case(&sz, NULL);
		check_case(&tri, pool);
		check_case(&ch, NULL);
	}
	hp_pool_destroy(pool);
}

/* Upscales whose output rows share input rows (kernels/resize.c's cache of
 * horizontal passes): DeepLabV3's 6x6 -> 96x96 over 10 classes, 1x1 -> 6x6,
 * a 3-D upscale by 4 (four input rows per output row, slots evicted), on one
 * thread and on two (rows split mid-plane): against the reference, and the
 * two bitwise equal. */
static void test_linear_rows_shared(void **state)
{
	struct hp_pool *pool;
	const struct rcase cases[] = {
		{ "linear", "half_pixel", NULL, 0, 0, 0, 4, { 1, 10, 6, 6 }, { 0 }, { 1, 10, 96, 96 } },
		{ "linear", "half_pixel", NULL, 0, 0, 0, 4, { 1, 16, 1, 1 }, { 0 }, { 1, 16, 6, 6 } },
		{ "linear", "align_corners", NULL, 0, 0, 0, 5, { 1, 2, 3, 4, 5 }, { 1, 1, 4, 4, 4 } },
		{ "linear", "pytorch_half_pixel", NULL, 0, 0, 0, 4, { 2, 3, 5, 7 }, { 1, 1, 3.5f, 2 } },
	};

	(void)state;
	assert_int_equal(hp_pool_create(2, &pool), 0);
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		struct hp_tensor x = kt_tensor(HP_F32, cases[i].rank, cases[i].in), one, two;
		kt_fill_random(&x, (unsigned)i + 7, -2, 2);
		check_case(&cases[i], pool);
		assert_int_equal(run_resize(&cases[i], &x, NULL, &one), 0);
		assert_int_equal(run_resize(&cases[i], &x, pool, &two), 0);
		assert_memory_equal(one.data, two.data, (size_t)hp_shape_numel(&one.shape) * sizeof(float));
		hp_tensor_free(&one);
		hp_tensor_free(&two);
		hp_tensor_free(&x);
	}
	hp_pool_destroy(pool);
}

static void test_cubic(void **state)
{
	(void)state;
	for (int k = 0; k < 4; k++) {
		struct rcase up = { "cubic", coords[k], NULL, 0, 0, 0, 4, { 1, 1, 4, 4 }, { 1, 1, 2, 2 } };
		struct rcase ex = { "cubic", coords[k], NULL, -0.5, 1, 0, 4, { 1, 1, 5, 4 }, { 1, 1, 1.6f, 0.8f } };
		struct rcase sz = { "cubic", coords[k], NULL, 0, 0, 0, 3, { 2, 6, 5 }, { 0 }, { 2, 3, 9 } };
		check_case(&up, NULL);
		check_case(&ex, NULL);
		check_case(&sz, NULL);
	}
}

static void test_crop(void **state)
{
	static const char *const modes[] = { "nearest", "linear", "cubic" };

	(void)state;
	for (int m = 0; m < 3; m++) {
		struct rcase inside = { modes[m], "tf_crop_and_resize", NULL, 0, 0, 0, 4, { 1, 1, 4, 4 }, { 0 },
					{ 1, 1, 3, 3 }, { 0, 0, 0.4f, 0.6f, 1, 1, 0.6f, 0.8f } };
		struct rcase outside = { modes[m], "tf_crop_and_resize", NULL, 0, 0, 10.f, 4, { 1, 1, 4, 5 }, { 0 },
					 { 1, 1, 3, 4 }, { 0, 0, 0.4f, 0.6f, 1, 1, 1.2f, 1.7f } };
		check_case(&inside, NULL);
		check_case(&outside, NULL);
	}
}

/* ---- legacy forms ------------------------------------------------------- */

static void test_upsample_and_v10(void **state)
{
	int64_t dims[] = { 1, 2, 2, 3 }, four = 4;
	struct hp_tensor in[2] = { kt_tensor(HP_F32, 4, dims), kt_tensor(HP_F32, 1, &four) }, out;
	static const float sc[] = { 1, 1, 2, 3 };
	struct hp_attr m = kt_string("mode", "nearest");
	struct kt_case c = { .op = "Upsample", .nin = 2, .in = in, .const_mask = 2, .nattrs = 1, .attrs = &m, .nout = 1 };

	(void)state;
	kt_fill_random(&in[0], 5, -1, 1);
	memcpy(in[1].data, sc, sizeof sc);
	for (int form = 0; form < 3; form++) {
		struct hp_attr at[2] = { m, kt_floats("scales", 4, sc) };
		if (form == 1)
			c.op = "Resize"; /* opset 10: X, scales */
		if (form == 2) {     /* opset 7: scales attribute */
			c.op = "Upsample";
			c.nin = 1;
			c.nattrs = 2;
			c.attrs = at;
		}
		assert_int_equal(kt_run(&c, &out), 0);
		assert_int_equal(out.shape.dims[2], 4);
		assert_int_equal(out.shape.dims[3], 9);
		for (int ch = 0; ch < 2; ch++) /* np.repeat along H by 2 and W by 3 */
			for (int h = 0; h < 4; h++)
				for (int w = 0; w < 9; w++)
					assert_true(((float *)out.data)[(ch * 4 + h) * 9 + w] ==
						    ((float *)in[0].data)[(ch * 2 + h / 2) * 3 + w / 3]);
		hp_tensor_free(&out);
	}
	/* the importer's rewrite of Upsample-9 in an opset-9 graph: Resize(X, -, scales) */
	{
		struct hp_tensor in3[3] = { in[0], { 0 }, in[1] };
		struct hp_attr at[3] = { m, kt_string("coordinate_transformation_mode", "asymmetric"),
					 kt_string("nearest_mode", "floor") };
		c = (struct kt_case){ .op = "Resize", .nin = 3, .in = in3, .const_mask = 4, .nattrs = 3, .attrs = at,
				      .nout = 1, .opset = 9 };
		assert_int_equal(kt_run(&c, &out), 0);
		for (int ch = 0; ch < 2; ch++)
			for (int h = 0; h < 4; h++)
				for (int w = 0; w < 9; w++)
					assert_true(((float *)out.data)[(ch * 4 + h) * 9 + w] ==
						    ((float *)in[0].data)[(ch * 2 + h / 2) * 3 + w / 3]);
		hp_tensor_free(&out);
		c.const_mask = 0; /* scales given at run time: refused, not a constant */
		assert_int_equal(kt_run(&c, &out), HP_ENOTCONST);
		assert_non_null(strstr(hp_errmsg(), "scales"));
	}
	/* opset-10 linear is asymmetric: out[x] = in at x / scale */
	{
		struct hp_attr lin = kt_string("mode", "linear");
		struct rcase r = { "linear", "asymmetric", NULL, 0, 0, 0, 4, { 1, 2, 2, 3 }, { 1, 1, 2, 3 } };
		struct hp_tensor ref = reference(&r, &in[0]);
		c = (struct kt_case){ .op = "Resize", .nin = 2, .in = in, .const_mask = 2, .nattrs = 1, .attrs = &lin,
				      .nout = 1 };
		assert_int_equal(kt_run(&c, &out), 0);
		assert_true(kt_rel_err(&out, &ref) <= 1e-6);
		hp_tensor_free(&out);
		hp_tensor_free(&ref);
	}
	hp_tensor_free(&in[0]);
	hp_tensor_free(&in[1]);
}

static void test_types_and_errors(void **state)
{
	int64_t dims[] = { 1, 1, 3, 4 }, four = 4;
	struct hp_tensor in[3] = { kt_tensor(HP_U8, 4, dims), { 0 }, kt_tensor(HP_F32, 1, &four) }, out;
	struct hp_attr m = kt_string("mode", "nearest");
	static const float sc[] = { 1, 1, 2, 0.5f };
	struct kt_case c = { .op = "Resize", .nin = 3, .in = in, .const_mask = 4, .nattrs = 1, .attrs = &m, .nout = 1 };

	(void)state;
	for (int i = 0; i < 12; i++)
		((uint8_t *)in[0].data)[i] = (uint8_t)(i * 17);
	memcpy(in[2].data, sc, sizeof sc);
	assert_int_equal(kt_run(&c, &out), 0); /* nearest on uint8: half_pixel, prefer floor */
	assert_int_equal(out.shape.dims[2], 6);
	assert_int_equal(out.shape.dims[3], 2);
	/* W: x=0 -> (0.5)/0.5-0.5 = 0.5 -> 0; x=1 -> 2.5 -> 2.  H: 6 rows from 3 */
	assert_int_equal(((uint8_t *)out.data)[0], 0);
	assert_int_equal(((uint8_t *)out.data)[1], 2 * 17);
	assert_int_equal(((uint8_t *)out.data)[11], (2 * 4 + 2) * 17);
	hp_tensor_free(&out);
	m = kt_string("mode", "linear");
	assert_int_equal(kt_run(&c, &out), HP_EUNSUPPORTED); /* linear on uint8 */
	hp_tensor_free(&in[0]);
	in[0] = kt_tensor(HP_F32, 4, dims);
	c.const_mask = 0;
	assert_int_equal(kt_run(&c, &out), HP_ENOTCONST); /* scales not constant */
	assert_non_null(strstr(hp_errmsg(), "scales"));
	assert_non_null(strstr(hp_errmsg(), "node0"));
	m = kt_string("mode", "area");
	c.const_mask = 4;
	assert_int_equal(kt_run(&c, &out), HP_EUNSUPPORTED);
	hp_tensor_free(&in[0]);
	hp_tensor_free(&in[2]);
}

/* ---- against ONNX's numpy reference ------------------------------------- */

static const char pyscript[] =
	"import sys, numpy as np\n"
	"from onnx.backend.test.case.node.resize import interpolate_nd, nearest_coeffs, linear_coeffs, cubic_coeffs\n"
	"d = sys.argv[1]\n"
	"for line in open(d + '/cases.txt'):\n"
	"    i, mode, coord, nm, a, ex, ext, kind, vals, roi = line.split()\n"
	"    x = np.load(d + '/x' + i + '.npy')\n"
	"    v = [float(t) for t in vals.split(',')]\n"
	"    kw = dict(coordinate_transformation_mode=coord, exclude_outside=bool(int(ex)), extrapolation_value=float(ext))\n"
	"    if roi != '-': kw['roi'] = np.array([float(t) for t in roi.split(',')])\n"
	"    f = {'nearest': lambda r: nearest_coeffs(r, mode=nm), 'linear': linear_coeffs,\n"
	"         'cubic': lambda r: cubic_coeffs(r, A=float(a))}[mode]\n"
	"    if kind == 's': y = interpolate_nd(x, f, scale_factors=np.array(v, dtype=np.float32), **kw)\n"
	"    else: y = interpolate_nd(x, f, output_size=[int(t) for t in v], **kw)\n"
	"    np.save(d + '/y' + i + '.npy', y.astype(np.float32))\n";

static void test_onnx_reference(void **state)
{
	static const struct rcase cases[] = {
		{ "nearest", "half_pixel", "round_prefer_floor", -0.75, 0, 0, 4, { 1, 2, 3, 5 }, { 1, 1, 2.5f, 0.6f } },
		{ "nearest", "align_corners", "floor", -0.75, 0, 0, 4, { 1, 1, 4, 4 }, { 0 }, { 1, 1, 8, 8 } },
		{ "nearest", "asymmetric", "round_prefer_ceil", -0.75, 0, 0, 4, { 1, 1, 4, 4 }, { 0 }, { 1, 1, 7, 3 } },
		{ "linear", "half_pixel", "round_prefer_floor", -0.75, 0, 0, 5, { 1, 2, 3, 4, 3 }, { 1, 1, 2, 1.5f, 2 } },
		{ "linear", "align_corners", "round_prefer_floor", -0.75, 0, 0, 4, { 1, 1, 2, 4 }, { 1, 1, 0.6f, 0.6f } },
		{ "linear", "pytorch_half_pixel", "round_prefer_floor", -0.75, 0, 0, 4, { 1, 1, 4, 4 }, { 0 }, { 1, 1, 3, 2 } },
		{ "cubic", "half_pixel", "round_prefer_floor", -0.5, 1, 0, 4, { 1, 1, 5, 4 }, { 1, 1, 1.6f, 0.8f } },
		{ "cubic", "asymmetric", "round_prefer_floor", -0.75, 0, 0, 4, { 1, 1, 4, 4 }, { 1, 1, 2, 2 } },
		{ "linear", "tf_crop_and_resize", "round_prefer_floor", -0.75, 0, 10, 4, { 1, 1, 4, 4 }, { 0 },
		  { 1, 1, 3, 3 }, { 0, 0, 0.4f, 0.6f, 1, 1, 1.2f, 1.7f } },
	};
	const int nc = (int)(sizeof cases / sizeof cases[0]);
	const char *py = getenv("HPDLF_PYTHON"), *tmp = getenv("TMPDIR");
	char dir[256], path[512], cmd[1024];
	FILE *f;

	(void)state;
	snprintf(dir, sizeof dir, "%s/hpdlf-resize-XXXXXX", tmp && tmp[0] ? tmp : "/tmp");
	if (!py || !mkdtemp(dir))
		skip();
	snprintf(path, sizeof path, "%s/cases.txt", dir);
	f = fopen(path, "w");
	assert_non_null(f);
	for (int i = 0; i < nc; i++) {
		const struct rcase *c = &cases[i];
		struct hp_tensor x = kt_tensor(HP_F32, c->rank, c->in);
		kt_fill_random(&x, 100 + (unsigned)i, -2, 2);
		snprintf(path, sizeof path, "%s/x%d.npy", dir, i);
		assert_int_equal(hp_npy_write(path, &x), 0);
		hp_tensor_free(&x);
		fprintf(f, "%d %s %s %s %g %d %g %s ", i, c->mode, c->coord, c->nearest, c->a, c->exclude, c->extrap,
			c->sizes[0] ? "z" : "s");
		for (int d = 0; d < c->rank; d++)
			fprintf(f, d ? ",%.9g" : "%.9g", c->sizes[0] ? (double)c->sizes[d] : (double)c->scales[d]);
		if (!strcmp(c->coord, "tf_crop_and_resize"))
			for (int d = 0; d < 2 * c->rank; d++)
				fprintf(f, d ? ",%.9g" : " %.9g", (double)c->roi[d]);
		else
			fprintf(f, " -");
		fprintf(f, "\n");
	}
	fclose(f);
	snprintf(path, sizeof path, "%s/ref.py", dir);
	f = fopen(path, "w");
	assert_non_null(f);
	fputs(pyscript, f);
	fclose(f);
	snprintf(cmd, sizeof cmd, "%s %s/ref.py %s 2>/dev/null", py, dir, dir);
	if (system(cmd) != 0) {
		snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
		(void)!system(cmd);
		skip(); /* python without numpy/onnx */
	}
	for (int i = 0; i < nc; i++) {
		struct hp_tensor x, y, out;
		snprintf(path, sizeof path, "%s/x%d.npy", dir, i);
		assert_int_equal(hp_npy_read(path, &x), 0);
		snprintf(path, sizeof path, "%s/y%d.npy", dir, i);
		assert_int_equal(hp_npy_read(path, &y), 0);
		assert_int_equal(run_resize(&cases[i], &x, NULL, &out), 0);
		if (!(kt_rel_err(&out, &y) <= 2e-6))
			fail_msg("case %d (%s %s): rel err %g vs ONNX reference", i, cases[i].mode, cases[i].coord,
				 kt_rel_err(&out, &y));
		hp_tensor_free(&x);
		hp_tensor_free(&y);
		hp_tensor_free(&out);
	}
	snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
	(void)!system(cmd);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_nearest),
		cmocka_unit_test(test_linear),
		cmocka_unit_test(test_linear_rows_shared),
		cmocka_unit_test(test_cubic),
		cmocka_unit_test(test_crop),
		cmocka_unit_test(test_upsample_and_v10),
		cmocka_unit_test(test_types_and_errors),
		cmocka_unit_test(test_onnx_reference),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
