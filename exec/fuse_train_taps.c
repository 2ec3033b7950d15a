/* Training's convolutions whose kernel reaches past the input for every
 * output: taps that read padding only are dropped, W' = Slice(W) of the
 * taps left and the Conv runs on W' with its pads moved.  DeepLabV3's ASPP
 * (3x3 at dilations 12, 24, 36 on an 8x8 map at 128x128 inputs) reads the
 * input with its centre tap alone: a 1x1 conv, where the 3x3 took 40% of
 * the training step.
 *
 * Per spatial axis, tap t reads positions t*dil - pad_begin + o*stride for
 * outputs o; it is live when one of them lies in the input.  When the live
 * taps are a range [lo, hi] (always, but for strides that skip the input
 * whole), the new pads are pad_begin - lo*dil and the end pad that gives
 * the same output size; an axis whose new pads would be negative keeps its
 * taps.  The dropped products are padding times weight, zero for every
 * output (Inf or NaN weights aside, which the full conv turns into NaN),
 * so outputs and dX are the full conv's up to the order of the sums; dW of
 * a dropped tap is 0 (SliceGrad), as the full conv's is; the optimizer
 * still updates every weight of W (decay, momentum).  The rewrite happens
 * before autodiff and planning, so in core and out of core run the same
 * graph. */
#include <stdio.h>
#include <string.h>

#include "hpdlf/error.h"
#include "exec/fuse_internal.h"
#include "kernels/conv_impl.h"

/* The live taps [lo, hi] of one axis and the pads that keep them in place;
 * 0 when the axis keeps every tap (nothing dead, or not a range). */
static int tap_live(int64_t t, int64_t in, int64_t out, int64_t s, int64_t d, int64_t pb)
{
	int64_t p0 = t * d - pb, o = p0 >= 0 ? 0 : (-p0 + s - 1) / s; /* the first output reading >= 0 */

	return o < out && p0 + o * s < in;
}

static int live_taps(int64_t in, int64_t out, int64_t k, int64_t s, int64_t d, int64_t pb, int64_t *lo, int64_t *hi,
		     int64_t *npb, int64_t *npe)
{
	int64_t first = 0, last = k - 1, pe;

	while (first < k && !tap_live(first, in, out, s, d, pb))
		first++;
	while (last > first && !tap_live(last, in, out, s, d, pb))
		last--;
	if (first == k || (first == 0 && last == k - 1))
		return 0;
	for (int64_t t = first + 1; t < last; t++)
		if (!tap_live(t, in, out, s, d, pb))
			return 0; /* not a range */
	/* the end pad the output size needs, as the formula's floor leaves it */
	pe = (out - 1) * s + (k - 1) * d + 1 - in - pb;
	*npb = pb - first * d;
	*npe = pe - (k - 1 - last) * d;
	if (*npe < 0 && *npe > -s)
		*npe = 0; /* inputs past the last window, unread either way */
	if (*npb < 0 || *npe < 0)
		return 0;
	*lo = first, *hi = last;
	return 1;
}

static int rewrite(struct hp_graph *g, int i, struct hp_fuse_report *r)
{
	struct hp_node n = g->nodes[i];
	struct hp_conv cv;
	int64_t lo[3], hi[3], pads[6], starts[3], ends[3], axes[3], ks[3];
	int nd, off, any = 0, w = n.inputs[1], sl, in[3], c, rc;
	char name[600], line[900];

	if (hp_conv_parse(g, &n, 0, &cv) < 0)
		return 0;
	nd = cv.nd, off = 3 - nd;
	for (int a = 0; a < nd; a++) {
		const struct hp_colgeom *gm = &cv.g;
		int64_t npb, npe;
		lo[a] = 0, hi[a] = gm->k[off + a] - 1;
		pads[a] = gm->pad[off + a];
		pads[nd + a] = (gm->grid[off + a] - 1) * gm->stride[off + a] + (gm->k[off + a] - 1) * gm->dil[off + a] + 1 -
			       gm->img[off + a] - gm->pad[off + a];
		if (live_taps(gm->img[off + a], gm->grid[off + a], gm->k[off + a], gm->stride[off + a], gm->dil[off + a],
			      gm->pad[off + a], &lo[a], &hi[a], &npb, &npe)) {
			pads[a] = npb, pads[nd + a] = npe;
			any = 1;
		}
		if (pads[nd + a] < 0)
			pads[nd + a] = 0; /* an axis kept whole: the floor's slack */
		starts[a] = lo[a], ends[a] = hi[a] + 1, axes[a] = 2 + a, ks[a] = hi[a] - lo[a] + 1;
	}
	if (!any)
		return 0;
	snprintf(line, sizeof line, "Conv '%s': taps reading padding only dropped, kernel", n.name);
	for (int a = 0; a < nd; a++)
		snprintf(line + strlen(line), sizeof line - strlen(line), "%s%lld", a ? "x" : " ",
			 (long long)cv.g.k[off + a]);
	snprintf(line + strlen(line), sizeof line - strlen(line), " -> ");
	for (int a = 0; a < nd; a++)
		snprintf(line + strlen(line), sizeof line - strlen(line), "%s%lld", a ? "x" : "", (long long)ks[a]);
	/* W' = Slice(W, starts, ends, axes) */
	in[0] = w;
	if ((in[1] = hp_fz_i64_init(g, g->values[w].name, ".taps_from", starts, nd)) < 0 ||
	    (in[2] = hp_fz_i64_init(g, g->values[w].name, ".taps_to", ends, nd)) < 0)
		return in[1] < 0 ? in[1] : in[2];
	int ax = hp_fz_i64_init(g, g->values[w].name, ".taps_axes", axes, nd), sin[4] = { in[0], in[1], in[2], ax };
	snprintf(name, sizeof name, "%s.taps", g->values[w].name);
	for (int k = 1; hp_graph_find_value(g, name) >= 0; k++)
		snprintf(name, sizeof name, "%s.taps#%d", g->values[w].name, k);
	if (ax < 0 || (sl = hp_graph_add_value(g, name, HP_VALUE_ACTIVATION, HP_UNDEFINED, NULL)) < 0)
		return ax < 0 ? ax : sl;
	snprintf(name, sizeof name, "%s/taps", n.name);
	if ((rc = hp_fz_add_node(g, name, "Slice", 0, 4, sin, sl)) < 0)
		return rc;
	/* the Conv on W', its attributes but pads, kernel_shape and auto_pad */
	int cin[3] = { n.inputs[0], sl, n.ninputs > 2 ? n.inputs[2] : -1 };
	snprintf(name, sizeof name, "%s/live", n.name);
	if ((c = hp_fz_add_node(g, name, "Conv", 0, n.ninputs > 2 ? 3 : 2, cin, n.outputs[0])) < 0)
		return c;
	for (int a = 0; a < g->nodes[i].nattrs; a++) {
		const struct hp_attr *at = &g->nodes[i].attrs[a];
		if (strcmp(at->name, "pads") && strcmp(at->name, "kernel_shape") && strcmp(at->name, "auto_pad") &&
		    (rc = hp_graph_add_attr(g, c, at)) < 0)
			return rc;
	}
	if ((rc = hp_fz_attr_ints(g, c, "pads", pads, 2 * nd)) < 0 || (rc = hp_fz_attr_ints(g, c, "kernel_shape", ks, nd)) < 0)
		return rc;
	hp_fz_note(r, "Conv taps on padding (training)", line);
	hp_graph_remove_node(g, i);
	return 1;
}

int hp_fuse_train_taps(struct hp_graph *g, struct hp_fuse_report *r)
{
	for (int i = 0; i < g->nnodes; i++) {
		const struct hp_node *n = &g->nodes[i];
		int rc;
		if (!hp_fz_is(n, "Conv") || n->folded || n->ninputs < 2 || n->ninputs > 3 || n->noutputs != 1 ||
		    n->inputs[0] < 0 || n->inputs[1] < 0 || n->outputs[0] < 0 || g->values[n->inputs[0]].dtype != HP_F32 ||
		    g->values[n->inputs[1]].dtype != HP_F32 || g->values[n->inputs[0]].shape.rank < 3 ||
		    g->values[n->inputs[0]].shape.rank > 5)
			continue;
		if ((rc = rewrite(g, i, r)) != 0)
			return rc;
	}
	return 0;
}
