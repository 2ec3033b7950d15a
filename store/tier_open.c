/* Tiers opened from their public spec (hs_tier_spec): by the store at
 * hs_store_open, or by a caller beforehand through hs_tier_open. */
#include <errno.h>
#include <stdio.h>

#include "hpdlf/error.h"
#include "store/remote/remote.h"
#include "store/store_internal.h"
#include "store/tier_dram.h"
#include "store/tier_uring.h"
#include "store/tier_pmem.h"

static const char *const kinds[] = { "dram", "pmem", "nvme", "remote" };

/* Local tiers keep the store's superblocks in their head (HS_RESERVED), so
 * a tier opened here fits any store it is handed to. */
int hs_tier_open_as(const struct hs_tier_spec *sp, const char *name, unsigned queue_depth, struct hs_tier **out)
{
	struct hs_tier_config cfg = { .name = name, .path = sp->path, .capacity = sp->size,
				      .reserved = HS_RESERVED, .queue_depth = queue_depth,
				      .flags = HS_TIER_F_CREATE };
	int rc;

	switch (sp->kind) {
	case HS_TIER_PMEM:
		rc = hs_tier_pmem_open(&cfg, out);
		break;
	case HS_TIER_NVME:
		if (!sp->path)
			cfg.flags |= HS_TIER_F_UNLINK | HS_TIER_F_BUFFERED_OK;
		rc = hs_tier_nvme_open(&cfg, out);
		break;
	case HS_TIER_DRAM:
		if (!cfg.capacity)
			return hp_error(HP_EUSAGE, "dram tier %s needs a size", name);
		rc = hs_tier_dram_open(&cfg, out);
		break;
	case HS_TIER_REMOTE:
		rc = hs_tier_remote_open_spec(&sp->remote, name, out);
		break;
	default:
		return hp_error(HP_EUSAGE, "tier %s: unknown kind %d", name, sp->kind);
	}
	return rc;
}

const char *hs_tier_kind_name(enum hs_tier_kind kind)
{
	return (unsigned)kind <= HS_TIER_REMOTE ? kinds[kind] : "unknown";
}

int hs_tier_open(const struct hs_tier_spec *spec, struct hs_tier **out)
{
	if (!spec || !out)
		return hp_error(HP_EUSAGE, "hs_tier_open: no spec");
	*out = NULL;
	if (spec->tier)
		return hp_error(HP_EUSAGE, "hs_tier_open: the spec holds an opened tier already");
	return hs_tier_open_as(spec, hs_tier_kind_name(spec->kind), 32, out);
}

void hs_tier_close(struct hs_tier *t)
{
	if (t)
		t->ops->close(t);
}
