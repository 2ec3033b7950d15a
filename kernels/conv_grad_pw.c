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
 * So a band of units that starts from the sum of the bands after it
 * (input acc) ends with the whole node's bits, and no thread count or
 * share changes a bit: each element is computed by one worker, in that
 * order. */
#include <stdint.h>
#include <string.h>

#include "kernels/conv_impl.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define PF_X86 1
#define PF_TARGET __attribute__((target("avx2,fma,avx512f")))
#endif

#define PF_CB 32   /* input channels per share (2 vectors) */
#define PF_MR 12   /* output channels per tile */
#define PF_UMAX 64 /* positions per unit at most */

static int pf_mode; /* 0 auto, 1 wherever it can run, -1 never */

void hp_pfilt_set_mode(int mode)
{
	pf_mode = mode;
}

static int pf_avx512(void)
{
#ifdef PF_X86
	static int cached = -1;

	if (cached < 0)
		cached = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("fma");
	return cached;
#else
	return 0;
#endif
}

int hp_pfilt_plan(struct hp_pfilt *q, int64_t n, int64_t cin, int64_t cout, int64_t svol, int64_t unit, int threads)
{
	memset(q, 0, sizeof *q);
	/* a forced shift mode (tests, benchmarks) asks for the sgemm paths */
	if (pf_mode < 0 || hp_conv_shift_mode() != 0 || !pf_avx512() || n < 1 || cin < 16 || cin % 16 || cout < 1 ||
	    unit < 1 || unit > PF_UMAX || svol % unit || cin * svol >= INT32_MAX || cout * svol >= INT32_MAX)
		return 0;
	/* Auto: rows of 14 to 64 positions (bench_conv_libs.c, pass dW, GF/s
	 * a thread, sgemm path / here: the 1x1 classes at a batch of one) */
	if (pf_mode == 0 && unit < 14)
		return 0;
	q->n = n, q->cin = cin, q->cout = cout, q->svol = svol, q->unit = unit;
	q->shares = (cin + PF_CB - 1) / PF_CB;
	q->per_worker = (size_t)(unit * PF_CB);
	int64_t w = threads > 0 ? threads : 1;
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
/* dst [j][PF_CB] (j < np) at lanes [0, 16) = rows i < 16 (ld apart) of src
 * at columns j: a 16 x 16 transpose in registers. */
static inline __attribute__((always_inline)) PF_TARGET void pf_tr16(const float *src, int64_t ld, int np, float *dst)
{
	__m512 r[16], t[16];
	__mmask16 m = (__mmask16)((1u << np) - 1);

	for (int i = 0; i < 16; i++)
		r[i] = _mm512_maskz_loadu_ps(m, src + i * ld);
	for (int i = 0; i < 8; i++) {
		t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
		t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
	}
	for (int i = 0; i < 4; i++) {
		r[4 * i + 0] = _mm512_shuffle_ps(t[4 * i], t[4 * i + 2], 0x44);
		r[4 * i + 1] = _mm512_shuffle_ps(t[4 * i], t[4 * i + 2], 0xEE);
		r[4 * i + 2] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0x44);
		r[4 * i + 3] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0xEE);
	}
	for (int i = 0; i < 4; i++) {
		t[i] = _mm512_shuffle_f32x4(r[i], r[4 + i], 0x88);
		t[4 + i] = _mm512_shuffle_f32x4(r[i], r[4 + i], 0xDD);
		t[8 + i] = _mm512_shuffle_f32x4(r[8 + i], r[12 + i], 0x88);
		t[12 + i] = _mm512_shuffle_f32x4(r[8 + i], r[12 + i], 0xDD);
	}
	for (int i = 0; i < 4; i++) {
		r[i] = _mm512_shuffle_f32x4(t[i], t[8 + i], 0x88);
		r[8 + i] = _mm512_shuffle_f32x4(t[i], t[8 + i], 0xDD);
		r[4 + i] = _mm512_shuffle_f32x4(t[4 + i], t[12 + i], 0x88);
		r[12 + i] = _mm512_shuffle_f32x4(t[4 + i], t[12 + i], 0xDD);
	}
	for (int j = 0; j < np; j++)
		_mm512_storeu_ps(dst + j * PF_CB, r[j]);
}

/* A unit's T [len][PF_CB] from nv vectors of input channels of X (rows ld
 * apart) at its first position x. */
static PF_TARGET void pf_pack(const float *x, int64_t ld, int64_t len, int nv, float *t)
{
	for (int v = 0; v < nv; v++)
		for (int64_t p0 = 0; p0 < len; p0 += 16)
			pf_tr16(x + v * 16 * ld + p0, ld, (int)(len - p0 < 16 ? len - p0 : 16), t + p0 * PF_CB + v * 16);
}

/* dW rows [0, MR) (ldw apart) at nv vectors of input channels += the
 * unit's chains: t = fma(dy, x, t) over len positions, dY's rows ldy apart. */
static inline __attribute__((always_inline)) PF_TARGET void pf_tile(const float *t, const float *dy, int64_t ldy,
								 int64_t len, float *w, int64_t ldw, int MR, int NV)
{
	__m512 a[PF_MR][2];

	for (int i = 0; i < MR; i++)
		for (int v = 0; v < NV; v++)
			a[i][v] = _mm512_setzero_ps();
	for (int64_t p = 0; p < len; p++) {
		__m512 x0 = _mm512_loadu_ps(t + p * PF_CB), x1 = NV > 1 ? _mm512_loadu_ps(t + p * PF_CB + 16) : x0;
		for (int i = 0; i < MR; i++) {
			__m512 y = _mm512_set1_ps(dy[i * ldy + p]);
			a[i][0] = _mm512_fmadd_ps(y, x0, a[i][0]);
			if (NV > 1)
				a[i][1] = _mm512_fmadd_ps(y, x1, a[i][1]);
		}
	}
	for (int i = 0; i < MR; i++)
		for (int v = 0; v < NV; v++)
			_mm512_storeu_ps(w + i * ldw + v * 16, _mm512_add_ps(_mm512_loadu_ps(w + i * ldw + v * 16), a[i][v]));
}

typedef void (*pf_tile_fn)(const float *t, const float *dy, int64_t ldy, int64_t len, float *w, int64_t ldw);
#define PF_INST(MR, NV)                                                                                             \
	static PF_TARGET void pf_tile_##MR##_##NV(const float *t, const float *dy, int64_t ldy, int64_t len, float *w, \
						  int64_t ldw)                                                      \
	{                                                                                                           \
		pf_tile(t, dy, ldy, len, w, ldw, MR, NV);                                                           \
	}
#define PF_INST2(MR) PF_INST(MR, 1) PF_INST(MR, 2)
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
#define PF_ROW(MR) { pf_tile_##MR##_1, pf_tile_##MR##_2 }
static const pf_tile_fn pf_tiles[PF_MR][2] = { PF_ROW(1), PF_ROW(2), PF_ROW(3), PF_ROW(4),  PF_ROW(5),  PF_ROW(6),
					       PF_ROW(7), PF_ROW(8), PF_ROW(9), PF_ROW(10), PF_ROW(11), PF_ROW(12) };
#endif

struct pf_run {
	const struct hp_pfilt *q;
	const float *dy, *x;
	float *dw, *ws;
};

/* Shares [b, e): blocks of PF_CB input channels, every output channel. */
static void pf_work(void *arg, int64_t b, int64_t e, int tid)
{
#ifdef PF_X86
	const struct pf_run *r = arg;
	const struct hp_pfilt *q = r->q;
	int64_t L = q->unit, units = q->svol / L;
	float *t = r->ws + (size_t)tid * q->per_worker;

	for (int64_t sh = b; sh < e; sh++) {
		int64_t c0 = sh * PF_CB;
		int nv = q->cin - c0 < PF_CB ? (int)((q->cin - c0) / 16) : 2;
		for (int64_t nb = q->n - 1; nb >= 0; nb--)
			for (int64_t u = units - 1; u >= 0; u--) {
				const float *dy = r->dy + nb * q->cout * q->svol + u * L;
				pf_pack(r->x + (nb * q->cin + c0) * q->svol + u * L, q->svol, L, nv, t);
				for (int64_t m0 = 0; m0 < q->cout; m0 += PF_MR) {
					int mr = q->cout - m0 < PF_MR ? (int)(q->cout - m0) : PF_MR;
					pf_tiles[mr - 1][nv - 1](t, dy + m0 * q->svol, q->svol, L, r->dw + m0 * q->cin + c0,
								 q->cin);
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
	struct pf_run r = { .q = q, .dy = dy, .x = x, .dw = dw, .ws = ws };
	int saved, threads = hp_conv_threads_enter(pool, &saved);

	if (acc && acc != dw)
		memcpy(dw, acc, (size_t)(q->cout * q->cin) * sizeof *dw);
	else if (!acc)
		memset(dw, 0, (size_t)(q->cout * q->cin) * sizeof *dw);
	threads = threads < q->workers ? threads : q->workers;
	/* at most a worker per share (tid < threads): its buffers are the tid's */
	hp_conv_parallel(pool, threads, q->shares, pf_work, &r);
	hp_conv_threads_leave(saved);
}
