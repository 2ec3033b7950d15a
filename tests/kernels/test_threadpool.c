/* The worker pool (kernels/threadpool.c).  hp_parallel_for: every item is
 * covered once, by the fixed shares of n, grain and the pool size, and
 * share k runs as tid k whoever runs it; jobs back to back (workers still
 * polling for the next job) and jobs after a pause longer than the spin
 * (workers asleep) both complete.  hp_parallel_steal: every item once,
 * in calls of one unit each, tids below the shares, and a late share's
 * units taken from its back by the other thread.  The suite runs this file twice: as it comes
 * (polling for HPDLF_POOL_SPIN_US's default) and with
 * HPDLF_POOL_SPIN_US=0 (workers sleep at once).  hp_pool_polling: whether
 * no worker sleeps. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "hpdlf/kernels.h"
#include "kernels/threadpool.h" /* hp_pool_spin_ns */

#define MAXN 5000

struct rec {
	int64_t n, chunk;       /* expected share size (hp_parallel_for) */
	int threads;
	_Atomic int hits[MAXN];
	_Atomic int bad;        /* a range or tid that breaks the contract */
};

static void rec_reset(struct rec *r, int64_t n, int64_t grain, int threads)
{
	int64_t parts = (n + grain - 1) / grain;

	if (parts > threads)
		parts = threads;
	r->n = n;
	r->chunk = parts > 0 ? (n + parts - 1) / parts : 0;
	r->threads = threads;
	for (int64_t i = 0; i < MAXN; i++)
		atomic_store(&r->hits[i], 0);
	atomic_store(&r->bad, 0);
}

static void fixed_fn(void *arg, int64_t b, int64_t e, int tid)
{
	struct rec *r = arg;
	int64_t want_b = (int64_t)tid * r->chunk, want_e = want_b + r->chunk < r->n ? want_b + r->chunk : r->n;

	/* one range per share, and share k as tid k */
	if (b != want_b || e != want_e || tid < 0 || tid >= r->threads)
		atomic_fetch_add(&r->bad, 1);
	for (int64_t i = b; i < e; i++)
		atomic_fetch_add(&r->hits[i], 1);
}

static void check_once(struct rec *r, const char *what)
{
	for (int64_t i = 0; i < r->n; i++)
		if (atomic_load(&r->hits[i]) != 1)
			fail_msg("%s: item %lld of %lld ran %d times", what, (long long)i, (long long)r->n,
				 atomic_load(&r->hits[i]));
	if (atomic_load(&r->bad))
		fail_msg("%s: %d calls with a wrong range or tid", what, atomic_load(&r->bad));
}

static struct rec R;

static void pause_ms(int ms)
{
	struct timespec t = { 0, ms * 1000000L };

	nanosleep(&t, NULL);
}

static void test_fixed_shares(void **state)
{
	static const int64_t ns[] = { 1, 2, 3, 7, 64, 1000, 4999 };
	static const int64_t grains[] = { 1, 2, 16, 100, 5000 };

	(void)state;
	for (int th = 1; th <= 4; th++) {
		struct hp_pool *p;
		assert_int_equal(hp_pool_create(th, &p), 0);
		assert_int_equal(hp_pool_size(p), th);
		for (size_t i = 0; i < sizeof ns / sizeof ns[0]; i++)
			for (size_t g = 0; g < sizeof grains / sizeof grains[0]; g++) {
				rec_reset(&R, ns[i], grains[g], th);
				hp_parallel_for(p, ns[i], grains[g], fixed_fn, &R);
				check_once(&R, "hp_parallel_for");
			}
		hp_pool_destroy(p);
	}
	rec_reset(&R, 10, 1, 1); /* no pool: inline, one range */
	hp_parallel_for(NULL, 10, 1, fixed_fn, &R);
	check_once(&R, "hp_parallel_for without a pool");
}

/* Many jobs in a row of varying sizes, then jobs after pauses longer than
 * any spin: a lost wake-up or a worker taking a share of the wrong job
 * shows as a hang or a miscount. */
static void test_back_to_back(void **state)
{
	struct hp_pool *p;

	(void)state;
	assert_int_equal(hp_pool_create(2, &p), 0);
	for (int it = 0; it < 3000; it++) {
		int64_t n = 1 + it % 97;
		int64_t grain = 1 + it % 5;
		rec_reset(&R, n, grain, 2);
		hp_parallel_for(p, n, grain, fixed_fn, &R);
		check_once(&R, "shares back to back");
	}
	for (int it = 0; it < 6; it++) {
		pause_ms(3);
		rec_reset(&R, 50, 1, 2);
		hp_parallel_for(p, 50, 1, fixed_fn, &R);
		check_once(&R, "shares after a pause");
	}
	hp_pool_destroy(p);
}

/* hp_parallel_steal's calls: one unit each (or everything at once when
 * there is a single share), as a tid below the shares. */
static int64_t steal_unit;
static int steal_parts;
static _Atomic int steal_tid[MAXN]; /* who ran each item */
static _Atomic int steal_slept;

static void steal_fn(void *arg, int64_t b, int64_t e, int tid)
{
	struct rec *r = arg;
	int64_t want_e = b + steal_unit < r->n ? b + steal_unit : r->n;

	if (steal_parts > 1 ? b % steal_unit || e != want_e : b != 0 || e != r->n)
		atomic_fetch_add(&r->bad, 1);
	if (tid < 0 || tid >= (steal_parts > 1 ? steal_parts : 1))
		atomic_fetch_add(&r->bad, 1);
	for (int64_t i = b; i < e; i++) {
		atomic_fetch_add(&r->hits[i], 1);
		atomic_store(&steal_tid[i], tid);
	}
}

static void test_steal_cover(void **state)
{
	static const int64_t ns[] = { 1, 2, 7, 64, 1000, 4999 };
	static const int64_t units[] = { 1, 3, 16, 5000 };

	(void)state;
	for (int th = 1; th <= 4; th++) {
		struct hp_pool *p;
		assert_int_equal(hp_pool_create(th, &p), 0);
		for (size_t i = 0; i < sizeof ns / sizeof ns[0]; i++)
			for (size_t u = 0; u < sizeof units / sizeof units[0]; u++)
				for (int parts = 1; parts <= th + 1; parts++) {
					int64_t nu = (ns[i] + units[u] - 1) / units[u];
					steal_unit = units[u];
					steal_parts = parts > th ? th : parts;
					steal_parts = steal_parts > nu ? (int)nu : steal_parts;
					rec_reset(&R, ns[i], 1, th);
					hp_parallel_steal(p, ns[i], units[u], parts, steal_fn, &R);
					check_once(&R, "hp_parallel_steal");
				}
		hp_pool_destroy(p);
	}
	steal_unit = 4, steal_parts = 1;
	rec_reset(&R, 10, 1, 1);
	hp_parallel_steal(NULL, 10, 4, 2, steal_fn, &R);
	check_once(&R, "hp_parallel_steal without a pool");
}

/* Share 1's first unit stalls for 30 ms: the caller, done with share 0,
 * must run share 1's other units (from its back) meanwhile, as tid 0.
 * Without stealing the worker would run them all after the stall. */
static void slow_fn(void *arg, int64_t b, int64_t e, int tid)
{
	if (tid == 1 && !atomic_exchange(&steal_slept, 1))
		pause_ms(30);
	steal_fn(arg, b, e, tid);
}

static void test_steal_late(void **state)
{
	struct hp_pool *p;

	(void)state;
	assert_int_equal(hp_pool_create(2, &p), 0);
	for (int it = 0; it < 5; it++) {
		int taken = 0;
		steal_unit = 1, steal_parts = 2;
		atomic_store(&steal_slept, 0);
		rec_reset(&R, 40, 1, 2);
		hp_parallel_steal(p, 40, 1, 2, slow_fn, &R);
		check_once(&R, "hp_parallel_steal, a share late");
		for (int i = 21; i < 40; i++)
			taken += atomic_load(&steal_tid[i]) == 0;
		if (taken < 10)
			fail_msg("the caller ran %d of the late share's 19 last units", taken);
	}
	hp_pool_destroy(p);
}

/* The tests' late worker (hp_pool_set_steal_stall_us): a worker that
 * waits until every unit is taken (-1) leaves the caller every unit of its
 * share, each counted by hp_pool_stolen_units; one 20 ms late, the same
 * but for the caller's own delays. */
static void test_steal_stall_hook(void **state)
{
	struct hp_pool *p;

	(void)state;
	assert_int_equal(hp_pool_create(2, &p), 0);
	for (int it = 0; it < 3; it++) {
		uint64_t before = hp_pool_stolen_units();
		/* the worker comes after every unit was taken: all of its share
		 * stolen, whatever the machine's load */
		steal_unit = 1, steal_parts = 2;
		rec_reset(&R, 40, 1, 2);
		hp_pool_set_steal_stall_us(-1);
		hp_parallel_steal(p, 40, 1, 2, steal_fn, &R);
		hp_pool_set_steal_stall_us(0);
		check_once(&R, "hp_parallel_steal, a worker stalled by the hook");
		for (int i = 20; i < 40; i++)
			if (atomic_load(&steal_tid[i]) != 0)
				fail_msg("unit %d of the stalled worker's share ran as tid %d", i, atomic_load(&steal_tid[i]));
		if (hp_pool_stolen_units() - before != 20)
			fail_msg("%llu units counted as stolen, not 20",
				 (unsigned long long)(hp_pool_stolen_units() - before));
	}
	hp_pool_destroy(p);
}

/* hp_pool_test_delay: a worker that sleeps 30 ms before its share leaves
 * it to the caller (who takes it from the back, as tid 0); a caller that
 * sleeps leaves its share to the worker (as tid 1).  Kernels' tests use
 * the hook to check their bits whoever ran a unit. */
static void busy_fn(void *arg, int64_t b, int64_t e, int tid)
{
	struct timespec t0, t1;

	clock_gettime(CLOCK_MONOTONIC, &t0);
	do
		clock_gettime(CLOCK_MONOTONIC, &t1);
	while ((t1.tv_sec - t0.tv_sec) * 1000000000L + (t1.tv_nsec - t0.tv_nsec) < 100000);
	steal_fn(arg, b, e, tid);
}

static int ran_by(int64_t b, int64_t e, int tid)
{
	int n = 0;

	for (int64_t i = b; i < e; i++)
		n += atomic_load(&steal_tid[i]) == tid;
	return n;
}

/* One job with thread `who` delayed: whether the other ran at least `want`
 * of its share's 20 units. */
static int delayed_job(struct hp_pool *p, int who, int want)
{
	hp_pool_test_delay(who, 30000000);
	rec_reset(&R, 40, 1, 2);
	hp_parallel_steal(p, 40, 1, 2, busy_fn, &R);
	hp_pool_test_delay(who, 0);
	check_once(&R, "hp_parallel_steal, a thread delayed");
	return who == 1 ? ran_by(20, 40, 0) >= want : ran_by(0, 20, 1) >= want;
}

static void test_steal_delay_hook(void **state)
{
	struct hp_pool *p;

	(void)state;
	assert_int_equal(hp_pool_create(2, &p), 0);
	steal_unit = 1, steal_parts = 2;
	/* the late thread's share is mostly run by the other one (which
	 * needs a unit or two to take over); a few tries, as a loaded
	 * machine may not run the worker within the caller's 30 ms */
	for (int who = 1; who >= 0; who--) {
		int ok = 0;
		for (int t = 0; t < 5 && !ok; t++)
			ok = delayed_job(p, who, who ? 15 : 10);
		if (!ok)
			fail_msg("%s delayed: the other thread did not run its share", who ? "worker" : "caller");
	}
	rec_reset(&R, 40, 1, 2); /* off again */
	hp_parallel_steal(p, 40, 1, 2, busy_fn, &R);
	check_once(&R, "hp_parallel_steal after the delays");
	hp_pool_destroy(p);
}

/* hp_pool_polling: no workers, none; workers asleep after a pause longer
 * than any spin, none (a small job is not worth waking them); right after
 * jobs, where workers poll at all, some time within 2 s of tries. */
static void spin_fn(void *arg, int64_t b, int64_t e, int tid)
{
	struct timespec t0, t1;

	(void)arg, (void)b, (void)e, (void)tid;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	do
		clock_gettime(CLOCK_MONOTONIC, &t1);
	while ((t1.tv_sec - t0.tv_sec) * 1000000000L + (t1.tv_nsec - t0.tv_nsec) < 20000);
}

static void test_polling(void **state)
{
	struct hp_pool *p;
	int tries, seen = 0;

	(void)state;
	assert_false(hp_pool_polling(NULL));
	assert_int_equal(hp_pool_create(1, &p), 0);
	assert_false(hp_pool_polling(p));
	hp_pool_destroy(p);
	assert_int_equal(hp_pool_create(2, &p), 0);
	for (tries = 0; tries < 2000 && hp_pool_polling(p); tries++)
		pause_ms(1);
	assert_false(hp_pool_polling(p));
	for (tries = 0; tries < 20000 && !seen && hp_pool_spin_ns() > 0; tries++) {
		hp_parallel_for(p, 2, 1, spin_fn, NULL);
		seen = hp_pool_polling(p);
	}
	assert_true(seen || hp_pool_spin_ns() == 0);
	hp_pool_destroy(p);
}

static void test_spin_setting(void **state)
{
	const char *e = getenv("HPDLF_POOL_SPIN_US");

	(void)state;
	if (e && !strcmp(e, "0"))
		assert_true(hp_pool_spin_ns() == 0);
	else if (!e)
		assert_true(hp_pool_spin_ns() > 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_fixed_shares),
		cmocka_unit_test(test_back_to_back),
		cmocka_unit_test(test_spin_setting),
		cmocka_unit_test(test_polling),
		cmocka_unit_test(test_steal_cover),
		cmocka_unit_test(test_steal_late),
		cmocka_unit_test(test_steal_stall_hook),
		cmocka_unit_test(test_steal_delay_hook),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
