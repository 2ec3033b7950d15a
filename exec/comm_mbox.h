/* Mailboxes for asynchronous SGD (internal to exec/): every rank owns one
 * slot per peer in a region of its own memory that the peers write
 * one-sidedly, so a writer never waits for the reader and a reader never
 * waits for a writer.
 *
 *   struct hp_mbox *m;
 *   hp_mbox_open(nfloats, &m);                  // collective, at start-up
 *   hp_mbox_put(m, peer, my_step, my_state);    // one-sided write
 *   if (hp_mbox_take(m, from, &got) == 1) ...   // newest whole state, if new
 *   hp_mbox_close(m);                           // local: never collective
 *
 * A slot holds two buffers written in turn (sequence numbers 1, 2, 3...:
 * odd into buffer 0, even into buffer 1).  The writer marks a buffer's
 * begin sequence, writes the state and the step it was taken at, then the
 * end sequence, each part complete at the target before the next starts.
 * The reader takes the buffer with the highest end sequence whose begin
 * equals it, copies it, and checks the begin again: if the writer started
 * over that buffer meanwhile (two writes during one copy) the copy is
 * dropped, never used torn.
 *
 * Two homes for the region, one protocol:
 * - hp_mbox_open_store (comm_mbox_store.c), when the job has hpdlf-store
 *   daemons: a shared extent (hs_remote_share) on the daemon of the
 *   receiving rank's node (or the first one), written by the senders and
 *   read by the receiver, both with one-sided RMA through a remote tier of
 *   the mailboxes' own; the daemon's memory, not the rank's, holds it.
 * - hp_mbox_open (comm_mbox.c) otherwise: an MPI window (MPI_Win_allocate,
 *   passive target: one MPI_Win_lock_all for the whole run, MPI_Put +
 *   MPI_Win_flush, no lock a dead rank could hold) with MPI_ERRORS_RETURN.
 * docs/hpdlf-exec.md --sync async says which is used when. */
#ifndef HPDLF_EXEC_COMM_MBOX_H
#define HPDLF_EXEC_COMM_MBOX_H

#include <stddef.h>
#include <stdint.h>

struct hs_tier;

/* What hp_mbox_take found. */
struct hp_mbox_msg {
	uint64_t seq;        /* the sender's write count to this rank */
	int64_t step;        /* the sender's step the state was taken after */
	uint64_t missed;     /* newer states than the last one taken that were overwritten unread */
	int torn;            /* copies dropped because the sender overwrote them meanwhile */
};

struct hp_mbox;
struct hp_mbox_ops {
	int (*put)(struct hp_mbox *m, int peer, int64_t step, const float *state);
	int (*take)(struct hp_mbox *m, int from, float *dst, struct hp_mbox_msg *msg);
	void (*close)(struct hp_mbox *m);
};
/* The head of every kind of mailbox. */
struct hp_mbox {
	const struct hp_mbox_ops *ops;
	char where[160];     /* for the log: "mpi-window", "daemon HOST:PORT" */
};

/* Every rank of the job, once: a slot of nfloats per peer in an MPI
 * window.  Collective. */
int hp_mbox_open(size_t nfloats, struct hp_mbox **out);
/* The same in a shared extent on one of the daemons of `daemons` (the
 * store's remote tier: its daemon list and token are reused, on a tier of
 * the mailboxes' own).  Collective; every rank fails alike. */
int hp_mbox_open_store(struct hs_tier *daemons, size_t nfloats, struct hp_mbox **out);

/* Write state (nfloats) taken after `step` into this rank's slot at peer.
 * HP_EPROTO if the write fails (the peer's node or mailbox is gone). */
static inline int hp_mbox_put(struct hp_mbox *m, int peer, int64_t step, const float *state)
{
	return m->ops->put(m, peer, step, state);
}
/* The newest whole state from rank `from` not taken before into dst:
 * 1 (msg says which), 0 nothing new (or unreadable now). */
static inline int hp_mbox_take(struct hp_mbox *m, int from, float *dst, struct hp_mbox_msg *msg)
{
	return m->ops->take(m, from, dst, msg);
}
/* Local, never collective (ranks finish at different times or die): the
 * MPI window stays for MPI_Finalize; a daemon mailbox is freed. */
static inline void hp_mbox_close(struct hp_mbox *m)
{
	if (m)
		m->ops->close(m);
}

#endif
