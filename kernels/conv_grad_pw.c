/* ConvGradFilter of a 1x1 convolution of stride 1 without pads,
 * ungrouped, with short units (conv_grad_pw.c), where AVX-512F exists:
 * MobileNetV2's pointwise layers at a batch of one, whose units are plane
 * rows of 7 to 64 positions.
 *
 * Why: on the sgemm path each unit is one sgemm of cout x cin outputs
 * whose reduction is the unit, one row (K = 28 at 28x28): packing and
 * writing the whole of dW for 28 multiply-adds a float ran MobileNetV2's
 * projection 96 -> 24 at 28x28 at about 86 GF/s a thread
 * (bench_conv_libs.c, class 1x1, pass dW).  Here a worker owns a block of
 * PF_CB input channels: per unit it transposes them (16 x 16 register
 * transposes) into T [position][PF_CB], and a tile of up to PF_MR output
 * channels x 2 vectors of 16 input channels keeps its 24 sums in
 * registers over the unit's positions: per position 2 loads of T and
 * PF_MR broadcasts of dY, read where it lies, into 24 fused multiply-adds.
 * dW itself holds the running sums between units.
 *
 * Every element of dW is one running sum in one order,
 *     s = acc (or 0);  then the units (conv_grad.c's: batch items, or
 *     with a batch of one the planes of the first spatial axis,
 *     hp_filter_unit_axis) from the last to the first, per unit
 *     t = 0, t = fma(dy, x, t) over its positions in order, s = s + t.
 * Units below PF_TINY positions (tiny planes: squeeze-and-excitation's
 * 1x1 at one position, 2x2 to 3x3 planes) run in chunks of units of at
 * most PF_UMAX positions, packed once per chunk (planes of one position
 * read in place), each tile of PF_TMR output channels keeping s in
 * registers over the chunk's units instead of reading and writing dW per
 * unit, and starting from acc itself (dW is not cleared first): the same
 * chain, the same bits (bench_conv_libs.c, pass dW, GF/s a thread,
 * per unit / chunks: 1x1-t2 84 / 104-117, 1x1-t3 114 / 174, 1x1-t3p
 * 59 / 96-120, 1x1-se 31 / 36).
 *
 * So a band of units that starts from the sum of the bands after it
 * (input acc) ends with the whole node's bits, and no thread count or
 * share changes a bit: each element is computed by one worker, in that
 * order. */
#include <stdint.h>
#include <string.h>

#include "kernels/conv_impl.h"
#include "kernels/cpu.h"
#include "kernels/simd_tr16.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define PF_X86 1
#define PF_TARGET __attribute__((target("avx2,fma,avx512f")))
#endif

#define PF_CB 32   /* input channels per share (2 vectors) */
#define PF_MR 12   /* output channels per tile */
#define PF_UMAX 64 /* positions per unit at most */
/* Units below this many positions run in chunks (pf_work_tiny). */
#define PF_TINY 14
#define PF_TMR 4   /* output channels per tile there */
#define PF_TPFD 16 /* rows of dW ahead that they prefetch */
#define PF_TBIG (1 << 17) /* from this many elements of dW (512 KB) */

static int pf_mode; /* 0 auto, 1 wherever it can run, -1 never */

void hp_pfilt_set_mode(int mode)
{
	pf_mode = mode;
}

int hp_pfilt_plan(struct hp_pfilt *q, int64_t n, int64_t cin, int64_t cout, int64_t svol, int64_t unit, int threads)
{
	memset(q, 0, sizeof *q);
	/* a forced shift mode (tests, benchmarks) asks for the sgemm paths */
	if (pf_mode < 0 || hp_conv_shift_mode() != 0 || !hp_cpu_avx512_fma() || n < 1 || cin < 1 || cout < 1 ||
	    unit < 1 || unit > PF_UMAX || svol % unit || cin * svol >= INT32_MAX || cout * svol >= INT32_MAX)
		return 0;
	/* Auto: units of up to 64 positions, 16 input channels and more
	 * (bench_conv_libs.c, pass dW, GF/s a thread, sgemm path / here, at a
	 * batch of one: 96 -> 24 at rows of 28 82 / 158, 32 -> 192 at 28
	 * 107 / 191, 64 -> 384 at 14 97 / 169, 24 -> 144 at 56 95 / 131; at
	 * rows of 7, 160 -> 960 and 960 -> 160, 152 / 140 and 140 / 130) */
	if (pf_mode == 0 && cin < 16)
		return 0;
	q->n = n, q->cin = cin, q->cout = cout, q->svol = svol, q->unit = unit;
	/* shares: blocks of PF_CB input channels, each cut in mparts ranges
	 * of output channels (whole tiles) where the blocks are fewer than
	 * the threads; a share packs its block's X itself */
	int64_t w = threads > 0 ? threads : 1, cb = (cin + PF_CB - 1) / PF_CB, tiles = (cout + PF_MR - 1) / PF_MR;
	q->mparts = cb >= w ? 1 : (w + cb - 1) / cb;
	q->mparts = q->mparts < tiles ? q->mparts : tiles;
	q->shares = cb * q->mparts;
	/* T's rows: a block's channels, 8 apart at least (24 at 24: two
	 * workers' within the sgemm path's workspace of 24 -> 144 at 56x56) */
	q->ldt = cin < PF_CB ? (cin + 7) / 8 * 8 : PF_CB;
	/* tiny units: chunks of units of at most PF_UMAX positions (chosen by
	 * the unit only; a band of items cuts them elsewhere, which changes
	 * no bit) */
	q->chunk = unit < PF_TINY ? PF_UMAX / unit : 0;
	q->per_worker = (size_t)((q->chunk ? q->chunk : 1) * unit * q->ldt + 16);
	if (q->chunk && svol == 1) /* read in place (pf_share_tiny) */
		q->per_worker = 16;
	q->workers = (int)(w < q->shares ? w : q->shares);
	return 1;
}

size_t hp_pfilt_workspace(const struct hp_pfilt *q)
{
	return (size_t)q->workers * q->per_worker * sizeof(float);
}

int hp_pfilt_fit(struct hp_pfilt *q, size_t bytes)
{
	int64_t w = (int64_t)(bytes / (q->per_worker * sizeof(float)));

	if (w < 1)
		return pf_mode > 0 ? (q->workers = 1) : 0;
	q->workers = (int)(w < q->workers ? w : q->workers);
	return 1;
}

void hp_pfilt_lean(struct hp_pfilt *q)
{
	q->workers = 1;
}

#ifdef PF_X86
/* dst [j][ldt] (j < np) at lanes [0, nr) = rows i < nr (ld apart) of src
 * at columns j: a 16 x 16 transpose in registers. */
static inline __attribute__((always_inline)) PF_TARGET void pf_tr16(const float *src, int64_t ld, int np, int nr,
								  float *dst, int64_t ldt)
{
	__m512 r[16];
	__mmask16 m = (__mmask16)((1u << np) - 1);

	for (int i = 0; i < 16; i++)
		r[i] = i < nr ? _mm512_maskz_loadu_ps(m, src + i * ld) : _mm512_setzero_ps();
	hp_tr16_ps(r);
	for (int j = 0; j < np; j++)
		if (nr == 16)
			_mm512_storeu_ps(dst + j * ldt, r[j]);
		else
			_mm512_mask_storeu_ps(dst + j * ldt, (__mmask16)((1u << nr) - 1), r[j]);
}

/* A unit's T [len][ldt] from nc input channels (rows ld apart) of X at
 * its first position x. */
static PF_TARGET void pf_pack(const float *x, int64_t ld, int64_t len, int nc, float *t, int64_t ldt)
{
	for (int v = 0; v * 16 < nc; v++)
		for (int64_t p0 = 0; p0 < len; p0 += 16)
			pf_tr16(x + v * 16 * ld + p0, ld, (int)(len - p0 < 16 ? len - p0 : 16),
				nc - v * 16 < 16 ? nc - v * 16 : 16, t + p0 * ldt + v * 16, ldt);
}

/* dW rows [0, MR) (ldw apart) at NV vectors of input channels (of the
 * last only the lanes of ml; the others read T's next row or the 16
 * floats after T, and are not stored) += the unit's chains: t = fma(dy, x, t) over len positions of T (rows
 * ldt apart), dY's rows ldy apart.  HALF (with NV 2, ml of 8 lanes at
 * most): the second vector's sums in 256-bit halves.  A 512-bit FMA takes
 * both of this machine's 256-bit FMA pipes, so for MobileNetV2's 24 input
 * channels (a vector and a half) the full second vector spent a quarter of
 * the tile's multiply-adds on idle lanes; each lane's chain is the same. */
static inline __attribute__((always_inline)) PF_TARGET void pf_tile(const float *t, int64_t ldt, const float *dy,
								 int64_t ldy, int64_t len, float *w, int64_t ldw,
								 __mmask16 ml, int MR, int NV, int HALF)
{
	__m512 a[PF_MR][2];
	__m256 h[PF_MR];

#pragma GCC unroll 12
	for (int i = 0; i < MR; i++) {
		h[i] = _mm256_setzero_ps();
		for (int v = 0; v < NV; v++)
			a[i][v] = _mm512_setzero_ps();
	}
	for (int64_t p = 0; p < len; p++) {
		__m512 x0 = _mm512_loadu_ps(t + p * ldt), x1 = NV > 1 && !HALF ? _mm512_loadu_ps(t + p * ldt + 16) : x0;
		__m256 xh = HALF ? _mm256_loadu_ps(t + p * ldt + 16) : _mm512_castps512_ps256(x0);
		for (int i = 0; i < MR; i++) {
			__m512 y = _mm512_set1_ps(dy[i * ldy + p]);
			a[i][0] = _mm512_fmadd_ps(y, x0, a[i][0]);
			if (HALF)
				h[i] = _mm256_fmadd_ps(_mm512_castps512_ps256(y), xh, h[i]);
			else if (NV > 1)
				a[i][1] = _mm512_fmadd_ps(y, x1, a[i][1]);
		}
	}
#pragma GCC unroll 12
	for (int i = 0; i < MR; i++) {
		if (NV > 1)
			_mm512_storeu_ps(w + i * ldw, _mm512_add_ps(_mm512_loadu_ps(w + i * ldw), a[i][0]));
		float *l = w + i * ldw + (NV - 1) * 16;
		__m512 s = _mm512_maskz_loadu_ps(ml, l);
		if (HALF)
			_mm512_mask_storeu_ps(l, ml,
					      _mm512_castps256_ps512(_mm256_add_ps(_mm512_castps512_ps256(s), h[i])));
		else
			_mm512_mask_storeu_ps(l, ml, _mm512_add_ps(s, a[i][NV - 1]));
	}
}

typedef void (*pf_tile_fn)(const float *t, int64_t ldt, const float *dy, int64_t ldy, int64_t len, float *w,
			   int64_t ldw, __mmask16 ml);
#define PF_INST(MR, NV, HALF, SFX)                                                                                  \
	static PF_TARGET void pf_tile_##MR##_##SFX(const float *t, int64_t ldt, const float *dy, int64_t ldy,         \
						   int64_t len, float *w, int64_t ldw, __mmask16 ml)                \
	{                                                                                                           \
		pf_tile(t, ldt, dy, ldy, len, w, ldw, ml, MR, NV, HALF);                                            \
	}
#define PF_INST2(MR) PF_INST(MR, 1, 0, 1) PF_INST(MR, 2, 0, 2) PF_INST(MR, 2, 1, h)
PF_INST2(1)
PF_INST2(2)
PF_INST2(3)
PF_INST2(4)
PF_INST2(5)
PF_INST2(6)
PF_INST2(7)
PF_INST2(8)
PF_INST2(9)
PF_INST2(10)
PF_INST2(11)
PF_INST2(12)
/* [rows - 1][0: one vector, 1: two, 2: a vector and a half] */
#define PF_ROW(MR) { pf_tile_##MR##_1, pf_tile_##MR##_2, pf_tile_##MR##_h }
static const pf_tile_fn pf_tiles[PF_MR][3] = { PF_ROW(1), PF_ROW(2), PF_ROW(3), PF_ROW(4),  PF_ROW(5),  PF_ROW(6),
					       PF_ROW(7), PF_ROW(8), PF_ROW(9), PF_ROW(10), PF_ROW(11), PF_ROW(12) };
/* Tiny units: dW rows [0, MR) (ldw apart) at NV vectors of input
 * channels (of the last only the lanes of ml) = src's (the same place
 * in src, or 0 where NULL) + the chains of nu units
 * taken from the last to the first, the sums in registers between them:
 * per unit t = 0, t = fma(dy, x, t) over its len positions, s = s + t.
 * Unit j's T at t + j * us (rows ldt apart), its dY at dy + dyo[j]
 * (rows ldy apart). */
static inline __attribute__((always_inline)) PF_TARGET void pf_ttile(const float *t, int64_t us, int64_t ldt,
								  const float *dy, const int64_t *dyo, int64_t ldy,
								  int nu, int64_t len, const float *src, float *w,
								  int64_t ldw, __mmask16 ml, int MR, int NV)
{
	__m512 s[PF_TMR][2], a[PF_TMR][2];
	__mmask16 m0 = (__mmask16)(src ? 0xffff : 0), m1 = (__mmask16)(src ? ml : 0);

	src = src ? src : w; /* not read where NULL: the masks are 0 */
	for (int i = 0; i < MR; i++) {
		s[i][0] = s[i][1] = _mm512_setzero_ps();
		if (NV > 1)
			s[i][0] = _mm512_maskz_loadu_ps(m0, src + i * ldw);
		s[i][NV - 1] = _mm512_maskz_loadu_ps(m1, src + i * ldw + (NV - 1) * 16);
	}
	for (int j = nu - 1; j >= 0; j--) {
		const float *tj = t + j * us, *dj = dy + dyo[j];
		for (int i = 0; i < MR; i++)
			for (int v = 0; v < NV; v++)
				a[i][v] = _mm512_setzero_ps();
		for (int64_t p = 0; p < len; p++) {
			__m512 x0 = NV > 1 ? _mm512_loadu_ps(tj + p * ldt) : _mm512_maskz_loadu_ps(ml, tj + p * ldt);
			__m512 x1 = NV > 1 ? _mm512_maskz_loadu_ps(ml, tj + p * ldt + 16) : x0;
			for (int i = 0; i < MR; i++) {
				__m512 y = _mm512_set1_ps(dj[i * ldy + p]);
				a[i][0] = _mm512_fmadd_ps(y, x0, a[i][0]);
				if (NV > 1)
					a[i][1] = _mm512_fmadd_ps(y, x1, a[i][1]);
			}
		}
		for (int i = 0; i < MR; i++)
			for (int v = 0; v < NV; v++)
				s[i][v] = _mm512_add_ps(s[i][v], a[i][v]);
	}
#pragma GCC unroll 12
	for (int i = 0; i < MR; i++) {
		if (NV > 1)
			_mm512_storeu_ps(w + i * ldw, s[i][0]);
		_mm512_mask_storeu_ps(w + i * ldw + (NV - 1) * 16, ml, s[i][NV - 1]);
	}
}

typedef void (*pf_ttile_fn)(const float *t, int64_t us, int64_t ldt, const float *dy, const int64_t *dyo, int64_t ldy,
			    int nu, int64_t len, const float *src, float *w, int64_t ldw, __mmask16 ml);
#define PF_TINST(MR, NV)                                                                                       \
	static PF_TARGET void pf_ttile_##MR##_##NV(const float *t, int64_t us, int64_t ldt, const float *dy,     \
						   const int64_t *dyo, int64_t ldy, int nu, int64_t len,           \
						   const float *src, float *w, int64_t ldw, __mmask16 ml)          \
	{                                                                                                      \
		pf_ttile(t, us, ldt, dy, dyo, ldy, nu, len, src, w, ldw, ml, MR, NV);                          \
	}
#define PF_TINST2(MR) PF_TINST(MR, 1) PF_TINST(MR, 2)
PF_TINST2(1)
PF_TINST2(2)
PF_TINST2(3)
PF_TINST2(4)
#define PF_TROW(MR) { pf_ttile_##MR##_1, pf_ttile_##MR##_2 }
static const pf_ttile_fn pf_ttiles[PF_TMR][2] = { PF_TROW(1), PF_TROW(2), PF_TROW(3), PF_TROW(4) };
#endif

struct pf_run {
	const struct hp_pfilt *q;
	const float *dy, *x, *acc;
	float *dw, *ws;
};

#ifdef PF_X86
/* A share of tiny units: chunks of q->chunk units from the last, each
 * packed once (a plane of one position is read in place: the items' X
 * rows are T's), then every tile of rows [m0, m1) runs the chunk with
 * its sums in registers, the first chunk from acc (or 0: dW is not
 * cleared first), the others from dW. */
static void pf_share_tiny(const struct pf_run *r, int64_t c0, int nc, int nv, __mmask16 ml, int64_t m0, int64_t m1,
			  float *t)
{
	const struct hp_pfilt *q = r->q;
	int64_t L = q->unit, units = q->svol / L, total = q->n * units, dyo[PF_UMAX];
	int inplace = q->svol == 1, big = q->cout * q->cin >= PF_TBIG;

	for (int64_t hi = total; hi > 0;) {
		int64_t lo = hi - q->chunk > 0 ? hi - q->chunk : 0;
		int nu = (int)(hi - lo);
		const float *tp = inplace ? r->x + lo * q->cin + c0 : t;
		for (int j = 0; j < nu; j++) {
			int64_t nb = (lo + j) / units, u = (lo + j) % units;
			dyo[j] = nb * q->cout * q->svol + u * L;
			if (!inplace)
				pf_pack(r->x + (nb * q->cin + c0) * q->svol + u * L, q->svol, L, nc, t + j * L * q->ldt,
					q->ldt);
		}
		for (int64_t m = m0; m < m1; m += PF_TMR) {
			int mr = m1 - m < PF_TMR ? (int)(m1 - m) : PF_TMR;
			const float *src = hi < total ? r->dw : r->acc;
			/* dW's rows (a tile's lines each) from L3 or memory: the
			 * rows PF_TPFD ahead, for writing, and acc's (where dW
			 * does not fit a core's L2: elsewhere it cost 20%,
			 * 1x1-se) */
			for (int64_t i = m + PF_TPFD; big && i < m + PF_TPFD + mr && i < m1; i++)
				for (int v = 0; v < nv; v++) {
					_mm_prefetch((const char *)(r->dw + i * q->cin + c0 + 16 * v), _MM_HINT_ET0);
					if (src && src != r->dw)
						_mm_prefetch((const char *)(src + i * q->cin + c0 + 16 * v), _MM_HINT_T0);
				}
			pf_ttiles[mr - 1][nv - 1](tp, inplace ? q->cin : L * q->ldt, q->ldt, r->dy + m * q->svol, dyo,
						  q->svol, nu, L, src ? src + m * q->cin + c0 : NULL,
						  r->dw + m * q->cin + c0, q->cin, ml);
		}
		hi = lo;
	}
}
#endif

/* Shares [b, e): a block of PF_CB input channels and a range of tiles of
 * output channels each. */
static void pf_work(void *arg, int64_t b, int64_t e, int tid)
{
#ifdef PF_X86
	const struct pf_run *r = arg;
	const struct hp_pfilt *q = r->q;
	int64_t L = q->unit, units = q->svol / L, tiles = (q->cout + PF_MR - 1) / PF_MR;
	float *t = r->ws + (size_t)tid * q->per_worker;

	for (int64_t sh = b; sh < e; sh++) {
		int64_t c0 = sh / q->mparts * PF_CB, part = sh % q->mparts;
		int64_t m0 = tiles * part / q->mparts * PF_MR, m1 = tiles * (part + 1) / q->mparts * PF_MR;
		int nc = q->cin - c0 < PF_CB ? (int)(q->cin - c0) : PF_CB, nv = (nc + 15) / 16;
		int col = nv == 2 && nc <= 24 ? 2 : nv - 1; /* pf_tiles' column */
		__mmask16 ml = (__mmask16)((1u << (nc - (nv - 1) * 16)) - 1);
		m1 = m1 < q->cout ? m1 : q->cout;
		if (q->chunk) {
			pf_share_tiny(r, c0, nc, nv, ml, m0, m1, t);
			continue;
		}
		for (int64_t nb = q->n - 1; nb >= 0; nb--)
			for (int64_t u = units - 1; u >= 0; u--) {
				const float *dy = r->dy + nb * q->cout * q->svol + u * L;
				pf_pack(r->x + (nb * q->cin + c0) * q->svol + u * L, q->svol, L, nc, t, q->ldt);
				for (int64_t m = m0; m < m1; m += PF_MR) {
					int mr = m1 - m < PF_MR ? (int)(m1 - m) : PF_MR;
					pf_tiles[mr - 1][col](t, q->ldt, dy + m * q->svol, q->svol, L, r->dw + m * q->cin + c0,
								 q->cin, ml);
				}
			}
	}
#else
	(void)arg, (void)b, (void)e, (void)tid;
#endif
}

void hp_pfilt_run(const struct hp_pfilt *q, const float *dy, const float *x, const float *acc, float *dw, float *ws,
		  struct hp_pool *pool)
{
	struct pf_run r = { .q = q, .dy = dy, .x = x, .acc = acc, .dw = dw, .ws = ws };
	int saved, threads = hp_conv_threads_enter(pool, &saved);

	if (q->chunk) /* the tiles start from acc */
		;
	else if (acc && acc != dw)
		memcpy(dw, acc, (size_t)(q->cout * q->cin) * sizeof *dw);
	else if (!acc)
		memset(dw, 0, (size_t)(q->cout * q->cin) * sizeof *dw);
	threads = threads < q->workers ? threads : q->workers;
	/* at most a worker per share (tid < threads): its buffers are the tid's */
	hp_conv_parallel(pool, threads, q->shares, pf_work, &r);
	hp_conv_threads_leave(saved);
}
