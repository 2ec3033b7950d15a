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
 * The region is an MPI window (MPI_Win_allocate, passive target: one
 * MPI_Win_lock_all for the whole run, MPI_Put + MPI_Win_flush, no lock a
 * dead rank could hold) with MPI_ERRORS_RETURN: see docs/hpdlf-exec.md
 * --sync async for why MPI RMA and not the store daemons. */
#ifndef HPDLF_EXEC_COMM_MBOX_H
#define HPDLF_EXEC_COMM_MBOX_H

#include <stddef.h>
#include <stdint.h>

struct hp_mbox;

/* What hp_mbox_take found. */
struct hp_mbox_msg {
	uint64_t seq;        /* the sender's write count to this rank */
	int64_t step;        /* the sender's step the state was taken after */
	uint64_t missed;     /* newer states than the last one taken that were overwritten unread */
	int torn;            /* copies dropped because the sender overwrote them meanwhile */
};

/* Every rank of the job, once: a slot of nfloats per peer.  Collective. */
int hp_mbox_open(size_t nfloats, struct hp_mbox **out);
/* Write state (nfloats) taken after `step` into this rank's slot at peer.
 * HP_EPROTO if MPI refuses (the peer's node is gone). */
int hp_mbox_put(struct hp_mbox *m, int peer, int64_t step, const float *state);
/* The newest whole state from rank `from` not taken before into dst:
 * 1 (msg says which), 0 nothing new. */
int hp_mbox_take(struct hp_mbox *m, int from, float *dst, struct hp_mbox_msg *msg);
/* Leave the window in place (freeing it is collective, and ranks finish
 * at different times or die): MPI_Finalize releases it. */
void hp_mbox_close(struct hp_mbox *m);

#endif
