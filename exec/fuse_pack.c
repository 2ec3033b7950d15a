/* Constant weights of matrix products packed once, in core: B of a
 * MatMul, Gemm, FusedMatMul or FusedGemm that only that node reads, a
 * 2-D float initializer, becomes an initializer holding op(B) in the
 * panels the FMA product reads (kernels/gemm_fma.h, HP_GEMM_PACKED_ATTR).
 * Without it every inference packed every weight again for every column
 * block (8% of a BERT-style inference, 6% of a GPT-2-style one, 37% of a
 * ConvNeXt's whose late stages multiply 4-16 rows by 3072-column
 * weights).  Packing moves values, so each output keeps its chain and its
 * bits; it runs only where nothing is split (a packed B cannot be cut into
 * row bands or blocks).  At most PACK_MAX_BYTES of weights are packed: the
 * packed copies live in the graph's memory.  FusedInvRes nodes that run
 * by blocked channels (kernels/fused_ir.c, AVX-512) get their two 1x1
 * weights transposed beside the originals, as inputs 8 and 9.  Pointwise
 * Convs at tiny planes (kernels/conv_pwt.c: squeeze-and-excitation, the
 * 2x2 to 3x3 stages of mobile networks at small inputs) get theirs
 * transposed into that path's panels, as a FusedConv's input 4 (a plain Conv becomes
 * a FusedConv without epilogue); their tiles transposed W at every run
 * before (6-15% of MNASNet's, MobileNetV3's and EfficientNet-B0's
 * inference at 64-96 pixels).  Convs on conv_grp.c's co-lane tiles
 * (grouped ones at tiny planes, dense ones at small planes) get W^T as
 * input 4 and as input 1 both, in W's shape: W is then read by no node and
 * not kept (GoogLeNet had held 8 MiB of weights twice); so do conv_pwt.c's
 * panels where they hold W's floats exactly (M a multiple of 16: no zeros
 * past M), which since conv_pwt.c took planes of up to 36 positions are
 * GoogLeNet's 1x1s at 6x6 too (held beside W: 26.9 -> 30.8 MiB of
 * tensors; in its place 22.8; DenseNet's 34.6 -> 28.8, MNASNet's 7.0 ->
 * 4.4, whose 1x1s at 3x3 had kept W beside their panels).  Depthwise
 * Convs that conv_dwkz.c runs (5x5, 7x7 and dilated 3x3 windows at small
 * planes, AVX-512) or conv_dwc.c's flat 3x3 kernel get W as their
 * sixteen-channel blocks read it, beside W as input 4 (their blocks had
 * transposed or gathered W at every run: dw5x5 at 3x3 planes 33 -> 40
 * GFLOP/s per CPU-second, dw3x3 at 7x7 28 -> 32). */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hpdlf/error.h"
#include "exec/exec_internal.h"
#include "exec/fuse_internal.h"
#include "kernels/conv_impl.h"
#include "kernels/fused_impl.h"
#include "kernels/gemm_fma.h"

#define PACK_MAX_BYTES (1ull << 30)

static int is_product(const struct hp_node *n)
{
	return hp_fz_is(n, "MatMul") || hp_fz_is(n, "Gemm") ||
	       (!strcmp(n->domain, "ai.hpdlf") && (!strcmp(n->op_type, "FusedMatMul") || !strcmp(n->op_type, "FusedGemm")));
}

/* Node i's B packs: what it multiplies by, K x N of op(B), fits the cap. */
static int packable(const struct hp_graph *g, int i, uint64_t left, int64_t *k, int64_t *n, int *tb)
{
	const struct hp_node *nd = &g->nodes[i];
	int b = nd->ninputs > 1 ? nd->inputs[1] : -1;
	const struct hp_value *bv;

	if (!is_product(nd) || nd->folded || b < 0 || hp_attr_int(nd, HP_GEMM_PACKED_ATTR, 0) > 0 ||
	    hp_attr_int(nd, "pack_b", 0) != 0 || hp_attr_float(nd, "alpha", 1.0f) != 1.0f)
		return 0;
	bv = &g->values[b];
	if (!hp_fz_const(g, b) || hp_fz_user_fed(g, b) || bv->is_output || bv->shape.rank != 2 ||
	    hp_fz_only_reader(g, b) != i || g->values[nd->outputs[0]].dtype != HP_F32)
		return 0;
	*tb = strstr(nd->op_type, "Gemm") && hp_attr_int(nd, "transB", 0) != 0;
	*k = bv->shape.dims[*tb ? 1 : 0];
	*n = bv->shape.dims[*tb ? 0 : 1];
	return *k > 0 && *n > 0 && (uint64_t)hp_fma_packed_floats(*k, *n) * sizeof(float) <= left;
}

/* A new in-memory initializer beside B holding it packed (dst). */
static int add_packed(struct hp_graph *g, int b, int64_t k, int64_t n, int tb, float *dst)
{
	struct hp_shape s = { .rank = 3, .dims = { (n + 15) / 16, k, 16 } };
	const float *x = g->values[b].data;
	float *own = NULL;

	if (!x && (!(own = malloc((size_t)(k * n) * sizeof *own + 1)) || hp_graph_read_init(g, b, own) < 0)) {
		free(own);
		free(dst);
		return hp_error(-ENOMEM, "cannot read '%s' to pack it", g->values[b].name);
	}
	hp_fma_pack_b(x ? x : own, tb ? 1 : n, tb ? k : 1, k, n, dst);
	free(own);
	return hp_fz_memory_init(g, g->values[b].name, ".packed", &s, dst);
}

static int pack_one(struct hp_graph *g, int i, int64_t k, int64_t n, int tb, struct hp_fuse_report *r)
{
	size_t bytes = (size_t)hp_fma_packed_floats(k, n) * sizeof(float);
	float *dst = aligned_alloc(64, (bytes + 63) / 64 * 64); /* the panels' vectors on their lines */
	int b = g->nodes[i].inputs[1], v, rc;
	char line[512];

	if (!dst)
		return hp_error(-ENOMEM, "out of memory packing '%s'", g->values[b].name);
	if ((v = add_packed(g, b, k, n, tb, dst)) < 0)
		return v;
	if ((rc = hp_fz_attr_int(g, i, HP_GEMM_PACKED_ATTR, n)) < 0)
		return rc;
	snprintf(line, sizeof line, "weight '%s' of %s '%s' packed once (%lld x %lld)", g->values[b].name,
		 g->nodes[i].op_type, g->nodes[i].name, (long long)k, (long long)n);
	g->nodes[i].inputs[1] = v;
	hp_fz_note(r, "Packed weights", line);
	return 0;
}

/* A FusedInvRes node's 1x1 weight w, W [m][k] (m rows of k), transposed
 * into a new initializer [k][mp] (mp: m rounded up to 16, the columns past
 * m zero), the vectors its blocked path reads (kernels/fused_ir.c); its
 * value index. */
static int add_transposed(struct hp_graph *g, int w, int64_t m, int64_t k, const char *suffix)
{
	int64_t mp = (m + 15) / 16 * 16;
	struct hp_shape s = { .rank = 2, .dims = { k, mp } };
	const float *x = g->values[w].data;
	float *own = NULL, *dst = aligned_alloc(64, (size_t)((k * mp * 4 + 63) / 64 * 64));

	if (!dst || (!x && (!(own = malloc((size_t)(k * m) * sizeof *own + 1)) || hp_graph_read_init(g, w, own) < 0))) {
		free(own);
		free(dst);
		return hp_error(-ENOMEM, "cannot read '%s' to pack it", g->values[w].name);
	}
	x = x ? x : own;
	for (int64_t kk = 0; kk < k; kk++)
		for (int64_t r = 0; r < mp; r++)
			dst[kk * mp + r] = r < m ? x[r * k + kk] : 0.0f;
	free(own);
	return hp_fz_memory_init(g, g->values[w].name, suffix, &s, dst);
}

/* FusedInvRes nodes that fused_ir.c runs by blocked channels get their
 * expansion and projection weights transposed once, as inputs 8 and 9;
 * moving values only, so every output keeps its chain. */
static int pack_invres(struct hp_graph *g, uint64_t *left, struct hp_fuse_report *r)
{
	int any = 0;

	for (int i = 0; i < g->nnodes; i++) {
		struct hp_node *nd = &g->nodes[i];
		const int64_t *st = NULL, *pd = NULL;
		int *in, v1, v2;
		char line[512];

		if (strcmp(nd->domain, "ai.hpdlf") || strcmp(nd->op_type, "FusedInvRes") || nd->ninputs > 8 ||
		    nd->inputs[1] < 0 || nd->inputs[5] < 0 || hp_attr_ints(nd, "strides", &st) != 2 ||
		    hp_attr_ints(nd, "pads", &pd) != 4)
			continue;
		int w1 = nd->inputs[1], w2 = nd->inputs[5];
		const struct hp_shape *xs = &g->values[nd->inputs[0]].shape, *s1 = &g->values[w1].shape;
		const struct hp_shape *s2 = &g->values[w2].shape;
		if (xs->rank != 4 || s1->rank != 4 || s2->rank != 4 || st[0] < 1)
			continue;
		int64_t ce = s1->dims[0], cin = s1->dims[1], cout = s2->dims[0];
		uint64_t bytes = (uint64_t)(cin * ((ce + 15) / 16 * 16) + ce * ((cout + 15) / 16 * 16)) * sizeof(float);
		if (!hp_fir_packs(xs->dims[2], xs->dims[3]) || s2->dims[1] != ce || bytes > *left || !hp_fz_const(g, w1) ||
		    !hp_fz_const(g, w2) || hp_fz_user_fed(g, w1) || hp_fz_user_fed(g, w2) ||
		    g->values[w1].dtype != HP_F32 || g->values[w2].dtype != HP_F32)
			continue;
		if ((v1 = add_transposed(g, w1, ce, cin, ".t16")) < 0 || (v2 = add_transposed(g, w2, cout, ce, ".t16")) < 0)
			return v1 < 0 ? v1 : v2;
		nd = &g->nodes[i]; /* the initializers may have moved the values, not the nodes */
		if (!(in = realloc(nd->inputs, 10 * sizeof *in)))
			return hp_error(-ENOMEM, "out of memory");
		for (int j = nd->ninputs; j < 8; j++)
			in[j] = -1;
		in[8] = v1, in[9] = v2;
		nd->inputs = in, nd->ninputs = 10;
		*left -= bytes;
		snprintf(line, sizeof line, "weights of FusedInvRes '%s' transposed once (blocks of channels)", nd->name);
		hp_fz_note(r, "Packed weights", line);
		any = 1;
	}
	return any;
}

/* Node i, a Conv or a FusedConv of at most 4 inputs whose weight only it
 * reads, a float constant: TINY_PW where conv_pwt.c would run it from W^T
 * packed (hp_conv_pwt_packs, on the node's geometry as it will be prepared),
 * TINY_GRP where conv_grp.c's co-lane forward tiles would (hp_grp_packs),
 * else 0. */
enum { TINY_PW = 1, TINY_GRP = 2, TINY_DW = 3 };

static int pw_tiny(struct hp_graph *g, int i)
{
	struct hp_node v = g->nodes[i];
	struct hp_conv cv;
	int w, pw = 1;

	if (!(hp_fz_is(&v, "Conv") || (!strcmp(v.domain, "ai.hpdlf") && !strcmp(v.op_type, "FusedConv"))) ||
	    v.folded || v.ninputs < 2 || v.ninputs > 4 || (w = v.inputs[1]) < 0 || v.inputs[0] < 0 ||
	    !hp_fz_const(g, w) || hp_fz_user_fed(g, w) || g->values[w].is_output || hp_fz_only_reader(g, w) != i ||
	    g->values[w].dtype != HP_F32 || g->values[v.inputs[0]].dtype != HP_F32 || g->values[w].shape.rank < 3)
		return 0;
	for (int d = 2; d < g->values[w].shape.rank; d++)
		if (g->values[w].shape.dims[d] != 1)
			pw = 0;
	if (hp_attr_int(&v, "group", 1) != 1)
		pw = 0;
	for (int d = 0; d < g->values[v.inputs[0]].shape.rank; d++)
		if (g->values[v.inputs[0]].shape.dims[d] < 1) /* not known yet */
			return 0;
	v.ninputs = v.ninputs < 3 ? v.ninputs : 3; /* the inner Conv's view (kernels/fused.c) */
	if (hp_conv_parse(g, &v, 0, &cv) < 0)
		return 0;
	hp_conv_setup(&cv);
	if (cv.dw) /* conv_dwkz.c's and conv_dwc.c's sixteen-lane planes */
		return hp_dw_packs(&cv) ? TINY_DW : 0;
	return pw && hp_conv_pwt_packs(&cv) ? TINY_PW : hp_grp_packs(&cv) ? TINY_GRP : 0;
}

static int set_fused_conv(struct hp_graph *g, int i)
{
	int rc = hp_fz_set_op(&g->nodes[i], "FusedConv");

	return rc < 0 ? rc : hp_fz_attr_str(g, i, "activation", "");
}

/* W's n floats to pack (*x: its data, or a copy read into *own, which
 * the caller frees) and the pack's nf floats, 64-byte aligned (*dst). */
static int pack_source(struct hp_graph *g, int w, int64_t n, int64_t nf, const float **x, float **own, float **dst)
{
	*x = g->values[w].data;
	*own = NULL;
	*dst = aligned_alloc(64, (size_t)((nf * 4 + 63) / 64 * 64));
	if (*dst && (*x || ((*own = malloc((size_t)n * sizeof **own + 1)) && hp_graph_read_init(g, w, *own) >= 0))) {
		*x = *x ? *x : *own;
		return 0;
	}
	free(*own);
	free(*dst);
	return hp_error(-ENOMEM, "cannot read '%s' to pack it", g->values[w].name);
}

/* Whether x[0 .. n) holds no Inf or NaN. */
static int all_finite(const float *x, int64_t n)
{
	for (int64_t i = 0; i < n; i++)
		if (!isfinite(x[i]))
			return 0;
	return 1;
}

/* W [m][k] as conv_pwt.c's tiles read it (hp_pwt_pack), or for conv_grp.c
 * (group > 0: groups of m / group rows) as hp_grp_pack lays it out, a new
 * initializer; its value index, or NO_PACK for a W of one group with an
 * Inf or NaN: conv_grp.c's packed 3x3 tiles skip the padding's products
 * w * 0, which is exact only for finite w (left unpacked, such a node runs
 * the full chains, as it would out of core). */
#define NO_PACK INT_MIN
static int add_pwt(struct hp_graph *g, int w, int64_t m, int64_t k, int64_t group)
{
	int64_t nf = group ? m * k : hp_pwt_packed_floats(m, k);
	/* conv_grp.c's layout holds W's floats, and conv_pwt.c's where M is a
	 * multiple of 16: W's shape, so that it can stand for W too
	 * (pack_pw_tiny) */
	struct hp_shape s = nf == m * k ? g->values[w].shape : (struct hp_shape){ .rank = 2, .dims = { k, nf / k } };
	const float *x;
	float *own, *dst;
	int rc = pack_source(g, w, m * k, nf, &x, &own, &dst);

	if (rc < 0)
		return rc;
	if (group == 1 && !all_finite(x, m * k)) {
		free(own);
		free(dst);
		return NO_PACK;
	}
	if (group)
		hp_grp_pack(x, group, m / group, k, dst);
	else
		hp_pwt_pack(x, m, k, dst);
	free(own);
	return hp_fz_memory_init(g, g->values[w].name, group ? ".grpt" : ".pwt", &s, dst);
}

/* A depthwise W [m][kvol] as conv_dwkz.c's blocks read it (hp_dwkz_pack:
 * [m / 16][kvol][16], zeros past m), a new initializer; its value index. */
static int add_dw(struct hp_graph *g, int w, int64_t m, int64_t k)
{
	int64_t nf = hp_dwkz_packed_floats(m, k);
	struct hp_shape s = { .rank = 3, .dims = { nf / (16 * k), k, 16 } };
	const float *x;
	float *own, *dst;
	int rc = pack_source(g, w, m * k, nf, &x, &own, &dst);

	if (rc < 0)
		return rc;
	hp_dwkz_pack(x, m, k, dst);
	free(own);
	return hp_fz_memory_init(g, g->values[w].name, ".dw16", &s, dst);
}

/* Pointwise Convs at tiny planes: W [M][K] packed once into the panels
 * of conv_pwt.c's tiles as input 4 of a FusedConv; grouped ones on
 * conv_grp.c's co-lane forward tiles (ResNeXt's 3x3s at 2x2 and 4x4, where
 * transposing W per run cost as long as the products) the same, W^T per
 * group; moving values only, so every output keeps its chain. */
static int pack_pw_tiny(struct hp_graph *g, uint64_t *left, struct hp_fuse_report *r)
{
	int any = 0, v, rc, *in;
	char line[512];

	for (int i = 0; i < g->nnodes; i++) {
		int kind = pw_tiny(g, i);
		if (!kind)
			continue;
		int w = g->nodes[i].inputs[1];
		int64_t m = g->values[w].shape.dims[0], k = 1, group = 0;
		for (int d = 1; d < g->values[w].shape.rank; d++)
			k *= g->values[w].shape.dims[d];
		if (kind == TINY_GRP)
			group = hp_attr_int(&g->nodes[i], "group", 1);
		int64_t nf = kind == TINY_DW ? hp_dwkz_packed_floats(m, k) : group ? m * k : hp_pwt_packed_floats(m, k);
		uint64_t bytes = (uint64_t)nf * sizeof(float);
		if (bytes > *left)
			continue;
		if ((v = kind == TINY_DW ? add_dw(g, w, m, k) : add_pwt(g, w, m, k, group)) == NO_PACK)
			continue;
		if (v < 0)
			return v;
		if (hp_fz_is(&g->nodes[i], "Conv") && (rc = set_fused_conv(g, i)) < 0)
			return rc;
		struct hp_node *nd = &g->nodes[i]; /* the initializer may have moved the values, not the nodes */
		if (!(in = realloc(nd->inputs, 5 * sizeof *in)))
			return hp_error(-ENOMEM, "out of memory");
		for (int j = nd->ninputs; j < 4; j++)
			in[j] = -1;
		in[4] = v;
		/* conv_grp.c's and conv_pwt.c's tiles read W^T alone: where it
		 * holds W's floats it takes W's place too, and W (its only
		 * reader this node) is not kept beside it (kernels/fused.c
		 * refuses to run such a node on W) */
		if (kind == TINY_GRP || (kind == TINY_PW && hp_shape_numel(&g->values[v].shape) == m * k))
			in[1] = v; /* the depthwise pack stays beside W: conv_dw.c's paths read W */
		nd->inputs = in, nd->ninputs = 5;
		*left -= bytes;
		snprintf(line, sizeof line, "weight '%s' of Conv '%s' packed once (%s)", g->values[w].name, nd->name,
			 kind == TINY_DW ? "depthwise, sixteen channels a block" : "tiny planes");
		hp_fz_note(r, "Packed weights", line);
		any = 1;
	}
	return any;
}

int hp_fuse_pack_weights(struct hp_graph *g, struct hp_fuse_report *r)
{
	uint64_t left = PACK_MAX_BYTES;
	int64_t k, n;
	int tb, any = 0, rc;

	if ((rc = pack_invres(g, &left, r)) < 0)
		return rc;
	any = rc;
	if ((rc = pack_pw_tiny(g, &left, r)) < 0)
		return rc;
	any |= rc;
	if (!hp_fma_gemm_ok())
		return any;
	for (int i = 0; i < g->nnodes; i++) {
		if (!packable(g, i, left, &k, &n, &tb))
			continue;
		left -= (uint64_t)hp_fma_packed_floats(k, n) * sizeof(float);
		if ((rc = pack_one(g, i, k, n, tb, r)) < 0)
			return rc;
		any = 1;
	}
	return any;
}
