/* GridSample(X [N,C,H,W], grid [N,Ho,Wo,2]) -> [N,C,Ho,Wo], float32:
 * modes bilinear, nearest (ties to even), bicubic (A = -0.75); padding
 * zeros, border, reflection; align_corners.  Coordinates follow PyTorch's
 * grid_sample, which ONNX's definition and test data come from. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/shape_util.h"

enum { GM_BILINEAR, GM_NEAREST, GM_BICUBIC };
enum { GP_ZEROS, GP_BORDER, GP_REFLECTION };

struct gpriv {
	int mode, pad, align;
};

static int pick(const char *s, const char *const *names, int k)
{
	for (int i = 0; i < k; i++)
		if (!strcmp(s, names[i]))
			return i;
	return -1;
}

static int gs_prepare(struct hp_graph *g, struct hp_node *n)
{
	static const char *const modes[] = { "bilinear", "nearest", "bicubic" }, *const pads[] = { "zeros", "border", "reflection" };
	const struct hp_value *x = hpks_in(g, n, 0), *gr = hpks_in(g, n, 1);
	struct gpriv *p = calloc(1, sizeof *p);
	struct hp_shape s;

	if (!p)
		return hp_node_error(g, n, -ENOMEM, "out of memory");
	n->priv = p;
	p->mode = pick(hp_attr_string(n, "mode", "bilinear"), modes, 3);
	p->pad = pick(hp_attr_string(n, "padding_mode", "zeros"), pads, 3);
	p->align = (int)hp_attr_int(n, "align_corners", 0);
	if (p->mode < 0 || p->pad < 0)
		return hp_node_error(g, n, HP_EUNSUPPORTED, "mode or padding_mode is not supported");
	if (x->dtype != HP_F32 || gr->dtype != HP_F32 || x->shape.rank != 4 || gr->shape.rank != 4 ||
	    gr->shape.dims[3] != 2 || gr->shape.dims[0] != x->shape.dims[0])
		return hp_node_error(g, n, HP_EUNSUPPORTED, "X must be float32 [N,C,H,W] and grid [N,Ho,Wo,2] (2-D only)");
	s = (struct hp_shape){ 4, { x->shape.dims[0], x->shape.dims[1], gr->shape.dims[1], gr->shape.dims[2] } };
	hpks_set_out(g, n, 0, HP_F32, &s);
	return 0;
}

static double reflect(double v, double twice_lo, double twice_hi)
{
	double lo = twice_lo / 2, span = (twice_hi - twice_lo) / 2, extra, flips;

	if (twice_lo == twice_hi)
		return 0;
	v = fabs(v - lo);
	extra = fmod(v, span);
	flips = floor(v / span);
	return fmod(flips, 2) == 0 ? extra + lo : span - extra + lo;
}

/* Padding applied to a coordinate (border, reflection). */
static double pad_coord(const struct gpriv *p, double v, int64_t size)
{
	if (p->pad == GP_REFLECTION)
		v = p->align ? reflect(v, 0, 2.0 * (double)(size - 1)) : reflect(v, -1, 2.0 * (double)size - 1);
	if (p->pad != GP_ZEROS)
		v = fmin((double)(size - 1), fmax(0, v));
	return v;
}

static double unnorm(const struct gpriv *p, double v, int64_t size)
{
	return p->align ? (v + 1) / 2 * (double)(size - 1) : ((v + 1) * (double)size - 1) / 2;
}

/* Pixel (y, x) of a plane, 0 outside (after padding of the index). */
static double pix(const struct gpriv *p, const float *pl, int64_t H, int64_t W, double y, double x)
{
	if (p->mode == GM_BICUBIC && p->pad != GP_ZEROS)
		y = pad_coord(p, y, H), x = pad_coord(p, x, W);
	int64_t iy = (int64_t)y, ix = (int64_t)x;
	return iy < 0 || iy >= H || ix < 0 || ix >= W || y != floor(y) || x != floor(x) ? 0 : pl[iy * W + ix];
}

static void cubic_w(double t, double *w)
{
	const double A = -0.75;
	double t1 = t + 1, t2 = 1 - t, t3 = 2 - t;

	w[0] = ((A * t1 - 5 * A) * t1 + 8 * A) * t1 - 4 * A;
	w[1] = ((A + 2) * t - (A + 3)) * t * t + 1;
	w[2] = ((A + 2) * t2 - (A + 3)) * t2 * t2 + 1;
	w[3] = ((A * t3 - 5 * A) * t3 + 8 * A) * t3 - 4 * A;
}

static double sample(const struct gpriv *p, const float *pl, int64_t H, int64_t W, double gx, double gy)
{
	double x = unnorm(p, gx, W), y = unnorm(p, gy, H), x0, y0, v = 0, wx[4], wy[4];

	if (p->mode != GM_BICUBIC)
		x = pad_coord(p, x, W), y = pad_coord(p, y, H);
	if (p->mode == GM_NEAREST)
		return pix(p, pl, H, W, nearbyint(y), nearbyint(x));
	x0 = floor(x), y0 = floor(y);
	if (p->mode == GM_BILINEAR) {
		double fx = x - x0, fy = y - y0;
		return pix(p, pl, H, W, y0, x0) * (1 - fx) * (1 - fy) + pix(p, pl, H, W, y0, x0 + 1) * fx * (1 - fy) +
		       pix(p, pl, H, W, y0 + 1, x0) * (1 - fx) * fy + pix(p, pl, H, W, y0 + 1, x0 + 1) * fx * fy;
	}
	cubic_w(x - x0, wx);
	cubic_w(y - y0, wy);
	for (int i = 0; i < 4; i++)
		for (int j = 0; j < 4; j++)
			v += wy[i] * wx[j] * pix(p, pl, H, W, y0 - 1 + i, x0 - 1 + j);
	return v;
}

static int gs_run(const struct hp_node *n, const struct hp_kargs *a)
{
	const struct gpriv *p = n->priv;
	const struct hp_shape *xs = &a->in[0].shape, *ys = &a->out[0].shape;
	const float *x = a->in[0].data, *gr = a->in[1].data;
	float *y = a->out[0].data;
	int64_t N = xs->dims[0], C = xs->dims[1], H = xs->dims[2], W = xs->dims[3], Ho = ys->dims[2], Wo = ys->dims[3];

	for (int64_t b = 0; b < N; b++)
		for (int64_t c = 0; c < C; c++)
			for (int64_t i = 0; i < Ho * Wo; i++) {
				const float *gp = gr + (b * Ho * Wo + i) * 2;
				y[(b * C + c) * Ho * Wo + i] = (float)sample(p, x + (b * C + c) * H * W, H, W, gp[0], gp[1]);
			}
	return 0;
}

static const struct hp_op op_grid_sample = {
	.domain = "", .name = "GridSample", .min_inputs = 2, .max_inputs = 2, .min_outputs = 1, .max_outputs = 1,
	.prepare = gs_prepare, .run = gs_run,
};

const struct hp_op *const hp_ops_grid_sample[] = { &op_grid_sample, NULL };
