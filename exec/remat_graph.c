/* What recompute-or-swap reads of a training graph (see remat.h): the
 * forward nodes, the activations the backward reads of them, and the
 * recomputation nodes already in it.  Shared by the rewrite (remat.c), the
 * runtime (RECOMPUTE transitions) and --plan's figures (plan_api.c). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "hpdlf/error.h"
#include "exec/remat.h"

int hp_remat_is_copy(const struct hp_node *n)
{
	size_t l = n->name ? strlen(n->name) : 0, s = sizeof HP_REMAT_SUFFIX - 1;

	return n->sched > HP_REMAT_SCHED / 2 && l > s && !strcmp(n->name + l - s, HP_REMAT_SUFFIX);
}

/* fwd[i]: node i computes the loss (an ancestor of value loss), and is not
 * a recomputation. */
int hp_remat_forward(const struct hp_graph *g, int loss, char *fwd)
{
	int *stack = malloc(((size_t)g->nnodes + 1) * sizeof *stack), top = 0;

	if (!stack)
		return hp_error(-ENOMEM, "out of memory planning recomputation");
	memset(fwd, 0, (size_t)g->nnodes);
	if (loss >= 0 && g->values[loss].producer >= 0)
		stack[top++] = g->values[loss].producer;
	while (top > 0) {
		int i = stack[--top];
		const struct hp_node *n = &g->nodes[i];
		if (fwd[i] || hp_remat_is_copy(n))
			continue;
		fwd[i] = 1;
		for (int j = 0; j < n->ninputs; j++) {
			int v = n->inputs[j];
			if (v >= 0 && g->values[v].producer >= 0 && !fwd[g->values[v].producer])
				stack[top++] = g->values[v].producer;
		}
	}
	free(stack);
	return 0;
}

/* Values that live beyond a run (or are not the run's to drop). */
void hp_remat_persistent(const struct hp_graph *g, char *pers)
{
	for (int v = 0; v < g->nvalues; v++)
		pers[v] = g->values[v].kind != HP_VALUE_ACTIVATION || g->values[v].is_output || g->values[v].next >= 0;
	for (int v = 0; v < g->nvalues; v++)
		if (g->values[v].next >= 0)
			pers[g->values[v].next] = 1;
}

/* need[v]: activation v, made by a forward node, is read by a node that is
 * not (the backward, or a recomputation reading its anchor). */
void hp_remat_needed(const struct hp_graph *g, const char *fwd, const char *pers, char *need)
{
	memset(need, 0, (size_t)g->nvalues);
	for (int i = 0; i < g->nnodes; i++) {
		const struct hp_node *n = &g->nodes[i];
		if (fwd[i] || n->folded)
			continue;
		for (int j = 0; j < n->ninputs; j++) {
			int v = n->inputs[j];
			if (v >= 0 && !pers[v] && g->values[v].producer >= 0 && fwd[g->values[v].producer])
				need[v] = 1;
		}
	}
}
