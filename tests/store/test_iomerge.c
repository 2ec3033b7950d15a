/* Merging of requests that continue each other (store/iomerge.c): a
 * random model checked against a naive reference (every request once,
 * each merged one a chain of requests that follow each other, none two
 * that could still be one, every completion delivered once with the
 * merged result), and the store end to end on an nvme tier: a tensor of
 * four chunks in a run goes out and comes back as one request each way,
 * a fault injected into its third request fails the merged read (nothing
 * lost), and a corrupted chunk inside a merged read is still caught by its
 * own crc32c; with an iovec (nvme: READV/WRITEV), requests back to back
 * on the tier merge wherever their memory lies. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "hpdlf/error.h"
#include "hpdlf/store.h"
#include "store/iomerge.h"
#include "store/store_internal.h"
#include "store/tier_uring.h"
#include "util.h"

static uint64_t seed;

#define NMAX 64

struct rec {
	struct hs_io io;
	int calls, res;
};

static void rec_done(struct hs_io *io)
{
	struct rec *r = io->arg;

	r->calls++;
	r->res = io->res;
}

/* b continues a, worked out from scratch (the reference). */
static int continues(const struct hs_io *a, const struct hs_io *b)
{
	if (a->op != b->op || a->mem_slot != b->mem_slot)
		return 0;
	if (a->addr + a->len != b->addr || (char *)a->buf + a->len != (char *)b->buf)
		return 0;
	return !a->mem_slot || a->mem_off + a->len == b->mem_off;
}

/* n requests: runs of 1-6 that continue each other, each run broken from
 * the one before at random in one of the ways that must keep them apart. */
static void make_batch(uint64_t *s, struct rec *r, int n)
{
	uint64_t addr = 8192, off = 0;
	char *buf = (char *)(uintptr_t)0x100000;
	int op = HS_IO_READ;
	unsigned slot = 1;

	for (int i = 0; i < n; i++) {
		size_t len = 4096 * (1 + tu_rand(s) % 8);
		if (tu_rand(s) % 3 == 0) { /* a break */
			switch (tu_rand(s) % 5) {
			case 0: addr += 4096; break;
			case 1: buf += 4096; break;
			case 2: off += 4096; break;
			case 3: slot = slot == 1 ? 0 : 1; break;
			default: op = op == HS_IO_READ ? HS_IO_WRITE : HS_IO_READ;
			}
		}
		r[i] = (struct rec){ .io = { .op = op, .addr = addr, .buf = buf, .len = len, .done = rec_done,
					     .arg = &r[i], .mem_slot = slot, .mem_off = slot ? off : 0 } };
		addr += len;
		buf += len;
		off += len;
	}
}

/* The subs of output o, in order: the records whose io lies inside it. */
static int subs_of(const struct hs_io *o, struct rec *r, int n, struct rec **sub)
{
	int k = 0;

	for (int i = 0; i < n; i++)
		if (r[i].io.op == o->op && r[i].io.addr >= o->addr && r[i].io.addr < o->addr + o->len)
			sub[k++] = &r[i];
	for (int a = 1; a < k; a++) /* by address */
		for (int b = a; b > 0 && sub[b]->io.addr < sub[b - 1]->io.addr; b--) {
			struct rec *x = sub[b];
			sub[b] = sub[b - 1];
			sub[b - 1] = x;
		}
	return k;
}

static void check_output(struct hs_io *const *out, int m, struct rec *r, int n, int *seen)
{
	struct rec *sub[NMAX];

	for (int j = 0; j < m; j++) {
		const struct hs_io *o = out[j];
		int k = subs_of(o, r, n, sub);
		size_t len = 0;
		assert_true(k >= 1);
		assert_true(k == 1 || o->len <= HS_IO_MERGE_MAX);
		if (k == 1)
			assert_ptr_equal(o, &sub[0]->io); /* alone: the request itself */
		assert_true(o->addr == sub[0]->io.addr && o->buf == sub[0]->io.buf);
		assert_true(o->mem_slot == sub[0]->io.mem_slot && o->mem_off == sub[0]->io.mem_off);
		for (int i = 0; i < k; i++) {
			if (i)
				assert_true(continues(&sub[i - 1]->io, &sub[i]->io));
			len += sub[i]->io.len;
			seen[sub[i] - r]++;
		}
		assert_int_equal(o->len, len);
		assert_int_equal(k == 1 ? 1 : o->nreq, k); /* fault injection counts each */
	}
	for (int i = 0; i < n; i++)
		assert_int_equal(seen[i], 1);
	/* maximal: no two outputs that could still be one */
	for (int a = 0; a < m; a++)
		for (int b = 0; b < m; b++)
			if (a != b && continues(out[a], out[b]))
				assert_true(out[a]->len + out[b]->len > HS_IO_MERGE_MAX);
}

static void test_merge_model(void **state)
{
	uint64_t s = seed;

	(void)state;
	for (int round = 0; round < 2000; round++) {
		struct rec r[NMAX];
		struct hs_io *ios[NMAX];
		int seen[NMAX] = { 0 }, n = 1 + (int)(tu_rand(&s) % NMAX);
		make_batch(&s, r, n);
		for (int i = 0; i < n; i++)
			ios[i] = &r[i].io;
		for (int i = n - 1; i > 0; i--) { /* any order in the batch */
			int j = (int)(tu_rand(&s) % (uint64_t)(i + 1));
			struct hs_io *x = ios[i];
			ios[i] = ios[j];
			ios[j] = x;
		}
		int m = hs_io_merge(ios, n, 0);
		assert_true(m >= 1 && m <= n);
		check_output(ios, m, r, n, seen);
		/* complete them: each request once, with its merged one's result */
		for (int j = 0; j < m; j++) {
			ios[j]->res = (j + round) % 3 ? 0 : -EIO;
			int res = ios[j]->res;
			struct rec *sub[NMAX];
			int k = subs_of(ios[j], r, n, sub);
			ios[j]->done(ios[j]);
			for (int i = 0; i < k; i++)
				assert_int_equal(sub[i]->res, res);
		}
		for (int i = 0; i < n; i++)
			assert_int_equal(r[i].calls, 1);
	}
}

/* sub[0..k) may be one request with an iovec, from scratch: back to back
 * on the tier, one operation, and one piece of memory throughout or every
 * one with a vbuf. */
static int stretch_ref(struct rec *const *sub, int k)
{
	int contig = 1, allv = 1;

	for (int i = 0; i < k; i++) {
		allv &= sub[i]->io.vbuf != NULL;
		if (i && (sub[i]->io.op != sub[0]->io.op || sub[i - 1]->io.addr + sub[i - 1]->io.len != sub[i]->io.addr))
			return 0;
		if (i)
			contig &= continues(&sub[i - 1]->io, &sub[i]->io);
	}
	return contig || allv;
}

/* Vectored merging (a tier with HS_TIER_F_VECTORED): requests back to back
 * on the tier merge wherever their memory lies when both have a vbuf, the
 * merged one's iovec their vbufs in address order (neighbours in memory one
 * piece) and no fixed buffer; without vbufs only as before. */
static void test_merge_vectored(void **state)
{
	uint64_t s = seed ^ 0x5bd1e995;

	(void)state;
	for (int round = 0; round < 2000; round++) {
		struct rec r[NMAX], *sub[NMAX];
		struct hs_io *ios[NMAX];
		int seen[NMAX] = { 0 }, n = 1 + (int)(tu_rand(&s) % NMAX), vec = 0;
		make_batch(&s, r, n);
		for (int i = 0; i < n; i++) {
			r[i].io.vbuf = tu_rand(&s) % 4 ? r[i].io.buf : NULL;
			if (tu_rand(&s) % 3 == 0) /* apart in memory, same place on the tier */
				r[i].io.buf = r[i].io.vbuf = r[i].io.vbuf ? (char *)r[i].io.buf + (64 << 20) : NULL;
			if (!r[i].io.buf)
				r[i].io.buf = (char *)(uintptr_t)(0x40000000 + 0x100000 * (uint64_t)i);
			if (r[i].io.vbuf && tu_rand(&s) % 2) /* reached elsewhere than buf (a fixed read's frames at home) */
				r[i].io.vbuf = (char *)r[i].io.vbuf + (1ull << 30);
			ios[i] = &r[i].io;
		}
		for (int i = n - 1; i > 0; i--) {
			int j = (int)(tu_rand(&s) % (uint64_t)(i + 1));
			struct hs_io *x = ios[i];
			ios[i] = ios[j];
			ios[j] = x;
		}
		int m = hs_io_merge(ios, n, 1);
		assert_true(m >= 1 && m <= n);
		for (int j = 0; j < m; j++) {
			const struct hs_io *o = ios[j];
			int k = subs_of(o, r, n, sub);
			size_t len = 0;
			assert_true(k >= 1 && (k == 1 || o->len <= HS_IO_MERGE_MAX));
			if (k == 1)
				assert_ptr_equal(o, &sub[0]->io);
			assert_true(stretch_ref(sub, k));
			for (int i = 0; i < k; i++) {
				len += sub[i]->io.len;
				seen[sub[i] - r]++;
			}
			assert_int_equal(o->len, len);
			if (!o->niov) {
				for (int i = 1; i < k; i++) /* one piece of memory: as without vectors */
					assert_true(continues(&sub[i - 1]->io, &sub[i]->io));
				continue;
			}
			vec++;
			assert_int_equal(o->mem_slot, 0); /* no fixed buffer */
			uint32_t p = 0;
			size_t at = 0;
			for (int i = 0; i < k; i++) { /* the iovec walks the vbufs in order */
				assert_non_null(sub[i]->io.vbuf);
				if (at == o->iov[p].iov_len) {
					p++;
					at = 0;
					/* a new piece only where memory breaks */
					assert_true((char *)sub[i - 1]->io.vbuf + sub[i - 1]->io.len != (char *)sub[i]->io.vbuf);
				}
				assert_true(p < o->niov);
				assert_ptr_equal((char *)o->iov[p].iov_base + at, sub[i]->io.vbuf);
				at += sub[i]->io.len;
			}
			assert_int_equal(p + 1, o->niov);
			assert_int_equal(at, o->iov[p].iov_len);
		}
		for (int i = 0; i < n; i++)
			assert_int_equal(seen[i], 1);
		/* maximal: two outputs that meet on the tier could not be one
		 * stretch, or it would be too long */
		for (int a = 0; a < m; a++)
			for (int b = 0; b < m; b++) {
				struct rec *ab[2 * NMAX];
				if (a == b || ios[a]->op != ios[b]->op || ios[a]->addr + ios[a]->len != ios[b]->addr)
					continue;
				int ka = subs_of(ios[a], r, n, ab);
				int kb = subs_of(ios[b], r, n, ab + ka);
				assert_true(!stretch_ref(ab, ka + kb) || ios[a]->len + ios[b]->len > HS_IO_MERGE_MAX);
			}
		for (int j = 0; j < m; j++) {
			ios[j]->res = (j + round) % 3 ? 0 : -EIO;
			int res = ios[j]->res, k = subs_of(ios[j], r, n, sub);
			ios[j]->done(ios[j]);
			for (int i = 0; i < k; i++)
				assert_int_equal(sub[i]->res, res);
		}
		for (int i = 0; i < n; i++)
			assert_int_equal(r[i].calls, 1);
		if (round == 1999)
			print_message("vectored: last batch %d requests, %d merged with an iovec\n", n, vec);
	}
}

/* HS_IO_MERGE_MAX / 4096 back-to-back requests of one page become one of
 * HS_IO_MERGE_MAX; the next two (3/4 and 1/2 of it) stay apart. */
#define NPG ((int)(HS_IO_MERGE_MAX / 4096))
static void test_merge_cap(void **state)
{
	static struct rec r[NPG + 2];
	static struct hs_io *ios[NPG + 2];

	(void)state;
	for (int i = 0; i < NPG + 2; i++) {
		size_t len = i < NPG ? 4096 : i == NPG ? 3 * HS_IO_MERGE_MAX / 4 : HS_IO_MERGE_MAX / 2;
		uint64_t at = i <= NPG ? (uint64_t)i * 4096 : (uint64_t)NPG * 4096 + 3 * HS_IO_MERGE_MAX / 4;
		r[i] = (struct rec){ .io = { .op = HS_IO_WRITE, .addr = at, .buf = (char *)(uintptr_t)(0x200000 + at),
					     .len = len, .done = rec_done, .arg = &r[i] } };
		ios[i] = &r[i].io;
	}
	int m = hs_io_merge(ios, NPG + 2, 0);
	assert_int_equal(m, 3); /* [0, NPG) whole, then NPG alone, then NPG + 1 */
	assert_int_equal(ios[0]->len, HS_IO_MERGE_MAX);
	for (int j = 0; j < m; j++)
		ios[j]->done(ios[j]);
	for (int i = 0; i < NPG + 2; i++)
		assert_int_equal(r[i].calls, 1);
}

static void fill(unsigned char *p, size_t n, unsigned char v)
{
	for (size_t i = 0; i < n; i++)
		p[i] = (unsigned char)(v + i * 7);
}

static void check(const unsigned char *p, size_t n, unsigned char v)
{
	for (size_t i = 0; i < n; i++)
		if (p[i] != (unsigned char)(v + i * 7))
			fail_msg("byte %zu: %u, not %u", i, p[i], (unsigned char)(v + i * 7));
}

/* Flip a byte of chunk i's copy in the tier file. */
static void corrupt(const char *path, uint64_t addr)
{
	int fd = open(path, O_RDWR);
	unsigned char b;

	assert_true(fd >= 0);
	assert_int_equal(pread(fd, &b, 1, (off_t)addr + 100), 1);
	b ^= 0x5a;
	assert_int_equal(pwrite(fd, &b, 1, (off_t)addr + 100), 1);
	assert_int_equal(fsync(fd), 0);
	close(fd);
}

static void test_merge_store(void **state)
{
	const uint64_t cs = 16384, bytes = 4 * cs;
	struct hs_store_opts o;
	struct hs_store *st;
	struct hs_tensor *t;
	unsigned char *p;

	(void)state;
	tu_opts(&o, CFG_NVME, cs, 12, 64, "merge");
	assert_int_equal(hs_store_open(&o, &st), 0);
	struct hs_tensor_info ti = { .bytes = bytes, .dtype = HP_U8 };
	assert_int_equal(hs_tensor_create(st, &ti, &t), 0);
	assert_int_equal(hs_pin(t, 0, HS_ALL, HS_PIN_OVERWRITE, (void **)&p), 0);
	assert_true(p < t->base || p >= t->base + t->maplen); /* a run: where its frames lie */
	fill(p, bytes, 3);
	assert_int_equal(hs_unpin(t, 0, HS_ALL), 0);
	uint64_t f0 = hs_tier_nvme_fixed_ios(st->tiers[0]);
	assert_int_equal(hs_evict(t, 0, HS_ALL, HS_TIER_ANY), 4);
	uint64_t f1 = hs_tier_nvme_fixed_ios(st->tiers[0]);
	for (int i = 1; i < 4; i++) /* placed back to back: one request */
		assert_int_equal(t->ch[i].addr, t->ch[0].addr + (uint64_t)i * cs);
	assert_int_equal(hs_pin(t, 0, HS_ALL, HS_PIN_READ, (void **)&p), 0);
	check(p, bytes, 3);
	assert_int_equal(hs_unpin(t, 0, HS_ALL), 0);
	uint64_t f2 = hs_tier_nvme_fixed_ios(st->tiers[0]);
	if (f1 > f0) { /* fixed buffers registered: they count the device's requests */
		assert_int_equal(f1 - f0, 1);
		assert_int_equal(f2 - f1, 1);
	}
	struct hs_store_stats s;
	hs_store_stats(st, &s);
	assert_int_equal(s.tier[1].writes, 4); /* the store still counts chunks */
	assert_int_equal(s.tier[1].reads, 4);

	/* the third request failing fails the merged read, nothing lost */
	assert_int_equal(hs_evict(t, 0, HS_ALL, HS_TIER_ANY), 4);
	hs_fault_set(HS_FAULT_READ, 3, -EIO);
	assert_int_equal(hs_pin(t, 0, HS_ALL, HS_PIN_READ, (void **)&p), -EIO);
	hs_fault_clear();
	assert_non_null(strstr(hp_errmsg(), "read from"));
	assert_int_equal(hs_pin(t, 0, HS_ALL, HS_PIN_READ, (void **)&p), 0);
	check(p, bytes, 3);
	assert_int_equal(hs_unpin(t, 0, HS_ALL), 0);

	/* a bad chunk inside the merged read is caught by its own crc32c */
	assert_int_equal(hs_evict(t, 0, HS_ALL, HS_TIER_ANY), 4);
	corrupt(o.tiers[0].path, t->ch[2].addr);
	assert_int_equal(hs_pin(t, 0, HS_ALL, HS_PIN_READ, (void **)&p), HP_ECORRUPT);
	assert_non_null(strstr(hp_errmsg(), "chunk 2"));
	assert_non_null(strstr(hp_errmsg(), "crc32c mismatch"));
	hs_store_stats(st, &s);
	assert_int_equal(s.tier[1].crc_errors, 1);
	assert_int_equal(hs_tensor_drop(t), 0);
	hs_store_close(st);
}

/* Two one-chunk tensors written back together lie back to back on the nvme
 * tier with a third between them in DRAM: one READV/WRITEV each way (two
 * requests without vectors), the bytes and each chunk's crc32c intact. */
static void test_merge_store_scattered(void **state)
{
	const uint64_t cs = 16384;
	struct hs_store_opts o;
	struct hs_store *st;
	struct hs_tensor *t[3];
	struct hs_prefetch *h = NULL;
	unsigned char *p;

	(void)state;
	tu_opts(&o, CFG_NVME, cs, 12, 64, "mergesc");
	assert_int_equal(hs_store_open(&o, &st), 0);
	struct hs_tensor_info ti = { .bytes = cs, .dtype = HP_U8 };
	for (int i = 0; i < 3; i++) {
		assert_int_equal(hs_tensor_create(st, &ti, &t[i]), 0);
		assert_int_equal(hs_pin(t[i], 0, HS_ALL, HS_PIN_OVERWRITE, (void **)&p), 0);
		fill(p, cs, (unsigned char)(11 * i + 1));
		assert_int_equal(hs_unpin(t[i], 0, HS_ALL), 0);
	}
	struct hs_range r[2] = { { t[0], 0, HS_ALL }, { t[2], 0, HS_ALL } };
	uint64_t q0 = hs_tier_nvme_requests(st->tiers[0]);
	assert_int_equal(hs_evict_many(r, 2, HS_TIER_ANY), 2);
	uint64_t q1 = hs_tier_nvme_requests(st->tiers[0]);
	assert_int_equal(t[2]->ch[0].addr, t[0]->ch[0].addr + cs); /* back to back on the tier */
	assert_int_equal(q1 - q0, 1);
	assert_int_equal(hs_prefetch_many(r, 2, &h), 0);
	assert_int_equal(hs_prefetch_wait(h), 0);
	assert_int_equal(hs_tier_nvme_requests(st->tiers[0]) - q1, 1);
	for (int i = 0; i < 3; i++) {
		assert_int_equal(hs_pin(t[i], 0, HS_ALL, HS_PIN_READ, (void **)&p), 0);
		check(p, cs, (unsigned char)(11 * i + 1));
		assert_int_equal(hs_unpin(t[i], 0, HS_ALL), 0);
	}
	struct hs_store_stats s;
	hs_store_stats(st, &s);
	assert_int_equal(s.tier[1].writes, 2); /* the store still counts chunks */
	assert_int_equal(s.tier[1].reads, 2);
	assert_int_equal(s.tier[1].crc_errors, 0);
	for (int i = 0; i < 3; i++)
		assert_int_equal(hs_tensor_drop(t[i]), 0);
	hs_store_close(st);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_merge_model),
		cmocka_unit_test(test_merge_cap),
		cmocka_unit_test(test_merge_store),
		cmocka_unit_test(test_merge_vectored),
		cmocka_unit_test(test_merge_store_scattered),
	};
	int rc;

	seed = tu_seed("store_iomerge");
	rc = cmocka_run_group_tests(tests, NULL, NULL);
	tu_cleanup();
	return rc;
}
