/* --shard optimizer|gradients and --sync-bn with --pipeline P and D >= 2
 * pipelines (pipe.h): the same rewrites as data parallelism's, applied to
 * a stage's graphs with the stage's D replicas in place of the job's
 * ranks.
 *
 * Sharding: the optimizer graph's updates read the summed gradients as
 * inputs; train_dp.c puts its AllReduce buckets before them and
 * train_shard.c turns those into a ReduceScatter, updates of this
 * replica's slice (optimizer state of the slice only) and an AllGather of
 * the new parameters, exactly as without --pipeline.  Their collectives
 * run over the stage's replica group (attribute group=1, comm_shard.c)
 * and divide the sums by M x D (attribute mean_over: every micro-batch's
 * loss is a mean), so the step's hand-made group allreduce and scaling
 * (pipe_step.c) are skipped.  The micro-batches' gradients are still
 * summed whole in p->acc: `gradients` shards what the optimizer graph
 * holds (the reduced gradients), not that running sum.
 *
 * --sync-bn: the BatchNorm nodes of the backward and forward graphs sum
 * their statistics over the group (train_dp_sync.c): each micro-batch is
 * normalized over the D pipelines' same micro-batch. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "hpdlf/error.h"
#include "exec/comm.h"
#include "exec/exec_internal.h"
#include "exec/pipe.h"
#include "exec/shard.h"
#include "exec/train_dp.h"
#include "exec/train_internal.h"
#include "exec/train_shard.h"

static int add_int(struct hp_graph *g, int node, const char *name, int64_t v)
{
	struct hp_attr a = { .name = (char *)name, .type = HP_ATTR_INT, .i = v };

	return hp_graph_add_attr(g, node, &a);
}

/* Every collective of g over the group, the reduce-scatters' sums
 * divided by `mean_over`. */
static int on_group(struct hp_graph *g, int64_t mean_over)
{
	int rc = 0;

	for (int i = 0; i < g->nnodes && rc == 0; i++) {
		const struct hp_node *n = &g->nodes[i];
		if (!hp_comm_is_allreduce(n))
			continue;
		if ((rc = add_int(g, i, "group", 1)) == 0 && strcmp(n->op_type, "AllGather"))
			rc = add_int(g, i, "mean_over", mean_over);
	}
	return rc;
}

static int shard_optimizer(struct hp_trainer *t)
{
	struct hp_pipe *p = t->pipe;
	int nb = 0, rc;

	if (!t->o.shard || !p->go)
		return 0;
	if ((rc = hp_dp_insert_reduce(p->go, p->D, t->o.bucket, &nb)) < 0 ||
	    (rc = hp_shard_insert(p->go, p->D, p->replica, (enum hp_shard_mode)t->o.shard)) < 0 ||
	    (rc = on_group(p->go, (int64_t)p->M * p->D)) < 0)
		return hp_error_prefix(rc, "pipeline stage %d, --shard", p->stage);
	p->sharded = nb > 0;
	hp_log(HP_LOG_INFO, "pipeline stage %d, replica %d of %d: optimizer state sharded (%d bucket(s))", p->stage,
	       p->replica, p->D, nb);
	return 0;
}

int hp_pipe_shard(struct hp_trainer *t, struct hp_graph *gb)
{
	struct hp_pipe *p = t->pipe;
	int rc;

	if (p->D < 2)
		return 0;
	if (t->o.sync_bn && ((rc = hp_dp_sync_bn(t, gb)) < 0 || (p->gf && (rc = hp_dp_sync_bn(t, p->gf)) < 0)))
		return rc;
	return shard_optimizer(t);
}

/* Checkpoints (pipe_ckpt.c): bytes [at, at + len) of the whole of sliced
 * float32 state v of n elements (session s, this replica holding its
 * shard partition's slice), gathered from the stage's D replicas into buf
 * on every one of them.  Collective over the group: every replica calls
 * it for the same pieces in the same order, a failed read included. */
int hp_pipe_gather_slice(struct hp_session *s, int v, uint64_t n, uint64_t at, size_t len, void *buf)
{
	int D = hp_comm_group_size(), me = hp_comm_group_rank(), tot = 0, rc = 0, r2;
	int *counts = calloc((size_t)D, sizeof *counts), *displs = calloc((size_t)D, sizeof *displs);
	uint64_t a = at / sizeof(float), b = (at + len) / sizeof(float), mlo = 0;
	float *mine = malloc(len + sizeof(float));

	if (!counts || !displs || !mine) {
		rc = hp_error(-ENOMEM, "out of memory");
		goto out; /* every replica runs out alike or the job ends */
	}
	for (int q = 0; q < D; q++) {
		uint64_t lo, hi;
		hp_shard_range(n, q, D, &lo, &hi);
		lo = lo > a ? lo : a;
		hi = hi < b ? hi : b;
		counts[q] = hi > lo ? (int)(hi - lo) : 0;
		displs[q] = tot;
		tot += counts[q];
		if (q == me)
			mlo = lo;
	}
	if (counts[me]) {
		uint64_t lo, hi;
		hp_shard_range(n, me, D, &lo, &hi);
		rc = hp_session_read_value(s, v, (mlo - lo) * sizeof(float), (uint64_t)counts[me] * sizeof(float),
					   mine);
	}
	if ((r2 = hp_comm_group_allgatherv(mine, buf, counts, displs)) < 0)
		rc = r2;
out:
	free(counts);
	free(displs);
	free(mine);
	return rc;
}
