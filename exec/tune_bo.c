/* Bayesian optimisation proposing the configurations that ASHA schedules
 * (BOHB-like).  The GP (tune_gp.h) sees every rung's result as a point
 * (configuration, budget), the budget a further input on a log scale, so
 * results at low budgets inform it and no point ever changes: the factor
 * only grows, lazily.  A proposal maximises expected improvement at the
 * full budget over random candidates, then refines the best few locally.
 * Every random number comes from the trial's own stream: the same seed and
 * the same results give the same proposals. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "exec/tune_gp.h"
#include "exec/tune_internal.h"
#include "kernels/blas.h"

#define FIT_POINTS 200  /* observations a hyperparameter refit looks at */
#define REFIT_GROWTH 1.5 /* refit when the data grew by this factor */
#define REFINE_ROUNDS 6
#define REFINE_PROBES 8

struct hp_tune_bo {
	const struct hp_tune_spec *s;
	struct hp_gp gp;
	int next_fit;        /* refit the hyperparameters at this many points */
	double best_budget;  /* highest budget coordinate seen, and the best */
	double best_y;       /* (lowest) target there */
	int npending;        /* during a proposal: trials started, no result */
	const double *const *pending;
};

int hp_bo_create(const struct hp_tune_spec *s, struct hp_tune_bo **out)
{
	struct hp_tune_bo *bo = calloc(1, sizeof *bo);
	unsigned char *cat = calloc((size_t)s->nparams + 1, 1);
	int rc = -ENOMEM;

	if (bo && cat) {
		for (int i = 0; i < s->nparams; i++)
			cat[i] = s->params[i].kind == HP_TUNE_CHOICE;
		rc = hp_gp_init(&bo->gp, s->nparams + 1, cat);
	}
	free(cat);
	if (rc < 0) {
		free(bo);
		return rc;
	}
	bo->s = s;
	bo->next_fit = s->bo.initial > 2 ? s->bo.initial : 2;
	bo->best_budget = -1;
	*out = bo;
	return 0;
}

void hp_bo_free(struct hp_tune_bo *bo)
{
	if (!bo)
		return;
	hp_gp_free(&bo->gp);
	free(bo);
}

/* The budget coordinate of step: 0 at the grace period, 1 at max. */
static double budget_coord(const struct hp_tune_spec *s, int64_t step)
{
	if (s->max <= s->grace || step >= s->max)
		return 1.0;
	return step <= s->grace ? 0.0 : log((double)step / (double)s->grace) / log((double)s->max / (double)s->grace);
}

/* The GP's matrices are small and the trials own the cores: its BLAS runs
 * on one thread (a serial section, kernels/blas.h). */
static int observe(struct hp_tune_bo *bo, const double *u, int64_t step, double metric);
static int propose_ei(struct hp_tune_bo *bo, struct hp_rng *r, double *u);

int hp_bo_observe(struct hp_tune_bo *bo, const double *u, int64_t step, double metric)
{
	int rc;

	hp_blas_serial_enter();
	rc = observe(bo, u, step, metric);
	hp_blas_serial_leave();
	return rc;
}

static int observe(struct hp_tune_bo *bo, const double *u, int64_t step, double metric)
{
	int p = bo->s->nparams, rc;
	double x[p + 1], y = bo->s->maximize ? -metric : metric;

	memcpy(x, u, (size_t)p * sizeof *x);
	x[p] = budget_coord(bo->s, step);
	if ((rc = hp_gp_add(&bo->gp, x, y)) < 0)
		return rc;
	if (x[p] > bo->best_budget || (x[p] == bo->best_budget && y < bo->best_y))
		bo->best_budget = x[p], bo->best_y = y;
	if (bo->gp.n >= bo->next_fit) {
		bo->next_fit = (int)ceil(bo->gp.n * REFIT_GROWTH);
		return hp_gp_fit(&bo->gp, FIT_POINTS);
	}
	return 0;
}

/* Expected improvement (of a minimum) below best by more than xi (in the
 * targets' standard deviations). */
static double ei(double mean, double var, double best, double xi_abs)
{
	double sd = sqrt(var), imp = best - mean - xi_abs, z;

	if (sd <= 0)
		return imp > 0 ? imp : 0;
	z = imp / sd;
	return imp * 0.5 * erfc(-z / M_SQRT2) + sd * exp(-0.5 * z * z) / sqrt(2 * M_PI);
}

/* Trials running at once would otherwise all go where EI peaks: EI is
 * damped near each configuration still without a result, by
 * 1 - exp(-r^2/2), r its distance in the GP's length scales (a local
 * penalisation, after Gonzalez et al. 2016). */
static double pending_factor(const struct hp_tune_bo *bo, const double *u)
{
	double f = 1;

	for (int j = 0; j < bo->npending; j++) {
		double r2 = 0;
		for (int k = 0; k < bo->s->nparams; k++) {
			double t = bo->gp.cat[k] ? (u[k] != bo->pending[j][k]) : u[k] - bo->pending[j][k];
			r2 += t * t / (bo->gp.ls[k] * bo->gp.ls[k]);
		}
		f *= 1 - exp(-0.5 * r2);
	}
	return f;
}

/* EI at the full budget of m configurations us (m*p) into e. */
static int score(struct hp_tune_bo *bo, int m, const double *us, double *e)
{
	int p = bo->s->nparams, d = p + 1, rc = -ENOMEM;
	double *xs = calloc((size_t)m * (size_t)d, sizeof *xs), *mean = malloc((size_t)m * 2 * sizeof *mean);

	if (xs && mean) {
		for (int c = 0; c < m; c++) {
			memcpy(xs + (size_t)c * d, us + (size_t)c * p, (size_t)p * sizeof *xs);
			xs[(size_t)c * d + p] = 1.0;
		}
		rc = hp_gp_predict(&bo->gp, m, xs, mean, mean + m);
		for (int c = 0; c < m && rc >= 0; c++)
			e[c] = ei(mean[c], mean[m + c], bo->best_y, bo->s->bo.xi * bo->gp.ystd) *
			       pending_factor(bo, us + (size_t)c * p);
	}
	free(xs);
	free(mean);
	return rc;
}

/* A point near u: each continuous coordinate moved by up to radius, a
 * choice changed with probability radius. */
static void perturb(const struct hp_tune_spec *s, struct hp_rng *r, const double *u, double radius, double *v)
{
	for (int i = 0; i < s->nparams; i++) {
		double x = hp_rng_unit(r);
		if (s->params[i].kind != HP_TUNE_CHOICE)
			v[i] = u[i] + radius * (2 * x - 1);
		else
			v[i] = x < radius ? floor(hp_rng_unit(r) * s->params[i].nchoices) : u[i];
	}
	hp_tune_snap(s, v);
}

/* Hill-climb from the k starts (k*p, EI in e) at once: rounds of probes
 * around each with a shrinking radius, all probes of a round scored in one
 * pass over the factor. */
static int refine(struct hp_tune_bo *bo, struct hp_rng *r, int k, double *starts, double *e)
{
	int p = bo->s->nparams, m = k * REFINE_PROBES, rc = -ENOMEM;
	double *probes = malloc((size_t)m * (size_t)p * sizeof *probes), *pe = malloc((size_t)m * sizeof *pe);
	double radius = 0.1;

	for (int round = 0; probes && pe && round < REFINE_ROUNDS; round++, radius /= 2) {
		for (int i = 0; i < m; i++)
			perturb(bo->s, r, starts + (size_t)(i / REFINE_PROBES) * p, radius, probes + (size_t)i * p);
		if ((rc = score(bo, m, probes, pe)) < 0)
			break;
		for (int i = 0; i < m; i++) {
			int st = i / REFINE_PROBES;
			if (pe[i] > e[st])
				e[st] = pe[i], memcpy(starts + (size_t)st * p, probes + (size_t)i * p, (size_t)p * sizeof *starts);
		}
	}
	free(probes);
	free(pe);
	return rc;
}

/* Index of the largest of e[0..m) not taken (ties: the first). */
static int argmax(const double *e, const unsigned char *taken, int m)
{
	int b = -1;

	for (int c = 0; c < m; c++)
		if (!taken[c] && (b < 0 || e[c] > e[b]))
			b = c;
	return b;
}

/* The best candidates refined in place (us, e), the best of all into u. */
static int refine_best(struct hp_tune_bo *bo, struct hp_rng *r, int m, double *us, double *e, double *u)
{
	int p = bo->s->nparams, k = bo->s->bo.refine < m ? bo->s->bo.refine : m, idx[64], rc = -ENOMEM;
	double *starts = malloc((size_t)(k ? k : 1) * (size_t)p * sizeof *starts), se[64];
	unsigned char *taken = calloc((size_t)m, 1);

	if (!taken || !starts)
		goto out;
	rc = 0;
	for (int i = 0; i < k; i++) {
		idx[i] = argmax(e, taken, m), taken[idx[i]] = 1;
		memcpy(starts + (size_t)i * p, us + (size_t)idx[i] * p, (size_t)p * sizeof *starts);
		se[i] = e[idx[i]];
	}
	if (k && (rc = refine(bo, r, k, starts, se)) >= 0)
		for (int i = 0; i < k; i++)
			e[idx[i]] = se[i], memcpy(us + (size_t)idx[i] * p, starts + (size_t)i * p, (size_t)p * sizeof *us);
	memset(taken, 0, (size_t)m);
	memcpy(u, us + (size_t)argmax(e, taken, m) * p, (size_t)p * sizeof *u);
out:
	free(starts);
	free(taken);
	return rc;
}

static int propose_ei(struct hp_tune_bo *bo, struct hp_rng *r, double *u)
{
	int p = bo->s->nparams, m = bo->s->bo.candidates, rc = -ENOMEM;
	double *us = malloc((size_t)m * (size_t)p * sizeof *us), *e = malloc((size_t)m * sizeof *e);

	if (us && e) {
		for (int c = 0; c < m; c++)
			hp_tune_sample(bo->s, r, us + (size_t)c * p);
		if ((rc = score(bo, m, us, e)) >= 0)
			rc = refine_best(bo, r, m, us, e, u);
	}
	free(us);
	free(e);
	return rc;
}

int hp_bo_propose(struct hp_tune_bo *bo, int trial, int npending, const double *const *pending, double *u)
{
	/* The first configurations are random search's (stream 0), so both
	 * start from the same points for a seed. */
	struct hp_rng r = hp_rng_for(bo->s->seed, (uint64_t)trial, trial < bo->s->bo.initial || bo->gp.n < 2 ? 0 : 1);
	int rc;

	if (trial < bo->s->bo.initial || bo->gp.n < 2) {
		hp_tune_sample(bo->s, &r, u);
		return 0;
	}
	bo->npending = npending, bo->pending = pending;
	hp_blas_serial_enter();
	rc = propose_ei(bo, &r, u);
	hp_blas_serial_leave();
	bo->npending = 0, bo->pending = NULL;
	return rc;
}

struct hp_gp *hp_bo_gp(struct hp_tune_bo *bo)
{
	return &bo->gp;
}
