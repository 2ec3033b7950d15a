/* Placement: the store's extent map of each lower tier, under one lock. */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>

#include "hpdlf/error.h"
#include "store/place.h"
#include "store/tier.h"

struct hs_place {
	pthread_mutex_t mu;
	int n;
	struct hs_tier *tiers[HS_MAX_TIERS];
	struct hs_extents *map[HS_MAX_TIERS];   /* NULL: the tier places itself */
	/* bytes placed now and at most, per tier and over all of them: the
	 * footprint a run leaves on the tiers is its peak, not what is left */
	uint64_t used[HS_MAX_TIERS], peak[HS_MAX_TIERS], total, total_peak;
};

/* Account an extent placed (+len) or given back (-len) on tier k (lock held). */
static void count(struct hs_place *p, int k, uint64_t len, int placed)
{
	if (!placed) {
		p->used[k] -= len;
		p->total -= len;
		return;
	}
	p->used[k] += len;
	p->total += len;
	if (p->used[k] > p->peak[k])
		p->peak[k] = p->used[k];
	if (p->total > p->total_peak)
		p->total_peak = p->total;
}

int hs_place_create(struct hs_tier *const *tiers, int n, struct hs_place **out)
{
	struct hs_place *p = calloc(1, sizeof *p);
	int rc = 0;

	if (!p)
		return -ENOMEM;
	if (n < 0 || n > HS_MAX_TIERS) {
		free(p);
		return hp_error(HP_EINTERNAL, "placement: %d tiers", n);
	}
	pthread_mutex_init(&p->mu, NULL);
	p->n = n;
	for (int k = 0; k < n && rc == 0; k++) {
		p->tiers[k] = tiers[k];
		if (!tiers[k]->ops->place)
			rc = hs_extents_create(tiers[k]->reserved, tiers[k]->capacity, &p->map[k]);
	}
	if (rc < 0) {
		hs_place_destroy(p);
		return rc;
	}
	*out = p;
	return 0;
}

void hs_place_destroy(struct hs_place *p)
{
	if (!p)
		return;
	for (int k = 0; k < p->n; k++)
		hs_extents_destroy(p->map[k]);
	pthread_mutex_destroy(&p->mu);
	free(p);
}

int hs_place_alloc(struct hs_place *p, int k, uint64_t len, uint64_t *addr)
{
	int rc = hs_fault_check(HS_FAULT_TIER_ALLOC);

	if (rc)
		return rc;
	if (!p->map[k]) /* called without the lock (a leaf: see place.h) */
		rc = p->tiers[k]->ops->place(p->tiers[k], len, addr);
	pthread_mutex_lock(&p->mu);
	if (p->map[k])
		rc = hs_extents_alloc(p->map[k], len, addr);
	if (rc == 0)
		count(p, k, len, 1);
	pthread_mutex_unlock(&p->mu);
	return rc;
}

int hs_place_free(struct hs_place *p, int k, uint64_t addr, uint64_t len)
{
	struct hs_tier *t = p->tiers[k];
	int rc;

	if (!p->map[k]) {
		rc = t->ops->release(t, addr, len);
		pthread_mutex_lock(&p->mu);
		if (rc == 0)
			count(p, k, len, 0);
		pthread_mutex_unlock(&p->mu);
		return rc;
	}
	pthread_mutex_lock(&p->mu);
	rc = hs_extents_free(p->map[k], addr, len);
	if (rc == 0)
		count(p, k, len, 0);
	pthread_mutex_unlock(&p->mu);
	if (rc == 0 && t->ops->trim)
		t->ops->trim(t, addr, len);
	return rc;
}

int hs_place_claim(struct hs_place *p, int k, uint64_t addr, uint64_t len)
{
	int rc;

	if (!p->map[k])
		return -ENOTSUP;
	pthread_mutex_lock(&p->mu);
	rc = hs_extents_claim(p->map[k], addr, len);
	if (rc == 0)
		count(p, k, len, 1);
	pthread_mutex_unlock(&p->mu);
	return rc;
}

void hs_place_usage(struct hs_place *p, int k, struct hs_tier_stats *st)
{
	if (!p->map[k])
		return;
	pthread_mutex_lock(&p->mu);
	st->used = hs_extents_used(p->map[k]);
	st->chunks = hs_extents_count(p->map[k]);
	pthread_mutex_unlock(&p->mu);
}

uint64_t hs_place_peak(struct hs_place *p, int k)
{
	uint64_t v;

	pthread_mutex_lock(&p->mu);
	v = k < 0 ? p->total_peak : p->peak[k];
	pthread_mutex_unlock(&p->mu);
	return v;
}
