/* --listen-metrics: /metrics over HTTP with libmicrohttpd (Debian's
 * libmicrohttpd-dev).  One internal thread answers every connection in
 * turn, so the render callback never runs twice at once; the caller's
 * thread waits for SIGINT/SIGTERM. */
#include <errno.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include <microhttpd.h>

#include "hpdlf/error.h"
#include "tools/inspect.h"

struct server {
	insp_render_fn render;
	void *arg;
};

static enum MHD_Result reply(struct MHD_Connection *conn, unsigned code, const char *type, char *body, size_t len)
{
	struct MHD_Response *r = MHD_create_response_from_buffer(len, body, MHD_RESPMEM_MUST_FREE);
	enum MHD_Result rc;

	if (!r) {
		free(body);
		return MHD_NO;
	}
	MHD_add_response_header(r, "Content-Type", type);
	rc = MHD_queue_response(conn, code, r);
	MHD_destroy_response(r);
	return rc;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url, const char *method,
				  const char *version, const char *data, size_t *data_len, void **state)
{
	struct server *sv = cls;
	char *body = NULL;
	size_t len = 0;
	FILE *f;

	(void)version, (void)data, (void)data_len, (void)state;
	if (strcmp(method, "GET") && strcmp(method, "HEAD"))
		return reply(conn, MHD_HTTP_METHOD_NOT_ALLOWED, "text/plain", strdup("GET /metrics\n"), 13);
	if (strcmp(url, "/metrics"))
		return reply(conn, MHD_HTTP_NOT_FOUND, "text/plain", strdup("not found: try /metrics\n"), 24);
	if (!(f = open_memstream(&body, &len)))
		return MHD_NO;
	sv->render(f, sv->arg);
	if (fclose(f) != 0) {
		free(body);
		return MHD_NO;
	}
	return reply(conn, MHD_HTTP_OK, "text/plain; version=0.0.4; charset=utf-8", body, len);
}

/* HOST:PORT ("[::1]:9100", "0.0.0.0:9100", "localhost:0") as one address. */
static int resolve(const char *spec, struct addrinfo **out)
{
	char host[256];
	const char *colon = strrchr(spec, ':');
	struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE };
	size_t n;
	int rc;

	if (!colon || !colon[1] || (n = (size_t)(colon - spec)) >= sizeof host)
		return hp_error(HP_EUSAGE, "--listen-metrics: expected HOST:PORT, got '%s'", spec);
	memcpy(host, spec, n);
	host[n] = 0;
	if (n >= 2 && host[0] == '[' && host[n - 1] == ']') {
		memmove(host, host + 1, n - 2);
		host[n - 2] = 0;
	}
	rc = getaddrinfo(host[0] ? host : NULL, colon + 1, &hints, out);
	if (rc)
		return hp_error(HP_EUSAGE, "--listen-metrics %s: %s", spec, gai_strerror(rc));
	return 0;
}

struct insp_http {
	struct server sv;
	struct MHD_Daemon *d;
};

int insp_http_start(const char *spec, insp_render_fn render, void *arg, struct insp_http **out)
{
	struct insp_http *h = calloc(1, sizeof *h);
	struct addrinfo *ai;
	const union MHD_DaemonInfo *info;
	int rc = h ? resolve(spec, &ai) : -ENOMEM;

	if (rc < 0) {
		free(h);
		return rc;
	}
	h->sv = (struct server){ render, arg };
	h->d = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ERROR_LOG |
					(ai->ai_family == AF_INET6 ? MHD_USE_IPv6 : 0),
				0, NULL, NULL, on_request, &h->sv, MHD_OPTION_SOCK_ADDR, ai->ai_addr,
				MHD_OPTION_CONNECTION_TIMEOUT, 10u, MHD_OPTION_END);
	freeaddrinfo(ai);
	if (!h->d) {
		free(h);
		return hp_error(-EADDRINUSE, "--listen-metrics %s: cannot listen there (in use, or not an address "
				"of this node)", spec);
	}
	info = MHD_get_daemon_info(h->d, MHD_DAEMON_INFO_BIND_PORT);
	/* the port actually bound (PORT 0 asks for any free one): scripts read it */
	fprintf(stderr, "%s: serving /metrics on port %u\n", program_invocation_short_name, info ? info->port : 0u);
	*out = h;
	return 0;
}

void insp_http_stop(struct insp_http *h)
{
	if (!h)
		return;
	MHD_stop_daemon(h->d);
	free(h);
}

int insp_http_serve(const char *spec, insp_render_fn render, void *arg)
{
	struct insp_http *h;
	int rc = insp_http_start(spec, render, arg, &h);

	if (rc < 0)
		return rc;
	insp_wait_signal();
	insp_http_stop(h);
	return 0;
}
