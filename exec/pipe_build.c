/* Pipeline training: this rank's stage, its three graphs and sessions
 * (pipe.h). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hpdlf/error.h"
#include "exec/autodiff.h"
#include "exec/comm.h"
#include "exec/exec_internal.h"
#include "exec/pipe.h"
#include "exec/pipe_cut.h"
#include "exec/pipe_even.h"
#include "exec/trace.h"
#include "exec/train_internal.h"
#include "exec/train_params.h"

static uint64_t vbytes(const struct hp_graph *g, int v)
{
	struct hp_tensor x = { .dtype = g->values[v].dtype, .shape = g->values[v].shape };

	return hp_tensor_bytes(&x);
}

/* The planner's choice on rank 0 (its speed model is this node's; every
 * rank must cut alike), broadcast with its verdict.  A model the planner
 * cannot cost (it reloads the file: a graph the trainer rewrote no longer
 * matches) falls back to the even split, with a warning; a budget no
 * partition fits is an error on every rank. */
static int chosen_bounds(const struct hp_trainer *t, int P, int *bounds)
{
	struct hp_pipe_choose_opts co;
	int msg[2] = { 0, 0 }, rc;

	if (hp_comm_rank() == 0) {
		hp_pipe_choose_opts_init(&co, sizeof co);
		co.budget = t->o.budget;
		co.micro_batches = t->o.micro_batches ? t->o.micro_batches : P;
		co.schedule = (enum hp_pipe_schedule)t->o.pipeline_schedule;
		co.spec = &t->o.spec;
		co.threads = t->o.threads;
		co.freeze = t->o.freeze;
		co.nfreeze = t->o.nfreeze;
		/* a run under a budget never calibrates (its sessions took a
		 * 2-stage ShuffleNet at 64M to 123 MiB on a fresh cache): the
		 * cached model or the defaults; --plan measures and caches */
		if (t->o.budget && !t->o.graph_only)
			co.recalibrate = -1;
		rc = hp_pipe_choose(t->g, P, &co, bounds);
		if (rc < 0 && rc != HP_EBUDGET) {
			hp_log(HP_LOG_WARN, "pipeline: the planner could not cost this model (%s); stages split evenly "
			       "by parameters and nodes instead", hp_errmsg());
			rc = hp_pipe_even(t->g, P, bounds);
		}
		msg[0] = rc;
	}
	if ((rc = hp_comm_bcast(msg, sizeof msg, 0)) < 0 ||
	    (rc = hp_comm_bcast(bounds, (size_t)(P + 1) * sizeof *bounds, 0)) < 0)
		return rc;
	if (msg[0] < 0)
		return hp_comm_rank() == 0 ? msg[0] : hp_error(msg[0], "pipeline: rank 0 found no partition into %d "
								       "stages that fits --budget", P);
	return 0;
}

int hp_pipe_bounds(const struct hp_trainer *t, int P, int *bounds)
{
	const struct hp_graph *model = t->g;
	int rc = t->o.pipeline_cuts ? hp_pipe_bounds_from_names(model, P, t->o.pipeline_cuts, t->o.npipeline_cuts,
								bounds)
				    : chosen_bounds(t, P, bounds);

	return rc < 0 ? rc : hp_pipe_check_bounds(model, P, bounds);
}

/* A copy of the model as the trainer prepared t->g: the data input's
 * batch the micro-batch, parameters promoted, inferred. */
int hp_pipe_model_copy(struct hp_trainer *t, struct hp_graph **out)
{
	struct hp_graph *g;
	struct hp_shape s = t->data.x.shape;
	struct hp_param_counts pc;
	int has = t->o.size >= offsetof(struct hp_trainer_opts, nfreeze) + sizeof t->o.nfreeze, rc;

	*out = NULL;
	if ((rc = hp_graph_load(t->model, &g)) < 0)
		return rc;
	s.dims[0] = t->pipe->mb;
	rc = hp_graph_set_input_shape(g, t->g->values[t->vin].name, &s);
	if (rc == 0)
		rc = hp_train_params(g, has ? t->o.freeze : NULL, has ? t->o.nfreeze : 0, &pc);
	if (rc == 0)
		rc = hp_graph_infer(g);
	if (rc == 0 && g->nnodes != t->pipe->model_nodes)
		rc = hp_error(HP_EINTERNAL, "%s: a copy of the model has %d nodes, not %d", t->model, g->nnodes,
			      t->pipe->model_nodes);
	if (rc < 0) {
		hp_graph_free(g);
		return rc;
	}
	*out = g;
	return 0;
}

static int add_input(struct hp_graph *g, const char *name, int like)
{
	struct hp_value lv = g->values[like];
	int v = hp_graph_add_value(g, name, HP_VALUE_INPUT, HP_F32, &lv.shape), *l;

	if (v < 0)
		return v;
	if (!(l = realloc(g->inputs, (size_t)(g->ninputs + 1) * sizeof *l)))
		return hp_error(-ENOMEM, "out of memory");
	g->inputs = l;
	l[g->ninputs++] = v;
	return v;
}

/* The cut's values whose gradient travels back. */
static int grad_vals(const struct hp_graph *g, const struct hp_pipe_cut *c, int *out)
{
	int n = 0;

	(void)g;
	for (int k = 0; k < c->n; k++)
		if (c->grad[k])
			out[n++] = c->vals[k];
	return n;
}

/* What the backward graph differentiates: wrt = the gradient-carrying
 * values of cut s-1, then the parameters; seeds: those of cut s. */
static int backward_ext(struct hp_pipe *p, const struct hp_graph *model, struct hp_graph *g, struct hp_ad_ext *x)
{
	int s = p->stage, nin = s ? grad_vals(model, &p->cuts[s - 1], x->wrt_grad) : 0;
	int *wrt = (int *)x->wrt, *sv = (int *)x->seed_value, *sg = (int *)x->seed_grad;
	char name[300];

	memcpy(wrt, x->wrt_grad, (size_t)nin * sizeof *wrt);
	memcpy(wrt + nin, p->params, (size_t)p->np * sizeof *wrt);
	x->nwrt = nin + p->np;
	x->nseed = s + 1 < p->P ? grad_vals(model, &p->cuts[s], sv) : 0;
	for (int k = 0; k < x->nseed; k++) {
		snprintf(name, sizeof name, "%s.pipe_grad", g->values[sv[k]].name);
		if ((sg[k] = add_input(g, name, sv[k])) < 0)
			return sg[k];
	}
	if (s + 1 < p->P && !x->nseed)
		return hp_error(HP_EUSAGE, "%s: no gradient crosses the cut after stage %d (no float value): choose "
				"other cuts", g->path, s);
	return 0;
}

/* The backward graph's results the step reads, by value index. */
static void backward_indices(struct hp_pipe *p, const struct hp_graph *model, const struct hp_ad_ext *x)
{
	int s = p->stage, nin = x->nwrt - p->np;

	for (int k = 0; k < p->np; k++)
		p->pgrad[k] = x->wrt_grad[nin + k];
	for (int k = 0; s && k < p->cuts[s - 1].n; k++) {
		p->ingrad[k] = -1;
		for (int j = 0; j < nin; j++)
			if (x->wrt[j] == p->cuts[s - 1].vals[k])
				p->ingrad[k] = x->wrt_grad[j];
	}
	for (int k = 0; s + 1 < p->P && k < p->cuts[s].n; k++) {
		p->seed[k] = -1;
		for (int j = 0; j < x->nseed; j++)
			if (x->seed_value[j] == p->cuts[s].vals[k])
				p->seed[k] = x->seed_grad[j];
	}
	(void)model;
}

static int build_backward(struct hp_trainer *t, int loss_value, struct hp_graph **out, int *nv0)
{
	struct hp_pipe *p = t->pipe;
	struct hp_train_spec spec = t->o.spec;
	struct hp_graph *g = NULL;
	int n = t->g->nvalues + 1, rc;
	int *wrt = calloc((size_t)n, sizeof *wrt), *wg = calloc((size_t)n, sizeof *wg);
	int *sv = calloc((size_t)n, sizeof *sv), *sg = calloc((size_t)n, sizeof *sg);
	struct hp_ad_ext x = { .wrt = wrt, .wrt_grad = wg, .seed_value = sv, .seed_grad = sg, .fwd_values = nv0,
			       .node_offset = p->bounds[p->stage] };

	*out = NULL;
	rc = wrt && wg && sv && sg ? hp_pipe_model_copy(t, &g) : hp_error(-ENOMEM, "out of memory");
	if (rc == 0 && (rc = hp_pipe_stage_cut(g, p->P, p->bounds, p->stage, p->cuts, loss_value, 1)) == 0)
		rc = backward_ext(p, t->g, g, &x);
	if (rc == 0 && p->stage + 1 == p->P)
		spec.output = t->g->values[loss_value].name;
	if (rc == 0)
		rc = hp_autodiff_ext(g, &spec, &x);
	if (rc == 0)
		backward_indices(p, t->g, &x);
	free(wrt);
	free(wg);
	free(sv);
	free(sg);
	if (rc < 0)
		hp_graph_free(g);
	else
		*out = g;
	return rc;
}

/* The optimizer graph: no nodes, the parameters seeded with inputs. */
static int build_optimizer(struct hp_trainer *t, struct hp_graph **out)
{
	struct hp_pipe *p = t->pipe;
	struct hp_graph *g;
	char name[300];
	int rc;

	*out = NULL;
	if (!p->np)
		return 0; /* nothing to train here */
	if ((rc = hp_pipe_model_copy(t, &g)) < 0)
		return rc;
	*out = g;
	while (g->nnodes)
		hp_graph_remove_node(g, g->nnodes - 1);
	g->ninputs = 0;
	g->noutputs = 0;
	for (int k = 0; k < p->np; k++) {
		snprintf(name, sizeof name, "%s.pipe_grad", g->values[p->params[k]].name);
		if ((p->ograd[k] = add_input(g, name, p->params[k])) < 0)
			return p->ograd[k];
	}
	struct hp_ad_ext x = { .nseed = p->np, .seed_value = p->params, .seed_grad = p->ograd };
	if ((rc = hp_graph_finalize(g)) < 0 || (rc = hp_graph_infer(g)) < 0)
		return rc;
	return hp_autodiff_ext(g, &t->o.spec, &x);
}

/* The forward graph as the first half of the backward graph gb
 * (pipe_split.c): gb built again, both split.  HP_EUNSUPPORTED: the
 * stage cannot be split (gb unchanged). */
static int build_split(struct hp_trainer *t, int loss_value, struct hp_graph *gb, int nv0, struct hp_graph **out)
{
	struct hp_pipe *p = t->pipe;
	struct hp_graph *g = NULL;
	int nv, rc = build_backward(t, loss_value, &g, &nv);

	if (rc == 0)
		rc = hp_pipe_split(g, gb, nv0, &p->cuts[p->stage], &p->saved, &p->nsaved);
	if (rc < 0) {
		hp_graph_free(g);
		return rc;
	}
	p->split = 1;
	/* each at a 64-byte boundary: an in-core backward reads them in place */
	for (int k = 0; k < p->nsaved; k++)
		p->saved_bytes += (vbytes(gb, p->saved[k]) + 63) / 64 * 64;
	*out = g;
	return 0;
}

static int build_forward(struct hp_trainer *t, int loss_value, struct hp_graph *gb, int nv0, struct hp_graph **out)
{
	struct hp_pipe *p = t->pipe;
	int rc;

	*out = NULL;
	if (p->stage + 1 == p->P)
		return 0; /* the last stage's backward graph is its forward */
	if ((rc = build_split(t, loss_value, gb, nv0, out)) != HP_EUNSUPPORTED)
		return rc;
	hp_log(HP_LOG_INFO, "pipeline stage %d: %s; its backward recomputes the forward", p->stage, hp_errmsg());
	struct hp_ad_ext x = { .forward_only = 1, .node_offset = p->bounds[p->stage] };

	if ((rc = hp_pipe_model_copy(t, out)) < 0)
		return rc;
	rc = hp_pipe_stage_cut(*out, p->P, p->bounds, p->stage, p->cuts, loss_value, 1);
	/* BatchNorm on the micro-batch's statistics and Dropout's masks as
	 * the backward graph's recomputed forward has them: the same node
	 * order, and their run counters step alike (one run per micro-batch) */
	return rc < 0 ? rc : hp_autodiff_ext(*out, &t->o.spec, &x);
}

/* A stage's session; trace: the file of its spans, or the trace of the
 * stage's first session to share (one file per rank, on one clock). */
static int session(struct hp_trainer *t, struct hp_graph *g, uint64_t budget, const char *trace,
		   struct hp_trace *shared, struct hp_session **out)
{
	struct hp_exec_opts eo;

	*out = NULL;
	if (!g)
		return 0;
	hp_exec_opts_init(&eo, sizeof eo);
	eo.no_split = 1;
	eo.threads = t->o.threads;
	eo.budget = budget;
	eo.seed = t->o.seed;
	eo.trace_path = trace;
	if (t->o.size >= offsetof(struct hp_trainer_opts, tiers) + sizeof t->o.tiers) {
		eo.ntiers = t->o.ntiers;
		eo.tiers = t->o.tiers;
	}
	return hp_session_create_traced(g, &eo, shared, out);
}

static uint64_t cut_bytes(const struct hp_pipe_cut *c, int grads)
{
	return !c ? 0 : grads ? c->grad_bytes : c->bytes;
}

/* The buffers of the micro-batches in flight: 1F1B keeps at most P - s
 * on stage s, GPipe all M. */
static int alloc_slots(struct hp_trainer *t)
{
	struct hp_pipe *p = t->pipe;
	int s = p->stage;
	const struct hp_pipe_cut *cin = s ? &p->cuts[s - 1] : NULL, *cout = s + 1 < p->P ? &p->cuts[s] : NULL;
	uint64_t in = s ? cut_bytes(cin, 0) : (uint64_t)p->mb * t->data.x.row_bytes;

	p->nslot = p->gpipe ? p->M : p->P - s < p->M ? p->P - s : p->M;
	if (!(p->slot = calloc((size_t)p->nslot, sizeof *p->slot)))
		return hp_error(-ENOMEM, "out of memory");
	for (int k = 0; k < p->nslot; k++) {
		struct hp_pipe_slot *q = &p->slot[k];
		q->in = malloc(in + 1);
		q->gout = malloc(cut_bytes(cout, 1) + 1);
		q->out = malloc(cut_bytes(cout, 0) + 1);
		q->gin = malloc(cut_bytes(cin, 1) + 1);
		q->saved = aligned_alloc(64, p->saved_bytes + 64);
		if (!q->in || !q->gout || !q->out || !q->gin || !q->saved)
			return hp_error(-ENOMEM, "out of memory for the pipeline's buffers");
	}
	return 0;
}

static int alloc_params(struct hp_trainer *t)
{
	struct hp_pipe *p = t->pipe;
	int nin = p->stage ? p->cuts[p->stage - 1].n : 0, nout = p->stage + 1 < p->P ? p->cuts[p->stage].n : 0;

	p->poff = calloc((size_t)p->np + 1, sizeof *p->poff);
	p->pgrad = calloc((size_t)p->np + 1, sizeof *p->pgrad);
	p->ograd = calloc((size_t)p->np + 1, sizeof *p->ograd);
	p->ingrad = calloc((size_t)nin + 1, sizeof *p->ingrad);
	p->seed = calloc((size_t)nout + 1, sizeof *p->seed);
	if (!p->poff || !p->pgrad || !p->ograd || !p->ingrad || !p->seed)
		return hp_error(-ENOMEM, "out of memory");
	for (int k = 0; k < p->np; k++) {
		p->poff[k] = p->nparam;
		p->nparam += (uint64_t)hp_shape_numel(&t->g->values[p->params[k]].shape);
	}
	p->acc = calloc(p->nparam + 1, sizeof *p->acc);
	p->tmp = calloc(p->nparam + 1, sizeof *p->tmp);
	return p->acc && p->tmp ? 0 : hp_error(-ENOMEM, "out of memory for the gradients of %llu parameters",
					       (unsigned long long)p->nparam);
}

/* The loss, labels and data inputs of the backward graph. */
static int find_io(struct hp_trainer *t, struct hp_graph *gb, int had_loss)
{
	struct hp_pipe *p = t->pipe;
	const char *lab = t->o.spec.labels ? t->o.spec.labels : "labels";

	p->vin = p->stage == 0 ? hp_graph_find_value(gb, t->g->values[t->vin].name) : -1;
	if (p->stage + 1 < p->P) {
		p->vlab = p->vloss = -1;
		return 0;
	}
	p->vlab = t->o.spec.loss == HP_LOSS_OUTPUT ? -1 : hp_graph_find_value(gb, lab);
	p->vloss = t->o.spec.loss == HP_LOSS_OUTPUT ? hp_graph_find_value(gb, t->o.spec.output)
		   : hp_graph_find_value(gb, had_loss ? "train.loss" : "loss");
	if (p->vloss < 0)
		return hp_error(HP_EINTERNAL, "%s: the last stage has no loss output", t->model);
	if (p->vlab < 0)
		return 0;
	int rc = hp_train_fit_labels(t, t->g, &gb->values[p->vlab],
				     t->o.spec.output ? t->o.spec.output : t->g->values[t->g->outputs[0]].name);
	if (rc < 0)
		return rc;
	p->ybuf = malloc(vbytes(gb, p->vlab) + 1);
	p->ytmp = malloc((size_t)p->mb * t->data.y.row_bytes + 1);
	return p->ybuf && p->ytmp ? 0 : hp_error(-ENOMEM, "out of memory");
}

static int loss_value(const struct hp_trainer *t)
{
	const struct hp_graph *g = t->g;
	int v = t->o.spec.output ? hp_graph_find_value(g, t->o.spec.output) : g->noutputs ? g->outputs[0] : -1;

	if (v < 0)
		return hp_error(HP_EUSAGE, "%s: no output named '%s' to train on", t->model,
				t->o.spec.output ? t->o.spec.output : "?");
	return v;
}

static int build_stage(struct hp_trainer *t, struct hp_graph **gb)
{
	struct hp_pipe *p = t->pipe;
	int lv = loss_value(t), nv0 = 0, rc;

	if (lv < 0)
		return lv;
	if (!(p->bounds = calloc((size_t)p->P + 1, sizeof *p->bounds)) ||
	    !(p->cuts = calloc((size_t)p->P, sizeof *p->cuts)))
		return hp_error(-ENOMEM, "out of memory");
	if ((rc = hp_pipe_bounds(t, p->P, p->bounds)) < 0 ||
	    (rc = hp_pipe_boundaries(t->g, p->P, p->bounds, lv, p->cuts)) < 0)
		return rc;
	if ((rc = hp_pipe_stage_params(t->g, p->bounds, p->stage, &p->params, &p->np)) < 0 ||
	    (rc = alloc_params(t)) < 0)
		return rc;
	if ((rc = build_backward(t, lv, gb, &nv0)) < 0 || (rc = build_forward(t, lv, *gb, nv0, &p->gf)) < 0 ||
	    (rc = build_optimizer(t, &p->go)) < 0)
		return rc;
	return find_io(t, *gb, hp_graph_find_value(t->g, "loss") >= 0);
}

static int check_split(struct hp_trainer *t)
{
	struct hp_pipe *p = t->pipe;
	int64_t per = (int64_t)p->M * p->D;

	if (t->nranks < p->P)
		return hp_error(HP_EUSAGE, "--pipeline %d needs %d ranks or a multiple (run under mpirun -np %d); this "
				"job has %d", p->P, p->P, p->P, t->nranks);
	if (t->nranks % p->P)
		return hp_error(HP_EUSAGE, "--pipeline %d does not divide the %d ranks (N = P x D ranks run D "
				"pipelines of P stages)", p->P, t->nranks);
	if (t->o.batch % per)
		return hp_error(HP_EUSAGE, "--batch %lld does not split into %d micro-batches on each of %d "
				"pipelines (give a multiple of %lld)", (long long)t->o.batch, p->M, p->D, (long long)per);
	p->mb = t->o.batch / per;
	return 0;
}

/* Which part of the model this rank runs (HPDLF_LOG_LEVEL=info). */
static void log_stage(const struct hp_trainer *t, const struct hp_graph *model)
{
	const struct hp_pipe *p = t->pipe;
	int a = p->bounds[p->stage], b = p->bounds[p->stage + 1] - 1;

	hp_log(HP_LOG_INFO, "rank %d: pipeline stage %d of %d (pipeline %d of %d): nodes %d..%d ('%s'..'%s'), "
	       "%llu parameters; per micro-batch of %lld rows it receives %llu bytes and sends %llu", t->rank,
	       p->stage, p->P, p->replica, p->D, a, b, model->nodes[a].name, model->nodes[b].name,
	       (unsigned long long)p->nparam, (long long)p->mb,
	       (unsigned long long)(p->stage ? p->cuts[p->stage - 1].bytes : 0),
	       (unsigned long long)(p->stage + 1 < p->P ? p->cuts[p->stage].bytes : 0));
}

int hp_pipe_build(struct hp_trainer *t)
{
	struct hp_pipe *p = t->pipe;
	struct hp_graph *gb = NULL;
	uint64_t b[3];
	int rc;

	p->model_nodes = t->g->nnodes;
	if ((rc = build_stage(t, &gb)) < 0) {
		hp_graph_free(gb);
		return rc;
	}
	log_stage(t, t->g);
	/* the stage's model replaces the whole one */
	hp_graph_free(t->g);
	t->g = gb;
	t->vin = p->vin;
	t->vlab = p->vlab;
	t->vloss = p->vloss;
	if ((rc = hp_pipe_shard(t, gb)) < 0 || (rc = alloc_slots(t)) < 0 || (rc = hp_pipe_mark_direct(t, gb)) < 0 || (rc = hp_pipe_mark_defer(t, gb)) < 0 ||
	    (rc = hp_pipe_mark_pack(t, gb)) < 0 || (rc = hp_pipe_budgets(t, gb, b)) < 0)
		return rc;
	/* --trace: the kernels of the stage's three sessions, a file per
	 * rank (the backward's session opens it) */
	char trace[4096];
	if (t->o.trace_path)
		snprintf(trace, sizeof trace, t->rank ? "%s.%d" : "%s", t->o.trace_path, t->rank);
	if ((rc = session(t, gb, b[0], t->o.trace_path ? trace : NULL, NULL, &t->s)) < 0)
		return hp_pipe_budget_error(t, 0, b[0], rc);
	if ((rc = session(t, p->gf, b[1], NULL, t->s->trace, &p->sf)) < 0)
		return hp_pipe_budget_error(t, 1, b[1], rc);
	if ((rc = session(t, p->go, b[2], NULL, t->s->trace, &p->so)) < 0)
		return hp_pipe_budget_error(t, 2, b[2], rc);
	hp_trace_lane(t->s->trace, HP_PIPE_LANE, "pipeline messages (waits)");
	if ((rc = hp_dataset_attach(&t->data, hp_session_store(t->s))) < 0 || (rc = hp_pipe_bind_direct(t)) < 0)
		return rc;
	return hp_pipe_sync_params(p, t->s);
}

int hp_pipe_setup(struct hp_trainer *t)
{
	struct hp_pipe *p;
	int rc;

	if (!(p = t->pipe = calloc(1, sizeof *p)))
		return hp_error(-ENOMEM, "out of memory");
	p->P = t->o.pipeline;
	p->M = t->o.micro_batches > 0 ? t->o.micro_batches : p->P;
	p->gpipe = t->o.pipeline_schedule == HP_PIPE_GPIPE;
	p->D = t->nranks / p->P;
	/* consecutive ranks form one pipeline: rank 0 is stage 0 of pipeline 0 */
	p->stage = t->rank % p->P;
	p->replica = t->rank / p->P;
	t->dpr = p->replica;
	t->lbatch = t->o.batch / (p->D > 0 ? p->D : 1);
	rc = check_split(t);
	/* the replicas of a stage sum its gradients */
	return rc < 0 ? rc : hp_comm_group_split(p->stage, p->replica);
}
