/* The progress line: step, bar, loss, step time, throughput, tier traffic
 * and ETA, redrawn in place at most ten times a second. */
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>

#include "hpdlf/tensor.h"
#include "tools/train_progress.h"

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

void hp_progress_init(struct hp_progress *p, int on, int64_t total, int64_t first)
{
	struct winsize ws;

	memset(p, 0, sizeof *p);
	p->on = on;
	p->total = total;
	p->first = first;
	p->t0 = now_s();
	p->width = on && ioctl(2, TIOCGWINSZ, &ws) == 0 && ws.ws_col >= 40 ? ws.ws_col : 100;
}

static char *fmt_time(double s, char *buf, size_t len)
{
	long v = s < 0 ? 0 : (long)(s + 0.5);

	if (v >= 3600)
		snprintf(buf, len, "%ld:%02ld:%02ld", v / 3600, v / 60 % 60, v % 60);
	else
		snprintf(buf, len, "%ld:%02ld", v / 60, v % 60);
	return buf;
}

static void draw(struct hp_progress *p, const struct hp_step_info *in, double elapsed)
{
	char bar[41], eta[32], io[32], line[512];
	int64_t done = in->step + 1, left = p->total - done;
	int bw = p->width >= 120 ? 30 : 15, fill = (int)((double)bw * (double)done / (double)p->total);
	double io_rate = elapsed > 0 ? p->io_bytes / elapsed : 0;

	for (int i = 0; i < bw; i++)
		bar[i] = i < fill ? '#' : '.';
	bar[bw] = 0;
	hp_format_size((uint64_t)io_rate, io, sizeof io);
	int n = snprintf(line, sizeof line, "step %lld/%lld [%s] loss %.4f | %.1f ms/step, %.0f samples/s, %.1f GFLOP/s",
			 (long long)done, (long long)p->total, bar, in->loss, p->ema_ms, in->samples / p->ema_ms * 1e3,
			 in->flops / p->ema_ms / 1e6);
	if (in->ntiers > 1 && n > 0 && (size_t)n < sizeof line)
		n += snprintf(line + n, sizeof line - (size_t)n, " | tiers %s/s", io);
	if (n > 0 && (size_t)n < sizeof line)
		snprintf(line + n, sizeof line - (size_t)n, " | ETA %s", fmt_time((double)left * p->ema_ms / 1e3, eta, sizeof eta));
	line[p->width - 1 < (int)sizeof line ? p->width - 1 : (int)sizeof line - 1] = 0;
	fprintf(stderr, "\r%s\033[K", line);
	fflush(stderr);
}

void hp_progress_step(struct hp_progress *p, const struct hp_step_info *in)
{
	double t = now_s();

	p->ema_ms = p->ema_ms > 0 ? 0.8 * p->ema_ms + 0.2 * in->ms : in->ms;
	for (int i = 1; i < in->ntiers; i++)
		p->io_bytes += (double)(in->tier_read[i] + in->tier_written[i]);
	if (!p->on || (t - p->last_draw < 0.1 && in->step + 1 < p->total))
		return;
	p->last_draw = t;
	draw(p, in, t - p->t0);
}

void hp_progress_end(struct hp_progress *p)
{
	if (p->on && p->last_draw > 0)
		fputc('\n', stderr);
}
