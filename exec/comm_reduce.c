/* A bucket's reduction (the AllReduce node of kernels/comm_op.c) run
 * through the job's communicator.  The sum is MPI's, over a fixed rank
 * count and fixed piece sizes, then scaled by 1/ranks: the same bits on
 * every rank and in every run with that many ranks.  It is done as a
 * reduce-scatter and an all-gather over the blocks of --shard
 * (comm_shard.c), so that every --shard mode sums alike.
 *
 * MPI never sees store memory: the gradients are packed into a staging
 * buffer of this module's own.  Store tensors live in frames the store
 * moves with mremap and registers with io_uring; MPI's single-copy paths
 * (CMA's process_vm_readv between local ranks, RDMA registration caches
 * between nodes) must not read pages that move under them (seen here: a
 * local peer's process_vm_readv spinning inside an allreduce). */
#include <string.h>

#include "hpdlf/error.h"
#include "hpdlf/graph.h"
#include "exec/comm.h"

int hp_comm_is_allreduce(const struct hp_node *n)
{
	if (n->op_type[0] != 'A' && n->op_type[0] != 'R')
		return 0; /* neither AllReduce nor a shard op (the planner asks for every step) */
	return (!strcmp(n->op_type, "AllReduce") && !strcmp(n->domain, "ai.hpdlf")) || hp_comm_is_shard_op(n);
}

int hp_comm_run_allreduce(const struct hp_node *n, const struct hp_kargs *a)
{
	if (hp_comm_is_shard_op(n))
		return hp_comm_run_shard_op(n, a);
	return hp_comm_shard_allreduce(n, a);
}
