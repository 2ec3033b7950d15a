/* Internal: the one owner of OpenBLAS's thread count.
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
 */
#ifndef HPDLF_KERNELS_BLAS_H
#define HPDLF_KERNELS_BLAS_H

/* Threads a BLAS call may use outside serial sections (n < 1: 1).  Called by
 * the executor when a session or a task net decides its per-kernel threads;
 * the last call wins process-wide. */
void hp_blas_threads(int n);

/* BLAS on one thread until the matching leave.  Sections nest and may be
 * open on several threads at once; the last one out restores the count. */
void hp_blas_serial_enter(void);
void hp_blas_serial_leave(void);

#endif
