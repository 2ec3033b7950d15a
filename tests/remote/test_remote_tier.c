/* Remote tier through the tier interface against real hpdlf-store daemons
 * on loopback ports: round trips of random data, transfer splitting,
 * capacity-aware placement, authentication, daemon death (kill -9) with and
 * without replicas, leases of dead clients, named tensors across restarts. */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "daemons.h"
#include "hpdlf/error.h"
#include "hpdlf/store.h"
#include "store/remote/remote.h"

#define MiB (1u << 20)

static struct td_env E;

static int open_tier(const char *token, int replicas, size_t max_segment, struct hs_tier **t)
{
	struct hs_remote_opts o;
	struct hs_tier_config cfg = { .name = "remote-test" };

	hs_remote_opts_init(&o);
	o.endpoints = E.list;
	o.token_file = token;
	o.replicas = replicas;
	o.max_segment = max_segment;
	cfg.ext = &o;
	return hs_tier_remote_open(&cfg, t);
}

static void *abuf(size_t len)
{
	void *p = NULL;

	assert_int_equal(posix_memalign(&p, 4096, len), 0);
	return p;
}

/* Asynchronous batches: count completions, wait with a deadline. */
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
	pthread_cond_signal(&b->cv);
	pthread_mutex_unlock(&b->mu);
}

/* Submit n requests; returns the ms waited, or -1 if they did not all
 * complete within timeout_ms (a hang). */
static long run_batch(struct hs_tier *t, struct hs_io *io, int n, long timeout_ms)
{
	struct batch b = { PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, n };
	struct hs_io *p[256];
	uint64_t t0 = td_now_ms();

	for (int i = 0; i < n; i++) {
		io[i].done = batch_done;
		io[i].arg = &b;
		io[i].res = 1;
		p[i] = &io[i];
	}
	assert_int_equal(t->ops->submit(t, p, n), n);
	pthread_mutex_lock(&b.mu);
	while (b.left > 0 && (long)(td_now_ms() - t0) < timeout_ms) {
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_nsec += 20000000;
		ts.tv_sec += ts.tv_nsec / 1000000000;
		ts.tv_nsec %= 1000000000;
		pthread_cond_timedwait(&b.cv, &b.mu, &ts);
	}
	int left = b.left;
	pthread_mutex_unlock(&b.mu);
	return left ? -1 : (long)(td_now_ms() - t0);
}

static int daemon_index(const char *where)
{
	for (int i = 0; i < E.n; i++)
		if (!strcmp(E.d[i].addr, where))
			return i;
	return -1;
}

static void test_roundtrip(void **state)
{
	enum { N = 24 };
	struct hs_tier *t;
	uint64_t addr[N], len[N];
	struct hs_io io[N];
	int per_daemon[TD_MAX] = { 0 };
	uint8_t *w[N], *r[N];

	(void)state;
	assert_int_equal(td_start_n(&E, 3, "96M"), 0);
	assert_int_equal(open_tier(E.token, 1, 0, &t), 0);
	for (int i = 0; i < N; i++) {
		char where[128];
		len[i] = i % 3 == 0 ? 4 * MiB : (uint64_t)(i + 1) * 4096 * 7;
		assert_int_equal(t->ops->place(t, len[i], &addr[i]), 0);
		assert_int_equal(hs_remote_daemon_of(t, addr[i], where, sizeof where), 0);
		per_daemon[daemon_index(where)]++;
		w[i] = abuf(len[i]);
		r[i] = abuf(len[i]);
		td_fill(w[i], len[i], 100 + (uint64_t)i);
		memset(r[i], 0xee, len[i]);
		io[i] = (struct hs_io){ .op = HS_IO_WRITE, .addr = addr[i], .buf = w[i], .len = len[i] };
	}
	/* Capacity-aware hashing spreads extents over the equal daemons. */
	for (int d = 0; d < 3; d++)
		assert_true(per_daemon[d] > 0);
	assert_true(run_batch(t, io, N, 10000) >= 0);
	for (int i = 0; i < N; i++) {
		assert_int_equal(io[i].res, 0);
		io[i] = (struct hs_io){ .op = HS_IO_READ, .addr = addr[i], .buf = r[i], .len = len[i] };
	}
	assert_true(run_batch(t, io, N, 10000) >= 0);
	for (int i = 0; i < N; i++) {
		assert_int_equal(io[i].res, 0);
		assert_memory_equal(r[i], w[i], len[i]);
	}
	/* Addresses inside an extent, and the stats. */
	assert_int_equal(hs_tier_rw(t, HS_IO_READ, addr[0] + 8192, r[0], 4096), 0);
	assert_memory_equal(r[0], w[0] + 8192, 4096);
	struct hs_tier_stats st = { 0 };
	assert_int_equal(t->ops->stats(t, &st), 0);
	assert_int_equal(st.chunks, N);
	assert_int_equal(st.capacity, 3ull * 96 * MiB);
	for (int i = 0; i < N; i++) {
		assert_int_equal(t->ops->release(t, addr[i], len[i]), 0);
		free(w[i]);
		free(r[i]);
	}
	assert_int_not_equal(t->ops->release(t, addr[0], len[0]), 0); /* double free refused */
	/* Out of any extent: refused, not sent. */
	assert_int_not_equal(hs_tier_rw(t, HS_IO_READ, 12345ull << 48, r, 0), 0);
	t->ops->close(t);
	td_stop_all(&E);
}

/* Transfers larger than the segment size are split; offsets preserved. */
static void test_split(void **state)
{
	struct hs_tier *t;
	uint64_t a;
	size_t len = 3 * MiB + 8192;
	uint8_t *w = abuf(len), *r = abuf(len);

	(void)state;
	assert_int_equal(td_start_n(&E, 1, "16M"), 0);
	assert_int_equal(open_tier(E.token, 1, 64 * 1024, &t), 0);
	assert_int_equal(t->ops->place(t, len, &a), 0);
	td_fill(w, len, 7);
	assert_int_equal(hs_tier_rw(t, HS_IO_WRITE, a, w, len), 0);
	memset(r, 0, len);
	assert_int_equal(hs_tier_rw(t, HS_IO_READ, a, r, len), 0);
	assert_memory_equal(r, w, len);
	/* A partial overwrite in the middle, then the whole read again. */
	td_fill(w + MiB, 2 * MiB, 8);
	assert_int_equal(hs_tier_rw(t, HS_IO_WRITE, a + MiB, w + MiB, 2 * MiB), 0);
	assert_int_equal(hs_tier_rw(t, HS_IO_READ, a, r, len), 0);
	assert_memory_equal(r, w, len);
	t->ops->close(t);
	free(w);
	free(r);
	td_stop_all(&E);
}

/* Full daemons are skipped; the pool holds what the daemons lend. */
static void test_capacity(void **state)
{
	struct hs_tier *t;
	uint64_t a[64];
	int n = 0, rc;
	struct hs_tier_stats st = { 0 };

	(void)state;
	assert_int_equal(td_start(&E, 0, "8M", NULL), 0);
	assert_int_equal(td_start(&E, 1, "24M", NULL), 0);
	assert_int_equal(open_tier(E.token, 1, 0, &t), 0);
	while ((rc = t->ops->place(t, 4 * MiB, &a[n])) == 0 && n < 63)
		n++;
	assert_int_equal(rc, -ENOSPC);
	if (n != 8) fail_msg("n=%d rc=%d %s", n, rc, hp_errmsg()); /* 2 + 6 extents of 4 MiB */
	assert_int_equal(t->ops->stats(t, &st), 0);
	assert_int_equal(st.used, 32ull * MiB);
	for (int i = 0; i < n; i++)
		if (t->ops->release(t, a[i], 4 * MiB)) fail_msg("%s", hp_errmsg());
	assert_int_equal(t->ops->place(t, 4 * MiB, &a[0]), 0);
	t->ops->close(t);
	td_stop_all(&E);
}

static void test_auth(void **state)
{
	struct hs_tier *t = NULL;
	char err[2048];
	const char *ls_bad[] = { "ls", "--store", NULL, "--token-file", E.bad_token, NULL };

	(void)state;
	assert_int_equal(td_start_n(&E, 1, "8M"), 0);
	assert_int_equal(open_tier(E.bad_token, 1, 0, &t), HP_EAUTH);
	assert_non_null(strstr(hp_errmsg(), "wrong token"));
	assert_non_null(strstr(hp_errmsg(), E.d[0].addr));
	assert_true(td_log_has(&E, 0, "refused: wrong token"));
	unsetenv("HPDLF_TOKEN_FILE");
	assert_int_equal(open_tier(NULL, 1, 0, &t), HP_EAUTH);
	assert_non_null(strstr(hp_errmsg(), "requires a token"));
	assert_true(td_log_has(&E, 0, "refused: no token"));
	/* The command line says it too, and fails with status 1. */
	ls_bad[2] = E.list;
	assert_int_equal(td_run(&E, ls_bad, err, sizeof err), 1);
	assert_non_null(strstr(err, "wrong token"));
	/* The daemon still serves the right token. */
	assert_int_equal(open_tier(E.token, 1, 0, &t), 0);
	t->ops->close(t);
	td_stop_all(&E);
}

/* kill -9 of a daemon: its requests fail with -EHOSTDOWN within 2 s,
 * naming the daemon; the others keep working. */
static void test_kill_no_replicas(void **state)
{
	enum { N = 30 };
	struct hs_tier *t;
	uint64_t addr[N];
	struct hs_io io[N];
	uint8_t *buf = abuf((size_t)N * MiB);
	char where[128];
	int victim = 1, on_victim = 0;

	(void)state;
	assert_int_equal(td_start_n(&E, 3, "64M"), 0);
	assert_int_equal(open_tier(E.token, 1, 0, &t), 0);
	for (int i = 0; i < N; i++) {
		assert_int_equal(t->ops->place(t, MiB, &addr[i]), 0);
		td_fill(buf + (size_t)i * MiB, MiB, (uint64_t)i);
		io[i] = (struct hs_io){ .op = HS_IO_WRITE, .addr = addr[i], .buf = buf + (size_t)i * MiB, .len = MiB };
	}
	assert_true(run_batch(t, io, N, 10000) >= 0);
	uint64_t t_kill = td_now_ms();
	td_stop(&E, victim, SIGKILL);
	/* Reads issued right after the kill: none may hang, the victim's fail. */
	for (int i = 0; i < N; i++)
		io[i] = (struct hs_io){ .op = HS_IO_READ, .addr = addr[i], .buf = buf + (size_t)i * MiB, .len = MiB };
	assert_true(run_batch(t, io, N, 5000) >= 0);
	for (int i = 0; i < N; i++) {
		int dead = hs_remote_daemon_of(t, addr[i], where, sizeof where);
		if (!strcmp(where, E.d[victim].addr)) {
			on_victim++;
			if (io[i].res == 0)
				continue; /* read before the death was noticed: still right data */
			assert_int_equal(io[i].res, -EHOSTDOWN);
			assert_int_equal(dead, 1);
		} else {
			assert_int_equal(io[i].res, 0);
		}
	}
	assert_true(on_victim > 0);
	/* Detection within 2 s of the kill, whatever the traffic. */
	while (hs_remote_dead_count(t) == 0 && td_now_ms() - t_kill < 3000)
		usleep(10000);
	assert_int_equal(hs_remote_dead_count(t), 1);
	assert_true(td_now_ms() - t_kill < 2000);
	for (int i = 0; i < N; i++) {
		hs_remote_daemon_of(t, addr[i], where, sizeof where);
		int rc = hs_tier_rw(t, HS_IO_READ, addr[i], buf, MiB);
		assert_int_equal(rc, strcmp(where, E.d[victim].addr) ? 0 : -EHOSTDOWN);
	}
	/* New extents avoid the dead daemon. */
	for (int i = 0; i < 6; i++) {
		uint64_t a;
		assert_int_equal(t->ops->place(t, MiB, &a), 0);
		assert_int_equal(hs_remote_daemon_of(t, a, where, sizeof where), 0);
	}
	t->ops->close(t);
	free(buf);
	td_stop_all(&E);
}

/* With 2 replicas the job does not notice a death. */
static void test_kill_replicas(void **state)
{
	enum { N = 16 };
	struct hs_tier *t;
	uint64_t addr[N];
	uint8_t *w = abuf((size_t)N * MiB), *r = abuf((size_t)N * MiB);

	(void)state;
	assert_int_equal(td_start_n(&E, 3, "64M"), 0);
	assert_int_equal(open_tier(E.token, 2, 0, &t), 0);
	for (int i = 0; i < N; i++) {
		assert_int_equal(t->ops->place(t, MiB, &addr[i]), 0);
		td_fill(w + (size_t)i * MiB, MiB, 1000 + (uint64_t)i);
		assert_int_equal(hs_tier_rw(t, HS_IO_WRITE, addr[i], w + (size_t)i * MiB, MiB), 0);
	}
	td_stop(&E, 0, SIGKILL);
	for (int i = 0; i < N; i++) {
		memset(r + (size_t)i * MiB, 0, MiB);
		assert_int_equal(hs_tier_rw(t, HS_IO_READ, addr[i], r + (size_t)i * MiB, MiB), 0);
	}
	assert_memory_equal(r, w, (size_t)N * MiB);
	/* Writes after the death land on the survivor and read back. */
	td_fill(w, MiB, 4242);
	for (int i = 0; i < N; i++)
		assert_int_equal(hs_tier_rw(t, HS_IO_WRITE, addr[i], w, MiB), 0);
	for (int i = 0; i < N; i++) {
		assert_int_equal(hs_tier_rw(t, HS_IO_READ, addr[i], r, MiB), 0);
		assert_memory_equal(r, w, MiB);
	}
	assert_int_equal(hs_remote_dead_count(t), 1);
	t->ops->close(t);
	free(w);
	free(r);
	td_stop_all(&E);
}

static uint64_t daemon_used(void)
{
	struct hs_tier *t;
	struct hs_tier_stats st = { 0 };

	assert_int_equal(open_tier(E.token, 1, 0, &t), 0);
	assert_int_equal(t->ops->stats(t, &st), 0);
	t->ops->close(t);
	return st.used;
}

/* A client killed in the middle of writing: its memory returns to the pool. */
static void test_client_killed(void **state)
{
	int p[2];
	char c;

	(void)state;
	assert_int_equal(td_start_n(&E, 1, "64M"), 0);
	assert_int_equal(pipe(p), 0);
	pid_t pid = fork();
	if (pid == 0) {
		struct hs_tier *t;
		uint8_t *b = abuf(4 * MiB);
		uint64_t a;
		if (open_tier(E.token, 1, 0, &t) < 0)
			_exit(3);
		td_fill(b, 4 * MiB, 1);
		for (int i = 0; i < 10; i++)
			if (t->ops->place(t, 4 * MiB, &a) < 0)
				_exit(4);
		if (write(p[1], "x", 1) != 1)
			_exit(5);
		int rc;
		while ((rc = hs_tier_rw(t, HS_IO_WRITE, a, b, 4 * MiB)) == 0)
			;
		fprintf(stderr, "client: write failed: %s\n", hp_strerror(rc));
		_exit(6);
	}
	assert_int_equal(read(p[0], &c, 1), 1);
	usleep(50000);
	assert_true(daemon_used() >= 40ull * MiB);
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
	uint64_t t0 = td_now_ms(), used;
	while ((used = daemon_used()) != 0 && td_now_ms() - t0 < 4000)
		usleep(100000);
	assert_int_equal(used, 0);
	assert_true(td_log_has(&E, 0, "extents (41943040 bytes) freed"));
	close(p[0]);
	close(p[1]);
	td_stop_all(&E);
}

/* put/get/ls/rm; named tensors on --pmem survive a SIGTERM and restart. */
static void test_named_persist(void **state)
{
	char pm[600], in[600], out[600], pmarg[700], err[2048];
	uint8_t *data = abuf(300000), *back = abuf(300000);
	const char *extra[] = { "--pmem", pmarg, NULL };

	(void)state;
	snprintf(pm, sizeof pm, "%s/pmem.img", E.dir);
	snprintf(pmarg, sizeof pmarg, "%s:32M", pm);
	snprintf(in, sizeof in, "%s/in.bin", E.dir);
	snprintf(out, sizeof out, "%s/out.bin", E.dir);
	td_fill(data, 300000, 99);
	FILE *f = fopen(in, "w");
	assert_int_equal(fwrite(data, 1, 300000, f), 300000);
	fclose(f);
	assert_int_equal(td_start(&E, 0, "8M", extra), 0);
	const char *put[] = { "put", "weights", in, "--store", E.list, "--token-file", E.token, NULL };
	assert_int_equal(td_run(&E, put, err, sizeof err), 0);
	assert_int_not_equal(td_run(&E, put, err, sizeof err), 0); /* the name exists */
	assert_non_null(strstr(err, "already exists"));
	int st = td_stop(&E, 0, SIGTERM);
	assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	assert_true(td_log_has(&E, 0, "stopped"));
	assert_int_equal(td_start(&E, 0, "8M", extra), 0);
	assert_true(td_log_has(&E, 0, "recovered 1 named tensors"));
	const char *get[] = { "get", "weights", out, "--store", E.list, "--token-file", E.token, NULL };
	assert_int_equal(td_run(&E, get, err, sizeof err), 0);
	f = fopen(out, "r");
	assert_int_equal(fread(back, 1, 300000, f), 300000);
	assert_int_equal(fgetc(f), EOF);
	fclose(f);
	assert_memory_equal(back, data, 300000);
	const char *rm[] = { "rm", "weights", "--store", E.list, "--token-file", E.token, NULL };
	assert_int_equal(td_run(&E, rm, err, sizeof err), 0);
	assert_int_equal(td_run(&E, get, err, sizeof err), 2); /* no such name: a usage error */
	assert_non_null(strstr(err, "no tensor 'weights'"));
	free(data);
	free(back);
	td_stop_all(&E);
}

static void test_endpoints(void **state)
{
	char *s = NULL, hf[600];

	(void)state;
	assert_int_equal(hs_slurm_hostlist_expand("n[01-03,7],gpu1,x[8-9]y", &s), 0);
	assert_string_equal(s, "n01,n02,n03,n7,gpu1,x8y,x9y");
	free(s);
	assert_true(hs_slurm_hostlist_expand("n[1-", &s) < 0);
	assert_true(hs_slurm_hostlist_expand("n[3-1]", &s) < 0);
	snprintf(hf, sizeof hf, "%s/hosts", E.dir);
	FILE *f = fopen(hf, "w");
	fprintf(f, "# nodes\nalpha\n  beta:9000  \n\n[::1]\n");
	fclose(f);
	assert_int_equal(hs_remote_find_endpoints(NULL, hf, &s), 0);
	assert_string_equal(s, "alpha:7411,beta:9000,[::1]:7411");
	free(s);
	unsetenv("HPDLF_STORE");
	setenv("SLURM_JOB_NODELIST", "c[1-2]", 1);
	setenv("HPDLF_STORE_PORT", "7500", 1);
	assert_int_equal(hs_remote_find_endpoints(NULL, NULL, &s), 0);
	assert_string_equal(s, "c1:7500,c2:7500");
	free(s);
	unsetenv("SLURM_JOB_NODELIST");
	unsetenv("HPDLF_STORE_PORT");
	assert_int_equal(hs_remote_find_endpoints(NULL, NULL, &s), HP_EUSAGE);
}

/* The public path: hs_store_open opens a remote tier from its spec
 * (daemons, token file, replicas) and pages a tensor through it; a wrong
 * token fails naming the daemon; an optional tier nobody answers for is
 * left out (the next tier moves up), a required one fails. */
static void store_opts_remote(struct hs_store_opts *o, const char *daemons, const char *token, int replicas)
{
	hs_store_opts_init(o, sizeof *o);
	o->budget = 2 * MiB;
	o->chunk_size = MiB;
	o->ntiers = 1;
	o->tiers[0].kind = HS_TIER_REMOTE;
	o->tiers[0].remote.daemons = daemons;
	o->tiers[0].remote.token_file = token;
	o->tiers[0].remote.replicas = replicas;
}

static void test_store_open_remote(void **state)
{
	enum { CH = 8 };
	struct hs_store_opts o;
	struct hs_store *st;
	struct hs_tensor *x;
	struct hs_tensor_info ti = { .bytes = CH * MiB, .dtype = HP_U8 };
	struct hs_store_stats ss;
	uint8_t *w = abuf(CH * MiB), *p;

	(void)state;
	assert_int_equal(td_start_n(&E, 2, "16M"), 0);
	store_opts_remote(&o, E.list, E.token, 2);
	assert_int_equal(hs_store_open(&o, &st), 0);
	assert_int_equal(hs_tensor_create(st, &ti, &x), 0);
	td_fill(w, CH * MiB, 21);
	for (uint64_t i = 0; i < CH; i++) {
		assert_int_equal(hs_pin(x, i, 1, HS_PIN_OVERWRITE, (void **)&p), 0);
		memcpy(p, w + i * MiB, MiB);
		assert_int_equal(hs_unpin(x, i, 1), 0);
		assert_true(hs_evict(x, i, 1, 0) >= 0);
	}
	for (uint64_t i = 0; i < CH; i++) {
		assert_int_equal(hs_pin(x, i, 1, HS_PIN_READ, (void **)&p), 0);
		assert_memory_equal(p, w + i * MiB, MiB);
		assert_int_equal(hs_unpin(x, i, 1), 0);
	}
	assert_int_equal(hs_store_stats(st, &ss), 0);
	assert_int_equal(ss.ntiers, 2);
	assert_string_equal(ss.tier[1].name, "remote0");
	assert_true(ss.tier[1].writes >= CH && ss.tier[1].reads >= CH - 2);
	assert_true(ss.tier[1].used >= 2ull * CH * MiB - 4 * MiB); /* two copies of the chunks not resident */
	assert_int_equal(hs_tensor_drop(x), 0);
	hs_store_close(st);

	store_opts_remote(&o, E.list, E.bad_token, 1);
	assert_int_equal(hs_store_open(&o, &st), HP_EAUTH);
	assert_non_null(strstr(hp_errmsg(), E.d[0].addr));

	/* nobody listens on port 1 */
	struct hs_tier *t = (struct hs_tier *)&o; /* poisoned: hs_tier_open must set it */
	store_opts_remote(&o, "127.0.0.1:1", E.token, 1);
	o.tiers[0].remote.optional = 1;
	assert_int_equal(hs_tier_open(&o.tiers[0], &t), 0);
	assert_null(t);
	o.ntiers = 2;
	o.tiers[1] = (struct hs_tier_spec){ .kind = HS_TIER_NVME };
	assert_int_equal(hs_store_open(&o, &st), 0);
	assert_int_equal(hs_store_stats(st, &ss), 0);
	assert_int_equal(ss.ntiers, 2);
	assert_string_equal(ss.tier[1].name, "nvme0");
	hs_store_close(st);
	o.tiers[0].remote.optional = 0;
	assert_true(hs_store_open(&o, &st) < 0);
	assert_true(hs_tier_open(&o.tiers[0], &t) < 0);
	assert_null(t);
	/* an opened tier handed over: the store owns it */
	store_opts_remote(&o, E.list, E.token, 1);
	assert_int_equal(hs_tier_open(&o.tiers[0], &t), 0);
	assert_string_equal(t->name, "remote");
	o.tiers[0] = (struct hs_tier_spec){ .tier = t };
	assert_int_equal(hs_store_open(&o, &st), 0);
	hs_store_close(st);
	free(w);
	td_stop_all(&E);
}

static void log_sink(int level, const char *msg, void *arg)
{
	(void)arg;
	fprintf(stderr, "[pid %d] log %d: %s\n", (int)getpid(), level, msg);
}

static int stop_all(void **state)
{
	(void)state;
	td_stop_all(&E);
	return 0;
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(test_endpoints, stop_all),
		cmocka_unit_test_teardown(test_roundtrip, stop_all),
		cmocka_unit_test_teardown(test_split, stop_all),
		cmocka_unit_test_teardown(test_capacity, stop_all),
		cmocka_unit_test_teardown(test_auth, stop_all),
		cmocka_unit_test_teardown(test_kill_no_replicas, stop_all),
		cmocka_unit_test_teardown(test_kill_replicas, stop_all),
		cmocka_unit_test_teardown(test_client_killed, stop_all),
		cmocka_unit_test_teardown(test_named_persist, stop_all),
		cmocka_unit_test_teardown(test_store_open_remote, stop_all),
	};
	if (td_init(&E, argc, argv) < 0)
		return 1;
	hp_log_set(log_sink, NULL, HP_LOG_INFO);
	unsetenv("HPDLF_STORE");
	if (getenv("TD_FILTER"))
		cmocka_set_test_filter(getenv("TD_FILTER"));
	int rc = cmocka_run_group_tests(tests, NULL, NULL);
	td_cleanup(&E);
	return rc;
}
