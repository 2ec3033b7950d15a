/* Pipeline training: the stage's weights packed once per step (pipe.h).
 *
 * A micro-batch of 16 rows makes every Gemm of a 1024 x 1024 weight, and
 * the product of its backward that computes the input gradient, a call in
 * which OpenBLAS packs the whole weight (4 MiB read and written) for 33
 * MFLOP of work: measured at M = 8, packing took a quarter of a stage's
 * CPU, where one rank packs once per 128 rows.  The weights change only
 * at the update, so in core the stage marks those nodes pack_b
 * (kernels/gemm_panels.h): they multiply by a packed copy of the weight
 * made at its first use after each update (the epoch, bumped here), the
 * packing one rank does per step.  Out of core too, the copies counted
 * against --budget (pipe_mem.c), so a --budget stage computes what an
 * in-core one does; when they and the rows pipe_defer.c keeps would take
 * half of it, no node is marked (an info line says so). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "hpdlf/error.h"
#include "exec/pipe.h"
#include "exec/train_internal.h"

static int is_param(const struct hp_pipe *p, int v)
{
	for (int k = 0; v >= 0 && k < p->np; k++)
		if (p->params[k] == v)
			return 1;
	return 0;
}

/* Gemm reading a parameter as B, or GemmGrad (transA 0) computing dA
 * from one. */
static int packable(const struct hp_pipe *p, const struct hp_node *n)
{
	if (!strcmp(n->op_type, "GemmGrad"))
		return n->ninputs > 2 && is_param(p, n->inputs[2]) && n->noutputs > 0 && n->outputs[0] >= 0 &&
		       !hp_attr_int(n, "transA", 0);
	return !strcmp(n->op_type, "Gemm") && n->ninputs > 1 && is_param(p, n->inputs[1]);
}

static int mark(struct hp_pipe *p, struct hp_graph *g, int **list, int *nlist)
{
	struct hp_attr a = { .name = "pack_b", .type = HP_ATTR_INT, .i = 1 };
	int rc = 0;

	*nlist = 0;
	if (!g)
		return 0;
	if (!(*list = calloc((size_t)g->nnodes + 1, sizeof **list)))
		return hp_error(-ENOMEM, "out of memory");
	for (int i = 0; i < g->nnodes && rc == 0; i++) {
		if (!packable(p, &g->nodes[i]) || hp_node_attr(&g->nodes[i], "pack_b"))
			continue;
		rc = hp_graph_add_attr(g, i, &a);
		(*list)[(*nlist)++] = i;
	}
	return rc;
}

/* A marked node's packed copy: its weight in panels of 16 columns. */
static uint64_t packed_bytes(const struct hp_graph *g, const int *list, int n)
{
	uint64_t b = 0;

	for (int k = 0; k < n; k++) {
		const struct hp_node *nd = &g->nodes[list[k]];
		const struct hp_shape *w = &g->values[nd->inputs[strcmp(nd->op_type, "Gemm") ? 2 : 1]].shape;
		b += (uint64_t)(w->dims[0] + 16) * (uint64_t)(w->dims[1] + 16) * sizeof(float);
	}
	return b;
}

uint64_t hp_pipe_pack_bytes(const struct hp_pipe *p)
{
	return p->pack_epoch ? p->pack_bytes : 0;
}

static void unmark(struct hp_graph *g, const int *list, int n)
{
	for (int k = 0; g && k < n; k++) {
		struct hp_attr *a = (struct hp_attr *)hp_node_attr(&g->nodes[list[k]], "pack_b");
		a->i = 0;
	}
}

/* Only where few rows make the packing per product dear (the micro-batch
 * at most TK_PANEL_MAX_ROWS = 64 rows, kernels/gemm_panels.h) and a copy
 * serves several (M > 1: with one micro-batch per step there is nothing
 * to share, and BLAS's products keep the 1-rank run's numbers). */
int hp_pipe_mark_pack(struct hp_trainer *t, struct hp_graph *gb)
{
	struct hp_pipe *p = t->pipe;
	uint64_t used = (uint64_t)p->nslot * p->saved_bytes + hp_pipe_defer_bytes(p);
	int rc;

	if (p->mb > 64 || p->M < 2)
		return 0;
	if ((rc = mark(p, gb, &p->packb, &p->npackb)) < 0 || (rc = mark(p, p->gf, &p->packf, &p->npackf)) < 0)
		return rc;
	p->pack_bytes = packed_bytes(gb, p->packb, p->npackb) + (p->gf ? packed_bytes(p->gf, p->packf, p->npackf) : 0);
	if (t->o.budget && used + p->pack_bytes >= t->o.budget / 2) {
		hp_log(HP_LOG_INFO, "pipeline stage %d: the packed copies of its weights (%llu bytes) do not fit "
		       "--budget: not packed", p->stage, (unsigned long long)p->pack_bytes);
		unmark(gb, p->packb, p->npackb);
		unmark(p->gf, p->packf, p->npackf);
		return 0;
	}
	p->pack_epoch = (p->npackb + p->npackf) > 0;
	if (p->pack_epoch)
		hp_log(HP_LOG_INFO, "pipeline stage %d: %d products by its weights use a copy packed once per step "
		       "(%llu bytes)", p->stage, p->npackb + p->npackf, (unsigned long long)p->pack_bytes);
	return 0;
}

static void bump(struct hp_graph *g, const int *list, int n, int64_t epoch)
{
	for (int k = 0; k < n; k++) {
		struct hp_attr *a = (struct hp_attr *)hp_node_attr(&g->nodes[list[k]], "pack_b");
		if (a)
			a->i = epoch;
	}
}

void hp_pipe_pack_bump(struct hp_trainer *t)
{
	struct hp_pipe *p = t->pipe;

	if (!p->pack_epoch)
		return;
	p->pack_epoch++;
	bump(t->g, p->packb, p->npackb, p->pack_epoch);
	if (p->gf)
		bump(p->gf, p->packf, p->npackf, p->pack_epoch);
}
