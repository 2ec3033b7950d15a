/* The planner's simulation state, shared by the files that make a plan
 * (plan.c drives them): plan_evict.c chooses and drops victims and keeps
 * the holds of reductions in flight, plan_sim.c simulates the runs and
 * turns them into actions, plan_time.c predicts the plan's time, and
 * plan_query.c answers questions about a built plan (in-place rules, next
 * uses).  Not for users of the planner: they see plan.h. */
#ifndef HPDLF_EXEC_PLAN_SIM_H
#define HPDLF_EXEC_PLAN_SIM_H

#include <stdint.h>

#include "exec/plan.h"
#include "exec/plan_heap.h"

#define NEVER HP_PLAN_NEVER

struct rec {
	int step, order, seq;
	int free_after;       /* evictions: the victim's last pin before it */
	int nvictims;         /* loads: evictions made for it (the recs just before) */
	struct hp_plan_act_rec a;
};

struct sim {
	const struct hp_graph *g;
	const struct hp_plan_opts *o;
	struct hp_plan *p;
	uint64_t *size;
	int *use_start, *uses, *cursor; /* CSR of read steps per value */
	int *nu;                        /* per value: next_use's last answer (0: none since
					 * the cursors were reset) */
	char *resident, *dirty, *below, *pinned, *persist;
	char *mgd;                      /* per value: managed() */
	int *in_start, *in;             /* step s's inputs: in[in_start[s] .. in_start[s + 1])
					 * (build_schedule), NULL before */
	int *out_start, *out;           /* its outputs, likewise */
	int *resident_list, nresident;
	int *resident_at;               /* v's index in resident_list, -1: none */
	int resident_twice;             /* a value was listed twice: look up by scan */
	int *last_evict;                /* step of a value's latest eviction, -1 */
	int *last_pin;                  /* step a value was last pinned, -1 */
	int *pre;                       /* rec of a value's latest preload, -1 */
	uint64_t cur, *step_peak;
	struct rec *recs;
	int nrecs, caprecs;
	uint64_t budget;
	uint64_t step_max;              /* the largest step's need (min_budget) */
	/* reductions in flight (plan_opts' comm_*): per step, the first step
	 * its buffers are free again (s + 1: at once); per value, the step its
	 * hold ends (0: not held), and the held values */
	int *until, *hold, *held, nheld;
	int policy;                     /* enum victim_policy */
	/* the values that may be evicted, clean [0] and dirty [1], by next
	 * use (hp_sim_cand_push: lazily, stale entries dropped at the top);
	 * under VICTIM_SMALL_LAST the small ones apart, clean [2], dirty [3] */
	struct hp_vheap cand[4];
	int cand_oom;
};

/* managed(), from the simulation's own array: the value structs are
 * scattered cache lines; the passes over every step read this flag for
 * each input and output (a third of their time on the 10,001-node MLP's
 * training graph). */
static inline int mg(const struct sim *m, int v)
{
	return v >= 0 && m->mgd[v];
}

/* Victim policies (hp_plan_opts.victims: how many of them hp_plan_build
 * tries, keeping the plan that moves least).  Belady's farthest next use
 * counts evictions, not bytes: a dirty victim is written back and read
 * again, a clean one only read.  The 3-D U-Net of bench_ooc_targets.py
 * (64^3, 12 bands) at a quarter of its peak: Belady 64.8 MiB read and 52.1
 * written a run, clean first 61.3 and 46.1, and 4.5% less CPU a run (359.5
 * against 376.5 ms, medians of 5 alternating).  (Distance times bytes and
 * distance over bytes were tried too: they won rarely, and the first
 * planned a write-back of a graph input that runs do not make.) */
enum victim_policy {
	VICTIM_FARTHEST, /* farthest next use */
	VICTIM_CLEAN,    /* a clean victim's distance counts twice */
	VICTIM_SMALL_LAST, /* Belady among values of more than HP_PLAN_SMALL bytes; the
			    * others only when dead or when none of those can go */
	VICTIM_NPOL
};

/* plan_evict.c: records, residency, victims, holds */
int hp_sim_push(struct sim *m, int step, int order, int value, enum hp_plan_act act, int for_step);
void hp_sim_set_resident(struct sim *m, int v, int on);
void hp_sim_cand_push(struct sim *m, int v, int step);
int hp_sim_pick_victim(struct sim *m, int pol, int step, int after, int *far);
int hp_sim_drop(struct sim *m, int victim, int far, int step);
int hp_sim_make_room(struct sim *m, uint64_t bytes, int step);
void hp_sim_hold_step(struct sim *m, const struct hp_node *n, int until);
void hp_sim_release_holds(struct sim *m, int upto, int now);

/* plan_sim.c: the simulated runs and the actions they record */
uint64_t hp_sim_step_need(struct sim *m, int s);
int hp_sim_simulate(struct sim *m, int pass);
int hp_sim_hoist_loads(struct sim *m);
int hp_sim_room_from(struct sim *m);
int hp_sim_emit_acts(struct sim *m);

/* plan_time.c: the time model and the reductions' flights */
/* Predicted ms of a write-back (write 1) or load of `bytes` alone on the I/O lane. */
double hp_sim_io_ms(const struct sim *m, int write, uint64_t bytes);
/* t[s] for s in 0..nsteps: predicted ms from the run's start to step s's
 * start, the kernels back to back, their work shared by the workers (no
 * I/O waits); NULL when out of memory; the caller frees it. */
double *hp_sim_step_clock(const struct sim *m);
int hp_sim_plan_flights(struct sim *m);
void hp_sim_time_model(struct sim *m);

/* plan_query.c: hp_plan_inplace_src with comm = hp_plan_comm_inplace(g, p, s) */
int hp_plan_inplace_src_with(const struct hp_graph *g, const struct hp_plan *p, int s, int o, int comm);
/* ... with step s's edges given: in[j], out[o] for its node's inputs[j],
 * outputs[o] (the sim's flat copy: its node's arrays are a cache miss) */
int hp_plan_inplace_src_edges(const struct hp_graph *g, const struct hp_plan *p, int s, int o, int comm, const int *in,
			      const int *out);

#endif
