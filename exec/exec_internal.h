/* Internal to exec/. */
#ifndef HPDLF_EXEC_INTERNAL_H
#define HPDLF_EXEC_INTERNAL_H

#include <pthread.h>
#include <stdint.h>

#include "hpdlf/exec.h"
#include "hpdlf/kernels.h"
#include "exec/budget.h"

struct hs_store;
struct hs_tensor;
struct hs_prefetch;
struct hp_plan;
struct hp_trace;
struct hp_net;
struct hp_pool;

struct hp_session {
	struct hp_graph *g;
	struct hp_exec_opts opts;
	int threads;
	struct hp_budget_layout layout; /* of g under opts (hp_compile) */
	struct hp_pool *pool;
	void **buf;            /* per value: run-time buffer or NULL */
	unsigned char *arena;  /* in core: every activation at a planned offset */
	uint64_t arena_size;
	unsigned char *owned;  /* per value: buf[v] was malloc'd (inputs, weights, state) */
	int *last_use;         /* per value: last schedule index using it, -1 unused */
	void *ws;
	size_t ws_size;
	size_t cur_bytes, peak_bytes, weight_bytes;
	double flops, last_ms, kernel_ms;
	/* out of core (opts.budget set): every managed value is a store tensor */
	struct hs_store *store;
	struct hs_tensor **ten;      /* per value; the task net orders all access */
	struct hs_tensor **spare;    /* dead values' tensors, discarded (contents gone, frames kept) */
	int nspare, capspare;        /* a stack: the last one dropped is taken first */
	pthread_mutex_t spare_mu;
	struct hp_trace *trace;      /* --trace, or NULL */
	struct hp_plan *plan;
	struct hp_net *net;
	uint64_t run_written;        /* bytes written below DRAM by the last run */
	struct hs_tensor **scratch;  /* per compute worker: kernel workspace, pinned */
	void **scratch_ptr;
	int nscratch;
};

int hp_rt_create(struct hp_session *s);
int hp_rt_run(struct hp_session *s);
int hp_rt_set_input(struct hp_session *s, int v, const void *data);
int hp_rt_get_output(struct hp_session *s, int v, void *dst);
void hp_rt_destroy(struct hp_session *s);
uint64_t hp_rt_peak(const struct hp_session *s);
/* The task net's transitions (net.c calls them on its workers). */
int hp_rt_fire_kernel(struct hp_session *s, int step, int worker, struct hp_pool *pool, int lane);
int hp_rt_fire_io(struct hp_session *s, int kind, int v, uint64_t first, uint64_t nchunks, int lane);

/* One value to place in the arena: alive over steps [start, end]. */
struct hp_arena_item {
	uint64_t size;
	int start, end;
	uint64_t offset;       /* out */
};
/* Offsets such that items alive at the same step never overlap; *total is
 * the arena size.  Sizes are rounded up to `align`. */
int hp_arena_place(struct hp_arena_item *items, int n, uint64_t align, uint64_t *total);

int hp_exec_online_cpus(void);

#endif
