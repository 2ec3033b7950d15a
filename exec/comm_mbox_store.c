/* Mailboxes in the store's daemons (comm_mbox.h): each rank's mailbox is a
 * shared extent on the daemon of its node (else the first one), which the
 * senders write and the receiver reads with one-sided RMA: the daemon's
 * CPU serves both, so a slow, paged-out or stopped rank delays nobody, and
 * the mailbox costs the rank none of its --budget, only one staging buffer.
 *
 * A mailbox: a page of head per sender and buffer, then the buffers
 * (RMA moves whole pages, HS_IO_ALIGN):
 *   [head s=0 b=0][head 0 1][head 1 0]...[state s=0 b=0][state 0 1]...
 * The writer of sequence n into buffer b = (n + 1) % 2 writes the head
 * {begin n, end 0, step}, then the state, then the head {begin n, end n,
 * step}, each delivered into the daemon's memory before the next starts
 * (FI_DELIVERY_COMPLETE).  The reader reads both heads, copies the buffer
 * whose end is the newest and equals its begin, and reads that head again:
 * a begin that moved means the writer started over it during the copy,
 * which is then dropped (torn), never used. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "hpdlf/error.h"
#include "hpdlf/store.h"
#include "exec/comm.h"
#include "exec/comm_mbox.h"
#include "store/remote/remote.h"
#include "store/tier.h"

#define PAGE HS_IO_ALIGN

struct store_head {
	uint64_t begin, end;    /* sequence numbers (0: never written, or being written) */
	int64_t step;
};

struct store_mbox {
	struct hp_mbox base;    /* first */
	struct hs_tier *tier;   /* the mailboxes' own endpoint to the daemons */
	uint64_t *box;          /* by rank: the tier address of its mailbox */
	uint64_t box_len;
	size_t nfloats, state_bytes;
	int rank, nranks;
	uint64_t *sent;         /* by peer: writes so far */
	uint64_t *taken;        /* by sender: the sequence last taken */
	unsigned char *buf;     /* staging: a state, then 3 head pages */
};

static int store_put(struct hp_mbox *hm, int peer, int64_t step, const float *state);
static int store_take(struct hp_mbox *hm, int from, float *dst, struct hp_mbox_msg *msg);
static void store_close(struct hp_mbox *hm);

static const struct hp_mbox_ops store_ops = { .put = store_put, .take = store_take, .close = store_close };

/* One transfer.  After a refused one (a write into the mailbox of a rank
 * that died, freed with its lease) tcp drops the endpoint's connection to
 * that daemon and the next transfers fail (-ENOTCONN and the like) until
 * a new one is made: those are retried for up to 2 s. */
static int rw(struct store_mbox *m, enum hs_io_op op, uint64_t addr, void *buf, size_t len)
{
	int rc = hs_tier_rw(m->tier, op, addr, buf, len);

	for (int k = 0; k < 400 && (rc == -ENOTCONN || rc == -ECONNRESET || rc == -EPIPE); k++) {
		nanosleep(&(struct timespec){ 0, 5000000 }, NULL);
		rc = hs_tier_rw(m->tier, op, addr, buf, len);
	}
	return rc;
}

static uint64_t head_at(const struct store_mbox *m, int owner, int sender, int b)
{
	return m->box[owner] + ((uint64_t)sender * 2 + (uint64_t)b) * PAGE;
}

static uint64_t state_at(const struct store_mbox *m, int owner, int sender, int b)
{
	return m->box[owner] + (uint64_t)m->nranks * 2 * PAGE + ((uint64_t)sender * 2 + (uint64_t)b) * m->state_bytes;
}

static unsigned char *page(const struct store_mbox *m, int k)
{
	return m->buf + m->state_bytes + (size_t)k * PAGE;
}

/* The daemon on this rank's node: its host is this node's name (full or
 * short); none: the first of the list. */
static int nearest_daemon(struct hs_tier *t)
{
	char host[256] = "", where[160];

	if (gethostname(host, sizeof host - 1) < 0)
		return 0;
	size_t shortlen = strcspn(host, ".");
	for (int i = 0; i < hs_remote_daemons(t); i++) {
		if (hs_remote_daemon_where(t, i, where, sizeof where) != 0)
			continue; /* dead, or no such daemon */
		char *colon = strrchr(where, ':');
		size_t hl = colon ? (size_t)(colon - where) : strlen(where);
		if ((hl == strlen(host) && !strncmp(where, host, hl)) || (hl == shortlen && !strncmp(where, host, hl)))
			return i;
	}
	return 0;
}

static void box_name(char *buf, size_t len, uint64_t job, int rank)
{
	snprintf(buf, len, "hpdlf-asgd-%016" PRIx64 "-rank%d", job, rank);
}

/* This rank's mailbox on its daemon, heads zeroed. */
static int make_box(struct store_mbox *m, uint64_t job)
{
	struct hs_tier *t = m->tier;
	int di = nearest_daemon(t), rc;
	char name[96], where[160];

	box_name(name, sizeof name, job, m->rank);
	hs_remote_daemon_where(t, di, where, sizeof where);
	snprintf(m->base.where, sizeof m->base.where, "daemon %s", where);
	if ((rc = hs_remote_share(t, di, name, m->box_len, &m->box[m->rank])) < 0)
		return hp_error_prefix(rc, "rank %d: its asynchronous-SGD mailbox (%" PRIu64 " bytes)", m->rank,
				       m->box_len);
	/* a daemon hands out zeroed bytes; the heads are cleared anyway, so a
	 * reader can never take a state nobody wrote */
	unsigned char *zero = calloc(1, (size_t)m->nranks * 2 * PAGE + PAGE);
	if (!zero)
		return hp_error(-ENOMEM, "out of memory");
	unsigned char *z = (unsigned char *)(((uintptr_t)zero + PAGE - 1) & ~(uintptr_t)(PAGE - 1));
	rc = hs_tier_rw(t, HS_IO_WRITE, m->box[m->rank], z, (size_t)m->nranks * 2 * PAGE);
	free(zero);
	return rc < 0 ? hp_error_prefix(rc, "rank %d: clearing its mailbox on %s", m->rank, where) : 0;
}

/* The peers' mailboxes by name, once every rank made its own. */
static int find_boxes(struct store_mbox *m, uint64_t job)
{
	for (int q = 0; q < m->nranks; q++) {
		char name[96];
		uint64_t len;
		int rc;
		if (q == m->rank)
			continue;
		box_name(name, sizeof name, job, q);
		if ((rc = hs_remote_open_shared(m->tier, name, &m->box[q], &len)) < 0)
			return hp_error_prefix(rc, "rank %d: rank %d's mailbox", m->rank, q);
		if (len != m->box_len)
			return hp_error(HP_EPROTO, "rank %d: rank %d's mailbox has %" PRIu64 " bytes, not %" PRIu64,
					m->rank, q, len, m->box_len);
	}
	return 0;
}

/* Every rank learns whether any failed (so none waits for a failed one). */
static int agree(int rc)
{
	uint64_t lo, hi;
	int c = hp_comm_minmax_u64(rc < 0, &lo, &hi);

	if (c < 0)
		return c;
	if (rc < 0)
		return rc;
	return hi ? hp_error(HP_EPROTO, "another rank could not set up its asynchronous-SGD mailbox") : 0;
}

static int setup(struct store_mbox *m, struct hs_tier *daemons)
{
	uint64_t job = 0;
	int rc;

	/* one tag per job: several jobs may share the daemons */
	if (m->rank == 0 && getrandom(&job, sizeof job, 0) != (ssize_t)sizeof job)
		job = (uint64_t)getpid() << 20 ^ (uint64_t)time(NULL);
	if ((rc = hp_comm_bcast(&job, sizeof job, 0)) < 0)
		return rc;
	rc = hs_remote_reopen(daemons, "asgd-mailboxes", &m->tier);
	if (rc == 0)
		rc = make_box(m, job);
	if ((rc = agree(rc)) < 0)
		return rc;
	return agree(find_boxes(m, job));
}

int hp_mbox_open_store(struct hs_tier *daemons, size_t nfloats, struct hp_mbox **out)
{
	struct store_mbox *m = calloc(1, sizeof *m);
	int rc;

	*out = NULL;
	if (!m)
		return hp_error(-ENOMEM, "out of memory");
	m->base.ops = &store_ops;
	m->rank = hp_comm_rank();
	m->nranks = hp_comm_size();
	m->nfloats = nfloats;
	m->state_bytes = (nfloats * sizeof(float) + PAGE - 1) / PAGE * PAGE;
	m->box_len = (uint64_t)m->nranks * 2 * (PAGE + m->state_bytes);
	m->box = calloc((size_t)m->nranks, sizeof *m->box);
	m->sent = calloc((size_t)m->nranks, sizeof *m->sent);
	m->taken = calloc((size_t)m->nranks, sizeof *m->taken);
	m->buf = aligned_alloc(PAGE, m->state_bytes + 3 * PAGE);
	if (!m->box || !m->sent || !m->taken || !m->buf)
		rc = hp_error(-ENOMEM, "out of memory");
	else
		rc = setup(m, daemons);
	if (rc < 0) {
		store_close(&m->base);
		return rc;
	}
	*out = &m->base;
	return 0;
}

static int put_head(struct store_mbox *m, int peer, int b, uint64_t begin, uint64_t end, int64_t step)
{
	unsigned char *p = page(m, 0);

	memset(p, 0, PAGE);
	memcpy(p, &(struct store_head){ begin, end, step }, sizeof(struct store_head));
	return rw(m, HS_IO_WRITE, head_at(m, peer, m->rank, b), p, PAGE);
}

static int store_put(struct hp_mbox *hm, int peer, int64_t step, const float *state)
{
	struct store_mbox *m = (struct store_mbox *)hm;
	uint64_t seq = m->sent[peer] + 1;
	int b = (int)((seq + 1) % 2), rc;

	/* begin (end 0: not whole), the state, then end = begin: each one in
	 * the daemon's memory before the next is sent */
	rc = put_head(m, peer, b, seq, 0, step);
	if (rc == 0) {
		memcpy(m->buf, state, m->nfloats * sizeof(float));
		memset(m->buf + m->nfloats * sizeof(float), 0, m->state_bytes - m->nfloats * sizeof(float));
		rc = rw(m, HS_IO_WRITE, state_at(m, peer, m->rank, b), m->buf, m->state_bytes);
	}
	if (rc == 0)
		rc = put_head(m, peer, b, seq, seq, step);
	if (rc < 0)
		return hp_error(HP_EPROTO, "rank %d of %d: writing rank %d's mailbox failed: %s", m->rank, m->nranks,
				peer, hp_strerror(rc));
	m->sent[peer] = seq;
	return 0;
}

static struct store_head head_of(const unsigned char *p)
{
	struct store_head h;

	memcpy(&h, p, sizeof h);
	return h;
}

#define TORN 2

/* Buffer b of `from`'s slot, whose head h was read: 1 copied into dst, 0
 * not newer, TORN, or an error. */
static int copy_buf(struct store_mbox *m, int from, int b, struct store_head h, float *dst, struct hp_mbox_msg *msg)
{
	int rc;

	if (!h.end || h.end <= m->taken[from] || h.begin != h.end)
		return 0;
	if ((rc = rw(m, HS_IO_READ, state_at(m, m->rank, from, b), m->buf, m->state_bytes)) < 0 ||
	    (rc = rw(m, HS_IO_READ, head_at(m, m->rank, from, b), page(m, 0), PAGE)) < 0)
		return rc;
	if (head_of(page(m, 0)).begin != h.end)
		return TORN;
	memcpy(dst, m->buf, m->nfloats * sizeof(float));
	msg->seq = h.end;
	msg->step = h.step;
	return 1;
}

static int store_take(struct hp_mbox *hm, int from, float *dst, struct hp_mbox_msg *msg)
{
	struct store_mbox *m = (struct store_mbox *)hm;
	struct store_head h[2];
	int first, rc;

	memset(msg, 0, sizeof *msg);
	/* both heads of the slot in one read (adjacent pages) */
	if (rw(m, HS_IO_READ, head_at(m, m->rank, from, 0), page(m, 1), 2 * PAGE) < 0)
		return 0; /* the daemon is unreachable now: nothing new */
	h[0] = head_of(page(m, 1));
	h[1] = head_of(page(m, 2));
	/* the newer buffer first; the older one if the newer is being written */
	first = h[1].end > h[0].end;
	for (int i = 0; i < 2; i++) {
		int b = i ? !first : first;
		if ((rc = copy_buf(m, from, b, h[b], dst, msg)) == 1) {
			msg->missed = msg->seq - m->taken[from] - 1;
			m->taken[from] = msg->seq;
			return 1;
		}
		msg->torn += rc == TORN;
	}
	return 0;
}

static void store_close(struct hp_mbox *hm)
{
	struct store_mbox *m = (struct store_mbox *)hm;

	if (m->tier && m->box && m->box[m->rank])
		m->tier->ops->release(m->tier, m->box[m->rank], m->box_len); /* else its lease frees it */
	hs_tier_close(m->tier);
	free(m->box);
	free(m->sent);
	free(m->taken);
	free(m->buf);
	free(m);
}
