/* DRAM tier: a fixed-capacity arena (for daemons lending memory and for
 * tests of the tier interface).  Transfers are memcpy, completed inline. */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "hpdlf/error.h"
#include "store/tier.h"

struct dram_tier {
	struct hs_tier base;
	unsigned char *mem;
	pthread_mutex_t mu;
	struct hs_extents *ext;
};

static void dram_close(struct hs_tier *t)
{
	struct dram_tier *d = (struct dram_tier *)t;

	munmap(d->mem, t->capacity);
	hs_extents_destroy(d->ext);
	pthread_mutex_destroy(&d->mu);
	free(d);
}

static int dram_alloc(struct hs_tier *t, uint64_t len, uint64_t *addr)
{
	struct dram_tier *d = (struct dram_tier *)t;
	int rc = hs_fault_check(HS_FAULT_TIER_ALLOC);

	if (rc)
		return rc;
	pthread_mutex_lock(&d->mu);
	rc = hs_extents_alloc(d->ext, len, addr);
	pthread_mutex_unlock(&d->mu);
	return rc;
}

static int dram_free(struct hs_tier *t, uint64_t addr, uint64_t len)
{
	struct dram_tier *d = (struct dram_tier *)t;
	int rc;

	pthread_mutex_lock(&d->mu);
	rc = hs_extents_free(d->ext, addr, len);
	pthread_mutex_unlock(&d->mu);
	/* Give the pages back: the arena is a capacity, not a reservation. */
	if (rc == 0)
		madvise(d->mem + addr, len, MADV_DONTNEED);
	return rc;
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
	struct dram_tier *d = (struct dram_tier *)t;

	pthread_mutex_lock(&d->mu);
	st->capacity = t->capacity - t->reserved;
	st->used = hs_extents_used(d->ext);
	st->chunks = hs_extents_count(d->ext);
	pthread_mutex_unlock(&d->mu);
	return 0;
}

static const struct hs_tier_ops dram_ops = {
	.kind = "dram",
	.close = dram_close,
	.alloc = dram_alloc,
	.free = dram_free,
	.submit = dram_submit,
	.stats = dram_stats,
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
	pthread_mutex_init(&d->mu, NULL);
	d->mem = mmap(NULL, cfg->capacity, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (d->mem == MAP_FAILED) {
		rc = hp_error(-ENOMEM, "dram tier: cannot map %llu bytes", (unsigned long long)cfg->capacity);
		goto fail;
	}
	rc = hs_extents_create(cfg->reserved, cfg->capacity, &d->ext);
	if (rc < 0)
		goto fail_map;
	*out = &d->base;
	return 0;
fail_map:
	munmap(d->mem, cfg->capacity);
fail:
	pthread_mutex_destroy(&d->mu);
	free(d);
	return rc;
}
