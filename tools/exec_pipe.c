/* --pipeline's flags into the trainer's options: the cuts' node names
 * split at commas and checked against the model first, so that a
 * mistyped one is named with the nearest node (tools/cli_suggest.c). */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hpdlf/error.h"
#include "hpdlf/graph.h"
#include "hpdlf/train.h"
#include "exec/comm.h"
#include "tools/cli_suggest.h"
#include "tools/exec_cli.h"

#define MAX_CUTS 1024

static int say(const char *fmt, const char *a, const char *b)
{
	if (hp_comm_rank() == 0) {
		char msg[2048];
		snprintf(msg, sizeof msg, fmt, a, b); /* one write (exec_usage_error) */
		fprintf(stderr, "hpdlf-exec: %s\n", msg);
	}
	return 2;
}

/* A node's name as --pipeline-cuts takes it: its own, else its first output's. */
static const char *node_key(const struct hp_graph *g, const struct hp_node *n)
{
	if (n->name && n->name[0])
		return n->name;
	return n->noutputs && n->outputs[0] >= 0 ? g->values[n->outputs[0]].name : "";
}

/* Every name a node of the model: else one line naming the nearest. */
static int check_names(const char *model, char *const *names, int n)
{
	struct hp_graph *g = NULL;
	struct option *opts = NULL;
	int rc = 0;

	if (hp_graph_load(model, &g) < 0)
		return 0; /* the trainer says why, as for any run */
	if (!(opts = calloc((size_t)g->nnodes + 1, sizeof *opts)))
		goto out;
	for (int i = 0; i < g->nnodes; i++)
		opts[i].name = node_key(g, &g->nodes[i]);
	for (int k = 0; k < n && !rc; k++) {
		int found = 0;
		for (int i = 0; i < g->nnodes && !found; i++)
			found = !strcmp(opts[i].name, names[k]);
		if (found)
			continue;
		const char *near = cli_nearest(names[k], opts);
		char hint[300] = "";
		if (near)
			snprintf(hint, sizeof hint, " (did you mean '%s'?)", near);
		rc = say("--pipeline-cuts: the model has no node named '%s'%s", names[k], hint);
	}
out:
	free(opts);
	hp_graph_free(g);
	return rc;
}

int exec_pipe_opts(const struct cli *c, struct hp_trainer_opts *o)
{
	static char *names[MAX_CUTS];
	static char buf[65536];
	int n = 0;

	if (!c->pipeline && (c->micro_batches || c->schedule_given || c->pipeline_cuts))
		return say("%s%s", "--micro-batches, --schedule and --pipeline-cuts need --pipeline P", "");
	if (c->plan)
		return 0; /* --plan --pipeline: exec_plan_pipe.c plans the stages */
	if (c->pipeline == 1)
		return say("%s%s", "--pipeline: at least 2 stages to train, got 1 (leave it out to train unsplit; "
			   "--plan --pipeline 1 shows the whole model as one stage)", "");
	o->pipeline = c->pipeline;
	o->micro_batches = c->micro_batches;
	o->pipeline_schedule = c->schedule;
	if (!c->pipeline_cuts)
		return 0;
	if (strlen(c->pipeline_cuts) >= sizeof buf)
		return say("%s%s", "--pipeline-cuts: the list is too long", "");
	strcpy(buf, c->pipeline_cuts);
	for (char *s = buf, *e; s; s = e) {
		if ((e = strchr(s, ',')))
			*e++ = 0;
		if (!*s || n == MAX_CUTS)
			return say("--pipeline-cuts: expected node names separated by commas, got '%s'%s",
				   c->pipeline_cuts, "");
		names[n++] = s;
	}
	if (n != c->pipeline - 1) {
		char a[32], b[64];
		snprintf(a, sizeof a, "%d", n);
		snprintf(b, sizeof b, "%d: one node ending each stage but the last", c->pipeline - 1);
		return say("--pipeline-cuts names %s nodes; --pipeline P needs P - 1 = %s", a, b);
	}
	o->pipeline_cuts = (const char *const *)names;
	o->npipeline_cuts = n;
	return check_names(c->model, names, n);
}
