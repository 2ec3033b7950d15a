/* Weight gradients that chain through a running-sum input (ConvGradFilter
 * input 2, BiasGrad input 1 with partial = 1, GemmGrad input 3): each
 * against a naive double-precision loop written here, and the chain
 * property out-of-core training relies on, bit for bit: the bands of a
 * batch (or, with a batch of one, of the first spatial axis, cut with
 * halos and pads as exec/split_band.c cuts a window op) or the blocks of a
 * Gemm weight cut along N, run from the last to the first each taking the
 * previous result as its running sum, end with exactly the whole node's
 * bits; and one or two pool threads give the same bits.  Also
 * ConvGradFilterUpdate: the filter gradient summed in pieces, each applied
 * to W and its optimizer state at once, bitwise the two nodes. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "hpdlf/error.h"
#include "kernels/conv_grad_stem.h"
#include "kernels/conv_impl.h"
#include "kernels/gemm_tile.h"
#include "tests/kernels/harness.h"

#define D "ai.hpdlf"

static struct hp_pool *pool2; /* two workers */

/* Run one ai.hpdlf node over non-constant inputs; returns its workspace
 * bytes (the plan prepare chose). */
static size_t grun(const char *op, int nin, const struct hp_tensor *in, int na, const struct hp_attr *a, int nout,
		   struct hp_tensor *out, struct hp_pool *pool)
{
	struct hp_graph *g = hp_graph_new("chain");
	int ids[8], oids[4], rc = 0;
	char name[32];

	assert_non_null(g);
	g->inputs = calloc((size_t)nin + 1, sizeof(int));
	g->outputs = calloc((size_t)nout + 1, sizeof(int));
	for (int i = 0; i < nin; i++) {
		snprintf(name, sizeof name, "in%d", i);
		ids[i] = hp_graph_add_value(g, name, HP_VALUE_INPUT, in[i].dtype, &in[i].shape);
		g->inputs[g->ninputs++] = ids[i];
	}
	for (int o = 0; o < nout; o++) {
		snprintf(name, sizeof name, "out%d", o);
		oids[o] = hp_graph_add_value(g, name, HP_VALUE_ACTIVATION, HP_UNDEFINED, NULL);
		g->outputs[g->noutputs++] = oids[o];
	}
	int node = hp_graph_add_node(g, "node0", op, nin, ids, nout, oids);
	assert_true(node >= 0);
	free(g->nodes[node].domain);
	g->nodes[node].domain = strdup(D);
	for (int i = 0; i < na && rc >= 0; i++)
		rc = hp_graph_add_attr(g, node, &a[i]);
	if (rc >= 0 && (rc = hp_graph_finalize(g)) == 0)
		rc = hp_graph_infer(g);
	if (rc < 0)
		fail_msg("%s: %s", op, hp_errmsg());
	struct hp_node *n = &g->nodes[node];
	struct hp_tensor targs[8];
	struct hp_kargs k = { .nin = nin, .in = targs, .nout = nout, .out = out, .pool = pool };
	for (int i = 0; i < nin; i++)
		targs[i] = in[i];
	for (int o = 0; o < nout; o++) {
		const struct hp_value *v = &g->values[n->outputs[o]];
		assert_int_equal(hp_tensor_alloc(&out[o], v->dtype, &v->shape), 0);
		memset(out[o].data, 0xa5, hp_tensor_bytes(&out[o])); /* unwritten elements fail */
	}
	size_t ws = n->workspace;
	k.ws_size = ws;
	k.ws = ws ? aligned_alloc(64, (ws + 63) / 64 * 64) : NULL;
	rc = n->op->run(n, &k);
	free(k.ws);
	if (rc < 0)
		fail_msg("%s run: %s", op, hp_errmsg());
	hp_graph_free(g);
	return ws;
}

static struct hp_tensor tens(enum hp_dtype dt, int rank, const int64_t *dims, unsigned seed)
{
	struct hp_tensor t = kt_tensor(dt, rank, dims);

	kt_fill_random(&t, seed, -1, 1);
	return t;
}

/* Rows [a, b) of t on `axis`, a fresh tensor. */
static struct hp_tensor slice(const struct hp_tensor *t, int axis, int64_t a, int64_t b)
{
	int64_t dims[HP_MAX_RANK], outer = 1, inner = hp_dtype_size(t->dtype);
	struct hp_tensor s;

	memcpy(dims, t->shape.dims, sizeof dims);
	for (int i = 0; i < axis; i++)
		outer *= dims[i];
	for (int i = axis + 1; i < t->shape.rank; i++)
		inner *= dims[i];
	dims[axis] = b - a;
	s = kt_tensor(t->dtype, t->shape.rank, dims);
	for (int64_t o = 0; o < outer; o++)
		memcpy((char *)s.data + o * (b - a) * inner, (const char *)t->data + (o * t->shape.dims[axis] + a) * inner,
		       (size_t)((b - a) * inner));
	return s;
}

static void same_bits(const struct hp_tensor *got, const struct hp_tensor *want, const char *what)
{
	size_t n = hp_tensor_bytes(want);

	assert_int_equal(got->dtype, want->dtype);
	assert_true(hp_shape_equal(&got->shape, &want->shape));
	if (memcmp(got->data, want->data, n)) {
		size_t es = hp_dtype_size(want->dtype), i = 0;
		while (!memcmp((const char *)got->data + i * es, (const char *)want->data + i * es, es))
			i++;
		double g = es == 8 ? ((const double *)got->data)[i] : ((const float *)got->data)[i];
		double w = es == 8 ? ((const double *)want->data)[i] : ((const float *)want->data)[i];
		int dig = es == 8 ? 17 : 9;
		fail_msg("%s: not bitwise the whole node's (first at element %zu: %.*g, want %.*g)", what, i, dig, g, dig, w);
	}
}

/* Max error relative to max(1, max |want|). */
static void close_to(const struct hp_tensor *got, const double *want, double tol, const char *what)
{
	int64_t n = hp_shape_numel(&got->shape), at = 0;
	double err = 0, scale = 1;

	for (int64_t i = 0; i < n; i++) {
		double v = got->dtype == HP_F64 ? ((const double *)got->data)[i] : ((const float *)got->data)[i];
		double e = fabs(v - want[i]);
		if (!(e <= err))
			err = e, at = i;
		scale = fabs(want[i]) > scale ? fabs(want[i]) : scale;
	}
	if (!(err / scale <= tol))
		fail_msg("%s: relative error %g at %lld (tolerance %g)", what, err / scale, (long long)at, tol);
}

/* ---- ConvGradFilter ------------------------------------------------------
 * A case: geometry normalized to 3 spatial dims (leading dims of size 1),
 * X [n][cx][xs] and dY [n][cy][ys] random. */

struct cgf {
	int nsp;
	int64_t n, cx, cy, group;
	int64_t xs[3], k[3], s[3], d[3], pb[3], pe[3], ys[3];
	struct hp_tensor x, dy;
};

/* Attribute storage of one node. */
struct cgf_attrs {
	int64_t ks[3], st[3], dl[3], pads[6];
	struct hp_attr a[6];
	int n;
};

static void cgf_init(struct cgf *c, int nsp, int64_t n, int64_t cx, int64_t cy, int64_t group, const int *xs,
		     const int *k, const int *s, const int *d, const int *pb, const int *pe)
{
	int64_t xd[5] = { n, cx }, yd[5] = { n, cy };

	memset(c, 0, sizeof *c);
	c->nsp = nsp, c->n = n, c->cx = cx, c->cy = cy, c->group = group;
	for (int q = 0; q < 3; q++) {
		int j = q - (3 - nsp), real = j >= 0;
		c->xs[q] = real ? xs[j] : 1;
		c->k[q] = real ? k[j] : 1;
		c->s[q] = real ? s[j] : 1;
		c->d[q] = real ? d[j] : 1;
		c->pb[q] = real ? pb[j] : 0;
		c->pe[q] = real ? pe[j] : 0;
		c->ys[q] = (c->xs[q] + c->pb[q] + c->pe[q] - (c->k[q] - 1) * c->d[q] - 1) / c->s[q] + 1;
		if (real)
			xd[2 + j] = c->xs[q], yd[2 + j] = c->ys[q];
	}
	c->x = tens(HP_F32, 2 + nsp, xd, (unsigned)(11 + 7 * n + cx));
	c->dy = tens(HP_F32, 2 + nsp, yd, (unsigned)(23 + 5 * n + cy));
}

static void cgf_free(struct cgf *c)
{
	hp_tensor_free(&c->x);
	hp_tensor_free(&c->dy);
}

/* The node's attributes, the first spatial axis' pads replaced by pl, ph
 * (pl < 0: the case's), hpdlf_unit_axis when unit >= 0. */
static void cgf_attrs(const struct cgf *c, int64_t pl, int64_t ph, int unit, struct cgf_attrs *at)
{
	int off = 3 - c->nsp;

	for (int j = 0; j < c->nsp; j++) {
		at->ks[j] = c->k[off + j];
		at->st[j] = c->s[off + j];
		at->dl[j] = c->d[off + j];
		at->pads[j] = c->pb[off + j];
		at->pads[c->nsp + j] = c->pe[off + j];
	}
	if (pl >= 0)
		at->pads[0] = pl, at->pads[c->nsp] = ph;
	at->a[0] = kt_ints("kernel_shape", c->nsp, at->ks);
	at->a[1] = kt_int("group", c->group);
	at->a[2] = kt_ints("strides", c->nsp, at->st);
	at->a[3] = kt_ints("dilations", c->nsp, at->dl);
	at->a[4] = kt_ints("pads", 2 * c->nsp, at->pads);
	at->a[5] = kt_int("hpdlf_unit_axis", unit);
	at->n = unit >= 0 ? 6 : 5;
}

static size_t filter(const struct cgf *c, const struct hp_tensor *dy, const struct hp_tensor *x,
		     const struct hp_tensor *acc, int64_t pl, int64_t ph, int unit, struct hp_pool *pool,
		     struct hp_tensor *out)
{
	struct cgf_attrs at;
	struct hp_tensor in[3] = { *dy, *x };

	if (acc)
		in[2] = *acc;
	cgf_attrs(c, pl, ph, unit, &at);
	return grun("ConvGradFilter", acc ? 3 : 2, in, at.n, at.a, 1, out, pool);
}

/* dW [cy][cx/group][k] in double, the definition's loops. */
static double *cgf_naive(const struct cgf *c)
{
	int64_t cg = c->cx / c->group, mg = c->cy / c->group, kvol = c->k[0] * c->k[1] * c->k[2];
	int64_t yv = c->ys[0] * c->ys[1] * c->ys[2], xv = c->xs[0] * c->xs[1] * c->xs[2];
	double *w = calloc((size_t)(c->cy * cg * kvol), sizeof *w);
	const float *x = c->x.data, *dy = c->dy.data;

	for (int64_t m = 0; m < c->cy; m++)
		for (int64_t ci = 0; ci < cg; ci++)
			for (int64_t kk = 0; kk < kvol; kk++) {
				int64_t kq[3] = { kk / (c->k[1] * c->k[2]), kk / c->k[2] % c->k[1], kk % c->k[2] };
				double s = 0;
				for (int64_t nb = 0; nb < c->n; nb++)
					for (int64_t p = 0; p < yv; p++) {
						int64_t o[3] = { p / (c->ys[1] * c->ys[2]), p / c->ys[2] % c->ys[1], p % c->ys[2] };
						int64_t ix = 0, inside = 1;
						for (int q = 0; q < 3; q++) {
							int64_t i = o[q] * c->s[q] - c->pb[q] + kq[q] * c->d[q];
							inside &= i >= 0 && i < c->xs[q];
							ix = ix * c->xs[q] + i;
						}
						if (inside)
							s += (double)dy[(nb * c->cy + m) * yv + p] *
							     x[(nb * c->cx + m / mg * cg + ci) * xv + ix];
					}
				w[(m * cg + ci) * kvol + kk] = s;
			}
	return w;
}

/* Bands [cut[i], cut[i+1]) of the batch, from the last to the first. */
static struct hp_tensor chain_batch(const struct cgf *c, const int64_t *cut, int nb, struct hp_pool *pool)
{
	struct hp_tensor acc = { 0 }, out;

	for (int i = nb - 1; i >= 0; i--) {
		struct hp_tensor dy = slice(&c->dy, 0, cut[i], cut[i + 1]), x = slice(&c->x, 0, cut[i], cut[i + 1]);
		filter(c, &dy, &x, acc.data ? &acc : NULL, -1, 0, 0, pool, &out);
		hp_tensor_free(&acc);
		acc = out;
		hp_tensor_free(&dy);
		hp_tensor_free(&x);
	}
	return acc;
}

/* X rows [*a, *b) and pads of dY rows [olo, ohi) on the first spatial
 * axis: exec/split_band.c's window_rows. */
static void window_rows(const struct cgf *c, int64_t olo, int64_t ohi, int64_t *a, int64_t *b, int64_t *pl,
			int64_t *ph)
{
	int q = 3 - c->nsp;
	int64_t lo = olo * c->s[q] - c->pb[q], hi = (ohi - 1) * c->s[q] - c->pb[q] + (c->k[q] - 1) * c->d[q] + 1;

	*pl = lo < 0 ? -lo : 0;
	*ph = hi > c->xs[q] ? hi - c->xs[q] : 0;
	*a = lo < 0 ? 0 : lo;
	*b = hi > c->xs[q] ? c->xs[q] : hi;
}

/* A batch of one cut into bands of dY's first spatial axis (X with its
 * halo rows, pads on that axis adjusted), from the last to the first. */
static struct hp_tensor chain_planes(const struct cgf *c, const int64_t *cut, int nb, struct hp_pool *pool)
{
	struct hp_tensor acc = { 0 }, out;

	for (int i = nb - 1; i >= 0; i--) {
		int64_t a, b, pl, ph;
		window_rows(c, cut[i], cut[i + 1], &a, &b, &pl, &ph);
		struct hp_tensor dy = slice(&c->dy, 2, cut[i], cut[i + 1]), x = slice(&c->x, 2, a, b);
		filter(c, &dy, &x, acc.data ? &acc : NULL, pl, ph, 2, pool, &out);
		hp_tensor_free(&acc);
		acc = out;
		hp_tensor_free(&dy);
		hp_tensor_free(&x);
	}
	return acc;
}

/* Cut sets of `units` units (which < NCUTS): every unit its own band; a
 * band of one unit and one of the rest; the rest and one; thirds.
 * Returns the number of bands in cut. */
#define NCUTS 4
static int cuts(int64_t units, int which, int64_t *cut)
{
	int64_t b[4] = { 0, which == 1 ? 1 : which == 2 ? units - 1 : units / 3, which == 3 ? units - units / 3 : units,
			 units };
	int m = 0;

	assert_true(units >= 1 && units < 63);
	if (which == 0) {
		for (int64_t u = 0; u <= units; u++)
			cut[m++] = u;
		return m - 1;
	}
	for (int i = 0; i < 4; i++)
		if (m == 0 || b[i] > cut[m - 1])
			cut[m++] = b[i];
	return m - 1;
}

static int slab_runs; /* auto plans that took the slab path */
static int mode_max = 1; /* the last shift mode cgf_case runs (-1: im2col only) */

/* Every check of one case in the current shift mode: naive, threads,
 * chains of bands on the case's unit axis. */
static void cgf_check(const struct cgf *c, const char *what)
{
	struct hp_tensor whole, two;
	double *ref = cgf_naive(c);
	int64_t cut[64];
	char msg[160];

	filter(c, &c->dy, &c->x, NULL, -1, 0, -1, NULL, &whole);
	snprintf(msg, sizeof msg, "%s: dW vs naive", what);
	close_to(&whole, ref, 1e-5, msg);
	free(ref);
	filter(c, &c->dy, &c->x, NULL, -1, 0, -1, pool2, &two);
	snprintf(msg, sizeof msg, "%s: 2 threads vs 1", what);
	same_bits(&two, &whole, msg);
	hp_tensor_free(&two);
	for (int w = 0; w < NCUTS; w++)
		for (int p = 0; p < 2; p++) {
			struct hp_tensor ch;
			if (c->n >= 2) {
				int nb = cuts(c->n, w, cut);
				ch = chain_batch(c, cut, nb, p ? pool2 : NULL);
			} else if (c->nsp >= 2) {
				int nb = cuts(c->ys[3 - c->nsp], w, cut);
				ch = chain_planes(c, cut, nb, p ? pool2 : NULL);
			} else {
				continue; /* a 1-D batch of one is never cut */
			}
			snprintf(msg, sizeof msg, "%s: chain of %s bands (cut set %d, %d threads)", what,
				 c->n >= 2 ? "batch" : "plane", w, p + 1);
			same_bits(&ch, &whole, msg);
			hp_tensor_free(&ch);
		}
	hp_tensor_free(&whole);
}

/* Runs the case with a batch of n and of one, in every shift mode that
 * applies, default tiles and small ones (several tiles per unit). */
static void cgf_case(int nsp, int64_t n, int64_t cx, int64_t cy, int64_t group, const int *xs, const int *k,
		     const int *s, const int *d, const int *pb, const int *pe)
{
	int stride1 = 1;

	for (int j = 0; j < nsp; j++)
		stride1 &= s[j] == 1;
	for (int bi = 0; bi < 2; bi++) {
		struct cgf c;
		cgf_init(&c, nsp, bi ? 1 : n, cx, cy, group, xs, k, s, d, pb, pe);
		for (int small = 0; small < 2; small++) {
			hp_conv_set_tile_bytes(small ? 1 : 0);
			hp_shift_set_tile_cols(small ? 9 : 0);
			size_t ws[3];
			for (int mode = -1; mode <= (stride1 ? mode_max : -1); mode++) {
				char what[160];
				struct hp_tensor o;
				hp_conv_set_shift(mode);
				snprintf(what, sizeof what, "%dD n=%lld cx=%lld cy=%lld group=%lld shift %d tiles %s", nsp,
					 (long long)c.n, (long long)cx, (long long)cy, (long long)group, mode,
					 small ? "small" : "default");
				cgf_check(&c, what);
				ws[mode + 1] = filter(&c, &c.dy, &c.x, NULL, -1, 0, -1, NULL, &o);
				hp_tensor_free(&o);
			}
			int slab_ok = stride1 && group != cx && (c.n >= 2 || nsp == 3 || nsp == 1);
			slab_ok &= mode_max >= 1;
			if (slab_ok) /* forced, the slab path runs: its plan is not im2col's */
				assert_true(ws[2] != ws[0]);
			slab_runs += slab_ok && ws[1] != ws[0];
		}
		cgf_free(&c);
	}
	hp_conv_set_tile_bytes(0);
	hp_shift_set_tile_cols(0);
	hp_conv_set_shift(0);
}

#define I (const int[])

/* A 1x1 of stride 1 without pads (X its own column matrix: no slab path
 * to force), with a batch of n and of one: cgf_check. */
static void pw_case(int64_t n, int64_t cx, int64_t cy, const int *xs)
{
	for (int bi = 0; bi < 2; bi++) {
		struct cgf c;
		char what[96];
		cgf_init(&c, 2, bi ? 1 : n, cx, cy, 1, xs, I{ 1, 1 }, I{ 1, 1 }, I{ 1, 1 }, I{ 0, 0 }, I{ 0, 0 });
		snprintf(what, sizeof what, "1x1 n=%lld cx=%lld cy=%lld", (long long)c.n, (long long)cx, (long long)cy);
		cgf_check(&c, what);
		cgf_free(&c);
	}
}

static void test_filter_1d(void **state)
{
	(void)state;
	cgf_case(1, 3, 4, 6, 2, I{ 9 }, I{ 3 }, I{ 2 }, I{ 2 }, I{ 2 }, I{ 1 });
	cgf_case(1, 2, 8, 8, 1, I{ 150 }, I{ 3 }, I{ 1 }, I{ 1 }, I{ 1 }, I{ 0 });
	cgf_case(1, 3, 4, 8, 4, I{ 11 }, I{ 3 }, I{ 1 }, I{ 2 }, I{ 2 }, I{ 1 }); /* depthwise */
}

static void test_filter_2d(void **state)
{
	(void)state;
	cgf_case(2, 3, 4, 6, 2, I{ 7, 6 }, I{ 3, 2 }, I{ 2, 1 }, I{ 1, 2 }, I{ 1, 0 }, I{ 1, 1 });
	cgf_case(2, 3, 9, 10, 1, I{ 12, 11 }, I{ 3, 3 }, I{ 1, 1 }, I{ 1, 1 }, I{ 1, 0 }, I{ 1, 2 });
	cgf_case(2, 4, 16, 8, 2, I{ 10, 10 }, I{ 3, 3 }, I{ 1, 1 }, I{ 2, 1 }, I{ 2, 1 }, I{ 2, 0 });
	cgf_case(2, 3, 8, 12, 4, I{ 9, 8 }, I{ 2, 3 }, I{ 2, 2 }, I{ 2, 1 }, I{ 0, 1 }, I{ 1, 1 });
	/* the grouped path (conv_grad_grp.c): rows of 20 (units of rows with a
	 * batch of one), 4 per group, and 8 per group at stride 2 in rows */
	cgf_case(2, 2, 8, 8, 2, I{ 6, 20 }, I{ 3, 3 }, I{ 1, 1 }, I{ 1, 1 }, I{ 1, 1 }, I{ 1, 1 });
	cgf_case(2, 2, 16, 12, 2, I{ 9, 34 }, I{ 3, 3 }, I{ 2, 2 }, I{ 1, 1 }, I{ 1, 1 }, I{ 0, 1 });
	cgf_case(2, 3, 4, 8, 4, I{ 9, 8 }, I{ 3, 3 }, I{ 1, 1 }, I{ 1, 1 }, I{ 1, 1 }, I{ 1, 0 }); /* depthwise */
	/* the direct path (conv_grad_w3.c, auto mode, batches of 2 and 3):
	 * windows 2, 1 and 3 wide, rows not a multiple of 8, output channels
	 * not a multiple of 4, pads at either end */
	cgf_case(2, 2, 5, 7, 1, I{ 6, 70 }, I{ 2, 3 }, I{ 1, 1 }, I{ 1, 1 }, I{ 0, 2 }, I{ 1, 0 });
	cgf_case(2, 3, 3, 5, 1, I{ 5, 66 }, I{ 3, 1 }, I{ 1, 1 }, I{ 1, 1 }, I{ 1, 0 }, I{ 1, 0 });
	cgf_case(2, 2, 4, 9, 1, I{ 4, 65 }, I{ 1, 2 }, I{ 1, 1 }, I{ 1, 1 }, I{ 0, 1 }, I{ 0, 0 });
	cgf_case(2, 2, 6, 8, 1, I{ 5, 64 }, I{ 3, 3 }, I{ 1, 1 }, I{ 1, 1 }, I{ 1, 1 }, I{ 1, 1 });
	/* 1x1 with more output channels than rows: the sgemms write dW
	 * (M: output channels), in one share of rows and in two */
	pw_case(3, 6, 40, I{ 5, 9 });
	pw_case(2, 34, 40, I{ 4, 7 });
}

static void test_filter_3d(void **state)
{
	(void)state;
	cgf_case(3, 3, 8, 6, 1, I{ 5, 6, 7 }, I{ 3, 3, 2 }, I{ 1, 1, 1 }, I{ 1, 1, 1 }, I{ 1, 1, 0 }, I{ 1, 0, 1 });
	cgf_case(3, 2, 4, 6, 2, I{ 5, 7, 6 }, I{ 2, 3, 2 }, I{ 2, 1, 2 }, I{ 1, 1, 2 }, I{ 1, 1, 0 }, I{ 0, 1, 1 });
	cgf_case(3, 2, 3, 3, 3, I{ 5, 6, 7 }, I{ 3, 3, 3 }, I{ 2, 1, 2 }, I{ 1, 1, 1 }, I{ 1, 0, 1 }, I{ 0, 1, 1 });
	/* planes of 90: units of a batch of one span several tiles */
	cgf_case(3, 2, 8, 4, 2, I{ 3, 9, 10 }, I{ 2, 3, 3 }, I{ 1, 1, 1 }, I{ 1, 1, 2 }, I{ 0, 1, 2 }, I{ 1, 1, 1 });
}

/* Rows wider than an im2col tile with a batch of one: a unit (a row) is
 * several sgemms.  A band of ONE row once had unit == svol and took the
 * slab path, which the whole 2-D node (units: rows) never takes; the chain
 * of one-row bands then differed from the whole node (found by this test;
 * filter_slab_plan in conv_grad.c now decides by the unit axis). */
static void test_filter_row_units(void **state)
{
	(void)state;
	cgf_case(2, 2, 4, 4, 1, I{ 4, 140 }, I{ 3, 3 }, I{ 1, 1 }, I{ 1, 1 }, I{ 1, 1 }, I{ 0, 1 });
	cgf_case(2, 2, 64, 8, 1, I{ 3, 224 }, I{ 3, 3 }, I{ 1, 1 }, I{ 1, 1 }, I{ 1, 1 }, I{ 1, 1 });
}

/* ---- the register-tile path (conv_grad_reg.c) ----
 * dW replayed in scalar: each element a running sum from 0 over the units
 * from the last to the first (batch items, or with a batch of one the
 * planes of the first spatial axis), each unit's positions in order: one
 * chain of fmaf for units shorter than RF_BLK_MIN, else blocks of RF_BLK
 * positions, each a chain of fmaf from 0, added to the sum. */
#define RF_BLK 64
#define RF_BLK_MIN 16
static float *rf_replay(const struct cgf *c)
{
	int64_t kvol = c->k[0] * c->k[1] * c->k[2], yv = c->ys[0] * c->ys[1] * c->ys[2], xv = c->xs[0] * c->xs[1] * c->xs[2];
	int64_t unit = c->n == 1 && c->nsp >= 2 ? yv / c->ys[3 - c->nsp] : yv, upi = yv / unit;
	int64_t cg = c->cx / c->group, mg = c->cy / c->group;
	float *w = calloc((size_t)(c->cy * cg * kvol), sizeof *w);
	const float *x = c->x.data, *dy = c->dy.data;

	for (int64_t m = 0; m < c->cy; m++)
		for (int64_t ci = 0; ci < cg; ci++)
			for (int64_t kk = 0; kk < kvol; kk++) {
				int64_t kq[3] = { kk / (c->k[1] * c->k[2]), kk / c->k[2] % c->k[1], kk % c->k[2] };
				float s = 0, part = 0;
				for (int64_t u = c->n * upi - 1; u >= 0; u--)
					for (int64_t p = u % upi * unit; p < (u % upi + 1) * unit; p++) {
						int64_t nb = u / upi, ix = 0, inside = 1;
						int64_t o[3] = { p / (c->ys[1] * c->ys[2]), p / c->ys[2] % c->ys[1], p % c->ys[2] };
						for (int q = 0; q < 3; q++) {
							int64_t i = o[q] * c->s[q] - c->pb[q] + kq[q] * c->d[q];
							inside &= i >= 0 && i < c->xs[q];
							ix = ix * c->xs[q] + i;
						}
						float xv1 = inside ? x[(nb * c->cx + m / mg * cg + ci) * xv + ix] : 0.0f;
						if (unit < RF_BLK_MIN) {
							s = fmaf(dy[(nb * c->cy + m) * yv + p], xv1, s);
							continue;
						}
						int64_t j = p - u % upi * unit; /* blocks of RF_BLK in the unit */
						part = fmaf(dy[(nb * c->cy + m) * yv + p], xv1, j % RF_BLK ? part : 0.0f);
						if ((j + 1) % RF_BLK == 0 || j + 1 == unit)
							s = s + part;
					}
				w[(m * cg + ci) * kvol + kk] = s;
			}
	return w;
}

/* A case on the register-tile path, forced, in one chunk and in chunks
 * of 5 and 16 positions, with a batch of n and of one: the scalar replay
 * bit for bit, then cgf_check's naive, threads and chains of bands. */
static void rf_gcase(int nsp, int64_t n, int64_t cx, int64_t cy, int64_t group, const int *xs, const int *k,
		     const int *s, const int *d, const int *pb, const int *pe)
{
	static const int chunks[3] = { 1, 5, 16 };

	for (int bi = 0; bi < 2; bi++) {
		struct cgf c;
		cgf_init(&c, nsp, bi ? 1 : n, cx, cy, group, xs, k, s, d, pb, pe);
		float *want = rf_replay(&c);
		for (int ch = 0; ch < 3; ch++) {
			char what[160];
			struct hp_tensor o;
			hp_rfilt_set_mode(chunks[ch]);
			snprintf(what, sizeof what, "register tiles %dD n=%lld cx=%lld cy=%lld group=%lld chunks of %d (1: default)",
				 nsp, (long long)c.n, (long long)cx, (long long)cy, (long long)group, chunks[ch]);
			filter(&c, &c.dy, &c.x, NULL, -1, 0, -1, pool2, &o);
			if (memcmp(o.data, want, hp_tensor_bytes(&o)))
				fail_msg("%s: not the scalar replay's bits", what);
			hp_tensor_free(&o);
			cgf_check(&c, what);
		}
		hp_rfilt_set_mode(0);
		free(want);
		cgf_free(&c);
	}
}

static void rf_case(int nsp, int64_t n, int64_t cx, int64_t cy, const int *xs, const int *k, const int *s,
		    const int *d, const int *pb, const int *pe)
{
	hp_sfilt_set_mode(-1); /* the register tiles, not conv_grad_stem.c's */
	rf_gcase(nsp, n, cx, cy, 1, xs, k, s, d, pb, pe);
	hp_sfilt_set_mode(0);
}

static void test_filter_reg(void **state)
{
	(void)state;
	if (!__builtin_cpu_supports("avx512f"))
		skip();
	/* taps not a multiple of 16 or 48, output channels not of 8 */
	rf_case(2, 3, 9, 13, I{ 6, 5 }, I{ 3, 3 }, I{ 1, 1 }, I{ 1, 1 }, I{ 1, 1 }, I{ 1, 1 });
	/* strides, dilations, uneven pads; three tap blocks and a tail */
	rf_case(2, 2, 12, 20, I{ 9, 8 }, I{ 3, 2 }, I{ 2, 1 }, I{ 1, 2 }, I{ 1, 0 }, I{ 2, 1 });
	/* ResNet-18's shapes in small: 2x2 planes, 1x1 of stride 2 */
	rf_case(2, 4, 32, 16, I{ 2, 2 }, I{ 3, 3 }, I{ 1, 1 }, I{ 1, 1 }, I{ 1, 1 }, I{ 1, 1 });
	rf_case(2, 4, 16, 24, I{ 8, 8 }, I{ 1, 1 }, I{ 2, 2 }, I{ 1, 1 }, I{ 0, 0 }, I{ 0, 0 });
	rf_case(1, 3, 7, 9, I{ 13 }, I{ 3 }, I{ 2 }, I{ 1 }, I{ 1 }, I{ 2 });
	/* windows of 16 taps and more: packed through im2col and transposes,
	 * runs of 16 positions and a tail (the stem's 7x7 of stride 2) */
	rf_case(2, 2, 3, 17, I{ 15, 14 }, I{ 7, 7 }, I{ 2, 2 }, I{ 1, 1 }, I{ 3, 3 }, I{ 3, 2 });
	rf_case(2, 2, 5, 9, I{ 9, 11 }, I{ 4, 5 }, I{ 1, 1 }, I{ 1, 1 }, I{ 2, 1 }, I{ 1, 2 });
	/* rows of 10 at stride 2 through masked loads of even columns */
	rf_case(2, 2, 3, 9, I{ 9, 20 }, I{ 5, 5 }, I{ 1, 2 }, I{ 1, 1 }, I{ 2, 1 }, I{ 2, 2 });
	rf_case(3, 2, 5, 10, I{ 4, 5, 6 }, I{ 3, 3, 2 }, I{ 1, 2, 1 }, I{ 1, 1, 2 }, I{ 1, 1, 0 }, I{ 1, 0, 1 });
	/* 297 taps: with the tests' chunks the tiles walk panels of 96 taps
	 * (2 blocks), channel blocks of 8 inside, the last panel short */
	rf_case(2, 2, 33, 12, I{ 8, 8 }, I{ 3, 3 }, I{ 1, 1 }, I{ 1, 1 }, I{ 1, 1 }, I{ 1, 1 });
}

/* LeNet's second Conv in a band of 16 items (16 -> 32, 3x3 at 4x4, pad 1:
 * units of 16 positions, shorter than a block of RF_BLK): the register
 * tiles fit the sgemm path's workspace in chunks of one unit, with the
 * scalar replay's bits and cgf_check's.  Chunks of RF_BLK took 102656
 * bytes on two threads against the sgemm path's 36864, and each of the
 * four bands' filter gradients of LeNet trained at a quarter of its peak
 * held them (its smallest budget was 176128 bytes, 114688 since). */
static void test_filter_reg_fit(void **state)
{
	struct cgf c;
	struct hp_tensor o;
	size_t ws, wsg;

	(void)state;
	if (!__builtin_cpu_supports("avx512f"))
		skip();
	hp_sfilt_set_mode(-1); /* the register tiles, not conv_grad_stem.c's */
	cgf_init(&c, 2, 16, 16, 32, 1, I{ 4, 4 }, I{ 3, 3 }, I{ 1, 1 }, I{ 1, 1 }, I{ 1, 1 }, I{ 1, 1 });
	float *want = rf_replay(&c);
	hp_rfilt_set_mode(-1);
	wsg = filter(&c, &c.dy, &c.x, NULL, -1, 0, -1, NULL, &o);
	hp_tensor_free(&o);
	hp_rfilt_set_mode(0);
	ws = filter(&c, &c.dy, &c.x, NULL, -1, 0, -1, pool2, &o);
	if (memcmp(o.data, want, hp_tensor_bytes(&o)))
		fail_msg("LeNet's c2 band: not the scalar replay's bits");
	/* a unit's chunk holds the packed taps, dY and a segment's rows: a
	 * little over the sgemm path's (39168 bytes on two threads) */
	if (2 * ws > 3 * wsg)
		fail_msg("LeNet's c2 band: workspace %zu bytes, the sgemm path's %zu", ws, wsg);
	hp_tensor_free(&o);
	cgf_check(&c, "register tiles, LeNet's c2 band");
	hp_sfilt_set_mode(0);
	free(want);
	cgf_free(&c);
}

/* ---- ConvGradFilterUpdate (conv_grad_update.c) ---------------------------
 * The filter gradient summed in pieces and each piece applied to W and
 * its state at once: W' and the state bitwise ConvGradFilter then
 * SGDUpdate / AdamUpdate, for SGD, SGD with momentum, weight decay and
 * Nesterov, Adam and AdamW, in chunks of 1, 5, 16 positions and the
 * default, a batch and a batch of one (units: planes), one and two
 * threads. */
enum { FU_SGD, FU_MOM, FU_ADAM, FU_ADAMW, FU_OPTS };

static int fu_attrs(int opt, struct hp_attr *a)
{
	int n = 0;

	a[n++] = kt_float("lr", opt >= FU_ADAM ? 0.001f : 0.05f);
	a[n++] = kt_float("weight_decay", opt == FU_SGD ? 0.0f : 0.01f);
	if (opt >= FU_ADAM) {
		a[n++] = kt_float("beta1", 0.9f);
		a[n++] = kt_float("beta2", 0.999f);
		a[n++] = kt_float("epsilon", 1e-8f);
		a[n++] = kt_int("decoupled", opt == FU_ADAMW);
	} else {
		a[n++] = kt_float("momentum", opt == FU_MOM ? 0.9f : 0.0f);
		a[n++] = kt_int("nesterov", opt == FU_MOM);
	}
	return n;
}

static void fu_check(const struct cgf *c, int opt, struct hp_pool *pool, const char *what)
{
	struct cgf_attrs at;
	struct hp_attr a[16];
	struct hp_tensor dw, in[6], ref[3], got[3];
	int64_t one = 1;
	int nst = opt >= FU_ADAM ? 2 : opt == FU_MOM, na, nin;
	char w2[240];

	filter(c, &c->dy, &c->x, NULL, -1, 0, -1, pool, &dw);
	in[0] = tens(HP_F32, dw.shape.rank, dw.shape.dims, 97);
	in[1] = dw;
	for (int k = 0; k < nst; k++) {
		in[2 + k] = tens(HP_F32, dw.shape.rank, dw.shape.dims, 101 + (unsigned)k);
		if (opt >= FU_ADAM && k == 1) /* v >= 0 */
			for (int64_t i = 0; i < hp_shape_numel(&dw.shape); i++)
				((float *)in[3].data)[i] *= ((float *)in[3].data)[i];
	}
	nin = 2 + nst;
	if (opt >= FU_ADAM) {
		in[4] = kt_tensor(HP_I64, 1, &one);
		*(int64_t *)in[4].data = 3;
		nin = 5;
	}
	na = fu_attrs(opt, a);
	grun(opt >= FU_ADAM ? "AdamUpdate" : "SGDUpdate", nin, in, na, a, 1 + nst, ref, pool);
	cgf_attrs(c, -1, 0, -1, &at);
	for (int i = 0; i < at.n; i++)
		a[na++] = at.a[i];
	a[na++] = kt_int("adam", opt >= FU_ADAM);
	struct hp_tensor fin[6] = { c->dy, c->x, in[0] };
	for (int j = 2; j < nin; j++)
		fin[j + 1] = in[j];
	grun("ConvGradFilterUpdate", nin + 1, fin, na, a, 1 + nst, got, pool);
	for (int o = 0; o < 1 + nst; o++) {
		snprintf(w2, sizeof w2, "%s, optimizer %d, output %d", what, opt, o);
		same_bits(&got[o], &ref[o], w2);
		hp_tensor_free(&got[o]);
		hp_tensor_free(&ref[o]);
	}
	for (int i = 0; i < nin; i++)
		if (i != 1)
			hp_tensor_free(&in[i]);
	hp_tensor_free(&dw);
}

static void fu_case(int nsp, int64_t n, int64_t cx, int64_t cy, const int *xs, const int *k, const int *s,
		    const int *d, const int *pb, const int *pe)
{
	static const int chunks[4] = { 0, 1, 5, 16 };

	hp_sfilt_set_mode(-1); /* the register tiles, not conv_grad_stem.c's */
	for (int bi = 0; bi < 2; bi++) {
		struct cgf c;
		cgf_init(&c, nsp, bi ? 1 : n, cx, cy, 1, xs, k, s, d, pb, pe);
		for (int ch = 0; ch < 4; ch++)
			for (int opt = 0; opt < FU_OPTS; opt++)
				for (int t = 0; t < 2; t++) {
					char what[160];
					hp_rfilt_set_mode(chunks[ch] ? chunks[ch] : 1);
					snprintf(what, sizeof what, "filter+update %dD n=%lld cx=%lld cy=%lld chunks of %d (0: default), %d threads",
						 nsp, (long long)c.n, (long long)cx, (long long)cy, chunks[ch], t + 1);
					fu_check(&c, opt, t ? pool2 : NULL, what);
				}
		hp_rfilt_set_mode(0);
		cgf_free(&c);
	}
	hp_sfilt_set_mode(0);
}

static void test_filter_update(void **state)
{
	(void)state;
	if (!__builtin_cpu_supports("avx512f"))
		skip();
	/* taps not a multiple of 16 or 48, output channels not of 8 */
	fu_case(2, 3, 9, 13, I{ 6, 5 }, I{ 3, 3 }, I{ 1, 1 }, I{ 1, 1 }, I{ 1, 1 }, I{ 1, 1 });
	/* strides, dilations, uneven pads; three tap blocks and a tail */
	fu_case(2, 2, 12, 20, I{ 9, 8 }, I{ 3, 2 }, I{ 2, 1 }, I{ 1, 2 }, I{ 1, 0 }, I{ 2, 1 });
	/* units of 16 positions and more: sums in blocks */
	fu_case(2, 2, 6, 10, I{ 9, 9 }, I{ 3, 3 }, I{ 1, 1 }, I{ 1, 1 }, I{ 1, 1 }, I{ 1, 1 });
	/* ResNet-18's stage 4 in small: 2x2 planes; 600 channels make pieces
	 * of 96 taps, 6 of them over 576 */
	fu_case(2, 2, 64, 600, I{ 2, 2 }, I{ 3, 3 }, I{ 1, 1 }, I{ 1, 1 }, I{ 1, 1 }, I{ 1, 1 });
	fu_case(3, 2, 5, 10, I{ 4, 5, 6 }, I{ 3, 3, 2 }, I{ 1, 2, 1 }, I{ 1, 1, 2 }, I{ 1, 1, 0 }, I{ 1, 0, 1 });
}

/* The co-lane tiles (conv_grad_reg.c, few output channels): the same
 * replay bit for bit, forced, in chunks as rf_case, then cgf_check. */
static void rd_case(int nsp, int64_t n, int64_t cx, int64_t cy, const int *xs, const int *k, const int *s,
		    const int *d, const int *pb, const int *pe)
{
	hp_rfilt_set_direct(1);
	rf_case(nsp, n, cx, cy, xs, k, s, d, pb, pe);
	hp_rfilt_set_direct(0);
}

static void test_filter_colane(void **state)
{
	(void)state;
	if (!__builtin_cpu_supports("avx512f"))
		skip();
	/* the 3-D U-Net's 16-channel layers in small: one vector of channels,
	 * window rows 9 per tile, a tail tile of 1 (cx 3 -> 27 rows) */
	rd_case(3, 2, 3, 16, I{ 5, 6, 20 }, I{ 3, 3, 3 }, I{ 1, 1, 1 }, I{ 1, 1, 1 }, I{ 1, 1, 1 }, I{ 1, 1, 1 });
	/* channels not of 16; rows of 2 taps; strides, dilations (not on
	 * rows), uneven pads; units shorter than a block (one chain) */
	rd_case(3, 2, 4, 5, I{ 4, 7, 9 }, I{ 2, 3, 2 }, I{ 1, 2, 2 }, I{ 2, 1, 1 }, I{ 1, 0, 1 }, I{ 0, 1, 0 });
	/* two and four vectors of channels (a last one partial), rows of 1 */
	rd_case(2, 3, 7, 20, I{ 9, 11 }, I{ 3, 3 }, I{ 1, 1 }, I{ 1, 1 }, I{ 1, 1 }, I{ 1, 1 });
	rd_case(2, 2, 5, 40, I{ 8, 13 }, I{ 3, 1 }, I{ 2, 1 }, I{ 1, 1 }, I{ 1, 0 }, I{ 0, 0 });
	rd_case(2, 2, 6, 64, I{ 7, 10 }, I{ 2, 2 }, I{ 1, 2 }, I{ 2, 1 }, I{ 0, 1 }, I{ 1, 0 });
	/* several groups of four vectors of channels, the last one partial */
	rd_case(2, 2, 5, 150, I{ 6, 7 }, I{ 3, 3 }, I{ 1, 1 }, I{ 1, 1 }, I{ 1, 1 }, I{ 1, 1 });
	rd_case(3, 2, 3, 130, I{ 3, 4, 5 }, I{ 1, 2, 2 }, I{ 1, 1, 2 }, I{ 1, 1, 1 }, I{ 0, 1, 0 }, I{ 0, 0, 1 });
	/* groups (ResNeXt's 16 and 32 a group in small, rows too short for
	 * conv_grad_grp.c): 3 groups of 16 and of 20 output channels, 2 of 40 */
	hp_rfilt_set_direct(1);
	rf_gcase(2, 2, 6, 48, 3, I{ 7, 7 }, I{ 3, 3 }, I{ 1, 1 }, I{ 1, 1 }, I{ 1, 1 }, I{ 1, 1 });
	rf_gcase(2, 2, 9, 60, 3, I{ 5, 6 }, I{ 3, 3 }, I{ 2, 1 }, I{ 1, 1 }, I{ 1, 0 }, I{ 0, 1 });
	rf_gcase(3, 2, 4, 80, 2, I{ 3, 4, 9 }, I{ 2, 2, 3 }, I{ 1, 1, 1 }, I{ 1, 1, 1 }, I{ 0, 1, 1 }, I{ 1, 0, 1 });
	hp_rfilt_set_direct(0);
	/* ConvTranspose's dW roles in small: window 2 of stride 2 */
	rd_case(3, 1, 6, 12, I{ 8, 8, 8 }, I{ 2, 2, 2 }, I{ 2, 2, 2 }, I{ 1, 1, 1 }, I{ 0, 0, 0 }, I{ 0, 0, 0 });
	rd_case(1, 3, 4, 16, I{ 70 }, I{ 3 }, I{ 1 }, I{ 1 }, I{ 2 }, I{ 0 });
}

/* ---- the position-lane tiles (conv_grad_lane.c) ----
 * dW replayed in scalar: s from 0, then per batch item from the last to
 * the first s = s + tree(16 lanes), lane l a chain of fmaf from 0 over
 * the padded flat positions q = l, l + 16, ... below L = (oh - 1) pw + ow
 * (pw = ow + (k[2] - 1) d[2]; dY 0 in the padding columns, X read at the
 * flat offset of the tap in X's padded image of rows of pw, 0 in its
 * pads). */
static float lf_tree(const float *l)
{
	float r8[8], r4[4], r2[2];

	for (int i = 0; i < 8; i++)
		r8[i] = l[i] + l[i + 8];
	for (int i = 0; i < 4; i++)
		r4[i] = r8[i] + r8[i + 4];
	for (int i = 0; i < 2; i++)
		r2[i] = r4[i] + r4[i + 2];
	return r2[0] + r2[1];
}

static float *lf_replay(const struct cgf *c)
{
	int64_t kh = c->k[1], kw = c->k[2], kvol = kh * kw, oh = c->ys[1], ow = c->ys[2], ih = c->xs[1], iw = c->xs[2];
	int64_t pw = ow + (kw - 1) * c->d[2], len = (oh - 1) * pw + ow;
	float *w = calloc((size_t)(c->cy * c->cx * kvol), sizeof *w);
	const float *x = c->x.data, *dy = c->dy.data;

	for (int64_t m = 0; m < c->cy; m++)
		for (int64_t ci = 0; ci < c->cx; ci++)
			for (int64_t kk = 0; kk < kvol; kk++) {
				float s = 0;
				for (int64_t u = c->n - 1; u >= 0; u--) {
					float lane[16] = { 0 };
					for (int64_t q = 0; q < len; q++) {
						int64_t r = q / pw, col = q % pw;
						int64_t f = (r + kk / kw * c->d[1]) * pw + col + kk % kw * c->d[2];
						int64_t i = f / pw - c->pb[1], j = f % pw - c->pb[2];
						float yv = col < ow ? dy[((u * c->cy + m) * oh + r) * ow + col] : 0.0f;
						float xv = i >= 0 && i < ih && j >= 0 && j < iw ? x[((u * c->cx + ci) * ih + i) * iw + j] : 0.0f;
						lane[q % 16] = fmaf(yv, xv, lane[q % 16]);
					}
					s = s + lf_tree(lane);
				}
				w[(m * c->cx + ci) * kvol + kk] = s;
			}
	return w;
}

/* A case on the position-lane tiles, forced (units: batch items, so
 * batches of 2 and more): the scalar replay bit for bit, then
 * cgf_check's naive, threads and chains of batch bands. */
static void lf_case(int nsp, int64_t n, int64_t cx, int64_t cy, const int *xs, const int *k, const int *d,
		    const int *pb, const int *pe)
{
	static const int one[2] = { 1, 1 };
	struct cgf c;
	struct hp_tensor o;
	char what[160];

	hp_lfilt_set_mode(1);
	cgf_init(&c, nsp, n, cx, cy, 1, xs, k, one, d, pb, pe);
	float *want = lf_replay(&c);
	snprintf(what, sizeof what, "position lanes %dD n=%lld cx=%lld cy=%lld", nsp, (long long)n, (long long)cx,
		 (long long)cy);
	filter(&c, &c.dy, &c.x, NULL, -1, 0, -1, pool2, &o);
	if (memcmp(o.data, want, hp_tensor_bytes(&o)))
		fail_msg("%s: not the scalar replay's bits", what);
	hp_tensor_free(&o);
	cgf_check(&c, what);
	hp_lfilt_set_mode(0);
	free(want);
	cgf_free(&c);
}

static void test_filter_lane(void **state)
{
	(void)state;
	if (!__builtin_cpu_supports("avx512f"))
		skip();
	/* LeNet's first Conv in small: one channel in, 6 out, 5x5 without
	 * pads (dY copied into rows of X's, X in place) */
	lf_case(2, 3, 1, 6, I{ 12, 13 }, I{ 5, 5 }, I{ 1, 1 }, I{ 0, 0 }, I{ 0, 0 });
	/* pads (X copied into its padded image), dilations, uneven windows */
	lf_case(2, 2, 2, 3, I{ 9, 11 }, I{ 3, 4 }, I{ 1, 2 }, I{ 1, 2 }, I{ 2, 1 });
	/* two blocks of output channels (6 and 5: a repeated one not stored),
	 * a tail block of taps */
	lf_case(2, 3, 3, 11, I{ 8, 10 }, I{ 2, 5 }, I{ 1, 1 }, I{ 0, 2 }, I{ 1, 0 });
	/* 1x1: dY and X in place; 8 channels a block, taps not of 2 */
	lf_case(2, 2, 7, 8, I{ 7, 9 }, I{ 1, 1 }, I{ 1, 1 }, I{ 0, 0 }, I{ 0, 0 });
	/* 1-D; a plane shorter than a vector (one masked vector) */
	lf_case(1, 3, 2, 5, I{ 40 }, I{ 7 }, I{ 1 }, I{ 3 }, I{ 3 });
	lf_case(2, 4, 2, 1, I{ 3, 4 }, I{ 2, 2 }, I{ 1, 1 }, I{ 0, 0 }, I{ 0, 0 });
}

/* The co-lane tiles of conv_grad_grp.c (grouped layers, lanes over 16
 * input channels): conv_grad_reg.c's order, so the same scalar replay bit
 * for bit, then cgf_check (naive, 1 vs 2 threads, chains of batch and of
 * row bands bitwise the whole), each at batch n and 1 (units of rows). */
static void gc_case(int64_t n, int64_t cx, int64_t cy, int64_t group, const int *xs, const int *k, const int *s,
		    const int *d, const int *pb, const int *pe)
{
	hp_gfilt_set_colane(1);
	rf_gcase(2, n, cx, cy, group, xs, k, s, d, pb, pe);
	hp_gfilt_set_colane(0);
}

static void test_filter_grp_colane(void **state)
{
	(void)state;
	if (!__builtin_cpu_supports("avx512f"))
		skip();
	/* ResNeXt's 4 per group: 4 groups a slab, rows of 19 (blocks of one
	 * row; with a batch, blocks across rows), output channels in tiles of
	 * 3 and 1 */
	gc_case(2, 16, 16, 4, I{ 7, 19 }, I{ 3, 3 }, I{ 1, 1 }, I{ 1, 1 }, I{ 1, 1 }, I{ 1, 1 });
	/* 8 per group at stride 2, uneven pads; 2 a group, 8 groups a slab,
	 * one output channel; two slabs */
	gc_case(2, 32, 32, 4, I{ 9, 34 }, I{ 3, 3 }, I{ 2, 2 }, I{ 1, 1 }, I{ 1, 1 }, I{ 0, 1 });
	gc_case(3, 32, 16, 16, I{ 6, 9 }, I{ 3, 3 }, I{ 1, 1 }, I{ 1, 1 }, I{ 1, 1 }, I{ 1, 1 });
	/* 16 and 32 a group (dY broadcast), 5 and 3 out per group; rows of 7
	 * (one chain), dilation, a 5x3 window (taps in tiles of 9 and 6) */
	gc_case(2, 32, 10, 2, I{ 7, 7 }, I{ 3, 3 }, I{ 1, 1 }, I{ 1, 1 }, I{ 1, 1 }, I{ 1, 1 });
	gc_case(2, 64, 6, 2, I{ 9, 12 }, I{ 5, 3 }, I{ 1, 2 }, I{ 2, 1 }, I{ 2, 1 }, I{ 3, 2 });
	/* a 5x5 window: 25 taps (tiles of 9, 9, 7; sums moved without the
	 * 16 x 16 transposes) */
	gc_case(2, 16, 8, 4, I{ 8, 9 }, I{ 5, 5 }, I{ 1, 1 }, I{ 1, 1 }, I{ 2, 2 }, I{ 2, 2 });
	/* rows of 70 (two blocks a row) staged in several chunks */
	gc_case(2, 16, 8, 4, I{ 12, 70 }, I{ 3, 3 }, I{ 1, 1 }, I{ 1, 1 }, I{ 1, 1 }, I{ 1, 1 });
	/* slabs of fewer groups than 16 channels hold, the last one's other
	 * lanes zeros, not stored: RegNet's odd numbers of groups of 8 in
	 * small (3 at 6x6, 5 at stride 2 with uneven pads; 3x3 planes), 5
	 * groups of 4 (a last slab of one), 9 of 2 */
	gc_case(2, 24, 24, 3, I{ 6, 6 }, I{ 3, 3 }, I{ 1, 1 }, I{ 1, 1 }, I{ 1, 1 }, I{ 1, 1 });
	gc_case(3, 40, 40, 5, I{ 7, 8 }, I{ 3, 3 }, I{ 2, 2 }, I{ 1, 1 }, I{ 1, 0 }, I{ 0, 1 });
	gc_case(2, 40, 40, 5, I{ 3, 3 }, I{ 3, 3 }, I{ 1, 1 }, I{ 1, 1 }, I{ 1, 1 }, I{ 1, 1 });
	gc_case(2, 20, 20, 5, I{ 5, 9 }, I{ 3, 3 }, I{ 1, 1 }, I{ 1, 1 }, I{ 1, 1 }, I{ 1, 1 });
	gc_case(2, 18, 9, 9, I{ 4, 6 }, I{ 3, 3 }, I{ 1, 1 }, I{ 1, 1 }, I{ 1, 1 }, I{ 1, 1 });
}

/* The co-lane tiles of conv_grad_stem.c (few input taps, lanes over 16
 * output channels, any stride): conv_grad_reg.c's order, so the same
 * scalar replay bit for bit, then cgf_check (naive, 1 vs 2 threads,
 * chains of batch and of row bands bitwise the whole), each at batch n
 * and 1 (units of rows), with the tiles of a vector of channels in one
 * job and each in its own. */
static void sf_case(int nsp, int64_t n, int64_t cx, int64_t cy, const int *xs, const int *k, const int *s,
		    const int *d, const int *pb, const int *pe)
{
	for (int m = 1; m <= 2; m++) { /* whole, and every tile its own job */
		hp_sfilt_set_mode(m);
		rf_gcase(nsp, n, cx, cy, 1, xs, k, s, d, pb, pe);
	}
	hp_sfilt_set_mode(0);
}

static void test_filter_stem(void **state)
{
	(void)state;
	if (!__builtin_cpu_supports("avx512f"))
		skip();
	/* MobileNetV2's stem in small: rows of 15 (one chain a row at batch
	 * 1; blocks of 64 across rows with a batch), rows of 70 (a block of
	 * 64 and one of 6), the left pad column at the edge */
	sf_case(2, 2, 3, 32, I{ 20, 30 }, I{ 3, 3 }, I{ 2, 2 }, I{ 1, 1 }, I{ 1, 1 }, I{ 1, 1 });
	sf_case(2, 2, 3, 32, I{ 7, 140 }, I{ 3, 3 }, I{ 2, 2 }, I{ 1, 1 }, I{ 1, 1 }, I{ 0, 1 });
	/* ResNet's 7x7 stem: 21 window rows in 6 tiles of 3 and 4; 20
	 * output channels (a partial second vector) */
	sf_case(2, 2, 3, 20, I{ 15, 14 }, I{ 7, 7 }, I{ 2, 2 }, I{ 1, 1 }, I{ 3, 3 }, I{ 3, 2 });
	/* 5x5 windows of stride 1 and 3, dilated rows, uneven pads on both
	 * edges, 4 tiles of 5 rows; one vector of channels, partial */
	sf_case(2, 3, 4, 16, I{ 9, 23 }, I{ 5, 5 }, I{ 1, 1 }, I{ 2, 1 }, I{ 2, 1 }, I{ 1, 3 });
	sf_case(2, 2, 2, 9, I{ 11, 40 }, I{ 3, 5 }, I{ 2, 3 }, I{ 1, 1 }, I{ 0, 4 }, I{ 2, 2 });
	/* the U-Net's 3x3 of stride 1 on rows of 64 and more in small: 96
	 * window rows in 11 tiles */
	sf_case(2, 2, 32, 32, I{ 5, 66 }, I{ 3, 3 }, I{ 1, 1 }, I{ 1, 1 }, I{ 1, 1 }, I{ 1, 1 });
	/* 1-D: units of whole items at batch 1 too */
	sf_case(1, 3, 3, 48, I{ 150 }, I{ 7 }, I{ 2 }, I{ 1 }, I{ 3 }, I{ 2 });
}

/* The pointwise tiles of conv_grad_pw.c (a 1x1 of stride 1 without pads,
 * units of at most 64 positions): each element s = 0, then the units
 * (batch items, or with a batch of one plane rows) from the last to the
 * first, s = s + (t = 0, t = fma(dy, x, t) over the unit's positions). */
static float *pf_replay(const struct cgf *c)
{
	int64_t svol = c->ys[0] * c->ys[1] * c->ys[2];
	int64_t unit = c->n >= 2 || c->nsp < 2 ? svol : svol / c->ys[3 - c->nsp];
	float *w = calloc((size_t)(c->cy * c->cx), sizeof *w);
	const float *x = c->x.data, *dy = c->dy.data;

	for (int64_t m = 0; m < c->cy; m++)
		for (int64_t ci = 0; ci < c->cx; ci++) {
			float s = 0;
			for (int64_t nb = c->n - 1; nb >= 0; nb--)
				for (int64_t u = svol / unit - 1; u >= 0; u--) {
					float t = 0;
					for (int64_t p = u * unit; p < (u + 1) * unit; p++)
						t = fmaf(dy[(nb * c->cy + m) * svol + p], x[(nb * c->cx + ci) * svol + p], t);
					s = s + t;
				}
			w[m * c->cx + ci] = s;
		}
	return w;
}

/* A 1x1 case on the pointwise tiles (forced: mode 1, or auto: mode 0):
 * the scalar replay bit for bit, hpdlf_lean's the same bits, the
 * workspace the sgemm path's (the planner's figure does not change), then
 * cgf_check (naive, 1 vs 2 threads, chains of bands). */
static void pf_case(int mode, int nsp, int64_t n, int64_t cx, int64_t cy, const int *xs)
{
	static const int one[3] = { 1, 1, 1 }, zero[3] = { 0, 0, 0 };
	struct cgf c;
	struct cgf_attrs at;
	struct hp_attr a[7];
	struct hp_tensor o, lean, in[2];
	char what[160];
	size_t ws, wsg, wsl;

	cgf_init(&c, nsp, n, cx, cy, 1, xs, one, one, one, zero, zero);
	snprintf(what, sizeof what, "pointwise %dD n=%lld cx=%lld cy=%lld mode %d", nsp, (long long)n, (long long)cx,
		 (long long)cy, mode);
	float *want = pf_replay(&c);
	hp_pfilt_set_mode(-1);
	wsg = filter(&c, &c.dy, &c.x, NULL, -1, 0, -1, NULL, &o);
	hp_tensor_free(&o);
	hp_pfilt_set_mode(mode);
	ws = filter(&c, &c.dy, &c.x, NULL, -1, 0, -1, pool2, &o);
	if (memcmp(o.data, want, hp_tensor_bytes(&o)))
		fail_msg("%s: not the scalar replay's bits", what);
	if (mode == 0 && ws != wsg)
		fail_msg("%s: workspace %zu, the sgemm path's %zu", what, ws, wsg);
	cgf_attrs(&c, -1, 0, -1, &at);
	memcpy(a, at.a, (size_t)at.n * sizeof *a);
	a[at.n] = kt_int("hpdlf_lean", 1);
	in[0] = c.dy;
	in[1] = c.x;
	wsl = grun("ConvGradFilter", 2, in, at.n + 1, a, 1, &lean, pool2);
	if (memcmp(lean.data, want, hp_tensor_bytes(&lean)))
		fail_msg("%s: hpdlf_lean changed the bits", what);
	assert_true(wsl <= ws);
	hp_tensor_free(&lean);
	hp_tensor_free(&o);
	cgf_check(&c, what);
	hp_pfilt_set_mode(0);
	free(want);
	cgf_free(&c);
}

static void test_filter_pw(void **state)
{
	(void)state;
	if (!__builtin_cpu_supports("avx512f"))
		skip();
	/* MobileNetV2's projection 96 -> 24 with rows of 28 (batch of one:
	 * units of rows; shares of 32 channels, tiles of 12 output channels) */
	pf_case(0, 2, 1, 96, 24, I{ 5, 28 });
	/* its expansion 32 -> 192 at rows of 14 */
	pf_case(0, 2, 1, 32, 40, I{ 4, 14 });
	/* 48 in (a share of one vector), 13 out (a tile of 1), rows of 17
	 * (a transpose of one position), 30 positions: 16 + 14 */
	pf_case(0, 2, 1, 48, 13, I{ 6, 17 });
	pf_case(0, 2, 1, 16, 64, I{ 3, 30 });
	/* units of batch items: 5 x 6 planes, 3-D planes of 2 x 3 x 9 */
	pf_case(0, 2, 3, 64, 7, I{ 5, 6 });
	pf_case(0, 3, 2, 32, 56, I{ 2, 3, 9 });
	/* MobileNetV2's expansion 24 -> 144 at rows of 56 (a vector of 8
	 * channels; one block of channels, its output channels in two
	 * shares); 40 in: a block of 32 and one of 8 */
	pf_case(0, 2, 1, 24, 144, I{ 3, 56 });
	pf_case(0, 2, 1, 40, 30, I{ 4, 20 });
	/* forced where auto declines: 5 channels in, rows of 5, a 1-D item
	 * of 12, the most positions a unit takes */
	pf_case(1, 2, 2, 5, 26, I{ 3, 7 });
	pf_case(1, 2, 1, 16, 5, I{ 4, 5 });
	pf_case(1, 1, 3, 32, 9, I{ 12 });
	pf_case(1, 2, 1, 32, 12, I{ 3, 64 });
	/* tiny units (chunks of units, the sums in registers between them):
	 * planes of one position read in place, in auto (48 in; 20 in, the
	 * second vector masked); forced where auto declines (the sgemm
	 * path's workspace is below a chunk's): items of 2x2 (40 in: a
	 * block of 32 and a masked one of 8; 45 out: tiles of 4 and 1), 40
	 * items of 1x2 (chunks of 32 and 8), 9 items of 3x3 (chunks of 7 and
	 * 2), rows of 3 at a batch of one, 1-D items of 5 */
	pf_case(0, 2, 5, 48, 30, I{ 1, 1 });
	pf_case(0, 2, 3, 20, 9, I{ 1, 1 });
	pf_case(1, 2, 3, 40, 45, I{ 2, 2 });
	pf_case(1, 2, 40, 16, 6, I{ 1, 2 });
	pf_case(1, 2, 9, 24, 10, I{ 3, 3 });
	pf_case(1, 2, 1, 33, 17, I{ 3, 3 });
	pf_case(1, 1, 3, 64, 20, I{ 5 });
}

/* Attribute hpdlf_lean (exec/split.c gives it where a filter gradient's
 * workspace decides the smallest budget): one worker's buffers, the same
 * bits as with every worker's, on two threads; the workspace smaller by
 * a worker's buffers when the rows are cut in shares for several cores. */
static size_t lean_case(int nsp, int64_t n, int64_t cx, int64_t cy, const int *xs, const int *k, const int *p)
{
	static const int one[3] = { 1, 1, 1 };
	struct cgf c;
	struct cgf_attrs at;
	struct hp_attr a[7];
	struct hp_tensor in[2], full, lean;
	size_t wf, wl;

	cgf_init(&c, nsp, n, cx, cy, 1, xs, k, one, one, p, p);
	cgf_attrs(&c, -1, 0, n >= 2 ? 0 : 2, &at);
	memcpy(a, at.a, (size_t)at.n * sizeof *a);
	a[at.n] = kt_int("hpdlf_lean", 1);
	in[0] = c.dy;
	in[1] = c.x;
	wf = grun("ConvGradFilter", 2, in, at.n, a, 1, &full, pool2);
	wl = grun("ConvGradFilter", 2, in, at.n + 1, a, 1, &lean, pool2);
	if (memcmp(full.data, lean.data, hp_tensor_bytes(&full)))
		fail_msg("ConvGradFilter %dD n=%lld: hpdlf_lean changed the bits", nsp, (long long)n);
	assert_true(wl <= wf);
	if (hp_conv_ws_threads() > 1 && !(wl < wf))
		fail_msg("ConvGradFilter %dD n=%lld: hpdlf_lean kept %zu workspace bytes", nsp, (long long)n, wl);
	hp_tensor_free(&full);
	hp_tensor_free(&lean);
	cgf_free(&c);
	return wl;
}

static void test_filter_lean(void **state)
{
	(void)state;
	/* the 3-D U-Net's decoder convolutions at a batch of one (units: planes) */
	lean_case(3, 1, 32, 16, I{ 9, 12, 12 }, I{ 3, 3, 3 }, I{ 1, 1, 1 });
	/* units of batch items */
	lean_case(2, 3, 24, 8, I{ 11, 13 }, I{ 3, 3 }, I{ 1, 1 });
	lean_case(1, 2, 40, 6, I{ 300 }, I{ 5 }, I{ 2 });
	/* the Fire net's stem (tests/train/check_train_quarter.py): on the
	 * co-lane tiles, lean names their one worker's chunks of one block,
	 * not the sgemm path's one-worker buffers (97 KiB: a third of the
	 * net's peak) */
	size_t wl = lean_case(2, 2, 8, 16, I{ 24, 24 }, I{ 3, 3 }, I{ 1, 1 });
	if (__builtin_cpu_supports("avx512f") && wl > 48 * 1024)
		fail_msg("the Fire stem's lean filter gradient names %zu workspace bytes", wl);
}

/* The auto plan took the slab path somewhere above (test order: last). */
static void test_filter_paths(void **state)
{
	(void)state;
	assert_true(slab_runs > 0);
}

/* ---- BiasGrad -------------------------------------------------------------- */

static void bias(const struct hp_tensor *dy, const struct hp_tensor *acc, int partial, int unit, struct hp_pool *pool,
		 struct hp_tensor *out)
{
	struct hp_attr a[2] = { kt_int("partial", 1), kt_int("hpdlf_unit_axis", unit) };
	struct hp_tensor in[2] = { *dy };

	if (acc)
		in[1] = *acc;
	if (partial)
		grun("BiasGrad", acc ? 2 : 1, in, unit >= 0 ? 2 : 1, a, 1, out, pool);
	else
		grun("BiasGrad", acc ? 2 : 1, in, unit >= 0 ? 1 : 0, a + 1, 1, out, pool);
}

/* Bands of dY on `axis` from the last to the first; all partial but the
 * first band's when last_float. */
static struct hp_tensor bias_chain(const struct hp_tensor *dy, int axis, const int64_t *cut, int nb, int last_float)
{
	struct hp_tensor acc = { 0 }, out;

	for (int i = nb - 1; i >= 0; i--) {
		struct hp_tensor b = slice(dy, axis, cut[i], cut[i + 1]);
		bias(&b, acc.data ? &acc : NULL, !(i == 0 && last_float), axis, NULL, &out);
		hp_tensor_free(&acc);
		acc = out;
		hp_tensor_free(&b);
	}
	return acc;
}

/* Random floats scaled by 2^-30 .. 2^29: their double sums round, so
 * that the order of the sum shows in the bits. */
static struct hp_tensor wide(int rank, const int64_t *dims, unsigned seed)
{
	struct hp_tensor t = tens(HP_F32, rank, dims, seed);
	float *v = t.data;
	uint32_t x = seed;

	for (int64_t i = 0; i < hp_shape_numel(&t.shape); i++) {
		x = x * 1664525u + 1013904223u;
		v[i] = ldexpf(v[i], (int)(x >> 26) - 30);
	}
	return t;
}

static void bias_case(int rank, const int64_t *dims)
{
	struct hp_tensor dy = wide(rank, dims, 77), whole, wd, ch, acc, got;
	int64_t ch_ = dims[1], inner = hp_shape_numel(&dy.shape) / ch_, cut[64];
	double *ref = calloc((size_t)ch_, sizeof *ref), *ra = calloc((size_t)ch_, sizeof *ra);
	int axis = dims[0] >= 2 ? 0 : 2;

	for (int64_t i = 0; i < hp_shape_numel(&dy.shape); i++)
		ref[i / (inner / dims[0]) % ch_] += ((const float *)dy.data)[i];
	bias(&dy, NULL, 0, -1, NULL, &whole);
	bias(&dy, NULL, 1, -1, NULL, &wd);
	assert_int_equal(whole.dtype, HP_F32);
	assert_int_equal(wd.dtype, HP_F64);
	close_to(&whole, ref, 1e-6, "BiasGrad vs naive");
	close_to(&wd, ref, 1e-10, "BiasGrad partial vs naive");
	acc = tens(HP_F64, 1, &ch_, 5);
	bias(&dy, &acc, 1, -1, pool2, &got);
	for (int64_t c = 0; c < ch_; c++)
		ra[c] = ref[c] + ((const double *)acc.data)[c];
	close_to(&got, ra, 1e-10, "BiasGrad with a running sum vs naive");
	hp_tensor_free(&got);
	for (int w = 0; w < NCUTS && (axis == 0 || rank >= 4); w++) {
		int nb = cuts(dims[axis], w, cut);
		ch = bias_chain(&dy, axis, cut, nb, 1);
		same_bits(&ch, &whole, "BiasGrad chain (float)");
		hp_tensor_free(&ch);
		ch = bias_chain(&dy, axis, cut, nb, 0);
		same_bits(&ch, &wd, "BiasGrad chain (partial, double)");
		hp_tensor_free(&ch);
	}
	free(ref);
	free(ra);
	hp_tensor_free(&acc);
	hp_tensor_free(&whole);
	hp_tensor_free(&wd);
	hp_tensor_free(&dy);
}

static void test_bias(void **state)
{
	(void)state;
	bias_case(3, (int64_t[]){ 4, 5, 37 });
	bias_case(4, (int64_t[]){ 3, 6, 9, 11 });
	bias_case(4, (int64_t[]){ 1, 6, 9, 11 });
	bias_case(5, (int64_t[]){ 2, 3, 4, 5, 6 });
	bias_case(5, (int64_t[]){ 1, 3, 7, 5, 6 });
}

/* ---- GemmGrad -------------------------------------------------------------- */

struct gg {
	int ta, tb;
	int64_t m, k, n;
	struct hp_gemm_tiles t;
	struct hp_tensor dy, a, b;
};

static void gemm_grad(const struct gg *g, const struct hp_tensor *dy, const struct hp_tensor *b,
		      const struct hp_tensor *acc, int tile_attr, struct hp_pool *pool, struct hp_tensor *out)
{
	int64_t tile[3] = { g->t.mb, g->t.nb, g->t.kb };
	struct hp_attr a[4] = { kt_float("alpha", 0.75f), kt_int("transA", g->ta), kt_int("transB", g->tb),
				kt_ints(HP_GEMM_TILE_ATTR, 3, tile) };
	struct hp_tensor in[4] = { *dy, g->a, *b };

	if (acc)
		in[3] = *acc;
	grun("GemmGrad", acc ? 4 : 3, in, tile_attr ? 4 : 3, a, 2, out, pool);
}

/* dA and dB in double, in A's and B's layouts. */
static void gg_naive(const struct gg *g, double *da, double *db)
{
	const float *dy = g->dy.data, *a = g->a.data, *b = g->b.data;

	for (int64_t i = 0; i < g->m; i++)
		for (int64_t q = 0; q < g->k; q++) {
			double s = 0;
			for (int64_t j = 0; j < g->n; j++)
				s += (double)dy[i * g->n + j] * b[g->tb ? j * g->k + q : q * g->n + j];
			da[g->ta ? q * g->m + i : i * g->k + q] = 0.75 * s;
		}
	for (int64_t q = 0; q < g->k; q++)
		for (int64_t j = 0; j < g->n; j++) {
			double s = 0;
			for (int64_t i = 0; i < g->m; i++)
				s += (double)a[g->ta ? q * g->m + i : i * g->k + q] * dy[i * g->n + j];
			db[g->tb ? j * g->k + q : q * g->n + j] = 0.75 * s;
		}
}

/* Blocks [cut[i], cut[i+1]) of N from the last to the first, dA chained
 * through input 3; each block's dB against the whole's rows or columns. */
static void gg_chain(const struct gg *g, const struct hp_tensor *whole, const int64_t *cut, int nb,
		     struct hp_pool *pool, const char *what)
{
	struct hp_tensor acc = { 0 }, out[2];
	char msg[160];

	for (int i = nb - 1; i >= 0; i--) {
		struct hp_tensor dy = slice(&g->dy, 1, cut[i], cut[i + 1]);
		struct hp_tensor b = slice(&g->b, g->tb ? 0 : 1, cut[i], cut[i + 1]);
		struct hp_tensor wdb = slice(&whole[1], g->tb ? 0 : 1, cut[i], cut[i + 1]);
		gemm_grad(g, &dy, &b, acc.data ? &acc : NULL, 1, pool, out);
		snprintf(msg, sizeof msg, "%s: dB of block [%lld, %lld)", what, (long long)cut[i], (long long)cut[i + 1]);
		same_bits(&out[1], &wdb, msg);
		hp_tensor_free(&acc);
		acc = out[0];
		hp_tensor_free(&out[1]);
		hp_tensor_free(&dy);
		hp_tensor_free(&b);
		hp_tensor_free(&wdb);
	}
	snprintf(msg, sizeof msg, "%s: chained dA", what);
	same_bits(&acc, &whole[0], msg);
	hp_tensor_free(&acc);
}

/* tile: the whole product's tiling, or NULL for hp_gemm_tiles'. */
static void gg_case(int64_t m, int64_t k, int64_t n, const int64_t *tile)
{
	for (int t = 0; t < 4; t++) {
		struct gg g = { .ta = t & 1, .tb = t >> 1, .m = m, .k = k, .n = n };
		struct hp_tensor whole[2], two[2];
		int64_t cut[64], nt, nb = 0;
		double *da = malloc((size_t)(m * k) * sizeof *da), *db = malloc((size_t)(k * n) * sizeof *db);
		char what[96];

		if (tile)
			g.t = (struct hp_gemm_tiles){ .mb = tile[0], .nb = tile[1], .kb = tile[2] };
		else
			hp_gemm_tiles(m, n, k, &g.t);
		g.dy = tens(HP_F32, 2, (int64_t[]){ m, n }, 31);
		g.a = tens(HP_F32, 2, g.ta ? (int64_t[]){ k, m } : (int64_t[]){ m, k }, 32);
		g.b = tens(HP_F32, 2, g.tb ? (int64_t[]){ n, k } : (int64_t[]){ k, n }, 33);
		snprintf(what, sizeof what, "GemmGrad transA %d transB %d %lldx%lldx%lld", g.ta, g.tb, (long long)m,
			 (long long)n, (long long)k);
		gemm_grad(&g, &g.dy, &g.b, NULL, tile != NULL, NULL, whole);
		gg_naive(&g, da, db);
		close_to(&whole[0], da, 1e-5, "GemmGrad dA vs naive");
		close_to(&whole[1], db, 1e-5, "GemmGrad dB vs naive");
		gemm_grad(&g, &g.dy, &g.b, NULL, tile != NULL, pool2, two);
		same_bits(&two[0], &whole[0], "GemmGrad dA, 2 threads vs 1");
		same_bits(&two[1], &whole[1], "GemmGrad dB, 2 threads vs 1");
		nt = (n + g.t.nb - 1) / g.t.nb;
		assert_true(nt >= 3); /* blocks of several tiles and of one */
		for (int w = 0; w < NCUTS; w++) {
			int c = cuts(nt, w, cut);
			for (int i = 0; i <= c; i++)
				cut[i] = cut[i] * g.t.nb < n ? cut[i] * g.t.nb : n;
			nb = c;
			gg_chain(&g, whole, cut, nb, w & 1 ? pool2 : NULL, what);
		}
		free(da);
		free(db);
		hp_tensor_free(&whole[0]);
		hp_tensor_free(&whole[1]);
		hp_tensor_free(&two[0]);
		hp_tensor_free(&two[1]);
		hp_tensor_free(&g.dy);
		hp_tensor_free(&g.a);
		hp_tensor_free(&g.b);
	}
}

static void test_gemm(void **state)
{
	(void)state;
	/* hp_gemm_tiles' own: two M tiles, four N tiles (the last partial),
	 * five K tiles; enough flops for the pool */
	gg_case(280, 300, 100, NULL);
	/* a small explicit tiling, many blocks */
	gg_case(40, 50, 37, (const int64_t[]){ 16, 8, 32 });
}

static int setup(void **state)
{
	(void)state;
	return hp_pool_create(2, &pool2);
}

static int teardown(void **state)
{
	(void)state;
	hp_pool_destroy(pool2);
	return 0;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_filter_1d), cmocka_unit_test(test_filter_2d), cmocka_unit_test(test_filter_3d),
		cmocka_unit_test(test_filter_row_units), cmocka_unit_test(test_filter_lean), cmocka_unit_test(test_filter_reg), cmocka_unit_test(test_filter_reg_fit), cmocka_unit_test(test_filter_update), cmocka_unit_test(test_filter_colane), cmocka_unit_test(test_filter_lane), cmocka_unit_test(test_filter_pw), cmocka_unit_test(test_filter_grp_colane), cmocka_unit_test(test_filter_stem), cmocka_unit_test(test_filter_paths), cmocka_unit_test(test_bias), cmocka_unit_test(test_gemm),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
