/* dX of a strided Conv by phases (polyphase decomposition).
 *
 * dX[c][x] = sum over (m, t) with x + p - t * d = s * y of W[m][c][t]
 * dY[m][y], per spatial dim.  The X positions x = r + s * q of one phase
 * r (0 <= r < s per dim) take the taps t = r + p (mod s) only (for
 * dilation d: t * d = r + p (mod s)), t0 < t1 < ... in steps of
 * s / gcd(s, d), and reach dY rows y = q + off - j * d' (d' = d / gcd(s,
 * d), off = (r + p - t0 * d) / s) for the j-th: a stride-1 Conv of dY
 * with those taps of W, transposed and mirrored, and pad (kr - 1) * d' -
 * off.  Each phase runs on the KxK path's AVX-512 tiles (conv_kxk.c, the
 * W' of its taps packed from W as the stride-1 dX's is: cv.wtap) into a
 * scratch, which is then scattered to its positions of dX; positions of
 * a phase with no taps (a 1x1 or 3x3 kernel at stride 4, 1x1 at stride 2
 * off the even positions) are zero.
 *
 * A 1x1 kernel has one phase with one tap (the others are zero): it
 * runs straight from dY and W with no workspace (direct_item), each
 * element the same chain as on the KxK tiles.  So do, lanes over
 * positions, the phases of other kernels that are as wide as dY's rows
 * (lanes_item: even sizes at stride 2, ResNet's downsampling), grouped
 * too (ResNeXt's downsampling 3x3, 8 to 32 channels a group: a block's
 * channels in one group, its chains over that group's m).
 *
 * Why: the strided dX ran as ConvTranspose(dY, W) (an sgemm into columns,
 * then col2im adding kvol columns into each element), 27-73% of sgemm's
 * peak on ResNet-18's strided classes (hpdlf-bench-conv-libs); here there
 * are no column adds and the flops are those of the taps alone.
 *
 * Bits: each dX element is one chain of fused multiply-adds from 0 over
 * (m, then its phase's taps from the largest t down), taps whose dY row is
 * out of range adding 0 * W; which rows, phases and threads run beside it
 * changes nothing (KxK's chains do not depend on the blocking), nor where
 * a band of X rows starts: a band's element keeps its taps (the same t
 * mod s) and its dY rows (a band holds all it reaches).  A band's pads
 * may make off larger than the taps reach (its dY rows cut out to the
 * replaced path's tiles): the phase then computes `extra` leading
 * positions it does not scatter, the same taps for the rest.
 * tests/kernels/test_train.c test_conv_grad_phase replays the chains. */
#include <string.h>

#include "kernels/conv_grad_phase.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define CGP_X86 1
#endif

/* Channels per block of the lanes kernel (lanes_item), and of its one
 * vector blocks (lanes_chain_seg1). */
#define CGP_LR 12
#define CGP_LR1 24
#define CGP_LR8 8

static int cgp_mode, cgp_pair_mode;

void hp_cgp_set_pair(int mode)
{
	cgp_pair_mode = mode;
}

void hp_cgp_set_mode(int mode)
{
	cgp_mode = mode;
}

int hp_cgp_mode(void)
{
	return cgp_mode;
}

/* Grouped lanes (lanes_item, pair_item): the channels of a block, all of
 * one group (CGP_LR8 for 8 or 16 a group, CGP_LR for 12 or more, the last
 * block of a group ending at the group's end), or 0 where the kernels do
 * not take the groups (fewer than 8 a group). */
static int64_t cgp_group_lr(const struct hp_cgp_geom *c)
{
	int64_t cg = c->cbig / c->group;

	return cg == 8 || cg == 16 ? CGP_LR8 : cg >= CGP_LR ? CGP_LR : 0;
}

static int64_t mod64(int64_t a, int64_t b)
{
	return (a % b + b) % b;
}

/* The taps of phase r along one dim, largest first (the mirrored order):
 * their count; *pad, *extra, *dil and *q of its stride-1 Conv. */
static int64_t dim_taps(const struct hp_cgp_geom *c, int i, int64_t r, int64_t *taps, int64_t *pad, int64_t *extra,
			int64_t *dil, int64_t *q)
{
	int64_t s = c->s[i], d = c->d[i], p = c->p[i], n = 0, lst[64];

	for (int64_t t = 0; t < c->k[i] && n < 64; t++)
		if (mod64(r + p - t * d, s) == 0)
			lst[n++] = t;
	*q = c->big[i] > r ? (c->big[i] - r + s - 1) / s : 0;
	*pad = *extra = 0;
	*dil = 1;
	if (!n)
		return 0;
	if (n > 1)
		*dil = (lst[1] - lst[0]) * d / s;
	int64_t off = (r + p - lst[0] * d) / s; /* exact */
	*pad = (n - 1) * *dil - off;
	if (*pad < 0)
		*extra = -*pad, *pad = 0;
	for (int64_t j = 0; j < n; j++)
		taps[j] = lst[n - 1 - j];
	return n;
}

int hp_cgp_plan(struct hp_cgp *p, const struct hp_cgp_geom *c, int threads)
{
	int64_t nph = c->s[0] * c->s[1] * c->s[2], yp = 0;
	size_t kws = 0;

	memset(p, 0, sizeof *p);
	p->c = *c;
	if (nph < 2 || nph > 64 || !hp_kxk_available() || !hp_kxk_wide_ok())
		return -1;
	for (int64_t ph = 0; ph < nph; ph++) {
		int64_t r[3] = { ph / (c->s[1] * c->s[2]), ph / c->s[2] % c->s[1], ph % c->s[2] };
		int64_t taps[3][64], kr[3], pad[3], extra[3], dil[3], q[3], kvol = 1, qv = 1;
		for (int i = 0; i < 3; i++) {
			kr[i] = dim_taps(c, i, r[i], taps[i], &pad[i], &extra[i], &dil[i], &q[i]);
			kvol *= kr[i];
			qv *= q[i];
		}
		if (!qv)
			continue;
		if (!kvol) {
			p->zero = 1;
			continue;
		}
		if (p->nph == HP_CGP_MAX_PHASES || kvol > HP_CGP_MAX_TAPS)
			return -1;
		struct hp_cgp_phase *f = &p->ph[p->nph++];
		struct hp_conv *cv = &f->cv;
		for (int64_t a = 0, t = 0; a < kr[0]; a++)
			for (int64_t b = 0; b < kr[1]; b++)
				for (int64_t e = 0; e < kr[2]; e++)
					f->tap[t++] = (int32_t)((taps[0][a] * c->k[1] + taps[1][b]) * c->k[2] + taps[2][e]);
		cv->nd = c->nd;
		cv->path = -1;
		cv->batch = c->n;
		cv->cin = c->csmall;
		cv->cout = c->cbig;
		cv->group = c->group;
		cv->cin_g = c->csmall / c->group;
		cv->cout_g = c->cbig / c->group;
		for (int i = 0; i < 3; i++) {
			f->r[i] = r[i];
			f->q[i] = q[i];
			f->extra[i] = extra[i];
			cv->g.img[i] = c->small[i];
			cv->g.grid[i] = q[i] + extra[i];
			cv->g.k[i] = kr[i];
			cv->g.stride[i] = 1;
			cv->g.dil[i] = dil[i];
			cv->g.pad[i] = pad[i];
		}
		hp_colgeom_finish(&cv->g);
		cv->xvol = cv->g.img_vol;
		cv->yvol = cv->g.grid_vol;
		cv->kdim = cv->cin_g * cv->g.kvol;
		cv->wflip = 1;
		cv->wkvol = c->k[0] * c->k[1] * c->k[2];
		cv->wtap = f->tap; /* for the checks; hp_cgp_run sets its copy's */
		if (!hp_kxk_flip_eligible(cv))
			return -1;
		cv->kxk = 1;
		cv->workspace = hp_kxk_workspace(cv, threads);
		cv->wtap = NULL;
		kws = cv->workspace > kws ? cv->workspace : kws;
		yp = c->n * c->cbig * cv->yvol > yp ? c->n * c->cbig * cv->yvol : yp;
	}
	if (!p->nph)
		return -1;
	p->yp = (yp + 15) / 16 * 16;
	p->workspace = (size_t)p->yp * sizeof(float) + kws;
#ifdef CGP_X86
	/* a 1x1 kernel: one phase of one tap, straight from dY and W */
	if (c->k[0] * c->k[1] * c->k[2] == 1 && c->group == 1 && p->nph == 1) {
		p->direct = 1;
		p->yp = 0;
		p->workspace = 0;
	} else if (c->group == 1 || cgp_group_lr(c)) { /* phases as wide as dY's rows: lanes over positions */
		int ok = 1;
		for (int i = 0; i < p->nph; i++)
			ok &= p->ph[i].q[2] == c->small[2] && p->ph[i].extra[2] == 0;
		/* scatter offsets of 32 bits */
		if (ok && c->cbig >= CGP_LR && c->n * c->cbig * c->big[0] * c->big[1] * c->big[2] < INT32_MAX / 2) {
			/* grouped, stride 2 along rows twice dY's: phases in pairs */
			int pair = c->group > 1 && c->s[2] == 2 && c->big[2] == 2 * c->small[2] && p->nph % 2 == 0;
			for (int i = 0; pair && i < p->nph; i += 2)
				pair = p->ph[i].r[2] == 0 && p->ph[i + 1].r[2] == 1 &&
				       p->ph[i].r[0] == p->ph[i + 1].r[0] && p->ph[i].r[1] == p->ph[i + 1].r[1];
			p->pair = pair && cgp_pair_mode >= 0;
			/* grouped unpaired: not on dY rows narrower than 8 (phase
			 * planes a band's rows could make smaller than 8
			 * positions, which lanes_item_seg takes ungrouped only;
			 * the innermost extent no band cuts); pair_item takes
			 * planes of any size */
			if (c->group == 1 || p->pair || c->small[2] >= 8) {
				p->lanes = 1;
				p->yp = 0;
				p->workspace = 0;
			} else {
				p->pair = 0;
			}
		}
	}
#endif
	return 0;
}

int hp_cgp_wanted(const struct hp_cgp *p)
{
	if (cgp_mode || hp_conv_kxk_mode() < 0)
		return cgp_mode > 0;
	if (p->c.csmall < HP_KXK_MIN_CH || p->c.cbig < HP_KXK_MIN_CH)
		return 0;
	return p->direct || p->lanes;
}

#ifdef CGP_X86
/* The 1x1 kernel's phase (direct): dX[n][c][r + s q] = chain over m from
 * 0 of W[m][c] dY[n][m][q + off] where that is in dY (the KxK path's
 * chain for a single tap, so the same bits), 0 elsewhere; 32 channels
 * (two vectors, lanes over c) by CGP_P phase positions in registers, W
 * read in place by rows, dY broadcast in place; no workspace.  Items:
 * (n, block of 32 channels), disjoint planes of dX. */
#define CGP_P 6
#define CGP_CB 32

struct cgp_direct {
	const struct hp_cgp *p;
	const float *dy, *w;
	float *dx;
	int64_t nq, cblocks;   /* phase positions with a tap, channel blocks */
};

/* dX offset and dY offset of phase position j (in dY when *dyo >= 0). */
static void direct_pos(const struct hp_cgp *p, int64_t j, int64_t *dxo, int64_t *dyo)
{
	const struct hp_cgp_geom *c = &p->c;
	const struct hp_cgp_phase *f = &p->ph[0];
	int64_t q[3] = { j / (f->q[1] * f->q[2]), j / f->q[2] % f->q[1], j % f->q[2] }, x[3], y[3];
	int in = 1;

	for (int i = 0; i < 3; i++) {
		x[i] = f->r[i] + c->s[i] * q[i];
		y[i] = q[i] + f->extra[i] - f->cv.g.pad[i]; /* the tap's dY position */
		in &= y[i] >= 0 && y[i] < c->small[i];
	}
	*dxo = (x[0] * c->big[1] + x[1]) * c->big[2] + x[2];
	*dyo = in ? (y[0] * c->small[1] + y[1]) * c->small[2] + y[2] : -1;
}

__attribute__((target("avx512f"))) static void direct_item(const struct cgp_direct *a, int64_t item)
{
	const struct hp_cgp *p = a->p;
	const struct hp_cgp_geom *c = &p->c;
	int64_t n = item / a->cblocks, c0 = item % a->cblocks * CGP_CB, cb = c->cbig - c0 < CGP_CB ? c->cbig - c0 : CGP_CB;
	int64_t bvol = c->big[0] * c->big[1] * c->big[2], svol = c->small[0] * c->small[1] * c->small[2];
	int64_t nq = a->nq, M = c->csmall, ldw = c->cbig;
	const float *dy = a->dy + n * M * svol, *w = a->w + c0;
	float *dx = a->dx + (n * c->cbig + c0) * bvol;
	__mmask16 k0 = (__mmask16)(cb >= 16 ? 0xffff : (1u << cb) - 1);
	__mmask16 k1 = (__mmask16)(cb >= 32 ? 0xffff : cb > 16 ? (1u << (cb - 16)) - 1 : 0);
	float tile[CGP_P][CGP_CB];

	for (int64_t ch = 0; ch < cb; ch++)
		memset(dx + ch * bvol, 0, (size_t)bvol * sizeof(float));
	for (int64_t j0 = 0; j0 < nq; j0 += CGP_P) {
		int64_t dxo[CGP_P], dyo[CGP_P], np = nq - j0 < CGP_P ? nq - j0 : CGP_P, live = 0;
		const float *src[CGP_P];
		__m512 acc[CGP_P][2];
		for (int i = 0; i < CGP_P; i++) {
			if (i < np)
				direct_pos(p, j0 + i, &dxo[i], &dyo[i]);
			else
				dxo[i] = dyo[i] = -1;
			src[i] = dy + (dyo[i] >= 0 ? dyo[i] : 0);
			live |= dyo[i] >= 0;
			acc[i][0] = acc[i][1] = _mm512_setzero_ps();
		}
		if (!live)
			continue; /* no taps: zeros */
		for (int64_t m = 0; m < M; m++) {
			__m512 w0 = _mm512_maskz_loadu_ps(k0, w + m * ldw), w1 = _mm512_maskz_loadu_ps(k1, w + m * ldw + 16);
#pragma GCC unroll 6
			for (int i = 0; i < CGP_P; i++) {
				__m512 b = _mm512_set1_ps(src[i][m * svol]);
				acc[i][0] = _mm512_fmadd_ps(w0, b, acc[i][0]);
				acc[i][1] = _mm512_fmadd_ps(w1, b, acc[i][1]);
			}
		}
		for (int i = 0; i < CGP_P; i++) {
			_mm512_storeu_ps(tile[i], acc[i][0]);
			_mm512_storeu_ps(tile[i] + 16, acc[i][1]);
		}
		for (int i = 0; i < np; i++)
			if (dyo[i] >= 0)
				for (int64_t ch = 0; ch < cb; ch++)
					dx[ch * bvol + dxo[i]] = tile[i][ch];
	}
}

static void direct_range(void *arg, int64_t b, int64_t e, int tid)
{
	(void)tid;
	for (int64_t i = b; i < e; i++)
		direct_item(arg, i);
}

/* Phases whose rows are as wide as dY's (lanes): dX[n][c][x] for the
 * phase's positions q, two vectors of 16 (flattened over the phase's
 * (q1, q2), which with q[2] == small[2] read dY at the same flattened
 * offsets plus the tap's; each vector from its own plane and item, or
 * for planes of fewer than 8 positions several whole planes, of any
 * items) by CGP_LR channels in registers: per (m, tap) of the chain a
 * masked load of dY per vector (per plane: merged), lanes whose tap
 * falls outside dY reading 0 (the padding taps' w * 0), and CGP_LR
 * broadcasts of W[m][c][tap] read in place; the results scattered to
 * their positions of dX.  The same chains as the KxK tiles' (m, then the
 * phase's taps from the largest down); no workspace.  Items: (block of
 * lr channels, phase, pair of vectors), disjoint elements of dX (the last
 * block ends at cbig and writes only the rows the one before it left);
 * the block's rows of W stay in cache while its phases and vectors take
 * them (phase by phase, W went through memory once per phase: ResNet-18's
 * 3x3-s2-r4 reads 4.7 MB of it).  Where every phase is one vector of
 * small planes (that class: 2x2 planes of 4 items), a block is CGP_LR1
 * channels by that one vector (lanes_chain_seg1; the pair's second
 * vector was all masked lanes, half of the multiply-adds). */

struct cgp_lanes {
	const struct hp_cgp *p;
	const float *dy, *w;
	float *dx;
	int64_t tiles[HP_CGP_MAX_PHASES + 1]; /* a block's first item of each phase */
	int64_t cblocks, lr;   /* channel blocks of lr channels */
};

/* Vector v of phase f: its item, first plane, first position. */
static void lanes_vec(const struct hp_cgp_phase *f, int64_t v, int64_t *n, int64_t *q0, int64_t *j0)
{
	int64_t pv = (f->q[1] * f->q[2] + 15) / 16, nq0 = v / pv;

	*n = nq0 / f->q[0];
	*q0 = nq0 % f->q[0];
	*j0 = v % pv * 16;
}

/* The chains of 12 channels (W rows kv apart) by two vectors of
 * positions, in registers: named accumulators (an array of them went
 * through the stack). */
#define CGP_ACC(r) __m512 a##r##0 = _mm512_setzero_ps(), a##r##1 = _mm512_setzero_ps()
#define CGP_FMA(r)                                                              \
	do {                                                                    \
		__m512 b = _mm512_set1_ps(wt[(r) * kv]);                        \
		a##r##0 = _mm512_fmadd_ps(b, x0, a##r##0);                      \
		a##r##1 = _mm512_fmadd_ps(b, x1, a##r##1);                      \
	} while (0)
#define CGP_OUT(r) (acc[r][0] = a##r##0, acc[r][1] = a##r##1)
#define CGP_ACC1(r) __m512 a##r = _mm512_setzero_ps()
#define CGP_FMA1(r) (a##r = _mm512_fmadd_ps(_mm512_set1_ps(wt[(r) * kv]), x0, a##r))
#define CGP_OUT1(r) (acc[r] = a##r)

__attribute__((target("avx512f"), always_inline)) static inline void
lanes_chain(const float *d0, const float *d1, const float *w, int64_t M, int64_t svol, int64_t wstep, int64_t kv,
	    int nt, const int32_t (*off)[2], const int32_t *tap, const __mmask16 (*mk)[2], __m512 (*acc)[2])
{
	CGP_ACC(0); CGP_ACC(1); CGP_ACC(2); CGP_ACC(3); CGP_ACC(4); CGP_ACC(5);
	CGP_ACC(6); CGP_ACC(7); CGP_ACC(8); CGP_ACC(9); CGP_ACC(10); CGP_ACC(11);
	for (int64_t m = 0; m < M; m++, d0 += svol, d1 += svol, w += wstep)
		for (int t = 0; t < nt; t++) {
			__m512 x0 = _mm512_maskz_loadu_ps(mk[t][0], d0 + off[t][0]);
			__m512 x1 = _mm512_maskz_loadu_ps(mk[t][1], d1 + off[t][1]);
			const float *wt = w + tap[t];
			CGP_FMA(0); CGP_FMA(1); CGP_FMA(2); CGP_FMA(3); CGP_FMA(4); CGP_FMA(5);
			CGP_FMA(6); CGP_FMA(7); CGP_FMA(8); CGP_FMA(9); CGP_FMA(10); CGP_FMA(11);
		}
	CGP_OUT(0); CGP_OUT(1); CGP_OUT(2); CGP_OUT(3); CGP_OUT(4); CGP_OUT(5);
	CGP_OUT(6); CGP_OUT(7); CGP_OUT(8); CGP_OUT(9); CGP_OUT(10); CGP_OUT(11);
}

/* lanes_chain of CGP_LR8 channels (grouped: 8 or 16 a group). */
__attribute__((target("avx512f"), always_inline)) static inline void
lanes_chain8(const float *d0, const float *d1, const float *w, int64_t M, int64_t svol, int64_t wstep, int64_t kv,
	     int nt, const int32_t (*off)[2], const int32_t *tap, const __mmask16 (*mk)[2], __m512 (*acc)[2])
{
	CGP_ACC(0); CGP_ACC(1); CGP_ACC(2); CGP_ACC(3); CGP_ACC(4); CGP_ACC(5); CGP_ACC(6); CGP_ACC(7);
	for (int64_t m = 0; m < M; m++, d0 += svol, d1 += svol, w += wstep)
		for (int t = 0; t < nt; t++) {
			__m512 x0 = _mm512_maskz_loadu_ps(mk[t][0], d0 + off[t][0]);
			__m512 x1 = _mm512_maskz_loadu_ps(mk[t][1], d1 + off[t][1]);
			const float *wt = w + tap[t];
			CGP_FMA(0); CGP_FMA(1); CGP_FMA(2); CGP_FMA(3); CGP_FMA(4); CGP_FMA(5); CGP_FMA(6); CGP_FMA(7);
		}
	CGP_OUT(0); CGP_OUT(1); CGP_OUT(2); CGP_OUT(3); CGP_OUT(4); CGP_OUT(5); CGP_OUT(6); CGP_OUT(7);
}

/* lanes_chain for vectors of several small planes (ppv of them, each its
 * own item or plane of dY): each vector per tap one masked load per
 * plane, merged. */
__attribute__((target("avx512f"), always_inline)) static inline void
lanes_chain_seg(const float *dy, const float *w, int64_t M, int64_t svol, int64_t wstep, int64_t kv, int nt, int ppv,
		const int64_t (*off)[2][16], const int32_t *tap, const __mmask16 (*mk)[2][16], __m512 (*acc)[2])
{
	CGP_ACC(0); CGP_ACC(1); CGP_ACC(2); CGP_ACC(3); CGP_ACC(4); CGP_ACC(5);
	CGP_ACC(6); CGP_ACC(7); CGP_ACC(8); CGP_ACC(9); CGP_ACC(10); CGP_ACC(11);
	for (int64_t m = 0; m < M; m++, dy += svol, w += wstep)
		for (int t = 0; t < nt; t++) {
			__m512 x0 = _mm512_setzero_ps(), x1 = _mm512_setzero_ps();
			for (int k = 0; k < ppv; k++) {
				x0 = _mm512_mask_loadu_ps(x0, mk[t][0][k], dy + off[t][0][k]);
				x1 = _mm512_mask_loadu_ps(x1, mk[t][1][k], dy + off[t][1][k]);
			}
			const float *wt = w + tap[t];
			CGP_FMA(0); CGP_FMA(1); CGP_FMA(2); CGP_FMA(3); CGP_FMA(4); CGP_FMA(5);
			CGP_FMA(6); CGP_FMA(7); CGP_FMA(8); CGP_FMA(9); CGP_FMA(10); CGP_FMA(11);
		}
	CGP_OUT(0); CGP_OUT(1); CGP_OUT(2); CGP_OUT(3); CGP_OUT(4); CGP_OUT(5);
	CGP_OUT(6); CGP_OUT(7); CGP_OUT(8); CGP_OUT(9); CGP_OUT(10); CGP_OUT(11);
}

/* lanes_chain_seg of CGP_LR1 channels by one vector. */
__attribute__((target("avx512f"), always_inline)) static inline void
lanes_chain_seg1(const float *dy, const float *w, int64_t M, int64_t svol, int64_t wstep, int64_t kv, int nt, int ppv,
		 const int64_t (*off)[2][16], const int32_t *tap, const __mmask16 (*mk)[2][16], __m512 *acc)
{
	CGP_ACC1(0); CGP_ACC1(1); CGP_ACC1(2); CGP_ACC1(3); CGP_ACC1(4); CGP_ACC1(5);
	CGP_ACC1(6); CGP_ACC1(7); CGP_ACC1(8); CGP_ACC1(9); CGP_ACC1(10); CGP_ACC1(11);
	CGP_ACC1(12); CGP_ACC1(13); CGP_ACC1(14); CGP_ACC1(15); CGP_ACC1(16); CGP_ACC1(17);
	CGP_ACC1(18); CGP_ACC1(19); CGP_ACC1(20); CGP_ACC1(21); CGP_ACC1(22); CGP_ACC1(23);
	for (int64_t m = 0; m < M; m++, dy += svol, w += wstep)
		for (int t = 0; t < nt; t++) {
			__m512 x0 = _mm512_setzero_ps();
			for (int k = 0; k < ppv; k++)
				x0 = _mm512_mask_loadu_ps(x0, mk[t][0][k], dy + off[t][0][k]);
			const float *wt = w + tap[t];
			CGP_FMA1(0); CGP_FMA1(1); CGP_FMA1(2); CGP_FMA1(3); CGP_FMA1(4); CGP_FMA1(5);
			CGP_FMA1(6); CGP_FMA1(7); CGP_FMA1(8); CGP_FMA1(9); CGP_FMA1(10); CGP_FMA1(11);
			CGP_FMA1(12); CGP_FMA1(13); CGP_FMA1(14); CGP_FMA1(15); CGP_FMA1(16); CGP_FMA1(17);
			CGP_FMA1(18); CGP_FMA1(19); CGP_FMA1(20); CGP_FMA1(21); CGP_FMA1(22); CGP_FMA1(23);
		}
	CGP_OUT1(0); CGP_OUT1(1); CGP_OUT1(2); CGP_OUT1(3); CGP_OUT1(4); CGP_OUT1(5);
	CGP_OUT1(6); CGP_OUT1(7); CGP_OUT1(8); CGP_OUT1(9); CGP_OUT1(10); CGP_OUT1(11);
	CGP_OUT1(12); CGP_OUT1(13); CGP_OUT1(14); CGP_OUT1(15); CGP_OUT1(16); CGP_OUT1(17);
	CGP_OUT1(18); CGP_OUT1(19); CGP_OUT1(20); CGP_OUT1(21); CGP_OUT1(22); CGP_OUT1(23);
}

/* Phase planes of fewer than 8 positions: ppv = 16 / plane whole planes
 * (over items and q0) per vector. */
__attribute__((target("avx512f"))) static void lanes_item_seg(const struct cgp_lanes *a, int ph, int64_t item)
{
	const struct hp_cgp *p = a->p;
	const struct hp_cgp_geom *c = &p->c;
	const struct hp_cgp_phase *f = &p->ph[ph];
	const struct hp_colgeom *g = &f->cv.g;
	int64_t plane = f->q[1] * f->q[2], ppv = 16 / plane, planes = c->n * f->q[0], nvec = (planes + ppv - 1) / ppv;
	int64_t tiles = (nvec + 1) / 2, cb = item / tiles, tl = item % tiles, lr = a->lr, c0 = cb * lr, skip = 0;

	if (c0 + lr > c->cbig) {
		skip = c0 + lr - c->cbig;
		c0 = c->cbig - lr;
	}
	int64_t bvol = c->big[0] * c->big[1] * c->big[2], svol = c->small[0] * c->small[1] * c->small[2];
	int64_t kv = c->k[0] * c->k[1] * c->k[2], M = c->csmall, ntap = g->kvol;
	int64_t off[HP_CGP_MAX_TAPS][2][16];
	int32_t tap[HP_CGP_MAX_TAPS], idx[2][16];
	__mmask16 mk[HP_CGP_MAX_TAPS][2][16], live[2] = { 0, 0 }, any[HP_CGP_MAX_TAPS];
	int nt = 0;

	memset(mk, 0, sizeof mk);
	memset(off, 0, sizeof off);
	memset(idx, 0, sizeof idx);
	for (int sd = 0; sd < 2; sd++)
		for (int k = 0; k < ppv; k++) {
			int64_t pi = (2 * tl + sd) * ppv + k;
			if (2 * tl + sd >= nvec || pi >= planes)
				continue;
			int64_t n = pi / f->q[0], q0 = pi % f->q[0], l0 = k * plane;
			for (int64_t j = 0; j < plane; j++) {
				int64_t q1 = j / f->q[2], q2 = j % f->q[2];
				live[sd] |= (__mmask16)(1u << (l0 + j));
				idx[sd][l0 + j] = (int32_t)(n * c->cbig * bvol +
							    ((f->r[0] + c->s[0] * q0) * c->big[1] + f->r[1] + c->s[1] * q1) *
								    c->big[2] +
							    f->r[2] + c->s[2] * q2);
			}
			for (int64_t t = 0; t < ntap; t++) {
				int64_t jt[3] = { t / (g->k[1] * g->k[2]), t / g->k[2] % g->k[1], t % g->k[2] }, y0, a1, a2;
				uint32_t m16 = 0;
				y0 = q0 + f->extra[0] - g->pad[0] + jt[0] * g->dil[0];
				a1 = f->extra[1] - g->pad[1] + jt[1] * g->dil[1];
				a2 = -g->pad[2] + jt[2] * g->dil[2];
				for (int64_t j = 0; j < plane && y0 >= 0 && y0 < c->small[0]; j++) {
					int64_t q1 = j / f->q[2], q2 = j % f->q[2];
					m16 |= (uint32_t)(q1 + a1 >= 0 && q1 + a1 < c->small[1] && q2 + a2 >= 0 &&
							  q2 + a2 < c->small[2])
					       << (l0 + j);
				}
				mk[t][sd][k] = (__mmask16)m16;
				off[t][sd][k] = m16 ? n * M * svol + (y0 * c->small[1] + a1) * c->small[2] + a2 - l0 : 0;
			}
		}
	for (int64_t t = 0; t < ntap; t++) {
		any[t] = 0;
		for (int k = 0; k < ppv; k++)
			any[t] |= mk[t][0][k] | mk[t][1][k];
	}
	for (int64_t t = 0; t < ntap; t++) /* taps no lane takes add w * 0 everywhere: left out */
		if (any[t]) {
			memcpy(mk[nt], mk[t], sizeof mk[t]);
			memcpy(off[nt], off[t], sizeof off[t]);
			tap[nt++] = f->tap[t];
		}
	__m512i i0 = _mm512_loadu_si512(idx[0]), i1 = _mm512_loadu_si512(idx[1]);
	float *dx = a->dx + c0 * bvol;
	if (lr == CGP_LR1) { /* one vector (nvec 1): the second is empty */
		__m512 acc1[CGP_LR1];
		lanes_chain_seg1(a->dy, a->w + c0 * kv, M, svol, c->cbig * kv, kv, nt, (int)ppv,
				 (const int64_t(*)[2][16])off, tap, (const __mmask16(*)[2][16])mk, acc1);
		for (int r = (int)skip; r < CGP_LR1; r++)
			_mm512_mask_i32scatter_ps(dx + r * bvol, live[0], i0, acc1[r], 4);
		return;
	}
	__m512 acc[CGP_LR][2];
	lanes_chain_seg(a->dy, a->w + c0 * kv, M, svol, c->cbig * kv, kv, nt, (int)ppv,
			(const int64_t(*)[2][16])off, tap, (const __mmask16(*)[2][16])mk, acc);
	for (int r = (int)skip; r < CGP_LR; r++) {
		_mm512_mask_i32scatter_ps(dx + r * bvol, live[0], i0, acc[r][0], 4);
		_mm512_mask_i32scatter_ps(dx + r * bvol, live[1], i1, acc[r][1], 4);
	}
}

__attribute__((target("avx512f"))) static void lanes_item(const struct cgp_lanes *a, int ph, int64_t item)
{
	const struct hp_cgp *p = a->p;
	const struct hp_cgp_geom *c = &p->c;
	const struct hp_cgp_phase *f = &p->ph[ph];
	const struct hp_colgeom *g = &f->cv.g;
	int64_t plane = f->q[1] * f->q[2], nvec = c->n * f->q[0] * ((plane + 15) / 16), lr = a->lr;
	int64_t tiles = (nvec + 1) / 2, cb = item / tiles, tl = item % tiles, skip = 0;
	/* blocks of lr channels within a group (ungrouped: of cbig) */
	int64_t cg = c->cbig / c->group, M = c->csmall / c->group, bpg = (cg + lr - 1) / lr, gi = cb / bpg;
	int64_t c0 = cb % bpg * lr;

	/* the last block ends at the group's end (cg >= lr), its rows the
	 * block before it took left out */
	if (c0 + lr > cg) {
		skip = c0 + lr - cg;
		c0 = cg - lr;
	}
	int64_t bvol = c->big[0] * c->big[1] * c->big[2], svol = c->small[0] * c->small[1] * c->small[2];
	int64_t kv = c->k[0] * c->k[1] * c->k[2], ntap = g->kvol;
	/* W[gi * M + m][c0 + r][t], the group's dY planes gi * M + m */
	const float *wb = a->w + (gi * M * cg + c0) * kv;
	int64_t dyg = gi * M * svol;
	int32_t off[HP_CGP_MAX_TAPS][2], tap[HP_CGP_MAX_TAPS], idx[2][16];
	__mmask16 mk[HP_CGP_MAX_TAPS][2], live[2] = { 0, 0 };
	const float *dyv[2];
	float *dxv[2];
	int nt = 0;

	for (int t = 0; t < ntap; t++)
		mk[t][0] = mk[t][1] = 0;
	for (int sd = 0; sd < 2; sd++) {
		int64_t v = 2 * tl + sd, n = 0, q0 = 0, j0 = 0;
		dyv[sd] = a->dy;
		dxv[sd] = a->dx;
		memset(idx[sd], 0, sizeof idx[sd]);
		if (v >= nvec)
			continue;
		lanes_vec(f, v, &n, &q0, &j0);
		dyv[sd] = a->dy + n * c->csmall * svol + dyg;
		dxv[sd] = a->dx + (n * c->cbig + gi * cg + c0) * bvol;
		for (int l = 0; l < 16; l++) {
			int64_t jj = j0 + l, q1 = jj / f->q[2], q2 = jj % f->q[2];
			live[sd] |= (__mmask16)((jj < plane) << l);
			idx[sd][l] = jj < plane ? (int32_t)(((f->r[0] + c->s[0] * q0) * c->big[1] + f->r[1] + c->s[1] * q1) *
								    c->big[2] +
							    f->r[2] + c->s[2] * q2)
					    : 0;
		}
		/* each tap's lanes inside dY (the others add w * 0: masked to 0) */
		for (int64_t t = 0; t < ntap; t++) {
			int64_t jt[3] = { t / (g->k[1] * g->k[2]), t / g->k[2] % g->k[1], t % g->k[2] }, y0, a1, a2;
			uint32_t m16 = 0;
			y0 = q0 + f->extra[0] - g->pad[0] + jt[0] * g->dil[0];
			a1 = f->extra[1] - g->pad[1] + jt[1] * g->dil[1];
			a2 = -g->pad[2] + jt[2] * g->dil[2];
			for (int l = 0; l < 16 && y0 >= 0 && y0 < c->small[0]; l++) {
				int64_t jj = j0 + l, q1 = jj / f->q[2], q2 = jj % f->q[2];
				m16 |= (uint32_t)(jj < plane && q1 + a1 >= 0 && q1 + a1 < c->small[1] && q2 + a2 >= 0 &&
						  q2 + a2 < c->small[2])
				       << l;
			}
			mk[t][sd] = (__mmask16)m16;
			off[t][sd] = m16 ? (int32_t)((y0 * c->small[1] + a1) * c->small[2] + a2 + j0) : 0;
		}
	}
	for (int64_t t = 0; t < ntap; t++) /* taps no lane takes add w * 0 everywhere: left out */
		if (mk[t][0] | mk[t][1]) {
			mk[nt][0] = mk[t][0], mk[nt][1] = mk[t][1];
			off[nt][0] = off[t][0], off[nt][1] = off[t][1];
			tap[nt++] = f->tap[t];
		}
	__m512 acc[CGP_LR][2];
	if (lr == CGP_LR8)
		lanes_chain8(dyv[0], dyv[1], wb, M, svol, cg * kv, kv, nt, off, tap, mk, acc);
	else
		lanes_chain(dyv[0], dyv[1], wb, M, svol, cg * kv, kv, nt, off, tap, mk, acc);
	__m512i i0 = _mm512_loadu_si512(idx[0]), i1 = _mm512_loadu_si512(idx[1]);
	for (int r = (int)skip; r < lr; r++) {
		_mm512_mask_i32scatter_ps(dxv[0] + r * bvol, live[0], i0, acc[r][0], 4);
		_mm512_mask_i32scatter_ps(dxv[1] + r * bvol, live[1], i1, acc[r][1], 4);
	}
}

static void lanes_range(void *arg, int64_t b, int64_t e, int tid)
{
	const struct cgp_lanes *a = arg;
	int64_t per = a->tiles[a->p->nph];

	(void)tid;
	for (int64_t i = b; i < e; i++) {
		int64_t cb = i / per, j = i % per;
		int ph = 0;
		while (j >= a->tiles[ph + 1])
			ph++;
		/* the phase's item of block cb, vector pair j - tiles[ph] */
		int64_t item = cb * (a->tiles[ph + 1] - a->tiles[ph]) + j - a->tiles[ph];
		if (a->p->ph[ph].q[1] * a->p->ph[ph].q[2] < 8)
			lanes_item_seg(a, ph, item);
		else
			lanes_item(a, ph, item);
	}
}

/* Grouped phases in pairs (pair_item): the two phases of a stride 2
 * along rows that share their rows (r[2] = 0 and 1, dX rows twice dY's)
 * as one item per vector of 16 positions, all blocks of channels of all
 * groups in turn (a group's chains are 8 m by 1 to 4 taps: the taps'
 * masks, worked out per vector, and the scatters of lanes_item cost more
 * than the multiply-adds there, 24 GF/s per CPU-second on ResNeXt's
 * 256-channel 56x56 stride-2 3x3); per block and channel the two phases'
 * vectors are interleaved (vpermt2ps) into dX's columns 2 q2 and 2 q2 + 1
 * and stored with masks, one store per run of a row.  The same chains as
 * lanes_item's (m of the group, then the phase's taps from the largest
 * down, those no lane takes left out). */

/* One vector's taps of phase f (v from lanes_vec: q0, j0; its lanes'
 * positions lq1, lq2, live where below nl): the taps some lane takes,
 * their masks and dY offsets (from the item's plane); the count. */
static int pair_taps(const struct hp_cgp_geom *c, const struct hp_cgp_phase *f, int64_t q0, int64_t j0, int nl,
		     const int64_t *lq1, const int64_t *lq2, int32_t *off, int32_t *tap, __mmask16 *mk)
{
	const struct hp_colgeom *g = &f->cv.g;
	int nt = 0;

	for (int64_t t = 0; t < g->kvol; t++) {
		int64_t jt[3] = { t / (g->k[1] * g->k[2]), t / g->k[2] % g->k[1], t % g->k[2] }, y0, a1, a2;
		uint32_t m16 = 0;
		y0 = q0 + f->extra[0] - g->pad[0] + jt[0] * g->dil[0];
		a1 = f->extra[1] - g->pad[1] + jt[1] * g->dil[1];
		a2 = -g->pad[2] + jt[2] * g->dil[2];
		for (int l = 0; l < nl && y0 >= 0 && y0 < c->small[0]; l++)
			m16 |= (uint32_t)(lq1[l] + a1 >= 0 && lq1[l] + a1 < c->small[1] && lq2[l] + a2 >= 0 &&
					  lq2[l] + a2 < c->small[2])
			       << l;
		if (!m16)
			continue; /* adds w * 0 in every lane: left out */
		mk[nt] = (__mmask16)m16;
		off[nt] = (int32_t)((y0 * c->small[1] + a1) * c->small[2] + a2 + j0);
		tap[nt++] = f->tap[t];
	}
	return nt;
}

#define CGP_FMAP(r, x, i)                                                       \
	do {                                                                    \
		__m512 b = _mm512_set1_ps(wt[(r) * kv]);                        \
		a##r##i = _mm512_fmadd_ps(b, x, a##r##i);                       \
	} while (0)

/* The chains of 8 channels by the pair's two vectors (0: phase a). */
__attribute__((target("avx512f"), always_inline)) static inline void
pair_chain8(const float *d, const float *w, int64_t M, int64_t svol, int64_t wstep, int64_t kv, int na,
	    const int32_t *offa, const int32_t *tapa, const __mmask16 *mka, int nb, const int32_t *offb,
	    const int32_t *tapb, const __mmask16 *mkb, __m512 (*acc)[2])
{
	CGP_ACC(0); CGP_ACC(1); CGP_ACC(2); CGP_ACC(3); CGP_ACC(4); CGP_ACC(5); CGP_ACC(6); CGP_ACC(7);
	for (int64_t m = 0; m < M; m++, d += svol, w += wstep) {
		for (int t = 0; t < na; t++) {
			__m512 x = _mm512_maskz_loadu_ps(mka[t], d + offa[t]);
			const float *wt = w + tapa[t];
			CGP_FMAP(0, x, 0); CGP_FMAP(1, x, 0); CGP_FMAP(2, x, 0); CGP_FMAP(3, x, 0);
			CGP_FMAP(4, x, 0); CGP_FMAP(5, x, 0); CGP_FMAP(6, x, 0); CGP_FMAP(7, x, 0);
		}
		for (int t = 0; t < nb; t++) {
			__m512 x = _mm512_maskz_loadu_ps(mkb[t], d + offb[t]);
			const float *wt = w + tapb[t];
			CGP_FMAP(0, x, 1); CGP_FMAP(1, x, 1); CGP_FMAP(2, x, 1); CGP_FMAP(3, x, 1);
			CGP_FMAP(4, x, 1); CGP_FMAP(5, x, 1); CGP_FMAP(6, x, 1); CGP_FMAP(7, x, 1);
		}
	}
	CGP_OUT(0); CGP_OUT(1); CGP_OUT(2); CGP_OUT(3); CGP_OUT(4); CGP_OUT(5); CGP_OUT(6); CGP_OUT(7);
}

/* pair_chain8 of 12 channels. */
__attribute__((target("avx512f"), always_inline)) static inline void
pair_chain12(const float *d, const float *w, int64_t M, int64_t svol, int64_t wstep, int64_t kv, int na,
	     const int32_t *offa, const int32_t *tapa, const __mmask16 *mka, int nb, const int32_t *offb,
	     const int32_t *tapb, const __mmask16 *mkb, __m512 (*acc)[2])
{
	CGP_ACC(0); CGP_ACC(1); CGP_ACC(2); CGP_ACC(3); CGP_ACC(4); CGP_ACC(5);
	CGP_ACC(6); CGP_ACC(7); CGP_ACC(8); CGP_ACC(9); CGP_ACC(10); CGP_ACC(11);
	for (int64_t m = 0; m < M; m++, d += svol, w += wstep) {
		for (int t = 0; t < na; t++) {
			__m512 x = _mm512_maskz_loadu_ps(mka[t], d + offa[t]);
			const float *wt = w + tapa[t];
			CGP_FMAP(0, x, 0); CGP_FMAP(1, x, 0); CGP_FMAP(2, x, 0); CGP_FMAP(3, x, 0);
			CGP_FMAP(4, x, 0); CGP_FMAP(5, x, 0); CGP_FMAP(6, x, 0); CGP_FMAP(7, x, 0);
			CGP_FMAP(8, x, 0); CGP_FMAP(9, x, 0); CGP_FMAP(10, x, 0); CGP_FMAP(11, x, 0);
		}
		for (int t = 0; t < nb; t++) {
			__m512 x = _mm512_maskz_loadu_ps(mkb[t], d + offb[t]);
			const float *wt = w + tapb[t];
			CGP_FMAP(0, x, 1); CGP_FMAP(1, x, 1); CGP_FMAP(2, x, 1); CGP_FMAP(3, x, 1);
			CGP_FMAP(4, x, 1); CGP_FMAP(5, x, 1); CGP_FMAP(6, x, 1); CGP_FMAP(7, x, 1);
			CGP_FMAP(8, x, 1); CGP_FMAP(9, x, 1); CGP_FMAP(10, x, 1); CGP_FMAP(11, x, 1);
		}
	}
	CGP_OUT(0); CGP_OUT(1); CGP_OUT(2); CGP_OUT(3); CGP_OUT(4); CGP_OUT(5);
	CGP_OUT(6); CGP_OUT(7); CGP_OUT(8); CGP_OUT(9); CGP_OUT(10); CGP_OUT(11);
}

struct cgp_pair {
	const struct hp_cgp *p;
	const float *dy, *w;
	float *dx;
	int64_t first[HP_CGP_MAX_PHASES / 2 + 1]; /* each pair's first item (its vectors) */
	int64_t lr;            /* channels of a block */
};

__attribute__((target("avx512f"))) static void pair_item(const struct cgp_pair *a, int64_t item)
{
	const struct hp_cgp *p = a->p;
	const struct hp_cgp_geom *c = &p->c;
	int k = 0;
	while (item >= a->first[k + 1])
		k++;
	const struct hp_cgp_phase *fa = &p->ph[2 * k], *fb = fa + 1;
	int64_t v = item - a->first[k], n = 0, q0 = 0, j0 = 0, plane = fa->q[1] * fa->q[2], lr = a->lr;
	int64_t bvol = c->big[0] * c->big[1] * c->big[2], svol = c->small[0] * c->small[1] * c->small[2];
	int64_t kv = c->k[0] * c->k[1] * c->k[2], cg = c->cbig / c->group, M = c->csmall / c->group;
	int64_t bpg = (cg + lr - 1) / lr, segb[2][16];
	int32_t offa[HP_CGP_MAX_TAPS], offb[HP_CGP_MAX_TAPS], tapa[HP_CGP_MAX_TAPS], tapb[HP_CGP_MAX_TAPS];
	__mmask16 mka[HP_CGP_MAX_TAPS], mkb[HP_CGP_MAX_TAPS], segm[2][16];
	int nseg[2] = { 0, 0 };

	int64_t lq1[16], lq2[16];
	int nl = 0;

	lanes_vec(fa, v, &n, &q0, &j0);
	/* the lanes' positions (q1, q2), without a division each */
	for (int64_t q1 = j0 / fa->q[2], q2 = j0 % fa->q[2]; nl < 16 && j0 + nl < plane; nl++) {
		lq1[nl] = q1;
		lq2[nl] = q2;
		if (++q2 == fa->q[2])
			q2 = 0, q1++;
	}
	int na = pair_taps(c, fa, q0, j0, nl, lq1, lq2, offa, tapa, mka);
	int nb = pair_taps(c, fb, q0, j0, nl, lq1, lq2, offb, tapb, mkb);
	/* the interleaved halves' runs: element e of half h is lane
	 * 8 h + e / 2, column 2 q2 + (e & 1) */
	for (int h = 0; h < 2; h++) {
		int64_t cur = INT64_MIN;
		for (int e = 0; e < 16; e++) {
			int l = 8 * h + e / 2;
			int64_t o;
			if (l >= nl)
				break;
			o = ((fa->r[0] + c->s[0] * q0) * c->big[1] + fa->r[1] + c->s[1] * lq1[l]) * c->big[2] +
			    2 * lq2[l] + (e & 1) - e;
			if (o != cur) {
				segb[h][nseg[h]] = o;
				segm[h][nseg[h]++] = 0;
				cur = o;
			}
			segm[h][nseg[h] - 1] |= (__mmask16)(1u << e);
		}
	}
	const __m512i ilo = _mm512_set_epi32(23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
	const __m512i ihi = _mm512_set_epi32(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8);
	for (int64_t cb = 0; cb < c->group * bpg; cb++) {
		int64_t gi = cb / bpg, c0 = cb % bpg * lr, skip = 0;
		if (c0 + lr > cg) { /* the group's last block ends at its end */
			skip = c0 + lr - cg;
			c0 = cg - lr;
		}
		const float *wb = a->w + (gi * M * cg + c0) * kv, *d = a->dy + (n * c->csmall + gi * M) * svol;
		float *dx = a->dx + (n * c->cbig + gi * cg + c0) * bvol;
		__m512 acc[CGP_LR][2];
		if (lr == CGP_LR8)
			pair_chain8(d, wb, M, svol, cg * kv, kv, na, offa, tapa, mka, nb, offb, tapb, mkb, acc);
		else
			pair_chain12(d, wb, M, svol, cg * kv, kv, na, offa, tapa, mka, nb, offb, tapb, mkb, acc);
		for (int64_t r = skip; r < lr; r++) {
			__m512 lo = _mm512_permutex2var_ps(acc[r][0], ilo, acc[r][1]);
			__m512 hi = _mm512_permutex2var_ps(acc[r][0], ihi, acc[r][1]);
			for (int k = 0; k < nseg[0]; k++)
				_mm512_mask_storeu_ps(dx + r * bvol + segb[0][k], segm[0][k], lo);
			for (int k = 0; k < nseg[1]; k++)
				_mm512_mask_storeu_ps(dx + r * bvol + segb[1][k], segm[1][k], hi);
		}
	}
}

static void pair_range(void *arg, int64_t b, int64_t e, int tid)
{
	(void)tid;
	for (int64_t i = b; i < e; i++)
		pair_item(arg, i);
}
#endif

struct cgp_scatter {
	const struct hp_cgp *p;
	const struct hp_cgp_phase *f;
	const float *yp;
	float *dx;
};

/* Planes [b, e) of the phase scratch to their positions of dX. */
static void scatter_range(void *arg, int64_t b, int64_t e, int tid)
{
	const struct cgp_scatter *a = arg;
	const struct hp_cgp_geom *c = &a->p->c;
	const struct hp_cgp_phase *f = a->f;
	const struct hp_colgeom *g = &f->cv.g;
	int64_t bvol = c->big[0] * c->big[1] * c->big[2], s2 = c->s[2];

	(void)tid;
	for (int64_t pl = b; pl < e; pl++)
		for (int64_t q0 = 0; q0 < f->q[0]; q0++)
			for (int64_t q1 = 0; q1 < f->q[1]; q1++) {
				const float *restrict src =
					a->yp + pl * g->grid_vol +
					((q0 + f->extra[0]) * g->grid[1] + q1 + f->extra[1]) * g->grid[2] + f->extra[2];
				float *restrict dst = a->dx + pl * bvol +
						      ((f->r[0] + c->s[0] * q0) * c->big[1] + f->r[1] + c->s[1] * q1) *
							      c->big[2] +
						      f->r[2];
				for (int64_t q2 = 0; q2 < f->q[2]; q2++)
					dst[q2 * s2] = src[q2];
			}
}

/* Below this many floats of dX a scatter runs on the caller. */
#define CGP_PAR_MIN (1 << 15)

void hp_cgp_run(const struct hp_cgp *p, const float *dy, const float *w, float *dx, float *ws,
		struct hp_pool *pool)
{
	const struct hp_cgp_geom *c = &p->c;
	int64_t planes = c->n * c->cbig, bvol = c->big[0] * c->big[1] * c->big[2];
	float *yp = ws, *kws = ws + p->yp;

#ifdef CGP_X86
	if (p->direct) {
		const struct hp_cgp_phase *f = &p->ph[0];
		struct cgp_direct a = { .p = p, .dy = dy, .w = w, .dx = dx, .nq = f->q[0] * f->q[1] * f->q[2],
					.cblocks = (c->cbig + CGP_CB - 1) / CGP_CB };
		int saved, threads = hp_conv_threads_enter(pool, &saved);
		double flops = 2.0 * (double)(c->n * c->cbig * c->csmall) * (double)a.nq;
		hp_conv_parallel(pool, flops >= CGP_PAR_MIN * 64.0 ? threads : 1, c->n * a.cblocks, direct_range, &a);
		hp_conv_threads_leave(saved);
		return;
	}
	if (p->pair) {
		struct cgp_pair a = { .p = p, .dy = dy, .w = w, .dx = dx, .lr = cgp_group_lr(c) };
		int saved, threads;
		double flops = 0;
		if (p->zero)
			memset(dx, 0, (size_t)(c->n * c->cbig * bvol) * sizeof(float));
		for (int i = 0; i < p->nph; i++) {
			const struct hp_cgp_phase *f = &p->ph[i];
			if (i % 2 == 0) /* a pair's phases share q[0] and q[1] */
				a.first[i / 2 + 1] = a.first[i / 2] + c->n * f->q[0] * ((f->q[1] * f->q[2] + 15) / 16);
			flops += 2.0 * (double)(c->n * c->cbig * (c->csmall / c->group)) *
				 (double)(f->cv.g.kvol * f->cv.g.grid_vol);
		}
		threads = hp_conv_threads_enter(pool, &saved);
		hp_conv_steal(pool, flops >= CGP_PAR_MIN * 64.0 ? threads : 1, a.first[p->nph / 2], 1, pair_range, &a);
		hp_conv_threads_leave(saved);
		return;
	}
	if (p->lanes) {
		struct cgp_lanes a = { .p = p, .dy = dy, .w = w, .dx = dx, .lr = c->cbig >= CGP_LR1 ? CGP_LR1 : CGP_LR };
		int64_t grp = c->group > 1 ? cgp_group_lr(c) : 0;
		int saved, threads;
		double flops = 0;
		if (p->zero)
			memset(dx, 0, (size_t)(c->n * c->cbig * bvol) * sizeof(float));
		for (int i = 0; i < p->nph; i++) {
			const struct hp_cgp_phase *f = &p->ph[i];
			int64_t plane = f->q[1] * f->q[2], nvec = plane < 8 ? (c->n * f->q[0] + 16 / plane - 1) / (16 / plane)
									    : c->n * f->q[0] * ((plane + 15) / 16);
			a.tiles[i + 1] = a.tiles[i] + (nvec + 1) / 2;
			a.lr = grp ? grp : plane < 8 && nvec == 1 ? a.lr : CGP_LR;
			flops += 2.0 * (double)(c->n * c->cbig * (c->csmall / c->group)) *
				 (double)(f->cv.g.kvol * f->cv.g.grid_vol);
		}
		a.cblocks = c->group * ((c->cbig / c->group + a.lr - 1) / a.lr);
		threads = hp_conv_threads_enter(pool, &saved);
		/* phases of more taps cost more: a thread done with its share
		 * takes the rest of the other's */
		hp_conv_steal(pool, flops >= CGP_PAR_MIN * 64.0 ? threads : 1, a.cblocks * a.tiles[p->nph], 1, lanes_range,
			      &a);
		hp_conv_threads_leave(saved);
		return;
	}
#endif
	if (p->zero)
		memset(dx, 0, (size_t)(planes * bvol) * sizeof(float));
	for (int i = 0; i < p->nph; i++) {
		const struct hp_cgp_phase *f = &p->ph[i];
		struct hp_conv cv = f->cv;
		struct cgp_scatter a = { .p = p, .f = f, .yp = yp, .dx = dx };
		int saved, threads;

		cv.wtap = f->tap;
		hp_kxk_forward(&cv, dy, w, NULL, yp, kws, pool, NULL, NULL);
		threads = hp_conv_threads_enter(pool, &saved);
		hp_conv_parallel(pool, planes * bvol >= CGP_PAR_MIN ? threads : 1, planes, scatter_range, &a);
		hp_conv_threads_leave(saved);
	}
}
