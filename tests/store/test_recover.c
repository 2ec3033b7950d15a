/* hs_store_recover (issue 23 item 4) over a tier that loses copies on
 * command: a DRAM tier behind the copies/epoch ops of a machine that may
 * die.  Chunks that keep one copy are written anew (a new extent, the same
 * bytes), chunks that lost every copy are read again from their source,
 * dropped, or stop the check naming their tensor, as the callback says;
 * resident chunks are kept and marked for writing.  The lost extents'
 * bytes are overwritten with garbage first, so that a chunk read from the
 * lost copy instead of its source would show. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "hpdlf/error.h"
#include "hpdlf/store.h"
#include "store/store_internal.h"
#include "store/tier.h"
#include "store/tier_dram.h"
#include "util.h"

#define CS 65536u
#define NCH 4

/* The lossy tier: its inner DRAM tier holds the bytes; `lost` and
 * `degraded` name extents (by address) with 0 and 1 of their 2 copies. */
struct lossy {
	struct hs_tier base;
	struct hs_tier *inner;
	uint64_t epoch;
	uint64_t lost[16], degraded[16];
	int nlost, ndegraded;
};

static struct lossy *L;

static void l_close(struct hs_tier *t)
{
	struct lossy *l = (struct lossy *)t;

	l->inner->ops->close(l->inner);
	free(l);
}

static int l_submit(struct hs_tier *t, struct hs_io **ios, int n)
{
	struct hs_tier *in = ((struct lossy *)t)->inner;

	return in->ops->submit(in, ios, n);
}

static int l_stats(struct hs_tier *t, struct hs_tier_stats *st)
{
	struct hs_tier *in = ((struct lossy *)t)->inner;

	return in->ops->stats(in, st);
}

static int l_copies(struct hs_tier *t, uint64_t addr, int *wanted)
{
	struct lossy *l = (struct lossy *)t;

	*wanted = 2;
	for (int i = 0; i < l->nlost; i++)
		if (l->lost[i] == addr)
			return 0;
	for (int i = 0; i < l->ndegraded; i++)
		if (l->degraded[i] == addr)
			return 1;
	return 2;
}

/* The store freed an extent: a later one at its address is a new extent. */
static void forget(uint64_t *list, int *n, uint64_t addr)
{
	for (int i = 0; i < *n; i++)
		if (list[i] == addr)
			list[i--] = list[--*n];
}

static void l_trim(struct hs_tier *t, uint64_t addr, uint64_t len)
{
	struct lossy *l = (struct lossy *)t;

	forget(l->lost, &l->nlost, addr);
	forget(l->degraded, &l->ndegraded, addr);
	if (l->inner->ops->trim)
		l->inner->ops->trim(l->inner, addr, len);
}

static uint64_t l_epoch(struct hs_tier *t)
{
	return ((struct lossy *)t)->epoch;
}

static const struct hs_tier_ops lossy_ops = { .kind = "lossy", .close = l_close, .submit = l_submit,
					      .stats = l_stats, .trim = l_trim, .copies = l_copies,
					      .epoch = l_epoch };

static struct hs_tier *lossy_open(void)
{
	struct hs_tier_config cfg = { .name = "lossy0", .capacity = 64 * CS, .reserved = HS_RESERVED };
	struct lossy *l = calloc(1, sizeof *l);

	assert_non_null(l);
	assert_int_equal(hs_tier_dram_open(&cfg, &l->inner), 0);
	hs_tier_init(&l->base, &lossy_ops, HS_TIER_DRAM, &cfg);
	L = l;
	return &l->base;
}

/* A store of 2 chunks of DRAM over the lossy tier, and tensors a, b, c of
 * NCH chunks each, filled with distinct bytes and all written down. */
static struct hs_store *setup_store(struct hs_tensor **t, unsigned char **data)
{
	struct hs_store_opts o;
	struct hs_store *st;

	hs_store_opts_init(&o, sizeof o);
	o.chunk_size = CS;
	o.budget = 2 * CS;
	o.ntiers = 1;
	o.tiers[0] = (struct hs_tier_spec){ .kind = HS_TIER_DRAM, .tier = lossy_open() };
	assert_int_equal(hs_store_open(&o, &st), 0);
	for (int k = 0; k < 3; k++) {
		char name[8];
		snprintf(name, sizeof name, "%c", 'a' + k);
		struct hs_tensor_info ti = { .bytes = NCH * CS, .dtype = HP_U8, .shape = { 1, { NCH * CS } }, .name = name };
		void *p;
		assert_int_equal(hs_tensor_create(st, &ti, &t[k]), 0);
		data[k] = malloc(NCH * CS);
		for (uint64_t i = 0; i < NCH * CS; i++)
			data[k][i] = (unsigned char)(i * 7 + (uint64_t)k * 31 + i / CS);
		for (uint64_t i = 0; i < NCH; i++) { /* the budget holds 2 chunks */
			assert_int_equal(hs_pin(t[k], i, 1, HS_PIN_OVERWRITE, &p), 0);
			memcpy(p, data[k] + i * CS, CS);
			assert_int_equal(hs_unpin(t[k], i, 1), 0);
			assert_true(hs_evict(t[k], i, 1, 0) >= 0);
		}
	}
	return st;
}

/* Lose chunk i of t: every copy (lost) or one of two (degraded); a lost
 * copy's bytes become garbage. */
static uint64_t lose(struct hs_tensor *t, uint64_t i, int all)
{
	uint64_t a = t->ch[i].addr;

	assert_int_equal(t->ch[i].tier, 0);
	if (all) {
		void *junk;
		assert_int_equal(posix_memalign(&junk, HS_IO_ALIGN, CS), 0);
		memset(junk, 0xEE, CS);
		assert_int_equal(hs_tier_rw(L->inner, HS_IO_WRITE, a, junk, CS), 0);
		free(junk);
		L->lost[L->nlost++] = a;
	} else {
		L->degraded[L->ndegraded++] = a;
	}
	return a;
}

static void check_bytes(struct hs_tensor *t, const unsigned char *want, uint64_t i)
{
	void *p;

	assert_int_equal(hs_pin(t, i, 1, HS_PIN_READ, &p), 0);
	assert_memory_equal(p, want + i * CS, CS);
	assert_int_equal(hs_unpin(t, i, 1), 0);
}

static const char *g_src;

/* a: re-read from its source file; b: dropped; c: lost. */
static int lost_cb(void *arg, const struct hs_tensor *t, struct hs_source *src)
{
	(void)arg;
	if (!strcmp(t->name, "a")) {
		src->path = g_src;
		return HS_LOST_REFILL;
	}
	return !strcmp(t->name, "b") ? HS_LOST_DROP : HS_LOST_FAIL;
}

static void test_recover(void **state)
{
	struct hs_tensor *t[3];
	unsigned char *data[3];
	struct hs_recover_opts ro;
	struct hs_recover_stats rs;
	struct hs_store *st = setup_store(t, data);
	char src[] = "/tmp/hpdlf-recover-src-XXXXXX";
	int fd = mkstemp(src);

	(void)state;
	assert_true(fd >= 0);
	assert_int_equal(write(fd, data[0], NCH * CS), NCH * CS);
	close(fd);
	g_src = src;
	hs_recover_opts_init(&ro, sizeof ro);
	ro.lost = lost_cb;
	/* nothing lost yet: nothing moves */
	assert_int_equal(hs_store_recover(st, &ro, &rs), 0);
	assert_int_equal(rs.rehomed + rs.refilled + rs.dropped + rs.lost, 0);
	lose(t[0], 1, 1);
	lose(t[1], 2, 1);
	lose(t[2], 0, 0);
	lose(t[0], 3, 0);
	L->epoch++;
	assert_int_equal(hs_store_recover(st, &ro, &rs), 0);
	assert_int_equal(rs.refilled, 1);
	assert_int_equal(rs.dropped, 1);
	assert_int_equal(rs.rehomed, 2);
	assert_int_equal(rs.lost, 0);
	/* every lost or degraded extent was freed; b's chunk has no copy */
	assert_int_equal(L->nlost + L->ndegraded, 0);
	assert_int_equal(t[1]->ch[2].tier, NO_TIER);
	/* the bytes: a's from the source (not the garbage), c's from its
	 * surviving copy, b's chunk zeros (dropped), the rest untouched */
	for (uint64_t i = 0; i < NCH; i++) {
		check_bytes(t[0], data[0], i);
		check_bytes(t[2], data[2], i);
	}
	memset(data[1] + 2 * CS, 0, CS);
	for (uint64_t i = 0; i < NCH; i++)
		check_bytes(t[1], data[1], i);
	/* the same epoch again: nothing more to do */
	assert_int_equal(hs_store_recover(st, &ro, &rs), 0);
	assert_int_equal(rs.rehomed, 2);
	unlink(src);
	hs_store_close(st);
	for (int k = 0; k < 3; k++)
		free(data[k]);
}

static void test_lost_names_tensor(void **state)
{
	struct hs_tensor *t[3];
	unsigned char *data[3];
	struct hs_recover_opts ro;
	struct hs_store *st = setup_store(t, data);

	(void)state;
	hs_recover_opts_init(&ro, sizeof ro);
	ro.lost = lost_cb;
	lose(t[2], 1, 1); /* c: neither source nor recomputed */
	L->epoch++;
	int rc = hs_store_recover(st, &ro, NULL);
	assert_true(rc < 0);
	assert_non_null(strstr(hp_errmsg(), "'c'"));
	assert_non_null(strstr(hp_errmsg(), "are lost"));
	/* no callback: every lost chunk stops the check */
	lose(t[1], 0, 1);
	L->epoch++;
	assert_true(hs_store_recover(st, NULL, NULL) < 0);
	assert_non_null(strstr(hp_errmsg(), "'b'"));
	hs_store_close(st);
	for (int k = 0; k < 3; k++)
		free(data[k]);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_recover),
		cmocka_unit_test(test_lost_names_tensor),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
