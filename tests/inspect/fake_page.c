/* Test-only writer of a statistics page in the documented layout version 1
 * (docs/store-format.md): a header, then struct hs_store_stats under a
 * seqlock.  Stands in for a running hpdlf-exec.
 *
 *   fake_page SEED RATE OUT.json [VERSION]
 *
 * Fills the page with values drawn from SEED, writes them to OUT.json (so
 * the checker compares the inspector's output with what was written, not
 * with what the inspector computes), prints "ready", then keeps rewriting
 * the page every 2 ms: tier 1's bytes_read grows at RATE bytes/s, all else
 * stays fixed.  Runs until killed; the page is never removed (a killed
 * writer leaves a stale page, which is the point).  The page goes where
 * the store puts its own: $HPDLF_STATS_DIR, else /dev/shm/hpdlf-<euid>
 * (made 0700 if missing), created 0600 under a temporary name and renamed. */
#include <fcntl.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "hpdlf/store.h"
#include "tests/inspect/page_dump.h"

struct statpage {
	char magic[8];
	uint32_t version;
	uint32_t header_size;
	uint32_t stats_size;
	int32_t pid;
	uint64_t start_time;
	_Atomic uint64_t seq;
	uint64_t updated_ns;
	uint64_t reserved[4];
	struct hs_store_stats stats;
};

static uint64_t rng;

static uint64_t next(uint64_t lo, uint64_t hi)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return lo + rng % (hi - lo + 1);
}

static uint64_t now_ns(clockid_t c)
{
	struct timespec ts;

	clock_gettime(c, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static uint64_t my_start_time(void)
{
	char line[1024];
	unsigned long long v = 0;
	FILE *f = fopen("/proc/self/stat", "r");

	if (f && fgets(line, sizeof line, f)) {
		char *p = strrchr(line, ')');
		if (!p || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %*u %*u %*d %*d %*d %*d %*d %*d %llu",
				 &v) != 1)
			v = 0;
	}
	if (f)
		fclose(f);
	return v;
}

static void fill(struct hs_store_stats *s)
{
	static const char *names[] = { "dram", "nvme0", "pmem0" };

	memset(s, 0, sizeof *s);
	s->chunk_size = 1ull << next(16, 22);
	s->budget = s->chunk_size * next(64, 4096);
	s->resident = next(0, s->budget);
	s->pinned = next(0, s->resident);
	s->staging = s->chunk_size * next(1, 4);
	s->tensors = next(1, 500);
	s->ntiers = 3;
	for (int k = 0; k < s->ntiers; k++) {
		struct hs_tier_stats *t = &s->tier[k];
		uint64_t *c = &t->capacity;
		snprintf(t->name, sizeof t->name, "%s", names[k]);
		/* capacity .. crc_errors are consecutive uint64_t fields */
		for (uint64_t *p = c; p <= &t->crc_errors; p++)
			*p = next(0, 1ull << next(4, 40));
		t->used = next(0, t->capacity);
		t->prefetch_hits = next(0, t->prefetches);
		t->prefetch_late = next(0, t->prefetches - t->prefetch_hits);
		if (k == 2) /* one tier without requests: unknown ratios and percentiles */
			t->hits = t->misses = t->prefetches = t->prefetch_hits = t->prefetch_late = 0;
		for (int b = 0; k != 2 && b < HS_LAT_BUCKETS; b++)
			t->lat_hist[b] = b >= 3 && b <= 14 ? next(0, 1000) : 0;
	}
}

int main(int argc, char **argv)
{
	char dir[512], path[600], tmp[620];
	const char *env = getenv("HPDLF_STATS_DIR");
	struct statpage *p;
	struct hs_store_stats s;
	uint32_t version = argc > 4 ? (uint32_t)atoi(argv[4]) : 1;
	double rate;
	uint64_t base, t0;
	FILE *f;
	int fd;

	if (argc < 4) {
		fprintf(stderr, "usage: fake_page SEED RATE OUT.json [VERSION]\n");
		return 2;
	}
	rng = strtoull(argv[1], NULL, 10) * 2654435761u + 88172645463325252ull;
	rate = atof(argv[2]);
	fill(&s);
	if (!(f = fopen(argv[3], "w")))
		return 1;
	dump(f, &s, version, rate);
	if (fclose(f))
		return 1;
	if (env && *env)
		snprintf(dir, sizeof dir, "%s", env);
	else
		snprintf(dir, sizeof dir, "/dev/shm/hpdlf-%lu", (unsigned long)geteuid());
	mkdir(dir, 0700);
	snprintf(path, sizeof path, "%s/hpdlf-store.%ld", dir, (long)getpid());
	snprintf(tmp, sizeof tmp, "%s/.hpdlf-store.%ld.fake", dir, (long)getpid());
	fd = open(tmp, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW, 0600);
	if (fd < 0 || ftruncate(fd, sizeof *p) < 0)
		return 1;
	p = mmap(NULL, sizeof *p, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	close(fd);
	if (p == MAP_FAILED)
		return 1;
	p->version = version;
	p->header_size = offsetof(struct statpage, stats);
	p->stats_size = sizeof p->stats;
	p->pid = getpid();
	p->start_time = my_start_time();
	memcpy(p->magic, "HPDLFST\0", 8);
	p->stats = s;
	p->updated_ns = now_ns(CLOCK_REALTIME);
	if (rename(tmp, path) < 0)
		return 1;
	printf("ready\n");
	fflush(stdout);
	base = s.tier[1].bytes_read;
	t0 = now_ns(CLOCK_MONOTONIC);
	for (;;) {
		uint64_t q = atomic_load_explicit(&p->seq, memory_order_relaxed);
		atomic_store_explicit(&p->seq, q + 1, memory_order_relaxed);
		atomic_thread_fence(memory_order_release);
		s.tier[1].bytes_read = base + (uint64_t)(rate * (double)(now_ns(CLOCK_MONOTONIC) - t0) / 1e9);
		p->stats = s;
		p->updated_ns = now_ns(CLOCK_REALTIME);
		atomic_store_explicit(&p->seq, q + 2, memory_order_release);
		usleep(2000);
	}
}
