/* Recurrent operators RNN, GRU and LSTM (float32): forward, reverse and
 * bidirectional, sequence_lens, initial states, LSTM peepholes and
 * input_forget, GRU linear_before_reset, clip, layout 0 and 1, and every
 * activation ONNX lists (with activation_alpha/beta).
 *
 * One step of a direction computes the gate pre-activations
 * X_t W^T + H_{t-1} R^T + Wb + Rb per gate in double, in a fixed order.
 * Batch entries past their sequence length keep their state and output
 * zeros, as ONNX's reference does.  Gate order: GRU z, r, h; LSTM i, o,
 * f, c; peepholes i, o, f.  The backward, RNNGrad, is rnn_grad.c. */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/eltwise_impl.h"
#include "kernels/rnn_impl.h"

static int rnn_gates(const char *op)
{
	return !strcmp(op, "LSTM") ? 4 : !strcmp(op, "GRU") ? 3 : 1;
}

/* The activations: f, g (, h) per direction, with defaults and alpha/beta
 * consumed in list order, as ONNX specifies. */
static int read_acts(const struct hp_graph *g, const struct hp_node *n, struct rnn_priv *p)
{
	static const char *const defaults[3][3] = { { "Tanh" }, { "Sigmoid", "Tanh" }, { "Sigmoid", "Tanh", "Tanh" } };
	const struct hp_attr *names = hp_node_attr(n, "activations"), *al = hp_node_attr(n, "activation_alpha");
	const struct hp_attr *be = hp_node_attr(n, "activation_beta");
	int per = p->gates == 1 ? 1 : p->gates == 3 ? 2 : 3, ai = 0, bi = 0;

	p->nact = per;
	if (names && names->type == HP_ATTR_STRINGS && names->n != per * p->ndir)
		return hp_node_error(g, n, HP_EMODEL, "activations lists %d names, expected %d", names->n, per * p->ndir);
	for (int k = 0; k < per * p->ndir; k++) {
		const char *nm = names && names->type == HP_ATTR_STRINGS ? names->strings[k] : defaults[per - 1][k % per];
		struct rnn_act *a = &p->act[k];
		if (hpkr_act_parse(nm, a) < 0)
			return hp_node_error(g, n, HP_EUNSUPPORTED, "activation '%s' is not supported", nm);
		if (a->nparams > 0 && al && al->type == HP_ATTR_FLOATS && ai < al->n)
			a->alpha = al->floats[ai++];
		if (a->nparams > 1 && be && be->type == HP_ATTR_FLOATS && bi < be->n)
			a->beta = be->floats[bi++];
	}
	return 0;
}

static int check_input(const struct hp_graph *g, const struct hp_node *n, int base, int i, int rank,
		       const int64_t *dims)
{
	const struct hp_value *v = hpk_in(g, n, base + i);

	if (!v)
		return 0;
	if (v->dtype != HP_F32 && !(i == 4 && (v->dtype == HP_I32 || v->dtype == HP_I64)))
		return hp_node_error(g, n, HP_EUNSUPPORTED, "input %d is %s, expected float32", i, hp_dtype_name(v->dtype));
	if (i == 4)
		return v->shape.rank == 1 && v->shape.dims[0] == dims[0] ? 0
		       : hp_node_error(g, n, HP_ESHAPE, "sequence_lens must be [batch]");
	if (v->shape.rank != rank)
		return hp_node_error(g, n, HP_ESHAPE, "input %d has rank %d, expected %d", i, v->shape.rank, rank);
	for (int d = 0; d < rank; d++)
		if (v->shape.dims[d] != dims[d])
			return hp_node_error(g, n, HP_ESHAPE, "input %d dim %d is %" PRId64 ", expected %" PRId64, i, d,
					     v->shape.dims[d], dims[d]);
	return 0;
}

/* Shapes of W, R, B, sequence_lens, initial_h/c and P. */
static int check_inputs(const struct hp_graph *g, const struct hp_node *n, int base, const struct rnn_priv *p)
{
	int64_t G = p->gates, H = p->hidden, D = p->ndir;
	int64_t w[3] = { D, G * H, p->input }, r[3] = { D, G * H, H }, b[2] = { D, 2 * G * H }, sl[1] = { p->batch };
	int64_t h0[3] = { D, p->batch, H }, pp[2] = { D, 3 * H };
	int rc = check_input(g, n, base, 1, 3, w);

	if (p->layout)
		h0[0] = p->batch, h0[1] = D;
	if (rc == 0)
		rc = check_input(g, n, base, 2, 3, r);
	if (rc == 0)
		rc = check_input(g, n, base, 3, 2, b);
	if (rc == 0)
		rc = check_input(g, n, base, 4, 1, sl);
	if (rc == 0)
		rc = check_input(g, n, base, 5, 3, h0);
	if (rc == 0 && p->gates == 4)
		rc = check_input(g, n, base, 6, 3, h0);
	if (rc == 0 && p->gates == 4)
		rc = check_input(g, n, base, 7, 2, pp);
	return rc;
}

static int read_attrs(const struct hp_graph *g, const struct hp_node *n, struct rnn_priv *p)
{
	const char *dir = hp_attr_string(n, "direction", "forward");

	p->ndir = !strcmp(dir, "bidirectional") ? 2 : 1;
	p->reverse = !strcmp(dir, "reverse");
	if (strcmp(dir, "forward") && strcmp(dir, "reverse") && p->ndir == 1)
		return hp_node_error(g, n, HP_EMODEL, "direction '%s' is not forward, reverse or bidirectional", dir);
	p->hidden = hp_attr_int(n, "hidden_size", 0);
	p->layout = (int)hp_attr_int(n, "layout", 0);
	p->clip = hp_node_attr(n, "clip") ? hp_attr_float(n, "clip", 0) : INFINITY;
	p->lbr = (int)hp_attr_int(n, "linear_before_reset", 0);
	p->input_forget = (int)hp_attr_int(n, "input_forget", 0);
	return read_acts(g, n, p);
}

int hpkr_prepare(struct hp_graph *g, struct hp_node *n, const char *op, int base, struct rnn_priv **out)
{
	const struct hp_value *x = hpk_in(g, n, base), *w = hpk_in(g, n, base + 1);
	struct rnn_priv *p;
	int rc;

	if (!(p = calloc(1, sizeof *p)))
		return hp_node_error(g, n, -ENOMEM, "out of memory");
	n->priv = *out = p;
	p->gates = rnn_gates(op);
	if ((rc = read_attrs(g, n, p)) < 0)
		return rc;
	if (!x || x->dtype != HP_F32 || x->shape.rank != 3 || !w || w->shape.rank != 3)
		return hp_node_error(g, n, HP_EUNSUPPORTED, "X must be a 3-D float32 tensor and W 3-D");
	if (p->hidden <= 0)
		p->hidden = w->shape.dims[1] / p->gates;
	p->seq = x->shape.dims[p->layout ? 1 : 0];
	p->batch = x->shape.dims[p->layout ? 0 : 1];
	p->input = x->shape.dims[2];
	return check_inputs(g, n, base, p);
}

static int rnn_prepare(struct hp_graph *g, struct hp_node *n)
{
	struct rnn_priv *p;
	int rc = hpkr_prepare(g, n, n->op_type, 0, &p);

	if (rc < 0)
		return rc;
	hpkr_set_outputs(g, n, p);
	n->workspace = hpkr_workspace(p);
	return 0;
}

double hpkr_flops(const struct hp_graph *g, const struct hp_node *n)
{
	const struct rnn_priv *p = n->priv;

	(void)g;
	return p ? 2.0 * (double)(p->ndir * p->seq * p->batch * p->gates * p->hidden * (p->input + p->hidden)) : 0;
}

#define RNN_OP(VAR, NAME, MAXIN, MAXOUT)                                                               \
	static const struct hp_op VAR = { .domain = "", .name = NAME, .min_inputs = 3, .max_inputs = MAXIN, \
					  .min_outputs = 0, .max_outputs = MAXOUT, .prepare = rnn_prepare,  \
					  .run = hpkr_run, .flops = hpkr_flops }

RNN_OP(op_rnn, "RNN", 6, 2);
RNN_OP(op_gru, "GRU", 6, 2);
RNN_OP(op_lstm, "LSTM", 8, 3);

const struct hp_op *const hp_ops_rnn[] = { &op_rnn, &op_gru, &op_lstm, NULL };
