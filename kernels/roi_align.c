/* RoiAlign(X [N,C,H,W], rois [R,4] (x1,y1,x2,y2), batch_indices [R]) ->
 * [R, C, output_height, output_width], float32: avg or max mode,
 * sampling_ratio (0: adaptive), spatial_scale, coordinate transformation
 * half_pixel (opset 16 default) or output_half_pixel (opset 10's only
 * behaviour, rois at least 1 pixel).  Bilinear samples as ONNX Runtime and
 * torchvision take them; max mode keeps the largest weighted corner. */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/shape_util.h"

struct rpriv {
	int max, half_pixel;
	int64_t oh, ow, ratio;
	float scale;
};

static int roi_prepare(struct hp_graph *g, struct hp_node *n)
{
	const struct hp_value *x = hpks_in(g, n, 0), *r = hpks_in(g, n, 1), *b = hpks_in(g, n, 2);
	const char *mode = hp_attr_string(n, "mode", "avg");
	const char *ct = hp_attr_string(n, "coordinate_transformation_mode", g->opset >= 16 ? "half_pixel" : "output_half_pixel");
	struct rpriv *p = calloc(1, sizeof *p);
	struct hp_shape s;

	if (!p)
		return hp_node_error(g, n, -ENOMEM, "out of memory");
	n->priv = p;
	p->max = !strcmp(mode, "max");
	p->half_pixel = !strcmp(ct, "half_pixel");
	p->oh = hp_attr_int(n, "output_height", 1);
	p->ow = hp_attr_int(n, "output_width", 1);
	p->ratio = hp_attr_int(n, "sampling_ratio", 0);
	p->scale = hp_attr_float(n, "spatial_scale", 1.0f);
	if ((!p->max && strcmp(mode, "avg")) || (!p->half_pixel && strcmp(ct, "output_half_pixel")))
		return hp_node_error(g, n, HP_EMODEL, "mode '%s' or coordinate_transformation_mode '%s' is not valid", mode, ct);
	if (x->dtype != HP_F32 || x->shape.rank != 4 || r->dtype != HP_F32 || r->shape.rank != 2 || r->shape.dims[1] != 4 ||
	    (b->dtype != HP_I64 && b->dtype != HP_I32) || hp_shape_numel(&b->shape) != r->shape.dims[0] || p->oh < 1 ||
	    p->ow < 1 || p->ratio < 0)
		return hp_node_error(g, n, HP_ESHAPE, "X float32 [N,C,H,W], rois [R,4] and batch_indices [R] are needed");
	s = (struct hp_shape){ 4, { r->shape.dims[0], x->shape.dims[1], p->oh, p->ow } };
	hpks_set_out(g, n, 0, HP_F32, &s);
	return 0;
}

/* One bilinear sample of plane pl: the four weighted corners into c[4]. */
static void corners(const float *pl, int64_t H, int64_t W, double y, double x, double *c)
{
	int64_t yl, xl, yh, xh;
	double ly, lx;

	memset(c, 0, 4 * sizeof *c);
	if (y < -1 || y > (double)H || x < -1 || x > (double)W)
		return;
	y = y < 0 ? 0 : y, x = x < 0 ? 0 : x;
	yl = (int64_t)y, xl = (int64_t)x;
	yh = yl >= H - 1 ? (yl = H - 1) : yl + 1;
	xh = xl >= W - 1 ? (xl = W - 1) : xl + 1;
	y = yl == H - 1 && yh == yl ? (double)yl : y;
	x = xl == W - 1 && xh == xl ? (double)xl : x;
	ly = y - (double)yl, lx = x - (double)xl;
	c[0] = (1 - ly) * (1 - lx) * pl[yl * W + xl], c[1] = (1 - ly) * lx * pl[yl * W + xh];
	c[2] = ly * (1 - lx) * pl[yh * W + xl], c[3] = ly * lx * pl[yh * W + xh];
}

static double roi_bin(const struct rpriv *p, const float *pl, int64_t H, int64_t W, const double *box, int64_t ph,
		      int64_t pw)
{
	double rh = box[3] - box[1], rw = box[2] - box[0], bh, bw, acc = p->max ? -INFINITY : 0, c[4];
	int64_t gh, gw;

	if (!p->half_pixel)
		rh = fmax(rh, 1), rw = fmax(rw, 1);
	bh = rh / (double)p->oh, bw = rw / (double)p->ow;
	gh = p->ratio ? p->ratio : (int64_t)ceil(rh / (double)p->oh);
	gw = p->ratio ? p->ratio : (int64_t)ceil(rw / (double)p->ow);
	for (int64_t iy = 0; iy < gh; iy++)
		for (int64_t ix = 0; ix < gw; ix++) {
			double y = box[1] + (double)ph * bh + ((double)iy + 0.5) * bh / (double)gh;
			double x = box[0] + (double)pw * bw + ((double)ix + 0.5) * bw / (double)gw;
			corners(pl, H, W, y, x, c);
			if (p->max)
				acc = fmax(acc, fmax(fmax(c[0], c[1]), fmax(c[2], c[3])));
			else
				acc += c[0] + c[1] + c[2] + c[3];
		}
	if (p->max)
		return gh > 0 && gw > 0 ? acc : 0;
	return acc / (double)(gh * gw > 1 ? gh * gw : 1);
}

static int roi_run(const struct hp_node *n, const struct hp_kargs *a)
{
	const struct rpriv *p = n->priv;
	const struct hp_tensor *x = &a->in[0], *r = &a->in[1], *b = &a->in[2];
	int64_t C = x->shape.dims[1], H = x->shape.dims[2], W = x->shape.dims[3], R = r->shape.dims[0];
	double off = p->half_pixel ? 0.5 : 0;
	float *y = a->out[0].data;

	for (int64_t k = 0; k < R; k++) {
		int64_t bi = hpks_get_i(b->data, b->dtype, k);
		double box[4];
		if (bi < 0 || bi >= x->shape.dims[0])
			return hp_node_error(NULL, n, HP_EDATA, "batch index %" PRId64 " is out of range", bi);
		for (int j = 0; j < 4; j++)
			box[j] = ((const float *)r->data)[k * 4 + j] * (double)p->scale - off;
		for (int64_t c = 0; c < C; c++)
			for (int64_t ph = 0; ph < p->oh; ph++)
				for (int64_t pw = 0; pw < p->ow; pw++)
					y[((k * C + c) * p->oh + ph) * p->ow + pw] =
						(float)roi_bin(p, (const float *)x->data + (bi * C + c) * H * W, H, W, box, ph, pw);
	}
	return 0;
}

static const struct hp_op op_roi_align = {
	.domain = "", .name = "RoiAlign", .min_inputs = 3, .max_inputs = 3, .min_outputs = 1, .max_outputs = 1,
	.prepare = roi_prepare, .run = roi_run,
};

const struct hp_op *const hp_ops_roi_align[] = { &op_roi_align, NULL };
