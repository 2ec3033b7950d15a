/* The collectives of sharded data parallelism (domain ai.hpdlf, --shard):
 *
 *   ReduceScatter(token, g1..gk) -> token', s1..sk   attrs ranks, range, full
 *   AllGather(token, s1..sk) -> token', w1..wk       attrs ranks, range, dims
 *   ShardSlice(x) -> y                               attrs lo, hi
 *
 * `range` lists this rank's [lo, hi) of every tensor (flattened; the
 * partition of exec/shard.h).  ReduceScatter's si is this rank's slice of
 * gi summed over the ranks and scaled by 1/ranks: 1-D of hi - lo elements,
 * or (full=1) gi's shape with only the slice reduced and the rest left as
 * this rank's own gradient.  AllGather makes each wi (shape from `dims`:
 * the rank then the dims, for each output) from every rank's slice.
 * ShardSlice copies elements [lo, hi) of x into a 1-D y.
 *
 * As with AllReduce (comm_op.c), the executors run the first two through
 * the job's communicator (exec/comm_shard.c); the kernels here give their
 * single-process meaning (this rank alone: its slice scaled, its slice
 * placed among zeros), so a graph holding them still runs and never
 * folds.  The token chains every collective of the step in one order. */
#include <string.h>

#include "hpdlf/error.h"
#include "kernels/train_util.h"

/* This rank's [lo, hi) of tensor i from attribute `range`. */
static int range_of(const struct hp_node *n, int i, int64_t *lo, int64_t *hi)
{
	const int64_t *r;
	int k = hp_attr_ints(n, "range", &r);

	if (k != 2 * (n->noutputs - 1) || r[2 * i] < 0 || r[2 * i + 1] < r[2 * i])
		return -1;
	*lo = r[2 * i];
	*hi = r[2 * i + 1];
	return 0;
}

static int check_common(struct hp_graph *g, struct hp_node *n)
{
	struct hp_shape scalar = { 0 };

	if (n->ninputs != n->noutputs || n->ninputs < 2)
		return hp_node_error(g, n, HP_EMODEL, "needs a token and as many outputs as inputs");
	if (hp_attr_int(n, "ranks", 1) < 1)
		return hp_node_error(g, n, HP_EMODEL, "attribute 'ranks' must be >= 1");
	tk_set_out(g, n, 0, HP_F32, &scalar);
	n->workspace = 0;
	return 0;
}

static int rs_prepare(struct hp_graph *g, struct hp_node *n)
{
	int rc = check_common(g, n), full = hp_attr_int(n, "full", 0) != 0;

	for (int i = 1; rc == 0 && i < n->ninputs; i++) {
		int64_t lo, hi;
		const struct hp_shape *s = &g->values[n->inputs[i]].shape;
		if ((rc = tk_need_f32(g, n, i, 0)) < 0)
			return rc;
		if (range_of(n, i - 1, &lo, &hi) < 0 || hi > hp_shape_numel(s))
			return hp_node_error(g, n, HP_EMODEL, "attribute 'range' does not fit input %d", i);
		struct hp_shape sl = { 1, { hi - lo } };
		tk_set_out(g, n, i, HP_F32, full ? s : &sl);
	}
	return rc;
}

static int rs_run(const struct hp_node *n, const struct hp_kargs *a)
{
	float scale = 1.0f / (float)hp_attr_int(n, "ranks", 1);
	int full = hp_attr_int(n, "full", 0) != 0;

	if (a->out[0].data)
		*(float *)a->out[0].data = 0;
	for (int i = 1; i < a->nin; i++) {
		const float *x = a->in[i].data;
		float *y = a->out[i].data;
		int64_t lo, hi;
		if (range_of(n, i - 1, &lo, &hi) < 0)
			return hp_error(HP_EINTERNAL, "node '%s' (ReduceScatter): bad 'range'", n->name);
		if (full && y != x)
			memcpy(y, x, (size_t)hp_shape_numel(&a->in[i].shape) * sizeof *y);
		for (int64_t j = lo; j < hi; j++)
			y[full ? j : j - lo] = x[j] * scale;
	}
	return 0;
}

/* Output i's shape from attribute `dims` (rank, then the dims, per output). */
static int dims_of(const struct hp_node *n, int i, struct hp_shape *s)
{
	const int64_t *d;
	int k = hp_attr_ints(n, "dims", &d), at = 0;

	for (int j = 0; j <= i; j++) {
		if (at >= k || d[at] < 0 || d[at] > HP_MAX_RANK || at + 1 + d[at] > k)
			return -1;
		if (j == i) {
			s->rank = (int)d[at];
			for (int r = 0; r < s->rank; r++)
				s->dims[r] = d[at + 1 + r];
			return 0;
		}
		at += 1 + (int)d[at];
	}
	return -1;
}

static int ag_prepare(struct hp_graph *g, struct hp_node *n)
{
	int rc = check_common(g, n);

	for (int i = 1; rc == 0 && i < n->ninputs; i++) {
		struct hp_shape s;
		int64_t lo, hi;
		if ((rc = tk_need_f32(g, n, i, 0)) < 0)
			return rc;
		if (dims_of(n, i - 1, &s) < 0 || range_of(n, i - 1, &lo, &hi) < 0 || hi > hp_shape_numel(&s) ||
		    hp_shape_numel(&g->values[n->inputs[i]].shape) != hi - lo)
			return hp_node_error(g, n, HP_EMODEL, "attributes 'dims'/'range' do not fit input %d", i);
		tk_set_out(g, n, i, HP_F32, &s);
	}
	return rc;
}

static int ag_run(const struct hp_node *n, const struct hp_kargs *a)
{
	if (a->out[0].data)
		*(float *)a->out[0].data = 0;
	for (int i = 1; i < a->nin; i++) {
		float *y = a->out[i].data;
		int64_t lo, hi;
		if (range_of(n, i - 1, &lo, &hi) < 0)
			return hp_error(HP_EINTERNAL, "node '%s' (AllGather): bad 'range'", n->name);
		memset(y, 0, (size_t)hp_shape_numel(&a->out[i].shape) * sizeof *y);
		memcpy(y + lo, a->in[i].data, (size_t)(hi - lo) * sizeof *y);
	}
	return 0;
}

static int slice_prepare(struct hp_graph *g, struct hp_node *n)
{
	int64_t lo = hp_attr_int(n, "lo", -1), hi = hp_attr_int(n, "hi", -1);
	int rc = tk_need_f32(g, n, 0, 0);

	if (rc < 0)
		return rc;
	if (lo < 0 || hi < lo || hi > hp_shape_numel(&g->values[n->inputs[0]].shape))
		return hp_node_error(g, n, HP_EMODEL, "attributes lo/hi out of the input's range");
	struct hp_shape s = { 1, { hi - lo } };
	tk_set_out(g, n, 0, HP_F32, &s);
	return 0;
}

static int slice_run(const struct hp_node *n, const struct hp_kargs *a)
{
	int64_t lo = hp_attr_int(n, "lo", 0), hi = hp_attr_int(n, "hi", 0);

	memcpy(a->out[0].data, (const float *)a->in[0].data + lo, (size_t)(hi - lo) * sizeof(float));
	return 0;
}

static double no_flops(const struct hp_graph *g, const struct hp_node *n)
{
	(void)g;
	(void)n;
	return 0;
}

const struct hp_op tk_op_reduce_scatter = {
	.domain = TK_DOMAIN, .name = "ReduceScatter", .min_inputs = 2, .max_inputs = 1 << 20,
	.min_outputs = 2, .max_outputs = 1 << 20, .flags = HP_OP_NO_FOLD,
	.prepare = rs_prepare, .run = rs_run, .flops = no_flops,
};

const struct hp_op tk_op_all_gather = {
	.domain = TK_DOMAIN, .name = "AllGather", .min_inputs = 2, .max_inputs = 1 << 20,
	.min_outputs = 2, .max_outputs = 1 << 20, .flags = HP_OP_NO_FOLD,
	.prepare = ag_prepare, .run = ag_run, .flops = no_flops,
};

const struct hp_op tk_op_shard_slice = {
	.domain = TK_DOMAIN, .name = "ShardSlice", .min_inputs = 1, .max_inputs = 1,
	.min_outputs = 1, .max_outputs = 1, .flags = HP_OP_NO_FOLD,
	.prepare = slice_prepare, .run = slice_run, .flops = no_flops,
};
