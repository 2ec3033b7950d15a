/* The recurrence of RNN, GRU and LSTM: activations, output shapes and the
 * per-direction time loop (see rnn.c for the conventions). */
#include <math.h>
#include <string.h>
#include <strings.h>

#include "kernels/eltwise_impl.h"
#include "kernels/rnn_impl.h"

enum { AK_RELU, AK_TANH, AK_SIGMOID, AK_AFFINE, AK_LEAKY, AK_THR, AK_SCALED_TANH, AK_HARDSIG, AK_ELU,
       AK_SOFTSIGN, AK_SOFTPLUS };

int hpkr_act_parse(const char *name, struct rnn_act *a)
{
	static const struct { const char *name; int np; float alpha, beta; } t[] = {
		{ "Relu", 0, 0, 0 }, { "Tanh", 0, 0, 0 }, { "Sigmoid", 0, 0, 0 }, { "Affine", 2, 1, 0 },
		{ "LeakyRelu", 1, 0.01f, 0 }, { "ThresholdedRelu", 1, 1, 0 }, { "ScaledTanh", 2, 1, 1 },
		{ "HardSigmoid", 2, 0.2f, 0.5f }, { "Elu", 1, 1, 0 }, { "Softsign", 0, 0, 0 }, { "Softplus", 0, 0, 0 },
	};

	for (int k = 0; k < (int)(sizeof t / sizeof t[0]); k++)
		if (!strcasecmp(name, t[k].name)) {
			*a = (struct rnn_act){ k, t[k].np, t[k].alpha, t[k].beta };
			return 0;
		}
	return -1;
}

double hpkr_act(const struct rnn_act *a, double x)
{
	switch (a->kind) {
	case AK_RELU: return x > 0 ? x : 0;
	case AK_TANH: return tanh(x);
	case AK_SIGMOID: return 1 / (1 + exp(-x));
	case AK_AFFINE: return a->alpha * x + a->beta;
	case AK_LEAKY: return x >= 0 ? x : a->alpha * x;
	case AK_THR: return x > a->alpha ? x : 0;
	case AK_SCALED_TANH: return a->alpha * tanh(a->beta * x);
	case AK_HARDSIG: return fmax(0, fmin(1, a->alpha * x + a->beta));
	case AK_ELU: return x >= 0 ? x : a->alpha * (exp(x) - 1);
	case AK_SOFTSIGN: return x / (1 + fabs(x));
	default: return log1p(exp(x));
	}
}

double hpkr_dact(const struct rnn_act *a, double x)
{
	double t, s, v;

	switch (a->kind) {
	case AK_RELU: return x > 0;
	case AK_TANH: t = tanh(x); return 1 - t * t;
	case AK_SIGMOID: s = 1 / (1 + exp(-x)); return s * (1 - s);
	case AK_AFFINE: return a->alpha;
	case AK_LEAKY: return x >= 0 ? 1 : a->alpha;
	case AK_THR: return x > a->alpha;
	case AK_SCALED_TANH: t = tanh(a->beta * x); return a->alpha * a->beta * (1 - t * t);
	case AK_HARDSIG: v = a->alpha * x + a->beta; return v > 0 && v < 1 ? a->alpha : 0;
	case AK_ELU: return x >= 0 ? 1 : a->alpha * exp(x);
	case AK_SOFTSIGN: return 1 / ((1 + fabs(x)) * (1 + fabs(x)));
	default: return 1 / (1 + exp(-x));
	}
}

void hpkr_set_outputs(struct hp_graph *g, const struct hp_node *n, const struct rnn_priv *p)
{
	struct hp_shape y = { 4, { p->seq, p->ndir, p->batch, p->hidden } }, h = { 3, { p->ndir, p->batch, p->hidden } };

	if (p->layout) {
		y = (struct hp_shape){ 4, { p->batch, p->seq, p->ndir, p->hidden } };
		h = (struct hp_shape){ 3, { p->batch, p->ndir, p->hidden } };
	}
	for (int o = 0; o < n->noutputs; o++)
		if (n->outputs[o] >= 0) {
			g->values[n->outputs[o]].dtype = HP_F32;
			g->values[n->outputs[o]].shape = o == 0 ? y : h;
		}
}

/* h and c states, x- and h-parts of the gates, the new h row. */
size_t hpkr_workspace(const struct rnn_priv *p)
{
	return (size_t)(2 * p->batch * p->hidden) * sizeof(float) +
	       (size_t)(2 * p->gates * p->hidden + p->hidden) * sizeof(double);
}

struct rnn_dir {
	const struct rnn_priv *p;
	const struct rnn_act *f;    /* this direction's activations */
	const float *x, *w, *r, *wb, *rb, *peep;
	float *h, *c;               /* [batch][hidden] */
	double *xp, *hp, *nh;       /* [gates * hidden], [gates * hidden], [hidden] */
};

static double clipv(const struct rnn_priv *p, double v)
{
	return v > p->clip ? p->clip : v < -p->clip ? -p->clip : v;
}

/* xp = x_t W^T + Wb + Rb (Rb kept apart for GRU's reset), hp = h R^T. */
static void gate_parts(const struct rnn_dir *d, const float *xt, const float *h)
{
	const struct rnn_priv *p = d->p;

	for (int64_t row = 0; row < p->gates * p->hidden; row++) {
		double a = d->wb ? d->wb[row] : 0, b = d->rb ? d->rb[row] : 0;
		for (int64_t i = 0; i < p->input; i++)
			a += (double)xt[i] * d->w[row * p->input + i];
		for (int64_t i = 0; i < p->hidden; i++)
			b += (double)h[i] * d->r[row * p->hidden + i];
		d->xp[row] = a;
		d->hp[row] = b;
	}
}

static void step_rnn(const struct rnn_dir *d, float *h)
{
	for (int64_t j = 0; j < d->p->hidden; j++)
		d->nh[j] = hpkr_act(&d->f[0], clipv(d->p, d->xp[j] + d->hp[j]));
	for (int64_t j = 0; j < d->p->hidden; j++)
		h[j] = (float)d->nh[j];
}

static void step_gru(const struct rnn_dir *d, float *h)
{
	const struct rnn_priv *p = d->p;
	int64_t H = p->hidden;

	double *r = d->xp + H; /* the reset gate replaces its x-part */

	for (int64_t j = 0; j < H; j++)
		r[j] = hpkr_act(&d->f[0], clipv(p, d->xp[H + j] + d->hp[H + j]));
	for (int64_t j = 0; j < H; j++) {
		double z = hpkr_act(&d->f[0], clipv(p, d->xp[j] + d->hp[j])), hh;
		if (p->lbr)
			hh = d->xp[2 * H + j] + r[j] * d->hp[2 * H + j];
		else { /* (r . h) R_h^T + Rb_h */
			hh = d->xp[2 * H + j] + (d->rb ? d->rb[2 * H + j] : 0);
			for (int64_t i = 0; i < H; i++)
				hh += r[i] * h[i] * d->r[(2 * H + j) * H + i];
		}
		hh = hpkr_act(&d->f[1], clipv(p, hh));
		d->nh[j] = (1 - z) * hh + z * h[j];
	}
	for (int64_t j = 0; j < H; j++)
		h[j] = (float)d->nh[j];
}

static void step_lstm(const struct rnn_dir *d, float *h, float *c)
{
	const struct rnn_priv *p = d->p;
	int64_t H = p->hidden;
	const float *pi = d->peep, *po = d->peep ? d->peep + H : NULL, *pf = d->peep ? d->peep + 2 * H : NULL;

	for (int64_t j = 0; j < H; j++) {
		double f = hpkr_act(&d->f[0], clipv(p, d->xp[2 * H + j] + d->hp[2 * H + j] + (pf ? pf[j] * c[j] : 0)));
		double i = hpkr_act(&d->f[0], clipv(p, d->xp[j] + d->hp[j] + (pi ? pi[j] * c[j] : 0)));
		double g = hpkr_act(&d->f[1], clipv(p, d->xp[3 * H + j] + d->hp[3 * H + j])), cn, o;
		i = p->input_forget ? 1 - f : i;
		cn = f * c[j] + i * g;
		o = hpkr_act(&d->f[0], clipv(p, d->xp[H + j] + d->hp[H + j] + (po ? po[j] * cn : 0)));
		d->nh[j] = o * hpkr_act(&d->f[2], cn);
		c[j] = (float)cn;
	}
	for (int64_t j = 0; j < H; j++)
		h[j] = (float)d->nh[j];
}

/* Run direction `dir` (reverse when `rev`) over every batch entry. */
static void run_dir(struct rnn_dir *d, const struct hp_kargs *a, int dir, int rev)
{
	const struct rnn_priv *p = d->p;
	int64_t S = p->seq, B = p->batch, H = p->hidden, D = p->ndir;
	const struct hp_tensor *sl = a->nin > 4 && a->in[4].data ? &a->in[4] : NULL;
	float *y = a->nout > 0 ? a->out[0].data : NULL;

	for (int64_t b = 0; b < B; b++) {
		int64_t len = sl ? (sl->dtype == HP_I64 ? ((const int64_t *)sl->data)[b] : ((const int32_t *)sl->data)[b]) : S;
		len = len < 0 ? 0 : len > S ? S : len;
		for (int64_t s = 0; s < len; s++) {
			int64_t t = rev ? len - 1 - s : s;
			const float *xt = d->x + (p->layout ? b * S + t : t * B + b) * p->input;
			float *h = d->h + b * H, *c = d->c + b * H;
			gate_parts(d, xt, h);
			if (p->gates == 1)
				step_rnn(d, h);
			else if (p->gates == 3)
				step_gru(d, h);
			else
				step_lstm(d, h, c);
			if (y)
				memcpy(y + (p->layout ? ((b * S + t) * D + dir) * H : ((t * D + dir) * B + b) * H), h,
				       (size_t)H * sizeof *h);
		}
	}
}

/* Initial state k (5: h, 6: c) of direction dir into st, or zeros. */
static void init_state(const struct rnn_priv *p, const struct hp_kargs *a, int k, int dir, float *st)
{
	int64_t B = p->batch, H = p->hidden;
	const float *s0 = a->nin > k && a->in[k].data ? a->in[k].data : NULL;

	for (int64_t b = 0; b < B; b++)
		for (int64_t j = 0; j < H; j++)
			st[b * H + j] = !s0 ? 0 : s0[(p->layout ? b * p->ndir + dir : dir * B + b) * H + j];
}

static void store_state(const struct rnn_priv *p, struct hp_tensor *o, int dir, const float *st)
{
	int64_t B = p->batch, H = p->hidden;

	if (!o->data)
		return;
	for (int64_t b = 0; b < B; b++)
		memcpy((float *)o->data + (p->layout ? b * p->ndir + dir : dir * B + b) * H, st + b * H,
		       (size_t)H * sizeof *st);
}

int hpkr_run(const struct hp_node *n, const struct hp_kargs *a)
{
	const struct rnn_priv *p = n->priv;
	int64_t G = p->gates, H = p->hidden, B = p->batch;
	struct rnn_dir d = { .p = p, .x = a->in[0].data, .h = a->ws };

	d.c = d.h + B * H;
	d.xp = (double *)(d.c + B * H);
	d.hp = d.xp + G * H;
	d.nh = d.hp + G * H;
	if (a->nout > 0 && a->out[0].data)
		memset(a->out[0].data, 0, hp_tensor_bytes(&a->out[0]));
	for (int dir = 0; dir < p->ndir; dir++) {
		const float *bias = a->nin > 3 && a->in[3].data ? (const float *)a->in[3].data + dir * 2 * G * H : NULL;
		d.f = &p->act[dir * p->nact];
		d.w = (const float *)a->in[1].data + dir * G * H * p->input;
		d.r = (const float *)a->in[2].data + dir * G * H * H;
		d.wb = bias;
		d.rb = bias ? bias + G * H : NULL;
		d.peep = a->nin > 7 && a->in[7].data ? (const float *)a->in[7].data + dir * 3 * H : NULL;
		init_state(p, a, 5, dir, d.h);
		init_state(p, a, 6, dir, d.c);
		run_dir(&d, a, dir, p->reverse || dir == 1);
		for (int o = 1; o < a->nout && o < 3; o++)
			store_state(p, &a->out[o], dir, o == 1 ? d.h : d.c);
	}
	return 0;
}
