/* A fixed-size worker pool with deterministic range splitting.
 *
 * A job is cut into shares by n, grain and the pool size only; share k is
 * always run as tid k, so kernels that keep per-tid partials (summed in tid
 * order) give the same bits.  Who runs a share is not fixed: the caller runs
 * share 0 and then claims the shares no worker has taken yet.  Waking a
 * sleeping worker costs tens of microseconds, far more on a loaded machine
 * where it may not be scheduled for a while; a small op would otherwise wait
 * for that wake-up instead of finishing its work on the caller's thread. */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>

#include "hpdlf/error.h"
#include "hpdlf/kernels.h"

struct hp_pool {
	int n;                 /* workers including the caller */
	pthread_t *threads;
	pthread_mutex_t mu;
	pthread_cond_t go, done;
	uint64_t generation;
	int pending;           /* startup handshake */
	int parts, next, finished; /* shares of the current job: count, next unclaimed, done */
	int quit;
	/* current job */
	hp_range_fn fn;
	void *arg;
	int64_t total, chunk;
};

static void run_share(struct hp_pool *p, int tid)
{
	int64_t b = (int64_t)tid * p->chunk;
	int64_t e = b + p->chunk < p->total ? b + p->chunk : p->total;

	if (b < e)
		p->fn(p->arg, b, e, tid);
}

/* Run the current job's unclaimed shares (mu held on entry and on return). */
static void claim_shares(struct hp_pool *p)
{
	while (p->next < p->parts) {
		int k = p->next++;
		pthread_mutex_unlock(&p->mu);
		run_share(p, k);
		pthread_mutex_lock(&p->mu);
		if (++p->finished == p->parts)
			pthread_cond_signal(&p->done);
	}
}

static void *worker(void *v)
{
	struct hp_pool *p = v;
	uint64_t seen = 0;

	pthread_mutex_lock(&p->mu);
	++p->pending;
	pthread_cond_signal(&p->done);
	for (;;) {
		while (p->generation == seen && !p->quit)
			pthread_cond_wait(&p->go, &p->mu);
		if (p->quit)
			break;
		seen = p->generation;
		claim_shares(p);
	}
	pthread_mutex_unlock(&p->mu);
	return NULL;
}

int hp_pool_create(int nthreads, struct hp_pool **out)
{
	struct hp_pool *p;
	int i, rc;

	*out = NULL;
	if (nthreads < 1)
		return hp_error(HP_EUSAGE, "thread pool: %d threads", nthreads);
	p = calloc(1, sizeof *p);
	if (!p)
		return -ENOMEM;
	p->n = nthreads;
	pthread_mutex_init(&p->mu, NULL);
	pthread_cond_init(&p->go, NULL);
	pthread_cond_init(&p->done, NULL);
	p->threads = calloc((size_t)nthreads, sizeof *p->threads);
	if (!p->threads) {
		free(p);
		return -ENOMEM;
	}
	for (i = 1; i < nthreads; i++) {
		rc = pthread_create(&p->threads[i], NULL, worker, p);
		if (rc) {
			p->n = i;
			hp_pool_destroy(p);
			return hp_error(-rc, "thread pool: cannot start thread %d", i);
		}
	}
	pthread_mutex_lock(&p->mu);
	while (p->pending != nthreads - 1)
		pthread_cond_wait(&p->done, &p->mu);
	p->pending = 0;
	pthread_mutex_unlock(&p->mu);
	*out = p;
	return 0;
}

void hp_pool_destroy(struct hp_pool *p)
{
	if (!p)
		return;
	pthread_mutex_lock(&p->mu);
	p->quit = 1;
	pthread_cond_broadcast(&p->go);
	pthread_mutex_unlock(&p->mu);
	for (int i = 1; i < p->n; i++)
		pthread_join(p->threads[i], NULL);
	pthread_mutex_destroy(&p->mu);
	pthread_cond_destroy(&p->go);
	pthread_cond_destroy(&p->done);
	free(p->threads);
	free(p);
}

int hp_pool_size(const struct hp_pool *p)
{
	return p ? p->n : 1;
}

void hp_parallel_for(struct hp_pool *p, int64_t n, int64_t grain, hp_range_fn fn, void *arg)
{
	int64_t parts;

	if (n <= 0)
		return;
	if (grain < 1)
		grain = 1;
	parts = (n + grain - 1) / grain;
	if (!p || p->n == 1 || parts == 1) {
		fn(arg, 0, n, 0);
		return;
	}
	if (parts > p->n)
		parts = p->n;
	pthread_mutex_lock(&p->mu);
	p->fn = fn;
	p->arg = arg;
	p->total = n;
	p->chunk = (n + parts - 1) / parts;
	p->parts = (int)((n + p->chunk - 1) / p->chunk);
	p->next = 1;
	p->finished = 0;
	p->generation++;
	pthread_cond_broadcast(&p->go);
	pthread_mutex_unlock(&p->mu);
	run_share(p, 0);
	pthread_mutex_lock(&p->mu);
	p->finished++;
	claim_shares(p);
	while (p->finished < p->parts)
		pthread_cond_wait(&p->done, &p->mu);
	pthread_mutex_unlock(&p->mu);
}
