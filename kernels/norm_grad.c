/* Training-mode BatchNormalization, and the backward of BatchNormalization,
 * LayerNormalization, Softmax and LogSoftmax (domain ai.hpdlf).  Statistics
 * are accumulated in double in a fixed order. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "hpdlf/error.h"
#include "kernels/eltwise_impl.h"
#include "kernels/norm_sync.h"
#include "kernels/train_util.h"

/* Sums over a channel in double, in 8 lanes (element i of each contiguous
 * run into lane i % 8, the lanes added in one fixed tree at the end): a
 * single running sum was a chain of dependent double adds, and with the
 * loops on one thread BatchNormTrain and BatchNormGrad took a fifth of
 * MobileNetV2's training step.  The order depends on the shape alone, so
 * the bits do not change with threads or budgets (training keeps these
 * nodes whole). */
#define BN_LANES 8

static double lanes_total(const double *a)
{
	return ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]));
}

/* a[i % 8] += x[i] - m (m = 0: the plain sum), or (x[i] - m)^2 with sq. */
HPK_SIMD static void lanes_add(const float *x, int64_t n, double m, int sq, double *acc)
{
	double a[BN_LANES];
	int64_t i = 0;

	memcpy(a, acc, sizeof a);
	if (sq)
		for (; i + BN_LANES <= n; i += BN_LANES)
			for (int l = 0; l < BN_LANES; l++) {
				double d = x[i + l] - m;
				a[l] += d * d;
			}
	else
		for (; i + BN_LANES <= n; i += BN_LANES)
			for (int l = 0; l < BN_LANES; l++)
				a[l] += x[i + l] - m;
	for (int l = 0; i < n; i++, l++) {
		double d = x[i] - m;
		a[l] += sq ? d * d : d;
	}
	memcpy(acc, a, sizeof a);
}

/* Per-channel mean and biased variance of X [N, C, ...]. */
static void channel_stats(const float *x, int64_t nb, int64_t ch, int64_t inner, int64_t c, double *mean,
			  double *var)
{
	double s[BN_LANES] = { 0 }, q[BN_LANES] = { 0 }, cnt = (double)(nb * inner);

	for (int64_t b = 0; b < nb; b++)
		lanes_add(x + (b * ch + c) * inner, inner, 0, 0, s);
	*mean = lanes_total(s) / cnt;
	for (int64_t b = 0; b < nb; b++)
		lanes_add(x + (b * ch + c) * inner, inner, *mean, 1, q);
	*var = lanes_total(q) / cnt;
}

/* y = (x - mean) * inv * scale + bias over one run of a channel. */
HPK_SIMD static void bn_apply(const float *x, float *y, int64_t n, double mean, double inv, float sc, float bi)
{
	for (int64_t i = 0; i < n; i++)
		y[i] = (float)((x[i] - mean) * inv * sc + bi);
}

/* sdy[i % 8] += dy[i], sdyx[i % 8] += dy[i] (x[i] - mean) inv. */
HPK_SIMD static void lanes_grad(const float *dy, const float *x, int64_t n, double mean, double inv, double *sdy,
				double *sdyx)
{
	double a[BN_LANES], q[BN_LANES];
	int64_t i = 0;

	memcpy(a, sdy, sizeof a);
	memcpy(q, sdyx, sizeof q);
	for (; i + BN_LANES <= n; i += BN_LANES)
		for (int l = 0; l < BN_LANES; l++) {
			a[l] += dy[i + l];
			q[l] += dy[i + l] * (x[i + l] - mean) * inv;
		}
	for (int l = 0; i < n; i++, l++) {
		a[l] += dy[i];
		q[l] += dy[i] * (x[i] - mean) * inv;
	}
	memcpy(sdy, a, sizeof a);
	memcpy(sdyx, q, sizeof q);
}

/* dx = sc inv (dy - sdy / cnt - xhat sdyx / cnt) over one run. */
HPK_SIMD static void bn_dx(const float *dy, const float *x, float *dx, int64_t n, double mean, double inv, float sc,
			   double sdy, double sdyx, double cnt)
{
	for (int64_t i = 0; i < n; i++) {
		double xh = (x[i] - mean) * inv;
		dx[i] = (float)(sc * inv * (dy[i] - sdy / cnt - xh * sdyx / cnt));
	}
}

static int check_channels(struct hp_graph *g, struct hp_node *n, int first, int last, int64_t ch)
{
	for (int i = first; i <= last; i++) {
		const struct hp_value *v = tk_in(g, n, i);
		int rc = tk_need_f32(g, n, i, 0);
		if (rc < 0)
			return rc;
		if (hp_shape_numel(&v->shape) != ch)
			return hp_node_error(g, n, HP_ESHAPE, "input %d must have %lld elements", i, (long long)ch);
	}
	return 0;
}

/* ---- BatchNormTrain(X, scale, B, mean, var) -> Y, mean', var' ----------
 * Normalizes with batch statistics; running statistics move as PyTorch's
 * train mode (ONNX momentum m: run = m run + (1 - m) batch; unbiased var). */

static int bn_train_prepare(struct hp_graph *g, struct hp_node *n)
{
	const struct hp_value *x = tk_in(g, n, 0);
	int rc = tk_need_f32(g, n, 0, 0);

	if (rc < 0)
		return rc;
	if (x->shape.rank < 2)
		return hp_node_error(g, n, HP_ESHAPE, "X needs a channel dim");
	if ((rc = check_channels(g, n, 1, 4, x->shape.dims[1])) < 0)
		return rc;
	if (hp_shape_numel(&x->shape) / x->shape.dims[1] < 2)
		return hp_node_error(g, n, HP_ESHAPE, "training needs more than one value per channel");
	tk_set_out(g, n, 0, HP_F32, &x->shape);
	tk_set_out(g, n, 1, HP_F32, &tk_in(g, n, 3)->shape);
	tk_set_out(g, n, 2, HP_F32, &tk_in(g, n, 4)->shape);
	return 0;
}

/* --sync-bn (attribute sync): every channel's statistics over all ranks
 * into st[0..ch) (mean) and st[ch..2ch) (variance), *cnt their count;
 * else *st is NULL and the statistics are this batch's own. */
static int sync_stats(const struct hp_node *n, const float *x, int64_t nb, int64_t ch, int64_t inner, double **st,
		      double *cnt)
{
	int rc;

	*st = NULL;
	if (!hp_attr_int(n, "sync", 0))
		return 0;
	if (!(*st = malloc(2 * (size_t)ch * sizeof **st)))
		return hp_error(-ENOMEM, "out of memory (BatchNorm statistics)");
	if ((rc = tk_bn_sync_stats(x, nb, ch, inner, *st, *st + ch, cnt)) < 0) {
		free(*st);
		*st = NULL;
	}
	return rc;
}

/* Channels per parallel range: about HPK_GRAIN elements (small tensors
 * stay on the calling thread). */
static int64_t bn_grain(int64_t per_channel)
{
	int64_t g = HPK_GRAIN / (per_channel > 0 ? per_channel : 1);

	return g < 1 ? 1 : g;
}

/* One BatchNorm node's channels, for the pool's workers: every channel is
 * computed alike by whichever worker takes it. */
struct bn_job {
	const struct hp_kargs *a;
	int64_t nb, ch, inner;
	double eps, mom, cnt;
	const double *st;        /* --sync-bn statistics, or NULL */
};

static void bn_train_range(void *arg, int64_t c0, int64_t c1, int tid)
{
	const struct bn_job *j = arg;
	const struct hp_kargs *a = j->a;
	const float *x = a->in[0].data, *sc = a->in[1].data, *bi = a->in[2].data;
	const float *rm = a->in[3].data, *rv = a->in[4].data;
	float *y = a->out[0].data;
	float *rm2 = a->nout > 1 ? a->out[1].data : NULL, *rv2 = a->nout > 2 ? a->out[2].data : NULL;

	(void)tid;
	for (int64_t c = c0; c < c1; c++) {
		double mean, var, inv;
		if (j->st) {
			mean = j->st[c];
			var = j->st[j->ch + c];
		} else {
			channel_stats(x, j->nb, j->ch, j->inner, c, &mean, &var);
		}
		inv = 1 / sqrt(var + j->eps);
		for (int64_t b = 0; b < j->nb; b++) {
			int64_t k = (b * j->ch + c) * j->inner;
			bn_apply(x + k, y + k, j->inner, mean, inv, sc[c], bi[c]);
		}
		if (rm2)
			rm2[c] = (float)(j->mom * rm[c] + (1 - j->mom) * mean);
		if (rv2)
			rv2[c] = (float)(j->mom * rv[c] + (1 - j->mom) * var * j->cnt / (j->cnt - 1));
	}
}

static int bn_train_run(const struct hp_node *n, const struct hp_kargs *a)
{
	const struct hp_shape *s = &a->in[0].shape;
	int64_t nb = s->dims[0], ch = s->dims[1], inner = hp_shape_numel(s) / (nb * ch);
	struct bn_job j = { .a = a, .nb = nb, .ch = ch, .inner = inner, .eps = hp_attr_float(n, "epsilon", 1e-5f),
			    .mom = hp_attr_float(n, "momentum", 0.9f), .cnt = (double)(nb * inner) };
	double *st;
	int rc = sync_stats(n, a->in[0].data, nb, ch, inner, &st, &j.cnt);

	if (rc < 0)
		return rc;
	j.st = st;
	hp_parallel_for(a->pool, ch, bn_grain(nb * inner), bn_train_range, &j);
	free(st);
	return 0;
}

const struct hp_op tk_op_bn_train = {
	.domain = TK_DOMAIN, .name = "BatchNormTrain", .min_inputs = 5, .max_inputs = 5,
	.min_outputs = 1, .max_outputs = 3, .prepare = bn_train_prepare, .run = bn_train_run,
};

/* ---- BatchNormGrad(dY, X, scale) -> dX?, dScale?, dB?  (attr epsilon) ---
 * Batch statistics are recomputed from X. */

static int bn_grad_prepare(struct hp_graph *g, struct hp_node *n)
{
	const struct hp_value *x = tk_in(g, n, 1);
	int rc;

	if ((rc = tk_need_f32(g, n, 0, 0)) < 0 || (rc = tk_need_f32(g, n, 1, 0)) < 0)
		return rc;
	if (x->shape.rank < 2 || !hp_shape_equal(&x->shape, &tk_in(g, n, 0)->shape))
		return hp_node_error(g, n, HP_ESHAPE, "dY and X must have equal shapes with a channel dim");
	if ((rc = check_channels(g, n, 2, 2, x->shape.dims[1])) < 0)
		return rc;
	tk_set_out(g, n, 0, HP_F32, &x->shape);
	tk_set_out(g, n, 1, HP_F32, &tk_in(g, n, 2)->shape);
	tk_set_out(g, n, 2, HP_F32, &tk_in(g, n, 2)->shape);
	return 0;
}

/* --sync-bn backward: the sums over dY and dY * xhat of every rank go into
 * dX (each rank's dScale and dB stay its own: the gradient buckets sum
 * those over the ranks). */
static int bn_grad_sync(const struct hp_kargs *a, double eps, const double *st, double cnt)
{
	const struct hp_shape *s = &a->in[1].shape;
	int64_t nb = s->dims[0], ch = s->dims[1], inner = hp_shape_numel(s) / (nb * ch);
	const float *dy = a->in[0].data, *x = a->in[1].data, *sc = a->in[2].data;
	float *dx = a->nout > 0 ? a->out[0].data : NULL, *ds = a->nout > 1 ? a->out[1].data : NULL;
	float *db = a->nout > 2 ? a->out[2].data : NULL;
	double *sum = calloc(2 * (size_t)ch, sizeof *sum);
	int rc;

	if (!sum)
		return hp_error(-ENOMEM, "out of memory (BatchNorm gradient)");
	for (int64_t c = 0; c < ch; c++) {
		double inv = 1 / sqrt(st[ch + c] + eps);
		for (int64_t b = 0; b < nb; b++)
			for (int64_t i = 0; i < inner; i++) {
				int64_t k = (b * ch + c) * inner + i;
				sum[c] += dy[k];
				sum[ch + c] += dy[k] * (x[k] - st[c]) * inv;
			}
		if (ds)
			ds[c] = (float)sum[ch + c];
		if (db)
			db[c] = (float)sum[c];
	}
	if ((rc = tk_rank_sum(sum, 2 * (size_t)ch)) == 0 && dx)
		for (int64_t c = 0; c < ch; c++) {
			double inv = 1 / sqrt(st[ch + c] + eps);
			for (int64_t b = 0; b < nb; b++)
				for (int64_t i = 0; i < inner; i++) {
					int64_t k = (b * ch + c) * inner + i;
					double xh = (x[k] - st[c]) * inv;
					dx[k] = (float)(sc[c] * inv * (dy[k] - sum[c] / cnt - xh * sum[ch + c] / cnt));
				}
		}
	free(sum);
	return rc;
}

static void bn_grad_range(void *arg, int64_t c0, int64_t c1, int tid)
{
	const struct bn_job *j = arg;
	const struct hp_kargs *a = j->a;
	const float *dy = a->in[0].data, *x = a->in[1].data, *sc = a->in[2].data;
	float *dx = a->nout > 0 ? a->out[0].data : NULL, *ds = a->nout > 1 ? a->out[1].data : NULL;
	float *db = a->nout > 2 ? a->out[2].data : NULL;

	(void)tid;
	for (int64_t c = c0; c < c1; c++) {
		double mean, var, inv, sdy[BN_LANES] = { 0 }, sdyx[BN_LANES] = { 0 }, tdy, tdyx;
		channel_stats(x, j->nb, j->ch, j->inner, c, &mean, &var);
		inv = 1 / sqrt(var + j->eps);
		for (int64_t b = 0; b < j->nb; b++) {
			int64_t k = (b * j->ch + c) * j->inner;
			lanes_grad(dy + k, x + k, j->inner, mean, inv, sdy, sdyx);
		}
		tdy = lanes_total(sdy);
		tdyx = lanes_total(sdyx);
		if (ds)
			ds[c] = (float)tdyx;
		if (db)
			db[c] = (float)tdy;
		for (int64_t b = 0; b < j->nb && dx; b++) {
			int64_t k = (b * j->ch + c) * j->inner;
			bn_dx(dy + k, x + k, dx + k, j->inner, mean, inv, sc[c], tdy, tdyx, j->cnt);
		}
	}
}

static int bn_grad_run(const struct hp_node *n, const struct hp_kargs *a)
{
	const struct hp_shape *s = &a->in[1].shape;
	int64_t nb = s->dims[0], ch = s->dims[1], inner = hp_shape_numel(s) / (nb * ch);
	struct bn_job j = { .a = a, .nb = nb, .ch = ch, .inner = inner, .eps = hp_attr_float(n, "epsilon", 1e-5f),
			    .cnt = (double)(nb * inner) };
	double *st;
	int rc = sync_stats(n, a->in[1].data, nb, ch, inner, &st, &j.cnt);

	if (rc < 0 || st) {
		rc = rc < 0 ? rc : bn_grad_sync(a, j.eps, st, j.cnt);
		free(st);
		return rc;
	}
	hp_parallel_for(a->pool, ch, bn_grain(nb * inner), bn_grad_range, &j);
	return 0;
}

const struct hp_op tk_op_bn_grad = {
	.domain = TK_DOMAIN, .name = "BatchNormGrad", .min_inputs = 3, .max_inputs = 3,
	.min_outputs = 1, .max_outputs = 3, .prepare = bn_grad_prepare, .run = bn_grad_run,
};

/* ---- LayerNormGrad(dY, X, scale) -> dX?, dScale?, dB?  (attrs axis, epsilon) */

static int64_t ln_rows(const struct hp_shape *s, int64_t axis, int64_t *inner)
{
	int64_t rows = 1;

	*inner = 1;
	for (int i = 0; i < s->rank; i++)
		*(i < axis ? &rows : inner) *= s->dims[i];
	return rows;
}

static int ln_grad_prepare(struct hp_graph *g, struct hp_node *n)
{
	const struct hp_value *x = tk_in(g, n, 1);
	int64_t axis = hp_attr_int(n, "axis", -1), inner, rows;
	int rc;

	if ((rc = tk_need_f32(g, n, 0, 0)) < 0 || (rc = tk_need_f32(g, n, 1, 0)) < 0)
		return rc;
	if (!hp_shape_equal(&x->shape, &tk_in(g, n, 0)->shape))
		return hp_node_error(g, n, HP_ESHAPE, "dY and X shapes differ");
	if (axis < -x->shape.rank || axis >= x->shape.rank)
		return hp_node_error(g, n, HP_EMODEL, "axis %lld out of range", (long long)axis);
	rows = ln_rows(&x->shape, axis < 0 ? axis + x->shape.rank : axis, &inner);
	if ((rc = check_channels(g, n, 2, 2, inner)) < 0)
		return rc;
	tk_set_out(g, n, 0, HP_F32, &x->shape);
	tk_set_out(g, n, 1, HP_F32, &tk_in(g, n, 2)->shape);
	tk_set_out(g, n, 2, HP_F32, &tk_in(g, n, 2)->shape);
	n->workspace = 2 * (size_t)(inner + rows) * sizeof(double);
	return 0;
}

/* The backward of a LayerNorm in two passes over the pool: rows (each
 * row's statistics and dX, the row's sums in 8 lanes and a fixed tree),
 * then columns (dScale and dB, each column summed over the rows in order).
 * No sum is ever cut, so the bits do not depend on the split or the
 * thread count.  The pass over rows was one thread's chains of dependent
 * double adds. */
struct lng_job {
	int64_t rows, d;
	double eps;
	const float *dy, *x, *sc;
	float *dx, *ds, *db;
	double *mean, *inv; /* per row */
};

/* a[i % 8] += dy[i] sc[i], q[i % 8] += dy[i] sc[i] (x[i] - mean) inv. */
HPK_SIMD static void lanes_ln(const float *dy, const float *x, const float *sc, int64_t n, double mean, double inv,
			      double *a, double *q)
{
	int64_t i = 0;

	for (; i + BN_LANES <= n; i += BN_LANES)
		for (int l = 0; l < BN_LANES; l++) {
			double gx = (double)dy[i + l] * sc[i + l];
			a[l] += gx;
			q[l] += gx * ((x[i + l] - mean) * inv);
		}
	for (int l = 0; i < n; i++, l++) {
		double gx = (double)dy[i] * sc[i];
		a[l] += gx;
		q[l] += gx * ((x[i] - mean) * inv);
	}
}

HPK_SIMD static void ln_dx_row(const float *dy, const float *x, const float *sc, float *dx, int64_t n, double mean,
			       double inv, double s1, double s2)
{
	for (int64_t i = 0; i < n; i++) {
		double xh = (x[i] - mean) * inv;
		dx[i] = (float)(inv * (dy[i] * sc[i] - s1 - xh * s2));
	}
}

static void lng_rows(void *arg, int64_t r0, int64_t r1, int tid)
{
	const struct lng_job *j = arg;
	int64_t d = j->d;

	(void)tid;
	for (int64_t r = r0; r < r1; r++) {
		const float *xr = j->x + r * d, *gr = j->dy + r * d;
		double s[BN_LANES] = { 0 }, q[BN_LANES] = { 0 }, mean, inv;
		lanes_add(xr, d, 0, 0, s);
		mean = lanes_total(s) / (double)d;
		lanes_add(xr, d, mean, 1, q);
		inv = 1 / sqrt(lanes_total(q) / (double)d + j->eps);
		j->mean[r] = mean;
		j->inv[r] = inv;
		if (!j->dx)
			continue;
		memset(s, 0, sizeof s);
		memset(q, 0, sizeof q);
		lanes_ln(gr, xr, j->sc, d, mean, inv, s, q);
		ln_dx_row(gr, xr, j->sc, j->dx + r * d, d, mean, inv, lanes_total(s) / (double)d,
			  lanes_total(q) / (double)d);
	}
}

/* acs[i] += dy[i] (x[i] - mean) inv, acb[i] += dy[i] over one row's columns. */
HPK_SIMD static void ln_cols_row(const float *dy, const float *x, int64_t n, double mean, double inv, double *acs,
				 double *acb)
{
	for (int64_t i = 0; i < n; i++) {
		acs[i] += dy[i] * ((x[i] - mean) * inv);
		acb[i] += dy[i];
	}
}

static void lng_cols(void *arg, int64_t c0, int64_t c1, int tid)
{
	const struct lng_job *j = arg;
	int64_t d = j->d, b0 = c0 * BN_LANES, b1 = c1 * BN_LANES < d ? c1 * BN_LANES : d;
	double *acs = j->inv + j->rows + b0, *acb = acs + d; /* this share's columns of the workspace */

	(void)tid;
	memset(acs, 0, (size_t)(b1 - b0) * sizeof *acs);
	memset(acb, 0, (size_t)(b1 - b0) * sizeof *acb);
	for (int64_t r = 0; r < j->rows; r++)
		ln_cols_row(j->dy + r * d + b0, j->x + r * d + b0, b1 - b0, j->mean[r], j->inv[r], acs, acb);
	for (int64_t i = 0; i < b1 - b0; i++) {
		if (j->ds)
			j->ds[b0 + i] = (float)acs[i];
		if (j->db)
			j->db[b0 + i] = (float)acb[i];
	}
}

/* Elements per share, as the forward LayerNorm's (kernels/norm.c). */
#define LNG_GRAIN (HPK_GRAIN / 8)

static int ln_grad_run(const struct hp_node *n, const struct hp_kargs *a)
{
	const struct hp_shape *s = &a->in[1].shape;
	int64_t axis = hp_attr_int(n, "axis", -1), d;
	struct lng_job j = { .eps = hp_attr_float(n, "epsilon", 1e-5f), .dy = a->in[0].data, .x = a->in[1].data,
			     .sc = a->in[2].data, .dx = a->nout > 0 ? a->out[0].data : NULL,
			     .ds = a->nout > 1 ? a->out[1].data : NULL, .db = a->nout > 2 ? a->out[2].data : NULL };
	int64_t blocks;

	j.rows = ln_rows(s, axis < 0 ? axis + s->rank : axis, &d);
	j.d = d;
	j.mean = a->ws;
	j.inv = j.mean + j.rows;
	if (j.rows <= 0 || d <= 0)
		return 0;
	hp_parallel_for(a->pool, j.rows, LNG_GRAIN / (d + 1) + 1, lng_rows, &j);
	if (!j.ds && !j.db)
		return 0;
	blocks = (d + BN_LANES - 1) / BN_LANES;
	hp_parallel_for(a->pool, blocks, LNG_GRAIN / (j.rows * BN_LANES) + 1, lng_cols, &j);
	return 0;
}

const struct hp_op tk_op_ln_grad = {
	.domain = TK_DOMAIN, .name = "LayerNormGrad", .min_inputs = 3, .max_inputs = 3,
	.min_outputs = 1, .max_outputs = 3, .prepare = ln_grad_prepare, .run = ln_grad_run,
};

/* ---- SoftmaxGrad / LogSoftmaxGrad(dY, Y) -> dX  (attrs axis, flatten) ---
 * flatten=1 is the opset < 13 meaning (softmax over all dims from axis). */

struct sm_geom {
	int64_t outer, len, inner;
};

static int sm_geom(const struct hp_node *n, const struct hp_shape *s, struct sm_geom *gm)
{
	int64_t axis = hp_attr_int(n, "axis", -1);
	int flat = (int)hp_attr_int(n, "flatten", 0);

	if (axis < 0)
		axis += s->rank;
	if (axis < 0 || axis >= (s->rank ? s->rank : 1))
		return -1;
	gm->outer = gm->len = gm->inner = 1;
	for (int i = 0; i < s->rank; i++)
		*(i < axis ? &gm->outer : i == axis || flat ? &gm->len : &gm->inner) *= s->dims[i];
	return 0;
}

static int sm_prepare(struct hp_graph *g, struct hp_node *n)
{
	struct sm_geom gm;
	int rc;

	if ((rc = tk_need_f32(g, n, 0, 0)) < 0 || (rc = tk_need_f32(g, n, 1, 0)) < 0)
		return rc;
	if (!hp_shape_equal(&tk_in(g, n, 0)->shape, &tk_in(g, n, 1)->shape))
		return hp_node_error(g, n, HP_ESHAPE, "dY and Y shapes differ");
	if (sm_geom(n, &tk_in(g, n, 1)->shape, &gm) < 0)
		return hp_node_error(g, n, HP_EMODEL, "axis out of range");
	tk_set_out(g, n, 0, HP_F32, &tk_in(g, n, 1)->shape);
	return 0;
}

/* Sum over a row of dY * Y (Softmax) or of dY (LogSoftmax) in double:
 * products of two floats are exact in double; eight lanes, then a fixed
 * tree, so the bits depend on the row alone. */
static inline double sm_dot(const float *dy, const float *y, int64_t n, int logsm)
{
	hpk_d4 lo = { 0 }, hi = { 0 };
	double l[8];
	int64_t i = 0;

	for (; i + 8 <= n; i += 8) {
		hpk_f4 a, b, c, d;
		memcpy(&a, dy + i, sizeof a);
		memcpy(&b, dy + i + 4, sizeof b);
		hpk_d4 da = __builtin_convertvector(a, hpk_d4), db = __builtin_convertvector(b, hpk_d4);
		if (!logsm) {
			memcpy(&c, y + i, sizeof c);
			memcpy(&d, y + i + 4, sizeof d);
			da *= __builtin_convertvector(c, hpk_d4);
			db *= __builtin_convertvector(d, hpk_d4);
		}
		lo += da;
		hi += db;
	}
	memcpy(l, &lo, sizeof lo);
	memcpy(l + 4, &hi, sizeof hi);
	for (int k = 0; i < n; i++, k++)
		l[k] += logsm ? dy[i] : (double)dy[i] * y[i];
	return ((l[0] + l[4]) + (l[1] + l[5])) + ((l[2] + l[6]) + (l[3] + l[7]));
}

struct sm_job {
	struct sm_geom gm;
	const float *dy, *y;
	float *dx;
	int logsm;
};

/* Positions [b, e) (outer * inner of them), each its own row's sum:
 * the pool's split does not change a bit.  Contiguous rows (inner 1, a
 * Softmax over the last axis: attention's) take sm_dot; a strided axis
 * sums in its order. */
static void sm_range(void *arg, int64_t b, int64_t e, int tid)
{
	const struct sm_job *j = arg;
	int64_t len = j->gm.len, inner = j->gm.inner;

	(void)tid;
	for (int64_t p = b; p < e; p++) {
		int64_t base = p / inner * len * inner + p % inner;
		const float *dy = j->dy + base, *y = j->y + base;
		float *dx = j->dx + base;
		double dot = 0;
		if (inner == 1)
			dot = sm_dot(dy, y, len, j->logsm);
		else
			for (int64_t c = 0; c < len; c++)
				dot += j->logsm ? dy[c * inner] : (double)dy[c * inner] * y[c * inner];
		for (int64_t c = 0; c < len; c++) {
			int64_t k = c * inner;
			dx[k] = (float)(j->logsm ? dy[k] - exp(y[k]) * dot : y[k] * (dy[k] - dot));
		}
	}
}

static int sm_run_common(const struct hp_node *n, const struct hp_kargs *a, int logsm)
{
	struct sm_job j = { .dy = a->in[0].data, .y = a->in[1].data, .dx = a->out[0].data, .logsm = logsm };

	sm_geom(n, &a->in[1].shape, &j.gm);
	hp_parallel_for(a->pool, j.gm.outer * j.gm.inner, HPK_GRAIN / 4 / (j.gm.len + 1) + 1, sm_range, &j);
	return 0;
}

static int softmax_grad_run(const struct hp_node *n, const struct hp_kargs *a)
{
	return sm_run_common(n, a, 0);
}

static int logsoftmax_grad_run(const struct hp_node *n, const struct hp_kargs *a)
{
	return sm_run_common(n, a, 1);
}

const struct hp_op tk_op_softmax_grad = {
	.domain = TK_DOMAIN, .name = "SoftmaxGrad", .min_inputs = 2, .max_inputs = 2,
	.min_outputs = 1, .max_outputs = 1, .prepare = sm_prepare, .run = softmax_grad_run,
};

const struct hp_op tk_op_logsoftmax_grad = {
	.domain = TK_DOMAIN, .name = "LogSoftmaxGrad", .min_inputs = 2, .max_inputs = 2,
	.min_outputs = 1, .max_outputs = 1, .prepare = sm_prepare, .run = logsoftmax_grad_run,
};
