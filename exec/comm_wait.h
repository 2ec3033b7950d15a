/* Completing a nonblocking MPI request while sleeping in the kernel
 * between tests (comm_wait.c; internal to the MPI build of exec/). */
#ifndef HPDLF_EXEC_COMM_WAIT_H
#define HPDLF_EXEC_COMM_WAIT_H

#include <pthread.h>

#include <mpi.h>

/* MPI_Wait without the busy poll, called holding mu (the module's MPI
 * mutex), which it releases while it sleeps; MPI's error code. */
int hp_comm_wait(MPI_Request *req, pthread_mutex_t *mu);
/* The same with the sleeps capped at max_ns: a pipeline stage's message
 * (exec/comm.c) is on the critical path of every micro-batch, where a
 * 0.5 ms oversleep per hand-off adds up over the step (a shorter cap
 * costs CPU: at 50 us the waits of a loaded machine took a third of a
 * stage's CPU time). */
int hp_comm_wait_cap(MPI_Request *req, pthread_mutex_t *mu, long max_ns);

#endif
