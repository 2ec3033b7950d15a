/* Tier layer: the extent allocator against a byte map, crc32c against a
 * bitwise reference, and every local tier (dram, pmem on both write paths,
 * nvme over io_uring) moving random data, with injected faults. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "hpdlf/error.h"
#include "store/crc.h"
#include "store/place.h"
#include "store/tier.h"
#include "store/tier_dram.h"
#include "store/tier_pmem.h"
#include "store/tier_uring.h"
#include "util.h"

static uint64_t seed;

/* ---- extents ---- */

#define SPACE 4096u

static void test_extents_random(void **state)
{
	struct hs_extents *x;
	unsigned char map[SPACE] = { 0 }; /* 1: in use */
	struct { uint64_t a, l; } live[512];
	int nlive = 0;
	uint64_t s = seed, used = 0;

	(void)state;
	assert_int_equal(hs_extents_create(64, SPACE, &x), 0);
	for (int step = 0; step < 20000; step++) {
		if (nlive < 512 && (tu_rand(&s) % 3 || nlive == 0)) {
			uint64_t len = 1 + tu_rand(&s) % 64, a;
			int rc = hs_extents_alloc(x, len, &a);
			/* first fit: it fails only if no free run of len exists */
			uint64_t run = 0, best = 0;
			for (uint64_t i = 64; i < SPACE; i++) {
				run = map[i] ? 0 : run + 1;
				best = run > best ? run : best;
			}
			if (rc < 0) {
				assert_int_equal(rc, -ENOSPC);
				assert_true(best < len);
				continue;
			}
			assert_true(a >= 64 && a + len <= SPACE);
			for (uint64_t i = a; i < a + len; i++) {
				assert_int_equal(map[i], 0); /* never overlapping */
				map[i] = 1;
			}
			live[nlive].a = a;
			live[nlive++].l = len;
			used += len;
		} else {
			int k = (int)(tu_rand(&s) % nlive);
			assert_int_equal(hs_extents_free(x, live[k].a, live[k].l), 0);
			memset(map + live[k].a, 0, live[k].l);
			used -= live[k].l;
			/* a second free of the same extent is refused */
			assert_int_equal(hs_extents_free(x, live[k].a, live[k].l), HP_EINTERNAL);
			live[k] = live[--nlive];
		}
		assert_int_equal(hs_extents_used(x), used);
		assert_int_equal(hs_extents_count(x), (uint64_t)nlive);
	}
	hs_extents_destroy(x);
}

static void test_extents_claim(void **state)
{
	struct hs_extents *x;
	uint64_t a;

	(void)state;
	assert_int_equal(hs_extents_create(0, 100, &x), 0);
	assert_int_equal(hs_extents_claim(x, 10, 10), 0);
	assert_int_equal(hs_extents_claim(x, 15, 10), HP_ECORRUPT); /* overlaps */
	assert_int_equal(hs_extents_claim(x, 95, 10), HP_ECORRUPT); /* past the end */
	assert_int_equal(hs_extents_claim(x, 0, 10), 0);
	assert_int_equal(hs_extents_alloc(x, 5, &a), 0);
	assert_int_equal(a, 20); /* reuses the first free space */
	assert_int_equal(hs_extents_free(x, 10, 10), 0);
	assert_int_equal(hs_extents_alloc(x, 10, &a), 0);
	assert_int_equal(a, 10); /* freed space is reused */
	assert_int_equal(hs_extents_alloc(x, 76, &a), -ENOSPC);
	assert_int_equal(hs_extents_alloc(x, 75, &a), 0);
	assert_int_equal(hs_extents_used(x), 100);
	hs_extents_destroy(x);
}

/* ---- crc32c ---- */

static uint32_t crc_ref(const unsigned char *p, size_t n)
{
	uint32_t c = ~0u;

	for (size_t i = 0; i < n; i++) {
		c ^= p[i];
		for (int k = 0; k < 8; k++)
			c = (c >> 1) ^ (0x82F63B78u & (0u - (c & 1)));
	}
	return ~c;
}

static void test_crc(void **state)
{
	unsigned char buf[10000];
	uint64_t s = seed;

	(void)state;
	assert_int_equal(hs_crc32c("123456789", 9), 0xE3069283u); /* the published check value */
	for (int r = 0; r < 50; r++) {
		size_t n = tu_rand(&s) % sizeof buf;
		for (size_t i = 0; i < n; i++)
			buf[i] = (unsigned char)tu_rand(&s);
		assert_int_equal(hs_crc32c(buf, n), crc_ref(buf, n));
	}
}

/* ---- tiers ---- */

static int open_kind(int kind, const char *name, uint64_t cap, struct hs_tier **t)
{
	struct hs_tier_config cfg = { .name = name, .capacity = cap, .reserved = 8192, .queue_depth = 8,
				      .flags = HS_TIER_F_CREATE };
	switch (kind) {
	case HS_TIER_DRAM:
		return hs_tier_dram_open(&cfg, t);
	case HS_TIER_PMEM:
		cfg.path = tu_path(tu_shm_dir(), name);
		return hs_tier_pmem_open(&cfg, t);
	default:
		cfg.path = tu_path(tu_disk_dir(), name);
		return hs_tier_nvme_open(&cfg, t);
	}
}

struct batch {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int left;
};

static void batch_done(struct hs_io *io)
{
	struct batch *b = io->arg;

	pthread_mutex_lock(&b->mu);
	b->left--;
	pthread_cond_broadcast(&b->cv);
	pthread_mutex_unlock(&b->mu);
}

/* Write n random blocks in one batch, read them back in another, compare.
 * Extents come from the store's placement over the tier (pl, tier 0). */
static void roundtrip(struct hs_tier *t, struct hs_place *pl, int n, uint64_t *s)
{
	enum { BL = 3 * HS_IO_ALIGN };
	struct batch b = { PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, n };
	struct hs_io io[16], *p[16];
	unsigned char *src = aligned_alloc(HS_IO_ALIGN, (size_t)n * BL), *dst = aligned_alloc(HS_IO_ALIGN, (size_t)n * BL);

	for (size_t i = 0; i < (size_t)n * BL; i++)
		src[i] = (unsigned char)tu_rand(s);
	for (int op = HS_IO_WRITE; op >= HS_IO_READ; op--) {
		b.left = n;
		for (int i = 0; i < n; i++) {
			uint64_t a;
			if (op == HS_IO_WRITE)
				assert_int_equal(hs_place_alloc(pl, 0, BL, &a), 0);
			else
				a = io[i].addr;
			io[i] = (struct hs_io){ .op = op, .addr = a, .buf = (op == HS_IO_WRITE ? src : dst) + (size_t)i * BL,
						.len = BL, .done = batch_done, .arg = &b, .res = 1 };
			p[i] = &io[i];
		}
		assert_int_equal(t->ops->submit(t, p, n), n);
		pthread_mutex_lock(&b.mu);
		while (b.left)
			pthread_cond_wait(&b.cv, &b.mu);
		pthread_mutex_unlock(&b.mu);
		for (int i = 0; i < n; i++)
			assert_int_equal(io[i].res, 0);
	}
	assert_memory_equal(src, dst, (size_t)n * BL);
	for (int i = 0; i < n; i++)
		assert_int_equal(hs_place_free(pl, 0, io[i].addr, BL), 0);
	free(src);
	free(dst);
}

static void faults(struct hs_tier *t, struct hs_place *pl)
{
	unsigned char *buf = aligned_alloc(HS_IO_ALIGN, HS_IO_ALIGN);
	uint64_t a;

	memset(buf, 7, HS_IO_ALIGN);
	assert_int_equal(hs_place_alloc(pl, 0, HS_IO_ALIGN, &a), 0);
	hs_fault_set(HS_FAULT_WRITE, 1, -EIO);
	assert_int_equal(hs_tier_rw(t, HS_IO_WRITE, a, buf, HS_IO_ALIGN), -EIO);
	hs_fault_set(HS_FAULT_WRITE, 1, -ENOSPC);
	assert_int_equal(hs_tier_rw(t, HS_IO_WRITE, a, buf, HS_IO_ALIGN), -ENOSPC);
	assert_int_equal(hs_tier_rw(t, HS_IO_WRITE, a, buf, HS_IO_ALIGN), 0); /* only the first call */
	hs_fault_set(HS_FAULT_READ, 2, -EIO);
	assert_int_equal(hs_tier_rw(t, HS_IO_READ, a, buf, HS_IO_ALIGN), 0);
	assert_int_equal(hs_tier_rw(t, HS_IO_READ, a, buf, HS_IO_ALIGN), -EIO);
	hs_fault_set(HS_FAULT_SHORT_READ, 1, 1);
	assert_int_equal(hs_tier_rw(t, HS_IO_READ, a, buf, HS_IO_ALIGN), -ENODATA);
	hs_fault_set(HS_FAULT_TIER_ALLOC, 1, -ENOSPC);
	uint64_t b;
	assert_int_equal(hs_place_alloc(pl, 0, HS_IO_ALIGN, &b), -ENOSPC);
	hs_fault_clear();
	assert_int_equal(hs_place_free(pl, 0, a, HS_IO_ALIGN), 0);
	/* past the end of the tier */
	assert_true(hs_tier_rw(t, HS_IO_READ, t->capacity, buf, HS_IO_ALIGN) < 0);
	free(buf);
}

static void tier_test(int kind, const char *name)
{
	struct hs_tier *t;
	struct hs_place *pl;
	struct hs_tier_stats ts = { 0 };
	uint64_t s = seed, a;

	assert_int_equal(open_kind(kind, name, 1 << 20, &t), 0);
	assert_int_equal(hs_place_create(&t, 1, &pl), 0);
	assert_int_equal(t->ops->stats(t, &ts), 0);
	assert_int_equal(ts.capacity, (1 << 20) - 8192);
	roundtrip(t, pl, 1, &s);
	roundtrip(t, pl, 16, &s);
	faults(t, pl);
	/* capacity is a hard limit; freed space comes back */
	int n = 0;
	while (hs_place_alloc(pl, 0, 65536, &a) == 0)
		n++;
	assert_int_equal(n, ((1 << 20) - 8192) / 65536);
	hs_place_usage(pl, 0, &ts);
	assert_int_equal(ts.used, (uint64_t)n * 65536);
	assert_int_equal(ts.chunks, n);
	assert_int_equal(hs_place_free(pl, 0, a = 8192, 65536), 0);
	assert_int_equal(hs_place_free(pl, 0, 8192, 65536), HP_EINTERNAL); /* double free */
	assert_int_equal(hs_place_claim(pl, 0, 8192 + 65536 + 4096, 4096), HP_ECORRUPT); /* overlaps one in use */
	assert_int_equal(hs_place_alloc(pl, 0, 65536, &a), 0);
	assert_int_equal(a, 8192);
	assert_int_equal(hs_tier_flush(t), 0);
	hs_place_destroy(pl);
	t->ops->close(t);
}

static void test_dram_tier(void **state)
{
	(void)state;
	tier_test(HS_TIER_DRAM, "dram0");
}

static void test_pmem_tier_persist_path(void **state)
{
	(void)state;
	hs_pmem_force_mode = 1;
	tier_test(HS_TIER_PMEM, "pool1");
	hs_pmem_force_mode = 0;
}

static void test_pmem_tier_msync_path(void **state)
{
	(void)state;
	hs_pmem_force_mode = 2;
	tier_test(HS_TIER_PMEM, "pool2");
	hs_pmem_force_mode = 0;
}

static void test_nvme_tier(void **state)
{
	(void)state;
	tier_test(HS_TIER_NVME, "nvme0");
}

/* io_uring_submit failing with SQEs queued (HS_FAULT_SUBMIT) must not
 * complete again the requests a batch completed inline (a write fault, an
 * address past the end): submit() either accepts all and each request's
 * done() runs exactly once, or accepts none and none runs. */
struct counted {
	struct hs_io io;
	_Atomic int calls;
};

static void counted_done(struct hs_io *io)
{
	struct counted *c = (struct counted *)io;

	atomic_fetch_add(&c->calls, 1);
}

static void test_nvme_submit_fault_exactly_once(void **state)
{
	enum { N = 6, BL = HS_IO_ALIGN };
	struct hs_tier *t;
	struct counted c[N];
	struct hs_io *p[N];
	unsigned char *buf = aligned_alloc(HS_IO_ALIGN, (size_t)N * BL), *one = aligned_alloc(HS_IO_ALIGN, BL);

	(void)state;
	assert_int_equal(open_kind(HS_TIER_NVME, "nvme-submit", 1 << 20, &t), 0);
	memset(buf, 5, (size_t)N * BL);
	for (int i = 0; i < N; i++) {
		memset(&c[i], 0, sizeof c[i]);
		c[i].io = (struct hs_io){ .op = HS_IO_WRITE, .addr = 8192 + (uint64_t)i * BL, .buf = buf + (size_t)i * BL,
					  .len = BL, .done = counted_done, .res = 1 };
		p[i] = &c[i].io;
	}
	c[4].io.addr = t->capacity; /* refused inline: past the end */
	hs_fault_set(HS_FAULT_WRITE, 2, -EIO); /* request 1 fails inline */
	hs_fault_set(HS_FAULT_SUBMIT, 1, -EIO); /* then the ring breaks */
	int rc = t->ops->submit(t, p, N);
	hs_fault_clear();
	/* Push anything left in the SQ and wait for all in flight. */
	assert_int_equal(hs_tier_rw(t, HS_IO_WRITE, 8192 + N * BL, one, BL), 0);
	t->ops->close(t);
	for (int i = 0; i < N; i++)
		assert_int_equal(atomic_load(&c[i].calls), rc < 0 ? 0 : 1);
	assert_int_equal(rc, N); /* some completed inline: accepted */
	assert_int_equal(c[1].io.res, -EIO);
	assert_int_equal(c[4].io.res, -EINVAL);
	for (int i = 0; i < N; i++)
		assert_true(c[i].io.res <= 0);
	free(buf);
	free(one);
}

/* Plugged (hs_tier_uring_plug), a thread's requests wait in the ring until
 * the outermost unplug, or until that thread polls the tier, and a plug
 * whose io_uring_enter fails completes each with the error exactly once. */
static void wait_calls(struct counted *c, int n, struct hs_tier *t)
{
	for (int k = 0; k < 500; k++) {
		int all = 1;
		for (int i = 0; i < n; i++)
			all &= atomic_load(&c[i].calls) == 1;
		if (all)
			return;
		t->ops->poll(t, 1); /* waits up to 10 ms */
	}
	fail_msg("plugged requests not completed in 5 s");
}

static void test_nvme_plug(void **state)
{
	enum { N = 3, BL = HS_IO_ALIGN };
	struct hs_tier *t;
	struct counted c[N];
	struct hs_io *p[N];
	unsigned char *buf = aligned_alloc(HS_IO_ALIGN, (size_t)N * BL);

	(void)state;
	assert_int_equal(open_kind(HS_TIER_NVME, "nvme-plug", 1 << 20, &t), 0);
	memset(buf, 7, (size_t)N * BL);
	for (int i = 0; i < N; i++) {
		memset(&c[i], 0, sizeof c[i]);
		c[i].io = (struct hs_io){ .op = HS_IO_WRITE, .addr = 8192 + (uint64_t)i * BL, .buf = buf + (size_t)i * BL,
					  .len = BL, .done = counted_done, .res = 1 };
		p[i] = &c[i].io;
	}
	/* nested: held until the outer unplug (50 ms is ages for one block,
	 * submitted or not the CQ thread would have reaped it) */
	hs_tier_uring_plug(1);
	hs_tier_uring_plug(1);
	assert_int_equal(t->ops->submit(t, p, 2), 2);
	hs_tier_uring_plug(0);
	usleep(50000);
	assert_int_equal(atomic_load(&c[0].calls) + atomic_load(&c[1].calls), 0);
	hs_tier_uring_plug(0);
	wait_calls(c, 2, t);
	assert_int_equal(c[0].io.res, 0);
	assert_int_equal(c[1].io.res, 0);
	/* still plugged, this thread polls for its own request: it goes */
	hs_tier_uring_plug(1);
	assert_int_equal(t->ops->submit(t, &p[2], 1), 1);
	wait_calls(&c[2], 1, t);
	assert_int_equal(c[2].io.res, 0);
	hs_tier_uring_plug(0);
	/* the unplug's io_uring_enter fails: each plugged request once, -EIO */
	for (int i = 0; i < 2; i++) {
		atomic_store(&c[i].calls, 0);
		c[i].io.res = 1;
	}
	hs_tier_uring_plug(1);
	assert_int_equal(t->ops->submit(t, p, 2), 2);
	hs_fault_set(HS_FAULT_SUBMIT, 1, -EIO);
	hs_tier_uring_plug(0);
	hs_fault_clear();
	t->ops->close(t); /* waits for all in flight */
	for (int i = 0; i < 2; i++) {
		assert_int_equal(atomic_load(&c[i].calls), 1);
		assert_int_equal(c[i].io.res, -EIO);
	}
	free(buf);
}

/* A pair of requests entering the ring alone goes with a NOP that posts no
 * completion (tier_uring.c pad_to_plug: io_uring plugs the block layer for
 * more than two SQEs only): the kernel takes three SQEs for two requests,
 * plugged or not, one for one and three for three; each request completes
 * once, the NOP never. */
static void test_nvme_pad_pair(void **state)
{
	enum { N = 3, BL = HS_IO_ALIGN };
	struct hs_tier *t;
	struct counted c[N];
	struct hs_io *p[N];
	unsigned char *buf = aligned_alloc(HS_IO_ALIGN, (size_t)N * BL);
	const int n[] = { 1, 2, 3, 2 }, taken[] = { 1, 3, 3, 3 };

	(void)state;
	assert_int_equal(open_kind(HS_TIER_NVME, "nvme-pad", 1 << 20, &t), 0);
	memset(buf, 9, (size_t)N * BL);
	for (int round = 0; round < 4; round++) {
		for (int i = 0; i < N; i++) {
			memset(&c[i], 0, sizeof c[i]);
			c[i].io = (struct hs_io){ .op = round % 2 ? HS_IO_READ : HS_IO_WRITE, .addr = 8192 + (uint64_t)i * BL,
						  .buf = buf + (size_t)i * BL, .len = BL, .done = counted_done, .res = 1 };
			p[i] = &c[i].io;
		}
		uint32_t h0 = hs_tier_nvme_sq_head(t);
		hs_tier_uring_plug(round == 3); /* the last pair plugged: padded at the unplug */
		assert_int_equal(t->ops->submit(t, p, n[round]), n[round]);
		hs_tier_uring_plug(0);
		wait_calls(c, n[round], t);
		assert_int_equal(hs_tier_nvme_sq_head(t) - h0, (uint32_t)taken[round]);
		for (int k = 0; k < 5; k++)
			t->ops->poll(t, 0);
		for (int i = 0; i < n[round]; i++) {
			assert_int_equal(atomic_load(&c[i].calls), 1);
			assert_int_equal(c[i].io.res, 0);
		}
	}
	t->ops->close(t); /* waits for all in flight: a NOP counted in flight would hang here */
	free(buf);
}

/* The read-only file tier: a batch of block reads through submit, the last
 * one reaching past the end of the file (complete: every byte up to the
 * end), writes refused, a file that shrank under it reads short. */
static void test_file_tier(void **state)
{
	enum { SIZE = 5 * HS_IO_ALIGN + 1000, NB = 6 };
	const char *path = tu_path(tu_disk_dir(), "readonly.bin");
	unsigned char *file = malloc(SIZE), *buf = aligned_alloc(HS_IO_ALIGN, NB * HS_IO_ALIGN);
	struct batch b = { PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, NB };
	struct hs_io io[NB], *p[NB];
	struct hs_tier *t;
	uint64_t s = seed;

	(void)state;
	for (int i = 0; i < SIZE; i++)
		file[i] = (unsigned char)tu_rand(&s);
	FILE *f = fopen(path, "w");
	assert_int_equal(fwrite(file, 1, SIZE, f), SIZE);
	fclose(f);
	assert_int_equal(hs_tier_file_open(path, &t), 0);
	assert_int_equal(hs_tier_file_size(t), SIZE);
	assert_int_equal(t->capacity, NB * HS_IO_ALIGN);
	assert_true(hs_tier_file_direct(t)); /* tu_disk_dir is disk-backed */
	memset(buf, 0, NB * HS_IO_ALIGN);
	for (int i = 0; i < NB; i++) { /* in reverse: completion order is the tier's */
		int k = NB - 1 - i;
		io[i] = (struct hs_io){ .op = HS_IO_READ, .addr = (uint64_t)k * HS_IO_ALIGN, .len = HS_IO_ALIGN,
					.buf = buf + (size_t)k * HS_IO_ALIGN, .done = batch_done, .arg = &b, .res = 1 };
		p[i] = &io[i];
	}
	assert_int_equal(t->ops->submit(t, p, NB), NB);
	pthread_mutex_lock(&b.mu);
	while (b.left)
		pthread_cond_wait(&b.cv, &b.mu);
	pthread_mutex_unlock(&b.mu);
	for (int i = 0; i < NB; i++)
		assert_int_equal(io[i].res, 0);
	assert_memory_equal(buf, file, SIZE);
	assert_int_equal(hs_tier_rw(t, HS_IO_WRITE, 0, buf, HS_IO_ALIGN), -EROFS);
	assert_int_equal(hs_tier_rw(t, HS_IO_READ, NB * HS_IO_ALIGN, buf, HS_IO_ALIGN), -EINVAL);
	hs_fault_set(HS_FAULT_READ, 1, -EIO);
	assert_int_equal(hs_tier_rw(t, HS_IO_READ, 0, buf, HS_IO_ALIGN), -EIO);
	hs_fault_clear();
	assert_int_equal(truncate(path, 2 * HS_IO_ALIGN + 10), 0);
	assert_int_equal(hs_tier_rw(t, HS_IO_READ, 2 * HS_IO_ALIGN, buf, 2 * HS_IO_ALIGN), -ENODATA);
	assert_int_equal(hs_tier_rw(t, HS_IO_READ, 0, buf, 2 * HS_IO_ALIGN), 0);
	assert_memory_equal(buf, file, 2 * HS_IO_ALIGN);
	t->ops->close(t);
	free(file);
	free(buf);
}

static void test_nvme_refuses_tmpfs(void **state)
{
	struct hs_tier_config cfg = { .name = "nvme", .capacity = 1 << 20, .reserved = 8192,
				      .flags = HS_TIER_F_CREATE };
	struct hs_tier *t;
	int rc;

	(void)state;
	cfg.path = tu_path(tu_shm_dir(), "direct");
	rc = hs_tier_nvme_open(&cfg, &t);
	assert_int_equal(rc, -EINVAL);
	assert_non_null(strstr(hp_errmsg(), "tmpfs"));
	cfg.flags |= HS_TIER_F_BUFFERED_OK; /* the explicit fallback */
	assert_int_equal(hs_tier_nvme_open(&cfg, &t), 0);
	uint64_t s = seed;
	struct hs_place *pl;
	assert_int_equal(hs_place_create(&t, 1, &pl), 0);
	roundtrip(t, pl, 4, &s);
	hs_place_destroy(pl);
	t->ops->close(t);
}

static void test_bad_paths(void **state)
{
	struct hs_tier_config cfg = { .name = "x", .capacity = 1 << 20, .reserved = 8192, .flags = HS_TIER_F_CREATE };
	struct hs_tier *t;

	(void)state;
	cfg.path = "/proc/hpdlf-no-such/tier"; /* unwritable even for root */
	assert_true(hs_tier_nvme_open(&cfg, &t) < 0);
	assert_non_null(strstr(hp_errmsg(), "/proc/hpdlf-no-such/tier"));
	assert_true(hs_tier_pmem_open(&cfg, &t) < 0);
	assert_non_null(strstr(hp_errmsg(), "/proc/hpdlf-no-such/tier"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_extents_random),
		cmocka_unit_test(test_extents_claim),
		cmocka_unit_test(test_crc),
		cmocka_unit_test(test_dram_tier),
		cmocka_unit_test(test_pmem_tier_persist_path),
		cmocka_unit_test(test_pmem_tier_msync_path),
		cmocka_unit_test(test_nvme_tier),
		cmocka_unit_test(test_nvme_submit_fault_exactly_once),
		cmocka_unit_test(test_nvme_plug),
		cmocka_unit_test(test_nvme_pad_pair),
		cmocka_unit_test(test_file_tier),
		cmocka_unit_test(test_nvme_refuses_tmpfs),
		cmocka_unit_test(test_bad_paths),
	};
	int rc;

	seed = tu_seed("test_tiers");
	rc = cmocka_run_group_tests(tests, NULL, NULL);
	tu_cleanup();
	return rc;
}
