/* Internal: the one owner of OpenBLAS's thread count, and the one caller of
 * its sgemm.
 *
 * OpenBLAS keeps a single thread count for the whole process, and Debian
 * 12's OpenBLAS 0.3.21 has no per-thread setting (openblas_set_num_threads_local
 * came in 2024, OpenBLAS PR #4425).  Sessions, task-net workers and every tiled or pool-parallel
 * kernel want a say in it, so they all go through here and nothing else in
 * hpdlf calls openblas_set_num_threads.  The count in force is 1 while any
 * serial section is open (kernels that parallelize over their own pool and
 * call BLAS from each worker: a threaded call would round differently and
 * oversubscribe the cores), else the last hp_blas_threads() value.
 * OpenBLAS is only told when that count changes.
 *
 * Every sgemm goes through hp_sgemm, which passes the call on unchanged
 * (the same bits) and keeps the most any call touched of OpenBLAS's packing
 * buffer, by the model of hp_blas_call_bytes: the budget's fixed overhead
 * reserves a bound of that (exec/overhead.c) and tests hold the calls to it.
 */
#ifndef HPDLF_KERNELS_BLAS_H
#define HPDLF_KERNELS_BLAS_H

#include <stdint.h>

#include <cblas.h>

/* Threads a BLAS call may use outside serial sections (n < 1: 1).  Called by
 * the executor when a session or a task net decides its per-kernel threads;
 * the last call wins process-wide. */
void hp_blas_threads(int n);

/* BLAS on one thread until the matching leave.  Sections nest and may be
 * open on several threads at once; the last one out restores the count. */
void hp_blas_serial_enter(void);
void hp_blas_serial_leave(void);

/* cblas_sgemm(CblasRowMajor, ...), recording what the call touches. */
void hp_sgemm(enum CBLAS_TRANSPOSE ta, enum CBLAS_TRANSPOSE tb, int m, int n, int k, float alpha, const float *a,
	      int lda, const float *b, int ldb, float beta, float *c, int ldc);

/* OpenBLAS's sgemm blocking for the core it runs on (openblas_get_corename,
 * which OPENBLAS_CORETYPE sets): GEMM_P, GEMM_Q, GEMM_R and the kernel's
 * unrolls, from 0.3.21's param.h and setparam-ref.c. */
struct hp_blas_core {
	const char *name;
	int64_t p, q, r, um, un;
	int64_t b_offset; /* where the B panel starts in a buffer */
};

/* The core's blocking: 0, or -ENOENT for a core not in the table or
 * an OpenBLAS other than 0.3.21. */
int hp_blas_core(struct hp_blas_core *c);

/* The most bytes of one OpenBLAS buffer (resident pages) a row-major
 * sgemm of m x n by k touches when OpenBLAS runs it on `threads` threads
 * (each thread its own buffer), by level3.c and level3_thread.c of 0.3.21:
 * the packed A block (at most GEMM_Q x GEMM_P floats) and the packed B
 * panel (about GEMM_Q x m floats when n exceeds GEMM_P or the call is
 * threaded, else a few columns).  An upper bound: the calls OpenBLAS
 * answers from its small-matrix or direct kernels touch nothing.  -ENOENT
 * for a core not in the table. */
int64_t hp_blas_call_bytes(const struct hp_blas_core *c, int64_t m, int64_t n, int64_t k, int threads);

/* What hp_sgemm saw since the start: the most one call touched of a
 * buffer (hp_blas_call_bytes, by the threads in force) and how many calls
 * ran on more than one thread. */
struct hp_blas_seen {
	uint64_t call_bytes;
	uint64_t threaded_calls;
	uint64_t calls;
};
void hp_blas_seen(struct hp_blas_seen *s);

#endif
