/* The daemon's data plane and connection handling under attack: RMA without
 * the handshake, with guessed keys, across clients, after a free; tampered
 * named tensors; stalled handshakes by the thousand; forged log lines.
 * Every check looks at the bytes themselves (what a read returned, what the
 * owner reads back), not at a status alone. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <netinet/in.h>
#include <arpa/inet.h>

#include <cmocka.h>

#include "daemons.h"
#include "hpdlf/error.h"
#include "store/remote/client.h"
#include "store/remote/fabric.h"
#include "store/remote/remote.h"
#include "store/remote/wire.h"

#define EXT (64u << 10)

static struct td_env E;

/* --- one-sided access with a raw endpoint of our own --- */

struct raw {
	struct hs_fab f;
	fi_addr_t fa;
};

static void raw_open(struct raw *r, const struct hs_rconn *c)
{
	assert_int_equal(hs_fab_open(&r->f, c->provider, 0, NULL), 0);
	assert_int_equal(hs_fab_av_insert(&r->f, c->fabric_addr, c->addrlen, &r->fa), 0);
}

/* One fi_read/fi_write; 0 once it completed without error, else negative.
 * A completion that never comes counts as a failure after 3 s (its context
 * is left allocated: the provider may still hold it). */
static int raw_rma(struct raw *r, int write, void *buf, size_t len, uint64_t raddr, uint64_t key)
{
	struct fi_context2 *ctx = calloc(1, sizeof *ctx);
	struct fid_mr *lmr = NULL;
	uint64_t deadline = td_now_ms() + 3000;
	ssize_t rc;

	if (r->f.mr_mode & FI_MR_LOCAL)
		assert_int_equal(hs_fab_mr_reg(&r->f, buf, len, FI_READ | FI_WRITE, &lmr), 0);
	void *desc = lmr ? fi_mr_desc(lmr) : NULL;
	struct iovec iov = { .iov_base = buf, .iov_len = len };
	struct fi_rma_iov rma = { .addr = raddr, .len = len, .key = key };
	struct fi_msg_rma msg = { .msg_iov = &iov, .desc = &desc, .iov_count = 1, .addr = r->fa,
				  .rma_iov = &rma, .rma_iov_count = 1, .context = ctx };
	do {
		struct fi_cq_entry e;
		/* Writes complete once placed in the target's memory, so a refused
		 * one reports an error instead of vanishing. */
		rc = write ? fi_writemsg(r->f.ep, &msg, FI_COMPLETION | FI_DELIVERY_COMPLETE)
			   : fi_readmsg(r->f.ep, &msg, FI_COMPLETION);
		if (rc == -FI_EAGAIN)
			fi_cq_read(r->f.cq, &e, 1);
	} while (rc == -FI_EAGAIN && td_now_ms() < deadline);
	if (rc == 0) {
		rc = -ETIMEDOUT;
		while (td_now_ms() < deadline) {
			struct fi_cq_entry e;
			ssize_t n = fi_cq_read(r->f.cq, &e, 1);
			if (n == 1 && e.op_context == ctx) {
				rc = 0;
				break;
			}
			if (n == -FI_EAVAIL) {
				struct fi_cq_err_entry ee = { 0 };
				fi_cq_readerr(r->f.cq, &ee, 0);
				if (ee.op_context == ctx) {
					rc = -(ee.err ? ee.err : EIO);
					break;
				}
			}
		}
	}
	if (rc != -ETIMEDOUT)
		free(ctx);
	if (lmr)
		fi_close(&lmr->fid);
	return (int)rc;
}

/* An answer of the target itself: after a refused access tcp drops the
 * connection and the next operations fail (-ENOTCONN) until progress has
 * torn it down and a retry reconnects; those are no answer, retry them. */
static int raw_rma_answer(struct raw *r, int write, void *buf, size_t len, uint64_t raddr, uint64_t key)
{
	uint64_t deadline = td_now_ms() + 3000;
	int rc = raw_rma(r, write, buf, len, raddr, key);

	while ((rc == -ENOTCONN || rc == -ECONNRESET || rc == -EPIPE) && td_now_ms() < deadline) {
		struct fi_cq_entry e;
		fi_cq_read(r->f.cq, &e, 1);
		usleep(1000);
		rc = raw_rma(r, write, buf, len, raddr, key);
	}
	return rc;
}

/* The owner's own access, which must succeed (after the reconnects that
 * an attacker's refused accesses on the same endpoint pair may cause). */
static int raw_rma_owner(struct raw *r, int write, void *buf, size_t len, uint64_t raddr, uint64_t key)
{
	uint64_t deadline = td_now_ms() + 3000;
	int rc = raw_rma(r, write, buf, len, raddr, key);

	while (rc != 0 && td_now_ms() < deadline) {
		struct fi_cq_entry e;
		fi_cq_read(r->f.cq, &e, 1); /* lets rxm tear the old connection down */
		usleep(10000);
		rc = raw_rma(r, write, buf, len, raddr, key);
	}
	return rc;
}

/* --- control requests of an authenticated client --- */

struct ext {
	uint64_t addr, key, base;
};

static struct hs_rconn *client(void)
{
	struct hs_secret s;
	struct hs_rconn *c;

	assert_int_equal(hs_secret_load(E.token, &s), 0);
	assert_int_equal(hs_rconn_open(E.d[0].addr, &s, 3000, &c), 0);
	return c;
}

static int alloc_ext(struct hs_rconn *c, uint64_t len, int persistent, struct ext *x)
{
	Hpdlf__Store__Alloc a = HPDLF__STORE__ALLOC__INIT;
	hs_msg m = HPDLF__STORE__MSG__INIT, *rep = NULL;
	int rc;

	a.len = len;
	a.persistent = persistent;
	m.body_case = HPDLF__STORE__MSG__BODY_ALLOC;
	m.alloc = &a;
	rc = hs_rconn_call(c, &m, &rep, 3000);
	if (rc == 0) {
		*x = (struct ext){ rep->reply->addr, rep->reply->key, rep->reply->rma_base };
		hs_wire_free(rep);
	}
	return rc;
}

static int free_ext(struct hs_rconn *c, uint64_t addr, uint64_t len)
{
	Hpdlf__Store__Free f = HPDLF__STORE__FREE__INIT;
	hs_msg m = HPDLF__STORE__MSG__INIT;

	f.addr = addr;
	f.len = len;
	m.body_case = HPDLF__STORE__MSG__BODY_FREE;
	m.free = &f;
	return hs_rconn_call(c, &m, NULL, 3000);
}

/* Nothing here tests leases, and on a loaded machine one refused access can
 * take longer than the 1.5 s the shared test daemons give (the last
 * --lease-ms wins): these daemons wait 30 s for a silent client. */
#define LONG_LEASE "--lease-ms", "30000"

/* Renew the lease when 250 ms passed since the last renewal (a count of
 * attempts is no clock on a loaded machine). */
static void keepalive(struct hs_rconn *c);
static void keep_lease(struct hs_rconn *c, struct timespec *last)
{
	struct timespec now;

	clock_gettime(CLOCK_MONOTONIC, &now);
	if ((now.tv_sec - last->tv_sec) * 1000 + (now.tv_nsec - last->tv_nsec) / 1000000 < 250)
		return;
	keepalive(c);
	*last = now;
}

/* A request on the control connection keeps the client's lease alive. */
static void keepalive(struct hs_rconn *c)
{
	Hpdlf__Store__Stat st = HPDLF__STORE__STAT__INIT;
	hs_msg m = HPDLF__STORE__MSG__INIT;

	m.body_case = HPDLF__STORE__MSG__BODY_STAT;
	m.stat = &st;
	assert_int_equal(hs_rconn_call(c, &m, NULL, 3000), 0);
}

static uint8_t *pattern(uint64_t seed)
{
	uint8_t *p = aligned_alloc(4096, EXT);

	td_fill(p, EXT, seed);
	return p;
}

static int all_zero(const uint8_t *p, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (p[i])
			return 0;
	return 1;
}

/* 1 if any 64-byte block of got appears in the owner's bytes. */
static int leaks(const uint8_t *got, size_t n, const uint8_t *secret)
{
	for (size_t i = 0; i + 64 <= n; i += 64)
		for (size_t k = 0; k + 64 <= EXT; k += 64)
			if (!memcmp(got + i, secret + k, 64))
				return 1;
	return 0;
}

/* Owner A's extent holding seed's pattern, written and checked through
 * its own key. */
static void owned_pattern(struct hs_rconn *a, struct raw *ra, struct ext *x, uint64_t seed, uint8_t **p)
{
	uint8_t *back = aligned_alloc(4096, EXT);

	*p = pattern(seed);
	assert_int_equal(alloc_ext(a, EXT, 0, x), 0);
	assert_int_equal(raw_rma(ra, 1, *p, EXT, x->base, x->key), 0);
	assert_int_equal(raw_rma(ra, 0, back, EXT, x->base, x->key), 0);
	assert_memory_equal(back, *p, EXT);
	free(back);
}

static void still_intact(struct raw *ra, const struct ext *x, const uint8_t *p)
{
	uint8_t *back = aligned_alloc(4096, EXT);

	assert_int_equal(raw_rma_owner(ra, 0, back, EXT, x->base, x->key), 0);
	assert_memory_equal(back, p, EXT);
	free(back);
}

/* Without the handshake: keys 0..1000 at the region's first byte and at the
 * extent's own address, reads and writes.  Before per-extent keys, key 1 at
 * offset 0 reached every byte the daemon lent. */
static void test_unauthenticated_rma(void **state)
{
	struct hs_rconn *a = client();
	struct raw ra, evil;
	struct ext x = { 0 };
	uint8_t *p, *buf = aligned_alloc(4096, 4096);
	int reads_ok = 0, refused = 0;
	struct timespec last;

	(void)state;
	clock_gettime(CLOCK_MONOTONIC, &last);
	raw_open(&ra, a);
	owned_pattern(a, &ra, &x, 11, &p);
	raw_open(&evil, a); /* only the fabric address: what `ss` shows anyone */
	for (uint64_t key = 0; key <= 1000; key++) {
		uint64_t where[2] = { 0, x.base };
		keep_lease(a, &last);
		for (int w = 0; w < (x.base ? 2 : 1); w++) {
			memset(buf, 0, 4096);
			int rc = raw_rma_answer(&evil, 0, buf, 4096, where[w], key);
			if (rc == 0) {
				reads_ok++;
				assert_false(leaks(buf, 4096, p));
			}
			memset(buf, 0xa5, 4096);
			refused += rc != 0 && raw_rma_answer(&evil, 1, buf, 4096, where[w], key) != 0;
		}
	}
	print_message("%d of 1001 keys refused for reads and writes\n", refused);
	assert_int_equal(reads_ok, 0);
	still_intact(&ra, &x, p);
	hs_fab_close(&evil.f);
	hs_fab_close(&ra.f);
	hs_rconn_close(a);
	free(p);
	free(buf);
}

/* An authenticated client with an extent of its own reaches nothing of
 * another's: not through its own key past its bounds, not through the
 * control path. */
static void test_clients_isolated(void **state)
{
	struct hs_rconn *a, *b = client();
	struct raw ra, rb;
	struct ext xa = { 0 }, xb = { 0 };
	uint8_t *p, *buf = aligned_alloc(4096, 2 * EXT);

	(void)state;
	raw_open(&rb, b);
	assert_int_equal(alloc_ext(b, EXT, 0, &xb), 0); /* B first: A lies right after it */
	a = client();
	raw_open(&ra, a);
	owned_pattern(a, &ra, &xa, 12, &p);
	assert_int_equal(xa.addr, xb.addr + EXT);
	assert_int_not_equal(xa.key, xb.key);
	memset(buf, 0, 2 * EXT);
	assert_int_not_equal(raw_rma(&rb, 0, buf, 4096, xb.base + EXT, xb.key), 0);
	assert_int_not_equal(raw_rma(&rb, 0, buf, 2 * EXT, xb.base, xb.key), 0);
	assert_false(leaks(buf, 2 * EXT, p));
	assert_int_equal(raw_rma_owner(&rb, 0, buf, EXT, xb.base, xb.key), 0); /* its own: fine, and zero */
	assert_true(all_zero(buf, EXT));
	memset(buf, 0x5a, 2 * EXT);
	raw_rma(&rb, 1, buf, 4096, xb.base + EXT, xb.key);
	raw_rma(&rb, 1, buf, 2 * EXT, xb.base, xb.key);
	assert_int_equal(free_ext(b, xa.addr, EXT), HP_EINTERNAL);
	still_intact(&ra, &xa, p);
	hs_fab_close(&ra.f);
	hs_fab_close(&rb.f);
	hs_rconn_close(a);
	hs_rconn_close(b);
	free(p);
	free(buf);
}

/* A freed extent's key dies with it, and the next owner of the same bytes
 * reads zeroes: in DRAM and (persistent=1) in the PMEM region. */
static void freed_extent(int persistent)
{
	struct hs_rconn *a = client(), *b;
	struct raw ra, rb;
	struct ext x = { 0 }, y = { 0 };
	uint8_t *p = pattern(13), *buf = aligned_alloc(4096, EXT);

	raw_open(&ra, a);
	assert_int_equal(alloc_ext(a, EXT, persistent, &x), 0);
	assert_int_equal(raw_rma(&ra, 1, p, EXT, x.base, x.key), 0);
	assert_int_equal(free_ext(a, x.addr, EXT), 0);
	memset(buf, 0, EXT);
	assert_int_not_equal(raw_rma(&ra, 0, buf, EXT, x.base, x.key), 0);
	assert_false(leaks(buf, EXT, p));
	assert_int_not_equal(raw_rma(&ra, 1, p, EXT, x.base, x.key), 0);
	b = client();
	raw_open(&rb, b);
	assert_int_equal(alloc_ext(b, EXT, persistent, &y), 0);
	assert_int_equal(y.addr, x.addr); /* first fit: the very same bytes */
	memset(buf, 0xff, EXT);
	assert_int_equal(raw_rma_owner(&rb, 0, buf, EXT, y.base, y.key), 0);
	assert_true(all_zero(buf, EXT));
	hs_fab_close(&ra.f);
	hs_fab_close(&rb.f);
	hs_rconn_close(a);
	hs_rconn_close(b);
	free(p);
	free(buf);
}

static void test_freed_extent_dram(void **state)
{
	(void)state;
	freed_extent(0);
}

static char pmem_arg[600];

static int start_pmem(void **state)
{
	char pmem[512];
	(void)state;
	snprintf(pmem, sizeof pmem, "%s/pmem", E.dir);
	snprintf(pmem_arg, sizeof pmem_arg, "%s:8M", pmem);
	const char *extra[] = { "--pmem", pmem_arg, LONG_LEASE, NULL };
	return td_start(&E, 0, "8M", extra);
}

static void test_freed_extent_pmem(void **state)
{
	(void)state;
	freed_extent(1);
}

static int run(const char *const *args, char *err, size_t len)
{
	return td_run(&E, args, err, len);
}

static void write_file(const char *path, const void *p, size_t n)
{
	FILE *f = fopen(path, "w");

	assert_non_null(f);
	assert_int_equal(fwrite(p, 1, n, f), n);
	fclose(f);
}

/* Bytes a client left in the PMEM region, not named, do not survive a
 * daemon restart into the next owner's extent; named tensors do, intact. */
static void test_pmem_scrubbed_on_restart(void **state)
{
	const char *extra[] = { "--pmem", pmem_arg, LONG_LEASE, NULL };
	char in[600], out[600], err[2048];
	struct hs_rconn *a = client();
	struct raw ra;
	struct ext x = { 0 };
	uint8_t *p = pattern(14), *buf = aligned_alloc(4096, EXT);

	(void)state;
	snprintf(in, sizeof in, "%s/named.in", E.dir);
	snprintf(out, sizeof out, "%s/named.out", E.dir);
	write_file(in, p, 10000);
	const char *put[] = { "put", "kept", in, "--store", E.d[0].addr, "--token-file", E.token, NULL };
	assert_int_equal(run(put, err, sizeof err), 0);
	raw_open(&ra, a);
	assert_int_equal(alloc_ext(a, EXT, 1, &x), 0);
	assert_int_equal(raw_rma(&ra, 1, p, EXT, x.base, x.key), 0);
	hs_fab_close(&ra.f);
	hs_rconn_close(a);
	td_stop(&E, 0, SIGKILL);
	assert_int_equal(td_start(&E, 0, "8M", extra), 0);
	a = client();
	raw_open(&ra, a);
	uint64_t before = x.addr;
	assert_int_equal(alloc_ext(a, EXT, 1, &x), 0);
	assert_int_equal(x.addr, before); /* the very bytes the killed run left */
	memset(buf, 0xff, EXT);
	assert_int_equal(raw_rma(&ra, 0, buf, EXT, x.base, x.key), 0);
	assert_true(all_zero(buf, EXT));
	const char *get[] = { "get", "kept", out, "--store", E.d[0].addr, "--token-file", E.token, NULL };
	assert_int_equal(run(get, err, sizeof err), 0);
	FILE *f = fopen(out, "r");
	assert_non_null(f);
	assert_int_equal(fread(buf, 1, EXT, f), 10000);
	fclose(f);
	assert_memory_equal(buf, p, 10000);
	hs_fab_close(&ra.f);
	hs_rconn_close(a);
	free(p);
	free(buf);
}

static void lookup(const char *name, struct hs_rconn *c, uint64_t *addr, uint64_t *key, uint64_t *base)
{
	Hpdlf__Store__Lookup l = HPDLF__STORE__LOOKUP__INIT;
	hs_msg m = HPDLF__STORE__MSG__INIT, *rep = NULL;

	l.name = (char *)name;
	m.body_case = HPDLF__STORE__MSG__BODY_LOOKUP;
	m.lookup = &l;
	assert_int_equal(hs_rconn_call(c, &m, &rep, 3000), 0);
	assert_int_equal(rep->reply->n_named, 1);
	*addr = rep->reply->named[0]->addr;
	*key = rep->reply->named[0]->key;
	*base = rep->reply->named[0]->rma_base;
	hs_wire_free(rep);
}

/* Named tensors are read-only to every client, and a change made below
 * the daemon (its PMEM file, its catalog) is refused on get. */
static void test_named_tamper(void **state)
{
	char in[600], out[600], pmem[600], err[2048];
	uint8_t *p = pattern(15), *buf = aligned_alloc(4096, EXT);
	uint64_t addr, key, base;
	struct hs_rconn *c;
	struct raw r;

	(void)state;
	snprintf(in, sizeof in, "%s/t.in", E.dir);
	snprintf(out, sizeof out, "%s/t.out", E.dir);
	snprintf(pmem, sizeof pmem, "%s/pmem", E.dir);
	write_file(in, p, 20000);
	const char *put[] = { "put", "t", in, "--store", E.d[0].addr, "--token-file", E.token, NULL };
	const char *get[] = { "get", "t", out, "--store", E.d[0].addr, "--token-file", E.token, NULL };
	assert_int_equal(run(put, err, sizeof err), 0);
	assert_int_equal(run(get, err, sizeof err), 0);
	/* A reader holds a key for it, but a read-only one. */
	c = client();
	raw_open(&r, c);
	lookup("t", c, &addr, &key, &base);
	memset(buf, 0x77, 4096);
	assert_int_not_equal(raw_rma(&r, 1, buf, 4096, base, key), 0);
	assert_int_equal(raw_rma_owner(&r, 0, buf, 4096, base, key), 0);
	assert_memory_equal(buf, p, 4096);
	hs_fab_close(&r.f);
	hs_rconn_close(c);
	assert_int_equal(run(get, err, sizeof err), 0);
	/* One byte changed in the region's file (the daemon maps it shared);
	 * the PMEM region starts after 8 MiB of DRAM in the daemon's space. */
	int fd = open(pmem, O_RDWR);
	uint8_t b;
	off_t at = (off_t)(addr - (8u << 20)) + 777;
	assert_true(fd >= 0);
	assert_int_equal(pread(fd, &b, 1, at), 1);
	assert_int_equal(b, p[777]);
	b ^= 0x10;
	assert_int_equal(pwrite(fd, &b, 1, at), 1);
	int st = run(get, err, sizeof err);
	assert_int_equal(st, 1);
	assert_non_null(strstr(err, "digest mismatch"));
	b ^= 0x10;
	assert_int_equal(pwrite(fd, &b, 1, at), 1);
	close(fd);
	assert_int_equal(run(get, err, sizeof err), 0);
	free(p);
	free(buf);
}

static int stop_all(void **state)
{
	(void)state;
	td_stop_all(&E);
	return 0;
}

static int start_one(void **state)
{
	const char *extra[] = { LONG_LEASE, NULL };

	(void)state;
	return td_start(&E, 0, "32M", extra);
}

static int tcp_to_daemon(int nonblock)
{
	char host[64];
	unsigned port;
	struct sockaddr_in sa = { .sin_family = AF_INET };
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | (nonblock ? SOCK_NONBLOCK : 0), 0);

	assert_int_equal(hs_split_hostport(E.d[0].addr, host, sizeof host, &port, 0), 0);
	sa.sin_port = htons((uint16_t)port);
	inet_pton(AF_INET, host, &sa.sin_addr);
	if (fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof sa) < 0 && errno != EINPROGRESS) {
		close(fd);
		return -1;
	}
	return fd;
}

/* 1 once the daemon closed fd (EOF or reset), 0 if still open at deadline. */
static int closed_by(int fd, uint64_t deadline)
{
	char c;

	while (td_now_ms() < deadline) {
		struct pollfd p = { .fd = fd, .events = POLLIN };
		if (poll(&p, 1, 50) == 1) {
			ssize_t n = recv(fd, &c, 1, MSG_DONTWAIT);
			if (n == 0 || (n < 0 && errno != EAGAIN))
				return 1;
		}
	}
	return 0;
}

static int log_lines(void)
{
	FILE *f = fopen(E.d[0].log, "r");
	int n = 0, c;

	assert_non_null(f);
	while ((c = fgetc(f)) != EOF)
		n += c == '\n';
	fclose(f);
	return n;
}

/* 1,100 connections that send a frame header and then stall: a real client
 * still authenticates within 2 s, the daemon's log stays short, and a peer
 * that trickles a byte now and then is cut off at the handshake deadline. */
static void test_stalled_handshakes(void **state)
{
	enum { N = 1100 };
	static int fds[N];
	struct rlimit rl;
	const uint8_t hdr[4] = { 0, 0, 0, 100 };
	int lines0 = log_lines(), open_fds = 0;

	(void)state;
	getrlimit(RLIMIT_NOFILE, &rl);
	rl.rlim_cur = rl.rlim_max;
	setrlimit(RLIMIT_NOFILE, &rl);
	if (rl.rlim_cur < N + 64)
		skip();
	for (int i = 0; i < N; i++) {
		fds[i] = tcp_to_daemon(0);
		if (fds[i] >= 0 && send(fds[i], hdr, 4, MSG_NOSIGNAL) == 4)
			open_fds++;
	}
	assert_true(open_fds > N / 2);
	int trickler = tcp_to_daemon(0);
	assert_true(trickler >= 0);
	assert_int_equal(send(trickler, hdr, 4, MSG_NOSIGNAL), 4);
	uint64_t t0 = td_now_ms();
	struct hs_rconn *c = client();
	uint64_t took = td_now_ms() - t0;
	print_message("authenticated %llu ms after %d stalled connections\n", (unsigned long long)took, open_fds);
	assert_true(took < 2000);
	Hpdlf__Store__Stat st = HPDLF__STORE__STAT__INIT;
	hs_msg m = HPDLF__STORE__MSG__INIT, *rep = NULL;
	m.body_case = HPDLF__STORE__MSG__BODY_STAT;
	m.stat = &st;
	assert_int_equal(hs_rconn_call(c, &m, &rep, 3000), 0);
	assert_true(rep->reply->stat->clients <= 64 + 2); /* the cap on handshakes held */
	hs_wire_free(rep);
	/* The trickler: one byte every 400 ms never extends its 3 s deadline. */
	int cut = 0;
	for (uint64_t t = td_now_ms(); !cut && td_now_ms() - t < 6000;) {
		if (send(trickler, "x", 1, MSG_NOSIGNAL) < 0)
			cut = 1;
		else
			cut = closed_by(trickler, td_now_ms() + 400);
	}
	assert_true(cut);
	for (int i = 0; i < N; i++)
		if (fds[i] >= 0)
			close(fds[i]);
	close(trickler);
	hs_rconn_close(c);
	int lines = log_lines() - lines0;
	print_message("%d log lines for %d hostile connections\n", lines, N + 1);
	assert_true(lines < 150);
}

/* A client name with a newline, a forged log prefix and terminal escapes
 * reaches the log as one line of printable text. */
static void test_log_injection(void **state)
{
	/* 40 bytes: all of it reaches the log line that names the client */
	const char *forged = "x\n2001-01-01 hpdlf-store[1] info: FORGED\x1b[2J\x1b]0;t\x07";
	Hpdlf__Store__Hello h = HPDLF__STORE__HELLO__INIT;
	hs_msg m = HPDLF__STORE__MSG__INIT, *r = NULL;
	uint8_t cn[32] = { 0 };

	(void)state;
	for (int version = 99; version >= HS_WIRE_VERSION; version -= 99 - HS_WIRE_VERSION) {
		int fd = tcp_to_daemon(0);
		h.version = (uint32_t)version;
		h.client_nonce.data = cn;
		h.client_nonce.len = 32;
		h.client = (char *)forged;
		m.body_case = HPDLF__STORE__MSG__BODY_HELLO;
		m.hello = &h;
		assert_int_equal(hs_wire_send(fd, &m, 1000), 0);
		hs_wire_recv(fd, &r, 2000);
		hs_wire_free(r);
		r = NULL;
		close(fd); /* the valid hello: dropped mid-handshake, logged by name */
	}
	usleep(300000);
	assert_true(td_log_has(&E, 0, "FORGED"));
	FILE *f = fopen(E.d[0].log, "r");
	char line[2048];
	assert_non_null(f);
	while (fgets(line, sizeof line, f)) {
		assert_null(strchr(line, 0x1b));
		assert_null(strchr(line, 0x07));
		assert_int_not_equal(strncmp(line, "2001-01-01", 10), 0);
	}
	fclose(f);
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_unauthenticated_rma, start_one, stop_all),
		cmocka_unit_test_setup_teardown(test_clients_isolated, start_one, stop_all),
		cmocka_unit_test_setup_teardown(test_freed_extent_dram, start_one, stop_all),
		cmocka_unit_test_setup_teardown(test_freed_extent_pmem, start_pmem, stop_all),
		cmocka_unit_test_setup_teardown(test_pmem_scrubbed_on_restart, start_pmem, stop_all),
		cmocka_unit_test_setup_teardown(test_named_tamper, start_pmem, stop_all),
		cmocka_unit_test_setup_teardown(test_stalled_handshakes, start_one, stop_all),
		cmocka_unit_test_setup_teardown(test_log_injection, start_one, stop_all),
	};
	if (td_init(&E, argc, argv) < 0)
		return 1;
	int rc = cmocka_run_group_tests(tests, NULL, NULL);
	td_cleanup(&E);
	return rc;
}
