/* kernels/blas.c: the one owner of OpenBLAS's process-wide thread count.
 * Checked against what OpenBLAS itself reports.  hp_blas_call_bytes, the
 * bound of what an sgemm touches of OpenBLAS's buffers, against the
 * resident pages of those buffers after the call, in a fresh process.
 * hp_blas_quiet_workers stops OpenBLAS's idle workers; hp_blas_threads
 * leaves them (a host program's thread may be inside a threaded call). */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cblas.h>
#include <cmocka.h>

#include "kernels/blas.h"

/* Threads of this process (/proc/self/task). */
static int tasks(void)
{
	char cmd[64], out[32] = "";
	FILE *f;

	snprintf(cmd, sizeof cmd, "ls /proc/%d/task | wc -l", (int)getpid());
	f = popen(cmd, "r");
	assert_non_null(f);
	assert_non_null(fgets(out, sizeof out, f));
	pclose(f);
	return atoi(out);
}

/* hp_blas_threads leaves the workers OpenBLAS started when it loaded (in
 * a library a host's thread may be inside a threaded call, where OpenBLAS
 * 0.3.21's shutdown hangs: blas.c); hp_blas_quiet_workers, which
 * hpdlf-exec calls first thing, stops them (they spun for a while, taking
 * a core from the kernels' pool); a threaded sgemm after it still works
 * (OpenBLAS starts them again) and gives the plain loop's product.  Runs
 * first, before any other call. */
static void test_quiet_stops_workers(void **state)
{
	enum { N = 384 };
	static float a[N * N], b[N * N], c[N * N];
	int before = tasks(), after, status;
	pid_t pid;

	(void)state;
	hp_blas_threads(2);
	assert_int_equal(tasks(), before);
	hp_blas_quiet_workers();
	after = tasks();
	print_message("threads at load %d, after hp_blas_quiet_workers %d\n", before, after);
#ifdef HP_BLAS_SHUTDOWN
	if (before > 1) /* OpenBLAS started workers: more than one CPU */
		assert_int_equal(after, 1);
#endif
	pid = fork(); /* in a child: test_call_bytes_measured wants OpenBLAS's buffers untouched */
	assert_true(pid >= 0);
	if (pid == 0) {
		int bad = 0;
		for (int i = 0; i < N * N; i++) {
			a[i] = (float)(i % 13) - 6.0f;
			b[i] = (float)(i % 7) * 0.5f;
		}
		cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, N, N, 1.0f, a, N, b, N, 0.0f, c, N);
		for (int i = 0; i < N; i += 37)
			for (int j = 0; j < N; j += 41) {
				double want = 0;
				for (int k = 0; k < N; k++)
					want += (double)a[i * N + k] * b[k * N + j];
				bad |= fabs(c[i * N + j] - want) > 1e-3 * (1 + fabs(want));
			}
		_exit(bad);
	}
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

static void test_threads_set(void **state)
{
	(void)state;
	hp_blas_threads(2);
	assert_int_equal(openblas_get_num_threads(), 2);
	hp_blas_threads(1);
	assert_int_equal(openblas_get_num_threads(), 1);
	hp_blas_threads(0); /* below 1: 1 */
	assert_int_equal(openblas_get_num_threads(), 1);
	hp_blas_threads(2);
	assert_int_equal(openblas_get_num_threads(), 2);
}

static void test_serial_nests(void **state)
{
	(void)state;
	hp_blas_threads(2);
	hp_blas_serial_enter();
	assert_int_equal(openblas_get_num_threads(), 1);
	hp_blas_serial_enter();
	hp_blas_serial_leave();
	assert_int_equal(openblas_get_num_threads(), 1); /* one section still open */
	hp_blas_serial_leave();
	assert_int_equal(openblas_get_num_threads(), 2);
}

/* A count asked for while a section is open waits for the last leave:
 * the section's kernels keep running BLAS on one thread. */
static void test_threads_deferred(void **state)
{
	(void)state;
	hp_blas_threads(1);
	hp_blas_serial_enter();
	hp_blas_threads(2);
	assert_int_equal(openblas_get_num_threads(), 1);
	hp_blas_serial_leave();
	assert_int_equal(openblas_get_num_threads(), 2);
}

static void *section(void *arg)
{
	for (int i = 0; i < 2000; i++) {
		hp_blas_serial_enter();
		if (openblas_get_num_threads() != 1)
			*(int *)arg = 1;
		hp_blas_serial_leave();
	}
	return NULL;
}

/* Sections open and close on several threads at once: inside any of them
 * the count is 1, and the last one out restores the count asked for. */
static void test_serial_threads(void **state)
{
	pthread_t th[4];
	int bad[4] = { 0 };

	(void)state;
	hp_blas_threads(2);
	for (int i = 0; i < 4; i++)
		assert_int_equal(pthread_create(&th[i], NULL, section, &bad[i]), 0);
	for (int i = 0; i < 4; i++) {
		pthread_join(th[i], NULL);
		assert_int_equal(bad[i], 0);
	}
	assert_int_equal(openblas_get_num_threads(), 2);
}

/* Resident bytes of OpenBLAS's buffers: its anonymous mappings of
 * BUFFER_SIZE (128 MiB; the operands below live in .bss, apart). */
static int64_t blas_resident(void)
{
	FILE *f = fopen("/proc/self/smaps", "r");
	char line[512];
	int64_t total = 0, v;
	int buffer = 0;

	assert_non_null(f);
	while (fgets(line, sizeof line, f)) {
		unsigned long lo, hi, off, ino;
		char perm[8], dev[16];
		int end = 0;

		if (sscanf(line, "%lx-%lx %7s %lx %15s %lu %n", &lo, &hi, perm, &off, dev, &ino, &end) >= 6) {
			buffer = (line[end] == '\0' || line[end] == '\n') && hi - lo >= (128ul << 20);
			continue;
		}
		if (buffer && sscanf(line, "Rss: %ld", &v) == 1)
			total += v * 1024;
	}
	fclose(f);
	return total;
}

#define MAX_M 2000
#define MAX_N 2000
#define MAX_K 1000
static float op_a[MAX_M * MAX_K], op_b[MAX_K * MAX_N], op_c[MAX_M * MAX_N];

struct call {
	int m, n, k, threads;
	int tight; /* the bound is what the call touches (within 5%) */
};

/* Runs the call in a child (OpenBLAS's buffers untouched before): what it
 * left resident, through a pipe. */
static int64_t touched(const struct call *c)
{
	int fd[2], status;
	int64_t got = -1;
	pid_t pid;

	assert_int_equal(pipe(fd), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		int64_t r;

		for (int i = 0; i < c->m * c->k; i++)
			op_a[i] = (float)(i % 7) * 0.25f;
		for (int i = 0; i < c->k * c->n; i++)
			op_b[i] = (float)(i % 5) * 0.5f;
		hp_blas_threads(c->threads);
		r = blas_resident();
		hp_sgemm(CblasNoTrans, CblasNoTrans, c->m, c->n, c->k, 1.0f, op_a, c->k, op_b, c->n, 0.0f, op_c, c->n);
		r = blas_resident() - r;
		_exit(write(fd[1], &r, sizeof r) == sizeof r ? 0 : 1);
	}
	close(fd[1]);
	assert_int_equal(read(fd[0], &got, sizeof got), sizeof got);
	close(fd[0]);
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	return got;
}

/* Products past GEMM_P columns (the B panel packs all rows), within it
 * (a few columns at a time), K between GEMM_Q and twice it, and one on
 * two threads (each thread its buffer): what stays resident is at most
 * the bound per buffer and, on one thread, the bound itself (within 5%, or two pages).  A bound
 * without the B panel, or that double-counted it, fails. */
static void test_call_bytes_measured(void **state)
{
	static const struct call calls[] = {
		{ 2000, 2000, 1000, 1, 1 }, { 200, 2000, 1000, 1, 1 }, { 1500, 100, 64, 1, 1 },
		{ 300, 1000, 700, 1, 0 },   { 2000, 200, 1000, 2, 0 },
	};
	struct hp_blas_core core;

	(void)state;
	if (hp_blas_core(&core) < 0)
		skip();
	for (size_t i = 0; i < sizeof calls / sizeof calls[0]; i++) {
		const struct call *c = &calls[i];
		int64_t bound = hp_blas_call_bytes(&core, c->m, c->n, c->k, c->threads), got = touched(c);

		if (got > c->threads * bound || (c->tight && got < bound - (bound / 20 > 8192 ? bound / 20 : 8192)))
			fail_msg("%s: sgemm %dx%dx%d on %d threads touched %lld bytes, bound %lld", core.name, c->m, c->n,
				 c->k, c->threads, (long long)got, (long long)bound);
	}
}

/* hp_sgemm records its call's bound and computes what cblas_sgemm does. */
static void test_sgemm_seen(void **state)
{
	struct hp_blas_core core;
	struct hp_blas_seen before, after;
	float a[6] = { 1, 2, 3, 4, 5, 6 }, b[6] = { 1, 0, 0, 1, 1, 1 }, c[4] = { 0 }, want[4] = { 4, 5, 10, 11 };

	(void)state;
	hp_blas_threads(1);
	hp_blas_seen(&before);
	hp_sgemm(CblasNoTrans, CblasNoTrans, 2, 2, 3, 1.0f, a, 3, b, 2, 0.0f, c, 2);
	hp_blas_seen(&after);
	assert_memory_equal(c, want, sizeof want);
	assert_int_equal(after.calls, before.calls + 1);
	if (hp_blas_core(&core) == 0)
		assert_true(after.call_bytes >= (uint64_t)hp_blas_call_bytes(&core, 2, 2, 3, 1));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_quiet_stops_workers),
		cmocka_unit_test(test_threads_set),
		cmocka_unit_test(test_serial_nests),
		cmocka_unit_test(test_threads_deferred),
		cmocka_unit_test(test_serial_threads),
		cmocka_unit_test(test_call_bytes_measured),
		cmocka_unit_test(test_sgemm_seen),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
