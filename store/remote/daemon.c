/* hpdlf-store daemon core: registered regions, the progress thread that
 * makes clients' RMA move, and the control loop (handshake, leases). */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <arpa/inet.h>

#include "hpdlf/error.h"
#include "store/remote/lazy.h"
#include "store/remote/daemon_int.h"

#define ACCEPT_BATCH 256        /* connections taken per poll round at most */

/* The target side of tcp (and other manual-progress providers) moves RMA
 * data only while someone reads the CQ: sit in fi_cq_sread. */
static void *progress_main(void *arg)
{
	struct hs_daemon *d = arg;
	struct fi_cq_entry e[16];

	while (!d->stopping) {
		ssize_t n = fi_cq_sread(d->fab.cq, e, 16, NULL, 200);
		if (n == -FI_EAVAIL) {
			char msg[256];
			void *ctx;
			hs_fab_cq_error(&d->fab, &ctx, msg, sizeof msg);
			hs_daemon_peer_log(d, "fabric", HP_LOG_WARN, "fabric completion error: %s", msg);
		}
	}
	return NULL;
}

static int map_region(struct hs_daemon *d, const char *kind, const char *path, uint64_t size)
{
	struct dregion *r = &d->reg[d->nreg];
	uint64_t start = d->nreg ? d->reg[d->nreg - 1].start + d->reg[d->nreg - 1].size : 0;
	int flags = MAP_SHARED;

	if (size < HS_IO_ALIGN || size % HS_IO_ALIGN)
		return hp_error(HP_EUSAGE, "%s size %" PRIu64 " must be a positive multiple of 4096", kind, size);
	r->fd = -1;
	if (path) {
		struct stat sb;
		r->created = stat(path, &sb) < 0 && errno == ENOENT;
		r->fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
		if (r->fd < 0 || ftruncate(r->fd, (off_t)size) < 0)
			return hp_error(-errno, "%s %s: %s", kind, path, strerror(errno));
	} else {
		flags = MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE;
	}
	r->mem = mmap(NULL, size, PROT_READ | PROT_WRITE, flags, r->fd, 0);
	if (r->mem == MAP_FAILED) {
		r->mem = NULL;
		return hp_error(-ENOMEM, "%s: cannot map %" PRIu64 " bytes: %s", kind, size, strerror(errno));
	}
	r->start = start;
	r->size = size;
	r->kind = kind;
	d->nreg++;
	return hs_extents_create(start, start + size, &r->ext);
}

static int setup(struct hs_daemon *d)
{
	char host[256];
	unsigned port;
	int rc;

	rc = hs_secret_load(d->cfg.token_file, &d->secret);
	if (rc < 0)
		return rc;
	if (!d->secret.have)
		return hp_error(HP_EUSAGE, "no token: give --token-file F or HPDLF_TOKEN_FILE "
				"(create one with: (umask 077; head -c 32 /dev/urandom > F))");
	if ((rc = hs_split_hostport(d->listen, host, sizeof host, &port, 1)) < 0)
		return rc;
	if ((rc = map_region(d, "dram", NULL, d->cfg.dram)) < 0)
		return rc;
	if (d->cfg.pmem_path && (rc = map_region(d, "pmem", d->cfg.pmem_path, d->cfg.pmem_size)) < 0)
		return rc;
	if ((rc = hs_fab_open(&d->fab, d->cfg.provider, 1, host)) < 0)
		return rc;
	if (hs_fab_unsafe(d->fab.prov))
		hp_log(HP_LOG_WARN, "provider %s enforces neither keys nor bounds: any local process may "
		       "read or write the lent memory", d->fab.prov);
	/* No region is registered whole: each extent gets its own key when
	 * it is handed out (daemon_ops.c). */
	if (d->cfg.pmem_path) {
		snprintf(d->catalog, sizeof d->catalog, "%s.names", d->cfg.pmem_path);
		if ((rc = hs_daemon_catalog_load(d)) < 0 || (rc = hs_daemon_scrub_free(d)) < 0)
			return rc;
	}
	rc = hs_tcp_listen(d->listen, d->bound, sizeof d->bound);
	if (rc < 0)
		return rc;
	d->lfd = rc;
	if (pipe2(d->stop_pipe, O_CLOEXEC | O_NONBLOCK) < 0)
		return -errno;
	d->spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
	if ((rc = pthread_create(&d->progress, NULL, progress_main, d)))
		return -rc;
	d->progress_started = 1;
	d->tidy_ok = 1;
	return 0;
}

int hs_daemon_open(const struct hs_daemon_config *c, struct hs_daemon **out)
{
	struct hs_daemon *d;
	int rc;

	if ((rc = hs_remote_libs_load()) < 0) /* the first remote open maps libfabric */
		return rc;
	if (!(d = calloc(1, sizeof *d)))
		return -ENOMEM;
	d->cfg = *c;
	d->lfd = -1;
	d->spare_fd = -1;
	d->start_ms = hs_now_ms();
	d->stop_pipe[0] = d->stop_pipe[1] = -1;
	snprintf(d->listen, sizeof d->listen, "%s", c->listen ? c->listen : "");
	if (!d->cfg.lease_ms)
		d->cfg.lease_ms = 5000;
	if (!d->cfg.max_clients)
		d->cfg.max_clients = 1024;
	if (!d->cfg.max_unauth)
		d->cfg.max_unauth = 64;
	if (!d->cfg.handshake_ms)
		d->cfg.handshake_ms = 3000;
	d->cl = calloc(d->cfg.max_clients + d->cfg.max_unauth, sizeof *d->cl);
	if (!d->cl) {
		free(d);
		return -ENOMEM;
	}
	rc = setup(d);
	if (rc < 0) {
		hs_daemon_close(d);
		return rc;
	}
	hp_log(HP_LOG_INFO, "listening on %s, provider %s, mr_mode 0x%" PRIx64 ", %" PRIu64 " bytes lent",
	       d->bound, d->fab.prov, d->fab.mr_mode, hs_daemon_capacity(d));
	*out = d;
	return 0;
}

const char *hs_daemon_address(const struct hs_daemon *d)
{
	return d->bound;
}

const char *hs_daemon_provider(const struct hs_daemon *d)
{
	return d->fab.prov;
}

void hs_daemon_stop(struct hs_daemon *d)
{
	char b = 1;

	d->stopping = 1;
	if (d->stop_pipe[1] >= 0 && write(d->stop_pipe[1], &b, 1) < 0) {
		/* already full: a stop is pending */
	}
}

static void drop_client(struct hs_daemon *d, unsigned i, const char *why)
{
	struct dclient *c = d->cl[i];

	if (c->state == C_READY)
		hs_daemon_release_client(d, c);
	else
		d->nunauth--;
	hs_daemon_peer_log(d, c->host, c->state == C_READY ? HP_LOG_INFO : HP_LOG_WARN,
			   "client %s (id %" PRIu64 ") gone: %s", c->peer, c->id, why);
	close(c->fd);
	free(c->body);
	free(c);
	d->cl[i] = d->cl[--d->ncl];
	d->cl[d->ncl] = NULL;
}

/* Make room for a newcomer: drop the oldest connection still in its
 * handshake, one that has not even said hello first.  Honest clients finish
 * the handshake within a round trip, so only stallers are ever dropped.
 * 0 if there was none. */
static int shed_oldest(struct hs_daemon *d)
{
	int best = -1;

	for (unsigned i = 0; i < d->ncl; i++) {
		const struct dclient *c = d->cl[i], *b = best >= 0 ? d->cl[best] : NULL;
		if (c->state == C_READY)
			continue;
		if (!b || (c->state == C_HELLO) > (b->state == C_HELLO) ||
		    ((c->state == C_HELLO) == (b->state == C_HELLO) && c->accepted_ms < b->accepted_ms))
			best = (int)i;
	}
	if (best < 0)
		return 0;
	drop_client(d, (unsigned)best, "unauthenticated connections at their limit; the oldest goes");
	return 1;
}

static void peer_name(const struct sockaddr_storage *ss, char *host, size_t hl, unsigned *port)
{
	snprintf(host, hl, "?");
	*port = 0;
	if (ss->ss_family == AF_INET) {
		inet_ntop(AF_INET, &((const struct sockaddr_in *)ss)->sin_addr, host, (socklen_t)hl);
		*port = ntohs(((const struct sockaddr_in *)ss)->sin_port);
	} else if (ss->ss_family == AF_INET6) {
		inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)ss)->sin6_addr, host, (socklen_t)hl);
		*port = ntohs(((const struct sockaddr_in6 *)ss)->sin6_port);
	}
}

static void admit(struct hs_daemon *d, int fd, const struct sockaddr_storage *ss)
{
	struct dclient *c;
	char host[48];
	unsigned port;
	int one = 1;

	peer_name(ss, host, sizeof host, &port);
	if (d->nunauth >= d->cfg.max_unauth)
		shed_oldest(d);
	if (d->ncl - d->nunauth >= d->cfg.max_clients || !(c = calloc(1, sizeof *c))) {
		hs_daemon_peer_log(d, host, HP_LOG_WARN, "refused a connection from %s: %u clients already", host,
				   d->ncl - d->nunauth);
		close(fd);
		return;
	}
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
	d->n.connections++;
	c->fd = fd;
	c->accepted_ms = c->last_ms = hs_now_ms();
	snprintf(c->host, sizeof c->host, "%s", host);
	snprintf(c->peer, sizeof c->peer, "%s:%u", host, port);
	d->cl[d->ncl++] = c;
	d->nunauth++;
}

/* Out of file descriptors: free one (the oldest handshake, else the spare
 * kept for this), take the connection waiting, and close it; otherwise the
 * listening socket stays readable and the loop spins. */
static void accept_over_limit(struct hs_daemon *d)
{
	int fd;

	if (shed_oldest(d))
		return;
	if (d->spare_fd >= 0) {
		close(d->spare_fd);
		fd = accept4(d->lfd, NULL, NULL, SOCK_CLOEXEC);
		if (fd >= 0)
			close(fd);
		d->spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
	}
	hs_daemon_peer_log(d, "*", HP_LOG_WARN, "out of file descriptors (%u connections): refused one; raise "
			   "the limit (ulimit -n)", d->ncl);
}

/* Every connection waiting (up to a batch), so a flood of stalled ones
 * cannot keep an honest client in the listen queue. */
static void accept_all(struct hs_daemon *d)
{
	for (int k = 0; k < ACCEPT_BATCH && !d->stopping; k++) {
		struct sockaddr_storage ss;
		socklen_t sl = sizeof ss;
		int fd = accept4(d->lfd, (struct sockaddr *)&ss, &sl, SOCK_CLOEXEC | SOCK_NONBLOCK);

		if (fd >= 0) {
			admit(d, fd, &ss);
			continue;
		}
		if (errno == EINTR || errno == ECONNABORTED)
			continue;
		if (errno == EMFILE || errno == ENFILE)
			accept_over_limit(d);
		return;
	}
}

static int send_reply(struct dclient *c, uint64_t seq, int status, const char *text)
{
	Hpdlf__Store__Reply r;
	hs_msg m;

	hs_reply_init(&m, &r, seq, status, text);
	return hs_wire_send(c->fd, &m, 1000);
}

/* Append the client's own name ("host:pid") to c->peer, printable ASCII
 * only: it comes from an unauthenticated peer and goes into the log. */
static void name_client(struct dclient *c, const char *name)
{
	size_t n = strlen(c->peer);

	if (n + 4 >= sizeof c->peer)
		return;
	c->peer[n++] = ' ';
	c->peer[n++] = '(';
	for (size_t i = 0; name[i] && i < 40 && n + 2 < sizeof c->peer; i++)
		c->peer[n++] = name[i] >= 0x20 && name[i] < 0x7f ? name[i] : '?';
	c->peer[n++] = ')';
	c->peer[n] = 0;
}

static int on_hello(struct hs_daemon *d, struct dclient *c, const hs_msg *m)
{
	Hpdlf__Store__HelloReply hr = HPDLF__STORE__HELLO_REPLY__INIT;
	hs_msg out = HPDLF__STORE__MSG__INIT;
	const Hpdlf__Store__Hello *h = m->hello;
	char text[256];

	if (h->version != HS_WIRE_VERSION) {
		snprintf(text, sizeof text, "daemon %s speaks protocol version %d, the client %u", d->bound,
			 HS_WIRE_VERSION, h->version);
		hs_daemon_peer_log(d, c->host, HP_LOG_WARN, "client %s refused: %s", c->peer, text);
		d->n.auth_failures++;
		send_reply(c, m->seq, HP_EPROTO, text);
		return -1;
	}
	if (h->client_nonce.len != HS_NONCE_BYTES) {
		send_reply(c, m->seq, HP_EPROTO, "hello: the client nonce must have 32 bytes");
		return -1;
	}
	if (h->client && h->client[0])
		name_client(c, h->client);
	memcpy(c->cnonce, h->client_nonce.data, HS_NONCE_BYTES);
	hs_random(c->snonce, HS_NONCE_BYTES);
	hr.version = HS_WIRE_VERSION;
	hr.server_nonce.data = c->snonce;
	hr.server_nonce.len = HS_NONCE_BYTES;
	hr.daemon = d->bound;
	out.seq = m->seq;
	out.body_case = HPDLF__STORE__MSG__BODY_HELLO_REPLY;
	out.hello_reply = &hr;
	c->state = C_AUTH;
	return hs_wire_send(c->fd, &out, 1000) < 0 ? -1 : 0;
}

static int send_auth_reply(struct hs_daemon *d, struct dclient *c, uint64_t seq)
{
	Hpdlf__Store__AuthReply ar = HPDLF__STORE__AUTH_REPLY__INIT;
	Hpdlf__Store__Region rg[HS_DAEMON_MAX_REGIONS], *rp[HS_DAEMON_MAX_REGIONS];
	hs_msg out = HPDLF__STORE__MSG__INIT;
	uint8_t mac[HS_MAC_BYTES];

	hs_auth_mac(&d->secret, "hpdlf-s1", c->snonce, c->cnonce, mac);
	ar.mac.data = mac;
	ar.mac.len = sizeof mac;
	ar.provider = d->fab.prov;
	ar.fabric_addr.data = d->fab.addr;
	ar.fabric_addr.len = d->fab.addrlen;
	for (int i = 0; i < d->nreg; i++) {
		hpdlf__store__region__init(&rg[i]); /* no key: extents carry their own */
		rg[i].start = d->reg[i].start;
		rg[i].size = d->reg[i].size;
		rg[i].kind = (char *)d->reg[i].kind;
		rp[i] = &rg[i];
	}
	ar.n_regions = (size_t)d->nreg;
	ar.regions = rp;
	ar.mr_mode = d->fab.mr_mode;
	ar.lease_ms = d->cfg.lease_ms;
	ar.client_id = c->id;
	out.seq = seq;
	out.body_case = HPDLF__STORE__MSG__BODY_AUTH_REPLY;
	out.auth_reply = &ar;
	return hs_wire_send(c->fd, &out, 1000);
}

static int on_auth(struct hs_daemon *d, struct dclient *c, const hs_msg *m)
{
	const Hpdlf__Store__Auth *a = m->auth;
	char text[256];

	if (a->mac.len == 0) {
		snprintf(text, sizeof text, "authentication refused by daemon %s: the client sent no token "
			 "(give it --token-file F or HPDLF_TOKEN_FILE)", d->bound);
		hs_daemon_peer_log(d, c->host, HP_LOG_WARN, "client %s refused: no token", c->peer);
		d->n.auth_failures++;
		send_reply(c, m->seq, HP_EAUTH, text);
		return -1;
	}
	if (!hs_auth_check(&d->secret, "hpdlf-c1", c->cnonce, c->snonce, a->mac.data, a->mac.len)) {
		snprintf(text, sizeof text, "authentication refused by daemon %s: wrong token", d->bound);
		hs_daemon_peer_log(d, c->host, HP_LOG_WARN, "client %s refused: wrong token", c->peer);
		d->n.auth_failures++;
		send_reply(c, m->seq, HP_EAUTH, text);
		return -1;
	}
	c->id = ++d->next_client;
	c->state = C_READY;
	d->nunauth--;
	hs_daemon_peer_log(d, c->host, HP_LOG_INFO, "client %s authenticated (id %" PRIu64 ")", c->peer, c->id);
	return send_auth_reply(d, c, m->seq) < 0 ? -1 : 0;
}

static int on_request(struct hs_daemon *d, struct dclient *c, const hs_msg *m)
{
	Hpdlf__Store__Reply r;
	hs_msg out;
	char text[512] = "";
	int stop, rc;

	hs_reply_init(&out, &r, m->seq, 0, NULL);
	stop = hs_daemon_request(d, c, m, &out, &r, text, sizeof text);
	if (text[0])
		r.message = text;
	rc = hs_wire_send(c->fd, &out, 1000);
	hs_daemon_reply_release(&r);
	if (stop) {
		hs_daemon_peer_log(d, c->host, HP_LOG_INFO, "shutdown requested by client %s", c->peer);
		hs_daemon_stop(d);
	}
	return rc < 0 ? -1 : 0;
}

/* One complete frame from client c: -1 drops the client. */
static int on_frame(struct hs_daemon *d, struct dclient *c)
{
	hs_msg *m = hs_wire_decode(c->body, c->body_len);
	int rc = -1;

	if (!m) {
		hs_daemon_peer_log(d, c->host, HP_LOG_WARN, "client %s: undecodable control message (%u bytes), dropped",
				   c->peer, c->body_len);
		send_reply(c, 0, HP_EPROTO, "undecodable control message");
		return -1;
	}
	if (c->state == C_HELLO && m->body_case == HPDLF__STORE__MSG__BODY_HELLO)
		rc = on_hello(d, c, m);
	else if (c->state == C_AUTH && m->body_case == HPDLF__STORE__MSG__BODY_AUTH)
		rc = on_auth(d, c, m);
	else if (c->state == C_READY)
		rc = on_request(d, c, m);
	else {
		hs_daemon_peer_log(d, c->host, HP_LOG_WARN, "client %s: message %d before authentication, dropped",
				   c->peer, m->body_case);
		send_reply(c, m->seq, HP_EAUTH, "authenticate first (hello, auth)");
	}
	hs_wire_free(m);
	return rc;
}

/* Read what is available; -1 drops the client (why says why). */
static int on_readable(struct hs_daemon *d, struct dclient *c, const char **why)
{
	for (;;) {
		uint8_t *p = c->hdr_got < 4 ? c->hdr + c->hdr_got : c->body + c->body_got;
		size_t want = c->hdr_got < 4 ? 4 - c->hdr_got : c->body_len - c->body_got;
		ssize_t n = recv(c->fd, p, want, MSG_DONTWAIT);

		if (n == 0) {
			*why = "connection closed";
			return -1;
		}
		if (n < 0) {
			*why = "connection error";
			return errno == EAGAIN || errno == EINTR ? 0 : -1;
		}
		c->last_ms = hs_now_ms();
		if (c->hdr_got < 4) {
			c->hdr_got += (uint32_t)n;
			if (c->hdr_got < 4)
				continue;
			c->body_len = (uint32_t)c->hdr[0] << 24 | (uint32_t)c->hdr[1] << 16 |
				      (uint32_t)c->hdr[2] << 8 | c->hdr[3];
			if (c->body_len == 0 || c->body_len > HS_WIRE_MAX_FRAME) {
				hs_daemon_peer_log(d, c->host, HP_LOG_WARN,
						   "client %s: control frame of %u bytes (limit %u), dropped", c->peer,
						   c->body_len, HS_WIRE_MAX_FRAME);
				*why = "oversized frame";
				return -1;
			}
			c->body = malloc(c->body_len);
			c->body_got = 0;
			if (!c->body) {
				*why = "out of memory";
				return -1;
			}
			continue;
		}
		c->body_got += (uint32_t)n;
		if (c->body_got < c->body_len)
			continue;
		int rc = on_frame(d, c);
		free(c->body);
		c->body = NULL;
		c->hdr_got = 0;
		if (rc < 0) {
			*why = c->state == C_READY ? "protocol error" : "handshake failed";
			return -1;
		}
	}
}

static void expire(struct hs_daemon *d)
{
	uint64_t now = hs_now_ms();

	for (unsigned i = 0; i < d->ncl;) {
		struct dclient *c = d->cl[i];
		/* The handshake has one deadline from the accept: a peer that
		 * trickles a byte now and then does not extend it. */
		int late = c->state == C_READY ? now - c->last_ms > d->cfg.lease_ms
					       : now - c->accepted_ms > d->cfg.handshake_ms;
		if (late) {
			d->n.leases_expired += c->state == C_READY;
			drop_client(d, i, c->state == C_READY ? "lease expired (silent client)"
							      : "no authentication in time");
			continue;
		}
		i++;
	}
}

int hs_daemon_run(struct hs_daemon *d)
{
	struct pollfd *p = calloc(d->cfg.max_clients + d->cfg.max_unauth + 2, sizeof *p);

	if (!p)
		return -ENOMEM;
	while (!d->stopping) {
		unsigned n = d->ncl;
		p[0] = (struct pollfd){ .fd = d->stop_pipe[0], .events = POLLIN };
		p[1] = (struct pollfd){ .fd = d->lfd, .events = POLLIN };
		for (unsigned i = 0; i < n; i++)
			p[2 + i] = (struct pollfd){ .fd = d->cl[i]->fd, .events = POLLIN };
		int rc = poll(p, n + 2, 250);
		if (rc < 0 && errno != EINTR)
			break;
		if (d->stopping)
			break;
		/* Clients first, backwards: drop_client moves the last one into slot i. */
		for (unsigned i = n; i-- > 0;) {
			const char *why = "?";
			if (p[2 + i].revents && on_readable(d, d->cl[i], &why) < 0)
				drop_client(d, i, why);
		}
		if (p[1].revents & POLLIN)
			accept_all(d);
		expire(d);
	}
	free(p);
	hp_log(HP_LOG_INFO, "shutting down: %u clients, %" PRIu64 " named tensors", d->ncl, d->nnamed);
	return 0;
}

void hs_daemon_close(struct hs_daemon *d)
{
	if (!d)
		return;
	d->stopping = 1;
	if (d->progress_started) {
		fi_cq_signal(d->fab.cq);
		pthread_join(d->progress, NULL);
	}
	while (d->ncl)
		drop_client(d, d->ncl - 1, "daemon shutting down");
	if (d->catalog[0])
		hs_daemon_catalog_save(d);
	hs_daemon_tidy_report(d);
	hs_daemon_free_all(d);
	for (int i = 0; i < d->nreg; i++) {
		struct dregion *r = &d->reg[i];
		if (r->fd >= 0)
			msync(r->mem, r->size, MS_SYNC);
	}
	hs_fab_close(&d->fab);
	for (int i = 0; i < d->nreg; i++) {
		struct dregion *r = &d->reg[i];
		if (r->mem)
			munmap(r->mem, r->size);
		if (r->fd >= 0)
			close(r->fd);
		hs_extents_destroy(r->ext);
	}
	hs_daemon_tidy_files(d);
	if (d->lfd >= 0)
		close(d->lfd);
	if (d->spare_fd >= 0)
		close(d->spare_fd);
	if (d->stop_pipe[0] >= 0) {
		close(d->stop_pipe[0]);
		close(d->stop_pipe[1]);
	}
	free(d->cl);
	hs_secret_free(&d->secret);
	free(d);
}
