/* What a checkpoint calls each state value: the whole logical tensor it
 * is (or is a slice of) and the range of that whole this rank holds.
 *
 * Unsharded, a state value is its own whole.  Under --shard optimizer,
 * gradients or parameters (train_shard.c, train_shard3.c) an update runs
 * on this rank's slice [lo, hi) of parameter W (exec/shard.h): its
 * optimizer state (W.momentum, W.exp_avg, W.exp_avg_sq) keeps the names
 * of the unsharded run but only hi - lo elements, and with `parameters`
 * the slice W.shard replaces W as the state.  Naming and sizing these as
 * the wholes an unsharded run writes makes checkpoints interchangeable
 * between --shard modes and numbers of ranks: each rank writes and reads
 * ranges of the wholes.  The update's graph structure, not the names,
 * tells which values are slices of which parameter. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hpdlf/error.h"
#include "exec/pipe.h"
#include "exec/shard.h"
#include "exec/split_weight.h"
#include "exec/train_ckpt.h"
#include "exec/train_internal.h"

static int is_update(const struct hp_node *n)
{
	return !strcmp(n->domain, "ai.hpdlf") && (!strcmp(n->op_type, "SGDUpdate") || !strcmp(n->op_type, "AdamUpdate"));
}

/* The whole parameter whose slice update input p is: ShardSlice(W), or
 * the slice state W.shard of --shard parameters.  -1: p is no slice. */
static int sliced_param(const struct hp_graph *g, int p)
{
	const struct hp_value *pv = &g->values[p];
	size_t len = strlen(pv->name);
	int prod = pv->producer;

	if (prod >= 0 && !strcmp(g->nodes[prod].domain, "ai.hpdlf") && !strcmp(g->nodes[prod].op_type, "ShardSlice"))
		return g->nodes[prod].inputs[0];
	if (prod < 0 && pv->next >= 0 && len > 6 && !strcmp(pv->name + len - 6, ".shard")) {
		char name[512];
		if (len - 6 >= sizeof name)
			return -1;
		memcpy(name, pv->name, len - 6);
		name[len - 6] = 0;
		return hp_graph_find_value(g, name);
	}
	return -1;
}

/* Is v the slice parameter or a sliced state input of update u? */
static int slice_of_update(const struct hp_graph *g, const struct hp_node *u, int v, int *param)
{
	int nst = !strcmp(u->op_type, "AdamUpdate") ? 2 : u->ninputs - 2, w = sliced_param(g, u->inputs[0]);

	if (w < 0)
		return 0;
	*param = w;
	if (u->inputs[0] == v && g->values[v].producer < 0)
		return 2; /* W.shard: the whole is W itself */
	for (int k = 0; k < nst && 2 + k < u->ninputs; k++)
		if (u->inputs[2 + k] == v)
			return 1;
	return 0;
}

static void view_self(const struct hp_value *val, struct hp_ckpt_view *out)
{
	int64_t n = hp_shape_numel(&val->shape);

	out->name = val->name;
	out->dtype = val->dtype;
	out->shape = val->shape;
	out->n = n > 0 ? (uint64_t)n : 0;
	out->lo = 0;
	out->hi = out->n;
}

int hp_ckpt_view(const struct hp_trainer *t, int v, struct hp_ckpt_view *out)
{
	const struct hp_graph *g = t->g;
	/* --pipeline: a stage's optimizer state is sharded among its D
	 * replicas (pipe_shard.c), the group of this rank's place `replica` */
	int r = t->pipe ? t->pipe->replica : t->rank, N = t->pipe ? t->pipe->D : t->nranks, kind = 0, w = -1;

	view_self(&g->values[v], out);
	if (t->o.shard == HP_SHARD_NONE || N < 2)
		return 0;
	for (int i = 0; i < g->nnodes && !kind; i++)
		if (is_update(&g->nodes[i]))
			kind = slice_of_update(g, &g->nodes[i], v, &w);
	if (!kind)
		return 0;
	const struct hp_value *wv = &g->values[w];
	if (wv->part_of >= 0)
		return hp_error(HP_EUNSUPPORTED, "--shard %s slices '%s', a block of weight '%s' that --budget "
				"partitioned, which checkpoints cannot hold yet (add --no-split, or use --shard none)",
				t->o.shard == HP_SHARD_PARAMETERS ? "parameters" : t->o.shard == HP_SHARD_GRADIENTS ?
				"gradients" : "optimizer", wv->name, g->values[wv->part_of].name);
	if (kind == 2)
		out->name = wv->name;
	out->shape = wv->shape;
	out->n = (uint64_t)hp_shape_numel(&wv->shape);
	hp_shard_range(out->n, r, N, &out->lo, &out->hi);
	if (out->hi - out->lo != (uint64_t)hp_shape_numel(&g->values[v].shape))
		return hp_error(HP_EINTERNAL, "checkpoint: sharded state '%s' has %lld elements, not slice [%llu, %llu) "
				"of '%s'", g->values[v].name, (long long)hp_shape_numel(&g->values[v].shape),
				(unsigned long long)out->lo, (unsigned long long)out->hi, wv->name);
	return 0;
}

int hp_ckpt_check_views(const struct hp_trainer *t)
{
	const struct hp_graph *g = t->g;
	struct hp_ckpt_view w;
	char *unit = hp_whole_state(g);
	int rc = unit ? 0 : hp_error(-ENOMEM, "out of memory");

	for (int v = 0; unit && v < g->nvalues && rc == 0; v++)
		if (unit[v] && (rc = hp_ckpt_view(t, v, &w)) == HP_EUNSUPPORTED) {
			char msg[512];
			snprintf(msg, sizeof msg, "%s", hp_errmsg());
			rc = hp_error(HP_EUSAGE, "--checkpoint: %s", msg);
		}
	free(unit);
	return rc;
}
