/* ConvTranspose with kernel == stride, no padding, two wide along the
 * rows (the U-Net's 2x2 stride-2 up-sampling; any kernel == stride down
 * the other axes) as register-blocked chains of fused multiply-adds:
 *
 *   Y[m][(d k0 + a0, h k1 + a1)][2 w + b] = bias[m] + sum_c W[c][m][a0][a1][b] X[c][d][h][w]
 *
 * Why: the blocked path (conv_transpose.c) ran an sgemm into a column
 * buffer and scattered it into Y with scalar stores two apart, 14-20 GF/s
 * against 60 and more for the KxK path's tiles (hpdlf-exec --profile on
 * the bench's 2-D U-Net: 5% of the time for 2% of the flops).  Here an
 * input row is the unit of work: its channels are written once, each
 * value twice in a row ([x0 x0 x1 x1 ...], the lanes of 16 output
 * columns), and a micro-tile of 6 output channels x 16 columns of one
 * output row multiplies them by W's (b = 0, 1) pair broadcast across the
 * lanes, so Y is stored a whole row at a time and never scattered.
 *
 * Bits: each output is one chain over c = 0, 1, ..., cin_g - 1 in order
 * from its bias (or 0), whatever the thread count or band of batch items
 * or input rows; not the sgemm path's bits (its sums then the bias).
 * Only ConvTranspose nodes take it: the gradients' transposed products
 * (ConvGradData, conv_grad.c) keep the column path, whose tiles the band
 * pass's exact cuts count on (hp_conv_data_bands). */
#include <stdint.h>
#include <string.h>

#include "kernels/conv_impl.h"
#include "kernels/fma_tile.h"

static int ct_mode; /* 0 auto, -1 never */

void hp_convt_set_fma(int mode)
{
	ct_mode = mode;
}

int hp_convt_fma_eligible(const struct hp_conv *cv)
{
	return ct_mode >= 0 && cv->node && cv->transpose && cv->blocked && cv->g.k[2] == 2 && hp_kxk_available() &&
	       cv->g.grid[2] < INT32_MAX / 4;
}

/* Floats of a doubled input row: 2 * W rounded up to whole micro-tiles. */
static int64_t ct_ld(const struct hp_conv *cv)
{
	return (2 * cv->g.grid[2] + 15) / 16 * 16;
}

size_t hp_convt_fma_workspace(const struct hp_conv *cv, int threads)
{
	return (size_t)threads * (size_t)(cv->cin_g * ct_ld(cv)) * sizeof(float);
}

#if defined(__x86_64__) && defined(__GNUC__)

#define CT_MR 6

struct ct_run {
	const struct hp_conv *cv;
	const float *x, *w, *b;
	float *y, *ws;
	int64_t rows, per_thread; /* input rows (d, h) per (item, group); floats per worker */
};

/* W's (b = 0, 1) pair at p in every pair of lanes. */
FMA_TARGET static FMA_INLINE __m256 ct_pair(const float *p)
{
	double d;

	memcpy(&d, p, sizeof d);
	return _mm256_castpd_ps(_mm256_set1_pd(d));
}

#define CT_FMA(r)                                                                 \
	if (mr > r) {                                                             \
		__m256 w = ct_pair(a + r * kv);                                    \
		c##r##0 = _mm256_fmadd_ps(w, b0, c##r##0);                          \
		c##r##1 = _mm256_fmadd_ps(w, b1, c##r##1);                          \
	}
#define CT_INIT(r)                                                                \
	if (mr > r)                                                               \
		c##r##0 = c##r##1 = bias ? _mm256_set1_ps(bias[r]) : _mm256_setzero_ps();
#define CT_OUT(r)                                                                 \
	if (mr > r) {                                                             \
		acc[r][0] = c##r##0;                                               \
		acc[r][1] = c##r##1;                                               \
	}

/* Rows m0 .. m0 + mr - 1 of 16 output columns: the chain over the K
 * channels of the doubled rows xd (ld apart), W's pairs at a (ca apart per
 * channel, kv per output channel). */
FMA_TARGET static FMA_INLINE void ct_tile(const int mr, int64_t K, const float *xd, int64_t ld, const float *a,
					  int64_t ca, int64_t kv, const float *bias, float *y, int64_t ldy, int ncols)
{
	__m256 c00 = _mm256_setzero_ps(), c01 = c00, c10 = c00, c11 = c00, c20 = c00, c21 = c00;
	__m256 c30 = c00, c31 = c00, c40 = c00, c41 = c00, c50 = c00, c51 = c00, acc[CT_MR][2];

	CT_INIT(0) CT_INIT(1) CT_INIT(2) CT_INIT(3) CT_INIT(4) CT_INIT(5)
	for (int64_t c = 0; c < K; c++, xd += ld, a += ca) {
		__m256 b0 = _mm256_loadu_ps(xd), b1 = _mm256_loadu_ps(xd + 8);
		CT_FMA(0) CT_FMA(1) CT_FMA(2) CT_FMA(3) CT_FMA(4) CT_FMA(5)
	}
	CT_OUT(0) CT_OUT(1) CT_OUT(2) CT_OUT(3) CT_OUT(4) CT_OUT(5)
	fma_store_acc(acc, mr, 2, y, ldy, ncols, ncols == 16);
}

#define CT_CASE(R)                                                                \
	case R:                                                                   \
		ct_tile(R, K, xd, ld, a, ca, kv, bias, y, ldy, ncols);             \
		break;

FMA_TARGET static void ct_micro(int mr, int64_t K, const float *xd, int64_t ld, const float *a, int64_t ca,
				int64_t kv, const float *bias, float *y, int64_t ldy, int ncols)
{
	switch (mr) {
		CT_CASE(1)
		CT_CASE(2)
		CT_CASE(3)
		CT_CASE(4)
		CT_CASE(5)
		CT_CASE(6)
	default:
		break;
	}
}

/* AVX-512 tiles of 32 output columns (two zmm a row, 12 chains at 6
 * output channels) where the CPU has AVX-512: a 512-bit FMA issues at a
 * 256-bit one's rate on this project's Zen 5 machines.  Each lane is
 * ct_tile's chain, so the bits are ct_tile's. */
#define CTW_TARGET __attribute__((target("avx512f,avx2,fma")))

static int ctw_on = 1;

void hp_convt_set_wide(int on)
{
	ctw_on = on;
}

static int ctw_ok(void)
{
	static int cached = -1;

	if (cached < 0)
		cached = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx2") &&
			 __builtin_cpu_supports("fma");
	return cached && ctw_on;
}

#define CTW_INIT(r)                                                               \
	if (mr > r)                                                               \
		p##r = q##r = bias ? _mm512_set1_ps(bias[r]) : _mm512_setzero_ps();
#define CTW_FMA(r)                                                                \
	if (mr > r) {                                                             \
		double d;                                                          \
		memcpy(&d, a + r * kv, sizeof d);                                  \
		__m512 w = _mm512_castpd_ps(_mm512_set1_pd(d));                    \
		p##r = _mm512_fmadd_ps(w, b0, p##r);                               \
		q##r = _mm512_fmadd_ps(w, b1, q##r);                               \
	}
#define CTW_OUT(r)                                                                \
	if (mr > r) {                                                             \
		_mm512_storeu_ps(y + r * ldy, p##r);                               \
		_mm512_storeu_ps(y + r * ldy + 16, q##r);                          \
	}

/* ct_tile over 32 output columns. */
CTW_TARGET static FMA_INLINE void ctw_tile(const int mr, int64_t K, const float *xd, int64_t ld, const float *a,
					   int64_t ca, int64_t kv, const float *bias, float *y, int64_t ldy)
{
	__m512 p0 = _mm512_setzero_ps(), p1 = p0, p2 = p0, p3 = p0, p4 = p0, p5 = p0;
	__m512 q0 = p0, q1 = p0, q2 = p0, q3 = p0, q4 = p0, q5 = p0;

	CTW_INIT(0) CTW_INIT(1) CTW_INIT(2) CTW_INIT(3) CTW_INIT(4) CTW_INIT(5)
	for (int64_t c = 0; c < K; c++, xd += ld, a += ca) {
		__m512 b0 = _mm512_loadu_ps(xd), b1 = _mm512_loadu_ps(xd + 16);
		CTW_FMA(0) CTW_FMA(1) CTW_FMA(2) CTW_FMA(3) CTW_FMA(4) CTW_FMA(5)
	}
	CTW_OUT(0) CTW_OUT(1) CTW_OUT(2) CTW_OUT(3) CTW_OUT(4) CTW_OUT(5)
}

#define CTW_CASE(R)                                                               \
	case R:                                                                   \
		ctw_tile(R, K, xd, ld, a, ca, kv, bias, y, ldy);                   \
		break;

CTW_TARGET static void ctw_micro(int mr, int64_t K, const float *xd, int64_t ld, const float *a, int64_t ca,
				 int64_t kv, const float *bias, float *y, int64_t ldy)
{
	switch (mr) {
		CTW_CASE(1)
		CTW_CASE(2)
		CTW_CASE(3)
		CTW_CASE(4)
		CTW_CASE(5)
		CTW_CASE(6)
	default:
		break;
	}
}

/* xd[c][2 j + b] = x[c][j] for j < W, zeros up to ld. */
FMA_TARGET static void ct_double(const float *x, int64_t xs, int64_t K, int64_t W, float *xd, int64_t ld)
{
	const __m256i lo = _mm256_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3), hi = _mm256_setr_epi32(4, 4, 5, 5, 6, 6, 7, 7);

	for (int64_t c = 0; c < K; c++, x += xs, xd += ld) {
		int64_t j = 0;
		for (; j + 8 <= W; j += 8) {
			__m256 v = _mm256_loadu_ps(x + j);
			_mm256_storeu_ps(xd + 2 * j, _mm256_permutevar8x32_ps(v, lo));
			_mm256_storeu_ps(xd + 2 * j + 8, _mm256_permutevar8x32_ps(v, hi));
		}
		for (; j < W; j++)
			xd[2 * j] = xd[2 * j + 1] = x[j];
		for (j *= 2; j < ld; j++)
			xd[j] = 0.0f;
	}
}

/* Rows of micro-tile t of nt over M output channels: as even as 6 a tile
 * allows (32 = 6 + 6 + 5 + 5 + 5 + 5, not 6 * 5 + 2: a tile of two rows
 * has too few chains to hide the FMAs' latency). */
static int64_t ct_rows(int64_t M, int64_t nt, int64_t t)
{
	return M / nt + (t < M % nt);
}

/* Input row r (flat (d, h)) of item nb, group g: its k0 * k1 output rows. */
static void ct_row(const struct ct_run *r, int64_t nb, int64_t g, int64_t row, float *xd)
{
	const struct hp_conv *cv = r->cv;
	const struct hp_colgeom *G = &cv->g;
	int64_t K = cv->cin_g, M = cv->cout_g, kv = G->kvol, ld = ct_ld(cv), W = G->grid[2];
	int64_t nt = (M + CT_MR - 1) / CT_MR;
	int64_t d = row / G->grid[1], h = row % G->grid[1];
	const float *bias = r->b ? r->b + g * M : NULL;
	int wide = ctw_ok();

	ct_double(r->x + (nb * cv->cin + g * K) * cv->xvol + row * W, cv->xvol, K, W, xd, ld);
	for (int64_t a0 = 0; a0 < G->k[0]; a0++)
		for (int64_t a1 = 0; a1 < G->k[1]; a1++) {
			int64_t orow = (d * G->k[0] + a0) * G->img[1] + h * G->k[1] + a1;
			float *y = r->y + (nb * cv->cout + g * M) * cv->yvol + orow * G->img[2];
			const float *w = r->w + g * K * M * kv + (a0 * G->k[1] + a1) * 2;
			for (int64_t t = 0, m0 = 0; t < nt; m0 += ct_rows(M, nt, t), t++)
				for (int64_t j = 0; j < 2 * W;) {
					int mr = (int)ct_rows(M, nt, t);
					int nc = (int)(2 * W - j < 16 ? 2 * W - j : 16);
					if (wide && 2 * W - j >= 32) {
						ctw_micro(mr, K, xd + j, ld, w + m0 * kv, M * kv, kv,
							  bias ? bias + m0 : NULL, y + m0 * cv->yvol + j, cv->yvol);
						j += 32;
						continue;
					}
					ct_micro(mr, K, xd + j, ld, w + m0 * kv, M * kv, kv, bias ? bias + m0 : NULL,
						 y + m0 * cv->yvol + j, cv->yvol, nc);
					j += 16;
				}
		}
}

/* Input rows [b, e) of the whole batch and groups (one at a time when
 * stolen, hp_conv_steal: each thread takes its share's rows front to
 * back, then the back of a late thread's share). */
static void ct_range(void *arg, int64_t b, int64_t e, int tid)
{
	const struct ct_run *r = arg;
	const struct hp_conv *cv = r->cv;

	for (int64_t i = b; i < e; i++) {
		int64_t bg = i / r->rows;
		ct_row(r, bg / cv->group, bg % cv->group, i % r->rows, r->ws + tid * r->per_thread);
	}
}

void hp_convt_fma_forward(const struct hp_conv *cv, const float *x, const float *w, const float *b, float *y,
			  float *ws, struct hp_pool *pool)
{
	struct ct_run r = { .cv = cv, .x = x, .w = w, .b = b, .y = y, .ws = ws };
	int saved, threads = hp_conv_threads_enter(pool, &saved);
	int64_t cap = (int64_t)(cv->workspace / sizeof(float));

	r.rows = cv->g.grid[0] * cv->g.grid[1];
	r.per_thread = cv->cin_g * ct_ld(cv);
	if (threads > cap / r.per_thread)
		threads = (int)(cap / r.per_thread);
	if (hp_conv_flops(cv) < 2e6 || threads < 1)
		threads = 1;
	hp_conv_steal(pool, threads, cv->batch * cv->group * r.rows, 1, ct_range, &r);
	hp_conv_threads_leave(saved);
}

#else

void hp_convt_set_wide(int on)
{
	(void)on;
}

void hp_convt_fma_forward(const struct hp_conv *cv, const float *x, const float *w, const float *b, float *y,
			  float *ws, struct hp_pool *pool)
{
	(void)cv, (void)x, (void)w, (void)b, (void)y, (void)ws, (void)pool;
}

#endif
