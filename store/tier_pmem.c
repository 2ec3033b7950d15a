/* PMEM tier: a pool file mapped with libpmem.  On real persistent memory
 * (pmem_is_pmem) writes use pmem_memcpy_persist (CPU cache flush, no
 * syscall); on anything else (a file on /dev/shm or a disk) memcpy followed
 * by pmem_msync.  Every write is durable when it completes. */
#include <errno.h>
#include <fcntl.h>
#include <libpmem.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "hpdlf/error.h"
#include "store/tier.h"
#include "store/tier_pmem.h"

int hs_pmem_force_mode;

struct pmem_tier {
	struct hs_tier base;
	unsigned char *mem;
	size_t mapped;
	int is_pmem;
	int fd; /* not PMEM: the pool file, for its transfers (file_io) */
};

static void pmem_tier_close(struct hs_tier *t)
{
	struct pmem_tier *p = (struct pmem_tier *)t;

	pmem_unmap(p->mem, p->mapped);
	if (p->fd >= 0)
		close(p->fd);
	free(p);
}

/* The persist decision, separate so tests can force either branch. */
static int use_persist_path(const struct pmem_tier *p)
{
	if (hs_pmem_force_mode == 1)
		return 1;
	if (hs_pmem_force_mode == 2)
		return 0;
	return p->is_pmem;
}

static int pmem_write(struct pmem_tier *p, const struct hs_io *io)
{
	void *dst = p->mem + io->addr;

	if (use_persist_path(p)) {
		pmem_memcpy_persist(dst, io->buf, io->len);
		return 0;
	}
	memcpy(dst, io->buf, io->len);
	if (pmem_msync(dst, io->len) < 0)
		return -errno;
	return 0;
}

/* A pool that is not persistent memory is a file in the page cache (or
 * on tmpfs: /dev/shm emulating PMEM).  Its pages, once touched through
 * the mapping, count in the process's resident set for as long as they
 * stay mapped: training efficientnet_b0 at --budget 64M over such a pool
 * peaked at 88 MiB, the tier's 33 MiB on top of the budget.  So its
 * transfers go through the file (pread, pwrite and fdatasync, as durable
 * as memcpy and msync were), which maps nothing into the process; real
 * PMEM (DAX) takes the mapping, whose pages are not the page cache's.
 * hs_pmem_force_mode (tests) forces either mapping path. */
static int file_io(const struct pmem_tier *p, const struct hs_io *io)
{
	char *b = io->buf;
	uint64_t done = 0;

	while (done < io->len) {
		ssize_t r = io->op == HS_IO_READ ? pread(p->fd, b + done, io->len - done, (off_t)(io->addr + done))
						 : pwrite(p->fd, b + done, io->len - done, (off_t)(io->addr + done));
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return r < 0 ? -errno : -EIO;
		done += (uint64_t)r;
	}
	if (io->op != HS_IO_READ && fdatasync(p->fd) < 0)
		return -errno;
	return 0;
}

static int pmem_tier_submit(struct hs_tier *t, struct hs_io **ios, int n)
{
	struct pmem_tier *p = (struct pmem_tier *)t;

	for (int i = 0; i < n; i++) {
		struct hs_io *io = ios[i];
		if (io->addr + io->len > p->mapped || io->addr + io->len < io->addr)
			io->res = -EINVAL;
		else if ((io->res = hs_fault_io(io)) != 0)
			;
		else if (p->fd >= 0 && !hs_pmem_force_mode)
			io->res = file_io(p, io);
		else if (io->op == HS_IO_READ)
			memcpy(io->buf, p->mem + io->addr, io->len);
		else
			io->res = pmem_write(p, io);
		io->done(io);
	}
	return n;
}

static int pmem_tier_flush(struct hs_tier *t)
{
	(void)t;
	pmem_drain();
	return 0;
}

static int pmem_tier_stats(struct hs_tier *t, struct hs_tier_stats *st)
{
	st->capacity = t->capacity - t->reserved;
	return 0;
}

static const struct hs_tier_ops pmem_ops = {
	.kind = "pmem",
	.close = pmem_tier_close,
	.submit = pmem_tier_submit,
	.flush = pmem_tier_flush,
	.stats = pmem_tier_stats,
};

static int map_pool(struct pmem_tier *p, const struct hs_tier_config *cfg)
{
	struct stat sb;
	uint64_t size = cfg->capacity;
	int flags = 0;

	if (stat(cfg->path, &sb) == 0 && sb.st_size > 0) {
		if (size == 0 || (uint64_t)sb.st_size == size)
			size = 0; /* map the existing file as it is */
		else if ((uint64_t)sb.st_size < size)
			flags = PMEM_FILE_CREATE; /* grow it */
		else
			size = 0;
	} else if (cfg->flags & HS_TIER_F_CREATE) {
		flags = PMEM_FILE_CREATE;
		if (size == 0)
			size = 1ull << 30;
	} else {
		return hp_error(-ENOENT, "%s: pmem pool does not exist", cfg->path);
	}
	p->mem = pmem_map_file(cfg->path, size, flags, 0600, &p->mapped, &p->is_pmem);
	if (!p->mem)
		return hp_error(errno ? -errno : -EIO, "%s: cannot map pmem pool: %s", cfg->path, pmem_errormsg());
	return 0;
}

int hs_tier_pmem_open(const struct hs_tier_config *cfg, struct hs_tier **out)
{
	struct pmem_tier *p;
	int rc;

	if (!cfg->path || !cfg->path[0])
		return hp_error(HP_EUSAGE, "pmem tier: no pool path given");
	p = calloc(1, sizeof *p);
	if (!p)
		return -ENOMEM;
	hs_tier_init(&p->base, &pmem_ops, HS_TIER_PMEM, cfg);
	rc = map_pool(p, cfg);
	if (rc < 0)
		goto fail;
	p->base.capacity = p->mapped & ~(uint64_t)(HS_IO_ALIGN - 1);
	if (p->base.capacity <= cfg->reserved) {
		rc = hp_error(HP_EUSAGE, "%s: pmem pool of %zu bytes is smaller than its header", cfg->path, p->mapped);
		goto fail_map;
	}
	p->fd = -1;
	if (!p->is_pmem && (p->fd = open(cfg->path, O_RDWR | O_CLOEXEC)) < 0) {
		rc = hp_error(-errno, "%s: cannot open the pmem pool's file: %s", cfg->path, strerror(errno));
		goto fail_map;
	}
	p->base.flags |= HS_TIER_F_PERSISTENT;
	*out = &p->base;
	return 0;
fail_map:
	pmem_unmap(p->mem, p->mapped);
fail:
	free(p);
	return rc;
}
