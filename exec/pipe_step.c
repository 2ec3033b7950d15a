/* Pipeline training: one step of a stage, its micro-batches in 1F1B or
 * GPipe order with the activations and gradients of the cuts travelling
 * as nonblocking messages, then the update (pipe.h).
 *
 * No wait can close a cycle: every send is started at once and waited for
 * only before its buffer is reused; the receive of micro-batch m's
 * activations is posted as soon as a slot is free (at most P - s in flight
 * on stage s under 1F1B), that of its gradients right after its forward.
 * A stage reuses a slot only after the backward of the micro-batch that
 * held it, which the later stages had to finish first. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hpdlf/error.h"
#include "exec/comm.h"
#include "exec/exec_internal.h"
#include "exec/pipe.h"
#include "exec/trace.h"
#include "exec/train_internal.h"

/* Wait for message q of the pipeline (*q NULL after; NULL: none); with
 * --trace, a span on the messages' lane for the time the stage sat idle
 * in it (cat "wait", named what and the micro-batch). */
static int wait_req(struct hp_trainer *t, struct hp_comm_req **q, const char *what, int m)
{
	struct hp_trace *tr = t->s->trace;
	double u0 = hp_trace_now_us(tr);
	int rc;

	if (!*q)
		return 0;
	rc = hp_comm_req_wait(*q);
	*q = NULL;
	if (tr) {
		char name[64];
		snprintf(name, sizeof name, "%s %d", what, m);
		hp_trace_span(tr, HP_PIPE_LANE, "wait", name, u0, hp_trace_now_us(tr));
	}
	return rc;
}

static uint64_t vbytes(const struct hp_graph *g, int v)
{
	struct hp_tensor x = { .dtype = g->values[v].dtype, .shape = g->values[v].shape };

	return hp_tensor_bytes(&x);
}

static int set_in(struct hp_session *s, const struct hp_graph *g, int v, void *data)
{
	struct hp_tensor x = { .dtype = g->values[v].dtype, .shape = g->values[v].shape, .data = data };

	return hp_session_set_input(s, g->values[v].name, &x);
}

static const struct hp_pipe_cut *cut_in(const struct hp_pipe *p)
{
	return p->stage ? &p->cuts[p->stage - 1] : NULL;
}

static const struct hp_pipe_cut *cut_out(const struct hp_pipe *p)
{
	return p->stage + 1 < p->P ? &p->cuts[p->stage] : NULL;
}

static uint64_t in_bytes(const struct hp_trainer *t)
{
	const struct hp_pipe *p = t->pipe;
	const struct hp_pipe_cut *c = cut_in(p);

	return c ? c->bytes : (uint64_t)p->mb * t->data.x.row_bytes;
}

static int post_in(struct hp_trainer *t, int m)
{
	struct hp_pipe *p = t->pipe;

	if (!p->stage || m >= p->M)
		return 0;
	return hp_comm_irecv(p->slot[m % p->nslot].in, in_bytes(t), t->rank - 1, 2 * m, &p->slot[m % p->nslot].rin);
}

/* The stage's inputs of micro-batch m into session s (graph g): the data
 * rows on stage 0, else cut s-1's values as received. */
static int feed_inputs(struct hp_trainer *t, struct hp_session *s, const struct hp_graph *g, int m)
{
	struct hp_pipe *p = t->pipe;
	struct hp_pipe_slot *q = &p->slot[m % p->nslot];
	const struct hp_pipe_cut *c = cut_in(p);
	unsigned char *at = q->in;
	int rc = wait_req(t, &q->rin, "activations in", m);

	if (rc < 0)
		return rc;
	if (!c)
		return set_in(s, g, hp_graph_find_value(g, t->g->values[p->vin].name), q->in);
	for (int k = 0; k < c->n && rc == 0; k++) {
		rc = set_in(s, g, c->vals[k], at);
		at += vbytes(g, c->vals[k]);
	}
	return rc;
}

/* Stage 0 gathers micro-batch m's rows of the data when it starts it. */
static int gather_x(struct hp_trainer *t, int m)
{
	struct hp_pipe *p = t->pipe;

	if (p->stage)
		return 0;
	return hp_darray_gather(&t->data.x, t->rows + (int64_t)m * p->mb, p->mb, p->slot[m % p->nslot].in);
}

static int forward(struct hp_trainer *t, int m)
{
	struct hp_pipe *p = t->pipe;
	struct hp_pipe_slot *q = &p->slot[m % p->nslot];
	const struct hp_pipe_cut *c = cut_out(p);
	unsigned char *at = q->out;
	int rc;

	if ((rc = gather_x(t, m)) < 0 || (rc = feed_inputs(t, p->sf, p->gf, m)) < 0 || (rc = hp_session_run(p->sf)) < 0)
		return rc;
	if ((rc = wait_req(t, &q->sout, "activations out", m - p->nslot)) < 0)
		return rc;
	for (int k = 0; k < c->n && rc == 0; k++) {
		rc = hp_session_read_value(p->sf, c->vals[k], 0, vbytes(p->gf, c->vals[k]), at);
		at += vbytes(p->gf, c->vals[k]);
	}
	if (rc == 0)
		rc = hp_comm_isend(q->out, (uint64_t)(at - (unsigned char *)q->out), t->rank + 1, 2 * m, &q->sout);
	at = q->saved;
	for (int k = 0; k < p->nsaved && rc == 0; k++) {
		rc = hp_session_read_value(p->sf, p->saved[k], 0, vbytes(p->gf, p->saved[k]), at);
		at += (vbytes(p->gf, p->saved[k]) + 63) / 64 * 64;
	}
	if (rc == 0)
		rc = hp_comm_irecv(q->gout, c->grad_bytes, t->rank + 1, 2 * m + 1, &q->rgout);
	return rc;
}

/* The last stage's labels of micro-batch m. */
static int feed_labels(struct hp_trainer *t, int m)
{
	struct hp_pipe *p = t->pipe;
	const int64_t *rows = t->rows + (int64_t)m * p->mb;
	int rc;

	if (p->vlab < 0)
		return 0;
	if (!t->widen_labels) {
		rc = hp_darray_gather(&t->data.y, rows, p->mb, p->ybuf);
	} else {
		int64_t n = hp_shape_numel(&t->g->values[p->vlab].shape);
		rc = hp_darray_gather(&t->data.y, rows, p->mb, p->ytmp);
		for (int64_t i = 0; rc == 0 && i < n; i++)
			((int64_t *)p->ybuf)[i] = ((const int32_t *)p->ytmp)[i];
	}
	return rc < 0 ? rc : set_in(t->s, t->g, p->vlab, p->ybuf);
}

/* The gradients of cut s's values the next stage sent back, as seeds. */
static int feed_seeds(struct hp_trainer *t, int m)
{
	struct hp_pipe *p = t->pipe;
	struct hp_pipe_slot *q = &p->slot[m % p->nslot];
	const struct hp_pipe_cut *c = cut_out(p);
	unsigned char *at = q->gout;
	int rc;

	if (!c)
		return feed_labels(t, m);
	if ((rc = wait_req(t, &q->rgout, "gradients in", m)) < 0)
		return rc;
	for (int k = 0; k < c->n && rc == 0; k++) {
		if (!c->grad[k])
			continue;
		if (p->seed[k] >= 0)
			rc = set_in(t->s, t->g, p->seed[k], at);
		at += vbytes(t->g, c->vals[k]);
	}
	return rc;
}

static int accumulate(struct hp_trainer *t)
{
	struct hp_pipe *p = t->pipe;
	int rc = 0;

	for (int k = 0; k < p->np && rc == 0; k++) {
		float *a = p->acc + p->poff[k];
		const float *g;
		int64_t n = hp_shape_numel(&t->g->values[p->params[k]].shape);
		if (p->pgrad[k] < 0 || (p->acc_direct && p->acc_direct[k]))
			continue;
		/* in core the gradient is read where the backward left it */
		if (!(g = hp_session_value_ptr(t->s, p->pgrad[k]))) {
			rc = hp_session_read_value(t->s, p->pgrad[k], 0, (uint64_t)n * sizeof *g, p->tmp + p->poff[k]);
			g = p->tmp + p->poff[k];
		}
		for (int64_t i = 0; rc == 0 && i < n; i++)
			a[i] += g[i];
	}
	return rc;
}

/* Cut s-1's gradients back to the previous stage (zeros where none
 * reaches a value). */
static int send_back(struct hp_trainer *t, int m)
{
	struct hp_pipe *p = t->pipe;
	struct hp_pipe_slot *q = &p->slot[m % p->nslot];
	const struct hp_pipe_cut *c = cut_in(p);
	unsigned char *at = q->gin;
	int rc;

	if (!c)
		return 0;
	if ((rc = wait_req(t, &q->sgin, "gradients out", m - p->nslot)) < 0)
		return rc;
	for (int k = 0; k < c->n && rc == 0; k++) {
		uint64_t b = vbytes(t->g, c->vals[k]);
		if (!c->grad[k])
			continue;
		if (p->ingrad[k] >= 0)
			rc = hp_session_read_value(t->s, p->ingrad[k], 0, b, at);
		else
			memset(at, 0, b);
		at += b;
	}
	return rc < 0 ? rc : hp_comm_isend(q->gin, (uint64_t)(at - (unsigned char *)q->gin), t->rank - 1, 2 * m + 1,
					   &q->sgin);
}

/* Micro-batch m's saved values into the backward: read in place in core
 * (the slot keeps them to the end of the backward), else copied. */
static int feed_saved(struct hp_trainer *t, int m)
{
	struct hp_pipe *p = t->pipe;
	unsigned char *at = p->slot[m % p->nslot].saved;
	int rc = 0;

	for (int k = 0; k < p->nsaved && rc == 0; k++) {
		int v = p->saved[k];
		rc = t->s->ex == &hp_exec_incore ? hp_session_bind_value(t->s, v, at) : set_in(t->s, t->g, v, at);
		at += (vbytes(t->g, v) + 63) / 64 * 64;
	}
	return rc;
}

static int backward(struct hp_trainer *t, int m)
{
	struct hp_pipe *p = t->pipe;
	int rc;

	/* stage 0's rows are still in the slot from the forward */
	if ((rc = feed_inputs(t, t->s, t->g, m)) < 0 || (rc = feed_saved(t, m)) < 0 || (rc = feed_seeds(t, m)) < 0)
		return rc;
	hp_pipe_direct_first(t, m == 0);
	if ((rc = hp_session_run(t->s)) < 0)
		return rc;
	if (p->vloss >= 0) {
		float l;
		if ((rc = hp_session_read_value(t->s, p->vloss, 0, sizeof l, &l)) < 0)
			return rc;
		p->loss_sum += l;
	}
	/* the previous stage waits for the gradients: sent before the copies */
	if ((rc = accumulate(t)) < 0 || (rc = send_back(t, m)) < 0 || (rc = hp_pipe_defer_keep(t, m)) < 0)
		return rc;
	return post_in(t, m + p->nslot); /* its slot is free */
}

/* The step's order of forwards (F) and backwards (B) on this stage:
 * GPipe all F then all B; 1F1B P - 1 - s forwards ahead, then one F and
 * one B in turn, then the remaining Bs.  The last stage's F is part of
 * its B (its backward graph recomputes nothing it did not need). */
static int run_order(struct hp_trainer *t)
{
	struct hp_pipe *p = t->pipe;
	int last = p->stage + 1 == p->P, ahead = last ? 0 : p->gpipe ? p->M : p->P - 1 - p->stage, nf = 0, rc = 0;

	if (ahead > p->M)
		ahead = p->M;
	for (; nf < ahead && rc == 0; nf++)
		rc = forward(t, nf);
	for (int b = 0; b < p->M && rc == 0; b++) {
		if (!last && nf < p->M && (rc = forward(t, nf++)) < 0)
			break;
		rc = backward(t, b);
	}
	return rc;
}

static int drain(struct hp_trainer *t)
{
	struct hp_pipe *p = t->pipe;
	int rc = 0;

	for (int k = 0; k < p->nslot; k++) {
		struct hp_pipe_slot *q = &p->slot[k];
		int r1 = wait_req(t, &q->sout, "drain activations out", k), r2 = wait_req(t, &q->sgin, "drain gradients out", k);
		rc = rc < 0 ? rc : r1 < 0 ? r1 : r2;
	}
	return rc;
}

/* The mean gradient over the global batch into the optimizer graph, run
 * it, and hand the new parameters to the other graphs. */
static float defer_scale(const struct hp_pipe *p);

static int update(struct hp_trainer *t)
{
	struct hp_pipe *p = t->pipe;
	float scale = hp_pipe_grad_scale(p), *acc = p->acc;
	/* sharded, the optimizer graph reduces and scales them itself
	 * (pipe_shard.c) */
	int rc = p->sharded ? 0 : hp_comm_group_allreduce(p->acc, p->nparam);

	if (!p->so || rc < 0)
		return rc;
	/* a deferred weight gradient may have come scaled (defer_scale) */
	for (int k = 0; k < p->np && !p->sharded; k++) {
		uint64_t end = k + 1 < p->np ? p->poff[k + 1] : p->nparam;
		if (p->acc_direct && (p->acc_direct[k] & 2) && defer_scale(p) != 1.0f)
			continue;
		for (uint64_t i = p->poff[k]; i < end; i++) /* locals: the loop vectorizes */
			acc[i] *= scale;
	}
	/* in core the optimizer reads the sums in place (no copy of every
	 * gradient per step) */
	for (int k = 0; k < p->np && rc == 0; k++)
		rc = p->so->ex != &hp_exec_incore ? set_in(p->so, p->go, p->ograd[k], acc + p->poff[k])
			: hp_session_bind_value(p->so, hp_graph_find_value(p->so->g, p->go->values[p->ograd[k]].name),
						acc + p->poff[k]);
	if (rc == 0)
		rc = hp_session_run(p->so);
	hp_pipe_pack_bump(t); /* new weights: packed again at their next use */
	return rc < 0 ? rc : hp_pipe_sync_params(p, t->s);
}

/* The deferred weight gradients' scale in their GEMM's alpha: the step's
 * 1 / (M D) when that is a power of two, so that the reduced sum of the
 * scaled parts is bitwise the scaled reduced sum (what a sharded stage's
 * optimizer computes); else 1, and the update's loop scales them. */
static float defer_scale(const struct hp_pipe *p)
{
	int64_t md = (int64_t)p->M * p->D;

	return (md & (md - 1)) == 0 ? hp_pipe_grad_scale(p) : 1.0f;
}

/* What the step's gradient sums are multiplied by before the update: the
 * mean over M micro-batches and D pipelines, or 1 when the optimizer graph
 * divides them itself (sharded, pipe_shard.c: mean_over). */
float hp_pipe_grad_scale(const struct hp_pipe *p)
{
	return p->sharded ? 1.0f : (float)(1.0 / ((double)p->M * p->D));
}

int hp_pipe_step(struct hp_trainer *t, double *loss)
{
	struct hp_pipe *p = t->pipe;
	double v[1 + HP_DP_STOP_WORDS];
	int rc = 0;

	hp_pipe_zero_acc(p);
	p->loss_sum = 0;
	for (int m = 0; m < p->nslot && rc == 0; m++)
		rc = post_in(t, m);
	if (rc == 0)
		rc = run_order(t);
	if (rc == 0)
		hp_pipe_defer_run(t, defer_scale(p));
	if (rc == 0)
		rc = drain(t);
	if (rc == 0)
		rc = update(t);
	if (rc < 0)
		return rc;
	/* the last stages' mean loss, and any rank's cancel, to every rank */
	v[0] = p->vloss >= 0 ? p->loss_sum / p->M / p->D : 0;
	hp_dp_stop_put(t, v + 1);
	double u0 = hp_trace_now_us(t->s->trace);
	rc = hp_comm_allreduce(v, 1 + HP_DP_STOP_WORDS, HP_F64);
	if (t->s->trace) /* where a stage that finished first waits for the others */
		hp_trace_span(t->s->trace, HP_PIPE_LANE, "wait", "step end", u0, hp_trace_now_us(t->s->trace));
	if (rc < 0)
		return rc;
	*loss = v[0];
	hp_dp_stop_take(t, v + 1);
	return 0;
}

void hp_pipe_free(struct hp_pipe *p)
{
	if (!p)
		return;
	for (int k = 0; p->slot && k < p->nslot; k++) {
		free(p->slot[k].in);
		free(p->slot[k].gout);
		free(p->slot[k].out);
		free(p->slot[k].gin);
		free(p->slot[k].saved);
	}
	free(p->slot);
	hp_session_destroy(p->sf);
	hp_session_destroy(p->so);
	hp_graph_free(p->gf);
	hp_graph_free(p->go);
	hp_pipe_cuts_free(p->cuts, p->P - 1);
	free(p->cuts);
	free(p->bounds);
	free(p->params);
	free(p->poff);
	free(p->pgrad);
	free(p->ograd);
	free(p->ingrad);
	free(p->seed);
	free(p->saved);
	free(p->acc_direct);
	free(p->packb);
	free(p->packf);
	hp_pipe_defer_free(p);
	free(p->acc);
	free(p->tmp);
	free(p->ybuf);
	free(p->ytmp);
	free(p);
}
