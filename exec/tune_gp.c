/* The lazy Gaussian process of tune_gp.h: the factor grows by a row per
 * observation; LAPACK refactors it only when asked. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <cblas.h>

#include "hpdlf/error.h"
#include "exec/tune_gp.h"

/* LAPACK as OpenBLAS exports it (Debian ships no lapacke.h with it). */
extern void dpotrf_(const char *uplo, const int *n, double *a, const int *lda, int *info);

#define B HP_GP_BLOCK
#define NOISE_MAX 1.0

int hp_gp_init(struct hp_gp *gp, int d, const unsigned char *cat)
{
	memset(gp, 0, sizeof *gp);
	gp->d = d;
	gp->cat = calloc((size_t)d, 1);
	gp->ls = malloc((size_t)d * sizeof *gp->ls);
	if (!gp->cat || !gp->ls) {
		hp_gp_free(gp);
		return -ENOMEM;
	}
	for (int k = 0; k < d; k++) {
		gp->cat[k] = cat ? cat[k] : 0;
		gp->ls[k] = gp->cat[k] ? 1.0 : 0.3;
	}
	gp->sf2 = 1.0;
	gp->noise = 1e-4;
	return 0;
}

void hp_gp_free(struct hp_gp *gp)
{
	for (int b = 0; b < gp->nband; b++)
		free(gp->band[b]);
	free(gp->band);
	free(gp->cat);
	free(gp->ls);
	free(gp->x);
	free(gp->y);
	free(gp->beta);
	memset(gp, 0, sizeof *gp);
}

double hp_gp_kernel(const struct hp_gp *gp, const double *a, const double *b)
{
	double r2 = 0, r;

	for (int k = 0; k < gp->d; k++) {
		double t = gp->cat[k] ? (a[k] != b[k]) : (a[k] - b[k]);
		r2 += t * t / (gp->ls[k] * gp->ls[k]);
	}
	r = sqrt(5.0 * r2);
	return gp->sf2 * (1.0 + r + r * r / 3.0) * exp(-r);
}

static size_t lda_of(int band)
{
	return (size_t)(band + 1) * B;
}

/* Row i of the factor (its first i+1 entries are L's). */
static double *row_of(const struct hp_gp *gp, int i)
{
	return gp->band[i / B] + (size_t)(i % B) * lda_of(i / B);
}

double hp_gp_factor_at(const struct hp_gp *gp, int i, int j)
{
	return row_of(gp, i)[j];
}

/* Solve L[0:n, 0:n] X = V in place (V: n x m, row-major), band by band. */
static void forward(const struct hp_gp *gp, int n, int m, double *v)
{
	for (int b = 0, b0 = 0; b0 < n; b++, b0 += B) {
		int rows = n - b0 < B ? n - b0 : B, lda = (int)lda_of(b);
		const double *l = gp->band[b];
		if (m == 1) {
			if (b0)
				cblas_dgemv(CblasRowMajor, CblasNoTrans, rows, b0, -1.0, l, lda, v, 1, 1.0, v + b0, 1);
			cblas_dtrsv(CblasRowMajor, CblasLower, CblasNoTrans, CblasNonUnit, rows, l + b0, lda, v + b0, 1);
			continue;
		}
		if (b0)
			cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, m, b0, -1.0, l, lda, v, m, 1.0,
				    v + (size_t)b0 * m, m);
		cblas_dtrsm(CblasRowMajor, CblasLeft, CblasLower, CblasNoTrans, CblasNonUnit, rows, m, 1.0, l + b0,
			    lda, v + (size_t)b0 * m, m);
	}
}

static int grow_band(struct hp_gp *gp, int b)
{
	if (b < gp->nband)
		return 0;
	if (gp->nband == gp->bandcap) {
		int c = gp->bandcap ? 2 * gp->bandcap : 16;
		double **p = realloc(gp->band, (size_t)c * sizeof *p);
		if (!p)
			return -ENOMEM;
		gp->band = p, gp->bandcap = c;
	}
	if (!(gp->band[b] = calloc((size_t)B * lda_of(b), sizeof **gp->band)))
		return -ENOMEM;
	gp->nband++;
	return 0;
}

/* Room for one more observation. */
static int grow(struct hp_gp *gp)
{
	int c = gp->cap ? gp->cap * 2 : 64;
	double *x, *y, *b;

	if (grow_band(gp, gp->n / B) < 0)
		return -ENOMEM;
	if (gp->n < gp->cap)
		return 0;
	if (!(x = realloc(gp->x, (size_t)c * (size_t)gp->d * sizeof *x)))
		return -ENOMEM;
	gp->x = x;
	if (!(y = realloc(gp->y, (size_t)c * sizeof *y)))
		return -ENOMEM;
	gp->y = y;
	if (!(b = realloc(gp->beta, (size_t)c * sizeof *b)))
		return -ENOMEM;
	gp->beta = b;
	gp->cap = c;
	return 0;
}

static int pivot_ok(const struct hp_gp *gp, double piv2)
{
	return piv2 > 1e-12 * (gp->sf2 + gp->noise);
}

int hp_gp_add(struct hp_gp *gp, const double *x, double y)
{
	int n = gp->n;
	double *row, piv;

	if (grow(gp) < 0)
		return -ENOMEM;
	memcpy(gp->x + (size_t)n * gp->d, x, (size_t)gp->d * sizeof *x);
	gp->y[n] = y;
	gp->beta_ok = 0;
	/* The new row l solves L l = k(X, x); its pivot is what is left of
	 * k(x, x) + noise: the Schur complement. */
	row = row_of(gp, n);
	for (int j = 0; j < n; j++)
		row[j] = hp_gp_kernel(gp, gp->x + (size_t)j * gp->d, x);
	forward(gp, n, 1, row);
	piv = hp_gp_kernel(gp, x, x) + gp->noise - cblas_ddot(n, row, 1, row, 1);
	gp->n++;
	if (pivot_ok(gp, piv)) {
		row[n] = sqrt(piv);
		return 0;
	}
	return hp_gp_refactor(gp);
}

/* K + noise*I of the data, column-major lower, into a (n*n). */
static void fill_k(const struct hp_gp *gp, double *a)
{
	size_t n = (size_t)gp->n, d = (size_t)gp->d;

	for (size_t j = 0; j < n; j++) {
		a[j + j * n] = hp_gp_kernel(gp, gp->x + j * d, gp->x + j * d) + gp->noise;
		for (size_t i = j + 1; i < n; i++)
			a[i + j * n] = hp_gp_kernel(gp, gp->x + i * d, gp->x + j * d);
	}
}

/* Pivots of a factored (n x n, column-major) too small to trust. */
static int small_pivot(const struct hp_gp *gp, const double *a, size_t n)
{
	int bad = 0;

	for (size_t i = 0; i < n; i++)
		bad += !pivot_ok(gp, a[i + i * n] * a[i + i * n]);
	return bad;
}

int hp_gp_refactor(struct hp_gp *gp)
{
	size_t n = (size_t)gp->n;
	double *a;
	int nn = gp->n, info = 0;

	gp->beta_ok = 0;
	if (!n)
		return 0;
	if (!(a = malloc(n * n * sizeof *a)))
		return -ENOMEM;
	/* A point repeated with too little noise leaves K singular: more
	 * noise until every pivot is clear of rounding (NOISE_MAX always is). */
	for (;;) {
		fill_k(gp, a);
		dpotrf_("L", &nn, a, &nn, &info);
		if ((!info && small_pivot(gp, a, n) == 0) || gp->noise >= NOISE_MAX)
			break;
		gp->noise = fmin(NOISE_MAX, fmax(gp->noise * 10, 1e-10 * gp->sf2));
	}
	for (size_t i = 0; i < n && !info; i++) {
		double *row = row_of(gp, (int)i);
		for (size_t j = 0; j <= i; j++)
			row[j] = a[i + j * n];
	}
	free(a);
	if (info)
		return hp_error(HP_EINTERNAL, "GP: the kernel matrix of %zu points is not positive definite", n);
	return 0;
}

int hp_gp_set_hyper(struct hp_gp *gp, const double *ls, double sf2, double noise)
{
	memcpy(gp->ls, ls, (size_t)gp->d * sizeof *ls);
	gp->sf2 = sf2;
	gp->noise = noise;
	return hp_gp_refactor(gp);
}

/* ymean, ystd and beta = L^-1 of the standardised targets, O(n^2). */
static void standardise(struct hp_gp *gp)
{
	double s = 0, ss = 0;
	int n = gp->n;

	if (gp->beta_ok)
		return;
	for (int i = 0; i < n; i++)
		s += gp->y[i];
	gp->ymean = n ? s / n : 0;
	for (int i = 0; i < n; i++)
		ss += (gp->y[i] - gp->ymean) * (gp->y[i] - gp->ymean);
	gp->ystd = n > 1 && ss > 1e-300 ? sqrt(ss / n) : 1.0;
	for (int i = 0; i < n; i++)
		gp->beta[i] = (gp->y[i] - gp->ymean) / gp->ystd;
	forward(gp, n, 1, gp->beta);
	gp->beta_ok = 1;
}

int hp_gp_lml(struct hp_gp *gp, double *lml)
{
	double ld = 0;

	standardise(gp);
	for (int i = 0; i < gp->n; i++)
		ld += log(row_of(gp, i)[i]);
	*lml = -0.5 * cblas_ddot(gp->n, gp->beta, 1, gp->beta, 1) - ld - 0.5 * gp->n * log(2 * M_PI);
	return 0;
}

int hp_gp_predict(struct hp_gp *gp, int m, const double *xs, double *mean, double *var)
{
	size_t n = (size_t)gp->n, M = (size_t)m, d = (size_t)gp->d;
	double *v;

	standardise(gp);
	if (!(v = malloc((n ? n : 1) * M * sizeof *v)))
		return -ENOMEM;
	for (size_t j = 0; j < n; j++)
		for (size_t c = 0; c < M; c++)
			v[j * M + c] = hp_gp_kernel(gp, gp->x + j * d, xs + c * d);
	forward(gp, gp->n, m, v);
	/* mean = k*' K^-1 y = (L^-1 k*)' (L^-1 y); var = k** - |L^-1 k*|^2. */
	for (size_t c = 0; c < M; c++) {
		double mu = 0, q = 0;
		for (size_t j = 0; j < n; j++)
			mu += v[j * M + c] * gp->beta[j], q += v[j * M + c] * v[j * M + c];
		mean[c] = gp->ymean + gp->ystd * mu;
		var[c] = gp->ystd * gp->ystd * fmax(hp_gp_kernel(gp, xs + c * d, xs + c * d) - q, 1e-12 * gp->sf2);
	}
	free(v);
	return 0;
}
