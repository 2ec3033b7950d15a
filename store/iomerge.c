/* Requests of a batch that continue each other become one (iomerge.h). */
#include <limits.h>
#include <stdlib.h>

#include "store/iomerge.h"

struct merged {
	struct hs_io io;
	int n;
	struct iovec *iov;      /* scattered memory: after sub[] (NULL: contiguous) */
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

/* b may join the stretch ending with a: b follows a on the tier, and
 * either the stretch stays one piece of memory (*contig) or the tier takes
 * an iovec and every request of it has a vbuf (*allv); both updated. */
static int joins(const struct hs_io *a, const struct hs_io *b, int vectored, int *contig, int *allv)
{
	if (a->niov || b->niov || a->op != b->op || a->addr + a->len != b->addr)
		return 0;
	int c = *contig && follows(a, b), v = vectored && *allv && b->vbuf;
	if (!c && !v)
		return 0;
	*contig = c;
	*allv = v;
	return 1;
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

/* The pieces of memory of ios[0..n) into iov, neighbours in memory one
 * piece; how many. */
static uint32_t pieces(struct hs_io **ios, int n, struct iovec *iov)
{
	uint32_t k = 0;

	for (int i = 0; i < n; i++) {
		if (k && (char *)iov[k - 1].iov_base + iov[k - 1].iov_len == (char *)ios[i]->vbuf) {
			iov[k - 1].iov_len += ios[i]->len;
			continue;
		}
		iov[k++] = (struct iovec){ ios[i]->vbuf, ios[i]->len };
	}
	return k;
}

/* One request for ios[0..n) (n >= 2, each joining the one before), or
 * NULL without memory; scattered in memory, an iovec (no fixed buffer). */
static struct hs_io *wrap(struct hs_io **ios, int n, size_t len)
{
	int contiguous = 1;

	for (int k = 1; k < n; k++)
		contiguous &= follows(ios[k - 1], ios[k]);
	struct merged *m = malloc(sizeof *m + (size_t)n * sizeof *m->sub + (contiguous ? 0 : (size_t)n * sizeof *m->iov));
	if (!m)
		return NULL;
	m->io = (struct hs_io){ .op = ios[0]->op, .addr = ios[0]->addr, .buf = ios[0]->buf, .len = len,
				.done = merged_done, .arg = m, .t_submit_ns = ios[0]->t_submit_ns,
				.mem_slot = ios[0]->mem_slot, .mem_off = ios[0]->mem_off, .nreq = 0 };
	m->n = n;
	m->iov = NULL;
	for (int k = 0; k < n; k++) {
		m->sub[k] = ios[k];
		m->io.nreq += ios[k]->nreq > 1 ? ios[k]->nreq : 1;
	}
	if (!contiguous) {
		m->iov = (struct iovec *)&m->sub[n];
		m->io.iov = m->iov;
		m->io.niov = pieces(ios, n, m->iov);
		m->io.mem_slot = 0;
		m->io.mem_off = 0;
	}
	return &m->io;
}

int hs_io_merge(struct hs_io **ios, int n, int vectored)
{
	int out = 0;

	sort_ios(ios, n);
	for (int i = 0, j; i < n; i = j) {
		size_t len = ios[i]->len;
		int contig = 1, allv = ios[i]->vbuf != NULL;
		for (j = i + 1; j < n && len + ios[j]->len <= HS_IO_MERGE_MAX && j - i < IOV_MAX &&
				joins(ios[j - 1], ios[j], vectored, &contig, &allv); j++)
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
