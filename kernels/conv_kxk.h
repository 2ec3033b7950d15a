/* Private to the KxK path: conv_kxk.c (blocks, packing, the generic
 * micro-tiles) and conv_kxk_run.c (blocks of whole output-row runs read
 * straight from the image). */
#ifndef HPDLF_KERNELS_CONV_KXK_H
#define HPDLF_KERNELS_CONV_KXK_H

#include <stdint.h>

#include "kernels/conv_impl.h"
#include "kernels/fma_tile.h"

#define KX_MR 6     /* output channels per micro-tile */
#define KX_NR 16    /* columns per micro-tile (two vectors) */
#define KX_KC 256   /* k per cache block */
#define KX_NB 128   /* columns per unit (a multiple of KX_NR) */
/* Micro-tile t of mt = ceil(M / KX_MR) over M output channels: rows as
 * even as KX_MR a tile allows (32 = 6 + 6 + 5 + 5 + 5 + 5, not 6 * 5 + 2:
 * a tile of two rows has too few chains to hide the FMAs' latency). */
static inline int64_t kx_tile_m0(int64_t M, int64_t mt, int64_t t)
{
	return t * (M / mt) + (t < M % mt ? t : M % mt);
}

static inline int64_t kx_tile_rows(int64_t M, int64_t mt, int64_t t)
{
	return M / mt + (t < M % mt);
}

struct kx_run {
	const struct hp_conv *cv;
	const float *x, *w, *b;
	float *y, *ws;
	const struct hp_epi *epi;
	const float *addend;
	int64_t mt, nblk;        /* micro-tiles of rows, column blocks per item */
	int64_t nbw;             /* columns per block (kx_block_cols) */
	struct hp_fma_fin fin;       /* the epilogue in registers, when fin_ok */
	int fin_ok, fin_add;     /* epi done as tiles are stored; with a full addend */
	int64_t per_thread;      /* floats of a worker's panel buffer (and tile buffer) */
	int64_t panel;           /* floats of the panel buffer */
	int64_t pf;              /* floats of one panel's area (kx_panel_floats) */
	int span;                /* blocks span batch items (kx_span) */
	int64_t blocks;          /* column blocks of the node (of mt micro-tiles each) */
	int wlazy;               /* wflip: w is W itself, packed per micro-tile and k
				  * chunk by kx_block (conv_kxk.c kx_flip_lazy); else
				  * w is W' (or an unflipped W) read in place */
};

/* Micro-tiles t0..t1 of one (item, group) over the output columns
 * [j0, j0 + nc) when every 16-column panel of them lies in one output row
 * read at stride 1 (the image's rows are then the panels, tap by tap):
 * the same chains as kx_block, so the same bits.  0 when the block is not
 * of that kind (the caller packs the block); buf holds the worker's
 * panel area. */
int hp_kxk_run_block(const struct kx_run *r, int64_t bg, int64_t j0, int64_t nc, int64_t t0, int64_t t1,
		     float *buf);

/* Only when hp_kxk_wide_ok(): rows r < mr of two full 16-column panels
 * side by side (y and y + 16, rows ldy apart) over nk taps, panel i's tap k
 * at ti[k] + oi, row r's weights at a + r * lda; from the bias (or 0)
 * when first, else from y; then f's epilogue (NULL: none) with the
 * addend at add in y's layout.  The chains, and so the bits, of kr_tile
 * and kx_tile (conv_kxk_run.c). */
void hp_kxk_wide_micro(int mr, int64_t nk, const float *const *t0, int64_t o0, const float *const *t1, int64_t o1,
		       const float *a, int64_t lda, float *y, int64_t ldy, int first, const float *bias,
		       const struct hp_fma_fin *f, const float *add);

/* Only when hp_kxk_wide_ok(): rows r < mr <= 2 * KX_MR of one panel of
 * ncols (1..16) columns over nk taps, tap k's lanes at t[k] (lanes past
 * ncols neither read nor stored), row r's weights at a + r * lda; from the
 * bias (or 0) when first, else from y; then f's epilogue (NULL: none)
 * with the addend at add in y's layout.  The chains, and so the bits, of
 * kx_tile (conv_kxk_run.c). */
void hp_kxk_tall_micro(int mr, int64_t nk, const float *const *t, const float *a, int64_t lda, float *y,
		       int64_t ldy, int ncols, int first, const float *bias, const struct hp_fma_fin *f,
		       const float *add);

#endif
