/* Persistence: commit and reopen on every persistent configuration (both
 * pmem write paths), crash consistency under SIGKILL at random instants,
 * a flipped byte in the NVMe file, foreign and future-version tier files,
 * and injected faults (EIO, ENOSPC, short reads, ENOMEM) that must not lose
 * committed data. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "hpdlf/error.h"
#include "hpdlf/store.h"
#include "store/store_internal.h"
#include "store/tier.h"
#include "store/tier_pmem.h"
#include "util.h"

#define CS 65536u
#define NW 4

static uint64_t seed;

static uint64_t wbytes(int k)
{
	return (uint64_t)(k + 1) * CS + 1000u * (unsigned)k + 3; /* partial last chunks */
}

/* Byte i of generation gen of tensor w<k>: a hash, so any 64-byte run is
 * unique in the files. */
static unsigned char pat(uint64_t gen, int k, uint64_t i)
{
	uint64_t x = (gen << 40) ^ ((uint64_t)k << 32) ^ i;

	x *= 0x9E3779B97F4A7C15ull;
	x ^= x >> 29;
	x *= 0xBF58476D1CE4E5B9ull;
	return (unsigned char)(x >> 56);
}

/* Write generation `gen` into named tensor w<k> (creating it if needed). */
static void write_gen(struct hs_store *st, int k, uint64_t gen, int evict)
{
	struct hs_tensor *t;
	struct hs_tensor_info ti = { .bytes = wbytes(k), .dtype = HP_U8, .shape = { 2, { 1, (int64_t)wbytes(k) } } };
	char name[16];
	unsigned char *p;

	snprintf(name, sizeof name, "w%d", k);
	ti.name = name;
	if (hs_tensor_open(st, name, &t) < 0)
		assert_int_equal(hs_tensor_create(st, &ti, &t), 0);
	assert_int_equal(hs_pin(t, 0, HS_ALL, HS_PIN_OVERWRITE, (void **)&p), 0);
	for (uint64_t i = 0; i < ti.bytes; i++)
		p[i] = pat(gen, k, i);
	assert_int_equal(hs_unpin(t, 0, HS_ALL), 0);
	if (evict)
		assert_true(hs_evict(t, 0, HS_ALL, HS_TIER_ANY) >= 0);
}

/* The generation tensor w<k> holds entirely, -1 if it is a mix or absent. */
static long read_gen(struct hs_store *st, int k)
{
	struct hs_tensor *t;
	struct hs_tensor_info ti;
	char name[16];
	unsigned char *p;
	long gen = -1;

	snprintf(name, sizeof name, "w%d", k);
	if (hs_tensor_open(st, name, &t) < 0)
		return -1;
	hs_tensor_get_info(t, &ti);
	assert_int_equal(ti.bytes, wbytes(k));
	assert_int_equal(ti.shape.rank, 2);
	assert_int_equal(ti.shape.dims[1], (int64_t)wbytes(k));
	if (hs_pin(t, 0, HS_ALL, HS_PIN_READ, (void **)&p) < 0) {
		fprintf(stderr, "read_gen: %s\n", hp_errmsg());
		return -2;
	}
	for (uint64_t g = 0; g < 256 && gen < 0; g++)
		if (p[0] == pat(g, k, 0) && p[1] == pat(g, k, 1))
			gen = (long)g;
	for (uint64_t i = 0; gen >= 0 && i < ti.bytes; i++)
		if (p[i] != pat((uint64_t)gen, k, i))
			gen = -3; /* torn or mixed */
	hs_unpin(t, 0, HS_ALL);
	return gen;
}

static void persist_run(enum cfg c, int pmem_mode)
{
	struct hs_store_opts o;
	struct hs_store *st;
	char prefix[32];

	hs_pmem_force_mode = pmem_mode;
	snprintf(prefix, sizeof prefix, "persist%d%d", c, pmem_mode);
	tu_opts(&o, c, CS, 6, 64, prefix);
	assert_int_equal(hs_store_open(&o, &st), 0);
	for (int k = 0; k < NW; k++)
		write_gen(st, k, 1, k & 1);
	assert_int_equal(hs_store_commit(st), 0);
	for (int k = 0; k < NW; k++) /* uncommitted changes vanish */
		write_gen(st, k, 2, k & 1);
	hs_store_close(st);

	assert_int_equal(hs_store_open(&o, &st), 0);
	for (int k = 0; k < NW; k++)
		assert_int_equal(read_gen(st, k), 1);
	write_gen(st, 0, 3, 1);
	write_gen(st, 2, 3, 0);
	struct hs_tensor *t;
	assert_int_equal(hs_tensor_open(st, "w3", &t), 0);
	assert_int_equal(hs_tensor_drop(t), 0);
	assert_int_equal(hs_store_commit(st), 0);
	struct hs_store_stats s1, s2;
	hs_store_stats(st, &s1);
	assert_int_equal(hs_store_commit(st), 0); /* an idle commit allocates nothing new */
	hs_store_stats(st, &s2);
	for (int k = 1; k < s1.ntiers; k++)
		assert_int_equal(s1.tier[k].used, s2.tier[k].used);
	hs_store_close(st);

	assert_int_equal(hs_store_open(&o, &st), 0);
	assert_int_equal(read_gen(st, 0), 3);
	assert_int_equal(read_gen(st, 1), 1);
	assert_int_equal(read_gen(st, 2), 3);
	assert_int_equal(read_gen(st, 3), -1);
	hs_store_close(st);
	o.reset = 1; /* reset forgets everything */
	assert_int_equal(hs_store_open(&o, &st), 0);
	assert_int_equal(read_gen(st, 0), -1);
	hs_store_close(st);
	hs_pmem_force_mode = 0;
}

static void test_persist_pmem_persist_path(void **state) { (void)state; persist_run(CFG_PMEM, 1); }
static void test_persist_pmem_msync_path(void **state) { (void)state; persist_run(CFG_PMEM, 2); }
static void test_persist_nvme(void **state) { (void)state; persist_run(CFG_NVME, 0); }
static void test_persist_all(void **state) { (void)state; persist_run(CFG_ALL, 0); }

static void test_commit_needs_persistence(void **state)
{
	struct hs_store_opts o;
	struct hs_store *st;
	struct hs_tensor *t;
	struct hs_tensor_info ti = { .bytes = CS, .dtype = HP_U8, .name = "x" };
	void *p;

	(void)state;
	tu_opts(&o, CFG_DRAM, CS, 4, 0, "np");
	assert_int_equal(hs_store_open(&o, &st), 0);
	assert_int_equal(hs_store_commit(st), HP_EUSAGE);
	hs_store_close(st);
	tu_opts(&o, CFG_NVME, CS, 4, 16, "np");
	assert_int_equal(hs_store_open(&o, &st), 0);
	assert_int_equal(hs_tensor_create(st, &ti, &t), 0);
	assert_int_equal(hs_tensor_create(st, &ti, &t), -EEXIST);
	assert_int_equal(hs_pin(t, 0, HS_ALL, HS_PIN_WRITE, &p), 0);
	assert_int_equal(hs_store_commit(st), HP_EUSAGE); /* pinned for writing */
	assert_non_null(strstr(hp_errmsg(), "'x' chunk 0"));
	hs_unpin(t, 0, HS_ALL);
	assert_int_equal(hs_store_commit(st), 0);
	hs_store_close(st);
}

/* The catalog blob and the commit's bounce buffer count against the budget:
 * they fit (evicting what can go) or the commit fails before writing. */
static void test_commit_budget(void **state)
{
	struct hs_store_opts o;
	struct hs_store *st;
	struct hs_tensor *t[5], *a;
	struct hs_tensor_info ti = { .bytes = 1000ull * CS, .dtype = HP_U8 };
	char name[8];
	void *p;

	(void)state;
	/* five named tensors of 1000 chunks: a catalog of ~80 KB, one chunk of budget */
	tu_opts(&o, CFG_NVME, CS, 1, 16, "catbudget");
	assert_int_equal(hs_store_open(&o, &st), 0);
	for (int k = 0; k < 5; k++) {
		snprintf(name, sizeof name, "big%d", k);
		ti.name = name;
		assert_int_equal(hs_tensor_create(st, &ti, &t[k]), 0);
	}
	assert_int_equal(hs_store_commit(st), HP_EBUDGET);
	assert_non_null(strstr(hp_errmsg(), "commit: the catalog needs"));
	for (int k = 2; k < 5; k++)
		assert_int_equal(hs_tensor_drop(t[k]), 0);
	assert_int_equal(hs_store_commit(st), 0); /* ~32 KB now */
	hs_store_close(st);
	assert_int_equal(hs_store_open(&o, &st), 0);
	assert_int_equal(hs_tensor_open(st, "big1", &t[1]), 0);
	assert_int_equal(hs_tensor_open(st, "big2", &t[2]), -ENOENT);
	hs_store_close(st);

	/* a named chunk on the (non-persistent) spill tier is bounced to pmem */
	tu_opts(&o, CFG_PMEM, CS, 2, 16, "bounce");
	o.tiers[1] = o.tiers[0];
	o.tiers[0] = (struct hs_tier_spec){ .kind = HS_TIER_NVME, .path = NULL, .size = 64 * CS };
	o.ntiers = 2;
	assert_int_equal(hs_store_open(&o, &st), 0);
	write_gen(st, 0, 7, 0);
	assert_int_equal(hs_tensor_open(st, "w0", &t[0]), 0);
	assert_int_equal(hs_evict(t[0], 0, HS_ALL, 0), 2); /* to the spill file */
	ti = (struct hs_tensor_info){ .bytes = 2 * CS, .dtype = HP_U8 };
	assert_int_equal(hs_tensor_create(st, &ti, &a), 0);
	assert_int_equal(hs_pin(a, 0, HS_ALL, HS_PIN_OVERWRITE, &p), 0); /* the whole budget */
	assert_int_equal(hs_store_commit(st), HP_EBUDGET);
	assert_non_null(strstr(hp_errmsg(), "commit: bounce buffer"));
	assert_int_equal(hs_unpin(a, 0, HS_ALL), 0);
	assert_int_equal(hs_store_commit(st), 0);
	hs_store_close(st);
	assert_int_equal(hs_store_open(&o, &st), 0);
	assert_int_equal(read_gen(st, 0), 7);
	hs_store_close(st);
}

/* ---- crash consistency ---- */

/* The child writes generations 1, 2, ... of every tensor, commits each and
 * reports it on the pipe; it is killed at a random instant. */
static void crash_child(const struct hs_store_opts *o, int fd, uint64_t s)
{
	struct hs_store *st;
	long start;

	if (hs_store_open(o, &st) < 0)
		_exit(2);
	start = read_gen(st, 0);
	if (start < 0)
		start = 0;
	for (uint64_t g = (uint64_t)start + 1;; g++) {
		for (int k = 0; k < NW; k++)
			write_gen(st, k, g % 256, (int)(tu_rand(&s) % 2));
		if (hs_store_commit(st) < 0)
			_exit(3);
		unsigned char b = (unsigned char)(g % 256);
		if (write(fd, &b, 1) != 1)
			_exit(4);
	}
}

static void crash_run(enum cfg c, int iterations)
{
	struct hs_store_opts o;
	struct hs_store *st;
	uint64_t s = seed ^ 0xC0FFEE;
	long last = 0;
	unsigned nreported = 0;

	tu_opts(&o, c, CS, 6, 64, c == CFG_PMEM ? "crashp" : c == CFG_NVME ? "crashn" : "crasha");
	for (int it = 0; it < iterations; it++) {
		int fds[2];
		assert_int_equal(pipe(fds), 0);
		pid_t pid = fork();
		if (pid == 0) {
			close(fds[0]);
			crash_child(&o, fds[1], s + (uint64_t)it);
		}
		close(fds[1]);
		/* kill at once (every third time), or after the child's first
		 * commit plus a random delay: a loaded machine may take longer
		 * than any fixed delay to reach the first commit */
		struct timespec d = { 0, (long)(tu_rand(&s) % 60000000) };
		if (it % 3) {
			struct pollfd pf = { .fd = fds[0], .events = POLLIN };
			unsigned char b0;
			if (poll(&pf, 1, 20000) == 1 && read(fds[0], &b0, 1) == 1)
				last = b0;
			nanosleep(&d, NULL);
		}
		kill(pid, SIGKILL);
		int status;
		waitpid(pid, &status, 0);
		assert_true(WIFSIGNALED(status));
		unsigned char b;
		while (read(fds[0], &b, 1) == 1)
			last = b;
		close(fds[0]);
		assert_int_equal(hs_store_open(&o, &st), 0);
		long g0 = read_gen(st, 0);
		for (int k = 0; k < NW; k++) {
			long g = read_gen(st, k);
			/* the last reported commit, or the one after it; all the same */
			if (!(g == g0 && (g == last || g == (last + 1) % 256 || (last == 0 && g == -1))))
				fail_msg("iteration %d: tensor w%d at generation %ld, w0 at %ld, last committed %ld", it, k,
					 g, g0, last);
		}
		if (g0 >= 0)
			last = g0;
		hs_store_close(st);
		nreported += (unsigned)(g0 >= 0);
	}
	/* the child must have committed something in most iterations */
	fprintf(stderr, "crash %s: %d kills, reopened at generation %ld last\n", cfg_names[c], iterations, last);
	assert_true(nreported >= (unsigned)iterations / 2);
}

static void test_crash_nvme(void **state)
{
	(void)state;
	crash_run(CFG_NVME, tu_long() ? 100 : 10);
}

static void test_crash_all(void **state)
{
	(void)state;
	crash_run(CFG_ALL, tu_long() ? 100 : 10);
}

/* ---- damaged files ---- */

/* Flip one byte of the NVMe file inside a chunk of tensor w1. */
static void flip_in_file(const char *path, int k, uint64_t gen)
{
	unsigned char want[64], buf[65536];
	int fd = open(path, O_RDWR);
	off_t off = 0;
	ssize_t n;

	for (int i = 0; i < 64; i++)
		want[i] = pat(gen, k, (uint64_t)CS + 100 + i); /* inside chunk 1 */
	assert_true(fd >= 0);
	while ((n = pread(fd, buf, sizeof buf, off)) > 0) {
		unsigned char *hit = memmem(buf, (size_t)n, want, sizeof want);
		if (hit) {
			off_t at = off + (hit - buf) + 10;
			unsigned char v = hit[10] ^ 0x5A;
			assert_int_equal(pwrite(fd, &v, 1, at), 1);
			close(fd);
			return;
		}
		off += n - 64;
	}
	fail_msg("pattern not found in %s", path);
}

static void test_checksum_flip(void **state)
{
	struct hs_store_opts o;
	struct hs_store *st;
	struct hs_tensor *t;
	struct hs_store_stats s;
	void *p;

	(void)state;
	tu_opts(&o, CFG_NVME, CS, 8, 64, "flip");
	assert_int_equal(hs_store_open(&o, &st), 0);
	write_gen(st, 1, 5, 1);
	assert_int_equal(hs_store_commit(st), 0);
	hs_store_close(st);
	flip_in_file(o.tiers[0].path, 1, 5);
	assert_int_equal(hs_store_open(&o, &st), 0);
	assert_int_equal(hs_tensor_open(st, "w1", &t), 0);
	assert_int_equal(hs_pin(t, 0, 1, HS_PIN_READ, &p), 0); /* chunk 0 is intact */
	hs_unpin(t, 0, 1);
	assert_int_equal(hs_pin(t, 0, HS_ALL, HS_PIN_READ, &p), HP_ECORRUPT);
	assert_non_null(strstr(hp_errmsg(), "tensor 'w1' chunk 1"));
	assert_non_null(strstr(hp_errmsg(), "crc32c mismatch"));
	hs_store_stats(st, &s);
	assert_int_equal(s.tier[1].crc_errors, 1);
	hs_store_close(st);

	/* an anonymous tensor written back in this session, same check */
	o.reset = 1;
	assert_int_equal(hs_store_open(&o, &st), 0);
	write_gen(st, 1, 6, 1);
	flip_in_file(o.tiers[0].path, 1, 6);
	assert_int_equal(hs_tensor_open(st, "w1", &t), 0);
	/* a prefetch is checked when its read completes, off the pin (on the
	 * compute lane), also one read into frames it leaves unmapped
	 * (registered, fixed-buffer reads): the intact chunk 0 is verified,
	 * the bad chunk 1 fails the prefetch, and the pin reads it again */
	struct hs_prefetch *h;
	assert_int_equal(hs_prefetch(t, 0, 1, &h), 0);
	assert_int_equal(hs_prefetch_wait(h), 0);
	assert_int_equal(t->ch[0].unverified, 0);
	assert_int_equal(hs_prefetch(t, 1, 1, &h), 0);
	assert_int_equal(hs_prefetch_wait(h), HP_ECORRUPT);
	assert_non_null(strstr(hp_errmsg(), "tensor 'w1' chunk 1"));
	assert_int_equal(hs_pin(t, 1, 1, HS_PIN_READ, &p), HP_ECORRUPT);
	assert_non_null(strstr(hp_errmsg(), "tensor 'w1' chunk 1"));
	assert_int_equal(hs_pin(t, 1, 1, HS_PIN_READ, &p), HP_ECORRUPT); /* read again, still bad */
	hs_store_close(st);
}

static void write_file(const char *path, unsigned char fillv, size_t len)
{
	unsigned char *b = malloc(len);
	int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);

	memset(b, fillv, len);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, b, len), (ssize_t)len);
	close(fd);
	free(b);
}

static void test_bad_files(void **state)
{
	struct hs_store_opts o;
	struct hs_store *st;

	(void)state;
	/* a file that is not a store */
	tu_opts(&o, CFG_NVME, CS, 4, 16, "foreign");
	write_file(o.tiers[0].path, 'x', 1 << 20);
	assert_int_equal(hs_store_open(&o, &st), HP_EFORMAT);
	assert_non_null(strstr(hp_errmsg(), "not an hpdlf store"));
	tu_opts(&o, CFG_PMEM, CS, 4, 16, "foreign");
	write_file(o.tiers[0].path, 'y', 1 << 20);
	assert_int_equal(hs_store_open(&o, &st), HP_EFORMAT);

	/* a store of a future format version */
	tu_opts(&o, CFG_PMEM, CS, 4, 16, "future");
	assert_int_equal(hs_store_open(&o, &st), 0);
	write_gen(st, 0, 1, 0);
	assert_int_equal(hs_store_commit(st), 0);
	hs_store_close(st);
	int fd = open(o.tiers[0].path, O_RDWR);
	uint32_t v = 99;
	assert_int_equal(pwrite(fd, &v, 4, 8), 4);
	assert_int_equal(pwrite(fd, &v, 4, 4096 + 8), 4);
	close(fd);
	assert_int_equal(hs_store_open(&o, &st), HP_EFORMAT);
	assert_non_null(strstr(hp_errmsg(), "version 99"));

	/* a different chunk size than the store was made with */
	tu_opts(&o, CFG_NVME, CS, 4, 16, "chunk");
	assert_int_equal(hs_store_open(&o, &st), 0);
	hs_store_close(st);
	o.chunk_size = 2 * CS;
	assert_int_equal(hs_store_open(&o, &st), HP_EFORMAT);
	assert_non_null(strstr(hp_errmsg(), "chunk size"));

	/* an unwritable tier path */
	tu_opts(&o, CFG_NVME, CS, 4, 16, "x");
	o.tiers[0].path = "/proc/hpdlf-no-such-dir/tier.nvme";
	assert_true(hs_store_open(&o, &st) < 0);
	assert_non_null(strstr(hp_errmsg(), "/proc/hpdlf-no-such-dir/tier.nvme"));
}

/* ---- injected faults ---- */

static void test_faults(void **state)
{
	struct hs_store_opts o;
	struct hs_store *st;
	struct hs_tensor *t;
	void *p;

	(void)state;
	tu_opts(&o, CFG_ALL, CS, 6, 64, "faults");
	assert_int_equal(hs_store_open(&o, &st), 0);
	for (int k = 0; k < NW; k++)
		write_gen(st, k, 1, 0);
	assert_int_equal(hs_store_commit(st), 0);
	/* EIO, then ENOSPC from the write path, then no room for an extent */
	int sites[3] = { HS_FAULT_WRITE, HS_FAULT_WRITE, HS_FAULT_TIER_ALLOC };
	int errs[3] = { -EIO, -ENOSPC, -ENOSPC };
	for (int f = 0; f < 3; f++) {
		for (int k = 0; k < NW; k++)
			write_gen(st, k, 2 + (uint64_t)f, 0);
		hs_fault_set(sites[f], f == 2 ? 1 : 2, errs[f]);
		assert_int_equal(hs_store_commit(st), errs[f]);
		hs_fault_clear();
	}
	hs_store_close(st); /* as if the process ended after the failures */
	assert_int_equal(hs_store_open(&o, &st), 0);
	for (int k = 0; k < NW; k++)
		assert_int_equal(read_gen(st, k), 1);
	/* EIO at every write of a commit in turn, down to the superblock (the
	 * last one): each failed commit leaves the committed version whole */
	int nth, sb_failed = 0;
	for (nth = 1;; nth++) {
		for (int k = 0; k < NW; k++)
			write_gen(st, k, 10 + (uint64_t)nth, 0);
		hs_fault_set(HS_FAULT_WRITE, nth, -EIO);
		int rc = hs_store_commit(st);
		hs_fault_clear();
		if (rc == 0)
			break;
		assert_int_equal(rc, -EIO);
		sb_failed = strstr(hp_errmsg(), "superblock") != NULL;
		hs_store_close(st);
		assert_int_equal(hs_store_open(&o, &st), 0);
		for (int k = 0; k < NW; k++)
			assert_int_equal(read_gen(st, k), 1);
	}
	assert_true(nth > 3);
	assert_true(sb_failed);
	hs_store_close(st);
	assert_int_equal(hs_store_open(&o, &st), 0);
	for (int k = 0; k < NW; k++)
		assert_int_equal(read_gen(st, k), 10 + nth);
	for (int k = 0; k < NW; k++)
		write_gen(st, k, 1, 0);
	assert_int_equal(hs_store_commit(st), 0);

	/* read errors name the tensor and chunk; the data is still there after */
	assert_int_equal(hs_tensor_open(st, "w2", &t), 0);
	hs_fault_set(HS_FAULT_READ, 2, -EIO);
	assert_int_equal(hs_pin(t, 0, HS_ALL, HS_PIN_READ, &p), -EIO);
	assert_non_null(strstr(hp_errmsg(), "tensor 'w2' chunk"));
	hs_fault_set(HS_FAULT_SHORT_READ, 1, 1);
	assert_int_equal(hs_evict(t, 0, HS_ALL, HS_TIER_NONE) >= 0, 1);
	assert_int_equal(hs_pin(t, 0, HS_ALL, HS_PIN_READ, &p), -ENODATA);
	assert_non_null(strstr(hp_errmsg(), "short read"));
	hs_fault_set(HS_FAULT_ALLOC, 1, -ENOMEM);
	assert_int_equal(hs_evict(t, 0, HS_ALL, HS_TIER_NONE) >= 0, 1);
	assert_int_equal(hs_pin(t, 0, HS_ALL, HS_PIN_READ, &p), -ENOMEM);
	hs_fault_clear();
	assert_int_equal(read_gen(st, 2), 1);
	hs_store_close(st);
}

/* A real full disk: a tier too small for what must be written back. */
static void test_enospc(void **state)
{
	struct hs_store_opts o;
	struct hs_store *st;
	struct hs_tensor *a, *b;
	struct hs_tensor_info ti = { .bytes = 4 * CS, .dtype = HP_U8 };
	void *p;

	(void)state;
	tu_opts(&o, CFG_NVME, CS, 4, 0, "full");
	o.tiers[0].size = 2 * CS + 8192; /* room for two chunks */
	assert_int_equal(hs_store_open(&o, &st), 0);
	assert_int_equal(hs_tensor_create(st, &ti, &a), 0);
	assert_int_equal(hs_tensor_create(st, &ti, &b), 0);
	assert_int_equal(hs_pin(a, 0, HS_ALL, HS_PIN_OVERWRITE, &p), 0);
	memset(p, 0x77, 4 * CS);
	assert_int_equal(hs_unpin(a, 0, HS_ALL), 0);
	assert_int_equal(hs_evict(a, 0, HS_ALL, 0), -ENOSPC);
	assert_non_null(strstr(hp_errmsg(), "no room"));
	assert_int_equal(hs_pin(b, 0, 3, HS_PIN_OVERWRITE, &p), -ENOSPC);
	/* nothing of a was lost */
	assert_int_equal(hs_pin(a, 0, HS_ALL, HS_PIN_READ, &p), 0);
	for (unsigned i = 0; i < 4 * CS; i++)
		assert_int_equal(((unsigned char *)p)[i], 0x77);
	hs_unpin(a, 0, HS_ALL);
	hs_store_close(st);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_persist_pmem_persist_path),
		cmocka_unit_test(test_persist_pmem_msync_path),
		cmocka_unit_test(test_persist_nvme),
		cmocka_unit_test(test_persist_all),
		cmocka_unit_test(test_commit_needs_persistence),
		cmocka_unit_test(test_commit_budget),
		cmocka_unit_test(test_crash_nvme),
		cmocka_unit_test(test_crash_all),
		cmocka_unit_test(test_checksum_flip),
		cmocka_unit_test(test_bad_files),
		cmocka_unit_test(test_faults),
		cmocka_unit_test(test_enospc),
	};
	int rc;

	seed = tu_seed("test_persist");
	rc = cmocka_run_group_tests(tests, NULL, NULL);
	tu_cleanup();
	return rc;
}
