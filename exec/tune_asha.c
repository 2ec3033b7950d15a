/* Asynchronous successive halving (Li et al., "A System for Massively
 * Parallel Hyperparameter Tuning", 2018, algorithm 2): whenever a worker is
 * free, promote a trial of the highest rung that has one in its top 1/eta
 * not yet promoted; otherwise start a new trial at the bottom rung.  No
 * rung waits to be complete, so a straggler delays nobody; the price is
 * that some trials are promoted that a synchronous rung would have
 * stopped. */
#include <errno.h>
#include <stdlib.h>

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

int hp_asha_record(struct hp_tune_rung *r, int trial, double key)
{
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
	r->trial[r->n] = trial;
	r->key[r->n++] = key;
	return 0;
}

/* Result i of r ranks before result j (ties: the lower trial id). */
static int before(const struct hp_tune_rung *r, int i, int j)
{
	return r->key[i] < r->key[j] || (r->key[i] == r->key[j] && r->trial[i] < r->trial[j]);
}

static int promoted_from(const struct hp_tune_trial *tr, int k)
{
	return tr->reached > k || tr->job > k || tr->state == HP_TRIAL_FAILED;
}

/* Best unpromoted result of rung k among its top floor(n/eta), or -1.  A
 * result's rank is the number of results before it: O(n^2) per rung, fine
 * for the thousands of trials a node runs, and no sorting state to keep. */
static int pick_rung(const struct hp_tune *t, int k)
{
	const struct hp_tune_rung *r = &t->rung[k];
	int top = r->n / t->s->eta, best = -1;

	for (int i = 0; i < r->n && top > 0; i++) {
		int rank = 0;
		if (promoted_from(&t->tr[r->trial[i]], k) || (best >= 0 && !before(r, i, best)))
			continue;
		for (int j = 0; j < r->n && rank < top; j++)
			rank += before(r, j, i);
		if (rank < top)
			best = i;
	}
	return best < 0 ? -1 : r->trial[best];
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
