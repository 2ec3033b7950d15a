/* The in-core executor's run order when reductions overlap backward
 * (comm_thread.h): a node that reads the sums of a reduction (AllReduce,
 * ReduceScatter), or reads such a node's outputs, is deferred behind every
 * node that does not, keeping the graph's order within each part.  The
 * topological sort places each bucket's optimizer updates right after its
 * reduction; run in that order, the main thread would wait for the
 * reduction at once.  Deferred, the updates run after backward, each
 * waiting only for its own bucket, while the remaining buckets are still
 * on the wire.  The order is valid: whatever depends on a deferred node is
 * deferred too.  A collective's token input (its place in the chain of
 * collectives) does not defer it: the thread issues them in submission
 * order.  All-gathers (--shard parameters) do not defer their readers:
 * forward and backward need them; they are moved up instead (prefetch). */
#include <string.h>

#include "hpdlf/graph.h"
#include "exec/comm.h"
#include "exec/comm_thread.h"

static int is_reduction(const struct hp_node *n)
{
	return hp_comm_is_allreduce(n) && strcmp(n->op_type, "AllGather");
}

/* Whether node i reads a reduction's sums or a deferred node's outputs. */
static int defers(const struct hp_graph *g, const char *deferred, int i)
{
	const struct hp_node *n = &g->nodes[i];

	for (int j = hp_comm_is_allreduce(n) ? 1 : 0; j < n->ninputs; j++) {
		int v = n->inputs[j], p = v >= 0 ? g->values[v].producer : -1;
		if (p >= 0 && (deferred[p] || is_reduction(&g->nodes[p])))
			return 1;
	}
	return 0;
}

/* A gather of --shard parameters: every input but the token exists
 * before the run (this rank's slices). */
static int free_gather(const struct hp_graph *g, int i)
{
	const struct hp_node *n = &g->nodes[i];

	if (!hp_comm_is_allreduce(n) || strcmp(n->op_type, "AllGather"))
		return 0;
	for (int j = 1; j < n->ninputs; j++)
		if (n->inputs[j] >= 0 && g->values[n->inputs[j]].producer >= 0)
			return 0;
	return 1;
}

/* The first position after `from` of a node reading one of node i's
 * outputs; n when none. */
static int first_reader(const struct hp_graph *g, const int *order, int n, int from, int i)
{
	const struct hp_node *nd = &g->nodes[i];

	for (int k = from + 1; k < n; k++) {
		const struct hp_node *r = &g->nodes[order[k]];
		for (int j = 0; j < r->ninputs; j++)
			for (int o = 0; r->inputs[j] >= 0 && o < nd->noutputs; o++)
				if (r->inputs[j] == nd->outputs[o])
					return k;
	}
	return n;
}

/* Prefetch for --shard parameters: the sort places each gather just
 * before its first reader, so the main thread would wait for each at once.
 * Each moves up to just before the first reader of the gather before it
 * (never above the collective whose token it reads): it is on the wire
 * while the previous layer computes, and at most two layers' whole
 * parameters are held at a time. */
static void prefetch(const struct hp_graph *g, int *order, int n)
{
	int reader = -1; /* the previous gather's first reader */

	for (int k = 0; k < n; k++) {
		int i = order[k], to = reader;
		if (!free_gather(g, i))
			continue;
		int tok = g->nodes[i].ninputs ? g->nodes[i].inputs[0] : -1;
		int tp = tok >= 0 ? g->values[tok].producer : -1;
		for (int q = 0; tp >= 0 && q < k; q++)
			if (order[q] == tp && to <= q)
				to = q + 1;
		if (to >= 0 && to < k) {
			memmove(order + to + 1, order + to, (size_t)(k - to) * sizeof *order);
			order[to] = i;
		} else {
			to = k;
		}
		reader = first_reader(g, order, n, to, i);
	}
}

int hp_comm_run_order(const struct hp_graph *g, char *deferred, int *order)
{
	int k = 0, nd = 0;

	memset(deferred, 0, (size_t)g->nnodes);
	if (hp_comm_thread_enabled())
		for (int i = 0; i < g->nnodes; i++)
			if (!g->nodes[i].folded && defers(g, deferred, i))
				deferred[i] = 1, nd++;
	for (int pass = 0; pass < 2; pass++)
		for (int i = 0; i < g->nnodes; i++)
			if (deferred[i] == pass)
				order[k++] = i;
	if (hp_comm_thread_enabled())
		prefetch(g, order, g->nnodes);
	return nd;
}

/* A collective on the thread reads its inputs and writes its outputs until
 * it is waited for, at the latest where the last of its outputs is read:
 * every tensor it touches lives that long.  In reverse order, so that a
 * collective reading another's outputs extends those in turn. */
void hp_comm_keep_inputs(const struct hp_graph *g, int *last_use)
{
	if (!hp_comm_thread_enabled())
		return;
	for (int i = g->nnodes - 1; i >= 0; i--) {
		const struct hp_node *n = &g->nodes[i];
		int end = -1;
		if (n->folded || !hp_comm_is_allreduce(n))
			continue;
		for (int o = 0; o < n->noutputs; o++)
			if (n->outputs[o] >= 0 && last_use[n->outputs[o]] > end)
				end = last_use[n->outputs[o]];
		if (end < 0)
			end = g->nnodes; /* nobody reads it: until the end of the run */
		for (int j = 0; j < n->ninputs + n->noutputs; j++) {
			int v = j < n->ninputs ? n->inputs[j] : n->outputs[j - n->ninputs];
			if (v >= 0 && last_use[v] < end)
				last_use[v] = end;
		}
	}
}
