/* hpdlf-exec --tune: the trial runner (tools/tune_run*.c) and the search
 * it drives.  The search API is exec/tune_*.c's (SPEC parsing, ASHA,
 * Bayesian optimisation), declared in exec/tune.h. */
#ifndef HPDLF_TOOLS_TUNE_RUN_H
#define HPDLF_TOOLS_TUNE_RUN_H

#include <signal.h>
#include <stdint.h>
#include <stdio.h>

#include "exec/tune.h"

/* ---- the runner's parts ------------------------------------------------ */

#define TUNE_MAX_FLAGS 32

/* One job of one trial, owned by the runner (the search's strings copied). */
struct tune_job {
	int trial;
	int64_t from_step, to_step;
	int nflags;
	char *names[TUNE_MAX_FLAGS], *values[TUNE_MAX_FLAGS];
	int pid;                 /* while it runs; 0 otherwise */
	int status;              /* wait status once done */
};

int tune_job_copy(struct tune_job *dst, const struct hp_tune_job *src);
void tune_job_clear(struct tune_job *j);

struct cli;
struct option;

/* What the trials share: the runner's settings (tools/tune_run.c). */
struct tune_ctx {
	const struct cli *c;
	const struct option *opts;
	char *dir;               /* TUNE_LOG.d: trial-N/ under it */
	const char *metric;      /* the objective's name: val_loss, val_accuracy, loss */
	int parallel;
	uint64_t trial_budget;   /* each trial's --budget (0: in core) */
	int trial_threads;
	char **base;             /* the command line without the runner's flags */
	int nbase;
};

/* The runner (tools/tune_run.c), on one node or as rank 0 of a launched
 * job (tools/tune_run_mpi.c). */
#define TUNE_MAX_PARALLEL 256
struct tune_table;
struct runner {
	struct tune_ctx x;
	struct hp_tune *t;
	FILE *log;
	struct tune_table *tb;
	struct tune_job run[TUNE_MAX_PARALLEL]; /* in their start order */
	int n;
	struct tune_job *last; /* per trial: its latest finished job (trial -1: none) */
	int nlast;
	uint64_t peak;
};
extern volatile sig_atomic_t tune_stop_sig;
int tune_note_done(struct runner *r, const struct tune_job *j);
/* The end: the best trial said, its flags printed, its weights exported. */
int tune_conclude(struct runner *r);
/* Under mpirun/srun: every rank runs one job at a time, rank 0 hands
 * them out and reports them (tools/tune_run_mpi.c). */
int tune_mpi_search(struct runner *r);

/* tune_run_child.c: start a trial's job (fork + exec of this program), its
 * files, its metric from its --log-json. */
int tune_child_start(const struct tune_ctx *x, struct tune_job *j, const char *export_path);
int tune_child_metric(const struct tune_ctx *x, const struct tune_job *j, double *metric);
/* The runner's own flags removed from argv (a malloc'd argv, *n entries). */
char **tune_base_args(const struct cli *c, const struct option *opts, int *n);
/* "--lr 0.1 --batch 32" of a job's flags. */
void tune_flags_str(const struct tune_job *j, char *buf, size_t len);

/* tune_run_log.c: the JSONL log, one line per event, written by the runner
 * alone; read back to resume. */
int tune_log_start(FILE *f, const struct tune_job *j);
int tune_log_result(FILE *f, const struct tune_job *j, const char *metric, double v, const char *state);
/* Replay the log at path into the search: every start again through
 * hp_tune_next (checked against the log), every result through
 * hp_tune_report (and to on_done unless failed); the jobs started and not
 * finished into *running (up to cap, in their start order).  A last line
 * cut short is dropped from the file.  0, or HP_EDATA / HP_EUSAGE. */
typedef int (*tune_done_fn)(void *arg, const struct tune_job *j);
int tune_log_replay(const char *path, struct hp_tune *t, const char *metric, struct tune_job *running, int cap,
		    int *nrunning, tune_done_fn on_done, void *arg);

/* tune_run_share.c: the data files opened once by the runner, the fds
 * inherited by its trials (HPDLF_SHARED_FILES). */
int tune_share_open(const struct cli *c, uint64_t *bytes);
/* In a trial: take the parent's fds (common/file.h); 0 or exit status 2. */
int tune_share_from_env(void);

/* tune_run_table.c: the live table (tty > 0: stderr a terminal) or plain
 * lines (0), or nothing (-1: --quiet). */
struct tune_table;
struct tune_table *tune_table_new(int tty, int parallel, const char *dir);
/* The last line a trial said (its output.txt under dir), for messages. */
void tune_last_words(const char *dir, int trial, char *buf, size_t len);
void tune_table_event(struct tune_table *tb, const struct tune_job *j, const char *what, const char *metric,
		      double v);
void tune_table_draw(struct tune_table *tb, const struct hp_tune *t, const struct tune_job *running, int n,
		     uint64_t tree_bytes);
void tune_table_free(struct tune_table *tb);
/* Proportional set size of this process and its children (bytes). */
uint64_t tune_tree_pss(void);

#endif
