/* KxK Conv forward as register-blocked chains of fused multiply-adds (the
 * "kxk" path): Y[m][j] = b[m] + sum_k W[m][k] P[k][j], k = (c, kd, kh, kw)
 * in W's ONNX order, P the input patches of output position j.
 *
 * Why: 3x3 convolutions ran on the shift path (kvol sgemms over shifted
 * slabs, OpenBLAS packing W per call), the dot path (patch rows, about 55
 * GF/s per thread) or im2col; none reached 75% of the sgemm peak, and the
 * sgemm paths round a column by the call's width (conv_tile.c), which
 * pinned their tiles and left one thread idle on small planes.  Here the
 * design of conv_pw.c carries over, with the panel of X replaced by a
 * panel of patches gathered straight from the image:
 *  - W is read in place (its rows are broadcast), so there is no weight
 *    packing at all, per call or per weights version;
 *  - the patches of a block of KX_NB output columns are taken per chunk
 *    of KX_KC k as 16-column panels, no im2col of the tile: where 16
 *    columns of one output row read the image at stride 1, each tap is a
 *    pointer into the image row (or into one zero-padded copy of it at the
 *    image's edges, shared by the row's kw taps); other panels (columns
 *    across rows, strides) are gathered into [k][16] with zeros where a
 *    tap falls into the padding;
 *  - each output is one chain over k = 0, 1, ..., K-1 from its bias (or
 *    0), padding taps included; a chunk of k stores its running sums to Y
 *    and the next reloads them.  The bits therefore depend on no blocking,
 *    thread count, batch band or row band (a band's pads are the taps the
 *    whole node pads);
 *  - the work is cut into units of 6 output channels by KX_NB columns,
 *    taken in runs (whole column blocks when there are enough, else one
 *    run per thread, so that both threads share even a 7x7 plane at a
 *    batch of one) that are stolen (hp_conv_steal): each thread takes its
 *    share's front to back, then the back of a late thread's share, so a
 *    worker woken late (without polling: a futex wake-up of a halted
 *    vCPU, 0.1 ms and more) holds nobody up, and each thread keeps the
 *    same half of the planes from one layer to the next;
 *  - planes of fewer than KX_SPAN_VOL positions at larger batches take
 *    blocks of columns across batch items (ResNet's 2x2 and 4x4 stages
 *    at 64x64);
 *  - FusedConv's Relu or Clip after a full addend is applied in registers
 *    to each micro-tile after its last k chunk, other epilogues by
 *    hp_epi_span on the micro-tile's rows while they are in cache. */
#include <limits.h>
#include <stdint.h>
#include <string.h>

#include "kernels/conv_impl.h"
#include "kernels/fused_impl.h"
#include "kernels/fma_tile.h"
#include "kernels/conv_kxk.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define KX_X86 1
#define KX_TARGET __attribute__((target("avx2,fma")))
#define KX_INLINE __attribute__((always_inline)) inline
#endif

/* Row stride of a micro-tile's W' packed per k chunk (kx_flip_tile512). */
#define KX_FLIP_LD (KX_KC + 16)
/* Flipped weights of at least this many floats are packed by all workers. */
#define KX_FLIP_PAR_MIN (1 << 16)

static int kxk_mode; /* 0 auto, 1 whenever possible, -1 never */

void hp_conv_set_kxk(int mode)
{
	kxk_mode = mode;
}

int hp_conv_kxk_mode(void)
{
	return kxk_mode;
}

static int64_t min64(int64_t a, int64_t b)
{
	return a < b ? a : b;
}

int hp_kxk_available(void)
{
	return hp_dot_available();
}

/* Conv nodes only (the gradients' forwards keep their paths); gather
 * offsets are 32-bit: one channel plane of the image must fit. */
int hp_kxk_eligible(const struct hp_conv *cv)
{
	return cv->node && !cv->transpose && !cv->wflip && hp_kxk_available() && cv->g.img_vol < INT_MAX / 2 &&
	       cv->g.grid_vol < INT_MAX / 2;
}

/* The stride-1 dX of a Conv as a Conv of dY with W transposed and
 * mirrored (conv_grad.c), where the AVX-512 tiles run: W is packed per
 * call, W'[g][m][c][k] = W[g][c][m][kvol - 1 - k], ahead of the workers'
 * areas; then the same chains as a Conv node's over W'. */
int hp_kxk_flip_eligible(const struct hp_conv *cv)
{
	return cv->wflip && !cv->transpose && hp_kxk_available() && hp_kxk_wide_ok() &&
	       cv->g.img_vol < INT_MAX / 2 && cv->g.grid_vol < INT_MAX / 2;
}

static int kx_span(const struct hp_conv *cv);
static int64_t kx_colspace(const struct hp_conv *cv);
static int64_t kx_block_cols(const struct hp_conv *cv);

/* Whether W' is packed per (micro-tile, k chunk) as blocks take them,
 * into the worker's area (kx_flip_tile), rather than whole per call: when
 * every weight is taken by one column block only (a plane, or the batch's
 * planes, of at most KX_NB columns), so packing it there costs no more
 * and W' never goes through memory (3x3-tiny of hpdlf-bench-conv-libs:
 * 9.4 MB of W' for 75 MFLOP). */
static int kx_flip_lazy(const struct hp_conv *cv)
{
	return cv->wflip && (kx_span(cv) || cv->batch == 1) && kx_colspace(cv) <= kx_block_cols(cv);
}

/* Floats of the packed W' (a whole number of cache lines), 0 unflipped
 * or packed per micro-tile. */
static int64_t kx_flip_floats(const struct hp_conv *cv)
{
	return cv->wflip && !kx_flip_lazy(cv) ? (cv->cout * cv->kdim + 15) / 16 * 16 : 0;
}

/* Whether column blocks span batch items: planes of fewer than
 * KX_SPAN_VOL positions (ResNet's last stages at small inputs) would leave
 * most lanes of a 16-column panel empty.  The chains are the same; the
 * rows go to Y through a tile buffer. */
#define KX_SPAN_VOL 64
static int kx_span(const struct hp_conv *cv)
{
	return cv->batch > 1 && cv->yvol < KX_SPAN_VOL && cv->batch * cv->cin * cv->xvol < INT_MAX / 2;
}

/* Floats per worker: panels of a k chunk, and a spanning block's tile. */
/* Floats of one panel's area: kc tap pointers, then kc packed taps or the
 * rows they read (at most kc / k2 + 2 rows of 16 + ext floats, ext <=
 * 16 * (k2 - 1): kx_rows_ok) and a row of zeros. */
static int64_t kx_row_floats(const struct hp_colgeom *g)
{
	return (KX_NR + (g->k[2] - 1) * g->dil[2] + 7) / 8 * 8;
}

static int64_t kx_panel_floats(const struct hp_conv *cv)
{
	int64_t kc = min64(cv->kdim, KX_KC);

	return kc * (KX_NR + 2) + 3 * kx_row_floats(&cv->g);
}

/* The column space: a plane, or the batch's planes when blocks span items. */
static int64_t kx_colspace(const struct hp_conv *cv)
{
	return kx_span(cv) ? cv->batch * cv->yvol : cv->yvol;
}

/* Columns per block: KX_NB; half that for a node with one worker's
 * workspace that may take narrower blocks (attributes hpdlf_lean and
 * hpdlf_narrow: an inference band under a tight budget) whose column
 * space is at most two blocks, where the panels are most of what its step
 * holds (the tiny 3-D U-Net's 16-channel 8x8x8 bands: 146 KiB of panels
 * for 64 KiB of tensors).  Blocks are ranges of whole chains, so any
 * width gives the same bits.  Not in training: the band search then
 * chose LeNet's 6 one-worker bands at 200000 bytes, a batch cut its second
 * convolution's tiles cut again (halo Slices), where it ran 8. */
static int64_t kx_block_cols(const struct hp_conv *cv)
{
	int64_t cols = kx_colspace(cv);

	if (cv->narrow && cols <= 2 * KX_NB)
		return KX_NB / 2;
	/* few blocks: an even number of equal ones (hp_conv_even_block); a
	 * Conv node's single block cut too (not a gradient's: kx_flip_lazy
	 * packs its W' per micro-tile where one block takes every weight) */
	return hp_conv_even_block(cols, KX_NB, KX_NR, (kx_span(cv) ? 1 : cv->batch) * cv->group, !cv->wflip);
}

/* Columns of a worker's block area: a block's, or fewer when the column
 * space is smaller: its one block's panels and tile need no more (a band
 * of a few rows or samples of small planes held twice its tensors' bytes
 * in panels).  The row-run blocks that do not fit the smaller area pack
 * theirs instead: the same bits (tests/kernels/test_conv.c, test_kxk_run). */
static int64_t kx_area_cols(const struct hp_conv *cv)
{
	int64_t cols = kx_colspace(cv), nb = kx_block_cols(cv);

	if (cols >= nb)
		return nb;
	return (cols + KX_NR - 1) / KX_NR * KX_NR;
}

static int64_t kx_per_thread(const struct hp_conv *cv)
{
	int64_t mt = (cv->cout_g + KX_MR - 1) / KX_MR, nb = kx_area_cols(cv);

	return nb / KX_NR * kx_panel_floats(cv) + (kx_span(cv) ? mt * KX_MR * nb : 0) +
	       (kx_flip_lazy(cv) ? 2 * KX_MR * KX_FLIP_LD : 0);
}

size_t hp_kxk_workspace(const struct hp_conv *cv, int threads)
{
	return ((size_t)threads * (size_t)kx_per_thread(cv) + (size_t)kx_flip_floats(cv)) * sizeof(float);
}

size_t hp_kxk_workspace_most(const struct hp_conv *cv, int threads)
{
	struct hp_conv one = *cv, many = *cv;
	size_t a, b;

	one.batch = 1;
	many.batch = KX_NB + 1; /* every block full, spanning items where they do, W' packed whole */
	a = hp_kxk_workspace(&one, threads);
	b = hp_kxk_workspace(&many, threads);
	return a > b ? a : b;
}

/* Image coordinates of the first tap of 16 output columns (lanes past the
 * block's end far outside the image) and whether they are one run of a
 * single output row read at stride 1. */
struct kx_cols {
	int32_t d[KX_NR], h[KX_NR], w[KX_NR];
	int32_t base[KX_NR];     /* the lane's batch item's offset (spanning blocks) */
	int run;                 /* lanes 0..n-1 share d and h, w consecutive */
	int n;                   /* columns in the panel */
};

/* Columns j0 .. j0 + n - 1 of a column space of batch items of `vol`
 * positions each, items `istride` floats apart in the image. */
static void kx_cols_of(const struct hp_colgeom *g, int64_t j0, int n, int64_t vol, int64_t istride,
		       struct kx_cols *c)
{
	int64_t o1 = g->grid[1], o2 = g->grid[2];

	c->n = n;
	c->run = g->stride[2] == 1;
	for (int l = 0; l < KX_NR; l++) {
		int64_t j = (j0 + l) % vol, od = j / (o1 * o2), oh = j / o2 % o1, ow = j % o2;
		c->base[l] = (int32_t)((j0 + l) / vol * istride);
		c->d[l] = l < n ? (int32_t)(od * g->stride[0] - g->pad[0]) : INT_MIN / 2;
		c->h[l] = (int32_t)(oh * g->stride[1] - g->pad[1]);
		c->w[l] = (int32_t)(ow * g->stride[2] - g->pad[2]);
		if (l > 0 && l < n &&
		    (c->base[l] != c->base[0] || c->d[l] != c->d[0] || c->h[l] != c->h[0] || c->w[l] != c->w[0] + l))
			c->run = 0;
	}
}

#ifdef KX_X86

/* W' rows of source channels [b, e) of all groups (flat g * cin_g + c):
 * each source row [cout_g][kvol] is read once, in order, and goes to
 * cout_g rows of W' at column c * kvol, mirrored. */
struct kx_flip {
	const struct hp_conv *cv;
	const float *w;
	float *wf;
};

static void kx_flip_range(void *arg, int64_t b, int64_t e, int tid)
{
	const struct kx_flip *f = arg;
	const struct hp_conv *cv = f->cv;
	int64_t kv = cv->g.kvol, og = cv->cout_g, ig = cv->cin_g, K = cv->kdim;
	int64_t wkv = cv->wtap ? cv->wkvol : kv;

	(void)tid;
	for (int64_t gc = b; gc < e; gc++) {
		int64_t g = gc / ig, c = gc % ig;
		const float *src = f->w + gc * og * wkv;
		float *dst = f->wf + g * og * K + c * kv + kv - 1;
		if (cv->wtap) {
			dst -= kv - 1;
			for (int64_t m = 0; m < og; m++, src += wkv, dst += K)
				for (int64_t k = 0; k < kv; k++)
					dst[k] = src[cv->wtap[k]];
			continue;
		}
		for (int64_t m = 0; m < og; m++, src += kv, dst += K)
			for (int64_t k = 0; k < kv; k++)
				dst[-k] = src[k];
	}
}


/* Lanes with 0 <= v < lim. */
KX_TARGET static KX_INLINE __m256i kx_in(__m256i v, int32_t lim)
{
	return _mm256_andnot_si256(_mm256_cmpgt_epi32(_mm256_setzero_si256(), v),
				   _mm256_cmpgt_epi32(_mm256_set1_epi32(lim), v));
}

/* The 16 + ext image elements of row (id, ih) from iw on that a run of
 * panel columns reads over the kw taps: the image itself when they lie
 * inside it, else a copy at *dst (zeros outside the image; R floats,
 * masked vector loads whose masked lanes are never read), or the shared
 * row of zeros. */
KX_TARGET static KX_INLINE const float *kx_row(const float *xc, int32_t id, int32_t ih, int32_t iw, int32_t D, int32_t H,
				     int32_t W, int32_t len, int64_t R, float **dst, const float **zrow)
{
	const float *s;
	float *o = *dst;

	if (id < 0 || id >= D || ih < 0 || ih >= H) {
		if (!*zrow) {
			memset(o, 0, (size_t)R * sizeof(float));
			*zrow = o;
			*dst += R;
		}
		return *zrow;
	}
	s = xc + ((int64_t)id * H + ih) * W;
	if (iw >= 0 && iw + (int32_t)R <= W)
		return s + iw;
	/* o[q] = s[iw + q] for q in [lo, hi), zeros around (masked loads
	 * were 40% of the packing on AMD): zeros over all R floats (a
	 * multiple of 8), then the row's part in whole vectors and a scalar
	 * tail (16-wide planes copy every row: the scalar loop was half of
	 * class 3x3-r16's packing) */
	int32_t lo = iw < 0 ? -iw : 0, hi = W - iw < len ? W - iw : len, q = lo;
	for (int64_t v = 0; v < R; v += 8)
		_mm256_storeu_ps(o + v, _mm256_setzero_ps());
	for (; q + 8 <= hi; q += 8)
		_mm256_storeu_ps(o + q, _mm256_loadu_ps(s + iw + q));
	for (; q < hi; q++)
		o[q] = s[iw + q];
	*dst += R;
	return o;
}

/* Rows may be shared by a run's kw taps when the row copies fit the
 * panel's area (kx_panel_floats). */
static int kx_rows_ok(const struct hp_colgeom *g, const struct kx_cols *c)
{
	return c->run && g->dil[2] <= KX_NR;
}

/* The row path of kx_pack: one row (ch, kd, kh) after the other, its kw
 * taps pointing into it. */
KX_TARGET static void kx_pack_rows(const struct hp_colgeom *g, const float *x, const struct kx_cols *c, int64_t k0,
				   int64_t kc, float *dst, const float **ind)
{
	int64_t kv = g->kvol, k12 = g->k[1] * g->k[2], R = kx_row_floats(g), t = k0 % kv;
	int32_t D = (int32_t)g->img[0], H = (int32_t)g->img[1], W = (int32_t)g->img[2];
	int32_t len = c->n + (int32_t)((g->k[2] - 1) * g->dil[2]), k2 = (int32_t)g->k[2];
	int32_t kd = (int32_t)(t / k12), kh = (int32_t)(t / k2 % g->k[1]), kw = (int32_t)(t % k2);
	const float *xc = x + k0 / kv * g->img_vol + c->base[0], *zrow = NULL;

	for (int64_t i = 0; i < kc; kw = 0) {
		const float *row = kx_row(xc, c->d[0] + kd * (int32_t)g->dil[0], c->h[0] + kh * (int32_t)g->dil[1],
					  c->w[0], D, H, W, len, R, &dst, &zrow);
		for (; kw < k2 && i < kc; kw++)
			ind[i++] = row + kw * g->dil[2];
		if (++kh == g->k[1]) {
			kh = 0;
			if (++kd == g->k[0]) {
				kd = 0;
				xc += g->img_vol;
			}
		}
	}
}

/* ind[k - k0] = where the 16 values of tap k (k0 <= k < k0 + kc) for the
 * panel's columns are: in the image itself or in a row copy (a run of one
 * output row at stride 1: its kw taps read the same row, shifted), else
 * gathered into dst (columns across rows, strides); zeros outside the
 * image and past the columns. */
KX_TARGET static void kx_pack(const struct hp_colgeom *g, const float *x, const struct kx_cols *c, int64_t k0,
			      int64_t kc, float *dst, const float **ind)
{
	int64_t kv = g->kvol, k12 = g->k[1] * g->k[2];
	int32_t D = (int32_t)g->img[0], H = (int32_t)g->img[1], W = (int32_t)g->img[2];
	__m256i vd[2], vh[2], vw[2], vb[2];

	if (kx_rows_ok(g, c)) {
		kx_pack_rows(g, x, c, k0, kc, dst, ind);
		return;
	}

	for (int v = 0; v < 2; v++) {
		vb[v] = _mm256_loadu_si256((const __m256i *)(c->base + 8 * v));
		vd[v] = _mm256_loadu_si256((const __m256i *)(c->d + 8 * v));
		vh[v] = _mm256_loadu_si256((const __m256i *)(c->h + 8 * v));
		vw[v] = _mm256_loadu_si256((const __m256i *)(c->w + 8 * v));
	}
	int64_t ch = k0 / kv, t = k0 % kv;
	int32_t kd = (int32_t)(t / k12), kh = (int32_t)(t / g->k[2] % g->k[1]), kw = (int32_t)(t % g->k[2]);

	/* (ch, kd, kh, kw) of k counted up, not divided out per k */
	for (int64_t k = k0; k < k0 + kc; k++, kw = kw + 1 == g->k[2] ? 0 : kw + 1) {
		if (k > k0 && kw == 0 && ++kh == g->k[1]) {
			kh = 0;
			if (++kd == g->k[0]) {
				kd = 0;
				ch++;
			}
		}
		int32_t dd = kd * (int32_t)g->dil[0], dh = kh * (int32_t)g->dil[1], dw = kw * (int32_t)g->dil[2];
		const float *xc = x + ch * g->img_vol;
		for (int v = 0; v < 2; v++) {
			__m256i a = _mm256_add_epi32(vd[v], _mm256_set1_epi32(dd));
			__m256i b = _mm256_add_epi32(vh[v], _mm256_set1_epi32(dh));
			__m256i e = _mm256_add_epi32(vw[v], _mm256_set1_epi32(dw));
			__m256i ok = _mm256_and_si256(_mm256_and_si256(kx_in(a, D), kx_in(b, H)), kx_in(e, W));
			__m256i off = _mm256_add_epi32(
				_mm256_mullo_epi32(_mm256_add_epi32(_mm256_mullo_epi32(a, _mm256_set1_epi32(H)), b),
						   _mm256_set1_epi32(W)),
				_mm256_add_epi32(e, vb[v]));
			_mm256_storeu_ps(dst + 8 * v, _mm256_mask_i32gather_ps(_mm256_setzero_ps(), xc, off,
									       _mm256_castsi256_ps(ok), 4));
		}
		ind[k - k0] = dst;
		dst += KX_NR;
	}
}




/* y[r][0..ncols) (+)= the chain over k < kc of a[r][k] * bp[k][16], rows
 * r < mr, nv vectors of columns; first: start from the bias (or 0); f (the
 * last k chunk of a fused node): its epilogue with the addend at add. */
KX_TARGET static KX_INLINE void kx_tile(const int mr, const int nv, int64_t kc, const float *a, int64_t lda,
					const float *const *bp, float *y, int64_t ldy, int ncols, int first,
					const float *bias, const struct hp_fma_fin *f, const float *add)
{
	__m256 acc[KX_MR][2];
	__m256i mk[2] = { fma_mask(ncols), fma_mask(ncols - 8) };
	int full = ncols == 8 * nv;

	for (int r = 0; r < mr; r++)
		for (int v = 0; v < nv; v++)
			acc[r][v] = first ? (bias ? _mm256_set1_ps(bias[r]) : _mm256_setzero_ps())
				: full ? _mm256_loadu_ps(y + r * ldy + 8 * v)
				       : _mm256_maskload_ps(y + r * ldy + 8 * v, mk[v]);
	for (int64_t k = 0; k < kc; k++) {
		__m256 b0 = _mm256_loadu_ps(bp[k]), b1 = b0;
		if (nv > 1)
			b1 = _mm256_loadu_ps(bp[k] + 8);
		for (int r = 0; r < mr; r++) {
			__m256 w = _mm256_broadcast_ss(a + r * lda + k);
			acc[r][0] = _mm256_fmadd_ps(w, b0, acc[r][0]);
			if (nv > 1)
				acc[r][1] = _mm256_fmadd_ps(w, b1, acc[r][1]);
		}
	}
	fma_store_acc(acc, mr, nv, y, ldy, ncols, full);
	/* a pass of its own over the tile in L1 (see conv_pw.c: inside the
	 * loop GCC kept the accumulators in memory) */
	if (f)
		fma_finish_tile(mr, nv, y, ldy, ncols, f, add);
}

#define KX_CASE(R)                                                                                    \
	case R:                                                                                        \
		if (nv == 1)                                                                           \
			kx_tile(R, 1, kc, a, lda, bp, y, ldy, ncols, first, bias, f, add);             \
		else                                                                                   \
			kx_tile(R, 2, kc, a, lda, bp, y, ldy, ncols, first, bias, f, add);             \
		break;

KX_TARGET static void kx_micro(int mr, int64_t kc, const float *a, int64_t lda, const float *const *bp, float *y,
			       int64_t ldy, int ncols, int first, const float *bias, const struct hp_fma_fin *f,
			       const float *add)
{
	int nv = ncols > 8 ? 2 : 1;

	switch (mr) {
		KX_CASE(1)
		KX_CASE(2)
		KX_CASE(3)
		KX_CASE(4)
		KX_CASE(5)
		KX_CASE(6)
	default:
		break;
	}
}

/* Spanning blocks: rows of a spanning block, stored to the worker's tile
 * buffer tmp ([rows][nc]) as they finish, go to Y item by item, then the
 * epilogue (hp_epi_span: fused_epi.c's bits). */
static void kx_scatter(const struct kx_run *r, int64_t g, int64_t j0, int64_t nc, int64_t m0, int64_t m1,
		       const float *tmp)
{
	const struct hp_conv *cv = r->cv;

	for (int64_t m = m0; m < m1; m++)
		for (int64_t j = j0; j < j0 + nc;) {
			int64_t nb = j / cv->yvol, pos = j % cv->yvol, len = min64(cv->yvol - pos, j0 + nc - j);
			int64_t i = (nb * cv->cout + g * cv->cout_g + m) * cv->yvol + pos;
			memcpy(r->y + i, tmp + (m - m0) * nc + (j - j0), (size_t)len * sizeof(float));
			if (r->epi)
				hp_epi_span(r->epi, r->y, r->addend, i, i + len);
			j += len;
		}
}

/* dst[r][k - k0] = W'[g][m0 + r][k] for r < mr, k0 <= k < k0 + kc, from
 * W [cin][cout_g][kvol] (W'[m][c][t] = W[c][m][kvol - 1 - t]): per
 * channel c the mr rows' taps are one run of W; whole windows of up to 16
 * taps mirrored in a register where the CPU has AVX-512. */
__attribute__((target("avx512f"))) static void kx_flip_tile512(const struct hp_conv *cv, const float *w, int64_t g,
							      int64_t m0, int64_t mr, int64_t k0, int64_t kc,
							      float *dst)
{
	int64_t kv = cv->g.kvol, og = cv->cout_g, ig = cv->cin_g, wkv = cv->wtap ? cv->wkvol : kv;
	int32_t tap[16];
	__m512i idx;
	__mmask16 mk = (__mmask16)((1u << (wkv < 16 ? wkv : 16)) - 1);

	for (int t = 0; t < 16; t++) /* lanes past kv: any source lane */
		tap[t] = t >= kv ? 0 : cv->wtap ? cv->wtap[t] : (int32_t)(kv - 1 - t);
	idx = _mm512_loadu_si512(tap);
	/* channels outer, their mr rows' taps one run of W; a window's
	 * whole-vector store runs over the slots of the next, stored after
	 * it, or into the row's 16 floats of slack */
	for (int64_t k = k0; k < k0 + kc;) {
		int64_t c = k / kv, t0 = k % kv, t1 = min64(kv, t0 + (k0 + kc - k));
		const float *src = w + ((g * ig + c) * og + m0) * wkv;
		float *o = dst + (k - k0);
		if (t0 == 0 && t1 == kv && wkv <= 16)
			for (int64_t r = 0; r < mr; r++, src += wkv, o += KX_FLIP_LD)
				_mm512_storeu_ps(o, _mm512_permutexvar_ps(idx, _mm512_maskz_loadu_ps(mk, src)));
		else if (cv->wtap)
			for (int64_t r = 0; r < mr; r++, src += wkv, o += KX_FLIP_LD)
				for (int64_t t = t0; t < t1; t++)
					o[t - t0] = src[cv->wtap[t]];
		else
			for (int64_t r = 0; r < mr; r++, src += kv, o += KX_FLIP_LD)
				for (int64_t t = t0; t < t1; t++)
					o[t - t0] = src[kv - 1 - t];
		k += t1 - t0;
	}
}

/* Micro-tiles of rows t0..t1 of one (item, group) over its columns
 * [j0, j0 + nc) (spanning: of one group over columns of the batch),
 * k chunk by k chunk; bp holds the chunk's panels. */
static void kx_block(const struct kx_run *r, int64_t bg, int64_t j0, int64_t nc, int64_t t0, int64_t t1,
		     float *bp, float *tmp, float *wt)
{
	const struct hp_conv *cv = r->cv;
	int64_t nb = r->span ? 0 : bg / cv->group, g = r->span ? bg : bg % cv->group, K = cv->kdim, M = cv->cout_g;
	const float *x = r->x + (nb * cv->cin + g * cv->cin_g) * cv->xvol;
	const float *w = r->w + g * M * K, *bias = r->b ? r->b + g * M : NULL;
	int64_t lda = K;
	int64_t ybase = (nb * cv->cout + g * M) * cv->yvol, np = (nc + KX_NR - 1) / KX_NR;
	int64_t ldy = r->span ? nc : cv->yvol;
	struct kx_cols cols[KX_NB / KX_NR];
	int wide = hp_kxk_wide_ok();

	for (int64_t p = 0; p < np; p++)
		kx_cols_of(&cv->g, j0 + p * KX_NR, (int)min64(KX_NR, nc - p * KX_NR), cv->yvol, cv->cin * cv->xvol,
			   &cols[p]);
	for (int64_t k0 = 0; k0 < K; k0 += KX_KC) {
		int64_t kc = min64(KX_KC, K - k0);
		const struct hp_fma_fin *fin = r->fin_ok && k0 + kc == K ? &r->fin : NULL;
		for (int64_t p = 0; p < np; p++)
			kx_pack(&cv->g, x, &cols[p], k0, kc, bp + p * r->pf + 2 * min64(K, KX_KC),
				(const float **)(void *)(bp + p * r->pf));
		for (int64_t t = t0, dt; t < t1; t += dt) {
			int64_t m0 = kx_tile_m0(M, r->mt, t), mr = kx_tile_rows(M, r->mt, t);
			/* a lone panel: two micro-tiles of rows as one AVX-512 tile */
			dt = wide && np == 1 && t + 1 < t1 ? 2 : 1;
			const float *wa = w + m0 * K + k0;
			if (r->wlazy) { /* W' of the micro-tile(s) for this k chunk */
				int64_t rows = mr + (dt == 2 ? kx_tile_rows(M, r->mt, t + 1) : 0);
				kx_flip_tile512(cv, r->w, g, m0, rows, k0, kc, wt);
				wa = wt;
				lda = KX_FLIP_LD;
			}
			if (wide && np == 1) {
				int64_t off = r->span ? (m0 - kx_tile_m0(M, r->mt, t0)) * nc : ybase + m0 * cv->yvol + j0;
				mr += dt == 2 ? kx_tile_rows(M, r->mt, t + 1) : 0;
				hp_kxk_tall_micro((int)mr, kc, (const float *const *)(void *)bp, wa, lda,
						  (r->span ? tmp : r->y) + off, ldy, cols[0].n, k0 == 0,
						  bias ? bias + m0 : NULL, fin, fin && r->fin_add ? r->addend + off : NULL);
			}
			for (int64_t p = 0, d; p < np && !(wide && np == 1); p += d) {
				int64_t off = r->span ? (m0 - kx_tile_m0(M, r->mt, t0)) * nc + p * KX_NR
						      : ybase + m0 * cv->yvol + j0 + p * KX_NR;
				const float *const *t = (const float *const *)(void *)(bp + p * r->pf);
				/* two full panels side by side: one AVX-512 tile */
				d = wide && p + 1 < np && cols[p].n == KX_NR && cols[p + 1].n == KX_NR ? 2 : 1;
				if (d == 2)
					hp_kxk_wide_micro((int)mr, kc, t, 0,
							  (const float *const *)(void *)(bp + (p + 1) * r->pf), 0,
							  wa, lda, (r->span ? tmp : r->y) + off, ldy, k0 == 0,
							  bias ? bias + m0 : NULL, fin,
							  fin && r->fin_add ? r->addend + off : NULL);
				else
					kx_micro((int)mr, kc, wa, lda, t, (r->span ? tmp : r->y) + off, ldy,
						 cols[p].n, k0 == 0, bias ? bias + m0 : NULL, fin,
						 fin && r->fin_add ? r->addend + off : NULL);
			}
			if (r->span && k0 + kc == K)
				kx_scatter(r, g, j0, nc, m0, m0 + mr, tmp + (m0 - kx_tile_m0(M, r->mt, t0)) * nc);
			for (int64_t m = m0; m < m0 + mr && !r->span && r->epi && !r->fin_ok && k0 + kc == K; m++)
				hp_epi_span(r->epi, r->y, r->addend, ybase + m * cv->yvol + j0,
					    ybase + m * cv->yvol + j0 + nc);
		}
	}
}

/* Units are (item and group, column block, micro-tile of rows), the tile
 * fastest (spanning: (group, block of the batch's columns, micro-tile));
 * a range is cut where the column block changes. */
static void kx_range(void *arg, int64_t b, int64_t e, int tid)
{
	const struct kx_run *r = arg;
	float *bp = r->ws + tid * r->per_thread, *tmp = bp + r->panel;
	int64_t cols = kx_colspace(r->cv);

	while (b < e) {
		int64_t blk = b / r->mt, t0 = b % r->mt, t1 = min64(r->mt, t0 + (e - b));
		int64_t bg = blk / r->nblk, j0 = blk % r->nblk * r->nbw, nc = min64(r->nbw, cols - j0);
		if (!hp_kxk_run_block(r, bg, j0, nc, t0, t1, bp))
			kx_block(r, bg, j0, nc, t0, t1, bp, tmp, bp + r->per_thread - 2 * KX_MR * KX_FLIP_LD);
		b += t1 - t0;
	}
}

/* Micro-tiles per stolen unit: a whole column block (its micro-tiles
 * share its packed panels: cutting it packs them again, 3.5x slower on
 * ResNet's 7x7 layers) when the node has 4 blocks per thread or more;
 * with fewer, one run of tiles per thread as the static shares were (a
 * 7x7 plane at a batch of one is one block; ResNet's 28x28 ones 7).
 * Any cut gives the same bits. */
static int64_t kx_unit(const struct kx_run *r, int threads)
{
	if (r->blocks >= 4 * (int64_t)threads)
		return r->mt;
	return (r->blocks * r->mt + threads - 1) / threads;
}

/* The fused epilogues done in registers: Relu or Clip after an optional
 * addend of y's shape; others run hp_epi_span on each tile's rows. */
static void kx_fin_plan(struct kx_run *r)
{
	const struct hp_epi *e = r->epi;

	r->fin_ok = 0;
	r->fin_add = 0;
	if (!e || (e->add != HP_EPI_ADD_NONE && e->add != HP_EPI_ADD_FULL) ||
	    (e->act != HP_EPI_NONE && e->act != HP_EPI_RELU && e->act != HP_EPI_CLIP))
		return;
	r->fin_ok = 1;
	r->fin_add = e->add == HP_EPI_ADD_FULL;
	r->fin.act = e->act;
	r->fin.hi = e->hi;
	r->fin.lo = e->lo > e->hi ? e->hi : e->lo;
}

#endif

void hp_kxk_forward(const struct hp_conv *cv, const float *x, const float *w, const float *b, float *y, float *ws,
		    struct hp_pool *pool, const struct hp_epi *epi, const float *addend)
{
#ifdef KX_X86
	struct kx_run r = { .cv = cv, .x = x, .w = w, .b = b, .y = y, .ws = ws, .epi = epi, .addend = addend };
	int saved, threads = hp_conv_threads_enter(pool, &saved);
	int64_t cap = (int64_t)(cv->workspace / sizeof(float)) - kx_flip_floats(cv);

	r.wlazy = kx_flip_lazy(cv);
	if (cv->wflip && !r.wlazy) { /* W' at the workspace's front: copies, the same on any cut */
		struct kx_flip f = { .cv = cv, .w = w, .wf = ws };
		int64_t rows = cv->group * cv->cin_g;
		hp_conv_parallel(pool, cv->cout * cv->kdim >= KX_FLIP_PAR_MIN ? threads : 1, rows, kx_flip_range, &f);
		r.w = ws;
		r.ws = ws + kx_flip_floats(cv);
	}

	kx_fin_plan(&r);
	r.span = kx_span(cv);
	r.mt = (cv->cout_g + KX_MR - 1) / KX_MR;
	r.nbw = kx_block_cols(cv);
	r.nblk = (kx_colspace(cv) + r.nbw - 1) / r.nbw;
	r.pf = kx_panel_floats(cv);
	r.panel = kx_area_cols(cv) / KX_NR * r.pf;
	r.per_thread = kx_per_thread(cv);
	r.blocks = (r.span ? 1 : cv->batch) * cv->group * r.nblk;
	if (r.span)
		r.fin_ok = 0; /* the epilogue after the scatter */
	if (threads > cap / r.per_thread)
		threads = (int)(cap / r.per_thread);
	threads = hp_conv_par_threads(pool, threads, hp_conv_flops(cv));
	/* each thread takes its share's units front to back, then the
	 * units a late thread has not begun (hp_conv_steal) */
	hp_conv_steal(pool, threads, r.blocks * r.mt, kx_unit(&r, threads), kx_range, &r);
	hp_conv_threads_leave(saved);
#else
	(void)cv, (void)x, (void)w, (void)b, (void)y, (void)ws, (void)pool, (void)epi, (void)addend;
#endif
}
