/* The progress line, redrawn in place at most ten times a second:
 *   step 120/1000 [#######.......] loss 0.1234 | mem 41M/48M | 12.3 ms/step |
 *   850 samples/s | io 120M/s | 84.9 GFLOP/s | ETA 1:23
 * Fields that do not fit are dropped, least useful first (PRIORITY below),
 * so that the step, the ETA, the loss and memory against the budget stay
 * at 80 columns; the bar takes what room is left. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>

#include "tools/train_progress.h"

enum { F_STEP, F_LOSS, F_VAL, F_MEM, F_MS, F_SAMPLES, F_IO, F_GFLOPS, F_ETA, NFIELDS };

/* Kept first to last; display order is the enum's. */
static const int priority[NFIELDS] = { F_STEP, F_ETA, F_LOSS, F_VAL, F_MEM, F_MS, F_IO, F_SAMPLES, F_GFLOPS };

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* $COLUMNS wins (a user's or a test's choice), then the terminal's. */
static int columns(void)
{
	const char *env = getenv("COLUMNS");
	struct winsize ws;
	long v;

	if (env && (v = strtol(env, NULL, 10)) > 0)
		return v < 20 ? 20 : v > 1000 ? 1000 : (int)v;
	if (ioctl(2, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0)
		return ws.ws_col < 20 ? 20 : ws.ws_col;
	return 80;
}

void hp_progress_init(struct hp_progress *p, int on, const char *unit)
{
	memset(p, 0, sizeof *p);
	p->on = on;
	p->unit = unit;
	p->width = columns();
}

static void fmt_time(double s, char *buf, size_t len)
{
	long v = s < 0 || !isfinite(s) ? 0 : (long)(s + 0.5);

	if (v >= 3600)
		snprintf(buf, len, "%ld:%02ld:%02ld", v / 3600, v / 60 % 60, v % 60);
	else
		snprintf(buf, len, "%ld:%02ld", v / 60, v % 60);
}

/* 41M, 1.5G: three or four characters where hp_format_size takes eight. */
static void fmt_short(double v, char *buf, size_t len)
{
	static const char units[] = "BKMGTP";
	int u = 0;

	while (v >= 1024 && u < 5) {
		v /= 1024;
		u++;
	}
	snprintf(buf, len, v < 10 && u ? "%.1f%c" : "%.0f%c", v, units[u]);
}

static void fields(const struct hp_progress *p, const struct exec_sample *x, char f[NFIELDS][48])
{
	char a[16], b[16];
	int64_t done = x->step + 1;

	memset(f, 0, sizeof(char[NFIELDS][48]));
	snprintf(f[F_STEP], 48, "%s %lld/%lld", p->unit, (long long)done, (long long)x->total);
	if (x->has_loss)
		snprintf(f[F_LOSS], 48, "loss %.4g", x->loss);
	if (p->has_val && isnan(p->val_accuracy))
		snprintf(f[F_VAL], 48, "val %.4g", p->val_loss);
	else if (p->has_val)
		snprintf(f[F_VAL], 48, "val %.4g %.1f%%", p->val_loss, 100 * p->val_accuracy);
	fmt_short((double)x->resident, a, sizeof a);
	fmt_short((double)x->budget, b, sizeof b);
	snprintf(f[F_MEM], 48, x->budget ? "mem %s/%s" : "mem %s", a, b);
	snprintf(f[F_MS], 48, "%.1f ms/%s", p->ema_ms, p->unit);
	if (x->has_loss && p->ema_ms > 0)
		snprintf(f[F_SAMPLES], 48, "%.0f samples/s", (double)x->samples / p->ema_ms * 1e3);
	if (x->ntiers > 1) {
		fmt_short(p->ema_io, a, sizeof a);
		snprintf(f[F_IO], 48, "io %s/s", a);
	}
	if (p->ema_ms > 0)
		snprintf(f[F_GFLOPS], 48, "%.1f GFLOP/s", x->flops / p->ema_ms / 1e6);
	fmt_time((double)(x->total - done) * p->ema_ms / 1e3, a, sizeof a);
	snprintf(f[F_ETA], 48, "ETA %s", a);
}

/* The bar in the room left (none below 8 columns, at most 30). */
static int bar_text(const struct exec_sample *x, int room, char *out)
{
	int w = room - 3 > 30 ? 30 : room - 3, fill;

	if (w < 6)
		return 0;
	fill = (int)((double)w * (double)(x->step + 1) / (double)(x->total > 0 ? x->total : 1));
	out[0] = '[';
	for (int i = 0; i < w; i++)
		out[1 + i] = i < fill ? '#' : '.';
	out[w + 1] = ']';
	out[w + 2] = 0;
	return w + 3;
}

void hp_progress_format(const struct hp_progress *p, const struct exec_sample *x, char *line, size_t len)
{
	char f[NFIELDS][48], bar[40] = "";
	int keep[NFIELDS] = { 0 }, avail = p->width - 1, used = 0, n = 0;

	fields(p, x, f);
	for (int k = 0; k < NFIELDS; k++) {
		int i = priority[k], l = (int)strlen(f[i]);
		if (l && used + (used ? 3 : 0) + l <= avail) {
			keep[i] = 1;
			used += (used ? 3 : 0) + l;
		}
	}
	bar_text(x, avail - used, bar);
	line[0] = 0;
	for (int i = 0; i < NFIELDS; i++) {
		if (!keep[i])
			continue;
		n += snprintf(line + n, len - (size_t)n, "%s%s%s%s", n ? " | " : "", f[i],
			      i == F_STEP && bar[0] ? " " : "", i == F_STEP ? bar : "");
		if ((size_t)n >= len)
			break;
	}
}

void hp_progress_step(struct hp_progress *p, const struct exec_sample *x)
{
	double t = now_s(), io = 0;
	int first = !(p->ema_ms > 0);
	char line[512];

	for (int i = 1; i < x->ntiers; i++)
		io += x->tier[i].read_per_s + x->tier[i].write_per_s;
	p->ema_ms = first ? x->ms : 0.8 * p->ema_ms + 0.2 * x->ms;
	if (x->has_val) {
		p->has_val = 1;
		p->val_loss = x->val_loss;
		p->val_accuracy = x->val_accuracy;
	}
	p->ema_io = first ? io : 0.8 * p->ema_io + 0.2 * io;
	if (!p->on || (t - p->last_draw < 0.1 && x->step + 1 < x->total))
		return;
	p->last_draw = t;
	p->drawn = 1;
	hp_progress_format(p, x, line, sizeof line);
	fprintf(stderr, "\r%s\033[K", line);
	fflush(stderr);
}

void hp_progress_end(struct hp_progress *p)
{
	if (p->on && p->drawn)
		fputc('\n', stderr);
}
