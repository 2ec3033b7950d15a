/* Stretches (store.c, next_take / hs_chunks_map / hs_chunk_detach_stretch):
 * a tensor of several chunks that finds no run in a small pool takes its
 * chunks back to back in the longest free stretches, and is moved into its
 * range, and home again once discarded, one mremap per stretch instead of
 * one per chunk.  The pool of 12 chunks of 4 pages is cut by one pinned
 * chunk at pages [16, 20): free are [0, 16) and [20, 48), so a tensor of 8
 * chunks (32 pages) has no run and lies in two stretches, 7 chunks then 1.
 * Every byte survives pins, reuse of its discarded frames, write-back and
 * read-back; a random churn of such tensors checks the bytes against a
 * reference copy. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "hpdlf/store.h"
#include "store/store_internal.h"
#include "util.h"

#define CS 16384u

static uint64_t seed;

static void fill(struct hs_tensor *t, uint64_t bytes, unsigned char v)
{
	unsigned char *p;

	assert_int_equal(hs_pin(t, 0, HS_ALL, HS_PIN_OVERWRITE, (void **)&p), 0);
	for (uint64_t i = 0; i < bytes; i++)
		p[i] = (unsigned char)(v + i * 5);
	assert_int_equal(hs_unpin(t, 0, HS_ALL), 0);
}

static void expect(struct hs_tensor *t, uint64_t bytes, unsigned char v)
{
	unsigned char *p;

	assert_int_equal(hs_pin(t, 0, HS_ALL, HS_PIN_READ, (void **)&p), 0);
	for (uint64_t i = 0; i < bytes; i++)
		if (p[i] != (unsigned char)(v + i * 5))
			fail_msg("byte %llu: %u, not %u", (unsigned long long)i, p[i], (unsigned char)(v + i * 5));
	assert_int_equal(hs_unpin(t, 0, HS_ALL), 0);
}

/* A store whose pool is cut at [16, 20) by the pinned one-chunk *cut. */
static struct hs_store *cut_pool(struct hs_tensor **cut)
{
	struct hs_store_opts o;
	struct hs_store *st;
	struct hs_tensor *a[12];
	struct hs_tensor_info ti = { .bytes = CS, .dtype = HP_U8 };
	void *p;

	tu_opts(&o, CFG_NVME, CS, 12, 256, "stretch");
	assert_int_equal(hs_store_open(&o, &st), 0);
	assert_int_equal(hs_frames_runs(st->frames), 1);
	for (int k = 0; k < 12; k++) {
		assert_int_equal(hs_tensor_create(st, &ti, &a[k]), 0);
		assert_int_equal(hs_pin(a[k], 0, HS_ALL, HS_PIN_OVERWRITE, &p), 0);
		assert_int_equal(a[k]->ch[0].one.page, 4 * k); /* first fit */
	}
	for (int k = 0; k < 12; k++)
		if (k != 4) {
			assert_int_equal(hs_unpin(a[k], 0, HS_ALL), 0);
			assert_int_equal(hs_tensor_drop(a[k]), 0);
		}
	*cut = a[4];
	return st;
}

static void test_stretch_pin(void **state)
{
	struct hs_tensor *cut, *b, *c;
	struct hs_tensor_info ti = { .bytes = 8 * CS - 300, .dtype = HP_U8 };
	struct hs_store *st = cut_pool(&cut);
	uint64_t m0;

	(void)state;
	assert_int_equal(hs_tensor_create(st, &ti, &b), 0);
	assert_int_equal(hs_tensor_create(st, &ti, &c), 0);
	m0 = hs_frames_moves(st->frames);
	fill(b, ti.bytes, 1);
	assert_int_equal(b->run, 0); /* no run of 32 pages */
	for (int i = 0; i < 7; i++) /* the longest stretch, back to back */
		assert_int_equal(b->ch[i].one.page, 20 + 4 * i);
	assert_int_equal(b->ch[7].one.page, 0);
	assert_int_equal(hs_frames_moves(st->frames) - m0, 2); /* one mremap per stretch, not 8 */
	expect(b, ti.bytes, 1);

	/* discarded, it keeps its frames: pinned again, nothing moves */
	assert_int_equal(hs_tensor_discard(b, 0, HS_ALL), 0);
	m0 = hs_frames_moves(st->frames);
	fill(b, ti.bytes, 2);
	assert_int_equal(hs_frames_moves(st->frames), m0);
	expect(b, ti.bytes, 2);

	/* c needs b's discarded frames: they go home a stretch at a time (2),
	 * and c's come in the same way (2): 16 mremaps chunk by chunk */
	assert_int_equal(hs_tensor_discard(b, 0, HS_ALL), 0);
	m0 = hs_frames_moves(st->frames);
	fill(c, ti.bytes, 3);
	assert_int_equal(hs_frames_moves(st->frames) - m0, 4);
	for (int i = 0; i < 8; i++)
		assert_int_equal(b->ch[i].npieces, 0);
	expect(c, ti.bytes, 3);

	/* written back and read again: the bytes survive */
	assert_int_equal(hs_evict(c, 0, HS_ALL, HS_TIER_ANY), 8);
	fill(b, ti.bytes, 4);
	expect(c, ti.bytes, 3);
	expect(b, ti.bytes, 4);
	assert_int_equal(hs_store_check(st), 0);
	assert_int_equal(hs_tensor_drop(b), 0);
	assert_int_equal(hs_tensor_drop(c), 0);
	assert_int_equal(hs_unpin(cut, 0, HS_ALL), 0);
	assert_int_equal(hs_tensor_drop(cut), 0);
	hs_store_close(st);
}

/* Random pins, discards, evictions, prefetches of tensors of 2-9 chunks
 * around the cut; each tensor's bytes are checked against what was
 * written last. */
static void test_stretch_churn(void **state)
{
	struct hs_tensor *cut, *t[5];
	struct hs_store *st = cut_pool(&cut);
	uint64_t s = seed, bytes[5];
	int gen[5];

	(void)state;
	for (int k = 0; k < 5; k++) {
		struct hs_tensor_info ti = { .bytes = (2 + tu_rand(&s) % 8) * CS - tu_rand(&s) % 4096, .dtype = HP_U8 };
		bytes[k] = ti.bytes;
		assert_int_equal(hs_tensor_create(st, &ti, &t[k]), 0);
		fill(t[k], bytes[k], (unsigned char)(gen[k] = k));
	}
	for (int round = 0; round < 600; round++) {
		int k = (int)(tu_rand(&s) % 5), op = (int)(tu_rand(&s) % 5);
		struct hs_prefetch *pf;
		if (op == 0) {
			assert_true(hs_evict(t[k], 0, HS_ALL, HS_TIER_ANY) >= 0);
		} else if (op == 1) {
			assert_int_equal(hs_prefetch(t[k], 0, HS_ALL, &pf), 0);
			assert_int_equal(hs_prefetch_wait(pf), 0);
		} else if (op == 2) {
			assert_int_equal(hs_tensor_discard(t[k], 0, HS_ALL), 0);
			fill(t[k], bytes[k], (unsigned char)(gen[k] = round));
		} else {
			expect(t[k], bytes[k], (unsigned char)gen[k]);
		}
	}
	for (int k = 0; k < 5; k++) {
		expect(t[k], bytes[k], (unsigned char)gen[k]);
		assert_int_equal(hs_tensor_drop(t[k]), 0);
	}
	assert_int_equal(hs_store_check(st), 0);
	assert_int_equal(hs_unpin(cut, 0, HS_ALL), 0);
	assert_int_equal(hs_tensor_drop(cut), 0);
	hs_store_close(st);
}

/* hs_frames_stretch against a brute-force reference: pools of 48-300
 * pages with random pages taken; for each alignment and want, every
 * aligned page that starts its stretch's aligned part is a candidate of
 * (consecutive free pages from it) pages, at least `align`; the shortest
 * holding `want`, else the longest, first in the pool on ties. */
static void test_stretch_pick(void **state)
{
	uint64_t s = seed;

	(void)state;
	for (int round = 0; round < 300; round++) {
		uint64_t pages = 48 + tu_rand(&s) % 253, align = 1ull << (tu_rand(&s) % 4), page = 0;
		struct hs_frames *f;
		assert_int_equal(hs_frames_create(pages * HS_PAGE, CS, NULL, NULL, &f), 0);
		assert_int_equal(hs_frames_runs(f), 1);
		for (uint64_t p = 0; p < pages; p++)
			if (tu_rand(&s) % 3 == 0)
				assert_int_equal(hs_frames_take(f, p, 1), 0);
		uint64_t want = 1 + tu_rand(&s) % 40, best = 0, at = 0;
		for (uint64_t a = 0; a < pages; a += align) {
			if (!hs_frames_is_free(f, a))
				continue;
			uint64_t first = a; /* the stretch's first free page */
			while (first > 0 && hs_frames_is_free(f, first - 1))
				first--;
			if ((first + align - 1) / align * align != a)
				continue; /* not the stretch's first aligned page */
			uint64_t n = 0;
			while (a + n < pages && hs_frames_is_free(f, a + n))
				n++;
			if (n < align)
				continue;
			int better = best >= want ? (n >= want && n < best) : n > best;
			if (better) {
				best = n;
				at = a;
			}
		}
		uint64_t got = hs_frames_stretch(f, want, align, &page);
		assert_int_equal(got, best);
		if (best)
			assert_int_equal(page, at);
		hs_frames_destroy(f);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_stretch_pick),
		cmocka_unit_test(test_stretch_pin),
		cmocka_unit_test(test_stretch_churn),
	};
	int rc;

	seed = tu_seed("store_stretch");
	rc = cmocka_run_group_tests(tests, NULL, NULL);
	tu_cleanup();
	return rc;
}
