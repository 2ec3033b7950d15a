/* Weight partitioning (see split_weight.h).  The rewrite works on the
 * forward graph, so autodiff derives the backward of the blocks and the
 * optimizer updates each block as its own parameter.  The whole weight
 * stays in the graph without uses: it keeps the name, shape and bytes
 * that checkpoints and ONNX export write. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hpdlf/error.h"
#include "common/name.h"
#include "exec/exec_internal.h"
#include "exec/split_weight.h"
#include "exec/train_internal.h"
#include "kernels/band.h"
#include "kernels/gemm_tile.h"

#define WS_ALIGN 4096ull      /* the store's unit of DRAM accounting */
#define WS_MAX_PARTS 4096     /* Concat takes at most this many inputs */
#define WS_SPLIT_MAX 64       /* Split gives at most this many outputs */

struct ws_cand {
	int node, x, w, c, y;
	int reduce;           /* cut the reduction axis: partial products summed */
	int c_split;          /* feature cut: C cut alongside (else shared, a scalar) */
	int c_dim;            /* the dim of C that is cut */
	int c_copy, c_root;   /* C shared with other nodes: blocks get copies of the initializer c_root */
	int x_axis;           /* reduction cut: the axis of X cut */
	int matmul;
	int conv;             /* Conv: output channels cut, outputs concatenated on axis 1 */
	int path;             /* its kernel path (kernels/band.h), kept by the blocks */
	int chain;            /* inference reduction cut: block j accumulates into block j - 1 */
	int64_t rows;         /* the weight's outer dim */
	int64_t quantum;      /* blocks are whole tiles of the kernels (bitwise) */
	int train;            /* training: finer blocks when whole tiles do not fit */
	struct hp_gemm_tiles t; /* the whole product's tiling */
	uint64_t xb, yb, wb, cb, ws;
};

static uint64_t al(uint64_t b)
{
	return (b + WS_ALIGN - 1) / WS_ALIGN * WS_ALIGN;
}

static uint64_t max2(uint64_t a, uint64_t b)
{
	return a > b ? a : b;
}

static uint64_t vbytes(const struct hp_graph *g, int v)
{
	struct hp_tensor t;

	if (v < 0)
		return 0;
	t = (struct hp_tensor){ .dtype = g->values[v].dtype, .shape = g->values[v].shape };
	return hp_tensor_bytes(&t);
}

/* Tensors the optimizer step of one block holds: p, grad, p' and two per
 * state tensor (Adam: two moments and the step counter's page). */
static int update_copies(const struct hp_train_spec *sp)
{
	if (!sp)
		return 0;
	if (sp->optimizer != HP_OPT_SGD)
		return 7;
	return sp->momentum != 0 ? 5 : 3;
}

/* The most one step of this product needs with the weight cut in blocks
 * of r rows (r = rows: as it is): the blocks' products, the Concat or
 * Split and Adds around them, their gradients and the optimizer steps. */
static uint64_t need(const struct ws_cand *c, int64_t r, int copies)
{
	uint64_t k = (uint64_t)((c->rows + r - 1) / r), pb = c->wb / (uint64_t)c->rows * (uint64_t)r, m;

	if (k == 1) {
		m = al(c->xb) + al(c->wb) + al(c->cb) + al(c->yb);
		if (copies)
			m = max2(m, al(c->yb) + 2 * al(c->xb) + 2 * al(c->wb) + al(c->cb));
	} else if (!c->reduce) {
		uint64_t yp = c->yb / (uint64_t)c->rows * (uint64_t)r;
		uint64_t cp = c->c_split ? c->cb / (uint64_t)c->rows * (uint64_t)r : c->cb;
		m = max2(al(c->xb) + al(pb) + al(cp) + al(yp), k * al(yp) + al(c->yb));
		if (copies) /* GemmGrad of a block; GradSum of dX */
			m = max2(m, max2(al(yp) + 2 * al(c->xb) + 2 * al(pb), 3 * al(c->xb)));
	} else {
		uint64_t xp = c->xb / (uint64_t)c->rows * (uint64_t)r;
		m = max2(al(c->xb) + k * al(xp), al(xp) + al(pb) + al(c->cb) + al(c->yb));
		/* chain: a block reads the running sum and writes the next; else Adds */
		m = max2(m, c->chain ? al(xp) + al(pb) + 2 * al(c->yb) : 3 * al(c->yb));
		if (copies)
			m = max2(m, al(c->yb) + 2 * al(xp) + 2 * al(pb));
	}
	if (copies)
		m = max2(m, (uint64_t)copies * al(pb) + (copies == 7 ? WS_ALIGN : 0));
	return m + c->ws;
}

/* Rows per block for k blocks, a multiple of q: q = 64 (16 for small
 * weights) keeps blocks whole multiples of sgemm's register tiles. */
static int64_t rows_for(const struct ws_cand *c, int64_t k, int64_t q)
{
	int64_t r = (c->rows + k - 1) / k;

	r = (r + q - 1) / q * q;
	return r < c->rows ? r : c->rows;
}

/* Fewest blocks of a multiple of q rows whose steps fit avail; 0: none. */
static int64_t fewest(const struct ws_cand *c, uint64_t avail, int copies, int64_t q)
{
	int64_t kmax = c->rows < WS_MAX_PARTS ? c->rows : WS_MAX_PARTS;

	for (int64_t k = 2; k <= kmax; k++)
		if (need(c, rows_for(c, k, q), copies) <= avail)
			return rows_for(c, k, q);
	return 0;
}

/* The fewest blocks (of a multiple of q rows) whose steps need at most
 * 1/8 more than the least any cut needs; c->rows if no cut helps. */
static int64_t least(const struct ws_cand *c, int copies, int64_t q)
{
	int64_t kmax = c->rows < WS_MAX_PARTS ? c->rows : WS_MAX_PARTS, r;
	uint64_t floor = need(c, c->rows, copies);

	for (int64_t k = 2; k <= kmax; k++) {
		uint64_t nd = need(c, rows_for(c, k, q), copies);
		floor = nd < floor ? nd : floor;
	}
	r = fewest(c, floor + floor / 8, copies, q);
	return r ? r : c->rows;
}

/* Rows per block: none when the product's steps fit the budget as they
 * are; else those of the fewest blocks whose steps fit `avail` (85% of
 * it: room to keep neighbours resident).  Blocks are whole tiles of the
 * kernels, so that results stay bitwise those in core; when none fit,
 * training takes blocks of whole register tiles (q), else any.  When none fit
 * (the activations alone are too big), the fewest near the least need.
 * c->rows: no cut. */
static int64_t choose_rows(const struct ws_cand *c, uint64_t budget, uint64_t avail, int copies)
{
	int64_t q = c->rows >= 256 ? 64 : 16, r;

	if (need(c, c->rows, copies) <= budget)
		return c->rows; /* fits as it is: cut nothing */
	if (c->quantum && ((r = fewest(c, avail, copies, c->quantum)) || !c->train))
		return r ? r : least(c, copies, c->quantum);
	/* training, when whole tiles do not fit: finer blocks, whose results
	 * differ from the in-core ones in the last bits (hpdlf-exec(1)) */
	if ((r = fewest(c, avail, copies, q)) || (r = fewest(c, avail, copies, 1)))
		return r;
	return least(c, copies, 1);
}

static int movable(const struct hp_graph *g, int v)
{
	const struct hp_value *w = &g->values[v];

	return w->kind == HP_VALUE_INITIALIZER && w->dtype == HP_F32 && w->nconsumers == 1 && !w->is_output &&
	       w->part_of < 0 && w->next < 0 && (w->data || w->src.kind == HP_BLOB_FILE) &&
	       hp_shape_numel(&w->shape) > 0;
}

/* The initializer a constant value v is (through Identity nodes: the
 * PyTorch exporter writes equal parameters once and the others as
 * Identity of it, as torchvision's zero-initialised biases), or -1. */
static int const_root(const struct hp_graph *g, int v)
{
	for (int hops = 0; v >= 0 && hops < 16; hops++) {
		const struct hp_value *x = &g->values[v];
		const struct hp_node *p = x->producer >= 0 ? &g->nodes[x->producer] : NULL;
		if (x->kind == HP_VALUE_INITIALIZER || x->kind == HP_VALUE_CONSTANT)
			return x->dtype == HP_F32 && x->part_of < 0 && (x->data || x->src.kind != HP_BLOB_NONE) ? v : -1;
		if (!p || p->domain[0] || strcmp(p->op_type, "Identity") || p->ninputs < 1)
			return -1;
		v = p->inputs[0];
	}
	return -1;
}

/* Gemm bias: cut with the features when it is a row [N] / [1, N]; a
 * Conv's [C] with its channels.  Inference also cuts a bias that other
 * nodes share (c_copy: each block gets a copy of its range). */
static int bias_cut(const struct hp_graph *g, struct ws_cand *c, int64_t n, int train)
{
	const struct hp_value *cv = &g->values[c->c];

	c->cb = vbytes(g, c->c);
	if (hp_shape_numel(&cv->shape) == 1)
		return 1; /* shared by every block */
	if (hp_shape_numel(&cv->shape) != n || cv->shape.rank > 2 || (cv->shape.rank == 2 && cv->shape.dims[0] != 1))
		return 0;
	if (!movable(g, c->c)) {
		if (train || (c->c_root = const_root(g, c->c)) < 0)
			return 0;
		c->c_copy = 1;
	}
	c->c_split = 1;
	c->c_dim = cv->shape.rank - 1;
	return 1;
}


/* The whole product's tiling (M x N x K from X and the weight). */
static void cand_tiles(const struct hp_graph *g, struct ws_cand *c)
{
	const struct hp_shape *w = &g->values[c->w].shape;
	int64_t k = w->dims[c->reduce ? 0 : 1], n = w->dims[c->reduce ? 1 : 0];
	int64_t m = k ? hp_shape_numel(&g->values[c->x].shape) / k : 0;

	if (hp_gemm_node_tiles(&g->nodes[c->node], m, n, k, &c->t) < 0)
		hp_gemm_tiles(m, n, k, &c->t); /* the kernel's prepare rejected it already */
}

/* Output channels of a Conv (inference): block j is the same Conv over
 * channels [j r, (j + 1) r) of W and B, and Concat along the channels
 * gives y.  On the paths of hpdlf's own tiles (hp_conv_channels_exact:
 * 1x1, kxk, dot) every output channel is its own chain of products over
 * the input channels and taps, the same in a block as in the whole, and
 * the blocks keep the whole's path, so the outputs are bitwise those in
 * core; blocks are multiples of CONV_QUANTUM channels (the kxk path's
 * least).  Convs on sgemm paths stay whole.  Only ungrouped ones: a
 * group's outputs read only its input channels, which a cut would have
 * to split too.  Training keeps the Conv whole (the blocks' input
 * gradients would be summed in another order).  Only where the weight
 * outweighs the activations: else bands of the activations cut the step
 * cheaper. */
#define CONV_QUANTUM 8
static int conv_candidate(struct hp_graph *g, int i, struct ws_cand *c)
{
	const struct hp_value *w = &g->values[c->w], *x = &g->values[c->x];
	struct hp_node *n = &g->nodes[i];

	if (!movable(g, c->w) || w->shape.rank < 3 || x->shape.rank != w->shape.rank || x->dtype != HP_F32 ||
	    hp_attr_int(n, "group", 1) != 1 || w->shape.dims[0] < 2 * CONV_QUANTUM ||
	    !hp_conv_channels_exact(g, n, &c->path))
		return 0;
	c->conv = 1;
	c->rows = w->shape.dims[0];
	c->xb = vbytes(g, c->x);
	c->yb = vbytes(g, c->y);
	c->wb = vbytes(g, c->w);
	c->ws = (n->workspace + WS_ALIGN - 1) / WS_ALIGN * WS_ALIGN;
	c->quantum = CONV_QUANTUM;
	/* activations larger than the weight: the band pass cuts the step
	 * (split_band.c) for less than a weight cut, whose blocks each read
	 * all of X */
	if (c->wb < c->xb + c->yb)
		return 0;
	if (c->c >= 0)
		return bias_cut(g, c, c->rows, 0);
	return 1;
}

static int candidate(struct hp_graph *g, int i, struct ws_cand *c, int train)
{
	const struct hp_node *n = &g->nodes[i];
	int gemm = !strcmp(n->op_type, "Gemm"), conv = !strcmp(n->op_type, "Conv");

	memset(c, 0, sizeof *c);
	if (n->folded || (n->domain[0] && strcmp(n->domain, "ai.onnx")) ||
	    (!gemm && !(conv && !train) && strcmp(n->op_type, "MatMul")))
		return 0;
	if (n->ninputs < 2 || n->inputs[0] < 0 || n->inputs[1] < 0 || n->outputs[0] < 0)
		return 0;
	c->node = i;
	c->x = n->inputs[0];
	c->w = n->inputs[1];
	c->y = n->outputs[0];
	c->c = (gemm || conv) && n->ninputs > 2 ? n->inputs[2] : -1;
	if (conv)
		return conv_candidate(g, i, c);
	if (!movable(g, c->w) || g->values[c->w].shape.rank != 2 || g->values[c->x].dtype != HP_F32 ||
	    g->values[c->x].shape.rank < 1)
		return 0;
	c->rows = g->values[c->w].shape.dims[0];
	c->matmul = !gemm;
	c->reduce = !gemm || !hp_attr_int(n, "transB", 0);
	c->x_axis = gemm ? (hp_attr_int(n, "transA", 0) ? 0 : 1) : g->values[c->x].shape.rank - 1;
	c->xb = vbytes(g, c->x);
	c->yb = vbytes(g, c->y);
	c->wb = vbytes(g, c->w);
	c->ws = (n->workspace + WS_ALIGN - 1) / WS_ALIGN * WS_ALIGN;
	cand_tiles(g, c);
	if (c->c >= 0 && !c->reduce)
		return bias_cut(g, c, c->rows, train);
	c->cb = c->c >= 0 ? vbytes(g, c->c) : 0;
	return 1;
}

/* The value names of the graph hp_split_weights cuts, in an open-addressed
 * table of value index + 1 that takes in the values appended since the
 * last look (this pass only appends values, and renames none): each block's
 * fresh_name looked through every value, and a 3,334-layer MLP's cut spent
 * two thirds of its --plan there. */
struct names {
	const struct hp_graph *g;
	int seen, cap; /* values taken in; slots (a power of 2) */
	int *slot;
};

static _Thread_local struct names *cut_names;

static uint64_t name_hash(const char *s)
{
	uint64_t h = 0xcbf29ce484222325ull;

	for (; *s; s++)
		h = (h ^ (unsigned char)*s) * 0x100000001b3ull;
	return h;
}

/* i: slot of `name` (its index + 1 there) or of the empty slot where it goes */
static int names_slot(const struct names *t, const char *name)
{
	unsigned i = (unsigned)name_hash(name) & (unsigned)(t->cap - 1);

	while (t->slot[i] && strcmp(t->g->values[t->slot[i] - 1].name, name))
		i = (i + 1) & (unsigned)(t->cap - 1);
	return (int)i;
}

static int names_grow(struct names *t, int want)
{
	int cap = t->cap ? t->cap : 1024, *old = t->slot, ocap = t->cap;

	while (cap < 2 * want)
		cap *= 2;
	if (cap == t->cap)
		return 0;
	if (!(t->slot = calloc((size_t)cap, sizeof *t->slot))) {
		t->slot = old;
		return -ENOMEM;
	}
	t->cap = cap;
	for (int i = 0; i < ocap; i++)
		if (old[i])
			t->slot[names_slot(t, t->g->values[old[i] - 1].name)] = old[i];
	free(old);
	return 0;
}

/* Whether a value is named `name`: -1 when the table cannot say (no
 * memory), then the caller searches. */
static int names_has(struct names *t, const char *name)
{
	if (names_grow(t, t->g->nvalues) < 0)
		return -1;
	for (; t->seen < t->g->nvalues; t->seen++) {
		int i = names_slot(t, t->g->values[t->seen].name);
		if (!t->slot[i])
			t->slot[i] = t->seen + 1;
	}
	return t->slot[names_slot(t, name)] != 0;
}

static int name_taken(const struct hp_graph *g, const char *name)
{
	int has = cut_names && cut_names->g == g ? names_has(cut_names, name) : -1;

	return has >= 0 ? has : hp_graph_find_value(g, name) >= 0;
}

static int fresh_name(const struct hp_graph *g, char *buf, size_t len, const char *base, const char *what, int k)
{
	struct hp_name b;

	hp_name_init(&b, buf, len); /* "%s.%s%d" */
	hp_name_str(&b, base);
	hp_name_mem(&b, ".", 1);
	hp_name_str(&b, what);
	hp_name_int(&b, k);
	for (int s = 1; name_taken(g, buf); s++)
		snprintf(buf, len, "%s.%s%d_%d", base, what, k, s);
	return 0;
}

/* Block [r0, r0 + rn) of a shared bias (c_copy): a new initializer of its
 * own bytes, read from the root's. */
static int add_bias_copy(struct hp_graph *g, const struct ws_cand *c, int k, int64_t r0, int64_t rn)
{
	struct hp_shape s = g->values[c->c].shape;
	uint64_t all = vbytes(g, c->c_root);
	float *buf = malloc(all ? all : 1);
	char name[512];
	int v, rc;

	if (!buf)
		return hp_error(-ENOMEM, "out of memory");
	if ((rc = hp_graph_read_init(g, c->c_root, buf)) < 0) {
		free(buf);
		return rc;
	}
	fresh_name(g, name, sizeof name, g->values[c->c].name, "part", k);
	s.dims[c->c_dim] = rn;
	if ((v = hp_graph_add_value(g, name, HP_VALUE_INITIALIZER, HP_F32, &s)) < 0) {
		free(buf);
		return v;
	}
	memmove(buf, buf + r0, (size_t)rn * sizeof *buf);
	g->values[v].data = buf;
	g->values[v].src = (struct hp_blob){ .kind = HP_BLOB_MEMORY, .length = (uint64_t)rn * sizeof *buf };
	return v;
}

/* Block k of whole: [d0 .. dims[dim] = rn .. ] from index r0 of `dim` (all
 * dims before it are 1 or it is dim 0, so the block is one byte range). */
static int add_part(struct hp_graph *g, int whole, int dim, int k, int64_t r0, int64_t rn)
{
	struct hp_shape s = g->values[whole].shape;
	uint64_t row = vbytes(g, whole) / (uint64_t)s.dims[dim], off = (uint64_t)r0 * row, len = (uint64_t)rn * row;
	char name[512];
	int v;

	fresh_name(g, name, sizeof name, g->values[whole].name, "part", k);
	s.dims[dim] = rn;
	if ((v = hp_graph_add_value(g, name, HP_VALUE_INITIALIZER, g->values[whole].dtype, &s)) < 0)
		return v;
	struct hp_value *w = &g->values[whole], *p = &g->values[v];
	p->trainable = w->trainable;
	p->part_of = whole;
	p->part_offset = off;
	if (w->data) {
		if (!(p->data = malloc(len ? len : 1)))
			return hp_error(-ENOMEM, "out of memory");
		memcpy(p->data, (const char *)w->data + off, len);
		p->src = (struct hp_blob){ .kind = HP_BLOB_MEMORY, .length = len };
	} else {
		p->src = w->src;
		p->src.offset += off;
		p->src.length = len;
	}
	return v;
}

static int add_act(struct hp_graph *g, int base, const char *what, int k)
{
	char name[512];

	fresh_name(g, name, sizeof name, g->values[base].name, what, k);
	return hp_graph_add_value(g, name, HP_VALUE_ACTIVATION, HP_UNDEFINED, NULL);
}

/* A node like `from` (its op and attributes) over in -> out; `acc`: a
 * chained reduction block, which adds its product to in[2] (Gemm with beta
 * 1, MatMulAcc for a MatMul) exactly as the whole's kernel adds K tiles. */
static int clone_node(struct hp_graph *g, int from, int k, int nin, const int *in, int out, int acc)
{
	struct hp_attr one = { .name = "beta", .type = HP_ATTR_FLOAT, .f = 1.0f };
	int matmul = acc && strcmp(g->nodes[from].op_type, "Gemm"), node, rc;
	char name[512], *dom;

	snprintf(name, sizeof name, "%s/part%d", g->nodes[from].name, k);
	if ((node = hp_graph_add_node(g, name, matmul ? "MatMulAcc" : g->nodes[from].op_type, nin, in, 1, &out)) < 0)
		return node;
	if (matmul) {
		if (!(dom = strdup("ai.hpdlf")))
			return hp_error(-ENOMEM, "out of memory");
		free(g->nodes[node].domain);
		g->nodes[node].domain = dom;
	} else if (acc && (rc = hp_graph_add_attr(g, node, &one)) < 0) {
		return rc;
	}
	for (int a = 0; a < g->nodes[from].nattrs; a++) {
		if (acc && !strcmp(g->nodes[from].attrs[a].name, "beta"))
			continue;
		if ((rc = hp_graph_add_attr(g, node, &g->nodes[from].attrs[a])) < 0)
			return rc;
	}
	return node;
}

static int add_op(struct hp_graph *g, const char *base, const char *op, int k, int nin, const int *in, int nout,
		  const int *out, const struct hp_attr *a, int na)
{
	char name[512];
	int node, rc;

	snprintf(name, sizeof name, "%s/%s%d", base, op, k);
	if ((node = hp_graph_add_node(g, name, op, nin, in, nout, out)) < 0)
		return node;
	for (int i = 0; i < na; i++)
		if ((rc = hp_graph_add_attr(g, node, &a[i])) < 0)
			return rc;
	return 0;
}

/* Block j's product x_j W_j (+ C_j) -> y_j; block 0 reuses the node. */
static int block(struct hp_graph *g, const struct ws_cand *c, int j, int xj, int wj, int cj, int yj)
{
	int in[3] = { xj, wj, cj }, nin = cj >= 0 ? 3 : 2;

	if (j > 0) {
		int rc = clone_node(g, c->node, j, nin, in, yj, c->chain);
		return rc < 0 ? rc : 0;
	}
	struct hp_node *n = &g->nodes[c->node];
	for (int i = 0; i < n->ninputs; i++)
		n->inputs[i] = i < nin ? in[i] : -1;
	n->outputs[0] = yj;
	return 0;
}

/* Output features cut: y = Concat(x W_j^T + C_j) along the last axis. */
static int rewrite_feature(struct hp_graph *g, const struct ws_cand *c, int64_t r, int64_t k, int *ys)
{
	int rc;

	for (int j = 0; j < k; j++) {
		int64_t r0 = j * r, rn = c->rows - r0 < r ? c->rows - r0 : r;
		int wj = add_part(g, c->w, 0, j, r0, rn), cj = c->c, yj;
		if (wj < 0)
			return wj;
		if (c->c_split && (cj = c->c_copy ? add_bias_copy(g, c, j, r0, rn) : add_part(g, c->c, c->c_dim, j, r0, rn)) < 0)
			return cj;
		if ((ys[j] = yj = add_act(g, c->y, "part", j)) < 0)
			return yj;
		if ((rc = block(g, c, j, c->x, wj, cj, yj)) < 0)
			return rc;
	}
	struct hp_attr ax = { .name = "axis", .type = HP_ATTR_INT, .i = c->conv ? 1 : g->values[c->y].shape.rank - 1 };
	return add_op(g, g->nodes[c->node].name, "Concat", 0, (int)k, ys, 1, &c->y, &ax, 1);
}

/* x cut along c->x_axis into parts of `sizes`: Split, in two levels past
 * Split's 64 outputs. */
static int split_x(struct hp_graph *g, const struct ws_cand *c, int64_t k, const int64_t *sizes, int *xs)
{
	int64_t ng = (k + WS_SPLIT_MAX - 1) / WS_SPLIT_MAX, gs[WS_SPLIT_MAX];
	int gv[WS_SPLIT_MAX], rc;
	struct hp_attr a[2] = { { .name = "axis", .type = HP_ATTR_INT, .i = c->x_axis },
				{ .name = "split", .type = HP_ATTR_INTS } };
	const char *base = g->nodes[c->node].name;

	for (int j = 0; j < k; j++)
		if ((xs[j] = add_act(g, c->x, "part", j)) < 0)
			return xs[j];
	if (ng == 1) {
		a[1].n = (int)k;
		a[1].ints = (int64_t *)sizes;
		return add_op(g, base, "Split", 0, 1, &c->x, (int)k, xs, a, 2);
	}
	for (int q = 0; q < ng; q++) {
		gs[q] = 0;
		for (int64_t j = q * WS_SPLIT_MAX; j < k && j < (q + 1) * WS_SPLIT_MAX; j++)
			gs[q] += sizes[j];
		if ((gv[q] = add_act(g, c->x, "group", q)) < 0)
			return gv[q];
	}
	a[1].n = (int)ng;
	a[1].ints = gs;
	if ((rc = add_op(g, base, "Split", 0, 1, &c->x, (int)ng, gv, a, 2)) < 0)
		return rc;
	for (int q = 0; q < ng; q++) {
		int64_t j0 = q * WS_SPLIT_MAX, nj = k - j0 < WS_SPLIT_MAX ? k - j0 : WS_SPLIT_MAX;
		a[1].n = (int)nj;
		a[1].ints = (int64_t *)sizes + j0;
		if ((rc = add_op(g, base, "Split", q + 1, 1, &gv[q], (int)nj, xs + j0, a, 2)) < 0)
			return rc;
	}
	return 0;
}

/* The partial sums of a reduction cut: y = sum_j x_j W_j (+ C in block 0),
 * added in order: chained (block j adds into block j - 1's result) or
 * through Adds (training: autodiff knows them). */
static int reduce_sums(struct hp_graph *g, const struct ws_cand *c, int64_t k, const int *xs, const int *ws, int *ys)
{
	int acc = -1, rc = 0;

	for (int j = 0; j < k && rc == 0; j++) {
		int last = c->chain && j == k - 1;
		if ((ys[j] = last ? c->y : add_act(g, c->y, c->chain ? "sum" : "part", j)) < 0)
			return ys[j];
		rc = block(g, c, j, xs[j], ws[j], j == 0 ? c->c : c->chain ? ys[j - 1] : -1, ys[j]);
	}
	if (c->chain)
		return rc;
	acc = ys[0];
	for (int j = 1; j < k && rc == 0; j++) {
		int in[2] = { acc, ys[j] }, out = j == k - 1 ? c->y : add_act(g, c->y, "sum", j);
		if (out < 0)
			return out;
		rc = add_op(g, g->nodes[c->node].name, "Add", j, 2, in, 1, &out, NULL, 0);
		acc = out;
	}
	return rc;
}

/* Reduction cut: x and the weight cut along K, the partial sums added. */
static int rewrite_reduce(struct hp_graph *g, const struct ws_cand *c, int64_t r, int64_t k, int *ys)
{
	int64_t *sizes = calloc((size_t)k, sizeof *sizes);
	int *xs = calloc((size_t)k, sizeof *xs), *ws = calloc((size_t)k, sizeof *ws), rc = 0;

	if (!sizes || !xs || !ws) {
		rc = hp_error(-ENOMEM, "out of memory");
		goto out;
	}
	for (int j = 0; j < k; j++)
		sizes[j] = c->rows - j * r < r ? c->rows - j * r : r;
	if ((rc = split_x(g, c, k, sizes, xs)) < 0)
		goto out;
	for (int j = 0; j < k && rc == 0; j++)
		if ((ws[j] = add_part(g, c->w, 0, j, j * r, sizes[j])) < 0)
			rc = ws[j];
	if (rc == 0)
		rc = reduce_sums(g, c, k, xs, ws, ys);
out:
	free(sizes);
	free(xs);
	free(ws);
	return rc;
}

/* Every block runs in the whole product's tiling (kernels/gemm_tile.h). */
static int add_tiles(struct hp_graph *g, const struct ws_cand *c)
{
	int64_t v[3] = { c->t.mb, c->t.nb, c->t.kb };
	struct hp_attr a = { .name = HP_GEMM_TILE_ATTR, .type = HP_ATTR_INTS, .ints = v, .n = 3 };

	if (hp_node_attr(&g->nodes[c->node], HP_GEMM_TILE_ATTR))
		return 0;
	return hp_graph_add_attr(g, c->node, &a);
}

/* A Conv's blocks run the path the whole would (kernels/conv.c chooses by
 * channel counts too: the dot path from 16 output channels, kxk from 8),
 * as split_band.c's bands do: the block clones copy the attribute. */
static int pin_conv_path(struct hp_graph *g, const struct ws_cand *c)
{
	struct hp_attr a = { .name = "hpdlf_path", .type = HP_ATTR_INT, .i = c->path };

	if (hp_node_attr(&g->nodes[c->node], "hpdlf_path"))
		return 0;
	return hp_graph_add_attr(g, c->node, &a);
}

static int rewrite(struct hp_graph *g, const struct ws_cand *c, int64_t r)
{
	int64_t k = (c->rows + r - 1) / r;
	int *ys = calloc((size_t)k, sizeof *ys), rc;

	if (!ys)
		return hp_error(-ENOMEM, "out of memory");
	if ((rc = c->conv ? pin_conv_path(g, c) : add_tiles(g, c)) == 0)
		rc = c->reduce ? rewrite_reduce(g, c, r, k, ys) : rewrite_feature(g, c, r, k, ys);
	free(ys);
	if (rc < 0)
		return rc;
	g->values[c->w].trainable = 0; /* its parts are trained */
	if (c->c_split && !c->c_copy)
		g->values[c->c].trainable = 0;
	hp_log(HP_LOG_INFO, "%s: weight '%s' of node '%s' (%s) cut in %lld blocks of %lld rows along its %s axis",
	       g->path, g->values[c->w].name, g->nodes[c->node].name, g->nodes[c->node].op_type, (long long)k,
	       (long long)r, c->reduce ? "reduction" : c->conv ? "output-channel" : "output-feature");
	return 0;
}

/* Training: a weight the Gemm/MatMul cut does not take (a Conv's, a
 * ConvTranspose's, an embedding table) whose optimizer step (`copies`
 * tensors of its size at once: p, grad, p' and the state) does not fit
 * `avail` is stored as blocks of its outer rows, each trained as its own
 * parameter, and the node reads their Concat (axis 0): exact copies, so
 * forward, gradients and updates are bitwise those of the whole weight,
 * and the update steps hold one block at a time.  Returns 1 when cut. */
static uint64_t update_need(const struct hp_graph *g, int node, int slot, int copies)
{
	int w = g->nodes[node].inputs[slot];
	const char *op = g->nodes[node].op_type;

	/* Gemm and MatMul weights are the pass above's (cut there or not) */
	if (w < 0 || !movable(g, w) || !g->values[w].trainable || g->values[w].shape.rank < 2 ||
	    (!g->nodes[node].domain[0] && (!strcmp(op, "Gemm") || !strcmp(op, "MatMul"))) ||
	    g->values[w].shape.dims[0] < 2)
		return 0; /* never cut */
	return (uint64_t)copies * al(vbytes(g, w)) + (copies == 7 ? WS_ALIGN : 0);
}

static int update_wanted(const struct hp_graph *g, int node, int slot, uint64_t budget, int copies)
{
	return update_need(g, node, slot, copies) > budget;
}

static int cut_for_update(struct hp_graph *g, int node, int slot, uint64_t budget, uint64_t avail, int copies)
{
	int w = g->nodes[node].inputs[slot], cat, *parts, rc = 0;
	const struct hp_value *wv;
	int64_t rows, r, k;
	uint64_t row;

	if (!update_wanted(g, node, slot, budget, copies))
		return 0;
	wv = &g->values[w];
	rows = wv->shape.dims[0];
	row = vbytes(g, w) / (uint64_t)rows;
	for (k = 2; k < rows && k < WS_MAX_PARTS; k++)
		if ((uint64_t)copies * al(row * (uint64_t)((rows + k - 1) / k)) + (copies == 7 ? WS_ALIGN : 0) <= avail)
			break;
	r = (rows + k - 1) / k;
	k = (rows + r - 1) / r;
	if (!(parts = calloc((size_t)k, sizeof *parts)))
		return hp_error(-ENOMEM, "out of memory");
	for (int j = 0; j < k && rc >= 0; j++)
		rc = parts[j] = add_part(g, w, 0, j, j * r, rows - j * r < r ? rows - j * r : r);
	if (rc >= 0 && (rc = cat = add_act(g, w, "cat", 0)) >= 0) {
		struct hp_attr ax = { .name = "axis", .type = HP_ATTR_INT, .i = 0 };
		char base[600];
		snprintf(base, sizeof base, "%s/%s", g->nodes[node].name, g->values[w].name);
		if ((rc = add_op(g, base, "Concat", 0, (int)k, parts, 1, &cat, &ax, 1)) >= 0) {
			g->nodes[node].inputs[slot] = cat;
			g->values[w].trainable = 0; /* its parts are trained */
			hp_log(HP_LOG_INFO, "%s: weight '%s' of node '%s' (%s) kept in %lld blocks of %lld rows for its optimizer step",
			       g->path, g->values[w].name, g->nodes[node].name, g->nodes[node].op_type, (long long)k,
			       (long long)r);
		}
	}
	free(parts);
	return rc < 0 ? rc : 1;
}

/* The steps get what staging leaves (their scratch counted with them);
 * blocks aim at 85% of it: room to keep neighbours resident. */
static void steps_budget(const struct hp_budget_layout *l, uint64_t *budget, uint64_t *avail)
{
	*budget = l->budget > l->staging ? l->budget - l->staging : l->budget;
	*avail = *budget / 20 * 17;
}

/* The rows block a candidate is cut in, c->rows when it is not cut. */
static int64_t cut_rows(const struct ws_cand *c, uint64_t budget, uint64_t avail, int copies)
{
	int64_t r = choose_rows(c, budget, avail, copies);

	return r < c->rows ? r : c->rows;
}

struct hp_ws_choice {
	struct ws_cand c;
	int64_t r;
};

static int log_choice(struct hp_ws_log *log, const struct ws_cand *c, int64_t r)
{
	if (log->n == log->cap) {
		int cap = log->cap ? 2 * log->cap : 64;
		struct hp_ws_choice *m = realloc(log->choice, (size_t)cap * sizeof *m);
		if (!m)
			return hp_error(-ENOMEM, "out of memory");
		log->choice = m;
		log->cap = cap;
	}
	log->choice[log->n].c = *c;
	log->choice[log->n++].r = r;
	return 0;
}

/* The largest update need of a weight of nodes[0, n0) (0: none), which
 * the update_cut pass cuts at any budget below it. */
static uint64_t update_max(const struct hp_graph *g, int n0, int copies)
{
	uint64_t most = 0;

	for (int i = 0; i < n0; i++)
		for (int slot = 0; !g->nodes[i].folded && slot < g->nodes[i].ninputs; slot++) {
			uint64_t u = update_need(g, i, slot, copies);
			most = u > most ? u : most;
		}
	return most;
}

static int split_weights(struct hp_graph *g, const struct hp_budget_layout *l, const struct hp_train_spec *spec,
			 int update_cut, int *would_cut, struct hp_ws_log *log)
{
	int n0 = g->nnodes, done = 0, rc, copies = update_copies(spec);
	uint64_t budget, avail;
	struct ws_cand c;

	if (log)
		log->copies = copies, log->cut = l->budget != 0;
	if (!l->budget)
		return 0;
	steps_budget(l, &budget, &avail);
	for (int i = 0; i < n0; i++) {
		if (!candidate(g, i, &c, spec != NULL))
			continue;
		/* whole tiles of the kernels, chained reduction blocks: bitwise
		 * results, in training too (the gradients run the same tiling,
		 * kernels/gemm_grad.c; MatMulAcc's C takes dY as it is) */
		c.chain = c.reduce;
		if (!c.conv)
			c.quantum = c.reduce ? c.t.kb : c.t.nb;
		c.train = spec != NULL;
		int64_t r = cut_rows(&c, budget, avail, copies);
		if (log && (rc = log_choice(log, &c, r)) < 0)
			return rc;
		if (r >= c.rows)
			continue;
		if ((rc = rewrite(g, &c, r)) < 0)
			return hp_error_prefix(rc, "partitioning weight '%s'", g->values[c.w].name);
		done++;
	}
	if (log)
		log->update_max = update_max(g, n0, copies);
	/* without update_cut: whether the pass below would cut, on this graph */
	for (int i = 0; spec && !update_cut && would_cut && !*would_cut && i < n0; i++)
		for (int slot = 0; !g->nodes[i].folded && slot < g->nodes[i].ninputs && !*would_cut; slot++)
			*would_cut = update_wanted(g, i, slot, budget, copies);
	for (int i = 0; spec && update_cut && i < n0; i++) /* g->nodes moves as nodes are added */
		for (int slot = 0; !g->nodes[i].folded && slot < g->nodes[i].ninputs; slot++) {
			int w = g->nodes[i].inputs[slot];
			if ((rc = cut_for_update(g, i, slot, budget, avail, copies)) < 0)
				return hp_error_prefix(rc, "partitioning weight '%s'", g->values[w].name);
			done += rc;
		}
	if (!done)
		return 0;
	if ((rc = hp_graph_finalize(g)) < 0 || (rc = hp_graph_infer(g)) < 0)
		return rc;
	return done;
}

int hp_split_weights(struct hp_graph *g, const struct hp_budget_layout *l, const struct hp_train_spec *spec,
		     int update_cut)
{
	return hp_split_weights_ext(g, l, spec, update_cut, NULL);
}

int hp_split_weights_log(struct hp_graph *g, const struct hp_budget_layout *l, const struct hp_train_spec *spec,
			 int update_cut, int *would_cut, struct hp_ws_log *log)
{
	struct names t = { .g = g }, *outer = cut_names;
	int rc;

	if (would_cut)
		*would_cut = 0;
	if (log)
		memset(log, 0, sizeof *log);
	if (log && (!spec || update_cut))
		return hp_error(HP_EUSAGE, "hp_split_weights_log: training without update_cut only");
	cut_names = &t;
	rc = split_weights(g, l, spec, update_cut, would_cut, log);
	cut_names = outer;
	free(t.slot);
	if (rc < 0)
		hp_ws_log_free(log);
	return rc;
}

int hp_split_weights_ext(struct hp_graph *g, const struct hp_budget_layout *l, const struct hp_train_spec *spec,
			 int update_cut, int *would_cut)
{
	return hp_split_weights_log(g, l, spec, update_cut, would_cut, NULL);
}

/* The pass cuts candidate i of the graph as the first i - 1 cuts left
 * it: equal rows chosen for each one, the same graph at every step. */
int hp_ws_log_same(const struct hp_ws_log *log, const struct hp_budget_layout *l, int *would_cut)
{
	uint64_t budget, avail;

	*would_cut = 0;
	if (!l->budget || !log->cut)
		return !l->budget && !log->cut;
	steps_budget(l, &budget, &avail);
	for (int i = 0; i < log->n; i++)
		if (cut_rows(&log->choice[i].c, budget, avail, log->copies) != log->choice[i].r)
			return 0;
	*would_cut = log->update_max > budget;
	return 1;
}

void hp_ws_log_free(struct hp_ws_log *log)
{
	if (!log)
		return;
	free(log->choice);
	memset(log, 0, sizeof *log);
}

int hp_split_count(const struct hp_graph *g)
{
	char *seen = calloc((size_t)g->nvalues + 1, 1);
	int n = 0;

	if (!seen)
		return hp_error(-ENOMEM, "out of memory");
	for (int v = 0; v < g->nvalues; v++) {
		int w = g->values[v].part_of;
		if (w >= 0 && g->values[w].src.kind != HP_BLOB_NONE && !seen[w]++)
			n++;
	}
	free(seen);
	return n;
}

int hp_trainer_split_count(const struct hp_trainer *t)
{
	return hp_split_count(t->g);
}

/* The value named `name`, or -1.  A weight cut in K parts asks for each
 * of its whole states K times, in a row: the last answer per slot is
 * remembered and checked by name (a value's index never changes), so a
 * graph of many parts is not searched once per part (an MLP 20 k wide cut
 * for an 8 GiB budget spent minutes in hp_graph_find_value here). */
static int whole_state_find(const struct hp_graph *g, const char *name)
{
	static _Thread_local struct {
		int v;
		char name[512];
	} memo[3];
	static _Thread_local unsigned next;
	int v;

	for (int k = 0; k < 3; k++)
		if (memo[k].v >= 0 && memo[k].v < g->nvalues && !strcmp(memo[k].name, name) &&
		    !strcmp(g->values[memo[k].v].name, name))
			return memo[k].v;
	if ((v = hp_graph_find_value(g, name)) >= 0) {
		memo[next % 3].v = v;
		snprintf(memo[next++ % 3].name, sizeof memo[0].name, "%s", name);
	}
	return v;
}

int hp_part_state(struct hp_graph *g, int param, int state, const char *suffix)
{
	int whole = g->values[param].part_of, ws;
	char name[512];

	if (whole < 0)
		return 0;
	snprintf(name, sizeof name, "%s.%s", g->values[whole].name, suffix);
	if ((ws = whole_state_find(g, name)) < 0) {
		struct hp_shape s = g->values[whole].shape;
		if ((ws = hp_graph_add_value(g, name, HP_VALUE_INITIALIZER, g->values[state].dtype, &s)) < 0)
			return ws;
		g->values[ws].src.kind = HP_BLOB_NONE;
		whole_state_find(g, name); /* remembered for the next part */
	}
	g->values[state].part_of = ws;
	g->values[state].part_offset = g->values[param].part_offset;
	return 0;
}

char *hp_whole_state(const struct hp_graph *g)
{
	char *u = calloc((size_t)g->nvalues + 1, 1);

	for (int v = 0; u && v < g->nvalues; v++)
		if (g->values[v].next >= 0)
			u[g->values[v].part_of >= 0 ? g->values[v].part_of : v] = 1;
	return u;
}
