/* 2-D convolution with few input channels per group (conv_grp.c): the
 * ResNeXt and RegNet layers of 2-32 channels per group, which im2col and
 * the kxk path ran as thin products per (item, group) (M = 4 output
 * channels, K = 36 on ResNeXt's first stage: 9-18 GF/s a thread in
 * bench/bench_conv_libs.c, class grouped), and the stems of 1-4 input
 * channels, where they pack or gather K = 3 x kvol rows per tile.
 *
 * Here a unit is a block of output rows of one (item, group).  Its input
 * rows are staged once per unit, zero-padded, and at strides split into
 * row and column phases, so that every tap (c, kh, kw) of a run of output
 * positions is one contiguous load, and the unit's rows are one run of
 * columns (a row's few columns past the output's width computed and
 * dropped), so that the tiles stay whole on narrow planes.  A micro-tile
 * is up to 4 output channels x 24 columns in 12 registers; each of its
 * outputs is one chain of fused multiply-adds over k = (c, kh, kw) in
 * order from its bias, padding taps included as zeros.  That chain depends on the geometry alone: not on the
 * row block, the column tile, the thread that runs a unit, or a band of
 * the node's output rows (a band sees real rows where the whole sees them,
 * and padding where the whole sees padding), so bands and thread counts
 * give the bits of the whole node.
 *
 * Units are independent and their bits do not depend on who runs them, so
 * the workers steal (hp_conv_steal): a late worker's rows run on the
 * caller instead of waiting for its wake-up. */
#include <stdint.h>

#include "kernels/conv_grp_impl.h"
#include "kernels/conv_impl.h"
#include "kernels/fused_impl.h"
#include "kernels/simd_tr16.h"


#define GR_MR 4              /* output channels per micro-tile */
#define GR_NV 3              /* 8-column vectors per micro-tile */
/* The auto choice up to this many channels per group, in and out: in
 * bench/bench_conv_libs.c the path it replaced (kxk from 8 channels,
 * im2col below) ran at 17, 21, 26 and 40 GF/s a thread on groups of 4, 8,
 * 16 and 32 channels where this one runs at 58, 72, 66 and 58; wider
 * groups were not measured. */
#define GR_AUTO_MAX_CH 32
/* Convolutions of one group with at most this many input channels (the
 * stems of RGB and grayscale images) take the path too: there the other
 * paths pack or gather K = 3-4 x kvol rows for every tile; in
 * bench/bench_conv_libs.c ResNet's 7x7 stride-2 stem ran at 64 GF/s a
 * thread there and at 82 here, MobileNetV2's 3x3 stride-2 stem at 53 and
 * 56, the U-Net's 3-channel 3x3 at 55 and 67, LeNet's first conv (1
 * channel, 5x5) at 26 and 44. */
#define GR_STEM_MAX_CIN 4
#define GR_MAX_STRIDE 8       /* column strides the staging takes */
#define GR_STAGE_FLOATS 8192 /* staged input per unit, about half of L1 and L2's share */
#define GR_DENSE_STAGE_FLOATS 65536 /* the same, dense Convs on the co-lane tiles (hp_grp_dense) */
#define GR_OUT_FLOATS 1024   /* output columns per unit (a micro-tile row's run in o) */

/* Tests and benchmarks: 1, gr_run's AVX2 tiles only. */
static int gr_avx2;

void hp_grp_set_avx2(int on)
{
	gr_avx2 = on;
}

/* Tests: -1, ConvGradData's 7-column planes on the column tiles too
 * (gr_colane's tiles off; the same bits). */
static int gr_cl_mode;

void hp_grp_set_colane(int mode)
{
	gr_cl_mode = mode;
}

static int grp_mode; /* 0 auto, 1 whenever eligible, -1 never */

void hp_conv_set_grp(int mode)
{
	grp_mode = mode;
}

int hp_conv_grp_mode(void)
{
	return grp_mode;
}

/* The parts of q that follow from rb output rows per unit. */
static void gr_geom_rows(struct gr_geom *q, int64_t cin_g, int64_t rb)
{
	int64_t tw = 8 * GR_NV;

	q->rb = rb;
	q->nrp = q->rb + (q->kh - 1) * q->dh / q->sh;
	q->plane = q->nrp * q->phw;
	q->nrb = (q->oh + q->rb - 1) / q->rb;
	q->stage = cin_g * q->sh * q->sw * q->plane + tw + 16;
	q->lo = (q->rb * q->phw + tw - 1) / tw * tw;
}

static void gr_geom(const struct hp_conv *cv, struct gr_geom *q)
{
	const struct hp_colgeom *c = &cv->g;
	int64_t per_row;

	q->ih = c->img[1], q->iw = c->img[2], q->oh = c->grid[1], q->ow = c->grid[2];
	q->kh = c->k[1], q->kw = c->k[2], q->sh = c->stride[1], q->sw = c->stride[2];
	q->dh = c->dil[1], q->dw = c->dil[2], q->pt = c->pad[1], q->pl = c->pad[2];
	/* a staged row holds what one output row reads of one phase: its
	 * columns and the taps' reach past them */
	q->phw = q->ow + (q->kw - 1) * q->dw / q->sw;
	q->kdim = cv->cin_g * q->kh * q->kw;
	per_row = cv->cin_g * q->sh * q->sw * q->phw;
	q->rb = ((cv->kxk && cv->group == 1 ? GR_DENSE_STAGE_FLOATS : GR_STAGE_FLOATS) / per_row) -
		(q->kh - 1) * q->dh / q->sh;
	if (q->rb > GR_OUT_FLOATS / q->phw) /* the outputs of a micro-tile row, too */
		q->rb = GR_OUT_FLOATS / q->phw;
	gr_geom_rows(q, cv->cin_g, q->rb < 1 ? 1 : q->rb > q->oh ? q->oh : q->rb);
}

int hp_grp_eligible(const struct hp_conv *cv)
{
	struct gr_geom q;

	if (cv->transpose || cv->dw || cv->nd != 2 || (cv->group < 2 && cv->cin_g > GR_STEM_MAX_CIN) ||
	    cv->g.img[0] != 1 || cv->g.grid[0] != 1 || cv->g.k[0] != 1 || cv->g.stride[2] > GR_MAX_STRIDE)
		return 0;
	/* Conv nodes, and ConvGradData's stride-1 forward of dY over the
	 * weights transposed and mirrored (conv_grad.c) of two groups or more */
	if (!cv->node && !(cv->wflip && cv->group > 1 && cv->g.stride[1] == 1 && cv->g.stride[2] == 1))
		return 0;
	if (cv->node && cv->wflip)
		return 0;
	gr_geom(cv, &q);
	return q.stage + q.kdim < INT32_MAX / 2; /* tap offsets are int32 */
}

int hp_grp_wanted(const struct hp_conv *cv)
{
	if (!hp_grp_eligible(cv) || !hp_dot_available())
		return 0;
	if (cv->path >= 0)
		return cv->path == HP_CONV_PATH_GRP;
	if (grp_mode)
		return grp_mode > 0;
	/* a test or benchmark that forces another path gets it */
	if (hp_conv_dot_mode() > 0 || hp_conv_shift_mode() > 0 || (hp_conv_kxk_mode() > 0 && hp_kxk_eligible(cv)))
		return 0;
	if (cv->group == 1) /* a stem */
		return 1;
	return cv->cin_g <= GR_AUTO_MAX_CH && cv->cout_g <= GR_AUTO_MAX_CH;
}

/* The co-lane forward tiles (gr_cf_block) on planes of at most this many
 * output positions, the auto choice. */
#define GR_CF_MAX_PLANE 16
/* The same for groups of 8 output channels (gr_c8_block): GF/s a thread,
 * bench/bench_conv_libs.c's --grp-packed forward, 440 channels in groups
 * of 8 (RegNetY-400MF's last stage), co-lane / column tiles: 2x2 31 / 13,
 * 3x3 45 / 27, 4x4 47 / 33-45, 5x5 41-55 / 42; 6x6 49 / 56. */
#define GR_C8_MAX_PLANE 25
/* The same for dense Convs on the kxk path (hp_grp_dense), whose
 * staging of the whole plane must also fit GR_DENSE_STAGE_FLOATS: 1
 * thread, perf stat task-clock, base (planes of 16 at most) -> this,
 * GF/s: SqueezeNet 1.1's 3x3s at 96 pixels, 16 -> 64 at 23x23 120 -> 177,
 * 32 -> 128 at 11x11 123 -> 196, 64 -> 256 at 5x5 79 -> 181; GoogLeNet's
 * 96 -> 128 at 12x12 161 -> 220, 144 -> 288 at 6x6 135 -> 216;
 * DenseNet's 128 -> 32 at 12x12 85 -> 182; 64 -> 64 at 28x28 108 -> 136;
 * 256 -> 256 at 14x14 178 -> 235 (the kxk path gathers patches per
 * column block and runs AVX2 tiles on panels of fewer than 16 columns,
 * most of these planes' panels). */
#define GR_CF_DENSE_MAX_PLANE 1024
/* Dense Convs whose plane's staging does not fit take blocks of rows of
 * at least this many positions (DenseNet's 128 channels at 24x24 in
 * blocks of 21 rows: 125 -> 209 GF/s). */
#define GR_DENSE_MIN_BLOCK 64
/* With several threads, dense nodes of fewer units than this per thread
 * take blocks of fewer rows too, of at least GR_DENSE_MIN_POS positions
 * (DenseNet's 32 channels at 6x6 and 12x12 were one unit: one thread). */
#define GR_DENSE_UNITS 4
#define GR_DENSE_MIN_POS 16

static int gr_cf_mode; /* 0 auto, 1 whenever eligible, -1 never */
void hp_grp_set_cofwd(int mode)
{
	gr_cf_mode = mode;
}

#ifdef GR_X86
static int gr_512(void);
#endif

static int gr_cofwd(const struct hp_conv *cv, const struct gr_geom *q)
{
#ifdef GR_X86
	if (gr_cf_mode < 0 || !gr_512() || cv->group < 2)
		return 0;
	if (cv->cout_g == 8) /* gr_c8_block's tiles, ConvGradData's too (W flipped in place) */
		return gr_cf_mode > 0 || q->oh * q->ow <= GR_C8_MAX_PLANE;
	/* ConvGradData's from W flipped straight into W^T (gr_cf_flip) */
	return cv->cout_g % 16 == 0 && (gr_cf_mode > 0 || q->oh * q->ow <= GR_CF_MAX_PLANE);
#else
	(void)cv, (void)q;
	return 0;
#endif
}

static int gr_dflip_lazy(const struct hp_conv *cv);

/* Per worker: the staged rows, the tap offsets, the column tiles' outputs
 * and, for the co-lane forward tiles, a group's W^T (a unit's where dense;
 * hp_grp_dense_flip's W^T whole is read in place unless flipped lazily). */
static size_t gr_per_thread(const struct hp_conv *cv, const struct gr_geom *q)
{
	size_t panel = gr_cofwd(cv, q)				  ? (size_t)(q->kdim * cv->cout_g)
		       : hp_grp_dense(cv) || gr_dflip_lazy(cv) ? (size_t)(q->kdim * 32)
								  : 0;

	return (size_t)(q->stage + q->kdim + 8 + GR_MR * q->lo) + panel;
}

/* ConvGradData's weights in a Conv's layout, before the workers' parts. */
static size_t gr_flip_floats(const struct hp_conv *cv)
{
	return cv->wflip && !gr_dflip_lazy(cv) ? (size_t)(cv->cout * cv->cin_g * cv->g.kvol + 15) / 16 * 16 : 0;
}

size_t hp_grp_workspace(const struct hp_conv *cv, int threads)
{
	struct gr_geom q;

	gr_geom(cv, &q);
	return (gr_flip_floats(cv) + gr_per_thread(cv, &q) * (size_t)threads) * sizeof(float);
}

#ifdef GR_X86

static GR_TARGET __m256i gr_mask(int64_t n)
{
	static const int32_t m[16] = { -1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0 };

	return _mm256_loadu_si256((const __m256i *)(m + 8 - (n < 8 ? n : 8)));
}

/* dst[0 .. n) = src[0 .. n) (src NULL: zeros), inline: the rows are
 * short, and libc's calls cost as much as the copies here.  Into the
 * staging, whose rows are filled in address order and which has slack at
 * its end: the last vector is stored whole (AMD's masked stores take tens
 * of cycles) and the next row's fill overwrites the excess. */
static GR_TARGET void gr_fill(float *dst, const float *src, int64_t n)
{
	int64_t i = 0;

	for (; i + 8 <= n; i += 8)
		_mm256_storeu_ps(dst + i, src ? _mm256_loadu_ps(src + i) : _mm256_setzero_ps());
	if (i < n)
		_mm256_storeu_ps(dst + i, src ? _mm256_maskload_ps(src + i, gr_mask(n - i)) : _mm256_setzero_ps());
}

/* The same into Y, where nothing past dst[n - 1] may be written. */
static GR_TARGET void gr_put(float *dst, const float *src, int64_t n)
{
	int64_t i = 0;

	for (; i + 8 <= n; i += 8)
		_mm256_storeu_ps(dst + i, _mm256_loadu_ps(src + i));
	if (i + 4 <= n) {
		_mm_storeu_ps(dst + i, _mm_loadu_ps(src + i));
		i += 4;
	}
	for (; i < n; i++)
		dst[i] = src[i];
}

/* Phase p of the padded rows: dst[i] = src[i * sw + p - pl] for i in
 * [lo, hi), zero elsewhere; lo and hi without a division per row. */
static void gr_bounds(const struct gr_geom *q, int64_t p, int64_t *lo, int64_t *hi)
{
	int64_t o = p - q->pl, l = o >= 0 ? 0 : (-o + q->sw - 1) / q->sw;
	int64_t h = q->iw - o <= 0 ? 0 : (q->iw - o + q->sw - 1) / q->sw; /* first i with i * sw + o >= iw */

	*hi = h < q->phw ? h : q->phw;
	*lo = l < *hi ? l : *hi;
}

/* dst[i] = src[i * 2] for i in [lo, hi), where src[0 .. n) is readable:
 * pairs of vectors deinterleaved, the ends one by one. */
static GR_TARGET void gr_even(float *dst, const float *src, int64_t lo, int64_t hi, int64_t n)
{
	int64_t i = lo;

	for (; i + 8 <= hi && 2 * i + 16 <= n; i += 8) {
		__m256 a = _mm256_loadu_ps(src + 2 * i), b = _mm256_loadu_ps(src + 2 * i + 8);
		__m256 e = _mm256_shuffle_ps(a, b, _MM_SHUFFLE(2, 0, 2, 0));
		_mm256_storeu_ps(dst + i, _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(e), 0xd8)));
	}
	for (; i < hi; i++)
		dst[i] = src[2 * i];
}

/* gr_stage at stride 1 in AVX-512: the staging zeroed, then each image
 * row's columns copied in, masked loads and stores of 16 floats (no fault
 * on the lanes they skip).  Row by row in zeros, copy and zeros
 * (gr_fill), the staging cost a small plane's unit more than its products
 * (RegNet's groups of 8 at 3x3: 5 floats a row, 40 rows; the staging was
 * 35% of the node's time, its tiles 30%); each row's masked store alone,
 * without the zeroing, ran slower (33 GF/s against 45 at grouped-w8-3). */
static GR_TARGET512 void gr_stage1(const struct gr_geom *q, int64_t cin_g, const float *xc, int64_t oh0, float *st)
{
	int64_t r0 = oh0 - q->pt, ra = r0 < 0 ? -r0 : 0, rb = q->ih - r0 < q->nrp ? q->ih - r0 : q->nrp;
	int64_t lo = q->pl < q->phw ? q->pl : q->phw, hi = q->iw + q->pl < q->phw ? q->iw + q->pl : q->phw;

	for (int64_t i = 0, n = cin_g * q->plane; i < n; i += 16) /* into the slack, as gr_fill */
		_mm512_storeu_ps(st + i, _mm512_setzero_ps());
	for (int64_t c = 0; c < cin_g; c++)
		for (int64_t r = ra; r < rb; r++) {
			const float *src = xc + (c * q->ih + r0 + r) * q->iw - q->pl;
			float *dst = st + c * q->plane + r * q->phw;
			for (int64_t i = lo; i < hi; i += 16) {
				__mmask16 mk = (__mmask16)(hi - i < 16 ? (1u << (hi - i)) - 1 : 0xffff);
				_mm512_mask_storeu_ps(dst + i, mk, _mm512_maskz_loadu_ps(mk, src + i));
			}
		}
}

/* The staging of output rows from oh0 of channel block xc (cin_g planes):
 * for each channel c, row phase rp < sh and column phase cp < sw, nrp rows
 * of phw floats; row r of (rp, cp) holds the padded input row
 * oh0 * sh - pt + r * sh + rp at columns i * sw + cp - pl, zeros outside
 * the image.  Filled in address order (gr_fill's overrun). */
static GR_TARGET void gr_stage(const struct gr_geom *q, int64_t cin_g, const float *xc, int64_t oh0, float *st)
{
	int64_t lo[GR_MAX_STRIDE], hi[GR_MAX_STRIDE], r0 = oh0 * q->sh - q->pt;
	float *dst = st;

	if (q->sh == 1 && q->sw == 1 && gr_512()) {
		gr_stage1(q, cin_g, xc, oh0, st);
		return;
	}
	for (int64_t p = 0; p < q->sw; p++)
		gr_bounds(q, p, &lo[p], &hi[p]);
	for (int64_t c = 0; c < cin_g; c++)
		for (int64_t rp = 0; rp < q->sh; rp++)
			for (int64_t cp = 0; cp < q->sw; cp++)
				for (int64_t r = 0; r < q->nrp; r++, dst += q->phw) {
					int64_t ir = r0 + r * q->sh + rp, o = cp - q->pl;
					const float *src = xc + (c * q->ih + ir) * q->iw;
					if (ir < 0 || ir >= q->ih) {
						gr_fill(dst, NULL, q->phw);
						continue;
					}
					gr_fill(dst, NULL, lo[cp]);
					if (q->sw == 1)
						gr_fill(dst + lo[cp], src + lo[cp] + o, hi[cp] - lo[cp]);
					else if (q->sw == 2) /* from the first column inside the row */
						gr_even(dst + lo[cp], src + 2 * lo[cp] + o, 0, hi[cp] - lo[cp],
							q->iw - 2 * lo[cp] - o);
					else
						for (int64_t i = lo[cp]; i < hi[cp]; i++)
							dst[i] = src[i * q->sw + o];
					gr_fill(dst + hi[cp], NULL, q->phw - hi[cp]);
				}
}
/* Offset of tap k = (c, kh, kw) in the staging, for output row 0 of the unit. */
static void gr_taps(const struct gr_geom *q, int64_t cin_g, int32_t *off)
{
	int64_t k = 0;

	for (int64_t c = 0; c < cin_g; c++)
		for (int64_t a = 0; a < q->kh; a++)
			for (int64_t b = 0; b < q->kw; b++) {
				int64_t row = a * q->dh, col = b * q->dw;
				int64_t plane = (c * q->sh + row % q->sh) * q->sw + col % q->sw;
				off[k++] = (int32_t)(plane * q->plane + row / q->sh * q->phw + col / q->sw);
			}
}
/* Tiles t < ntiles of 4 channels x 24 columns, kept in named registers
 * (an array of accumulators was kept on the stack): acc = bias, then acc
 * += w[m][k] * s[off[k] + 24 t + column] for k in order, stored to
 * o[m * lo + 24 t ...] whole (o and the staging have room for the last
 * tile's overrun, which no one reads). */
static GR_TARGET void gr_run(const float *s, const int32_t *off, int64_t kdim, const float *const *w,
			     const float *bias, int64_t ntiles, float *o, int64_t lo)
{
	const float *w0 = w[0], *w1 = w[1], *w2 = w[2], *w3 = w[3];

	for (int64_t t = 0; t < ntiles; t++, s += 8 * GR_NV, o += 8 * GR_NV) {
		__m256 a00 = _mm256_broadcast_ss(bias), a01 = a00, a02 = a00;
		__m256 a10 = _mm256_broadcast_ss(bias + 1), a11 = a10, a12 = a10;
		__m256 a20 = _mm256_broadcast_ss(bias + 2), a21 = a20, a22 = a20;
		__m256 a30 = _mm256_broadcast_ss(bias + 3), a31 = a30, a32 = a30;
		for (int64_t k = 0; k < kdim; k++) {
			const float *p = s + off[k];
			__m256 x0 = _mm256_loadu_ps(p), x1 = _mm256_loadu_ps(p + 8), x2 = _mm256_loadu_ps(p + 16);
			__m256 v = _mm256_broadcast_ss(w0 + k);
			a00 = _mm256_fmadd_ps(v, x0, a00), a01 = _mm256_fmadd_ps(v, x1, a01);
			a02 = _mm256_fmadd_ps(v, x2, a02);
			v = _mm256_broadcast_ss(w1 + k);
			a10 = _mm256_fmadd_ps(v, x0, a10), a11 = _mm256_fmadd_ps(v, x1, a11);
			a12 = _mm256_fmadd_ps(v, x2, a12);
			v = _mm256_broadcast_ss(w2 + k);
			a20 = _mm256_fmadd_ps(v, x0, a20), a21 = _mm256_fmadd_ps(v, x1, a21);
			a22 = _mm256_fmadd_ps(v, x2, a22);
			v = _mm256_broadcast_ss(w3 + k);
			a30 = _mm256_fmadd_ps(v, x0, a30), a31 = _mm256_fmadd_ps(v, x1, a31);
			a32 = _mm256_fmadd_ps(v, x2, a32);
		}
		_mm256_storeu_ps(o, a00), _mm256_storeu_ps(o + 8, a01), _mm256_storeu_ps(o + 16, a02);
		_mm256_storeu_ps(o + lo, a10), _mm256_storeu_ps(o + lo + 8, a11), _mm256_storeu_ps(o + lo + 16, a12);
		_mm256_storeu_ps(o + 2 * lo, a20), _mm256_storeu_ps(o + 2 * lo + 8, a21);
		_mm256_storeu_ps(o + 2 * lo + 16, a22);
		_mm256_storeu_ps(o + 3 * lo, a30), _mm256_storeu_ps(o + 3 * lo + 8, a31);
		_mm256_storeu_ps(o + 3 * lo + 16, a32);
	}
}

/* gr_run's tiles two at a time in AVX-512 (4 channels x 48 columns, 12
 * zmm accumulators; Zen 5 runs a 512-bit FMA per pipe): every lane the
 * same chain, so the same bits; an odd last tile by gr_run. */
static GR_TARGET512 void gr_run512(const float *s, const int32_t *off, int64_t kdim, const float *const *w,
				   const float *bias, int64_t ntiles, float *o, int64_t lo)
{
	const float *w0 = w[0], *w1 = w[1], *w2 = w[2], *w3 = w[3];
	int64_t t = 0;

	for (; t + 2 <= ntiles; t += 2, s += 16 * GR_NV, o += 16 * GR_NV) {
		__m512 a00 = _mm512_set1_ps(bias[0]), a01 = a00, a02 = a00;
		__m512 a10 = _mm512_set1_ps(bias[1]), a11 = a10, a12 = a10;
		__m512 a20 = _mm512_set1_ps(bias[2]), a21 = a20, a22 = a20;
		__m512 a30 = _mm512_set1_ps(bias[3]), a31 = a30, a32 = a30;
		for (int64_t k = 0; k < kdim; k++) {
			const float *p = s + off[k];
			__m512 x0 = _mm512_loadu_ps(p), x1 = _mm512_loadu_ps(p + 16), x2 = _mm512_loadu_ps(p + 32);
			__m512 v = _mm512_set1_ps(w0[k]);
			a00 = _mm512_fmadd_ps(v, x0, a00), a01 = _mm512_fmadd_ps(v, x1, a01);
			a02 = _mm512_fmadd_ps(v, x2, a02);
			v = _mm512_set1_ps(w1[k]);
			a10 = _mm512_fmadd_ps(v, x0, a10), a11 = _mm512_fmadd_ps(v, x1, a11);
			a12 = _mm512_fmadd_ps(v, x2, a12);
			v = _mm512_set1_ps(w2[k]);
			a20 = _mm512_fmadd_ps(v, x0, a20), a21 = _mm512_fmadd_ps(v, x1, a21);
			a22 = _mm512_fmadd_ps(v, x2, a22);
			v = _mm512_set1_ps(w3[k]);
			a30 = _mm512_fmadd_ps(v, x0, a30), a31 = _mm512_fmadd_ps(v, x1, a31);
			a32 = _mm512_fmadd_ps(v, x2, a32);
		}
		_mm512_storeu_ps(o, a00), _mm512_storeu_ps(o + 16, a01), _mm512_storeu_ps(o + 32, a02);
		_mm512_storeu_ps(o + lo, a10), _mm512_storeu_ps(o + lo + 16, a11), _mm512_storeu_ps(o + lo + 32, a12);
		_mm512_storeu_ps(o + 2 * lo, a20), _mm512_storeu_ps(o + 2 * lo + 16, a21);
		_mm512_storeu_ps(o + 2 * lo + 32, a22);
		_mm512_storeu_ps(o + 3 * lo, a30), _mm512_storeu_ps(o + 3 * lo + 16, a31);
		_mm512_storeu_ps(o + 3 * lo + 32, a32);
	}
	if (t < ntiles)
		gr_run(s, off, kdim, w, bias, ntiles - t, o, lo);
}

static int gr_512(void)
{
	static int cached = -1;

	if (cached < 0)
		cached = __builtin_cpu_supports("avx512f") ? 1 : 0;
	return cached && !gr_avx2;
}

/* ---- co-lane tiles: ConvGradData of 7-column planes ----
 * ResNeXt's last stage (32 channels a group at 7x7) ran its dX on the
 * column tiles at 88-92 GF/s a CPU-second (bench_conv_libs.c grouped-32):
 * a unit's run of 7 rows of 9 staged columns is 61 columns, 72 computed
 * for 49 kept.  Here the lanes are 16 output channels of the group and a
 * tile R rows x 7 columns x NV vectors of channels (28 or 14
 * accumulators); per tap k, NV vectors of the weights ([k][channel], the
 * flipped weights' layout for this path) and one broadcast of the staged
 * input per position into fused multiply-adds.  Each output is the same
 * chain as gr_run's, from its bias over k in order, padding included,
 * so the bits are the column tiles'.  The sums leave through 16 x 16
 * transposes and masked stores of a channel's run of rows. */
#define GR_CL_OW 7

static int gr_colane(const struct hp_conv *cv, const struct gr_geom *q)
{
#ifdef GR_X86
	return gr_cl_mode >= 0 && gr_512() && cv->wflip && cv->group > 1 && cv->cout_g % 16 == 0 && q->ow == GR_CL_OW &&
	       q->sw == 1;
#else
	(void)cv, (void)q;
	return 0;
#endif
}

#ifdef GR_X86
/* R rows of the unit from staged row s, output channels of wt's first
 * (wt: [k][ldw]), the first `valid` positions stored into y (the first
 * channel's plane from the tile's first row; planes of yv floats). */
static inline __attribute__((always_inline)) GR_TARGET512 void gr_cl_tile(const int NV, const int R,
									   const float *s, const int32_t *off,
									   int64_t kdim, const float *wt,
									   int64_t ldw, const float *bias,
									   int64_t phw, float *y, int64_t yv,
									   int valid)
{
	__m512 a[2][4 * GR_CL_OW];
	const int P = R * GR_CL_OW;

	for (int v = 0; v < NV; v++) {
		__m512 b = bias ? _mm512_loadu_ps(bias + 16 * v) : _mm512_setzero_ps();
		for (int i = 0; i < P; i++)
			a[v][i] = b;
	}
	for (int64_t k = 0; k < kdim; k++) {
		const float *p = s + off[k];
		__m512 w[2];
		for (int v = 0; v < NV; v++)
			w[v] = _mm512_loadu_ps(wt + k * ldw + 16 * v);
		for (int r = 0; r < R; r++)
			for (int c = 0; c < GR_CL_OW; c++) {
				__m512 x = _mm512_set1_ps(p[r * phw + c]);
				for (int v = 0; v < NV; v++)
					a[v][r * GR_CL_OW + c] = _mm512_fmadd_ps(w[v], x, a[v][r * GR_CL_OW + c]);
			}
	}
	for (int v = 0; v < NV; v++)
		for (int j0 = 0; j0 < valid; j0 += 16) {
			int n = valid - j0 < 16 ? valid - j0 : 16;
			__mmask16 mk = (__mmask16)((1u << n) - 1);
			__m512 t[16];
			for (int i = 0; i < 16; i++)
				t[i] = i < n ? a[v][j0 + i] : _mm512_setzero_ps();
			hp_tr16_ps(t);
			for (int m = 0; m < 16; m++)
				_mm512_mask_storeu_ps(y + (16 * v + m) * yv + j0, mk, t[m]);
		}
}

#define GR_CL_FN(NV, R)                                                                                       \
	static GR_TARGET512 void gr_cl_##NV##_##R(const float *s, const int32_t *off, int64_t kdim,          \
						  const float *wt, int64_t ldw, const float *bias, int64_t phw, \
						  float *y, int64_t yv, int valid)                            \
	{                                                                                                     \
		gr_cl_tile(NV, R, s, off, kdim, wt, ldw, bias, phw, y, yv, valid);                            \
	}
GR_CL_FN(2, 1)
GR_CL_FN(2, 2)
GR_CL_FN(1, 3)
GR_CL_FN(1, 4)

/* gr_block's outputs on the co-lane tiles: channels in vectors of 32
 * (NV 2, tiles of 2 rows) where the group has a multiple of 32, else of
 * 16 (tiles of 4 rows); a last tile of the rows left. */
static void gr_cl_block(const struct gr_run *r, int64_t n, int64_t g, int64_t oh0, int64_t oh1, const float *st,
			const int32_t *off)
{
	const struct hp_conv *cv = r->cv;
	const struct gr_geom *q = &r->q;
	int64_t yv = q->oh * q->ow, mg = cv->cout_g, nv = mg % 32 ? 1 : 2, rt = nv == 2 ? 2 : 4;
	const float *wt = r->w + g * q->kdim * mg;

	for (int64_t m = 0; m < mg; m += 16 * nv) {
		int64_t co = g * mg + m;
		const float *bias = r->b ? r->b + co : NULL;
		float *y = r->y + (n * cv->cout + co) * yv;
		for (int64_t oh = oh0; oh < oh1; oh += rt) {
			int64_t rows = oh1 - oh < rt ? oh1 - oh : rt;
			const float *s = st + (oh - oh0) * q->phw;
			float *yo = y + oh * q->ow;
			int valid = (int)(rows * q->ow);
			if (nv == 2 && rows == 2)
				gr_cl_2_2(s, off, q->kdim, wt + m, mg, bias, q->phw, yo, yv, valid);
			else if (nv == 2)
				gr_cl_2_1(s, off, q->kdim, wt + m, mg, bias, q->phw, yo, yv, valid);
			else if (rows == 4)
				gr_cl_1_4(s, off, q->kdim, wt + m, mg, bias, q->phw, yo, yv, valid);
			else /* 3 rows and fewer: the tile of 3 (rows past oh1 read the
			      * staging's next rows or slack and are not stored) */
				gr_cl_1_3(s, off, q->kdim, wt + m, mg, bias, q->phw, yo, yv, valid);
		}
	}
}
#endif

/* Output rows [oh0, oh1) of item n, group g, all the group's channels,
 * from the staging st: the unit's output rows are one run of columns,
 * column j = row * phw + output column (a row's last phw - ow columns are
 * computed and dropped), so the tiles stay whole where the rows are
 * narrow.  The run goes to o and is copied out row by row.  With fewer
 * than 4 channels left, the last one's chain also runs in the spare rows
 * of o. */
static GR_TARGET void gr_block(const struct gr_run *r, int64_t n, int64_t g, int64_t oh0, int64_t oh1, int64_t m0,
			       const float *st, const int32_t *off, float *o)
{
	const struct hp_conv *cv = r->cv;
	const struct gr_geom *q = &r->q;
	int64_t yv = q->oh * q->ow, tw = 8 * GR_NV, len = (oh1 - oh0 - 1) * q->phw + q->ow;

	if (gr_colane(cv, q)) {
		gr_cl_block(r, n, g, oh0, oh1, st, off);
		return;
	}
	if (gr_cofwd(cv, q) || r->dense) {
		hp_grp_cf_block(r, n, g, oh0, oh1, m0, st, off, o + GR_MR * q->lo);
		return;
	}
	for (int64_t m = 0; m < cv->cout_g; m += GR_MR) {
		int mr = (int)(cv->cout_g - m < GR_MR ? cv->cout_g - m : GR_MR);
		int64_t co = g * cv->cout_g + m;
		const float *wr[GR_MR];
		float bias[GR_MR];
		for (int i = 0; i < GR_MR; i++) {
			int c = i < mr ? i : mr - 1;
			wr[i] = r->w + (co + c) * q->kdim;
			bias[i] = r->b ? r->b[co + c] : 0.0f;
		}
		if (gr_512())
			gr_run512(st, off, q->kdim, wr, bias, (len + tw - 1) / tw, o, q->lo);
		else
			gr_run(st, off, q->kdim, wr, bias, (len + tw - 1) / tw, o, q->lo);
		for (int i = 0; i < mr; i++) {
			float *y = r->y + (n * cv->cout + co + i) * yv;
			for (int64_t oh = oh0; oh < oh1; oh++)
				gr_put(y + oh * q->ow, o + i * q->lo + (oh - oh0) * q->phw, q->ow);
		}
	}
}
static void gr_range(void *arg, int64_t b, int64_t e, int tid)
{
	const struct gr_run *r = arg;
	const struct hp_conv *cv = r->cv;
	const struct gr_geom *q = &r->q;
	float *st = r->ws + (size_t)tid * r->per_thread;
	int32_t *off = (int32_t *)(st + q->stage);
	float *o = st + q->stage + q->kdim + 8;
	int64_t yv = q->oh * q->ow;

	gr_taps(q, cv->cin_g, off);
	for (int64_t u = b, staged = -1; u < e; u++) { /* u = ((n * group + g) * nrb + row block) * ncb + channel block */
		int64_t m0 = u % r->ncb * r->cb, ub = u / r->ncb, cb = cv->cout_g - m0 < r->cb ? cv->cout_g - m0 : r->cb;
		int64_t blk = ub % q->nrb, ng = ub / q->nrb, n = ng / cv->group, g = ng % cv->group;
		int64_t oh0 = blk * q->rb, oh1 = oh0 + q->rb < q->oh ? oh0 + q->rb : q->oh;
		const float *xc = r->x + (n * cv->cin + g * cv->cin_g) * q->ih * q->iw;
		/* the channel blocks of one staging share it (dense: a 5x5
		 * plane's 256 channels staged it 8 times, 13% of the node) */
		if (ub != staged)
			gr_stage(q, cv->cin_g, xc, oh0, st);
		staged = ub;
		gr_block(r, n, g, oh0, oh1, m0, st, off, o);
		if (r->epi)
			for (int64_t co = g * cv->cout_g + m0; co < g * cv->cout_g + m0 + cb; co++) {
				int64_t at = (n * cv->cout + co) * yv;
				hp_epi_span(r->epi, r->y, r->addend, at + oh0 * q->ow, at + oh1 * q->ow);
			}
	}
}

#endif

#ifdef GR_X86
/* w' [cout][cin_g][kh][kw] from ConvGradData's w [cin][cout_g][kh][kw]
 * (the Conv's own W: its output channels are this forward's input
 * channels), mirrored along both axes; for the co-lane tiles (cl) w'^T
 * [group][cin_g][kh][kw][cout_g]. */
static void gr_flip(const struct hp_conv *cv, const float *w, float *f, int cl)
{
	int64_t kh = cv->g.k[1], kw = cv->g.k[2], kv = kh * kw;

	for (int64_t m = 0; m < cv->cout; m++) {
		int64_t g = m / cv->cout_g, mi = m % cv->cout_g;
		for (int64_t j = 0; j < cv->cin_g; j++) {
			const float *src = w + ((g * cv->cin_g + j) * cv->cout_g + mi) * kv;
			float *dst = f + (m * cv->cin_g + j) * kv;
			if (cl)
				for (int64_t t = 0; t < kv; t++)
					f[((g * cv->cin_g + j) * kv + t) * cv->cout_g + mi] = src[kv - 1 - t];
			else
				for (int64_t t = 0; t < kv; t++)
					dst[t] = src[kv - 1 - t];
		}
	}
}
#endif

#ifdef GR_X86
/* gr_flip's rows (not cl) of kv <= 16 taps in AVX-512: a masked load, a
 * permute that reverses the kv taps, a whole store (f's rows are written
 * in address order, so a store's excess is overwritten by the next row's,
 * and the last one's falls in the workers' part of the workspace, not yet
 * used).  In scalar the flip cost ConvGradData of RegNet's groups of 8 at
 * 3x3 planes as much as its products (31% of the node). */
static GR_TARGET512 void gr_flip512(const struct hp_conv *cv, const float *w, float *f)
{
	int64_t kv = cv->g.k[1] * cv->g.k[2];
	__mmask16 mk = (__mmask16)((1u << kv) - 1);
	int32_t rev[16];

	for (int t = 0; t < 16; t++)
		rev[t] = t < kv ? (int32_t)(kv - 1 - t) : t;
	__m512i idx = _mm512_loadu_si512(rev);
	for (int64_t m = 0; m < cv->cout; m++) {
		int64_t g = m / cv->cout_g, mi = m % cv->cout_g;
		const float *src = w + (g * cv->cin_g * cv->cout_g + mi) * kv;
		for (int64_t j = 0; j < cv->cin_g; j++, f += kv, src += cv->cout_g * kv)
			_mm512_storeu_ps(f, _mm512_permutexvar_ps(idx, _mm512_maskz_loadu_ps(mk, src)));
	}
}

#endif

/* The geometry the dense co-lane tiles take (hp_grp_dense's, and
 * ConvGradData's stride-1 dX: hp_grp_dense_flip). */
static int gr_dense_geo(const struct hp_conv *cv, int64_t least)
{
	struct gr_geom q;

	if (!cv->kxk || cv->transpose || cv->dw || cv->group != 1 || cv->nd != 2 || cv->g.img[0] != 1 ||
	    cv->g.grid[0] != 1 || cv->g.k[0] != 1 || cv->g.stride[2] > GR_MAX_STRIDE || cv->cout % 16 ||
	    gr_cf_mode < 0 || !hp_dot_available())
		return 0;
	gr_geom(cv, &q);
#ifdef GR_X86
	return gr_512() && cv->cout >= least && (q.rb == q.oh || q.rb * q.ow >= GR_DENSE_MIN_BLOCK) &&
	       q.oh * q.ow <= GR_CF_DENSE_MAX_PLANE && q.stage + q.kdim < INT32_MAX / 2;
#else
	return 0;
#endif
}

/* Dense Convs (one group) at small planes on the kxk path, in core: with W^T
 * packed once, the co-lane forward tiles in units of 32 (or 16) output
 * channels of the whole plane.  kxk computes each output by the same chain
 * (from its bias over k = (c, kh, kw) in order, padding taps included), so
 * packed or not, the bits are the same; but kxk reads W in place, six rows
 * at a time, and from memory (a net's weights do not stay in cache) that
 * ran at twice ONNX Runtime's time: GoogLeNet's 3x3 at 2x2 (192 -> 384
 * channels at 64x64), 24 of them (64 MB of W), 1 thread, 3.1-3.5 ms
 * against 2.4-2.7.  At larger batches only on planes of 64 positions and
 * more: the tiles run item by item, reading W once per item, where kxk
 * reads it once for all the batch's columns (ResNet-18's 3x3s of 512
 * channels at 2x2, batch 4: 0.29 ms on kxk, 0.95 on the tiles; its 64
 * channels at 16x16 and 128 at 8x8, batch 4: 184 -> 212 and 163 -> 221
 * GF/s on the tiles, 1 thread, task-clock). */
int hp_grp_dense(const struct hp_conv *cv)
{
	return cv->node && !cv->wflip && (cv->batch == 1 || cv->yvol >= 64) && gr_dense_geo(cv, 32);
}

/* ConvGradData's stride-1 dX of a dense Conv (conv_grad.c's KxK plan: a
 * Conv of dY over W transposed and mirrored) on the same tiles as its
 * forward, W flipped per call straight into the units' W^T
 * (hp_grp_cf_flip_unit).  Each dX element is the KxK path's chain (from
 * 0 over k = (c, kh, kw) of the flipped window in order, padding taps
 * included, or skipped where W is finite: gr_cs_ok), so which of the two
 * runs changes no bit.  The KxK path's tiles ran these dX at 35-74 GF/s
 * a CPU-second where the forward's ran at 52-100 (bench/
 * bench_conv_libs.c, SqueezeNet's, GoogLeNet's and ResNet's 3x3s): they
 * gather dY's windows into panels per column block and pack W' per
 * micro-tile.  At batches above one, planes of 64 positions and more
 * only, as the forward's (hp_grp_dense).  gr_dflip_mode (tests,
 * benchmarks): 1 at any batch, -1 never. */
static int gr_dflip_mode;

void hp_grp_set_dflip(int mode)
{
	gr_dflip_mode = mode;
}

int hp_grp_dflip_mode(void)
{
	return gr_dflip_mode;
}

static long gr_dflip_runs; /* tests: the dX runs on these tiles so far */

long hp_grp_dflip_count(void)
{
	return __atomic_load_n(&gr_dflip_runs, __ATOMIC_RELAXED);
}

int hp_grp_dense_flip(const struct hp_conv *cv)
{
	return gr_dflip_mode >= 0 && cv->wflip && !cv->node && cv->g.k[1] * cv->g.k[2] <= 16 &&
	       cv->g.stride[1] == 1 && cv->g.stride[2] == 1 && gr_dense_geo(cv, 16);
}

/* Whether hp_grp_dense_flip's units flip their own W^T into the worker's
 * panel as they begin, where each unit runs once (one item, one block of
 * rows), rather than W^T whole ahead of them: W read once either way, but
 * its W^T then goes through L2 and not memory (GoogLeNet's 3x3 of 192 ->
 * 384 channels at 3x3, 2.6 MB of W: the whole flip took 60% of its dX). */
static int gr_dflip_lazy(const struct hp_conv *cv)
{
	struct gr_geom q;

	if (!cv->wflip || cv->batch != 1 || !hp_grp_dense_flip(cv))
		return 0;
	gr_geom(cv, &q);
	return q.nrb == 1;
}

int hp_grp_dense_flip_runs(const struct hp_conv *cv)
{
	return hp_grp_dense_flip(cv) && (gr_dflip_mode > 0 || cv->batch == 1 || cv->yvol >= 64) &&
	       hp_grp_workspace(cv, 1) <= cv->workspace;
}

/* W packed per run, each unit's W^T for each block of rows it computes
 * (hp_grp_dense's nodes without W packed once: under a budget, in
 * training): the copy is worth it where a block reuses each packed float
 * for GR_DENSE_UNPACKED_POS positions or more (ResNet-18's 3x3s at 28x28
 * and 14x14, batch 32, out of core: the tiles instead of kxk). */
#define GR_DENSE_UNPACKED_POS 64
int hp_grp_dense_unpacked(const struct hp_conv *cv)
{
	return cv->yvol >= GR_DENSE_UNPACKED_POS && hp_grp_dense(cv);
}

int hp_grp_packs(const struct hp_conv *cv)
{
	struct gr_geom q;

	if (hp_grp_dense(cv))
		return 1;
	if (!cv->grp || cv->wflip)
		return 0;
	gr_geom(cv, &q);
	return gr_cofwd(cv, &q);
}

/* The units' channels: a group's (grouped), or 32 (dense; the last unit
 * 16 where mg is an odd multiple of 16: units of 16 throughout ran
 * GoogLeNet's 208-channel 3x3 at 6x6 at 94 GF/s, the 32-channel ones of
 * its neighbours at 215). */
static int64_t gr_unit_ch(int64_t group, int64_t mg)
{
	return group > 1 ? mg : 32;
}

void hp_grp_pack(const float *w, int64_t group, int64_t mg, int64_t kdim, float *dst)
{
	for (int64_t m0 = 0, cb; m0 < group * mg; m0 += cb) { /* a unit's panel [k][cb], in order */
		cb = group > 1 ? mg : group * mg - m0 < 32 ? group * mg - m0 : 32;
		for (int64_t k = 0; k < kdim; k++)
			for (int64_t i = 0; i < cb; i++)
				dst[(m0 * kdim) + k * cb + i] = w[(m0 + i) * kdim + k];
	}
}

static void grp_forward(const struct hp_conv *cv, const float *x, const float *w, const float *wt, const float *b,
			float *y, float *ws, struct hp_pool *pool, const struct hp_epi *epi, const float *addend);

int hp_grp_forward_packed(const struct hp_conv *cv, const float *x, const float *wt, const float *b, float *y,
			  float *ws, struct hp_pool *pool, const struct hp_epi *epi, const float *addend)
{
	if (!hp_grp_packs(cv))
		return 0;
	grp_forward(cv, x, NULL, wt, b, y, ws, pool, epi, addend);
	return 1;
}

void hp_grp_forward(const struct hp_conv *cv, const float *x, const float *w, const float *b, float *y, float *ws,
		    struct hp_pool *pool, const struct hp_epi *epi, const float *addend)
{
	grp_forward(cv, x, w, NULL, b, y, ws, pool, epi, addend);
}

#ifdef GR_X86
/* hp_grp_dense_flip's W^T whole: its units of 32 channels (the last one
 * 16) shared by the workers from this many floats (conv_kxk.c's
 * KX_FLIP_PAR_MIN); copies, the same on any cut. */
#define GR_DFLIP_PAR_MIN (1 << 16)
struct gr_dflip {
	const struct hp_conv *cv;
	const float *w;
	float *f;
	int bad; /* a weight is an Inf or a NaN */
};

static void gr_dflip_range(void *arg, int64_t b, int64_t e, int tid)
{
	struct gr_dflip *d = arg;
	int64_t kdim = d->cv->cin_g * d->cv->g.kvol;

	(void)tid;
	for (int64_t u = b * 32; u < e * 32 && u < d->cv->cout; u += 32) {
		int64_t cb = d->cv->cout - u < 32 ? d->cv->cout - u : 32;
		if (hp_grp_cf_flip_unit(d->cv, d->w, u, cb, d->f + u * kdim))
			__atomic_store_n(&d->bad, 1, __ATOMIC_RELAXED);
	}
}
#endif

static void grp_forward(const struct hp_conv *cv, const float *x, const float *w, const float *wt, const float *b,
			float *y, float *ws, struct hp_pool *pool, const struct hp_epi *epi, const float *addend)
{
#ifdef GR_X86
	struct gr_run r = { .cv = cv, .x = x, .w = w, .wt = wt, .b = b, .y = y, .ws = ws, .epi = epi, .addend = addend };
	int saved, threads = hp_conv_threads_enter(pool, &saved);
	size_t flip = gr_flip_floats(cv);
	int64_t cap;

	gr_geom(cv, &r.q);
	r.dense = hp_grp_dense(cv) || hp_grp_dense_flip(cv);
	r.dflip = gr_dflip_lazy(cv);
	if (r.dflip)
		__atomic_fetch_add(&gr_dflip_runs, 1, __ATOMIC_RELAXED);
	if (flip && r.dense) {
		struct gr_dflip f = { .cv = cv, .w = w, .f = ws };
		__atomic_fetch_add(&gr_dflip_runs, 1, __ATOMIC_RELAXED);
		hp_conv_parallel(pool, cv->cout * r.q.kdim >= GR_DFLIP_PAR_MIN ? threads : 1, (cv->cout + 31) / 32,
				 gr_dflip_range, &f);
		r.nonfinite = f.bad;
		r.wt = ws; /* the units' panels, as hp_grp_pack's */
		r.w = ws;
		r.ws = ws + flip;
	} else if (flip) {
		int kv16 = gr_512() && cv->g.k[1] * cv->g.k[2] <= 16;
		if (kv16 && cv->cout_g % 16 == 0 && gr_cofwd(cv, &r.q) && !gr_colane(cv, &r.q)) {
			hp_grp_cf_flip(cv, w, ws);
			r.wt = ws; /* gr_cf_block's panels, as hp_grp_pack's */
		} else if (kv16 && !gr_colane(cv, &r.q)) {
			gr_flip512(cv, w, ws);
		} else {
			gr_flip(cv, w, ws, gr_colane(cv, &r.q));
		}
		r.w = ws;
		r.ws = ws + flip;
	}
	r.per_thread = gr_per_thread(cv, &r.q);
	r.cb = cv->cout_g, r.ncb = 1;
	if (r.dense) { /* units of 32 or 16 channels */
		r.cb = gr_unit_ch(1, cv->cout);
		r.ncb = (cv->cout + r.cb - 1) / r.cb;
		if (threads > 1 && r.q.nrb * r.ncb < GR_DENSE_UNITS * threads) {
			int64_t nrb = (GR_DENSE_UNITS * threads + r.ncb - 1) / r.ncb;
			int64_t most = r.q.oh / ((GR_DENSE_MIN_POS + r.q.ow - 1) / r.q.ow);
			nrb = nrb < most ? nrb : most;
			if (nrb > r.q.nrb) { /* fewer rows a unit: less staging and output area */
				gr_geom_rows(&r.q, cv->cin_g, (r.q.oh + nrb - 1) / nrb);
				r.per_thread = gr_per_thread(cv, &r.q);
			}
		}
	}
	cap = (int64_t)((cv->workspace / sizeof(float) - flip) / r.per_thread);
	threads = threads < cap ? threads : (int)cap;
	hp_conv_steal(pool, threads, cv->batch * cv->group * r.q.nrb * r.ncb, 1, gr_range, &r);
	hp_conv_threads_leave(saved);
#else
	(void)cv, (void)x, (void)w, (void)wt, (void)b, (void)y, (void)ws, (void)pool, (void)epi, (void)addend;
#endif
}
