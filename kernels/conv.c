/* Conv over OpenBLAS sgemm or dot products, six paths (hp_conv_setup picks one), and
 * depthwise convolutions (group == input channels) as direct loops
 * (conv_dw.c) where these sgemms are too thin:
 *  - grouped (conv_grp.c), where AVX2 and FMA exist: 2-D Conv nodes of
 *    2 to 32 channels per group (not depthwise) and stems of 1-4 input
 *    channels, as 4x24 register tiles over staged, phase-split input rows;
 *  - kxk (conv_kxk.c), where AVX2 and FMA exist: 2-D Conv nodes of 8 or
 *    more channels per group but 1x1 stride-1 and depthwise ones, as 6x16
 *    register tiles over W read
 *    in place and patches gathered per k chunk; the paths below stay for
 *    the rest, the gradients' forwards and CPUs without AVX2;
 *  - direct: a 1x1 convolution with unit strides and no padding multiplies X
 *    (conv_pw.c's own product where AVX2 and FMA exist, else sgemm);
 *  - shift (conv_shift.c): stride 1 with at least HP_SHIFT_MIN_CH input
 *    channels per group and planes wide enough that padding columns waste
 *    little: kvol accumulated sgemms over shifted views of a padded slab,
 *    no im2col; workers take runs of output planes (batch, group, plane);
 *  - dot (conv_dot.c): few output positions over the whole batch (ResNet's
 *    last stages): dot products of W's rows, read in place, and patch rows
 *    of all items, summed in an order fixed by K alone;
 *  - im2col, below, for everything else (K up to HP_PW_GEMM_MAX_K:
 *    conv_pw.c's product in place of sgemm, where AVX2 and FMA exist).
 *
 * im2col: the output of each (batch, group) is cut into tiles of columns; a tile's
 * column matrix [cin_g * kvol][tile] fits a bounded workspace (at most
 * HP_CONV_WS_MAX bytes whatever the volume), is built by hp_im2col and
 * multiplied by the group's weights straight into Y (ldc = output volume).
 *
 * Threading (measured in bench/bench_kernels.c): the pool's workers take
 * disjoint runs of tiles, each with its own slice of the workspace and
 * single-threaded BLAS, so im2col and sgemm of different tiles overlap and
 * there is one join per node.
 *
 * Tiles are fixed by the geometry in grid coordinates (conv_tile.c,
 * plan_tiles in conv_shift.c), never by the thread count or the extent of
 * the first axis: every output element comes from the same sgemm call
 * whatever the worker count, and in a band of the node (exec/split_band.c)
 * that starts at a multiple of hp_node_band_align().  Outputs are bitwise
 * equal across thread counts and budgets.
 */
#include <cblas.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/cpus.h"
#include "hpdlf/error.h"
#include "kernels/band.h"
#include "kernels/blas.h"
#include "kernels/conv_impl.h"
#include "kernels/fused_impl.h"
#include "kernels/ops.h"
#include "kernels/threadpool.h"

static int policy; /* 0 auto, 1 pool + 1-thread BLAS, 2 caller + BLAS threads */
static size_t tile_bytes = HP_CONV_TILE_BYTES;
static size_t ws_max = HP_CONV_WS_MAX;
static int shift_mode; /* 0 auto, 1 whenever possible, -1 never */

void hp_conv_set_shift(int mode)
{
	shift_mode = mode;
}

int hp_conv_shift_mode(void)
{
	return shift_mode;
}

size_t hp_conv_ws_max(void)
{
	return ws_max;
}

void hp_conv_set_ws_max(size_t b)
{
	ws_max = b ? b : HP_CONV_WS_MAX;
}

void hp_conv_set_policy(int p)
{
	policy = p;
}

void hp_conv_set_tile_bytes(size_t b)
{
	tile_bytes = b ? b : HP_CONV_TILE_BYTES;
}

/* Columns of an im2col workspace: the tiles of the expected workers (what
 * runs use), not the whole volume, within HP_CONV_WS_MAX. */
int64_t hp_conv_ws_cols(int64_t kdim, int64_t vol)
{
	int64_t cap = (int64_t)(ws_max / ((size_t)kdim * sizeof(float)));
	int64_t tile = (int64_t)(tile_bytes / ((size_t)kdim * sizeof(float)));

	tile = tile < HP_CONV_TILE_MIN_COLS ? HP_CONV_TILE_MIN_COLS : tile;
	if (cap > tile * hp_conv_ws_threads())
		cap = tile * hp_conv_ws_threads();
	if (cap < 64)
		cap = 64;
	return cap < vol ? cap : vol;
}

int64_t hp_conv_tile_cap(int64_t rows)
{
	int64_t cap = (int64_t)(tile_bytes / ((size_t)rows * sizeof(float)));

	cap = cap < HP_CONV_TILE_MIN_COLS ? HP_CONV_TILE_MIN_COLS : cap;
	return cap < HP_CONV_TILE_MAX_COLS ? cap : HP_CONV_TILE_MAX_COLS;
}

int hp_conv_threads_enter(struct hp_pool *pool, int *saved)
{
	int pool_mode = hp_pool_size(pool) > 1 && policy != 2;

	*saved = pool_mode;
	if (pool_mode)
		hp_blas_serial_enter();
	return pool_mode ? hp_pool_size(pool) : 1;
}

void hp_conv_threads_leave(int saved)
{
	if (saved)
		hp_blas_serial_leave();
}

void hp_conv_parallel(struct hp_pool *pool, int threads, int64_t n, hp_range_fn fn, void *arg)
{
	if (threads <= 1 || n <= 1) {
		fn(arg, 0, n, 0);
		return;
	}
	hp_parallel_for(pool, n, (n + threads - 1) / threads, fn, arg);
}

void hp_conv_steal(struct hp_pool *pool, int threads, int64_t n, int64_t unit, hp_range_fn fn, void *arg)
{
	if (threads <= 1 || n <= unit) {
		fn(arg, 0, n, 0);
		return;
	}
	hp_parallel_steal(pool, n, unit, threads, fn, arg);
}

int hp_conv_par_threads(struct hp_pool *pool, int threads, double flops)
{
	if (flops >= HP_CONV_PAR_MIN_FLOPS || (flops >= HP_CONV_PAR_MIN_POLLING && hp_pool_polling(pool)))
		return threads;
	return 1;
}

int64_t hp_conv_even_block(int64_t cols, int64_t nb, int64_t nr, int64_t others, int one)
{
	int64_t nblk = (cols + nb - 1) / nb, panels = (cols + nr - 1) / nr;

	if ((nblk < 2 && !(one && others == 1 && panels >= HP_CONV_EVEN_PANELS)) || others * nblk >= HP_CONV_EVEN_BLOCKS)
		return nb;
	nblk += nblk & 1;
	return (panels + nblk - 1) / nblk * nr;
}

struct conv_run {
	const struct hp_conv *cv;
	const float *x, *w, *b;
	float *y, *ws;
	const struct hp_epi *epi; /* im2col and direct: applied per tile, or NULL */
	const float *addend;
	int64_t per_thread;
	int64_t chunk;   /* shift: output planes per slab */
	size_t tmp;      /* shift: floats of the tile buffer */
};

/* The fused epilogue on a tile's rows while they are in cache. */
static void conv_tile_epi(const struct conv_run *r, int64_t nb, int64_t g, int64_t j0, int64_t nc)
{
	const struct hp_conv *cv = r->cv;

	for (int64_t m = 0; m < cv->cout_g && r->epi; m++) {
		int64_t i = (nb * cv->cout + g * cv->cout_g + m) * cv->yvol + j0;
		hp_epi_span(r->epi, r->y, r->addend, i, i + nc);
	}
}

static void conv_tile(const struct conv_run *r, int64_t item, float *col)
{
	const struct hp_conv *cv = r->cv;
	int64_t bg = item / cv->ct.per, nb = bg / cv->group, g = bg % cv->group, j0, j1, nc;
	const float *x = r->x + (nb * cv->cin + g * cv->cin_g) * cv->xvol;
	const float *w = r->w + g * cv->cout_g * cv->kdim;
	float *y;

	hp_ctile_range(&cv->ct, cv->g.grid, item % cv->ct.per, &j0, &j1);
	nc = j1 - j0;
	y = r->y + (nb * cv->cout + g * cv->cout_g) * cv->yvol + j0;
	/* the bias goes in first and sgemm adds onto it (beta 1): with beta 0
	 * OpenBLAS clears the tile in a pass of its own (sgemm_beta, 9% of
	 * MobileNetV2's inference), then the bias took another */
	if (!cv->direct && cv->kdim <= HP_PW_GEMM_MAX_K && hp_pw_available()) {
		const float *bias = r->b ? r->b + g * cv->cout_g : NULL;
		hp_im2col(&cv->g, cv->cin_g, x, j0, j1, col);
		/* the epilogue in the tiles' registers where it can (MobileNetV2's
		 * stem: its Clip pass was 1.5% of an inference) */
		if (!r->epi || !hp_pw_gemm_epi(cv->cout_g, nc, cv->kdim, w, cv->kdim, col, nc, bias, y, cv->yvol, r->epi,
					       r->addend ? r->addend + (y - r->y) : NULL)) {
			hp_pw_gemm(cv->cout_g, nc, cv->kdim, w, cv->kdim, col, nc, bias, y, cv->yvol);
			conv_tile_epi(r, nb, g, j0, nc);
		}
		return;
	}
	for (int64_t m = 0; m < cv->cout_g && r->b; m++) {
		float bias = r->b[g * cv->cout_g + m], *row = y + m * cv->yvol;
		for (int64_t j = 0; j < nc; j++)
			row[j] = bias;
	}
	if (cv->direct) {
		hp_sgemm(CblasNoTrans, CblasNoTrans, (int)cv->cout_g, (int)nc, (int)cv->kdim, 1.0f,
			    w, (int)cv->kdim, x + j0, (int)cv->xvol, r->b ? 1.0f : 0.0f, y, (int)cv->yvol);
	} else {
		hp_im2col(&cv->g, cv->cin_g, x, j0, j1, col);
		hp_sgemm(CblasNoTrans, CblasNoTrans, (int)cv->cout_g, (int)nc, (int)cv->kdim, 1.0f,
			    w, (int)cv->kdim, col, (int)nc, r->b ? 1.0f : 0.0f, y, (int)cv->yvol);
	}
	conv_tile_epi(r, nb, g, j0, nc);
}

static void conv_range(void *arg, int64_t b, int64_t e, int tid)
{
	const struct conv_run *r = arg;

	for (int64_t i = b; i < e; i++)
		conv_tile(r, i, r->ws + tid * r->per_thread);
}

/* Shift-path units of planes: a tile's planes, or one plane when tiles are
 * rows of a plane; units start at multiples of the tile size. */
static int64_t shift_unit(const struct hp_shift *s)
{
	return s->tplanes ? s->talign : 1;
}

static int64_t shift_units(const struct hp_shift *s)
{
	return (s->out[0] + shift_unit(s) - 1) / shift_unit(s);
}

/* Shift-path work items: (batch, group, unit of output planes), where a
 * folded geometry's planes are the batch items. */
static int64_t shift_items(const struct hp_conv *cv)
{
	return cv->batch / cv->sh.nfold * cv->group * shift_units(&cv->sh);
}

/* Shift path: a worker takes its run of units in chunks (a multiple of the
 * unit), one slab each. */
static void shift_range(void *arg, int64_t b, int64_t e, int tid)
{
	const struct conv_run *r = arg;
	const struct hp_conv *cv = r->cv;
	const struct hp_shift *s = &cv->sh;
	float *tmp = r->ws + tid * r->per_thread, *slab = tmp + r->tmp;
	int64_t planes = s->out[0], nu = shift_units(s), unit = shift_unit(s);

	while (b < e) {
		int64_t bg = b / nu, u = b % nu, nb = bg / cv->group, g = bg % cv->group;
		int64_t d0 = u * unit, d1 = d0 + r->chunk, r0, r1;
		const float *x = r->x + (nb * cv->cin + g * cv->cin_g) * cv->xvol;
		float *y = r->y + (nb * cv->cout + g * cv->cout_g) * cv->yvol;

		if (d1 > (u + e - b) * unit)
			d1 = (u + e - b) * unit;
		if (d1 > planes)
			d1 = planes;
		hp_shift_slab(s, x, d0, d1, slab);
		for (int64_t t = 0; t < hp_shift_ntiles(s, d1 - d0); t++) {
			hp_shift_tile_rows(s, d0, d1, t, &r0, &r1);
			hp_shift_tile(s, r->w + g * cv->cout_g * cv->kdim, slab, d0, d1, r0, r1, tmp, y, cv->yvol,
				      r->b ? r->b + g * cv->cout_g : NULL);
		}
		b += (d1 - d0 + unit - 1) / unit;
	}
}

/* Shift path weights: wk[g][k][m][c] from W [cout][cin_g][kvol], or with
 * flip from a weight [cin][cout_g][kvol] read transposed and mirrored
 * (the input gradient of a stride-1 Conv).  Unflipped, W is read in runs
 * of SHIFT_WBLK channels that stay in L1 while kvol rows are written:
 * reading all of W kvol times at a stride of kvol floats cost 8% of
 * ResNet-18's inference (it runs per call, as weights may change). */
#define SHIFT_WBLK 64
static void shift_weights(const struct hp_conv *cv, const float *w, float *wk)
{
	int64_t kv = cv->g.kvol, og = cv->cout_g, ig = cv->cin_g;

	for (int64_t g = 0; g < cv->group && cv->wflip; g++)
		for (int64_t k = 0; k < kv; k++)
			for (int64_t m = 0; m < og; m++) {
				float *dst = wk + ((g * kv + k) * og + m) * ig;
				for (int64_t c = 0; c < ig; c++)
					dst[c] = w[((g * ig + c) * og + m) * kv + kv - 1 - k];
			}
	for (int64_t gm = 0; gm < cv->group * og && !cv->wflip; gm++)
		for (int64_t c0 = 0; c0 < ig; c0 += SHIFT_WBLK) {
			int64_t c1 = c0 + SHIFT_WBLK < ig ? c0 + SHIFT_WBLK : ig, g = gm / og, m = gm % og;
			const float *src = w + gm * ig * kv;
			for (int64_t k = 0; k < kv; k++) {
				float *dst = wk + ((g * kv + k) * og + m) * ig;
				for (int64_t c = c0; c < c1; c++)
					dst[c] = src[c * kv + k];
			}
		}
}

static int shift_fit(const struct hp_conv *cv, size_t floats, int threads, int64_t *chunk)
{
	size_t tmp = (size_t)(cv->cout_g * cv->sh.tcols);

	for (; threads > 1; threads--)
		if ((*chunk = hp_shift_chunk(&cv->sh, floats / (size_t)threads, tmp)) > 0)
			return threads;
	*chunk = hp_shift_chunk(&cv->sh, floats, tmp);
	return 1;
}

int hp_conv_ws_threads(void)
{
	int n = hp_cpus_online();

	return n > 8 ? 8 : n;
}

/* Shift-path workspace: reordered weights plus, per expected thread, a tile
 * buffer and a slab of its share of planes (within HP_CONV_WS_MAX). */
static size_t shift_ws(const struct hp_conv *cv)
{
	const struct hp_shift *s = &cv->sh;
	int nt = cv->lean ? 1 : hp_conv_ws_threads();
	int64_t items = shift_items(cv), share = (items + nt - 1) / nt * shift_unit(s);
	size_t wk = (size_t)(cv->cout * cv->kdim), tmp = (size_t)(cv->cout_g * s->tcols);
	/* whether a tile fits is judged on the uncapped tile (the same in
	 * every band of the node) */
	size_t one = (size_t)(cv->cout_g * (s->tplanes ? s->talign * s->pplane : s->tcols)) +
		     hp_shift_slab_floats(s, s->tplanes ? s->talign : 1);
	size_t want = tmp + hp_shift_slab_floats(s, hp_shift_slab_planes(s, share));
	size_t cap = ws_max / sizeof(float);

	if (wk + (size_t)nt * one > cap)
		return 0;
	want = wk + (size_t)nt * want;
	return (want < cap ? want : cap) * sizeof(float);
}

/* Whether the shift path suits the geometry (the band copies of a node
 * inherit the choice instead: hpdlf_path). */
static int shift_wanted(const struct hp_conv *cv, int folded)
{
	double min_useful = folded ? HP_SHIFT_MIN_USEFUL_FOLDED : HP_SHIFT_MIN_USEFUL;

	if (cv->path >= 0)
		return cv->path == HP_CONV_PATH_SHIFT;
	if (shift_mode > 0)
		return 1;
	/* A 1-D or 2-D gradient's product (ConvGradData's Conv of dY with W
	 * mirrored, no node of its own) never: its band nodes, one or a few
	 * items of the whole cut out of core, choose anew (no hpdlf_path pins
	 * them), and both this test (items) and the folding read the batch.
	 * SqueezeNet's Fire at 11x11 (3x3, 128 -> 32) took this path for its
	 * two items and col2im for one, and trained at a quarter of its peak
	 * its gradients came out an ulp off the in-core ones. */
	if (!cv->node && cv->nd < 3)
		return 0;
	/* a 2-D or 1-D node of one item would run on one worker */
	return cv->g.kvol > 1 && cv->cin_g >= HP_SHIFT_MIN_CH && (cv->nd == 3 || shift_items(cv) >= 2) &&
	       hp_shift_useful(&cv->sh) >= min_useful;
}

static int direct_ok(const struct hp_colgeom *c)
{
	return c->kvol == 1 && c->pad[0] == 0 && c->pad[1] == 0 && c->pad[2] == 0 && c->stride[0] == 1 &&
	       c->stride[1] == 1 && c->stride[2] == 1 && c->grid_vol == c->img_vol;
}

/* The batch at which the shift path's workspace is at its largest: its
 * slabs and tiles full (from HP_SHIFT_FOLDED_SLAB_TILES tiles of folded
 * planes per worker on, or HP_SHIFT_SLAB_PLANES planes). */
#define SHIFT_WS_MOST_BATCH ((int64_t)1 << 16)

size_t hp_conv_shift_ws_most(const struct hp_conv *cv)
{
	struct hp_conv o = *cv;
	int folded;

	o.batch = SHIFT_WS_MOST_BATCH;
	o.lean = 0;
	if (direct_ok(&o.g) || o.g.kvol < 2 || o.cin_g < HP_SHIFT_MIN_CH || hp_shift_init(&o.sh, &o.g, o.cin_g, o.cout_g))
		return 0;
	folded = o.nd <= 2 && hp_shift_fold(&o.sh, o.batch, o.cin * o.xvol, o.cout * o.yvol) == 0;
	if (hp_shift_useful(&o.sh) < (folded ? HP_SHIFT_MIN_USEFUL_FOLDED : HP_SHIFT_MIN_USEFUL))
		return 0;
	return shift_ws(&o);
}

static int direct_ok(const struct hp_colgeom *c);
static void setup_paths(struct hp_conv *cv, int allow_dot);
static int pw_sub(const struct hp_conv *cv, struct hp_conv *v, int check_ws);
static int pw_strided_geo(const struct hp_conv *cv);
static size_t pw_strided_ws(const struct hp_conv *cv);

/* Whether the dot path suits the node: few output positions over the
 * whole batch (HP_DOT_MAX_COLS), where every sgemm is thin and packs the
 * weights for little work (bench/bench_conv_libs.c, classes 3x3-tiny,
 * 3x3-r4, 3x3-s2-r4: 45-55 GFLOP/s against 12-33).  Not a 1x1 stride-1
 * Conv, which multiplies X itself (1x1-mb7: 70 against 34), nor wider
 * outputs, where sgemm is at 55-80 and the dot kernel at about 50. */
static int dot_wanted(const struct hp_conv *cv)
{
	if (cv->transpose || cv->wflip || !hp_dot_available())
		return 0;
	if (cv->path >= 0)
		return cv->path == HP_CONV_PATH_DOT;
	if (hp_conv_dot_mode() != 0)
		return hp_conv_dot_mode() > 0;
	/* A gradient's product (ConvTransposeGradData, no node of its own)
	 * decides per batch item: its band nodes, one or a few items of the
	 * whole, choose anew (no hpdlf_path pins them), and by the whole
	 * batch's columns the tiny 3-D U-Net's deepest up-sampling took
	 * im2col whole (2 x 64 columns) and this path in bands of one item
	 * (64): out of core its encoder's gradients came out an ulp off. */
	struct hp_conv one = *cv;
	if (!cv->node)
		one.batch = 1;
	return !direct_ok(&cv->g) && one.batch * cv->yvol <= HP_DOT_MAX_COLS && cv->cout_g >= 16 &&
	       cv->kdim >= 64 && hp_dot_workspace(&one, hp_conv_ws_threads()) <= HP_DOT_WS_MAX;
}

/* Whether the kxk path suits the node (conv_kxk.c): any Conv but the 1x1
 * stride-1 one (conv_pw.c's) and depthwise ones (conv_dw*.c), unless a test
 * forces the shift or dot path.  Not for fewer than HP_KXK_MIN_CH input or
 * output channels per group, where packing the patches costs as much as
 * the products (bench/bench_conv_libs.c, GF/s per thread against the
 * path it replaces: the 3-channel stems 3x3-s2-mb 29 against 46 and
 * u-128c3 32 against 53, grouped 8.8 against 9.5; it wins 3x3-tiny 80
 * against 34, 3x3-r4 83 against 36, u-32 77 against 51). */
static int kxk_wanted(const struct hp_conv *cv)
{
	if (!hp_kxk_eligible(cv))
		return 0;
	if (cv->path >= 0)
		return cv->path == HP_CONV_PATH_KXK;
	if (hp_conv_kxk_mode() != 0)
		return hp_conv_kxk_mode() > 0;
	if (hp_conv_dot_mode() > 0 || hp_conv_shift_mode() > 0)
		return 0;
	/* 2-D, and 3-D where the AVX-512 tiles run: the 3-D U-Net's 3x3x3
	 * layers (16-128 channels, 48^3 to 6^3) ran at 256.5 GF/s on the
	 * AVX-512 tiles against 176.4 on the shift path's sgemms
	 * (hpdlf-bench-kernels --shift -1 against the auto choice, 2 threads),
	 * 96-106% of sgemm's peak per CPU-second against 62-79%; the whole
	 * 48^3 inference 68-73 -> 46 ms.  1-D was not measured.  3-D nodes
	 * of fewer channels the shift path leaves: kxk3_wanted. */
	if (cv->nd == 3 && !hp_kxk_wide_ok())
		return 0;
	return cv->nd >= 2 && !direct_ok(&cv->g) && cv->cin_g >= HP_KXK_MIN_CH && cv->cout_g >= HP_KXK_MIN_CH;
}

/* Whether a 3-D node the shift path leaves (fewer than HP_SHIFT_MIN_CH
 * input channels per group, planes too narrow for its slabs) takes the
 * kxk path rather than im2col, on the auto choice, where its AVX-512 tiles
 * run (the AVX2 ones were not measured here): it beats im2col's column matrices and sgemm there (the test model
 * unet3d_tiny, 4-16 channels at 16^3 to 4^3: 1960 -> 1530 ms of CPU time
 * for 2050 inferences, 1 thread; the 48^3 U-Net of tools/make_unet3d.py,
 * whose stem and two 6^3 convs change path: 1657 -> 1622 ms for 12; 5 and 3 runs
 * alternating, medians of perf stat's task-clock). */
static int kxk3_wanted(const struct hp_conv *cv)
{
	return cv->path < 0 && hp_conv_kxk_mode() == 0 && hp_conv_dot_mode() <= 0 && hp_conv_shift_mode() <= 0 &&
	       hp_kxk_eligible(cv) && hp_kxk_wide_ok() && cv->nd == 3 && !cv->direct;
}

void hp_conv_setup(struct hp_conv *cv)
{
	setup_paths(cv, 1);
}

static void setup_paths(struct hp_conv *cv, int allow_dot)
{
	const struct hp_colgeom *c = &cv->g;

	cv->shift = 0;
	cv->dot = 0;
	cv->kxk = 0;
	cv->grp = 0;
	cv->workspace = 0;
	/* channels alone decide, so band copies of a node choose it too */
	cv->dw = !cv->transpose && !cv->wflip && hp_dw_eligible(cv->group, cv->cin, cv->cout) &&
		 (cv->path < 0 || cv->path == HP_CONV_PATH_DW);
	cv->direct = !cv->dw && direct_ok(c) && (cv->path < 0 || cv->path == HP_CONV_PATH_DIRECT);
	if (cv->dw)
		return;
	if ((cv->grp = allow_dot && hp_grp_wanted(cv))) {
		cv->direct = 0;
		cv->workspace = hp_grp_workspace(cv, cv->lean ? 1 : hp_conv_ws_threads());
		return;
	}
	if ((cv->kxk = allow_dot && kxk_wanted(cv))) {
		struct hp_conv v;
		cv->direct = 0;
		cv->workspace = hp_kxk_workspace(cv, cv->lean ? 1 : hp_conv_ws_threads());
		if (pw_sub(cv, &v, 0) && cv->workspace < (size_t)(cv->batch * cv->cin * cv->yvol) * sizeof(float))
			cv->workspace = (size_t)(cv->batch * cv->cin * cv->yvol) * sizeof(float); /* its gather */
		if (pw_strided_geo(cv) && cv->workspace < pw_strided_ws(cv))
			cv->workspace = pw_strided_ws(cv);
		if (hp_grp_dense(cv)) { /* in core, W packed: conv_grp.c's tiles */
			size_t gw = hp_grp_workspace(cv, cv->lean ? 1 : hp_conv_ws_threads());
			cv->workspace = cv->workspace > gw ? cv->workspace : gw;
		}
		return;
	}
	if ((cv->dot = allow_dot && dot_wanted(cv))) {
		cv->direct = 0;
		cv->workspace = hp_dot_workspace(cv, cv->lean ? 1 : hp_conv_ws_threads());
		return;
	}
	if (!cv->direct && shift_mode >= 0 && hp_shift_init(&cv->sh, c, cv->cin_g, cv->cout_g) == 0) {
		/* 2-D and 1-D: the batch becomes the plane axis */
		int folded = cv->nd <= 2 &&
			     hp_shift_fold(&cv->sh, cv->batch, cv->cin * cv->xvol, cv->cout * cv->yvol) == 0;
		if (shift_wanted(cv, folded)) {
			cv->workspace = shift_ws(cv);
			cv->shift = cv->workspace > 0;
		}
	}
	if (cv->shift)
		return;
	if (allow_dot && kxk3_wanted(cv)) {
		cv->kxk = 1;
		cv->direct = 0;
		cv->workspace = hp_kxk_workspace(cv, cv->lean ? 1 : hp_conv_ws_threads());
		return;
	}
	hp_ctile_plan(c->grid, cv->direct ? HP_CONV_DIRECT_COLS : hp_conv_tile_cap(cv->kdim), &cv->ct);
	if (cv->direct) { /* the tiles above stay for hp_conv_band_align */
		if (hp_pw_available())
			cv->workspace = hp_pw_workspace(cv, cv->lean ? 1 : hp_conv_ws_threads());
		return;
	}
	cv->ws_cols = cv->lean ? cv->ct.maxcols : hp_conv_ws_cols(cv->kdim, cv->yvol);
	if (cv->ws_cols < cv->ct.maxcols)
		cv->ws_cols = cv->ct.maxcols;
	cv->workspace = (size_t)cv->ws_cols * (size_t)cv->kdim * sizeof(float);
}

int hp_conv_path(const struct hp_conv *cv)
{
	if (cv->dw)
		return HP_CONV_PATH_DW;
	if (cv->dot)
		return HP_CONV_PATH_DOT;
	if (cv->kxk)
		return HP_CONV_PATH_KXK;
	if (cv->grp)
		return HP_CONV_PATH_GRP;
	return cv->direct ? HP_CONV_PATH_DIRECT : cv->shift ? HP_CONV_PATH_SHIFT : HP_CONV_PATH_IM2COL;
}

/* The dot path computes every output alike wherever a band starts
 * (tests/kernels/test_conv.c: test_dot_bands), so any alignment would do;
 * it reports the alignment of the path it replaces, so that the band pass
 * cuts the graph where it did before this path existed.  Out-of-core
 * training's bits depend on those cuts: with the dot path forced on every
 * Conv, train-refs' bn_cnn (adam, adamw) lost bitwise in-core losses at
 * step 12, although each band of its convolutions is bitwise the whole
 * (same test, its shapes), and kept them when no dot Conv was banded: the
 * path's larger workspace made the band pass split other nodes (49
 * kernels per step instead of 44 in --plan),
 * and reductions over batch bands downstream (the weight gradient) round
 * with the cut. */
static int64_t dot_band_align(const struct hp_conv *cv, int axis)
{
	struct hp_conv o = *cv;

	o.path = -1;
	setup_paths(&o, 0);
	return hp_conv_band_align(&o, axis);
}

int64_t hp_conv_band_align(const struct hp_conv *cv, int axis)
{
	const struct hp_shift *s = &cv->sh;
	int dim = 3 - cv->nd + axis - 2;

	if (cv->dot || cv->kxk || cv->grp) /* the same holds for the kxk and grouped paths */
		return dot_band_align(cv, axis);
	if (cv->dw) /* every element alike wherever a band starts */
		return axis == 0 || (axis >= 2 && dim >= 0 && dim <= 2) ? 1 : -1;
	if (axis == 0) /* folded planes are the batch items */
		return cv->shift && s->nfold > 1 && s->tplanes ? s->talign : 1;
	if (axis < 2 || dim < 0 || dim > 2)
		return -1;
	if (cv->shift) /* 2-D and 1-D tiles span whole planes of the batch */
		return cv->nd == 3 && dim == 0 ? shift_unit(s) : -1;
	return hp_ctile_align(&cv->ct, dim);
}

static int conv_prepare(struct hp_graph *g, struct hp_node *n)
{
	struct hp_conv *cv = malloc(sizeof *cv);
	int rc;

	if (!cv)
		return hp_node_error(g, n, -ENOMEM, "out of memory");
	rc = hp_conv_parse(g, n, 0, cv);
	if (rc < 0) {
		free(cv);
		return rc;
	}
	hp_conv_setup(cv);
	n->workspace = cv->workspace;
	n->priv = cv;
	return 0;
}

static void run_shift(const struct hp_conv *cv, struct conv_run *r, struct hp_pool *pool, int threads)
{
	size_t wk = (size_t)(cv->cout * cv->kdim), floats = cv->workspace / sizeof(float) - wk;

	shift_weights(cv, r->w, r->ws);
	r->w = r->ws;
	threads = shift_fit(cv, floats, threads, &r->chunk);
	r->tmp = (size_t)(cv->cout_g * cv->sh.tcols);
	r->per_thread = (int64_t)(floats / (size_t)threads);
	r->ws += wk;
	hp_conv_parallel(pool, threads, shift_items(cv), shift_range, r);
}

static void conv_forward_run(const struct hp_conv *cv, struct conv_run *r, struct hp_pool *pool)
{
	int saved, threads;
	int64_t items = cv->batch * cv->group;

	if (cv->dw) {
		struct hp_dw d = { .g = cv->g, .batch = cv->batch, .cin = cv->cin, .mult = cv->cout / cv->cin,
				   .epi = r->epi, .addend = r->addend };
		hp_dw_forward(&d, r->x, r->w, r->b, r->y, pool);
		return;
	}
	if (cv->direct && hp_pw_available()) {
		hp_pw_forward(cv, r->x, r->w, r->b, r->y, r->ws, pool, r->epi, r->addend);
		return;
	}
	threads = hp_conv_threads_enter(pool, &saved);
	if (cv->shift) {
		run_shift(cv, r, pool, threads);
		hp_conv_threads_leave(saved);
		return;
	}
	/* each worker needs room for the widest tile */
	if (!cv->direct && threads > cv->ws_cols / cv->ct.maxcols)
		threads = (int)(cv->ws_cols / cv->ct.maxcols);
	r->per_thread = cv->direct ? 0 : cv->ct.maxcols * cv->kdim;
	/* tiles are independent, each in its runner's slice of the workspace
	 * (the tiling is fixed by the workspace, not by who runs a tile):
	 * stolen, so that a late worker leaves its tiles to the caller
	 * (MobileNetV2's and the U-Net's stems before conv_grp.c) */
	hp_conv_steal(pool, threads, items * cv->ct.per, 1, conv_range, r);
	hp_conv_threads_leave(saved);
}

/* An omitted addend: the activation only; nothing to do: NULL. */
static const struct hp_epi *epi_norm(const struct hp_epi *epi, const float *addend, struct hp_epi *e)
{
	if (!epi)
		return NULL;
	*e = *epi;
	if (!addend)
		e->add = HP_EPI_ADD_NONE;
	return e->act == HP_EPI_NONE && e->add == HP_EPI_ADD_NONE ? NULL : e;
}

/* A 1x1 Conv of stride 2 or more without pads at a plane conv_pwt.c's
 * packed tiles take, on the kxk path: as v, the stride-1 1x1 over X
 * subsampled ([batch][cin][grid], gathered into the workspace), which
 * conv_pwt.c runs from W^T packed once (exec/fuse_pack.c).  Both paths
 * compute each output as one chain from its bias over k in order, so
 * packed or not, the bits are the same.  ResNeXt-50's stride-2 shortcut
 * at 64x64 (1024 -> 2048, 4x4 -> 2x2, 8 MB of W) had kxk read W in place
 * per micro-tile of 6 rows from memory: 64 MB of such 1x1s ran in 4.1-4.2
 * ms (1 thread) against ONNX Runtime's 1.9-2.0. */
static int pw_sub(const struct hp_conv *cv, struct hp_conv *v, int check_ws)
{
	const struct hp_colgeom *c = &cv->g;

	if (!cv->node || !cv->kxk || cv->transpose || cv->wflip || cv->group != 1 || c->kvol != 1 ||
	    c->stride[1] * c->stride[2] < 2 || c->stride[0] != 1 || c->img[0] != 1 || c->grid[0] != 1)
		return 0;
	for (int d = 0; d < 3; d++) /* no pads, and no output past the image's last sample */
		if (c->pad[d] || (c->img[d] - 1) / c->stride[d] + 1 != c->grid[d])
			return 0;
	if (check_ws && (size_t)(cv->batch * cv->cin * cv->yvol) * sizeof(float) > cv->workspace)
		return 0;
	*v = *cv;
	v->kxk = 0;
	v->direct = 1;
	v->xvol = cv->yvol;
	for (int d = 0; d < 3; d++) {
		v->g.img[d] = c->grid[d];
		v->g.stride[d] = 1;
	}
	v->g.img_vol = c->grid_vol;
	return hp_pwt_packs(v);
}

/* A 1x1 Conv of stride 2 or more without pads run unpacked (training's
 * forward, inference where W is not packed): the batch items' X
 * subsampled into the workspace, a few items at a time, then conv_pw.c's
 * product (v: the stride-1 1x1 over them) instead of the kxk path's
 * micro-tiles.  Both compute each output as one chain from its bias over
 * k in order (pw_sub), so the bits are the kxk path's.  The kxk path's
 * workspace grows to an item's subsample and the threads' panels where it
 * was smaller (pw_strided_ws).  bench_conv_libs.c --fwd, GF/s a
 * CPU-second, kxk -> here, at a load of 12-20: ResNet's shortcuts 1x1-s2
 * 46 -> 89, 1x1-s2-224 61 -> 86; ResNeXt-50's at 4x4, 1x1-t2s2, 16 -> 38
 * (8 MB of W read once for 4 positions an item). */
static int pw_strided_geo(const struct hp_conv *cv)
{
	const struct hp_colgeom *c = &cv->g;

	if (!cv->kxk || hp_conv_kxk_mode() > 0 || !hp_pw_available() || cv->transpose || cv->wflip ||
	    cv->group != 1 || c->kvol != 1 || c->stride[1] * c->stride[2] < 2 || c->stride[0] != 1 ||
	    c->img[0] != 1 || c->grid[0] != 1)
		return 0;
	for (int d = 0; d < 3; d++) /* no pads, and no output past the image's last sample */
		if (c->pad[d] || (c->img[d] - 1) / c->stride[d] + 1 != c->grid[d])
			return 0;
	return 1;
}

/* conv_pw.c's panel of X for one thread (PW_KC x PW_NB floats). */
static int64_t pw_panel_floats(const struct hp_conv *cv)
{
	return (cv->kdim < 256 ? cv->kdim : 256) * 128;
}

/* Bytes pw_strided needs at least: an item's subsample, the threads' panels. */
static size_t pw_strided_ws(const struct hp_conv *cv)
{
	int64_t threads = cv->lean ? 1 : hp_conv_ws_threads();

	return (size_t)(cv->cin * cv->yvol + threads * pw_panel_floats(cv)) * sizeof(float);
}

/* Sets *items, the items subsampled at a time. */
static int pw_strided(const struct hp_conv *cv, struct hp_conv *v, int64_t *items)
{
	const struct hp_colgeom *c = &cv->g;
	int64_t wsf = (int64_t)(cv->workspace / sizeof(float)), gi = cv->cin * cv->yvol;
	int64_t threads = cv->lean ? 1 : hp_conv_ws_threads(), panel = pw_panel_floats(cv);

	if (!pw_strided_geo(cv) || wsf < gi + panel)
		return 0;
	int64_t n = (wsf - threads * panel) / gi;
	*items = n < 1 ? 1 : n < cv->batch ? n : cv->batch;
	*v = *cv;
	v->kxk = 0;
	v->direct = 1;
	v->batch = *items;
	v->xvol = cv->yvol;
	for (int d = 0; d < 3; d++) {
		v->g.img[d] = c->grid[d];
		v->g.stride[d] = 1;
	}
	v->g.img_vol = c->grid_vol;
	v->workspace = (size_t)(wsf - *items * gi) * sizeof(float);
	return 1;
}

/* dst[c][i][j] = src[c][i * s1][j * s2] over n planes of the image. */
static void pw_subsample(const struct hp_conv *cv, const float *x, int64_t n, float *dst)
{
	const struct hp_colgeom *c = &cv->g;
	int64_t oh = c->grid[1], ow = c->grid[2], iw = c->img[2], s1 = c->stride[1], s2 = c->stride[2];

	for (int64_t p = 0; p < n; p++, x += cv->xvol)
		for (int64_t i = 0; i < oh; i++, dst += ow)
			for (int64_t j = 0; j < ow; j++)
				dst[j] = x[i * s1 * iw + j * s2];
}

static void pw_strided_forward(const struct hp_conv *cv, struct hp_conv *v, int64_t items, const float *x,
			       const float *w, const float *b, float *y, float *ws, struct hp_pool *pool,
			       const struct hp_epi *epi, const float *addend)
{
	int64_t yitem = cv->cout * cv->yvol;

	for (int64_t i0 = 0; i0 < cv->batch; i0 += items) {
		v->batch = cv->batch - i0 < items ? cv->batch - i0 : items;
		pw_subsample(cv, x + i0 * cv->cin * cv->xvol, v->batch * cv->cin, ws);
		/* a per-channel or scalar addend repeats with every item */
		hp_pw_forward(v, ws, w, b, y + i0 * yitem, ws + items * cv->cin * cv->yvol, pool, epi,
			      addend && epi && epi->add == HP_EPI_ADD_FULL ? addend + i0 * yitem : addend);
	}
}

int hp_conv_pw_strided(const struct hp_conv *cv)
{
	struct hp_conv v;
	int64_t items;

	return pw_strided(cv, &v, &items);
}

int hp_conv_pwt_packs(const struct hp_conv *cv)
{
	struct hp_conv v;

	return hp_pwt_packs(cv) || pw_sub(cv, &v, 1);
}

int hp_conv_forward_packed(const struct hp_conv *cv, const float *x, const float *wt, const float *b, float *y,
			   float *ws, struct hp_pool *pool, const struct hp_epi *epi, const float *addend)
{
	struct hp_epi e;
	struct hp_conv v;

	if (pw_sub(cv, &v, 1)) {
		const struct hp_colgeom *c = &cv->g;
		int64_t oh = c->grid[1], ow = c->grid[2], iw = c->img[2];
		for (int64_t nc = 0; nc < cv->batch * cv->cin; nc++) {
			const float *src = x + nc * cv->xvol;
			float *dst = ws + nc * cv->yvol;
			for (int64_t i = 0; i < oh; i++)
				for (int64_t j = 0; j < ow; j++)
					dst[i * ow + j] = src[i * c->stride[1] * iw + j * c->stride[2]];
		}
		return hp_pwt_forward_packed(&v, ws, wt, b, y, pool, epi, addend);
	}
	return hp_grp_forward_packed(cv, x, wt, b, y, ws, pool, epi_norm(epi, addend, &e), addend);
}

int hp_dw_packs(const struct hp_conv *cv)
{
	return cv->dw && cv->g.img[0] == 1 && (hp_dwkz_on(&cv->g) || hp_dwz_packs(&cv->g));
}

int hp_dw_forward_packed(const struct hp_conv *cv, const float *x, const float *w, const float *wp, const float *b,
			 float *y, struct hp_pool *pool, const struct hp_epi *epi, const float *addend)
{
	struct hp_epi e;
	struct hp_dw d = { .g = cv->g, .batch = cv->batch, .cin = cv->cin, .mult = cv->cout / cv->cin,
			   .addend = addend, .wpack = wp };

	if (!cv->dw)
		return 0;
	d.epi = epi_norm(epi, addend, &e);
	hp_dw_forward(&d, x, w, b, y, pool);
	return 1;
}

void hp_conv_forward_epi(const struct hp_conv *cv, const float *x, const float *w, const float *b, float *y,
			 float *ws, struct hp_pool *pool, const struct hp_epi *epi, const float *addend)
{
	struct conv_run r = { .cv = cv, .x = x, .w = w, .b = b, .y = y, .ws = ws, .addend = addend };
	struct hp_epi e;
	struct hp_conv v;

	epi = epi_norm(epi, addend, &e);
	if (cv->dot) {
		hp_dot_forward(cv, x, w, b, y, ws, pool, epi, addend);
		return;
	}
	int64_t items;
	if (pw_strided(cv, &v, &items)) {
		pw_strided_forward(cv, &v, items, x, w, b, y, ws, pool, epi, addend);
		return;
	}
	if (cv->kxk && !hp_grp_dense_unpacked(cv) && !hp_grp_dense_flip_runs(cv)) {
		hp_kxk_forward(cv, x, w, b, y, ws, pool, epi, addend);
		return;
	}
	if (cv->grp || cv->kxk) {
		hp_grp_forward(cv, x, w, b, y, ws, pool, epi, addend);
		return;
	}
	/* im2col and direct tiles, depthwise planes apply it as they finish;
	 * the shift path after */
	r.epi = cv->shift ? NULL : epi;
	conv_forward_run(cv, &r, pool);
	if (epi && !r.epi)
		hp_epi_run(epi, y, addend, cv->batch * cv->cout * cv->yvol, pool);
}

void hp_conv_forward(const struct hp_conv *cv, const float *x, const float *w, const float *b, float *y, float *ws,
		     struct hp_pool *pool)
{
	hp_conv_forward_epi(cv, x, w, b, y, ws, pool, NULL, NULL);
}

/* Inference: the dot, KxK and grouped paths compute every output by one
 * chain wherever a band starts (tests/kernels/test_conv.c: test_dot_bands,
 * test_kxk_run, the grouped cases), but report the alignment of the path
 * they replace (dot_band_align), which on rows can be none: a 2-D conv
 * whose batch the shift path folds into its tiles.  Where that leaves no
 * cut on the axis, any row does; elsewhere the cuts stay where they were
 * (finer ones let the band search take plans its fixed model favours and
 * that ran slower: the bench's 3-D U-Net, kernels/conv_transpose.c).  The
 * 2-D U-Net of bench/make_bench_models.py (batch 2, 128x128) so runs at a
 * quarter of its peak; it needed 42%. */
static int64_t infer_align(const struct hp_conv *cv, int axis)
{
	int dim = 3 - cv->nd + axis - 2;
	int64_t a = hp_conv_band_align(cv, axis), extent;

	if (!(cv->dot || cv->kxk || cv->grp) || (axis != 0 && (axis < 2 || dim < 0 || dim > 2)))
		return a;
	extent = axis == 0 ? cv->batch : cv->g.grid[dim];
	return a >= 1 && a < extent ? a : 1;
}

int64_t hp_node_band_align(struct hp_graph *g, struct hp_node *n, int axis, int training, int *path)
{
	int transpose = !strcmp(n->op_type, "ConvTranspose");
	struct hp_conv cv;

	*path = -1;
	if (n->domain[0] || (!transpose && strcmp(n->op_type, "Conv")))
		return 1;
	if (hp_conv_parse(g, n, transpose, &cv) < 0)
		return -1;
	if (transpose) {
		hp_convt_setup(&cv);
		return training ? hp_convt_band_align(&cv, axis) : hp_convt_fma_band_align(&cv, axis);
	}
	hp_conv_setup(&cv);
	*path = hp_conv_path(&cv);
	return training ? hp_conv_band_align(&cv, axis) : infer_align(&cv, axis);
}

int hp_conv_channels_exact(struct hp_graph *g, struct hp_node *n, int *path)
{
	struct hp_conv cv;

	*path = -1;
	if (n->domain[0] || strcmp(n->op_type, "Conv") || hp_conv_parse(g, n, 0, &cv) < 0)
		return 0;
	hp_conv_setup(&cv);
	*path = hp_conv_path(&cv);
	return cv.group == 1 && (*path == HP_CONV_PATH_DIRECT || *path == HP_CONV_PATH_KXK || *path == HP_CONV_PATH_DOT);
}

static int conv_run(const struct hp_node *n, const struct hp_kargs *a)
{
	const struct hp_conv *cv = n->priv;

	hp_conv_forward(cv, a->in[0].data, a->in[1].data, cv->has_bias && a->nin > 2 ? a->in[2].data : NULL,
			a->out[0].data, a->ws, a->pool);
	return 0;
}

static double conv_flops(const struct hp_graph *g, const struct hp_node *n)
{
	(void)g;
	return n->priv ? hp_conv_flops(n->priv) : 0;
}

static const struct hp_op op_conv = {
	.domain = "",
	.name = "Conv",
	.min_inputs = 2,
	.max_inputs = 3,
	.min_outputs = 1,
	.max_outputs = 1,
	.prepare = conv_prepare,
	.run = conv_run,
	.flops = conv_flops,
};

const struct hp_op *const hp_ops_conv[] = { &op_conv, &hp_op_conv_transpose, NULL };
