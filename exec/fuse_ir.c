/* Inverted residual blocks (MobileNetV2's): after the epilogue pass,
 *
 *   FusedConv 1x1 + Clip -> FusedConv depthwise 3x3 + Clip -> Conv 1x1
 *                                                   (or FusedConv 1x1 + Add)
 *
 * each intermediate read by the next node alone, becomes one FusedInvRes
 * (kernels/fused_ir.c), which runs the block in bands of rows so that the
 * expanded tensors stay in cache; so do the last two nodes alone (a block
 * without expansion, MobileNetV2's first, or one whose expansion has other
 * readers; --plan notes them as "InvertedResidual (no expansion)").  It computes every element with the
 * kernels the three nodes use, so it gives their bits; like the epilogue
 * pass it runs only in core (the fused node is never split). */
#include <float.h>
#include <stdio.h>
#include <string.h>

#include "exec/fuse_internal.h"
#include "kernels/fused_impl.h"

/* Depthwise output planes of at least this many positions: all.  Below
 * 14x14 the fused node runs by blocks of channels (kernels/fused_ir.c),
 * two parallel runs instead of the three nodes' (MobileNetV2's 7x7 blocks,
 * where bands of rows were no faster than the unfused nodes on one
 * thread, CPU time); from 14x14 by bands of rows, 10% faster than the
 * unfused nodes on 14x14, 15-30% on larger planes. */
#define FIR_MIN_PLANE 1

struct ir_match {
	int a, b, c;              /* expansion, depthwise, projection nodes */
	int64_t s, pads[4];
};

static int is_fused_conv(const struct hp_node *n, const char *act)
{
	return !strcmp(n->domain, "ai.hpdlf") && !strcmp(n->op_type, "FusedConv") &&
	       !strcmp(hp_attr_string(n, "activation", "?"), act);
}

/* Every entry of INTS attribute `name` equals v (or it is absent). */
static int ints_all(const struct hp_node *n, const char *name, int64_t v, int count)
{
	const int64_t *p;
	int k = hp_attr_ints(n, name, &p);

	if (k < 0)
		return 1;
	if (k != count)
		return 0;
	for (int i = 0; i < k; i++)
		if (p[i] != v)
			return 0;
	return 1;
}

/* Node n is a 2-D Conv with weight [m, cin_g, kh, kw] as given (-1: any),
 * undilated, no auto_pad, in float32. */
static int conv_shape(const struct hp_graph *g, const struct hp_node *n, int64_t m, int64_t cg, int64_t k)
{
	const struct hp_shape *w;

	if (n->ninputs < 2 || n->inputs[0] < 0 || n->inputs[1] < 0 || n->noutputs != 1)
		return 0;
	w = &g->values[n->inputs[1]].shape;
	if (g->values[n->inputs[0]].shape.rank != 4 || w->rank != 4 || g->values[n->inputs[0]].dtype != HP_F32)
		return 0;
	if ((m >= 0 && w->dims[0] != m) || (cg >= 0 && w->dims[1] != cg) || w->dims[2] != k || w->dims[3] != k)
		return 0;
	return ints_all(n, "dilations", 1, 2) && !strcmp(hp_attr_string(n, "auto_pad", "NOTSET"), "NOTSET");
}

/* A 1x1 Conv, stride 1, no pads, one group. */
static int pointwise(const struct hp_graph *g, const struct hp_node *n, int64_t m, int64_t cin)
{
	return conv_shape(g, n, m, cin, 1) && hp_attr_int(n, "group", 1) == 1 && ints_all(n, "strides", 1, 2) &&
	       ints_all(n, "pads", 0, 4);
}

/* The depthwise node b (channels ce): its stride (1 or 2) and pads. */
static int depthwise(const struct hp_graph *g, const struct hp_node *b, int64_t ce, struct ir_match *m)
{
	const int64_t *p;
	int np;

	if (!conv_shape(g, b, ce, 1, 3) || hp_attr_int(b, "group", 1) != ce ||
	    g->values[b->inputs[0]].shape.dims[1] != ce)
		return 0;
	m->s = ints_all(b, "strides", 1, 2) ? 1 : ints_all(b, "strides", 2, 2) ? 2 : 0;
	memset(m->pads, 0, sizeof m->pads);
	if ((np = hp_attr_ints(b, "pads", &p)) == 4)
		memcpy(m->pads, p, sizeof m->pads);
	else if (np >= 0)
		return 0;
	for (int i = 0; i < 4; i++) /* FusedInvRes's bands each read an image row */
		if (m->pads[i] < 0 || m->pads[i] > 2)
			return 0;
	return m->s > 0;
}

/* From the depthwise node m->b (ce channels, its pads and stride in m):
 * a plane large enough and the projection reading it alone (m->c). */
static int match_tail(const struct hp_graph *g, int64_t ce, struct ir_match *m)
{
	const struct hp_node *b = &g->nodes[m->b], *c;
	const struct hp_shape *y = &g->values[b->outputs[0]].shape;

	if (y->rank != 4 || y->dims[2] * y->dims[3] < FIR_MIN_PLANE || (m->c = hp_fz_only_reader(g, b->outputs[0])) < 0)
		return 0;
	c = &g->nodes[m->c];
	if (c->inputs[0] != b->outputs[0] || !pointwise(g, c, -1, ce))
		return 0;
	if (!hp_fz_is(c, "Conv") && !(is_fused_conv(c, "") && c->ninputs > 3 && c->inputs[3] >= 0))
		return 0;
	return hp_fir_available();
}

/* A block without expansion (MobileNetV2's first): the depthwise node i
 * reads X itself. */
static int match_dw_at(const struct hp_graph *g, int i, struct ir_match *m)
{
	const struct hp_node *b = &g->nodes[i];

	if (!is_fused_conv(b, "Clip") || (b->ninputs > 3 && b->inputs[3] >= 0) || !conv_shape(g, b, -1, 1, 3))
		return 0;
	if (!depthwise(g, b, g->values[b->inputs[0]].shape.dims[1], m))
		return 0;
	m->a = -1, m->b = i;
	return match_tail(g, g->values[b->inputs[0]].shape.dims[1], m);
}

static int match_at(const struct hp_graph *g, int i, struct ir_match *m)
{
	const struct hp_node *a = &g->nodes[i], *b;
	int64_t ce;

	if (!is_fused_conv(a, "Clip") || (a->ninputs > 3 && a->inputs[3] >= 0) || !conv_shape(g, a, -1, -1, 1))
		return 0;
	ce = g->values[a->inputs[1]].shape.dims[0];
	if (!pointwise(g, a, ce, g->values[a->inputs[0]].shape.dims[1]))
		return 0;
	if ((m->b = hp_fz_only_reader(g, a->outputs[0])) < 0)
		return 0;
	b = &g->nodes[m->b];
	if (!is_fused_conv(b, "Clip") || (b->ninputs > 3 && b->inputs[3] >= 0) || b->inputs[0] != a->outputs[0] ||
	    !depthwise(g, b, ce, m))
		return 0;
	m->a = i;
	return match_tail(g, ce, m);
}

static int add_attrs(struct hp_graph *g, int f, const struct ir_match *m)
{
	const struct hp_node *a = m->a >= 0 ? &g->nodes[m->a] : NULL, *b = &g->nodes[m->b];
	float lo1 = a ? hp_attr_float(a, "clip_min", -FLT_MAX) : -FLT_MAX;
	float hi1 = a ? hp_attr_float(a, "clip_max", FLT_MAX) : FLT_MAX;
	float lo2 = hp_attr_float(b, "clip_min", -FLT_MAX), hi2 = hp_attr_float(b, "clip_max", FLT_MAX);
	int64_t st[2] = { m->s, m->s };
	int rc;

	if ((rc = hp_fz_attr_ints(g, f, "strides", st, 2)) < 0 || (rc = hp_fz_attr_ints(g, f, "pads", m->pads, 4)) < 0 ||
	    (rc = hp_fz_attr_float(g, f, "expand_min", lo1)) < 0 || (rc = hp_fz_attr_float(g, f, "expand_max", hi1)) < 0 ||
	    (rc = hp_fz_attr_float(g, f, "dw_min", lo2)) < 0 || (rc = hp_fz_attr_float(g, f, "dw_max", hi2)) < 0)
		return rc;
	return 0;
}

static int rewrite(struct hp_graph *g, const struct ir_match *m, struct hp_fuse_report *r)
{
	const struct hp_node *b = &g->nodes[m->b], *c = &g->nodes[m->c];
	const struct hp_node *a = m->a >= 0 ? &g->nodes[m->a] : b; /* without expansion: the depthwise node */
	int exp = m->a >= 0;
	int in[8] = { a->inputs[0], exp ? a->inputs[1] : -1, exp && a->ninputs > 2 ? a->inputs[2] : -1, b->inputs[1],
		      b->ninputs > 2 ? b->inputs[2] : -1, c->inputs[1], c->ninputs > 2 ? c->inputs[2] : -1,
		      c->ninputs > 3 ? c->inputs[3] : -1 };
	int add = in[7] >= 0, gone[3] = { m->b, m->c, m->a }, f, rc;
	char line[768];

	if (exp)
		snprintf(line, sizeof line, "InvertedResidual '%s' ('%s', '%s', '%s')", a->name, a->name, b->name,
			 c->name);
	else
		snprintf(line, sizeof line, "InvertedResidual '%s' ('%s', '%s'; no expansion)", b->name, b->name,
			 c->name);
	if ((f = hp_fz_add_node(g, a->name, "FusedInvRes", 1, add ? 8 : 7, in, c->outputs[0])) < 0)
		return f;
	if ((rc = add_attrs(g, f, m)) < 0)
		return rc;
	hp_fz_note(r, exp ? (add ? "InvertedResidual+Add" : "InvertedResidual")
			  : (add ? "InvertedResidual+Add (no expansion)" : "InvertedResidual (no expansion)"), line);
	r->nodes_removed += exp ? 2 : 1;
	hp_fz_remove(g, gone, exp ? 3 : 2);
	return 1;
}

int hp_fuse_invres(struct hp_graph *g, struct hp_fuse_report *r)
{
	struct ir_match m;

	for (int i = 0; i < g->nnodes; i++)
		if (match_at(g, i, &m))
			return rewrite(g, &m, r);
	/* then blocks without expansion: a depthwise node that is the middle
	 * of a whole block took that block's match above */
	for (int i = 0; i < g->nnodes; i++)
		if (match_dw_at(g, i, &m))
			return rewrite(g, &m, r);
	return 0;
}
