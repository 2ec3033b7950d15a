/* hpdlf-exec --listen-metrics HOST:PORT: the run's own Prometheus metrics
 * over HTTP (GET /metrics), from the samples of tools/exec_report.h. */
#ifndef HPDLF_TOOLS_EXEC_METRICS_H
#define HPDLF_TOOLS_EXEC_METRICS_H

#include "tools/exec_report.h"

/* Listen on spec for the run of `model` ("train" or "infer"); labels job
 * ($SLURM_JOB_ID, else "local"), model (the file's name without .onnx)
 * and rank.  0, or HP_EUSAGE (a bad address, a build without
 * libmicrohttpd) or -EADDRINUSE, with hp_error's message. */
int exec_metrics_start(const char *spec, const char *model, const char *mode, int rank);
/* After each step (nothing when not started). */
void exec_metrics_update(const struct exec_sample *x);
/* Stop serving (nothing when not started). */
void exec_metrics_stop(void);

#endif
