/* Depthwise convolution (kernels/conv_dw.c): Conv, ConvGradData and
 * ConvGradFilter with group == input channels against nested loops in
 * double, over 1-D, 2-D and 3-D shapes, strides, dilations, asymmetric
 * pads and channel multipliers; the path is the one Conv nodes take;
 * results bitwise equal with and without a pool, and a band of output
 * rows (its input rows with their halo, pads cut as exec/split_band.c
 * cuts them) bitwise equal to those rows of the whole; conv_dwf.c's flat
 * planes against the fmaf chains, and where they are taken. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "hpdlf/error.h"
#include "kernels/conv_impl.h"
#include "kernels/cpu.h"
#include "kernels/fused_impl.h"
#include "tests/kernels/harness.h"

struct dc {
	int nd;
	int64_t n, c, mult;
	int64_t in[3], k[3], s[3], d[3], pb[3], pe[3];
};

static const struct dc cases[] = {
	{ 1, 2, 3, 1, { 17 }, { 3 }, { 1 }, { 1 }, { 1 }, { 1 } },
	{ 1, 1, 4, 2, { 16 }, { 5 }, { 2 }, { 2 }, { 3 }, { 0 } },
	{ 2, 2, 5, 1, { 9, 11 }, { 3, 3 }, { 1, 1 }, { 1, 1 }, { 1, 1 }, { 1, 1 } },
	{ 2, 1, 6, 1, { 12, 13 }, { 3, 3 }, { 2, 2 }, { 1, 1 }, { 1, 1 }, { 1, 1 } },
	{ 2, 3, 4, 3, { 7, 10 }, { 3, 2 }, { 1, 3 }, { 2, 1 }, { 0, 2 }, { 2, 0 } },
	{ 2, 1, 8, 1, { 3, 3 }, { 3, 3 }, { 1, 1 }, { 1, 1 }, { 1, 1 }, { 1, 1 } },
	{ 2, 2, 3, 1, { 8, 40 }, { 5, 5 }, { 1, 1 }, { 1, 1 }, { 2, 2 }, { 2, 2 } },
	{ 3, 1, 3, 2, { 5, 6, 7 }, { 3, 3, 3 }, { 1, 2, 1 }, { 1, 1, 2 }, { 1, 0, 2 }, { 1, 1, 0 } },
	/* 3x3 rows in one pass (axpy9_row): dilated, stride 3, uneven pads (every
	 * input row read: test_bands' whole geometry assumes it) */
	{ 2, 2, 3, 1, { 11, 17 }, { 3, 3 }, { 1, 1 }, { 2, 2 }, { 2, 1 }, { 1, 2 } },
	{ 2, 1, 4, 2, { 10, 19 }, { 3, 3 }, { 1, 3 }, { 1, 1 }, { 0, 2 }, { 1, 0 } },
	{ 2, 1, 3, 1, { 8, 21 }, { 3, 3 }, { 2, 2 }, { 1, 2 }, { 1, 0 }, { 0, 3 } },
	/* conv_dw3.c's vector rows (3x3, stride 1 or 2, undilated): rows of
	 * less than a vector, a vector and a tail, whole vectors; odd and even
	 * widths at stride 2; pads of 0 and 2; steps of 4 rows and the rest */
	{ 2, 2, 3, 1, { 7, 7 }, { 3, 3 }, { 1, 1 }, { 1, 1 }, { 1, 1 }, { 1, 1 } },
	{ 2, 1, 4, 2, { 14, 30 }, { 3, 3 }, { 1, 1 }, { 1, 1 }, { 1, 1 }, { 1, 1 } },
	{ 2, 1, 3, 1, { 15, 23 }, { 3, 3 }, { 2, 2 }, { 1, 1 }, { 1, 1 }, { 1, 1 } },
	{ 2, 2, 2, 1, { 16, 34 }, { 3, 3 }, { 2, 2 }, { 1, 1 }, { 0, 1 }, { 1, 0 } },
	{ 2, 1, 2, 1, { 9, 5 }, { 3, 3 }, { 1, 1 }, { 1, 1 }, { 2, 0 }, { 0, 2 } },
	{ 2, 1, 16, 1, { 6, 16 }, { 3, 3 }, { 1, 1 }, { 1, 1 }, { 1, 1 }, { 1, 1 } },
};

static int64_t out_dim(const struct dc *t, int i)
{
	return (t->in[i] + t->pb[i] + t->pe[i] - (t->k[i] - 1) * t->d[i] - 1) / t->s[i] + 1;
}

static struct hp_shape shp(const struct dc *t, int64_t ch, int y)
{
	struct hp_shape s = { t->nd + 2, { t->n, ch } };

	for (int i = 0; i < t->nd; i++)
		s.dims[2 + i] = y ? out_dim(t, i) : t->in[i];
	return s;
}

/* Flat index of spatial position p (nd dims of sizes sz) or -1 if outside. */
static int64_t flat(const struct dc *t, const int64_t *p, const int64_t *sz)
{
	int64_t f = 0;

	for (int i = 0; i < t->nd; i++) {
		if (p[i] < 0 || p[i] >= sz[i])
			return -1;
		f = f * sz[i] + p[i];
	}
	return f;
}

/* Visit every (n, m, output position, tap) with its X and Y flat indices. */
typedef void (*visit_fn)(void *ctx, int64_t xi, int64_t yi, int64_t wi);

static void each(const struct dc *t, visit_fn fn, void *ctx)
{
	int64_t osz[3] = { 1, 1, 1 }, ovol = 1, kvol = 1, ivol = 1, m = t->c * t->mult;

	for (int i = 0; i < t->nd; i++)
		osz[i] = out_dim(t, i), ovol *= osz[i], kvol *= t->k[i], ivol *= t->in[i];
	for (int64_t n = 0; n < t->n; n++)
		for (int64_t o = 0; o < m; o++)
			for (int64_t y = 0; y < ovol; y++)
				for (int64_t k = 0; k < kvol; k++) {
					int64_t op[3], kp[3], ip[3], yy = y, kk = k, xi;
					for (int i = t->nd - 1; i >= 0; i--) {
						op[i] = yy % osz[i], yy /= osz[i];
						kp[i] = kk % t->k[i], kk /= t->k[i];
						ip[i] = op[i] * t->s[i] - t->pb[i] + kp[i] * t->d[i];
					}
					if ((xi = flat(t, ip, t->in)) < 0)
						continue;
					fn(ctx, (n * t->c + o / t->mult) * ivol + xi, (n * m + o) * ovol + y, o * kvol + k);
				}
}

struct refctx {
	const float *a, *b;
	double *out;
	int pass;
};

static void ref_visit(void *ctx, int64_t xi, int64_t yi, int64_t wi)
{
	struct refctx *r = ctx;

	if (r->pass == 0)      /* a = X, b = W -> Y */
		r->out[yi] += (double)r->a[xi] * r->b[wi];
	else if (r->pass == 1) /* a = dY, b = W -> dX */
		r->out[xi] += (double)r->a[yi] * r->b[wi];
	else                   /* a = dY, b = X -> dW */
		r->out[wi] += (double)r->a[yi] * r->b[xi];
}

static void compare(const struct hp_tensor *got, const double *ref, const char *what, int ci)
{
	int64_t n = hp_shape_numel(&got->shape);
	double mx = 1, err = 0;

	for (int64_t i = 0; i < n; i++)
		mx = ref[i] > mx ? ref[i] : -ref[i] > mx ? -ref[i] : mx;
	for (int64_t i = 0; i < n; i++) {
		double e = ((const float *)got->data)[i] - ref[i];
		err = e > err ? e : -e > err ? -e : err;
	}
	if (err / mx > 1e-5)
		fail_msg("case %d %s: rel err %g", ci, what, err / mx);
}

static void attrs(const struct dc *t, struct hp_attr *a, int *na, int64_t *pads, const struct hp_shape *xs, int pass)
{
	for (int i = 0; i < t->nd; i++)
		pads[i] = t->pb[i], pads[t->nd + i] = t->pe[i];
	a[(*na)++] = kt_ints("strides", t->nd, t->s);
	a[(*na)++] = kt_ints("dilations", t->nd, t->d);
	a[(*na)++] = kt_ints("pads", 2 * t->nd, pads);
	a[(*na)++] = kt_int("group", t->c);
	a[(*na)++] = kt_ints("kernel_shape", t->nd, t->k);
	if (pass == 1)
		a[(*na)++] = kt_ints("x_shape", xs->rank, xs->dims);
}

/* Run pass 0 (Conv), 1 (ConvGradData) or 2 (ConvGradFilter) of case t. */
static void run_pass(const struct dc *t, int pass, const struct hp_tensor *x, const struct hp_tensor *w,
		     const struct hp_tensor *dy, struct hp_pool *pool, struct hp_tensor *out)
{
	struct hp_shape xs = shp(t, t->c, 0);
	struct hp_attr a[8];
	struct hp_tensor in[2];
	int64_t pads[6];
	int na = 0;

	attrs(t, a, &na, pads, &xs, pass);
	in[0] = pass == 0 ? *x : *dy;
	in[1] = pass == 2 ? *x : *w;
	struct kt_case c = { .domain = pass ? "ai.hpdlf" : NULL, .nin = 2, .in = in, .nattrs = na, .attrs = a,
			     .nout = 1, .pool = pool,
			     .op = pass == 0 ? "Conv" : pass == 1 ? "ConvGradData" : "ConvGradFilter" };
	if (kt_run(&c, out) < 0)
		fail_msg("%s", hp_errmsg());
}

static void check_case(const struct dc *t, int ci, struct hp_pool *pool)
{
	struct hp_shape xs = shp(t, t->c, 0), ys = shp(t, t->c * t->mult, 1), ws = { t->nd + 2, { t->c * t->mult, 1 } };
	struct hp_tensor x, w, dy, out[3], again;

	for (int i = 0; i < t->nd; i++)
		ws.dims[2 + i] = t->k[i];
	x = kt_tensor(HP_F32, xs.rank, xs.dims);
	w = kt_tensor(HP_F32, ws.rank, ws.dims);
	dy = kt_tensor(HP_F32, ys.rank, ys.dims);
	kt_fill_random(&x, 11 + ci, -1, 1);
	kt_fill_random(&w, 21 + ci, -1, 1);
	kt_fill_random(&dy, 31 + ci, -1, 1);
	for (int p = 0; p < 3; p++) {
		const struct hp_shape *os = p == 0 ? &ys : p == 1 ? &xs : &ws;
		struct refctx r = { .a = p == 0 ? x.data : dy.data, .b = p == 2 ? x.data : w.data, .pass = p };
		r.out = calloc((size_t)hp_shape_numel(os), sizeof *r.out);
		run_pass(t, p, &x, &w, &dy, NULL, &out[p]);
		each(t, ref_visit, &r);
		compare(&out[p], r.out, p == 0 ? "Conv" : p == 1 ? "ConvGradData" : "ConvGradFilter", ci);
		free(r.out);
		run_pass(t, p, &x, &w, &dy, pool, &again); /* the pool's workers: the same bits */
		if (memcmp(again.data, out[p].data, (size_t)hp_shape_numel(os) * sizeof(float)))
			fail_msg("case %d pass %d: a pool of 2 changes the bits", ci, p);
		hp_tensor_free(&again);
		hp_tensor_free(&out[p]);
	}
	hp_tensor_free(&x);
	hp_tensor_free(&w);
	hp_tensor_free(&dy);
}

static void test_against_loops(void **state)
{
	struct hp_pool *pool;

	(void)state;
	assert_int_equal(hp_pool_create(2, &pool), 0);
	for (int i = 0; i < (int)(sizeof cases / sizeof cases[0]); i++)
		check_case(&cases[i], i, pool);
	hp_pool_destroy(pool);
}

/* Conv nodes with group == C take the depthwise path, others do not. */
static void test_path(void **state)
{
	(void)state;
	assert_true(hp_dw_eligible(8, 8, 8));
	assert_true(hp_dw_eligible(8, 8, 16));
	assert_false(hp_dw_eligible(1, 1, 16)); /* one channel, group 1: im2col as before */
	assert_false(hp_dw_eligible(4, 8, 8));  /* grouped, 2 channels a group */
	assert_false(hp_dw_eligible(8, 8, 12));
}

/* The geometry of a 2-D case as conv_dw.c takes it (leading dim 1). */
static struct hp_dw geom(const struct dc *t, int64_t r0, int64_t r1, int64_t *i0, int64_t *i1)
{
	struct hp_dw d = { .batch = t->n, .cin = t->c, .mult = t->mult };
	int64_t lo = r0 * t->s[0] - t->pb[0], hi = (r1 - 1) * t->s[0] - t->pb[0] + (t->k[0] - 1) * t->d[0] + 1;

	*i0 = lo < 0 ? 0 : lo;
	*i1 = hi > t->in[0] ? t->in[0] : hi;
	d.g.img[0] = d.g.grid[0] = d.g.k[0] = d.g.stride[0] = d.g.dil[0] = 1;
	d.g.img[1] = *i1 - *i0, d.g.img[2] = t->in[1];
	d.g.grid[1] = r1 - r0, d.g.grid[2] = out_dim(t, 1);
	for (int i = 0; i < 2; i++)
		d.g.k[1 + i] = t->k[i], d.g.stride[1 + i] = t->s[i], d.g.dil[1 + i] = t->d[i], d.g.pad[1 + i] = t->pb[i];
	d.g.pad[1] = *i0 - lo; /* the band's top pad: what remains above its first input row */
	hp_colgeom_finish(&d.g);
	return d;
}

/* Bands of output rows, computed from their input rows alone, are bitwise
 * the rows of the whole. */
static void test_bands(void **state)
{
	(void)state;
	for (int ci = 2; ci < (int)(sizeof cases / sizeof cases[0]); ci++) {
		const struct dc *t = &cases[ci];
		int64_t oh = out_dim(t, 0), ow = out_dim(t, 1), i0, i1, m = t->c * t->mult;
		if (t->nd != 2)
			continue;
		size_t nx = (size_t)(t->n * t->c * t->in[0] * t->in[1]), ny = (size_t)(t->n * m * oh * ow);
		float *x = malloc(nx * 4), *w = malloc((size_t)(m * t->k[0] * t->k[1]) * 4), *b = malloc((size_t)m * 4);
		float *y = malloc(ny * 4), *yb = malloc(ny * 4), *xb = malloc(nx * 4);
		for (size_t i = 0; i < nx; i++)
			x[i] = (float)((i * 7919) % 1000) / 500.0f - 1;
		for (int64_t i = 0; i < m * t->k[0] * t->k[1]; i++)
			w[i] = (float)((i * 104729) % 997) / 498.0f - 1;
		for (int64_t i = 0; i < m; i++)
			b[i] = 0.25f * (float)i - 1;
		struct hp_dw whole = geom(t, 0, oh, &i0, &i1);
		hp_dw_forward(&whole, x, w, b, y, NULL);
		for (int64_t r0 = 0; r0 < oh; r0++)
			for (int64_t r1 = r0 + 1; r1 <= oh; r1++) {
				struct hp_dw band = geom(t, r0, r1, &i0, &i1);
				for (int64_t p = 0; p < t->n * t->c; p++) /* the band's input rows */
					memcpy(xb + p * (i1 - i0) * t->in[1], x + (p * t->in[0] + i0) * t->in[1],
					       (size_t)((i1 - i0) * t->in[1]) * 4);
				hp_dw_forward(&band, xb, w, b, yb, NULL);
				for (int64_t p = 0; p < t->n * m; p++)
					if (memcmp(yb + p * (r1 - r0) * ow, y + (p * oh + r0) * ow, (size_t)((r1 - r0) * ow) * 4))
						fail_msg("case %d: band [%lld, %lld) differs from the whole", ci, (long long)r0,
							 (long long)r1);
			}
		free(x), free(w), free(b), free(y), free(yb), free(xb);
	}
}

/* ---- conv_dwc.c: eight channels per register pass ---- */

/* Channel counts not a multiple of the block (8), odd and even sizes,
 * stride 1 and 2, pads 0 to 3 on either side, multipliers 1 and 2, two
 * items: { nd, n, c, mult, in, k, s, d, pb, pe }. */
static const struct dc dwc_cases[] = {
	{ 2, 1, 13, 1, { 7, 7 }, { 3, 3 }, { 1, 1 }, { 1, 1 }, { 1, 1 }, { 1, 1 } },
	{ 2, 2, 9, 1, { 14, 14 }, { 3, 3 }, { 2, 2 }, { 1, 1 }, { 1, 1 }, { 1, 1 } },
	{ 2, 1, 20, 1, { 15, 11 }, { 3, 3 }, { 2, 2 }, { 1, 1 }, { 0, 1 }, { 1, 0 } },
	{ 2, 1, 5, 2, { 9, 13 }, { 3, 3 }, { 1, 1 }, { 1, 1 }, { 2, 3 }, { 0, 2 } },
	{ 2, 2, 8, 1, { 28, 28 }, { 3, 3 }, { 1, 1 }, { 1, 1 }, { 1, 1 }, { 1, 1 } },
	{ 2, 1, 3, 1, { 1, 1 }, { 3, 3 }, { 1, 1 }, { 1, 1 }, { 1, 1 }, { 1, 1 } },
	{ 2, 1, 17, 1, { 33, 21 }, { 3, 3 }, { 2, 2 }, { 1, 1 }, { 3, 0 }, { 2, 3 } },
	{ 2, 1, 7, 3, { 6, 40 }, { 3, 3 }, { 1, 1 }, { 1, 1 }, { 0, 0 }, { 0, 0 } },
	{ 2, 1, 24, 1, { 56, 56 }, { 3, 3 }, { 2, 2 }, { 1, 1 }, { 0, 0 }, { 1, 1 } },
	/* conv_dw3.c's rows loaded in place: the last vector whose loads end
	 * exactly at the row's end (widths 17 and 31 at pad 1, 34 at pad 0),
	 * one column more or less, wide pads */
	{ 2, 1, 3, 1, { 5, 31 }, { 3, 3 }, { 2, 2 }, { 1, 1 }, { 1, 1 }, { 1, 1 } },
	{ 2, 1, 3, 1, { 6, 32 }, { 3, 3 }, { 2, 2 }, { 1, 1 }, { 1, 0 }, { 1, 2 } },
	{ 2, 1, 2, 1, { 5, 34 }, { 3, 3 }, { 2, 2 }, { 1, 1 }, { 0, 0 }, { 0, 3 } },
	{ 2, 1, 3, 1, { 6, 17 }, { 3, 3 }, { 1, 1 }, { 1, 1 }, { 1, 1 }, { 1, 1 } },
	{ 2, 1, 3, 1, { 5, 26 }, { 3, 3 }, { 1, 1 }, { 1, 1 }, { 0, 0 }, { 2, 3 } },
	{ 2, 1, 2, 1, { 4, 30 }, { 3, 3 }, { 1, 1 }, { 1, 1 }, { 2, 2 }, { 2, 2 } },
	/* sixteen channels, small planes whole (AVX-512): blocks of 16 and a
	 * tail, planes of one or more transposes and a partial one, a crop
	 * (an image column no output reads), multipliers */
	{ 2, 2, 37, 1, { 7, 7 }, { 3, 3 }, { 1, 1 }, { 1, 1 }, { 1, 1 }, { 1, 1 } },
	{ 2, 1, 33, 1, { 14, 14 }, { 3, 3 }, { 1, 1 }, { 1, 1 }, { 1, 1 }, { 1, 1 } },
	{ 2, 1, 20, 1, { 14, 14 }, { 3, 3 }, { 2, 2 }, { 1, 1 }, { 0, 0 }, { 1, 1 } },
	{ 2, 1, 16, 1, { 13, 14 }, { 3, 3 }, { 2, 2 }, { 1, 1 }, { 0, 0 }, { 0, 0 } },
	{ 2, 1, 9, 2, { 4, 4 }, { 3, 3 }, { 1, 1 }, { 1, 1 }, { 0, 2 }, { 2, 0 } },
	{ 2, 1, 17, 1, { 8, 9 }, { 3, 3 }, { 2, 2 }, { 1, 1 }, { 3, 1 }, { 2, 3 } },
	{ 2, 1, 20, 1, { 28, 28 }, { 3, 3 }, { 2, 2 }, { 1, 1 }, { 1, 1 }, { 1, 1 } },
};

/* y as one chain per output: bias, then fmaf over (kh, kw), taps in the
 * padding as w * 0 (the chain both kernels promise), then the epilogue
 * act(y + addend) with fused_epi.c's Clip (add NULL: none; lo > hi: no
 * activation). */
static void chain_ref(const struct dc *t, const float *x, const float *w, const float *b, const float *add, float lo,
		      float hi, float *y)
{
	int64_t oh = out_dim(t, 0), ow = out_dim(t, 1), m = t->c * t->mult;

	for (int64_t n = 0; n < t->n; n++)
		for (int64_t o = 0; o < m; o++)
			for (int64_t i = 0; i < oh * ow; i++) {
				const float *xp = x + (n * t->c + o / t->mult) * t->in[0] * t->in[1];
				int64_t yi = (n * m + o) * oh * ow + i;
				float v = b[o];
				for (int k = 0; k < 9; k++) {
					int64_t ih = i / ow * t->s[0] - t->pb[0] + k / 3, iw = i % ow * t->s[1] - t->pb[1] + k % 3;
					int in = ih >= 0 && ih < t->in[0] && iw >= 0 && iw < t->in[1];
					v = fmaf(w[o * 9 + k], in ? xp[ih * t->in[1] + iw] : 0.0f, v);
				}
				if (add)
					v = v + add[yi];
				if (lo <= hi)
					v = v < lo ? lo : v > hi ? hi : v;
				y[yi] = v;
			}
}

static float *dwc_data(size_t n, unsigned seed)
{
	float *p = malloc(n * sizeof *p);
	uint32_t s = seed * 2654435761u + 7;

	for (size_t i = 0; i < n; i++) {
		s = s * 1664525u + 1013904223u;
		p[i] = (float)(s >> 8) / (float)(1u << 23) - 1.0f;
	}
	return p;
}

#define DWC_CASES (int)(sizeof dwc_cases / sizeof dwc_cases[0])

/* W packed by hp_dwkz_pack for dwc_run's node (NULL: W as it is). */
static const float *dwc_wpack;

/* Whole node of case t with mode (1 channel blocks, -1 planes) and pool. */
static void dwc_run(const struct dc *t, int mode, struct hp_pool *pool, const float *x, const float *w,
		    const float *b, const struct hp_epi *epi, const float *add, float *y)
{
	int64_t i0, i1;
	struct hp_dw d = geom(t, 0, out_dim(t, 0), &i0, &i1);

	d.epi = epi;
	d.addend = add;
	d.wpack = dwc_wpack;
	hp_dwc_set_mode(mode);
	hp_dwf_set_mode(mode ? -1 : 0); /* forced: conv_dwc.c's blocks or the planes, not conv_dwf.c */
	hp_dws_set_mode(-1); /* conv_dws.c would take the narrow stride-2 planes: test_dws_chains' */
	hp_dw_forward(&d, x, w, b, y, pool);
	hp_dws_set_mode(0);
	hp_dwc_set_mode(0);
	hp_dwf_set_mode(0);
}

static int dwc_packed; /* cases run from W packed once */

/* Case ci with the eight-channel blocks forced (isa 1) or not. */
static void dwc_chains(int ci, int isa, struct hp_pool *pool)
{
	const struct dc *t = &dwc_cases[ci];
	int64_t m = t->c * t->mult, ny = t->n * m * out_dim(t, 0) * out_dim(t, 1);
	size_t nx = (size_t)(t->n * t->c * t->in[0] * t->in[1]);
	float *x = dwc_data(nx, 3 + ci), *w = dwc_data((size_t)m * 9, 5 + ci), *b = dwc_data((size_t)m, 7 + ci);
	float *add = dwc_data((size_t)ny, 9 + ci), *ref = malloc((size_t)ny * 4), *y = malloc((size_t)ny * 4);
	float *y2 = malloc((size_t)ny * 4);
	struct hp_epi clip = { .act = HP_EPI_CLIP, .add = HP_EPI_ADD_FULL, .lo = 0.0f, .hi = 0.5f };
	double *dref = calloc((size_t)ny, sizeof *dref);
	struct refctx rc = { .a = x, .b = w, .out = dref, .pass = 0 };

	int64_t i0, i1;
	struct hp_dw whole = geom(t, 0, out_dim(t, 0), &i0, &i1);

	assert_true(hp_dwc_eligible(&whole.g));
	hp_dwc_set_avx2(isa);
	dwc_run(t, 1, NULL, x, w, b, NULL, NULL, y);
	chain_ref(t, x, w, b, NULL, 1, 0, ref);
	if (memcmp(y, ref, (size_t)ny * 4))
		fail_msg("dwc case %d, isa %d: not the fmaf chain of every output", ci, isa);
	each(t, ref_visit, &rc);
	for (int64_t i = 0; i < ny; i++)
		if (fabs(y[i] - (dref[i] + b[i / (out_dim(t, 0) * out_dim(t, 1)) % m])) > 1e-5 * 8)
			fail_msg("dwc case %d, isa %d: %g against loops %g at %lld", ci, isa, y[i], dref[i], (long long)i);
	dwc_run(t, -1, NULL, x, w, b, NULL, NULL, y2);
	if (memcmp(y, y2, (size_t)ny * 4))
		fail_msg("dwc case %d, isa %d: channel blocks differ from the plane kernel", ci, isa);
	dwc_run(t, 1, pool, x, w, b, NULL, NULL, y2);
	if (memcmp(y, y2, (size_t)ny * 4))
		fail_msg("dwc case %d, isa %d: a pool of 2 changes the bits", ci, isa);
	dwc_run(t, 1, pool, x, w, b, &clip, add, y);
	chain_ref(t, x, w, b, add, 0.0f, 0.5f, ref);
	if (memcmp(y, ref, (size_t)ny * 4))
		fail_msg("dwc case %d, isa %d: the fused Add and Clip differ from fused_epi.c's", ci, isa);
	dwc_run(t, -1, NULL, x, w, b, &clip, add, y2);
	if (memcmp(y, y2, (size_t)ny * 4))
		fail_msg("dwc case %d, isa %d: fused channel blocks differ from the plane kernel's", ci, isa);
	if (!isa && hp_dwz_packs(&whole.g)) { /* the flat kernel from W packed once (exec/fuse_pack.c) */
		float *wp = malloc((size_t)hp_dwkz_packed_floats(m, 9) * 4);
		hp_dwkz_pack(w, m, 9, wp);
		dwc_wpack = wp;
		dwc_run(t, 0, pool, x, w, b, &clip, add, y2);
		if (memcmp(y, y2, (size_t)ny * 4))
			fail_msg("dwc case %d: W packed once differs from W gathered", ci);
		dwc_run(t, 0, NULL, x, w, b, NULL, NULL, y2);
		chain_ref(t, x, w, b, NULL, 1, 0, ref);
		if (memcmp(y2, ref, (size_t)ny * 4))
			fail_msg("dwc case %d: W packed once, not the fmaf chain of every output", ci);
		dwc_wpack = NULL;
		free(wp);
		dwc_packed++;
	}
	free(x), free(w), free(b), free(add), free(ref), free(y), free(y2), free(dref);
	hp_dwc_set_avx2(0);
}

/* Every output is the promised chain bit for bit (and so within 1e-5 of
 * double loops), with and without Clip(0, 6) after an addend; the same
 * bits as the plane kernel and on a pool of 2. */
static void test_dwc_chains(void **state)
{
	struct hp_pool *pool;

	(void)state;
	if (!hp_dot_available())
		skip();
	assert_int_equal(hp_pool_create(2, &pool), 0);
	for (int ci = 0; ci < 2 * DWC_CASES; ci++) /* sixteen channels (where AVX-512 runs), then eight */
		dwc_chains(ci % DWC_CASES, ci / DWC_CASES, pool);
	hp_pool_destroy(pool);
	assert_true(dwc_packed >= 3 || !hp_cpu_avx512_fma()); /* not a vacuous pass */
}


/* Bands of output rows by channel blocks (their input rows and halo, the
 * band's top pad) are bitwise the rows of the whole. */
static void test_dwc_bands(void **state)
{
	(void)state;
	if (!hp_dot_available())
		skip();
	for (int ci = 0; ci < (int)(sizeof dwc_cases / sizeof dwc_cases[0]); ci++) {
		const struct dc *t = &dwc_cases[ci];
		int64_t oh = out_dim(t, 0), ow = out_dim(t, 1), i0, i1, m = t->c * t->mult;
		size_t nx = (size_t)(t->n * t->c * t->in[0] * t->in[1]), ny = (size_t)(t->n * m * oh * ow);
		float *x = dwc_data(nx, 13 + ci), *w = dwc_data((size_t)m * 9, 15 + ci), *b = dwc_data((size_t)m, 17 + ci);
		float *y = malloc(ny * 4), *yb = malloc(ny * 4), *xb = malloc(nx * 4);

		dwc_run(t, 1, NULL, x, w, b, NULL, NULL, y);
		hp_dwc_set_mode(1);
		hp_dwf_set_mode(-1);
		hp_dws_set_mode(-1);
		for (int64_t r0 = 0; r0 < oh; r0 += 1 + oh / 9)
			for (int64_t r1 = r0 + 1; r1 <= oh; r1 += 1 + oh / 7) {
				struct hp_dw band = geom(t, r0, r1, &i0, &i1);
				for (int64_t p = 0; p < t->n * t->c; p++)
					memcpy(xb + p * (i1 - i0) * t->in[1], x + (p * t->in[0] + i0) * t->in[1],
					       (size_t)((i1 - i0) * t->in[1]) * 4);
				hp_dw_forward(&band, xb, w, b, yb, NULL);
				for (int64_t p = 0; p < t->n * m; p++)
					if (memcmp(yb + p * (r1 - r0) * ow, y + (p * oh + r0) * ow, (size_t)((r1 - r0) * ow) * 4))
						fail_msg("dwc case %d: band [%lld, %lld) differs from the whole", ci,
							 (long long)r0, (long long)r1);
			}
		hp_dwc_set_mode(0);
		hp_dwf_set_mode(0);
		hp_dws_set_mode(0);
		free(x), free(w), free(b), free(y), free(yb), free(xb);
	}
}

/* ---- conv_dwc.c's weight gradient ---- */

/* dW as the chain conv_dwc.c promises: per channel and tap, acc, then the
 * units (urows grid rows of an item) from the last to the first, each the
 * sum over its rows in order of the row's fmaf chain over its positions
 * from 0 (taps in the padding as dY * 0). */
static void dwf_ref(const struct dc *t, const float *dy, const float *x, const float *acc, int64_t urows, float *dw)
{
	int64_t oh = out_dim(t, 0), ow = out_dim(t, 1), m = t->c * t->mult;

	for (int64_t o = 0; o < m; o++)
		for (int k = 0; k < 9; k++) {
			float out = acc ? acc[o * 9 + k] : 0.0f;
			for (int64_t n = t->n - 1; n >= 0; n--) {
				const float *xp = x + (n * t->c + o / t->mult) * t->in[0] * t->in[1];
				const float *dyp = dy + (n * m + o) * oh * ow;
				for (int64_t q0 = (oh - 1) / urows * urows; q0 >= 0; q0 -= urows) {
					float u = 0.0f;
					for (int64_t q = q0; q < q0 + urows && q < oh; q++) {
						float a = 0.0f;
						for (int64_t j = 0; j < ow; j++) {
							int64_t ih = q * t->s[0] - t->pb[0] + k / 3, iw = j * t->s[1] - t->pb[1] + k % 3;
							int in = ih >= 0 && ih < t->in[0] && iw >= 0 && iw < t->in[1];
							a = fmaf(dyp[q * ow + j], in ? xp[ih * t->in[1] + iw] : 0.0f, a);
						}
						u = u + a;
					}
					out = out + u;
				}
			}
			dw[o * 9 + k] = out;
		}
}

/* dW's geometries: dwc_cases, then for sixteen lanes (conv_dw_grad.c)
 * blocks of 16 and a partial one, rows of three transposes, odd row
 * counts (a last row alone), a 7x7 plane transposed whole. */
static const struct dc dwf_more[] = {
	{ 2, 2, 40, 1, { 9, 37 }, { 3, 3 }, { 1, 1 }, { 1, 1 }, { 1, 1 }, { 1, 1 } },
	{ 2, 1, 9, 2, { 11, 35 }, { 3, 3 }, { 2, 2 }, { 1, 1 }, { 1, 1 }, { 1, 0 } },
	{ 2, 1, 32, 1, { 7, 7 }, { 3, 3 }, { 1, 1 }, { 1, 1 }, { 1, 1 }, { 1, 1 } },
};
#define DWF_CASES (int)(sizeof dwc_cases / sizeof dwc_cases[0] + sizeof dwf_more / sizeof dwf_more[0])

static const struct dc *dwf_case(int ci)
{
	int nc = (int)(sizeof dwc_cases / sizeof dwc_cases[0]);

	return ci < nc ? &dwc_cases[ci] : &dwf_more[ci - nc];
}

/* hp_dw_filter of geometry d (unit: positions per unit, 0 an item). */
static void dwf_run(struct hp_dw d, int64_t unit, const float *dy, const float *x, const float *acc, float *dw,
		    struct hp_pool *pool)
{
	float *ws = malloc(hp_dw_filter_ws(&d));

	d.unit = unit;
	hp_dwp_set_mode(-1); /* the channel lanes' chain (conv_dwp_grad.c: test_dwp_filter) */
	hp_dw_filter(&d, dy, x, acc, dw, ws, pool);
	hp_dwp_set_mode(0);
	free(ws);
}

/* Every dW element is the promised chain bit for bit (units of one row and
 * of an item, from a running sum and from 0), alone and on a pool of 2;
 * and with units of rows, two bands of rows chained (the lower band
 * starting from the upper's sums, its input rows and halo, the band's top
 * pad) are bitwise the whole. */
static void test_dwc_filter(void **state)
{
	struct hp_pool *pool;

	(void)state;
	if (!hp_dot_available())
		skip();
	assert_int_equal(hp_pool_create(2, &pool), 0);
	for (int ci = 0; ci < DWF_CASES; ci++) {
		const struct dc *t = dwf_case(ci);
		int64_t oh = out_dim(t, 0), ow = out_dim(t, 1), i0, i1, m = t->c * t->mult;
		size_t nx = (size_t)(t->n * t->c * t->in[0] * t->in[1]), ny = (size_t)(t->n * m * oh * ow);
		float *x = dwc_data(nx, 23 + ci), *dy = dwc_data(ny, 29 + ci), *acc = dwc_data((size_t)m * 9, 31 + ci);
		float *ref = malloc((size_t)m * 9 * 4), *got = malloc((size_t)m * 9 * 4), *hi = malloc((size_t)m * 9 * 4);
		float *xb = malloc(nx * 4), *dyb = malloc(ny * 4);
		struct hp_dw whole = geom(t, 0, oh, &i0, &i1);

		for (int isa = 0; isa < 2; isa++)
			for (int u = 0; u < 3; u++)
				for (int a = 0; a < 2; a++)
					for (int p = 0; p < 2; p++) {
						int64_t ur = u == 0 ? 1 : u == 1 ? oh : 3;
						hp_dwg_set_avx2(isa);
						dwf_ref(t, dy, x, a ? acc : NULL, ur, ref);
						dwf_run(whole, u == 1 ? 0 : ur * ow, dy, x, a ? acc : NULL, got, p ? pool : NULL);
						hp_dwg_set_avx2(0);
						if (memcmp(ref, got, (size_t)m * 9 * 4))
							fail_msg("dwc case %d: dW (%s, units of %lld rows, %s, %s) is not the chain",
								 ci, isa ? "eight lanes" : "sixteen lanes", (long long)ur,
								 a ? "running sum" : "from 0", p ? "pool" : "alone");
					}
		dwf_ref(t, dy, x, NULL, 1, ref);
		for (int64_t r = 1; t->n == 1 && r < oh; r += 1 + oh / 5) {
			struct hp_dw up = geom(t, r, oh, &i0, &i1), lo;
			for (int64_t pl = 0; pl < t->c; pl++)
				memcpy(xb + pl * (i1 - i0) * t->in[1], x + (pl * t->in[0] + i0) * t->in[1],
				       (size_t)((i1 - i0) * t->in[1]) * 4);
			for (int64_t pl = 0; pl < m; pl++)
				memcpy(dyb + pl * (oh - r) * ow, dy + (pl * oh + r) * ow, (size_t)((oh - r) * ow) * 4);
			dwf_run(up, ow, dyb, xb, NULL, hi, NULL);
			lo = geom(t, 0, r, &i0, &i1);
			for (int64_t pl = 0; pl < t->c; pl++)
				memcpy(xb + pl * (i1 - i0) * t->in[1], x + (pl * t->in[0] + i0) * t->in[1],
				       (size_t)((i1 - i0) * t->in[1]) * 4);
			for (int64_t pl = 0; pl < m; pl++)
				memcpy(dyb + pl * r * ow, dy + pl * oh * ow, (size_t)(r * ow) * 4);
			dwf_run(lo, ow, dyb, xb, hi, got, pool);
			if (memcmp(ref, got, (size_t)m * 9 * 4))
				fail_msg("dwc case %d: bands [%lld, %lld) after [0, %lld) differ from the whole", ci,
					 (long long)r, (long long)oh, (long long)r);
		}
		free(x), free(dy), free(acc), free(ref), free(got), free(hi), free(xb), free(dyb);
	}
	hp_pool_destroy(pool);
}

/* ---- conv_dwp_grad.c: sixteen positions of a row in the lanes ---- */

/* dW as conv_dwp_grad.c promises: per channel and tap (kh, kw), acc, then
 * the units (urows grid rows of an item) from the last to the first, each
 * sixteen lanes from 0, lane (j + a) % 16 taking position j of each row
 * (rows in order, positions in order; a = kw at stride 1, kw / 2 at 2;
 * taps in the padding as dY * 0), summed by the tree ((l0 + l8) + (l4 +
 * l12)) + ((l2 + l10) + (l6 + l14)), plus the same of the odd lanes.
 * dbl: the sums in double from 0, padding skipped; mag: of |dY X|. */
static void dwp_ref(const struct dc *t, const float *dy, const float *x, const float *acc, int64_t urows, float *dw,
		    double *dbl, double *mag)
{
	int64_t oh = out_dim(t, 0), ow = out_dim(t, 1), m = t->c * t->mult, K = t->k[0], kk = K * K, s = t->s[0];

	for (int64_t o = 0; o < m; o++)
		for (int64_t k = 0; k < kk; k++) {
			int64_t kh = k / K, kw = k % K, a = s == 1 ? kw : kw / 2;
			float out = acc ? acc[o * kk + k] : 0.0f;
			double dv = 0.0, mv = 0.0;
			for (int64_t n = t->n - 1; n >= 0; n--) {
				const float *xp = x + (n * t->c + o / t->mult) * t->in[0] * t->in[1];
				const float *dyp = dy + (n * m + o) * oh * ow;
				for (int64_t q0 = (oh - 1) / urows * urows; q0 >= 0; q0 -= urows) {
					float l[16] = { 0 }, p[8], r[4];
					for (int64_t q = q0; q < q0 + urows && q < oh; q++)
						for (int64_t j = 0; j < ow; j++) {
							int64_t ih = q * s - t->pb[0] + kh, iw = j * s - t->pb[1] + kw;
							int in = ih >= 0 && ih < t->in[0] && iw >= 0 && iw < t->in[1];
							float xv = in ? xp[ih * t->in[1] + iw] : 0.0f, g = dyp[q * ow + j];
							l[(j + a) % 16] = fmaf(g, xv, l[(j + a) % 16]);
							dv += (double)g * xv;
							mv += fabs((double)g * xv);
						}
					for (int i = 0; i < 8; i++)
						p[i] = l[i] + l[i + 8];
					for (int i = 0; i < 4; i++)
						r[i] = p[i] + p[i + 4];
					out = out + ((r[0] + r[2]) + (r[1] + r[3]));
				}
			}
			dw[o * kk + k] = out;
			dbl[o * kk + k] = dv;
			mag[o * kk + k] = mv;
		}
}

/* Rows of 48 and more (units of a row; 28 for 3x3 at stride 2, rows in
 * pairs and a last alone) or 24 and more (units of several),
 * 3x3 and 5x5 at stride 1 and 2: a row of whole vectors, a tail, 100 and
 * 113 wide, pads 0 to 3 (past the dY shifts), uneven, an image column no
 * output reads, a multiplier, two items; every input row read (geom's
 * whole takes the rows read): { nd, n, c, mult, in, k, s, d, pb, pe }. */
static const struct dc dwp_cases[] = {
	{ 2, 1, 5, 1, { 9, 56 }, { 3, 3 }, { 1, 1 }, { 1, 1 }, { 1, 1 }, { 1, 1 } },
	{ 2, 2, 3, 2, { 6, 40 }, { 3, 3 }, { 1, 1 }, { 1, 1 }, { 1, 1 }, { 1, 1 } },
	{ 2, 1, 4, 1, { 11, 113 }, { 3, 3 }, { 2, 2 }, { 1, 1 }, { 1, 1 }, { 1, 1 } },
	{ 2, 1, 2, 1, { 7, 50 }, { 3, 3 }, { 1, 1 }, { 1, 1 }, { 0, 0 }, { 2, 2 } },
	{ 2, 1, 2, 1, { 6, 64 }, { 3, 3 }, { 2, 2 }, { 1, 1 }, { 3, 3 }, { 0, 0 } },
	{ 2, 1, 2, 1, { 6, 112 }, { 3, 3 }, { 2, 2 }, { 1, 1 }, { 0, 0 }, { 1, 1 } },
	{ 2, 1, 3, 1, { 8, 100 }, { 5, 5 }, { 1, 1 }, { 1, 1 }, { 2, 2 }, { 2, 2 } },
	{ 2, 2, 3, 1, { 9, 60 }, { 5, 5 }, { 2, 2 }, { 1, 1 }, { 2, 2 }, { 2, 2 } },
	{ 2, 1, 3, 1, { 9, 101 }, { 5, 5 }, { 2, 2 }, { 1, 1 }, { 0, 0 }, { 1, 1 } },
	{ 2, 1, 17, 1, { 5, 49 }, { 5, 5 }, { 1, 1 }, { 1, 1 }, { 3, 1 }, { 1, 3 } },
};

/* Whether conv_dwp_grad.c takes t with units of ur rows (its rule). */
static int dwp_takes(const struct dc *t, int64_t ur)
{
	return out_dim(t, 1) >= (ur > 1 ? 24 : t->k[0] == 3 && t->s[0] == 2 ? 28 : 48);
}

/* hp_dw_filter of geometry d, conv_dwp_grad.c where it applies. */
static void dwp_run(struct hp_dw d, int64_t unit, const float *dy, const float *x, const float *acc, float *dw,
		    struct hp_pool *pool)
{
	float *ws = malloc(hp_dw_filter_ws(&d));

	d.unit = unit;
	hp_dw_filter(&d, dy, x, acc, dw, ws, pool);
	free(ws);
}

/* Every dW element is the promised lane chains and tree bit for bit
 * (units of one row, three rows and an item; from a running sum and from
 * 0; alone and on a pool of 2), within the sum's rounding bound of double
 * loops (each of a lane's terms, the tree's four levels, the units and
 * acc adding at most one rounding of the magnitudes); bands of rows
 * (units of a row) and of items (units of an item) chained as the band
 * pass chains them are bitwise the whole. */
static void test_dwp_filter(void **state)
{
	struct hp_pool *pool;

	(void)state;
	if (!hp_cpu_avx512_fma())
		skip();
	assert_int_equal(hp_pool_create(2, &pool), 0);
	for (int ci = 0; ci < (int)(sizeof dwp_cases / sizeof dwp_cases[0]); ci++) {
		const struct dc *t = &dwp_cases[ci];
		int64_t oh = out_dim(t, 0), ow = out_dim(t, 1), i0, i1, m = t->c * t->mult, kk = t->k[0] * t->k[0];
		size_t nx = (size_t)(t->n * t->c * t->in[0] * t->in[1]), ny = (size_t)(t->n * m * oh * ow);
		size_t nw = (size_t)(m * kk);
		float *x = dwc_data(nx, 37 + ci), *dy = dwc_data(ny, 41 + ci), *acc = dwc_data(nw, 43 + ci);
		float *ref = malloc(nw * 4), *got = malloc(nw * 4), *hi = malloc(nw * 4);
		float *xb = malloc(nx * 4), *dyb = malloc(ny * 4);
		double *dbl = malloc(nw * sizeof *dbl), *mag = malloc(nw * sizeof *mag);
		struct hp_dw whole = geom(t, 0, oh, &i0, &i1);

		for (int u = 0; u < 3; u++) {
			int64_t ur = u == 0 ? 1 : u == 1 ? oh : 3, len = (ur * ow + 15) / 16 + 4 + t->n * oh + 2;
			whole.unit = u == 1 ? 0 : ur * ow;
			assert_int_equal(hp_dwp_eligible(&whole), dwp_takes(t, ur));
			if (!dwp_takes(t, ur))
				continue;
			for (int a = 0; a < 2; a++)
				for (int p = 0; p < 2; p++) {
					dwp_ref(t, dy, x, a ? acc : NULL, ur, ref, dbl, mag);
					dwp_run(whole, whole.unit, dy, x, a ? acc : NULL, got, p ? pool : NULL);
					if (memcmp(ref, got, nw * 4))
						fail_msg("dwp case %d: dW (units of %lld rows, %s, %s) is not the lane chains", ci,
							 (long long)ur, a ? "running sum" : "from 0", p ? "pool" : "alone");
				}
			dwp_run(whole, whole.unit, dy, x, NULL, got, NULL);
			for (size_t i = 0; i < nw; i++)
				if (fabs((double)got[i] - dbl[i]) > (double)len * 0x1p-24 * mag[i])
					fail_msg("dwp case %d: dW %g against double %g (bound %g) at %zu", ci, got[i], dbl[i],
						 (double)len * 0x1p-24 * mag[i], i);
		}
		whole.unit = ow;
		dwp_ref(t, dy, x, NULL, 1, ref, dbl, mag);
		for (int64_t r = 1; t->n == 1 && dwp_takes(t, 1) && r < oh; r += 1 + oh / 5) {
			struct hp_dw up = geom(t, r, oh, &i0, &i1), lo;
			for (int64_t pl = 0; pl < t->c; pl++)
				memcpy(xb + pl * (i1 - i0) * t->in[1], x + (pl * t->in[0] + i0) * t->in[1],
				       (size_t)((i1 - i0) * t->in[1]) * 4);
			for (int64_t pl = 0; pl < m; pl++)
				memcpy(dyb + pl * (oh - r) * ow, dy + (pl * oh + r) * ow, (size_t)((oh - r) * ow) * 4);
			up.unit = ow;
			assert_true(hp_dwp_eligible(&up));
			dwp_run(up, ow, dyb, xb, NULL, hi, NULL);
			lo = geom(t, 0, r, &i0, &i1);
			for (int64_t pl = 0; pl < t->c; pl++)
				memcpy(xb + pl * (i1 - i0) * t->in[1], x + (pl * t->in[0] + i0) * t->in[1],
				       (size_t)((i1 - i0) * t->in[1]) * 4);
			for (int64_t pl = 0; pl < m; pl++)
				memcpy(dyb + pl * r * ow, dy + pl * oh * ow, (size_t)(r * ow) * 4);
			dwp_run(lo, ow, dyb, xb, hi, got, pool);
			if (memcmp(ref, got, nw * 4))
				fail_msg("dwp case %d: bands [%lld, %lld) after [0, %lld) differ from the whole", ci,
					 (long long)r, (long long)oh, (long long)r);
		}
		if (t->n >= 2 && dwp_takes(t, oh)) { /* bands of items, units of an item */
			struct hp_dw part = whole;
			int64_t xi = t->c * t->in[0] * t->in[1], yi = m * oh * ow;
			dwp_ref(t, dy, x, NULL, oh, ref, dbl, mag);
			part.batch = t->n - 1;
			dwp_run(part, 0, dy + yi, x + xi, NULL, hi, pool);
			part.batch = 1;
			dwp_run(part, 0, dy, x, hi, got, NULL);
			if (memcmp(ref, got, nw * 4))
				fail_msg("dwp case %d: items [1, %lld) then item 0 differ from the whole", ci,
					 (long long)t->n);
		}
		free(x), free(dy), free(acc), free(ref), free(got), free(hi), free(xb), free(dyb), free(dbl), free(mag);
	}
	hp_pool_destroy(pool);
}

/* ---- stride-1 dX as a forward of dY with W mirrored ---- */

/* dX as the chains promised: per element 0, then fmaf over the taps of
 * its dY window, outside dY as w * 0: at stride 1 the mirrored taps
 * (kh, kw) = (2, 2) .. (0, 0); at stride 2 the taps (0, 0) .. (2, 2) whose
 * dY position ((i + p - kh) / 2, (j + p - kw) / 2) is whole. */
static void dwd_ref(const struct dc *t, const float *dy, const float *w, float *dx)
{
	int64_t oh = out_dim(t, 0), ow = out_dim(t, 1), s = t->s[0];

	for (int64_t pl = 0; pl < t->n * t->c; pl++)
		for (int64_t i = 0; i < t->in[0]; i++)
			for (int64_t j = 0; j < t->in[1]; j++) {
				float v = 0.0f;
				for (int q = 0; q < 9; q++) {
					int k = s == 1 ? 8 - q : q, kh = k / 3, kw = k % 3;
					int64_t a = i + t->pb[0] - kh, b = j + t->pb[1] - kw;
					if (s == 2 && ((a & 1) || (b & 1)))
						continue;
					int64_t yi = a / s, yj = b / s;
					int in = a >= 0 && b >= 0 && yi < oh && yj < ow;
					v = fmaf(w[pl % t->c * 9 + k], in ? dy[(pl * oh + yi) * ow + yj] : 0.0f, v);
				}
				dx[(pl * t->in[0] + i) * t->in[1] + j] = v;
			}
}

/* The geometry of dX rows [r0, r1) from dY rows [y0, y1) (pads cut as the
 * band pass cuts them: the band's top pad what makes row r0 meet y0). */
static struct hp_dw dwd_geom(const struct dc *t, int64_t r0, int64_t r1, int64_t y0, int64_t y1)
{
	struct hp_dw d = { .batch = t->n, .cin = t->c, .mult = 1 };

	d.g.img[0] = d.g.grid[0] = d.g.k[0] = d.g.stride[0] = d.g.dil[0] = 1;
	d.g.img[1] = r1 - r0, d.g.img[2] = t->in[1];
	d.g.grid[1] = y1 - y0, d.g.grid[2] = out_dim(t, 1);
	for (int i = 0; i < 2; i++)
		d.g.k[1 + i] = 3, d.g.stride[1 + i] = t->s[i], d.g.dil[1 + i] = 1, d.g.pad[1 + i] = t->pb[i];
	d.g.pad[1] = t->pb[0] + r0 - t->s[0] * y0;
	hp_colgeom_finish(&d.g);
	return d;
}

static const struct dc dwd_cases[] = {
	{ 2, 1, 13, 1, { 7, 7 }, { 3, 3 }, { 1, 1 }, { 1, 1 }, { 1, 1 }, { 1, 1 } },
	{ 2, 2, 9, 1, { 14, 14 }, { 3, 3 }, { 1, 1 }, { 1, 1 }, { 1, 1 }, { 1, 1 } },
	{ 2, 1, 5, 1, { 9, 30 }, { 3, 3 }, { 1, 1 }, { 1, 1 }, { 2, 0 }, { 0, 2 } },
	{ 2, 1, 4, 1, { 12, 23 }, { 3, 3 }, { 1, 1 }, { 1, 1 }, { 0, 2 }, { 2, 1 } },
	{ 2, 1, 3, 1, { 1, 1 }, { 3, 3 }, { 1, 1 }, { 1, 1 }, { 1, 1 }, { 1, 1 } },
	{ 2, 1, 17, 1, { 40, 56 }, { 3, 3 }, { 1, 1 }, { 1, 1 }, { 1, 1 }, { 1, 1 } },
	/* stride 2 (conv_dwc.c): odd and even sizes, pads 0 to 3, tails */
	{ 2, 1, 13, 1, { 14, 14 }, { 3, 3 }, { 2, 2 }, { 1, 1 }, { 1, 1 }, { 1, 1 } },
	{ 2, 2, 9, 1, { 15, 11 }, { 3, 3 }, { 2, 2 }, { 1, 1 }, { 0, 1 }, { 1, 0 } },
	{ 2, 1, 20, 1, { 33, 21 }, { 3, 3 }, { 2, 2 }, { 1, 1 }, { 3, 0 }, { 2, 3 } },
	{ 2, 1, 5, 1, { 7, 40 }, { 3, 3 }, { 2, 2 }, { 1, 1 }, { 2, 2 }, { 0, 1 } },
	{ 2, 1, 8, 1, { 56, 56 }, { 3, 3 }, { 2, 2 }, { 1, 1 }, { 0, 0 }, { 1, 1 } },
	{ 2, 1, 3, 1, { 1, 2 }, { 3, 3 }, { 2, 2 }, { 1, 1 }, { 1, 1 }, { 1, 1 } },
	/* conv_dw3.c's stride-2 dX rows: dY rows whose last in-place load
	 * ends at their end (dY 9, 16 and 17 wide), odd pads, tails of 1 and
	 * 15, no end pad (the last dX column's tap kw = 0 past dY) */
	{ 2, 1, 3, 1, { 6, 17 }, { 3, 3 }, { 2, 2 }, { 1, 1 }, { 1, 1 }, { 1, 1 } },
	{ 2, 1, 3, 1, { 7, 33 }, { 3, 3 }, { 2, 2 }, { 1, 1 }, { 1, 1 }, { 1, 1 } },
	{ 2, 2, 2, 1, { 5, 31 }, { 3, 3 }, { 2, 2 }, { 1, 1 }, { 3, 3 }, { 2, 0 } },
	{ 2, 1, 3, 1, { 6, 34 }, { 3, 3 }, { 2, 2 }, { 1, 1 }, { 2, 0 }, { 1, 1 } },
	{ 2, 1, 3, 1, { 5, 32 }, { 3, 3 }, { 2, 2 }, { 1, 1 }, { 1, 1 }, { 1, 0 } },
	/* and its 32-column AVX-512 blocks (rows of 48 and more) */
	{ 2, 1, 3, 1, { 4, 64 }, { 3, 3 }, { 2, 2 }, { 1, 1 }, { 1, 1 }, { 1, 0 } },
	{ 2, 1, 2, 1, { 5, 81 }, { 3, 3 }, { 2, 2 }, { 1, 1 }, { 0, 2 }, { 1, 1 } },
	/* conv_dwc.c's flat sixteen-channel dX (AVX-512): blocks of 16 and a
	 * tail, rows of whole steps of 8 and tails, odd and even pads */
	{ 2, 1, 37, 1, { 14, 14 }, { 3, 3 }, { 2, 2 }, { 1, 1 }, { 1, 1 }, { 1, 1 } },
	{ 2, 2, 17, 1, { 13, 19 }, { 3, 3 }, { 2, 2 }, { 1, 1 }, { 2, 1 }, { 0, 2 } },
	{ 2, 1, 16, 1, { 8, 16 }, { 3, 3 }, { 2, 2 }, { 1, 1 }, { 0, 0 }, { 1, 1 } },
	{ 2, 1, 20, 1, { 28, 28 }, { 3, 3 }, { 2, 2 }, { 1, 1 }, { 1, 1 }, { 1, 1 } },
};

#define DWD_CASES (int)(sizeof dwd_cases / sizeof dwd_cases[0])

/* Every dX element is that chain bit for bit, alone and on a pool of 2;
 * bands of dX rows from the dY rows they need (or one more above) are
 * bitwise the rows of the whole; the band's workspace is its own. */
static void test_dw_data_flip(void **state)
{
	struct hp_pool *pool;

	(void)state;
	if (!hp_dot_available())
		skip();
	assert_int_equal(hp_pool_create(2, &pool), 0);
	hp_dws_set_mode(-1); /* the narrow stride-2 planes are test_dws_data's */
	/* cases ci >= DWD_CASES again with conv_dwc.c's eight-channel blocks
	 * (and conv_dw3.c's rows) where the CPU has AVX-512 */
	for (int ci = 0; ci < 2 * DWD_CASES; ci++) {
		const struct dc *t = &dwd_cases[ci % DWD_CASES];
		int64_t oh = out_dim(t, 0), ow = out_dim(t, 1), ih = t->in[0], iw = t->in[1];
		size_t nx = (size_t)(t->n * t->c * ih * iw), ny = (size_t)(t->n * t->c * oh * ow);
		float *dy = dwc_data(ny, 41 + ci), *w = dwc_data((size_t)t->c * 9, 43 + ci), *ws = malloc((size_t)t->c * 36);
		float *ref = malloc(nx * 4), *got = malloc(nx * 4), *dyb = malloc(ny * 4);
		struct hp_dw whole = dwd_geom(t, 0, ih, 0, oh);

		hp_dwc_set_avx2(ci >= DWD_CASES);
		hp_dwf_set_mode(ci >= DWD_CASES ? -1 : 0); /* the second pass: not conv_dwf.c either */
		assert_true(hp_dw_data_ws(&whole) > 0);
		ws = realloc(ws, hp_dw_data_ws(&whole));
		dwd_ref(t, dy, w, ref);
		for (int p = 0; p < 2; p++) {
			hp_dw_data(&whole, dy, w, got, ws, p ? pool : NULL);
			if (memcmp(ref, got, nx * 4))
				fail_msg("dwd case %d: dX is not the chain (%s)", ci, p ? "pool" : "alone");
		}
		for (int64_t r0 = 0; r0 < ih; r0 += 1 + ih / 6)
			for (int64_t r1 = r0 + 1; r1 <= ih; r1 += 1 + ih / 5)
				for (int wide = 0; wide < 2; wide++) {
					/* dY rows the band's windows reach: i + p - kh = s * oh */
					int64_t lo = r0 + t->pb[0] - 2, y0 = (lo < 0 ? 0 : (lo + t->s[0] - 1) / t->s[0]) - wide;
					int64_t y1 = (r1 - 1 + t->pb[0]) / t->s[0] + 1;
					y0 = y0 < 0 ? 0 : y0, y1 = y1 > oh ? oh : y1;
					if (y0 >= y1)
						continue;
					struct hp_dw band = dwd_geom(t, r0, r1, y0, y1);
					for (int64_t pl = 0; pl < t->n * t->c; pl++)
						memcpy(dyb + pl * (y1 - y0) * ow, dy + (pl * oh + y0) * ow,
						       (size_t)((y1 - y0) * ow) * 4);
					ws = realloc(ws, hp_dw_data_ws(&band));
					hp_dw_data(&band, dyb, w, got, ws, pool);
					for (int64_t pl = 0; pl < t->n * t->c; pl++)
						if (memcmp(got + pl * (r1 - r0) * iw, ref + (pl * ih + r0) * iw,
							   (size_t)((r1 - r0) * iw) * 4))
							fail_msg("dwd case %d: band [%lld, %lld) from dY [%lld, %lld) differs", ci,
								 (long long)r0, (long long)r1, (long long)y0, (long long)y1);
				}
		free(dy), free(w), free(ws), free(ref), free(got), free(dyb);
	}
	hp_dwc_set_avx2(0);
	hp_dwf_set_mode(0);
	hp_dws_set_mode(0);
	hp_pool_destroy(pool);
}

/* ---- conv_dws.c: stride 2, lanes along output positions ---- */

/* 3x3 and 5x5 at stride 2 on narrow planes: two output rows a vector (7
 * and fewer columns at 3x3, 6 at 5x5) and one (up to 15 and 14), odd and
 * even sizes, pads 0 to 3 on either side, multipliers, two items, a
 * single output, sixteen output rows (the most it takes). */
static const struct dc dws_cases[] = {
	{ 2, 1, 5, 1, { 14, 14 }, { 3, 3 }, { 2, 2 }, { 1, 1 }, { 1, 1 }, { 1, 1 } },
	{ 2, 2, 3, 1, { 13, 13 }, { 3, 3 }, { 2, 2 }, { 1, 1 }, { 1, 1 }, { 1, 1 } },
	{ 2, 1, 3, 2, { 28, 28 }, { 3, 3 }, { 2, 2 }, { 1, 1 }, { 1, 1 }, { 1, 1 } },
	{ 2, 1, 4, 1, { 15, 16 }, { 3, 3 }, { 2, 2 }, { 1, 1 }, { 0, 0 }, { 1, 1 } },
	{ 2, 1, 3, 1, { 9, 30 }, { 3, 3 }, { 2, 2 }, { 1, 1 }, { 2, 0 }, { 0, 2 } },
	{ 2, 1, 2, 1, { 2, 2 }, { 3, 3 }, { 2, 2 }, { 1, 1 }, { 1, 1 }, { 1, 1 } },
	{ 2, 1, 2, 1, { 32, 8 }, { 3, 3 }, { 2, 2 }, { 1, 1 }, { 1, 1 }, { 1, 1 } },
	{ 2, 2, 4, 1, { 12, 12 }, { 5, 5 }, { 2, 2 }, { 1, 1 }, { 2, 2 }, { 2, 2 } },
	{ 2, 1, 3, 1, { 24, 24 }, { 5, 5 }, { 2, 2 }, { 1, 1 }, { 2, 2 }, { 2, 2 } },
	{ 2, 1, 2, 2, { 11, 20 }, { 5, 5 }, { 2, 2 }, { 1, 1 }, { 1, 3 }, { 3, 1 } },
	{ 2, 1, 3, 1, { 7, 9 }, { 5, 5 }, { 2, 2 }, { 1, 1 }, { 2, 2 }, { 1, 2 } },
	/* 3x3 planes of fewer than four vectors (the tails of dws_plane_kh
	 * alone): 12 -> 6 (three of two rows), 6 x 24 -> 3 x 12 (three of one) */
	{ 2, 2, 5, 1, { 12, 12 }, { 3, 3 }, { 2, 2 }, { 1, 1 }, { 1, 1 }, { 1, 1 } },
	{ 2, 1, 3, 1, { 6, 24 }, { 3, 3 }, { 2, 2 }, { 1, 1 }, { 1, 1 }, { 1, 1 } },
};

/* y as one fmaf chain per output from the bias over (kh, kw), taps in the
 * padding as w * 0, X read as Clip(x) where xc (NaN-free data: the
 * kernels' compare and select), then act(y + add) as chain_ref's. */
static void dws_ref(const struct dc *t, const float *x, const float *w, const float *b, const float *xc,
		    const float *add, float lo, float hi, float *y)
{
	int64_t oh = out_dim(t, 0), ow = out_dim(t, 1), m = t->c * t->mult, kv = t->k[0] * t->k[1];

	for (int64_t n = 0; n < t->n; n++)
		for (int64_t o = 0; o < m; o++)
			for (int64_t i = 0; i < oh * ow; i++) {
				const float *xp = x + (n * t->c + o / t->mult) * t->in[0] * t->in[1];
				int64_t yi = (n * m + o) * oh * ow + i;
				float v = b[o];
				for (int64_t k = 0; k < kv; k++) {
					int64_t ih = i / ow * 2 - t->pb[0] + k / t->k[1], iw = i % ow * 2 - t->pb[1] + k % t->k[1];
					float xv = ih >= 0 && ih < t->in[0] && iw >= 0 && iw < t->in[1] ? xp[ih * t->in[1] + iw]
													   : 0.0f;
					if (xc && ih >= 0 && ih < t->in[0] && iw >= 0 && iw < t->in[1])
						xv = xv < xc[0] ? xc[0] : xv > xc[1] ? xc[1] : xv;
					v = fmaf(w[o * kv + k], xv, v);
				}
				if (add)
					v = v + add[yi];
				if (lo <= hi)
					v = v < lo ? lo : v > hi ? hi : v;
				y[yi] = v;
			}
}

/* Whole node of case t by mode (1: conv_dws.c, -1: the others). */
static void dws_run(const struct dc *t, int mode, struct hp_pool *pool, const float *x, const float *w,
		    const float *b, const struct hp_epi *epi, const float *add, const float *xc, float *y)
{
	int64_t i0, i1;
	struct hp_dw d = geom(t, 0, out_dim(t, 0), &i0, &i1);
	float *scratch = xc ? malloc(hp_dw_scratch(&d.g) * sizeof(float)) : NULL;

	d.epi = epi;
	d.addend = add;
	d.xclip = xc; /* with a thread's scratch, as fused_ir.c calls it */
	d.scratch = scratch;
	hp_dws_set_mode(mode);
	hp_dw_forward(&d, x, w, b, y, pool);
	hp_dws_set_mode(0);
	free(scratch);
}

/* Rows [r0, r1) of case t as a band (its input rows alone, its top pad)
 * against the whole node's y. */
static void dws_band(const struct dc *t, int ci, const float *x, const float *w, const float *b, const float *y,
		     int64_t r0, int64_t r1)
{
	int64_t i0, i1, ow = out_dim(t, 1), oh = out_dim(t, 0), m = t->c * t->mult;
	struct hp_dw band = geom(t, r0, r1, &i0, &i1);
	float *xb = malloc((size_t)(t->n * t->c * t->in[0] * t->in[1]) * 4), *yb = malloc((size_t)(t->n * m * oh * ow) * 4);

	assert_true(hp_dws_eligible(&band.g));
	for (int64_t p = 0; p < t->n * t->c; p++)
		memcpy(xb + p * (i1 - i0) * t->in[1], x + (p * t->in[0] + i0) * t->in[1], (size_t)((i1 - i0) * t->in[1]) * 4);
	hp_dws_set_mode(1);
	hp_dw_forward(&band, xb, w, b, yb, NULL);
	hp_dws_set_mode(0);
	for (int64_t p = 0; p < t->n * m; p++)
		if (memcmp(yb + p * (r1 - r0) * ow, y + (p * oh + r0) * ow, (size_t)((r1 - r0) * ow) * 4))
			fail_msg("dws case %d: band [%lld, %lld) differs from the whole", ci, (long long)r0, (long long)r1);
	free(xb), free(yb);
}

static void dws_case(int ci, struct hp_pool *pool)
{
	const struct dc *t = &dws_cases[ci];
	int64_t m = t->c * t->mult, kv = t->k[0] * t->k[1], oh = out_dim(t, 0), i0, i1;
	int64_t ny = t->n * m * oh * out_dim(t, 1);
	size_t nx = (size_t)(t->n * t->c * t->in[0] * t->in[1]);
	float *x = dwc_data(nx, 23 + ci), *w = dwc_data((size_t)(m * kv), 25 + ci), *b = dwc_data((size_t)m, 27 + ci);
	float *add = dwc_data((size_t)ny, 29 + ci), *ref = malloc((size_t)ny * 4), *y = malloc((size_t)ny * 4);
	float *y2 = malloc((size_t)ny * 4);
	const float xc[2] = { -0.25f, 0.5f };
	struct hp_epi clip = { .act = HP_EPI_CLIP, .add = HP_EPI_ADD_FULL, .lo = 0.0f, .hi = 0.5f };
	struct hp_dw whole = geom(t, 0, oh, &i0, &i1);

	assert_true(hp_dws_eligible(&whole.g));
	assert_int_equal(hp_dws_wanted(&whole.g), t->k[0] == 3); /* auto: 3x3 only */
	if (hp_dws_wanted(&whole.g)) /* inference packs no W for conv_dwc.c on the planes this kernel takes */
		assert_false(hp_dwz_packs(&whole.g));
	dws_run(t, 1, NULL, x, w, b, NULL, NULL, NULL, y);
	dws_ref(t, x, w, b, NULL, NULL, 1, 0, ref);
	if (memcmp(y, ref, (size_t)ny * 4))
		fail_msg("dws case %d: not the fmaf chain of every output", ci);
	dws_run(t, -1, NULL, x, w, b, NULL, NULL, NULL, y2);
	if (memcmp(y, y2, (size_t)ny * 4))
		fail_msg("dws case %d: differs from the other depthwise kernels", ci);
	dws_run(t, 1, pool, x, w, b, NULL, NULL, NULL, y2);
	if (memcmp(y, y2, (size_t)ny * 4))
		fail_msg("dws case %d: a pool of 2 changes the bits", ci);
	for (int64_t r0 = 0; r0 < oh; r0 += 1 + oh / 5)
		for (int64_t r1 = r0 + 1; r1 <= oh; r1 += 1 + oh / 4)
			dws_band(t, ci, x, w, b, y, r0, r1);
	dws_run(t, 1, pool, x, w, b, &clip, add, NULL, y);
	dws_ref(t, x, w, b, NULL, add, 0.0f, 0.5f, ref);
	if (memcmp(y, ref, (size_t)ny * 4))
		fail_msg("dws case %d: the fused Add and Clip differ from fused_epi.c's", ci);
	dws_run(t, 1, NULL, x, w, b, NULL, NULL, xc, y);
	dws_ref(t, x, w, b, xc, NULL, 1, 0, ref);
	if (memcmp(y, ref, (size_t)ny * 4))
		fail_msg("dws case %d: X read through Clip, not the chain of the clipped window", ci);
	if (t->k[0] == 3) { /* conv_dw3.c's and conv_dwc.c's clipped reads */
		dws_run(t, -1, NULL, x, w, b, NULL, NULL, xc, y2);
		if (memcmp(y, y2, (size_t)ny * 4))
			fail_msg("dws case %d: X read through Clip differs from the other kernels", ci);
	}
	free(x), free(w), free(b), free(add), free(ref), free(y), free(y2);
}

/* Every output of conv_dws.c is the promised chain bit for bit, the other
 * kernels' bits, on a pool of 2 and in bands of rows too; with a fused
 * epilogue and with X read through Clip; and it takes only the planes it
 * can (sixteen output rows, 15 or 14 columns at most). */
static void test_dws_chains(void **state)
{
	struct hp_pool *pool;
	const struct dc no[] = {
		{ 2, 1, 2, 1, { 34, 8 }, { 3, 3 }, { 2, 2 }, { 1, 1 }, { 1, 1 }, { 1, 1 } }, /* 17 rows */
		{ 2, 1, 2, 1, { 8, 32 }, { 3, 3 }, { 2, 2 }, { 1, 1 }, { 1, 1 }, { 1, 1 } }, /* 16 columns */
		{ 2, 1, 2, 1, { 8, 30 }, { 5, 5 }, { 2, 2 }, { 1, 1 }, { 2, 2 }, { 2, 2 } }, /* 15 at 5x5 */
		{ 2, 1, 2, 1, { 8, 8 }, { 3, 3 }, { 1, 1 }, { 1, 1 }, { 1, 1 }, { 1, 1 } },  /* stride 1 */
		{ 2, 1, 2, 1, { 9, 9 }, { 3, 3 }, { 2, 2 }, { 2, 2 }, { 1, 1 }, { 1, 1 } },  /* dilated */
		{ 2, 1, 2, 1, { 8, 8 }, { 7, 7 }, { 2, 2 }, { 1, 1 }, { 3, 3 }, { 3, 3 } },  /* 7x7 */
	};
	int64_t i0, i1;

	(void)state;
	if (!hp_cpu_avx512_fma())
		skip();
	for (int i = 0; i < (int)(sizeof no / sizeof no[0]); i++) {
		struct hp_dw d = geom(&no[i], 0, out_dim(&no[i], 0), &i0, &i1);
		assert_false(hp_dws_eligible(&d.g));
	}
	assert_int_equal(hp_pool_create(2, &pool), 0);
	for (int ci = 0; ci < (int)(sizeof dws_cases / sizeof dws_cases[0]); ci++)
		dws_case(ci, pool);
	hp_pool_destroy(pool);
}

/* Its stride-2 dX: two dX rows of a phase a vector (dX 14 wide and
 * less) and one (up to 30), odd sizes, pads 0 to 2 either side, sixteen
 * dY rows, a single dY element. */
static const struct dc dwsd_cases[] = {
	{ 2, 1, 5, 1, { 14, 14 }, { 3, 3 }, { 2, 2 }, { 1, 1 }, { 1, 1 }, { 1, 1 } },
	{ 2, 2, 3, 1, { 13, 13 }, { 3, 3 }, { 2, 2 }, { 1, 1 }, { 1, 1 }, { 1, 1 } },
	{ 2, 1, 3, 1, { 28, 28 }, { 3, 3 }, { 2, 2 }, { 1, 1 }, { 1, 1 }, { 1, 1 } },
	{ 2, 1, 4, 1, { 15, 16 }, { 3, 3 }, { 2, 2 }, { 1, 1 }, { 0, 0 }, { 1, 1 } },
	{ 2, 1, 3, 1, { 9, 30 }, { 3, 3 }, { 2, 2 }, { 1, 1 }, { 2, 0 }, { 0, 2 } },
	{ 2, 1, 2, 1, { 2, 2 }, { 3, 3 }, { 2, 2 }, { 1, 1 }, { 1, 1 }, { 1, 1 } },
	{ 2, 1, 2, 1, { 32, 8 }, { 3, 3 }, { 2, 2 }, { 1, 1 }, { 1, 1 }, { 1, 1 } },
	{ 2, 1, 3, 1, { 7, 9 }, { 3, 3 }, { 2, 2 }, { 1, 1 }, { 1, 2 }, { 2, 1 } },
	{ 2, 1, 3, 1, { 12, 12 }, { 3, 3 }, { 2, 2 }, { 1, 1 }, { 0, 0 }, { 1, 1 } },
};

/* conv_dws.c's dX is dwd_ref's chain bit for bit, the other kernels' bits,
 * on a pool of 2 and in bands of dX rows from the dY rows they need; it
 * is what auto takes for these planes, and not for wider ones. */
static void test_dws_data(void **state)
{
	struct hp_pool *pool;
	const struct dc wide = { 2, 1, 2, 1, { 8, 34 }, { 3, 3 }, { 2, 2 }, { 1, 1 }, { 1, 1 }, { 1, 1 } };
	const struct dc mult = { 2, 1, 2, 2, { 8, 8 }, { 3, 3 }, { 2, 2 }, { 1, 1 }, { 1, 1 }, { 1, 1 } };
	struct hp_dw d;

	(void)state;
	if (!hp_cpu_avx512_fma())
		skip();
	d = dwd_geom(&wide, 0, wide.in[0], 0, out_dim(&wide, 0));
	assert_false(hp_dws_data_eligible(&d)); /* dY 17 wide */
	d = dwd_geom(&mult, 0, mult.in[0], 0, out_dim(&mult, 0));
	d.mult = 2;
	assert_false(hp_dws_data_eligible(&d));
	assert_int_equal(hp_pool_create(2, &pool), 0);
	for (int ci = 0; ci < (int)(sizeof dwsd_cases / sizeof dwsd_cases[0]); ci++) {
		const struct dc *t = &dwsd_cases[ci];
		int64_t oh = out_dim(t, 0), ow = out_dim(t, 1), ih = t->in[0], iw = t->in[1];
		size_t nx = (size_t)(t->n * t->c * ih * iw), ny = (size_t)(t->n * t->c * oh * ow);
		float *dy = dwc_data(ny, 61 + ci), *w = dwc_data((size_t)t->c * 9, 63 + ci);
		float *ref = malloc(nx * 4), *got = malloc(nx * 4), *dyb = malloc(ny * 4), *ws;
		struct hp_dw whole = dwd_geom(t, 0, ih, 0, oh);

		assert_true(hp_dws_data_eligible(&whole));
		assert_int_equal(hp_dws_data_wanted(&whole), iw >= 14); /* auto: rows of 14 and more */
		dwd_ref(t, dy, w, ref);
		hp_dws_set_mode(-1);
		ws = malloc(hp_dw_data_ws(&whole) + 4);
		hp_dw_data(&whole, dy, w, got, ws, NULL);
		free(ws);
		if (memcmp(ref, got, nx * 4)) /* the chain the others promise, checked here too */
			fail_msg("dws dX case %d: the other kernels are not the chain", ci);
		hp_dws_set_mode(1);
		for (int p = 0; p < 2; p++) {
			memset(got, 0xff, nx * 4);
			hp_dw_data(&whole, dy, w, got, NULL, p ? pool : NULL);
			if (memcmp(ref, got, nx * 4))
				fail_msg("dws dX case %d: not the chain (%s)", ci, p ? "pool" : "alone");
		}
		for (int64_t r0 = 0; r0 < ih; r0 += 1 + ih / 6)
			for (int64_t r1 = r0 + 1; r1 <= ih; r1 += 1 + ih / 5) {
				int64_t lo = r0 + t->pb[0] - 2, y0 = lo < 0 ? 0 : (lo + 1) / 2, y1 = (r1 - 1 + t->pb[0]) / 2 + 1;
				y1 = y1 > oh ? oh : y1;
				if (y0 >= y1)
					continue;
				struct hp_dw band = dwd_geom(t, r0, r1, y0, y1);
				if (!hp_dws_data_eligible(&band))
					fail_msg("dws dX case %d: band [%lld, %lld) not taken", ci, (long long)r0, (long long)r1);
				for (int64_t pl = 0; pl < t->n * t->c; pl++)
					memcpy(dyb + pl * (y1 - y0) * ow, dy + (pl * oh + y0) * ow, (size_t)((y1 - y0) * ow) * 4);
				hp_dw_data(&band, dyb, w, got, NULL, pool);
				for (int64_t pl = 0; pl < t->n * t->c; pl++)
					if (memcmp(got + pl * (r1 - r0) * iw, ref + (pl * ih + r0) * iw, (size_t)((r1 - r0) * iw) * 4))
						fail_msg("dws dX case %d: band [%lld, %lld) differs", ci, (long long)r0, (long long)r1);
			}
		hp_dws_set_mode(0);
		free(dy), free(w), free(ref), free(got), free(dyb);
	}
	hp_pool_destroy(pool);
}

/* ---- conv_dwf.c: sixteen positions of a flattened plane a vector ---- */

/* 3x3, stride 1, output rows as wide as the input's (left + right pads 2):
 * rows of 1 to 20, left pads 0, 1 and 2, top and bottom pads 0 to 3 (rows
 * whose every tap is outside), planes of less than a vector, exactly one,
 * steps of four vectors and a tail (14x14: 13 vectors), channel counts
 * that leave 1 to 3 planes past the steps of four, multipliers, two items:
 * { nd, n, c, mult, in, k, s, d, pb, pe }. */
static const struct dc flat_cases[] = {
	{ 2, 1, 13, 1, { 7, 7 }, { 3, 3 }, { 1, 1 }, { 1, 1 }, { 1, 1 }, { 1, 1 } },
	{ 2, 2, 9, 1, { 14, 14 }, { 3, 3 }, { 1, 1 }, { 1, 1 }, { 1, 1 }, { 1, 1 } },
	{ 2, 1, 6, 1, { 4, 4 }, { 3, 3 }, { 1, 1 }, { 1, 1 }, { 1, 1 }, { 1, 1 } },
	{ 2, 1, 5, 2, { 9, 12 }, { 3, 3 }, { 1, 1 }, { 1, 1 }, { 0, 0 }, { 2, 2 } },
	{ 2, 1, 7, 1, { 11, 16 }, { 3, 3 }, { 1, 1 }, { 1, 1 }, { 2, 2 }, { 0, 0 } },
	{ 2, 2, 3, 1, { 5, 1 }, { 3, 3 }, { 1, 1 }, { 1, 1 }, { 3, 1 }, { 3, 1 } },
	{ 2, 1, 11, 1, { 3, 20 }, { 3, 3 }, { 1, 1 }, { 1, 1 }, { 1, 1 }, { 1, 1 } },
	{ 2, 1, 4, 3, { 8, 5 }, { 3, 3 }, { 1, 1 }, { 1, 1 }, { 2, 0 }, { 1, 2 } },
	{ 2, 1, 17, 1, { 6, 6 }, { 3, 3 }, { 1, 1 }, { 1, 1 }, { 0, 1 }, { 2, 1 } },
	{ 2, 1, 2, 1, { 28, 28 }, { 3, 3 }, { 1, 1 }, { 1, 1 }, { 1, 1 }, { 1, 1 } },
	{ 2, 3, 3, 2, { 7, 10 }, { 3, 3 }, { 1, 1 }, { 1, 1 }, { 1, 1 }, { 1, 1 } },
};

#define FLAT_CASES (int)(sizeof flat_cases / sizeof flat_cases[0])

/* Case t through hp_dw_forward with conv_dwf.c forced (mode 1) or kept
 * out (-1). */
static void flat_run(const struct dc *t, int mode, struct hp_pool *pool, const float *x, const float *w,
		     const float *b, const struct hp_epi *epi, const float *add, float *y)
{
	int64_t i0, i1;
	struct hp_dw d = geom(t, 0, out_dim(t, 0), &i0, &i1);

	d.epi = epi;
	d.addend = add;
	hp_dwf_set_mode(mode);
	hp_dw_forward(&d, x, w, b, y, pool);
	hp_dwf_set_mode(0);
}

/* Every output of every case the kernel takes is the fmaf chain bit for
 * bit, alone, on a pool of 2 and with the fused Add and Clip; the same
 * bits as the other kernels; bands of rows (their input rows and halo,
 * the band's top pad) are the rows of the whole. */
static void test_flat_chains(void **state)
{
	struct hp_pool *pool;
	int ran = 0;

	(void)state;
	if (!hp_dot_available())
		skip();
	assert_int_equal(hp_pool_create(2, &pool), 0);
	for (int ci = 0; ci < FLAT_CASES; ci++) {
		const struct dc *t = &flat_cases[ci];
		int64_t oh = out_dim(t, 0), ow = out_dim(t, 1), m = t->c * t->mult, i0, i1;
		size_t nx = (size_t)(t->n * t->c * t->in[0] * t->in[1]), ny = (size_t)(t->n * m * oh * ow);
		float *x = dwc_data(nx, 51 + ci), *w = dwc_data((size_t)m * 9, 53 + ci), *b = dwc_data((size_t)m, 55 + ci);
		float *add = dwc_data(ny, 57 + ci), *ref = malloc(ny * 4), *y = malloc(ny * 4), *y2 = malloc(ny * 4);
		float *xb = malloc(nx * 4);
		struct hp_epi clip = { .act = HP_EPI_CLIP, .add = HP_EPI_ADD_FULL, .lo = -0.25f, .hi = 0.5f };
		struct hp_dw whole = geom(t, 0, oh, &i0, &i1);

		if (!hp_dwf_eligible(&whole.g)) { /* without AVX-512: none */
			assert_false(hp_cpu_avx512_fma());
			goto next;
		}
		ran++;
		chain_ref(t, x, w, b, NULL, 1, 0, ref);
		flat_run(t, 1, NULL, x, w, b, NULL, NULL, y);
		if (memcmp(y, ref, ny * 4))
			fail_msg("flat case %d: not the fmaf chain of every output", ci);
		flat_run(t, 1, pool, x, w, b, NULL, NULL, y2);
		if (memcmp(y, y2, ny * 4))
			fail_msg("flat case %d: a pool of 2 changes the bits", ci);
		flat_run(t, -1, pool, x, w, b, NULL, NULL, y2);
		if (memcmp(y, y2, ny * 4))
			fail_msg("flat case %d: differs from the other kernels", ci);
		chain_ref(t, x, w, b, add, -0.25f, 0.5f, ref);
		flat_run(t, 1, pool, x, w, b, &clip, add, y2);
		if (memcmp(y2, ref, ny * 4))
			fail_msg("flat case %d: the fused Add and Clip differ from fused_epi.c's", ci);
		hp_dwf_set_mode(1);
		for (int64_t r0 = 0; r0 < oh; r0++)
			for (int64_t r1 = r0 + 1; r1 <= oh; r1 += 1 + oh / 6) {
				struct hp_dw band = geom(t, r0, r1, &i0, &i1);
				assert_true(hp_dwf_eligible(&band.g));
				for (int64_t p = 0; p < t->n * t->c; p++)
					memcpy(xb + p * (i1 - i0) * t->in[1], x + (p * t->in[0] + i0) * t->in[1],
					       (size_t)((i1 - i0) * t->in[1]) * 4);
				hp_dw_forward(&band, xb, w, b, y2, NULL);
				for (int64_t p = 0; p < t->n * m; p++)
					if (memcmp(y2 + p * (r1 - r0) * ow, y + (p * oh + r0) * ow, (size_t)((r1 - r0) * ow) * 4))
						fail_msg("flat case %d: band [%lld, %lld) differs from the whole", ci,
							 (long long)r0, (long long)r1);
			}
		hp_dwf_set_mode(0);
next:
		free(x), free(w), free(b), free(add), free(ref), free(y), free(y2), free(xb);
	}
	hp_pool_destroy(pool);
	assert_true(ran == FLAT_CASES || !hp_cpu_avx512_fma()); /* not a vacuous pass */
}

/* A 2-D 3x3 geometry, same pads, of h x w planes at stride s. */
static struct hp_dw flat_geom(int64_t h, int64_t w, int64_t s, int64_t pad)
{
	struct dc t = { 2, 1, 8, 1, { h, w }, { 3, 3 }, { s, s }, { 1, 1 }, { pad, pad }, { pad, pad } };
	int64_t i0, i1;

	return geom(&t, 0, out_dim(&t, 0), &i0, &i1);
}

static int flat_wanted(int64_t h, int64_t w, int64_t s, int64_t pad)
{
	struct hp_dw d = flat_geom(h, w, s, pad);

	return hp_dwf_wanted(&d.g);
}

static int flat_eligible(int64_t h, int64_t w, int64_t s, int64_t pad)
{
	struct hp_dw d = flat_geom(h, w, s, pad);

	return hp_dwf_eligible(&d.g);
}

/* Where the kernel is wanted (auto): MobileNetV2's 7x7 and 14x14 planes
 * and their stride-1 dX flips (hp_dw_data's forward), rows of 7 to 22;
 * not 3x3 planes, 24x24 and wider (conv_dw3.c's rows), stride 2, valid
 * pads (output rows narrower than the input's). */
static void test_flat_route(void **state)
{
	struct hp_dw d, f;

	(void)state;
	if (!hp_cpu_avx512_fma())
		skip();
	d = flat_geom(7, 7, 1, 1);
	assert_true(hp_dwf_wanted(&d.g));
	hp_dw_flip(&d, &f);
	assert_true(hp_dwf_wanted(&f.g));
	d = flat_geom(14, 14, 1, 1);
	assert_true(hp_dwf_wanted(&d.g));
	hp_dw_flip(&d, &f);
	assert_true(hp_dwf_wanted(&f.g));
	assert_true(flat_wanted(12, 16, 1, 1));
	assert_true(flat_wanted(20, 22, 1, 1));
	assert_false(flat_wanted(24, 23, 1, 1));
	assert_false(flat_wanted(24, 24, 1, 1));
	assert_false(flat_wanted(3, 3, 1, 1));
	assert_false(flat_wanted(28, 28, 1, 1));
	assert_false(flat_wanted(56, 56, 1, 1));
	assert_false(flat_eligible(14, 14, 2, 1));
	assert_false(flat_eligible(14, 14, 1, 0));
	hp_dwf_set_mode(-1);
	assert_false(flat_wanted(7, 7, 1, 1));
	hp_dwf_set_mode(1);
	assert_true(flat_wanted(56, 56, 1, 1));
	hp_dwf_set_mode(0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_against_loops),
		cmocka_unit_test(test_path),
		cmocka_unit_test(test_bands),
		cmocka_unit_test(test_dwc_chains),
		cmocka_unit_test(test_dwc_bands),
		cmocka_unit_test(test_dwc_filter),
		cmocka_unit_test(test_dwp_filter),
		cmocka_unit_test(test_dw_data_flip),
		cmocka_unit_test(test_flat_chains),
		cmocka_unit_test(test_flat_route),
		cmocka_unit_test(test_dws_chains),
		cmocka_unit_test(test_dws_data),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
