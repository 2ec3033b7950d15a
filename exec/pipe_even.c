/* The pipeline's fallback partition: stages of about equal parameter
 * bytes plus node count (a node counts as the mean parameter bytes of a
 * node), each cut at the node whose running total is nearest its share. */
#include <errno.h>
#include <stdlib.h>

#include "hpdlf/error.h"
#include "exec/pipe_even.h"

/* What node i weighs: the trainable float parameters it reads. */
static double node_params(const struct hp_graph *g, int i)
{
	double b = 0;

	for (int j = 0; j < g->nodes[i].ninputs; j++) {
		int v = g->nodes[i].inputs[j];
		const struct hp_value *val = v >= 0 ? &g->values[v] : NULL;
		if (val && val->kind == HP_VALUE_INITIALIZER && val->trainable && val->dtype == HP_F32) {
			struct hp_tensor t = { .dtype = val->dtype, .shape = val->shape };
			b += (double)hp_tensor_bytes(&t);
		}
	}
	return b;
}

int hp_pipe_even(const struct hp_graph *g, int P, int *bounds)
{
	int n = g->nnodes;
	double *pre, total, per;

	if (P < 1 || n < P)
		return hp_error(HP_EUSAGE, "%s: %d pipeline stages need at least %d nodes; the model has %d", g->path, P,
				P, n);
	if (!(pre = calloc((size_t)n + 1, sizeof *pre)))
		return hp_error(-ENOMEM, "out of memory");
	for (int i = 0; i < n; i++)
		pre[i + 1] = pre[i] + node_params(g, i);
	per = pre[n] / n;
	for (int i = 0; i <= n; i++)
		pre[i] += per * i;
	total = pre[n];
	bounds[0] = 0;
	bounds[P] = n;
	for (int s = 1; s < P; s++) {
		double want = total * s / P;
		int lo = bounds[s - 1] + 1, hi = n - (P - s), best = lo;
		for (int b = lo; b <= hi; b++)
			if (__builtin_fabs(pre[b] - want) < __builtin_fabs(pre[best] - want))
				best = b;
		bounds[s] = best;
	}
	free(pre);
	return 0;
}
