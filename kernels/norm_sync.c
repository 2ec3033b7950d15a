/* Synchronized BatchNorm statistics (--sync-bn): BatchNormTrain and
 * BatchNormGrad nodes with attribute sync=1 take their per-channel sums
 * over every rank of a data-parallel job, so N ranks normalize with the
 * statistics of the whole global batch, as one rank would.  The kernels
 * know nothing of MPI: the executor installs a function that sums doubles
 * over the ranks (exec/comm.c); without one the sums stay local.
 *
 * The mean and variance are two-pass in double, like one rank's: first
 * the count and the sums (mean), then the squared deviations from that
 * global mean (variance), each reduced over the ranks. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "hpdlf/error.h"
#include "kernels/norm_sync.h"

static int (*rank_sum)(double *buf, size_t n);

void hp_kernels_set_rank_sum(int (*fn)(double *buf, size_t n))
{
	rank_sum = fn;
}

int tk_rank_sum(double *buf, size_t n)
{
	return rank_sum ? rank_sum(buf, n) : 0;
}

int tk_bn_sync_stats(const float *x, int64_t nb, int64_t ch, int64_t inner, double *mean, double *var,
		     double *count)
{
	double *acc = malloc(((size_t)ch + 1) * sizeof *acc);
	int rc;

	if (!acc)
		return hp_error(-ENOMEM, "out of memory (BatchNorm statistics)");
	acc[0] = (double)(nb * inner);
	for (int64_t c = 0; c < ch; c++) {
		double s = 0;
		for (int64_t b = 0; b < nb; b++)
			for (int64_t i = 0; i < inner; i++)
				s += x[(b * ch + c) * inner + i];
		acc[1 + c] = s;
	}
	if ((rc = tk_rank_sum(acc, (size_t)ch + 1)) == 0) {
		*count = acc[0];
		for (int64_t c = 0; c < ch; c++) {
			double q = 0;
			mean[c] = acc[1 + c] / *count;
			for (int64_t b = 0; b < nb; b++)
				for (int64_t i = 0; i < inner; i++) {
					double d = x[(b * ch + c) * inner + i] - mean[c];
					q += d * d;
				}
			var[c] = q;
		}
		rc = tk_rank_sum(var, (size_t)ch);
		for (int64_t c = 0; rc == 0 && c < ch; c++)
			var[c] /= *count;
	}
	free(acc);
	return rc;
}
