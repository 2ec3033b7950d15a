/* --plan --pipeline P: its checks and the table of the stages the planner
 * chooses (exec/pipe_cut.h).  The flags are parsed in hpdlf-exec.c. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hpdlf/error.h"
#include "hpdlf/graph.h"
#include "hpdlf/tensor.h"
#include "hpdlf/train.h"
#include "exec/pipe_cut.h"
#include "tools/exec_cli.h"

static int bad(const char *fmt, const char *arg)
{
	char msg[2048];

	snprintf(msg, sizeof msg, fmt, arg); /* one write (exec_usage_error) */
	fprintf(stderr, "hpdlf-exec: %s\n", msg);
	return 2;
}

static int micro(const struct cli *c)
{
	return c->micro_batches ? c->micro_batches : c->pipeline;
}

int exec_check_pipeline(const struct cli *c)
{
	if (!c->pipeline && (c->micro_batches || c->schedule_given))
		return bad("%s", "--micro-batches and --schedule need --pipeline P");
	if (!c->pipeline)
		return 0;
	if (!c->plan)
		return 0; /* training: the runtime checks the rest (exec_pipe.c, train.c) */
	if (c->ranks)
		return bad("%s", "--plan --pipeline plans one pipeline; --ranks (data parallel) cannot be combined with it");
	if (c->batch % micro(c))
		return bad("%s", "--batch must be a multiple of --micro-batches (the default: one per stage)");
	return 0;
}

/* ---- --plan --pipeline P ---------------------------------------------------- */

/* The model at the micro-batch: the trainer's inputs with dim 0 divided. */
static int micro_model(const struct cli *c, const struct hp_trainer *t, struct hp_graph **out)
{
	const struct hp_graph *tg = hp_trainer_graph(t);
	struct hp_graph *g = NULL;
	int rc = hp_graph_load(c->model, &g);

	for (int i = 0; rc == 0 && i < g->ninputs; i++) {
		int v = hp_graph_find_value(tg, g->values[g->inputs[i]].name);
		struct hp_shape s;
		if (v < 0)
			continue;
		s = tg->values[v].shape;
		if (s.rank > 0 && s.dims[0] == c->batch)
			s.dims[0] = c->batch / micro(c);
		rc = hp_graph_set_input_shape(g, g->values[g->inputs[i]].name, &s);
	}
	if (rc == 0)
		rc = hp_graph_infer(g);
	if (rc < 0)
		hp_graph_free(g);
	else
		*out = g;
	return rc;
}

static const char *sz(uint64_t b, char *buf)
{
	return hp_format_size(b, buf, 16);
}

static void print_stage(const struct hp_pipe_stage *s, int i)
{
	char a[16], b[16], d[16], e[16], f[16];

	printf("  %-5d %6d-%-6d %10lld %9s %8.2f %8.2f %8.2f %9.2f %9s %9s %9s %6d %9s   %s .. %s\n", i, s->first, s->last,
	       (long long)s->params, sz(s->param_bytes, a), s->fwd_ms, s->bwd_ms, s->opt_ms, s->ms, sz(s->need, b),
	       sz(s->min_budget, d), sz(s->peak_bytes, e), s->in_flight, s->cut_after ? sz(s->cut_after, f) : "-",
	       s->first_name, s->last_name);
}

static void print_desc(const struct cli *c, const struct hp_pipe_desc *d, const struct hp_pipe_chain *ch)
{
	char a[16];
	int slow = 0;

	printf("pipeline for %s: %d stage%s chosen by the planner, %d micro-batches of %ld samples (--batch %ld), "
	       "schedule %s\n", c->model, d->P, d->P == 1 ? "" : "s", d->M, c->batch / d->M, c->batch,
	       d->schedule == HP_PIPE_GPIPE ? "gpipe" : "1f1b");
	printf("  %-5s %13s %10s %9s %8s %8s %8s %9s %9s %9s %9s %6s %9s   %s\n", "stage", "nodes", "params", "bytes",
	       "fwd ms", "bwd ms", "opt ms", "ms/micro", "work set", "--budget", "in core", "flight", "to next",
	       "first .. last node");
	for (int s = 0; s < d->P; s++) {
		print_stage(&d->stages[s], s);
		slow = d->stages[s].ms > d->stages[slow].ms ? s : slow;
	}
	printf("  slowest stage        %d: %.2f ms per micro-batch (forward, backward and optimizer; %d kernels "
	       "charged over %d nodes)\n", slow, d->slowest_ms, ch->nodes_kernels, ch->n);
	printf("  boundaries           %s of activations per micro-batch over the %d cut%s (their gradients the same "
	       "back)\n", sz(d->crossing, a), d->P - 1, d->P == 2 ? "" : "s");
	printf("  bubble fraction      %.3f = (P-1)/(M+P-1) with P=%d, M=%d (%s)\n", d->bubble, d->P, d->M,
	       d->schedule == HP_PIPE_GPIPE ? "gpipe: all M micro-batches in flight"
					    : "1f1b: at most P-s micro-batches in flight in stage s");
	printf("  predicted step       %.2f ms = (M+P-1) x slowest forward+backward + slowest update%s; one rank "
	       "%.2f ms; pipeline efficiency %.1f%% "
	       "(bound %.1f%%)\n", d->step_ms, c->link_GBps > 0 ? " + fill and drain transfers" : "", d->one_rank_ms,
	       100 * d->efficiency, 100 * (1 - d->bubble));
}

static void to_choose(const struct cli *c, const struct hp_trainer_opts *to, struct hp_pipe_choose_opts *o)
{
	hp_pipe_choose_opts_init(o, sizeof *o);
	o->budget = c->budget;
	o->micro_batches = micro(c);
	o->schedule = (enum hp_pipe_schedule)c->schedule;
	o->spec = &to->spec;
	o->threads = c->threads;
	o->recalibrate = c->recalibrate;
	o->link_GBps = c->link_GBps;
	o->link_lat_us = c->link_GBps > 0 && !c->link_lat_us ? 2 : c->link_lat_us;
	o->freeze = c->freeze;
	o->nfreeze = c->nfreeze;
}

int exec_plan_pipe(const struct cli *c, const struct hp_trainer_opts *to, const struct hp_trainer *t)
{
	struct hp_pipe_choose_opts o;
	struct hp_pipe_chain ch = { 0 };
	struct hp_pipe_desc d = { 0 };
	struct hp_graph *g = NULL;
	int *bounds = calloc((size_t)c->pipeline + 1, sizeof *bounds), rc;

	if (!bounds)
		return hp_error(-ENOMEM, "out of memory");
	to_choose(c, to, &o);
	rc = micro_model(c, t, &g);
	if (rc == 0)
		rc = hp_pipe_chain_build(g, &o, &ch);
	if (rc == 0)
		rc = hp_pipe_choose_chain(g, &ch, c->pipeline, &o, bounds);
	if (rc == 0)
		rc = hp_pipe_describe_chain(g, &ch, c->pipeline, bounds, &o, &d);
	if (rc == 0)
		print_desc(c, &d, &ch);
	hp_pipe_desc_free(&d);
	hp_pipe_chain_free(&ch);
	hp_graph_free(g);
	free(bounds);
	return rc;
}
