/* The data gradient of a strided Conv by phases (conv_grad_phase.c). */
#ifndef HPDLF_KERNELS_CONV_GRAD_PHASE_H
#define HPDLF_KERNELS_CONV_GRAD_PHASE_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/conv_impl.h"

/* A Conv's geometry in 3-D (leading unit dims), X the big side, dY the
 * small side, pads on X's leading edges (the trailing ones implied). */
struct hp_cgp_geom {
	int nd;
	int64_t n, cbig, csmall, group;
	int64_t big[3], small[3], k[3], s[3], d[3], p[3];
};

#define HP_CGP_MAX_PHASES 16
#define HP_CGP_MAX_TAPS 64

/* One phase: the X positions r + s * q (per dim), q < q[], computed as
 * the stride-1 Conv cv of dY with the phase's taps of W (transposed and
 * mirrored: cv.wtap) into a scratch of extra + q positions per dim. */
struct hp_cgp_phase {
	int64_t r[3], q[3], extra[3];
	int32_t tap[HP_CGP_MAX_TAPS];
	struct hp_conv cv;     /* cv.wtap is set at run time (the plan is copied) */
};

struct hp_cgp {
	struct hp_cgp_geom c;
	int nph;               /* phases with taps and positions */
	int zero;              /* some X positions have no taps: dX zeroed first */
	int direct;            /* a 1x1 kernel, ungrouped: its one phase straight from
				* dY and W, no workspace (the same chains) */
	int lanes;             /* other kernels, phases as wide as dY's rows,
				* cbig >= 12, ungrouped or 8, 16 or at least 12
				* channels a group (in pairs, or on dY rows of 8
				* or more): lanes over positions, no workspace
				* (the same chains) */
	int pair;              /* lanes, grouped, stride 2 along rows twice dY's:
				* the two phases of a row as one item
				* (pair_item, the same chains) */
	int64_t yp;            /* floats of the phase scratch (a multiple of 16) */
	size_t workspace;      /* bytes: the scratch, then the largest phase's KxK workspace */
	struct hp_cgp_phase ph[HP_CGP_MAX_PHASES];
};

/* Plan dX of geometry c by phases for `threads` workers: 0, or -1 where it
 * does not apply (a stride-1 geometry, more than HP_CGP_MAX_PHASES phases
 * or HP_CGP_MAX_TAPS taps in one, no AVX-512 KxK tiles, planes too large
 * for its 32-bit offsets). */
int hp_cgp_plan(struct hp_cgp *p, const struct hp_cgp_geom *c, int threads);

/* Whether the auto choice takes the plan (conv_grad.c then also asks
 * that its workspace be no larger than col2im's): the kernels without
 * workspace (direct: 1x1, ungrouped; lanes: phases as wide as dY's rows,
 * at least 12 channels in X, ungrouped or grouped as p->lanes says), at
 * least HP_KXK_MIN_CH
 * channels each side, unless the KxK path is forbidden
 * (hp_conv_set_kxk(-1)).  The KxK tiles run only when forced: with 3-25x
 * col2im's workspace (KxK panels of two workers and the phase scratch). */
int hp_cgp_wanted(const struct hp_cgp *p);

/* dX = ConvGradData(dY, W) with p->workspace bytes at ws. */
void hp_cgp_run(const struct hp_cgp *p, const float *dy, const float *w, float *dx, float *ws,
		struct hp_pool *pool);

/* Tests and benchmarks only: 0 auto, 1 whenever it applies, -1 never. */
void hp_cgp_set_mode(int mode);
/* Tests only: -1 grouped lanes never in pairs (0: where they apply). */
void hp_cgp_set_pair(int mode);
int hp_cgp_mode(void);

#endif
