/* Tier helpers shared by all tiers: init, synchronous I/O, flush. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "hpdlf/error.h"
#include "store/tier.h"

void hs_tier_init(struct hs_tier *t, const struct hs_tier_ops *ops, enum hs_tier_kind kind,
		  const struct hs_tier_config *cfg)
{
	t->ops = ops;
	t->kind = kind;
	snprintf(t->name, sizeof t->name, "%s", cfg->name ? cfg->name : ops->kind);
	snprintf(t->path, sizeof t->path, "%s", cfg->path ? cfg->path : "");
	t->capacity = cfg->capacity;
	t->reserved = cfg->reserved;
	t->flags = 0;
}

struct sync_wait {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int done;
};

static void sync_done(struct hs_io *io)
{
	struct sync_wait *w = io->arg;

	pthread_mutex_lock(&w->mu);
	w->done = 1;
	pthread_cond_signal(&w->cv);
	pthread_mutex_unlock(&w->mu);
}

int hs_tier_rw(struct hs_tier *t, enum hs_io_op op, uint64_t addr, void *buf, size_t len)
{
	struct hs_io io = { .op = op, .addr = addr, .buf = buf, .len = len };

	return hs_tier_rw_io(t, &io);
}

int hs_tier_rw_io(struct hs_tier *t, struct hs_io *io)
{
	struct sync_wait w = { PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0 };
	struct hs_io *p = io;
	int rc;

	io->done = sync_done;
	io->arg = &w;
	rc = t->ops->submit(t, &p, 1);
	if (rc < 0)
		return rc;
	pthread_mutex_lock(&w.mu);
	while (!w.done)
		pthread_cond_wait(&w.cv, &w.mu);
	pthread_mutex_unlock(&w.mu);
	pthread_mutex_destroy(&w.mu);
	pthread_cond_destroy(&w.cv);
	return io->res;
}

int hs_tier_flush(struct hs_tier *t)
{
	if (!t->ops->flush)
		return 0;
	int rc = t->ops->flush(t);
	return rc == -ENOTSUP ? 0 : rc;
}
