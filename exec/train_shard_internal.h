/* Internal to exec/train_shard*.c: a parameter this rank updates a slice of. */
#ifndef HPDLF_EXEC_TRAIN_SHARD_INTERNAL_H
#define HPDLF_EXEC_TRAIN_SHARD_INTERNAL_H

#include <stdint.h>

#include "hpdlf/graph.h"

struct hp_shard_part {
	int param;     /* W, the whole parameter */
	int slice_out; /* the slice the AllGather reads: the update's W' (optimizer,
			* gradients) or the slice state Ws (parameters) */
	uint64_t lo, hi;
};

/* AllReduce, ReduceScatter or AllGather of domain ai.hpdlf. */
int hp_shard_is_comm(const struct hp_node *n);
/* A new initializer holding elements [lo, hi) of initializer w, 1-D. */
int hp_shard_param_slice(struct hp_graph *g, int w, uint64_t lo, uint64_t hi);
/* --shard parameters: gathers of every part's slice before its forward
 * and its backward uses, then one token chain in node order; finalizes g. */
int hp_shard_gather_params(struct hp_graph *g, const struct hp_shard_part *parts, int np, int ranks, int rank);

#endif
