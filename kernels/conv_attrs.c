/* Conv / ConvTranspose attributes and shapes, exactly as ONNX defines them
 * (opsets 1..17: auto_pad, kernel_shape optional, pads/strides/dilations,
 * group, and for ConvTranspose output_padding and output_shape). */
#include <inttypes.h>
#include <string.h>

#include "common/checked.h"
#include "hpdlf/error.h"
#include "kernels/conv_impl.h"

enum auto_pad { PAD_NOTSET, PAD_SAME_UPPER, PAD_SAME_LOWER, PAD_VALID };

struct conv_attrs {
	int nd;
	enum auto_pad autopad;
	int64_t k[3], stride[3], dil[3], pb[3], pe[3], opad[3], oshape[3];
	int has_oshape;
};

static int64_t floor_div2(int64_t a)
{
	return a >= 0 ? a / 2 : -((-a + 1) / 2);
}

/* An INTS attribute of exactly `want` entries, each >= lo, or the default. */
static int ints_attr(const struct hp_graph *g, const struct hp_node *n, const char *name, int want, int64_t lo,
		     int64_t dflt, int64_t *out)
{
	const int64_t *v;
	int cnt = hp_attr_ints(n, name, &v);

	for (int i = 0; i < want; i++)
		out[i] = dflt;
	if (cnt < 0)
		return 0;
	if (cnt != want)
		return hp_node_error(g, n, HP_EMODEL, "%s has %d values, expected %d", name, cnt, want);
	for (int i = 0; i < want; i++) {
		if (v[i] < lo)
			return hp_node_error(g, n, HP_EMODEL, "%s[%d] = %" PRId64 " (must be >= %" PRId64 ")", name, i,
					     v[i], lo);
		out[i] = v[i];
	}
	return 0;
}

static int parse_autopad(const struct hp_graph *g, const struct hp_node *n, enum auto_pad *ap)
{
	const char *s = hp_attr_string(n, "auto_pad", "NOTSET");

	if (!strcmp(s, "NOTSET") || !s[0])
		*ap = PAD_NOTSET;
	else if (!strcmp(s, "SAME_UPPER"))
		*ap = PAD_SAME_UPPER;
	else if (!strcmp(s, "SAME_LOWER"))
		*ap = PAD_SAME_LOWER;
	else if (!strcmp(s, "VALID"))
		*ap = PAD_VALID;
	else
		return hp_node_error(g, n, HP_EMODEL, "auto_pad '%s' is not NOTSET, SAME_UPPER, SAME_LOWER or VALID", s);
	return 0;
}

static int parse_attrs(const struct hp_graph *g, const struct hp_node *n, const struct hp_shape *w, int nd,
		       struct conv_attrs *a)
{
	int64_t pads[6], ks[3];
	const int64_t *v;
	int rc, cnt;

	memset(a, 0, sizeof *a);
	a->nd = nd;
	if ((rc = parse_autopad(g, n, &a->autopad)) < 0)
		return rc;
	cnt = hp_attr_ints(n, "kernel_shape", &v);
	if (cnt >= 0 && cnt != nd)
		return hp_node_error(g, n, HP_ESHAPE, "kernel_shape has %d dims, input has %d spatial dims", cnt, nd);
	for (int i = 0; i < nd; i++) {
		ks[i] = w->dims[2 + i];
		if (cnt >= 0 && v[i] != ks[i])
			return hp_node_error(g, n, HP_ESHAPE,
					     "kernel_shape[%d] = %" PRId64 " but the weight's spatial dim is %" PRId64, i,
					     v[i], ks[i]);
	}
	if ((rc = ints_attr(g, n, "strides", nd, 1, 1, a->stride)) < 0 ||
	    (rc = ints_attr(g, n, "dilations", nd, 1, 1, a->dil)) < 0 ||
	    (rc = ints_attr(g, n, "pads", 2 * nd, 0, 0, pads)) < 0 ||
	    (rc = ints_attr(g, n, "output_padding", nd, 0, 0, a->opad)) < 0)
		return rc;
	cnt = hp_attr_ints(n, "output_shape", &v);
	if (cnt >= 0) {
		/* the spec gives spatial dims; some exporters wrote N and C too */
		if (cnt != nd && cnt != nd + 2)
			return hp_node_error(g, n, HP_EMODEL, "output_shape has %d values, expected %d", cnt, nd);
		a->has_oshape = 1;
		for (int i = 0; i < nd; i++)
			a->oshape[i] = v[cnt - nd + i];
	}
	for (int i = 0; i < nd; i++) {
		a->k[i] = ks[i];
		a->pb[i] = pads[i];
		a->pe[i] = pads[nd + i];
		/* as PyTorch requires: a larger padding would add an output row
		 * that no input position reaches */
		if (a->opad[i] && a->opad[i] >= a->stride[i] && a->opad[i] >= a->dil[i])
			return hp_node_error(g, n, HP_EMODEL,
					     "output_padding[%d] = %" PRId64 " must be less than stride (%" PRId64
					     ") or dilation (%" PRId64 ")", i, a->opad[i], a->stride[i], a->dil[i]);
	}
	return 0;
}

/* Output size and begin/end pads of one Conv axis (overflow into *over). */
static int64_t conv_axis(const struct conv_attrs *a, int i, int64_t in, int64_t *pb, int64_t *pe, int *over)
{
	int64_t ek = hp_ck_add(hp_ck_mul(a->k[i] - 1, a->dil[i], over), 1, over), out, total, span;

	switch (a->autopad) {
	case PAD_VALID:
		*pb = *pe = 0;
		return in >= ek ? (in - ek) / a->stride[i] + 1 : 0;
	case PAD_SAME_UPPER:
	case PAD_SAME_LOWER:
		out = hp_ck_add(in, a->stride[i] - 1, over) / a->stride[i];
		total = hp_ck_sub(hp_ck_add(hp_ck_mul(out - 1, a->stride[i], over), ek, over), in, over);
		if (total < 0)
			total = 0;
		*pb = a->autopad == PAD_SAME_UPPER ? total / 2 : total - total / 2;
		*pe = total - *pb;
		return out;
	default:
		*pb = a->pb[i];
		*pe = a->pe[i];
		span = hp_ck_add(hp_ck_add(in, *pb, over), *pe, over);
		return span >= ek ? (span - ek) / a->stride[i] + 1 : 0;
	}
}

/* Output size and begin/end pads of one ConvTranspose axis (overflow into *over). */
static int64_t convt_axis(const struct conv_attrs *a, int i, int64_t in, int64_t *pb, int64_t *pe, int *over)
{
	int64_t ek = hp_ck_add(hp_ck_mul(a->k[i] - 1, a->dil[i], over), 1, over), out, total;
	int auto_out = a->autopad == PAD_SAME_UPPER || a->autopad == PAD_SAME_LOWER;
	/* stride * (in - 1) + output_padding + ek: the full span before cropping */
	int64_t full = hp_ck_add(hp_ck_add(hp_ck_mul(a->stride[i], in - 1, over), a->opad[i], over), ek, over);

	if (!a->has_oshape && !auto_out) {
		*pb = a->autopad == PAD_VALID ? 0 : a->pb[i];
		*pe = a->autopad == PAD_VALID ? 0 : a->pe[i];
		return hp_ck_sub(hp_ck_sub(full, *pb, over), *pe, over);
	}
	out = a->has_oshape ? a->oshape[i] : hp_ck_mul(in, a->stride[i], over);
	total = hp_ck_sub(full, out, over);
	if (a->autopad == PAD_SAME_UPPER) {
		*pb = floor_div2(total);
		*pe = total - floor_div2(total);
	} else {
		*pb = total - floor_div2(total);
		*pe = floor_div2(total);
	}
	return out;
}

static int check_tensors(struct hp_graph *g, struct hp_node *n, const struct hp_value *x,
			 const struct hp_value *w)
{
	char xs[96], ws[96];

	if (x->dtype != HP_F32 || w->dtype != HP_F32)
		return hp_node_error(g, n, HP_EUNSUPPORTED, "only float32 is supported (X %s, W %s)",
				     hp_dtype_name(x->dtype), hp_dtype_name(w->dtype));
	if (x->shape.rank < 3 || x->shape.rank > 5)
		return hp_node_error(g, n, HP_ESHAPE, "input X has shape %s: expected rank 3 to 5 (N, C, 1 to 3 spatial dims)",
				     hp_shape_str(&x->shape, xs, sizeof xs));
	if (w->shape.rank != x->shape.rank)
		return hp_node_error(g, n, HP_ESHAPE, "weight W has shape %s, input X %s: ranks differ",
				     hp_shape_str(&w->shape, ws, sizeof ws), hp_shape_str(&x->shape, xs, sizeof xs));
	return 0;
}

static int check_channels(struct hp_graph *g, struct hp_node *n, struct hp_conv *cv, const struct hp_shape *w)
{
	if (cv->group < 1)
		return hp_node_error(g, n, HP_EMODEL, "group = %" PRId64 " (must be >= 1)", cv->group);
	if (cv->cin % cv->group)
		return hp_node_error(g, n, HP_ESHAPE, "group %" PRId64 " does not divide the %" PRId64 " input channels",
				     cv->group, cv->cin);
	cv->cin_g = cv->cin / cv->group;
	if (!cv->transpose) {
		if (w->dims[1] != cv->cin_g)
			return hp_node_error(g, n, HP_ESHAPE,
					     "channel mismatch: input X has %" PRId64 " channels, weight W expects %" PRId64
					     " per group x %" PRId64 " groups",
					     cv->cin, w->dims[1], cv->group);
		cv->cout = w->dims[0];
		if (cv->cout % cv->group)
			return hp_node_error(g, n, HP_ESHAPE,
					     "group %" PRId64 " does not divide the %" PRId64 " output channels",
					     cv->group, cv->cout);
		cv->cout_g = cv->cout / cv->group;
	} else {
		if (w->dims[0] != cv->cin)
			return hp_node_error(g, n, HP_ESHAPE,
					     "channel mismatch: input X has %" PRId64 " channels, weight W has %" PRId64,
					     cv->cin, w->dims[0]);
		cv->cout_g = w->dims[1];
		cv->cout = cv->cout_g * cv->group;
	}
	return 0;
}

static int check_bias(struct hp_graph *g, struct hp_node *n, struct hp_conv *cv)
{
	const struct hp_value *b;

	cv->has_bias = n->ninputs > 2 && n->inputs[2] >= 0;
	if (!cv->has_bias)
		return 0;
	b = &g->values[n->inputs[2]];
	if (b->dtype != HP_F32 || b->shape.rank != 1 || b->shape.dims[0] != cv->cout)
		return hp_node_error(g, n, HP_ESHAPE, "bias B must be float32 [%" PRId64 "], got %s rank %d",
				     cv->cout, hp_dtype_name(b->dtype), b->shape.rank);
	return 0;
}

/* Fill the column geometry (3-D, leading unit dims) and the output shape. */
static int set_geometry(struct hp_graph *g, struct hp_node *n, struct hp_conv *cv, const struct conv_attrs *a,
			const struct hp_shape *xs, struct hp_shape *ys)
{
	int off = 3 - cv->nd;
	struct hp_colgeom *c = &cv->g;

	for (int d = 0; d < 3; d++) {
		c->img[d] = c->grid[d] = c->k[d] = c->stride[d] = c->dil[d] = 1;
		c->pad[d] = 0;
	}
	ys->rank = xs->rank;
	ys->dims[0] = cv->batch;
	ys->dims[1] = cv->cout;
	for (int i = 0; i < cv->nd; i++) {
		int64_t in = xs->dims[2 + i], pb = 0, pe = 0;
		int over = 0;
		int64_t out = cv->transpose ? convt_axis(a, i, in, &pb, &pe, &over) : conv_axis(a, i, in, &pb, &pe, &over);
		if (over || out > HP_DIM_MAX)
			return hp_node_error(g, n, HP_ESHAPE,
					     "spatial dim %d: input %" PRId64 ", kernel %" PRId64 ", stride %" PRId64
					     ", dilation %" PRId64 ", pads %" PRId64 "+%" PRId64
					     " give an output size beyond any tensor",
					     i, in, a->k[i], a->stride[i], a->dil[i], a->pb[i], a->pe[i]);
		if (out < 1)
			return hp_node_error(g, n, HP_ESHAPE,
					     "spatial dim %d: input %" PRId64 ", kernel %" PRId64 ", stride %" PRId64
					     ", dilation %" PRId64 ", pads %" PRId64 "+%" PRId64 " give output size %" PRId64,
					     i, in, a->k[i], a->stride[i], a->dil[i], pb, pe, out);
		ys->dims[2 + i] = out;
		c->img[off + i] = cv->transpose ? out : in;
		c->grid[off + i] = cv->transpose ? in : out;
		c->k[off + i] = a->k[i];
		c->stride[off + i] = a->stride[i];
		c->dil[off + i] = a->dil[i];
		c->pad[off + i] = pb;
	}
	hp_colgeom_finish(c);
	cv->xvol = cv->transpose ? c->grid_vol : c->img_vol;
	cv->yvol = cv->transpose ? c->img_vol : c->grid_vol;
	return 0;
}

int hp_conv_parse(struct hp_graph *g, struct hp_node *n, int transpose, struct hp_conv *cv)
{
	const struct hp_value *x, *w;
	struct hp_value *y;
	struct conv_attrs a;
	int rc;

	if (n->inputs[0] < 0 || n->inputs[1] < 0 || n->outputs[0] < 0)
		return hp_node_error(g, n, HP_EMODEL, "inputs X, W and output Y are required");
	x = &g->values[n->inputs[0]];
	w = &g->values[n->inputs[1]];
	y = &g->values[n->outputs[0]];
	memset(cv, 0, sizeof *cv);
	cv->transpose = transpose;
	cv->node = 1;
	if ((rc = check_tensors(g, n, x, w)) < 0)
		return rc;
	cv->nd = x->shape.rank - 2;
	cv->path = (int)hp_attr_int(n, "hpdlf_path", -1);
	if (cv->path < -1 || cv->path > HP_CONV_PATH_GRP)
		return hp_node_error(g, n, HP_EMODEL, "attribute hpdlf_path is %d, not -1..6", cv->path);
	cv->lean = hp_attr_int(n, "hpdlf_lean", 0) != 0;
	cv->narrow = cv->lean && hp_attr_int(n, "hpdlf_narrow", 0) != 0;
	cv->batch = x->shape.dims[0];
	cv->cin = x->shape.dims[1];
	cv->group = hp_attr_int(n, "group", 1);
	if ((rc = check_channels(g, n, cv, &w->shape)) < 0 || (rc = check_bias(g, n, cv)) < 0 ||
	    (rc = parse_attrs(g, n, &w->shape, cv->nd, &a)) < 0)
		return rc;
	if (!transpose && a.has_oshape)
		return hp_node_error(g, n, HP_EMODEL, "output_shape is a ConvTranspose attribute");
	if ((rc = set_geometry(g, n, cv, &a, &x->shape, &y->shape)) < 0)
		return rc;
	y->dtype = HP_F32;
	cv->kdim = (transpose ? cv->cout_g : cv->cin_g) * cv->g.kvol;
	return 0;
}

double hp_conv_flops(const struct hp_conv *cv)
{
	double grid = (double)cv->g.grid_vol, k = (double)cv->g.kvol;

	if (cv->transpose)
		return 2.0 * cv->batch * cv->cin * grid * cv->cout_g * k;
	return 2.0 * cv->batch * cv->cout * grid * cv->cin_g * k;
}
