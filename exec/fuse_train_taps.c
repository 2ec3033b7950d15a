/* Training's convolutions whose kernel reaches past the input for every
 * output: the taps that read padding only are dropped (fuse_dil.c's cut,
 * which inference applies to constant weights), through W' = Slice(W) of
 * the live taps, since the weight is a parameter.  DeepLabV3's ASPP (3x3
 * at dilations 12, 24, 36 on an 8x8 map at 128x128 inputs) reads the input
 * with its centre tap alone: a 1x1 conv, where the 3x3 took 40% of the
 * training step.
 *
 * The dropped products are padding times weight; ONNX Runtime never forms
 * them either (fuse_dil.c: Inf or NaN weights on such taps give no NaN).
 * Outputs and dX are the full conv's up to the order of the sums; dW of a
 * dropped tap is 0 (SliceGrad), as the full conv's is; the optimizer still
 * updates every weight of W (decay, momentum).  The rewrite happens before
 * autodiff and planning, so in core and out of core run the same graph. */
#include <stdio.h>
#include <string.h>

#include "hpdlf/error.h"
#include "exec/fuse_internal.h"

/* W' = Slice(W) of c's taps: the new value's index. */
static int slice_taps(struct hp_graph *g, int ci, int w, const struct hp_fz_cut *c)
{
	int64_t starts[3], ends[3], axes[3];
	char name[600];
	int in[4] = { w, -1, -1, -1 }, sl, rc;

	for (int a = 0; a < c->nd; a++)
		starts[a] = c->t0[a], ends[a] = c->t0[a] + c->k[a], axes[a] = 2 + a;
	if ((in[1] = hp_fz_i64_init(g, g->values[w].name, ".taps_from", starts, c->nd)) < 0 ||
	    (in[2] = hp_fz_i64_init(g, g->values[w].name, ".taps_to", ends, c->nd)) < 0 ||
	    (in[3] = hp_fz_i64_init(g, g->values[w].name, ".taps_axes", axes, c->nd)) < 0)
		return in[1] < 0 ? in[1] : in[2] < 0 ? in[2] : in[3];
	if ((sl = hp_fz_new_value(g, w, "taps")) < 0)
		return sl;
	snprintf(name, sizeof name, "%s/taps", g->nodes[ci].name);
	return (rc = hp_fz_add_node(g, name, "Slice", 0, 4, in, sl)) < 0 ? rc : sl;
}

int hp_fuse_train_taps(struct hp_graph *g, struct hp_fuse_report *r)
{
	for (int i = 0; i < g->nnodes; i++) {
		const struct hp_node *n = &g->nodes[i];
		struct hp_fz_cut c;
		int sl, rc;
		if (n->ninputs < 2 || n->ninputs > 3 || !hp_fz_conv_cut(g, n, &c))
			continue;
		if ((sl = slice_taps(g, i, n->inputs[1], &c)) < 0)
			return sl;
		if ((rc = hp_fz_conv_recut(g, i, sl, &c, r, "Conv dead taps (training)")) < 0)
			return rc;
		return 1;
	}
	return 0;
}
