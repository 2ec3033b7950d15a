/* What a built plan answers: which outputs take an input's bytes over
 * (in place), a value's next use, and freeing it.  See plan.h. */
#include <stdlib.h>

#include "hpdlf/kernels.h"
#include "exec/comm.h"
#include "exec/plan.h"
#include "exec/plan_sim.h"

/* Output o of step s may take input j's bytes over: both activations of
 * this run, the input dies there (read by no other input slot unless the
 * op allows it), the output is not kept, same dtype and bytes. */
static int pair_inplace(const struct hp_graph *g, const struct hp_plan *p, int s, const int *in, const int *out, int j,
			int o)
{
	const struct hp_node *n = &g->nodes[p->node[s]];
	int a = in[j], b = out[o];

	if (a < 0 || b < 0 || g->values[a].kind != HP_VALUE_ACTIVATION || g->values[b].kind != HP_VALUE_ACTIVATION)
		return 0;
	if (p->last_use[a] != s || p->last_use[b] >= p->nsteps || g->values[a].next >= 0 || g->values[b].next >= 0)
		return 0;
	if (g->values[a].dtype != g->values[b].dtype)
		return 0;
	struct hp_tensor ta = { .dtype = g->values[a].dtype, .shape = g->values[a].shape };
	struct hp_tensor tb = { .dtype = g->values[b].dtype, .shape = g->values[b].shape };
	if (hp_tensor_bytes(&ta) != hp_tensor_bytes(&tb) || !hp_tensor_bytes(&ta))
		return 0;
	for (int k = 0; k < n->ninputs; k++)
		if (k != j && in[k] == a && !(n->op->flags & HP_OP_INPLACE))
			return 0;
	return 1;
}

/* hp_plan_inplace with step s's edges in and out (its node's, or a copy) */
static int inplace_edges(const struct hp_graph *g, const struct hp_plan *p, int s, const int *in, const int *out)
{
	const struct hp_node *n = &g->nodes[p->node[s]];

	if (!(n->op->flags & (HP_OP_INPLACE | HP_OP_ALIAS)) || n->ninputs < 1 || n->noutputs < 1)
		return 0;
	return pair_inplace(g, p, s, in, out, 0, 0);
}

int hp_plan_inplace(const struct hp_graph *g, const struct hp_plan *p, int s)
{
	const struct hp_node *n = &g->nodes[p->node[s]];

	return inplace_edges(g, p, s, n->inputs, n->outputs);
}

int hp_plan_comm_inplace(const struct hp_graph *g, const struct hp_plan *p, int s)
{
	const struct hp_node *n = &g->nodes[p->node[s]];

	/* the counts first: the op's name is a cache miss a node, and the
	 * steps with several outputs are mostly a weight split's Splits (one
	 * input): 2.6% of the 10,001-node MLP's --plan went to the name */
	if (n->ninputs != n->noutputs || n->ninputs < 2 || !hp_comm_is_allreduce(n) || hp_comm_is_shard_op(n))
		return 0;
	for (int i = 1; i < n->ninputs; i++)
		if (!pair_inplace(g, p, s, n->inputs, n->outputs, i, i))
			return 0;
	return 1;
}

int hp_plan_state_released(const struct hp_graph *g, int v)
{
	return v >= 0 && g->values[v].kind != HP_VALUE_CONSTANT && g->values[v].next >= 0 &&
	       !g->values[v].is_output && g->values[v].kind != HP_VALUE_INPUT && g->values[v].producer < 0;
}

/* Output o of update step s is the next version of one of its state
 * inputs, read by no later step of the run: the update writes it over
 * that input's bytes (issue 17: W' over W, v' over v). */
static int update_src(const struct hp_graph *g, const struct hp_plan *p, int s, const int *in, const int *out, int o)
{
	const struct hp_node *n = &g->nodes[p->node[s]];

	/* the op first: the output array is a cache miss a node, and most
	 * ops never write state (hp_sim_step_need asks for every output) */
	if (!(n->op->flags & HP_OP_STATE_INPLACE))
		return -1;
	int b = out[o];

	if (b < 0 || g->values[b].is_output || g->values[b].producer != p->node[s])
		return -1;
	for (int j = 0; j < n->ninputs; j++) {
		int a = in[j];
		if (a < 0 || g->values[a].next != b)
			continue;
		if (!hp_plan_state_released(g, a) || hp_plan_next_use(p, a, s) != HP_PLAN_NEVER ||
		    g->values[a].dtype != g->values[b].dtype || !hp_shape_equal(&g->values[a].shape, &g->values[b].shape))
			return -1;
		for (int k = 0; k < n->ninputs; k++)
			if (k != j && in[k] == a)
				return -1;
		return j;
	}
	return -1;
}

/* hp_plan_inplace_src with comm = hp_plan_comm_inplace(g, p, s), which
 * holds for every output past the first: asked once per step, not per
 * output (a weight split's Split has up to 64); in and out: step s's
 * edges, its node's or the schedule's flat copy of them (plan_sim.h). */
int hp_plan_inplace_src_edges(const struct hp_graph *g, const struct hp_plan *p, int s, int o, int comm, const int *in,
			      const int *out)
{
	if (o == 0 && inplace_edges(g, p, s, in, out))
		return 0;
	if (o > 0 && comm)
		return o;
	return update_src(g, p, s, in, out, o);
}

int hp_plan_inplace_src_with(const struct hp_graph *g, const struct hp_plan *p, int s, int o, int comm)
{
	const struct hp_node *n = &g->nodes[p->node[s]];

	return hp_plan_inplace_src_edges(g, p, s, o, comm, n->inputs, n->outputs);
}

int hp_plan_inplace_src(const struct hp_graph *g, const struct hp_plan *p, int s, int o)
{
	return hp_plan_inplace_src_with(g, p, s, o, o > 0 && hp_plan_comm_inplace(g, p, s));
}

int hp_plan_inplace_at(const struct hp_graph *g, const struct hp_plan *p, int s, int o)
{
	return hp_plan_inplace_src(g, p, s, o) >= 0;
}
void hp_plan_free(struct hp_plan *p)
{
	if (!p)
		return;
	free(p->node);
	free(p->start_resident);
	free(p->last_use);
	free(p->use_start);
	free(p->uses);
	free(p->act_begin);
	free(p->acts);
	free(p->room_from);
	free(p);
}

int hp_plan_next_use(const struct hp_plan *p, int v, int step)
{
	int lo = p->use_start[v], hi = p->use_start[v + 1];

	while (lo < hi) {
		int mid = (lo + hi) / 2;
		if (p->uses[mid] <= step)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo < p->use_start[v + 1] ? p->uses[lo] : HP_PLAN_NEVER;
}
