/* Normalizations: BatchNormalization (inference and training mode),
 * LayerNormalization (opset 17), InstanceNormalization, LpNormalization.
 * Statistics accumulate in double, two-pass (mean, then squared deviations),
 * each in a fixed order owned by one thread, so results do not depend on
 * the thread count. */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>

#include "kernels/eltwise_impl.h"

static int need_f32(const struct hp_graph *g, const struct hp_node *n, int i)
{
	const struct hp_value *v = hpk_in(g, n, i);

	if (v && v->dtype != HP_F32)
		return hp_node_error(g, n, HP_EUNSUPPORTED, "input %d ('%s') has dtype %s; float32 is supported", i,
				     v->name, hp_dtype_name(v->dtype));
	return 0;
}

static int need_numel(const struct hp_graph *g, const struct hp_node *n, int i, int64_t want, const char *what)
{
	const struct hp_value *v = hpk_in(g, n, i);
	char s[128];

	if (v && hp_shape_numel(&v->shape) != want)
		return hp_node_error(g, n, HP_ESHAPE, "%s '%s' has shape %s, expected %" PRId64 " elements", what,
				     v->name, hp_shape_str(&v->shape, s, sizeof s), want);
	return 0;
}

/* y = (x - mean) * a + b over a contiguous run (y may alias x). */
HPK_SIMD static void affine(const float *x, float *y, int64_t n, float mean, float a, float b)
{
	for (int64_t i = 0; i < n; i++)
		y[i] = (x[i] - mean) * a + b;
}

/* Mean and population variance of runs x + k*stride, k < nrun, each of len. */
HPK_SIMD static void moments(const float *x, int64_t nrun, int64_t stride, int64_t len, double *mean, double *var)
{
	double s = 0, q = 0, total = (double)nrun * (double)len;

	for (int64_t k = 0; k < nrun; k++)
		s += hpk_sum_f(x + k * stride, len);
	*mean = total > 0 ? s / total : 0;
	for (int64_t k = 0; k < nrun; k++)
		q += hpk_sumsq_f(x + k * stride, (float)*mean, len);
	*var = total > 0 ? q / total : 0;
}

/* ---- BatchNormalization --------------------------------------------- */

struct bn {
	int64_t n, c, s;    /* X viewed as [N, C, S] */
	float eps, momentum;
	int training;
};

static int bn_prepare(struct hp_graph *g, struct hp_node *n)
{
	const struct hp_value *x = hpk_in(g, n, 0);
	struct hp_value *y = hpk_out(g, n, 0);
	struct bn *p;
	int rc, training = (int)hp_attr_int(n, "training_mode", 0);

	for (int i = 0; i < 5; i++)
		if (!hpk_in(g, n, i))
			return hp_node_error(g, n, HP_EMODEL, "input %d is required", i);
	for (int i = 0; i < 5; i++)
		if ((rc = need_f32(g, n, i)) < 0)
			return rc;
	if (x->shape.rank < 2)
		return hp_node_error(g, n, HP_ESHAPE, "X has rank %d; expected N x C x ...", x->shape.rank);
	for (int i = 1; i < 5; i++)
		if ((rc = need_numel(g, n, i, x->shape.dims[1], "per-channel input")) < 0)
			return rc;
	/* opset < 14 has no training_mode: extra outputs mean training */
	if (g->opset < 14 && n->noutputs > 1)
		training = 1;
	if (!training && n->noutputs > 1)
		for (int o = 1; o < n->noutputs; o++)
			if (hpk_out(g, n, o))
				return hp_node_error(g, n, HP_EMODEL, "output %d is only valid with training_mode=1", o);
	if (!(p = calloc(1, sizeof *p)))
		return hp_node_error(g, n, -ENOMEM, "out of memory");
	n->priv = p;
	p->n = x->shape.dims[0];
	p->c = x->shape.dims[1];
	p->s = hpk_prod(x->shape.dims, 2, x->shape.rank);
	p->eps = hp_attr_float(n, "epsilon", 1e-5f);
	p->momentum = hp_attr_float(n, "momentum", 0.9f);
	p->training = training;
	y->dtype = HP_F32;
	y->shape = x->shape;
	for (int o = 1; o < n->noutputs; o++) {
		struct hp_value *v = hpk_out(g, n, o);
		if (v) {
			v->dtype = HP_F32;
			v->shape = (struct hp_shape){ 1, { p->c } };
		}
	}
	if (training)
		n->workspace = (size_t)p->c * 2 * sizeof(double);
	return 0;
}

struct bn_job {
	const struct bn *p;
	const float *x, *scale, *bias, *mean, *var;
	float *y;
	double *bmean, *bvar; /* training: batch statistics per channel */
};

static void bn_apply(void *arg, int64_t b, int64_t e, int tid)
{
	const struct bn_job *j = arg;
	const struct bn *p = j->p;

	(void)tid;
	for (int64_t u = b; u < e; u++) {
		int64_t c = u % p->c;
		double m = j->bmean ? j->bmean[c] : j->mean[c], v = j->bvar ? j->bvar[c] : j->var[c];
		float a = (float)(j->scale[c] / sqrt(v + p->eps));
		affine(j->x + u * p->s, j->y + u * p->s, p->s, (float)m, a, j->bias[c]);
	}
}

static void bn_stats(void *arg, int64_t b, int64_t e, int tid)
{
	const struct bn_job *j = arg;
	const struct bn *p = j->p;

	(void)tid;
	for (int64_t c = b; c < e; c++)
		moments(j->x + c * p->s, p->n, p->c * p->s, p->s, &j->bmean[c], &j->bvar[c]);
}

static int bn_run(const struct hp_node *n, const struct hp_kargs *a)
{
	const struct bn *p = n->priv;
	struct bn_job j = { .p = p, .x = a->in[0].data, .scale = a->in[1].data, .bias = a->in[2].data,
			    .mean = a->in[3].data, .var = a->in[4].data, .y = a->out[0].data };
	int64_t units = p->n * p->c;

	if (p->training) {
		j.bmean = a->ws;
		j.bvar = j.bmean + p->c;
		hp_parallel_for(a->pool, p->c, HPK_GRAIN / (p->n * p->s + 1) + 1, bn_stats, &j);
	}
	hp_parallel_for(a->pool, units, HPK_GRAIN / (p->s + 1) + 1, bn_apply, &j);
	if (!p->training)
		return 0;
	/* running = input * momentum + batch * (1 - momentum); opset < 14 also saved mean/var */
	for (int o = 1; o < a->nout && o < 5; o++) {
		float *r = a->out[o].data;
		if (!r)
			continue;
		for (int64_t c = 0; c < p->c; c++) {
			double bs = o == 1 || o == 3 ? j.bmean[c] : j.bvar[c];
			const float *in = o == 1 ? j.mean : j.var;
			r[c] = o <= 2 ? (float)(in[c] * (double)p->momentum + bs * (1 - (double)p->momentum)) : (float)bs;
		}
	}
	return 0;
}

static double bn_flops(const struct hp_graph *g, const struct hp_node *n)
{
	const struct hp_value *x = hpk_in(g, n, 0);
	const struct bn *p = n->priv;

	return x ? (p && p->training ? 7.0 : 3.0) * (double)hp_shape_numel(&x->shape) : 0;
}

/* ---- LayerNormalization --------------------------------------------- */

struct ln {
	int64_t rows, d;    /* X viewed as [rows, d], d = prod(dims[axis:]) */
	float eps;
	int expand_scale, expand_bias;
	int axis, rank;
	struct hp_shape xs, ss, bs; /* for expanding broadcast Scale/B */
};

/* Scale/B must broadcast into X.shape[axis:] (leading dims all 1). */
static int ln_param(const struct hp_graph *g, const struct hp_node *n, int i, const struct ln *p, int *expand)
{
	const struct hp_value *v = hpk_in(g, n, i);
	char s[128], xs[128];

	*expand = 0;
	if (!v)
		return 0;
	for (int d = 0; d < v->shape.rank; d++) {
		int xd = d + p->rank - v->shape.rank;
		int64_t want = xd >= 0 ? p->xs.dims[xd] : 1, got = v->shape.dims[d];
		if ((xd < p->axis && got != 1) || (got != 1 && got != want))
			return hp_node_error(g, n, HP_ESHAPE, "%s has shape %s, not broadcastable to X %s past axis %d",
					     i == 1 ? "Scale" : "B", hp_shape_str(&v->shape, s, sizeof s),
					     hp_shape_str(&p->xs, xs, sizeof xs), p->axis);
	}
	*expand = hp_shape_numel(&v->shape) != p->d;
	return 0;
}

static int ln_prepare(struct hp_graph *g, struct hp_node *n)
{
	const struct hp_value *x = hpk_in(g, n, 0);
	struct hp_value *y = hpk_out(g, n, 0);
	struct ln *p;
	int rc, ax;

	for (int i = 0; i < n->ninputs; i++)
		if ((rc = need_f32(g, n, i)) < 0)
			return rc;
	if (!hpk_in(g, n, 1))
		return hp_node_error(g, n, HP_EMODEL, "Scale is required");
	if (hp_attr_int(n, "stash_type", 1) != 1)
		return hp_node_error(g, n, HP_EUNSUPPORTED, "stash_type %" PRId64 " (only 1, float32)",
				     hp_attr_int(n, "stash_type", 1));
	if ((rc = hpk_axis(g, n, hp_attr_int(n, "axis", -1), x->shape.rank, &ax)) < 0)
		return rc;
	if (!(p = calloc(1, sizeof *p)))
		return hp_node_error(g, n, -ENOMEM, "out of memory");
	n->priv = p;
	p->axis = ax;
	p->rank = x->shape.rank;
	p->xs = x->shape;
	p->rows = hpk_prod(x->shape.dims, 0, ax);
	p->d = hpk_prod(x->shape.dims, ax, x->shape.rank);
	p->eps = hp_attr_float(n, "epsilon", 1e-5f);
	if ((rc = ln_param(g, n, 1, p, &p->expand_scale)) < 0 || (rc = ln_param(g, n, 2, p, &p->expand_bias)) < 0)
		return rc;
	p->ss = hpk_in(g, n, 1)->shape;
	if (hpk_in(g, n, 2))
		p->bs = hpk_in(g, n, 2)->shape;
	n->workspace = (size_t)(p->expand_scale + p->expand_bias) * (size_t)p->d * sizeof(float);
	y->dtype = HP_F32;
	y->shape = x->shape;
	for (int o = 1; o < n->noutputs; o++) {
		struct hp_value *v = hpk_out(g, n, o);
		if (!v)
			continue;
		v->dtype = HP_F32;
		v->shape = x->shape;
		for (int d = ax; d < x->shape.rank; d++)
			v->shape.dims[d] = 1;
	}
	return 0;
}

/* Expand a broadcast parameter over the d normalized elements. */
static void expand(const struct ln *p, const struct hp_shape *ps, const float *src, float *dst)
{
	for (int64_t i = 0; i < p->d; i++) {
		int64_t rem = i, off = 0, st = 1;
		for (int xd = p->rank - 1; xd >= p->axis; xd--) {
			int pd = xd - (p->rank - ps->rank);
			int64_t c = rem % p->xs.dims[xd];
			rem /= p->xs.dims[xd];
			if (pd < 0)
				continue;
			if (ps->dims[pd] != 1)
				off += c * st;
			st *= ps->dims[pd];
		}
		dst[i] = src[off];
	}
}

struct ln_job {
	const struct ln *p;
	const float *x, *scale, *bias;
	float *y, *mean, *inv;
};

HPK_SIMD static void ln_row(const float *x, float *y, int64_t d, float m, float inv, const float *s, const float *b)
{
	if (b)
		for (int64_t i = 0; i < d; i++)
			y[i] = (x[i] - m) * inv * s[i] + b[i];
	else
		for (int64_t i = 0; i < d; i++)
			y[i] = (x[i] - m) * inv * s[i];
}

static void ln_range(void *arg, int64_t b, int64_t e, int tid)
{
	const struct ln_job *j = arg;
	const struct ln *p = j->p;

	(void)tid;
	for (int64_t r = b; r < e; r++) {
		double mean, var;
		moments(j->x + r * p->d, 1, 0, p->d, &mean, &var);
		double inv = 1.0 / sqrt(var + p->eps);
		ln_row(j->x + r * p->d, j->y + r * p->d, p->d, (float)mean, (float)inv, j->scale, j->bias);
		if (j->mean)
			j->mean[r] = (float)mean;
		if (j->inv)
			j->inv[r] = (float)inv;
	}
}

/* Elements per share of a LayerNorm: an eighth of the element-wise grain.
 * The pool polls between kernels, so splitting a transformer's [256, 128]
 * normalisations pays (GPT-2-style on 2 threads: 5.72 -> 5.63 ms). */
#define LN_GRAIN (HPK_GRAIN / 8)

static int ln_run(const struct hp_node *n, const struct hp_kargs *a)
{
	const struct ln *p = n->priv;
	struct ln_job j = { .p = p, .x = a->in[0].data, .scale = a->in[1].data,
			    .bias = a->nin > 2 ? a->in[2].data : NULL, .y = a->out[0].data,
			    .mean = a->nout > 1 ? a->out[1].data : NULL, .inv = a->nout > 2 ? a->out[2].data : NULL };
	float *ws = a->ws;

	if (p->expand_scale) {
		expand(p, &p->ss, j.scale, ws);
		j.scale = ws;
		ws += p->d;
	}
	if (p->expand_bias && j.bias) {
		expand(p, &p->bs, j.bias, ws);
		j.bias = ws;
	}
	/* rows are independent: any split gives the same bits */
	hp_parallel_for(a->pool, p->rows, LN_GRAIN / (p->d + 1) + 1, ln_range, &j);
	return 0;
}

static double ln_flops(const struct hp_graph *g, const struct hp_node *n)
{
	const struct hp_value *x = hpk_in(g, n, 0);

	return x ? 8.0 * (double)hp_shape_numel(&x->shape) : 0;
}

/* ---- InstanceNormalization ------------------------------------------ */

static int in_prepare(struct hp_graph *g, struct hp_node *n)
{
	const struct hp_value *x = hpk_in(g, n, 0);
	struct hp_value *y = hpk_out(g, n, 0);
	struct bn *p;
	int rc;

	for (int i = 0; i < 3; i++)
		if ((rc = need_f32(g, n, i)) < 0)
			return rc;
	if (x->shape.rank < 3)
		return hp_node_error(g, n, HP_ESHAPE, "input has rank %d; expected N x C x D1 ...", x->shape.rank);
	for (int i = 1; i < 3; i++)
		if ((rc = need_numel(g, n, i, x->shape.dims[1], i == 1 ? "scale" : "B")) < 0)
			return rc;
	if (!(p = calloc(1, sizeof *p)))
		return hp_node_error(g, n, -ENOMEM, "out of memory");
	n->priv = p;
	p->n = x->shape.dims[0];
	p->c = x->shape.dims[1];
	p->s = hpk_prod(x->shape.dims, 2, x->shape.rank);
	p->eps = hp_attr_float(n, "epsilon", 1e-5f);
	y->dtype = HP_F32;
	y->shape = x->shape;
	return 0;
}

static void in_range(void *arg, int64_t b, int64_t e, int tid)
{
	const struct bn_job *j = arg;
	const struct bn *p = j->p;

	(void)tid;
	for (int64_t u = b; u < e; u++) {
		int64_t c = u % p->c;
		double m, v;
		moments(j->x + u * p->s, 1, 0, p->s, &m, &v);
		affine(j->x + u * p->s, j->y + u * p->s, p->s, (float)m, (float)(j->scale[c] / sqrt(v + p->eps)),
		       j->bias[c]);
	}
}

static int in_run(const struct hp_node *n, const struct hp_kargs *a)
{
	const struct bn *p = n->priv;
	struct bn_job j = { .p = p, .x = a->in[0].data, .scale = a->in[1].data, .bias = a->in[2].data,
			    .y = a->out[0].data };

	hp_parallel_for(a->pool, p->n * p->c, HPK_GRAIN / (p->s + 1) + 1, in_range, &j);
	return 0;
}

/* ---- LpNormalization ------------------------------------------------ */

struct lp {
	int64_t outer, len, inner;
	int p;
};

static int lp_prepare(struct hp_graph *g, struct hp_node *n)
{
	const struct hp_value *x = hpk_in(g, n, 0);
	struct hp_value *y = hpk_out(g, n, 0);
	struct lp *p;
	int rc, ax;
	int64_t pn = hp_attr_int(n, "p", 2);

	if ((rc = need_f32(g, n, 0)) < 0)
		return rc;
	if (pn != 1 && pn != 2)
		return hp_node_error(g, n, HP_EUNSUPPORTED, "p = %" PRId64 " (1 or 2)", pn);
	if ((rc = hpk_axis(g, n, hp_attr_int(n, "axis", -1), x->shape.rank, &ax)) < 0)
		return rc;
	if (!(p = calloc(1, sizeof *p)))
		return hp_node_error(g, n, -ENOMEM, "out of memory");
	n->priv = p;
	p->p = (int)pn;
	p->outer = hpk_prod(x->shape.dims, 0, ax);
	p->len = x->shape.rank ? x->shape.dims[ax] : 1;
	p->inner = hpk_prod(x->shape.dims, ax + 1, x->shape.rank);
	y->dtype = HP_F32;
	y->shape = x->shape;
	return 0;
}

struct lp_job {
	const struct lp *p;
	const float *x;
	float *y;
};

static void lp_range(void *arg, int64_t b, int64_t e, int tid)
{
	const struct lp_job *j = arg;
	const struct lp *p = j->p;

	(void)tid;
	for (int64_t u = b; u < e; u++) {
		int64_t base = u / p->inner * p->len * p->inner + u % p->inner;
		double s = 0;
		for (int64_t k = 0; k < p->len; k++) {
			double v = j->x[base + k * p->inner];
			s += p->p == 1 ? fabs(v) : v * v;
		}
		float inv = (float)(1.0 / (p->p == 1 ? s : sqrt(s)));
		for (int64_t k = 0; k < p->len; k++)
			j->y[base + k * p->inner] = j->x[base + k * p->inner] * inv;
	}
}

static int lp_run(const struct hp_node *n, const struct hp_kargs *a)
{
	const struct lp *p = n->priv;
	struct lp_job j = { .p = p, .x = a->in[0].data, .y = a->out[0].data };

	hp_parallel_for(a->pool, p->outer * p->inner, HPK_GRAIN / (p->len + 1) + 1, lp_range, &j);
	return 0;
}

/* ---- table ---------------------------------------------------------- */

static const struct hp_op op_bn = {
	.domain = "", .name = "BatchNormalization", .min_inputs = 5, .max_inputs = 5, .min_outputs = 1,
	.max_outputs = 5, .flags = HP_OP_INPLACE, .prepare = bn_prepare, .run = bn_run, .flops = bn_flops,
};
static const struct hp_op op_ln = {
	.domain = "", .name = "LayerNormalization", .min_inputs = 2, .max_inputs = 3, .min_outputs = 1,
	.max_outputs = 3, .flags = HP_OP_INPLACE, .prepare = ln_prepare, .run = ln_run, .flops = ln_flops,
};
static const struct hp_op op_in = {
	.domain = "", .name = "InstanceNormalization", .min_inputs = 3, .max_inputs = 3, .min_outputs = 1,
	.max_outputs = 1, .flags = HP_OP_INPLACE, .prepare = in_prepare, .run = in_run, .flops = ln_flops,
};
static const struct hp_op op_lp = {
	.domain = "", .name = "LpNormalization", .min_inputs = 1, .max_inputs = 1, .min_outputs = 1,
	.max_outputs = 1, .flags = HP_OP_INPLACE, .prepare = lp_prepare, .run = lp_run,
};

const struct hp_op *const hp_ops_norm[] = { &op_bn, &op_ln, &op_in, &op_lp, NULL };
