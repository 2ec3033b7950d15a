/* Statistics page: /dev/shm/hpdlf-store.<pid>, a versioned header and a
 * struct hs_store_stats under a seqlock, so another process (the inspector)
 * reads a consistent snapshot without stopping the owner.  Layout:
 * docs/store-format.md. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "hpdlf/error.h"
#include "store/store_internal.h"

#define PAGE_MAGIC "HPDLFST\0"
#define PAGE_VERSION 1u
#define PUBLISH_EVERY_NS 10000000ull /* at most 100 updates a second */

struct statpage {
	char magic[8];
	uint32_t version;
	uint32_t header_size;   /* offsetof(struct statpage, stats) */
	uint32_t stats_size;    /* sizeof(struct hs_store_stats) */
	int32_t pid;
	uint64_t start_time;    /* field 22 of /proc/<pid>/stat: tells a reused pid */
	_Atomic uint64_t seq;   /* odd while the owner writes */
	uint64_t updated_ns;    /* CLOCK_REALTIME */
	uint64_t reserved[4];
	struct hs_store_stats stats;
};

_Static_assert(sizeof(struct hs_store_stats) % 8 == 0, "stats are 64-bit words");
_Static_assert(offsetof(struct statpage, stats) == 80, "layout version 1 (docs/store-format.md)");

char *hs_statpage_path(pid_t pid, char *buf, size_t len)
{
	snprintf(buf, len, "/dev/shm/hpdlf-store.%ld", (long)pid);
	return buf;
}

/* Start time of a process in clock ticks after boot, 0 if unknown. */
static uint64_t proc_start_time(pid_t pid)
{
	char path[64], line[1024];
	unsigned long long v = 0;
	FILE *f;

	snprintf(path, sizeof path, "/proc/%ld/stat", (long)pid);
	f = fopen(path, "r");
	if (!f)
		return 0;
	if (fgets(line, sizeof line, f)) {
		char *p = strrchr(line, ')'); /* the command name may hold spaces */
		if (p && sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %*u %*u %*d %*d %*d %*d %*d %*d %llu",
				&v) != 1)
			v = 0;
	}
	fclose(f);
	return v;
}

static uint64_t realtime_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + ts.tv_nsec;
}

int hs_statpage_create(struct hs_store *st)
{
	char path[64], tmp[80];
	struct statpage *p;
	int fd;

	hs_statpage_path(getpid(), path, sizeof path);
	snprintf(tmp, sizeof tmp, "%s.new", path);
	fd = open(tmp, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0)
		return hp_error(-errno, "store: cannot create the stats page %s: %s", tmp, strerror(errno));
	if (ftruncate(fd, sizeof *p) < 0) {
		int e = errno;
		close(fd);
		unlink(tmp);
		return hp_error(-e, "store: cannot size the stats page %s: %s", tmp, strerror(e));
	}
	p = mmap(NULL, sizeof *p, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	close(fd);
	if (p == MAP_FAILED) {
		unlink(tmp);
		return hp_error(-errno, "store: cannot map the stats page %s", tmp);
	}
	p->version = PAGE_VERSION;
	p->header_size = offsetof(struct statpage, stats);
	p->stats_size = sizeof p->stats;
	p->pid = getpid();
	p->start_time = proc_start_time(getpid());
	memcpy(p->magic, PAGE_MAGIC, 8);
	/* Readers never see a half-initialised page: it appears by rename. */
	if (rename(tmp, path) < 0) {
		int e = errno;
		munmap(p, sizeof *p);
		unlink(tmp);
		return hp_error(-e, "store: cannot publish the stats page %s: %s", path, strerror(e));
	}
	st->page = p;
	hs_statpage_publish(st, 1);
	return 0;
}

void hs_statpage_publish(struct hs_store *st, int force)
{
	struct statpage *p = st->page;
	uint64_t now;

	if (!p)
		return;
	now = hs_now_ns();
	pthread_mutex_lock(&st->mu);
	if (force || now - st->page_last_ns >= PUBLISH_EVERY_NS) {
		st->page_last_ns = now;
		uint64_t s = atomic_load_explicit(&p->seq, memory_order_relaxed);
		atomic_store_explicit(&p->seq, s + 1, memory_order_relaxed);
		atomic_thread_fence(memory_order_release);
		hs_store_fill_stats(st, &p->stats);
		p->updated_ns = realtime_ns();
		atomic_store_explicit(&p->seq, s + 2, memory_order_release);
	}
	pthread_mutex_unlock(&st->mu);
}

void hs_statpage_destroy(struct hs_store *st)
{
	char path[64];

	if (!st->page)
		return;
	munmap(st->page, sizeof(struct statpage));
	st->page = NULL;
	unlink(hs_statpage_path(getpid(), path, sizeof path));
}

/* Copy a consistent snapshot out of a mapped page. */
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

static int check_header(const struct statpage *p, size_t size, const char *path)
{
	if (size < offsetof(struct statpage, stats) || memcmp(p->magic, PAGE_MAGIC, 8) != 0)
		return hp_error(HP_EFORMAT, "%s: not an hpdlf stats page", path);
	if (p->version != PAGE_VERSION || p->header_size != offsetof(struct statpage, stats) ||
	    p->stats_size != sizeof(struct hs_store_stats) || size < sizeof *p)
		return hp_error(HP_EFORMAT, "%s: stats page layout version %u (%u+%u bytes); this build reads version %u", path,
				p->version, p->header_size, p->stats_size, PAGE_VERSION);
	return 0;
}

int hs_statpage_read(pid_t pid, struct hs_statpage_info *out)
{
	char path[64];
	struct statpage *p;
	struct stat sb;
	int fd, rc;

	hs_statpage_path(pid, path, sizeof path);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return hp_error(-errno, "%s: %s", path, strerror(errno));
	if (fstat(fd, &sb) < 0 || sb.st_size <= 0) {
		close(fd);
		return hp_error(HP_EFORMAT, "%s: empty stats page", path);
	}
	p = mmap(NULL, (size_t)sb.st_size, PROT_READ, MAP_SHARED, fd, 0);
	close(fd);
	if (p == MAP_FAILED)
		return hp_error(-errno, "%s: cannot map: %s", path, strerror(errno));
	rc = check_header(p, (size_t)sb.st_size, path);
	if (rc == 0) {
		int dead = (kill(pid, 0) < 0 && errno == ESRCH) ||
			   (p->start_time && proc_start_time(pid) != p->start_time);
		out->pid = p->pid;
		out->version = p->version;
		if (dead) {
			/* No writer is left: take the page as it is, even mid-update. */
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
