/* Sharded data parallelism (internal to exec/): the training graph of
 * --shard optimizer|gradients (train_shard.c). */
#ifndef HPDLF_EXEC_TRAIN_SHARD_H
#define HPDLF_EXEC_TRAIN_SHARD_H

#include "hpdlf/graph.h"
#include "hpdlf/train.h"

/* Rewrite the buckets' AllReduce nodes (hp_dp_insert_reduce) of training
 * graph g for rank `rank` of `ranks`: each becomes a ReduceScatter, every
 * update it feeds runs on this rank's slice of its parameter with
 * optimizer state of that slice only, and AllGather nodes rebuild the
 * parameters after the updates (optimizer, gradients) or before each use
 * (parameters: the slice is the state).  HP_SHARD_NONE or ranks < 2:
 * nothing to do.  g is finalized and inferred again. */
/* The --shard mode against the other options: HP_EUSAGE naming the clash. */
int hp_shard_check_opts(const struct hp_trainer_opts *o);
int hp_shard_insert(struct hp_graph *g, int ranks, int rank, enum hp_shard_mode mode);

#endif
