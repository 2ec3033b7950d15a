/* Compaction of a small frame pool by memcpy (store_internal.h,
 * hs_frames_compact_for).  A run for a tensor of several chunks (or one
 * piece for a chunk of several pages) needs n free pages in a row, and a
 * pool kept full by the budget is cut into a few free pages here and
 * there: a tight budget evicts just the bytes it needs.  Chunks used
 * where they lie can be moved by memcpy instead (a 16 KiB chunk copies in
 * ~1 us, where mapping the pieces of a fragmented one costs 10-250 us per
 * mremap each way), so the window of n pages that holds no chunk that
 * cannot move and the fewest that can is emptied into free pages outside
 * it. */
#include <stdlib.h>
#include <string.h>

#include "store/store_internal.h"

enum { PG_FREE = 0, PG_MOVE, PG_DROP, PG_FIXED };

/* A bounce buffer for a run's relocation: pages of the pool itself (any
 * pieces), so it costs no memory beyond the budget; a pool of at most
 * 4 MiB with too few free pages takes it from malloc (part of the fixed
 * overhead of budgets under 64 MiB, hpdlf-exec(1), MEMORY). */
struct bounce {
	unsigned char *mem;     /* malloc'd, or NULL: the pieces */
	struct hs_piece one, *many;
	uint32_t n;
};

struct pg {
	struct hs_tensor *t;
	uint64_t i;             /* chunk of t, or piece of the bounce */
	uint8_t kind;
	uint8_t bounce;         /* a page of the bounce buffer (fixed, but slide moves it) */
};

static struct hs_piece *bounce_pieces(struct bounce *b)
{
	return b->n > 1 ? b->many : &b->one;
}

/* Moving a chunk by memcpy is safe when nobody holds its address (no pin)
 * and no I/O uses its frames (resident, not loading or writing), and its
 * bytes are at home in the pool (used there, or not mapped yet). */
static int kind_of(const struct hs_chunk *c)
{
	if (c->ahead) /* read ahead for a gather between the runs: reclaim takes it, last */
		return PG_FIXED;
	if (c->cached && c->state == CH_ABSENT && !c->pins)
		return PG_DROP; /* discarded: its frames are freed (moved home first if mapped) */
	if (c->npieces == 1 && !c->pins && c->state == CH_RESIDENT && (c->home || !c->mapped))
		return PG_MOVE; /* a chunk of a run moved apart is copied back by unify (hs_run_relocate) */
	return PG_FIXED;
}

/* The owner and kind of every page of the pool.  keep_runs: the chunks of
 * a tensor of several lying in its run count as fixed, so that emptying a
 * window never takes one chunk out of a run (evacuate moves chunks one by
 * one to wherever there is room: the run broken, its tensor's next whole
 * pin copies it into a new run or maps it, an mremap each way; LeNet
 * trained at 25% of its peak, whose 64 KiB activations are 4 chunks in a
 * 64-page pool, did that several times a step).  slide moves runs whole. */
static struct pg *owners(struct hs_store *st, uint64_t pages, struct bounce *b, int keep_runs)
{
	struct pg *o = calloc(pages ? pages : 1, sizeof *o);

	for (uint32_t j = 0; o && b && !b->mem && j < b->n; j++)
		for (uint64_t q = bounce_pieces(b)[j].page; q < (uint64_t)bounce_pieces(b)[j].page + bounce_pieces(b)[j].n && q < pages; q++)
			o[q] = (struct pg){ NULL, j, PG_FIXED, 1 };

	for (struct hs_tensor *t = st->list; o && t; t = t->next)
		for (uint64_t i = 0; i < t->nchunks; i++) {
			struct hs_chunk *c = &t->ch[i];
			const struct hs_piece *p = c->npieces > 1 ? c->many : &c->one;
			uint8_t k = c->npieces ? (uint8_t)kind_of(c) : PG_FREE;
			if (k == PG_MOVE && keep_runs && t->run && t->nchunks > 1)
				k = PG_FIXED;
			for (uint32_t j = 0; j < c->npieces; j++)
				for (uint64_t q = p[j].page; q < (uint64_t)p[j].page + p[j].n && q < pages; q++)
					o[q] = (struct pg){ t, i, k, 0 };
		}
	/* pages no chunk owns but the pool does not list free: staging, lost */
	for (uint64_t q = 0; o && q < pages; q++)
		if (o[q].kind == PG_FREE && !hs_frames_is_free(st->frames, q))
			o[q].kind = PG_FIXED;
	return o;
}

/* A stretch of free pages outside the window being tried. */
struct hole {
	uint64_t s, n;
};

/* Would evacuate empty window [w, w + n) of o?  It copies the window's
 * movable chunks, in page order, each to the first free pages outside it
 * that hold it whole (hs_frames_find_run, the window's own free pages
 * held), so the same first fit over the free stretches outside the window
 * tells (pages a discarded chunk frees are not counted: they only help).
 * fs[0..nfs): the pool's free stretches in page order; h: room for
 * nfs + 1 (the window splits one at most in two). */
static int window_fits(const struct pg *o, const uint8_t *kind, uint64_t w, uint64_t n, const struct hole *fs,
		       size_t nfs, struct hole *h)
{
	size_t nh = 0;

	for (size_t j = 0; j < nfs; j++) { /* the stretches with the window's pages taken out */
		uint64_t s = fs[j].s, e = fs[j].s + fs[j].n;
		if (e <= w || s >= w + n) {
			h[nh++] = fs[j];
			continue;
		}
		if (s < w)
			h[nh++] = (struct hole){ s, w - s };
		if (e > w + n)
			h[nh++] = (struct hole){ w + n, e - (w + n) };
	}
	for (uint64_t q = w; q < w + n; q++) {
		if (kind[q] != PG_MOVE || (q > w && o[q].t == o[q - 1].t && o[q].i == o[q - 1].i))
			continue;
		uint64_t len = o[q].t->ch[o[q].i].one.n;
		size_t k = 0;
		while (k < nh && h[k].n < len)
			k++;
		if (k == nh)
			return 0;
		h[k].s += len;
		h[k].n -= len;
	}
	return 1;
}

/* Windows tried for fit (window_fits) before settling for the cheapest. */
#define FIT_TRIES 8

/* The window of n pages with no fixed page, the fewest pages to move and
 * room outside it for them; -1 if none.  Room by count is not room by
 * fit: of the windows with room, the cheapest whose chunks fit the free
 * stretches outside it whole (tried in order of cost), else the cheapest
 * (evacuate fails and compact_for slides the pool: a third of the 3-D
 * U-Net's 45-90 slides a step, trained at 25% of its peak, 3-5 MiB of
 * chunks each, came after a window whose chunks did not fit). */
static int64_t pick_window(const struct pg *o, uint64_t pages, uint64_t n)
{
	uint64_t fixed = 0, move = 0, nfree = 0, best_move = UINT64_MAX;
	int64_t best = -1;
	size_t nfs = 0;
	/* the kinds alone (a byte a page where o takes 24: every pass below
	 * reads the whole pool), and the free stretches once, as many as there
	 * are (each window tried splits at most one: h holds one more) */
	uint8_t *kind = malloc(pages ? pages : 1);
	uint64_t *cost = malloc((pages ? pages : 1) * sizeof *cost);
	struct hole *fs = NULL, *h;

	for (uint64_t q = 0; kind && q < pages; q++) {
		kind[q] = o[q].kind;
		nfree += kind[q] == PG_FREE;
		nfs += kind[q] == PG_FREE && (!q || kind[q - 1] != PG_FREE);
	}
	if (kind && cost)
		fs = malloc((2 * nfs + 1) * sizeof *fs);
	if (!fs) { /* (no window: compact_for slides) */
		free(kind);
		free(cost);
		return -1;
	}
	h = fs + nfs;
	nfs = 0;
	for (uint64_t q = 0; q < pages;) {
		if (kind[q] != PG_FREE) {
			q++;
			continue;
		}
		uint64_t e = q + 1;
		while (e < pages && kind[e] == PG_FREE)
			e++;
		fs[nfs++] = (struct hole){ q, e - q };
		q = e;
	}
	for (uint64_t q = 0, wfree = 0; q < pages; q++) {
		fixed += kind[q] == PG_FIXED;
		move += kind[q] == PG_MOVE;
		wfree += kind[q] == PG_FREE;
		if (q >= n) {
			fixed -= kind[q - n] == PG_FIXED;
			move -= kind[q - n] == PG_MOVE;
			wfree -= kind[q - n] == PG_FREE;
		}
		int ok = q + 1 >= n && !fixed && nfree - wfree >= move;
		if (q + 1 >= n)
			cost[q + 1 - n] = ok ? move : UINT64_MAX;
		if (ok && move < best_move) {
			best = (int64_t)(q + 1 - n);
			best_move = move;
		}
	}
	for (int k = 0; k < FIT_TRIES && best >= 0; k++) {
		uint64_t w = UINT64_MAX, c = UINT64_MAX;
		for (uint64_t q = 0; k && q + n <= pages; q++) /* (the first try: the cheapest, best) */
			if (cost[q] < c) {
				c = cost[q];
				w = q;
			}
		if (!k)
			w = (uint64_t)best;
		if (w == UINT64_MAX)
			break;
		if (window_fits(o, kind, w, n, fs, nfs, h)) {
			best = (int64_t)w;
			break;
		}
		/* its near neighbours share most of its chunks: try further away */
		for (uint64_t q = w > n / 4 ? w - n / 4 : 0; q <= w + n / 4 && q + n <= pages; q++)
			cost[q] = UINT64_MAX;
	}
	free(kind);
	free(cost);
	free(fs);
	return best;
}

struct win {
	uint64_t s, n;
	uint8_t *mine;          /* window pages taken here, given back at the end */
};

/* Take the window's free pages, out of reach of the chunks moved out of
 * it: each stretch of them at once (page by page, every take split the
 * buddy block around it again, and every page went back on its own). */
static void hold_free(struct hs_frames *f, struct win *w)
{
	for (uint64_t q = w->s, e; q < w->s + w->n; q = e) {
		if (!hs_frames_is_free(f, q)) {
			e = q + 1;
			continue;
		}
		for (e = q + 1; e < w->s + w->n && hs_frames_is_free(f, e); e++)
			;
		if (hs_frames_take(f, q, e - q) == 0)
			memset(w->mine + (q - w->s), 1, e - q);
	}
}

/* Empty chunk (t, i) out of the window: dropped if discarded, else copied
 * to a free piece outside it.  0 or -1 (it stays). */
static int evacuate(struct hs_store *st, struct hs_tensor *t, uint64_t i, struct win *w)
{
	struct hs_chunk *c = &t->ch[i];
	struct hs_piece old = c->one;
	uint64_t to;

	if (!c->npieces) /* a chunk of several pieces met again: gone already */
		return 0;
	if (kind_of(c) == PG_FIXED)
		return -1;
	if (kind_of(c) == PG_DROP) {
		hs_chunk_detach_stretch(st, t, i);
	} else {
		if (hs_frames_find_run(st->frames, old.n, &to) < 0 || hs_frames_take(st->frames, to, old.n) < 0)
			return -1;
		c->one.page = (uint32_t)to;
		memcpy(hs_frames_home(st->frames, &c->one), hs_frames_home(st->frames, &old), (size_t)old.n * HS_PAGE);
		st->fst.compact_bytes += (uint64_t)old.n * HS_PAGE;
		hs_frames_free(st->frames, &old, NULL, 1);
	}
	hold_free(st->frames, w);
	return 0;
}

/* Empty window [s, s + n) of o (its pages' owners). */
static int empty_window(struct hs_store *st, const struct pg *o, uint64_t s, uint64_t n)
{
	struct win w = { s, n, calloc(n, 1) };
	int rc = 0;

	if (!w.mine)
		return -1;
	hold_free(st->frames, &w);
	for (uint64_t q = s; q < s + n && rc == 0; q++)
		if (o[q].kind != PG_FREE && (q == s || o[q].t != o[q - 1].t || o[q].i != o[q - 1].i))
			rc = evacuate(st, o[q].t, o[q].i, &w);
	for (uint64_t q = 0, e; q < n; q = e) {
		for (e = q; e < n && w.mine[e]; e++)
			;
		if (e > q) {
			struct hs_piece p = { (uint32_t)(s + q), (uint32_t)(e - q) };
			hs_frames_free(st->frames, &p, NULL, 1);
		} else {
			e++;
		}
	}
	free(w.mine);
	return rc;
}

/* Piece j of bounce b slid down to page to (below it, [to, its page) free). */
static void slide_bounce(struct hs_store *st, struct bounce *b, uint32_t j, uint64_t to)
{
	struct hs_piece *p = &bounce_pieces(b)[j], old = *p;

	hs_frames_free(st->frames, &old, NULL, 1);
	if (hs_frames_take(st->frames, to, old.n) < 0) { /* cannot happen; keep it where it is */
		hs_frames_take(st->frames, old.page, old.n);
		return;
	}
	p->page = (uint32_t)to;
	memmove(hs_frames_home(st->frames, p), hs_frames_home(st->frames, &old), (size_t)old.n * HS_PAGE);
	st->fst.compact_bytes += (uint64_t)old.n * HS_PAGE;
}

/* Slide every chunk that can move and has free pages above it down onto
 * the one below it, lowest first (dropping discarded ones): the free pages
 * gather in one run below the first chunk that cannot move or has none
 * above it (or at the pool's end).  Chunks that lay
 * next to each other (a run) still do.  For when no window can be
 * emptied: the free pages outside it too scattered to take its chunks.
 * The pieces of bounce b (the bytes of the tensor looking for a run) move
 * too: held where they lie they would cut the free pages apart. */
static void slide(struct hs_store *st, const struct pg *o, uint64_t pages, struct bounce *b)
{
	uint64_t cursor = 0;
	uint8_t *room = calloc(pages ? pages : 1, 1);

	/* room[q]: a free (or discarded) page lies above q before the next
	 * chunk that cannot move.  Chunks with none above them stay: the free
	 * pages below gather in one run under them all the same, and moving
	 * them down copied a stretch's top for nothing (the 3-D U-Net trained
	 * at 25% slid ~250 MB a step, a tenth of it such tops) */
	for (uint64_t q = pages, seen = 0; room && q-- > 0;) {
		const struct hs_chunk *c = o[q].t ? &o[q].t->ch[o[q].i] : NULL;
		if (!o[q].bounce && (o[q].kind == PG_FIXED || (c && c->npieces && kind_of(c) == PG_FIXED)))
			seen = 0;
		else if (o[q].kind == PG_FREE || o[q].kind == PG_DROP)
			seen = 1;
		room[q] = (uint8_t)seen;
	}
	for (uint64_t q = 0; q < pages; q++) {
		int first = !q || o[q].t != o[q - 1].t || o[q].i != o[q - 1].i || o[q].bounce != o[q - 1].bounce;
		struct hs_chunk *c = o[q].t ? &o[q].t->ch[o[q].i] : NULL;
		if (o[q].bounce) {
			if (first) {
				if (cursor < bounce_pieces(b)[o[q].i].page && (!room || room[q]))
					slide_bounce(st, b, (uint32_t)o[q].i, cursor);
				cursor = bounce_pieces(b)[o[q].i].page + bounce_pieces(b)[o[q].i].n;
			}
			continue;
		}
		if (o[q].kind == PG_FIXED || (c && first && c->npieces && kind_of(c) == PG_FIXED)) {
			cursor = q + 1 > cursor ? q + 1 : cursor;
			continue;
		}
		if (o[q].kind == PG_FREE || !first || !c->npieces)
			continue;
		if (kind_of(c) == PG_DROP) {
			hs_chunk_detach_stretch(st, o[q].t, o[q].i);
			continue;
		}
		struct hs_piece old = c->one;
		if (cursor < old.page && (!room || room[q])) { /* [cursor, old.page) is free: everything below moved or left */
			hs_frames_free(st->frames, &old, NULL, 1);
			if (hs_frames_take(st->frames, cursor, old.n) < 0) { /* cannot happen; keep it where it is */
				hs_frames_take(st->frames, old.page, old.n);
				cursor = old.page + old.n;
				continue;
			}
			c->one.page = (uint32_t)cursor;
			memmove(hs_frames_home(st->frames, &c->one), hs_frames_home(st->frames, &old), (size_t)old.n * HS_PAGE);
			st->fst.compact_bytes += (uint64_t)old.n * HS_PAGE;
		}
		cursor = c->one.page + old.n;
	}
	free(room);
}

/* hs_frames_compact_for, with the pieces of bounce b (NULL: none) in the pool. */
static int compact_for(struct hs_store *st, uint64_t n, struct bounce *b)
{
	uint64_t pages = hs_frames_grown(st->frames) / HS_PAGE;
	struct pg *o = owners(st, pages, b, 1);
	int64_t s = o ? pick_window(o, pages, n) : -1;
	int rc = s < 0 ? -1 : empty_window(st, o, (uint64_t)s, n);

	st->fst.compactions++;
	if (rc < 0 && o) {
		free(o);
		if ((o = owners(st, pages, b, 0)) != NULL) { /* the window may have moved some */
			st->fst.slides++;
			slide(st, o, pages, b);
		}
		rc = 0; /* the caller looks again */
	}
	free(o);
	return rc;
}

int hs_frames_compact_for(struct hs_store *st, uint64_t n)
{
	return compact_for(st, n, NULL);
}

int hs_frames_clear(struct hs_store *st, uint64_t page, uint64_t n)
{
	uint64_t pages = hs_frames_grown(st->frames) / HS_PAGE, nfree = 0, wfree = 0, move = 0;
	struct pg *o = page + n <= pages ? owners(st, pages, NULL, 0) : NULL;
	int rc = o ? 0 : -1;

	for (uint64_t q = 0; o && q < pages; q++) {
		int in = q >= page && q < page + n;
		nfree += o[q].kind == PG_FREE;
		wfree += in && o[q].kind == PG_FREE;
		move += in && o[q].kind == PG_MOVE;
		if (in && o[q].kind == PG_FIXED)
			rc = -1;
	}
	if (rc == 0 && nfree - wfree < move)
		rc = -1;
	if (rc == 0) {
		st->fst.compactions++;
		rc = empty_window(st, o, page, n);
	}
	free(o);
	return rc;
}

#define BOUNCE_MALLOC_MAX (4ull << 20)

static int bounce_get(struct hs_store *st, struct hs_tensor *t, uint64_t want, struct bounce *b)
{
	*b = (struct bounce){ 0 };
	if (hs_fault_check(HS_FAULT_BOUNCE))
		return -1;
	if (hs_frames_alloc(st->frames, want, &b->one, &b->many, &b->n) == 0)
		return 0;
	if (hs_frames_grown(st->frames) > BOUNCE_MALLOC_MAX || !(b->mem = malloc(t->maplen)))
		return -1;
	return 0;
}

static void bounce_put(struct hs_store *st, struct bounce *b)
{
	if (b->mem)
		free(b->mem);
	else
		hs_frames_free(st->frames, &b->one, b->many, b->n);
	b->many = NULL;
}

/* n pages between mem and the bounce at page off (to: into the bounce). */
static void bounce_copy(struct hs_store *st, struct bounce *b, uint64_t off, unsigned char *mem, uint64_t n, int to)
{
	const struct hs_piece *p = bounce_pieces(b);

	st->fst.compact_bytes += n * HS_PAGE;
	if (b->mem) {
		memcpy(to ? b->mem + off * HS_PAGE : mem, to ? mem : b->mem + off * HS_PAGE, (size_t)n * HS_PAGE);
		return;
	}
	for (uint32_t k = 0; k < b->n && n; k++) {
		if (off >= p[k].n) {
			off -= p[k].n;
			continue;
		}
		uint64_t m = p[k].n - off < n ? p[k].n - off : n;
		unsigned char *at = hs_frames_home(st->frames, &p[k]) + off * HS_PAGE;
		memcpy(to ? at : mem, to ? mem : at, (size_t)m * HS_PAGE);
		mem += m * HS_PAGE;
		n -= m;
		off = 0;
	}
}

/* Chunks of t copied to their places in the run at page (taken), from
 * the bounce or from where they lie. */
static void copy_into_run(struct hs_store *st, struct hs_tensor *t, uint64_t page, struct bounce *b)
{
	uint64_t cp = st->cs / HS_PAGE;

	for (uint64_t i = 0; i < t->nchunks; i++) {
		struct hs_chunk *c = &t->ch[i];
		struct hs_piece old = c->one;
		c->one.page = (uint32_t)(page + i * cp);
		if (b) {
			bounce_copy(st, b, i * cp, hs_frames_home(st->frames, &c->one), old.n, 0);
			continue;
		}
		memcpy(hs_frames_home(st->frames, &c->one), hs_frames_home(st->frames, &old), (size_t)old.n * HS_PAGE);
		st->fst.compact_bytes += (uint64_t)old.n * HS_PAGE;
		hs_frames_free(st->frames, &old, NULL, 1);
	}
	t->run = page + 1;
}

/* The chunks go to the tensor's range (mapped, as without runs), from the
 * bounce: the pages they freed are enough for them in pieces. */
static int relocate_mapped(struct hs_store *st, struct hs_tensor *t, struct bounce *b)
{
	uint64_t cp = st->cs / HS_PAGE;
	int rc = 0;

	t->run = 0;
	for (uint64_t i = 0; i < t->nchunks && rc == 0; i++) {
		struct hs_chunk *c = &t->ch[i];
		uint64_t np = c->one.n;
		rc = hs_frames_alloc(st->frames, np, &c->one, &c->many, &c->npieces);
		hs_frames_unqueue(st->frames, &c->zq); /* mapped again right here: a flush must not empty it */
		if (rc == 0 && (rc = hs_frames_map(st->frames, t->base + i * st->cs, c->npieces > 1 ? c->many : &c->one,
						   c->npieces)) == 0) {
			bounce_copy(st, b, i * cp, t->base + i * st->cs, np, 0);
			c->home = 0;
		}
	}
	return rc;
}

/* No run free beside the chunks themselves: through a bounce buffer, in
 * the pages they free too, compacting the rest if need be; if even that
 * finds no run, relocate_mapped.  1 if there is no bounce buffer (nothing
 * done: the caller maps the chunks where they lie). */
static int relocate_bounce(struct hs_store *st, struct hs_tensor *t, uint64_t want)
{
	uint64_t page, cp = st->cs / HS_PAGE;
	struct bounce b;
	int rc;

	if (bounce_get(st, t, want, &b) < 0)
		return 1;
	for (uint64_t i = 0; i < t->nchunks; i++) { /* out of the pool's sight while it looks */
		struct hs_chunk *c = &t->ch[i];
		bounce_copy(st, &b, i * cp, hs_frames_home(st->frames, &c->one), c->one.n, 1);
		hs_frames_free(st->frames, &c->one, NULL, 1);
		c->npieces = 0;
	}
	if ((hs_frames_find_run(st->frames, want, &page) == 0 ||
	     (compact_for(st, want, &b) == 0 && hs_frames_find_run(st->frames, want, &page) == 0)) &&
	    hs_frames_take(st->frames, page, want) == 0) {
		for (uint64_t i = 0; i < t->nchunks; i++)
			t->ch[i].npieces = 1;
		copy_into_run(st, t, page, &b);
		rc = 0;
	} else {
		rc = relocate_mapped(st, t, &b);
	}
	bounce_put(st, &b);
	return rc;
}

int hs_run_relocate(struct hs_store *st, struct hs_tensor *t)
{
	uint64_t want = t->maplen / HS_PAGE, page;

	if (!hs_frames_runs(st->frames))
		return 1;
	for (uint64_t i = 0; i < t->nchunks; i++)
		if (!t->ch[i].home || t->ch[i].npieces != 1)
			return 1;
	if (hs_frames_find_run(st->frames, want, &page) < 0 || hs_frames_take(st->frames, page, want) < 0)
		return relocate_bounce(st, t, want);
	copy_into_run(st, t, page, NULL);
	return 0;
}
