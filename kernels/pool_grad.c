/* Backward of MaxPool and AveragePool (and their Global forms) in 1-3
 * spatial dims (domain ai.hpdlf).  Output windows are those of dY, so
 * ceil_mode needs no special case. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "hpdlf/error.h"
#include "kernels/train_util.h"

struct pgeom {
	int64_t planes;                 /* N * C */
	int64_t big[3], small[3], k[3], s[3], d[3], p[3], pe[3];
	int64_t bvol, svol;
	int include_pad;
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

static int pool_store(struct hp_graph *g, struct hp_node *n, const struct pgeom *c, const struct hp_shape *xs)
{
	if (!(n->priv = malloc(sizeof *c)))
		return hp_node_error(g, n, -ENOMEM, "out of memory");
	memcpy(n->priv, c, sizeof *c);
	tk_set_out(g, n, 0, HP_F32, xs);
	return 0;
}

/* ---- MaxPoolGrad(dY, X) -> dX: dY goes to the first maximum of each window */

static int maxpool_prepare(struct hp_graph *g, struct hp_node *n)
{
	struct pgeom c;
	int rc;

	if ((rc = tk_need_f32(g, n, 0, 0)) < 0 || (rc = tk_need_f32(g, n, 1, 0)) < 0 ||
	    (rc = pgeom_init(g, n, &c, &tk_in(g, n, 1)->shape, &tk_in(g, n, 0)->shape)) < 0)
		return rc;
	return pool_store(g, n, &c, &tk_in(g, n, 1)->shape);
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

/* One plane of the disjoint case: dX is zero but at each window's first maximum. */
static void maxpool_plane_tiled(const struct pgeom *c, const float *x, const float *dy, float *dx)
{
	int64_t j = 0, b12 = c->big[1] * c->big[2];

	for (int64_t o0 = 0; o0 < c->small[0]; o0++)
		for (int64_t o1 = 0; o1 < c->small[1]; o1++)
			for (int64_t o2 = 0; o2 < c->small[2]; o2++, j++) {
				int64_t base = o0 * c->s[0] * b12 + o1 * c->s[1] * c->big[2] + o2 * c->s[2], best = base;
				float bv = x[base];
				for (int64_t a = 0; a < c->k[0]; a++)
					for (int64_t b = 0; b < c->k[1]; b++)
						for (int64_t e = 0; e < c->k[2]; e++) {
							int64_t f = base + a * b12 + b * c->big[2] + e;
							if (x[f] > bv || (isnan(x[f]) && !isnan(bv))) {
								best = f;
								bv = x[f];
							}
						}
				dx[best] += dy[j];
			}
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
	for (int64_t pl = b; pl < e; pl++) {
		const float *xp = m->x + pl * c->bvol, *dyp = m->dy + pl * c->svol;
		float *dxp = m->dx + pl * c->bvol;
		if (m->tiled) {
			maxpool_plane_tiled(c, xp, dyp, dxp);
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
static int maxpool_run(const struct hp_node *n, const struct hp_kargs *a)
{
	const struct pgeom *c = n->priv;
	struct maxpool_job m = { c, a->in[0].data, a->in[1].data, a->out[0].data, disjoint(c) };

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
	return pool_store(g, n, &c, &xs);
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
