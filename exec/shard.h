/* The shard partition shared by every data-parallel piece (ZeRO shards,
 * checkpoint parts): a state tensor of n elements, flattened, is cut over
 * N ranks by element index, rank r owning [n*r/N, n*(r+1)/N) (floor).
 * Checkpoint parts use the same ranges as the shards, so resuming with
 * another N or --shard mode is re-reading ranges. */
#ifndef HPDLF_EXEC_SHARD_H
#define HPDLF_EXEC_SHARD_H

#include <stdint.h>

/* n*r/N without overflowing uint64: n = q*N + m, so n*r/N = q*r + m*r/N
 * (m*r < N*N fits for any N below 2^32). */
static inline void hp_shard_range(uint64_t n, int r, int N, uint64_t *lo, uint64_t *hi)
{
	uint64_t q = n / (uint64_t)N, m = n % (uint64_t)N;

	*lo = q * (uint64_t)r + m * (uint64_t)r / (uint64_t)N;
	*hi = q * (uint64_t)(r + 1) + m * (uint64_t)(r + 1) / (uint64_t)N;
}

#endif
