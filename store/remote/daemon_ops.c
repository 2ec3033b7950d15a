/* hpdlf-store daemon: the allocation table and the requests of authenticated
 * clients (alloc, free, stat, publish, lookup, remove, list, shutdown), and
 * the catalog of named extents on a persistent region. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <search.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "hpdlf/error.h"
#include "store/remote/daemon_int.h"

static int by_addr(const void *a, const void *b)
{
	const struct dalloc *x = a, *y = b;

	return x->addr < y->addr ? -1 : x->addr > y->addr;
}

static int by_name(const void *a, const void *b)
{
	return strcmp(((const struct dalloc *)a)->name, ((const struct dalloc *)b)->name);
}

uint64_t hs_daemon_capacity(const struct hs_daemon *d)
{
	uint64_t c = 0;

	for (int i = 0; i < d->nreg; i++)
		c += d->reg[i].size;
	return c;
}

static struct dregion *region_of(struct hs_daemon *d, uint64_t addr)
{
	for (int i = 0; i < d->nreg; i++)
		if (addr >= d->reg[i].start && addr - d->reg[i].start < d->reg[i].size)
			return &d->reg[i];
	return NULL;
}

static struct dalloc *find_addr(struct hs_daemon *d, uint64_t addr)
{
	struct dalloc key = { .addr = addr };
	void **p = tfind(&key, &d->by_addr, by_addr);

	return p ? *p : NULL;
}

static struct dalloc *find_name(struct hs_daemon *d, const char *name)
{
	struct dalloc key = { .name = (char *)name };
	void **p = tfind(&key, &d->by_name, by_name);

	return p ? *p : NULL;
}

/* Make a's bytes reachable by RMA under a fresh key: read-write for its
 * owner, read-only once named.  Any earlier registration is closed first, so
 * its key stops working before the new one is handed out. */
static int extent_register(struct hs_daemon *d, struct dalloc *a, uint64_t access)
{
	struct dregion *r = region_of(d, a->addr);
	unsigned char *mem;
	int rc;

	if (a->mr) {
		fi_close(&a->mr->fid);
		a->mr = NULL;
	}
	if (!r)
		return HP_EINTERNAL;
	mem = r->mem + (a->addr - r->start);
	rc = hs_fab_mr_reg(&d->fab, mem, a->len, access, &a->mr);
	if (rc < 0)
		return rc;
	a->key = fi_mr_key(a->mr);
	a->rma_base = (d->fab.mr_mode & FI_MR_VIRT_ADDR) ? (uint64_t)(uintptr_t)mem : 0;
	return 0;
}

/* Zero [addr, +len) of region r so the next owner never sees these bytes:
 * anonymous DRAM gets fresh zero pages, a persistent file a hole (pages of
 * zeroes, blocks returned), else plain stores made durable. */
static void zero_extent(struct dregion *r, uint64_t addr, uint64_t len)
{
	unsigned char *p = r->mem + (addr - r->start);

	if (r->fd < 0) {
		if (madvise(p, len, MADV_DONTNEED) == 0)
			return;
	} else if (fallocate(r->fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)(addr - r->start),
			     (off_t)len) == 0) {
		return;
	}
	memset(p, 0, len);
	if (r->fd >= 0)
		msync(p, len, MS_SYNC);
}

/* Return an extent to its region and forget it: its key dies first, then
 * its bytes are zeroed, then the range can be handed out again. */
static void release(struct hs_daemon *d, struct dalloc *a)
{
	struct dregion *r = region_of(d, a->addr);

	if (a->mr)
		fi_close(&a->mr->fid);
	tdelete(a, &d->by_addr, by_addr);
	if (a->name) {
		tdelete(a, &d->by_name, by_name);
		d->nnamed--;
		if (r)
			r->named--;
	}
	if (r) {
		r->used -= a->len;
		r->extents--;
		r->frees++;
		r->bytes_freed += a->len;
		zero_extent(r, a->addr, a->len);
		hs_extents_free(r->ext, a->addr, a->len);
	}
	d->n.bytes_freed += a->len;
	d->used -= a->len;
	d->nallocs--;
	free(a->name);
	free(a->meta);
	free(a);
}

static int record(struct hs_daemon *d, uint64_t addr, uint64_t len, uint64_t owner, struct dalloc **out)
{
	struct dalloc *a = calloc(1, sizeof *a);
	struct dregion *r = region_of(d, addr);

	if (!a)
		return -ENOMEM;
	a->addr = addr;
	a->len = len;
	a->owner = owner;
	if (!tsearch(a, &d->by_addr, by_addr)) {
		free(a);
		return -ENOMEM;
	}
	d->used += len;
	d->nallocs++;
	if (r) {
		r->used += len;
		r->extents++;
	}
	*out = a;
	return 0;
}

struct collector {
	struct dalloc **v;
	size_t n;
	uint64_t owner;
	int named;              /* collect named extents instead of an owner's */
};

static void collect(const void *node, VISIT v, void *arg)
{
	struct dalloc *a = *(struct dalloc *const *)node;
	struct collector *c = arg;

	if (v != postorder && v != leaf)
		return;
	/* shared extents are named yet leased: their owner's lease frees them */
	if (c->named ? a->name != NULL : (a->owner == c->owner && (!a->name || a->shared)))
		c->v[c->n++] = a;
}

static int collect_all(struct hs_daemon *d, struct collector *c)
{
	c->v = malloc((d->nallocs + 1) * sizeof *c->v);
	if (!c->v)
		return -ENOMEM;
	c->n = 0;
	twalk_r(d->by_addr, collect, c);
	return 0;
}

void hs_daemon_release_client(struct hs_daemon *d, struct dclient *c)
{
	struct collector col = { .owner = c->id };
	uint64_t bytes = 0;

	if (collect_all(d, &col) < 0)
		return;
	for (size_t i = 0; i < col.n; i++) {
		bytes += col.v[i]->len;
		release(d, col.v[i]);
	}
	d->n.lease_frees += col.n;
	free(col.v);
	if (col.n)
		hp_log(HP_LOG_INFO, "lease of client %" PRIu64 " ended: %zu extents (%" PRIu64 " bytes) freed", c->id,
		       col.n, bytes);
}

static void free_node(void *p)
{
	struct dalloc *a = p;

	if (a->mr)
		fi_close(&a->mr->fid);
	free(a->name);
	free(a->meta);
	free(a);
}

static void free_none(void *p)
{
	(void)p;
}

void hs_daemon_free_all(struct hs_daemon *d)
{
	tdestroy(d->by_name, free_none);
	d->by_name = NULL;
	tdestroy(d->by_addr, free_node);
	d->by_addr = NULL;
}

static int do_alloc(struct hs_daemon *d, struct dclient *c, const Hpdlf__Store__Alloc *m,
		    Hpdlf__Store__Reply *r, char *text, size_t tlen)
{
	uint64_t addr = 0;
	struct dalloc *a;
	int rc = -ENOSPC;

	struct dregion *g;

	if (m->len == 0 || m->len % HS_IO_ALIGN || m->len > hs_daemon_capacity(d)) {
		snprintf(text, tlen, "alloc: length %" PRIu64 " must be a positive multiple of 4096 up to %" PRIu64,
			 m->len, hs_daemon_capacity(d));
		return HP_EUSAGE;
	}
	/* DRAM first; a persistent region first for data meant to be named. */
	for (int k = 0; k < d->nreg && rc == -ENOSPC; k++) {
		int i = m->persistent ? d->nreg - 1 - k : k;
		rc = hs_extents_alloc(d->reg[i].ext, m->len, &addr);
	}
	if (rc < 0) {
		snprintf(text, tlen, "daemon %s is full (%" PRIu64 " of %" PRIu64 " bytes used, %" PRIu64 " asked)",
			 d->bound, d->used, hs_daemon_capacity(d), m->len);
		return rc;
	}
	rc = record(d, addr, m->len, c->id, &a);
	if (rc < 0) {
		hs_extents_free(region_of(d, addr)->ext, addr, m->len);
		return rc;
	}
	rc = extent_register(d, a, FI_REMOTE_READ | FI_REMOTE_WRITE);
	if (rc < 0) {
		snprintf(text, tlen, "daemon %s: %s", d->bound, hp_errmsg());
		release(d, a);
		return rc;
	}
	g = region_of(d, addr);
	g->allocs++;
	g->bytes_allocated += m->len;
	d->n.allocs++;
	d->n.bytes_allocated += m->len;
	r->addr = addr;
	r->len = m->len;
	r->key = a->key;
	r->rma_base = a->rma_base;
	return 0;
}

/* The extent at addr of exactly len bytes that client c may change (free,
 * or also name when not shared already). */
static struct dalloc *owned(struct hs_daemon *d, struct dclient *c, uint64_t addr, uint64_t len, int shared_ok,
			    char *text, size_t tlen)
{
	struct dalloc *a = find_addr(d, addr);

	if (!a || a->len != len || a->owner != c->id || (a->name && !(shared_ok && a->shared))) {
		snprintf(text, tlen, "no extent [%" PRIu64 ", +%" PRIu64 ") of this client on daemon %s", addr, len,
			 d->bound);
		return NULL;
	}
	return a;
}

static int do_free(struct hs_daemon *d, struct dclient *c, const Hpdlf__Store__Free *m, char *text, size_t tlen)
{
	struct dalloc *a = owned(d, c, m->addr, m->len, 1, text, tlen);

	if (!a)
		return HP_EINTERNAL;
	release(d, a);
	d->n.frees++;
	return 0;
}

static uint64_t rss_bytes(void)
{
	unsigned long size = 0, res = 0;
	FILE *f = fopen("/proc/self/statm", "r");

	if (f) {
		if (fscanf(f, "%lu %lu", &size, &res) != 2)
			res = 0;
		fclose(f);
	}
	return (uint64_t)res * (uint64_t)sysconf(_SC_PAGESIZE);
}

/* One allocation freed by a single free(r->stat): the message comes first. */
struct stat_block {
	Hpdlf__Store__StatInfo s;
	Hpdlf__Store__TierStat t[HS_DAEMON_MAX_REGIONS];
	Hpdlf__Store__TierStat *tp[HS_DAEMON_MAX_REGIONS];
};

static void stat_tier(const struct dregion *g, Hpdlf__Store__TierStat *t)
{
	hpdlf__store__tier_stat__init(t);
	t->kind = (char *)g->kind;
	t->capacity = g->size;
	t->used = g->used;
	t->extents = g->extents;
	t->named = (uint32_t)g->named;
	t->allocs = g->allocs;
	t->frees = g->frees;
	t->bytes_allocated = g->bytes_allocated;
	t->bytes_freed = g->bytes_freed;
}

static void stat_counters(const struct dcounters *n, Hpdlf__Store__StatInfo *s)
{
	s->connections = n->connections;
	s->auth_failures = n->auth_failures;
	s->leases_expired = n->leases_expired;
	s->allocs = n->allocs;
	s->alloc_failures = n->alloc_failures;
	s->frees = n->frees;
	s->lease_frees = n->lease_frees;
	s->bytes_allocated = n->bytes_allocated;
	s->bytes_freed = n->bytes_freed;
	s->publishes = n->publishes;
	s->lookups = n->lookups;
	s->lookup_misses = n->lookup_misses;
	s->removes = n->removes;
	s->lists = n->lists;
	s->stats = n->stats;
	s->errors = n->errors;
}

static int do_stat(struct hs_daemon *d, Hpdlf__Store__Reply *r)
{
	struct stat_block *b = malloc(sizeof *b);
	Hpdlf__Store__StatInfo *s;
	uint32_t ready = 0;

	if (!b)
		return -ENOMEM;
	s = &b->s;
	hpdlf__store__stat_info__init(s);
	s->capacity = hs_daemon_capacity(d);
	s->used = d->used;
	s->chunks = d->nallocs;
	s->clients = d->ncl;
	s->named = (uint32_t)d->nnamed;
	s->rss = rss_bytes();
	s->stat_version = 2;
	s->uptime_ms = hs_now_ms() - d->start_ms;
	s->provider = d->fab.prov;
	for (unsigned i = 0; i < d->ncl; i++)
		ready += d->cl[i]->state == C_READY;
	s->clients_ready = ready;
	stat_counters(&d->n, s);
	for (int i = 0; i < d->nreg; i++) {
		stat_tier(&d->reg[i], &b->t[i]);
		b->tp[i] = &b->t[i];
	}
	s->n_tiers = (size_t)d->nreg;
	s->tiers = b->tp;
	r->stat = s;
	return 0;
}

static void persist_extent(struct hs_daemon *d, const struct dalloc *a)
{
	struct dregion *r = region_of(d, a->addr);

	if (r && r->fd >= 0)
		msync(r->mem + (a->addr - r->start), a->len, MS_SYNC);
}

static int do_publish(struct hs_daemon *d, struct dclient *c, const Hpdlf__Store__Publish *m,
		      Hpdlf__Store__Reply *r, char *text, size_t tlen)
{
	struct dalloc *a;
	int rc;

	if (!hs_name_ok(m->name)) {
		snprintf(text, tlen, "publish: bad name (1..255 printable bytes, no '/')");
		return HP_EUSAGE;
	}
	if (m->meta.len > HS_META_MAX) {
		snprintf(text, tlen, "publish: metadata of %zu bytes (limit %d)", m->meta.len, HS_META_MAX);
		return HP_EUSAGE;
	}
	if (m->digest.len != HS_DIGEST_BYTES) {
		snprintf(text, tlen, "publish: a digest of %d bytes is required, not %zu", HS_DIGEST_BYTES,
			 m->digest.len);
		return HP_EPROTO;
	}
	if (find_name(d, m->name)) {
		snprintf(text, tlen, "'%s' already exists on daemon %s", m->name, d->bound);
		return -EEXIST;
	}
	if (!(a = owned(d, c, m->addr, m->len, 0, text, tlen)))
		return -ENOENT;
	/* Named data is shared by every client of the job and never changes:
	 * the owner's read-write key dies, a read-only one replaces it. */
	if ((rc = extent_register(d, a, FI_REMOTE_READ)) < 0) {
		snprintf(text, tlen, "daemon %s: %s", d->bound, hp_errmsg());
		return rc;
	}
	r->key = a->key;
	r->rma_base = a->rma_base;
	a->name = strdup(m->name);
	a->meta = malloc(m->meta.len + 1);
	if (!a->name || !a->meta || !tsearch(a, &d->by_name, by_name)) {
		free(a->name);
		free(a->meta);
		a->name = NULL;
		a->meta = NULL;
		return -ENOMEM;
	}
	memcpy(a->meta, m->meta.data, m->meta.len);
	a->meta_len = m->meta.len;
	memcpy(a->digest, m->digest.data, HS_DIGEST_BYTES);
	a->has_digest = 1;
	a->owner = 0;
	d->nnamed++;
	region_of(d, a->addr)->named++;
	d->n.publishes++;
	persist_extent(d, a);
	if (d->catalog[0])
		return hs_daemon_catalog_save(d);
	return 0;
}

static Hpdlf__Store__Named *named_msg(const struct dalloc *a, int with_meta)
{
	Hpdlf__Store__Named *n = malloc(sizeof *n);

	if (!n)
		return NULL;
	hpdlf__store__named__init(n);
	n->name = a->name;
	n->addr = a->addr;
	n->len = a->len;
	if (with_meta) {
		n->meta.data = a->meta;
		n->meta.len = a->meta_len;
		n->digest.data = (uint8_t *)a->digest;
		n->digest.len = a->has_digest ? HS_DIGEST_BYTES : 0;
		n->key = a->key;
		n->rma_base = a->rma_base;
	}
	n->shared = a->shared;
	return n;
}

/* Share: name an extent of c writable by every client of the job (the
 * token is the job's); it stays c's, leased, unpersisted. */
static int do_share(struct hs_daemon *d, struct dclient *c, const Hpdlf__Store__Share *m, Hpdlf__Store__Reply *r,
		    char *text, size_t tlen)
{
	struct dalloc *a;

	if (!hs_name_ok(m->name)) {
		snprintf(text, tlen, "share: bad name (1..255 printable bytes, no '/')");
		return HP_EUSAGE;
	}
	if (find_name(d, m->name)) {
		snprintf(text, tlen, "'%s' already exists on daemon %s", m->name, d->bound);
		return -EEXIST;
	}
	if (!(a = owned(d, c, m->addr, m->len, 0, text, tlen)))
		return -ENOENT;
	if (!(a->name = strdup(m->name)) || !tsearch(a, &d->by_name, by_name)) {
		free(a->name);
		a->name = NULL;
		return -ENOMEM;
	}
	a->shared = 1;
	d->nnamed++;
	region_of(d, a->addr)->named++;
	d->n.publishes++;
	r->key = a->key;
	r->rma_base = a->rma_base;
	return 0;
}

static int do_lookup(struct hs_daemon *d, const char *name, Hpdlf__Store__Reply *r, char *text, size_t tlen)
{
	struct dalloc *a = hs_name_ok(name) ? find_name(d, name) : NULL;

	d->n.lookups++;
	if (!a) {
		d->n.lookup_misses++;
		snprintf(text, tlen, "no tensor '%.255s' on daemon %s", name, d->bound);
		return -ENOENT;
	}
	r->named = malloc(sizeof *r->named);
	if (!r->named || !(r->named[0] = named_msg(a, 1)))
		return -ENOMEM;
	r->n_named = 1;
	r->addr = a->addr;
	r->len = a->len;
	return 0;
}

static int do_remove(struct hs_daemon *d, const char *name, char *text, size_t tlen)
{
	struct dalloc *a = hs_name_ok(name) ? find_name(d, name) : NULL;

	if (!a) {
		snprintf(text, tlen, "no tensor '%.255s' on daemon %s", name, d->bound);
		return -ENOENT;
	}
	release(d, a);
	d->n.removes++;
	return d->catalog[0] ? hs_daemon_catalog_save(d) : 0;
}

static int do_list(struct hs_daemon *d, Hpdlf__Store__Reply *r, char *text, size_t tlen)
{
	struct collector col = { .named = 1 };
	size_t bytes = 64;
	int rc = collect_all(d, &col);

	d->n.lists++;
	if (rc < 0)
		return rc;
	r->named = calloc(col.n + 1, sizeof *r->named);
	for (size_t i = 0; r->named && i < col.n; i++) {
		bytes += strlen(col.v[i]->name) + 32;
		if (bytes > HS_WIRE_MAX_FRAME - 1024) {
			snprintf(text, tlen, "list truncated after %zu of %zu names", i, col.n);
			break;
		}
		if (!(r->named[i] = named_msg(col.v[i], 0)))
			break;
		r->n_named++;
	}
	free(col.v);
	return r->named ? 0 : -ENOMEM;
}

int hs_daemon_request(struct hs_daemon *d, struct dclient *c, const hs_msg *m, hs_msg *out,
		      Hpdlf__Store__Reply *r, char *text, size_t tlen)
{
	int rc, stop = 0;

	(void)out;
	switch (m->body_case) {
	case HPDLF__STORE__MSG__BODY_ALLOC: rc = do_alloc(d, c, m->alloc, r, text, tlen); break;
	case HPDLF__STORE__MSG__BODY_FREE: rc = do_free(d, c, m->free, text, tlen); break;
	case HPDLF__STORE__MSG__BODY_STAT:
		d->n.stats++;
		rc = do_stat(d, r);
		break;
	case HPDLF__STORE__MSG__BODY_PUBLISH: rc = do_publish(d, c, m->publish, r, text, tlen); break;
	case HPDLF__STORE__MSG__BODY_SHARE: rc = do_share(d, c, m->share, r, text, tlen); break;
	case HPDLF__STORE__MSG__BODY_LOOKUP: rc = do_lookup(d, m->lookup->name, r, text, tlen); break;
	case HPDLF__STORE__MSG__BODY_REMOVE: rc = do_remove(d, m->remove->name, text, tlen); break;
	case HPDLF__STORE__MSG__BODY_LIST: rc = do_list(d, r, text, tlen); break;
	case HPDLF__STORE__MSG__BODY_SHUTDOWN: rc = 0; stop = 1; break;
	default:
		snprintf(text, tlen, "unexpected message %d after authentication", m->body_case);
		rc = HP_EPROTO;
		break;
	}
	if (rc < 0) {
		d->n.errors++;
		if (m->body_case == HPDLF__STORE__MSG__BODY_ALLOC)
			d->n.alloc_failures++;
	}
	r->status = rc;
	r->free_bytes = hs_daemon_capacity(d) - d->used;
	return stop;
}

void hs_daemon_reply_release(Hpdlf__Store__Reply *r)
{
	for (size_t i = 0; i < r->n_named; i++)
		free(r->named[i]);
	free(r->named);
	free(r->stat);
}

/* Catalog: one line per named extent, "addr len name metahex digesthex"
 * ("-" for an empty field), replaced atomically (write, fsync, rename)
 * after each change.  Version 1 lines have no digest. */
#define CATALOG_HEAD "hpdlf-store-catalog 2\n"
#define CATALOG_HEAD_V1 "hpdlf-store-catalog 1\n"

static void put_hex(FILE *f, const uint8_t *p, size_t n)
{
	for (size_t k = 0; k < n; k++)
		fprintf(f, "%02x", p[k]);
	fprintf(f, "%s", n ? "" : "-");
}

int hs_daemon_catalog_save(struct hs_daemon *d)
{
	struct collector col = { .named = 1 };
	char tmp[700];
	FILE *f = NULL;
	int rc = collect_all(d, &col), fd;

	if (rc < 0)
		return rc;
	snprintf(tmp, sizeof tmp, "%s.tmp", d->catalog);
	fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0 || !(f = fdopen(fd, "w"))) {
		rc = -errno;
		if (fd >= 0)
			close(fd);
		free(col.v);
		return hp_error(rc, "catalog %s: %s", tmp, strerror(-rc));
	}
	fprintf(f, CATALOG_HEAD);
	for (size_t i = 0; i < col.n; i++) {
		struct dalloc *a = col.v[i];
		struct dregion *r = region_of(d, a->addr);
		if (!r || r->fd < 0 || a->shared)
			continue; /* DRAM, or leased: does not outlive the daemon */
		fprintf(f, "%" PRIu64 " %" PRIu64 " %s ", a->addr, a->len, a->name);
		put_hex(f, a->meta, a->meta_len);
		fprintf(f, " ");
		put_hex(f, a->digest, a->has_digest ? HS_DIGEST_BYTES : 0);
		fprintf(f, "\n");
	}
	free(col.v);
	rc = fflush(f) || fsync(fileno(f)) ? -errno : 0;
	if (fclose(f) && !rc)
		rc = -errno;
	if (!rc && rename(tmp, d->catalog) < 0)
		rc = -errno;
	return rc < 0 ? hp_error(rc, "catalog %s: %s", d->catalog, strerror(-rc)) : 0;
}

/* Hex field ("-": empty) into out; its length, or -1 if malformed. */
static long get_hex(const char *hex, uint8_t *out, size_t max)
{
	size_t hl = strcmp(hex, "-") ? strlen(hex) : 0;

	if (hl % 2 || hl / 2 > max)
		return -1;
	for (size_t k = 0; k < hl / 2; k++) {
		unsigned v;
		if (sscanf(hex + 2 * k, "%2x", &v) != 1)
			return -1;
		out[k] = (uint8_t)v;
	}
	return (long)(hl / 2);
}

static int catalog_entry(struct hs_daemon *d, uint64_t addr, uint64_t len, const char *name, const char *hex,
			 const char *dhex)
{
	struct dregion *r = region_of(d, addr);
	uint8_t meta[HS_META_MAX], digest[HS_DIGEST_BYTES];
	long ml = get_hex(hex, meta, sizeof meta), dl = dhex ? get_hex(dhex, digest, sizeof digest) : 0;
	struct dalloc *a;
	int rc;

	if (!r || r->fd < 0 || len == 0 || len % HS_IO_ALIGN || len > r->size || addr - r->start > r->size - len ||
	    !hs_name_ok(name) || ml < 0 || (dl != 0 && dl != HS_DIGEST_BYTES) || find_name(d, name))
		return HP_EFORMAT;
	if ((rc = hs_extents_claim(r->ext, addr, len)) < 0)
		return HP_EFORMAT;
	if ((rc = record(d, addr, len, 0, &a)) < 0)
		return rc;
	a->name = strdup(name);
	a->meta = malloc((size_t)ml + 1);
	if (!a->name || !a->meta)
		return -ENOMEM;
	memcpy(a->meta, meta, (size_t)ml);
	a->meta_len = (size_t)ml;
	memcpy(a->digest, digest, (size_t)dl);
	a->has_digest = dl == HS_DIGEST_BYTES;
	if (!tsearch(a, &d->by_name, by_name))
		return -ENOMEM;
	d->nnamed++;
	r->named++;
	return extent_register(d, a, FI_REMOTE_READ);
}

int hs_daemon_catalog_load(struct hs_daemon *d)
{
	FILE *f = fopen(d->catalog, "r");
	char line[2200], name[HS_NAME_MAX + 2], hex[2 * HS_META_MAX + 2], dhex[2 * HS_DIGEST_BYTES + 2];
	uint64_t addr, len;
	int rc = 0, lineno = 1, v1 = 0;

	if (!f)
		return errno == ENOENT ? 0 : hp_error(-errno, "catalog %s: %s", d->catalog, strerror(errno));
	if (!fgets(line, sizeof line, f) || (strcmp(line, CATALOG_HEAD) && !(v1 = !strcmp(line, CATALOG_HEAD_V1))))
		rc = HP_EFORMAT;
	while (!rc && fgets(line, sizeof line, f)) {
		lineno++;
		int n = sscanf(line, "%" SCNu64 " %" SCNu64 " %256s %1025s %65s", &addr, &len, name, hex, dhex);
		if (n != (v1 ? 4 : 5))
			rc = HP_EFORMAT;
		else
			rc = catalog_entry(d, addr, len, name, hex, v1 ? NULL : dhex);
	}
	fclose(f);
	if (rc < 0)
		return hp_error(rc, "catalog %s: line %d is not a valid entry", d->catalog, lineno);
	if (d->nnamed)
		hp_log(HP_LOG_INFO, "recovered %" PRIu64 " named tensors from %s", d->nnamed, d->catalog);
	return 0;
}

struct hole_walk {
	struct hs_daemon *d;
	struct dregion *r;
	uint64_t next;          /* first byte not yet scrubbed */
};

/* Extents visited in address order: zero the gap before each one. */
static void scrub_gap(const void *node, VISIT v, void *arg)
{
	const struct dalloc *a = *(struct dalloc *const *)node;
	struct hole_walk *w = arg;

	if ((v != postorder && v != leaf) || region_of(w->d, a->addr) != w->r)
		return;
	if (a->addr > w->next)
		zero_extent(w->r, w->next, a->addr - w->next);
	w->next = a->addr + a->len;
}

int hs_daemon_scrub_free(struct hs_daemon *d)
{
	for (int i = 0; i < d->nreg; i++) {
		struct hole_walk w = { d, &d->reg[i], d->reg[i].start };
		if (w.r->fd < 0)
			continue; /* fresh anonymous memory is zero */
		twalk_r(d->by_addr, scrub_gap, &w);
		if (w.next < w.r->start + w.r->size)
			zero_extent(w.r, w.next, w.r->start + w.r->size - w.next);
	}
	return 0;
}
