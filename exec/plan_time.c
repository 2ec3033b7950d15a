/* The planner's pipeline time model: kernels on the compute lanes, loads
 * and write-backs on one I/O lane, and the reductions in flight.  See
 * plan_sim.h. */
#include <errno.h>
#include <stdlib.h>

#include "hpdlf/error.h"
#include "exec/comm.h"
#include "exec/plan.h"
#include "exec/plan_sim.h"
#include "exec/speed.h"

/* Milliseconds of step s's kernel: the measured per-kernel model, or the
 * flat GFLOP/s of the options. */
static double kernel_cls_ms(const struct sim *m, const struct hp_node *n, enum hp_kclass *cls)
{
	*cls = HP_KC_GEMM;
	if (m->o->speed)
		return hp_speed_kernel_ms(m->o->speed, m->g, n, cls);
	return (n->op->flops ? n->op->flops(m->g, n) : 0) / (m->o->gflops > 0 ? m->o->gflops : 50) / 1e6;
}

static double kernel_ms(const struct sim *m, const struct hp_node *n)
{
	enum hp_kclass cls;

	return kernel_cls_ms(m, n, &cls);
}

static double step_ms(struct sim *m, const struct hp_node *n, struct hp_plan *p)
{
	enum hp_kclass cls;
	double c = kernel_cls_ms(m, n, &cls);

	if (m->o->speed)
		p->dispatch_ms += m->o->speed->dispatch_us / 1e3;
	p->class_ms[cls] += c;
	p->class_kernels[cls]++;
	return c;
}

double hp_sim_io_ms(const struct sim *m, int write, uint64_t bytes)
{
	double rd = m->o->read_MBps > 0 ? m->o->read_MBps : 1000, wr = m->o->write_MBps > 0 ? m->o->write_MBps : 1000;

	return (double)bytes / 1e6 / (write ? wr : rd) * 1e3 + (write ? m->o->write_lat_us : m->o->read_lat_us) / 1e3;
}

/* Issue step s's I/O on the one I/O lane at time `now`: loads make their
 * step ready, write-backs hold step s (they free the budget it needs). */
static double issue_io(struct sim *m, int s, double now, double *io, double *ready)
{
	struct hp_plan *p = m->p;
	double wait = 0;

	for (int a = p->act_begin[s]; a < p->act_begin[s + 1]; a++) {
		const struct hp_plan_act_rec *x = &p->acts[a];
		double d;
		if (x->act != HP_ACT_WRITEBACK && x->act != HP_ACT_LOAD)
			continue;
		d = hp_sim_io_ms(m, x->act == HP_ACT_WRITEBACK, m->size[x->value]);
		*io = (*io > now ? *io : now) + d;
		*(x->act == HP_ACT_WRITEBACK ? &p->write_ms : &p->read_ms) += d;
		if (x->act == HP_ACT_WRITEBACK)
			wait = *io;
		else if (*io > ready[x->for_step])
			ready[x->for_step] = *io;
	}
	return wait;
}

/* Compute lanes (the task net's workers) and one I/O lane.  A step starts
 * on the first free lane once its inputs are computed, its loads are in
 * and the write-backs issued before it are done. */
void hp_sim_time_model(struct sim *m)
{
	struct hp_plan *p = m->p;
	const struct hp_graph *g = m->g;
	int w = m->o->workers > 0 ? (m->o->workers < 64 ? m->o->workers : 64) : 1;
	double lane[64] = { 0 }, io = 0, end = 0;
	double *ready = calloc((size_t)p->nsteps + 1, sizeof *ready), *done = calloc((size_t)g->nvalues + 1, sizeof *done);

	if (!ready || !done)
		goto out;
	for (int s = 0; s < p->nsteps; s++) {
		const struct hp_node *n = &g->nodes[p->node[s]];
		int l = 0;
		for (int k = 1; k < w; k++)
			if (lane[k] < lane[l])
				l = k;
		double c = step_ms(m, n, p), t = issue_io(m, s, lane[l], &io, ready);
		if (ready[s] > t)
			t = ready[s];
		if (lane[l] > t)
			t = lane[l];
		for (int j = 0; j < n->ninputs; j++)
			if (n->inputs[j] >= 0 && done[n->inputs[j]] > t)
				t = done[n->inputs[j]];
		lane[l] = t + c;
		for (int j = 0; j < n->noutputs; j++)
			if (n->outputs[j] >= 0)
				done[n->outputs[j]] = lane[l];
		if (lane[l] > end)
			end = lane[l];
		p->compute_ms += c;
	}
	p->io_ms = p->read_ms + p->write_ms;
	p->predicted_ms = end;
out:
	free(ready);
	free(done);
}
/* ---- reductions in flight ---- */

/* Predicted ms of reduction step n over the options' link: a ring
 * allreduce of its bytes, a reduce-scatter or an all-gather half of it. */
static double comm_ms(const struct sim *m, const struct hp_node *n)
{
	double N = m->o->comm_ranks, in = 0, out = 0, hops;

	for (int j = 1; j < n->ninputs; j++)
		in += n->inputs[j] >= 0 ? (double)m->size[n->inputs[j]] : 0;
	for (int j = 1; j < n->noutputs; j++)
		out += n->outputs[j] >= 0 ? (double)m->size[n->outputs[j]] : 0;
	hops = hp_comm_is_shard_op(n) ? N - 1 : 2 * (N - 1);
	return hops / N * (in > out ? in : out) / (m->o->comm_GBps * 1e6) + hops * m->o->comm_lat_us / 1e3;
}

/* The clock plan_flights and hp_sim_hoist_loads share (plan_sim.h). */
double *hp_sim_step_clock(const struct sim *m)
{
	const struct hp_plan *p = m->p;
	double *t0 = calloc((size_t)p->nsteps + 1, sizeof *t0);
	int w = m->o->workers > 0 ? m->o->workers : 1;

	if (!t0)
		return NULL;
	for (int s = 0; s < p->nsteps; s++) {
		const struct hp_node *n = &m->g->nodes[p->node[s]];
		t0[s + 1] = t0[s] + (hp_comm_is_allreduce(n) ? 0 : kernel_ms(m, n) / w);
	}
	return t0;
}

/* until[s] for every reduction step s: the kernels back to back on the
 * compute lanes (their work shared by the workers), the reductions one
 * after another from when they are issued (the communication thread's
 * FIFO); until[s] is the first step that starts after s's predicted end,
 * and never before the next reduction is issued: a reduction also lasts
 * until the slowest rank joins it, which no link figure predicts (on a
 * loaded machine a late peer stretched one past ten times its time), while
 * the FIFO starts the next one only after it, so a reduction still running
 * when the next is issued is the common case, not the exception. */
int hp_sim_plan_flights(struct sim *m)
{
	const struct hp_plan *p = m->p;
	double *t0 = hp_sim_step_clock(m), chain = 0;
	int prev = -1;

	m->until = calloc((size_t)p->nsteps + 1, sizeof *m->until);
	if (!t0 || !m->until) {
		free(t0);
		return hp_error(-ENOMEM, "out of memory planning");
	}
	for (int s = 0; s < p->nsteps; s++) {
		const struct hp_node *n = &m->g->nodes[p->node[s]];
		int e = s + 1;
		if (!hp_comm_is_allreduce(n))
			continue;
		chain = (chain > t0[s + 1] ? chain : t0[s + 1]) + comm_ms(m, n);
		while (e < p->nsteps && t0[e] < chain)
			e++;
		m->until[s] = e < p->nsteps ? e : NEVER; /* past the end: held to the run's end */
		if (prev >= 0 && m->until[prev] < s + 1)
			m->until[prev] = s + 1;
		prev = s;
	}
	free(t0);
	return 0;
}
