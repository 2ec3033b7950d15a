/* ConvGradData of a stride-1 convolution on tiny planes (conv_grad.c's
 * tiny path): ResNet-18 at 64x64, stage 4, 512 -> 512 channels on 2x2
 * planes at a batch of 4.
 *
 * Why: there the KxK path's tiles (conv_kxk.c, W' packed per micro-tile)
 * run at 56-84 GF/s per CPU-second, but their workspace (130 KB: a tile
 * buffer of every output channel) is 28 times the ConvTranspose path's it
 * would replace, which moved band plans under a budget (conv_grad.c,
 * kxk_ws_fits); ConvTranspose's sgemms of 4 columns ran at 30.  Here the
 * columns are dX's positions over blocks of whole batch items (planes of
 * at most HP_TINYD_MAX_PLANE positions, blocks of at most
 * HP_TINYD_MAX_COLS columns: one to three vectors of 16), the rows dX's
 * channels and k = (m, t) runs over dY's channels and the mirrored
 * window: each
 * worker packs dY's taps for a chunk of km channels, [k][16 * nv] with
 * zeros in the padding, and runs 8-row register tiles over its channels
 * with W's weights broadcast in place (W[m][c][kvol - 1 - t]: no packing
 * of W at all).  A chunk's running sums wait in dX (masked loads and
 * stores per batch item), so the workspace is km * kvol * 16 * nv floats
 * a worker, fitted to the replaced path's.
 *
 * Every dX element is one chain of fused multiply-adds from 0 over k =
 * (m, t) in order, taps in the padding included (w * 0): the KxK path's
 * chains (tests/kernels/test_train.c replays them), whatever the chunk,
 * the thread count or the band (a band's dY rows beyond its windows are
 * negative pads). */
#include <stdint.h>
#include <string.h>

#include "kernels/conv_impl.h"
#include "kernels/cpu.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define TD_X86 1
#define TD_TARGET __attribute__((target("avx512f,avx2,fma")))
#define TD_INLINE __attribute__((always_inline)) inline
#endif

#define TD_MR 8 /* dX channels per register tile */

static int64_t min64(int64_t a, int64_t b)
{
	return a < b ? a : b;
}

int hp_tinyd_available(void)
{
	return hp_cpu_avx512_fma();
}

/* Floats of a worker's packed taps for km channels of dY. */
static size_t td_floats(const struct hp_tinyd *t, int64_t km)
{
	return (size_t)(km * t->kvol * 16 * t->nv);
}

size_t hp_tinyd_workspace_min(const struct hp_tinyd *t)
{
	return td_floats(t, 1) * sizeof(float);
}

void hp_tinyd_fit(struct hp_tinyd *t, size_t bytes)
{
	size_t least = hp_tinyd_workspace_min(t);

	bytes = bytes > least ? bytes : least;
	t->ws_bytes = bytes;
}

size_t hp_tinyd_workspace(const struct hp_tinyd *t)
{
	return t->ws_bytes;
}

int hp_tinyd_plan(struct hp_tinyd *t, int64_t n, int64_t cx, int64_t cy, const int64_t *x, const int64_t *y,
		  const int64_t *k, const int64_t *d, const int64_t *p)
{
	memset(t, 0, sizeof *t);
	t->n = n, t->cx = cx, t->cy = cy;
	t->kvol = t->xvol = t->yvol = 1;
	for (int i = 0; i < 3; i++) {
		t->X[i] = x[i], t->Y[i] = y[i], t->K[i] = k[i], t->D[i] = d[i];
		t->P[i] = (k[i] - 1) * d[i] - p[i];
		t->kvol *= k[i], t->xvol *= x[i], t->yvol *= y[i];
	}
	if (!hp_tinyd_available() || t->xvol > HP_TINYD_MAX_PLANE || t->kvol > HP_TINYD_MAX_KVOL || cx < 1 || cy < 1 ||
	    n < 1 || n * cy * t->yvol >= INT32_MAX)
		return 0;
	/* blocks of whole items, so that a batch band's tiles are the whole
	 * node's (the path is chosen by the plane, never by the batch) */
	t->ipb = min64(n, HP_TINYD_MAX_COLS / t->xvol);
	t->cols = t->ipb * t->xvol;
	t->nv = (t->cols + 15) / 16;
	t->ws_bytes = hp_tinyd_workspace_min(t);
	return 1;
}

struct td_run {
	const struct hp_tinyd *t;
	const float *dy, *w;
	float *dx, *ws;
	const int32_t *off; /* [kvol][16 * nv]: dY's element of (tap, column) in channel 0 of a
			     * block's first item, or -1 */
	int64_t km, per_thread, tiles;
};

/* The (tap, column) table: tap t of the mirrored window at dX position i
 * reads dY at i - P + t * D. */
static void td_offsets(const struct hp_tinyd *t, int32_t *off)
{
	int64_t nc = 16 * t->nv;

	for (int64_t tap = 0; tap < t->kvol; tap++)
		for (int64_t j = 0; j < nc; j++) {
			int64_t tt[3] = { tap / (t->K[1] * t->K[2]), tap / t->K[2] % t->K[1], tap % t->K[2] };
			int64_t i = j % t->xvol, ii[3] = { i / (t->X[1] * t->X[2]), i / t->X[2] % t->X[1], i % t->X[2] };
			int64_t o = 0, in = j < t->cols;
			for (int q = 0; q < 3; q++) {
				int64_t v = ii[q] - t->P[q] + tt[q] * t->D[q];
				in &= v >= 0 && v < t->Y[q];
				o = o * t->Y[q] + v;
			}
			off[tap * nc + j] = in ? (int32_t)(j / t->xvol * t->cy * t->yvol + o) : -1;
		}
}

#ifdef TD_X86
/* b[(mm, tap)][16 * nv] for dY's channels m0 + mm, mm < km, of the
 * block of items from nb0 on (ncols of its columns). */
static void td_pack(const struct td_run *r, int64_t nb0, int64_t ncols, int64_t m0, int64_t km, float *b)
{
	const struct hp_tinyd *t = r->t;
	int64_t nc = 16 * t->nv, rows = km * t->kvol;

	for (int64_t q = 0; q < rows; q++) {
		const int32_t *o = r->off + q % t->kvol * nc;
		const float *src = r->dy + (nb0 * t->cy + m0 + q / t->kvol) * t->yvol;
		for (int64_t j = 0; j < nc; j++)
			b[q * nc + j] = j < ncols && o[j] >= 0 ? src[o[j]] : 0.0f;
	}
}

/* Lanes of vector v of the columns that belong to batch item nb. */
static TD_INLINE __mmask16 td_mask(const struct hp_tinyd *t, int v, int64_t nb)
{
	int64_t lo = nb * t->xvol - 16 * v, hi = lo + t->xvol;
	uint32_t m = 0;

	lo = lo > 0 ? lo : 0;
	hi = hi < 16 ? hi : 16;
	for (int64_t l = lo; l < hi; l++)
		m |= 1u << l;
	return (__mmask16)m;
}

/* Rows c0 .. c0 + mr of dX, dY channels [m0, m0 + km) from packed b. */
TD_TARGET static TD_INLINE void td_tile(const struct td_run *r, const int mr, const int nv, int64_t c0, int64_t m0,
					int64_t km, const float *b, float *dx, int64_t items)
{
	const struct hp_tinyd *t = r->t;
	int64_t kv = t->kvol, nc = 16 * nv;
	__m512 acc[TD_MR][3];

	#pragma GCC unroll 8
	for (int i = 0; i < mr; i++)
		#pragma GCC unroll 8
		for (int v = 0; v < nv; v++)
			acc[i][v] = _mm512_setzero_ps();
	if (m0 > 0) /* the running sums of the chunks before */
		for (int64_t nb = 0; nb < items; nb++)
			#pragma GCC unroll 8
			for (int v = 0; v < nv; v++) {
				__mmask16 mk = td_mask(t, v, nb);
				if (!mk)
					continue;
				#pragma GCC unroll 8
				for (int i = 0; i < mr; i++)
					acc[i][v] = _mm512_mask_loadu_ps(acc[i][v], mk,
									 dx + (nb * t->cx + c0 + i) * t->xvol -
										 nb * t->xvol + 16 * v);
			}
	for (int64_t mm = 0; mm < km; mm++) {
		const float *wm = r->w + ((m0 + mm) * t->cx + c0) * kv + kv - 1;
		/* the next tile's weights of this m: the tiles read W once, in
		 * km runs of TD_MR * kvol floats 18 KB apart (3x3-tiny), which
		 * the hardware prefetch did not follow (32-79 -> 102-124 GF/s) */
		for (int64_t l = 0; l < TD_MR * kv; l += 16)
			_mm_prefetch((const char *)(wm + 1 - kv + TD_MR * kv + l), _MM_HINT_T0);
		for (int64_t tap = 0; tap < kv; tap++) {
			const float *bq = b + (mm * kv + tap) * nc;
			__m512 b0 = _mm512_loadu_ps(bq), b1 = b0, b2 = b0;
			if (nv > 1)
				b1 = _mm512_loadu_ps(bq + 16);
			if (nv > 2)
				b2 = _mm512_loadu_ps(bq + 32);
			#pragma GCC unroll 8
			for (int i = 0; i < mr; i++) {
				__m512 wv = _mm512_set1_ps(wm[i * kv - tap]);
				acc[i][0] = _mm512_fmadd_ps(wv, b0, acc[i][0]);
				if (nv > 1)
					acc[i][1] = _mm512_fmadd_ps(wv, b1, acc[i][1]);
				if (nv > 2)
					acc[i][2] = _mm512_fmadd_ps(wv, b2, acc[i][2]);
			}
		}
	}
	for (int64_t nb = 0; nb < items; nb++)
		#pragma GCC unroll 8
		for (int v = 0; v < nv; v++) {
			__mmask16 mk = td_mask(t, v, nb);
			if (!mk)
				continue;
			#pragma GCC unroll 8
			for (int i = 0; i < mr; i++)
				_mm512_mask_storeu_ps(dx + (nb * t->cx + c0 + i) * t->xvol - nb * t->xvol + 16 * v, mk,
						      acc[i][v]);
		}
}

#define TD_CASE(R)                                                                 \
	case R:                                                                    \
		if (nv == 1)                                                       \
			td_tile(r, R, 1, c0, m0, km, b, dx, items);                \
		else if (nv == 2)                                                  \
			td_tile(r, R, 2, c0, m0, km, b, dx, items);                \
		else                                                               \
			td_tile(r, R, 3, c0, m0, km, b, dx, items);                \
		break;

TD_TARGET static void td_micro(const struct td_run *r, int mr, int nv, int64_t c0, int64_t m0, int64_t km,
			       const float *b, float *dx, int64_t items)
{
	switch (mr) {
		TD_CASE(1)
		TD_CASE(2)
		TD_CASE(3)
		TD_CASE(4)
		TD_CASE(5)
		TD_CASE(6)
		TD_CASE(7)
		TD_CASE(8)
	default:
		break;
	}
}

/* Units [b, e) of (block of items, row tile), the tile fastest: per
 * block, every chunk of dY's channels in order over its tiles. */
static void td_range(void *arg, int64_t b, int64_t e, int tid)
{
	const struct td_run *r = arg;
	const struct hp_tinyd *t = r->t;
	float *buf = r->ws + tid * r->per_thread;

	while (b < e) {
		int64_t blk = b / r->tiles, t0 = b % r->tiles, t1 = min64(r->tiles, t0 + (e - b));
		int64_t nb0 = blk * t->ipb, items = min64(t->ipb, t->n - nb0);
		float *dx = r->dx + nb0 * t->cx * t->xvol;
		for (int64_t m0 = 0; m0 < t->cy; m0 += r->km) {
			int64_t km = min64(r->km, t->cy - m0);
			td_pack(r, nb0, items * t->xvol, m0, km, buf);
			for (int64_t tile = t0; tile < t1; tile++) {
				int64_t c0 = tile * TD_MR;
				td_micro(r, (int)min64(TD_MR, t->cx - c0), (int)t->nv, c0, m0, km, buf, dx, items);
			}
		}
		b += t1 - t0;
	}
}
#else
static void td_range(void *arg, int64_t b, int64_t e, int tid)
{
	(void)arg, (void)b, (void)e, (void)tid;
}
#endif

void hp_tinyd_run(const struct hp_tinyd *t, const float *dy, const float *w, float *dx, float *ws,
		  struct hp_pool *pool)
{
	int32_t off[HP_TINYD_MAX_KVOL * HP_TINYD_MAX_COLS];
	struct td_run r = { .t = t, .dy = dy, .w = w, .dx = dx, .ws = ws, .off = off };
	int saved, threads = hp_conv_threads_enter(pool, &saved);
	int64_t tiles = (t->cx + TD_MR - 1) / TD_MR, cap = (int64_t)(t->ws_bytes / sizeof(float));
	int64_t units = (t->n + t->ipb - 1) / t->ipb * tiles;
	int64_t one = (int64_t)td_floats(t, 1);

	td_offsets(t, off);
	/* fewer workers rather than chunks shorter than 4 channels of dY */
	while (threads > 1 && cap / threads < 4 * one)
		threads--;
	threads = (int64_t)threads < units ? threads : (int)units;
	threads = threads > 1 ? threads : 1;
	r.km = min64(cap / threads / one, t->cy);
	r.per_thread = r.km * one;
	r.tiles = tiles;
	hp_conv_parallel(pool, threads, units, td_range, &r);
	hp_conv_threads_leave(saved);
}
