/* hpdlf-exec's parsed command line, shared by its inference and training paths. */
#ifndef HPDLF_TOOLS_EXEC_CLI_H
#define HPDLF_TOOLS_EXEC_CLI_H

#include <stdint.h>

#define MAX_NAMED 64

struct named {
	char *name;
	char *value;
};

struct cli {
	const char *model;
	uint64_t budget;
	int threads, iterations;
	int warmup;                  /* --warmup: runs before the measured ones */
	double duration;             /* --duration: measure at least this many seconds */
	int profile;                 /* --profile: kernel time per operator type and node */
	uint64_t seed;
	int seed_given;
	struct named shapes[MAX_NAMED], inputs[MAX_NAMED], outputs[MAX_NAMED];
	int nshapes, ninputs, noutputs;
	const char *output_dir, *log_json, *stats_json, *trace, *plan_dot;
	int plan, quiet, recalibrate;
	/* training (--train) */
	int train;
	const char *data, *labels, *loss, *optimizer;
	double lr, momentum, weight_decay, beta1, beta2, eps;
	int lr_given, momentum_given, weight_decay_given, nesterov, betas_given, eps_given;
	int lr_schedule, lr_schedule_given; /* --lr-schedule: enum hp_lr_schedule */
	long warmup_steps, lr_step_size;    /* --warmup-steps (-1: not given), step:N */
	double lr_gamma;                    /* step:N,G */
	long batch, steps, epochs;
	int shuffle;                 /* -1: default (no shuffle), 0, 1 */
	const char *checkpoint, *export_onnx;
	long checkpoint_every;
	int resume;
	uint64_t bucket;             /* --bucket: gradient bucket bytes over ranks (0: chosen) */
	int ranks;                   /* --ranks: --plan for this many ranks without a launcher */
	double link_GBps, link_lat_us; /* --link-bandwidth, --link-latency (0: measured / default) */
	int sync_bn;                 /* --sync-bn: BatchNorm statistics over the ranks */
	int shard;                   /* --shard: enum hp_shard_mode */
	int shard_given;
	int go_on_nan;               /* --no-stop-on-nan: keep training past a non-finite loss */
	/* stores and tiers */
	const char *tiers[16];
	int ntiers;
	int workers;                 /* --workers: task-net compute workers */
	int no_split;                /* --no-split */
	const char *store, *hostfile, *token_file;
	int replicas;                /* copies of every chunk on distinct daemons (0: 1) */
	int no_fuse;                 /* --no-fuse: inference runs the graph as imported */
	const char *listen_metrics;  /* --listen-metrics HOST:PORT: /metrics over HTTP */
	int info;                    /* --info: print inputs and outputs, exit */
	const char *freeze[64];      /* --freeze PATTERN: parameters kept fixed in training */
	int nfreeze;
	/* validation and hyperparameter search (issue 15) */
	const char *val_data, *val_labels;
	long eval_every;             /* --eval-every: steps between validations (0: after the last only) */
	const char *tune, *tune_log; /* --tune SPEC.json, --tune-log FILE.jsonl */
	long parallel;               /* --parallel K: trials at once (0: 1) */
	int argc;                    /* the command line, for the trials --tune starts */
	char **argv;
	/* --sync async (asynchronous SGD) and its knobs */
	int sync_async, sync_given, async_det, parzen;
	long exchange_every, exchange_peers;
	double blend;                /* < 0: mean (m/(m+1)) */
	int blend_given;
	const char *debug_delay;     /* --debug-delay-ms MS or RANK:MS,... */
	/* pipeline parallelism (issue 14; exec/pipe_cut.h) */
	int pipeline;                /* --pipeline P: stages (0: none given) */
	int micro_batches;           /* --micro-batches M (0: none given, i.e. P) */
	int schedule;                /* --schedule: enum hp_pipe_schedule (1f1b default) */
	int schedule_given;
	const char *pipeline_cuts;   /* --pipeline-cuts NODE,NODE,... */
	int shuffle_both;            /* --shuffle and --no-shuffle both given (the last wins; warned) */
	int no_recompute;            /* --no-recompute (issue 17, exec/remat.h) */
};

struct hp_session;
struct hp_graph;
struct hp_trainer_opts;
/* --pipeline, --micro-batches, --schedule, --pipeline-cuts into o
 * (exec_pipe.c): 0, or 2 after one line saying what is wrong. */
int exec_pipe_opts(const struct cli *c, struct hp_trainer_opts *o);
struct hp_node_profile;
struct json_object;
/* --profile: the session's per-node kernel times so far (*out to free). */
int exec_profile_snapshot(struct hp_session *s, struct hp_node_profile **out, int *n);
/* Print the per-operator-type and top-node tables of the time since
 * `before` (nb entries; NULL: since the start), and add them to stats. */
int exec_profile_report(struct hp_session *s, const struct hp_graph *g, const struct cli *c,
			const struct hp_node_profile *before, int nb, struct json_object *stats);

/* Send the library's warnings and errors (hp_log) to stderr; the threshold
 * from HPDLF_LOG_LEVEL.  0, or an exit status (2) after saying why. */
int exec_log_init(void);

struct hs_tier_spec;
/* --tier KIND=PATH[:SIZE] options as store tier specs (paths point into c);
 * returns 0 or a process exit status (2) after saying why on stderr. */
int exec_parse_tiers(const struct cli *c, struct hs_tier_spec *specs, int *n);
/* "hpdlf-exec: " fmt (with arg) and the --help hint on stderr; returns 2. */
int exec_usage_error(const char *fmt, const char *arg);
/* Refuse (2, said on stderr) a --tier file holding a committed persistent
 * store with named tensors, which the run would overwrite; else 0. */
int exec_check_tier_files(const struct cli *c);
/* --tier paths plus the job's hpdlf-store daemons (--store, --hostfile,
 * HPDLF_STORE, Slurm), in demotion order; 0, or an exit status. */
int exec_store_tiers(const struct cli *c, struct hs_tier_spec *specs, int *n);
/* The store is about to open the --tier files: from now on, at exit, a file
 * the run created is removed and a regular file that existed is truncated
 * to zero (saying so unless quiet).  exec_tiers_tidy does it now (before
 * an _exit). */
void exec_tiers_opened(int quiet);
void exec_tiers_tidy(void);   /* async-signal-safe: the signal handler calls it too */

struct hp_session;
struct json_object;
/* Bytes moved per tier and the prefetch hit rate, on stderr (unless
 * --quiet) and into `o` when given; nothing in core. */
void exec_tier_summary(struct hp_session *s, const struct cli *c, struct json_object *o);

struct hp_graph;
struct hp_exec_opts;
/* --plan / --plan-dot of graph g (inference, or one training step: `what`
 * says which); 0 or a negative error. */
/* Peak RSS of this process (VmHWM). */
uint64_t exec_peak_rss(void);
/* gmin: the same model compiled for a budget of 1 byte (split as far as
 * the splitters go), whose smallest budget --plan names whatever budget is
 * given; NULL: g's own. */
int exec_plan_only(const struct hp_graph *g, const struct hp_exec_opts *o, const struct cli *c, const char *what,
		   const struct hp_graph *gmin);
/* Training --plan (exec_train.c): 1 if a run is created at budget b, with
 * the node that sets its smallest budget in node[n]; 0 if refused.  Set,
 * exec_plan_only looks below gmin's figure for the smallest budget a run
 * takes (a run splits for its own budget). */
extern int (*exec_floor_probe)(uint64_t b, char *node, size_t n, void *arg);
extern void *exec_floor_arg;
/* Nonzero: gmin's plan at one byte is known to be refused, naming this
 * figure (its trainer's own budget check planned it so); exec_plan_only
 * then does not plan it again. */
extern uint64_t exec_gmin_named;
/* The smallest budget at or below `from` (a figure a run fits) that a run
 * still fits, searched with exec_floor_probe as --plan searches below its
 * figure (tools/exec_plan.c floor_below); `from` when none below fits. */
uint64_t exec_floor_search(uint64_t from, char *node, size_t n);

struct hp_trainer;
/* --plan of a data-parallel step (exec_plan_comm.c): the link, the
 * reductions and the step time with them; nothing for one rank. */
int exec_plan_comm(const struct hp_trainer *t, const struct hp_exec_opts *o, int bucket_given);
/* --link-bandwidth RATE (to GB/s) and --link-latency TIME (to us): 0, or
 * exit status 2 after saying why. */
int exec_parse_link_bandwidth(const char *arg, double *GBps);
int exec_parse_link_latency(const char *arg, double *us);

/* --plan --pipeline's flags against the others (exec_plan_pipe.c; the
 * runtime's checks are exec_pipe.c's): 0, or 2 after saying why. */
int exec_check_pipeline(const struct cli *c);
struct hp_trainer_opts;
/* --plan --pipeline P: the stages the planner chooses and their figures. */
int exec_plan_pipe(const struct cli *c, const struct hp_trainer_opts *to, const struct hp_trainer *t);

/* --info (tools/exec_info.c): returns a process exit status. */
int exec_info_main(const struct cli *c);
/* --input/--output names the model lacks: HP_EUSAGE naming the valid ones. */
int exec_check_names(const struct hp_graph *g, const struct cli *c);
/* float32 -> float16 / bfloat16 bits (round to nearest even). */
uint16_t exec_half_of(float f, int dtype);

/* --debug-delay-ms SPEC (tools/exec_asgd.c): MS for every rank, or
 * RANK:MS[,RANK:MS...]; rank < 0 checks the syntax only, else *ms gets
 * that rank's delay (0: none).  0, or exit status 2 after saying why. */
int exec_parse_delay(const char *spec, int rank, double *ms);
struct hp_trainer_opts;
/* --sync async and its knobs into the trainer's options (after MPI is up:
 * the delay is this rank's); 0 or exit status 2 after saying why. */
int exec_async_opts(const struct cli *c, struct hp_trainer_opts *o);
/* --log-json of rank r > 0 of an asynchronous job: FILE.rankR (malloc'd). */
char *exec_async_log_name(const char *log, int rank);
struct hp_trainer;
/* After a step: the exchange's record for the log (NULL: none), and a
 * line on stderr for each peer newly found lost. */
const char *exec_async_step(struct hp_trainer *t);

/* The training path (tools/exec_train.c): returns a process exit status. */
int exec_train_main(struct cli *c);
/* Warn once about options that do nothing as given (hpdlf-exec.c); after
 * the tiers opened, so an error there stays the only line. */
void exec_warn_unused(const struct cli *c);

struct option;
/* --tune (tools/tune_run.c): the trials as child processes; returns a
 * process exit status.  opts: hpdlf-exec's long options (which take an
 * argument, to strip the runner's own from the trials' command lines). */
int exec_tune_main(struct cli *c, const struct option *opts);

#endif
