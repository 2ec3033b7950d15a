/* PMEM tier: a pool file mapped with libpmem (tier_pmem_none.c without it). */
#ifndef HPDLF_STORE_TIER_PMEM_H
#define HPDLF_STORE_TIER_PMEM_H

#include "store/tier.h"

int hs_tier_pmem_open(const struct hs_tier_config *cfg, struct hs_tier **out);

/* Force the pmem write path: 0 auto (pmem_is_pmem), 1 persist path
 * (pmem_memcpy_persist), 2 msync path.  Tests use it to cover both. */
extern int hs_pmem_force_mode;

#endif
