/* Internal structures of the tensor store (store.c, catalog.c, statpage.c). */
#ifndef HPDLF_STORE_INTERNAL_H
#define HPDLF_STORE_INTERNAL_H

#include <pthread.h>
#include <stdint.h>
#include <sys/types.h>

#include "hpdlf/store.h"
#include "store/frames.h"
#include "store/tier.h"

enum chunk_state { CH_ABSENT = 0, CH_LOADING, CH_RESIDENT, CH_WRITING };

#define NO_TIER (-1)

/* One chunk.  "Copy" is the current copy below DRAM (valid when the chunk is
 * clean); "committed" is the copy the persistent catalog points at (named
 * tensors), which is never overwritten or freed before the next commit. */
struct hs_chunk {
	uint8_t state;
	uint8_t dirty;
	uint8_t prefetched;     /* loaded by a prefetch, not pinned since */
	uint8_t mapped;         /* its frames appear in the tensor's range */
	uint8_t unverified;     /* read into unmapped frames of several pieces: crc32c checked at the next pin */
	uint8_t cached;         /* CH_ABSENT, discarded, frames kept for its next pin */
	uint8_t kept;           /* cached, its frames still holding its copy's bytes (left DRAM clean, keep_clean): a load takes them back, no read */
	uint8_t home;           /* mapped where its frames live in the pool (hs_chunk_addr) */
	uint8_t ahead;          /* read ahead (hs_readahead): loading, then kept, until a pin takes it or its frames go */
	uint32_t pins, wpins;
	int8_t tier;            /* current copy: tier index or NO_TIER */
	int8_t ctier;           /* committed copy: tier index or NO_TIER */
	uint32_t crc, ccrc;
	uint64_t addr, caddr;
	uint64_t last_use;
	/* frames holding the chunk while it is LOADING or RESIDENT */
	uint32_t npieces;
	uint32_t zq;            /* its range waits in the unmap queue (frames.h) */
	struct hs_piece one;    /* npieces == 1 */
	struct hs_piece *many;  /* npieces > 1 */
};

/* A backing file of read-only tensors and its read-only file tier (files.c). */
struct hs_file {
	struct hs_tier *tier;
	dev_t dev;
	ino_t ino;
	uint64_t size;
	int direct;             /* O_DIRECT: reads aligned (unaligned ranges through windows) */
	int refs;               /* tensors backed by it */
	struct hs_file *next;
};

struct hs_tensor {
	struct hs_store *st;
	uint64_t id;
	char *name;
	uint64_t bytes;
	enum hp_dtype dtype;
	struct hp_shape shape;
	uint64_t nchunks;
	unsigned char *base;    /* reserved address range, chunk i at i * chunk_size */
	size_t maplen;
	struct hs_chunk *ch;
	int64_t next_use;
	int committed;          /* appears in the committed catalog */
	/* backing file (read-only tensors) */
	char *bpath;
	struct hs_file *bfile;
	uint64_t boff;
	struct hs_tensor *prev, *next;
	uint64_t run;           /* 1 + first pool page of its run (store.c, run_take); 0: none */
	char label[HS_PAGE_NAME];       /* hs_tensor_set_label: the stats page's name */
};

struct hs_store {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	struct hs_store_opts o;
	struct hs_policy policy;
	uint64_t cs;
	uint64_t resident;      /* DRAM bytes held: resident chunks + staging */
	uint64_t pinned;        /* bytes of chunks with pins > 0 */
	uint64_t staging;
	uint64_t cached;        /* bytes of frames kept by discarded (or kept) chunks (not resident) */
	uint64_t bytes_kept[HS_MAX_TIERS];      /* loads from each tier served by kept frames (drop_chunk): not read */
	int ntiers;
	struct hs_tier *tiers[HS_MAX_TIERS];
	int home;               /* first persistent tier (catalog), or NO_TIER */
	struct hs_place *place; /* extents in use on each tier (place.h) */
	struct hs_tensor *list;
	struct hs_file *files, *files_closing;  /* backing files (files.c) */
	struct hs_frames *frames;       /* DRAM of resident chunks (frames.h) */
	uint8_t regmask[HS_MEM_SLOTS];  /* tiers that registered each frame slab */
	int reg_logged;
	uint64_t ntensors, next_id, tick;
	struct hs_store_stats stats;    /* counters; tier[0] = DRAM */
	/* persistence */
	int committing;
	uint64_t uuid[2];
	uint64_t generation;
	uint64_t cat_addr, cat_len;
	struct freed_ext *graveyard;    /* committed extents of dropped tensors */
	/* stats page */
	void *page;
	uint64_t page_last_ns;
	/* recover.c: tiers' loss epochs handled, and its counters */
	uint64_t rec_epoch[HS_MAX_TIERS];
	struct hs_recover_stats rec;
	struct hs_frame_stats fst;      /* hs_store_frame_stats (mremaps: the pool's own count) */
	uint64_t ra_loading;            /* bytes of read-ahead chunks being read (in resident) */
	struct hs_tier *ra_tier;        /* the file tier the last read-ahead went to (polled by make_room) */
	struct hs_readahead_stats ra;   /* hs_store_readahead_stats */
};

struct freed_ext {
	int tier;
	uint64_t addr, len;
	struct freed_ext *next;
};

/* store.c */
uint64_t hs_chunk_len(const struct hs_tensor *t, uint64_t i);
uint64_t hs_chunk_iolen(const struct hs_tensor *t, uint64_t i);
int hs_tensor_new(struct hs_store *st, const struct hs_tensor_info *info, struct hs_tensor **out);
void hs_chunk_release_copy(struct hs_store *st, struct hs_tensor *t, struct hs_chunk *c);
uint64_t hs_now_ns(void);
void hs_stat_io(struct hs_store *st, int tier, const struct hs_io *io);
/* Frames of chunk i (lock held).  attach allocates them; it maps them into
 * the tensor's range too (zeroed with HS_ATTACH_ZERO) unless the chunk is
 * read from a tier that registered them and the caller does not need the
 * memory now (a prefetch): such a chunk is mapped by hs_chunk_map at its
 * first pin.  A discarded chunk keeps its frames (cached): attach takes
 * them back, and takes other discarded chunks' frames, oldest first, when
 * the pool has too few free.  detach frees them and queues the range for
 * unmapping; io_mem points a request at the registered region. */
enum { HS_ATTACH_MAP = 1, HS_ATTACH_ZERO = 2, HS_ATTACH_DEFER = 4 };
int hs_chunk_attach(struct hs_store *st, struct hs_tensor *t, uint64_t i, int flags);
int hs_chunk_map(struct hs_store *st, struct hs_tensor *t, uint64_t i);
void hs_chunk_detach(struct hs_store *st, struct hs_tensor *t, uint64_t i);
/* A read-ahead chunk's frames go before a pin took them (lock held). */
void hs_ahead_lost(struct hs_store *st, struct hs_chunk *c, uint64_t len);
/* Stretches: chunks of a tensor with no run lie back to back in the pool
 * where they can (attach), so mapping them is one mremap per stretch.
 * HS_ATTACH_DEFER allocates only (no map, no zeroing); hs_chunks_map then
 * maps every unmapped chunk of [first, first + n) holding frames, a
 * stretch at a time.  hs_chunk_detach_stretch detaches chunk i, and when
 * it is a discarded chunk mapped into the range, the discarded mapped
 * chunks back to back with it too, moving them home with one mremap. */
int hs_chunks_map(struct hs_store *st, struct hs_tensor *t, uint64_t first, uint64_t n);
void hs_chunk_detach_stretch(struct hs_store *st, struct hs_tensor *t, uint64_t i);
void hs_chunk_io_mem(struct hs_store *st, const struct hs_chunk *c, struct hs_io *io);
/* compact.c: make n free pages in a row in a pool that keeps runs by
 * moving chunks used where they lie (memcpy) out of the window that needs
 * the fewest moves (lock held).  0, or -1 if no window can be emptied. */
int hs_frames_compact_for(struct hs_store *st, uint64_t n);
/* The same for exactly pages [page, page + n) (a chunk's place in its run). */
int hs_frames_clear(struct hs_store *st, uint64_t page, uint64_t n);
/* Copy the chunks of t, all used where they lie but apart (moved by a
 * compaction), into a run of their own again, or failing that into its
 * range (lock held; nobody else may hold their addresses).  0 when they
 * are contiguous, 1 if it does not apply (runs off, a chunk not in the
 * pool in one piece: nothing done), or an error (mremap). */
int hs_run_relocate(struct hs_store *st, struct hs_tensor *t);
/* Make the mapped chunks [first, first + n) one contiguous view for a pin
 * (lock held): when some lie in the tensor's run and others in its range,
 * those in the run move into the range (mremap), unless another pin holds
 * them (-EBUSY: the executor pins whole tensors, so it never sees that). */
int hs_chunks_unify(struct hs_store *st, struct hs_tensor *t, uint64_t first, uint64_t n);
/* Where a mapped chunk's bytes are: its place in the tensor's range, or,
 * for the one chunk of a tensor held in one piece, the piece's home in the
 * pool.  Such a chunk is never moved: a pin, an eviction and a new frame
 * cost no mremap, no TLB shootdown and no mapping to re-reserve, which is
 * most of what small tensors paid per step (lenet under a tight budget
 * moved ~300 chunks of <= 16 KiB a step, each mremap 10-250 us). */
unsigned char *hs_chunk_addr(const struct hs_store *st, const struct hs_tensor *t, uint64_t i);

/* pager.c: write chunks marked CH_WRITING to `target` (HS_TIER_ANY: first
 * tier with room); lock held, released during the I/O. */
struct wb_item {
	struct hs_tensor *t;
	uint64_t chunk;
};
int hs_write_back(struct hs_store *st, struct wb_item *items, int n, int target);
/* DRAM for a bounce buffer or a catalog blob, under the budget like chunks
 * (evicting to make room; HP_EBUDGET if it cannot).  Lock held. */
int hs_staging_reserve(struct hs_store *st, uint64_t bytes, const char *what);
void hs_staging_release(struct hs_store *st, uint64_t bytes);

/* tier_open.c: open the tier of spec sp (not sp->tier) named `name`. */
int hs_tier_open_as(const struct hs_tier_spec *sp, const char *name, unsigned queue_depth, struct hs_tier **out);
const char *hs_tier_kind_name(enum hs_tier_kind kind);

/* files.c: get/put with the lock held; reap closes the files put for the
 * last time, without it. */
int hs_file_get(struct hs_store *st, const char *path, struct hs_file **out);
void hs_file_put(struct hs_store *st, struct hs_file *f);
void hs_files_reap(struct hs_store *st);

/* catalog.c */
#define HS_SB_SIZE 4096u
#define HS_RESERVED (2 * HS_SB_SIZE)
int hs_catalog_open(struct hs_store *st);
int hs_catalog_commit(struct hs_store *st);

/* statpage.c.  create publishes the page in the private per-user directory
 * if it safely can; if not it logs one warning and the store runs without
 * a page (a job never fails for its statistics): it always returns 0. */
int hs_statpage_create(struct hs_store *st);
void hs_statpage_publish(struct hs_store *st, int force);
void hs_statpage_destroy(struct hs_store *st);
/* Source of the pages' temporary names (getrandom); tests replace it to
 * plant a link under the name the writer will try. */
extern uint64_t (*hs_statpage_rand)(void);
/* statpage_tensors.c: the per-tensor section (lock held); its count. */
uint32_t hs_statpage_fill_tensors(struct hs_store *st, struct hs_page_tensor *out, uint64_t *tick);
void hs_store_fill_stats(struct hs_store *st, struct hs_store_stats *out);

#endif
