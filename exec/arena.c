/* Static placement of run-time values in one arena.
 *
 * Each item is alive over the schedule steps [start, end]; items alive at
 * the same time get disjoint byte ranges.  Largest first, each at the lowest
 * offset that clears every already placed item it overlaps in time (the
 * greedy-by-size strategy of TFLite's arena planner, within a few percent
 * of the liveness lower bound on convolutional networks).  The arena is
 * allocated once per session, so a run does no allocation and touches the
 * same pages every time. */
#include <errno.h>
#include <stdlib.h>

#include "hpdlf/error.h"
#include "exec/exec_internal.h"

struct span {
	uint64_t lo, hi;
};

static const struct hp_arena_item *sort_items;

static int by_size_desc(const void *a, const void *b)
{
	const struct hp_arena_item *x = &sort_items[*(const int *)a], *y = &sort_items[*(const int *)b];

	if (x->size != y->size)
		return x->size < y->size ? 1 : -1;
	if (x->start != y->start)
		return x->start - y->start;
	return *(const int *)a - *(const int *)b;
}

static int by_lo(const void *a, const void *b)
{
	const struct span *x = a, *y = b;

	return (x->lo > y->lo) - (x->lo < y->lo);
}

static uint64_t first_fit(struct span *busy, int nb, uint64_t size)
{
	uint64_t at = 0;

	qsort(busy, (size_t)nb, sizeof *busy, by_lo);
	for (int i = 0; i < nb; i++) {
		if (busy[i].lo >= at + size)
			break;
		if (busy[i].hi > at)
			at = busy[i].hi;
	}
	return at;
}

int hp_arena_place(struct hp_arena_item *items, int n, uint64_t align, uint64_t *total)
{
	int *order = malloc((size_t)(n + 1) * sizeof *order);
	int *placed = malloc((size_t)(n + 1) * sizeof *placed);
	struct span *busy = malloc((size_t)(n + 1) * sizeof *busy);
	int np = 0;

	*total = 0;
	if (!order || !placed || !busy) {
		free(order), free(placed), free(busy);
		return hp_error(-ENOMEM, "out of memory planning the tensor arena (%d values)", n);
	}
	for (int i = 0; i < n; i++)
		order[i] = i;
	sort_items = items;
	qsort(order, (size_t)n, sizeof *order, by_size_desc);
	for (int k = 0; k < n; k++) {
		struct hp_arena_item *it = &items[order[k]];
		uint64_t size = (it->size + align - 1) / align * align;
		int nb = 0;

		if (!size) {
			it->offset = 0;
			continue;
		}
		for (int j = 0; j < np; j++) {
			const struct hp_arena_item *o = &items[placed[j]];
			if (o->start <= it->end && it->start <= o->end)
				busy[nb++] = (struct span){ o->offset, o->offset + (o->size + align - 1) / align * align };
		}
		it->offset = first_fit(busy, nb, size);
		if (it->offset + size > *total)
			*total = it->offset + size;
		placed[np++] = order[k];
	}
	free(order), free(placed), free(busy);
	return 0;
}
