/* Autodiff: training-mode rewrite, loss, reverse-mode gradient graph with
 * accumulation at fan-outs, and per-parameter optimizer updates linked to
 * their state through value.next.  Per-op rules are in autodiff_rules.c. */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hpdlf/error.h"
#include "hpdlf/kernels.h"
#include "exec/autodiff_internal.h"
#include "exec/fuse_internal.h"
#include "exec/remat.h"
#include "exec/split_weight.h"

void hp_train_spec_init(struct hp_train_spec *s, size_t size)
{
	memset(s, 0, size);
	s->size = size;
	s->loss = HP_LOSS_CROSS_ENTROPY;
	s->ignore_index = -100;
	s->optimizer = HP_OPT_SGD;
	s->lr = 0.01;
	s->weight_decay = -1;
	s->beta1 = 0.9;
	s->beta2 = 0.999;
	s->eps = 1e-8;
	s->seed = 1;
}

/* The node that outputs value v, or -1: the last such node, as a scan
 * from the end finds it.  The backward pass only appends nodes (ad_emit)
 * and rewrites inputs (chain), so an index of the nodes seen so far is
 * extended by the new ones; a graph that shrank is indexed again, and an
 * answer that no longer outputs v falls back to the scan.  (A linear scan
 * per contribution took 70% of a mobile net's --plan at --budget 1.) */
static int producer_scan(const struct hp_graph *g, int v)
{
	for (int i = g->nnodes - 1; i >= 0; i--)
		for (int o = 0; o < g->nodes[i].noutputs; o++)
			if (g->nodes[i].outputs[o] == v)
				return i;
	return -1;
}

static int producer(struct ad *ad, int v)
{
	const struct hp_graph *g = ad->g;

	if (v < 0)
		return producer_scan(g, v);
	if (g->nnodes < ad->prod_nodes)
		ad->prod_nodes = 0;
	if (g->nvalues > ad->prod_cap) {
		int cap = 2 * g->nvalues, *p = realloc(ad->prod, (size_t)cap * sizeof *p);
		if (!p)
			return producer_scan(g, v);
		ad->prod = p;
		ad->prod_cap = cap;
		ad->prod_nodes = 0;
	}
	if (!ad->prod_nodes)
		for (int i = 0; i < ad->prod_cap; i++)
			ad->prod[i] = -1;
	for (; ad->prod_nodes < g->nnodes; ad->prod_nodes++) {
		const struct hp_node *n = &g->nodes[ad->prod_nodes];
		for (int o = 0; o < n->noutputs; o++)
			if (n->outputs[o] >= 0 && n->outputs[o] < ad->prod_cap)
				ad->prod[n->outputs[o]] = ad->prod_nodes;
	}
	int p = v < ad->prod_cap ? ad->prod[v] : -1;
	if (p < 0)
		return -1;
	for (int o = 0; o < g->nodes[p].noutputs; o++)
		if (g->nodes[p].outputs[o] == v)
			return p;
	return producer_scan(g, v);
}

/* Contribution c, from a kernel that can start from a running sum
 * (ConvGradFilter: input 2; BiasGrad: input 1, the sum in double;
 * GemmGrad's dA: input 3), takes
 * acc, from the same op, that way instead of a GradSum after it.  The
 * band nodes of one convolution then sum in the whole kernel's order
 * (conv_grad.c), and out-of-core training is bitwise the in-core one.
 * 1 if chained, 0 if not, < 0 on error. */
static int chain(struct ad *ad, int acc, int c)
{
	struct hp_graph *g = ad->g;
	int pa = producer(ad, acc), pc = producer(ad, c), slot, *in;
	struct hp_attr partial = { .name = "partial", .type = HP_ATTR_INT, .i = 1 };

	if (pa < 0 || pc < 0 || strcmp(g->nodes[pa].op_type, g->nodes[pc].op_type) ||
	    strcmp(g->nodes[pc].domain, "ai.hpdlf"))
		return 0;
	if (!strcmp(g->nodes[pc].op_type, "ConvGradFilter"))
		slot = 2;
	else if (!strcmp(g->nodes[pc].op_type, "BiasGrad"))
		slot = 1;
	else if (!strcmp(g->nodes[pc].op_type, "GemmGrad") && g->nodes[pc].outputs[0] == c &&
		 g->nodes[pa].outputs[0] == acc)
		slot = 3; /* dA of the blocks of a weight cut along N (split_weight.c) */
	else
		return 0;
	if (g->nodes[pc].ninputs != slot)
		return 0;
	if (slot == 1 && hp_graph_add_attr(g, pa, &partial) < 0)
		return hp_error(-ENOMEM, "out of memory");
	if (!(in = realloc(g->nodes[pc].inputs, (size_t)(slot + 1) * sizeof *in)))
		return hp_error(-ENOMEM, "out of memory");
	in[slot] = acc;
	g->nodes[pc].inputs = in;
	g->nodes[pc].ninputs = slot + 1;
	return 1;
}

/* The complete gradient of v: its contributions summed pairwise in arrival
 * order (a chain, so each partial sum frees its operands early; kernels
 * that can take the running sum take it, see chain()); -1 if none. */
static int combine(struct ad *ad, int v)
{
	int acc;

	if (v < 0 || v >= ad->nv0 || !ad->ncontrib[v])
		return -1;
	acc = ad->contrib[v][0];
	for (int k = 1; k < ad->ncontrib[v]; k++) {
		int in[2] = { acc, ad->contrib[v][k] }, out[1] = { 1 };
		int rc = chain(ad, acc, ad->contrib[v][k]);
		if (rc != 0) {
			if (rc < 0)
				return rc;
			acc = ad->contrib[v][k];
			continue;
		}
		rc = ad_emit(ad, "GradSum", 1, ad->g->values[v].name, 2, in, 1, out, 0, NULL);
		if (rc < 0)
			return rc;
		acc = out[0];
	}
	ad->ncontrib[v] = 1;
	ad->contrib[v][0] = acc;
	return acc;
}

/* Nodes folded from the values marked in live (freed here) run again:
 * their outputs become activations and are marked in turn.  f32_only:
 * only nodes with a float output (the rest stay folded). */
int hp_unfold_from(struct hp_graph *g, char *live, int f32_only)
{
	for (int i = 0; i < g->nnodes; i++) {
		struct hp_node *n = &g->nodes[i];
		int from = 0, f32 = !f32_only;
		for (int j = 0; n->folded && j < n->ninputs; j++)
			from |= n->inputs[j] >= 0 && live[n->inputs[j]];
		for (int o = 0; from && !f32 && o < n->noutputs; o++)
			f32 |= n->outputs[o] >= 0 && g->values[n->outputs[o]].dtype == HP_F32;
		if (!from || !f32)
			continue;
		for (int o = 0; o < n->noutputs; o++) {
			struct hp_value *v = n->outputs[o] >= 0 ? &g->values[n->outputs[o]] : NULL;
			if (!v)
				continue;
			free(v->data);
			v->data = NULL;
			v->kind = HP_VALUE_ACTIVATION;
			v->src.kind = HP_BLOB_NONE;
			live[n->outputs[o]] = 1;
		}
		n->folded = 0;
	}
	free(live);
	return 0;
}

/* Constant folding computed some float values from weights once (a
 * Transpose of a MatMul weight, say).  Training changes the weights, so
 * such nodes run at every step again and the gradient reaches the weights
 * through them; once the weights are state (value.next), inference no
 * longer folds them. */
static int unfold_weights(struct hp_graph *g)
{
	char *live = calloc((size_t)g->nvalues + 1, 1);

	if (!live)
		return hp_error(-ENOMEM, "out of memory");
	for (int v = 0; v < g->nvalues; v++)
		live[v] = g->values[v].trainable && g->values[v].kind == HP_VALUE_INITIALIZER &&
			  g->values[v].dtype == HP_F32;
	return hp_unfold_from(g, live, 1);
}

/* Values through which a gradient reaches a trainable float parameter. */
static void mark_need(struct ad *ad)
{
	struct hp_graph *g = ad->g;

	for (int v = 0; v < ad->nv0; v++)
		ad->need[v] = g->values[v].trainable && g->values[v].kind == HP_VALUE_INITIALIZER &&
			      g->values[v].dtype == HP_F32;
	for (int k = 0; ad->ext && k < ad->ext->nwrt; k++)
		ad->need[ad->ext->wrt[k]] = g->values[ad->ext->wrt[k]].dtype == HP_F32;
	for (int i = 0; i < g->nnodes; i++) {
		const struct hp_node *n = &g->nodes[i];
		int any = 0;
		if (n->folded)
			continue;
		for (int j = 0; j < n->ninputs; j++)
			any |= ad_needs(ad, n, j);
		for (int o = 0; any && o < n->noutputs; o++)
			if (n->outputs[o] >= 0 && g->values[n->outputs[o]].dtype == HP_F32)
				ad->need[n->outputs[o]] = 1;
	}
}

/* State value (initializer without bytes: starts zeroed) and its successor. */
static int add_state(struct ad *ad, const char *name, enum hp_dtype dt, const struct hp_shape *s)
{
	int v = hp_graph_add_value(ad->g, name, HP_VALUE_INITIALIZER, dt, s);

	if (v >= 0)
		ad->g->values[v].src.kind = HP_BLOB_NONE;
	return v;
}

/* The int64 step counter: `step` counts completed runs, `step_next` = step + 1. */
static int need_step(struct ad *ad)
{
	struct hp_shape s = { 0 };
	int out[1] = { 1 }, rc;

	if (ad->step >= 0)
		return 0;
	ad->step = add_state(ad, "train.step", HP_I64, &s);
	if (ad->step < 0)
		return ad->step;
	rc = ad_emit(ad, "StepInc", 1, "train.step", 1, &ad->step, 1, out, 0, NULL);
	if (rc < 0)
		return rc;
	ad->step_next = out[0];
	ad->g->values[ad->step].next = out[0];
	return 0;
}


/* BatchNormalization -> BatchNormTrain(X, scale, B, mean, var) -> Y, mean', var'. */
static int rewrite_bn(struct ad *ad, int i)
{
	struct hp_graph *g = ad->g;
	int *outs, st[2];
	char name[256];

	for (int k = 3; k < 5; k++) {
		int v = g->nodes[i].inputs[k];
		if (v < 0 || g->values[v].kind != HP_VALUE_INITIALIZER)
			return hp_node_error(g, &g->nodes[i], HP_EUNSUPPORTED,
					     "training needs the running statistics as initializers (state it "
					     "updates); '%s' is %s", v < 0 ? "input 3/4" : g->values[v].name,
					     v < 0 ? "omitted" : g->values[v].kind == HP_VALUE_INPUT ? "a graph input"
					     : "computed by the graph");
		g->values[v].trainable = 0;
		st[k - 3] = v;
	}
	if (!(outs = calloc(3, sizeof *outs)))
		return hp_error(-ENOMEM, "out of memory");
	outs[0] = g->nodes[i].outputs[0];
	for (int k = 1; k < 3; k++) {
		int old = k < g->nodes[i].noutputs ? g->nodes[i].outputs[k] : -1;
		snprintf(name, sizeof name, "%s.next", g->values[st[k - 1]].name);
		outs[k] = old >= 0 ? old : ad_new_value(ad, name, HP_VALUE_ACTIVATION, HP_UNDEFINED, NULL);
		if (outs[k] < 0) {
			int rc = outs[k];
			free(outs);
			return rc;
		}
		g->values[st[k - 1]].next = outs[k];
	}
	free(g->nodes[i].outputs);
	g->nodes[i].outputs = outs;
	g->nodes[i].noutputs = 3;
	return hp_fz_set_op(&g->nodes[i], "BatchNormTrain");
}

/* Dropout(X, ratio?, training_mode?) -> DropoutTrain(X, step) -> Y, mask. */
static int rewrite_dropout(struct ad *ad, int i)
{
	struct hp_graph *g = ad->g;
	struct hp_node *n = &g->nodes[i];
	float ratio = hp_attr_float(n, "ratio", 0.5f);
	int *outs, rc, ri = n->ninputs > 1 ? n->inputs[1] : -1;
	struct hp_attr a[2];

	if (ri >= 0) {
		if (!g->values[ri].data || g->values[ri].dtype != HP_F32)
			return hp_node_error(g, n, HP_EUNSUPPORTED, "training needs a constant float ratio");
		ratio = *(const float *)g->values[ri].data;
	}
	if ((rc = need_step(ad)) < 0)
		return rc;
	n = &g->nodes[i];
	if (!(outs = calloc(2, sizeof *outs)))
		return hp_error(-ENOMEM, "out of memory");
	outs[0] = n->outputs[0];
	outs[1] = n->noutputs > 1 && n->outputs[1] >= 0 ? n->outputs[1]
		  : ad_new_value(ad, "dropout.mask", HP_VALUE_ACTIVATION, HP_UNDEFINED, NULL);
	n = &g->nodes[i];
	free(n->outputs);
	n->outputs = outs;
	n->noutputs = 2;
	n->ninputs = 2;
	n->inputs[1] = ad->step; /* inputs holds at least the original count (>= 1): grow */
	a[0] = ad_float("ratio", ratio);
	/* a pipeline stage numbers its nodes from node_offset of the model,
	 * so its masks are those of the same node in a 1-rank run */
	a[1] = ad_int("seed", (int64_t)(ad->spec->seed * 1000003u + (uint64_t)i +
					(uint64_t)(ad->ext ? ad->ext->node_offset : 0)));
	if ((rc = hp_fz_set_op(n, "DropoutTrain")) < 0)
		return rc;
	for (int k = 0; k < 2; k++)
		if ((rc = hp_graph_add_attr(g, i, &a[k])) < 0)
			return rc;
	return 0;
}

static int train_rewrite(struct ad *ad)
{
	int rc = ad_widen_half(ad->g);

	if (rc == 0)
		rc = ad_untie_stats(ad->g);
	if (rc < 0)
		return rc;
	for (int i = 0; i < ad->g->nnodes; i++) {
		const char *op = ad->g->nodes[i].op_type, *dom = ad->g->nodes[i].domain;
		rc = 0;
		if (dom[0] && strcmp(dom, "ai.onnx"))
			continue;
		if (!strcmp(op, "BatchNormalization"))
			rc = rewrite_bn(ad, i);
		else if (!strcmp(op, "Dropout")) {
			int *in = realloc(ad->g->nodes[i].inputs, 2 * sizeof(int));
			if (!in)
				return hp_error(-ENOMEM, "out of memory");
			ad->g->nodes[i].inputs = in;
			rc = rewrite_dropout(ad, i);
		}
		if (rc < 0)
			return rc;
	}
	return 0;
}

static int add_io(int **list, int *count, int v)
{
	int *p = realloc(*list, (size_t)(*count + 1) * sizeof *p);

	if (!p)
		return hp_error(-ENOMEM, "out of memory");
	*list = p;
	p[(*count)++] = v;
	return 0;
}

static int seed_constant(struct ad *ad, const struct hp_shape *s)
{
	int v = ad_new_value(ad, "loss.grad", HP_VALUE_CONSTANT, HP_F32, s);
	float *one;

	if (v < 0)
		return v;
	if (!(one = malloc(sizeof *one)))
		return hp_error(-ENOMEM, "out of memory");
	*one = 1.0f;
	ad->g->values[v].data = one;
	ad->g->values[v].src.kind = HP_BLOB_MEMORY;
	return v;
}

/* Labels/target input for a loss over value x. */
static int add_labels(struct ad *ad, int x)
{
	struct hp_graph *g = ad->g;
	const char *name = ad->spec->labels ? ad->spec->labels : "labels";
	struct hp_shape s = g->values[x].shape;
	enum hp_dtype dt = HP_F32;
	int v, rc;

	if (hp_graph_find_value(g, name) >= 0)
		return hp_error(HP_EUSAGE, "%s: the model already has a value named '%s'", g->path, name);
	if (ad->spec->loss == HP_LOSS_CROSS_ENTROPY) {
		int drop = s.rank == 1 ? 0 : 1;
		if (s.rank < 1)
			return hp_error(HP_EUSAGE, "%s: cross-entropy needs logits with a class dim, '%s' is a scalar",
					g->path, g->values[x].name);
		memmove(s.dims + drop, s.dims + drop + 1, (size_t)(s.rank - drop - 1) * sizeof s.dims[0]);
		s.rank--;
		dt = HP_I64;
	}
	v = hp_graph_add_value(g, name, HP_VALUE_INPUT, dt, &s);
	if (v < 0)
		return v;
	rc = add_io(&g->inputs, &g->ninputs, v);
	return rc < 0 ? rc : v;
}

/* Loss node and the seed of the backward pass. */
static int add_loss(struct ad *ad)
{
	struct hp_graph *g = ad->g;
	const struct hp_train_spec *sp = ad->spec;
	int x = sp->output ? hp_graph_find_value(g, sp->output) : g->noutputs ? g->outputs[0] : -1;
	struct hp_shape scalar = { 0 };
	int lab, seed, loss, in[3], out[1] = { 1 }, rc;
	const char *op = sp->loss == HP_LOSS_MSE ? "MSELoss" : "SoftmaxCrossEntropy";
	struct hp_attr ig = ad_int("ignore_index", sp->ignore_index);

	if (x < 0)
		return hp_error(HP_EUSAGE, "%s: no output named '%s' to train on", g->path, sp->output ? sp->output : "?");
	if (g->values[x].dtype != HP_F32)
		return hp_error(HP_EUSAGE, "%s: the loss needs a float output, '%s' is %s", g->path, g->values[x].name,
				hp_dtype_name(g->values[x].dtype));
	if (sp->loss == HP_LOSS_OUTPUT) {
		if (hp_shape_numel(&g->values[x].shape) != 1)
			return hp_error(HP_EUSAGE, "%s: output '%s' is not a scalar loss", g->path, g->values[x].name);
		if ((seed = seed_constant(ad, &g->values[x].shape)) < 0)
			return seed;
		if (!g->values[x].is_output && (rc = add_io(&g->outputs, &g->noutputs, x)) < 0)
			return rc;
		return ad_contrib(ad, x, seed);
	}
	if (sp->loss != HP_LOSS_CROSS_ENTROPY && sp->loss != HP_LOSS_MSE)
		return hp_error(HP_EUSAGE, "unknown loss kind %d", (int)sp->loss);
	if ((lab = add_labels(ad, x)) < 0 || (seed = seed_constant(ad, &scalar)) < 0)
		return lab < 0 ? lab : seed;
	in[0] = x;
	in[1] = lab;
	if ((rc = ad_emit(ad, op, 1, "loss", 2, in, 1, out, sp->loss == HP_LOSS_MSE ? 0 : 1, &ig)) < 0)
		return rc;
	loss = out[0];
	/* decided before the old name goes: the lookup walks every name */
	char *lname = strdup(hp_graph_find_value(g, "loss") < 0 ? "loss" : "train.loss");
	if (!lname)
		return hp_error(-ENOMEM, "out of memory");
	free(g->values[loss].name);
	g->values[loss].name = lname;
	if ((rc = add_io(&g->outputs, &g->noutputs, loss)) < 0)
		return rc;
	in[0] = seed;
	in[1] = x;
	in[2] = lab;
	out[0] = 1;
	op = sp->loss == HP_LOSS_MSE ? "MSELossGrad" : "SoftmaxCrossEntropyGrad";
	if ((rc = ad_emit(ad, op, 1, "loss", 3, in, 1, out, sp->loss == HP_LOSS_MSE ? 0 : 1, &ig)) < 0)
		return rc;
	return ad_contrib(ad, x, out[0]);
}

/* A stage's seeds: the gradients the next stage sent back. */
static int add_seeds(struct ad *ad)
{
	const struct hp_ad_ext *x = ad->ext;

	for (int k = 0; k < x->nseed; k++) {
		int rc = ad_contrib(ad, x->seed_value[k], x->seed_grad[k]);
		if (rc < 0)
			return rc;
	}
	return 0;
}

/* The gradients of the wrt values as graph outputs. */
static int wrt_outputs(struct ad *ad)
{
	const struct hp_ad_ext *x = ad->ext;

	for (int k = 0; x && k < x->nwrt; k++) {
		int gr = combine(ad, x->wrt[k]), rc;
		x->wrt_grad[k] = gr < 0 ? -1 : gr;
		if (gr < -1)
			return gr;
		if (gr >= 0 && !ad->g->values[gr].is_output && (rc = add_io(&ad->g->outputs, &ad->g->noutputs, gr)) < 0)
			return rc;
		if (gr >= 0)
			ad->g->values[gr].is_output = 1;
	}
	return 0;
}

static int backward(struct ad *ad, int nfwd)
{
	for (int i = nfwd - 1; i >= 0; i--) {
		struct hp_node n = ad->g->nodes[i];
		int dy[n.noutputs + 1], any = 0, need = 0, rc;
		if (n.folded)
			continue;
		for (int j = 0; j < n.ninputs; j++)
			need |= ad_needs(ad, &n, j);
		if (!need)
			continue;
		/* a band's backward runs with its band, the bands in reverse (remat.h) */
		ad->sched = n.sched > 0 && n.sched < HP_BAND_MAX ? HP_BAND_BWD_SCHED(n.sched) : n.sched;
		for (int o = 0; o < n.noutputs; o++) {
			dy[o] = combine(ad, n.outputs[o]);
			if (dy[o] < -1)
				return dy[o];
			any |= dy[o] >= 0;
		}
		if (any && (rc = ad_rule(ad, &n, dy)) < 0)
			return rc;
	}
	ad->sched = 0;
	return 0;
}

static int add_update(struct ad *ad, int p, int grad)
{
	struct hp_graph *g = ad->g;
	const struct hp_train_spec *sp = ad->spec;
	int adam = sp->optimizer != HP_OPT_SGD, mom = sp->momentum != 0, in[5], out[3] = { 1, 1, 1 }, nst, rc;
	double wd = sp->weight_decay >= 0 ? sp->weight_decay : sp->optimizer == HP_OPT_ADAMW ? 0.01 : 0;
	struct hp_shape s = g->values[p].shape;
	const char *pname = g->values[p].name;
	char name[256];
	struct hp_attr a[8];
	int na = 0;

	nst = adam ? 2 : mom;
	in[0] = p;
	in[1] = grad;
	for (int k = 0; k < nst; k++) {
		snprintf(name, sizeof name, "%s.%s", g->values[p].name, adam ? (k ? "exp_avg_sq" : "exp_avg") : "momentum");
		if ((in[2 + k] = add_state(ad, name, HP_F32, &s)) < 0)
			return in[2 + k];
		rc = hp_part_state(ad->g, p, in[2 + k], adam ? (k ? "exp_avg_sq" : "exp_avg") : "momentum");
		if (rc < 0)
			return rc;
	}
	if (adam) {
		if ((rc = need_step(ad)) < 0)
			return rc;
		in[4] = ad->step_next;
	}
	a[na++] = ad_float("lr", (float)sp->lr);
	a[na++] = ad_float("weight_decay", (float)wd);
	if (adam) {
		a[na++] = ad_float("beta1", (float)sp->beta1);
		a[na++] = ad_float("beta2", (float)sp->beta2);
		a[na++] = ad_float("epsilon", (float)sp->eps);
		a[na++] = ad_int("decoupled", sp->optimizer == HP_OPT_ADAMW);
	} else {
		a[na++] = ad_float("momentum", (float)sp->momentum);
		a[na++] = ad_int("nesterov", sp->nesterov);
	}
	pname = g->values[p].name;
	/* the update runs as soon as its gradient is there (a hint before any
	 * band's): the gradient dies at once instead of being written below
	 * DRAM and read back, and the state is read and written once a step */
	ad->sched = -1;
	rc = ad_emit(ad, adam ? "AdamUpdate" : "SGDUpdate", 1, pname, adam ? 5 : 2 + nst, in, 1 + nst, out, na, a);
	ad->sched = 0;
	if (rc < 0)
		return rc;
	g = ad->g;
	g->values[p].next = out[0];
	for (int k = 0; k < nst; k++)
		g->values[in[2 + k]].next = out[1 + k];
	return 0;
}

static int check_spec(const struct hp_graph *g, const struct hp_train_spec *sp)
{
	if (!sp)
		return hp_error(HP_EUSAGE, "hp_autodiff: no spec (use hp_train_spec_init)");
	if (sp->optimizer < HP_OPT_SGD || sp->optimizer > HP_OPT_ADAMW)
		return hp_error(HP_EUSAGE, "hp_autodiff: unknown optimizer %d", (int)sp->optimizer);
	if (!(sp->lr > 0) || sp->momentum < 0 || (sp->nesterov && sp->momentum <= 0))
		return hp_error(HP_EUSAGE, "hp_autodiff: lr must be > 0, momentum >= 0 (> 0 for Nesterov)");
	for (int v = 0; v < g->nvalues; v++)
		if (g->values[v].next >= 0)
			return hp_error(HP_EUSAGE, "%s: the graph is already a training graph", g->path);
	return 0;
}

static int run_autodiff(struct ad *ad)
{
	struct hp_graph *g = ad->g;
	int nfwd, rc;

	if ((rc = train_rewrite(ad)) < 0 || (rc = hp_graph_finalize(g)) < 0 || (rc = hp_graph_infer(g)) < 0 ||
	    (rc = unfold_weights(g)) < 0)
		return rc;
	if (ad->ext && ad->ext->forward_only)
		return 0;
	nfwd = g->nnodes;
	ad->nv0 = g->nvalues;
	if (ad->ext && ad->ext->fwd_values)
		*ad->ext->fwd_values = ad->nv0;
	ad->need = calloc((size_t)ad->nv0 + 1, 1);
	ad->contrib = calloc((size_t)ad->nv0 + 1, sizeof *ad->contrib);
	ad->ncontrib = calloc((size_t)ad->nv0 + 1, sizeof *ad->ncontrib);
	ad->capcontrib = calloc((size_t)ad->nv0 + 1, sizeof *ad->capcontrib);
	if (!ad->need || !ad->contrib || !ad->ncontrib || !ad->capcontrib)
		return hp_error(-ENOMEM, "out of memory");
	mark_need(ad);
	rc = ad->ext && ad->ext->nseed ? add_seeds(ad) : add_loss(ad);
	if (rc < 0 || (rc = backward(ad, nfwd)) < 0 || (rc = wrt_outputs(ad)) < 0)
		return rc;
	for (int p = 0; p < ad->nv0; p++) {
		const struct hp_value *v = &ad->g->values[p];
		if (!v->trainable || v->kind != HP_VALUE_INITIALIZER || v->dtype != HP_F32)
			continue;
		int gr = combine(ad, p);
		if (gr < -1)
			return gr;
		if (gr >= 0 && (rc = add_update(ad, p, gr)) < 0)
			return rc;
	}
	if ((rc = hp_graph_finalize(ad->g)) < 0)
		return rc;
	return hp_graph_infer(ad->g);
}

int hp_autodiff(struct hp_graph *g, const struct hp_train_spec *spec)
{
	return hp_autodiff_ext(g, spec, NULL);
}

int hp_autodiff_ext(struct hp_graph *g, const struct hp_train_spec *spec, const struct hp_ad_ext *x)
{
	struct hp_train_spec full;
	struct ad ad = { .g = g, .spec = &full, .step = -1, .step_next = -1, .ext = x };
	int rc;

	/* A caller built against an older, smaller spec gets defaults for the rest. */
	hp_train_spec_init(&full, sizeof full);
	if (spec && spec->size >= offsetof(struct hp_train_spec, loss))
		memcpy(&full, spec, spec->size < sizeof full ? spec->size : sizeof full);
	full.size = sizeof full;
	rc = check_spec(g, spec ? &full : NULL);

	if (rc == 0)
		rc = run_autodiff(&ad);
	for (int v = 0; ad.contrib && v < ad.nv0; v++)
		free(ad.contrib[v]);
	free(ad.contrib);
	free(ad.ncontrib);
	free(ad.capcontrib);
	free(ad.need);
	free(ad.prod);
	return rc;
}
