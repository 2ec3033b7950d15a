/* The ranks' watchdog (internal to exec/ and tools/): no rank of a job
 * waits forever for a peer that is gone.
 *
 * MPI cannot say which peer died: a rank blocked in a collective with a
 * dead peer just waits (shared memory) or the whole job aborts (TCP), and
 * the launcher then kills the rest without a word from them.  So the ranks
 * keep TCP connections of their own in a star around rank 0, each side
 * sending a heartbeat every second from a thread of its own:
 *
 *   - a peer's connection closing without its goodbye (the process died,
 *     e.g. SIGKILL: the kernel closes its sockets at once) or a peer
 *     silent for HPDLF_RANK_TIMEOUT seconds (default 8: a node lost, a
 *     process stopped) is a lost rank; rank 0 tells the others which one;
 *   - a collective of this rank lasting HPDLF_COMM_TIMEOUT seconds
 *     (default 3600, 0: never) is a stuck job (ranks that issue different
 *     collectives, a peer stuck outside MPI).
 *
 * Either way the handler set with hp_comm_on_lost is called from the
 * watchdog thread (it prints, say) and the process ends with _exit(1), as
 * MPI's own fatal error handler would: the collective it waits in cannot
 * be interrupted.  hp_comm_finalize says goodbye first, so a rank that
 * finished is never taken for lost.
 *
 * Set-up (comm_join.c, after hp_comm_init): rank 0 listens, broadcasts its
 * addresses, port and a random job token; the others connect and present
 * the token and their rank; rank 0 accepts them all. */
#ifndef HPDLF_EXEC_COMM_WATCH_H
#define HPDLF_EXEC_COMM_WATCH_H

#include <stdint.h>

/* self: this rank; lost: the lost rank, or -1 (a collective's deadline). */
typedef void (*hp_comm_lost_fn)(int self, int lost, int nranks, const char *why);
void hp_comm_on_lost(hp_comm_lost_fn fn);

/* What rank 0 broadcasts: where to connect, and the token to present. */
struct hp_watch_addr {
	uint64_t token;
	uint32_t port;      /* host order */
	uint32_t naddr;
	uint32_t addr[8];   /* IPv4, network order; loopback last */
};

/* Join the watchdog: every rank of a job of more than one, after
 * hp_comm_init (comm_join.c). */
int hp_comm_join_watch(void);

/* HPDLF_RANK_TIMEOUT and HPDLF_COMM_TIMEOUT (HP_EUSAGE if malformed). */
int hp_comm_watch_config(void);
int hp_comm_watch_listen(struct hp_watch_addr *a);
int hp_comm_watch_accept(const struct hp_watch_addr *a, int nranks);
int hp_comm_watch_connect(const struct hp_watch_addr *a, int rank, int nranks);
/* Start the thread (after accept/connect). */
int hp_comm_watch_start(int rank, int nranks);
/* Around every collective (comm.c): the deadline's clock. */
void hp_comm_watch_enter(const char *what);
void hp_comm_watch_leave(void);
/* This rank stops on an error of its own (it says why): the peers stop
 * too, naming it, rather than wait for it. */
void hp_comm_watch_fail(void);
/* Goodbye to the peers, stop the thread (idempotent; nothing if never
 * started). */
void hp_comm_watch_stop(void);

/* Asynchronous SGD (--sync async): a lost or failed peer is marked, and
 * this rank trains on; rank 0 still tells the others, and a lost rank 0
 * leaves each rank on its own.  Call before hp_comm_join_watch. */
void hp_comm_watch_tolerate(void);
int hp_comm_watch_tolerant(void);
enum { HP_PEER_ALIVE = 0, HP_PEER_LOST = 1, HP_PEER_DONE = 2 };
/* What this rank knows of peer p now (any thread). */
int hp_comm_watch_peer(int p);
/* Peers lost so far; why[p] gets the reason of a lost one (may be NULL). */
int hp_comm_watch_lost_count(void);
const char *hp_comm_watch_lost_why(int p);
/* This rank finished training: the peers mark it done, not lost, when it
 * goes.  finishing: it is about to wait in MPI_Finalize, which a peer lost
 * from then on would make wait forever: the watchdog then ends the
 * process with status 0 (its work is done and written). */
void hp_comm_watch_done(int finishing);
/* Leave the job after a run that succeeded: hp_comm_finalize, or under
 * --sync async with a peer lost, without MPI_Finalize (it would wait for
 * that peer): 1 then, and the caller ends the process with _exit once its
 * output is flushed (comm_join.c). */
int hp_comm_leave(void);

#endif
