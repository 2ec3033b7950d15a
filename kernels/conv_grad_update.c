/* ConvGradFilterUpdate(dY, X, W, state...) -> W', state'... (domain
 * ai.hpdlf): a Conv's filter gradient and its optimizer update in one
 * kernel, dW never whole (issue 17: ResNet-18 training at a quarter of
 * its tensor peak).
 *
 * Why: unfused, the filter gradient writes dW (as large as W) and the
 * update then reads W and dW; at the backward's tail of ResNet-18 the
 * update of one 9-MiB stage-4 weight, the next weight's load and its dW
 * need 27 MiB where a quarter of the peak leaves 25.6, so each of those
 * layers waited for a serialized write-back.  Here the packed register
 * tiles (conv_grad_reg.c) sum dW in pieces of taps, each piece's sums
 * final for every output channel, and each piece is applied to W (and its
 * state) as soon as it is: the step holds W, the state and a piece, the
 * pieces' sums in the packing buffers the filter gradient has anyway
 * (hp_rfilt_piece: its workspace, not more).
 *
 * Bits: a piece's sums are hp_rfilt_run's (each element one running sum
 * in one order, whatever the shares and chunks), and the update runs
 * train.c's own loops on each piece (tk_update_span), so W' and the state
 * are bitwise SGDUpdate's or AdamUpdate's after ConvGradFilter.  Only
 * geometries whose filter gradient takes the packed tiles are fused
 * (exec/fuse_grad_update.c asks tk_conv_filter_pieces); the node's
 * attributes are the ConvGradFilter's and the update's, plus `adam`
 * (0: SGDUpdate, its inputs W [, B]; 1: AdamUpdate, W, m, v, step). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "hpdlf/error.h"
#include "kernels/conv_impl.h"
#include "kernels/train_util.h"


size_t tk_conv_update_workspace(const struct hp_rfilt *q)
{
	return hp_rfilt_pieces_workspace(q, hp_rfilt_piece(q));
}

struct cgu {
	struct hp_rfilt q;
	int64_t piece;
	int adam;
};

static int cgu_prepare(struct hp_graph *g, struct hp_node *n)
{
	struct cgu c = { .adam = hp_attr_int(n, "adam", 0) != 0 };
	struct hp_shape dw;
	int nst = c.adam ? 2 : n->ninputs - 3, rc = tk_conv_filter_pieces(g, n, &c.q, &dw);

	if (rc < 0)
		return rc;
	if (rc == 0)
		return hp_node_error(g, n, HP_EUNSUPPORTED, "the filter gradient of this geometry is not summed in pieces");
	if (nst < 0 || nst > 2 || n->ninputs != 3 + nst + c.adam || n->noutputs != 1 + nst)
		return hp_node_error(g, n, HP_EMODEL, "needs dY, X, W, the optimizer's state (and Adam's step), "
				     "and as many outputs as W and its state");
	for (int i = 2; i < 3 + nst; i++) {
		if ((rc = tk_need_f32(g, n, i, 0)) < 0)
			return rc;
		if (!hp_shape_equal(&tk_in(g, n, i)->shape, &dw))
			return hp_node_error(g, n, HP_ESHAPE, "input %d does not have the filter's shape", i);
	}
	if (c.adam && (tk_in(g, n, 5)->dtype != HP_I64 || hp_shape_numel(&tk_in(g, n, 5)->shape) != 1))
		return hp_node_error(g, n, HP_EMODEL, "input 5 must be the int64 step counter");
	if (!c.adam && hp_attr_float(n, "dampening", 0) != 0)
		return hp_node_error(g, n, HP_EUNSUPPORTED, "dampening is not supported");
	c.piece = hp_rfilt_piece(&c.q);
	if (!(n->priv = malloc(sizeof c)))
		return hp_node_error(g, n, -ENOMEM, "out of memory");
	memcpy(n->priv, &c, sizeof c);
	n->workspace = tk_conv_update_workspace(&c.q);
	for (int o = 0; o < n->noutputs; o++)
		tk_set_out(g, n, o, HP_F32, &dw);
	return 0;
}

struct cgu_run {
	const struct cgu *c;
	struct tk_update u;
};

/* A final piece: output channel m's taps [t0, t1) of dW applied to W's
 * row m (dW and W share the layout [cout][cin * kvol]). */
static void cgu_done(void *arg, const float *sums, int64_t t0, int64_t t1, int64_t ld)
{
	const struct cgu_run *r = arg;

	for (int64_t m = 0; m < r->c->q.cout; m++)
		tk_update_span(&r->u, m * r->c->q.rows + t0, sums + m * ld, t1 - t0);
}

static int cgu_run(const struct hp_node *n, const struct hp_kargs *a)
{
	struct cgu_run r = { .c = n->priv };
	int rc = tk_update_init(n, a, r.c->adam, 2, &r.u);

	if (rc < 0)
		return rc;
	hp_rfilt_run_pieces(&r.c->q, a->in[0].data, a->in[1].data, r.c->piece, cgu_done, &r, a->ws, a->pool);
	return 0;
}

static double cgu_flops(const struct hp_graph *g, const struct hp_node *n)
{
	const struct hp_value *w = &g->values[n->inputs[2]], *dy = &g->values[n->inputs[0]];
	int64_t per = hp_shape_numel(&w->shape) / (w->shape.rank ? w->shape.dims[0] : 1);

	return 2.0 * (double)hp_shape_numel(&dy->shape) * (double)per + 8.0 * (double)hp_shape_numel(&w->shape);
}

const struct hp_op tk_op_conv_grad_update = {
	.domain = TK_DOMAIN, .name = "ConvGradFilterUpdate", .min_inputs = 3, .max_inputs = 6,
	.min_outputs = 1, .max_outputs = 3, .flags = HP_OP_NO_FOLD | HP_OP_STATE_INPLACE,
	.prepare = cgu_prepare, .run = cgu_run, .flops = cgu_flops,
};
