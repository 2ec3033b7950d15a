/* Products of few rows with a weight packed once (gemm_panels.h).
 *
 * op(B) is stored as column panels of NR = 16: panel p holds, for each kk
 * in 0..K, the 16 values op(B)[kk][16p .. 16p+15] (zeros past N), so the
 * kernel reads it front to back.  op(A) is copied per call into row
 * blocks of MR = 6 the same way (zeros past m): at 16 rows that copy is
 * 1/1024 of the multiply.  A 6 x 16 tile keeps 12 AVX2 accumulators and
 * sums over kk in order, one FMA per term: each output is the same sum
 * however many threads share the panels. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "hpdlf/error.h"
#include "kernels/fma_tile.h"
#include "kernels/gemm_panels.h"

#define MR 6
#define NR 16

struct pjob {
	const struct tk_panels *pk;
	const float *ap;            /* op(A) in row blocks: block b, kk: MR values */
	int64_t m, ldy;
	float alpha, *y;
	int add;
};

/* Tile (rows b0.., panel p) of Y from its accumulators t. */
static void tile_store(const struct pjob *j, const float t[MR][NR], int64_t i0, int64_t j0)
{
	int64_t mr = j->m - i0 < MR ? j->m - i0 : MR, nr = j->pk->n - j0 < NR ? j->pk->n - j0 : NR;

	for (int64_t i = 0; i < mr; i++) {
		float *y = j->y + (i0 + i) * j->ldy + j0;
		for (int64_t c = 0; c < nr; c++)
			y[c] = j->alpha * t[i][c] + (j->add ? y[c] : 0.0f);
	}
}

#if defined(__x86_64__)
#include <immintrin.h>

#define FMA_ROW(r)                                                   \
	do {                                                         \
		__m256 a_ = _mm256_broadcast_ss(ap + (r));           \
		c##r##0 = _mm256_fmadd_ps(a_, b0, c##r##0);          \
		c##r##1 = _mm256_fmadd_ps(a_, b1, c##r##1);          \
	} while (0)
#define STORE_ROW(r)                                   \
	do {                                           \
		_mm256_storeu_ps(t[r], c##r##0);       \
		_mm256_storeu_ps(t[r] + 8, c##r##1);   \
	} while (0)

#define LOAD_ROW(r) __m256 c##r##0 = _mm256_loadu_ps(t[r]), c##r##1 = _mm256_loadu_ps(t[r] + 8)

/* t += the tile's terms kk = 0..k, in order (t: the sums so far); one
 * line of pf + kk NR prefetched per term (panels_range's choice). */
__attribute__((target("avx2,fma"))) static void kern(const float *ap, const float *bp, int64_t k, float t[MR][NR],
						     const float *pf)
{
	LOAD_ROW(0);
	LOAD_ROW(1);
	LOAD_ROW(2);
	LOAD_ROW(3);
	LOAD_ROW(4);
	LOAD_ROW(5);
	for (int64_t kk = 0; kk < k; kk++, ap += MR, bp += NR) {
		__m256 b0 = _mm256_loadu_ps(bp), b1 = _mm256_loadu_ps(bp + 8);
		_mm_prefetch((const char *)(pf + kk * NR), _MM_HINT_T0);
		FMA_ROW(0);
		FMA_ROW(1);
		FMA_ROW(2);
		FMA_ROW(3);
		FMA_ROW(4);
		FMA_ROW(5);
	}
	STORE_ROW(0);
	STORE_ROW(1);
	STORE_ROW(2);
	STORE_ROW(3);
	STORE_ROW(4);
	STORE_ROW(5);
}

int tk_panels_ok(void)
{
	return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}
#else
static void kern(const float *ap, const float *bp, int64_t k, float t[MR][NR], const float *pf)
{
	(void)pf;
	for (int64_t kk = 0; kk < k; kk++, ap += MR, bp += NR)
		for (int i = 0; i < MR; i++)
			for (int c = 0; c < NR; c++)
				t[i][c] += ap[i] * bp[c];
}

int tk_panels_ok(void)
{
	return 0;
}
#endif

/* The panel's K in chunks of KC (8 KiB of it, in L1 while every row
 * block reads it: the panel comes from memory once); each tile's sums
 * carried over in t[] from chunk to chunk, so still in kk order. */
#define KC 128
#define MAXB (TK_PANEL_MAX_ROWS / MR + 1)

/* What row block b of chunk k0 of panel p prefetches, a line per term:
 * the first block two chunks ahead, the second (reading the chunk from
 * L1 by then) the next one, the others their own a little ahead.  The
 * panels lie end to end, so past a panel's last chunk this is the next
 * panel's first.  The weight then streams from memory during all the
 * blocks' compute, not only the first block's (16 rows of 8 weights of
 * 1024 x 1024 that do not stay in L3: 0.47-0.51 against 0.54-0.57 ms a
 * product, best of 400, loaded machine). */
static const float *prefetch_at(const struct pjob *j, int64_t p, int64_t k0, int64_t b)
{
	const float *bp = j->pk->buf + p * j->pk->k * NR;

	return bp + (b == 0 ? k0 + 2 * KC : b == 1 ? k0 + KC : k0 + 16) * NR;
}

static void panels_range(void *arg, int64_t begin, int64_t end, int tid)
{
	const struct pjob *j = arg;
	int64_t k = j->pk->k, nb = (j->m + MR - 1) / MR;
	float t[MAXB][MR][NR];

	(void)tid;
	for (int64_t p = begin; p < end; p++) {
		const float *bp = j->pk->buf + p * k * NR;
		memset(t, 0, sizeof t);
		for (int64_t k0 = 0; k0 < k; k0 += KC)
			for (int64_t b = 0; b < nb; b++)
				kern(j->ap + (b * k + k0) * MR, bp + k0 * NR, k - k0 < KC ? k - k0 : KC, t[b],
				     prefetch_at(j, p, k0, b));
		for (int64_t b = 0; b < nb; b++)
			tile_store(j, (const float(*)[NR])t[b], b * MR, p * NR);
	}
}

#if defined(__x86_64__)

/* A whole panel from a transposed B whose kk run contiguously (Gemm's
 * transB = 1 weight, [n][k]): 8 x 8 blocks through registers instead of
 * a scalar loop (the forward's packing was 8% of a 16-row stage's CPU);
 * the kk past the last multiple of 8 one by one.  The same values. */
static int pack_transposed(float *d, const float *src, int64_t sj, int64_t k, int64_t j0)
{
	int64_t k8 = k / 8 * 8;

	if (!tk_panels_ok())
		return 0;
	for (int64_t k0 = 0; k0 < k8; k0 += 8)
		for (int64_t c0 = 0; c0 < NR; c0 += 8)
			fma_transpose8(d + k0 * NR + c0, NR, src + (j0 + c0) * sj + k0, sj);
	for (int64_t kk = k8; kk < k; kk++)
		for (int64_t c = 0; c < NR; c++)
			d[kk * NR + c] = src[(j0 + c) * sj + kk];
	return 1;
}
#else
static int pack_transposed(float *d, const float *src, int64_t sj, int64_t k, int64_t j0)
{
	(void)d, (void)src, (void)sj, (void)k, (void)j0;
	return 0;
}
#endif

/* Panel of columns j0.. of op(B): rows of 16 copied whole when op(B)'s
 * rows are contiguous, else (op(B)'s columns contiguous, B transposed)
 * 8 x 8 or 16 x 16 blocks transposed, each read and written within L1. */
static void pack_panel(float *d, const float *src, int64_t sk, int64_t sj, int64_t k, int64_t n, int64_t j0)
{
	int64_t nc = n - j0 < NR ? n - j0 : NR;

	if (sj == 1 && nc == NR) {
		for (int64_t kk = 0; kk < k; kk++)
			memcpy(d + kk * NR, src + kk * sk + j0, NR * sizeof *d);
		return;
	}
	if (sk == 1 && nc == NR && pack_transposed(d, src, sj, k, j0))
		return;
	if (nc < NR)
		memset(d, 0, (size_t)(k * NR) * sizeof *d);
	for (int64_t k0 = 0; k0 < k; k0 += NR) {
		int64_t nk = k - k0 < NR ? k - k0 : NR;
		for (int64_t c = 0; c < nc; c++) {
			const float *s = src + (j0 + c) * sj + k0 * sk;
			for (int64_t kk = 0; kk < nk; kk++)
				d[(k0 + kk) * NR + c] = s[kk * sk];
		}
	}
}

int tk_panels_pack(struct tk_panels *pk, const float *src, int64_t sk, int64_t sj, int64_t k, int64_t n,
		   int64_t epoch)
{
	int64_t np = (n + NR - 1) / NR;
	uint64_t need = (uint64_t)(np * k * NR);

	if (pk->buf && pk->src == src && pk->epoch == epoch && pk->k == k && pk->n == n)
		return 0;
	if (need > pk->cap) {
		free(pk->buf);
		pk->cap = 0;
		if (!(pk->buf = aligned_alloc(64, (need * sizeof *pk->buf + 63) / 64 * 64)))
			return -ENOMEM;
		pk->cap = need;
	}
	for (int64_t p = 0; p < np; p++)
		pack_panel(pk->buf + p * k * NR, src, sk, sj, k, n, p * NR);
	pk->src = src;
	pk->epoch = epoch;
	pk->k = k;
	pk->n = n;
	return 0;
}

void tk_panels_free(struct tk_panels *pk)
{
	free(pk->buf);
	memset(pk, 0, sizeof *pk);
}

int tk_panels_mul(const struct tk_panels *pk, const float *a, int64_t ri, int64_t rk, int64_t m, float alpha,
		  float *y, int64_t ldy, int add, struct hp_pool *pool)
{
	int64_t k = pk->k, mb = (m + MR - 1) / MR;
	float *ap = malloc((size_t)(mb * k * MR) * sizeof *ap + 1);
	struct pjob j = { .pk = pk, .ap = ap, .m = m, .ldy = ldy, .alpha = alpha, .y = y, .add = add };

	if (!ap)
		return -ENOMEM;
	for (int64_t b = 0; b < mb; b++)
		for (int64_t kk = 0; kk < k; kk++)
			for (int64_t i = 0; i < MR; i++)
				ap[(b * k + kk) * MR + i] = b * MR + i < m ? a[(b * MR + i) * ri + kk * rk] : 0.0f;
	hp_parallel_for(pool, (pk->n + NR - 1) / NR, 1, panels_range, &j);
	free(ap);
	return 0;
}
