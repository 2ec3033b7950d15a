/* Conv as dot products of weight rows and patch rows (the "dot" path), for
 * outputs with few columns: small planes, stride 2, 1x1 over small planes.
 *
 * Why: there OpenBLAS's sgemm is thin (N = 4..64 columns per call on
 * ResNet-18's last stages) and spends as long packing the weight matrix,
 * per call, as multiplying it; the weights then dominate memory traffic.
 * Here W is read in its ONNX layout [cout][cin_g * kvol], never packed or
 * copied, and the input is gathered once per call into patch rows
 * ("im2row": one row of cin_g * kvol floats per output position, padded
 * with zeros to a multiple of 8), for every batch item at once, so a
 * weight row meets the columns of all items while it is in cache.
 *
 * Each output is y = sum_k W[m][k] * P[j][k] (+ bias): 8 lanes accumulate
 * k = l, l + 8, l + 16, ... in order with fused multiply-adds, and the
 * lanes are summed in one fixed tree (hsum4).  That order depends on K alone: not
 * on the column's place in a tile, on how many columns or batch items a
 * call holds, on the thread count, or on the cache blocking (a k block
 * resumes the same lane sums).  So a band of batch items or of output rows
 * (exec/split_band.c) gives bit for bit what the whole node gives, which
 * OpenBLAS's width-dependent rounding does not (see conv_tile.c).
 *
 * The work is two passes over the pool: patch rows of all columns, then
 * blocks of (output channels x columns), each finishing its outputs with
 * the bias and the fused epilogue (FusedConv) while they are in cache. */
#include <stdlib.h>
#include <string.h>

#include "kernels/conv_impl.h"
#include "kernels/fused_impl.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define DOT_X86 1
#define DOT_TARGET __attribute__((target("avx2,fma")))
#endif

#define DOT_MR 3     /* weight rows per micro-tile */
#define DOT_NR 4     /* patch rows per micro-tile */
#define DOT_KC 256   /* floats of k per cache block (a multiple of 8) */

static int dot_mode; /* 0 auto, 1 whenever possible, -1 never */

void hp_conv_set_dot(int mode)
{
	dot_mode = mode;
}

int hp_conv_dot_mode(void)
{
	return dot_mode;
}

int hp_dot_available(void)
{
#ifdef DOT_X86
	static int cached = -1;

	if (cached < 0) {
		__builtin_cpu_init();
		cached = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
	}
	return cached;
#else
	return 0;
#endif
}

static int64_t min64(int64_t a, int64_t b)
{
	return a < b ? a : b;
}

int64_t hp_dot_k8(const struct hp_conv *cv)
{
	return (cv->kdim + 7) / 8 * 8;
}

/* Stride of patch rows: k8 rounded to an odd number of cache lines, so
 * that the rows of a block spread over every L1 set (at 4608 floats, i.e.
 * 4.5 pages, every other row fell on the same 16 sets and a block of 16
 * rows filled them: 8 ways). */
static int64_t dot_ldp(const struct hp_conv *cv)
{
	int64_t lines = (hp_dot_k8(cv) + 15) / 16;

	return (lines % 2 ? lines : lines + 1) * 16;
}

/* Columns of one group: every batch item's output positions. */
static int64_t dot_cols(const struct hp_conv *cv)
{
	return cv->batch * cv->yvol;
}

size_t hp_dot_workspace(const struct hp_conv *cv, int threads)
{
	size_t rows = (size_t)(cv->group * dot_cols(cv) * dot_ldp(cv));
	size_t part = hp_dot_k8(cv) > DOT_KC ? (size_t)HP_DOT_MB * HP_DOT_NB * 8 : 0;

	return (rows + (size_t)threads * part) * sizeof(float);
}

/* ---- patch rows ---------------------------------------------------------- */

/* Kernel offsets [*lo, *hi) along the last axis that read inside the image
 * for output column ow. */
static void kw_range(const struct hp_colgeom *c, int64_t ow, int64_t *lo, int64_t *hi)
{
	int64_t iw0 = ow * c->stride[2] - c->pad[2];

	*lo = 0;
	*hi = c->k[2];
	while (*lo < *hi && iw0 + *lo * c->dil[2] < 0)
		(*lo)++;
	while (*hi > *lo && iw0 + (*hi - 1) * c->dil[2] >= c->img[2])
		(*hi)--;
}

/* row[k] for k = (c * k0 + kd) * k1 ... of output position p of image x
 * ([ch][img volume]), zeros in the padding and up to k8. */
static void im2row(const struct hp_colgeom *c, int64_t ch, const float *x, int64_t p, float *row, int64_t k8)
{
	int64_t od = p / (c->grid[1] * c->grid[2]), oh = p / c->grid[2] % c->grid[1], ow = p % c->grid[2];
	int64_t id0 = od * c->stride[0] - c->pad[0], ih0 = oh * c->stride[1] - c->pad[1];
	int64_t iw0 = ow * c->stride[2] - c->pad[2], lo, hi, n = 0, kw = c->k[2], dw = c->dil[2];

	kw_range(c, ow, &lo, &hi);
	for (int64_t cc = 0; cc < ch; cc++)
		for (int64_t kd = 0; kd < c->k[0]; kd++) {
			int64_t id = id0 + kd * c->dil[0];
			for (int64_t kh = 0; kh < c->k[1]; kh++, n += kw) {
				int64_t ih = ih0 + kh * c->dil[1];
				const float *src = x + (cc * c->img[0] + id) * c->img[1] * c->img[2] + ih * c->img[2] + iw0;
				float *dst = row + n;
				if (id < 0 || id >= c->img[0] || ih < 0 || ih >= c->img[1]) {
					for (int64_t k = 0; k < kw; k++)
						dst[k] = 0.0f;
					continue;
				}
				for (int64_t k = 0; k < lo; k++)
					dst[k] = 0.0f;
				for (int64_t k = lo; k < hi; k++)
					dst[k] = src[k * dw];
				for (int64_t k = hi; k < kw; k++)
					dst[k] = 0.0f;
			}
		}
	for (; n < k8; n++)
		row[n] = 0.0f;
}

struct dot_run {
	const struct hp_conv *cv;
	const float *x, *w, *b;
	float *y, *rows, *parts;
	const struct hp_epi *epi;
	const float *addend;
	int64_t k8, ldp, cols, mblocks, nblocks, mrows;
};

/* Pass 1: patch rows [b, e) over (group, column). */
static void rows_range(void *arg, int64_t b, int64_t e, int tid)
{
	const struct dot_run *r = arg;
	const struct hp_conv *cv = r->cv;

	(void)tid;
	for (int64_t i = b; i < e; i++) {
		int64_t g = i / r->cols, j = i % r->cols, nb = j / cv->yvol, p = j % cv->yvol;
		const float *x = r->x + (nb * cv->cin + g * cv->cin_g) * cv->xvol;
		im2row(&cv->g, cv->cin_g, x, p, r->rows + i * r->ldp, r->k8);
	}
}

/* ---- the micro-kernel ---------------------------------------------------- */

#ifdef DOT_X86
/* The lane sums of four vectors at once, each over one fixed tree,
 * ((l0 + l1) + (l2 + l3)) + ((l4 + l5) + (l6 + l7)): horizontal adds never
 * mix two vectors, so a vector's sum does not depend on its neighbours. */
DOT_TARGET static inline __m128 hsum4(__m256 a, __m256 b, __m256 c, __m256 d)
{
	__m256 t = _mm256_hadd_ps(_mm256_hadd_ps(a, b), _mm256_hadd_ps(c, d));

	return _mm_add_ps(_mm256_castps256_ps128(t), _mm256_extractf128_ps(t, 1));
}

struct micro_args {
	const float *w, *p;   /* first weight row, first patch row (at k = 0) */
	int64_t ldw, ldp;     /* their strides: K and dot_ldp */
	int64_t k0, k1, kfull; /* k block; kfull: K rounded down to 8 */
	const float *in;      /* partial lane sums to resume, or NULL */
	float *out;           /* partial lane sums [MR][NR][8], or NULL: ... */
	float *sums;          /* ... the finished sums [MR][NR] */
};

/* The tail mask: lanes < K - kfull. */
DOT_TARGET static inline __m256i tail_mask(int64_t n)
{
	const __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);

	return _mm256_cmpgt_epi32(_mm256_set1_epi32((int)n), idx);
}

/* One k step of 8: MR weight rows (loaded by wload) against NR patch rows. */
#define MICRO_STEP(WLOAD)                                                       \
	do {                                                                    \
		__m256 wv[DOT_MR];                                              \
		for (int i = 0; i < mr; i++)                                    \
			wv[i] = WLOAD;                                          \
		for (int j = 0; j < nr; j++) {                                  \
			__m256 pv = _mm256_loadu_ps(a->p + j * a->ldp + k);    \
			for (int i = 0; i < mr; i++)                            \
				acc[i][j] = _mm256_fmadd_ps(wv[i], pv, acc[i][j]); \
		}                                                               \
	} while (0)

/* Inlined with constant mr, nr: the accumulators live in registers. */
DOT_TARGET static inline __attribute__((always_inline)) void micro(const struct micro_args *a, int64_t ktail,
								   const int mr, const int nr)
{
	__m256 acc[DOT_MR][DOT_NR];
	int64_t k, kend = a->k1 < a->kfull ? a->k1 : a->kfull;

	for (int i = 0; i < mr; i++)
		for (int j = 0; j < nr; j++)
			acc[i][j] = a->in ? _mm256_loadu_ps(a->in + (i * nr + j) * 8) : _mm256_setzero_ps();
	for (k = a->k0; k < kend; k += 8)
		MICRO_STEP(_mm256_loadu_ps(a->w + i * a->ldw + k));
	if (ktail > 0 && k < a->k1) {
		__m256i m = tail_mask(ktail);
		MICRO_STEP(_mm256_maskload_ps(a->w + i * a->ldw + k, m));
	}
	for (int i = 0; i < mr; i++) {
		float s4[4];
		for (int j = 0; j < nr && a->out; j++)
			_mm256_storeu_ps(a->out + (i * nr + j) * 8, acc[i][j]);
		if (a->out)
			continue;
		for (int j = nr; j < DOT_NR; j++)
			acc[i][j] = _mm256_setzero_ps();
		_mm_storeu_ps(s4, hsum4(acc[i][0], acc[i][1], acc[i][2], acc[i][3]));
		for (int j = 0; j < nr; j++)
			a->sums[i * nr + j] = s4[j];
	}
}

#define MICRO(MR, NR)                                                                       \
	DOT_TARGET static void micro_##MR##_##NR(const struct micro_args *a, int64_t ktail) \
	{                                                                                   \
		micro(a, ktail, MR, NR);                                                    \
	}

MICRO(1, 1)
MICRO(1, 2)
MICRO(1, 3)
MICRO(1, 4)
MICRO(2, 1)
MICRO(2, 2)
MICRO(2, 3)
MICRO(2, 4)
MICRO(3, 1)
MICRO(3, 2)
MICRO(3, 3)
MICRO(3, 4)

typedef void (*micro_fn)(const struct micro_args *a, int64_t ktail);
static const micro_fn micros[DOT_MR][DOT_NR] = {
	{ micro_1_1, micro_1_2, micro_1_3, micro_1_4 },
	{ micro_2_1, micro_2_2, micro_2_3, micro_2_4 },
	{ micro_3_1, micro_3_2, micro_3_3, micro_3_4 },
};
#endif

/* ---- blocks of outputs ---------------------------------------------------- */

static int64_t cdiv(int64_t a, int64_t b)
{
	return (a + b - 1) / b;
}

/* Flat index in Y of output channel m (of the node) at column col. */
static int64_t y_index(const struct hp_conv *cv, int64_t m, int64_t col)
{
	return (col / cv->yvol * cv->cout + m) * cv->yvol + col % cv->yvol;
}

/* The bias and the epilogue over outputs [m0, m1) x columns [c0, c1) of
 * the node (channels counted over all groups), one run of positions of
 * one item at a time. */
static void finish_block(const struct dot_run *r, int64_t m0, int64_t m1, int64_t c0, int64_t c1)
{
	const struct hp_conv *cv = r->cv;

	for (int64_t m = m0; m < m1 && r->epi; m++)
		for (int64_t c = c0; c < c1;) {
			int64_t i = y_index(cv, m, c), len = min64(c1 - c, cv->yvol - c % cv->yvol);
			hp_epi_span(r->epi, r->y, r->addend, i, i + len);
			c += len;
		}
}

#ifdef DOT_X86
/* Finished sums of micro-tile (m, c) into Y with the bias: one division
 * per tile (twelve, one per output, cost as much as a small k block). */
static void store_sums(const struct dot_run *r, int64_t m, int mr, int64_t c, int nr, const float *s)
{
	const struct hp_conv *cv = r->cv;
	int64_t off[DOT_NR], q = c / cv->yvol, p = c % cv->yvol;

	for (int j = 0; j < nr; j++) {
		off[j] = q * cv->cout * cv->yvol + p;
		if (++p == cv->yvol) {
			p = 0;
			q++;
		}
	}
	for (int i = 0; i < mr; i++) {
		float bias = r->b ? r->b[m + i] : 0.0f, *y = r->y + (m + i) * cv->yvol;
		for (int j = 0; j < nr; j++) {
			float v = s[i * nr + j];
			y[off[j]] = r->b ? v + bias : v;
		}
	}
}

/* Outputs [m0, m1) x [c0, c1) of group g: k blocks outside (the block's
 * patch rows stay in L1), then weight micro-rows (read once from memory
 * per k block, in L1 while...), then patch micro-rows. */
static void block_gemm(const struct dot_run *r, int64_t g, int64_t m0, int64_t m1, int64_t c0, int64_t c1,
		       float *parts)
{
	const struct hp_conv *cv = r->cv;
	int64_t kd = cv->kdim, kfull = kd / 8 * 8;
	float sums[DOT_MR * DOT_NR];
	struct micro_args a = { .ldw = kd, .ldp = r->ldp, .kfull = kfull, .sums = sums };

	for (int64_t k0 = 0; k0 < r->k8; k0 += DOT_KC) {
		int64_t t = 0, k1 = min64(k0 + DOT_KC, r->k8);
		a.k0 = k0;
		a.k1 = k1;
		for (int64_t m = m0; m < m1; m += DOT_MR)
			for (int64_t c = c0; c < c1; c += DOT_NR, t++) {
				int mr = (int)min64(DOT_MR, m1 - m), nr = (int)min64(DOT_NR, c1 - c);
				a.w = r->w + (g * cv->cout_g + m) * kd;
				a.p = r->rows + (g * r->cols + c) * r->ldp;
				a.in = k0 > 0 ? parts + t * DOT_MR * DOT_NR * 8 : NULL;
				a.out = k1 < r->k8 ? parts + t * DOT_MR * DOT_NR * 8 : NULL;
				micros[mr - 1][nr - 1](&a, kd - kfull);
				if (!a.out)
					store_sums(r, g * cv->cout_g + m, mr, c, nr, sums);
			}
	}
}
#endif

/* Pass 2: blocks [b, e) over (group, block of output channels, block of
 * columns). */
static void blocks_range(void *arg, int64_t b, int64_t e, int tid)
{
	const struct dot_run *r = arg;
	const struct hp_conv *cv = r->cv;
	float *parts = r->parts + (size_t)tid * HP_DOT_MB * HP_DOT_NB * 8;

	for (int64_t u = b; u < e; u++) {
		int64_t g = u / (r->mblocks * r->nblocks), mb = u / r->nblocks % r->mblocks, nb = u % r->nblocks;
		int64_t m0 = mb * r->mrows, m1 = min64(m0 + r->mrows, cv->cout_g);
		int64_t c0 = nb * HP_DOT_NB, c1 = min64(c0 + HP_DOT_NB, r->cols);
#ifdef DOT_X86
		block_gemm(r, g, m0, m1, c0, c1, parts);
#else
		(void)parts;
#endif
		finish_block(r, g * cv->cout_g + m0, g * cv->cout_g + m1, c0, c1);
	}
}

/* Rows of output channels per block: HP_DOT_MB, or fewer (a multiple of
 * the micro-tile) so that every worker gets a few blocks. */
static int64_t block_rows(const struct hp_conv *cv, int64_t nblocks, int threads)
{
	int64_t mb = HP_DOT_MB;

	while (mb > 2 * DOT_MR && cv->group * cdiv(cv->cout_g, mb) * nblocks < 8 * threads)
		mb -= 2 * DOT_MR;
	return mb;
}

void hp_dot_forward(const struct hp_conv *cv, const float *x, const float *w, const float *b, float *y, float *ws,
		    struct hp_pool *pool, const struct hp_epi *epi, const float *addend)
{
	struct dot_run r = { .cv = cv, .x = x, .w = w, .b = b, .y = y, .rows = ws, .epi = epi, .addend = addend };
	size_t rows, avail;
	int saved, threads = hp_conv_threads_enter(pool, &saved);

	r.k8 = hp_dot_k8(cv);
	r.ldp = dot_ldp(cv);
	r.cols = dot_cols(cv);
	rows = (size_t)(cv->group * r.cols * r.ldp);
	r.parts = ws + rows;
	hp_conv_parallel(pool, threads, cv->group * r.cols, rows_range, &r);
	/* each worker resuming k blocks needs its own partial sums */
	avail = (cv->workspace / sizeof(float) - rows) / ((size_t)HP_DOT_MB * HP_DOT_NB * 8);
	if (r.k8 > DOT_KC && (size_t)threads > avail)
		threads = avail > 0 ? (int)avail : 1;
	r.nblocks = cdiv(r.cols, HP_DOT_NB);
	r.mrows = block_rows(cv, r.nblocks, threads);
	r.mblocks = cdiv(cv->cout_g, r.mrows);
	hp_conv_parallel(pool, threads, cv->group * r.mblocks * r.nblocks, blocks_range, &r);
	hp_conv_threads_leave(saved);
}
