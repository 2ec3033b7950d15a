/* Waiting for a collective without holding a core.  A blocking
 * MPI_Allreduce polls until the slowest rank arrives: Open MPI's progress
 * loop spins (sched_yield at best, with mpi_yield_when_idle), so a rank
 * that is early takes a whole core from its own compute worker, its
 * store's io_uring completion thread and the kernel's io-wq workers, which
 * the late rank's work and, on a shared machine, everyone else's need.
 * Here the collective is started nonblocking and tested: a few tests back
 * to back (a short wait costs no sleep), then sleeps that double from
 * WAIT_MIN_NS to WAIT_MAX_NS, each a real sleep in the kernel.  The cap
 * bounds the latency added to a long wait; a large message's fragments
 * move on every test, so its bandwidth drops only while the peer is late.
 * The caller's MPI mutex is released while sleeping: MPI stays
 * SERIALIZED, and a collective on another communicator can go on. */
#include <pthread.h>
#include <time.h>

#include <mpi.h>

#include "exec/comm_wait.h"

#define WAIT_SPINS 64
#define WAIT_MIN_NS 2000L
#define WAIT_MAX_NS 500000L

int hp_comm_wait(MPI_Request *req, pthread_mutex_t *mu)
{
	return hp_comm_wait_cap(req, mu, WAIT_MAX_NS);
}

int hp_comm_wait_cap(MPI_Request *req, pthread_mutex_t *mu, long max_ns)
{
	long ns = WAIT_MIN_NS;
	int done = 0, err;

	for (int i = 0; i < WAIT_SPINS; i++)
		if ((err = MPI_Test(req, &done, MPI_STATUS_IGNORE)) != MPI_SUCCESS || done)
			return err;
	for (;;) {
		struct timespec ts = { 0, ns };
		if ((err = MPI_Test(req, &done, MPI_STATUS_IGNORE)) != MPI_SUCCESS || done)
			return err;
		pthread_mutex_unlock(mu); /* another thread's collective may start meanwhile */
		nanosleep(&ts, NULL);
		pthread_mutex_lock(mu);
		ns = ns * 2 > max_ns ? max_ns : ns * 2;
	}
}
