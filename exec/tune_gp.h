/* A Gaussian process for Bayesian optimisation, lazy in the sense of Ram et
 * al. (MLHPC 2019): adding an observation extends the Cholesky factor L of
 * K + noise*I by one row (a triangular solve, O(n^2)) instead of factoring
 * again (O(n^3)); the kernel's hyperparameters are refitted only now and
 * then (hp_gp_fit), which is when a full factorisation happens.
 *
 * Kernel: Matern 5/2, k(a, b) = sf2 (1 + sqrt5 r + 5 r^2 / 3) exp(-sqrt5 r),
 * r^2 = sum over continuous dims of ((a_k - b_k) / ls_k)^2 plus, for each
 * categorical dim (a value is an index), 1 / ls_k^2 when a_k != b_k: the
 * squared distance of the one-hot encodings (halved), so k stays positive
 * definite.  Targets are standardised (mean 0, variance 1 over the data)
 * before the posterior; predictions come back in the data's units.
 *
 * L is stored in bands of HP_GP_BLOCK rows, band b row-major with leading
 * dimension (b+1)*HP_GP_BLOCK: a new row is an append (a new band every
 * HP_GP_BLOCK rows, nothing ever moves), and a triangular solve is, band by
 * band, one gemv/gemm with everything left of the band and one trsv/trsm
 * with its diagonal block, straight from the storage. */
#ifndef HPDLF_EXEC_TUNE_GP_H
#define HPDLF_EXEC_TUNE_GP_H

#include <stddef.h>

#define HP_GP_BLOCK 64

struct hp_gp {
	int d;                  /* input dimensions */
	unsigned char *cat;     /* per dim: categorical */
	double *ls, sf2, noise; /* hyperparameters */
	int n, cap;             /* observations, room for */
	double *x, *y;          /* n*d inputs, n targets */
	double **band;          /* the factor's bands */
	int nband, bandcap;
	double ymean, ystd;     /* standardisation of y */
	double *beta;           /* L^-1 (y - ymean) / ystd */
	int beta_ok;            /* beta is for the current data */
};

/* d dimensions, cat[k] nonzero for a categorical one (cat may be NULL). */
int hp_gp_init(struct hp_gp *gp, int d, const unsigned char *cat);
void hp_gp_free(struct hp_gp *gp);
double hp_gp_kernel(const struct hp_gp *gp, const double *a, const double *b);

/* Add (x, y): L grows by one row, O(n^2).  If the new pivot is not
 * positive (x repeats a point and noise is tiny) the noise is raised and
 * L factored again. */
int hp_gp_add(struct hp_gp *gp, const double *x, double y);
/* Factor K + noise*I again from scratch (LAPACK dpotrf), O(n^3). */
int hp_gp_refactor(struct hp_gp *gp);
/* Set the hyperparameters (ls has d entries) and refactor. */
int hp_gp_set_hyper(struct hp_gp *gp, const double *ls, double sf2, double noise);
/* Fit the hyperparameters by maximising the log marginal likelihood on at
 * most max_points evenly spaced observations (coordinate search on a log
 * scale from the current values), then refactor. */
int hp_gp_fit(struct hp_gp *gp, int max_points);

/* Posterior mean and variance (of the latent function, in y's units) at m
 * points xs (m*d).  The m triangular solves share one pass over L
 * (level-3 BLAS per band). */
int hp_gp_predict(struct hp_gp *gp, int m, const double *xs, double *mean, double *var);
/* Element (i, j), j <= i, of the factor. */
double hp_gp_factor_at(const struct hp_gp *gp, int i, int j);
/* Log marginal likelihood of the standardised targets. */
int hp_gp_lml(struct hp_gp *gp, double *lml);

#endif
