/* Internal to kernels/ and exec/: the pool's calls beside the public
 * hp_parallel_for (include/hpdlf/kernels.h). */
#ifndef HPDLF_KERNELS_THREADPOOL_H
#define HPDLF_KERNELS_THREADPOOL_H

#include <stdint.h>

#include "hpdlf/kernels.h"

/* Run fn over [0, n) one item at a time, each item to whichever thread is
 * free (tid: that thread's index, 0 the caller), for kernels whose items
 * are independent (their results cannot depend on who runs them).  For
 * tens to hundreds of items, each claimed under the pool's lock. */
void hp_parallel_tiles(struct hp_pool *p, int64_t n, hp_range_fn fn, void *arg);

/* How long an idle worker, and a caller waiting for its workers, polls
 * before sleeping, in ns: HPDLF_POOL_SPIN_US (0: never poll), default
 * 100 us.  Read once per process. */
int64_t hp_pool_spin_ns(void);

#endif
