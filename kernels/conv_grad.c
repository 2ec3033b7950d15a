/* Backward of Conv and ConvTranspose in 1-3 spatial dims with groups,
 * strides, pads and dilations (domain ai.hpdlf), over im2col/col2im + sgemm.
 *
 * Both ops are described by one geometry: a "big" side (the Conv input, the
 * ConvTranspose output) and a "small" side (the Conv output, the
 * ConvTranspose input), linked by the window (kernel, stride, dilation,
 * pads on the big side).  ConvTranspose's dW is ConvGradFilter with the
 * operands swapped; its forward is ConvGradData.  The data gradients run
 * the forward kernels of conv.c / conv_transpose.c (threaded, bounded
 * workspace); the filter gradient tiles the same way. */
#include <cblas.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "hpdlf/error.h"
#include "kernels/conv_impl.h"
#include "kernels/train_util.h"

struct cgeom {
	int nd;                /* spatial dims of the ONNX tensors */
	int64_t n, cbig, csmall, group;
	int64_t big[3], small[3], k[3], s[3], d[3], p[3];
	int64_t kvol, bvol, svol;
};

/* Window attributes and spatial sizes in 3-D, the missing leading dims 1. */
static int cgeom_init(struct hp_graph *g, const struct hp_node *n, struct cgeom *c, const struct hp_shape *big,
		      const struct hp_shape *small, const int64_t *k)
{
	const int64_t *st = NULL, *pd = NULL, *dl = NULL;
	int nsp = big->rank - 2, ns = hp_attr_ints(n, "strides", &st), np = hp_attr_ints(n, "pads", &pd);
	int nd = hp_attr_ints(n, "dilations", &dl);

	if (nsp < 1 || nsp > 3 || small->rank != big->rank)
		return hp_node_error(g, n, HP_EUNSUPPORTED, "convolution gradients need 1 to 3 spatial dims of equal rank");
	if ((ns >= 0 && ns != nsp) || (np >= 0 && np != 2 * nsp) || (nd >= 0 && nd != nsp))
		return hp_node_error(g, n, HP_EMODEL, "strides/pads/dilations do not match %d spatial dims", nsp);
	c->nd = nsp;
	c->n = big->dims[0];
	c->cbig = big->dims[1];
	c->csmall = small->dims[1];
	c->group = hp_attr_int(n, "group", 1);
	c->kvol = c->bvol = c->svol = 1;
	for (int i = 0; i < 3; i++) {
		int j = i - (3 - nsp), in = j >= 0; /* leading unit dims, as the forward's geometry */
		c->big[i] = in ? big->dims[2 + j] : 1;
		c->small[i] = in ? small->dims[2 + j] : 1;
		c->k[i] = in ? k[j] : 1;
		c->s[i] = in && ns > 0 ? st[j] : 1;
		c->d[i] = in && nd > 0 ? dl[j] : 1;
		c->p[i] = in && np > 0 ? pd[j] : 0;
		if (c->s[i] < 1 || c->d[i] < 1 || c->k[i] < 1 || c->p[i] < 0)
			return hp_node_error(g, n, HP_EMODEL, "bad window in spatial dim %d", in ? j : i);
		if ((c->small[i] - 1) * c->s[i] + (c->k[i] - 1) * c->d[i] + 1 > c->big[i] + c->p[i] + (in && np > 0 ? pd[nsp + j] : 0))
			return hp_node_error(g, n, HP_ESHAPE, "spatial dim %d: %lld outputs do not fit %lld inputs", j,
					     (long long)c->small[i], (long long)c->big[i]);
		c->kvol *= c->k[i];
		c->bvol *= c->big[i];
		c->svol *= c->small[i];
	}
	if (c->group < 1 || c->cbig % c->group || c->csmall % c->group || small->dims[0] != c->n)
		return hp_node_error(g, n, HP_ESHAPE, "channels (%lld, %lld) or batch do not fit group %lld",
				     (long long)c->cbig, (long long)c->csmall, (long long)c->group);
	return 0;
}

/* An hp_conv over the cgeom: Conv (transpose 0) from `img` to `grid`, or
 * ConvTranspose (1) from `grid` to `img`, with cin/cout channels. */
static void conv_from(const struct cgeom *c, int transpose, int64_t cin, int64_t cout, const int64_t *img,
		      const int64_t *grid, const int64_t *pad, struct hp_conv *cv)
{
	memset(cv, 0, sizeof *cv);
	cv->nd = c->nd;
	cv->path = -1;
	cv->transpose = transpose;
	cv->batch = c->n;
	cv->cin = cin;
	cv->cout = cout;
	cv->group = c->group;
	cv->cin_g = cin / c->group;
	cv->cout_g = cout / c->group;
	for (int i = 0; i < 3; i++) {
		cv->g.img[i] = img[i];
		cv->g.grid[i] = grid[i];
		cv->g.k[i] = c->k[i];
		cv->g.stride[i] = c->s[i];
		cv->g.dil[i] = c->d[i];
		cv->g.pad[i] = pad[i];
	}
	hp_colgeom_finish(&cv->g);
	cv->xvol = transpose ? cv->g.grid_vol : cv->g.img_vol;
	cv->yvol = transpose ? cv->g.img_vol : cv->g.grid_vol;
	cv->kdim = (transpose ? cv->cout_g : cv->cin_g) * cv->g.kvol;
}

/* Data gradients: a Conv or ConvTranspose forward (no bias) over the
 * shared kernels. */
struct cg_data {
	struct cgeom c;
	int transpose;         /* run cv as ConvTranspose */
	struct hp_conv cv;
	int dw;                /* Conv's dX by conv_dw.c (cv holds the Conv's geometry) */
};

/* The depthwise geometry of a Conv (X big, Y small) when it has one. */
static int dw_geom(const struct cgeom *c, struct hp_dw *d)
{
	if (!hp_dw_eligible(c->group, c->cbig, c->csmall))
		return 0;
	memset(d, 0, sizeof *d);
	for (int i = 0; i < 3; i++) {
		d->g.img[i] = c->big[i];
		d->g.grid[i] = c->small[i];
		d->g.k[i] = c->k[i];
		d->g.stride[i] = c->s[i];
		d->g.dil[i] = c->d[i];
		d->g.pad[i] = c->p[i];
	}
	hp_colgeom_finish(&d->g);
	d->batch = c->n;
	d->cin = c->cbig;
	d->mult = c->csmall / c->cbig;
	return 1;
}

static int data_priv(struct hp_graph *g, struct hp_node *n, struct cg_data *d)
{
	if (!(n->priv = malloc(sizeof *d)))
		return hp_node_error(g, n, -ENOMEM, "out of memory");
	memcpy(n->priv, d, sizeof *d);
	n->workspace = d->cv.workspace;
	return 0;
}

/* dX of a Conv: for stride 1 a Conv of dY with W transposed and mirrored
 * over padded slabs; otherwise ConvTranspose(dY, W) (col2im). */
static void conv_data_plan(struct cg_data *d)
{
	const struct cgeom *c = &d->c;
	int64_t pad[3];
	int ok = 1;
	struct hp_dw dw;

	if ((d->dw = dw_geom(c, &dw)))
		return;
	for (int i = 0; i < 3; i++) {
		pad[i] = (c->k[i] - 1) * c->d[i] - c->p[i];
		ok &= c->s[i] == 1 && pad[i] >= 0;
	}
	if (ok) {
		conv_from(c, 0, c->csmall, c->cbig, c->small, c->big, pad, &d->cv);
		d->cv.wflip = 1;
		hp_conv_setup(&d->cv);
		if (d->cv.shift)
			return;
	}
	d->transpose = 1;
	conv_from(c, 1, c->csmall, c->cbig, c->big, c->small, c->p, &d->cv);
	hp_convt_setup(&d->cv);
}

/* ---- ConvGradData(dY, W) -> dX  (attrs x_shape, group, strides, pads, dilations) */

static int conv_data_prepare(struct hp_graph *g, struct hp_node *n)
{
	struct hp_shape xs;
	struct cg_data d = { 0 };
	const struct hp_value *dy = tk_in(g, n, 0), *w = tk_in(g, n, 1);
	int rc;

	if ((rc = tk_need_f32(g, n, 0, 0)) < 0 || (rc = tk_need_f32(g, n, 1, 0)) < 0 ||
	    (rc = tk_attr_shape(g, n, "x_shape", &xs, 1)) < 0)
		return rc;
	if (w->shape.rank != xs.rank)
		return hp_node_error(g, n, HP_ESHAPE, "W rank does not match X");
	if ((rc = cgeom_init(g, n, &d.c, &xs, &dy->shape, w->shape.dims + 2)) < 0)
		return rc;
	if (w->shape.dims[0] != d.c.csmall || w->shape.dims[1] * d.c.group != d.c.cbig)
		return hp_node_error(g, n, HP_ESHAPE, "W channels do not match X/dY and group");
	conv_data_plan(&d);
	if ((rc = data_priv(g, n, &d)) < 0)
		return rc;
	tk_set_out(g, n, 0, HP_F32, &xs);
	return 0;
}

static int data_run(const struct hp_node *n, const struct hp_kargs *a)
{
	const struct cg_data *d = n->priv;
	struct hp_dw dw;

	if (d->dw && dw_geom(&d->c, &dw))
		hp_dw_data(&dw, a->in[0].data, a->in[1].data, a->out[0].data, a->pool);
	else if (d->transpose)
		hp_convt_forward(&d->cv, a->in[0].data, a->in[1].data, NULL, a->out[0].data, a->ws, a->pool);
	else
		hp_conv_forward(&d->cv, a->in[0].data, a->in[1].data, NULL, a->out[0].data, a->ws, a->pool);
	return 0;
}

static double conv_flops(const struct hp_graph *g, const struct hp_node *n)
{
	const struct cgeom *c = n->priv; /* first member of every priv here */

	(void)g;
	return c ? 2.0 * (double)(c->n * c->csmall * c->cbig / c->group) * (double)(c->kvol * c->svol) : 0;
}

const struct hp_op tk_op_conv_grad_data = {
	.domain = TK_DOMAIN, .name = "ConvGradData", .min_inputs = 2, .max_inputs = 2,
	.min_outputs = 1, .max_outputs = 1, .prepare = conv_data_prepare, .run = data_run,
	.flops = conv_flops,
};

/* ---- ConvGradFilter(dY, X) -> dW [csmall, cbig/group, k...]  (attrs kernel_shape, ...)
 * dW_g += dY_g [mg x cols] x col^T [cols x cg*kvol] over tiles of dY's
 * positions; the column tile is a flat copy from a padded slab (stride 1)
 * or hp_im2col.  Each worker sums its tiles into its own copy of dW, and
 * the copies are added up in worker order. */

struct cg_filter {
	struct cgeom c;
	int slab;              /* stride-1 slab path (sh), else im2col tiles */
	struct hp_shift sh;
	struct hp_colgeom geo; /* img: X (big side), grid: dY (small side) */
	int64_t tc;            /* im2col: columns per tile */
	size_t fixed;          /* floats per worker besides the slab */
	size_t workspace;
	int dw;                /* depthwise: conv_dw.c */
};

struct filter_run {
	const struct cg_filter *f;
	const float *dy, *x;
	float *dw, *ws;
	size_t per_thread, dwn;
	int64_t chunk, ntile;
};

/* part[g] ([cg*kvol][mg], dW_g transposed: the sgemm shape OpenBLAS runs
 * fastest here) += col [cg*kvol x nc] x dY_g^T. */
static void filter_gemm(const struct cg_filter *f, int64_t g, const float *dy, int64_t lddy, const float *col,
			int64_t nc, float *part)
{
	int64_t mg = f->c.csmall / f->c.group, rows = f->c.cbig / f->c.group * f->c.kvol;

	cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)rows, (int)mg, (int)nc, 1.0f, col, (int)nc, dy,
		    (int)lddy, 1.0f, part + g * mg * rows, (int)mg);
}

static float *filter_part(const struct filter_run *r, int tid, float **buf)
{
	float *base = r->ws + (size_t)tid * r->per_thread;

	*buf = base + r->dwn;
	return base;
}

/* im2col tiles: items (batch, group, tile of dY's positions). */
static void filter_cols_range(void *arg, int64_t b, int64_t e, int tid)
{
	const struct filter_run *r = arg;
	const struct cg_filter *f = r->f;
	const struct cgeom *c = &f->c;
	int64_t cg = c->cbig / c->group, mg = c->csmall / c->group;
	float *col, *part = filter_part(r, tid, &col);

	for (int64_t i = b; i < e; i++) {
		int64_t bg = i / r->ntile, t = i % r->ntile, nb = bg / c->group, g = bg % c->group;
		int64_t j0 = t * f->tc, j1 = j0 + f->tc < c->svol ? j0 + f->tc : c->svol;
		hp_im2col(&f->geo, cg, r->x + (nb * c->cbig + g * cg) * c->bvol, j0, j1, col);
		filter_gemm(f, g, r->dy + (nb * c->csmall + g * mg) * c->svol + j0, c->svol, col, j1 - j0, part);
	}
}

/* Slab path: items (batch, group, dY plane), chunks as in the forward. */
static void filter_slab_range(void *arg, int64_t b, int64_t e, int tid)
{
	const struct filter_run *r = arg;
	const struct cg_filter *f = r->f;
	const struct cgeom *c = &f->c;
	const struct hp_shift *s = &f->sh;
	int64_t cg = c->cbig / c->group, mg = c->csmall / c->group, planes = s->out[0];
	float *col, *part = filter_part(r, tid, &col), *tmp = col + (size_t)(cg * c->kvol * s->tcols);
	float *slab = tmp + (size_t)(mg * s->tcols);

	while (b < e) {
		int64_t bg = b / planes, d0 = b % planes, nb = bg / c->group, g = bg % c->group, d1 = d0 + r->chunk;
		const float *dy = r->dy + (nb * c->csmall + g * mg) * c->svol;

		d1 = d1 < planes ? d1 : planes;
		d1 = d1 < d0 + e - b ? d1 : d0 + e - b;
		hp_shift_slab(s, r->x + (nb * c->cbig + g * cg) * c->bvol, d0, d1, slab);
		for (int64_t t = 0; t < hp_shift_ntiles(s, d1 - d0); t++) {
			int64_t r0, r1, start, nc;
			hp_shift_tile_rows(s, d0, d1, t, &r0, &r1);
			nc = hp_shift_tile_span(s, d0, r0, r1, &start);
			hp_shift_pack_rows(s, dy, c->svol, d0, r0, r1, tmp);
			hp_shift_flat_col(s, slab, d0, d1, r0, r1, col);
			filter_gemm(f, g, tmp, nc, col, nc, part);
		}
		b += d1 - d0;
	}
}

/* Slab-path work items: (batch, group, dY plane); a folded geometry's
 * planes are the batch items. */
static int64_t filter_items(const struct cg_filter *f)
{
	return f->c.n / f->sh.nfold * f->c.group * f->sh.out[0];
}

static void filter_plan(struct cg_filter *f)
{
	const struct cgeom *c = &f->c;
	int64_t cg = c->cbig / c->group, mg = c->csmall / c->group, rows = cg * c->kvol;
	size_t dwn = (size_t)(c->csmall * rows), cap = hp_conv_ws_max() / sizeof(float);
	int nt = hp_conv_ws_threads();

	for (int i = 0; i < 3; i++) {
		f->geo.img[i] = c->big[i];
		f->geo.grid[i] = c->small[i];
		f->geo.k[i] = c->k[i];
		f->geo.stride[i] = c->s[i];
		f->geo.dil[i] = c->d[i];
		f->geo.pad[i] = c->p[i];
	}
	hp_colgeom_finish(&f->geo);
	f->slab = hp_conv_shift_mode() >= 0 && hp_shift_init(&f->sh, &f->geo, cg, mg) == 0;
	if (f->slab) {
		/* 2-D and 1-D: the batch becomes the plane axis */
		int folded = hp_shift_fold(&f->sh, c->n, c->cbig * c->bvol, c->csmall * c->svol) == 0;
		double min_useful = folded ? HP_SHIFT_MIN_USEFUL_FOLDED : HP_SHIFT_MIN_USEFUL;
		f->slab = hp_conv_shift_mode() > 0 ||
			  (hp_shift_useful(&f->sh) >= min_useful && filter_items(f) >= 2);
		/* the flat column tile is rows tall (cg * kvol): a quarter of a
		 * tile's bytes per worker keeps tight budgets workable, and the
		 * sgemms stay K >= a plane row */
		hp_shift_retile(&f->sh, (int64_t)(HP_CONV_TILE_BYTES / 4 / ((size_t)rows * sizeof(float))));
	}
	if (f->slab) {
		int64_t items = filter_items(f), share = (items + nt - 1) / nt;
		size_t want;
		f->fixed = dwn + (size_t)((rows + mg) * f->sh.tcols);
		want = f->fixed + hp_shift_slab_floats(&f->sh, hp_shift_slab_planes(&f->sh, share));
		if ((size_t)nt * (f->fixed + hp_shift_slab_floats(&f->sh, f->sh.tplanes ? f->sh.tplanes : 1)) <= cap) {
			f->workspace = ((size_t)nt * want < cap ? (size_t)nt * want : cap) * sizeof(float);
			return;
		}
		f->slab = 0;
	}
	f->tc = (int64_t)(HP_CONV_TILE_BYTES / ((size_t)rows * sizeof(float)));
	f->tc = f->tc < HP_CONV_TILE_MIN_COLS ? HP_CONV_TILE_MIN_COLS : f->tc;
	f->tc = f->tc < c->svol ? f->tc : c->svol;
	f->fixed = dwn + (size_t)(rows * f->tc);
	f->workspace = (size_t)nt * f->fixed * sizeof(float);
}

static int conv_filter_prepare(struct hp_graph *g, struct hp_node *n)
{
	struct hp_shape ks, ws;
	struct cg_filter f = { 0 };
	const struct hp_value *dy = tk_in(g, n, 0), *x = tk_in(g, n, 1);
	int rc;

	if ((rc = tk_need_f32(g, n, 0, 0)) < 0 || (rc = tk_need_f32(g, n, 1, 0)) < 0 ||
	    (rc = tk_attr_shape(g, n, "kernel_shape", &ks, 1)) < 0)
		return rc;
	if (ks.rank != x->shape.rank - 2)
		return hp_node_error(g, n, HP_ESHAPE, "kernel_shape does not match X's spatial rank");
	if ((rc = cgeom_init(g, n, &f.c, &x->shape, &dy->shape, ks.dims)) < 0)
		return rc;
	struct hp_dw dw;
	if ((f.dw = dw_geom(&f.c, &dw)))
		f.workspace = hp_dw_filter_ws(&dw);
	else
		filter_plan(&f);
	if (!(n->priv = malloc(sizeof f)))
		return hp_node_error(g, n, -ENOMEM, "out of memory");
	memcpy(n->priv, &f, sizeof f);
	n->workspace = f.workspace;
	ws.rank = x->shape.rank;
	ws.dims[0] = f.c.csmall;
	ws.dims[1] = f.c.cbig / f.c.group;
	memcpy(ws.dims + 2, ks.dims, (size_t)ks.rank * sizeof ks.dims[0]);
	tk_set_out(g, n, 0, HP_F32, &ws);
	return 0;
}

/* dW[g*mg + m][j] = sum over workers (in order) of part[g][j][m], in
 * blocks of FILTER_TBLK x FILTER_TBLK: the transposition goes through
 * cache (element by element it strode through the whole part, and cost
 * more than the sgemms on small planes); every element is the same sum. */
#define FILTER_TBLK 32
static void filter_reduce(const struct cg_filter *f, const struct filter_run *r, int threads)
{
	int64_t mg = f->c.csmall / f->c.group, rows = f->c.cbig / f->c.group * f->c.kvol;

	for (int64_t g = 0; g < f->c.group; g++)
		for (int64_t m0 = 0; m0 < mg; m0 += FILTER_TBLK)
			for (int64_t j0 = 0; j0 < rows; j0 += FILTER_TBLK) {
				int64_t m1 = m0 + FILTER_TBLK < mg ? m0 + FILTER_TBLK : mg;
				int64_t j1 = j0 + FILTER_TBLK < rows ? j0 + FILTER_TBLK : rows;
				for (int64_t m = m0; m < m1; m++) {
					float *dw = r->dw + (g * mg + m) * rows;
					for (int64_t j = j0; j < j1; j++) {
						const float *p = r->ws + (g * rows + j) * mg + m;
						float acc = p[0];
						for (int t = 1; t < threads; t++)
							acc += p[(size_t)t * r->per_thread];
						dw[j] = acc;
					}
				}
			}
}

/* Workers that fit the workspace, and the slab chunk for them. */
static int filter_threads(const struct cg_filter *f, size_t floats, int threads, int64_t *chunk)
{
	size_t tmp = (size_t)(f->c.csmall / f->c.group * f->sh.tcols);

	for (; threads >= 1; threads--) {
		size_t per = floats / (size_t)threads;
		if (!f->slab)
			*chunk = per >= f->fixed;
		else
			*chunk = per > f->fixed - tmp ? hp_shift_chunk(&f->sh, per - (f->fixed - tmp), tmp) : 0;
		if (*chunk > 0)
			return threads;
	}
	return 0;
}

static int conv_filter_run(const struct hp_node *n, const struct hp_kargs *a)
{
	const struct cg_filter *f = n->priv;
	const struct cgeom *c = &f->c;
	struct filter_run r = { .f = f, .dy = a->in[0].data, .x = a->in[1].data, .dw = a->out[0].data, .ws = a->ws };
	int saved, threads;
	int64_t items;
	struct hp_dw dw;

	if (f->dw && dw_geom(c, &dw)) {
		hp_dw_filter(&dw, r.dy, r.x, r.dw, r.ws, a->pool);
		return 0;
	}
	threads = hp_conv_threads_enter(a->pool, &saved);
	r.dwn = (size_t)(c->csmall * c->cbig / c->group * c->kvol);
	threads = filter_threads(f, f->workspace / sizeof(float), threads, &r.chunk);
	r.per_thread = f->workspace / sizeof(float) / (size_t)threads;
	r.ntile = (c->svol + f->tc - 1) / (f->tc ? f->tc : 1);
	items = f->slab ? filter_items(f) : c->n * c->group * r.ntile;
	for (int t = 0; t < threads; t++) {
		float *col, *part = filter_part(&r, t, &col);
		memset(part, 0, r.dwn * sizeof *part);
	}
	hp_conv_parallel(a->pool, threads, items, f->slab ? filter_slab_range : filter_cols_range, &r);
	filter_reduce(f, &r, threads);
	hp_conv_threads_leave(saved);
	return 0;
}

const struct hp_op tk_op_conv_grad_filter = {
	.domain = TK_DOMAIN, .name = "ConvGradFilter", .min_inputs = 2, .max_inputs = 2,
	.min_outputs = 1, .max_outputs = 1, .prepare = conv_filter_prepare, .run = conv_filter_run,
	.flops = conv_flops,
};

/* ---- ConvTransposeGradData(dY, W) -> dX  (attrs x_shape, group, ...) ----
 * dX = Conv(dY, W) with W [C, M/group, k...] read as a Conv weight. */

static int convt_data_prepare(struct hp_graph *g, struct hp_node *n)
{
	struct hp_shape xs;
	struct cg_data d = { 0 };
	const struct hp_value *dy = tk_in(g, n, 0), *w = tk_in(g, n, 1);
	int rc;

	if ((rc = tk_need_f32(g, n, 0, 0)) < 0 || (rc = tk_need_f32(g, n, 1, 0)) < 0 ||
	    (rc = tk_attr_shape(g, n, "x_shape", &xs, 1)) < 0)
		return rc;
	if (w->shape.rank != xs.rank)
		return hp_node_error(g, n, HP_ESHAPE, "W rank does not match X");
	if ((rc = cgeom_init(g, n, &d.c, &dy->shape, &xs, w->shape.dims + 2)) < 0)
		return rc;
	if (w->shape.dims[0] != d.c.csmall || w->shape.dims[1] * d.c.group != d.c.cbig)
		return hp_node_error(g, n, HP_ESHAPE, "W channels do not match X/dY and group");
	conv_from(&d.c, 0, d.c.cbig, d.c.csmall, d.c.big, d.c.small, d.c.p, &d.cv);
	hp_conv_setup(&d.cv);
	if ((rc = data_priv(g, n, &d)) < 0)
		return rc;
	tk_set_out(g, n, 0, HP_F32, &xs);
	return 0;
}

const struct hp_op tk_op_convt_grad_data = {
	.domain = TK_DOMAIN, .name = "ConvTransposeGradData", .min_inputs = 2, .max_inputs = 2,
	.min_outputs = 1, .max_outputs = 1, .prepare = convt_data_prepare, .run = data_run,
	.flops = conv_flops,
};

/* ---- BiasGrad(dY) -> dB [C]: sum over every dim but 1 ------------------- */

static int bias_prepare(struct hp_graph *g, struct hp_node *n)
{
	const struct hp_value *dy = tk_in(g, n, 0);
	struct hp_shape s = { 1, { 0 } };
	int rc = tk_need_f32(g, n, 0, 0);

	if (rc < 0)
		return rc;
	if (dy->shape.rank < 2)
		return hp_node_error(g, n, HP_ESHAPE, "dY needs a channel dim");
	s.dims[0] = dy->shape.dims[1];
	tk_set_out(g, n, 0, HP_F32, &s);
	return 0;
}

static int bias_run(const struct hp_node *n, const struct hp_kargs *a)
{
	const struct hp_shape *s = &a->in[0].shape;
	int64_t nb = s->dims[0], ch = s->dims[1], inner = nb > 0 && ch > 0 ? hp_shape_numel(s) / (nb * ch) : 0;
	const float *dy = a->in[0].data;
	float *db = a->out[0].data;

	(void)n;
	for (int64_t c = 0; c < ch; c++) {
		double acc = 0;
		for (int64_t b = 0; b < nb; b++)
			for (int64_t i = 0; i < inner; i++)
				acc += dy[(b * ch + c) * inner + i];
		db[c] = (float)acc;
	}
	return 0;
}

const struct hp_op tk_op_bias_grad = {
	.domain = TK_DOMAIN, .name = "BiasGrad", .min_inputs = 1, .max_inputs = 1,
	.min_outputs = 1, .max_outputs = 1, .prepare = bias_prepare, .run = bias_run,
};
