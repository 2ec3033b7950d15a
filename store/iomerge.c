/* Requests of a batch that continue each other become one (iomerge.h). */
#include <stdlib.h>

#include "store/iomerge.h"

struct merged {
	struct hs_io io;
	int n;
	struct hs_io *sub[];
};

/* Completes every request the merged one held, with its result. */
static void merged_done(struct hs_io *io)
{
	struct merged *m = io->arg;

	for (int k = 0; k < m->n; k++) {
		m->sub[k]->res = io->res;
		m->sub[k]->done(m->sub[k]);
	}
	free(m);
}

/* b starts where a ends: on the tier, at buf, and in the same registered
 * region (or none, both). */
static int follows(const struct hs_io *a, const struct hs_io *b)
{
	return a->op == b->op && a->addr + a->len == b->addr && (const char *)a->buf + a->len == (const char *)b->buf &&
	       a->mem_slot == b->mem_slot && (!a->mem_slot || a->mem_off + a->len == b->mem_off);
}

static int before(const struct hs_io *a, const struct hs_io *b)
{
	return a->op != b->op ? a->op < b->op : a->addr < b->addr;
}

/* Insertion sort by operation, then tier address (batches are small). */
static void sort_ios(struct hs_io **ios, int n)
{
	for (int i = 1; i < n; i++) {
		struct hs_io *x = ios[i];
		int j = i;
		for (; j > 0 && before(x, ios[j - 1]); j--)
			ios[j] = ios[j - 1];
		ios[j] = x;
	}
}

/* One request for ios[0..n) (n >= 2, each following the one before), or
 * NULL without memory. */
static struct hs_io *wrap(struct hs_io **ios, int n, size_t len)
{
	struct merged *m = malloc(sizeof *m + (size_t)n * sizeof *m->sub);

	if (!m)
		return NULL;
	m->io = (struct hs_io){ .op = ios[0]->op, .addr = ios[0]->addr, .buf = ios[0]->buf, .len = len,
				.done = merged_done, .arg = m, .t_submit_ns = ios[0]->t_submit_ns,
				.mem_slot = ios[0]->mem_slot, .mem_off = ios[0]->mem_off, .nreq = 0 };
	m->n = n;
	for (int k = 0; k < n; k++) {
		m->sub[k] = ios[k];
		m->io.nreq += ios[k]->nreq > 1 ? ios[k]->nreq : 1;
	}
	return &m->io;
}

int hs_io_merge(struct hs_io **ios, int n)
{
	int out = 0;

	sort_ios(ios, n);
	for (int i = 0, j; i < n; i = j) {
		size_t len = ios[i]->len;
		for (j = i + 1; j < n && follows(ios[j - 1], ios[j]) && len + ios[j]->len <= HS_IO_MERGE_MAX; j++)
			len += ios[j]->len;
		struct hs_io *m = j - i > 1 ? wrap(&ios[i], j - i, len) : NULL;
		if (m) {
			ios[out++] = m; /* out <= i: the requests it holds were read */
			continue;
		}
		for (int k = i; k < j; k++)
			ios[out++] = ios[k];
	}
	return out;
}
