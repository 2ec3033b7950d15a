/* hpdlf-exec --train: options to the trainer, the progress bar, the JSON
 * log, Ctrl-C, the summary.  The training itself is hp_trainer_* (exec/). */
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include <json-c/json.h>

#include "hpdlf/error.h"
#include "hpdlf/exec.h"
#include "hpdlf/train.h"
#include "hpdlf/store.h"
#include "exec/comm.h"
#include "exec/comm_watch.h"
#include "exec/split_weight.h"
#include "exec/train_floor.h"
#include "exec/train_hooks.h"
#include "tools/exec_cli.h"
#include "tools/exec_metrics.h"
#include "tools/exec_report.h"
#include "tools/train_progress.h"
#include "tools/tune_run.h"

/* stepping: a signal waits for the next step boundary (set when training
 * starts, and when the run is already leaving with an error) */
static volatile sig_atomic_t interrupted, stepping, stop_quiet;
static char stop_tail[768] = " before training started\n";

/* SIGINT (Ctrl-C) and SIGTERM (Slurm's scancel, time limit, preemption)
 * stop training at the next step with a checkpoint; the signal is kept for
 * the exit status (128 + N).  Before the first step (planning, which for a
 * large net split for a small budget takes minutes, or --plan) there is no
 * step to stop at and nothing to save: the process ends at once, removing
 * the tier files it created. */
static void on_stop(int sig)
{
	static const char term[] = "hpdlf-exec: terminated", intr[] = "hpdlf-exec: interrupted";

	interrupted = sig;
	if (!stepping) {
		exec_tiers_tidy();
		/* ranks other than 0 are quiet (a launcher ends them all) */
		if (!stop_quiet &&
		    (write(2, sig == SIGTERM ? term : intr, sig == SIGTERM ? sizeof term - 1 : sizeof intr - 1) < 0 ||
		     write(2, stop_tail, strlen(stop_tail)) < 0))
			_exit(128 + sig);
		_exit(128 + sig);
	}
	signal(sig, SIG_DFL); /* a second signal ends the process at once */
}

static int usage(const char *msg, const char *arg)
{
	return exec_usage_error(msg, arg);
}

static int parse_loss(const char *s, struct hp_train_spec *sp)
{
	if (!s || !strcmp(s, "cross-entropy"))
		sp->loss = HP_LOSS_CROSS_ENTROPY;
	else if (!strcmp(s, "mse"))
		sp->loss = HP_LOSS_MSE;
	else if (!strncmp(s, "output:", 7) && s[7]) {
		sp->loss = HP_LOSS_OUTPUT;
		sp->output = s + 7;
	} else
		return usage("--loss: expected cross-entropy, mse or output:NAME, got '%s'", s);
	return 0;
}

static int parse_optimizer(const char *s, struct hp_train_spec *sp)
{
	if (!s || !strcmp(s, "sgd"))
		sp->optimizer = HP_OPT_SGD;
	else if (!strcmp(s, "adam"))
		sp->optimizer = HP_OPT_ADAM;
	else if (!strcmp(s, "adamw"))
		sp->optimizer = HP_OPT_ADAMW;
	else
		return usage("--optimizer: expected sgd, adam or adamw, got '%s'", s);
	return 0;
}

/* --ranks plans a job without launching it; the link flags describe its
 * link (or replace the measurement under a launcher). */
static int check_ranks(const struct cli *c)
{
	int r, n, launched = hp_comm_env(&r, &n);

	if (c->ranks && !c->plan)
		return usage("%s", "--ranks N only plans (with --plan); to train on N ranks start hpdlf-exec under "
			     "mpirun -np N or srun -n N");
	if (c->ranks && launched)
		return usage("%s", "--ranks plans without a launcher; under mpirun or srun the ranks are the launcher's");
	if (c->ranks > 1 && !c->link_GBps)
		return usage("%s", "--ranks needs the link's bandwidth: --link-bandwidth RATE (12.5G for 100 Gb/s)");
	if ((c->link_GBps || c->link_lat_us) && !c->ranks && !launched && !c->pipeline)
		return usage("%s", "--link-bandwidth and --link-latency describe the link of --ranks, --pipeline or of a "
			     "launched job");
	if (c->link_lat_us && !c->link_GBps)
		return usage("%s", "--link-latency needs --link-bandwidth too");
	return 0;
}

/* Every required training option that is missing, in one message. */
static int missing_options(const struct cli *c)
{
	const char *need[4];
	char list[256] = "";
	size_t dl = c->data ? strlen(c->data) : 0;
	int n = 0;

	if (!c->data)
		need[n++] = "--data FILE.npy --labels FILE.npy (or --data FILE.npz)";
	else if (!c->labels && (dl < 4 || strcmp(c->data + dl - 4, ".npz")))
		need[n++] = "--labels FILE.npy (or --data FILE.npz holding x and y)";
	if (!c->batch)
		need[n++] = "--batch N";
	if (!c->steps && !c->epochs)
		need[n++] = "--steps N or --epochs N";
	if (!n)
		return 0;
	for (int i = 0; i < n; i++)
		snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", i == 0 ? "" : i == n - 1 ? " and " : ", ",
			 need[i]);
	return usage("--train needs %s", list);
}

static void warn(const struct cli *c, const char *msg)
{
	if (hp_comm_rank() == 0)
		fprintf(stderr, "hpdlf-exec: warning: %s\n", msg);
	(void)c;
}

/* Options that contradict each other or that the chosen optimizer never
 * reads: accepted (a script may set them for every optimizer), but said
 * once each, so that no one believes they act. */
static void warn_ignored(const struct cli *c, const struct hp_train_spec *sp)
{
	int adam = sp->optimizer != HP_OPT_SGD;

	if (adam && c->momentum_given)
		warn(c, "--momentum is ignored by --optimizer adam/adamw (SGD momentum; Adam has its own moments)");
	if (adam && c->nesterov)
		warn(c, "--nesterov is ignored by --optimizer adam/adamw (it is SGD's)");
	if (!adam && (c->betas_given || c->eps_given))
		warn(c, "--betas and --eps are ignored by --optimizer sgd (they are Adam's)");
	if (c->shuffle_both)
		warn(c, c->shuffle ? "--no-shuffle and --shuffle both given: the last, --shuffle, holds"
				   : "--shuffle and --no-shuffle both given: the last, --no-shuffle, holds");
}

/* Said after the trainer knows the step count and the data set size. */
static void warn_sizes(const struct cli *c, struct hp_trainer *t)
{
	char msg[512];
	enum hp_dtype dt;
	struct hp_shape sh;
	uint64_t off;

	if (c->checkpoint_every && c->checkpoint_every >= hp_trainer_total_steps(t)) {
		snprintf(msg, sizeof msg, "--checkpoint-every %ld is not below the %lld steps: only the final checkpoint "
			 "is written", c->checkpoint_every, (long long)hp_trainer_total_steps(t));
		warn(c, msg);
	}
	if (c->labels && hp_npy_header(c->data, &dt, &sh, &off) == 0 && sh.rank > 0 && c->batch > sh.dims[0]) {
		snprintf(msg, sizeof msg, "--batch %ld is larger than the %lld samples of %s: every step repeats samples",
			 c->batch, (long long)sh.dims[0], c->data);
		warn(c, msg);
	}
}

static int to_opts(struct cli *c, struct hp_trainer_opts *o)
{
	static struct hs_tier_spec tiers[HS_MAX_TIERS];
	int rc;

	if (c->ninputs || c->noutputs || c->output_dir)
		return usage("%s", "--input/--output/--output-dir are for inference; training reads --data/--labels");
	if ((rc = missing_options(c)) != 0)
		return rc;
	if (c->steps && c->epochs)
		return usage("%s", "give --steps or --epochs, not both");
	if ((c->resume || c->checkpoint_every) && !c->checkpoint)
		return usage("%s", "--resume and --checkpoint-every need --checkpoint DIR");
	if ((c->val_labels || c->eval_every) && !c->val_data)
		return usage("%s", "--val-labels and --eval-every need --val-data FILE (or an .npz holding x and y)");
	if ((rc = check_ranks(c)) != 0 || (rc = exec_check_pipeline(c)) != 0)
		return rc;
	if (c->shard == HP_SHARD_PARAMETERS && c->export_onnx)
		return usage("%s", "--export-onnx with --shard parameters: no rank holds the whole weights "
			     "(train with --shard gradients to export)");
	hp_trainer_opts_init(o, sizeof *o);
	if ((rc = parse_loss(c->loss, &o->spec)) || (rc = parse_optimizer(c->optimizer, &o->spec)) ||
	    (rc = exec_async_opts(c, o)))
		return rc;
	if (o->spec.optimizer == HP_OPT_SGD && c->nesterov && (!c->momentum_given || c->momentum <= 0))
		return usage("%s", "--nesterov needs --momentum F > 0 (Nesterov's is a kind of SGD momentum)");
	warn_ignored(c, &o->spec);
	if ((rc = exec_store_tiers(c, tiers, &o->ntiers)) != 0)
		return rc;
	exec_warn_unused(c);
	o->tiers = tiers;
	o->spec.lr = c->lr_given ? c->lr : o->spec.optimizer == HP_OPT_SGD ? 0.01 : 0.001;
	o->spec.momentum = c->momentum_given ? c->momentum : 0;
	o->spec.weight_decay = c->weight_decay_given ? c->weight_decay : -1;
	o->spec.nesterov = c->nesterov;
	if (c->betas_given) {
		o->spec.beta1 = c->beta1;
		o->spec.beta2 = c->beta2;
	}
	if (c->eps_given)
		o->spec.eps = c->eps;
	o->lr_schedule = c->lr_schedule;
	o->warmup_steps = c->warmup_steps > 0 ? c->warmup_steps : 0;
	o->lr_step_size = c->lr_step_size;
	o->lr_gamma = c->lr_gamma;
	if (c->lr_schedule == HP_LR_STEP && c->warmup_steps > 0)
		return usage("%s", "--warmup-steps does not go with --lr-schedule step:N (as PyTorch's StepLR)");
	o->spec.seed = c->seed;
	o->data = c->data;
	o->labels = c->labels;
	o->batch = c->batch;
	o->steps = c->steps;
	o->epochs = c->epochs;
	o->shuffle = c->shuffle == 1;
	o->seed = c->seed;
	o->threads = c->threads;
	o->budget = c->budget;
	o->no_split = c->no_split;
	o->no_recompute = c->no_recompute;
	o->trace_path = c->trace;
	o->checkpoint_dir = c->checkpoint;
	o->checkpoint_every = c->checkpoint_every;
	o->resume = c->resume;
	o->bucket = c->bucket;
	o->plan_ranks = c->ranks;
	o->sync_bn = c->sync_bn;
	o->link_GBps = c->link_GBps;
	o->link_lat_us = c->link_GBps > 0 && !c->link_lat_us ? 2 : c->link_lat_us;
	o->shard = c->shard;
	o->freeze = c->freeze;
	o->nfreeze = c->nfreeze;
	o->cancel = &interrupted;
	o->val_data = c->val_data;
	o->val_labels = c->val_labels;
	return exec_pipe_opts(c, o);
}

/* Test hook: HPDLF_TEST_KILL_IN_CHECKPOINT=N kills the process (SIGKILL)
 * half way through writing its Nth checkpoint, as a crash would. */
static long kill_nth, term_nth;
static int ckpt_count;
static uint64_t ckpt_last_done = UINT64_MAX;

/* Test hooks: HPDLF_TEST_KILL_IN_CHECKPOINT=N SIGKILLs the process half
 * way through its N-th checkpoint (a torn one must not count);
 * HPDLF_TEST_TERM_IN_CHECKPOINT=N sends it SIGTERM there once (Slurm's
 * scancel while a checkpoint is written: it completes, the run stops). */
static void ckpt_progress(void *arg, uint64_t done, uint64_t total)
{
	(void)arg;
	if (done <= ckpt_last_done)
		ckpt_count++; /* a new checkpoint started */
	ckpt_last_done = done;
	if (ckpt_count == kill_nth && 2 * done >= total)
		raise(SIGKILL);
	if (ckpt_count == term_nth && 2 * done >= total) {
		term_nth = 0;
		kill(getpid(), SIGTERM);
	}
}

/* Bench hook: HPDLF_TEST_EXPORT_EVERY=N:DIR has rank 0 export its
 * weights to DIR/step<S>.onnx after every N-th step (bench/bench_asgd.py
 * evaluates them); the log's time_s leaves the time spent on it out. */
static long export_every;
static const char *export_dir;

static void export_hook_init(void)
{
	const char *e = getenv("HPDLF_TEST_EXPORT_EVERY");
	char *colon;

	if (!e || hp_comm_rank() != 0)
		return;
	export_every = strtol(e, &colon, 10);
	export_dir = *colon == ':' && colon[1] ? colon + 1 : NULL;
	if (!export_dir)
		export_every = 0;
}

static double mono_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int export_hook(struct hp_trainer *t, int64_t step, double *t0)
{
	char path[4096];
	double a = mono_s();
	int rc;

	if (export_every <= 0 || (step + 1) % export_every)
		return 0;
	snprintf(path, sizeof path, "%s/step%lld.onnx", export_dir, (long long)step + 1);
	rc = hp_trainer_export_onnx(t, path, 0);
	*t0 += mono_s() - a;
	return rc;
}

struct run_state {
	const struct cli *c;
	struct hp_trainer *t;
	FILE *log;
	struct exec_sampler sampler;
	struct hp_progress bar;
	double *ms;
	int64_t nms, first;
	double last_loss;
	int log_failed;
	int nan_said;
	int has_val;               /* the last validation (--val-data), for the summary */
	double val_loss, val_accuracy;
};

/* JSON has no NaN nor infinity: a non-finite figure is null. */
static json_object *jnum(double v)
{
	return isfinite(v) ? json_object_new_double(v) : NULL;
}

/* The step as the shared report sees it (tools/exec_report.h). */
static void sample_step(struct run_state *r, const struct hp_step_info *in, struct exec_sample *x)
{
	memset(x, 0, sizeof *x);
	x->mode = "train";
	x->step = in->step;
	x->total = in->steps;
	x->ms = in->ms;
	x->flops = in->flops;
	x->loss = in->loss;
	x->lr = hp_trainer_lr(r->t, in->step);
	x->has_loss = 1;
	x->epoch = in->epoch;
	x->samples = in->samples;
	x->checkpointed = in->checkpointed;
	x->budget = r->c->budget;
	exec_sample_fill(&r->sampler, hp_trainer_session(r->t), x);
}

/* --val-data: every --eval-every steps and after the last one (every rank
 * evaluates: the figures are the ranks' together). */
static int validate(struct run_state *r, const struct hp_step_info *in, struct exec_sample *x)
{
	int64_t done = in->step + 1;
	int rc;

	if (!r->c->val_data || (done != in->steps && (!r->c->eval_every || done % r->c->eval_every)))
		return 0;
	if ((rc = hp_trainer_evaluate(r->t, &x->val_loss, &x->val_accuracy)) < 0)
		return rc;
	x->has_val = r->has_val = 1;
	r->val_loss = x->val_loss;
	r->val_accuracy = x->val_accuracy;
	return 0;
}

static int on_step(void *arg, const struct hp_step_info *in)
{
	struct run_state *r = arg;
	struct exec_sample x;
	int rc;

	sample_step(r, in, &x);
	if ((rc = validate(r, in, &x)) < 0)
		return rc;
	x.asgd_json = exec_async_step(r->t);
	if (r->log && exec_log_write(r->log, &x) < 0)
		r->log_failed = 1;
	exec_metrics_update(&x);
	r->ms[r->nms++] = in->ms;
	r->last_loss = in->loss;
	hp_progress_step(&r->bar, &x);
	int erc = export_hook(r->t, in->step, &r->sampler.t0);
	if (erc < 0)
		return erc;
	if (isfinite(in->loss))
		return 0;
	const char *what = isnan(in->loss) ? "NaN" : in->loss > 0 ? "+infinity" : "-infinity";
	if (!r->c->go_on_nan)
		return hp_error(-EDOM, "step %lld: the loss is %s: training diverged (lower --lr; --no-stop-on-nan "
				"trains on)", (long long)in->step, what);
	if (!r->nan_said++)
		fprintf(stderr, "hpdlf-exec: warning: step %lld: the loss is %s (null in --log-json); training on\n",
			(long long)in->step, what);
	return 0;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

static int write_stats(const struct cli *c, struct hp_trainer *t, const struct run_state *r, double med)
{
	json_object *o = json_object_new_object();
	int rc;

	json_object_object_add(o, "schema", json_object_new_int(EXEC_LOG_SCHEMA));
	json_object_object_add(o, "mode", json_object_new_string("train"));
	json_object_object_add(o, "model", json_object_new_string(c->model));
	json_object_object_add(o, "steps", json_object_new_int64(r->nms));
	json_object_object_add(o, "last_step", json_object_new_int64(hp_trainer_current_step(t)));
	json_object_object_add(o, "final_loss", jnum(r->last_loss));
	json_object_object_add(o, "ms_median", json_object_new_double(med));
	json_object_object_add(o, "tensor_peak_bytes", json_object_new_int64((int64_t)hp_trainer_peak_bytes(t)));
	json_object_object_add(o, "peak_rss_bytes", json_object_new_int64((int64_t)exec_peak_rss()));
	exec_blas_json(o);
	json_object_object_add(o, "budget_bytes", json_object_new_int64((int64_t)c->budget));
	json_object_object_add(o, "partitioned_weights", json_object_new_int(hp_trainer_split_count(t)));
	struct cli quiet = *c; /* the summary printed them already */
	quiet.quiet = 1;
	exec_tier_summary(hp_trainer_session(t), &quiet, o);
	rc = json_object_to_file_ext(c->stats_json, o, JSON_C_TO_STRING_PRETTY);
	json_object_put(o);
	return rc < 0 ? hp_error(-EIO, "%s: cannot write statistics", c->stats_json) : 0;
}

/* How many parameters trained (--freeze keeps some fixed; exporters'
 * Constant-node weights count like initializers). */
static void print_params(const struct hp_trainer *t)
{
	struct hp_param_counts pc = { .size = sizeof pc };

	if (hp_trainer_param_counts(t, &pc) < 0)
		return;
	fprintf(stderr, "hpdlf-exec:   parameters: %lld trained (%lld tensors), %lld frozen (%lld tensors)",
		(long long)pc.trained, (long long)pc.trained_tensors, (long long)pc.frozen, (long long)pc.frozen_tensors);
	if (pc.from_constants)
		fprintf(stderr, "; %lld tensors were Constant nodes", (long long)pc.from_constants);
	fputc('\n', stderr);
}

static int summarize(const struct cli *c, struct hp_trainer *t, struct run_state *r)
{
	char peak[32];
	double med = 0;

	if (r->nms) {
		qsort(r->ms, (size_t)r->nms, sizeof *r->ms, cmp_double);
		med = r->ms[r->nms / 2];
	}
	if (!c->quiet && r->nms)
		fprintf(stderr, "hpdlf-exec: %s: trained steps %lld..%lld, final loss %.6g, median step %.3f ms, "
				"tensor memory %s\n", c->model, (long long)r->first, (long long)hp_trainer_current_step(t) - 1,
			r->last_loss, med, hp_format_size(hp_trainer_peak_bytes(t), peak, sizeof peak));
	if (!c->quiet && r->nms)
		print_params(t);
	if (!c->quiet && r->has_val && isnan(r->val_accuracy))
		fprintf(stderr, "hpdlf-exec:   validation after step %lld: loss %.6g\n",
			(long long)hp_trainer_current_step(t) - 1, r->val_loss);
	else if (!c->quiet && r->has_val)
		fprintf(stderr, "hpdlf-exec:   validation after step %lld: loss %.6g, accuracy %.2f%%\n",
			(long long)hp_trainer_current_step(t) - 1, r->val_loss, 100 * r->val_accuracy);
	if (!c->quiet && r->nms) {
		char rss[32];
		double total = 0;
		for (int64_t i = 0; i < r->nms; i++)
			total += r->ms[i];
		fprintf(stderr, "hpdlf-exec:   %lld steps in %.1f s (%.2f samples/s), peak RSS %s",
			(long long)r->nms, total / 1e3, (double)(r->nms * c->batch) / (total / 1e3),
			hp_format_size(exec_peak_rss(), rss, sizeof rss));
		exec_print_rss_budget(stderr, exec_peak_rss(), (uint64_t)c->budget);
		fputc('\n', stderr);
		exec_tier_summary(hp_trainer_session(t), c, NULL);
	}
	return c->stats_json ? write_stats(c, t, r, med) : 0;
}

static int train(struct cli *c, struct hp_trainer *t)
{
	struct run_state r = { .c = c, .t = t };
	int rc;

	r.first = hp_trainer_current_step(t);
	r.ms = calloc((size_t)(hp_trainer_total_steps(t) - r.first) + 1, sizeof *r.ms);
	if (!r.ms)
		return hp_error(-ENOMEM, "out of memory");
	if (c->log_json && !(r.log = fopen(c->log_json, c->resume && r.first ? "a" : "w"))) {
		free(r.ms);
		return hp_error(-errno, "%s: %s", c->log_json, strerror(errno));
	}
	if (!c->quiet && c->resume)
		fprintf(stderr, "hpdlf-exec: %s at step %lld\n", r.first ? "resuming" : "no checkpoint yet, starting",
			(long long)r.first);
	if (c->listen_metrics && hp_comm_rank() == 0 &&
	    (rc = exec_metrics_start(c->listen_metrics, c->model, "train", 0)) < 0) {
		if (r.log)
			fclose(r.log);
		free(r.ms);
		return rc;
	}
	hp_progress_init(&r.bar, !c->quiet && isatty(2), "step");
	exec_sampler_init(&r.sampler, hp_trainer_session(t));
	stepping = 1; /* a signal now stops at the next step */
	rc = hp_trainer_run(t, on_step, &r);
	hp_progress_end(&r.bar);
	exec_metrics_stop();
	if (r.log && (fclose(r.log) != 0 || r.log_failed) && rc == 0)
		rc = hp_error(-EIO, "%s: cannot write the log", c->log_json);
	if (rc == 0 || rc == HP_ECANCELED) {
		int r2 = summarize(c, t, &r);
		if (r2 < 0 && rc == 0)
			rc = r2;
	}
	free(r.ms);
	return rc;
}

static const char *exec_floor_model;

/* exec_floor_probe for --plan: a trainer created at budget b (its
 * session planned), and the node that sets its smallest budget. */
static int floor_probe(uint64_t b, char *node, size_t n, void *arg)
{
	struct hp_trainer_opts o1 = *(const struct hp_trainer_opts *)arg;
	struct hp_trainer *t = NULL;
	struct hp_plan_summary q;
	struct hp_exec_opts o;
	const char *model = exec_floor_model;
	int rc;

	o1.budget = b;
	o1.resume = 0;
	if (hp_trainer_sure_refused(model, &o1) == 1)
		return 0; /* its forward graph shows it: no trainer built */
	hp_trainer_within_quiet++;
	rc = hp_trainer_create(model, &o1, &t);
	hp_trainer_within_quiet--;
	hp_exec_opts_init(&o, sizeof o);
	/* planned at the budget it runs within (b, or a smaller figure) */
	o.threads = o1.threads, o.budget = rc == 0 ? hp_trainer_run_budget(t) : b, o.seed = o1.seed, o.ntiers = o1.ntiers, o.tiers = o1.tiers;
	o.no_split = 1;
	if (rc == 0 && (rc = hp_plan_summarize(hp_trainer_graph(t), &o, &q)) == 0)
		snprintf(node, n, "%s", q.min_node ? q.min_node : "");
	hp_trainer_destroy(t);
	return rc == 0;
}

/* --plan's trainers (graph-only: no session, store or open tier) are not
 * destroyed: the process exits once the plan is printed, and freeing
 * their graphs, some 400,000 small allocations over a 180 MB heap, took
 * 7-10% of the 10,001-node MLP's --plan (as clang's -disable-free, the
 * exit gives the pages back at once).  Kept here, reachable to the end. */
static struct hp_trainer *plan_kept[2];

/* --plan / --plan-dot: one training step (forward, backward, optimizer)
 * planned as the trainer's session would run it. */
static int plan_step(const struct cli *c, const struct hp_trainer_opts *to, struct hp_trainer *t)
{
	struct hp_exec_opts o;

	hp_exec_opts_init(&o, sizeof o);
	o.threads = to->threads;
	o.budget = to->budget;
	o.seed = to->seed;
	o.ntiers = to->ntiers;
	o.tiers = to->tiers;
	o.recalibrate = c->recalibrate;
	if (c->plan && c->pipeline)
		return exec_plan_pipe(c, to, t);
	if (c->plan && hp_comm_size() == 1) { /* the smallest budget: the step compiled for 1 byte (one rank: creating a trainer agrees with the others) */
		struct hp_trainer_opts o1 = *to;
		struct hp_trainer *t1 = NULL;
		int rc;
		o1.budget = 1;
		o1.resume = 0;
		/* --budget 1 (no resume): t is that trainer already (the same
		 * options build the same step); not built twice */
		int same = to->budget == 1 && !to->resume;
		rc = same ? 0 : hp_trainer_create(c->model, &o1, &t1);
		exec_floor_probe = floor_probe, exec_floor_arg = (void *)to, exec_floor_model = c->model;
		/* its trainer planned the 1-byte step with o's threads and tiers */
		exec_gmin_named = rc == 0 ? hp_trainer_refused_needs(same ? t : t1) : 0;
		if (rc == 0)
			rc = exec_plan_only(hp_trainer_graph(t), &o, c, " (one training step)",
					    hp_trainer_graph(same ? t : t1));
		exec_floor_probe = NULL;
		exec_gmin_named = 0;
		if (rc == 0 && c->plan && !c->plan_dot)
			plan_kept[1] = t1, t1 = NULL; /* see plan_kept */
		hp_trainer_destroy(t1);
		return rc == 0 && c->plan ? exec_plan_comm(t, &o, c->bucket != 0) : rc;
	}
	int rc = exec_plan_only(hp_trainer_graph(t), &o, c, " (one training step)", NULL);

	return rc == 0 && c->plan ? exec_plan_comm(t, &o, c->bucket != 0) : rc;
}

/* A refusal names the smallest budget of the step cut for the budget
 * given, and a step cut for a larger one can need less: at --budget 1 a
 * mobile net's refusal named 6.3 MiB where --plan, searching below its
 * figure, names 1.6 MiB, which runs (one byte less is refused naming it).
 * The refusal searches below its figure the same way and names what it
 * finds, so that every refusal and --plan agree.  One rank only: creating
 * a trainer agrees with the others. */
static int refusal_floor(const struct cli *c, const struct hp_trainer_opts *to, int rc)
{
	static char msg[4096], node[1024];
	const char *tag = "; the smallest budget that works is ";
	uint64_t named = hp_exec_min_budget(), s;
	char *at;

	if (rc != HP_EBUDGET_OP || hp_comm_size() != 1 || c->pipeline || !named || !to->budget || named <= to->budget)
		return rc;
	snprintf(msg, sizeof msg, "%s", hp_errmsg());
	if (!(at = strstr(msg, tag)))
		return rc;
	exec_floor_probe = floor_probe, exec_floor_arg = (void *)to, exec_floor_model = c->model;
	s = exec_floor_search(named, node, sizeof node);
	exec_floor_probe = NULL;
	if (s >= named || s <= to->budget) /* nothing lower fits, or the budget given lies above a fit */
		return hp_error(rc, "%s", msg);
	/* the node the message began with is that of the step cut for the
	 * budget given (ResNet-18 below its 13631488: a Concat needing 18 MB
	 * of the build with weights in blocks); name the floor's instead */
	char *nd = node[0] ? strstr(msg, "node '") : NULL;
	if (nd) {
		snprintf(nd, sizeof msg - (size_t)(nd - msg), "node '%s' needs more at once than --budget %llu leaves it; "
			 "the smallest budget that works is %llu bytes (--budget %lluK)", node,
			 (unsigned long long)to->budget, (unsigned long long)s, (unsigned long long)((s + 1023) / 1024));
		return hp_error(rc, "%s", msg);
	}
	snprintf(at + strlen(tag), sizeof msg - (size_t)(at + strlen(tag) - msg), "%llu bytes (--budget %lluK)",
		 (unsigned long long)s, (unsigned long long)((s + 1023) / 1024));
	return hp_error(rc, "%s", msg);
}

/* Rank 0 alone talks and writes files: the others train the same
 * weights (checkpoints are the trainer's: every rank writes its part). */
static void quiet_rank(struct cli *c)
{
	if (hp_comm_rank() == 0)
		return;
	c->quiet = 1;
	/* --sync async: every rank trains its own state: each logs it */
	c->log_json = c->sync_async && c->log_json ? exec_async_log_name(c->log_json, hp_comm_rank()) : NULL;
	c->stats_json = NULL;
	/* a pipeline's export is collective: rank 0 writes, reading the
	 * other stages' tensors from them (exec/pipe_export.c) */
	if (!c->pipeline)
		c->export_onnx = NULL;
	/* a pipeline's ranks run different stages: each traces its own
	 * (FILE.rank, exec/pipe_build.c) */
	if (!c->pipeline)
		c->trace = NULL;
}

/* A usage error is the same on every rank (each checks the same flags and
 * the ranks' agreement): rank 0 says it, all leave MPI cleanly.  Anything
 * else may be this rank's alone: it says so and exits, and the launcher
 * ends the others. */
static int train_fail(int rc)
{
	stepping = 1; /* leaving with rc: a launcher's SIGTERM to this rank must not turn it into 143 */
	if (rc == HP_EUSAGE) {
		if (hp_comm_rank() == 0)
			fprintf(stderr, "hpdlf-exec: %s\n", hp_errmsg());
		hp_comm_finalize();
		return 2;
	}
	fprintf(stderr, "hpdlf-exec: %s\n", hp_errmsg()[0] ? hp_errmsg() : hp_strerror(rc));
	hp_comm_watch_fail(); /* the other ranks stop now, naming this one */
	return hp_exit_status(rc);
}

/* The watchdog found a peer gone (or a collective past its deadline):
 * one line, then it ends the process (exec/comm_watch.h). */
static void on_lost(int self, int lost, int nranks, const char *why)
{
	if (lost >= 0)
		fprintf(stderr, "hpdlf-exec: rank %d of %d: rank %d of %d was lost (%s); stopping\n", self, nranks, lost,
			nranks, why);
	else
		fprintf(stderr, "hpdlf-exec: rank %d of %d: %s; stopping\n", self, nranks, why);
}

int exec_train_main(struct cli *c)
{
	struct hp_trainer_opts o;
	struct hp_trainer *t = NULL;
	const char *k = getenv("HPDLF_TEST_KILL_IN_CHECKPOINT"), *kt = getenv("HPDLF_TEST_TERM_IN_CHECKPOINT");
	int rc;

	if ((rc = tune_share_from_env()) != 0) /* a trial of --tune: the runner's open data files */
		return rc;
	hp_comm_on_lost(on_lost);
	if ((rc = hp_comm_init()) < 0)
		return train_fail(rc);
	export_hook_init();
	quiet_rank(c);
	stop_quiet = hp_comm_rank() != 0;
	if (c->checkpoint) /* what a signal before the first step says (on_stop) */
		snprintf(stop_tail, sizeof stop_tail, " before training started; nothing was written (run again, with "
			 "--resume-if-present to continue from the last checkpoint in %s if it holds one)\n", c->checkpoint);
	/* before to_opts: it opens the daemons' tier (libfabric's 0.2 s load) */
	signal(SIGINT, on_stop);
	signal(SIGTERM, on_stop);
	signal(SIGUSR1, on_stop); /* what batch systems send ahead of a time limit */
	rc = to_opts(c, &o);
	if (rc) {
		stepping = 1; /* as train_fail */
		return rc;
	}
	o.graph_only = c->plan || c->plan_dot;
	if (c->plan && c->pipeline)
		o.budget = 0; /* the whole step is not planned: each stage is, under the budget (exec_plan_pipe.c) */
	if (!o.graph_only)
		exec_tiers_opened(c->quiet);
	if (getenv("HPDLF_TEST_TERM_IN_PLAN")) /* check_signals.py: a signal while the step is planned */
		raise(SIGTERM);
	rc = hp_trainer_create(c->model, &o, &t);
	if (rc == 0) /* runs within a smaller figure where the budget given left its step less room */
		o.budget = hp_trainer_run_budget(t);
	if (rc == 0 && !o.graph_only)
		warn_sizes(c, t);
	kill_nth = k ? atol(k) : 0;
	term_nth = kt ? atol(kt) : 0;
	if (rc == 0 && (kill_nth > 0 || term_nth > 0))
		hp_trainer_set_checkpoint_progress(t, ckpt_progress, NULL);
	if (rc == 0 && o.graph_only && hp_comm_rank() == 0) /* every rank plans the same step */
		rc = plan_step(c, &o, t);
	else if (rc == 0 && o.graph_only)
		rc = 0;
	else if (rc == 0)
		rc = train(c, t);
	if (rc == HP_EBUDGET_OP) /* at creation, or --plan's summary */
		rc = refusal_floor(c, &o, rc);
	if (rc == 0 && c->export_onnx)
		rc = hp_trainer_export_onnx(t, c->export_onnx, getenv("HPDLF_EXPORT_EXTERNAL_DATA") &&
							       !strcmp(getenv("HPDLF_EXPORT_EXTERNAL_DATA"), "1"));
	if (rc == 0 && c->plan && !c->plan_dot && o.graph_only && !c->export_onnx)
		plan_kept[0] = t, t = NULL; /* see plan_kept */
	hp_trainer_destroy(t);
	if (rc == HP_ECANCELED) {
		/* under a launcher every rank stopped after the same step */
		if (hp_comm_rank() == 0)
			fprintf(stderr, "hpdlf-exec: %s: %s%s\n", interrupted == SIGTERM ? "terminated" : "interrupted",
				hp_errmsg(), c->checkpoint ? " (checkpoint written; continue with --resume)" : "");
		if (hp_comm_leave()) { /* --sync async with a peer lost (comm_watch.h) */
			exec_tiers_tidy();
			fflush(NULL);
			_exit(128 + (interrupted ? (int)interrupted : SIGINT));
		}
		return 128 + (interrupted ? (int)interrupted : SIGINT);
	}
	if (rc < 0)
		return train_fail(rc);
	if (hp_comm_leave()) { /* --sync async with a peer lost: no MPI_Finalize (comm_watch.h) */
		exec_tiers_tidy();
		fflush(NULL);
		_exit(0);
	}
	return 0;
}
