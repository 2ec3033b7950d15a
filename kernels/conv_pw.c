/* Pointwise Conv (1x1, unit strides, no pads: the "direct" path) as one
 * register-blocked product per (batch item, group): Y[m][j] = b[m] +
 * sum_k W[m][k] X[k][j], W read in place, X packed per block of columns.
 *
 * Why not OpenBLAS: at a batch of one, MobileNetV2's 1x1 layers at 28x28
 * and below are one sgemm tile each (at most HP_CONV_DIRECT_COLS columns),
 * so the second thread idled; and sgemm rounds a column by the call's width
 * (conv_tile.c), so cutting the product finer would have changed the bits
 * with the thread count.  Here every output is one chain of fused
 * multiply-adds over k = 0, 1, ..., K-1, starting from the bias (or 0):
 * a chunk of k stores its running sums to Y and the next reloads them, so
 * the bits do not depend on the cache blocking, on where a column or row
 * sits in a tile, on the thread count or on the bands of a node.  The work
 * is cut as freely: units of 6 output channels by PW_NB columns, the
 * pool's workers taking contiguous runs of them and then, one stolen unit
 * of a few micro-tiles at a time, the rest of a late worker's run
 * (hp_conv_steal: without polling a worker starts a wake-up late).
 *
 * Micro-tile: 6 rows by 16 columns (12 ymm accumulators), W broadcast from
 * its rows, X from a panel [k][16] packed once per run of units that share
 * the columns; tails of columns are masked (8 or 16 wide), tails of rows
 * take fewer accumulators.  With AVX-512, a tile is up to 3 panels (48
 * columns) and, where a block of columns ends 1 to 4 past its last full
 * panel (MobileNetV2's 7x7 planes: 49 = 48 + 1), its first tile also
 * takes those columns as vectors over its rows (lane r, row r: the
 * broadcast weights blended into one vector), instead of a panel of 16
 * columns of which 15 were wasted; with tails of 1 or 2 those tiles are
 * 8 rows (PW_MR512; 1x1 at 7x7: 175 -> 250 GFLOP/s per CPU-second).  The
 * fused epilogue (FusedConv) runs on each micro-tile's rows after its
 * last k chunk, while they are in cache: in pw_tile512's registers before
 * the store, elsewhere as a pass over the stored tile. */
#include <stdint.h>
#include <string.h>

#include "kernels/conv_impl.h"
#include "kernels/fused_impl.h"
#include "kernels/fma_tile.h"
#include "kernels/simd_epi16.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define PW_X86 1
#define PW_TARGET __attribute__((target("avx2,fma")))
#define PW_TARGET512 __attribute__((target("avx512f,avx512vl,avx2,fma")))
#define PW_INLINE __attribute__((always_inline)) inline
#endif

#define PW_MR 6     /* output channels per micro-tile */
#define PW_NR 16    /* columns per micro-tile (two vectors) */
#define PW_KC 256   /* k per cache block */
#define PW_NB 128   /* columns per unit (a multiple of PW_NR) */
#define PW_MIN_KC 16 /* wflip: k per cache block at least, where a workspace is tight */
/* Stealing (hp_conv_steal): about this many units per thread, so that a
 * thread done early takes work from a late one in small pieces; and at
 * least this many micro-tiles of rows per unit where a unit packs its own
 * panel of X (a panel packed for fewer rows costs a third of their
 * products and more). */
#define PW_UNITS_PER_THREAD 4
#define PW_MIN_PACKED_TILES 8
#define PW_MAX_TID 8 /* hp_conv_ws_threads()'s bound */
/* Columns past the last full panel that an AVX-512 tile of three panels
 * takes as vectors over its rows (pw_tile512) instead of a tile of their
 * own: MobileNetV2's 7x7 planes are 3 panels and 1 column. */
#define PW_TAIL 4
/* pw_gemm_fin's runs of 7 full panels or more, or 4, as tiles of 4 panels
 * (pw_tile512w) from this k chunk length: 5% faster at 14x14's 112 columns
 * and K 64, 5% slower below K 32. */
#define PW_WIDE_K 64
/* Rows of those tiles with a tail of 1 or 2 columns: 24 + 1 or 2
 * accumulators still fit the 32 zmm registers, and a plane of one tile of
 * columns then reads X once per 8 rows (1x1 at 7x7: 210 -> 245 GFLOP/s
 * per CPU-second); elsewhere 8 rows were slower than 6 (tails of 3 or 4
 * spill, and wide planes lost 3-8%). */
#define PW_MR512 8
/* Rows of the AVX-512 tile where a plane is one panel of 16 columns
 * (4x4 planes: DenseNet-121's third block at 64 pixels): 12 chains of
 * one vector each instead of 6, so that the two FMA pipes are not left
 * waiting on a chain's latency. */
#define PW_MR1 12

/* Tests and benchmarks: 1, the AVX2 tiles only; 0, AVX-512 where the CPU
 * has it. */
static int pw_isa_set;

void hp_pw_set_avx2(int on)
{
	pw_isa_set = on;
}

static int64_t min64(int64_t a, int64_t b)
{
	return a < b ? a : b;
}

int hp_pw_available(void)
{
	return hp_dot_available();
}

size_t hp_pw_workspace(const struct hp_conv *cv, int threads)
{
	return (size_t)threads * (size_t)(min64(cv->kdim, PW_KC) * PW_NB) * sizeof(float);
}

/* The epilogue done in registers as a tile is stored (after its last k
 * chunk): y = act(y + add), add in y's layout (or NULL), act Relu or Clip
 * as fused_epi.c computes them (a compare and a select: NaN passes). */
struct pw_run {
	const struct hp_conv *cv;
	const float *x, *w, *b;
	float *y, *ws;
	const struct hp_epi *epi;
	const float *addend;
	int64_t mr, mt, nblk;    /* rows per micro-tile, micro-tiles of rows, column blocks per item */
	int64_t nbw;             /* columns per block: PW_NB, or fewer (hp_conv_even_block) */
	struct hp_fma_fin fin;       /* the epilogue in registers, when fin_ok */
	int fin_ok, fin_add;     /* epi done as tiles are stored; with a full addend */
	int64_t per_thread;      /* floats of a worker's panel buffer */
	int64_t kc;              /* wflip: k per cache block (pw_flip_fit) */
	int inplace;             /* full panels read from X in place (pw_inplace) */
	const struct hp_pw_pro *pro; /* X's prologue, applied as it is packed (or NULL) */
	int whole;               /* with pro: a block's panels packed once for all of K */
	int64_t tail_of[PW_MAX_TID]; /* in place: the (item, group) whose tail panel tid's buffer holds, or -1 */
};

#ifdef PW_X86





/* y[r][0..ncols) (+)= the chain over k < kc of a[r][k] * b[k][.], rows
 * r < mr, nv vectors of columns (b's rows ldb apart); first: start from
 * the bias (or 0); f (the last k chunk of a fused node): its epilogue
 * with the addend at add (y's layout, ldy apart). */
PW_TARGET static PW_INLINE void pw_tile(const int mr, const int nv, int64_t kc, const float *a, int64_t lda,
					const float *bp, int64_t ldb, float *y, int64_t ldy, int ncols, int first,
					const float *bias, const struct hp_fma_fin *f, const float *add)
{
	__m256 acc[PW_MR][2];
	__m256i mk[2] = { fma_mask(ncols), fma_mask(ncols - 8) };
	int full = ncols == 8 * nv;

	for (int r = 0; r < mr; r++)
		for (int v = 0; v < nv; v++)
			acc[r][v] = first ? (bias ? _mm256_set1_ps(bias[r]) : _mm256_setzero_ps())
				: full ? _mm256_loadu_ps(y + r * ldy + 8 * v)
				       : _mm256_maskload_ps(y + r * ldy + 8 * v, mk[v]);
	for (int64_t k = 0; k < kc; k++) {
		__m256 b0 = _mm256_loadu_ps(bp + k * ldb), b1 = b0;
		if (nv > 1)
			b1 = _mm256_loadu_ps(bp + k * ldb + 8);
		for (int r = 0; r < mr; r++) {
			__m256 w = _mm256_broadcast_ss(a + r * lda + k);
			acc[r][0] = _mm256_fmadd_ps(w, b0, acc[r][0]);
			if (nv > 1)
				acc[r][1] = _mm256_fmadd_ps(w, b1, acc[r][1]);
		}
	}
	fma_store_acc(acc, mr, nv, y, ldy, ncols, full);
	/* a pass of its own over the tile in L1: inside the loop above,
	 * GCC kept the accumulators in memory (1x1 classes 85 -> 30 GF/s) */
	if (f)
		fma_finish_tile(mr, nv, y, ldy, ncols, f, add);
}

/* v = act(v + the addend at add (ADD; lanes in mk)) as fma_finish
 * computes it on eight lanes, operation for operation (the same compare
 * and select for Relu and Clip, HardSwish's multiply and add
 * uncontracted), so the same bits. */
PW_TARGET512 static PW_INLINE __m512 pw_fin512(const int act, const int add, __m512 v, const float *a, __mmask16 mk,
					      __m512 lo, __m512 hi)
{
	__m512 z = _mm512_setzero_ps();

	if (add)
		v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(mk, a));
	switch (act) {
	case HP_EPI_RELU: return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(v, z, _CMP_LT_OQ), v, z);
	case HP_EPI_CLIP: return hp_clip16_ps(v, lo, hi);
	case HP_EPI_HSWISH: return hp_hswish16_ps(v);
	default: return v;
	}
}

/* The epilogue on pw_tile512's accumulators (rows r < mr, np vectors, the
 * last of `part` lanes), the addend (ADD) at add in y's layout.  Every
 * loop unrolled: one left rolled and GCC keeps acc in memory. */
PW_TARGET512 static PW_INLINE void pw_fin_tile512(const int act, const int add, const int mr, const int np,
						  __m512 (*acc)[3], const float *a, int64_t ldy, int part,
						  const struct hp_fma_fin *f)
{
	__m512 lo = _mm512_set1_ps(f->lo), hi = _mm512_set1_ps(f->hi);
	__mmask16 mk = (__mmask16)((1u << part) - 1);

	#pragma GCC unroll 16
	for (int r = 0; r < mr; r++)
		#pragma GCC unroll 16
		for (int v = 0; v < np; v++)
			acc[r][v] = pw_fin512(act, add, acc[r][v], add ? a + r * ldy + 16 * v : NULL,
					      v < np - 1 ? (__mmask16)0xffff : mk, lo, hi);
}

/* AVX-512 (this machine's Zen 5 runs a 512-bit FMA per pipe, twice the
 * AVX2 tile's flops a cycle): np (1..3) panels of 16 columns side by side,
 * panel i at bp + i * ps (rows ldb apart), one zmm per row and panel (18
 * accumulators at most), the first ncols (np * 16 - 15 .. np * 16) stored.
 * Every lane is the AVX2 tile's chain (the same fused multiply-adds from
 * the bias, in k's order), so the same bits; tails are loaded masked and
 * stored through a buffer (masked stores are slow on AMD's cores).  f
 * (a fused node's last k chunk): its epilogue on the accumulators, with
 * the addend at add (y's layout), before they are stored. */
PW_TARGET512 static PW_INLINE void pw_tile512(const int mr, const int np, int64_t kc, const float *a, int64_t lda,
					      const float *bp, int64_t ldb, int64_t ps, float *y, int64_t ldy,
					      int ncols, int first, const float *bias, const struct hp_fma_fin *f,
					      const float *add)
{
	__m512 acc[PW_MR][3];
	int part = ncols - 16 * (np - 1); /* columns of the last vector, 1..16 */
	__mmask16 mk = (__mmask16)((1u << part) - 1);

	#pragma GCC unroll 16
	for (int r = 0; r < mr; r++)
		#pragma GCC unroll 16
		for (int v = 0; v < np; v++)
			acc[r][v] = first ? (bias ? _mm512_set1_ps(bias[r]) : _mm512_setzero_ps())
				: v < np - 1 || part == 16 ? _mm512_loadu_ps(y + r * ldy + 16 * v)
							  : _mm512_maskz_loadu_ps(mk, y + r * ldy + 16 * v);
	for (int64_t k = 0; k < kc; k++) {
		__m512 b0 = _mm512_loadu_ps(bp + k * ldb), b1 = b0, b2 = b0;
		if (np > 1)
			b1 = _mm512_loadu_ps(bp + ps + k * ldb);
		if (np > 2)
			b2 = _mm512_loadu_ps(bp + 2 * ps + k * ldb);
		#pragma GCC unroll 16
		for (int r = 0; r < mr; r++) {
			__m512 w = _mm512_set1_ps(a[r * lda + k]);
			acc[r][0] = _mm512_fmadd_ps(w, b0, acc[r][0]);
			if (np > 1)
				acc[r][1] = _mm512_fmadd_ps(w, b1, acc[r][1]);
			if (np > 2)
				acc[r][2] = _mm512_fmadd_ps(w, b2, acc[r][2]);
		}
	}
	/* the epilogue (f: a fused node's last k chunk) in registers before
	 * the store, not as a pass over the stored tile: at K 8-24 (MNASNet's
	 * expansions at 24x24-48x48) that pass's loads, selects and stores
	 * on eight lanes cost a third of the products' time */
	if (f) {
		switch (f->act * 2 + (add != NULL)) {
#define PW_FIN(A)                                                                                     \
	case 2 * (A): pw_fin_tile512(A, 0, mr, np, acc, add, ldy, part, f); break;                    \
	case 2 * (A) + 1: pw_fin_tile512(A, 1, mr, np, acc, add, ldy, part, f); break;
			PW_FIN(HP_EPI_NONE)
			PW_FIN(HP_EPI_RELU)
			PW_FIN(HP_EPI_CLIP)
			PW_FIN(HP_EPI_HSWISH)
#undef PW_FIN
		default: break;
		}
	}
	/* the partial vectors through t in a loop of their own: a copy loop
	 * inside this one left the accumulators in memory (GCC 12) */
	float t[PW_MR][16];
	#pragma GCC unroll 16
	for (int r = 0; r < mr; r++)
		#pragma GCC unroll 16
		for (int v = 0; v < np; v++) {
			if (v < np - 1 || part == 16)
				_mm512_storeu_ps(y + r * ldy + 16 * v, acc[r][v]);
			else
				_mm512_storeu_ps(t[r], acc[r][v]);
		}
	if (part < 16)
		#pragma GCC unroll 16
		for (int r = 0; r < mr; r++)
			memcpy(y + r * ldy + 16 * (np - 1), t[r], (size_t)part * sizeof(float));
}

/* One panel (ncols 1..16), rows r < mr (1..PW_MR1), one zmm each: the
 * chains of pw_tile512 (from the bias or the stored sums, k in order). */
PW_TARGET512 static PW_INLINE void pw_tile512r(const int mr, int64_t kc, const float *a, int64_t lda, const float *bp,
					       int64_t ldb, float *y, int64_t ldy, int ncols, int first, const float *bias)
{
	__m512 acc[PW_MR1];
	__mmask16 mk = (__mmask16)((1u << ncols) - 1);
	float t[16];

	#pragma GCC unroll 16
	for (int r = 0; r < mr; r++)
		acc[r] = first ? (bias ? _mm512_set1_ps(bias[r]) : _mm512_setzero_ps())
			: ncols == 16 ? _mm512_loadu_ps(y + r * ldy) : _mm512_maskz_loadu_ps(mk, y + r * ldy);
	for (int64_t k = 0; k < kc; k++) {
		__m512 b0 = _mm512_loadu_ps(bp + k * ldb);
		#pragma GCC unroll 16
		for (int r = 0; r < mr; r++)
			acc[r] = _mm512_fmadd_ps(_mm512_set1_ps(a[r * lda + k]), b0, acc[r]);
	}
	#pragma GCC unroll 16
	for (int r = 0; r < mr; r++) {
		if (ncols == 16) {
			_mm512_storeu_ps(y + r * ldy, acc[r]);
			continue;
		}
		_mm512_storeu_ps(t, acc[r]);
		memcpy(y + r * ldy, t, (size_t)ncols * sizeof(float));
	}
}

PW_TARGET512 static void pw_micro512(int mr, int np, int64_t kc, const float *a, int64_t lda, const float *bp,
				     int64_t ldb, int64_t ps, float *y, int64_t ldy, int ncols, int first,
				     const float *bias, const struct hp_fma_fin *f, const float *add);

/* pw_tile512r's tile, then the epilogue f as pw_micro512's. */
PW_TARGET512 static void pw_micro512r(int mr, int64_t kc, const float *a, int64_t lda, const float *bp, int64_t ldb,
				      float *y, int64_t ldy, int ncols, int first, const float *bias,
				      const struct hp_fma_fin *f, const float *add)
{
	switch (mr) {
	case 7: pw_tile512r(7, kc, a, lda, bp, ldb, y, ldy, ncols, first, bias); break;
	case 8: pw_tile512r(8, kc, a, lda, bp, ldb, y, ldy, ncols, first, bias); break;
	case 9: pw_tile512r(9, kc, a, lda, bp, ldb, y, ldy, ncols, first, bias); break;
	case 10: pw_tile512r(10, kc, a, lda, bp, ldb, y, ldy, ncols, first, bias); break;
	case 11: pw_tile512r(11, kc, a, lda, bp, ldb, y, ldy, ncols, first, bias); break;
	case 12: pw_tile512r(12, kc, a, lda, bp, ldb, y, ldy, ncols, first, bias); break;
	default: pw_micro512(mr, 1, kc, a, lda, bp, ldb, PW_NR, y, ldy, ncols, first, bias, NULL, NULL); break;
	}
	if (f)
		fma_finish_tile(mr, ncols > 8 ? 2 : 1, y, ldy, ncols, f, add);
}

#define PW_CASE512(R)                                                                                 \
	case R:                                                                                        \
		if (np == 1)                                                                           \
			pw_tile512(R, 1, kc, a, lda, bp, ldb, ps, y, ldy, ncols, first, bias, f, add); \
		else if (np == 2)                                                                      \
			pw_tile512(R, 2, kc, a, lda, bp, ldb, ps, y, ldy, ncols, first, bias, f, add); \
		else                                                                                   \
			pw_tile512(R, 3, kc, a, lda, bp, ldb, ps, y, ldy, ncols, first, bias, f, add); \
		break;

/* mr (1..PW_MR) rows by np panels (ncols columns), the epilogue f in the
 * tile's registers. */
PW_TARGET512 static void pw_micro512(int mr, int np, int64_t kc, const float *a, int64_t lda, const float *bp,
				     int64_t ldb, int64_t ps, float *y, int64_t ldy, int ncols, int first,
				     const float *bias, const struct hp_fma_fin *f, const float *add)
{
	switch (mr) {
		PW_CASE512(1)
		PW_CASE512(2)
		PW_CASE512(3)
		PW_CASE512(4)
		PW_CASE512(5)
		PW_CASE512(6)
	default:
		break;
	}
}

/* The tile of three full panels (48 columns) and nt (1..PW_TAIL) columns
 * more, X's at xc (rows ldc apart), Y's at y + coff: those columns are
 * vectors over the tile's rows (lane r, row r; the rows' broadcast
 * weights blended into one vector), so each output is the same chain as
 * in pw_tile512.  Apart from pw_tile512: as one function, its tiles
 * without tails lost 5-15% where K is short (GCC 12's code for them). */
PW_TARGET512 static PW_INLINE void pw_tile512t(const int mr, const int nt, int64_t kc, const float *a, int64_t lda,
					       const float *bp, int64_t ldb, int64_t ps, const float *xc, int64_t ldc,
					       float *y, int64_t ldy, int64_t coff, int first, const float *bias)
{
	__m512 acc[PW_MR512][3], tc[PW_TAIL];
	__mmask16 mr_mk = (__mmask16)((1u << mr) - 1);
	float t[16];

	for (int r = 0; r < mr; r++)
		for (int v = 0; v < 3; v++)
			acc[r][v] = first ? (bias ? _mm512_set1_ps(bias[r]) : _mm512_setzero_ps())
					  : _mm512_loadu_ps(y + r * ldy + 16 * v);
	for (int c = 0; c < nt; c++) {
		for (int r = 0; r < 16 && !first; r++)
			t[r] = r < mr ? y[r * ldy + coff + c] : 0.0f;
		tc[c] = first ? (bias ? _mm512_maskz_loadu_ps(mr_mk, bias) : _mm512_setzero_ps()) : _mm512_loadu_ps(t);
	}
	for (int64_t k = 0; k < kc; k++) {
		__m512 b0 = _mm512_loadu_ps(bp + k * ldb), b1 = _mm512_loadu_ps(bp + ps + k * ldb);
		__m512 b2 = _mm512_loadu_ps(bp + 2 * ps + k * ldb), wc = b0;
		for (int r = 0; r < mr; r++) {
			__m512 w = _mm512_set1_ps(a[r * lda + k]);
			acc[r][0] = _mm512_fmadd_ps(w, b0, acc[r][0]);
			acc[r][1] = _mm512_fmadd_ps(w, b1, acc[r][1]);
			acc[r][2] = _mm512_fmadd_ps(w, b2, acc[r][2]);
			wc = r == 0 ? w : _mm512_mask_mov_ps(wc, (__mmask16)(1u << r), w);
		}
		for (int c = 0; c < nt; c++)
			tc[c] = _mm512_fmadd_ps(wc, _mm512_set1_ps(xc[k * ldc + c]), tc[c]);
	}
	for (int c = 0; c < nt; c++) {
		_mm512_storeu_ps(t, tc[c]);
		for (int r = 0; r < mr; r++)
			y[r * ldy + coff + c] = t[r];
	}
	for (int r = 0; r < mr; r++)
		for (int v = 0; v < 3; v++)
			_mm512_storeu_ps(y + r * ldy + 16 * v, acc[r][v]);
}

#define PW_TILE512T(R, NT)                                                                            \
	pw_tile512t(R, NT, kc, a, lda, bp, ldb, ps, xc, ldc, y, ldy, coff, first, bias)
#define PW_CASE512T(R)                                                                                \
	case R:                                                                                       \
		if (nt == 1)                                                                          \
			PW_TILE512T(R, 1);                                                            \
		else if (nt == 2)                                                                     \
			PW_TILE512T(R, 2);                                                            \
		else if (nt == 3)                                                                     \
			PW_TILE512T(R, 3);                                                            \
		else                                                                                  \
			PW_TILE512T(R, 4);                                                            \
		break;

/* mr (1..PW_MR512) rows by 48 columns and nt more (pw_tile512t), then the
 * epilogue f as pw_micro512's. */
PW_TARGET512 static void pw_micro512t(int mr, int nt, int64_t kc, const float *a, int64_t lda, const float *bp,
				      int64_t ldb, int64_t ps, const float *xc, int64_t ldc, float *y, int64_t ldy,
				      int64_t coff, int first, const float *bias, const struct hp_fma_fin *f,
				      const float *add)
{
	switch (mr) {
		PW_CASE512T(1)
		PW_CASE512T(2)
		PW_CASE512T(3)
		PW_CASE512T(4)
		PW_CASE512T(5)
		PW_CASE512T(6)
		PW_CASE512T(7)
		PW_CASE512T(8)
	default:
		break;
	}
	for (int v = 0; f && v < 3; v++)
		fma_finish_tile(mr, 2, y + v * PW_NR, ldy, PW_NR, f, add ? add + v * PW_NR : NULL);
	if (f)
		fma_finish_tile(mr, 1, y + coff, ldy, nt, f, add ? add + coff : NULL);
}

/* Four full panels (64 columns) side by side, rows r < mr (1..PW_MR): 24
 * accumulators at most, a row's broadcast weight serving 4 vectors
 * instead of 3 (pw_gemm_fin's runs of 7 panels and more). */
PW_TARGET512 static PW_INLINE void pw_tile512w(const int mr, int64_t kc, const float *a, int64_t lda, const float *bp,
					       int64_t ldb, float *y, int64_t ldy, int first, const float *bias)
{
	__m512 acc[PW_MR][4];

	for (int r = 0; r < mr; r++)
		for (int v = 0; v < 4; v++)
			acc[r][v] = first ? (bias ? _mm512_set1_ps(bias[r]) : _mm512_setzero_ps())
					  : _mm512_loadu_ps(y + r * ldy + 16 * v);
	for (int64_t k = 0; k < kc; k++) {
		__m512 b0 = _mm512_loadu_ps(bp + k * ldb), b1 = _mm512_loadu_ps(bp + k * ldb + 16);
		__m512 b2 = _mm512_loadu_ps(bp + k * ldb + 32), b3 = _mm512_loadu_ps(bp + k * ldb + 48);
		for (int r = 0; r < mr; r++) {
			__m512 w = _mm512_set1_ps(a[r * lda + k]);
			acc[r][0] = _mm512_fmadd_ps(w, b0, acc[r][0]);
			acc[r][1] = _mm512_fmadd_ps(w, b1, acc[r][1]);
			acc[r][2] = _mm512_fmadd_ps(w, b2, acc[r][2]);
			acc[r][3] = _mm512_fmadd_ps(w, b3, acc[r][3]);
		}
	}
	for (int r = 0; r < mr; r++)
		for (int v = 0; v < 4; v++)
			_mm512_storeu_ps(y + r * ldy + 16 * v, acc[r][v]);
}

PW_TARGET512 static void pw_micro512w(int mr, int64_t kc, const float *a, int64_t lda, const float *bp, int64_t ldb,
				      float *y, int64_t ldy, int first, const float *bias, const struct hp_fma_fin *f,
				      const float *add)
{
	switch (mr) {
	case 1: pw_tile512w(1, kc, a, lda, bp, ldb, y, ldy, first, bias); break;
	case 2: pw_tile512w(2, kc, a, lda, bp, ldb, y, ldy, first, bias); break;
	case 3: pw_tile512w(3, kc, a, lda, bp, ldb, y, ldy, first, bias); break;
	case 4: pw_tile512w(4, kc, a, lda, bp, ldb, y, ldy, first, bias); break;
	case 5: pw_tile512w(5, kc, a, lda, bp, ldb, y, ldy, first, bias); break;
	default: pw_tile512w(6, kc, a, lda, bp, ldb, y, ldy, first, bias); break;
	}
	for (int v = 0; f && v < 4; v++)
		fma_finish_tile(mr, 2, y + v * PW_NR, ldy, PW_NR, f, add ? add + v * PW_NR : NULL);
}

/* pw_micro512t with nt tail columns, else pw_micro512 (rows past PW_MR,
 * in tiles of PW_MR512 rows, by a second call).  Inline, so that
 * pw_gemm_fin's calls keep their constant panel stride (GCC's clone of
 * pw_micro512 for it: 3% on short K). */
static PW_INLINE void pw_micro512x(int mr, int np, int nt, int64_t kc, const float *a, int64_t lda,
				   const float *bp, int64_t ldb, int64_t ps, const float *xc, int64_t ldc, float *y,
				   int64_t ldy, int64_t coff, int ncols, int first, const float *bias,
				   const struct hp_fma_fin *f, const float *add)
{
	if (nt > 0) {
		pw_micro512t(mr, nt, kc, a, lda, bp, ldb, ps, xc, ldc, y, ldy, coff, first, bias, f, add);
		return;
	}
	if (np == 4) { /* panels in place, PW_NR apart */
		pw_micro512w(mr, kc, a, lda, bp, ldb, y, ldy, first, bias, f, add);
		return;
	}
	for (int m = 0; m < mr; m += PW_MR)
		pw_micro512(mr - m < PW_MR ? mr - m : PW_MR, np, kc, a + m * lda, lda, bp, ldb, ps, y + m * ldy, ldy,
			    ncols, first, bias ? bias + m : NULL, f, add ? add + m * ldy : NULL);
}

static int pw_512(void)
{
	static int cached = -1;

	if (cached < 0)
		cached = __builtin_cpu_supports("avx512f") ? 1 : 0;
	return cached && !pw_isa_set;
}

int hp_pw_512(void)
{
	return pw_512();
}

#define PW_CASE(R)                                                                                    \
	case R:                                                                                        \
		if (nv == 1)                                                                           \
			pw_tile(R, 1, kc, a, lda, bp, ldb, y, ldy, ncols, first, bias, f, add);        \
		else                                                                                   \
			pw_tile(R, 2, kc, a, lda, bp, ldb, y, ldy, ncols, first, bias, f, add);        \
		break;

PW_TARGET static void pw_micro(int mr, int64_t kc, const float *a, int64_t lda, const float *bp, int64_t ldb,
			       float *y, int64_t ldy, int ncols, int first, const float *bias, const struct hp_fma_fin *f,
			       const float *add)
{
	int nv = ncols > 8 ? 2 : 1;

	switch (mr) {
		PW_CASE(1)
		PW_CASE(2)
		PW_CASE(3)
		PW_CASE(4)
		PW_CASE(5)
		PW_CASE(6)
	default:
		break;
	}
}
#endif

/* Whether the AVX-512 tiles take nt columns after nfull full ones into
 * their first tile of three panels (pw_tile512). */
static int pw_fuse_tail(int64_t nfull, int64_t nt)
{
#ifdef PW_X86
	return pw_512() && nt > 0 && nt <= PW_TAIL && nfull >= 3 * PW_NR;
#else
	(void)nfull, (void)nt;
	return 0;
#endif
}

/* Rows per tile of the first tile of columns where nt columns are fused
 * into it (PW_MR512). */
static int64_t pw_tile_rows(int fuse, int64_t nt)
{
	return fuse && nt <= 2 ? PW_MR512 : PW_MR;
}

/* bp[p][k][16] = x[k0 + k][j0 + p * 16 + c] for k < kc, zeros past nc
 * (vector copies: a memcpy call per row of 16 cost as much as the product
 * when M is 24). */
#ifdef PW_X86
PW_TARGET static void pw_pack(const float *x, int64_t ldx, int64_t k0, int64_t kc, int64_t j0, int64_t nc,
			      float *bp)
{
	for (int64_t p = 0; p * PW_NR < nc; p++) {
		int w = (int)min64(PW_NR, nc - p * PW_NR);
		float *dst = bp + p * kc * PW_NR;
		const float *src = x + k0 * ldx + j0 + p * PW_NR;
		__m256i m0 = fma_mask(w), m1 = fma_mask(w - 8);
		if (w == PW_NR)
			for (int64_t k = 0; k < kc; k++, dst += PW_NR, src += ldx) {
				_mm256_storeu_ps(dst, _mm256_loadu_ps(src));
				_mm256_storeu_ps(dst + 8, _mm256_loadu_ps(src + 8));
			}
		else
			for (int64_t k = 0; k < kc; k++, dst += PW_NR, src += ldx) {
				_mm256_storeu_ps(dst, _mm256_maskload_ps(src, m0));
				_mm256_storeu_ps(dst + 8, _mm256_maskload_ps(src + 8, m1));
			}
	}
}

/* pw_pack of pro(x) (hp_pw_pro), panels ps floats apart: the subtraction,
 * product and sum rounded one by one as kernels/norm.c's affine (built
 * without contraction: c11), Relu as the Relu kernel's compare and select
 * (NaN and -0 pass); zeros past nc. */
PW_TARGET512 static void pw_pack_pro512(const float *x, int64_t ldx, int64_t k0, int64_t kc, int64_t j0, int64_t nc,
					int64_t ps, float *bp, const struct hp_pw_pro *pro)
{
	__m512 zero = _mm512_setzero_ps();

	for (int64_t p = 0; p * PW_NR < nc; p++) {
		int w = (int)min64(PW_NR, nc - p * PW_NR);
		__mmask16 mk = (__mmask16)((1u << w) - 1);
		float *dst = bp + p * ps;
		const float *src = x + k0 * ldx + j0 + p * PW_NR;
		for (int64_t k = k0; k < k0 + kc; k++, dst += PW_NR, src += ldx) {
			__m512 v = _mm512_sub_ps(_mm512_maskz_loadu_ps(mk, src), _mm512_set1_ps(pro->mean[k]));
			v = _mm512_add_ps(_mm512_mul_ps(v, _mm512_set1_ps(pro->scale[k])), _mm512_set1_ps(pro->shift[k]));
			if (pro->relu)
				v = _mm512_mask_mov_ps(v, _mm512_cmp_ps_mask(v, zero, _CMP_LT_OQ), zero);
			_mm512_storeu_ps(dst, _mm512_maskz_mov_ps(mk, v));
		}
	}
}

PW_TARGET static void pw_pack_pro(const float *x, int64_t ldx, int64_t k0, int64_t kc, int64_t j0, int64_t nc,
				  int64_t ps, float *bp, const struct hp_pw_pro *pro)
{
	__m256 zero = _mm256_setzero_ps();

	if (pw_512()) { /* a panel's row in one vector; the same operations */
		pw_pack_pro512(x, ldx, k0, kc, j0, nc, ps, bp, pro);
		return;
	}
	for (int64_t p = 0; p * PW_NR < nc; p++) {
		int w = (int)min64(PW_NR, nc - p * PW_NR);
		float *dst = bp + p * ps;
		const float *src = x + k0 * ldx + j0 + p * PW_NR;
		__m256i m0 = fma_mask(w), m1 = fma_mask(w - 8);
		for (int64_t k = k0; k < k0 + kc; k++, dst += PW_NR, src += ldx) {
			__m256 mu = _mm256_set1_ps(pro->mean[k]), a = _mm256_set1_ps(pro->scale[k]);
			__m256 b = _mm256_set1_ps(pro->shift[k]);
			__m256 v0 = w == PW_NR ? _mm256_loadu_ps(src) : _mm256_maskload_ps(src, m0);
			__m256 v1 = w == PW_NR ? _mm256_loadu_ps(src + 8) : _mm256_maskload_ps(src + 8, m1);
			v0 = _mm256_add_ps(_mm256_mul_ps(_mm256_sub_ps(v0, mu), a), b);
			v1 = _mm256_add_ps(_mm256_mul_ps(_mm256_sub_ps(v1, mu), a), b);
			if (pro->relu) {
				v0 = _mm256_blendv_ps(v0, zero, _mm256_cmp_ps(v0, zero, _CMP_LT_OQ));
				v1 = _mm256_blendv_ps(v1, zero, _mm256_cmp_ps(v1, zero, _CMP_LT_OQ));
			}
			if (w < PW_NR) {
				v0 = _mm256_and_ps(v0, _mm256_castsi256_ps(m0));
				v1 = _mm256_and_ps(v1, _mm256_castsi256_ps(m1));
			}
			_mm256_storeu_ps(dst, v0);
			_mm256_storeu_ps(dst + 8, v1);
		}
	}
}
#else
static void pw_pack(const float *x, int64_t ldx, int64_t k0, int64_t kc, int64_t j0, int64_t nc, float *bp)
{
	(void)x, (void)ldx, (void)k0, (void)kc, (void)j0, (void)nc, (void)bp;
}

static void pw_pack_pro(const float *x, int64_t ldx, int64_t k0, int64_t kc, int64_t j0, int64_t nc, int64_t ps,
			float *bp, const struct hp_pw_pro *pro)
{
	(void)x, (void)ldx, (void)k0, (void)kc, (void)j0, (void)nc, (void)ps, (void)bp, (void)pro;
}
#endif

/* The panel of X that micro-tiles read for columns j0 + p * 16 of k chunk
 * [k0, k0 + kc): packed by pw_block in bp, or, in place (pw_inplace), X
 * itself but for the last partial panel, packed once for all k. */
static const float *pw_panel(const struct pw_run *r, const float *x, const float *bp, int64_t k0, int64_t kc,
			     int64_t j0, int64_t nc, int64_t p, int64_t *ldb)
{
	*ldb = PW_NR;
	if (r->whole) /* [p][K][16], packed once for the block */
		return bp + (p * r->cv->kdim + k0) * PW_NR;
	if (!r->inplace)
		return bp + p * kc * PW_NR;
	if ((p + 1) * PW_NR > nc)
		return bp + k0 * PW_NR;
	*ldb = r->cv->xvol;
	return x + k0 * r->cv->xvol + j0 + p * PW_NR;
}

/* Units [u0, u1) of one (item, group) column block: micro-tiles of rows
 * t0..t1, over columns [j0, j0 + nc). */
static void pw_block(struct pw_run *r, int64_t bg, int64_t j0, int64_t nc, int64_t t0, int64_t t1, float *bp,
		     int tid)
{
	const struct hp_conv *cv = r->cv;
	int64_t nb = bg / cv->group, g = bg % cv->group, K = cv->kdim, M = cv->cout_g;
	const float *x = r->x + (nb * cv->cin + g * cv->cin_g) * cv->xvol;
	const float *w = r->w + g * M * K, *bias = r->b ? r->b + g * M : NULL;
	int64_t ybase = (nb * cv->cout + g * M) * cv->yvol, nfull = nc / PW_NR * PW_NR, ldb;
	int fuse = r->inplace && pw_fuse_tail(nfull, nc - nfull); /* the tail in the first tile */

	if (r->inplace && nfull < nc && !fuse && r->tail_of[tid] != bg) { /* units of one block share it */
		pw_pack(x, cv->xvol, 0, K, j0 + nfull, nc - nfull, bp);
		r->tail_of[tid] = bg;
	}
	if (r->whole && r->tail_of[tid] != bg * r->nblk + j0 / r->nbw) { /* and here the block's panels */
		pw_pack_pro(x, cv->xvol, 0, K, j0, nc, K * PW_NR, bp, r->pro);
		r->tail_of[tid] = bg * r->nblk + j0 / r->nbw;
	}
	for (int64_t k0 = 0; k0 < K; k0 += PW_KC) {
		int64_t kc = min64(PW_KC, K - k0);
		const struct hp_fma_fin *fin = r->fin_ok && k0 + kc == K ? &r->fin : NULL;
		(void)fin, (void)ldb; /* without PW_X86 */
		if (r->pro && !r->whole)
			pw_pack_pro(x, cv->xvol, k0, kc, j0, nc, kc * PW_NR, bp, r->pro);
		else if (!r->inplace && !r->pro)
			pw_pack(x, cv->xvol, k0, kc, j0, nc, bp);
		for (int64_t t = t0; t < t1; t++) {
			int64_t m0 = t * r->mr, mr = min64(r->mr, M - m0);
			for (int64_t p = 0, np = 1; p * PW_NR < nc; p += np) {
#ifdef PW_X86
				int64_t off = ybase + m0 * cv->yvol + j0 + p * PW_NR;
				const float *src = pw_panel(r, x, bp, k0, kc, j0, nc, p, &ldb);
				if (!pw_512()) {
					np = 1;
					pw_micro((int)mr, kc, w + m0 * K + k0, K, src, ldb, r->y + off, cv->yvol,
						 (int)min64(PW_NR, nc - p * PW_NR), k0 == 0, bias ? bias + m0 : NULL,
						 fin, fin && r->fin_add ? r->addend + off : NULL);
					continue;
				}
				/* packed panels (the tail zero-padded) kc * 16 apart; in
				 * place, the full ones 16 apart and the packed tail alone */
				np = r->inplace ? ((p + 1) * PW_NR > nc ? 1 : min64(3, nfull / PW_NR - p))
						: min64(3, (nc - p * PW_NR + PW_NR - 1) / PW_NR);
				if (r->mr == PW_MR1) { /* a plane of one panel: pw_tile512r */
					pw_micro512r((int)mr, kc, w + m0 * K + k0, K, src, ldb, r->y + off, cv->yvol, (int)nc,
						     k0 == 0, bias ? bias + m0 : NULL, fin,
						     fin && r->fin_add ? r->addend + off : NULL);
					continue;
				}
				if (!fuse) { /* pw_micro512 itself: 5% on short K (1x1 at 56x56) */
					pw_micro512((int)mr, (int)np, kc, w + m0 * K + k0, K, src, ldb,
						    r->inplace ? PW_NR : (r->whole ? K : kc) * PW_NR, r->y + off, cv->yvol,
						    (int)min64(np * PW_NR, nc - p * PW_NR), k0 == 0, bias ? bias + m0 : NULL,
						    fin, fin && r->fin_add ? r->addend + off : NULL);
					continue;
				}
				pw_micro512x((int)mr, (int)np, p == 0 ? (int)(nc - nfull) : 0, kc, w + m0 * K + k0, K, src,
					     ldb, PW_NR, x + k0 * cv->xvol + j0 + nfull, cv->xvol, r->y + off, cv->yvol,
					     nfull - p * PW_NR, (int)min64(np * PW_NR, nc - p * PW_NR), k0 == 0,
					     bias ? bias + m0 : NULL, fin, fin && r->fin_add ? r->addend + off : NULL);
				if ((p + np) * PW_NR == nfull)
					break;
#endif
			}
			for (int64_t m = m0; m < m0 + mr && r->epi && !r->fin_ok && k0 + kc == K; m++)
				hp_epi_span(r->epi, r->y, r->addend, ybase + m * cv->yvol + j0,
					    ybase + m * cv->yvol + j0 + nc);
		}
	}
}

/* The fused epilogues done in registers: Relu, Clip or HardSwish after an
 * optional addend of y's shape (MobileNetV2's Clip(0, 6) and residual
 * Adds, MobileNetV3's HardSwish);
 * others run hp_epi_span on each tile's rows. */
static void pw_fin_plan(struct pw_run *r)
{
	const struct hp_epi *e = r->epi;

	r->fin_ok = 0;
	r->fin_add = 0;
#ifdef PW_X86
	if (!e || (e->add != HP_EPI_ADD_NONE && e->add != HP_EPI_ADD_FULL) ||
	    (e->act != HP_EPI_NONE && e->act != HP_EPI_RELU && e->act != HP_EPI_CLIP && e->act != HP_EPI_HSWISH))
		return;
	r->fin_ok = 1;
	r->fin_add = e->add == HP_EPI_ADD_FULL;
	r->fin.act = e->act;
	r->fin.hi = e->hi;
	r->fin.lo = e->lo > e->hi ? e->hi : e->lo;
#endif
}

/* ---- ConvGradData's 1x1 (cv->wflip): W [K][M] read transposed -------
 * pw_tile512's chains with W's k stride ka (a row's weights ka apart):
 * copies, as a stride parameter in the forward's tiles lost GCC's clones
 * of them (1x1-mb28 forward 235 -> 206 GF/s per CPU-second).  AVX-512
 * tiles over packed panels only (no bias, no epilogue, no fused tail). */
#ifdef PW_X86
PW_TARGET512 static PW_INLINE void pwf_tile(const int mr, const int np, int64_t kc, const float *a, int64_t ka,
					    const float *bp, int64_t ps, float *y, int64_t ldy, int ncols, int first)
{
	__m512 acc[PW_MR][3];
	int part = ncols - 16 * (np - 1);
	__mmask16 mk = (__mmask16)((1u << part) - 1);
	float t[PW_MR][16];

	#pragma GCC unroll 16
	for (int r = 0; r < mr; r++)
		#pragma GCC unroll 16
		for (int v = 0; v < np; v++)
			acc[r][v] = first ? _mm512_setzero_ps()
				: v < np - 1 || part == 16 ? _mm512_loadu_ps(y + r * ldy + 16 * v)
							  : _mm512_maskz_loadu_ps(mk, y + r * ldy + 16 * v);
	for (int64_t k = 0; k < kc; k++) {
		__m512 b0 = _mm512_loadu_ps(bp + k * PW_NR), b1 = b0, b2 = b0;
		if (np > 1)
			b1 = _mm512_loadu_ps(bp + ps + k * PW_NR);
		if (np > 2)
			b2 = _mm512_loadu_ps(bp + 2 * ps + k * PW_NR);
		#pragma GCC unroll 16
		for (int r = 0; r < mr; r++) {
			__m512 w = _mm512_set1_ps(a[r + k * ka]);
			acc[r][0] = _mm512_fmadd_ps(w, b0, acc[r][0]);
			if (np > 1)
				acc[r][1] = _mm512_fmadd_ps(w, b1, acc[r][1]);
			if (np > 2)
				acc[r][2] = _mm512_fmadd_ps(w, b2, acc[r][2]);
		}
	}
	#pragma GCC unroll 16
	for (int r = 0; r < mr; r++)
		#pragma GCC unroll 16
		for (int v = 0; v < np; v++) {
			if (v < np - 1 || part == 16)
				_mm512_storeu_ps(y + r * ldy + 16 * v, acc[r][v]);
			else
				_mm512_storeu_ps(t[r], acc[r][v]);
		}
	if (part < 16)
		#pragma GCC unroll 16
		for (int r = 0; r < mr; r++)
			memcpy(y + r * ldy + 16 * (np - 1), t[r], (size_t)part * sizeof(float));
}

#define PWF_CASE(R)                                                                     \
	case R:                                                                         \
		if (np == 1)                                                            \
			pwf_tile(R, 1, kc, a, ka, bp, ps, y, ldy, ncols, first);        \
		else if (np == 2)                                                       \
			pwf_tile(R, 2, kc, a, ka, bp, ps, y, ldy, ncols, first);        \
		else                                                                    \
			pwf_tile(R, 3, kc, a, ka, bp, ps, y, ldy, ncols, first);        \
		break;

PW_TARGET512 static void pwf_micro(int mr, int np, int64_t kc, const float *a, int64_t ka, const float *bp,
				   int64_t ps, float *y, int64_t ldy, int ncols, int first)
{
	switch (mr) {
		PWF_CASE(1)
		PWF_CASE(2)
		PWF_CASE(3)
		PWF_CASE(4)
		PWF_CASE(5)
		PWF_CASE(6)
	default:
		break;
	}
}

/* pw_block's units for wflip: panels of dY packed per k chunk of r->kc. */
static void pwf_block(struct pw_run *r, int64_t bg, int64_t j0, int64_t nc, int64_t t0, int64_t t1, float *bp)
{
	const struct hp_conv *cv = r->cv;
	int64_t nb = bg / cv->group, g = bg % cv->group, K = cv->kdim, M = cv->cout_g;
	const float *x = r->x + (nb * cv->cin + g * cv->cin_g) * cv->xvol, *w = r->w + g * M * K;
	float *y = r->y + (nb * cv->cout + g * M) * cv->yvol + j0;

	for (int64_t k0 = 0; k0 < K; k0 += r->kc) {
		int64_t kc = min64(r->kc, K - k0);
		pw_pack(x, cv->xvol, k0, kc, j0, nc, bp);
		for (int64_t t = t0; t < t1; t++) {
			int64_t m0 = t * PW_MR, mr = min64(PW_MR, M - m0);
			for (int64_t p = 0, np; p * PW_NR < nc; p += np) {
				np = min64(3, (nc - p * PW_NR + PW_NR - 1) / PW_NR);
				pwf_micro((int)mr, (int)np, kc, w + k0 * M + m0, M, bp + p * kc * PW_NR, kc * PW_NR,
					  y + m0 * cv->yvol + p * PW_NR, cv->yvol, (int)min64(np * PW_NR, nc - p * PW_NR),
					  k0 == 0);
			}
		}
	}
}
#else
static void pwf_block(struct pw_run *r, int64_t bg, int64_t j0, int64_t nc, int64_t t0, int64_t t1, float *bp)
{
	(void)r, (void)bg, (void)j0, (void)nc, (void)t0, (void)t1, (void)bp;
}
#endif

int hp_pw_flip_available(void)
{
#ifdef PW_X86
	return hp_pw_available() && pw_512();
#else
	return 0;
#endif
}

/* The workspace of a wflip node may be no larger than the path it
 * replaced (conv_grad.c), so that a band plan stays where it was: fewer
 * workers, then shorter k chunks (no bit changes: each output is one
 * chain over k wherever its chunks end). */
static int pw_flip_fit(struct pw_run *r, int64_t cap, int threads)
{
	int64_t kmin = min64(r->cv->kdim, PW_MIN_KC);

	while (threads > 1 && cap / threads < kmin * PW_NB)
		threads--;
	r->kc = min64(PW_KC, cap / threads / PW_NB);
	r->kc = r->kc > 1 ? r->kc : 1;
	return threads;
}

size_t hp_pw_workspace_min(const struct hp_conv *cv)
{
	return (size_t)(min64(cv->kdim, PW_MIN_KC) * PW_NB) * sizeof(float);
}

/* Units are (item and group, column block, micro-tile of rows), the tile
 * fastest; a worker's run is cut where the column block changes. */
static void pw_range(void *arg, int64_t b, int64_t e, int tid)
{
	struct pw_run *r = arg;
	float *bp = r->ws + tid * r->per_thread;

	while (b < e) {
		int64_t blk = b / r->mt, t0 = b % r->mt, t1 = min64(r->mt, t0 + (e - b));
		int64_t bg = blk / r->nblk, j0 = blk % r->nblk * r->nbw;
		if (r->cv->wflip)
			pwf_block(r, bg, j0, min64(r->nbw, r->cv->yvol - j0), t0, t1, bp);
		else
			pw_block(r, bg, j0, min64(r->nbw, r->cv->yvol - j0), t0, t1, bp, tid);
		b += t1 - t0;
	}
}

/* One thread: y[M][N] (ldy) = bias + w[M][K] (lda) x b[K][N] (ldb), each
 * output one chain over k as above; column panels read in place but the
 * last, partial one, packed (room for PW_KC rows on the stack); f (with
 * add in y's layout, or NULL): the epilogue in registers after the last
 * k chunk. */
static void pw_gemm_fin(int64_t M, int64_t N, int64_t K, const float *w, int64_t lda, const float *b, int64_t ldb,
			const float *bias, float *y, int64_t ldy, const struct hp_fma_fin *f, const float *add)
{
	float tail[PW_KC * PW_NR];
	int64_t nfull = N / PW_NR * PW_NR;
	int fuse = pw_fuse_tail(nfull, N - nfull); /* the tail in the first tiles */

	(void)f, (void)add; /* without PW_X86 */
	for (int64_t k0 = 0; k0 < K; k0 += PW_KC) {
		int64_t kc = min64(PW_KC, K - k0);
		if (N > nfull && !fuse)
			pw_pack(b, ldb, k0, kc, nfull, N - nfull, tail);
		for (int64_t j = 0, nj = PW_NR; j < N; j += nj) { /* a panel stays in L1 over the rows */
#ifdef PW_X86
			if (pw_512()) { /* up to 3 full panels in place, or the tail */
				int full = j < nfull, last = k0 + kc == K, nt = fuse && j == 0 ? (int)(N - nfull) : 0;
				int64_t mstep = pw_tile_rows(nt > 0, nt);
				/* runs of 4 panels where K is not short, no run of 1 after them */
				int64_t rem = (nfull - j) / PW_NR, wide = nt == 0 && kc >= PW_WIDE_K && (rem >= 7 || rem == 4);
				nj = !full ? N - j : PW_NR * (wide ? 4 : min64(3, rem));
				for (int64_t m0 = 0; m0 < M; m0 += mstep)
					pw_micro512x((int)min64(mstep, M - m0), (int)((nj + PW_NR - 1) / PW_NR), nt, kc,
						     w + m0 * lda + k0, lda, full ? b + k0 * ldb + j : tail,
						     full ? ldb : PW_NR, PW_NR, b + k0 * ldb + nfull, ldb,
						     y + m0 * ldy + j, ldy, nfull - j, (int)nj, k0 == 0,
						     bias && k0 == 0 ? bias + m0 : NULL, last ? f : NULL,
						     last && f && add ? add + m0 * ldy + j : NULL);
				if (fuse && j + nj == nfull)
					break;
				continue;
			}
			nj = PW_NR;
#endif
			for (int64_t m0 = 0; m0 < M; m0 += PW_MR) {
#ifdef PW_X86
				int full = j < nfull, last = k0 + kc == K;
				pw_micro((int)min64(PW_MR, M - m0), kc, w + m0 * lda + k0, lda,
					 full ? b + k0 * ldb + j : tail, full ? ldb : PW_NR, y + m0 * ldy + j, ldy,
					 (int)min64(PW_NR, N - j), k0 == 0, bias && k0 == 0 ? bias + m0 : NULL,
					 last ? f : NULL, last && f && add ? add + m0 * ldy + j : NULL);
#endif
			}
		}
	}
}

void hp_pw_gemm(int64_t M, int64_t N, int64_t K, const float *w, int64_t lda, const float *b, int64_t ldb,
		const float *bias, float *y, int64_t ldy)
{
	pw_gemm_fin(M, N, K, w, lda, b, ldb, bias, y, ldy, NULL, NULL);
}

int hp_pw_gemm_epi(int64_t M, int64_t N, int64_t K, const float *w, int64_t lda, const float *b, int64_t ldb,
		   const float *bias, float *y, int64_t ldy, const struct hp_epi *epi, const float *add)
{
	struct pw_run r = { .epi = epi };

	pw_fin_plan(&r);
	if (!r.fin_ok || (r.fin_add && !add))
		return 0;
	pw_gemm_fin(M, N, K, w, lda, b, ldb, bias, y, ldy, &r.fin, r.fin_add ? add : NULL);
	return 1;
}

/* Full panels of X read in place where a plane is one column block
 * (MobileNetV2's 7x7 layers: its rows 49 floats apart stay in cache) and
 * the tail panel for all of K fits a worker's buffer: the units of a
 * block then share the tail and nothing else is packed, so they can be
 * single micro-tiles.  Larger planes pack, as rows of X a plane apart
 * would each be a page of their own. */
static int pw_inplace(const struct hp_conv *cv, int64_t per_thread)
{
	return cv->yvol <= PW_NB && cv->kdim * PW_NR <= per_thread;
}

/* Micro-tiles per stolen unit (pw_run's units above): PW_UNITS_PER_THREAD
 * units a thread, not fewer than PW_MIN_PACKED_TILES rows (or a whole
 * block) per unit where units pack their panels (not where a thread packs a
 * block once for its units: r->whole). */
static int64_t pw_steal_unit(const struct pw_run *r, int64_t units, int threads)
{
	int64_t su = units / ((int64_t)threads * PW_UNITS_PER_THREAD), blocks = units / r->mt;

	/* evened blocks (r->nbw < PW_NB): each thread's share whole blocks */
	if (r->nbw < PW_NB && blocks % threads == 0)
		return blocks / threads * r->mt;
	/* too few tiles for two units of PW_MIN_PACKED_TILES a thread: one
	 * unit a thread, each packing its panels once (units of 8 of
	 * DenseNet's 22 tiles at 6x6 made shares of 16 and 6 tiles, and the
	 * thread that stole a unit packed its panels again: 1.46x from the
	 * second thread); not in training's dX (wflip), unmeasured there */
	if (!r->inplace && !r->whole && !r->cv->wflip && units <= 2 * PW_MIN_PACKED_TILES * (int64_t)threads)
		return (units + threads - 1) / threads;
	if (!r->inplace && !r->whole && su < min64(r->mt, PW_MIN_PACKED_TILES))
		su = min64(r->mt, PW_MIN_PACKED_TILES);
	return su < 1 ? 1 : su;
}

static void pw_forward(const struct hp_conv *cv, const float *x, const float *w, const float *b, float *y, float *ws,
		       struct hp_pool *pool, const struct hp_epi *epi, const float *addend, const struct hp_pw_pro *pro)
{
	struct pw_run r = { .cv = cv, .x = x, .w = w, .b = b, .y = y, .ws = ws, .epi = epi, .addend = addend,
			    .pro = pro };
	int64_t cap = (int64_t)(cv->workspace / sizeof(float)), units;
	int saved, threads;

	if (!pro && hp_pwt_wanted(cv, min64(cv->kdim, PW_KC) * PW_NB)) { /* tiny planes: conv_pwt.c */
		hp_pwt_forward(cv, x, w, b, y, ws, min64(cv->kdim, PW_KC) * PW_NB, pool, epi, addend);
		return;
	}
	threads = hp_conv_threads_enter(pool, &saved);

	pw_fin_plan(&r);
	/* few blocks: an even number of equal ones (144 columns: 80 + 64) */
	r.nbw = hp_conv_even_block(cv->yvol, PW_NB, PW_NR, cv->batch * cv->group, 0);
	r.nblk = (cv->yvol + r.nbw - 1) / r.nbw;
	r.per_thread = min64(cv->kdim, PW_KC) * PW_NB;
	r.inplace = !pro && pw_inplace(cv, r.per_thread);
	/* a prologue packs a block's panels once for all of K where they fit
	 * (the 1x1s of DenseNet's 8x8 and 4x4 blocks, read in place without) */
	r.whole = pro && cv->kdim * ((min64(cv->yvol, PW_NB) + PW_NR - 1) / PW_NR * PW_NR) <= r.per_thread;
	/* in place, a plane is one block of columns: its tail is every tile's */
	r.mr = pw_tile_rows(r.inplace && pw_fuse_tail(cv->yvol / PW_NR * PW_NR, cv->yvol % PW_NR), cv->yvol % PW_NR);
	if (pw_512() && cv->yvol <= PW_NR && (r.inplace || r.whole)) /* X's panel kept for all the block's tiles */
		r.mr = PW_MR1;
	if (cv->wflip) { /* pwf_block: packed panels, PW_MR rows */
		threads = pw_flip_fit(&r, cap, threads);
		r.per_thread = min64(cv->kdim, r.kc) * PW_NB;
		r.inplace = 0;
		r.mr = PW_MR;
	}
	r.mt = (cv->cout_g + r.mr - 1) / r.mr;
	for (int t = 0; t < PW_MAX_TID; t++)
		r.tail_of[t] = -1;
	units = cv->batch * cv->group * r.nblk * r.mt;
	if (threads > cap / r.per_thread)
		threads = (int)(cap / r.per_thread);
	threads = threads < PW_MAX_TID ? threads : PW_MAX_TID;
	threads = hp_conv_par_threads(pool, threads, hp_conv_flops(cv));
	hp_conv_steal(pool, threads, units, pw_steal_unit(&r, units, threads), pw_range, &r);
	hp_conv_threads_leave(saved);
}

void hp_pw_forward(const struct hp_conv *cv, const float *x, const float *w, const float *b, float *y, float *ws,
		   struct hp_pool *pool, const struct hp_epi *epi, const float *addend)
{
	pw_forward(cv, x, w, b, y, ws, pool, epi, addend, NULL);
}

int hp_pw_pro_ok(const struct hp_conv *cv)
{
	return cv->direct && !cv->dw && !cv->dot && !cv->kxk && !cv->grp && !cv->shift && !cv->transpose &&
	       !cv->wflip && cv->group == 1 && hp_pw_available() &&
	       !hp_pwt_wanted(cv, min64(cv->kdim, PW_KC) * PW_NB);
}

void hp_pw_forward_pro(const struct hp_conv *cv, const float *x, const float *w, const float *b, float *y, float *ws,
		       struct hp_pool *pool, const struct hp_epi *epi, const float *addend,
		       const struct hp_pw_pro *pro)
{
	pw_forward(cv, x, w, b, y, ws, pool, epi, addend, pro);
}
