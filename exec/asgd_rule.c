/* ASGD's update rule and peer schedule (asgd.h): pure functions, the same
 * in the deterministic and the free-running mode. */
#include <string.h>

#include "exec/asgd.h"

/* Parzen window: the state counts when the local step moved w towards it. */
int hp_asgd_accept(const float *w, const float *w0, const float *r, size_t n, int parzen)
{
	double after = 0, before = 0;

	if (!parzen)
		return 1;
	for (size_t i = 0; i < n; i++) {
		double a = (double)w[i] - r[i], b = (double)w0[i] - r[i];
		after += a * a;
		before += b * b;
	}
	return after < before;
}

void hp_asgd_add(struct hp_asgd_acc *a, const float *r, size_t n)
{
	if (!a->k)
		memset(a->sum, 0, n * sizeof *a->sum);
	for (size_t i = 0; i < n; i++)
		a->sum[i] += r[i];
	a->k++;
}

double hp_asgd_blend(float *w, const struct hp_asgd_acc *a, size_t n, double blend)
{
	double b = blend < 0 ? (double)a->k / (a->k + 1) : blend;

	if (!a->k)
		return 0;
	for (size_t i = 0; i < n; i++)
		w[i] = (float)((1 - b) * w[i] + b * (a->sum[i] / a->k));
	return b;
}

static uint64_t splitmix(uint64_t *x)
{
	uint64_t z = (*x += 0x9E3779B97F4A7C15ull);

	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
	z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
	return z ^ (z >> 31);
}

int hp_asgd_pick(int *cand, int nc, int want, uint64_t seed, int rank, int64_t e)
{
	uint64_t x = seed * 0xD1B54A32D192ED03ull ^ ((uint64_t)rank << 40) ^ (uint64_t)e;
	int k = want < nc ? want : nc;

	/* the first k of a Fisher-Yates shuffle */
	for (int i = 0; i < k; i++) {
		int j = i + (int)(splitmix(&x) % (uint64_t)(nc - i)), tmp = cand[i];
		cand[i] = cand[j];
		cand[j] = tmp;
	}
	return k;
}
