/* DRAM frame pool of the store (frames.c).
 *
 * One anonymous mapping as large as the budget, 2 MiB aligned and backed by
 * transparent huge pages where the kernel has them, holds the bytes of every
 * resident chunk.  It is populated in slabs, each offered to the tiers once
 * (io_uring registers it as a fixed buffer: the registration pins the PAGES,
 * whatever address they are mapped at later), and never shrinks while the
 * store is open: the DRAM the store holds for chunks never exceeds the
 * budget.  A buddy allocator hands out 4 KiB pages; a chunk takes exactly
 * its rounded length, as one piece when it can (a full chunk is one
 * naturally aligned block, so it lies in one slab).
 *
 * Page p of the pool has a home, pool + p * 4096.  A resident chunk's pages
 * are MOVED (mremap) from their home into its tensor's reserved range, so a
 * pin sees contiguous memory, and moved home when the chunk leaves DRAM.
 * Moving keeps the pages themselves: huge pages stay huge when both ends are
 * 2 MiB aligned (a 4 MiB chunk is then two page-table entries to move, and
 * one block request of 4 MiB to the device, where 4 KiB pages scattered by
 * a shared-memory pool split it into five or more), and fixed-buffer I/O
 * keeps reaching them through the registered region.  MREMAP_DONTUNMAP
 * leaves an empty range behind at either end, so no address is ever free
 * for another mmap to take; the empty ranges left in tensor ranges are
 * queued and reserved again in batches (keeping the number of mappings
 * low), or simply replaced when the chunk comes back first.  The one chunk
 * of a tensor, when it lies in one piece, is not moved at all: it is used
 * at home (store_internal.h, hs_chunk_addr). */
#ifndef HPDLF_STORE_FRAMES_H
#define HPDLF_STORE_FRAMES_H

#include <stddef.h>
#include <stdint.h>

#include "store/tier.h"

#define HS_PAGE 4096u
/* The pool's bookkeeping per page (free-list links and order: next, prev,
 * ord in frames.c), all of it touched once the pool has grown to the
 * budget: 18 MiB for an 8 GiB pool, resident beside the pages themselves
 * (exec/overhead.c takes it off the tensor budget). */
#define HS_FRAMES_META_PER_PAGE (2 * sizeof(uint32_t) + sizeof(uint8_t))

struct hs_piece {
	uint32_t page, n;       /* pages [page, page + n) of the pool */
};

/* Called once per slab, mapped at addr (its pages move away afterwards). */
typedef void (*hs_frames_grow_fn)(void *arg, unsigned slot, void *addr, size_t len);

struct hs_frames;

int hs_frames_create(uint64_t bytes, uint64_t chunk_size, hs_frames_grow_fn grow, void *arg,
		     struct hs_frames **out);
void hs_frames_destroy(struct hs_frames *f);

/* npages pages as pieces: *n == 1 fills *one, more allocate *many (the
 * caller frees it with hs_frames_free).  -ENOMEM if the pool cannot grow. */
int hs_frames_alloc(struct hs_frames *f, uint64_t npages, struct hs_piece *one, struct hs_piece **many,
		    uint32_t *n);
void hs_frames_free(struct hs_frames *f, struct hs_piece *one, struct hs_piece *many, uint32_t n);

/* Move the pieces' pages from home to va, contiguously (nothing moved on
 * error).  The range must not be queued (hs_frames_unqueue first). */
int hs_frames_map(struct hs_frames *f, unsigned char *va, const struct hs_piece *p, uint32_t n);

/* Move them home again and queue the emptied va range for re-reservation;
 * *ref (0 while not queued) tracks the entry so hs_frames_unqueue can take
 * it back (the range is mapped again, or its tensor unmapped).  Flushes
 * when the queue is full.  On error the pages that could not move stay at
 * va: the caller must not free those frames. */
int hs_frames_unmap(struct hs_frames *f, unsigned char *va, const struct hs_piece *p, uint32_t n, uint32_t *ref);
void hs_frames_unqueue(struct hs_frames *f, uint32_t *ref);
/* Move len bytes of frames mapped at `from` straight to `to` (one mremap,
 * whatever the pieces) and queue the emptied `from` like hs_frames_unmap.
 * `to` must not be queued. */
int hs_frames_move(struct hs_frames *f, unsigned char *from, unsigned char *to, uint64_t len, uint32_t *ref);
void hs_frames_flush(struct hs_frames *f);
/* Stretches (store.c, hs_chunks_map): move the n pages mapped at va home
 * to pages [page, page + n) with one mremap, nothing queued (the caller
 * queues each chunk's range with hs_frames_queue, as hs_frames_unmap
 * would); on error nothing moved. */
int hs_frames_home_span(struct hs_frames *f, unsigned char *va, uint64_t page, uint64_t n);
void hs_frames_queue(struct hs_frames *f, unsigned char *va, uint64_t len, uint32_t *ref);

/* The home address of a single piece (its pages while no tensor range
 * holds them). */
unsigned char *hs_frames_home(const struct hs_frames *f, const struct hs_piece *p);

/* Reserve len bytes of address space for a tensor (2 MiB aligned when it
 * spans that much, so huge pages move into it whole); free with munmap. */
void *hs_frames_reserve(uint64_t len);

/* Runs: a tensor of several chunks whose frames lie in one contiguous run
 * of the pool is used where it lies, as one chunk in one piece is, with
 * no mremap at all (store.c, run_take).  hs_frames_runs says whether the
 * pool keeps them: one slab (a run never straddles two registered
 * buffers), populated now, and small enough (<= 32 MiB) that a first-fit
 * search page by page, and the compaction by memcpy that makes room for
 * runs (compact.c), cost less than the mremaps they save (the 3-D U-Net
 * at a 21.8 MiB budget: 8,632 mremaps per step without runs, 500 with).  hs_frames_find_run finds the first n free
 * pages in a row without taking them; hs_frames_take takes exactly pages
 * [page, page + n) if they are all free (-ENOMEM, nothing taken, if not).
 * Pages taken are freed with hs_frames_free as one piece. */
int hs_frames_runs(struct hs_frames *f);
int hs_frames_find_run(const struct hs_frames *f, uint64_t n, uint64_t *page);
int hs_frames_take(struct hs_frames *f, uint64_t page, uint64_t n);
int hs_frames_is_free(const struct hs_frames *f, uint64_t page);
/* A stretch of free pages from a page aligned to `align` (a power of two)
 * for up to `want` of them: the shortest that holds all `want`, else the
 * longest (at least `align` pages).  Its pages from *page (untouched when
 * there is none) or 0. */
uint64_t hs_frames_stretch(const struct hs_frames *f, uint64_t want, uint64_t align, uint64_t *page);

/* Slab of a single-piece chunk: 1 + slot (0: several pieces) and offset. */
uint32_t hs_frames_slot(const struct hs_frames *f, const struct hs_piece *p, uint32_t n, uint64_t *off);
uint64_t hs_frames_grown(const struct hs_frames *f); /* bytes of the pool allocated */
uint64_t hs_frames_moves(const struct hs_frames *f); /* mremaps done since create */
uint64_t hs_frames_free_bytes(const struct hs_frames *f); /* allocated, not in use */
uint64_t hs_frames_avail_bytes(const struct hs_frames *f); /* free or not allocated yet */

#endif
