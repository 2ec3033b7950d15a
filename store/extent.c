/* Extent allocator: sorted array of free extents, first fit, coalescing. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "hpdlf/error.h"
#include "store/tier.h"

struct ext {
	uint64_t off, len;
};

struct hs_extents {
	struct ext *free;
	size_t n, cap;
	uint64_t start, end, used, count;
};

int hs_extents_create(uint64_t start, uint64_t end, struct hs_extents **out)
{
	struct hs_extents *x = calloc(1, sizeof *x);

	if (!x)
		return -ENOMEM;
	x->cap = 16;
	x->free = malloc(x->cap * sizeof *x->free);
	if (!x->free) {
		free(x);
		return -ENOMEM;
	}
	x->start = start;
	x->end = end;
	if (end > start)
		x->free[x->n++] = (struct ext){ start, end - start };
	*out = x;
	return 0;
}

void hs_extents_destroy(struct hs_extents *x)
{
	if (!x)
		return;
	free(x->free);
	free(x);
}

static int grow(struct hs_extents *x)
{
	if (x->n < x->cap)
		return 0;
	struct ext *p = realloc(x->free, 2 * x->cap * sizeof *p);
	if (!p)
		return -ENOMEM;
	x->free = p;
	x->cap *= 2;
	return 0;
}

int hs_extents_alloc(struct hs_extents *x, uint64_t len, uint64_t *addr)
{
	if (len == 0)
		return hp_error(HP_EUSAGE, "extent allocator: zero-length allocation");
	for (size_t i = 0; i < x->n; i++) {
		if (x->free[i].len < len)
			continue;
		*addr = x->free[i].off;
		x->free[i].off += len;
		x->free[i].len -= len;
		if (x->free[i].len == 0) {
			memmove(&x->free[i], &x->free[i + 1], (x->n - i - 1) * sizeof *x->free);
			x->n--;
		}
		x->used += len;
		x->count++;
		return 0;
	}
	return -ENOSPC;
}

/* Index of the first free extent starting at or after addr. */
static size_t lower_bound(const struct hs_extents *x, uint64_t addr)
{
	size_t lo = 0, hi = x->n;

	while (lo < hi) {
		size_t mid = (lo + hi) / 2;
		if (x->free[mid].off < addr)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

int hs_extents_free(struct hs_extents *x, uint64_t addr, uint64_t len)
{
	size_t i = lower_bound(x, addr);
	int rc;

	if (len == 0 || addr < x->start || addr + len > x->end || addr + len < addr)
		return hp_error(HP_EINTERNAL, "extent allocator: free of [%llu, +%llu) outside the space",
				(unsigned long long)addr, (unsigned long long)len);
	if ((i < x->n && addr + len > x->free[i].off) ||
	    (i > 0 && x->free[i - 1].off + x->free[i - 1].len > addr))
		return hp_error(HP_EINTERNAL, "extent allocator: double free of [%llu, +%llu)",
				(unsigned long long)addr, (unsigned long long)len);
	int merge_prev = i > 0 && x->free[i - 1].off + x->free[i - 1].len == addr;
	int merge_next = i < x->n && addr + len == x->free[i].off;
	if (merge_prev && merge_next) {
		x->free[i - 1].len += len + x->free[i].len;
		memmove(&x->free[i], &x->free[i + 1], (x->n - i - 1) * sizeof *x->free);
		x->n--;
	} else if (merge_prev) {
		x->free[i - 1].len += len;
	} else if (merge_next) {
		x->free[i].off = addr;
		x->free[i].len += len;
	} else {
		rc = grow(x);
		if (rc < 0)
			return rc;
		memmove(&x->free[i + 1], &x->free[i], (x->n - i) * sizeof *x->free);
		x->free[i] = (struct ext){ addr, len };
		x->n++;
	}
	x->used -= len;
	x->count--;
	return 0;
}

int hs_extents_claim(struct hs_extents *x, uint64_t addr, uint64_t len)
{
	size_t i = lower_bound(x, addr + 1);
	int rc;

	/* The free extent containing addr is the one before lower_bound(addr+1). */
	if (i == 0 || len == 0 || x->free[i - 1].off + x->free[i - 1].len < addr + len)
		return hp_error(HP_ECORRUPT, "extent [%llu, +%llu) overlaps one already in use",
				(unsigned long long)addr, (unsigned long long)len);
	struct ext e = x->free[i - 1];
	uint64_t head = addr - e.off, tail = e.off + e.len - (addr + len);
	if (head && tail) {
		rc = grow(x);
		if (rc < 0)
			return rc;
		memmove(&x->free[i + 1], &x->free[i], (x->n - i) * sizeof *x->free);
		x->n++;
		x->free[i - 1].len = head;
		x->free[i] = (struct ext){ addr + len, tail };
	} else if (head) {
		x->free[i - 1].len = head;
	} else if (tail) {
		x->free[i - 1] = (struct ext){ addr + len, tail };
	} else {
		memmove(&x->free[i - 1], &x->free[i], (x->n - i) * sizeof *x->free);
		x->n--;
	}
	x->used += len;
	x->count++;
	return 0;
}

uint64_t hs_extents_used(const struct hs_extents *x)
{
	return x->used;
}

uint64_t hs_extents_count(const struct hs_extents *x)
{
	return x->count;
}
