/* The bound of OpenBLAS's packing buffers in the fixed overhead: from the
 * sgemm calls the graph's kernels can make (kernels/blas.h), before the
 * graph is rewritten (fusions and splits keep each call's extents: a
 * fused node runs its Conv's or MatMul's tiles, bands and weight blocks
 * issue the calls of the whole). */
#include <stdint.h>
#include <string.h>

#include "hpdlf/graph.h"
#include "exec/budget.h"
#include "kernels/blas.h"

/* Legacy figure for a core not in kernels/blas.c's table or a graph whose
 * extents are not known: measured with Debian's 0.3.21 on sgemms of 4096. */
#define BLAS_BUFFER_UNKNOWN (6ll << 20)
/* An extent no call exceeds but that the model caps (the columns of a
 * Conv's tiles, the rows of a gradient's K): GEMM_P, _Q and _R bound it. */
#define ANY (1ll << 40)
/* kernels/gemm.c's tiles (hp_gemm_tiles): at most 1024 rows, 256 columns
 * and 256 of K; gradients run the forward tiles permuted. */
#define TILE_M 1024
#define TILE_N 256
#define TILE_K 256
/* kernels/fused_attn.c's tiles of queries and keys. */
#define ATTN_TILE 64

static int64_t max64(int64_t a, int64_t b)
{
	return a > b ? a : b;
}

static int64_t min64(int64_t a, int64_t b)
{
	return a < b ? a : b;
}

static int64_t most(const struct hp_blas_core *c, int64_t best, int64_t m, int64_t n, int64_t k)
{
	return max64(best, hp_blas_call_bytes(c, m, n, k, 1));
}

static const struct hp_shape *in_shape(const struct hp_graph *g, const struct hp_node *n, int i)
{
	return i < n->ninputs && n->inputs[i] >= 0 ? &g->values[n->inputs[i]].shape : NULL;
}

static int known(const struct hp_shape *s, int rank_from)
{
	if (!s || s->rank < rank_from)
		return 0;
	for (int i = 0; i < s->rank; i++)
		if (s->dims[i] < 1)
			return 0;
	return 1;
}

/* kernels/conv_transpose.c's chunks of output channels, whole where
 * the windows tile the image (stride = kernel, no pads, no dilation). */
#define CONVT_CHUNK_CH 16

/* Whether conv_transpose.c may take the node's geometry as blocked (an
 * auto_pad or an attribute it cannot read: may). */
static int maybe_blocked(const struct hp_node *n, const struct hp_shape *w)
{
	const int64_t *v;
	int c;

	if (hp_node_attr(n, "auto_pad") || hp_node_attr(n, "output_padding"))
		return 1;
	for (int i = 2; i < w->rank; i++) {
		int64_t k = w->dims[i], s = 1, d = 1;

		if ((c = hp_attr_ints(n, "strides", &v)) > 0)
			s = c == w->rank - 2 ? v[i - 2] : -1;
		if ((c = hp_attr_ints(n, "dilations", &v)) > 0)
			d = c == w->rank - 2 ? v[i - 2] : -1;
		if (s != k || (d != 1 && k > 1))
			return s < 0 || d < 0;
	}
	if ((c = hp_attr_ints(n, "pads", &v)) > 0)
		for (int i = 0; i < c; i++)
			if (v[i])
				return 0;
	return 1;
}

/* Conv and ConvTranspose, W [out, in / group, k...] (ConvTranspose: [in,
 * out / group, k...]): conv.c and conv_shift.c multiply W's rows of a group
 * by the columns of a tile (m out/group, k in/group x kernel);
 * conv_transpose.c and the data gradient W^T (m a chunk of 16 channels x
 * kernel, all of them when blocked; k in/group); conv_grad.c's filter
 * gradient m rows of W^T by n channels over k columns, or, for group 1,
 * the channels by W^T's rows.  C is the larger channel count: each call's
 * extents are at most these. */
static int64_t conv_bytes(const struct hp_blas_core *c, const struct hp_graph *g, const struct hp_node *n,
			  int training)
{
	const struct hp_shape *w = in_shape(g, n, 1);
	int64_t grp = hp_attr_int(n, "group", 1), kvol = 1, ch, cg, best = 0;

	if (!known(w, 3) || grp < 1)
		return -1;
	for (int i = 2; i < w->rank; i++)
		kvol *= w->dims[i];
	ch = max64(w->dims[0], w->dims[1] * grp);
	cg = (ch + grp - 1) / grp;
	int transpose = !strcmp(n->op_type, "ConvTranspose");

	if (training || !transpose)
		best = most(c, best, cg, ANY, cg * kvol);
	if (training || transpose)
		best = most(c, best, (maybe_blocked(n, w) ? cg : min64(cg, CONVT_CHUNK_CH)) * kvol, ANY, cg);
	if (!training)
		return best;
	best = most(c, best, cg * kvol, cg, ANY);
	if (grp == 1)
		best = most(c, best, ch, ch * kvol, ANY);
	return best;
}

/* Gemm and MatMul, A [..., M, K] x B [..., K, N]: gemm.c's tiles of the
 * product and of its gradients (the tiles permuted), attention's tiles,
 * and gemm_grad.c's per-product calls of batched operands (m the product's
 * M, untiled). */
static int64_t gemm_bytes(const struct hp_blas_core *c, const struct hp_graph *g, const struct hp_node *n,
			  int training)
{
	const struct hp_shape *a = in_shape(g, n, 0), *b = in_shape(g, n, 1);
	int64_t rows = 1, k, nn, tm, tn, tk, best = 0;
	int gemm = !strcmp(n->op_type, "Gemm");

	if (!known(a, 1) || !known(b, 1))
		return -1;
	for (int i = 0; i < a->rank; i++)
		rows *= a->dims[i];
	k = max64(a->dims[a->rank - 1], gemm ? a->dims[0] : 0);
	nn = max64(b->dims[b->rank - 1], gemm ? b->dims[0] : 0);
	rows /= a->dims[a->rank - 1];
	rows = max64(rows, k); /* Gemm's transA: its rows are dims[1] */
	tm = min64(rows, TILE_M), tn = min64(nn, TILE_N), tk = min64(k, TILE_K);
	best = most(c, best, tm, tn, tk);
	best = most(c, best, ATTN_TILE, nn, max64(k, ATTN_TILE));
	if (!training)
		return best;
	best = most(c, best, tm, tk, tn);
	best = most(c, best, tk, tm, tn);
	best = most(c, best, tk, tn, tm);
	best = most(c, best, tn, tk, tm);
	int64_t pm = a->rank >= 2 ? a->dims[a->rank - 2] : 1;
	best = most(c, best, pm, k, nn);
	best = most(c, best, k, nn, pm);
	return best;
}

/* Operators whose kernels may reach sgemm with extents the rules above do
 * not model (recurrent cells, Einsum, another domain's products): the
 * legacy figure. */
static int unmodelled(const struct hp_node *n)
{
	static const char *const ops[] = { "Einsum", "LSTM", "GRU", "RNN" };
	static const char *const parts[] = { "Conv", "Gemm", "MatMul", "Attention" };

	if (n->domain && *n->domain) {
		for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++)
			if (strstr(n->op_type, parts[i]))
				return 1;
		return 0;
	}
	for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++)
		if (!strcmp(n->op_type, ops[i]))
			return 1;
	return 0;
}

int64_t hp_budget_blas_per_buffer(const struct hp_graph *g, int training)
{
	struct hp_blas_core c;
	int64_t best = 0, b;

	if (!g || hp_blas_core(&c) < 0)
		return BLAS_BUFFER_UNKNOWN;
	for (int i = 0; i < g->nnodes; i++) {
		const struct hp_node *n = &g->nodes[i];

		if (unmodelled(n))
			return BLAS_BUFFER_UNKNOWN;
		if (n->domain && *n->domain)
			continue;
		if (!strcmp(n->op_type, "Conv") || !strcmp(n->op_type, "ConvTranspose"))
			b = conv_bytes(&c, g, n, training);
		else if (!strcmp(n->op_type, "Gemm") || !strcmp(n->op_type, "MatMul"))
			b = gemm_bytes(&c, g, n, training);
		else
			continue;
		if (b < 0)
			return BLAS_BUFFER_UNKNOWN;
		best = max64(best, b);
	}
	return best;
}
