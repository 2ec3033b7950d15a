/* Daemon internals shared by daemon.c (connections, handshake, loop) and
 * daemon_ops.c (allocation table and requests of authenticated clients). */
#ifndef HPDLF_STORE_REMOTE_DAEMON_INT_H
#define HPDLF_STORE_REMOTE_DAEMON_INT_H

#include <pthread.h>
#include <stdint.h>

#include "store/remote/fabric.h"
#include "store/remote/remote.h"
#include "store/remote/wire.h"

#define HS_DAEMON_MAX_REGIONS 2

struct dregion {
	unsigned char *mem;
	uint64_t start, size;   /* in the daemon's address space */
	const char *kind;       /* "dram", "pmem" */
	struct hs_extents *ext;
	int fd;                 /* pmem: the mapped file */
	/* Counters for Stat: extents and bytes now, and since the start. */
	uint64_t used, extents, named;
	uint64_t allocs, frees, bytes_allocated, bytes_freed;
	int created;            /* pmem: this daemon created the file */
	int tidy;               /* closing: removed or truncated after the unmap */
};

/* Daemon-wide counters for Stat (only the control thread touches them). */
struct dcounters {
	uint64_t connections, auth_failures, leases_expired;
	uint64_t allocs, alloc_failures, frees, lease_frees, bytes_allocated, bytes_freed;
	uint64_t publishes, lookups, lookup_misses, removes, lists, stats, errors;
};

/* One extent handed out: owned by a client (lease) or named (owner 0).  It
 * is reachable by RMA only through its own registration: read-write for its
 * owner, read-only once named.  A shared extent (Share) is named but keeps
 * its owner and its read-write key, which Lookup hands to every
 * authenticated client. */
struct dalloc {
	uint64_t addr, len;
	uint64_t owner;
	struct fid_mr *mr;
	uint64_t key, rma_base;
	char *name;
	uint8_t *meta;
	size_t meta_len;
	uint8_t digest[HS_DIGEST_BYTES];
	int has_digest;
	int shared;
};

enum cstate { C_HELLO, C_AUTH, C_READY };

struct dclient {
	int fd;
	enum cstate state;
	uint64_t id;
	char host[48];          /* peer address, the key of its log budget */
	char peer[96];          /* host:port (client name), printable only */
	uint8_t cnonce[HS_NONCE_BYTES], snonce[HS_NONCE_BYTES];
	uint64_t accepted_ms;   /* the handshake must end by accepted_ms + deadline */
	uint64_t last_ms;       /* last byte received */
	uint8_t hdr[4];
	uint32_t hdr_got, body_len, body_got;
	uint8_t *body;
	int closing;
};

/* Log lines a peer may cause: a token bucket per host, so a hostile client
 * cannot flood the log (daemon_log.c). */
#define HS_LOG_PEERS 64
struct dlogpeer {
	char host[48];
	double tokens;
	uint64_t last_ms, suppressed;
};

struct hs_daemon {
	struct hs_daemon_config cfg;
	char listen[128], bound[128];
	struct hs_secret secret;
	struct hs_fab fab;
	struct dregion reg[HS_DAEMON_MAX_REGIONS];
	int nreg;
	int lfd;
	int stop_pipe[2];
	volatile int stopping;
	pthread_t progress;
	int progress_started;
	struct dclient **cl;
	unsigned ncl, nunauth;  /* connections, of which not authenticated */
	int spare_fd;           /* given up to accept (and close) one over the fd limit */
	struct dlogpeer logpeer[HS_LOG_PEERS];
	double log_all_tokens;  /* the budget of all peers together */
	uint64_t log_all_last, log_all_suppressed;
	uint64_t next_client;
	void *by_addr;          /* tsearch tree of struct dalloc by addr */
	void *by_name;          /* tsearch tree of named struct dalloc by name */
	uint64_t nallocs, nnamed, used;
	struct dcounters n;     /* request counters */
	uint64_t start_ms;      /* hs_now_ms() at open */
	char catalog[600];      /* pmem: PATH.names, the named extents */
	int tidy_ok;            /* set up in full (catalog read): closing may tidy the region files */
};

/* Handle one request of an authenticated client; fills the reply.  Returns 1
 * to stop the daemon (Shutdown), 0 otherwise. */
int hs_daemon_request(struct hs_daemon *d, struct dclient *c, const hs_msg *m, hs_msg *out,
		      Hpdlf__Store__Reply *r, char *text, size_t tlen);
/* Free reply payloads that hs_daemon_request allocated. */
void hs_daemon_reply_release(Hpdlf__Store__Reply *r);
/* The client's lease ended: return everything it owns. */
void hs_daemon_release_client(struct hs_daemon *d, struct dclient *c);
void hs_daemon_free_all(struct hs_daemon *d);
uint64_t hs_daemon_capacity(const struct hs_daemon *d);
/* Named extents of persistent regions: load at start, save on change. */
int hs_daemon_catalog_load(struct hs_daemon *d);
int hs_daemon_catalog_save(struct hs_daemon *d);
/* Zero every byte of the persistent region no named extent holds (a
 * previous run's clients left their bytes there). */
int hs_daemon_scrub_free(struct hs_daemon *d);

/* daemon_log.c: a log line caused by peer `host`, within its budget (a
 * burst, then a few a second; what was dropped is counted in the next). */
void hs_daemon_peer_log(struct hs_daemon *d, const char *host, int level, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

/* Closing (daemon_tidy.c): say which regions keep named tensors, then
 * remove or truncate a --pmem file that holds none (after the unmap). */
void hs_daemon_tidy_report(struct hs_daemon *d);
void hs_daemon_tidy_files(struct hs_daemon *d);

#endif
