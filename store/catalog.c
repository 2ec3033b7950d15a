/* Persistence: superblocks, the catalog of named tensors, atomic commit.
 * Format: docs/store-format.md.  Every persistent tier file starts with two
 * superblock slots; the home tier (the first persistent one) points from its
 * newest valid slot to the catalog blob.  A commit writes new chunk copies
 * and a new catalog to free space, flushes, then writes the other slot with
 * generation + 1 and flushes again: the slot write is the commit point. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "hpdlf/error.h"
#include "store/crc.h"
#include "store/place.h"
#include "store/store_internal.h"

#define SB_MAGIC "HPDLFSB\0"
#define CAT_MAGIC "HPDLFCT\0"
#define FORMAT_VERSION 1u
#define ZERO_CHUNK 0xFFu

struct sb {
	char magic[8];
	uint32_t version;
	uint32_t sb_size;
	uint64_t uuid[2];
	uint32_t tier_index, tier_kind;
	uint64_t chunk_size;
	uint64_t capacity;
	uint64_t generation;
	uint64_t cat_addr, cat_len;
	uint32_t cat_crc;
	uint32_t sb_crc;        /* crc32c of the bytes before it */
};

struct cat_head {
	char magic[8];
	uint32_t version;
	uint32_t ntensors;
	uint64_t generation;
	uint64_t len;           /* blob bytes including the trailing crc */
};

struct cat_tensor {
	uint64_t bytes;
	int32_t dtype, rank;
	int64_t dims[HP_MAX_RANK];
	uint64_t nchunks;
	uint32_t namelen, pad;
};

struct cat_chunk {
	uint8_t tier;           /* ZERO_CHUNK: never written, reads as zeros */
	uint8_t pad[3];
	uint32_t crc;
	uint64_t addr;
};

_Static_assert(sizeof(struct sb) == 88 && offsetof(struct sb, sb_crc) == 84, "format 1 (docs/store-format.md)");
_Static_assert(sizeof(struct cat_head) == 32 && sizeof(struct cat_tensor) == 96 && sizeof(struct cat_chunk) == 16,
	       "format 1 (docs/store-format.md)");

static uint64_t round_io(uint64_t n)
{
	return (n + HS_IO_ALIGN - 1) & ~(uint64_t)(HS_IO_ALIGN - 1);
}

/* Read slot `slot`: 1 valid, 0 blank (all zero), HP_EFORMAT otherwise. */
static int sb_read(struct hs_tier *t, int slot, struct sb *out, void *buf)
{
	int rc = hs_tier_rw(t, HS_IO_READ, (uint64_t)slot * HS_SB_SIZE, buf, HS_SB_SIZE);

	if (rc < 0)
		return hp_error(rc, "%s: cannot read superblock %d: %s", t->path, slot, hp_strerror(rc));
	memcpy(out, buf, sizeof *out);
	if (memcmp(out->magic, SB_MAGIC, 8) != 0) {
		for (unsigned i = 0; i < HS_SB_SIZE; i++)
			if (((unsigned char *)buf)[i])
				return HP_EFORMAT;
		return 0;
	}
	if (out->version != FORMAT_VERSION)
		return hp_error(HP_EFORMAT, "%s: store format version %u; this build reads version %u", t->path,
				out->version, FORMAT_VERSION);
	if (out->sb_size != sizeof *out || hs_crc32c(out, offsetof(struct sb, sb_crc)) != out->sb_crc)
		return HP_EFORMAT; /* torn or damaged slot */
	return 1;
}

static int sb_write(struct hs_tier *t, int slot, struct sb *s, void *buf)
{
	int rc;

	memcpy(s->magic, SB_MAGIC, 8);
	s->version = FORMAT_VERSION;
	s->sb_size = sizeof *s;
	s->sb_crc = hs_crc32c(s, offsetof(struct sb, sb_crc));
	memset(buf, 0, HS_SB_SIZE);
	memcpy(buf, s, sizeof *s);
	rc = hs_tier_rw(t, HS_IO_WRITE, (uint64_t)slot * HS_SB_SIZE, buf, HS_SB_SIZE);
	if (rc == 0)
		rc = hs_tier_flush(t);
	if (rc < 0)
		return hp_error(rc, "%s: cannot write superblock %d: %s", t->path, slot, hp_strerror(rc));
	return 0;
}

/* The newest valid superblock of tier k: 1 found, 0 blank tier, <0 error. */
static int sb_newest(struct hs_store *st, int k, struct sb *out, void *buf)
{
	struct sb s[2];
	int v[2];

	for (int i = 0; i < 2; i++) {
		v[i] = sb_read(st->tiers[k], i, &s[i], buf);
		if (v[i] < 0 && v[i] != HP_EFORMAT)
			return v[i];
		if (v[i] == HP_EFORMAT && s[i].version != FORMAT_VERSION && !memcmp(s[i].magic, SB_MAGIC, 8))
			return HP_EFORMAT; /* message already set */
	}
	if (v[0] == 0 && v[1] == 0)
		return 0;
	if (v[0] != 1 && v[1] != 1)
		return hp_error(HP_EFORMAT, "%s: not an hpdlf store tier file (no valid superblock); "
				"use another path, or reset to overwrite it", st->tiers[k]->path);
	int best = v[0] == 1 && (v[1] != 1 || s[0].generation >= s[1].generation) ? 0 : 1;
	*out = s[best];
	return 1;
}

static int check_sb(struct hs_store *st, int k, const struct sb *s)
{
	const char *p = st->tiers[k]->path;

	if (s->uuid[0] != st->uuid[0] || s->uuid[1] != st->uuid[1])
		return hp_error(HP_EFORMAT, "%s: tier file belongs to another store than %s", p, st->tiers[st->home]->path);
	if (s->tier_index != (uint32_t)k || s->tier_kind != (uint32_t)st->tiers[k]->kind)
		return hp_error(HP_EFORMAT, "%s: was tier %u (kind %u) of its store, now given as tier %d (kind %d)", p,
				s->tier_index, s->tier_kind, k, st->tiers[k]->kind);
	if (s->chunk_size != st->cs)
		return hp_error(HP_EFORMAT, "%s: store created with chunk size %" PRIu64 ", opened with %" PRIu64, p,
				s->chunk_size, st->cs);
	return 0;
}

static int format_tier(struct hs_store *st, int k, void *buf)
{
	struct sb s = { .uuid = { st->uuid[0], st->uuid[1] }, .tier_index = k, .tier_kind = st->tiers[k]->kind,
			.chunk_size = st->cs, .capacity = st->tiers[k]->capacity };
	int rc = sb_write(st->tiers[k], 0, &s, buf);

	if (rc == 0) {
		memset(&s, 0, sizeof s);
		memset(buf, 0, HS_SB_SIZE);
		rc = hs_tier_rw(st->tiers[k], HS_IO_WRITE, HS_SB_SIZE, buf, HS_SB_SIZE);
	}
	return rc < 0 ? rc : hs_tier_flush(st->tiers[k]);
}

/* Parse one tensor record of the blob and register it. */
static int load_tensor(struct hs_store *st, const unsigned char **pp, const unsigned char *end)
{
	const unsigned char *p = *pp;
	struct cat_tensor ct;
	struct hs_tensor_info info = { 0 };
	struct hs_tensor *t;
	char name[1024];
	int rc;

	if ((size_t)(end - p) < sizeof ct)
		return HP_ECORRUPT;
	memcpy(&ct, p, sizeof ct);
	p += sizeof ct;
	if (ct.namelen == 0 || ct.namelen >= sizeof name || (size_t)(end - p) < ct.namelen || ct.rank < 0 ||
	    ct.rank > HP_MAX_RANK || ct.nchunks != (ct.bytes + st->cs - 1) / st->cs ||
	    (size_t)(end - p - ct.namelen) / sizeof(struct cat_chunk) < ct.nchunks)
		return HP_ECORRUPT;
	memcpy(name, p, ct.namelen);
	name[ct.namelen] = 0;
	p += ct.namelen;
	info = (struct hs_tensor_info){ .bytes = ct.bytes, .dtype = ct.dtype, .name = name };
	info.shape.rank = ct.rank;
	memcpy(info.shape.dims, ct.dims, sizeof ct.dims);
	rc = hs_tensor_new(st, &info, &t);
	if (rc < 0)
		return rc;
	t->committed = 1;
	for (uint64_t i = 0; i < ct.nchunks; i++, p += sizeof(struct cat_chunk)) {
		struct cat_chunk cc;
		memcpy(&cc, p, sizeof cc);
		if (cc.tier == ZERO_CHUNK)
			continue;
		if (cc.tier >= st->ntiers || !(st->tiers[cc.tier]->flags & HS_TIER_F_PERSISTENT))
			return HP_ECORRUPT;
		rc = hs_place_claim(st->place, cc.tier, cc.addr, hs_chunk_iolen(t, i));
		if (rc < 0)
			return HP_ECORRUPT;
		t->ch[i].tier = t->ch[i].ctier = cc.tier;
		t->ch[i].addr = t->ch[i].caddr = cc.addr;
		t->ch[i].crc = t->ch[i].ccrc = cc.crc;
	}
	*pp = p;
	return 0;
}

static int load_catalog(struct hs_store *st, const struct sb *s)
{
	struct hs_tier *home = st->tiers[st->home];
	uint64_t alen = round_io(s->cat_len);
	unsigned char *blob;
	struct cat_head h;
	int rc;

	if (s->cat_len < sizeof h + 4 || s->cat_addr + alen > home->capacity || s->cat_len > (1ull << 34))
		return hp_error(HP_ECORRUPT, "%s: superblock points at an impossible catalog", home->path);
	pthread_mutex_lock(&st->mu);
	rc = hs_staging_reserve(st, alen, "open: reading the catalog");
	pthread_mutex_unlock(&st->mu);
	if (rc < 0)
		return rc;
	blob = aligned_alloc(HS_IO_ALIGN, alen);
	if (!blob) {
		rc = -ENOMEM;
		goto out;
	}
	rc = hs_tier_rw(home, HS_IO_READ, s->cat_addr, blob, alen);
	if (rc < 0) {
		rc = hp_error(rc, "%s: cannot read the catalog: %s", home->path, hp_strerror(rc));
		goto out;
	}
	memcpy(&h, blob, sizeof h);
	if (hs_crc32c(blob, s->cat_len) != s->cat_crc || memcmp(h.magic, CAT_MAGIC, 8) || h.len != s->cat_len) {
		rc = hp_error(HP_ECORRUPT, "%s: catalog of generation %" PRIu64 " fails its crc32c", home->path,
			      s->generation);
		goto out;
	}
	rc = hs_place_claim(st->place, st->home, s->cat_addr, alen);
	const unsigned char *p = blob + sizeof h, *end = blob + s->cat_len;
	for (uint32_t i = 0; rc == 0 && i < h.ntensors; i++)
		rc = load_tensor(st, &p, end);
	if (rc == HP_ECORRUPT)
		rc = hp_error(rc, "%s: catalog entry %s", home->path, "is inconsistent (bad size, tier or overlapping extents)");
	st->cat_addr = s->cat_addr;
	st->cat_len = s->cat_len;
	st->generation = s->generation;
out:
	free(blob);
	pthread_mutex_lock(&st->mu);
	hs_staging_release(st, alen);
	pthread_mutex_unlock(&st->mu);
	return rc;
}

int hs_catalog_open(struct hs_store *st)
{
	void *buf = aligned_alloc(HS_IO_ALIGN, HS_SB_SIZE);
	struct sb s, hs;
	int rc, found;

	if (!buf)
		return -ENOMEM;
	found = st->o.reset ? 0 : sb_newest(st, st->home, &hs, buf);
	if (found < 0) {
		rc = hp_error_prefix(found, "store: home tier %s", st->tiers[st->home]->name);
		goto out;
	}
	if (found) {
		st->uuid[0] = hs.uuid[0];
		st->uuid[1] = hs.uuid[1];
	} else {
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		st->uuid[0] = (uint64_t)ts.tv_sec * 1000000000ull + ts.tv_nsec;
		st->uuid[1] = ((uint64_t)getpid() << 32) ^ (uint64_t)(uintptr_t)st;
	}
	for (int k = st->home; k < st->ntiers; k++) {
		if (!(st->tiers[k]->flags & HS_TIER_F_PERSISTENT))
			continue;
		rc = k == st->home ? found : st->o.reset ? 0 : sb_newest(st, k, &s, buf);
		if (rc < 0)
			goto out;
		rc = rc ? check_sb(st, k, k == st->home ? &hs : &s) : format_tier(st, k, buf);
		if (rc < 0)
			goto out;
	}
	rc = found && hs.cat_len ? load_catalog(st, &hs) : 0;
	if (found)
		st->generation = hs.generation;
out:
	free(buf);
	return rc;
}

/* ---- commit ---- */

static int persistent(const struct hs_store *st, int k)
{
	return k != NO_TIER && (st->tiers[k]->flags & HS_TIER_F_PERSISTENT);
}

/* Tensors a commit covers: named, not file-backed, existing when it began. */
static int in_commit(const struct hs_tensor *t, uint64_t max_id)
{
	return t->name && !t->bpath && t->id < max_id;
}

/* Copy a non-resident chunk whose copy sits on a non-persistent tier to the
 * home tier through a bounce buffer counted as staging (lock held, released
 * during the I/O). */
static int bounce_chunk(struct hs_store *st, struct hs_tensor *t, uint64_t i, void *buf)
{
	struct hs_chunk *c = &t->ch[i];
	uint64_t len = hs_chunk_iolen(t, i), addr;
	int src = c->tier, rc;

	rc = hs_place_alloc(st->place, st->home, len, &addr);
	if (rc < 0)
		return hp_error(rc, "store: commit: no room on %s for tensor '%s' chunk %" PRIu64,
				st->tiers[st->home]->name, t->name, i);
	c->state = CH_WRITING;
	pthread_mutex_unlock(&st->mu);
	rc = hs_tier_rw(st->tiers[src], HS_IO_READ, c->addr, buf, len);
	if (rc == 0 && hs_crc32c(buf, hs_chunk_len(t, i)) != c->crc)
		rc = HP_ECORRUPT;
	if (rc == 0)
		rc = hs_tier_rw(st->tiers[st->home], HS_IO_WRITE, addr, buf, len);
	pthread_mutex_lock(&st->mu);
	c->state = CH_ABSENT;
	pthread_cond_broadcast(&st->cv);
	if (rc < 0) {
		hs_place_free(st->place, st->home, addr, len);
		return hp_error(rc, "store: commit: moving tensor '%s' chunk %" PRIu64 " from %s to %s: %s", t->name, i,
				st->tiers[src]->name, st->tiers[st->home]->name,
				rc == HP_ECORRUPT ? "crc32c mismatch" : hp_strerror(rc));
	}
	hs_chunk_release_copy(st, t, c);
	c->tier = st->home;
	c->addr = addr;
	return 0;
}

/* The bounce buffer of a commit pass, counted as staging (lock held). */
static int bounce_get(struct hs_store *st, void **out)
{
	int rc = hs_staging_reserve(st, st->cs, "commit: bounce buffer");

	if (rc < 0)
		return rc;
	*out = aligned_alloc(HS_IO_ALIGN, st->cs);
	if (!*out) {
		hs_staging_release(st, st->cs);
		return -ENOMEM;
	}
	return 0;
}

/* One pass bringing the chunks of the commit onto a persistent tier (lock
 * held, released during I/O): the number of chunks moved, or an error. */
static int commit_pass(struct hs_store *st, uint64_t max_id)
{
	struct wb_item *wb = NULL;
	size_t nwb = 0, cap = 0;
	void *bounce = NULL;
	int rc = 0, nbounce = 0;

	for (struct hs_tensor *t = st->list; t && rc == 0; t = t->next) {
		for (uint64_t i = 0; in_commit(t, max_id) && i < t->nchunks && rc == 0; i++) {
			struct hs_chunk *c = &t->ch[i];
			if (c->state == CH_RESIDENT && (c->dirty || (c->tier != NO_TIER && !persistent(st, c->tier)))) {
				if (nwb == cap) {
					cap = cap ? 2 * cap : 64;
					void *p = realloc(wb, cap * sizeof *wb);
					if (!p) {
						rc = -ENOMEM;
						break;
					}
					wb = p;
				}
				c->state = CH_WRITING;
				wb[nwb++] = (struct wb_item){ t, i };
			} else if (c->state == CH_ABSENT && c->tier != NO_TIER && !persistent(st, c->tier)) {
				if (!bounce)
					rc = bounce_get(st, &bounce);
				if (rc == 0 && (rc = bounce_chunk(st, t, i, bounce)) == 0)
					nbounce++;
			}
		}
	}
	if (rc < 0) {
		for (size_t j = 0; j < nwb; j++)
			wb[j].t->ch[wb[j].chunk].state = CH_RESIDENT;
		pthread_cond_broadcast(&st->cv);
	} else if (nwb) {
		rc = hs_write_back(st, wb, (int)nwb, st->home);
	}
	if (bounce) {
		free(bounce);
		hs_staging_release(st, st->cs);
	}
	free(wb);
	return rc < 0 ? rc : (int)nwb + nbounce;
}

/* Serialise the catalog of the commit into an aligned blob. */
static uint64_t catalog_len(struct hs_store *st, uint64_t max_id, uint32_t *ntensors)
{
	uint64_t len = sizeof(struct cat_head) + 4;

	*ntensors = 0;
	for (struct hs_tensor *t = st->list; t; t = t->next) {
		if (!in_commit(t, max_id))
			continue;
		len += sizeof(struct cat_tensor) + strlen(t->name) + t->nchunks * sizeof(struct cat_chunk);
		(*ntensors)++;
	}
	return len;
}

/* Serialise the catalog into an aligned blob of catalog_len() bytes,
 * whose DRAM the caller reserved. */
static int build_catalog(struct hs_store *st, uint64_t max_id, unsigned char **out, uint64_t *outlen)
{
	struct cat_head h = { .version = FORMAT_VERSION, .generation = st->generation + 1 };
	uint64_t len = catalog_len(st, max_id, &h.ntensors);
	unsigned char *blob, *p;

	blob = aligned_alloc(HS_IO_ALIGN, round_io(len));
	if (!blob)
		return -ENOMEM;
	memset(blob, 0, round_io(len));
	memcpy(h.magic, CAT_MAGIC, 8);
	h.len = len;
	memcpy(blob, &h, sizeof h);
	p = blob + sizeof h;
	for (struct hs_tensor *t = st->list; t; t = t->next) {
		if (!in_commit(t, max_id))
			continue;
		struct cat_tensor ct = { .bytes = t->bytes, .dtype = t->dtype, .rank = t->shape.rank,
					 .nchunks = t->nchunks, .namelen = (uint32_t)strlen(t->name) };
		memcpy(ct.dims, t->shape.dims, sizeof ct.dims);
		memcpy(p, &ct, sizeof ct);
		p += sizeof ct;
		memcpy(p, t->name, ct.namelen);
		p += ct.namelen;
		for (uint64_t i = 0; i < t->nchunks; i++, p += sizeof(struct cat_chunk)) {
			const struct hs_chunk *c = &t->ch[i];
			struct cat_chunk cc = { .tier = ZERO_CHUNK };
			if (c->dirty || (c->tier != NO_TIER && !persistent(st, c->tier))) {
				free(blob);
				return hp_error(HP_EINTERNAL, "store: commit: tensor '%s' chunk %" PRIu64
						" has no persistent copy", t->name, i);
			}
			if (c->tier != NO_TIER)
				cc = (struct cat_chunk){ .tier = (uint8_t)c->tier, .crc = c->crc, .addr = c->addr };
			memcpy(p, &cc, sizeof cc);
		}
	}
	uint32_t crc = hs_crc32c(blob, len - 4);
	memcpy(p, &crc, 4);
	*out = blob;
	*outlen = len;
	return 0;
}

/* Write the blob, make every persistent tier durable, then flip the
 * superblock (the commit point).  Lock NOT held. */
static int write_catalog(struct hs_store *st, unsigned char *blob, uint64_t len, uint64_t *addr)
{
	struct hs_tier *home = st->tiers[st->home];
	struct sb s = { .uuid = { st->uuid[0], st->uuid[1] }, .tier_index = st->home, .tier_kind = home->kind,
			.chunk_size = st->cs, .capacity = home->capacity, .generation = st->generation + 1,
			.cat_len = len, .cat_crc = hs_crc32c(blob, len) };
	void *sbuf = blob; /* reused for the superblock after the blob is written */
	int rc;

	rc = hs_place_alloc(st->place, st->home, round_io(len), addr);
	if (rc < 0)
		return hp_error(rc, "store: commit: no room on %s for the catalog (%" PRIu64 " bytes)", home->name, len);
	s.cat_addr = *addr;
	rc = hs_tier_rw(home, HS_IO_WRITE, *addr, blob, round_io(len));
	if (rc < 0) {
		rc = hp_error(rc, "store: commit: writing the catalog to %s: %s", home->name, hp_strerror(rc));
		goto fail;
	}
	for (int k = 0; k < st->ntiers; k++) {
		if (!persistent(st, k))
			continue;
		rc = hs_tier_flush(st->tiers[k]);
		if (rc < 0) {
			rc = hp_error_prefix(rc, "store: commit: flushing %s", st->tiers[k]->name);
			goto fail;
		}
	}
	rc = sb_write(home, (int)((st->generation + 1) & 1), &s, sbuf);
	if (rc == 0)
		return 0;
fail:
	hs_place_free(st->place, st->home, *addr, round_io(len));
	return rc;
}

/* After the commit point: the new copies are the committed ones; free the
 * replaced committed copies, dropped tensors' extents and the old catalog. */
static void commit_done(struct hs_store *st, uint64_t max_id, uint64_t cat_addr, uint64_t cat_len)
{
	for (struct hs_tensor *t = st->list; t; t = t->next) {
		for (uint64_t i = 0; in_commit(t, max_id) && i < t->nchunks; i++) {
			struct hs_chunk *c = &t->ch[i];
			if (c->ctier != NO_TIER && !(c->ctier == c->tier && c->caddr == c->addr))
				hs_place_free(st->place, c->ctier, c->caddr, hs_chunk_iolen(t, i));
			c->ctier = c->tier;
			c->caddr = c->addr;
			c->ccrc = c->crc;
		}
		if (in_commit(t, max_id))
			t->committed = 1;
	}
	while (st->graveyard) {
		struct freed_ext *f = st->graveyard;
		st->graveyard = f->next;
		hs_place_free(st->place, f->tier, f->addr, f->len);
		free(f);
	}
	if (st->cat_len)
		hs_place_free(st->place, st->home, st->cat_addr, round_io(st->cat_len));
	st->cat_addr = cat_addr;
	st->cat_len = cat_len;
	st->generation++;
}

/* Refuse a commit while a named chunk is pinned for writing (lock held). */
static int check_pins(struct hs_store *st, uint64_t max_id)
{
	for (struct hs_tensor *t = st->list; t; t = t->next)
		for (uint64_t i = 0; in_commit(t, max_id) && i < t->nchunks; i++)
			if (t->ch[i].wpins)
				return hp_error(HP_EUSAGE, "store: commit: tensor '%s' chunk %" PRIu64
						" is pinned for writing", t->name, i);
	return 0;
}

/* Wait until no chunk of the commit is being moved (lock held). */
static void wait_moves(struct hs_store *st, uint64_t max_id)
{
	for (;;) {
		int busy = 0;
		for (struct hs_tensor *t = st->list; t && !busy; t = t->next)
			for (uint64_t i = 0; in_commit(t, max_id) && i < t->nchunks && !busy; i++)
				busy = t->ch[i].state == CH_WRITING || t->ch[i].state == CH_LOADING;
		if (!busy)
			return;
		pthread_cond_wait(&st->cv, &st->mu);
	}
}

/* Passes until every chunk of the commit has a persistent copy: readers may
 * load chunks meanwhile, but nothing dirties them (writers wait). */
static int commit_chunks(struct hs_store *st, uint64_t max_id)
{
	int rc;

	do {
		wait_moves(st, max_id);
		rc = commit_pass(st, max_id);
	} while (rc > 0);
	return rc;
}

int hs_store_commit(struct hs_store *st)
{
	unsigned char *blob = NULL;
	uint64_t max_id, len = 0, addr = 0;
	int rc;

	if (st->home == NO_TIER)
		return hp_error(HP_EUSAGE, "store: commit: the store has no persistent tier (give a pmem= or nvme= path)");
	pthread_mutex_lock(&st->mu);
	while (st->committing)
		pthread_cond_wait(&st->cv, &st->mu);
	st->committing = 1;
	max_id = st->next_id;
	wait_moves(st, max_id);
	rc = check_pins(st, max_id);
	if (rc == 0)
		rc = commit_chunks(st, max_id);
	uint32_t nt;
	uint64_t held = rc == 0 ? round_io(catalog_len(st, max_id, &nt)) : 0;
	if (rc == 0 && (rc = hs_staging_reserve(st, held, "commit: the catalog")) < 0)
		held = 0; /* fits first, or the commit fails before writing anything */
	if (rc == 0)
		rc = build_catalog(st, max_id, &blob, &len);
	if (rc == 0) {
		pthread_mutex_unlock(&st->mu);
		rc = write_catalog(st, blob, len, &addr);
		pthread_mutex_lock(&st->mu);
	}
	if (held)
		hs_staging_release(st, held);
	if (rc == 0)
		commit_done(st, max_id, addr, len);
	st->committing = 0;
	pthread_cond_broadcast(&st->cv);
	pthread_mutex_unlock(&st->mu);
	free(blob);
	hs_statpage_publish(st, 1);
	return rc;
}
