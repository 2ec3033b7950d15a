/* The communication thread: a FIFO of collectives and one thread that runs
 * them (comm_thread.h).  The executors submit a bucket's reduction when its
 * last gradient exists and go on with backward; the thread issues the
 * collectives in submission order, and a reader of a bucket's sums waits
 * for its ticket.  MPI stays SERIALIZED: every call still goes through
 * comm.c's mutex, which comm_wait.c releases while a collective waits, so
 * the main thread's own collectives (the loss, --sync-bn's statistics on a
 * second communicator) can interleave. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hpdlf/error.h"
#include "hpdlf/graph.h"
#include "exec/comm.h"
#include "exec/comm_thread.h"
#include "exec/trace.h"

struct job {
	struct job *next;
	const struct hp_node *n;
	struct hp_kargs a;
	struct hp_trace *trace;
	uint64_t ticket;
	/* the tensors' descriptions, copied: in[0..nin) then out[0..nout) */
	struct hp_tensor t[];
};

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t work_cv = PTHREAD_COND_INITIALIZER, done_cv = PTHREAD_COND_INITIALIZER;
static struct job *head, *tail;
static uint64_t submitted, completed;
static int started, quit, err; /* err: the first failure, until drained */
static char errmsg[512];
static pthread_t thread;
static struct hp_trace *named;

int hp_comm_thread_wanted(void)
{
	const char *e = getenv("HPDLF_COMM_THREAD");

	return !(e && !strcmp(e, "0"));
}

int hp_comm_thread_enabled(void)
{
	return hp_comm_size() > 1 && hp_comm_thread_wanted();
}

/* One job: after a failure the rest are skipped (the rank is stopping). */
static void run_job(struct job *j)
{
	double u0 = hp_trace_now_us(j->trace);
	int rc;

	pthread_mutex_lock(&mu);
	rc = err;
	pthread_mutex_unlock(&mu);
	/* First every rank's arrival (a barrier, waited for asleep), then the
	 * collective.  Per-rank traces showed a bucket's collective ending at
	 * the same moment on both ranks but starting up to 500 ms apart: the
	 * later rank's kernels, slowed by other load on the cores, not the
	 * wire.  Apart, the wait for the last rank is a span of its own (not
	 * communication, bench/bench_dp.py), and the collective starts its
	 * tests afresh with short sleeps when its data can move.  Every rank
	 * does it, traced or not (only rank 0 traces); one barrier's latency
	 * per bucket.  A collective over this rank's group (attribute
	 * group: a pipeline stage's replicas) waits for the group only. */
	if (rc == 0 && (rc = hp_attr_int(j->n, "group", 0) ? hp_comm_group_arrive() : hp_comm_arrive()) == 0) {
		double u1 = hp_trace_now_us(j->trace);
		if (j->trace)
			hp_trace_span(j->trace, HP_LANE_COMM, "peer-wait", "wait for peers", u0, u1);
		u0 = u1;
	}
	if (rc == 0)
		rc = hp_comm_run_allreduce(j->n, &j->a);
	if (j->trace)
		hp_trace_span(j->trace, HP_LANE_COMM, j->n->op_type, j->n->name, u0, hp_trace_now_us(j->trace));
	pthread_mutex_lock(&mu);
	if (rc < 0 && !err) {
		err = rc;
		snprintf(errmsg, sizeof errmsg, "%s", hp_errmsg()[0] ? hp_errmsg() : hp_strerror(rc));
	}
	completed = j->ticket;
	pthread_cond_broadcast(&done_cv);
	pthread_mutex_unlock(&mu);
}

static void *main_loop(void *arg)
{
	(void)arg;
	pthread_mutex_lock(&mu);
	for (;;) {
		while (!head && !quit)
			pthread_cond_wait(&work_cv, &mu);
		if (!head)
			break;
		struct job *j = head;
		head = j->next;
		if (!head)
			tail = NULL;
		pthread_mutex_unlock(&mu);
		run_job(j);
		free(j);
		pthread_mutex_lock(&mu);
	}
	pthread_mutex_unlock(&mu);
	return NULL;
}

static struct job *job_new(const struct hp_node *n, const struct hp_kargs *a, struct hp_trace *trace)
{
	struct job *j = malloc(sizeof *j + (size_t)(a->nin + a->nout) * sizeof j->t[0]);

	if (!j)
		return NULL;
	memcpy(j->t, a->in, (size_t)a->nin * sizeof j->t[0]);
	memcpy(j->t + a->nin, a->out, (size_t)a->nout * sizeof j->t[0]);
	j->next = NULL;
	j->n = n;
	j->a = (struct hp_kargs){ .nin = a->nin, .in = j->t, .nout = a->nout, .out = j->t + a->nin };
	j->trace = trace;
	return j;
}

int hp_comm_thread_submit(const struct hp_node *n, const struct hp_kargs *a, struct hp_trace *trace,
			  uint64_t *ticket)
{
	struct job *j = job_new(n, a, trace);
	int rc = 0;

	if (!j)
		return hp_error(-ENOMEM, "out of memory queueing collective '%s'", n->name);
	pthread_mutex_lock(&mu);
	if (!started) {
		quit = 0;
		if ((rc = pthread_create(&thread, NULL, main_loop, NULL)) != 0) {
			pthread_mutex_unlock(&mu);
			free(j);
			return hp_error(-rc, "cannot start the communication thread");
		}
		started = 1;
	}
	if (trace && trace != named) { /* the lane's name in this trace, once */
		hp_trace_lane(trace, HP_LANE_COMM, "communication thread");
		named = trace;
	}
	j->ticket = *ticket = ++submitted;
	if (tail)
		tail->next = j;
	else
		head = j;
	tail = j;
	pthread_cond_signal(&work_cv);
	pthread_mutex_unlock(&mu);
	return 0;
}

static int wait_for(uint64_t ticket, int reset)
{
	int rc;

	pthread_mutex_lock(&mu);
	while (completed < ticket)
		pthread_cond_wait(&done_cv, &mu);
	rc = err;
	if (rc < 0)
		rc = hp_error(rc, "%s", errmsg);
	if (reset)
		err = 0;
	pthread_mutex_unlock(&mu);
	return rc;
}

int hp_comm_thread_wait(uint64_t ticket)
{
	return wait_for(ticket, 0);
}

int hp_comm_thread_drain(void)
{
	uint64_t t;

	pthread_mutex_lock(&mu);
	t = submitted;
	pthread_mutex_unlock(&mu);
	return wait_for(t, 1);
}

int hp_comm_thread_run(const struct hp_node *n, const struct hp_kargs *a, struct hp_trace *trace)
{
	uint64_t t;
	int rc = hp_comm_thread_submit(n, a, trace, &t);

	return rc < 0 ? rc : hp_comm_thread_wait(t);
}

void hp_comm_thread_stop(void)
{
	pthread_mutex_lock(&mu);
	if (!started) {
		pthread_mutex_unlock(&mu);
		return;
	}
	quit = 1;
	pthread_cond_signal(&work_cv);
	pthread_mutex_unlock(&mu);
	pthread_join(thread, NULL);
	started = 0;
}
