/* The ranks join the watchdog (comm_watch.h) once MPI is up: rank 0
 * listens and broadcasts where, the others connect, rank 0 accepts. */
#include "hpdlf/error.h"
#include "exec/comm.h"
#include "exec/comm_watch.h"

int hp_comm_join_watch(void)
{
	struct hp_watch_addr a = { 0 };
	int rank = hp_comm_rank(), n = hp_comm_size(), rc = 0, r2;

	if (n < 2)
		return 0;
	if ((rc = hp_comm_watch_config()) < 0)
		return rc; /* the same on every rank: before any connection */
	if (rank == 0 && (rc = hp_comm_watch_listen(&a)) < 0)
		a.port = 0; /* tells the others */
	if ((r2 = hp_comm_bcast(&a, sizeof a, 0)) < 0)
		return r2;
	if (rc == 0 && !a.port)
		return hp_error(HP_EPROTO, "rank %d of %d: rank 0 could not open its watchdog port", rank, n);
	if (rc == 0)
		rc = rank == 0 ? hp_comm_watch_accept(&a, n) : hp_comm_watch_connect(&a, rank, n);
	return rc < 0 ? rc : hp_comm_watch_start(rank, n);
}

int hp_comm_leave(void)
{
	if (!hp_comm_watch_tolerant()) {
		hp_comm_finalize();
		return 0;
	}
	hp_comm_watch_done(1);
	if (hp_comm_watch_lost_count() > 0) {
		/* MPI_Finalize waits for every rank, and a lost one never comes */
		hp_comm_watch_stop();
		return 1;
	}
	hp_comm_finalize();
	return 0;
}
