/* --listen-metrics in a build without libmicrohttpd (meson -Dmetrics_http=disabled,
 * or libmicrohttpd-dev missing): refused as a usage error. */
#include "hpdlf/error.h"
#include "tools/inspect.h"

int insp_http_start(const char *spec, insp_render_fn render, void *arg, struct insp_http **out)
{
	(void)render, (void)arg;
	*out = NULL;
	return hp_error(HP_EUSAGE, "--listen-metrics %s: this build has no HTTP server (install libmicrohttpd-dev "
			"and rebuild; --prometheus-file F writes the same text to a file)", spec);
}

void insp_http_stop(struct insp_http *h)
{
	(void)h;
}

int insp_http_serve(const char *spec, insp_render_fn render, void *arg)
{
	struct insp_http *h;

	return insp_http_start(spec, render, arg, &h);
}
