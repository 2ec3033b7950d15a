/* Inference graph optimisation, after import and before planning (see
 * fuse.h for the passes; this file holds the driver and the first pass):
 * an inference-mode BatchNormalization whose input is a Conv's or a Gemm's
 * output (read by nothing else) folds into that node.  With
 * a = scale / sqrt(var + eps), W' = W * a per output channel and
 * B' = (B - mean) * a + bias (Gemm: (beta C - mean) a + bias, beta 1),
 * computed in double and rounded once: one pass over the data instead of
 * two, and no BatchNorm tensor.  Rounding differs from the unfolded graph (W' is
 * rounded before the products are summed), within a few float32 ulps of
 * the result's scale; tests/exec/check_fuse.py states the tolerance.
 *
 * Training never sees this: hpdlf-exec calls it only for inference (and
 * autodiff turns every BatchNormalization into BatchNormTrain anyway).
 * The Conv gets new initializers held in memory (a weight another node
 * also reads is untouched), at most FUSE_MAX_BYTES of them. */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "hpdlf/error.h"
#include "hpdlf/kernels.h"
#include "exec/budget.h"
#include "exec/fuse_internal.h"
#include "exec/plan.h"

/* Folded weights live in memory (the graph's), beside any budget: at most
 * this many bytes of them, whatever the mode, so that in core and out of
 * core fold the same nodes and give the same bits. */
#define FUSE_MAX_BYTES (64u << 20)

/* Whether value v is a float initializer or constant of n elements, in
 * memory or in the model's file. */
static int const_f32(const struct hp_graph *g, int v, int64_t n)
{
	const struct hp_value *x = v >= 0 ? &g->values[v] : NULL;

	if (!x || x->dtype != HP_F32 || hp_shape_numel(&x->shape) != n)
		return 0;
	if (x->data)
		return x->kind == HP_VALUE_INITIALIZER || x->kind == HP_VALUE_CONSTANT;
	return x->kind == HP_VALUE_INITIALIZER && x->src.kind == HP_BLOB_FILE;
}

/* Output channels of product node c (Conv or Gemm) when its weight input
 * is constant and its bias fits the fold: the per-channel weight layout in
 * *cols (0: channel-major rows, 1: Gemm's B [K, N], channels in columns). */
static int64_t product_channels(const struct hp_graph *g, const struct hp_node *c, int64_t m, int *cols)
{
	const struct hp_value *w = c->ninputs > 1 && c->inputs[1] >= 0 ? &g->values[c->inputs[1]] : NULL;
	int gemm = hp_fz_is(c, "Gemm"), bias = c->ninputs > 2 ? c->inputs[2] : -1;

	*cols = gemm && !hp_attr_int(c, "transB", 0);
	if (!w || w->shape.rank < (gemm ? 2 : 1) || w->shape.dims[*cols ? 1 : 0] != m ||
	    !const_f32(g, c->inputs[1], hp_shape_numel(&w->shape)))
		return -1;
	if (bias >= 0 && !const_f32(g, bias, m) && !(gemm && const_f32(g, bias, 1)))
		return -1;
	return m;
}

/* The Conv or Gemm whose output BatchNorm node b reads and may absorb, or -1. */
static int foldable_conv(const struct hp_graph *g, const struct hp_node *b, uint64_t *budget)
{
	int x = b->ninputs == 5 ? b->inputs[0] : -1, p, cols;
	const struct hp_node *c;

	if (x < 0 || hp_attr_int(b, "training_mode", 0) || g->values[x].is_output || g->values[x].nconsumers != 1)
		return -1;
	for (int o = 1; o < b->noutputs; o++)
		if (b->outputs[o] >= 0)
			return -1;
	p = g->values[x].producer;
	if (p < 0 || !(hp_fz_is(&g->nodes[p], "Conv") || (hp_fz_is(&g->nodes[p], "Gemm") && g->values[x].shape.rank == 2)) ||
	    g->nodes[p].noutputs != 1)
		return -1;
	c = &g->nodes[p];
	int64_t m = g->values[x].shape.rank > 1 ? g->values[x].shape.dims[1] : -1;
	if (m < 1 || product_channels(g, c, m, &cols) < 0)
		return -1;
	for (int i = 1; i < 5; i++)
		if (!const_f32(g, hp_fz_past_identity(g, b->inputs[i]), m))
			return -1;
	uint64_t bytes = (uint64_t)(hp_shape_numel(&g->values[c->inputs[1]].shape) + m) * sizeof(float);
	if (bytes > *budget)
		return -1;
	*budget -= bytes;
	return p;
}

struct fold_geom {
	int64_t m, per;   /* channels, weights per channel */
	int cols;         /* channels are the columns of W (Gemm, transB 0) */
	int scalar_bias;  /* the product's bias is one value (Gemm's C) */
	double beta;      /* Gemm's beta (1 for Conv) */
};

/* W' = W a and B' = (beta B - mean) a + bias per output channel k, in double. */
static void fold_math(const float *const p[6], const struct fold_geom *fg, double eps, float *nw, float *nb)
{
	const float *W = p[0], *cb = p[1], *sc = p[2], *bias = p[3], *mean = p[4], *var = p[5];
	int64_t m = fg->m, per = fg->per;

	for (int64_t k = 0; k < m; k++) {
		double a = sc[k] / sqrt((double)var[k] + eps), b = cb ? cb[fg->scalar_bias ? 0 : k] : 0.0;
		for (int64_t i = 0; i < per; i++) {
			int64_t at = fg->cols ? i * m + k : k * per + i;
			nw[at] = (float)(W[at] * a);
		}
		nb[k] = (float)((fg->beta * b - mean[k]) * a + bias[k]);
	}
}

static int fold_geom_of(const struct hp_graph *g, const struct hp_node *c, const struct hp_node *b, struct fold_geom *fg)
{
	const struct hp_value *w = &g->values[c->inputs[1]];
	int64_t n = hp_shape_numel(&w->shape);

	fg->m = g->values[b->inputs[1]].shape.rank ? hp_shape_numel(&g->values[b->inputs[1]].shape) : 1;
	fg->per = n / fg->m;
	fg->cols = hp_fz_is(c, "Gemm") && !hp_attr_int(c, "transB", 0);
	fg->scalar_bias = c->ninputs > 2 && c->inputs[2] >= 0 && hp_shape_numel(&g->values[c->inputs[2]].shape) == 1;
	fg->beta = hp_fz_is(c, "Gemm") ? hp_attr_float(c, "beta", 1.0f) : 1.0;
	return 0;
}

/* Under a budget: weight W' = W a (rows of channels, fg->cols 0) computed
 * a block of channels at a time into the graph's spill file, W read from
 * memory or a block at a time from its file; the same expression per
 * element as fold_math.  The new initializer's index, or an error. */
static int fold_spilled(struct hp_graph *g, int w, const struct fold_geom *fg, const double *a)
{
	const struct hp_value *x = &g->values[w];
	int64_t kb = HP_FZ_SPILL_BLOCK_BYTES / 4 / (fg->per ? fg->per : 1), per = fg->per;
	float *blk, *own = NULL;
	int fd, fi, in = -1, rc = 0;
	uint64_t at;

	kb = kb < 1 ? 1 : kb > fg->m ? fg->m : kb;
	if ((fi = hp_fz_spill(g, &fd, &at)) < 0)
		return fi;
	x = &g->values[w];
	if (!(blk = malloc((size_t)(kb * per) * sizeof *blk)) || (!x->data && !(own = malloc((size_t)(kb * per) * 4)))) {
		free(blk);
		return hp_error(-ENOMEM, "out of memory");
	}
	if (!x->data && (in = open(g->files[x->src.file], O_RDONLY | O_CLOEXEC)) < 0)
		rc = hp_error(-errno, "%s: %s", g->files[x->src.file], strerror(errno));
	for (int64_t k0 = 0; k0 < fg->m && rc == 0; k0 += kb) {
		int64_t nk = fg->m - k0 < kb ? fg->m - k0 : kb;
		size_t len = (size_t)(nk * per) * sizeof *blk;
		const float *W = x->data ? (const float *)x->data + k0 * per : own;
		if (!x->data && (rc = hp_fz_read_at(in, g->files[x->src.file], x, (uint64_t)(k0 * per) * 4, own, len)) < 0)
			break;
		for (int64_t k = 0; k < nk; k++)
			for (int64_t i = 0; i < per; i++)
				blk[k * per + i] = (float)(W[k * per + i] * a[k0 + k]);
		rc = hp_fz_write_at(fd, at + (uint64_t)(k0 * per) * 4, blk, len, x->name);
	}
	if (in >= 0)
		close(in);
	free(blk);
	free(own);
	if (rc < 0)
		return rc;
	struct hp_shape ws = g->values[w].shape;
	return hp_fz_file_init(g, g->values[w].name, ".bnfold", &ws, fi, at);
}

/* Folded weight and bias of Conv or Gemm node ci under BatchNorm node bi;
 * spill: under a budget (fold_spilled for a weight of HP_FZ_SPILL_MIN_BYTES
 * or more in channel rows). */
static int fold_values(struct hp_graph *g, int ci, int bi, int *wv, int *bv, int spill)
{
	const struct hp_node *c = &g->nodes[ci], *b = &g->nodes[bi];
	const struct hp_value *w = &g->values[c->inputs[1]];
	struct fold_geom fg = { .beta = 1.0 };
	int src[6] = { c->inputs[1], c->ninputs > 2 ? c->inputs[2] : -1, hp_fz_past_identity(g, b->inputs[1]),
		       hp_fz_past_identity(g, b->inputs[2]), hp_fz_past_identity(g, b->inputs[3]),
		       hp_fz_past_identity(g, b->inputs[4]) };
	const float *p[6] = { 0 };
	float *own[6] = { 0 };
	int rc = fold_geom_of(g, c, b, &fg);
	struct hp_shape bs = { 1, { fg.m } };
	int spilled = spill && !fg.cols && (uint64_t)hp_shape_numel(&w->shape) * 4 >= HP_FZ_SPILL_MIN_BYTES &&
		      (w->data || (w->src.kind == HP_BLOB_FILE && w->src.file >= 0 && w->src.file < g->nfiles));
	float *nw = spilled ? NULL : malloc((size_t)hp_shape_numel(&w->shape) * sizeof *nw);
	float *nb = malloc((size_t)fg.m * sizeof *nb);
	double *a = spilled ? malloc((size_t)fg.m * sizeof *a) : NULL;

	if ((!spilled && !nw) || !nb || (spilled && !a))
		rc = hp_error(-ENOMEM, "out of memory");

	for (int i = spilled ? 1 : 0; i < 6 && rc == 0; i++)
		if (src[i] >= 0 && !(p[i] = hp_fz_load_f32(g, src[i], &own[i])))
			rc = hp_error(-ENOMEM, "cannot read '%s' to fold it", g->values[src[i]].name);
	if (rc == 0 && !spilled)
		fold_math(p, &fg, hp_attr_float(b, "epsilon", 1e-5f), nw, nb);
	if (rc == 0 && spilled) { /* fold_math's bias, and its factors for the weight */
		const float *cb = p[1], *sc = p[2], *bias = p[3], *mean = p[4], *var = p[5];
		double eps = hp_attr_float(b, "epsilon", 1e-5f);
		for (int64_t k = 0; k < fg.m; k++) {
			double bb = cb ? cb[fg.scalar_bias ? 0 : k] : 0.0;
			a[k] = sc[k] / sqrt((double)var[k] + eps);
			nb[k] = (float)((fg.beta * bb - mean[k]) * a[k] + bias[k]);
		}
	}
	for (int i = 0; i < 6; i++)
		free(own[i]);
	if (rc < 0) {
		free(nw);
		free(nb);
		free(a);
		return rc;
	}
	if (spilled) {
		*wv = fold_spilled(g, src[0], &fg, a);
		free(a);
		if (*wv < 0) {
			free(nb);
			return *wv;
		}
	} else {
		struct hp_shape ws = w->shape; /* hp_fz_memory_init may move the values */
		if ((*wv = hp_fz_memory_init(g, w->name, ".bnfold", &ws, nw)) < 0) {
			free(nb);
			return *wv;
		}
	}
	*bv = hp_fz_memory_init(g, g->values[b->outputs[0]].name, ".bias.bnfold", &bs, nb);
	return *bv < 0 ? *bv : 0;
}

/* Conv ci takes the folded weights and writes BatchNorm bi's output. */
static int rewire(struct hp_graph *g, int ci, int bi, int wv, int bv)
{
	struct hp_node *c = &g->nodes[ci];
	int *in = c->inputs;

	if (c->ninputs < 3) {
		if (!(in = realloc(c->inputs, 3 * sizeof *in)))
			return hp_error(-ENOMEM, "out of memory");
		c->inputs = in;
		c->ninputs = 3;
	}
	in[1] = wv;
	in[2] = bv;
	for (int a = 0; a < c->nattrs; a++) /* Gemm: the folded C is the whole bias */
		if (!strcmp(c->attrs[a].name, "beta"))
			c->attrs[a].f = 1.0f;
	g->values[c->outputs[0]].producer = -1;
	c->outputs[0] = g->nodes[bi].outputs[0];
	return 0;
}

/* Note "BatchNormalization 'b' into Conv 'c'" in the report. */
static void note(struct hp_fuse_report *r, const struct hp_node *b, const struct hp_node *c)
{
	char line[512];

	snprintf(line, sizeof line, "BatchNormalization '%s' into %s '%s'", b->name, c->op_type, c->name);
	hp_fz_note(r, hp_fz_is(c, "Conv") ? "Conv+BatchNormalization" : "Gemm+BatchNormalization", line);
	r->nodes_removed++;
}

/* The first BatchNormalization that folds: its node index and its Conv's. */
static int next_fold(const struct hp_graph *g, int *ci, uint64_t *budget)
{
	for (int i = 0; i < g->nnodes; i++)
		if (hp_fz_is(&g->nodes[i], "BatchNormalization") && (*ci = foldable_conv(g, &g->nodes[i], budget)) >= 0)
			return i;
	return -1;
}

/* Identity nodes whose output nothing reads any more (a folded
 * BatchNorm's statistics, through_identity): dropped, so that they are no
 * kernels to dispatch; the graph's outputs stay.  Chains of them go one
 * link per round (consumers are counted again by hp_graph_finalize). */
static int drop_dead_identities(struct hp_graph *g)
{
	for (int removed = 1, rounds = 0; removed && rounds < 16; rounds++) {
		int rc;
		removed = 0;
		for (int i = g->nnodes - 1; i >= 0; i--) {
			const struct hp_node *n = &g->nodes[i];
			int o = n->noutputs == 1 ? n->outputs[0] : -1;
			if (!hp_fz_is(n, "Identity") || o < 0 || g->values[o].nconsumers || g->values[o].is_output)
				continue;
			hp_graph_remove_node(g, i);
			removed = 1;
		}
		if (removed && (rc = hp_graph_finalize(g)) < 0)
			return rc;
	}
	return 0;
}

/* BatchNormalization into Conv or Gemm, until none is left. */
static int fold_bn(struct hp_graph *g, struct hp_fuse_report *r, int *any, int spill)
{
	int rc, i, ci;
	uint64_t budget = FUSE_MAX_BYTES;

	/* producers and consumers are node indices: relink after every fold */
	while ((i = next_fold(g, &ci, &budget)) >= 0) {
		int wv = -1, bv = -1;
		if ((rc = fold_values(g, ci, i, &wv, &bv, spill)) < 0 || (rc = rewire(g, ci, i, wv, bv)) < 0)
			return rc;
		note(r, &g->nodes[i], &g->nodes[ci]);
		hp_graph_remove_node(g, i);
		if ((rc = hp_graph_finalize(g)) < 0)
			return rc;
		*any = 1;
	}
	return *any ? drop_dead_identities(g) : 0;
}

/* Run pass p until it finds nothing more, relinking after each rewrite. */
static int run_pass(struct hp_graph *g, hp_fuse_pass p, struct hp_fuse_report *r, int *any)
{
	int rc;

	while ((rc = p(g, r)) > 0) {
		if ((rc = hp_graph_finalize(g)) < 0)
			return rc;
		*any = 1;
	}
	return rc;
}

int hp_fuse_inference(struct hp_graph *g, const struct hp_fuse_opts *opts, struct hp_fuse_report *r)
{
	/* the rewrites that change rounding run in every mode (the same nodes
	 * in core and out of core); Gelu before the epilogues that absorb it */
	static const hp_fuse_pass always[] = { hp_fuse_gelu, hp_fuse_layernorm, hp_fuse_attention,
						hp_fuse_transpose_gemm };
	int rc, any = 0;

	memset(r, 0, sizeof *r);
	if ((rc = fold_bn(g, r, &any, opts && opts->splittable)) < 0)
		return rc;
	/* on the folded weights, before the epilogues turn Convs into FusedConvs */
	if ((rc = hp_fuse_dead_taps(g, r, opts && opts->splittable)) < 0 || (rc > 0 && (any = 1) && (rc = hp_graph_finalize(g)) < 0))
		return rc;
	for (size_t i = 0; i < sizeof always / sizeof always[0]; i++)
		if ((rc = run_pass(g, always[i], r, &any)) < 0)
			return rc;
	/* after the passes that absorb Transposes into a product or attention */
	if ((rc = hp_fuse_const_transpose(g, r, opts && opts->splittable)) < 0 || (rc > 0 && (any = 1) && (rc = hp_graph_finalize(g)) < 0))
		return rc;
	if (!(opts && opts->splittable) && (rc = run_pass(g, hp_fuse_epilogue, r, &any)) < 0)
		return rc;
	if (!(opts && opts->splittable) && (rc = run_pass(g, hp_fuse_invres, r, &any)) < 0)
		return rc;
	if (!(opts && opts->splittable) && (rc = run_pass(g, hp_fuse_prologue, r, &any)) < 0)
		return rc;
	/* last: the products' B as the passes above left them */
	if (!(opts && opts->splittable) && (rc = hp_fuse_pack_weights(g, r)) < 0)
		return rc;
	any |= rc > 0;
	return any ? hp_graph_infer(g) : 0;
}

int hp_fuse_after_split(struct hp_graph *g, const struct hp_exec_opts *o, struct hp_fuse_report *r)
{
	struct hp_plan_opts po = { .align = HP_BUDGET_ALIGN };
	struct hp_fuse_cap cap = { .align = HP_BUDGET_ALIGN, .io = UINT64_MAX, .step = UINT64_MAX };
	struct hp_budget_layout l;
	int rc, any = 0;

	hp_budget_layout(g, o, &l);
	if (l.budget) {
		/* the largest step with its kernel's workspace, and without (the
		 * runtime's scratch reserved once: hp_plan_min_budget adds it to
		 * the largest step, here one byte); or up to what the split pass
		 * cuts at (split_target: a quarter of the budget left for what
		 * the plan keeps resident), the reserved scratch beside it */
		uint64_t target = l.budget - l.budget / 4;
		cap.step = hp_plan_min_budget(g, &po, NULL);
		po.workspace = 1;
		cap.io = hp_plan_min_budget(g, &po, NULL);
		if (!cap.step || !cap.io)
			return 0; /* nothing to plan: nothing to fuse */
		cap.io--;
		if (cap.step < target)
			cap.step = target;
		if (target > l.workspace && cap.io < target - l.workspace)
			cap.io = target - l.workspace;
	}
	while ((rc = hp_fuse_epilogue_within(g, r, &cap)) > 0) {
		if ((rc = hp_graph_finalize(g)) < 0)
			return rc;
		any = 1;
	}
	if (rc < 0)
		return rc;
	return any ? hp_graph_infer(g) : 0;
}

int hp_fuse_training(struct hp_graph *g)
{
	struct hp_fuse_report r;
	int rc, any = 0;

	memset(&r, 0, sizeof r);
	if ((rc = run_pass(g, hp_fuse_gelu, &r, &any)) >= 0)
		rc = run_pass(g, hp_fuse_layernorm, &r, &any);
	if (rc >= 0)
		rc = run_pass(g, hp_fuse_train_linear, &r, &any);
	if (rc >= 0)
		rc = run_pass(g, hp_fuse_train_taps, &r, &any);
	hp_fuse_report_free(&r);
	if (rc < 0)
		return rc;
	return any ? hp_graph_infer(g) : 0;
}

void hp_fuse_report_free(struct hp_fuse_report *r)
{
	for (int i = 0; i < r->nfused; i++)
		free(r->lines[i]);
	for (int i = 0; i < r->npatterns; i++)
		free(r->patterns[i]);
	free(r->lines);
	free(r->patterns);
	free(r->counts);
	memset(r, 0, sizeof *r);
}
