/* hpdlf-store --listen-metrics HOST:PORT: the daemon serves GET /metrics
 * itself, with the same names and labels hpdlf-store-inspect --prometheus
 * gives the daemon as a target (target="<its bound HOST:PORT>").  Each
 * scrape asks the daemon its Stat over its own authenticated endpoint, as
 * hpdlf-store-inspect would, so both render the one answer through the one
 * writer (tools/inspect_out.c); the scrape shows as one connection in the
 * daemon's counters.  The HTTP server runs on libmicrohttpd's thread. */
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "hpdlf/error.h"
#include "store/remote/remote.h"
#include "tools/inspect.h"
#include "tools/store_metrics.h"

/* inspect_remote.c and inspect_http.c share these with hpdlf-store-inspect's
 * main; here the daemon's own signal handling stops everything. */
volatile sig_atomic_t insp_stop, insp_exit_on_signal;

void insp_wait_signal(void)
{
}

struct metrics {
	const char *address, *token_file;
	struct insp_http *http;
};

static struct metrics g_metrics;

static void render(FILE *f, void *arg)
{
	const struct metrics *m = arg;
	static struct insp_target t; /* one scrape at a time: libmicrohttpd's one thread */

	memset(&t, 0, sizeof t);
	snprintf(t.spec, sizeof t.spec, "%s", m->address);
	t.kind = INSP_REMOTE;
	t.token_file = m->token_file;
	t.rc = hs_remote_stat(m->address, m->token_file, 0, &t.dcur);
	t.state = t.rc == 0 ? INSP_LIVE : INSP_ERROR;
	if (t.rc < 0)
		snprintf(t.err, sizeof t.err, "%s", hp_errmsg());
	insp_print_prometheus(f, &t, 1);
}

int store_metrics_start(const char *spec, const char *address, const char *token_file)
{
	g_metrics.address = address;
	g_metrics.token_file = token_file;
	return insp_http_start(spec, render, &g_metrics, &g_metrics.http);
}

void store_metrics_stop(void)
{
	insp_http_stop(g_metrics.http);
	g_metrics.http = NULL;
}
