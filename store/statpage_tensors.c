/* The per-tensor section of the statistics page (layout version 2): the
 * HS_PAGE_TENSORS largest tensors and where each byte of them is now.
 * Bounded on purpose: a store of a million tensors publishes the same
 * fixed-size page, and the chunk walk covers only the tensors listed, so
 * a publication (at most 100 a second, under the store's lock) costs
 * O(tensors * HS_PAGE_TENSORS) comparisons plus the listed tensors' chunks.
 * docs/store-format.md */
#include <stdio.h>
#include <string.h>

#include "store/store_internal.h"

/* 1 if a ranks before b: more bytes first, the older (smaller id) on a tie,
 * so the listing does not flicker between equal tensors. */
static int ranks_before(const struct hs_tensor *a, const struct hs_tensor *b)
{
	return a->bytes != b->bytes ? a->bytes > b->bytes : a->id < b->id;
}

/* The n largest tensors into top[] (sorted, largest first); their count. */
static int pick_largest(struct hs_store *st, struct hs_tensor **top, int n)
{
	int cnt = 0;

	for (struct hs_tensor *t = st->list; t; t = t->next) {
		int at = cnt;
		while (at > 0 && ranks_before(t, top[at - 1]))
			at--;
		if (at >= n)
			continue;
		int last = cnt < n ? cnt : n - 1;
		memmove(&top[at + 1], &top[at], (size_t)(last - at) * sizeof *top);
		top[at] = t;
		if (cnt < n)
			cnt++;
	}
	return cnt;
}

/* Where the bytes of chunk i are: DRAM while resident (a write-back still
 * holds them), else its copy below, else the committed copy, else the
 * backing file, else nowhere (never written). */
static void count_chunk(const struct hs_tensor *t, uint64_t i, struct hs_page_tensor *o)
{
	const struct hs_chunk *c = &t->ch[i];
	uint64_t len = hs_chunk_len(t, i);

	if (c->state == CH_RESIDENT || c->state == CH_WRITING)
		o->tier_bytes[0] += len;
	else if (c->tier >= 0 && c->tier < HS_MAX_TIERS)
		o->tier_bytes[c->tier + 1] += len;
	else if (c->ctier >= 0 && c->ctier < HS_MAX_TIERS)
		o->tier_bytes[c->ctier + 1] += len;
	else if (t->bfile)
		o->file_bytes += len;
	else
		o->none_bytes += len;
	if (c->pins)
		o->pinned += len;
	if (c->last_use > o->last_use)
		o->last_use = c->last_use;
}

static void fill_one(const struct hs_tensor *t, struct hs_page_tensor *o)
{
	memset(o, 0, sizeof *o);
	const char *name = t->name ? t->name : t->label;

	snprintf(o->name, sizeof o->name, "%s", name); /* cut to fit */
	o->id = t->id;
	o->bytes = t->bytes;
	o->chunks = t->nchunks;
	for (uint64_t i = 0; i < t->nchunks; i++)
		count_chunk(t, i, o);
}

/* Lock held. */
uint32_t hs_statpage_fill_tensors(struct hs_store *st, struct hs_page_tensor *out, uint64_t *tick)
{
	struct hs_tensor *top[HS_PAGE_TENSORS];
	int n = pick_largest(st, top, HS_PAGE_TENSORS);

	for (int i = 0; i < n; i++)
		fill_one(top[i], &out[i]);
	*tick = st->tick;
	return (uint32_t)n;
}
