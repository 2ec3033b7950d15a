/* The compile pipeline (see compile.h). */
#include <stddef.h>
#include <string.h>

#include "hpdlf/error.h"
#include "hpdlf/exec.h"
#include "exec/budget.h"
#include "exec/compile.h"
#include "exec/split.h"
#include "exec/split_weight.h"

/* The caller's options as this library's struct (fields it does not know
 * take their defaults): read once here instead of checking sizes at use. */
static void normalise(const struct hp_exec_opts *o, struct hp_exec_opts *n)
{
	hp_exec_opts_init(n, sizeof *n);
	memcpy(n, o, o->size < sizeof *n ? o->size : sizeof *n);
	n->size = sizeof *n;
}

static int rewrite(struct hp_graph *g, const struct hp_exec_opts *o)
{
	struct hp_budget_layout l;
	int rc;

	if (!o->budget || o->no_split)
		return 0;
	/* the splitters run before the graph is final: the layout of the
	 * budget alone (kernel scratch counted with each step) */
	hp_budget_layout_init(&l, o->budget);
	if (!o->no_weight_split && (rc = hp_split_weights(g, &l, NULL, 0)) < 0)
		return rc;
	return hp_split_ops(g, &l, NULL);
}

int hp_compile(struct hp_graph *g, const struct hp_exec_opts *o, struct hp_budget_layout *l)
{
	struct hp_exec_opts n;
	int rc;

	normalise(o, &n);
	/* in core and under a budget apart: in core holds what budgeted runs
	 * page (weights packed or transposed in memory by the fusions), and
	 * its start-up figure, kept per model, shrank a later budgeted run's
	 * tensors to nothing */
	hp_budget_overhead_measure(g, hp_budget_tiers_remote(n.tiers, n.ntiers), n.budget ? "infer-budget" : "infer");
	if ((rc = rewrite(g, &n)) < 0)
		return rc;
	hp_budget_layout(g, &n, l);
	return 0;
}

int hp_graph_compile(struct hp_graph *g, const struct hp_exec_opts *o)
{
	struct hp_exec_opts def;
	struct hp_budget_layout l;

	if (!o) {
		hp_exec_opts_init(&def, sizeof def);
		o = &def;
	}
	return hp_compile(g, o, &l);
}
