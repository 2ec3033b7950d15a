/* DRAM frame pool of the store (frames.c).
 *
 * One memfd as large as the budget holds the bytes of every resident chunk.
 * It grows in slabs, each offered to the tiers once (io_uring registers it
 * as a fixed buffer), and never shrinks while the store is open: the DRAM
 * the store holds for chunks never exceeds the budget, and reloading a
 * chunk never page-faults.  A buddy allocator hands out 4 KiB pages; a
 * chunk takes exactly its rounded length, as one piece when it can (a full
 * chunk is one naturally aligned block, so it lies in one slab).
 *
 * A resident chunk's pieces are mapped (MAP_SHARED | MAP_FIXED) into its
 * tensor's reserved range, so a pin sees contiguous memory.  Unmapping needs
 * a TLB shootdown (an IPI to every CPU running the process; tens of
 * microseconds in a VM), so ranges of evicted chunks are queued and zapped
 * together, one process_madvise(MADV_DONTNEED) and one flush per batch,
 * then re-reserved.  Until then a queued range may alias a frame another
 * chunk reuses: touching an unpinned chunk is undefined anyway. */
#ifndef HPDLF_STORE_FRAMES_H
#define HPDLF_STORE_FRAMES_H

#include <stddef.h>
#include <stdint.h>

#include "store/tier.h"

#define HS_PAGE 4096u

struct hs_piece {
	uint32_t page, n;       /* pages [page, page + n) of the pool */
};

/* Called once per slab while it is mapped at addr (unmapped afterwards). */
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

/* Map the pieces contiguously at va (populated: no fault on first touch). */
int hs_frames_map(struct hs_frames *f, unsigned char *va, const struct hs_piece *p, uint32_t n);

/* Queue va..va+len for unmapping; *ref (0 while not queued) tracks the
 * entry so hs_frames_unqueue can take it back (the range is mapped again,
 * or its tensor unmapped).  Flushes when the queue is full. */
void hs_frames_queue_unmap(struct hs_frames *f, unsigned char *va, uint64_t len, uint32_t *ref);
void hs_frames_unqueue(struct hs_frames *f, uint32_t *ref);
void hs_frames_flush(struct hs_frames *f);

/* Slab of a single-piece chunk: 1 + slot (0: several pieces) and offset. */
uint32_t hs_frames_slot(const struct hs_frames *f, const struct hs_piece *p, uint32_t n, uint64_t *off);
uint64_t hs_frames_grown(const struct hs_frames *f); /* bytes of the pool allocated */
uint64_t hs_frames_free_bytes(const struct hs_frames *f); /* allocated, not in use */

#endif
