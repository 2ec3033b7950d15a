/* Remote tier and hpdlf-store daemon (implementers and tools; users never
 * see it).
 *
 * A daemon lends registered memory; clients reach it with one-sided RMA over
 * a libfabric RDM endpoint.  Control messages (hpdlf_store.proto) travel on
 * a TCP connection to the daemon's HOST:PORT, which is also the client's
 * lease: when it closes or falls silent, the daemon frees what the client
 * allocated (named extents excepted).
 *
 *   struct hs_remote_opts ro;
 *   hs_remote_opts_init(&ro);
 *   ro.endpoints = "10.0.0.1:7411,10.0.0.2:7411";   // or hs_remote_find_endpoints()
 *   ro.token_file = "/home/me/.hpdlf-token";
 *   struct hs_tier_config cfg = { .name = "remote", .ext = &ro };
 *   struct hs_tier *t;
 *   if (hs_tier_remote_open(&cfg, &t) < 0) ...;    // hp_errmsg() names the daemon
 *   uint64_t a;
 *   t->ops->place(t, 4 << 20, &a);                   // placed by capacity-aware hashing
 *   hs_tier_rw(t, HS_IO_WRITE, a, buf, 4 << 20);     // fi_write, delivery complete
 *
 * Tier addresses: bits 48..63 hold the daemon index + 1, bits 0..47 the
 * address in that daemon's space (so no address is below 2^48 and the
 * reserved head of struct hs_tier_config must be 0).
 */
#ifndef HPDLF_STORE_REMOTE_H
#define HPDLF_STORE_REMOTE_H

#include <stddef.h>
#include <stdint.h>

#include "store/tier.h"

#define HS_REMOTE_DEFAULT_PORT 7411
#define HS_REMOTE_ADDR_BITS 48
#define HS_REMOTE_MAX_DAEMONS 256

struct hs_remote_opts {
	const char *endpoints;  /* "host:port,..." (NULL: cfg->path) */
	const char *token_file; /* NULL: env HPDLF_TOKEN_FILE */
	const char *provider;   /* NULL: the daemons' provider (or FI_PROVIDER) */
	int replicas;           /* copies of every extent on distinct daemons (1 or 2) */
	unsigned connect_timeout_ms;  /* per daemon (default 3000) */
	unsigned keepalive_ms;  /* ping period (default 250) */
	unsigned dead_ms;       /* no answer for this long: the daemon is dead (default 1500) */
	size_t max_segment;     /* split transfers above this (0: the provider's maximum) */
	unsigned max_inflight;  /* RMA operations posted at once (default 32) */
	int skip_unreachable;   /* open with the daemons that answer (default 0: all must) */
};

void hs_remote_opts_init(struct hs_remote_opts *o);
int hs_tier_remote_open(const struct hs_tier_config *cfg, struct hs_tier **out);
/* The same from the public spec (hs_tier_open, hs_store_open); the build
 * without libfabric or libsodium has only this, refusing
 * (tier_remote_none.c). */
int hs_tier_remote_open_spec(const struct hs_remote_spec *r, const char *name, struct hs_tier **out);

/* The daemons of this job: --store list, else --hostfile (one host[:port] a
 * line, '#' comments), else $HPDLF_STORE, else the nodes of $SLURM_JOB_NODELIST
 * (port $HPDLF_STORE_PORT or 7411).  *out is malloc'd "host:port,...". */
int hs_remote_find_endpoints(const char *store, const char *hostfile, char **out);
/* Expand a Slurm hostlist ("n[01-03,7],gpu1") into "n01,n02,n03,n7,gpu1". */
int hs_slurm_hostlist_expand(const char *list, char **out);

/* Daemon of a tier address: "host:port" in buf; 1 if that daemon is dead. */
int hs_remote_daemon_of(struct hs_tier *t, uint64_t addr, char *buf, size_t len);
/* Number of daemons declared dead so far (failure detection). */
int hs_remote_dead_count(struct hs_tier *t);

/* Named extents (datasets, weights) visible to every client of the job:
 * read-only once published, and carrying a digest (BLAKE2b-256 keyed with
 * the job's secret, over name, metadata and content) that hs_remote_get
 * checks, so changed bytes are refused, never returned. */
#define HS_REMOTE_DIGEST_BYTES 32
struct hs_remote_named {
	char name[256];
	uint64_t addr;          /* tier address */
	uint64_t len;
	uint8_t meta[512];
	size_t meta_len;
	uint8_t digest[HS_REMOTE_DIGEST_BYTES];
	int has_digest;         /* 0: stored by a daemon of protocol 1 */
	char daemon[128];
	int shared;             /* a shared extent (hs_remote_share): writable, no digest */
};
/* ops->place preferring the daemons' persistent regions (--pmem) when asked. */
int hs_remote_alloc(struct hs_tier *t, uint64_t len, int persistent, uint64_t *addr);
/* Store len bytes of buf (both multiples of HS_IO_ALIGN, buf aligned) as the
 * named extent `name` with meta (at most 512 bytes), persistent regions
 * first: allocate, write, publish with its digest.  -EEXIST if taken. */
int hs_remote_put(struct hs_tier *t, const char *name, const void *buf, uint64_t len, const void *meta,
		  size_t meta_len);
/* -ENOENT if no daemon has it. */
int hs_remote_lookup(struct hs_tier *t, const char *name, struct hs_remote_named *out);
/* Read a looked-up extent into buf (n->len bytes, aligned) and check its
 * digest: 0, HP_ECORRUPT (naming it and its daemon) if anything changed
 * since put, 1 if it has no digest to check (stored by protocol 1). */
int hs_remote_get(struct hs_tier *t, const struct hs_remote_named *n, void *buf);
int hs_remote_remove(struct hs_tier *t, const char *name);
/* Every named extent of every live daemon: *out malloc'd, returns the count. */
int hs_remote_list(struct hs_tier *t, struct hs_remote_named **out);
/* Shared extents, for mailboxes that ranks of one job write one-sidedly
 * into each other's memory (asynchronous SGD): len bytes (a multiple of
 * HS_IO_ALIGN) on daemon `daemon` (an index of the tier's list), zeroed,
 * named `name` and reachable read-write by every client that holds the
 * job's token (a client with another token cannot even connect).  Unlike
 * hs_remote_put's extents they change, carry no digest, are never
 * persisted, and die with their owner: its release (ops->release) or its
 * lease.  -EEXIST if the name is taken. */
int hs_remote_share(struct hs_tier *t, int daemon, const char *name, uint64_t len, uint64_t *addr);
/* Another client's shared extent by name: its tier address and length
 * (then hs_tier_rw reads and writes it).  -ENOENT if no daemon has it,
 * HP_EUSAGE if `name` is a read-only named extent. */
int hs_remote_open_shared(struct hs_tier *t, const char *name, uint64_t *addr, uint64_t *len);
/* The daemons of the tier: how many, and daemon i's "host:port" (1 if dead). */
int hs_remote_daemons(struct hs_tier *t);
int hs_remote_daemon_where(struct hs_tier *t, int i, char *buf, size_t len);
/* A second tier on the same daemons and token, one copy per extent, with
 * its own endpoint and connections (so its traffic and failures stay
 * apart from t's). */
int hs_remote_reopen(struct hs_tier *t, const char *name, struct hs_tier **out);
/* Stop every daemon of the tier (authenticated Shutdown). */
int hs_remote_shutdown_all(struct hs_tier *t);

/* Statistics of one daemon (hpdlf-store-inspect HOST:PORT).  The daemon
 * cannot see the bytes clients move: RMA is one-sided, the target's CPU
 * takes no part in it; so it counts requests, extents and allocated bytes. */
#define HS_REMOTE_STAT_MAX_TIERS 4
struct hs_remote_tier_stat {
	char kind[8];           /* "dram", "pmem" */
	uint64_t capacity, used, extents, named;
	uint64_t allocs, frees, bytes_allocated, bytes_freed; /* since the start */
};
struct hs_remote_stat {
	char daemon[128];       /* the endpoint asked */
	char provider[64];
	unsigned stat_version;  /* 0: a daemon older than the counters below the
				 * first block (they are then 0), 2: all filled in */
	uint64_t capacity, used, extents, named, rss;
	uint64_t clients;       /* connections open now, the asking one included */
	uint64_t clients_ready; /* of which authenticated */
	uint64_t uptime_ms;
	uint64_t connections, auth_failures, leases_expired;
	uint64_t allocs, alloc_failures, frees, lease_frees, bytes_allocated, bytes_freed;
	uint64_t publishes, lookups, lookup_misses, removes, lists, stats, errors;
	int ntiers;
	struct hs_remote_tier_stat tier[HS_REMOTE_STAT_MAX_TIERS];
};
/* Connect to endpoint ("host:port"), authenticate with token_file (NULL:
 * $HPDLF_TOKEN_FILE), ask Stat, close.  timeout_ms 0: 3000.  Errors name
 * the endpoint (hp_errmsg()): -ECONNREFUSED and other -errno for the
 * network, HP_EAUTH with the daemon's refusal, HP_EUSAGE for a bad endpoint
 * or token file, HP_EPROTO for a version mismatch. */
int hs_remote_stat(const char *endpoint, const char *token_file, int timeout_ms, struct hs_remote_stat *out);

/* The daemon (tools/hpdlf-store.c is its command line). */
struct hs_daemon_config {
	const char *listen;     /* HOST:PORT; port 0 picks a free one */
	uint64_t dram;          /* bytes of DRAM to lend */
	const char *pmem_path;  /* optional persistent region (file, DAX) */
	uint64_t pmem_size;
	const char *token_file;
	const char *provider;   /* NULL: FI_PROVIDER or the first secure one */
	unsigned lease_ms;      /* drop clients silent this long (default 5000) */
	unsigned max_clients;   /* authenticated connections (default 1024) */
	unsigned max_unauth;    /* connections still in the handshake (default 64):
				 * beyond it the oldest is dropped */
	unsigned handshake_ms;  /* deadline for the whole handshake (default 3000) */
};
struct hs_daemon;
int hs_daemon_open(const struct hs_daemon_config *c, struct hs_daemon **out);
/* Serve until hs_daemon_stop() or an authenticated Shutdown; 0 or error. */
int hs_daemon_run(struct hs_daemon *d);
/* Async-signal-safe. */
void hs_daemon_stop(struct hs_daemon *d);
void hs_daemon_close(struct hs_daemon *d);
/* The address actually bound ("127.0.0.1:40123"), and the provider. */
const char *hs_daemon_address(const struct hs_daemon *d);
const char *hs_daemon_provider(const struct hs_daemon *d);

#endif
