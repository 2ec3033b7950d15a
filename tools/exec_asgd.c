/* hpdlf-exec --sync async: its options, the per-rank logs, the lines
 * about lost peers.  The exchanges themselves are exec/asgd.c's. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hpdlf/train.h"
#include "exec/asgd.h"
#include "exec/comm.h"
#include "exec/comm_watch.h"
#include "tools/exec_cli.h"

static int bad(const char *spec, const char *why)
{
	if (hp_comm_rank() == 0)
		fprintf(stderr, "hpdlf-exec: --debug-delay-ms: %s, got '%s' (expected MS, or RANK:MS[,RANK:MS...] such as "
			"1:20)\n", why, spec);
	return 2;
}

static int parse_ms(const char *s, const char *end, double *ms)
{
	char *e;

	errno = 0;
	*ms = strtod(s, &e);
	return e != s && e == end && !errno && *ms >= 0 && *ms <= 1e6;
}

int exec_parse_delay(const char *spec, int rank, double *ms)
{
	const char *p = spec;

	if (ms)
		*ms = 0;
	if (!*spec)
		return bad(spec, "empty");
	if (!strchr(spec, ':')) {
		double v;
		if (!parse_ms(spec, spec + strlen(spec), &v))
			return bad(spec, "milliseconds must be a number in [0, 1000000]");
		if (ms)
			*ms = v;
		return 0;
	}
	while (*p) {
		const char *colon = strchr(p, ':'), *comma = strchr(p, ',');
		const char *end = comma ? comma : p + strlen(p);
		char *re;
		long r;
		double v;
		if (!colon || colon > end)
			return bad(spec, "each entry is RANK:MS");
		errno = 0;
		r = strtol(p, &re, 10);
		if (re == p || re != colon || errno || r < 0 || r > 1 << 20)
			return bad(spec, "a rank must be an integer >= 0");
		if (!parse_ms(colon + 1, end, &v))
			return bad(spec, "milliseconds must be a number in [0, 1000000]");
		if (rank >= 0 && r >= hp_comm_size())
			return bad(spec, "names a rank the job does not have");
		if (ms && r == rank)
			*ms = v;
		p = comma ? comma + 1 : end;
	}
	return 0;
}

int exec_async_opts(const struct cli *c, struct hp_trainer_opts *o)
{
	const char *need = c->exchange_every ? "--exchange-every" : c->exchange_peers ? "--exchange-peers" :
			   c->blend_given ? "--blend" : c->parzen ? "--parzen" : c->async_det ? "--async-deterministic" : NULL;
	int rc;

	if (!c->sync_async && need) {
		if (hp_comm_rank() == 0)
			fprintf(stderr, "hpdlf-exec: %s only makes sense with --sync async\n", need);
		return 2;
	}
	if (c->debug_delay && (rc = exec_parse_delay(c->debug_delay, hp_comm_rank(), &o->delay_ms)) != 0)
		return rc;
	o->async_sgd = c->sync_async;
	o->async_deterministic = c->async_det;
	o->exchange_every = c->exchange_every;
	o->exchange_peers = (int)c->exchange_peers;
	o->blend = c->blend;
	o->parzen = c->parzen;
	return 0;
}

char *exec_async_log_name(const char *log, int rank)
{
	size_t n = strlen(log) + 32;
	char *s = malloc(n);

	if (s)
		snprintf(s, n, "%s.rank%d", log, rank);
	return s;
}

const char *exec_async_step(struct hp_trainer *t)
{
	static int said[1024];
	int n = hp_comm_size() < 1024 ? hp_comm_size() : 1024;

	for (int p = 0; hp_comm_watch_tolerant() && p < n; p++) {
		const char *why = hp_comm_watch_lost_why(p);
		if (!why || said[p]++)
			continue;
		/* every rank says it: each trains on its own and may be the one left */
		fprintf(stderr, "hpdlf-exec: rank %d of %d: rank %d was lost at step %lld (%s); training on without it\n",
			hp_comm_rank(), hp_comm_size(), p, (long long)hp_trainer_current_step(t), why);
	}
	return hp_asgd_report(t);
}
