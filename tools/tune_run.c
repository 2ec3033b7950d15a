/* hpdlf-exec --train --tune SPEC.json --tune-log FILE.jsonl [--parallel K]:
 * the hyperparameter search's runner.  The search (tools/tune_run.h's API)
 * proposes jobs, a trial's configuration and a step range; the runner
 * starts each as a child process (tools/tune_run_child.c), K at once, the
 * node's --budget split between them and the data opened once for all
 * (tools/tune_run_share.c), and reports each job's figure back.  Results
 * are reported in the order the jobs started, whatever order they end in:
 * the search then sees the same history at any speed of the trials, so a
 * seed and K give one search, and a resumed one replays its log into the
 * same state (tools/tune_run_log.c). */
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <json-c/json.h>

#include "hpdlf/error.h"
#include "hpdlf/tensor.h"
#include "exec/comm.h"
#include "tools/exec_cli.h"
#include "tools/tune_run.h"

#define MAX_PARALLEL TUNE_MAX_PARALLEL

volatile sig_atomic_t tune_stop_sig;

static void on_stop(int sig)
{
	tune_stop_sig = sig;
}

/* Under a launcher rank 0 alone speaks of the flags and the SPEC (every
 * rank checks the same ones). */
static int lead = 1;
static int nlaunched; /* ranks under a launcher (0: none) */

static int usage(const char *msg, const char *arg)
{
	return lead ? exec_usage_error(msg, arg) : 2;
}

/* Flags the runner sets for every trial itself. */
static int check_flags(const struct cli *c)
{
	int r, n;

	if (!c->tune || !c->tune_log)
		return usage("%s", c->tune ? "--tune needs --tune-log FILE.jsonl (the search's log, to resume it)"
					   : "--tune-log and --parallel go with --tune SPEC.json");
	if (c->steps || c->epochs)
		return usage("%s", "--steps/--epochs: under --tune the SPEC's budget (min, max) sets each trial's steps");
	if (c->checkpoint || c->checkpoint_every || c->resume || c->log_json || c->stats_json)
		return usage("%s", "--checkpoint, --resume, --log-json and --stats-json are the runner's under --tune: "
			     "each trial has its own under TUNE_LOG.d/trial-N/");
	if (c->parallel > MAX_PARALLEL)
		return usage("--parallel: at most 256 trials at once, got %s", "more");
	if (hp_comm_env(&r, &n) && c->parallel)
		return usage("%s", "--parallel: under mpirun/srun every rank runs one trial at a time (the ranks are the "
			     "parallelism)");
	if (!c->data)
		return usage("%s", "--tune needs --data FILE.npy --labels FILE.npy (or --data FILE.npz)");
	return 0;
}

static char *read_file(const char *path)
{
	FILE *f = fopen(path, "re");
	char *buf = NULL;
	long len;

	if (!f)
		return NULL;
	if (fseek(f, 0, SEEK_END) == 0 && (len = ftell(f)) >= 0 && len < (16 << 20) && fseek(f, 0, SEEK_SET) == 0 &&
	    (buf = calloc(1, (size_t)len + 1)) && fread(buf, 1, (size_t)len, f) != (size_t)len) {
		free(buf);
		buf = NULL;
		errno = EIO;
	}
	fclose(f);
	return buf;
}

/* The SPEC through the search's parser (errors name the field), and the
 * parts the runner reads itself: the objective's name, whether the space
 * sets --batch. */
static int load_spec(const struct cli *c, struct hp_tune_spec **spec, char *metric, size_t len, int *has_batch)
{
	char *text = read_file(c->tune);
	json_object *root, *o, *m, *sp;

	if (!text) {
		if (lead)
			fprintf(stderr, "hpdlf-exec: --tune %s: %s\n", c->tune, strerror(errno));
		return 2;
	}
	if (hp_tune_spec_parse(text, spec) < 0) {
		if (lead)
			fprintf(stderr, "hpdlf-exec: --tune %s: %s\n", c->tune, hp_errmsg());
		free(text);
		return 2;
	}
	root = json_tokener_parse(text);
	free(text);
	snprintf(metric, len, "val_loss");
	if (json_object_object_get_ex(root, "objective", &o) && json_object_object_get_ex(o, "metric", &m))
		snprintf(metric, len, "%s", json_object_get_string(m));
	*has_batch = json_object_object_get_ex(root, "space", &sp) && json_object_object_get_ex(sp, "batch", NULL);
	json_object_put(root);
	if (strcmp(metric, "val_loss") && strcmp(metric, "val_accuracy") && strcmp(metric, "loss")) {
		if (lead)
			fprintf(stderr, "hpdlf-exec: --tune %s: objective.metric: expected val_loss, val_accuracy or loss, got "
			"'%s'\n", c->tune, metric);
		return 2;
	}
	if (strncmp(metric, "val_", 4) == 0 && !c->val_data)
		return usage("--tune: the objective %s needs --val-data FILE (or an .npz holding x and y)", metric);
	if (!c->batch && !*has_batch)
		return usage("%s", "--tune needs --batch N (or batch in the SPEC's space)");
	return 0;
}

static uint64_t current_rss(void)
{
	FILE *f = fopen("/proc/self/statm", "re");
	unsigned long long pages = 0, res = 0;

	if (f) {
		if (fscanf(f, "%llu %llu", &pages, &res) != 2)
			res = 0;
		fclose(f);
	}
	return res * (uint64_t)sysconf(_SC_PAGESIZE);
}

/* Each trial's --budget and --threads: the node's, less the data, the
 * runner and a margin, shared by the K trials.  Each trial's budget bounds
 * its own resident set, which a trial now fills with its pool (the
 * validation set paged through it) since the fixed overhead it reserves
 * shrank to what it touches; what the tree holds beyond the trials' sets
 * and the data then decides: the runner's growth after this measurement
 * (its job table, the children's pipes, the log) and each process's page
 * tables and share of the libraries.  The test's tree of two trials over a
 * 94 MiB validation set peaked 14 MiB above its budget without it. */
#define TREE_MARGIN(k) ((8ull << 20) + (uint64_t)(k) * (6ull << 20))
static int split_node(struct tune_ctx *x, uint64_t data_bytes)
{
	long online = sysconf(_SC_NPROCESSORS_ONLN);
	int cores = x->c->threads ? x->c->threads : online > 0 ? (int)online : 1;
	uint64_t fixed = data_bytes + current_rss() + TREE_MARGIN(x->parallel);
	char b[32];

	x->trial_threads = cores / x->parallel > 0 ? cores / x->parallel : 1;
	if (!x->c->budget)
		return 0;
	if (x->c->budget <= fixed || (x->c->budget - fixed) / (uint64_t)x->parallel < (8u << 20)) {
		fprintf(stderr, "hpdlf-exec: --budget %s leaves under 8 MiB for each of %d trials once the data and the "
			"runner (%s) are held\n", hp_format_size(x->c->budget, b, sizeof b), x->parallel,
			hp_format_size(fixed, (char[32]){ 0 }, 32));
		return 2;
	}
	x->trial_budget = (x->c->budget - fixed) / (uint64_t)x->parallel;
	return 0;
}

int tune_note_done(struct runner *r, const struct tune_job *j)
{
	if (j->trial >= r->nlast) {
		int n = j->trial + 16;
		struct tune_job *p = realloc(r->last, (size_t)n * sizeof *p);
		if (!p)
			return hp_error(-ENOMEM, "out of memory");
		for (int i = r->nlast; i < n; i++)
			p[i] = (struct tune_job){ .trial = -1 };
		r->last = p;
		r->nlast = n;
	}
	tune_job_clear(&r->last[j->trial]);
	struct hp_tune_job hj = { j->trial, j->from_step, j->to_step, j->nflags, (const char *const *)j->names,
				  (const char *const *)j->values };
	return tune_job_copy(&r->last[j->trial], &hj);
}

static int start_job(struct runner *r, const struct hp_tune_job *hj)
{
	struct tune_job *j = &r->run[r->n];
	int rc = tune_job_copy(j, hj);

	if (rc == 0)
		rc = tune_log_start(r->log, j);
	if (rc < 0)
		return rc;
	tune_table_event(r->tb, j, j->from_step > 0 ? "promoted" : "running", r->x.metric, NAN);
	if ((rc = tune_child_start(&r->x, j, NULL)) < 0)
		return rc;
	r->n++;
	return 0;
}

/* Start jobs while a slot is free and the search has one: 1 when the
 * search is finished, 0 when it waits, or an error. */
static int fill(struct runner *r)
{
	struct hp_tune_job hj;
	int rc;

	while (r->n < r->x.parallel && !tune_stop_sig) {
		if ((rc = hp_tune_next(r->t, &hj)) != 1)
			return rc;
		if ((rc = start_job(r, &hj)) < 0)
			return rc;
	}
	return 0;
}

static void watch(struct runner *r)
{
	uint64_t m = tune_tree_pss();

	if (m > r->peak)
		r->peak = m;
	tune_table_draw(r->tb, r->t, r->run, r->n, m);
}

/* Wait for the oldest job, watching the tree meanwhile. */
static int wait_oldest(struct runner *r, int *status)
{
	struct timespec ts = { 0, 100 * 1000 * 1000 };
	pid_t p;

	while ((p = waitpid(r->run[0].pid, status, WNOHANG)) == 0) {
		if (tune_stop_sig)
			return HP_ECANCELED;
		watch(r);
		nanosleep(&ts, NULL);
	}
	if (p < 0 && errno != EINTR)
		return hp_error(-errno, "waitpid: %s", strerror(errno));
	return p < 0 ? wait_oldest(r, status) : 0;
}

/* The oldest job's figure to the search and the log. */
static int finish_oldest(struct runner *r)
{
	struct tune_job *j = &r->run[0];
	int status = 0, rc = wait_oldest(r, &status), failed;
	double v = NAN;
	const char *state;

	if (rc < 0)
		return rc;
	j->pid = 0;
	tune_child_metric(&r->x, j, &v);
	failed = !WIFEXITED(status) || WEXITSTATUS(status) != 0 || !isfinite(v);
	if ((rc = hp_tune_report(r->t, j->trial, j->to_step, failed ? NAN : v, failed)) < 0)
		return rc;
	state = hp_tune_state(r->t, j->trial);
	if ((rc = tune_log_result(r->log, j, r->x.metric, failed ? NAN : v, state)) < 0)
		return rc;
	tune_table_event(r->tb, j, state, r->x.metric, failed ? NAN : v);
	if (!failed && (rc = tune_note_done(r, j)) < 0)
		return rc;
	tune_job_clear(j);
	memmove(&r->run[0], &r->run[1], (size_t)(r->n - 1) * sizeof r->run[0]);
	r->n--;
	return 0;
}

/* Ctrl-C, SIGTERM: the trials stop with a checkpoint (their own SIGTERM
 * handling), unreported, so that a re-run restarts them from there. */
static void stop_trials(struct runner *r)
{
	for (int i = 0; i < r->n; i++)
		if (r->run[i].pid > 0)
			kill(r->run[i].pid, SIGTERM);
	for (int i = 0; i < r->n; i++)
		if (r->run[i].pid > 0)
			waitpid(r->run[i].pid, NULL, 0);
}

static int search(struct runner *r)
{
	int rc = 0, finished = 0;

	for (int i = 0; i < r->n; i++) /* jobs the log left running: again, from their checkpoints */
		if ((rc = tune_child_start(&r->x, &r->run[i], NULL)) < 0)
			return rc;
	while (!tune_stop_sig) {
		if (!finished && (rc = fill(r)) < 0)
			break;
		finished |= rc == 2;
		if (r->n == 0) /* finished, or waiting for nothing */
			break;
		if ((rc = finish_oldest(r)) < 0)
			break;
	}
	if (tune_stop_sig || rc == HP_ECANCELED) {
		stop_trials(r);
		return HP_ECANCELED;
	}
	return rc < 0 ? rc : 0;
}

static int on_replayed(void *arg, const struct tune_job *j)
{
	return tune_note_done(arg, j);
}

/* The best trial: said, its flags printed (stdout) as a command line that
 * trains it again, its weights exported with --export-onnx. */
/* One word of a command line a shell takes back as it was. */
static void put_word(const char *w)
{
	static const char safe[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_./=:,+-@%";

	putchar(' ');
	if (*w && strspn(w, safe) == strlen(w)) {
		fputs(w, stdout);
		return;
	}
	putchar('\'');
	for (; *w; w++)
		fputs(*w == '\'' ? "'\\''" : (char[2]){ *w, 0 }, stdout);
	putchar('\'');
}

int tune_conclude(struct runner *r)
{
	const struct cli *c = r->x.c;
	int bt = -1, rc = 0, status = 0;
	double bm = NAN;

	if (hp_tune_best(r->t, &bt, &bm) < 0 || bt < 0 || bt >= r->nlast || r->last[bt].trial < 0) {
		char why[512];
		tune_last_words(r->x.dir, 0, why, sizeof why);
		fprintf(stderr, "hpdlf-exec: tune: no trial finished; trial 0 said: %s\n", why);
		return 1;
	}
	struct tune_job *j = &r->last[bt];
	if (!c->quiet)
		fprintf(stderr, "hpdlf-exec: tune: best trial %d: %s %.6g after %lld steps; peak memory of the trials %s "
		"(proportional set size)\n", bt, r->x.metric, bm, (long long)j->to_step,
		hp_format_size(r->peak, (char[32]){ 0 }, 32));
	fputs(c->argv[0], stdout);
	for (int i = 0; i < r->x.nbase; i++)
		put_word(r->x.base[i]);
	for (int k = 0; k < j->nflags; k++) {
		printf(" --%s", strncmp(j->names[k], "--", 2) ? j->names[k] : j->names[k] + 2);
		put_word(j->values[k]);
	}
	printf(" --steps %lld --threads %d", (long long)j->to_step, r->x.trial_threads);
	if (r->x.trial_budget)
		printf(" --budget %llu", (unsigned long long)r->x.trial_budget);
	printf("\n");
	fflush(stdout);
	if (!c->export_onnx)
		return 0;
	struct tune_job ex = *j;
	if ((rc = tune_child_start(&r->x, &ex, c->export_onnx)) < 0)
		return rc;
	while (waitpid(ex.pid, &status, 0) < 0 && errno == EINTR)
		;
	if (!WIFEXITED(status) || WEXITSTATUS(status)) {
		fprintf(stderr, "hpdlf-exec: tune: exporting trial %d failed (see %s/trial-%d/output.txt)\n", bt, r->x.dir,
			bt);
		return 1;
	}
	if (!c->quiet)
		fprintf(stderr, "hpdlf-exec: tune: trial %d's weights written to %s\n", bt, c->export_onnx);
	return 0;
}

/* Ranks of the job on this node: they share its budget and cores. */
static int local_ranks(void)
{
	const char *names[] = { "OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS", "SLURM_NTASKS_PER_NODE", NULL };

	for (int i = 0; names[i]; i++)
		if (getenv(names[i]) && atoi(getenv(names[i])) > 0)
			return atoi(getenv(names[i]));
	return nlaunched;
}

static int setup(struct runner *r, struct cli *c, const struct option *opts, const char *metric)
{
	uint64_t data_bytes;
	int rc;

	r->x.c = c;
	r->x.opts = opts;
	r->x.metric = metric;
	r->x.parallel = c->parallel > 0 ? (int)c->parallel : nlaunched ? local_ranks() : 1;
	if (asprintf(&r->x.dir, "%s.d", c->tune_log) < 0)
		return hp_error(-ENOMEM, "out of memory");
	if (mkdir(r->x.dir, 0755) < 0 && errno != EEXIST)
		return hp_error(-errno, "%s: %s", r->x.dir, strerror(errno));
	if (!(r->x.base = tune_base_args(c, opts, &r->x.nbase)))
		return hp_error(-ENOMEM, "out of memory");
	if ((rc = tune_share_open(c, &data_bytes)) < 0)
		return rc;
	if ((rc = split_node(&r->x, data_bytes)) != 0)
		return rc;
	r->tb = tune_table_new(c->quiet ? -1 : isatty(2), nlaunched ? nlaunched : r->x.parallel, r->x.dir);
	return r->tb ? 0 : hp_error(-ENOMEM, "out of memory");
}

static int run(struct runner *r, const struct hp_tune_spec *spec)
{
	const struct cli *c = r->x.c;
	int rc;

	signal(SIGINT, on_stop);
	signal(SIGTERM, on_stop);
	if (!lead)
		return tune_mpi_search(r);
	if ((rc = hp_tune_create(spec, &r->t)) < 0)
		return rc;
	rc = tune_log_replay(c->tune_log, r->t, r->x.metric, r->run, r->x.parallel, &r->n, on_replayed, r);
	if (rc < 0)
		return rc;
	if (!(r->log = fopen(c->tune_log, "ae")))
		return hp_error(-errno, "%s: %s", c->tune_log, strerror(errno));
	if (r->n && !c->quiet)
		fprintf(stderr, "hpdlf-exec: tune: resuming %s: %d trial job%s restarted from %s checkpoint%s\n",
			c->tune_log, r->n, r->n == 1 ? "" : "s", r->n == 1 ? "its" : "their", r->n == 1 ? "" : "s");
	return nlaunched ? tune_mpi_search(r) : search(r);
}

static void runner_free(struct runner *r)
{
	for (int i = 0; i < r->n; i++)
		tune_job_clear(&r->run[i]);
	for (int i = 0; i < r->nlast; i++)
		tune_job_clear(&r->last[i]);
	free(r->last);
	if (r->log)
		fclose(r->log);
	tune_table_free(r->tb);
	hp_tune_free(r->t);
	free(r->x.base);
	free(r->x.dir);
}

int exec_tune_main(struct cli *c, const struct option *opts)
{
	static struct runner r; /* large (the running jobs' flags): not on the stack */
	struct hp_tune_spec *spec = NULL;
	char metric[64];
	int has_batch, rc;

	int rank, size;

	if (hp_comm_env(&rank, &size) && size > 1) {
		nlaunched = size;
		lead = rank == 0;
	}
	if ((rc = check_flags(c)) != 0 || (rc = load_spec(c, &spec, metric, sizeof metric, &has_batch)) != 0) {
		hp_tune_spec_free(spec);
		return rc;
	}
	if (nlaunched && (rc = hp_comm_init()) < 0) {
		fprintf(stderr, "hpdlf-exec: %s\n", hp_errmsg());
		hp_tune_spec_free(spec);
		return hp_exit_status(rc);
	}
	rc = setup(&r, c, opts, metric);
	if (rc == 0)
		rc = run(&r, spec);
	if (r.tb && rc == 0)
		tune_table_draw(r.tb, r.t, r.run, r.n, tune_tree_pss());
	tune_table_free(r.tb);
	r.tb = NULL;
	if (rc == 0 && lead)
		rc = tune_conclude(&r);
	else if (rc == HP_ECANCELED && lead)
		fprintf(stderr, "hpdlf-exec: tune: %s; run the same command again to resume\n",
			tune_stop_sig == SIGTERM ? "terminated" : "interrupted");
	else if (rc < 0 && nlaunched)
		fprintf(stderr, "hpdlf-exec: tune: rank %d: %s\n", rank,
			hp_errmsg()[0] ? hp_errmsg() : hp_strerror(rc));
	else if (rc < 0)
		fprintf(stderr, "hpdlf-exec: tune: %s\n", hp_errmsg()[0] ? hp_errmsg() : hp_strerror(rc));
	runner_free(&r);
	hp_tune_spec_free(spec);
	if (nlaunched)
		hp_comm_finalize();
	if (rc == HP_ECANCELED)
		return 128 + (tune_stop_sig ? (int)tune_stop_sig : SIGINT);
	return rc < 0 ? (rc == HP_EUSAGE ? 2 : hp_exit_status(rc)) : rc;
}
