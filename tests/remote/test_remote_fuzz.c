/* Malformed and hostile control messages: the decoder never crashes, and a
 * daemon fed garbage, bad frames, out-of-order and out-of-range requests
 * (before and after authentication) and thousands of mutated messages keeps
 * serving, refuses each with a status, and leaks nothing. */
#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "daemons.h"
#include "hpdlf/error.h"
#include "store/remote/remote.h"
#include "store/remote/wire.h"

static struct td_env E;
static uint64_t rng = 12345;

/* Executions: the default suite's, or for the long run (meson
 * -Dlong_tests=true: remote-fuzz-long) HPDLF_REMOTE_FUZZ_EXECS decoder runs
 * and HPDLF_REMOTE_FUZZ_MSGS messages to the daemon (each undecodable one
 * costs a new connection and handshake: about 1.5 ms). */
static long execs(const char *var, long dflt)
{
	const char *e = getenv(var);
	long n = e ? strtol(e, NULL, 10) : 0;

	return n > 0 ? n : dflt;
}

static uint64_t next(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return rng;
}

static size_t pack(const hs_msg *m, uint8_t *buf)
{
	return hpdlf__store__msg__pack(m, buf);
}

/* Flip, insert, delete, or overwrite bytes of a valid encoding. */
static size_t mutate(uint8_t *buf, size_t len, size_t cap)
{
	int k = 1 + (int)(next() % 4);

	while (k--) {
		size_t at = len ? next() % len : 0;
		switch (next() % 4) {
		case 0: if (len) buf[at] ^= (uint8_t)(1u << (next() % 8)); break;
		case 1: if (len) buf[at] = (uint8_t)next(); break;
		case 2: if (len < cap) { memmove(buf + at + 1, buf + at, len - at); buf[at] = (uint8_t)next(); len++; } break;
		case 3: if (len) { memmove(buf + at, buf + at + 1, len - at - 1); len--; } break;
		}
	}
	return len;
}

/* The other requests (long runs reach them too): stat, lookup, remove,
 * list, auth. */
static void more_msgs(hs_msg *m, int i, uint8_t *tmp)
{
	static Hpdlf__Store__Stat st = HPDLF__STORE__STAT__INIT;
	static Hpdlf__Store__Lookup lk = HPDLF__STORE__LOOKUP__INIT;
	static Hpdlf__Store__Remove rm = HPDLF__STORE__REMOVE__INIT;
	static Hpdlf__Store__List ls = HPDLF__STORE__LIST__INIT;
	static Hpdlf__Store__Auth au = HPDLF__STORE__AUTH__INIT;

	switch (i % 5) {
	case 0: m->body_case = HPDLF__STORE__MSG__BODY_STAT; m->stat = &st; break;
	case 1: lk.name = "weights"; m->body_case = HPDLF__STORE__MSG__BODY_LOOKUP; m->lookup = &lk; break;
	case 2: rm.name = "weights"; m->body_case = HPDLF__STORE__MSG__BODY_REMOVE; m->remove = &rm; break;
	case 3: m->body_case = HPDLF__STORE__MSG__BODY_LIST; m->list = &ls; break;
	default: au.mac.data = tmp; au.mac.len = 32; m->body_case = HPDLF__STORE__MSG__BODY_AUTH; m->auth = &au; break;
	}
}

static void sample_msgs(hs_msg *m, int i, uint8_t *tmp)
{
	static Hpdlf__Store__Alloc al = HPDLF__STORE__ALLOC__INIT;
	static Hpdlf__Store__Publish pu = HPDLF__STORE__PUBLISH__INIT;
	static Hpdlf__Store__Hello he = HPDLF__STORE__HELLO__INIT;
	static Hpdlf__Store__Free fr = HPDLF__STORE__FREE__INIT;

	hpdlf__store__msg__init(m);
	m->seq = (uint64_t)i;
	if (i >= 20000 && i % 3 == 0) { /* beyond the default suite's runs */
		more_msgs(m, i / 3, tmp);
		return;
	}
	switch (i % 4) {
	case 0: al.len = 4096u << (i % 12); m->body_case = HPDLF__STORE__MSG__BODY_ALLOC; m->alloc = &al; break;
	case 1: pu.name = "weights"; pu.addr = 8192; pu.len = 4096; pu.meta.data = tmp; pu.meta.len = 8;
		m->body_case = HPDLF__STORE__MSG__BODY_PUBLISH; m->publish = &pu; break;
	case 2: he.version = HS_WIRE_VERSION; he.client_nonce.data = tmp; he.client_nonce.len = 32; he.client = "x";
		m->body_case = HPDLF__STORE__MSG__BODY_HELLO; m->hello = &he; break;
	default: fr.addr = 4096; fr.len = 4096; m->body_case = HPDLF__STORE__MSG__BODY_FREE; m->free = &fr; break;
	}
}

static void test_decoder(void **state)
{
	uint8_t buf[4096], tmp[64] = { 0 };
	hs_msg m;
	int decoded = 0;

	(void)state;
	long n = execs("HPDLF_REMOTE_FUZZ_EXECS", 20000);
	for (long i = 0; i < n; i++) {
		size_t len;
		if (i % 5 == 0) {
			len = next() % 300;
			for (size_t k = 0; k < len; k++)
				buf[k] = (uint8_t)next();
		} else {
			sample_msgs(&m, (int)(i % 1000000007), tmp);
			len = pack(&m, buf);
			if (i % 5 == 1) { /* the valid message decodes to itself */
				hs_msg *d = hs_wire_decode(buf, len);
				assert_non_null(d);
				assert_int_equal(d->body_case, m.body_case);
				assert_int_equal(d->seq, m.seq);
				hs_wire_free(d);
			}
			len = mutate(buf, len, sizeof buf);
		}
		hs_msg *d = hs_wire_decode(buf, len);
		decoded += d != NULL;
		hs_wire_free(d);
	}
	assert_true(decoded > 100); /* the mutations do reach the decoded path */
	printf("decoder: %ld executions, %d decoded\n", n, decoded);
}

static int raw_connect(void)
{
	int fd = hs_tcp_connect(E.d[0].addr, 2000);

	assert_true(fd >= 0);
	return fd;
}

static void send_raw(int fd, const void *p, size_t len)
{
	ssize_t n = send(fd, p, len, MSG_NOSIGNAL);
	(void)n; /* the daemon may already have hung up */
}

static void send_frame(int fd, const uint8_t *body, size_t len)
{
	uint8_t hdr[4] = { (uint8_t)(len >> 24), (uint8_t)(len >> 16), (uint8_t)(len >> 8), (uint8_t)len };

	send_raw(fd, hdr, 4);
	send_raw(fd, body, len);
}

/* The daemon's answer to one message on fd: the reply status, or 1 for a
 * non-Reply message, or a transport error. */
static int answer(int fd)
{
	hs_msg *r = NULL;
	int rc = hs_wire_recv(fd, &r, 2000);

	if (rc < 0)
		return rc;
	rc = r->body_case == HPDLF__STORE__MSG__BODY_REPLY ? r->reply->status : 1;
	hs_wire_free(r);
	return rc;
}

static void assert_alive(void)
{
	int st;

	assert_int_equal(waitpid(E.d[0].pid, &st, WNOHANG), 0);
}

/* Hello + auth with the real token; returns the authenticated socket. */
static int auth_connect(void)
{
	struct hs_secret s;
	uint8_t cn[32], sn[32], mac[32];
	Hpdlf__Store__Hello h = HPDLF__STORE__HELLO__INIT;
	Hpdlf__Store__Auth a = HPDLF__STORE__AUTH__INIT;
	hs_msg m = HPDLF__STORE__MSG__INIT, *r;
	int fd = raw_connect();

	assert_int_equal(hs_secret_load(E.token, &s), 0);
	hs_random(cn, 32);
	h.version = HS_WIRE_VERSION;
	h.client_nonce.data = cn;
	h.client_nonce.len = 32;
	m.body_case = HPDLF__STORE__MSG__BODY_HELLO;
	m.hello = &h;
	assert_int_equal(hs_wire_send(fd, &m, 1000), 0);
	assert_int_equal(hs_wire_recv(fd, &r, 2000), 0);
	assert_int_equal(r->body_case, HPDLF__STORE__MSG__BODY_HELLO_REPLY);
	memcpy(sn, r->hello_reply->server_nonce.data, 32);
	hs_wire_free(r);
	hs_auth_mac(&s, "hpdlf-c1", cn, sn, mac);
	a.mac.data = mac;
	a.mac.len = 32;
	m.body_case = HPDLF__STORE__MSG__BODY_AUTH;
	m.auth = &a;
	assert_int_equal(hs_wire_send(fd, &m, 1000), 0);
	assert_int_equal(answer(fd), 1); /* AuthReply */
	return fd;
}

static void test_bad_frames(void **state)
{
	uint8_t junk[512];
	int fd;

	(void)state;
	/* Garbage with no framing, a zero and a 4 GiB length, a half frame. */
	for (size_t k = 0; k < sizeof junk; k++)
		junk[k] = (uint8_t)next();
	fd = raw_connect();
	send_raw(fd, junk, sizeof junk);
	close(fd);
	const uint8_t zero[4] = { 0, 0, 0, 0 }, huge[4] = { 0xff, 0xff, 0xff, 0xff };
	fd = raw_connect();
	send_raw(fd, zero, 4);
	assert_int_equal(answer(fd), -ECONNRESET); /* dropped, no allocation of 0 */
	close(fd);
	fd = raw_connect();
	send_raw(fd, huge, 4);
	assert_int_equal(answer(fd), -ECONNRESET);
	close(fd);
	fd = raw_connect();
	send_raw(fd, (const uint8_t[]){ 0, 0, 1, 0, 1, 2, 3 }, 7);
	close(fd);
	/* An undecodable body is answered with HP_EPROTO, then dropped. */
	fd = raw_connect();
	send_frame(fd, (const uint8_t[]){ 0xff, 0xff, 0xff }, 3);
	assert_int_equal(answer(fd), HP_EPROTO);
	close(fd);
	assert_alive();
}

static void test_handshake_abuse(void **state)
{
	Hpdlf__Store__Alloc al = HPDLF__STORE__ALLOC__INIT;
	Hpdlf__Store__Hello h = HPDLF__STORE__HELLO__INIT;
	hs_msg m = HPDLF__STORE__MSG__INIT;
	uint8_t nonce[32] = { 1 };
	int fd;

	(void)state;
	/* A request before authentication: refused, no memory handed out. */
	al.len = 4096;
	m.body_case = HPDLF__STORE__MSG__BODY_ALLOC;
	m.alloc = &al;
	fd = raw_connect();
	assert_int_equal(hs_wire_send(fd, &m, 1000), 0);
	assert_int_equal(answer(fd), HP_EAUTH);
	close(fd);
	/* Wrong protocol version; short nonce. */
	h.version = 99;
	h.client_nonce.data = nonce;
	h.client_nonce.len = 32;
	m.body_case = HPDLF__STORE__MSG__BODY_HELLO;
	m.hello = &h;
	fd = raw_connect();
	assert_int_equal(hs_wire_send(fd, &m, 1000), 0);
	assert_int_equal(answer(fd), HP_EPROTO);
	close(fd);
	assert_true(td_log_has(&E, 0, "speaks protocol version 2, the client 99"));
	h.version = HS_WIRE_VERSION;
	h.client_nonce.len = 5;
	fd = raw_connect();
	assert_int_equal(hs_wire_send(fd, &m, 1000), 0);
	assert_int_equal(answer(fd), HP_EPROTO);
	close(fd);
	assert_alive();
}

static int request(int fd, hs_msg *m)
{
	assert_int_equal(hs_wire_send(fd, m, 1000), 0);
	return answer(fd);
}

static void test_hostile_requests(void **state)
{
	Hpdlf__Store__Alloc al = HPDLF__STORE__ALLOC__INIT;
	Hpdlf__Store__Free fr = HPDLF__STORE__FREE__INIT;
	Hpdlf__Store__Publish pu = HPDLF__STORE__PUBLISH__INIT;
	Hpdlf__Store__Lookup lk = HPDLF__STORE__LOOKUP__INIT;
	hs_msg m = HPDLF__STORE__MSG__INIT;
	char longname[400];
	uint8_t meta[600] = { 0 };
	int fd = auth_connect();

	(void)state;
	m.body_case = HPDLF__STORE__MSG__BODY_ALLOC;
	m.alloc = &al;
	uint64_t lens[] = { 0, 100, 4097, 1ull << 62, UINT64_MAX - 4095 };
	for (size_t i = 0; i < sizeof lens / sizeof *lens; i++) {
		al.len = lens[i];
		assert_int_equal(request(fd, &m), HP_EUSAGE);
	}
	m.body_case = HPDLF__STORE__MSG__BODY_FREE;
	m.free = &fr;
	fr.addr = 0;
	fr.len = 4096;
	assert_int_equal(request(fd, &m), HP_EINTERNAL); /* not this client's */
	fr.addr = UINT64_MAX;
	assert_int_equal(request(fd, &m), HP_EINTERNAL);
	m.body_case = HPDLF__STORE__MSG__BODY_PUBLISH;
	m.publish = &pu;
	memset(longname, 'a', sizeof longname - 1);
	longname[sizeof longname - 1] = 0;
	const char *names[] = { "", "a/b", "sp ace", longname };
	for (size_t i = 0; i < 4; i++) {
		pu.name = (char *)names[i];
		assert_int_equal(request(fd, &m), HP_EUSAGE);
	}
	pu.name = "ok";
	pu.meta.data = meta;
	pu.meta.len = sizeof meta;
	assert_int_equal(request(fd, &m), HP_EUSAGE);
	pu.meta.len = 8;
	pu.addr = 4096;
	pu.len = 4096;
	assert_int_equal(request(fd, &m), HP_EPROTO); /* no digest */
	uint8_t digest[HS_DIGEST_BYTES] = { 0 };
	pu.digest.data = digest;
	pu.digest.len = sizeof digest;
	assert_int_equal(request(fd, &m), -ENOENT); /* publishing what it does not own */
	m.body_case = HPDLF__STORE__MSG__BODY_LOOKUP;
	m.lookup = &lk;
	lk.name = longname;
	assert_int_equal(request(fd, &m), -ENOENT);
	/* A second hello after authentication is a protocol error, not a crash. */
	uint8_t tmp[64] = { 0 };
	sample_msgs(&m, 2, tmp);
	assert_int_equal(request(fd, &m), HP_EPROTO);
	close(fd);
	assert_alive();
}

/* Mutated messages from authenticated clients, many connections. */
static void test_mutation_storm(void **state)
{
	uint8_t buf[4096], tmp[64] = { 0 };
	int fd = auth_connect(), sent = 0, reconnects = 0;
	long n = execs("HPDLF_REMOTE_FUZZ_MSGS", 3000);

	(void)state;
	for (long i = 0; i < n; i++) {
		hs_msg m;
		sample_msgs(&m, (int)(i % 1000000007), tmp);
		size_t len = mutate(buf, pack(&m, buf), sizeof buf);
		hs_msg *d = hs_wire_decode(buf, len);
		int shutdown = d && d->body_case == HPDLF__STORE__MSG__BODY_SHUTDOWN;
		hs_wire_free(d);
		if (len == 0 || shutdown)
			continue; /* a legitimate request that would end the test */
		send_frame(fd, buf, len);
		sent++;
		if (answer(fd) < 0) { /* dropped (undecodable): reconnect */
			close(fd);
			fd = auth_connect();
			reconnects++;
		}
		if ((i + 1) % 50000 == 0) { /* long runs: the figures so far */
			printf("daemon: %ld of %ld mutated messages, %d sent, %d dropped connections\n", i + 1, n, sent,
			       reconnects);
			fflush(stdout);
		}
	}
	close(fd);
	printf("daemon: %ld mutated messages, %d sent, %d dropped connections\n", n, sent, reconnects);
	assert_true(sent > n * 2 / 3);
	assert_alive();
	/* Still serving, and every raw client's memory went back. */
	struct hs_remote_opts o;
	struct hs_tier_config cfg = { .name = "after-fuzz", .ext = &o };
	struct hs_tier *t;
	struct hs_tier_stats st = { 0 };
	void *b;
	uint64_t a;
	hs_remote_opts_init(&o);
	o.endpoints = E.list;
	o.token_file = E.token;
	usleep(200000);
	assert_int_equal(hs_tier_remote_open(&cfg, &t), 0);
	assert_int_equal(t->ops->stats(t, &st), 0);
	assert_int_equal(st.used, 0);
	assert_int_equal(posix_memalign(&b, 4096, 65536), 0);
	td_fill(b, 65536, 5);
	assert_int_equal(t->ops->place(t, 65536, &a), 0);
	assert_int_equal(hs_tier_rw(t, HS_IO_WRITE, a, b, 65536), 0);
	uint8_t back[65536];
	assert_int_equal(hs_tier_rw(t, HS_IO_READ, a, back, 65536), 0);
	assert_memory_equal(back, b, 65536);
	free(b);
	t->ops->close(t);
}

static int start(void **state)
{
	(void)state;
	return td_start_n(&E, 1, "32M");
}

static int stop(void **state)
{
	(void)state;
	td_stop_all(&E);
	return 0;
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_decoder),
		cmocka_unit_test(test_bad_frames),
		cmocka_unit_test(test_handshake_abuse),
		cmocka_unit_test(test_hostile_requests),
		cmocka_unit_test(test_mutation_storm),
	};
	if (td_init(&E, argc, argv) < 0)
		return 1;
	int rc = cmocka_run_group_tests(tests, start, stop);
	td_cleanup(&E);
	return rc;
}
