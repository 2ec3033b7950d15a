/* Internal to exec/train*.c: the dataset, the trainer, checkpoints. */
#ifndef HPDLF_EXEC_TRAIN_INTERNAL_H
#define HPDLF_EXEC_TRAIN_INTERNAL_H

#include <stdint.h>

#include "hpdlf/exec.h"
#include "hpdlf/train.h"
#include "exec/train_hooks.h"

struct hp_budget_layout;
struct hp_ws_log;
struct hp_plan;

struct hs_store;
struct hs_tensor;

/* One array of the dataset: rows along dim 0 of a .npy (or an uncompressed
 * .npz member), read in place from its file. */
struct hp_darray {
	char *path;            /* the file holding the bytes */
	char *what;            /* for messages: "x.npy" or "train.npz:x" */
	enum hp_dtype dtype;
	struct hp_shape shape;
	uint64_t offset;       /* of the first row in the file */
	uint64_t row_bytes;
	void *map;             /* in core: the file mapped */
	size_t map_len;
	struct hs_tensor *ten; /* out of core: a store tensor backed by the file */
	uint64_t skip;         /* ten's bytes before the first row (its start block-aligned) */
	uint64_t chunk;
};

struct hp_dataset {
	struct hp_darray x, y;
	int64_t n;             /* samples */
	/* out of core: the next batch read ahead during this step's run
	 * (hp_dataset_ahead), its chunks and rows, and the reads in flight */
	struct hs_range *ahead;
	size_t nahead;
	int64_t *ahead_rows;
	struct hs_prefetch *ahead_h[2]; /* read where the plan has room, the rest at the run's end */
};

/* Read the headers of data/labels (labels NULL: data is an .npz with x, y). */
int hp_dataset_open(struct hp_dataset *d, const char *data, const char *labels);
/* Make the bytes readable: map them (st NULL) or back store tensors by the files. */
int hp_dataset_attach(struct hp_dataset *d, struct hs_store *st);
/* Copy rows[0..n) of array a into dst (n * row_bytes). */
int hp_darray_gather(struct hp_darray *a, const int64_t *rows, int64_t n, void *dst);
/* Out of core: read ahead, in one batch of requests, the chunks of the
 * rows the gathers of data and labels will copy next (a part of them at
 * most; an optimisation only: the gathers read whatever it did not). */
void hp_dataset_prefetch(struct hp_dataset *d, struct hs_store *st, const int64_t *rows, int64_t n);
/* Out of core: have session s read the chunks of rows[0..n) (the next
 * batch) ahead during its next run, at the step from which its plan
 * leaves room for them (hp_session_set_ahead), into frames the store
 * takes back whenever it needs them (hs_readahead): the gathers then find
 * them in DRAM instead of waiting for a read between the runs.  An
 * optimisation only, like hp_dataset_prefetch. */
int hp_dataset_ahead(struct hp_dataset *d, struct hp_session *s, const int64_t *rows, int64_t n);
/* The read-ahead's reads done (before gathering, or closing). */
void hp_dataset_ahead_wait(struct hp_dataset *d);
void hp_dataset_close(struct hp_dataset *d);

struct hp_trainer {
	struct hp_trainer_opts o;
	int update_cut;         /* weights kept in blocks for their update (split_weight.h) */
	int update_would_cut;   /* without update_cut: it would cut a weight more */
	int fits_refused;       /* --plan: built, and refused by fits() */
	int remat_refused;      /* --plan: the recompute search's plan of the step was refused */
	uint64_t remat_needed;  /* naming this figure (hp_plan_needed) */
	struct hp_plan *remat_plan; /* --plan: its plan of the step by Belady's policy (fits) */
	uint64_t split_tensors; /* nonzero: weights and operators split as for this tensor
				 * budget, below the run's (hp_trainer_create's retry) */
	struct hp_ws_log *ws_log; /* non-NULL: hp_train_build_forward logs its weight split
				   * there (split_weight.h, for train_floor.c) */
	char *model;
	struct hp_graph *g;
	struct hp_session *s;
	struct hp_dataset data;
	int vin, vlab, vloss;  /* the data input, the labels input, the loss */
	int widen_labels;      /* int32 label file fed to an int64 input */
	char *classes_first;   /* cross-entropy over the output's last axis: the Transpose
				* that puts its classes on axis 1, the loss's input (NULL: none) */
	int64_t step, total;
	uint64_t shuffle_seed;
	int64_t *perm, perm_epoch;
	int64_t *rows;
	struct hp_tensor xb, yb;
	void *ytmp;
	uint64_t last_read[8], last_written[8];
	char tier_names[8][16];
	int rank, nranks;      /* data parallelism: this rank of nranks (1: alone) */
	int64_t lbatch;        /* rows of each global batch this rank trains on */
	int64_t fixed_batch;   /* the batch the model's input was exported with when not lbatch, else 0 */
	int nbuckets;          /* gradient buckets reduced over the ranks */
	int dp_stop;           /* the signal some rank was cancelled by: all stop after this step */
	hp_ckpt_progress_fn ckpt_progress; /* test hook (exec/train_hooks.h) */
	void *ckpt_arg;
	double link_GBps, link_lat_us; /* the ranks' link (train_dp_plan.c); 0: not known yet */
	uint64_t dp_bucket;    /* the bucket size the reductions use (chosen or --bucket) */
	struct hp_param_counts params; /* what trains (train_params.c) */
	struct hp_eval *eval;  /* validation (train_eval.c), opened at the first evaluation */
	struct hp_asgd *asgd;  /* --sync async: mailboxes and state (asgd.c) */
	struct hp_pipe *pipe;  /* --pipeline: this rank's stage (exec/pipe.h), or NULL */
	int dpr;               /* this rank's share of each batch: its rank, or its pipeline */
};

/* Validation (train_eval.c): its dataset opened and checked against the
 * training data's (at creation, so that a mistake shows at once); closed. */
int hp_eval_open(struct hp_trainer *t);
void hp_eval_free(struct hp_eval *e);

/* Checkpoints (train_ckpt.c): the file under dir, written atomically. */
int hp_ckpt_write(struct hp_trainer *t);
int hp_ckpt_read(struct hp_trainer *t);

/* Data parallelism (train_dp.c): join the ranks and split the batch;
 * then check that every rank trains the same model with the same flags. */
int hp_dp_setup(struct hp_trainer *t);
int hp_dp_agree(struct hp_trainer *t);
/* The global mean of this rank's loss over its rows; and whether any
 * rank was cancelled (SIGINT/SIGTERM reach ranks at different steps: all
 * must stop after the same one, or the others wait in a collective). */
int hp_dp_mean_loss(struct hp_trainer *t, double *loss);
/* The ranks' stop flags in a step's allreduce: put HP_DP_STOP_WORDS
 * doubles, sum them over the ranks, take the signal they agree on into
 * t->dp_stop (train_dp.c). */
#define HP_DP_STOP_WORDS 3
void hp_dp_stop_put(const struct hp_trainer *t, double *v);
void hp_dp_stop_take(struct hp_trainer *t, const double *v);
/* The bucket size of the reductions of training graph g (train_dp_plan.c):
 * --bucket, else chosen by the planner from the model and the link
 * (measured at start-up under a launcher, identical on every rank). */
int hp_dp_plan_bucket(struct hp_trainer *t, const struct hp_graph *g, uint64_t *bucket);
/* --sync-bn (train_dp_sync.c): mark g's BatchNorm kernels to take their
 * statistics over the ranks, and give the kernels the ranks' sum. */
int hp_dp_sync_bn(struct hp_trainer *t, struct hp_graph *g);

/* This rank's samples of step `step` into t->rows (lbatch of them). */
int hp_train_rows(struct hp_trainer *t, int64_t step);
/* The same into rows[0..lbatch) instead of t->rows. */
int hp_train_rows_into(struct hp_trainer *t, int64_t step, int64_t *rows);

/* Labels input lv, read by the loss over output `on` of g, takes the
 * label file's samples (dtype, sample dims); sets widen_labels (train_data.c). */
int hp_train_fit_labels(struct hp_trainer *t, const struct hp_graph *g, const struct hp_value *lv, const char *on);

/* A trainer from validated options (hp_trainer_create's), not built:
 * *out even on failure (hp_trainer_destroy frees it). */
int hp_train_new(const char *model, const struct hp_trainer_opts *o, int update_cut, uint64_t split_tensors,
		 struct hp_trainer **out);
/* Its ranks agreed, its data opened and its model loaded into t->g. */
int hp_train_load(struct hp_trainer *t);
/* t->g (loaded) made the forward graph a training graph is made from:
 * fed the data, its parameters and fusions prepared, its weights split
 * for the budget (as laid out into *l). */
int hp_train_build_forward(struct hp_trainer *t, struct hp_budget_layout *l);

#endif
