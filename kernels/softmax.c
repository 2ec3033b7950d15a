/* Softmax, LogSoftmax and Hardmax.  Opset < 13 coerces the input to 2-D at
 * `axis` (default 1) and normalizes whole rows; opset >= 13 normalizes along
 * one axis (default -1).  Both become [outer, len, inner] loops; the row max
 * is subtracted first and sums accumulate in double, in element order, so
 * results do not depend on the thread count. */
#include <errno.h>
#include <float.h>
#include <inttypes.h>
#include <stdlib.h>

#include "kernels/eltwise_impl.h"

enum smx_kind { SMX_SOFTMAX, SMX_LOG, SMX_HARD };

struct smx {
	enum smx_kind kind;
	int64_t outer, len, inner;
};

#define BLOCK 256 /* inner columns handled together (stack arrays) */

static int smx_prepare(struct hp_graph *g, struct hp_node *n)
{
	const struct hp_value *x = hpk_in(g, n, 0);
	struct hp_value *y = hpk_out(g, n, 0);
	const struct hp_shape *s = &x->shape;
	int64_t axis = hp_attr_int(n, "axis", g->opset < 13 ? 1 : -1);
	struct smx *p;
	int ax, rc;

	if (x->dtype != HP_F32)
		return hp_node_error(g, n, HP_EUNSUPPORTED, "input dtype %s is not supported (float32 only)",
				     hp_dtype_name(x->dtype));
	if ((rc = hpk_axis(g, n, axis, s->rank, &ax)) < 0)
		return rc;
	if (!(p = calloc(1, sizeof *p)))
		return hp_node_error(g, n, -ENOMEM, "out of memory");
	n->priv = p;
	p->kind = !strcmp(n->op_type, "LogSoftmax") ? SMX_LOG : !strcmp(n->op_type, "Hardmax") ? SMX_HARD : SMX_SOFTMAX;
	p->outer = hpk_prod(s->dims, 0, ax);
	if (g->opset < 13) {
		p->len = hpk_prod(s->dims, ax, s->rank);
		p->inner = 1;
	} else {
		p->len = s->rank ? s->dims[ax] : 1;
		p->inner = hpk_prod(s->dims, ax + 1, s->rank);
	}
	y->dtype = HP_F32;
	y->shape = *s;
	return 0;
}

/* sum of exp(x[i] - m); stores the terms to y when set (y may be x). */
HPK_SIMD static double sum_exp(const float *x, float m, float *y, int64_t n)
{
	float buf[BLOCK];
	double sum = 0;

	if (y) {
		for (int64_t i = 0; i < n; i++)
			y[i] = hpk_expf(x[i] - m);
		return hpk_sum_f(y, n);
	}
	for (int64_t i = 0; i < n; i += BLOCK) {
		int64_t w = n - i < BLOCK ? n - i : BLOCK;
		for (int64_t k = 0; k < w; k++)
			buf[k] = hpk_expf(x[i + k] - m);
		sum += hpk_sum_f(buf, w);
	}
	return sum;
}

/* One contiguous row of `len`; y may alias x. */
HPK_SIMD static void row(enum smx_kind kind, const float *x, float *y, int64_t len)
{
	float m = hpk_max_f(x, len);

	if (kind == SMX_HARD) {
		int64_t at = 0;
		while (at < len - 1 && !(x[at] == m))
			at++;
		for (int64_t i = 0; i < len; i++)
			y[i] = i == at ? 1.0f : 0.0f;
	} else if (kind == SMX_SOFTMAX) {
		float inv = (float)(1.0 / sum_exp(x, m, y, len));
		for (int64_t i = 0; i < len; i++)
			y[i] *= inv;
	} else {
		float c = m + (float)log(sum_exp(x, m, NULL, len));
		for (int64_t i = 0; i < len; i++)
			y[i] = x[i] - c;
	}
}

/* `w` columns j of a [len, inner] slab, along len (stride inner). */
HPK_SIMD static void cols(enum smx_kind kind, const float *x, float *y, int64_t len, int64_t inner, int w)
{
	float m[BLOCK];
	double s[BLOCK];

	memcpy(m, x, (size_t)w * sizeof *m);
	for (int64_t k = 1; k < len; k++)
		for (int j = 0; j < w; j++)
			m[j] = x[k * inner + j] > m[j] ? x[k * inner + j] : m[j];
	if (kind == SMX_HARD) {
		int64_t at[BLOCK];
		for (int j = 0; j < w; j++)
			for (at[j] = 0; at[j] < len - 1 && !(x[at[j] * inner + j] == m[j]); at[j]++)
				;
		for (int64_t k = 0; k < len; k++)
			for (int j = 0; j < w; j++)
				y[k * inner + j] = k == at[j] ? 1.0f : 0.0f;
		return;
	}
	for (int j = 0; j < w; j++)
		s[j] = 0;
	for (int64_t k = 0; k < len; k++)
		for (int j = 0; j < w; j++) {
			float e = hpk_expf(x[k * inner + j] - m[j]);
			if (kind == SMX_SOFTMAX)
				y[k * inner + j] = e;
			s[j] += e;
		}
	if (kind == SMX_SOFTMAX) {
		for (int j = 0; j < w; j++)
			m[j] = (float)(1.0 / s[j]);
		for (int64_t k = 0; k < len; k++)
			for (int j = 0; j < w; j++)
				y[k * inner + j] *= m[j];
		return;
	}
	for (int j = 0; j < w; j++)
		m[j] += (float)log(s[j]);
	for (int64_t k = 0; k < len; k++)
		for (int j = 0; j < w; j++)
			y[k * inner + j] = x[k * inner + j] - m[j];
}

struct smx_run {
	const struct smx *p;
	const float *x;
	float *y;
	int64_t nblk; /* column blocks per outer index */
};

static void smx_range(void *arg, int64_t b, int64_t e, int tid)
{
	const struct smx_run *r = arg;
	const struct smx *p = r->p;

	(void)tid;
	for (int64_t u = b; u < e; u++) {
		int64_t o = u / r->nblk, j = (u % r->nblk) * BLOCK;
		size_t off = (size_t)(o * p->len * p->inner + j);
		if (p->inner == 1)
			row(p->kind, r->x + off, r->y + off, p->len);
		else
			cols(p->kind, r->x + off, r->y + off, p->len, p->inner,
			     (int)(p->inner - j < BLOCK ? p->inner - j : BLOCK));
	}
}

static int smx_run(const struct hp_node *n, const struct hp_kargs *a)
{
	const struct smx *p = n->priv;
	struct smx_run r = { .p = p, .x = a->in[0].data, .y = a->out[0].data };
	int64_t per;

	if (p->len == 0 || p->inner == 0 || p->outer == 0) /* empty: an inner dim of 0 divided by zero (fuzz_struct) */
		return 0;
	r.nblk = (p->inner + BLOCK - 1) / BLOCK;
	per = p->len * (p->inner < BLOCK ? p->inner : BLOCK);
	hp_parallel_for(a->pool, p->outer * r.nblk, HPK_GRAIN / 4 / per + 1, smx_range, &r);
	return 0;
}

static double smx_flops(const struct hp_graph *g, const struct hp_node *n)
{
	const struct hp_value *x = hpk_in(g, n, 0);

	return x ? 12.0 * (double)hp_shape_numel(&x->shape) : 0;
}

#define SMX_OP(VAR, NAME)                                                                          \
	static const struct hp_op VAR = { .domain = "", .name = NAME, .min_inputs = 1, .max_inputs = 1, \
					  .min_outputs = 1, .max_outputs = 1, .flags = HP_OP_INPLACE,   \
					  .prepare = smx_prepare, .run = smx_run, .flops = smx_flops }

SMX_OP(op_softmax, "Softmax");
SMX_OP(op_logsoftmax, "LogSoftmax");
SMX_OP(op_hardmax, "Hardmax");

const struct hp_op *const hp_ops_softmax[] = { &op_softmax, &op_logsoftmax, &op_hardmax, NULL };
