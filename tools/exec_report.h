/* hpdlf-exec's per-step report, shared by inference and training: one
 * sample of a run after each iteration or step, the --log-json line made
 * of it (one versioned schema, docs/hpdlf-exec.md LOG SCHEMA) and the
 * terminal progress line drawn from it (tools/train_progress.c). */
#ifndef HPDLF_TOOLS_EXEC_REPORT_H
#define HPDLF_TOOLS_EXEC_REPORT_H

#include <stdint.h>
#include <stdio.h>

#include "hpdlf/store.h"

/* Bump when a key changes meaning or disappears (adding keys keeps it).
 * Also the "schema" of --stats-json. */
#define EXEC_LOG_SCHEMA 1

struct exec_tier_sample {
	char name[16];
	uint64_t used;                  /* bytes held now (DRAM: resident) */
	uint64_t bytes_read, bytes_written; /* since the process started */
	uint64_t bytes_kept;            /* loads served without a read (hs_store_tier_kept), since the start */
	double read_per_s, write_per_s; /* over this step */
};

struct exec_sample {
	const char *mode;               /* "train" or "infer" */
	int64_t step, total;            /* 0-based index of the step done; steps planned */
	double ms, time_s;              /* this step; since the first measured one */
	double flops;                   /* of one step */
	double loss;                    /* training only (has_loss) */
	double lr;                      /* training: the step's learning rate */
	int has_loss;
	int64_t epoch, samples;         /* training only: epoch, batch */
	int checkpointed;
	double stall_ms;                /* compute waiting on loads or budget this step */
	uint64_t resident, budget, rss; /* tensor bytes in DRAM; --budget (0: none); process RSS */
	int ntiers;
	struct exec_tier_sample tier[HS_MAX_TIERS + 1];
	int has_ahead;                  /* out of core: the data set's read-ahead (hs_readahead_stats), cumulative */
	uint64_t ahead_bytes, ahead_taken, ahead_lost;
	int has_val;                    /* validated after this step (--val-data) */
	double val_loss, val_accuracy;  /* accuracy NaN unless cross-entropy */
	const char *asgd_json;          /* --sync async: the step's exchange (JSON object), or NULL */
};

/* Counters of the previous sample, for the per-step rates. */
struct exec_sampler {
	double t0;
	uint64_t read[HS_MAX_TIERS + 1], written[HS_MAX_TIERS + 1];
};

struct hp_session;
/* Take the baseline now (before the first measured step). */
void exec_sampler_init(struct exec_sampler *sp, struct hp_session *s);
/* Fill the store and memory part of x from session s (x->ms, budget and
 * the mode fields are the caller's, set before). */
void exec_sample_fill(struct exec_sampler *sp, struct hp_session *s, struct exec_sample *x);

/* The --log-json line of x; 0 or -EIO. */
int exec_log_write(FILE *f, const struct exec_sample *x);
/* The summary's " vs budget ..." after a peak RSS: from 64 MiB on the
 * budget bounds the process; below, it bounds tensors and the process
 * stays under 64 MiB (exec/budget.h), so the share is of that. */
void exec_print_rss_budget(FILE *f, uint64_t rss, uint64_t budget);
struct json_object;
/* --stats-json's OpenBLAS buffer keys into o: the bound per buffer the
 * overhead reserved and the most one sgemm call touched (kernels/blas.h). */
void exec_blas_json(struct json_object *o);

#endif
