/* Gemm's and MatMul's own product (gemm_fma.h): AVX2+FMA register tiles
 * of 6 rows by 16 columns, each output one chain of FMAs over k in order.
 *
 * Why not OpenBLAS's tiles (gemm.c): sgemm rounds an element by the
 * extents of the call that computes it, so the tile geometry had to stay
 * fixed for the bits (out-of-core blocks, thread counts), and at a
 * transformer's 256 x 128..512 x 128..512 products OpenBLAS repacked the
 * activations for every tile of 32 columns (sgemm_oncopy, 12% of a
 * GPT-2-style inference) and reached about 57 GF/s a thread.
 *
 * Layout: A (the activations) is read in place, its 6 rows broadcast one
 * element at a time; op(B) is packed per run of units into panels
 * [k][16] of KC k by NB columns (zeros past N), which stay in L2 while
 * every row tile reads them.  The packing is once per column block and
 * row run, about 1/(2M) of the flops: at 256 rows, 1/512.
 *
 * Work is cut into units of (problem, NB columns, 6 rows), rows fastest,
 * each pool thread owning a contiguous share of them and taking the
 * others' tails when done (fm_share); a chunk of k stores
 * its running sums to Y and the next chunk reloads them, so the chain
 * (and its bits) is the same whatever the blocking or the split. */
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/fma_tile.h"
#include "kernels/gemm_fma.h"

#define FM_MR 6     /* rows per micro-tile */
#define FM_NR 16    /* columns per micro-tile (two vectors) */
#define FM_KC 256   /* k per cache block */
#define FM_NB 64    /* columns per unit (a multiple of FM_NR) */
/* Below this many flops a product runs on the caller alone: waking the
 * pool costs more than the second thread gains (gemm.c's bar). */
#define FM_PAR_MIN_FLOPS 4e6

#define FM_MAX_SHARES 64

/* A share's unclaimed units: front in the low 32 bits, back in the high. */
struct fm_share {
	_Atomic uint64_t fb;
	char pad[56];               /* one cache line each */
};

struct fm_run {
	const struct hp_fma_prod *p;
	int64_t ldy;                /* Y's row stride */
	int64_t mt, nblk;           /* micro-tiles of rows, column blocks per problem */
	struct fm_share *sh;        /* the pool's shares (NULL: fixed ranges) */
	int nsh;
	int64_t step;               /* units per claim */
};

static int64_t min64(int64_t a, int64_t b)
{
	return a < b ? a : b;
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define FM_TARGET __attribute__((target("avx2,fma")))
#define FM_INLINE __attribute__((always_inline)) inline

/* y[r][0..ncols) (+)= the chain over k < kc of A(r, k) * bp[k][.], rows
 * r < mr (A(r, k) at a[r * ra + k * rk]), nv vectors of columns; first:
 * from 0, else from y's values (the chain so far, or beta C). */
FM_TARGET static FM_INLINE void fm_tile(const int mr, const int nv, int64_t kc, const float *a, int64_t ra,
					int64_t rk, const float *bp, float *y, int64_t ldy, int ncols, int first)
{
	__m256 acc[FM_MR][2];
	__m256i mk[2] = { fma_mask(ncols), fma_mask(ncols - 8) };
	int full = ncols == 8 * nv;

	for (int r = 0; r < mr; r++)
		for (int v = 0; v < nv; v++)
			acc[r][v] = first ? _mm256_setzero_ps()
				: full ? _mm256_loadu_ps(y + r * ldy + 8 * v)
				       : _mm256_maskload_ps(y + r * ldy + 8 * v, mk[v]);
	for (int64_t k = 0; k < kc; k++, a += rk, bp += FM_NR) {
		__m256 b0 = _mm256_loadu_ps(bp), b1 = b0; /* unaligned: packed B may be a weight */
		if (nv > 1)
			b1 = _mm256_loadu_ps(bp + 8);
		for (int r = 0; r < mr; r++) {
			__m256 w = _mm256_broadcast_ss(a + r * ra);
			acc[r][0] = _mm256_fmadd_ps(w, b0, acc[r][0]);
			if (nv > 1)
				acc[r][1] = _mm256_fmadd_ps(w, b1, acc[r][1]);
		}
	}
	fma_store_acc(acc, mr, nv, y, ldy, ncols, full);
}

/* A's k stride a constant 1 in the usual case (rows in place), so that
 * the loop steps one pointer by 4 bytes. */
#define FM_CASE(R)                                                                      \
	case R:                                                                          \
		if (nv == 1 && rk == 1)                                                  \
			fm_tile(R, 1, kc, a, ra, 1, bp, y, ldy, ncols, first);           \
		else if (rk == 1)                                                        \
			fm_tile(R, 2, kc, a, ra, 1, bp, y, ldy, ncols, first);           \
		else if (nv == 1)                                                        \
			fm_tile(R, 1, kc, a, ra, rk, bp, y, ldy, ncols, first);          \
		else                                                                     \
			fm_tile(R, 2, kc, a, ra, rk, bp, y, ldy, ncols, first);          \
		break;

FM_TARGET static void fm_micro(int mr, int64_t kc, const float *a, int64_t ra, int64_t rk, const float *bp,
			       float *y, int64_t ldy, int ncols, int first)
{
	int nv = ncols > 8 ? 2 : 1;

	switch (mr) {
		FM_CASE(1)
		FM_CASE(2)
		FM_CASE(3)
		FM_CASE(4)
		FM_CASE(5)
		FM_CASE(6)
	default:
		break;
	}
}


/* A panel of w columns from a B whose k run contiguously (sk 1: Gemm's
 * transB, attention's keys): 8 x 8 blocks through registers for whole
 * groups of 8 columns and k (the element loop was 7% of a GPT-2-style
 * inference), the rest one by one.  The same values. */
FM_TARGET static void fm_pack_t(const float *src, int64_t sj, int64_t kc, int w, float *dst)
{
	int64_t k8 = kc / 8 * 8;
	int w8 = w / 8 * 8;

	if (w < FM_NR)
		memset(dst, 0, (size_t)(kc * FM_NR) * sizeof *dst);
	for (int c0 = 0; c0 < w8; c0 += 8)
		for (int64_t k = 0; k < k8; k += 8)
			fma_transpose8(dst + k * FM_NR + c0, FM_NR, src + c0 * sj + k, sj);
	for (int c = 0; c < w; c++)
		for (int64_t k = c < w8 ? k8 : 0; k < kc; k++)
			dst[k * FM_NR + c] = src[c * sj + k];
}

/* bp[p][k][16] = op(B)(k0 + k, j0 + 16 p + c) for k < kc, zeros past nc:
 * vector copies when op(B)'s rows are contiguous (sj 1), transposed
 * blocks when its columns are (sk 1), else element by element. */
FM_TARGET static void fm_pack(const float *b, int64_t sk, int64_t sj, int64_t k0, int64_t kc, int64_t j0,
			      int64_t nc, float *bp)
{
	for (int64_t p = 0; p * FM_NR < nc; p++) {
		int w = (int)min64(FM_NR, nc - p * FM_NR);
		float *dst = bp + p * kc * FM_NR;
		const float *src = b + k0 * sk + (j0 + p * FM_NR) * sj;
		if (sj != 1 && sk == 1) {
			fm_pack_t(src, sj, kc, w, dst);
			continue;
		}
		if (sj != 1) {
			if (w < FM_NR)
				memset(dst, 0, (size_t)(kc * FM_NR) * sizeof *dst);
			for (int c = 0; c < w; c++)
				for (int64_t k = 0; k < kc; k++)
					dst[k * FM_NR + c] = src[c * sj + k * sk];
			continue;
		}
		__m256i m0 = fma_mask(w), m1 = fma_mask(w - 8);
		if (w == FM_NR)
			for (int64_t k = 0; k < kc; k++, dst += FM_NR, src += sk) {
				_mm256_storeu_ps(dst, _mm256_loadu_ps(src));
				_mm256_storeu_ps(dst + 8, _mm256_loadu_ps(src + 8));
			}
		else
			for (int64_t k = 0; k < kc; k++, dst += FM_NR, src += sk) {
				_mm256_storeu_ps(dst, _mm256_maskload_ps(src, m0));
				_mm256_storeu_ps(dst + 8, _mm256_maskload_ps(src + 8, m1));
			}
	}
}

/* t[i * k + kk] = A(i, kk) = a[kk * rk + i] (ra 1): A's rows made
 * contiguous, by 8 x 8 blocks through registers. */
FM_TARGET static void fm_rows_of(const float *a, int64_t rk, int64_t m, int64_t k, float *t)
{
	int64_t m8 = m / 8 * 8, k8 = k / 8 * 8;

	for (int64_t i = 0; i < m8; i += 8)
		for (int64_t kk = 0; kk < k8; kk += 8)
			fma_transpose8(t + i * k + kk, k, a + kk * rk + i, rk);
	for (int64_t kk = 0; kk < k; kk++)
		for (int64_t i = kk < k8 ? m8 : 0; i < m; i++)
			t[i * k + kk] = a[kk * rk + i];
}

int hp_fma_gemm_ok(void)
{
	return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}

/* AVX-512 tiles of two 16-column panels side by side (6 rows x 32
 * columns, 12 zmm chains): a 512-bit FMA issues at a 256-bit one's rate
 * on this project's Zen 5 machines, twice the flops per instruction (a
 * BERT-style inference's FusedMatMuls ran at about 110 GF/s a thread on
 * fm_tile).  Each lane is fm_tile's chain (one FMA per k in order, from 0
 * or y), so the bits are fm_tile's.  Full panels only (32 columns). */
#define FW_TARGET __attribute__((target("avx512f,avx2,fma")))

static int fw_on = 1;

void hp_fma_set_wide(int on)
{
	fw_on = on;
}

static int fw_ok(void)
{
	static int cached = -1;

	if (cached < 0)
		cached = __builtin_cpu_supports("avx512f") && hp_fma_gemm_ok();
	return cached && fw_on;
}

#define FW_INIT(r)                                                                              \
	if (mr > r) {                                                                           \
		p##r = first ? _mm512_setzero_ps() : _mm512_loadu_ps(y + r * ldy);              \
		q##r = first ? p##r : _mm512_loadu_ps(y + r * ldy + FM_NR);                    \
	}
#define FW_FMA(r)                                                                               \
	if (mr > r) {                                                                           \
		__m512 w = _mm512_set1_ps(a[r * ra]);                                           \
		p##r = _mm512_fmadd_ps(w, b0, p##r);                                            \
		q##r = _mm512_fmadd_ps(w, b1, q##r);                                            \
	}
#define FW_OUT(r)                                                                               \
	if (mr > r) {                                                                           \
		_mm512_storeu_ps(y + r * ldy, p##r);                                            \
		_mm512_storeu_ps(y + r * ldy + FM_NR, q##r);                                   \
	}

/* y[r][0..32) (+)= the chains over k < kc of A(r, k) * (bp0 | bp1)[k][.],
 * rows r < mr. */
FW_TARGET static FM_INLINE void fw_tile(const int mr, int64_t kc, const float *a, int64_t ra, int64_t rk,
					const float *bp0, const float *bp1, float *y, int64_t ldy, int first)
{
	__m512 p0 = _mm512_setzero_ps(), p1 = p0, p2 = p0, p3 = p0, p4 = p0, p5 = p0;
	__m512 q0 = p0, q1 = p0, q2 = p0, q3 = p0, q4 = p0, q5 = p0;

	FW_INIT(0) FW_INIT(1) FW_INIT(2) FW_INIT(3) FW_INIT(4) FW_INIT(5)
	for (int64_t k = 0; k < kc; k++, a += rk, bp0 += FM_NR, bp1 += FM_NR) {
		__m512 b0 = _mm512_loadu_ps(bp0), b1 = _mm512_loadu_ps(bp1);
		FW_FMA(0) FW_FMA(1) FW_FMA(2) FW_FMA(3) FW_FMA(4) FW_FMA(5)
	}
	FW_OUT(0) FW_OUT(1) FW_OUT(2) FW_OUT(3) FW_OUT(4) FW_OUT(5)
}

#define FW_CASE(R)                                                                      \
	case R:                                                                          \
		if (rk == 1)                                                             \
			fw_tile(R, kc, a, ra, 1, bp0, bp1, y, ldy, first);               \
		else                                                                     \
			fw_tile(R, kc, a, ra, rk, bp0, bp1, y, ldy, first);              \
		break;

FW_TARGET static void fw_micro(int mr, int64_t kc, const float *a, int64_t ra, int64_t rk, const float *bp0,
			       const float *bp1, float *y, int64_t ldy, int first)
{
	switch (mr) {
		FW_CASE(1)
		FW_CASE(2)
		FW_CASE(3)
		FW_CASE(4)
		FW_CASE(5)
		FW_CASE(6)
	default:
		break;
	}
}
#else
static void fm_rows_of(const float *a, int64_t rk, int64_t m, int64_t k, float *t)
{
	(void)a, (void)rk, (void)m, (void)k, (void)t;
}

static void fm_micro(int mr, int64_t kc, const float *a, int64_t ra, int64_t rk, const float *bp, float *y,
		     int64_t ldy, int ncols, int first)
{
	(void)mr, (void)kc, (void)a, (void)ra, (void)rk, (void)bp, (void)y, (void)ldy, (void)ncols, (void)first;
}

static void fm_pack(const float *b, int64_t sk, int64_t sj, int64_t k0, int64_t kc, int64_t j0, int64_t nc,
		    float *bp)
{
	(void)b, (void)sk, (void)sj, (void)k0, (void)kc, (void)j0, (void)nc, (void)bp;
}

int hp_fma_gemm_ok(void)
{
	return 0;
}

void hp_fma_set_wide(int on)
{
	(void)on;
}

static int fw_ok(void)
{
	return 0;
}

static void fw_micro(int mr, int64_t kc, const float *a, int64_t ra, int64_t rk, const float *bp0, const float *bp1,
		     float *y, int64_t ldy, int first)
{
	(void)mr, (void)kc, (void)a, (void)ra, (void)rk, (void)bp0, (void)bp1, (void)y, (void)ldy, (void)first;
}
#endif

/* Rows [m0, m0 + mr) x columns [j0, j0 + nc) of problem q's Y = beta C:
 * where the chains start when there is a C. */
static void fm_init_c(const struct hp_fma_prod *p, int64_t q, int64_t m0, int64_t mr, int64_t j0, int64_t nc,
		      float *y, int64_t ldy)
{
	const float *c = p->c + q * p->cprob + m0 * p->cs0 + j0 * p->cs1;

	for (int64_t i = 0; i < mr; i++)
		for (int64_t j = 0; j < nc; j++)
			y[i * ldy + j] = p->beta * c[i * p->cs0 + j * p->cs1];
}

/* The epilogue on rows of micro-tiles t0..t1, columns [j0, j0 + nc), of
 * problem q while they are in cache; element-wise, so the bits of a pass
 * over the whole output.  A bias row (an addend over the last axis, what
 * MatMul + Add fuse to) is added here as vectors: hp_epi_span's general
 * form divides per element (3% of a GPT-2-style inference). */
static void fm_epilogue(const struct hp_fma_prod *p, int64_t q, int64_t ldy, int64_t j0, int64_t nc, int64_t t0,
			int64_t t1)
{
	struct hp_epi e = *p->epi;
	int row_bias = e.add == HP_EPI_ADD_MID && e.inner == 1 && e.mid == p->n && ldy == p->n;
	const float *bias = p->addend + j0;

	if (row_bias)
		e.add = HP_EPI_ADD_NONE;
	for (int64_t i = t0 * FM_MR; i < min64(p->m, t1 * FM_MR); i++) {
		int64_t at = (q * p->m + i) * ldy + j0;
		float *y = p->y + at;
		for (int64_t j = 0; row_bias && j < nc; j++)
			y[j] = y[j] + bias[j];
		if (e.add != HP_EPI_ADD_NONE || e.act != HP_EPI_NONE)
			hp_epi_span(&e, p->y, p->addend, at, at + nc);
	}
}

/* Micro-tiles t0..t1 of rows over columns [j0, j0 + nc) of problem q, by
 * chunks of k, op(B)'s chunk packed in bp first (unless packed: bp holds
 * this block's only chunk already). */
static void fm_block(const struct fm_run *r, int64_t q, int64_t j0, int64_t nc, int64_t t0, int64_t t1, float *bp,
		     int packed)
{
	const struct hp_fma_prod *p = r->p;
	const float *a = p->a + (p->aoff ? p->aoff[q] : 0), *b = p->bpk ? NULL : p->b + (p->boff ? p->boff[q] : 0);
	int64_t ldy = r->ldy;
	float *y = p->y + q * p->m * ldy;
	int wide = fw_ok();

	for (int64_t t = t0; p->c && t < t1; t++)
		fm_init_c(p, q, t * FM_MR, min64(FM_MR, p->m - t * FM_MR), j0, nc, y + t * FM_MR * ldy + j0, ldy);
	for (int64_t k0 = 0; k0 < p->k; k0 += FM_KC) {
		int64_t kc = min64(FM_KC, p->k - k0);
		if (!packed && !p->bpk) /* else bp holds it from the last run of this block */
			fm_pack(b, p->sk, p->sj, k0, kc, j0, nc, bp);
		/* a panel's chunk (16 KiB) stays in L1 while every row tile
		 * reads it; the rows of A stream from L2 (6 floats a step) */
		for (int64_t s = 0, d; s * FM_NR < nc; s += d) {
			const float *pan = p->bpk ? p->bpk + ((j0 / FM_NR + s) * p->k + k0) * FM_NR : bp + s * kc * FM_NR;
			/* two full panels at once where AVX-512 is (fw_tile) */
			int64_t pstep = p->bpk ? p->k * FM_NR : kc * FM_NR;
			d = wide && (s + 2) * FM_NR <= nc ? 2 : 1;
			for (int64_t t = t0; t < t1; t++) {
				int64_t m0 = t * FM_MR, mr = min64(FM_MR, p->m - m0);
				if (d == 2)
					fw_micro((int)mr, kc, a + m0 * p->ra + k0 * p->rk, p->ra, p->rk, pan,
						 pan + pstep, y + m0 * ldy + j0 + s * FM_NR, ldy, k0 == 0 && !p->c);
				else
					fm_micro((int)mr, kc, a + m0 * p->ra + k0 * p->rk, p->ra, p->rk, pan,
						 y + m0 * ldy + j0 + s * FM_NR, ldy, (int)min64(FM_NR, nc - s * FM_NR),
						 k0 == 0 && !p->c);
			}
		}
	}
	/* K = 0: the chains are their start, 0 or beta C */
	for (int64_t t = t0; p->k == 0 && !p->c && t < t1; t++)
		for (int64_t i = t * FM_MR; i < min64(p->m, (t + 1) * FM_MR); i++)
			memset(y + i * ldy + j0, 0, (size_t)nc * sizeof *y);
	if (p->epi)
		fm_epilogue(p, q, ldy, j0, nc, t0, t1);
}

/* Units [b, e) (problem, column block, micro-tile of rows, the tile
 * fastest), cut where the column block changes; pk: the (problem, column
 * block) whose op(B) bp holds when K fits one chunk (-1: none). */
static void fm_units(const struct fm_run *r, int64_t b, int64_t e, float *bp, int64_t *pk)
{
	while (b < e) {
		int64_t blk = b / r->mt, t0 = b % r->mt, t1 = min64(r->mt, t0 + (e - b));
		int64_t q = blk / r->nblk, j0 = blk % r->nblk * FM_NB;
		fm_block(r, q, j0, min64(FM_NB, r->p->n - j0), t0, t1, bp, *pk == blk && r->p->k <= FM_KC);
		*pk = blk;
		b += t1 - t0;
	}
}

static void fm_range(void *arg, int64_t b, int64_t e, int tid)
{
	float bp[FM_KC * FM_NB] __attribute__((aligned(64)));
	int64_t pk = -1;

	(void)tid;
	fm_units(arg, b, e, bp, &pk);
}

/* A run of share s's units: from its front (the owner) or its back (a
 * thread done with its own share), at most r->step of them and within
 * one column block.  0 when the share is empty. */
static int fm_claim(struct fm_run *r, int s, int back, int64_t *u0, int64_t *u1)
{
	uint64_t v = atomic_load(&r->sh[s].fb), nv;

	for (;;) {
		int64_t f = (int64_t)(v & 0xffffffffu), b = (int64_t)(v >> 32), n;
		if (f >= b)
			return 0;
		if (back) {
			n = min64(min64(r->step, b - f), (b - 1) % r->mt + 1);
			nv = (uint64_t)f | (uint64_t)(b - n) << 32;
			*u0 = b - n;
		} else {
			/* the owner takes a block whole when K spans chunks
			 * (each claim packs them again) */
			n = min64(min64(r->p->k <= FM_KC ? r->step : r->mt, b - f), r->mt - f % r->mt);
			nv = (uint64_t)(f + n) | (uint64_t)b << 32;
			*u0 = f;
		}
		*u1 = *u0 + n;
		if (atomic_compare_exchange_weak(&r->sh[s].fb, &v, nv))
			return 1;
	}
}

/* Share s: its own units from the front, then the others' from their
 * backs.  A worker woken late (tens of microseconds, more on a loaded
 * machine) finds its share's tail done by the caller instead of leaving
 * the caller waiting for it; each thread still starts on the units it
 * had in the previous inference, so the cache keeps them.  Who computes
 * a unit does not change its bits (each output one chain). */
static void fm_share(void *arg, int64_t b, int64_t e, int tid)
{
	struct fm_run *r = arg;
	float bp[FM_KC * FM_NB] __attribute__((aligned(64)));
	int64_t u0, u1, pk = -1;

	(void)tid;
	for (int64_t s = b; s < e; s++) {
		while (fm_claim(r, (int)s, 0, &u0, &u1))
			fm_units(r, u0, u1, bp, &pk);
		for (int o = 1; o < r->nsh; o++)
			while (fm_claim(r, (int)((s + o) % r->nsh), 1, &u0, &u1))
				fm_units(r, u0, u1, bp, &pk);
	}
}

static void fm_run(const struct hp_fma_prod *p, struct hp_pool *pool);

int64_t hp_fma_packed_floats(int64_t k, int64_t n)
{
	return (n + FM_NR - 1) / FM_NR * k * FM_NR;
}

/* The whole of op(B) as one column block and one k chunk: fm_pack's
 * panels [k][16], one after the other (stores unaligned: dst may be any
 * weight's memory). */
void hp_fma_pack_b(const float *b, int64_t sk, int64_t sj, int64_t k, int64_t n, float *dst)
{
	fm_pack(b, sk, sj, 0, k, 0, n, dst);
}

/* A transposed in memory (ra 1, a weight gradient's A^T dY) is read 6
 * floats from each of K cache lines per micro-tile, and read again for
 * every 16 columns: a BERT-style FFN's dW = X^T dY (X 1 MiB) ran at 2.6x
 * its forward product.  Its rows are then copied contiguous first (m k
 * floats, against 2 m n k flops); the chains, and so the bits, are the
 * same.  Problems with their own offsets keep the strided reads. */
#define FM_ROWS_MIN 16384 /* elements of A below which it stays in place */

void hp_fma_gemm(const struct hp_fma_prod *p, struct hp_pool *pool)
{
	struct hp_fma_prod q = *p;
	float *t;

	if (p->ra != 1 || p->rk == 1 || p->nprob != 1 || p->aoff || p->m * p->k < FM_ROWS_MIN ||
	    !(t = malloc((size_t)(p->m * p->k) * sizeof *t))) {
		fm_run(p, pool);
		return;
	}
	fm_rows_of(p->a, p->rk, p->m, p->k, t);
	q.a = t, q.ra = p->k, q.rk = 1;
	fm_run(&q, pool);
	free(t);
}

static void fm_run(const struct hp_fma_prod *p, struct hp_pool *pool)
{
	struct fm_share sh[FM_MAX_SHARES];
	struct fm_run r = { .p = p, .ldy = p->ldy ? p->ldy : p->n, .sh = sh };
	int64_t units;

	if (p->m == 0 || p->n == 0 || p->nprob == 0)
		return;
	r.mt = (p->m + FM_MR - 1) / FM_MR;
	r.nblk = (p->n + FM_NB - 1) / FM_NB;
	units = p->nprob * r.nblk * r.mt;
	if (2.0 * (double)p->nprob * (double)p->m * (double)p->n * (double)p->k < FM_PAR_MIN_FLOPS)
		pool = NULL;
	r.nsh = hp_pool_size(pool);
	if (r.nsh == 1 || r.nsh > FM_MAX_SHARES || units >= INT32_MAX || units < r.nsh) {
		hp_parallel_for(pool, units, 1, fm_range, &r);
		return;
	}
	/* steals of a quarter of a block's rows: fine enough to even out a
	 * late start, coarse enough to keep op(B)'s packing rare */
	r.step = (r.mt + 3) / 4;
	for (int s = 0; s < r.nsh; s++)
		atomic_init(&sh[s].fb, (uint64_t)(s * units / r.nsh) | (uint64_t)((s + 1) * units / r.nsh) << 32);
	hp_parallel_for(pool, r.nsh, 1, fm_share, &r);
}
