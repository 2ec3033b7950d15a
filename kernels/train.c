/* Training ops (domain ai.hpdlf): gradient sums, the step counter, losses
 * and optimizer updates, plus the table of every backward op. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "hpdlf/error.h"
#include "kernels/eltwise_impl.h"
#include "kernels/train_util.h"

void tk_set_out(struct hp_graph *g, const struct hp_node *n, int o, enum hp_dtype dt, const struct hp_shape *s)
{
	if (o < n->noutputs && n->outputs[o] >= 0) {
		g->values[n->outputs[o]].dtype = dt;
		g->values[n->outputs[o]].shape = *s;
	}
}

int tk_need_f32(struct hp_graph *g, const struct hp_node *n, int i, int optional)
{
	const struct hp_value *v = tk_in(g, n, i);

	if (!v)
		return optional ? 0 : hp_node_error(g, n, HP_EMODEL, "input %d is required", i);
	if (v->dtype != HP_F32)
		return hp_node_error(g, n, HP_EUNSUPPORTED, "input %d ('%s') is %s, expected float32", i, v->name,
				     hp_dtype_name(v->dtype));
	return 0;
}

int tk_attr_shape(struct hp_graph *g, const struct hp_node *n, const char *name, struct hp_shape *s,
		  int required)
{
	const int64_t *v;
	int k = hp_attr_ints(n, name, &v);

	if (k < 0)
		return required ? hp_node_error(g, n, HP_EMODEL, "attribute '%s' is required", name) : 1;
	if (k > HP_MAX_RANK)
		return hp_node_error(g, n, HP_EUNSUPPORTED, "attribute '%s' has rank %d > %d", name, k, HP_MAX_RANK);
	s->rank = k;
	for (int i = 0; i < k; i++) {
		if (v[i] < 0)
			return hp_node_error(g, n, HP_EMODEL, "attribute '%s' has a negative dim", name);
		s->dims[i] = v[i];
	}
	return 0;
}

int tk_broadcast(struct hp_graph *g, const struct hp_node *n, const struct hp_shape *a,
		 const struct hp_shape *b, struct hp_shape *out)
{
	int r = a->rank > b->rank ? a->rank : b->rank;

	out->rank = r;
	for (int i = 0; i < r; i++) {
		int ia = i - (r - a->rank), ib = i - (r - b->rank);
		int64_t da = ia >= 0 ? a->dims[ia] : 1, db = ib >= 0 ? b->dims[ib] : 1;
		if (da != db && da != 1 && db != 1)
			return hp_node_error(g, n, HP_ESHAPE, "shapes do not broadcast (dim %d: %lld vs %lld)", i,
					     (long long)da, (long long)db);
		out->dims[i] = da == 1 ? db : da;
	}
	return 0;
}

void tk_strides(const struct hp_shape *s, int64_t *st)
{
	int64_t acc = 1;

	for (int i = s->rank - 1; i >= 0; i--) {
		st[i] = acc;
		acc *= s->dims[i];
	}
}

void tk_bcast_strides(const struct hp_shape *out, const struct hp_shape *in, int64_t *st)
{
	int64_t own[HP_MAX_RANK];
	int off = out->rank - in->rank;

	tk_strides(in, own);
	for (int i = 0; i < out->rank; i++) {
		int j = i - off;
		st[i] = j < 0 || in->dims[j] == 1 ? 0 : own[j];
	}
}

int64_t tk_offset(const struct hp_shape *s, const int64_t *st, int64_t i)
{
	int64_t off = 0;

	for (int d = s->rank - 1; d >= 0 && i; d--) {
		off += (i % s->dims[d]) * st[d];
		i /= s->dims[d];
	}
	return off;
}

/* ---- GradSum(g1, ..., gk): the gradient of a value that fans out ------- */

static int grad_sum_prepare(struct hp_graph *g, struct hp_node *n)
{
	const struct hp_value *a = tk_in(g, n, 0);

	for (int i = 0; i < n->ninputs; i++) {
		int rc = tk_need_f32(g, n, i, 0);
		if (rc < 0)
			return rc;
		if (!hp_shape_equal(&g->values[n->inputs[i]].shape, &a->shape))
			return hp_node_error(g, n, HP_ESHAPE, "input %d has a different shape", i);
	}
	tk_set_out(g, n, 0, HP_F32, &a->shape);
	return 0;
}

struct grad_sum_job {
	const struct hp_kargs *a;
	int nin;
};

HPK_SIMD static void add_into(float *y, const float *x, int64_t n)
{
	for (int64_t j = 0; j < n; j++)
		y[j] += x[j];
}

/* Inputs added in their order, element by element: any split gives the same bits.
 * The output may be input 0's tensor (HP_OP_INPLACE: the planner gives it
 * input 0's memory where that dies here); when a later input is that
 * tensor too, the sums of a block are taken in a buffer first (the same
 * additions in the same order). */
#define GRAD_SUM_BLOCK 256
static void grad_sum_range(void *arg, int64_t b, int64_t e, int tid)
{
	const struct grad_sum_job *j = arg;
	float *y = j->a->out[0].data, buf[GRAD_SUM_BLOCK];
	const float *x0 = j->a->in[0].data;
	int alias = 0;

	(void)tid;
	for (int i = 1; i < j->nin; i++)
		alias |= j->a->in[i].data == (const void *)y;
	if (!alias) {
		if (y != x0)
			memcpy(y + b, x0 + b, (size_t)(e - b) * sizeof *y);
		for (int i = 1; i < j->nin; i++)
			add_into(y + b, (const float *)j->a->in[i].data + b, e - b);
		return;
	}
	for (int64_t b0 = b; b0 < e; b0 += GRAD_SUM_BLOCK) {
		int64_t n = e - b0 < GRAD_SUM_BLOCK ? e - b0 : GRAD_SUM_BLOCK;
		memcpy(buf, x0 + b0, (size_t)n * sizeof *buf);
		for (int i = 1; i < j->nin; i++)
			add_into(buf, (const float *)j->a->in[i].data + b0, n);
		memcpy(y + b0, buf, (size_t)n * sizeof *buf);
	}
}

static int grad_sum_run(const struct hp_node *n, const struct hp_kargs *a)
{
	struct grad_sum_job j = { a, n->ninputs };

	hp_parallel_for(a->pool, hp_shape_numel(&a->out[0].shape), HPK_GRAIN, grad_sum_range, &j);
	return 0;
}

const struct hp_op tk_op_grad_sum = {
	.domain = TK_DOMAIN, .name = "GradSum", .min_inputs = 1, .max_inputs = 1 << 20,
	.min_outputs = 1, .max_outputs = 1, .flags = HP_OP_INPLACE, .prepare = grad_sum_prepare,
	.run = grad_sum_run,
};

/* ---- StepInc(step): step + 1 (int64 scalar) ---------------------------- */

static int step_inc_prepare(struct hp_graph *g, struct hp_node *n)
{
	const struct hp_value *s = tk_in(g, n, 0);

	if (!s || s->dtype != HP_I64 || hp_shape_numel(&s->shape) != 1)
		return hp_node_error(g, n, HP_EMODEL, "the step counter must be one int64");
	tk_set_out(g, n, 0, HP_I64, &s->shape);
	return 0;
}

static int step_inc_run(const struct hp_node *n, const struct hp_kargs *a)
{
	(void)n;
	*(int64_t *)a->out[0].data = *(const int64_t *)a->in[0].data + 1;
	return 0;
}

const struct hp_op tk_op_step_inc = {
	.domain = TK_DOMAIN, .name = "StepInc", .min_inputs = 1, .max_inputs = 1,
	.min_outputs = 1, .max_outputs = 1, .flags = HP_OP_NO_FOLD,
	.prepare = step_inc_prepare, .run = step_inc_run,
};

/* ---- SoftmaxCrossEntropy(logits [N,C,d...], labels int64 [N,d...]) -----
 * The mean over label positions not equal to ignore_index (default -100),
 * as torch.nn.functional.cross_entropy.  The backward recomputes softmax. */

struct sce_geom {
	int64_t outer, classes, inner;
};

static int sce_check(struct hp_graph *g, struct hp_node *n, int first)
{
	const struct hp_value *x = tk_in(g, n, first), *l = tk_in(g, n, first + 1);
	int rc = tk_need_f32(g, n, first, 0);

	if (rc < 0)
		return rc;
	if (!l || (l->dtype != HP_I64 && l->dtype != HP_I32))
		return hp_node_error(g, n, HP_EMODEL, "labels must be int64 or int32");
	if (x->shape.rank < 1 || l->shape.rank != (x->shape.rank == 1 ? 0 : x->shape.rank - 1))
		return hp_node_error(g, n, HP_ESHAPE, "labels must have the logits' shape without the class dim");
	for (int i = 0, j = 0; i < x->shape.rank; i++) {
		if (i == 1 || (x->shape.rank == 1 && i == 0))
			continue;
		if (l->shape.dims[j++] != x->shape.dims[i])
			return hp_node_error(g, n, HP_ESHAPE, "labels dim %d does not match logits dim %d", j - 1, i);
	}
	return 0;
}

static struct sce_geom sce_geom(const struct hp_shape *s)
{
	struct sce_geom gm = { 1, s->rank == 1 ? s->dims[0] : s->dims[1], 1 };

	if (s->rank > 1)
		gm.outer = s->dims[0];
	for (int i = 2; i < s->rank; i++)
		gm.inner *= s->dims[i];
	return gm;
}

static int64_t label_at(const struct hp_tensor *l, int64_t i)
{
	return l->dtype == HP_I64 ? ((const int64_t *)l->data)[i] : ((const int32_t *)l->data)[i];
}

static int sce_prepare(struct hp_graph *g, struct hp_node *n)
{
	struct hp_shape s = { 0 };
	int rc = sce_check(g, n, 0);

	if (rc < 0)
		return rc;
	tk_set_out(g, n, 0, HP_F32, &s);
	return 0;
}

static int sce_label(const struct hp_node *n, int64_t lab, int64_t classes, int64_t ignore)
{
	if (lab == ignore)
		return 0;
	if (lab < 0 || lab >= classes)
		return hp_error(HP_EDATA, "node '%s' (%s): label %lld is out of range [0, %lld)", n->name,
				n->op_type, (long long)lab, (long long)classes);
	return 1;
}

/* Log-sum-exps of positions i0 .. i0 + np - 1 of outer slice xs. */
static void sce_lse_block(const float *xs, const struct sce_geom *gm, int64_t i0, int np, double *lse)
{
	if (gm->inner > 1)
		tk_sce_lse_cols(xs, gm->classes, gm->inner, i0, np, lse);
	else
		lse[0] = tk_sce_lse_row(xs, gm->classes);
}

/* Below this many logits the loss and its gradient run on the caller. */
#define SCE_PAR_MIN 16384

/* The positions in blocks of TK_SCE_BLOCK, (outer slice, block) in order,
 * over the pool: each position's log-sum-exp and gradient are computed
 * alone, so their bits do not depend on who computes them (a GPT-2-style
 * loss over 512 classes was 4% of its training step on one thread). */
struct sce_job {
	const struct hp_kargs *a;
	struct sce_geom gm;
	int64_t nblk, ignore;  /* blocks per outer slice */
	double scale;
	double *lse;           /* the forward's: every position's */
	const float *x;
	float *dx;
};

static void sce_lse_range(void *arg, int64_t b, int64_t e, int tid)
{
	const struct sce_job *j = arg;

	(void)tid;
	for (int64_t u = b; u < e; u++) {
		int64_t o = u / j->nblk, i0 = u % j->nblk * TK_SCE_BLOCK;
		int np = j->gm.inner - i0 < TK_SCE_BLOCK ? (int)(j->gm.inner - i0) : TK_SCE_BLOCK;
		sce_lse_block(j->x + o * j->gm.classes * j->gm.inner, &j->gm, i0, np, j->lse + o * j->gm.inner + i0);
	}
}

static void sce_run_blocks(struct sce_job *j, hp_range_fn fn)
{
	int64_t nb = (j->gm.inner + TK_SCE_BLOCK - 1) / TK_SCE_BLOCK;

	j->nblk = nb;
	hp_parallel_for(j->gm.outer * j->gm.classes * j->gm.inner >= SCE_PAR_MIN ? j->a->pool : NULL,
			j->gm.outer * nb, 1, fn, j);
}

static int sce_run(const struct hp_node *n, const struct hp_kargs *a)
{
	struct sce_job j = { .a = a, .gm = sce_geom(&a->in[0].shape), .x = a->in[0].data };
	int64_t ignore = hp_attr_int(n, "ignore_index", -100), count = 0, npos = j.gm.outer * j.gm.inner;
	double sum = 0;

	if (!(j.lse = malloc((size_t)(npos ? npos : 1) * sizeof *j.lse)))
		return hp_error(-ENOMEM, "node '%s' (%s): out of memory", n->name, n->op_type);
	sce_run_blocks(&j, sce_lse_range);
	for (int64_t p = 0; p < npos; p++) { /* positions in order, as before */
		int64_t o = p / j.gm.inner, i = p % j.gm.inner, lab = label_at(&a->in[1], p);
		int rc = sce_label(n, lab, j.gm.classes, ignore);
		if (rc < 0) {
			free(j.lse);
			return rc;
		}
		if (rc) {
			sum += j.lse[p] - j.x[(o * j.gm.classes + lab) * j.gm.inner + i];
			count++;
		}
	}
	free(j.lse);
	*(float *)a->out[0].data = (float)(count ? sum / (double)count : NAN);
	return 0;
}

static double sce_flops(const struct hp_graph *g, const struct hp_node *n)
{
	return 4.0 * (double)hp_shape_numel(&g->values[n->inputs[n->ninputs - 2]].shape);
}

const struct hp_op tk_op_sce = {
	.domain = TK_DOMAIN, .name = "SoftmaxCrossEntropy", .min_inputs = 2, .max_inputs = 2,
	.min_outputs = 1, .max_outputs = 1, .prepare = sce_prepare, .run = sce_run, .flops = sce_flops,
};

/* SoftmaxCrossEntropyGrad(dLoss, logits, labels) -> dLogits */
static int sce_grad_prepare(struct hp_graph *g, struct hp_node *n)
{
	int rc = tk_need_f32(g, n, 0, 0);

	if (rc == 0)
		rc = sce_check(g, n, 1);
	if (rc < 0)
		return rc;
	if (hp_shape_numel(&tk_in(g, n, 0)->shape) != 1)
		return hp_node_error(g, n, HP_ESHAPE, "dLoss must be a scalar");
	tk_set_out(g, n, 0, HP_F32, &tk_in(g, n, 1)->shape);
	return 0;
}

/* dLogits of the positions of blocks [b, e). */
static void sce_grad_range(void *arg, int64_t b, int64_t e, int tid)
{
	const struct sce_job *j = arg;
	const struct sce_geom *gm = &j->gm;

	(void)tid;
	for (int64_t u = b; u < e; u++) {
		int64_t o = u / j->nblk, i0 = u % j->nblk * TK_SCE_BLOCK, base = o * gm->classes * gm->inner;
		int np = gm->inner - i0 < TK_SCE_BLOCK ? (int)(gm->inner - i0) : TK_SCE_BLOCK, keep[TK_SCE_BLOCK];
		int64_t lab[TK_SCE_BLOCK];
		double lse[TK_SCE_BLOCK];
		for (int q = 0; q < np; q++) {
			lab[q] = label_at(&j->a->in[2], o * gm->inner + i0 + q);
			keep[q] = lab[q] != j->ignore;
		}
		sce_lse_block(j->x + base, gm, i0, np, lse);
		if (gm->inner > 1)
			tk_sce_grad_cols(j->x + base, j->dx + base, gm->classes, gm->inner, i0, np, lse, lab, keep,
					 j->scale);
		else if (keep[0])
			tk_sce_grad_row(j->x + base, j->dx + base, gm->classes, lse[0], lab[0], j->scale);
		else
			memset(j->dx + base, 0, (size_t)gm->classes * sizeof *j->dx);
	}
}

static int sce_grad_run(const struct hp_node *n, const struct hp_kargs *a)
{
	struct sce_job j = { .a = a, .gm = sce_geom(&a->in[1].shape), .ignore = hp_attr_int(n, "ignore_index", -100),
			     .x = a->in[1].data, .dx = a->out[0].data };
	int64_t count = 0, npos = j.gm.outer * j.gm.inner;

	for (int64_t p = 0; p < npos; p++) {
		int rc = sce_label(n, label_at(&a->in[2], p), j.gm.classes, j.ignore);
		if (rc < 0)
			return rc;
		count += rc;
	}
	j.scale = count ? *(const float *)a->in[0].data / (double)count : NAN;
	sce_run_blocks(&j, sce_grad_range);
	return 0;
}

const struct hp_op tk_op_sce_grad = {
	.domain = TK_DOMAIN, .name = "SoftmaxCrossEntropyGrad", .min_inputs = 3, .max_inputs = 3,
	.min_outputs = 1, .max_outputs = 1, .prepare = sce_grad_prepare, .run = sce_grad_run,
	.flops = sce_flops,
};

/* ---- MSELoss(pred, target): mean((pred - target)^2) --------------------- */

static int mse_check(struct hp_graph *g, struct hp_node *n, int first)
{
	int rc = tk_need_f32(g, n, first, 0);

	if (rc == 0)
		rc = tk_need_f32(g, n, first + 1, 0);
	if (rc < 0)
		return rc;
	if (!hp_shape_equal(&tk_in(g, n, first)->shape, &tk_in(g, n, first + 1)->shape))
		return hp_node_error(g, n, HP_ESHAPE, "prediction and target shapes differ");
	return 0;
}

static int mse_prepare(struct hp_graph *g, struct hp_node *n)
{
	struct hp_shape s = { 0 };
	int rc = mse_check(g, n, 0);

	if (rc < 0)
		return rc;
	tk_set_out(g, n, 0, HP_F32, &s);
	return 0;
}

static int mse_run(const struct hp_node *n, const struct hp_kargs *a)
{
	int64_t len = hp_shape_numel(&a->in[0].shape);
	const float *p = a->in[0].data, *t = a->in[1].data;
	double s = 0;

	(void)n;
	for (int64_t i = 0; i < len; i++)
		s += ((double)p[i] - t[i]) * ((double)p[i] - t[i]);
	*(float *)a->out[0].data = (float)(s / (double)len);
	return 0;
}

const struct hp_op tk_op_mse = {
	.domain = TK_DOMAIN, .name = "MSELoss", .min_inputs = 2, .max_inputs = 2,
	.min_outputs = 1, .max_outputs = 1, .prepare = mse_prepare, .run = mse_run,
};

/* MSELossGrad(dLoss, pred, target) -> dPred */
static int mse_grad_prepare(struct hp_graph *g, struct hp_node *n)
{
	int rc = tk_need_f32(g, n, 0, 0);

	if (rc == 0)
		rc = mse_check(g, n, 1);
	if (rc < 0)
		return rc;
	tk_set_out(g, n, 0, HP_F32, &tk_in(g, n, 1)->shape);
	return 0;
}

static int mse_grad_run(const struct hp_node *n, const struct hp_kargs *a)
{
	int64_t len = hp_shape_numel(&a->in[1].shape);
	const float *p = a->in[1].data, *t = a->in[2].data;
	double scale = 2.0 * *(const float *)a->in[0].data / (double)len;
	float *d = a->out[0].data;

	(void)n;
	for (int64_t i = 0; i < len; i++)
		d[i] = (float)(scale * ((double)p[i] - t[i]));
	return 0;
}

const struct hp_op tk_op_mse_grad = {
	.domain = TK_DOMAIN, .name = "MSELossGrad", .min_inputs = 3, .max_inputs = 3,
	.min_outputs = 1, .max_outputs = 1, .prepare = mse_grad_prepare, .run = mse_grad_run,
};

/* ---- optimizers ---------------------------------------------------------
 * Formulas transcribed from the torch.optim docs (single-tensor path);
 * float32 state, scalars in double as Python computes them. */

static int update_prepare(struct hp_graph *g, struct hp_node *n, int nstate)
{
	const struct hp_value *w = tk_in(g, n, 0);

	for (int i = 0; i < 2 + nstate; i++) {
		int rc = tk_need_f32(g, n, i, 0);
		if (rc < 0)
			return rc;
		if (!hp_shape_equal(&g->values[n->inputs[i]].shape, &w->shape))
			return hp_node_error(g, n, HP_ESHAPE, "input %d does not have the parameter's shape", i);
	}
	for (int o = 0; o < n->noutputs; o++)
		tk_set_out(g, n, o, HP_F32, &w->shape);
	return 0;
}

/* SGDUpdate(W, G [, B]) -> W' [, B']: momentum buffer B (starts zero, so the
 * first step's B' = G as torch's clone); dampening is not supported. */
static int sgd_prepare(struct hp_graph *g, struct hp_node *n)
{
	int mom = hp_attr_float(n, "momentum", 0) != 0;

	if (hp_attr_float(n, "dampening", 0) != 0)
		return hp_node_error(g, n, HP_EUNSUPPORTED, "dampening is not supported");
	if (mom != (n->ninputs == 3) || n->noutputs != n->ninputs - 1)
		return hp_node_error(g, n, HP_EMODEL, "momentum needs the buffer as input 2 and output 1");
	return update_prepare(g, n, mom);
}

struct sgd_job {
	float lr, mu, wd;
	int nesterov;
	const float *w, *g, *b;
	float *w2, *b2;
};

/* The four variants of the update as separate loops, so each vectorizes
 * with exactly the operations torch does (no "+ 0 * w" when wd is 0). */
HPK_SIMD static void sgd_span(const struct sgd_job *j, int64_t lo, int64_t hi)
{
	const float *w = j->w, *gr = j->g, *b = j->b;
	float *w2 = j->w2, *b2 = j->b2, lr = j->lr, mu = j->mu, wd = j->wd;

	if (!b && wd == 0) {
		for (int64_t i = lo; i < hi; i++)
			w2[i] = w[i] - lr * gr[i];
	} else if (!b) {
		for (int64_t i = lo; i < hi; i++)
			w2[i] = w[i] - lr * (gr[i] + wd * w[i]);
	} else {
		for (int64_t i = lo; i < hi; i++) {
			float d = wd != 0 ? gr[i] + wd * w[i] : gr[i];
			float buf = mu * b[i] + d;
			b2[i] = buf;
			w2[i] = w[i] - lr * (j->nesterov ? d + mu * buf : buf);
		}
	}
}

static void sgd_range(void *arg, int64_t b, int64_t e, int tid)
{
	(void)tid;
	sgd_span(arg, b, e);
}

static int sgd_run(const struct hp_node *n, const struct hp_kargs *a)
{
	struct sgd_job j = {
		.lr = hp_attr_float(n, "lr", 0.01f), .mu = hp_attr_float(n, "momentum", 0),
		.wd = hp_attr_float(n, "weight_decay", 0), .nesterov = (int)hp_attr_int(n, "nesterov", 0),
		.w = a->in[0].data, .g = a->in[1].data, .b = n->ninputs > 2 ? a->in[2].data : NULL,
		.w2 = a->out[0].data, .b2 = n->noutputs > 1 ? a->out[1].data : NULL,
	};

	hp_parallel_for(a->pool, hp_shape_numel(&a->in[0].shape), HPK_GRAIN, sgd_range, &j);
	return 0;
}

static double update_flops(const struct hp_graph *g, const struct hp_node *n)
{
	return 8.0 * (double)hp_shape_numel(&g->values[n->inputs[0]].shape);
}

const struct hp_op tk_op_sgd = {
	.domain = TK_DOMAIN, .name = "SGDUpdate", .min_inputs = 2, .max_inputs = 3,
	.min_outputs = 1, .max_outputs = 2, .flags = HP_OP_NO_FOLD | HP_OP_STATE_INPLACE,
	.prepare = sgd_prepare, .run = sgd_run, .flops = update_flops,
};

/* AdamUpdate(W, G, M, V, step) -> W', M', V'; `step` is the 1-based step of
 * this update.  decoupled=1 is AdamW (decay applied to W, not to G). */
static int adam_prepare(struct hp_graph *g, struct hp_node *n)
{
	const struct hp_value *s = tk_in(g, n, 4);

	if (!s || s->dtype != HP_I64 || hp_shape_numel(&s->shape) != 1)
		return hp_node_error(g, n, HP_EMODEL, "input 4 must be the int64 step counter");
	return update_prepare(g, n, 2);
}

struct adam_job {
	const float *w, *g, *m, *v;
	float *w2, *m2, *v2;
	float step_size, bc2_sqrt, decay, wd, eps, b1, b2;
	int decoupled;
};

HPK_SIMD static void adam_span(const struct adam_job *j, int64_t lo, int64_t hi)
{
	float b1 = j->b1, b2 = j->b2, c1 = 1 - b1, c2 = 1 - b2, wd = j->wd, decay = j->decay;
	int coupled = !j->decoupled && wd != 0;

	for (int64_t i = lo; i < hi; i++) {
		float wi = j->decoupled ? j->w[i] * decay : j->w[i];
		float gi = coupled ? j->g[i] + wd * wi : j->g[i];
		float mi = b1 * j->m[i] + c1 * gi;
		float vi = b2 * j->v[i] + c2 * gi * gi;
		float denom = sqrtf(vi) / j->bc2_sqrt + j->eps;
		j->m2[i] = mi;
		j->v2[i] = vi;
		j->w2[i] = wi - j->step_size * (mi / denom);
	}
}

static void adam_range(void *arg, int64_t b, int64_t e, int tid)
{
	(void)tid;
	adam_span(arg, b, e);
}

/* The job's scalars from the node's attributes and the step (also
 * tk_update_init's: a fused update computes the same floats). */
static int adam_scalars(const struct hp_node *n, int64_t step, struct adam_job *j)
{
	double lr = hp_attr_float(n, "lr", 0.001f), b1 = hp_attr_float(n, "beta1", 0.9f);
	double b2 = hp_attr_float(n, "beta2", 0.999f), eps = hp_attr_float(n, "epsilon", 1e-8f);
	double bc1 = 1 - pow(b1, (double)step), bc2 = 1 - pow(b2, (double)step);
	float wd = hp_attr_float(n, "weight_decay", 0);

	if (step < 1)
		return hp_error(HP_EINTERNAL, "node '%s' (%s): step %lld < 1", n->name, n->op_type, (long long)step);
	j->step_size = (float)(lr / bc1), j->bc2_sqrt = (float)sqrt(bc2), j->decay = (float)(1 - lr * wd);
	j->wd = wd, j->eps = (float)eps, j->b1 = (float)b1, j->b2 = (float)b2;
	j->decoupled = (int)hp_attr_int(n, "decoupled", 0);
	return 0;
}

static int adam_run(const struct hp_node *n, const struct hp_kargs *a)
{
	struct adam_job j = {
		.w = a->in[0].data, .g = a->in[1].data, .m = a->in[2].data, .v = a->in[3].data,
		.w2 = a->out[0].data, .m2 = a->out[1].data, .v2 = a->out[2].data,
	};
	int rc = adam_scalars(n, *(const int64_t *)a->in[4].data, &j);

	if (rc < 0)
		return rc;
	hp_parallel_for(a->pool, hp_shape_numel(&a->in[0].shape), HPK_GRAIN, adam_range, &j);
	return 0;
}

/* ---- an update over pieces of its tensors (train_util.h) ---- */

struct tk_update_job {
	struct sgd_job s;
	struct adam_job a;
};

int tk_update_init(const struct hp_node *n, const struct hp_kargs *a, int adam, int w_in, struct tk_update *u)
{
	struct tk_update_job *j = (struct tk_update_job *)u->job;
	int nst = adam ? 2 : a->nout - 1;

	_Static_assert(sizeof u->job >= sizeof(struct tk_update_job), "tk_update's job too small");
	memset(u, 0, sizeof *u);
	u->adam = adam;
	if (adam) {
		j->a = (struct adam_job){ .w = a->in[w_in].data, .m = a->in[w_in + 1].data, .v = a->in[w_in + 2].data,
					  .w2 = a->out[0].data, .m2 = a->out[1].data, .v2 = a->out[2].data };
		return adam_scalars(n, *(const int64_t *)a->in[w_in + 3].data, &j->a);
	}
	j->s = (struct sgd_job){
		.lr = hp_attr_float(n, "lr", 0.01f), .mu = hp_attr_float(n, "momentum", 0),
		.wd = hp_attr_float(n, "weight_decay", 0), .nesterov = (int)hp_attr_int(n, "nesterov", 0),
		.w = a->in[w_in].data, .b = nst ? a->in[w_in + 1].data : NULL,
		.w2 = a->out[0].data, .b2 = nst ? a->out[1].data : NULL,
	};
	return 0;
}

/* The job's pointers moved to element `at` (the gradient's to g): the
 * span's loop then runs on [0, len) as the whole update's runs on
 * [at, at + len), the same operations on the same values. */
void tk_update_span(const struct tk_update *u, int64_t at, const float *g, int64_t len)
{
	struct tk_update_job j = *(const struct tk_update_job *)u->job;

	if (u->adam) {
		j.a.w += at, j.a.m += at, j.a.v += at, j.a.w2 += at, j.a.m2 += at, j.a.v2 += at;
		j.a.g = g;
		adam_span(&j.a, 0, len);
		return;
	}
	j.s.w += at, j.s.w2 += at;
	if (j.s.b)
		j.s.b += at, j.s.b2 += at;
	j.s.g = g;
	sgd_span(&j.s, 0, len);
}

const struct hp_op tk_op_adam = {
	.domain = TK_DOMAIN, .name = "AdamUpdate", .min_inputs = 5, .max_inputs = 5,
	.min_outputs = 3, .max_outputs = 3, .flags = HP_OP_NO_FOLD | HP_OP_STATE_INPLACE,
	.prepare = adam_prepare, .run = adam_run, .flops = update_flops,
};

const struct hp_op *const hp_ops_train[] = {
	&tk_op_grad_sum, &tk_op_step_inc, &tk_op_sce, &tk_op_sce_grad, &tk_op_mse, &tk_op_mse_grad,
	&tk_op_sgd, &tk_op_adam, &tk_op_allreduce,
	&tk_op_unary_grad, &tk_op_binary_grad, &tk_op_where_grad, &tk_op_dropout_train, &tk_op_dropout_grad,
	&tk_op_matmul_grad, &tk_op_gemm_grad,
	&tk_op_conv_grad_data, &tk_op_conv_grad_filter, &tk_op_convt_grad_data, &tk_op_bias_grad,
	&tk_op_conv_grad_update,
	&tk_op_maxpool_grad, &tk_op_avgpool_grad,
	&tk_op_bn_train, &tk_op_bn_grad, &tk_op_ln_grad, &tk_op_softmax_grad, &tk_op_logsoftmax_grad,
	&tk_op_reshape_grad, &tk_op_transpose_grad, &tk_op_concat_grad, &tk_op_split_grad,
	&tk_op_slice_grad, &tk_op_gather_grad, &tk_op_reduce_grad, &tk_op_resize_grad,
	&tk_op_reduce_scatter, &tk_op_all_gather, &tk_op_shard_slice,
	&tk_op_rnn_grad, &tk_op_gather_elements_grad, &tk_op_scatter_grad, &tk_op_pad_grad,
	NULL,
};
