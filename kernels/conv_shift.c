/* Stride-1 convolution as shifted sgemms ("implicit GEMM") over a
 * zero-padded copy of the input, so there is no im2col.
 *
 * A chunk of output planes [d0, d1) of one (batch, group) copies the input
 * planes it reads into a slab laid out [ch][d1 - d0 + ext0][ph][pw] with
 * the padding written as zeros (ph, pw: output extent plus the kernel's
 * dilated extent).  In the slab's flat coordinates the input element read by
 * output (d, h, w) for kernel offset (kd, kh, kw) is
 *     (d - d0 + kd*dil0) * ph*pw + (h + kh*dil1) * pw + w + kw*dil2,
 * so for a fixed kernel offset the operand of all channels is one strided
 * matrix view: [ch x n] at slab + shift, leading dimension the channel
 * stride.  A tile of output rows is then kvol accumulated sgemms
 * [m x ch] x [ch x n] into a [m x n] buffer whose columns include the
 * (pw - W) padding columns of each row (and padding rows between planes);
 * the valid columns are copied out to Y with the bias.
 *
 * The same slab serves the filter gradient: a flat im2col of a tile is one
 * contiguous copy per (channel, kernel offset) row.
 */
#include <string.h>

#include "kernels/blas.h"
#include "kernels/conv_impl.h"

static int64_t max64(int64_t a, int64_t b)
{
	return a > b ? a : b;
}

static int64_t min64(int64_t a, int64_t b)
{
	return a < b ? a : b;
}

/* Target columns of one tile (benchmarks may change it). */
static int64_t tile_cols = HP_SHIFT_TILE_COLS;

void hp_shift_set_tile_cols(int64_t c)
{
	tile_cols = c > 0 ? c : HP_SHIFT_TILE_COLS;
}

/* Tile shape: whole output planes per tile when planes are small, else
 * runs of rows of one plane.  Either count is a power of two fixed by the
 * plane's shape (not by the number of planes or rows), and tiles start at
 * its multiples: the same sgemms in a band that starts at one (see
 * conv_tile.c). */
static void plan_tiles(struct hp_shift *s, int64_t tile_cols)
{
	if (s->pplane >= tile_cols / 2) {
		s->talign = hp_pow2_floor(tile_cols / s->pw);
		s->tplanes = 0;
		s->trows = min64(s->talign, s->out[1]);
		s->tcols = s->trows * s->pw;
	} else {
		s->talign = hp_pow2_floor(tile_cols / s->pplane);
		s->tplanes = min64(s->talign, s->out[0]);
		s->trows = s->tplanes * s->out[1];
		s->tcols = s->tplanes * s->pplane;
	}
}

int hp_shift_init(struct hp_shift *s, const struct hp_colgeom *g, int64_t ch, int64_t m)
{
	int64_t ext[3];

	memset(s, 0, sizeof *s);
	for (int i = 0; i < 3; i++) {
		if (g->stride[i] != 1)
			return -1;
		ext[i] = (g->k[i] - 1) * g->dil[i];
		s->out[i] = g->grid[i];
		s->in[i] = g->img[i];
		s->pad[i] = g->pad[i];
		s->k[i] = g->k[i];
		s->dil[i] = g->dil[i];
		/* padded extent must hold the image after the begin pad */
		if (g->grid[i] + ext[i] < g->img[i] + g->pad[i])
			return -1;
	}
	s->ext0 = ext[0];
	s->ph = s->out[1] + ext[1];
	s->pw = s->out[2] + ext[2];
	s->pplane = s->ph * s->pw;
	s->kvol = g->kvol;
	s->ch = ch;
	s->m = m;
	s->xps = s->in[1] * s->in[2];
	s->xcs = s->in[0] * s->xps;
	s->yps = s->out[1] * s->out[2];
	s->nfold = 1;
	plan_tiles(s, tile_cols);
	return 0;
}

void hp_shift_retile(struct hp_shift *s, int64_t cols)
{
	if (cols > 0 && cols < s->tcols)
		plan_tiles(s, cols);
}

int hp_shift_fold(struct hp_shift *s, int64_t batch, int64_t x_item, int64_t y_item)
{
	if (s->in[0] != 1 || s->out[0] != 1 || s->ext0 != 0 || s->pad[0] != 0 || batch < 1)
		return -1;
	s->in[0] = s->out[0] = batch;
	s->xps = x_item;
	s->yps = y_item;
	s->nfold = batch;
	/* measured on LeNet's 4x4 planes: tiles past ~100 columns gain
	 * nothing there but workspace */
	plan_tiles(s, max64(tile_cols / HP_SHIFT_FOLDED_TILE_DIV, 1));
	return 0;
}

double hp_shift_useful(const struct hp_shift *s)
{
	if (s->tplanes)
		return (double)(s->out[1] * s->out[2]) / (double)s->pplane;
	return (double)s->out[2] / (double)s->pw;
}

int64_t hp_shift_slab_planes(const struct hp_shift *s, int64_t share)
{
	int64_t cap = s->out[0];

	if (s->nfold > 1 && s->tplanes)
		cap = min64(cap, HP_SHIFT_FOLDED_SLAB_TILES * s->tplanes);
	else
		cap = min64(cap, max64(HP_SHIFT_SLAB_PLANES, s->tplanes));
	return min64(max64(share, 1), cap);
}

size_t hp_shift_slab_floats(const struct hp_shift *s, int64_t planes)
{
	return (size_t)(s->ch * (planes + s->ext0) * s->pplane);
}

/* Output planes per chunk that fit `floats` of per-thread workspace next to
 * a tile buffer of `tmp` floats (0: none fit). */
int64_t hp_shift_chunk(const struct hp_shift *s, size_t floats, size_t tmp)
{
	int64_t cd;

	if (floats <= tmp)
		return 0;
	cd = (int64_t)((floats - tmp) / (size_t)(s->ch * s->pplane)) - s->ext0;
	if (cd < 1 || (s->tplanes && cd < s->tplanes && cd < s->out[0]))
		return 0;
	cd = min64(cd, s->out[0]);
	if (s->tplanes)
		cd = cd / s->tplanes * s->tplanes > 0 ? cd / s->tplanes * s->tplanes : cd;
	return cd;
}

static void zerof(float *p, int64_t n)
{
	memset(p, 0, (size_t)n * sizeof *p);
}

void hp_shift_slab(const struct hp_shift *s, const float *x, int64_t d0, int64_t d1, float *slab)
{
	int64_t np = d1 - d0 + s->ext0;
	int64_t lead = s->pad[2], tail = s->pw - s->pad[2] - s->in[2];

	for (int64_t c = 0; c < s->ch; c++) {
		const float *xc = x + c * s->xcs;
		for (int64_t q = 0; q < np; q++) {
			int64_t id = d0 + q - s->pad[0];
			float *dst = slab + (c * np + q) * s->pplane;
			if (id < 0 || id >= s->in[0]) {
				zerof(dst, s->pplane);
				continue;
			}
			for (int64_t hh = 0; hh < s->ph; hh++, dst += s->pw) {
				int64_t ih = hh - s->pad[1];
				if (ih < 0 || ih >= s->in[1]) {
					zerof(dst, s->pw);
					continue;
				}
				zerof(dst, lead);
				memcpy(dst + lead, xc + id * s->xps + ih * s->in[2], (size_t)s->in[2] * sizeof *dst);
				zerof(dst + lead + s->in[2], tail);
			}
		}
	}
}

int64_t hp_shift_ntiles(const struct hp_shift *s, int64_t planes)
{
	if (s->tplanes)
		return (planes + s->tplanes - 1) / s->tplanes;
	return planes * ((s->out[1] + s->trows - 1) / s->trows);
}

void hp_shift_tile_rows(const struct hp_shift *s, int64_t d0, int64_t d1, int64_t t, int64_t *r0, int64_t *r1)
{
	if (s->tplanes) {
		int64_t a = d0 + t * s->tplanes, b = min64(a + s->tplanes, d1);
		*r0 = a * s->out[1];
		*r1 = b * s->out[1];
	} else {
		int64_t per = (s->out[1] + s->trows - 1) / s->trows, d = d0 + t / per, h = t % per * s->trows;
		*r0 = d * s->out[1] + h;
		*r1 = d * s->out[1] + min64(h + s->trows, s->out[1]);
	}
}

/* Slab column of output row r (first element), for a chunk starting at d0. */
static int64_t row_col(const struct hp_shift *s, int64_t d0, int64_t r)
{
	return (r / s->out[1] - d0) * s->pplane + r % s->out[1] * s->pw;
}

int64_t hp_shift_tile_span(const struct hp_shift *s, int64_t d0, int64_t r0, int64_t r1, int64_t *start)
{
	*start = row_col(s, d0, r0);
	return row_col(s, d0, r1 - 1) + s->out[2] - *start;
}

/* Offset of output row r (d * out[1] + h) in one channel of Y. */
static int64_t out_row(const struct hp_shift *s, int64_t r)
{
	return r / s->out[1] * s->yps + r % s->out[1] * s->out[2];
}

static int64_t shift_of(const struct hp_shift *s, int64_t kidx)
{
	int64_t kw = kidx % s->k[2], kh = kidx / s->k[2] % s->k[1], kd = kidx / (s->k[2] * s->k[1]);

	return kd * s->dil[0] * s->pplane + kh * s->dil[1] * s->pw + kw * s->dil[2];
}

void hp_shift_tile(const struct hp_shift *s, const float *wk, const float *slab, int64_t d0, int64_t d1,
		   int64_t r0, int64_t r1, float *tmp, float *y, int64_t ldy, const float *bias)
{
	int64_t start, n = hp_shift_tile_span(s, d0, r0, r1, &start), np = d1 - d0 + s->ext0;
	int64_t ldb = np * s->pplane, w = s->out[2];

	for (int64_t k = 0; k < s->kvol; k++)
		hp_sgemm(CblasNoTrans, CblasNoTrans, (int)s->m, (int)n, (int)s->ch, 1.0f,
			    wk + k * s->m * s->ch, (int)s->ch, slab + start + shift_of(s, k), (int)ldb,
			    k ? 1.0f : 0.0f, tmp, (int)n);
	for (int64_t m = 0; m < s->m; m++) {
		float b = bias ? bias[m] : 0.0f;
		for (int64_t r = r0; r < r1; r++) {
			const float *restrict src = tmp + m * n + row_col(s, d0, r) - start;
			float *restrict dst = y + m * ldy + out_row(s, r);
			for (int64_t j = 0; j < w; j++)
				dst[j] = src[j] + b;
		}
	}
}

void hp_shift_flat_col(const struct hp_shift *s, const float *slab, int64_t d0, int64_t d1, int64_t r0, int64_t r1,
		       float *col)
{
	int64_t start, n = hp_shift_tile_span(s, d0, r0, r1, &start), np = d1 - d0 + s->ext0;

	for (int64_t c = 0; c < s->ch; c++)
		for (int64_t k = 0; k < s->kvol; k++, col += n)
			memcpy(col, slab + c * np * s->pplane + start + shift_of(s, k), (size_t)n * sizeof *col);
}

void hp_shift_pack_rows(const struct hp_shift *s, const float *y, int64_t ldy, int64_t d0, int64_t r0, int64_t r1,
			float *tmp)
{
	int64_t start, n = hp_shift_tile_span(s, d0, r0, r1, &start), w = s->out[2];

	for (int64_t m = 0; m < s->m; m++) {
		float *dst = tmp + m * n;
		int64_t at = 0;
		for (int64_t r = r0; r < r1; r++) {
			int64_t c = row_col(s, d0, r) - start;
			zerof(dst + at, c - at);
			memcpy(dst + c, y + m * ldy + out_row(s, r), (size_t)w * sizeof *dst);
			at = c + w;
		}
	}
}
