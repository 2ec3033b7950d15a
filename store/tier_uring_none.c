/* Built without liburing: the nvme tier is refused with a clear message. */
#include "hpdlf/error.h"
#include "store/tier.h"
#include "store/tier_uring.h"

int hs_tier_nvme_open(const struct hs_tier_config *cfg, struct hs_tier **out)
{
	(void)out;
	return hp_error(HP_EUNSUPPORTED, "%s: hpdlf was built without liburing (meson -During=enabled)",
			cfg->path ? cfg->path : "nvme");
}

uint64_t hs_tier_nvme_fixed_ios(struct hs_tier *t)
{
	(void)t;
	return 0;
}
