/* Remote tier: the DRAM (and PMEM) of hpdlf-store daemons behind the tier
 * interface.  Placement by capacity-weighted rendezvous hashing, optional
 * replicas on distinct daemons, a keepalive that declares a silent daemon
 * dead within dead_ms + keepalive_ms, and named extents. */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <search.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hpdlf/error.h"
#include "store/remote/lazy.h"
#include "store/remote/tier_int.h"

void hs_remote_opts_init(struct hs_remote_opts *o)
{
	memset(o, 0, sizeof *o);
	o->replicas = 1;
	o->connect_timeout_ms = 3000;
	o->keepalive_ms = 250;
	o->dead_ms = 1500;
	o->max_inflight = 32;
}

static int ext_cmp(const void *a, const void *b)
{
	const struct rext *x = a, *y = b;

	/* x is a point (len 0) or an extent; extents never overlap. */
	if (x->addr < y->addr)
		return x->len && x->addr + x->len > y->addr ? 0 : -1;
	return x->addr < y->addr + y->len || (x->addr == y->addr) ? 0 : 1;
}

const struct rext *hs_rt_extent_of(struct rtier *t, uint64_t a)
{
	struct rext key = { .addr = a };
	void **p = tfind(&key, &t->extents, ext_cmp);

	return p ? *p : NULL;
}

int hs_rt_add_extent(struct rtier *t, const struct rext *e)
{
	struct rext *r = malloc(sizeof *r);
	void **p;

	if (!r)
		return -ENOMEM;
	*r = *e;
	pthread_mutex_lock(&t->mu);
	p = tsearch(r, &t->extents, ext_cmp);
	if (p && *p != r) {
		**(struct rext **)p = *e; /* known already (a second lookup): new keys */
		free(r);
	}
	pthread_mutex_unlock(&t->mu);
	if (!p)
		free(r);
	return p ? 0 : -ENOMEM;
}

/* A control request to daemon i; a transport failure declares it dead. */
static int rpc(struct rtier *t, int i, hs_msg *m, hs_msg **rep, int try)
{
	struct rdaemon *d = &t->d[i];
	hs_msg *mine = NULL;
	int rc;

	if (d->dead || !d->conn)
		return hp_error(-EHOSTDOWN, "daemon %s is gone (%s)", d->where, d->why);
	if (!rep)
		rep = &mine; /* the reply still tells the free capacity */
	rc = try ? hs_rconn_trycall(d->conn, m, rep, (int)t->o.dead_ms)
		 : hs_rconn_call(d->conn, m, rep, (int)t->o.dead_ms);
	if (rc < 0 && d->conn->broken) {
		struct rreq *done = NULL;
		char why[256];
		snprintf(why, sizeof why, "%s", hp_errmsg());
		/* the caller may hold the store's lock (a free under hs_pin), which
		 * completing the failed transfers takes: the progress thread
		 * delivers them */
		pthread_mutex_lock(&t->mu);
		hs_rt_mark_dead(t, i, why, &done);
		if (t->progress_started) {
			hs_rt_defer_done(t, done);
			done = NULL;
		}
		pthread_mutex_unlock(&t->mu);
		hs_rt_deliver(t, done);
		if (t->fab.cq)
			fi_cq_signal(t->fab.cq);
		return hp_error(-EHOSTDOWN, "daemon %s is gone (%s)", d->where, why);
	}
	if (rc == 0 && (*rep)->reply->free_bytes <= d->capacity)
		d->free_bytes = (*rep)->reply->free_bytes;
	if (rc == 0)
		d->last_ok_ms = hs_now_ms();
	hs_wire_free(mine);
	return rc;
}

int hs_rt_check(struct rtier *t, int i, int wait)
{
	Hpdlf__Store__Stat st = HPDLF__STORE__STAT__INIT;
	hs_msg m = HPDLF__STORE__MSG__INIT, *rep = NULL;
	int rc;

	m.body_case = HPDLF__STORE__MSG__BODY_STAT;
	m.stat = &st;
	rc = rpc(t, i, &m, &rep, !wait);
	if (rc == 0)
		hs_wire_free(rep);
	return t->d[i].dead;
}

static void *keepalive_main(void *arg)
{
	struct rtier *t = arg;

	pthread_mutex_lock(&t->ka_mu);
	while (!t->stopping) {
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_nsec += (long)t->o.keepalive_ms * 1000000L;
		ts.tv_sec += ts.tv_nsec / 1000000000L;
		ts.tv_nsec %= 1000000000L;
		pthread_cond_timedwait(&t->ka_cv, &t->ka_mu, &ts);
		if (t->stopping)
			break;
		pthread_mutex_unlock(&t->ka_mu);
		for (int i = 0; i < t->nd; i++)
			if (!t->d[i].dead && t->d[i].conn)
				hs_rt_check(t, i, 0);
		hs_rt_rejoin(t);
		pthread_mutex_lock(&t->ka_mu);
	}
	pthread_mutex_unlock(&t->ka_mu);
	return NULL;
}

static uint64_t mix(uint64_t x)
{
	x += 0x9e3779b97f4a7c15ull;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

/* Daemons that may take len bytes, best first: weighted rendezvous hashing
 * (score -w/ln(u)) with the free capacity as the weight, so placement
 * follows room and skips full or dead daemons. */
static int candidates(struct rtier *t, uint64_t key, uint64_t len, int *order)
{
	double score[HS_REMOTE_MAX_DAEMONS];
	int n = 0;

	for (int i = 0; i < t->nd; i++) {
		struct rdaemon *d = &t->d[i];
		if (d->dead || !d->conn || d->free_bytes < len)
			continue;
		double u = (double)((mix(key ^ mix((uint64_t)i + 1)) >> 11) + 1) * 0x1p-53;
		double s = -(double)d->free_bytes / log(u);
		int k = n++;
		while (k > 0 && score[k - 1] < s) {
			score[k] = score[k - 1];
			order[k] = order[k - 1];
			k--;
		}
		score[k] = s;
		order[k] = i;
	}
	return n;
}

int hs_rt_alloc_on(struct rtier *t, int i, uint64_t len, int persistent, struct rext *e, int k)
{
	Hpdlf__Store__Alloc a = HPDLF__STORE__ALLOC__INIT;
	hs_msg m = HPDLF__STORE__MSG__INIT, *rep = NULL;
	int rc;

	a.len = len;
	a.persistent = persistent;
	m.body_case = HPDLF__STORE__MSG__BODY_ALLOC;
	m.alloc = &a;
	rc = rpc(t, i, &m, &rep, 0);
	if (rc == 0) {
		e->di[k] = i;
		e->daddr[k] = rep->reply->addr;
		e->key[k] = rep->reply->key;
		e->base[k] = rep->reply->rma_base;
		if (rep->reply->len != len || e->daddr[k] > RT_ADDR_MASK - len)
			rc = hp_error(HP_EPROTO, "daemon %s: bad alloc reply", t->d[i].where);
		hs_wire_free(rep);
	} else if (rc == -ENOSPC) {
		t->d[i].free_bytes = 0;
	}
	return rc;
}

int hs_rt_free_on(struct rtier *t, int i, uint64_t daddr, uint64_t len)
{
	Hpdlf__Store__Free f = HPDLF__STORE__FREE__INIT;
	hs_msg m = HPDLF__STORE__MSG__INIT;

	if (t->d[i].dead)
		return 0; /* its memory went with it */
	f.addr = daddr;
	f.len = len;
	m.body_case = HPDLF__STORE__MSG__BODY_FREE;
	m.free = &f;
	int rc = rpc(t, i, &m, NULL, 0);
	return rc == -EHOSTDOWN ? 0 : rc;
}

static int place(struct rtier *t, uint64_t len, int persistent, uint64_t *addr)
{
	int order[HS_REMOTE_MAX_DAEMONS], n;
	uint64_t key = mix(__atomic_fetch_add(&t->alloc_seq, 1, __ATOMIC_RELAXED));
	struct rext e = { .len = len };

	n = candidates(t, key, len, order);
	for (int k = 0; k < n && e.n < t->o.replicas; k++)
		if (hs_rt_alloc_on(t, order[k], len, persistent, &e, e.n) == 0)
			e.n++;
	if (e.n < t->o.replicas) {
		for (int k = 0; k < e.n; k++)
			hs_rt_free_on(t, e.di[k], e.daddr[k], len);
		return hp_error(-ENOSPC, "remote tier %s: no room for %" PRIu64 " bytes%s on the %d daemons",
				t->base.name, len, t->o.replicas > 1 ? " on two distinct daemons" : "", t->nd);
	}
	e.addr = rt_addr(e.di[0], e.daddr[0]);
	if (hs_rt_add_extent(t, &e) < 0) {
		for (int k = 0; k < e.n; k++)
			hs_rt_free_on(t, e.di[k], e.daddr[k], len);
		return -ENOMEM;
	}
	*addr = e.addr;
	__atomic_fetch_add(&t->nextents, 1, __ATOMIC_RELAXED);
	return 0;
}

/* ops->place: the daemons own their space (tier.h: the exception). */
static int rt_place(struct hs_tier *base, uint64_t len, uint64_t *addr)
{
	struct rtier *t = (struct rtier *)base;

	if (len == 0 || len % HS_IO_ALIGN)
		return hp_error(HP_EUSAGE, "remote tier: extent of %" PRIu64 " bytes", len);
	return place(t, len, 0, addr);
}

int hs_remote_alloc(struct hs_tier *base, uint64_t len, int persistent, uint64_t *addr)
{
	if (len == 0 || len % HS_IO_ALIGN)
		return hp_error(HP_EUSAGE, "remote tier: extent of %" PRIu64 " bytes", len);
	return place((struct rtier *)base, len, persistent, addr);
}

static int rt_release(struct hs_tier *base, uint64_t addr, uint64_t len)
{
	struct rtier *t = (struct rtier *)base;
	int di = (int)(addr >> HS_REMOTE_ADDR_BITS) - 1, rc = 0;
	struct rext *e = NULL, key = { .addr = addr };

	if (di < 0 || di >= t->nd || !t->d[di].conn)
		return hp_error(HP_EINTERNAL, "remote tier: free of 0x%" PRIx64 ", not an address of this tier", addr);
	pthread_mutex_lock(&t->mu);
	void **p = tfind(&key, &t->extents, ext_cmp);
	if (p && (e = *p)->addr == addr && e->len == len)
		tdelete(e, &t->extents, ext_cmp);
	else
		e = NULL;
	pthread_mutex_unlock(&t->mu);
	if (!e)
		return hp_error(HP_EINTERNAL, "remote tier: free of [0x%" PRIx64 ", +%" PRIu64 "), not an extent of "
				"this tier", addr, len);
	for (int k = 0; k < e->n; k++) {
		int rc2 = hs_rt_free_on(t, e->di[k], e->daddr[k], len);
		rc = rc ? rc : rc2;
	}
	free(e);
	if (rc == 0)
		__atomic_fetch_sub(&t->nextents, 1, __ATOMIC_RELAXED);
	return rc < 0 ? (rc == HP_EINTERNAL ? rc : hp_error_prefix(rc, "remote tier free")) : 0;
}

static int rt_stats(struct hs_tier *base, struct hs_tier_stats *st)
{
	struct rtier *t = (struct rtier *)base;

	st->capacity = st->used = 0;
	pthread_mutex_lock(&t->mu);
	for (int i = 0; i < t->nd; i++) {
		if (t->d[i].dead || !t->d[i].conn)
			continue;
		st->capacity += t->d[i].capacity;
		st->used += t->d[i].capacity - t->d[i].free_bytes;
	}
	pthread_mutex_unlock(&t->mu);
	st->chunks = t->nextents;
	return 0;
}

static void rt_close(struct hs_tier *base)
{
	struct rtier *t = (struct rtier *)base;

	if (t->keepalive_started) {
		pthread_mutex_lock(&t->ka_mu);
		t->stopping = 1;
		pthread_cond_signal(&t->ka_cv);
		pthread_mutex_unlock(&t->ka_mu);
		pthread_join(t->keepalive, NULL);
	}
	if (t->fab_open)
		hs_rt_rma_stop(t);
	hs_fab_close(&t->fab);
	/* The endpoint is closed: segments it never reported can go. */
	for (int i = 0; i < t->nd; i++) {
		while (t->d[i].posted) {
			struct seg *s = t->d[i].posted;
			t->d[i].posted = s->next;
			if (--s->req->refs == 0 && s->req->finished == 2)
				free(s->req);
			if (s->lmr)
				fi_close(&s->lmr->fid);
			free(s);
		}
		hs_rconn_close(t->d[i].conn);
		for (struct stale_conn *c = t->d[i].stale, *next; c; c = next) {
			next = c->next;
			hs_rconn_close(c->conn);
			free(c);
		}
	}
	tdestroy(t->extents, free);
	pthread_mutex_destroy(&t->mu);
	pthread_mutex_destroy(&t->ka_mu);
	pthread_cond_destroy(&t->ka_cv);
	free(t->d);
	hs_secret_free(&t->secret);
	free(t->endpoints);
	free(t->token_path);
	free(t);
}

/* Extents every copy of which was on a dead daemon: gone for good. */
struct lost {
	const struct rtier *t;
	uint64_t n, bytes;
	int di;                 /* a daemon that held some, for the message */
};

static void count_lost(const void *node, VISIT which, void *arg)
{
	const struct rext *e = *(const struct rext *const *)node;
	struct lost *l = arg;

	if (which != postorder && which != leaf)
		return;
	for (int k = 0; k < e->n; k++)
		if (!l->t->d[e->di[k]].dead)
			return;
	l->n++;
	l->bytes += e->len;
	l->di = e->di[0];
}

uint64_t hs_rt_lost_extents(const struct rtier *t)
{
	struct lost l = { .t = t, .di = -1 };

	twalk_r(t->extents, count_lost, &l);
	return l.n;
}

static int rt_health(struct hs_tier *base)
{
	struct rtier *t = (struct rtier *)base;
	struct lost l = { .t = t, .di = -1 };
	int dead = 0;

	pthread_mutex_lock(&t->mu);
	for (int i = 0; i < t->nd; i++)
		dead += t->d[i].dead;
	if (dead) /* a walk only once something died: runs call this every step */
		twalk_r(t->extents, count_lost, &l);
	pthread_mutex_unlock(&t->mu);
	if (!l.n)
		return 0;
	return hp_error(-EHOSTDOWN, "remote tier %s: daemon %s died holding the only copy of %" PRIu64 " chunks "
			"(%" PRIu64 " bytes) of this run's tensors (%s); resume from the last checkpoint "
			"(--replicas 2 keeps a second copy)", t->base.name, t->d[l.di].where, l.n, l.bytes,
			t->d[l.di].why);
}

/* ops->copies: live copies of the extent at a, and how many it was given. */
static int rt_copies(struct hs_tier *base, uint64_t a, int *wanted)
{
	struct rtier *t = (struct rtier *)base;
	int live = 0;

	pthread_mutex_lock(&t->mu);
	const struct rext *e = hs_rt_extent_of(t, a);
	*wanted = e ? e->n : 1;
	for (int k = 0; e && k < e->n; k++)
		live += !t->d[e->di[k]].dead;
	pthread_mutex_unlock(&t->mu);
	return e ? live : -ENOENT;
}

static uint64_t rt_epoch(struct hs_tier *base)
{
	struct rtier *t = (struct rtier *)base;

	return __atomic_load_n(&t->deaths, __ATOMIC_ACQUIRE);
}

static const struct hs_tier_ops remote_ops = {
	.kind = "remote",
	.close = rt_close,
	.place = rt_place,
	.release = rt_release,
	.submit = hs_rt_submit,
	.stats = rt_stats,
	.health = rt_health,
	.copies = rt_copies,
	.epoch = rt_epoch,
};

/* Split "a:1,b:2" into the daemon table. */
static int parse_daemons(struct rtier *t, const char *list)
{
	char *copy = strdup(list), *save = NULL;
	int rc = 0;

	if (!copy)
		return -ENOMEM;
	t->d = calloc(HS_REMOTE_MAX_DAEMONS, sizeof *t->d);
	for (char *tok = strtok_r(copy, ", \t\n", &save); t->d && tok; tok = strtok_r(NULL, ", \t\n", &save)) {
		if (t->nd == HS_REMOTE_MAX_DAEMONS) {
			rc = hp_error(HP_EUSAGE, "remote tier: more than %d daemons", HS_REMOTE_MAX_DAEMONS);
			break;
		}
		char host[256];
		unsigned port;
		if ((rc = hs_split_hostport(tok, host, sizeof host, &port, 0)) < 0)
			break;
		snprintf(t->d[t->nd++].where, sizeof t->d[0].where, "%s", tok);
	}
	free(copy);
	if (!t->d)
		return -ENOMEM;
	if (!rc && t->nd == 0)
		rc = hp_error(HP_EUSAGE, "remote tier: no daemon given");
	return rc;
}

static int connect_all(struct rtier *t)
{
	int reached = 0;

	for (int i = 0; i < t->nd; i++) {
		struct rdaemon *d = &t->d[i];
		int rc = hs_rconn_open(d->where, &t->secret, (int)t->o.connect_timeout_ms, &d->conn);
		if (rc < 0) {
			if (!t->o.skip_unreachable || rc == HP_EAUTH || rc == HP_EPROTO)
				return rc;
			d->dead = 1;
			snprintf(d->why, sizeof d->why, "%s", hp_errmsg());
			hp_log(HP_LOG_WARN, "remote tier: skipping %s", d->why);
			continue;
		}
		d->capacity = d->free_bytes = d->conn->capacity;
		d->last_ok_ms = hs_now_ms();
		reached++;
	}
	return reached ? 0 : hp_error(-EHOSTUNREACH, "remote tier: no daemon reachable");
}

static int open_fabric(struct rtier *t)
{
	const char *prov = t->o.provider;
	int rc;

	for (int i = 0; i < t->nd; i++) {
		struct hs_rconn *c = t->d[i].conn;
		if (!c)
			continue;
		if (!prov)
			prov = c->provider;
		else if (strcmp(prov, c->provider))
			return hp_error(HP_EUSAGE, "daemon %s uses provider %s, not %s (all must use the same one)",
					c->where, c->provider, prov);
	}
	rc = hs_fab_open(&t->fab, prov, 0, NULL);
	if (rc < 0)
		return rc;
	t->fab_open = 1;
	for (int i = 0; i < t->nd; i++) {
		struct hs_rconn *c = t->d[i].conn;
		if (c && (rc = hs_fab_av_insert(&t->fab, c->fabric_addr, c->addrlen, &t->d[i].fa)) < 0)
			return hp_error_prefix(rc, "daemon %s", c->where);
	}
	t->max_seg = t->o.max_segment ? t->o.max_segment : t->fab.max_msg;
	if (t->max_seg > (1u << 30))
		t->max_seg = 1u << 30;
	t->max_seg &= ~(size_t)(HS_IO_ALIGN - 1);
	if (t->max_seg == 0)
		t->max_seg = HS_IO_ALIGN;
	if (t->o.max_inflight > t->fab.tx_size)
		t->o.max_inflight = (unsigned)t->fab.tx_size;
	return 0;
}

static int rt_setup(struct rtier *t, const struct hs_tier_config *cfg)
{
	const char *list = t->o.endpoints ? t->o.endpoints : cfg->path;
	char *found = NULL;
	int rc;

	if (cfg->reserved)
		return hp_error(HP_EUSAGE, "remote tier: no reserved head (it keeps nothing across runs)");
	if (t->o.replicas < 1 || t->o.replicas > 2)
		return hp_error(HP_EUSAGE, "remote tier: replicas must be 1 or 2, not %d", t->o.replicas);
	if (!list || !*list) {
		if ((rc = hs_remote_find_endpoints(NULL, NULL, &found)) < 0)
			return rc;
		list = found;
	}
	rc = parse_daemons(t, list);
	t->endpoints = strdup(list);
	free(found);
	if (rc < 0)
		return rc;
	/* kept for hs_remote_reopen: the caller's strings need not outlive the open */
	t->token_path = t->o.token_file ? strdup(t->o.token_file) : NULL;
	if (!t->endpoints || (t->o.token_file && !t->token_path))
		return -ENOMEM;
	t->o.endpoints = t->endpoints;
	t->o.token_file = t->token_path;
	if ((rc = hs_secret_load(t->o.token_file, &t->secret)) < 0 || (rc = connect_all(t)) < 0)
		return rc;
	/* Keep the leases alive while the fabric opens (provider start-up is slow). */
	if ((rc = pthread_create(&t->keepalive, NULL, keepalive_main, t)))
		return hp_error(-rc, "remote tier: cannot start the keepalive thread");
	t->keepalive_started = 1;
	if ((rc = open_fabric(t)) < 0)
		return rc;
	if (t->o.replicas == 2 && t->nd < 2)
		return hp_error(HP_EUSAGE, "remote tier: 2 replicas need at least 2 daemons, %d given", t->nd);
	for (int i = 0; i < t->nd; i++) {
		t->base.capacity += t->d[i].capacity;
		if (t->d[i].conn)
			hs_rt_check(t, i, 1); /* learn the free capacity */
	}
	return hs_rt_rma_start(t);
}

int hs_tier_remote_open(const struct hs_tier_config *cfg, struct hs_tier **out)
{
	struct rtier *t;
	int rc;

	if ((rc = hs_remote_libs_load()) < 0) /* the first remote open maps libfabric */
		return rc;
	if (!(t = calloc(1, sizeof *t)))
		return -ENOMEM;
	if (cfg->ext)
		t->o = *(const struct hs_remote_opts *)cfg->ext;
	else
		hs_remote_opts_init(&t->o);
	if (!t->o.keepalive_ms)
		t->o.keepalive_ms = 250;
	if (!t->o.dead_ms)
		t->o.dead_ms = 1500;
	if (!t->o.connect_timeout_ms)
		t->o.connect_timeout_ms = 3000;
	if (!t->o.max_inflight)
		t->o.max_inflight = 32;
	if (!t->o.replicas)
		t->o.replicas = 1;
	hs_tier_init(&t->base, &remote_ops, HS_TIER_REMOTE, cfg);
	t->base.capacity = 0;
	pthread_mutex_init(&t->mu, NULL);
	pthread_mutex_init(&t->ka_mu, NULL);
	pthread_cond_init(&t->ka_cv, NULL);
	rc = rt_setup(t, cfg);
	if (rc < 0) {
		rt_close(&t->base);
		return rc;
	}
	*out = &t->base;
	return 0;
}

/* The public spec (hs_tier_spec.remote): daemons found as
 * hs_remote_find_endpoints does, defaults for the rest.  An optional tier
 * nobody answers for is 0 with *out NULL; the message stays to say why. */
int hs_tier_remote_open_spec(const struct hs_remote_spec *r, const char *name, struct hs_tier **out)
{
	struct hs_remote_opts ro;
	struct hs_tier_config cfg = { .name = name, .ext = &ro };
	char *eps = NULL;
	int rc;

	*out = NULL;
	rc = hs_remote_find_endpoints(r->daemons, r->hostfile, &eps);
	if (rc < 0)
		return r->optional ? 0 : rc;
	hs_remote_opts_init(&ro);
	ro.endpoints = eps;
	ro.token_file = r->token_file;
	ro.replicas = r->replicas > 0 ? r->replicas : 1;
	ro.skip_unreachable = r->skip_unreachable || r->optional;
	rc = hs_tier_remote_open(&cfg, out);
	free(eps);
	/* A bad token file is the user's to fix, not a daemon that did not answer. */
	if (rc < 0 && r->optional && rc != HP_EUSAGE) {
		*out = NULL;
		return 0;
	}
	return rc;
}

int hs_remote_daemon_of(struct hs_tier *base, uint64_t addr, char *buf, size_t len)
{
	struct rtier *t = (struct rtier *)base;
	int di = (int)(addr >> HS_REMOTE_ADDR_BITS) - 1;

	if (di < 0 || di >= t->nd)
		return hp_error(HP_EUSAGE, "0x%" PRIx64 " is not an address of remote tier %s", addr, base->name);
	snprintf(buf, len, "%s", t->d[di].where);
	pthread_mutex_lock(&t->mu);
	int dead = t->d[di].dead;
	pthread_mutex_unlock(&t->mu);
	return dead;
}

int hs_remote_dead_count(struct hs_tier *base)
{
	struct rtier *t = (struct rtier *)base;
	int n = 0;

	pthread_mutex_lock(&t->mu);
	for (int i = 0; i < t->nd; i++)
		n += t->d[i].dead;
	pthread_mutex_unlock(&t->mu);
	return n;
}

int hs_remote_daemons(struct hs_tier *base)
{
	return ((struct rtier *)base)->nd;
}

int hs_remote_daemon_where(struct hs_tier *base, int i, char *buf, size_t len)
{
	struct rtier *t = (struct rtier *)base;

	if (i < 0 || i >= t->nd)
		return hp_error(-ENOENT, "remote tier %s has no daemon %d", base->name, i);
	return hs_remote_daemon_of(base, rt_addr(i, 0), buf, len);
}

int hs_remote_reopen(struct hs_tier *base, const char *name, struct hs_tier **out)
{
	struct rtier *t = (struct rtier *)base;
	struct hs_remote_opts o = t->o;
	struct hs_tier_config cfg = { .name = name, .ext = &o };

	o.endpoints = t->endpoints;
	o.token_file = t->token_path;
	o.replicas = 1;
	return hs_tier_remote_open(&cfg, out);
}
