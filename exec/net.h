/* The task net (internal to exec/): a Petri net compiled from a plan order,
 * an engine that knows nothing of graphs, stores or kernels.
 *
 * Places: resident(v) and on_tier(v) for every value the caller manages
 * (a value is a place index with a size in bytes), and one budget place
 * whose tokens are free DRAM bytes.  Transitions: kernels (consume
 * resident inputs and budget for outputs and workspace, produce resident
 * outputs), loads (on_tier -> resident, take budget), write-backs and
 * evictions (resident -> on_tier, give budget back), drops (a value's last
 * use passed: give its budget back) and, at the start of a run, the
 * reconciliation that brings residency to the plan's steady state.
 * Communication and recompute transitions are coming (data and pipeline
 * parallelism, activation recompute): they read and write values like a
 * kernel and fire through their own ops.
 *
 * Arcs are computed once from the entries' reads and writes: a kernel
 * waits for whatever last made each input resident; a write-back, eviction
 * or drop waits for that and for every kernel that read the value since; a
 * load waits for the value's previous eviction.  The budget place hands
 * out its tokens in plan order (a FIFO place): because the planner checked
 * that every prefix of that order fits the budget, a transition granted its
 * tokens never waits for a later one, so the net cannot deadlock and
 * resident bytes never exceed the budget, whatever the order in which
 * enabled transitions actually fire.
 *
 * Kernels fire on the compute workers, loads and write-backs on the I/O
 * threads, drops on whichever is free first.  The caller's ops do the
 * work; the net only orders it. */
#ifndef HPDLF_EXEC_NET_H
#define HPDLF_EXEC_NET_H

#include <stddef.h>
#include <stdint.h>

struct hp_net;
struct hp_trace;

enum hp_tr_kind {
	HP_TR_KERNEL = 0,
	HP_TR_LOAD,
	HP_TR_WRITEBACK,
	HP_TR_EVICT,
	HP_TR_DROP,
	HP_TR_COMM,      /* a send or receive (coming: data and pipeline parallelism) */
	HP_TR_RECOMPUTE, /* a kernel run again instead of a load (coming) */
	HP_TR_NKINDS
};

/* One entry of the plan order (the order the budget is granted in). */
struct hp_net_entry {
	uint8_t kind;          /* enum hp_tr_kind */
	uint8_t reconcile;     /* prologue LOAD/WRITEBACK: what it needs depends on
				* what is resident when a run starts */
	uint8_t inplace;       /* KERNEL/RECOMPUTE: out[0] takes over in[0]'s bytes;
				* COMM: out[i] over in[i] for every i >= 1 */
	uint8_t ordered;       /* KERNEL/COMM: fires after the previous ordered entry
				* is done (collectives every rank issues in one order) */
	int value;             /* LOAD/WRITEBACK/EVICT/DROP: the value; a drop of a
				* value not resident at that point is left out */
	int step;              /* KERNEL/RECOMPUTE/COMM: handed to its fire op */
	int nin, nout;         /* KERNEL/RECOMPUTE/COMM: values read and written */
	const int *in, *out;   /* (entries < 0 or of size 0 are not managed: ignored) */
	const int *over;       /* KERNEL/RECOMPUTE, or NULL: per output, the index in
				* in[] of the input whose bytes it takes over, -1 none
				* (besides inplace's out[0] over in[0]) */
	uint64_t workspace;    /* KERNEL/RECOMPUTE: scratch bytes taken for its duration */
};

struct hp_net_desc {
	int nvalues;
	const uint64_t *vsize;     /* per value: its budget bytes; 0: not managed */
	const uint32_t *nchunks;   /* per value: chunks of `chunk` bytes a load may be
				    * split in over the I/O threads; NULL: never split */
	uint64_t chunk;
	uint64_t wb_part;          /* a write-back of a value of several chunks that a load
				    * follows before the next kernel goes in parts of at least
				    * this many bytes, one after another, each giving back its
				    * bytes when it lands (net.c, add_writeback); 0: whole, as
				    * does inline I/O */
	int nentries;
	const struct hp_net_entry *entries; /* copied: need not outlive the call */
	uint64_t budget;           /* tokens of the budget place */
	uint64_t reserved;         /* of which held apart for the whole session */
	struct hp_trace *trace;    /* stall spans, or NULL */
	int workers, io_threads;   /* compute workers (the caller of hp_net_run is 0), I/O threads;
				    * io_threads 0 with one worker and the ops start_io_batch and
				    * io_batch_done: none, the worker issues the I/O itself */
};

/* What firing a transition does (the caller's side).  lane: the trace
 * lane of the thread firing it.  Optional ops may be NULL when the plan
 * order holds no transition of their kind. */
/* One LOAD or WRITEBACK of a batch (fire_io_batch); rc is the op's answer. */
struct hp_net_io {
	int kind, value;
	uint64_t first, nchunks;
	int rc;
};

struct hp_net_ops {
	int (*fire_kernel)(void *arg, int step, int worker, int lane);
	/* LOAD, WRITEBACK (chunks [first, first + nchunks), nchunks 0: all), EVICT, DROP */
	int (*fire_io)(void *arg, int kind, int value, uint64_t first, uint64_t nchunks, int lane);
	int (*fire_comm)(void *arg, int step, int lane);
	int (*fire_recompute)(void *arg, int step, int worker, int lane);
	/* Optional: the LOADs and WRITEBACKs ready together (up to HP_NET_IO_BATCH,
	 * in plan order), fired at once so that their chunks go to the device in
	 * one submission; each io's rc set as fire_io would return it. */
	void (*fire_io_batch)(void *arg, struct hp_net_io *ios, int n, int lane);
	/* Optional, both or neither: I/O without I/O threads (io_threads 0, one
	 * compute worker).  start_io_batch starts such a batch and returns at
	 * once with a handle (NULL: nothing left in flight, each rc set);
	 * io_batch_done polls it (wait 0) or waits for it (wait 1) and returns 1
	 * once it is done, each io's rc set and the handle gone, else 0.  The
	 * compute worker then submits the I/O as it becomes ready, computes
	 * while it is in flight and reaps it between kernels: no thread is woken
	 * for it (lenet under a tight budget: ~1,000 futex calls a step between
	 * the worker and 4 I/O threads on 2 cores). */
	void *(*start_io_batch)(void *arg, struct hp_net_io *ios, int n, int lane);
	int (*io_batch_done)(void *arg, void *h, struct hp_net_io *ios, int n, int wait);
	/* Optional, with start_io_batch: on 1, hold back the submissions of the
	 * start_io_batch calls that follow; on 0, submit them at once (nested
	 * as hs_tier_uring_plug).  With it, small batches of write-backs only
	 * (64 KiB at most) wait for the next batch with a load, or for the
	 * worker to wait, or two kernels, and go in one submission with them. */
	void (*io_plug)(void *arg, int on);
};

#define HP_NET_IO_BATCH 16

struct hp_net_stats {
	uint64_t fired[HP_TR_NKINDS]; /* transitions fired, per kind (last run) */
	double stall_ms;        /* compute workers idle waiting for loads or budget (last run) */
	double busy_ms;         /* kernel time summed over workers (last run) */
	uint64_t bytes_loaded;  /* budget taken by loads that read (last run) */
	uint64_t wakes[2];      /* idle compute workers, I/O threads woken (last run) */
};

/* Compile the plan order into a net and start its threads (compute
 * workers beyond the calling thread, and I/O threads).  ops and arg must
 * outlive the net. */
int hp_net_create(const struct hp_net_desc *d, const struct hp_net_ops *ops, void *arg, struct hp_net **out);
/* One run: fire transitions until all have fired; the calling thread is
 * compute worker 0.  The first failure stops granting; its message is
 * returned. */
int hp_net_run(struct hp_net *n);
/* A value became resident outside a run (an input written by the user). */
void hp_net_note_resident(struct hp_net *n, int v);
void hp_net_stats(const struct hp_net *n, struct hp_net_stats *out);
int hp_net_transitions(const struct hp_net *n);
void hp_net_destroy(struct hp_net *n);

#endif
