/* fio as the disk reference of the benchmarks (bench_store, bench_ooc). */
#ifndef HPDLF_BENCH_FIO_H
#define HPDLF_BENCH_FIO_H

#include <stdint.h>

/* Run one fio job (io_uring, O_DIRECT, queue depth qd) on DIR/hpdlf-bench-fio.dat
 * with `rw` (read, write, randread, ...) and block size `bs` over `size`
 * bytes; returns MB/s (IOPS when want_iops), or -1 when fio is missing or
 * fails.  The data file is left for the caller's next job; remove it with
 * hp_bench_fio_cleanup(). */
double hp_bench_fio(const char *dir, const char *rw, const char *bs, uint64_t size, unsigned qd, int want_iops);
void hp_bench_fio_cleanup(const char *dir);

#endif
