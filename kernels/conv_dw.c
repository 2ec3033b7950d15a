/* Depthwise convolution (group == input channels > 1, any channel
 * multiplier), forward and both gradients, as direct loops.
 *
 * Why not im2col + sgemm: each group's sgemm is 1 x positions x kvol (or
 * multiplier x ... ), far too thin for BLAS; hpdlf's im2col path ran these
 * at 1-3 GFLOP/s per core and oneDNN 2.6 on NCHW tensors (its gemm-based
 * kernel) no better (bench/bench_conv_libs.c).  Here a tap of the window
 * scales a contiguous run of an input row into an output row, which the
 * compiler vectorizes.
 *
 * Determinism: every output element starts from its bias (or zero) and
 * adds its taps in (kd, kh, kw) order, skipping taps outside the image
 * (2-D 3x3 at stride 1: adding them as w * 0 from a zero-padded copy of
 * the plane, which changes no sum but the sign of a zero, whole node and
 * band alike); no element depends on how planes are shared among workers
 * or where a band of rows starts (a tap inside a band's halo is the same
 * tap the whole node adds, a tap in its padding the same padding), so
 * results are bitwise the same for any thread count and any band cut.  The gradients keep one order per element too: dX
 * element (c, i) adds over multipliers, output rows and taps in loop
 * order; dW element (m, k) sums per-column partials over (n, rows) in
 * order, then the columns in order, in one worker.
 *
 * 2-D 3x3 windows at stride 1 or 2 take conv_dw3.c's vector rows or
 * conv_dwc.c's channel blocks instead (with AVX2 and FMA; at stride 1 and
 * rows of 7 to 22, conv_dwf.c's flat planes with AVX-512), and so do
 * their data gradients (stride 1 as a forward, stride 2 as conv_dw3.c's
 * dX rows or conv_dwc.c's blocks: one chain per element either way); at
 * stride 2 on narrow planes with AVX-512 both passes are conv_dws.c's
 * (lanes along positions, the same chains).
 * The dW of 5x5 and 7x7 windows (undilated, stride 1 or 2) is
 * conv_dwk_grad.c's where AVX-512 exists, by geometry alone: per unit,
 * the rows' fused multiply-add chains over positions summed in row order
 * (conv_dwc.c's chain), units from the last as here.  Ahead of both, 3x3
 * and 5x5 rows of 24 outputs or more (48 with units of a row) take
 * conv_dwp_grad.c's sixteen positions in the lanes: its own chains and
 * tree per unit, by geometry and unit alone, so bands agree again.
 *
 * The loops are compiled for AVX-512, AVX2 and baseline x86-64 (GCC
 * target_clones); without FMA contraction (-std=c11) every clone computes
 * the same bits. */
#include <stdlib.h>
#include <string.h>

#include "kernels/conv_impl.h"
#include "kernels/fused_impl.h"

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define DW_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define DW_CLONES
#endif

int hp_dw_eligible(int64_t group, int64_t cin, int64_t cout)
{
	return group > 1 && group == cin && cout % cin == 0;
}

/* Output positions o in [*lo, *hi) whose input position o*s - p + t lies
 * in [0, n) (t = tap offset k * dil). */
static void tap_range(int64_t n, int64_t out, int64_t s, int64_t p, int64_t t, int64_t *lo, int64_t *hi)
{
	int64_t a = p - t, b = n - 1 + p - t; /* o*s in [a, b] */

	if (s == 1) { /* no divisions: this runs for every row */
		*lo = a <= 0 ? 0 : a;
		*hi = b < 0 ? 0 : b + 1;
	} else {
		*lo = a <= 0 ? 0 : (a + s - 1) / s;
		*hi = b < 0 ? 0 : b / s + 1;
	}
	if (*hi > out)
		*hi = out;
	if (*lo > *hi)
		*lo = *hi;
}

/* y[lo, hi) += w * x[o*s + off] */
DW_CLONES static void axpy_row(float *restrict y, const float *restrict x, float w, int64_t lo, int64_t hi, int64_t s,
			       int64_t off)
{
	if (s == 1)
		for (int64_t o = lo; o < hi; o++)
			y[o] += w * x[o + off];
	else
		for (int64_t o = lo; o < hi; o++)
			y[o] += w * x[o * s + off];
}

/* Three taps (dil apart) in one pass, for o in [lo, hi) where all three
 * are inside the row: y[o] = ((y[o] + w0 x0) + w1 x1) + w2 x2, the sums
 * of three axpy_row passes in the same order, so the same bits. */
DW_CLONES static void axpy3_row(float *restrict y, const float *restrict x, const float *w, int64_t lo, int64_t hi,
				int64_t s, int64_t off, int64_t dil)
{
	float w0 = w[0], w1 = w[1], w2 = w[2];
	const float *x1 = x + dil, *x2 = x + 2 * dil;

	if (s == 1)
		for (int64_t o = lo; o < hi; o++)
			y[o] = ((y[o] + w0 * x[o + off]) + w1 * x1[o + off]) + w2 * x2[o + off];
	else
		for (int64_t o = lo; o < hi; o++)
			y[o] = ((y[o] + w0 * x[o * s + off]) + w1 * x1[o * s + off]) + w2 * x2[o * s + off];
}

/* acc_k[o] += dy[o] * x[o*s + off + k*dil] for the three taps k at once. */
DW_CLONES static void dot3_row(float *restrict a0, float *restrict a1, float *restrict a2, const float *restrict dy,
			       const float *restrict x, int64_t lo, int64_t hi, int64_t s, int64_t off, int64_t dil)
{
	const float *x1 = x + dil, *x2 = x + 2 * dil;

	if (s == 1)
		for (int64_t o = lo; o < hi; o++) {
			float g = dy[o];
			a0[o] += g * x[o + off];
			a1[o] += g * x1[o + off];
			a2[o] += g * x2[o + off];
		}
	else
		for (int64_t o = lo; o < hi; o++) {
			float g = dy[o];
			a0[o] += g * x[o * s + off];
			a1[o] += g * x1[o * s + off];
			a2[o] += g * x2[o * s + off];
		}
}

/* dx[o*s + off] += w * dy[o], o in [lo, hi) */
DW_CLONES static void scatter_row(float *restrict dx, const float *restrict dy, float w, int64_t lo, int64_t hi,
				  int64_t s, int64_t off)
{
	if (s == 1)
		for (int64_t o = lo; o < hi; o++)
			dx[o + off] += w * dy[o];
	else
		for (int64_t o = lo; o < hi; o++)
			dx[o * s + off] += w * dy[o];
}

/* acc[o] += dy[o] * x[o*s + off], o in [lo, hi) */
DW_CLONES static void dot_row(float *restrict acc, const float *restrict dy, const float *restrict x, int64_t lo,
			      int64_t hi, int64_t s, int64_t off)
{
	if (s == 1)
		for (int64_t o = lo; o < hi; o++)
			acc[o] += dy[o] * x[o + off];
	else
		for (int64_t o = lo; o < hi; o++)
			acc[o] += dy[o] * x[o * s + off];
}

/* The image row of output row (od, oh) under tap (kd, kh), or NULL. */
static const float *img_row(const struct hp_colgeom *g, const float *img, int64_t od, int64_t oh, int64_t kd,
			    int64_t kh)
{
	int64_t id = od * g->stride[0] - g->pad[0] + kd * g->dil[0];
	int64_t ih = oh * g->stride[1] - g->pad[1] + kh * g->dil[1];

	if (id < 0 || id >= g->img[0] || ih < 0 || ih >= g->img[1])
		return NULL;
	return img + (id * g->img[1] + ih) * g->img[2];
}

/* The taps kw of one image row xr into output row yr, in kw order per
 * element: three at once where all three are inside (k[2] == 3), one by
 * one at the row's ends. */
static void fwd_taps(const struct hp_colgeom *g, const float *xr, const float *w, float *yr)
{
	int64_t ow = g->grid[2], s = g->stride[2], p = g->pad[2], dl = g->dil[2], lo, hi, l2, h2;

	if (g->k[2] == 3) {
		tap_range(g->img[2], ow, s, p, 0, &lo, &hi);
		tap_range(g->img[2], ow, s, p, 2 * dl, &l2, &h2);
		lo = l2 > lo ? l2 : lo; /* the middle tap's range lies between */
		hi = h2 < hi ? h2 : hi;
		if (lo < hi) {
			for (int64_t o = 0; o < ow; o++) {
				if (o == lo)
					o = hi; /* the interior below */
				for (int64_t kw = 0; kw < 3 && o < ow; kw++) {
					int64_t i = o * s - p + kw * dl;
					if (i >= 0 && i < g->img[2])
						yr[o] += w[kw] * xr[i];
				}
			}
			axpy3_row(yr, xr, w, lo, hi, s, -p, dl);
			return;
		}
	}
	for (int64_t kw = 0; kw < g->k[2]; kw++) {
		int64_t t = kw * dl;
		tap_range(g->img[2], ow, s, p, t, &lo, &hi);
		axpy_row(yr, xr, w[kw], lo, hi, s, t - p);
	}
}

/* The nine taps of a 3x3 window (rows x0, x1, x2) in one pass, for o in
 * [lo, hi) where all are inside: y[o] plus the taps in (kh, kw) order,
 * each sum rounded where three axpy3_row passes round it, so the same bits
 * with a third of the loads and stores of y. */
DW_CLONES static void axpy9_row(float *restrict y, const float *restrict x0, const float *restrict x1,
				const float *restrict x2, const float *w, int64_t lo, int64_t hi, int64_t s, int64_t off,
				int64_t dil)
{
	const float a0 = w[0], a1 = w[1], a2 = w[2], b0 = w[3], b1 = w[4], b2 = w[5], c0 = w[6], c1 = w[7], c2 = w[8];
	const int64_t d2 = 2 * dil;

#define AXPY9(S)                                                                                   \
	for (int64_t o = lo; o < hi; o++) {                                                        \
		int64_t i = o * (S) + off;                                                         \
		float v = y[o];                                                                    \
		v = ((v + a0 * x0[i]) + a1 * x0[i + dil]) + a2 * x0[i + d2];                       \
		v = ((v + b0 * x1[i]) + b1 * x1[i + dil]) + b2 * x1[i + d2];                       \
		y[o] = ((v + c0 * x2[i]) + c1 * x2[i + dil]) + c2 * x2[i + d2];                    \
	}
	/* constant strides, so that the loads vectorize */
	if (s == 1 && dil == 1) {
		AXPY9(1)
	} else if (s == 2) {
		AXPY9(2)
	} else {
		AXPY9(s)
	}
#undef AXPY9
}

/* A 3x3 geometry (2-D): columns padded with zeros on both sides (struct
 * dw_pad) let every output of a row take its nine taps in one pass. */
static int is_3x3(const struct hp_colgeom *g)
{
	return g->k[0] == 1 && g->k[1] == 3 && g->k[2] == 3;
}

/* Image rows of one input plane with zero columns around them, so that a
 * row's outputs at either end take their taps in the same pass as the
 * rest (taps in the padding add w * 0, which leaves every sum as it was
 * but the sign of a zero). */
struct dw_pad {
	float *buf;            /* `rows` rows of width `width`, or NULL */
	int64_t width, left;   /* image column 0 at `left` */
	int64_t rows, top;     /* image row 0 at `top`; zero rows around */
};

static void pad_plane(const struct hp_colgeom *g, const float *x, struct dw_pad *p)
{
	memset(p->buf, 0, (size_t)(p->top * p->width) * sizeof *p->buf);
	for (int64_t h = 0; h < g->img[1]; h++) {
		float *row = p->buf + (p->top + h) * p->width;
		memset(row, 0, (size_t)p->left * sizeof *row);
		memcpy(row + p->left, x + h * g->img[2], (size_t)g->img[2] * sizeof *row);
		memset(row + p->left + g->img[2], 0, (size_t)(p->width - p->left - g->img[2]) * sizeof *row);
	}
	memset(p->buf + (p->top + g->img[1]) * p->width, 0,
	       (size_t)((p->rows - p->top - g->img[1]) * p->width) * sizeof *p->buf);
}

/* Output row (0, oh) of a 3x3 window: every output by axpy9_row over the
 * padded rows; without them, when its three image rows are all inside,
 * the interior so and the ends tap by tap in the same (kh, kw) order.
 * 0 when the row does not qualify. */
static int fwd_row9(const struct hp_colgeom *g, const float *x, const struct dw_pad *pd, int64_t oh, const float *w,
		    float *yr)
{
	int64_t ow = g->grid[2], s = g->stride[2], p = g->pad[2], dl = g->dil[2], lo, hi, l2, h2;
	const float *r[3];

	if (!is_3x3(g))
		return 0;
	if (pd->buf) {
		int64_t h = oh * g->stride[1] - g->pad[1] + pd->top, dh = g->dil[1] * pd->width;
		const float *r0 = pd->buf + h * pd->width;
		axpy9_row(yr, r0, r0 + dh, r0 + 2 * dh, w, 0, ow, s, pd->left - p, dl);
		return 1;
	}
	for (int kh = 0; kh < 3; kh++)
		if (!(r[kh] = img_row(g, x, 0, oh, 0, kh)))
			return 0;
	tap_range(g->img[2], ow, s, p, 0, &lo, &hi);
	tap_range(g->img[2], ow, s, p, 2 * dl, &l2, &h2);
	lo = l2 > lo ? l2 : lo;
	hi = h2 < hi ? h2 : hi;
	if (lo >= hi)
		return 0;
	for (int64_t o = 0; o < ow; o++) {
		if (o == lo)
			o = hi;
		for (int64_t t = 0; t < 9 && o < ow; t++) {
			int64_t i = o * s - p + t % 3 * dl;
			if (i >= 0 && i < g->img[2])
				yr[o] += w[t] * r[t / 3][i];
		}
	}
	axpy9_row(yr, r[0], r[1], r[2], w, lo, hi, s, -p, dl);
	return 1;
}

/* One output plane: y = bias + taps of x (one input channel) under w. */
static void fwd_plane(const struct hp_colgeom *g, const float *x, const struct dw_pad *pd, const float *w, float bias,
		      float *y)
{
	int64_t ow = g->grid[2];

	for (int64_t od = 0; od < g->grid[0]; od++)
		for (int64_t oh = 0; oh < g->grid[1]; oh++) {
			float *yr = y + (od * g->grid[1] + oh) * ow;
			for (int64_t o = 0; o < ow; o++)
				yr[o] = bias;
			if (fwd_row9(g, x, pd, oh, w, yr))
				continue;
			for (int64_t kd = 0; kd < g->k[0]; kd++)
				for (int64_t kh = 0; kh < g->k[1]; kh++) {
					const float *xr = img_row(g, x, od, oh, kd, kh);
					if (xr)
						fwd_taps(g, xr, w + (kd * g->k[1] + kh) * g->k[2], yr);
				}
		}
}

struct dw_run {
	const struct hp_dw *d;
	const float *a, *b, *bias, *acc;
	float *out, *ws;
	float *bufs;      /* forward: fwd_floats() per thread, or NULL (fwd_range allocates) */
};

/* The padded rows' layout for a 3x3 geometry: room on the left for the
 * begin pad, on the right for the last output's taps. */
static void pad_geom(const struct hp_colgeom *g, struct dw_pad *p)
{
	int64_t need = (g->grid[2] - 1) * g->stride[2] + 2 * g->dil[2] + 1;
	int64_t need_rows = (g->grid[1] - 1) * g->stride[1] + 2 * g->dil[1] + 1;

	p->buf = NULL;
	p->left = g->pad[2] > 0 ? g->pad[2] : 0;
	p->width = p->left + g->img[2];
	p->width = need > p->width ? need : p->width;
	p->top = g->pad[1] > 0 ? g->pad[1] : 0;
	p->rows = p->top + g->img[1];
	p->rows = need_rows > p->rows ? need_rows : p->rows;
}

/* Whether the forward pads planes (fwd_plane's 3x3 rows): stride 1 only:
 * at stride 2 the copy of a plane four times the output's size cost more
 * than the ends of rows gain (dw3x3-s2 fwd 7 -> 3.5 GFLOP/s with rows
 * split into even and odd columns too); without the buffer the ends go
 * tap by tap (the same sums, but for the sign of a zero). */
static int fwd_pads(const struct hp_colgeom *g)
{
	return is_3x3(g) && g->grid[0] == 1 && g->stride[1] == 1 && g->stride[2] == 1 && !hp_dw3_eligible(g);
}

/* Floats of a thread's forward buffer: conv_dw3.c's scratch or the padded
 * plane (0: none). */
static size_t fwd_floats(const struct hp_dw *d)
{
	struct dw_pad pd;

	if (hp_dw3_eligible(&d->g))
		return d->scratch ? 0 : hp_dw3_scratch(&d->g) / sizeof(float);
	pad_geom(&d->g, &pd);
	return fwd_pads(&d->g) ? (size_t)(pd.rows * pd.width) : 0;
}

static void fwd_range(void *arg, int64_t b, int64_t e, int tid)
{
	const struct dw_run *r = arg;
	const struct hp_dw *d = r->d;
	int64_t cout = d->cin * d->mult, last = -1;
	int dw3 = hp_dw3_eligible(&d->g);
	size_t own = r->bufs ? 0 : fwd_floats(d);
	float *buf = r->bufs ? r->bufs + (size_t)tid * fwd_floats(d) : own ? malloc(own * sizeof(float)) : NULL;
	float *scratch = NULL;
	struct dw_pad pd;

	pad_geom(&d->g, &pd);
	pd.buf = fwd_pads(&d->g) ? buf : NULL;
	if (dw3 && (scratch = d->scratch ? d->scratch : buf))
		hp_dw3_init(&d->g, scratch);
	for (int64_t i = b; i < e; i++) { /* i = (item, output channel) */
		int64_t n = i / cout, m = i % cout, c = m / d->mult;
		const float *x = r->a + (n * d->cin + c) * (d->xstride ? d->xstride : d->g.img_vol);
		float bias = r->bias ? r->bias[m] : 0.0f;
		if (pd.buf && n * d->cin + c != last) /* multipliers share their input plane */
			pad_plane(&d->g, x, &pd);
		last = n * d->cin + c;
		if (scratch)
			hp_dw3_plane(&d->g, x, r->b + m * d->g.kvol, bias, r->out + i * d->g.grid_vol, scratch,
				     d->xclip);
		else
			fwd_plane(&d->g, x, &pd, r->b + m * d->g.kvol, bias, r->out + i * d->g.grid_vol);
		if (d->epi) /* the fused epilogue while the plane is in cache */
			hp_epi_span(d->epi, r->out, d->addend, i * d->g.grid_vol, (i + 1) * d->g.grid_vol);
	}
	if (own)
		free(buf);
}

size_t hp_dw_scratch(const struct hp_colgeom *g)
{
	size_t a = hp_dw3_scratch(g) / sizeof(float), b = hp_dwc_scratch(g);

	return a > b ? a : b;
}

void hp_dw_planes(const struct hp_dw *d, const float *x, const float *w, const float *b, float *y, int64_t i0,
		  int64_t i1)
{
	struct dw_run r = { .d = d, .a = x, .b = w, .bias = b, .out = y };

	fwd_range(&r, i0, i1, 0);
}

/* Planes per stolen unit: about this many units a thread, so that a
 * thread done early takes a late one's planes in small pieces. */
#define DW_UNITS_PER_THREAD 8

void hp_dw_forward(const struct hp_dw *d, const float *x, const float *w, const float *b, float *y,
		   struct hp_pool *pool)
{
	struct dw_run r = { .d = d, .a = x, .b = w, .bias = b, .out = y };
	int saved, threads;
	int64_t planes = d->batch * d->cin * d->mult, su;

	if (d->scratch) /* one thread's scratch: the caller alone */
		pool = NULL;
	/* 3x3 at stride 1, rows of 7 to 22: lanes along the flattened plane, X in place (conv_dwf.c) */
	if (!d->scratch && !d->xclip && hp_dwf_wanted(&d->g) && hp_dwf_forward(d, x, w, b, y, pool) == 0)
		return;
	if (hp_dws_wanted(&d->g)) { /* stride 2, narrow planes: lanes along positions (conv_dws.c) */
		hp_dws_forward(d, x, w, b, y, pool);
		return;
	}
	if (d->g.img[0] == 1 && hp_dwc_wanted(&d->g, d->xclip != NULL)) { /* narrow planes: channel blocks */
		hp_dwc_forward(d, x, w, b, y, pool);
		return;
	}
	/* 5x5, 7x7 and dilated 3x3 (2-D, stride 1 or 2): conv_dwk.c */
	if (!d->scratch && !d->xclip && hp_dwk_eligible(&d->g) && hp_dwk_forward(d, x, w, b, y, pool) == 0)
		return;
	threads = hp_conv_threads_enter(pool, &saved);
	su = planes / ((int64_t)threads * DW_UNITS_PER_THREAD);
	/* every thread's buffer once per call: a thread may run many units */
	if (fwd_floats(d) > 0 && threads > 1)
		r.bufs = malloc((size_t)threads * fwd_floats(d) * sizeof(float));
	if (threads > 1 && (r.bufs || fwd_floats(d) == 0))
		hp_conv_steal(pool, threads, planes, su < 1 ? 1 : su, fwd_range, &r);
	else /* one thread (or no memory for the buffers): fwd_range's own */
		fwd_range(&r, 0, planes, 0);
	free(r.bufs);
	hp_conv_threads_leave(saved);
}

/* dX plane of input channel c of item n: the taps of its mult output planes. */
static void data_plane(const struct hp_dw *d, const float *dy, const float *w, float *dx)
{
	const struct hp_colgeom *g = &d->g;
	int64_t ow = g->grid[2];

	memset(dx, 0, (size_t)g->img_vol * sizeof *dx);
	for (int64_t j = 0; j < d->mult; j++, dy += g->grid_vol, w += g->kvol)
		for (int64_t od = 0; od < g->grid[0]; od++)
			for (int64_t oh = 0; oh < g->grid[1]; oh++) {
				const float *dyr = dy + (od * g->grid[1] + oh) * ow;
				for (int64_t kd = 0; kd < g->k[0]; kd++)
					for (int64_t kh = 0; kh < g->k[1]; kh++) {
						float *dxr = (float *)img_row(g, dx, od, oh, kd, kh);
						if (!dxr)
							continue;
						for (int64_t kw = 0; kw < g->k[2]; kw++) {
							int64_t t = kw * g->dil[2], lo, hi;
							tap_range(g->img[2], ow, g->stride[2], g->pad[2], t, &lo, &hi);
							scatter_row(dxr, dyr, w[(kd * g->k[1] + kh) * g->k[2] + kw], lo,
								    hi, g->stride[2], t - g->pad[2]);
						}
					}
			}
}

/* Stride-2 dX planes by conv_dw3.c's rows (multiplier 1). */
static void data3_range(void *arg, int64_t b, int64_t e, int tid)
{
	const struct dw_run *r = arg;
	const struct hp_dw *d = r->d;

	(void)tid;
	for (int64_t i = b; i < e; i++)
		hp_dw3_data_plane(&d->g, r->a + i * d->g.grid_vol, r->b + i % d->cin * 9, r->out + i * d->g.img_vol);
}

/* Whether conv_dw3.c's rows take a stride-2 dX rather than conv_dwc.c's
 * channel blocks (the same chains): dX rows of a vector or more (112x112:
 * 35 against 15 GFLOP/s per CPU-second, 14x14: 15 against 10). */
static int data_rows(const struct hp_dw *d)
{
	return d->mult == 1 && hp_dw3_data_eligible(&d->g) && d->g.img[2] >= 8 && !hp_dwc_data_flat(d);
}

static void data_range(void *arg, int64_t b, int64_t e, int tid)
{
	const struct dw_run *r = arg;
	const struct hp_dw *d = r->d;

	(void)tid;
	for (int64_t i = b; i < e; i++) { /* i = (item, input channel) */
		int64_t c = i % d->cin;
		data_plane(d, r->a + i * d->mult * d->g.grid_vol, r->b + c * d->mult * d->g.kvol,
			   r->out + i * d->g.img_vol);
	}
}

/* f: the stride-1 dX of d as a forward of dY with the kernel mirrored
 * (images and grids swapped, pads (k - 1) * dil - pad); the caller checks
 * that a path takes it. */
void hp_dw_flip(const struct hp_dw *d, struct hp_dw *f)
{
	const struct hp_colgeom *g = &d->g;

	memset(f, 0, sizeof *f);
	f->batch = d->batch;
	f->cin = d->cin;
	f->mult = 1;
	f->g = *g;
	for (int i = 0; i < 3; i++) {
		f->g.img[i] = g->grid[i];
		f->g.grid[i] = g->img[i];
		f->g.pad[i] = (g->k[i] - 1) * g->dil[i] - g->pad[i];
	}
	hp_colgeom_finish(&f->g);
}

/* A stride-1 dX as a forward (multiplier 1, 2-D 3x3, undilated, column
 * pads of 0 to 2): dY as the image, dX as the grid, pads 2 - p, W
 * mirrored, no bias.  Its planes are conv_dw3.c's (or conv_dwc.c's, the
 * same chains): each dX element 0 + its nine taps in mirrored order, those
 * outside dY as w * 0, so its bits depend on its own dY window alone and
 * bands of rows give the whole's.  9x the scatter loops' speed on
 * MobileNetV2's planes.  0 where it does not apply. */
static int data_flip(const struct hp_dw *d, struct hp_dw *f)
{
	const struct hp_colgeom *g = &d->g;

	if (d->mult != 1 || g->img[0] != 1 || g->k[0] != 1 || g->k[1] != 3 || g->k[2] != 3 || g->stride[1] != 1 ||
	    g->stride[2] != 1 || g->dil[1] != 1 || g->dil[2] != 1 || g->pad[2] < 0 || g->pad[2] > 2)
		return 0;
	hp_dw_flip(d, f);
	return hp_dw3_eligible(&f->g);
}

size_t hp_dw_data_ws(const struct hp_dw *d)
{
	struct hp_dw f;

	if (data_flip(d, &f))
		return (size_t)(d->cin * 9) * sizeof(float);
	if (hp_dwk_data_flip(d, &f)) /* 5x5, 7x7, dilated 3x3: mirrored weights */
		return (size_t)(d->cin * d->g.kvol) * sizeof(float);
	if (hp_dwc_data_eligible(d))
		return (size_t)hp_conv_ws_threads() * hp_dwc_data_scratch(&d->g) * sizeof(float);
	if (d->mult == 1) /* 5x5, 7x7 at stride 2: conv_dwk_grad.c's (whether it runs or not) */
		return (size_t)hp_conv_ws_threads() * hp_dkd_scratch(&d->g) * sizeof(float);
	return 0;
}

void hp_dw_data(const struct hp_dw *d, const float *dy, const float *w, float *dx, float *ws, struct hp_pool *pool)
{
	struct dw_run r = { .d = d, .a = dy, .b = w, .out = dx };
	struct hp_dw f;
	int saved, threads;

	if (ws && data_flip(d, &f)) {
		for (int64_t c = 0; c < d->cin; c++)
			for (int k = 0; k < 9; k++)
				ws[c * 9 + k] = w[c * 9 + 8 - k];
		hp_dw_forward(&f, dy, ws, NULL, dx, pool);
		return;
	}
	if (ws && hp_dwk_data_flip(d, &f)) { /* stride 1, 5x5, 7x7, dilated 3x3: conv_dwk.c's forward */
		for (int64_t c = 0, kk = d->g.kvol; c < d->cin; c++)
			for (int64_t k = 0; k < kk; k++)
				ws[c * kk + k] = w[c * kk + kk - 1 - k];
		hp_dw_forward(&f, dy, ws, NULL, dx, pool);
		return;
	}
	if (hp_dws_data_wanted(d)) { /* stride 2, narrow planes: lanes along positions (conv_dws.c) */
		hp_dws_data(d, dy, w, dx, pool);
		return;
	}
	threads = hp_conv_threads_enter(pool, &saved);
	if (ws && hp_dwc_data_eligible(d) && data_rows(d)) {
		hp_conv_parallel(pool, threads, d->batch * d->cin, data3_range, &r);
		hp_conv_threads_leave(saved);
		return;
	}
	if (ws && hp_dkd_eligible(d)) { /* 5x5, 7x7 at stride 2: conv_dwk_grad.c */
		hp_dkd_data(d, dy, w, dx, ws, threads < hp_conv_ws_threads() ? threads : hp_conv_ws_threads(), pool);
		hp_conv_threads_leave(saved);
		return;
	}
	if (ws && hp_dwc_data_eligible(d)) { /* stride 2: conv_dwc.c */
		hp_dwc_data(d, dy, w, dx, ws, threads < hp_conv_ws_threads() ? threads : hp_conv_ws_threads(), pool);
		hp_conv_threads_leave(saved);
		return;
	}

	hp_conv_parallel(pool, threads, d->batch * d->cin, data_range, &r);
	hp_conv_threads_leave(saved);
}

/* Floats of a worker's dW buffer: the per-column partials, or conv_dwc.c's
 * where its channel blocks run (2-D 3x3, stride 1 or 2, undilated, AVX2
 * and FMA). */
static size_t filter_floats(const struct hp_dw *d)
{
	size_t a = (size_t)(d->g.kvol * d->g.grid[2]);
	size_t b = hp_dwc_filter_eligible(&d->g) ? hp_dwc_filter_scratch(&d->g) : 0;
	size_t c = hp_dkg_scratch(&d->g); /* 5x5, 7x7: conv_dwk_grad.c's (whether it runs or not) */
	size_t e = hp_dwp_scratch(&d->g); /* wide rows: conv_dwp_grad.c's (the same) */

	a = a > c ? a : c;
	a = a > e ? a : e;
	return a > b ? a : b;
}

size_t hp_dw_filter_ws(const struct hp_dw *d)
{
	return (size_t)hp_conv_ws_threads() * filter_floats(d) * sizeof(float);
}

/* acc[kw][o] += dyr[o] * (image row xr at tap kw) for the taps of one row:
 * three at once where all are inside (each acc element gets the same
 * additions in the same order either way). */
static void filter_taps(const struct hp_colgeom *g, const float *dyr, const float *xr, float *acc)
{
	int64_t ow = g->grid[2], s = g->stride[2], p = g->pad[2], dl = g->dil[2], lo, hi, l2, h2;

	if (g->k[2] == 3) {
		tap_range(g->img[2], ow, s, p, 0, &lo, &hi);
		tap_range(g->img[2], ow, s, p, 2 * dl, &l2, &h2);
		lo = l2 > lo ? l2 : lo;
		hi = h2 < hi ? h2 : hi;
		if (lo < hi) {
			for (int64_t o = 0; o < ow; o++) {
				if (o == lo)
					o = hi;
				for (int64_t kw = 0; kw < 3 && o < ow; kw++) {
					int64_t i = o * s - p + kw * dl;
					if (i >= 0 && i < g->img[2])
						acc[kw * ow + o] += dyr[o] * xr[i];
				}
			}
			dot3_row(acc, acc + ow, acc + 2 * ow, dyr, xr, lo, hi, s, -p, dl);
			return;
		}
	}
	for (int64_t kw = 0; kw < g->k[2]; kw++) {
		int64_t t = kw * dl;
		tap_range(g->img[2], ow, s, p, t, &lo, &hi);
		dot_row(acc + kw * ow, dyr, xr, lo, hi, s, t - p);
	}
}

/* acc[k][ow] += dY rows x X rows of output channel m, batch item nb, rows
 * [q0, q1) of the grid (a row: one od, oh). */
static void filter_acc(const struct hp_dw *d, const float *dy, const float *x, int64_t m, int64_t nb, int64_t q0,
		       int64_t q1, float *acc)
{
	const struct hp_colgeom *g = &d->g;
	int64_t ow = g->grid[2], c = m / d->mult;
	const float *dyp = dy + (nb * d->cin * d->mult + m) * g->grid_vol, *xp = x + (nb * d->cin + c) * g->img_vol;

	for (int64_t q = q0; q < q1; q++) {
		int64_t od = q / g->grid[1], oh = q % g->grid[1];
		for (int64_t kd = 0; kd < g->k[0]; kd++)
			for (int64_t kh = 0; kh < g->k[1]; kh++) {
				const float *xr = img_row(g, xp, od, oh, kd, kh);
				if (xr)
					filter_taps(g, dyp + (od * g->grid[1] + oh) * ow, xr,
						    acc + (kd * g->k[1] + kh) * g->k[2] * ow);
			}
	}
}

/* Channel m: out = acc_in + each unit's sum, units from the last batch
 * item's last to the first's first. */
/* The sum of a unit's partials a[0..n) for one tap: 8 lanes (a[o] into
 * lane o % 8, in order) and one fixed tree, so the order depends on n
 * alone.  One running sum was a chain of dependent adds per tap and
 * position: with a batch of one, units are single rows, and this took
 * more than the taps (a seventh of MobileNetV2's training step). */
DW_CLONES static float lane_sum(const float *a, int64_t n)
{
	float l[8] = { 0 };
	int64_t o = 0;

	for (; o + 8 <= n; o += 8)
		for (int i = 0; i < 8; i++)
			l[i] += a[o + i];
	for (int i = 0; o < n; o++, i++)
		l[i] += a[o];
	return ((l[0] + l[1]) + (l[2] + l[3])) + ((l[4] + l[5]) + (l[6] + l[7]));
}

static void filter_range(void *arg, int64_t b, int64_t e, int tid)
{
	const struct dw_run *r = arg;
	const struct hp_dw *d = r->d;
	int64_t ow = d->g.grid[2], kvol = d->g.kvol, rows = d->g.grid_vol / ow;
	int64_t urows = d->unit > 0 ? d->unit / ow : rows;
	float *acc = r->ws + (size_t)tid * filter_floats(d);

	urows = urows > 0 ? urows : rows;
	for (int64_t m = b; m < e; m++) {
		float *out = r->out + m * kvol;
		for (int64_t k = 0; k < kvol; k++)
			out[k] = r->acc ? r->acc[m * kvol + k] : 0.0f;
		for (int64_t nb = d->batch - 1; nb >= 0; nb--)
			for (int64_t q0 = (rows - 1) / urows * urows; q0 >= 0; q0 -= urows) {
				memset(acc, 0, (size_t)(kvol * ow) * sizeof *acc);
				filter_acc(d, r->a, r->b, m, nb, q0, q0 + urows < rows ? q0 + urows : rows, acc);
				for (int64_t k = 0; k < kvol; k++)
					out[k] += lane_sum(acc + k * ow, ow);
			}
	}
}

void hp_dw_filter(const struct hp_dw *d, const float *dy, const float *x, const float *acc, float *dw, float *ws,
		  struct hp_pool *pool)
{
	struct dw_run r = { .d = d, .a = dy, .b = x, .acc = acc, .out = dw, .ws = ws };
	int saved, threads = hp_conv_threads_enter(pool, &saved);

	if (threads > hp_conv_ws_threads())
		threads = hp_conv_ws_threads();
	if (hp_dwp_eligible(d)) /* wide rows: conv_dwp_grad.c, sixteen positions in the lanes */
		hp_dwp_filter(d, dy, x, acc, dw, ws, threads, pool);
	else if (hp_dwc_filter_eligible(&d->g)) /* conv_dwc.c: eight channels in the lanes */
		hp_dwc_filter(d, dy, x, acc, dw, ws, threads, pool);
	else if (hp_dkg_eligible(&d->g)) /* 5x5, 7x7: conv_dwk_grad.c, sixteen channels in the lanes */
		hp_dkg_filter(d, dy, x, acc, dw, ws, threads, pool);
	else
		hp_conv_parallel(pool, threads, d->cin * d->mult, filter_range, &r);
	hp_conv_threads_leave(saved);
}
