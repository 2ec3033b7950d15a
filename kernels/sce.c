/* The inner loops of SoftmaxCrossEntropy and its gradient (kernels/train.c),
 * vectorized: log-sum-exps and e^(x - lse) in double with a polynomial exp
 * instead of libm's, which took 3 calls per logit (a GPT-2-style model's
 * loss over 512 classes was 8% of its training step).  Each position's sum
 * still runs over its classes in order, in double. */
#include <math.h>
#include <string.h>

#include "kernels/eltwise_impl.h"
#include "kernels/train_util.h"

/* e^x in double within about an ulp, for the x <= 0 of a softmax (0 below
 * -708, where e^x would leave the normal range): x = n ln2 + r with
 * |r| <= ln2/2 (ln2 split in two so that n ln2_hi is exact), e^r by its
 * Taylor series to r^13 (remainder below 5e-18), times 2^n built in the
 * exponent bits. */
static inline double sce_exp(double x)
{
	double xc = x < -708.0 ? -708.0 : x > 709.0 ? 709.0 : x;
	double t = xc * 1.4426950408889634 + 6755399441055744.0; /* 1.5 * 2^52: rounds to an integer */
	double n = t - 6755399441055744.0, r, p, s;
	int64_t k;
	uint64_t b;

	memcpy(&k, &t, sizeof k);
	k -= 0x4338000000000000LL;
	r = xc - n * 6.93147180369123816490e-01;
	r = r - n * 1.90821492927058770002e-10;
	p = 1.0 / 6227020800.0;
	p = p * r + 1.0 / 479001600.0;
	p = p * r + 1.0 / 39916800.0;
	p = p * r + 1.0 / 3628800.0;
	p = p * r + 1.0 / 362880.0;
	p = p * r + 1.0 / 40320.0;
	p = p * r + 1.0 / 5040.0;
	p = p * r + 1.0 / 720.0;
	p = p * r + 1.0 / 120.0;
	p = p * r + 1.0 / 24.0;
	p = p * r + 1.0 / 6.0;
	p = p * r + 0.5;
	p = p * r + 1.0;
	p = p * r + 1.0;
	b = (uint64_t)(k + 1023) << 52;
	memcpy(&s, &b, sizeof s);
	return x < -708.0 ? 0.0 : p * s;
}

/* Positions i0 .. i0 + np - 1 (np <= TK_SCE_BLOCK) of a [classes, inner]
 * slice x, vectorized across the positions: lse[j] = max + log of the sum
 * over classes, in class order, of e^(x - max). */
HPK_SIMD void tk_sce_lse_cols(const float *x, int64_t classes, int64_t inner, int64_t i0, int np, double *lse)
{
	double m[TK_SCE_BLOCK], s[TK_SCE_BLOCK];

	for (int j = 0; j < np; j++)
		m[j] = -INFINITY, s[j] = 0;
	for (int64_t c = 0; c < classes; c++) {
		const float *r = x + c * inner + i0;
		for (int j = 0; j < np; j++)
			m[j] = r[j] > m[j] ? r[j] : m[j];
	}
	for (int64_t c = 0; c < classes; c++) {
		const float *r = x + c * inner + i0;
		for (int j = 0; j < np; j++)
			s[j] += sce_exp(r[j] - m[j]);
	}
	for (int j = 0; j < np; j++)
		lse[j] = m[j] + log(s[j]);
}

/* One position whose classes are contiguous (inner 1): the exps a block at
 * a time, summed in class order. */
HPK_SIMD double tk_sce_lse_row(const float *x, int64_t classes)
{
	double m = -INFINITY, s = 0, e[TK_SCE_BLOCK];

	for (int64_t c = 0; c < classes; c++)
		m = x[c] > m ? x[c] : m;
	for (int64_t c0 = 0; c0 < classes; c0 += TK_SCE_BLOCK) {
		int nc = classes - c0 < TK_SCE_BLOCK ? (int)(classes - c0) : TK_SCE_BLOCK;
		for (int j = 0; j < nc; j++)
			e[j] = sce_exp(x[c0 + j] - m);
		for (int j = 0; j < nc; j++)
			s += e[j];
	}
	return m + log(s);
}

/* dx = scale (e^(x - lse) - [c == label]) for positions i0 .. i0 + np - 1
 * of a [classes, inner] slice (0 where keep[j] is 0: an ignored label). */
HPK_SIMD void tk_sce_grad_cols(const float *x, float *dx, int64_t classes, int64_t inner, int64_t i0, int np,
			       const double *lse, const int64_t *lab, const int *keep, double scale)
{
	for (int64_t c = 0; c < classes; c++) {
		const float *r = x + c * inner + i0;
		float *d = dx + c * inner + i0;
		for (int j = 0; j < np; j++)
			d[j] = keep[j] ? (float)(scale * (sce_exp(r[j] - lse[j]) - (c == lab[j] ? 1.0 : 0.0))) : 0.0f;
	}
}

/* The same for one position with contiguous classes. */
HPK_SIMD void tk_sce_grad_row(const float *x, float *dx, int64_t classes, double lse, int64_t lab, double scale)
{
	for (int64_t c = 0; c < classes; c++)
		dx[c] = (float)(scale * (sce_exp(x[c] - lse) - (c == lab ? 1.0 : 0.0)));
}
