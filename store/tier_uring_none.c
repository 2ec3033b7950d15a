/* Built without liburing: the nvme tier is refused with a clear message;
 * the read-only file tier (weights, datasets) reads with pread, completing
 * inline, O_DIRECT when the filesystem takes it. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "hpdlf/error.h"
#include "store/tier.h"
#include "store/tier_uring.h"

int hs_tier_nvme_open(const struct hs_tier_config *cfg, struct hs_tier **out)
{
	(void)out;
	return hp_error(HP_EUNSUPPORTED, "%s: hpdlf was built without liburing (meson -During=enabled)",
			cfg->path ? cfg->path : "nvme");
}

void hs_tier_uring_plug(int on)
{
	(void)on; /* the file tier completes inline */
}

uint64_t hs_tier_nvme_fixed_ios(struct hs_tier *t)
{
	(void)t;
	return 0;
}

uint64_t hs_tier_nvme_requests(struct hs_tier *t)
{
	(void)t;
	return 0;
}

uint32_t hs_tier_nvme_sq_head(struct hs_tier *t)
{
	(void)t;
	return 0;
}

struct file_tier {
	struct hs_tier base;
	int fd, direct;
	uint64_t fsize;
};

static void file_close(struct hs_tier *t)
{
	close(((struct file_tier *)t)->fd);
	free(t);
}

static int file_read(struct file_tier *f, struct hs_io *io)
{
	size_t done = 0;

	if (io->op == HS_IO_WRITE)
		return -EROFS;
	if (io->addr + io->len > f->base.capacity)
		return -EINVAL;
	while (done < io->len) {
		ssize_t k = pread(f->fd, (char *)io->buf + done, io->len - done, (off_t)(io->addr + done));
		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0)
			return -errno;
		if (k == 0)
			break;
		done += (size_t)k;
	}
	if (!f->direct)
		posix_fadvise(f->fd, (off_t)io->addr, (off_t)io->len, POSIX_FADV_DONTNEED);
	return done == io->len || io->addr + done == f->fsize ? 0 : -ENODATA;
}

static int file_submit(struct hs_tier *t, struct hs_io **ios, int n)
{
	for (int i = 0; i < n; i++) {
		struct hs_io *io = ios[i];
		if ((io->res = hs_fault_io(io)) == 0)
			io->res = file_read((struct file_tier *)t, io);
		io->done(io);
	}
	return n;
}

static int file_stats(struct hs_tier *t, struct hs_tier_stats *st)
{
	st->capacity = t->capacity;
	return 0;
}

static const struct hs_tier_ops file_ops = {
	.kind = "file",
	.close = file_close,
	.submit = file_submit,
	.stats = file_stats,
};

int hs_tier_file_open(const char *path, struct hs_tier **out)
{
	struct hs_tier_config cfg = { .name = "file", .path = path };
	struct file_tier *f = calloc(1, sizeof *f);
	struct stat sb;
	int fl;

	if (!f)
		return -ENOMEM;
	hs_tier_init(&f->base, &file_ops, HS_TIER_NVME, &cfg);
	if ((f->fd = open(path, O_RDONLY | O_CLOEXEC)) < 0 || fstat(f->fd, &sb) < 0) {
		int rc = hp_error(-errno, "%s: cannot open the backing file: %s", path, strerror(errno));
		if (f->fd >= 0)
			close(f->fd);
		free(f);
		return rc;
	}
	fl = fcntl(f->fd, F_GETFL);
	f->direct = fl >= 0 && fcntl(f->fd, F_SETFL, fl | O_DIRECT) == 0;
	f->fsize = (uint64_t)sb.st_size;
	f->base.capacity = (f->fsize + HS_IO_ALIGN - 1) & ~(uint64_t)(HS_IO_ALIGN - 1);
	*out = &f->base;
	return 0;
}

uint64_t hs_tier_file_size(struct hs_tier *t)
{
	return t->ops == &file_ops ? ((struct file_tier *)t)->fsize : 0;
}

int hs_tier_file_direct(struct hs_tier *t)
{
	return t->ops == &file_ops && ((struct file_tier *)t)->direct;
}
