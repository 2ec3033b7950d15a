/* Prologue fusion, in core: an inference BatchNormalization, and a Relu
 * after it, in front of a 1x1 Conv (DenseNet's layers: BN, Relu, the
 * bottleneck conv reading the growing Concat; its transitions) become the
 * conv's prologue, FusedConv input 5 (kernels/fused.c), applied to X as
 * the pointwise path packs it (kernels/conv_pw.c, hp_pw_forward_pro).
 * The BatchNorm cannot fold into W where a Relu sits between, and without
 * one W' would round differently; the prologue computes each element as
 * kernels/norm.c's BatchNormalization and the Relu kernel do, so the
 * fused node gives the unfused nodes' bits, and no tensor is written for
 * them.  P [3, C] holds mean, scale = gamma / sqrt(var + eps) (in double,
 * rounded once, as norm.c's bn_apply) and shift = beta.
 *
 * Under a budget the graph keeps the three nodes (bitwise the same), as
 * the pass runs only where nothing is split; nor for convs that run on
 * another path (conv_pwt.c's tiny planes, im2col, grouped): the pass asks
 * the pointwise path itself (hp_pw_pro_ok) on the conv as prepared. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hpdlf/error.h"
#include "exec/fuse_internal.h"
#include "kernels/conv_impl.h"

struct pro_match {
	int bn, relu, conv; /* node indices (relu -1: none) */
	int x;              /* the BatchNorm's input, the conv's from now on */
	int64_t c;          /* its channels */
};

/* Node ci, a Conv or an epilogue's FusedConv without W^T packed, whose
 * input is a BatchNorm's (through a Relu) that the pointwise path can
 * take as its prologue. */
static int match_at(struct hp_graph *g, int ci, struct pro_match *m)
{
	struct hp_node v = g->nodes[ci];
	struct hp_conv cv;
	int y, r;

	if (!(hp_fz_is(&v, "Conv") || (!strcmp(v.domain, "ai.hpdlf") && !strcmp(v.op_type, "FusedConv"))) ||
	    v.folded || v.ninputs < 2 || v.ninputs > 4 || (y = v.inputs[0]) < 0 || v.noutputs != 1)
		return 0;
	for (int j = 1; j < v.ninputs; j++) /* X read again (as the addend) stays X */
		if (v.inputs[j] == y)
			return 0;
	*m = (struct pro_match){ .relu = -1, .conv = ci };
	if ((r = hp_fz_producer(g, y, "Relu")) >= 0) {
		if (hp_fz_only_reader(g, y) != ci || g->nodes[r].ninputs != 1 || (y = g->nodes[r].inputs[0]) < 0)
			return 0;
		m->relu = r;
	}
	if ((m->bn = hp_fz_producer(g, y, "BatchNormalization")) < 0 ||
	    hp_fz_only_reader(g, y) != (m->relu >= 0 ? m->relu : ci))
		return 0;
	const struct hp_node *b = &g->nodes[m->bn];
	if (b->ninputs != 5 || hp_attr_int(b, "training_mode", 0) || (m->x = b->inputs[0]) < 0)
		return 0;
	for (int o = 1; o < b->noutputs; o++)
		if (b->outputs[o] >= 0)
			return 0;
	const struct hp_value *x = &g->values[m->x];
	if (x->dtype != HP_F32 || x->shape.rank != 4 || g->values[y].dtype != HP_F32)
		return 0;
	for (int d = 0; d < 4; d++)
		if (x->shape.dims[d] < 1) /* not known yet */
			return 0;
	m->c = x->shape.dims[1];
	for (int i = 1; i < 5; i++) {
		int s = hp_fz_past_identity(g, b->inputs[i]);
		if (s < 0 || !hp_fz_const(g, s) || hp_fz_user_fed(g, s) || hp_shape_numel(&g->values[s].shape) != m->c)
			return 0;
	}
	v.ninputs = v.ninputs < 3 ? v.ninputs : 3; /* the inner Conv's view (kernels/fused.c); y is X's shape */
	if (hp_conv_parse(g, &v, 0, &cv) < 0)
		return 0;
	hp_conv_setup(&cv);
	return hp_pw_pro_ok(&cv);
}

/* P [3, C]: mean, gamma / sqrt(var + eps) as norm.c's bn_apply rounds it,
 * beta.  Its value index, or an error. */
static int add_params(struct hp_graph *g, const struct pro_match *m)
{
	const struct hp_node *b = &g->nodes[m->bn];
	const float *p[4] = { 0 }; /* scale, bias, mean, var */
	float *own[4] = { 0 }, *d = malloc((size_t)(3 * m->c) * sizeof *d);
	float eps = hp_attr_float(b, "epsilon", 1e-5f);
	struct hp_shape s = { .rank = 2, .dims = { 3, m->c } };
	int rc = d ? 0 : hp_error(-ENOMEM, "out of memory");

	for (int i = 0; i < 4 && rc == 0; i++)
		if (!(p[i] = hp_fz_load_f32(g, hp_fz_past_identity(g, b->inputs[i + 1]), &own[i])))
			rc = hp_error(-ENOMEM, "cannot read the statistics of BatchNormalization '%s'", b->name);
	for (int64_t c = 0; c < m->c && rc == 0; c++) {
		double v = p[3][c];
		d[c] = p[2][c];
		d[m->c + c] = (float)(p[0][c] / sqrt(v + eps));
		d[2 * m->c + c] = p[1][c];
	}
	for (int i = 0; i < 4; i++)
		free(own[i]);
	if (rc < 0) {
		free(d);
		return rc;
	}
	return hp_fz_memory_init(g, g->values[b->outputs[0]].name, ".prologue", &s, d);
}

static int rewrite(struct hp_graph *g, const struct pro_match *m, struct hp_fuse_report *r)
{
	int pv = add_params(g, m), rc, *in, gone[2] = { m->bn, m->relu };
	struct hp_node *c = &g->nodes[m->conv];
	char line[512];

	if (pv < 0)
		return pv;
	snprintf(line, sizeof line, "BatchNormalization%s '%s' into the prologue of Conv '%s'",
		 m->relu >= 0 ? "+Relu" : "", g->nodes[m->bn].name, c->name);
	if (hp_fz_is(c, "Conv") && ((rc = hp_fz_set_op(c, "FusedConv")) < 0 ||
				     (rc = hp_fz_attr_str(g, m->conv, "activation", "")) < 0))
		return rc;
	if ((rc = hp_fz_attr_int(g, m->conv, "prologue_relu", m->relu >= 0)) < 0)
		return rc;
	c = &g->nodes[m->conv];
	if (!(in = realloc(c->inputs, 6 * sizeof *in)))
		return hp_error(-ENOMEM, "out of memory");
	for (int j = c->ninputs; j < 5; j++)
		in[j] = -1;
	in[0] = m->x;
	in[5] = pv;
	c->inputs = in;
	c->ninputs = 6;
	hp_fz_note(r, m->relu >= 0 ? "BatchNormalization+Relu+Conv" : "BatchNormalization+Conv", line);
	r->nodes_removed += 1 + (m->relu >= 0);
	hp_fz_remove(g, gone, 2);
	return 1;
}

int hp_fuse_prologue(struct hp_graph *g, struct hp_fuse_report *r)
{
	struct pro_match m;

	for (int i = 0; i < g->nnodes; i++)
		if (match_at(g, i, &m))
			return rewrite(g, &m, r);
	return 0;
}
