/* hpdlf-store daemon: log lines that peers cause, within a budget per peer
 * host (a token bucket) and one for all peers together, so a hostile client
 * cannot flood the log or the disk under it. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "hpdlf/error.h"
#include "store/remote/daemon_int.h"

#define BURST 20.0              /* lines a peer may cause at once */
#define PER_SECOND 2.0          /* and then this many a second */
#define ALL_BURST 200.0         /* all peers together */
#define ALL_PER_SECOND 20.0

static int take(double *tokens, uint64_t *last_ms, uint64_t now, double burst, double rate)
{
	*tokens += (double)(now - *last_ms) * rate / 1000.0;
	if (*tokens > burst)
		*tokens = burst;
	*last_ms = now;
	if (*tokens < 1.0)
		return 0;
	*tokens -= 1.0;
	return 1;
}

/* The bucket of host: its own slot, else the least recently used one. */
static struct dlogpeer *peer_of(struct hs_daemon *d, const char *host, uint64_t now)
{
	struct dlogpeer *lru = &d->logpeer[0];

	for (int i = 0; i < HS_LOG_PEERS; i++) {
		struct dlogpeer *p = &d->logpeer[i];
		if (p->host[0] && !strcmp(p->host, host))
			return p;
		if (p->last_ms < lru->last_ms)
			lru = p;
	}
	snprintf(lru->host, sizeof lru->host, "%s", host);
	lru->tokens = BURST;
	lru->last_ms = now;
	lru->suppressed = 0;
	return lru;
}

void hs_daemon_peer_log(struct hs_daemon *d, const char *host, int level, const char *fmt, ...)
{
	uint64_t now = hs_now_ms();
	struct dlogpeer *p = peer_of(d, host, now);
	char msg[512], dropped[96] = "";
	va_list ap;

	if (!d->log_all_last) {
		d->log_all_last = now;
		d->log_all_tokens = ALL_BURST;
	}
	if (!take(&p->tokens, &p->last_ms, now, BURST, PER_SECOND)) {
		p->suppressed++;
		return;
	}
	if (!take(&d->log_all_tokens, &d->log_all_last, now, ALL_BURST, ALL_PER_SECOND)) {
		d->log_all_suppressed++;
		p->suppressed++;
		return;
	}
	if (p->suppressed || d->log_all_suppressed)
		snprintf(dropped, sizeof dropped, " [%llu earlier lines from %s, %llu from all peers, not logged]",
			 (unsigned long long)p->suppressed, host, (unsigned long long)d->log_all_suppressed);
	p->suppressed = 0;
	d->log_all_suppressed = 0;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	hp_log(level, "%s%s", msg, dropped);
}
