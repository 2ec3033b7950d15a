/* The last plans the plan API built, handed out again (plan.h
 * hp_plan_build_shared): --plan asks for a step's summary, its stash and
 * its footprint in turn, and a graph-only trainer's budget check plans the
 * step --plan then summarizes; each was a full simulation of the same
 * graph under the same options (the 10,001-node MLP trained at 64M: four
 * of 36,314 steps each).  Keyed by the graph's hash (split_memo.h: values,
 * nodes, attributes, workspace) and every option the planner reads; a
 * plan that fails is not kept.  SHARED_PLANS of them, the oldest replaced:
 * --plan's smallest budget and its floor probe plan other graphs between
 * the step's summary and its stash. */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "hpdlf/error.h"
#include "exec/plan.h"
#include "exec/speed.h"
#include "exec/split_memo.h"

#define SHARED_PLANS 4

static pthread_mutex_t shared_lock = PTHREAD_MUTEX_INITIALIZER;
static struct shared {
	uint64_t graph;
	int nvalues;
	struct hp_plan_opts po;
	struct hp_speed_compute speed; /* po.speed's figures (po.speed points here) */
	struct hp_plan *plan;
} shared[SHARED_PLANS];
static int oldest;
int hp_plan_shared_hits;

/* The figures of a compute model that the planner's time model reads. */
static int speed_same(const struct hp_speed_compute *a, const struct hp_speed_compute *b)
{
	if (!a || !b)
		return a == b;
	if (a->threads != b->threads || a->mem_GBps != b->mem_GBps || a->dispatch_us != b->dispatch_us)
		return 0;
	for (int i = 0; i < HP_SPEED_NPTS; i++)
		if (a->flops[i] != b->flops[i] || a->gflops[i] != b->gflops[i])
			return 0;
	return 1;
}

static int opts_same(const struct hp_plan_opts *a, const struct hp_plan_opts *b)
{
	return a->budget == b->budget && a->align == b->align && a->workspace == b->workspace &&
	       a->reserve_for == b->reserve_for && a->gflops == b->gflops && speed_same(a->speed, b->speed) &&
	       a->workers == b->workers && a->chunk == b->chunk && a->read_MBps == b->read_MBps &&
	       a->write_MBps == b->write_MBps && a->read_lat_us == b->read_lat_us &&
	       a->write_lat_us == b->write_lat_us && a->max_lookahead == b->max_lookahead &&
	       a->victims == b->victims && a->comm_ranks == b->comm_ranks && a->comm_GBps == b->comm_GBps &&
	       a->comm_lat_us == b->comm_lat_us;
}

static void *dup_array(const void *a, size_t bytes, int *bad)
{
	void *c = malloc(bytes ? bytes : 1);

	if (!c)
		*bad = 1;
	else if (a && bytes)
		memcpy(c, a, bytes);
	return c;
}

/* A deep copy of plan p of a graph of nvalues values (sizes as plan.c
 * allocates them), NULL when out of memory. */
static struct hp_plan *plan_copy(const struct hp_plan *p, int nvalues)
{
	struct hp_plan *c = malloc(sizeof *c);
	size_t nv = (size_t)nvalues, ns = (size_t)p->nsteps;
	int bad = !c;

	if (bad)
		return NULL;
	*c = *p;
	c->node = dup_array(p->node, (ns + 1) * sizeof *p->node, &bad);
	c->start_resident = dup_array(p->start_resident, nv + 1, &bad);
	c->last_use = dup_array(p->last_use, (nv + 1) * sizeof *p->last_use, &bad);
	c->use_start = dup_array(p->use_start, (nv + 2) * sizeof *p->use_start, &bad);
	c->uses = dup_array(p->uses, ((size_t)p->use_start[nv] + 1) * sizeof *p->uses, &bad);
	c->act_begin = dup_array(p->act_begin, (ns + 2) * sizeof *p->act_begin, &bad);
	c->acts = dup_array(p->acts, ((size_t)p->nacts + 1) * sizeof *p->acts, &bad);
	c->room_from = p->room_from ? dup_array(p->room_from, (ns + 1) * sizeof *p->room_from, &bad) : NULL;
	if (bad) {
		hp_plan_free(c);
		return NULL;
	}
	return c;
}

/* *out: a copy of the plan remembered for (graph, po), or NULL. */
static int shared_find(uint64_t graph, const struct hp_graph *g, const struct hp_plan_opts *po,
		       struct hp_plan **out)
{
	*out = NULL;
	pthread_mutex_lock(&shared_lock);
	for (int i = 0; i < SHARED_PLANS && !*out; i++) {
		const struct shared *e = &shared[i];
		if (e->plan && e->graph == graph && e->nvalues == g->nvalues && opts_same(&e->po, po) &&
		    (*out = plan_copy(e->plan, g->nvalues)))
			hp_plan_shared_hits++;
	}
	pthread_mutex_unlock(&shared_lock);
	return *out != NULL;
}

static void shared_keep(uint64_t graph, const struct hp_graph *g, const struct hp_plan_opts *po,
			const struct hp_plan *p)
{
	struct hp_plan *c = plan_copy(p, g->nvalues);

	if (!c)
		return;
	pthread_mutex_lock(&shared_lock);
	struct shared *e = &shared[oldest];
	oldest = (oldest + 1) % SHARED_PLANS;
	hp_plan_free(e->plan);
	e->plan = c;
	e->graph = graph;
	e->nvalues = g->nvalues;
	e->po = *po;
	if (po->speed) {
		e->speed = *po->speed;
		e->po.speed = &e->speed;
	}
	pthread_mutex_unlock(&shared_lock);
}

int hp_plan_build_shared_from(const struct hp_graph *g, const struct hp_plan_opts *po, struct hp_plan *belady,
			      struct hp_plan **out)
{
	uint64_t graph;
	int rc;

	if (!po->budget) /* in core nothing is evicted: planning costs about what the hash does */
		return hp_plan_build_from(g, po, belady, out);
	graph = hp_split_graph_hash(g);
	if (shared_find(graph, g, po, out)) {
		hp_plan_free(belady);
		return 0;
	}
	if ((rc = hp_plan_build_from(g, po, belady, out)) == 0)
		shared_keep(graph, g, po, *out);
	return rc;
}

int hp_plan_build_shared(const struct hp_graph *g, const struct hp_plan_opts *po, struct hp_plan **out)
{
	return hp_plan_build_shared_from(g, po, NULL, out);
}
