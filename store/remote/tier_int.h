/* Remote tier internals shared by tier_remote.c (daemons, placement,
 * keepalive, named extents) and rma.c (the RMA engine). */
#ifndef HPDLF_STORE_REMOTE_TIER_INT_H
#define HPDLF_STORE_REMOTE_TIER_INT_H

#include <pthread.h>
#include <stdint.h>

#include "store/remote/client.h"
#include "store/remote/fabric.h"
#include "store/remote/remote.h"

struct seg;

/* A connection of a daemon's earlier life: another thread may still be
 * inside a call on it, so it is closed only with the tier. */
struct stale_conn {
	struct hs_rconn *conn;
	struct stale_conn *next;
};

struct rdaemon {
	struct hs_rconn *conn;  /* NULL: never reached */
	char where[128];
	fi_addr_t fa;
	int dead;               /* under t->mu; cleared when it rejoins (rejoin.c) */
	char why[256];
	uint64_t capacity, free_bytes;
	uint64_t last_ok_ms;
	struct seg *posted;     /* segments the provider holds (doubly linked) */
	uint64_t dead_ms;       /* when it was declared dead */
	uint64_t next_try_ms;   /* rejoin: when to try reconnecting next */
	struct stale_conn *stale; /* connections of earlier lives (rejoin.c); closed with the tier */
	unsigned lives;         /* times it rejoined */
};

/* One hs_io in flight.  Writes go to every live replica; reads to one,
 * retried on the other if the first one's daemon died. */
struct rreq {
	struct hs_io *io;
	int ntgt, cur;          /* targets; reads: the one being read */
	int tgt[2];             /* daemon indexes */
	uint64_t raddr[2];      /* remote address of io->addr in each copy */
	uint64_t key[2];        /* registration key of each copy's extent */
	int tres[2];            /* outcome per target */
	int live;               /* segments whose outcome is pending */
	int refs;               /* segments not yet reported by the provider */
	int finished;           /* done() called (or queued) */
	struct rreq *next_done;
};

struct seg {
	struct fi_context2 ctx; /* first: FI_CONTEXT2 mode */
	struct rreq *req;
	int ti;                 /* index in req->tgt */
	void *buf;
	size_t len;
	uint64_t raddr, key;
	struct fid_mr *lmr;     /* FI_MR_LOCAL registration of buf */
	int abandoned;          /* its daemon died: the outcome no longer matters */
	uint64_t posted_ms;
	struct seg *next, *prev;
};

/* An extent of this tier (allocated, or a named one looked up): where its
 * copies live and the keys that reach them.  The daemons register each
 * extent on its own, so an address outside every known extent reaches
 * nothing; requests are checked against this map before they are posted. */
struct rext {
	uint64_t addr, len;     /* tier address of the primary copy */
	int n;                  /* copies: 1, or 2 with replicas */
	int di[2];              /* daemon of each copy */
	uint64_t daddr[2];      /* in that daemon's space */
	uint64_t key[2];        /* registration key of each copy */
	uint64_t base[2];       /* remote address of daddr (0 unless FI_MR_VIRT_ADDR) */
};

struct rtier {
	struct hs_tier base;
	struct hs_remote_opts o;
	struct hs_secret secret;
	struct hs_fab fab;
	int fab_open;
	int nd;
	struct rdaemon *d;
	pthread_mutex_t mu;     /* queues, daemon state, extent map */
	struct seg *qhead, *qtail;      /* waiting to be posted */
	unsigned posted;
	struct rreq *late_done;         /* failed by a caller's rpc: the progress thread delivers them */
	size_t max_seg;
	void *extents;          /* tsearch tree of struct rext */
	uint64_t nextents, alloc_seq;
	volatile int stopping;
	pthread_t progress, keepalive;
	int progress_started, keepalive_started;
	pthread_mutex_t ka_mu;
	pthread_cond_t ka_cv;
	uint64_t deaths;        /* daemons declared dead so far (under t->mu) */
	char *endpoints;        /* the daemon list and token path it was opened */
	char *token_path;       /* with (hs_remote_reopen); token NULL: the env's */
};

#define RT_ADDR_MASK ((1ull << HS_REMOTE_ADDR_BITS) - 1)

static inline uint64_t rt_addr(int didx, uint64_t daddr)
{
	return ((uint64_t)(didx + 1) << HS_REMOTE_ADDR_BITS) | daddr;
}

/* RMA engine (rma.c). */
int hs_rt_rma_start(struct rtier *t);
void hs_rt_rma_stop(struct rtier *t);
int hs_rt_submit(struct hs_tier *base, struct hs_io **ios, int n);
/* Declare daemon i dead (under t->mu): abandons its segments; requests that
 * can no longer finish are chained on *done for the caller to complete. */
void hs_rt_mark_dead(struct rtier *t, int i, const char *why, struct rreq **done);
/* Extents no live daemon holds a copy of (under t->mu). */
uint64_t hs_rt_lost_extents(const struct rtier *t);
/* Call done() of finished requests (without t->mu) and free them. */
void hs_rt_deliver(struct rtier *t, struct rreq *done);
/* Queue failed requests for the progress thread to deliver (t->mu held). */
void hs_rt_defer_done(struct rtier *t, struct rreq *done);
/* Ping daemon i now (from any thread but the caller must not hold t->mu);
 * marks it dead if it does not answer.  Returns 1 if dead. */
int hs_rt_check(struct rtier *t, int i, int wait);
/* The extent holding tier address a (NULL: none); t->mu held. */
const struct rext *hs_rt_extent_of(struct rtier *t, uint64_t a);
/* Record e (a copy is made), or replace the entry of the same address. */
int hs_rt_add_extent(struct rtier *t, const struct rext *e);
/* One copy (index k of e) of len bytes on daemon i; -ENOSPC if it is full. */
int hs_rt_alloc_on(struct rtier *t, int i, uint64_t len, int persistent, struct rext *e, int k);
int hs_rt_free_on(struct rtier *t, int i, uint64_t daddr, uint64_t len);
/* rejoin.c: from the keepalive thread, reconnect dead daemons that hold
 * no extent of the tier any more (a restarted daemon takes new spills). */
void hs_rt_rejoin(struct rtier *t);
/* Copies of extents on daemon i (under t->mu). */
uint64_t hs_rt_extents_on(const struct rtier *t, int i);

#endif
