/* Data-parallel step time: the plan's compute on one lane, the gradient
 * reductions on the communication thread (one chain, in bucket order, as
 * train_dp.c issues them), each a ring allreduce costing
 * 2(N-1)/N * bytes / bandwidth + 2(N-1) * latency.  A bucket starts when
 * its last gradient exists and the previous bucket is done (with
 * HPDLF_COMM_THREAD=0 in core the session runs it inline: then the lane
 * waits for it); an optimizer
 * update waits for its bucket while the lane goes on with the backward
 * kernels after it (the task net fires whatever is enabled).  What of the
 * reductions the step still waits for at its end is exposed; the rest is
 * hidden behind backward.  See plan_comm.h. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "hpdlf/error.h"
#include "exec/comm.h"
#include "exec/plan.h"
#include "exec/plan_comm.h"
#include "exec/speed.h"

double hp_comm_ring_ms(const struct hp_link *l, int ranks, double bytes)
{
	double n = ranks;

	if (ranks < 2)
		return 0;
	return 2 * (n - 1) / n * bytes / (l->GBps * 1e6) + 2 * (n - 1) * l->lat_us / 1e3;
}

struct sim {
	const struct hp_graph *g;
	const struct hp_link *l;
	int ranks;
	double t, chain, comm;     /* lane clock, end of the reduction chain, its busy time */
	double *avail;             /* per value: when consumers may read it */
	char *from_comm;           /* per value: a reduction's output (or a gradient one reduces) */
	int *bucket_of;            /* synthesized buckets: per value, its bucket or -1 */
	int *left, nb, next_b;     /* gradients still to come per bucket; the next bucket to issue */
	double *ready, *done, *bbytes;
	int *pend, npend;          /* deferred updates (steps), in plan order */
	const double *ms;          /* per step */
	const struct hp_plan *p;
	int serial;                /* reductions on the lane itself (in core without the comm thread) */
};

static int is_update(const struct hp_node *n)
{
	return !strcmp(n->domain, "ai.hpdlf") && (!strcmp(n->op_type, "SGDUpdate") || !strcmp(n->op_type, "AdamUpdate"));
}

static double vbytes(const struct hp_graph *g, int v)
{
	return (double)hp_shape_numel(&g->values[v].shape) * 4;
}

/* Issue the synthesized buckets that are ready, in order (one chain). */
static void issue_ready(struct sim *s)
{
	if (!s->left)
		return; /* the graph's own reduction nodes */
	while (s->next_b < s->nb && s->left[s->next_b] == 0) {
		int b = s->next_b++;
		double start = s->ready[b] > s->chain ? s->ready[b] : s->chain, c = hp_comm_ring_ms(s->l, s->ranks, s->bbytes[b]);
		if (s->serial) { /* on the lane, once it gets there */
			start = s->t > start ? s->t : start;
			s->t = start + c;
		}
		s->chain = start + c;
		s->done[b] = s->chain;
		s->comm += c;
	}
}

/* When a deferred update may run (-1: its reduction is not issued yet). */
static double update_avail(const struct sim *s, int step)
{
	const struct hp_node *n = &s->g->nodes[s->p->node[step]];
	double a = 0;

	for (int j = 0; j < n->ninputs; j++) {
		int v = n->inputs[j];
		if (v < 0)
			continue;
		if (s->bucket_of && s->bucket_of[v] >= 0) {
			int b = s->bucket_of[v];
			if (b >= s->next_b)
				return -1;
			a = a > s->done[b] ? a : s->done[b];
		} else if (s->avail[v] > a) {
			a = s->avail[v];
		}
	}
	return a;
}

/* Run the deferred updates whose gradients are reduced by now (all=1:
 * every one, waiting for them). */
static void run_deferred(struct sim *s, int all)
{
	int k = 0;

	for (int i = 0; i < s->npend; i++) {
		int st = s->pend[i];
		double a = update_avail(s, st);
		if (a < 0 || (!all && a > s->t)) {
			s->pend[k++] = st;
			continue;
		}
		s->t = (a > s->t ? a : s->t) + s->ms[st];
	}
	s->npend = k;
}

static void kernel_done(struct sim *s, const struct hp_node *n)
{
	for (int o = 0; o < n->noutputs; o++) {
		int v = n->outputs[o];
		if (v < 0)
			continue;
		s->avail[v] = s->t;
		if (s->bucket_of && s->bucket_of[v] >= 0 && --s->left[s->bucket_of[v]] == 0) {
			s->ready[s->bucket_of[v]] = s->t;
			issue_ready(s);
		}
	}
}

/* A reduction node of g: starts when its gradients exist. */
static void comm_node(struct sim *s, const struct hp_node *n)
{
	double ready = 0, bytes = 0, c;

	for (int j = 1; j < n->ninputs; j++) {
		ready = s->avail[n->inputs[j]] > ready ? s->avail[n->inputs[j]] : ready;
		bytes += vbytes(s->g, n->inputs[j]);
	}
	c = hp_comm_ring_ms(s->l, s->ranks, bytes);
	s->chain = (ready > s->chain ? ready : s->chain) + c;
	if (s->serial)
		s->chain = s->t = (s->t > ready ? s->t : ready) + c;
	s->comm += c;
	s->nb++;
	for (int o = 0; o < n->noutputs; o++)
		if (n->outputs[o] >= 0) {
			s->avail[n->outputs[o]] = s->chain;
			s->from_comm[n->outputs[o]] = 1;
		}
}

static int waits_for_comm(const struct sim *s, const struct hp_node *n)
{
	for (int j = 0; j < n->ninputs; j++)
		if (n->inputs[j] >= 0 && s->from_comm[n->inputs[j]])
			return 1;
	return 0;
}

static void run_steps(struct sim *s)
{
	const struct hp_plan *p = s->p;

	for (int k = 0; k < p->nsteps; k++) {
		const struct hp_node *n = &s->g->nodes[p->node[k]];
		if (hp_comm_is_allreduce(n)) {
			comm_node(s, n);
			continue;
		}
		if (waits_for_comm(s, n) && is_update(n)) {
			s->pend[s->npend++] = k;
			continue;
		}
		run_deferred(s, 0);
		s->t += s->ms[k];
		kernel_done(s, n);
	}
	run_deferred(s, 1);
}

struct grad {
	int producer, update, value;
};

static int by_producer(const void *a, const void *b)
{
	const struct grad *x = a, *y = b;

	if (x->producer != y->producer)
		return (x->producer > y->producer) - (x->producer < y->producer);
	return (x->update > y->update) - (x->update < y->update);
}

/* Buckets of `bucket` bytes over the gradients the updates read, in the
 * order their producers come (train_dp.c's grouping); 0 or -ENOMEM. */
static int synth_buckets(struct sim *s, uint64_t bucket)
{
	const struct hp_graph *g = s->g;
	struct grad *gr = calloc((size_t)g->nnodes + 1, sizeof *gr);
	double acc = 0;
	int n = 0;

	if (!gr)
		return -ENOMEM;
	for (int i = 0; i < g->nnodes; i++) {
		const struct hp_node *nd = &g->nodes[i];
		int v = nd->ninputs > 1 ? nd->inputs[1] : -1;
		if (is_update(nd) && v >= 0 && g->values[v].producer >= 0)
			gr[n++] = (struct grad){ g->values[v].producer, i, v };
	}
	qsort(gr, (size_t)n, sizeof *gr, by_producer);
	for (int i = 0; i < n; i++) {
		int v = gr[i].value;
		if (s->bucket_of[v] < 0) {
			s->bucket_of[v] = s->nb;
			s->from_comm[v] = 1;
			s->left[s->nb]++;
			s->bbytes[s->nb] += vbytes(g, v);
			acc += vbytes(g, v);
		}
		if (acc >= (double)bucket || i + 1 == n) {
			s->nb += acc > 0;
			acc = 0;
		}
	}
	free(gr);
	return 0;
}

static int sim_alloc(struct sim *s, int synth)
{
	const struct hp_graph *g = s->g;
	size_t nv = (size_t)g->nvalues + 1, nn = (size_t)g->nnodes + 1;

	s->avail = calloc(nv, sizeof *s->avail);
	s->from_comm = calloc(nv, 1);
	s->pend = calloc(nn, sizeof *s->pend);
	if (synth) {
		s->bucket_of = malloc(nv * sizeof *s->bucket_of);
		s->left = calloc(nn, sizeof *s->left);
		s->ready = calloc(nn, sizeof *s->ready);
		s->done = calloc(nn, sizeof *s->done);
		s->bbytes = calloc(nn, sizeof *s->bbytes);
		if (s->bucket_of)
			memset(s->bucket_of, 0xff, nv * sizeof *s->bucket_of);
	}
	if (!s->avail || !s->from_comm || !s->pend ||
	    (synth && (!s->bucket_of || !s->left || !s->ready || !s->done || !s->bbytes)))
		return -ENOMEM;
	return 0;
}

static void sim_free(struct sim *s)
{
	free(s->avail);
	free(s->from_comm);
	free(s->pend);
	free(s->bucket_of);
	free(s->left);
	free(s->ready);
	free(s->done);
	free(s->bbytes);
}

static int has_comm_nodes(const struct hp_graph *g)
{
	for (int i = 0; i < g->nnodes; i++)
		if (hp_comm_is_allreduce(&g->nodes[i]))
			return 1;
	return 0;
}

static uint64_t grad_bytes(const struct hp_graph *g)
{
	uint64_t b = 0;

	for (int i = 0; i < g->nnodes; i++)
		if (is_update(&g->nodes[i]) && g->nodes[i].ninputs > 1 && g->nodes[i].inputs[1] >= 0)
			b += (uint64_t)vbytes(g, g->nodes[i].inputs[1]);
	return b;
}

/* One simulation; *lane_ms the compute alone, *end_ms the step's end. */
static int simulate(struct sim *s, uint64_t bucket, int synth, double *lane_ms, double *end_ms)
{
	int rc = sim_alloc(s, synth);

	if (rc == 0 && synth)
		rc = synth_buckets(s, bucket);
	if (rc == 0) {
		*lane_ms = 0;
		for (int k = 0; k < s->p->nsteps; k++)
			*lane_ms += s->ms[k];
		run_steps(s);
		issue_ready(s);
		*end_ms = s->t > s->chain ? s->t : s->chain;
	}
	return rc;
}

static int step_ms(const struct hp_graph *g, const struct hp_plan *p, const struct hp_speed_compute *sp, double **out)
{
	double *ms = calloc((size_t)p->nsteps + 1, sizeof *ms);

	if (!ms)
		return -ENOMEM;
	for (int k = 0; k < p->nsteps; k++) {
		const struct hp_node *n = &g->nodes[p->node[k]];
		enum hp_kclass cls;
		ms[k] = hp_comm_is_allreduce(n) ? 0 : hp_speed_kernel_ms(sp, g, n, &cls);
	}
	*out = ms;
	return 0;
}

static int predict(const struct hp_graph *g, const struct hp_plan *p, const double *ms, double base_ms,
		   const struct hp_link *l, int ranks, uint64_t bucket, int overlap, struct hp_comm_pred *out)
{
	struct sim s = { .g = g, .l = l, .ranks = ranks, .ms = ms, .p = p, .serial = !overlap };
	int synth = !has_comm_nodes(g), rc;
	double lane = 0, end = 0;

	memset(out, 0, sizeof *out);
	if ((rc = simulate(&s, bucket, synth, &lane, &end)) == 0) {
		out->ranks = ranks;
		out->buckets = s.nb;
		out->bucket = synth ? bucket : 0;
		out->grad_bytes = grad_bytes(g);
		out->sent_bytes = ranks > 1 ? 2.0 * (ranks - 1) / ranks * (double)out->grad_bytes : 0;
		out->compute_ms = base_ms;
		out->comm_ms = s.comm;
		out->exposed_ms = end > lane ? end - lane : 0;
		out->step_ms = base_ms + out->exposed_ms;
		out->hidden = s.comm > 0 ? 1 - out->exposed_ms / s.comm : 1;
		out->hidden = out->hidden < 0 ? 0 : out->hidden;
		out->efficiency = out->step_ms > 0 ? base_ms / out->step_ms : 1;
	}
	sim_free(&s);
	return rc;
}

#define BUCKET_MIN ((uint64_t)64 << 10)
#define BUCKET_MAX ((uint64_t)256 << 20)

static uint64_t best_bucket(const struct hp_graph *g, const struct hp_plan *p, const double *ms,
			    const struct hp_link *l, int ranks, int overlap)
{
	uint64_t best = BUCKET_MIN, total = grad_bytes(g);
	double best_ms = -1;

	for (uint64_t b = BUCKET_MIN; b <= BUCKET_MAX; b *= 2) {
		struct hp_comm_pred pr;
		if (predict(g, p, ms, 0, l, ranks, b, overlap, &pr) < 0)
			break;
		if (best_ms < 0 || pr.step_ms <= best_ms) {
			best_ms = pr.step_ms;
			best = b;
		}
		if (b >= total)
			break; /* one bucket already: larger sizes change nothing */
	}
	return best;
}

uint64_t hp_comm_best_bucket(const struct hp_graph *g, const struct hp_plan *p, const struct hp_speed_compute *sp,
			     const struct hp_link *l, int ranks, int overlap)
{
	double *ms;
	uint64_t b;

	if (step_ms(g, p, sp, &ms) < 0)
		return 0;
	b = best_bucket(g, p, ms, l, ranks, overlap);
	free(ms);
	return b;
}

int hp_comm_predict(const struct hp_graph *g, const struct hp_plan *p, const struct hp_speed_compute *sp,
		    double base_ms, const struct hp_link *l, int ranks, uint64_t bucket, int overlap,
		    struct hp_comm_pred *out)
{
	double *ms;
	int rc;

	if (step_ms(g, p, sp, &ms) < 0)
		return hp_error(-ENOMEM, "out of memory predicting communication");
	if (!bucket && !has_comm_nodes(g))
		bucket = best_bucket(g, p, ms, l, ranks, overlap);
	rc = predict(g, p, ms, base_ms, l, ranks, bucket, overlap, out);
	free(ms);
	return rc < 0 ? hp_error(rc, "out of memory predicting communication") : 0;
}
