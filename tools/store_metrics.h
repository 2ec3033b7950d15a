/* hpdlf-store --listen-metrics (tools/store_metrics.c). */
#ifndef HPDLF_TOOLS_STORE_METRICS_H
#define HPDLF_TOOLS_STORE_METRICS_H

/* Serve /metrics on spec (HOST:PORT) for the daemon bound at address;
 * 0, or an error (HP_EUSAGE: a bad address or a build without HTTP). */
int store_metrics_start(const char *spec, const char *address, const char *token_file);
void store_metrics_stop(void);

#endif
