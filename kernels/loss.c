/* ONNX's loss operators: NegativeLogLikelihoodLoss(input [N,C,d...], target
 * [N,d...], weight [C]?) and SoftmaxCrossEntropyLoss(scores, labels,
 * weights?) -> (loss, log_prob?), float32 or float64.
 *
 * Position p of class t = target[p] contributes -w[t] * input[n, t, d];
 * a position whose target equals ignore_index contributes nothing and
 * weighs 0.  reduction "none" keeps [N,d...], "sum" adds, "mean" divides
 * by the sum of the weights of the positions counted (their number without
 * weights), as ONNX's reference does.  SoftmaxCrossEntropyLoss is the same
 * over log_softmax(scores, axis 1), which it may also output.  All sums in
 * double, in position order: the result does not depend on threads. */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/eltwise_impl.h"

enum lred { LR_NONE, LR_SUM, LR_MEAN };

struct lpriv {
	int sce;               /* SoftmaxCrossEntropyLoss */
	enum lred red;
	int has_ignore;
	int64_t ignore;
	int64_t outer, classes, inner;
};

static int read_reduction(const struct hp_graph *g, const struct hp_node *n, enum lred *r)
{
	const char *s = hp_attr_string(n, "reduction", "mean");

	*r = !strcmp(s, "none") ? LR_NONE : !strcmp(s, "sum") ? LR_SUM : LR_MEAN;
	if (*r == LR_MEAN && strcmp(s, "mean"))
		return hp_node_error(g, n, HP_EMODEL, "reduction '%s' is not none, sum or mean", s);
	return 0;
}

/* Shapes: target is input's shape without dim 1; weight is [C]. */
static int loss_check(const struct hp_graph *g, const struct hp_node *n)
{
	const struct hp_value *x = hpk_in(g, n, 0), *t = hpk_in(g, n, 1), *w = hpk_in(g, n, 2);

	if (x->dtype != HP_F32 && x->dtype != HP_F64)
		return hp_node_error(g, n, HP_EUNSUPPORTED, "input dtype %s is not supported (float32, float64)",
				     hp_dtype_name(x->dtype));
	if (!t || (t->dtype != HP_I64 && t->dtype != HP_I32))
		return hp_node_error(g, n, HP_EMODEL, "target must be int32 or int64");
	if (x->shape.rank < 2 || t->shape.rank != x->shape.rank - 1)
		return hp_node_error(g, n, HP_ESHAPE, "input must be [N,C,d...] and target [N,d...]");
	for (int i = 0, j = 0; i < x->shape.rank; i++)
		if (i != 1 && t->shape.dims[j++] != x->shape.dims[i])
			return hp_node_error(g, n, HP_ESHAPE, "target dim %d does not match input dim %d", j - 1, i);
	if (w && (w->dtype != x->dtype || w->shape.rank != 1 || w->shape.dims[0] != x->shape.dims[1]))
		return hp_node_error(g, n, HP_ESHAPE, "weight must be a [C] tensor of the input's dtype");
	return 0;
}

/* n->priv and n->workspace from the attributes and the input's shape. */
static int loss_prepare_priv(struct hp_graph *g, struct hp_node *n)
{
	const struct hp_value *x = hpk_in(g, n, 0);
	struct lpriv *p;
	enum lred red;
	int rc = read_reduction(g, n, &red);

	if (rc < 0)
		return rc;
	if (!(p = calloc(1, sizeof *p)))
		return hp_node_error(g, n, -ENOMEM, "out of memory");
	n->priv = p;
	p->sce = !strcmp(n->op_type, "SoftmaxCrossEntropyLoss");
	p->red = red;
	p->has_ignore = hp_node_attr(n, "ignore_index") != NULL;
	p->ignore = hp_attr_int(n, "ignore_index", 0);
	p->outer = x->shape.dims[0];
	p->classes = x->shape.dims[1];
	p->inner = hpk_prod(x->shape.dims, 2, x->shape.rank);
	/* log_prob is needed as scratch even when not an output */
	n->workspace = p->sce ? (size_t)hp_shape_numel(&x->shape) * sizeof(double) : 0;
	return 0;
}

static int loss_prepare(struct hp_graph *g, struct hp_node *n)
{
	const struct hp_value *x = hpk_in(g, n, 0), *t = hpk_in(g, n, 1);
	struct hp_value *y = hpk_out(g, n, 0), *lp = hpk_out(g, n, 1);
	int rc = loss_check(g, n);

	if (rc == 0)
		rc = loss_prepare_priv(g, n);
	if (rc < 0)
		return rc;
	y->dtype = x->dtype;
	y->shape = ((const struct lpriv *)n->priv)->red == LR_NONE ? t->shape : (struct hp_shape){ 0 };
	if (lp) {
		lp->dtype = x->dtype;
		lp->shape = x->shape;
	}
	return 0;
}

static double ldv(const struct hp_tensor *t, int64_t i)
{
	return t->dtype == HP_F64 ? ((const double *)t->data)[i] : ((const float *)t->data)[i];
}

static void stv(struct hp_tensor *t, int64_t i, double v)
{
	if (t->dtype == HP_F64)
		((double *)t->data)[i] = v;
	else
		((float *)t->data)[i] = (float)v;
}

static int64_t ldi(const struct hp_tensor *t, int64_t i)
{
	return t->dtype == HP_I64 ? ((const int64_t *)t->data)[i] : ((const int32_t *)t->data)[i];
}

/* log_softmax over the class dim of x into lp (both [outer, C, inner]). */
static void log_softmax(const struct lpriv *p, const struct hp_tensor *x, double *lp)
{
	for (int64_t o = 0; o < p->outer; o++)
		for (int64_t i = 0; i < p->inner; i++) {
			int64_t base = o * p->classes * p->inner + i;
			double m = -INFINITY, s = 0;
			for (int64_t c = 0; c < p->classes; c++)
				m = fmax(m, ldv(x, base + c * p->inner));
			for (int64_t c = 0; c < p->classes; c++)
				s += exp(ldv(x, base + c * p->inner) - m);
			for (int64_t c = 0; c < p->classes; c++)
				lp[base + c * p->inner] = ldv(x, base + c * p->inner) - m - log(s);
		}
}

static int loss_run(const struct hp_node *n, const struct hp_kargs *a)
{
	const struct lpriv *p = n->priv;
	const struct hp_tensor *x = &a->in[0], *t = &a->in[1], *w = a->nin > 2 && a->in[2].data ? &a->in[2] : NULL;
	double *lp = a->ws, sum = 0, wsum = 0;

	if (p->sce)
		log_softmax(p, x, lp);
	for (int64_t o = 0, k = 0; o < p->outer; o++)
		for (int64_t i = 0; i < p->inner; i++, k++) {
			int64_t c = ldi(t, k), at = (o * p->classes + c) * p->inner + i;
			double wt = 0, l = 0;
			if (!(p->has_ignore && c == p->ignore)) {
				if (c < 0 || c >= p->classes)
					return hp_node_error(NULL, n, HP_EDATA, "target %" PRId64 " at position %" PRId64
							     " is outside [0, %" PRId64 ")", c, k, p->classes);
				wt = w ? ldv(w, c) : 1;
				l = -wt * (p->sce ? lp[at] : ldv(x, at));
			}
			if (p->red == LR_NONE)
				stv(&a->out[0], k, l);
			sum += l;
			wsum += wt;
		}
	if (p->red != LR_NONE)
		stv(&a->out[0], 0, p->red == LR_SUM ? sum : sum / wsum);
	if (p->sce && a->nout > 1 && a->out[1].data)
		for (int64_t i = 0; i < hp_shape_numel(&x->shape); i++)
			stv(&a->out[1], i, lp[i]);
	return 0;
}

/* ---- LossGrad(dLoss, input, target, weight?) -> dInput (ai.hpdlf) --------
 * Attributes: op (the forward op's name), reduction, ignore_index.  Each
 * counted position's coefficient is dLoss (per position for "none") times
 * w[t], divided by the weight sum for "mean"; NLL puts -coef at the
 * target class, SoftmaxCrossEntropyLoss coef * (softmax - onehot). */

static int lgrad_prepare(struct hp_graph *g, struct hp_node *n)
{
	const char *op = hp_attr_string(n, "op", "");
	struct hp_node fwd = *n;
	int rc;

	/* the forward checks see (input, target, weight) */
	fwd.inputs = n->inputs + 1;
	fwd.ninputs = n->ninputs - 1;
	fwd.op_type = (char *)op;
	if (strcmp(op, "NegativeLogLikelihoodLoss") && strcmp(op, "SoftmaxCrossEntropyLoss"))
		return hp_node_error(g, n, HP_EMODEL, "op '%s' is not a loss", op);
	if ((rc = loss_check(g, &fwd)) < 0 || (rc = loss_prepare_priv(g, &fwd)) < 0)
		return rc;
	n->priv = fwd.priv;
	n->workspace = fwd.workspace;
	const struct lpriv *p = n->priv;
	const struct hp_value *dy = hpk_in(g, n, 0);
	if (dy->dtype != hpk_in(g, n, 1)->dtype ||
	    hp_shape_numel(&dy->shape) != (p->red == LR_NONE ? p->outer * p->inner : 1))
		return hp_node_error(g, n, HP_ESHAPE, "dLoss must have the loss's dtype and shape");
	hpk_out(g, n, 0)->dtype = hpk_in(g, n, 1)->dtype;
	hpk_out(g, n, 0)->shape = hpk_in(g, n, 1)->shape;
	return 0;
}

/* The weight sum of the counted positions ("mean" divides by it). */
static double weight_sum(const struct lpriv *p, const struct hp_tensor *t, const struct hp_tensor *w)
{
	double s = 0;

	for (int64_t k = 0; k < p->outer * p->inner; k++) {
		int64_t c = ldi(t, k);
		if (!(p->has_ignore && c == p->ignore) && c >= 0 && c < p->classes)
			s += w ? ldv(w, c) : 1;
	}
	return s;
}

static int lgrad_run(const struct hp_node *n, const struct hp_kargs *a)
{
	const struct lpriv *p = n->priv;
	const struct hp_tensor *dy = &a->in[0], *x = &a->in[1], *t = &a->in[2];
	const struct hp_tensor *w = a->nin > 3 && a->in[3].data ? &a->in[3] : NULL;
	double *lp = a->ws, den = p->red == LR_MEAN ? weight_sum(p, t, w) : 1;
	struct hp_tensor *dx = &a->out[0];

	if (p->sce)
		log_softmax(p, x, lp);
	for (int64_t i = 0; i < hp_shape_numel(&x->shape); i++)
		stv(dx, i, 0);
	for (int64_t o = 0, k = 0; o < p->outer; o++)
		for (int64_t i = 0; i < p->inner; i++, k++) {
			int64_t c = ldi(t, k), base = o * p->classes * p->inner + i;
			if ((p->has_ignore && c == p->ignore) || c < 0 || c >= p->classes)
				continue;
			double coef = ldv(dy, p->red == LR_NONE ? k : 0) * (w ? ldv(w, c) : 1) / den;
			if (!p->sce) {
				stv(dx, base + c * p->inner, -coef);
				continue;
			}
			for (int64_t j = 0; j < p->classes; j++)
				stv(dx, base + j * p->inner, coef * (exp(lp[base + j * p->inner]) - (j == c)));
		}
	return 0;
}

static const struct hp_op op_loss_grad = {
	.domain = "ai.hpdlf", .name = "LossGrad", .min_inputs = 3, .max_inputs = 4,
	.min_outputs = 1, .max_outputs = 1, .prepare = lgrad_prepare, .run = lgrad_run,
};

static const struct hp_op op_nll = {
	.domain = "", .name = "NegativeLogLikelihoodLoss", .min_inputs = 2, .max_inputs = 3,
	.min_outputs = 1, .max_outputs = 1, .prepare = loss_prepare, .run = loss_run,
};

static const struct hp_op op_sce = {
	.domain = "", .name = "SoftmaxCrossEntropyLoss", .min_inputs = 2, .max_inputs = 3,
	.min_outputs = 1, .max_outputs = 2, .prepare = loss_prepare, .run = loss_run,
};

const struct hp_op *const hp_ops_loss[] = { &op_nll, &op_sce, &op_loss_grad, NULL };
