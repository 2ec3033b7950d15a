/* Internal to conv_grp.c and conv_grp_tiles.c: a unit's geometry and a
 * node's run, shared by the column tiles, the staging and the dispatch
 * (conv_grp.c) and the co-lane forward tiles (conv_grp_tiles.c). */
#ifndef HPDLF_KERNELS_CONV_GRP_IMPL_H
#define HPDLF_KERNELS_CONV_GRP_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/conv_impl.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define GR_X86 1
#define GR_TARGET __attribute__((target("avx2,fma")))
#define GR_TARGET512 __attribute__((target("avx512f,avx2,fma")))
#endif

/* The staging of one unit of rb output rows (gr_stage), the tap offsets
 * into it (gr_taps) and its outputs (gr_block). */
struct gr_geom {
	int64_t ih, iw, oh, ow;
	int64_t kh, kw, sh, sw, dh, dw, pt, pl;
	int64_t rb, nrp;   /* output rows per unit, staged rows per row phase */
	int64_t phw, plane; /* floats per staged row, per phase plane */
	int64_t kdim, nrb;
	int64_t stage, lo;  /* floats of the staging (with slack), of a micro-tile row's outputs in o */
};

#ifdef GR_X86
struct gr_run {
	const struct hp_conv *cv;
	struct gr_geom q;
	const float *x, *w, *b;
	const float *wt; /* W^T of every group packed once (hp_grp_pack), or NULL */
	int64_t cb, ncb; /* output channels per unit, units per (item, group, row block) */
	int dense;       /* hp_grp_dense's node or hp_grp_dense_flip's dX: the co-lane forward tiles */
	int dflip;       /* hp_grp_dense_flip's W (w) flipped by each unit into its panel */
	int nonfinite;   /* W^T flipped per call (hp_grp_dense_flip) holds an Inf or NaN:
			  * no tile may skip a padding tap (gr_cs_ok) */
	float *y, *ws;
	const struct hp_epi *epi;
	const float *addend;
	size_t per_thread;
};

/* gr_block's outputs of unit (item n, group g, output rows [oh0, oh1),
 * channels from m0) on the co-lane forward tiles, from the staging st and
 * its tap offsets off; panel: the worker's room for W^T of the unit. */
void hp_grp_cf_block(const struct gr_run *r, int64_t n, int64_t g, int64_t oh0, int64_t oh1, int64_t m0,
		     const float *st, const int32_t *off, float *panel);

/* ConvGradData's W flipped straight into the co-lane tiles' W^T. */
void hp_grp_cf_flip(const struct hp_conv *cv, const float *w, float *f);
/* The same for one group (hp_grp_dense_flip): the unit of cb channels
 * from u into dst [kdim][cb], its panel as hp_grp_pack lays it out; 1
 * where its weights hold an Inf or a NaN. */
int hp_grp_cf_flip_unit(const struct hp_conv *cv, const float *w, int64_t u, int64_t cb, float *dst);
#endif

#endif
