/* What the runner shows: on a terminal a table redrawn in place (the trials
 * running with their steps, the best so far, the jobs done per rung); else
 * one plain line per event, for logs and pipes.  And the memory of the
 * process tree it watches, as proportional set sizes (a page the trials
 * share, such as the one copy of the data, counts once in the sum). */
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "hpdlf/error.h"
#include "hpdlf/tensor.h"
#include "tools/tune_run.h"

#define MAX_RUNGS 16

struct tune_table {
	const char *dir;         /* TUNE_LOG.d: a failed trial's output.txt */
	int tty, quiet, parallel, drawn;
	int64_t rung_step[MAX_RUNGS];
	int rung_jobs[MAX_RUNGS], nrungs, done, failed;
	const char *metric;
};

struct tune_table *tune_table_new(int tty, int parallel, const char *dir)
{
	struct tune_table *tb = calloc(1, sizeof *tb);

	if (tb) {
		tb->dir = dir;
		tb->quiet = tty < 0;
		tb->tty = tty > 0;
		tb->parallel = parallel;
	}
	return tb;
}

void tune_table_free(struct tune_table *tb)
{
	free(tb);
}

static void count_rung(struct tune_table *tb, int64_t step)
{
	int i = 0;

	while (i < tb->nrungs && tb->rung_step[i] != step)
		i++;
	if (i == tb->nrungs && tb->nrungs < MAX_RUNGS)
		tb->rung_step[tb->nrungs++] = step;
	if (i < MAX_RUNGS)
		tb->rung_jobs[i]++;
}

void tune_last_words(const char *dir, int trial, char *buf, size_t len)
{
	char path[4200], line[512];
	FILE *f;

	snprintf(path, sizeof path, "%s/trial-%d/output.txt", dir, trial);
	snprintf(buf, len, "no output (see %s)", path);
	if (!(f = fopen(path, "re")))
		return;
	while (fgets(line, sizeof line, f))
		if (line[0] != '\n' && line[0] != '(')
			snprintf(buf, len, "%.*s", (int)strcspn(line, "\n"), line);
	fclose(f);
}

void tune_table_event(struct tune_table *tb, const struct tune_job *j, const char *what, const char *metric,
		      double v)
{
	char flags[1024];

	tb->metric = metric;
	if (!strcmp(what, "failed"))
		tb->failed++;
	if (strcmp(what, "running") && strcmp(what, "promoted")) {
		tb->done++;
		count_rung(tb, j->to_step);
	}
	if (tb->tty || tb->quiet)
		return;
	tune_flags_str(j, flags, sizeof flags);
	if (!strcmp(what, "running") || !strcmp(what, "promoted"))
		fprintf(stderr, "hpdlf-exec: tune: trial %d %s: steps %lld..%lld, %s\n", j->trial,
			strcmp(what, "running") ? "promoted" : "started", (long long)j->from_step, (long long)j->to_step,
			flags);
	else if (strcmp(what, "failed"))
		fprintf(stderr, "hpdlf-exec: tune: trial %d at step %lld: %s %.6g (%s)\n", j->trial, (long long)j->to_step,
			metric, v, what);
	else {
		char why[512];
		tune_last_words(tb->dir, j->trial, why, sizeof why);
		fprintf(stderr, "hpdlf-exec: tune: trial %d failed by step %lld: %s\n", j->trial, (long long)j->to_step, why);
	}
}

/* Redrawn in place: the cursor goes back up over the previous table. */
void tune_table_draw(struct tune_table *tb, const struct hp_tune *t, const struct tune_job *running, int n,
		     uint64_t tree_bytes)
{
	char flags[1024], best[96] = "none yet", mem[32];
	int bt = -1, lines = 0;
	double bm;

	if (!tb->tty)
		return;
	if (hp_tune_best(t, &bt, &bm) >= 0 && bt >= 0)
		snprintf(best, sizeof best, "trial %d, %s %.6g", bt, tb->metric ? tb->metric : "metric", bm);
	if (tb->drawn)
		fprintf(stderr, "\033[%dF", tb->drawn);
	fprintf(stderr, "\033[Jtune: %d running of %d, %d jobs done (%d failed), best %s, memory %s\n", n, tb->parallel,
		tb->done, tb->failed, best, hp_format_size(tree_bytes, mem, sizeof mem));
	lines++;
	fprintf(stderr, "  rungs:");
	for (int i = 0; i < tb->nrungs; i++)
		fprintf(stderr, " step %lld: %d", (long long)tb->rung_step[i], tb->rung_jobs[i]);
	fputc('\n', stderr);
	lines++;
	for (int i = 0; i < n; i++) {
		tune_flags_str(&running[i], flags, sizeof flags);
		fprintf(stderr, "  trial %-4d steps %lld..%lld  %.60s\n", running[i].trial, (long long)running[i].from_step,
			(long long)running[i].to_step, flags);
		lines++;
	}
	tb->drawn = lines;
	fflush(stderr);
}

static uint64_t pss_of(int pid)
{
	char path[64], line[256];
	uint64_t kb = 0;
	FILE *f;

	snprintf(path, sizeof path, "/proc/%d/smaps_rollup", pid);
	if (!(f = fopen(path, "re")))
		return 0;
	while (fgets(line, sizeof line, f))
		if (!strncmp(line, "Pss:", 4)) {
			kb = strtoull(line + 4, NULL, 10);
			break;
		}
	fclose(f);
	return kb * 1024;
}

uint64_t tune_tree_pss(void)
{
	uint64_t sum = pss_of(getpid());
	int self = getpid();
	DIR *d = opendir("/proc");
	struct dirent *e;

	while (d && (e = readdir(d))) {
		char path[64], buf[512];
		int pid = atoi(e->d_name), ppid = -1;
		FILE *f;
		if (pid <= 0)
			continue;
		snprintf(path, sizeof path, "/proc/%d/stat", pid);
		if (!(f = fopen(path, "re")))
			continue;
		if (fgets(buf, sizeof buf, f)) {
			char *p = strrchr(buf, ')');
			if (p)
				sscanf(p + 2, "%*c %d", &ppid);
		}
		fclose(f);
		if (ppid == self)
			sum += pss_of(pid);
	}
	if (d)
		closedir(d);
	return sum;
}
