/* Backward of MaxPool and AveragePool (and their Global forms) in 1-3
 * spatial dims (domain ai.hpdlf).  Output windows are those of dY, so
 * ceil_mode needs no special case. */
/* No FP exception flags are read here: GCC may turn float selects into cmov. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("no-trapping-math")
#endif

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "hpdlf/error.h"
#include "kernels/pool_simd.h"
#include "kernels/train_util.h"

struct pgeom {
	int64_t planes;                 /* N * C */
	int64_t big[3], small[3], k[3], s[3], d[3], p[3], pe[3];
	int64_t bvol, svol;
	int include_pad;
	/* MaxPoolGrad's flat path (flat_tables): tap offsets, lane masks of a
	 * period of fper chunks of 16 outputs, or ftaps = 0 */
	int32_t foff[64];
	const uint16_t *fmask;
	int64_t ftaps, fper;
};

static int pgeom_init(struct hp_graph *g, const struct hp_node *n, struct pgeom *c, const struct hp_shape *xs,
		      const struct hp_shape *ys)
{
	const int64_t *k = NULL, *st = NULL, *pd = NULL, *dl = NULL;
	int nsp = xs->rank - 2, nk = hp_attr_ints(n, "kernel_shape", &k), ns = hp_attr_ints(n, "strides", &st);
	int np = hp_attr_ints(n, "pads", &pd), nd = hp_attr_ints(n, "dilations", &dl);

	if (nsp < 1 || nsp > 3 || ys->rank != xs->rank || ys->dims[0] != xs->dims[0] || ys->dims[1] != xs->dims[1])
		return hp_node_error(g, n, HP_ESHAPE, "pooling gradients need X and dY of equal rank 3-5 and channels");
	if (nk != nsp || (ns >= 0 && ns != nsp) || (np >= 0 && np != 2 * nsp) || (nd >= 0 && nd != nsp))
		return hp_node_error(g, n, HP_EMODEL, "kernel_shape/strides/pads/dilations do not match %d spatial dims", nsp);
	c->planes = xs->dims[0] * xs->dims[1];
	c->bvol = c->svol = 1;
	c->include_pad = (int)hp_attr_int(n, "count_include_pad", 0);
	for (int i = 0; i < 3; i++) {
		int in = i < nsp;
		c->big[i] = in ? xs->dims[2 + i] : 1;
		c->small[i] = in ? ys->dims[2 + i] : 1;
		c->k[i] = in ? k[i] : 1;
		c->s[i] = in && ns > 0 ? st[i] : 1;
		c->d[i] = in && nd > 0 ? dl[i] : 1;
		c->p[i] = in && np > 0 ? pd[i] : 0;
		c->pe[i] = in && np > 0 ? pd[nsp + i] : 0;
		if (c->k[i] < 1 || c->s[i] < 1 || c->d[i] < 1 || c->p[i] < 0)
			return hp_node_error(g, n, HP_EMODEL, "bad window in spatial dim %d", i);
		c->bvol *= c->big[i];
		c->svol *= c->small[i];
	}
	return 0;
}

static int pool_store(struct hp_graph *g, struct hp_node *n, const struct pgeom *c, const struct hp_shape *xs,
		      size_t extra)
{
	if (!(n->priv = malloc(sizeof *c + extra)))
		return hp_node_error(g, n, -ENOMEM, "out of memory");
	memcpy(n->priv, c, sizeof *c);
	tk_set_out(g, n, 0, HP_F32, xs);
	return 0;
}

/* Stride-1 windows with dY the size of X (3x3 pads 1: GoogLeNet's
 * inception branches, planes of 2x2 to 8x8) run over all planes as one
 * flat row (hp_pool_grad_flat_f32): entries of the mask table, or 0. */
static int64_t flat_entries(const struct pgeom *c)
{
	int64_t taps = c->k[0] * c->k[1] * c->k[2], g = 16, a = c->bvol;

	for (int q = 0; q < 3; q++)
		if (c->s[q] != 1 || c->small[q] != c->big[q])
			return 0;
	while (a % g) /* gcd(bvol, 16) */
		g /= 2;
	if (taps < 2 || taps > 64 || c->bvol > INT32_MAX / 2 || taps * (c->bvol / g) > (1 << 16))
		return 0;
	return taps * (c->bvol / g);
}

/* Offsets and lane masks of the taps in row-major order (the order in
 * which the first maximum is sought). */
static void flat_tables(struct pgeom *c, uint16_t *mask)
{
	int64_t t = 0, g = 16;

	while (c->bvol % g)
		g /= 2;
	c->fper = c->bvol / g;
	c->ftaps = c->k[0] * c->k[1] * c->k[2];
	c->fmask = mask;
	for (int64_t a = 0; a < c->k[0]; a++)
		for (int64_t b = 0; b < c->k[1]; b++)
			for (int64_t e = 0; e < c->k[2]; e++, t++) {
				int64_t d0 = a * c->d[0] - c->p[0], d1 = b * c->d[1] - c->p[1], d2 = e * c->d[2] - c->p[2];
				c->foff[t] = (int32_t)((d0 * c->big[1] + d1) * c->big[2] + d2);
				for (int64_t ci = 0; ci < c->fper; ci++) {
					uint16_t m = 0;
					for (int l = 0; l < 16; l++) {
						int64_t i = (ci * 16 + l) % c->bvol, i2 = i % c->big[2] + d2;
						int64_t i1 = i / c->big[2] % c->big[1] + d1, i0 = i / c->big[2] / c->big[1] + d0;
						if (i0 >= 0 && i0 < c->big[0] && i1 >= 0 && i1 < c->big[1] && i2 >= 0 && i2 < c->big[2])
							m |= (uint16_t)(1u << l);
					}
					mask[t * c->fper + ci] = m;
				}
			}
}

/* ---- MaxPoolGrad(dY, X) -> dX: dY goes to the first maximum of each window */

static int maxpool_prepare(struct hp_graph *g, struct hp_node *n)
{
	struct pgeom c;
	int64_t nflat;
	int rc;

	if ((rc = tk_need_f32(g, n, 0, 0)) < 0 || (rc = tk_need_f32(g, n, 1, 0)) < 0 ||
	    (rc = pgeom_init(g, n, &c, &tk_in(g, n, 1)->shape, &tk_in(g, n, 0)->shape)) < 0)
		return rc;
	nflat = flat_entries(&c);
	c.ftaps = 0;
	if ((rc = pool_store(g, n, &c, &tk_in(g, n, 1)->shape, sizeof(uint16_t) * (size_t)nflat)) < 0)
		return rc;
	if (nflat)
		flat_tables(n->priv, (uint16_t *)((struct pgeom *)n->priv + 1));
	return 0;
}

/* Flat index of the first maximum of the window at output o, or -1. */
static int64_t window_argmax(const struct pgeom *c, const float *x, const int64_t *o)
{
	int64_t best = -1, i[3];
	float bv = 0;

	for (int64_t a = 0; a < c->k[0]; a++)
		for (int64_t b = 0; b < c->k[1]; b++)
			for (int64_t e = 0; e < c->k[2]; e++) {
				int64_t kk[3] = { a, b, e };
				int ok = 1;
				for (int q = 0; q < 3; q++) {
					i[q] = o[q] * c->s[q] - c->p[q] + kk[q] * c->d[q];
					ok &= i[q] >= 0 && i[q] < c->big[q];
				}
				if (!ok)
					continue;
				int64_t f = (i[0] * c->big[1] + i[1]) * c->big[2] + i[2];
				if (best < 0 || x[f] > bv || (isnan(x[f]) && !isnan(bv))) {
					best = f;
					bv = x[f];
				}
			}
	return best;
}

/* Windows that tile X without overlap, padding or dilation (the usual
 * k = s = 2): each window is scanned at fixed offsets. */
static int disjoint(const struct pgeom *c)
{
	for (int q = 0; q < 3; q++)
		if (c->s[q] < c->k[q] || c->p[q] || c->pe[q] || c->d[q] != 1 ||
		    (c->small[q] - 1) * c->s[q] + c->k[q] > c->big[q])
			return 0;
	return 1;
}

/* "v beats u" for the first maximum: greater, or NaN over a number. */
#define BEATS(v, u) (((v) > (u)) | (((v) != (v)) & ((u) == (u))))

/* b if `pick` (0 or 1) else a, through the bits: on real data the winner
 * of a window is a coin toss, and a select never mispredicts. */
static inline float pick_f(int pick, float a, float b)
{
	int32_t ia, ib, r;
	float f;

	memcpy(&ia, &a, sizeof ia);
	memcpy(&ib, &b, sizeof ib);
	r = (ib & -pick) | (ia & (pick - 1));
	memcpy(&f, &r, sizeof f);
	return f;
}

/* Index (0..3) of the first maximum of a, b, c, d: pairs first, then the
 * winners, a later one winning only when it beats (which keeps "first"). */
static inline int first_max4(float a, float b, float c, float d, float *m)
{
	int i01 = BEATS(b, a), i23 = BEATS(d, c), r;
	float m01 = pick_f(i01, a, b), m23 = pick_f(i23, c, d);

	r = BEATS(m23, m01);
	*m = pick_f(r, m01, m23);
	return (r << 1) | (r ? i23 : i01);
}

/* 2x2 (k = 1,2,2) or 2x2x2 windows at f: offset of the first maximum in X. */
static inline int64_t argmax_2x2(const float *x, int64_t f, int64_t row, int64_t slab, int depth2)
{
	float m0, m1;
	int a = first_max4(x[f], x[f + 1], x[f + row], x[f + row + 1], &m0), b, r;
	int64_t o0 = (a >> 1) * row + (a & 1), o1;

	if (!depth2)
		return f + o0;
	b = first_max4(x[f + slab], x[f + slab + 1], x[f + slab + row], x[f + slab + row + 1], &m1);
	o1 = slab + (b >> 1) * row + (b & 1);
	r = BEATS(m1, m0);
	return f + o0 + (o1 - o0) * r;
}

/* One plane of the disjoint case: dX is zero but at each window's first
 * maximum (NaN wins). */
static void maxpool_plane_tiled(const struct pgeom *c, const float *x, const float *dy, float *dx)
{
	int64_t j = 0, b12 = c->big[1] * c->big[2];
	int k22 = c->k[1] == 2 && c->k[2] == 2 && c->k[0] <= 2;

	for (int64_t o0 = 0; o0 < c->small[0]; o0++)
		for (int64_t o1 = 0; o1 < c->small[1]; o1++)
			for (int64_t o2 = 0; o2 < c->small[2]; o2++, j++) {
				int64_t base = o0 * c->s[0] * b12 + o1 * c->s[1] * c->big[2] + o2 * c->s[2], best = base;
				float bv = x[base];
				if (k22) {
					dx[argmax_2x2(x, base, c->big[2], b12, c->k[0] == 2)] += dy[j];
					continue;
				}
				for (int64_t a = 0; a < c->k[0]; a++)
					for (int64_t b = 0; b < c->k[1]; b++)
						for (int64_t e = 0; e < c->k[2]; e++) {
							int64_t f = base + a * b12 + b * c->big[2] + e;
							if (BEATS(x[f], bv)) {
								best = f;
								bv = x[f];
							}
						}
				dx[best] += dy[j];
			}
}

/* One plane of windows in at most 2 spatial dims that overlap or are
 * padded (MaxPool 3x3 stride 1 or 2 with pads 1: GoogLeNet's inception
 * branches, ResNet's and ShuffleNet's stems): the window's rows clipped
 * once per output instead of window_argmax's division and three-dim bounds
 * per tap (a fifth of a GoogLeNet training step).  The same first maximum,
 * added in the same order. */
static void maxpool_plane_2d(const struct pgeom *c, const float *x, const float *dy, float *dx)
{
	int64_t hh = c->big[0], ww = c->big[1], j = 0;

	for (int64_t oh = 0; oh < c->small[0]; oh++) {
		int64_t h0 = oh * c->s[0] - c->p[0];
		for (int64_t ow = 0; ow < c->small[1]; ow++, j++) {
			int64_t w0 = ow * c->s[1] - c->p[1], best = -1;
			float bv = 0;
			for (int64_t a = 0; a < c->k[0]; a++) {
				int64_t h = h0 + a * c->d[0];
				if (h < 0 || h >= hh)
					continue;
				for (int64_t b = 0; b < c->k[1]; b++) {
					int64_t w = w0 + b * c->d[1];
					if (w < 0 || w >= ww)
						continue;
					float v = x[h * ww + w];
					if (best < 0 || BEATS(v, bv)) {
						best = h * ww + w;
						bv = v;
					}
				}
			}
			if (best >= 0)
				dx[best] += dy[j];
		}
	}
}

/* Windows in at most 2 spatial dims (the third of the 3-D scan is 1). */
static int planar(const struct pgeom *c)
{
	return c->big[2] == 1 && c->small[2] == 1 && c->k[2] == 1 && c->p[2] == 0;
}

struct maxpool_job {
	const struct pgeom *c;
	const float *dy, *x;
	float *dx;
	int tiled;
};

static void maxpool_planes(void *arg, int64_t b, int64_t e, int tid)
{
	const struct maxpool_job *m = arg;
	const struct pgeom *c = m->c;

	(void)tid;
	memset(m->dx + b * c->bvol, 0, (size_t)((e - b) * c->bvol) * sizeof(float));
	if (c->ftaps && !m->tiled &&
	    hp_pool_grad_flat_f32(m->x, m->dy, m->dx, b * c->bvol, e * c->bvol, c->foff, c->fmask, c->ftaps, c->fper))
		return;
	if (!m->tiled && planar(c)) {
		struct hp_pool_grad2d g2 = { c->big[0], c->big[1], c->small[0], c->small[1], c->k[0], c->k[1],
					     c->s[0], c->s[1], c->p[0], c->p[1], c->d[0], c->d[1] };
		if (hp_pool_grad_max2d_f32(&g2, m->x + b * c->bvol, m->dy + b * c->svol, m->dx + b * c->bvol, e - b))
			return;
	}
	for (int64_t pl = b; pl < e; pl++) {
		const float *xp = m->x + pl * c->bvol, *dyp = m->dy + pl * c->svol;
		float *dxp = m->dx + pl * c->bvol;
		if (m->tiled) {
			maxpool_plane_tiled(c, xp, dyp, dxp);
			continue;
		}
		if (planar(c)) {
			maxpool_plane_2d(c, xp, dyp, dxp);
			continue;
		}
		for (int64_t j = 0; j < c->svol; j++) {
			int64_t o[3] = { j / (c->small[1] * c->small[2]), j / c->small[2] % c->small[1], j % c->small[2] };
			int64_t f = window_argmax(c, xp, o);
			if (f >= 0)
				dxp[f] += dyp[j];
		}
	}
}

/* Planes are independent, so any split over them gives the same bits. */
/* Move trailing size-1 dims (1-2 spatial dims) to the front, so a 2-D
 * 2x2 window is the (1,2,2) case of the 3-D scan. */
static void right_align(struct pgeom *c)
{
	for (int r = 0; r < 2 && c->big[2] == 1 && c->small[2] == 1 && c->k[2] == 1; r++) {
		int64_t *v[] = { c->big, c->small, c->k, c->s, c->d, c->p, c->pe };
		for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
			int64_t t = v[i][2];
			v[i][2] = v[i][1];
			v[i][1] = v[i][0];
			v[i][0] = t;
		}
	}
}

static int maxpool_run(const struct hp_node *n, const struct hp_kargs *a)
{
	struct pgeom t = *(const struct pgeom *)n->priv, *c = &t;
	struct maxpool_job m = { c, a->in[0].data, a->in[1].data, a->out[0].data, disjoint(c) };

	if (m.tiled)
		right_align(c);

	hp_parallel_for(a->pool, c->planes, 1 + 32768 / (c->bvol + 1), maxpool_planes, &m);
	return 0;
}

const struct hp_op tk_op_maxpool_grad = {
	.domain = TK_DOMAIN, .name = "MaxPoolGrad", .min_inputs = 2, .max_inputs = 2,
	.min_outputs = 1, .max_outputs = 1, .prepare = maxpool_prepare, .run = maxpool_run,
};

/* ---- AveragePoolGrad(dY) -> dX  (attrs x_shape, kernel_shape, strides, pads,
 * count_include_pad): the divisor is torch's (window clipped to the padded
 * extent when pads count, to the input otherwise). */

static int avgpool_prepare(struct hp_graph *g, struct hp_node *n)
{
	struct hp_shape xs;
	struct pgeom c;
	int rc;

	if ((rc = tk_need_f32(g, n, 0, 0)) < 0 || (rc = tk_attr_shape(g, n, "x_shape", &xs, 1)) < 0 ||
	    (rc = pgeom_init(g, n, &c, &xs, &tk_in(g, n, 0)->shape)) < 0)
		return rc;
	for (int i = 0; i < 3; i++)
		if (c.d[i] != 1)
			return hp_node_error(g, n, HP_EUNSUPPORTED, "AveragePool with dilations is not differentiable here");
	return pool_store(g, n, &c, &xs, 0);
}

static int avgpool_run(const struct hp_node *n, const struct hp_kargs *a)
{
	const struct pgeom *c = n->priv;
	const float *dy = a->in[0].data;
	float *dx = a->out[0].data;

	memset(dx, 0, hp_tensor_bytes(&a->out[0]));
	for (int64_t j = 0; j < c->svol; j++) {
		int64_t o[3] = { j / (c->small[1] * c->small[2]), j / c->small[2] % c->small[1], j % c->small[2] };
		int64_t lo[3], hi[3], padded = 1, inside = 1;
		for (int q = 0; q < 3; q++) {
			lo[q] = o[q] * c->s[q] - c->p[q];
			hi[q] = lo[q] + c->k[q];
			if (hi[q] > c->big[q] + c->pe[q])
				hi[q] = c->big[q] + c->pe[q];
			padded *= hi[q] - lo[q];
			lo[q] = lo[q] < 0 ? 0 : lo[q];
			hi[q] = hi[q] > c->big[q] ? c->big[q] : hi[q];
			inside *= hi[q] > lo[q] ? hi[q] - lo[q] : 0;
		}
		int64_t div = c->include_pad ? padded : inside;
		if (div <= 0)
			continue;
		for (int64_t pl = 0; pl < c->planes; pl++) {
			float v = dy[pl * c->svol + j] / (float)div;
			float *dxp = dx + pl * c->bvol;
			for (int64_t i0 = lo[0]; i0 < hi[0]; i0++)
				for (int64_t i1 = lo[1]; i1 < hi[1]; i1++)
					for (int64_t i2 = lo[2]; i2 < hi[2]; i2++)
						dxp[(i0 * c->big[1] + i1) * c->big[2] + i2] += v;
		}
	}
	return 0;
}

const struct hp_op tk_op_avgpool_grad = {
	.domain = TK_DOMAIN, .name = "AveragePoolGrad", .min_inputs = 1, .max_inputs = 1,
	.min_outputs = 1, .max_outputs = 1, .prepare = avgpool_prepare, .run = avgpool_run,
};
