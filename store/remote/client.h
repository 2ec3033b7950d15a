/* One authenticated control connection from a client to a daemon. */
#ifndef HPDLF_STORE_REMOTE_CLIENT_H
#define HPDLF_STORE_REMOTE_CLIENT_H

#include <pthread.h>
#include <stdint.h>

#include "store/remote/wire.h"

#define HS_RCONN_MAX_REGIONS 4

/* A region of the daemon: capacity and kind only (extents carry their keys). */
struct hs_rregion {
	uint64_t start, size;
	char kind[8];
};

struct hs_rconn {
	int fd;
	char where[128];
	uint64_t seq;
	pthread_mutex_t mu;     /* one request at a time */
	int broken;             /* transport failed: never used again */
	char provider[64];
	uint8_t fabric_addr[256];
	size_t addrlen;
	struct hs_rregion reg[HS_RCONN_MAX_REGIONS];
	int nreg;
	uint64_t mr_mode, client_id, capacity;
	unsigned lease_ms;
};

/* Connect and authenticate (challenge-response; the daemon proves it knows
 * the secret too).  Errors name the daemon: HP_EAUTH for a refused or
 * missing token, HP_EPROTO for a version mismatch. */
int hs_rconn_open(const char *where, const struct hs_secret *s, int timeout_ms, struct hs_rconn **out);
void hs_rconn_close(struct hs_rconn *c);
/* Send req, wait for its Reply.  Returns the reply's status (with its message
 * in hp_errmsg()) or a transport error (-ECONNRESET, -ETIMEDOUT, HP_EPROTO:
 * then c->broken is set).  On success *rep (if rep) is the reply: hs_wire_free it. */
int hs_rconn_call(struct hs_rconn *c, hs_msg *req, hs_msg **rep, int timeout_ms);
/* As hs_rconn_call, but gives up at once (-EBUSY) if a request is running. */
int hs_rconn_trycall(struct hs_rconn *c, hs_msg *req, hs_msg **rep, int timeout_ms);

#endif
