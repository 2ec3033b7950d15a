/* The DRAM frame pool: the buddy allocator against a page-ownership model
 * (no overlap, exact sizes, everything coalesces back), full chunks as one
 * aligned piece, exhaustion, mapping the same frames at two places, and the
 * batched unmap queue. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "hpdlf/error.h"
#include "store/frames.h"
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

static void test_map_and_unmap(void **state)
{
	struct hs_frames *f;
	struct alloc a = { .pages = CP };
	unsigned char *r1 = mmap(NULL, 2 * CHUNK, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
				 -1, 0);
	unsigned char *r2 = r1 + CHUNK;
	uint32_t ref1 = 0, ref2 = 0;
	uint64_t off = 1;

	(void)state;
	assert_int_equal(hs_frames_create(POOL, CHUNK, on_grow, NULL, &f), 0);
	assert_int_equal(hs_frames_alloc(f, CP, &a.one, &a.many, &a.n), 0);
	assert_int_equal(grown_calls, 1);
	assert_int_equal(hs_frames_slot(f, &a.one, 1, &off), 1);
	assert_int_equal(off, (uint64_t)a.one.page * HS_PAGE);
	assert_int_equal(hs_frames_map(f, r1, &a.one, 1), 0);
	assert_int_equal(r1[0], 0x11); /* the pages the slab callback saw */
	assert_int_equal(hs_frames_map(f, r2, &a.one, 1), 0);
	memset(r1, 0x5a, CHUNK);
	assert_int_equal(r2[CHUNK - 1], 0x5a); /* same frames, two places */
	hs_frames_queue_unmap(f, r1, CHUNK, &ref1);
	hs_frames_queue_unmap(f, r2, CHUNK, &ref2);
	assert_int_equal(ref1, 1);
	assert_int_equal(ref2, 2);
	hs_frames_unqueue(f, &ref1); /* r1 taken back: stays mapped */
	assert_int_equal(ref1, 0);
	assert_int_equal(ref2, 1);
	hs_frames_flush(f);
	assert_int_equal(ref2, 0);
	assert_int_equal(r2[0], 0);     /* reserved again: fresh zero memory */
	assert_int_equal(r1[0], 0x5a);
	hs_frames_free(f, &a.one, a.many, a.n);
	hs_frames_destroy(f);
	munmap(r1, 2 * CHUNK);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_buddy_random),
		cmocka_unit_test(test_buddy_pieces),
		cmocka_unit_test(test_map_and_unmap),
	};

	seed = tu_seed("test_frames");
	return cmocka_run_group_tests(tests, NULL, NULL);
}
