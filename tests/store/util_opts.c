/* Store options for the four tier configurations. */
#include "util.h"

#include <stdlib.h>
#include <string.h>

void tu_opts(struct hs_store_opts *o, enum cfg c, uint64_t cs, uint64_t budget_chunks, uint64_t tier_chunks,
	     const char *prefix)
{
	char name[256];

	hs_store_opts_init(o, sizeof *o);
	o->chunk_size = cs;
	o->budget = budget_chunks * cs;
	o->default_spill = 0;
	o->ntiers = 0;
	if (c == CFG_PMEM || c == CFG_ALL) {
		snprintf(name, sizeof name, "%s.pmem", prefix);
		o->tiers[o->ntiers++] = (struct hs_tier_spec){ .kind = HS_TIER_PMEM,
			.path = strdup(tu_path(tu_shm_dir(), name)), .size = tier_chunks * cs + 65536 };
	}
	if (c == CFG_NVME || c == CFG_ALL) {
		snprintf(name, sizeof name, "%s.nvme", prefix);
		o->tiers[o->ntiers++] = (struct hs_tier_spec){ .kind = HS_TIER_NVME,
			.path = strdup(tu_path(tu_disk_dir(), name)), .size = tier_chunks * cs + 65536 };
	}
}
