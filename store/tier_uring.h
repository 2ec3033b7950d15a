/* NVMe tier: a file or device through io_uring and O_DIRECT
 * (tier_uring_none.c without liburing). */
#ifndef HPDLF_STORE_TIER_URING_H
#define HPDLF_STORE_TIER_URING_H

#include <stdint.h>

#include "store/tier.h"

int hs_tier_nvme_open(const struct hs_tier_config *cfg, struct hs_tier **out);
/* Requests an nvme tier served from registered buffers (0 for other tiers). */
uint64_t hs_tier_nvme_fixed_ios(struct hs_tier *t);

#endif
