/* Gradient rules: for each differentiable forward op, the backward nodes
 * (ai.hpdlf ops from the kernels/..._grad.c files) that turn output gradients into
 * input-gradient contributions.  Shapes and constants the backward needs are
 * passed as attributes, so only the activations a rule reads stay alive. */
#include <math.h>
#include <string.h>

#include "hpdlf/error.h"
#include "hpdlf/kernels.h"
#include "exec/autodiff_internal.h"
#include "kernels/gemm_tile.h"

#define MAXA 12

static struct hp_shape shape_of(const struct ad *ad, int v)
{
	return ad->g->values[v].shape;
}

static int in_at(const struct hp_node *n, int i)
{
	return i < n->ninputs ? n->inputs[i] : -1;
}

static int const_floats(const struct ad *ad, int v, float *dst, int max)
{
	const struct hp_value *val = v >= 0 ? &ad->g->values[v] : NULL;
	int64_t k = val ? hp_shape_numel(&val->shape) : 0;

	if (!val || !val->data || val->dtype != HP_F32 || k > max)
		return -1;
	memcpy(dst, val->data, (size_t)k * sizeof *dst);
	return (int)k;
}

/* ---- elementwise ------------------------------------------------------- */

static int r_unary(struct ad *ad, const struct hp_node *n, const int *dy)
{
	struct hp_attr a[MAXA];
	const char *op = n->op_type;
	int na = 0, in[2] = { dy[0], n->inputs[0] }, want[1] = { 0 };
	float lim[2] = { -INFINITY, INFINITY };

	if (!strcmp(op, "FusedGelu")) /* training's fusion of the exporters' GELU (exec/fuse.h) */
		op = "Gelu";
	if (!strcmp(op, "Gelu") && !strcmp(hp_attr_string(n, "approximate", "none"), "tanh"))
		op = "GeluTanh";
	/* Relu's gradient needs only the sign of x, and y = max(x, 0) > 0
	 * exactly when x > 0: reading y instead lets x die after the forward,
	 * since y is usually kept for the next layer anyway (LeNet's traffic
	 * at a quarter of its peak fell from 3.2 to 1.9 MB/step). */
	if (!strcmp(op, "Relu") && n->noutputs > 0 && n->outputs[0] >= 0)
		in[1] = n->outputs[0];
	a[na++] = ad_str("op", op);
	for (int k = 0; k < 4; k++)
		na += ad_copy_attr(n, (const char *[]){ "alpha", "beta", "gamma", "lambd" }[k], &a[na]);
	if (!strcmp(op, "Clip")) {
		lim[0] = hp_attr_float(n, "min", lim[0]);
		lim[1] = hp_attr_float(n, "max", lim[1]);
		for (int k = 1; k < 3; k++)
			if (in_at(n, k) >= 0 && const_floats(ad, n->inputs[k], &lim[k - 1], 1) != 1)
				return ad_no_grad(ad, n, "Clip bounds must be constant floats");
		a[na++] = ad_float("min", lim[0]);
		a[na++] = ad_float("max", lim[1]);
	}
	return ad_emit_to(ad, n, "UnaryGrad", 2, in, 1, want, na, a);
}

static int r_identity(struct ad *ad, const struct hp_node *n, const int *dy)
{
	return ad_contrib(ad, n->inputs[0], dy[0]);
}

static int r_binary(struct ad *ad, const struct hp_node *n, const int *dy)
{
	const char *op = n->op_type;
	int linear = !strcmp(op, "Add") || !strcmp(op, "Sub"), want[2] = { 0, 1 }, in[3], rc;
	struct hp_shape as = shape_of(ad, n->inputs[0]), bs = shape_of(ad, n->inputs[1]);
	struct hp_shape ys = shape_of(ad, n->outputs[0]);
	struct hp_attr a[3] = { ad_str("op", op), ad_shape("a_shape", &as), ad_shape("b_shape", &bs) };

	if (n->ninputs != 2)
		return ad_no_grad(ad, n, "only the two-input form is differentiable");
	/* Add/Sub operands of the output's shape take dY itself (Sub's A too). */
	if (linear && hp_shape_equal(&as, &ys)) {
		if ((rc = ad_contrib(ad, n->inputs[0], dy[0])) < 0)
			return rc;
		want[0] = -1;
	}
	if (!strcmp(op, "Add") && hp_shape_equal(&bs, &ys)) {
		if ((rc = ad_contrib(ad, n->inputs[1], dy[0])) < 0)
			return rc;
		want[1] = -1;
	}
	in[0] = dy[0];
	in[1] = linear ? -1 : n->inputs[0];
	in[2] = linear ? -1 : n->inputs[1];
	return ad_emit_to(ad, n, "BinaryGrad", 3, in, 2, want, 3, a);
}

/* Sum(x1..xk) and Expand(x, shape): dY summed to each operand's shape. */
static int r_sum_like(struct ad *ad, const struct hp_node *n, const int *dy)
{
	struct hp_shape ys = shape_of(ad, n->outputs[0]);
	int last = strcmp(n->op_type, "Expand") ? n->ninputs : 1;

	for (int k = 0; k < last; k++) {
		struct hp_shape xs = shape_of(ad, n->inputs[k]);
		struct hp_attr a[3] = { ad_str("op", "Add"), ad_shape("a_shape", &xs), ad_shape("b_shape", &ys) };
		int want[2] = { k, -1 }, in[1] = { dy[0] }, rc;
		if (hp_shape_equal(&xs, &ys))
			rc = ad_contrib(ad, n->inputs[k], dy[0]);
		else
			rc = ad_emit_to(ad, n, "BinaryGrad", 1, in, 2, want, 3, a);
		if (rc < 0)
			return rc;
	}
	return 0;
}

static int r_where(struct ad *ad, const struct hp_node *n, const int *dy)
{
	struct hp_shape as = shape_of(ad, n->inputs[1]), bs = shape_of(ad, n->inputs[2]);
	struct hp_attr a[2] = { ad_shape("a_shape", &as), ad_shape("b_shape", &bs) };
	int in[2] = { dy[0], n->inputs[0] }, want[2] = { 1, 2 };

	return ad_emit_to(ad, n, "WhereGrad", 2, in, 2, want, 2, a);
}

static int r_dropout(struct ad *ad, const struct hp_node *n, const int *dy)
{
	struct hp_attr a[1] = { ad_float("ratio", hp_attr_float(n, "ratio", 0.5f)) };
	int in[2] = { dy[0], n->outputs[1] }, want[1] = { 0 };

	return ad_emit_to(ad, n, "DropoutGrad", 2, in, 1, want, 1, a);
}

/* ---- matrix products --------------------------------------------------- */

/* MatMul, and MatMulAcc (Y = C + A B: block j > 0 of a MatMul weight cut
 * along its reduction, split_weight.c), whose C takes dY as it is.  A
 * block's tiling is the whole product's (the gradients then run the same
 * sgemms as the whole weight's, kernels/gemm_grad.c). */
static int r_matmul(struct ad *ad, const struct hp_node *n, const int *dy)
{
	const struct hp_attr *tile = hp_node_attr(n, HP_GEMM_TILE_ATTR);
	int in[3] = { dy[0], n->inputs[0], n->inputs[1] }, want[2] = { 0, 1 }, rc;

	rc = ad_emit_to(ad, n, "MatMulGrad", 3, in, 2, want, tile ? 1 : 0, tile);
	if (rc < 0 || strcmp(n->op_type, "MatMulAcc") || in_at(n, 2) < 0 || !ad_needs(ad, n, 2))
		return rc;
	return ad_contrib(ad, n->inputs[2], dy[0]);
}

static int r_gemm(struct ad *ad, const struct hp_node *n, const int *dy)
{
	struct hp_attr a[4] = { ad_float("alpha", hp_attr_float(n, "alpha", 1)),
				ad_int("transA", hp_attr_int(n, "transA", 0)),
				ad_int("transB", hp_attr_int(n, "transB", 0)) };
	const struct hp_attr *tile = hp_node_attr(n, HP_GEMM_TILE_ATTR);
	int in[3] = { dy[0], n->inputs[0], n->inputs[1] }, want[2] = { 0, 1 }, rc, na = 3;
	float beta = hp_attr_float(n, "beta", 1);

	if (tile) /* a block of a cut weight: the whole product's tiling (split_weight.c) */
		a[na++] = *tile;
	if ((rc = ad_emit_to(ad, n, "GemmGrad", 3, in, 2, want, na, a)) < 0 || in_at(n, 2) < 0 || !ad_needs(ad, n, 2))
		return rc;
	struct hp_shape cs = shape_of(ad, n->inputs[2]), ys = shape_of(ad, n->outputs[0]);
	struct hp_attr c[4] = { ad_str("op", "Add"), ad_shape("a_shape", &cs), ad_shape("b_shape", &ys),
				ad_float("scale", beta) };
	int cw[2] = { 2, -1 };
	if (beta == 1 && hp_shape_equal(&cs, &ys))
		return ad_contrib(ad, n->inputs[2], dy[0]);
	return ad_emit_to(ad, n, "BinaryGrad", 1, in, 2, cw, 4, c);
}

/* ---- convolution and pooling ------------------------------------------- */

struct window {
	int nsp;
	int64_t k[3], s[3], d[3], pads[6];
};

/* Window of a Conv/pool (big = input) or ConvTranspose (big = output), with
 * auto_pad / output_shape resolved to explicit pads from inferred shapes. */
static int window_of(struct ad *ad, const struct hp_node *n, const struct hp_shape *big,
		     const struct hp_shape *small, const int64_t *k, int transpose, struct window *w)
{
	const int64_t *v;
	const char *ap = hp_attr_string(n, "auto_pad", "NOTSET");
	int m, explicit_pads = hp_attr_ints(n, "pads", &v) >= 0 && strcmp(ap, "SAME_UPPER") && strcmp(ap, "SAME_LOWER");

	w->nsp = big->rank - 2;
	if (w->nsp < 1 || w->nsp > 3)
		return ad_no_grad(ad, n, "only 1 to 3 spatial dims");
	for (int i = 0; i < w->nsp; i++) {
		w->k[i] = k[i];
		w->s[i] = (m = hp_attr_ints(n, "strides", &v)) > i ? v[i] : 1;
		w->d[i] = (m = hp_attr_ints(n, "dilations", &v)) > i ? v[i] : 1;
	}
	for (int i = 0; i < w->nsp; i++) {
		int64_t eff = (w->k[i] - 1) * w->d[i] + 1, total;
		if (explicit_pads || (!strcmp(ap, "NOTSET") && !(transpose && hp_node_attr(n, "output_shape")))) {
			m = hp_attr_ints(n, "pads", &v);
			w->pads[i] = m == 2 * w->nsp ? v[i] : 0;
			w->pads[w->nsp + i] = m == 2 * w->nsp ? v[w->nsp + i] : 0;
			continue;
		}
		if (!strcmp(ap, "VALID")) {
			w->pads[i] = w->pads[w->nsp + i] = 0;
			continue;
		}
		if (transpose) {
			const int64_t *op;
			int64_t opad = hp_attr_ints(n, "output_padding", &op) > i ? op[i] : 0;
			total = w->s[i] * (small->dims[2 + i] - 1) + opad + eff - big->dims[2 + i];
		} else {
			total = (small->dims[2 + i] - 1) * w->s[i] + eff - big->dims[2 + i];
		}
		total = total < 0 ? 0 : total;
		w->pads[i] = !strcmp(ap, "SAME_LOWER") ? total - total / 2 : total / 2;
		w->pads[w->nsp + i] = total - w->pads[i];
	}
	return 0;
}

/* Window attributes, then extra[]: na attributes in a[]. */
static int window_attrs(const struct window *w, struct hp_attr *a)
{
	a[0] = ad_ints("strides", w->nsp, w->s);
	a[1] = ad_ints("dilations", w->nsp, w->d);
	a[2] = ad_ints("pads", 2 * w->nsp, w->pads);
	return 3;
}

static int r_conv(struct ad *ad, const struct hp_node *n, const int *dy)
{
	int transpose = !strcmp(n->op_type, "ConvTranspose"), rc, na;
	struct hp_shape xs = shape_of(ad, n->inputs[0]), ws = shape_of(ad, n->inputs[1]);
	struct hp_shape ys = shape_of(ad, n->outputs[0]), ks = { ws.rank - 2, { 0 } };
	struct hp_attr a[MAXA];
	struct window w;

	memcpy(ks.dims, ws.dims + 2, (size_t)ks.rank * sizeof ks.dims[0]);
	if ((rc = window_of(ad, n, transpose ? &ys : &xs, transpose ? &xs : &ys, ks.dims, transpose, &w)) < 0)
		return rc;
	na = window_attrs(&w, a);
	a[na++] = ad_int("group", hp_attr_int(n, "group", 1));
	a[na] = ad_shape("x_shape", &xs);
	const int64_t *tag;
	int ntag = transpose ? -1 : hp_attr_ints(n, "hpdlf_band", &tag), nd = na + 1;
	if (ntag > 0) /* a band's place in the whole (split_band.c), for split_grad.c */
		a[nd++] = ad_ints("hpdlf_band", ntag, tag);
	int din[2] = { dy[0], n->inputs[1] }, dwant[1] = { 0 };
	struct hp_attr fa[MAXA];
	int nfa = na;
	memcpy(fa, a, sizeof a);
	fa[nfa] = ad_shape("kernel_shape", &ks);
	if (hp_attr_int(n, "hpdlf_unit_axis", -1) >= 0) /* a band's: its sums' units (split_band.c) */
		fa[++nfa] = ad_int("hpdlf_unit_axis", hp_attr_int(n, "hpdlf_unit_axis", 0));
	int fin[2] = { dy[0], n->inputs[0] }, fwant[1] = { 1 };
	if (transpose) {
		fin[0] = n->inputs[0];
		fin[1] = dy[0];
	}
	/* A whole convolution's filter gradient first: it reads X and dY but
	 * not W, so out of core W's load runs while it computes, and the
	 * update that follows it (autodiff.c add_update) and the data gradient
	 * find W there.  The data gradient first made ResNet-18's backward
	 * wait for each 9-MiB weight of its last layers, whose load could only
	 * start once the previous layer's update had freed the budget (14 ms a
	 * step stalled at 50% of its peak; now 1.5).  Same kernels, same
	 * results.  A band's (split_band.c: hpdlf_unit_axis) keeps the data
	 * gradient first: its weight stays resident over the bands' chain, and
	 * its band's recomputations run after the band's first backward node
	 * (remat.c, test band-order). */
	int gf_first = hp_attr_int(n, "hpdlf_unit_axis", -1) < 0;
	if (gf_first && (rc = ad_emit_to(ad, n, "ConvGradFilter", 2, fin, 1, fwant, nfa + 1, fa)) < 0)
		return rc;
	if ((rc = ad_emit_to(ad, n, transpose ? "ConvTransposeGradData" : "ConvGradData", 2, din, 1, dwant, nd, a)) < 0)
		return rc;
	if (!gf_first && (rc = ad_emit_to(ad, n, "ConvGradFilter", 2, fin, 1, fwant, nfa + 1, fa)) < 0)
		return rc;
	int bwant[1] = { 2 }, unit = hp_attr_int(n, "hpdlf_unit_axis", -1) >= 0;
	struct hp_attr ua = ad_int("hpdlf_unit_axis", hp_attr_int(n, "hpdlf_unit_axis", 0));
	return in_at(n, 2) >= 0 ? ad_emit_to(ad, n, "BiasGrad", 1, dy, 1, bwant, unit, &ua) : 0;
}

static int r_pool(struct ad *ad, const struct hp_node *n, const int *dy)
{
	int global = !strncmp(n->op_type, "Global", 6), max = strstr(n->op_type, "Max") != NULL, na, rc;
	struct hp_shape xs = shape_of(ad, n->inputs[0]), ys = shape_of(ad, n->outputs[0]), ks = { xs.rank - 2, { 0 } };
	const int64_t *kv;
	struct hp_attr a[MAXA];
	struct window w = { 0 };

	if (global)
		memcpy(ks.dims, xs.dims + 2, (size_t)ks.rank * sizeof ks.dims[0]);
	else if (hp_attr_ints(n, "kernel_shape", &kv) == ks.rank)
		memcpy(ks.dims, kv, (size_t)ks.rank * sizeof ks.dims[0]);
	else
		return ad_no_grad(ad, n, "kernel_shape missing");
	if (global) {
		w.nsp = ks.rank;
		for (int i = 0; i < w.nsp; i++) {
			w.s[i] = w.d[i] = 1;
			w.pads[i] = w.pads[w.nsp + i] = 0;
		}
	} else if ((rc = window_of(ad, n, &xs, &ys, ks.dims, 0, &w)) < 0) {
		return rc;
	}
	na = window_attrs(&w, a);
	a[na++] = ad_shape("kernel_shape", &ks);
	const int64_t *tag;
	int ntag = global ? -1 : hp_attr_ints(n, "hpdlf_band", &tag);
	if (ntag > 0) /* a band's place in the whole (split_band.c), for split_grad.c */
		a[na++] = ad_ints("hpdlf_band", ntag, tag);
	if (max) {
		int in[2] = { dy[0], n->inputs[0] }, want[1] = { 0 };
		return ad_emit_to(ad, n, "MaxPoolGrad", 2, in, 1, want, na, a);
	}
	int want[1] = { 0 };
	a[na++] = ad_shape("x_shape", &xs);
	a[na++] = ad_int("count_include_pad", hp_attr_int(n, "count_include_pad", 0));
	return ad_emit_to(ad, n, "AveragePoolGrad", 1, dy, 1, want, na, a);
}

/* ---- normalization and softmax ----------------------------------------- */

static int r_norm(struct ad *ad, const struct hp_node *n, const int *dy)
{
	int bn = !strcmp(n->op_type, "BatchNormTrain"), na = 0;
	struct hp_attr a[2];
	int in[3] = { dy[0], n->inputs[0], n->inputs[1] }, want[3] = { 0, 1, in_at(n, 2) >= 0 ? 2 : -1 };

	a[na++] = ad_float("epsilon", hp_attr_float(n, "epsilon", 1e-5f));
	if (!bn)
		a[na++] = ad_int("axis", hp_attr_int(n, "axis", -1));
	return ad_emit_to(ad, n, bn ? "BatchNormGrad" : "LayerNormGrad", 3, in, 3, want, na, a);
}

static int r_softmax(struct ad *ad, const struct hp_node *n, const int *dy)
{
	int legacy = ad->g->opset < 13, in[2] = { dy[0], n->outputs[0] }, want[1] = { 0 };
	struct hp_attr a[2] = { ad_int("axis", hp_attr_int(n, "axis", legacy ? 1 : -1)), ad_int("flatten", legacy) };

	return ad_emit_to(ad, n, strcmp(n->op_type, "Softmax") ? "LogSoftmaxGrad" : "SoftmaxGrad", 2, in, 1, want, 2, a);
}

/* NegativeLogLikelihoodLoss / SoftmaxCrossEntropyLoss: LossGrad recomputes
 * what it needs; SCE's log_prob output may not carry a gradient. */
static int r_loss(struct ad *ad, const struct hp_node *n, const int *dy)
{
	struct hp_attr a[MAXA] = { ad_str("op", n->op_type) };
	int na = 1, in[4] = { dy[0], n->inputs[0], n->inputs[1], in_at(n, 2) }, want[1] = { 0 };

	if (n->noutputs > 1 && dy[1] >= 0)
		return ad_no_grad(ad, n, "log_prob output on the gradient path");
	na += ad_copy_attr(n, "reduction", &a[na]);
	na += ad_copy_attr(n, "ignore_index", &a[na]);
	if (dy[0] < 0)
		return 0;
	return ad_emit_to(ad, n, "LossGrad", in[3] >= 0 ? 4 : 3, in, 1, want, na, a);
}

/* CumSum: the reversed cumulative sum of dY (exclusive stays exclusive). */
static int r_cumsum(struct ad *ad, const struct hp_node *n, const int *dy)
{
	struct hp_attr a[2] = { ad_int("exclusive", hp_attr_int(n, "exclusive", 0)),
				ad_int("reverse", !hp_attr_int(n, "reverse", 0)) };
	int in[2] = { dy[0], n->inputs[1] }, rc, out[1] = { ad_needs(ad, n, 0) };

	if (!out[0])
		return 0;
	rc = ad_emit(ad, "CumSum", 0, n->name, 2, in, 1, out, 2, a); /* the ai.onnx op itself */
	return rc < 0 ? rc : ad_contrib(ad, n->inputs[0], out[0]);
}

/* DepthToSpace (DCR) and SpaceToDepth permute elements and are each other's
 * inverse: dX is the other op applied to dY (the ai.onnx op itself). */
static int r_depth_space(struct ad *ad, const struct hp_node *n, const int *dy)
{
	int d2s = !strcmp(n->op_type, "DepthToSpace"), rc, out[1] = { ad_needs(ad, n, 0) };
	struct hp_attr a[1] = { ad_int("blocksize", hp_attr_int(n, "blocksize", 0)) };

	if (d2s && strcmp(hp_attr_string(n, "mode", "DCR"), "DCR"))
		return ad_no_grad(ad, n, "only mode DCR is differentiable (CRD has no inverse operator)");
	if (!out[0])
		return 0;
	rc = ad_emit(ad, d2s ? "SpaceToDepth" : "DepthToSpace", 0, n->name, 1, dy, 1, out, 1, a);
	return rc < 0 ? rc : ad_contrib(ad, n->inputs[0], out[0]);
}

static int r_lrn(struct ad *ad, const struct hp_node *n, const int *dy)
{
	struct hp_attr a[MAXA];
	int na = 0, in[2] = { dy[0], n->inputs[0] }, want[1] = { 0 };

	for (int k = 0; k < 4; k++)
		na += ad_copy_attr(n, (const char *[]){ "size", "alpha", "beta", "bias" }[k], &a[na]);
	return ad_emit_to(ad, n, "LRNGrad", 2, in, 1, want, na, a);
}

/* GroupNormalization, and InstanceNormalization as C groups of one channel. */
static int r_group_norm(struct ad *ad, const struct hp_node *n, const int *dy)
{
	int inst = !strcmp(n->op_type, "InstanceNormalization"), in[3] = { dy[0], n->inputs[0], n->inputs[1] };
	int want[3] = { 0, 1, 2 };
	struct hp_attr a[2] = { ad_int("num_groups", inst ? shape_of(ad, n->inputs[0]).dims[1] : hp_attr_int(n, "num_groups", 0)),
				ad_float("epsilon", hp_attr_float(n, "epsilon", 1e-5f)) };

	return ad_emit_to(ad, n, "GroupNormGrad", 3, in, 3, want, 2, a);
}

/* ---- shape ops --------------------------------------------------------- */

static int r_reshape(struct ad *ad, const struct hp_node *n, const int *dy)
{
	struct hp_shape xs = shape_of(ad, n->inputs[0]);
	struct hp_attr a[1] = { ad_shape("shape", &xs) };
	int want[1] = { 0 };

	return ad_emit_to(ad, n, "ReshapeGrad", 1, dy, 1, want, 1, a);
}

static int r_transpose(struct ad *ad, const struct hp_node *n, const int *dy)
{
	int r = shape_of(ad, n->inputs[0]).rank, want[1] = { 0 };
	int64_t perm[HP_MAX_RANK];
	const int64_t *p;

	if (hp_attr_ints(n, "perm", &p) == r)
		memcpy(perm, p, (size_t)r * sizeof *perm);
	else
		for (int i = 0; i < r; i++)
			perm[i] = r - 1 - i;
	struct hp_attr a[1] = { ad_ints("perm", r, perm) };
	return ad_emit_to(ad, n, "TransposeGrad", 1, dy, 1, want, 1, a);
}

static int r_concat(struct ad *ad, const struct hp_node *n, const int *dy)
{
	int64_t axis = hp_attr_int(n, "axis", 0), sizes[n->ninputs + 1];
	int r = shape_of(ad, n->outputs[0]).rank, want[n->ninputs + 1];

	axis = axis < 0 ? axis + r : axis;
	for (int k = 0; k < n->ninputs; k++) {
		sizes[k] = shape_of(ad, n->inputs[k]).dims[axis];
		want[k] = k;
	}
	struct hp_attr a[2] = { ad_int("axis", axis), ad_ints("sizes", n->ninputs, sizes) };
	return ad_emit_to(ad, n, "ConcatGrad", 1, dy, n->ninputs, want, 2, a);
}

static int r_split(struct ad *ad, const struct hp_node *n, const int *dy)
{
	struct hp_shape xs = shape_of(ad, n->inputs[0]);
	int64_t axis = hp_attr_int(n, "axis", 0), sizes[n->noutputs + 1];
	int want[1] = { 0 };

	axis = axis < 0 ? axis + xs.rank : axis;
	for (int k = 0; k < n->noutputs; k++) {
		if (n->outputs[k] < 0)
			return ad_no_grad(ad, n, "omitted Split outputs");
		sizes[k] = shape_of(ad, n->outputs[k]).dims[axis];
	}
	struct hp_attr a[3] = { ad_int("axis", axis), ad_ints("sizes", n->noutputs, sizes), ad_shape("x_shape", &xs) };
	return ad_emit_to(ad, n, "SplitGrad", n->noutputs, dy, 1, want, 3, a);
}

static int r_slice(struct ad *ad, const struct hp_node *n, const int *dy)
{
	struct hp_shape xs = shape_of(ad, n->inputs[0]);
	int64_t v[4][HP_MAX_RANK];
	int k[4], want[1] = { 0 }, na = 1;
	static const char *const names[4] = { "starts", "ends", "axes", "steps" };
	struct hp_attr a[5] = { ad_shape("x_shape", &xs) };

	for (int i = 0; i < 4; i++) {
		k[i] = in_at(n, i + 1) >= 0 ? ad_const_ints(ad, n->inputs[i + 1], v[i], HP_MAX_RANK) : -2;
		if (k[i] == -1 || (i < 2 && k[i] < 0))
			return ad_no_grad(ad, n, "Slice parameters must be constant");
		if (k[i] >= 0)
			a[na++] = ad_ints(names[i], k[i], v[i]);
	}
	return ad_emit_to(ad, n, "SliceGrad", 1, dy, 1, want, na, a);
}

static int r_gather(struct ad *ad, const struct hp_node *n, const int *dy)
{
	struct hp_shape xs = shape_of(ad, n->inputs[0]);
	struct hp_attr a[2] = { ad_int("axis", hp_attr_int(n, "axis", 0)), ad_shape("x_shape", &xs) };
	int in[2] = { dy[0], n->inputs[1] }, want[1] = { 0 };

	return ad_emit_to(ad, n, "GatherGrad", 2, in, 1, want, 2, a);
}

static int r_reduce(struct ad *ad, const struct hp_node *n, const int *dy)
{
	struct hp_shape xs = shape_of(ad, n->inputs[0]), ys = shape_of(ad, n->outputs[0]);
	int64_t axes[HP_MAX_RANK];
	const int64_t *av;
	int na = -1, want[1] = { 0 }, nattr = 2;
	float scale = 1;

	if (in_at(n, 1) >= 0 && (na = ad_const_ints(ad, n->inputs[1], axes, HP_MAX_RANK)) < 0)
		return ad_no_grad(ad, n, "axes must be constant");
	if (in_at(n, 1) < 0 && (na = hp_attr_ints(n, "axes", &av)) >= 0)
		memcpy(axes, av, (size_t)na * sizeof *axes);
	if (na == 0 && hp_attr_int(n, "noop_with_empty_axes", 0))
		return r_reshape(ad, n, dy);
	if (!strcmp(n->op_type, "ReduceMean"))
		scale = (float)((double)hp_shape_numel(&ys) / (double)hp_shape_numel(&xs));
	struct hp_attr a[3] = { ad_shape("x_shape", &xs), ad_float("scale", scale) };
	if (na > 0)
		a[nattr++] = ad_ints("axes", na, axes);
	return ad_emit_to(ad, n, "ReduceGrad", 1, dy, 1, want, nattr, a);
}

static int r_resize(struct ad *ad, const struct hp_node *n, const int *dy)
{
	int up = !strcmp(n->op_type, "Upsample"), si = up ? 1 : 2, want[1] = { 0 }, na = 0, k;
	struct hp_shape xs = shape_of(ad, n->inputs[0]);
	float sc[HP_MAX_RANK];
	struct hp_attr a[6];

	a[na++] = ad_shape("x_shape", &xs);
	a[na++] = ad_str("mode", hp_attr_string(n, "mode", "nearest"));
	a[na++] = ad_str("coordinate_transformation_mode",
			 up ? "asymmetric" : hp_attr_string(n, "coordinate_transformation_mode", "half_pixel"));
	a[na++] = ad_str("nearest_mode", up ? "floor" : hp_attr_string(n, "nearest_mode", "round_prefer_floor"));
	if (in_at(n, si) >= 0 && hp_shape_numel(&ad->g->values[n->inputs[si]].shape) > 0) {
		if ((k = const_floats(ad, n->inputs[si], sc, HP_MAX_RANK)) < 0)
			return ad_no_grad(ad, n, "scales must be constant");
		a[na++] = (struct hp_attr){ .name = "scales", .type = HP_ATTR_FLOATS, .n = k, .floats = sc };
	}
	return ad_emit_to(ad, n, "ResizeGrad", 1, dy, 1, want, na, a);
}

/* ---- dispatch ---------------------------------------------------------- */

struct rule {
	const char *op;
	int (*fn)(struct ad *ad, const struct hp_node *n, const int *dy);
};

static const struct rule rules[] = {
	{ "Relu", r_unary }, { "LeakyRelu", r_unary }, { "Elu", r_unary }, { "Selu", r_unary },
	{ "Sigmoid", r_unary }, { "HardSigmoid", r_unary }, { "HardSwish", r_unary }, { "Tanh", r_unary },
	{ "Softplus", r_unary }, { "Softsign", r_unary }, { "Exp", r_unary }, { "Log", r_unary },
	{ "Sqrt", r_unary }, { "Reciprocal", r_unary }, { "Neg", r_unary }, { "Abs", r_unary },
	{ "Erf", r_unary }, { "Gelu", r_unary }, { "Clip", r_unary }, { "Sin", r_unary }, { "Cos", r_unary },
	{ "Mish", r_unary }, { "Identity", r_identity },
	{ "Tan", r_unary }, { "Asin", r_unary }, { "Acos", r_unary }, { "Atan", r_unary }, { "Sinh", r_unary },
	{ "Cosh", r_unary }, { "Asinh", r_unary }, { "Acosh", r_unary }, { "Atanh", r_unary },
	{ "Celu", r_unary }, { "Shrink", r_unary },
	{ "Add", r_binary }, { "Sub", r_binary }, { "Mul", r_binary }, { "Div", r_binary }, { "Pow", r_binary },
	{ "Max", r_binary }, { "Min", r_binary }, { "Sum", r_sum_like }, { "Expand", r_sum_like },
	{ "Where", r_where }, { "DropoutTrain", r_dropout },
	{ "MatMul", r_matmul }, { "MatMulAcc", r_matmul }, { "Gemm", r_gemm }, { "Conv", r_conv }, { "ConvTranspose", r_conv },
	{ "MaxPool", r_pool }, { "AveragePool", r_pool }, { "GlobalMaxPool", r_pool },
	{ "GlobalAveragePool", r_pool },
	{ "BatchNormTrain", r_norm }, { "LayerNormalization", r_norm },
	{ "Softmax", r_softmax }, { "LogSoftmax", r_softmax },
	{ "Reshape", r_reshape }, { "Flatten", r_reshape }, { "Squeeze", r_reshape }, { "Unsqueeze", r_reshape },
	{ "Transpose", r_transpose }, { "Concat", r_concat }, { "Split", r_split }, { "Slice", r_slice },
	{ "Gather", r_gather }, { "ReduceSum", r_reduce }, { "ReduceMean", r_reduce },
	{ "Resize", r_resize }, { "Upsample", r_resize },
	{ "NegativeLogLikelihoodLoss", r_loss }, { "SoftmaxCrossEntropyLoss", r_loss }, { "CumSum", r_cumsum },
	{ "DepthToSpace", r_depth_space }, { "SpaceToDepth", r_depth_space }, { "LRN", r_lrn },
	{ "GroupNormalization", r_group_norm }, { "InstanceNormalization", r_group_norm },
	{ "FusedGelu", r_unary },
};

int ad_has_rule(const char *op)
{
	/* training rewrites these into BatchNormTrain / DropoutTrain, which have rules */
	if (!strcmp(op, "BatchNormalization") || !strcmp(op, "Dropout") || ad_has_rule_ext(op))
		return 1;
	for (size_t i = 0; i < sizeof rules / sizeof rules[0]; i++)
		if (!strcmp(rules[i].op, op))
			return 1;
	return 0;
}

int ad_rule(struct ad *ad, const struct hp_node *n, const int *dy)
{
	int internal = !strcmp(n->domain, "ai.hpdlf"), rc;

	if (n->domain[0] && strcmp(n->domain, "ai.onnx") && !internal)
		return ad_no_grad(ad, n, "operator domain has no gradients");
	for (size_t i = 0; i < sizeof rules / sizeof rules[0]; i++)
		if (!strcmp(rules[i].op, n->op_type)) {
			int is_internal_op = !strcmp(n->op_type, "BatchNormTrain") || !strcmp(n->op_type, "DropoutTrain") ||
					     !strcmp(n->op_type, "MatMulAcc") || !strcmp(n->op_type, "FusedGelu");
			if (internal != is_internal_op)
				break;
			return rules[i].fn(ad, n, dy);
		}
	if (!internal && (rc = ad_rule_ext(ad, n, dy)) != 1)
		return rc;
	return ad_no_grad(ad, n, "no gradient rule for this operator");
}
