/* --shard optimizer|gradients (ZeRO stages 1 and 2) in the training
 * graph, after hp_dp_insert_reduce made one AllReduce per bucket:
 *
 *   AllReduce(tok, g1..gk)          ->  ReduceScatter(tok, g1..gk) -> s1..sk
 *   Update(W, g', state)            ->  Update(ShardSlice(W), s, state of the slice)
 *   W.next = the update's W'        ->  AllGather(tok, W1'..Wk') -> whole W', W.next
 *
 * This rank's slice of each tensor is the shard partition (exec/shard.h).
 * The optimizer state (momentum, Adam's moments) becomes state values of
 * the slice's size: store tensors like any other, paged under --budget.
 * With `gradients` the reduce-scatter outputs only the slice of each
 * reduced gradient; with `optimizer` a whole gradient stays (its slice
 * reduced), as ZeRO-1 keeps gradients whole.  The updates are elementwise
 * and the sums those of --shard none's reduction (comm_shard.c), so the
 * parameters after every step are the same bits in every mode.
 *
 * The AllGathers follow the last ReduceScatter in the one token chain:
 * every rank issues the collectives in the same order.  `parameters`
 * shares the reduce-scatter and the sliced updates; its slices and
 * gathers are train_shard3.c's. */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hpdlf/error.h"
#include "exec/shard.h"
#include "exec/train_shard.h"
#include "exec/train_shard_internal.h"


static int is_op(const struct hp_node *n, const char *op)
{
	return !strcmp(n->domain, "ai.hpdlf") && !strcmp(n->op_type, op);
}

static int is_update(const struct hp_node *n)
{
	return is_op(n, "SGDUpdate") || is_op(n, "AdamUpdate");
}

/* The update reading value v as its gradient, if v's one consumer is. */
static int update_of(const struct hp_graph *g, int v)
{
	if (g->values[v].nconsumers != 1)
		return -1;
	for (int i = 0; i < g->nnodes; i++)
		if (is_update(&g->nodes[i]) && g->nodes[i].ninputs > 1 && g->nodes[i].inputs[1] == v)
			return i;
	return -1;
}

/* Every reduced gradient of AllReduce node a feeds an update. */
static int reduces_gradients(const struct hp_graph *g, const struct hp_node *a)
{
	for (int i = 1; i < a->noutputs; i++)
		if (update_of(g, a->outputs[i]) < 0)
			return 0;
	return 1;
}

static int add_int(struct hp_graph *g, int node, const char *name, int64_t v)
{
	struct hp_attr a = { .name = (char *)name, .type = HP_ATTR_INT, .i = v };

	return hp_graph_add_attr(g, node, &a);
}

static int add_ints(struct hp_graph *g, int node, const char *name, int64_t *v, int n)
{
	struct hp_attr a = { .name = (char *)name, .type = HP_ATTR_INTS, .ints = v, .n = n };

	return hp_graph_add_attr(g, node, &a);
}

static int set_op(struct hp_node *n, const char *op)
{
	char *s = strdup(op);

	if (!s)
		return hp_error(-ENOMEM, "out of memory");
	free(n->op_type);
	n->op_type = s;
	n->op = NULL;
	return 0;
}

/* y = ShardSlice(x)[lo, hi): a new 1-D value named after x. */
static int add_slice(struct hp_graph *g, int x, uint64_t lo, uint64_t hi, const char *suffix)
{
	struct hp_shape s = { 1, { (int64_t)(hi - lo) } };
	char name[512];
	int y, node, rc;

	snprintf(name, sizeof name, "%s.%s", g->values[x].name, suffix);
	if ((y = hp_graph_add_value(g, name, HP_VALUE_ACTIVATION, HP_F32, &s)) < 0)
		return y;
	if ((node = hp_graph_add_node(g, name, "ShardSlice", 1, &x, 1, &y)) < 0)
		return node;
	free(g->nodes[node].domain);
	if (!(g->nodes[node].domain = strdup("ai.hpdlf")))
		return hp_error(-ENOMEM, "out of memory");
	if ((rc = add_int(g, node, "lo", (int64_t)lo)) < 0 || (rc = add_int(g, node, "hi", (int64_t)hi)) < 0)
		return rc;
	return y;
}

/* Update u runs on this rank's [lo, hi) of its parameter: the parameter
 * (and with a whole gradient, the gradient) through ShardSlice, its state
 * values resized to the slice (they start zeroed, as before). */
static int shard_update(struct hp_graph *g, int u, enum hp_shard_mode mode, struct hp_shard_part *p)
{
	int w = g->nodes[u].inputs[0], nst = g->nodes[u].ninputs - 2, v;

	if (is_op(&g->nodes[u], "AdamUpdate"))
		nst = 2; /* input 4 is the step counter */
	if (g->values[w].next != g->nodes[u].outputs[0] || g->values[g->nodes[u].outputs[0]].nconsumers)
		return hp_error(HP_EINTERNAL, "--shard: parameter '%s' is not only updated by node '%s'",
				g->values[w].name, g->nodes[u].name);
	p->param = w;
	p->slice_out = g->nodes[u].outputs[0];
	if (mode == HP_SHARD_PARAMETERS) {
		/* the slice is the state: W itself is no longer read or updated */
		if ((v = hp_shard_param_slice(g, w, p->lo, p->hi)) < 0)
			return v;
		g->nodes[u].inputs[0] = v;
		g->values[v].next = g->nodes[u].outputs[0];
		g->values[w].next = -1;
		g->values[w].trainable = 0;
		p->slice_out = v;
	} else if ((v = add_slice(g, w, p->lo, p->hi, "shard")) < 0) {
		return v;
	} else {
		g->nodes[u].inputs[0] = v;
	}
	if (mode == HP_SHARD_OPTIMIZER) {
		if ((v = add_slice(g, g->nodes[u].inputs[1], p->lo, p->hi, "shard")) < 0)
			return v;
		g->nodes[u].inputs[1] = v;
	}
	for (int k = 0; k < nst; k++) {
		struct hp_value *st = &g->values[g->nodes[u].inputs[2 + k]];
		st->shape = (struct hp_shape){ 1, { (int64_t)(p->hi - p->lo) } };
		st->part_of = -1; /* a slice now, no longer a block of a split weight's state */
	}
	return 0;
}

/* AllReduce node a becomes a ReduceScatter; its updates go to p[0..k). */
static int shard_bucket(struct hp_graph *g, int a, const int *upd, int ranks, int rank, enum hp_shard_mode mode,
			struct hp_shard_part *p)
{
	int k = g->nodes[a].noutputs - 1, rc = 0;
	int64_t *range = calloc(2 * (size_t)k, sizeof *range);

	if (!range)
		return hp_error(-ENOMEM, "out of memory");
	for (int i = 0; i < k && rc == 0; i++) {
		uint64_t n = (uint64_t)hp_shape_numel(&g->values[g->nodes[a].inputs[1 + i]].shape);
		hp_shard_range(n, rank, ranks, &p[i].lo, &p[i].hi);
		range[2 * i] = (int64_t)p[i].lo;
		range[2 * i + 1] = (int64_t)p[i].hi;
		rc = shard_update(g, upd[i], mode, &p[i]);
	}
	if (rc == 0 && (rc = set_op(&g->nodes[a], "ReduceScatter")) == 0 && (rc = add_int(g, a, "rank", rank)) == 0 &&
	    (rc = add_ints(g, a, "range", range, 2 * k)) == 0)
		rc = add_int(g, a, "full", mode == HP_SHARD_OPTIMIZER);
	free(range);
	return rc;
}

/* The AllGather of one bucket's updated slices after *token; each
 * parameter's next value becomes its gathered whole. */
static int add_gather(struct hp_graph *g, const struct hp_shard_part *p, int k, int ranks, int rank, int index, int *token)
{
	int *in = calloc((size_t)k + 1, sizeof *in), *out = calloc((size_t)k + 1, sizeof *out), node, nd = 0, rc = 0;
	int64_t *range = calloc(2 * (size_t)k + 1, sizeof *range), *dims = calloc((size_t)k * (HP_MAX_RANK + 1) + 1, 8);
	struct hp_shape scalar = { 0 };
	char name[512];

	if (!in || !out || !range || !dims) {
		rc = hp_error(-ENOMEM, "out of memory");
		goto out;
	}
	in[0] = *token;
	snprintf(name, sizeof name, "allgather.%d.token", index);
	if ((out[0] = rc = hp_graph_add_value(g, name, HP_VALUE_ACTIVATION, HP_F32, &scalar)) < 0)
		goto out;
	for (int i = 0; i < k; i++) {
		const struct hp_shape s = g->values[p[i].param].shape;
		in[1 + i] = p[i].slice_out;
		snprintf(name, sizeof name, "%s.gathered", g->values[p[i].param].name);
		if ((out[1 + i] = rc = hp_graph_add_value(g, name, HP_VALUE_ACTIVATION, HP_F32, &s)) < 0)
			goto out;
		range[2 * i] = (int64_t)p[i].lo;
		range[2 * i + 1] = (int64_t)p[i].hi;
		dims[nd++] = s.rank;
		for (int r = 0; r < s.rank; r++)
			dims[nd++] = s.dims[r];
	}
	snprintf(name, sizeof name, "allgather.%d", index);
	if ((node = rc = hp_graph_add_node(g, name, "AllGather", k + 1, in, k + 1, out)) < 0)
		goto out;
	free(g->nodes[node].domain);
	if (!(g->nodes[node].domain = strdup("ai.hpdlf"))) {
		rc = hp_error(-ENOMEM, "out of memory");
		goto out;
	}
	if ((rc = add_int(g, node, "ranks", ranks)) < 0 || (rc = add_int(g, node, "rank", rank)) < 0 ||
	    (rc = add_ints(g, node, "range", range, 2 * k)) < 0 || (rc = add_ints(g, node, "dims", dims, nd)) < 0)
		goto out;
	for (int i = 0; i < k; i++)
		g->values[p[i].param].next = out[1 + i];
	*token = out[0];
	rc = 0;
out:
	free(in);
	free(out);
	free(range);
	free(dims);
	return rc;
}

/* The buckets to shard, in token order (the topological order), their
 * updates, and the token ending the chain of collectives. */
struct plan {
	int nb, np, *node, *first, *upd, end;
	struct hp_shard_part *parts;
};

static void plan_free(struct plan *pl)
{
	free(pl->node);
	free(pl->first);
	free(pl->upd);
	free(pl->parts);
}

static int collect(const struct hp_graph *g, struct plan *pl)
{
	int ends = 0;

	memset(pl, 0, sizeof *pl);
	pl->node = calloc((size_t)g->nnodes + 1, sizeof *pl->node);
	pl->first = calloc((size_t)g->nnodes + 2, sizeof *pl->first);
	pl->upd = calloc((size_t)g->nvalues + 1, sizeof *pl->upd);
	pl->parts = calloc((size_t)g->nvalues + 1, sizeof *pl->parts);
	if (!pl->node || !pl->first || !pl->upd || !pl->parts)
		return hp_error(-ENOMEM, "out of memory");
	for (int i = 0; i < g->nnodes; i++) {
		const struct hp_node *a = &g->nodes[i];
		if (!is_op(a, "AllReduce"))
			continue;
		if (!g->values[a->outputs[0]].nconsumers) {
			pl->end = a->outputs[0];
			ends++;
		}
		if (!reduces_gradients(g, a))
			continue;
		pl->node[pl->nb] = i;
		pl->first[pl->nb++] = pl->np;
		for (int o = 1; o < a->noutputs; o++)
			pl->upd[pl->np++] = update_of(g, a->outputs[o]);
	}
	pl->first[pl->nb] = pl->np;
	if (pl->nb && ends != 1)
		return hp_error(HP_EINTERNAL, "--shard: the collectives form %d token chains, not one", ends);
	return 0;
}

int hp_shard_check_opts(const struct hp_trainer_opts *o)
{
	int m = o->size >= offsetof(struct hp_trainer_opts, shard) + sizeof o->shard ? o->shard : HP_SHARD_NONE;

	if (m < HP_SHARD_NONE || m > HP_SHARD_PARAMETERS)
		return hp_error(HP_EUSAGE, "unknown --shard mode %d", m);
	/* checkpoints name the wholes of sliced state and each rank writes
	 * and reads its slice of them (train_ckpt_view.c): no clash */
	return 0;
}

int hp_shard_insert(struct hp_graph *g, int ranks, int rank, enum hp_shard_mode mode)
{
	struct plan pl;
	int rc, token;

	if (mode == HP_SHARD_NONE || ranks < 2)
		return 0;
	if (mode < HP_SHARD_OPTIMIZER || mode > HP_SHARD_PARAMETERS)
		return hp_error(HP_EUSAGE, "unknown --shard mode %d", (int)mode);
	if ((rc = collect(g, &pl)) < 0)
		goto out;
	for (int b = 0; b < pl.nb && rc == 0; b++)
		rc = shard_bucket(g, pl.node[b], pl.upd + pl.first[b], ranks, rank, mode, pl.parts + pl.first[b]);
	if (rc == 0 && mode == HP_SHARD_PARAMETERS) {
		if ((rc = hp_shard_gather_params(g, pl.parts, pl.np, ranks, rank)) == 0)
			rc = hp_graph_infer(g);
		goto out;
	}
	token = pl.end;
	for (int b = 0; b < pl.nb && rc == 0; b++)
		rc = add_gather(g, pl.parts + pl.first[b], pl.first[b + 1] - pl.first[b], ranks, rank, b, &token);
	if (rc == 0 && pl.nb && (rc = hp_graph_finalize(g)) == 0)
		rc = hp_graph_infer(g);
out:
	plan_free(&pl);
	return rc;
}
