/* --tune under mpirun/srun: every rank runs one job at a time as its child
 * process; rank 0 holds the search and the log and hands the jobs out.
 * All talk is collective and short, once a tick (TICK_MS): rank 0
 * broadcasts each rank's new job (or none, or the end), each rank starts
 * its own and looks at its child, then an all-reduce gathers which ranks'
 * jobs ended and their figures.  No collective lasts longer than a tick,
 * whatever a trial takes (the watchdog's deadline is never near).  Rank 0
 * reports in the order the jobs started, freeing a rank when its job is
 * reported, exactly as the one-node runner does with K = ranks: the search
 * and its log are those of --parallel K. */
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>

#include "hpdlf/error.h"
#include "hpdlf/tensor.h"
#include "exec/comm.h"
#include "tools/tune_run.h"

#define TICK_MS 200
#define WIRE_TEXT 4000

enum { CMD_GO = 0, CMD_END = 1, CMD_CANCEL = 2 };

/* A job on the wire: its names and values as "name\0value\0..." */
struct wire {
	int32_t fresh;           /* a new job for this rank */
	int32_t trial, nflags, pad;
	int64_t from, to;
	char text[WIRE_TEXT];
};

static int pack(struct wire *w, const struct tune_job *j)
{
	size_t at = 0;

	memset(w, 0, sizeof *w);
	w->fresh = 1;
	w->trial = j->trial;
	w->nflags = j->nflags;
	w->from = j->from_step;
	w->to = j->to_step;
	for (int k = 0; k < j->nflags; k++) {
		size_t a = strlen(j->names[k]) + 1, b = strlen(j->values[k]) + 1;
		if (at + a + b > WIRE_TEXT)
			return hp_error(HP_EUSAGE, "trial %d: its flags exceed %d bytes", j->trial, WIRE_TEXT);
		memcpy(w->text + at, j->names[k], a);
		memcpy(w->text + at + a, j->values[k], b);
		at += a + b;
	}
	return 0;
}

static int unpack(const struct wire *w, struct tune_job *j)
{
	const char *names[TUNE_MAX_FLAGS], *values[TUNE_MAX_FLAGS], *p = w->text;

	for (int k = 0; k < w->nflags && k < TUNE_MAX_FLAGS; k++) {
		names[k] = p;
		p += strlen(p) + 1;
		values[k] = p;
		p += strlen(p) + 1;
	}
	struct hp_tune_job hj = { w->trial, w->from, w->to, w->nflags, names, values };
	return tune_job_copy(j, &hj);
}

/* Rank 0's view: which job each rank holds, and in which order they
 * started (for reporting). */
struct sched {
	struct tune_job *job;    /* per rank (trial -1: free) */
	int *order, norder;      /* ranks, oldest job first */
	int *sent;               /* per rank: its job went out (its status is its own) */
	int finished;
};

/* Rank 0: a job for every free rank, the restarted ones first; sent at
 * the next tick. */
static int assign(struct runner *r, struct sched *s, struct wire *w, int nranks, int *restart, int *nrestart)
{
	struct hp_tune_job hj;
	int rc;

	for (int k = 0; k < nranks; k++) {
		if (s->job[k].trial >= 0 || tune_stop_sig)
			continue;
		if (*restart < *nrestart) {
			s->job[k] = r->run[(*restart)++];
		} else {
			if (s->finished || (rc = hp_tune_next(r->t, &hj)) == 0)
				continue;
			if (rc < 0)
				return rc;
			if (rc == 2) {
				s->finished = 1;
				continue;
			}
			if ((rc = tune_job_copy(&s->job[k], &hj)) < 0 || (rc = tune_log_start(r->log, &s->job[k])) < 0)
				return rc;
			tune_table_event(r->tb, &s->job[k], s->job[k].from_step > 0 ? "promoted" : "running", r->x.metric, NAN);
		}
		s->order[s->norder++] = k;
		s->sent[k] = 0;
		if ((rc = pack(&w[k], &s->job[k])) < 0)
			return rc;
	}
	return 0;
}

/* Rank 0: the oldest jobs that ended, reported in their start order. */
static int report(struct runner *r, struct sched *s, const double *st, struct wire *w, int nranks, int *restart,
		  int *nrestart)
{
	int rc;

	while (s->norder && s->sent[s->order[0]] && st[3 * s->order[0]] > 0) {
		int k = s->order[0], failed = st[3 * k + 2] > 0 || !isfinite(st[3 * k + 1]);
		struct tune_job *j = &s->job[k];
		double v = failed ? NAN : st[3 * k + 1];
		if ((rc = hp_tune_report(r->t, j->trial, j->to_step, v, failed)) < 0)
			return rc;
		const char *state = hp_tune_state(r->t, j->trial);
		if ((rc = tune_log_result(r->log, j, r->x.metric, v, state)) < 0)
			return rc;
		tune_table_event(r->tb, j, state, r->x.metric, v);
		if (!failed && (rc = tune_note_done(r, j)) < 0)
			return rc;
		tune_job_clear(j);
		j->trial = -1;
		memmove(s->order, s->order + 1, (size_t)--s->norder * sizeof *s->order);
		/* as the one-node runner: the freed place is filled before the
		 * next result is reported, so the search sees the same history */
		if ((rc = assign(r, s, w, nranks, restart, nrestart)) < 0)
			return rc;
	}
	return 0;
}

/* This rank's child: started when a job came, looked at every tick. */
struct mine {
	struct tune_job job;
	int running, ended;
	double metric;
	int failed;
};

static int look(const struct runner *r, struct mine *m)
{
	int status;
	pid_t p;

	if (!m->running)
		return 0;
	if ((p = waitpid(m->job.pid, &status, WNOHANG)) == 0)
		return 0;
	if (p < 0)
		return errno == EINTR ? 0 : hp_error(-errno, "waitpid: %s", strerror(errno));
	m->running = 0;
	m->ended = 1;
	tune_child_metric(&r->x, &m->job, &m->metric);
	m->failed = !WIFEXITED(status) || WEXITSTATUS(status) != 0 || !isfinite(m->metric);
	return 0;
}

static int take(const struct runner *r, struct mine *m, const struct wire *w)
{
	int rc;

	if (!w->fresh)
		return 0;
	tune_job_clear(&m->job);
	m->ended = m->running = 0;
	if ((rc = unpack(w, &m->job)) < 0 || (rc = tune_child_start(&r->x, &m->job, NULL)) < 0)
		return rc;
	m->running = 1;
	return 0;
}

struct round {
	struct wire *w;
	double *st;
	int32_t *cmd;
	size_t bytes;
};

static int tick(struct runner *r, struct sched *s, struct mine *m, struct round *b, int rank, int nranks,
		int *restart, int *nrestart)
{
	struct timespec ts = { 0, TICK_MS * 1000000L };
	int rc = 0;

	int bad = 0;

	if (rank == 0) {
		bad = assign(r, s, b->w, nranks, restart, nrestart);
		*b->cmd = bad < 0 || tune_stop_sig ? CMD_CANCEL : s->norder == 0 ? CMD_END : CMD_GO;
	}
	if ((rc = hp_comm_bcast(b->cmd, b->bytes, 0)) < 0 || *b->cmd != CMD_GO)
		return rc < 0 ? rc : bad < 0 ? bad : *b->cmd;
	rc = take(r, m, &b->w[rank]);
	for (int k = 0; k < nranks; k++) {
		s->sent[k] |= b->w[k].fresh;
		b->w[k].fresh = 0;
	}
	if (rc < 0 || (rc = look(r, m)) < 0)
		return rc;
	memset(b->st, 0, (3 * (size_t)nranks + 1) * sizeof *b->st);
	b->st[3 * rank] = m->ended;
	b->st[3 * rank + 1] = m->ended && !m->failed ? m->metric : 0;
	b->st[3 * rank + 2] = m->failed;
	b->st[3 * nranks] = (double)tune_tree_pss(); /* summed: the job's memory */
	if ((rc = hp_comm_allreduce(b->st, 3 * (size_t)nranks + 1, HP_F64)) < 0)
		return rc;
	if ((uint64_t)b->st[3 * nranks] > r->peak)
		r->peak = (uint64_t)b->st[3 * nranks];
	if (rank == 0 && (rc = report(r, s, b->st, b->w, nranks, restart, nrestart)) < 0)
		return rc;
	if (rank == 0)
		tune_table_draw(r->tb, r->t, NULL, 0, (uint64_t)b->st[3 * nranks]);
	nanosleep(&ts, NULL);
	return CMD_GO;
}

int tune_mpi_search(struct runner *r)
{
	int rank = hp_comm_rank(), nranks = hp_comm_size(), restart = 0, nrestart = r->n, rc;
	struct sched s = { .job = calloc((size_t)nranks, sizeof *s.job), .order = calloc((size_t)nranks, sizeof(int)),
			   .sent = calloc((size_t)nranks, sizeof(int)) };
	struct round b = { .bytes = 8 + (size_t)nranks * sizeof(struct wire) };
	struct mine m = { 0 };

	void *buf = calloc(1, b.bytes);
	b.cmd = buf;
	b.w = (struct wire *)((char *)buf + 8);
	b.st = calloc(3 * (size_t)nranks + 1, sizeof *b.st);
	rc = buf && b.st && s.job && s.order && s.sent ? 0 : hp_error(-ENOMEM, "out of memory");
	for (int k = 0; k < nranks && s.job; k++)
		s.job[k].trial = -1;
	while (rc == 0)
		rc = tick(r, &s, &m, &b, rank, nranks, &restart, &nrestart);
	if (m.running) { /* cancelled: the trial stops with a checkpoint */
		kill(m.job.pid, SIGTERM);
		waitpid(m.job.pid, NULL, 0);
	}
	tune_job_clear(&m.job);
	for (int k = 0; s.job && k < nranks; k++)
		if (s.job[k].trial >= 0)
			tune_job_clear(&s.job[k]);
	r->n = nrestart - restart; /* restarted jobs handed out are freed with s.job */
	memmove(r->run, r->run + restart, (size_t)r->n * sizeof *r->run);
	free(s.job);
	free(s.order);
	free(s.sent);
	free(b.st);
	free(buf);
	return rc == CMD_END ? 0 : rc == CMD_CANCEL ? HP_ECANCELED : rc;
}
