/* Backward of Conv and ConvTranspose in 1-3 spatial dims with groups,
 * strides, pads and dilations (domain ai.hpdlf), over im2col/col2im + sgemm.
 *
 * Both ops are described by one geometry: a "big" side (the Conv input, the
 * ConvTranspose output) and a "small" side (the Conv output, the
 * ConvTranspose input), linked by the window (kernel, stride, dilation,
 * pads on the big side).  ConvTranspose's dW is ConvGradFilter with the
 * operands swapped; its forward is ConvGradData. */
#include <cblas.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "hpdlf/error.h"
#include "kernels/train_util.h"

struct cgeom {
	int64_t n, cbig, csmall, group;
	int64_t big[3], small[3], k[3], s[3], d[3], p[3];
	int64_t kvol, bvol, svol;
};

/* Window attributes and spatial sizes; spatial dims beyond nsp are 1. */
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
	c->n = big->dims[0];
	c->cbig = big->dims[1];
	c->csmall = small->dims[1];
	c->group = hp_attr_int(n, "group", 1);
	c->kvol = c->bvol = c->svol = 1;
	for (int i = 0; i < 3; i++) {
		int in = i < nsp;
		c->big[i] = in ? big->dims[2 + i] : 1;
		c->small[i] = in ? small->dims[2 + i] : 1;
		c->k[i] = in ? k[i] : 1;
		c->s[i] = in && ns > 0 ? st[i] : 1;
		c->d[i] = in && nd > 0 ? dl[i] : 1;
		c->p[i] = in && np > 0 ? pd[i] : 0;
		if (c->s[i] < 1 || c->d[i] < 1 || c->k[i] < 1 || c->p[i] < 0)
			return hp_node_error(g, n, HP_EMODEL, "bad window in spatial dim %d", i);
		if ((c->small[i] - 1) * c->s[i] + (c->k[i] - 1) * c->d[i] + 1 > c->big[i] + c->p[i] + (in && np > 0 ? pd[nsp + i] : 0))
			return hp_node_error(g, n, HP_ESHAPE, "spatial dim %d: %lld outputs do not fit %lld inputs", i,
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

/* Big-side image of `ch` channels -> cols [ch * kvol, svol]; col2im adds back. */
static void im2col(const struct cgeom *c, int64_t ch, const float *img, float *cols, int back)
{
	for (int64_t q = 0; q < ch; q++)
		for (int64_t kd = 0; kd < c->k[0]; kd++)
			for (int64_t kh = 0; kh < c->k[1]; kh++)
				for (int64_t kw = 0; kw < c->k[2]; kw++) {
					float *row = cols + ((q * c->k[0] + kd) * c->k[1] * c->k[2] + kh * c->k[2] + kw) * c->svol;
					const float *src = img + q * c->bvol;
					for (int64_t od = 0; od < c->small[0]; od++) {
						int64_t id = od * c->s[0] - c->p[0] + kd * c->d[0];
						for (int64_t oh = 0; oh < c->small[1]; oh++) {
							int64_t ih = oh * c->s[1] - c->p[1] + kh * c->d[1];
							int ok = id >= 0 && id < c->big[0] && ih >= 0 && ih < c->big[1];
							float *r = row + (od * c->small[1] + oh) * c->small[2];
							int64_t base = (id * c->big[1] + ih) * c->big[2];
							for (int64_t ow = 0; ow < c->small[2]; ow++) {
								int64_t iw = ow * c->s[2] - c->p[2] + kw * c->d[2];
								int in = ok && iw >= 0 && iw < c->big[2];
								if (back && in)
									((float *)src)[base + iw] += r[ow];
								else if (!back)
									r[ow] = in ? src[base + iw] : 0.0f;
							}
						}
					}
				}
}

/* ---- ConvGradData(dY, W) -> dX  (attrs x_shape, group, strides, pads, dilations) */

static int conv_data_prepare(struct hp_graph *g, struct hp_node *n)
{
	struct hp_shape xs;
	struct cgeom c;
	const struct hp_value *dy = tk_in(g, n, 0), *w = tk_in(g, n, 1);
	int rc;

	if ((rc = tk_need_f32(g, n, 0, 0)) < 0 || (rc = tk_need_f32(g, n, 1, 0)) < 0 ||
	    (rc = tk_attr_shape(g, n, "x_shape", &xs, 1)) < 0)
		return rc;
	if (w->shape.rank != xs.rank)
		return hp_node_error(g, n, HP_ESHAPE, "W rank does not match X");
	if ((rc = cgeom_init(g, n, &c, &xs, &dy->shape, w->shape.dims + 2)) < 0)
		return rc;
	if (w->shape.dims[0] != c.csmall || w->shape.dims[1] * c.group != c.cbig)
		return hp_node_error(g, n, HP_ESHAPE, "W channels do not match X/dY and group");
	if (!(n->priv = malloc(sizeof c)))
		return hp_node_error(g, n, -ENOMEM, "out of memory");
	memcpy(n->priv, &c, sizeof c);
	n->workspace = (size_t)(c.cbig / c.group * c.kvol * c.svol) * sizeof(float);
	tk_set_out(g, n, 0, HP_F32, &xs);
	return 0;
}

static int conv_data_run(const struct hp_node *n, const struct hp_kargs *a)
{
	const struct cgeom *c = n->priv;
	int64_t cg = c->cbig / c->group, mg = c->csmall / c->group, rows = cg * c->kvol;
	const float *dy = a->in[0].data, *w = a->in[1].data;
	float *dx = a->out[0].data, *cols = a->ws;

	memset(dx, 0, hp_tensor_bytes(&a->out[0]));
	for (int64_t b = 0; b < c->n; b++)
		for (int64_t gi = 0; gi < c->group; gi++) {
			cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)rows, (int)c->svol, (int)mg, 1.0f,
				    w + gi * mg * rows, (int)rows, dy + (b * c->csmall + gi * mg) * c->svol, (int)c->svol,
				    0.0f, cols, (int)c->svol);
			im2col(c, cg, dx + (b * c->cbig + gi * cg) * c->bvol, cols, 1);
		}
	return 0;
}

static double conv_flops(const struct hp_graph *g, const struct hp_node *n)
{
	const struct cgeom *c = n->priv;

	(void)g;
	return c ? 2.0 * (double)(c->n * c->csmall * c->cbig / c->group) * (double)(c->kvol * c->svol) : 0;
}

const struct hp_op tk_op_conv_grad_data = {
	.domain = TK_DOMAIN, .name = "ConvGradData", .min_inputs = 2, .max_inputs = 2,
	.min_outputs = 1, .max_outputs = 1, .prepare = conv_data_prepare, .run = conv_data_run,
	.flops = conv_flops,
};

/* ---- ConvGradFilter(dY, X) -> dW [csmall, cbig/group, k...]  (attrs kernel_shape, ...) */

static int conv_filter_prepare(struct hp_graph *g, struct hp_node *n)
{
	struct hp_shape ks, ws;
	struct cgeom c;
	const struct hp_value *dy = tk_in(g, n, 0), *x = tk_in(g, n, 1);
	int rc;

	if ((rc = tk_need_f32(g, n, 0, 0)) < 0 || (rc = tk_need_f32(g, n, 1, 0)) < 0 ||
	    (rc = tk_attr_shape(g, n, "kernel_shape", &ks, 1)) < 0)
		return rc;
	if (ks.rank != x->shape.rank - 2)
		return hp_node_error(g, n, HP_ESHAPE, "kernel_shape does not match X's spatial rank");
	if ((rc = cgeom_init(g, n, &c, &x->shape, &dy->shape, ks.dims)) < 0)
		return rc;
	if (!(n->priv = malloc(sizeof c)))
		return hp_node_error(g, n, -ENOMEM, "out of memory");
	memcpy(n->priv, &c, sizeof c);
	n->workspace = (size_t)(c.cbig / c.group * c.kvol * c.svol) * sizeof(float);
	ws.rank = x->shape.rank;
	ws.dims[0] = c.csmall;
	ws.dims[1] = c.cbig / c.group;
	memcpy(ws.dims + 2, ks.dims, (size_t)ks.rank * sizeof ks.dims[0]);
	tk_set_out(g, n, 0, HP_F32, &ws);
	return 0;
}

static int conv_filter_run(const struct hp_node *n, const struct hp_kargs *a)
{
	const struct cgeom *c = n->priv;
	int64_t cg = c->cbig / c->group, mg = c->csmall / c->group, rows = cg * c->kvol;
	const float *dy = a->in[0].data, *x = a->in[1].data;
	float *dw = a->out[0].data, *cols = a->ws;

	memset(dw, 0, hp_tensor_bytes(&a->out[0]));
	for (int64_t b = 0; b < c->n; b++)
		for (int64_t gi = 0; gi < c->group; gi++) {
			im2col(c, cg, x + (b * c->cbig + gi * cg) * c->bvol, cols, 0);
			cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)mg, (int)rows, (int)c->svol, 1.0f,
				    dy + (b * c->csmall + gi * mg) * c->svol, (int)c->svol, cols, (int)c->svol, 1.0f,
				    dw + gi * mg * rows, (int)rows);
		}
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
	struct cgeom c;
	const struct hp_value *dy = tk_in(g, n, 0), *w = tk_in(g, n, 1);
	int rc;

	if ((rc = tk_need_f32(g, n, 0, 0)) < 0 || (rc = tk_need_f32(g, n, 1, 0)) < 0 ||
	    (rc = tk_attr_shape(g, n, "x_shape", &xs, 1)) < 0)
		return rc;
	if (w->shape.rank != xs.rank)
		return hp_node_error(g, n, HP_ESHAPE, "W rank does not match X");
	if ((rc = cgeom_init(g, n, &c, &dy->shape, &xs, w->shape.dims + 2)) < 0)
		return rc;
	if (w->shape.dims[0] != c.csmall || w->shape.dims[1] * c.group != c.cbig)
		return hp_node_error(g, n, HP_ESHAPE, "W channels do not match X/dY and group");
	if (!(n->priv = malloc(sizeof c)))
		return hp_node_error(g, n, -ENOMEM, "out of memory");
	memcpy(n->priv, &c, sizeof c);
	n->workspace = (size_t)(c.cbig / c.group * c.kvol * c.svol) * sizeof(float);
	tk_set_out(g, n, 0, HP_F32, &xs);
	return 0;
}

static int convt_data_run(const struct hp_node *n, const struct hp_kargs *a)
{
	const struct cgeom *c = n->priv;
	int64_t mg = c->cbig / c->group, cg = c->csmall / c->group, rows = mg * c->kvol;
	const float *dy = a->in[0].data, *w = a->in[1].data;
	float *dx = a->out[0].data, *cols = a->ws;

	for (int64_t b = 0; b < c->n; b++)
		for (int64_t gi = 0; gi < c->group; gi++) {
			im2col(c, mg, dy + (b * c->cbig + gi * mg) * c->bvol, cols, 0);
			cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)cg, (int)c->svol, (int)rows, 1.0f,
				    w + gi * cg * rows, (int)rows, cols, (int)c->svol, 0.0f,
				    dx + (b * c->csmall + gi * cg) * c->svol, (int)c->svol);
		}
	return 0;
}

const struct hp_op tk_op_convt_grad_data = {
	.domain = TK_DOMAIN, .name = "ConvTransposeGradData", .min_inputs = 2, .max_inputs = 2,
	.min_outputs = 1, .max_outputs = 1, .prepare = convt_data_prepare, .run = convt_data_run,
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
