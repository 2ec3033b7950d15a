/* ConvGradFilter of convolutions in 1-3 spatial dims over AVX-512
 * register tiles (conv_grad_reg.c): ResNet-18's small planes (packed
 * tiles, ungrouped), and layers of 8-128 output channels, or groups of
 * 16-64 (co-lane tiles, below: the 3-D U-Net, ResNeXt's later stages).
 *
 * Why: through im2col ConvGradFilter is one sgemm of cin*kvol x cout
 * outputs per tile of positions; on small planes (2x2 and 4x4 at a batch
 * of 4: ResNet-18 at 64x64, stages 3 and 4) the reduction is 4-16
 * positions long and the output millions of elements, so each sgemm
 * packs and writes dW^T for a few multiply-adds (14-37 GF/s a thread,
 * bench_conv_libs.c, pass dW).  Here a tile of 8 output channels x 48
 * taps of dW stays in 24 registers over the whole reduction, every batch
 * item and position, and is written once.
 *
 * Positions are packed in chunks: the chunk's input taps transposed (a
 * row of cin*kvol taps per position, zero where the window leaves the
 * input, rounded up to 16) and dY (8 output channels per position and
 * channel block).  A tile then runs, per position, 3 loads of taps and 8
 * broadcasts of dY into 24 fused multiply-adds.  Packing is what the
 * tiles wait for where channels are few (a packed float feeds cout
 * multiply-adds): taps rows come from permuted window offsets and
 * gathers (small windows, short rows), from masked row loads (rows of
 * stride 1, or 2 for wide windows) or im2col (other wide windows) turned
 * by 16 x 16 register transposes, dY through the same transposes.
 *
 * Each worker owns blocks of 48 taps (for every output channel) and packs
 * its own chunks, its taps and all of dY: a run has no barrier but its
 * end (a shared packing took two per chunk, and on this shared machine a
 * descheduled worker made each wait a time slice: the 3-D U-Net's 24^3
 * layers ran 5-20 times slower on two threads).
 *
 * Every element of dW is one running sum in one order,
 *     s = acc (or 0);  then the units (batch items, or with a batch of one
 *     the planes of the first spatial axis: conv_grad.c's units,
 *     hp_filter_unit_axis) from the last to the first, each unit's
 *     positions in order:
 * units shorter than RF_BLK_MIN as one chain s = fma(dy, x, s); longer
 * ones in blocks of RF_BLK positions, each a chain from 0 added to s (a
 * single chain over a batch of 16 32x32 planes was 5.6 times further from
 * a double sum than the sgemm path's tiles; in blocks it is as close).
 * Blocks never cross units and s waits in dW (a float, exactly) between
 * chunks, which hold whole blocks.  So a band of units that starts from
 * the sum of the bands after it (input acc) ends with the whole node's
 * bits, and no thread count, share or chunk changes a bit: each element
 * is computed by one thread, in that order. */
#include <stdint.h>
#include <string.h>

#include "kernels/conv_impl.h"
#include "kernels/cpu.h"
#include "kernels/simd_tr16.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define RF_X86 1
#define RF_TARGET __attribute__((target("avx2,fma,avx512f")))
#endif

#define RF_MR 8          /* output channels per tile */
#define RF_NV 3          /* vectors of 16 taps per tile */
#define RF_PACK 262144   /* packed taps per chunk at most (1 MiB) */
#define RF_KMAX 512      /* positions per chunk at most: a tile's taps in L2 */
#define RF_KVOL_MAX 512  /* window volume at most */
#define RF_SEG 256       /* taps per segment of rf_pack's 16-position blocks */
#define RF_BLK 64        /* positions per block of a sum */
#define RF_BLK_MIN 16    /* units this long and longer sum in blocks */

static int rf_mode; /* 0 auto, >= 1 wherever it can run, -1 never */
static int rd_mode; /* co-lane tiles: 0 auto, 1 wherever they can run, -1 never */

void hp_rfilt_set_mode(int mode)
{
	rf_mode = mode;
}

void hp_rfilt_set_direct(int mode)
{
	rd_mode = mode;
}

/* ---- co-lane tiles: few output channels ----
 * With 16 output channels (the 3-D U-Net's first and last level) a packed
 * tap feeds 16 multiply-adds and packing is what the tiles above wait
 * for.  Here a tile of dW^T (rt window rows: a channel and a tap of the
 * first two window axes; k[2] taps of the row; nc vectors of 16 output
 * channels) stays in registers; per position nc vectors of dY (packed,
 * [position][nc * 16]) and one broadcast of X per tap, read where X lies
 * (a row outside the input reads a row of zeros, a tap outside the row
 * a 0), so nothing but dY is packed.  The sums are the same as the
 * tiles': each element's lane takes the positions in order, blocks and
 * units alike, with the same zeros, so the bits are those of the tiles
 * above. */
#define RD_CHUNK 512 /* positions per chunk at most */

/* Tap rows per tile by output-channel vectors and row taps: 24-27
 * accumulators, at most 12 row pointers. */
static int rd_rows(int nc, int64_t kw)
{
	static const int rt[3][3] = { { 12, 12, 9 }, { 12, 6, 4 }, { 6, 3, 2 } };

	return rt[nc == 1 ? 0 : nc == 2 ? 1 : 2][kw - 1];
}

static int rd_eligible(const struct hp_colgeom *geo, int64_t cout)
{
	return geo->dil[2] == 1 && geo->k[2] <= 3 && cout <= 1024;
}

/* Auto: 8 to 64 output channels on rows of 8 and more, up to 128 on rows
 * of 16 and more.  bench_conv_libs.c, pass dW, GF/s a CPU-second (packed
 * tiles or sgemm path / here): 64 -> 64 at 32x32, 145 / 195; 3 -> 32 of
 * stride 2 at 224x224, 49 / 107; 128 -> 128 at 16x16, 138 / 158; but 128
 * at 8x8, 150 / 130, 256 at 4x4, 150 / 64 (rows of a few columns: a
 * segment's row pointers and edge columns for a few positions); 2
 * channels, 18 / 5 (the vectors' lanes mostly idle).  The shipped LeNet's
 * second Conv (6 -> 16 at 4x4, batch 64) ran its dW 1.8x slower here
 * (--trace, 1 thread: 189-255 against 344-445 us a step). */
static int rd_wanted(const struct hp_colgeom *geo, int64_t cout)
{
	return cout >= 8 && geo->grid[2] >= 8 && (cout <= 64 || (cout <= 128 && geo->grid[2] >= 16));
}

/* Groups: 16 to 64 output channels a group (fewer leave lanes idle, and
 * their dW^T takes more than the sgemm path's workspace).  bench_conv_libs.c,
 * pass dW, GF/s a CPU-second (sgemm path / here): ResNeXt's 16 a group at
 * 14x14, 20-28 / 53-58; 32 a group at 7x7, 20-25 / 42-49. */
static int rd_wanted_grp(const struct hp_colgeom *geo, int64_t mg)
{
	(void)geo;
	return mg >= 16 && mg <= 64;
}

static int rd_plan(struct hp_rfilt *q, const struct hp_colgeom *geo, int64_t n, int64_t cin, int64_t cout,
		   int64_t group, int64_t unit, int threads)
{
	q->geo = *geo;
	q->group = group, q->xitem = cin * geo->img_vol, q->yitem = cout * geo->grid_vol;
	cin /= group, cout /= group;
	q->n = n, q->cin = cin, q->cout = cout;
	q->bvol = geo->img_vol, q->svol = geo->grid_vol, q->rows = cin * geo->kvol, q->unit = unit;
	q->direct = 1;
	q->nc = cout <= 16 ? 1 : cout <= 32 ? 2 : 4;
	q->rt = rd_rows(q->nc, geo->k[2]);
	q->ncg = (cout + q->nc * 16 - 1) / (q->nc * 16);
	q->lanes = q->ncg * q->nc * 16;
	q->trows = cin * geo->k[0] * geo->k[1];
	q->ntile = (q->trows + q->rt - 1) / q->rt;
	int64_t w = threads > 0 ? threads : 1, total = n * q->svol;
	int64_t nt = group * q->ntile * q->ncg;
	q->workers = (int)(w < nt ? w : nt);
	q->blk = unit >= RF_BLK_MIN ? RF_BLK : 0;
	int64_t kc = rf_mode > 1 ? rf_mode : RD_CHUNK;
	kc = kc > q->blk ? kc : q->blk;
	q->kc = kc < total ? kc : total;
	return 1;
}

int hp_rfilt_plan(struct hp_rfilt *q, const struct hp_colgeom *geo, int64_t n, int64_t cin, int64_t cout,
		  int64_t group, int64_t unit, int threads)
{
	int64_t rows = cin * geo->kvol, svol = geo->grid_vol;

	memset(q, 0, sizeof *q);
	/* a forced shift or grouped mode (tests, benchmarks) asks for the sgemm paths */
	if (rf_mode < 0 || hp_conv_shift_mode() != 0 || !hp_cpu_avx512_fma() || group < 1 || cin % group || cout % group ||
	    n < 1 || unit < 1 || svol % unit || rows < 1 || cout < 1 || geo->kvol > RF_KVOL_MAX ||
	    cin * geo->img_vol >= INT32_MAX)
		return 0;
	if (group > 1) /* groups: the co-lane tiles only */
		return hp_conv_grp_mode() >= 0 && rd_eligible(geo, cout / group) &&
		       (rd_mode > 0 || (rd_mode == 0 && rf_mode == 0 && rd_wanted_grp(geo, cout / group))) &&
		       rd_plan(q, geo, n, cin, cout, group, unit, threads);
	/* Auto: units of at most 1024 positions (the sizes measured), and
	 * enough multiply-adds per packed float: a position packs about rows
	 * + cout floats for rows * cout multiply-adds.  bench_conv_libs.c, pass
	 * dW, GF/s a thread (sgemm paths / here): MobileNetV2's stem, 27 taps
	 * x 32 channels (ratio 15), 41-52 / 26-38; its 1x1 expansions at 56x56,
	 * 24 x 144 (21), 87 / 85, at 28x28, 32 x 192 (27), 91 / 111; the 3-D
	 * U-Net's 16 -> 32 at 24^3, 432 x 32 (30), 71 / 96. */
	int rd = rd_eligible(geo, cout) && (rd_mode > 0 || (rd_mode == 0 && rf_mode == 0 && rd_wanted(geo, cout)));
	if (!rd && rf_mode == 0 && (unit > 1024 || rows * cout < 24 * (rows + cout)))
		return 0;
	if (rd)
		return rd_plan(q, geo, n, cin, cout, 1, unit, threads);
	q->geo = *geo;
	q->n = n, q->cin = cin, q->cout = cout;
	q->bvol = geo->img_vol, q->svol = svol, q->rows = rows, q->unit = unit;
	q->ldt = (rows + 15) / 16 * 16;
	q->mb = (cout + RF_MR - 1) / RF_MR;
	/* workers own blocks of 48 taps (every output channel of them): each
	 * packs its taps and all of dY, so the run needs no barrier */
	int64_t ntb = (q->ldt + RF_NV * 16 - 1) / (RF_NV * 16), w = threads > 0 ? threads : 1;
	q->workers = (int)(w < ntb ? w : ntb);
	q->tw = (ntb + q->workers - 1) / q->workers * RF_NV * 16;
	q->tw = q->tw < q->ldt ? q->tw : q->ldt;
	int64_t kc = RF_PACK / q->tw, total = n * svol;
	kc = kc < RF_KMAX ? kc : RF_KMAX;
	kc = kc > 16 ? kc : 16;
	kc = rf_mode > 1 ? rf_mode : kc; /* tests: chunks of rf_mode positions */
	/* units of RF_BLK_MIN positions and more sum in blocks of RF_BLK */
	q->blk = unit >= RF_BLK_MIN ? RF_BLK : 0;
	kc = kc > q->blk ? kc : q->blk; /* a chunk short of the whole holds a block */
	q->kc = kc < total ? kc : total;
	return 1;
}

/* Floats of a worker's buffers: packed taps, dY, 16 positions' taps rows
 * of a segment (rf_pack: at most RF_SEG taps, and never more than a packed
 * row holds, whatever share a run gives the worker; a segment starts at
 * its first channel's tap 0, up to kvol - 1 before it). */
static size_t rf_worker_floats(const struct hp_rfilt *q)
{
	int64_t seg = q->ldt < RF_SEG ? q->ldt : RF_SEG;

	return (size_t)(q->kc * q->tw) + (size_t)(q->mb * q->kc * RF_MR) + (size_t)((seg + q->geo.kvol + 16) * 16);
}

/* The longest block of a sum (rf_blocks: blocks never cross units, so
 * with units shorter than RF_BLK a block is a unit); 0 without blocks.
 * A chunk must hold one. */
static int64_t rf_block_len(const struct hp_rfilt *q)
{
	return q->blk && q->unit < q->blk ? q->unit : q->blk;
}

/* A co-lane worker's row segments of a chunk: at most one per position
 * and one more per block. */
struct rd_seg {
	int64_t xb, zi, yi; /* the item's X, the window's first input plane and row */
	int64_t w0, len, k; /* the segment's first column and length, its first position in the chunk */
};

/* Floats of a co-lane worker's buffers: dY, a row of zeros, segments, a
 * 16 x 16 transpose. */
static size_t rd_worker_floats(const struct hp_rfilt *q)
{
	size_t f = (size_t)(q->kc * q->lanes) + (size_t)(q->geo.img[2] + 16) +
		   (size_t)(2 * q->kc + 2) * (sizeof(struct rd_seg) / sizeof(float)) + 256;
	return (f + 15) / 16 * 16;
}

size_t hp_rfilt_workspace(const struct hp_rfilt *q)
{
	if (q->direct)
		return ((size_t)(q->group * q->rows * q->lanes) + (size_t)q->workers * rd_worker_floats(q)) *
		       sizeof(float);
	return ((size_t)(2 * q->ldt) + (size_t)q->workers * rf_worker_floats(q)) * sizeof(float);
}

int hp_rfilt_fit(struct hp_rfilt *q, size_t bytes)
{
	int64_t floor = q->blk > 16 ? q->blk : 16, blen = rf_block_len(q);

	if (rf_mode > 1 || (q->direct && rd_mode > 0))
		return 1;
	if (q->direct) {
		/* the co-lane tiles only where their chunks of floor positions
		 * fit, whatever the batch (a band's shorter chain must not
		 * change the path) */
		struct hp_rfilt f = *q;
		f.kc = floor;
		if (hp_rfilt_workspace(&f) > bytes)
			return 0;
	}
	/* the packed tiles' chunks hold whole blocks, not RF_BLK positions:
	 * LeNet's second Conv (units of 4x4 positions) took 100 KiB in
	 * chunks of 64 against the sgemm path's 36, in each of its four
	 * bands' filter gradients at a quarter of its peak */
	if (!q->direct)
		floor = blen > 16 ? blen : 16;
	while (q->kc > floor && hp_rfilt_workspace(q) > bytes) {
		int64_t kc = q->kc / 2 / 16 * 16;
		q->kc = kc > floor ? kc : floor;
	}
	return 1;
}

void hp_rfilt_lean(struct hp_rfilt *q)
{
	int64_t floor = q->blk > 16 ? q->blk : 16;

	if (!q->direct)
		return;
	q->workers = 1;
	if (rf_mode <= 1) /* not the tests' chunks */
		q->kc = q->kc < floor ? q->kc : floor;
}

/* Position g of the chain: its batch item and position in the item. */
static void rf_pos(const struct hp_rfilt *q, int64_t g, int64_t *item, int64_t *pos)
{
	int64_t upi = q->svol / q->unit, u = q->n * upi - 1 - g / q->unit;

	*item = u / upi;
	*pos = u % upi * q->unit + g % q->unit;
}

struct rf_run {
	const struct hp_rfilt *q;
	const float *dy, *x, *acc;
	float *dw, *ws;
	int32_t *cols;   /* per packed tap: its channel's offset, its window tap */
	int shares;      /* the run's workers: blocks of taps in as many shares */
	int64_t tw, kc;  /* a share's packed taps, positions per chunk */
	/* hp_rfilt_run_pieces: a share in pieces of `piece` taps (then the
	 * packed rows' stride tw), summed in the worker's buffer (inside: in
	 * its packing buffer past the taps, else at pbuf + tid * cout *
	 * piece), handed to done */
	int64_t piece;
	int inside;
	float *pbuf;
	hp_rfilt_done_fn done;
	void *arg;
};

/* A worker's chunk: chain positions [g0, g0 + kn), taps [t0, t1) packed
 * at taps (row stride tw), dY at dyp, 16 positions' taps rows at tmp. */
struct rf_chunk {
	int64_t g0, kn, t0, t1;
	float *out;            /* the sums: tap t of channel m at out[m * ld + t - tbase] */
	int64_t ld, tbase;
	int64_t blen[RF_KMAX]; /* with q->blk: the chunk's blocks' positions */
	int nblk;
	float *taps, *dyp, *tmp;
};

/* The taps tables: tap t of a packed row is X's channel t / kvol at its
 * offset cols[t] and window tap cols[ldt + t] (kvol: a padding tap). */
static void rf_cols(const struct hp_rfilt *q, int32_t *cols)
{
	for (int64_t t = 0; t < q->ldt; t++) {
		cols[t] = t < q->rows ? (int32_t)(t / q->geo.kvol * q->bvol) : 0;
		cols[q->ldt + t] = (int32_t)(t < q->rows ? t % q->geo.kvol : q->geo.kvol);
	}
}

#ifdef RF_X86
/* A packed row: X's values at the window's offsets off of each tap,
 * gathered 16 taps at a time, 0 outside. */
static RF_TARGET void rf_gather(const struct hp_rfilt *q, const float *xi, const int32_t *off, const int32_t *cols,
				int64_t t0, int64_t t1, float *dst)
{
	__m512i offv = _mm512_loadu_si512(off), zero = _mm512_setzero_si512();

	dst -= t0;
	for (int64_t t = t0; t < t1; t += 16) {
		__m512i kv = _mm512_loadu_si512(cols + q->ldt + t);
		__m512i o = q->geo.kvol < 16 ? _mm512_permutexvar_epi32(kv, offv) : _mm512_i32gather_epi32(kv, off, 4);
		__mmask16 m = _mm512_cmpge_epi32_mask(o, zero);
		__m512i idx = _mm512_add_epi32(o, _mm512_loadu_si512(cols + t));
		_mm512_storeu_ps(dst + t, _mm512_mask_i32gather_ps(_mm512_setzero_ps(), m, idx, xi, 4));
	}
}

/* dst rows j (stride ldd) at taps [0, 16) = src [16 taps][16 positions] column j. */
static RF_TARGET void rf_tr16(const float *src, float *dst, int64_t ldd)
{
	__m512 r[16];
	for (int i = 0; i < 16; i++)
		r[i] = _mm512_loadu_ps(src + i * 16);
	hp_tr16_ps(r);
	for (int i = 0; i < 16; i++)
		_mm512_storeu_ps(dst + i * ldd, r[i]);
}

/* dY of 16 channels (rows ld apart) x 16 positions at src into two blocks
 * of 8 channels: dst [16][8] and dst + next [16][8]. */
static RF_TARGET void rf_dy16(const float *src, int64_t ld, float *dst, int64_t next)
{
	float rows[256] __attribute__((aligned(64))), t[256] __attribute__((aligned(64)));

	for (int i = 0; i < 16; i++)
		_mm512_store_ps(rows + i * 16, _mm512_loadu_ps(src + i * ld));
	rf_tr16(rows, t, 16);
	for (int j = 0; j < 16; j++) {
		_mm256_storeu_ps(dst + j * RF_MR, _mm256_load_ps(t + j * 16));
		_mm256_storeu_ps(dst + next + j * RF_MR, _mm256_load_ps(t + j * 16 + 8));
	}
}
#else
static void rf_dy16(const float *src, int64_t ld, float *dst, int64_t next)
{
	(void)src, (void)ld, (void)dst, (void)next;
}

static void rf_tr16(const float *src, float *dst, int64_t ldd)
{
	(void)src, (void)dst, (void)ldd;
}

static void rf_gather(const struct hp_rfilt *q, const float *xi, const int32_t *off, const int32_t *cols, int64_t t0,
		      int64_t t1, float *dst)
{
	(void)q, (void)xi, (void)off, (void)cols, (void)t0, (void)t1, (void)dst;
}
#endif

/* Taps [t0, t1) of the packed row of position pos of the item at xi. */
static void rf_row(const struct hp_rfilt *q, const float *xi, int64_t pos, const int32_t *cols, int64_t t0, int64_t t1,
		   float *dst)
{
	const struct hp_colgeom *g = &q->geo;
	int64_t kh = g->k[1], kw = g->k[2];
	int64_t o2 = pos % g->grid[2], o1 = pos / g->grid[2] % g->grid[1], o0 = pos / (g->grid[1] * g->grid[2]);
	int64_t i0 = o0 * g->stride[0] - g->pad[0], i1 = o1 * g->stride[1] - g->pad[1];
	int64_t i2 = o2 * g->stride[2] - g->pad[2];
	int32_t off[RF_KVOL_MAX + 16]; /* the window's offsets in a plane, -1 outside */
	int64_t t = 0;

	for (int64_t a0 = 0; a0 < g->k[0]; a0++) {
		int64_t z = i0 + a0 * g->dil[0];
		int zin = z >= 0 && z < g->img[0];
		for (int64_t a1 = 0; a1 < kh; a1++) {
			int64_t y = i1 + a1 * g->dil[1];
			int yin = zin && y >= 0 && y < g->img[1];
			for (int64_t a2 = 0; a2 < kw; a2++, t++) {
				int64_t xx = i2 + a2 * g->dil[2];
				off[t] = yin && xx >= 0 && xx < g->img[2] ? (int32_t)((z * g->img[1] + y) * g->img[2] + xx) : -1;
			}
		}
	}
	for (; t < g->kvol + 16; t++)
		off[t] = -1; /* the padding taps' (rf_cols: tap kvol) */
	rf_gather(q, xi, off, cols, t0, t1, dst);
}

#ifdef RF_X86
/* Blocks of 16 positions from rows: stride 1 along rows at least 8 long. */
static int rf_rows(const struct hp_rfilt *q)
{
	/* at stride 2 only for wide windows: below 16 taps rf_row's permuted
	 * offsets and gathers win (1x1 of stride 2, 64 -> 128 channels: 121
	 * GF/s against 104), above im2col loses (7x7 of stride 2: 97 against 106) */
	return (q->geo.stride[2] == 1 || (q->geo.stride[2] == 2 && q->geo.kvol >= 16)) && q->geo.grid[2] >= 8 &&
	       q->geo.k[2] <= 16;
}

/* Stride 1 or 2 along rows: the taps of channels [c0, c1) of 16 positions
 * from pos (one item's, at xi) as tmp [tap - c0 * kvol][16], each tap's
 * row segments in masked loads (lanes outside the input read nothing and
 * stay 0), at stride 2 two vectors' even columns. */
static RF_TARGET void rf_block16(const struct hp_rfilt *q, const float *xi, int64_t pos, int64_t c0, int64_t c1,
				 float *tmp)
{
	const struct hp_colgeom *g = &q->geo;
	int64_t ow = g->grid[2], nseg = 0, iw = g->img[2], kw = g->k[2], d2 = g->dil[2], st = g->stride[2];
	const __m512i even = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
	/* per row segment: its lanes [l0, l1), the window's first input row
	 * (z, y) and column shift (lane l reads column sh + st * l) */
	int64_t l0[17], l1[17], zb[17], yb[17], sh[17];

	for (int64_t l = 0; l < 16; nseg++) {
		int64_t p = pos + l, ox = p % ow, len = ow - ox < 16 - l ? ow - ox : 16 - l, r = p / ow;
		l0[nseg] = l, l1[nseg] = l + len;
		zb[nseg] = r / g->grid[1] * g->stride[0] - g->pad[0];
		yb[nseg] = r % g->grid[1] * g->stride[1] - g->pad[1];
		sh[nseg] = (ox - l) * st - g->pad[2];
		l += len;
	}
	for (int64_t c = c0, t = 0; c < c1; c++)
		for (int64_t a0 = 0; a0 < g->k[0]; a0++)
			for (int64_t a1 = 0; a1 < g->k[1]; a1++) {
				__m512 v[16];
				for (int64_t a2 = 0; a2 < kw; a2++)
					v[a2] = _mm512_setzero_ps();
				for (int64_t sg = 0; sg < nseg; sg++) {
					int64_t z = zb[sg] + a0 * g->dil[0], y = yb[sg] + a1 * g->dil[1];
					if (z < 0 || z >= g->img[0] || y < 0 || y >= g->img[1])
						continue;
					const float *row = xi + c * q->bvol + (z * g->img[1] + y) * iw;
					for (int64_t a2 = 0; a2 < kw; a2++) {
						/* lanes [lo, hi) of the segment read columns inside the row */
						int64_t s2 = sh[sg] + a2 * d2, lo = s2 >= 0 ? 0 : (-s2 + st - 1) / st;
						int64_t hi = iw > s2 ? (iw - s2 + st - 1) / st : 0;
						lo = lo > l0[sg] ? lo : l0[sg];
						hi = hi < l1[sg] ? hi : l1[sg];
						if (hi <= lo)
							continue;
						uint32_t m = ((1u << hi) - 1) & ~((1u << lo) - 1);
						const float *at = (const float *)((uintptr_t)row + (uintptr_t)(s2 * 4));
						if (st == 1) {
							v[a2] = _mm512_mask_loadu_ps(v[a2], (__mmask16)m, at);
							continue;
						}
						uint32_t m2 = 0; /* lane l: column 2 l of the two vectors */
						for (int64_t l = lo; l < hi; l++)
							m2 |= 1u << (2 * l);
						__m512 a = _mm512_maskz_loadu_ps((__mmask16)m2, at);
						__m512 b = _mm512_maskz_loadu_ps((__mmask16)(m2 >> 16), at + 16);
						v[a2] = _mm512_mask_mov_ps(v[a2], (__mmask16)m, _mm512_permutex2var_ps(a, even, b));
					}
				}
				for (int64_t a2 = 0; a2 < kw; a2++, t++)
					_mm512_storeu_ps(tmp + t * 16, v[a2]);
			}
}
#else
static void rf_block16(const struct hp_rfilt *q, const float *xi, int64_t pos, int64_t c0, int64_t c1, float *tmp)
{
	(void)q, (void)xi, (void)pos, (void)c0, (void)c1, (void)tmp;
}
#endif

/* The chunk's taps [t0, t1) and dY (every output channel). */
static void rf_pack(const struct rf_run *r, const struct rf_chunk *ch)
{
	const struct hp_rfilt *q = r->q;
	const struct hp_colgeom *g = &q->geo;
	for (int64_t k0 = 0; k0 < ch->kn;) {
		int64_t item, pos, gq = ch->g0 + k0, run = q->unit - gq % q->unit;
		run = run < ch->kn - k0 ? run : ch->kn - k0;
		rf_pos(q, gq, &item, &pos);
		const float *xi = r->x + item * q->cin * q->bvol;
		int64_t k = k0;
		/* 16 positions at a time: stride-1 rows in masked loads, or wide
		 * windows through im2col, then transposed in registers (the same
		 * values as rf_row's; below 16 taps its offsets' permute beats
		 * im2col on small planes: 3x3 at 16x16, 64 channels: 133 GF/s
		 * against 118; 7x7: 80 against 99) */
		for (; (g->kvol >= 16 || rf_rows(q)) && k + 16 <= k0 + run; k += 16) {
			int64_t p = pos + (k - k0);
			/* in segments of RF_SEG taps: their channels' rows stay in L1 */
			for (int64_t s0 = ch->t0; s0 < ch->t1; s0 += RF_SEG) {
				int64_t s1 = s0 + RF_SEG < ch->t1 ? s0 + RF_SEG : ch->t1;
				int64_t ca = s0 / g->kvol, cb = (s1 + g->kvol - 1) / g->kvol, base = ca * g->kvol;
				cb = cb < q->cin ? cb : q->cin;
				if (rf_rows(q))
					rf_block16(q, xi, p, ca, cb, ch->tmp);
				else
					hp_im2col(g, cb - ca, xi + ca * q->bvol, p, p + 16, ch->tmp);
				if (s1 > q->rows) /* the padding taps' rows: 0 */
					memset(ch->tmp + (q->rows - base) * 16, 0, (size_t)((s1 - q->rows) * 16) * sizeof(float));
				for (int64_t t = s0; t < s1; t += 16)
					rf_tr16(ch->tmp + (t - base) * 16, ch->taps + k * r->tw + (t - ch->t0), r->tw);
			}
		}
		for (; k < k0 + run; k++)
			rf_row(q, xi, pos + (k - k0), r->cols, ch->t0, ch->t1, ch->taps + k * r->tw);
		/* dY in runs of positions of one unit (consecutive in dY's rows) */
		const float *dyi = r->dy + item * q->cout * q->svol + pos;
		int64_t m16 = q->cout / 16 * 16, j16 = run / 16 * 16;
		for (int64_t m = 0; m < m16; m += 16) /* 16 channels x 16 positions transposed */
			for (int64_t j = 0; j < j16; j += 16)
				rf_dy16(dyi + m * q->svol + j, q->svol, ch->dyp + (m / RF_MR * r->kc + k0 + j) * RF_MR,
					r->kc * RF_MR);
		for (int64_t m = 0; m < q->mb * RF_MR; m++) {
			float *d = ch->dyp + (m / RF_MR * r->kc + k0) * RF_MR + m % RF_MR;
			const float *sm = dyi + m * q->svol;
			for (int64_t j = m < m16 ? j16 : 0; j < run; j++)
				d[j * RF_MR] = m < q->cout ? sm[j] : 0.0f;
		}
		k0 += run;
	}
}

#ifdef RF_X86
/* kn positions into the tile's sums a: per position nv vectors of taps
 * (row stride ldt) times each of 8 dY values (dyp: [kn][8]). */
static inline __attribute__((always_inline)) RF_TARGET void rf_fma(__m512 a[RF_MR][RF_NV], const int nv,
								const float *taps, int64_t ldt, const float *dyp,
								int64_t kn)
{
	for (int64_t k = 0; k < kn; k++) {
		__m512 c[RF_NV];
		#pragma GCC unroll 8
		for (int v = 0; v < nv; v++)
			c[v] = _mm512_loadu_ps(taps + k * ldt + v * 16);
		#pragma GCC unroll 8
		for (int i = 0; i < RF_MR; i++) {
			__m512 d = _mm512_set1_ps(dyp[k * RF_MR + i]);
			#pragma GCC unroll 8
			for (int v = 0; v < nv; v++)
				a[i][v] = _mm512_fmadd_ps(d, c[v], a[i][v]);
		}
	}
}

/* One tile: dW rows [0, mr) at dst (row stride ld), nv vectors of taps
 * (the last one masked by last), from src (the same layout: acc or dW)
 * or 0, over kn positions of taps (row stride ldt) and dyp ([kn][8]). */
static inline __attribute__((always_inline)) RF_TARGET void rf_tile(const int nv, const float *taps, int64_t ldt,
								 const float *dyp, int64_t kn, const int64_t *blen,
								 int nblk, const float *src, float *dst, int64_t ld, int mr,
								 __mmask16 last)
{
	__m512 a[RF_MR][RF_NV];

	if (nblk) { /* blocks: each a chain from 0, then added to the sum in dst */
		for (int b = 0; b < nblk; b++, taps += blen[b - 1] * ldt, dyp += blen[b - 1] * RF_MR) {
			const float *run = b ? dst : src;
			#pragma GCC unroll 8
			for (int i = 0; i < RF_MR; i++)
				#pragma GCC unroll 8
				for (int v = 0; v < nv; v++)
					a[i][v] = _mm512_setzero_ps();
			rf_fma(a, nv, taps, ldt, dyp, blen[b]);
			#pragma GCC unroll 8
			for (int i = 0; i < RF_MR; i++)
				#pragma GCC unroll 8
				for (int v = 0; v < nv; v++) {
					if (i >= mr)
						continue;
					__mmask16 m = v == nv - 1 ? last : 0xffff;
					__m512 s = run ? _mm512_maskz_loadu_ps(m, run + i * ld + v * 16) : _mm512_setzero_ps();
					_mm512_mask_storeu_ps(dst + i * ld + v * 16, m, _mm512_add_ps(s, a[i][v]));
				}
		}
		return;
	}
	#pragma GCC unroll 8
	for (int i = 0; i < RF_MR; i++)
		#pragma GCC unroll 8
		for (int v = 0; v < nv; v++)
			a[i][v] = src && i < mr ? _mm512_maskz_loadu_ps(v == nv - 1 ? last : 0xffff, src + i * ld + v * 16)
						: _mm512_setzero_ps();
	rf_fma(a, nv, taps, ldt, dyp, kn);
	#pragma GCC unroll 8
	for (int i = 0; i < RF_MR; i++)
		#pragma GCC unroll 8
		for (int v = 0; v < nv; v++)
			if (i < mr)
				_mm512_mask_storeu_ps(dst + i * ld + v * 16, v == nv - 1 ? last : 0xffff, a[i][v]);
}

/* The tile of 3 vectors (every block of 48 taps but a share's last) with
 * its 24 sums in named locals: rf_tile's a[8][3], passed to rf_fma and
 * indexed up to the runtime row count mr, stays addressable, so GCC 12
 * keeps it in registers inside the multiply-add loop only and moves all
 * 24 sums through the stack before and after each chain (48 stores and
 * 48 loads of 64 bytes around 384 multiply-adds on a 16-position chain:
 * ResNet-18's stage 4 at 64x64, batch 4).  The same operations in the
 * same order as rf_tile(3, ...): the same bits. */
#define RF3_ROWS(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7)
#define RF3_DECL(i) __m512 a##i##0, a##i##1, a##i##2;
#define RF3_ZERO(i) a##i##0 = a##i##1 = a##i##2 = _mm512_setzero_ps();
#define RF3_INIT(i)                                                          \
	if (src && (i) < mr) {                                               \
		a##i##0 = _mm512_loadu_ps(src + (i) * ld);                   \
		a##i##1 = _mm512_loadu_ps(src + (i) * ld + 16);              \
		a##i##2 = _mm512_maskz_loadu_ps(last, src + (i) * ld + 32);  \
	} else {                                                             \
		RF3_ZERO(i)                                                  \
	}
#define RF3_FMA(i)                                                           \
	{                                                                    \
		__m512 d = _mm512_set1_ps(dp[(i)]);                          \
		a##i##0 = _mm512_fmadd_ps(d, c0, a##i##0);                   \
		a##i##1 = _mm512_fmadd_ps(d, c1, a##i##1);                   \
		a##i##2 = _mm512_fmadd_ps(d, c2, a##i##2);                   \
	}
#define RF3_STORE(i)                                                         \
	if ((i) < mr) {                                                      \
		_mm512_storeu_ps(dst + (i) * ld, a##i##0);                   \
		_mm512_storeu_ps(dst + (i) * ld + 16, a##i##1);              \
		_mm512_mask_storeu_ps(dst + (i) * ld + 32, last, a##i##2);   \
	}
/* the block's sums added to the running ones at run (src, then dst) or 0 */
#define RF3_ADD(i)                                                                                   \
	if ((i) < mr) {                                                                              \
		__m512 s0 = run ? _mm512_loadu_ps(run + (i) * ld) : _mm512_setzero_ps();             \
		__m512 s1 = run ? _mm512_loadu_ps(run + (i) * ld + 16) : _mm512_setzero_ps();        \
		__m512 s2 = run ? _mm512_maskz_loadu_ps(last, run + (i) * ld + 32) : _mm512_setzero_ps(); \
		_mm512_storeu_ps(dst + (i) * ld, _mm512_add_ps(s0, a##i##0));                        \
		_mm512_storeu_ps(dst + (i) * ld + 16, _mm512_add_ps(s1, a##i##1));                   \
		_mm512_mask_storeu_ps(dst + (i) * ld + 32, last, _mm512_add_ps(s2, a##i##2));        \
	}
#define RF3_CHAIN(tp, dq, len)                                                       \
	for (int64_t k = 0; k < (len); k++) {                                        \
		const float *t = (tp) + k * ldt, *dp = (dq) + k * RF_MR;             \
		__m512 c0 = _mm512_loadu_ps(t), c1 = _mm512_loadu_ps(t + 16);        \
		__m512 c2 = _mm512_loadu_ps(t + 32);                                 \
		RF3_ROWS(RF3_FMA)                                                    \
	}

static RF_TARGET void rf_tile3(const float *taps, int64_t ldt, const float *dyp, int64_t kn, const int64_t *blen,
			       int nblk, const float *src, float *dst, int64_t ld, int mr, __mmask16 last)
{
	RF3_ROWS(RF3_DECL)

	if (nblk) { /* blocks: each a chain from 0, then added to the sum in dst */
		for (int b = 0; b < nblk; b++) {
			const float *run = b ? dst : src;
			RF3_ROWS(RF3_ZERO)
			RF3_CHAIN(taps, dyp, blen[b])
			RF3_ROWS(RF3_ADD)
			taps += blen[b] * ldt, dyp += blen[b] * RF_MR;
		}
		return;
	}
	RF3_ROWS(RF3_INIT)
	RF3_CHAIN(taps, dyp, kn)
	RF3_ROWS(RF3_STORE)
}

static RF_TARGET void rf_tile2(const float *taps, int64_t ldt, const float *dyp, int64_t kn, const int64_t *blen,
			       int nblk, const float *src, float *dst, int64_t ld, int mr, __mmask16 last)
{
	rf_tile(2, taps, ldt, dyp, kn, blen, nblk, src, dst, ld, mr, last);
}

static RF_TARGET void rf_tile1(const float *taps, int64_t ldt, const float *dyp, int64_t kn, const int64_t *blen,
			       int nblk, const float *src, float *dst, int64_t ld, int mr, __mmask16 last)
{
	rf_tile(1, taps, ldt, dyp, kn, blen, nblk, src, dst, ld, mr, last);
}
#endif

/* The chunk's tiles: taps [t0, t1) in panels of about RF_PANEL packed
 * floats outside, channel blocks of 8 inside them, blocks of 48 taps
 * innermost (a panel's taps stay in L2 across the channels).  A channel
 * block thus writes its 8 rows of dW along a panel before the next: the
 * order taps outside, channels inside wrote each block of 48 taps down all
 * cout rows (rows 18 KiB apart on ResNet-18's 512-channel 3x3s), and on a
 * short chain (16 positions: stage 4 at 64x64, batch 4) those writes were
 * the time; a standalone copy of the tiles, 512 x 4608 over 16 positions,
 * 1 thread: 3.15 -> 1.93 ms a run; bench_conv_libs.c 3x3-tiny pass dW,
 * GF/s a CPU-second at a load of 12-20: 20 -> 56.  Every element is still
 * one tile's sum in the same order: the bits do not change. */
#define RF_PANEL 65536

static void rf_tiles(const struct rf_run *r, const struct rf_chunk *ch)
{
#ifdef RF_X86
	const struct hp_rfilt *q = r->q;
	int64_t tw = RF_NV * 16, pw = RF_PANEL / (ch->kn > 0 ? ch->kn : 1) / tw * tw;

	pw = pw > tw ? pw : tw;
	if (rf_mode > 1) /* tests' chunks: panels of two blocks, so that a share walks several */
		pw = 2 * tw;
	for (int64_t p0 = ch->t0; p0 < ch->t1; p0 += pw)
		for (int64_t m0 = 0; m0 < q->cout; m0 += RF_MR)
			for (int64_t t0 = p0; t0 < p0 + pw && t0 < ch->t1; t0 += tw) {
				int64_t taps = q->rows - t0 < tw ? q->rows - t0 : tw;
				int nv = (int)((taps + 15) / 16), mr = (int)(q->cout - m0 < RF_MR ? q->cout - m0 : RF_MR);
				int64_t lastn = taps - (int64_t)(nv - 1) * 16;
				__mmask16 last = (__mmask16)(lastn >= 16 ? 0xffff : (1u << lastn) - 1);
				float *dst = ch->out + m0 * ch->ld + (t0 - ch->tbase);
				const float *src = ch->g0 == 0 ? (r->acc ? r->acc + m0 * q->rows + t0 : NULL) : dst;
				const float *tp = ch->taps + (t0 - ch->t0), *dp = ch->dyp + m0 / RF_MR * r->kc * RF_MR;
				if (nv == 3)
					rf_tile3(tp, r->tw, dp, ch->kn, ch->blen, ch->nblk, src, dst, ch->ld, mr, last);
				else if (nv == 2)
					rf_tile2(tp, r->tw, dp, ch->kn, ch->blen, ch->nblk, src, dst, ch->ld, mr, last);
				else
					rf_tile1(tp, r->tw, dp, ch->kn, ch->blen, ch->nblk, src, dst, ch->ld, mr, last);
			}
#else
	(void)r, (void)ch;
#endif
}

/* With blocks: the chunk ends at a block's end, and its blocks' lengths. */
static void rf_blocks(const struct hp_rfilt *q, struct rf_chunk *ch)
{
	int64_t e = ch->g0 + ch->kn, total = q->n * q->svol;

	ch->nblk = 0;
	if (!q->blk)
		return;
	if (e < total) /* the last block start at or before e (kc >= blk: after g0) */
		e = e / q->unit * q->unit + e % q->unit / q->blk * q->blk;
	int64_t g = ch->g0;
	for (; g < e && ch->nblk < RF_KMAX; ch->nblk++) {
		int64_t j = g % q->unit, len = q->unit - j < q->blk ? q->unit - j : q->blk;
		ch->blen[ch->nblk] = len;
		g += len;
	}
	ch->kn = g - ch->g0;
}

/* Taps [ch->t0, ch->t1) over every chunk of the chain: their sums final. */
static void rf_chain(const struct rf_run *r, struct rf_chunk *ch)
{
	const struct hp_rfilt *q = r->q;
	int64_t total = q->n * q->svol;

	for (ch->g0 = 0; ch->g0 < total; ch->g0 += ch->kn) {
		ch->kn = total - ch->g0 < r->kc ? total - ch->g0 : r->kc;
		rf_blocks(q, ch);
		rf_pack(r, ch);
		rf_tiles(r, ch);
	}
}

/* Workers' shares [b, e): blocks of taps, every chunk of the chain; with
 * pieces, a piece's chain at a time, its sums then handed over.  A tap's
 * sums are the same either way: the chunks are the same, and each tile
 * reads back only its own taps' running sums. */
static void rf_work(void *arg, int64_t b, int64_t e, int tid)
{
	const struct rf_run *r = arg;
	const struct hp_rfilt *q = r->q;
	int64_t ntb = (q->ldt + RF_NV * 16 - 1) / (RF_NV * 16);
	float *buf = r->ws + (size_t)tid * rf_worker_floats(q); /* sized for q's tw, kc */
	struct rf_chunk ch = { .taps = buf, .dyp = buf + q->kc * q->tw, .tmp = buf + q->kc * q->tw + q->mb * q->kc * RF_MR };

	for (int64_t s = b; s < e; s++) {
		int64_t t0 = ntb * s / r->shares * RF_NV * 16, t1 = ntb * (s + 1) / r->shares * RF_NV * 16;
		t1 = t1 < q->ldt ? t1 : q->ldt;
		if (!r->piece) {
			ch.t0 = t0, ch.t1 = t1, ch.out = r->dw, ch.ld = q->rows, ch.tbase = 0;
			rf_chain(r, &ch);
			continue;
		}
		for (ch.t0 = t0; ch.t0 < t1; ch.t0 += r->piece) {
			ch.t1 = ch.t0 + r->piece < t1 ? ch.t0 + r->piece : t1;
			ch.out = r->inside ? buf + r->kc * r->piece : r->pbuf + (size_t)tid * (size_t)(q->cout * r->piece);
			ch.ld = r->piece, ch.tbase = ch.t0;
			rf_chain(r, &ch);
			r->done(r->arg, ch.out, ch.t0, ch.t1 < q->rows ? ch.t1 : q->rows, ch.ld);
		}
	}
}

/* ---- co-lane tiles: the run ---- */
struct rd_run {
	const struct hp_rfilt *q;
	const float *dy, *x, *acc;
	float *dw, *dwt, *ws; /* dwt: dW^T [group][rows][lanes], the sums between chunks */
	int shares;
};

/* A tile's window rows: the channel's offset in an item, the offsets of
 * the first two window axes (dilated). */
struct rd_tab {
	int64_t coff, a0, a1;
};

#ifdef RF_X86
#define RD_ACC 27 /* accumulators at most */
#define RD_RMAX 12 /* window rows per tile at most */

/* One tile over one block (or, with chain, over the chunk continuing the
 * sums): segments [0, nseg) of positions, dY at dyp ([position][nc * 16]),
 * the sums at s ([row][k[2]][nc * 16]: read, then s + the block, or with
 * chain the chain from s). */
static inline __attribute__((always_inline)) RF_TARGET void rd_tile(const int NC, const int R, const int KW,
								 const struct hp_rfilt *q, const float *x,
								 const float *zero, const struct rd_tab *tab, int nr,
								 const struct rd_seg *seg, int nseg, const float *dyp,
								 float *s, int64_t ls, int chain)
{
	const struct hp_colgeom *g = &q->geo;
	const int64_t L = ls;
	__m512 a[RD_ACC];
	int64_t id = g->img[0], ih = g->img[1], iw = g->img[2], s2 = g->stride[2], p2 = g->pad[2];
	/* columns whose window taps all lie in the row */
	int64_t wlo = (p2 + s2 - 1) / s2, whi = iw - KW + p2 >= 0 ? (iw - KW + p2) / s2 + 1 : 0;

#pragma GCC unroll 32
	for (int i = 0; i < R * KW * NC; i++) /* rows past nr: none of dW's, none in s */
		a[i] = chain && i / (KW * NC) < nr ? _mm512_loadu_ps(s + i / NC * ls + i % NC * 16) : _mm512_setzero_ps();
	for (int sg = 0; sg < nseg; sg++) {
		const float *rp[RD_RMAX];
		for (int r = 0; r < R; r++) {
			int64_t zi = seg[sg].zi + tab[r].a0, yi = seg[sg].yi + tab[r].a1;
			rp[r] = r < nr && zi >= 0 && zi < id && yi >= 0 && yi < ih
					? x + seg[sg].xb + tab[r].coff + (zi * ih + yi) * iw
					: zero;
		}
		int64_t w = seg[sg].w0, w1 = w + seg[sg].len;
		int64_t wa = wlo < w1 ? wlo : w1, wb = whi < w1 ? whi : w1;
		const float *dp = dyp + seg[sg].k * L;
		for (int part = 0; part < 3; part++) {
			int64_t end = part == 0 ? wa : part == 1 ? wb : w1;
			if (part == 1) {
				for (; w < end; w++, dp += L) { /* every tap in the row */
					__m512 d[4];
					int64_t xw = w * s2 - p2;
					for (int c = 0; c < NC; c++)
						d[c] = _mm512_loadu_ps(dp + c * 16);
					for (int r = 0; r < R; r++)
						for (int t = 0; t < KW; t++) {
							__m512 b = _mm512_set1_ps(rp[r][xw + t]);
							for (int c = 0; c < NC; c++)
								a[(r * KW + t) * NC + c] =
									_mm512_fmadd_ps(d[c], b, a[(r * KW + t) * NC + c]);
						}
				}
				continue;
			}
			for (; w < end; w++, dp += L) { /* taps outside the row read 0 */
				__m512 d[4];
				int64_t xw = w * s2 - p2;
				for (int c = 0; c < NC; c++)
					d[c] = _mm512_loadu_ps(dp + c * 16);
				for (int r = 0; r < R; r++)
					for (int t = 0; t < KW; t++) {
						int64_t xi = xw + t;
						__m512 b = _mm512_set1_ps(xi >= 0 && xi < iw ? rp[r][xi] : 0.0f);
						for (int c = 0; c < NC; c++)
							a[(r * KW + t) * NC + c] = _mm512_fmadd_ps(d[c], b, a[(r * KW + t) * NC + c]);
					}
			}
		}
	}
#pragma GCC unroll 32
	for (int i = 0; i < R * KW * NC; i++) {
		float *si = s + i / NC * ls + i % NC * 16;
		if (i / (KW * NC) < nr)
			_mm512_storeu_ps(si, chain ? a[i] : _mm512_add_ps(_mm512_loadu_ps(si), a[i]));
	}
}

#define RD_FN(NC, R, KW)                                                                                              \
	static RF_TARGET void rd_tile_##NC##_##KW(const struct hp_rfilt *q, const float *x, const float *zero,         \
						  const struct rd_tab *tab, int nr, const struct rd_seg *seg, int nseg, \
						  const float *dyp, float *s, int64_t ls, int chain)                  \
	{                                                                                                             \
		rd_tile(NC, R, KW, q, x, zero, tab, nr, seg, nseg, dyp, s, ls, chain);                                \
	}
/* as rd_rows */
RD_FN(1, 12, 1)
RD_FN(1, 12, 2)
RD_FN(1, 9, 3)
RD_FN(2, 12, 1)
RD_FN(2, 6, 2)
RD_FN(2, 4, 3)
RD_FN(4, 6, 1)
RD_FN(4, 3, 2)
RD_FN(4, 2, 3)

typedef void (*rd_tile_fn)(const struct hp_rfilt *q, const float *x, const float *zero, const struct rd_tab *tab,
			   int nr, const struct rd_seg *seg, int nseg, const float *dyp, float *s, int64_t ls, int chain);

static rd_tile_fn rd_fn(const struct hp_rfilt *q)
{
	static const rd_tile_fn fn[3][3] = { { rd_tile_1_1, rd_tile_1_2, rd_tile_1_3 },
					     { rd_tile_2_1, rd_tile_2_2, rd_tile_2_3 },
					     { rd_tile_4_1, rd_tile_4_2, rd_tile_4_3 } };

	return fn[q->nc == 1 ? 0 : q->nc == 2 ? 1 : 2][q->geo.k[2] - 1];
}
#endif

/* dY of chain positions [g0, g0 + kn) as dyp [position][nc * 16] (0 past
 * cout), 16 x 16 blocks through a transpose at tmp. */
static void rd_pack(const struct rd_run *r, const float *dy, int64_t g0, int64_t kn, float *dyp, float *tmp)
{
	const struct hp_rfilt *q = r->q;
	int64_t L = q->lanes, m16 = q->cout / 16 * 16;

	for (int64_t k0 = 0; k0 < kn;) {
		int64_t item, pos, gq = g0 + k0, run = q->unit - gq % q->unit;
		run = run < kn - k0 ? run : kn - k0;
		rf_pos(q, gq, &item, &pos);
		const float *dyi = dy + item * q->yitem + pos;
		int64_t j16 = run / 16 * 16;
		for (int64_t m = 0; m < m16; m += 16)
			for (int64_t j = 0; j < j16; j += 16) {
				for (int i = 0; i < 16; i++)
					memcpy(tmp + i * 16, dyi + (m + i) * q->svol + j, 16 * sizeof(float));
				rf_tr16(tmp, dyp + (k0 + j) * L + m, L);
			}
		for (int64_t m = 0; m < L; m++) {
			float *d = dyp + k0 * L + m;
			const float *sm = dyi + m * q->svol;
			for (int64_t j = m < m16 ? j16 : 0; j < run; j++)
				d[j * L] = m < q->cout ? sm[j] : 0.0f;
		}
		k0 += run;
	}
}

/* The chunk's row segments, block by block: bseg[b] the first of block b. */
static int rd_segs(const struct hp_rfilt *q, const struct rf_chunk *ch, struct rd_seg *seg, int *bseg)
{
	const struct hp_colgeom *g = &q->geo;
	int nb = ch->nblk ? ch->nblk : 1, nseg = 0;
	int64_t k = 0;

	for (int b = 0; b < nb; b++) {
		int64_t kend = k + (ch->nblk ? ch->blen[b] : ch->kn);
		bseg[b] = nseg;
		while (k < kend) {
			int64_t item, pos, gq = ch->g0 + k, run = q->unit - gq % q->unit;
			rf_pos(q, gq, &item, &pos);
			int64_t w0 = pos % g->grid[2], len = g->grid[2] - w0, row = pos / g->grid[2];
			len = len < run ? len : run;
			len = len < kend - k ? len : kend - k;
			seg[nseg++] = (struct rd_seg){ .xb = item * q->xitem,
						       .zi = row / g->grid[1] * g->stride[0] - g->pad[0],
						       .yi = row % g->grid[1] * g->stride[1] - g->pad[1],
						       .w0 = w0,
						       .len = len,
						       .k = k };
			k += len;
		}
	}
	bseg[nb] = nseg;
	return nb;
}

/* Workers' shares [b, e): tiles of window rows, every chunk of the chain. */
/* Tiles [t0, t1) of group gr (window rows tt / ncg, channel group tt %
 * ncg), every chunk of the chain. */
static void rd_tiles(const struct rd_run *r, int64_t gr, int64_t t0, int64_t t1, float *buf)
{
	const struct hp_rfilt *q = r->q;
	const struct hp_colgeom *g = &q->geo;
	int64_t L = q->lanes, cl = q->nc * 16, kw = g->k[2], total = q->n * q->svol;
	struct rd_seg *seg = (struct rd_seg *)buf;
	float *dyp = buf + (size_t)(2 * q->kc + 2) * (sizeof(struct rd_seg) / sizeof(float));
	float *tmp = dyp + q->kc * L, *zero = tmp + 256;
	const float *x = r->x + gr * q->cin * q->bvol, *dy = r->dy + gr * q->cout * q->svol;
	const float *acc = r->acc ? r->acc + gr * q->cout * q->rows : NULL;
	float *dw = r->dw + gr * q->cout * q->rows, *dwt = r->dwt + gr * q->rows * L;
	struct rf_chunk ch;
	int bseg[RF_KMAX + 1];

	for (int64_t tt = t0; tt < t1; tt++) { /* the sums start from acc (or 0) */
		int64_t j0 = tt / q->ncg * q->rt * kw, m0 = tt % q->ncg * cl;
		int64_t j1 = j0 + q->rt * kw < q->rows ? j0 + q->rt * kw : q->rows;
		for (int64_t j = j0; j < j1; j++)
			for (int64_t m = m0; m < m0 + cl; m++)
				dwt[j * L + m] = acc && m < q->cout ? acc[m * q->rows + j] : 0.0f;
	}
	for (ch.g0 = 0; ch.g0 < total; ch.g0 += ch.kn) {
		ch.kn = total - ch.g0 < q->kc ? total - ch.g0 : q->kc;
		rf_blocks(q, &ch);
		rd_pack(r, dy, ch.g0, ch.kn, dyp, tmp);
		int nb = rd_segs(q, &ch, seg, bseg);
#ifdef RF_X86
		rd_tile_fn fn = rd_fn(q);
		for (int64_t tt = t0; tt < t1; tt++) {
			struct rd_tab tab[RD_RMAX];
			int64_t tr = tt / q->ncg, m0 = tt % q->ncg * cl;
			int nr = (int)(q->trows - tr * q->rt < q->rt ? q->trows - tr * q->rt : q->rt);
			for (int i = 0; i < nr; i++) {
				int64_t j = tr * q->rt + i, kk = j % (g->k[0] * g->k[1]);
				tab[i] = (struct rd_tab){ .coff = j / (g->k[0] * g->k[1]) * q->bvol,
							  .a0 = kk / g->k[1] * g->dil[0],
							  .a1 = kk % g->k[1] * g->dil[1] };
			}
			for (int bi = 0; bi < nb; bi++)
				fn(q, x, zero, tab, nr, seg + bseg[bi], bseg[bi + 1] - bseg[bi], dyp + m0,
				   dwt + tr * q->rt * kw * L + m0, L, !q->blk);
		}
#else
		(void)nb, (void)x;
#endif
	}
	for (int64_t tt = t0; tt < t1; tt++) {
		int64_t j0 = tt / q->ncg * q->rt * kw, m0 = tt % q->ncg * cl;
		int64_t j1 = j0 + q->rt * kw < q->rows ? j0 + q->rt * kw : q->rows;
		int64_t m1 = m0 + cl < q->cout ? m0 + cl : q->cout;
		for (int64_t m = m0; m < m1; m++)
			for (int64_t j = j0; j < j1; j++)
				dw[m * q->rows + j] = dwt[j * L + m];
	}
}

/* Workers' shares [b, e): tiles of every group, group by group. */
static void rd_work(void *arg, int64_t b, int64_t e, int tid)
{
	const struct rd_run *r = arg;
	const struct hp_rfilt *q = r->q;
	int64_t ng = q->ntile * q->ncg, nt = q->group * ng;
	float *buf = r->ws + (size_t)tid * rd_worker_floats(q);
	float *zero = buf + (size_t)(2 * q->kc + 2) * (sizeof(struct rd_seg) / sizeof(float)) + q->kc * q->lanes + 256;

	memset(zero, 0, (size_t)(q->geo.img[2] + 16) * sizeof(float));
	for (int64_t sh = b; sh < e; sh++) {
		int64_t t0 = nt * sh / r->shares, t1 = nt * (sh + 1) / r->shares;
		for (int64_t t = t0; t < t1;) {
			int64_t gr = t / ng, te = (gr + 1) * ng < t1 ? (gr + 1) * ng : t1;
			rd_tiles(r, gr, t - gr * ng, te - gr * ng, buf);
			t = te;
		}
	}
}

static void rd_run(const struct hp_rfilt *q, const float *dy, const float *x, const float *acc, float *dw, float *ws,
		   struct hp_pool *pool)
{
	struct rd_run r = { .q = q, .dy = dy, .x = x, .acc = acc, .dw = dw, .dwt = ws };
	int saved, threads = hp_conv_threads_enter(pool, &saved);

	r.ws = ws + q->group * q->rows * q->lanes;
	threads = threads < q->workers ? threads : q->workers;
	r.shares = threads;
	/* at most a worker per share (tid < threads): its buffers are the tid's */
	hp_conv_parallel(pool, threads, r.shares, rd_work, &r);
	hp_conv_threads_leave(saved);
}

static void rf_run(struct rf_run *r, float *ws, struct hp_pool *pool);

void hp_rfilt_run(const struct hp_rfilt *q, const float *dy, const float *x, const float *acc, float *dw, float *ws,
		  struct hp_pool *pool)
{
	if (q->direct) {
		rd_run(q, dy, x, acc, dw, ws, pool);
		return;
	}
	struct rf_run r = { .q = q, .dy = dy, .x = x, .acc = acc, .dw = dw };

	if (q->n * q->svol == 0) {
		if (acc)
			memcpy(dw, acc, (size_t)(q->cout * q->rows) * sizeof *dw);
		else
			memset(dw, 0, (size_t)(q->cout * q->rows) * sizeof *dw);
	}
	rf_run(&r, ws, pool);
}

/* The pieces' sums fit a worker's packing buffer past its taps: a run
 * packs kc <= q->kc positions of `piece` taps where the whole share's
 * q->tw were planned (rf_run: a share at least as wide takes as many
 * fewer positions). */
static int rf_inside(const struct hp_rfilt *q, int64_t piece)
{
	return piece * (q->kc + q->cout) <= q->kc * q->tw;
}

int64_t hp_rfilt_piece(const struct hp_rfilt *q)
{
	int64_t tw = RF_NV * 16, p = q->kc * q->tw / (q->kc + q->cout) / tw * tw;
	int64_t share = (q->tw + tw - 1) / tw * tw; /* a worker's taps at most: a piece no wider */

	p = p < share ? p : share;
	return p > tw ? p : tw;
}

size_t hp_rfilt_pieces_workspace(const struct hp_rfilt *q, int64_t piece)
{
	if (rf_inside(q, piece))
		return hp_rfilt_workspace(q);
	return hp_rfilt_workspace(q) + (size_t)q->workers * (size_t)(q->cout * piece) * sizeof(float);
}

void hp_rfilt_run_pieces(const struct hp_rfilt *q, const float *dy, const float *x, int64_t piece,
			 hp_rfilt_done_fn done, void *arg, float *ws, struct hp_pool *pool)
{
	struct rf_run r = { .q = q, .dy = dy, .x = x, .piece = piece, .inside = rf_inside(q, piece), .done = done, .arg = arg };

	r.pbuf = ws + hp_rfilt_workspace(q) / sizeof(float);
	if (r.inside)
		r.pbuf = ws + 2 * q->ldt; /* worker 0's packing buffer (no chain: nothing packed) */
	if (q->n * q->svol > 0) {
		rf_run(&r, ws, pool);
		return;
	}
	memset(r.pbuf, 0, (size_t)(q->cout * piece) * sizeof *r.pbuf); /* no chain: zero sums */
	for (int64_t t0 = 0; t0 < q->rows; t0 += piece)
		done(arg, r.pbuf, t0, t0 + piece < q->rows ? t0 + piece : q->rows, piece);
}

/* The packed tiles' run over r's shares (the co-lane tiles: rd_run). */
static void rf_run(struct rf_run *r, float *ws, struct hp_pool *pool)
{
	const struct hp_rfilt *q = r->q;
	int saved, threads = hp_conv_threads_enter(pool, &saved);

	r->cols = (int32_t *)ws;
	r->ws = ws + 2 * q->ldt;

	threads = threads < q->workers ? threads : q->workers;
	/* as many shares as threads run (no share packs dY twice on one
	 * thread): wider shares take chunks as much shorter; neither changes
	 * a bit */
	int64_t ntb = (q->ldt + RF_NV * 16 - 1) / (RF_NV * 16);
	r->shares = threads;
	r->tw = (ntb + threads - 1) / threads * RF_NV * 16;
	r->tw = r->tw < q->ldt ? r->tw : q->ldt;
	r->kc = q->kc * q->tw / r->tw;
	r->kc = r->kc > 1 ? r->kc : 1;
	if (r->kc < q->blk && r->kc < q->n * q->svol) { /* no block fits: the plan's shares, in turn */
		r->shares = q->workers;
		r->tw = q->tw;
		r->kc = q->kc;
	}
	if (r->piece) /* each piece packs its own taps: rows of piece taps */
		r->tw = r->piece;
	rf_cols(q, r->cols);
	/* at most a worker per share (tid < threads): its buffers are the tid's */
	hp_conv_parallel(pool, threads, r->shares, rf_work, r);
	hp_conv_threads_leave(saved);
}
