/* TRANSITIONAL.  Compiled into hpdlf-store-inspect only while the tree has
 * no store/statpage.c (the store branch provides the real
 * hs_statpage_read(), hs_statpage_path() and hs_lat_percentile(); once it is
 * merged, tools/meson.build stops building this file).  It reads the page
 * layout version 1 of docs/store-format.md: a header, then a
 * struct hs_store_stats under a seqlock. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "hpdlf/error.h"
#include "hpdlf/store.h"

#define PAGE_MAGIC "HPDLFST\0"
#define PAGE_VERSION 1u

struct statpage {
	char magic[8];
	uint32_t version;
	uint32_t header_size;
	uint32_t stats_size;
	int32_t pid;
	uint64_t start_time;    /* field 22 of /proc/<pid>/stat */
	_Atomic uint64_t seq;   /* odd while the owner writes */
	uint64_t updated_ns;
	uint64_t reserved[4];
	struct hs_store_stats stats;
};

char *hs_statpage_path(pid_t pid, char *buf, size_t len)
{
	snprintf(buf, len, "/dev/shm/hpdlf-store.%ld", (long)pid);
	return buf;
}

double hs_lat_percentile(const struct hs_tier_stats *s, double q)
{
	uint64_t total = 0, acc = 0;

	for (int i = 0; i < HS_LAT_BUCKETS; i++)
		total += s->lat_hist[i];
	if (total == 0)
		return 0;
	for (int i = 0; i < HS_LAT_BUCKETS; i++) {
		acc += s->lat_hist[i];
		if ((double)acc >= q * (double)total)
			return (double)(2ull << i);
	}
	return (double)(1ull << HS_LAT_BUCKETS);
}

static unsigned long long start_time(pid_t pid)
{
	char path[64], line[1024];
	unsigned long long v = 0;
	FILE *f;

	snprintf(path, sizeof path, "/proc/%ld/stat", (long)pid);
	if (!(f = fopen(path, "r")))
		return 0;
	if (fgets(line, sizeof line, f)) {
		char *p = strrchr(line, ')');
		if (!p || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %*u %*u %*d %*d %*d %*d %*d %*d %llu",
				 &v) != 1)
			v = 0;
	}
	fclose(f);
	return v;
}

static int snapshot(const struct statpage *p, struct hs_statpage_info *out)
{
	for (int tries = 0; tries < 100000; tries++) {
		uint64_t s1 = atomic_load_explicit(&p->seq, memory_order_acquire);
		if (s1 & 1)
			continue;
		memcpy(&out->stats, (const void *)&p->stats, sizeof out->stats);
		out->updated_ns = p->updated_ns;
		atomic_thread_fence(memory_order_acquire);
		if (atomic_load_explicit(&p->seq, memory_order_relaxed) == s1)
			return 0;
	}
	return -EAGAIN;
}

static int check(const struct statpage *p, size_t size, const char *path)
{
	if (size < offsetof(struct statpage, stats) || memcmp(p->magic, PAGE_MAGIC, 8) != 0)
		return hp_error(HP_EFORMAT, "%s: not an hpdlf stats page", path);
	if (p->version != PAGE_VERSION || p->header_size != offsetof(struct statpage, stats) ||
	    p->stats_size != sizeof(struct hs_store_stats) || size < sizeof *p)
		return hp_error(HP_EFORMAT, "%s: stats page layout version %u (%u+%u bytes); this build reads version %u",
				path, p->version, p->header_size, p->stats_size, PAGE_VERSION);
	return 0;
}

int hs_statpage_read(pid_t pid, struct hs_statpage_info *out)
{
	char path[64];
	struct statpage *p;
	struct stat sb;
	int fd, rc;

	hs_statpage_path(pid, path, sizeof path);
	if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0)
		return hp_error(-errno, "%s: %s", path, strerror(errno));
	if (fstat(fd, &sb) < 0 || sb.st_size <= 0) {
		close(fd);
		return hp_error(HP_EFORMAT, "%s: empty stats page", path);
	}
	p = mmap(NULL, (size_t)sb.st_size, PROT_READ, MAP_SHARED, fd, 0);
	close(fd);
	if (p == MAP_FAILED)
		return hp_error(-errno, "%s: cannot map: %s", path, strerror(errno));
	if ((rc = check(p, (size_t)sb.st_size, path)) == 0) {
		int dead = (kill(pid, 0) < 0 && errno == ESRCH) || (p->start_time && start_time(pid) != p->start_time);
		out->pid = p->pid;
		out->version = p->version;
		if (dead) {
			memcpy(&out->stats, (const void *)&p->stats, sizeof out->stats);
			out->updated_ns = p->updated_ns;
			rc = hp_error(-ESRCH, "%s: stale page: process %ld is gone (it did not close its store)", path,
				      (long)pid);
		} else if ((rc = snapshot(p, out)) < 0) {
			rc = hp_error(rc, "%s: the owner kept updating; no consistent snapshot", path);
		}
	}
	munmap(p, (size_t)sb.st_size);
	return rc;
}
