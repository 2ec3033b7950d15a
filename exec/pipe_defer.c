/* Pipeline training: each weight gradient once per step (pipe.h).
 *
 * At a micro-batch of 16 rows a GemmGrad's dB of 1024 x 1024 costs more
 * in reading and writing its 4 MiB sum than in multiplying: a stage of
 * M micro-batches paid that M times where one rank pays it once.  In
 * core, for each GemmGrad (transA 0) that adds a parameter's gradient
 * into p->acc itself, the backward leaves dB alone (defer_dw), the step
 * keeps A and dY of every micro-batch (row blocks in micro-batch order),
 * and one GEMM over all M x mb rows writes the sum before the update:
 * the GEMM one rank runs on the whole batch. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "hpdlf/error.h"
#include "exec/pipe.h"
#include "exec/train_internal.h"
#include "kernels/gemm_grad.h"

struct hp_pipe_defer {
	int param, va, vdy, tb;
	int64_t rows, k, n; /* rows of one micro-batch's A (m x k) and dY (m x n) */
	float alpha;
	float *x, *dy;      /* every micro-batch's A and dY, M x rows rows */
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

static int defer_one(struct hp_pipe *p, struct hp_graph *g, int k, struct hp_pipe_defer *d)
{
	struct hp_attr a = { .name = "defer_dw", .type = HP_ATTR_INT, .i = 1 };
	int i = g->values[p->pgrad[k]].producer, rc;
	const struct hp_node *n = &g->nodes[i];
	const struct hp_shape *as = &g->values[n->inputs[1]].shape, *ys = &g->values[n->inputs[0]].shape;

	d->param = k;
	d->vdy = n->inputs[0];
	d->va = n->inputs[1];
	d->tb = (int)hp_attr_int(n, "transB", 0);
	d->alpha = hp_attr_float(n, "alpha", 1);
	d->rows = as->dims[0];
	d->k = as->dims[1];
	d->n = ys->dims[1];
	d->x = malloc((size_t)(p->M * d->rows * d->k) * sizeof *d->x + 1);
	d->dy = malloc((size_t)(p->M * d->rows * d->n) * sizeof *d->dy + 1);
	if (!d->x || !d->dy)
		return hp_error(-ENOMEM, "out of memory");
	if ((rc = hp_graph_add_attr(g, i, &a)) < 0 || (rc = keep_value(g, d->va)) < 0)
		return rc;
	return keep_value(g, d->vdy);
}

static void log_defer(const struct hp_pipe *p)
{
	uint64_t b = 0;

	for (int j = 0; j < p->ndefer; j++)
		b += (uint64_t)(p->M * p->defer[j].rows * (p->defer[j].k + p->defer[j].n)) * sizeof(float);
	hp_log(HP_LOG_INFO, "pipeline stage %d: %d weight gradients computed once per step over the %d micro-batches "
	       "(%llu bytes of their inputs kept)", p->stage, p->ndefer, p->M, (unsigned long long)b);
}

/* After hp_pipe_mark_direct, before the backward's session is made. */
int hp_pipe_mark_defer(struct hp_trainer *t, struct hp_graph *g)
{
	struct hp_pipe *p = t->pipe;
	int rc = 0;

	if (!p->acc_direct || p->M < 2 || !(p->defer = calloc((size_t)p->np + 1, sizeof *p->defer)))
		return p->acc_direct && p->M >= 2 ? hp_error(-ENOMEM, "out of memory") : 0;
	for (int k = 0; k < p->np && rc == 0; k++) {
		const struct hp_node *n;
		if (!p->acc_direct[k])
			continue;
		n = &g->nodes[g->values[p->pgrad[k]].producer];
		if (hp_attr_int(n, "transA", 0) || g->values[n->inputs[1]].dtype != HP_F32)
			continue;
		rc = defer_one(p, g, k, &p->defer[p->ndefer++]);
	}
	if (rc == 0 && p->ndefer)
		log_defer(p);
	return rc;
}

/* After micro-batch m's backward: its A and dY into row block m. */
int hp_pipe_defer_keep(struct hp_trainer *t, int m)
{
	struct hp_pipe *p = t->pipe;
	int rc = 0;

	for (int j = 0; j < p->ndefer && rc == 0; j++) {
		struct hp_pipe_defer *d = &p->defer[j];
		uint64_t bx = (uint64_t)(d->rows * d->k) * sizeof *d->x, by = (uint64_t)(d->rows * d->n) * sizeof *d->dy;
		rc = hp_session_read_value(t->s, d->va, 0, bx, d->x + (int64_t)m * d->rows * d->k);
		if (rc == 0)
			rc = hp_session_read_value(t->s, d->vdy, 0, by, d->dy + (int64_t)m * d->rows * d->n);
	}
	return rc;
}

/* After the step's last backward: each deferred sum, written over p->acc. */
void hp_pipe_defer_run(struct hp_pipe *p)
{
	for (int j = 0; j < p->ndefer; j++) {
		const struct hp_pipe_defer *d = &p->defer[j];
		tk_gemm_grad_dw(d->x, d->dy, p->acc + p->poff[d->param], (int64_t)p->M * d->rows, d->k, d->n, d->tb,
				d->alpha);
	}
}

void hp_pipe_defer_free(struct hp_pipe *p)
{
	for (int j = 0; p->defer && j < p->ndefer; j++) {
		free(p->defer[j].x);
		free(p->defer[j].dy);
	}
	free(p->defer);
}
