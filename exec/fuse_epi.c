/* Epilogue fusion: Conv, MatMul or Gemm, then an Add (a residual, a bias:
 * anything that broadcasts onto the product as a scalar, a full tensor or
 * one range of axes) and/or an activation (Relu, Clip with constant bounds,
 * Sigmoid, HardSwish, a FusedGelu; HardSwish also as HardSigmoid(1/6, 1/2)
 * and a Mul of the value and that, MobileNetV3's export; SiLU as Sigmoid
 * and a Mul of the value and that, EfficientNet's) become one FusedConv/FusedMatMul/
 * FusedGemm (kernels/fused.c) that applies them to the product's output
 * in one pass.  Every element is computed as the unfused Add and
 * activation compute it, so the fused node gives the unfused bits.  In
 * core the driver runs this pass with the others; under a budget once the
 * graph is cut for it (hp_fuse_after_split, on the bands and blocks, which
 * keep their kernel path in the fused node's attributes), so that the
 * split pass sees only plain nodes. */
#include <float.h>
#include <stdio.h>
#include <string.h>

#include "exec/fuse_internal.h"
#include "kernels/fused_impl.h"

struct epi_match {
	int prod, add, act;     /* node indices (-1: absent) */
	int mul;                /* the Mul of a gated activation (act its gate), or -1 */
	int addend, out;        /* values */
	const char *act_name;   /* as fused_impl.h names it */
	float lo, hi;
};

/* Constant scalar bound of Clip input i, or the attribute (opset < 11). */
static int clip_bound(const struct hp_graph *g, const struct hp_node *n, int i, const char *attr, float *b)
{
	double x;

	if (hp_node_attr(n, attr)) {
		*b = hp_attr_float(n, attr, *b);
		return 1;
	}
	if (i >= n->ninputs || n->inputs[i] < 0)
		return 1;
	if (!hp_fz_scalar(g, n->inputs[i], &x))
		return 0;
	*b = (float)x;
	return 1;
}

/* The epilogue name of activation node n, or NULL. */
static const char *act_of(const struct hp_graph *g, const struct hp_node *n, struct epi_match *m)
{
	if (n->noutputs != 1)
		return NULL;
	if (hp_fz_is(n, "Relu") || hp_fz_is(n, "Sigmoid") || hp_fz_is(n, "HardSwish"))
		return n->op_type;
	if (!strcmp(n->domain, "ai.hpdlf") && !strcmp(n->op_type, "FusedGelu"))
		return strcmp(hp_attr_string(n, "approximate", "none"), "tanh") ? "Gelu" : "GeluTanh";
	m->lo = -FLT_MAX;
	m->hi = FLT_MAX;
	if (hp_fz_is(n, "Clip") && clip_bound(g, n, 1, "min", &m->lo) && clip_bound(g, n, 2, "max", &m->hi))
		return "Clip";
	return NULL;
}

/* A gated activation: y read by a gate and by a Mul of y and the gate's
 * output, which nothing else reads.  HardSwish as MobileNetV3's exports
 * write it, the gate a HardSigmoid of alpha 1/6 and beta 1/2:
 * Mul(y, sat01(alpha y + beta)) is fused_epi.c's HardSwish,
 * y * sat01(y * (1/6) + 0.5), product for product (a NaN y gives its own
 * NaN either way).  SiLU as EfficientNet's write it, the gate a Sigmoid:
 * fused_epi.c's y * hpk_sigmoidf(y), the Sigmoid node's function (a NaN
 * y gives y, which the Mul node leaves open). */
static int gated_of(const struct hp_graph *g, int y, struct epi_match *m)
{
	int gate = -1, mul = -1, gv;

	if (y < 0 || g->values[y].is_output || g->values[y].nconsumers != 2)
		return 0;
	for (int i = 0; i < g->nnodes; i++)
		for (int j = 0; j < g->nodes[i].ninputs; j++)
			if (g->nodes[i].inputs[j] == y) {
				if (hp_fz_is(&g->nodes[i], "HardSigmoid") || hp_fz_is(&g->nodes[i], "Sigmoid"))
					gate = i;
				else if (hp_fz_is(&g->nodes[i], "Mul"))
					mul = i;
				break;
			}
	if (gate < 0 || mul < 0 || g->nodes[gate].noutputs != 1 || g->nodes[mul].noutputs != 1)
		return 0;
	if (hp_fz_is(&g->nodes[gate], "HardSigmoid") && (hp_attr_float(&g->nodes[gate], "alpha", 0.2f) != 1.0f / 6.0f ||
							  hp_attr_float(&g->nodes[gate], "beta", 0.5f) != 0.5f))
		return 0;
	gv = g->nodes[gate].outputs[0];
	if (hp_fz_only_reader(g, gv) != mul || hp_fz_other(&g->nodes[mul], y) != gv ||
	    g->values[g->nodes[mul].outputs[0]].dtype != HP_F32 ||
	    !hp_shape_equal(&g->values[g->nodes[mul].outputs[0]].shape, &g->values[y].shape))
		return 0;
	m->act = gate;
	m->mul = mul;
	m->act_name = hp_fz_is(&g->nodes[gate], "Sigmoid") ? "Silu" : "HardSwish";
	m->out = g->nodes[mul].outputs[0];
	return 1;
}

/* An Add reading product output y whose other operand broadcasts onto y. */
static int add_of(const struct hp_graph *g, int node, int y, struct epi_match *m)
{
	const struct hp_node *n = &g->nodes[node];
	struct hp_epi e;
	int a = hp_fz_other(n, y);

	if (!hp_fz_is(n, "Add") || a < 0 || n->noutputs != 1 || g->values[a].dtype != HP_F32 ||
	    !hp_shape_equal(&g->values[n->outputs[0]].shape, &g->values[y].shape) ||
	    hp_epi_add_of(&g->values[y].shape, &g->values[a].shape, &e) < 0)
		return 0;
	m->add = node;
	m->addend = a;
	m->out = n->outputs[0];
	return 1;
}

static int match_at(const struct hp_graph *g, int p, struct epi_match *m)
{
	const struct hp_node *n = &g->nodes[p];
	int r;

	*m = (struct epi_match){ .prod = p, .add = -1, .act = -1, .mul = -1, .addend = -1 };
	if (!(hp_fz_is(n, "Conv") || hp_fz_is(n, "MatMul") || hp_fz_is(n, "Gemm")) || n->noutputs != 1 || n->folded ||
	    g->values[n->outputs[0]].dtype != HP_F32)
		return 0;
	if (hp_fz_is(n, "MatMul") && n->ninputs != 2)
		return 0;
	m->out = n->outputs[0];
	if ((r = hp_fz_only_reader(g, m->out)) >= 0 && add_of(g, r, m->out, m))
		r = hp_fz_only_reader(g, m->out);
	if (r >= 0 && (m->act_name = act_of(g, &g->nodes[r], m))) {
		m->act = r;
		m->out = g->nodes[r].outputs[0];
	} else if (r < 0) {
		gated_of(g, m->out, m);
	}
	return m->add >= 0 || m->act >= 0;
}

/* The fused node's inputs: the product's, padded, then the addend. */
static int fused_inputs(const struct hp_node *n, const struct epi_match *m, int *in)
{
	int k = hp_fz_is(n, "MatMul") ? 2 : 3;

	for (int i = 0; i < k; i++)
		in[i] = i < n->ninputs ? n->inputs[i] : -1;
	in[k] = m->addend;
	return k + 1;
}

static int rewrite(struct hp_graph *g, const struct epi_match *m, struct hp_fuse_report *r)
{
	char op[32], pattern[64], line[512];
	int in[4], nin = fused_inputs(&g->nodes[m->prod], m, in), f, rc = 0;
	int gone[4] = { m->prod, m->add, m->act, m->mul };

	snprintf(op, sizeof op, "Fused%s", g->nodes[m->prod].op_type);
	snprintf(pattern, sizeof pattern, "%s%s%s%s", g->nodes[m->prod].op_type, m->add >= 0 ? "+Add" : "",
		 m->act >= 0 ? "+" : "", m->act >= 0 ? m->act_name : "");
	snprintf(line, sizeof line, "%s '%s'", pattern, g->nodes[m->prod].name);
	if ((f = hp_fz_add_node(g, g->nodes[m->prod].name, op, 1, nin, in, m->out)) < 0)
		return f;
	for (int a = 0; a < g->nodes[m->prod].nattrs && rc == 0; a++)
		rc = hp_graph_add_attr(g, f, &g->nodes[m->prod].attrs[a]);
	if (rc == 0)
		rc = hp_fz_attr_str(g, f, "activation", m->act >= 0 ? m->act_name : "");
	if (rc == 0 && m->act >= 0 && !strcmp(m->act_name, "Clip"))
		rc = hp_fz_attr_float(g, f, "clip_min", m->lo);
	if (rc == 0 && m->act >= 0 && !strcmp(m->act_name, "Clip"))
		rc = hp_fz_attr_float(g, f, "clip_max", m->hi);
	if (rc < 0)
		return rc;
	hp_fz_note(r, pattern, line);
	r->nodes_removed += (m->add >= 0) + (m->act >= 0) + (m->mul >= 0);
	hp_fz_remove(g, gone, 4);
	return 1;
}

int hp_fuse_epilogue(struct hp_graph *g, struct hp_fuse_report *r)
{
	struct epi_match m;

	for (int i = 0; i < g->nnodes; i++)
		if (match_at(g, i, &m))
			return rewrite(g, &m, r);
	return 0;
}

/* Bytes of value v as the planner counts a step's (exec/plan.c step_need:
 * a constant is no tensor of the store), rounded up to align. */
static uint64_t held(const struct hp_graph *g, int v, uint64_t align)
{
	struct hp_tensor t;
	uint64_t b;

	if (v < 0 || g->values[v].kind == HP_VALUE_CONSTANT)
		return 0;
	t = (struct hp_tensor){ .dtype = g->values[v].dtype, .shape = g->values[v].shape };
	b = hp_tensor_bytes(&t);
	return (b + align - 1) / align * align;
}

/* The fused node's step: its distinct inputs and its output (a fused
 * node computes out of place), and the product's workspace, which the
 * fused node's (the product's kernel, prepared on the same attributes)
 * is. */
static void fused_need(const struct hp_graph *g, const struct epi_match *m, uint64_t align, uint64_t *io,
		       uint64_t *ws)
{
	const struct hp_node *n = &g->nodes[m->prod];
	int in[4], nin = fused_inputs(n, m, in);

	*io = held(g, m->out, align);
	for (int i = 0; i < nin; i++) {
		int dup = 0;
		for (int k = 0; k < i; k++)
			dup |= in[k] == in[i];
		if (!dup)
			*io += held(g, in[i], align);
	}
	*ws = (n->workspace + align - 1) / align * align;
}

int hp_fuse_epilogue_within(struct hp_graph *g, struct hp_fuse_report *r, const struct hp_fuse_cap *cap)
{
	uint64_t align = cap->align > 1 ? cap->align : 1;
	struct epi_match m;

	for (int i = 0; i < g->nnodes; i++) {
		uint64_t io, ws;
		if (g->nodes[i].folded || !match_at(g, i, &m))
			continue;
		fused_need(g, &m, align, &io, &ws);
		if (io <= cap->io && io + ws <= cap->step)
			return rewrite(g, &m, r);
	}
	return 0;
}
