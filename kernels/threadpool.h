/* Internal to kernels/: the pool's settings beside the public
 * hp_parallel_for (include/hpdlf/kernels.h). */
#ifndef HPDLF_KERNELS_THREADPOOL_H
#define HPDLF_KERNELS_THREADPOOL_H

#include <stdint.h>

#include "hpdlf/kernels.h"

/* How long an idle worker, and a caller waiting for its workers, polls
 * before sleeping, in ns: HPDLF_POOL_SPIN_US (0: never poll; at most 1 s),
 * default 100 us; an unparsable value keeps the default.  Read once per
 * process. */
int64_t hp_pool_spin_ns(void);

#endif
