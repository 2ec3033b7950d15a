/* The step time of data-parallel training with its gradient reductions
 * (internal to exec/): an alpha-beta model of the ring allreduce per
 * bucket, overlapped with backward as the plan's schedule allows.  Pure
 * (plan_comm.c): no MPI, no session; the link figures come from the
 * command line (--link-bandwidth, --link-latency) or from a measurement at
 * start-up under a launcher (train_dp_plan.c). */
#ifndef HPDLF_EXEC_PLAN_COMM_H
#define HPDLF_EXEC_PLAN_COMM_H

#include <stdint.h>

#include "hpdlf/graph.h"

struct hp_plan;
struct hp_speed_compute;

struct hp_link {
	double GBps;    /* bytes per second / 1e9 one rank sends and receives at once */
	double lat_us;  /* one message's fixed cost */
};

struct hp_comm_pred {
	int ranks, buckets;
	uint64_t bucket;        /* bytes per bucket the prediction used */
	uint64_t grad_bytes;    /* gradient bytes reduced per step */
	double sent_bytes;      /* bytes each rank sends per step: 2(N-1)/N of them */
	double compute_ms;      /* the step alone (the plan's prediction, I/O included) */
	double comm_ms;         /* the reductions back to back */
	double exposed_ms;      /* what of comm_ms the step waits for */
	double step_ms;         /* compute_ms + exposed_ms */
	double hidden;          /* 1 - exposed/comm: the fraction behind backward */
	double efficiency;      /* compute_ms / step_ms: N ranks vs N times one at this per-rank batch */
};

/* One ring allreduce of `bytes` over `ranks` ranks:
 * 2(N-1)/N * bytes / bandwidth + 2(N-1) * latency, in ms. */
double hp_comm_ring_ms(const struct hp_link *l, int ranks, double bytes);
/* Predict a step of training graph g planned as p (kernel times from sp;
 * base_ms the plan's own step time).  With AllReduce nodes in g, its
 * buckets; without, buckets of `bucket` bytes formed as train_dp.c would
 * (0: hp_comm_best_bucket).  overlap: the reductions run beside the
 * kernels (out of core, the task net); else on the kernels' lane, in
 * their turn (in core with HPDLF_COMM_THREAD=0: the session runs them
 * inline).  0 or -ENOMEM. */
int hp_comm_predict(const struct hp_graph *g, const struct hp_plan *p, const struct hp_speed_compute *sp,
		    double base_ms, const struct hp_link *l, int ranks, uint64_t bucket, int overlap,
		    struct hp_comm_pred *out);
/* The bucket size (a power of two between 64 KiB and 256 MiB) whose
 * predicted step is shortest for g without AllReduce nodes: large enough
 * that the latency is amortised, small enough that the reductions overlap
 * backward; ties go to the larger size (fewer messages). */
uint64_t hp_comm_best_bucket(const struct hp_graph *g, const struct hp_plan *p, const struct hp_speed_compute *sp,
			     const struct hp_link *l, int ranks, int overlap);

#endif
