/* Mailboxes over an MPI window (comm_mbox.h). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <mpi.h>

#include "hpdlf/error.h"
#include "exec/comm.h"
#include "exec/comm_mbox.h"

/* One buffer of a slot: the header, then the state, 64-byte aligned. */
struct mbox_head {
	uint64_t begin, end; /* sequence numbers (0: never written) */
	int64_t step;
	uint64_t pad[5];
};

struct mpi_mbox {
	struct hp_mbox base;    /* first */
	MPI_Win win;
	char *region;      /* this rank's region: nranks slots of 2 buffers */
	size_t nfloats, buf_bytes;
	int rank, nranks;
	uint64_t *sent;    /* by peer: writes so far */
	uint64_t *taken;   /* by sender: the sequence last taken */
};

static int mpi_put(struct hp_mbox *hm, int peer, int64_t step, const float *state);
static int mpi_take(struct hp_mbox *hm, int from, float *dst, struct hp_mbox_msg *msg);
static void mpi_close(struct hp_mbox *hm);

static const struct hp_mbox_ops mpi_ops = { .put = mpi_put, .take = mpi_take, .close = mpi_close };

static int mpi_fail(const struct mpi_mbox *m, int err, const char *what, int peer)
{
	char msg[MPI_MAX_ERROR_STRING];
	int len = 0;

	MPI_Error_string(err, msg, &len);
	msg[len < (int)sizeof msg ? len : (int)sizeof msg - 1] = 0;
	return hp_error(HP_EPROTO, "rank %d of %d: %s of rank %d's mailbox failed: %s", m->rank, m->nranks, what,
			peer, msg);
}

static MPI_Aint buf_at(const struct mpi_mbox *m, int sender, int b)
{
	return (MPI_Aint)(((size_t)sender * 2 + (size_t)b) * m->buf_bytes);
}

int hp_mbox_open(size_t nfloats, struct hp_mbox **out)
{
	struct mpi_mbox *m = calloc(1, sizeof *m);
	int err;

	*out = NULL;
	if (!m)
		return hp_error(-ENOMEM, "out of memory");
	m->base.ops = &mpi_ops;
	snprintf(m->base.where, sizeof m->base.where, "mpi-window");
	m->rank = hp_comm_rank();
	m->nranks = hp_comm_size();
	m->nfloats = nfloats;
	m->buf_bytes = sizeof(struct mbox_head) + (nfloats * sizeof(float) + 63) / 64 * 64;
	m->sent = calloc((size_t)m->nranks, sizeof *m->sent);
	m->taken = calloc((size_t)m->nranks, sizeof *m->taken);
	if (!m->sent || !m->taken) {
		mpi_close(&m->base);
		return hp_error(-ENOMEM, "out of memory");
	}
	hp_comm_lock();
	err = MPI_Win_allocate((MPI_Aint)(m->buf_bytes * 2 * (size_t)m->nranks), 1, MPI_INFO_NULL, MPI_COMM_WORLD,
			       &m->region, &m->win);
	if (err == MPI_SUCCESS) {
		/* a dead peer's window is an error code, not the end of the job */
		MPI_Win_set_errhandler(m->win, MPI_ERRORS_RETURN);
		memset(m->region, 0, m->buf_bytes * 2 * (size_t)m->nranks);
		/* one shared epoch for the whole run: no lock is ever taken
		 * later, so a rank killed mid-write holds none */
		err = MPI_Win_lock_all(MPI_MODE_NOCHECK, m->win);
	}
	hp_comm_unlock();
	if (err != MPI_SUCCESS) {
		int rc = mpi_fail(m, err, "creating", m->rank);
		free(m->sent);
		free(m->taken);
		free(m);
		return rc;
	}
	/* every rank's region is zeroed before anyone writes into it */
	if ((err = hp_comm_barrier()) < 0) {
		mpi_close(&m->base);
		return err;
	}
	*out = &m->base;
	return 0;
}

/* One put of len bytes at displacement at of peer, complete there on return. */
static int put_now(struct mpi_mbox *m, int peer, MPI_Aint at, const void *src, size_t len)
{
	int err = MPI_Put(src, (int)len, MPI_BYTE, peer, at, (int)len, MPI_BYTE, m->win);

	if (err == MPI_SUCCESS)
		err = MPI_Win_flush(peer, m->win);
	return err;
}

static int mpi_put(struct hp_mbox *hm, int peer, int64_t step, const float *state)
{
	struct mpi_mbox *m = (struct mpi_mbox *)hm;
	uint64_t seq = m->sent[peer] + 1;
	MPI_Aint at = buf_at(m, m->rank, (int)((seq + 1) % 2));
	size_t bytes = m->nfloats * sizeof(float);
	int err = MPI_SUCCESS;

	hp_comm_lock();
	/* begin first, end last, each flushed: a reader that sees end == begin
	 * after its copy saw a buffer no write touched meanwhile */
	err = put_now(m, peer, at + (MPI_Aint)offsetof(struct mbox_head, begin), &seq, sizeof seq);
	for (size_t off = 0; err == MPI_SUCCESS && off < bytes; off += (size_t)1 << 30) {
		size_t k = bytes - off < ((size_t)1 << 30) ? bytes - off : (size_t)1 << 30;
		err = MPI_Put((const char *)state + off, (int)k, MPI_BYTE, peer,
			      at + (MPI_Aint)(sizeof(struct mbox_head) + off), (int)k, MPI_BYTE, m->win);
	}
	if (err == MPI_SUCCESS)
		err = put_now(m, peer, at + (MPI_Aint)offsetof(struct mbox_head, step), &step, sizeof step);
	if (err == MPI_SUCCESS)
		err = put_now(m, peer, at + (MPI_Aint)offsetof(struct mbox_head, end), &seq, sizeof seq);
	hp_comm_unlock();
	if (err != MPI_SUCCESS)
		return mpi_fail(m, err, "writing", peer);
	m->sent[peer] = seq;
	return 0;
}

static uint64_t load_seq(const uint64_t *p)
{
	return __atomic_load_n(p, __ATOMIC_ACQUIRE);
}

/* Copy buffer b of sender's slot into dst if it holds a whole state newer
 * than the last taken: 1 copied, 0 not newer, -1 torn. */
static int copy_buf(struct mpi_mbox *m, int sender, int b, float *dst, struct hp_mbox_msg *msg)
{
	const char *p = m->region + buf_at(m, sender, b);
	const struct mbox_head *h = (const struct mbox_head *)p;
	uint64_t end = load_seq(&h->end);

	if (!end || end <= m->taken[sender] || load_seq(&h->begin) != end)
		return 0;
	msg->step = __atomic_load_n(&h->step, __ATOMIC_ACQUIRE);
	memcpy(dst, p + sizeof *h, m->nfloats * sizeof(float));
	__atomic_thread_fence(__ATOMIC_ACQUIRE);
	hp_comm_lock();
	MPI_Win_sync(m->win); /* the writes of the copy's time are visible now */
	hp_comm_unlock();
	if (load_seq(&h->begin) != end)
		return -1;
	msg->seq = end;
	return 1;
}

static int mpi_take(struct hp_mbox *hm, int from, float *dst, struct hp_mbox_msg *msg)
{
	struct mpi_mbox *m = (struct mpi_mbox *)hm;
	const struct mbox_head *h0 = (const void *)(m->region + buf_at(m, from, 0)),
			       *h1 = (const void *)(m->region + buf_at(m, from, 1));
	int first, rc;

	memset(msg, 0, sizeof *msg);
	hp_comm_lock();
	MPI_Win_sync(m->win); /* the peers' completed puts are visible */
	hp_comm_unlock();
	/* the newer buffer first; the older one if the newer is being
	 * written (its begin ran ahead of its end) */
	first = load_seq(&h1->end) > load_seq(&h0->end);
	for (int i = 0; i < 2; i++) {
		if ((rc = copy_buf(m, from, i ? !first : first, dst, msg)) > 0) {
			msg->missed = msg->seq - m->taken[from] - 1;
			m->taken[from] = msg->seq;
			return 1;
		}
		msg->torn += rc < 0;
	}
	return 0;
}

static void mpi_close(struct hp_mbox *hm)
{
	struct mpi_mbox *m = (struct mpi_mbox *)hm;

	if (!m)
		return;
	if (m->region) {
		hp_comm_lock();
		MPI_Win_unlock_all(m->win); /* this rank's own puts are complete; the window stays */
		hp_comm_unlock();
	}
	free(m->sent);
	free(m->taken);
	free(m);
}
