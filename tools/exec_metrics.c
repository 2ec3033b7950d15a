/* --listen-metrics: the run's metrics as Prometheus text over HTTP with
 * libmicrohttpd.  The run thread copies each step's sample into a snapshot
 * under a mutex; the server's thread renders the snapshot, so a scrape
 * never touches the session.  Base units throughout (seconds, bytes), the
 * step time as a histogram, and job/model/rank labels instead of a PID, so
 * that a requeued job continues its series. */
#include <errno.h>
#include <netdb.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include <microhttpd.h>

#include "hpdlf/error.h"
#include "tools/exec_metrics.h"

#define NBUCKETS 21             /* step time: le = 1 ms * 2^i, i < 21 (~17 min), then +Inf */

static struct {
	pthread_mutex_t mu;
	struct MHD_Daemon *d;
	char labels[512];       /* job="..",model="..",rank=".." */
	const char *mode;
	uint64_t steps, hist[NBUCKETS + 1];
	double sum_s, stall_s;
	struct exec_sample last;
} m = { .mu = PTHREAD_MUTEX_INITIALIZER };

/* A label value in the text format's escaping. */
static void escape(char *dst, size_t len, const char *s)
{
	size_t n = 0;

	for (; *s && n + 3 < len; s++) {
		if (*s == '\\' || *s == '"' || *s == '\n') {
			dst[n++] = '\\';
			dst[n++] = *s == '\n' ? 'n' : *s;
		} else {
			dst[n++] = *s;
		}
	}
	dst[n] = 0;
}

static void family(FILE *f, const char *name, const char *type, const char *help)
{
	fprintf(f, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void gauge(FILE *f, const char *name, const char *type, const char *help, double v)
{
	family(f, name, type, help);
	fprintf(f, "%s{%s} %.17g\n", name, m.labels, v);
}

static void tier_family(FILE *f, const char *name, const char *type, const char *help, int what)
{
	family(f, name, type, help);
	for (int i = 0; i < m.last.ntiers; i++) {
		const struct exec_tier_sample *t = &m.last.tier[i];
		uint64_t v = what == 0 ? t->used : what == 1 ? t->bytes_read : t->bytes_written;
		fprintf(f, "%s{%s,tier=\"%s\"} %llu\n", name, m.labels, t->name, (unsigned long long)v);
	}
}

static void render(FILE *f)
{
	const char *h = "hpdlf_exec_step_duration_seconds";
	uint64_t acc = 0;

	gauge(f, "hpdlf_exec_steps_total", "counter", "Steps (training) or iterations (inference) done.",
	      (double)m.steps);
	family(f, h, "histogram", "Wall time of a step or iteration.");
	for (int i = 0; i <= NBUCKETS; i++) {
		acc += m.hist[i];
		if (i < NBUCKETS)
			fprintf(f, "%s_bucket{%s,le=\"%.10g\"} %llu\n", h, m.labels, 1e-3 * (double)(1u << i),
				(unsigned long long)acc);
		else
			fprintf(f, "%s_bucket{%s,le=\"+Inf\"} %llu\n", h, m.labels, (unsigned long long)acc);
	}
	fprintf(f, "%s_sum{%s} %.17g\n%s_count{%s} %llu\n", h, m.labels, m.sum_s, h, m.labels,
		(unsigned long long)acc);
	gauge(f, "hpdlf_exec_stall_seconds_total", "counter", "Time compute waited on loads or the budget.", m.stall_s);
	if (m.last.has_loss && m.steps)
		gauge(f, "hpdlf_exec_loss", "gauge", "Loss of the last training step.", m.last.loss);
	gauge(f, "hpdlf_exec_steps_planned", "gauge", "Steps or iterations the run will do.", (double)m.last.total);
	gauge(f, "hpdlf_exec_resident_bytes", "gauge", "Tensor bytes in DRAM.", (double)m.last.resident);
	gauge(f, "hpdlf_exec_budget_bytes", "gauge", "The --budget (0: none).", (double)m.last.budget);
	gauge(f, "hpdlf_exec_rss_bytes", "gauge", "Resident set size of the process.", (double)m.last.rss);
	tier_family(f, "hpdlf_exec_tier_used_bytes", "gauge", "Bytes held by a store tier.", 0);
	tier_family(f, "hpdlf_exec_tier_read_bytes_total", "counter", "Bytes read from a store tier.", 1);
	tier_family(f, "hpdlf_exec_tier_written_bytes_total", "counter", "Bytes written to a store tier.", 2);
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url, const char *method,
				  const char *version, const char *data, size_t *data_len, void **state)
{
	struct MHD_Response *r;
	char *body = NULL;
	size_t len = 0;
	unsigned code = MHD_HTTP_OK;
	enum MHD_Result rc;
	FILE *f = open_memstream(&body, &len);

	(void)cls, (void)version, (void)data, (void)data_len, (void)state;
	if (!f)
		return MHD_NO;
	if (strcmp(method, "GET") && strcmp(method, "HEAD")) {
		code = MHD_HTTP_METHOD_NOT_ALLOWED;
		fputs("GET /metrics\n", f);
	} else if (strcmp(url, "/metrics")) {
		code = MHD_HTTP_NOT_FOUND;
		fputs("not found: try /metrics\n", f);
	} else {
		pthread_mutex_lock(&m.mu);
		render(f);
		pthread_mutex_unlock(&m.mu);
	}
	if (fclose(f) != 0 || !(r = MHD_create_response_from_buffer(len, body, MHD_RESPMEM_MUST_FREE))) {
		free(body);
		return MHD_NO;
	}
	MHD_add_response_header(r, "Content-Type", code == MHD_HTTP_OK ? "text/plain; version=0.0.4; charset=utf-8" :
								       "text/plain");
	rc = MHD_queue_response(conn, code, r);
	MHD_destroy_response(r);
	return rc;
}

static void set_labels(const char *model, const char *mode, int rank)
{
	const char *job = getenv("SLURM_JOB_ID"), *base = strrchr(model, '/');
	char j[128], name[256], e[256];
	size_t n;

	snprintf(name, sizeof name, "%s", base ? base + 1 : model);
	n = strlen(name);
	if (n > 5 && !strcmp(name + n - 5, ".onnx"))
		name[n - 5] = 0;
	escape(j, sizeof j, job && *job ? job : "local");
	escape(e, sizeof e, name);
	snprintf(m.labels, sizeof m.labels, "job=\"%s\",model=\"%s\",rank=\"%d\",mode=\"%s\"", j, e, rank, mode);
	m.mode = mode;
}

int exec_metrics_start(const char *spec, const char *model, const char *mode, int rank)
{
	char host[256];
	const char *colon = strrchr(spec, ':');
	struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE }, *ai;
	const union MHD_DaemonInfo *info;
	size_t n = colon ? (size_t)(colon - spec) : 0;
	int rc;

	if (!colon || !colon[1] || n >= sizeof host)
		return hp_error(HP_EUSAGE, "--listen-metrics: expected HOST:PORT, got '%s'", spec);
	memcpy(host, spec, n);
	host[n] = 0;
	if (n >= 2 && host[0] == '[' && host[n - 1] == ']') {
		memmove(host, host + 1, n - 2);
		host[n - 2] = 0;
	}
	if ((rc = getaddrinfo(host[0] ? host : NULL, colon + 1, &hints, &ai)) != 0)
		return hp_error(HP_EUSAGE, "--listen-metrics %s: %s", spec, gai_strerror(rc));
	set_labels(model, mode, rank);
	m.d = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | (ai->ai_family == AF_INET6 ? MHD_USE_IPv6 : 0), 0,
			       NULL, NULL, on_request, NULL, MHD_OPTION_SOCK_ADDR, ai->ai_addr,
			       MHD_OPTION_CONNECTION_TIMEOUT, 10u, MHD_OPTION_END);
	freeaddrinfo(ai);
	if (!m.d)
		return hp_error(-EADDRINUSE, "--listen-metrics %s: cannot listen there (in use, or not an address of "
				"this node)", spec);
	info = MHD_get_daemon_info(m.d, MHD_DAEMON_INFO_BIND_PORT);
	fprintf(stderr, "hpdlf-exec: serving /metrics on port %u\n", info ? info->port : 0u);
	return 0;
}

void exec_metrics_update(const struct exec_sample *x)
{
	double s = x->ms / 1e3;
	int b = 0;

	if (!m.d)
		return;
	while (b < NBUCKETS && s > 1e-3 * (double)(1u << b))
		b++;
	pthread_mutex_lock(&m.mu);
	m.steps++;
	m.hist[b]++;
	m.sum_s += s;
	m.stall_s += x->stall_ms / 1e3;
	m.last = *x;
	pthread_mutex_unlock(&m.mu);
}

void exec_metrics_stop(void)
{
	if (m.d)
		MHD_stop_daemon(m.d);
	m.d = NULL;
}
