/* Internal to exec/. */
#ifndef HPDLF_EXEC_INTERNAL_H
#define HPDLF_EXEC_INTERNAL_H

#include <stdint.h>

#include "hpdlf/exec.h"
#include "hpdlf/kernels.h"

struct hp_session {
	struct hp_graph *g;
	struct hp_exec_opts opts;
	int threads;
	struct hp_pool *pool;
	void **buf;            /* per value: run-time buffer or NULL */
	int *last_use;         /* per value: last schedule index using it, -1 unused */
	void *ws;
	size_t ws_size;
	size_t cur_bytes, peak_bytes, weight_bytes;
	double flops, last_ms;
};

int hp_exec_online_cpus(void);
/* Measured sgemm speed (GFLOP/s) with `threads` BLAS threads, for the time model. */
double hp_exec_measure_gflops(int threads);

#endif
