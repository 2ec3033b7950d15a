/* DRAM tier: a fixed-capacity arena (daemons lending memory, tests). */
#ifndef HPDLF_STORE_TIER_DRAM_H
#define HPDLF_STORE_TIER_DRAM_H

#include "store/tier.h"

int hs_tier_dram_open(const struct hs_tier_config *cfg, struct hs_tier **out);

#endif
