/* hpdlf-store daemon: the allocation table and the requests of authenticated
 * clients (alloc, free, stat, publish, lookup, remove, list, shutdown), and
 * the catalog of named extents on a persistent region. */
#include <errno.h>
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

/* Return an extent to its region and forget it. */
static void release(struct hs_daemon *d, struct dalloc *a)
{
	struct dregion *r = region_of(d, a->addr);

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
	}
	d->n.bytes_freed += a->len;
	if (r && hs_extents_free(r->ext, a->addr, a->len) == 0 && r->fd < 0 &&
	    !(d->fab.mr_mode & (FI_MR_ALLOCATED | FI_MR_LOCAL)))
		/* Pages go back to the node (and the next owner sees zeroes); not for
		 * providers that pinned the region (the NIC would keep the old pages). */
		madvise(r->mem + (a->addr - r->start), a->len, MADV_DONTNEED);
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
	if (c->named ? a->name != NULL : (a->owner == c->owner && !a->name))
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
	g = region_of(d, addr);
	g->allocs++;
	g->bytes_allocated += m->len;
	d->n.allocs++;
	d->n.bytes_allocated += m->len;
	r->addr = addr;
	r->len = m->len;
	return 0;
}

/* The extent at addr of exactly len bytes that client c may change. */
static struct dalloc *owned(struct hs_daemon *d, struct dclient *c, uint64_t addr, uint64_t len, char *text,
			    size_t tlen)
{
	struct dalloc *a = find_addr(d, addr);

	if (!a || a->len != len || a->owner != c->id || a->name) {
		snprintf(text, tlen, "no extent [%" PRIu64 ", +%" PRIu64 ") of this client on daemon %s", addr, len,
			 d->bound);
		return NULL;
	}
	return a;
}

static int do_free(struct hs_daemon *d, struct dclient *c, const Hpdlf__Store__Free *m, char *text, size_t tlen)
{
	struct dalloc *a = owned(d, c, m->addr, m->len, text, tlen);

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

static int do_publish(struct hs_daemon *d, struct dclient *c, const Hpdlf__Store__Publish *m, char *text,
		      size_t tlen)
{
	struct dalloc *a;

	if (!hs_name_ok(m->name)) {
		snprintf(text, tlen, "publish: bad name (1..255 printable bytes, no '/')");
		return HP_EUSAGE;
	}
	if (m->meta.len > HS_META_MAX) {
		snprintf(text, tlen, "publish: metadata of %zu bytes (limit %d)", m->meta.len, HS_META_MAX);
		return HP_EUSAGE;
	}
	if (find_name(d, m->name)) {
		snprintf(text, tlen, "'%s' already exists on daemon %s", m->name, d->bound);
		return -EEXIST;
	}
	if (!(a = owned(d, c, m->addr, m->len, text, tlen)))
		return -ENOENT;
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
	}
	return n;
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
	case HPDLF__STORE__MSG__BODY_PUBLISH: rc = do_publish(d, c, m->publish, text, tlen); break;
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

/* Catalog: one line per named extent, "addr len name metahex", replaced
 * atomically (write, fsync, rename) after each change. */
int hs_daemon_catalog_save(struct hs_daemon *d)
{
	struct collector col = { .named = 1 };
	char tmp[700];
	FILE *f;
	int rc = collect_all(d, &col);

	if (rc < 0)
		return rc;
	snprintf(tmp, sizeof tmp, "%s.tmp", d->catalog);
	f = fopen(tmp, "w");
	if (!f) {
		free(col.v);
		return hp_error(-errno, "catalog %s: %s", tmp, strerror(errno));
	}
	fprintf(f, "hpdlf-store-catalog 1\n");
	for (size_t i = 0; i < col.n; i++) {
		struct dalloc *a = col.v[i];
		struct dregion *r = region_of(d, a->addr);
		if (!r || r->fd < 0)
			continue; /* DRAM: does not outlive the daemon */
		fprintf(f, "%" PRIu64 " %" PRIu64 " %s ", a->addr, a->len, a->name);
		for (size_t k = 0; k < a->meta_len; k++)
			fprintf(f, "%02x", a->meta[k]);
		fprintf(f, "%s\n", a->meta_len ? "" : "-");
	}
	free(col.v);
	rc = fflush(f) || fsync(fileno(f)) ? -errno : 0;
	if (fclose(f) && !rc)
		rc = -errno;
	if (!rc && rename(tmp, d->catalog) < 0)
		rc = -errno;
	return rc < 0 ? hp_error(rc, "catalog %s: %s", d->catalog, strerror(-rc)) : 0;
}

static int catalog_entry(struct hs_daemon *d, uint64_t addr, uint64_t len, const char *name, const char *hex)
{
	struct dregion *r = region_of(d, addr);
	size_t hl = strcmp(hex, "-") ? strlen(hex) : 0;
	struct dalloc *a;
	int rc;

	if (!r || r->fd < 0 || len == 0 || len % HS_IO_ALIGN || addr - r->start + len > r->size ||
	    !hs_name_ok(name) || hl % 2 || hl / 2 > HS_META_MAX || find_name(d, name))
		return HP_EFORMAT;
	if ((rc = hs_extents_claim(r->ext, addr, len)) < 0)
		return HP_EFORMAT;
	if ((rc = record(d, addr, len, 0, &a)) < 0)
		return rc;
	a->name = strdup(name);
	a->meta = malloc(hl / 2 + 1);
	if (!a->name || !a->meta)
		return -ENOMEM;
	for (size_t k = 0; k < hl / 2; k++) {
		unsigned v;
		if (sscanf(hex + 2 * k, "%2x", &v) != 1)
			return HP_EFORMAT;
		a->meta[k] = (uint8_t)v;
	}
	a->meta_len = hl / 2;
	if (!tsearch(a, &d->by_name, by_name))
		return -ENOMEM;
	d->nnamed++;
	r->named++;
	return 0;
}

int hs_daemon_catalog_load(struct hs_daemon *d)
{
	FILE *f = fopen(d->catalog, "r");
	char line[2048], name[HS_NAME_MAX + 2], hex[2 * HS_META_MAX + 2];
	uint64_t addr, len;
	int rc = 0, lineno = 1;

	if (!f)
		return errno == ENOENT ? 0 : hp_error(-errno, "catalog %s: %s", d->catalog, strerror(errno));
	if (!fgets(line, sizeof line, f) || strcmp(line, "hpdlf-store-catalog 1\n"))
		rc = HP_EFORMAT;
	while (!rc && fgets(line, sizeof line, f)) {
		lineno++;
		if (sscanf(line, "%" SCNu64 " %" SCNu64 " %256s %1025s", &addr, &len, name, hex) != 4)
			rc = HP_EFORMAT;
		else
			rc = catalog_entry(d, addr, len, name, hex);
	}
	fclose(f);
	if (rc < 0)
		return hp_error(rc, "catalog %s: line %d is not a valid entry", d->catalog, lineno);
	if (d->nnamed)
		hp_log(HP_LOG_INFO, "recovered %" PRIu64 " named tensors from %s", d->nnamed, d->catalog);
	return 0;
}
