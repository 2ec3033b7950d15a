/* Fault injection for tests: fail the nth call at a chosen site. */
#include <errno.h>
#include <stdatomic.h>

#include "store/tier.h"

static _Atomic long fault_nth[HS_FAULT_NSITES];
static _Atomic int fault_err[HS_FAULT_NSITES];
static _Atomic long fault_calls[HS_FAULT_NSITES];

void hs_fault_set(enum hs_fault_site site, long nth, int err)
{
	atomic_store(&fault_calls[site], 0);
	atomic_store(&fault_err[site], err);
	atomic_store(&fault_nth[site], nth);
}

void hs_fault_clear(void)
{
	for (int i = 0; i < HS_FAULT_NSITES; i++)
		atomic_store(&fault_nth[i], 0);
}

int hs_fault_check(enum hs_fault_site site)
{
	long nth = atomic_load_explicit(&fault_nth[site], memory_order_relaxed);

	if (nth <= 0)
		return 0;
	if (atomic_fetch_add(&fault_calls[site], 1) + 1 != nth)
		return 0;
	return atomic_load(&fault_err[site]);
}

static int fault_one(enum hs_io_op op)
{
	int rc;

	if (op == HS_IO_WRITE)
		return hs_fault_check(HS_FAULT_WRITE);
	rc = hs_fault_check(HS_FAULT_READ);
	if (rc)
		return rc;
	return hs_fault_check(HS_FAULT_SHORT_READ) ? -ENODATA : 0;
}

int hs_fault_io(const struct hs_io *io)
{
	int rc = 0;

	/* every request counts, as it would apart: the nth still fails */
	for (uint32_t k = 0; k < (io->nreq > 1 ? io->nreq : 1u); k++) {
		int e = fault_one(io->op);
		rc = rc ? rc : e;
	}
	return rc;
}
