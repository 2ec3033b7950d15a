/* More normalizations over [N, C, spatial...] float32, in double per
 * output: LRN (across channels), GroupNormalization (scale and bias per
 * group as opset 18 wrote them, or per channel as opset 21 does: told
 * apart by their length) and MeanVarianceNormalization (axes, default
 * 0, 2, 3; divides by std + 1e-9 as ONNX's function body does). */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/eltwise_impl.h"

struct nxpriv {
	int64_t size, groups;
	float alpha, beta, bias, eps;
	int per_channel;      /* GroupNormalization scale/bias of length C */
	unsigned mask;        /* MVN reduced axes */
};

static int nx_start(struct hp_graph *g, struct hp_node *n, struct nxpriv **p, int min_rank)
{
	const struct hp_value *x = hpk_in(g, n, 0);

	if (x->dtype != HP_F32 || x->shape.rank < min_rank)
		return hp_node_error(g, n, HP_EUNSUPPORTED, "input must be float32 of rank >= %d", min_rank);
	if (!(*p = calloc(1, sizeof **p)))
		return hp_node_error(g, n, -ENOMEM, "out of memory");
	n->priv = *p;
	if (hpk_out(g, n, 0)) { /* GroupNormGrad's dX is not wanted for a norm of the model's input */
		hpk_out(g, n, 0)->dtype = HP_F32;
		hpk_out(g, n, 0)->shape = x->shape;
	}
	return 0;
}

/* ---- LRN ------------------------------------------------------------------ */

static int lrn_prepare(struct hp_graph *g, struct hp_node *n)
{
	struct nxpriv *p;
	int rc = nx_start(g, n, &p, 2);

	if (rc < 0)
		return rc;
	p->size = hp_attr_int(n, "size", 0);
	p->alpha = hp_attr_float(n, "alpha", 1e-4f);
	p->beta = hp_attr_float(n, "beta", 0.75f);
	p->bias = hp_attr_float(n, "bias", 1.0f);
	if (p->size < 1)
		return hp_node_error(g, n, HP_EMODEL, "attribute 'size' must be >= 1");
	return 0;
}

/* y = x / (bias + alpha / size * sum of x^2 over channels
 * [c - floor((size-1)/2), c + ceil((size-1)/2)])^beta */
static int lrn_run(const struct hp_node *n, const struct hp_kargs *a)
{
	const struct nxpriv *p = n->priv;
	const struct hp_shape *s = &a->in[0].shape;
	const float *x = a->in[0].data;
	float *y = a->out[0].data;
	int64_t C = s->dims[1], inner = hpk_prod(s->dims, 2, s->rank), lo = (p->size - 1) / 2, hi = p->size / 2;

	for (int64_t b = 0; b < s->dims[0]; b++)
		for (int64_t c = 0; c < C; c++)
			for (int64_t i = 0; i < inner; i++) {
				double sq = 0;
				for (int64_t k = c - lo; k <= c + hi; k++)
					if (k >= 0 && k < C)
						sq += (double)x[(b * C + k) * inner + i] * x[(b * C + k) * inner + i];
				int64_t at = (b * C + c) * inner + i;
				y[at] = (float)(x[at] / pow(p->bias + p->alpha / (double)p->size * sq, p->beta));
			}
	return 0;
}

/* ---- LRNGrad(dY, X) -> dX (ai.hpdlf; LRN's attributes) ----------------------
 * With s_i = bias + alpha/size sum_{j in W(i)} x_j^2 and y_i = x_i s_i^-beta:
 * dx_k = dy_k s_k^-beta - 2 alpha beta / size x_k sum_{i: k in W(i)} dy_i x_i s_i^(-beta-1),
 * where k in W(i) for i in [k - ceil((size-1)/2), k + floor((size-1)/2)]. */

static double lrn_s(const struct nxpriv *p, const float *x, int64_t C, int64_t inner, int64_t b, int64_t c, int64_t i)
{
	double sq = 0;

	for (int64_t k = c - (p->size - 1) / 2; k <= c + p->size / 2; k++)
		if (k >= 0 && k < C)
			sq += (double)x[(b * C + k) * inner + i] * x[(b * C + k) * inner + i];
	return p->bias + p->alpha / (double)p->size * sq;
}

static int lrn_grad_prepare(struct hp_graph *g, struct hp_node *n)
{
	struct hp_node fwd = *n;
	int rc;

	fwd.inputs = n->inputs + 1; /* LRN's checks see X */
	fwd.ninputs = 1;
	if ((rc = lrn_prepare(g, &fwd)) < 0) {
		n->priv = fwd.priv;
		return rc;
	}
	n->priv = fwd.priv;
	if (!hp_shape_equal(&hpk_in(g, n, 0)->shape, &hpk_in(g, n, 1)->shape) || hpk_in(g, n, 0)->dtype != HP_F32)
		return hp_node_error(g, n, HP_ESHAPE, "dY must be float32 of X's shape");
	return 0;
}

static int lrn_grad_run(const struct hp_node *n, const struct hp_kargs *a)
{
	const struct nxpriv *p = n->priv;
	const struct hp_shape *s = &a->in[1].shape;
	const float *dy = a->in[0].data, *x = a->in[1].data;
	float *dx = a->out[0].data;
	int64_t C = s->dims[1], inner = hpk_prod(s->dims, 2, s->rank);

	for (int64_t b = 0; b < s->dims[0]; b++)
		for (int64_t k = 0; k < C; k++)
			for (int64_t i = 0; i < inner; i++) {
				int64_t at = (b * C + k) * inner + i;
				double acc = 0;
				for (int64_t c = k - p->size / 2; c <= k + (p->size - 1) / 2; c++)
					if (c >= 0 && c < C) {
						int64_t ci = (b * C + c) * inner + i;
						acc += dy[ci] * x[ci] * pow(lrn_s(p, x, C, inner, b, c, i), -p->beta - 1);
					}
				dx[at] = (float)(dy[at] * pow(lrn_s(p, x, C, inner, b, k, i), -p->beta) -
						 2 * p->alpha * p->beta / (double)p->size * x[at] * acc);
			}
	return 0;
}

/* ---- GroupNormalization(X, scale, bias) ------------------------------------ */

static int gn_prepare(struct hp_graph *g, struct hp_node *n)
{
	const struct hp_value *x = hpk_in(g, n, 0), *sc = hpk_in(g, n, 1), *bi = hpk_in(g, n, 2);
	struct nxpriv *p;
	int rc = nx_start(g, n, &p, 2);
	int64_t C;

	if (rc < 0)
		return rc;
	C = x->shape.dims[1];
	p->groups = hp_attr_int(n, "num_groups", 0);
	p->eps = hp_attr_float(n, "epsilon", 1e-5f);
	if (p->groups < 1 || C % p->groups)
		return hp_node_error(g, n, HP_EMODEL, "num_groups %" PRId64 " does not divide %" PRId64 " channels",
				     p->groups, C);
	int64_t k = hp_shape_numel(&sc->shape);
	p->per_channel = k == C;
	if (sc->dtype != HP_F32 || bi->dtype != HP_F32 || (k != C && k != p->groups) || hp_shape_numel(&bi->shape) != k)
		return hp_node_error(g, n, HP_ESHAPE, "scale and bias must be float32 of length num_groups or C");
	return 0;
}

static int gn_run(const struct hp_node *n, const struct hp_kargs *a)
{
	const struct nxpriv *p = n->priv;
	const struct hp_shape *s = &a->in[0].shape;
	const float *x = a->in[0].data, *sc = a->in[1].data, *bi = a->in[2].data;
	float *y = a->out[0].data;
	int64_t C = s->dims[1], cpg = C / p->groups, inner = hpk_prod(s->dims, 2, s->rank), m = cpg * inner;

	for (int64_t b = 0; b < s->dims[0]; b++)
		for (int64_t gi = 0; gi < p->groups; gi++) {
			const float *xg = x + (b * C + gi * cpg) * inner;
			double mean = hpk_sum_f(xg, m) / (double)(m ? m : 1);
			double var = hpk_sumsq_f(xg, (float)mean, m) / (double)(m ? m : 1), r = 1 / sqrt(var + p->eps);
			for (int64_t j = 0; j < m; j++) {
				int64_t ch = p->per_channel ? gi * cpg + j / inner : gi;
				y[(b * C + gi * cpg) * inner + j] = (float)((xg[j] - mean) * r * sc[ch] + bi[ch]);
			}
		}
	return 0;
}

/* ---- GroupNormGrad(dY, X, scale) -> (dX, dScale, dBias) (ai.hpdlf) ----------
 * num_groups and epsilon as GroupNormalization's (InstanceNormalization is
 * num_groups = C with per-channel scale).  Per group, with xh the
 * normalized input and g = dY * scale: dX = (g - mean(g) - xh mean(g xh)) / sigma;
 * dScale and dBias sum dY xh and dY over the scale's channel or group. */

static int gn_grad_prepare(struct hp_graph *g, struct hp_node *n)
{
	struct hp_node fwd = *n;
	int out2[2] = { n->noutputs > 0 ? n->outputs[0] : -1, -1 }, rc;
	int in3[3] = { n->inputs[1], n->inputs[2], n->inputs[2] }; /* X, scale, scale for bias */

	fwd.outputs = out2;
	fwd.noutputs = 1;
	fwd.inputs = in3;
	fwd.ninputs = 3;
	rc = gn_prepare(g, &fwd);
	n->priv = fwd.priv;
	if (rc < 0)
		return rc;
	if (!hp_shape_equal(&hpk_in(g, n, 0)->shape, &hpk_in(g, n, 1)->shape) || hpk_in(g, n, 0)->dtype != HP_F32)
		return hp_node_error(g, n, HP_ESHAPE, "dY must be float32 of X's shape");
	for (int o = 1; o < 3 && o < n->noutputs; o++)
		if (n->outputs[o] >= 0) {
			hpk_out(g, n, o)->dtype = HP_F32;
			hpk_out(g, n, o)->shape = hpk_in(g, n, 2)->shape;
		}
	n->workspace = 2 * (size_t)hp_shape_numel(&hpk_in(g, n, 2)->shape) * sizeof(double);
	return 0;
}

/* Per group: mean and 1/sigma of x, then the sums the gradients need;
 * dScale's and dBias's sums go to acc (double, k of each), rounded once at
 * the end (gn_grad_run), as BatchNorm's backward sums are. */
static void gn_grad_group(const struct nxpriv *p, const struct hp_kargs *a, int64_t base, int64_t gi, int64_t m,
			  int64_t inner, double *acc, int64_t k)
{
	const float *dy = a->in[0].data, *x = a->in[1].data, *sc = a->in[2].data;
	float *dx = a->out[0].data;
	int64_t cpg = m / inner;
	double mean = hpk_sum_f(x + base, m) / (double)m, r, mg = 0, mgx = 0;

	r = 1 / sqrt(hpk_sumsq_f(x + base, (float)mean, m) / (double)m + p->eps);
	for (int64_t j = 0; j < m; j++) {
		int64_t ch = p->per_channel ? gi * cpg + j / inner : gi;
		double xh = (x[base + j] - mean) * r, gv = dy[base + j] * sc[ch];
		mg += gv / (double)m, mgx += gv * xh / (double)m;
		acc[ch] += dy[base + j] * xh;
		acc[k + ch] += dy[base + j];
	}
	for (int64_t j = 0; dx && j < m; j++) { /* no dX for a norm of the model's input */
		int64_t ch = p->per_channel ? gi * cpg + j / inner : gi;
		double xh = (x[base + j] - mean) * r;
		dx[base + j] = (float)((dy[base + j] * sc[ch] - mg - xh * mgx) * r);
	}
}

static int gn_grad_run(const struct hp_node *n, const struct hp_kargs *a)
{
	const struct nxpriv *p = n->priv;
	const struct hp_shape *s = &a->in[1].shape;
	int64_t C = s->dims[1], cpg = C / p->groups, inner = hpk_prod(s->dims, 2, s->rank);
	int64_t k = p->per_channel ? C : p->groups;
	double *acc = a->ws;

	memset(acc, 0, 2 * (size_t)k * sizeof *acc);
	for (int64_t b = 0; b < s->dims[0]; b++)
		for (int64_t gi = 0; gi < p->groups; gi++)
			gn_grad_group(p, a, (b * C + gi * cpg) * inner, gi, cpg * inner, inner, acc, k);
	for (int o = 1; o < 3 && o < a->nout; o++)
		for (int64_t c = 0; a->out[o].data && c < k; c++)
			((float *)a->out[o].data)[c] = (float)acc[(o - 1) * k + c];
	return 0;
}

/* ---- MeanVarianceNormalization --------------------------------------------- */

static int mvn_prepare(struct hp_graph *g, struct hp_node *n)
{
	static const int64_t dflt[] = { 0, 2, 3 };
	const int64_t *axes = dflt;
	struct nxpriv *p;
	int rc = nx_start(g, n, &p, 1), na = hp_attr_ints(n, "axes", &axes), ax;

	if (rc < 0)
		return rc;
	if (na < 0)
		axes = dflt, na = 3;
	for (int i = 0; i < na; i++) {
		if ((rc = hpk_axis(g, n, axes[i], hpk_in(g, n, 0)->shape.rank, &ax)) < 0)
			return rc;
		p->mask |= 1u << ax;
	}
	return 0;
}

/* Index of the reduced group of element e: e with the reduced dims zeroed. */
static int64_t kept_index(const struct hp_shape *s, unsigned mask, int64_t e)
{
	int64_t k = 0, st = 1;

	for (int d = s->rank - 1; d >= 0; d--) {
		int64_t i = e % s->dims[d];
		e /= s->dims[d];
		if (!((mask >> d) & 1))
			k += i * st;
		st *= (mask >> d) & 1 ? 1 : s->dims[d];
	}
	return k;
}

static int mvn_run(const struct hp_node *n, const struct hp_kargs *a)
{
	const struct nxpriv *p = n->priv;
	const struct hp_shape *s = &a->in[0].shape;
	const float *x = a->in[0].data;
	int64_t total = hp_shape_numel(s), groups = 1;
	double *acc;

	for (int d = 0; d < s->rank; d++)
		groups *= (p->mask >> d) & 1 ? 1 : s->dims[d];
	if (!(acc = calloc((size_t)(3 * groups + 1), sizeof *acc)))
		return hp_node_error(NULL, n, -ENOMEM, "out of memory");
	for (int64_t e = 0; e < total; e++) {
		int64_t k = kept_index(s, p->mask, e);
		acc[k] += x[e], acc[groups + k] += (double)x[e] * x[e], acc[2 * groups + k] += 1;
	}
	for (int64_t e = 0; e < total; e++) {
		int64_t k = kept_index(s, p->mask, e);
		double mean = acc[k] / acc[2 * groups + k], sq = acc[groups + k] / acc[2 * groups + k];
		((float *)a->out[0].data)[e] = (float)((x[e] - mean) / (sqrt(fmax(sq - mean * mean, 0)) + 1e-9));
	}
	free(acc);
	return 0;
}

#define NX_OP(VAR, NAME, MIN, MAX, PREP, RUN)                                                            \
	static const struct hp_op VAR = { .domain = "", .name = NAME, .min_inputs = MIN, .max_inputs = MAX,       \
					  .min_outputs = 1, .max_outputs = 1, .prepare = PREP, .run = RUN }

NX_OP(hpkn_op_lrn, "LRN", 1, 1, lrn_prepare, lrn_run);
NX_OP(hpkn_op_group_norm, "GroupNormalization", 3, 3, gn_prepare, gn_run);
NX_OP(hpkn_op_mvn, "MeanVarianceNormalization", 1, 1, mvn_prepare, mvn_run);

static const struct hp_op hpkn_op_lrn_grad = {
	.domain = "ai.hpdlf", .name = "LRNGrad", .min_inputs = 2, .max_inputs = 2, .min_outputs = 1, .max_outputs = 1,
	.prepare = lrn_grad_prepare, .run = lrn_grad_run,
};

static const struct hp_op hpkn_op_gn_grad = {
	.domain = "ai.hpdlf", .name = "GroupNormGrad", .min_inputs = 3, .max_inputs = 3, .min_outputs = 1,
	.max_outputs = 3, .prepare = gn_grad_prepare, .run = gn_grad_run,
};

const struct hp_op *const hp_ops_norm_extra[] = { &hpkn_op_lrn, &hpkn_op_group_norm, &hpkn_op_mvn, &hpkn_op_lrn_grad,
						  &hpkn_op_gn_grad, NULL };
