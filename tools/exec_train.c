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
#include "exec/split_weight.h"
#include "exec/train_hooks.h"
#include "tools/exec_cli.h"
#include "tools/train_progress.h"

static volatile sig_atomic_t interrupted;

/* SIGINT (Ctrl-C) and SIGTERM (Slurm's scancel, time limit, preemption)
 * stop training at the next step with a checkpoint; the signal is kept for
 * the exit status (128 + N). */
static void on_stop(int sig)
{
	interrupted = sig;
	signal(sig, SIG_DFL); /* a second signal ends the process at once */
}

static int usage(const char *msg, const char *arg)
{
	fprintf(stderr, "hpdlf-exec: ");
	fprintf(stderr, msg, arg);
	fprintf(stderr, "\n(see hpdlf-exec --help)\n");
	return 2;
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

static int to_opts(struct cli *c, struct hp_trainer_opts *o)
{
	static struct hs_tier_spec tiers[HS_MAX_TIERS];
	int rc;

	if (c->ninputs || c->noutputs || c->output_dir)
		return usage("%s", "--input/--output/--output-dir are for inference; training reads --data/--labels");
	if (!c->data)
		return usage("%s", "--train needs --data FILE.npy --labels FILE.npy (or --data FILE.npz)");
	if (!c->batch)
		return usage("%s", "--train needs --batch N");
	if (!c->steps && !c->epochs)
		return usage("%s", "--train needs --steps N or --epochs N");
	if (c->steps && c->epochs)
		return usage("%s", "give --steps or --epochs, not both");
	if ((c->resume || c->checkpoint_every) && !c->checkpoint)
		return usage("%s", "--resume and --checkpoint-every need --checkpoint DIR");
	hp_trainer_opts_init(o, sizeof *o);
	if ((rc = parse_loss(c->loss, &o->spec)) || (rc = parse_optimizer(c->optimizer, &o->spec)))
		return rc;
	if ((rc = exec_store_tiers(c, tiers, &o->ntiers)) != 0)
		return rc;
	o->tiers = tiers;
	o->spec.lr = c->lr_given ? c->lr : o->spec.optimizer == HP_OPT_SGD ? 0.01 : 0.001;
	o->spec.momentum = c->momentum_given ? c->momentum : 0;
	o->spec.weight_decay = c->weight_decay_given ? c->weight_decay : -1;
	o->spec.nesterov = c->nesterov;
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
	o->trace_path = c->trace;
	o->checkpoint_dir = c->checkpoint;
	o->checkpoint_every = c->checkpoint_every;
	o->resume = c->resume;
	o->bucket = c->bucket;
	o->freeze = c->freeze;
	o->nfreeze = c->nfreeze;
	o->cancel = &interrupted;
	return 0;
}

/* Test hook: HPDLF_TEST_KILL_IN_CHECKPOINT=N kills the process (SIGKILL)
 * half way through writing its Nth checkpoint, as a crash would. */
static long kill_nth;
static int ckpt_count;
static uint64_t ckpt_last_done = UINT64_MAX;

static void ckpt_progress(void *arg, uint64_t done, uint64_t total)
{
	(void)arg;
	if (done <= ckpt_last_done)
		ckpt_count++; /* a new checkpoint started */
	ckpt_last_done = done;
	if (ckpt_count == kill_nth && 2 * done >= total)
		raise(SIGKILL);
}

struct run_state {
	const struct cli *c;
	FILE *log;
	struct hp_progress bar;
	double *ms;
	int64_t nms, first;
	double last_loss;
	int log_failed;
	int nan_said;
};

/* JSON has no NaN nor infinity: a non-finite figure is null. */
static json_object *jnum(double v)
{
	return isfinite(v) ? json_object_new_double(v) : NULL;
}

static void log_step(struct run_state *r, const struct hp_step_info *in)
{
	json_object *o = json_object_new_object(), *tiers = json_object_new_object();

	json_object_object_add(o, "step", json_object_new_int64(in->step));
	json_object_object_add(o, "loss", jnum(in->loss));
	json_object_object_add(o, "ms", json_object_new_double(in->ms));
	json_object_object_add(o, "epoch", json_object_new_int64(in->epoch));
	json_object_object_add(o, "samples_per_s", json_object_new_double(in->samples / in->ms * 1e3));
	json_object_object_add(o, "gflops", json_object_new_double(in->flops / in->ms / 1e6));
	for (int i = 0; i < in->ntiers; i++) {
		json_object *t = json_object_new_object();
		json_object_object_add(t, "bytes_read", json_object_new_int64((int64_t)in->tier_read[i]));
		json_object_object_add(t, "bytes_written", json_object_new_int64((int64_t)in->tier_written[i]));
		json_object_object_add(tiers, in->tier_name[i], t);
	}
	json_object_object_add(o, "tiers", tiers);
	if (in->checkpointed)
		json_object_object_add(o, "checkpoint", json_object_new_boolean(1));
	if (fprintf(r->log, "%s\n", json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN)) < 0 || fflush(r->log))
		r->log_failed = 1;
	json_object_put(o);
}

static int on_step(void *arg, const struct hp_step_info *in)
{
	struct run_state *r = arg;

	if (r->log)
		log_step(r, in);
	r->ms[r->nms++] = in->ms;
	r->last_loss = in->loss;
	hp_progress_step(&r->bar, in);
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
	struct rusage ru;
	int rc;

	getrusage(RUSAGE_SELF, &ru);
	json_object_object_add(o, "model", json_object_new_string(c->model));
	json_object_object_add(o, "steps", json_object_new_int64(r->nms));
	json_object_object_add(o, "last_step", json_object_new_int64(hp_trainer_current_step(t)));
	json_object_object_add(o, "final_loss", jnum(r->last_loss));
	json_object_object_add(o, "ms_median", json_object_new_double(med));
	json_object_object_add(o, "tensor_peak_bytes", json_object_new_int64((int64_t)hp_trainer_peak_bytes(t)));
	json_object_object_add(o, "peak_rss_bytes", json_object_new_int64((int64_t)ru.ru_maxrss * 1024));
	json_object_object_add(o, "budget_bytes", json_object_new_int64((int64_t)c->budget));
	json_object_object_add(o, "partitioned_weights", json_object_new_int(hp_trainer_split_count(t)));
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
	if (!c->quiet && r->nms) {
		struct rusage ru;
		char rss[32], b[32];
		double total = 0;
		for (int64_t i = 0; i < r->nms; i++)
			total += r->ms[i];
		getrusage(RUSAGE_SELF, &ru);
		fprintf(stderr, "hpdlf-exec:   %lld steps in %.1f s (%.2f samples/s), peak RSS %s",
			(long long)r->nms, total / 1e3, (double)(r->nms * c->batch) / (total / 1e3),
			hp_format_size((uint64_t)ru.ru_maxrss * 1024, rss, sizeof rss));
		if (c->budget)
			fprintf(stderr, " vs budget %s (%.0f%%)", hp_format_size(c->budget, b, sizeof b),
				100.0 * (double)ru.ru_maxrss * 1024 / (double)c->budget);
		fputc('\n', stderr);
		exec_tier_summary(hp_trainer_session(t), c, NULL);
	}
	return c->stats_json ? write_stats(c, t, r, med) : 0;
}

static int train(struct cli *c, struct hp_trainer *t)
{
	struct run_state r = { .c = c };
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
	hp_progress_init(&r.bar, !c->quiet && isatty(2), hp_trainer_total_steps(t), r.first);
	rc = hp_trainer_run(t, on_step, &r);
	hp_progress_end(&r.bar);
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
	return exec_plan_only(hp_trainer_graph(t), &o, c, " (one training step)");
}

/* Rank 0 alone talks and writes files: the others train the same
 * weights (checkpoints are the trainer's rank-0 business too). */
static void quiet_rank(struct cli *c)
{
	if (hp_comm_rank() == 0)
		return;
	c->quiet = 1;
	c->log_json = NULL;
	c->stats_json = NULL;
	c->export_onnx = NULL;
	c->trace = NULL;
}

/* A usage error is the same on every rank (each checks the same flags and
 * the ranks' agreement): rank 0 says it, all leave MPI cleanly.  Anything
 * else may be this rank's alone: it says so and exits, and the launcher
 * ends the others. */
static int train_fail(int rc)
{
	if (rc == HP_EUSAGE) {
		if (hp_comm_rank() == 0)
			fprintf(stderr, "hpdlf-exec: %s\n", hp_errmsg());
		hp_comm_finalize();
		return 2;
	}
	fprintf(stderr, "hpdlf-exec: %s\n", hp_errmsg()[0] ? hp_errmsg() : hp_strerror(rc));
	return hp_exit_status(rc);
}

int exec_train_main(struct cli *c)
{
	struct hp_trainer_opts o;
	struct hp_trainer *t = NULL;
	const char *k = getenv("HPDLF_TEST_KILL_IN_CHECKPOINT");
	int rc;

	if ((rc = hp_comm_init()) < 0)
		return train_fail(rc);
	quiet_rank(c);
	rc = to_opts(c, &o);
	if (rc)
		return rc;
	signal(SIGINT, on_stop);
	signal(SIGTERM, on_stop);
	signal(SIGUSR1, on_stop); /* what batch systems send ahead of a time limit */
	o.graph_only = c->plan || c->plan_dot;
	rc = hp_trainer_create(c->model, &o, &t);
	if (rc == 0 && k && (kill_nth = atol(k)) > 0)
		hp_trainer_set_checkpoint_progress(t, ckpt_progress, NULL);
	if (rc == 0 && o.graph_only && hp_comm_rank() == 0) /* every rank plans the same step */
		rc = plan_step(c, &o, t);
	else if (rc == 0 && o.graph_only)
		rc = 0;
	else if (rc == 0)
		rc = train(c, t);
	if (rc == 0 && c->export_onnx)
		rc = hp_trainer_export_onnx(t, c->export_onnx, getenv("HPDLF_EXPORT_EXTERNAL_DATA") &&
							       !strcmp(getenv("HPDLF_EXPORT_EXTERNAL_DATA"), "1"));
	hp_trainer_destroy(t);
	if (rc == HP_ECANCELED) {
		/* under a launcher every rank stopped after the same step */
		if (hp_comm_rank() == 0)
			fprintf(stderr, "hpdlf-exec: %s: %s%s\n", interrupted == SIGTERM ? "terminated" : "interrupted",
				hp_errmsg(), c->checkpoint ? " (checkpoint written; continue with --resume)" : "");
		hp_comm_finalize();
		return 128 + (interrupted ? (int)interrupted : SIGINT);
	}
	if (rc < 0)
		return train_fail(rc);
	hp_comm_finalize();
	return 0;
}
