/* ConvInteger(x, w, x_zero_point?, w_zero_point?) -> int32 and
 * QLinearConv(x, x_scale, x_zp, w, w_scale, w_zp, y_scale, y_zp, B?):
 * 2-D convolutions over [N, C, H, W] with pads, strides, dilations and
 * group (auto_pad NOTSET), accumulated exactly in int64; QLinearConv
 * requantizes with per-tensor or per-output-channel weight scales. */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/shape_util.h"
#include "kernels/index_impl.h"

struct qconv {
	int64_t pads[4], strides[2], dil[2], group;
	int ql;            /* QLinearConv */
	int x, w;          /* input slots */
};

static int read_ints(const struct hp_node *n, const char *name, int64_t *v, int k, int64_t dflt)
{
	const int64_t *a;
	int na = hp_attr_ints(n, name, &a);

	for (int i = 0; i < k; i++)
		v[i] = na == k ? a[i] : dflt;
	return na < 0 || na == k ? 0 : -1;
}

static int qconv_prepare(struct hp_graph *g, struct hp_node *n)
{
	struct qconv *p = calloc(1, sizeof *p);
	const struct hp_value *x, *w, *yzp;
	struct hp_shape s;

	if (!p)
		return hp_node_error(g, n, -ENOMEM, "out of memory");
	n->priv = p;
	p->ql = !strcmp(n->op_type, "QLinearConv");
	p->x = 0, p->w = p->ql ? 3 : 1;
	x = hpks_in(g, n, p->x), w = hpks_in(g, n, p->w), yzp = hpks_in(g, n, 7);
	if (x->shape.rank != 4 || w->shape.rank != 4)
		return hp_node_error(g, n, HP_EUNSUPPORTED, "only 2-D convolutions ([N,C,H,W]) are supported");
	if (strcmp(hp_attr_string(n, "auto_pad", "NOTSET"), "NOTSET"))
		return hp_node_error(g, n, HP_EUNSUPPORTED, "auto_pad other than NOTSET is not supported");
	p->group = hp_attr_int(n, "group", 1);
	if (read_ints(n, "pads", p->pads, 4, 0) < 0 || read_ints(n, "strides", p->strides, 2, 1) < 0 ||
	    read_ints(n, "dilations", p->dil, 2, 1) < 0 || p->group < 1 ||
	    x->shape.dims[1] != w->shape.dims[1] * p->group || w->shape.dims[0] % p->group)
		return hp_node_error(g, n, HP_ESHAPE, "pads/strides/dilations/group do not fit the shapes");
	s = (struct hp_shape){ 4, { x->shape.dims[0], w->shape.dims[0], 0, 0 } };
	for (int d = 0; d < 2; d++) {
		int64_t span = p->dil[d] * (w->shape.dims[2 + d] - 1) + 1;
		s.dims[2 + d] = (x->shape.dims[2 + d] + p->pads[d] + p->pads[2 + d] - span) / p->strides[d] + 1;
		if (s.dims[2 + d] < 1)
			return hp_node_error(g, n, HP_ESHAPE, "the kernel is larger than the padded input");
	}
	hpks_set_out(g, n, 0, p->ql ? (yzp ? yzp->dtype : HP_U8) : HP_I32, &s);
	return 0;
}

static int64_t at_or0(const struct hp_kargs *a, int slot, int64_t k)
{
	const struct hp_tensor *t = slot < a->nin && a->in[slot].data ? &a->in[slot] : NULL;

	return !t ? 0 : hpks_get_i(t->data, t->dtype, hp_shape_numel(&t->shape) == 1 ? 0 : k);
}

static double f_at(const struct hp_kargs *a, int slot, int64_t k)
{
	const struct hp_tensor *t = &a->in[slot];

	return hpks_get_f(t->data, t->dtype, hp_shape_numel(&t->shape) == 1 ? 0 : k);
}

/* One output element's int64 accumulator. */
static int64_t qconv_acc(const struct qconv *p, const struct hp_kargs *a, int64_t b, int64_t m, int64_t oh, int64_t ow)
{
	const struct hp_tensor *x = &a->in[p->x], *w = &a->in[p->w];
	int64_t C = x->shape.dims[1], H = x->shape.dims[2], W = x->shape.dims[3];
	int64_t cg = w->shape.dims[1], kh = w->shape.dims[2], kw = w->shape.dims[3], M = w->shape.dims[0];
	int64_t g0 = m / (M / p->group) * cg, xz = at_or0(a, p->ql ? 2 : 2, 0), wz = at_or0(a, p->ql ? 5 : 3, m), acc = 0;

	for (int64_t c = 0; c < cg; c++)
		for (int64_t i = 0; i < kh; i++)
			for (int64_t j = 0; j < kw; j++) {
				int64_t ih = oh * p->strides[0] - p->pads[0] + i * p->dil[0];
				int64_t iw = ow * p->strides[1] - p->pads[1] + j * p->dil[1];
				if (ih < 0 || ih >= H || iw < 0 || iw >= W)
					continue; /* padding holds the zero point: contributes 0 */
				acc += (hpks_get_i(x->data, x->dtype, ((b * C + g0 + c) * H + ih) * W + iw) - xz) *
				       (hpks_get_i(w->data, w->dtype, ((m * cg + c) * kh + i) * kw + j) - wz);
			}
	return acc;
}

static int qconv_run(const struct hp_node *n, const struct hp_kargs *a)
{
	const struct qconv *p = n->priv;
	struct hp_tensor *y = &a->out[0];
	int64_t N = y->shape.dims[0], M = y->shape.dims[1], OH = y->shape.dims[2], OW = y->shape.dims[3];

	for (int64_t b = 0; b < N; b++)
		for (int64_t m = 0; m < M; m++)
			for (int64_t oh = 0; oh < OH; oh++)
				for (int64_t ow = 0; ow < OW; ow++) {
					int64_t acc = qconv_acc(p, a, b, m, oh, ow), at = ((b * M + m) * OH + oh) * OW + ow;
					if (!p->ql) {
						((int32_t *)y->data)[at] = (int32_t)acc;
						continue;
					}
					acc += at_or0(a, 8, m);
					double v = nearbyint((double)acc * f_at(a, 1, 0) * f_at(a, 4, m) / f_at(a, 6, 0)) +
						   (double)at_or0(a, 7, 0);
					double lo = y->dtype == HP_I8 ? -128 : 0, hi = y->dtype == HP_I8 ? 127 : 255;
					hpki_put_i(y->data, y->dtype, at, (int64_t)(v < lo ? lo : v > hi ? hi : v));
				}
	return 0;
}

const struct hp_op hpkq_op_conv_integer = {
	.domain = "", .name = "ConvInteger", .min_inputs = 2, .max_inputs = 4, .min_outputs = 1, .max_outputs = 1,
	.prepare = qconv_prepare, .run = qconv_run,
};

const struct hp_op hpkq_op_qlinear_conv = {
	.domain = "", .name = "QLinearConv", .min_inputs = 8, .max_inputs = 9, .min_outputs = 1, .max_outputs = 1,
	.prepare = qconv_prepare, .run = qconv_run,
};
