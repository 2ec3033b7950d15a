/* The planner's speed model (internal to exec/): what one kernel costs and
 * how fast the store's tiers move bytes, measured on this machine.
 *
 * Kernels fall in two classes.  sgemm-bound ops (Conv, ConvTranspose, Gemm,
 * MatMul and their gradients) run at a GFLOP/s that grows with the problem:
 * it is measured with real Conv kernels at a few sizes and interpolated in
 * log(FLOPs).  Everything else is memory-bound: its inputs and outputs
 * stream at a measured GB/s.  Every kernel also pays a fixed dispatch cost.
 * Tier bandwidths are measured through the store itself (same tier kind,
 * directory and chunk size as the run), so crc32c and queue depth are in.
 *
 * Both sets of figures are cached in $XDG_CACHE_HOME/hpdlf (or
 * ~/.cache/hpdlf), one file per key (CPU model, threads, hpdlf version; for
 * tiers: kind, filesystem, chunk size), with a checksum: a damaged or
 * foreign file is measured again and rewritten.  HPDLF_RECALIBRATE=1 (or
 * hp_exec_opts.recalibrate) measures again regardless. */
#ifndef HPDLF_EXEC_SPEED_H
#define HPDLF_EXEC_SPEED_H

#include <stdint.h>

#include "hpdlf/graph.h"
#include "hpdlf/store.h"

#define HP_SPEED_NPTS 4

enum hp_kclass {
	HP_KC_GEMM = 0,   /* sgemm-bound */
	HP_KC_MEM = 1,    /* memory-bound (element-wise, pooling, norms, copies) */
	HP_KC_N
};

enum hp_speed_src {
	HP_SPEED_DEFAULT = 0,  /* not measured: a built-in guess */
	HP_SPEED_MEASURED = 1, /* measured by this call */
	HP_SPEED_CACHED = 2,   /* read from the cache file */
};

struct hp_speed_compute {
	int threads;                     /* threads per kernel */
	double flops[HP_SPEED_NPTS];     /* sgemm-bound problem sizes measured (ascending) */
	double gflops[HP_SPEED_NPTS];    /* and their GFLOP/s */
	double mem_GBps;                 /* bytes read + written per second / 1e9 */
	double dispatch_us;              /* fixed cost per kernel */
	enum hp_speed_src src;
	char cache[512];                 /* cache file ("" none) */
};

struct hp_speed_tier {
	char name[16];                   /* as the store's statistics call it */
	double read_MBps, write_MBps;
	double read_lat_us, write_lat_us; /* fixed cost of one load / write-back */
	enum hp_speed_src src;
	char cache[512];
};

/* ---- calibration: runs sessions (speed_calib.c) and probes stores
 * (speed_tier.c); only the plan API (plan_api.c) calls these, never the
 * planner, so nothing below the session calls back up into it ---- */

/* The compute model for kernels running on `threads` threads. */
void hp_speed_compute_get(int threads, int recalibrate, struct hp_speed_compute *out);
/* (In both: recalibrate < 0 never measures: the cached figures, or the
 * built-in defaults; a run under a budget must not pay the memory of a
 * calibration.) */
/* Bandwidth of a lower tier as the store would open it (spec->path NULL:
 * the anonymous spill file in $TMPDIR), paging chunks of chunk_size
 * bytes.  A tier opened by the caller (spec->tier set, e.g. remote) cannot
 * be probed: defaults are returned. */
void hp_speed_tier_get(const struct hs_tier_spec *spec, uint64_t chunk_size, int recalibrate,
		       struct hp_speed_tier *out);

/* ---- the pure model (speed.c): predicted times from the measured
 * figures; the planner (plan.c, plan_dot.c) uses only these ---- */

/* Predicted milliseconds of one run of node n, and its class. */
double hp_speed_kernel_ms(const struct hp_speed_compute *sp, const struct hp_graph *g, const struct hp_node *n,
			  enum hp_kclass *cls);
/* Bytes node n reads and writes (its inputs and outputs). */
double hp_speed_kernel_bytes(const struct hp_graph *g, const struct hp_node *n);
/* GFLOP/s of an sgemm-bound kernel of `flops` operations. */
double hp_speed_gemm_gflops(const struct hp_speed_compute *sp, double flops);

/* Cache files (speed_cache.c): the text of the figures under `key`. */
int hp_speed_cache_path(const char *kind, const char *key, char *path, size_t len);
/* Read the numbers stored under key into v[0..n): 0, or -1 if the file is
 * missing, damaged, for another key or holds other than n positive numbers. */
int hp_speed_cache_read(const char *path, const char *key, double *v, int n);
/* Write them atomically (temporary file + rename); failures are ignored:
 * the cache only saves time. */
void hp_speed_cache_write(const char *path, const char *key, const double *v, int n);
/* Keep at most `keep` cache files of `kind` (the newest by modification
 * time: a reader that uses one touches it); an older surplus is removed
 * down to three quarters of `keep`.  Files of one key per model (kind
 * "overhead") would otherwise pile up without bound. */
void hp_speed_cache_prune(const char *kind, int keep);
/* "cpu=MODEL threads=N version=V": this machine's key. */
void hp_speed_machine_key(int threads, char *buf, size_t len);
int hp_speed_recalibrate_env(void);

#endif
