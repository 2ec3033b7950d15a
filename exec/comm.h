/* The ranks of a job (internal to exec/ and tools/): who we are, and the
 * collectives data-parallel training needs, over MPI.
 *
 *   if ((rc = hp_comm_init()) < 0) fail(rc);    // MPI only under a launcher
 *   hp_comm_allreduce(buf, n, HP_F32);          // sum over ranks, in place
 *   ...
 *   hp_comm_finalize();                          // after a run that succeeded
 *
 * A process started without a launcher (no mpirun/srun environment) never
 * initialises MPI: it is rank 0 of 1 and every collective returns at once.
 * Every MPI call goes through this module under one mutex, so MPI runs at
 * MPI_THREAD_SERIALIZED while the task net's I/O threads issue a bucket's
 * reduction and the main thread the loss's.  Callers must issue the
 * collectives in the same order on every rank (the task net chains its
 * COMM transitions for that).  A lost peer shows up as HP_EPROTO naming
 * this rank; the launcher then ends the job. */
#ifndef HPDLF_EXEC_COMM_H
#define HPDLF_EXEC_COMM_H

#include <stddef.h>
#include <stdint.h>

#include "hpdlf/tensor.h"

/* The launcher's rank and size from the environment (Open MPI, PMIx, PMI,
 * Slurm with more than one task), without touching MPI: 1 if launched. */
int hp_comm_env(int *rank, int *size);
/* The link the job measured at start-up (train_dp_plan.c) or was given,
 * for the out-of-core planner, which times each bucket's reduction with
 * it (comm_env.c); hp_comm_link returns its GB/s, 0 when unknown. */
void hp_comm_link_set(double GBps, double lat_us);
double hp_comm_link(double *lat_us);
/* Initialise MPI when a launcher started us (idempotent); 0 or HP_EUNSUPPORTED
 * (built without MPI under a launcher) or HP_EPROTO. */
int hp_comm_init(void);
int hp_comm_rank(void);
int hp_comm_size(void);
/* Sum count elements of dtype (HP_F32 or HP_F64) over all ranks, in place. */
int hp_comm_allreduce(void *buf, size_t count, enum hp_dtype dt);
/* The same for doubles on a second communicator: for collectives the
 * compute workers issue (--sync-bn) while buckets are reduced. */
int hp_comm_allreduce_side(double *buf, size_t count);
/* The minimum and maximum of a value over all ranks (disagreement checks). */
int hp_comm_minmax_u64(uint64_t v, uint64_t *min, uint64_t *max);
int hp_comm_bcast(void *buf, size_t bytes, int root);
int hp_comm_barrier(void);
/* A barrier waited for asleep (comm_wait.c), like the collectives: the
 * communication thread's trace splits a bucket's time into the wait for
 * the last rank to arrive and the collective itself (comm_thread.c). */
int hp_comm_arrive(void);
/* Float32 reduce-scatter (MPI_Reduce_scatter, sum): send holds a block per
 * rank in rank order, counts[q] elements for rank q; recv gets this rank's
 * block summed over the ranks.  The sum's order is MPI's but fixed for a
 * fixed rank count and counts: the same bits on every call alike. */
int hp_comm_reduce_scatter(const float *send, float *recv, const int *counts);
/* Float32 all-gather: every rank's counts[q] elements land at recv + displs[q]. */
int hp_comm_allgatherv(const float *send, float *recv, const int *counts, const int *displs);
/* Leave MPI (only after every rank succeeded: a failed rank just exits and
 * the launcher ends the job). */
void hp_comm_finalize(void);
/* The module's MPI mutex, for the other MPI users of exec/ (comm_mbox.c). */
void hp_comm_lock(void);
void hp_comm_unlock(void);
/* Pipeline stages' messages (exec/pipe_run.c), on a communicator of their
 * own: started at once, completed by hp_comm_req_wait (which frees the
 * request, sleeping between tests like the collectives, under the
 * watchdog's deadline).  The buffer must stay untouched until then. */
struct hp_comm_req;
int hp_comm_isend(const void *buf, size_t bytes, int peer, int tag, struct hp_comm_req **out);
int hp_comm_irecv(void *buf, size_t bytes, int peer, int tag, struct hp_comm_req **out);
int hp_comm_req_wait(struct hp_comm_req *q);
/* Collective: put this rank in the group of the ranks of the same color
 * (ordered by key), for hp_comm_group_allreduce: the sum of float32 over
 * the group, in place (a group of one: nothing). */
int hp_comm_group_split(int color, int key);
int hp_comm_group_allreduce(float *buf, size_t count);
/* This rank's place in that group (the job's when never split), and the
 * reduce-scatter, all-gather and side sum of doubles above over it: the
 * collectives of nodes with attribute group=1 (a pipeline stage's D
 * replicas sharding its optimizer state, synchronising its BatchNorm). */
int hp_comm_group_rank(void);
int hp_comm_group_size(void);
int hp_comm_group_reduce_scatter(const float *send, float *recv, const int *counts);
int hp_comm_group_allgatherv(const float *send, float *recv, const int *counts, const int *displs);
int hp_comm_group_allreduce_side(double *buf, size_t count);
/* hp_comm_arrive over the group. */
int hp_comm_group_arrive(void);
struct hp_node;
struct hp_kargs;
/* An ai.hpdlf AllReduce node (kernels/comm_op.c): the executors run it
 * with hp_comm_run_allreduce instead of its kernel. */
int hp_comm_is_allreduce(const struct hp_node *n);
/* Sum the node's gradients over the ranks into its outputs, scaled by
 * 1/ranks, packed through a staging buffer of at most 4 MiB (never store
 * memory: see comm_reduce.c). */
int hp_comm_run_allreduce(const struct hp_node *n, const struct hp_kargs *a);
/* The collectives of --shard (kernels/comm_shard_op.c: ReduceScatter,
 * AllGather), which hp_comm_is_allreduce also answers for and
 * hp_comm_run_allreduce hands here (comm_shard.c). */
int hp_comm_is_shard_op(const struct hp_node *n);
int hp_comm_run_shard_op(const struct hp_node *n, const struct hp_kargs *a);
/* A bucket's AllReduce as reduce-scatter then all-gather over the blocks
 * --shard uses (comm_shard.c): each element summed in the same order as
 * a ReduceScatter of that bucket sums it, so every --shard mode gives the
 * same bits; the traffic of a ring allreduce. */
int hp_comm_shard_allreduce(const struct hp_node *n, const struct hp_kargs *a);

#endif
