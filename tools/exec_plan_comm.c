/* --plan with ranks: the link options (--link-bandwidth RATE,
 * --link-latency TIME) and the communication lines of the plan summary. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hpdlf/error.h"
#include "hpdlf/exec.h"
#include "hpdlf/tensor.h"
#include "hpdlf/train.h"
#include "exec/train_dp_plan.h"
#include "tools/exec_cli.h"

/* A number and a suffix from `units` (each with its scale); the bare
 * number scales by units[0]'s.  Nonnegative finite; 0 or -1. */
struct unit {
	const char *name;
	double scale;
};

static int parse_scaled(const char *arg, const struct unit *units, int nunits, double *out)
{
	char *end;
	double v;

	errno = 0;
	v = strtod(arg, &end);
	if (end == arg || errno || !isfinite(v) || v <= 0)
		return -1;
	if (!*end) {
		*out = v * units[0].scale;
		return 0;
	}
	for (int i = 0; i < nunits; i++)
		if (!strcmp(end, units[i].name)) {
			*out = v * units[i].scale;
			return isfinite(*out) ? 0 : -1;
		}
	return -1;
}

int exec_parse_link_bandwidth(const char *arg, double *GBps)
{
	/* bytes per second: 12.5G is 100 Gb/s; a trailing "b" means bits */
	static const struct unit u[] = { { "", 1e-9 }, { "K", 1e-6 }, { "M", 1e-3 }, { "G", 1 }, { "T", 1e3 },
					 { "Kb", 1e-6 / 8 }, { "Mb", 1e-3 / 8 }, { "Gb", 1.0 / 8 }, { "Tb", 1e3 / 8 } };

	if (parse_scaled(arg, u, (int)(sizeof u / sizeof u[0]), GBps) < 0) {
		fprintf(stderr, "hpdlf-exec: --link-bandwidth wants bytes per second above 0 such as 12.5G "
				"(or bits: 100Gb), got '%s'\n", arg);
		return 2;
	}
	return 0;
}

int exec_parse_link_latency(const char *arg, double *us)
{
	static const struct unit u[] = { { "us", 1 }, { "ns", 1e-3 }, { "us", 1 }, { "ms", 1e3 }, { "s", 1e6 } };

	if (parse_scaled(arg, u, (int)(sizeof u / sizeof u[0]), us) < 0) {
		fprintf(stderr, "hpdlf-exec: --link-latency wants a time above 0 such as 2us (ns, us, ms, s), got '%s'\n",
			arg);
		return 2;
	}
	return 0;
}

static void print_pred(const struct hp_comm_pred *p, const struct hp_link *l, int measured, uint64_t bucket,
		       int given)
{
	char a[32], b[32];

	printf("  ranks                %d, link %.3g GB/s and %.3g us per message (%s)\n", p->ranks, l->GBps, l->lat_us,
	       measured ? "measured at start-up" : "given");
	printf("  gradient reduction   %s per step in %d bucket%s", hp_format_size(p->grad_bytes, a, sizeof a),
	       p->buckets, p->buckets == 1 ? "" : "s");
	if (bucket)
		printf(" of %s (%s)", hp_format_size(bucket, b, sizeof b), given ? "--bucket" : "chosen by the planner");
	printf(", each rank sends %s (ring allreduce)\n", hp_format_size((uint64_t)p->sent_bytes, b, sizeof b));
	printf("  communication        %.2f ms, %.0f%% hidden behind backward (%.2f ms exposed)\n", p->comm_ms,
	       100 * p->hidden, p->exposed_ms);
	printf("  predicted step time  %.2f ms with communication; scaling efficiency %.1f%% (the step "
	       "without it over the step with it)\n", p->step_ms, 100 * p->efficiency);
}

int exec_plan_comm(const struct hp_trainer *t, const struct hp_exec_opts *o, int bucket_given)
{
	struct hp_comm_pred p;
	struct hp_link l;
	int measured, ranks = hp_dp_plan_link(t, &l, &measured), rc;

	if (ranks < 2)
		return 0;
	rc = hp_plan_comm_summarize(hp_trainer_graph(t), o, &l, ranks, &p);
	if (rc < 0)
		return rc;
	print_pred(&p, &l, measured, hp_dp_plan_bucket_size(t), bucket_given);
	return 0;
}
