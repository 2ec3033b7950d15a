/* A daemon restarted after it was declared dead joins the tier again.
 *
 * Its earlier life's memory went with it: the store moves what it held
 * elsewhere (hs_store_recover) and frees those extents, and only then may
 * the daemon come back, so that an extent of the old life can never be
 * taken for one of the new.  The keepalive thread tries a dead daemon
 * once a second; the new life gets a new fabric address and takes new
 * spills like any other daemon. */
#include <errno.h>
#include <search.h>
#include <stdlib.h>
#include <string.h>

#include "hpdlf/error.h"
#include "store/remote/lazy.h"
#include "store/remote/tier_int.h"

#define REJOIN_EVERY_MS 1000u
#define REJOIN_CONNECT_MS 500

struct on_daemon {
	int i;
	uint64_t n;
};

static void count_on(const void *node, VISIT which, void *arg)
{
	const struct rext *e = *(const struct rext *const *)node;
	struct on_daemon *o = arg;

	if (which != postorder && which != leaf)
		return;
	for (int k = 0; k < e->n; k++)
		o->n += e->di[k] == o->i;
}

uint64_t hs_rt_extents_on(const struct rtier *t, int i)
{
	struct on_daemon o = { .i = i };

	twalk_r(t->extents, count_on, &o);
	return o.n;
}

/* Daemon i answered again as c: take it back (t->mu held). */
static int take_back(struct rtier *t, int i, struct hs_rconn *c, fi_addr_t fa)
{
	struct rdaemon *d = &t->d[i];
	struct stale_conn *old = malloc(sizeof *old);

	if (!old)
		return -ENOMEM;
	*old = (struct stale_conn){ d->conn, d->stale };
	d->stale = old;
	d->conn = c;
	d->fa = fa;
	d->capacity = d->free_bytes = c->capacity;
	d->last_ok_ms = hs_now_ms();
	d->lives++;
	__atomic_store_n(&d->dead, 0, __ATOMIC_RELEASE);
	return 0;
}

static void try_one(struct rtier *t, int i)
{
	struct rdaemon *d = &t->d[i];
	struct hs_rconn *c = NULL;
	fi_addr_t fa;
	int rc;

	pthread_mutex_lock(&t->mu);
	int busy = hs_rt_extents_on(t, i) > 0; /* the old life still has extents */
	pthread_mutex_unlock(&t->mu);
	if (busy || hs_rconn_open(d->where, &t->secret, REJOIN_CONNECT_MS, &c) < 0)
		return;
	if (strcmp(c->provider, d->conn->provider) || /* the old life's: all daemons use one */
	     hs_fab_av_insert(&t->fab, c->fabric_addr, c->addrlen, &fa) < 0) {
		hs_rconn_close(c);
		return;
	}
	pthread_mutex_lock(&t->mu);
	rc = hs_rt_extents_on(t, i) > 0 ? -EBUSY : take_back(t, i, c, fa);
	pthread_mutex_unlock(&t->mu);
	if (rc < 0) {
		hs_rconn_close(c);
		return;
	}
	hp_log(HP_LOG_WARN, "remote tier %s: daemon %s is back (life %u, %.1f s after it was declared dead); it "
	       "takes new spills", t->base.name, d->where, d->lives + 1, (double)(hs_now_ms() - d->dead_ms) / 1000);
}

void hs_rt_rejoin(struct rtier *t)
{
	uint64_t now = hs_now_ms();

	for (int i = 0; i < t->nd && !t->stopping; i++) {
		struct rdaemon *d = &t->d[i];
		if (!__atomic_load_n(&d->dead, __ATOMIC_ACQUIRE) || !d->conn || now < d->next_try_ms)
			continue;
		d->next_try_ms = now + REJOIN_EVERY_MS;
		try_one(t, i);
	}
}
