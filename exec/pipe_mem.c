/* Pipeline training: where a stage's bytes live (pipe.h): --budget among
 * its sessions, the parameters the forward and backward read from the
 * optimizer's session, the weight gradients summed in place. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "hpdlf/error.h"
#include "exec/exec_internal.h"
#include "exec/pipe.h"
#include "exec/train_internal.h"

static uint64_t vbytes(const struct hp_graph *g, int v)
{
	struct hp_tensor x = { .dtype = g->values[v].dtype, .shape = g->values[v].shape };

	return hp_tensor_bytes(&x);
}

/* What graph g holds at most in core: every value it keeps or computes
 * (the arena reuses bytes, so this is an upper bound). */
static uint64_t graph_need(const struct hp_graph *g)
{
	uint64_t n = 0;

	for (int v = 0; g && v < g->nvalues; v++)
		if (!g->values[v].data && (g->values[v].nconsumers || g->values[v].is_output || g->values[v].next >= 0))
			n += vbytes(g, v);
	return n;
}

/* --budget for the backward, forward and optimizer sessions: what the
 * saved values of the micro-batches in flight, the rows kept for the
 * weight gradients computed once per step (pipe_defer.c) and the packed
 * weights (pipe_pack.c; both marked before) leave, shared in proportion
 * to what each graph would hold in core (they run one at a time, but each
 * session's store keeps its own resident set). */
int hp_pipe_budgets(struct hp_trainer *t, const struct hp_graph *gb, uint64_t b[3])
{
	struct hp_pipe *p = t->pipe;
	uint64_t budget = t->o.budget;
	uint64_t slots = (uint64_t)p->nslot * p->saved_bytes + hp_pipe_defer_bytes(p) + hp_pipe_pack_bytes(p);
	uint64_t need[3] = { graph_need(gb), graph_need(p->gf), graph_need(p->go) }, sum = need[0] + need[1] + need[2];

	b[0] = b[1] = b[2] = 0;
	if (!budget)
		return 0;
	if (slots >= budget / 2)
		return hp_error(HP_EBUDGET, "pipeline stage %d: the activations %d micro-batches in flight keep (%llu "
				"bytes with the rows of the weight gradients computed once per step and the "
				"packed weights) leave too little of --budget %llu; use more --micro-batches or a "
				"larger --budget",
				p->stage, p->nslot, (unsigned long long)slots, (unsigned long long)budget);
	budget -= slots;
	for (int k = 0; k < 3; k++)
		b[k] = need[k] ? (uint64_t)((double)budget * (double)need[k] / (double)sum) : 0;
	return 0;
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
