/* --shard parameters (ZeRO stage 3) in the training graph: each rank holds
 * only its slice of every trained parameter, as a state value of the
 * slice's size loaded from the model's bytes of that slice.  The whole
 * parameter exists only while a layer needs it:
 *
 *   Ws (this rank's slice, state) -> AllGather -> W for the forward nodes
 *   Ws                            -> AllGather -> W for the backward nodes
 *   ReduceScatter(gradients) -> Update(Ws, slice of the gradient) -> Ws'
 *
 * Each gather is a node of its own with a late scheduling hint, so the
 * topological sort places it just before the first node reading it and
 * the planner drops the whole after its last use (gathered twice: 1.5x the
 * traffic of plain data parallelism).  After that sort every collective
 * is threaded into one token chain in node order: every rank builds the
 * same structure, so every rank issues them in the same order. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hpdlf/error.h"
#include "exec/shard.h"
#include "exec/train_shard_internal.h"

#define LATE (1 << 30) /* sched hint: after every ready compute node */

int hp_shard_is_comm(const struct hp_node *n)
{
	return !strcmp(n->domain, "ai.hpdlf") && (!strcmp(n->op_type, "AllReduce") ||
						  !strcmp(n->op_type, "ReduceScatter") || !strcmp(n->op_type, "AllGather"));
}

/* Ws: the slice [lo, hi) of initializer w as an initializer of its own,
 * its bytes those of w's at the slice (a file range, or copied). */
int hp_shard_param_slice(struct hp_graph *g, int w, uint64_t lo, uint64_t hi)
{
	struct hp_shape s = { 1, { (int64_t)(hi - lo) } };
	char name[512];
	int v;

	if (g->values[w].dtype != HP_F32 || (!g->values[w].data && g->values[w].src.kind != HP_BLOB_FILE))
		return hp_error(HP_EUNSUPPORTED, "--shard parameters: parameter '%s' is not float32 bytes of the model",
				g->values[w].name);
	snprintf(name, sizeof name, "%s.shard", g->values[w].name);
	if ((v = hp_graph_add_value(g, name, HP_VALUE_INITIALIZER, HP_F32, &s)) < 0)
		return v;
	struct hp_value *p = &g->values[v], *wv = &g->values[w];
	uint64_t off = lo * sizeof(float), len = (hi - lo) * sizeof(float);
	p->trainable = 1;
	if (wv->data) {
		if (!(p->data = malloc(len ? len : 1)))
			return hp_error(-ENOMEM, "out of memory");
		memcpy(p->data, (const char *)wv->data + off, len);
		p->src = (struct hp_blob){ .kind = HP_BLOB_MEMORY, .length = len };
	} else {
		p->src = wv->src;
		p->src.offset += off;
		p->src.length = len;
	}
	return v;
}

/* Which nodes compute the loss (the forward pass): ancestors of value loss. */
static char *forward_nodes(const struct hp_graph *g, int loss)
{
	char *fwd = calloc((size_t)g->nnodes + 1, 1);
	int *stack = calloc((size_t)g->nnodes + 1, sizeof *stack), top = 0;

	if (!fwd || !stack) {
		free(fwd);
		free(stack);
		return NULL;
	}
	if (g->values[loss].producer >= 0)
		fwd[stack[top++] = g->values[loss].producer] = 1;
	while (top) {
		const struct hp_node *n = &g->nodes[stack[--top]];
		for (int i = 0; i < n->ninputs; i++) {
			int v = n->inputs[i], p = v >= 0 ? g->values[v].producer : -1;
			if (p >= 0 && !fwd[p])
				fwd[stack[top++] = p] = 1;
		}
	}
	free(stack);
	return fwd;
}

static int add_int3(struct hp_graph *g, int node, const char *name, int64_t v)
{
	struct hp_attr a = { .name = (char *)name, .type = HP_ATTR_INT, .i = v };

	return hp_graph_add_attr(g, node, &a);
}

static int add_ints3(struct hp_graph *g, int node, const char *name, const int64_t *v, int n)
{
	struct hp_attr a = { .name = (char *)name, .type = HP_ATTR_INTS, .ints = (int64_t *)v, .n = n };

	return hp_graph_add_attr(g, node, &a);
}

/* The AllGather of p's slice whose whole replaces p's parameter in the
 * original nodes [0, n0) of class bwd (fwd[i] == 0) or forward. */
static int gather_for(struct hp_graph *g, const struct hp_shard_part *p, const char *fwd, int n0, int bwd,
		      int ranks, int rank)
{
	const struct hp_shape s = g->values[p->param].shape;
	struct hp_shape scalar = { 0 };
	int64_t range[2] = { (int64_t)p->lo, (int64_t)p->hi }, dims[HP_MAX_RANK + 1] = { s.rank };
	int in[2] = { -1, p->slice_out }, out[2], node, rc, used = 0;
	char name[512];

	for (int i = 0; i < n0 && !used; i++)
		for (int j = 0; j < g->nodes[i].ninputs && !used; j++)
			used = g->nodes[i].inputs[j] == p->param && (!fwd[i]) == bwd;
	if (!used)
		return 0;
	snprintf(name, sizeof name, "%s.whole.%s", g->values[p->param].name, bwd ? "bwd" : "fwd");
	if ((out[1] = hp_graph_add_value(g, name, HP_VALUE_ACTIVATION, HP_F32, &s)) < 0)
		return out[1];
	snprintf(name, sizeof name, "%s.whole.%s.token", g->values[p->param].name, bwd ? "bwd" : "fwd");
	if ((out[0] = hp_graph_add_value(g, name, HP_VALUE_ACTIVATION, HP_F32, &scalar)) < 0)
		return out[0];
	snprintf(name, sizeof name, "allgather.%s.%s", g->values[p->param].name, bwd ? "bwd" : "fwd");
	if ((node = hp_graph_add_node(g, name, "AllGather", 2, in, 2, out)) < 0)
		return node;
	for (int r = 0; r < s.rank; r++)
		dims[1 + r] = s.dims[r];
	free(g->nodes[node].domain);
	if (!(g->nodes[node].domain = strdup("ai.hpdlf")))
		return hp_error(-ENOMEM, "out of memory");
	g->nodes[node].sched = LATE;
	if ((rc = add_int3(g, node, "ranks", ranks)) < 0 || (rc = add_int3(g, node, "rank", rank)) < 0 ||
	    (rc = add_ints3(g, node, "range", range, 2)) < 0 || (rc = add_ints3(g, node, "dims", dims, 1 + s.rank)) < 0)
		return rc;
	for (int i = 0; i < n0; i++)
		for (int j = 0; j < g->nodes[i].ninputs; j++)
			if (g->nodes[i].inputs[j] == p->param && (!fwd[i]) == bwd)
				g->nodes[i].inputs[j] = out[1];
	return 0;
}

/* First original node of class bwd reading p's parameter (n0: none). */
static int first_use(const struct hp_graph *g, const struct hp_shard_part *p, const char *fwd, int n0, int bwd)
{
	for (int i = 0; i < n0; i++)
		for (int j = 0; j < g->nodes[i].ninputs; j++)
			if (g->nodes[i].inputs[j] == p->param && (!fwd[i]) == bwd)
				return i;
	return n0;
}

/* Parts in the order their class first needs them: the order the gathers
 * are added, which is the order the sort takes them in. */
static int *use_order(const struct hp_graph *g, const struct hp_shard_part *parts, int np, const char *fwd, int n0,
		      int bwd)
{
	int *ord = calloc((size_t)np + 1, sizeof *ord), *key = calloc((size_t)np + 1, sizeof *key);

	if (!ord || !key) {
		free(ord);
		free(key);
		return NULL;
	}
	for (int i = 0; i < np; i++) {
		key[i] = first_use(g, &parts[i], fwd, n0, bwd);
		int k = i;
		while (k > 0 && key[ord[k - 1]] > key[i]) {
			ord[k] = ord[k - 1];
			k--;
		}
		ord[k] = i;
	}
	free(key);
	return ord;
}

/* Every collective in node order on one token chain. */
static void rechain(struct hp_graph *g)
{
	int prev = -1;

	for (int i = 0; i < g->nnodes; i++)
		if (hp_shard_is_comm(&g->nodes[i])) {
			g->nodes[i].inputs[0] = prev;
			prev = g->nodes[i].outputs[0];
		}
}

int hp_shard_gather_params(struct hp_graph *g, const struct hp_shard_part *parts, int np, int ranks, int rank)
{
	int n0 = g->nnodes, loss = g->noutputs ? g->outputs[g->noutputs - 1] : -1, rc = 0;
	char *fwd = loss >= 0 ? forward_nodes(g, loss) : NULL;

	if (!fwd)
		return loss < 0 ? hp_error(HP_EINTERNAL, "--shard parameters: the graph has no loss")
				: hp_error(-ENOMEM, "out of memory");
	for (int bwd = 0; bwd < 2 && rc == 0; bwd++) {
		int *ord = use_order(g, parts, np, fwd, n0, bwd);
		if (!ord) {
			rc = hp_error(-ENOMEM, "out of memory");
			break;
		}
		for (int i = 0; i < np && rc == 0; i++)
			rc = gather_for(g, &parts[ord[i]], fwd, n0, bwd, ranks, rank);
		free(ord);
	}
	free(fwd);
	if (rc == 0 && (rc = hp_graph_finalize(g)) == 0) {
		rechain(g);
		rc = hp_graph_finalize(g);
	}
	return rc;
}
