/* hpdlf-store-inspect: tiering statistics of running hpdlf processes (their
 * shared-memory statistics pages) and of hpdlf-store daemons; --plot draws
 * memory per tier and I/O bandwidth from a trace.  docs/hpdlf-store-inspect.md */
#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "hpdlf/error.h"
#include "tools/inspect.h"
#include "hpdlf-store-inspect.help.h" /* usage_text, generated from the docs page */

#define PROG "hpdlf-store-inspect"
#define RATE_SAMPLE_S 0.25 /* gap between the two reads of a one-shot run */

enum fmt { FMT_TABLE, FMT_JSON, FMT_PROM };

struct cli {
	enum fmt fmt;
	double watch;           /* seconds; 0: one shot */
	long count;             /* frames in --watch (0: until interrupted) */
	struct insp_opts o;
	const char *token_file;
	const char *plot, *title;
	int gc;                 /* --gc: remove stale pages */
	char **targets;
	int ntargets;
};

volatile sig_atomic_t insp_stop, insp_exit_on_signal;

/* Pages that scan mode leaves out, kept from frame to frame so each gets
 * one warning (on a terminal that --watch redraws: one line each frame). */
struct skipped {
	pid_t pid;
	int shown;
	char err[512];
};
struct skip_list {
	struct skipped *v;
	int n;
};

static void on_signal(int sig)
{
	if (insp_exit_on_signal)
		_exit(128 + sig);
	insp_stop = sig;
}

/* No SA_RESTART: a blocked read or write returns EINTR and the loops see
 * insp_stop.  SA_RESETHAND: should anything still hang, a second signal
 * kills.  A signal the parent ignores (a background job's SIGINT) stays
 * ignored. */
static void catch_signals(void)
{
	static const int sigs[] = { SIGINT, SIGTERM };
	struct sigaction sa = { .sa_handler = on_signal, .sa_flags = SA_RESETHAND }, old;

	sigemptyset(&sa.sa_mask);
	for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++)
		if (sigaction(sigs[i], NULL, &old) == 0 && old.sa_handler != SIG_IGN)
			sigaction(sigs[i], &sa, NULL);
}

static int usage_error(const char *fmt, const char *arg)
{
	fprintf(stderr, PROG ": ");
	fprintf(stderr, fmt, arg);
	fprintf(stderr, "\n(see " PROG " --help)\n");
	return 2;
}

static int parse_seconds(const char *arg, double *out)
{
	char *end;

	errno = 0;
	*out = strtod(arg, &end);
	if (errno || end == arg || *end || !(*out > 0) || *out > 86400)
		return usage_error("--watch: expected seconds in (0, 86400], got '%s'", arg);
	return 0;
}

static int parse_cli(int argc, char **argv, struct cli *c)
{
	enum { O_JSON = 256, O_PROM, O_WATCH, O_COUNT, O_TENSORS, O_TOKEN, O_PLOT, O_TITLE, O_GC, O_HELP };
	static const struct option opts[] = {
		{ "json", no_argument, 0, O_JSON },        { "prometheus", no_argument, 0, O_PROM },
		{ "watch", required_argument, 0, O_WATCH }, { "count", required_argument, 0, O_COUNT },
		{ "tensors", no_argument, 0, O_TENSORS },  { "token-file", required_argument, 0, O_TOKEN },
		{ "plot", required_argument, 0, O_PLOT },  { "title", required_argument, 0, O_TITLE },
		{ "gc", no_argument, 0, O_GC },            { "help", no_argument, 0, O_HELP },
		{ 0, 0, 0, 0 },
	};
	int k, json = 0, prom = 0;
	char *end;

	memset(c, 0, sizeof *c);
	c->token_file = getenv("HPDLF_TOKEN_FILE");
	opterr = 0;
	while ((k = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (k) {
		case O_JSON: json = 1; break;
		case O_PROM: prom = 1; break;
		case O_WATCH:
			if (parse_seconds(optarg, &c->watch))
				return 2;
			break;
		case O_COUNT:
			errno = 0;
			c->count = strtol(optarg, &end, 10);
			if (errno || end == optarg || *end || c->count < 1)
				return usage_error("--count: expected a positive integer, got '%s'", optarg);
			break;
		case O_TENSORS: c->o.tensors = 1; break;
		case O_TOKEN: c->token_file = optarg; break;
		case O_PLOT: c->plot = optarg; break;
		case O_TITLE: c->title = optarg; break;
		case O_GC: c->gc = 1; break;
		case 'h':
		case O_HELP: fputs(usage_text, stdout); exit(0);
		default:
			return usage_error("unknown or incomplete option '%s'", argv[optind - 1]);
		}
	}
	if (json && prom)
		return usage_error("%s", "--json and --prometheus exclude each other");
	c->fmt = json ? FMT_JSON : prom ? FMT_PROM : FMT_TABLE;
	c->targets = argv + optind;
	c->ntargets = argc - optind;
	if (c->plot && c->ntargets != 1)
		return usage_error("%s", "--plot OUT.svg takes exactly one input: a Chrome trace (hpdlf-exec --trace) or a --log-json file");
	if (c->count && !c->watch)
		return usage_error("%s", "--count only makes sense with --watch");
	if (c->gc && (c->ntargets || c->watch || c->plot))
		return usage_error("%s", "--gc takes no targets, --watch nor --plot");
	return 0;
}

/* "1234" (a PID) or "HOST:PORT"; anything else is a usage error. */
static int parse_target(const char *s, struct insp_target *t)
{
	const char *colon = strrchr(s, ':');
	char *end;
	long v;

	memset(t, 0, sizeof *t);
	t->explicit_target = 1;
	snprintf(t->spec, sizeof t->spec, "%s", s);
	if (strlen(s) >= sizeof t->spec)
		return usage_error("target too long: '%s'", s);
	if (isdigit((unsigned char)s[0]) && !colon) {
		errno = 0;
		v = strtol(s, &end, 10);
		if (errno || *end || v < 1 || v > 0x3fffffff)
			return usage_error("bad target '%s': expected a PID or HOST:PORT", s);
		t->kind = INSP_LOCAL;
		t->pid = (pid_t)v;
		return 0;
	}
	if (colon && colon > s && colon[1]) {
		errno = 0;
		v = strtol(colon + 1, &end, 10);
		if (!errno && !*end && v >= 1 && v <= 65535) {
			t->kind = INSP_REMOTE;
			return 0;
		}
	}
	return usage_error("bad target '%s': expected a PID or HOST:PORT", s);
}

/* Scan mode: the pages now present, keeping what was known of old ones. */
static int rescan(struct insp_target **list, int *n)
{
	struct insp_target *fresh;
	int m, rc = insp_scan_local(&fresh, &m);

	if (rc < 0)
		return rc;
	for (int i = 0; i < m; i++)
		for (int j = 0; j < *n; j++)
			if ((*list)[j].pid == fresh[i].pid)
				fresh[i] = (*list)[j];
	free(*list);
	*list = fresh;
	*n = m;
	return 0;
}

static void read_all(struct insp_target *t, int n)
{
	for (int i = 0; i < n && !insp_stop; i++)
		insp_read(&t[i]);
}

static const struct skipped *skip_find(const struct skip_list *s, pid_t pid)
{
	for (int i = 0; i < s->n; i++)
		if (s->v[i].pid == pid)
			return &s->v[i];
	return NULL;
}

/* Scan mode shows pages only: what sits under a page's name but cannot be
 * read as one (a link, a FIFO, a short or foreign file, an unknown layout)
 * moves from the targets to the frame's skip list, already warned about if
 * `prev` (the last frame's list) says so; a page gone since the listing
 * (its process closed its store) is dropped. */
static void drop_non_pages(struct insp_target *t, int *n, struct skip_list *sk, const struct skip_list *prev)
{
	int k = 0;

	for (int i = 0; i < *n; i++) {
		if (t[i].state == INSP_LIVE || t[i].state == INSP_STALE) {
			t[k++] = t[i];
			continue;
		}
		if (t[i].state != INSP_ERROR)
			continue;
		/* before the realloc: prev may be sk itself */
		const struct skipped *old = skip_find(prev, t[i].pid);
		int shown = old && old->shown && strcmp(old->err, t[i].err) == 0;
		struct skipped *v = realloc(sk->v, (size_t)(sk->n + 1) * sizeof *v);
		if (!v)
			continue;
		sk->v = v;
		v += sk->n++;
		v->pid = t[i].pid;
		v->shown = shown;
		snprintf(v->err, sizeof v->err, "%s", t[i].err);
	}
	*n = k;
}

/* Read every target; scan mode: list the pages again first. */
static int refresh(struct insp_target **t, int *n, int scan, struct skip_list *sk)
{
	struct skip_list prev = *sk;
	int rc = 0;

	if (!scan) {
		read_all(*t, *n);
		return 0;
	}
	sk->v = NULL;
	sk->n = 0;
	if (rescan(t, n) < 0) {
		rc = -1;
	} else {
		read_all(*t, *n);
		drop_non_pages(*t, n, sk, &prev);
	}
	free(prev.v);
	return rc;
}

static int any_live(const struct insp_target *t, int n)
{
	for (int i = 0; i < n; i++)
		if (t[i].state == INSP_LIVE)
			return 1;
	return 0;
}

/* Sleep, returning early on SIGINT or SIGTERM: the signals are blocked
 * while insp_stop is tested and ppoll unblocks them atomically, so one that
 * arrives just before the wait still ends it. */
static void sleep_s(double s)
{
	struct timespec ts = { (time_t)s, (long)((s - floor(s)) * 1e9) };
	sigset_t block, old;

	sigemptyset(&block);
	sigaddset(&block, SIGINT);
	sigaddset(&block, SIGTERM);
	sigprocmask(SIG_BLOCK, &block, &old);
	if (!insp_stop)
		ppoll(NULL, 0, &ts, &old);
	sigprocmask(SIG_SETMASK, &old, NULL);
}

static void print_frame(const struct cli *c, struct insp_target *t, int n, int scan, FILE *errf,
			struct skip_list *sk)
{
	for (int i = 0; i < sk->n; i++)
		if (!sk->v[i].shown || errf == stdout) {
			fprintf(errf, PROG ": skipped %s\n", sk->v[i].err);
			sk->v[i].shown = 1;
		}
	for (int i = 0; i < n; i++)
		if (t[i].state != INSP_LIVE && (t[i].state != INSP_STALE || t[i].explicit_target))
			fprintf(errf, PROG ": %s\n", t[i].err);
	if (scan && n == 0)
		fprintf(errf, PROG ": no hpdlf statistics pages of this user on this node (%s/hpdlf-store.<pid>)\n",
			insp_local_dir());
	switch (c->fmt) {
	case FMT_JSON: insp_print_json(stdout, t, n, &c->o, !c->watch); break;
	case FMT_PROM: insp_print_prometheus(stdout, t, n); break;
	default: insp_print_table(stdout, t, n, &c->o); break;
	}
	fflush(stdout);
}

/* 0 if every named target was read live (scan mode: at least one page). */
static int status_of(const struct insp_target *t, int n, int scan)
{
	if (scan)
		return n ? 0 : 1;
	for (int i = 0; i < n; i++)
		if (t[i].state != INSP_LIVE)
			return 1;
	return 0;
}

/* Exit status: 128 + the signal after SIGINT or SIGTERM (the next step
 * is skipped, output included), else as status_of says. */
static int run(const struct cli *c, struct insp_target *t, int n, int scan)
{
	int tty = c->watch && isatty(STDOUT_FILENO) && c->fmt == FMT_TABLE, rc = 0;
	struct skip_list sk = { NULL, 0 };
	long frame = 0;

	if (refresh(&t, &n, scan, &sk) < 0)
		goto fail;
	if (any_live(t, n) && !insp_stop) {
		sleep_s(RATE_SAMPLE_S); /* a second read gives the bandwidth now */
		read_all(t, n);
		if (scan)
			drop_non_pages(t, &n, &sk, &sk);
	}
	while (!insp_stop) {
		if (tty)
			fputs("\033[H\033[2J", stdout);
		print_frame(c, t, n, scan, tty ? stdout : stderr, &sk);
		if (!c->watch || (c->count && ++frame >= c->count))
			break;
		sleep_s(c->watch);
		if (insp_stop)
			break;
		if (refresh(&t, &n, scan, &sk) < 0)
			goto fail;
		if (!tty && c->fmt == FMT_TABLE)
			fputs("\n", stdout);
	}
	rc = insp_stop ? 128 + insp_stop : c->watch ? 0 : status_of(t, n, scan);
	goto out;
fail:
	fprintf(stderr, PROG ": %s\n", hp_errmsg());
	rc = 1;
out:
	free(t);
	free(sk.v);
	return rc;
}

int main(int argc, char **argv)
{
	struct cli c;
	struct insp_target *t = NULL;
	int rc;

	if ((rc = parse_cli(argc, argv, &c)))
		return rc;
	if (c.plot) {
		rc = insp_plot(c.targets[0], c.plot, c.title);
		if (rc < 0)
			fprintf(stderr, PROG ": %s\n", hp_errmsg()[0] ? hp_errmsg() : hp_strerror(rc));
		return rc < 0 ? (rc == HP_EUSAGE || rc == HP_EFORMAT || rc == HP_EDATA ? 2 : 1) : 0;
	}
	if (c.gc) {
		int n = 0;
		if ((rc = hs_statpage_gc(&n)) < 0) {
			fprintf(stderr, PROG ": %s\n", hp_errmsg()[0] ? hp_errmsg() : hp_strerror(rc));
			return 1;
		}
		printf("removed %d stale page%s\n", n, n == 1 ? "" : "s");
		return 0;
	}
	if (c.ntargets && !(t = calloc((size_t)c.ntargets, sizeof *t)))
		return 1;
	for (int i = 0; i < c.ntargets; i++)
		if ((rc = parse_target(c.targets[i], &t[i]))) {
			free(t);
			return rc;
		}
	for (int i = 0; i < c.ntargets; i++)
		t[i].token_file = c.token_file;
	for (int i = 0; i < c.ntargets; i++)
		if (t[i].kind == INSP_REMOTE && c.token_file && access(c.token_file, R_OK) < 0) {
			fprintf(stderr, PROG ": --token-file %s: %s\n", c.token_file, strerror(errno));
			free(t);
			return 2;
		}
	catch_signals();
	return run(&c, t, c.ntargets, c.ntargets == 0);
}
