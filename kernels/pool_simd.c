/* SIMD passes of the pooling row path (see pool_simd.h for the contract).
 * Why: the row path's tap loop ran one output at a time, 2-3 GFLOP/s
 * on the 3x3 MaxPools of SqueezeNet and GoogLeNet (a fifth of their
 * inference).  maxps(v, m) is v > m ? v : m, the scalar select exactly;
 * the stride-2 passes pick the even elements with permutes and never
 * read past the last tap. */
#include "kernels/pool_simd.h"
#include "kernels/simd_tr16.h"

static int isa_cap = 2;

void hp_pool_test_isa(int cap)
{
	isa_cap = cap;
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#include <math.h>
#include <string.h>

int hp_pool_isa(void)
{
	static int cached = -1;

	if (cached < 0) {
		__builtin_cpu_init();
		cached = __builtin_cpu_supports("avx512f") ? 2 : __builtin_cpu_supports("avx2") ? 1 : 0;
	}
	return cached < isa_cap ? cached : isa_cap;
}

/* ---- AVX-512F ---------------------------------------------------------- */

__attribute__((target("avx512f"))) static int64_t vmax_512(float *b, const float *r, int64_t n, int first)
{
	__m512 ninf = _mm512_set1_ps(-INFINITY);
	int64_t i = 0;

	for (; i + 16 <= n; i += 16)
		_mm512_storeu_ps(b + i, _mm512_max_ps(_mm512_loadu_ps(r + i), first ? ninf : _mm512_loadu_ps(b + i)));
	if (i < n) {
		__mmask16 k = (__mmask16)((1u << (n - i)) - 1);
		__m512 m = first ? ninf : _mm512_maskz_loadu_ps(k, b + i);
		_mm512_mask_storeu_ps(b + i, k, _mm512_max_ps(_mm512_maskz_loadu_ps(k, r + i), m));
	}
	return n;
}

/* p[0], p[2], ..., p[30] from p[0..30]. */
__attribute__((target("avx512f"))) static inline __m512 even16(const float *p)
{
	const __m512i idx = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 17, 19, 21, 23, 25, 27, 29, 31);
	return _mm512_permutex2var_ps(_mm512_loadu_ps(p), idx, _mm512_loadu_ps(p + 15));
}

__attribute__((target("avx512f"))) static int64_t hmax_512(const float *b, float *y, int64_t n, int s, int k,
							      int dl)
{
	for (int64_t j = 0; j < n; j += 16) {
		const float *p = b + s * j;
		__m512 m = _mm512_set1_ps(-INFINITY);
		for (int c = 0; c < k; c++)
			m = _mm512_max_ps(s == 1 ? _mm512_loadu_ps(p + c * dl) : even16(p + c * dl), m);
		if (j + 16 <= n)
			_mm512_storeu_ps(y + j, m);
		else
			_mm512_mask_storeu_ps(y + j, (__mmask16)((1u << (n - j)) - 1), m);
	}
	return n;
}

/* p[0], p[2], ..., p[14] from p[0..14]. */
__attribute__((target("avx512f"))) static inline __m512d even8d(const double *p)
{
	const __m512i idx = _mm512_setr_epi64(0, 2, 4, 6, 9, 11, 13, 15);
	return _mm512_permutex2var_pd(_mm512_loadu_pd(p), idx, _mm512_loadu_pd(p + 7));
}

__attribute__((target("avx512f"))) static void fmax_512(const float *x, float *y, int64_t i0, int64_t i1,
							  const int32_t *off, const uint16_t *mask, int64_t ntaps,
							  int64_t per)
{
	for (int64_t i = i0 / 16 * 16, ci = i / 16 % per; i < i1; i += 16, ci = ci + 1 == per ? 0 : ci + 1) {
		__mmask16 r = 0xffff;
		__m512 m = _mm512_set1_ps(-INFINITY);
		if (i < i0)
			r &= (__mmask16)(0xffffu << (i0 - i));
		if (i + 16 > i1)
			r &= (__mmask16)(0xffffu >> (i + 16 - i1));
		for (int64_t t = 0; t < ntaps; t++)
			m = _mm512_max_ps(_mm512_mask_loadu_ps(m, mask[t * per + ci] & r, x + i + off[t]), m);
		_mm512_mask_storeu_ps(y + i, r, m);
	}
}

/* Column maxima of rows r[0..nr) over input positions [ra, ra + n), -inf
 * outside [0, W), into b[0..n). */
__attribute__((target("avx512f"))) static inline void vmax_rows_512(float *b, const float *const *r, int nr,
								      int64_t ra, int64_t n, int64_t W)
{
	const __m512 ninf = _mm512_set1_ps(-INFINITY);

	for (int64_t i = 0; i < n; i += 16) {
		int64_t p = ra + i;
		__mmask16 k = 0xffff;
		__m512 m = ninf;
		if (p < 0 || p + 16 > W) {
			/* lanes l with 0 <= p + l < W */
			int64_t lo = p < 0 ? -p : 0, hi = W - p < 16 ? W - p : 16;
			k = lo < hi ? (__mmask16)((0xffffu >> (16 - hi)) & (0xffffu << lo)) : 0;
		}
		for (int q = 0; q < nr; q++)
			m = _mm512_max_ps(_mm512_mask_loadu_ps(ninf, k, r[q] + p), m);
		_mm512_storeu_ps(b + i, m);
	}
}

/* The input rows of output row (od, oh) into r; how many. */
static int plane_rows(const struct hp_pool_plane *g, const float *x, int64_t od, int64_t oh, const float **r)
{
	int64_t sd = od * g->s[0] - g->pb[0], sh = oh * g->s[1] - g->pb[1];
	int nr = 0;

	for (int64_t a = g->lo[0][od]; a < g->hi[0][od]; a++)
		for (int64_t b = g->lo[1][oh]; b < g->hi[1][oh]; b++)
			r[nr++] = x + ((sd + a * g->dl[0]) * g->in[1] + sh + b * g->dl[1]) * g->in[2];
	return nr;
}

/* Output rows whose column passes fit in the buffer together (rows of
 * `lanes`-aligned stride), 1 where a row alone needs more: those rows'
 * column passes all run before the first row pass, so that no row pass
 * loads a column pass's store still in flight.  Their taps at columns 1
 * and 2 straddle two of its 64-byte stores, which a store cannot forward:
 * with one row at a time every load waited for its stores to commit (3x3
 * stride-2 MaxPools of 256x11x11 ran at 20 us against ONNX Runtime's 6). */
static int64_t plane_group(const struct hp_pool_plane *g, int64_t lanes, int64_t *stride)
{
	int64_t wrow = (g->out[2] - 1) * g->s[2] + (g->k[2] - 1) * g->dl[2] + 1, n;

	*stride = (wrow + lanes - 1) / lanes * lanes;
	n = HP_POOL_PLANE_BUF / *stride;
	return wrow > HP_POOL_PLANE_BUF || n < 2 ? 1 : n < g->out[1] ? n : g->out[1];
}

__attribute__((target("avx512f"))) static void plane_max_grouped(const struct hp_pool_plane *g, const float *x,
								   float *y, int64_t grp, int64_t stride)
{
	float buf[HP_POOL_PLANE_BUF + 64];
	int64_t OW = g->out[2], s = g->s[2], dl = g->dl[2], wrow = (OW - 1) * s + (g->k[2] - 1) * dl + 1;
	const float *r[HP_POOL_PLANE_ROWS];
	int nrs[HP_POOL_PLANE_BUF / 16];

	for (int64_t od = 0; od < g->out[0]; od++)
		for (int64_t oh0 = 0; oh0 < g->out[1]; oh0 += grp) {
			int64_t oh1 = oh0 + grp < g->out[1] ? oh0 + grp : g->out[1];
			for (int64_t oh = oh0; oh < oh1; oh++)
				if ((nrs[oh - oh0] = plane_rows(g, x, od, oh, r)))
					vmax_rows_512(buf + (oh - oh0) * stride, r, nrs[oh - oh0], -g->pb[2], wrow, g->in[2]);
			for (int64_t oh = oh0; oh < oh1; oh++) {
				float *yr = y + (od * g->out[1] + oh) * OW;
				if (nrs[oh - oh0])
					hmax_512(buf + (oh - oh0) * stride, yr, OW, (int)s, (int)g->k[2], (int)dl);
				else
					for (int64_t j = 0; j < OW; j++)
						yr[j] = -INFINITY;
			}
		}
}

/* Columns [c, c + 16) of rows r[0..nr) with -inf outside [0, W): their
 * column maxima, m = v > m ? v : m from -inf, rows in order. */
__attribute__((target("avx512f"))) static inline __m512 colmax16(const float *const *r, int nr, int64_t c, int64_t W)
{
	__mmask16 k = c >= 0 && c + 16 <= W ? 0xffff : c < W ? (__mmask16)((1u << (W - c < 16 ? W - c : 16)) - 1) : 0;
	__m512 ninf = _mm512_set1_ps(-INFINITY), m = ninf;

	if (c < 0) /* a left pad: lanes from -c on */
		k = c > -16 ? (__mmask16)(k & (0xffffu << -c)) : 0;
	for (int q = 0; q < nr; q++)
		m = _mm512_max_ps(_mm512_mask_loadu_ps(ninf, k, r[q] + c), m);
	return m;
}

/* 3-wide, stride-2 windows (SqueezeNet's, GoogLeNet's and ResNet's stem
 * MaxPools): per 16 outputs, the column maxima of columns [c, c + 48),
 * c = 2j - the left pad, in three registers, the taps c, c + 1, c + 2
 * picked from them by permutes, so no column pass goes through a buffer
 * and a row costs no call; columns in the pads or past the plane's edge
 * (ceil_mode) read as -inf, which selects as a skipped tap.  The operations and their order
 * are plane_max_512's (column maxima over the rows, then the w taps in
 * order), so the bits are. */
__attribute__((target("avx512f"))) static void plane_max_s2k3(const struct hp_pool_plane *g, const float *x, float *y)
{
	const __m512i ev = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
	const __m512i od1 = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
	int64_t W = g->in[2], OW = g->out[2], pl = g->pb[2];
	const float *r[HP_POOL_PLANE_ROWS];

	for (int64_t od = 0; od < g->out[0]; od++)
		for (int64_t oh = 0; oh < g->out[1]; oh++) {
			float *yr = y + (od * g->out[1] + oh) * OW;
			int nr = plane_rows(g, x, od, oh, r);
			for (int64_t j = 0; j < OW; j += 16) {
				int64_t c0 = 2 * j - pl;
				__m512 ninf = _mm512_set1_ps(-INFINITY), a = colmax16(r, nr, c0, W);
				__m512 b = c0 + 16 < W ? colmax16(r, nr, c0 + 16, W) : ninf;
				__m512 c = c0 + 32 < W ? colmax16(r, nr, c0 + 32, W) : ninf;
				__m512 a2 = _mm512_castsi512_ps(_mm512_alignr_epi32(_mm512_castps_si512(b),
										   _mm512_castps_si512(a), 2));
				__m512 b2 = _mm512_castsi512_ps(_mm512_alignr_epi32(_mm512_castps_si512(c),
										   _mm512_castps_si512(b), 2));
				__m512 m = ninf;
				m = _mm512_max_ps(_mm512_permutex2var_ps(a, ev, b), m);
				m = _mm512_max_ps(_mm512_permutex2var_ps(a, od1, b), m);
				m = _mm512_max_ps(_mm512_permutex2var_ps(a2, ev, b2), m);
				if (!nr)
					m = ninf;
				if (j + 16 <= OW)
					_mm512_storeu_ps(yr + j, m);
				else
					_mm512_mask_storeu_ps(yr + j, (__mmask16)((1u << (OW - j)) - 1), m);
			}
		}
}

__attribute__((target("avx512f"))) static void plane_max_512(const struct hp_pool_plane *g, const float *x, float *y)
{
	float buf[HP_POOL_PLANE_BUF + 64];
	int64_t W = g->in[2], OW = g->out[2], s = g->s[2], dl = g->dl[2], ext = (g->k[2] - 1) * dl + 1;
	int64_t blk = (HP_POOL_PLANE_BUF - ext) / s + 1, stride, grp = plane_group(g, 16, &stride);
	const float *r[HP_POOL_PLANE_ROWS];

	if (s == 2 && g->k[2] == 3 && dl == 1 && g->pb[2] < 16) {
		plane_max_s2k3(g, x, y);
		return;
	}
	if (grp > 1) {
		plane_max_grouped(g, x, y, grp, stride);
		return;
	}
	for (int64_t od = 0; od < g->out[0]; od++)
		for (int64_t oh = 0; oh < g->out[1]; oh++) {
			float *yr = y + (od * g->out[1] + oh) * OW;
			int nr = plane_rows(g, x, od, oh, r);
			for (int64_t o0 = 0; o0 < OW; o0 += blk) {
				int64_t n = o0 + blk < OW ? blk : OW - o0, ra = o0 * s - g->pb[2];
				if (!nr) {
					for (int64_t j = 0; j < n; j++)
						yr[o0 + j] = -INFINITY;
					continue;
				}
				vmax_rows_512(buf, r, nr, ra, (n - 1) * s + ext, W);
				hmax_512(buf, yr + o0, n, (int)s, (int)g->k[2], (int)dl);
			}
		}
}

/* Double column sums of rows r[0..nr) over input positions [ra, ra + n)
 * (the first row as is, then added in order), 0 outside [0, W), into b. */
__attribute__((target("avx512f"))) static inline void vsum_rows_512(double *b, const float *const *r, int nr,
								      int64_t ra, int64_t n, int64_t W)
{
	for (int64_t i = 0; i < n; i += 8) {
		int64_t p = ra + i;
		__mmask16 k = 0xff;
		__m512d m;
		if (p < 0 || p + 8 > W) {
			int64_t lo = p < 0 ? -p : 0, hi = W - p < 8 ? W - p : 8;
			k = lo < hi ? (__mmask16)((0xffu >> (8 - hi)) & (0xffu << lo)) : 0;
		}
		m = _mm512_cvtps_pd(_mm512_castps512_ps256(_mm512_maskz_loadu_ps(k, r[0] + p)));
		for (int q = 1; q < nr; q++)
			m = _mm512_add_pd(m, _mm512_cvtps_pd(_mm512_castps512_ps256(_mm512_maskz_loadu_ps(k, r[q] + p))));
		_mm512_storeu_pd(b + i, m);
	}
}

/* The window divisors' product of the rows of output row (od, oh). */
static double plane_avg_rows(const struct hp_pool_plane *g, int64_t od, int64_t oh)
{
	return g->include_pad ? (double)(g->cpad[0][od] * g->cpad[1][oh])
			      : (double)((g->hi[0][od] - g->lo[0][od]) * (g->hi[1][oh] - g->lo[1][oh]));
}

/* Outputs [o0, o0 + n) of a row from its column sums buf: the window's
 * sums over the columns in order, over rows x hcnt (0 where that is 0). */
__attribute__((target("avx512f"))) static void avg_row_512(const struct hp_pool_plane *g, const double *buf, double rows,
							     float *yr, int64_t o0, int64_t n)
{
	int64_t s = g->s[2], dl = g->dl[2];
	__m512d rv = _mm512_set1_pd(rows);

	for (int64_t j = 0; j < n; j += 8) {
		const double *p = buf + s * j;
		__m512d acc = _mm512_setzero_pd(), cnt;
		float t[8];
		for (int c = 0; c < g->k[2]; c++)
			acc = _mm512_add_pd(acc, s == 1 ? _mm512_loadu_pd(p + c * dl) : even8d(p + c * dl));
		cnt = _mm512_mul_pd(rv, _mm512_loadu_pd(g->hcnt + o0 + j));
		acc = _mm512_maskz_div_pd(_mm512_cmp_pd_mask(cnt, _mm512_setzero_pd(), _CMP_NEQ_OQ), acc, cnt);
		if (j + 8 <= n) {
			_mm256_storeu_ps(yr + o0 + j, _mm512_cvtpd_ps(acc));
			continue;
		}
		_mm256_storeu_ps(t, _mm512_cvtpd_ps(acc));
		memcpy(yr + o0 + j, t, sizeof(float) * (size_t)(n - j));
	}
}

/* plane_max_grouped's order for the averages: the group's column sums,
 * then its rows. */
__attribute__((target("avx512f"))) static void plane_avg_grouped(const struct hp_pool_plane *g, const float *x,
								   float *y, int64_t grp, int64_t stride)
{
	double buf[HP_POOL_PLANE_BUF + 32];
	int64_t OW = g->out[2], wrow = (OW - 1) * g->s[2] + (g->k[2] - 1) * g->dl[2] + 1;
	const float *r[HP_POOL_PLANE_ROWS];

	for (int64_t od = 0; od < g->out[0]; od++)
		for (int64_t oh0 = 0; oh0 < g->out[1]; oh0 += grp) {
			int64_t oh1 = oh0 + grp < g->out[1] ? oh0 + grp : g->out[1];
			for (int64_t oh = oh0; oh < oh1; oh++) {
				int nr = plane_rows(g, x, od, oh, r);
				if (nr)
					vsum_rows_512(buf + (oh - oh0) * stride, r, nr, -g->pb[2], wrow, g->in[2]);
				else
					memset(buf + (oh - oh0) * stride, 0, sizeof(double) * (size_t)wrow);
			}
			for (int64_t oh = oh0; oh < oh1; oh++)
				avg_row_512(g, buf + (oh - oh0) * stride, plane_avg_rows(g, od, oh),
					    y + (od * g->out[1] + oh) * OW, 0, OW);
		}
}

__attribute__((target("avx512f"))) static void plane_avg_512(const struct hp_pool_plane *g, const float *x, float *y)
{
	double buf[HP_POOL_PLANE_BUF + 32];
	int64_t W = g->in[2], OW = g->out[2], s = g->s[2], dl = g->dl[2], ext = (g->k[2] - 1) * dl + 1;
	int64_t blk = (HP_POOL_PLANE_BUF - ext) / s + 1, stride, grp = plane_group(g, 8, &stride);
	const float *r[HP_POOL_PLANE_ROWS];

	if (grp > 1) {
		plane_avg_grouped(g, x, y, grp, stride);
		return;
	}
	for (int64_t od = 0; od < g->out[0]; od++)
		for (int64_t oh = 0; oh < g->out[1]; oh++) {
			float *yr = y + (od * g->out[1] + oh) * OW;
			int nr = plane_rows(g, x, od, oh, r);
			for (int64_t o0 = 0; o0 < OW; o0 += blk) {
				int64_t n = o0 + blk < OW ? blk : OW - o0, ra = o0 * s - g->pb[2];
				if (nr)
					vsum_rows_512(buf, r, nr, ra, (n - 1) * s + ext, W);
				else
					memset(buf, 0, sizeof(double) * (size_t)((n - 1) * s + ext));
				avg_row_512(g, buf, plane_avg_rows(g, od, oh), yr, o0, n);
			}
		}
}

/* The dX additions of one chunk of 16 outputs, done one chunk late: the
 * argmax indices are read back from memory only after the next chunk's
 * search, when their 512-bit store has left the store buffer (a narrow
 * load of a wide store in flight stalls it): GoogLeNet's 8x192x8x8 branch
 * pool's gradient took 282-298 us instead of 416. */
struct grad_pend {
	int32_t idx[16];
	const float *dy;
	int64_t base;
	__mmask16 have;
};

static inline void grad_flush(struct grad_pend *p, float *dx, int flat, const int32_t *off)
{
	int64_t prev = -1;
	float acc = 0;

	/* a run of outputs with the same maximum adds in a register, the same
	 * additions in the same order as dx[j] += dy one by one */
	for (int l = 0; l < 16; l++)
		if (p->have >> l & 1) {
			int64_t j = flat ? p->base + l + off[p->idx[l]] : p->idx[l];
			if (j != prev) {
				if (prev >= 0)
					dx[prev] = acc;
				prev = j;
				acc = dx[j];
			}
			acc += p->dy[l];
		}
	if (prev >= 0)
		dx[prev] = acc;
	p->have = 0;
}

/* Lanes l of [0, 16) with 0 <= p + l < W. */
static inline uint32_t range16(int64_t p, int64_t W)
{
	int64_t lo = p < 0 ? -p : 0, hi = W - p < 16 ? W - p : 16;
	return lo < hi ? (0xffffu >> (16 - hi)) & (0xffffu << lo) : 0;
}

__attribute__((target("avx512f"))) static void grad_max2d_512(const struct hp_pool_grad2d *g, const float *x,
								 const float *dy, float *dx)
{
	const __m512i iota = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
	const __m512i ev = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 17, 19, 21, 23, 25, 27, 29, 31);
	int64_t W = g->W, s = g->sw;
	const __m512i step = _mm512_mullo_epi32(iota, _mm512_set1_epi32((int32_t)s));
	struct grad_pend pend[2] = { { .have = 0 }, { .have = 0 } };
	int cur = 0;

	for (int64_t oh = 0; oh < g->OH; oh++) {
		int64_t h0 = oh * g->sh - g->ph;
		for (int64_t ow0 = 0; ow0 < g->OW; ow0 += 16) {
			int64_t nl = g->OW - ow0 < 16 ? g->OW - ow0 : 16;
			__m512 bv = _mm512_setzero_ps();
			__m512i bidx = _mm512_setzero_si512();
			__mmask16 have = 0;
			for (int64_t a = 0; a < g->kh; a++) {
				int64_t h = h0 + a * g->dh;
				if (h < 0 || h >= g->H)
					continue;
				for (int64_t b = 0; b < g->kw; b++) {
					int64_t w = ow0 * s - g->pw + b * g->dw; /* lane 0's column */
					const float *r = x + h * W;
					__mmask16 valid;
					__m512 v;
					if (s == 1) {
						valid = (__mmask16)range16(w, W);
						v = _mm512_maskz_loadu_ps(valid, r + w);
					} else {
						__m512 lo = _mm512_maskz_loadu_ps((__mmask16)range16(w, W), r + w);
						__m512 hi = _mm512_maskz_loadu_ps((__mmask16)range16(w + 15, W), r + w + 15);
						/* lanes l with 0 <= w + 2l < W */
						int64_t l0 = w < 0 ? (1 - w) / 2 : 0, l1 = W > w ? (W - w + 1) / 2 : 0;
						l1 = l1 < 16 ? l1 : 16;
						valid = l0 < l1 ? (__mmask16)((0xffffu >> (16 - l1)) & (0xffffu << l0)) : 0;
						v = _mm512_permutex2var_ps(lo, ev, hi);
					}
					valid &= (__mmask16)((1u << nl) - 1);
					/* take: the first valid tap, else v beats bv (greater,
					 * or NaN over a number) */
					__mmask16 nanb = _mm512_cmp_ps_mask(bv, bv, _CMP_UNORD_Q);
					__mmask16 beats = _mm512_cmp_ps_mask(v, bv, _CMP_GT_OQ) |
							  (_mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q) & (__mmask16)~nanb);
					__mmask16 take = valid & (__mmask16)(~have | beats);
					__m512i idx = _mm512_add_epi32(_mm512_set1_epi32((int32_t)(h * W + w)), step);
					bv = _mm512_mask_mov_ps(bv, take, v);
					bidx = _mm512_mask_mov_epi32(bidx, take, idx);
					have |= valid;
				}
			}
			_mm512_storeu_si512(pend[cur].idx, bidx);
			pend[cur].have = have & (__mmask16)((1u << nl) - 1);
			pend[cur].dy = dy + oh * g->OW + ow0;
			cur ^= 1;
			grad_flush(&pend[cur], dx, 0, NULL);
		}
	}
	grad_flush(&pend[cur ^ 1], dx, 0, NULL);
}

__attribute__((target("avx512f"))) static void grad_flat_512(const float *x, const float *dy, float *dx, int64_t i0,
								int64_t i1, const int32_t *off, const uint16_t *mask,
								int64_t ntaps, int64_t per)
{
	struct grad_pend pend[2] = { { .have = 0 }, { .have = 0 } };
	int cur = 0;

	for (int64_t i = i0 / 16 * 16, ci = i / 16 % per; i < i1; i += 16, ci = ci + 1 == per ? 0 : ci + 1) {
		__mmask16 r = 0xffff, have = 0;
		__m512 bv = _mm512_setzero_ps();
		__m512i btap = _mm512_setzero_si512();
		if (i < i0)
			r &= (__mmask16)(0xffffu << (i0 - i));
		if (i + 16 > i1)
			r &= (__mmask16)(0xffffu >> (i + 16 - i1));
		for (int64_t t = 0; t < ntaps; t++) {
			__mmask16 valid = mask[t * per + ci] & r;
			__m512 v = _mm512_maskz_loadu_ps(valid, x + i + off[t]);
			__mmask16 nanb = _mm512_cmp_ps_mask(bv, bv, _CMP_UNORD_Q);
			__mmask16 beats = _mm512_cmp_ps_mask(v, bv, _CMP_GT_OQ) |
					  (_mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q) & (__mmask16)~nanb);
			__mmask16 take = valid & (__mmask16)(~have | beats);
			bv = _mm512_mask_mov_ps(bv, take, v);
			btap = _mm512_mask_mov_epi32(btap, take, _mm512_set1_epi32((int32_t)t));
			have |= valid;
		}
		_mm512_storeu_si512(pend[cur].idx, btap);
		pend[cur].have = have;
		pend[cur].dy = dy + i;
		pend[cur].base = i;
		cur ^= 1;
		grad_flush(&pend[cur], dx, 1, off);
	}
	grad_flush(&pend[cur ^ 1], dx, 1, off);
}

/* ---- AVX2 --------------------------------------------------------------- */

__attribute__((target("avx2"))) static int64_t vmax_256(float *b, const float *r, int64_t n, int first)
{
	__m256 ninf = _mm256_set1_ps(-INFINITY);
	int64_t i = 0;

	for (; i + 8 <= n; i += 8)
		_mm256_storeu_ps(b + i, _mm256_max_ps(_mm256_loadu_ps(r + i), first ? ninf : _mm256_loadu_ps(b + i)));
	return i;
}

/* p[0], p[2], ..., p[14] from p[0..14]. */
__attribute__((target("avx2"))) static inline __m256 even8(const float *p)
{
	const __m256i lo = _mm256_setr_epi32(0, 2, 4, 6, 0, 0, 0, 0), hi = _mm256_setr_epi32(0, 0, 0, 0, 1, 3, 5, 7);
	return _mm256_blend_ps(_mm256_permutevar8x32_ps(_mm256_loadu_ps(p), lo),
			       _mm256_permutevar8x32_ps(_mm256_loadu_ps(p + 7), hi), 0xf0);
}

__attribute__((target("avx2"))) static int64_t hmax_256(const float *b, float *y, int64_t n, int s, int k, int dl)
{
	int64_t j = 0;

	for (; j + 8 <= n; j += 8) {
		const float *p = b + s * j;
		__m256 m = _mm256_set1_ps(-INFINITY);
		for (int c = 0; c < k; c++)
			m = _mm256_max_ps(s == 1 ? _mm256_loadu_ps(p + c * dl) : even8(p + c * dl), m);
		_mm256_storeu_ps(y + j, m);
	}
	return j;
}

__attribute__((target("avx2"))) static int64_t max2_256(const float *r0, const float *r1, float *y, int64_t n)
{
	int64_t j = 0;

	for (; j + 8 <= n; j += 8) {
		const float *q[2] = { r0 + 2 * j, r1 + 2 * j };
		__m256 m = _mm256_set1_ps(-INFINITY);
		for (int i = 0; i < 2; i++) {
			__m256 a = _mm256_loadu_ps(q[i]), c = _mm256_loadu_ps(q[i] + 8);
			__m256d e = _mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(a, c, 0x88)), 0xd8);
			__m256d o = _mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(a, c, 0xdd)), 0xd8);
			m = _mm256_max_ps(_mm256_castpd_ps(e), m);
			m = _mm256_max_ps(_mm256_castpd_ps(o), m);
		}
		_mm256_storeu_ps(y + j, m);
	}
	return j;
}

/* ---- GlobalAveragePool -------------------------------------------------
 * A plane's sum is one chain of dependent double adds (its order is the
 * result's bits), 3-4 cycles an element when planes go one at a time: the
 * SE blocks' pools were 7% of EfficientNet-B0.  Here the lanes are planes:
 * eight rows of eight floats transposed, each column's eight planes added
 * to their chains, G groups of eight planes side by side so that 2 G
 * chains overlap. */
__attribute__((target("avx2"))) static inline __attribute__((always_inline)) void gavg_256(const float *x, float *y,
											  int64_t n, const int G)
{
	__m256d acc[2][2] = { { _mm256_setzero_pd(), _mm256_setzero_pd() }, { _mm256_setzero_pd(), _mm256_setzero_pd() } };
	double s[16];
	int64_t i = 0;

	for (; i + 8 <= n; i += 8)
		for (int g = 0; g < G; g++) {
			__m256 r[8];
			for (int k = 0; k < 8; k++)
				r[k] = _mm256_loadu_ps(x + (8 * g + k) * n + i);
			hp_tr8_ps(r); /* r[c]: lane k is plane 8 g + k's element i + c */
			for (int c = 0; c < 8; c++) {
				acc[g][0] = _mm256_add_pd(acc[g][0], _mm256_cvtps_pd(_mm256_castps256_ps128(r[c])));
				acc[g][1] = _mm256_add_pd(acc[g][1], _mm256_cvtps_pd(_mm256_extractf128_ps(r[c], 1)));
			}
		}
	for (int g = 0; g < G; g++) {
		_mm256_storeu_pd(s + 8 * g, acc[g][0]);
		_mm256_storeu_pd(s + 8 * g + 4, acc[g][1]);
	}
	for (int k = 0; k < 8 * G; k++) {
		for (int64_t j = i; j < n; j++)
			s[k] += x[k * n + j];
		y[k] = (float)(s[k] / (double)n);
	}
}

__attribute__((target("avx2"))) static int64_t gavg_planes_256(const float *x, float *y, int64_t np, int64_t n)
{
	int64_t p = 0;

	for (; p + 16 <= np; p += 16)
		gavg_256(x + p * n, y + p, n, 2);
	for (; p + 8 <= np; p += 8)
		gavg_256(x + p * n, y + p, n, 1);
	return p;
}

/* ---- dispatch ----------------------------------------------------------- */

int64_t hp_pool_vmax_f32(float *b, const float *r, int64_t n, int first)
{
	int isa = hp_pool_isa();
	return isa == 2 ? vmax_512(b, r, n, first) : isa == 1 ? vmax_256(b, r, n, first) : 0;
}

int64_t hp_pool_hmax_f32(const float *b, float *y, int64_t n, int s, int k, int dl)
{
	int isa = hp_pool_isa();
	if (s != 1 && s != 2)
		return 0;
	return isa == 2 ? hmax_512(b, y, n, s, k, dl) : isa == 1 ? hmax_256(b, y, n, s, k, dl) : 0;
}

int hp_pool_plane_max_f32(const struct hp_pool_plane *g, const float *x, float *y)
{
	if (hp_pool_isa() < 2 || (g->s[2] != 1 && g->s[2] != 2) || (g->k[2] - 1) * g->dl[2] + 1 > HP_POOL_PLANE_BUF ||
	    g->k[0] * g->k[1] > HP_POOL_PLANE_ROWS)
		return 0;
	plane_max_512(g, x, y);
	return 1;
}

int hp_pool_plane_avg_f32(const struct hp_pool_plane *g, const float *x, float *y)
{
	if (hp_pool_isa() < 2 || (g->s[2] != 1 && g->s[2] != 2) || (g->k[2] - 1) * g->dl[2] + 1 > HP_POOL_PLANE_BUF ||
	    g->k[0] * g->k[1] > HP_POOL_PLANE_ROWS || !g->hcnt)
		return 0;
	plane_avg_512(g, x, y);
	return 1;
}

int hp_pool_grad_max2d_f32(const struct hp_pool_grad2d *g, const float *x, const float *dy, float *dx,
			   int64_t planes)
{
	/* rows of fewer than 8 outputs fill too few lanes to beat the scalar
	 * search (GoogLeNet's 8x8 -> 4x4 ran 1.6x slower) */
	if (hp_pool_isa() < 2 || (g->sw != 1 && g->sw != 2) || g->OW < 8 || g->H * g->W > INT32_MAX / 2)
		return 0;
	for (int64_t pl = 0; pl < planes; pl++)
		grad_max2d_512(g, x + pl * g->H * g->W, dy + pl * g->OH * g->OW, dx + pl * g->H * g->W);
	return 1;
}

int hp_pool_grad_flat_f32(const float *x, const float *dy, float *dx, int64_t i0, int64_t i1, const int32_t *off,
			  const uint16_t *mask, int64_t ntaps, int64_t per)
{
	if (hp_pool_isa() < 2)
		return 0;
	grad_flat_512(x, dy, dx, i0, i1, off, mask, ntaps, per);
	return 1;
}

int hp_pool_fmax_f32(const float *x, float *y, int64_t i0, int64_t i1, const int32_t *off, const uint16_t *mask,
		     int64_t ntaps, int64_t per)
{
	if (hp_pool_isa() < 2)
		return 0;
	fmax_512(x, y, i0, i1, off, mask, ntaps, per);
	return 1;
}

int64_t hp_pool_max2_rows(const float *r0, const float *r1, float *y, int64_t n)
{
	/* AVX2 also where AVX-512 runs: a 512-bit version with two-source
	 * permutes measured 20% slower (U-Net 2x2, 2x16x128x128) */
	return hp_pool_isa() >= 1 ? max2_256(r0, r1, y, n) : 0;
}

int64_t hp_pool_gavg_f32(const float *x, float *y, int64_t np, int64_t n)
{
	return hp_pool_isa() >= 1 ? gavg_planes_256(x, y, np, n) : 0;
}

#else

int hp_pool_isa(void)
{
	return 0;
}

int64_t hp_pool_vmax_f32(float *b, const float *r, int64_t n, int first)
{
	(void)b, (void)r, (void)n, (void)first;
	return 0;
}

int64_t hp_pool_hmax_f32(const float *b, float *y, int64_t n, int s, int k, int dl)
{
	(void)b, (void)y, (void)n, (void)s, (void)k, (void)dl;
	return 0;
}

int hp_pool_plane_max_f32(const struct hp_pool_plane *g, const float *x, float *y)
{
	(void)g, (void)x, (void)y;
	return 0;
}

int hp_pool_plane_avg_f32(const struct hp_pool_plane *g, const float *x, float *y)
{
	(void)g, (void)x, (void)y;
	return 0;
}

int hp_pool_grad_max2d_f32(const struct hp_pool_grad2d *g, const float *x, const float *dy, float *dx,
			   int64_t planes)
{
	(void)g, (void)x, (void)dy, (void)dx, (void)planes;
	return 0;
}

int hp_pool_grad_flat_f32(const float *x, const float *dy, float *dx, int64_t i0, int64_t i1, const int32_t *off,
			  const uint16_t *mask, int64_t ntaps, int64_t per)
{
	(void)x, (void)dy, (void)dx, (void)i0, (void)i1, (void)off, (void)mask, (void)ntaps, (void)per;
	return 0;
}

int hp_pool_fmax_f32(const float *x, float *y, int64_t i0, int64_t i1, const int32_t *off, const uint16_t *mask,
		     int64_t ntaps, int64_t per)
{
	(void)x, (void)y, (void)i0, (void)i1, (void)off, (void)mask, (void)ntaps, (void)per;
	return 0;
}

int64_t hp_pool_max2_rows(const float *r0, const float *r1, float *y, int64_t n)
{
	(void)r0, (void)r1, (void)y, (void)n;
	return 0;
}

int64_t hp_pool_gavg_f32(const float *x, float *y, int64_t np, int64_t n)
{
	(void)x, (void)y, (void)np, (void)n;
	return 0;
}

#endif
