/* Internal to kernels/: the pool's settings beside the public
 * hp_parallel_for (include/hpdlf/kernels.h). */
#ifndef HPDLF_KERNELS_THREADPOOL_H
#define HPDLF_KERNELS_THREADPOOL_H

#include <stdint.h>

#include "hpdlf/kernels.h"

/* How long an idle worker polls for the next job before sleeping, in ns:
 * HPDLF_POOL_SPIN_US (0: never poll; at most 1 s), default 100 us; an
 * unparsable value keeps the default.  Read once per process.  A caller
 * whose job's shares are all taken polls for the running ones for this
 * long but at least 200 us (threadpool.c, POOL_FINISH_NS). */
int64_t hp_pool_spin_ns(void);

/* hp_parallel_for for kernels whose units are independent: [0, n) in
 * units of `unit` items, cut into `parts` (at most the pool's size)
 * shares of whole units.  The thread running share k calls fn on its
 * units one at a time, first to last, as tid k, then on units taken from
 * the back of the other shares, still as tid k; so fn is called with one
 * unit (the last one may be short) at a time, in any order across
 * threads, and must give the same bits wherever a unit runs.  Without a
 * pool or with one share: fn(arg, 0, n, 0), once.  No unit count above
 * 2^32. */
void hp_parallel_steal(struct hp_pool *p, int64_t n, int64_t unit, int parts, hp_range_fn fn, void *arg);

/* Whether the pool has workers and none of them sleeps (each runs a job
 * or polls for the next one): handing a job to polling workers costs
 * about 0.5 us on 2 threads (an empty hp_parallel_steal, median of
 * 20000), waking a sleeping one a futex call and a trip through the
 * scheduler on both sides.  A hint, read without the lock. */
int hp_pool_polling(struct hp_pool *p);

/* Tests: a worker sleeps us microseconds before it starts its share of
 * a stealing job (0: never, the default; below 0: until the other threads
 * have taken every unit of the job), so that the other threads take its
 * units; and the units of stealing jobs run so far by a thread other than
 * their share's (process-wide). */
void hp_pool_set_steal_stall_us(int64_t us);
uint64_t hp_pool_stolen_units(void);

/* Tests only: before running its first share of a job, a worker (who 1)
 * or the caller (who 0) sleeps ns nanoseconds (0, the default: never),
 * so that the other thread takes that share's units (stealing jobs) and a
 * test can check that the bits do not depend on who ran a unit. */
void hp_pool_test_delay(int who, int64_t ns);

#endif
