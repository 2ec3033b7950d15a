/* What a stopping daemon leaves on disk (issue 20 item 8): a --pmem region
 * that holds named tensors is kept, and the log says how many and how
 * large; one that holds nothing named held only clients' spills, which end
 * with their leases, so it is removed when this daemon created it (with its
 * catalog) and truncated to zero bytes otherwise, instead of keeping its
 * full size on the node's disk.  Named tensors in DRAM end with the daemon;
 * the log says that too. */
#include <inttypes.h>
#include <search.h>
#include <stdio.h>
#include <unistd.h>

#include "hpdlf/error.h"
#include "hpdlf/tensor.h"
#include "store/remote/daemon_int.h"

/* Bytes of the named extents of region r (only they remain once the
 * clients are gone, but count them and nothing else). */
struct named_sum {
	const struct dregion *r;
	uint64_t bytes;
};
static struct named_sum *sum_arg;

static void add_named(const void *node, VISIT v, int depth)
{
	const struct dalloc *a = *(const struct dalloc *const *)node;

	(void)depth;
	if ((v == postorder || v == leaf) && a->addr >= sum_arg->r->start &&
	    a->addr - sum_arg->r->start < sum_arg->r->size)
		sum_arg->bytes += a->len;
}

static uint64_t named_bytes(const struct hs_daemon *d, const struct dregion *r)
{
	struct named_sum s = { r, 0 };

	sum_arg = &s; /* twalk has no argument; only the closing thread walks */
	twalk(d->by_name, add_named);
	sum_arg = NULL;
	return s.bytes;
}

/* Called by hs_daemon_close once the clients are dropped and the catalog
 * saved, before the regions are unmapped: says what stays and marks what
 * goes (hs_daemon_tidy_files does it after the unmap). */
void hs_daemon_tidy_report(struct hs_daemon *d)
{
	for (int i = 0; i < d->nreg; i++) {
		struct dregion *r = &d->reg[i];
		char sz[32];

		if (!r->named) {
			r->tidy = d->tidy_ok && r->fd >= 0;
			continue;
		}
		hp_format_size(named_bytes(d, r), sz, sizeof sz);
		if (r->fd >= 0)
			hp_log(HP_LOG_INFO, "pmem %s keeps %" PRIu64 " named tensor%s (%s); a daemon started with the "
			       "same --pmem finds them again", d->cfg.pmem_path, r->named, r->named == 1 ? "" : "s", sz);
		else
			hp_log(HP_LOG_WARN, "%" PRIu64 " named tensor%s in DRAM (%s) end with this daemon (put them on "
			       "--pmem to keep them)", r->named, r->named == 1 ? "" : "s", sz);
	}
}

void hs_daemon_tidy_files(struct hs_daemon *d)
{
	for (int i = 0; i < d->nreg; i++) {
		struct dregion *r = &d->reg[i];

		if (!r->tidy || !d->cfg.pmem_path)
			continue;
		if (r->created && unlink(d->cfg.pmem_path) == 0) {
			if (d->catalog[0])
				unlink(d->catalog);
			hp_log(HP_LOG_INFO, "pmem %s held no named tensor: removed (this daemon created it)",
			       d->cfg.pmem_path);
		} else if (!r->created && truncate(d->cfg.pmem_path, 0) == 0) {
			hp_log(HP_LOG_INFO, "pmem %s held no named tensor: truncated to 0 bytes", d->cfg.pmem_path);
		}
	}
}
