/* Fused inference operators (domain ai.hpdlf) that exec/fuse*.c puts in
 * place of a product and the element-wise nodes after it:
 *
 *   FusedConv(X, W, B?, addend?, W^T?, P?)  [pro(X)], Conv, then act(y + addend)
 *   FusedMatMul(A, B, addend?)      MatMul, then act(y + addend)
 *   FusedGemm(A, B, C?, addend?)    Gemm, then act(y + addend)
 *   FusedGelu(X)                    GELU (attribute approximate: none|tanh)
 *
 * Attribute "activation" names the act (fused_impl.h; Clip takes clip_min
 * and clip_max).  The product is the plain operator's own kernel, prepared
 * and run on the node with only its inputs (so it tiles and rounds exactly
 * as the unfused node), and the epilogue runs over its output in one pass
 * instead of one node (and one tensor) per element-wise op.  These nodes
 * are never split out of core (their domain is not ai.onnx): under a
 * budget exec/fuse.c makes them once the graph is split, of the band
 * nodes, whose attributes (hpdlf_path) the product's kernel reads here.
 * A FusedConv's input 5, P [3, C] (exec/fuse_pro.c, in core only), is a
 * BatchNormalization before it as mean, scale and shift per input
 * channel, with a Relu after it where attribute prologue_relu is 1: the
 * pointwise path applies it as it packs X (hp_pw_forward_pro), the only
 * path that takes it. */
#include <errno.h>
#include <float.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/conv_impl.h"
#include "kernels/eltwise_impl.h"
#include "kernels/fused_impl.h"

struct fused {
	const struct hp_op *inner; /* Conv, MatMul or Gemm */
	int nin;                   /* its inputs; the addend is input nin */
	void *inner_priv;
	struct hp_epi epi;
	int pro_relu;              /* input 5, the prologue: its Relu */
};

#define FUSED_PRO_INPUT 5

static int inner_inputs(const char *op)
{
	return !strcmp(op, "FusedConv") || !strcmp(op, "FusedGemm") ? 3 : 2;
}

/* The node as the inner operator sees it: its own inputs and state. */
static struct hp_node inner_view(const struct hp_node *n, const struct fused *f)
{
	struct hp_node v = *n;

	v.ninputs = n->ninputs < f->nin ? n->ninputs : f->nin;
	v.priv = f->inner_priv;
	return v;
}

static int epi_prepare(struct hp_graph *g, struct hp_node *n, struct fused *f)
{
	const struct hp_value *y = &g->values[n->outputs[0]];
	const struct hp_value *a = n->ninputs > f->nin && n->inputs[f->nin] >= 0 ? &g->values[n->inputs[f->nin]] : NULL;
	int act = hp_epi_act_of(hp_attr_string(n, "activation", ""));

	if (act < 0)
		return hp_node_error(g, n, HP_EMODEL, "unknown activation '%s'", hp_attr_string(n, "activation", ""));
	f->epi.act = (enum hp_epi_act)act;
	f->epi.lo = hp_attr_float(n, "clip_min", -FLT_MAX);
	f->epi.hi = hp_attr_float(n, "clip_max", FLT_MAX);
	f->epi.add = HP_EPI_ADD_NONE;
	if (a && (a->dtype != HP_F32 || hp_epi_add_of(&y->shape, &a->shape, &f->epi) < 0))
		return hp_node_error(g, n, HP_ESHAPE, "the addend does not broadcast onto the output as a "
						      "scalar, a full tensor or one range of axes");
	return 0;
}

/* The prologue's P: float [3, C] of X's channels, on the pointwise path. */
static int pro_prepare(const struct hp_graph *g, const struct hp_node *n, struct fused *f)
{
	const struct hp_value *x = &g->values[n->inputs[0]], *p = &g->values[n->inputs[FUSED_PRO_INPUT]];
	const struct hp_conv *cv = f->inner_priv;

	if (p->dtype != HP_F32 || x->shape.rank < 2 || hp_shape_numel(&p->shape) != 3 * x->shape.dims[1])
		return hp_node_error(g, n, HP_ESHAPE, "the prologue '%s' is not float [3, %lld]", p->name,
				     x->shape.rank < 2 ? 0LL : (long long)x->shape.dims[1]);
	if (n->ninputs > 4 && n->inputs[4] >= 0)
		return hp_node_error(g, n, HP_EMODEL, "a prologue and W^T packed for conv_pwt.c");
	if (!hp_pw_pro_ok(cv))
		return hp_node_error(g, n, HP_EUNSUPPORTED, "a prologue needs the pointwise path (1x1, ungrouped)");
	f->pro_relu = hp_attr_int(n, "prologue_relu", 0) != 0;
	return 0;
}

static void fused_release(struct hp_node *n)
{
	struct fused *f = n->priv;

	if (!f)
		return;
	if (f->inner_priv) {
		struct hp_node v = inner_view(n, f);
		if (f->inner->release)
			f->inner->release(&v);
		else
			free(f->inner_priv);
	}
	free(f);
	n->priv = NULL;
}

static int fused_prepare(struct hp_graph *g, struct hp_node *n)
{
	struct fused *f = calloc(1, sizeof *f);
	int rc, saved = n->ninputs;

	if (!f)
		return hp_node_error(g, n, -ENOMEM, "out of memory");
	f->nin = inner_inputs(n->op_type);
	f->inner = hp_op_find("", n->op_type + strlen("Fused"));
	if (!f->inner) {
		free(f);
		return hp_node_error(g, n, HP_EINTERNAL, "no inner operator");
	}
	n->ninputs = saved < f->nin ? saved : f->nin;
	n->priv = NULL;
	rc = f->inner->prepare(g, n);
	f->inner_priv = n->priv;
	n->ninputs = saved;
	n->priv = f;
	if (rc == 0)
		rc = epi_prepare(g, n, f);
	if (rc == 0 && !strcmp(n->op_type, "FusedConv") && n->ninputs > FUSED_PRO_INPUT && n->inputs[FUSED_PRO_INPUT] >= 0)
		rc = pro_prepare(g, n, f);
	return rc;
}

/* FusedConv with its prologue (pro_prepare chose the path). */
static int pro_run(const struct hp_conv *cv, const struct fused *f, const struct hp_kargs *a)
{
	const float *p = a->in[FUSED_PRO_INPUT].data, *add = a->nin > f->nin ? a->in[f->nin].data : NULL;
	struct hp_pw_pro pro = { .mean = p, .scale = p + cv->cin, .shift = p + 2 * cv->cin, .relu = f->pro_relu };
	struct hp_epi e = f->epi;

	if (!add) /* as hp_conv_forward_epi: an omitted addend, the activation only */
		e.add = HP_EPI_ADD_NONE;
	hp_pw_forward_pro(cv, a->in[0].data, a->in[1].data, cv->has_bias && a->nin > 2 ? a->in[2].data : NULL,
			  a->out[0].data, a->ws, a->pool, e.act == HP_EPI_NONE && e.add == HP_EPI_ADD_NONE ? NULL : &e,
			  add, &pro);
	return 0;
}

/* FusedConv without a prologue, the epilogue e inside the conv's output
 * blocks. */
static int conv_run(const struct hp_node *n, const struct fused *f, const struct hp_kargs *a, const struct hp_epi *e)
{
	const struct hp_conv *cv = f->inner_priv;
	int nin = a->nin < f->nin ? a->nin : f->nin;

	/* input 4: a depthwise W packed once for conv_dwkz.c (W beside it) */
	if (a->nin > 4 && a->in[4].data && hp_dw_forward_packed(cv, a->in[0].data, a->in[1].data, a->in[4].data,
								cv->has_bias && nin > 2 ? a->in[2].data : NULL,
								a->out[0].data, a->pool, e, a->in[f->nin].data))
		return 0;
	/* input 4: W^T packed once (exec/fuse_pack.c) for conv_pwt.c or
	 * conv_grp.c's co-lane forward tiles */
	if (a->nin > 4 && a->in[4].data &&
	    (hp_pwt_forward_packed(cv, a->in[0].data, a->in[4].data, cv->has_bias && nin > 2 ? a->in[2].data : NULL,
				   a->out[0].data, a->pool, e, a->in[f->nin].data) ||
	     hp_conv_forward_packed(cv, a->in[0].data, a->in[4].data, cv->has_bias && nin > 2 ? a->in[2].data : NULL,
				    a->out[0].data, a->ws, a->pool, e, a->in[f->nin].data)))
		return 0;
	if (a->nin > 4 && a->in[4].data && a->in[4].data == a->in[1].data) /* W^T stands for W */
		return hp_node_error(NULL, n, HP_EINTERNAL, "W packed for tiles this node does not take");
	hp_conv_forward_epi(cv, a->in[0].data, a->in[1].data, cv->has_bias && nin > 2 ? a->in[2].data : NULL,
			    a->out[0].data, a->ws, a->pool, e, a->nin > f->nin ? a->in[f->nin].data : NULL);
	return 0;
}

/* SiLU once over the whole output after the product (its Add, if any, in
 * the tiles): the pointwise tiles would run it per tile row of 9 to 144
 * floats, each call paying the sigmoid loop's set-up and remainder (a
 * fused SiLU so was dearer than the Sigmoid and Mul nodes), while the
 * output is still in cache after the node.  The same function per
 * element, so the same bits. */
static int conv_run_silu(const struct hp_node *n, const struct fused *f, const struct hp_kargs *a)
{
	struct hp_epi e = f->epi, act = { .act = HP_EPI_SILU, .add = HP_EPI_ADD_NONE };
	int rc;

	e.act = HP_EPI_NONE;
	if (a->nin <= f->nin || !a->in[f->nin].data) /* an omitted addend */
		e.add = HP_EPI_ADD_NONE;
	if ((rc = conv_run(n, f, a, e.add == HP_EPI_ADD_NONE ? NULL : &e)) < 0)
		return rc;
	hp_epi_run(&act, a->out[0].data, NULL, hp_shape_numel(&a->out[0].shape), a->pool);
	return 0;
}

static int fused_run(const struct hp_node *n, const struct hp_kargs *a)
{
	const struct fused *f = n->priv;
	struct hp_node v = inner_view(n, f);
	struct hp_kargs ka = *a;
	int rc;

	ka.nin = a->nin < f->nin ? a->nin : f->nin;
	if (!strcmp(f->inner->name, "Conv")) { /* the epilogue inside the conv's output blocks */
		if (a->nin > FUSED_PRO_INPUT && a->in[FUSED_PRO_INPUT].data)
			return pro_run(f->inner_priv, f, a);
		return f->epi.act == HP_EPI_SILU ? conv_run_silu(n, f, a) : conv_run(n, f, a, &f->epi);
	}
	if (!strcmp(f->inner->name, "MatMul") || !strcmp(f->inner->name, "Gemm")) {
		struct hp_epi e = f->epi;
		const float *add = a->nin > f->nin ? a->in[f->nin].data : NULL;
		if (!add)
			e.add = HP_EPI_ADD_NONE;
		if (e.act == HP_EPI_NONE && e.add == HP_EPI_ADD_NONE)
			return f->inner->run(&v, &ka);
		return f->inner->name[0] == 'M' ? hp_matmul_run_epi(&v, &ka, &e, add) : hp_gemm_run_epi(&v, &ka, &e, add);
	}
	if ((rc = f->inner->run(&v, &ka)) < 0)
		return rc;
	hp_epi_run(&f->epi, a->out[0].data, a->nin > f->nin ? a->in[f->nin].data : NULL,
		   hp_shape_numel(&a->out[0].shape), a->pool);
	return 0;
}

static double fused_flops(const struct hp_graph *g, const struct hp_node *n)
{
	const struct fused *f = n->priv;
	struct hp_node v;

	if (!f)
		return 0;
	v = inner_view(n, f);
	return (f->inner->flops ? f->inner->flops(g, &v) : 0) +
	       (double)hp_shape_numel(&g->values[n->outputs[0]].shape) * (f->epi.act >= HP_EPI_SIGMOID ? 16 : 2) +
	       (n->ninputs > FUSED_PRO_INPUT && n->inputs[FUSED_PRO_INPUT] >= 0
			? 4.0 * (double)hp_shape_numel(&g->values[n->inputs[0]].shape) : 0);
}

#define FUSED_OP(VAR, NAME, MAXIN)                                                                         \
	static const struct hp_op VAR = {                                                                   \
		.domain = "ai.hpdlf", .name = NAME, .min_inputs = 2, .max_inputs = MAXIN, .min_outputs = 1, \
		.max_outputs = 1, .prepare = fused_prepare, .run = fused_run, .release = fused_release,   \
		.flops = fused_flops,                                                                      \
	}

FUSED_OP(op_fconv, "FusedConv", 6); /* x, w, b, addend, W^T packed (exec/fuse_pack.c), prologue */
FUSED_OP(op_fmatmul, "FusedMatMul", 3);
FUSED_OP(op_fgemm, "FusedGemm", 4);

/* ---- FusedGelu ---- */

static int gelu_prepare(struct hp_graph *g, struct hp_node *n)
{
	const struct hp_value *x = &g->values[n->inputs[0]];
	struct hp_value *y = &g->values[n->outputs[0]];
	const char *ap = hp_attr_string(n, "approximate", "none");
	struct hp_epi *e;

	if (x->dtype != HP_F32)
		return hp_node_error(g, n, HP_EUNSUPPORTED, "only float32 is supported");
	if (strcmp(ap, "none") && strcmp(ap, "tanh"))
		return hp_node_error(g, n, HP_EMODEL, "approximate must be none or tanh, not '%s'", ap);
	if (!(e = calloc(1, sizeof *e)))
		return hp_node_error(g, n, -ENOMEM, "out of memory");
	e->act = strcmp(ap, "tanh") ? HP_EPI_GELU : HP_EPI_GELU_TANH;
	n->priv = e;
	y->dtype = HP_F32;
	y->shape = x->shape;
	return 0;
}

static int gelu_run(const struct hp_node *n, const struct hp_kargs *a)
{
	int64_t count = hp_shape_numel(&a->out[0].shape);

	if (a->out[0].data != a->in[0].data)
		memcpy(a->out[0].data, a->in[0].data, (size_t)count * sizeof(float));
	hp_epi_run(n->priv, a->out[0].data, NULL, count, a->pool);
	return 0;
}

static double gelu_flops(const struct hp_graph *g, const struct hp_node *n)
{
	return 20.0 * (double)hp_shape_numel(&g->values[n->outputs[0]].shape);
}

static const struct hp_op op_fgelu = {
	.domain = "ai.hpdlf", .name = "FusedGelu", .min_inputs = 1, .max_inputs = 1, .min_outputs = 1,
	.max_outputs = 1, .flags = HP_OP_INPLACE, .prepare = gelu_prepare, .run = gelu_run, .flops = gelu_flops,
};

extern const struct hp_op hp_op_fused_attention; /* fused_attn.c */
extern const struct hp_op hp_op_fused_invres;    /* fused_ir.c */

const struct hp_op *const hp_ops_fused[] = {
	&op_fconv, &op_fmatmul, &op_fgemm, &op_fgelu, &hp_op_fused_attention, &hp_op_fused_invres, NULL,
};
