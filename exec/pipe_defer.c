/* Pipeline training: each weight gradient once per step (pipe.h).
 *
 * At a micro-batch of 16 rows a GemmGrad's dB of 1024 x 1024 costs more
 * in reading and writing its 4 MiB sum than in multiplying: a stage of
 * M micro-batches paid that M times where one rank pays it once.  For
 * each GemmGrad or MatMulGrad whose dB is a parameter's whole gradient,
 * the backward leaves dB alone (defer_dw), the step keeps op(A) and dY of
 * every micro-batch (row blocks in micro-batch order; with transA, A's
 * column blocks), and one GEMM over all M x mb rows writes the sum into
 * p->acc before the update: the GEMM one rank runs on the whole batch.
 * Out of core too: the kept rows are taken off --budget (pipe_mem.c), so
 * an out-of-core stage computes what an in-core one does, bit for bit. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hpdlf/error.h"
#include "exec/exec_internal.h"
#include "exec/pipe.h"
#include "exec/trace.h"
#include "exec/train_internal.h"
#include "kernels/gemm_grad.h"

struct hp_pipe_defer {
	int param, node, va, vdy, ta, tb;
	int64_t rows, k, n; /* of one micro-batch: op(A) rows x k, dY rows x n */
	float alpha;
	float *x, *dy;      /* every micro-batch's op(A) (M x rows x k; k x M rows when ta) and dY */
	float *scratch;     /* ta: one micro-batch's A out of core */
	char name[96];      /* its node's, for --trace (the graph may change under a budget) */
};

/* v is read after the backward's run: an input already is; another value
 * becomes an output so the run keeps it. */
static int keep_value(struct hp_graph *g, int v)
{
	int *l;

	if (g->values[v].kind == HP_VALUE_INPUT || g->values[v].is_output)
		return 0;
	if (!(l = realloc(g->outputs, (size_t)(g->noutputs + 1) * sizeof *l)))
		return hp_error(-ENOMEM, "out of memory");
	g->outputs = l;
	l[g->noutputs++] = v;
	g->values[v].is_output = 1;
	return 0;
}

static int is_f32_2d(const struct hp_graph *g, int v)
{
	return v >= 0 && g->values[v].dtype == HP_F32 && g->values[v].shape.rank == 2;
}

/* Parameter k's gradient as the dB of a GemmGrad or of a MatMulGrad of
 * an unbatched 2-D B (A's batch dims folded into rows, as its kernel
 * does), read by nothing else: *d filled, 1; else 0. */
static int candidate(const struct hp_pipe *p, const struct hp_graph *g, int k, struct hp_pipe_defer *d)
{
	int v = p->pgrad[k], i = v >= 0 ? g->values[v].producer : -1;
	const struct hp_node *n = i >= 0 ? &g->nodes[i] : NULL;
	int gemm = n && !strcmp(n->op_type, "GemmGrad"), mm = n && !strcmp(n->op_type, "MatMulGrad");
	const struct hp_shape *as, *ys;

	if (!(gemm || mm) || n->noutputs < 2 || n->outputs[1] != v || g->values[v].nconsumers ||
	    !is_f32_2d(g, n->inputs[2]) || n->inputs[1] < 0 || g->values[n->inputs[1]].dtype != HP_F32)
		return 0;
	as = &g->values[n->inputs[1]].shape;
	ys = &g->values[n->inputs[0]].shape;
	*d = (struct hp_pipe_defer){ .param = k, .node = i, .vdy = n->inputs[0], .va = n->inputs[1], .alpha = 1 };
	if (mm) {
		d->k = g->values[n->inputs[2]].shape.dims[0];
		d->n = g->values[n->inputs[2]].shape.dims[1];
		d->rows = as->rank >= 2 && d->k ? hp_shape_numel(as) / d->k : 0;
		return as->rank >= 2 && as->dims[as->rank - 1] == d->k && d->rows > 0 &&
		       hp_shape_numel(ys) == d->rows * d->n;
	}
	if (as->rank != 2 || ys->rank != 2)
		return 0;
	d->ta = (int)hp_attr_int(n, "transA", 0);
	d->tb = (int)hp_attr_int(n, "transB", 0);
	d->alpha = hp_attr_float(n, "alpha", 1);
	d->rows = as->dims[d->ta];
	d->k = as->dims[1 - d->ta];
	d->n = ys->dims[1];
	return 1;
}

static uint64_t defer_bytes(const struct hp_pipe_defer *d, int M)
{
	return (uint64_t)(M * d->rows * (d->k + d->n) + (d->ta ? d->rows * d->k : 0)) * sizeof(float);
}

uint64_t hp_pipe_defer_bytes(const struct hp_pipe *p)
{
	uint64_t b = 0;

	for (int j = 0; j < p->ndefer; j++)
		b += defer_bytes(&p->defer[j], p->M);
	return b;
}

/* The deferred gradient's buffers, its node told, A and dY kept. */
static int defer_one(struct hp_pipe *p, struct hp_graph *g, struct hp_pipe_defer *d)
{
	struct hp_attr a = { .name = "defer_dw", .type = HP_ATTR_INT, .i = 1 };
	int rc;

	d->x = malloc((size_t)(p->M * d->rows * d->k) * sizeof *d->x + 1);
	d->dy = malloc((size_t)(p->M * d->rows * d->n) * sizeof *d->dy + 1);
	d->scratch = d->ta ? malloc((size_t)(d->rows * d->k) * sizeof *d->scratch + 1) : NULL;
	if (!d->x || !d->dy || (d->ta && !d->scratch))
		return hp_error(-ENOMEM, "out of memory");
	if (!hp_node_attr(&g->nodes[d->node], "defer_dw") && (rc = hp_graph_add_attr(g, d->node, &a)) < 0)
		return rc;
	if ((rc = keep_value(g, d->va)) < 0)
		return rc;
	p->acc_direct[d->param] |= 2; /* accumulate() and zero_acc leave it to hp_pipe_defer_run */
	snprintf(d->name, sizeof d->name, "%s", g->nodes[d->node].name ? g->nodes[d->node].name : "deferred");
	return keep_value(g, d->vdy);
}

/* Before the budgets are shared and the backward's session is made (after
 * hp_pipe_mark_direct): which gradients to defer, with M > 1.  Out of core
 * when their kept rows and the saved activations would take half of
 * --budget or more, none (summed per micro-batch, with an info line). */
int hp_pipe_mark_defer(struct hp_trainer *t, struct hp_graph *g)
{
	struct hp_pipe *p = t->pipe;
	uint64_t b;
	int rc = 0;

	if (p->M < 2)
		return 0;
	if ((!p->acc_direct && !(p->acc_direct = calloc((size_t)p->np + 1, 1))) ||
	    !(p->defer = calloc((size_t)p->np + 1, sizeof *p->defer)))
		return hp_error(-ENOMEM, "out of memory");
	for (int k = 0; k < p->np; k++)
		p->ndefer += candidate(p, g, k, &p->defer[p->ndefer]);
	b = hp_pipe_defer_bytes(p);
	if (p->ndefer && t->o.budget && (uint64_t)p->nslot * p->saved_bytes + b >= t->o.budget / 2) {
		hp_log(HP_LOG_INFO, "pipeline stage %d: the rows of %d weight gradients (%llu bytes) do not fit "
		       "--budget: summed per micro-batch", p->stage, p->ndefer, (unsigned long long)b);
		p->ndefer = 0;
		return 0;
	}
	for (int j = 0; j < p->ndefer && rc == 0; j++)
		rc = defer_one(p, g, &p->defer[j]);
	if (rc == 0 && p->ndefer)
		hp_log(HP_LOG_INFO, "pipeline stage %d: %d weight gradients computed once per step over the %d "
		       "micro-batches (%llu bytes of their inputs kept)", p->stage, p->ndefer, p->M,
		       (unsigned long long)b);
	return rc;
}

/* Micro-batch m's A (k x rows) as column block m of d->x (k x M rows). */
static int keep_columns(struct hp_trainer *t, struct hp_pipe_defer *d, int m)
{
	const float *a = hp_session_value_ptr(t->s, d->va);
	int64_t ld = (int64_t)t->pipe->M * d->rows;
	int rc;

	if (!a) {
		rc = hp_session_read_value(t->s, d->va, 0, (uint64_t)(d->rows * d->k) * sizeof *a, d->scratch);
		if (rc < 0)
			return rc;
		a = d->scratch;
	}
	for (int64_t r = 0; r < d->k; r++)
		memcpy(d->x + r * ld + (int64_t)m * d->rows, a + r * d->rows, (size_t)d->rows * sizeof *a);
	return 0;
}

/* After micro-batch m's backward: its A and dY into row block m. */
int hp_pipe_defer_keep(struct hp_trainer *t, int m)
{
	struct hp_pipe *p = t->pipe;
	int rc = 0;

	for (int j = 0; j < p->ndefer && rc == 0; j++) {
		struct hp_pipe_defer *d = &p->defer[j];
		uint64_t bx = (uint64_t)(d->rows * d->k) * sizeof *d->x, by = (uint64_t)(d->rows * d->n) * sizeof *d->dy;
		rc = d->ta ? keep_columns(t, d, m)
			   : hp_session_read_value(t->s, d->va, 0, bx, d->x + (int64_t)m * d->rows * d->k);
		if (rc == 0)
			rc = hp_session_read_value(t->s, d->vdy, 0, by, d->dy + (int64_t)m * d->rows * d->n);
	}
	return rc;
}

/* After the step's last backward: each deferred sum, written over p->acc. */
/* The sums come out already scaled by the step's 1 / (M D): the GEMM's
 * alpha, instead of one more pass over every weight's gradient (at 16
 * rows a micro-batch that pass cost 4% of a stage's CPU time), which
 * pipe_step.c asks for only when M D is a power of two (exact: then the
 * reduced sum is bitwise that of a sharded stage's optimizer); `scale` 1
 * leaves them to the update's loop.  --trace:
 * each as a span of the backward's node it stands for, so that the
 * stage's kernel time is whole. */
void hp_pipe_defer_run(struct hp_trainer *t, float scale)
{
	struct hp_pipe *p = t->pipe;
	struct hp_trace *tr = t->s->trace;

	for (int j = 0; j < p->ndefer; j++) {
		const struct hp_pipe_defer *d = &p->defer[j];
		double u0 = hp_trace_now_us(tr);
		tk_gemm_grad_dw(d->x, d->dy, p->acc + p->poff[d->param], (int64_t)p->M * d->rows, d->k, d->n, d->ta,
				d->tb, d->alpha * scale);
		if (tr)
			hp_trace_span(tr, HP_LANE_COMPUTE, "deferred", d->name, u0, hp_trace_now_us(tr));
	}
}

void hp_pipe_defer_free(struct hp_pipe *p)
{
	for (int j = 0; p->defer && j < p->ndefer; j++) {
		free(p->defer[j].x);
		free(p->defer[j].dy);
		free(p->defer[j].scratch);
	}
	free(p->defer);
}
