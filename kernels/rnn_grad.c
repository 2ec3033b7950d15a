/* RNNGrad (ai.hpdlf): the backward of RNN, GRU and LSTM by backpropagation
 * through time.
 *
 *   RNNGrad(dY, dY_h, dY_c, X, W, R, B, sequence_lens, initial_h, initial_c, P)
 *     -> (dX, dW, dR, dB, -, d_initial_h, d_initial_c, dP)
 *
 * All 11 inputs and 8 outputs are present in the node (-1 where omitted).
 * Attribute "op" names the forward op; the others are the forward node's.
 * Output k is the gradient of forward input k (output 4, sequence_lens,
 * stays omitted).  The forward is recomputed per direction and batch entry
 * (its states and gate pre-activations kept for one sequence, in the
 * workspace), so training keeps only X, W, R, B and the initial states
 * alive, not the gates of every step.  Everything is in double with the
 * states rounded to float after each step as the forward does (rnn_run.c);
 * weight gradients are summed in double over the batch entries from the
 * last to the first (deterministic).  Steps past a batch entry's sequence
 * length carry no gradient; the clip attribute zeroes the gradient where
 * it clipped.
 *
 * Bands of the batch (exec/split_band.c) chain their weight sums: inputs
 * 11-14, where present, are the running sums (float64, the layout of
 * outputs 1, 2, 3 and 7) of the bands after this one, which the node
 * continues from instead of zeros; attribute "partial" (a mask of bits 1,
 * 2, 3, 7) makes those outputs the running sums in float64 for the band
 * before it (exec/split_rnn.c).  The chain from the last band to the first
 * then adds, in double, what the whole node adds, and rounds once. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "hpdlf/error.h"
#include "kernels/eltwise_impl.h"
#include "kernels/rnn_impl.h"
#include "kernels/train_util.h"

#define BASE 3
#define ACC (BASE + 8) /* inputs: running sums of outputs 1, 2, 3, 7 */

struct rg {
	const struct rnn_priv *p;
	const struct rnn_act *f;   /* this direction's activations */
	const float *w, *r, *wb, *rb, *peep;
	int64_t ss;                /* doubles per stored step: hprev, cprev, pre[G*H], aux */
	double *st;                /* stored steps of one sequence */
	double *xp, *hp, *da, *dhp;
	double *h, *c, *dh, *dc, *dhn, *dcn, *rv;
	double *dw, *dr, *db, *dp; /* this direction's sums */
};

static double clipd(const struct rnn_priv *p, double v)
{
	return v > p->clip ? p->clip : v < -p->clip ? -p->clip : v;
}

/* d act(clip(v)) / dv */
static double dgate(const struct rg *g, int k, double v)
{
	return fabs(v) > g->p->clip ? 0 : hpkr_dact(&g->f[k], v);
}

static double gate(const struct rg *g, int k, double v)
{
	return hpkr_act(&g->f[k], clipd(g->p, v));
}

static void gate_parts(const struct rg *g, const float *xt)
{
	const struct rnn_priv *p = g->p;

	for (int64_t row = 0; row < p->gates * p->hidden; row++) {
		double a = g->wb ? g->wb[row] : 0, b = g->rb ? g->rb[row] : 0;
		for (int64_t i = 0; i < p->input; i++)
			a += (double)xt[i] * g->w[row * p->input + i];
		for (int64_t i = 0; i < p->hidden; i++)
			b += g->h[i] * g->r[row * p->hidden + i];
		g->xp[row] = a;
		g->hp[row] = b;
	}
}

static void fwd_gru(const struct rg *g, double *pre, double *aux)
{
	const struct rnn_priv *p = g->p;
	int64_t H = p->hidden;

	for (int64_t j = 0; j < H; j++) {
		pre[H + j] = g->xp[H + j] + g->hp[H + j];
		g->rv[j] = gate(g, 0, pre[H + j]);
	}
	for (int64_t j = 0; j < H; j++) {
		pre[j] = g->xp[j] + g->hp[j];
		aux[j] = g->hp[2 * H + j];
		if (p->lbr)
			pre[2 * H + j] = g->xp[2 * H + j] + g->rv[j] * aux[j];
		else {
			double s = g->xp[2 * H + j] + (g->rb ? g->rb[2 * H + j] : 0);
			for (int64_t i = 0; i < H; i++)
				s += g->rv[i] * g->h[i] * g->r[(2 * H + j) * H + i];
			pre[2 * H + j] = s;
		}
	}
	for (int64_t j = 0; j < H; j++) {
		double z = gate(g, 0, pre[j]), hh = gate(g, 1, pre[2 * H + j]);
		g->dhn[j] = (1 - z) * hh + z * g->h[j];
	}
	for (int64_t j = 0; j < H; j++)
		g->h[j] = (float)g->dhn[j];
}

static void fwd_lstm(const struct rg *g, double *pre, double *aux)
{
	const struct rnn_priv *p = g->p;
	int64_t H = p->hidden;
	const float *pi = g->peep, *po = pi ? pi + H : NULL, *pf = pi ? pi + 2 * H : NULL;

	for (int64_t j = 0; j < H; j++) {
		double f, i, gg, cn, o;
		pre[2 * H + j] = g->xp[2 * H + j] + g->hp[2 * H + j] + (pf ? pf[j] * g->c[j] : 0);
		pre[j] = g->xp[j] + g->hp[j] + (pi ? pi[j] * g->c[j] : 0);
		pre[3 * H + j] = g->xp[3 * H + j] + g->hp[3 * H + j];
		f = gate(g, 0, pre[2 * H + j]);
		i = p->input_forget ? 1 - f : gate(g, 0, pre[j]);
		gg = gate(g, 1, pre[3 * H + j]);
		cn = f * g->c[j] + i * gg;
		pre[H + j] = g->xp[H + j] + g->hp[H + j] + (po ? po[j] * cn : 0);
		o = gate(g, 0, pre[H + j]);
		aux[j] = cn;
		g->dhn[j] = o * hpkr_act(&g->f[2], cn);
		g->c[j] = (float)cn;
	}
	for (int64_t j = 0; j < H; j++)
		g->h[j] = (float)g->dhn[j];
}

/* One forward step from the current h, c; stores what the backward needs. */
static void fwd_step(const struct rg *g, const float *xt, double *st)
{
	const struct rnn_priv *p = g->p;
	int64_t H = p->hidden;
	double *pre = st + 2 * H, *aux = pre + p->gates * H;

	memcpy(st, g->h, (size_t)H * sizeof *st);
	memcpy(st + H, g->c, (size_t)H * sizeof *st);
	gate_parts(g, xt);
	if (p->gates == 3) {
		fwd_gru(g, pre, aux);
		return;
	}
	if (p->gates == 4) {
		fwd_lstm(g, pre, aux);
		return;
	}
	for (int64_t j = 0; j < H; j++) {
		pre[j] = g->xp[j] + g->hp[j];
		g->h[j] = (float)gate(g, 0, pre[j]);
	}
}

/* GRU: da (x-part gradients), dhp (h-part), the direct dh_prev terms
 * (through z, and without linear_before_reset through r . h). */
static void bwd_gru(const struct rg *g, const double *st)
{
	const struct rnn_priv *p = g->p;
	int64_t H = p->hidden;
	const double *hprev = st, *pre = st + 2 * H, *aux = pre + 3 * H;
	double *dah = g->da + 2 * H, *dr = g->dcn;

	for (int64_t j = 0; j < H; j++) {
		double z = gate(g, 0, pre[j]), hh = gate(g, 1, pre[2 * H + j]);
		g->rv[j] = gate(g, 0, pre[H + j]);
		g->da[j] = g->dh[j] * (hprev[j] - hh) * dgate(g, 0, pre[j]);
		dah[j] = g->dh[j] * (1 - z) * dgate(g, 1, pre[2 * H + j]);
		g->dhn[j] = g->dh[j] * z;
		dr[j] = dah[j] * aux[j];
	}
	for (int64_t i = 0; !p->lbr && i < H; i++) {
		double drh = 0;
		for (int64_t j = 0; j < H; j++) {
			drh += dah[j] * g->r[(2 * H + j) * H + i];
			g->dr[(2 * H + j) * H + i] += dah[j] * g->rv[i] * hprev[i];
		}
		dr[i] = drh * hprev[i];
		g->dhn[i] += drh * g->rv[i];
	}
	for (int64_t j = 0; j < H; j++) {
		if (!p->lbr)
			g->db[3 * H + 2 * H + j] += dah[j];
		g->da[H + j] = dr[j] * dgate(g, 0, pre[H + j]);
		g->dhp[j] = g->da[j];
		g->dhp[H + j] = g->da[H + j];
		g->dhp[2 * H + j] = p->lbr ? dah[j] * g->rv[j] : 0;
	}
}

static void bwd_lstm(const struct rg *g, const double *st)
{
	const struct rnn_priv *p = g->p;
	int64_t H = p->hidden;
	const double *cprev = st + H, *pre = st + 2 * H, *cn = pre + 4 * H;
	const float *pi = g->peep, *po = pi ? pi + H : NULL, *pf = pi ? pi + 2 * H : NULL;

	for (int64_t j = 0; j < H; j++) {
		double f = gate(g, 0, pre[2 * H + j]), i = p->input_forget ? 1 - f : gate(g, 0, pre[j]);
		double gg = gate(g, 1, pre[3 * H + j]), o = gate(g, 0, pre[H + j]);
		double dao = g->dh[j] * hpkr_act(&g->f[2], cn[j]) * dgate(g, 0, pre[H + j]);
		double dcn = g->dc[j] + g->dh[j] * o * hpkr_dact(&g->f[2], cn[j]) + (po ? dao * po[j] : 0);
		double df = dcn * cprev[j], di = dcn * gg, dai = 0, daf;
		if (p->input_forget)
			df -= di;
		else
			dai = di * dgate(g, 0, pre[j]);
		daf = df * dgate(g, 0, pre[2 * H + j]);
		g->da[j] = dai;
		g->da[H + j] = dao;
		g->da[2 * H + j] = daf;
		g->da[3 * H + j] = dcn * i * dgate(g, 1, pre[3 * H + j]);
		g->dcn[j] = dcn * f + (pf ? daf * pf[j] + dai * pi[j] : 0);
		g->dhn[j] = 0;
		if (pi) {
			g->dp[j] += dai * cprev[j];
			g->dp[H + j] += dao * cn[j];
			g->dp[2 * H + j] += daf * cprev[j];
		}
	}
	memcpy(g->dhp, g->da, (size_t)(4 * H) * sizeof *g->dhp);
}

/* One backward step: g->dh (and dc) are the gradients of the step's new
 * state; on return they are those of the state before it. */
static void bwd_step(struct rg *g, const float *xt, const double *st, float *dxt)
{
	const struct rnn_priv *p = g->p;
	int64_t H = p->hidden, I = p->input, GH = p->gates * H;

	if (p->gates == 3)
		bwd_gru(g, st);
	else if (p->gates == 4)
		bwd_lstm(g, st);
	else
		for (int64_t j = 0; j < H; j++) {
			g->da[j] = g->dh[j] * dgate(g, 0, st[2 * H + j]);
			g->dhp[j] = g->da[j];
			g->dhn[j] = 0;
		}
	for (int64_t row = 0; row < GH; row++) {
		double a = g->da[row], b = g->dhp[row];
		g->db[row] += a;
		g->db[GH + row] += b;
		for (int64_t i = 0; i < I; i++) {
			g->dw[row * I + i] += a * xt[i];
			if (dxt)
				dxt[i] += (float)(a * g->w[row * I + i]);
		}
		for (int64_t i = 0; i < H; i++) {
			g->dr[row * H + i] += b * st[i];
			g->dhn[i] += b * g->r[row * H + i];
		}
	}
	memcpy(g->dh, g->dhn, (size_t)H * sizeof *g->dh);
	if (p->gates == 4)
		memcpy(g->dc, g->dcn, (size_t)H * sizeof *g->dc);
}

static int64_t seq_len(const struct rnn_priv *p, const struct hp_kargs *a, int64_t b)
{
	const struct hp_tensor *sl = &a->in[BASE + 4];
	int64_t len = !sl->data ? p->seq
		      : sl->dtype == HP_I64 ? ((const int64_t *)sl->data)[b] : ((const int32_t *)sl->data)[b];

	return len < 0 ? 0 : len > p->seq ? p->seq : len;
}

/* Row of state tensor k (initial_h/c, Y_h/c) for direction dir, entry b. */
static int64_t state_row(const struct rnn_priv *p, int dir, int64_t b)
{
	return (p->layout ? b * p->ndir + dir : dir * p->batch + b) * p->hidden;
}

static void load_state(const struct rnn_priv *p, const struct hp_tensor *t, int dir, int64_t b, double *dst)
{
	for (int64_t j = 0; j < p->hidden; j++)
		dst[j] = t->data ? ((const float *)t->data)[state_row(p, dir, b) + j] : 0;
}

/* Forward then backward through one batch entry of one direction. */
static void run_entry(struct rg *g, const struct hp_kargs *a, int dir, int64_t b)
{
	const struct rnn_priv *p = g->p;
	int64_t S = p->seq, B = p->batch, H = p->hidden, I = p->input, len = seq_len(p, a, b);
	int rev = p->reverse || dir == 1;
	const float *x = a->in[BASE].data, *dy = a->in[0].data;
	float *dx = a->out[0].data;

	load_state(p, &a->in[BASE + 5], dir, b, g->h);
	load_state(p, &a->in[BASE + 6], dir, b, g->c);
	for (int64_t s = 0; s < len; s++) {
		int64_t t = rev ? len - 1 - s : s;
		fwd_step(g, x + (p->layout ? b * S + t : t * B + b) * I, g->st + s * g->ss);
	}
	load_state(p, &a->in[1], dir, b, g->dh);
	load_state(p, &a->in[2], dir, b, g->dc);
	for (int64_t s = len - 1; s >= 0; s--) {
		int64_t t = rev ? len - 1 - s : s, xo = (p->layout ? b * S + t : t * B + b) * I;
		if (dy) {
			const float *d = dy + (p->layout ? ((b * S + t) * p->ndir + dir) * H : ((t * p->ndir + dir) * B + b) * H);
			for (int64_t j = 0; j < H; j++)
				g->dh[j] += d[j];
		}
		bwd_step(g, x + xo, g->st + s * g->ss, dx ? dx + xo : NULL);
	}
	for (int k = 5; k <= 6; k++)
		if (a->out[k].data)
			for (int64_t j = 0; j < H; j++)
				((float *)a->out[k].data)[state_row(p, dir, b) + j] = (float)(k == 5 ? g->dh : g->dc)[j];
}

static void put(struct hp_tensor *o, int64_t off, const double *src, int64_t n)
{
	if (o->data && o->dtype == HP_F64)
		memcpy((double *)o->data + off, src, (size_t)n * sizeof *src);
	else if (o->data)
		for (int64_t i = 0; i < n; i++)
			((float *)o->data)[off + i] = (float)src[i];
}

/* This direction's sums start from the running sum of input `acc` (a
 * band's chain) or zeros. */
static void start(const struct hp_kargs *a, int acc, int64_t off, double *dst, int64_t n)
{
	if (a->nin > acc && a->in[acc].data)
		memcpy(dst, (const double *)a->in[acc].data + off, (size_t)n * sizeof *dst);
	else
		memset(dst, 0, (size_t)n * sizeof *dst);
}

static void carve(struct rg *g, double *ws)
{
	const struct rnn_priv *p = g->p;
	int64_t H = p->hidden, GH = p->gates * H;
	double **seq[] = { &g->h, &g->c, &g->dh, &g->dc, &g->dhn, &g->dcn, &g->rv };

	g->ss = (p->gates + 3) * H;
	g->st = ws;
	ws += p->seq * g->ss;
	g->xp = ws, g->hp = ws + GH, g->da = ws + 2 * GH, g->dhp = ws + 3 * GH;
	ws += 4 * GH;
	for (size_t k = 0; k < sizeof seq / sizeof seq[0]; k++, ws += H)
		*seq[k] = ws;
	g->dw = ws, ws += GH * p->input;
	g->dr = ws, ws += GH * H;
	g->db = ws, ws += 2 * GH;
	g->dp = ws;
}

static size_t grad_workspace(const struct rnn_priv *p)
{
	int64_t H = p->hidden, GH = p->gates * H;

	return (size_t)(p->seq * (p->gates + 3) * H + 4 * GH + 7 * H + GH * p->input + GH * H + 2 * GH + 3 * H) *
	       sizeof(double);
}

static int grad_run(const struct hp_node *n, const struct hp_kargs *a)
{
	const struct rnn_priv *p = n->priv;
	int64_t G = p->gates, H = p->hidden, GH = G * H, I = p->input;
	struct rg g = { .p = p };

	carve(&g, a->ws);
	if (a->out[0].data)
		memset(a->out[0].data, 0, hp_tensor_bytes(&a->out[0]));
	for (int dir = 0; dir < p->ndir; dir++) {
		const float *bias = a->in[BASE + 3].data ? (const float *)a->in[BASE + 3].data + dir * 2 * GH : NULL;
		g.f = &p->act[dir * p->nact];
		g.w = (const float *)a->in[BASE + 1].data + dir * GH * I;
		g.r = (const float *)a->in[BASE + 2].data + dir * GH * H;
		g.wb = bias;
		g.rb = bias ? bias + GH : NULL;
		g.peep = a->in[BASE + 7].data ? (const float *)a->in[BASE + 7].data + dir * 3 * H : NULL;
		start(a, ACC, dir * GH * I, g.dw, GH * I);
		start(a, ACC + 1, dir * GH * H, g.dr, GH * H);
		start(a, ACC + 2, dir * 2 * GH, g.db, 2 * GH);
		start(a, ACC + 3, dir * 3 * H, g.dp, 3 * H);
		for (int64_t b = p->batch - 1; b >= 0; b--)
			run_entry(&g, a, dir, b);
		put(&a->out[1], dir * GH * I, g.dw, GH * I);
		put(&a->out[2], dir * GH * H, g.dr, GH * H);
		put(&a->out[3], dir * 2 * GH, g.db, 2 * GH);
		put(&a->out[7], dir * 3 * H, g.dp, 3 * H);
	}
	return 0;
}

static int grad_prepare(struct hp_graph *g, struct hp_node *n)
{
	const char *op = hp_attr_string(n, "op", "");
	struct rnn_priv *p;
	int rc;

	if (strcmp(op, "RNN") && strcmp(op, "GRU") && strcmp(op, "LSTM"))
		return hp_node_error(g, n, HP_EMODEL, "attribute op must be RNN, GRU or LSTM");
	if ((rc = hpkr_prepare(g, n, op, BASE, &p)) < 0)
		return rc;
	for (int i = 0; i < 3; i++)
		if ((rc = tk_need_f32(g, n, i, 1)) < 0)
			return rc;
	int64_t partial = hp_attr_int(n, "partial", 0);
	if (partial & ~(int64_t)0x8e)
		return hp_node_error(g, n, HP_EMODEL, "attribute partial names outputs other than 1, 2, 3, 7");
	for (int o = 0; o < n->noutputs; o++) {
		const struct hp_value *in = hpk_in(g, n, BASE + o);
		if (n->outputs[o] < 0)
			continue;
		if (o == 4 || !in)
			return hp_node_error(g, n, HP_EMODEL, "output %d has no forward input to be the gradient of", o);
		tk_set_out(g, n, o, partial >> o & 1 ? HP_F64 : HP_F32, &in->shape);
	}
	for (int k = 0; k < 4; k++) { /* running sums: float64, their output's shape */
		const struct hp_value *acc = hpk_in(g, n, ACC + k), *in = hpk_in(g, n, BASE + (k < 3 ? k + 1 : 7));
		if (!acc)
			continue;
		if (!in || acc->dtype != HP_F64 || acc->shape.rank != in->shape.rank ||
		    hp_shape_numel(&acc->shape) != hp_shape_numel(&in->shape))
			return hp_node_error(g, n, HP_EMODEL, "running sum %d must be float64 shaped as its gradient", k);
	}
	n->workspace = grad_workspace(p);
	return 0;
}

const struct hp_op tk_op_rnn_grad = {
	.domain = TK_DOMAIN, .name = "RNNGrad", .min_inputs = BASE + 8, .max_inputs = ACC + 4,
	.min_outputs = 8, .max_outputs = 8, .prepare = grad_prepare, .run = grad_run, .flops = NULL,
};
