/* hpdlf-exec: run (and, with --train, train) an ONNX model under a memory budget. */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <json-c/json.h>

#include "hpdlf/error.h"
#include "hpdlf/exec.h"
#include "hpdlf/graph.h"
#include "hpdlf/store.h"
#include "hpdlf/tensor.h"
#include "exec/fuse.h"
#include "exec/budget.h"
#include "exec/plan.h"
#include "exec/remat.h"
#include "exec/split_weight.h"
#include "kernels/blas.h"
#include "onnx/declared.h"
#include "tools/exec_cli.h"
#include "tools/exec_metrics.h"
#include "tools/cli_suggest.h"
#include "tools/exec_report.h"
#include "tools/train_progress.h"

/* usage_text: generated from docs/hpdlf-exec.md, the one source of --help and the man page. */
#include "hpdlf-exec.help.h"
#include "version.h"

static int fail(int rc)
{
	fprintf(stderr, "hpdlf-exec: %s\n", hp_errmsg()[0] ? hp_errmsg() : hp_strerror(rc));
	return hp_exit_status(rc);
}

/* One write for the whole message: under mpirun the ranks' lines and the
 * launcher's banner share a pipe, and a line written in pieces came out
 * as "hpdlf-exec: -----..." with the banner in its middle. */
int exec_usage_error(const char *fmt, const char *arg)
{
	char msg[2048];

	snprintf(msg, sizeof msg, fmt, arg);
	fprintf(stderr, "hpdlf-exec: %s\n(see hpdlf-exec --help)\n", msg);
	return 2;
}

static int add_named(struct named *list, int *n, const char *arg, const char *flag)
{
	const char *eq = strchr(arg, '=');

	if (!eq || eq == arg || !eq[1])
		return exec_usage_error("expected NAME=VALUE, got '%s'", arg);
	if (*n == MAX_NAMED)
		return exec_usage_error("too many %s options", flag);
	list[*n].name = strndup(arg, (size_t)(eq - arg));
	list[*n].value = strdup(eq + 1);
	(*n)++;
	return 0;
}

static int parse_int(const char *arg, const char *flag, long lo, long *out)
{
	char *end;

	errno = 0;
	*out = strtol(arg, &end, 10);
	if (end == arg || *end || errno || *out < lo) {
		fprintf(stderr, "hpdlf-exec: %s wants an integer >= %ld, got '%s'\n", flag, lo, arg);
		return 2;
	}
	return 0;
}

enum { OPT_BUDGET = 256, OPT_SHAPE, OPT_INPUT, OPT_OUTPUT, OPT_OUTDIR, OPT_ITER, OPT_WARMUP, OPT_DURATION, OPT_PROFILE, OPT_VERSION, OPT_SEED, OPT_THREADS,
       OPT_LOG, OPT_STATS, OPT_TRACE, OPT_PLAN, OPT_TRAIN, OPT_QUIET, OPT_HELP, OPT_PLAN_DOT,
       OPT_DATA, OPT_LABELS, OPT_LOSS, OPT_OPTIM, OPT_LR, OPT_MOMENTUM, OPT_NESTEROV, OPT_WD, OPT_BETAS, OPT_EPS, OPT_LR_SCHED, OPT_WARMUP_STEPS, OPT_BATCH,
       OPT_STEPS, OPT_EPOCHS, OPT_SHUFFLE, OPT_NO_SHUFFLE, OPT_CKPT, OPT_CKPT_EVERY, OPT_RESUME, OPT_RESUME_IF, OPT_STOP_NAN,
       OPT_GO_NAN,
       OPT_EXPORT, OPT_TIER, OPT_STORE, OPT_HOSTFILE, OPT_TOKEN, OPT_WORKERS, OPT_REPLICAS, OPT_NO_SPLIT,
       OPT_RECALIBRATE, OPT_BUCKET, OPT_SYNC_BN, OPT_SHARD, OPT_RANKS, OPT_LINK_BW, OPT_LINK_LAT,
       OPT_NO_FUSE, OPT_LISTEN_METRICS, OPT_INFO, OPT_FREEZE,
       OPT_VAL_DATA, OPT_VAL_LABELS, OPT_EVAL_EVERY, OPT_TUNE, OPT_TUNE_LOG, OPT_PARALLEL,
       OPT_SYNC, OPT_EXCHANGE_EVERY, OPT_EXCHANGE_PEERS, OPT_BLEND, OPT_PARZEN, OPT_ASYNC_DET, OPT_DEBUG_DELAY,
       OPT_PIPELINE, OPT_MICRO_BATCHES, OPT_SCHEDULE, OPT_PIPELINE_CUTS,
       OPT_NO_RECOMPUTE };

static const struct option long_opts[] = {
	{ "budget", required_argument, 0, OPT_BUDGET },	  { "shape", required_argument, 0, OPT_SHAPE },
	{ "input", required_argument, 0, OPT_INPUT },	  { "output", required_argument, 0, OPT_OUTPUT },
	{ "output-dir", required_argument, 0, OPT_OUTDIR }, { "iterations", required_argument, 0, OPT_ITER },
	{ "warmup", required_argument, 0, OPT_WARMUP },	  { "duration", required_argument, 0, OPT_DURATION },
	{ "profile", no_argument, 0, OPT_PROFILE },	  { "version", no_argument, 0, OPT_VERSION },
	{ "seed", required_argument, 0, OPT_SEED },	  { "threads", required_argument, 0, OPT_THREADS },
	{ "log-json", required_argument, 0, OPT_LOG },	  { "stats-json", required_argument, 0, OPT_STATS },
	{ "trace", required_argument, 0, OPT_TRACE },	  { "plan", no_argument, 0, OPT_PLAN },
	{ "train", no_argument, 0, OPT_TRAIN },		  { "quiet", no_argument, 0, OPT_QUIET },
	{ "help", no_argument, 0, OPT_HELP },		  { "plan-dot", required_argument, 0, OPT_PLAN_DOT },
	{ "data", required_argument, 0, OPT_DATA },	  { "labels", required_argument, 0, OPT_LABELS },
	{ "loss", required_argument, 0, OPT_LOSS },	  { "optimizer", required_argument, 0, OPT_OPTIM },
	{ "lr", required_argument, 0, OPT_LR },		  { "momentum", required_argument, 0, OPT_MOMENTUM },
	{ "nesterov", no_argument, 0, OPT_NESTEROV },	  { "weight-decay", required_argument, 0, OPT_WD },
	{ "betas", required_argument, 0, OPT_BETAS },	  { "eps", required_argument, 0, OPT_EPS },
	{ "lr-schedule", required_argument, 0, OPT_LR_SCHED }, { "warmup-steps", required_argument, 0, OPT_WARMUP_STEPS },
	{ "batch", required_argument, 0, OPT_BATCH },	  { "steps", required_argument, 0, OPT_STEPS },
	{ "epochs", required_argument, 0, OPT_EPOCHS },	  { "shuffle", no_argument, 0, OPT_SHUFFLE },
	{ "no-shuffle", no_argument, 0, OPT_NO_SHUFFLE }, { "checkpoint", required_argument, 0, OPT_CKPT },
	{ "checkpoint-every", required_argument, 0, OPT_CKPT_EVERY },
	{ "resume", no_argument, 0, OPT_RESUME },	  { "resume-if-present", no_argument, 0, OPT_RESUME_IF },
	{ "export-onnx", required_argument, 0, OPT_EXPORT },
	{ "stop-on-nan", no_argument, 0, OPT_STOP_NAN },  { "no-stop-on-nan", no_argument, 0, OPT_GO_NAN },
	{ "tier", required_argument, 0, OPT_TIER },	  { "store", required_argument, 0, OPT_STORE },
	{ "hostfile", required_argument, 0, OPT_HOSTFILE }, { "token-file", required_argument, 0, OPT_TOKEN },
	{ "replicas", required_argument, 0, OPT_REPLICAS },
	{ "workers", required_argument, 0, OPT_WORKERS },
	{ "no-split", no_argument, 0, OPT_NO_SPLIT },
	{ "recalibrate", no_argument, 0, OPT_RECALIBRATE },
	{ "bucket", required_argument, 0, OPT_BUCKET },	  { "sync-bn", no_argument, 0, OPT_SYNC_BN },
	{ "shard", required_argument, 0, OPT_SHARD },
	{ "ranks", required_argument, 0, OPT_RANKS },	  { "link-bandwidth", required_argument, 0, OPT_LINK_BW },
	{ "link-latency", required_argument, 0, OPT_LINK_LAT },
	{ "no-fuse", no_argument, 0, OPT_NO_FUSE },
	{ "listen-metrics", required_argument, 0, OPT_LISTEN_METRICS },
	{ "info", no_argument, 0, OPT_INFO },
	{ "freeze", required_argument, 0, OPT_FREEZE },
	{ "val-data", required_argument, 0, OPT_VAL_DATA }, { "val-labels", required_argument, 0, OPT_VAL_LABELS },
	{ "eval-every", required_argument, 0, OPT_EVAL_EVERY }, { "tune", required_argument, 0, OPT_TUNE },
	{ "tune-log", required_argument, 0, OPT_TUNE_LOG }, { "parallel", required_argument, 0, OPT_PARALLEL },
	{ "sync", required_argument, 0, OPT_SYNC },
	{ "exchange-every", required_argument, 0, OPT_EXCHANGE_EVERY },
	{ "exchange-peers", required_argument, 0, OPT_EXCHANGE_PEERS },
	{ "blend", required_argument, 0, OPT_BLEND },
	{ "parzen", no_argument, 0, OPT_PARZEN },
	{ "async-deterministic", no_argument, 0, OPT_ASYNC_DET },
	{ "debug-delay-ms", required_argument, 0, OPT_DEBUG_DELAY },
	{ "pipeline", required_argument, 0, OPT_PIPELINE }, { "micro-batches", required_argument, 0, OPT_MICRO_BATCHES },
	{ "schedule", required_argument, 0, OPT_SCHEDULE },
	{ "pipeline-cuts", required_argument, 0, OPT_PIPELINE_CUTS },
	{ "no-recompute", no_argument, 0, OPT_NO_RECOMPUTE },
	{ 0, 0, 0, 0 },
};

static int parse_double(const char *arg, const char *flag, double *out, int *given)
{
	char *end;

	errno = 0;
	*out = strtod(arg, &end);
	if (end == arg || *end || errno || !isfinite(*out) || *out < 0) {
		fprintf(stderr, "hpdlf-exec: %s wants a non-negative number, got '%s'\n", flag, arg);
		return 2;
	}
	*given = 1;
	return 0;
}

/* --betas B1,B2: Adam's decay rates, each in [0, 1). */
static int parse_betas(const char *arg, struct cli *c)
{
	char *end;

	int two = 0;

	errno = 0;
	c->beta1 = strtod(arg, &end);
	if (end != arg && *end == ',' && !errno) {
		const char *b = end + 1;
		c->beta2 = strtod(b, &end);
		two = end != b;
	}
	if (!two || *end || errno || !(c->beta1 >= 0 && c->beta1 < 1) || !(c->beta2 >= 0 && c->beta2 < 1)) {
		fprintf(stderr, "hpdlf-exec: --betas wants two numbers in [0, 1) as B1,B2 (e.g. 0.9,0.999), got '%s'\n", arg);
		return 2;
	}
	c->betas_given = 1;
	return 0;
}

/* --lr-schedule constant | linear | cosine | step:N[,G] */
static int parse_lr_schedule(const char *arg, struct cli *c)
{
	static const char *const kinds[] = { "constant", "linear", "cosine" };
	char *end;

	c->lr_schedule_given = 1;
	for (int k = 0; k < 3; k++)
		if (!strcmp(arg, kinds[k])) {
			c->lr_schedule = k;
			return 0;
		}
	if (!strncmp(arg, "step:", 5)) {
		errno = 0;
		c->lr_step_size = strtol(arg + 5, &end, 10);
		c->lr_gamma = 0.1;
		if (end != arg + 5 && *end == ',') {
			const char *g = end + 1;
			c->lr_gamma = strtod(g, &end);
			if (end == g)
				end = (char *)"?";
		}
		if (!*end && !errno && c->lr_step_size >= 1 && c->lr_gamma >= 0 && isfinite(c->lr_gamma)) {
			c->lr_schedule = HP_LR_STEP;
			return 0;
		}
	}
	fprintf(stderr, "hpdlf-exec: --lr-schedule wants constant, linear, cosine or step:N[,G] (N >= 1 steps, "
		"G >= 0), got '%s'\n", arg);
	return 2;
}

static int parse_shard(const char *arg, struct cli *c)
{
	static const char *const modes[] = { "none", "optimizer", "gradients", "parameters" };

	c->shard_given = 1;
	for (int m = 0; m < 4; m++)
		if (!strcmp(arg, modes[m])) {
			c->shard = m;
			return 0;
		}
	return exec_usage_error("--shard: expected none, optimizer, gradients or parameters, got '%s'", arg);
}

/* --blend W in [0, 1], or mean (m/(m+1) for m received states). */
static int parse_blend(const char *arg, struct cli *c)
{
	char *end;

	c->blend_given = 1;
	if (!strcmp(arg, "mean")) {
		c->blend = -1;
		return 0;
	}
	errno = 0;
	c->blend = strtod(arg, &end);
	if (end == arg || *end || errno || !(c->blend >= 0 && c->blend <= 1))
		return exec_usage_error("--blend: expected a weight in [0, 1] or 'mean', got '%s'", arg);
	return 0;
}

/* The asynchronous SGD options (--sync async and its knobs). */
static int parse_async(int o, struct cli *c)
{
	switch (o) {
	case OPT_SYNC:
		c->sync_given = 1;
		if (strcmp(optarg, "sync") && strcmp(optarg, "async"))
			return exec_usage_error("--sync: expected sync or async, got '%s'", optarg);
		c->sync_async = !strcmp(optarg, "async");
		return 0;
	case OPT_EXCHANGE_EVERY: return parse_int(optarg, "--exchange-every", 1, &c->exchange_every);
	case OPT_EXCHANGE_PEERS: return parse_int(optarg, "--exchange-peers", 1, &c->exchange_peers);
	case OPT_BLEND: return parse_blend(optarg, c);
	case OPT_PARZEN: c->parzen = 1; return 0;
	case OPT_ASYNC_DET: c->async_det = 1; return 0;
	default: c->debug_delay = optarg; return exec_parse_delay(optarg, -1, NULL);
	}
}

/* --pipeline P (training: 2 or more stages, exec_pipe.c; --plan: 1 too),
 * --micro-batches M (>= 1), --schedule. */
static int parse_pipeline(int o, struct cli *c)
{
	long v = 0;
	int rc = 0;

	if (o == OPT_PIPELINE_CUTS) {
		c->pipeline_cuts = optarg;
		return 0;
	}
	if (o == OPT_SCHEDULE) {
		c->schedule_given = 1;
		if (!strcmp(optarg, "1f1b") || !strcmp(optarg, "gpipe")) {
			c->schedule = optarg[0] == 'g';
			return 0;
		}
		return exec_usage_error("--schedule: expected 1f1b or gpipe, got '%s'", optarg);
	}
	rc = parse_int(optarg, o == OPT_PIPELINE ? "--pipeline" : "--micro-batches", 1, &v);
	if (rc == 0 && v > 1 << 20)
		return exec_usage_error("--pipeline/--micro-batches: at most 1048576, got '%s'", optarg);
	if (o == OPT_PIPELINE)
		c->pipeline = (int)v;
	else
		c->micro_batches = (int)v;
	return rc;
}

/* Options of training and of the store tiers. */
static int parse_more(int o, struct cli *c)
{
	if (o >= OPT_SYNC && o <= OPT_DEBUG_DELAY)
		return parse_async(o, c);
	switch (o) {
	case OPT_PLAN_DOT: c->plan_dot = optarg; return 0;
	case OPT_NO_SPLIT: c->no_split = 1; return 0;
	case OPT_NO_RECOMPUTE: c->no_recompute = 1; return 0;
	case OPT_RECALIBRATE: c->recalibrate = 1; return 0;
	case OPT_DATA: c->data = optarg; return 0;
	case OPT_LABELS: c->labels = optarg; return 0;
	case OPT_LOSS: c->loss = optarg; return 0;
	case OPT_OPTIM: c->optimizer = optarg; return 0;
	case OPT_LR: return parse_double(optarg, "--lr", &c->lr, &c->lr_given);
	case OPT_MOMENTUM: return parse_double(optarg, "--momentum", &c->momentum, &c->momentum_given);
	case OPT_WD: return parse_double(optarg, "--weight-decay", &c->weight_decay, &c->weight_decay_given);
	case OPT_NESTEROV: c->nesterov = 1; return 0;
	case OPT_BETAS: return parse_betas(optarg, c);
	case OPT_LR_SCHED: return parse_lr_schedule(optarg, c);
	case OPT_WARMUP_STEPS: {
		char *end;
		errno = 0;
		c->warmup_steps = strtol(optarg, &end, 10);
		if (end != optarg && !*end && !errno && c->warmup_steps >= 0)
			return 0;
		fprintf(stderr, "hpdlf-exec: --warmup-steps wants an integer >= 0, got '%s'\n", optarg);
		return 2;
	}
	case OPT_EPS:
		if (parse_double(optarg, "--eps", &c->eps, &c->eps_given))
			return 2;
		if (c->eps > 0)
			return 0;
		fprintf(stderr, "hpdlf-exec: --eps wants a positive number, got '%s'\n", optarg);
		return 2;
	case OPT_BATCH: return parse_int(optarg, "--batch", 1, &c->batch);
	case OPT_STEPS: return parse_int(optarg, "--steps", 1, &c->steps);
	case OPT_EPOCHS: return parse_int(optarg, "--epochs", 1, &c->epochs);
	case OPT_SHUFFLE: c->shuffle_both |= c->shuffle == 0; c->shuffle = 1; return 0;
	case OPT_NO_SHUFFLE: c->shuffle_both |= c->shuffle == 1; c->shuffle = 0; return 0;
	case OPT_CKPT: c->checkpoint = optarg; return 0;
	case OPT_CKPT_EVERY: return parse_int(optarg, "--checkpoint-every", 1, &c->checkpoint_every);
	case OPT_RESUME: c->resume = 1; return 0;
	case OPT_RESUME_IF: c->resume = 2; return 0;
	case OPT_STOP_NAN: c->go_on_nan = 0; return 0;
	case OPT_GO_NAN: c->go_on_nan = 1; return 0;
	case OPT_EXPORT: c->export_onnx = optarg; return 0;
	case OPT_BUCKET:
		if (hp_parse_size(optarg, &c->bucket) < 0 || !c->bucket)
			return exec_usage_error("--bucket: expected a size such as 4M, got '%s'", optarg);
		return 0;
	case OPT_SYNC_BN: c->sync_bn = 1; return 0;
	case OPT_SHARD:
		return parse_shard(optarg, c);
	case OPT_RANKS: {
		long v;
		int rc = parse_int(optarg, "--ranks", 1, &v);
		if (rc == 0 && v > 1 << 20)
			return exec_usage_error("--ranks: at most 1048576, got '%s'", optarg);
		c->ranks = (int)v;
		return rc;
	}
	case OPT_LINK_BW: return exec_parse_link_bandwidth(optarg, &c->link_GBps);
	case OPT_LINK_LAT: return exec_parse_link_latency(optarg, &c->link_lat_us);
	case OPT_TIER:
		if (c->ntiers == (int)(sizeof c->tiers / sizeof c->tiers[0]))
			return exec_usage_error("%s", "too many --tier options");
		c->tiers[c->ntiers++] = optarg;
		return 0;
	case OPT_STORE: c->store = optarg; return 0;
	case OPT_LISTEN_METRICS: c->listen_metrics = optarg; return 0;
	case OPT_INFO: c->info = 1; return 0;
	case OPT_FREEZE:
		if (c->nfreeze == (int)(sizeof c->freeze / sizeof c->freeze[0]))
			return exec_usage_error("%s", "too many --freeze options");
		if (!*optarg)
			return exec_usage_error("%s", "--freeze: expected a pattern of parameter names such as 'conv1.*'");
		c->freeze[c->nfreeze++] = optarg;
		return 0;
	case OPT_VAL_DATA: c->val_data = optarg; return 0;
	case OPT_VAL_LABELS: c->val_labels = optarg; return 0;
	case OPT_EVAL_EVERY: return parse_int(optarg, "--eval-every", 1, &c->eval_every);
	case OPT_TUNE: c->tune = optarg; return 0;
	case OPT_TUNE_LOG: c->tune_log = optarg; return 0;
	case OPT_PARALLEL: return parse_int(optarg, "--parallel", 1, &c->parallel);
	case OPT_PIPELINE:
	case OPT_MICRO_BATCHES:
	case OPT_SCHEDULE:
	case OPT_PIPELINE_CUTS:
		return parse_pipeline(o, c);
	case OPT_HOSTFILE: c->hostfile = optarg; return 0;
	case OPT_TOKEN: c->token_file = optarg; return 0;
	case OPT_REPLICAS: {
		long v;
		int rc = parse_int(optarg, "--replicas", 1, &v);
		if (rc == 0 && v > 2)
			return exec_usage_error("--replicas: 1 or 2, got '%s'", optarg);
		c->replicas = (int)v;
		return rc;
	}
	case OPT_WORKERS: {
		long v;
		int rc = parse_int(optarg, "--workers", 1, &v);
		c->workers = (int)v;
		return rc;
	}
	default: return exec_usage_error("%s", "unknown option");
	}
}

struct flag_use {
	int on;
	const char *flag;
};

/* "--a, --b" of the flags given, into list; the count of them. */
static int given(const struct flag_use *f, size_t nf, char *list, size_t len)
{
	size_t n = 0;
	int k = 0;

	list[0] = 0;
	for (size_t i = 0; i < nf; i++)
		if (f[i].on && n < len) {
			n += (size_t)snprintf(list + n, len - n, "%s%s", k ? ", " : "", f[i].flag);
			k++;
		}
	return k;
}

/* Options of one mode given in the other are mistakes, never ignored:
 * all of them named in one line, exit 2. */
static int check_mode(const struct cli *c)
{
	const struct flag_use train_only[] = {
		{ c->data != NULL, "--data" }, { c->labels != NULL, "--labels" }, { c->loss != NULL, "--loss" },
		{ c->optimizer != NULL, "--optimizer" }, { c->lr_given, "--lr" }, { c->momentum_given, "--momentum" },
		{ c->weight_decay_given, "--weight-decay" }, { c->nesterov, "--nesterov" }, { c->batch != 0, "--batch" },
		{ c->betas_given, "--betas" }, { c->eps_given, "--eps" },
		{ c->lr_schedule_given, "--lr-schedule" }, { c->warmup_steps >= 0, "--warmup-steps" },
		{ c->steps != 0, "--steps" }, { c->epochs != 0, "--epochs" }, { c->shuffle >= 0, "--shuffle/--no-shuffle" },
		{ c->checkpoint != NULL, "--checkpoint" }, { c->checkpoint_every != 0, "--checkpoint-every" },
		{ c->resume != 0, "--resume" }, { c->export_onnx != NULL, "--export-onnx" },
		{ c->bucket != 0, "--bucket" }, { c->ranks != 0, "--ranks" }, { c->link_GBps != 0, "--link-bandwidth" },
		{ c->link_lat_us != 0, "--link-latency" }, { c->sync_bn, "--sync-bn" }, { c->shard_given, "--shard" }, { c->nfreeze > 0, "--freeze" },
		{ c->val_data != NULL, "--val-data" }, { c->val_labels != NULL, "--val-labels" },
		{ c->eval_every != 0, "--eval-every" }, { c->tune != NULL, "--tune" }, { c->tune_log != NULL, "--tune-log" },
		{ c->parallel != 0, "--parallel" },
		{ c->sync_given, "--sync" }, { c->exchange_every != 0, "--exchange-every" },
		{ c->exchange_peers != 0, "--exchange-peers" }, { c->blend_given, "--blend" }, { c->parzen, "--parzen" },
		{ c->async_det, "--async-deterministic" }, { c->debug_delay != NULL, "--debug-delay-ms" },
		{ c->pipeline != 0, "--pipeline" }, { c->micro_batches != 0, "--micro-batches" },
		{ c->schedule_given, "--schedule" }, { c->pipeline_cuts != NULL, "--pipeline-cuts" },
		{ c->no_recompute, "--no-recompute" },
	}, infer_only[] = {
		{ c->ninputs > 0, "--input" }, { c->noutputs > 0, "--output" }, { c->output_dir != NULL, "--output-dir" },
		{ c->iterations != 1, "--iterations" }, { c->warmup != 0, "--warmup" }, { c->duration != 0, "--duration" },
		{ c->profile, "--profile" }, { c->no_fuse, "--no-fuse" },
	};
	char list[256];
	int k;

	if (!c->train && (k = given(train_only, sizeof train_only / sizeof train_only[0], list, sizeof list))) {
		fprintf(stderr, "hpdlf-exec: %s only %s with --train (add it, or leave %s out)\n", list,
			k > 1 ? "make sense" : "makes sense", k > 1 ? "them" : "it");
		return 2;
	}
	if (c->train && (k = given(infer_only, sizeof infer_only / sizeof infer_only[0], list, sizeof list))) {
		fprintf(stderr, "hpdlf-exec: %s %s inference, not training (training takes --data, --steps or --epochs; "
			"--trace for kernel times)\n", list, k > 1 ? "are for" : "is for");
		return 2;
	}
	return 0;
}

/* Options that would do nothing as given: accepted (a script may pass
 * them to every run), said once each.  In core (no --budget) no tensor
 * leaves DRAM, so tiers, daemons and splitting are never used.  Said
 * after the tiers opened (exec_store_tiers), so that an error there (a
 * loose --token-file) stays the one line the user sees. */
void exec_warn_unused(const struct cli *c)
{
	const char *tiers = c->ntiers ? "--tier" : c->store ? "--store" : c->hostfile ? "--hostfile" : NULL;

	const char *rank = getenv("OMPI_COMM_WORLD_RANK") ? getenv("OMPI_COMM_WORLD_RANK") : getenv("PMIX_RANK");

	if (rank && strcmp(rank, "0"))
		return; /* said by rank 0 of a launched job only */
	if (c->budget || c->plan || c->plan_dot || (c->train && (c->tune || c->pipeline)))
		tiers = NULL; /* out of core, or planning/launching runs that choose for themselves */
	if (tiers)
		fprintf(stderr, "hpdlf-exec: warning: %s is not used without --budget (in core no tensor leaves "
			"DRAM)\n", tiers);
	if (c->no_split && !c->budget)
		fprintf(stderr, "hpdlf-exec: warning: --no-split does nothing without --budget (in core nothing is "
			"split)\n");
	if (c->replicas > 1 && !c->store && !c->hostfile && !getenv("HPDLF_STORE") && !getenv("SLURM_JOB_NODELIST"))
		fprintf(stderr, "hpdlf-exec: warning: --replicas is for daemons' copies: no --store, --hostfile or "
			"HPDLF_STORE given\n");
	if (c->train)
		return;
	if (c->profile && c->quiet && !c->stats_json)
		fprintf(stderr, "hpdlf-exec: warning: --profile with --quiet and no --stats-json: the profile is shown "
			"nowhere\n");
}

/* One line for an option getopt refused: unknown (with the nearest known
 * name when one is close) or missing its argument (tools/cli_suggest.c). */
static int bad_option(const char *arg, int missing)
{
	return cli_bad_option("hpdlf-exec", arg, missing, long_opts);
}

static int parse_args(int argc, char **argv, struct cli *c)
{
	long v;
	int o, rc;

	c->iterations = 1;
	c->seed = 1;
	c->blend = -1;
	c->shuffle = -1;
	c->warmup_steps = -1;
	opterr = 0; /* bad_option says it once, with a suggestion */
	while ((o = getopt_long(argc, argv, ":h", long_opts, NULL)) != -1) {
		rc = 0;
		switch (o) {
		case OPT_BUDGET:
			if (hp_parse_size(optarg, &c->budget) < 0)
				return exec_usage_error("--budget: %s", hp_errmsg());
			if (!c->budget)
				return exec_usage_error("--budget: %s is no memory at all (leave --budget out to run in core)",
						   optarg);
			break;
		case OPT_SHAPE: rc = add_named(c->shapes, &c->nshapes, optarg, "--shape"); break;
		case OPT_INPUT: rc = add_named(c->inputs, &c->ninputs, optarg, "--input"); break;
		case OPT_OUTPUT: rc = add_named(c->outputs, &c->noutputs, optarg, "--output"); break;
		case OPT_OUTDIR: c->output_dir = optarg; break;
		case OPT_ITER: rc = parse_int(optarg, "--iterations", 1, &v); c->iterations = (int)v; break;
		case OPT_WARMUP: rc = parse_int(optarg, "--warmup", 0, &v); c->warmup = (int)v; break;
		case OPT_PROFILE: c->profile = 1; break;
		case OPT_DURATION: {
			char *end;
			errno = 0;
			c->duration = strtod(optarg, &end);
			if (errno || end == optarg || *end || !(c->duration > 0) || c->duration > 31536000)
				return exec_usage_error("--duration: expected seconds in (0, 31536000], got '%s'", optarg);
			break;
		}
		case OPT_SEED: rc = parse_int(optarg, "--seed", 0, &v); c->seed = (uint64_t)v; c->seed_given = 1; break;
		case OPT_THREADS: rc = parse_int(optarg, "--threads", 1, &v); c->threads = (int)v; break;
		case OPT_LOG: c->log_json = optarg; break;
		case OPT_STATS: c->stats_json = optarg; break;
		case OPT_TRACE: c->trace = optarg; break;
		case OPT_PLAN: c->plan = 1; break;
		case OPT_TRAIN: c->train = 1; break;
		case OPT_QUIET: c->quiet = 1; break;
		case OPT_NO_FUSE: c->no_fuse = 1; break;
		case 'h':
		case OPT_HELP: fputs(usage_text, stdout); exit(0);
		case OPT_VERSION: printf("hpdlf-exec %s (%s)\n", HPDLF_VERSION, HPDLF_REVISION); exit(0);
		case '?': return bad_option(argv[optind - 1], 0);
		case ':': return bad_option(argv[optind - 1], 1);
		default: rc = parse_more(o, c); break;
		}
		if (rc)
			return rc;
	}
	if (optind != argc - 1)
		return exec_usage_error("%s", optind >= argc ? "no model given" : "more than one model given");
	c->model = argv[optind];
	return 0;
}

/* Small integer inputs are shape arguments (Reshape's shape, Expand's...)
 * or indices; scalars are bounds (Range, Clip).  Given as files, they are
 * bound as compile-time constants so that the operators they steer fold.
 * Level 1 (a retry when an operator needs a constant input) also binds
 * any input of at most 64 elements (Resize's scales, roi). */
static int bind_level;
static int notes_said; /* dynamic-dim notes already printed (a second load stays quiet) */
static int weights_split; /* weights partitioned to fit the budget */

static int env_off(const char *name)
{
	const char *v = getenv(name);

	return v && !strcmp(v, "0");
}

static int bindable(enum hp_dtype dt, const struct hp_shape *s)
{
	int64_t n = hp_shape_numel(s);

	return n <= 1 || ((dt == HP_I64 || dt == HP_I32 || bind_level > 0) && n <= 64);
}

static int bind_input(struct hp_graph *g, const struct named *in)
{
	struct hp_tensor t;
	int rc = hp_npy_read(in->value, &t);

	if (rc == 0)
		rc = hp_graph_bind_input(g, in->name, &t);
	hp_tensor_free(&t);
	return rc < 0 ? hp_error_prefix(rc, "--input %s", in->name) : 0;
}

/* Resolve every input's shape: --shape, then the input file, then 1 for a
 * remaining dynamic dim (said on stderr). */
static int resolve_shapes(struct hp_graph *g, const struct cli *c)
{
	for (int i = 0; i < c->nshapes; i++) {
		struct hp_shape s;
		int rc = hp_shape_parse(c->shapes[i].value, &s);
		if (rc == 0)
			rc = hp_graph_set_input_shape(g, c->shapes[i].name, &s);
		if (rc < 0)
			return hp_error_prefix(rc, "--shape %s", c->shapes[i].name);
	}
	for (int i = 0; i < c->ninputs; i++) {
		enum hp_dtype dt;
		struct hp_shape s;
		uint64_t off;
		int rc = hp_npy_header(c->inputs[i].value, &dt, &s, &off), v = hp_graph_find_value(g, c->inputs[i].name);
		if (rc == 0 && v >= 0 && g->values[v].kind == HP_VALUE_INITIALIZER)
			rc = bind_input(g, &c->inputs[i]); /* a weight listed as an input (IR < 4) */
		else if (rc == 0 && bindable(dt, &s))
			rc = bind_input(g, &c->inputs[i]);
		else if (rc == 0)
			rc = hp_graph_set_input_shape(g, c->inputs[i].name, &s);
		if (rc < 0)
			return rc;
	}
	for (int i = 0; i < g->ninputs; i++) {
		struct hp_value *v = &g->values[g->inputs[i]];
		char name[1024], param[256];
		for (int d = 0; d < v->shape.rank; d++)
			if (v->shape.dims[d] < 0) {
				/* the names are the model's: escaped, so the note is one line */
				hp_escape(v->name, name, sizeof name);
				if (!c->quiet && !notes_said)
					fprintf(stderr, "hpdlf-exec: input '%s' dim %d ('%s') is dynamic; using 1 (set it with --shape %s=...)\n",
						name, d, hp_escape(v->dim_param[d] ? v->dim_param[d] : "?", param, sizeof param), name);
				v->shape.dims[d] = 1;
			}
	}
	return 0;
}

static void fill_random(struct hp_tensor *t, uint64_t seed)
{
	int64_t n = hp_shape_numel(&t->shape);
	uint64_t x = seed * 0x9E3779B97F4A7C15ull + 0x632BE59BD9B4E019ull;

	for (int64_t i = 0; i < n; i++) {
		x ^= x >> 12;
		x ^= x << 25;
		x ^= x >> 27;
		double u = (double)((x * 0x2545F4914F6CDD1Dull) >> 11) / (double)(1ull << 53);
		switch (t->dtype) {
		case HP_F32: ((float *)t->data)[i] = (float)(2 * u - 1); break;
		case HP_F64: ((double *)t->data)[i] = 2 * u - 1; break;
		case HP_BOOL: ((uint8_t *)t->data)[i] = u < 0.5; break;
		case HP_F16: case HP_BF16: ((uint16_t *)t->data)[i] = exec_half_of((float)(2 * u - 1), t->dtype); break;
		default: break; /* integer inputs (indices) stay 0: always in range */
		}
	}
}

static int set_inputs(struct hp_session *s, const struct hp_graph *g, const struct cli *c)
{
	for (int i = 0; i < g->ninputs; i++) {
		const struct hp_value *v = &g->values[g->inputs[i]];
		const char *file = NULL;
		struct hp_tensor t;
		int rc;

		for (int k = 0; k < c->ninputs; k++)
			if (!strcmp(c->inputs[k].name, v->name))
				file = c->inputs[k].value;
		if (file) {
			rc = hp_npy_read(file, &t);
		} else {
			rc = hp_tensor_alloc(&t, v->dtype, &v->shape);
			if (rc == 0)
				fill_random(&t, c->seed + (uint64_t)i);
		}
		if (rc == 0)
			rc = hp_session_set_input(s, v->name, &t);
		hp_tensor_free(&t);
		if (rc < 0)
			return file ? hp_error_prefix(rc, "%s", file) : rc;
	}
	for (int k = 0; k < c->ninputs; k++) {
		int v = hp_graph_find_value(g, c->inputs[k].name);
		if (v < 0 || (g->values[v].kind != HP_VALUE_INPUT && g->values[v].kind != HP_VALUE_CONSTANT &&
			      g->values[v].kind != HP_VALUE_INITIALIZER))
			return hp_error(HP_EUSAGE, "--input %s: the model has no input of that name", c->inputs[k].name);
	}
	return 0;
}

static int write_outputs(struct hp_session *s, const struct hp_graph *g, const struct cli *c)
{
	char path[4096];

	for (int k = 0; k < c->noutputs; k++) {
		int v = hp_graph_find_value(g, c->outputs[k].name);
		if (v < 0 || !g->values[v].is_output)
			return hp_error(HP_EUSAGE, "--output %s: the model has no output of that name", c->outputs[k].name);
	}
	for (int i = 0; i < g->noutputs; i++) {
		const char *name = g->values[g->outputs[i]].name;
		struct hp_tensor t;
		int rc;

		rc = hp_session_get_output(s, name, &t);
		if (rc < 0)
			return rc;
		if (t.dtype == HP_BF16)
			t.dtype = HP_U16; /* .npy has no bfloat16: its bits as uint16 */
		for (int k = 0; k < c->noutputs && rc == 0; k++)
			if (!strcmp(c->outputs[k].name, name))
				rc = hp_npy_write(c->outputs[k].value, &t);
		if (rc == 0 && c->output_dir) {
			mkdir(c->output_dir, 0777);
			snprintf(path, sizeof path, "%s/%s.npy", c->output_dir, name);
			for (char *p = path + strlen(c->output_dir) + 1; *p; p++)
				if (*p == '/')
					*p = '_';
			rc = hp_npy_write(path, &t);
		}
		hp_tensor_free(&t);
		if (rc < 0)
			return rc;
	}
	return 0;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

/* This process image's peak RSS: VmHWM, which execve starts afresh
 * (getrusage's ru_maxrss keeps the parent's peak across fork and execve:
 * a big launcher would stand in for us). */
uint64_t exec_peak_rss(void)
{
	FILE *f = fopen("/proc/self/status", "r");
	char line[256];
	uint64_t kib = 0;
	struct rusage ru;

	while (f && fgets(line, sizeof line, f))
		if (!strncmp(line, "VmHWM:", 6))
			kib = strtoull(line + 6, NULL, 10);
	if (f)
		fclose(f);
	if (kib)
		return kib * 1024;
	getrusage(RUSAGE_SELF, &ru);
	return (uint64_t)ru.ru_maxrss * 1024;
}

/* Iteration `it` as the shared report sees it (tools/exec_report.h):
 * its --log-json line and the progress bar are those of training. */
static void sample_iteration(struct exec_sampler *sp, struct hp_session *s, const struct cli *c, int it, int total,
			     const struct hp_run_stats *st, struct exec_sample *x)
{
	memset(x, 0, sizeof *x);
	x->mode = "infer";
	x->step = it;
	x->total = total;
	x->ms = st->ms;
	x->flops = st->flops;
	x->budget = c->budget;
	exec_sample_fill(sp, s, x);
}

/* Measured iterations to run: --iterations, or more while --duration has
 * not passed (the total then estimated from the pace so far). */
static int total_of(const struct cli *c, int done, double elapsed_ms)
{
	double want = c->duration * 1e3;

	if (!c->duration || elapsed_ms >= want || !done)
		return done > c->iterations ? done : c->iterations;
	double est = done * want / elapsed_ms + 1;
	return est > c->iterations ? (est < 2e9 ? (int)est : 2000000000) : c->iterations;
}

/* Off a terminal a plain line about every 10% (on one, the shared bar of
 * tools/train_progress.c). */
static void progress(const struct cli *c, int done, double elapsed_ms, int tty)
{
	int total = total_of(c, done, elapsed_ms);
	double per = elapsed_ms / done, eta = per * (total - done) / 1e3;

	if (c->quiet || total < 2 || tty)
		return;
	if (done == total || (int64_t)done * 10 / total != (int64_t)(done - 1) * 10 / total)
		fprintf(stderr, "hpdlf-exec: iteration %d/%d, %.2f ms/it, ETA %.0f s\n", done, total, per, eta);
}

static double wall_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* --warmup runs first, unmeasured and unlogged (the first run pages
 * weights in, faults memory, fills caches); then the measured ones into
 * *ms (grown as --duration needs), *n of them. */
/* SIGINT/SIGTERM during inference: stop after the running iteration, close
 * the session (its statistics page goes) and exit 128 + N; a second signal
 * ends the process at once. */
static volatile sig_atomic_t stop_sig;

static void on_stop(int sig)
{
	stop_sig = sig;
	signal(sig, SIG_DFL);
}

static struct hp_node_profile *warm_prof; /* --profile: per-node times after the warm-up */
static int nwarm_prof;

static int run_iterations(struct hp_session *s, const struct cli *c, double **ms, int *n, double *wall)
{
	FILE *log = NULL;
	int rc = 0, tty = isatty(2), cap = c->iterations;
	struct exec_sampler sampler;
	struct hp_progress bar;
	struct exec_sample x;
	double t0;

	*n = 0;
	for (int w = 0; w < c->warmup && rc == 0 && !stop_sig; w++)
		rc = hp_session_run(s);
	if (rc == 0 && c->profile && c->warmup)
		rc = exec_profile_snapshot(s, &warm_prof, &nwarm_prof);
	if (rc < 0)
		return rc;
	if (c->log_json && !(log = fopen(c->log_json, "w")))
		return hp_error(-errno, "%s: %s", c->log_json, strerror(errno));
	if (c->listen_metrics && (rc = exec_metrics_start(c->listen_metrics, c->model, "infer", 0)) < 0) {
		if (log)
			fclose(log);
		return rc;
	}
	t0 = wall_ms();
	hp_progress_init(&bar, tty && !c->quiet, "iter");
	exec_sampler_init(&sampler, s);
	for (int it = 0; !stop_sig && (it < c->iterations || (c->duration && wall_ms() - t0 < c->duration * 1e3));
	     it++) {
		struct hp_run_stats st;

		if (it == cap) {
			double *m = cap < (1 << 30) ? realloc(*ms, (size_t)cap * 2 * sizeof **ms) : NULL;
			if (!m) {
				rc = hp_error(-ENOMEM, "out of memory for %d iteration times", cap * 2);
				break;
			}
			*ms = m;
			cap *= 2;
		}
		rc = hp_session_run(s);
		if (rc < 0)
			break;
		hp_session_stats(s, &st);
		(*ms)[it] = st.ms;
		*n = it + 1;
		sample_iteration(&sampler, s, c, it, total_of(c, it + 1, wall_ms() - t0), &st, &x);
		if (log && exec_log_write(log, &x) < 0 && rc == 0)
			rc = hp_error(-EIO, "%s: cannot write the log", c->log_json);
		exec_metrics_update(&x);
		if (total_of(c, it + 1, wall_ms() - t0) > 1)
			hp_progress_step(&bar, &x);
		progress(c, it + 1, wall_ms() - t0, tty);
		if (rc < 0)
			break;
	}
	hp_progress_end(&bar);
	exec_metrics_stop();
	*wall = wall_ms() - t0;
	if (log && fclose(log) != 0 && rc == 0)
		rc = hp_error(-errno, "%s: %s", c->log_json, strerror(errno));
	return rc;
}

/* Figures of n sorted iteration times: median as before (the upper one of
 * an even count), percentiles by nearest rank. */
struct timing {
	int n;
	double min, max, mean, median, p50, p90, p95, p99;
};

static double nearest_rank(const double *sorted, int n, double p)
{
	int k = (int)ceil(p / 100.0 * n);

	return sorted[k < 1 ? 0 : k > n ? n - 1 : k - 1];
}

static void timing_of(const double *sorted, int n, struct timing *t)
{
	double sum = 0;

	for (int i = 0; i < n; i++)
		sum += sorted[i];
	*t = (struct timing){ .n = n, .min = sorted[0], .max = sorted[n - 1], .mean = sum / n,
			      .median = sorted[n / 2], .p50 = nearest_rank(sorted, n, 50),
			      .p90 = nearest_rank(sorted, n, 90), .p95 = nearest_rank(sorted, n, 95),
			      .p99 = nearest_rank(sorted, n, 99) };
}

static void print_summary(struct hp_session *s, const struct cli *c, const struct hp_run_stats *st,
			  const struct timing *t, double wall)
{
	struct hp_run_info ri = { .size = sizeof ri };
	char peak[32], rss[32], warm[48] = "";

	if (c->warmup)
		snprintf(warm, sizeof warm, " after %d warm-up", c->warmup);
	fprintf(stderr, "hpdlf-exec: %s: %d iteration%s%s in %.3f s (%.2f/s), median %.3f ms, min %.3f ms, %.1f GFLOP/s\n",
		c->model, t->n, t->n > 1 ? "s" : "", warm, wall / 1e3, t->n / (wall / 1e3), t->median, t->min,
		st->flops / t->median / 1e6);
	if (t->n > 1)
		fprintf(stderr, "hpdlf-exec:   ms: mean %.3f, p50 %.3f, p90 %.3f, p95 %.3f, p99 %.3f, max %.3f\n", t->mean,
			t->p50, t->p90, t->p95, t->p99, t->max);
	fprintf(stderr, "hpdlf-exec:   tensor memory %s, peak RSS %s", hp_format_size(st->peak_bytes, peak, sizeof peak),
		hp_format_size(exec_peak_rss(), rss, sizeof rss));
	exec_print_rss_budget(stderr, exec_peak_rss(), (uint64_t)c->budget);
	fputc('\n', stderr);
	if (hp_session_run_info(s, &ri) == 0 && ri.transitions) {
		char l[32], w[32];
		fprintf(stderr, "hpdlf-exec:   task net: %d transitions, %d worker%s + %d I/O queues; last run: "
				"stalled on I/O %.3f ms, loaded %s, written %s\n",
			ri.transitions, ri.workers, ri.workers > 1 ? "s" : "", ri.io_threads, ri.stall_ms,
			hp_format_size(ri.bytes_loaded, l, sizeof l), hp_format_size(ri.bytes_written, w, sizeof w));
	}
}

static int summarize(struct hp_session *s, const struct hp_graph *g, const struct cli *c, double *ms, int n,
		     double wall)
{
	struct hp_run_stats st;
	struct hp_run_info ri = { .size = sizeof ri };
	struct timing t;
	double med;

	hp_session_stats(s, &st);
	qsort(ms, (size_t)n, sizeof *ms, cmp_double);
	timing_of(ms, n, &t);
	med = t.median;
	if (!c->quiet)
		print_summary(s, c, &st, &t, wall);
	if (c->profile && !c->stats_json) {
		int rc = exec_profile_report(s, g, c, warm_prof, nwarm_prof, NULL);
		if (rc < 0)
			return rc;
	}
	if (!c->stats_json) {
		exec_tier_summary(s, c, NULL);
		return 0;
	}
	json_object *o = json_object_new_object();
	json_object_object_add(o, "schema", json_object_new_int(EXEC_LOG_SCHEMA));
	json_object_object_add(o, "mode", json_object_new_string("infer"));
	json_object_object_add(o, "model", json_object_new_string(c->model));
	json_object_object_add(o, "iterations", json_object_new_int(n));
	json_object_object_add(o, "warmup", json_object_new_int(c->warmup));
	json_object_object_add(o, "wall_ms", json_object_new_double(wall));
	json_object_object_add(o, "ms_median", json_object_new_double(med));
	json_object_object_add(o, "ms_min", json_object_new_double(t.min));
	json_object_object_add(o, "ms_mean", json_object_new_double(t.mean));
	json_object_object_add(o, "ms_p50", json_object_new_double(t.p50));
	json_object_object_add(o, "ms_p90", json_object_new_double(t.p90));
	json_object_object_add(o, "ms_p95", json_object_new_double(t.p95));
	json_object_object_add(o, "ms_p99", json_object_new_double(t.p99));
	json_object_object_add(o, "ms_max", json_object_new_double(t.max));
	json_object_object_add(o, "gflops", json_object_new_double(st.flops / med / 1e6));
	json_object_object_add(o, "tensor_peak_bytes", json_object_new_int64((int64_t)st.peak_bytes));
	json_object_object_add(o, "peak_rss_bytes", json_object_new_int64((int64_t)exec_peak_rss()));
	exec_blas_json(o);
	json_object_object_add(o, "budget_bytes", json_object_new_int64((int64_t)c->budget));
	json_object_object_add(o, "partitioned_weights", json_object_new_int(weights_split));
	if (hp_session_run_info(s, &ri) == 0 && ri.transitions) {
		json_object_object_add(o, "stall_ms", json_object_new_double(ri.stall_ms));
		json_object_object_add(o, "transitions", json_object_new_int(ri.transitions));
		json_object_object_add(o, "run_bytes_loaded", json_object_new_int64((int64_t)ri.bytes_loaded));
		json_object_object_add(o, "run_bytes_written", json_object_new_int64((int64_t)ri.bytes_written));
	}
	exec_tier_summary(s, c, o);
	int rc = c->profile ? exec_profile_report(s, g, c, warm_prof, nwarm_prof, o) : 0;
	if (rc < 0) {
		json_object_put(o);
		return rc;
	}
	rc = json_object_to_file_ext(c->stats_json, o, JSON_C_TO_STRING_PRETTY);
	json_object_put(o);
	if (rc < 0)
		return hp_error(-EIO, "%s: cannot write statistics", c->stats_json);
	return 0;
}

static int load_model(const struct cli *c, struct hp_graph **g);

/* The model compiled for a budget of 1 byte, for --plan's smallest budget
 * (what a run below it is refused with, the same whatever budget is given). */
static int load_smallest(const struct cli *c, const struct hp_exec_opts *o, struct hp_graph **g)
{
	struct hp_exec_opts o1 = *o;
	int rc;

	notes_said = 1; /* the model is loaded a second time: its notes were said */
	rc = load_model(c, g);
	o1.budget = 1;
	if (rc == 0 && !c->no_fuse) { /* fused as a budgeted run is (the report was printed) */
		struct hp_fuse_opts fo = { .splittable = 1 };
		struct hp_fuse_report r;
		rc = hp_fuse_inference(*g, &fo, &r);
		if (rc == 0 && (rc = hp_graph_compile(*g, &o1)) == 0)
			rc = hp_fuse_after_split(*g, &o1, &r);
		hp_fuse_report_free(&r);
		return rc;
	}
	return rc < 0 ? rc : hp_graph_compile(*g, &o1);
}

/* Load, fix input shapes and infer; when an operator needs a constant that
 * the user gave as a small input file, once more with those bound. */
static int load_model(const struct cli *c, struct hp_graph **g)
{
	int rc = hp_graph_load(c->model, g);

	if (rc == 0)
		rc = exec_check_names(*g, c);
	if (rc == 0)
		rc = resolve_shapes(*g, c);
	if (rc == 0)
		rc = hp_graph_infer(*g);
	if (rc == 0) /* outputs declared other than computed: an inconsistent model */
		rc = hp_onnx_check_declared(c->model, *g);
	if (rc == HP_ENOTCONST && c->ninputs && !bind_level) {
		hp_graph_free(*g);
		*g = NULL;
		bind_level = 1;
		return load_model(c, g);
	}
	return rc;
}

/* Inference graph optimisation unless --no-fuse, into *r.  Under a budget
 * or a tier the run may split operators, so the fusions that only save
 * time (and give the unfused bits) wait for the split: fuse_split. */
static int fuse(struct hp_graph *g, const struct cli *c, int ntiers, struct hp_fuse_report *r)
{
	struct hp_fuse_opts fo = { .splittable = c->budget != 0 || ntiers > 0 };

	memset(r, 0, sizeof *r);
	return c->no_fuse ? 0 : hp_fuse_inference(g, &fo, r);
}

/* Under a budget or a tier: the graph compiled for the budget (weights in
 * blocks, operators in bands: what hp_session_create would do first),
 * then the epilogues on its nodes as they are now (exec/fuse.h
 * hp_fuse_after_split); the session then takes the graph as it is
 * (o->no_split).  --plan lists the fusions of both passes: how many of
 * each pattern, then each one. */
static int fuse_split(struct hp_graph *g, const struct cli *c, int ntiers, struct hp_exec_opts *o,
		      struct hp_fuse_report *r)
{
	int split = c->budget != 0 || ntiers > 0, rc = 0;

	if (split || c->plan || c->plan_dot)
		rc = hp_graph_compile(g, o);
	if (rc == 0 && split && !c->no_fuse)
		rc = hp_fuse_after_split(g, o, r);
	if (rc == 0 && c->plan && !c->no_fuse) {
		printf("fused %d pattern%s (%d nodes fewer)%s\n", r->nfused, r->nfused == 1 ? "" : "s",
		       r->nodes_removed, r->nfused ? ":" : "");
		for (int i = 0; i < r->npatterns; i++)
			printf("  %s: %d\n", r->patterns[i], r->counts[i]);
		for (int i = 0; i < r->nfused; i++)
			printf("  %s\n", r->lines[i] ? r->lines[i] : "?");
	}
	return rc;
}

int main(int argc, char **argv)
{
	struct cli c = { 0 };
	struct hp_exec_opts o;
	struct hp_session *s = NULL;
	struct hp_graph *g = NULL;
	double *ms = NULL, wall = 0;
	struct hs_tier_spec tiers[HS_MAX_TIERS];
	struct hp_fuse_report fr = { 0 };
	int rc, ntiers = 0;

	hp_blas_quiet_workers(); /* before any thread of ours may call BLAS */
	if ((rc = exec_log_init()) != 0)
		return rc;
	rc = parse_args(argc, argv, &c);
	if (rc)
		return rc;
	if ((rc = check_mode(&c)) != 0)
		return rc;
	if (c.info) {
		exec_warn_unused(&c);
		return exec_info_main(&c);
	}
	c.argc = argc;
	c.argv = argv;
	if (c.train && (c.tune || c.tune_log || c.parallel)) {
		exec_warn_unused(&c);
		return exec_tune_main(&c, long_opts);
	}
	if (c.train)
		return exec_train_main(&c);
	/* from here a signal stops the run cleanly, also while the daemons'
	 * tier opens (libfabric's load takes 0.2 s) and the model loads */
	signal(SIGINT, on_stop);
	signal(SIGTERM, on_stop);
	if ((rc = exec_store_tiers(&c, tiers, &ntiers)) != 0)
		return rc;
	exec_warn_unused(&c);
	rc = load_model(&c, &g);
	if (rc == 0)
		rc = fuse(g, &c, ntiers, &fr);
	if (rc < 0)
		goto out;
	hp_exec_opts_init(&o, sizeof o);
	o.threads = c.threads;
	o.budget = c.budget;
	o.profile = c.profile;
	o.seed = c.seed;
	o.trace_path = c.trace;
	o.workers = c.workers;
	o.ntiers = ntiers;
	o.tiers = tiers;
	o.recalibrate = c.recalibrate;
	o.no_split = c.no_split;
	/* HPDLF_WEIGHT_SPLIT=0: keep weights whole (the planner's own minimum) */
	o.no_weight_split = env_off("HPDLF_WEIGHT_SPLIT");
	/* what hp_session_create does first (--plan sees the graph a run
	 * plans), and the epilogues on the graph compiled */
	rc = fuse_split(g, &c, ntiers, &o, &fr);
	if (c.plan || c.plan_dot) {
		struct hp_graph *gmin = NULL;
		if (rc == 0 && c.plan)
			rc = load_smallest(&c, &o, &gmin);
		o.no_split = 1;
		if (rc == 0)
			rc = exec_plan_only(g, &o, &c, "", gmin);
		hp_graph_free(gmin);
		goto out;
	}
	if (rc < 0)
		goto out;
	o.no_split = 1; /* compiled */
	exec_tiers_opened(c.quiet);
	rc = hp_session_create(g, &o, &s);
	weights_split = hp_split_count(g);
	if (rc == 0)
		rc = set_inputs(s, g, &c);
	if (rc < 0)
		goto out;
	ms = calloc((size_t)c.iterations, sizeof *ms);
	if (!ms) {
		rc = hp_error(-ENOMEM, "out of memory");
		goto out;
	}
	int nms = 0;
	rc = run_iterations(s, &c, &ms, &nms, &wall);
	if (rc == 0 && stop_sig) {
		fprintf(stderr, "hpdlf-exec: %s after %d iteration%s\n", stop_sig == SIGTERM ? "terminated" : "interrupted",
			nms, nms == 1 ? "" : "s");
		goto out;
	}
	if (rc == 0)
		rc = write_outputs(s, g, &c);
	if (rc == 0)
		rc = summarize(s, g, &c, ms, nms, wall);
out:
	hp_fuse_report_free(&fr);
	free(ms);
	free(warm_prof);
	hp_session_destroy(s);
	hp_graph_free(g);
	for (int i = 0; i < c.nshapes; i++)
		free(c.shapes[i].name), free(c.shapes[i].value);
	for (int i = 0; i < c.ninputs; i++)
		free(c.inputs[i].name), free(c.inputs[i].value);
	for (int i = 0; i < c.noutputs; i++)
		free(c.outputs[i].name), free(c.outputs[i].value);
	return rc < 0 ? fail(rc) : stop_sig ? 128 + stop_sig : 0;
}
