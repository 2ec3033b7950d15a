/* What the out-of-core runtime plans with: worker count, kernel scratch,
 * the store's chunk size and staging reserve at a budget, the plan
 * options.  Apart from plan_api.c (which calibrates the speed model by
 * running sessions) so that the runtime can call it without a cycle. */
#include <stddef.h>
#include <string.h>

#include "hpdlf/exec.h"
#include "hpdlf/store.h"
#include "exec/exec_internal.h"
#include "exec/plan.h"

/* Small budgets get small chunks so paging stays fine-grained: at most a
 * 16th of the budget, and below 4 MiB a 64th (the staging reserve is two
 * chunks, which a budget of a few hundred KiB must not lose to it). */
uint64_t hp_rt_chunk_size(uint64_t dflt, uint64_t budget)
{
	uint64_t c = dflt, parts = budget < (4u << 20) ? 64 : 16;

	while (c > 16384 && c * parts > budget)
		c /= 2;
	return c;
}

uint64_t hp_rt_staging_bytes(uint64_t budget)
{
	/* one chunk copied at a time: its source and its destination */
	return budget ? 2 * hp_rt_chunk_size(HS_DEFAULT_CHUNK, budget) : 0;
}

int hp_exec_workers(const struct hp_exec_opts *o, int threads)
{
	int w = o && o->size >= offsetof(struct hp_exec_opts, workers) + sizeof o->workers && o->workers > 0 ? o->workers : 1;

	return w > threads ? threads : w;
}

uint64_t hp_plan_max_workspace(const struct hp_graph *g)
{
	uint64_t mx = 0;

	for (int i = 0; i < g->nnodes; i++)
		if (!g->nodes[i].folded && g->nodes[i].workspace > mx)
			mx = g->nodes[i].workspace;
	return (mx + 4095) / 4096 * 4096;
}

void hp_plan_default_opts(const struct hp_graph *g, const struct hp_exec_opts *o, struct hp_plan_opts *po)
{
	int threads = o && o->threads > 0 ? o->threads : hp_exec_online_cpus();

	memset(po, 0, sizeof *po);
	po->budget = o ? o->budget : 0;
	/* one scratch buffer per compute worker, resident for the session:
	 * kernels never fault fresh scratch pages in */
	po->workspace = hp_plan_max_workspace(g) * (uint64_t)hp_exec_workers(o, threads);
	po->align = 4096; /* the store's unit of DRAM accounting */
	po->reserve_for = hp_rt_staging_bytes;
	/* ...unless the budget is too tight for that: then each kernel's
	 * scratch is its own, counted with the kernel's step */
	if (po->workspace && po->budget && po->budget < hp_plan_min_budget(g, po, NULL))
		po->workspace = 0;
	po->workers = hp_exec_workers(o, threads);
}
