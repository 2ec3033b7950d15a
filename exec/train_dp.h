/* Data-parallel training (internal to exec/): the gradient buckets'
 * reductions in the training graph (train_dp.c). */
#ifndef HPDLF_EXEC_TRAIN_DP_H
#define HPDLF_EXEC_TRAIN_DP_H

#include <stdint.h>

#include "hpdlf/graph.h"

/* Bucket size for grad_bytes of gradients when --bucket is not given. */
uint64_t hp_dp_default_bucket(uint64_t grad_bytes);
/* Make every optimizer update of training graph g read its gradient
 * summed over `ranks` ranks and scaled by 1/ranks: AllReduce nodes over
 * buckets of about `bucket` bytes (0: hp_dp_default_bucket) in the order
 * the gradients are produced; g is finalized and inferred again.  ranks
 * < 2: nothing to do. */
int hp_dp_insert_reduce(struct hp_graph *g, int ranks, uint64_t bucket, int *nbuckets);

#endif
