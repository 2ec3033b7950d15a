/* Compaction of a small frame pool by memcpy (compact.c,
 * hs_frames_compact_for) on layouts built page by page: one-chunk tensors
 * of 2 and 4 pages laid back to back by first fit in a pool of 48 pages
 * (12 chunks of 4), holes made by dropping some, walls by keeping some
 * pinned.  Checked: which window is emptied (the cheapest one whose
 * chunks fit the free stretches outside it whole, not merely the cheapest
 * by count), which chunks the slide moves (only those with free pages
 * above them before the next wall: the others stay), where the free run
 * ends up, that every byte survives, and what hs_store_frame_stats counts
 * for it (compactions, slides, bytes copied, no mremap). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "hpdlf/error.h"
#include "hpdlf/store.h"
#include "store/store_internal.h"
#include "util.h"

#define CS 16384u
#define PAGES 48

/* One unit of a layout: a tensor of `pages` pages, kept (MOVE), dropped
 * (a hole) or left pinned (WALL). */
enum { MOVE, HOLE, WALL };

struct unit {
	unsigned pages, kind;
	struct hs_tensor *t;
};

static void fill(struct hs_tensor *t, uint64_t bytes, unsigned char v)
{
	unsigned char *p;

	assert_int_equal(hs_pin(t, 0, HS_ALL, HS_PIN_OVERWRITE, (void **)&p), 0);
	for (uint64_t i = 0; i < bytes; i++)
		p[i] = (unsigned char)(v + i * 7);
	assert_int_equal(hs_unpin(t, 0, HS_ALL), 0);
}

static void expect(struct hs_store *st, struct hs_tensor *t, uint64_t bytes, unsigned char v)
{
	unsigned char *p;

	assert_int_equal(hs_pin(t, 0, HS_ALL, HS_PIN_READ, (void **)&p), 0);
	assert_ptr_equal(p, hs_frames_home(st->frames, &t->ch[0].one)); /* used where it lies */
	for (uint64_t i = 0; i < bytes; i++)
		if (p[i] != (unsigned char)(v + i * 7))
			fail_msg("byte %llu: %u, not %u", (unsigned long long)i, p[i], (unsigned char)(v + i * 7));
	assert_int_equal(hs_unpin(t, 0, HS_ALL), 0);
}

/* The units laid out from page 0 (they must fill the pool), holes dropped. */
static struct hs_store *layout(struct unit *u, int n)
{
	struct hs_store_opts o;
	struct hs_store *st;
	unsigned page = 0;
	void *p;

	tu_opts(&o, CFG_NVME, CS, PAGES / 4, 256, "compact");
	assert_int_equal(hs_store_open(&o, &st), 0);
	assert_int_equal(hs_frames_runs(st->frames), 1);
	for (int k = 0; k < n; k++) {
		struct hs_tensor_info ti = { .bytes = u[k].pages * 4096ull, .dtype = HP_U8 };
		assert_int_equal(hs_tensor_create(st, &ti, &u[k].t), 0);
		fill(u[k].t, ti.bytes, (unsigned char)k);
		assert_int_equal(u[k].t->ch[0].one.page, page); /* first fit, back to back */
		page += u[k].pages;
	}
	assert_int_equal(page, PAGES);
	for (int k = 0; k < n; k++) {
		if (u[k].kind == HOLE) {
			assert_int_equal(hs_tensor_drop(u[k].t), 0);
			u[k].t = NULL;
		} else if (u[k].kind == WALL) {
			assert_int_equal(hs_pin(u[k].t, 0, HS_ALL, HS_PIN_READ, &p), 0);
		}
	}
	return st;
}

static void finish(struct hs_store *st, struct unit *u, int n)
{
	for (int k = 0; k < n; k++) {
		if (!u[k].t)
			continue;
		if (u[k].kind == WALL)
			assert_int_equal(hs_unpin(u[k].t, 0, HS_ALL), 0);
		expect(st, u[k].t, u[k].pages * 4096ull, (unsigned char)k);
		assert_int_equal(hs_tensor_drop(u[k].t), 0);
	}
	hs_store_close(st);
}

static struct hs_frame_stats frame_stats(struct hs_store *st)
{
	struct hs_frame_stats f = { .size = sizeof f };

	assert_int_equal(hs_store_frame_stats(st, &f), 0);
	assert_int_equal(f.size, sizeof f);
	return f;
}

/* The counters' change from a to b: compactions, slides, bytes copied; by
 * memcpy alone (chunks used where they lie: no mremap). */
static void expect_counted(struct hs_frame_stats a, struct hs_frame_stats b, uint64_t compactions, uint64_t slides,
			   uint64_t bytes)
{
	assert_int_equal(b.compactions - a.compactions, compactions);
	assert_int_equal(b.slides - a.slides, slides);
	assert_int_equal(b.compact_bytes - a.compact_bytes, bytes);
	assert_int_equal(b.mremaps, a.mremaps);
}

static unsigned page_of(const struct unit *u)
{
	return u->t->ch[0].one.page;
}

/* Windows of 6 pages with room by count: [0, 6) (4 pages to move, the
 * first such) and [8, 14) (4 pages too).  The 4-page chunk of [0, 6) fits
 * none of the 2-page holes outside it; the two 2-page chunks of [8, 14)
 * fit two of them.  So [8, 14) is emptied, and nothing slides: before, the
 * evacuation of [0, 6) failed and the pool slid without making a run of 6. */
static void test_window_that_fits(void **state)
{
	struct unit u[] = {
		{ 4, MOVE, NULL }, { 2, HOLE, NULL }, { 2, WALL, NULL }, /* [0,4) [4,6) [6,8) */
		{ 2, MOVE, NULL }, { 2, HOLE, NULL }, { 2, MOVE, NULL }, /* [8,10) [10,12) [12,14) */
		{ 2, WALL, NULL }, { 2, HOLE, NULL }, { 2, WALL, NULL }, /* [14,16) [16,18) [18,20) */
		{ 4, MOVE, NULL }, { 4, MOVE, NULL }, { 4, MOVE, NULL }, { 4, MOVE, NULL },
		{ 4, MOVE, NULL }, { 4, MOVE, NULL }, { 4, MOVE, NULL }, /* [20, 48) */
	};
	int n = (int)(sizeof u / sizeof *u);
	struct hs_store *st = layout(u, n);
	struct hs_frame_stats f0 = frame_stats(st);
	uint64_t page = 0;

	(void)state;
	pthread_mutex_lock(&st->mu);
	assert_int_equal(hs_frames_find_run(st->frames, 6, &page), -ENOMEM);
	assert_int_equal(hs_frames_compact_for(st, 6), 0);
	assert_int_equal(hs_frames_find_run(st->frames, 6, &page), 0);
	assert_int_equal(page, 8);
	pthread_mutex_unlock(&st->mu);
	expect_counted(f0, frame_stats(st), 1, 0, 4 * 4096); /* the two 2-page chunks */
	assert_int_equal(page_of(&u[0]), 0); /* the 4-page chunk stayed */
	assert_int_equal(page_of(&u[3]), 4); /* first fit outside the window */
	assert_int_equal(page_of(&u[5]), 16);
	for (int k = 9; k < n; k++)
		assert_int_equal(page_of(&u[k]), 20 + 4 * (k - 9)); /* no slide */
	finish(st, u, n);
}

/* A window that cuts a free stretch in two: the part outside it is where
 * its chunk goes.  Windows of 8 pages lie in [2, 14) (walls at [0, 2) and
 * [14, 16)): [6, 14) is the cheapest by count (2 pages of C) but C, 4
 * pages, fits no hole outside it ([2, 4) is 2); so is [5, 13).  [2, 10)
 * (C whole, 4 pages) leaves [10, 14) of the stretch [8, 14) outside it,
 * and C fits there: it is emptied, nothing slides. */
static void test_window_cuts_a_stretch(void **state)
{
	struct unit u[] = {
		{ 2, WALL, NULL }, { 2, HOLE, NULL }, { 4, MOVE, NULL }, /* [0,2) [2,4) C [4,8) */
		{ 4, HOLE, NULL }, { 2, HOLE, NULL }, { 2, WALL, NULL }, /* [8,12) [12,14) [14,16) */
		{ 4, MOVE, NULL }, { 4, MOVE, NULL }, { 4, MOVE, NULL }, { 4, MOVE, NULL },
		{ 4, MOVE, NULL }, { 4, MOVE, NULL }, { 4, MOVE, NULL }, { 4, MOVE, NULL }, /* [16, 48) */
	};
	int n = (int)(sizeof u / sizeof *u);
	struct hs_store *st = layout(u, n);
	struct hs_frame_stats f0 = frame_stats(st);
	uint64_t page = 0;

	(void)state;
	pthread_mutex_lock(&st->mu);
	assert_int_equal(hs_frames_find_run(st->frames, 8, &page), -ENOMEM);
	assert_int_equal(hs_frames_compact_for(st, 8), 0);
	assert_int_equal(hs_frames_find_run(st->frames, 8, &page), 0);
	assert_int_equal(page, 2);
	pthread_mutex_unlock(&st->mu);
	expect_counted(f0, frame_stats(st), 1, 0, 4 * 4096); /* C alone */
	assert_int_equal(page_of(&u[2]), 10); /* the stretch's part outside the window */
	for (int k = 6; k < n; k++)
		assert_int_equal(page_of(&u[k]), 16 + 4 * (k - 6)); /* no slide */
	finish(st, u, n);
}

/* No window of 6 pages has chunks that fit the 2-page holes, so the pool
 * slides.  In [0, 16) (walled at [16, 20)) the last free page is 11: B
 * moves down onto A, the free pages gather at [8, 12), and C, with no free
 * page above it, stays at [12, 16).  In [20, 48) the only hole is [24, 26):
 * the chunks above it stay where they are (before, all five moved down by
 * two pages, for the same run of 2). */
static void test_slide_keeps_the_top(void **state)
{
	struct unit u[] = {
		{ 4, MOVE, NULL }, { 2, HOLE, NULL }, { 4, MOVE, NULL }, /* A [0,4) [4,6) B [6,10) */
		{ 2, HOLE, NULL }, { 4, MOVE, NULL }, { 4, WALL, NULL }, /* [10,12) C [12,16) [16,20) */
		{ 4, MOVE, NULL }, { 2, HOLE, NULL }, { 4, MOVE, NULL }, /* D [20,24) [24,26) E [26,30) */
		{ 4, MOVE, NULL }, { 4, MOVE, NULL }, { 4, MOVE, NULL }, /* [30,42) */
		{ 4, MOVE, NULL }, { 2, MOVE, NULL },                    /* [42,48) */
	};
	int n = (int)(sizeof u / sizeof *u);
	struct hs_store *st = layout(u, n);
	struct hs_frame_stats f0 = frame_stats(st);
	uint64_t page = 0;

	(void)state;
	pthread_mutex_lock(&st->mu);
	assert_int_equal(hs_frames_compact_for(st, 6), 0); /* slid: the caller looks again */
	assert_int_equal(hs_frames_find_run(st->frames, 6, &page), -ENOMEM);
	assert_int_equal(hs_frames_find_run(st->frames, 4, &page), 0);
	assert_int_equal(page, 8);
	pthread_mutex_unlock(&st->mu);
	expect_counted(f0, frame_stats(st), 1, 1, 4 * 4096); /* B alone moved */
	assert_int_equal(page_of(&u[0]), 0);
	assert_int_equal(page_of(&u[2]), 4);  /* B slid onto A */
	assert_int_equal(page_of(&u[4]), 12); /* C stayed */
	assert_int_equal(page_of(&u[6]), 20);
	for (int k = 8, at = 26; k < n; at += (int)u[k].pages, k++)
		assert_int_equal(page_of(&u[k]), at); /* above the last hole: stayed */
	finish(st, u, n);
}

/* The size convention: 0 is refused, a short struct gets only its part. */
static void test_frame_stats_size(void **state)
{
	struct unit u[] = { { 48, MOVE, NULL } };
	struct hs_store *st = layout(u, 1);
	struct hs_frame_stats f = { 0 };
	struct { size_t size; uint64_t mremaps, rest; } part = { sizeof(size_t) + sizeof(uint64_t), 7, 99 };

	(void)state;
	f.compactions = 5;
	assert_int_equal(hs_store_frame_stats(st, &f), HP_EUSAGE);
	assert_int_equal(f.compactions, 5);
	assert_int_equal(hs_store_frame_stats(st, (struct hs_frame_stats *)&part), 0);
	assert_int_equal(part.size, sizeof(size_t) + sizeof(uint64_t));
	assert_int_equal(part.mremaps, 0); /* one chunk used where it lies: never moved */
	assert_int_equal(part.rest, 99);
	finish(st, u, 1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_window_that_fits),
		cmocka_unit_test(test_window_cuts_a_stretch),
		cmocka_unit_test(test_slide_keeps_the_top),
		cmocka_unit_test(test_frame_stats_size),
	};
	int rc;

	rc = cmocka_run_group_tests(tests, NULL, NULL);
	tu_cleanup();
	return rc;
}
