/* The trainer: the model turned into a training step over batches of a
 * dataset, run step after step with checkpoints. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "hpdlf/error.h"
#include "hpdlf/store.h"
#include "exec/asgd.h"
#include "exec/comm.h"
#include "exec/exec_internal.h"
#include "exec/fuse.h"
#include "exec/pipe.h"
#include "exec/plan.h"
#include "exec/remat.h"
#include "exec/split.h"
#include "exec/split_weight.h"
#include "exec/trace.h"
#include "exec/train_dp.h"
#include "exec/train_ckpt.h"
#include "exec/train_floor.h"
#include "exec/train_shard.h"
#include "exec/train_floor.h"
#include "exec/train_internal.h"
#include "exec/train_params.h"

void hp_trainer_opts_init(struct hp_trainer_opts *o, size_t size)
{
	memset(o, 0, size);
	o->size = size;
	if (size >= offsetof(struct hp_trainer_opts, spec) + sizeof o->spec)
		hp_train_spec_init(&o->spec, sizeof o->spec);
	o->seed = 1;
	if (size >= offsetof(struct hp_trainer_opts, blend) + sizeof o->blend)
		o->blend = -1;
}

static double now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static char *dims_str(const struct hp_shape *s, int from, char *buf, size_t len)
{
	struct hp_shape t = { 0 };

	for (int i = from; i < s->rank; i++)
		t.dims[t.rank++] = s->dims[i];
	return hp_shape_str(&t, buf, len);
}

/* The model input fed by the data: its sample dims and dtype must be the
 * data's; dim 0 becomes the batch. */
static int fit_input(struct hp_trainer *t)
{
	struct hp_graph *g = t->g;
	const struct hp_darray *x = &t->data.x;
	struct hp_value *in;
	struct hp_shape s;
	char a[128], b[128];

	t->vin = t->o.input ? hp_graph_find_value(g, t->o.input) : g->ninputs ? g->inputs[0] : -1;
	if (t->vin < 0 || g->values[t->vin].kind != HP_VALUE_INPUT)
		return hp_error(HP_EUSAGE, "%s: no input named '%s' to feed the data to", t->model,
				t->o.input ? t->o.input : "?");
	for (int i = 0; i < g->ninputs; i++)
		if (g->inputs[i] != t->vin)
			return hp_error(HP_EUSAGE, "%s: input '%s' would not be fed (training feeds one input, '%s')",
					t->model, g->values[g->inputs[i]].name, g->values[t->vin].name);
	in = &g->values[t->vin];
	if (in->dtype != x->dtype)
		return hp_error(HP_EDATA, "%s is %s but the model's input '%s' is %s", x->what, hp_dtype_name(x->dtype),
				in->name, hp_dtype_name(in->dtype));
	s = x->shape;
	s.dims[0] = t->lbatch;
	int ok = in->shape.rank == s.rank;
	for (int i = 1; ok && i < s.rank; i++)
		ok = in->shape.dims[i] < 0 || in->shape.dims[i] == s.dims[i];
	if (!ok)
		return hp_error(HP_EDATA, "%s samples are %s but the model's input '%s' takes %s (per sample)", x->what,
				dims_str(&x->shape, 1, a, sizeof a), in->name, dims_str(&in->shape, 1, b, sizeof b));
	/* exporters fix the batch they traced with (torch.onnx.export without
	 * dynamic_axes): it trains at another one when nothing inside the
	 * graph fixes it too, which hp_graph_infer finds (infer_rebatched) */
	if (in->shape.dims[0] >= 0 && in->shape.dims[0] != t->lbatch) {
		t->fixed_batch = in->shape.dims[0];
		in->shape.dims[0] = -1;
	}
	return hp_graph_set_input_shape(g, in->name, &s);
}

/* Shapes at this rank's batch; when that is not the batch the model was
 * exported with, a node whose shapes then fail names the cause. */
static int infer_rebatched(struct hp_trainer *t)
{
	int rc = hp_graph_infer(t->g);
	char why[512];
	const char *in;

	if (rc >= 0 || !t->fixed_batch)
		return rc;
	snprintf(why, sizeof why, "%s", hp_errmsg());
	in = t->g->values[t->vin].name;
	return hp_error(rc, "%s (input '%s' was exported with a fixed batch of %lld and %s %lld rows: the graph "
			"fixes the batch inside too; export with a dynamic batch axis, e.g. torch.onnx.export(..., "
			"dynamic_axes={'%s': {0: 'batch'}}), or give --batch so that %s %lld rows)", why, in,
			(long long)t->fixed_batch, t->pipe ? "a micro-batch here has" : t->nranks > 1 ? "this rank trains" : "--batch gives",
			(long long)(t->pipe ? t->pipe->mb : t->lbatch), in,
			t->pipe ? "a micro-batch has" : t->nranks > 1 ? "each rank trains" : "a step trains",
			(long long)t->fixed_batch);
}

/* The labels input autodiff added must take the label file's samples. */
static int fit_labels(struct hp_trainer *t)
{
	const struct hp_graph *g = t->g;
	const char *name = t->o.spec.labels ? t->o.spec.labels : "labels";

	t->vlab = hp_graph_find_value(g, name);
	t->vloss = g->noutputs ? g->outputs[g->noutputs - 1] : -1;
	if (t->vloss < 0 || g->values[t->vloss].dtype != HP_F32)
		return hp_error(HP_EINTERNAL, "%s: the training graph has no loss output", t->model);
	if (t->vlab < 0)
		return 0; /* output:NAME: the graph computes its own loss */
	return hp_train_fit_labels(t, g, &g->values[t->vlab],
				   t->o.spec.output ? t->o.spec.output : g->values[g->outputs[0]].name);
}

static int alloc_batch(struct hp_trainer *t)
{
	const struct hp_graph *g = t->g;
	int rc = hp_tensor_alloc(&t->xb, g->values[t->vin].dtype, &g->values[t->vin].shape);

	if (rc == 0 && t->vlab >= 0)
		rc = hp_tensor_alloc(&t->yb, g->values[t->vlab].dtype, &g->values[t->vlab].shape);
	t->rows = calloc((size_t)t->lbatch, sizeof *t->rows);
	t->ytmp = t->widen_labels ? calloc((size_t)t->lbatch, t->data.y.row_bytes) : NULL;
	if (rc == 0 && (!t->rows || (t->widen_labels && !t->ytmp)))
		rc = hp_error(-ENOMEM, "out of memory");
	return rc;
}

/* What --pipeline does not combine with yet: refused, never ignored. */
static int check_pipeline(const struct hp_trainer_opts *o)
{
	if (o->size < offsetof(struct hp_trainer_opts, pipeline_schedule) + sizeof o->pipeline_schedule)
		return 0;
	if (o->pipeline < 0 || o->micro_batches < 0)
		return hp_error(HP_EUSAGE, "--pipeline and --micro-batches must be at least 1");
	if (o->pipeline <= 1 && (o->micro_batches > 1 || o->pipeline_cuts))
		return hp_error(HP_EUSAGE, "--micro-batches and --pipeline-cuts need --pipeline P with P >= 2");
	if (o->pipeline <= 1)
		return 0;
	if (o->shard == HP_SHARD_PARAMETERS)
		return hp_error(HP_EUSAGE, "--shard parameters does not go with --pipeline (every micro-batch's forward "
				"and backward would gather the stage's parameters again; use --shard optimizer or "
				"gradients, which shard a stage's optimizer state among its D replicas)");
	if (o->graph_only)
		return hp_error(HP_EUSAGE, "--pipeline: --plan of the training step is --plan --pipeline P (the stages)");
	if (o->async_sgd)
		return hp_error(HP_EUSAGE, "--sync async does not go with --pipeline (a stage holds part of the model, "
				"its peers other parts: there is nothing to blend)");
	if (o->pipeline_schedule != HP_PIPE_1F1B && o->pipeline_schedule != HP_PIPE_GPIPE)
		return hp_error(HP_EUSAGE, "unknown pipeline schedule %d", o->pipeline_schedule);
	return 0;
}

static int check_opts(const struct hp_trainer_opts *o)
{
	int rc;

	if (o->batch < 1)
		return hp_error(HP_EUSAGE, "training needs a batch size (--batch)");
	if (o->steps < 0 || o->epochs < 0 || (!o->steps && !o->epochs))
		return hp_error(HP_EUSAGE, "training needs --steps or --epochs");
	if (o->resume && !o->checkpoint_dir)
		return hp_error(HP_EUSAGE, "--resume needs --checkpoint DIR");
	if ((rc = check_pipeline(o)) < 0)
		return rc;
	return hp_shard_check_opts(o);
}

/* --sync async against the options of reduced gradients. */
static int check_async(const struct hp_trainer_opts *o)
{
	const char *clash = o->shard ? "--shard" : o->sync_bn ? "--sync-bn" : o->bucket ? "--bucket" : NULL;

	if (!o->async_sgd)
		return o->async_deterministic ? hp_error(HP_EUSAGE, "--async-deterministic needs --sync async") : 0;
	if (clash)
		return hp_error(HP_EUSAGE, "%s does not go with --sync async (no gradient is reduced, each rank keeps "
				"its own state)", clash);
	if (o->blend > 1 || o->exchange_every < 0 || o->exchange_peers < 0 || o->delay_ms < 0)
		return hp_error(HP_EUSAGE, "--sync async: blend above 1 or a negative interval, peer count or delay");
	return 0;
}

/* Cross-entropy takes the classes on the output's axis 1 (as PyTorch's
 * F.cross_entropy and ONNX's SoftmaxCrossEntropyLoss do).  A language
 * model's logits [N, T, V] with labels [N, T] have them last: where the
 * label file's sample dims are the output's but its last (and not the
 * output's but its axis 1), a Transpose puts the classes on axis 1 for
 * the loss.  The model's output is left as it is (inference, export and
 * validation read it). */
static int classes_last(struct hp_trainer *t)
{
	struct hp_graph *g = t->g;
	int x = t->o.spec.output ? hp_graph_find_value(g, t->o.spec.output) : g->noutputs ? g->outputs[0] : -1;
	const struct hp_shape *xs, *ys = &t->data.y.shape;
	int r, last = 1, first = 1, v, node, rc;
	int64_t perm[HP_MAX_RANK];
	char name[512];

	if (t->o.spec.loss != HP_LOSS_CROSS_ENTROPY || x < 0 || t->vin < 0)
		return 0;
	xs = &g->values[x].shape;
	r = xs->rank;
	if (r < 3 || ys->rank != r - 1)
		return 0;
	for (int d = 1; d < r - 1; d++) {
		last &= ys->dims[d] == xs->dims[d];
		first &= ys->dims[d] == xs->dims[d + 1];
	}
	if (!last || first)
		return 0;
	if (t->pipe) /* its stages are cut from the model file again (pipe_build.c) */
		return hp_error(HP_EUSAGE, "%s: the labels fit output '%s' with the classes on its last axis, which "
				"--pipeline does not take: export the logits with the classes on axis 1 (e.g. "
				"logits.transpose(1, 2)), or train without --pipeline", t->model, g->values[x].name);
	snprintf(name, sizeof name, "%s/classes_first", g->values[x].name);
	perm[0] = 0;
	perm[1] = r - 1;
	for (int d = 2; d < r; d++)
		perm[d] = d - 1;
	struct hp_attr a = { .name = "perm", .type = HP_ATTR_INTS, .ints = perm, .n = r };
	if ((v = hp_graph_add_value(g, name, HP_VALUE_ACTIVATION, HP_F32, NULL)) < 0 ||
	    (node = hp_graph_add_node(g, name, "Transpose", 1, &x, 1, &v)) < 0 || (rc = hp_graph_add_attr(g, node, &a)) < 0)
		return v < 0 ? v : node < 0 ? node : rc;
	if (!(t->classes_first = strdup(name)))
		return hp_error(-ENOMEM, "out of memory");
	return (rc = hp_graph_finalize(g)) < 0 ? rc : hp_graph_infer(g);
}

/* Autodiff, then (with several ranks) the gradients' reductions before
 * the updates. */
static int finish_autodiff(struct hp_graph *g, void *arg)
{
	struct hp_trainer *t = arg;
	struct hp_train_spec spec = t->o.spec;
	int rc;

	if (t->classes_first)
		spec.output = t->classes_first;
	rc = hp_autodiff(g, &spec);
	uint64_t bucket = t->o.bucket;
	int ranks = t->o.async_sgd ? 1 : t->nranks; /* async: no gradient is reduced */

	if (rc == 0 && (rc = hp_split_grad_exact(g)) > 0)
		rc = 0;
	if (rc == 0 && ranks > 1)
		rc = hp_dp_sync_bn(t, g);
	if (rc == 0 && ranks > 1)
		rc = hp_dp_plan_bucket(t, g, &bucket);
	if (rc == 0)
		rc = hp_dp_insert_reduce(g, ranks, bucket, &t->nbuckets);
	if (rc == 0)
		rc = hp_shard_insert(g, ranks, t->rank, (enum hp_shard_mode)t->o.shard);
	/* one rank: every update is the plain one the fused kernel repeats */
	if (rc == 0 && t->nranks <= 1 && !t->o.async_sgd && !t->pipe && (rc = hp_fuse_grad_update(g)) > 0)
		rc = 0;
	return rc;
}

/* The training graph: under a budget, the forward graph is split first so
 * that autodiff derives the backward of the bands (checked on the whole
 * training graph). */
static int no_split(const struct hp_trainer *t)
{
	return t->o.size >= offsetof(struct hp_trainer_opts, no_split) + sizeof t->o.no_split && t->o.no_split;
}

/* floor (may be NULL): hp_split_train_floor of the forward graph, 0 when
 * not split for a budget */
static int make_training_graph(struct hp_trainer *t, const struct hp_budget_layout *l, uint64_t *floor)
{
	struct hp_split_opts so = { .layout = l, .training = 1, .finish = finish_autodiff, .arg = t, .floor = floor };

	if (!t->o.budget || no_split(t))
		return finish_autodiff(t->g, t);
	return hp_split_for_budget(t->g, &so, NULL);
}

/* Constant-node weights promoted, --freeze applied (train_params.c). */
static int train_params(struct hp_trainer *t)
{
	int has = t->o.size >= offsetof(struct hp_trainer_opts, nfreeze) + sizeof t->o.nfreeze;

	return hp_train_params(t->g, has ? t->o.freeze : NULL, has ? t->o.nfreeze : 0, &t->params);
}

int hp_trainer_param_counts(const struct hp_trainer *t, struct hp_param_counts *out)
{
	size_t n;

	if (!t || !out || out->size < sizeof out->size)
		return hp_error(HP_EUSAGE, "hp_trainer_param_counts: NULL argument or size not set");
	n = out->size < sizeof t->params ? out->size : sizeof t->params;
	memcpy(out, &t->params, n);
	out->size = n;
	return 0;
}

/* The process's fixed overhead, measured once the graph is loaded
 * (budget.h); every rank splits alike: the ranks take the largest. */
static int measure_overhead(struct hp_trainer *t)
{
	uint64_t lo, hi;
	int rc;

	hp_budget_overhead_measure(t->g, hp_budget_tiers_remote(t->o.tiers, t->o.ntiers), t->o.data ? t->o.data : "train");
	if (t->nranks <= 1)
		return 0;
	if ((rc = hp_comm_minmax_u64(hp_budget_overhead(), &lo, &hi)) < 0)
		return rc;
	hp_budget_overhead_set(hi);
	return 0;
}

/* --pipeline: the model checked against the data at the micro-batch,
 * then this rank's stage (pipe_build.c) in place of the whole. */
static int build_pipeline(struct hp_trainer *t)
{
	int64_t rows = t->lbatch;
	int rc;

	t->lbatch = t->pipe->mb;
	rc = fit_input(t);
	t->lbatch = rows;
	if (rc == 0)
		rc = train_params(t);
	if (rc == 0)
		rc = infer_rebatched(t);
	if (rc == 0)
		rc = classes_last(t);
	/* the process's fixed overhead, measured once the graph is loaded, as
	 * for one rank (build): unmeasured, the first call took the resident
	 * set of whenever it came, and a 2-stage CNN at 64M peaked at 87 MiB */
	if (rc == 0)
		rc = measure_overhead(t);
	if (rc == 0)
		rc = hp_pipe_build(t);
	if (rc == 0 && !(t->rows = calloc((size_t)t->lbatch, sizeof *t->rows)))
		rc = hp_error(-ENOMEM, "out of memory");
	t->shuffle_seed = t->o.seed;
	t->total = t->o.steps ? t->o.steps : (t->o.epochs * t->data.n + t->o.batch - 1) / t->o.batch;
	t->perm_epoch = -1;
	if (rc == 0 && t->o.resume)
		rc = hp_pipe_ckpt_read(t);
	return rc;
}

/* Under a budget, on one rank: activations recomputed where that beats
 * keeping or swapping them (remat.h).  Ranks would each choose with their
 * own speed model, and their graphs must agree: not with several. */
static int recompute(struct hp_trainer *t)
{
	struct hp_exec_opts eo;

	if (!t->o.budget || t->o.no_recompute || t->nranks > 1)
		return 0;
	hp_exec_opts_init(&eo, sizeof eo);
	eo.threads = t->o.threads;
	eo.budget = t->o.budget;
	eo.ntiers = t->o.ntiers;
	eo.tiers = t->o.tiers;
	/* a run never measures the speed model (its memory would be beyond the
	 * budget): --plan (graph_only) does, and caches it for the runs */
	struct hp_remat_stats st;
	int rc = hp_remat_ext(t->g, t->vloss, &eo, t->o.graph_only, &st, t->o.graph_only ? &t->remat_plan : NULL);

	t->remat_refused = rc == 0 && st.refused && t->o.graph_only;
	t->remat_needed = t->remat_refused ? hp_plan_needed : 0;
	return rc;
}

int hp_train_build_forward(struct hp_trainer *t, struct hp_budget_layout *l)
{
	int rc;

	if ((rc = fit_input(t)) < 0 || (rc = train_params(t)) < 0 || (rc = infer_rebatched(t)) < 0 ||
	    (rc = hp_fuse_training(t->g)) < 0 || (rc = classes_last(t)) < 0)
		return rc;
	if ((rc = measure_overhead(t)) < 0)
		return rc;
	hp_budget_layout_init(l, t->o.budget);
	if (t->split_tensors)
		hp_budget_layout_tensors(l, t->split_tensors);
	if (!no_split(t) && (rc = hp_split_weights_log(t->g, l, &t->o.spec, t->update_cut, &t->update_would_cut,
							t->ws_log)) < 0)
		return rc;
	return 0;
}

/* The forward graph, and the training graph made of it; --plan's floor
 * probes at other budgets may then know the forward graph without
 * building it (train_floor.h), by its weight split and its floor, which
 * the split search takes on the way. */
static int build_step(struct hp_trainer *t, struct hp_budget_layout *l)
{
	struct hp_ws_log log = { 0 };
	uint64_t floor = 0;
	int rc, note = hp_train_floor_noted(t) && !no_split(t);

	t->ws_log = note ? &log : NULL;
	rc = hp_train_build_forward(t, l);
	t->ws_log = NULL;
	if (rc == 0)
		rc = make_training_graph(t, l, note ? &floor : NULL);
	if (rc == 0 && note)
		hp_train_floor_note(t, &log, floor);
	hp_ws_log_free(&log);
	return rc;
}

int hp_train_load(struct hp_trainer *t)
{
	int rc;

	if ((rc = hp_dp_agree(t)) < 0)
		return rc;
	if ((rc = hp_dataset_open(&t->data, t->o.data, t->o.labels)) < 0)
		return rc;
	return hp_graph_load(t->model, &t->g);
}

static int build(struct hp_trainer *t)
{
	struct hp_exec_opts eo;
	struct hp_budget_layout l;
	int rc;

	if ((rc = hp_train_load(t)) < 0)
		return rc;
	if (t->pipe)
		return build_pipeline(t);
	if ((rc = build_step(t, &l)) < 0 || (rc = fit_labels(t)) < 0 || (rc = recompute(t)) < 0)
		return rc;
	if (t->o.checkpoint_dir && (rc = hp_ckpt_check_views(t)) < 0)
		return rc;
	if (t->o.graph_only)
		return 0;
	hp_exec_opts_init(&eo, sizeof eo);
	eo.no_split = 1; /* split before autodiff, if at all */
	eo.threads = t->o.threads;
	eo.budget = t->o.budget;
	eo.seed = t->o.seed;
	eo.trace_path = t->o.trace_path;
	if (t->o.size >= offsetof(struct hp_trainer_opts, tiers) + sizeof t->o.tiers) {
		eo.ntiers = t->o.ntiers;
		eo.tiers = t->o.tiers;
	}
	if ((rc = hp_session_create(t->g, &eo, &t->s)) < 0)
		return rc;
	if ((rc = hp_dataset_attach(&t->data, hp_session_store(t->s))) < 0 || (rc = alloc_batch(t)) < 0 ||
	    (rc = hp_asgd_setup(t)) < 0)
		return rc;
	if (t->o.val_data && (rc = hp_eval_open(t)) < 0)
		return rc;
	t->shuffle_seed = t->o.seed;
	t->total = t->o.steps ? t->o.steps : (t->o.epochs * t->data.n + t->o.batch - 1) / t->o.batch;
	t->perm_epoch = -1;
	if (!t->o.resume)
		return 0;
	return t->asgd ? hp_asgd_ckpt(t, 0) : hp_ckpt_read(t);
}

/* A graph-only trainer's step fits its budget: planned as its session
 * would plan it (hpdlf-exec's --plan does the same next). */
static int fits(struct hp_trainer *t)
{
	struct hp_exec_opts eo;
	struct hp_plan_summary q;

	hp_exec_opts_init(&eo, sizeof eo);
	eo.threads = t->o.threads;
	eo.budget = t->o.budget;
	eo.seed = t->o.seed;
	eo.ntiers = t->o.ntiers;
	eo.tiers = t->o.tiers;
	eo.no_split = 1; /* split before autodiff, if at all */
	/* the recompute search planned this graph with these options (the
	 * speed model measured alike, victims aside, which a refusal does not
	 * read) and was refused: so is this plan, with the same message and
	 * hp_plan_needed, which it left set (a --plan at one byte planned the
	 * 63,000-node step twice to be refused) */
	if (t->remat_refused)
		return 0;
	/* its plan by Belady's policy is the search's, which it left (the
	 * other policies are weighed against it) */
	struct hp_plan *belady = t->remat_plan;
	t->remat_plan = NULL;
	int rc = hp_plan_summarize_from(t->g, &eo, belady, &q);
	return rc != HP_EBUDGET && rc != HP_EBUDGET_OP;
}

/* One trainer from validated options; update_cut: weights kept in blocks
 * for their optimizer update (split_weight.h).  *out even on failure. */
int hp_train_new(const char *model, const struct hp_trainer_opts *o, int update_cut, uint64_t split_tensors,
		 struct hp_trainer **out)
{
	struct hp_trainer *t;

	if (!(*out = t = calloc(1, sizeof *t)))
		return hp_error(-ENOMEM, "out of memory");
	hp_trainer_opts_init(&t->o, sizeof t->o);
	memcpy(&t->o, o, o->size < sizeof t->o ? o->size : sizeof t->o);
	t->o.size = sizeof t->o;
	if (!t->o.spec.seed)
		t->o.spec.seed = t->o.seed;
	t->update_cut = update_cut;
	t->split_tensors = split_tensors;
	t->model = strdup(model);
	return t->model ? hp_dp_setup(t) : hp_error(-ENOMEM, "out of memory");
}

static int create_once(const char *model, const struct hp_trainer_opts *o, int update_cut, uint64_t split_tensors,
		       struct hp_trainer **out)
{
	int rc = hp_train_new(model, o, update_cut, split_tensors, out);
	struct hp_trainer *t = *out;

	if (rc == 0 && t->o.pipeline > 1)
		rc = hp_pipe_setup(t); /* this rank's stage and pipeline */
	if (rc == 0)
		rc = build(t);
	if (rc == 0 && !update_cut && t->o.graph_only && t->o.budget && t->nranks <= 1 && !t->pipe && !fits(t)) {
		t->fits_refused = 1;
		rc = HP_EBUDGET_OP; /* --plan: the run would be refused (and retry) */
	}
	if (t) {
		hp_plan_free(t->remat_plan);
		t->remat_plan = NULL;
	}
	return rc;
}

/* --lr-schedule and its numbers (fields the caller's struct may lack are 0). */
static int check_lr(const struct hp_trainer_opts *o)
{
	struct hp_trainer_opts f;

	hp_trainer_opts_init(&f, sizeof f);
	memcpy(&f, o, o->size < sizeof f ? o->size : sizeof f);
	if (f.lr_schedule < HP_LR_CONSTANT || f.lr_schedule > HP_LR_STEP || f.warmup_steps < 0)
		return hp_error(HP_EUSAGE, "learning-rate schedule %d or warmup of %lld steps unknown", f.lr_schedule,
				(long long)f.warmup_steps);
	if (f.lr_schedule == HP_LR_STEP && (f.lr_step_size < 1 || f.lr_gamma < 0 || f.warmup_steps))
		return hp_error(HP_EUSAGE, "the step schedule needs a period of at least one step and a factor >= 0, "
				"and takes no warmup");
	return 0;
}

double hp_trainer_lr(const struct hp_trainer *t, int64_t step)
{
	const struct hp_trainer_opts *o = &t->o;
	double base = o->spec.lr, lr;
	int64_t w = o->warmup_steps, rest = t->total - w;

	switch (o->lr_schedule) {
	case HP_LR_STEP: /* StepLR: the previous rate times gamma at each period's end */
		lr = base;
		for (int64_t k = o->lr_step_size; k <= step; k += o->lr_step_size)
			lr *= o->lr_gamma > 0 ? o->lr_gamma : 0.1;
		return lr;
	case HP_LR_LINEAR:
		if (step < w)
			break;
		return base * fmax(0.0, (double)(t->total - step) / (double)(rest > 1 ? rest : 1));
	case HP_LR_COSINE:
		if (step < w)
			break;
		lr = (double)(step - w) / (double)(rest > 1 ? rest : 1);
		return base * fmax(0.0, 0.5 * (1.0 + cos(M_PI * 0.5 * 2.0 * lr)));
	default:
		if (step >= w)
			return base;
	}
	return base * ((double)step / (double)(w > 1 ? w : 1));
}

/* The rate of this step into every optimizer update (the kernels read
 * their "lr" attribute at each run). */
static void set_lr_in(struct hp_graph *g, float lr)
{
	for (int i = 0; g && i < g->nnodes; i++) {
		struct hp_node *n = &g->nodes[i];
		if (strcmp(n->domain, "ai.hpdlf") || (strcmp(n->op_type, "SGDUpdate") && strcmp(n->op_type, "AdamUpdate") &&
						      strcmp(n->op_type, "ConvGradFilterUpdate")))
			continue;
		for (int a = 0; a < n->nattrs; a++)
			if (!strcmp(n->attrs[a].name, "lr"))
				n->attrs[a].f = lr;
	}
}

/* ... in the step's graph, and a pipeline stage's optimizer graph. */
static void set_lr(struct hp_trainer *t)
{
	float lr = (float)hp_trainer_lr(t, t->step);

	set_lr_in(t->g, lr);
	if (t->pipe)
		set_lr_in(t->pipe->go, lr);
}

static int refused(int rc)
{
	return rc == HP_EBUDGET || rc == HP_EBUDGET_OP;
}

/* Refused by a budget just below what its own splits need: the weights
 * and operators are split for the budget given (cut at its target), and a
 * budget's splits can need a little more than it while a smaller budget's
 * finer ones fit (the test MLP trained at a batch of 64: 286720 bytes ran,
 * 344064 to 360447 were refused naming 360448).  Then the splits of
 * smaller tensor budgets are tried, each run under the budget given, so
 * that every budget from the smallest named up runs.  Only where the need
 * named is within a sixteenth of the budget: the floor search's probes
 * below the smallest budget are refused by more, and pay nothing.  *tp
 * holds rc's trainer; on success the finer one replaces it. */
#define FINER_TRIES 2
static int split_finer(const char *model, const struct hp_trainer_opts *o, struct hp_trainer **tp, int rc)
{
	uint64_t need = hp_plan_needed, tensors = hp_budget_tensors(o->budget);
	struct hp_trainer *t = *tp;

	if (!o->budget || !t || t->nranks > 1 || t->pipe || !need || need <= o->budget || need - o->budget > o->budget / 16)
		return rc;
	for (int i = 0; i < FINER_TRIES; i++) {
		struct hp_trainer *f = NULL;
		tensors -= tensors / 4;
		int r = create_once(model, o, 1, tensors, &f);
		if (r == 0 && f->o.graph_only && !fits(f))
			r = HP_EBUDGET_OP;
		if (r == 0) {
			hp_trainer_destroy(t);
			*tp = f;
			return 0;
		}
		hp_trainer_destroy(f);
		if (!refused(r))
			return r;
	}
	return rc;
}

/* Refused, yet the budget named lies below the one given: the store's
 * chunk (and with it the staging of one copy) and the kernels' resident
 * scratch grow stepwise with the budget, so a budget just above a step
 * can leave the tensors less room than one just below it (ResNet-18
 * training at batch 16: 16000000 bytes ran, 17000000 were refused naming
 * 16556032).  The step then runs within the figure named: the budget is a
 * bound, not a target, and every budget from the smallest named up runs.
 * Once: the trainer at the figure named is created as any other (its own
 * retries), and its refusal is the one reported. */
static int create_within(const char *model, const struct hp_trainer_opts *o, struct hp_trainer **tp, int rc,
			 uint64_t need0)
{
	uint64_t need = hp_plan_needed, given = o->budget;
	struct hp_trainer *t = *tp, *f = NULL;
	struct hp_trainer_opts o1;
	static int depth;
	static char msg[4096];
	int r0 = rc;

	if (depth || !given || !t || t->nranks > 1 || t->pipe)
		return rc;
	/* --plan: the retry with weights kept in blocks is taken unchecked
	 * (plan_step plans it and refuses); check it here */
	if (rc == 0 && t->update_cut && t->o.graph_only && !fits(t))
		rc = HP_EBUDGET_OP, need = hp_plan_needed;
	/* the first build's figure where the retry's was larger (its weights
	 * kept in blocks whose Concat needs more than the budget) */
	if (need0 && need0 < given && (!need || need >= given))
		need = need0;
	/* from 64 MiB the budget bounds the whole process, below it the
	 * tensors: a figure below 64 MiB does not stand in for one above
	 * (--store at 64 MiB, its fixed overhead filling them, is refused) */
	if (!refused(rc) || !need || need >= given || (given >= HP_BUDGET_PROCESS_FROM) != (need >= HP_BUDGET_PROCESS_FROM))
		return r0;
	hp_trainer_opts_init(&o1, sizeof o1);
	memcpy(&o1, o, o->size < sizeof o1 ? o->size : sizeof o1);
	o1.size = sizeof o1;
	o1.budget = need;
	/* failing, the refusal reported is the budget given's, not this one's */
	snprintf(msg, sizeof msg, "%s", hp_errmsg());
	uint64_t needed = hp_plan_needed;
	depth++;
	int r = hp_trainer_create(model, &o1, &f);
	depth--;
	if (r < 0) {
		hp_plan_needed = needed;
		return r0 < 0 ? hp_error(r0, "%s", msg) : r0;
	}
	hp_log(hp_trainer_within_quiet ? HP_LOG_DEBUG : HP_LOG_WARN,
	       "%s: --budget %llu leaves its step less room than %llu bytes would (a larger store chunk's staging, or "
	       "scratch held for the session): it runs within %llu bytes",
	       model, (unsigned long long)given, (unsigned long long)need, (unsigned long long)need);
	hp_trainer_destroy(t);
	*tp = f;
	return 0;
}

int hp_trainer_within_quiet;

uint64_t hp_trainer_run_budget(const struct hp_trainer *t)
{
	return t->o.budget;
}

int hp_trainer_create(const char *model, const struct hp_trainer_opts *o, struct hp_trainer **out)
{
	struct hp_trainer *t;
	uint64_t need0;
	int rc;

	*out = NULL;
	if (!o || o->size < offsetof(struct hp_trainer_opts, cancel))
		return hp_error(HP_EUSAGE, "hp_trainer_create: options missing (use hp_trainer_opts_init)");
	if ((rc = check_opts(o)) < 0)
		return rc;
	if (o->size >= offsetof(struct hp_trainer_opts, parzen) + sizeof o->parzen && (rc = check_async(o)) < 0)
		return rc;
	if ((rc = check_lr(o)) < 0)
		return rc;
	rc = create_once(model, o, 0, 0, &t);
	need0 = !refused(rc) ? 0 : t && t->remat_refused ? t->remat_needed : hp_plan_needed; /* hp_trainer_refused_needs */
	if ((rc == HP_EBUDGET || rc == HP_EBUDGET_OP) && t->o.budget && t->nranks <= 1 && !t->pipe &&
	    !t->update_would_cut && t->fits_refused) {
		/* no weight to keep in blocks: the retry below would build this
		 * graph again, and take it without fits() */
		t->update_cut = 1;
		rc = 0;
	} else if ((rc == HP_EBUDGET || rc == HP_EBUDGET_OP) && t->o.budget && t->nranks <= 1 && !t->pipe) {
		/* refused for the budget: once more with the weights whose
		 * optimizer update does not fit kept in blocks */
		hp_trainer_destroy(t);
		rc = create_once(model, o, 1, 0, &t);
	}
	if (refused(rc) || (rc == 0 && t->fits_refused))
		rc = split_finer(model, o, &t, rc);
	rc = create_within(model, o, &t, rc, need0);
	if (rc < 0) {
		hp_trainer_destroy(t);
		return rc;
	}
	*out = t;
	return 0;
}

void hp_trainer_destroy(struct hp_trainer *t)
{
	if (!t)
		return;
	hp_eval_free(t->eval);
	hp_asgd_free(t);
	hp_dataset_close(&t->data); /* data tensors live in the session's store */
	hp_pipe_free(t->pipe);
	hp_session_destroy(t->s);
	hp_plan_free(t->remat_plan);
	hp_graph_free(t->g);
	hp_tensor_free(&t->xb);
	hp_tensor_free(&t->yb);
	free(t->ytmp);
	free(t->classes_first);
	free(t->rows);
	free(t->perm);
	free(t->model);
	free(t);
}

static uint64_t splitmix(uint64_t *x)
{
	uint64_t z = (*x += 0x9E3779B97F4A7C15ull);

	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
	z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
	return z ^ (z >> 31);
}

/* The permutation of epoch e: Fisher-Yates from (seed, e) alone, so any
 * step can be recomputed after a resume. */
static int epoch_perm(struct hp_trainer *t, int64_t e)
{
	int64_t n = t->data.n;
	uint64_t x = t->shuffle_seed * 0xD1B54A32D192ED03ull ^ (uint64_t)e;

	if (t->perm_epoch == e)
		return 0;
	if (!t->perm && !(t->perm = malloc((size_t)n * sizeof *t->perm)))
		return hp_error(-ENOMEM, "out of memory for the permutation of %lld samples", (long long)n);
	for (int64_t i = 0; i < n; i++)
		t->perm[i] = i;
	for (int64_t i = n - 1; i > 0; i--) {
		int64_t j = (int64_t)(splitmix(&x) % (uint64_t)(i + 1)), tmp = t->perm[i];
		t->perm[i] = t->perm[j];
		t->perm[j] = tmp;
	}
	t->perm_epoch = e;
	return 0;
}

int hp_train_rows(struct hp_trainer *t, int64_t step)
{
	return hp_train_rows_into(t, step, t->rows);
}

int hp_train_rows_into(struct hp_trainer *t, int64_t step, int64_t *rows)
{
	int64_t n = t->data.n, b = t->o.batch, first = t->dpr * t->lbatch;

	/* rows [first, first + lbatch) of the global batch, whose positions
	 * (and permutation) every rank computes alike */
	for (int64_t k = 0; k < t->lbatch; k++) {
		int64_t p = step * b + first + k, e = p / n, i = p % n;
		if (t->o.shuffle) {
			int rc = epoch_perm(t, e);
			if (rc < 0)
				return rc;
			i = t->perm[i];
		}
		rows[k] = i;
	}
	return 0;
}

/* Out of core: the batch after `step` is read during step's run
 * (hp_dataset_ahead), not between the runs. */
static int ahead_batch(struct hp_trainer *t, int64_t step)
{
	struct hp_dataset *d = &t->data;
	int rc;

	if (!d->x.ten || step + 1 >= t->total)
		return 0;
	if (!d->ahead_rows && !(d->ahead_rows = malloc((size_t)t->lbatch * sizeof *d->ahead_rows)))
		return hp_error(-ENOMEM, "out of memory");
	rc = hp_train_rows_into(t, step + 1, d->ahead_rows);
	return rc < 0 ? rc : hp_dataset_ahead(d, t->s, d->ahead_rows, t->lbatch);
}

/* A span of the data lane (--trace): the trainer's part of the time
 * between the runs. */
static double data_span(struct hp_trainer *t, const char *what, double u0)
{
	double u1 = hp_trace_now_us(t->s->trace);

	if (t->s->trace)
		hp_trace_span(t->s->trace, HP_LANE_DATA, "data", what, u0, u1);
	return u1;
}

static int load_batch(struct hp_trainer *t, int64_t step)
{
	const char *lname;
	int rc = hp_train_rows(t, step);
	double u = hp_trace_now_us(t->s->trace);

	hp_dataset_ahead_wait(&t->data); /* what the run before read ahead for this batch is in */
	u = data_span(t, "read-ahead wait", u);
	if (rc == 0)
		hp_dataset_prefetch(&t->data, hp_session_store(t->s), t->rows, t->lbatch);
	u = data_span(t, "prefetch", u);
	if (rc == 0)
		rc = hp_darray_gather(&t->data.x, t->rows, t->lbatch, t->xb.data);
	u = data_span(t, "gather", u);
	if (rc == 0)
		rc = hp_session_set_input(t->s, t->g->values[t->vin].name, &t->xb);
	if (rc < 0)
		return rc;
	if (t->vlab < 0)
		return ahead_batch(t, step);
	lname = t->g->values[t->vlab].name;
	if (!t->widen_labels) {
		rc = hp_darray_gather(&t->data.y, t->rows, t->lbatch, t->yb.data);
	} else {
		int64_t n = hp_shape_numel(&t->yb.shape);
		rc = hp_darray_gather(&t->data.y, t->rows, t->lbatch, t->ytmp);
		for (int64_t i = 0; rc == 0 && i < n; i++)
			((int64_t *)t->yb.data)[i] = ((const int32_t *)t->ytmp)[i];
	}
	if (rc == 0)
		rc = hp_session_set_input(t->s, lname, &t->yb);
	return rc < 0 ? rc : ahead_batch(t, step);
}

/* Bytes each store tier moved since the last call. */
static void tier_delta(struct hp_trainer *t, struct hp_step_info *info)
{
	struct hs_store_stats st;

	info->ntiers = 0;
	if (hp_session_store_stats(t->s, &st) < 0)
		return;
	info->ntiers = st.ntiers < 8 ? st.ntiers : 8;
	for (int i = 0; i < info->ntiers; i++) {
		memcpy(t->tier_names[i], st.tier[i].name, sizeof t->tier_names[i]);
		t->tier_names[i][sizeof t->tier_names[i] - 1] = 0;
		info->tier_name[i] = t->tier_names[i];
		info->tier_read[i] = st.tier[i].bytes_read - t->last_read[i];
		info->tier_written[i] = st.tier[i].bytes_written - t->last_written[i];
		t->last_read[i] = st.tier[i].bytes_read;
		t->last_written[i] = st.tier[i].bytes_written;
	}
}

int hp_trainer_step(struct hp_trainer *t, struct hp_step_info *info)
{
	double t0 = now_ms();
	float loss;
	int rc;

	memset(info, 0, sizeof *info);
	if (!t->s)
		return hp_error(HP_EUSAGE, "this trainer was built with graph_only: it cannot run");
	if (t->step >= t->total)
		return 0;
	tier_delta(t, info); /* count from here */
	if (t->o.lr_schedule || t->o.warmup_steps)
		set_lr(t);
	if (t->pipe) {
		rc = hp_train_rows(t, t->step);
		if (rc == 0)
			rc = hp_pipe_step(t, &info->loss);
	} else {
		rc = load_batch(t, t->step);
		if (rc == 0)
			rc = hp_asgd_before(t);
		if (rc == 0)
			rc = hp_session_run(t->s);
		if (rc == 0)
			rc = hp_session_read_value(t->s, t->vloss, 0, sizeof loss, &loss);
		info->loss = loss;
		if (rc == 0)
			rc = hp_dp_mean_loss(t, &info->loss);
		if (rc == 0)
			rc = hp_asgd_after(t); /* async: this rank's loss, then its exchange */
	}
	if (rc < 0)
		return hp_error_prefix(rc, "step %lld", (long long)t->step);
	info->step = t->step;
	info->steps = t->total;
	info->epoch = t->step * t->o.batch / t->data.n;
	info->samples = t->o.batch;
	info->flops = t->s->flops;
	tier_delta(t, info);
	info->ms = now_ms() - t0;
	t->step++;
	return 1;
}

/* Collective: every rank writes its part (a pipeline: its stage); an
 * asynchronous rank alone writes its own. */
static int ckpt_write(struct hp_trainer *t)
{
	if (t->asgd)
		return hp_asgd_ckpt(t, 1); /* not collective: each rank its own */
	return t->pipe ? hp_pipe_ckpt_write(t) : hp_ckpt_write(t);
}

int hp_trainer_checkpoint(struct hp_trainer *t)
{
	if (!t->o.checkpoint_dir || !t->s)
		return hp_error(HP_EUSAGE, "no checkpoint directory was given, or the trainer cannot run");
	return ckpt_write(t);
}

/* A daemon died with values of the run (-EHOSTDOWN, issue 23): the
 * store's verdict named it and them; say which checkpoint to resume from
 * (the last this loop wrote, or the one it started from). */
static int lost_daemon(const struct hp_trainer *t, int rc, long long saved)
{
	if (rc != -EHOSTDOWN || !t->o.checkpoint_dir)
		return rc;
	if (saved >= 0)
		return hp_error(rc, "%s; resume from the checkpoint in %s (step %lld)", hp_errmsg(),
				t->o.checkpoint_dir, saved);
	return hp_error(rc, "%s; resume from the checkpoint in %s (as it was when this run started)", hp_errmsg(),
			t->o.checkpoint_dir);
}

/* Whether the loop stops before its next step. With several synchronous
 * ranks a rank's own signal counts only once the ranks agreed on it (the
 * loss allreduce carries it, hp_dp_mean_loss): a rank that stopped on its
 * own flag, set between that allreduce and this check, would leave the
 * others inside the next step's collectives while it entered the
 * checkpoint's, and the job would hang (test mpi-train, SIGTERM). */
static int stop_now(const struct hp_trainer *t)
{
	if (t->nranks > 1 && !t->o.async_sgd)
		return t->dp_stop;
	return (t->o.cancel && *t->o.cancel) || t->dp_stop;
}

int hp_trainer_run(struct hp_trainer *t, hp_step_fn fn, void *arg)
{
	struct hp_step_info info;
	int rc = 0, stop = 0;
	double last = 0; /* the last step's loss: 0 when none ran */
	long long saved = -1; /* the step of the last checkpoint this loop wrote */

	while (!stop && t->step < t->total) {
		if (stop_now(t)) {
			rc = HP_ECANCELED;
			break;
		}
		rc = hp_trainer_step(t, &info);
		if (rc < 0)
			return lost_daemon(t, rc, saved);
		last = info.loss;
		rc = 0;
		if (t->o.checkpoint_dir && t->o.checkpoint_every > 0 && t->step % t->o.checkpoint_every == 0 &&
		    t->step < t->total && isfinite(info.loss)) {
			if ((rc = ckpt_write(t)) < 0)
				return lost_daemon(t, rc, saved);
			info.checkpointed = 1;
			saved = t->step;
		}
		if (fn && (rc = fn(arg, &info)) < 0)
			return rc;
		if (rc > 0)
			stop = 1;
		rc = 0;
		if (stop || stop_now(t))
			rc = HP_ECANCELED;
	}
	if (t->o.checkpoint_dir && isfinite(last)) {
		int r = ckpt_write(t);
		if (r < 0)
			return r;
	}
	return rc == HP_ECANCELED ? hp_error(rc, "training stopped at step %lld of %lld", (long long)t->step,
					     (long long)t->total) : rc;
}

int64_t hp_trainer_current_step(const struct hp_trainer *t)
{
	return t->step;
}

int64_t hp_trainer_total_steps(const struct hp_trainer *t)
{
	return t->total;
}

struct hp_session *hp_trainer_session(struct hp_trainer *t)
{
	return t->s;
}

const struct hp_graph *hp_trainer_graph(const struct hp_trainer *t)
{
	return t->g;
}

uint64_t hp_trainer_peak_bytes(const struct hp_trainer *t)
{
	struct hp_run_stats st = { 0 };

	if (t->s)
		hp_session_stats(t->s, &st);
	return st.peak_bytes;
}
