/* Chrome trace events (internal to exec/): kernels on one lane per compute
 * worker, loads and write-backs on one lane per I/O queue, each run of a
 * session on a lane of its own (what lies between runs is the caller's:
 * a trainer's batch loading), and a "resident bytes" counter per tier.  Written as the JSON array format
 * that chrome://tracing and Perfetto open. */
#ifndef HPDLF_EXEC_TRACE_H
#define HPDLF_EXEC_TRACE_H

#include <stdint.h>

enum hp_trace_lane { HP_LANE_COMPUTE = 1, HP_LANE_IO = 100, HP_LANE_COMM = 200, HP_LANE_RUN = 300, HP_LANE_DATA = 301 };

struct hp_trace;

int hp_trace_open(const char *path, struct hp_trace **out);
/* name is copied; times in microseconds since hp_trace_open. */
void hp_trace_span(struct hp_trace *t, int lane, const char *cat, const char *name, double begin_us, double end_us);
void hp_trace_counter(struct hp_trace *t, const char *name, double at_us, double value);
/* A span on an I/O lane with "args":{"bytes":N}. */
void hp_trace_span_bytes(struct hp_trace *t, int lane, const char *cat, const char *name, double begin_us,
			 double end_us, uint64_t bytes);
/* One counter event with several series: "args":{keys[i]: vals[i], ...}. */
void hp_trace_counters(struct hp_trace *t, const char *name, double at_us, int n, const char *const *keys,
		       const double *vals);
/* Name a lane (thread_name metadata). */
void hp_trace_lane(struct hp_trace *t, int lane, const char *name);
double hp_trace_now_us(const struct hp_trace *t);
/* One more holder of t (a pipeline stage's sessions write one file, on
 * one clock): each holder closes it, the last close writes it. */
struct hp_trace *hp_trace_ref(struct hp_trace *t);
/* Write and free; returns the write status. Accepts NULL. */
int hp_trace_close(struct hp_trace *t);

#endif
