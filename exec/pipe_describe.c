/* The figures --plan prints of a pipeline partition (see pipe_cut.h): per
 * stage its nodes, parameters, predicted times, working set and memory in
 * core, the bytes to the next stage; for the pipeline the bubble of the
 * schedule and the step it predicts.
 *
 * A step of M micro-batches over P stages takes (M + P - 1) slots of the
 * slowest stage (forward and backward of one micro-batch each) under both
 * schedules: the fill and drain leave each stage idle (P - 1) of them, the
 * bubble (P - 1) / (M + P - 1).  The updates run once per step, every
 * stage's at once after its last backward: the step adds the slowest
 * stage's, and one rank pays all of them once (not once per micro-batch).
 * The transfers overlap compute, except
 * that the first activation and the last gradient cross every cut once;
 * a cut whose transfer outlasts every stage's kernels paces the pipeline
 * instead.
 * 1F1B keeps the activations of at most P - s micro-batches in stage s;
 * GPipe keeps all M. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "hpdlf/error.h"
#include "exec/pipe_cut.h"

static double xfer_ms(const struct hp_pipe_choose_opts *o, uint64_t bytes)
{
	if (o->link_GBps <= 0 || !bytes)
		return 0;
	return (double)bytes / (o->link_GBps * 1e6) + o->link_lat_us / 1e3;
}

static void stage_figures(const struct hp_graph *model, const struct hp_pipe_chain *c, const struct hp_pipe_desc *d,
			  int s, int lo, int hi, const struct hp_pipe_choose_opts *o)
{
	struct hp_pipe_stage *st = &d->stages[s];
	uint64_t acts = 0;

	st->first = lo;
	st->last = hi - 1;
	st->first_name = model->nodes[lo].name;
	st->last_name = model->nodes[hi - 1].name;
	for (int k = lo; k < hi; k++) {
		st->params += c->params[k];
		st->state_bytes += c->state[k];
		st->fwd_ms += c->fwd_ms[k];
		st->bwd_ms += c->bwd_ms[k];
		st->opt_ms += c->opt_ms[k];
		acts += c->acts[k];
	}
	st->param_bytes = (uint64_t)st->params * 4;
	st->ms = st->fwd_ms + st->bwd_ms + st->opt_ms;
	st->need = hp_pipe_stage_need(c, lo, hi);
	st->min_budget = hp_pipe_budget_for(st->need);
	st->in_flight = d->schedule == HP_PIPE_GPIPE ? d->M : (d->P - s < d->M ? d->P - s : d->M);
	st->cut_after = c->cut[hi];
	st->send_ms = 2 * xfer_ms(o, st->cut_after);
	st->peak_bytes = st->state_bytes + (uint64_t)st->in_flight * acts + 2 * (c->cut[lo] + c->cut[hi]);
}

static int check_bounds(const struct hp_pipe_chain *c, int P, const int *bounds)
{
	if (P < 1 || bounds[0] != 0 || bounds[P] != c->n)
		return hp_error(HP_EUSAGE, "pipeline stages must cover nodes 0..%d", c->n);
	for (int s = 0; s < P; s++)
		if (bounds[s + 1] <= bounds[s])
			return hp_error(HP_EUSAGE, "pipeline stage %d is empty (bounds %d, %d)", s, bounds[s], bounds[s + 1]);
	return 0;
}

int hp_pipe_describe_chain(const struct hp_graph *model, const struct hp_pipe_chain *c, int P, const int *bounds,
			   const struct hp_pipe_choose_opts *in, struct hp_pipe_desc *d)
{
	struct hp_pipe_choose_opts o;
	double fill = 0, total = 0, slot = 0, opt = 0, total_opt = 0;
	int rc;

	hp_pipe_opts_full(in, &o);
	memset(d, 0, sizeof *d);
	if ((rc = check_bounds(c, P, bounds)) < 0)
		return rc;
	if (!(d->stages = calloc((size_t)P, sizeof *d->stages)))
		return hp_error(-ENOMEM, "out of memory");
	d->P = P;
	d->M = o.micro_batches;
	d->schedule = o.schedule;
	for (int s = 0; s < P; s++) {
		const struct hp_pipe_stage *st = &d->stages[s];
		stage_figures(model, c, d, s, bounds[s], bounds[s + 1], &o);
		d->slowest_ms = st->ms > d->slowest_ms ? st->ms : d->slowest_ms;
		if (st->send_ms / 2 > d->slowest_ms) /* the link, a stage of its own */
			d->slowest_ms = st->send_ms / 2;
		/* a slot: one micro-batch's forward and backward, or the link's */
		slot = st->fwd_ms + st->bwd_ms > slot ? st->fwd_ms + st->bwd_ms : slot;
		slot = st->send_ms / 2 > slot ? st->send_ms / 2 : slot;
		opt = st->opt_ms > opt ? st->opt_ms : opt;
		d->crossing += st->cut_after;
		fill += st->send_ms; /* the first activation forward, the last gradient back */
		total += st->fwd_ms + st->bwd_ms;
		total_opt += st->opt_ms;
	}
	d->bubble = (double)(P - 1) / (d->M + P - 1);
	d->step_ms = (d->M + P - 1) * slot + opt + fill;
	d->one_rank_ms = d->M * total + total_opt;
	d->efficiency = d->step_ms > 0 ? d->one_rank_ms / (P * d->step_ms) : 1;
	return 0;
}

int hp_pipe_describe(const struct hp_graph *model, int P, const int *bounds, const struct hp_pipe_choose_opts *in,
		     struct hp_pipe_desc *d)
{
	struct hp_pipe_choose_opts o;
	struct hp_pipe_chain c;
	int rc;

	hp_pipe_opts_full(in, &o);
	memset(d, 0, sizeof *d);
	if ((rc = hp_pipe_chain_build(model, &o, &c)) < 0)
		return rc;
	rc = hp_pipe_describe_chain(model, &c, P, bounds, &o, d);
	hp_pipe_chain_free(&c);
	return rc;
}

void hp_pipe_desc_free(struct hp_pipe_desc *d)
{
	if (!d)
		return;
	free(d->stages);
	memset(d, 0, sizeof *d);
}
