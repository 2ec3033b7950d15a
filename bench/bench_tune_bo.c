/* Bayesian optimisation's proposal time per trial (exec/tune_bo.c) at 100,
 * 1,000 and 5,000 observed trials, the lazy GP (one Cholesky row per new
 * result, O(n^2)) against a full refactorisation (dpotrf, O(n^3)) in the
 * same run, on the same data and hyperparameters.
 *
 *   hpdlf-bench-tune-bo [--sizes 100,1000,5000] [--reps R]
 *
 * The space: lr log_uniform, momentum uniform, batch int_uniform, optimizer
 * choice, and the budget as a fifth input; results of a synthetic learning
 * curve at ASHA's rungs.  Per size n: add_ms (one lazy row), refit_ms (one
 * full factorisation), propose_ms (EI over the candidates and the local
 * refinement), lazy_ms = add + propose, full_ms = refit + propose, and
 * their ratio.  Medians of R repetitions; one JSON line at the end.  BLAS
 * runs on one thread throughout, as in the scheduler (tune_bo.c). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "hpdlf/error.h"
#include "exec/tune_gp.h"
#include "exec/tune_internal.h"
#include "kernels/blas.h"

static const char *spec_text =
	"{\"space\": {\"lr\": {\"log_uniform\": [1e-4, 1.0]}, \"momentum\": {\"uniform\": [0.0, 0.99]},"
	" \"batch\": {\"int_uniform\": [16, 256]}, \"optimizer\": {\"choice\": [\"sgd\", \"adam\", \"rmsprop\"]}},"
	" \"objective\": {\"metric\": \"val_loss\", \"mode\": \"min\"},"
	" \"budget\": {\"unit\": \"steps\", \"min\": 10, \"max\": 270},"
	" \"trials\": 100000, \"algorithm\": \"bo\", \"reduction_factor\": 3, \"seed\": 1}";

static double now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

/* A learning curve: the loss of configuration u after step steps. */
static double loss(const double *u, int64_t step)
{
	double a = u[0] - 0.6, b = u[1] - 0.8;
	return 0.2 + 3 * a * a + b * b + 0.1 * u[2] + 0.2 * (u[3] != 1) + 0.8 * exp(-(double)step / 60);
}

/* One more result, as ASHA would produce: a random trial at a random rung. */
static int observe_one(struct hp_tune_bo *bo, const struct hp_tune_spec *s, struct hp_rng *r)
{
	static const int64_t rungs[] = { 10, 30, 90, 270 };
	double u[4];
	int64_t step = rungs[(int)(hp_rng_unit(r) * hp_rng_unit(r) * 4)];

	hp_tune_sample(s, r, u);
	return hp_bo_observe(bo, u, step, loss(u, step));
}

static int cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

static double median(double *v, int n)
{
	qsort(v, (size_t)n, sizeof *v, cmp);
	return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

struct point {
	int n;
	double add, refit, propose;
};

/* Timings at the GP's current size (reps each); leaves it reps points larger. */
static int measure(struct hp_tune_bo *bo, const struct hp_tune_spec *s, struct hp_rng *r, int reps,
		   struct point *pt)
{
	double add[reps], refit[reps], prop[reps], u[4], t0;
	struct hp_gp *gp = hp_bo_gp(bo);
	int rc;

	pt->n = gp->n;
	for (int k = 0; k < reps; k++) {
		t0 = now_ms();
		if ((rc = hp_gp_refactor(gp)) < 0)
			return rc;
		refit[k] = now_ms() - t0;
		t0 = now_ms();
		if ((rc = hp_bo_propose(bo, 1000000 + k, 0, NULL, u)) < 0)
			return rc;
		prop[k] = now_ms() - t0;
		hp_tune_sample(s, r, u);
		t0 = now_ms();
		if ((rc = hp_gp_add(gp, u, loss(u, 270))) < 0)
			return rc;
		add[k] = now_ms() - t0;
	}
	pt->add = median(add, reps), pt->refit = median(refit, reps), pt->propose = median(prop, reps);
	return 0;
}

static void print_json(const struct point *pt, int np, const struct hp_tune_spec *s)
{
	printf("{\"bench\":\"tune_bo\",\"dims\":%d,\"candidates\":%d,\"refine\":%d,\"points\":[", s->nparams + 1,
	       s->bo.candidates, s->bo.refine);
	for (int i = 0; i < np; i++) {
		double lazy = pt[i].add + pt[i].propose, full = pt[i].refit + pt[i].propose;
		printf("%s{\"n\":%d,\"add_ms\":%.3f,\"refit_ms\":%.3f,\"propose_ms\":%.3f,\"lazy_ms\":%.3f,"
		       "\"full_ms\":%.3f,\"ratio_full_to_lazy\":%.2f,\"refit_to_add\":%.1f}",
		       i ? "," : "", pt[i].n, pt[i].add, pt[i].refit, pt[i].propose, lazy, full, full / lazy,
		       pt[i].refit / pt[i].add);
	}
	printf("]}\n");
}

static int parse_args(int argc, char **argv, int *sizes, int *nsizes, int *reps)
{
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--reps") && i + 1 < argc) {
			*reps = atoi(argv[++i]);
		} else if (!strcmp(argv[i], "--sizes") && i + 1 < argc) {
			char *p = argv[++i];
			for (*nsizes = 0; *p && *nsizes < 16; (*nsizes)++) {
				sizes[*nsizes] = (int)strtol(p, &p, 10);
				if (*p == ',')
					p++;
			}
		} else {
			fprintf(stderr, "usage: %s [--sizes 100,1000,5000] [--reps R]\n", argv[0]);
			return -1;
		}
	}
	for (int i = 0; i < *nsizes; i++)
		if (sizes[i] < 2 || (i && sizes[i] <= sizes[i - 1])) {
			fprintf(stderr, "%s: --sizes must be increasing, from 2\n", argv[0]);
			return -1;
		}
	return *reps < 1 ? -1 : 0;
}

int main(int argc, char **argv)
{
	int sizes[16] = { 100, 1000, 5000 }, nsizes = 3, reps = 3, rc = 0;
	struct hp_tune_spec *s;
	struct hp_tune_bo *bo;
	struct hp_rng r = hp_rng_for(7, 0, 3);
	struct point pt[16];

	if (parse_args(argc, argv, sizes, &nsizes, &reps) < 0)
		return 2;
	if (hp_tune_spec_parse(spec_text, &s) < 0 || hp_bo_create(s, &bo) < 0) {
		fprintf(stderr, "%s: %s\n", argv[0], hp_errmsg());
		return 1;
	}
	hp_blas_serial_enter();
	for (int i = 0; i < nsizes && rc >= 0; i++) {
		double t0 = now_ms();
		while (hp_bo_gp(bo)->n < sizes[i] && rc >= 0)
			rc = observe_one(bo, s, &r);
		fprintf(stderr, "n=%d reached in %.0f ms\n", sizes[i], now_ms() - t0);
		if (rc >= 0)
			rc = measure(bo, s, &r, reps, &pt[i]);
	}
	hp_blas_serial_leave();
	if (rc < 0)
		fprintf(stderr, "%s: %s\n", argv[0], hp_errmsg());
	else
		print_json(pt, nsizes, s);
	hp_bo_free(bo);
	hp_tune_spec_free(s);
	return rc < 0;
}
