/* Built without libpmem: the pmem tier is refused with a clear message. */
#include "hpdlf/error.h"
#include "store/tier.h"
#include "store/tier_pmem.h"

int hs_pmem_force_mode;

int hs_tier_pmem_open(const struct hs_tier_config *cfg, struct hs_tier **out)
{
	(void)out;
	return hp_error(HP_EUNSUPPORTED, "%s: hpdlf was built without libpmem (meson -Dpmem=enabled)",
			cfg->path ? cfg->path : "pmem");
}
