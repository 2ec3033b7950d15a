/* Asynchronous successive halving (Li et al., "A System for Massively
 * Parallel Hyperparameter Tuning", 2018, algorithm 2): whenever a worker is
 * free, promote a trial of the highest rung that has one in its top 1/eta
 * not yet promoted; otherwise start a new trial at the bottom rung.  No
 * rung waits to be complete, so a straggler delays nobody; the price is
 * that some trials are promoted that a synchronous rung would have
 * stopped. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "exec/tune_internal.h"

int hp_asha_rungs(const struct hp_tune_spec *s, int64_t **rungs)
{
	int n = 1;
	int64_t *r;

	for (int64_t b = s->grace; b < s->max; b *= s->eta)
		n++;
	if (s->algo == HP_TUNE_RANDOM || s->algo == HP_TUNE_GRID)
		n = 1;
	if (!(r = malloc((size_t)n * sizeof *r)))
		return -ENOMEM;
	r[0] = n == 1 ? s->max : s->grace;
	for (int k = 1; k < n; k++)
		r[k] = r[k - 1] * s->eta < s->max ? r[k - 1] * s->eta : s->max;
	*rungs = r;
	return n;
}

/* Result (key, trial) ranks before result j of r (ties: the lower id). */
static int ranks_before(const struct hp_tune_rung *r, double key, int trial, int j)
{
	return key < r->key[j] || (key == r->key[j] && trial < r->trial[j]);
}

/* Results stay sorted best first: a promotion looks at a prefix. */
int hp_asha_record(struct hp_tune_rung *r, int trial, double key)
{
	int at;

	if (r->n == r->cap) {
		int c = r->cap ? 2 * r->cap : 16;
		int *t = realloc(r->trial, (size_t)c * sizeof *t);
		double *k;
		if (!t)
			return -ENOMEM;
		r->trial = t;
		if (!(k = realloc(r->key, (size_t)c * sizeof *k)))
			return -ENOMEM;
		r->key = k, r->cap = c;
	}
	for (at = r->n; at > 0 && ranks_before(r, key, trial, at - 1); at--)
		;
	memmove(r->trial + at + 1, r->trial + at, (size_t)(r->n - at) * sizeof *r->trial);
	memmove(r->key + at + 1, r->key + at, (size_t)(r->n - at) * sizeof *r->key);
	r->trial[at] = trial;
	r->key[at] = key;
	r->n++;
	return 0;
}

static int promoted_from(const struct hp_tune_trial *tr, int k)
{
	return tr->reached > k || tr->job > k || tr->state == HP_TRIAL_FAILED;
}

/* The best unpromoted result among rung k's top floor(n/eta), or -1. */
static int pick_rung(const struct hp_tune *t, int k)
{
	const struct hp_tune_rung *r = &t->rung[k];

	for (int i = 0; i < r->n / t->s->eta; i++)
		if (!promoted_from(&t->tr[r->trial[i]], k))
			return r->trial[i];
	return -1;
}

int hp_asha_pick(const struct hp_tune *t)
{
	for (int k = t->nrungs - 2; k >= 0; k--) {
		int trial = pick_rung(t, k);
		if (trial >= 0)
			return trial;
	}
	return -1;
}
