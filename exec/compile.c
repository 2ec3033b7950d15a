/* The compile pipeline (see compile.h). */
#include <stddef.h>

#include "hpdlf/error.h"
#include "hpdlf/exec.h"
#include "exec/budget.h"
#include "exec/compile.h"
#include "exec/split.h"
#include "exec/split_weight.h"

/* Option `f` (an int of struct hp_exec_opts at offset `off`) when the
 * caller's struct has it, else 0. */
static int opt_flag(const struct hp_exec_opts *o, size_t off, const int *f)
{
	return o->size >= off + sizeof *f && *f;
}

static int rewrite(struct hp_graph *g, const struct hp_exec_opts *o)
{
	struct hp_budget_layout l;
	int rc;

	if (!o->budget || opt_flag(o, offsetof(struct hp_exec_opts, no_split), &o->no_split))
		return 0;
	/* the splitters run before the graph is final: the layout of the
	 * budget alone (kernel scratch counted with each step) */
	hp_budget_layout_init(&l, o->budget);
	if (!opt_flag(o, offsetof(struct hp_exec_opts, no_weight_split), &o->no_weight_split) &&
	    (rc = hp_split_weights(g, &l, NULL)) < 0)
		return rc;
	return hp_split_ops(g, &l, NULL);
}

int hp_compile(struct hp_graph *g, const struct hp_exec_opts *o, struct hp_budget_layout *l)
{
	int rc = rewrite(g, o);

	if (rc < 0)
		return rc;
	hp_budget_layout(g, o, l);
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
