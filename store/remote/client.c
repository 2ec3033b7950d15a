/* Client side of the control protocol: connect, authenticate, request. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "store/remote/lazy.h" /* first: renames the loaded functions */
#include <sodium.h>

#include "hpdlf/error.h"
#include "store/remote/client.h"
#include "store/remote/remote.h"

static int reply_error(const char *where, const hs_msg *m, const char *what)
{
	if (m->body_case == HPDLF__STORE__MSG__BODY_REPLY && m->reply->status < 0)
		return hp_error(m->reply->status, "%s", m->reply->message[0] ? m->reply->message : what);
	return hp_error(HP_EPROTO, "daemon %s: unexpected answer to %s", where, what);
}

static int hello(struct hs_rconn *c, uint8_t cn[HS_NONCE_BYTES], uint8_t sn[HS_NONCE_BYTES], int tmo)
{
	Hpdlf__Store__Hello h = HPDLF__STORE__HELLO__INIT;
	hs_msg m = HPDLF__STORE__MSG__INIT, *r = NULL;
	char who[128], host[64] = "?";
	int rc;

	gethostname(host, sizeof host - 1);
	snprintf(who, sizeof who, "%s:%d", host, (int)getpid());
	hs_random(cn, HS_NONCE_BYTES);
	h.version = HS_WIRE_VERSION;
	h.client_nonce.data = cn;
	h.client_nonce.len = HS_NONCE_BYTES;
	h.client = who;
	m.body_case = HPDLF__STORE__MSG__BODY_HELLO;
	m.hello = &h;
	if ((rc = hs_wire_send(c->fd, &m, tmo)) < 0 || (rc = hs_wire_recv(c->fd, &r, tmo)) < 0)
		return hp_error_prefix(rc, "daemon %s: hello", c->where);
	if (r->body_case != HPDLF__STORE__MSG__BODY_HELLO_REPLY)
		rc = reply_error(c->where, r, "hello");
	else if (r->hello_reply->version != HS_WIRE_VERSION)
		rc = hp_error(HP_EPROTO, "daemon %s speaks protocol version %u, this client %d", c->where,
			      r->hello_reply->version, HS_WIRE_VERSION);
	else if (r->hello_reply->server_nonce.len != HS_NONCE_BYTES)
		rc = hp_error(HP_EPROTO, "daemon %s: bad hello reply", c->where);
	else
		memcpy(sn, r->hello_reply->server_nonce.data, HS_NONCE_BYTES);
	hs_wire_free(r);
	return rc;
}

static int take_auth_reply(struct hs_rconn *c, const Hpdlf__Store__AuthReply *a)
{
	if (!a->provider[0] || a->fabric_addr.len == 0 || a->fabric_addr.len > sizeof c->fabric_addr ||
	    a->n_regions == 0 || a->n_regions > HS_RCONN_MAX_REGIONS)
		return hp_error(HP_EPROTO, "daemon %s: malformed authentication reply", c->where);
	snprintf(c->provider, sizeof c->provider, "%s", a->provider);
	memcpy(c->fabric_addr, a->fabric_addr.data, a->fabric_addr.len);
	c->addrlen = a->fabric_addr.len;
	c->capacity = 0;
	for (size_t i = 0; i < a->n_regions; i++) {
		const Hpdlf__Store__Region *r = a->regions[i];
		if (r->size == 0 || r->start + r->size < r->start || r->start >= (1ull << 47))
			return hp_error(HP_EPROTO, "daemon %s: malformed region", c->where);
		c->reg[i] = (struct hs_rregion){ r->start, r->size, "" };
		snprintf(c->reg[i].kind, sizeof c->reg[i].kind, "%s", r->kind);
		c->capacity += r->size;
	}
	c->nreg = (int)a->n_regions;
	c->mr_mode = a->mr_mode;
	c->lease_ms = a->lease_ms;
	c->client_id = a->client_id;
	return 0;
}

static int authenticate(struct hs_rconn *c, const struct hs_secret *s, int tmo)
{
	Hpdlf__Store__Auth a = HPDLF__STORE__AUTH__INIT;
	hs_msg m = HPDLF__STORE__MSG__INIT, *r = NULL;
	uint8_t cn[HS_NONCE_BYTES], sn[HS_NONCE_BYTES], mac[HS_MAC_BYTES];
	int rc = hello(c, cn, sn, tmo);

	if (rc < 0)
		return rc;
	if (s->have) {
		hs_auth_mac(s, "hpdlf-c1", cn, sn, mac);
		a.mac.data = mac;
		a.mac.len = sizeof mac;
	}
	m.body_case = HPDLF__STORE__MSG__BODY_AUTH;
	m.auth = &a;
	if ((rc = hs_wire_send(c->fd, &m, tmo)) < 0 || (rc = hs_wire_recv(c->fd, &r, tmo)) < 0)
		return hp_error_prefix(rc, "daemon %s: authentication", c->where);
	if (r->body_case != HPDLF__STORE__MSG__BODY_AUTH_REPLY) {
		rc = reply_error(c->where, r, "authentication");
		if (!s->have)
			rc = hp_error(HP_EAUTH, "daemon %s requires a token and this client has none "
				      "(give --token-file F or set HPDLF_TOKEN_FILE)", c->where);
	} else if (!hs_auth_check(s, "hpdlf-s1", sn, cn, r->auth_reply->mac.data, r->auth_reply->mac.len)) {
		rc = hp_error(HP_EAUTH, "daemon %s did not prove it knows the token (different token, or not "
			      "an hpdlf-store daemon)", c->where);
	} else {
		rc = take_auth_reply(c, r->auth_reply);
	}
	hs_wire_free(r);
	return rc;
}

int hs_rconn_open(const char *where, const struct hs_secret *s, int timeout_ms, struct hs_rconn **out)
{
	struct hs_rconn *c;
	int rc;

	if ((rc = hs_remote_libs_load()) < 0) /* the first remote open maps libfabric */
		return rc;
	if (!(c = calloc(1, sizeof *c)))
		return -ENOMEM;
	snprintf(c->where, sizeof c->where, "%s", where);
	pthread_mutex_init(&c->mu, NULL);
	rc = hs_tcp_connect(where, timeout_ms);
	if (rc < 0) {
		c->fd = -1;
		goto fail;
	}
	c->fd = rc;
	rc = authenticate(c, s, timeout_ms);
	if (rc < 0)
		goto fail;
	*out = c;
	return 0;
fail:
	hs_rconn_close(c);
	return rc;
}

void hs_rconn_close(struct hs_rconn *c)
{
	if (!c)
		return;
	if (c->fd >= 0)
		close(c->fd);
	pthread_mutex_destroy(&c->mu);
	free(c);
}

static int call_locked(struct hs_rconn *c, hs_msg *req, hs_msg **rep, int timeout_ms)
{
	hs_msg *r = NULL;
	int rc;

	if (c->broken)
		return hp_error(-ECONNRESET, "daemon %s: connection lost earlier", c->where);
	req->seq = ++c->seq;
	rc = hs_wire_send(c->fd, req, timeout_ms);
	if (rc == 0)
		rc = hs_wire_recv(c->fd, &r, timeout_ms);
	if (rc == 0 && (r->body_case != HPDLF__STORE__MSG__BODY_REPLY || r->seq != req->seq))
		rc = hp_error(HP_EPROTO, "daemon %s: reply out of sequence", c->where);
	if (rc < 0) {
		c->broken = 1;
		hs_wire_free(r);
		if (rc == -ECONNRESET)
			return hp_error(rc, "daemon %s closed the connection", c->where);
		if (rc == -ETIMEDOUT)
			return hp_error(rc, "daemon %s did not answer within %d ms", c->where, timeout_ms);
		return hp_error_prefix(rc, "daemon %s", c->where);
	}
	rc = r->reply->status;
	if (rc < 0) {
		hp_error(rc, "%s", r->reply->message[0] ? r->reply->message : hp_strerror(rc));
		hs_wire_free(r);
		return rc;
	}
	if (rep)
		*rep = r;
	else
		hs_wire_free(r);
	return rc;
}

int hs_rconn_call(struct hs_rconn *c, hs_msg *req, hs_msg **rep, int timeout_ms)
{
	pthread_mutex_lock(&c->mu);
	int rc = call_locked(c, req, rep, timeout_ms);
	pthread_mutex_unlock(&c->mu);
	return rc;
}

int hs_rconn_trycall(struct hs_rconn *c, hs_msg *req, hs_msg **rep, int timeout_ms)
{
	if (pthread_mutex_trylock(&c->mu))
		return -EBUSY;
	int rc = call_locked(c, req, rep, timeout_ms);
	pthread_mutex_unlock(&c->mu);
	return rc;
}

static void take_stat(const Hpdlf__Store__StatInfo *s, struct hs_remote_stat *o)
{
	o->stat_version = s->stat_version;
	o->capacity = s->capacity;
	o->used = s->used;
	o->extents = s->chunks;
	o->named = s->named;
	o->rss = s->rss;
	o->clients = s->clients;
	o->clients_ready = s->clients_ready;
	o->uptime_ms = s->uptime_ms;
	snprintf(o->provider, sizeof o->provider, "%s", s->provider ? s->provider : "");
	o->connections = s->connections;
	o->auth_failures = s->auth_failures;
	o->leases_expired = s->leases_expired;
	o->allocs = s->allocs;
	o->alloc_failures = s->alloc_failures;
	o->frees = s->frees;
	o->lease_frees = s->lease_frees;
	o->bytes_allocated = s->bytes_allocated;
	o->bytes_freed = s->bytes_freed;
	o->publishes = s->publishes;
	o->lookups = s->lookups;
	o->lookup_misses = s->lookup_misses;
	o->removes = s->removes;
	o->lists = s->lists;
	o->stats = s->stats;
	o->errors = s->errors;
	for (size_t i = 0; i < s->n_tiers && o->ntiers < HS_REMOTE_STAT_MAX_TIERS; i++) {
		const Hpdlf__Store__TierStat *t = s->tiers[i];
		struct hs_remote_tier_stat *d = &o->tier[o->ntiers++];
		snprintf(d->kind, sizeof d->kind, "%s", t->kind ? t->kind : "");
		d->capacity = t->capacity;
		d->used = t->used;
		d->extents = t->extents;
		d->named = t->named;
		d->allocs = t->allocs;
		d->frees = t->frees;
		d->bytes_allocated = t->bytes_allocated;
		d->bytes_freed = t->bytes_freed;
	}
}

int hs_remote_stat(const char *endpoint, const char *token_file, int timeout_ms, struct hs_remote_stat *out)
{
	Hpdlf__Store__Stat st = HPDLF__STORE__STAT__INIT;
	hs_msg m = HPDLF__STORE__MSG__INIT, *rep = NULL;
	struct hs_secret s;
	struct hs_rconn *c;
	char host[256];
	unsigned port;
	int rc;

	memset(out, 0, sizeof *out);
	if (timeout_ms <= 0)
		timeout_ms = 3000;
	if ((rc = hs_split_hostport(endpoint, host, sizeof host, &port, 0)) < 0)
		return rc;
	snprintf(out->daemon, sizeof out->daemon, "%s", endpoint);
	if ((rc = hs_secret_load(token_file, &s)) < 0)
		return rc;
	rc = hs_rconn_open(endpoint, &s, timeout_ms, &c);
	hs_secret_free(&s);
	if (rc < 0)
		return rc;
	m.body_case = HPDLF__STORE__MSG__BODY_STAT;
	m.stat = &st;
	rc = hs_rconn_call(c, &m, &rep, timeout_ms);
	if (rc >= 0 && !rep->reply->stat)
		rc = hp_error(HP_EPROTO, "daemon %s: Stat answered without statistics", endpoint);
	if (rc >= 0) {
		take_stat(rep->reply->stat, out);
		rc = 0;
	}
	hs_wire_free(rep);
	hs_rconn_close(c);
	return rc;
}
