/* Backward of Conv and ConvTranspose in 1-3 spatial dims with groups,
 * strides, pads and dilations (domain ai.hpdlf), over im2col/col2im + sgemm.
 *
 * Both ops are described by one geometry: a "big" side (the Conv input, the
 * ConvTranspose output) and a "small" side (the Conv output, the
 * ConvTranspose input), linked by the window (kernel, stride, dilation,
 * pads on the big side).  ConvTranspose's dW is ConvGradFilter with the
 * operands swapped; its forward is ConvGradData.  The data gradients run
 * the forward kernels of conv.c / conv_transpose.c (threaded, bounded
 * workspace); the filter gradient tiles the same way. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "hpdlf/error.h"
#include "kernels/band.h"
#include "kernels/blas.h"
#include "kernels/conv_grad_phase.h"
#include "kernels/conv_grad_stem.h"
#include "kernels/conv_impl.h"
#include "kernels/eltwise_impl.h"
#include "kernels/train_util.h"

struct cgeom {
	int nd;                /* spatial dims of the ONNX tensors */
	int64_t n, cbig, csmall, group;
	int64_t big[3], small[3], k[3], s[3], d[3], p[3];
	int64_t kvol, bvol, svol;
};

/* Window attributes and spatial sizes in 3-D, the missing leading dims 1. */
static int cgeom_pads(struct hp_graph *g, const struct hp_node *n, struct cgeom *c, const struct hp_shape *big,
		      const struct hp_shape *small, const int64_t *k, const int64_t *pads)
{
	const int64_t *st = NULL, *pd = pads, *dl = NULL;
	int nsp = big->rank - 2, ns = hp_attr_ints(n, "strides", &st);
	int np = pads ? 2 * nsp : hp_attr_ints(n, "pads", &pd), nd = hp_attr_ints(n, "dilations", &dl);

	if (nsp < 1 || nsp > 3 || small->rank != big->rank)
		return hp_node_error(g, n, HP_EUNSUPPORTED, "convolution gradients need 1 to 3 spatial dims of equal rank");
	if ((ns >= 0 && ns != nsp) || (np >= 0 && np != 2 * nsp) || (nd >= 0 && nd != nsp))
		return hp_node_error(g, n, HP_EMODEL, "strides/pads/dilations do not match %d spatial dims", nsp);
	c->nd = nsp;
	c->n = big->dims[0];
	c->cbig = big->dims[1];
	c->csmall = small->dims[1];
	c->group = hp_attr_int(n, "group", 1);
	c->kvol = c->bvol = c->svol = 1;
	for (int i = 0; i < 3; i++) {
		int j = i - (3 - nsp), in = j >= 0; /* leading unit dims, as the forward's geometry */
		c->big[i] = in ? big->dims[2 + j] : 1;
		c->small[i] = in ? small->dims[2 + j] : 1;
		c->k[i] = in ? k[j] : 1;
		c->s[i] = in && ns > 0 ? st[j] : 1;
		c->d[i] = in && nd > 0 ? dl[j] : 1;
		c->p[i] = in && np > 0 ? pd[j] : 0;
		if (c->s[i] < 1 || c->d[i] < 1 || c->k[i] < 1 || c->p[i] < 0)
			return hp_node_error(g, n, HP_EMODEL, "bad window in spatial dim %d", in ? j : i);
		if ((c->small[i] - 1) * c->s[i] + (c->k[i] - 1) * c->d[i] + 1 > c->big[i] + c->p[i] + (in && np > 0 ? pd[nsp + j] : 0))
			return hp_node_error(g, n, HP_ESHAPE, "spatial dim %d: %lld outputs do not fit %lld inputs", j,
					     (long long)c->small[i], (long long)c->big[i]);
		c->kvol *= c->k[i];
		c->bvol *= c->big[i];
		c->svol *= c->small[i];
	}
	if (c->group < 1 || c->cbig % c->group || c->csmall % c->group || small->dims[0] != c->n)
		return hp_node_error(g, n, HP_ESHAPE, "channels (%lld, %lld) or batch do not fit group %lld",
				     (long long)c->cbig, (long long)c->csmall, (long long)c->group);
	return 0;
}

static int cgeom_init(struct hp_graph *g, const struct hp_node *n, struct cgeom *c, const struct hp_shape *big,
		      const struct hp_shape *small, const int64_t *k)
{
	return cgeom_pads(g, n, c, big, small, k, NULL);
}

/* An hp_conv over the cgeom: Conv (transpose 0) from `img` to `grid`, or
 * ConvTranspose (1) from `grid` to `img`, with cin/cout channels. */
static void conv_from(const struct cgeom *c, int transpose, int64_t cin, int64_t cout, const int64_t *img,
		      const int64_t *grid, const int64_t *pad, struct hp_conv *cv)
{
	memset(cv, 0, sizeof *cv);
	cv->nd = c->nd;
	cv->path = -1;
	cv->transpose = transpose;
	cv->batch = c->n;
	cv->cin = cin;
	cv->cout = cout;
	cv->group = c->group;
	cv->cin_g = cin / c->group;
	cv->cout_g = cout / c->group;
	for (int i = 0; i < 3; i++) {
		cv->g.img[i] = img[i];
		cv->g.grid[i] = grid[i];
		cv->g.k[i] = c->k[i];
		cv->g.stride[i] = c->s[i];
		cv->g.dil[i] = c->d[i];
		cv->g.pad[i] = pad[i];
	}
	hp_colgeom_finish(&cv->g);
	cv->xvol = transpose ? cv->g.grid_vol : cv->g.img_vol;
	cv->yvol = transpose ? cv->g.img_vol : cv->g.grid_vol;
	cv->kdim = (transpose ? cv->cout_g : cv->cin_g) * cv->g.kvol;
}

/* Data gradients: a Conv or ConvTranspose forward (no bias) over the
 * shared kernels. */
struct cg_data {
	struct cgeom c;
	int transpose;         /* run cv as ConvTranspose */
	struct hp_conv cv;
	int dw;                /* Conv's dX by conv_dw.c (cv holds the Conv's geometry) */
	int64_t crop[3];       /* KxK: leading dY rows per dim its windows never reach */
	size_t crop_at;        /* with crop: bytes of cv's workspace, then dY cropped */
	int lean;              /* attribute hpdlf_lean (split.c, where this node's
				* workspace decides the smallest budget): one
				* worker's buffers (KxK panels, slab or column
				* tiles), which then runs the node alone; the
				* tiles and chains are the same, so the same bits */
	int phase;             /* strided: by phases (conv_grad_phase.c; cv.workspace its) */
	struct hp_cgp ph;
	int64_t pw_off;        /* 1x1 on conv_pw.c's tiles: dY read from this element on */
	int tiny;              /* tiny planes on conv_grad_tiny.c's tiles (td) */
	struct hp_tinyd td;
};

/* The column geometry of c: the image is the big side, the grid the small. */
static void cgeom_colgeom(const struct cgeom *c, struct hp_colgeom *g)
{
	for (int i = 0; i < 3; i++) {
		g->img[i] = c->big[i];
		g->grid[i] = c->small[i];
		g->k[i] = c->k[i];
		g->stride[i] = c->s[i];
		g->dil[i] = c->d[i];
		g->pad[i] = c->p[i];
	}
	hp_colgeom_finish(g);
}

/* The depthwise geometry of a Conv (X big, Y small) when it has one. */
static int dw_geom(const struct cgeom *c, struct hp_dw *d)
{
	if (!hp_dw_eligible(c->group, c->cbig, c->csmall))
		return 0;
	memset(d, 0, sizeof *d);
	cgeom_colgeom(c, &d->g);
	d->batch = c->n;
	d->cin = c->cbig;
	d->mult = c->csmall / c->cbig;
	return 1;
}

static int data_priv(struct hp_graph *g, struct hp_node *n, struct cg_data *d)
{
	if (!(n->priv = malloc(sizeof *d)))
		return hp_node_error(g, n, -ENOMEM, "out of memory");
	memcpy(n->priv, d, sizeof *d);
	n->workspace = d->tiny	  ? hp_tinyd_workspace(&d->td)
		       : d->crop_at ? d->crop_at + (size_t)(d->cv.batch * d->cv.cin * d->cv.xvol) * sizeof(float)
				    : d->cv.workspace;
	return 0;
}

static void data_plan(struct cg_data *d, int path, int allow_kxk);

/* Tests and benchmarks: 0 auto, 1 the 1x1 dX on conv_pw.c's tiles
 * wherever it can run, -1 never (data_pw_plan). */
static int pw_mode;

void hp_cgd_set_pw(int mode)
{
	pw_mode = mode;
}

/* The same for the tiny path (data_tiny_plan). */
static int tiny_mode;

void hp_cgd_set_tiny(int mode)
{
	tiny_mode = mode;
}

/* Whether the strided dX runs by phases (conv_grad_phase.c), planned into
 * d: a band's kept path (path >= 0), or the auto choice (hp_cgp_wanted)
 * where its workspace is no larger than the path it replaces (as
 * kxk_ws_fits), or where a test or benchmark forces it. */
static int data_phase(struct cg_data *d, int path)
{
	const struct cgeom *c = &d->c;
	struct hp_cgp_geom geo = { .nd = c->nd, .n = c->n, .cbig = c->cbig, .csmall = c->csmall, .group = c->group };

	if (path >= 0 && path != HP_CGD_PATH_PHASE)
		return 0;
	memcpy(geo.big, c->big, sizeof geo.big);
	memcpy(geo.small, c->small, sizeof geo.small);
	memcpy(geo.k, c->k, sizeof geo.k);
	memcpy(geo.s, c->s, sizeof geo.s);
	memcpy(geo.d, c->d, sizeof geo.d);
	memcpy(geo.p, c->p, sizeof geo.p);
	if (hp_cgp_plan(&d->ph, &geo, hp_conv_ws_threads()) < 0 || (path < 0 && !hp_cgp_wanted(&d->ph)))
		return 0;
	if (path < 0 && hp_cgp_mode() <= 0) {
		struct cg_data o = { .c = d->c };
		data_plan(&o, -1, 0);
		if (d->ph.workspace > o.cv.workspace)
			return 0;
	}
	memset(&d->cv, 0, sizeof d->cv);
	d->cv.workspace = d->ph.workspace;
	d->phase = 1;
	return 1;
}

/* The auto choice takes the KxK path only where its workspace (panels
 * of two workers, W') is no larger than the path it replaces: under a
 * budget a larger one moved the band plans (the shipped LeNet's second
 * Conv: 3-6x its ConvTranspose's in bands of 2-8 rows; check_band_order
 * then failed in most runs).  ResNet's 2x2 planes keep their path so
 * (3x3-tiny: 130 KB against 4.6 KB); 7x7 ones of 512 channels (224x224
 * inputs) take it, as the shift path's workspace holds W' too (not
 * measured).
 *
 * Neither side reads the batch, so that a node and every band of its
 * items (unpinned: out of core, training cuts the forward into bands of
 * items before autodiff) choose alike (tests/kernels/test_train.c,
 * test_conv_grad_items): the KxK path's largest workspace over batches
 * (hp_kxk_workspace_most: blocks full, W' packed whole) against the
 * replaced path's for one item or, where larger, the shift path's
 * largest (hp_conv_shift_ws_most) where its window, channels and tiles
 * would take it: the path this one replaced before 1-D and 2-D gradient
 * products stopped taking it (conv.c shift_wanted: its choice and folding
 * read the batch).  Against col2im's alone, all but the 16-channel data
 * gradients of the 2-D U-Net and ResNet-18's (64x64, batch 4) at 16x16
 * and 8x8 fell to col2im, its 4x4 ones to the tiny path: 8-11% more CPU
 * time a training step (1 thread).  Read at the node's batch, the KxK
 * workspace (W' packed per micro-tile for one item of at most KX_NB
 * positions) fitted col2im's for a band of one item but not for the
 * whole (128 <- 8 channels at 8x8; 3-D 64 <- 64 at 4^3), an ulp off out
 * of core.  Its workspace for one item against the shift path's largest
 * took the shipped LeNet's second Conv (16 <- 32 at 4x4, batch 64: 82 KB
 * for one item, 336 KB for 64, shift's 101 KB) off the tiny path, and
 * its training plan at 265508 bytes from 88 to 172 kernels. */
static size_t data_yard(const struct cg_data *d)
{
	const struct cgeom *c = &d->c;
	struct cg_data o = { .c = d->c };
	struct hp_conv sh;
	int64_t pad[3];
	size_t yard, s;
	int ok = 1;

	o.c.n = 1;
	data_plan(&o, -1, 0);
	yard = o.cv.workspace;
	for (int i = 0; i < 3; i++)
		ok &= (pad[i] = (c->k[i] - 1) * c->d[i] - c->p[i]) >= 0;
	if (ok) {
		conv_from(&o.c, 0, c->csmall, c->cbig, c->small, c->big, pad, &sh);
		sh.wflip = 1;
		s = hp_conv_shift_ws_most(&sh);
		yard = s > yard ? s : yard;
	}
	return yard;
}

static int kxk_ws_fits(const struct cg_data *d)
{
	return hp_kxk_workspace_most(&d->cv, hp_conv_ws_threads()) <= data_yard(d);
}

/* The KxK plan's workspace grown to what conv_grp.c's dense tiles need
 * (hp_grp_dense_flip: W^T whole, or a unit's per worker for one item;
 * the staging of a block of rows), under the same rule as kxk_ws_fits's
 * (no larger than the replaced path's, or the shift path's largest).
 * Where it does not fit, the KxK path's tiles run: the same chains, so a
 * band of items may take either whatever its whole node takes. */
static void data_grp_ws(struct cg_data *d)
{
	size_t gw;

	if (!hp_grp_dense_flip(&d->cv))
		return;
	gw = hp_grp_workspace(&d->cv, d->lean ? 1 : hp_conv_ws_threads());
	if (gw > d->cv.workspace && (hp_grp_dflip_mode() > 0 || gw <= data_yard(d)))
		d->cv.workspace = gw;
}

/* Whether the stride-1 dX d->cv (wflip) runs on the KxK path's AVX-512
 * tiles (conv_kxk.c, W' packed per call): path >= 0 a band's kept path;
 * not when a test forces the shift or dot path, nor with fewer than
 * HP_KXK_MIN_CH channels in or out (as Conv nodes); groups keep their
 * paths (not measured). */
static int data_kxk_wanted(const struct cg_data *d, int path)
{
	const struct hp_conv *cv = &d->cv;

	if (!hp_kxk_flip_eligible(cv) || hp_conv_kxk_mode() < 0)
		return 0;
	if (path >= 0)
		return path == HP_CGD_PATH_KXK;
	if (hp_conv_kxk_mode() > 0)
		return 1;
	if (hp_conv_dot_mode() > 0 || hp_conv_shift_mode() > 0)
		return 0;
	return cv->group == 1 && cv->g.kvol > 1 && cv->cin_g >= HP_KXK_MIN_CH && cv->cout_g >= HP_KXK_MIN_CH &&
	       kxk_ws_fits(d);
}

/* dY's plane read from element off on as dX's, for a 1x1 stride-1
 * geometry: -1 unless at most one dim has dY rows beyond X's (a band's,
 * exec/split_grad.c cuts it at the replaced path's tiles) and every dim
 * before it is 1 wide, so that dX's positions are dY's from off on. */
static int64_t pw_offset(const struct cgeom *c)
{
	int64_t lead = 1, inner = 1;
	int at = -1;

	for (int i = 0; i < 3; i++) {
		if (c->s[i] != 1)
			return -1;
		if (c->small[i] != c->big[i] || c->p[i]) {
			if (at >= 0 || lead != 1 || c->small[i] - c->p[i] < c->big[i])
				return -1;
			at = i;
		}
		lead *= c->big[i];
	}
	for (int i = at + 1; at >= 0 && i < 3; i++)
		inner *= c->big[i];
	return at >= 0 ? c->p[at] * inner : 0;
}

/* The 1x1 stride-1 dX on conv_pw.c's tiles (a Conv of dY with W read
 * transposed in place, hp_conv.wflip): each dX element one chain of
 * fused multiply-adds over dY's channels from 0, so any band is the
 * whole; the bands keep the replaced path's cuts, as KxK's do, reading
 * dY from its first row under their X rows (pw_offset).  It replaced
 * ConvTranspose's sgemm and copy per column tile (bench/
 * bench_conv_libs.c, GF/s per CPU-second, medians of 5 alternating
 * runs: class 1x1 59 -> 206, MobileNetV2's 1x1-mb7 .. mb56 89-108 ->
 * 166-199; MobileNetV2's training step at batch 1, one thread, 5% less
 * CPU time).  Its workspace is
 * cut to the replaced path's (fewer workers, shorter k chunks:
 * hp_pw_forward), so band plans under a budget stay where they were
 * (kxk_ws_fits); group 1 only (groups not measured). */
static int data_pw_plan(struct cg_data *d, int path)
{
	const struct cgeom *c = &d->c;
	struct cg_data o = { .c = d->c };
	int64_t off = pw_offset(c), zero[3] = { 0, 0, 0 };
	size_t least;

	if (c->kvol != 1 || c->group != 1 || off < 0 || !hp_pw_flip_available() || (path >= 0 && path != HP_CGD_PATH_PW) ||
	    (path < 0 && pw_mode < 0))
		return 0;
	conv_from(c, 0, c->csmall, c->cbig, c->big, c->big, zero, &d->cv);
	d->cv.wflip = 1;
	hp_conv_setup(&d->cv);
	if (!d->cv.direct)
		return 0;
	d->cv.xvol = c->svol; /* dY's plane stride */
	d->pw_off = off;
	data_plan(&o, -1, 0);
	least = hp_pw_workspace_min(&d->cv);
	/* tiny planes run conv_pwt.c's tiles, which read W in place and need
	 * no workspace: taken whatever the replaced path's */
	if (path < 0 && pw_mode == 0 && o.cv.workspace < least && !hp_pwt_wanted(&d->cv, 0))
		return 0;
	d->cv.workspace = d->cv.workspace < o.cv.workspace ? d->cv.workspace : o.cv.workspace;
	d->cv.workspace = d->cv.workspace > least ? d->cv.workspace : least;
	return 1;
}

/* The stride-1 dX of tiny planes on conv_grad_tiny.c's tiles, where the
 * KxK path's workspace does not fit (kxk_ws_fits): planes of at most
 * HP_TINYD_MAX_PLANE positions (never the batch: a batch band's choice
 * is the whole's), group 1, channels as the KxK path's; its workspace
 * fitted to the replaced path's.  Each dX
 * element is the KxK path's chain, so any band is the whole; bands keep
 * the replaced path's cuts (as KxK's), their dY rows beyond the windows
 * read as negative pads.  bench_conv_libs.c, class 3x3-tiny (ResNet-18
 * at 64x64, stage 4), GF/s per CPU-second under a load average of 10:
 * 23-28 -> 102-124 (the KxK path's tiles 56-84); ResNet-18's training
 * step at batch 4, one thread: see the commits. */
static int data_tiny_plan(struct cg_data *d, int path)
{
	const struct cgeom *c = &d->c;
	struct cg_data o = { .c = d->c };

	if ((path >= 0 && path != HP_CGD_PATH_TINY) || (path < 0 && tiny_mode < 0) || c->group != 1 || c->kvol < 2)
		return 0;
	if (path < 0 && tiny_mode == 0 && (c->cbig < HP_KXK_MIN_CH || c->csmall < HP_KXK_MIN_CH))
		return 0;
	if (!hp_tinyd_plan(&d->td, c->n, c->cbig, c->csmall, c->big, c->small, c->k, c->d, c->p))
		return 0;
	data_plan(&o, -1, 0);
	if (path < 0 && tiny_mode == 0 && o.cv.workspace < hp_tinyd_workspace_min(&d->td))
		return 0;
	hp_tinyd_fit(&d->td, o.cv.workspace);
	d->tiny = 1;
	return 1;
}

/* dX of a Conv: for stride 1 a Conv of dY with W transposed and mirrored
 * on the KxK path's tiles (data_kxk_wanted), over padded slabs, or on the
 * grouped path (conv_grp.c) for groups of up to 32 channels; otherwise
 * ConvTranspose(dY, W) (col2im).  path >= 0 (HP_CGD_PATH_*): the path a
 * band of a whole node keeps (the flip path is taken only where its shift
 * kernel is). */
static void data_plan(struct cg_data *d, int path, int allow_kxk)
{
	const struct cgeom *c = &d->c;
	int64_t pad[3], small[3], crop = 0;
	int ok = path < 0 || path == HP_CGD_PATH_FLIP || path == HP_CGD_PATH_GRP || path == HP_CGD_PATH_KXK ||
		 path == HP_CGD_PATH_TINY;
	struct hp_dw dw;

	d->crop_at = 0;
	d->phase = 0;
	d->pw_off = 0;
	d->tiny = 0;
	if ((d->dw = dw_geom(c, &dw))) {
		d->cv.workspace = hp_dw_data_ws(&dw);
		return;
	}
	if (allow_kxk && data_phase(d, path))
		return;
	if (allow_kxk && data_pw_plan(d, path))
		return;
	for (int i = 0; i < 3; i++) {
		pad[i] = (c->k[i] - 1) * c->d[i] - c->p[i];
		d->crop[i] = pad[i] < 0 ? -pad[i] : 0;
		small[i] = c->small[i] - d->crop[i];
		crop |= d->crop[i] > 0;
		ok &= c->s[i] == 1 && small[i] >= 1;
	}
	if (ok && allow_kxk) {
		/* a band's dY rows cut out to the replaced path's tiles start
		 * above its windows' reach: the KxK path reads them from row
		 * crop on (pads 0), the same taps */
		for (int i = 0; i < 3; i++)
			pad[i] = d->crop[i] ? 0 : pad[i];
		conv_from(c, 0, c->csmall, c->cbig, small, c->big, pad, &d->cv);
		d->cv.wflip = 1;
		if (data_kxk_wanted(d, path)) {
			d->cv.kxk = 1;
			d->cv.lean = d->lean;
			d->cv.workspace = hp_kxk_workspace(&d->cv, d->lean ? 1 : hp_conv_ws_threads());
			data_grp_ws(d);
			d->crop_at = crop ? (d->cv.workspace + 63) / 64 * 64 : 0;
			return;
		}
		if (data_tiny_plan(d, path))
			return;
	}
	memset(d->crop, 0, sizeof d->crop);
	for (int i = 0; i < 3; i++) {
		pad[i] = (c->k[i] - 1) * c->d[i] - c->p[i];
		ok &= pad[i] >= 0;
	}
	if (ok) {
		conv_from(c, 0, c->csmall, c->cbig, c->small, c->big, pad, &d->cv);
		d->cv.wflip = 1;
		d->cv.lean = d->lean;
		if (path == HP_CGD_PATH_FLIP)
			d->cv.path = HP_CONV_PATH_SHIFT;
		if (path == HP_CGD_PATH_GRP)
			d->cv.path = HP_CONV_PATH_GRP;
		if (path != HP_CGD_PATH_KXK) {
			hp_conv_setup(&d->cv);
			if (d->cv.shift || d->cv.grp)
				return;
		}
	}
	d->transpose = 1;
	conv_from(c, 1, c->csmall, c->cbig, c->big, c->small, c->p, &d->cv);
	d->cv.lean = d->lean;
	hp_convt_setup(&d->cv);
}

/* The plan of a node or of a band (path: its attribute hpdlf_path, a
 * KxK band's with the path it replaces above HP_CGD_PATH_BITS). */
static void conv_data_plan(struct cg_data *d, int path)
{
	int p = path >= 0 ? path & HP_CGD_PATH_MASK : -1;

	data_plan(d,
		  p == HP_CGD_PATH_KXK || p == HP_CGD_PATH_PHASE || p == HP_CGD_PATH_PW || p == HP_CGD_PATH_TINY ? p : path,
		  1);
}

static int data_path(const struct cg_data *d)
{
	return d->dw ? HP_CGD_PATH_DW
		: d->phase ? HP_CGD_PATH_PHASE
		: d->tiny ? HP_CGD_PATH_TINY
		: d->transpose ? HP_CGD_PATH_CONVT
		: d->cv.grp ? HP_CGD_PATH_GRP
		: d->cv.kxk ? HP_CGD_PATH_KXK
		: d->cv.direct ? HP_CGD_PATH_PW
			    : HP_CGD_PATH_FLIP;
}

/* ---- ConvGradData(dY, W) -> dX  (attrs x_shape, group, strides, pads, dilations) */

static int conv_data_prepare(struct hp_graph *g, struct hp_node *n)
{
	struct hp_shape xs;
	struct cg_data d = { 0 };
	const struct hp_value *dy = tk_in(g, n, 0), *w = tk_in(g, n, 1);
	int rc;

	if ((rc = tk_need_f32(g, n, 0, 0)) < 0 || (rc = tk_need_f32(g, n, 1, 0)) < 0 ||
	    (rc = tk_attr_shape(g, n, "x_shape", &xs, 1)) < 0)
		return rc;
	if (w->shape.rank != xs.rank)
		return hp_node_error(g, n, HP_ESHAPE, "W rank does not match X");
	if ((rc = cgeom_init(g, n, &d.c, &xs, &dy->shape, w->shape.dims + 2)) < 0)
		return rc;
	if (w->shape.dims[0] != d.c.csmall || w->shape.dims[1] * d.c.group != d.c.cbig)
		return hp_node_error(g, n, HP_ESHAPE, "W channels do not match X/dY and group");
	d.lean = hp_attr_int(n, "hpdlf_lean", 0) != 0;
	conv_data_plan(&d, (int)hp_attr_int(n, "hpdlf_path", -1));
	if ((rc = data_priv(g, n, &d)) < 0)
		return rc;
	tk_set_out(g, n, 0, HP_F32, &xs);
	return 0;
}

/* Non-blocked ConvTranspose (col2im): the column tiles of dY are fixed
 * by its grid and each dX element adds them tile by tile, kernel offset
 * by kernel offset, from zero; so dX rows come out alike from any dY rows
 * cut at tile boundaries that hold all their contributions. */
static void convt_bands(const struct hp_conv *cv, int dim, struct hp_cgd_bands *b)
{
	const struct hp_ctile *t = &cv->ct;

	b->xalign = 1;
	b->yalign = hp_ctile_align(t, dim);
	b->tiles = (int64_t)t->mode << 40 | t->align;
}

/* The cuts of a plan other than KxK. */
static int data_cuts(const struct cg_data *d, int axis, struct hp_cgd_bands *b)
{
	int dim = 3 - d->c.nd + axis - 2;

	b->xalign = b->yalign = 1;
	b->tiles = 0;
	if (axis < 2 || dim < 0 || dim > 2)
		return -1;
	if (d->dw) /* conv_dw.c's dX: each element's additions in dY's row order */
		return 0;
	if (d->transpose)
		convt_bands(&d->cv, dim, b);
	else
		b->xalign = b->tiles = hp_conv_band_align(&d->cv, axis);
	return b->xalign >= 1 && b->yalign >= 1 ? 0 : -1;
}

/* The KxK path computes every dX element by one chain over (c, kd, kh,
 * kw) from 0 wherever a band starts (tests/kernels/test_train.c,
 * test_conv_grad_kxk), so any cut would do; it reports the cuts of the
 * path it replaces (pinned in its bands' hpdlf_path), so that the band
 * pass cuts the graph where it did before this path existed, as the
 * forward's KxK path does (conv.c dot_band_align): with any row allowed,
 * the training plan of the shipped LeNet at 340000 bytes (its second
 * Conv's dX on this path) cut into 347 kernels instead of 91.  Those
 * cuts may take more dY rows than the windows reach: a band then reads
 * from the first row they do (cg_data.crop). */
int hp_conv_data_bands(struct hp_graph *g, const struct hp_node *n, const struct hp_shape *x,
		       const struct hp_shape *dy, const int64_t *pads, int axis, struct hp_cgd_bands *b)
{
	struct cg_data d = { 0 }, o = { 0 };
	const struct hp_value *w = tk_in(g, n, 1);
	int rp;

	if (w->shape.rank != x->rank || cgeom_pads(g, n, &d.c, x, dy, w->shape.dims + 2, pads) < 0)
		return -1;
	conv_data_plan(&d, b->path);
	if (data_path(&d) != HP_CGD_PATH_KXK && data_path(&d) != HP_CGD_PATH_PHASE && data_path(&d) != HP_CGD_PATH_PW &&
	    data_path(&d) != HP_CGD_PATH_TINY) {
		b->path = data_path(&d);
		return data_cuts(&d, axis, b);
	}
	rp = b->path >= 0 ? (b->path >> HP_CGD_PATH_BITS) - 1 : -1;
	o.c = d.c;
	data_plan(&o, rp, 0);
	if (rp >= 0 && data_path(&o) != rp)
		return -1;
	b->path = data_path(&d) | (data_path(&o) + 1) << HP_CGD_PATH_BITS;
	return data_cuts(&o, axis, b);
}

/* dY's rows from d->crop on, into dst ([batch * csmall][the cropped volume]). */
static void data_crop(const struct cg_data *d, const float *dy, float *dst)
{
	const struct cgeom *c = &d->c;
	int64_t n0 = c->small[0] - d->crop[0], n1 = c->small[1] - d->crop[1], n2 = c->small[2] - d->crop[2];

	for (int64_t pl = 0; pl < c->n * c->csmall; pl++)
		for (int64_t i = 0; i < n0; i++)
			for (int64_t j = 0; j < n1; j++, dst += n2)
				memcpy(dst,
				       dy + ((pl * c->small[0] + d->crop[0] + i) * c->small[1] + d->crop[1] + j) * c->small[2] +
					       d->crop[2],
				       (size_t)n2 * sizeof(float));
}

static int data_run(const struct hp_node *n, const struct hp_kargs *a)
{
	const struct cg_data *d = n->priv;
	struct hp_dw dw;

	if (d->phase) {
		hp_cgp_run(&d->ph, a->in[0].data, a->in[1].data, a->out[0].data, a->ws, a->pool);
	} else if (d->tiny) {
		hp_tinyd_run(&d->td, a->in[0].data, a->in[1].data, a->out[0].data, a->ws, a->pool);
	} else if (d->crop_at) {
		float *dy = (float *)(void *)((char *)a->ws + d->crop_at);
		data_crop(d, a->in[0].data, dy);
		hp_conv_forward(&d->cv, dy, a->in[1].data, NULL, a->out[0].data, a->ws, a->pool);
	} else if (d->dw && dw_geom(&d->c, &dw))
		hp_dw_data(&dw, a->in[0].data, a->in[1].data, a->out[0].data, d->cv.workspace ? a->ws : NULL, a->pool);
	else if (d->transpose)
		hp_convt_forward(&d->cv, a->in[0].data, a->in[1].data, NULL, a->out[0].data, a->ws, a->pool);
	else
		hp_conv_forward(&d->cv, (const float *)a->in[0].data + d->pw_off, a->in[1].data, NULL, a->out[0].data,
				a->ws, a->pool);
	return 0;
}

static double conv_flops(const struct hp_graph *g, const struct hp_node *n)
{
	const struct cgeom *c = n->priv; /* first member of every priv here */

	(void)g;
	return c ? 2.0 * (double)(c->n * c->csmall * c->cbig / c->group) * (double)(c->kvol * c->svol) : 0;
}

const struct hp_op tk_op_conv_grad_data = {
	.domain = TK_DOMAIN, .name = "ConvGradData", .min_inputs = 2, .max_inputs = 2,
	.min_outputs = 1, .max_outputs = 1, .prepare = conv_data_prepare, .run = data_run,
	.flops = conv_flops,
};

/* ---- ConvGradFilter(dY, X[, acc]) -> dW [csmall, cbig/group, k...]
 * Every element of dW is one running sum taken in one order, whatever the
 * thread count and however the run cuts the batch into bands: the units
 * (batch items; with a batch of one, the planes of the first spatial axis,
 * which is then the band axis; see hp_filter_unit_axis) from the last to
 * the first, each unit's tiles of positions from the last to the first,
 * each tile one sgemm adding into dW^T.  A band's node starts from the sum
 * of the bands after it (input 2: the chain autodiff builds, autodiff.c),
 * so the chain adds exactly what the whole node adds and out-of-core
 * training is bitwise the in-core one.  dW's rows are cut in shares
 * fixed by the geometry (groups, or rows at multiples of FILTER_ROWQ) and
 * the machine's core count, never by the run's threads, which take the
 * shares; the sum is never cut.  A tile's columns come from im2col, or,
 * for stride 1 where it pays, from a padded slab of the input (the shift
 * geometry of conv_shift.c, without folding the batch).  With attribute
 * hpdlf_lean (the budget's splitter gives it where a node's workspace
 * decides the smallest budget, split.c) the same shares run in turn on one
 * thread with one worker's buffers: the same sgemms, the same sums. */

#define FILTER_ROWQ 32

struct cg_filter {
	struct cgeom c;
	struct hp_colgeom geo; /* img: X (big side), grid: dY (small side) */
	int64_t unit;          /* positions per unit */
	int64_t tc;            /* im2col: columns per tile */
	int64_t rows;          /* cg * kvol: rows of dW^T per group */
	int slab;              /* the slab path (sh) */
	int direct;            /* 1x1, stride 1, no pads: X is the column matrix */
	int swap;              /* direct, ungrouped, more output channels than rows:
				 * the sgemms write dW (M: output channels) */
	struct hp_shift sh;
	int64_t chunk;         /* slab: output planes per slab (1 when units are planes) */
	size_t per_worker;     /* floats of one worker's buffers */
	int shares;
	size_t workspace;
	int lean;              /* attribute hpdlf_lean: one worker's buffers, the
				 * shares run in turn on the calling thread */
	int dw;                /* depthwise: conv_dw.c */
	int w3;                /* 2-D, stride 1, window <= 3 wide, whole items: conv_grad_w3.c */
	struct hp_w3 w3g;
	int grp;               /* 2-D, 2-32 channels per group: conv_grad_grp.c */
	struct hp_gfilt gfg;
	int reg;               /* ungrouped, small units, AVX-512: conv_grad_reg.c */
	struct hp_rfilt rfg;
	int lane;              /* stride 1, few channels, whole items, AVX-512: conv_grad_lane.c */
	struct hp_lfilt lfg;
	int pw;                /* direct, ungrouped, short units, AVX-512: conv_grad_pw.c */
	struct hp_pfilt pfg;
	int stem;              /* ungrouped, 16-64 output channels, AVX-512: conv_grad_stem.c */
	struct hp_sfilt sfg;
};

struct filter_run {
	const struct cg_filter *f;
	const float *dy, *x;
	float *part, *ws;      /* dW^T [group][rows][mg]; per worker its buffers */
};

/* Positions per unit: a batch item, or with unit_axis 2 one plane of the
 * first spatial axis (a 1-D geometry has none: the whole item). */
static int64_t filter_unit(const struct cgeom *c, int64_t unit_axis)
{
	int64_t u = c->svol;

	if (unit_axis == 2 && c->nd >= 2)
		u /= c->small[3 - c->nd];
	return u;
}

int64_t hp_filter_unit_axis(int64_t batch)
{
	return batch >= 2 ? 0 : 2;
}

/* Share t: groups [g0, g1) and of each the rows [r0, r1). */
static void filter_share(const struct cg_filter *f, int t, int64_t *g0, int64_t *g1, int64_t *r0, int64_t *r1)
{
	int64_t groups = f->c.group, T = f->shares, q = FILTER_ROWQ, blocks = (f->rows + q - 1) / q;

	if (groups >= T) {
		*g0 = groups * t / T, *g1 = groups * (t + 1) / T, *r0 = 0, *r1 = f->rows;
		return;
	}
	*g0 = 0, *g1 = groups;
	*r0 = blocks * t / T * q;
	*r1 = blocks * (t + 1) / T * q;
	*r1 = *r1 < f->rows ? *r1 : f->rows;
}

/* part rows [r0, r1) += col rows (from c0 * kvol; row stride ldcol) x
 * dy^T over nc columns. */
static void filter_gemm(const struct cg_filter *f, int64_t r0, int64_t r1, int64_t c0, const float *col,
			int64_t ldcol, const float *dy, int64_t lddy, int64_t nc, float *part)
{
	if (f->swap) { /* part: dW itself, columns [r0, r1) */
		hp_sgemm(CblasNoTrans, CblasTrans, (int)f->c.csmall, (int)(r1 - r0), (int)nc, 1.0f, dy,
			    (int)lddy, col + (r0 - c0 * f->c.kvol) * ldcol, (int)ldcol, 1.0f, part + r0, (int)f->rows);
		return;
	}
	hp_sgemm(CblasNoTrans, CblasTrans, (int)(r1 - r0), (int)(f->c.csmall / f->c.group), (int)nc,
		    1.0f, col + (r0 - c0 * f->c.kvol) * ldcol, (int)ldcol, dy, (int)lddy, 1.0f, part,
		    (int)(f->c.csmall / f->c.group));
}

/* A 1x1 window of stride 1 without pads: the image is its own column
 * matrix (the same sgemm calls on the same values as after a copy). */
static int filter_direct(const struct cgeom *c)
{
	int64_t pads = 0;

	for (int i = 0; i < 3; i++)
		pads += c->p[i] + c->s[i] - 1;
	return c->kvol == 1 && pads == 0 && c->bvol == c->svol;
}

/* im2col tiles of one batch item, last unit and tile first. */
static void filter_item_cols(const struct cg_filter *f, const float *img, const float *dy, int64_t c0, int64_t c1,
			     int64_t r0, int64_t r1, float *part, float *col)
{
	const struct cgeom *c = &f->c;
	int64_t ntile = (f->unit + f->tc - 1) / f->tc;

	for (int64_t u = c->svol / f->unit - 1; u >= 0; u--)
		for (int64_t t = ntile - 1; t >= 0; t--) {
			int64_t j0 = u * f->unit + t * f->tc, j1 = j0 + f->tc < (u + 1) * f->unit ? j0 + f->tc : (u + 1) * f->unit;
			if (f->direct) {
				filter_gemm(f, r0, r1, c0, img + j0, c->bvol, dy + j0, c->svol, j1 - j0, part);
				continue;
			}
			hp_im2col(&f->geo, c1 - c0, img, j0, j1, col);
			filter_gemm(f, r0, r1, c0, col, j1 - j0, dy + j0, c->svol, j1 - j0, part);
		}
}

/* Slab tiles of one batch item: chunks of f->chunk output planes, last
 * chunk and tile first. */
static void filter_item_slab(const struct cg_filter *f, const float *img, const float *dy, int64_t c0, int64_t c1,
			     int64_t r0, int64_t r1, float *part, float *buf)
{
	struct hp_shift s = f->sh;
	int64_t mg = f->c.csmall / f->c.group, planes = s.out[0];
	float *col = buf, *tmp = col + (size_t)(f->rows * s.tcols), *slab = tmp + (size_t)(mg * s.tcols);

	s.ch = c1 - c0;
	for (int64_t d0 = (planes - 1) / f->chunk * f->chunk; d0 >= 0; d0 -= f->chunk) {
		int64_t d1 = d0 + f->chunk < planes ? d0 + f->chunk : planes;
		hp_shift_slab(&s, img, d0, d1, slab);
		for (int64_t t = hp_shift_ntiles(&s, d1 - d0) - 1; t >= 0; t--) {
			int64_t tr0, tr1, start, nc;
			hp_shift_tile_rows(&s, d0, d1, t, &tr0, &tr1);
			nc = hp_shift_tile_span(&s, d0, tr0, tr1, &start);
			hp_shift_pack_rows(&s, dy, f->c.svol, d0, tr0, tr1, tmp);
			hp_shift_flat_col(&s, slab, d0, d1, tr0, tr1, col);
			filter_gemm(f, r0, r1, c0, col, nc, tmp, nc, nc, part);
		}
	}
}

static void filter_shares(void *arg, int64_t b, int64_t e, int tid)
{
	const struct filter_run *r = arg;
	const struct cg_filter *f = r->f;
	const struct cgeom *c = &f->c;
	int64_t cg = c->cbig / c->group, mg = c->csmall / c->group;
	float *buf = r->ws + (size_t)tid * f->per_worker;

	for (int64_t t = b; t < e; t++) {
		int64_t g0, g1, r0, r1;
		filter_share(f, (int)t, &g0, &g1, &r0, &r1);
		int64_t c0 = r0 / c->kvol, c1 = (r1 + c->kvol - 1) / c->kvol;
		for (int64_t g = g0; r0 < r1 && g < g1; g++)
			for (int64_t nb = c->n - 1; nb >= 0; nb--) {
				const float *img = r->x + (nb * c->cbig + g * cg + c0) * c->bvol;
				const float *dy = r->dy + (nb * c->csmall + g * mg) * c->svol;
				float *part = f->swap ? r->part : r->part + (g * f->rows + r0) * mg;
				if (f->slab)
					filter_item_slab(f, img, dy, c0, c1, r0, r1, part, buf);
				else
					filter_item_cols(f, img, dy, c0, c1, r0, r1, part, buf);
			}
	}
}

/* The slab path for a stride-1 geometry where it pays: units of whole
 * items (chunks of planes) or, in 3-D, of single planes.  Its choice and
 * tiles must not depend on what a band changes (the planes of the first
 * axis when units are planes, the batch otherwise): 2-D units of rows
 * never take it, since a one-row band's unit would be its whole image;
 * plane units plan their tiles as for one plane. */
static int filter_slab_plan(struct cg_filter *f, int64_t unit_axis)
{
	const struct cgeom *c = &f->c;
	int64_t cg = c->cbig / c->group, mg = c->csmall / c->group, planes = f->geo.grid[0];
	int plane_units = unit_axis == 2 && c->nd == 3;

	if (unit_axis == 2 && c->nd == 2)
		return 0;
	if (hp_conv_shift_mode() < 0 || hp_shift_init(&f->sh, &f->geo, cg, mg) < 0)
		return 0;
	if (plane_units) {
		f->sh.out[0] = 1; /* tiles as for one plane (plan_tiles reads out[0] only there) */
		f->sh.tcols = INT64_MAX;
		hp_shift_retile(&f->sh, HP_SHIFT_TILE_COLS);
	}
	if (hp_conv_shift_mode() == 0 && hp_shift_useful(&f->sh) < HP_SHIFT_MIN_USEFUL)
		return 0;
	/* the flat column tile is rows tall: a quarter of a tile's bytes per
	 * worker keeps tight budgets workable, the sgemms K >= a plane row */
	hp_shift_retile(&f->sh, (int64_t)(HP_CONV_TILE_BYTES / 4 / ((size_t)f->rows * sizeof(float))));
	f->sh.out[0] = planes;
	/* tiles of rows stay in their plane whatever the chunk; tiles of
	 * whole planes take one plane each when units are planes */
	if (plane_units && f->sh.tplanes)
		f->chunk = 1;
	else if ((f->chunk = hp_shift_slab_planes(&f->sh, f->sh.out[0])) > f->sh.tplanes && f->sh.tplanes)
		f->chunk = f->chunk / f->sh.tplanes * f->sh.tplanes;
	f->per_worker = (size_t)((f->rows + mg) * f->sh.tcols) + hp_shift_slab_floats(&f->sh, f->chunk);
	return 1;
}

static void filter_plan(struct cg_filter *f, int64_t unit_axis)
{
	const struct cgeom *c = &f->c;
	int64_t rowblocks;
	int nt = hp_conv_ws_threads();

	cgeom_colgeom(c, &f->geo);
	f->rows = c->cbig / c->group * c->kvol;
	f->unit = filter_unit(c, unit_axis);
	f->direct = filter_direct(c);
	/* OpenBLAS runs these short-K sgemms faster with M the larger side
	 * (bench_conv_libs.c 1x1-mb56, 24 -> 144 at 56x56, batch 1: units of
	 * K = 56; 1x1, 96 -> 24, keeps dW^T); it decides by the channels, so
	 * every band takes the whole node's orientation */
	f->swap = f->direct && c->group == 1 && c->csmall > f->rows;
	f->slab = !f->direct && filter_slab_plan(f, unit_axis);
	if (!f->slab) {
		f->tc = f->direct ? f->unit : hp_conv_tile_cap(f->rows); /* no copy to keep in cache */
		f->tc = f->tc < f->unit ? f->tc : f->unit;
		f->per_worker = f->direct ? 0 : (size_t)(f->rows * f->tc);
	}
	rowblocks = (f->rows + FILTER_ROWQ - 1) / FILTER_ROWQ;
	f->shares = (int)(c->group >= nt ? nt : rowblocks < nt ? rowblocks : nt);
	f->shares = f->shares > 1 ? f->shares : 1;
	f->workspace = ((size_t)(c->csmall * f->rows) + (size_t)(f->lean ? 1 : f->shares) * f->per_worker) *
		       sizeof(float);
}

/* The direct path of conv_grad_w3.c where it applies (not 1x1: the
 * direct sgemm reads X in place there).  Only units of batch items: a
 * band of one row of a batch of one would otherwise take it, which its
 * whole node (units: rows) never does. */
static int w3_plan(struct cg_filter *f, int64_t unit_axis)
{
	const struct cgeom *c = &f->c;
	struct hp_w3 *w = &f->w3g;

	/* a forced shift mode (tests, benchmarks) asks for the sgemm paths */
	if (hp_conv_shift_mode() != 0 || c->kvol == 1 ||
	    !hp_w3_eligible(c->nd, c->big, c->small, c->k, c->s, c->d, c->group, unit_axis == 0))
		return 0;
	*w = (struct hp_w3){ .batch = c->n, .cin = c->cbig, .cout = c->csmall, .ih = c->big[1], .iw = c->big[2],
			     .oh = c->small[1], .ow = c->small[2], .svol = c->svol, .kh = c->k[1], .kw = c->k[2],
			     .ph = c->p[1], .pw = c->p[2], .threads = hp_conv_ws_threads() };
	f->w3 = 1;
	f->workspace = hp_w3_workspace(w, w->threads);
	return 1;
}

/* The grouped path of conv_grad_grp.c where it applies: its units are
 * those of the sgemm path (items, or rows with a batch of one), so a band
 * of the node takes it where the whole does. */
static int grp_plan(struct cg_filter *f, int64_t unit_axis)
{
	const struct cgeom *c = &f->c;
	struct hp_colgeom geo = { 0 };

	if (c->nd != 2 || c->group < 2)
		return 0;
	cgeom_colgeom(c, &geo);
	f->grp = hp_gfilt_plan(&f->gfg, &geo, c->n, c->cbig, c->csmall, c->group, filter_unit(c, unit_axis),
			       hp_conv_ws_threads());
	return f->grp;
}

/* The register-tile path of conv_grad_reg.c where it applies: it decides
 * by the unit, the channels and the window, never by what a band changes
 * (the batch, or the planes of the first axis when units are planes). */
static int reg_plan(struct cg_filter *f, int64_t unit_axis)
{
	const struct cgeom *c = &f->c;
	struct hp_colgeom geo = { 0 };

	cgeom_colgeom(c, &geo);
	f->reg = hp_rfilt_plan(&f->rfg, &geo, c->n, c->cbig, c->csmall, c->group, filter_unit(c, unit_axis),
			       hp_conv_ws_threads());
	return f->reg;
}

/* The register tiles' chunks no larger than keeps the workspace within
 * the sgemm path's: LeNet's second Conv (16 -> 32, 3x3 at 8x8, batch 64)
 * took 560 KiB in chunks of 512 positions against 92 KiB there, a third
 * more than its whole training step held before.  0 (f->reg cleared)
 * where the co-lane tiles cannot fit it.
 * The co-lane tiles need less (the 3-D U-Net's 48^3 layers: about 200 KiB
 * against 3.5 MiB) but name the sgemm path's workspace (with the same
 * hpdlf_lean) to the planner: with their own, the U-Net's plan at a
 * quarter of its peak cut its bands elsewhere and kept band-sized zero
 * halo gradients (tests/train/check_band_zero.py), a planner matter left
 * for its own change.  With hpdlf_lean (given where the budget needs it,
 * exec/split.c) they name their own, one worker's in chunks of one block
 * (hp_rfilt_lean): the Fire net of tests/train/check_train_quarter.py
 * held 97 KiB for its stem's filter gradient (8 -> 16, 3x3 at 24x24, a
 * band of one item), its smallest budget a third of its peak. */
static int reg_fit(struct cg_filter *f, const struct hp_node *n, int64_t unit_axis)
{
	struct cg_filter s = *f;
	int lean = hp_attr_int(n, "hpdlf_lean", 0) != 0;

	s.lean = 0;
	s.reg = 0;
	filter_plan(&s, unit_axis);
	if (!hp_rfilt_fit(&f->rfg, s.workspace)) {
		f->reg = 0;
		return 0;
	}
	if (lean) {
		hp_rfilt_lean(&f->rfg);
		s = *f;
		s.lean = 1;
		s.reg = 0;
		filter_plan(&s, unit_axis);
	}
	f->workspace = hp_rfilt_workspace(&f->rfg);
	if (f->rfg.direct && f->workspace < s.workspace && !lean)
		f->workspace = s.workspace;
	return 1;
}

/* The position-lane tiles of conv_grad_lane.c where they apply (units of
 * whole items only: they decide by the unit, the channels and the
 * window, never by the batch), in fewer workers where the workspace of
 * the sgemm path they replace (with the same hpdlf_lean) would not hold
 * them all; the node names that path's workspace to the planner, as
 * reg_fit does, so the plans do not change. */
static int lane_plan(struct cg_filter *f, const struct hp_node *n, int64_t unit_axis)
{
	const struct cgeom *c = &f->c;
	struct hp_colgeom geo = { 0 };
	struct cg_filter s = *f;

	cgeom_colgeom(c, &geo);
	if (!hp_lfilt_plan(&f->lfg, &geo, c->n, c->cbig, c->csmall, c->group, filter_unit(c, unit_axis),
			   hp_conv_ws_threads()))
		return 0;
	s.lean = hp_attr_int(n, "hpdlf_lean", 0) != 0;
	filter_plan(&s, unit_axis);
	if (!hp_lfilt_fit(&f->lfg, s.workspace))
		return 0;
	f->lane = 1;
	f->workspace = hp_lfilt_workspace(&f->lfg);
	f->workspace = f->workspace > s.workspace ? f->workspace : s.workspace;
	return 1;
}

/* The pointwise tiles of conv_grad_pw.c where they apply (a 1x1 the
 * sgemm path reads in place, units of rows: they decide by the unit and
 * the channels, never by the batch or the planes a band holds), in fewer
 * workers where the sgemm path's workspace (with the same hpdlf_lean)
 * would not hold them all; the node names that path's workspace to the
 * planner, as lane_plan does, so the plans do not change. */
static int pw_plan(struct cg_filter *f, const struct hp_node *n, int64_t unit_axis)
{
	const struct cgeom *c = &f->c;
	struct cg_filter s = *f;

	if (!filter_direct(c) || c->group != 1 ||
	    !hp_pfilt_plan(&f->pfg, c->n, c->cbig, c->csmall, c->svol, filter_unit(c, unit_axis), hp_conv_ws_threads()))
		return 0;
	s.lean = hp_attr_int(n, "hpdlf_lean", 0) != 0;
	filter_plan(&s, unit_axis);
	if (s.lean)
		hp_pfilt_lean(&f->pfg);
	if (!hp_pfilt_fit(&f->pfg, s.workspace))
		return 0;
	f->pw = 1;
	f->workspace = hp_pfilt_workspace(&f->pfg);
	f->workspace = f->workspace > s.workspace ? f->workspace : s.workspace;
	return 1;
}

/* Ungrouped layers on conv_grad_stem.c's co-lane tiles where they apply
 * (chosen by the channels and the window, never by the batch or a
 * band's rows), in place of the path chosen before, in as many workers
 * as fit the least of that path's workspace and the sgemm path's (with
 * the same hpdlf_lean: figures a band of items or rows keeps); the node
 * names the replaced path's workspace to the planner, so the plans do
 * not change. */
static void stem_colane(struct cg_filter *f, const struct hp_node *n, int64_t unit_axis)
{
	const struct cgeom *c = &f->c;
	struct hp_colgeom geo = { 0 };
	struct cg_filter s = *f;
	struct hp_sfilt q;

	if (f->dw || c->group != 1)
		return;
	cgeom_colgeom(c, &geo);
	if (!hp_sfilt_plan(&q, &geo, c->n, c->cbig, c->csmall, c->group, filter_unit(c, unit_axis),
			   hp_conv_ws_threads()))
		return;
	s.lean = hp_attr_int(n, "hpdlf_lean", 0) != 0;
	s.w3 = s.grp = s.reg = s.lane = s.pw = 0;
	filter_plan(&s, unit_axis);
	if (!hp_sfilt_fit(&q, s.workspace < f->workspace ? s.workspace : f->workspace, s.lean))
		return;
	f->sfg = q;
	f->stem = 1, f->w3 = 0, f->grp = 0, f->reg = 0, f->lane = 0, f->pw = 0;
	f->workspace = hp_sfilt_workspace(&q) > f->workspace ? hp_sfilt_workspace(&q) : f->workspace;
}

/* Grouped layers on conv_grad_grp.c's co-lane tiles where they apply
 * (chosen by channels, window and unit, which bands keep), in place of
 * the path chosen before, in chunks of rows that fit that path's
 * workspace; the node names the larger of the two workspaces: the
 * replaced path's (band plans stay) unless even chunks of one row need
 * more (a band of a row or two of a batch of one). */
static void grp_colane(struct cg_filter *f, const struct hp_node *n, int64_t unit_axis)
{
	const struct cgeom *c = &f->c;
	struct hp_colgeom geo = { 0 };
	struct hp_gfilt q;

	if (f->dw || c->nd != 2 || c->group < 2)
		return;
	cgeom_colgeom(c, &geo);
	if (!hp_gfilt_colane(&q, &geo, c->n, c->cbig, c->csmall, c->group, filter_unit(c, unit_axis),
			     hp_attr_int(n, "hpdlf_lean", 0) ? 1 : hp_conv_ws_threads(), f->workspace))
		return;
	f->gfg = q;
	f->grp = 1, f->w3 = 0, f->reg = 0, f->lane = 0, f->pw = 0;
	f->workspace = hp_gfilt_workspace(&q) > f->workspace ? hp_gfilt_workspace(&q) : f->workspace;
}

/* The path node n's filter gradient takes (dY input 0, X input 1, the
 * window attributes), in *f; dW's shape in *ws. */
static int filter_choose(struct hp_graph *g, const struct hp_node *n, struct cg_filter *f, struct hp_shape *ws)
{
	struct hp_shape ks;
	const struct hp_value *dy = tk_in(g, n, 0), *x = tk_in(g, n, 1);
	int rc;

	if ((rc = tk_need_f32(g, n, 0, 0)) < 0 || (rc = tk_need_f32(g, n, 1, 0)) < 0 ||
	    (rc = tk_attr_shape(g, n, "kernel_shape", &ks, 1)) < 0)
		return rc;
	if (ks.rank != x->shape.rank - 2)
		return hp_node_error(g, n, HP_ESHAPE, "kernel_shape does not match X's spatial rank");
	if ((rc = cgeom_init(g, n, &f->c, &x->shape, &dy->shape, ks.dims)) < 0)
		return rc;
	int64_t unit_axis = hp_attr_int(n, "hpdlf_unit_axis", hp_filter_unit_axis(f->c.n));
	struct hp_dw dw;
	if ((f->dw = dw_geom(&f->c, &dw))) {
		dw.unit = filter_unit(&f->c, unit_axis);
		f->workspace = hp_dw_filter_ws(&dw);
	} else if (grp_plan(f, unit_axis)) {
		f->workspace = hp_gfilt_workspace(&f->gfg);
	} else if (pw_plan(f, n, unit_axis)) { /* its workspace set */
	} else if (lane_plan(f, n, unit_axis)) { /* its workspace set */
	} else if (w3_plan(f, unit_axis)) { /* its workspace set */
	} else if (reg_plan(f, unit_axis) && reg_fit(f, n, unit_axis)) {
		/* groups: where conv_grad_grp.c does not run, 16-64 output
		 * channels a group on co-lane tiles */
	} else {
		f->lean = hp_attr_int(n, "hpdlf_lean", 0) != 0;
		filter_plan(f, unit_axis);
	}
	grp_colane(f, n, unit_axis);
	stem_colane(f, n, unit_axis);
	f->unit = filter_unit(&f->c, unit_axis);
	ws->rank = x->shape.rank;
	ws->dims[0] = f->c.csmall;
	ws->dims[1] = f->c.cbig / f->c.group;
	memcpy(ws->dims + 2, ks.dims, (size_t)ks.rank * sizeof ks.dims[0]);
	return 0;
}

int tk_conv_filter_pieces(struct hp_graph *g, const struct hp_node *n, struct hp_rfilt *q, struct hp_shape *dw)
{
	struct cg_filter f = { 0 };
	int rc = filter_choose(g, n, &f, dw);

	if (rc < 0)
		return rc;
	if (!f.reg || f.rfg.direct || f.dw || f.w3 || f.grp || f.pw || f.stem || f.lane)
		return 0;
	*q = f.rfg;
	return 1;
}

static int conv_filter_prepare(struct hp_graph *g, struct hp_node *n)
{
	struct hp_shape ws;
	struct cg_filter f = { 0 };
	int rc = filter_choose(g, n, &f, &ws);

	if (rc < 0)
		return rc;
	if (!(n->priv = malloc(sizeof f)))
		return hp_node_error(g, n, -ENOMEM, "out of memory");
	memcpy(n->priv, &f, sizeof f);
	n->workspace = f.workspace;
	if (n->ninputs > 2 && n->inputs[2] >= 0) {
		const struct hp_value *acc = tk_in(g, n, 2);
		if (acc->dtype != HP_F32 || !hp_shape_equal(&acc->shape, &ws))
			return hp_node_error(g, n, HP_ESHAPE, "the running sum (input 2) must be float and dW's shape");
	}
	tk_set_out(g, n, 0, HP_F32, &ws);
	return 0;
}

/* dW^T [g][j][m] from dW [g*mg + m][j] and back: exact copies through
 * cache in blocks of FILTER_TBLK x FILTER_TBLK. */
#define FILTER_TBLK 32
static void filter_transpose(const struct cg_filter *f, const float *from, float *to, int to_dw)
{
	int64_t mg = f->c.csmall / f->c.group, rows = f->rows;

	for (int64_t g = 0; g < f->c.group; g++)
		for (int64_t m0 = 0; m0 < mg; m0 += FILTER_TBLK)
			for (int64_t j0 = 0; j0 < rows; j0 += FILTER_TBLK) {
				int64_t m1 = m0 + FILTER_TBLK < mg ? m0 + FILTER_TBLK : mg;
				int64_t j1 = j0 + FILTER_TBLK < rows ? j0 + FILTER_TBLK : rows;
				for (int64_t m = m0; m < m1; m++)
					for (int64_t j = j0; j < j1; j++) {
						size_t w = (size_t)((g * mg + m) * rows + j), p = (size_t)((g * rows + j) * mg + m);
						if (to_dw)
							to[w] = from[p];
						else
							to[p] = from[w];
					}
			}
}

static int conv_filter_run(const struct hp_node *n, const struct hp_kargs *a)
{
	const struct cg_filter *f = n->priv;
	const struct cgeom *c = &f->c;
	const float *acc = a->nin > 2 && a->in[2].data ? a->in[2].data : NULL;
	size_t dwn = (size_t)(c->csmall * f->rows);
	struct filter_run r = { .f = f, .dy = a->in[0].data, .x = a->in[1].data, .part = a->ws, .ws = (float *)a->ws + dwn };
	int saved, threads;
	struct hp_dw dw;

	if (f->dw && dw_geom(c, &dw)) {
		dw.unit = f->unit;
		hp_dw_filter(&dw, r.dy, r.x, acc, a->out[0].data, a->ws, a->pool);
		return 0;
	}
	if (f->w3) {
		hp_w3_filter(&f->w3g, r.dy, r.x, acc, a->out[0].data, a->ws, a->pool);
		return 0;
	}
	if (f->grp) {
		hp_gfilt_run(&f->gfg, r.dy, r.x, acc, a->out[0].data, a->ws, a->pool);
		return 0;
	}
	if (f->pw) {
		hp_pfilt_run(&f->pfg, r.dy, r.x, acc, a->out[0].data, a->ws, a->pool);
		return 0;
	}
	if (f->stem) {
		hp_sfilt_run(&f->sfg, r.dy, r.x, acc, a->out[0].data, a->ws, a->pool);
		return 0;
	}
	if (f->lane) {
		hp_lfilt_run(&f->lfg, r.dy, r.x, acc, a->out[0].data, a->ws, a->pool);
		return 0;
	}
	if (f->reg) {
		hp_rfilt_run(&f->rfg, r.dy, r.x, acc, a->out[0].data, a->ws, a->pool);
		return 0;
	}
	threads = hp_conv_threads_enter(a->pool, &saved);
	threads = threads < f->shares ? threads : f->shares;
	threads = f->lean ? 1 : threads;
	if (f->swap) /* the sums in dW itself */
		r.part = a->out[0].data;
	if (f->swap && acc)
		memcpy(r.part, acc, dwn * sizeof *r.part);
	else if (acc)
		filter_transpose(f, acc, r.part, 0);
	else
		memset(r.part, 0, dwn * sizeof *r.part);
	/* at most a worker per share (tid < threads): its buffers are the tid's */
	hp_conv_parallel(a->pool, threads, f->shares, filter_shares, &r);
	if (!f->swap)
		filter_transpose(f, r.part, a->out[0].data, 1);
	hp_conv_threads_leave(saved);
	return 0;
}

const struct hp_op tk_op_conv_grad_filter = {
	.domain = TK_DOMAIN, .name = "ConvGradFilter", .min_inputs = 2, .max_inputs = 3,
	.min_outputs = 1, .max_outputs = 1, .prepare = conv_filter_prepare, .run = conv_filter_run,
	.flops = conv_flops,
};

/* ---- ConvTransposeGradData(dY, W) -> dX  (attrs x_shape, group, ...) ----
 * dX = Conv(dY, W) with W [C, M/group, k...] read as a Conv weight. */

static int convt_data_prepare(struct hp_graph *g, struct hp_node *n)
{
	struct hp_shape xs;
	struct cg_data d = { 0 };
	const struct hp_value *dy = tk_in(g, n, 0), *w = tk_in(g, n, 1);
	int rc;

	if ((rc = tk_need_f32(g, n, 0, 0)) < 0 || (rc = tk_need_f32(g, n, 1, 0)) < 0 ||
	    (rc = tk_attr_shape(g, n, "x_shape", &xs, 1)) < 0)
		return rc;
	if (w->shape.rank != xs.rank)
		return hp_node_error(g, n, HP_ESHAPE, "W rank does not match X");
	if ((rc = cgeom_init(g, n, &d.c, &dy->shape, &xs, w->shape.dims + 2)) < 0)
		return rc;
	if (w->shape.dims[0] != d.c.csmall || w->shape.dims[1] * d.c.group != d.c.cbig)
		return hp_node_error(g, n, HP_ESHAPE, "W channels do not match X/dY and group");
	conv_from(&d.c, 0, d.c.cbig, d.c.csmall, d.c.big, d.c.small, d.c.p, &d.cv);
	hp_conv_setup(&d.cv);
	if ((rc = data_priv(g, n, &d)) < 0)
		return rc;
	tk_set_out(g, n, 0, HP_F32, &xs);
	return 0;
}

const struct hp_op tk_op_convt_grad_data = {
	.domain = TK_DOMAIN, .name = "ConvTransposeGradData", .min_inputs = 2, .max_inputs = 2,
	.min_outputs = 1, .max_outputs = 1, .prepare = convt_data_prepare, .run = data_run,
	.flops = conv_flops,
};

/* ---- BiasGrad(dY[, acc]) -> dB [C]: sum over every dim but 1 --------------
 * In double, in ConvGradFilter's order (units from the last to the first,
 * see above): a band's node starts from the running sum of the bands
 * after it (input 1, double) and, with attribute partial = 1, hands its
 * own on in double, so the chain rounds once, as the whole node does. */

static int bias_prepare(struct hp_graph *g, struct hp_node *n)
{
	const struct hp_value *dy = tk_in(g, n, 0);
	struct hp_shape s = { 1, { 0 } };
	int rc = tk_need_f32(g, n, 0, 0);

	if (rc < 0)
		return rc;
	if (dy->shape.rank < 2)
		return hp_node_error(g, n, HP_ESHAPE, "dY needs a channel dim");
	s.dims[0] = dy->shape.dims[1];
	if (n->ninputs > 1 && n->inputs[1] >= 0) {
		const struct hp_value *acc = tk_in(g, n, 1);
		if (acc->dtype != HP_F64 || !hp_shape_equal(&acc->shape, &s))
			return hp_node_error(g, n, HP_ESHAPE, "the running sum (input 1) must be double, one per channel");
	}
	tk_set_out(g, n, 0, hp_attr_int(n, "partial", 0) ? HP_F64 : HP_F32, &s);
	return 0;
}

struct bias_job {
	const float *dy;
	const double *in;
	void *out;
	int out_f64;
	int64_t nb, ch, inner, unit;
};

/* Channels [c0, c1): each unit's sum in 8 double lanes and a fixed tree
 * (hpk_sum_f), added to the running sum from the last unit to the first.
 * A band's node holds whole units, so the chain adds what the whole node
 * adds; one running sum over every element was a chain of dependent adds. */
static void bias_range(void *arg, int64_t c0, int64_t c1, int tid)
{
	const struct bias_job *j = arg;

	(void)tid;
	for (int64_t c = c0; c < c1; c++) {
		double acc = j->in ? j->in[c] : 0;
		for (int64_t b = j->nb - 1; b >= 0; b--)
			for (int64_t u0 = (j->inner - 1) / j->unit * j->unit; j->inner > 0 && u0 >= 0; u0 -= j->unit) {
				int64_t len = u0 + j->unit < j->inner ? j->unit : j->inner - u0;
				acc += hpk_sum_f(j->dy + (b * j->ch + c) * j->inner + u0, len);
			}
		if (j->out_f64)
			((double *)j->out)[c] = acc;
		else
			((float *)j->out)[c] = (float)acc;
	}
}

static int bias_run(const struct hp_node *n, const struct hp_kargs *a)
{
	const struct hp_shape *s = &a->in[0].shape;
	int64_t nb = s->dims[0], ch = s->dims[1], inner = nb > 0 && ch > 0 ? hp_shape_numel(s) / (nb * ch) : 0;
	struct bias_job j = { .dy = a->in[0].data, .in = a->nin > 1 && a->in[1].data ? a->in[1].data : NULL,
			      .out = a->out[0].data, .out_f64 = a->out[0].dtype == HP_F64, .nb = nb, .ch = ch,
			      .inner = inner, .unit = inner };

	if (hp_attr_int(n, "hpdlf_unit_axis", hp_filter_unit_axis(nb)) == 2 && s->rank >= 4)
		j.unit = s->dims[2] ? inner / s->dims[2] : inner;
	j.unit = j.unit > 0 ? j.unit : 1;
	/* channels are independent: any split gives the same bits */
	hp_parallel_for(a->pool, ch, HPK_GRAIN / (nb * inner + 1) + 1, bias_range, &j);
	return 0;
}

const struct hp_op tk_op_bias_grad = {
	.domain = TK_DOMAIN, .name = "BiasGrad", .min_inputs = 1, .max_inputs = 2,
	.min_outputs = 1, .max_outputs = 1, .prepare = bias_prepare, .run = bias_run,
};
