/* Internal to kernels/: convolution geometry, attribute parsing and the
 * im2col/col2im helpers shared by Conv, ConvTranspose and their backward
 * ops.  Every geometry is normalized to 3 spatial dims (leading dims of
 * size 1), so one code path serves 1-D, 2-D and 3-D.
 *
 * Column layout: a column matrix for `ch` channels over grid positions
 * [j0, j1) is row-major [ch * kvol][j1 - j0]; row (c * kvol + kidx) holds,
 * for each grid position g, the image element at
 *     img_pos[d] = g[d] * stride[d] - pad[d] + k[d] * dil[d]
 * (zero when outside the image).  For Conv the image is X and the grid is
 * Y's spatial shape; for ConvTranspose (and Conv's input gradient) the image
 * is Y (resp. dX) and the grid is X's (resp. dY's) spatial shape.
 */
#ifndef HPDLF_KERNELS_CONV_IMPL_H
#define HPDLF_KERNELS_CONV_IMPL_H

#include <stdint.h>

#include "hpdlf/graph.h"
#include "hpdlf/kernels.h"

struct hp_colgeom {
	int64_t img[3];    /* image spatial dims */
	int64_t grid[3];   /* column grid dims */
	int64_t k[3], stride[3], dil[3], pad[3];
	int64_t kvol;      /* k[0] * k[1] * k[2] */
	int64_t img_vol, grid_vol;
};

void hp_colgeom_finish(struct hp_colgeom *c);

/* col[ch * kvol][j1 - j0] = image patches of grid positions [j0, j1). */
void hp_im2col(const struct hp_colgeom *c, int64_t ch, const float *img, int64_t j0, int64_t j1, float *col);

/* img += scatter of col (same layout as hp_im2col), channels [0, ch). */
void hp_col2im(const struct hp_colgeom *c, int64_t ch, const float *col, int64_t j0, int64_t j1, float *img);

extern const struct hp_op hp_op_conv_transpose; /* conv_transpose.c */

/* Column tiles of a grid (conv_tile.c), fixed by the grid's plane and row
 * shape alone: groups of 2^i whole planes when a plane fits the cap, else
 * groups of 2^i rows of one plane, else runs of 2^i columns of one row;
 * groups start at multiples of their size.  A tile is therefore the same
 * sgemm whatever the thread count, and the same in a band of the grid cut
 * at a multiple of the group on its first dim (OpenBLAS rounds a column by
 * the call's width, so only equal calls give equal bits). */
struct hp_ctile {
	int mode;              /* 0 planes, 1 rows, 2 columns */
	int64_t size;          /* planes, rows or columns per tile (capped) */
	int64_t align;         /* the same before the cap by the extent */
	int64_t per;           /* tiles per (batch, group) item */
	int64_t maxcols;       /* columns of the widest tile */
};

void hp_ctile_plan(const int64_t grid[3], int64_t cap, struct hp_ctile *t);
/* Flat grid positions [*j0, *j1) of tile i (< t->per). */
void hp_ctile_range(const struct hp_ctile *t, const int64_t grid[3], int64_t i, int64_t *j0, int64_t *j1);
/* Rows a band's bounds on grid dim `dim` must be multiples of, or -1. */
int64_t hp_ctile_align(const struct hp_ctile *t, int dim);
/* Largest power of two <= x (1 for x < 1). */
int64_t hp_pow2_floor(int64_t x);

/* Stride-1 convolution over a zero-padded slab (conv_shift.c): an output
 * grid `out` of `m` channels from an image `in` of `ch` channels. */
struct hp_shift {
	int64_t out[3], in[3], pad[3], k[3], dil[3];
	int64_t ext0;          /* (k[0] - 1) * dil[0]: extra slab planes */
	int64_t ph, pw, pplane; /* padded plane */
	int64_t kvol, ch, m;
	int64_t tplanes;       /* whole output planes per tile, or 0: ... */
	int64_t trows;         /* ... output rows of one plane per tile */
	int64_t talign;        /* planes (or rows) per tile before the cap by the
				* extent: tiles start at its multiples */
	int64_t tcols;         /* columns of the widest tile */
	int64_t xcs, xps;      /* image: channel and plane strides (floats) */
	int64_t yps;           /* output: plane stride (channel stride is the callers' ldy) */
	int64_t nfold;         /* batch items folded into planes (hp_shift_fold), else 1 */
};

#define HP_SHIFT_TILE_COLS 1024
/* Fewer input channels per group than this: im2col (K per sgemm too short). */
#define HP_SHIFT_MIN_CH 8

/* 0 if the geometry is stride 1 (else -1). */
int hp_shift_init(struct hp_shift *s, const struct hp_colgeom *g, int64_t ch, int64_t m);
/* A 2-D (or 1-D) geometry: fold `batch` items into the plane axis (item
 * strides x_item and y_item floats), so that tiles of small images span
 * several items and sgemms grow with the batch.  0, or -1 if the geometry
 * has depth. */
int hp_shift_fold(struct hp_shift *s, int64_t batch, int64_t x_item, int64_t y_item);
/* Tiles of at most about `cols` columns (a plane's row at least). */
void hp_shift_retile(struct hp_shift *s, int64_t cols);
/* Folded geometries take the shift path down to this useful fraction. */
#define HP_SHIFT_MIN_USEFUL_FOLDED 0.3
/* Folded geometries: tiles of HP_SHIFT_TILE_COLS / this columns, and slabs
 * of at most HP_SHIFT_FOLDED_SLAB_TILES tiles per worker. */
#define HP_SHIFT_FOLDED_TILE_DIV 8
#define HP_SHIFT_FOLDED_SLAB_TILES 4
/* Slabs hold at most this many output planes (or one tile of planes):
 * a worker's whole share would cost memory, and a chunk's extra halo
 * planes cost little next to its kvol sgemms. */
#define HP_SHIFT_SLAB_PLANES 8
/* Planes of a worker's slab given its share of planes. */
int64_t hp_shift_slab_planes(const struct hp_shift *s, int64_t share);
/* Fraction of a tile's columns that are output positions (the rest is padding). */
double hp_shift_useful(const struct hp_shift *s);
#define HP_SHIFT_MIN_USEFUL 0.7
size_t hp_shift_slab_floats(const struct hp_shift *s, int64_t planes);
int64_t hp_shift_chunk(const struct hp_shift *s, size_t floats, size_t tmp);
/* Slab of the output planes [d0, d1) from image x [ch][in volume]. */
void hp_shift_slab(const struct hp_shift *s, const float *x, int64_t d0, int64_t d1, float *slab);
/* Tiles of a chunk of `planes` output planes; tile t covers output rows
 * (d * out[1] + h) [*r0, *r1); its span of slab columns. */
int64_t hp_shift_ntiles(const struct hp_shift *s, int64_t planes);
void hp_shift_tile_rows(const struct hp_shift *s, int64_t d0, int64_t d1, int64_t t, int64_t *r0, int64_t *r1);
int64_t hp_shift_tile_span(const struct hp_shift *s, int64_t d0, int64_t r0, int64_t r1, int64_t *start);
/* y[m][rows r0..r1) = bias + sum_k wk[k] ([m][ch]) x shifted slab; tmp holds m * tcols. */
void hp_shift_tile(const struct hp_shift *s, const float *wk, const float *slab, int64_t d0, int64_t d1,
		   int64_t r0, int64_t r1, float *tmp, float *y, int64_t ldy, const float *bias);
/* col[ch * kvol][span] = flat im2col of the tile (padding columns included). */
void hp_shift_flat_col(const struct hp_shift *s, const float *slab, int64_t d0, int64_t d1, int64_t r0, int64_t r1,
		       float *col);
/* tmp[m][span] = rows r0..r1 of y [m][ldy] at their slab columns, zeros between. */
void hp_shift_pack_rows(const struct hp_shift *s, const float *y, int64_t ldy, int64_t d0, int64_t r0, int64_t r1,
			float *tmp);
/* Tests and benchmarks only: 0 auto, 1 shift path whenever the geometry
 * allows (stride 1), -1 never; read when a Conv is prepared. */
void hp_conv_set_shift(int mode);
int hp_conv_shift_mode(void);
/* Benchmarks only: tile width target (0 restores the default). */
void hp_shift_set_tile_cols(int64_t c);

/* Depthwise convolution (conv_dw.c): direct loops over a geometry whose
 * image is X and grid Y, cin channels each feeding `mult` output channels
 * (output channel m reads input channel m / mult). */
struct hp_epi;
struct hp_dw {
	struct hp_colgeom g;
	int64_t batch, cin, mult;
	int64_t unit;          /* hp_dw_filter: positions per unit of its sums (0: an item) */
	const struct hp_epi *epi; /* forward: fused epilogue per plane, or NULL */
	const float *addend;
	int64_t xstride;       /* forward: floats from one input plane to the next (0: img_vol) */
	/* forward, with scratch only: {lo, hi} (lo already min(lo, hi)): X's
	 * values are taken as Clip(x) when read, as fma_tile.h's epilogue
	 * computes it, the padding stays 0 (fused_ir.c's expansion); NULL:
	 * as they are */
	const float *xclip;
	/* forward: hp_dw_scratch() floats for the calling thread, for a call
	 * without a pool (NULL: the kernels allocate their own) */
	float *scratch;
	/* forward: W packed by hp_dwkz_pack once (exec/fuse_pack.c), which
	 * hp_dwkz_forward and conv_dwc.c's flat 3x3 blocks read where they
	 * run; NULL: W as it is */
	const float *wpack;
};
/* The input channel of each output channel m0 + l, l < nc (multiplier
 * mult), counted up rather than divided: a 64-bit division a lane had been
 * up to a tenth of a small plane's block. */
static inline void hp_dw_in_channels(int64_t m0, int nc, int64_t mult, int64_t *c)
{
	for (int64_t l = 0, ci = m0 / mult, j = m0 % mult; l < nc; l++) {
		c[l] = ci;
		if (++j == mult)
			j = 0, ci++;
	}
}

/* Floats of hp_dw.scratch for geometry g (3x3 paths). */
size_t hp_dw_scratch(const struct hp_colgeom *g);

/* group == cin > 1 and cout a multiple of cin: the depthwise path. */
int hp_dw_eligible(int64_t group, int64_t cin, int64_t cout);
void hp_dw_forward(const struct hp_dw *d, const float *x, const float *w, const float *b, float *y,
		   struct hp_pool *pool);
/* dX [batch][cin][img] from dY [batch][cin * mult][grid] and W, with
 * hp_dw_data_ws() bytes at ws (NULL: the scatter loops). */
size_t hp_dw_data_ws(const struct hp_dw *d);
void hp_dw_data(const struct hp_dw *d, const float *dy, const float *w, float *dx, float *ws, struct hp_pool *pool);
/* dW [cin * mult][kvol] = acc (NULL: 0) + the units of dY and X from the
 * last to the first, each unit summed on its own (the order ConvGradFilter
 * keeps for bands, conv_grad.c), with hp_dw_filter_ws() bytes at ws. */
size_t hp_dw_filter_ws(const struct hp_dw *d);
void hp_dw_filter(const struct hp_dw *d, const float *dy, const float *x, const float *acc, float *dw, float *ws,
		  struct hp_pool *pool);

/* Depthwise 3x3, 2-D, stride 1 or 2, undilated (conv_dw3.c, AVX2 + FMA):
 * one output plane y = bias + the taps of input plane x under w (9 floats),
 * each output one chain of fused multiply-adds in (kh, kw) order, with
 * hp_dw3_scratch() bytes at scratch; clip: hp_dw.xclip or NULL. */
int hp_dw3_eligible(const struct hp_colgeom *g);
size_t hp_dw3_scratch(const struct hp_colgeom *g);
/* Once per scratch buffer, before its planes. */
void hp_dw3_init(const struct hp_colgeom *g, float *scratch);
void hp_dw3_plane(const struct hp_colgeom *g, const float *x, const float *w, float bias, float *y, float *scratch,
		  const float *clip);
/* dX plane of one channel (multiplier 1) at stride 2 from its dY plane:
 * each element one chain of fused multiply-adds from 0 over its taps in
 * (kh, kw) order (conv_dwc.c's hp_dwc_data's chain). */
int hp_dw3_data_eligible(const struct hp_colgeom *g);
void hp_dw3_data_plane(const struct hp_colgeom *g, const float *dy, const float *w, float *dx);
/* Output planes [i0, i1) (flat (item, output channel)) of hp_dw_forward
 * by the plane kernels, on the calling thread. */
void hp_dw_planes(const struct hp_dw *d, const float *x, const float *w, const float *b, float *y, int64_t i0,
		  int64_t i1);

/* The same 3x3 geometries with eight output channels per register pass
 * (conv_dwc.c; sixteen with AVX-512 on planes it transposes whole, up to
 * 28x28 at stride 2): hp_dw3_plane's chains, so the same bits, over planes
 * of at most 4096 outputs; hp_dw_forward takes it where wanted (stride 2,
 * narrow planes, the whole-plane ones). */
int hp_dwc_eligible(const struct hp_colgeom *g);
int hp_dwc_wanted(const struct hp_colgeom *g, int clip); /* clip: hp_dw.xclip set */
size_t hp_dwc_scratch(const struct hp_colgeom *g); /* floats */
void hp_dwc_forward(const struct hp_dw *d, const float *x, const float *w, const float *b, float *y,
		    struct hp_pool *pool);
/* Whether hp_dw_forward runs g by the flat sixteen-channel kernel
 * (AVX-512, no xclip), which reads hp_dw.wpack (hp_dwkz_pack's layout,
 * kvol 9) for its weights where set, instead of gathering them per block. */
int hp_dwz_packs(const struct hp_colgeom *g);
/* Tests and benchmarks only: 0 auto, 1 whenever eligible, -1 never. */
void hp_dwc_set_mode(int mode);
/* Tests and benchmarks only: 1, the eight-channel blocks even where the
 * CPU has AVX-512 (the same bits); 0, the default. */
void hp_dwc_set_avx2(int on);
/* Depthwise 3x3 and 5x5 forward at stride 2, undilated, 2-D, on planes
 * of at most 16 output rows of at most 16 - (K - 1) / 2 columns
 * (conv_dws.c, AVX-512F): lanes along output positions, each output the
 * chain bias + taps in (kh, kw) order of fused multiply-adds, taps in the
 * padding as w * 0 (conv_dw3.c's, conv_dwc.c's and conv_dwk.c's chain, so
 * their bits); reads hp_dw.xclip, needs no scratch, runs hp_dw.epi per
 * plane.  hp_dw_forward takes it where hp_dws_wanted. */
int hp_dws_eligible(const struct hp_colgeom *g);
int hp_dws_wanted(const struct hp_colgeom *g);
void hp_dws_forward(const struct hp_dw *d, const float *x, const float *w, const float *b, float *y,
		    struct hp_pool *pool);
/* Tests and benchmarks only: 0 auto (3x3), 1 whenever eligible, -1 never. */
void hp_dws_set_mode(int mode);
/* The stride-2 dX of a 3x3 window (multiplier 1, pads >= 0) on narrow
 * planes (conv_dws.c, AVX-512F): each element the chain from 0 over its
 * taps in (kh, kw) order (conv_dw3.c's and conv_dwc.c's), no workspace.
 * hp_dw_data takes it where hp_dws_data_wanted (mode as above). */
int hp_dws_data_eligible(const struct hp_dw *d);
int hp_dws_data_wanted(const struct hp_dw *d);
void hp_dws_data(const struct hp_dw *d, const float *dy, const float *w, float *dx, struct hp_pool *pool);
/* Depthwise KxK forward (conv_dwk.c, AVX2 + FMA): 2-D, K = 3, 5 or 7
 * square, stride 1 or 2, any dilation, but not conv_dw3.c's undilated 3x3;
 * eight output channels per register pass, each output the chain bias +
 * taps in (kh, kw) order of fused multiply-adds, taps in the padding as
 * w * 0.  hp_dw_forward takes it for every such geometry (without xclip
 * or scratch); hp_dwk_forward returns -1 only when out of memory. */
int hp_dwk_eligible(const struct hp_colgeom *g);
int hp_dwk_forward(const struct hp_dw *d, const float *x, const float *w, const float *b, float *y,
		   struct hp_pool *pool);
/* Tests and benchmarks only: 0 auto, -1 never (conv_dw.c's generic rows). */
void hp_dwk_set_mode(int mode);
/* conv_dwk.c's geometries at small planes (at most 256 outputs, 400
 * padded input positions) with sixteen channels in zmm lanes (conv_dwkz.c,
 * AVX-512F and FMA): conv_dwk.c's chains, so its bits; hp_dwk_forward
 * takes it where hp_dwkz_on.  Its weights are [ceil(cout / 16)][kvol][16]
 * (hp_dwkz_pack, zeros past cout; hp_dwkz_packed_floats() of them), wp,
 * or W as it is (wp NULL), packed per block.  -1: not taken. */
int hp_dwkz_on(const struct hp_colgeom *g);
int64_t hp_dwkz_packed_floats(int64_t cout, int64_t kvol);
void hp_dwkz_pack(const float *w, int64_t cout, int64_t kvol, float *dst);
int hp_dwkz_forward(const struct hp_dw *d, const float *x, const float *w, const float *wp, const float *b, float *y,
		    struct hp_pool *pool);
/* Tests and benchmarks only: 0 auto, -1 never (conv_dwk.c's blocks). */
void hp_dwkz_set_mode(int mode);
/* The block's nc planes xs[l] (X as it is, or Clip(X) with clip {lo, hi})
 * into the padded plane xp[hp][wp][16] at the pads' offsets (conv_dwc.c,
 * AVX-512F; the padding's zeros are the caller's). */
void hp_dwz_fill(const struct hp_colgeom *g, const float *const *xs, int nc, const float *clip, float *xp,
		 int64_t hp, int64_t wp);
/* Depthwise 3x3 at stride 1 (2-D, undilated) with output rows as wide as
 * the input's, sixteen positions of a channel's flattened plane in the zmm
 * lanes, taps loaded from X in place with the lanes outside the image
 * zeroed (conv_dwf.c, AVX-512F and FMA): conv_dw3.c's chains, so its bits,
 * without transposes.  hp_dw_forward takes it where wanted (rows of 7 to
 * 22; no xclip or scratch), and so does the stride-1 dX flip.  -1: not
 * taken (or out of memory). */
int hp_dwf_eligible(const struct hp_colgeom *g);
int hp_dwf_wanted(const struct hp_colgeom *g);
int hp_dwf_forward(const struct hp_dw *d, const float *x, const float *w, const float *b, float *y,
		   struct hp_pool *pool);
/* Tests and benchmarks only: 0 auto, 1 whenever eligible, -1 never. */
void hp_dwf_set_mode(int mode);
/* The stride-1 dX of d as a forward of dY with the kernel mirrored (conv_dw.c). */
void hp_dw_flip(const struct hp_dw *d, struct hp_dw *f);
/* A stride-1 dX of such a window (multiplier 1) as hp_dwk_forward's
 * geometry f (dY the image, W mirrored); 0 where it does not apply. */
int hp_dwk_data_flip(const struct hp_dw *d, struct hp_dw *f);
/* dW of those geometries (any plane size) with eight channels in the
 * lanes: hp_dw_filter's units and their order, each unit per channel the
 * sum over its rows in order of each row's chain of fused multiply-adds
 * from 0; hp_dwc_filter_scratch() floats per thread at ws (threads of
 * them).  Not eligible without AVX2 and FMA. */
/* dX of multiplier-1 geometries at stride 2, eight channels in the lanes:
 * each element one chain of fused multiply-adds from 0 over its taps in
 * (kh, kw) order; hp_dwc_data_scratch() floats per thread at ws. */
int hp_dwc_data_eligible(const struct hp_dw *d);
size_t hp_dwc_data_scratch(const struct hp_colgeom *g); /* floats */
/* Whether hp_dwc_data takes d by its flat sixteen-channel planes (small
 * planes, AVX-512), which then beat conv_dw3.c's dX rows. */
int hp_dwc_data_flat(const struct hp_dw *d);
void hp_dwc_data(const struct hp_dw *d, const float *dy, const float *w, float *dx, float *ws, int threads,
		 struct hp_pool *pool);
int hp_dwc_filter_eligible(const struct hp_colgeom *g);
size_t hp_dwc_filter_scratch(const struct hp_colgeom *g); /* floats */
void hp_dwc_filter(const struct hp_dw *d, const float *dy, const float *x, const float *acc, float *dw, float *ws,
		   int threads, struct hp_pool *pool);
/* The same dW with sixteen channels in zmm lanes (conv_dw_grad.c,
 * AVX-512F and FMA): hp_dwc_filter's chains bit for bit, which it takes
 * where available; hp_dwg_scratch() floats per thread. */
int hp_dwg_available(const struct hp_colgeom *g);
size_t hp_dwg_scratch(const struct hp_colgeom *g); /* floats */
void hp_dwg_filter(const struct hp_dw *d, const float *dy, const float *x, const float *acc, float *dw, float *ws,
		   int threads, struct hp_pool *pool);
/* dW of 2-D depthwise 5x5 and 7x7 windows, stride 1 or 2, undilated, with
 * sixteen channels in zmm lanes (conv_dwk_grad.c, AVX-512F and FMA):
 * hp_dw_filter's units and their order, each unit per channel the sum
 * over its rows in order of each row's chain of fused multiply-adds from
 * 0 (conv_dwc.c's chain); hp_dkg_scratch() floats per thread at ws (0 for
 * other geometries, whatever the CPU).  hp_dw_filter takes it wherever
 * eligible. */
int hp_dkg_eligible(const struct hp_colgeom *g);
size_t hp_dkg_scratch(const struct hp_colgeom *g); /* floats */
void hp_dkg_filter(const struct hp_dw *d, const float *dy, const float *x, const float *acc, float *dw, float *ws,
		   int threads, struct hp_pool *pool);
/* Tests and benchmarks only: 0 auto, -1 never (conv_dw.c's generic loops). */
void hp_dkg_set_mode(int mode);
/* dX of those windows at stride 2, multiplier 1 (conv_dwk_grad.c, the
 * same lanes): each element one chain of fused multiply-adds from 0 over
 * its taps in (kh, kw) order whose dY position is whole, dY outside the
 * grid as 0 (conv_dwc.c's 3x3 chain); hp_dkd_scratch() floats per thread
 * at ws (0 for other geometries, whatever the CPU). */
int hp_dkd_eligible(const struct hp_dw *d);
size_t hp_dkd_scratch(const struct hp_colgeom *g); /* floats */
void hp_dkd_data(const struct hp_dw *d, const float *dy, const float *w, float *dx, float *ws, int threads,
		 struct hp_pool *pool);
/* dW of 2-D depthwise 3x3 and 5x5 windows, stride 1 or 2, undilated,
 * grid rows of 24 or more (with units of one row 48, 28 for 3x3 at
 * stride 2), with sixteen
 * positions of a row in
 * zmm lanes (conv_dwp_grad.c, AVX-512F and FMA): hp_dw_filter's units and
 * their order, each unit's sum per channel and tap sixteen lane chains
 * over its rows' positions and a fixed tree (not conv_dwc.c's chain);
 * hp_dwp_scratch() floats per thread at ws (0 for other geometries,
 * whatever the CPU).  hp_dw_filter takes it wherever eligible. */
int hp_dwp_eligible(const struct hp_dw *d);
size_t hp_dwp_scratch(const struct hp_colgeom *g); /* floats */
void hp_dwp_filter(const struct hp_dw *d, const float *dy, const float *x, const float *acc, float *dw, float *ws,
		   int threads, struct hp_pool *pool);
/* Tests and benchmarks only: 0 auto, -1 never (the channel-lane kernels). */
void hp_dwp_set_mode(int mode);
/* Tests only: 1, conv_dwc.c's eight-channel tiles even where the CPU has
 * AVX-512 (the same bits); 0, the default. */
void hp_dwg_set_avx2(int on);

/* Parsed Conv / ConvTranspose node, kept in n->priv. */
struct hp_conv {
	int nd;                /* spatial dims of the ONNX tensors (1..3) */
	int transpose;
	int64_t batch, cin, cout, group;
	int64_t cin_g, cout_g; /* per group */
	int64_t xvol, yvol;    /* spatial volume of X and Y */
	int has_bias;
	int direct;            /* Conv 1x1, stride 1, no pad: X is the column matrix */
	int shift;             /* stride-1 Conv over padded slabs (struct hp_shift) */
	struct hp_shift sh;
	int blocked;           /* ConvTranspose, kernel == stride, no pad: blocks tile Y */
	int wflip;             /* shift, grouped and kxk: W is [cin][cout_g][k], used transposed and mirrored */
	size_t workspace;      /* bytes (hp_conv_setup) */
	struct hp_colgeom g;
	int64_t ws_cols;       /* column-buffer capacity, in columns of kdim floats */
	int64_t kdim;          /* rows of the column matrix (cin_g or cout_g) * kvol */
	int path;              /* attribute hpdlf_path of a band (HP_CONV_PATH_*), else -1 */
	int lean;              /* attribute hpdlf_lean: workspace for one worker */
	int narrow;            /* attribute hpdlf_narrow: with lean, the KxK path's
				* blocks may be narrower (conv_kxk.c kx_block_cols) */
	struct hp_ctile ct;    /* im2col and direct tiles; ConvTranspose: of X's grid */
	int dw;                /* depthwise path (conv_dw.c) */
	int dot;               /* dot-product path (conv_dot.c) */
	int kxk;               /* register-tiled KxK path (conv_kxk.c) */
	int grp;               /* grouped path, few channels per group (conv_grp.c) */
	int node;              /* parsed from a Conv or ConvTranspose node (hp_conv_parse),
				* not a gradient's forward (conv_grad.c) */
	const int32_t *wtap;   /* kxk with wflip, or NULL: W's windows hold wkvol taps and
				* W'[m][c][t] = W[c][m][wtap[t]] (a strided dX's phase,
				* conv_grad_phase.c); NULL: wkvol = kvol, wtap[t] = kvol - 1 - t */
	int64_t wkvol;
};

/* Conv paths, as band copies of a node pin them (attribute hpdlf_path). */
enum { HP_CONV_PATH_IM2COL = 0, HP_CONV_PATH_SHIFT = 1, HP_CONV_PATH_DIRECT = 2, HP_CONV_PATH_DW = 3,
       HP_CONV_PATH_DOT = 4, HP_CONV_PATH_KXK = 5, HP_CONV_PATH_GRP = 6 };

/* Parse attributes and shapes of a Conv (transpose 0) or ConvTranspose node,
 * set the output shape; errors name the node. */
int hp_conv_parse(struct hp_graph *g, struct hp_node *n, int transpose, struct hp_conv *cv);

/* Choose the path (direct, shift, im2col) and the workspace of a Conv. */
void hp_conv_setup(struct hp_conv *cv);
/* The path chosen (HP_CONV_PATH_*), and the multiple of output rows on ONNX
 * axis `axis` (0: batch, 2: first spatial) that bands of the node must start
 * at to compute what it computes whole, bit for bit (-1: none can). */
int hp_conv_path(const struct hp_conv *cv);
int64_t hp_conv_band_align(const struct hp_conv *cv, int axis);
int64_t hp_convt_band_align(const struct hp_conv *cv, int axis);
/* hp_convt_band_align where the node runs convt_fma.c's chains (every
 * output one chain over the input channels wherever a band starts): a band
 * may start at any input row, i.e. at multiples of the kernel on the
 * outer axes. */
int64_t hp_convt_fma_band_align(const struct hp_conv *cv, int axis);
/* Columns per tile of the direct (1x1) path, and at most per im2col or
 * ConvTranspose tile: wider sgemms gain little, and tiles of many small
 * planes would leave a band pass few places to cut. */
#define HP_CONV_DIRECT_COLS 1024
#define HP_CONV_TILE_MAX_COLS 1024
/* Y = Conv(X, W) + B (b may be NULL) with cv->workspace bytes at ws. */
void hp_conv_forward(const struct hp_conv *cv, const float *x, const float *w, const float *b, float *y, float *ws,
		     struct hp_pool *pool);

/* The same, then the fused epilogue y = act(y + addend) (fused_impl.h;
 * epi NULL: none): inside the dot path's output blocks, else after. */
struct hp_epi;
void hp_conv_forward_epi(const struct hp_conv *cv, const float *x, const float *w, const float *b, float *y,
			 float *ws, struct hp_pool *pool, const struct hp_epi *epi, const float *addend);
/* The same from W packed once for the node's path (exec/fuse_pack.c:
 * hp_grp_pack, or hp_pwt_pack where hp_conv_pwt_packs: conv_pwt.c's
 * nodes, and stride-2 1x1s without pads at tiny planes, run by conv_pwt.c
 * over X subsampled); 0, having done nothing, where its path takes no
 * packed W. */
int hp_conv_pwt_packs(const struct hp_conv *cv);
/* A depthwise node conv_dwkz.c or conv_dwc.c's flat 3x3 kernel runs
 * (hp_dw_packs: AVX-512, small planes)
 * from W packed once by hp_dwkz_pack (wp; W beside it, which the other
 * depthwise paths read); 0 where cv is not depthwise. */
int hp_dw_packs(const struct hp_conv *cv);
int hp_dw_forward_packed(const struct hp_conv *cv, const float *x, const float *w, const float *wp, const float *b,
			 float *y, struct hp_pool *pool, const struct hp_epi *epi, const float *addend);
int hp_conv_forward_packed(const struct hp_conv *cv, const float *x, const float *wt, const float *b, float *y,
			   float *ws, struct hp_pool *pool, const struct hp_epi *epi, const float *addend);
/* Whether an unpacked forward of cv runs as a stride-1 1x1 on conv_pw.c
 * over X subsampled into the workspace (a 1x1 of stride 2 or more without
 * pads on the kxk path, where its workspace holds an item's subsample and
 * a thread's panel; each output the kxk path's chain, so the same bits). */
int hp_conv_pw_strided(const struct hp_conv *cv);

/* Dot-product path (conv_dot.c): Conv (not transposed, W in its ONNX
 * layout) over patch rows of all batch items, every output summed in an
 * order fixed by the kernel volume alone.  Needs AVX2 and FMA. */
int hp_dot_available(void);
/* Patch row length: cin_g * kvol rounded up to 8. */
int64_t hp_dot_k8(const struct hp_conv *cv);
/* Workspace for `threads` workers: patch rows plus partial sums. */
size_t hp_dot_workspace(const struct hp_conv *cv, int threads);
void hp_dot_forward(const struct hp_conv *cv, const float *x, const float *w, const float *b, float *y, float *ws,
		    struct hp_pool *pool, const struct hp_epi *epi, const float *addend);
/* Output channels and columns per block of work (MB a multiple of 3, NB of 4). */
#define HP_DOT_MB 48
#define HP_DOT_NB 16
/* The auto choice's bounds: output positions over the batch, and bytes of
 * workspace. */
#define HP_DOT_MAX_COLS 64
#define HP_DOT_WS_MAX ((size_t)4 << 20)
/* Tests and benchmarks only: 0 auto, 1 dot path whenever possible, -1
 * never; read when a Conv is prepared. */
void hp_conv_set_dot(int mode);
int hp_conv_dot_mode(void);

/* Pointwise path (conv_pw.c): the direct (1x1) Conv as register-blocked
 * chains of fused multiply-adds, each output summed over k in order from
 * its bias, whatever the blocking, threads or bands.  Needs AVX2 and FMA
 * (else the direct path runs on sgemm); workspace for `threads` workers. */
int hp_pw_available(void);
size_t hp_pw_workspace(const struct hp_conv *cv, int threads);
/* A wflip node (a 1x1 ConvGradData's: W [K][M] read transposed, no bias
 * nor epilogue) runs where this is 1 (AVX-512), in at least
 * hp_pw_workspace_min bytes (one worker, short k chunks). */
int hp_pw_flip_available(void);
size_t hp_pw_workspace_min(const struct hp_conv *cv);
void hp_pw_forward(const struct hp_conv *cv, const float *x, const float *w, const float *b, float *y, float *ws,
		   struct hp_pool *pool, const struct hp_epi *epi, const float *addend);
/* One thread: y[M][N] (ldy) = bias (NULL: 0) + w[M][K] (lda) x b[K][N]
 * (ldb) by the same chains; the im2col path's product where K is at most
 * HP_PW_GEMM_MAX_K (OpenBLAS packs as long as it multiplies there). */
void hp_pw_gemm(int64_t M, int64_t N, int64_t K, const float *w, int64_t lda, const float *b, int64_t ldb,
		const float *bias, float *y, int64_t ldy);
/* hp_pw_gemm, then epi (Relu or Clip after an optional full addend, add
 * in y's layout) on each tile in registers as fused_epi.c computes it:
 * 1; 0, computing nothing, for other epilogues. */
int hp_pw_gemm_epi(int64_t M, int64_t N, int64_t K, const float *w, int64_t lda, const float *b, int64_t ldb,
		   const float *bias, float *y, int64_t ldy, const struct hp_epi *epi, const float *add);
#define HP_PW_GEMM_MAX_K 256
/* A per-input-channel prologue applied to X as the pointwise path packs
 * it (exec/fuse_pro.c: an inference BatchNormalization, and the Relu
 * after it, in front of a 1x1 Conv): x' = (x - mean[k]) * scale[k] +
 * shift[k], then x' < 0 ? 0 : x' with relu, each step rounded as
 * kernels/norm.c's and the Relu kernel's are, so the product reads the
 * bits those nodes would have written. */
struct hp_pw_pro {
	const float *mean, *scale, *shift;
	int relu;
};
/* Whether hp_pw_forward runs cv on its packing tiles (not conv_pwt.c's,
 * not wflip, ungrouped), so that hp_pw_forward_pro applies. */
int hp_pw_pro_ok(const struct hp_conv *cv);
/* hp_pw_forward of pro(X): each output the chain hp_pw_forward computes
 * on the prologue's values (X packed, never read in place). */
void hp_pw_forward_pro(const struct hp_conv *cv, const float *x, const float *w, const float *b, float *y, float *ws,
		       struct hp_pool *pool, const struct hp_epi *epi, const float *addend,
		       const struct hp_pw_pro *pro);
/* Tests and benchmarks only: 1, the AVX2 micro-tiles even where the CPU
 * has AVX-512 (the same bits: each output the same chain); 0, the
 * default. */
void hp_pw_set_avx2(int on);
/* Whether conv_pw.c runs its AVX-512 tiles (the CPU has them, not forced
 * off by hp_pw_set_avx2). */
int hp_pw_512(void);

/* conv_pw.c's nodes at tiny planes (conv_pwt.c): vectors over 16 output
 * channels, each position (or item, for planes of one position) a
 * broadcast; every output conv_pw.c's chain, so the same bits.  Wanted
 * (AVX-512, a plane below 16 positions, and unless wflip W^T's panel of
 * K x 16 in a worker's per_thread floats of conv_pw.c's workspace; a
 * wflip node, ConvGradData's, reads W [K][M]'s rows in place as its
 * panels and needs no workspace): 1. */
int hp_pwt_wanted(const struct hp_conv *cv, int64_t per_thread);
void hp_pwt_forward(const struct hp_conv *cv, const float *x, const float *w, const float *b, float *y, float *ws,
		    int64_t per_thread, struct hp_pool *pool, const struct hp_epi *epi, const float *addend);
/* Whether a Conv's forward (ungrouped, conv_pw.c's) runs on those tiles
 * from W [M][K] packed once (exec/fuse_pack.c, inference in core) by
 * hp_pwt_pack into hp_pwt_packed_floats(M, K) floats: the tiles' panels,
 * [K][32] per unit of 32 channels (the last [K][16] where 16 or fewer),
 * zeros past M; and that run, the bits of the others: 0 where it does
 * not apply (the caller runs the node as usual). */
int hp_pwt_packs(const struct hp_conv *cv);
int64_t hp_pwt_packed_floats(int64_t m, int64_t k);
void hp_pwt_pack(const float *w, int64_t m, int64_t k, float *dst);
int hp_pwt_forward_packed(const struct hp_conv *cv, const float *x, const float *wt, const float *b, float *y,
			  struct hp_pool *pool, const struct hp_epi *epi, const float *addend);
/* Tests and benchmarks only: 0 auto, 1 wherever it can run (any plane),
 * -1 never; read when a node runs. */
void hp_pwt_set_mode(int mode);

/* KxK path (conv_kxk.c): Conv (not transposed, W in its ONNX layout, read
 * in place) as 6x16 register tiles over output channels x columns, the
 * patches of each block of columns gathered from X per k chunk; each
 * output one chain of fused multiply-adds over k = (c, kd, kh, kw) in
 * order from its bias, whatever the blocking, threads or bands.  Needs
 * AVX2 and FMA; with AVX-512, two full panels side by side are one 6x32
 * tile in zmm registers (the same chains, the same bits); workspace for
 * `threads` workers. */
int hp_kxk_available(void);
int hp_kxk_eligible(const struct hp_conv *cv);
/* A stride-1 Conv with wflip (ConvGradData's, conv_grad.c) the KxK path
 * can run, over W' packed per call at the front of its workspace: needs
 * the AVX-512 tiles (hp_kxk_wide_ok). */
int hp_kxk_flip_eligible(const struct hp_conv *cv);
size_t hp_kxk_workspace(const struct hp_conv *cv, int threads);
/* The largest workspace over the batches of cv's geometry: the same for
 * a node and every band of its items (the workspace itself reads the
 * batch: blocks spanning items, W' packed per micro-tile where one block
 * takes all columns). */
size_t hp_kxk_workspace_most(const struct hp_conv *cv, int threads);
void hp_kxk_forward(const struct hp_conv *cv, const float *x, const float *w, const float *b, float *y, float *ws,
		    struct hp_pool *pool, const struct hp_epi *epi, const float *addend);
/* Tests and benchmarks only: 0 auto, 1 kxk path whenever possible, -1
 * never; read when a Conv is prepared. */
void hp_conv_set_kxk(int mode);
/* The auto choice takes it from this many channels per group, in and out. */
#define HP_KXK_MIN_CH 8
int hp_conv_kxk_mode(void);
/* Tests and benchmarks only: 0 auto, 1 a 1x1 stride-1 ConvGradData on
 * conv_pw.c's tiles (W read transposed: hp_conv.wflip) wherever it can
 * run, -1 never; read when the node is prepared (conv_grad.c). */
void hp_cgd_set_pw(int mode);
/* Tests and benchmarks only: whether the KxK path reads blocks of whole
 * output-row runs straight from the image (conv_kxk_run.c; the default)
 * or packs them as other blocks; the same bits either way. */
void hp_kxk_set_run(int on);
/* Tests and benchmarks only: whether row-run blocks take AVX-512 tiles of
 * two panels where the CPU has AVX-512 (the default) or AVX2 tiles of
 * one; the same bits either way. */
void hp_kxk_set_wide(int on);
/* Whether the KxK path's AVX-512 tiles run (the CPU has AVX-512 and
 * hp_kxk_set_wide has not turned them off). */
int hp_kxk_wide_ok(void);

/* Grouped path (conv_grp.c): 2-D Conv nodes with groups of 2-32 channels
 * in and out (not depthwise) or one group of 1-4 input channels (stems),
 * where AVX2 and FMA exist: staged, phase-split input rows and 4x24
 * register tiles; each output one chain over k = (c, kh, kw) in order from its bias, whatever
 * the row blocks, threads or bands.  Workspace for `threads` workers. */
int hp_grp_eligible(const struct hp_conv *cv);
int hp_grp_wanted(const struct hp_conv *cv);
size_t hp_grp_workspace(const struct hp_conv *cv, int threads);
void hp_grp_forward(const struct hp_conv *cv, const float *x, const float *w, const float *b, float *y, float *ws,
		    struct hp_pool *pool, const struct hp_epi *epi, const float *addend);
/* Inference in core (exec/fuse_pack.c): where the node runs on the
 * co-lane forward tiles (hp_grp_packs: grouped nodes at tiny planes, and
 * hp_grp_dense's), W [cout][cin_g * kvol] packed once by hp_grp_pack into
 * each unit's W^T in turn, [cin_g * kvol][channels of a unit] (a group's
 * where group > 1, else 32 or 16; cout * cin_g * kvol floats in all);
 * hp_grp_forward_packed runs from it (the same bits) and returns 1, or
 * returns 0 where the node does not take those tiles. */
int hp_grp_packs(const struct hp_conv *cv);
/* Whether a kxk node of one group is one hp_grp_packs takes (a tiny plane):
 * its workspace then holds hp_grp_workspace's. */
int hp_grp_dense(const struct hp_conv *cv);
/* Whether such a node runs on those tiles without W packed once too
 * (hp_grp_forward packs each unit's W^T as it goes; the same bits). */
int hp_grp_dense_unpacked(const struct hp_conv *cv);
/* ConvGradData's stride-1 dX of one group, planned on the KxK path
 * (conv_grad.c), whose geometry those tiles take (3x3 windows and smaller,
 * planes as hp_grp_dense's): hp_grp_forward then runs it from W flipped
 * per call into W^T (hp_grp_workspace's bytes), the KxK path's chains.
 * _runs: and at this batch, in the workspace it was given. */
int hp_grp_dense_flip(const struct hp_conv *cv);
int hp_grp_dense_flip_runs(const struct hp_conv *cv);
/* Tests and benchmarks: 1, hp_grp_dense_flip's dX at any batch; -1,
 * never (the KxK path's tiles; the same bits); 0 auto. */
void hp_grp_set_dflip(int mode);
int hp_grp_dflip_mode(void);
/* Tests: how many dX have run on those tiles in this process. */
long hp_grp_dflip_count(void);
void hp_grp_pack(const float *w, int64_t group, int64_t mg, int64_t kdim, float *dst);
int hp_grp_forward_packed(const struct hp_conv *cv, const float *x, const float *wt, const float *b, float *y,
			  float *ws, struct hp_pool *pool, const struct hp_epi *epi, const float *addend);
/* Tests and benchmarks only: 0 auto, 1 whenever eligible, -1 never; read
 * when a Conv is prepared (and by ConvGradFilter's grouped path: -1 keeps
 * it on the sgemm path). */
void hp_conv_set_grp(int mode);
int hp_conv_grp_mode(void);

/* ConvGradFilter of a 2-D convolution of 2-32 channels per group, in and
 * out (conv_grad_grp.c), where AVX2 and FMA exist: 4x4 register tiles of
 * 8 or 16 lanes over staged input rows, each element's lanes added in one fixed
 * tree per unit (a batch item, or a row with a batch of one), the units
 * from the last to the first into dW, from acc (the bands after it) or 0. */
struct hp_gfilt {
	struct hp_colgeom geo; /* img: X's side (cin), grid: dY's side (cout) */
	int64_t n, cin, cout, group, cg, mg;
	int64_t bvol, svol, rows; /* rows: cg * kvol, dW's row length */
	int64_t unit, chunk;      /* positions per unit, output rows per staged block */
	int lanes;                /* 16 for units of several rows, 8 for rows */
	int threads;
	/* the co-lane tiles (conv_grad_grp.c, hp_gfilt_colane): lanes over 16
	 * input channels (a slab: 16 / cg groups, or 16 of one group's) */
	int cl;
	int64_t slabs, sg, blk, pw; /* slabs, groups per slab, block (0: one chain), staged row */
};
/* 1 and q planned if the path takes the geometry (unit: positions per
 * unit, a divisor of the plane), else 0. */
int hp_gfilt_plan(struct hp_gfilt *q, const struct hp_colgeom *geo, int64_t n, int64_t cin, int64_t cout,
		  int64_t group, int64_t unit, int threads);
size_t hp_gfilt_workspace(const struct hp_gfilt *q);
/* Tests only: 1, the AVX2 tiles even where the CPU has AVX-512 (the same
 * bits); 0, the default. */
void hp_gfilt_set_avx2(int on);
/* The co-lane tiles where they apply (2-D groups of cg input channels,
 * 16 % cg == 0 with 16 / cg groups' output channels at most 16, or cg a
 * multiple of 16; AVX-512F): 1 and q planned, else 0.  Their sums are
 * conv_grad_reg.c's order (units from the last, positions in order, one
 * chain for units shorter than 16, else blocks of 64 added to the sum).
 * Their chunks of rows shrink to fit ws_max bytes (0: no limit) where a
 * chunk of one row does (which changes no bit). */
int hp_gfilt_colane(struct hp_gfilt *q, const struct hp_colgeom *geo, int64_t n, int64_t cin, int64_t cout,
		    int64_t group, int64_t unit, int threads, size_t ws_max);
/* Tests and benchmarks: 1 forces the co-lane tiles where they apply, -1
 * forbids them, 0 (default) lets them run where they apply. */
void hp_gfilt_set_colane(int mode);
void hp_gfilt_run(const struct hp_gfilt *q, const float *dy, const float *x, const float *acc, float *dw, float *ws,
		  struct hp_pool *pool);
/* Tests and benchmarks only: 1, the grouped path's AVX2 tiles even where
 * the CPU has AVX-512 (the same bits); 0, the default. */
void hp_grp_set_avx2(int on);
/* Tests only: -1 runs ConvGradData's 7-column planes on the column tiles
 * (conv_grp.c's co-lane tiles off; the same bits), 0 auto. */
void hp_grp_set_colane(int mode);
/* Tests: 1, conv_grp.c's co-lane forward tiles on every plane they take
 * (not only tiny ones); -1, never (the column tiles; the same bits). */
void hp_grp_set_cofwd(int mode);
/* Tests and benchmarks: -1, the packed 3x3 tiles that skip the padding's
 * products off (conv_grp.c's gr_cs_block; the same bits). */
void hp_grp_set_skip(int mode);

/* The same for ConvTranspose (transpose 1); X [batch][cin][xvol]. */
void hp_convt_setup(struct hp_conv *cv);
int hp_convt_blocked(const struct hp_colgeom *g);
void hp_convt_forward(const struct hp_conv *cv, const float *x, const float *w, const float *b, float *y, float *ws,
		      struct hp_pool *pool);

/* ConvTranspose nodes (not the gradients' forwards) with kernel == stride,
 * no pad, two wide along the rows, where AVX2 and FMA exist
 * (convt_fma.c): each output one chain over the input channels from its
 * bias; workspace for `threads` workers. */
int hp_convt_fma_eligible(const struct hp_conv *cv);
size_t hp_convt_fma_workspace(const struct hp_conv *cv, int threads);
void hp_convt_fma_forward(const struct hp_conv *cv, const float *x, const float *w, const float *b, float *y,
			  float *ws, struct hp_pool *pool);
/* Tests and benchmarks only: 0 auto, -1 never; read when a node runs. */
void hp_convt_set_fma(int mode);
/* Tests and benchmarks only: whether convt_fma.c takes AVX-512 tiles of 32
 * columns where the CPU has AVX-512 (the default) or AVX2 tiles of 16; the
 * same bits either way. */
void hp_convt_set_wide(int on);

/* 2 * MACs of a parsed node. */
double hp_conv_flops(const struct hp_conv *cv);

/* Column-buffer budget of one conv node (bytes); the kernel tiles within it. */
#define HP_CONV_WS_MAX ((size_t)16 << 20)
size_t hp_conv_ws_max(void);
/* Threads a workspace is sized for (the cores, at most 8); fewer at run
 * time is fine, more run with fewer workers or smaller chunks. */
int hp_conv_ws_threads(void);
/* The shift path's largest workspace over the batches of cv's geometry
 * (1-D and 2-D folded, as a node of several items folds them) where its
 * window, channels and tiles would take it, whatever the mode; else 0. */
size_t hp_conv_shift_ws_most(const struct hp_conv *cv);
/* Tests and benchmarks only: override the budget (0 restores the default). */
void hp_conv_set_ws_max(size_t b);

/* Per-thread column tile target (bytes): small enough that the tile im2col
 * writes is still in cache when sgemm reads it; at least MIN_COLS columns
 * so each sgemm call amortizes packing the weights. */
#define HP_CONV_TILE_BYTES ((size_t)256 << 10)
#define HP_CONV_TILE_MIN_COLS 64
/* Columns per tile of a column matrix `rows` tall, from the geometry alone
 * (im2col and ConvTranspose tiles). */
int64_t hp_conv_tile_cap(int64_t rows);
/* im2col/col2im workspace columns for a column height kdim over vol columns. */
int64_t hp_conv_ws_cols(int64_t kdim, int64_t vol);
/* Benchmarks only: override the tile target (0 restores the default). */
void hp_conv_set_tile_bytes(size_t b);

/* Threading of conv-like kernels (see conv.c).  enter returns how many pool
 * workers take tiles (1: the caller alone, with the BLAS threads the
 * executor set); with more, BLAS runs single-threaded (a serial section
 * of kernels/blas.h) until leave(saved). */
int hp_conv_threads_enter(struct hp_pool *pool, int *saved);
void hp_conv_threads_leave(int saved);
/* Benchmarks only: 0 auto, 1 always pool tiles, 2 always caller + BLAS threads. */
void hp_conv_set_policy(int p);

/* hp_parallel_for over at most `threads` workers (tid < threads), or the
 * caller alone when threads <= 1. */
void hp_conv_parallel(struct hp_pool *pool, int threads, int64_t n, hp_range_fn fn, void *arg);
/* The same over items whose bits do not depend on the thread that runs
 * them (hp_parallel_steal, kernels/threadpool.h): fn gets one unit of
 * `unit` items at a time, and a thread that finished its share takes the
 * units of a late one, so no thread waits for a worker's wake-up to run
 * that worker's share. */
void hp_conv_steal(struct hp_pool *pool, int threads, int64_t n, int64_t unit, hp_range_fn fn, void *arg);
/* Threads for a node of `flops` cut freely (conv_kxk.c, conv_pw.c,
 * conv_pwt.c: the bits do not depend on the cut): all of them from
 * HP_CONV_PAR_MIN_FLOPS; from HP_CONV_PAR_MIN_POLLING only while the
 * pool's workers poll for jobs (hp_pool_polling: a hand-off of about
 * 0.5 us, against a wake-up of tens of us and more on a busy machine);
 * else the caller alone.  1x1s of 0.3-2 MFLOP (5-14 us on one thread)
 * ran on the caller alone: MNASNet 0.5 at batch 1 on 2 threads 0.384 ->
 * 0.305 ms, SqueezeNet 1.1 0.575 -> 0.537 ms (medians of 7 alternating
 * rounds). */
#define HP_CONV_PAR_MIN_FLOPS 2e6
#define HP_CONV_PAR_MIN_POLLING 2.5e5
int hp_conv_par_threads(struct hp_pool *pool, int threads, double flops);

/* Columns per block of a product cut into blocks of at most nb columns
 * (whole panels of nr) over a column space of `cols`, with `others`
 * independent copies of it (batch items, groups): nb, unless that gives
 * fewer than HP_CONV_EVEN_BLOCKS blocks in all and more than one per copy;
 * then an even number of blocks per copy, of whole panels as equal as
 * they come.  A node's threads take whole blocks where there are few (a
 * block's panels are packed once), so 144 columns cut 128 + 16 left one
 * thread with 8/9 of a 12x12 plane (GoogLeNet's inception 3 at 96x96:
 * 1.2x from the second thread); 80 + 64 share it.  With `one`, a single
 * block of HP_CONV_EVEN_PANELS panels or more (and no other copies) is
 * cut in two as well: where the panels are packed per unit (conv_kxk.c),
 * threads sharing one block by rows each packed all of its panels
 * (SqueezeNet's 3x3s at 11x11: 1.46x from a second thread).  Depends on
 * the node's shape only (the workspace is sized from it), never on the
 * threads. */
#define HP_CONV_EVEN_BLOCKS 8
#define HP_CONV_EVEN_PANELS 6
int64_t hp_conv_even_block(int64_t cols, int64_t nb, int64_t nr, int64_t others, int one);


/* ConvGradFilter of an ungrouped convolution in 1-3 spatial dims
 * (conv_grad_reg.c), where AVX-512F exists: 8 output channels x 48 taps of
 * dW in registers over packed chunks of positions, each element ONE chain
 * of fused multiply-adds from acc (or 0) over the units (unit: positions
 * per unit, a divisor of the plane) from the last to the first, each
 * unit's positions in order. */
struct hp_rfilt {
	struct hp_colgeom geo;    /* img: X's side (cin), grid: dY's side (cout) */
	int64_t n, cin, cout;
	int64_t bvol, svol, rows; /* rows: cin * kvol, dW's row length */
	int64_t unit, ldt, mb, kc; /* ldt: packed row (rows up to 16), mb: blocks of 8
				    * output channels, kc: positions per chunk */
	int64_t tw;                /* a worker's packed taps (blocks of 48) */
	int64_t blk;               /* positions per block of a unit's sum (0: one chain) */
	int workers;
	/* co-lane tiles (few output channels): dW^T tiles of rt window rows
	 * (channel, first two window axes) x k[2] taps x nc vectors of 16
	 * output channels, X broadcast where it lies (no taps packed) */
	int direct, nc, rt;
	int64_t trows, ntile;      /* window rows cin * k[0] * k[1], tiles of rt of them */
	int64_t ncg, lanes;        /* groups of nc vectors of output channels, their lanes */
	int64_t group, xitem, yitem; /* convolution groups (cin, cout: a group's), floats per item of X, dY */
};
/* 1 and q planned if the path takes the geometry, else 0. */
int hp_rfilt_plan(struct hp_rfilt *q, const struct hp_colgeom *geo, int64_t n, int64_t cin, int64_t cout,
		  int64_t group, int64_t unit, int threads);
size_t hp_rfilt_workspace(const struct hp_rfilt *q);
/* Fewer positions per chunk, so that the workspace is at most `bytes`
 * where chunks of 16 positions and more (a block's, when units sum in
 * blocks: on the packed tiles a unit's where units are shorter than a
 * block, the co-lane tiles RF_BLK's) can do it, else the least of those;
 * the chunk size changes no bit.  Not in the tests' chunk mode (hp_rfilt_set_mode k > 1).  0: the
 * co-lane tiles cannot fit `bytes` (the caller takes the sgemm path). */
int hp_rfilt_fit(struct hp_rfilt *q, size_t bytes);
/* Attribute hpdlf_lean: the co-lane tiles with one worker's buffers in
 * chunks of the fewest positions (whole blocks; the same bits); the packed
 * tiles as they are. */
void hp_rfilt_lean(struct hp_rfilt *q);
/* Tests and benchmarks only: 0 auto, 1 wherever it can run, -1 never,
 * k > 1 wherever it can run in chunks of k positions; read when a
 * ConvGradFilter is prepared. */
void hp_rfilt_set_mode(int mode);
/* Tests and benchmarks only: the co-lane tiles 0 where the plan wants
 * them, 1 wherever they can run (with hp_rfilt_set_mode's chunks), -1
 * never; read when a ConvGradFilter is prepared. */
void hp_rfilt_set_direct(int mode);
void hp_rfilt_run(const struct hp_rfilt *q, const float *dy, const float *x, const float *acc, float *dw, float *ws,
		  struct hp_pool *pool);
/* The packed tiles (q->direct 0) with dW never whole, for a kernel that
 * applies the optimizer update to dW as it is final
 * (conv_grad_update.c): each worker sums its taps in pieces of `piece`
 * taps (hp_rfilt_piece), a piece's columns for every output channel over
 * the whole chain (no running sum given: from 0) in its own buffer, then
 * calls done(arg, sums, t0, t1, ld) with dW's columns [t0, t1) of output
 * channel m at sums[m * ld + t - t0], on that worker, once per piece.
 * Every element is the one running sum of hp_rfilt_run in its order: the
 * same bits.  ws: hp_rfilt_pieces_workspace bytes. */
typedef void (*hp_rfilt_done_fn)(void *arg, const float *sums, int64_t t0, int64_t t1, int64_t ld);
/* Taps per piece: a multiple of a tile's 48, no more than a worker's
 * share, and where it can be, few enough that a worker's sums of a piece
 * fit its packing buffer beside the piece's packed taps (the workspace is
 * then hp_rfilt_workspace's: the filter gradient's own). */
int64_t hp_rfilt_piece(const struct hp_rfilt *q);
size_t hp_rfilt_pieces_workspace(const struct hp_rfilt *q, int64_t piece);
void hp_rfilt_run_pieces(const struct hp_rfilt *q, const float *dy, const float *x, int64_t piece,
			 hp_rfilt_done_fn done, void *arg, float *ws, struct hp_pool *pool);

/* ConvGradFilter of a stride-1 convolution in 1-2 spatial dims with few
 * output channels and taps, units of whole batch items
 * (conv_grad_lane.c), where AVX-512F exists: 16 positions in the lanes,
 * tiles of mc output channels x nt taps, dY's rows padded to X's padded
 * row; each element s = acc (or 0), then per item from the last to the
 * first s = s + a fixed tree over 16 lanes, each lane a chain of fused
 * multiply-adds from 0 over the item's positions in order. */
struct hp_lfilt {
	struct hp_colgeom geo;     /* img: X's side (cin), grid: dY's side (cout) */
	int64_t n, cin, cout, taps; /* taps: cin * kvol, dW's row length */
	int64_t pw, xh, len;       /* padded row, X's padded rows, the flat plane's length */
	int copy_x, copy_dy;       /* X copied into its padded image, dY into rows of pw */
	int64_t ncb, mc, nt, ntb, tiles; /* blocks of mc output channels, of nt taps, tiles */
	int workers;
	size_t per_worker;         /* floats */
};
/* 1 and q planned if the path takes the geometry (unit: positions per
 * unit; only whole items), else 0. */
int hp_lfilt_plan(struct hp_lfilt *q, const struct hp_colgeom *geo, int64_t n, int64_t cin, int64_t cout,
		  int64_t group, int64_t unit, int threads);
size_t hp_lfilt_workspace(const struct hp_lfilt *q);
/* Fewer workers, so that the workspace is at most `bytes`; 0 where one
 * worker's does not fit (not in the forced mode).  Changes no bit. */
int hp_lfilt_fit(struct hp_lfilt *q, size_t bytes);
/* Tests and benchmarks only: 0 auto, 1 wherever it can run, -1 never;
 * read when a ConvGradFilter is prepared. */
void hp_lfilt_set_mode(int mode);
void hp_lfilt_run(const struct hp_lfilt *q, const float *dy, const float *x, const float *acc, float *dw, float *ws,
		  struct hp_pool *pool);

/* ConvGradFilter of a 1x1 convolution of stride 1 without pads,
 * ungrouped, with units of at most 64 positions (conv_grad_pw.c), where
 * AVX-512F exists: lanes over 16 input channels, X transposed per unit in
 * blocks of 32 channels, tiles of 12 output channels x 32 input channels
 * in registers; each element
 * s = acc (or 0), then per unit from the last to the first s = s + (a
 * chain of fused multiply-adds from 0 over the unit's positions in
 * order). */
struct hp_pfilt {
	int64_t n, cin, cout, svol, unit; /* svol: positions per item, a multiple of unit */
	int64_t shares, mparts;           /* blocks of 32 input channels x ranges of output channels */
	int64_t ldt;                      /* floats per position of a unit's transposed X */
	int workers;
	size_t per_worker;                /* floats: a unit's (a chunk's) transposed X */
	int64_t chunk;                    /* tiny units: units a tile runs with dW in registers; else 0 */
};
/* 1 and q planned if the path takes the geometry, else 0. */
int hp_pfilt_plan(struct hp_pfilt *q, int64_t n, int64_t cin, int64_t cout, int64_t svol, int64_t unit, int threads);
size_t hp_pfilt_workspace(const struct hp_pfilt *q);
/* Fewer workers, so that the workspace is at most `bytes`; 0 where one
 * worker's does not fit (not in the forced mode).  Changes no bit. */
int hp_pfilt_fit(struct hp_pfilt *q, size_t bytes);
/* Attribute hpdlf_lean: one worker's buffers (the same bits). */
void hp_pfilt_lean(struct hp_pfilt *q);
/* Tests and benchmarks only: 0 auto, 1 wherever it can run, -1 never;
 * read when a ConvGradFilter is prepared. */
void hp_pfilt_set_mode(int mode);
void hp_pfilt_run(const struct hp_pfilt *q, const float *dy, const float *x, const float *acc, float *dw, float *ws,
		  struct hp_pool *pool);

/* ConvGradData of a stride-1 convolution whose dX planes are at most
 * HP_TINYD_MAX_PLANE positions (conv_grad_tiny.c), where AVX-512F
 * exists: register tiles of 8 dX channels by blocks of whole items of at
 * most HP_TINYD_MAX_COLS columns, W broadcast in
 * place, dY's taps packed per chunk of its channels; each element one
 * chain over k = (m, t) of the mirrored window from 0, pads included
 * (the KxK path's chains).  Geometry in 3-D (leading dims 1): x dX's
 * dims, y dY's, k the window, d dilations, p the Conv's pads at the
 * start (a band's may exceed the window: dY rows beyond its reach). */
#define HP_TINYD_MAX_PLANE 16
#define HP_TINYD_MAX_COLS 48
#define HP_TINYD_MAX_KVOL 49
struct hp_tinyd {
	int64_t n, cx, cy, kvol, xvol, yvol;
	int64_t ipb, cols, nv; /* items per block of columns, its columns, vectors */
	int64_t X[3], Y[3], K[3], D[3], P[3]; /* P: the mirrored Conv's pads, (k - 1) d - p */
	size_t ws_bytes;
};
int hp_tinyd_available(void);
/* 1 and t planned if the path can run the geometry, else 0. */
int hp_tinyd_plan(struct hp_tinyd *t, int64_t n, int64_t cx, int64_t cy, const int64_t *x, const int64_t *y,
		  const int64_t *k, const int64_t *d, const int64_t *p);
/* The least workspace (one worker, one channel of dY per chunk); fit sets
 * the workspace to `bytes` (at least the least): fewer workers, shorter
 * chunks, no bit changes. */
size_t hp_tinyd_workspace_min(const struct hp_tinyd *t);
void hp_tinyd_fit(struct hp_tinyd *t, size_t bytes);
size_t hp_tinyd_workspace(const struct hp_tinyd *t);
void hp_tinyd_run(const struct hp_tinyd *t, const float *dy, const float *w, float *dx, float *ws,
		  struct hp_pool *pool);
/* Tests and benchmarks only: 0 auto, 1 wherever it can run (stride 1,
 * group 1), -1 never; read when a ConvGradData is prepared. */
void hp_cgd_set_tiny(int mode);

/* ConvGradFilter of a 2-D stride-1 convolution with a window at most 3
 * wide, over whole batch items (conv_grad_w3.c). */
struct hp_w3 {
	int64_t batch, cin, cout;
	int64_t ih, iw, oh, ow, svol; /* X's plane, dY's plane, oh * ow */
	int64_t kh, kw, ph, pw;       /* window, pads at the start */
	int threads;                  /* workers the workspace holds buffers for */
};
/* Whether the path applies: AVX2+FMA, group 1, the cgeom-style 3-D
 * geometry of a 2-D convolution, stride and dilation 1, whole items as
 * the units of the sum (not planes). */
int hp_w3_eligible(int nd, const int64_t *big, const int64_t *small, const int64_t *k, const int64_t *s,
		   const int64_t *d, int64_t group, int whole_items);
size_t hp_w3_workspace(const struct hp_w3 *w, int threads);
/* dW [cout][cin][kh][kw] = acc (or 0) + the items' parts, last item first. */
void hp_w3_filter(const struct hp_w3 *w, const float *dy, const float *x, const float *acc, float *dw, float *ws,
		  struct hp_pool *pool);

#endif
