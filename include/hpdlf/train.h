/* hpdlf training: autodiff of an ONNX graph, the training loop over a
 * dataset, checkpoints and ONNX export of the trained model.
 *
 *   struct hp_trainer_opts o;
 *   hp_trainer_opts_init(&o, sizeof o);
 *   o.spec.optimizer = HP_OPT_ADAM;           // loss: cross-entropy by default
 *   o.spec.lr = 1e-3;
 *   o.data = "x.npy"; o.labels = "y.npy";      // or o.data = "train.npz" (x, y)
 *   o.batch = 32; o.steps = 1000;
 *   o.checkpoint_dir = "ckpt"; o.checkpoint_every = 100; o.resume = 1;
 *   o.budget = 1ull << 30;                     // 0: in core
 *   struct hp_trainer *t;
 *   if (hp_trainer_create("model.onnx", &o, &t) < 0) die(hp_errmsg());
 *   if (hp_trainer_run(t, on_step, arg) < 0) die(hp_errmsg());   // on_step: one call per step
 *   hp_trainer_export_onnx(t, "trained.onnx", 0);
 *   hp_trainer_destroy(t);
 *
 * The dataset's rows are samples (dim 0); step i trains on samples
 * [(i*B) mod N, +B) (wrapping), or with `shuffle` on the same positions of
 * a permutation drawn anew for every epoch from `seed`.  Out of core, the
 * data files are store tensors read in place (the dataset may exceed the
 * budget); in core they are mapped.
 *
 * Checkpoints hold the weights, optimizer state, running statistics, the
 * step and the shuffle seed; every rank writes its part, then one commit
 * record (written to a temporary file and renamed over the previous one)
 * makes it current, so a crash leaves the previous one whole.  A checkpoint
 * resumes at any number of ranks.
 * A resumed run computes bit for bit the losses the uninterrupted run would.
 */
#ifndef HPDLF_TRAIN_H
#define HPDLF_TRAIN_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>

#include "hpdlf/graph.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- the training graph ------------------------------------------------ */

enum hp_loss_kind {
	HP_LOSS_CROSS_ENTROPY = 1, /* mean softmax CE: logits [N,C,...], int64 labels [N,...] */
	HP_LOSS_MSE = 2,           /* mean squared error against a float target of the output's shape */
	HP_LOSS_OUTPUT = 3,        /* minimize a scalar the graph computes (output:NAME) */
};

enum hp_optimizer_kind {
	HP_OPT_SGD = 1,
	HP_OPT_ADAM = 2,
	HP_OPT_ADAMW = 3,
};

struct hp_train_spec {
	size_t size;                  /* sizeof the struct the caller knows (growth) */
	enum hp_loss_kind loss;
	const char *output;           /* value the loss reads (OUTPUT: the scalar); NULL: first graph output */
	const char *labels;           /* name of the labels/target input added; NULL: "labels" */
	int64_t ignore_index;         /* cross-entropy label to skip (torch default -100) */
	enum hp_optimizer_kind optimizer;
	double lr, momentum, weight_decay; /* weight_decay < 0: the optimizer's torch default */
	int nesterov;
	double beta1, beta2, eps;     /* Adam/AdamW */
	uint64_t seed;                /* Dropout masks */
};

/* Defaults: cross-entropy, SGD, lr 0.01, no momentum, torch's default decay,
 * betas 0.9/0.999, eps 1e-8, seed 1. */
void hp_train_spec_init(struct hp_train_spec *s, size_t size);

/* Rewrite g (inferred) into one training step: BatchNormalization uses batch
 * statistics and updates its running statistics, Dropout draws a seeded
 * mask; then loss, backward and optimizer updates, and g is re-inferred.
 * The graph gets an input "labels" (spec.labels) and an output "loss"; each
 * run of a session over g is one step (state moves through value.next).
 * Errors: HP_EUSAGE (bad spec, unknown output), HP_EUNSUPPORTED (an op on
 * the gradient path has no gradient; the message names node and op). */
int hp_autodiff(struct hp_graph *g, const struct hp_train_spec *spec);

/* ---- the trainer ------------------------------------------------------- */

/* --shard: the ZeRO stages of data parallelism over N ranks.  OPTIMIZER
 * and GRADIENTS: each rank updates its 1/N of every parameter (the
 * elements [n*r/N, n*(r+1)/N)) and keeps optimizer state for that slice
 * only (GRADIENTS: and only that slice of the reduced gradients;
 * PARAMETERS: and only that slice of the parameters, gathered whole for
 * each use); the losses are bitwise those of NONE. */
enum hp_shard_mode {
	HP_SHARD_NONE = 0,
	HP_SHARD_OPTIMIZER = 1,
	HP_SHARD_GRADIENTS = 2,
	HP_SHARD_PARAMETERS = 3,
};

struct hp_trainer_opts {
	size_t size;                  /* sizeof the struct the caller knows (growth) */
	struct hp_train_spec spec;
	const char *input;            /* model input fed with the data; NULL: the first */
	const char *data, *labels;    /* .npy files, or data = .npz holding x and y (labels NULL) */
	int64_t batch;                /* samples per step (required) */
	int64_t steps;                /* total steps, counted from step 0 (resume included) */
	int64_t epochs;               /* instead of steps: ceil(epochs * N / batch) steps */
	int shuffle;                  /* draw a permutation per epoch */
	uint64_t seed;                /* shuffle seed (and spec.seed if that is 0) */
	int threads;                  /* 0: all online cores */
	uint64_t budget;              /* DRAM bytes; 0: in core */
	const char *trace_path;       /* Chrome trace of the steps, or NULL */
	const char *checkpoint_dir;   /* NULL: none */
	int64_t checkpoint_every;     /* steps between checkpoints (0: only at the end) */
	int resume;                   /* continue from checkpoint_dir's checkpoint: 1, which
	                                 must exist; 2, if there is one (else from step 0) */
	/* set (e.g. to SIGINT) to stop after the current step; with several
	 * ranks every rank stops after the same step, and a rank whose flag is
	 * clear gets the signal the ranks stopped on written into it (SIGTERM
	 * if any rank had it, else SIGUSR1, else SIGINT) */
	volatile sig_atomic_t *cancel;
	/* Lower tiers of the store out of core (0: a spill file in $TMPDIR);
	 * as struct hp_exec_opts's. */
	int ntiers;
	const struct hs_tier_spec *tiers;
	int no_split;                 /* out of core: do not split operators (hp_graph_split) */
	/* Build the training graph only (no session, no data in the store):
	 * for planning a step with hp_trainer_graph; the trainer cannot run. */
	int graph_only;
	/* Under a launcher (mpirun, srun): bytes per gradient bucket reduced
	 * over the ranks (0: chosen from the model).  batch stays the global
	 * batch; each rank trains on its 1/ranks of every one. */
	uint64_t bucket;
	/* Planning for a cluster one does not have (graph_only, no launcher):
	 * build the step as one of plan_ranks ranks (batch/plan_ranks rows,
	 * gradient reductions over plan_ranks), the link's bandwidth in bytes
	 * per second / 1e9 and latency in microseconds (0: measured under a
	 * launcher; with plan_ranks, 0 bandwidth is refused).  Under a
	 * launcher with bucket 0 the bucket size is chosen from the model and
	 * these figures (measured at start-up when 0). */
	int plan_ranks;
	double link_GBps, link_lat_us;
	/* Under a launcher: BatchNormalization reduces its batch statistics
	 * (and its backward's sums) over the ranks, so N ranks normalize as
	 * one rank with the global batch would.  In core only (HP_EUSAGE with
	 * a budget). */
	int sync_bn;
	/* Under a launcher: what each rank keeps of the training state
	 * (enum hp_shard_mode; 0, none: everything, as one rank would). */
	int shard;
	/* Glob patterns (fnmatch) of parameter names kept fixed: not updated,
	 * no gradient computed for them.  A pattern matching no parameter is
	 * HP_EUSAGE. */
	const char *const *freeze;
	int nfreeze;
	/* Validation data for hp_trainer_evaluate: as data and labels (an
	 * .npz holding x and y when val_labels is NULL); NULL: none. */
	const char *val_data, *val_labels;
	/* Under a launcher: asynchronous SGD (Keuper and Pfreundt's ASGD)
	 * instead of reduced gradients.  Every rank trains its rows of each
	 * global batch with its own optimizer; after every exchange_every of
	 * its steps it writes its parameters one-sidedly into the mailboxes of
	 * exchange_peers peers (a schedule drawn from seed) and blends the
	 * states that arrived in its own: w = (1 - b) w + b mean(received),
	 * b = blend, or m/(m+1) for m states when blend < 0 (the default: the
	 * plain mean of its own and the received states).  parzen: use only
	 * received states that this rank's last step moved towards (the
	 * paper's Parzen window).  async_deterministic: the same exchanges
	 * behind barriers, bit for bit repeatable (tests).  delay_ms: this rank
	 * sleeps that long in every step (a slow rank, for tests). */
	int64_t exchange_every;       /* 0: 4 */
	double blend;                 /* < 0: m/(m+1) */
	double delay_ms;
	int async_sgd;
	int async_deterministic;
	int exchange_peers;           /* 0: 1 */
	int parzen;
	/* Under a launcher: pipeline parallelism.  pipeline P > 1 cuts the
	 * model into P stages on P ranks (N ranks = P x D: D pipelines, each
	 * trained on its 1/D of every batch as data parallelism); each batch
	 * runs as micro_batches M (0: P) in the order pipeline_schedule says
	 * (enum hp_pipe_schedule); pipeline_cuts names the P - 1 nodes ending
	 * the stages (NULL: chosen from the model).  batch must divide by
	 * M x D.  Losses are the 1-rank run's (BatchNormalization normalizes
	 * over a micro-batch, as in GPipe). */
	const char *const *pipeline_cuts;
	int npipeline_cuts;
	int pipeline;
	int micro_batches;
	int pipeline_schedule;
	/* Under a budget: keep or swap every activation the backward reads,
	 * never drop one to recompute it (by default the planner recomputes
	 * those that are cheaper to compute again than to page, when it
	 * predicts a faster step; results are bitwise the same either way). */
	int no_recompute;
	/* The learning rate of each step (enum hp_lr_schedule): spec.lr times
	 * the schedule's factor at the step, in double, as PyTorch's LambdaLR
	 * and StepLR give it when stepped after every optimizer step, with
	 * Hugging Face's get_{constant,linear,cosine}_schedule_with_warmup
	 * factors: during the first warmup_steps, step / warmup_steps (0 at
	 * step 0); then 1 (constant), falling linearly to 0 at the last step
	 * (linear), or 0.5 (1 + cos(pi p)) with p the share of the steps after
	 * the warmup done (cosine).  HP_LR_STEP: times lr_gamma after every
	 * lr_step_size steps (no warmup).  The steps are the run's total
	 * (steps, or epochs' worth), resumed runs included; every rank and
	 * pipeline stage sets it into its updates. */
	int64_t warmup_steps;
	int64_t lr_step_size;
	double lr_gamma;              /* HP_LR_STEP: 0 means 0.1 */
	int lr_schedule;
};

enum hp_lr_schedule {
	HP_LR_CONSTANT = 0,
	HP_LR_LINEAR = 1,
	HP_LR_COSINE = 2,
	HP_LR_STEP = 3,
};

/* 1F1B: a stage alternates forwards and backwards once P micro-batches
 * are in flight (their activations bounded by P); GPipe: all forwards,
 * then all backwards (M in flight). */
enum hp_pipe_schedule {
	HP_PIPE_1F1B = 0,
	HP_PIPE_GPIPE = 1,
};

void hp_trainer_opts_init(struct hp_trainer_opts *o, size_t size);

struct hp_trainer;
struct hp_session;
struct hs_tier_spec;

/* Load the model, fix its input's batch dim, check the data against it
 * (HP_EDATA / HP_ESHAPE name the file, the dims and dtypes that differ),
 * build the training graph and its session, and load the checkpoint when
 * resuming (HP_EDATA if it does not fit the model). */
int hp_trainer_create(const char *model, const struct hp_trainer_opts *o, struct hp_trainer **out);
void hp_trainer_destroy(struct hp_trainer *t);

/* The learning rate the trainer's schedule gives step `step` (0-based). */
double hp_trainer_lr(const struct hp_trainer *t, int64_t step);

struct hp_step_info {
	int64_t step;                 /* 0-based index of the step just done */
	int64_t steps;                /* total */
	int64_t epoch;                /* epoch of the step's first sample */
	double loss;
	double ms;                    /* wall time of the step, data loading included */
	double flops;                 /* floating-point operations of one step */
	int64_t samples;              /* batch */
	uint64_t tier_read[8], tier_written[8]; /* bytes moved this step per store tier (0: DRAM) */
	const char *tier_name[8];
	int ntiers;                   /* 0 in core */
	int checkpointed;             /* a checkpoint was committed after this step */
};

/* Called after every step: a positive return stops the run (like cancel);
 * a negative one (an HP_E* or -errno, with hp_error's message) fails it,
 * without the final checkpoint: the last one committed stays current. */
typedef int (*hp_step_fn)(void *arg, const struct hp_step_info *info);

/* Train from the current step to opts.steps, checkpointing every
 * checkpoint_every steps and at the end (also when stopped early); a step
 * whose loss is not finite is never checkpointed (its state is worthless and
 * would replace a good one).
 * HP_ECANCELED if stopped by opts.cancel or the callback (the final
 * checkpoint is written first). */
int hp_trainer_run(struct hp_trainer *t, hp_step_fn fn, void *arg);
/* One step (no checkpoint).  1: done, 0: no steps left. */
int hp_trainer_step(struct hp_trainer *t, struct hp_step_info *info);
/* Commit a checkpoint of the current state now (under a launcher every
 * rank must call it: each writes its part). */
int hp_trainer_checkpoint(struct hp_trainer *t);
int64_t hp_trainer_current_step(const struct hp_trainer *t);
/* The session that runs the training graph (its store statistics, ...). */
struct hp_session *hp_trainer_session(struct hp_trainer *t);
int64_t hp_trainer_total_steps(const struct hp_trainer *t);
/* The graph of one training step (forward, loss, backward, optimizer). */
const struct hp_graph *hp_trainer_graph(const struct hp_trainer *t);
/* Tensor-memory high-water mark of a step (planned out of core). */
uint64_t hp_trainer_peak_bytes(const struct hp_trainer *t);

/* The model's parameters: float initializers, and float tensors of
 * Constant nodes that reach a parameter slot (a Conv's weight, a
 * BatchNorm's scale or statistics, a bias...) directly or through Identity
 * nodes, which train exactly like initializers. */
struct hp_param_counts {
	size_t size;                  /* sizeof the struct the caller knows (growth) */
	int64_t trained, trained_tensors; /* elements and tensors the optimizer updates */
	int64_t frozen, frozen_tensors;   /* kept fixed by opts.freeze */
	int64_t from_constants;       /* tensors that were Constant nodes (BatchNorm state included) */
};
int hp_trainer_param_counts(const struct hp_trainer *t, struct hp_param_counts *out);

/* Write the model with its trained weights and running statistics as
 * ONNX: the original file with those initializers replaced.  Weights go to
 * FILE.data as external data when `external` is set or the model is too
 * large for one protobuf (> 1 GiB of weights). */
int hp_trainer_export_onnx(struct hp_trainer *t, const char *path, int external);

/* The mean loss of the current weights over opts.val_data (and for
 * cross-entropy the share of right arg-max predictions; NaN otherwise),
 * evaluated as inference: BatchNormalization with its running statistics,
 * Dropout off, nothing updated.  Under a launcher every rank calls it
 * (collective: each evaluates its share of the rows with rank 0's weights
 * and running statistics) and gets the global figures.  HP_EUSAGE without val_data or with an
 * output:NAME loss; HP_EDATA when the validation samples differ from the
 * training data's. */
int hp_trainer_evaluate(struct hp_trainer *t, double *loss, double *accuracy);

#ifdef __cplusplus
}
#endif
#endif
