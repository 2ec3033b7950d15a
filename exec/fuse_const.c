/* Transposes of constant weights computed once: Transpose(W) with W a
 * float initializer or constant becomes an initializer holding W's
 * elements in the permuted order, read by the Transpose's readers.  Torch
 * exports Linear layers as MatMul(x, Transpose(W)) on 3-D activations,
 * which fuse_transpose.c cannot hand to sgemm (it takes 2-D MatMuls only):
 * without this pass every inference copied every weight of a GPT-2-style
 * or BERT-style model (14% and 22% of their inference time).  A copy
 * changes no value, so the products see the same bits as before; the
 * pass runs in core and out of core alike.  The transposed weights live
 * in memory (the graph's), at most CONST_MAX_BYTES of them, so that both
 * modes fold the same nodes; except under a budget, where memory outside
 * the store would break it (a 32 MB weight so folded held 64 MB beside a
 * 16 MiB budget): there a 2-D weight's transpose of at least
 * HP_FZ_SPILL_MIN_BYTES is written to the graph's spill file (hp_fz_spill) in
 * blocks of at most HP_FZ_SPILL_BLOCK_BYTES, read from the model file a row
 * slice at a time, and the new initializer is those bytes of the file,
 * which the store pages like any weight of the model. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "hpdlf/error.h"
#include "exec/fuse_internal.h"

#define CONST_MAX_BYTES (256u << 20)

/* The permutation of Transpose node n over rank r (default: reversed);
 * 0, or -1 when malformed. */
static int perm_of(const struct hp_node *n, int r, int *perm)
{
	const int64_t *p = NULL;
	int np = hp_attr_ints(n, "perm", &p), seen = 0;

	for (int d = 0; d < r; d++) {
		perm[d] = np > 0 ? (int)p[d] : r - 1 - d;
		if (perm[d] < 0 || perm[d] >= r || (seen >> perm[d] & 1))
			return -1;
		seen |= 1 << perm[d];
	}
	return np > 0 && np != r ? -1 : 0;
}

/* y = x permuted: y's element at index (i0..ir-1) is x's at the index
 * whose dim perm[d] is id (an odometer over y in its own order). */
static void permute(const float *x, const struct hp_shape *xs, const int *perm, float *y)
{
	int64_t xstr[HP_MAX_RANK], ystr[HP_MAX_RANK], idx[HP_MAX_RANK] = { 0 }, ydim[HP_MAX_RANK];
	int64_t n = hp_shape_numel(xs), off = 0;
	int r = xs->rank;

	for (int d = r - 1, s = 1; d >= 0; d--) /* s fits: numel checked by the caller */
		xstr[d] = s, s *= (int)xs->dims[d];
	for (int d = 0; d < r; d++)
		ystr[d] = xstr[perm[d]], ydim[d] = xs->dims[perm[d]];
	for (int64_t i = 0; i < n; i++) {
		y[i] = x[off];
		for (int d = r - 1; d >= 0; d--) {
			off += ystr[d];
			if (++idx[d] < ydim[d])
				break;
			off -= ystr[d] * ydim[d];
			idx[d] = 0;
		}
	}
}

static int fold_mem(struct hp_graph *g, int t, struct hp_fuse_report *r);

/* The readers of value out read value v instead. */
static void read_instead(struct hp_graph *g, int out, int v)
{
	for (int i = 0; i < g->nnodes; i++)
		for (int j = 0; j < g->nodes[i].ninputs; j++)
			if (g->nodes[i].inputs[j] == out)
				g->nodes[i].inputs[j] = v;
}

/* x [R, C] (its bytes in memory, or the blob src) transposed into file fd:
 * output rows [c0, c1) (input columns) a block at a time. */
static int spill_transpose(const struct hp_value *x, int fd, uint64_t at, const char *xpath)
{
	int64_t R = x->shape.dims[0], C = x->shape.dims[1], cols = HP_FZ_SPILL_BLOCK_BYTES / 4 / (R ? R : 1);
	float *blk, *row;
	int in = -1, rc = 0;

	cols = cols < 1 ? 1 : cols > C ? C : cols;
	blk = malloc((size_t)(cols * R) * sizeof *blk);
	row = malloc((size_t)cols * sizeof *row);
	if (!blk || !row) {
		rc = hp_error(-ENOMEM, "out of memory");
		goto out;
	}
	if (!x->data && (in = open(xpath, O_RDONLY | O_CLOEXEC)) < 0) {
		rc = hp_error(-errno, "%s: %s", xpath, strerror(errno));
		goto out;
	}
	for (int64_t c0 = 0; c0 < C && rc == 0; c0 += cols) {
		int64_t nc = C - c0 < cols ? C - c0 : cols;
		for (int64_t r = 0; r < R && rc == 0; r++) {
			const float *src = row;
			if (x->data)
				src = (const float *)x->data + r * C + c0;
			else if ((rc = hp_fz_read_at(in, xpath, x, (uint64_t)(r * C + c0) * 4, row,
						     (size_t)nc * sizeof *row)) < 0)
				break;
			for (int64_t j = 0; j < nc; j++)
				blk[j * R + r] = src[j];
		}
		if (rc == 0)
			rc = hp_fz_write_at(fd, at + (uint64_t)(c0 * R) * 4, blk, (size_t)(nc * R) * sizeof *blk, x->name);
	}
out:
	if (in >= 0)
		close(in);
	free(blk);
	free(row);
	return rc;
}

/* Under a budget: fold 2-D Transpose node t into a file (see the top). */
static int fold_spilled(struct hp_graph *g, int t, struct hp_fuse_report *r)
{
	int x = g->nodes[t].inputs[0], out = g->nodes[t].outputs[0], fd, fi, v, rc;
	struct hp_shape ys = g->values[out].shape;
	char line[512];
	uint64_t at;

	if ((fi = hp_fz_spill(g, &fd, &at)) < 0)
		return fi;
	const struct hp_value *xv = &g->values[x];
	if ((rc = spill_transpose(xv, fd, at, xv->data ? NULL : g->files[xv->src.file])) < 0)
		return rc;
	if ((v = hp_fz_file_init(g, g->values[out].name, ".const", &ys, fi, at)) < 0)
		return v;
	read_instead(g, out, v);
	snprintf(line, sizeof line, "Transpose '%s' of constant '%s' computed once (to a file: under a budget)",
		 g->nodes[t].name, g->values[x].name);
	hp_fz_note(r, "Transpose of a constant", line);
	r->nodes_removed++;
	return 0;
}

/* Fold Transpose node t: its readers read the new initializer instead. */
static int fold_one(struct hp_graph *g, int t, struct hp_fuse_report *r, int spill)
{
	const struct hp_value *xv = &g->values[g->nodes[t].inputs[0]];
	int perm[HP_MAX_RANK];

	if (spill && xv->shape.rank == 2 && perm_of(&g->nodes[t], 2, perm) == 0 && perm[0] == 1 &&
	    (uint64_t)hp_shape_numel(&xv->shape) * 4 >= HP_FZ_SPILL_MIN_BYTES && xv->dtype == HP_F32 &&
	    (xv->data || (xv->src.kind == HP_BLOB_FILE && xv->src.file >= 0 && xv->src.file < g->nfiles)))
		return fold_spilled(g, t, r);
	return fold_mem(g, t, r);
}

/* Fold Transpose node t in memory. */
static int fold_mem(struct hp_graph *g, int t, struct hp_fuse_report *r)
{
	int x = g->nodes[t].inputs[0], out = g->nodes[t].outputs[0], perm[HP_MAX_RANK], v;
	struct hp_shape xs = g->values[x].shape;
	float *y = malloc((size_t)hp_shape_numel(&xs) * sizeof *y + 1), *own = NULL;
	const float *xd = g->values[x].data;
	char line[512];

	if (!y)
		return hp_error(-ENOMEM, "out of memory");
	if (!xd && (!(own = malloc((size_t)hp_shape_numel(&xs) * sizeof *own + 1)) || hp_graph_read_init(g, x, own) < 0)) {
		free(own);
		free(y);
		return hp_error(-ENOMEM, "cannot read '%s' to transpose it", g->values[x].name);
	}
	perm_of(&g->nodes[t], xs.rank, perm);
	permute(xd ? xd : own, &xs, perm, y);
	free(own);
	snprintf(line, sizeof line, "Transpose '%s' of constant '%s' computed once", g->nodes[t].name,
		 g->values[x].name);
	if ((v = hp_fz_memory_init(g, g->values[out].name, ".const", &g->values[out].shape, y)) < 0)
		return v;
	read_instead(g, out, v);
	hp_fz_note(r, "Transpose of a constant", line);
	r->nodes_removed++;
	return 0;
}

/* Node n is a Transpose of a float constant this pass may fold. */
static int foldable(const struct hp_graph *g, const struct hp_node *n, uint64_t left)
{
	int perm[HP_MAX_RANK];
	const struct hp_value *x, *y;

	if (!hp_fz_is(n, "Transpose") || n->folded || n->ninputs != 1 || n->noutputs != 1 || n->outputs[0] < 0)
		return 0;
	x = &g->values[n->inputs[0]];
	y = &g->values[n->outputs[0]];
	if (!hp_fz_const(g, n->inputs[0]) || hp_fz_user_fed(g, n->inputs[0]) || y->is_output || y->dtype != HP_F32 || x->shape.rank < 1 ||
	    perm_of(n, x->shape.rank, perm) < 0)
		return 0;
	return (uint64_t)hp_shape_numel(&x->shape) * sizeof(float) <= left &&
	       hp_shape_numel(&x->shape) < ((int64_t)1 << 31);
}

int hp_fuse_const_transpose(struct hp_graph *g, struct hp_fuse_report *r, int spill)
{
	uint64_t left = CONST_MAX_BYTES;
	int any = 0, rc;

	for (int i = 0; i < g->nnodes; i++) {
		if (!foldable(g, &g->nodes[i], left))
			continue;
		left -= (uint64_t)hp_shape_numel(&g->values[g->nodes[i].inputs[0]].shape) * sizeof(float);
		if ((rc = fold_one(g, i, r, spill)) < 0)
			return rc;
		any = 1;
	}
	if (any)
		hp_fz_remove_dead(g);
	return any;
}
