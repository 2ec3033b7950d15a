/* --sync-bn: BatchNorm over the global batch.  Training turns every
 * BatchNormalization into BatchNormTrain and its backward BatchNormGrad
 * (autodiff); here both get attribute sync=1, and the kernels get the
 * ranks' sum of doubles (a second communicator: kernels/norm_sync.c).
 * The kernels issue those collectives in the order they run, which must
 * be the same on every rank: in core one kernel runs at a time in the
 * plan's order (the same on every rank); out of core the task net chains
 * them, and the buckets' reductions, in the plan's order (runtime.c:
 * ordered entries). */
#include <string.h>

#include "hpdlf/error.h"
#include "exec/comm.h"
#include "exec/train_internal.h"
#include "kernels/norm_sync.h"

static int rank_sum(double *buf, size_t n)
{
	return hp_comm_allreduce_side(buf, n);
}

/* --pipeline: over the stage's D replicas (hp_comm_group_split) */
static int group_sum(double *buf, size_t n)
{
	return hp_comm_group_allreduce_side(buf, n);
}

int hp_dp_sync_bn(struct hp_trainer *t, struct hp_graph *g)
{
	struct hp_attr a = { .name = (char *)"sync", .type = HP_ATTR_INT, .i = 1 };
	int rc;

	if (!t->o.sync_bn)
		return 0;
	for (int i = 0; i < g->nnodes; i++) {
		const char *op = g->nodes[i].op_type;
		if (strcmp(g->nodes[i].domain, "ai.hpdlf") || (strcmp(op, "BatchNormTrain") && strcmp(op, "BatchNormGrad")))
			continue;
		if ((rc = hp_graph_add_attr(g, i, &a)) < 0)
			return rc;
	}
	hp_kernels_set_rank_sum(t->pipe ? group_sum : rank_sum);
	return 0;
}
