/* NumPy multidirectional broadcasting: output shapes, coalesced stride plans
 * and the parallel segment walker every broadcasting kernel runs on. */
#include <inttypes.h>
#include <stdio.h>

#include "kernels/eltwise_impl.h"

int hpk_axis(const struct hp_graph *g, const struct hp_node *n, int64_t axis, int rank, int *out)
{
	int64_t r = rank > 0 ? rank : 1;

	if (axis < -r || axis >= r)
		return hp_node_error(g, n, HP_EMODEL, "axis %" PRId64 " is out of range for rank %d", axis, rank);
	*out = (int)(axis < 0 ? axis + r : axis);
	return 0;
}

int hpk_bcast_shape(const struct hp_graph *g, const struct hp_node *n, const struct hp_shape *const *in,
		    int nin, struct hp_shape *out)
{
	int rank = 0;

	for (int k = 0; k < nin; k++)
		rank = in[k]->rank > rank ? in[k]->rank : rank;
	out->rank = rank;
	for (int d = 0; d < rank; d++) {
		int64_t dim = 1;
		for (int k = 0; k < nin; k++) {
			int id = d - (rank - in[k]->rank);
			int64_t v = id >= 0 ? in[k]->dims[id] : 1;
			if (v == dim || v == 1)
				continue;
			if (dim != 1) {
				char s[8][128], all[1100] = "";
				size_t len = 0;
				for (int j = 0; j < nin && j < 8; j++)
					len += (size_t)snprintf(all + len, sizeof all - len, "%s%s", j ? ", " : "",
								hp_shape_str(in[j], s[j], sizeof s[j]));
				return hp_node_error(g, n, HP_ESHAPE,
						     "input shapes %s cannot be broadcast together (dim %d of the "
						     "output: %" PRId64 " vs %" PRId64 ")",
						     all, d, dim, v);
			}
			dim = v;
		}
		out->dims[d] = dim;
	}
	return 0;
}

/* Drop size-1 output dims and merge neighbours every operand walks alike. */
static void coalesce(struct hpk_bcast *b)
{
	int r = 0;

	for (int d = 0; d < b->rank; d++) {
		if (b->dims[d] == 1)
			continue;
		if (r > 0) {
			int merge = 1;
			for (int k = 0; k < b->nops && merge; k++)
				merge = b->strides[k][r - 1] == b->strides[k][d] * b->dims[d];
			if (merge) {
				b->dims[r - 1] *= b->dims[d];
				for (int k = 0; k < b->nops; k++)
					b->strides[k][r - 1] = b->strides[k][d];
				continue;
			}
		}
		b->dims[r] = b->dims[d];
		for (int k = 0; k < b->nops; k++)
			b->strides[k][r] = b->strides[k][d];
		r++;
	}
	if (r == 0) {
		b->dims[0] = 1;
		for (int k = 0; k < b->nops; k++)
			b->strides[k][0] = 1;
		r = 1;
	}
	b->rank = r;
}

void hpk_bcast_plan(struct hpk_bcast *b, const struct hp_shape *out, const struct hp_tensor *const *in, int nin,
		    size_t out_elsize)
{
	memset(b, 0, sizeof *b);
	b->nops = nin + 1;
	b->rank = out->rank;
	b->numel = hp_shape_numel(out);
	b->elsize[0] = out_elsize;
	for (int d = 0; d < out->rank; d++)
		b->dims[d] = out->dims[d];
	for (int k = 0; k <= nin; k++) {
		const struct hp_shape *s = k ? &in[k - 1]->shape : out;
		int64_t st = 1;
		if (k)
			b->elsize[k] = hp_dtype_size(in[k - 1]->dtype);
		for (int d = out->rank - 1; d >= 0; d--) {
			int id = d - (out->rank - s->rank);
			int64_t v = id >= 0 ? s->dims[id] : 1;
			b->strides[k][d] = v == 1 && out->dims[d] != 1 ? 0 : st;
			st *= v;
		}
	}
	coalesce(b);
}

struct walk {
	const struct hpk_bcast *b;
	char *base[HPK_BC_MAXIN + 1];
	hpk_seg_fn fn;
	const void *ctx;
};

static void walk_range(void *arg, int64_t begin, int64_t end, int tid)
{
	const struct walk *w = arg;
	const struct hpk_bcast *b = w->b;
	int r = b->rank, nops = b->nops;
	int64_t coord[HP_MAX_RANK], off[HPK_BC_MAXIN + 1] = { 0 }, s[HPK_BC_MAXIN + 1], rem = begin;
	char *p[HPK_BC_MAXIN + 1];

	(void)tid;
	for (int d = r - 1; d >= 0; d--) {
		coord[d] = rem % b->dims[d];
		rem /= b->dims[d];
		for (int k = 0; k < nops; k++)
			off[k] += coord[d] * b->strides[k][d];
	}
	for (int k = 0; k < nops; k++)
		s[k] = b->strides[k][r - 1];
	for (int64_t pos = begin; pos < end;) {
		int64_t seg = b->dims[r - 1] - coord[r - 1];
		if (seg > end - pos)
			seg = end - pos;
		for (int k = 0; k < nops; k++)
			p[k] = w->base[k] + (size_t)off[k] * b->elsize[k];
		w->fn(w->ctx, p, s, seg);
		pos += seg;
		coord[r - 1] += seg;
		for (int k = 0; k < nops; k++)
			off[k] += seg * s[k];
		for (int d = r - 1; d > 0 && coord[d] == b->dims[d]; d--) {
			coord[d] = 0;
			coord[d - 1]++;
			for (int k = 0; k < nops; k++)
				off[k] += b->strides[k][d - 1] - b->dims[d] * b->strides[k][d];
		}
	}
}

void hpk_bcast_run(struct hp_pool *pool, const struct hpk_bcast *b, void *out, const void *const *in,
		   hpk_seg_fn fn, const void *ctx)
{
	struct walk w = { .b = b, .fn = fn, .ctx = ctx };

	w.base[0] = out;
	for (int k = 1; k < b->nops; k++)
		w.base[k] = (char *)in[k - 1];
	hp_parallel_for(pool, b->numel, HPK_GRAIN, walk_range, &w);
}
