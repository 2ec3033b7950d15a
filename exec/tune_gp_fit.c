/* Refitting the GP's hyperparameters (tune_gp.h): the log marginal
 * likelihood maximised by a coordinate search on log scales, on at most
 * max_points evenly spaced observations so that a refit stays cheap at
 * thousands of trials; then one full factorisation of all the data. */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "exec/tune_gp.h"

/* theta: log ls[0..d), log sf2, log noise. */
static void bounds(const struct hp_gp *gp, int k, double *lo, double *hi)
{
	if (k < gp->d)
		*lo = log(gp->cat[k] ? 0.1 : 0.01), *hi = log(10.0);
	else if (k == gp->d)
		*lo = log(0.01), *hi = log(100.0);
	else
		*lo = log(1e-6), *hi = log(1.0);
}

static int eval(struct hp_gp *sub, const double *theta, double *lml)
{
	int d = sub->d, rc;

	for (int k = 0; k < d; k++)
		sub->ls[k] = exp(theta[k]);
	if ((rc = hp_gp_set_hyper(sub, sub->ls, exp(theta[d]), exp(theta[d + 1]))) < 0)
		return rc;
	return hp_gp_lml(sub, lml);
}

/* Try theta[k] +- step; keep the first that raises the likelihood. */
static int try_coord(struct hp_gp *sub, double *theta, int k, double step, double *best, int *moved)
{
	double lo, hi, keep = theta[k], lml;
	int rc;

	bounds(sub, k, &lo, &hi);
	for (int s = -1; s <= 1; s += 2) {
		theta[k] = fmin(hi, fmax(lo, keep + s * step));
		if (theta[k] == keep)
			continue;
		if ((rc = eval(sub, theta, &lml)) < 0)
			return rc;
		if (lml > *best + 1e-9) {
			*best = lml, *moved = 1;
			return 0;
		}
	}
	theta[k] = keep;
	return 0;
}

static int search(struct hp_gp *sub, double *theta)
{
	double best, step = log(2.0);
	int rc, p = sub->d + 2;

	if ((rc = eval(sub, theta, &best)) < 0)
		return rc;
	for (int sweep = 0; sweep < 24 && step > 0.1; sweep++) {
		int moved = 0;
		for (int k = 0; k < p; k++)
			if ((rc = try_coord(sub, theta, k, step, &best, &moved)) < 0)
				return rc;
		if (!moved)
			step /= 2;
	}
	return 0;
}

int hp_gp_fit(struct hp_gp *gp, int max_points)
{
	int n = gp->n, m = n < max_points ? n : max_points, d = gp->d, rc;
	struct hp_gp sub;
	double *theta;

	if (n < 2)
		return 0;
	if ((rc = hp_gp_init(&sub, d, gp->cat)) < 0)
		return rc;
	if (!(theta = malloc((size_t)(d + 2) * sizeof *theta))) {
		hp_gp_free(&sub);
		return -ENOMEM;
	}
	for (int k = 0; k < d; k++)
		theta[k] = log(gp->ls[k]);
	theta[d] = log(gp->sf2), theta[d + 1] = log(gp->noise);
	rc = hp_gp_set_hyper(&sub, gp->ls, gp->sf2, gp->noise);
	for (int i = 0; i < m && rc >= 0; i++) {
		int j = (int)((int64_t)i * n / m);
		rc = hp_gp_add(&sub, gp->x + (size_t)j * (size_t)d, gp->y[j]);
	}
	if (rc >= 0)
		rc = search(&sub, theta);
	if (rc >= 0) {
		for (int k = 0; k < d; k++)
			gp->ls[k] = exp(theta[k]);
		rc = hp_gp_set_hyper(gp, gp->ls, exp(theta[d]), exp(theta[d + 1]));
	}
	free(theta);
	hp_gp_free(&sub);
	return rc;
}
