/* DRAM tier: a fixed-capacity arena (for daemons lending memory and for
 * tests of the tier interface).  Transfers are memcpy, completed inline. */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "hpdlf/error.h"
#include "store/tier.h"
#include "store/tier_dram.h"

struct dram_tier {
	struct hs_tier base;
	unsigned char *mem;
};

static void dram_close(struct hs_tier *t)
{
	struct dram_tier *d = (struct dram_tier *)t;

	munmap(d->mem, t->capacity);
	free(d);
}

/* Give the pages back: the arena is a capacity, not a reservation. */
static void dram_trim(struct hs_tier *t, uint64_t addr, uint64_t len)
{
	struct dram_tier *d = (struct dram_tier *)t;

	madvise(d->mem + addr, len, MADV_DONTNEED);
}

static int dram_submit(struct hs_tier *t, struct hs_io **ios, int n)
{
	struct dram_tier *d = (struct dram_tier *)t;

	for (int i = 0; i < n; i++) {
		struct hs_io *io = ios[i];
		if (io->addr + io->len > t->capacity || io->addr + io->len < io->addr) {
			io->res = -EINVAL;
		} else if ((io->res = hs_fault_io(io)) == 0) {
			if (io->op == HS_IO_READ)
				memcpy(io->buf, d->mem + io->addr, io->len);
			else
				memcpy(d->mem + io->addr, io->buf, io->len);
		}
		io->done(io);
	}
	return n;
}

static int dram_stats(struct hs_tier *t, struct hs_tier_stats *st)
{
	st->capacity = t->capacity - t->reserved;
	return 0;
}

static const struct hs_tier_ops dram_ops = {
	.kind = "dram",
	.close = dram_close,
	.submit = dram_submit,
	.stats = dram_stats,
	.trim = dram_trim,
};

int hs_tier_dram_open(const struct hs_tier_config *cfg, struct hs_tier **out)
{
	struct dram_tier *d;
	int rc;

	if (cfg->capacity <= cfg->reserved || cfg->capacity % HS_IO_ALIGN)
		return hp_error(HP_EUSAGE, "dram tier: capacity %llu must be a multiple of 4096 above the reserved %llu",
				(unsigned long long)cfg->capacity, (unsigned long long)cfg->reserved);
	d = calloc(1, sizeof *d);
	if (!d)
		return -ENOMEM;
	hs_tier_init(&d->base, &dram_ops, HS_TIER_DRAM, cfg);
	d->mem = mmap(NULL, cfg->capacity, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (d->mem == MAP_FAILED) {
		rc = hp_error(-ENOMEM, "dram tier: cannot map %llu bytes", (unsigned long long)cfg->capacity);
		goto fail;
	}
	*out = &d->base;
	return 0;
fail:
	free(d);
	return rc;
}
