/* Implementer interface of a storage tier below DRAM (users never see it).
 *
 * A tier is a flat byte-addressed space (a file, a PMEM pool, a device, the
 * DRAM of a remote daemon) that moves bytes between its addresses and DRAM
 * buffers asynchronously.  The store owns placement (one extent map per
 * tier, store/place.h), chunk metadata, checksums, statistics and
 * persistence; a tier only stores bytes: its ops are submit, poll, flush,
 * register_mem, stats and close, and it needs no allocator or lock for
 * placement.  Backing files of read-only tensors (weights, datasets) are
 * read through a tier too: a read-only file tier per file (tier_uring.h,
 * store/files.c), outside the demotion order.
 *
 * Plugging a tier in (tier_dram.c is the smallest model):
 *
 *   struct my_tier { struct hs_tier base; ...; };       // base FIRST
 *   static const struct hs_tier_ops my_ops = {
 *           .kind = "mine", .close = my_close, .submit = my_submit,
 *           .stats = my_stats,
 *           // .flush, .poll, .register_mem, .trim are optional: leave NULL
 *           // (the store then treats them as -ENOTSUP) or return -ENOTSUP.
 *   };
 *   int hs_tier_my_open(const struct hs_tier_config *cfg, struct hs_tier **out)
 *   {
 *           struct my_tier *m = calloc(1, sizeof *m);
 *           hs_tier_init(&m->base, &my_ops, kind, cfg); // name, capacity, reserved
 *           ...; *out = &m->base; return 0;
 *   }
 *
 * and the store opens it from a `struct hs_tier_spec` in hs_store_opts
 * (include/hpdlf/store.h), or an implementer hands an opened one over as
 * `.tier`; the store takes ownership and calls ops->close at
 * hs_store_close.  Nothing in the store or the planner changes.
 *
 * The one exception to "the store places": a tier whose space is owned
 * elsewhere.  The remote tier's daemons own their DRAM, place each extent
 * and register it on its own (a per-extent RMA key, so an address outside
 * every extent reaches nothing); the tier must learn of every extent to
 * hold its keys, and cannot be given addresses it did not get from the
 * daemons.  Such a tier sets .place and .release, and the store asks them
 * instead of keeping a map (claim of persistent extents does not apply:
 * such tiers are not persistent).  No other tier sets them.
 *
 * Asynchronous completions:
 *   - submit() takes a batch of requests.  It returns the number it accepted
 *     (all of them, or a negative error when it accepted none).  Every accepted
 *     request completes EXACTLY ONCE by the tier setting io->res (0, or a
 *     negative errno / HP_E* code) and then calling io->done(io).  Once it
 *     called any done() of the batch, submit() has accepted the whole batch:
 *     a failure after that (io_uring_enter refusing SQEs already queued)
 *     completes the requests it hits with the error, it never returns one
 *     (the caller would complete them all again).
 *   - done() may run on any thread: inside submit() itself (synchronous tiers
 *     such as dram and pmem complete inline), or on a completion thread the tier
 *     owns (nvme: a thread waiting on the io_uring CQ; remote: a thread in
 *     fi_cq_sread, which also gives libfabric the progress it needs).  The
 *     store therefore never calls submit() while holding its own lock, and
 *     done() never calls back into the same tier's submit().
 *   - done() is short and never blocks on I/O; after done() returns the tier
 *     must not touch io again (the store may reuse or free it).
 *   - A short transfer is not success: report -ENODATA for a short read and
 *     -ENOSPC / -EIO for a short write.  (The read-only file tier's space
 *     ends at the end of its file: a read cut there got every byte.)
 *   - After close() returns, no done() is running or will run; close() waits
 *     for requests in flight (or completes them with -ECANCELED).
 *
 * Durability: a completed write is visible to later reads of the same tier.
 * It is durable (survives a crash of this process and, for real media, power
 * loss) only after flush() returns 0.  Tiers without persistence leave flush
 * NULL and do not set HS_TIER_F_PERSISTENT.
 *
 * Addresses and alignment: the store places extents in [reserved, capacity)
 * (the head below `reserved` holds the store's superblocks, reached with
 * plain submit()); a tier refuses requests past capacity with -EINVAL.
 * Lengths and addresses handed to submit() are multiples of HS_IO_ALIGN,
 * and buffers are HS_IO_ALIGN-aligned, so O_DIRECT tiers need no bounce
 * buffer (the store reads a backing file at unaligned offsets only when
 * the file tier reads it buffered).
 *
 * Thread safety: submit, poll, flush, trim, stats (and place, release) may
 * be called concurrently from several threads; the tier serialises
 * internally what it must.
 */
#ifndef HPDLF_STORE_TIER_H
#define HPDLF_STORE_TIER_H

#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#include "hpdlf/store.h"

#define HS_IO_ALIGN 4096u
#define HS_MEM_SLOTS 1024u      /* regions the store offers through register_mem */

enum hs_io_op { HS_IO_READ = 0, HS_IO_WRITE = 1 };

/* One asynchronous transfer between a DRAM buffer and a tier extent. */
struct hs_io {
	enum hs_io_op op;
	uint64_t addr;          /* tier address (of an extent the store placed, plus an offset) */
	void *buf;              /* DRAM, HS_IO_ALIGN-aligned */
	size_t len;             /* multiple of HS_IO_ALIGN */
	int res;                /* set by the tier before done() */
	void (*done)(struct hs_io *io);
	void *arg;              /* the submitter's */
	uint64_t t_submit_ns;   /* the store's (latency histogram) */
	void *tier_priv;        /* the tier's, while the request is in flight */
	/* Set by the store when buf lies in one region it offered through
	 * register_mem: mem_slot = slot + 1 (0: none), at byte mem_off of it. */
	uint32_t mem_slot;
	uint64_t mem_off;
	/* Requests of the store this one stands for (merged: store/iomerge.h);
	 * 0 or 1: itself.  Fault injection counts each (hs_fault_io). */
	uint32_t nreq;
	/* niov > 0: the DRAM side is iov[0..niov) in order (each piece
	 * HS_IO_ALIGN-aligned, len bytes in all), not buf or mem_slot: a
	 * merged request over chunks back to back on the tier but apart in
	 * memory (store/iomerge.h).  Only to tiers with HS_TIER_F_VECTORED. */
	const struct iovec *iov;
	uint32_t niov;
	/* Where this process reaches the DRAM side now, set by the store when
	 * it knows (NULL: not known; the buf of a fixed read may not be mapped
	 * yet, its frames then lie at home): what an iovec may point at. */
	void *vbuf;
};

enum hs_tier_flags {
	HS_TIER_F_PERSISTENT = 1u << 0,  /* flush() makes writes survive a crash */
	HS_TIER_F_CREATE = 1u << 1,      /* config: create the file if missing */
	HS_TIER_F_UNLINK = 1u << 2,      /* config: anonymous (unlinked) spill file */
	HS_TIER_F_BUFFERED_OK = 1u << 3, /* config: may fall back to buffered I/O
	                                    (with a logged warning) if O_DIRECT is refused */
	HS_TIER_F_READONLY = 1u << 4,    /* an existing file read as it is (tier_uring.h) */
	HS_TIER_F_VECTORED = 1u << 5,    /* set by the tier: submit serves requests with iov */
};

/* What a tier constructor gets. Unused fields are ignored by a tier. */
struct hs_tier_config {
	const char *name;       /* for messages and statistics: "nvme0", "pmem0" */
	const char *path;       /* file, device, pool; or "host:port,..." for remote */
	uint64_t capacity;      /* bytes (0: the existing file's size) */
	uint64_t reserved;      /* head bytes the store never places extents in */
	unsigned queue_depth;   /* nvme: SQ/CQ depth (default 32) */
	unsigned flags;         /* enum hs_tier_flags */
	void *ext;              /* tier-specific extra configuration */
};

struct hs_tier;

struct hs_tier_ops {
	const char *kind;       /* "dram", "pmem", "nvme", "remote" */
	void (*close)(struct hs_tier *t);
	int (*submit)(struct hs_tier *t, struct hs_io **ios, int n);
	/* Optional: make completed writes durable. */
	int (*flush)(struct hs_tier *t);
	/* Fill capacity (usable bytes: capacity - reserved); the store fills
	 * used, chunks and the counters. */
	int (*stats)(struct hs_tier *t, struct hs_tier_stats *st);
	/* Optional: the store's DRAM frames, one region (slot < HS_MEM_SLOTS) at
	 * a time, before any request points into it.  The region is mapped at
	 * addr only during the call; afterwards its pages are reached through
	 * io->buf, so only a tier that keeps the PAGES (io_uring fixed buffers)
	 * may implement this.  0: registered; otherwise requests into the region
	 * still come, with mem_slot set, and must be served through io->buf. */
	int (*register_mem)(struct hs_tier *t, unsigned slot, void *addr, size_t len);
	/* Optional: reap completed requests (calling their done()) on the
	 * calling thread; with `wait`, block until at least one completed if
	 * any is in flight.  Returns the number reaped.  Lets a thread that
	 * waits anyway skip the completion thread's wake-up. */
	int (*poll)(struct hs_tier *t, int wait);
	/* Optional: the store freed [addr, +len); its bytes no longer matter
	 * (dram gives the pages back: its arena is a capacity, not a
	 * reservation).  A hint: no result. */
	void (*trim)(struct hs_tier *t, uint64_t addr, uint64_t len);
	/* Only for tiers whose space is owned elsewhere (see the top: remote).
	 * place: an extent of `len` bytes (multiple of HS_IO_ALIGN), 0 and
	 * *addr, or -ENOSPC.  release: give it back (one not placed is
	 * HP_EINTERNAL).  Set both or neither. */
	int (*place)(struct hs_tier *t, uint64_t len, uint64_t *addr);
	int (*release)(struct hs_tier *t, uint64_t addr, uint64_t len);
	/* Optional: 0 while every extent placed is still readable; else an
	 * error (hp_error's message names what was lost and where) so that a
	 * run stops at once instead of at its next read of the lost bytes
	 * (remote: a daemon died holding the only copy of some extents). */
	int (*health)(struct hs_tier *t);
	/* Optional, for tiers that keep copies on machines that may die
	 * (remote): how many copies of the extent at addr are still readable
	 * (0: all lost; -ENOENT: no such extent) and in *wanted how many it was
	 * given; epoch() changes whenever copies were lost, so that the store
	 * walks its chunks (hs_store_recover) only after a loss.  Set both or
	 * neither. */
	int (*copies)(struct hs_tier *t, uint64_t addr, int *wanted);
	uint64_t (*epoch)(struct hs_tier *t);
};

/* The common head of every tier object. */
struct hs_tier {
	const struct hs_tier_ops *ops;
	char name[32];
	char path[512];
	uint64_t capacity;      /* usable bytes including the reserved head */
	uint64_t reserved;
	unsigned flags;         /* HS_TIER_F_PERSISTENT if the tier is */
	enum hs_tier_kind kind;
};

void hs_tier_init(struct hs_tier *t, const struct hs_tier_ops *ops, enum hs_tier_kind kind,
		  const struct hs_tier_config *cfg);

/* Helpers for the store and tests: submit one request and wait for it. */
int hs_tier_rw(struct hs_tier *t, enum hs_io_op op, uint64_t addr, void *buf, size_t len);
/* The same for a prepared request (op, addr, buf, len, mem_slot/mem_off). */
int hs_tier_rw_io(struct hs_tier *t, struct hs_io *io);
/* ops->flush if present, else 0 (non-persistent tiers). */
int hs_tier_flush(struct hs_tier *t);

/* Each tier's constructor and its own hooks are in its own header:
 * tier_dram.h, tier_pmem.h, tier_uring.h, remote/remote.h. */

/* Extent allocator of the store's placement (place.c) and of the remote
 * daemons: first fit over a sorted free list, coalescing on free; refuses
 * double frees and overlapping claims.  Not thread-safe: callers lock. */
struct hs_extents;
int hs_extents_create(uint64_t start, uint64_t end, struct hs_extents **out);
void hs_extents_destroy(struct hs_extents *x);
int hs_extents_alloc(struct hs_extents *x, uint64_t len, uint64_t *addr);
int hs_extents_free(struct hs_extents *x, uint64_t addr, uint64_t len);
int hs_extents_claim(struct hs_extents *x, uint64_t addr, uint64_t len);
uint64_t hs_extents_used(const struct hs_extents *x);
uint64_t hs_extents_count(const struct hs_extents *x); /* extents in use */

/* Fault injection (tests): the nth (1-based) call at `site` fails with err. */
enum hs_fault_site {
	HS_FAULT_ALLOC = 0,     /* DRAM allocation of chunk memory / staging: ENOMEM */
	HS_FAULT_READ,          /* tier read completes with err (EIO) */
	HS_FAULT_SHORT_READ,    /* tier read transfers half: -ENODATA */
	HS_FAULT_WRITE,         /* tier write completes with err (EIO, ENOSPC) */
	HS_FAULT_TIER_ALLOC,    /* placement of a tier extent (hs_place_alloc): ENOSPC */
	HS_FAULT_SUBMIT,        /* nvme: io_uring_submit fails with SQEs queued (-EIO) */
	HS_FAULT_BOUNCE,        /* the bounce buffer of a run's relocation (compact.c): none */
	HS_FAULT_NSITES
};
void hs_fault_set(enum hs_fault_site site, long nth, int err);
void hs_fault_clear(void);
/* 0, or the error to inject at this call of `site`. */
int hs_fault_check(enum hs_fault_site site);
/* For tiers: the result to inject into this request (READ, SHORT_READ or
 * WRITE site by io->op), or 0 to do it for real.  A merged request counts
 * as the io->nreq requests it stands for, and fails if any of them would. */
int hs_fault_io(const struct hs_io *io);

#endif
