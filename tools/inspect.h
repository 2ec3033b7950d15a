/* hpdlf-store-inspect internals: targets, their snapshots, and the output
 * formats (table, JSON, Prometheus) and the --plot SVG writer. */
#ifndef HPDLF_TOOLS_INSPECT_H
#define HPDLF_TOOLS_INSPECT_H

#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#include "hpdlf/store.h"
#include "store/remote/remote.h" /* struct hs_remote_stat (plain data) */

/* Version of the --json document; bump when a field changes meaning or
 * disappears (adding fields keeps the version). docs/hpdlf-store-inspect.md */
#define INSPECT_JSON_SCHEMA "hpdlf-store-inspect"
#define INSPECT_JSON_VERSION 1

enum insp_kind { INSP_LOCAL, INSP_REMOTE };
enum insp_state {
	INSP_LIVE,      /* a consistent snapshot of a running process */
	INSP_STALE,     /* the page of a dead process: last data, not live */
	INSP_MISSING,   /* no page for this PID */
	INSP_ERROR,     /* anything else (unknown layout, network, ...) */
};

struct insp_target {
	char spec[128];         /* as given: "1234" or "host:port" */
	enum insp_kind kind;
	int explicit_target;    /* named on the command line (not found by the scan) */
	pid_t pid;
	enum insp_state state;
	int rc;                 /* status of the last read */
	char err[512];
	struct hs_statpage_info cur, prev;
	struct hs_statpage_tensors tens; /* of cur (--tensors) */
	double cur_t, prev_t;   /* CLOCK_MONOTONIC seconds of the reads */
	int have_prev;          /* prev holds an earlier read of the same process */
	uint64_t start_ns;      /* CLOCK_REALTIME the process started, 0: unknown */
	/* kind INSP_LOCAL, read once from /proc/PID (same user): the Slurm job
	 * ($SLURM_JOB_ID), the rank (launcher variables) and the model (the
	 * first *.onnx argument, without .onnx); "" when not known */
	char job[64], rank[16], model[128];
	int ident_read;
	int nranks;             /* the job's size from the page, 0: unknown */
	/* > 0: not a process but the sum of this many ranks of job `job`
	 * (insp_group_jobs); rates[k] are the members' rates summed */
	int job_sum;
	struct insp_tier_view *sum_rates;
	/* kind INSP_REMOTE: the daemon's answers (prev: the read before, same
	 * daemon run, when have_prev) */
	const char *token_file; /* NULL: $HPDLF_TOKEN_FILE */
	struct hs_remote_stat dcur, dprev;
	uint64_t read_ns;       /* CLOCK_REALTIME of the last answer */
};

/* Derived per-tier figures; negative values mean "not known". */
struct insp_tier_view {
	double hit_ratio, prefetch_hit_rate;
	double read_now, write_now, read_avg, write_avg; /* bytes/s */
	double p50, p99, p999;  /* microseconds; < 0 with no samples */
};

/* inspect_jobs.c: t[0..n) with the ranks of each job (same job id in
 * their pages) side by side in rank order, each job of two or more ranks
 * followed by a target holding their sum (job_sum); into *out (the caller
 * frees it with insp_free_grouped).  0 or -ENOMEM. */
int insp_group_jobs(const struct insp_target *t, int n, struct insp_target **out, int *nout);
void insp_free_grouped(struct insp_target *t, int n);

/* inspect_local.c */
int insp_scan_local(struct insp_target **list, int *n);
const char *insp_local_dir(void); /* this user's page directory, for messages */
void insp_read(struct insp_target *t);
void insp_tier_view(const struct insp_target *t, int tier, struct insp_tier_view *v);
const char *insp_state_name(enum insp_state s);
double insp_mono_s(void);

/* hpdlf-store-inspect.c: the first SIGINT or SIGTERM sets insp_stop (the
 * signal number); loops check it.  Handlers do not restart system calls, so
 * a blocked call returns EINTR.  A library call that retries EINTR until its
 * own deadline (a daemon read) runs with insp_exit_on_signal set: the
 * handler then exits at once with 128 + the signal. */
extern volatile sig_atomic_t insp_stop, insp_exit_on_signal;

/* inspect_remote.c (inspect_remote_none.c without daemon support) */
void insp_read_remote(struct insp_target *t);

/* inspect_daemon.c: the output of daemon targets */
void insp_daemon_table(FILE *f, const struct insp_target *t);
struct json_object *insp_daemon_json(const struct insp_target *t);
void insp_daemon_prometheus(FILE *f, const struct insp_target *t, int n);
/* inspect_out.c: shared by the Prometheus writers */
void insp_prom_family(FILE *f, const char *name, const char *type, const char *help);
void insp_prom_sample(FILE *f, const char *name, const char *target, const char *k1, const char *v1,
		      const char *k2, const char *v2, double val);

/* inspect_out.c */
enum insp_sort { INSP_SORT_BYTES, INSP_SORT_NAME, INSP_SORT_TIER };
struct insp_opts {
	int tensors;            /* --tensors */
	int color;              /* unused for now: plain text */
	enum insp_sort sort;    /* --sort */
	int top;                /* --top N; 0: all the page lists */
};
void insp_print_table(FILE *f, const struct insp_target *t, int n, const struct insp_opts *o);
int insp_print_json(FILE *f, const struct insp_target *t, int n, const struct insp_opts *o, int pretty);
void insp_print_prometheus(FILE *f, const struct insp_target *t, int n);
extern const char insp_no_tensor_data[];
/* inspect_tensors.c: --tensors of a page (a note for a version-1 page) */
struct json_object;
void insp_tensors_table(FILE *f, const struct insp_target *t, const struct insp_opts *o);
struct json_object *insp_tensors_json(const struct insp_target *t, const struct insp_opts *o);

/* inspect_plot.c: 0, or an error with hp_errmsg() set (HP_EFORMAT/HP_EDATA
 * for an unreadable input, -errno for I/O). */
int insp_plot(const char *in_path, const char *svg_path, const char *title);
/* A whole text file, NUL-terminated with one spare byte after it (a cut
 * trace gets its closing bracket there), into *out (free it); 0 or an
 * error naming the file (HP_EUSAGE when it cannot be opened). */
int insp_read_file(const char *path, char **out);
/* inspect_csv.c: a --log-json file as CSV into out_path ("-": stdout);
 * errors as insp_plot's. */
int insp_csv(const char *in_path, const char *out_path);
/* inspect_compact.c: --compact, one line per target fitted to the width. */
void insp_print_compact(FILE *f, const struct insp_target *t, int n);

/* inspect_http.c (inspect_http_none.c without libmicrohttpd): serve
 * GET /metrics on HOST:PORT, each answer written by render, until SIGINT
 * or SIGTERM (insp_wait_signal); 0, or an error (HP_EUSAGE: bad address or
 * no HTTP support). */
typedef void (*insp_render_fn)(FILE *f, void *arg);
int insp_http_serve(const char *spec, insp_render_fn render, void *arg);
/* The same without waiting: the server runs on its own thread until
 * insp_http_stop (hpdlf-store --listen-metrics beside its daemon). */
struct insp_http;
int insp_http_start(const char *spec, insp_render_fn render, void *arg, struct insp_http **out);
void insp_http_stop(struct insp_http *h);
/* hpdlf-store-inspect.c: sleep until insp_stop is set. */
void insp_wait_signal(void);

#endif
