/* The process-wide OpenBLAS thread count, set in one place (kernels/blas.h). */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <strings.h>

#include <cblas.h>

#include "kernels/blas.h"

static pthread_mutex_t blas_mu = PTHREAD_MUTEX_INITIALIZER;
static int wanted;  /* hp_blas_threads()'s value; 0: OpenBLAS's own default */
static int applied; /* the count OpenBLAS runs with; 0: not read yet */
static int serial;  /* open serial sections */

/* Under blas_mu: tell OpenBLAS the count in force if it differs. */
static void apply_locked(void)
{
	int n;

	if (!applied)
		applied = openblas_get_num_threads();
	if (!wanted)
		wanted = applied;
	n = serial ? 1 : wanted;
	if (n != applied) {
		openblas_set_num_threads(n);
		applied = n;
	}
}

/* OpenBLAS 0.3.21 starts its worker threads when it loads, and each one
 * polls with sched_yield for its THREAD_TIMEOUT before it sleeps.  The
 * first session is made within that time, and the spinning worker took a
 * core from the kernels' pool (MNASNet 0.5 at batch 1, 2 threads, 200 runs
 * after 30 warm-up runs: 0.57 ms against 0.42 without it).  Stopping the
 * workers at the first call, before hpdlf runs any BLAS, ends that;
 * OpenBLAS starts them again at its next threaded call, as after a fork
 * (blas_thread_shutdown_ is its fork handler's).  Once per process only:
 * later, another session's threaded call may be running. */
#ifdef HP_BLAS_SHUTDOWN
int blas_thread_shutdown_(void);
#endif
static int quieted;

static void quiet_workers_locked(void)
{
	if (quieted)
		return;
	quieted = 1;
#ifdef HP_BLAS_SHUTDOWN
	blas_thread_shutdown_();
#endif
}

void hp_blas_threads(int n)
{
	pthread_mutex_lock(&blas_mu);
	quiet_workers_locked();
	wanted = n < 1 ? 1 : n;
	apply_locked();
	pthread_mutex_unlock(&blas_mu);
}

void hp_blas_serial_enter(void)
{
	pthread_mutex_lock(&blas_mu);
	serial++;
	apply_locked();
	pthread_mutex_unlock(&blas_mu);
}

void hp_blas_serial_leave(void)
{
	pthread_mutex_lock(&blas_mu);
	if (serial > 0)
		serial--;
	apply_locked();
	pthread_mutex_unlock(&blas_mu);
}

/* ---- sgemm and what it touches of OpenBLAS's buffers ------------------- */

/* OpenBLAS 0.3.21 for x86-64, sgemm: param.h's SGEMM_DEFAULT_P, _Q,
 * _UNROLL_M, _UNROLL_N per core (setparam-ref.c keeps P and Q as they are
 * for these); GEMM_ALIGN 0x3fff and GEMM_OFFSET_A/B 0 for all of them. */
static const struct hp_blas_core cores[] = {
	{ .name = "Haswell", .p = 320, .q = 320, .um = 8, .un = 4 },
	{ .name = "Zen", .p = 320, .q = 320, .um = 8, .un = 4 },
	{ .name = "SkylakeX", .p = 448, .q = 448, .um = 16, .un = 4 },
	{ .name = "Cooperlake", .p = 640, .q = 320, .um = 16, .un = 4 },
	{ .name = "SapphireRapids", .p = 640, .q = 320, .um = 16, .un = 4 },
	{ .name = "Sandybridge", .p = 768, .q = 384, .um = 16, .un = 4 },
};
/* common_x86_64.h's BUFFER_SIZE: each buffer is a mapping of 128 MiB, of
 * which only the touched pages are resident. */
#define BUFFER_BYTES (128ll << 20)
#define GEMM_ALIGN 0x3fffll
/* interface/gemm.c runs a product of at most SMP_THRESHOLD_MIN *
 * GEMM_MULTITHREAD_THRESHOLD (65536 * 4) multiply-adds on one thread. */
#define MNK_ONE_THREAD 262144.0
/* level3.c packs B for the kernel in pieces of at most 6 x GEMM_UNROLL_N
 * columns when A's block is a single one (l1stride 0). */
#define JJ_UNROLLS 6
#define PAGE 4096ll

static int64_t round_up(int64_t x, int64_t m)
{
	return (x + m - 1) / m * m;
}

static int64_t min_i64(int64_t a, int64_t b)
{
	return a < b ? a : b;
}

/* The drivers, the buffer layout and the blocking above are 0.3.21's
 * (Debian 12's); another release is not assumed to keep them. */
#define VERSION "OpenBLAS 0.3.21 "

int hp_blas_core(struct hp_blas_core *c)
{
	const char *name = openblas_get_corename(), *config = openblas_get_config();

	if (!config || strncmp(config, VERSION, strlen(VERSION)))
		return -ENOENT;
	for (size_t i = 0; name && i < sizeof cores / sizeof cores[0]; i++)
		if (!strcasecmp(name, cores[i].name)) {
			*c = cores[i];
			c->b_offset = (c->p * c->q * 4 + GEMM_ALIGN) & ~GEMM_ALIGN;
			/* setparam-ref.c: GEMM_R fills the buffer after the A block */
			c->r = ((BUFFER_BYTES - c->b_offset) / (c->q * 4) - 15) & ~15ll;
			return 0;
		}
	return -ENOENT;
}

/* The column-major driver sees the row-major product transposed: its M is
 * our n (the columns of C, packed as A blocks of at most GEMM_P) and its N
 * our m (packed as the B panel).  Resident pages of the A block and the B
 * panel, which start page-aligned at 0 and at b_offset. */
static int64_t one_thread_bytes(const struct hp_blas_core *c, int64_t m, int64_t n, int64_t k)
{
	int64_t l = min_i64(k, c->q), a = 4 * l * round_up(min_i64(n, c->p), c->um);
	int64_t cols = n > c->p ? min_i64(m, c->r) : min_i64(m, JJ_UNROLLS * c->un);

	return round_up(a, PAGE) + round_up(4 * l * round_up(cols, c->un), PAGE);
}

/* level3_thread.c: each thread packs an A block of its rows of the driver's
 * M and its share of the B panel in two halves, the second GEMM_Q x half
 * further on; at most all of the panel's columns fall to one thread. */
static int64_t threaded_bytes(const struct hp_blas_core *c, int64_t m, int64_t n, int64_t k)
{
	int64_t l = min_i64(k, c->q), a = 4 * l * round_up(min_i64(n, c->p), c->um);
	int64_t half = round_up((m + 1) / 2, c->un);

	return round_up(a, PAGE) + 2 * round_up(4 * l * half, PAGE);
}

int64_t hp_blas_call_bytes(const struct hp_blas_core *c, int64_t m, int64_t n, int64_t k, int threads)
{
	int64_t one;

	if (!c || !c->p)
		return -ENOENT;
	if (m <= 0 || n <= 0 || k <= 0)
		return 0;
	one = one_thread_bytes(c, m, n, k);
	if (threads <= 1 || (double)m * (double)n * (double)k <= MNK_ONE_THREAD)
		return one;
	int64_t t = threaded_bytes(c, m, n, k);

	return t > one ? t : one;
}

static struct hp_blas_core core;
static int core_state; /* 0 not read, 1 known, -1 not in the table */
static pthread_once_t core_once = PTHREAD_ONCE_INIT;
static _Atomic uint64_t seen_bytes, seen_threaded, seen_calls;

static void core_read(void)
{
	core_state = hp_blas_core(&core) == 0 ? 1 : -1;
}

static void seen_max(uint64_t b)
{
	uint64_t cur = atomic_load_explicit(&seen_bytes, memory_order_relaxed);

	while (b > cur && !atomic_compare_exchange_weak_explicit(&seen_bytes, &cur, b, memory_order_relaxed,
								 memory_order_relaxed))
		;
}

void hp_sgemm(enum CBLAS_TRANSPOSE ta, enum CBLAS_TRANSPOSE tb, int m, int n, int k, float alpha, const float *a,
	      int lda, const float *b, int ldb, float beta, float *c, int ldc)
{
	int threads = openblas_get_num_threads();

	pthread_once(&core_once, core_read);
	if (core_state > 0) {
		seen_max((uint64_t)hp_blas_call_bytes(&core, m, n, k, threads));
		if (threads > 1 && (double)m * (double)n * (double)k > MNK_ONE_THREAD)
			atomic_fetch_add_explicit(&seen_threaded, 1, memory_order_relaxed);
	}
	atomic_fetch_add_explicit(&seen_calls, 1, memory_order_relaxed);
	cblas_sgemm(CblasRowMajor, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

void hp_blas_seen(struct hp_blas_seen *s)
{
	s->call_bytes = atomic_load(&seen_bytes);
	s->threaded_calls = atomic_load(&seen_threaded);
	s->calls = atomic_load(&seen_calls);
}
