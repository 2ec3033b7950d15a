/* ConvGradFilter of ungrouped 1-D and 2-D convolutions with 16-64 output
 * channels and windows 3, 5 or 7 wide, of any stride (conv_grad_stem.c):
 * the stems (MobileNetV2's 3 -> 32, 3x3 of stride 2 at 224x224; ResNet's
 * 7x7) and the 2-D U-Net's layers on rows of 64 and more, where AVX-512F
 * exists.  Lanes
 * are 16 output channels, a tile holds dW^T for every tap of up to 28, X
 * is broadcast where it lies and dY packed a block of 64 positions at a
 * time, so a worker needs 4 KiB of dY and its sums: the sgemm path it
 * replaces at a batch of one (units: rows) needs 15.5 KiB.  Each element
 * is one sum in conv_grad_reg.c's order (units from the last to the
 * first, blocks of 64 positions each a chain from 0 added to the sum,
 * units under 16 positions one chain), whatever the threads or bands. */
#ifndef HPDLF_KERNELS_CONV_GRAD_STEM_H
#define HPDLF_KERNELS_CONV_GRAD_STEM_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/conv_impl.h"

struct hp_sfilt {
	struct hp_colgeom geo;       /* img: X's side (cin), grid: dY's side (cout) */
	int64_t n, cin, cout, taps;  /* taps: cin * kvol, dW's row length */
	int64_t unit, blk, kc;       /* positions per unit, per block (0: one chain), per packed chunk */
	int64_t trows, ncv;          /* window rows cin * k[1]; vectors of 16 output channels */
	int rt, ntile, workers;      /* window rows per tile at most, tiles, workers */
	int64_t splits, threads;     /* jobs a vector of channels (tiles split), threads planned */
	size_t per_worker, zero;     /* floats: a worker's dY and sums; the shared row of zeros */
};

/* 1 and q planned if the path takes the geometry, else 0. */
int hp_sfilt_plan(struct hp_sfilt *q, const struct hp_colgeom *geo, int64_t n, int64_t cin, int64_t cout,
		  int64_t group, int64_t unit, int threads);
size_t hp_sfilt_workspace(const struct hp_sfilt *q);
/* The most workers (one with lean), then the fewest splits of the tiles
 * (a worker's sums: its split's taps), so that the workspace is at most
 * `bytes`; 0 where one worker's does not fit (not in the forced mode).
 * Changes no bit. */
int hp_sfilt_fit(struct hp_sfilt *q, size_t bytes, int lean);
/* Tests and benchmarks only: 0 auto, 1 wherever it can run (2: with
 * every tile its own job), -1 never; read when a ConvGradFilter is
 * prepared. */
void hp_sfilt_set_mode(int mode);
void hp_sfilt_run(const struct hp_sfilt *q, const float *dy, const float *x, const float *acc, float *dw, float *ws,
		  struct hp_pool *pool);

#endif
