/* The watchdog thread (comm_watch.h): heartbeats both ways, a lost peer
 * or an overlong collective ends this process with the handler's line. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "hpdlf/error.h"
#include "exec/comm_watch.h"
#include "exec/comm_watch_net.h"

static struct {
	int rank, n, on;
	int *fd;            /* by rank (comm_watch_net.c) */
	double *last;       /* when each peer was last heard */
	char *bye;          /* the peer said goodbye (1) or failed (2) */
	int wake[2];        /* stop: a byte on wake[1] */
	pthread_t th;
	double timeout, deadline;
	double fail_at;     /* a peer failed: act then, unless this rank is gone */
	int fail_who;
	hp_comm_lost_fn fn;
	int tolerate;       /* --sync async: mark lost peers, train on */
	_Atomic int finishing; /* in MPI_Finalize: a loss now ends the process, status 0 */
	_Atomic int *peer;  /* HP_PEER_* by rank */
	_Atomic int nlost;
	int *why_lost;      /* HP_WATCH_CLOSED, SILENT or FAILED */
} w;

static _Atomic int64_t since_ms;      /* a collective started then; 0: none */
static const char *_Atomic since_what;

void hp_comm_on_lost(hp_comm_lost_fn fn)
{
	w.fn = fn;
}

static double mono(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void hp_comm_watch_enter(const char *what)
{
	atomic_store(&since_what, what);
	atomic_store(&since_ms, (int64_t)(mono() * 1e3) | 1);
}

void hp_comm_watch_leave(void)
{
	atomic_store(&since_ms, 0);
}

static void tell(int peer, uint32_t type, uint32_t a, uint32_t b)
{
	struct hp_watch_rec r = { .type = htonl(type), .a = htonl(a), .b = htonl(b) };

	if (w.fd[peer] >= 0)
		(void)!send(w.fd[peer], &r, sizeof r, MSG_NOSIGNAL | MSG_DONTWAIT);
}

/* The end: rank 0 tells the others which rank went, the handler speaks,
 * the process goes (the main thread may be inside MPI for good). */
static int tolerated(int who, int reason);

static void lost(int who, int reason, int relayed)
{
	char why[200];

	if (who >= 0 && w.tolerate && tolerated(who, reason))
		return;

	if (who < 0)
		snprintf(why, sizeof why, "this rank waited %.0f s in one %s (HPDLF_COMM_TIMEOUT): a peer is stuck",
			 w.deadline, atomic_load(&since_what) ? atomic_load(&since_what) : "collective");
	else
		snprintf(why, sizeof why, "%s%s", reason == HP_WATCH_SILENT ? "no heartbeat within HPDLF_RANK_TIMEOUT: "
			 "its node or process stopped" : reason == HP_WATCH_FAILED ? "it failed: its own message says why"
			 : "its connection closed without a goodbye: the process died", relayed ? ", seen by rank 0" : "");
	if (w.rank == 0 && who > 0)
		for (int p = 1; p < w.n; p++)
			if (p != who && !w.bye[p])
				tell(p, HP_WATCH_LOST, (uint32_t)who, (uint32_t)reason);
	if (w.fn)
		w.fn(w.rank, who, w.n, why);
	_exit(1);
}

static void drop(int p)
{
	if (w.fd[p] >= 0)
		close(w.fd[p]);
	w.fd[p] = -1;
}

/* --sync async: peer `who` is marked lost (once) and rank 0 tells the
 * others; this rank trains on.  1: handled. */
static int tolerated(int who, int reason)
{
	if (who == w.rank || atomic_load(&w.peer[who]) == HP_PEER_LOST)
		return 1;
	if (atomic_load(&w.peer[who]) == HP_PEER_DONE && reason == HP_WATCH_CLOSED)
		return 1; /* it finished and left */
	w.why_lost[who] = reason;
	atomic_store(&w.peer[who], HP_PEER_LOST);
	atomic_fetch_add(&w.nlost, 1);
	if (w.rank == 0)
		for (int p = 1; p < w.n; p++)
			if (p != who && !w.bye[p])
				tell(p, HP_WATCH_LOST, (uint32_t)who, (uint32_t)reason);
	w.bye[who] = 2;
	drop(who);
	if (atomic_load(&w.finishing))
		_exit(0); /* MPI_Finalize would wait for it forever; this rank's work is written */
	return 1;
}

/* A peer of an asynchronous job finished (rank 0 tells the others). */
static void peer_done(int p)
{
	if (p < 0 || p >= w.n || p == w.rank || atomic_load(&w.peer[p]) != HP_PEER_ALIVE)
		return;
	atomic_store(&w.peer[p], HP_PEER_DONE);
	if (w.rank == 0)
		for (int q = 1; q < w.n; q++)
			if (q != p)
				tell(q, HP_WATCH_DONE, (uint32_t)p, 0);
}

/* A record from peer p, or its end. */
static void hear(int p)
{
	struct hp_watch_rec r;
	ssize_t k = recv(w.fd[p], &r, sizeof r, MSG_WAITALL);

	if (k != sizeof r) {
		if (k < 0 && (errno == EINTR || errno == EAGAIN))
			return;
		if (!w.bye[p])
			lost(p, HP_WATCH_CLOSED, 0);
		close(w.fd[p]);
		w.fd[p] = -1;
		return;
	}
	w.last[p] = mono();
	if (ntohl(r.type) == HP_WATCH_BYE) {
		w.bye[p] = 1;
		close(w.fd[p]);
		w.fd[p] = -1;
	} else if (ntohl(r.type) == HP_WATCH_LOST && p == 0) {
		lost((int)ntohl(r.a), (int)ntohl(r.b), 1);
	} else if (ntohl(r.type) == HP_WATCH_DONE) {
		peer_done((int)ntohl(r.a));
	} else if (ntohl(r.type) == HP_WATCH_FAIL && w.tolerate) {
		lost(p, HP_WATCH_FAILED, 0); /* its own message says why; train on */
	} else if (ntohl(r.type) == HP_WATCH_FAIL && !w.fail_at) {
		/* An error every rank meets (a bad file, a budget too small)
		 * ends this rank too within moments, with its own message and
		 * status: give it 2 s before speaking for it. */
		w.fail_at = mono() + 2;
		w.fail_who = p;
		w.bye[p] = 2; /* its end is no news */
	}
}

static void check_clocks(double now)
{
	int64_t since = atomic_load(&since_ms);

	for (int p = 0; p < w.n; p++)
		if (w.fd[p] >= 0 && !w.bye[p] && now - w.last[p] > w.timeout)
			lost(p, HP_WATCH_SILENT, 0);
	if (since && w.deadline > 0 && now * 1e3 - (double)since > w.deadline * 1e3)
		lost(-1, 0, 0);
	if (w.fail_at && now >= w.fail_at)
		lost(w.fail_who, HP_WATCH_FAILED, 0);
}

static void goodbye(void)
{
	for (int p = 0; p < w.n; p++)
		if (w.fd[p] >= 0) {
			tell(p, HP_WATCH_BYE, 0, 0);
			close(w.fd[p]);
			w.fd[p] = -1;
		}
}

static void *watch(void *arg)
{
	struct pollfd *pf = calloc((size_t)w.n + 1, sizeof *pf);
	int *who = calloc((size_t)w.n + 1, sizeof *who);
	double beat = 0;

	(void)arg;
	for (;;) {
		int k = 1;
		pf[0] = (struct pollfd){ .fd = w.wake[0], .events = POLLIN };
		for (int p = 0; pf && who && p < w.n; p++)
			if (w.fd[p] >= 0) {
				who[k] = p;
				pf[k++] = (struct pollfd){ .fd = w.fd[p], .events = POLLIN };
			}
		if (poll(pf, (nfds_t)k, 250) < 0 && errno != EINTR)
			break;
		if (pf[0].revents) {
			char how = 0;
			if (read(w.wake[0], &how, 1) == 1 && how == 'f')
				return NULL; /* failing: no goodbye, the peers know */
			break;
		}
		for (int i = 1; i < k; i++)
			if (pf[i].revents)
				hear(who[i]);
		double now = mono();
		if (now >= beat) {
			for (int p = 0; p < w.n; p++)
				tell(p, HP_WATCH_BEAT, 0, 0);
			beat = now + 1;
		}
		check_clocks(now);
	}
	goodbye();
	free(pf);
	free(who);
	return NULL;
}

/* Seconds from the environment: def when unset. */
static int env_secs(const char *name, double def, double min, double *out)
{
	const char *s = getenv(name);
	char *end;

	*out = def;
	if (!s || !*s)
		return 0;
	*out = strtod(s, &end);
	if (*end || !(*out >= min) || *out > 1e6)
		return hp_error(HP_EUSAGE, "%s='%s': expected seconds, at least %g", name, s, min);
	return 0;
}

int hp_comm_watch_config(void)
{
	int rc = env_secs("HPDLF_RANK_TIMEOUT", 8, 2, &w.timeout);

	return rc < 0 ? rc : env_secs("HPDLF_COMM_TIMEOUT", 3600, 0, &w.deadline);
}

int hp_comm_watch_start(int rank, int nranks)
{
	int rc;

	w.rank = rank;
	w.n = nranks;
	w.fd = hp_comm_watch_fds();
	w.last = calloc((size_t)nranks, sizeof *w.last);
	w.bye = calloc((size_t)nranks, 1);
	w.peer = calloc((size_t)nranks, sizeof *w.peer);
	w.why_lost = calloc((size_t)nranks, sizeof *w.why_lost);
	if (!w.fd || !w.last || !w.bye || !w.peer || !w.why_lost || pipe2(w.wake, O_CLOEXEC) < 0)
		return hp_error(-ENOMEM, "rank %d: cannot start the watchdog", rank);
	for (int p = 0; p < nranks; p++)
		w.last[p] = mono();
	if ((rc = pthread_create(&w.th, NULL, watch, NULL)) != 0)
		return hp_error(-rc, "rank %d: cannot start the watchdog thread: %s", rank, strerror(rc));
	w.on = 1;
	return 0;
}

void hp_comm_watch_stop(void)
{
	if (!w.on)
		return;
	w.on = 0;
	(void)!write(w.wake[1], "", 1);
	pthread_join(w.th, NULL);
}

void hp_comm_watch_fail(void)
{
	if (!w.on)
		return;
	w.on = 0;
	for (int p = 0; p < w.n; p++)
		tell(p, HP_WATCH_FAIL, 0, 0);
	(void)!write(w.wake[1], "f", 1);
	pthread_join(w.th, NULL);
}

void hp_comm_watch_tolerate(void)
{
	w.tolerate = 1;
}

int hp_comm_watch_tolerant(void)
{
	return w.tolerate;
}

int hp_comm_watch_peer(int p)
{
	return w.peer && p >= 0 && p < w.n ? atomic_load(&w.peer[p]) : HP_PEER_ALIVE;
}

int hp_comm_watch_lost_count(void)
{
	return atomic_load(&w.nlost);
}

const char *hp_comm_watch_lost_why(int p)
{
	static const char *const why[] = { "its connection closed without a goodbye: the process died",
					   "no heartbeat within HPDLF_RANK_TIMEOUT: its node or process stopped",
					   "it failed: its own message says why" };

	if (hp_comm_watch_peer(p) != HP_PEER_LOST)
		return NULL;
	return why[w.why_lost[p] >= 0 && w.why_lost[p] <= 2 ? w.why_lost[p] : 0];
}

void hp_comm_watch_done(int finishing)
{
	if (!w.on)
		return;
	if (finishing)
		atomic_store(&w.finishing, 1);
	for (int p = 0; p < w.n; p++)
		tell(p, HP_WATCH_DONE, (uint32_t)w.rank, 0);
}
