/* A trial's job as a child process: this program again (fork, exec of
 * /proc/self/exe) with the command line the runner was given, less its own
 * flags, plus the trial's flags, its step range, its checkpoint directory
 * and --log-json file; then its figure read back from that file. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <json-c/json.h>

#include "hpdlf/error.h"
#include "tools/exec_cli.h"
#include "tools/tune_run.h"

/* Flags the runner sets for each trial (or keeps to itself). */
static const char *const own[] = { "tune", "tune-log", "parallel", "export-onnx", "log-json", "stats-json",
				   "checkpoint", "checkpoint-every", "resume", "resume-if-present", "budget",
				   "threads", "quiet", "listen-metrics", "trace", NULL };

static int is_own(const char *name, size_t len)
{
	for (int i = 0; own[i]; i++)
		if (strlen(own[i]) == len && !strncmp(own[i], name, len))
			return 1;
	return 0;
}

static int takes_arg(const struct option *opts, const char *name, size_t len)
{
	for (int i = 0; opts[i].name; i++)
		if (strlen(opts[i].name) == len && !strncmp(opts[i].name, name, len))
			return opts[i].has_arg == required_argument;
	return 0;
}

char **tune_base_args(const struct cli *c, const struct option *opts, int *n)
{
	char **out = calloc((size_t)c->argc + 1, sizeof *out);

	*n = 0;
	if (!out)
		return NULL;
	for (int i = 1; i < c->argc; i++) {
		const char *a = c->argv[i];
		size_t len = strcspn(a + 2, "=");
		int arg = !strncmp(a, "--", 2) && a[2] && !a[2 + len] && takes_arg(opts, a + 2, len);
		if (!strncmp(a, "--", 2) && a[2] && is_own(a + 2, len)) {
			i += arg; /* and its value */
			continue;
		}
		out[(*n)++] = c->argv[i];
		if (arg && i + 1 < c->argc)
			out[(*n)++] = c->argv[++i];
	}
	return out;
}

void tune_flags_str(const struct tune_job *j, char *buf, size_t len)
{
	size_t n = 0;

	buf[0] = 0;
	for (int k = 0; k < j->nflags && n < len; k++)
		n += (size_t)snprintf(buf + n, len - n, "%s--%s %s", k ? " " : "", j->names[k], j->values[k]);
}

static char *trial_path(const struct tune_ctx *x, int trial, const char *leaf)
{
	char *p = NULL;

	if (asprintf(&p, "%s/trial-%d%s%s", x->dir, trial, leaf ? "/" : "", leaf ? leaf : "") < 0)
		return NULL;
	return p;
}

/* A command line being built: its entries, and the ones it allocated. */
struct cmd {
	char **av;
	int n;
	char *mem[TUNE_MAX_FLAGS + 8];
	int nmem;
};

static void add(struct cmd *m, const char *s)
{
	m->av[m->n++] = (char *)s;
}

/* An allocated entry (NULL when out of memory: the caller checks). */
static void add_own(struct cmd *m, char *s)
{
	m->mem[m->nmem++] = s;
	m->av[m->n++] = s;
}

static char *fmt(const char *f, long long v)
{
	char *p = NULL;

	return asprintf(&p, f, v) < 0 ? NULL : p;
}

static void cmd_free(struct cmd *m)
{
	for (int i = 0; i < m->nmem; i++)
		free(m->mem[i]);
	free(m->av);
}

/* The child's command line: argv[0], the base, the trial's flags, then
 * the runner's settings for it (later flags win). */
static int child_argv(const struct tune_ctx *x, const struct tune_job *j, const char *export_path, struct cmd *m)
{
	memset(m, 0, sizeof *m);
	if (!(m->av = calloc((size_t)(x->nbase + j->nflags + 24), sizeof *m->av)))
		return hp_error(-ENOMEM, "out of memory");
	add(m, x->c->argv[0]);
	for (int i = 0; i < x->nbase; i++)
		add(m, x->base[i]);
	for (int k = 0; k < j->nflags; k++) {
		char *f = NULL;
		const char *name = strncmp(j->names[k], "--", 2) ? j->names[k] : j->names[k] + 2;
		add_own(m, asprintf(&f, "--%s=%s", name, j->values[k]) < 0 ? NULL : f);
	}
	add(m, "--steps");
	add_own(m, fmt("%lld", (long long)j->to_step));
	add(m, "--threads");
	add_own(m, fmt("%lld", (long long)x->trial_threads));
	add(m, "--checkpoint");
	add_own(m, trial_path(x, j->trial, "checkpoint"));
	add(m, "--resume-if-present");
	add(m, "--quiet");
	if (x->trial_budget) {
		add(m, "--budget");
		add_own(m, fmt("%lld", (long long)x->trial_budget));
	}
	add(m, export_path ? "--export-onnx" : "--log-json");
	if (export_path)
		add(m, export_path);
	else
		add_own(m, trial_path(x, j->trial, "log.jsonl"));
	for (int i = 0; i < m->nmem; i++)
		if (!m->mem[i])
			return hp_error(-ENOMEM, "out of memory");
	return 0;
}

/* In the child: die with the runner (a killed runner leaves no orphans
 * training on), its output to trial-N/output.txt, then exec.  A runner
 * killed between the fork and the prctl sends no signal: the child then
 * finds its parent changed and exits.  Such an orphan, slow to start on
 * a loaded machine, trained its job beside the twin a resumed search
 * started, in the same checkpoint directory and log. */
static void child_exec(const char *out, char **av, pid_t runner)
{
	const char *slow = getenv("HPDLF_TEST_TRIAL_START_US"); /* check_tune.py: a child slow to start */
	int fd;

	if (slow)
		usleep((useconds_t)atol(slow));
	if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0 || getppid() != runner)
		_exit(127);
	fd = out ? open(out, O_WRONLY | O_CREAT | O_APPEND, 0644) : -1;
	if (fd >= 0) {
		dup2(fd, 1);
		dup2(fd, 2);
		close(fd);
	}
	signal(SIGINT, SIG_IGN); /* Ctrl-C is the runner's: it stops the trials itself */
	/* under mpirun/srun a trial is a process of its own, not a rank
	 * (exec/comm_env.c reads these) */
	static const char *const launcher[] = { "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK",
						"PMI_SIZE", "SLURM_PROCID", NULL };
	for (int i = 0; launcher[i]; i++)
		unsetenv(launcher[i]);
	execv("/proc/self/exe", av);
	fprintf(stderr, "hpdlf-exec: cannot start a trial: %s\n", strerror(errno));
	_exit(127);
}

int tune_child_start(const struct tune_ctx *x, struct tune_job *j, const char *export_path)
{
	char *dir = trial_path(x, j->trial, NULL);
	struct cmd m;
	pid_t pid;
	int rc;

	if (!dir || (mkdir(dir, 0755) < 0 && errno != EEXIST)) {
		int e = dir ? errno : ENOMEM;
		free(dir);
		return hp_error(-e, "%s/trial-%d: %s", x->dir, j->trial, strerror(e));
	}
	free(dir);
	if ((rc = child_argv(x, j, export_path, &m)) < 0) {
		cmd_free(&m);
		return rc;
	}
	add_own(&m, trial_path(x, j->trial, "output.txt"));
	m.av[--m.n] = NULL; /* kept in mem, not an argument */
	fflush(NULL);
	pid_t runner = getpid();
	pid = fork();
	if (pid == 0)
		child_exec(m.mem[m.nmem - 1], m.av, runner);
	rc = pid < 0 ? hp_error(-errno, "fork: %s", strerror(errno)) : 0;
	cmd_free(&m);
	j->pid = pid > 0 ? (int)pid : 0;
	return rc;
}

/* The figure at the job's last step: the last line of the trial's
 * --log-json for step to_step - 1 holding it (a resumed job appends). */
int tune_child_metric(const struct tune_ctx *x, const struct tune_job *j, double *metric)
{
	char *path = trial_path(x, j->trial, "log.jsonl"), *line = NULL;
	FILE *f = path ? fopen(path, "re") : NULL;
	size_t cap = 0;

	*metric = NAN;
	free(path);
	if (!f)
		return 0;
	while (getline(&line, &cap, f) > 0) {
		json_object *o = json_tokener_parse(line), *s, *m;
		if (o && json_object_object_get_ex(o, "step", &s) && json_object_get_int64(s) == j->to_step - 1 &&
		    json_object_object_get_ex(o, x->metric, &m))
			*metric = m ? json_object_get_double(m) : NAN; /* null: not finite */
		json_object_put(o);
	}
	free(line);
	fclose(f);
	return 0;
}
