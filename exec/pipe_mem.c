/* Pipeline training: where a stage's bytes live (pipe.h): --budget among
 * its sessions, the parameters the forward and backward read from the
 * optimizer's session, the weight gradients summed in place. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "hpdlf/error.h"
#include "exec/budget.h"
#include "exec/exec_internal.h"
#include "exec/pipe.h"
#include "exec/plan.h"
#include "exec/train_internal.h"

static uint64_t vbytes(const struct hp_graph *g, int v)
{
	struct hp_tensor x = { .dtype = g->values[v].dtype, .shape = g->values[v].shape };

	return hp_tensor_bytes(&x);
}

/* A value's bytes as the task net budgets them: whole 4 KiB pages, at
 * least one (runtime.c, create_net). */
static uint64_t vpages(const struct hp_graph *g, int v)
{
	uint64_t b = (vbytes(g, v) + 4095) / 4096 * 4096;

	return b ? b : 4096;
}

/* What graph g holds at most: every value it keeps or computes (the arena
 * reuses bytes, so this is an upper bound). */
static uint64_t graph_need(const struct hp_graph *g)
{
	uint64_t n = 0;

	for (int v = 0; g && v < g->nvalues; v++)
		if (!g->values[v].data && (g->values[v].nconsumers || g->values[v].is_output || g->values[v].next >= 0))
			n += vpages(g, v);
	return n;
}

/* The least g's session can run with: what it holds when a run starts,
 * before the plan's first transition can free anything (the inputs the
 * step sets: parameters, the micro-batch's cut values, seeds and saved
 * values, the summed gradients; the state kept from run to run, optimizer
 * state; the outputs), in the net's pages, with the staging copies and
 * one kernel's scratch held apart beside them (budget.h); and no less
 * than its planner's smallest budget (its largest step: an update's
 * parameter, gradient, state and their new values at once).  A session
 * given less than the first sees no free byte at its first transition
 * (net.c, stuck()); less than the second, its planner refuses it. */
static uint64_t held_start(const struct hp_graph *g, uint64_t budget, uint64_t staging)
{
	struct hp_plan_opts po = { .align = HP_BUDGET_ALIGN, .reserve_for = hp_budget_staging,
				   .workspace = g ? hp_plan_max_workspace(g) : 0, .budget = budget };
	uint64_t n = 0, least;

	if (!g)
		return 0;
	for (int v = 0; v < g->nvalues; v++) {
		const struct hp_value *x = &g->values[v];
		if (!x->data && x->kind != HP_VALUE_CONSTANT &&
		    (x->kind == HP_VALUE_INPUT || x->next >= 0 || x->is_output))
			n += vpages(g, v);
	}
	n += staging + po.workspace;
	least = hp_plan_min_budget(g, &po, NULL);
	return n > least ? n : least;
}

static const char *const what[3] = { "backward", "forward", "optimizer" };

/* The smallest --budget the stage's sessions and slots fit in. */
static int too_small(const struct hp_pipe *p, uint64_t budget, uint64_t slots, const uint64_t floor[3])
{
	/* in tensor bytes; the budget named is the process's (overhead.c) */
	uint64_t sum = hp_budget_process_for(slots + floor[0] + floor[1] + floor[2]);

	return hp_error(HP_EBUDGET, "pipeline stage %d: --budget %llu is too small: the micro-batches in flight keep "
			"%llu bytes, and its sessions hold %llu (backward), %llu (forward) and %llu (optimizer) "
			"when a run starts (parameters, inputs, optimizer state, staging and kernel scratch); "
			"the stage needs at least %llu bytes",
			p->stage, (unsigned long long)budget, (unsigned long long)slots, (unsigned long long)floor[0],
			(unsigned long long)floor[1], (unsigned long long)floor[2], (unsigned long long)sum);
}

/* --budget for the backward, forward and optimizer sessions: what the
 * saved values of the micro-batches in flight, the rows kept for the
 * weight gradients computed once per step (pipe_defer.c) and the packed
 * weights (pipe_pack.c; both marked before) leave.  Each session gets
 * first what it holds when a run starts (held_start), then a share of
 * the rest in proportion to what it would hold beyond that (they run one
 * at a time, but each session's store keeps its own resident set).  A
 * budget that cannot give every session its start is refused here, naming
 * the bytes the stage needs; a share too small for a session's plan is
 * refused by its planner when the session is made. */
int hp_pipe_budgets(struct hp_trainer *t, const struct hp_graph *gb, uint64_t b[3])
{
	struct hp_pipe *p = t->pipe;
	uint64_t budget = t->o.budget, staging = hp_budget_staging(hp_budget_tensors(budget));
	uint64_t slots = (uint64_t)p->nslot * p->saved_bytes + hp_pipe_defer_bytes(p) + hp_pipe_pack_bytes(p);
	const struct hp_graph *g[3] = { gb, p->gf, p->go };
	uint64_t need[3], floor[3], sum = 0, rest, wsum = 0;

	b[0] = b[1] = b[2] = 0;
	if (!budget)
		return 0;
	/* the shares are of the tensor budget (the process's fixed overhead
	 * off, once); each session gets the process budget whose tensors are
	 * its share.  Shares of --budget itself gave each session the
	 * overhead again below 64 MiB: a 2-stage CNN at 64M peaked at 87 MiB
	 * with three pools of 22 MiB */
	uint64_t tensors = hp_budget_tensors(budget);
	if (slots >= tensors / 2)
		return hp_error(HP_EBUDGET, "pipeline stage %d: the activations %d micro-batches in flight keep (%llu "
				"bytes with the rows of the weight gradients computed once per step and the "
				"packed weights) leave too little of --budget %llu; use more --micro-batches or a "
				"larger --budget",
				p->stage, p->nslot, (unsigned long long)slots, (unsigned long long)budget);
	for (int k = 0; k < 3; k++) {
		floor[k] = held_start(g[k], hp_budget_tensors(budget), staging);
		need[k] = graph_need(g[k]);
		need[k] = need[k] > floor[k] ? need[k] - floor[k] : 0;
		sum += floor[k];
		wsum += need[k];
	}
	if (tensors - slots < sum)
		return too_small(p, budget, slots, floor);
	rest = tensors - slots - sum;
	for (int k = 0; k < 3; k++)
		b[k] = !g[k] ? 0
			     : hp_budget_process_for(floor[k] + (wsum ? (uint64_t)((double)rest * (double)need[k] / (double)wsum)
								     : rest / 3));
	hp_log(HP_LOG_INFO, "pipeline stage %d: --budget %llu: %llu for the micro-batches in flight, %llu for the "
	       "backward session, %llu forward, %llu optimizer", p->stage, (unsigned long long)budget,
	       (unsigned long long)slots, (unsigned long long)b[0], (unsigned long long)b[1], (unsigned long long)b[2]);
	return 0;
}

/* A session of the stage made with its share b of --budget: a planner's
 * refusal names the stage and the session. */
int hp_pipe_budget_error(const struct hp_trainer *t, int k, uint64_t b, int rc)
{
	if (rc != HP_EBUDGET && rc != HP_EBUDGET_OP)
		return rc;
	return hp_error_prefix(rc, "pipeline stage %d: its %s session, with %llu of --budget %llu", t->pipe->stage,
			       what[k], (unsigned long long)b, (unsigned long long)t->o.budget);
}

/* In core, a parameter's gradient that a GemmGrad computes alone is
 * summed over the micro-batches by the GemmGrad itself, straight into
 * the stage's sum (p->acc): no pass over the gradients per micro-batch.
 * Marked before the session is made, bound after (acc_direct). */
int hp_pipe_mark_direct(struct hp_trainer *t, struct hp_graph *gb)
{
	struct hp_pipe *p = t->pipe;
	struct hp_attr a = { .name = "accumulate", .type = HP_ATTR_INT, .i = 1 };
	int rc = 0;

	if (t->o.budget || !(p->acc_direct = calloc((size_t)p->np + 1, 1)))
		return t->o.budget ? 0 : hp_error(-ENOMEM, "out of memory");
	for (int k = 0; k < p->np && rc == 0; k++) {
		int v = p->pgrad[k], i = v >= 0 ? gb->values[v].producer : -1;
		if (i < 0 || strcmp(gb->nodes[i].op_type, "GemmGrad") || gb->nodes[i].noutputs < 2 ||
		    gb->nodes[i].outputs[1] != v || gb->values[v].nconsumers)
			continue;
		p->acc_direct[k] = 1;
		if (!hp_node_attr(&gb->nodes[i], "accumulate"))
			rc = hp_graph_add_attr(gb, i, &a);
	}
	return rc;
}

int hp_pipe_bind_direct(struct hp_trainer *t)
{
	struct hp_pipe *p = t->pipe;
	int rc = 0;

	for (int k = 0; p->acc_direct && k < p->np && rc == 0; k++)
		if (p->acc_direct[k] & 1)
			rc = hp_session_bind_value(t->s, p->pgrad[k], p->acc + p->poff[k]);
	return rc;
}

/* The step's first backward overwrites the sums the GemmGrads keep (no
 * pass to zero them), the later ones add to them. */
void hp_pipe_direct_first(struct hp_trainer *t, int first)
{
	struct hp_pipe *p = t->pipe;

	for (int k = 0; p->acc_direct && k < p->np; k++) {
		struct hp_attr *a;
		if (!(p->acc_direct[k] & 1))
			continue;
		a = (struct hp_attr *)hp_node_attr(&t->g->nodes[t->g->values[p->pgrad[k]].producer], "accumulate");
		a->i = !first;
	}
}

void hp_pipe_zero_acc(struct hp_pipe *p)
{
	for (int k = 0; k < p->np; k++) {
		uint64_t end = k + 1 < p->np ? p->poff[k + 1] : p->nparam;
		if (!p->acc_direct || !p->acc_direct[k])
			memset(p->acc + p->poff[k], 0, (end - p->poff[k]) * sizeof *p->acc);
	}
}

static int set_param(struct hp_session *s, const struct hp_graph *g, int v, void *data)
{
	struct hp_tensor x = { .dtype = HP_F32, .shape = g->values[v].shape, .data = data };

	return s ? hp_session_set_input(s, g->values[v].name, &x) : 0;
}

/* In core the other graphs read the optimizer's parameters in place: its
 * state buffers trade places after each run, so they are bound again. */
static int bind_param(struct hp_session *s, const struct hp_graph *g, int v, const void *w)
{
	return s ? hp_session_bind_value(s, hp_graph_find_value(s->g, g->values[v].name), (void *)w) : 0;
}

int hp_pipe_sync_params(struct hp_pipe *p, struct hp_session *sb)
{
	const struct hp_graph *g = p->go;
	int rc = 0;

	for (int k = 0; k < p->np && rc == 0; k++) {
		const void *in = hp_session_value_ptr(p->so, p->params[k]);
		float *w = p->tmp + p->poff[k];
		if (in && sb->ex == &hp_exec_incore) {
			if ((rc = bind_param(sb, g, p->params[k], in)) == 0)
				rc = bind_param(p->sf, g, p->params[k], in);
			continue;
		}
		rc = hp_session_read_value(p->so, p->params[k], 0, vbytes(g, p->params[k]), w);
		if (rc == 0)
			rc = set_param(sb, g, p->params[k], w);
		if (rc == 0)
			rc = set_param(p->sf, g, p->params[k], w);
	}
	return rc;
}
