/* Shared extents (hs_remote_share, the Share request): what the mailboxes
 * of asynchronous SGD stand on.  Against real hpdlf-store daemons on
 * loopback ports: a client of the job's token opens another client's
 * shared extent by name and writes it one-sidedly, the owner reads the
 * very bytes (and the other way round); a client with another token
 * cannot connect at all; a client of the right token cannot share an
 * extent that is not its own; names are unique per daemon; a read-only
 * named tensor is not handed out as shared; the owner's lease ends the
 * extent, after which the other client's writes are refused and the bytes
 * are gone (zeroed) for the next owner. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "daemons.h"
#include "hpdlf/error.h"
#include "hpdlf/store.h"
#include "store/remote/client.h"
#include "store/remote/remote.h"
#include "store/remote/wire.h"

#define EXT (64u << 10)

static struct td_env E;

static int open_tier(const char *token, struct hs_tier **t)
{
	struct hs_remote_opts o;
	struct hs_tier_config cfg = { .name = "shared-test" };

	hs_remote_opts_init(&o);
	o.endpoints = E.list;
	o.token_file = token;
	cfg.ext = &o;
	return hs_tier_remote_open(&cfg, t);
}

static uint8_t *abuf(size_t len)
{
	uint8_t *p = aligned_alloc(4096, len);

	assert_non_null(p);
	return p;
}

static int all_zero(const uint8_t *p, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (p[i])
			return 0;
	return 1;
}

/* One writes, the other reads the same bytes, both ways. */
static void test_shared_both_ways(void **state)
{
	struct hs_tier *a, *b;
	uint8_t *w = abuf(EXT), *r = abuf(EXT);
	uint64_t xa, xb, len;
	char where[160];

	(void)state;
	assert_int_equal(td_start_n(&E, 2, "8M"), 0);
	assert_int_equal(open_tier(E.token, &a), 0);
	assert_int_equal(open_tier(E.token, &b), 0);
	assert_int_equal(hs_remote_daemons(a), 2);
	assert_int_equal(hs_remote_share(a, 1, "mbox-1", EXT, &xa), 0);
	assert_int_equal(hs_remote_daemon_of(a, xa, where, sizeof where), 0);
	assert_string_equal(where, E.d[1].addr); /* on the daemon asked for */
	assert_int_equal(hs_tier_rw(a, HS_IO_READ, xa, r, EXT), 0);
	assert_true(all_zero(r, EXT));
	assert_int_equal(hs_remote_open_shared(b, "mbox-1", &xb, &len), 0);
	assert_int_equal(len, EXT);
	td_fill(w, EXT, 7);
	assert_int_equal(hs_tier_rw(b, HS_IO_WRITE, xb, w, EXT), 0);
	assert_int_equal(hs_tier_rw(a, HS_IO_READ, xa, r, EXT), 0);
	assert_memory_equal(r, w, EXT);
	td_fill(w, EXT, 8);
	assert_int_equal(hs_tier_rw(a, HS_IO_WRITE, xa + 4096, w, EXT - 4096), 0);
	assert_int_equal(hs_tier_rw(b, HS_IO_READ, xb + 4096, r, EXT - 4096), 0);
	assert_memory_equal(r, w, EXT - 4096);
	/* the name is taken on that daemon */
	assert_int_equal(hs_remote_share(b, 1, "mbox-1", EXT, &xb), -EEXIST);
	/* a read-only named tensor is never handed out writable */
	assert_int_equal(hs_remote_put(a, "weights", w, EXT, "m", 1), 0);
	assert_int_equal(hs_remote_open_shared(b, "weights", &xb, &len), HP_EUSAGE);
	assert_int_equal(hs_remote_open_shared(b, "nobody", &xb, &len), -ENOENT);
	/* the command line lists it but does not `get` it as a tensor */
	char err[2048], out[600];
	snprintf(out, sizeof out, "%s/got.bin", E.dir);
	const char *get[] = { "get", "mbox-1", out, "--store", E.list, "--token-file", E.token, NULL };
	assert_int_equal(td_run(&E, get, err, sizeof err), 2);
	assert_non_null(strstr(err, "shared extent"));
	a->ops->close(a);
	b->ops->close(b);
	free(w);
	free(r);
	td_stop_all(&E);
}

/* Another token cannot connect, so it never learns a key; the right token
 * cannot share (and so open writable) an extent of another client. */
static void test_shared_auth(void **state)
{
	struct hs_tier *a, *bad = NULL;
	struct hs_secret s;
	struct hs_rconn *c;
	Hpdlf__Store__Share sh = HPDLF__STORE__SHARE__INIT;
	hs_msg m = HPDLF__STORE__MSG__INIT;
	uint64_t xa, placed, x, len;

	(void)state;
	assert_int_equal(td_start_n(&E, 1, "8M"), 0);
	assert_int_equal(open_tier(E.token, &a), 0);
	assert_int_equal(hs_remote_share(a, 0, "mbox-a", EXT, &xa), 0);
	assert_int_equal(open_tier(E.bad_token, &bad), HP_EAUTH);
	assert_null(bad);
	assert_true(td_log_has(&E, 0, "refused: wrong token"));
	/* a private extent of a, shared by another client: refused */
	assert_int_equal(a->ops->place(a, EXT, &placed), 0);
	assert_int_equal(hs_secret_load(E.token, &s), 0);
	assert_int_equal(hs_rconn_open(E.d[0].addr, &s, 3000, &c), 0);
	sh.name = "stolen";
	sh.addr = placed & ((1ull << HS_REMOTE_ADDR_BITS) - 1);
	sh.len = EXT;
	m.body_case = HPDLF__STORE__MSG__BODY_SHARE;
	m.share = &sh;
	assert_int_equal(hs_rconn_call(c, &m, NULL, 3000), -ENOENT);
	/* nor can it re-share a's shared extent under a second name */
	sh.addr = xa & ((1ull << HS_REMOTE_ADDR_BITS) - 1);
	assert_int_equal(hs_rconn_call(c, &m, NULL, 3000), -ENOENT);
	hs_rconn_close(c);
	hs_secret_free(&s);
	struct hs_tier *b;
	assert_int_equal(open_tier(E.token, &b), 0);
	assert_int_equal(hs_remote_open_shared(b, "stolen", &x, &len), -ENOENT);
	b->ops->close(b);
	a->ops->close(a);
	td_stop_all(&E);
}

/* The owner's lease ends the extent: the other's writes are refused, the
 * name is gone, the next owner of the bytes finds zeroes. */
static void test_shared_lease(void **state)
{
	struct hs_tier *a, *b;
	uint8_t *w = abuf(EXT), *r = abuf(EXT);
	uint64_t xa, xb, len;

	(void)state;
	assert_int_equal(td_start_n(&E, 1, "8M"), 0);
	assert_int_equal(open_tier(E.token, &a), 0);
	assert_int_equal(open_tier(E.token, &b), 0);
	assert_int_equal(hs_remote_share(a, 0, "mbox-lease", EXT, &xa), 0);
	assert_int_equal(hs_remote_open_shared(b, "mbox-lease", &xb, &len), 0);
	td_fill(w, EXT, 9);
	assert_int_equal(hs_tier_rw(b, HS_IO_WRITE, xb, w, EXT), 0);
	a->ops->close(a); /* the lease ends with the connection */
	uint64_t t0 = td_now_ms();
	int rc;
	while ((rc = hs_remote_open_shared(b, "mbox-lease", &xb, &len)) == 0 && td_now_ms() - t0 < 3000)
		usleep(50000);
	assert_int_equal(rc, -ENOENT);
	assert_int_not_equal(hs_tier_rw(b, HS_IO_WRITE, xb, w, EXT), 0);
	assert_true(td_log_has(&E, 0, "freed"));
	/* the same bytes, shared anew, hold nothing of the old content */
	assert_int_equal(hs_remote_share(b, 0, "mbox-next", EXT, &xb), 0);
	/* tcp drops the endpoint's connection after a refused transfer, and
	 * transfers fail with -ENOTCONN (or the like) until it made a new one */
	t0 = td_now_ms();
	while ((rc = hs_tier_rw(b, HS_IO_READ, xb, r, EXT)) != 0 && rc != -EIO && td_now_ms() - t0 < 3000)
		usleep(5000);
	assert_int_equal(rc, 0);
	assert_true(all_zero(r, EXT));
	/* released by its owner: gone at once */
	assert_int_equal(b->ops->release(b, xb, EXT), 0);
	assert_int_equal(hs_remote_open_shared(b, "mbox-next", &xb, &len), -ENOENT);
	b->ops->close(b);
	free(w);
	free(r);
	td_stop_all(&E);
}

static int stop_all(void **state)
{
	(void)state;
	td_stop_all(&E);
	return 0;
}

static void log_sink(int level, const char *msg, void *arg)
{
	(void)arg;
	fprintf(stderr, "[pid %d] log %d: %s\n", (int)getpid(), level, msg);
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(test_shared_both_ways, stop_all),
		cmocka_unit_test_teardown(test_shared_auth, stop_all),
		cmocka_unit_test_teardown(test_shared_lease, stop_all),
	};
	if (td_init(&E, argc, argv) < 0)
		return 1;
	hp_log_set(log_sink, NULL, HP_LOG_INFO);
	unsetenv("HPDLF_STORE");
	int rc = cmocka_run_group_tests(tests, NULL, NULL);
	td_cleanup(&E);
	return rc;
}
