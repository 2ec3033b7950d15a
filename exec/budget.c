/* The budget layout (see budget.h). */
#include <stddef.h>
#include <string.h>

#include "hpdlf/exec.h"
#include "hpdlf/store.h"
#include "common/cpus.h"
#include "exec/budget.h"
#include "exec/exec_internal.h"
#include "exec/plan.h"

/* The floor: below it a chunk's fixed costs (a request, a pin, a mapping)
 * outweigh its bytes.  It was 16 KiB: LeNet trained at a quarter of its
 * peak (259 KiB, a 64th 4 KiB) then held 32 KiB apart for staging (12%
 * of its budget), its plan wrote 376 KiB a step and read 448, and its
 * chunks of up to four pages found no free run in its 64-page pool (~50
 * mremaps a step).  At 8 KiB: 312 and 380 KiB, 30-40% fewer mremaps, 10-15%
 * less CPU a step.  (4 KiB chunks, one page each, made the tier probe
 * measure writes at a third of 8 KiB's and the plan worse.) */
#define CHUNK_FLOOR 8192u

uint64_t hp_budget_chunk(uint64_t budget)
{
	uint64_t c = HS_DEFAULT_CHUNK, parts = budget < (4u << 20) ? 64 : 16;

	if (!budget)
		return 0;
	while (c > CHUNK_FLOOR && c * parts > budget)
		c /= 2;
	return c;
}

uint64_t hp_budget_staging(uint64_t budget)
{
	/* one chunk copied at a time: its source and its destination */
	return 2 * hp_budget_chunk(budget);
}

static void set_usable(struct hp_budget_layout *l)
{
	uint64_t held = l->staging + l->workspace;

	l->usable = l->budget > held ? l->budget - held : 0;
}

void hp_budget_layout_init(struct hp_budget_layout *l, uint64_t budget)
{
	memset(l, 0, sizeof *l);
	l->process = budget;
	l->budget = hp_budget_tensors(budget);
	l->overhead = budget >= HP_BUDGET_PROCESS_FROM ? hp_budget_overhead() : 0;
	l->chunk = hp_budget_chunk(l->budget);
	l->staging = hp_budget_staging(l->budget);
	l->workers = 1;
	set_usable(l);
}

void hp_budget_layout_tensors(struct hp_budget_layout *l, uint64_t tensors)
{
	l->budget = tensors;
	l->chunk = hp_budget_chunk(tensors);
	l->staging = hp_budget_staging(tensors);
	set_usable(l);
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
	return (mx + HP_BUDGET_ALIGN - 1) / HP_BUDGET_ALIGN * HP_BUDGET_ALIGN;
}

void hp_budget_layout(const struct hp_graph *g, const struct hp_exec_opts *o, struct hp_budget_layout *l)
{
	int threads = o && o->threads > 0 ? o->threads : hp_cpus_online();
	struct hp_plan_opts po = { .align = HP_BUDGET_ALIGN, .reserve_for = hp_budget_staging };

	hp_budget_layout_init(l, o ? o->budget : 0);
	l->workers = hp_exec_workers(o, threads);
	/* one scratch buffer per compute worker, resident for the session:
	 * kernels never fault fresh scratch pages in... */
	po.budget = l->budget;
	po.workspace = hp_plan_max_workspace(g) * (uint64_t)l->workers;
	/* ...unless the budget is too tight for that: then each kernel's
	 * scratch is its own, counted with the kernel's step */
	if (po.workspace && l->budget && (l->budget < hp_plan_budget_for_need(&po, 0) ||
					   l->budget < hp_plan_min_budget(g, &po, NULL)))
		po.workspace = 0; /* (below the scratch and its reserve alone: no graph fits) */
	l->workspace = po.workspace;
	set_usable(l);
}
