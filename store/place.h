/* Placement: which bytes of each lower tier are in use (store internal).
 *
 * The store owns placement (store/tier.h): one extent map per tier, all
 * behind one lock, so a tier never needs a lock or an allocator of its own
 * to be placed into.  Tiers whose space is owned elsewhere (the remote
 * tier: its daemons place extents and register each one on its own) have
 * ops->place / ops->release instead, and these calls go to them.
 *
 * The lock is a leaf: it may be taken under the store's lock, and nothing
 * is called while it is held (a tier's place/release is called without it). */
#ifndef HPDLF_STORE_PLACE_H
#define HPDLF_STORE_PLACE_H

#include <stdint.h>

#include "hpdlf/store.h"

struct hs_tier;
struct hs_place;

/* Maps of tiers[0..n): [reserved, capacity) of each, all free.  The tiers
 * stay the caller's. */
int hs_place_create(struct hs_tier *const *tiers, int n, struct hs_place **out);
void hs_place_destroy(struct hs_place *p);
/* An extent of len bytes (multiple of HS_IO_ALIGN) on tier k: 0 and *addr,
 * or -ENOSPC.  Extents in use never overlap. */
int hs_place_alloc(struct hs_place *p, int k, uint64_t len, uint64_t *addr);
/* Give an extent back; one that is not in use is HP_EINTERNAL. */
int hs_place_free(struct hs_place *p, int k, uint64_t addr, uint64_t len);
/* Mark a known extent in use again (reopen of persistent data):
 * HP_ECORRUPT if it overlaps one in use, -ENOTSUP on a tier that places
 * itself. */
int hs_place_claim(struct hs_place *p, int k, uint64_t addr, uint64_t len);
/* Fill st->used and st->chunks of tier k (a tier that places itself fills
 * them in its ops->stats: left alone). */
void hs_place_usage(struct hs_place *p, int k, struct hs_tier_stats *st);
/* The most bytes ever placed at once on tier k, or (k < 0) on all tiers
 * together, since the map was created (extents claimed at reopen count). */
uint64_t hs_place_peak(struct hs_place *p, int k);

#endif
