/* The plan options the out-of-core runtime plans with, from the budget
 * layout.  Apart from plan_api.c (which calibrates the speed model by
 * running sessions) so that the runtime can call it without a cycle. */
#include <string.h>

#include "exec/budget.h"
#include "exec/comm.h"
#include "exec/plan.h"

void hp_plan_default_opts(const struct hp_budget_layout *l, struct hp_plan_opts *po)
{
	memset(po, 0, sizeof *po);
	po->budget = l->budget;
	po->workspace = l->workspace;
	po->align = HP_BUDGET_ALIGN;
	po->reserve_for = hp_budget_staging;
	po->workers = l->workers;
	po->chunk = l->chunk;
	po->victims = HP_PLAN_VICTIMS;
	/* a reduction's buffers stay held while it is in flight */
	po->comm_ranks = hp_comm_size();
	po->comm_GBps = hp_comm_link(&po->comm_lat_us);
}
