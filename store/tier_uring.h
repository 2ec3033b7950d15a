/* NVMe tier: a file or device through io_uring and O_DIRECT
 * (tier_uring_none.c without liburing). */
#ifndef HPDLF_STORE_TIER_URING_H
#define HPDLF_STORE_TIER_URING_H

#include <stdint.h>

#include "store/tier.h"

int hs_tier_nvme_open(const struct hs_tier_config *cfg, struct hs_tier **out);
/* A read-only file tier over an existing file (weights, datasets): reads
 * through the same submit path as every tier, O_DIRECT when the
 * filesystem takes it (else buffered, dropped from the page cache).  Its
 * space is [0, size rounded up to HS_IO_ALIGN); a read reaching past the
 * end of the file completes when it got every byte up to the end; writes
 * fail with -EROFS.  Without O_DIRECT it takes any address and length. */
int hs_tier_file_open(const char *path, struct hs_tier **out);
uint64_t hs_tier_file_size(struct hs_tier *t);
/* 1: reads bypass the page cache (addresses, lengths and buffers aligned). */
int hs_tier_file_direct(struct hs_tier *t);
/* Plug (on 1) or unplug (on 0) this thread's submissions, nested: while
 * plugged, requests the thread submits to one nvme or file tier wait in
 * its ring (a few at most) and go in one io_uring_enter at the outermost
 * unplug, or sooner: when the ring fills, when this thread polls that
 * tier, or with another thread's submission to it.  The plugged thread
 * must not wait for those requests except by polling that tier (a store
 * condition wait would wait forever): plug only around submitting calls. */
void hs_tier_uring_plug(int on);
/* Requests an nvme tier served from registered buffers (0 for other tiers). */
uint64_t hs_tier_nvme_fixed_ios(struct hs_tier *t);
/* Requests an nvme tier queued to the device, a merged one once (0 for
 * other tiers). */
uint64_t hs_tier_nvme_requests(struct hs_tier *t);
/* SQEs the kernel has taken from an nvme tier's ring (its SQ head, modulo
 * 2^32; 0 for other tiers): requests and the NOPs that pad a pair of them
 * to the block layer's plug (tier_uring.c pad_to_plug). */
uint32_t hs_tier_nvme_sq_head(struct hs_tier *t);

#endif
