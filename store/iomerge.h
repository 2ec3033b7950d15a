/* Merging a batch's requests that continue each other (iomerge.c).
 *
 * A tensor of several chunks is written to extents placed one after the
 * other, and its frames lie in one run of the pool (frames.h): one request
 * per chunk costs the tier a request each (on this project's VM an
 * O_DIRECT request through io_uring is ~10 us of CPU in the block layer
 * and the completion's interrupt) where one request for the whole tensor
 * does the same.  hs_io_merge turns each stretch of requests of one batch
 * that are the same operation, lie back to back on the tier and back to
 * back in memory (buf, and mem_slot/mem_off when set, so the merged request
 * is right for fixed and plain I/O alike) into one request.  Its done()
 * completes every request it holds with its result, in address order; the
 * wrapper frees itself afterwards.  Each chunk's crc32c is still checked
 * on its own (by its own done()).
 *
 * Only for tiers whose extents the store places (place.h): a tier placing
 * itself (remote daemons) registers each extent apart, and a request may
 * not cross two. */
#ifndef HPDLF_STORE_IOMERGE_H
#define HPDLF_STORE_IOMERGE_H

#include "store/tier.h"

/* Largest merged request (bytes): what the block layer takes as one
 * request here (max_sectors_kb 4 MiB, docs/store-format.md), so a 3-D
 * U-Net's 1 MiB chunks merge too. */
#define HS_IO_MERGE_MAX (4u << 20)

/* Merge ios[0..n) in place: on return ios[0..ret) are the requests to
 * submit, merged ones being wrappers (malloc'ed; if that fails the
 * requests stay apart).  The order of ios[] may change.  vectored (the
 * tier has HS_TIER_F_VECTORED): requests back to back on the tier whose
 * memory the process reaches now (vbuf) merge wherever that memory lies,
 * the merged request's memory an iovec of their buffers (neighbours in
 * memory one piece), without fixed buffers: a batch's small tensors and
 * the chunks of a tensor whose frames are scattered in the pool each went
 * as a request of their own. */
int hs_io_merge(struct hs_io **ios, int n, int vectored);

#endif
