/* The shard partition of issue 13, shared by sharded training and
 * checkpoint parts: any state tensor of n elements (parameter, gradient,
 * optimizer moment, BN statistic), flattened, is split over N ranks by
 * element index, rank r owning [n*r/N, n*(r+1)/N) (floor).  Computed as
 * n/N*r + (n%N)*r/N, which equals floor(n*r/N) without forming n*r, so
 * no uint64 overflow for any n. */
#ifndef HPDLF_EXEC_SHARD_H
#define HPDLF_EXEC_SHARD_H

#include <stdint.h>

static inline uint64_t hp_shard_bound(uint64_t n, int r, int N)
{
	return n / (uint64_t)N * (uint64_t)r + n % (uint64_t)N * (uint64_t)r / (uint64_t)N;
}

static inline void hp_shard_range(uint64_t n, int r, int N, uint64_t *lo, uint64_t *hi)
{
	*lo = hp_shard_bound(n, r, N);
	*hi = hp_shard_bound(n, r + 1, N);
}

#endif
