/* The DRAM frame pool: the buddy allocator against a page-ownership model
 * (no overlap, exact sizes, everything coalesces back), full chunks as one
 * aligned piece, exhaustion; pages moving between tensor ranges with their
 * bytes, huge pages staying huge, fixed-buffer I/O reaching pages moved
 * after their registration, and the queue of emptied ranges. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "hpdlf/error.h"
#include "store/frames.h"
#include "store/tier.h"
#include "store/tier_uring.h"
#include "util.h"

#define POOL (8u << 20)
#define CHUNK (256u << 10)
#define CP (CHUNK / HS_PAGE)

static uint64_t seed;

struct alloc {
	struct hs_piece one, *many;
	uint32_t n;
	uint64_t pages;
};

static const struct hs_piece *pieces(const struct alloc *a)
{
	return a->n > 1 ? a->many : &a->one;
}

/* Mark (or clear) the pages of a in owner[], checking ownership. */
static void own(int *owner, const struct alloc *a, int who)
{
	uint64_t total = 0;

	for (uint32_t i = 0; i < a->n; i++) {
		const struct hs_piece *p = &pieces(a)[i];
		assert_true(p->n > 0);
		assert_true((uint64_t)p->page + p->n <= POOL / HS_PAGE);
		for (uint32_t k = 0; k < p->n; k++) {
			int *o = &owner[p->page + k];
			if (who >= 0) {
				assert_int_equal(*o, -1); /* never handed out twice */
				*o = who;
			} else {
				*o = -1;
			}
		}
		total += p->n;
	}
	assert_int_equal(total, a->pages);
}

static void test_buddy_random(void **state)
{
	struct hs_frames *f;
	struct alloc a[64] = { 0 };
	int *owner = malloc(POOL / HS_PAGE * sizeof *owner);
	uint64_t s = seed, used = 0;

	(void)state;
	for (unsigned i = 0; i < POOL / HS_PAGE; i++)
		owner[i] = -1;
	assert_int_equal(hs_frames_create(POOL, CHUNK, NULL, NULL, &f), 0);
	for (int step = 0; step < 20000; step++) {
		int k = (int)(tu_rand(&s) % 64);
		if (a[k].n) {
			own(owner, &a[k], -1);
			hs_frames_free(f, &a[k].one, a[k].many, a[k].n);
			used -= a[k].pages;
			a[k].n = 0;
			continue;
		}
		uint64_t np = tu_rand(&s) % 3 ? 1 + tu_rand(&s) % CP : CP; /* tails and full chunks */
		if (used + np > POOL / HS_PAGE)
			continue;
		a[k].pages = np;
		assert_int_equal(hs_frames_alloc(f, np, &a[k].one, &a[k].many, &a[k].n), 0);
		own(owner, &a[k], k);
		used += np;
		assert_int_equal(hs_frames_grown(f) - hs_frames_free_bytes(f), used * HS_PAGE);
	}
	for (int k = 0; k < 64; k++)
		if (a[k].n)
			hs_frames_free(f, &a[k].one, a[k].many, a[k].n);
	/* everything coalesced: the pool is whole chunks again, one aligned piece each */
	assert_int_equal(hs_frames_free_bytes(f), POOL);
	for (unsigned k = 0; k < POOL / CHUNK; k++) {
		struct alloc c = { .pages = CP };
		assert_int_equal(hs_frames_alloc(f, CP, &c.one, &c.many, &c.n), 0);
		assert_int_equal(c.n, 1);
		assert_int_equal(c.one.page % CP, 0);
	}
	struct alloc x;
	assert_int_equal(hs_frames_alloc(f, 1, &x.one, &x.many, &x.n), -ENOMEM); /* exhausted */
	assert_non_null(strstr(hp_errmsg(), "frame pool"));
	hs_frames_destroy(f);
	free(owner);
}

/* First n pages in a row that owner[] says are free (-1 if none). */
static int64_t model_run(const int *owner, uint64_t pages, uint64_t n)
{
	for (uint64_t s = 0, len = 0; s < pages; s++) {
		len = owner[s] < 0 ? len + 1 : 0;
		if (len == n)
			return (int64_t)(s + 1 - n);
	}
	return -1;
}

/* Free a[0..n) and check that the pool of `pool` bytes coalesced back
 * into whole chunks, one piece each. */
static void free_all_whole(struct hs_frames *f, struct alloc *a, int n, uint64_t pool)
{
	for (int k = 0; k < n; k++)
		if (a[k].n)
			hs_frames_free(f, &a[k].one, a[k].many, a[k].n);
	assert_int_equal(hs_frames_free_bytes(f), pool);
	for (unsigned k = 0; k < pool / CHUNK; k++) {
		struct alloc c;
		assert_int_equal(hs_frames_alloc(f, CP, &c.one, &c.many, &c.n), 0);
		assert_int_equal(c.n, 1);
	}
	hs_frames_destroy(f);
}

/* Runs (frames.h): against the page-ownership model, under random
 * allocations of the buddy allocator, hs_frames_find_run names the first
 * n free pages in a row (across block boundaries) or none when there are
 * none, hs_frames_is_free says which pages are free, and hs_frames_take
 * takes exactly a range that is all free (refusing one that is not,
 * nothing taken); taken ranges free back as one piece and everything
 * coalesces at the end. */
static void test_runs_take(void **state)
{
	struct hs_frames *f;
	struct alloc a[48] = { 0 };
	const uint64_t pool = 4u << 20, largest = 32u << 20; /* the largest pool that keeps runs */
	uint64_t pages = pool / HS_PAGE, s = seed, runs_found = 0, refused = 0;
	int *owner = malloc(pages * sizeof *owner);

	(void)state;
	for (uint64_t i = 0; i < pages; i++)
		owner[i] = -1;
	assert_int_equal(hs_frames_create(2 * largest, CHUNK, NULL, NULL, &f), 0);
	assert_int_equal(hs_frames_runs(f), 0); /* 64 MiB: page-by-page searches too long */
	hs_frames_destroy(f);
	assert_int_equal(hs_frames_create(largest, CHUNK, NULL, NULL, &f), 0);
	assert_int_equal(hs_frames_runs(f), 1);
	hs_frames_destroy(f);
	assert_int_equal(hs_frames_create(pool, CHUNK, NULL, NULL, &f), 0);
	assert_int_equal(hs_frames_runs(f), 1);
	for (int step = 0; step < 6000; step++) {
		int k = (int)(tu_rand(&s) % 48);
		uint64_t n = 1 + tu_rand(&s) % (3 * CP), at;
		if (a[k].n) {
			own(owner, &a[k], -1);
			hs_frames_free(f, &a[k].one, a[k].many, a[k].n);
			a[k].n = 0;
			continue;
		}
		int64_t want = model_run(owner, pages, n);
		int rc = hs_frames_find_run(f, n, &at);
		assert_int_equal(rc, want < 0 ? -ENOMEM : 0);
		if (want >= 0)
			assert_int_equal(at, (uint64_t)want);
		if (tu_rand(&s) % 2 && rc == 0) { /* take the run found */
			runs_found++;
			assert_int_equal(hs_frames_take(f, at, n), 0);
			a[k] = (struct alloc){ .one = { (uint32_t)at, (uint32_t)n }, .n = 1, .pages = n };
		} else if (tu_rand(&s) % 2) { /* take a random range: all free or refused */
			at = tu_rand(&s) % (pages - n);
			int free_all = 1;
			for (uint64_t q = at; q < at + n; q++)
				free_all &= owner[q] < 0;
			assert_int_equal(hs_frames_take(f, at, n), free_all ? 0 : -ENOMEM);
			refused += !free_all;
			if (!free_all)
				continue;
			a[k] = (struct alloc){ .one = { (uint32_t)at, (uint32_t)n }, .n = 1, .pages = n };
		} else {
			a[k].pages = n > CP ? CP : n;
			if (hs_frames_alloc(f, a[k].pages, &a[k].one, &a[k].many, &a[k].n) < 0) {
				a[k].n = 0;
				continue;
			}
		}
		own(owner, &a[k], k);
		for (uint64_t q = 0; q < pages; q += 1 + tu_rand(&s) % 7)
			assert_int_equal(hs_frames_is_free(f, q), owner[q] < 0);
	}
	assert_true(runs_found > 100 && refused > 100);
	free_all_whole(f, a, 48, pool);
	free(owner);
}

/* Fragmented free space still serves a request, as several pieces. */
static void test_buddy_pieces(void **state)
{
	struct hs_frames *f;
	struct alloc a[POOL / HS_PAGE / 2];
	unsigned n = POOL / HS_PAGE / 2;

	(void)state;
	assert_int_equal(hs_frames_create(POOL, CHUNK, NULL, NULL, &f), 0);
	for (unsigned i = 0; i < n; i++) /* pairs of pages: free every other one */
		assert_int_equal(hs_frames_alloc(f, 2, &a[i].one, &a[i].many, &a[i].n), 0);
	for (unsigned i = 0; i < n; i++) { /* pairs at 4k: their buddies stay taken */
		assert_int_equal(a[i].n, 1);
		if (a[i].one.page % 4 == 0)
			hs_frames_free(f, &a[i].one, a[i].many, a[i].n);
	}
	struct alloc big = { .pages = CP };
	assert_int_equal(hs_frames_alloc(f, CP, &big.one, &big.many, &big.n), 0);
	assert_int_equal(big.n, CP / 2); /* no two free pairs are adjacent */
	uint64_t total = 0;
	for (uint32_t i = 0; i < big.n; i++)
		total += big.many[i].n;
	assert_int_equal(total, CP);
	uint64_t off;
	assert_int_equal(hs_frames_slot(f, big.many, big.n, &off), 0); /* no fixed buffer for pieces */
	hs_frames_free(f, &big.one, big.many, big.n);
	hs_frames_destroy(f);
}

static int grown_calls;

static void on_grow(void *arg, unsigned slot, void *addr, size_t len)
{
	(void)arg;
	assert_int_equal(slot, grown_calls);
	memset(addr, 0x11, len); /* the region is mapped during the call */
	grown_calls++;
}

static unsigned char *reserve(size_t len)
{
	unsigned char *p = hs_frames_reserve(len);

	assert_non_null(p);
	return p;
}

/* Pages move: the bytes follow them from one range to another, the range
 * they left reads as fresh zeros, and the queue of emptied ranges. */
static void test_map_and_unmap(void **state)
{
	struct hs_frames *f;
	struct alloc a = { .pages = CP };
	unsigned char *r1 = reserve(2 * CHUNK), *r2 = r1 + CHUNK;
	uint32_t ref1 = 0, ref2 = 0;
	uint64_t off = 1;

	(void)state;
	grown_calls = 0;
	assert_int_equal(hs_frames_create(POOL, CHUNK, on_grow, NULL, &f), 0);
	assert_int_equal(hs_frames_alloc(f, CP, &a.one, &a.many, &a.n), 0);
	assert_int_equal(grown_calls, 1);
	assert_int_equal(hs_frames_slot(f, &a.one, 1, &off), 1);
	assert_int_equal(off, (uint64_t)a.one.page * HS_PAGE);
	assert_int_equal(hs_frames_map(f, r1, &a.one, 1), 0);
	assert_int_equal(r1[0], 0x11); /* the pages the slab callback saw */
	assert_int_equal(r1[CHUNK - 1], 0x11);
	memset(r1, 0x5a, CHUNK);
	assert_int_equal(hs_frames_unmap(f, r1, &a.one, 1, &ref1), 0);
	assert_int_equal(ref1, 1);
	assert_int_equal(hs_frames_map(f, r2, &a.one, 1), 0);
	for (size_t i = 0; i < CHUNK; i += 511)
		assert_int_equal(r2[i], 0x5a); /* same pages, moved */
	assert_int_equal(r1[0], 0); /* the range they left: empty */
	assert_int_equal(hs_frames_unmap(f, r2, &a.one, 1, &ref2), 0);
	assert_int_equal(ref2, 2);
	hs_frames_unqueue(f, &ref1); /* r1 taken back */
	assert_int_equal(ref1, 0);
	assert_int_equal(ref2, 1);
	hs_frames_flush(f);
	assert_int_equal(ref2, 0);
	assert_int_equal(r2[0], 0); /* reserved again: fresh zero memory */
	assert_int_equal(hs_frames_map(f, r1, &a.one, 1), 0); /* over the unqueued empty range */
	assert_int_equal(r1[CHUNK / 2], 0x5a);
	assert_int_equal(hs_frames_unmap(f, r1, &a.one, 1, &ref1), 0);
	hs_frames_free(f, &a.one, a.many, a.n);
	hs_frames_destroy(f);
	munmap(r1, 2 * CHUNK);
}

/* A chunk of several pieces: mapped contiguously in piece order, and each
 * piece's bytes stay with its pages through a move home and out again. */
static void test_map_pieces(void **state)
{
	struct hs_frames *f;
	struct alloc a[POOL / HS_PAGE / 2], big = { .pages = CP };
	unsigned n = POOL / HS_PAGE / 2;
	unsigned char *r = reserve(2 * CHUNK), *q = r + CHUNK;
	uint32_t ref = 0;

	(void)state;
	assert_int_equal(hs_frames_create(POOL, CHUNK, NULL, NULL, &f), 0);
	for (unsigned i = 0; i < n; i++)
		assert_int_equal(hs_frames_alloc(f, 2, &a[i].one, &a[i].many, &a[i].n), 0);
	for (unsigned i = 0; i < n; i++)
		if (a[i].one.page % 4 == 0)
			hs_frames_free(f, &a[i].one, a[i].many, a[i].n);
	assert_int_equal(hs_frames_alloc(f, CP, &big.one, &big.many, &big.n), 0);
	assert_true(big.n > 1);
	assert_int_equal(hs_frames_map(f, r, big.many, big.n), 0);
	for (uint32_t i = 0, pg = 0; i < big.n; pg += big.many[i++].n)
		memset(r + (size_t)pg * HS_PAGE, (int)(big.many[i].page & 0xff), (size_t)big.many[i].n * HS_PAGE);
	assert_int_equal(hs_frames_unmap(f, r, big.many, big.n, &ref), 0);
	for (uint32_t i = big.n; i-- > 0;) { /* one piece at a time, last first, at q */
		size_t len = (size_t)big.many[i].n * HS_PAGE;
		uint32_t rq = 0;
		assert_int_equal(hs_frames_map(f, q, &big.many[i], 1), 0);
		assert_int_equal(q[0], big.many[i].page & 0xff);
		assert_int_equal(q[len - 1], big.many[i].page & 0xff);
		assert_int_equal(hs_frames_unmap(f, q, &big.many[i], 1, &rq), 0);
		hs_frames_unqueue(f, &rq);
	}
	hs_frames_unqueue(f, &ref);
	hs_frames_free(f, &big.one, big.many, big.n);
	hs_frames_destroy(f);
	munmap(r, 2 * CHUNK);
}

/* AnonHugePages of the mappings overlapping [p, p + len), in KiB. */
static long huge_kb(const void *p, size_t len)
{
	char line[512];
	unsigned long s, e;
	long kb, total = 0;
	int in = 0;
	FILE *fp = fopen("/proc/self/smaps", "r");

	while (fp && fgets(line, sizeof line, fp)) {
		if (sscanf(line, "%lx-%lx ", &s, &e) == 2 && strchr(line, '-') < strchr(line, ' '))
			in = s < (uintptr_t)p + len && e > (uintptr_t)p;
		else if (in && sscanf(line, "AnonHugePages: %ld", &kb) == 1)
			total += kb;
	}
	if (fp)
		fclose(fp);
	return total;
}

static void *slab_addr;

static void keep_addr(void *arg, unsigned slot, void *addr, size_t len)
{
	(void)arg;
	(void)slot;
	(void)len;
	slab_addr = addr;
}

/* When the kernel gave the pool huge pages, a 4 MiB chunk moves into a
 * tensor range as huge pages (two page-table entries: one block request). */
static void test_huge_pages_move_whole(void **state)
{
	const size_t cs = 4u << 20, pool = 16u << 20;
	struct hs_frames *f;
	struct alloc a = { .pages = cs / HS_PAGE };
	unsigned char *r = reserve(2 * cs);
	uint32_t ref = 0;

	(void)state;
	assert_int_equal((uintptr_t)r % (2u << 20), 0);
	assert_int_equal(hs_frames_create(pool, cs, keep_addr, NULL, &f), 0);
	assert_int_equal(hs_frames_alloc(f, cs / HS_PAGE, &a.one, &a.many, &a.n), 0);
	assert_int_equal(a.n, 1);
	long home = huge_kb(slab_addr, pool); /* the pool is one mapping */
	assert_int_equal(hs_frames_map(f, r + cs, &a.one, 1), 0);
	if (home == (long)(pool >> 10)) /* all huge: the chunk must arrive huge */
		assert_int_equal(huge_kb(r + cs, cs), cs >> 10);
	else
		fprintf(stderr, "test_frames: %ld KiB of the %zu KiB pool in huge pages here\n", home, pool >> 10);
	assert_int_equal(hs_frames_unmap(f, r + cs, &a.one, 1, &ref), 0);
	assert_int_equal(huge_kb(slab_addr, pool), home); /* and go home huge */
	hs_frames_free(f, &a.one, a.many, a.n);
	hs_frames_destroy(f);
	munmap(r, 2 * cs);
}

/* Fixed buffers follow the pages: the nvme tier registers the pool's slabs,
 * then reads and writes land in (come from) pages moved into a tensor range
 * after the registration, through the registered address. */
struct reg {
	struct hs_tier *t;
	int ok;
};

static void reg_grow(void *arg, unsigned slot, void *addr, size_t len)
{
	struct reg *g = arg;

	g->ok = g->t->ops->register_mem(g->t, slot, addr, len) == 0;
}

static void test_fixed_io_follows_pages(void **state)
{
	char path[512];
	struct hs_tier_config cfg = { .name = "nvme0", .path = path, .capacity = 8u << 20, .reserved = 8192,
				      .flags = HS_TIER_F_CREATE };
	struct reg g = { 0 };
	struct hs_frames *f;
	struct alloc a = { .pages = CP };
	unsigned char *r = reserve(2 * CHUNK), *buf = aligned_alloc(HS_PAGE, CHUNK);
	uint64_t s = seed, off;
	uint32_t ref = 0;

	(void)state;
	snprintf(path, sizeof path, "%s", tu_path(tu_disk_dir(), "frames.nvme"));
	assert_int_equal(hs_tier_nvme_open(&cfg, &g.t), 0);
	assert_int_equal(hs_frames_create(POOL, CHUNK, reg_grow, &g, &f), 0);
	assert_int_equal(hs_frames_alloc(f, CP, &a.one, &a.many, &a.n), 0);
	if (!g.ok) {
		fprintf(stderr, "test_frames: no fixed buffers here (RLIMIT_MEMLOCK?)\n");
		assert_true(geteuid() != 0);
		goto out;
	}
	for (size_t i = 0; i < CHUNK; i++)
		buf[i] = (unsigned char)tu_rand(&s);
	assert_int_equal(hs_tier_rw(g.t, HS_IO_WRITE, 8192, buf, CHUNK), 0);
	assert_int_equal(hs_frames_map(f, r + CHUNK, &a.one, 1), 0);
	struct hs_io io = { .op = HS_IO_READ, .addr = 8192, .buf = r + CHUNK, .len = CHUNK };
	io.mem_slot = hs_frames_slot(f, &a.one, 1, &off);
	io.mem_off = off;
	uint64_t fixed0 = hs_tier_nvme_fixed_ios(g.t);
	assert_int_equal(hs_tier_rw_io(g.t, &io), 0);
	assert_int_equal(hs_tier_nvme_fixed_ios(g.t), fixed0 + 1);
	assert_memory_equal(r + CHUNK, buf, CHUNK);
	/* home and out again elsewhere, then written from there */
	assert_int_equal(hs_frames_unmap(f, r + CHUNK, &a.one, 1, &ref), 0);
	assert_int_equal(hs_frames_map(f, r, &a.one, 1), 0);
	for (size_t i = 0; i < CHUNK; i++)
		r[i] ^= 0xa5;
	io = (struct hs_io){ .op = HS_IO_WRITE, .addr = 8192 + CHUNK, .buf = r, .len = CHUNK,
			     .mem_slot = io.mem_slot, .mem_off = off };
	assert_int_equal(hs_tier_rw_io(g.t, &io), 0);
	assert_int_equal(hs_tier_nvme_fixed_ios(g.t), fixed0 + 2);
	memset(buf, 0, CHUNK);
	assert_int_equal(hs_tier_rw(g.t, HS_IO_READ, 8192 + CHUNK, buf, CHUNK), 0);
	assert_memory_equal(buf, r, CHUNK);
	assert_int_equal(hs_frames_unmap(f, r, &a.one, 1, &ref), 0);
out:
	hs_frames_free(f, &a.one, a.many, a.n);
	g.t->ops->close(g.t); /* lets go of the pages before the pool goes */
	hs_frames_destroy(f);
	munmap(r, 2 * CHUNK);
	free(buf);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_buddy_random),
		cmocka_unit_test(test_buddy_pieces),
		cmocka_unit_test(test_runs_take),
		cmocka_unit_test(test_map_and_unmap),
		cmocka_unit_test(test_map_pieces),
		cmocka_unit_test(test_huge_pages_move_whole),
		cmocka_unit_test(test_fixed_io_follows_pages),
	};
	int rc;

	seed = tu_seed("test_frames");
	rc = cmocka_run_group_tests(tests, NULL, NULL);
	tu_cleanup();
	return rc;
}
