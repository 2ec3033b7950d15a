/* The task net (exec/net.c) alone, with fake transitions: random plan
 * orders (kernels, recomputes, communications, loads split in parts,
 * write-backs, evictions, drops, in-place kernels) whose every prefix fits
 * the budget, fired by several compute workers and I/O threads that sleep a
 * random few microseconds.  The fakes keep their own account of what is
 * resident (independent of the net's tokens) and check that
 *   - resident bytes never exceed the budget (net of the reserved part),
 *   - a kernel finds its inputs resident, an eviction or drop finds its
 *     value resident and read by no running kernel,
 *   - every transition fires exactly once per run,
 * and each run must end within a deadline (a deadlock fails the test). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "hpdlf/error.h"
#include "exec/net.h"

#define PAGE 4096u
#define MAXV 256
#define MAXE 2048
#define MAXIO 4

static uint32_t rnd(uint32_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 17;
	*s ^= *s << 5;
	return *s;
}

/* ---- a random plan order ---- */

enum { V_NONE = 0, V_RES, V_TIER, V_DEAD };

struct kern {
	int in[3], out[2], nin, nout, inplace;
	uint64_t ws;
	int kind;
};

struct net_case {
	int nvalues, nweights;
	uint64_t vsize[MAXV];
	uint32_t nchunks[MAXV];
	int ne;
	struct hp_net_entry e[MAXE];
	int nk;
	struct kern k[MAXE];
	uint64_t budget, reserved;
	int workers, nio;
	/* what one run must fire */
	int expect_fired[HP_TR_NKINDS];     /* loads: entries, not parts */
	int expect_loads[MAXV], expect_removes[MAXV];
	/* the generator's state */
	char st[MAXV], dirty[MAXV];
	uint64_t resident;
};

static void emit(struct net_case *c, struct hp_net_entry e)
{
	assert_true(c->ne < MAXE);
	c->e[c->ne++] = e;
}

/* Value v leaves DRAM: written back if dirty, else evicted, or dropped (dead). */
static void remove_value(struct net_case *c, int v, int drop)
{
	int kind = drop ? HP_TR_DROP : c->dirty[v] ? HP_TR_WRITEBACK : HP_TR_EVICT;

	emit(c, (struct hp_net_entry){ .kind = (uint8_t)kind, .value = v });
	c->expect_fired[kind]++;
	c->expect_removes[v]++;
	c->resident -= c->vsize[v];
	c->st[v] = drop ? V_DEAD : V_TIER;
	c->dirty[v] = 0;
}

static int new_value(struct net_case *c, uint64_t bytes)
{
	int v = c->nvalues++;

	assert_true(v < MAXV);
	c->vsize[v] = bytes;
	c->nchunks[v] = (uint32_t)(bytes / PAGE);
	return v;
}

static int pick_input(struct net_case *c, uint32_t *seed, const int *taken, int n)
{
	for (int tries = 0; tries < 20; tries++) {
		int v = (int)(rnd(seed) % (uint32_t)c->nvalues), dup = 0;
		for (int j = 0; j < n; j++)
			dup |= taken[j] == v;
		if (!dup && (c->st[v] == V_RES || c->st[v] == V_TIER))
			return v;
	}
	return -1;
}

/* Make room for `need` more bytes, never removing the kernel's inputs. */
static void make_room(struct net_case *c, uint32_t *seed, const struct kern *k, uint64_t need, uint64_t avail)
{
	while (c->resident + need > avail) {
		int v = (int)(rnd(seed) % (uint32_t)c->nvalues), input = 0;
		for (int j = 0; j < k->nin; j++)
			input |= k->in[j] == v;
		if (c->st[v] == V_RES && !input)
			remove_value(c, v, v >= c->nweights && rnd(seed) % 3 == 0);
	}
}

static void gen_kernel(struct net_case *c, uint32_t *seed, int step, uint64_t avail)
{
	struct kern *k = &c->k[step];
	uint64_t need, total;

	for (int tries = 0;; tries++) {
		memset(k, 0, sizeof *k);
		k->nin = tries < 10 ? (int)(rnd(seed) % 4) : 0;
		for (int j = 0; j < k->nin; j++)
			if ((k->in[j] = pick_input(c, seed, k->in, j)) < 0)
				k->nin = j;
		k->nout = 1 + (int)(rnd(seed) % 2);
		k->kind = rnd(seed) % 10 == 0 ? HP_TR_RECOMPUTE : rnd(seed) % 10 == 0 ? HP_TR_COMM : HP_TR_KERNEL;
		k->inplace = k->kind != HP_TR_COMM && k->nin && k->in[0] >= c->nweights && rnd(seed) % 4 == 0;
		k->ws = k->kind == HP_TR_COMM || c->reserved ? 0 : (rnd(seed) % 3) * PAGE;
		total = need = k->ws;
		for (int j = 0; j < k->nin; j++)
			total += c->vsize[k->in[j]];
		for (int o = 0; o < k->nout; o++) {
			uint64_t b = o == 0 && k->inplace ? c->vsize[k->in[0]] : (1 + rnd(seed) % 4) * PAGE;
			k->out[o] = new_value(c, b);
			if (!(o == 0 && k->inplace))
				need += b, total += b;
		}
		if (total <= avail)
			break;
		c->nvalues -= k->nout; /* too big for the budget: draw again */
	}
	for (int j = 0; j < k->nin; j++)
		if (c->st[k->in[j]] == V_TIER)
			need += c->vsize[k->in[j]];
	make_room(c, seed, k, need, avail);
	for (int j = 0; j < k->nin; j++)
		if (c->st[k->in[j]] == V_TIER) {
			int v = k->in[j];
			emit(c, (struct hp_net_entry){ .kind = HP_TR_LOAD, .value = v });
			c->expect_fired[HP_TR_LOAD]++;
			c->expect_loads[v]++;
			c->st[v] = V_RES;
			c->resident += c->vsize[v];
		}
	emit(c, (struct hp_net_entry){ .kind = (uint8_t)k->kind, .step = step, .nin = k->nin, .in = k->in,
				       .nout = k->nout, .out = k->out, .inplace = (uint8_t)k->inplace,
				       .workspace = k->ws });
	c->expect_fired[k->kind]++;
	for (int o = 0; o < k->nout; o++) {
		c->st[k->out[o]] = V_RES;
		c->dirty[k->out[o]] = 1;
		if (!(o == 0 && k->inplace))
			c->resident += c->vsize[k->out[o]];
	}
	if (k->inplace)
		c->st[k->in[0]] = V_DEAD;
}

/* After a kernel: some values die (a drop of one not resident is left out
 * by the net: not expected to fire), some are evicted early. */
static void after_kernel(struct net_case *c, uint32_t *seed)
{
	for (int v = c->nweights; v < c->nvalues; v++) {
		uint32_t r = rnd(seed) % 16;
		if (c->st[v] == V_RES && r < 3)
			remove_value(c, v, 1);
		else if (c->st[v] == V_RES && r == 3)
			remove_value(c, v, 0);
		else if (c->st[v] == V_TIER && r == 4) {
			emit(c, (struct hp_net_entry){ .kind = HP_TR_DROP, .value = v });
			c->st[v] = V_DEAD;
		}
	}
}

static void gen_case(struct net_case *c, uint32_t *seed)
{
	int nk = 5 + (int)(rnd(seed) % 60);
	uint64_t avail;

	memset(c, 0, sizeof *c);
	c->budget = (12 + rnd(seed) % 40) * PAGE;
	c->reserved = rnd(seed) % 4 == 0 ? (1 + rnd(seed) % 3) * PAGE : 0;
	c->workers = 1 + (int)(rnd(seed) % 3);
	c->nio = 1 + (int)(rnd(seed) % MAXIO);
	avail = c->budget - c->reserved;
	c->nweights = 1 + (int)(rnd(seed) % 6);
	for (int w = 0; w < c->nweights; w++)
		c->st[new_value(c, (1 + rnd(seed) % 3) * PAGE)] = V_TIER;
	for (int s = 0; s < nk; s++) {
		gen_kernel(c, seed, s, avail);
		after_kernel(c, seed);
	}
	c->nk = nk;
	for (int v = 0; v < c->nvalues; v++) /* nothing resident at the end: runs repeat */
		if (c->st[v] == V_RES)
			remove_value(c, v, v >= c->nweights);
}

/* The planner's promise, checked independently of the generator: granting
 * in plan order, every prefix fits (what it takes, less what the entries
 * before it gave back). */
static void check_prefixes(const struct net_case *c)
{
	char res[MAXV] = { 0 };
	uint64_t taken = 0, given = 0, avail = c->budget - c->reserved;

	for (int i = 0; i < c->ne; i++) {
		const struct hp_net_entry *e = &c->e[i];
		uint64_t need = 0, rel = 0;
		if (e->kind == HP_TR_LOAD) {
			need = c->vsize[e->value];
			res[e->value] = 1;
		} else if (e->kind == HP_TR_KERNEL || e->kind == HP_TR_RECOMPUTE || e->kind == HP_TR_COMM) {
			need = rel = e->workspace;
			for (int o = e->inplace ? 1 : 0; o < e->nout; o++)
				need += c->vsize[e->out[o]], res[e->out[o]] = 1;
			if (e->inplace)
				res[e->in[0]] = 0, res[e->out[0]] = 1;
		} else if (res[e->value]) {
			rel = c->vsize[e->value];
			res[e->value] = 0;
		}
		taken += need;
		assert_true(taken - given <= avail);
		given += rel;
	}
	assert_int_equal(taken, given);
}

/* ---- fake transitions ---- */

struct fake {
	pthread_mutex_t mu;     /* first: a reset clears what follows */
	const struct net_case *c;
	uint32_t seed;
	uint64_t resident, max_resident;
	uint64_t loaded[MAXV];  /* bytes of v loaded or written so far */
	int readers[MAXV];      /* kernels reading v right now */
	int kfired[MAXE];
	int loads[MAXV], removes[MAXV];
	int fired[HP_TR_NKINDS];
	int multi;              /* batches of more than one (fire_io_batch) */
	int bad;                /* a check failed (reported at the end: not from a worker) */
	char why[200];
};

static void fail_fake(struct fake *f, const char *what, int v)
{
	if (!f->bad)
		snprintf(f->why, sizeof f->why, "%s (value %d)", what, v);
	f->bad = 1;
}

static void take(struct fake *f, uint64_t bytes)
{
	f->resident += bytes;
	if (f->resident > f->max_resident)
		f->max_resident = f->resident;
}

static void nap(struct fake *f)
{
	unsigned us;

	pthread_mutex_lock(&f->mu);
	us = rnd(&f->seed) % 60;
	pthread_mutex_unlock(&f->mu);
	if (us > 40)
		usleep(us);
}

static int fake_compute(struct fake *f, int kind, int step, int worker)
{
	const struct net_case *c = f->c;
	const struct kern *k = &c->k[step];

	pthread_mutex_lock(&f->mu);
	if (step < 0 || step >= c->nk || k->kind != kind || worker < 0 || worker >= c->workers)
		fail_fake(f, "kernel fired with a bad step or worker", step);
	f->kfired[step]++;
	f->fired[kind]++;
	for (int j = 0; j < k->nin; j++) {
		if (f->loaded[k->in[j]] != c->vsize[k->in[j]])
			fail_fake(f, "kernel input not resident", k->in[j]);
		f->readers[k->in[j]]++;
	}
	take(f, k->ws);
	for (int o = 0; o < k->nout; o++) {
		if (!(o == 0 && k->inplace))
			take(f, c->vsize[k->out[o]]);
		f->loaded[k->out[o]] = c->vsize[k->out[o]];
	}
	pthread_mutex_unlock(&f->mu);
	nap(f);
	pthread_mutex_lock(&f->mu);
	f->resident -= k->ws;
	for (int j = 0; j < k->nin; j++)
		f->readers[k->in[j]]--;
	if (k->inplace)
		f->loaded[k->in[0]] = 0;
	pthread_mutex_unlock(&f->mu);
	return 0;
}

static int fake_kernel(void *arg, int step, int worker, int lane)
{
	(void)lane;
	return fake_compute(arg, HP_TR_KERNEL, step, worker);
}

static int fake_recompute(void *arg, int step, int worker, int lane)
{
	(void)lane;
	return fake_compute(arg, HP_TR_RECOMPUTE, step, worker);
}

static int fake_comm(void *arg, int step, int lane)
{
	(void)lane; /* fired by an I/O thread */
	return fake_compute(arg, HP_TR_COMM, step, 0);
}

/* What firing a load or removal does at once (the checks, the bytes a
 * load takes); returns the bytes a removal gives back when it is done. */
static uint64_t fake_io_begin(struct fake *f, int kind, int v, uint64_t first, uint64_t nchunks)
{
	const struct net_case *c = f->c;
	uint64_t bytes = c->vsize[v];

	if (nchunks) { /* one part of a split load or write-back */
		uint64_t end = (first + nchunks) * PAGE < bytes ? (first + nchunks) * PAGE : bytes;
		bytes = end - first * PAGE;
	}
	pthread_mutex_lock(&f->mu);
	f->fired[kind]++;
	if (kind == HP_TR_LOAD) {
		if (f->loaded[v] + bytes > c->vsize[v])
			fail_fake(f, "loaded more than the value holds", v);
		if (!nchunks || first == 0)
			f->loads[v]++;
		f->loaded[v] += bytes;
		take(f, bytes);
		pthread_mutex_unlock(&f->mu);
		return 0;
	}
	if (f->readers[v])
		fail_fake(f, "removing a value a running kernel reads", v);
	if (kind == HP_TR_WRITEBACK && nchunks) { /* one part: after those before it, its bytes back */
		if (f->loaded[v] != c->vsize[v] - first * PAGE)
			fail_fake(f, "write-back part of a value not resident, or before the parts ahead of it", v);
		f->removes[v] += first == 0;
		f->loaded[v] -= bytes;
		pthread_mutex_unlock(&f->mu);
		return bytes;
	}
	if (f->loaded[v] != c->vsize[v])
		fail_fake(f, "removing a value not resident", v);
	f->removes[v]++;
	f->loaded[v] = 0;
	pthread_mutex_unlock(&f->mu);
	return c->vsize[v];
}

static void give(struct fake *f, uint64_t bytes)
{
	pthread_mutex_lock(&f->mu);
	f->resident -= bytes;
	pthread_mutex_unlock(&f->mu);
}

static int fake_io(void *arg, int kind, int v, uint64_t first, uint64_t nchunks, int lane)
{
	struct fake *f = arg;
	uint64_t back = fake_io_begin(f, kind, v, first, nchunks);

	(void)lane;
	nap(f); /* a removal's bytes are given back when the write-back is done */
	give(f, back);
	return 0;
}

static const struct hp_net_ops fake_ops = { .fire_kernel = fake_kernel, .fire_io = fake_io,
					    .fire_comm = fake_comm, .fire_recompute = fake_recompute };

/* Loads and write-backs fired together: each must be one the net may fire
 * now, alone (the checks of fake_io), and be a load or a write-back. */
static void fake_io_batch(void *arg, struct hp_net_io *ios, int n, int lane)
{
	struct fake *f = arg;

	if (n > 1) {
		pthread_mutex_lock(&f->mu);
		f->multi++;
		pthread_mutex_unlock(&f->mu);
	}
	for (int k = 0; k < n; k++) {
		if (ios[k].kind != HP_TR_LOAD && ios[k].kind != HP_TR_WRITEBACK) {
			pthread_mutex_lock(&f->mu);
			fail_fake(f, "batched an I/O that is neither a load nor a write-back", ios[k].value);
			pthread_mutex_unlock(&f->mu);
		}
		ios[k].rc = fake_io(arg, ios[k].kind, ios[k].value, ios[k].first, ios[k].nchunks, lane);
	}
}

static const struct hp_net_ops fake_ops_batch = { .fire_kernel = fake_kernel, .fire_io = fake_io,
						  .fire_comm = fake_comm, .fire_recompute = fake_recompute,
						  .fire_io_batch = fake_io_batch };

/* Inline I/O (no I/O threads): a batch started is in flight until polled
 * done, which takes 0 to 3 polls; its removals give their bytes back only
 * then.  Counted: batches in flight at once, polls answered "not yet". */
struct fake_flight {
	uint64_t back;
	int polls;
};

static int in_flight, most_in_flight, not_yet;

static void check_batch_kinds(struct fake *f, const struct hp_net_io *ios, int n)
{
	pthread_mutex_lock(&f->mu);
	f->multi += n > 1;
	for (int k = 0; k < n; k++)
		if (ios[k].kind != HP_TR_LOAD && ios[k].kind != HP_TR_WRITEBACK)
			fail_fake(f, "batched an I/O that is neither a load nor a write-back", ios[k].value);
	pthread_mutex_unlock(&f->mu);
}

/* io_plug (net.h): counted are the plug sessions that started several
 * batches, and those among them with a batch of write-backs only (the
 * net defers those to go with the next batch).  With the op, every batch
 * must start inside a session. */
static int plug_on, plug_depth, plug_started, plug_wb, plug_joined, plug_wb_joined, plug_outside;

static void fake_plug(void *arg, int on)
{
	(void)arg;
	if (on) {
		if (plug_depth++ == 0)
			plug_started = plug_wb = 0;
		return;
	}
	if (--plug_depth == 0 && plug_started > 1) {
		plug_joined++;
		plug_wb_joined += plug_wb;
	}
}

static void *fake_start(void *arg, struct hp_net_io *ios, int n, int lane)
{
	struct fake *f = arg;
	struct fake_flight *x = calloc(1, sizeof *x);
	int wb = 1;

	(void)lane;
	for (int k = 0; k < n; k++)
		wb &= ios[k].kind == HP_TR_WRITEBACK;
	plug_started++;
	plug_wb |= wb;
	plug_outside += plug_on && !plug_depth;
	check_batch_kinds(f, ios, n);
	for (int k = 0; k < n; k++) {
		x->back += fake_io_begin(f, ios[k].kind, ios[k].value, ios[k].first, ios[k].nchunks);
		ios[k].rc = 0;
	}
	pthread_mutex_lock(&f->mu);
	x->polls = (int)(rnd(&f->seed) % 4);
	pthread_mutex_unlock(&f->mu);
	if (++in_flight > most_in_flight)
		most_in_flight = in_flight;
	return x;
}

static int fake_done(void *arg, void *h, struct hp_net_io *ios, int n, int wait)
{
	struct fake_flight *x = h;

	if (!wait && x->polls-- > 0) {
		not_yet++;
		return 0;
	}
	for (int k = 0; k < n; k++)
		ios[k].rc = 0;
	give(arg, x->back);
	in_flight--;
	free(x);
	return 1;
}

static const struct hp_net_ops fake_ops_inline = { .fire_kernel = fake_kernel, .fire_io = fake_io,
						   .fire_comm = fake_comm, .fire_recompute = fake_recompute,
						   .fire_io_batch = fake_io_batch, .start_io_batch = fake_start,
						   .io_batch_done = fake_done };

static const struct hp_net_ops fake_ops_plug = { .fire_kernel = fake_kernel, .fire_io = fake_io,
						 .fire_comm = fake_comm, .fire_recompute = fake_recompute,
						 .fire_io_batch = fake_io_batch, .start_io_batch = fake_start,
						 .io_batch_done = fake_done, .io_plug = fake_plug };

/* ---- running with a deadline ---- */

struct runner {
	struct hp_net *n;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int done, rc;
	char msg[256];          /* the run's error message (thread-local there) */
};

static void *run_main(void *arg)
{
	struct runner *r = arg;
	int rc = hp_net_run(r->n);

	pthread_mutex_lock(&r->mu);
	r->rc = rc;
	snprintf(r->msg, sizeof r->msg, "%s", rc < 0 ? hp_errmsg() : "");
	r->done = 1;
	pthread_cond_signal(&r->cv);
	pthread_mutex_unlock(&r->mu);
	return NULL;
}

/* 0, or -ETIMEDOUT if the run did not end within `seconds` (a deadlock:
 * the net and its threads are left behind, the test fails). */
static int run_with_deadline(struct hp_net *n, int seconds, char *msg, size_t len)
{
	static struct runner r; /* outlives a deadlocked run */
	r = (struct runner){ .n = n };
	struct timespec dl;
	pthread_t t;
	int timed_out = 0;

	pthread_mutex_init(&r.mu, NULL);
	pthread_cond_init(&r.cv, NULL);
	assert_int_equal(pthread_create(&t, NULL, run_main, &r), 0);
	clock_gettime(CLOCK_REALTIME, &dl);
	dl.tv_sec += seconds;
	pthread_mutex_lock(&r.mu);
	while (!r.done && !timed_out)
		timed_out = pthread_cond_timedwait(&r.cv, &r.mu, &dl) == ETIMEDOUT;
	pthread_mutex_unlock(&r.mu);
	if (!r.done)
		return -ETIMEDOUT;
	pthread_join(t, NULL);
	if (msg)
		snprintf(msg, len, "%s", r.msg);
	return r.rc;
}

static void check_run(struct fake *f, const struct hp_net *n, int seed)
{
	const struct net_case *c = f->c;
	struct hp_net_stats st;
	int total = 0;

	if (f->bad)
		fail_msg("net seed %d: %s", seed, f->why);
	if (f->max_resident > c->budget - c->reserved)
		fail_msg("net seed %d: %llu bytes resident, budget %llu (reserved %llu)", seed,
			 (unsigned long long)f->max_resident, (unsigned long long)c->budget,
			 (unsigned long long)c->reserved);
	assert_int_equal(f->resident, 0);
	for (int s = 0; s < c->nk; s++)
		assert_int_equal(f->kfired[s], 1);
	for (int v = 0; v < c->nvalues; v++) {
		assert_int_equal(f->loads[v], c->expect_loads[v]);
		assert_int_equal(f->removes[v], c->expect_removes[v]);
	}
	hp_net_stats(n, &st);
	for (int k = 0; k < HP_TR_NKINDS; k++) {
		if (k != HP_TR_LOAD && k != HP_TR_WRITEBACK) /* those two: entries, or more in parts */
			assert_int_equal(f->fired[k], c->expect_fired[k]);
		else
			assert_true(f->fired[k] >= c->expect_fired[k]);
		assert_int_equal(st.fired[k], (uint64_t)f->fired[k]);
		total += f->fired[k];
	}
	assert_int_equal(total, hp_net_transitions(n));
}

static void reset_fake(struct fake *f, const struct net_case *c, uint32_t seed)
{
	memset((char *)f + offsetof(struct fake, c), 0, sizeof *f - offsetof(struct fake, c));
	f->c = c;
	f->seed = seed | 1;
}

static void random_nets(const struct hp_net_ops *ops)
{
	int inl = ops->start_io_batch != NULL; /* one worker, no I/O threads */
	struct net_case *c = malloc(sizeof *c);
	struct fake *f = calloc(1, sizeof *f);
	long transitions = 0, parts = 0, wbparts = 0, multi = 0;
	double fullest = 0;

	assert_non_null(c);
	assert_non_null(f);
	pthread_mutex_init(&f->mu, NULL);
	for (int round = 0; round < 300; round++) {
		uint32_t seed = 0x9e3779b9u ^ (uint32_t)(round * 7919 + 1);
		struct hp_net *n = NULL;
		gen_case(c, &seed);
		check_prefixes(c);
		struct hp_net_desc d = { .nvalues = c->nvalues, .vsize = c->vsize, .nchunks = c->nchunks,
					 .chunk = PAGE, .nentries = c->ne, .entries = c->e, .budget = c->budget,
					 .reserved = c->reserved, .workers = c->workers, .io_threads = c->nio,
					 .wb_part = round % 2 ? PAGE : 0 };
		if (inl) {
			c->workers = d.workers = 1;
			d.io_threads = 0;
		}
		assert_int_equal(hp_net_create(&d, ops, f, &n), 0);
		for (int run = 0; run < 2; run++) {
			reset_fake(f, c, seed + (uint32_t)run);
			int rc = run_with_deadline(n, 30, NULL, 0);
			if (rc == -ETIMEDOUT)
				fail_msg("net seed %d run %d: no progress in 30 s (deadlock)", round, run);
			assert_int_equal(rc, 0);
			check_run(f, n, round);
			multi += f->multi;
			transitions += hp_net_transitions(n);
			parts += f->fired[HP_TR_LOAD] - c->expect_fired[HP_TR_LOAD];
			wbparts += f->fired[HP_TR_WRITEBACK] - c->expect_fired[HP_TR_WRITEBACK];
			if ((double)f->max_resident / (double)(c->budget - c->reserved) > fullest)
				fullest = (double)f->max_resident / (double)(c->budget - c->reserved);
		}
		hp_net_destroy(n);
	}
	/* the test is only as good as its nets: they must press on the budget */
	print_message("%ld transitions fired, %ld extra load parts, %ld extra write-back parts, resident up to "
		      "%.0f%% of the budget, %ld batches of several loads and write-backs\n", transitions, parts, wbparts,
		      100 * fullest, multi);
	/* inline: loads are read and write-backs written whole */
	assert_true((inl ? parts == 0 && wbparts == 0 : parts > 0 && wbparts > 0) && fullest > 0.9);
	if (ops->fire_io_batch)
		assert_true(multi > 0); /* the batches are exercised */
	if (inl) { /* and so are flights: several at once, polled before done */
		print_message("inline I/O: up to %d batches in flight, %d polls answered not yet\n", most_in_flight,
			      not_yet);
		assert_true(most_in_flight > 1 && not_yet > 0 && in_flight == 0);
	}
	pthread_mutex_destroy(&f->mu);
	free(f);
	free(c);
}

static void test_random_nets(void **state)
{
	(void)state;
	random_nets(&fake_ops);
}

/* The same nets with the loads and write-backs that are ready together
 * fired as one batch: same budget, order and count checks. */
static void test_random_nets_batched(void **state)
{
	(void)state;
	random_nets(&fake_ops_batch);
}

/* The same nets with one compute worker issuing the loads and write-backs
 * itself, in flight while it computes (net.h, inline I/O): same checks. */
static void test_random_nets_inline(void **state)
{
	(void)state;
	random_nets(&fake_ops_inline);
}

/* Inline I/O with io_plug: batches of write-backs only wait for the next
 * batch (or the worker's wait, or two kernels) and start with it in one
 * plug session.  Same checks (a write-back never started would deadlock
 * the run or leave its bytes resident), and the deferral is exercised. */
static void test_random_nets_plug(void **state)
{
	(void)state;
	plug_on = 1;
	plug_joined = plug_wb_joined = plug_outside = 0;
	random_nets(&fake_ops_plug);
	plug_on = 0;
	print_message("plug: %d sessions started several batches, %d of them with deferred write-backs\n",
		      plug_joined, plug_wb_joined);
	assert_int_equal(plug_depth, 0);
	assert_int_equal(plug_outside, 0);
	assert_true(plug_wb_joined > 0);
}

/* Loads ready together go to as many I/O threads at once: each wake-up
 * goes to a different idle thread (net.c, wake_one).  Four loads, each
 * held in fire_io until all four are in it (or 5 s pass), then a kernel
 * reading them; 1 compute worker (it may take a load itself when no I/O
 * thread is idle), 4 I/O threads.  Run several times, the threads idle
 * between runs. */
static pthread_mutex_t spread_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t spread_cv = PTHREAD_COND_INITIALIZER;
static int spread_in, spread_most, spread_gen;

static int spread_io(void *arg, int kind, int v, uint64_t first, uint64_t nchunks, int lane)
{
	struct timespec dl;

	(void)arg, (void)v, (void)first, (void)nchunks, (void)lane;
	if (kind != HP_TR_LOAD)
		return 0;
	clock_gettime(CLOCK_REALTIME, &dl);
	dl.tv_sec += 5;
	pthread_mutex_lock(&spread_mu);
	int gen = spread_gen;
	if (++spread_in > spread_most)
		spread_most = spread_in;
	if (spread_in == 4) {
		spread_gen++; /* the four are in: all go on */
		pthread_cond_broadcast(&spread_cv);
	}
	while (gen == spread_gen && pthread_cond_timedwait(&spread_cv, &spread_mu, &dl) != ETIMEDOUT)
		;
	spread_in--;
	pthread_mutex_unlock(&spread_mu);
	return 0;
}

static int spread_kernel(void *arg, int step, int worker, int lane)
{
	(void)arg, (void)step, (void)worker, (void)lane;
	return 0;
}

static void test_io_wakes_spread(void **state)
{
	static const struct hp_net_ops ops = { .fire_kernel = spread_kernel, .fire_io = spread_io };
	uint64_t vsize[5] = { PAGE, PAGE, PAGE, PAGE, PAGE };
	int in[4] = { 0, 1, 2, 3 }, out[1] = { 4 };
	struct hp_net_entry e[6];
	struct hp_net *n;

	(void)state;
	for (int v = 0; v < 4; v++)
		e[v] = (struct hp_net_entry){ .kind = HP_TR_LOAD, .value = v };
	e[4] = (struct hp_net_entry){ .kind = HP_TR_KERNEL, .step = 0, .nin = 4, .in = in, .nout = 1, .out = out };
	e[5] = (struct hp_net_entry){ .kind = HP_TR_DROP, .value = 4 };
	struct hp_net_desc d = { .nvalues = 5, .vsize = vsize, .chunk = PAGE, .nentries = 6, .entries = e,
				 .budget = 64 * PAGE, .workers = 1, .io_threads = 4 };
	assert_int_equal(hp_net_create(&d, &ops, NULL, &n), 0);
	for (int r = 0; r < 20; r++) {
		spread_most = 0;
		assert_int_equal(run_with_deadline(n, 60, NULL, 0), 0);
		if (spread_most != 4)
			fail_msg("run %d: at most %d of the 4 ready loads in flight at once", r, spread_most);
		usleep(1000); /* the I/O threads go idle */
	}
	hp_net_destroy(n);
}

/* Loads that may share a batch wake one I/O thread, not one each: the
 * thread woken takes all of them in its batch (fire_batch), and the others
 * woke for nothing, a context switch each that took a core from the
 * kernels (ResNet-18 trained at 25% of its peak on 2 cores: its compute
 * thread was preempted ~235 times a step).  Eight loads granted together,
 * a kernel reading them, a drop; 4 I/O threads idle at each start: at most
 * one wake-up for the loads and one for the drop (before: one per load, 4
 * and 1). */
static int batch_wakes_kernel(void *arg, int step, int worker, int lane)
{
	(void)arg, (void)step, (void)worker, (void)lane;
	return 0;
}

static int batch_wakes_one(void *arg, int kind, int v, uint64_t first, uint64_t nchunks, int lane)
{
	(void)arg, (void)kind, (void)v, (void)first, (void)nchunks, (void)lane;
	return 0;
}

static void batch_wakes_io(void *arg, struct hp_net_io *ios, int n, int lane)
{
	(void)arg, (void)lane;
	for (int k = 0; k < n; k++)
		ios[k].rc = 0;
}

static void test_io_batch_wakes(void **state)
{
	static const struct hp_net_ops ops = { .fire_kernel = batch_wakes_kernel, .fire_io = batch_wakes_one,
					       .fire_io_batch = batch_wakes_io };
	uint64_t vsize[9];
	int in[8] = { 0, 1, 2, 3, 4, 5, 6, 7 }, out[1] = { 8 };
	struct hp_net_entry e[10];
	struct hp_net_stats st;
	struct hp_net *n;

	(void)state;
	for (int v = 0; v < 9; v++)
		vsize[v] = PAGE;
	for (int v = 0; v < 8; v++)
		e[v] = (struct hp_net_entry){ .kind = HP_TR_LOAD, .value = v };
	e[8] = (struct hp_net_entry){ .kind = HP_TR_KERNEL, .step = 0, .nin = 8, .in = in, .nout = 1, .out = out };
	e[9] = (struct hp_net_entry){ .kind = HP_TR_DROP, .value = 8 };
	struct hp_net_desc d = { .nvalues = 9, .vsize = vsize, .chunk = PAGE, .nentries = 10, .entries = e,
				 .budget = 64 * PAGE, .workers = 1, .io_threads = 4 };
	assert_int_equal(hp_net_create(&d, &ops, NULL, &n), 0);
	for (int r = 0; r < 20; r++) {
		usleep(2000); /* the I/O threads go idle */
		assert_int_equal(run_with_deadline(n, 60, NULL, 0), 0);
		hp_net_stats(n, &st);
		if (st.wakes[1] > 2)
			fail_msg("run %d: %llu I/O threads woken for one batch of 8 loads and a drop", r,
				 (unsigned long long)st.wakes[1]);
	}
	hp_net_destroy(n);
}

/* A failing transition stops granting; the run returns its message. */
static int failing_kernel(void *arg, int step, int worker, int lane)
{
	(void)arg, (void)worker, (void)lane;
	return step == 2 ? hp_error(-EIO, "kernel %d failed", step) : 0;
}

static int ok_io(void *arg, int kind, int v, uint64_t first, uint64_t nchunks, int lane)
{
	(void)arg, (void)kind, (void)v, (void)first, (void)nchunks, (void)lane;
	return 0;
}

static void test_failure_stops(void **state)
{
	static const struct hp_net_ops ops = { .fire_kernel = failing_kernel, .fire_io = ok_io };
	uint64_t vsize[6] = { PAGE, PAGE, PAGE, PAGE, PAGE, PAGE };
	int io[6][1] = { { 0 }, { 1 }, { 2 }, { 3 }, { 4 }, { 5 } };
	struct hp_net_entry e[5];
	struct hp_net *n;
	char msg[256];

	(void)state;
	for (int s = 0; s < 5; s++) /* a chain: value s -> value s+1 */
		e[s] = (struct hp_net_entry){ .kind = HP_TR_KERNEL, .step = s, .nin = s ? 1 : 0, .in = io[s],
					      .nout = 1, .out = io[s + 1] };
	struct hp_net_desc d = { .nvalues = 6, .vsize = vsize, .chunk = PAGE, .nentries = 5, .entries = e,
				 .budget = 64 * PAGE, .workers = 2, .io_threads = 2 };
	assert_int_equal(hp_net_create(&d, &ops, NULL, &n), 0);
	assert_int_equal(run_with_deadline(n, 30, msg, sizeof msg), -EIO);
	assert_non_null(strstr(msg, "kernel 2 failed"));
	hp_net_destroy(n);
}

/* Values kept resident from before the run (hp_net_note_resident) take
 * more of the budget than the plan left them: the first kernel can never
 * be granted its output.  The run ends with HP_EBUDGET and says so; it
 * used to leave every worker asleep (a pipeline stage out of core hung). */
static void test_stuck_run_fails(void **state)
{
	static const struct hp_net_ops ops = { .fire_kernel = failing_kernel, .fire_io = ok_io };
	uint64_t vsize[4] = { PAGE, PAGE, PAGE, PAGE };
	int io[4][1] = { { 0 }, { 1 }, { 2 }, { 3 } };
	struct hp_net_entry e[2];
	struct hp_net *n;
	char msg[512];

	(void)state;
	for (int s = 0; s < 2; s++) /* value s+1 -> value s+2 */
		e[s] = (struct hp_net_entry){ .kind = HP_TR_KERNEL, .step = s, .nin = 1, .in = io[s + 1], .nout = 1,
					      .out = io[s + 2] };
	struct hp_net_desc d = { .nvalues = 4, .vsize = vsize, .chunk = PAGE, .nentries = 2, .entries = e,
				 .budget = 2 * PAGE, .workers = 1, .io_threads = 1 };
	assert_int_equal(hp_net_create(&d, &ops, NULL, &n), 0);
	hp_net_note_resident(n, 0); /* kept from before: takes the page the plan gave the output */
	hp_net_note_resident(n, 1);
	assert_int_equal(run_with_deadline(n, 30, msg, sizeof msg), HP_EBUDGET);
	assert_non_null(strstr(msg, "cannot go on"));
	hp_net_destroy(n);
}

/* A write-back in parts gives back each part's bytes when it lands, so a
 * load waiting for its room starts before the whole value is out (net.c,
 * add_writeback).  Kernel 0 makes w (4 pages); w is written back; u (4
 * pages, on the tier) is loaded for kernel 1; the budget leaves u one page
 * until w goes.  Each write-back part takes 20 ms: the load's parts that
 * need w's room must start while w's later parts are still being written,
 * and no two parts of w may be written at once (parts side by side would
 * land together). */
static pthread_mutex_t wbp_mu = PTHREAD_MUTEX_INITIALIZER;
static int wbp_in, wbp_most, wbp_left, wbp_early, wbp_parts;

static int wbp_io(void *arg, int kind, int v, uint64_t first, uint64_t nchunks, int lane)
{
	(void)arg, (void)v, (void)lane;
	pthread_mutex_lock(&wbp_mu);
	if (kind == HP_TR_LOAD && first > 0 && wbp_left > 0)
		wbp_early++; /* a load part granted room w's later parts still hold */
	if (kind == HP_TR_WRITEBACK) {
		wbp_parts++;
		if (++wbp_in > wbp_most)
			wbp_most = wbp_in;
	}
	pthread_mutex_unlock(&wbp_mu);
	if (kind != HP_TR_WRITEBACK)
		return 0;
	usleep(20000);
	pthread_mutex_lock(&wbp_mu);
	wbp_in--;
	wbp_left -= (int)(nchunks ? nchunks : 4);
	pthread_mutex_unlock(&wbp_mu);
	return 0;
}

static void test_writeback_parts_free_early(void **state)
{
	static const struct hp_net_ops ops = { .fire_kernel = spread_kernel, .fire_io = wbp_io };
	uint64_t vsize[3] = { 4 * PAGE, 4 * PAGE, PAGE };
	uint32_t nch[3] = { 4, 4, 1 };
	int w[1] = { 0 }, u[1] = { 1 }, y[1] = { 2 };
	struct hp_net_entry e[6] = {
		{ .kind = HP_TR_KERNEL, .step = 0, .nout = 1, .out = w },
		{ .kind = HP_TR_WRITEBACK, .value = 0 },
		{ .kind = HP_TR_LOAD, .value = 1 },
		{ .kind = HP_TR_KERNEL, .step = 1, .nin = 1, .in = u, .nout = 1, .out = y },
		{ .kind = HP_TR_DROP, .value = 1 },
		{ .kind = HP_TR_DROP, .value = 2 },
	};
	struct hp_net_desc d = { .nvalues = 3, .vsize = vsize, .nchunks = nch, .chunk = PAGE, .wb_part = PAGE,
				 .nentries = 6, .entries = e, .budget = 5 * PAGE, .workers = 1, .io_threads = 4 };
	struct hp_net *n;

	(void)state;
	assert_int_equal(hp_net_create(&d, &ops, NULL, &n), 0);
	for (int r = 0; r < 3; r++) {
		wbp_in = wbp_most = wbp_early = wbp_parts = 0;
		wbp_left = 4;
		assert_int_equal(run_with_deadline(n, 60, NULL, 0), 0);
		if (wbp_parts < 2 || wbp_early == 0 || wbp_most != 1)
			fail_msg("run %d: w written in %d parts, %d at most at once; %d of u's load parts started while "
				 "w's later parts were being written", r, wbp_parts, wbp_most, wbp_early);
	}
	hp_net_destroy(n);
}

/* A write-back with no load after it before the next kernel goes whole:
 * no load waits for its room, and a part's frames are less than a load's
 * run (net.c, load_follows).  Kernel 0 makes w, w is written back, kernel
 * 1 makes y. */
static void test_writeback_whole_without_load(void **state)
{
	static const struct hp_net_ops ops = { .fire_kernel = spread_kernel, .fire_io = wbp_io };
	uint64_t vsize[2] = { 4 * PAGE, PAGE };
	uint32_t nch[2] = { 4, 1 };
	int w[1] = { 0 }, y[1] = { 1 };
	struct hp_net_entry e[4] = {
		{ .kind = HP_TR_KERNEL, .step = 0, .nout = 1, .out = w },
		{ .kind = HP_TR_WRITEBACK, .value = 0 },
		{ .kind = HP_TR_KERNEL, .step = 1, .nout = 1, .out = y },
		{ .kind = HP_TR_DROP, .value = 1 },
	};
	struct hp_net_desc d = { .nvalues = 2, .vsize = vsize, .nchunks = nch, .chunk = PAGE, .wb_part = PAGE,
				 .nentries = 4, .entries = e, .budget = 5 * PAGE, .workers = 1, .io_threads = 4 };
	struct hp_net *n;

	(void)state;
	assert_int_equal(hp_net_create(&d, &ops, NULL, &n), 0);
	wbp_in = wbp_most = wbp_early = wbp_parts = 0;
	wbp_left = 4;
	assert_int_equal(run_with_deadline(n, 60, NULL, 0), 0);
	if (wbp_parts != 1)
		fail_msg("w written in %d parts with no load after it", wbp_parts);
	hp_net_destroy(n);
}

/* A description naming a transition kind without its op is refused. */
static void test_missing_op(void **state)
{
	static const struct hp_net_ops ops = { .fire_kernel = failing_kernel, .fire_io = ok_io };
	uint64_t vsize[1] = { PAGE };
	int out[1] = { 0 };
	struct hp_net_entry e = { .kind = HP_TR_COMM, .nout = 1, .out = out };
	struct hp_net_desc d = { .nvalues = 1, .vsize = vsize, .chunk = PAGE, .nentries = 1, .entries = &e,
				 .budget = PAGE };
	struct hp_net *n = (struct hp_net *)(uintptr_t)1;

	(void)state;
	assert_true(hp_net_create(&d, &ops, NULL, &n) < 0);
	assert_null(n);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_random_nets),
		cmocka_unit_test(test_random_nets_batched),
		cmocka_unit_test(test_random_nets_inline),
		cmocka_unit_test(test_random_nets_plug),
		cmocka_unit_test(test_io_wakes_spread),
		cmocka_unit_test(test_writeback_parts_free_early),
		cmocka_unit_test(test_writeback_whole_without_load),
		cmocka_unit_test(test_io_batch_wakes),
		cmocka_unit_test(test_failure_stops),
		cmocka_unit_test(test_stuck_run_fails),
		cmocka_unit_test(test_missing_op),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
