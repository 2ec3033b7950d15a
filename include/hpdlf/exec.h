/* hpdlf executor: compile a graph and run it, in core or under a budget.
 *
 *   struct hp_exec_opts o;
 *   hp_exec_opts_init(&o, sizeof o);
 *   o.threads = 2;
 *   struct hp_session *s;
 *   if (hp_session_create(g, &o, &s) < 0) die(hp_errmsg());   // g inferred
 *   hp_session_set_input(s, "input", &x);                      // copied
 *   if (hp_session_run(s) < 0) die(hp_errmsg());
 *   struct hp_tensor y;
 *   hp_session_get_output(s, "logits", &y);                    // malloc'd copy
 *   hp_tensor_free(&y);
 *   hp_session_destroy(s);
 */
#ifndef HPDLF_EXEC_H
#define HPDLF_EXEC_H

#include <stddef.h>
#include <stdint.h>

#include "hpdlf/graph.h"
#include "hpdlf/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

struct hp_exec_opts {
	size_t size;            /* sizeof the struct the caller knows (growth) */
	int threads;            /* 0: all online cores.  Also OpenBLAS's thread count,
				 * which is process-wide: of sessions with different
				 * counts in one process, the last created sets it */
	uint64_t budget;        /* DRAM bytes for tensors; 0: unlimited (in core) */
	uint64_t seed;          /* for random inputs, dropout */
	const char *trace_path; /* Chrome trace JSON, or NULL */
	/* out of core (fields added later: check size) */
	int workers;            /* task-net compute workers (0: 1); each kernel gets
				 * threads / workers threads, so results equal in-core
				 * ones at that thread count */
	int io_threads;         /* I/O queues of the task net (0: 4, or none below 4 MiB of
				 * tensors with one worker: it issues the I/O itself) */
	int ntiers;             /* lower tiers of the store (0: a spill file in $TMPDIR) */
	const struct hs_tier_spec *tiers;
	int no_split;           /* out of core: keep the graph as it is (see hp_graph_compile) */
	int recalibrate;        /* planning: measure the speed model again (not the cache) */
	int no_weight_split;    /* out of core: keep weights whole (operators may still split) */
	int profile;            /* time every kernel per node (hp_session_profile) */
};

void hp_exec_opts_init(struct hp_exec_opts *o, size_t size);

struct hp_session;

/* The graph must have passed hp_graph_infer; it must outlive the session.
 * Under a budget the session first compiles the graph for it
 * (hp_graph_compile) unless o->no_split, then plans it.  A budget smaller
 * than one operator needs at once fails with HP_EBUDGET_OP, and
 * hp_exec_min_budget() then says which budget works. */
int hp_session_create(struct hp_graph *g, const struct hp_exec_opts *o, struct hp_session **out);
void hp_session_destroy(struct hp_session *s);

/* Copy an input (dtype and shape must match the inferred input; a bfloat16
 * input also takes uint16 data, its bits: .npy has no bfloat16; data for
 * an input no node reads is ignored). */
int hp_session_set_input(struct hp_session *s, const char *name, const struct hp_tensor *t);
int hp_session_run(struct hp_session *s);
/* Copy an output into freshly allocated memory (free with hp_tensor_free). */
int hp_session_get_output(struct hp_session *s, const char *name, struct hp_tensor *out);

struct hp_run_stats {
	double ms;              /* last run */
	double flops;           /* floating-point operations of one run */
	uint64_t peak_bytes;    /* tensor memory high-water mark */
};
void hp_session_stats(const struct hp_session *s, struct hp_run_stats *st);

/* Kernel time of one node summed over the runs so far (opts.profile): the
 * same intervals as the --trace spans. */
struct hp_node_profile {
	int node;               /* index into the session graph's nodes */
	uint64_t calls;
	double total_ms;
	double flops;           /* of one call */
};
/* The nodes that ran, in graph order, up to cap of them into out (may be
 * NULL with cap 0 to count): returns how many ran; HP_EUSAGE if the session
 * was created without opts.profile. */
int hp_session_profile(const struct hp_session *s, struct hp_node_profile *out, int cap);

/* Copy bytes [offset, offset + len) of value v (an index of the session's
 * graph) out of or into the session: any value kept between runs (weights,
 * optimizer and other run-to-run state, inputs, computed outputs).  Out of
 * core the bytes are pinned a chunk at a time, so a value larger than the
 * budget can be copied in pieces.  Used by checkpoints. */
int hp_session_read_value(struct hp_session *s, int v, uint64_t offset, uint64_t len, void *dst);
int hp_session_write_value(struct hp_session *s, int v, uint64_t offset, uint64_t len, const void *src);

struct hs_store_stats;
struct hs_tier_spec;
/* Tiering statistics of the session's store (out of core); -ENOENT in core. */
int hp_session_store_stats(const struct hp_session *s, struct hs_store_stats *out);
/* Bytes of loads from lower tier `tier` served without a read
 * (hs_store_tier_kept); 0 in core. */
uint64_t hp_session_tier_kept(const struct hp_session *s, int tier);
struct hs_readahead_stats;
/* The data set's read-ahead in the session's store (hs_store_readahead_stats:
 * set out->size): bytes read ahead, taken by the gathers, lost; -ENOENT in core. */
int hp_session_readahead_stats(const struct hp_session *s, struct hs_readahead_stats *out);
struct hs_frame_stats;
/* The work of the store's DRAM frame pool (hs_store_frame_stats: set
 * out->size): mremaps, compactions, their copies; -ENOENT in core. */
int hp_session_frame_stats(const struct hp_session *s, struct hs_frame_stats *out);

/* Details of the last run (out of core: the task net's figures).  Set
 * info->size = sizeof *info before the call. */
struct hp_run_info {
	size_t size;
	double ms;              /* wall time of the last run */
	double kernel_ms;       /* kernel time summed over workers */
	double stall_ms;        /* compute workers waiting for loads or budget */
	uint64_t kernels, loads, writebacks, evictions, drops; /* transitions fired */
	int workers, io_threads;
	int transitions;        /* in the task net (0 in core) */
	uint64_t bytes_loaded;  /* last run: read into DRAM (tiers and model files) */
	uint64_t bytes_written; /* last run: written below DRAM */
	uint64_t tier_peak;     /* since the session opened: the most bytes placed at
				 * once on the tiers below DRAM (hs_store_tier_peak) */
};
int hp_session_run_info(const struct hp_session *s, struct hp_run_info *info);

/* ---- planning ------------------------------------------------------- */

/* Operator splitting: when one operator alone needs more than o->budget,
 * rewrite the inferred graph g into more, smaller values and nodes (chains
 * of convolutional ops cut into bands of samples or of rows, Concat'ed back
 * before anything else) so that it fits; outputs equal the unsplit ones up to rounding.
 * Graph inputs and outputs keep their names and indices.  No change when
 * the graph fits, in core, or with o->no_split.  *nsplit (may be NULL):
 * operators rewritten. */
int hp_graph_split(struct hp_graph *g, const struct hp_exec_opts *o, int *nsplit);

/* What hp_session_create does to g under o->budget before it plans: the
 * weights of large matrix products cut in row blocks (unless
 * o->no_weight_split; outputs bitwise those in core), then operators split
 * (hp_graph_split).  Nothing in core or with o->no_split.  Call it before
 * hp_plan_summarize to plan the graph a session runs, then create any
 * session on the result with o->no_split set (compiling twice may cut
 * further a graph that does not fit). */
int hp_graph_compile(struct hp_graph *g, const struct hp_exec_opts *o);

/* After a call on this thread failed with HP_EBUDGET_OP (hp_session_create,
 * hp_plan_summarize, hp_plan_write_dot): the smallest budget in bytes that
 * works for the graph as it was compiled.  The figure of the last such
 * failure on this thread; 0 if there was none. */
uint64_t hp_exec_min_budget(void);

struct hp_plan_summary {
	int steps;               /* kernels to run (folded nodes excluded) */
	uint64_t budget;         /* 0: unlimited */
	uint64_t peak_bytes;     /* planned tensor-memory high-water mark */
	uint64_t min_budget;     /* smallest budget any schedule of this graph needs
				  * (of the process from 64 MiB on: hpdlf-exec(1)) */
	const char *min_node;    /* the node that needs it (graph-owned) */
	uint64_t bytes_loaded, bytes_written;
	uint64_t loads, prefetched;
	double gflops;           /* sgemm-bound speed of the largest size measured */
	double read_MBps, write_MBps;
	double compute_ms, io_ms, predicted_ms;
	/* The measured speed model behind the prediction (fields added later). */
	double gemm_ms, mem_ms;  /* compute_ms by kernel class: sgemm-bound, memory-bound */
	int gemm_kernels, mem_kernels;
	double dispatch_ms;      /* the fixed per-kernel cost within compute_ms */
	double read_ms, write_ms; /* io_ms split */
	double gflops_small, flops_small; /* sgemm-bound speed at the smallest size measured */
	double flops_large;      /* the largest size measured (gflops is its speed) */
	double mem_GBps, dispatch_us; /* memory-bound streaming speed, per-kernel cost */
	double read_lat_us, write_lat_us; /* per load / write-back beyond read_MBps, write_MBps */
	int threads, workers;    /* threads per kernel, compute lanes */
	int compute_source, tier_source; /* 0: built-in default, 1: measured now, 2: cached */
	char tier_name[16];      /* the tier paged to ("" in core): all loaded and written bytes */
	char compute_cache[512], tier_cache[512]; /* cache files ("" none) */
};

/* Plan one run of the inferred graph under o->budget (without running it).
 * The time model is measured on this machine at first use and cached
 * ($XDG_CACHE_HOME/hpdlf, or ~/.cache/hpdlf; o->recalibrate or
 * HPDLF_RECALIBRATE=1 measure again): about a second once.
 * HP_EBUDGET (with a message naming the operator and the smallest budget
 * that works) when an operator alone does not fit. */
int hp_plan_summarize(const struct hp_graph *g, const struct hp_exec_opts *o, struct hp_plan_summary *out);
/* Write the task net as Graphviz: transitions (kernels, loads, write-backs)
 * and places (values), with the plan's actions. */
int hp_plan_write_dot(const struct hp_graph *g, const struct hp_exec_opts *o, const char *path);

#ifdef __cplusplus
}
#endif
#endif
