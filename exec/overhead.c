/* The process's fixed overhead and the tensor budget it leaves (see
 * budget.h: the budget bounds the whole process from 64 MiB on). */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <utime.h>

#include "hpdlf/store.h"
#include "hpdlf/tensor.h"
#include "common/cpus.h"
#include "exec/budget.h"
#include "exec/comm.h"
#include "exec/exec_internal.h"
#include "exec/speed.h"
#include "exec/speed_rev.h"
#include "exec/speed_version.h"
#include "store/frames.h"

/* What the runtime adds to the resident set after the measurement,
 * whatever the budget: OpenBLAS's packing buffers (hp_budget_blas_per_buffer
 * per core: kernels call sgemm on one thread each, in serial sections,
 * each call holding one buffer of OpenBLAS's pool), touched stack of the
 * compute, pool and I/O threads, and the plan, the net and the store's
 * catalog. */
#define THREAD_STACK (256ull << 10)
#define IO_THREADS 6
#define METADATA (2ull << 20)
/* Training builds its step after the measurement (autodiff, the plan and
 * the task net of forward, backward and update nodes): the heap grows with
 * the graph.  An EfficientNet-like net of 868 nodes trained at 64 and 80
 * MiB held 29.5 MiB besides tensors against a start-up of 15.2: 9.5 KiB a
 * node beyond the allowances above (which OpenBLAS's 6 MiB per core had
 * covered while its buffers were reserved whole). */
#define TRAIN_NODE_BYTES (12ull << 10)
/* libfabric's buffers grow once connections carry data (bounce and
 * receive buffers, registrations): measured up to about 12 MiB beyond
 * its start-up with the tcp;ofi_rxm provider. */
#define REMOTE_BUFFERS (16ull << 20)

static uint64_t overhead_fixed, blas_bound;
static int overhead_known;
static pthread_mutex_t overhead_mu = PTHREAD_MUTEX_INITIALIZER;

static uint64_t rss_now(void)
{
	FILE *f = fopen("/proc/self/status", "r");
	char line[256];
	uint64_t kib = 0;

	if (!f)
		return 0;
	while (fgets(line, sizeof line, f))
		if (!strncmp(line, "VmRSS:", 6))
			kib = strtoull(line + 6, NULL, 10);
	fclose(f);
	return kib * 1024;
}

static uint64_t value_bytes(const struct hp_graph *g, int v)
{
	struct hp_tensor t = { .dtype = g->values[v].dtype, .shape = g->values[v].shape };

	return hp_tensor_bytes(&t);
}

/* The caller's copy of one input and of one output at a time (hpdlf-exec
 * reads an input file whole, hands it over and frees it; an output the
 * same way back). */
static uint64_t io_copies(const struct hp_graph *g)
{
	uint64_t in = 0, out = 0;

	for (int i = 0; g && i < g->ninputs; i++)
		if (value_bytes(g, g->inputs[i]) > in)
			in = value_bytes(g, g->inputs[i]);
	for (int i = 0; g && i < g->noutputs; i++)
		if (value_bytes(g, g->outputs[i]) > out)
			out = value_bytes(g, g->outputs[i]);
	return in + out;
}

/* A start-up's resident set varies by a few hundred KiB from process to
 * process (library pages and thread stacks touched early or late), and
 * the smallest budget named from 64 MiB on moved by a 2 MiB grain between
 * two runs of one command now and then.  So the figure is kept, per model
 * file, mode, version and source revision ($XDG_CACHE_HOME/hpdlf: a build
 * that holds less at start-up is not stuck with an older one's most), with
 * RSS_MARGIN on top:
 * a later start-up takes it unless it measures more, then keeps its own.
 * Never below what this process measured. */
#define RSS_MARGIN (1ull << 20)
/* One file per model, mode and version: the most kept (pruned oldest
 * first, exec/speed_cache.c). */
#define OVERHEAD_FILES 256
/* A process started with a preloaded library (valgrind's tools,
 * sanitizers, profilers: LD_PRELOAD) holds more at start-up than a plain
 * one, and the most kept would hold every later run of the model to it
 * (after a valgrind run, plain ones were refused with a smallest budget of
 * 94 MB).  Such a process uses its own figure and leaves the cache alone;
 * HPDLF_RECALIBRATE=1 replaces the kept figure with its start-up's. */
static int preloaded(void)
{
	const char *p = getenv("LD_PRELOAD");

	return p && *p;
}
static uint64_t rss_settled(const struct hp_graph *g, uint64_t now, uint64_t cpus, int remote, const char *mode)
{
	char key[1200], path[512];
	double kept = 0;
	struct stat st;

	if (!g || !g->path || stat(g->path, &st) < 0 || !now || preloaded())
		return now;
	snprintf(key, sizeof key, "version=%s rev=%s cpus=%llu remote=%d ranks=%d mode=%s nodes=%d model=%s size=%lld mtime=%lld",
		 HPDLF_VERSION, HPDLF_SPEED_REV, (unsigned long long)cpus, remote, hp_comm_size(), mode ? mode : "", g->nnodes, g->path,
		 (long long)st.st_size, (long long)st.st_mtime);
	if (hp_speed_cache_path("overhead", key, path, sizeof path) < 0)
		return now;
	/* the file names its key: another model whose key hashes alike
	 * never lends its figure; in pages (the cache keeps 9 digits) */
	if (!hp_speed_recalibrate_env() && hp_speed_cache_read(path, key, &kept, 1) == 0 && kept * 4096 >= (double)now) {
		utime(path, NULL); /* in use: the newest are the ones kept */
		return (uint64_t)kept * 4096;
	}
	kept = (double)((now + RSS_MARGIN + 4095) / 4096);
	hp_speed_cache_write(path, key, &kept, 1);
	hp_speed_cache_prune("overhead", OVERHEAD_FILES);
	return (uint64_t)kept * 4096;
}

void hp_budget_overhead_measure(const struct hp_graph *g, int remote, const char *mode)
{
	uint64_t cpus = (uint64_t)hp_cpus_online(), grain = 2ull << 20, f;
	/* ranks: pipeline stages' deferred weight gradients call a threaded
	 * sgemm the bound does not model; the legacy figure (g NULL) */
	int training = mode && strcmp(mode, "infer") && strcmp(mode, "infer-budget"); /* compile.c's modes */
	uint64_t blas = (uint64_t)hp_budget_blas_per_buffer(hp_comm_size() > 1 ? NULL : g, training);

	pthread_mutex_lock(&overhead_mu);
	if (!overhead_known) {
		f = rss_settled(g, rss_now(), cpus, remote, mode) + io_copies(g) + cpus * blas +
		    (cpus + IO_THREADS) * THREAD_STACK + METADATA + (remote ? REMOTE_BUFFERS : 0) +
		    (training && g ? (uint64_t)g->nnodes * TRAIN_NODE_BYTES : 0);
		overhead_fixed = (f + grain - 1) / grain * grain;
		blas_bound = blas;
		overhead_known = 1;
	}
	pthread_mutex_unlock(&overhead_mu);
}

int hp_budget_tiers_remote(const struct hs_tier_spec *tiers, int n)
{
	for (int i = 0; tiers && i < n; i++)
		if (tiers[i].kind == HS_TIER_REMOTE)
			return 1;
	return 0;
}

uint64_t hp_budget_blas_bound(void)
{
	return blas_bound;
}

uint64_t hp_budget_overhead(void)
{
	hp_budget_overhead_measure(NULL, 0, NULL);
	return overhead_fixed;
}

void hp_budget_overhead_set(uint64_t bytes)
{
	pthread_mutex_lock(&overhead_mu);
	overhead_fixed = bytes;
	overhead_known = 1;
	pthread_mutex_unlock(&overhead_mu);
}

/* The frame pool whose pages and per-page bookkeeping fit in `room`
 * (the bookkeeping grows with the pool, so the fixed overhead cannot hold
 * it: an 8 GiB headline run peaked 13 MB over its budget without this). */
static uint64_t pool_for(uint64_t room)
{
	return room / (HS_PAGE + HS_FRAMES_META_PER_PAGE) * HS_PAGE;
}

/* The most tensors get below 64 MiB (see budget.h): what 64 MiB gives. */
static uint64_t small_cap(uint64_t f)
{
	uint64_t floor = HP_BUDGET_PROCESS_FROM / 4;

	return f + floor < HP_BUDGET_PROCESS_FROM ? pool_for(HP_BUDGET_PROCESS_FROM - f) : floor;
}

uint64_t hp_budget_pool_meta(uint64_t bytes)
{
	return (bytes + HS_PAGE - 1) / HS_PAGE * HS_FRAMES_META_PER_PAGE;
}

uint64_t hp_budget_tensors(uint64_t process)
{
	uint64_t f = process ? hp_budget_overhead() : 0;

	if (!process)
		return 0;
	if (process < HP_BUDGET_PROCESS_FROM)
		return process < small_cap(f) ? process : small_cap(f);
	uint64_t t = process > f ? pool_for(process - f) : 0;

	return t ? t : 1; /* 1: refused, never "in core" */
}

uint64_t hp_budget_process_bound_for(uint64_t tensors)
{
	uint64_t need = (tensors + HS_PAGE - 1) / HS_PAGE * HS_PAGE + hp_budget_pool_meta(tensors) + hp_budget_overhead();

	return need > HP_BUDGET_PROCESS_FROM ? need : HP_BUDGET_PROCESS_FROM;
}

uint64_t hp_budget_process_for(uint64_t tensors)
{
	return tensors <= small_cap(hp_budget_overhead()) ? tensors : hp_budget_process_bound_for(tensors);
}
