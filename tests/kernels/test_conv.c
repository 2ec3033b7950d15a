/* Conv and ConvTranspose against direct nested-loop references, over 1-D,
 * 2-D and 3-D shapes, groups, strides, dilations, asymmetric pads, every
 * auto_pad mode, output_padding and output_shape; determinism with a pool;
 * error messages. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "hpdlf/error.h"
#include "kernels/conv_impl.h"
#include "kernels/fused_impl.h" /* hp_epi_span */
#include "kernels/threadpool.h" /* hp_pool_test_delay */
#include "tests/kernels/harness.h"

struct cc {
	int nd, transpose;
	int64_t n, c, m, group;
	int64_t in[3], k[3], s[3], d[3], pb[3], pe[3], op[3], os[3];
	const char *autopad;  /* NULL: attribute absent */
	int bias, ks_attr, pads_attr, os_attr;
};

/* Expected output size and begin pad of one axis, straight from the ONNX
 * operator documentation. */
static int64_t ref_axis(const struct cc *t, int i, int64_t *pb)
{
	int64_t ek = (t->k[i] - 1) * t->d[i] + 1, in = t->in[i], total, out, half;
	const char *ap = t->autopad ? t->autopad : "NOTSET";
	int same = !strcmp(ap, "SAME_UPPER") || !strcmp(ap, "SAME_LOWER");

	if (!t->transpose) {
		if (!strcmp(ap, "VALID")) {
			*pb = 0;
			return (in - ek) / t->s[i] + 1;
		}
		if (same) {
			out = (in + t->s[i] - 1) / t->s[i];
			total = (out - 1) * t->s[i] + ek - in;
			total = total < 0 ? 0 : total;
			*pb = !strcmp(ap, "SAME_UPPER") ? total / 2 : (total + 1) / 2;
			return out;
		}
		*pb = t->pb[i];
		return (in + t->pb[i] + t->pe[i] - ek) / t->s[i] + 1;
	}
	if (!t->os_attr && !same) {
		int valid = !strcmp(ap, "VALID");
		*pb = valid ? 0 : t->pb[i];
		return t->s[i] * (in - 1) + t->op[i] + ek - (valid ? 0 : t->pb[i] + t->pe[i]);
	}
	out = t->os_attr ? t->os[i] : in * t->s[i];
	total = t->s[i] * (in - 1) + t->op[i] + ek - out;
	/* ONNX's reference halves with Python's floor division (total may be < 0) */
	half = total >= 0 ? total / 2 : -((1 - total) / 2);
	*pb = !strcmp(ap, "SAME_UPPER") ? half : total - half;
	return out;
}

static float at(const struct hp_tensor *t, int64_t i)
{
	return ((const float *)t->data)[i];
}

/* Direct convolution on 3-D-normalized dims (o: output dims, pb: begin pads). */
static void ref_conv(const struct cc *t, const int64_t *x3, const int64_t *o3, const int64_t *k3, const int64_t *s3,
		     const int64_t *d3, const int64_t *p3, const struct hp_tensor *x, const struct hp_tensor *w,
		     const struct hp_tensor *b, float *y)
{
	int64_t cg = t->c / t->group, mg = t->m / t->group, ov = o3[0] * o3[1] * o3[2];
	int64_t kv = k3[0] * k3[1] * k3[2];

	for (int64_t n = 0; n < t->n; n++)
		for (int64_t m = 0; m < t->m; m++)
			for (int64_t o = 0; o < ov; o++) {
				int64_t od = o / (o3[1] * o3[2]), oh = o / o3[2] % o3[1], ow = o % o3[2], g = m / mg;
				double acc = b ? at(b, m) : 0;
				for (int64_t c = 0; c < cg; c++)
					for (int64_t kd = 0; kd < k3[0]; kd++)
						for (int64_t kh = 0; kh < k3[1]; kh++)
							for (int64_t kw = 0; kw < k3[2]; kw++) {
								int64_t id = od * s3[0] - p3[0] + kd * d3[0];
								int64_t ih = oh * s3[1] - p3[1] + kh * d3[1];
								int64_t iw = ow * s3[2] - p3[2] + kw * d3[2];
								if (id < 0 || id >= x3[0] || ih < 0 || ih >= x3[1] ||
								    iw < 0 || iw >= x3[2])
									continue;
								acc += (double)at(x, ((n * t->c + g * cg + c) * x3[0] + id) * x3[1] * x3[2] + ih * x3[2] + iw) *
								       at(w, ((m * cg + c) * kv) + (kd * k3[1] + kh) * k3[2] + kw);
							}
				y[(n * t->m + m) * ov + o] = (float)acc;
			}
}

/* Direct transposed convolution: every input element scatters its kernel. */
static void ref_convt(const struct cc *t, const int64_t *x3, const int64_t *o3, const int64_t *k3, const int64_t *s3,
		      const int64_t *d3, const int64_t *p3, const struct hp_tensor *x, const struct hp_tensor *w,
		      const struct hp_tensor *b, float *y)
{
	int64_t cg = t->c / t->group, mg = t->m / t->group, xv = x3[0] * x3[1] * x3[2], ov = o3[0] * o3[1] * o3[2];
	int64_t kv = k3[0] * k3[1] * k3[2];
	double *acc = calloc((size_t)(t->n * t->m * ov), sizeof *acc);

	for (int64_t n = 0; n < t->n; n++)
		for (int64_t c = 0; c < t->c; c++)
			for (int64_t i = 0; i < xv; i++) {
				int64_t id = i / (x3[1] * x3[2]), ih = i / x3[2] % x3[1], iw = i % x3[2], g = c / cg;
				float xv_ = at(x, (n * t->c + c) * xv + i);
				for (int64_t m = 0; m < mg; m++)
					for (int64_t kd = 0; kd < k3[0]; kd++)
						for (int64_t kh = 0; kh < k3[1]; kh++)
							for (int64_t kw = 0; kw < k3[2]; kw++) {
								int64_t od = id * s3[0] - p3[0] + kd * d3[0];
								int64_t oh = ih * s3[1] - p3[1] + kh * d3[1];
								int64_t ow = iw * s3[2] - p3[2] + kw * d3[2];
								if (od < 0 || od >= o3[0] || oh < 0 || oh >= o3[1] ||
								    ow < 0 || ow >= o3[2])
									continue;
								acc[(n * t->m + g * mg + m) * ov + (od * o3[1] + oh) * o3[2] + ow] +=
									(double)xv_ * at(w, (c * mg + m) * kv + (kd * k3[1] + kh) * k3[2] + kw);
							}
			}
	for (int64_t i = 0; i < t->n * t->m * ov; i++)
		y[i] = (float)(acc[i] + (b ? at(b, (i / ov) % t->m) : 0));
	free(acc);
}

struct built {
	struct hp_tensor x, w, b;
	struct hp_attr attrs[10];
	int nattrs;
	int64_t pads[6];
};

static void build(const struct cc *t, unsigned seed, struct built *bt)
{
	int64_t xd[5] = { t->n, t->c }, wd[5];
	int nd = t->nd;

	memset(bt, 0, sizeof *bt);
	wd[0] = t->transpose ? t->c : t->m;
	wd[1] = t->transpose ? t->m / t->group : t->c / t->group;
	for (int i = 0; i < nd; i++) {
		xd[2 + i] = t->in[i];
		wd[2 + i] = t->k[i];
		bt->pads[i] = t->pb[i];
		bt->pads[nd + i] = t->pe[i];
	}
	bt->x = kt_tensor(HP_F32, nd + 2, xd);
	bt->w = kt_tensor(HP_F32, nd + 2, wd);
	kt_fill_random(&bt->x, seed, -1, 1);
	kt_fill_random(&bt->w, seed + 1, -1, 1);
	if (t->bias) {
		bt->b = kt_tensor(HP_F32, 1, &t->m);
		kt_fill_random(&bt->b, seed + 2, -1, 1);
	}
	bt->attrs[bt->nattrs++] = kt_ints("strides", nd, t->s);
	bt->attrs[bt->nattrs++] = kt_ints("dilations", nd, t->d);
	if (t->group != 1)
		bt->attrs[bt->nattrs++] = kt_int("group", t->group);
	if (t->ks_attr)
		bt->attrs[bt->nattrs++] = kt_ints("kernel_shape", nd, t->k);
	if (t->pads_attr)
		bt->attrs[bt->nattrs++] = kt_ints("pads", 2 * nd, bt->pads);
	if (t->autopad)
		bt->attrs[bt->nattrs++] = kt_string("auto_pad", t->autopad);
	if (t->transpose && (t->op[0] || t->op[1] || t->op[2]))
		bt->attrs[bt->nattrs++] = kt_ints("output_padding", nd, t->op);
	if (t->os_attr)
		bt->attrs[bt->nattrs++] = kt_ints("output_shape", nd, t->os);
}

static void unbuild(struct built *bt)
{
	hp_tensor_free(&bt->x);
	hp_tensor_free(&bt->w);
	hp_tensor_free(&bt->b);
}

static int run_case(const struct cc *t, const struct built *bt, struct hp_pool *pool, struct hp_tensor *out)
{
	struct hp_tensor in[3] = { bt->x, bt->w, bt->b };
	struct kt_case c = { .op = t->transpose ? "ConvTranspose" : "Conv", .nin = t->bias ? 3 : 2, .in = in,
			     .nattrs = bt->nattrs, .attrs = bt->attrs, .nout = 1, .pool = pool };

	return kt_run(&c, out);
}

/* Run one case through the op and compare with the reference. */
static void check(const struct cc *t, unsigned seed, struct hp_pool *pool)
{
	int64_t x3[3] = { 1, 1, 1 }, o3[3] = { 1, 1, 1 }, k3[3] = { 1, 1, 1 }, s3[3] = { 1, 1, 1 }, d3[3] = { 1, 1, 1 };
	int64_t p3[3] = { 0, 0, 0 }, yd[5] = { t->n, t->m };
	struct hp_tensor out, ref;
	struct built bt;
	int off = 3 - t->nd, rc;
	double err;

	build(t, seed, &bt);
	for (int i = 0; i < t->nd; i++) {
		x3[off + i] = t->in[i];
		o3[off + i] = yd[2 + i] = ref_axis(t, i, &p3[off + i]);
		k3[off + i] = t->k[i];
		s3[off + i] = t->s[i];
		d3[off + i] = t->d[i];
	}
	rc = run_case(t, &bt, pool, &out);
	if (rc < 0)
		fail_msg("%s", hp_errmsg());
	ref = kt_tensor(HP_F32, t->nd + 2, yd);
	(t->transpose ? ref_convt : ref_conv)(t, x3, o3, k3, s3, d3, p3, &bt.x, &bt.w, t->bias ? &bt.b : NULL,
					      ref.data);
	err = kt_rel_err(&out, &ref);
	if (err < 0 || err > 1e-5)
		fail_msg("%s nd=%d c=%lld m=%lld g=%lld ap=%s: rel err %g", t->transpose ? "ConvTranspose" : "Conv",
			 t->nd, (long long)t->c, (long long)t->m, (long long)t->group,
			 t->autopad ? t->autopad : "-", err);
	hp_tensor_free(&out);
	hp_tensor_free(&ref);
	unbuild(&bt);
}

#define V3(a, b, c) { a, b, c }

static const struct cc conv_cases[] = {
	/* nd tr  n  c  m  g   in            k            s            d            pb           pe           op  os  ap  bias ks pads os */
	{ 1, 0, 2, 3, 4, 1, V3(11, 0, 0), V3(3, 0, 0), V3(1, 0, 0), V3(1, 0, 0), V3(1, 0, 0), V3(1, 0, 0), {0}, {0}, NULL, 1, 1, 1, 0 },
	{ 1, 0, 1, 4, 6, 2, V3(13, 0, 0), V3(3, 0, 0), V3(2, 0, 0), V3(2, 0, 0), V3(0, 0, 0), V3(2, 0, 0), {0}, {0}, NULL, 0, 0, 1, 0 },
	{ 1, 0, 1, 3, 2, 1, V3(9, 0, 0), V3(4, 0, 0), V3(3, 0, 0), V3(1, 0, 0), {0}, {0}, {0}, {0}, "SAME_LOWER", 1, 0, 0, 0 },
	{ 2, 0, 2, 3, 5, 1, V3(7, 9, 0), V3(3, 3, 0), V3(1, 1, 0), V3(1, 1, 0), V3(1, 1, 0), V3(1, 1, 0), {0}, {0}, NULL, 1, 1, 1, 0 },
	{ 2, 0, 1, 4, 4, 4, V3(8, 7, 0), V3(3, 3, 0), V3(2, 1, 0), V3(1, 2, 0), V3(1, 0, 0), V3(2, 1, 0), {0}, {0}, NULL, 1, 0, 1, 0 },
	{ 2, 0, 1, 6, 4, 2, V3(9, 10, 0), V3(2, 3, 0), V3(2, 3, 0), V3(1, 1, 0), {0}, {0}, {0}, {0}, "SAME_UPPER", 0, 1, 0, 0 },
	{ 2, 0, 1, 6, 4, 2, V3(9, 10, 0), V3(2, 3, 0), V3(2, 3, 0), V3(1, 1, 0), {0}, {0}, {0}, {0}, "SAME_LOWER", 1, 0, 0, 0 },
	{ 2, 0, 2, 3, 3, 1, V3(10, 8, 0), V3(3, 2, 0), V3(3, 2, 0), V3(2, 1, 0), {0}, {0}, {0}, {0}, "VALID", 1, 1, 0, 0 },
	{ 2, 0, 1, 5, 7, 1, V3(6, 6, 0), V3(1, 1, 0), V3(1, 1, 0), V3(1, 1, 0), {0}, {0}, {0}, {0}, NULL, 1, 0, 0, 0 },
	{ 2, 0, 1, 5, 7, 1, V3(7, 6, 0), V3(1, 1, 0), V3(2, 2, 0), V3(1, 1, 0), V3(1, 0, 0), V3(0, 1, 0), {0}, {0}, NULL, 1, 0, 1, 0 },
	{ 2, 0, 1, 3, 2, 1, V3(5, 5, 0), V3(3, 3, 0), V3(1, 1, 0), V3(1, 1, 0), {0}, {0}, {0}, {0}, "NOTSET", 0, 1, 0, 0 },
	{ 3, 0, 1, 2, 4, 1, V3(6, 7, 5), V3(3, 3, 3), V3(1, 1, 1), V3(1, 1, 1), V3(1, 1, 1), V3(1, 1, 1), {0}, {0}, NULL, 1, 1, 1, 0 },
	{ 3, 0, 2, 4, 4, 2, V3(7, 6, 8), V3(3, 2, 3), V3(2, 1, 2), V3(1, 2, 1), V3(0, 1, 2), V3(1, 0, 1), {0}, {0}, NULL, 1, 0, 1, 0 },
	{ 3, 0, 1, 3, 3, 3, V3(5, 6, 7), V3(3, 3, 3), V3(1, 2, 1), V3(2, 1, 1), {0}, {0}, {0}, {0}, "SAME_UPPER", 1, 0, 0, 0 },
	{ 3, 0, 1, 2, 5, 1, V3(6, 5, 4), V3(2, 2, 2), V3(2, 2, 2), V3(1, 1, 1), {0}, {0}, {0}, {0}, "VALID", 0, 1, 0, 0 },
	{ 3, 0, 1, 4, 2, 1, V3(4, 5, 6), V3(1, 1, 1), V3(1, 1, 1), V3(1, 1, 1), {0}, {0}, {0}, {0}, NULL, 1, 1, 0, 0 },
};

static const struct cc convt_cases[] = {
	{ 1, 1, 2, 3, 4, 1, V3(7, 0, 0), V3(3, 0, 0), V3(2, 0, 0), V3(1, 0, 0), V3(1, 0, 0), V3(0, 0, 0), V3(1, 0, 0), {0}, NULL, 1, 1, 1, 0 },
	{ 1, 1, 1, 4, 6, 2, V3(6, 0, 0), V3(3, 0, 0), V3(1, 0, 0), V3(2, 0, 0), V3(0, 0, 0), V3(0, 0, 0), {0}, {0}, NULL, 0, 0, 0, 0 },
	{ 2, 1, 1, 3, 2, 1, V3(4, 5, 0), V3(3, 3, 0), V3(2, 2, 0), V3(1, 1, 0), V3(1, 0, 0), V3(1, 2, 0), V3(1, 0, 0), {0}, NULL, 1, 1, 1, 0 },
	{ 2, 1, 2, 4, 4, 4, V3(5, 4, 0), V3(3, 2, 0), V3(1, 2, 0), V3(2, 1, 0), V3(1, 1, 0), V3(1, 0, 0), {0}, {0}, NULL, 1, 0, 1, 0 },
	{ 2, 1, 1, 4, 6, 2, V3(4, 5, 0), V3(3, 3, 0), V3(2, 2, 0), V3(1, 1, 0), {0}, {0}, {0}, {0}, "SAME_UPPER", 1, 0, 0, 0 },
	{ 2, 1, 1, 4, 6, 2, V3(4, 5, 0), V3(3, 3, 0), V3(2, 2, 0), V3(1, 1, 0), {0}, {0}, {0}, {0}, "SAME_LOWER", 1, 0, 0, 0 },
	{ 2, 1, 1, 3, 3, 1, V3(4, 3, 0), V3(3, 2, 0), V3(3, 2, 0), V3(1, 1, 0), {0}, {0}, {0}, {0}, "VALID", 0, 1, 0, 0 },
	{ 2, 1, 1, 3, 2, 1, V3(4, 4, 0), V3(3, 3, 0), V3(2, 2, 0), V3(1, 1, 0), {0}, {0}, {0}, V3(8, 9, 0), NULL, 1, 0, 0, 1 },
	{ 2, 1, 1, 3, 2, 1, V3(4, 4, 0), V3(3, 3, 0), V3(2, 2, 0), V3(1, 1, 0), {0}, {0}, {0}, V3(7, 10, 0), "SAME_UPPER", 1, 0, 0, 1 },
	{ 3, 1, 1, 4, 2, 1, V3(3, 4, 3), V3(2, 2, 2), V3(2, 2, 2), V3(1, 1, 1), {0}, {0}, {0}, {0}, NULL, 1, 1, 0, 0 },
	{ 3, 1, 2, 2, 4, 2, V3(3, 3, 4), V3(3, 2, 3), V3(2, 1, 2), V3(1, 2, 1), V3(1, 0, 1), V3(0, 1, 2), V3(1, 0, 1), {0}, NULL, 1, 0, 1, 0 },
	{ 3, 1, 1, 3, 3, 3, V3(3, 4, 3), V3(3, 3, 3), V3(2, 2, 2), V3(1, 1, 1), {0}, {0}, {0}, V3(6, 8, 7), NULL, 0, 1, 0, 1 },
};

/* Each case on the auto choice, then with the kxk path off (the paths it
 * replaces, kept for what it does not cover). */
static void test_conv_cases(void **state)
{
	(void)state;
	for (int mode = 0; mode >= -1; mode--) {
		hp_conv_set_kxk(mode);
		for (size_t i = 0; i < sizeof conv_cases / sizeof conv_cases[0]; i++)
			check(&conv_cases[i], 10 + (unsigned)i, NULL);
	}
	hp_conv_set_kxk(0);
}

static void test_convt_cases(void **state)
{
	(void)state;
	for (size_t i = 0; i < sizeof convt_cases / sizeof convt_cases[0]; i++)
		check(&convt_cases[i], 50 + (unsigned)i, NULL);
}

/* Shapes that cut into several tiles and thread slices: channels * k^3 large
 * enough that the 16 MiB column budget holds fewer columns than the volume. */
static void test_conv_tiled_pool(void **state)
{
	static const struct cc big[] = {
		{ 3, 0, 1, 160, 8, 1, V3(8, 16, 17), V3(3, 3, 3), V3(1, 1, 1), V3(1, 1, 1), V3(1, 1, 1), V3(1, 1, 1), {0}, {0}, NULL, 1, 1, 1, 0 },
		{ 3, 0, 2, 6, 8, 2, V3(9, 10, 11), V3(3, 3, 3), V3(1, 1, 1), V3(1, 1, 1), V3(1, 1, 1), V3(1, 1, 1), {0}, {0}, NULL, 1, 1, 1, 0 },
		{ 3, 1, 1, 12, 10, 1, V3(5, 6, 7), V3(2, 2, 2), V3(2, 2, 2), V3(1, 1, 1), {0}, {0}, {0}, {0}, NULL, 1, 1, 0, 0 },
		{ 3, 1, 1, 4, 8, 1, V3(12, 12, 12), V3(3, 3, 3), V3(1, 1, 1), V3(1, 1, 1), V3(1, 1, 1), V3(1, 1, 1), {0}, {0}, NULL, 1, 1, 1, 0 },
		{ 2, 1, 1, 4, 3, 1, V3(6, 5, 0), V3(4, 4, 0), V3(2, 2, 0), V3(1, 1, 0), V3(1, 1, 0), V3(1, 1, 0), {0}, {0}, NULL, 1, 1, 1, 0 },
		{ 2, 0, 1, 8, 6, 1, V3(33, 35, 0), V3(1, 1, 0), V3(1, 1, 0), V3(1, 1, 0), {0}, {0}, {0}, {0}, NULL, 1, 0, 0, 0 },
	};
	struct hp_pool *pool;

	(void)state;
	assert_int_equal(hp_pool_create(2, &pool), 0);
	for (int mode = 0; mode >= -1; mode--) { /* auto, then without the kxk path */
		hp_conv_set_kxk(mode);
		for (size_t i = 0; i < sizeof big / sizeof big[0]; i++) {
			check(&big[i], 90 + (unsigned)i, NULL);
			check(&big[i], 90 + (unsigned)i, pool);
		}
	}
	hp_conv_set_kxk(0);
	hp_pool_destroy(pool);
}

/* Stride-1 convolutions on the padded-slab path (forced, whatever the
 * heuristics): asymmetric and oversized pads, dilation, groups, 1-D/2-D,
 * with tiles inside a plane or across planes, slabs cut into chunks by a
 * small workspace, one and two threads; and the same cases on im2col. */
static const struct cc shift_cases[] = {
	{ 3, 0, 1, 8, 5, 1, V3(5, 6, 7), V3(3, 3, 3), V3(1, 1, 1), V3(1, 1, 1), V3(1, 1, 1), V3(1, 1, 1), {0}, {0}, NULL, 1, 1, 1, 0 },
	{ 3, 0, 2, 16, 6, 2, V3(4, 5, 9), V3(3, 2, 3), V3(1, 1, 1), V3(2, 1, 1), V3(2, 0, 1), V3(1, 1, 3), {0}, {0}, NULL, 1, 0, 1, 0 },
	{ 3, 0, 1, 9, 4, 1, V3(6, 5, 4), V3(2, 2, 2), V3(1, 1, 1), V3(1, 1, 1), {0}, {0}, {0}, {0}, "SAME_LOWER", 0, 1, 0, 0 },
	{ 3, 0, 1, 8, 3, 1, V3(5, 7, 6), V3(3, 3, 3), V3(1, 1, 1), V3(1, 1, 1), V3(3, 0, 2), V3(0, 3, 1), {0}, {0}, NULL, 1, 1, 1, 0 },
	{ 3, 0, 1, 10, 7, 1, V3(6, 6, 6), V3(3, 3, 3), V3(1, 1, 1), V3(1, 1, 1), {0}, {0}, {0}, {0}, "VALID", 1, 1, 0, 0 },
	{ 3, 0, 1, 3, 4, 1, V3(7, 4, 5), V3(3, 1, 3), V3(1, 1, 1), V3(1, 1, 1), V3(1, 0, 1), V3(1, 0, 1), {0}, {0}, NULL, 1, 1, 1, 0 },
	{ 2, 0, 2, 8, 4, 1, V3(9, 11, 0), V3(3, 3, 0), V3(1, 1, 0), V3(1, 1, 0), V3(1, 1, 0), V3(1, 1, 0), {0}, {0}, NULL, 1, 1, 1, 0 },
	{ 1, 0, 2, 8, 3, 1, V3(13, 0, 0), V3(5, 0, 0), V3(1, 0, 0), V3(2, 0, 0), V3(2, 0, 0), V3(4, 0, 0), {0}, {0}, NULL, 1, 1, 1, 0 },
	/* small planes of many batch items (folded into one slab), groups */
	{ 2, 0, 5, 8, 6, 2, V3(4, 4, 0), V3(3, 3, 0), V3(1, 1, 0), V3(1, 1, 0), V3(1, 1, 0), V3(1, 1, 0), {0}, {0}, NULL, 1, 1, 1, 0 },
};

static void test_conv_shift(void **state)
{
	static const int64_t tile_cols[] = { 0, 7, 40, 150 };
	static const size_t ws[] = { 0, 6000 * sizeof(float) };
	struct hp_pool *pool;

	(void)state;
	assert_int_equal(hp_pool_create(2, &pool), 0);
	for (size_t i = 0; i < sizeof shift_cases / sizeof shift_cases[0]; i++) {
		hp_conv_set_shift(1);
		for (size_t tc = 0; tc < 4; tc++)
			for (size_t w = 0; w < 2; w++) {
				hp_shift_set_tile_cols(tile_cols[tc]);
				hp_conv_set_ws_max(ws[w]);
				check(&shift_cases[i], 110 + (unsigned)i, NULL);
				check(&shift_cases[i], 110 + (unsigned)i, pool);
			}
		hp_shift_set_tile_cols(0);
		hp_conv_set_ws_max(0);
		hp_conv_set_shift(-1);
		check(&shift_cases[i], 110 + (unsigned)i, pool);
		hp_conv_set_shift(0);
	}
	hp_pool_destroy(pool);
}

/* ConvTranspose with kernel == stride (blocks tile the output, stored
 * directly): tiles that cut rows (small workspace), groups, 1-3 dims. */
static void test_convt_blocked(void **state)
{
	static const struct cc t[] = {
		{ 3, 1, 1, 6, 4, 1, V3(5, 3, 7), V3(2, 2, 2), V3(2, 2, 2), V3(1, 1, 1), {0}, {0}, {0}, {0}, NULL, 1, 1, 0, 0 },
		{ 3, 1, 2, 4, 6, 2, V3(3, 4, 5), V3(1, 2, 3), V3(1, 2, 3), V3(1, 1, 1), {0}, {0}, {0}, {0}, NULL, 1, 1, 0, 0 },
		{ 2, 1, 1, 3, 5, 1, V3(7, 9, 0), V3(2, 3, 0), V3(2, 3, 0), V3(1, 1, 0), {0}, {0}, {0}, {0}, NULL, 0, 1, 0, 0 },
		{ 1, 1, 2, 5, 2, 1, V3(11, 0, 0), V3(3, 0, 0), V3(3, 0, 0), V3(1, 0, 0), {0}, {0}, {0}, {0}, NULL, 1, 1, 0, 0 },
	};
	struct hp_colgeom g = { .img = { 10, 6, 14 }, .grid = { 5, 3, 7 }, .k = { 2, 2, 2 }, .stride = { 2, 2, 2 },
				.dil = { 1, 1, 1 } };
	struct hp_pool *pool;

	(void)state;
	hp_colgeom_finish(&g);
	assert_true(hp_convt_blocked(&g));
	g.pad[1] = 1;
	assert_false(hp_convt_blocked(&g));
	assert_int_equal(hp_pool_create(2, &pool), 0);
	for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
		for (size_t w = 0; w < 2; w++) {
			hp_conv_set_ws_max(w ? 2000 * sizeof(float) : 0);
			check(&t[i], 130 + (unsigned)i, NULL);
			check(&t[i], 130 + (unsigned)i, pool);
		}
	hp_conv_set_ws_max(0);
	hp_pool_destroy(pool);
}

/* The planner's choices on the U-Net's shapes: slabs for wide stride-1 3x3x3
 * layers, im2col for one input channel and for small planes. */
static void test_shift_choice(void **state)
{
	struct hp_colgeom g = { .img = { 48, 48, 48 }, .grid = { 48, 48, 48 }, .k = { 3, 3, 3 },
				.stride = { 1, 1, 1 }, .dil = { 1, 1, 1 }, .pad = { 1, 1, 1 } };
	struct hp_shift s;

	(void)state;
	hp_colgeom_finish(&g);
	assert_int_equal(hp_shift_init(&s, &g, 16, 16), 0);
	assert_true(hp_shift_useful(&s) >= HP_SHIFT_MIN_USEFUL);
	for (int i = 0; i < 3; i++)
		g.img[i] = g.grid[i] = 6;
	hp_colgeom_finish(&g);
	assert_int_equal(hp_shift_init(&s, &g, 64, 64), 0);
	assert_true(hp_shift_useful(&s) < HP_SHIFT_MIN_USEFUL);
	/* LeNet's 4x4 planes with a batch of 64: folded, the tiles span items */
	g.img[0] = g.grid[0] = g.k[0] = 1;
	g.pad[0] = 0;
	g.img[1] = g.grid[1] = g.img[2] = g.grid[2] = 4;
	hp_colgeom_finish(&g);
	assert_int_equal(hp_shift_init(&s, &g, 16, 32), 0);
	assert_int_equal(hp_shift_fold(&s, 64, 16 * 16, 32 * 16), 0);
	assert_true(s.tplanes > 1 && s.out[0] == 64);
	assert_true(hp_shift_useful(&s) >= HP_SHIFT_MIN_USEFUL_FOLDED);
	g.k[0] = 3;
	g.pad[0] = 1;
	hp_colgeom_finish(&g);
	assert_int_equal(hp_shift_init(&s, &g, 16, 32), 0);
	assert_int_equal(hp_shift_fold(&s, 64, 16 * 16, 32 * 16), -1); /* depth: no fold */
	g.stride[2] = 2;
	assert_int_equal(hp_shift_init(&s, &g, 64, 64), -1);
}

static void test_determinism(void **state)
{
	static const struct cc t[] = {
		{ 3, 0, 1, 16, 16, 1, V3(12, 12, 12), V3(3, 3, 3), V3(1, 1, 1), V3(1, 1, 1), V3(1, 1, 1), V3(1, 1, 1), {0}, {0}, NULL, 1, 1, 1, 0 },
		{ 3, 1, 1, 16, 8, 1, V3(6, 6, 6), V3(2, 2, 2), V3(2, 2, 2), V3(1, 1, 1), {0}, {0}, {0}, {0}, NULL, 1, 1, 0, 0 },
	};
	struct hp_pool *pool;

	(void)state;
	assert_int_equal(hp_pool_create(2, &pool), 0);
	for (size_t i = 0; i < 2; i++) {
		struct hp_tensor a, b;
		struct built bt;
		build(&t[i], 7, &bt);
		assert_int_equal(run_case(&t[i], &bt, pool, &a), 0);
		assert_int_equal(run_case(&t[i], &bt, pool, &b), 0);
		assert_memory_equal(a.data, b.data, hp_tensor_bytes(&a));
		hp_tensor_free(&a);
		hp_tensor_free(&b);
		unbuild(&bt);
	}
	hp_pool_destroy(pool);
}


/* The dot path (forced): small planes, stride 2, 1x1 with stride, groups,
 * dilation, 1-D and 3-D, patch rows shorter than a multiple of 8 and
 * longer than its k block (partial sums resumed), output channels not a
 * multiple of its micro-tile; one and two threads, against the loops. */
static const struct cc dot_cases[] = {
	{ 2, 0, 4, 64, 70, 1, V3(2, 2, 0), V3(3, 3, 0), V3(1, 1, 0), V3(1, 1, 0), V3(1, 1, 0), V3(1, 1, 0), {0}, {0}, NULL, 1, 1, 1, 0 },
	{ 2, 0, 3, 5, 17, 1, V3(7, 9, 0), V3(3, 3, 0), V3(2, 2, 0), V3(1, 1, 0), V3(1, 0, 0), V3(0, 1, 0), {0}, {0}, NULL, 1, 1, 1, 0 },
	{ 2, 0, 2, 33, 8, 1, V3(4, 4, 0), V3(1, 1, 0), V3(2, 2, 0), V3(1, 1, 0), {0}, {0}, {0}, {0}, NULL, 0, 1, 0, 0 },
	{ 2, 0, 2, 12, 18, 3, V3(5, 5, 0), V3(3, 3, 0), V3(1, 1, 0), V3(2, 2, 0), V3(2, 2, 0), V3(2, 2, 0), {0}, {0}, NULL, 1, 1, 1, 0 },
	{ 1, 0, 3, 7, 5, 1, V3(11, 0, 0), V3(4, 0, 0), V3(3, 0, 0), V3(1, 0, 0), V3(2, 0, 0), V3(1, 0, 0), {0}, {0}, NULL, 1, 1, 1, 0 },
	{ 3, 0, 2, 4, 9, 1, V3(4, 5, 3), V3(2, 3, 2), V3(1, 2, 1), V3(1, 1, 1), V3(1, 1, 0), V3(0, 1, 1), {0}, {0}, NULL, 1, 1, 1, 0 },
	{ 2, 0, 1, 130, 4, 1, V3(3, 3, 0), V3(3, 3, 0), V3(1, 1, 0), V3(1, 1, 0), V3(1, 1, 0), V3(1, 1, 0), {0}, {0}, NULL, 0, 1, 1, 0 },
	{ 2, 0, 5, 16, 100, 1, V3(6, 6, 0), V3(3, 3, 0), V3(2, 2, 0), V3(1, 1, 0), V3(1, 1, 0), V3(0, 0, 0), {0}, {0}, NULL, 1, 1, 1, 0 },
	/* train-refs' bn_cnn: 3x3 convolutions of a batch of 16, 8x8 and 4x4 */
	{ 2, 0, 16, 3, 8, 1, V3(8, 8, 0), V3(3, 3, 0), V3(1, 1, 0), V3(1, 1, 0), V3(1, 1, 0), V3(1, 1, 0), {0}, {0}, NULL, 0, 1, 1, 0 },
	{ 2, 0, 16, 8, 16, 1, V3(4, 4, 0), V3(3, 3, 0), V3(1, 1, 0), V3(1, 1, 0), V3(1, 1, 0), V3(1, 1, 0), {0}, {0}, NULL, 0, 1, 1, 0 },
	/* 1x1, stride 1 (else the direct path: X is the column matrix) */
	{ 2, 0, 2, 20, 12, 1, V3(5, 7, 0), V3(1, 1, 0), V3(1, 1, 0), V3(1, 1, 0), {0}, {0}, {0}, {0}, NULL, 1, 1, 0, 0 },
	/* depthwise (its own path whatever the dot mode; FusedConv's epilogue per plane) */
	{ 2, 0, 2, 6, 12, 6, V3(7, 9, 0), V3(3, 3, 0), V3(1, 1, 0), V3(1, 1, 0), V3(1, 1, 0), V3(1, 1, 0), {0}, {0}, NULL, 1, 1, 1, 0 },
};

static void test_conv_dot(void **state)
{
	struct hp_pool *pool;

	(void)state;
	if (!hp_dot_available())
		skip();
	assert_int_equal(hp_pool_create(2, &pool), 0);
	hp_conv_set_dot(1);
	for (size_t i = 0; i < sizeof dot_cases / sizeof dot_cases[0]; i++) {
		check(&dot_cases[i], 150 + (unsigned)i, NULL);
		check(&dot_cases[i], 150 + (unsigned)i, pool);
	}
	hp_conv_set_dot(0);
	hp_pool_destroy(pool);
}

/* Output rows [h0, h1) on the first spatial axis as the band pass cuts
 * them: the input rows they read (as a fresh tensor) and the pads left. */
static void row_band(const struct cc *t, const struct hp_tensor *x, int64_t h0, int64_t h1, struct cc *bt,
		     struct hp_tensor *bx)
{
	int64_t ek = (t->k[0] - 1) * t->d[0] + 1, i0 = h0 * t->s[0] - t->pb[0], i1 = (h1 - 1) * t->s[0] - t->pb[0] + ek;
	int64_t lo = i0 < 0 ? 0 : i0, hi = i1 > t->in[0] ? t->in[0] : i1, dims[5] = { t->n, t->c, hi - lo };
	int64_t rest = 1;

	*bt = *t;
	bt->in[0] = hi - lo;
	bt->pb[0] = lo - i0;
	bt->pe[0] = i1 - hi;
	for (int i = 1; i < t->nd; i++)
		rest *= dims[2 + i] = t->in[i];
	*bx = kt_tensor(HP_F32, t->nd + 2, dims);
	for (int64_t nc = 0; nc < t->n * t->c; nc++)
		memcpy((float *)bx->data + nc * (hi - lo) * rest, (const float *)x->data + (nc * t->in[0] + lo) * rest,
		       (size_t)((hi - lo) * rest) * sizeof(float));
}

/* y[a:b] of a batch band (axis 0) or output rows [a, b) (axis 2) run on
 * their own, bitwise against the whole node's output `whole`. */
static void check_band(const struct cc *t, const struct built *whole_bt, const struct hp_tensor *whole, int axis,
		       int64_t a, int64_t b, struct hp_pool *pool)
{
	struct cc bc = *t;
	struct built bt;
	struct hp_tensor out, bx;
	int64_t inner = 1, rows = whole->shape.dims[2];

	for (int i = 3; i < whole->shape.rank; i++)
		inner *= whole->shape.dims[i];
	if (axis == 0) {
		int64_t item = hp_shape_numel(&whole_bt->x.shape) / t->n;
		bc.n = b - a;
		bx = kt_tensor(HP_F32, whole_bt->x.shape.rank, whole_bt->x.shape.dims);
		bx.shape.dims[0] = b - a;
		memcpy(bx.data, (const float *)whole_bt->x.data + a * item, (size_t)((b - a) * item) * sizeof(float));
	} else {
		row_band(t, &whole_bt->x, a, b, &bc, &bx);
	}
	build(&bc, 1, &bt); /* the band's attributes; its tensors are the whole node's */
	hp_tensor_free(&bt.x);
	hp_tensor_free(&bt.w);
	hp_tensor_free(&bt.b);
	bt.x = bx;
	bt.w = whole_bt->w;
	bt.b = whole_bt->b;
	assert_int_equal(run_case(&bc, &bt, pool, &out), 0);
	for (int64_t nc = 0; nc < (axis == 0 ? b - a : t->n) * t->m; nc++) {
		const float *ref = (const float *)whole->data + (axis == 0 ? (a * t->m + nc) * rows * inner :
							(nc * rows + a) * inner);
		const float *got = (const float *)out.data + nc * (axis == 0 ? rows : b - a) * inner;
		if (memcmp(ref, got, (size_t)((axis == 0 ? rows : b - a) * inner) * sizeof(float)))
			fail_msg("band [%lld, %lld) on axis %d differs from the whole node", (long long)a,
				 (long long)b, axis);
	}
	hp_tensor_free(&out);
	hp_tensor_free(&bx);
}

/* Bands of batch items and of output rows of every extent and start give
 * the whole node's bits on the dot path, and one thread gives two's. */
static void test_dot_bands(void **state)
{
	const struct cc *t[] = { &dot_cases[0], &dot_cases[1], &dot_cases[7], &dot_cases[4], &dot_cases[8], &dot_cases[9] };
	struct hp_pool *pool;

	(void)state;
	if (!hp_dot_available())
		skip();
	assert_int_equal(hp_pool_create(2, &pool), 0);
	hp_conv_set_dot(1);
	for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
		struct hp_tensor whole, one;
		struct built bt;
		int64_t rows;
		build(t[i], 7, &bt);
		assert_int_equal(run_case(t[i], &bt, pool, &whole), 0);
		assert_int_equal(run_case(t[i], &bt, NULL, &one), 0);
		assert_memory_equal(whole.data, one.data, hp_tensor_bytes(&whole));
		rows = whole.shape.dims[2];
		for (int64_t a = 0; a < t[i]->n; a++)
			for (int64_t b = a + 1; b <= t[i]->n; b++)
				check_band(t[i], &bt, &whole, 0, a, b, b - a > 1 ? pool : NULL);
		for (int64_t a = 0; a < rows; a++)
			for (int64_t b = a + 1; b <= rows; b++)
				check_band(t[i], &bt, &whole, 2, a, b, pool);
		hp_tensor_free(&whole);
		hp_tensor_free(&one);
		unbuild(&bt);
	}
	hp_conv_set_dot(0);
	hp_pool_destroy(pool);
}

/* FusedConv on the dot path, where the epilogue runs inside the output
 * blocks: bitwise the plain Conv followed by the Add and the activation
 * as the unfused kernels compute them (one add, then a compare). */
static void check_fused_dot(const struct cc *t, int add_kind, int clip, struct hp_pool *pool)
{
	struct hp_tensor y, f, add, in[4];
	struct built bt;
	struct hp_attr attrs[14];
	int64_t one[5] = { 1, 1, 1, 1, 1 };
	float *e;

	build(t, 21, &bt);
	assert_int_equal(run_case(t, &bt, pool, &y), 0);
	if (add_kind == 0) /* full */
		add = kt_tensor(HP_F32, y.shape.rank, y.shape.dims);
	else if (add_kind == 1) { /* per channel: [1, M, 1...] */
		one[1] = t->m;
		add = kt_tensor(HP_F32, y.shape.rank, one);
	}
	else
		add = kt_tensor(HP_F32, 1, one);
	kt_fill_random(&add, 22, -1, 1);
	memcpy(attrs, bt.attrs, (size_t)bt.nattrs * sizeof attrs[0]);
	attrs[bt.nattrs] = kt_string("activation", clip ? "Clip" : "Relu");
	attrs[bt.nattrs + 1] = kt_float("clip_min", -0.25f);
	attrs[bt.nattrs + 2] = kt_float("clip_max", 0.5f);
	in[0] = bt.x, in[1] = bt.w, in[2] = bt.b, in[3] = add;
	struct kt_case c = { .domain = "ai.hpdlf", .op = "FusedConv", .nin = 4, .in = in,
			     .nattrs = bt.nattrs + (clip ? 3 : 1), .attrs = attrs, .nout = 1, .pool = pool };
	assert_int_equal(kt_run(&c, &f), 0);
	e = y.data;
	for (int64_t i = 0; i < hp_shape_numel(&y.shape); i++) {
		int64_t plane = hp_shape_numel(&y.shape) / (t->n * t->m);
		int64_t ai = add_kind == 0 ? i : add_kind == 1 ? i / plane % t->m : 0;
		float v = e[i] + ((const float *)add.data)[ai];
		e[i] = clip ? (v < -0.25f ? -0.25f : v > 0.5f ? 0.5f : v) : (v < 0.0f ? 0.0f : v);
	}
	for (int64_t i = 0; i < hp_shape_numel(&y.shape); i++)
		if (memcmp(e + i, (const float *)f.data + i, sizeof(float)))
			fail_msg("FusedConv (add %d, %s, dot %d) differs from Conv, Add and the activation at %lld: %g, not %g",
				 add_kind, clip ? "Clip" : "Relu", hp_conv_dot_mode(), (long long)i,
				 (double)((const float *)f.data)[i], (double)e[i]);
	hp_tensor_free(&y);
	hp_tensor_free(&f);
	hp_tensor_free(&add);
	unbuild(&bt);
}

static void test_dot_fused(void **state)
{
	struct hp_pool *pool;

	(void)state;
	if (!hp_dot_available())
		skip();
	assert_int_equal(hp_pool_create(2, &pool), 0);
	for (int mode = 1; mode >= -1; mode -= 2) { /* dot path, then the others */
		hp_conv_set_dot(mode);
		for (size_t i = 0; i < sizeof dot_cases / sizeof dot_cases[0]; i++)
			for (int k = 0; k < 3; k++) {
				check_fused_dot(&dot_cases[i], k, (int)(i + k) % 2, pool);
				check_fused_dot(&dot_cases[i], k, (int)(i + k + 1) % 2, NULL);
			}
	}
	hp_conv_set_dot(0);
	hp_pool_destroy(pool);
}

/* The pointwise path (1x1, stride 1, no pads: conv_pw.c): output channels
 * not a multiple of its 6-row micro-tile (1, 7, 13, 97), columns not a
 * multiple of 16 or of its 128-column blocks, K longer than its 256-long
 * k chunks (running sums resumed from Y), groups, 1-D and 3-D, planes of
 * 3 panels and 1 or 2 columns (7x7, 5x10: the tail in the first tile);
 * cases of 2 MFLOP and more run on both threads. */
static const struct cc pw_cases[] = {
	{ 2, 0, 2, 300, 70, 1, V3(9, 15, 0), V3(1, 1, 0), V3(1, 1, 0), V3(1, 1, 0), {0}, {0}, {0}, {0}, NULL, 1, 1, 0, 0 },
	{ 2, 0, 1, 530, 97, 1, V3(7, 7, 0), V3(1, 1, 0), V3(1, 1, 0), V3(1, 1, 0), {0}, {0}, {0}, {0}, NULL, 1, 1, 0, 0 },
	{ 2, 0, 1, 40, 13, 1, V3(14, 14, 0), V3(1, 1, 0), V3(1, 1, 0), V3(1, 1, 0), {0}, {0}, {0}, {0}, NULL, 0, 1, 0, 0 },
	{ 2, 0, 2, 12, 18, 3, V3(6, 6, 0), V3(1, 1, 0), V3(1, 1, 0), V3(1, 1, 0), {0}, {0}, {0}, {0}, NULL, 1, 0, 0, 0 },
	{ 1, 0, 3, 9, 7, 1, V3(40, 0, 0), V3(1, 0, 0), V3(1, 0, 0), V3(1, 0, 0), {0}, {0}, {0}, {0}, NULL, 1, 1, 0, 0 },
	{ 3, 0, 1, 20, 10, 1, V3(3, 4, 5), V3(1, 1, 1), V3(1, 1, 1), V3(1, 1, 1), {0}, {0}, {0}, {0}, NULL, 1, 1, 0, 0 },
	{ 2, 0, 1, 64, 1, 1, V3(3, 3, 0), V3(1, 1, 0), V3(1, 1, 0), V3(1, 1, 0), {0}, {0}, {0}, {0}, NULL, 1, 1, 0, 0 },
	{ 2, 0, 4, 96, 144, 1, V3(12, 12, 0), V3(1, 1, 0), V3(1, 1, 0), V3(1, 1, 0), {0}, {0}, {0}, {0}, NULL, 0, 1, 0, 0 },
	{ 2, 0, 1, 270, 20, 1, V3(5, 10, 0), V3(1, 1, 0), V3(1, 1, 0), V3(1, 1, 0), {0}, {0}, {0}, {0}, NULL, 1, 1, 0, 0 },
	/* 4x4: a plane of one panel, 12-row tiles (the last of 9 rows), K past 256 */
	{ 2, 0, 2, 300, 45, 1, V3(4, 4, 0), V3(1, 1, 0), V3(1, 1, 0), V3(1, 1, 0), {0}, {0}, {0}, {0}, NULL, 1, 1, 0, 0 },
	/* tiny planes (conv_pwt.c): 2x2 with K and M off 16 (units of 32
	 * channels and a last one of 13), 3x3 with K past 256, 3x5 (two tiles
	 * of positions), planes of one position (items as columns, 14 of them
	 * two tiles), groups at 2x2, 1-D */
	{ 2, 0, 2, 70, 45, 1, V3(2, 2, 0), V3(1, 1, 0), V3(1, 1, 0), V3(1, 1, 0), {0}, {0}, {0}, {0}, NULL, 1, 1, 0, 0 },
	{ 2, 0, 3, 300, 40, 1, V3(3, 3, 0), V3(1, 1, 0), V3(1, 1, 0), V3(1, 1, 0), {0}, {0}, {0}, {0}, NULL, 1, 1, 0, 0 },
	{ 2, 0, 2, 33, 17, 1, V3(3, 5, 0), V3(1, 1, 0), V3(1, 1, 0), V3(1, 1, 0), {0}, {0}, {0}, {0}, NULL, 0, 1, 0, 0 },
	{ 2, 0, 5, 33, 20, 1, V3(1, 1, 0), V3(1, 1, 0), V3(1, 1, 0), V3(1, 1, 0), {0}, {0}, {0}, {0}, NULL, 1, 1, 0, 0 },
	{ 2, 0, 14, 24, 70, 1, V3(1, 1, 0), V3(1, 1, 0), V3(1, 1, 0), V3(1, 1, 0), {0}, {0}, {0}, {0}, NULL, 1, 1, 0, 0 },
	{ 2, 0, 2, 12, 18, 3, V3(2, 2, 0), V3(1, 1, 0), V3(1, 1, 0), V3(1, 1, 0), {0}, {0}, {0}, {0}, NULL, 1, 0, 0, 0 },
	{ 1, 0, 3, 40, 64, 1, V3(5, 0, 0), V3(1, 0, 0), V3(1, 0, 0), V3(1, 0, 0), {0}, {0}, {0}, {0}, NULL, 1, 1, 0, 0 },
};

static void test_conv_pw(void **state)
{
	struct hp_pool *pool;

	(void)state;
	assert_int_equal(hp_pool_create(2, &pool), 0);
	hp_conv_set_grp(-1); /* its grouped case too */
	for (size_t i = 0; i < sizeof pw_cases / sizeof pw_cases[0]; i++) {
		check(&pw_cases[i], 170 + (unsigned)i, NULL);
		check(&pw_cases[i], 170 + (unsigned)i, pool);
	}
	hp_conv_set_grp(0);
	hp_pool_destroy(pool);
}

/* The im2col path's product where K is short (conv_pw.c's hp_pw_gemm):
 * MobileNetV2's stem (K 27, stride 2), a 5x5 window of 5 channels (K
 * 125, below the shift path's channels), groups of 2 channels. */
static const struct cc gemm_cases[] = {
	{ 2, 0, 2, 3, 8, 1, V3(17, 19, 0), V3(3, 3, 0), V3(2, 2, 0), V3(1, 1, 0), V3(1, 1, 0), V3(1, 1, 0), {0}, {0}, NULL, 1, 1, 1, 0 },
	{ 2, 0, 3, 5, 7, 1, V3(9, 13, 0), V3(5, 5, 0), V3(1, 1, 0), V3(1, 1, 0), V3(2, 1, 0), V3(2, 3, 0), {0}, {0}, NULL, 1, 1, 1, 0 },
	{ 2, 0, 2, 8, 8, 4, V3(10, 11, 0), V3(3, 3, 0), V3(1, 1, 0), V3(1, 1, 0), V3(1, 1, 0), V3(1, 1, 0), {0}, {0}, NULL, 0, 1, 1, 0 },
};

static void test_conv_gemm(void **state)
{
	struct hp_pool *pool;

	(void)state;
	assert_int_equal(hp_pool_create(2, &pool), 0);
	hp_conv_set_grp(-1); /* its groups of 2 channels too */
	for (size_t i = 0; i < sizeof gemm_cases / sizeof gemm_cases[0]; i++) {
		check(&gemm_cases[i], 190 + (unsigned)i, NULL);
		check(&gemm_cases[i], 190 + (unsigned)i, pool);
	}
	hp_conv_set_grp(0);
	hp_pool_destroy(pool);
}

/* One case of the band tests: 1 thread bitwise 2, every batch and row band
 * bitwise the whole, FusedConv bitwise the unfused nodes (data from seed). */
static void band_case(const struct cc *t, size_t i, unsigned seed, struct hp_pool *pool)
{
	struct hp_tensor whole, one;
	struct built bt;

	build(t, seed, &bt);
	assert_int_equal(run_case(t, &bt, pool, &whole), 0);
	assert_int_equal(run_case(t, &bt, NULL, &one), 0);
	assert_memory_equal(whole.data, one.data, hp_tensor_bytes(&whole));
	for (int64_t a = 0; a < t->n; a++)
		for (int64_t b = a + 1; b <= t->n; b++)
			check_band(t, &bt, &whole, 0, a, b, pool);
	for (int64_t a = 0; a < whole.shape.dims[2]; a++)
		for (int64_t b = a + 1; b <= whole.shape.dims[2]; b++)
			check_band(t, &bt, &whole, 2, a, b, b - a > 2 ? pool : NULL);
	for (int k = 0; k < 3; k++) {
		check_fused_dot(t, k, (int)(i + k) % 2, pool);
		check_fused_dot(t, k, (int)(i + k + 1) % 2, NULL);
	}
	hp_tensor_free(&whole);
	hp_tensor_free(&one);
	unbuild(&bt);
}

/* On the pointwise path and the short-K im2col product one thread gives
 * two's bits, and bands of batch items and of output rows of every extent
 * and start give the whole node's; FusedConv's epilogue inside its
 * micro-tiles is bitwise the unfused Add and activation. */
static void test_pw_bands(void **state)
{
	struct hp_pool *pool;
	const size_t npw = sizeof pw_cases / sizeof pw_cases[0];

	(void)state;
	assert_int_equal(hp_pool_create(2, &pool), 0);
	for (size_t i = 0; i < npw + sizeof gemm_cases / sizeof gemm_cases[0]; i++) {
		band_case(i < npw ? &pw_cases[i] : &gemm_cases[i - npw], i, 9, pool);
	}
	hp_pool_destroy(pool);
}

/* conv_pw.c's product (hp_pw_gemm, hp_pw_gemm_epi) on its AVX-512 tiles
 * (up to three panels of 16 columns, four where K is 64 or more: 64
 * columns, 196's runs of 4, 3 and 2; a tail of 1 to 16) and on its AVX2
 * ones gives, bit for bit, the chains it promises: each output from its
 * bias (or 0), then fmaf(w[m][k], b[k][j], acc) for k = 0, 1, ..., K-1,
 * across the k chunks of 256; and each epilogue done in the tiles'
 * registers (Relu, Clip, HardSwish and none, after a full addend or
 * without one; the sums pass the Clip's and HardSwish's bounds)
 * as hp_epi_span computes it.  Within 1e-5 of the sum of |terms| of a double
 * reference.  Shapes: MobileNetV2's 7x7 (49 columns: 3 panels and 1
 * column) and 14x14 planes, rows of 1 to 13 (tails of the 6-row tiles),
 * K past a chunk, X rows wider than N (in place, ldb > N); tails of 1 to
 * 4 columns after 3 panels or more (taken into the first tile's rows'
 * vectors on AVX-512, its tiles 8 rows with tails of 1 or 2: 8 + 5 and
 * 8 + 7 rows) and of 5. */
static void test_pw_isa(void **state)
{
	static const int64_t shapes[][4] = { /* M, N, K, ldb - N */
		{ 13, 49, 300, 0 }, { 6, 49, 960, 0 }, { 12, 196, 64, 3 }, { 5, 33, 7, 0 },  { 1, 16, 1, 0 },
		{ 7, 48, 257, 1 },  { 3, 5, 40, 11 },  { 8, 97, 256, 0 },  { 2, 64, 513, 2 }, { 11, 17, 20, 0 },
		{ 4, 50, 300, 0 },  { 9, 99, 40, 2 },  { 6, 52, 20, 0 },   { 5, 53, 9, 1 },  { 15, 50, 30, 3 },
	};
	unsigned st = 12345;

	(void)state;
	for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
		int64_t M = shapes[i][0], N = shapes[i][1], K = shapes[i][2], ldb = N + shapes[i][3];
		float *w = malloc((size_t)(M * K) * sizeof(float)), *b = malloc((size_t)(K * ldb) * sizeof(float));
		float *bias = malloc((size_t)M * sizeof(float)), *add = malloc((size_t)(M * N) * sizeof(float));
		float *ref = malloc((size_t)(M * N) * sizeof(float)), *refe = malloc((size_t)(M * N) * sizeof(float));
		float *y = malloc((size_t)(M * N) * sizeof(float));
		static const struct hp_epi epis[] = {
			{ .act = HP_EPI_CLIP, .add = HP_EPI_ADD_FULL, .lo = 0.0f, .hi = 0.5f },
			{ .act = HP_EPI_RELU, .add = HP_EPI_ADD_NONE },
			{ .act = HP_EPI_RELU, .add = HP_EPI_ADD_FULL },
			{ .act = HP_EPI_CLIP, .add = HP_EPI_ADD_NONE, .lo = -0.25f, .hi = 0.125f },
			{ .act = HP_EPI_HSWISH, .add = HP_EPI_ADD_NONE },
			{ .act = HP_EPI_HSWISH, .add = HP_EPI_ADD_FULL },
			{ .act = HP_EPI_NONE, .add = HP_EPI_ADD_FULL },
		};
		float *arr[] = { w, b, bias, add };
		int64_t len[] = { M * K, K * ldb, M, M * N };

		assert_non_null(w), assert_non_null(b), assert_non_null(bias), assert_non_null(add);
		assert_non_null(ref), assert_non_null(refe), assert_non_null(y);
		for (int a = 0; a < 4; a++)
			for (int64_t e = 0; e < len[a]; e++) {
				st = st * 1103515245u + 12345u;
				arr[a][e] = (float)((st >> 8) & 0xffff) / 32768.0f - 1.0f;
			}
		for (int64_t m = 0; m < M; m++)
			for (int64_t j = 0; j < N; j++) {
				float acc = i % 2 ? 0.0f : bias[m];
				double d = acc, mag = fabs(d);
				for (int64_t k = 0; k < K; k++) {
					acc = fmaf(w[m * K + k], b[k * ldb + j], acc);
					d += (double)w[m * K + k] * b[k * ldb + j];
					mag += fabs((double)w[m * K + k] * b[k * ldb + j]);
				}
				ref[m * N + j] = acc;
				assert_true(fabs((double)acc - d) <= 1e-5 * mag + 1e-30);
			}
		for (int avx2 = 0; avx2 < 2; avx2++) {
			hp_pw_set_avx2(avx2);
			for (int64_t e = 0; e < M * N; e++)
				y[e] = NAN;
			hp_pw_gemm(M, N, K, w, K, b, ldb, i % 2 ? NULL : bias, y, N);
			assert_memory_equal(y, ref, (size_t)(M * N) * sizeof(float));
			for (size_t q = 0; q < sizeof epis / sizeof epis[0]; q++) {
				const struct hp_epi *epi = &epis[q];
				memcpy(refe, ref, (size_t)(M * N) * sizeof(float));
				hp_epi_span(epi, refe, add, 0, M * N);
				for (int64_t e = 0; e < M * N; e++)
					y[e] = NAN;
				assert_int_equal(hp_pw_gemm_epi(M, N, K, w, K, b, ldb, i % 2 ? NULL : bias, y, N, epi,
								epi->add == HP_EPI_ADD_FULL ? add : NULL), 1);
				if (memcmp(y, refe, (size_t)(M * N) * sizeof(float)))
					fail_msg("pw shape %zu, epilogue %zu, avx2 %d: not hp_epi_span's bits", i, q, avx2);
			}
		}
		hp_pw_set_avx2(0);
		free(w), free(b), free(bias), free(add), free(ref), free(refe), free(y);
	}
}

/* The pointwise path's node on the AVX2 tiles gives the AVX-512 ones' bits
 * (pw_cases: packed panels, panels read in place, groups, 1 and 2
 * threads), and against the double reference (check). */
static void test_pw_isa_nodes(void **state)
{
	struct hp_pool *pool;

	(void)state;
	assert_int_equal(hp_pool_create(2, &pool), 0);
	for (size_t i = 0; i < sizeof pw_cases / sizeof pw_cases[0]; i++) {
		struct hp_tensor a, v;
		struct built bt;
		build(&pw_cases[i], 400 + (unsigned)i, &bt);
		assert_int_equal(run_case(&pw_cases[i], &bt, i % 2 ? pool : NULL, &a), 0);
		hp_pw_set_avx2(1);
		assert_int_equal(run_case(&pw_cases[i], &bt, i % 2 ? NULL : pool, &v), 0);
		check(&pw_cases[i], 420 + (unsigned)i, pool);
		hp_pw_set_avx2(0);
		assert_memory_equal(a.data, v.data, hp_tensor_bytes(&a));
		hp_tensor_free(&a);
		hp_tensor_free(&v);
		unbuild(&bt);
	}
	hp_pool_destroy(pool);
}

/* FusedConv with act (full addend), pwt mode as given. */
static void run_fused_act(const struct built *bt, const struct hp_tensor *add, const char *act,
			  struct hp_pool *pool, struct hp_tensor *out)
{
	struct hp_tensor in[4] = { bt->x, bt->w, bt->b, *add };
	struct hp_attr attrs[12];

	memcpy(attrs, bt->attrs, (size_t)bt->nattrs * sizeof attrs[0]);
	attrs[bt->nattrs] = kt_string("activation", act);
	struct kt_case c = { .domain = "ai.hpdlf", .op = "FusedConv", .nin = 4, .in = in, .nattrs = bt->nattrs + 1,
			     .attrs = attrs, .nout = 1, .pool = pool };
	assert_int_equal(kt_run(&c, out), 0);
}

/* The tiny-plane path (conv_pwt.c, vectors over output channels) gives
 * conv_pw.c's bits: on every pointwise case, taken everywhere it can run
 * and nowhere, on 1 and 2 threads, Conv and FusedConv with a full addend
 * and each activation the epilogue knows (in registers or not). */
static void test_pwt_bits(void **state)
{
	static const char *const acts[] = { "Relu", "Clip", "Sigmoid", "HardSwish" };
	struct hp_pool *pool;

	(void)state;
	assert_int_equal(hp_pool_create(2, &pool), 0);
	for (size_t i = 0; i < sizeof pw_cases / sizeof pw_cases[0]; i++) {
		const struct cc *t = &pw_cases[i];
		struct hp_tensor a, v, add;
		struct built bt;
		build(t, 600 + (unsigned)i, &bt);
		for (int f = 0; f <= 4; f++) {
			if (f > 0) {
				assert_int_equal(run_case(t, &bt, NULL, &a), 0);
				add = kt_tensor(HP_F32, a.shape.rank, a.shape.dims);
				kt_fill_random(&add, 601 + (unsigned)i, -1, 1);
				hp_tensor_free(&a);
			}
			hp_pwt_set_mode(-1);
			if (f == 0)
				assert_int_equal(run_case(t, &bt, i % 2 ? pool : NULL, &a), 0);
			else
				run_fused_act(&bt, &add, acts[f - 1], i % 2 ? pool : NULL, &a);
			hp_pwt_set_mode(1);
			if (f == 0)
				assert_int_equal(run_case(t, &bt, i % 2 ? NULL : pool, &v), 0);
			else
				run_fused_act(&bt, &add, acts[f - 1], i % 2 ? NULL : pool, &v);
			hp_pwt_set_mode(0);
			if (memcmp(a.data, v.data, hp_tensor_bytes(&a)))
				fail_msg("pointwise case %zu (%s): the tiny-plane path differs from conv_pw.c's", i,
					 f ? acts[f - 1] : "Conv");
			hp_tensor_free(&a);
			hp_tensor_free(&v);
			if (f > 0)
				hp_tensor_free(&add);
		}
		unbuild(&bt);
	}
	hp_pool_destroy(pool);
}

/* The grouped path (conv_grp.c): ResNeXt's 4 channels per group, stride 2
 * with asymmetric pads, dilation with a 3x5 kernel, strides 2 and 3 with a
 * 5x5 kernel (three column phases), 32 channels per group over a 7x7 plane,
 * a grouped 1x1, row blocks of 6 of 20 rows (32 input channels per group
 * fill the staging), one output channel per group (a micro-tile of one
 * row), a kernel wider than the image with pads of 3 (taps past both
 * edges), SAME_UPPER at stride 2, one without a bias; and stems of one
 * group: ResNet's 7x7 stride 2 on 3 channels, LeNet's 5x5 on 1, a 3x3
 * stride 2 on 4 channels to 32.  Then the co-lane forward tiles' planes
 * (16 and 32 channels per group, multiples of 16): ResNeXt's 2x2 at 32 per
 * group, its stride-2 4x4 -> 2x2 entry, its 4x4 at 16 per group, a 3x5
 * plane of 48 output channels per group from 16 input channels with
 * asymmetric pads and no bias (three 16-channel vectors, a last tile of
 * 15 of 16 positions), a 3x3 plane of 32 per group, batch 2 (a tile of 9
 * of 12 positions); and groups of 8 output channels (gr_c8_block's 8-lane
 * tiles): RegNet's 3x3 at 5x5, batch 2, and 10 input channels a group
 * over a 4x6 plane with asymmetric pads and no bias. */
static const struct cc grp_cases[] = {
	{ 2, 0, 2, 16, 16, 4, V3(9, 10, 0), V3(3, 3, 0), V3(1, 1, 0), V3(1, 1, 0), V3(1, 1, 0), V3(1, 1, 0), {0}, {0}, NULL, 1, 1, 1, 0 },
	{ 2, 0, 1, 12, 18, 6, V3(15, 17, 0), V3(3, 3, 0), V3(2, 2, 0), V3(1, 1, 0), V3(1, 0, 0), V3(2, 1, 0), {0}, {0}, NULL, 1, 1, 1, 0 },
	{ 2, 0, 1, 8, 10, 2, V3(11, 23, 0), V3(3, 5, 0), V3(1, 1, 0), V3(2, 1, 0), V3(2, 2, 0), V3(2, 2, 0), {0}, {0}, NULL, 1, 1, 1, 0 },
	{ 2, 0, 1, 9, 6, 3, V3(20, 31, 0), V3(5, 5, 0), V3(2, 3, 0), V3(1, 1, 0), V3(2, 2, 0), V3(2, 1, 0), {0}, {0}, NULL, 1, 1, 1, 0 },
	{ 2, 0, 1, 64, 64, 2, V3(7, 7, 0), V3(3, 3, 0), V3(1, 1, 0), V3(1, 1, 0), V3(1, 1, 0), V3(1, 1, 0), {0}, {0}, NULL, 1, 1, 1, 0 },
	{ 2, 0, 2, 8, 8, 4, V3(5, 6, 0), V3(1, 1, 0), V3(1, 1, 0), V3(1, 1, 0), {0}, {0}, {0}, {0}, NULL, 1, 1, 0, 0 },
	{ 2, 0, 1, 64, 8, 2, V3(20, 28, 0), V3(3, 3, 0), V3(1, 1, 0), V3(1, 1, 0), V3(1, 1, 0), V3(1, 1, 0), {0}, {0}, NULL, 1, 1, 1, 0 },
	{ 2, 0, 2, 6, 3, 3, V3(8, 9, 0), V3(3, 3, 0), V3(1, 1, 0), V3(1, 1, 0), V3(1, 1, 0), V3(1, 1, 0), {0}, {0}, NULL, 1, 1, 1, 0 },
	{ 2, 0, 1, 4, 4, 2, V3(3, 4, 0), V3(5, 5, 0), V3(1, 1, 0), V3(1, 1, 0), V3(3, 3, 0), V3(3, 3, 0), {0}, {0}, NULL, 1, 1, 1, 0 },
	{ 2, 0, 1, 6, 4, 2, V3(9, 10, 0), V3(2, 3, 0), V3(2, 2, 0), V3(1, 1, 0), {0}, {0}, {0}, {0}, "SAME_UPPER", 1, 1, 0, 0 },
	{ 2, 0, 2, 12, 12, 3, V3(6, 13, 0), V3(3, 3, 0), V3(1, 2, 0), V3(1, 1, 0), V3(1, 1, 0), V3(0, 1, 0), {0}, {0}, NULL, 0, 1, 1, 0 },
	{ 2, 0, 1, 3, 13, 1, V3(29, 31, 0), V3(7, 7, 0), V3(2, 2, 0), V3(1, 1, 0), V3(3, 3, 0), V3(3, 3, 0), {0}, {0}, NULL, 0, 1, 1, 0 },
	{ 2, 0, 3, 1, 6, 1, V3(12, 12, 0), V3(5, 5, 0), V3(1, 1, 0), V3(1, 1, 0), {0}, {0}, {0}, {0}, NULL, 1, 1, 0, 0 },
	{ 2, 0, 2, 4, 32, 1, V3(16, 10, 0), V3(3, 3, 0), V3(2, 2, 0), V3(1, 1, 0), V3(1, 1, 0), V3(1, 1, 0), {0}, {0}, NULL, 1, 1, 1, 0 },
	{ 2, 0, 1, 128, 128, 4, V3(2, 2, 0), V3(3, 3, 0), V3(1, 1, 0), V3(1, 1, 0), V3(1, 1, 0), V3(1, 1, 0), {0}, {0}, NULL, 1, 1, 1, 0 },
	{ 2, 0, 2, 64, 64, 2, V3(4, 4, 0), V3(3, 3, 0), V3(2, 2, 0), V3(1, 1, 0), V3(1, 1, 0), V3(1, 1, 0), {0}, {0}, NULL, 1, 1, 1, 0 },
	{ 2, 0, 1, 64, 64, 4, V3(4, 4, 0), V3(3, 3, 0), V3(1, 1, 0), V3(1, 1, 0), V3(1, 1, 0), V3(1, 1, 0), {0}, {0}, NULL, 1, 1, 1, 0 },
	{ 2, 0, 1, 32, 96, 2, V3(3, 5, 0), V3(3, 3, 0), V3(1, 1, 0), V3(1, 1, 0), V3(1, 0, 0), V3(1, 2, 0), {0}, {0}, NULL, 0, 1, 1, 0 },
	{ 2, 0, 2, 64, 64, 2, V3(3, 3, 0), V3(3, 3, 0), V3(1, 1, 0), V3(1, 1, 0), V3(1, 1, 0), V3(1, 1, 0), {0}, {0}, NULL, 1, 1, 1, 0 },
	{ 2, 0, 2, 24, 24, 3, V3(5, 5, 0), V3(3, 3, 0), V3(1, 1, 0), V3(1, 1, 0), V3(1, 1, 0), V3(1, 1, 0), {0}, {0}, NULL, 1, 1, 1, 0 },
	{ 2, 0, 1, 20, 16, 2, V3(4, 6, 0), V3(3, 3, 0), V3(1, 1, 0), V3(1, 1, 0), V3(0, 1, 0), V3(1, 0, 0), {0}, {0}, NULL, 0, 1, 1, 0 },
};

/* The chains the grouped path promises, in float: each output from its
 * bias (0 without one), then fmaf(w, x, acc) for every tap (c, kh, kw) in
 * order, padding taps with x = 0. */
static void grp_chain_ref(const struct cc *t, const struct built *bt, const int64_t *o, const int64_t *pb,
			  float *y)
{
	int64_t cg = t->c / t->group, mg = t->m / t->group;

	for (int64_t n = 0; n < t->n; n++)
		for (int64_t m = 0; m < t->m; m++)
			for (int64_t oh = 0; oh < o[0]; oh++)
				for (int64_t ow = 0; ow < o[1]; ow++) {
					float acc = t->bias ? at(&bt->b, m) : 0.0f;
					for (int64_t c = 0; c < cg; c++)
						for (int64_t kh = 0; kh < t->k[0]; kh++)
							for (int64_t kw = 0; kw < t->k[1]; kw++) {
								int64_t ih = oh * t->s[0] - pb[0] + kh * t->d[0];
								int64_t iw = ow * t->s[1] - pb[1] + kw * t->d[1];
								int in = ih >= 0 && ih < t->in[0] && iw >= 0 && iw < t->in[1];
								int64_t xi = ((n * t->c + m / mg * cg + c) * t->in[0] + ih) * t->in[1] + iw;
								float x = in ? at(&bt->x, xi) : 0.0f;
								acc = fmaf(at(&bt->w, ((m * cg + c) * t->k[0] + kh) * t->k[1] + kw), x, acc);
							}
					y[((n * t->m + m) * o[0] + oh) * o[1] + ow] = acc;
				}
}

/* Against the double reference; bitwise the float chains on 1 and 2
 * threads, on the AVX-512 tiles (the co-lane forward tiles on, forced,
 * off) and the AVX2 ones; 1 thread bitwise 2,
 * every batch and row band bitwise the whole, FusedConv bitwise the
 * unfused nodes (band_case); and the auto choice takes the path for
 * these groups and leaves wider ones (64 channels per group) and
 * depthwise ones alone. */
static void test_conv_grp(void **state)
{
	struct hp_pool *pool;

	(void)state;
	if (!hp_dot_available())
		skip();
	assert_int_equal(hp_pool_create(2, &pool), 0);
	hp_conv_set_grp(1);
	for (size_t i = 0; i < sizeof grp_cases / sizeof grp_cases[0]; i++) {
		const struct cc *t = &grp_cases[i];
		int64_t o[2], pb[2];
		struct hp_tensor out;
		struct built bt;
		float *ref;
		check(t, 300 + (unsigned)i, NULL);
		check(t, 300 + (unsigned)i, pool);
		build(t, 330 + (unsigned)i, &bt);
		o[0] = ref_axis(t, 0, &pb[0]);
		o[1] = ref_axis(t, 1, &pb[1]);
		ref = malloc((size_t)(t->n * t->m * o[0] * o[1]) * sizeof(float));
		grp_chain_ref(t, &bt, o, pb, ref);
		/* 1 and 2 threads; AVX-512 tiles (the co-lane forward tiles
		 * where the plane is tiny, everywhere they apply, nowhere) and
		 * AVX2 ones */
		for (int th = 0; th < 8; th++) {
			static const int cfs[4] = { 0, 1, -1, -1 };
			int cf = cfs[th / 2];
			hp_grp_set_avx2(th >= 6);
			hp_grp_set_cofwd(cf);
			assert_int_equal(run_case(t, &bt, th % 2 ? pool : NULL, &out), 0);
			hp_grp_set_avx2(0);
			hp_grp_set_cofwd(0);
			if (memcmp(out.data, ref, hp_tensor_bytes(&out)))
				fail_msg("grouped case %zu (%d threads%s, co-lane forward %d): not the float chains", i,
					 th % 2 + 1, th >= 6 ? ", AVX2" : "", cf);
			hp_tensor_free(&out);
		}
		free(ref);
		unbuild(&bt);
		band_case(t, i, 13, pool);
	}
	hp_conv_set_grp(0);
	hp_pool_destroy(pool);
}

/* The KxK path (conv_kxk.c, forced): 3x3 stride 1 and 2, ResNet's 7x7
 * stride-2 stem, asymmetric and oversized pads, dilation, groups, 1-D and
 * 3-D, 1x1 with stride; output channels not a multiple of its 6-row
 * micro-tile (1, 7, 13, 37), planes narrower than 16 columns and rows
 * that cross its 16-column panels, K longer than its 256-long k chunks
 * (running sums resumed from Y); cases of 2 MFLOP and more run on both
 * threads; bitwise the same without the AVX-512 tiles (hp_kxk_set_wide). */
static const struct cc kxk_cases[] = {
	{ 2, 0, 2, 32, 40, 1, V3(20, 21, 0), V3(3, 3, 0), V3(1, 1, 0), V3(1, 1, 0), V3(1, 1, 0), V3(1, 1, 0), {0}, {0}, NULL, 1, 1, 1, 0 },
	{ 2, 0, 1, 64, 37, 1, V3(7, 7, 0), V3(3, 3, 0), V3(1, 1, 0), V3(1, 1, 0), V3(1, 1, 0), V3(1, 1, 0), {0}, {0}, NULL, 1, 1, 1, 0 },
	{ 2, 0, 2, 24, 13, 1, V3(15, 17, 0), V3(3, 3, 0), V3(2, 2, 0), V3(1, 1, 0), V3(1, 1, 0), V3(1, 1, 0), {0}, {0}, NULL, 1, 1, 1, 0 },
	{ 2, 0, 1, 3, 16, 1, V3(37, 35, 0), V3(7, 7, 0), V3(2, 2, 0), V3(1, 1, 0), V3(3, 3, 0), V3(3, 3, 0), {0}, {0}, NULL, 0, 1, 1, 0 },
	{ 2, 0, 1, 10, 7, 1, V3(9, 40, 0), V3(3, 5, 0), V3(1, 1, 0), V3(2, 1, 0), V3(3, 0, 0), V3(1, 4, 0), {0}, {0}, NULL, 1, 1, 1, 0 },
	{ 2, 0, 3, 12, 18, 3, V3(10, 11, 0), V3(3, 3, 0), V3(1, 2, 0), V3(1, 1, 0), V3(1, 0, 0), V3(2, 1, 0), {0}, {0}, NULL, 1, 0, 1, 0 },
	{ 2, 0, 2, 33, 8, 1, V3(9, 9, 0), V3(1, 1, 0), V3(2, 2, 0), V3(1, 1, 0), {0}, {0}, {0}, {0}, NULL, 0, 1, 0, 0 },
	{ 2, 0, 1, 40, 1, 1, V3(5, 6, 0), V3(3, 3, 0), V3(1, 1, 0), V3(1, 1, 0), V3(2, 3, 0), V3(2, 4, 0), {0}, {0}, NULL, 1, 1, 1, 0 },
	{ 2, 0, 1, 6, 4, 2, V3(9, 10, 0), V3(2, 3, 0), V3(2, 3, 0), V3(1, 1, 0), {0}, {0}, {0}, {0}, "SAME_UPPER", 1, 1, 0, 0 },
	{ 1, 0, 3, 7, 5, 1, V3(41, 0, 0), V3(4, 0, 0), V3(3, 0, 0), V3(1, 0, 0), V3(2, 0, 0), V3(1, 0, 0), {0}, {0}, NULL, 1, 1, 1, 0 },
	{ 3, 0, 2, 4, 9, 1, V3(4, 5, 6), V3(2, 3, 2), V3(1, 2, 1), V3(1, 1, 2), V3(1, 1, 0), V3(0, 1, 1), {0}, {0}, NULL, 1, 1, 1, 0 },
	{ 2, 0, 4, 16, 20, 1, V3(4, 4, 0), V3(3, 3, 0), V3(1, 1, 0), V3(1, 1, 0), V3(1, 1, 0), V3(1, 1, 0), {0}, {0}, NULL, 0, 1, 1, 0 },
};

static void test_conv_kxk(void **state)
{
	struct hp_pool *pool;

	(void)state;
	if (!hp_kxk_available())
		skip();
	assert_int_equal(hp_pool_create(2, &pool), 0);
	hp_conv_set_kxk(1);
	for (size_t i = 0; i < sizeof kxk_cases / sizeof kxk_cases[0]; i++) {
		struct hp_tensor wide, narrow;
		struct built bt;
		check(&kxk_cases[i], 210 + (unsigned)i, NULL);
		check(&kxk_cases[i], 210 + (unsigned)i, pool);
		/* the AVX-512 tiles of two panels off: the AVX2 tiles' bits */
		build(&kxk_cases[i], 37, &bt);
		assert_int_equal(run_case(&kxk_cases[i], &bt, pool, &wide), 0);
		hp_kxk_set_wide(0);
		assert_int_equal(run_case(&kxk_cases[i], &bt, NULL, &narrow), 0);
		hp_kxk_set_wide(1);
		assert_memory_equal(wide.data, narrow.data, hp_tensor_bytes(&wide));
		hp_tensor_free(&wide);
		hp_tensor_free(&narrow);
		unbuild(&bt);
	}
	hp_conv_set_kxk(0);
	hp_pool_destroy(pool);
}

/* On the KxK path one thread gives two's bits, bands of batch items and of
 * output rows of every extent and start give the whole node's, and
 * FusedConv (Relu or Clip after a full, per-channel or scalar addend) is
 * bitwise the Conv followed by the unfused Add and activation. */
static void test_kxk_bands(void **state)
{
	struct hp_pool *pool;

	(void)state;
	if (!hp_kxk_available())
		skip();
	assert_int_equal(hp_pool_create(2, &pool), 0);
	hp_conv_set_kxk(1);
	for (size_t i = 0; i < sizeof kxk_cases / sizeof kxk_cases[0]; i++)
		band_case(&kxk_cases[i], i, 11, pool);
	hp_conv_set_kxk(0);
	hp_pool_destroy(pool);
}

/* The row-run blocks of the KxK path (conv_kxk_run.c: output rows of a
 * multiple of 16 columns at stride 1 along them, planes of 64 outputs
 * and more): the U-Net's 16-channel layer at 16x32, K longer than a k
 * chunk of 85 kernel rows with a micro-tile of one row (13 = 6 + 6 + 1),
 * rows of 144 (blocks of 128 columns across two output rows), dilation 2
 * with a 5-wide kernel and pads of 4 (taps far past both edges),
 * asymmetric pads (a left edge of 2, no right edge), padding rows of 3
 * and 2, groups, stride 2 down the rows, a 16-wide plane (packed: not a
 * row-run node), a 7-wide kernel of dilation 6 over rows of 32 (each
 * panel both edges), 3-D and 1-D.  Edge panels read the rows under lane
 * masks up to 3 micro-tiles of output channels (18 and fewer) and copy
 * them with more: the last three cases (32, 20 and 19 output channels)
 * copy, with 32-wide rows (every panel an edge), a 5-wide kernel of
 * dilation 2 and pads of 4, and a 7-wide one of dilation 6 without a
 * bias. */
static const struct cc kxk_run_cases[] = {
	{ 2, 0, 2, 16, 16, 1, V3(6, 32, 0), V3(3, 3, 0), V3(1, 1, 0), V3(1, 1, 0), V3(1, 1, 0), V3(1, 1, 0), {0}, {0}, NULL, 1, 1, 1, 0 },
	{ 2, 0, 1, 40, 13, 1, V3(5, 48, 0), V3(3, 3, 0), V3(1, 1, 0), V3(1, 1, 0), V3(1, 1, 0), V3(1, 1, 0), {0}, {0}, NULL, 1, 1, 1, 0 },
	{ 2, 0, 1, 9, 8, 1, V3(3, 144, 0), V3(3, 3, 0), V3(1, 1, 0), V3(1, 1, 0), V3(1, 1, 0), V3(1, 1, 0), {0}, {0}, NULL, 0, 1, 1, 0 },
	{ 2, 0, 1, 8, 7, 1, V3(6, 32, 0), V3(3, 5, 0), V3(1, 1, 0), V3(1, 2, 0), V3(1, 4, 0), V3(1, 4, 0), {0}, {0}, NULL, 1, 1, 1, 0 },
	{ 2, 0, 2, 8, 9, 1, V3(5, 32, 0), V3(3, 3, 0), V3(1, 1, 0), V3(1, 1, 0), V3(3, 2, 0), V3(2, 0, 0), {0}, {0}, NULL, 1, 1, 1, 0 },
	{ 2, 0, 1, 16, 8, 2, V3(6, 32, 0), V3(3, 3, 0), V3(1, 1, 0), V3(1, 1, 0), V3(1, 1, 0), V3(1, 1, 0), {0}, {0}, NULL, 1, 0, 1, 0 },
	{ 2, 0, 1, 10, 6, 1, V3(9, 32, 0), V3(3, 3, 0), V3(2, 1, 0), V3(1, 1, 0), V3(1, 1, 0), V3(1, 1, 0), {0}, {0}, NULL, 1, 1, 1, 0 },
	{ 2, 0, 1, 24, 20, 1, V3(5, 16, 0), V3(3, 3, 0), V3(1, 1, 0), V3(1, 1, 0), V3(1, 1, 0), V3(1, 1, 0), {0}, {0}, NULL, 1, 1, 1, 0 },
	{ 2, 0, 1, 12, 10, 1, V3(5, 32, 0), V3(3, 7, 0), V3(1, 1, 0), V3(1, 6, 0), V3(1, 18, 0), V3(1, 18, 0), {0}, {0}, NULL, 1, 1, 1, 0 },
	{ 3, 0, 1, 8, 7, 1, V3(3, 4, 32), V3(3, 3, 3), V3(1, 1, 1), V3(1, 1, 1), V3(1, 1, 1), V3(1, 1, 1), {0}, {0}, NULL, 1, 1, 1, 0 },
	{ 1, 0, 3, 8, 6, 1, V3(64, 0, 0), V3(3, 0, 0), V3(1, 0, 0), V3(1, 0, 0), V3(1, 0, 0), V3(1, 0, 0), {0}, {0}, NULL, 1, 1, 1, 0 },
	{ 2, 0, 2, 8, 32, 1, V3(5, 32, 0), V3(3, 3, 0), V3(1, 1, 0), V3(1, 1, 0), V3(1, 1, 0), V3(1, 1, 0), {0}, {0}, NULL, 1, 1, 1, 0 },
	{ 2, 0, 1, 6, 20, 1, V3(4, 48, 0), V3(3, 5, 0), V3(1, 1, 0), V3(1, 2, 0), V3(1, 4, 0), V3(1, 4, 0), {0}, {0}, NULL, 1, 1, 1, 0 },
	{ 2, 0, 1, 5, 19, 1, V3(4, 32, 0), V3(3, 7, 0), V3(1, 1, 0), V3(1, 6, 0), V3(1, 18, 0), V3(1, 18, 0), {0}, {0}, NULL, 0, 1, 1, 0 },
};

/* The row-run blocks against the reference, bitwise the packed blocks
 * (hp_kxk_set_run(0)) and the row-run blocks of AVX2 tiles only
 * (hp_kxk_set_wide(0)) on 1 and 2 threads, and in bands, on threads and
 * fused as test_kxk_bands. */
static void test_kxk_run(void **state)
{
	struct hp_pool *pool;

	(void)state;
	if (!hp_kxk_available())
		skip();
	assert_int_equal(hp_pool_create(2, &pool), 0);
	hp_conv_set_kxk(1);
	for (size_t i = 0; i < sizeof kxk_run_cases / sizeof kxk_run_cases[0]; i++) {
		const struct cc *t = &kxk_run_cases[i];
		struct hp_tensor run, packed;
		struct built bt;
		check(t, 260 + (unsigned)i, NULL);
		check(t, 260 + (unsigned)i, pool);
		build(t, 31, &bt);
		for (int th = 0; th < 2; th++) {
			assert_int_equal(run_case(t, &bt, th ? pool : NULL, &run), 0);
			hp_kxk_set_run(0);
			assert_int_equal(run_case(t, &bt, th ? NULL : pool, &packed), 0);
			hp_kxk_set_run(1);
			assert_memory_equal(run.data, packed.data, hp_tensor_bytes(&run));
			hp_tensor_free(&packed);
			/* the AVX-512 pair tiles off: the AVX2 tiles, same bits */
			hp_kxk_set_wide(0);
			assert_int_equal(run_case(t, &bt, th ? NULL : pool, &packed), 0);
			hp_kxk_set_wide(1);
			assert_memory_equal(run.data, packed.data, hp_tensor_bytes(&run));
			hp_tensor_free(&run);
			hp_tensor_free(&packed);
		}
		unbuild(&bt);
		band_case(t, i, 11, pool);
	}
	hp_conv_set_kxk(0);
	hp_pool_destroy(pool);
}

/* A node with one worker's workspace that may take narrower blocks
 * (attributes hpdlf_lean and hpdlf_narrow, an inference band under a
 * tight budget) over a column space of at most two blocks runs blocks of
 * 64 columns in a smaller panel area (conv_kxk.c kx_block_cols): bitwise
 * the node without the attribute (128-column blocks), on 1 and 2 threads,
 * and the reference.  Shapes: a 16x16 plane (4 blocks of 64; row-run
 * blocks), a 10x10 plane (64 + 36), a 3-D 4x8x8 volume of 16 channels as
 * the tiny U-Net's bands, 6x6 planes of 4 items spanning (144 columns),
 * and a 12x12 plane under a 5x5 kernel (past a k chunk). */
static const struct cc kxk_lean_cases[] = {
	{ 2, 0, 1, 16, 8, 1, V3(16, 16, 0), V3(3, 3, 0), V3(1, 1, 0), V3(1, 1, 0), V3(1, 1, 0), V3(1, 1, 0), {0}, {0}, NULL, 1, 1, 1, 0 },
	{ 2, 0, 2, 12, 14, 1, V3(10, 10, 0), V3(3, 3, 0), V3(1, 1, 0), V3(1, 1, 0), V3(1, 1, 0), V3(1, 1, 0), {0}, {0}, NULL, 1, 1, 1, 0 },
	{ 3, 0, 1, 16, 8, 1, V3(4, 8, 8), V3(3, 3, 3), V3(1, 1, 1), V3(1, 1, 1), V3(1, 1, 1), V3(1, 1, 1), {0}, {0}, NULL, 1, 1, 1, 0 },
	{ 2, 0, 4, 16, 32, 1, V3(6, 6, 0), V3(3, 3, 0), V3(1, 1, 0), V3(1, 1, 0), V3(1, 1, 0), V3(1, 1, 0), {0}, {0}, NULL, 1, 1, 1, 0 },
	{ 2, 0, 1, 24, 10, 1, V3(12, 12, 0), V3(5, 5, 0), V3(1, 1, 0), V3(1, 1, 0), V3(2, 2, 0), V3(2, 2, 0), {0}, {0}, NULL, 0, 1, 1, 0 },
};

static void test_kxk_lean(void **state)
{
	struct hp_pool *pool;

	(void)state;
	if (!hp_kxk_available())
		skip();
	assert_int_equal(hp_pool_create(2, &pool), 0);
	hp_conv_set_kxk(1);
	for (size_t i = 0; i < sizeof kxk_lean_cases / sizeof kxk_lean_cases[0]; i++) {
		const struct cc *t = &kxk_lean_cases[i];
		struct hp_tensor wide, lean;
		struct built bt;
		check(t, 300 + (unsigned)i, pool);
		build(t, 41, &bt);
		assert_int_equal(run_case(t, &bt, pool, &wide), 0);
		bt.attrs[bt.nattrs++] = kt_int("hpdlf_lean", 1);
		bt.attrs[bt.nattrs++] = kt_int("hpdlf_narrow", 1);
		for (int th = 0; th < 2; th++) {
			assert_int_equal(run_case(t, &bt, th ? pool : NULL, &lean), 0);
			assert_memory_equal(wide.data, lean.data, hp_tensor_bytes(&wide));
			hp_tensor_free(&lean);
		}
		hp_tensor_free(&wide);
		unbuild(&bt);
	}
	hp_conv_set_kxk(0);
	hp_pool_destroy(pool);
}

/* Blocks of a single 16-column panel (conv_kxk_run.c's kt_tile: two
 * micro-tiles of rows as one AVX-512 tile): ResNet-18's 2x2 planes at a
 * batch of 4 (16 columns across the items) and its 4x4 -> 2x2 stride-2
 * entry, with K past a k chunk (running sums resumed) and output channels
 * that leave a micro-tile without a partner (37: 7 tiles; 130 on two
 * threads: 11 tiles each); a partial panel (3 items: 12 columns), a 3x3
 * plane at a batch of one (9 columns of one item, not spanning), a 1x1
 * plane of 10 items. */
static const struct cc kxk_tall_cases[] = {
	{ 2, 0, 4, 40, 37, 1, V3(2, 2, 0), V3(3, 3, 0), V3(1, 1, 0), V3(1, 1, 0), V3(1, 1, 0), V3(1, 1, 0), {0}, {0}, NULL, 1, 1, 1, 0 },
	{ 2, 0, 4, 64, 130, 1, V3(2, 2, 0), V3(3, 3, 0), V3(1, 1, 0), V3(1, 1, 0), V3(1, 1, 0), V3(1, 1, 0), {0}, {0}, NULL, 0, 1, 1, 0 },
	{ 2, 0, 4, 32, 24, 1, V3(4, 4, 0), V3(3, 3, 0), V3(2, 2, 0), V3(1, 1, 0), V3(1, 1, 0), V3(1, 1, 0), {0}, {0}, NULL, 1, 1, 1, 0 },
	{ 2, 0, 3, 30, 13, 1, V3(2, 2, 0), V3(3, 3, 0), V3(1, 1, 0), V3(1, 1, 0), V3(1, 1, 0), V3(1, 1, 0), {0}, {0}, NULL, 1, 1, 1, 0 },
	{ 2, 0, 1, 48, 20, 1, V3(3, 3, 0), V3(3, 3, 0), V3(1, 1, 0), V3(1, 1, 0), V3(1, 1, 0), V3(1, 1, 0), {0}, {0}, NULL, 1, 1, 1, 0 },
	{ 2, 0, 10, 20, 25, 1, V3(1, 1, 0), V3(3, 3, 0), V3(1, 1, 0), V3(1, 1, 0), V3(1, 1, 0), V3(1, 1, 0), {0}, {0}, NULL, 1, 1, 1, 0 },
};

/* The single-panel blocks against the double reference, bitwise the float
 * chains (grp_chain_ref: the KxK path's chains are the grouped path's) on
 * 1 and 2 threads, with the AVX-512 tiles and with the AVX2 ones; 1 thread
 * bitwise 2, bands bitwise the whole, FusedConv bitwise unfused
 * (band_case). */
static void test_kxk_tall(void **state)
{
	struct hp_pool *pool;

	(void)state;
	if (!hp_kxk_available())
		skip();
	assert_int_equal(hp_pool_create(2, &pool), 0);
	hp_conv_set_kxk(1);
	for (size_t i = 0; i < sizeof kxk_tall_cases / sizeof kxk_tall_cases[0]; i++) {
		const struct cc *t = &kxk_tall_cases[i];
		int64_t o[2], pb[2];
		struct hp_tensor out;
		struct built bt;
		float *ref;
		check(t, 360 + (unsigned)i, NULL);
		check(t, 360 + (unsigned)i, pool);
		build(t, 370 + (unsigned)i, &bt);
		o[0] = ref_axis(t, 0, &pb[0]);
		o[1] = ref_axis(t, 1, &pb[1]);
		ref = malloc((size_t)(t->n * t->m * o[0] * o[1]) * sizeof(float));
		grp_chain_ref(t, &bt, o, pb, ref);
		for (int th = 0; th < 4; th++) { /* 1 and 2 threads, AVX-512 tiles and AVX2 ones */
			hp_kxk_set_wide(th < 2);
			assert_int_equal(run_case(t, &bt, th % 2 ? pool : NULL, &out), 0);
			hp_kxk_set_wide(1);
			if (memcmp(out.data, ref, hp_tensor_bytes(&out)))
				fail_msg("single-panel case %zu (%d threads%s): not the float chains", i, th % 2 + 1,
					 th >= 2 ? ", AVX2" : "");
			hp_tensor_free(&out);
		}
		free(ref);
		unbuild(&bt);
		band_case(t, i, 17, pool);
	}
	hp_conv_set_kxk(0);
	hp_pool_destroy(pool);
}

/* ConvTranspose with kernel == stride, two wide along the rows
 * (convt_fma.c): the U-Net's 2x2 stride 2 with an odd row (14 output
 * columns: a partial micro-tile), 3x2 stride 3x2 over rows of 40
 * columns, groups, 1-D, 3-D, 70 input channels with 13 output channels
 * (a micro-tile of one row), and one of 4 MFLOP on both threads. */
static const struct cc convt_fma_cases[] = {
	{ 2, 1, 2, 16, 8, 1, V3(5, 7, 0), V3(2, 2, 0), V3(2, 2, 0), V3(1, 1, 0), {0}, {0}, {0}, {0}, NULL, 1, 1, 0, 0 },
	{ 2, 1, 1, 13, 7, 1, V3(4, 20, 0), V3(3, 2, 0), V3(3, 2, 0), V3(1, 1, 0), {0}, {0}, {0}, {0}, NULL, 1, 1, 0, 0 },
	{ 2, 1, 2, 8, 6, 2, V3(3, 9, 0), V3(2, 2, 0), V3(2, 2, 0), V3(1, 1, 0), {0}, {0}, {0}, {0}, NULL, 0, 1, 0, 0 },
	{ 1, 1, 3, 5, 4, 1, V3(19, 0, 0), V3(2, 0, 0), V3(2, 0, 0), V3(1, 0, 0), {0}, {0}, {0}, {0}, NULL, 1, 1, 0, 0 },
	{ 3, 1, 1, 6, 5, 1, V3(2, 3, 5), V3(2, 2, 2), V3(2, 2, 2), V3(1, 1, 1), {0}, {0}, {0}, {0}, NULL, 1, 0, 0, 0 },
	{ 2, 1, 1, 70, 13, 1, V3(3, 8, 0), V3(2, 2, 0), V3(2, 2, 0), V3(1, 1, 0), {0}, {0}, {0}, {0}, NULL, 1, 1, 0, 0 },
	{ 2, 1, 2, 64, 32, 1, V3(8, 16, 0), V3(2, 2, 0), V3(2, 2, 0), V3(1, 1, 0), {0}, {0}, {0}, {0}, NULL, 1, 1, 0, 0 },
};

/* Input rows [a, b) of a ConvTranspose case run on their own: output rows
 * [a * k, b * k), bitwise the whole node's. */
static void check_convt_rows(const struct cc *t, const struct built *wbt, const struct hp_tensor *whole, int64_t a,
			     int64_t b, struct hp_pool *pool)
{
	struct cc bc = *t;
	struct built bt;
	struct hp_tensor out, bx;
	int64_t rest = 1, xrest = 1, k = t->k[0], rows = t->in[0] * k, dims[5] = { t->n, t->c, b - a };

	for (int i = 1; i < t->nd; i++) {
		rest *= t->in[i] * t->k[i];
		xrest *= dims[2 + i] = t->in[i];
	}
	bc.in[0] = b - a;
	bx = kt_tensor(HP_F32, t->nd + 2, dims);
	for (int64_t nc = 0; nc < t->n * t->c; nc++)
		memcpy((float *)bx.data + nc * (b - a) * xrest, (const float *)wbt->x.data + (nc * t->in[0] + a) * xrest,
		       (size_t)((b - a) * xrest) * sizeof(float));
	build(&bc, 1, &bt);
	hp_tensor_free(&bt.x);
	hp_tensor_free(&bt.w);
	hp_tensor_free(&bt.b);
	bt.x = bx;
	bt.w = wbt->w;
	bt.b = wbt->b;
	assert_int_equal(run_case(&bc, &bt, pool, &out), 0);
	for (int64_t nc = 0; nc < t->n * t->m; nc++)
		assert_memory_equal((const float *)out.data + nc * (b - a) * k * rest,
				    (const float *)whole->data + (nc * rows + a * k) * rest,
				    (size_t)((b - a) * k * rest) * sizeof(float));
	hp_tensor_free(&out);
	hp_tensor_free(&bt.x);
}

/* The chains convt_fma.c promises, with libc's fmaf: each output from its
 * bias (or 0), input channels in order; bitwise. */
static void check_convt_chain(const struct cc *t, const struct built *bt, const struct hp_tensor *y)
{
	int64_t x3[3] = { 1, 1, 1 }, k3[3] = { 1, 1, 1 }, off = 3 - t->nd;
	int64_t cg = t->c / t->group, mg = t->m / t->group;

	for (int i = 0; i < t->nd; i++) {
		x3[off + i] = t->in[i];
		k3[off + i] = t->k[i];
	}
	int64_t o3[3] = { x3[0] * k3[0], x3[1] * k3[1], x3[2] * k3[2] }, ov = o3[0] * o3[1] * o3[2];
	int64_t kv = k3[0] * k3[1] * k3[2], xv = x3[0] * x3[1] * x3[2];
	for (int64_t n = 0; n < t->n; n++)
		for (int64_t m = 0; m < t->m; m++)
			for (int64_t o = 0; o < ov; o++) {
				int64_t od = o / (o3[1] * o3[2]), oh = o / o3[2] % o3[1], ow = o % o3[2], g = m / mg;
				int64_t i = (od / k3[0] * x3[1] + oh / k3[1]) * x3[2] + ow / k3[2];
				int64_t q = (od % k3[0] * k3[1] + oh % k3[1]) * k3[2] + ow % k3[2];
				float acc = t->bias ? at(&bt->b, m) : 0.0f, got = at(y, (n * t->m + m) * ov + o);
				for (int64_t c = 0; c < cg; c++)
					acc = fmaf(at(&bt->w, ((g * cg + c) * mg + m % mg) * kv + q),
						   at(&bt->x, (n * t->c + g * cg + c) * xv + i), acc);
				if (memcmp(&acc, &got, sizeof acc))
					fail_msg("ConvTranspose chain: output %lld of (%lld, %lld): %a, want %a", (long long)o,
						 (long long)n, (long long)m, (double)got, (double)acc);
			}
}

/* Against the reference and the column path (to rounding), bitwise the
 * fmaf chains and the AVX2 tiles alone, 1 thread bitwise 2, every batch band and band of input
 * rows bitwise the whole. */
static void test_convt_fma(void **state)
{
	struct hp_pool *pool;

	(void)state;
	if (!hp_kxk_available())
		skip();
	assert_int_equal(hp_pool_create(2, &pool), 0);
	for (size_t i = 0; i < sizeof convt_fma_cases / sizeof convt_fma_cases[0]; i++) {
		const struct cc *t = &convt_fma_cases[i];
		struct hp_tensor whole, one, col;
		struct built bt;
		check(t, 300 + (unsigned)i, NULL);
		check(t, 300 + (unsigned)i, pool);
		build(t, 41, &bt);
		assert_int_equal(run_case(t, &bt, pool, &whole), 0);
		assert_int_equal(run_case(t, &bt, NULL, &one), 0);
		assert_memory_equal(whole.data, one.data, hp_tensor_bytes(&whole));
		check_convt_chain(t, &bt, &whole);
		/* the AVX-512 tiles of 32 columns off: the AVX2 tiles' bits */
		hp_convt_set_wide(0);
		assert_int_equal(run_case(t, &bt, pool, &col), 0);
		hp_convt_set_wide(1);
		assert_memory_equal(whole.data, col.data, hp_tensor_bytes(&whole));
		hp_tensor_free(&col);
		hp_convt_set_fma(-1);
		assert_int_equal(run_case(t, &bt, pool, &col), 0);
		hp_convt_set_fma(0);
		assert_true(kt_rel_err(&col, &whole) < 1e-5);
		for (int64_t a = 0; a < t->n; a++)
			for (int64_t b = a + 1; b <= t->n; b++)
				check_band(t, &bt, &whole, 0, a, b, pool);
		for (int64_t a = 0; a < t->in[0]; a++)
			for (int64_t b = a + 1; b <= t->in[0]; b++)
				check_convt_rows(t, &bt, &whole, a, b, b - a > 1 ? pool : NULL);
		hp_tensor_free(&whole);
		hp_tensor_free(&one);
		hp_tensor_free(&col);
		unbuild(&bt);
	}
	hp_pool_destroy(pool);
}

/* Stolen units (hp_conv_steal) on the paths the 2-D U-Net runs: its
 * 3-channel stem, 16-channel 3x3 (row runs, masked edges), 32-channel
 * (row runs, copied edges), 16-wide plane (packed blocks), a 7x7 plane of
 * one block cut into a run of micro-tiles per thread, 18-wide rows
 * (packed, rows across panels), and the 2x2 stride-2 ConvTranspose. */
static const struct cc steal_cases[] = {
	{ 2, 0, 2, 3, 16, 1, V3(64, 64, 0), V3(3, 3, 0), V3(1, 1, 0), V3(1, 1, 0), V3(1, 1, 0), V3(1, 1, 0), {0}, {0}, NULL, 1, 1, 1, 0 },
	{ 2, 0, 2, 16, 16, 1, V3(32, 48, 0), V3(3, 3, 0), V3(1, 1, 0), V3(1, 1, 0), V3(1, 1, 0), V3(1, 1, 0), {0}, {0}, NULL, 1, 1, 1, 0 },
	{ 2, 0, 2, 32, 32, 1, V3(16, 32, 0), V3(3, 3, 0), V3(1, 1, 0), V3(1, 1, 0), V3(1, 1, 0), V3(1, 1, 0), {0}, {0}, NULL, 0, 1, 1, 0 },
	{ 2, 0, 2, 64, 128, 1, V3(16, 16, 0), V3(3, 3, 0), V3(1, 1, 0), V3(1, 1, 0), V3(1, 1, 0), V3(1, 1, 0), {0}, {0}, NULL, 1, 1, 1, 0 },
	{ 2, 0, 1, 64, 37, 1, V3(7, 7, 0), V3(3, 3, 0), V3(1, 1, 0), V3(1, 1, 0), V3(1, 1, 0), V3(1, 1, 0), {0}, {0}, NULL, 1, 1, 1, 0 },
	{ 2, 0, 1, 24, 20, 1, V3(18, 18, 0), V3(3, 3, 0), V3(1, 1, 0), V3(1, 1, 0), V3(1, 1, 0), V3(1, 1, 0), {0}, {0}, NULL, 1, 1, 1, 0 },
	{ 2, 1, 2, 64, 32, 1, V3(16, 16, 0), V3(2, 2, 0), V3(2, 2, 0), V3(1, 1, 0), {0}, {0}, {0}, {0}, NULL, 1, 1, 0, 0 },
};

/* Each case against the loops, then on two threads with the worker and
 * then the caller delayed before its share (hp_pool_test_delay: the other
 * thread steals its units from the back), and plainly: bitwise one
 * thread's every time, whoever ran which unit. */
static void test_steal_bits(void **state)
{
	struct hp_pool *pool;

	(void)state;
	if (!hp_kxk_available())
		skip();
	assert_int_equal(hp_pool_create(2, &pool), 0);
	for (size_t i = 0; i < sizeof steal_cases / sizeof steal_cases[0]; i++) {
		const struct cc *t = &steal_cases[i];
		struct hp_tensor one, two;
		struct built bt;
		check(t, 400 + (unsigned)i, pool);
		build(t, 43, &bt);
		assert_int_equal(run_case(t, &bt, NULL, &one), 0);
		for (int who = 1; who >= -1; who--) {
			if (who >= 0)
				hp_pool_test_delay(who, 2000000);
			assert_int_equal(run_case(t, &bt, pool, &two), 0);
			hp_pool_test_delay(who >= 0 ? who : 0, 0);
			if (memcmp(one.data, two.data, hp_tensor_bytes(&one)))
				fail_msg("steal case %zu, %s delayed: 2 threads differ from 1", i,
					 who == 1 ? "worker" : who == 0 ? "caller" : "nobody");
			hp_tensor_free(&two);
		}
		hp_tensor_free(&one);
		unbuild(&bt);
	}
	hp_pool_destroy(pool);
}

/* a[0..n) from the LCG at *st, in [-1, 1): the cases' inputs, weights
 * and addends, drawn in turn from one state. */
static void lcg_fill(float *a, int64_t n, unsigned *st)
{
	for (int64_t j = 0; j < n; j++)
		a[j] = (float)((*st = *st * 1103515245u + 12345u) >> 8 & 0xffff) / 32768.0f - 1.0f;
}

/* Pointwise Convs on conv_pwt.c's tiles from W^T packed once (exec/
 * fuse_pack.c), at the planes they take packed: up to 36 positions (5x5
 * and 6x6: SqueezeNet's and GoogLeNet's last stages at 96x96, tiles of 9
 * + 8 + 8 and 12 + 12 + 12 positions), not 7x7 (conv_pw.c's tiles of 48
 * columns and a tail), but any plane for 16 or 32 output channels from K
 * of 64 or more (SqueezeNet's squeezes at 23x23 and 11x11: units of
 * positions, the last one short; GoogLeNet's reductions at 12x12, batch
 * 2), not from K of 16; units of 32 channels, a last one of 16 or of 8;
 * each output the float chain (bias, then fmaf per k in order), bitwise,
 * on 1 and 2 threads, and bitwise conv_pw.c's (the node unpacked); with a
 * Relu epilogue over a full addend, bitwise the chains' outputs passed
 * through hp_epi_span whole. */
static void test_pwt_packed(void **state)
{
	static const struct {
		int64_t cin, cout, h, w, bias, n;
	} cases[] = {
		{ 480, 192, 6, 6, 1, 1 }, { 512, 48, 5, 5, 1, 1 }, { 64, 40, 6, 6, 0, 1 }, { 96, 16, 4, 9, 1, 2 },
		{ 33, 24, 3, 3, 1, 1 },   { 70, 32, 7, 7, 1, 1 },  { 64, 64, 1, 36, 0, 1 }, { 64, 16, 23, 23, 1, 1 },
		{ 256, 32, 11, 11, 1, 1 }, { 192, 16, 12, 12, 0, 2 }, { 16, 64, 23, 23, 1, 1 }, { 48, 32, 7, 7, 1, 1 },
	};
	struct hp_pool *pool;

	(void)state;
	if (!hp_pw_available() || !hp_pw_512())
		skip();
	assert_int_equal(hp_pool_create(2, &pool), 0);
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		int64_t ci = cases[i].cin, co = cases[i].cout, nb = cases[i].n;
		struct hp_conv cv = { .node = 1, .nd = 2, .batch = nb, .cin = ci, .cout = co, .group = 1, .cin_g = ci,
				      .cout_g = co, .path = -1 };
		cv.g = (struct hp_colgeom){ .img = { 1, cases[i].h, cases[i].w }, .grid = { 1, cases[i].h, cases[i].w },
					    .k = { 1, 1, 1 }, .stride = { 1, 1, 1 }, .dil = { 1, 1, 1 }, .pad = { 0, 0, 0 } };
		hp_colgeom_finish(&cv.g);
		cv.xvol = cv.yvol = cv.g.img_vol;
		cv.kdim = ci;
		hp_conv_setup(&cv);
		assert_int_equal(hp_pwt_packs(&cv), cv.yvol <= 36 || (co <= 32 && co % 16 == 0 && ci >= 64));
		int64_t nx = nb * ci * cv.xvol, nw = co * ci, ny = nb * co * cv.yvol;
		float *x = malloc((size_t)nx * sizeof *x), *w = malloc((size_t)nw * sizeof *w);
		float *b = malloc((size_t)co * sizeof *b), *wt = malloc((size_t)hp_pwt_packed_floats(co, ci) * sizeof *wt);
		float *ref = malloc((size_t)ny * sizeof *ref), *y = malloc((size_t)ny * sizeof *y);
		float *ws = malloc(cv.workspace + 64), *add = malloc((size_t)ny * sizeof *add);
		float *want = malloc((size_t)ny * sizeof *want);
		const float *bias = cases[i].bias ? b : NULL;
		unsigned st = 91 + (unsigned)i;
		struct hp_epi relu = { .act = HP_EPI_RELU, .add = HP_EPI_ADD_FULL };
		lcg_fill(x, nx, &st);
		lcg_fill(w, nw, &st);
		for (int64_t j = 0; j < co; j++)
			b[j] = (float)j / 16.0f - 1.0f;
		for (int64_t n = 0; n < nb; n++)
			for (int64_t m = 0; m < co; m++)
				for (int64_t p = 0; p < cv.yvol; p++) {
					float acc = bias ? bias[m] : 0.0f;
					for (int64_t c = 0; c < ci; c++)
						acc = fmaf(w[m * ci + c], x[(n * ci + c) * cv.xvol + p], acc);
					ref[(n * co + m) * cv.yvol + p] = acc;
				}
		lcg_fill(add, ny, &st);
		hp_pwt_pack(w, co, ci, wt);
		for (int th = 0; th < 3 && hp_pwt_packs(&cv); th++) { /* the epilogue, then the chains alone */
			memset(y, 0xff, (size_t)ny * sizeof *y);
			if (th == 0) {
				memcpy(y, ref, (size_t)ny * sizeof *y);
				hp_epi_span(&relu, y, add, 0, ny);
				memcpy(want, y, (size_t)ny * sizeof *y);
				continue;
			}
			assert_int_equal(hp_pwt_forward_packed(&cv, x, wt, bias, y, th > 1 ? pool : NULL, &relu, add), 1);
			if (memcmp(y, want, (size_t)ny * sizeof *y))
				fail_msg("pointwise case %zu (Relu and addend, %d threads): not the epilogue's bits", i, th);
		}
		for (int th = 0; th < 3; th++) {
			memset(y, 0xff, (size_t)ny * sizeof *y);
			if (th < 2 && !hp_pwt_packs(&cv))
				continue;
			if (th < 2)
				assert_int_equal(hp_pwt_forward_packed(&cv, x, wt, bias, y, th ? pool : NULL, NULL, NULL), 1);
			else
				hp_conv_forward(&cv, x, w, bias, y, ws, pool);
			if (memcmp(y, ref, (size_t)ny * sizeof *y))
				fail_msg("pointwise case %zu (%s): not the float chains", i,
					 th == 0 ? "packed, 1 thread" : th == 1 ? "packed, 2 threads" : "unpacked");
		}
		free(x), free(w), free(wt), free(b), free(ref), free(y), free(ws), free(add);
		free(want);
	}
	hp_pool_destroy(pool);
}

/* 1x1 Convs of stride 2 or more without pads, unpacked (training's
 * forward): X subsampled into the workspace, then conv_pw.c's product
 * (hp_conv_pw_strided), a few items at a time where the workspace holds
 * fewer than the batch.  Each output the float chain (bias, then fmaf per
 * k in order over the strided positions), bitwise, on 1 and 2 threads,
 * and bitwise the kxk path's (forced); with a Relu epilogue over a full
 * addend and a Clip over a per-channel one, the chains passed through
 * hp_epi_span (each item's outputs with the addend's right part). */
static void test_pw_strided(void **state)
{
	static const struct {
		int64_t cin, cout, h, w, s1, s2, n, bias, items;
	} cases[] = {
		{ 64, 128, 16, 16, 2, 2, 4, 0, 0 }, { 256, 512, 4, 4, 2, 2, 4, 1, 0 }, { 64, 128, 56, 56, 2, 2, 2, 0, 0 },
		{ 40, 72, 9, 11, 2, 2, 3, 1, 0 },   { 48, 40, 12, 12, 3, 3, 2, 1, 0 }, { 32, 64, 8, 10, 2, 1, 2, 1, 0 },
		{ 64, 96, 13, 13, 2, 2, 5, 1, 2 },  { 1024, 64, 4, 4, 2, 2, 3, 0, 1 },
	};
	struct hp_pool *pool;

	(void)state;
	if (!hp_pw_available())
		skip();
	assert_int_equal(hp_pool_create(2, &pool), 0);
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		int64_t ci = cases[i].cin, co = cases[i].cout, nb = cases[i].n, s1 = cases[i].s1, s2 = cases[i].s2;
		int64_t oh = (cases[i].h - 1) / s1 + 1, ow = (cases[i].w - 1) / s2 + 1;
		struct hp_conv cv = { .node = 1, .nd = 2, .batch = nb, .cin = ci, .cout = co, .group = 1, .cin_g = ci,
				      .cout_g = co, .path = -1 };
		cv.g = (struct hp_colgeom){ .img = { 1, cases[i].h, cases[i].w }, .grid = { 1, oh, ow },
					    .k = { 1, 1, 1 }, .stride = { 1, s1, s2 }, .dil = { 1, 1, 1 }, .pad = { 0, 0, 0 } };
		hp_colgeom_finish(&cv.g);
		cv.xvol = cv.g.img_vol;
		cv.yvol = cv.g.grid_vol;
		cv.kdim = ci;
		hp_conv_setup(&cv);
		assert_int_equal(hp_conv_path(&cv), HP_CONV_PATH_KXK);
		size_t kxk_ws = cv.workspace;
		if (cases[i].items) /* room for that many items' subsample and one thread's panel */
			cv.workspace = (size_t)(cases[i].items * ci * cv.yvol + (ci < 256 ? ci : 256) * 128) * sizeof(float);
		if (!hp_conv_pw_strided(&cv))
			fail_msg("strided 1x1 case %zu: not on conv_pw.c", i);
		int64_t nx = nb * ci * cv.xvol, nw = co * ci, ny = nb * co * cv.yvol;
		float *x = malloc((size_t)nx * sizeof *x), *w = malloc((size_t)nw * sizeof *w);
		float *b = malloc((size_t)co * sizeof *b), *ref = malloc((size_t)ny * sizeof *ref);
		float *y = malloc((size_t)ny * sizeof *y), *want = malloc((size_t)ny * sizeof *want);
		float *add = malloc((size_t)ny * sizeof *add);
		float *ws = malloc((cv.workspace > kxk_ws ? cv.workspace : kxk_ws) + 64);
		const float *bias = cases[i].bias ? b : NULL;
		unsigned st = 17 + (unsigned)i;
		struct hp_epi relu = { .act = HP_EPI_RELU, .add = HP_EPI_ADD_FULL };
		lcg_fill(x, nx, &st);
		lcg_fill(w, nw, &st);
		for (int64_t j = 0; j < co; j++)
			b[j] = (float)j / 16.0f - 1.0f;
		lcg_fill(add, ny, &st);
		for (int64_t n = 0; n < nb; n++)
			for (int64_t m = 0; m < co; m++)
				for (int64_t p = 0; p < cv.yvol; p++) {
					float acc = bias ? bias[m] : 0.0f;
					int64_t at = p / ow * s1 * cases[i].w + p % ow * s2;
					for (int64_t c = 0; c < ci; c++)
						acc = fmaf(w[m * ci + c], x[(n * ci + c) * cv.xvol + at], acc);
					ref[(n * co + m) * cv.yvol + p] = acc;
				}
		struct hp_epi clip = { .act = HP_EPI_CLIP, .add = HP_EPI_ADD_MID, .lo = -0.5f, .hi = 0.75f, .mid = co,
				       .inner = cv.yvol };
		float *want_mid = malloc((size_t)ny * sizeof *y);
		memcpy(want, ref, (size_t)ny * sizeof *y);
		hp_epi_span(&relu, want, add, 0, ny);
		memcpy(want_mid, ref, (size_t)ny * sizeof *y);
		hp_epi_span(&clip, want_mid, add, 0, ny);
		/* 1, 2 threads; then with the full addend, the per-channel one; then kxk forced */
		for (int t = 0; t < 8; t++) {
			int threads = t % 2 ? 2 : 1, epi = t / 2 == 1 ? 1 : t / 2 == 2 ? 2 : 0, kxk = t >= 6;
			struct hp_conv k = cv;
			if (kxk) {
				hp_conv_set_kxk(1);
				k.workspace = kxk_ws;
				assert_false(hp_conv_pw_strided(&k));
			}
			memset(y, 0xff, (size_t)ny * sizeof *y);
			hp_conv_forward_epi(&k, x, w, bias, y, ws, threads > 1 ? pool : NULL,
					    epi == 1 ? &relu : epi == 2 ? &clip : NULL, epi ? add : NULL);
			hp_conv_set_kxk(0);
			if (memcmp(y, epi == 1 ? want : epi == 2 ? want_mid : ref, (size_t)ny * sizeof *y))
				fail_msg("strided 1x1 case %zu (%d threads%s): not the float chains", i, threads,
					 epi == 1 ? ", Relu and addend" : epi == 2 ? ", Clip and per-channel addend" :
					 kxk ? ", kxk path" : "");
		}
		free(x), free(w), free(b), free(ref), free(y), free(want), free(want_mid), free(add), free(ws);
	}
	hp_pool_destroy(pool);
}

/* Dense KxK Convs at small planes on conv_grp.c's co-lane forward tiles
 * from W packed once (hp_grp_pack, as exec/fuse_pack.c does in core):
 * SqueezeNet's, GoogLeNet's and DenseNet's 3x3 shapes (5x5 to 24x24
 * planes; 48 and 208 output channels end in a unit of 16; 25 and 36
 * positions split into uneven tiles; several channel units share one
 * staging; 128 channels at 24x24 in blocks of rows; one unit of 32
 * channels, cut into blocks of rows on 2 threads), stride-2 ones, ones
 * without bias, batches of 2 and 3 (planes of 64 positions and more).  The auto choice takes them (hp_grp_dense) but not
 * 16 output channels; each output is the float chain (bias, then fmaf per
 * tap in order, padding taps as zeros), bitwise, on 1 and 2 threads, and
 * bitwise the kxk path's; so are the tiles from W unpacked (packing each
 * unit's W^T as they go) where the plane has 64 positions or more: under a
 * budget and in training (80 channels at 10x10, batch 2: a last unit of
 * 16). */
static void test_grp_dense_packed(void **state)
{
	static const struct {
		int64_t cin, cout, h, w, stride, bias, n;
	} cases[] = {
		{ 16, 64, 23, 23, 1, 1, 1 },  { 32, 128, 11, 11, 1, 1, 1 }, { 48, 192, 5, 5, 1, 1, 1 },
		{ 64, 48, 5, 5, 1, 0, 1 },    { 96, 208, 6, 6, 1, 1, 1 },   { 128, 32, 12, 12, 1, 1, 1 },
		{ 16, 96, 9, 13, 1, 1, 3 },   { 24, 80, 11, 11, 2, 1, 1 },  { 128, 32, 24, 24, 1, 1, 1 },
		{ 64, 32, 6, 6, 1, 0, 1 },    { 64, 64, 16, 16, 2, 1, 2 },  { 16, 80, 10, 10, 1, 1, 2 },
	};
	struct hp_pool *pool;
	size_t ran = 0;

	(void)state;
	if (!hp_kxk_available())
		skip();
	assert_int_equal(hp_pool_create(2, &pool), 0);
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		int64_t ci = cases[i].cin, co = cases[i].cout, s = cases[i].stride;
		struct hp_conv cv = { .node = 1, .nd = 2, .batch = cases[i].n, .cin = ci, .cout = co, .group = 1,
				      .cin_g = ci, .cout_g = co, .path = -1 };
		struct hp_colgeom *g = &cv.g;
		int64_t oh = (cases[i].h + 2 - 3) / s + 1, ow = (cases[i].w + 2 - 3) / s + 1;
		*g = (struct hp_colgeom){ .img = { 1, cases[i].h, cases[i].w }, .grid = { 1, oh, ow }, .k = { 1, 3, 3 },
					  .stride = { 1, s, s }, .dil = { 1, 1, 1 }, .pad = { 0, 1, 1 } };
		hp_colgeom_finish(g);
		cv.xvol = g->img_vol;
		cv.yvol = g->grid_vol;
		cv.kdim = ci * 9;
		hp_conv_set_kxk(0);
		hp_conv_setup(&cv);
		assert_int_equal(hp_conv_path(&cv), HP_CONV_PATH_KXK);
		if (!hp_grp_dense(&cv)) /* no AVX-512 */
			continue;
		assert_true(hp_grp_packs(&cv));
		ran++;
		int64_t nb = cases[i].n, nx = nb * ci * cv.xvol, nw = co * cv.kdim, ny = nb * co * cv.yvol;
		float *x = malloc((size_t)nx * sizeof *x), *w = malloc((size_t)nw * sizeof *w);
		float *wt = malloc((size_t)nw * sizeof *wt), *b = malloc((size_t)co * sizeof *b);
		float *ref = malloc((size_t)ny * sizeof *ref), *y = malloc((size_t)ny * sizeof *y);
		float *ws = malloc(cv.workspace + 64);
		const float *bias = cases[i].bias ? b : NULL;
		unsigned st = 77 + (unsigned)i;
		lcg_fill(x, nx, &st);
		lcg_fill(w, nw, &st);
		for (int64_t j = 0; j < co; j++)
			b[j] = (float)j / 16.0f - 1.0f;
		for (int64_t n = 0; n < nb; n++)
			for (int64_t m = 0; m < co; m++)
				for (int64_t p = 0; p < cv.yvol; p++) {
					float acc = bias ? bias[m] : 0.0f;
					for (int64_t c = 0; c < ci; c++)
						for (int64_t kh = 0; kh < 3; kh++)
							for (int64_t kw = 0; kw < 3; kw++) {
								int64_t ih = p / ow * s - 1 + kh, iw = p % ow * s - 1 + kw;
								int in = ih >= 0 && ih < cases[i].h && iw >= 0 &&
									 iw < cases[i].w;
								float xv = in ? x[((n * ci + c) * cases[i].h + ih) * cases[i].w +
										   iw]
									      : 0.0f;
								acc = fmaf(w[(m * ci + c) * 9 + kh * 3 + kw], xv, acc);
							}
					ref[(n * co + m) * cv.yvol + p] = acc;
				}
		hp_grp_pack(w, 1, co, cv.kdim, wt);
		static const char *const how[] = { "packed, 1 thread", "packed, 2 threads", "unpacked, 1 thread",
						   "unpacked, 2 threads", "kxk" };
		for (int th = 0; th < 5; th++) {
			memset(y, 0xff, (size_t)ny * sizeof *y);
			if (th < 2)
				assert_int_equal(hp_conv_forward_packed(&cv, x, wt, bias, y, ws, th ? pool : NULL, NULL,
									NULL), 1);
			else if (th < 4) /* the tiles packing as they go where the plane has 64 positions */
				hp_conv_forward(&cv, x, w, bias, y, ws, th == 3 ? pool : NULL);
			else
				hp_kxk_forward(&cv, x, w, bias, y, ws, NULL, NULL, NULL);
			if (memcmp(y, ref, (size_t)ny * sizeof *y))
				fail_msg("dense case %zu (%s): not the float chains", i, how[th]);
		}
		assert_int_equal(hp_grp_dense_unpacked(&cv), cv.yvol >= 64);
		free(x), free(w), free(wt), free(b), free(ref), free(y), free(ws);
	}
	if (hp_kxk_wide_ok()) { /* every case on the co-lane tiles where they run; 16 channels not */
		struct hp_conv cv = { .node = 1, .nd = 2, .batch = 1, .cin = 16, .cout = 16, .group = 1, .cin_g = 16,
				      .cout_g = 16, .path = -1 };
		assert_int_equal(ran, sizeof cases / sizeof cases[0]);
		cv.g = (struct hp_colgeom){ .img = { 1, 12, 12 }, .grid = { 1, 12, 12 }, .k = { 1, 3, 3 },
					    .stride = { 1, 1, 1 }, .dil = { 1, 1, 1 }, .pad = { 0, 1, 1 } };
		hp_colgeom_finish(&cv.g);
		cv.xvol = cv.yvol = cv.g.img_vol;
		cv.kdim = 16 * 9;
		hp_conv_setup(&cv);
		assert_int_equal(hp_conv_path(&cv), HP_CONV_PATH_KXK);
		assert_false(hp_grp_dense(&cv));
	}
	hp_pool_destroy(pool);
}

/* Grouped Convs of 8 output channels a group on conv_grp.c's 8-lane
 * co-lane tiles (gr_c8_block), in core from W^T packed once (hp_grp_pack,
 * as exec/fuse_pack.c does) and packing as they go (training): RegNet's
 * groups of 8 at 3x3 (batch 2), 2x2, 4x4 and 5x5 (a tile of 25 positions
 * cut 13 + 12), 1x1 (one position), a 4x5 plane from 6 input channels a
 * group without bias, a 5x3 plane at stride 2 from 16 input channels (the
 * staging's phases), 6x6 (36 positions: the auto choice leaves it to the
 * column tiles, forced it runs in tiles of 18).  Every output is the
 * float chain (bias, then fmaf per tap (c, kh, kw) in order, padding as
 * zeros), on 1 and 2 threads; the auto choice takes the tiles up to 25
 * positions. */
static void test_grp_c8(void **state)
{
	static const struct {
		int64_t cin_g, group, h, w, stride, bias, n;
	} cases[] = {
		{ 8, 55, 3, 3, 1, 1, 2 }, { 8, 6, 2, 2, 1, 1, 1 },  { 8, 13, 4, 4, 1, 1, 1 },	{ 8, 26, 5, 5, 1, 1, 1 },
		{ 8, 4, 1, 1, 1, 1, 1 },  { 6, 3, 4, 5, 1, 0, 1 },  { 16, 2, 10, 5, 2, 1, 1 }, { 8, 26, 6, 6, 1, 1, 1 },
	};
	struct hp_pool *pool;

	(void)state;
	if (!hp_kxk_available())
		skip();
	assert_int_equal(hp_pool_create(2, &pool), 0);
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		int64_t cg = cases[i].cin_g, gr = cases[i].group, s = cases[i].stride, h = cases[i].h, wd = cases[i].w;
		int64_t ci = cg * gr, co = 8 * gr, oh = (h + 2 - 3) / s + 1, ow = (wd + 2 - 3) / s + 1;
		struct hp_conv cv = { .node = 1, .nd = 2, .batch = cases[i].n, .cin = ci, .cout = co, .group = gr,
				      .cin_g = cg, .cout_g = 8, .path = -1 };
		struct hp_colgeom *g = &cv.g;
		*g = (struct hp_colgeom){ .img = { 1, h, wd }, .grid = { 1, oh, ow }, .k = { 1, 3, 3 },
					  .stride = { 1, s, s }, .dil = { 1, 1, 1 }, .pad = { 0, 1, 1 } };
		hp_colgeom_finish(g);
		cv.xvol = g->img_vol;
		cv.yvol = g->grid_vol;
		cv.kdim = cg * 9;
		hp_conv_setup(&cv);
		assert_int_equal(hp_conv_path(&cv), HP_CONV_PATH_GRP);
		if (!hp_grp_packs(&cv) && cv.yvol <= 25) /* no AVX-512 */
			continue;
		assert_int_equal(hp_grp_packs(&cv), cv.yvol <= 25);
		int64_t nb = cases[i].n, nx = nb * ci * cv.xvol, nw = co * cv.kdim, ny = nb * co * cv.yvol;
		float *x = malloc((size_t)nx * sizeof *x), *w = malloc((size_t)nw * sizeof *w);
		float *wt = malloc((size_t)nw * sizeof *wt), *b = malloc((size_t)co * sizeof *b);
		float *ref = malloc((size_t)ny * sizeof *ref), *y = malloc((size_t)ny * sizeof *y);
		float *ws;
		const float *bias = cases[i].bias ? b : NULL;
		unsigned st = 91 + (unsigned)i;
		lcg_fill(x, nx, &st);
		lcg_fill(w, nw, &st);
		for (int64_t j = 0; j < co; j++)
			b[j] = (float)j / 64.0f - 1.0f;
		for (int64_t n = 0; n < nb; n++)
			for (int64_t m = 0; m < co; m++)
				for (int64_t p = 0; p < cv.yvol; p++) {
					float acc = bias ? bias[m] : 0.0f;
					for (int64_t c = 0; c < cg; c++)
						for (int64_t kh = 0; kh < 3; kh++)
							for (int64_t kw = 0; kw < 3; kw++) {
								int64_t ih = p / ow * s - 1 + kh, iw = p % ow * s - 1 + kw;
								int in = ih >= 0 && ih < h && iw >= 0 && iw < wd;
								int64_t xc = n * ci + m / 8 * cg + c;
								float xv = in ? x[(xc * h + ih) * wd + iw] : 0.0f;
								acc = fmaf(w[(m * cg + c) * 9 + kh * 3 + kw], xv, acc);
							}
					ref[(n * co + m) * cv.yvol + p] = acc;
				}
		hp_grp_pack(w, gr, 8, cv.kdim, wt);
		hp_grp_set_cofwd(1); /* 6x6 too */
		hp_conv_setup(&cv);
		ws = malloc(cv.workspace + 64);
		static const char *const how[] = { "packed, 1 thread", "packed, 2 threads", "unpacked, 1 thread",
						   "unpacked, 2 threads" };
		for (int th = 0; th < 4; th++) {
			memset(y, 0xff, (size_t)ny * sizeof *y);
			if (th < 2)
				assert_int_equal(hp_conv_forward_packed(&cv, x, wt, bias, y, ws, th ? pool : NULL, NULL,
									NULL), 1);
			else
				hp_conv_forward(&cv, x, w, bias, y, ws, th == 3 ? pool : NULL);
			if (memcmp(y, ref, (size_t)ny * sizeof *y))
				fail_msg("groups of 8, case %zu (%s): not the float chains", i, how[th]);
		}
		hp_grp_set_cofwd(0);
		free(x), free(w), free(wt), free(b), free(ref), free(y), free(ws);
	}
	hp_pool_destroy(pool);
}

/* The float chain of every output of a 3x3 Conv of stride 1 and pads 1
 * (bias, then fmaf per tap (c, kh, kw) in order, padding as zeros). */
static void chain3x3(const float *x, const float *w, const float *bias, int64_t nb, int64_t ci, int64_t co,
		     int64_t h, int64_t wd, float *ref)
{
	for (int64_t n = 0; n < nb; n++)
		for (int64_t m = 0; m < co; m++)
			for (int64_t p = 0; p < h * wd; p++) {
				float acc = bias ? bias[m] : 0.0f;
				for (int64_t c = 0; c < ci; c++)
					for (int64_t kh = 0; kh < 3; kh++)
						for (int64_t kw = 0; kw < 3; kw++) {
							int64_t ih = p / wd - 1 + kh, iw = p % wd - 1 + kw;
							int in = ih >= 0 && ih < h && iw >= 0 && iw < wd;
							float xv = in ? x[((n * ci + c) * h + ih) * wd + iw] : 0.0f;
							acc = fmaf(w[(m * ci + c) * 9 + kh * 3 + kw], xv, acc);
						}
				ref[(n * co + m) * h * wd + p] = acc;
			}
}

/* conv_grp.c's packed 3x3 tiles that skip the padding's products
 * (gr_cs_block): rows of 3 to 12 columns in tiles of 1 to 4 whole rows
 * (3 columns: 4 middle rows in one tile, 5 in tiles of 3 and 2), wider
 * rows in segments (13: 7 + 6, 23: 12 + 11, 25: 9 + 8 + 8), planes of one
 * row class each and taller ones in blocks of rows (128 channels at
 * 24x24), batch 2, a last unit of 16 channels (the co-lane tiles that
 * multiply the padding), no bias; each output the full float chain,
 * bitwise, on 1 and 2 threads and with the skipping off.  Then a bias
 * lane of -0: with X zero and W negative but for a first tap of +1, the
 * full chain of the top-left output turns -0 into +0 at that padding tap
 * and a chain that skipped it would stay -0, so that unit must not skip. */
static void test_grp_skip(void **state)
{
	static const struct {
		int64_t cin, cout, h, w, n, bias;
	} cases[] = {
		{ 32, 64, 3, 3, 1, 1 },	  { 16, 32, 6, 3, 1, 1 },   { 16, 32, 7, 3, 1, 0 },   { 24, 64, 5, 4, 1, 1 },
		{ 64, 256, 5, 5, 1, 1 },  { 48, 96, 6, 6, 1, 1 },   { 32, 32, 7, 7, 1, 1 },   { 40, 64, 12, 12, 1, 1 },
		{ 16, 32, 13, 13, 1, 1 }, { 16, 64, 23, 23, 1, 1 }, { 8, 32, 4, 25, 1, 1 },   { 128, 32, 24, 24, 1, 1 },
		{ 16, 64, 10, 10, 2, 1 }, { 64, 48, 5, 5, 1, 1 },   { 32, 208, 6, 6, 1, 0 },  { 8, 32, 1, 9, 1, 1 },
	};
	struct hp_pool *pool;

	(void)state;
	if (!hp_kxk_available())
		skip();
	assert_int_equal(hp_pool_create(2, &pool), 0);
	for (size_t i = 0; i <= sizeof cases / sizeof cases[0]; i++) {
		int last = i == sizeof cases / sizeof cases[0]; /* the -0 bias */
		int64_t ci = last ? 16 : cases[i].cin, co = last ? 64 : cases[i].cout;
		int64_t h = last ? 5 : cases[i].h, wd = last ? 5 : cases[i].w, nb = last ? 1 : cases[i].n;
		struct hp_conv cv = { .node = 1, .nd = 2, .batch = nb, .cin = ci, .cout = co, .group = 1,
				      .cin_g = ci, .cout_g = co, .path = -1 };
		cv.g = (struct hp_colgeom){ .img = { 1, h, wd }, .grid = { 1, h, wd }, .k = { 1, 3, 3 },
					    .stride = { 1, 1, 1 }, .dil = { 1, 1, 1 }, .pad = { 0, 1, 1 } };
		hp_colgeom_finish(&cv.g);
		cv.xvol = cv.yvol = cv.g.img_vol;
		cv.kdim = ci * 9;
		hp_conv_setup(&cv);
		if (!hp_grp_dense(&cv)) /* no AVX-512 */
			continue;
		int64_t nx = nb * ci * cv.xvol, nw = co * cv.kdim, ny = nb * co * cv.yvol;
		float *x = malloc((size_t)nx * sizeof *x), *w = malloc((size_t)nw * sizeof *w);
		float *wt = malloc((size_t)nw * sizeof *wt), *b = malloc((size_t)co * sizeof *b);
		float *ref = malloc((size_t)ny * sizeof *ref), *y = malloc((size_t)ny * sizeof *y);
		float *ws = malloc(cv.workspace + 64);
		const float *bias = last || cases[i].bias ? b : NULL;
		unsigned st = 301 + (unsigned)i;
		lcg_fill(x, nx, &st);
		lcg_fill(w, nw, &st);
		lcg_fill(b, co, &st);
		if (last) { /* lane 40 (the second unit) of -0, the first unit's lanes of +0 */
			memset(x, 0, (size_t)nx * sizeof *x);
			for (int64_t j = 0; j < nw; j++)
				w[j] = j % cv.kdim ? -fabsf(w[j]) - 0.5f : 1.0f;
			for (int64_t j = 0; j < co; j++)
				b[j] = j == 40 ? -0.0f : j < 32 ? 0.0f : b[j];
		}
		chain3x3(x, w, bias, nb, ci, co, h, wd, ref);
		if (last) /* the case tests what it means to */
			assert_false(signbit(ref[40 * cv.yvol]));
		hp_grp_pack(w, 1, co, cv.kdim, wt);
		for (int run = 0; run < 3; run++) {
			memset(y, 0xff, (size_t)ny * sizeof *y);
			hp_grp_set_skip(run == 2 ? -1 : 0);
			assert_int_equal(hp_conv_forward_packed(&cv, x, wt, bias, y, ws, run == 1 ? pool : NULL, NULL,
								NULL), 1);
			hp_grp_set_skip(0);
			if (memcmp(y, ref, (size_t)ny * sizeof *y))
				fail_msg("3x3 case %zu%s (%s): not the float chains", i, last ? " (-0 bias)" : "",
					 run == 0 ? "1 thread" : run == 1 ? "2 threads" : "skipping off");
		}
		/* W packed per unit as the tiles go (training, out of core):
		 * the same chains; then with an Inf at a tap that reads the
		 * padding, which no tile may skip (the chain's Inf * 0 is NaN) */
		for (int run = 0; run < 4 && hp_grp_dense_unpacked(&cv); run++) {
			if (run == 2) {
				w[5 * 9] = INFINITY; /* channel 0, input channel 5, tap (0, 0) */
				chain3x3(x, w, bias, nb, ci, co, h, wd, ref);
				assert_true(isnan(ref[0]));
			}
			memset(y, 0xff, (size_t)ny * sizeof *y);
			hp_conv_forward(&cv, x, w, bias, y, ws, run % 2 ? pool : NULL);
			if (memcmp(y, ref, (size_t)ny * sizeof *y))
				fail_msg("3x3 case %zu%s (W packed per unit%s, %d threads): not the float chains", i,
					 last ? " (-0 bias)" : "", run >= 2 ? ", an Inf" : "", run % 2 + 1);
		}
		free(x), free(w), free(wt), free(b), free(ref), free(y), free(ws);
	}
	hp_pool_destroy(pool);
}

/* The auto choice: KxK convolutions take the kxk path, 1x1 stride-1 ones
 * the pointwise path, depthwise ones theirs, and band copies the path
 * they are pinned to. */
static void test_kxk_choice(void **state)
{
	struct hp_conv cv = { .node = 1, .nd = 2, .batch = 1, .cin = 64, .cout = 64, .group = 1, .cin_g = 64,
			      .cout_g = 64, .path = -1 };
	struct hp_colgeom *g = &cv.g;

	(void)state;
	if (!hp_kxk_available())
		skip();
	hp_conv_set_kxk(0);
	*g = (struct hp_colgeom){ .img = { 1, 56, 56 }, .grid = { 1, 56, 56 }, .k = { 1, 3, 3 },
				  .stride = { 1, 1, 1 }, .dil = { 1, 1, 1 }, .pad = { 0, 1, 1 } };
	hp_colgeom_finish(g);
	cv.xvol = cv.yvol = g->img_vol;
	cv.kdim = cv.cin_g * g->kvol;
	hp_conv_setup(&cv);
	assert_int_equal(hp_conv_path(&cv), HP_CONV_PATH_KXK);
	assert_true(cv.workspace > 0);
	cv.path = HP_CONV_PATH_IM2COL;
	hp_conv_setup(&cv);
	assert_int_equal(hp_conv_path(&cv), HP_CONV_PATH_IM2COL);
	cv.path = -1;
	cv.node = 0; /* a gradient's forward keeps its paths */
	hp_conv_setup(&cv);
	assert_int_not_equal(hp_conv_path(&cv), HP_CONV_PATH_KXK);
	cv.node = 1;
	g->k[1] = g->k[2] = 1;
	g->pad[1] = g->pad[2] = 0;
	hp_colgeom_finish(g);
	cv.kdim = cv.cin_g;
	hp_conv_setup(&cv);
	assert_int_equal(hp_conv_path(&cv), HP_CONV_PATH_DIRECT);
}

/* The auto choice on 3-D nodes: one the shift path leaves (4 channels,
 * unet3d_tiny's) takes the kxk path where its AVX-512 tiles run and
 * im2col where they do not; one of 32 channels at 24^3 (the 3-D U-Net's)
 * takes the kxk path too where the AVX-512 tiles run and keeps the shift
 * path where they do not; a gradient's forward keeps its paths.  Such a node on the auto
 * choice against the reference, 1 thread bitwise 2, bands bitwise the
 * whole, fused bitwise unfused. */
static void test_kxk3_choice(void **state)
{
	static const struct cc small3 = { 3, 0, 2, 4, 4, 1, V3(6, 7, 8), V3(3, 3, 3), V3(1, 1, 1), V3(1, 1, 1),
					  V3(1, 1, 1), V3(1, 1, 1), {0}, {0}, NULL, 1, 1, 1, 0 };
	struct hp_conv cv = { .node = 1, .nd = 3, .batch = 1, .cin = 4, .cout = 4, .group = 1, .cin_g = 4,
			      .cout_g = 4, .path = -1 };
	struct hp_colgeom *g = &cv.g;
	struct hp_pool *pool;

	(void)state;
	if (!hp_kxk_available())
		skip();
	hp_conv_set_kxk(0);
	*g = (struct hp_colgeom){ .img = { 16, 16, 16 }, .grid = { 16, 16, 16 }, .k = { 3, 3, 3 },
				  .stride = { 1, 1, 1 }, .dil = { 1, 1, 1 }, .pad = { 1, 1, 1 } };
	hp_colgeom_finish(g);
	cv.xvol = cv.yvol = g->img_vol;
	cv.kdim = cv.cin_g * g->kvol;
	hp_conv_setup(&cv);
	assert_int_equal(hp_conv_path(&cv), hp_kxk_wide_ok() ? HP_CONV_PATH_KXK : HP_CONV_PATH_IM2COL);
	hp_kxk_set_wide(0);
	hp_conv_setup(&cv);
	hp_kxk_set_wide(1);
	assert_int_equal(hp_conv_path(&cv), HP_CONV_PATH_IM2COL);
	cv.node = 0;
	hp_conv_setup(&cv);
	assert_int_not_equal(hp_conv_path(&cv), HP_CONV_PATH_KXK);
	cv.node = 1;
	cv.cin = cv.cout = cv.cin_g = cv.cout_g = 32;
	*g = (struct hp_colgeom){ .img = { 24, 24, 24 }, .grid = { 24, 24, 24 }, .k = { 3, 3, 3 },
				  .stride = { 1, 1, 1 }, .dil = { 1, 1, 1 }, .pad = { 1, 1, 1 } };
	hp_colgeom_finish(g);
	cv.xvol = cv.yvol = g->img_vol;
	cv.kdim = cv.cin_g * g->kvol;
	hp_conv_setup(&cv);
	assert_int_equal(hp_conv_path(&cv), hp_kxk_wide_ok() ? HP_CONV_PATH_KXK : HP_CONV_PATH_SHIFT);
	hp_kxk_set_wide(0);
	hp_conv_setup(&cv);
	hp_kxk_set_wide(1);
	assert_int_equal(hp_conv_path(&cv), HP_CONV_PATH_SHIFT);
	assert_int_equal(hp_pool_create(2, &pool), 0);
	check(&small3, 380, NULL);
	check(&small3, 380, pool);
	band_case(&small3, 0, 19, pool);
	hp_pool_destroy(pool);
}

/* The auto choice of the grouped path: groups of 4 and of 32 channels
 * take it, groups of 64 the kxk path, depthwise ones theirs, a gradient's
 * forward and a band pinned to another path keep theirs; a stem of 3
 * input channels takes it, one of 5 does not. */
static void test_grp_choice(void **state)
{
	struct hp_conv cv = { .node = 1, .nd = 2, .batch = 1, .cin = 128, .cout = 128, .group = 32, .cin_g = 4,
			      .cout_g = 4, .path = -1 };
	struct hp_colgeom *g = &cv.g;

	(void)state;
	if (!hp_kxk_available())
		skip();
	*g = (struct hp_colgeom){ .img = { 1, 28, 28 }, .grid = { 1, 28, 28 }, .k = { 1, 3, 3 },
				  .stride = { 1, 1, 1 }, .dil = { 1, 1, 1 }, .pad = { 0, 1, 1 } };
	hp_colgeom_finish(g);
	cv.xvol = cv.yvol = g->img_vol;
	cv.kdim = cv.cin_g * g->kvol;
	hp_conv_setup(&cv);
	assert_int_equal(hp_conv_path(&cv), HP_CONV_PATH_GRP);
	assert_true(cv.workspace > 0);
	cv.group = 4, cv.cin_g = cv.cout_g = 32, cv.kdim = 32 * 9;
	hp_conv_setup(&cv);
	assert_int_equal(hp_conv_path(&cv), HP_CONV_PATH_GRP);
	cv.path = HP_CONV_PATH_IM2COL;
	hp_conv_setup(&cv);
	assert_int_equal(hp_conv_path(&cv), HP_CONV_PATH_IM2COL);
	cv.path = -1;
	cv.node = 0;
	hp_conv_setup(&cv);
	assert_int_not_equal(hp_conv_path(&cv), HP_CONV_PATH_GRP);
	cv.node = 1;
	cv.group = 2, cv.cin_g = cv.cout_g = 64, cv.kdim = 64 * 9;
	hp_conv_setup(&cv);
	assert_int_equal(hp_conv_path(&cv), HP_CONV_PATH_KXK);
	cv.group = 128, cv.cin_g = cv.cout_g = 1, cv.kdim = 9;
	hp_conv_setup(&cv);
	assert_int_equal(hp_conv_path(&cv), HP_CONV_PATH_DW);
	cv.group = 1, cv.cin = cv.cin_g = 3, cv.cout = cv.cout_g = 64, cv.kdim = 27; /* a stem */
	hp_conv_setup(&cv);
	assert_int_equal(hp_conv_path(&cv), HP_CONV_PATH_GRP);
	cv.cin = cv.cin_g = 5, cv.kdim = 45;
	hp_conv_setup(&cv);
	assert_int_not_equal(hp_conv_path(&cv), HP_CONV_PATH_GRP);
}

static void expect_error(const struct cc *t, int err, const char *needle)
{
	struct hp_tensor out;
	struct built bt;

	build(t, 3, &bt);
	assert_int_equal(run_case(t, &bt, NULL, &out), err);
	if (!strstr(hp_errmsg(), "node0") || !strstr(hp_errmsg(), needle))
		fail_msg("message '%s' lacks node0 or '%s'", hp_errmsg(), needle);
	unbuild(&bt);
}

static void test_errors(void **state)
{
	struct cc t = { 2, 0, 1, 4, 4, 1, V3(5, 5, 0), V3(3, 3, 0), V3(1, 1, 0), V3(1, 1, 0), {0}, {0}, {0}, {0}, NULL, 1, 1, 0, 0 };
	int64_t xd[4] = { 1, 3, 5, 5 };
	struct hp_tensor out;
	struct built bt;

	(void)state;
	/* input with 3 channels, weight for 4 */
	build(&t, 1, &bt);
	hp_tensor_free(&bt.x);
	bt.x = kt_tensor(HP_F32, 4, xd);
	assert_int_equal(run_case(&t, &bt, NULL, &out), HP_ESHAPE);
	assert_non_null(strstr(hp_errmsg(), "node0"));
	assert_non_null(strstr(hp_errmsg(), "channel mismatch"));
	t.transpose = 1;
	assert_int_equal(run_case(&t, &bt, NULL, &out), HP_ESHAPE);
	assert_non_null(strstr(hp_errmsg(), "channel mismatch"));
	unbuild(&bt);
	t.transpose = 0;
	t.group = 3;
	expect_error(&t, HP_ESHAPE, "group 3 does not divide");
	t.group = 1;
	t.in[0] = 2;
	t.autopad = "VALID";
	expect_error(&t, HP_ESHAPE, "output size");
	t.autopad = "SAME";
	expect_error(&t, HP_EMODEL, "auto_pad 'SAME'");
}

static void test_kernel_shape_dims(void **state)
{
	struct cc t = { 2, 0, 1, 2, 2, 1, V3(5, 5, 0), V3(3, 3, 0), V3(1, 1, 0), V3(1, 1, 0), {0}, {0}, {0}, {0}, NULL, 0, 0, 0, 0 };
	int64_t k3[3] = { 3, 3, 3 };
	struct hp_tensor out;
	struct built bt;

	(void)state;
	build(&t, 1, &bt);
	bt.attrs[bt.nattrs++] = kt_ints("kernel_shape", 3, k3);
	assert_int_equal(run_case(&t, &bt, NULL, &out), HP_ESHAPE);
	assert_non_null(strstr(hp_errmsg(), "kernel_shape has 3 dims, input has 2 spatial dims"));
	assert_non_null(strstr(hp_errmsg(), "node0"));
	unbuild(&bt);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_conv_cases),
		cmocka_unit_test(test_convt_cases),
		cmocka_unit_test(test_conv_tiled_pool),
		cmocka_unit_test(test_conv_shift),
		cmocka_unit_test(test_shift_choice),
		cmocka_unit_test(test_convt_blocked),
		cmocka_unit_test(test_determinism),
		cmocka_unit_test(test_conv_dot),
		cmocka_unit_test(test_dot_bands),
		cmocka_unit_test(test_dot_fused),
		cmocka_unit_test(test_conv_pw),
		cmocka_unit_test(test_pw_bands),
		cmocka_unit_test(test_conv_gemm),
		cmocka_unit_test(test_pw_isa),
		cmocka_unit_test(test_pw_isa_nodes),
		cmocka_unit_test(test_pwt_bits),
		cmocka_unit_test(test_conv_kxk),
		cmocka_unit_test(test_conv_grp),
		cmocka_unit_test(test_grp_choice),
		cmocka_unit_test(test_kxk_bands),
		cmocka_unit_test(test_kxk_run),
		cmocka_unit_test(test_kxk_lean),
		cmocka_unit_test(test_kxk_tall),
		cmocka_unit_test(test_convt_fma),
		cmocka_unit_test(test_steal_bits),
		cmocka_unit_test(test_pwt_packed),
		cmocka_unit_test(test_pw_strided),
		cmocka_unit_test(test_grp_dense_packed),
		cmocka_unit_test(test_grp_c8),
		cmocka_unit_test(test_grp_skip),
		cmocka_unit_test(test_kxk_choice),
		cmocka_unit_test(test_kxk3_choice),
		cmocka_unit_test(test_errors),
		cmocka_unit_test(test_kernel_shape_dims),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
