/* --listen-metrics in a build without libmicrohttpd: refused (status 2). */
#include "hpdlf/error.h"

#include "tools/exec_metrics.h"

int exec_metrics_start(const char *spec, const char *model, const char *mode, int rank)
{
	(void)model, (void)mode, (void)rank;
	return hp_error(HP_EUSAGE, "--listen-metrics %s: this build has no HTTP server (install libmicrohttpd-dev "
			"and rebuild)", spec);
}

void exec_metrics_update(const struct exec_sample *x)
{
	(void)x;
}

void exec_metrics_stop(void)
{
}
