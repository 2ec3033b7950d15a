/* What each model node costs a pipeline stage (see pipe_cut.h): its
 * forward kernel, its backward and its parameters' updates, timed by the
 * speed model, and the bytes crossing each cut.
 *
 * The backward comes from the real training graph, so that every gradient
 * rule's kernels are timed as they will run.  To know which model node a
 * kernel of the training graph derives from, the model is loaded again
 * from its file and every node and value renamed "n<index>" and
 * "v<index>" before autodiff: the kernels autodiff adds are named after
 * the node they differentiate ("n12/GemmGrad#40"), the gradient sums after
 * their value ("v30/GradSum#41"), the updates after their parameter
 * ("v7/SGDUpdate#52"), the loss "loss/...".  Only the copy is renamed:
 * the caller's model keeps its names. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hpdlf/error.h"
#include "common/cpus.h"
#include "exec/budget.h"
#include "exec/exec_internal.h"
#include "exec/pipe_cut.h"
#include "exec/speed.h"
#include "exec/train_params.h"

static uint64_t vbytes(const struct hp_graph *g, int v)
{
	struct hp_tensor t = { .dtype = g->values[v].dtype, .shape = g->values[v].shape };

	return hp_tensor_bytes(&t);
}

static uint64_t aligned(uint64_t b)
{
	return (b + HP_BUDGET_ALIGN - 1) / HP_BUDGET_ALIGN * HP_BUDGET_ALIGN;
}

/* A value that crosses a cut when read past it: made at run time (or fed). */
static int runtime_value(const struct hp_value *v)
{
	return v->kind == HP_VALUE_ACTIVATION || v->kind == HP_VALUE_INPUT;
}

int hp_pipe_cut_bytes(const struct hp_graph *g, uint64_t *cut)
{
	int n = g->nnodes;
	int64_t *diff = calloc((size_t)n + 2, sizeof *diff);
	int *last = malloc(((size_t)g->nvalues + 1) * sizeof *last);

	if (!diff || !last) {
		free(diff);
		free(last);
		return hp_error(-ENOMEM, "out of memory");
	}
	for (int v = 0; v < g->nvalues; v++)
		last[v] = g->values[v].is_output ? n - 1 : -1; /* the loss reads outputs in the last stage */
	for (int i = 0; i < n; i++)
		for (int j = 0; j < g->nodes[i].ninputs; j++)
			if (g->nodes[i].inputs[j] >= 0 && last[g->nodes[i].inputs[j]] < i)
				last[g->nodes[i].inputs[j]] = i;
	for (int v = 0; v < g->nvalues; v++) {
		const struct hp_value *val = &g->values[v];
		int p = val->producer; /* a fed input comes in before node 0 */
		if (!runtime_value(val) || last[v] <= p || (p >= 0 && g->nodes[p].folded))
			continue;
		diff[p + 1] += (int64_t)vbytes(g, v);
		diff[last[v] + 1] -= (int64_t)vbytes(g, v);
	}
	int64_t acc = 0;
	for (int c = 0; c <= n; c++) {
		acc += diff[c];
		cut[c] = c == 0 || c == n ? 0 : (uint64_t)acc;
	}
	free(diff);
	free(last);
	return 0;
}

/* ---- the renamed copy ---------------------------------------------------- */

static int rename_to(char **name, char kind, int i)
{
	char buf[32];
	char *s;

	snprintf(buf, sizeof buf, "%c%d", kind, i);
	if (!(s = strdup(buf)))
		return hp_error(-ENOMEM, "out of memory");
	free(*name);
	*name = s;
	return 0;
}

/* The model loaded again with the shapes it was given, its nodes matched. */
static int reload(const struct hp_graph *model, const struct hp_pipe_choose_opts *o, struct hp_graph **out)
{
	struct hp_graph *g = NULL;
	struct hp_param_counts pc = { .size = sizeof pc };
	int rc;

	if (!model->path || !model->path[0])
		return hp_error(HP_EUSAGE, "choosing pipeline stages needs a model loaded from a file");
	if ((rc = hp_graph_load(model->path, &g)) < 0)
		return rc;
	for (int i = 0; i < model->ninputs && rc == 0; i++) {
		const struct hp_value *v = &model->values[model->inputs[i]];
		if (hp_graph_find_value(g, v->name) >= 0)
			rc = hp_graph_set_input_shape(g, v->name, &v->shape);
	}
	if (rc == 0 && (rc = hp_train_params(g, o->freeze, o->nfreeze, &pc)) == 0)
		rc = hp_graph_infer(g);
	for (int i = 0; rc == 0 && i < model->nnodes; i++)
		if (g->nnodes != model->nnodes || strcmp(g->nodes[i].op_type, model->nodes[i].op_type))
			rc = hp_error(HP_EUSAGE, "%s: the graph given is not the model file as loaded (node %d)",
				      model->path, i);
	if (rc < 0) {
		hp_graph_free(g);
		return rc;
	}
	*out = g;
	return 0;
}

/* Rename the copy; the spec's output by its new name into spec. */
static int rename_all(struct hp_graph *g, const struct hp_train_spec *in, struct hp_train_spec *spec, char *obuf,
		      size_t olen)
{
	int rc = 0;

	if (in)
		memcpy(spec, in, in->size < sizeof *spec ? in->size : sizeof *spec);
	spec->size = sizeof *spec;
	if (spec->output) {
		int v = hp_graph_find_value(g, spec->output);
		if (v < 0)
			return hp_error(HP_EUSAGE, "%s: no value '%s' for the loss", g->path, spec->output);
		snprintf(obuf, olen, "v%d", v);
		spec->output = obuf;
	}
	for (int i = 0; i < g->nnodes && rc == 0; i++)
		rc = rename_to(&g->nodes[i].name, 'n', i);
	for (int v = 0; v < g->nvalues && rc == 0; v++)
		rc = rename_to(&g->values[v].name, 'v', v);
	return rc;
}

/* ---- charging the training graph's kernels --------------------------------- */

struct owners {
	int n, nv;           /* model nodes and values */
	int *of_value;       /* per model value: the node that owns it */
};

/* A value's owner: its producer, else its first reader, else the last node. */
static int owners_init(const struct hp_graph *g, struct owners *w)
{
	w->n = g->nnodes;
	w->nv = g->nvalues;
	if (!(w->of_value = malloc(((size_t)g->nvalues + 1) * sizeof *w->of_value)))
		return hp_error(-ENOMEM, "out of memory");
	for (int v = 0; v < g->nvalues; v++)
		w->of_value[v] = g->values[v].producer;
	for (int i = g->nnodes - 1; i >= 0; i--)
		for (int j = 0; j < g->nodes[i].ninputs; j++) {
			int v = g->nodes[i].inputs[j];
			if (v >= 0 && g->values[v].producer < 0)
				w->of_value[v] = i;
		}
	for (int v = 0; v < g->nvalues; v++)
		if (w->of_value[v] < 0)
			w->of_value[v] = g->nnodes - 1;
	return 0;
}

/* The model node a training-graph name derives from; *fwd: the node itself. */
static int owner_of(const struct owners *w, const char *name, int *fwd)
{
	char *end;
	long i;

	*fwd = 0;
	if ((name[0] != 'n' && name[0] != 'v') || name[1] < '0' || name[1] > '9')
		return w->n - 1; /* the loss, the step counter: the last stage's */
	i = strtol(name + 1, &end, 10);
	if (name[0] == 'n' && i < w->n) {
		*fwd = !*end;
		return (int)i;
	}
	return name[0] == 'v' && i < w->nv ? w->of_value[i] : w->n - 1;
}

static int is_update(const struct hp_node *n)
{
	return !strcmp(n->domain, "ai.hpdlf") && (!strcmp(n->op_type, "SGDUpdate") || !strcmp(n->op_type, "AdamUpdate"));
}

/* Bytes node n needs resident at once: distinct inputs, outputs, scratch. */
static uint64_t kernel_need(const struct hp_graph *g, const struct hp_node *n)
{
	uint64_t need = aligned(n->workspace);

	for (int j = 0; j < n->ninputs; j++) {
		int v = n->inputs[j], dup = 0;
		for (int k = 0; k < j; k++)
			dup |= n->inputs[k] == v;
		if (v >= 0 && !dup && g->values[v].kind != HP_VALUE_CONSTANT)
			need += aligned(vbytes(g, v));
	}
	for (int o = 0; o < n->noutputs; o++)
		if (n->outputs[o] >= 0 && g->values[n->outputs[o]].kind != HP_VALUE_CONSTANT)
			need += aligned(vbytes(g, n->outputs[o]));
	return need;
}

/* The model's activations a backward kernel reads are kept from the
 * forward to it: charged once each, to their producer. */
static void saved_for_backward(const struct hp_graph *t, const struct owners *w, const struct hp_node *n,
			       char *seen, struct hp_pipe_chain *c)
{
	for (int j = 0; j < n->ninputs; j++) {
		int v = n->inputs[j];
		if (v < 0 || v >= w->nv || seen[v] || t->values[v].kind != HP_VALUE_ACTIVATION)
			continue;
		seen[v] = 1;
		c->acts[w->of_value[v]] += vbytes(t, v);
	}
}

static void charge(const struct hp_graph *t, const struct owners *w, const struct hp_speed_compute *sp,
		   char *seen, struct hp_pipe_chain *c)
{
	for (int i = 0; i < t->nnodes; i++) {
		const struct hp_node *n = &t->nodes[i];
		enum hp_kclass cls;
		int fwd, k;
		double ms;
		uint64_t need;
		if (n->folded)
			continue;
		k = owner_of(w, n->name, &fwd);
		ms = hp_speed_kernel_ms(sp, t, n, &cls);
		need = kernel_need(t, n);
		if (fwd)
			c->fwd_ms[k] += ms;
		else if (is_update(n))
			c->opt_ms[k] += ms;
		else
			c->bwd_ms[k] += ms;
		if (!fwd)
			saved_for_backward(t, w, n, seen, c);
		c->need[k] = need > c->need[k] ? need : c->need[k];
		c->nodes_kernels++;
	}
}

/* Parameters and state per owner: the model's values in the training
 * graph t (autodiff appends its own after them and has set which
 * initializers it updates). */
static void count_state(const struct hp_graph *g, const struct owners *w, const struct hp_train_spec *sp,
			struct hp_pipe_chain *c)
{
	int nst = sp->optimizer != HP_OPT_SGD ? 2 : sp->momentum != 0;

	for (int v = 0; v < w->nv; v++) {
		const struct hp_value *val = &g->values[v];
		uint64_t b = vbytes(g, v);
		if (val->kind == HP_VALUE_INITIALIZER && val->trainable && val->dtype == HP_F32) {
			c->params[w->of_value[v]] += hp_shape_numel(&val->shape);
			c->state[w->of_value[v]] += b * (uint64_t)(2 + nst);
		} else if (val->kind == HP_VALUE_INITIALIZER) {
			c->state[w->of_value[v]] += b;
		}
	}
}

static int chain_alloc(struct hp_pipe_chain *c, int n, const struct hp_pipe_choose_opts *o)
{
	memset(c, 0, sizeof *c);
	c->n = n;
	c->fwd_ms = calloc((size_t)n, sizeof *c->fwd_ms);
	c->bwd_ms = calloc((size_t)n, sizeof *c->bwd_ms);
	c->opt_ms = calloc((size_t)n, sizeof *c->opt_ms);
	c->need = calloc((size_t)n, sizeof *c->need);
	c->cut = calloc((size_t)n + 1, sizeof *c->cut);
	c->params = calloc((size_t)n, sizeof *c->params);
	c->state = calloc((size_t)n, sizeof *c->state);
	c->acts = calloc((size_t)n, sizeof *c->acts);
	c->xfer_ms = o->link_GBps > 0 ? calloc((size_t)n + 1, sizeof *c->xfer_ms) : NULL;
	if ((o->link_GBps > 0 && !c->xfer_ms) || !c->fwd_ms || !c->bwd_ms || !c->opt_ms || !c->need || !c->cut ||
	    !c->params || !c->state || !c->acts)
		return hp_error(-ENOMEM, "out of memory");
	return 0;
}

void hp_pipe_chain_free(struct hp_pipe_chain *c)
{
	if (!c)
		return;
	free(c->fwd_ms);
	free(c->bwd_ms);
	free(c->opt_ms);
	free(c->need);
	free(c->cut);
	free(c->params);
	free(c->state);
	free(c->acts);
	free(c->xfer_ms);
	memset(c, 0, sizeof *c);
}

static void speed_of(const struct hp_pipe_choose_opts *o, struct hp_speed_compute *sp)
{
	int threads = o->threads > 0 ? o->threads : hp_cpus_online();

	if (o->speed)
		*sp = *o->speed;
	else
		hp_speed_compute_get(threads, o->recalibrate, sp);
}

int hp_pipe_chain_build(const struct hp_graph *model, const struct hp_pipe_choose_opts *o, struct hp_pipe_chain *c)
{
	struct hp_train_spec spec;
	struct hp_speed_compute sp;
	struct owners w = { 0 };
	struct hp_graph *g = NULL;
	char obuf[32], *seen = NULL;
	int rc;

	hp_train_spec_init(&spec, sizeof spec);
	if ((rc = chain_alloc(c, model->nnodes, o)) < 0 || (rc = hp_pipe_cut_bytes(model, c->cut)) < 0 ||
	    (rc = reload(model, o, &g)) < 0)
		goto out;
	if ((rc = rename_all(g, o->spec, &spec, obuf, sizeof obuf)) < 0 || (rc = owners_init(g, &w)) < 0)
		goto out;
	if ((rc = hp_autodiff(g, &spec)) < 0)
		goto out;
	count_state(g, &w, &spec, c);
	speed_of(o, &sp);
	if (!(seen = calloc((size_t)w.nv + 1, 1))) {
		rc = hp_error(-ENOMEM, "out of memory");
		goto out;
	}
	charge(g, &w, &sp, seen, c);
	for (int k = 1; c->xfer_ms && k < c->n; k++)
		c->xfer_ms[k] = c->cut[k] ? (double)c->cut[k] / (o->link_GBps * 1e6) + o->link_lat_us / 1e3 : 0;
out:
	free(seen);
	free(w.of_value);
	hp_graph_free(g);
	if (rc < 0)
		hp_pipe_chain_free(c);
	return rc;
}
