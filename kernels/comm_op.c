/* AllReduce (domain ai.hpdlf): one bucket of gradients summed over the
 * ranks of a data-parallel job and scaled by 1/ranks.
 *
 *   AllReduce(token?, g1, ..., gk) -> token', g1', ..., gk'   attr ranks
 *
 * The token (a scalar nobody computes with) chains the buckets: every rank
 * must issue its collectives in the same order, and a node reading the
 * previous bucket's token can never overtake it.  The executors run this
 * node themselves through the job's communicator (exec/comm_reduce.c); the
 * kernel here is only the single-rank meaning (copy and scale), so a graph
 * holding it still runs and folds nothing.  No workspace: the executor
 * packs the gradients into the communicator's own staging buffer. */
#include <string.h>

#include "hpdlf/error.h"
#include "kernels/train_util.h"

static int allreduce_prepare(struct hp_graph *g, struct hp_node *n)
{
	struct hp_shape scalar = { 0 };

	if (n->ninputs != n->noutputs || n->ninputs < 2)
		return hp_node_error(g, n, HP_EMODEL, "needs a token and as many outputs as inputs");
	if (hp_attr_int(n, "ranks", 1) < 1)
		return hp_node_error(g, n, HP_EMODEL, "attribute 'ranks' must be >= 1");
	for (int i = 1; i < n->ninputs; i++) {
		int rc = tk_need_f32(g, n, i, 0);
		if (rc < 0)
			return rc;
		tk_set_out(g, n, i, HP_F32, &g->values[n->inputs[i]].shape);
	}
	tk_set_out(g, n, 0, HP_F32, &scalar);
	n->workspace = 0;
	return 0;
}

static int allreduce_run(const struct hp_node *n, const struct hp_kargs *a)
{
	float scale = 1.0f / (float)hp_attr_int(n, "ranks", 1);

	if (a->out[0].data)
		*(float *)a->out[0].data = 0;
	for (int i = 1; i < a->nin; i++) {
		const float *x = a->in[i].data;
		float *y = a->out[i].data;
		int64_t k = hp_shape_numel(&a->in[i].shape);
		for (int64_t j = 0; j < k; j++)
			y[j] = x[j] * scale;
	}
	return 0;
}

static double allreduce_flops(const struct hp_graph *g, const struct hp_node *n)
{
	(void)g;
	(void)n;
	return 0;
}

const struct hp_op tk_op_allreduce = {
	.domain = TK_DOMAIN, .name = "AllReduce", .min_inputs = 2, .max_inputs = 1 << 20,
	.min_outputs = 2, .max_outputs = 1 << 20, .flags = HP_OP_NO_FOLD,
	.prepare = allreduce_prepare, .run = allreduce_run, .flops = allreduce_flops,
};
