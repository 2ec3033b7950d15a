/* Named extents over the daemons of a remote tier, and how a job finds its
 * daemons (--store, --hostfile, HPDLF_STORE, Slurm). */
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store/remote/lazy.h" /* first: renames the loaded functions */
#include <sodium.h>

#include "hpdlf/error.h"
#include "store/remote/tier_int.h"

static int call(struct rtier *t, int i, hs_msg *m, hs_msg **rep)
{
	struct rdaemon *d = &t->d[i];
	int rc;

	if (d->dead || !d->conn)
		return -EHOSTDOWN;
	rc = hs_rconn_call(d->conn, m, rep, (int)t->o.dead_ms);
	if (rc < 0 && d->conn->broken)
		hs_rt_check(t, i, 1);
	return rc;
}

/* Keyed BLAKE2b-256 over name, metadata, length and content: only holders
 * of the job's secret can make one that checks. */
static void digest_of(const struct rtier *t, const char *name, const void *meta, size_t meta_len, const void *buf,
		      uint64_t len, uint8_t out[HS_DIGEST_BYTES])
{
	crypto_generichash_state st;
	uint64_t ml = meta_len;

	crypto_generichash_init(&st, t->secret.kmem, HS_KEY_BYTES, HS_DIGEST_BYTES);
	crypto_generichash_update(&st, (const unsigned char *)"hpdlf-named-1", 14);
	crypto_generichash_update(&st, (const unsigned char *)name, strlen(name) + 1);
	crypto_generichash_update(&st, (const unsigned char *)&ml, sizeof ml);
	crypto_generichash_update(&st, meta, meta_len);
	crypto_generichash_update(&st, (const unsigned char *)&len, sizeof len);
	crypto_generichash_update(&st, buf, len);
	crypto_generichash_final(&st, out, HS_DIGEST_BYTES);
}

/* Name copy k of extent e on its daemon; the daemon re-registers it read-only
 * under a fresh key, which replaces the owner's in e. */
static int publish_copy(struct rtier *t, struct rext *e, int k, const char *name, const void *meta, size_t meta_len,
			const uint8_t *digest)
{
	Hpdlf__Store__Publish p = HPDLF__STORE__PUBLISH__INIT;
	hs_msg m = HPDLF__STORE__MSG__INIT, *rep = NULL;
	int rc;

	p.name = (char *)name;
	p.addr = e->daddr[k];
	p.len = e->len;
	p.meta.data = (uint8_t *)meta;
	p.meta.len = meta_len;
	p.digest.data = (uint8_t *)digest;
	p.digest.len = HS_DIGEST_BYTES;
	m.body_case = HPDLF__STORE__MSG__BODY_PUBLISH;
	m.publish = &p;
	rc = call(t, e->di[k], &m, &rep);
	if (rc == 0) {
		e->key[k] = rep->reply->key;
		e->base[k] = rep->reply->rma_base;
		hs_wire_free(rep);
	}
	return rc;
}

int hs_remote_put(struct hs_tier *base, const char *name, const void *buf, uint64_t len, const void *meta,
		  size_t meta_len)
{
	struct rtier *t = (struct rtier *)base;
	uint8_t digest[HS_DIGEST_BYTES];
	struct rext e;
	uint64_t addr;
	int rc;

	if (!hs_name_ok(name))
		return hp_error(HP_EUSAGE, "'%s' is not a valid tensor name (1..255 printable bytes, no '/')", name);
	if (meta_len > HS_META_MAX)
		return hp_error(HP_EUSAGE, "'%s': metadata of %zu bytes (limit %d)", name, meta_len, HS_META_MAX);
	rc = hs_remote_alloc(base, len, 1, &addr);
	if (rc < 0)
		return rc;
	rc = hs_tier_rw(base, HS_IO_WRITE, addr, (void *)buf, len);
	if (rc < 0) {
		hp_error_prefix(rc, "'%s': writing to the daemons", name);
		goto fail;
	}
	digest_of(t, name, meta, meta_len, buf, len, digest);
	pthread_mutex_lock(&t->mu);
	e = *hs_rt_extent_of(t, addr);
	pthread_mutex_unlock(&t->mu);
	for (int k = 0; k < e.n && rc == 0; k++)
		rc = publish_copy(t, &e, k, name, meta, meta_len, digest);
	if (rc < 0)
		goto fail; /* a copy already named stays: remove it by name */
	return hs_rt_add_extent(t, &e);
fail:
	base->ops->release(base, addr, len);
	return rc;
}

int hs_remote_get(struct hs_tier *base, const struct hs_remote_named *n, void *buf)
{
	struct rtier *t = (struct rtier *)base;
	uint8_t want[HS_DIGEST_BYTES];
	int rc = hs_tier_rw(base, HS_IO_READ, n->addr, buf, n->len);

	if (rc < 0)
		return hp_error(rc, "'%s': reading from daemon %s: %s", n->name, n->daemon, hp_strerror(rc));
	if (!n->has_digest)
		return 1;
	digest_of(t, n->name, n->meta, n->meta_len, buf, n->len, want);
	if (sodium_memcmp(want, n->digest, HS_DIGEST_BYTES) != 0)
		return hp_error(HP_ECORRUPT, "'%s' on daemon %s: its bytes or metadata changed since it was stored "
				"(digest mismatch); refusing them", n->name, n->daemon);
	return 0;
}

static void fill_named(struct rtier *t, int i, const Hpdlf__Store__Named *n, struct hs_remote_named *out)
{
	memset(out, 0, sizeof *out);
	snprintf(out->name, sizeof out->name, "%s", n->name);
	out->addr = rt_addr(i, n->addr & RT_ADDR_MASK);
	out->len = n->len;
	out->meta_len = n->meta.len <= sizeof out->meta ? n->meta.len : 0;
	memcpy(out->meta, n->meta.data, out->meta_len);
	out->has_digest = n->digest.len == HS_DIGEST_BYTES;
	if (out->has_digest)
		memcpy(out->digest, n->digest.data, HS_DIGEST_BYTES);
	snprintf(out->daemon, sizeof out->daemon, "%s", t->d[i].where);
	out->shared = n->shared;
}

/* One daemon's copy of a looked-up extent into e (its first copy, or the
 * second if it matches the first): 1 if taken. */
static int take_copy(struct rext *e, int i, const Hpdlf__Store__Named *n)
{
	if (e->n == 2 || (e->n == 1 && n->len != e->len))
		return 0;
	if (e->n == 0) {
		e->addr = rt_addr(i, n->addr & RT_ADDR_MASK);
		e->len = n->len;
	}
	e->di[e->n] = i;
	e->daddr[e->n] = n->addr & RT_ADDR_MASK;
	e->key[e->n] = n->key;
	e->base[e->n] = n->rma_base;
	e->n++;
	return 1;
}

int hs_remote_lookup(struct hs_tier *base, const char *name, struct hs_remote_named *out)
{
	struct rtier *t = (struct rtier *)base;
	Hpdlf__Store__Lookup l = HPDLF__STORE__LOOKUP__INIT;
	hs_msg m = HPDLF__STORE__MSG__INIT, *rep = NULL;
	struct rext e = { 0 };

	l.name = (char *)name;
	m.body_case = HPDLF__STORE__MSG__BODY_LOOKUP;
	m.lookup = &l;
	for (int i = 0; i < t->nd; i++) {
		if (call(t, i, &m, &rep) < 0)
			continue;
		const Hpdlf__Store__Named *n = rep->reply->n_named == 1 ? rep->reply->named[0] : NULL;
		/* A second copy (a replica) is where reads fail over to. */
		if (n && n->len == rep->reply->len && take_copy(&e, i, n) && e.n == 1)
			fill_named(t, i, n, out);
		hs_wire_free(rep);
	}
	if (!e.n)
		return hp_error(-ENOENT, "no tensor '%s' on any of the %d daemons", name, t->nd);
	return hs_rt_add_extent(t, &e);
}

int hs_remote_share(struct hs_tier *base, int daemon, const char *name, uint64_t len, uint64_t *addr)
{
	struct rtier *t = (struct rtier *)base;
	Hpdlf__Store__Share sh = HPDLF__STORE__SHARE__INIT;
	hs_msg m = HPDLF__STORE__MSG__INIT;
	struct rext e = { .len = len, .n = 1 };
	int rc;

	if (!hs_name_ok(name))
		return hp_error(HP_EUSAGE, "'%s' is not a valid tensor name (1..255 printable bytes, no '/')", name);
	if (daemon < 0 || daemon >= t->nd || len == 0 || len % HS_IO_ALIGN)
		return hp_error(HP_EUSAGE, "remote tier %s: a shared extent of %" PRIu64 " bytes on daemon %d",
				base->name, len, daemon);
	if ((rc = hs_rt_alloc_on(t, daemon, len, 0, &e, 0)) < 0)
		return hp_error_prefix(rc, "'%s' on daemon %s", name, t->d[daemon].where);
	e.addr = rt_addr(daemon, e.daddr[0]);
	sh.name = (char *)name;
	sh.addr = e.daddr[0];
	sh.len = len;
	m.body_case = HPDLF__STORE__MSG__BODY_SHARE;
	m.share = &sh;
	/* a daemon freshly allocates zeroed bytes (released ones are zeroed) */
	if ((rc = call(t, daemon, &m, NULL)) < 0 || (rc = hs_rt_add_extent(t, &e)) < 0) {
		hp_error_prefix(rc, "sharing '%s' on daemon %s", name, t->d[daemon].where);
		hs_rt_free_on(t, daemon, e.daddr[0], len);
		return rc;
	}
	__atomic_fetch_add(&t->nextents, 1, __ATOMIC_RELAXED);
	*addr = e.addr;
	return 0;
}

int hs_remote_open_shared(struct hs_tier *base, const char *name, uint64_t *addr, uint64_t *len)
{
	struct hs_remote_named n;
	int rc = hs_remote_lookup(base, name, &n);

	if (rc < 0)
		return rc;
	if (!n.shared)
		return hp_error(HP_EUSAGE, "'%s' on daemon %s is a read-only named tensor, not a shared extent", name,
				n.daemon);
	*addr = n.addr;
	*len = n.len;
	return 0;
}

int hs_remote_remove(struct hs_tier *base, const char *name)
{
	struct rtier *t = (struct rtier *)base;
	Hpdlf__Store__Remove r = HPDLF__STORE__REMOVE__INIT;
	hs_msg m = HPDLF__STORE__MSG__INIT;
	int removed = 0;

	r.name = (char *)name;
	m.body_case = HPDLF__STORE__MSG__BODY_REMOVE;
	m.remove = &r;
	for (int i = 0; i < t->nd; i++)
		removed += call(t, i, &m, NULL) == 0;
	if (!removed)
		return hp_error(-ENOENT, "no tensor '%s' on any of the %d daemons", name, t->nd);
	return removed;
}

int hs_remote_list(struct hs_tier *base, struct hs_remote_named **out)
{
	struct rtier *t = (struct rtier *)base;
	Hpdlf__Store__List l = HPDLF__STORE__LIST__INIT;
	hs_msg m = HPDLF__STORE__MSG__INIT, *rep = NULL;
	struct hs_remote_named *v = NULL;
	size_t n = 0;

	m.body_case = HPDLF__STORE__MSG__BODY_LIST;
	m.list = &l;
	for (int i = 0; i < t->nd; i++) {
		if (call(t, i, &m, &rep) < 0)
			continue;
		for (size_t k = 0; k < rep->reply->n_named; k++) {
			const Hpdlf__Store__Named *e = rep->reply->named[k];
			int dup = 0;
			for (size_t j = 0; j < n && !dup; j++)
				dup = !strcmp(v[j].name, e->name);
			if (dup)
				continue; /* a replica */
			struct hs_remote_named *nv = realloc(v, (n + 1) * sizeof *v);
			if (!nv) {
				hs_wire_free(rep);
				free(v);
				return -ENOMEM;
			}
			v = nv;
			fill_named(t, i, e, &v[n++]);
		}
		hs_wire_free(rep);
	}
	*out = v;
	return (int)n;
}

int hs_remote_shutdown_all(struct hs_tier *base)
{
	struct rtier *t = (struct rtier *)base;
	Hpdlf__Store__Shutdown s = HPDLF__STORE__SHUTDOWN__INIT;
	hs_msg m = HPDLF__STORE__MSG__INIT;
	int rc = 0;

	m.body_case = HPDLF__STORE__MSG__BODY_SHUTDOWN;
	m.shutdown = &s;
	for (int i = 0; i < t->nd; i++)
		if (!t->d[i].dead && t->d[i].conn) {
			int r = call(t, i, &m, NULL);
			rc = rc ? rc : r;
		}
	return rc;
}

/* Append "host[:port]" to a growing list, adding the default port. */
static int append(char **list, size_t *len, const char *item, unsigned port)
{
	char buf[300];
	const char *colon = strrchr(item, ':');
	int has_port = colon && (item[0] != '[' || colon > strchr(item, ']'));
	size_t n;

	if (has_port)
		snprintf(buf, sizeof buf, "%s", item);
	else
		snprintf(buf, sizeof buf, "%s:%u", item, port);
	n = strlen(buf);
	char *l = realloc(*list, *len + n + 2);
	if (!l)
		return -ENOMEM;
	if (*len)
		l[(*len)++] = ',';
	memcpy(l + *len, buf, n + 1);
	*len += n;
	*list = l;
	return 0;
}

static unsigned default_port(void)
{
	const char *p = getenv("HPDLF_STORE_PORT");
	unsigned long v = p ? strtoul(p, NULL, 10) : 0;

	return v > 0 && v < 65536 ? (unsigned)v : HS_REMOTE_DEFAULT_PORT;
}

static int read_hostfile(const char *path, char **out)
{
	FILE *f = fopen(path, "r");
	char line[512];
	size_t len = 0;
	int rc = 0;

	if (!f)
		return hp_error(-errno, "hostfile %s: %s", path, strerror(errno));
	while (rc == 0 && fgets(line, sizeof line, f)) {
		char *p = line, *e;
		if ((e = strchr(p, '#')))
			*e = 0;
		while (isspace((unsigned char)*p))
			p++;
		for (e = p + strlen(p); e > p && isspace((unsigned char)e[-1]);)
			*--e = 0;
		if (*p)
			rc = append(out, &len, p, default_port());
	}
	fclose(f);
	if (rc == 0 && !len)
		rc = hp_error(HP_EUSAGE, "hostfile %s lists no host", path);
	return rc;
}

int hs_remote_find_endpoints(const char *store, const char *hostfile, char **out)
{
	const char *env = getenv("HPDLF_STORE"), *nodes = getenv("SLURM_JOB_NODELIST");
	char *hosts = NULL, *save = NULL;
	size_t len = 0;
	int rc = 0;

	*out = NULL;
	if (store && *store)
		return (*out = strdup(store)) ? 0 : -ENOMEM;
	if (hostfile && *hostfile)
		return read_hostfile(hostfile, out);
	if (env && *env)
		return (*out = strdup(env)) ? 0 : -ENOMEM;
	if (!nodes)
		nodes = getenv("SLURM_NODELIST");
	if (!nodes || !*nodes)
		return hp_error(HP_EUSAGE, "no hpdlf-store daemons given: use --store HOST:PORT,..., --hostfile F or "
				"HPDLF_STORE (under Slurm they are found from SLURM_JOB_NODELIST)");
	if ((rc = hs_slurm_hostlist_expand(nodes, &hosts)) < 0)
		return rc;
	for (char *h = strtok_r(hosts, ",", &save); h && rc == 0; h = strtok_r(NULL, ",", &save))
		rc = append(out, &len, h, default_port());
	free(hosts);
	return rc;
}

static int append_plain(char **list, size_t *len, const char *item)
{
	size_t n = strlen(item);
	char *l = realloc(*list, *len + n + 2);

	if (!l)
		return -ENOMEM;
	if (*len)
		l[(*len)++] = ',';
	memcpy(l + *len, item, n + 1);
	*len += n;
	*list = l;
	return 0;
}

/* Expand one item that may hold bracket groups, appending to *o. */
static int expand_item(const char *item, char **o, size_t *len)
{
	const char *lb = strchr(item, '['), *rb;
	char prefix[256];

	if (!lb)
		return append_plain(o, len, item);
	rb = strchr(lb, ']');
	if (!rb || (size_t)(lb - item) >= sizeof prefix)
		return hp_error(HP_EUSAGE, "bad Slurm hostlist item '%s'", item);
	memcpy(prefix, item, (size_t)(lb - item));
	prefix[lb - item] = 0;
	const char *p = lb + 1;
	while (p < rb) {
		char *end;
		unsigned long a = strtoul(p, &end, 10), b = a;
		int width = (int)(end - p);
		if (end == p)
			return hp_error(HP_EUSAGE, "bad Slurm hostlist range in '%s'", item);
		if (*end == '-') {
			const char *q = end + 1;
			b = strtoul(q, &end, 10);
			if (end == q || b < a || b - a > 100000)
				return hp_error(HP_EUSAGE, "bad Slurm hostlist range in '%s'", item);
		}
		for (unsigned long v = a; v <= b; v++) {
			char next[512];
			snprintf(next, sizeof next, "%s%0*lu%s", prefix, width, v, rb + 1);
			int rc = expand_item(next, o, len);
			if (rc < 0)
				return rc;
		}
		p = *end == ',' ? end + 1 : end;
		if (p != rb && p[-1] != ',')
			return hp_error(HP_EUSAGE, "bad Slurm hostlist range in '%s'", item);
	}
	return 0;
}

int hs_slurm_hostlist_expand(const char *list, char **out)
{
	size_t len = 0, n = strlen(list);
	int depth = 0, rc = 0;
	char item[512];
	size_t k = 0;

	*out = NULL;
	for (size_t i = 0; i <= n && rc == 0; i++) {
		char c = list[i];
		if ((c == ',' && depth == 0) || c == 0) {
			item[k] = 0;
			if (k)
				rc = expand_item(item, out, &len);
			k = 0;
			continue;
		}
		depth += c == '[' ? 1 : c == ']' ? -1 : 0;
		if (depth < 0 || depth > 1 || k + 1 >= sizeof item)
			rc = hp_error(HP_EUSAGE, "bad Slurm hostlist '%s'", list);
		else
			item[k++] = c;
	}
	if (rc == 0 && depth)
		rc = hp_error(HP_EUSAGE, "bad Slurm hostlist '%s'", list);
	if (rc == 0 && !*out)
		rc = hp_error(HP_EUSAGE, "empty Slurm hostlist");
	if (rc < 0) {
		free(*out);
		*out = NULL;
	}
	return rc;
}
