/* Running statistics get storage of their own before training.
 *
 * PyTorch 1.13's exporter merges initializers of equal values: a fresh
 * BatchNorm's running_mean (zeros) comes out as Identity(bias) and its
 * running_var (ones) as Identity(weight); other exporters may reference one
 * initializer in both roles.  Training updates the statistics as state and
 * the parameters by gradient, so they must not share bytes.  Each running
 * statistic that is not an initializer of its own (an Identity chain from
 * an initializer or constant, or an initializer used elsewhere too) becomes
 * a new initializer holding the source's bytes (the same file blob); it
 * keeps the BatchNorm input's name when that name is the statistic's alone.
 * Identity nodes left without consumers go.
 *
 * The same merging ties parameters that PyTorch trains apart: every fresh
 * BatchNorm of one width comes out with its weight as Identity(one shared
 * weight) (a torchvision ResNet-18 has 20 BatchNorms on 4 initializers), so
 * training the root would sum their gradients into one.  A trainable
 * parameter reached through Identity is therefore a parameter of its own:
 * the Identity's output becomes an initializer with the root's bytes, under
 * its own (the module's) name.  Parameters used directly by several nodes
 * (a tied embedding) stay tied: that is how exporters write a real tie. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hpdlf/error.h"
#include "hpdlf/kernels.h"
#include "exec/autodiff_internal.h"

static int is_op(const struct hp_node *n, const char *op)
{
	return !strcmp(n->op_type, op) && (!n->domain[0] || !strcmp(n->domain, "ai.onnx"));
}

/* The value at the end of v's Identity chain. */
static int alias_root(const struct hp_graph *g, int v)
{
	for (int hops = 0; hops < g->nnodes; hops++) {
		int p = g->values[v].producer;
		if (p < 0 || !is_op(&g->nodes[p], "Identity") || g->nodes[p].ninputs < 1 || g->nodes[p].inputs[0] < 0)
			break;
		v = g->nodes[p].inputs[0];
	}
	return v;
}

/* A name for a new statistic of BatchNorm n: "<module>.running_mean" when
 * the scale is "<module>.weight", else after the node; "#N" makes it unique. */
static int stat_name(const struct hp_graph *g, const struct hp_node *n, int k, char *buf, size_t len)
{
	const char *what = k == 3 ? "running_mean" : "running_var";
	const char *sc = n->ninputs > 1 && n->inputs[1] >= 0 ? g->values[n->inputs[1]].name : "";
	size_t l = strlen(sc);
	char base[200];

	if (l > 7 && !strcmp(sc + l - 7, ".weight"))
		snprintf(base, sizeof base, "%.*s.%s", (int)(l - 7), sc, what);
	else
		snprintf(base, sizeof base, "%s.%s", n->name, what);
	snprintf(buf, len, "%s", base);
	for (int i = 1; hp_graph_find_value(g, buf) >= 0; i++) {
		if (i > 1000)
			return hp_error(HP_EINTERNAL, "no free name for a running statistic of '%s'", n->name);
		snprintf(buf, len, "%s#%d", base, i);
	}
	return 0;
}

/* Value w becomes an initializer holding root's bytes. */
static int give_bytes(struct hp_graph *g, int w, int root)
{
	struct hp_value *r = &g->values[root], *v = &g->values[w];
	struct hp_tensor t = { .dtype = r->dtype, .shape = r->shape };
	size_t bytes = (size_t)hp_tensor_bytes(&t);
	void *copy = NULL;

	if (r->data && !(copy = malloc(bytes ? bytes : 1)))
		return hp_error(-ENOMEM, "out of memory");
	if (copy)
		memcpy(copy, r->data, bytes);
	free(v->data);
	v->data = copy;
	v->src = r->data ? (struct hp_blob){ .kind = HP_BLOB_MEMORY, .length = bytes } : r->src;
	v->kind = HP_VALUE_INITIALIZER;
	v->dtype = r->dtype;
	v->shape = r->shape;
	v->trainable = 0;
	return 0;
}

/* Slot k of BatchNorm node i gets a statistic of its own if it shares:
 * 1 if it changed, 0 if not, or an error. */
static int untie_slot(struct hp_graph *g, int i, int k, char *drop)
{
	int v = g->nodes[i].inputs[k], root, w, rc;
	char name[256];

	if (v < 0)
		return 0;
	root = alias_root(g, v);
	if (g->values[root].kind != HP_VALUE_INITIALIZER &&
	    !(g->values[root].kind == HP_VALUE_CONSTANT && g->values[root].data))
		return 0; /* computed by the graph: rewrite_bn refuses it */
	if (root == v && (g->values[v].nconsumers == 1 && !g->values[v].is_output))
		return 0; /* its own already */
	if (root != v && g->values[v].nconsumers == 1 && !g->values[v].is_output) {
		drop[g->values[v].producer] = 1; /* the Identity goes, v keeps its name */
		w = v;
	} else {
		if ((rc = stat_name(g, &g->nodes[i], k, name, sizeof name)) < 0)
			return rc;
		if ((w = hp_graph_add_value(g, name, HP_VALUE_INITIALIZER, g->values[root].dtype,
					    &g->values[root].shape)) < 0)
			return w;
		g->values[v].nconsumers--;
		g->nodes[i].inputs[k] = w;
	}
	rc = give_bytes(g, w, root);
	return rc < 0 ? rc : 1;
}

/* Identity nodes marked (or left without any use, up the chains) go. */
static int drop_identities(struct hp_graph *g, char *drop)
{
	int rc, again = 1;

	while (again) {
		again = 0;
		for (int i = g->nnodes - 1; i >= 0; i--) {
			const struct hp_node *n = &g->nodes[i];
			int o = n->noutputs == 1 ? n->outputs[0] : -1;
			if (!drop[i] && !(is_op(n, "Identity") && o >= 0 && !g->values[o].nconsumers &&
					  !g->values[o].is_output && g->values[o].kind != HP_VALUE_INITIALIZER))
				continue;
			for (int j = 0; j < n->ninputs; j++)
				if (n->inputs[j] >= 0)
					g->values[n->inputs[j]].nconsumers--;
			if (o >= 0 && g->values[o].producer == i)
				g->values[o].producer = -1;
			memmove(drop + i, drop + i + 1, (size_t)(g->nnodes - i - 1));
			hp_graph_remove_node(g, i);
			again = 1;
		}
		if ((rc = hp_graph_finalize(g)) < 0)
			return rc;
	}
	return 0;
}

/* Whether value v feeds a node other than an Identity (a real use). */
static int used_for_real(const struct hp_graph *g, int v)
{
	for (int j = 0; j < g->nnodes; j++)
		for (int k = 0; k < g->nodes[j].ninputs; k++)
			if (g->nodes[j].inputs[k] == v && !is_op(&g->nodes[j], "Identity"))
				return 1;
	return 0;
}

/* Identity node i of a trainable float initializer: its output becomes
 * a trainable initializer of its own (1), or i is left (0). */
static int untie_param(struct hp_graph *g, int i, char *drop)
{
	const struct hp_node *n = &g->nodes[i];
	int o = n->noutputs == 1 ? n->outputs[0] : -1, root, rc;

	if (drop[i] || !is_op(n, "Identity") || n->ninputs < 1 || n->inputs[0] < 0 || o < 0)
		return 0;
	root = alias_root(g, n->inputs[0]);
	if (g->values[root].kind != HP_VALUE_INITIALIZER || !g->values[root].trainable ||
	    g->values[root].dtype != HP_F32 || g->values[o].is_output || !used_for_real(g, o))
		return 0; /* links of a chain only feeding another Identity go with it */
	if ((rc = give_bytes(g, o, root)) < 0)
		return rc;
	g->values[o].trainable = 1;
	drop[i] = 1;
	return 1;
}

int ad_untie_stats(struct hp_graph *g)
{
	char *drop = calloc((size_t)g->nnodes + 1, 1);
	int rc = drop ? 0 : hp_error(-ENOMEM, "out of memory"), any = 0;

	for (int i = 0; rc >= 0 && i < g->nnodes; i++) {
		if (!is_op(&g->nodes[i], "BatchNormalization"))
			continue;
		for (int k = 3; rc >= 0 && k < 5 && k < g->nodes[i].ninputs; k++)
			if ((rc = untie_slot(g, i, k, drop)) > 0)
				any = 1;
	}
	for (int i = 0; rc >= 0 && i < g->nnodes; i++)
		if ((rc = untie_param(g, i, drop)) > 0)
			any = 1;
	if (rc >= 0 && any)
		rc = drop_identities(g, drop);
	free(drop);
	return rc < 0 ? rc : 0;
}
