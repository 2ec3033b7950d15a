/* --compact: one line per process or daemon, like `nvidia-smi dmon`, so
 * that --watch redraws a screen instead of scrolling 30 lines a target.
 * Columns that do not fit the width ($COLUMNS, else the terminal's, else
 * 80) are dropped, least useful first (PRIORITY); the target, its state
 * and its memory against the budget stay. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>

#include "tools/inspect.h"

enum { K_TARGET, K_STATE, K_AGE, K_BUDGET, K_RESIDENT, K_PCT, K_BELOW, K_READ, K_WRITE, K_HIT, K_PF, K_P99, NCOLS };

static const struct {
	const char *head;
	int width, priority;    /* priority 0 is kept first */
} cols[NCOLS] = {
	[K_TARGET] = { "TARGET", 16, 0 },  [K_STATE] = { "STATE", 5, 1 },   [K_AGE] = { "AGE", 6, 9 },
	[K_BUDGET] = { "BUDGET", 7, 4 },   [K_RESIDENT] = { "RESIDENT", 8, 2 }, [K_PCT] = { "%BUD", 4, 3 },
	[K_BELOW] = { "BELOW", 7, 5 },     [K_READ] = { "READ/s", 7, 6 },   [K_WRITE] = { "WRITE/s", 7, 7 },
	[K_HIT] = { "HIT%", 5, 8 },        [K_PF] = { "PF%", 5, 10 },       [K_P99] = { "P99", 6, 11 },
};

static int width_of(FILE *f)
{
	const char *env = getenv("COLUMNS");
	struct winsize ws;
	long v;

	if (env && (v = strtol(env, NULL, 10)) > 0)
		return (int)(v < 30 ? 30 : v > 1000 ? 1000 : v);
	if (ioctl(fileno(f), TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0)
		return ws.ws_col;
	return 80;
}

static void size_cell(double v, char *buf, size_t len)
{
	static const char units[] = "BKMGTP";
	int u = 0;

	if (v < 0) {
		snprintf(buf, len, "-");
		return;
	}
	while (v >= 1024 && u < 5) {
		v /= 1024;
		u++;
	}
	snprintf(buf, len, v < 10 && u ? "%.1f%c" : "%.0f%c", v, units[u]);
}

static void pct_cell(double r, char *buf, size_t len)
{
	if (r < 0)
		snprintf(buf, len, "-");
	else
		snprintf(buf, len, "%.0f%%", 100 * r);
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* The cells of a process's page. */
static void page_cells(const struct insp_target *t, char c[NCOLS][24])
{
	const struct hs_store_stats *s = &t->cur.stats;
	double below = 0, rd = -1, wr = -1, p99 = -1;
	uint64_t pf = 0, pfh = 0;
	struct insp_tier_view v;

	snprintf(c[K_STATE], 24, "%s", t->state == INSP_LIVE ? "live" : "STALE");
	snprintf(c[K_AGE], 24, "%.1fs", now_s() - (double)t->cur.updated_ns / 1e9);
	size_cell((double)s->budget, c[K_BUDGET], 24);
	size_cell((double)s->resident, c[K_RESIDENT], 24);
	pct_cell(s->budget ? (double)s->resident / (double)s->budget : -1, c[K_PCT], 24);
	for (int k = 0; k < s->ntiers && k <= HS_MAX_TIERS; k++) {
		insp_tier_view(t, k, &v);
		pf += s->tier[k].prefetches;
		pfh += s->tier[k].prefetch_hits;
		if (k == 0) {
			pct_cell(v.hit_ratio, c[K_HIT], 24);
			continue;
		}
		below += (double)s->tier[k].used;
		rd = v.read_now < 0 ? rd : (rd < 0 ? 0 : rd) + v.read_now;
		wr = v.write_now < 0 ? wr : (wr < 0 ? 0 : wr) + v.write_now;
		p99 = v.p99 > p99 ? v.p99 : p99;
	}
	size_cell(s->ntiers > 1 ? below : -1, c[K_BELOW], 24);
	size_cell(rd, c[K_READ], 24);
	size_cell(wr, c[K_WRITE], 24);
	pct_cell(pf ? (double)pfh / (double)pf : -1, c[K_PF], 24);
	if (p99 < 0)
		snprintf(c[K_P99], 24, "-");
	else
		snprintf(c[K_P99], 24, p99 >= 1000 ? "%.0fms" : "%.0fus", p99 >= 1000 ? p99 / 1000 : p99);
}

/* A daemon: its lent memory as budget and resident. */
static void daemon_cells(const struct insp_target *t, char c[NCOLS][24])
{
	snprintf(c[K_STATE], 24, "live");
	snprintf(c[K_AGE], 24, "-");
	size_cell((double)t->dcur.capacity, c[K_BUDGET], 24);
	size_cell((double)t->dcur.used, c[K_RESIDENT], 24);
	pct_cell(t->dcur.capacity ? (double)t->dcur.used / (double)t->dcur.capacity : -1, c[K_PCT], 24);
}

static void print_row(FILE *f, const int *keep, char c[NCOLS][24])
{
	int first = 1;

	for (int k = 0; k < NCOLS; k++)
		if (keep[k]) {
			fprintf(f, k == K_TARGET ? "%s%-*.*s" : "%s%*.*s", first ? "" : " ", cols[k].width,
				cols[k].width, c[k]);
			first = 0;
		}
	fputc('\n', f);
}

void insp_print_compact(FILE *f, const struct insp_target *t, int n)
{
	int keep[NCOLS] = { 0 }, used = 0, width = width_of(f) - 1;
	char c[NCOLS][24];

	for (int p = 0; p < NCOLS; p++)
		for (int k = 0; k < NCOLS; k++)
			if (cols[k].priority == p && used + (used ? 1 : 0) + cols[k].width <= width) {
				keep[k] = 1;
				used += (used ? 1 : 0) + cols[k].width;
			}
	for (int k = 0; k < NCOLS; k++)
		snprintf(c[k], 24, "%s", cols[k].head);
	print_row(f, keep, c);
	for (int i = 0; i < n; i++) {
		int page = t[i].kind == INSP_LOCAL && (t[i].state == INSP_LIVE || t[i].state == INSP_STALE);
		if (!page && !(t[i].kind == INSP_REMOTE && t[i].state == INSP_LIVE))
			continue;
		for (int k = 0; k < NCOLS; k++)
			snprintf(c[k], 24, "-");
		if (t[i].job_sum)
			snprintf(c[K_TARGET], 24, "sum %s", t[i].job);
		else if (t[i].kind == INSP_LOCAL && t[i].job[0] && t[i].rank[0])
			snprintf(c[K_TARGET], 24, "pid %s r%s", t[i].spec, t[i].rank);
		else
			snprintf(c[K_TARGET], 24, "%s%s", t[i].kind == INSP_LOCAL ? "pid " : "", t[i].spec);
		if (page)
			page_cells(&t[i], c);
		else
			daemon_cells(&t[i], c);
		print_row(f, keep, c);
	}
}
