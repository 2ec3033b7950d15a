/* A fixed-size worker pool with deterministic range splitting.
 *
 * A job is cut into shares by n, grain and the pool size only; share k is
 * always run as tid k, so kernels that keep per-tid partials (summed in tid
 * order) give the same bits.  Who runs a share is not fixed: the caller runs
 * share 0 and then claims the shares no worker has taken yet.  Waking a
 * sleeping worker costs tens of microseconds, far more on a loaded machine
 * where it may not be scheduled for a while; a small op would otherwise wait
 * for that wake-up instead of finishing its work on the caller's thread.
 *
 * Stealing (hp_parallel_steal, kernels/threadpool.h), for kernels whose
 * units are independent and whose bits do not depend on which thread runs
 * a unit: a share's runner takes its units front to back, one at a time,
 * and then takes units from the back of the other shares.  Without
 * polling a worker runs late by a wake-up (tens of microseconds, a time
 * slice on a loaded machine); with whole shares the caller then waited for
 * the late half, here it does what the worker has not begun.
 *
 * Shares stay fixed even where a kernel's items are independent: handing
 * them out one at a time to whichever thread is free made GPT-2-style
 * inference 12% and BERT-style 25% slower on 2 threads (a product's weight
 * panels and output tiles no longer stayed in one core's cache from one
 * inference to the next).
 *
 * Spinning: a worker that finished a job polls for the next one for up to
 * hp_pool_spin_ns() (yielding the core between polls) before it sleeps on
 * the condition variable, and the caller polls for the workers' last shares
 * the same way (for at least POOL_FINISH_NS, also when workers do not
 * poll).  An inference runs its ops back to back with gaps of
 * microseconds; without the spin every op paid a futex wake-up and a trip
 * through the scheduler on both sides (GPT-2-style: ~100 context switches
 * per inference on 2 threads, and no gain from the second thread). */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>

#include "hpdlf/error.h"
#include "hpdlf/kernels.h"
#include "kernels/threadpool.h"

struct hp_pool {
	int n;                 /* workers including the caller */
	pthread_t *threads;
	pthread_mutex_t mu;
	pthread_cond_t go, done;
	_Atomic uint64_t generation; /* changed under mu; polled without it */
	int pending;           /* startup handshake */
	int parts, next;       /* shares of the current job: count, next unclaimed */
	_Atomic int finished;  /* shares done; changed under mu, polled without it */
	_Atomic int sleepers;  /* workers blocked on go; changed under mu, read without it */
	int waiting;           /* the caller is blocked on done */
	int quit;
	int64_t spin_ns;
	/* current job */
	hp_range_fn fn;
	void *arg;
	int64_t total, chunk;
	int64_t unit;          /* stealing jobs: items per unit, else 0 */
	_Atomic uint64_t *spans; /* stealing: share k's units not begun, lo | hi << 32 */
};

#define POOL_SPIN_NS_DEFAULT 100000 /* 0.1 ms: a few ops' gaps, far below a time slice */
/* How long the caller polls for shares that workers are running, whatever
 * hp_pool_spin_ns() says: every share is taken then, the job ends within
 * a share (a unit of a stealing job), and sleeping until the last worker
 * signals added a wake-up of the caller to most jobs without polling
 * (ONNX Runtime's caller likewise spins for the tasks that started,
 * allow_spinning or not).  spin_until still gives up at once when another
 * thread takes the core. */
#define POOL_FINISH_NS 200000

/* Tests (hp_pool_set_steal_stall_us, hp_pool_stolen_units): how late a
 * worker starts its share of a stealing job, and the units run by a
 * thread other than their share's. */
static _Atomic int64_t steal_stall_ns;
static _Atomic uint64_t stolen_units;

void hp_pool_set_steal_stall_us(int64_t us)
{
	atomic_store(&steal_stall_ns, us > 0 ? us * 1000 : us < 0 ? -1 : 0);
}

/* Whether every unit of the current stealing job has been taken. */
static int all_taken(struct hp_pool *p)
{
	for (int k = 0; k < p->parts; k++) {
		uint64_t s = atomic_load(&p->spans[k]);
		if ((s & 0xffffffffu) < s >> 32)
			return 0;
	}
	return 1;
}

/* The tests' late worker (mu held on entry and return): whether a newer
 * job than `seen` came meanwhile (its shares then wait for its own stall). */
static int stall_worker(struct hp_pool *p, uint64_t seen)
{
	int64_t ns = atomic_load(&steal_stall_ns);
	struct timespec t = { ns / 1000000000, ns % 1000000000 }, poll = { 0, 20000 };

	pthread_mutex_unlock(&p->mu);
	if (ns > 0)
		nanosleep(&t, NULL);
	while (ns < 0 && !all_taken(p)) /* until the others took every unit */
		nanosleep(&poll, NULL);
	pthread_mutex_lock(&p->mu);
	return atomic_load(&p->generation) != seen;
}

uint64_t hp_pool_stolen_units(void)
{
	return atomic_load(&stolen_units);
}

int64_t hp_pool_spin_ns(void)
{
	static _Atomic int64_t cached = -1;
	int64_t v = atomic_load(&cached);

	if (v < 0) {
		const char *e = getenv("HPDLF_POOL_SPIN_US");
		char *end;
		long long us = e && *e ? strtoll(e, &end, 10) : -1;
		v = us >= 0 && e && *end == '\0' ? (int64_t)(us < 1000000 ? us : 1000000) * 1000 : POOL_SPIN_NS_DEFAULT;
		atomic_store(&cached, v);
	}
	return v;
}

static int64_t now_ns(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#endif
}

static int gen_moved(struct hp_pool *p, uint64_t seen)
{
	return atomic_load_explicit(&p->generation, memory_order_acquire) != seen;
}

static int job_done(struct hp_pool *p, uint64_t parts)
{
	return (uint64_t)atomic_load_explicit(&p->finished, memory_order_acquire) >= parts;
}

/* Poll ready(p, arg) until it holds (1) or spin_ns passed (0).  The core
 * is yielded between rounds of polls, and the spin ends as soon as a yield
 * lets another thread run (it took over YIELD_BUSY_NS): with more runnable
 * threads than cores, a spinning thread would take time from the thread it
 * waits for and from other processes. */
#define YIELD_BUSY_NS 20000

static int spin_until(struct hp_pool *p, int (*ready)(struct hp_pool *, uint64_t), uint64_t arg, int64_t spin_ns)
{
	int64_t t0, t1, t2;

	if (spin_ns <= 0)
		return ready(p, arg);
	t0 = now_ns();
	for (;;) {
		for (int i = 0; i < 64; i++) {
			if (ready(p, arg))
				return 1;
			cpu_relax();
		}
		t1 = now_ns();
		if (t1 - t0 > spin_ns)
			return ready(p, arg);
		sched_yield();
		t2 = now_ns();
		if (t2 - t1 > YIELD_BUSY_NS)
			return ready(p, arg);
	}
}

/* Unit u of share j, run as tid. */
static void run_unit(struct hp_pool *p, int j, int64_t u, int tid)
{
	int64_t b = (int64_t)j * p->chunk + u * p->unit, e = b + p->unit, end = (int64_t)(j + 1) * p->chunk;

	e = e < end ? e : end;
	p->fn(p->arg, b, e < p->total ? e : p->total, tid);
}

/* Take unit lo (front) or hi - 1 (back) of share j; -1 when none is left. */
static int64_t take_unit(struct hp_pool *p, int j, int back)
{
	uint64_t s = atomic_load_explicit(&p->spans[j], memory_order_acquire);

	for (;;) {
		uint64_t lo = s & 0xffffffffu, hi = s >> 32;
		if (lo >= hi)
			return -1;
		if (atomic_compare_exchange_weak(&p->spans[j], &s, back ? lo | (hi - 1) << 32 : s + 1))
			return (int64_t)(back ? hi - 1 : lo);
	}
}

static void run_share(struct hp_pool *p, int k)
{
	int64_t b = (int64_t)k * p->chunk;
	int64_t e = b + p->chunk < p->total ? b + p->chunk : p->total, u;

	if (!p->unit) {
		if (b < e)
			p->fn(p->arg, b, e, k);
		return;
	}
	while ((u = take_unit(p, k, 0)) >= 0)
		run_unit(p, k, u, k);
	for (int d = 1; d < p->parts; d++)
		while ((u = take_unit(p, (k + d) % p->parts, 1)) >= 0) {
			atomic_fetch_add_explicit(&stolen_units, 1, memory_order_relaxed);
			run_unit(p, (k + d) % p->parts, u, k);
		}
}

/* Run the current job's unclaimed shares (mu held on entry and on return). */
static void claim_shares(struct hp_pool *p)
{
	while (p->next < p->parts) {
		int k = p->next++;
		pthread_mutex_unlock(&p->mu);
		run_share(p, k);
		pthread_mutex_lock(&p->mu);
		if (atomic_fetch_add(&p->finished, 1) + 1 == p->parts && p->waiting)
			pthread_cond_signal(&p->done);
	}
}

/* Wait for a generation other than seen (mu held on return). */
static void await_job(struct hp_pool *p, uint64_t seen)
{
	spin_until(p, gen_moved, seen, p->spin_ns);
	pthread_mutex_lock(&p->mu);
	while (atomic_load(&p->generation) == seen && !p->quit) {
		atomic_fetch_add(&p->sleepers, 1);
		pthread_cond_wait(&p->go, &p->mu);
		atomic_fetch_sub(&p->sleepers, 1);
	}
}

static _Atomic int64_t delay_ns[2]; /* hp_pool_test_delay: caller, workers */

void hp_pool_test_delay(int who, int64_t ns)
{
	atomic_store(&delay_ns[who > 0], ns > 0 ? ns : 0);
}

static void test_sleep(int who)
{
	int64_t ns = atomic_load_explicit(&delay_ns[who], memory_order_relaxed);
	struct timespec t;

	if (!ns)
		return;
	t.tv_sec = (time_t)(ns / 1000000000);
	t.tv_nsec = (long)(ns % 1000000000);
	nanosleep(&t, NULL);
}

static void *worker(void *v)
{
	struct hp_pool *p = v;
	uint64_t seen = 0;

	pthread_mutex_lock(&p->mu);
	++p->pending;
	pthread_cond_signal(&p->done);
	pthread_mutex_unlock(&p->mu);
	for (;;) {
		await_job(p, seen);
		if (p->quit)
			break;
		seen = atomic_load(&p->generation);
		if (p->unit && atomic_load_explicit(&steal_stall_ns, memory_order_relaxed) != 0 && stall_worker(p, seen)) {
			pthread_mutex_unlock(&p->mu);
			continue;
		}
		if (atomic_load_explicit(&delay_ns[1], memory_order_relaxed) && p->next < p->parts) {
			pthread_mutex_unlock(&p->mu);
			test_sleep(1);
			pthread_mutex_lock(&p->mu);
		}
		claim_shares(p);
		pthread_mutex_unlock(&p->mu);
	}
	pthread_mutex_unlock(&p->mu);
	return NULL;
}

int hp_pool_create(int nthreads, struct hp_pool **out)
{
	struct hp_pool *p;
	int i, rc;

	*out = NULL;
	if (nthreads < 1)
		return hp_error(HP_EUSAGE, "thread pool: %d threads", nthreads);
	p = calloc(1, sizeof *p);
	if (!p)
		return -ENOMEM;
	p->n = nthreads;
	p->spin_ns = hp_pool_spin_ns();
	pthread_mutex_init(&p->mu, NULL);
	pthread_cond_init(&p->go, NULL);
	pthread_cond_init(&p->done, NULL);
	p->threads = calloc((size_t)nthreads, sizeof *p->threads);
	p->spans = calloc((size_t)nthreads, sizeof *p->spans);
	if (!p->threads || !p->spans) {
		free(p->threads);
		free(p->spans);
		free(p);
		return -ENOMEM;
	}
	for (i = 1; i < nthreads; i++) {
		rc = pthread_create(&p->threads[i], NULL, worker, p);
		if (rc) {
			p->n = i;
			hp_pool_destroy(p);
			return hp_error(-rc, "thread pool: cannot start thread %d", i);
		}
	}
	pthread_mutex_lock(&p->mu);
	while (p->pending != nthreads - 1)
		pthread_cond_wait(&p->done, &p->mu);
	p->pending = 0;
	pthread_mutex_unlock(&p->mu);
	*out = p;
	return 0;
}

void hp_pool_destroy(struct hp_pool *p)
{
	if (!p)
		return;
	pthread_mutex_lock(&p->mu);
	p->quit = 1;
	atomic_fetch_add(&p->generation, 1); /* spinning workers look at it */
	pthread_cond_broadcast(&p->go);
	pthread_mutex_unlock(&p->mu);
	for (int i = 1; i < p->n; i++)
		pthread_join(p->threads[i], NULL);
	pthread_mutex_destroy(&p->mu);
	pthread_cond_destroy(&p->go);
	pthread_cond_destroy(&p->done);
	free(p->threads);
	free((void *)p->spans);
	free(p);
}

int hp_pool_polling(struct hp_pool *p)
{
	return p && p->n > 1 && !atomic_load_explicit(&p->sleepers, memory_order_relaxed);
}

int hp_pool_size(const struct hp_pool *p)
{
	return p ? p->n : 1;
}

/* Publish a job of shares of `chunk` items and run it with the workers;
 * returns when every share is done. */
static void run_job(struct hp_pool *p, int64_t n, int64_t chunk, int64_t unit, hp_range_fn fn, void *arg)
{
	pthread_mutex_lock(&p->mu);
	p->fn = fn;
	p->arg = arg;
	p->total = n;
	p->chunk = chunk;
	p->unit = unit;
	p->parts = (int)((n + chunk - 1) / chunk);
	for (int k = 0; k < p->parts && unit; k++) {
		int64_t len = (k + 1) * chunk < n ? chunk : n - k * chunk;
		atomic_store(&p->spans[k], (uint64_t)((len + unit - 1) / unit) << 32);
	}
	p->next = 1;
	atomic_store(&p->finished, 0);
	atomic_fetch_add(&p->generation, 1);
	if (atomic_load(&p->sleepers))
		pthread_cond_broadcast(&p->go);
	pthread_mutex_unlock(&p->mu);
	test_sleep(0);
	run_share(p, 0);
	pthread_mutex_lock(&p->mu);
	atomic_fetch_add(&p->finished, 1);
	claim_shares(p);
	if (atomic_load(&p->finished) < p->parts) {
		uint64_t parts = (uint64_t)p->parts;
		/* the workers are running their last shares: poll for them,
		 * also without polling between kernels (POOL_FINISH_NS) */
		pthread_mutex_unlock(&p->mu);
		spin_until(p, job_done, parts, p->spin_ns > POOL_FINISH_NS ? p->spin_ns : POOL_FINISH_NS);
		pthread_mutex_lock(&p->mu);
	}
	while (atomic_load(&p->finished) < p->parts) {
		p->waiting = 1;
		pthread_cond_wait(&p->done, &p->mu);
		p->waiting = 0;
	}
	pthread_mutex_unlock(&p->mu);
}

void hp_parallel_for(struct hp_pool *p, int64_t n, int64_t grain, hp_range_fn fn, void *arg)
{
	int64_t parts;

	if (n <= 0)
		return;
	if (grain < 1)
		grain = 1;
	parts = (n + grain - 1) / grain;
	if (!p || p->n == 1 || parts == 1) {
		fn(arg, 0, n, 0);
		return;
	}
	if (parts > p->n)
		parts = p->n;
	run_job(p, n, (n + parts - 1) / parts, 0, fn, arg);
}

void hp_parallel_steal(struct hp_pool *p, int64_t n, int64_t unit, int parts, hp_range_fn fn, void *arg)
{
	int64_t units;

	if (n <= 0)
		return;
	unit = unit < 1 ? 1 : unit;
	units = (n + unit - 1) / unit;
	parts = p && parts > p->n ? p->n : parts;
	parts = parts > units ? (int)units : parts;
	if (!p || parts <= 1) {
		fn(arg, 0, n, 0);
		return;
	}
	/* shares of whole units, so that every unit lies in one share */
	run_job(p, n, (units + parts - 1) / parts * unit, unit, fn, arg);
}
