/* hpdlf tensor store: tensors paged in chunks between DRAM and lower tiers.
 *
 *   struct hs_store_opts o;
 *   hs_store_opts_init(&o, sizeof o);
 *   o.budget = 1ull << 30;                      // DRAM cap, staging included
 *   struct hs_store *st;
 *   if (hs_store_open(&o, &st) < 0) ...;        // default: DRAM + spill file in $TMPDIR
 *
 *   struct hs_tensor_info ti = { .bytes = n * 4, .dtype = HP_F32, .name = NULL };
 *   struct hs_tensor *t;
 *   hs_tensor_create(st, &ti, &t);
 *   float *p;
 *   hs_pin(t, 0, HS_ALL, HS_PIN_OVERWRITE, (void **)&p);   // no read-in
 *   ...fill p...;
 *   hs_unpin(t, 0, HS_ALL);
 *   hs_hint(t, 42);                             // next used at step 42
 *   hs_evict(t, 0, HS_ALL, HS_TIER_ANY);        // write back, free DRAM
 *   struct hs_prefetch *pf;
 *   hs_prefetch(t, 0, HS_ALL, &pf);             // read back while computing
 *   hs_prefetch_wait(pf);
 *   hs_pin(t, 0, HS_ALL, HS_PIN_READ, (void **)&p);
 *   ...
 *   hs_tensor_drop(t);
 *   hs_store_close(st);
 *
 * A tensor is a run of fixed-size chunks (opts.chunk_size, default 4 MiB).
 * Pinning a chunk range gives a pointer to CONTIGUOUS DRAM holding exactly
 * those bytes (each tensor owns a reserved address range; chunks are paged in
 * and out of it), valid until the matching unpin.  Pins nest (counted).
 * Resident DRAM never exceeds opts.budget: pins that cannot fit fail with
 * HP_EBUDGET and a message with the sizes.
 *
 * Everything written below DRAM carries a crc32c checked when read back.
 * Named tensors on persistent tiers (pmem=, nvme= paths given by the user)
 * survive a crash once hs_store_commit() returned: reopening with the same
 * tier paths finds each named tensor in its last committed version (format:
 * docs/store-format.md).  The default spill file is anonymous: nothing in it
 * outlives the process.
 *
 * All functions are thread-safe.  Errors: 0 (or a count) on success, a
 * negative errno or HP_E* code on failure, with hp_errmsg() saying what and
 * where.
 */
#ifndef HPDLF_STORE_H
#define HPDLF_STORE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "hpdlf/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

struct hs_store;
struct hs_tensor;
struct hs_prefetch;
struct hs_tier; /* implementers: store/tier.h */

enum hs_tier_kind { HS_TIER_DRAM = 0, HS_TIER_PMEM = 1, HS_TIER_NVME = 2, HS_TIER_REMOTE = 3 };

#define HS_MAX_TIERS 8          /* lower tiers (below the DRAM cache) */
#define HS_ALL UINT64_MAX        /* "to the last chunk" in chunk ranges */
#define HS_TIER_ANY (-1)         /* evict: to wherever the policy places it */
#define HS_TIER_NONE (-2)        /* evict: only drop clean chunks, write nothing */
#define HS_NO_HINT INT64_MAX     /* next use unknown (LRU decides) */
#define HS_DEFAULT_CHUNK (4u << 20)

/* The job's hpdlf-store daemons, lending their DRAM (or PMEM) over
 * libfabric RMA: a tier of kind HS_TIER_REMOTE (hpdlf-store(1)). */
struct hs_remote_spec {
	const char *daemons;    /* "host:port,..."; NULL: hostfile, else $HPDLF_STORE,
	                           else the nodes of $SLURM_JOB_NODELIST (port
	                           $HPDLF_STORE_PORT or 7411) */
	const char *hostfile;   /* one host[:port] a line, '#' comments */
	const char *token_file; /* the job's secret (a private file); NULL: $HPDLF_TOKEN_FILE */
	int replicas;           /* copies of every extent on distinct daemons: 1 or 2 (0: 1) */
	int skip_unreachable;   /* open with the daemons that answer (0: all must) */
	int optional;           /* the daemons may be absent (a Slurm job that started
	                           none): if none is found or none answers, the tier
	                           is left out (hs_tier_open: 0 with *out NULL and
	                           hp_errmsg() saying why; hs_store_open: the tiers
	                           after it move up one index).  A bad token file
	                           still fails (HP_EUSAGE).  Implies skip_unreachable. */
};

/* One lower tier, in demotion order (e.g. pmem, remote, then nvme). */
struct hs_tier_spec {
	enum hs_tier_kind kind;
	const char *path;       /* pmem/nvme file or device; NULL for nvme: anonymous
	                           spill file in $TMPDIR (or /tmp) */
	uint64_t size;          /* capacity; 0: the existing file's size (or 64 GiB
	                           sparse for a new spill file, 1 GiB for a new pmem pool) */
	struct hs_tier *tier;   /* instead of the fields above: a tier already opened
	                           (hs_tier_open, or an implementer's); the store owns it */
	struct hs_remote_spec remote;   /* kind HS_TIER_REMOTE */
};

/* Open one tier from its spec now, e.g. to find a bad token file or absent
 * daemons before loading a model, and hand it to hs_store_open as
 * spec.tier (the store then owns it).  hs_store_open opens specs without
 * .tier itself.  A build without libfabric or libsodium refuses
 * HS_TIER_REMOTE with HP_EUNSUPPORTED (also when optional).  hs_tier_close frees a tier no store took; accepts NULL. */
int hs_tier_open(const struct hs_tier_spec *spec, struct hs_tier **out);
void hs_tier_close(struct hs_tier *t);

/* Eviction policy.  The store calls victim() with the resident, unpinned,
 * idle chunks and evicts the one whose index it returns (negative: none). */
struct hs_candidate {
	const struct hs_tensor *tensor;
	uint64_t chunk;
	int64_t next_use;       /* HS_NO_HINT if none */
	uint64_t last_use;      /* store-wide tick of the last pin/unpin */
	uint64_t bytes;
	int dirty;              /* must be written back before it can be dropped */
};
struct hs_policy {
	const char *name;
	long (*victim)(void *arg, const struct hs_candidate *c, size_t n);
	void *arg;
};
/* The default: farthest next use first (unhinted counts as farther than
 * any hint); least recently used among unhinted chunks; among chunks with
 * the same hint, clean before dirty, then least recently used. */
extern const struct hs_policy hs_policy_default;

struct hs_store_opts {
	size_t size;            /* sizeof the caller's struct (set by _init) */
	uint64_t budget;        /* DRAM cap in bytes (>= one chunk); default 1 GiB */
	uint64_t chunk_size;    /* power of two >= 4096; default 4 MiB */
	int ntiers;
	struct hs_tier_spec tiers[HS_MAX_TIERS];
	int default_spill;      /* ntiers == 0: add the $TMPDIR spill file (default 1) */
	unsigned queue_depth;   /* nvme queue depth (default 32) */
	int verify_crc;         /* check crc32c on read-back (default 1) */
	int reset;              /* ignore and overwrite existing data in tier files */
	int stats_page;         /* publish a stats page, hs_statpage_path() (default 0) */
	const struct hs_policy *policy; /* NULL: hs_policy_default */
	/* The chunk of a one-chunk tensor with a copy below DRAM that leaves
	 * DRAM clean (evicted, or written back and evicted) keeps its frames:
	 * cached, outside the budget, freed (discarded chunks' first) when
	 * frames run short; a load of it before then takes them back with no
	 * read (hs_store_tier_kept counts those bytes).  Default 0: every load
	 * reads. */
	int keep_clean;
};

void hs_store_opts_init(struct hs_store_opts *o, size_t size);
int hs_store_open(const struct hs_store_opts *o, struct hs_store **out);
/* Frees everything; removes the stats page.  Does not commit. Accepts NULL. */
void hs_store_close(struct hs_store *st);

struct hs_tensor_info {
	uint64_t bytes;
	enum hp_dtype dtype;
	struct hp_shape shape;  /* metadata only (rank 0 allowed) */
	const char *name;       /* NULL: anonymous; names are unique per store */
};

int hs_tensor_create(struct hs_store *st, const struct hs_tensor_info *info, struct hs_tensor **out);
/* A read-only tensor whose clean copy is bytes [offset, offset + info->bytes)
 * of an existing file (e.g. ONNX external data, a dataset).  Read on demand
 * or by hs_prefetch through the same asynchronous submit path as the tiers
 * (one read-only file tier per file), with O_DIRECT (chunks at unaligned
 * offsets through an aligned staging window, one at a time; filesystems
 * refusing O_DIRECT are read buffered and dropped from the page cache with
 * POSIX_FADV_DONTNEED); never written back; only resident chunks count
 * against the budget.  Pins must be HS_PIN_READ. */
int hs_tensor_create_backed(struct hs_store *st, const struct hs_tensor_info *info, const char *path,
			    uint64_t offset, struct hs_tensor **out);
/* A named tensor of this store (e.g. found again after reopening). */
int hs_tensor_open(struct hs_store *st, const char *name, struct hs_tensor **out);
/* Forget the tensor and free its DRAM and tier space.  Fails with -EBUSY if
 * pinned.  For a named tensor, the committed copy disappears at the next
 * hs_store_commit(). */
int hs_tensor_drop(struct hs_tensor *t);
/* Forget the contents of chunks [first, first + n) (n = HS_ALL: to the
 * end): nothing is written back, their copies below DRAM are freed (a named
 * tensor's committed copy stays until the next hs_store_commit()) and they
 * read as zeros afterwards.  Their DRAM frames stay mapped in the tensor,
 * outside the budget's count, until the store needs them for other chunks:
 * pinning the chunks again costs no remapping.  For tensors whose value is
 * dead but whose size comes back (a step's activations).  -EBUSY if a
 * chunk is pinned; not for file-backed tensors. */
int hs_tensor_discard(struct hs_tensor *t, uint64_t first, uint64_t n);
int hs_tensor_get_info(const struct hs_tensor *t, struct hs_tensor_info *out); /* name stays owned */
uint64_t hs_tensor_nchunks(const struct hs_tensor *t);
/* A label for the statistics page only (an anonymous tensor has no name;
 * a name would make it persistent): cut to HS_PAGE_NAME - 1 bytes; NULL
 * clears it.  A named tensor is listed under its name. */
int hs_tensor_set_label(struct hs_tensor *t, const char *label);
uint64_t hs_chunk_size(const struct hs_store *st);

enum hs_pin_mode {
	HS_PIN_READ = 0,        /* contents read in; must not be modified */
	HS_PIN_WRITE = 1,       /* contents read in; marked dirty */
	HS_PIN_OVERWRITE = 2,   /* no read-in; caller writes every byte; marked dirty */
};

/* Pin chunks [first, first + n) (n = HS_ALL: to the end); *ptr points at
 * byte first * chunk_size of the tensor.  Blocks while chunks are read in. */
int hs_pin(struct hs_tensor *t, uint64_t first, uint64_t n, enum hs_pin_mode mode, void **ptr);
int hs_unpin(struct hs_tensor *t, uint64_t first, uint64_t n);

/* Start reading chunks into DRAM (unpinned: they stay evictable).  *h is
 * waited on (returns the status and frees h) or polled (1 done, 0 not yet;
 * still call wait).  Chunks that cannot fit the budget fail with HP_EBUDGET. */
int hs_prefetch(struct hs_tensor *t, uint64_t first, uint64_t n, struct hs_prefetch **h);
int hs_prefetch_wait(struct hs_prefetch *h);
int hs_prefetch_poll(struct hs_prefetch *h);
/* Several ranges (of tensors of one store) as one prefetch: one handle, one
 * submission per tier, which is what small random reads need.  A chunk named
 * twice is read once. */
struct hs_range {
	struct hs_tensor *tensor;
	uint64_t first, n;      /* n = HS_ALL: to the end */
};
int hs_prefetch_many(const struct hs_range *r, size_t nr, struct hs_prefetch **h);

/* Read chunks of file-backed tensors ahead of their pins (a data set's
 * next batch, during the step before it), into frames that take nothing
 * from the budget: at most `room` bytes, and no more than the budget has
 * free now; nothing resident is evicted for them (their frames may be
 * those cached chunks keep, as any chunk's).  While they are read they count as
 * resident, and a pin or prefetch that needs their room waits for them
 * instead of evicting; once read they are kept (cached, outside the
 * budget), so the store takes their frames back whenever it needs frames,
 * and a pin or prefetch before then takes them with no read.  Chunks
 * resident, kept or loading already are skipped, and so are chunks read
 * through a staging window (an unaligned offset in an O_DIRECT file: that
 * read is synchronous).  Returns the chunks left out for want of room (0:
 * all of them are in DRAM, kept or being read); *h (NULL: nothing was
 * submitted) is waited on (hs_prefetch_wait: the reads' status, which a pin
 * reading the chunk again would report too) before the tensors are
 * dropped. */
int hs_readahead(const struct hs_range *r, size_t nr, uint64_t room, struct hs_prefetch **h);
struct hs_readahead_stats {
	size_t size;            /* set by the caller: sizeof; fields past it are left alone */
	uint64_t bytes;         /* read ahead (hs_readahead), since the store opened */
	uint64_t taken;         /* of them, taken back by a pin or prefetch with no read */
	uint64_t lost;          /* of them, whose frames went elsewhere first (or whose read failed) */
};
int hs_store_readahead_stats(struct hs_store *st, struct hs_readahead_stats *out); /* HP_EUSAGE: size unset */

/* Write dirty unpinned chunks of the range to lower tier `tier` (index in
 * opts.tiers, or HS_TIER_ANY / HS_TIER_NONE) and free their DRAM. Pinned
 * chunks are skipped; returns the number of chunks evicted. */
int hs_evict(struct hs_tensor *t, uint64_t first, uint64_t n, int tier);
/* hs_evict of several ranges (of one store) at once: their chunks go out in
 * one write-back, one submission per tier, instead of one wait per range.
 * A chunk named twice is written once.  Returns the chunks evicted. */
int hs_evict_many(const struct hs_range *r, size_t nr, int tier);
/* hs_evict_many without the wait: the writes are submitted and *h (NULL
 * when nothing had to be written) is polled and waited on like a prefetch's
 * handle (hs_prefetch_poll, hs_prefetch_wait).  Until its wait the chunks
 * being written stay in DRAM, counted as resident; the wait finishes the
 * eviction (frees their DRAM) and returns the writes' status.  Returns the
 * clean chunks evicted at once.  One thread can so keep many small writes
 * in flight while it computes. */
int hs_evict_start(const struct hs_range *r, size_t nr, int tier, struct hs_prefetch **h);
/* Next use as a caller-defined time (smaller: sooner); HS_NO_HINT clears. */
int hs_hint(struct hs_tensor *t, int64_t next_use);

/* Make every named tensor durable on the first persistent tier, atomically:
 * after a crash the store reopens with all of them at this commit or all at
 * the previous one.  HP_EUSAGE if the store has no persistent tier or a
 * named chunk is pinned for writing. */
int hs_store_commit(struct hs_store *st);

/* Statistics.  Tier 0 is the DRAM cache (hits: pins that found chunks
 * resident); tiers 1.. are opts.tiers.  prefetches, prefetch_hits and
 * prefetch_late count on tier 0 for all chunks and on the lower tier each
 * prefetched chunk was read from.  Latencies in log2 microsecond
 * buckets: bucket i counts requests that took [2^i, 2^(i+1)) us (bucket 0:
 * < 2 us). */
#define HS_LAT_BUCKETS 32
struct hs_tier_stats {
	char name[16];
	uint64_t capacity, used, chunks;
	uint64_t reads, writes, bytes_read, bytes_written;
	uint64_t hits, misses, evictions, promotions, demotions;
	uint64_t prefetches, prefetch_hits, prefetch_late;
	uint64_t errors, crc_errors;
	uint64_t lat_hist[HS_LAT_BUCKETS];
};
struct hs_store_stats {
	uint64_t budget, resident, pinned, staging, chunk_size;
	uint64_t tensors;
	int ntiers;             /* entries in tier[], DRAM included */
	struct hs_tier_stats tier[HS_MAX_TIERS + 1];
};
int hs_store_stats(struct hs_store *st, struct hs_store_stats *out);
/* 0 while every chunk the store placed below DRAM is still readable; else
 * the error of the first tier that lost some (a daemon that died holding
 * the only copy), its message naming what and where.  Cheap: a run calls it
 * before each step. */
int hs_store_check(struct hs_store *st);
/* The most bytes the store ever had placed at once on lower tier `tier`
 * (an index of opts.tiers), or with HS_TIER_ANY on all lower tiers
 * together, since it opened: the footprint a run needs on the tiers (what
 * hs_tier_stats.used shows is only what is placed now).  0 for a bad tier. */
uint64_t hs_store_tier_peak(struct hs_store *st, int tier);
/* Bytes of loads from lower tier `tier` (HS_TIER_ANY: all) that needed no
 * read, since the store opened: a clean chunk leaving DRAM keeps its frames
 * (cached, outside the budget) until they are needed elsewhere, and a load
 * of it before that takes them back.  Not in bytes_read; bytes_read plus
 * this is what the loads asked for.  0 for a bad tier. */
uint64_t hs_store_tier_kept(struct hs_store *st, int tier);
/* What the DRAM frame pool did since the store opened, the CPU cost of
 * paging that the tiers' byte counts do not show: `mremaps` (moves of
 * frames between the pool and tensor ranges: pieces of chunks mapped or
 * unmapped, 10-250 us each), `compactions` (searches for a window of free
 * pages to empty for a run, and clears of a run's place), of which `slides`
 * moved every movable chunk down the pool, and `compact_bytes` (the bytes
 * they copied, memcpy or memmove, and those copied to bring a tensor's
 * chunks moved apart back together: through a bounce buffer, each way). */
struct hs_frame_stats {
	size_t size;            /* set by the caller: sizeof; fields past it are left alone */
	uint64_t mremaps, compactions, slides, compact_bytes;
};
int hs_store_frame_stats(struct hs_store *st, struct hs_frame_stats *out); /* HP_EUSAGE: size unset */

/* After a tier lost copies (a remote daemon died), put every chunk back
 * into its redundancy, then check as hs_store_check does.  A chunk that
 * still has a copy (the other replica) or is resident in DRAM is re-homed:
 * written anew where placement puts it now (two live daemons, or the next
 * tier when too few are left).  A chunk whose every copy was lost is what
 * `lost` says of its tensor: HS_LOST_REFILL re-reads it from *src (filled
 * by the callback: the tensor's bytes at `offset` of file `path`, or at
 * `mem`), HS_LOST_DROP forgets it (its value is rewritten before it is
 * read again: the next run recomputes it), HS_LOST_FAIL (and a NULL
 * callback) stops: the error names the tensors.  `lost` runs under the
 * store's lock: it may not call the store.  Call it between runs, while no
 * other thread uses the store; cheap when nothing was lost. */
enum hs_lost { HS_LOST_FAIL = 0, HS_LOST_DROP = 1, HS_LOST_REFILL = 2 };
struct hs_source {
	const char *path;
	uint64_t offset;
	const void *mem;
};
struct hs_recover_opts {
	size_t size;            /* sizeof, set by hs_recover_opts_init */
	int (*lost)(void *arg, const struct hs_tensor *t, struct hs_source *src);
	void *arg;
};
struct hs_recover_stats {       /* since the store opened */
	uint64_t rehomed, rehomed_bytes;        /* copied anew from a surviving copy or DRAM */
	uint64_t refilled, dropped, lost;       /* chunks whose every copy was lost */
};
void hs_recover_opts_init(struct hs_recover_opts *o, size_t size);
int hs_store_recover(struct hs_store *st, const struct hs_recover_opts *o, struct hs_recover_stats *out);
/* Latency percentile (0 < q < 1) in microseconds from a histogram. */
double hs_lat_percentile(const struct hs_tier_stats *s, double q);

/* The stats page of another process of this user (opts.stats_page): a
 * consistent snapshot.  Pages live in a directory private to the user,
 * $HPDLF_STATS_DIR if set (an absolute path), else /dev/shm/hpdlf-<euid>;
 * each is named hpdlf-store.<pid>.  The reader never follows a link nor
 * waits on a FIFO.  -ENOENT: no page; -ESRCH: a stale page left by a dead
 * process (the snapshot is still filled in); HP_EFORMAT: not a page (a
 * link, a FIFO, a file of the wrong size or magic) or an unknown layout
 * version; -EPERM: the directory is not private (a link, another owner,
 * group or other access) or the page belongs to another user. */
/* Page layout version 2 adds a per-tensor section: the HS_PAGE_TENSORS
 * largest tensors (by bytes; ties: oldest first), so the page stays one
 * fixed size however many tensors a store holds.  Where each byte's current
 * copy is: tier_bytes[k] on tier k of stats.tier[] (0: DRAM), file_bytes
 * only in the tensor's read-only backing file, none_bytes nowhere yet
 * (never written). */
#define HS_PAGE_TENSORS 64
#define HS_PAGE_NAME 64
struct hs_page_tensor {
	char name[HS_PAGE_NAME]; /* NUL-terminated, cut to fit; "" anonymous */
	uint64_t id, bytes, chunks;
	uint64_t pinned;        /* bytes of its chunks pinned now */
	uint64_t last_use;      /* store tick of its latest pin (0: never) */
	uint64_t tier_bytes[HS_MAX_TIERS + 1];
	uint64_t file_bytes, none_bytes;
};
struct hs_statpage_info {
	pid_t pid;
	uint32_t version;
	uint64_t updated_ns;    /* CLOCK_REALTIME of the last update */
	struct hs_store_stats stats;
};
int hs_statpage_read(pid_t pid, struct hs_statpage_info *out);
/* The job `pid` runs in, as its page records it: the launcher's job id
 * ("" when none) from the owner's environment at start
 * (SLURM_JOB_ID.SLURM_STEP_ID, else PMIX_NAMESPACE, else Open MPI's job
 * id; its last 23 bytes if longer), its rank in it (-1: not launched as a
 * rank: OMPI_COMM_WORLD_RANK, PMIX_RANK, PMI_RANK, SLURM_PROCID) and the
 * job's size (0: unknown).  0 or an error of hs_statpage_read (a stale page
 * still answers: the job does not change). */
struct hs_statpage_job {
	char job[24];
	int32_t rank, nranks;
};
int hs_statpage_read_job(pid_t pid, struct hs_statpage_job *out);
/* The tensor section of a page: size = sizeof(struct hs_statpage_tensors)
 * set by the caller (the struct may grow at the end).  tick counts the
 * store's pins, last_use is a value of it; tensor[0..ntensors) in the
 * writer's order (largest first); ntensors 0 from a version-1 page. */
struct hs_statpage_tensors {
	size_t size;
	uint64_t tick;
	uint32_t ntensors;
	struct hs_page_tensor tensor[HS_PAGE_TENSORS];
};
/* hs_statpage_read, and into tens (unless NULL) the tensor section of the
 * same snapshot; errors as hs_statpage_read's, HP_EUSAGE for a size that
 * is not one this library knows. */
int hs_statpage_read_tensors(pid_t pid, struct hs_statpage_info *out, struct hs_statpage_tensors *tens);
/* Path of the page of `pid` ("<dir>/hpdlf-store.<pid>"); returns buf, or
 * NULL if it does not fit in len or $HPDLF_STATS_DIR is not absolute. */
char *hs_statpage_path(pid_t pid, char *buf, size_t len);
/* The page directory, written to buf (also when the check fails), checked
 * private as above: 0, -ENOENT (no page was ever published), -EPERM (not
 * private; the message says why), HP_EUSAGE (a relative $HPDLF_STATS_DIR or
 * a path longer than len).  dirfd non-NULL: receives an O_DIRECTORY
 * descriptor of it, for listing without a race (the caller closes it). */
int hs_statpage_dir(char *buf, size_t len, int *dirfd);
/* Remove the pages of processes that are gone (killed before closing their
 * store) and their unfinished temporaries from this user's page directory;
 * a store publishing a page does it once at start.  0 and *removed (may be
 * NULL), or an error of hs_statpage_dir other than -ENOENT. */
int hs_statpage_gc(int *removed);

#ifdef __cplusplus
}
#endif
#endif
