/* Store lifecycle, tensors, statistics. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "hpdlf/error.h"
#include "store/place.h"
#include "store/store_internal.h"

uint64_t hs_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + ts.tv_nsec;
}

uint64_t hs_chunk_len(const struct hs_tensor *t, uint64_t i)
{
	uint64_t cs = t->st->cs, off = i * cs;

	return t->bytes - off < cs ? t->bytes - off : cs;
}

uint64_t hs_chunk_iolen(const struct hs_tensor *t, uint64_t i)
{
	return (hs_chunk_len(t, i) + HS_IO_ALIGN - 1) & ~(uint64_t)(HS_IO_ALIGN - 1);
}

uint64_t hs_chunk_size(const struct hs_store *st)
{
	return st->cs;
}

uint64_t hs_tensor_nchunks(const struct hs_tensor *t)
{
	return t->nchunks;
}

/* Account one completed tier request (lock held). */
void hs_stat_io(struct hs_store *st, int tier, const struct hs_io *io)
{
	struct hs_tier_stats *s = &st->stats.tier[tier + 1];
	uint64_t us = (hs_now_ns() - io->t_submit_ns) / 1000;
	int b = 0;

	while (us >= 2 && b < HS_LAT_BUCKETS - 1) {
		us >>= 1;
		b++;
	}
	s->lat_hist[b]++;
	if (io->res < 0)
		return;
	if (io->op == HS_IO_READ) {
		s->reads++;
		s->bytes_read += io->len;
	} else {
		s->writes++;
		s->bytes_written += io->len;
	}
}

double hs_lat_percentile(const struct hs_tier_stats *s, double q)
{
	uint64_t total = 0, acc = 0;

	for (int i = 0; i < HS_LAT_BUCKETS; i++)
		total += s->lat_hist[i];
	if (total == 0)
		return 0;
	for (int i = 0; i < HS_LAT_BUCKETS; i++) {
		acc += s->lat_hist[i];
		if ((double)acc >= q * (double)total)
			return (double)(2ull << i); /* upper edge of the bucket */
	}
	return (double)(1ull << HS_LAT_BUCKETS);
}

/* The chunk is read from a tier that registered its (single-piece) frames. */
static int fixed_read(const struct hs_store *st, const struct hs_tensor *t, const struct hs_chunk *c)
{
	uint64_t off;
	uint32_t slot;

	if (c->tier == NO_TIER || t->bpath)
		return 0;
	slot = hs_frames_slot(st->frames, &c->one, c->npieces, &off);
	return slot && (st->regmask[slot - 1] >> c->tier & 1);
}

unsigned char *hs_chunk_addr(const struct hs_store *st, const struct hs_tensor *t, uint64_t i)
{
	const struct hs_chunk *c = &t->ch[i];

	return c->home ? hs_frames_home(st->frames, &c->one) : t->base + i * st->cs;
}

static void reclaim(struct hs_store *st, uint64_t len, int ahead);

/* Some chunk of t holds frames (resident, loading or kept since a discard). */
static int framed(const struct hs_tensor *t)
{
	for (uint64_t i = 0; i < t->nchunks; i++)
		if (t->ch[i].npieces)
			return 1;
	return 0;
}

/* Every chunk of t holding frames holds them since a discard: its bytes
 * are gone, and nobody can hold their address.  Read-ahead that landed is
 * cached too, but holds the next batch's bytes for the pin that comes for
 * them: the first chunk of a data set the trainer's prefetch or gather
 * attached threw it all away here (LeNet shuffled at 531016 B under load:
 * a steady step took none of it, 9 runs of 60). */
static int only_cached(const struct hs_tensor *t)
{
	for (uint64_t i = 0; i < t->nchunks; i++)
		if (t->ch[i].npieces && (!t->ch[i].cached || t->ch[i].ahead))
			return 0;
	return 1;
}

/* Frames for chunk i in one piece where it is used in place, no mremap
 * ever: the one chunk of a tensor anywhere it fits whole, chunk i of
 * several at its place in the tensor's run, the pages where the whole
 * tensor lay free in a row when its first chunk came (frames.h).  A
 * chunk whose place is taken by then is mapped into the tensor's range
 * as before; hs_pin makes a range of both kinds contiguous (unify).
 * -1 if it cannot, nothing taken. */
static int run_take(struct hs_store *st, struct hs_tensor *t, uint64_t i, uint64_t len)
{
	struct hs_chunk *c = &t->ch[i];
	uint64_t np = len / HS_PAGE, page;

	if (!hs_frames_runs(st->frames) || t->maplen > hs_frames_grown(st->frames))
		return -1; /* (a tensor larger than the pool never lies in it whole: no scans of its chunks) */
	if (t->nchunks > 1 && framed(t) && only_cached(t)) {
		for (uint64_t k = 0; k < t->nchunks; k++) /* frames of discarded chunks: nothing to keep */
			hs_chunk_detach_stretch(st, t, k);
	}
	if (t->nchunks == 1 || !t->run) {
		if (t->nchunks > 1 && framed(t))
			return -1; /* its other chunks lie in its range: stay there */
		uint64_t want = t->nchunks == 1 ? np : t->maplen / HS_PAGE;
		/* discarded frames first: freeing a chunk in place costs
		 * nothing; read-ahead is not given up for a run, only for room
		 * the chunk itself needs (hs_chunk_attach) */
		reclaim(st, want * HS_PAGE, 0);
		if (hs_frames_find_run(st->frames, want, &page) < 0 &&
		    (hs_frames_compact_for(st, want) < 0 || hs_frames_find_run(st->frames, want, &page) < 0))
			return -1;
		if (t->nchunks > 1)
			t->run = page + 1;
		else if (hs_frames_take(st->frames, page, np) == 0)
			goto took;
		else
			return -1;
	}
	page = t->run - 1 + i * (st->cs / HS_PAGE);
	if (hs_frames_take(st->frames, page, np) < 0 &&
	    (hs_frames_clear(st, page, np) < 0 || hs_frames_take(st->frames, page, np) < 0))
		return -1;
took:
	c->one = (struct hs_piece){ (uint32_t)page, (uint32_t)np };
	c->many = NULL;
	c->npieces = 1;
	return 0;
}

/* Frames for chunk i of a tensor of several that found no run: the pages
 * right after chunk i - 1's, else the start (chunk-aligned, as the buddy
 * allocator would place it) of the shortest free stretch that holds the
 * rest of the tensor, or failing that of the longest, so that the chunks
 * of a pin lie back to back where they can and move
 * into the tensor's range, and home again, one mremap per stretch
 * (hs_chunks_map, hs_chunk_detach_stretch) instead of one per chunk (a
 * 26-page workspace of LeNet at 25% took 7 each way, several times a
 * step).  -1 if neither is free, nothing taken. */
static int next_take(struct hs_store *st, struct hs_tensor *t, uint64_t i, uint64_t len)
{
	const struct hs_chunk *prev = i ? &t->ch[i - 1] : NULL;
	uint64_t np = len / HS_PAGE, page = 0, cp = st->cs / HS_PAGE, rest = t->maplen / HS_PAGE - i * cp;
	int ok = 0;

	if (t->nchunks == 1 || t->run || !hs_frames_runs(st->frames))
		return -1;
	if (prev && prev->npieces == 1 && !prev->home && prev->one.n == st->cs / HS_PAGE)
		ok = hs_frames_take(st->frames, prev->one.page + prev->one.n, np) == 0;
	if (ok)
		page = prev->one.page + prev->one.n;
	else if (hs_frames_stretch(st->frames, rest, cp, &page) < np || hs_frames_take(st->frames, page, np) < 0)
		return -1;
	t->ch[i].one = (struct hs_piece){ (uint32_t)page, (uint32_t)np };
	t->ch[i].many = NULL;
	t->ch[i].npieces = 1;
	return 0;
}

int hs_chunk_map(struct hs_store *st, struct hs_tensor *t, uint64_t i)
{
	struct hs_chunk *c = &t->ch[i];
	int rc;

	if (c->mapped || !c->npieces)
		return 0;
	/* used where it lies: the one chunk, or one of a tensor in a run even
	 * if a compaction moved it out of its place (unify puts it back) */
	if (c->npieces == 1 && (t->nchunks == 1 || t->run)) {
		c->mapped = c->home = 1;
		return 0;
	}
	hs_frames_unqueue(st->frames, &c->zq); /* mapped again right here */
	rc = hs_frames_map(st->frames, t->base + i * st->cs, c->npieces > 1 ? c->many : &c->one, c->npieces);
	c->mapped = rc == 0;
	return rc;
}

struct cached_ref {
	struct hs_tensor *t;
	uint64_t i, last_use;
	int kept;               /* 1 kept, 2 read ahead (hs_readahead) */
};

/* Discarded chunks' frames first (their bytes are dead), then kept ones
 * (a load may still take them back), then read-ahead (read into room the
 * plan leaves to the run's end, for a gather that waits on it between the
 * runs, where a kept chunk's load is a planned one, overlapped), least
 * recently used first. */
static int cmp_last_use(const void *a, const void *b)
{
	const struct cached_ref *x = a, *y = b;

	if (x->kept != y->kept)
		return x->kept - y->kept;
	return (x->last_use > y->last_use) - (x->last_use < y->last_use);
}

/* Free the frames of discarded chunks, least recently used first, until
 * `len` bytes of frames are available (lock held); read-ahead's too (last)
 * if `ahead`. */
static int reclaimable(const struct hs_chunk *c, int ahead)
{
	return c->cached && c->state == CH_ABSENT && (ahead || !c->ahead);
}

static void reclaim(struct hs_store *st, uint64_t len, int ahead)
{
	struct cached_ref *v;
	size_t n = 0, cap = 0;

	if (hs_frames_avail_bytes(st->frames) >= len || !st->cached)
		return;
	for (struct hs_tensor *t = st->list; t; t = t->next)
		for (uint64_t i = 0; i < t->nchunks; i++)
			cap += reclaimable(&t->ch[i], ahead);
	v = malloc((cap ? cap : 1) * sizeof *v);
	for (struct hs_tensor *t = st->list; v && t; t = t->next)
		for (uint64_t i = 0; i < t->nchunks; i++)
			if (reclaimable(&t->ch[i], ahead))
				v[n++] = (struct cached_ref){ t, i, t->ch[i].last_use, t->ch[i].kept + t->ch[i].ahead };
	if (!v) { /* no memory to sort: any order */
		for (struct hs_tensor *t = st->list; t && hs_frames_avail_bytes(st->frames) < len; t = t->next)
			for (uint64_t i = 0; i < t->nchunks; i++)
				if (reclaimable(&t->ch[i], ahead))
					hs_chunk_detach(st, t, i);
		return;
	}
	qsort(v, n, sizeof *v, cmp_last_use);
	for (size_t k = 0; k < n && hs_frames_avail_bytes(st->frames) < len; k++)
		hs_chunk_detach_stretch(st, v[k].t, v[k].i);
	free(v);
}

/* Take over the frames of the least recently discarded chunk of the same
 * length, moved straight from its range into chunk i's (one mremap where
 * freeing and allocating would take two); read-ahead is left to reclaim,
 * which takes it last.  0 if there is none. */
static int steal(struct hs_store *st, struct hs_tensor *t, uint64_t i, uint64_t len)
{
	struct hs_tensor *vt = NULL;
	struct hs_chunk *c = &t->ch[i], *v = NULL;
	uint64_t vi = 0;

	if (!st->cached || t->nchunks == 1)
		return 0; /* no discarded frames: skip the scan; one chunk takes frames where they lie */
	for (struct hs_tensor *u = st->list; u; u = u->next)
		for (uint64_t k = 0; k < u->nchunks; k++) {
			struct hs_chunk *x = &u->ch[k];
			if (x->cached && x->state == CH_ABSENT && x->mapped && !x->home && !x->ahead &&
			    hs_chunk_iolen(u, k) == len && (!v || x->last_use < v->last_use)) {
				v = x;
				vt = u;
				vi = k;
			}
		}
	if (!v)
		return 0;
	hs_frames_unqueue(st->frames, &c->zq);
	if (hs_frames_move(st->frames, vt->base + vi * st->cs, t->base + i * st->cs, len, &v->zq) < 0)
		return 0;
	c->one = v->one;
	c->many = v->many;
	c->npieces = v->npieces;
	c->mapped = 1;
	v->many = NULL;
	v->npieces = 0;
	v->mapped = 0;
	v->cached = 0;
	v->kept = 0;
	st->cached -= len;
	hs_ahead_lost(st, v, len);
	return 1;
}

int hs_chunk_attach(struct hs_store *st, struct hs_tensor *t, uint64_t i, int flags)
{
	struct hs_chunk *c = &t->ch[i];
	uint64_t len = hs_chunk_iolen(t, i);
	int rc = 0;

	if (c->cached) { /* its own frames, kept since a discard */
		c->cached = 0;
		st->cached -= len;
	} else if (!c->npieces) {
		if ((rc = hs_fault_check(HS_FAULT_ALLOC)) != 0)
			return hp_error(rc, "store: cannot allocate %" PRIu64 " bytes of DRAM frames", len);
		c->mapped = 0;
		if (run_take(st, t, i, len) < 0 && (hs_frames_avail_bytes(st->frames) >= len || !steal(st, t, i, len))) {
			uint64_t avail = hs_frames_avail_bytes(st->frames);
			reclaim(st, len, 1);
			/* run_take looked at these very frames (and compacted them)
			 * unless reclaim freed some: looking again, a compaction's
			 * scans each time, found nothing 95-97% of the time (the 3-D
			 * U-Net trained at 25%: 60-140 looks a step; the few it
			 * found save a mapping) */
			if ((hs_frames_avail_bytes(st->frames) == avail || run_take(st, t, i, len) < 0) &&
			    next_take(st, t, i, len) < 0 &&
			    (rc = hs_frames_alloc(st->frames, len / HS_PAGE, &c->one, &c->many, &c->npieces)) < 0)
				return rc;
		}
	} else {
		return 0;
	}
	c->unverified = 0;
	if (flags & HS_ATTACH_DEFER)
		return 0;
	if (flags || !fixed_read(st, t, c))
		rc = hs_chunk_map(st, t, i);
	if (rc < 0) {
		hs_frames_free(st->frames, &c->one, c->many, c->npieces);
		c->npieces = 0;
		c->many = NULL;
		return rc;
	}
	if (flags & HS_ATTACH_ZERO)
		memset(hs_chunk_addr(st, t, i), 0, len); /* frames are reused: no fresh zero pages */
	return 0;
}

void hs_ahead_lost(struct hs_store *st, struct hs_chunk *c, uint64_t len)
{
	if (!c->ahead)
		return;
	c->ahead = 0;
	st->ra.lost += len;
}

/* The chunk holds no frames any more (they went home, freed, or stranded). */
static void forget_frames(struct hs_tensor *t, uint64_t i)
{
	struct hs_chunk *c = &t->ch[i];

	hs_ahead_lost(t->st, c, hs_chunk_iolen(t, i));
	c->npieces = 0;
	c->many = NULL;
	c->unverified = 0;
	c->kept = 0;
	c->mapped = 0;
	c->home = 0;
	if (t->run && !framed(t))
		t->run = 0; /* the next first chunk looks for a run afresh */
}

void hs_chunk_detach(struct hs_store *st, struct hs_tensor *t, uint64_t i)
{
	struct hs_chunk *c = &t->ch[i];

	if (c->cached) {
		c->cached = 0;
		st->cached -= hs_chunk_iolen(t, i);
	}
	if (!c->npieces)
		return;
	if (c->mapped && !c->home && hs_frames_unmap(st->frames, t->base + i * st->cs, c->npieces > 1 ? c->many : &c->one,
					 c->npieces, &c->zq) < 0)
		free(c->many); /* stranded: the frames are lost to the pool, never handed out twice */
	else
		hs_frames_free(st->frames, &c->one, c->many, c->npieces);
	forget_frames(t, i);
}

/* Chunk j continues the stretch ending with chunk j - 1: mapped into the
 * range in one piece (ok() says which chunks qualify), on the pages right
 * after the previous one's, which is a whole chunk (so the range is
 * contiguous too). */
static int continues(const struct hs_store *st, const struct hs_tensor *t, uint64_t j)
{
	const struct hs_chunk *a = &t->ch[j - 1], *b = &t->ch[j];

	return a->one.n == st->cs / HS_PAGE && b->one.page == a->one.page + a->one.n;
}

/* (Read-ahead goes one chunk at a time: reclaim wants the frames of
 * one, and its neighbours are a gather's to take.) */
static int droppable(const struct hs_chunk *c)
{
	return c->cached && c->state == CH_ABSENT && c->npieces == 1 && c->mapped && !c->home && !c->pins && !c->ahead;
}

void hs_chunk_detach_stretch(struct hs_store *st, struct hs_tensor *t, uint64_t i)
{
	uint64_t a = i, b = i + 1, pages = 0;

	if (t->nchunks == 1 || !droppable(&t->ch[i])) {
		hs_chunk_detach(st, t, i);
		return;
	}
	while (a > 0 && droppable(&t->ch[a - 1]) && continues(st, t, a))
		a--;
	while (b < t->nchunks && droppable(&t->ch[b]) && continues(st, t, b))
		b++;
	for (uint64_t k = a; k < b; k++)
		pages += t->ch[k].one.n;
	if (b - a < 2 || hs_frames_home_span(st->frames, t->base + a * st->cs, t->ch[a].one.page, pages) < 0) {
		for (uint64_t k = a; k < b; k++) /* one by one (what failed as a whole) */
			hs_chunk_detach(st, t, k);
		return;
	}
	for (uint64_t k = a; k < b; k++) {
		struct hs_chunk *c = &t->ch[k];
		c->cached = 0;
		st->cached -= hs_chunk_iolen(t, k);
		hs_frames_queue(st->frames, t->base + k * st->cs, (uint64_t)c->one.n * HS_PAGE, &c->zq);
		hs_frames_free(st->frames, &c->one, NULL, 1);
		forget_frames(t, k);
	}
}

/* Chunk i would be mapped into the range (not used where it lies), one piece. */
static int mappable(const struct hs_tensor *t, uint64_t i)
{
	const struct hs_chunk *c = &t->ch[i];

	return c->npieces == 1 && !c->mapped && t->nchunks > 1 && !t->run;
}

int hs_chunks_map(struct hs_store *st, struct hs_tensor *t, uint64_t first, uint64_t n)
{
	int rc = 0;

	for (uint64_t i = first, j; i < first + n && rc == 0; i = j) {
		uint64_t pages = t->ch[i].one.n;
		for (j = i + 1; mappable(t, i) && j < first + n && mappable(t, j) && continues(st, t, j); j++)
			pages += t->ch[j].one.n;
		if (j - i < 2) {
			rc = t->ch[i].npieces ? hs_chunk_map(st, t, i) : 0;
			continue;
		}
		struct hs_piece span = { t->ch[i].one.page, (uint32_t)pages };
		for (uint64_t k = i; k < j; k++)
			hs_frames_unqueue(st->frames, &t->ch[k].zq); /* mapped again right here */
		rc = hs_frames_map(st->frames, t->base + i * st->cs, &span, 1);
		for (uint64_t k = i; k < j && rc == 0; k++)
			t->ch[k].mapped = 1;
	}
	return rc;
}

int hs_chunks_unify(struct hs_store *st, struct hs_tensor *t, uint64_t first, uint64_t n)
{
	uint64_t nhome = 0, inrow = 1, cp = st->cs / HS_PAGE;
	int rc = 0;

	for (uint64_t i = first; i < first + n; i++) {
		nhome += t->ch[i].home;
		if (i > first && t->ch[i].one.page != t->ch[first].one.page + (i - first) * cp)
			inrow = 0; /* home chunks moved apart by compaction */
	}
	if (nhome == 0 || (nhome == n && inrow) || t->nchunks == 1)
		return 0;
	for (uint64_t i = first; i < first + n; i++)
		if (t->ch[i].home && t->ch[i].pins > 1)
			return hp_error(-EBUSY, "store: pin of %" PRIu64 " chunks of a tensor: chunk %" PRIu64
					" is pinned where it lies in the frame pool while others of the range lie in the "
					"tensor's range (pin the whole range at once)", n, i);
	if (nhome == n && first == 0 && n == t->nchunks && (rc = hs_run_relocate(st, t)) <= 0)
		return rc; /* a run again (or its range), by memcpy */
	rc = 0; /* (1 from hs_run_relocate: no run; the chunks are mapped instead) */
	t->run = 0; /* from now on its chunks come into its range */
	for (uint64_t i = first; i < first + n && rc == 0; i++) {
		struct hs_chunk *c = &t->ch[i];
		if (!c->home)
			continue;
		hs_frames_unqueue(st->frames, &c->zq);
		rc = hs_frames_map(st->frames, t->base + i * st->cs, &c->one, 1);
		if (rc == 0)
			c->home = 0;
	}
	return rc;
}

void hs_chunk_io_mem(struct hs_store *st, const struct hs_chunk *c, struct hs_io *io)
{
	io->mem_slot = hs_frames_slot(st->frames, &c->one, c->npieces, &io->mem_off);
}

/* A new slab of frames: offer it to the tiers that register memory. */
static void frames_grown(void *arg, unsigned slot, void *addr, size_t len)
{
	struct hs_store *st = arg;

	for (int k = 0; k < st->ntiers; k++) {
		struct hs_tier *t = st->tiers[k];
		int rc = t->ops->register_mem ? t->ops->register_mem(t, slot, addr, len) : -ENOTSUP;
		if (rc == 0)
			st->regmask[slot] |= (uint8_t)(1u << k);
		else if (rc != -ENOTSUP && !st->reg_logged) {
			st->reg_logged = 1;
			hp_log(HP_LOG_INFO, "store: %s: DRAM frames not registered as fixed buffers (%s); "
			       "I/O maps the pages per request", t->name, strerror(-rc));
		}
	}
}

/* Forget the current copy below DRAM (the chunk was modified or moved).
 * The committed copy stays allocated until the next commit replaces it. */
void hs_chunk_release_copy(struct hs_store *st, struct hs_tensor *t, struct hs_chunk *c)
{
	uint64_t i = (uint64_t)(c - t->ch);

	c->kept = 0; /* no copy its frames could stand for */
	if (c->tier == NO_TIER)
		return;
	if (!(c->tier == c->ctier && c->addr == c->caddr))
		hs_place_free(st->place, c->tier, c->addr, hs_chunk_iolen(t, i));
	c->tier = NO_TIER;
}

void hs_store_opts_init(struct hs_store_opts *o, size_t size)
{
	struct hs_store_opts d = {
		.size = sizeof d,
		.budget = 1ull << 30,
		.chunk_size = HS_DEFAULT_CHUNK,
		.default_spill = 1,
		.queue_depth = 32,
		.verify_crc = 1,
	};

	if (size > sizeof d)
		size = sizeof d;
	memcpy(o, &d, size);
	o->size = size;
}

static int open_tier(struct hs_store *st, int k, const struct hs_tier_spec *sp)
{
	char name[32];
	int rc;

	if (sp->tier) {
		st->tiers[k] = sp->tier;
		return 0;
	}
	if ((unsigned)sp->kind > HS_TIER_REMOTE)
		return hp_error(HP_EUSAGE, "store: tier %d: unknown kind %d", k, sp->kind);
	snprintf(name, sizeof name, "%s%d", hs_tier_kind_name(sp->kind), k);
	rc = hs_tier_open_as(sp, name, st->o.queue_depth, &st->tiers[k]);
	return rc < 0 ? hp_error_prefix(rc, "store: tier %d (%s)", k, hs_tier_kind_name(sp->kind)) : 0;
}

static int check_opts(const struct hs_store_opts *o)
{
	if (o->chunk_size < HS_IO_ALIGN || (o->chunk_size & (o->chunk_size - 1)))
		return hp_error(HP_EUSAGE, "store: chunk size %" PRIu64 " is not a power of two >= 4096", o->chunk_size);
	if (o->budget < o->chunk_size)
		return hp_error(HP_EBUDGET, "store: budget of %" PRIu64 " bytes is smaller than one chunk (%" PRIu64 " bytes)",
				o->budget, o->chunk_size);
	if (o->ntiers < 0 || o->ntiers > HS_MAX_TIERS)
		return hp_error(HP_EUSAGE, "store: %d tiers (at most %d)", o->ntiers, HS_MAX_TIERS);
	return 0;
}

static int open_tiers(struct hs_store *st)
{
	struct hs_tier_spec spill = { .kind = HS_TIER_NVME };
	int rc;

	for (int i = 0; i < st->o.ntiers; i++) {
		st->tiers[st->ntiers] = NULL;
		rc = open_tier(st, st->ntiers, &st->o.tiers[i]);
		if (rc < 0)
			return rc;
		if (st->tiers[st->ntiers])
			st->ntiers++;
		else /* an optional tier nobody answered for */
			hp_log(HP_LOG_WARN, "store: tier %d (%s) left out: %s", i,
			       hs_tier_kind_name(st->o.tiers[i].kind), hp_errmsg());
	}
	if (st->o.ntiers == 0 && st->o.default_spill) {
		rc = open_tier(st, 0, &spill);
		if (rc < 0)
			return rc;
		st->ntiers = 1;
	}
	st->home = NO_TIER;
	for (int k = 0; k < st->ntiers; k++) {
		if (st->tiers[k]->flags & HS_TIER_F_PERSISTENT) {
			st->home = k;
			break;
		}
	}
	return 0;
}

int hs_store_open(const struct hs_store_opts *o, struct hs_store **out)
{
	struct hs_store *st;
	int rc;

	if (!o || o->size < offsetof(struct hs_store_opts, policy))
		return hp_error(HP_EUSAGE, "store: options not initialised with hs_store_opts_init");
	rc = check_opts(o);
	if (rc < 0)
		return rc;
	st = calloc(1, sizeof *st);
	if (!st)
		return -ENOMEM;
	hs_store_opts_init(&st->o, sizeof st->o);
	memcpy(&st->o, o, o->size < sizeof st->o ? o->size : sizeof st->o);
	st->policy = st->o.policy ? *st->o.policy : hs_policy_default;
	st->cs = st->o.chunk_size;
	st->next_id = 1;
	pthread_mutex_init(&st->mu, NULL);
	pthread_cond_init(&st->cv, NULL);
	rc = open_tiers(st);
	if (rc < 0)
		goto fail;
	rc = hs_place_create(st->tiers, st->ntiers, &st->place);
	if (rc < 0)
		goto fail;
	rc = hs_frames_create(st->o.budget, st->cs, frames_grown, st, &st->frames);
	if (rc < 0)
		goto fail;
	snprintf(st->stats.tier[0].name, sizeof st->stats.tier[0].name, "dram");
	for (int k = 0; k < st->ntiers; k++)
		snprintf(st->stats.tier[k + 1].name, sizeof st->stats.tier[0].name, "%s", st->tiers[k]->name);
	if (st->home != NO_TIER) {
		rc = hs_catalog_open(st);
		if (rc < 0)
			goto fail;
	}
	if (st->o.stats_page) {
		rc = hs_statpage_create(st);
		if (rc < 0)
			goto fail;
	}
	*out = st;
	return 0;
fail:
	hs_store_close(st);
	return rc;
}

static void tensor_free(struct hs_store *st, struct hs_tensor *t, int keep_committed)
{
	for (uint64_t i = 0; i < t->nchunks; i++) {
		struct hs_chunk *c = &t->ch[i];
		if (c->state == CH_RESIDENT)
			st->resident -= hs_chunk_iolen(t, i);
		hs_chunk_detach(st, t, i); /* its pages go home before the range goes */
		hs_frames_unqueue(st->frames, &c->zq);
		hs_chunk_release_copy(st, t, c);
		if (c->ctier == NO_TIER)
			continue;
		struct freed_ext *f = keep_committed ? malloc(sizeof *f) : NULL;
		if (f) {
			*f = (struct freed_ext){ c->ctier, c->caddr, hs_chunk_iolen(t, i), st->graveyard };
			st->graveyard = f;
		}
	}
	if (t->prev)
		t->prev->next = t->next;
	else if (st->list == t)
		st->list = t->next;
	if (t->next)
		t->next->prev = t->prev;
	st->ntensors--;
	if (t->base)
		munmap(t->base, t->maplen);
	hs_file_put(st, t->bfile);
	free(t->ch);
	free(t->name);
	free(t->bpath);
	free(t);
}

void hs_store_close(struct hs_store *st)
{
	if (!st)
		return;
	pthread_mutex_lock(&st->mu);
	while (st->list)
		tensor_free(st, st->list, 0);
	pthread_mutex_unlock(&st->mu);
	hs_files_reap(st);
	while (st->graveyard) {
		struct freed_ext *f = st->graveyard;
		st->graveyard = f->next;
		free(f);
	}
	hs_statpage_destroy(st);
	hs_place_destroy(st->place);
	for (int k = 0; k < st->ntiers; k++)
		st->tiers[k]->ops->close(st->tiers[k]);
	hs_frames_destroy(st->frames); /* after the tiers let go of the pages */
	pthread_mutex_destroy(&st->mu);
	pthread_cond_destroy(&st->cv);
	free(st);
}

static struct hs_tensor *find_name(struct hs_store *st, const char *name)
{
	for (struct hs_tensor *t = st->list; t; t = t->next)
		if (t->name && strcmp(t->name, name) == 0)
			return t;
	return NULL;
}

/* Reserve the tensor's address range: resident chunks are frames moved
 * into it (frames.h). */
static int reserve_range(struct hs_store *st, struct hs_tensor *t)
{
	(void)st;
	t->base = hs_frames_reserve(t->maplen);
	return t->base ? 0 : -ENOMEM;
}

/* A new tensor with its address range reserved (lock held). */
int hs_tensor_new(struct hs_store *st, const struct hs_tensor_info *info, struct hs_tensor **out)
{
	struct hs_tensor *t;

	if (info->name && find_name(st, info->name))
		return hp_error(-EEXIST, "store: a tensor named '%s' already exists", info->name);
	if (info->shape.rank < 0 || info->shape.rank > HP_MAX_RANK)
		return hp_error(HP_EUSAGE, "store: tensor rank %d out of range", info->shape.rank);
	t = calloc(1, sizeof *t);
	if (!t)
		return -ENOMEM;
	t->st = st;
	t->id = st->next_id++;
	t->bytes = info->bytes;
	t->dtype = info->dtype;
	t->shape = info->shape;
	t->next_use = HS_NO_HINT;
	t->nchunks = (info->bytes + st->cs - 1) / st->cs;
	t->maplen = (info->bytes + HS_IO_ALIGN - 1) & ~(uint64_t)(HS_IO_ALIGN - 1);
	t->ch = calloc(t->nchunks ? t->nchunks : 1, sizeof *t->ch);
	t->name = info->name ? strdup(info->name) : NULL;
	if (!t->ch || (info->name && !t->name))
		goto nomem;
	if (t->maplen && reserve_range(st, t) < 0)
		goto nomem;
	for (uint64_t i = 0; i < t->nchunks; i++)
		t->ch[i].tier = t->ch[i].ctier = NO_TIER;
	t->next = st->list;
	if (st->list)
		st->list->prev = t;
	st->list = t;
	st->ntensors++;
	*out = t;
	return 0;
nomem:
	free(t->ch);
	free(t->name);
	free(t);
	return hp_error(-ENOMEM, "store: cannot reserve %" PRIu64 " bytes of address space for a tensor", info->bytes);
}

int hs_tensor_create(struct hs_store *st, const struct hs_tensor_info *info, struct hs_tensor **out)
{
	int rc;

	pthread_mutex_lock(&st->mu);
	rc = hs_tensor_new(st, info, out);
	pthread_mutex_unlock(&st->mu);
	return rc;
}

/* Lock held. */
static int open_backing(struct hs_tensor *t, const char *path, uint64_t offset)
{
	uint64_t size;
	int rc;

	t->bpath = strdup(path);
	if (!t->bpath)
		return -ENOMEM;
	t->boff = offset;
	rc = hs_file_get(t->st, path, &t->bfile);
	if (rc < 0)
		return rc;
	size = t->bfile->size;
	if (offset > size || t->bytes > size - offset)
		return hp_error(HP_EDATA, "%s: tensor of %" PRIu64 " bytes at offset %" PRIu64
				" runs past the end of the file (%" PRIu64 " bytes)", path, t->bytes, offset, size);
	return 0;
}

int hs_tensor_create_backed(struct hs_store *st, const struct hs_tensor_info *info, const char *path,
			    uint64_t offset, struct hs_tensor **out)
{
	struct hs_tensor *t;
	int rc;

	pthread_mutex_lock(&st->mu);
	rc = hs_tensor_new(st, info, &t);
	if (rc == 0) {
		rc = open_backing(t, path, offset);
		if (rc < 0)
			tensor_free(st, t, 0);
		else
			*out = t;
	}
	pthread_mutex_unlock(&st->mu);
	hs_files_reap(st);
	return rc;
}

int hs_tensor_open(struct hs_store *st, const char *name, struct hs_tensor **out)
{
	struct hs_tensor *t;

	pthread_mutex_lock(&st->mu);
	t = find_name(st, name);
	pthread_mutex_unlock(&st->mu);
	if (!t)
		return hp_error(-ENOENT, "store: no tensor named '%s'", name);
	*out = t;
	return 0;
}

int hs_tensor_drop(struct hs_tensor *t)
{
	struct hs_store *st;

	if (!t)
		return 0;
	st = t->st;
	pthread_mutex_lock(&st->mu);
	for (;;) {
		int busy = st->committing && t->name;
		for (uint64_t i = 0; i < t->nchunks && !busy; i++) {
			if (t->ch[i].pins) {
				pthread_mutex_unlock(&st->mu);
				return hp_error(-EBUSY, "store: drop of tensor '%s': chunk %" PRIu64 " is pinned",
						t->name ? t->name : "(anonymous)", i);
			}
			busy = t->ch[i].state == CH_LOADING || t->ch[i].state == CH_WRITING;
		}
		if (!busy)
			break;
		pthread_cond_wait(&st->cv, &st->mu);
	}
	tensor_free(st, t, 1);
	pthread_cond_broadcast(&st->cv);
	pthread_mutex_unlock(&st->mu);
	hs_files_reap(st);
	hs_statpage_publish(st, 0);
	return 0;
}

int hs_tensor_set_label(struct hs_tensor *t, const char *label)
{
	pthread_mutex_lock(&t->st->mu);
	snprintf(t->label, sizeof t->label, "%s", label ? label : "");
	pthread_mutex_unlock(&t->st->mu);
	return 0;
}

int hs_store_frame_stats(struct hs_store *st, struct hs_frame_stats *out)
{
	struct hs_frame_stats r;
	size_t n = out->size < sizeof r ? out->size : sizeof r;

	if (out->size < offsetof(struct hs_frame_stats, mremaps) + sizeof r.mremaps)
		return hp_error(HP_EUSAGE, "hs_store_frame_stats: set out->size");
	pthread_mutex_lock(&st->mu);
	r = st->fst;
	r.mremaps = hs_frames_moves(st->frames);
	pthread_mutex_unlock(&st->mu);
	r.size = n;
	memcpy(out, &r, n);
	return 0;
}

int hs_tensor_get_info(const struct hs_tensor *t, struct hs_tensor_info *out)
{
	out->bytes = t->bytes;
	out->dtype = t->dtype;
	out->shape = t->shape;
	out->name = t->name;
	return 0;
}

void hs_store_fill_stats(struct hs_store *st, struct hs_store_stats *out)
{
	*out = st->stats;
	out->budget = st->o.budget;
	out->resident = st->resident;
	out->pinned = st->pinned;
	out->staging = st->staging;
	out->chunk_size = st->cs;
	out->tensors = st->ntensors;
	out->ntiers = st->ntiers + 1;
	out->tier[0].capacity = st->o.budget;
	out->tier[0].used = st->resident;
	out->tier[0].chunks = 0;
	for (struct hs_tensor *t = st->list; t; t = t->next)
		for (uint64_t i = 0; i < t->nchunks; i++)
			out->tier[0].chunks += t->ch[i].state == CH_RESIDENT;
	for (int k = 0; k < st->ntiers; k++) {
		st->tiers[k]->ops->stats(st->tiers[k], &out->tier[k + 1]);
		hs_place_usage(st->place, k, &out->tier[k + 1]);
	}
}

int hs_store_check(struct hs_store *st)
{
	for (int i = 0; st && i < st->ntiers; i++) {
		struct hs_tier *t = st->tiers[i];
		int rc = t && t->ops->health ? t->ops->health(t) : 0;
		if (rc < 0)
			return rc;
	}
	return 0;
}

uint64_t hs_store_tier_kept(struct hs_store *st, int tier)
{
	uint64_t n = 0;

	if (!st || tier < HS_TIER_ANY || tier >= st->ntiers)
		return 0;
	pthread_mutex_lock(&st->mu);
	for (int k = 0; k < st->ntiers; k++)
		n += tier == HS_TIER_ANY || tier == k ? st->bytes_kept[k] : 0;
	pthread_mutex_unlock(&st->mu);
	return n;
}

int hs_store_readahead_stats(struct hs_store *st, struct hs_readahead_stats *out)
{
	size_t size = out ? out->size : 0;

	if (!st || size < sizeof out->size)
		return hp_error(HP_EUSAGE, "store: hs_store_readahead_stats needs out->size set");
	pthread_mutex_lock(&st->mu);
	struct hs_readahead_stats r = st->ra;
	pthread_mutex_unlock(&st->mu);
	r.size = size < sizeof r ? size : sizeof r;
	memcpy(out, &r, r.size);
	return 0;
}

uint64_t hs_store_tier_peak(struct hs_store *st, int tier)
{
	if (!st || tier < HS_TIER_ANY || tier >= st->ntiers)
		return 0;
	return hs_place_peak(st->place, tier);
}

int hs_store_stats(struct hs_store *st, struct hs_store_stats *out)
{
	pthread_mutex_lock(&st->mu);
	hs_store_fill_stats(st, out);
	pthread_mutex_unlock(&st->mu);
	return 0;
}
