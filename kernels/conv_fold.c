/* im2col over small planes with the batch folded into the tiles (see
 * conv_impl.h).  ResNet-18 at 64x64 ends in 3x3 convolutions over 4x4 and
 * 2x2 planes: one plane per sgemm gave N = 16 or 4 columns against
 * K = 2304 or 4608, and OpenBLAS packed the whole weight for each (about
 * 5 GFLOP/s).  Here a tile is bfold batch items by mblk output channels:
 * its column matrix [kdim][items * plane] is built item by item, one sgemm
 * writes [mblk][items * plane] to a buffer, and the scatter to Y (NCHW)
 * adds the bias.
 *
 * Bits: bfold is a power of two fixed by the plane and kdim, mblk a
 * constant, so a tile is the same sgemm whatever the thread count and in
 * any band of the batch that starts at a multiple of bfold
 * (hp_conv_band_align); bands cannot cut the planes. */
#include <cblas.h>

#include "kernels/conv_impl.h"

static int64_t min64(int64_t a, int64_t b)
{
	return a < b ? a : b;
}

/* Floats one worker needs: the column matrix and the sgemm's output. */
static int64_t fold_per_thread(const struct hp_conv *cv)
{
	int64_t cols = min64(cv->bfold, cv->batch) * cv->yvol;

	return cols * (cv->kdim + cv->mblk);
}

void hp_conv_fold_setup(struct hp_conv *cv)
{
	int64_t f, cap = (int64_t)(hp_conv_ws_max() / sizeof(float)), per, nt;

	cv->bfold = 0;
	if (!cv->fold_ok || cv->g.grid[0] != 1 || cv->yvol * 2 > HP_CONV_FOLD_COLS)
		return;
	f = hp_pow2_floor(HP_CONV_FOLD_COLS / cv->yvol);
	while (f > 1 && f * cv->yvol * cv->kdim > cap / 2)
		f /= 2;
	if (f < 2)
		return;
	cv->bfold = f;
	cv->mblk = min64(cv->cout_g, HP_CONV_FOLD_MROWS);
	per = fold_per_thread(cv);
	nt = cv->lean ? 1 : hp_conv_ws_threads();
	nt = min64(nt, cap / per);
	cv->workspace = (size_t)((nt < 1 ? 1 : nt) * per) * sizeof(float);
}

struct fold_run {
	const struct hp_conv *cv;
	const float *x, *w, *b;
	float *y, *ws;
	int64_t per_thread, nmb;
};

static void fold_scatter(const struct hp_conv *cv, const float *t, int64_t nc, int64_t n0, int64_t nf, int64_t m0,
			 int64_t mr, const float *b, float *y)
{
	for (int64_t f = 0; f < nf; f++)
		for (int64_t m = 0; m < mr; m++) {
			const float *src = t + m * nc + f * cv->yvol;
			float *dst = y + ((n0 + f) * cv->cout + m0 + m) * cv->yvol;
			if (b) {
				const float bias = b[m0 + m];
				for (int64_t j = 0; j < cv->yvol; j++)
					dst[j] = src[j] + bias;
			} else {
				for (int64_t j = 0; j < cv->yvol; j++)
					dst[j] = src[j];
			}
		}
}

/* Item (batch run, group, channel block), channel block innermost. */
static void fold_tile(const struct fold_run *r, int64_t item, float *col)
{
	const struct hp_conv *cv = r->cv;
	int64_t mb = item % r->nmb, bg = item / r->nmb, g = bg % cv->group, n0 = bg / cv->group * cv->bfold;
	int64_t nf = min64(cv->bfold, cv->batch - n0), nc = nf * cv->yvol;
	int64_t m0 = g * cv->cout_g + mb * cv->mblk, mr = min64(cv->mblk, (g + 1) * cv->cout_g - m0);
	float *t = col + nc * cv->kdim;

	for (int64_t f = 0; f < nf; f++)
		hp_im2col_ld(&cv->g, cv->cin_g, r->x + ((n0 + f) * cv->cin + g * cv->cin_g) * cv->xvol, 0, cv->yvol,
			     col + f * cv->yvol, nc);
	cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)mr, (int)nc, (int)cv->kdim, 1.0f,
		    r->w + m0 * cv->kdim, (int)cv->kdim, col, (int)nc, 0.0f, t, (int)nc);
	fold_scatter(cv, t, nc, n0, nf, m0, mr, r->b, r->y);
}

static void fold_range(void *arg, int64_t b, int64_t e, int tid)
{
	const struct fold_run *r = arg;

	for (int64_t i = b; i < e; i++)
		fold_tile(r, i, r->ws + tid * r->per_thread);
}

void hp_conv_fold_forward(const struct hp_conv *cv, const float *x, const float *w, const float *b, float *y,
			  float *ws, struct hp_pool *pool, int threads)
{
	struct fold_run r = { .cv = cv, .x = x, .w = w, .b = b, .y = y, .ws = ws };
	int64_t fit;

	r.per_thread = fold_per_thread(cv);
	r.nmb = (cv->cout_g + cv->mblk - 1) / cv->mblk;
	fit = (int64_t)(cv->workspace / sizeof(float)) / r.per_thread;
	if (threads > fit)
		threads = (int)fit;
	hp_conv_parallel(pool, threads, (cv->batch + cv->bfold - 1) / cv->bfold * cv->group * r.nmb, fold_range,
			 &r);
}
