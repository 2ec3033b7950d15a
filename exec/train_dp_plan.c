/* The bucket size and the link of data-parallel training.  Under a
 * launcher the link is measured once at start-up: a short run of small
 * allreduces (latency) and of 1 MiB ones (bandwidth), the slowest rank's
 * times, so every rank holds the same figures.  Without --bucket, rank 0
 * plans the step with its speed model and picks the bucket whose predicted
 * step is shortest (plan_comm.c); the others take rank 0's choice, so the
 * ranks' reductions always match.  Under a launcher the link is measured
 * even with --bucket: the out-of-core planner holds each reduction's
 * buffers for its predicted duration (plan.h, comm_GBps). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "hpdlf/error.h"
#include "hpdlf/exec.h"
#include "exec/comm.h"
#include "exec/comm_thread.h"
#include "exec/plan.h"
#include "exec/speed.h"
#include "exec/train_dp.h"
#include "exec/train_dp_plan.h"
#include "exec/train_internal.h"

#define PROBE_SMALL 20
#define PROBE_BIG 4
#define PROBE_FLOATS ((size_t)1 << 18) /* 1 MiB */

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Mean ns of `reps` allreduces of `count` floats, the slowest rank's. */
static int probe(float *buf, size_t count, int reps, uint64_t *ns)
{
	uint64_t t0, lo;
	int rc = hp_comm_allreduce(buf, count, HP_F32); /* warm the path */

	t0 = now_ns();
	for (int i = 0; i < reps && rc == 0; i++)
		rc = hp_comm_allreduce(buf, count, HP_F32);
	if (rc == 0)
		rc = hp_comm_minmax_u64((now_ns() - t0) / (uint64_t)reps, &lo, ns);
	return rc;
}

static int link_measure(struct hp_trainer *t)
{
	float *buf = calloc(PROBE_FLOATS, sizeof *buf);
	double n = t->nranks, hops = 2 * (n - 1), lat, xfer;
	uint64_t small = 0, big = 0;
	int rc;

	if (!buf)
		return hp_error(-ENOMEM, "out of memory");
	rc = probe(buf, 1, PROBE_SMALL, &small);
	if (rc == 0)
		rc = probe(buf, PROBE_FLOATS, PROBE_BIG, &big);
	free(buf);
	if (rc < 0)
		return rc;
	lat = (double)small / 1e3 / hops;
	xfer = (double)big / 1e3 - hops * lat; /* us moving the bytes */
	t->link_lat_us = lat;
	t->link_GBps = hops / n * (double)(PROBE_FLOATS * 4) / (xfer > 1e-3 ? xfer : 1e-3) / 1e3;
	return 0;
}

static int link_get(struct hp_trainer *t)
{
	if (t->link_GBps > 0)
		return 0;
	if (t->o.link_GBps > 0) {
		t->link_GBps = t->o.link_GBps;
		t->link_lat_us = t->o.link_lat_us;
		return 0;
	}
	if (hp_comm_size() < 2)
		return hp_error(HP_EUSAGE, "planning for %d ranks needs the link's bandwidth (--link-bandwidth)",
				t->nranks);
	return link_measure(t);
}

/* Rank 0's choice: the step planned as a run would plan it. */
static uint64_t choose(struct hp_trainer *t, const struct hp_graph *g)
{
	struct hp_link l = { t->link_GBps, t->link_lat_us };
	struct hp_speed_compute sp;
	struct hp_exec_opts eo;
	struct hp_plan *p = NULL;
	uint64_t b = 0;

	hp_exec_opts_init(&eo, sizeof eo);
	eo.no_split = 1;
	eo.threads = t->o.threads;
	eo.budget = t->o.budget;
	eo.ntiers = t->o.ntiers;
	eo.tiers = t->o.tiers;
	/* a run under a budget never calibrates: the calibration's sessions
	 * and probes took 2-ranks ResNet-18 training at 64M to 118 MiB on a
	 * fresh cache; --plan (graph_only) measures and caches for the runs */
	if (hp_plan_build_speed(g, &eo, &p, &sp, t->o.graph_only || !t->o.budget) == 0)
		b = hp_comm_best_bucket(g, p, &sp, &l, t->nranks, t->o.budget > 0 || hp_comm_thread_wanted());
	hp_plan_free(p);
	hp_error(0, "%s", ""); /* a plan that failed is not the run's error: the default bucket */
	return b;
}

int hp_dp_plan_bucket(struct hp_trainer *t, const struct hp_graph *g, uint64_t *bucket)
{
	uint64_t b = t->o.bucket;
	int rc;

	/* the out-of-core planner times each reduction with the link too (on
	 * every rank of a job alike: --budget may differ between ranks) */
	if ((!b || t->o.graph_only || hp_comm_size() > 1) && (rc = link_get(t)) < 0)
		return rc;
	if (hp_comm_size() > 1)
		hp_comm_link_set(t->link_GBps, t->link_lat_us);
	if (!b && t->dp_bucket)
		b = t->dp_bucket; /* a split for the budget plans again: keep the choice */
	if (!b) {
		b = t->rank == 0 ? choose(t, g) : 0;
		if ((rc = hp_comm_bcast(&b, sizeof b, 0)) < 0)
			return rc;
	}
	t->dp_bucket = b;
	*bucket = b; /* 0: the planner could not say, hp_dp_default_bucket */
	return 0;
}

uint64_t hp_dp_plan_bucket_size(const struct hp_trainer *t)
{
	return t->dp_bucket;
}

int hp_dp_plan_link(const struct hp_trainer *t, struct hp_link *l, int *measured)
{
	l->GBps = t->link_GBps;
	l->lat_us = t->link_lat_us;
	*measured = t->o.link_GBps <= 0;
	return t->nranks;
}

int hp_plan_comm_summarize(const struct hp_graph *g, const struct hp_exec_opts *o, const struct hp_link *l,
			   int ranks, struct hp_comm_pred *out)
{
	struct hp_speed_compute sp;
	struct hp_plan *p = NULL;
	int rc = hp_plan_build_speed(g, o, &p, &sp, 1); /* --plan: measured and cached for the runs */

	if (rc == 0)
		rc = hp_comm_predict(g, p, &sp, p->predicted_ms, l, ranks, 0, o->budget > 0 || hp_comm_thread_wanted(), out);
	hp_plan_free(p);
	return rc;
}
