/* The communication thread (internal to exec/): gradient buckets reduced
 * while backward goes on.
 *
 *   uint64_t t;
 *   hp_comm_thread_submit(node, &kargs, trace, &t);  // returns at once
 *   ... run the next kernels ...
 *   hp_comm_thread_wait(t);         // before a reader of node's outputs
 *   hp_comm_thread_drain();         // end of the step: all of them
 *
 * One thread takes the submitted collectives (AllReduce, ReduceScatter,
 * AllGather nodes: hp_comm_is_allreduce) from a FIFO and runs each with
 * hp_comm_run_allreduce, so the collectives of a rank are issued in the
 * order they were submitted: the executors submit in their schedule's
 * order, which is the same on every rank.  The tensors' memory must stay
 * valid and untouched until the job was waited for.  A lost peer does not
 * hang the thread forever: the ranks' watchdog (comm_watch.h) ends the
 * process. */
#ifndef HPDLF_EXEC_COMM_THREAD_H
#define HPDLF_EXEC_COMM_THREAD_H

#include <stdint.h>

struct hp_node;
struct hp_kargs;
struct hp_trace;

/* Whether collectives go to the thread: more than one rank, and
 * HPDLF_COMM_THREAD is not 0 (0: run them inline, in graph order, as
 * before the thread existed; for comparison). */
int hp_comm_thread_enabled(void);
/* The same, whatever the rank count (what --plan --ranks models). */
int hp_comm_thread_wanted(void);
/* Queue node n's collective over a's tensors (the arrays are copied, not
 * the data); *ticket identifies it for hp_comm_thread_wait.  trace: a
 * span on the communication lane, or NULL. */
int hp_comm_thread_submit(const struct hp_node *n, const struct hp_kargs *a, struct hp_trace *trace,
			  uint64_t *ticket);
/* Until the job with this ticket and every one before it completed; the
 * first failure among them (its message), else 0. */
int hp_comm_thread_wait(uint64_t ticket);
/* Until every submitted job completed (the same result). */
int hp_comm_thread_drain(void);
/* Submit and wait: a collective on the thread from a caller that must
 * block anyway (the task net's transitions). */
int hp_comm_thread_run(const struct hp_node *n, const struct hp_kargs *a, struct hp_trace *trace);
struct hp_graph;
/* The in-core run order (comm_order.c): order[0..nnodes) holds every node,
 * those reading a reduction's sums (deferred[i] = 1) after the others;
 * the graph's order when the thread is not enabled.  Returns how many
 * were deferred. */
int hp_comm_run_order(const struct hp_graph *g, char *deferred, int *order);
/* Extend last_use (per value, positions in that order) of the tensors
 * the collectives touch until they are waited for at the latest. */
void hp_comm_keep_inputs(const struct hp_graph *g, int *last_use);
/* Stop and join the thread after draining (idempotent; optional: it
 * idles outside MPI between runs, so MPI_Finalize may come with it alive). */
void hp_comm_thread_stop(void);

#endif
