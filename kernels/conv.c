/* Conv: im2col over tiles of output positions + OpenBLAS sgemm.
 *
 * The output of each (batch, group) is cut into tiles of columns; a tile's
 * column matrix [cin_g * kvol][tile] fits a bounded workspace (at most
 * HP_CONV_WS_MAX bytes whatever the volume), is built by hp_im2col and
 * multiplied by the group's weights straight into Y (ldc = output volume).
 * A 1x1 convolution with unit strides and no padding multiplies X itself.
 *
 * Threading (measured in bench/bench_kernels.c): the pool's workers take
 * disjoint runs of tiles, each with its own slice of the workspace and
 * single-threaded BLAS, so im2col and sgemm of different tiles overlap and
 * there is one join per node.  Every output element is one sgemm dot product
 * over the full K in a fixed order, so results are bitwise reproducible for
 * a given thread count.
 */
#include <cblas.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "hpdlf/error.h"
#include "kernels/conv_impl.h"
#include "kernels/ops.h"

static int policy; /* 0 auto, 1 pool + 1-thread BLAS, 2 caller + BLAS threads */
static size_t tile_bytes = HP_CONV_TILE_BYTES;

void hp_conv_set_policy(int p)
{
	policy = p;
}

void hp_conv_set_tile_bytes(size_t b)
{
	tile_bytes = b ? b : HP_CONV_TILE_BYTES;
}

int64_t hp_conv_tile_cols(int64_t kdim, int64_t ws_cols, int threads)
{
	int64_t cap = (int64_t)(tile_bytes / ((size_t)kdim * sizeof(float)));

	if (cap < HP_CONV_TILE_MIN_COLS)
		cap = HP_CONV_TILE_MIN_COLS;
	return cap < ws_cols / threads ? cap : ws_cols / threads;
}

int hp_conv_threads_enter(struct hp_pool *pool, int *saved)
{
	int pool_mode = hp_pool_size(pool) > 1 && policy != 2;

	*saved = 0;
	if (pool_mode && openblas_get_num_threads() != 1) {
		*saved = openblas_get_num_threads();
		openblas_set_num_threads(1);
	}
	return pool_mode ? hp_pool_size(pool) : 1;
}

void hp_conv_threads_leave(int saved)
{
	if (saved)
		openblas_set_num_threads(saved);
}

void hp_conv_plan(int64_t total, int64_t cap, int64_t items, int threads, int64_t *ntiles, int64_t *tcols)
{
	int64_t nt = cap > 0 ? (total + cap - 1) / cap : total;

	if (nt < 1)
		nt = 1;
	while (threads > 1 && (items * nt) % threads && nt < total)
		nt++;
	if (nt > total)
		nt = total;
	*tcols = (total + nt - 1) / nt;
	*ntiles = (total + *tcols - 1) / *tcols;
}

struct conv_run {
	const struct hp_conv *cv;
	const float *x, *w, *b;
	float *y, *ws;
	int64_t nt, tc, per_thread;
};

static void conv_tile(const struct conv_run *r, int64_t item, float *col)
{
	const struct hp_conv *cv = r->cv;
	int64_t bg = item / r->nt, t = item % r->nt, nb = bg / cv->group, g = bg % cv->group;
	int64_t j0 = t * r->tc, j1 = j0 + r->tc < cv->yvol ? j0 + r->tc : cv->yvol, nc = j1 - j0;
	const float *x = r->x + (nb * cv->cin + g * cv->cin_g) * cv->xvol;
	const float *w = r->w + g * cv->cout_g * cv->kdim;
	float *y = r->y + (nb * cv->cout + g * cv->cout_g) * cv->yvol + j0;

	if (cv->direct) {
		cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)cv->cout_g, (int)nc, (int)cv->kdim, 1.0f,
			    w, (int)cv->kdim, x + j0, (int)cv->xvol, 0.0f, y, (int)cv->yvol);
	} else {
		hp_im2col(&cv->g, cv->cin_g, x, j0, j1, col);
		cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)cv->cout_g, (int)nc, (int)cv->kdim, 1.0f,
			    w, (int)cv->kdim, col, (int)nc, 0.0f, y, (int)cv->yvol);
	}
	if (r->b)
		for (int64_t m = 0; m < cv->cout_g; m++) {
			float bias = r->b[g * cv->cout_g + m], *row = y + m * cv->yvol;
			for (int64_t j = 0; j < nc; j++)
				row[j] += bias;
		}
}

static void conv_range(void *arg, int64_t b, int64_t e, int tid)
{
	const struct conv_run *r = arg;

	for (int64_t i = b; i < e; i++)
		conv_tile(r, i, r->ws + tid * r->per_thread);
}

static int conv_prepare(struct hp_graph *g, struct hp_node *n)
{
	struct hp_conv *cv = malloc(sizeof *cv);
	const struct hp_colgeom *c;
	int64_t cap;
	int rc;

	if (!cv)
		return hp_node_error(g, n, -ENOMEM, "out of memory");
	rc = hp_conv_parse(g, n, 0, cv);
	if (rc < 0) {
		free(cv);
		return rc;
	}
	c = &cv->g;
	cv->direct = c->kvol == 1 && c->pad[0] == 0 && c->pad[1] == 0 && c->pad[2] == 0 && c->stride[0] == 1 &&
		     c->stride[1] == 1 && c->stride[2] == 1 && c->grid_vol == c->img_vol;
	cap = (int64_t)(HP_CONV_WS_MAX / ((size_t)cv->kdim * sizeof(float)));
	if (cap < 64)
		cap = 64;
	cv->ws_cols = cap < cv->yvol ? cap : cv->yvol;
	n->workspace = cv->direct ? 0 : (size_t)cv->ws_cols * (size_t)cv->kdim * sizeof(float);
	n->priv = cv;
	return 0;
}

static int conv_run(const struct hp_node *n, const struct hp_kargs *a)
{
	const struct hp_conv *cv = n->priv;
	struct conv_run r = { .cv = cv, .x = a->in[0].data, .w = a->in[1].data, .y = a->out[0].data, .ws = a->ws };
	int saved, threads = hp_conv_threads_enter(a->pool, &saved);
	int64_t items = cv->batch * cv->group, cap;

	if (cv->has_bias && a->nin > 2)
		r.b = a->in[2].data;
	cap = cv->direct ? 16384 : hp_conv_tile_cols(cv->kdim, cv->ws_cols, threads);
	if (cap < 1) {
		threads = 1;
		cap = cv->ws_cols;
	}
	hp_conv_plan(cv->yvol, cap, items, threads, &r.nt, &r.tc);
	r.per_thread = cv->direct ? 0 : r.tc * cv->kdim;
	hp_parallel_for(threads > 1 ? a->pool : NULL, items * r.nt, 1, conv_range, &r);
	hp_conv_threads_leave(saved);
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
