/* Paging: pin, unpin, prefetch, evict; making room under the budget;
 * batched read-in and write-back with crc32c. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "hpdlf/error.h"
#include "store/crc.h"
#include "store/iomerge.h"
#include "store/place.h"
#include "store/store_internal.h"

/* A set of requests somebody waits for (a pin's loads, a prefetch, a
 * write-back batch).  pending/err are protected by st->mu. */
struct hs_prefetch {
	struct hs_store *st;
	int pending;
	int tpending[HS_MAX_TIERS];     /* of pending, requests on each tier */
	int fpending;                   /* of pending, reads of backing files */
	struct hs_tier *ftier;          /* the file tier of the last one */
	uint64_t stage;                 /* staging held for its file reads' windows */
	int err;
	char msg[300];
	struct io_req *reqs;
	int nwb;                        /* write-back: reqs[0..nwb) are its writes, finished at the wait */
	int evict;                      /* and their chunks are dropped then (hs_evict_start) */
};

struct io_req {
	struct hs_io io;
	struct hs_tensor *t;
	uint64_t chunk;
	int tier;
	uint64_t stage;         /* write-back: the new crc32c; file read: its window's bytes */
	struct hs_prefetch *g;
	uint64_t wskip;         /* file read through a window: bytes of it before the chunk */
};

static const char *tname(const struct hs_tensor *t, char *buf, size_t len)
{
	if (t->name)
		snprintf(buf, len, "'%s'", t->name);
	else
		snprintf(buf, len, "#%" PRIu64, t->id);
	return buf;
}

static void group_fail(struct hs_prefetch *g, int err, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static void group_fail(struct hs_prefetch *g, int err, const char *fmt, ...)
{
	va_list ap;

	if (g->err)
		return;
	g->err = err;
	va_start(ap, fmt);
	vsnprintf(g->msg, sizeof g->msg, fmt, ap);
	va_end(ap);
}

static int norm_range(const struct hs_tensor *t, uint64_t *first, uint64_t *n, const char *what)
{
	char nb[96];

	if (*first > t->nchunks || (*n != HS_ALL && *n > t->nchunks - *first))
		return hp_error(HP_EUSAGE, "store: %s of tensor %s: chunks [%" PRIu64 ", +%" PRIu64 ") outside its %" PRIu64
				" chunks", what, tname(t, nb, sizeof nb), *first, *n, t->nchunks);
	if (*n == HS_ALL)
		*n = t->nchunks - *first;
	return 0;
}

/* A clean chunk leaves DRAM (lock held).  The one chunk of a tensor with
 * a copy below DRAM keeps its frames, cached like a discarded chunk's
 * (not resident: not in the budget; reclaim, compaction and steal free
 * them when frames run short) but kept: they still hold the copy's bytes,
 * so a load before they go takes them back instead of reading (a value
 * written back and read again soon after: lenet's per-band gradient sums
 * at a quarter of its peak, its weights evicted between bands, several
 * loads a step each a submission and a device round trip).  Chunks of
 * tensors of several go as before: kept, they held pages their tensor's
 * next load needed in a run, so its other chunks were mapped one by one
 * (lenet at a quarter: about 11 more mremaps a step, +40%).  So do chunks whose crc32c is still to be checked (unverified),
 * file-backed chunks, and all unless the store was opened with keep_clean. */
static void drop_chunk(struct hs_store *st, struct hs_tensor *t, uint64_t i)
{
	struct hs_chunk *c = &t->ch[i];

	if (st->o.keep_clean && t->nchunks == 1 && c->npieces && !c->unverified && !c->dirty && c->tier != NO_TIER &&
	    !t->bpath) {
		c->cached = c->kept = 1;
		st->cached += hs_chunk_iolen(t, i);
	} else {
		hs_chunk_detach(st, t, i);
	}
	c->state = CH_ABSENT;
	c->prefetched = 0;
	st->resident -= hs_chunk_iolen(t, i);
	st->stats.tier[0].evictions++;
}

/* One request of its group finished (lock held). */
static void group_done(struct io_req *r)
{
	if (r->tier != NO_TIER)
		r->g->tpending[r->tier]--;
	else if (r->t->bfile)
		r->g->fpending--;
	r->g->pending--;
	pthread_cond_broadcast(&r->t->st->cv);
}

static void group_add(struct io_req *r)
{
	if (r->tier != NO_TIER) {
		r->g->tpending[r->tier]++;
	} else if (r->t->bfile) {
		r->g->fpending++;
		r->g->ftier = r->t->bfile->tier;
	}
	r->g->pending++;
}

/* Wait (lock held) until nothing of g is pending.  A tier that can reap
 * completions on this thread is polled instead of sleeping: the waiter
 * completes its own requests and nobody has to wake it. */
static void group_wait(struct hs_store *st, struct hs_prefetch *g)
{
	int file_idle = 0;

	while (g->pending) {
		struct hs_tier *pt = NULL;
		for (int k = 0; k < st->ntiers && !pt; k++)
			if (g->tpending[k] && st->tiers[k]->ops->poll)
				pt = st->tiers[k];
		/* the last file read from; reads of other files (or ones its
		 * completion thread took) wake us instead */
		if (!pt && g->fpending && !file_idle && g->ftier->ops->poll)
			pt = g->ftier;
		if (!pt) {
			pthread_cond_wait(&st->cv, &st->mu);
			file_idle = 0;
			continue;
		}
		pthread_mutex_unlock(&st->mu);
		int n = pt->ops->poll(pt, 1);
		pthread_mutex_lock(&st->mu);
		file_idle = pt == g->ftier && n == 0;
	}
}

/* ---- read-in ---- */

static void load_finish(struct io_req *r, int rc)
{
	struct hs_tensor *t = r->t;
	struct hs_store *st = t->st;
	struct hs_chunk *c = &t->ch[r->chunk];
	char nb[96];
	uint32_t crc = 0;

	/* c->mapped is stable while the chunk loads, and so are its frames
	 * (compaction moves resident chunks only).  A chunk read into
	 * unmapped frames (a fixed-buffer read: one piece) is checked where
	 * the read left it, at home in the pool, here on the thread that
	 * reaped the read, not at the next pin: that is on the compute lane,
	 * where ResNet-18 trained at half its peak spent ~0.4 ms in the pin of
	 * each 9 MiB weight it had prefetched. */
	const unsigned char *b = NULL;
	if (rc == 0 && st->o.verify_crc && r->tier != NO_TIER)
		b = c->mapped ? hs_chunk_addr(st, t, r->chunk)
		    : c->npieces == 1 ? hs_frames_home(st->frames, &c->one) : NULL;
	if (b) {
		crc = hs_crc32c(b, hs_chunk_len(t, r->chunk));
		if (crc != c->crc)
			rc = HP_ECORRUPT;
	}
	pthread_mutex_lock(&st->mu);
	if (rc == 0 && st->o.verify_crc && r->tier != NO_TIER && !b)
		c->unverified = 1;
	if (r->tier != NO_TIER)
		hs_stat_io(st, r->tier, &r->io);
	if (rc == HP_ECORRUPT) {
		st->stats.tier[r->tier + 1].crc_errors++;
		group_fail(r->g, rc, "store: tensor %s chunk %" PRIu64 " on tier %s at offset %" PRIu64
			   ": crc32c mismatch (stored %08x, read %08x)", tname(t, nb, sizeof nb), r->chunk,
			   st->tiers[r->tier]->name, c->addr, c->crc, crc);
	} else if (rc < 0) {
		if (r->tier != NO_TIER)
			st->stats.tier[r->tier + 1].errors++;
		group_fail(r->g, rc, "store: tensor %s chunk %" PRIu64 ": read from %s failed: %s",
			   tname(t, nb, sizeof nb), r->chunk,
			   r->tier != NO_TIER ? st->tiers[r->tier]->name : t->bpath,
			   rc == -ENODATA ? "short read" : hp_strerror(rc));
	}
	if (c->ahead)
		st->ra_loading -= hs_chunk_iolen(t, r->chunk);
	if (rc < 0) {
		hs_chunk_detach(st, t, r->chunk);
		c->state = CH_ABSENT;
		c->prefetched = 0;
		st->resident -= hs_chunk_iolen(t, r->chunk);
	} else if (c->ahead) { /* kept: its frames are the store's to take back from now on */
		c->state = CH_ABSENT;
		c->cached = c->kept = 1;
		st->cached += hs_chunk_iolen(t, r->chunk);
		st->resident -= hs_chunk_iolen(t, r->chunk);
	} else {
		c->state = CH_RESIDENT;
		if (r->tier != NO_TIER)
			st->stats.tier[r->tier + 1].promotions++;
	}
	group_done(r);
	pthread_mutex_unlock(&st->mu);
}

static void load_done(struct hs_io *io)
{
	load_finish(io->arg, io->res);
}

/* Staging a backed chunk needs while it is read: the aligned window
 * around it when the file is read with O_DIRECT at an unaligned offset. */
static uint64_t stage_bytes(const struct hs_tensor *t, uint64_t i)
{
	uint64_t off = t->boff + i * t->st->cs;

	if (!t->bfile || !t->bfile->direct || off % HS_IO_ALIGN == 0)
		return 0;
	return ((off % HS_IO_ALIGN) + hs_chunk_len(t, i) + 2 * HS_IO_ALIGN - 1) & ~(uint64_t)(HS_IO_ALIGN - 1);
}

static void file_done(struct hs_io *io)
{
	load_finish(io->arg, io->res);
}

/* The read of backed chunk i from its file tier (lock held): straight into
 * the chunk's frames when the offset is aligned or the file is read
 * buffered; else r->stage != 0 and the read goes through an aligned window
 * of r->stage bytes (submit_loads). */
static void file_req(struct io_req *r, struct hs_tensor *t, uint64_t i)
{
	uint64_t off = t->boff + i * t->st->cs, len = hs_chunk_len(t, i);

	r->io.done = file_done;
	r->io.mem_slot = 0;
	r->io.addr = off;
	r->io.len = t->bfile->direct ? hs_chunk_iolen(t, i) : len;
	r->stage = stage_bytes(t, i);
	if (!r->stage)
		return;
	r->io.addr = off & ~(uint64_t)(HS_IO_ALIGN - 1);
	r->wskip = off - r->io.addr;
	/* the blocks holding the chunk: within the window, and within the file
	 * tier (the window's reserve may run a block past the file's end) */
	r->io.len = (r->wskip + len + HS_IO_ALIGN - 1) & ~(uint64_t)(HS_IO_ALIGN - 1);
}

static void submit_batch(struct hs_tier *t, struct hs_io **batch, int k);
static void submit_batches(struct hs_store *st, struct io_req *reqs, int n);
static void wb_finish(struct hs_store *st, struct hs_prefetch *g);
static int evict_written(struct hs_store *st, const struct hs_prefetch *g);

/* Submit the direct reads of backed chunks, batched per file (lock NOT
 * held); windowed ones are left to read_windows. */
static void submit_files(struct io_req *reqs, int n)
{
	struct hs_io *batch[64];
	struct hs_tier *cur = NULL;
	int k = 0;

	for (int j = 0; j < n; j++) {
		struct io_req *r = &reqs[j];
		if (r->tier != NO_TIER || r->stage)
			continue;
		if (k && (r->t->bfile->tier != cur || k == 64)) {
			submit_batch(cur, batch, k);
			k = 0;
		}
		cur = r->t->bfile->tier;
		r->io.t_submit_ns = hs_now_ns();
		batch[k++] = &r->io;
	}
	if (k)
		submit_batch(cur, batch, k);
}

/* Read the windowed chunks one after the other through the group's one
 * staging window (what the budget reserved: g->stage, the largest window),
 * through the file tier's submit; the staging goes back before they
 * complete.  Returns the number read. */
static int read_windows(struct hs_store *st, struct hs_prefetch *g, struct io_req *reqs, int n)
{
	void *win = NULL;
	int nw = 0;

	for (int j = 0; j < n; j++)
		nw += reqs[j].tier == NO_TIER && reqs[j].stage;
	if (nw == 0)
		return 0;
	win = aligned_alloc(HS_IO_ALIGN, g->stage);
	for (int j = 0; j < n; j++) {
		struct io_req *r = &reqs[j];
		if (r->tier != NO_TIER || !r->stage)
			continue;
		r->io.res = win ? hs_tier_rw(r->t->bfile->tier, HS_IO_READ, r->io.addr, win, r->io.len) : -ENOMEM;
		if (r->io.res == 0)
			memcpy(hs_chunk_addr(st, r->t, r->chunk), (char *)win + r->wskip, hs_chunk_len(r->t, r->chunk));
	}
	free(win);
	pthread_mutex_lock(&st->mu);
	st->resident -= g->stage;
	st->staging -= g->stage;
	g->stage = 0;
	pthread_mutex_unlock(&st->mu);
	for (int j = 0; j < n; j++)
		if (reqs[j].tier == NO_TIER && reqs[j].stage)
			load_finish(&reqs[j], reqs[j].io.res);
	return nw;
}

/* Issue the reads of reqs[0..n) (lock NOT held): each lower tier and each
 * backing file gets its requests in batches, completing in load_finish;
 * reads through windows run here. */
static void submit_loads(struct hs_store *st, struct hs_prefetch *g, struct io_req *reqs, int n)
{
	submit_batches(st, reqs, n);
	submit_files(reqs, n);
	if (read_windows(st, g, reqs, n) == 0 && g->stage) {
		pthread_mutex_lock(&st->mu);
		st->resident -= g->stage;
		st->staging -= g->stage;
		g->stage = 0;
		pthread_mutex_unlock(&st->mu);
	}
}

static void req_init(struct io_req *r, struct hs_tensor *t, uint64_t i, struct hs_prefetch *g)
{
	struct hs_chunk *c = &t->ch[i];

	memset(r, 0, sizeof *r);
	r->t = t;
	r->chunk = i;
	r->g = g;
	r->tier = t->bpath && c->tier == NO_TIER ? NO_TIER : c->tier;
	r->io.op = HS_IO_READ;
	r->io.addr = c->addr;
	r->io.buf = c->npieces ? hs_chunk_addr(t->st, t, i) : t->base + i * t->st->cs;
	r->io.len = hs_chunk_iolen(t, i);
	hs_chunk_io_mem(t->st, c, &r->io);
	r->io.done = load_done;
	r->io.arg = r;
	r->io.t_submit_ns = hs_now_ns();
	if (r->tier == NO_TIER)
		file_req(r, t, i);
	group_add(r);
}

/* ---- write-back ---- */

/* Requests that continue each other go as one (iomerge.h) to a tier the
 * store places; a tier that refuses a batch accepted none of it: complete
 * them here. */
static void submit_batch(struct hs_tier *t, struct hs_io **batch, int k)
{
	int rc;

	if (!t->ops->place)
		k = hs_io_merge(batch, k, (t->flags & HS_TIER_F_VECTORED) != 0);
	rc = t->ops->submit(t, batch, k);

	for (int j = 0; rc < 0 && j < k; j++) {
		batch[j]->res = rc;
		batch[j]->done(batch[j]);
	}
}

/* Submit the requests of reqs[0..n) that have a tier, batched per tier. */
static void submit_batches(struct hs_store *st, struct io_req *reqs, int n)
{
	struct hs_io *batch[64];

	for (int tier = 0; tier < st->ntiers; tier++) {
		int k = 0;
		for (int j = 0; j < n; j++) {
			if (reqs[j].tier != tier)
				continue;
			reqs[j].io.t_submit_ns = hs_now_ns();
			batch[k++] = &reqs[j].io;
			if (k == 64) {
				submit_batch(st->tiers[tier], batch, k);
				k = 0;
			}
		}
		if (k)
			submit_batch(st->tiers[tier], batch, k);
	}
}


static void wb_done(struct hs_io *io)
{
	struct io_req *r = io->arg;
	struct hs_store *st = r->t->st;

	pthread_mutex_lock(&st->mu);
	hs_stat_io(st, r->tier, io);
	if (io->res < 0) {
		char nb[96];
		st->stats.tier[r->tier + 1].errors++;
		group_fail(r->g, io->res, "store: tensor %s chunk %" PRIu64 ": write to %s failed: %s",
			   tname(r->t, nb, sizeof nb), r->chunk, st->tiers[r->tier]->name, hp_strerror(io->res));
	}
	group_done(r);
	pthread_mutex_unlock(&st->mu);
}

/* Allocate an extent on `target` (or the first tier with room, in demotion
 * order) and fill the request. */
static int wb_prepare(struct hs_store *st, struct io_req *r, int target)
{
	uint64_t len = hs_chunk_iolen(r->t, r->chunk);
	int rc = -ENOSPC;

	for (int k = target >= 0 ? target : 0; k < st->ntiers; k++) {
		rc = hs_place_alloc(st->place, k, len, &r->io.addr);
		if (rc == 0) {
			r->tier = k;
			break;
		}
		if (target >= 0)
			break;
	}
	return rc;
}

/* Prepare and submit the writes of items[] (marked CH_WRITING by the
 * caller, lock held and held again on return, released meanwhile) to
 * `target` as group g: g->reqs and g->nwb.  wb_finish completes them. */
static int wb_start(struct hs_store *st, struct hs_prefetch *g, struct wb_item *items, int n, int target)
{
	struct io_req *reqs = calloc(n, sizeof *reqs);
	char nb[96];

	if (!reqs)
		return -ENOMEM;
	g->reqs = reqs;
	g->nwb = n;
	pthread_mutex_unlock(&st->mu);
	for (int j = 0; j < n; j++) {
		struct io_req *r = &reqs[j];
		struct hs_tensor *t = items[j].t;
		r->t = t;
		r->chunk = items[j].chunk;
		r->g = g;
		r->tier = NO_TIER;
		r->io = (struct hs_io){ .op = HS_IO_WRITE, .buf = t->base + r->chunk * st->cs,
					.len = hs_chunk_iolen(t, r->chunk), .done = wb_done, .arg = r };
		pthread_mutex_lock(&st->mu);
		int rc = hs_chunk_map(st, t, r->chunk); /* crc and non-fixed tiers read it */
		hs_chunk_io_mem(st, &t->ch[r->chunk], &r->io);
		r->io.buf = hs_chunk_addr(st, t, r->chunk);
		r->io.vbuf = rc == 0 ? r->io.buf : NULL; /* mapped */
		pthread_mutex_unlock(&st->mu);
		if (rc == 0)
			rc = wb_prepare(st, r, target);
		if (rc < 0) {
			pthread_mutex_lock(&st->mu);
			group_fail(g, rc, "store: tensor %s chunk %" PRIu64 ": no room on %s: %s", tname(t, nb, sizeof nb),
				   r->chunk, target >= 0 ? st->tiers[target]->name : "any lower tier", hp_strerror(rc));
			pthread_mutex_unlock(&st->mu);
			continue;
		}
		r->stage = hs_crc32c(r->io.buf, hs_chunk_len(t, r->chunk)); /* the new crc */
	}
	pthread_mutex_lock(&st->mu);
	for (int j = 0; j < n; j++)
		if (reqs[j].tier != NO_TIER)
			group_add(&reqs[j]);
	pthread_mutex_unlock(&st->mu);
	submit_batches(st, reqs, n);
	pthread_mutex_lock(&st->mu);
	return 0;
}

/* The writes of g are done (lock held): chunks written become clean with
 * their new copy, failed ones stay dirty; all are resident again. */
static void wb_finish(struct hs_store *st, struct hs_prefetch *g)
{
	for (int j = 0; j < g->nwb; j++) {
		struct io_req *r = &g->reqs[j];
		struct hs_chunk *c = &r->t->ch[r->chunk];
		c->state = CH_RESIDENT;
		if (r->tier == NO_TIER)
			continue;
		if (r->io.res < 0) {
			hs_place_free(st->place, r->tier, r->io.addr, r->io.len);
			continue;
		}
		hs_chunk_release_copy(st, r->t, c);
		c->tier = r->tier;
		c->addr = r->io.addr;
		c->crc = (uint32_t)r->stage;
		c->dirty = 0;
		st->stats.tier[r->tier + 1].demotions++;
	}
	pthread_cond_broadcast(&st->cv);
}

/* Write the chunks of items[] (marked CH_WRITING by the caller, lock held)
 * to `target`; the lock is released during I/O.  Chunks written become
 * clean with their new copy; failed ones stay dirty. */
int hs_write_back(struct hs_store *st, struct wb_item *items, int n, int target)
{
	struct hs_prefetch g = { .st = st };
	int rc = wb_start(st, &g, items, n, target);

	if (rc < 0)
		return rc;
	group_wait(st, &g);
	wb_finish(st, &g);
	free(g.reqs);
	if (g.err)
		return hp_error(g.err, "%s", g.msg);
	return 0;
}

/* ---- making room ---- */

struct cand_set {
	struct hs_candidate *c;
	size_t n, cap;
};

static int collect(struct hs_store *st, struct cand_set *cs)
{
	cs->n = 0;
	for (struct hs_tensor *t = st->list; t; t = t->next) {
		for (uint64_t i = 0; i < t->nchunks; i++) {
			struct hs_chunk *c = &t->ch[i];
			if (c->state != CH_RESIDENT || c->pins)
				continue;
			if (c->dirty && (st->ntiers == 0 || (st->committing && t->name)))
				continue;
			if (cs->n == cs->cap) {
				size_t cap = cs->cap ? 2 * cs->cap : 256;
				void *p = realloc(cs->c, cap * sizeof *cs->c);
				if (!p)
					return -ENOMEM;
				cs->c = p;
				cs->cap = cap;
			}
			cs->c[cs->n++] = (struct hs_candidate){ .tensor = t, .chunk = i, .next_use = t->next_use,
				.last_use = c->last_use, .bytes = hs_chunk_iolen(t, i), .dirty = c->dirty };
		}
	}
	return 0;
}

/* `own`: bytes the failing request itself already counts as pinned. */
static int budget_error(struct hs_store *st, const char *what, const struct hs_tensor *t, uint64_t asked, uint64_t own)
{
	char nb[96], wb[160];

	if (t)
		snprintf(wb, sizeof wb, "%s of tensor %s", what, tname(t, nb, sizeof nb));
	else
		snprintf(wb, sizeof wb, "%s", what);
	return hp_error(HP_EBUDGET, "store: %s needs %" PRIu64 " more bytes of DRAM; %" PRIu64
			" are pinned and %" PRIu64 " resident (%" PRIu64 " staging) under a budget of %" PRIu64
			" (nothing else can be evicted%s)", wb, asked, st->pinned - own,
			st->resident, st->staging, st->o.budget, st->ntiers ? "" : "; no tier below DRAM to write to");
}

/* Wait (lock held) for some read-ahead to land: once read it is kept,
 * outside the budget.  Its file tier is polled, as group_wait does. */
static void ahead_wait(struct hs_store *st)
{
	struct hs_tier *ft = st->ra_tier;

	if (!ft || !ft->ops->poll) {
		pthread_cond_wait(&st->cv, &st->mu);
		return;
	}
	pthread_mutex_unlock(&st->mu);
	ft->ops->poll(ft, 1);
	pthread_mutex_lock(&st->mu);
}

/* Evict until `need` more bytes fit the budget (lock held; released while
 * dirty victims are written back).  Read-ahead in flight is waited for
 * first: it leaves the budget when it lands, and it was only read into
 * room the plan had left, so whatever it would push out is planned to
 * stay. */
static int make_room(struct hs_store *st, uint64_t need, const char *what, const struct hs_tensor *who, uint64_t own)
{
	struct cand_set cs = { 0 };
	struct wb_item *wb = NULL;
	int rc = 0;

	while (st->resident + need > st->o.budget) {
		uint64_t deficit = st->resident + need - st->o.budget, freed = 0;
		int nwb = 0;
		if (st->ra_loading) {
			ahead_wait(st);
			continue;
		}
		rc = collect(st, &cs);
		if (rc < 0)
			break;
		if (cs.n == 0) {
			rc = budget_error(st, what, who, need, own);
			break;
		}
		free(wb);
		wb = malloc(cs.n * sizeof *wb);
		if (!wb) {
			rc = -ENOMEM;
			break;
		}
		while (freed < deficit && cs.n) {
			long v = st->policy.victim(st->policy.arg, cs.c, cs.n);
			if (v < 0 || (size_t)v >= cs.n)
				break;
			struct hs_candidate *c = &cs.c[v];
			struct hs_tensor *t = (struct hs_tensor *)c->tensor;
			freed += c->bytes;
			if (c->dirty) {
				t->ch[c->chunk].state = CH_WRITING;
				wb[nwb++] = (struct wb_item){ t, c->chunk };
			} else {
				drop_chunk(st, t, c->chunk);
			}
			cs.c[v] = cs.c[--cs.n];
		}
		if (freed == 0) {
			rc = budget_error(st, what, who, need, own);
			break;
		}
		if (nwb) {
			rc = hs_write_back(st, wb, nwb, HS_TIER_ANY);
			for (int j = 0; j < nwb; j++) {
				struct hs_chunk *c = &wb[j].t->ch[wb[j].chunk];
				if (!c->dirty && c->state == CH_RESIDENT && !c->pins)
					drop_chunk(st, wb[j].t, wb[j].chunk);
			}
			if (rc < 0)
				break;
		}
	}
	free(cs.c);
	free(wb);
	return rc;
}

int hs_staging_reserve(struct hs_store *st, uint64_t bytes, const char *what)
{
	int rc = make_room(st, bytes, what, NULL, 0);

	if (rc < 0)
		return rc;
	st->resident += bytes;
	st->staging += bytes;
	return 0;
}

void hs_staging_release(struct hs_store *st, uint64_t bytes)
{
	st->resident -= bytes;
	st->staging -= bytes;
	pthread_cond_broadcast(&st->cv);
}

/* ---- pin / unpin ---- */

/* A loading chunk that attach gave its kept frames back (lock held): its
 * bytes are its copy's, resident without a read. */
static void take_kept(struct hs_store *st, struct hs_tensor *t, uint64_t i)
{
	struct hs_chunk *c = &t->ch[i];

	c->kept = 0;
	c->state = CH_RESIDENT;
	if (c->ahead) { /* read ahead from its file (no tier copy) */
		c->ahead = 0;
		st->ra.taken += hs_chunk_iolen(t, i);
	} else if (c->tier != NO_TIER) {
		st->bytes_kept[c->tier] += hs_chunk_iolen(t, i);
	}
}

/* Wait (lock held) until no chunk of the range is being moved. */
static void wait_idle(struct hs_store *st, struct hs_tensor *t, uint64_t first, uint64_t n, int count_late)
{
	for (;;) {
		int busy = 0;
		for (uint64_t i = first; i < first + n; i++) {
			struct hs_chunk *c = &t->ch[i];
			if (c->state == CH_LOADING || c->state == CH_WRITING) {
				if (count_late && c->prefetched) {
					st->stats.tier[0].prefetch_late++;
					if (c->tier != NO_TIER)
						st->stats.tier[c->tier + 1].prefetch_late++;
					c->prefetched = 0;
				}
				busy = 1;
			}
		}
		if (!busy)
			return;
		pthread_cond_wait(&st->cv, &st->mu);
	}
}

static void unpin_range(struct hs_store *st, struct hs_tensor *t, uint64_t first, uint64_t n, int undo_loading)
{
	for (uint64_t i = first; i < first + n; i++) {
		struct hs_chunk *c = &t->ch[i];
		if (undo_loading && c->state == CH_LOADING)
			c->state = CH_ABSENT;
		if (c->wpins > c->pins - 1)
			c->wpins = c->pins - 1;
		if (--c->pins == 0)
			st->pinned -= hs_chunk_iolen(t, i);
		c->last_use = ++st->tick;
	}
	pthread_cond_broadcast(&st->cv);
}

/* Claim the range for a pin: count pins, mark absent chunks loading, make
 * room, account them.  Returns the bytes claimed or an error (rolled back). */
static int pin_claim(struct hs_store *st, struct hs_tensor *t, uint64_t first, uint64_t n, enum hs_pin_mode mode,
		     uint64_t *stage)
{
	uint64_t need = 0, own = 0, sb = 0;
	int rc;

	for (uint64_t i = first; i < first + n; i++) {
		struct hs_chunk *c = &t->ch[i];
		if (c->pins++ == 0) {
			st->pinned += hs_chunk_iolen(t, i);
			own += hs_chunk_iolen(t, i);
		}
		if (c->state == CH_ABSENT) {
			c->state = CH_LOADING;
			need += hs_chunk_iolen(t, i);
			sb = stage_bytes(t, i) > sb ? stage_bytes(t, i) : sb;
			st->stats.tier[0].misses++;
		} else {
			st->stats.tier[0].hits++;
			if (c->prefetched) {
				st->stats.tier[0].prefetch_hits++;
				if (c->tier != NO_TIER)
					st->stats.tier[c->tier + 1].prefetch_hits++;
			}
		}
		c->prefetched = 0;
	}
	need += sb; /* unaligned file reads share one window (submit_loads) */
	rc = make_room(st, need, "pin", t, own);
	for (uint64_t i = first; rc == 0 && i < first + n; i++)
		if (t->ch[i].state == CH_LOADING)
			rc = hs_chunk_attach(st, t, i, HS_ATTACH_DEFER);
	if (rc == 0) /* all at once: a stretch of chunks is one mremap */
		rc = hs_chunks_map(st, t, first, n);
	for (uint64_t i = first; rc == 0 && i < first + n; i++) {
		struct hs_chunk *c = &t->ch[i];
		int fresh = c->tier == NO_TIER && !t->bpath; /* nothing to read: zeros */
		if (c->state == CH_LOADING && fresh && mode != HS_PIN_OVERWRITE)
			memset(hs_chunk_addr(st, t, i), 0, hs_chunk_iolen(t, i)); /* frames are reused */
	}
	if (rc < 0) {
		for (uint64_t i = first; i < first + n; i++)
			if (t->ch[i].state == CH_LOADING)
				hs_chunk_detach(st, t, i);
		unpin_range(st, t, first, n, 1);
		return rc;
	}
	st->resident += need;
	st->staging += sb;
	*stage = sb;
	return 0;
}

/* Map a resident chunk a prefetch left unmapped and check the crc32c it
 * deferred (lock held).  A mismatch drops the chunk: the next pin reads it
 * again (and fails again if the copy is bad). */
static int chunk_ready(struct hs_store *st, struct hs_tensor *t, uint64_t i)
{
	struct hs_chunk *c = &t->ch[i];
	char nb[96];
	uint32_t crc;
	int rc;

	if (c->state != CH_RESIDENT)
		return hp_error(HP_ECORRUPT, "store: tensor %s chunk %" PRIu64 " was dropped after a crc32c mismatch",
				tname(t, nb, sizeof nb), i);
	rc = hs_chunk_map(st, t, i);
	if (rc < 0 || !c->unverified)
		return rc;
	c->unverified = 0;
	crc = hs_crc32c(hs_chunk_addr(st, t, i), hs_chunk_len(t, i));
	if (crc == c->crc)
		return 0;
	st->stats.tier[c->tier + 1].crc_errors++;
	rc = hp_error(HP_ECORRUPT, "store: tensor %s chunk %" PRIu64 " on tier %s at offset %" PRIu64
		      ": crc32c mismatch (stored %08x, read %08x)", tname(t, nb, sizeof nb), i,
		      st->tiers[c->tier]->name, c->addr, c->crc, crc);
	hs_chunk_detach(st, t, i);
	c->state = CH_ABSENT;
	c->prefetched = 0;
	st->resident -= hs_chunk_iolen(t, i);
	return rc;
}

/* Requests a pin of this many chunks keeps on its stack: most pins are of
 * resident chunks of small tensors, 3 a kernel (the 3-D U-Net trained at a
 * quarter of its peak: ~1800 a step), and read nothing at all. */
#define PIN_LOCAL_REQS 4

int hs_pin(struct hs_tensor *t, uint64_t first, uint64_t n, enum hs_pin_mode mode, void **ptr)
{
	struct hs_store *st = t->st;
	struct hs_prefetch g = { .st = st };
	struct io_req local[PIN_LOCAL_REQS], *reqs = local; /* (req_init fills each one used) */
	int nreq = 0, rc;

	rc = norm_range(t, &first, &n, "pin");
	if (rc < 0)
		return rc;
	if (mode < HS_PIN_READ || mode > HS_PIN_OVERWRITE || (t->bpath && mode != HS_PIN_READ))
		return hp_error(HP_EUSAGE, "store: pin of tensor '%s': %s", t->name ? t->name : "?",
				t->bpath ? "a file-backed tensor is read-only" : "bad pin mode");
	if (n > PIN_LOCAL_REQS && !(reqs = malloc(n * sizeof *reqs)))
		return -ENOMEM;
	pthread_mutex_lock(&st->mu);
	while (st->committing && t->name && mode != HS_PIN_READ)
		pthread_cond_wait(&st->cv, &st->mu);
	wait_idle(st, t, first, n, 1);
	rc = pin_claim(st, t, first, n, mode, &g.stage);
	if (rc < 0)
		goto out;
	for (uint64_t i = first; i < first + n; i++) {
		struct hs_chunk *c = &t->ch[i];
		if (c->state != CH_LOADING)
			continue;
		if (mode == HS_PIN_OVERWRITE || (c->tier == NO_TIER && !t->bpath))
			c->state = CH_RESIDENT; /* nothing to read: zeros or overwritten */
		else if (c->kept)
			take_kept(st, t, i);
		else
			req_init(&reqs[nreq++], t, i, &g);
		c->kept = 0;
	}
	if (nreq || g.stage) { /* a pin of resident chunks keeps the lock: nothing to read or give back */
		pthread_mutex_unlock(&st->mu);
		submit_loads(st, &g, reqs, nreq);
		pthread_mutex_lock(&st->mu);
		group_wait(st, &g);
	}
	if (g.err) {
		unpin_range(st, t, first, n, 0);
		rc = hp_error(g.err, "%s", g.msg);
		goto out;
	}
	rc = hs_chunks_map(st, t, first, n); /* what prefetches left unmapped, a stretch at a time */
	for (uint64_t i = first; i < first + n && rc == 0; i++)
		rc = chunk_ready(st, t, i);
	if (rc == 0 && n > 1)
		rc = hs_chunks_unify(st, t, first, n);
	if (rc < 0) {
		unpin_range(st, t, first, n, 0);
		goto out;
	}
	for (uint64_t i = first; i < first + n; i++) {
		struct hs_chunk *c = &t->ch[i];
		c->last_use = ++st->tick;
		if (mode == HS_PIN_READ)
			continue;
		c->dirty = 1;
		c->wpins++;
		hs_chunk_release_copy(st, t, c);
	}
	*ptr = hs_chunk_addr(st, t, first);
out:
	pthread_mutex_unlock(&st->mu);
	if (reqs != local)
		free(reqs);
	hs_statpage_publish(st, 0);
	return rc;
}

int hs_unpin(struct hs_tensor *t, uint64_t first, uint64_t n)
{
	struct hs_store *st = t->st;
	int rc = norm_range(t, &first, &n, "unpin");

	if (rc < 0)
		return rc;
	pthread_mutex_lock(&st->mu);
	for (uint64_t i = first; i < first + n; i++) {
		if (t->ch[i].pins == 0) {
			pthread_mutex_unlock(&st->mu);
			return hp_error(HP_EUSAGE, "store: unpin of tensor '%s' chunk %" PRIu64 ": not pinned",
					t->name ? t->name : "(anonymous)", i);
		}
	}
	unpin_range(st, t, first, n, 0);
	pthread_mutex_unlock(&st->mu);
	hs_statpage_publish(st, 0);
	return 0;
}

/* ---- prefetch ---- */

/* Mark the absent chunks of a range loading and prepare their reads (lock held). */
static void prefetch_range(struct hs_store *st, struct hs_tensor *t, uint64_t first, uint64_t n,
			   struct hs_prefetch *g, int *nreq, uint64_t *need)
{
	for (uint64_t i = first; i < first + n; i++) {
		struct hs_chunk *c = &t->ch[i];
		if (c->state != CH_ABSENT || (c->tier == NO_TIER && !t->bpath))
			continue;
		c->state = CH_LOADING;
		c->prefetched = 1;
		c->last_use = ++st->tick;
		*need += hs_chunk_iolen(t, i);
		g->stage = stage_bytes(t, i) > g->stage ? stage_bytes(t, i) : g->stage;
		req_init(&g->reqs[(*nreq)++], t, i, g);
		if (c->tier != NO_TIER)
			st->stats.tier[c->tier + 1].prefetches++;
	}
}

/* Where a read's frames are reached now: at buf once mapped (a read
 * without a fixed buffer is mapped at attach), at home while a fixed
 * read's mapping waits (one piece: load_done checks its crc32c there);
 * NULL for several pieces not mapped. */
static void *read_vbuf(struct hs_store *st, const struct io_req *r)
{
	const struct hs_chunk *c = &r->t->ch[r->chunk];

	if (!c->npieces)
		return NULL;
	if (c->mapped || !r->io.mem_slot)
		return r->io.buf;
	return c->npieces == 1 ? hs_frames_home(st->frames, &c->one) : NULL;
}

/* Give the prepared reads frames, or undo them all (lock held).  Chunks
 * whose kept frames attach gave back are resident at once: their requests
 * leave the group (never submitted); *nreq is what is left to read. */
static int prefetch_attach(struct hs_store *st, struct hs_prefetch *g, int *nreq, uint64_t need)
{
	int rc = make_room(st, need, "prefetch", g->reqs[0].t, 0), k = 0;

	for (int j = 0; rc == 0 && j < *nreq; j++) {
		struct io_req *r = &g->reqs[j];
		rc = hs_chunk_attach(st, r->t, r->chunk, 0);
		hs_chunk_io_mem(st, &r->t->ch[r->chunk], &r->io);
		r->io.buf = hs_chunk_addr(st, r->t, r->chunk);
		r->io.vbuf = read_vbuf(st, r);
	}
	for (int j = 0; rc == 0 && j < *nreq; j++) {
		struct io_req *r = &g->reqs[j];
		if (!r->t->ch[r->chunk].kept) {
			if (k != j) {
				g->reqs[k] = *r;
				g->reqs[k].io.arg = &g->reqs[k];
			}
			k++;
			continue;
		}
		take_kept(st, r->t, r->chunk);
		if (r->tier != NO_TIER) /* out of the group: nothing to wait for */
			g->tpending[r->tier]--;
		g->pending--;
	}
	if (rc == 0) {
		*nreq = k;
		return 0;
	}
	for (int j = 0; j < *nreq; j++) {
		struct io_req *r = &g->reqs[j];
		struct hs_chunk *c = &r->t->ch[r->chunk];
		hs_chunk_detach(st, r->t, r->chunk);
		c->state = CH_ABSENT;
		c->prefetched = 0;
		if (c->tier != NO_TIER)
			st->stats.tier[c->tier + 1].prefetches--;
	}
	pthread_cond_broadcast(&st->cv);
	return rc;
}

int hs_prefetch_many(const struct hs_range *rs, size_t nr, struct hs_prefetch **h)
{
	struct hs_store *st;
	struct hs_prefetch *g;
	uint64_t need = 0, total = 0;
	int nreq = 0, rc;

	if (nr == 0 || !rs[0].tensor)
		return hp_error(HP_EUSAGE, "store: prefetch of no ranges");
	st = rs[0].tensor->st;
	for (size_t k = 0; k < nr; k++) {
		uint64_t first = rs[k].first, n = rs[k].n;
		if (rs[k].tensor->st != st)
			return hp_error(HP_EUSAGE, "store: prefetch of tensors of different stores");
		if ((rc = norm_range(rs[k].tensor, &first, &n, "prefetch")) < 0)
			return rc;
		total += n;
	}
	g = calloc(1, sizeof *g);
	if (!g || (total && !(g->reqs = calloc(total, sizeof *g->reqs)))) {
		free(g);
		return -ENOMEM;
	}
	g->st = st;
	pthread_mutex_lock(&st->mu);
	for (size_t k = 0; k < nr; k++) {
		uint64_t first = rs[k].first, n = rs[k].n;
		norm_range(rs[k].tensor, &first, &n, "prefetch");
		prefetch_range(st, rs[k].tensor, first, n, g, &nreq, &need);
	}
	need += g->stage; /* unaligned file reads share one window (submit_loads) */
	int nchunks = nreq; /* (those taken back from kept frames too) */
	rc = nreq ? prefetch_attach(st, g, &nreq, need) : 0;
	if (rc < 0) {
		pthread_mutex_unlock(&st->mu);
		free(g->reqs);
		free(g);
		return rc;
	}
	st->resident += need;
	st->staging += g->stage;
	st->stats.tier[0].prefetches += nchunks;
	pthread_mutex_unlock(&st->mu);
	submit_loads(st, g, g->reqs, nreq);
	*h = g;
	return 0;
}

/* Chunk i of file-backed t is read ahead into frames of its own, the
 * group's next request (lock held); -1 if it does not qualify or would
 * take more than `left` bytes (which the caller stops at), else its bytes. */
static int64_t ahead_chunk(struct hs_store *st, struct hs_tensor *t, uint64_t i, struct hs_prefetch *g, int *nreq,
			   uint64_t left)
{
	struct hs_chunk *c = &t->ch[i];
	uint64_t len = hs_chunk_iolen(t, i);

	if (c->state != CH_ABSENT || c->cached || c->pins || stage_bytes(t, i))
		return 0;
	if (len > left)
		return -1;
	c->state = CH_LOADING;
	if (hs_chunk_attach(st, t, i, HS_ATTACH_DEFER) < 0) {
		c->state = CH_ABSENT;
		return -1;
	}
	c->ahead = 1;
	c->last_use = ++st->tick;
	g->reqs[*nreq].t = t; /* its request once its range is mapped (ahead_map) */
	g->reqs[(*nreq)++].chunk = i;
	return (int64_t)len;
}

/* Map the chunks reqs[from..*nreq) of range [first, first + n) of t read
 * ahead, a stretch at a time (one mremap where chunk by chunk took one
 * each, on the compute lane that issues the read-ahead), and prepare
 * their requests; if that fails, give them up.  The bytes given up. */
static uint64_t ahead_map(struct hs_store *st, struct hs_tensor *t, uint64_t first, uint64_t n, struct hs_prefetch *g,
			  int from, int *nreq)
{
	uint64_t undone = 0;

	if (from == *nreq)
		return 0;
	if (hs_chunks_map(st, t, first, n) == 0) {
		for (int j = from; j < *nreq; j++)
			req_init(&g->reqs[j], t, g->reqs[j].chunk, g);
		return 0;
	}
	for (int j = from; j < *nreq; j++) {
		struct hs_chunk *c = &t->ch[g->reqs[j].chunk];
		c->ahead = 0;
		hs_chunk_detach(st, t, g->reqs[j].chunk);
		c->state = CH_ABSENT;
		undone += hs_chunk_iolen(t, g->reqs[j].chunk);
	}
	*nreq = from;
	pthread_cond_broadcast(&st->cv);
	return undone;
}

int hs_readahead(const struct hs_range *rs, size_t nr, uint64_t room, struct hs_prefetch **h)
{
	struct hs_store *st;
	struct hs_prefetch *g;
	uint64_t total = 0, need = 0, left;
	int nreq = 0, stop = 0, rc, out = 0;

	*h = NULL;
	if (nr == 0 || !rs[0].tensor)
		return hp_error(HP_EUSAGE, "store: read-ahead of no ranges");
	st = rs[0].tensor->st;
	for (size_t k = 0; k < nr; k++) {
		uint64_t first = rs[k].first, n = rs[k].n;
		if (rs[k].tensor->st != st || !rs[k].tensor->bpath)
			return hp_error(HP_EUSAGE, "store: read-ahead of a tensor %s",
					rs[k].tensor->st != st ? "of another store" : "not backed by a file");
		if ((rc = norm_range(rs[k].tensor, &first, &n, "read-ahead")) < 0)
			return rc;
		total += n;
	}
	g = calloc(1, sizeof *g);
	if (!g || !(g->reqs = calloc(total ? total : 1, sizeof *g->reqs))) {
		free(g);
		return -ENOMEM;
	}
	g->st = st;
	pthread_mutex_lock(&st->mu);
	left = st->o.budget > st->resident ? st->o.budget - st->resident : 0;
	left = left < room ? left : room;
	for (size_t k = 0; k < nr && !stop; k++) {
		uint64_t first = rs[k].first, n = rs[k].n;
		int from = nreq;
		norm_range(rs[k].tensor, &first, &n, "read-ahead");
		for (uint64_t i = first; i < first + n; i++) {
			int64_t b = stop ? -1 : ahead_chunk(st, rs[k].tensor, i, g, &nreq, left - need);
			stop = b < 0;
			out += b < 0 && rs[k].tensor->ch[i].state == CH_ABSENT && !rs[k].tensor->ch[i].cached;
			need += b > 0 ? (uint64_t)b : 0;
		}
		int mapped = nreq;
		need -= ahead_map(st, rs[k].tensor, first, n, g, from, &nreq);
		out += mapped - nreq; /* (given up: their mapping failed) */
	}
	st->resident += need;
	st->ra_loading += need;
	st->ra.bytes += need;
	if (nreq)
		st->ra_tier = g->reqs[nreq - 1].t->bfile->tier;
	pthread_mutex_unlock(&st->mu);
	if (!nreq) {
		free(g->reqs);
		free(g);
		return out;
	}
	submit_loads(st, g, g->reqs, nreq);
	*h = g;
	return out;
}

int hs_prefetch(struct hs_tensor *t, uint64_t first, uint64_t n, struct hs_prefetch **h)
{
	struct hs_range r = { t, first, n };

	return hs_prefetch_many(&r, 1, h);
}

int hs_prefetch_poll(struct hs_prefetch *h)
{
	int done;

	pthread_mutex_lock(&h->st->mu);
	done = h->pending == 0;
	for (int k = 0; k < h->st->ntiers && !done; k++) {
		struct hs_tier *t = h->st->tiers[k];
		if (!h->tpending[k] || !t->ops->poll)
			continue;
		pthread_mutex_unlock(&h->st->mu);
		t->ops->poll(t, 0);
		pthread_mutex_lock(&h->st->mu);
		done = h->pending == 0;
	}
	pthread_mutex_unlock(&h->st->mu);
	return done;
}

int hs_prefetch_wait(struct hs_prefetch *h)
{
	struct hs_store *st;
	int rc;

	if (!h)
		return 0;
	st = h->st;
	pthread_mutex_lock(&st->mu);
	group_wait(st, h);
	if (h->nwb) { /* a write-back (hs_evict_start) is finished by its wait */
		wb_finish(st, h);
		if (h->evict)
			evict_written(st, h);
	}
	pthread_mutex_unlock(&st->mu);
	rc = h->err ? hp_error(h->err, "%s", h->msg) : 0;
	free(h->reqs);
	free(h);
	hs_statpage_publish(st, 0);
	return rc;
}

/* ---- evict, hints ---- */

/* Mark the evictable chunks of one range (lock held): dirty ones (or
 * clean ones moving to another tier) into wb[] for writing, clean ones
 * dropped at once.  Returns the chunks dropped. */
static int evict_range(struct hs_store *st, struct hs_tensor *t, uint64_t first, uint64_t n, int tier,
		       struct wb_item *wb, int *nwb)
{
	int count = 0;

	for (uint64_t i = first; i < first + n; i++) {
		struct hs_chunk *c = &t->ch[i];
		if (c->state != CH_RESIDENT || c->pins)
			continue;
		int move = !c->dirty && tier >= 0 && c->tier != NO_TIER && c->tier != tier;
		if ((c->dirty && tier != HS_TIER_NONE && st->ntiers) || move) {
			c->state = CH_WRITING;
			wb[(*nwb)++] = (struct wb_item){ t, i };
		} else if (!c->dirty) {
			drop_chunk(st, t, i);
			count++;
		}
	}
	return count;
}

/* The written chunks of g still clean, resident and unpinned leave DRAM
 * (lock held); returns how many. */
static int evict_written(struct hs_store *st, const struct hs_prefetch *g)
{
	int count = 0;

	for (int j = 0; j < g->nwb; j++) {
		struct hs_chunk *c = &g->reqs[j].t->ch[g->reqs[j].chunk];
		if (!c->dirty && c->state == CH_RESIDENT && !c->pins) {
			drop_chunk(st, g->reqs[j].t, g->reqs[j].chunk);
			count++;
		}
	}
	return count;
}

/* Check the ranges and collect the chunks to write (lock taken and held
 * on success): *wb (malloc'ed), *nwb, and the clean ones dropped now. */
static int evict_collect(const struct hs_range *rs, size_t nr, int tier, struct wb_item **wbp, int *nwb, int *count)
{
	struct hs_store *st;
	struct wb_item *wb = NULL;
	uint64_t total = 0;
	int rc;

	if (nr == 0 || !rs[0].tensor)
		return hp_error(HP_EUSAGE, "store: eviction of no ranges");
	st = rs[0].tensor->st;
	for (size_t k = 0; k < nr; k++) {
		uint64_t first = rs[k].first, n = rs[k].n;
		if (rs[k].tensor->st != st)
			return hp_error(HP_EUSAGE, "store: eviction of tensors of different stores");
		if ((rc = norm_range(rs[k].tensor, &first, &n, "evict")) < 0)
			return rc;
		total += n;
	}
	if (tier < HS_TIER_NONE || tier >= st->ntiers)
		return hp_error(HP_EUSAGE, "store: evict to tier %d: the store has %d tiers below DRAM", tier, st->ntiers);
	if (total && !(wb = malloc(total * sizeof *wb)))
		return -ENOMEM;
	pthread_mutex_lock(&st->mu);
	for (size_t k = 0; k < nr; k++)
		while (st->committing && rs[k].tensor->name)
			pthread_cond_wait(&st->cv, &st->mu);
	*nwb = *count = 0;
	for (size_t k = 0; k < nr; k++) {
		uint64_t first = rs[k].first, n = rs[k].n;
		norm_range(rs[k].tensor, &first, &n, "evict");
		*count += evict_range(st, rs[k].tensor, first, n, tier, wb, nwb);
	}
	*wbp = wb;
	return 0;
}

int hs_evict_many(const struct hs_range *rs, size_t nr, int tier)
{
	struct hs_store *st = nr && rs[0].tensor ? rs[0].tensor->st : NULL;
	struct hs_prefetch g = { .st = st };
	struct wb_item *wb = NULL;
	int nwb = 0, count = 0, rc = evict_collect(rs, nr, tier, &wb, &nwb, &count);

	if (rc < 0)
		return rc;
	if (nwb && (rc = wb_start(st, &g, wb, nwb, tier)) == 0) {
		/* one write-back: one submission per tier for all of them */
		group_wait(st, &g);
		wb_finish(st, &g);
		count += evict_written(st, &g);
		rc = g.err ? hp_error(g.err, "%s", g.msg) : 0;
	} else if (nwb) { /* nothing was submitted: the chunks stay dirty and resident */
		for (int j = 0; j < nwb; j++)
			wb[j].t->ch[wb[j].chunk].state = CH_RESIDENT;
		pthread_cond_broadcast(&st->cv);
	}
	pthread_mutex_unlock(&st->mu);
	free(g.reqs);
	free(wb);
	hs_statpage_publish(st, 0);
	return rc < 0 ? rc : count;
}

int hs_evict_start(const struct hs_range *rs, size_t nr, int tier, struct hs_prefetch **h)
{
	struct hs_store *st = nr && rs[0].tensor ? rs[0].tensor->st : NULL;
	struct hs_prefetch *g = NULL;
	struct wb_item *wb = NULL;
	int nwb = 0, count = 0, rc;

	*h = NULL;
	rc = evict_collect(rs, nr, tier, &wb, &nwb, &count);
	if (rc < 0)
		return rc;
	if (nwb && !(g = calloc(1, sizeof *g)))
		rc = -ENOMEM;
	if (g) {
		g->st = st;
		g->evict = 1;
		rc = wb_start(st, g, wb, nwb, tier);
	}
	if (rc < 0) { /* nothing was submitted: the chunks stay dirty and resident */
		for (int j = 0; j < nwb; j++)
			wb[j].t->ch[wb[j].chunk].state = CH_RESIDENT;
		pthread_cond_broadcast(&st->cv);
		free(g);
		g = NULL;
	}
	pthread_mutex_unlock(&st->mu);
	free(wb);
	*h = g;
	return rc < 0 ? rc : count;
}

int hs_evict(struct hs_tensor *t, uint64_t first, uint64_t n, int tier)
{
	struct hs_range r = { t, first, n };

	return hs_evict_many(&r, 1, tier);
}

int hs_tensor_discard(struct hs_tensor *t, uint64_t first, uint64_t n)
{
	struct hs_store *st = t->st;
	char nb[96];
	int rc = norm_range(t, &first, &n, "discard");

	if (rc < 0)
		return rc;
	if (t->bpath)
		return hp_error(HP_EUSAGE, "store: discard of tensor %s: a file-backed tensor is read-only",
				tname(t, nb, sizeof nb));
	pthread_mutex_lock(&st->mu);
	while (st->committing && t->name)
		pthread_cond_wait(&st->cv, &st->mu);
	wait_idle(st, t, first, n, 0);
	for (uint64_t i = first; i < first + n; i++)
		if (t->ch[i].pins) {
			pthread_mutex_unlock(&st->mu);
			return hp_error(-EBUSY, "store: discard of tensor %s: chunk %" PRIu64 " is pinned",
					tname(t, nb, sizeof nb), i);
		}
	for (uint64_t i = first; i < first + n; i++) {
		struct hs_chunk *c = &t->ch[i];
		if (c->state == CH_RESIDENT)
			st->resident -= hs_chunk_iolen(t, i);
		c->state = CH_ABSENT;
		c->dirty = 0;
		c->prefetched = 0;
		c->unverified = 0;
		c->last_use = ++st->tick;
		hs_chunk_release_copy(st, t, c);
		if (c->npieces && !c->cached) {
			c->cached = 1;
			st->cached += hs_chunk_iolen(t, i);
		}
	}
	pthread_cond_broadcast(&st->cv);
	pthread_mutex_unlock(&st->mu);
	hs_statpage_publish(st, 0);
	return 0;
}

int hs_hint(struct hs_tensor *t, int64_t next_use)
{
	pthread_mutex_lock(&t->st->mu);
	t->next_use = next_use;
	pthread_mutex_unlock(&t->st->mu);
	return 0;
}
