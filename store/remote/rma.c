/* Remote tier RMA engine: requests are split into segments of at most the
 * provider's message size, posted by one progress thread (which also gives
 * libfabric the progress tcp needs, sitting in fi_cq_sread when idle), and
 * completed exactly once: by the provider, or as -EHOSTDOWN when the
 * daemon is declared dead.  Writes ask for FI_DELIVERY_COMPLETE: a write is
 * reported done only once the bytes are in the daemon's memory. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hpdlf/error.h"
#include "store/remote/tier_int.h"

#define STALL_MS 5000u          /* a posted segment older than this: the daemon is stuck */

static void unlink_posted(struct rtier *t, struct seg *s)
{
	struct rdaemon *d = &t->d[s->req->tgt[s->ti]];

	if (s->prev)
		s->prev->next = s->next;
	else
		d->posted = s->next;
	if (s->next)
		s->next->prev = s->prev;
	s->next = s->prev = NULL;
	t->posted--;
}

static void free_seg(struct seg *s)
{
	if (s->lmr)
		fi_close(&s->lmr->fid);
	free(s);
}

static void req_unref(struct rreq *r)
{
	if (--r->refs == 0 && r->finished == 2)
		free(r);
}

/* Queue the segments of target ti of r (under t->mu).  0, or an error. */
static int queue_target(struct rtier *t, struct rreq *r, int ti)
{
	size_t off = 0;

	while (off < r->io->len) {
		struct seg *s = calloc(1, sizeof *s);
		if (!s)
			return -ENOMEM;
		s->req = r;
		s->ti = ti;
		s->buf = (char *)r->io->buf + off;
		s->len = r->io->len - off < t->max_seg ? r->io->len - off : t->max_seg;
		s->raddr = r->raddr[ti] + off;
		s->key = r->key[ti];
		off += s->len;
		r->live++;
		r->refs++;
		if (t->qtail)
			t->qtail->next = s;
		else
			t->qhead = s;
		t->qtail = s;
	}
	return 0;
}

/* Decide the fate of r once no segment is pending (under t->mu).  1 if r is
 * finished (chain it for delivery), 0 if it was restarted on a replica. */
static int finalize(struct rtier *t, struct rreq *r)
{
	struct hs_io *io = r->io;

	if (io->op == HS_IO_WRITE) {
		int ok = 0, bad = 0;
		for (int i = 0; i < r->ntgt; i++) {
			ok += r->tres[i] == 0;
			if (r->tres[i] < 0 && !t->d[r->tgt[i]].dead && !bad)
				bad = r->tres[i];
		}
		io->res = ok && !bad ? 0 : bad ? bad : -EHOSTDOWN;
		return 1;
	}
	io->res = r->tres[r->cur];
	if (io->res < 0 && t->d[r->tgt[r->cur]].dead) {
		for (int i = r->cur + 1; i < r->ntgt; i++) {
			if (t->d[r->tgt[i]].dead)
				continue;
			r->cur = i;
			r->tres[i] = 0;
			if (queue_target(t, r, i) == 0)
				return 0;
		}
	}
	return 1;
}

/* One segment's outcome (under t->mu); chains r on *done when it finishes. */
static void seg_outcome(struct rtier *t, struct seg *s, int res, struct rreq **done)
{
	struct rreq *r = s->req;

	if (res < 0 && r->tres[s->ti] == 0)
		r->tres[s->ti] = t->d[r->tgt[s->ti]].dead ? -EHOSTDOWN : res;
	if (--r->live == 0 && !r->finished && finalize(t, r)) {
		r->finished = 1;
		r->next_done = *done;
		*done = r;
	}
}

void hs_rt_mark_dead(struct rtier *t, int i, const char *why, struct rreq **done)
{
	struct rdaemon *d = &t->d[i];
	unsigned n = 0;

	if (d->dead)
		return;
	d->dead = 1;
	d->dead_ms = d->next_try_ms = hs_now_ms();
	t->deaths++;
	snprintf(d->why, sizeof d->why, "%s", why);
	for (struct seg *s = d->posted; s; s = s->next) {
		if (s->abandoned)
			continue;
		s->abandoned = 1;
		n++;
		s->req->tres[s->ti] = -EHOSTDOWN;
		seg_outcome(t, s, -EHOSTDOWN, done);
	}
	int live = 0;
	for (int k = 0; k < t->nd; k++)
		live += !t->d[k].dead;
	/* the verdict for the user: what the loss costs now and from here on;
	 * the store re-homes or drops what it held at its next check
	 * (hs_store_recover) and says so, or stops the run naming the values */
	uint64_t lost = hs_rt_lost_extents(t), held = hs_rt_extents_on(t, i);
	if (held == 0)
		hp_log(HP_LOG_WARN, "remote tier %s: daemon %s is gone (%s); it held nothing of this run; %d of %d "
		       "daemons live%s", t->base.name, d->where, why, live, t->nd,
		       live ? "" : ": new spills go to the next tier (the local disk)");
	else if (lost == 0)
		hp_log(HP_LOG_WARN, "remote tier %s: daemon %s is gone (%s); %u transfers in flight failed over to "
		       "the other copy; the %" PRIu64 " chunks it held have one copy left and are copied again at "
		       "the next step; %d of %d daemons live%s", t->base.name, d->where, why, n, held, live, t->nd,
		       live < t->o.replicas ? ": too few for two copies, new spills go to the next tier (the "
		       "local disk)" : "");
	else
		hp_log(HP_LOG_WARN, "remote tier %s: daemon %s is gone (%s); %u transfers in flight failed; it held "
		       "the only copy of %" PRIu64 " chunks: values that can be read again from their source or "
		       "are recomputed are, anything else stops the run at the next step; %d of %d daemons live",
		       t->base.name, d->where, why, n, lost, live, t->nd);
}

/* Append list `more` to *done (t->mu held or lists private). */
static void splice_done(struct rreq **done, struct rreq *more)
{
	while (*done)
		done = &(*done)->next_done;
	*done = more;
}

void hs_rt_defer_done(struct rtier *t, struct rreq *done)
{
	splice_done(&t->late_done, done);
}

void hs_rt_deliver(struct rtier *t, struct rreq *done)
{
	while (done) {
		struct rreq *r = done;
		done = r->next_done;
		r->io->done(r->io);
		pthread_mutex_lock(&t->mu);
		r->finished = 2;
		if (r->refs == 0)
			free(r);
		pthread_mutex_unlock(&t->mu);
	}
}

static ssize_t post(struct rtier *t, struct seg *s, fi_addr_t fa)
{
	struct iovec iov = { .iov_base = s->buf, .iov_len = s->len };
	struct fi_rma_iov rma = { .addr = s->raddr, .len = s->len, .key = s->key };
	void *desc = s->lmr ? fi_mr_desc(s->lmr) : NULL;
	struct fi_msg_rma msg = { .msg_iov = &iov, .desc = &desc, .iov_count = 1, .addr = fa,
				  .rma_iov = &rma, .rma_iov_count = 1, .context = &s->ctx };

	if (s->req->io->op == HS_IO_WRITE)
		return fi_writemsg(t->fab.ep, &msg, FI_COMPLETION | FI_DELIVERY_COMPLETE);
	return fi_readmsg(t->fab.ep, &msg, FI_COMPLETION);
}

/* Post queued segments while the provider takes them (under t->mu). */
static void post_queued(struct rtier *t, struct rreq **done)
{
	while (t->qhead && t->posted < t->o.max_inflight) {
		struct seg *s = t->qhead;
		struct rdaemon *d = &t->d[s->req->tgt[s->ti]];
		ssize_t rc = 0;

		if (!d->dead && (t->fab.mr_mode & FI_MR_LOCAL) && !s->lmr)
			rc = hs_fab_mr_reg(&t->fab, s->buf, s->len, FI_READ | FI_WRITE, &s->lmr);
		if (!d->dead && rc == 0) {
			rc = post(t, s, d->fa);
			if (rc == -FI_EAGAIN)
				return;
		}
		t->qhead = s->next;
		if (!t->qhead)
			t->qtail = NULL;
		s->next = NULL;
		if (d->dead || rc) {
			seg_outcome(t, s, d->dead ? -EHOSTDOWN : -EIO, done);
			req_unref(s->req);
			free_seg(s);
			continue;
		}
		s->posted_ms = hs_now_ms();
		s->next = d->posted;
		if (d->posted)
			d->posted->prev = s;
		d->posted = s;
		t->posted++;
	}
}

/* A completion from the provider; err 0 or a negative errno. */
static void completed(struct rtier *t, struct seg *s, int err, const char *text, struct rreq **done)
{
	int di = s->req->tgt[s->ti];

	pthread_mutex_lock(&t->mu);
	unlink_posted(t, s);
	int abandoned = s->abandoned, dead = t->d[di].dead;
	pthread_mutex_unlock(&t->mu);
	if (err && !abandoned && !dead) {
		hp_log(HP_LOG_WARN, "remote tier %s: RMA %s daemon %s failed: %s", t->base.name,
		       s->req->io->op == HS_IO_WRITE ? "to" : "from", t->d[di].where, text);
		hs_rt_check(t, di, 1); /* a transport error: is the daemon still there? */
	}
	/* a connection being rebuilt (tcp drops it after a refused transfer
	 * and reconnects on a later one) keeps its code: worth a retry */
	if (err && err != -ENOTCONN && err != -ECONNRESET && err != -EPIPE)
		err = -EIO;
	pthread_mutex_lock(&t->mu);
	if (!abandoned)
		seg_outcome(t, s, err, done);
	req_unref(s->req);
	pthread_mutex_unlock(&t->mu);
	free_seg(s);
}

static void reap(struct rtier *t, struct rreq **done, int block)
{
	struct fi_cq_entry e[32];
	ssize_t n = block ? fi_cq_sread(t->fab.cq, e, 32, NULL, 100) : fi_cq_read(t->fab.cq, e, 32);

	if (n == -FI_EAVAIL) {
		char text[256];
		void *ctx;
		int err = hs_fab_cq_error(&t->fab, &ctx, text, sizeof text);
		if (ctx)
			completed(t, ctx, err, text, done);
		return;
	}
	for (ssize_t i = 0; i < n; i++)
		completed(t, e[i].op_context, 0, NULL, done);
}

/* Segments posted long ago to a daemon that no longer moves them. */
static void check_stalls(struct rtier *t, struct rreq **done)
{
	uint64_t now = hs_now_ms();

	for (int i = 0; i < t->nd; i++)
		for (struct seg *s = t->d[i].posted; s; s = s->next)
			if (!s->abandoned && now - s->posted_ms > STALL_MS) {
				hs_rt_mark_dead(t, i, "RMA made no progress for 5 s", done);
				break;
			}
}

static void *progress_main(void *arg)
{
	struct rtier *t = arg;
	uint64_t last_check = 0;

	while (!t->stopping) {
		struct rreq *done = NULL;
		pthread_mutex_lock(&t->mu);
		splice_done(&done, t->late_done); /* failed while a caller held locks */
		t->late_done = NULL;
		post_queued(t, &done);
		/* Poll while transfers are in flight: with manual progress (tcp)
		 * fi_cq_sread does not move them; sleep only when nothing is. */
		int idle = t->posted == 0;
		if (hs_now_ms() - last_check > 100) {
			check_stalls(t, &done);
			last_check = hs_now_ms();
		}
		pthread_mutex_unlock(&t->mu);
		hs_rt_deliver(t, done);
		done = NULL;
		reap(t, &done, idle);
		hs_rt_deliver(t, done);
	}
	return NULL;
}

int hs_rt_rma_start(struct rtier *t)
{
	int rc = pthread_create(&t->progress, NULL, progress_main, t);

	if (rc)
		return hp_error(-rc, "remote tier: cannot start the progress thread");
	t->progress_started = 1;
	return 0;
}

/* Stop the thread; requests still queued or posted complete with -ECANCELED. */
void hs_rt_rma_stop(struct rtier *t)
{
	struct rreq *done = NULL;

	if (t->progress_started) {
		t->stopping = 1;
		fi_cq_signal(t->fab.cq);
		pthread_join(t->progress, NULL);
		t->progress_started = 0;
	}
	pthread_mutex_lock(&t->mu);
	splice_done(&done, t->late_done);
	t->late_done = NULL;
	while (t->qhead) {
		struct seg *s = t->qhead;
		t->qhead = s->next;
		seg_outcome(t, s, -ECANCELED, &done);
		req_unref(s->req);
		free_seg(s);
	}
	t->qtail = NULL;
	for (int i = 0; i < t->nd; i++)
		for (struct seg *s = t->d[i].posted; s; s = s->next)
			if (!s->abandoned) {
				s->abandoned = 1;
				seg_outcome(t, s, -ECANCELED, &done);
			}
	pthread_mutex_unlock(&t->mu);
	hs_rt_deliver(t, done);
}

static int start_req(struct rtier *t, struct hs_io *io, struct rreq **done)
{
	uint64_t a = io->addr;
	int di = (int)(a >> HS_REMOTE_ADDR_BITS) - 1;
	const struct rext *e = hs_rt_extent_of(t, a);
	struct rreq *r;

	if (di < 0 || di >= t->nd || !t->d[di].conn || io->len == 0 || io->len % HS_IO_ALIGN || !e ||
	    io->len > e->len - (a - e->addr))
		return -EINVAL;
	r = calloc(1, sizeof *r);
	if (!r)
		return -ENOMEM;
	r->io = io;
	r->ntgt = e->n;
	for (int i = 0; i < e->n; i++) {
		r->tgt[i] = e->di[i];
		r->raddr[i] = e->base[i] + (a - e->addr);
		r->key[i] = e->key[i];
	}
	r->refs = 1; /* held while queueing */
	int queued = 0, rc = 0;
	for (int i = 0; i < r->ntgt && rc == 0; i++) {
		r->tres[i] = t->d[r->tgt[i]].dead ? -EHOSTDOWN : 0;
		if (r->tres[i] || (io->op == HS_IO_READ && queued))
			continue;
		rc = queue_target(t, r, i);
		if (rc == 0) {
			queued++;
			r->cur = i;
		}
	}
	if (!queued) {
		io->res = rc ? rc : -EHOSTDOWN;
		r->finished = 1;
		r->next_done = *done;
		*done = r;
	}
	req_unref(r);
	return 0;
}

int hs_rt_submit(struct hs_tier *base, struct hs_io **ios, int n)
{
	struct rtier *t = (struct rtier *)base;
	struct rreq *done = NULL;
	int rc = 0, i;

	pthread_mutex_lock(&t->mu);
	for (i = 0; i < n; i++) {
		rc = start_req(t, ios[i], &done);
		if (rc < 0)
			break;
	}
	pthread_mutex_unlock(&t->mu);
	fi_cq_signal(t->fab.cq);
	if (i == 0 && rc < 0)
		return hp_error(rc, "remote tier %s: bad request (address 0x%" PRIx64 ", %zu bytes)", base->name,
				ios[0]->addr, ios[0]->len);
	/* Accepted requests always complete; a bad one among them too. */
	for (int k = i; k < n; k++) {
		ios[k]->res = -EINVAL;
		ios[k]->done(ios[k]);
	}
	hs_rt_deliver(t, done);
	return n;
}
