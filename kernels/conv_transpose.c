/* ConvTranspose: sgemm (W_g^T x X_g over tiles of input positions) into a
 * bounded column buffer, then hp_col2im adds the columns into Y; nodes
 * with kernel == stride two wide along the rows take convt_fma.c.
 *
 * Tiles of input positions are fixed by X's grid (conv_tile.c), so the
 * sgemms, hence the bits, do not depend on the thread count.  With kernel ==
 * stride the tiles write disjoint blocks of Y and are the work items (a
 * band of the node starting at a multiple of the tile computes the same);
 * otherwise the items are (batch, group, fixed chunk of output channels),
 * which write disjoint channels, so overlapping kernels never race and the
 * accumulation order into each output element is fixed (tile by tile,
 * kernel offset by kernel offset).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "hpdlf/error.h"
#include "kernels/blas.h"
#include "kernels/conv_impl.h"
#include "kernels/ops.h"

struct convt_run {
	const struct hp_conv *cv;
	const float *x, *w, *b;
	float *y, *ws;
	int64_t nchunk, cs, per_thread;
};

/* Output channels per work item of the overlapping case. */
#define CONVT_CHUNK_CH 16

/* Kernel == stride, no padding or dilation: the output blocks of the input
 * positions tile Y, so each column is stored once (with the bias) and the
 * rows of Y are written whole, without a bias pass or col2im sums. */
static void scatter_blocked(const struct hp_colgeom *g, int64_t ch, const float *col, int64_t j0, int64_t j1,
			    float *y, const float *bias)
{
	int64_t n = j1 - j0, W = g->grid[2], k0 = g->k[0], k1 = g->k[1], k2 = g->k[2];

	for (int64_t c = 0; c < ch; c++)
		for (int64_t kd = 0; kd < k0; kd++)
			for (int64_t kh = 0; kh < k1; kh++) {
				const float *src = col + ((c * k0 + kd) * k1 + kh) * k2 * n;
				float b = bias ? bias[c] : 0.0f;
				for (int64_t r = j0 / W; r * W < j1; r++) {
					int64_t d = r / g->grid[1], h = r % g->grid[1];
					int64_t a = j0 > r * W ? j0 - r * W : 0, e = j1 - r * W < W ? j1 - r * W : W;
					float *restrict out = y + c * g->img_vol + ((d * k0 + kd) * g->img[1] + h * k1 + kh) * g->img[2];
					for (int64_t kw = 0; kw < k2; kw++) {
						const float *restrict s = src + kw * n + r * W - j0;
						for (int64_t w = a; w < e; w++)
							out[w * k2 + kw] = s[w] + b;
					}
				}
			}
}

int hp_convt_blocked(const struct hp_colgeom *g)
{
	for (int i = 0; i < 3; i++)
		if (g->stride[i] != g->k[i] || g->pad[i] || (g->dil[i] != 1 && g->k[i] > 1) ||
		    g->img[i] != g->grid[i] * g->k[i])
			return 0;
	return 1;
}

/* Tile t of X's positions, output channels [c0, c1) of (nb, g). */
static void convt_tile(const struct convt_run *r, int64_t nb, int64_t g, int64_t c0, int64_t c1, int64_t t,
		       float *col)
{
	const struct hp_conv *cv = r->cv;
	int64_t kv = cv->g.kvol, j0, j1, nc;
	const float *x = r->x + (nb * cv->cin + g * cv->cin_g) * cv->xvol;
	const float *w = r->w + g * cv->cin_g * cv->kdim + c0 * kv;
	float *y = r->y + (nb * cv->cout + g * cv->cout_g + c0) * cv->yvol;

	hp_ctile_range(&cv->ct, cv->g.grid, t, &j0, &j1);
	nc = j1 - j0;
	hp_sgemm(CblasTrans, CblasNoTrans, (int)((c1 - c0) * kv), (int)nc, (int)cv->cin_g, 1.0f, w,
		    (int)cv->kdim, x + j0, (int)cv->xvol, 0.0f, col, (int)nc);
	if (cv->blocked)
		scatter_blocked(&cv->g, c1 - c0, col, j0, j1, y, r->b ? r->b + g * cv->cout_g + c0 : NULL);
	else
		hp_col2im(&cv->g, c1 - c0, col, j0, j1, y);
}

/* Blocked: items (batch, group, tile); else (batch, group, channel chunk)
 * with its tiles in order. */
static void convt_item(const struct convt_run *r, int64_t item, float *col)
{
	const struct hp_conv *cv = r->cv;
	int64_t per = cv->blocked ? cv->ct.per : r->nchunk, bg = item / per, nb = bg / cv->group, g = bg % cv->group;
	int64_t c0, c1;

	if (cv->blocked) {
		convt_tile(r, nb, g, 0, cv->cout_g, item % per, col);
		return;
	}
	c0 = item % per * r->cs;
	c1 = c0 + r->cs < cv->cout_g ? c0 + r->cs : cv->cout_g;
	for (int64_t c = c0; c < c1; c++) {
		float bias = r->b ? r->b[g * cv->cout_g + c] : 0.0f;
		float *row = r->y + (nb * cv->cout + g * cv->cout_g + c) * cv->yvol;
		for (int64_t j = 0; j < cv->yvol; j++)
			row[j] = bias;
	}
	for (int64_t t = 0; t < cv->ct.per; t++)
		convt_tile(r, nb, g, c0, c1, t, col);
}

static void convt_range(void *arg, int64_t b, int64_t e, int tid)
{
	const struct convt_run *r = arg;

	for (int64_t i = b; i < e; i++)
		convt_item(r, i, r->ws + tid * r->per_thread);
}

/* Rows of the column matrix per item: all output channels when blocked. */
static int64_t convt_rows(const struct hp_conv *cv)
{
	int64_t cs = cv->blocked || cv->cout_g < CONVT_CHUNK_CH ? cv->cout_g : CONVT_CHUNK_CH;

	return cs * cv->g.kvol;
}

void hp_convt_setup(struct hp_conv *cv)
{
	int64_t rows;

	cv->blocked = hp_convt_blocked(&cv->g);
	rows = convt_rows(cv);
	hp_ctile_plan(cv->g.grid, hp_conv_tile_cap(rows), &cv->ct);
	/* the expected workers' tiles */
	cv->ws_cols = cv->ct.maxcols * (cv->lean ? 1 : hp_conv_ws_threads());
	cv->workspace = (size_t)cv->ws_cols * (size_t)rows * sizeof(float);
	/* the larger of the two: the column path's workspace, which the band
	 * pass has sized its cuts by, usually is */
	if (hp_convt_fma_eligible(cv)) {
		size_t f = hp_convt_fma_workspace(cv, cv->lean ? 1 : hp_conv_ws_threads());
		cv->workspace = f > cv->workspace ? f : cv->workspace;
	}
}

int64_t hp_convt_band_align(const struct hp_conv *cv, int axis)
{
	int dim = 3 - cv->nd + axis - 2;
	int64_t a;

	if (axis == 0)
		return 1;
	if (!cv->blocked || axis < 2 || dim < 0 || dim > 2)
		return -1;
	a = hp_ctile_align(&cv->ct, dim);
	return a < 0 ? -1 : a * cv->g.k[dim];
}

int64_t hp_convt_fma_band_align(const struct hp_conv *cv, int axis)
{
	int dim = 3 - cv->nd + axis - 2;
	int64_t a = hp_convt_band_align(cv, axis);

	/* the forward takes the FMA path when its workspace holds one worker's
	 * (hp_convt_forward): the node's and each band's always do.  Only
	 * where the column tiles leave no cut (one tile spans the axis: the
	 * tiny U-Net's 8x8x8 up-sampling): elsewhere finer cuts let the band
	 * search pick plans its fixed model favours and runs slower (the 3-D
	 * U-Net of bench_ooc_targets.py at a quarter: 451 kernels reading
	 * 115.8 MiB a run instead of 688 reading 58.3) */
	if (axis < 2 || dim < 0 || dim > 1 || !hp_convt_fma_eligible(cv) ||
	    cv->workspace < hp_convt_fma_workspace(cv, 1) || (a >= 1 && a < cv->g.img[dim]))
		return a;
	return cv->g.k[dim];
}

static int convt_prepare(struct hp_graph *g, struct hp_node *n)
{
	struct hp_conv *cv = malloc(sizeof *cv);
	int rc;

	if (!cv)
		return hp_node_error(g, n, -ENOMEM, "out of memory");
	rc = hp_conv_parse(g, n, 1, cv);
	if (rc < 0) {
		free(cv);
		return rc;
	}
	hp_convt_setup(cv);
	n->workspace = cv->workspace;
	n->priv = cv;
	return 0;
}

void hp_convt_forward(const struct hp_conv *cv, const float *x, const float *w, const float *b, float *y, float *ws,
		      struct hp_pool *pool)
{
	struct convt_run r = { .cv = cv, .x = x, .w = w, .b = b, .y = y, .ws = ws };
	int saved, threads = hp_conv_threads_enter(pool, &saved);
	int64_t items = cv->batch * cv->group, rows = convt_rows(cv);

	if (hp_convt_fma_eligible(cv) && cv->workspace >= hp_convt_fma_workspace(cv, 1)) {
		hp_conv_threads_leave(saved);
		hp_convt_fma_forward(cv, x, w, b, y, ws, pool);
		return;
	}
	r.cs = rows / cv->g.kvol;
	r.nchunk = (cv->cout_g + r.cs - 1) / r.cs;
	r.per_thread = cv->ct.maxcols * rows;
	if (threads > cv->ws_cols / cv->ct.maxcols)
		threads = (int)(cv->ws_cols / cv->ct.maxcols);
	hp_conv_parallel(pool, threads, items * (cv->blocked ? cv->ct.per : r.nchunk), convt_range, &r);
	hp_conv_threads_leave(saved);
}

static int convt_run(const struct hp_node *n, const struct hp_kargs *a)
{
	const struct hp_conv *cv = n->priv;

	hp_convt_forward(cv, a->in[0].data, a->in[1].data, cv->has_bias && a->nin > 2 ? a->in[2].data : NULL,
			 a->out[0].data, a->ws, a->pool);
	return 0;
}

static double convt_flops(const struct hp_graph *g, const struct hp_node *n)
{
	(void)g;
	return n->priv ? hp_conv_flops(n->priv) : 0;
}

const struct hp_op hp_op_conv_transpose = {
	.domain = "",
	.name = "ConvTranspose",
	.min_inputs = 2,
	.max_inputs = 3,
	.min_outputs = 1,
	.max_outputs = 1,
	.prepare = convt_prepare,
	.run = convt_run,
	.flops = convt_flops,
};
