/* im2col / col2im over 3-D geometries (1-D and 2-D are 3-D with unit dims).
 * Both walk the column matrix row by row (one channel and kernel offset per
 * row) and, inside, grid line by grid line, so the inner loop is a memcpy
 * (stride 1) or a short strided gather with the zero borders cut off. */
#include <string.h>

#include "kernels/conv_impl.h"

static int64_t floor_div(int64_t a, int64_t b)
{
	int64_t q = a / b;

	return (a % b != 0 && (a < 0) != (b < 0)) ? q - 1 : q;
}

void hp_colgeom_finish(struct hp_colgeom *c)
{
	c->kvol = c->k[0] * c->k[1] * c->k[2];
	c->img_vol = c->img[0] * c->img[1] * c->img[2];
	c->grid_vol = c->grid[0] * c->grid[1] * c->grid[2];
}

/* Grid positions [lo, hi) along the last axis whose image position for
 * kernel offset kw is inside the image. */
static void valid_w(const struct hp_colgeom *c, int64_t kw, int64_t *lo, int64_t *hi)
{
	int64_t off = kw * c->dil[2] - c->pad[2];

	*lo = floor_div(-off + c->stride[2] - 1, c->stride[2]);
	*hi = floor_div(c->img[2] - 1 - off, c->stride[2]) + 1;
	if (*lo < 0)
		*lo = 0;
	if (*hi > c->grid[2])
		*hi = c->grid[2];
}

/* A walk over grid lines r (a line is grid[2] long) that keeps the line's
 * (depth, height) position in counters: a division per line would cost
 * more than copying a short line. */
struct line_walk {
	int64_t r, gd, gh;
};

static void walk_start(const struct hp_colgeom *c, int64_t r, struct line_walk *w)
{
	w->r = r;
	w->gd = r / c->grid[1];
	w->gh = r % c->grid[1];
}

static void walk_next(const struct hp_colgeom *c, struct line_walk *w)
{
	w->r++;
	if (++w->gh == c->grid[1]) {
		w->gh = 0;
		w->gd++;
	}
}

/* Offset of the image line for the walk's grid line and kernel offsets
 * (kd, kh), or -1 when that line lies in the padding. */
static int64_t line_offset(const struct hp_colgeom *c, const struct line_walk *w, int64_t kd, int64_t kh)
{
	int64_t id = w->gd * c->stride[0] - c->pad[0] + kd * c->dil[0];
	int64_t ih = w->gh * c->stride[1] - c->pad[1] + kh * c->dil[1];

	if (id < 0 || id >= c->img[0] || ih < 0 || ih >= c->img[1])
		return -1;
	return (id * c->img[1] + ih) * c->img[2];
}

/* Inline loops rather than memset/memcpy: the segments are short (one
 * image line), where call overhead dominates. */
static void zero(float *dst, int64_t n)
{
	for (int64_t i = 0; i < n; i++)
		dst[i] = 0.0f;
}

static void gather_line(const struct hp_colgeom *c, const float *src, int64_t kw, int64_t a, int64_t b,
			int64_t lo, int64_t hi, float *restrict dst)
{
	int64_t s = c->stride[2];
	const float *restrict p;

	if (lo < a)
		lo = a;
	if (hi > b)
		hi = b;
	if (hi <= lo) {
		zero(dst, b - a);
		return;
	}
	zero(dst, lo - a);
	p = src + lo * s + kw * c->dil[2] - c->pad[2];
	dst += lo - a;
	if (s == 1) {
		for (int64_t i = 0; i < hi - lo; i++)
			dst[i] = p[i];
	} else {
		for (int64_t i = 0; i < hi - lo; i++)
			dst[i] = p[i * s];
	}
	zero(dst + (hi - lo), b - hi);
}

static void scatter_line(const struct hp_colgeom *c, float *img, int64_t kw, int64_t a, int64_t b, int64_t lo,
			 int64_t hi, const float *src)
{
	int64_t s = c->stride[2];
	float *p;

	if (lo < a)
		lo = a;
	if (hi > b)
		hi = b;
	p = img + lo * s + kw * c->dil[2] - c->pad[2];
	src += lo - a;
	if (s == 1) {
		for (int64_t w = lo; w < hi; w++)
			*p++ += *src++;
	} else {
		for (int64_t w = lo; w < hi; w++, p += s)
			*p += *src++;
	}
}

/* Part [*a, *b) of grid line r (of length grid[2]) inside [j0, j1). */
static void line_span(const struct hp_colgeom *c, int64_t r, int64_t j0, int64_t j1, int64_t *a, int64_t *b)
{
	int64_t base = r * c->grid[2];

	*a = j0 > base ? j0 - base : 0;
	*b = j1 - base < c->grid[2] ? j1 - base : c->grid[2];
}

void hp_im2col(const struct hp_colgeom *c, int64_t ch, const float *img, int64_t j0, int64_t j1, float *col)
{
	int64_t n = j1 - j0;

	for (int64_t cc = 0; cc < ch; cc++) {
		const float *im = img + cc * c->img_vol;
		for (int64_t kd = 0; kd < c->k[0]; kd++)
			for (int64_t kh = 0; kh < c->k[1]; kh++)
				for (int64_t kw = 0; kw < c->k[2]; kw++) {
					int64_t lo, hi;
					float *row = col;
					col += n;
					valid_w(c, kw, &lo, &hi);
					struct line_walk w;
					for (walk_start(c, j0 / c->grid[2], &w); w.r * c->grid[2] < j1; walk_next(c, &w)) {
						int64_t a, b, off;
						line_span(c, w.r, j0, j1, &a, &b);
						off = line_offset(c, &w, kd, kh);
						float *dst = row + w.r * c->grid[2] + a - j0;
						if (off < 0)
							zero(dst, b - a);
						else
							gather_line(c, im + off, kw, a, b, lo, hi, dst);
					}
				}
	}
}

void hp_col2im(const struct hp_colgeom *c, int64_t ch, const float *col, int64_t j0, int64_t j1, float *img)
{
	int64_t n = j1 - j0;

	for (int64_t cc = 0; cc < ch; cc++) {
		float *im = img + cc * c->img_vol;
		for (int64_t kd = 0; kd < c->k[0]; kd++)
			for (int64_t kh = 0; kh < c->k[1]; kh++)
				for (int64_t kw = 0; kw < c->k[2]; kw++) {
					int64_t lo, hi;
					const float *row = col;
					col += n;
					valid_w(c, kw, &lo, &hi);
					struct line_walk w;
					for (walk_start(c, j0 / c->grid[2], &w); w.r * c->grid[2] < j1; walk_next(c, &w)) {
						int64_t a, b, off;
						line_span(c, w.r, j0, j1, &a, &b);
						off = line_offset(c, &w, kd, kh);
						if (off >= 0)
							scatter_line(c, im + off, kw, a, b, lo, hi,
								     row + w.r * c->grid[2] + a - j0);
					}
				}
	}
}
