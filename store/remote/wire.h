/* Control-connection plumbing shared by the daemon and its clients:
 * frames, protobuf messages, the challenge-response MACs, sockets. */
#ifndef HPDLF_STORE_REMOTE_WIRE_H
#define HPDLF_STORE_REMOTE_WIRE_H

#include <stddef.h>
#include <stdint.h>

#include "store/remote/hpdlf_store.pb-c.h"

typedef Hpdlf__Store__Msg hs_msg;

#define HS_WIRE_VERSION 2       /* 2: per-extent keys, digests of named extents */
#define HS_WIRE_MAX_FRAME 65536u
#define HS_NONCE_BYTES 32
#define HS_MAC_BYTES 32
#define HS_KEY_BYTES 32
#define HS_NAME_MAX 255
#define HS_META_MAX 512
#define HS_DIGEST_BYTES 32      /* keyed BLAKE2b-256 of a named extent */

/* The shared secret: K = BLAKE2b-256 of the token file's bytes.  K lives in
 * memory from sodium_malloc (guard pages, locked, left out of core dumps),
 * shared by every hs_secret of the same token: kmem points at its
 * HS_KEY_BYTES bytes (use HS_KEY_BYTES, not sizeof).  Pass hs_secret by
 * pointer, never copy it. */
struct hs_secret {
	int have;
	const unsigned char *kmem;
};
/* path NULL: $HPDLF_TOKEN_FILE; neither: s->have = 0 and 0 returned.  The
 * file must be a regular file of 16..4096 bytes, not all alike, with no
 * access for group or others: anything else is HP_EUSAGE, with the fix. */
int hs_secret_load(const char *path, struct hs_secret *s);
/* Drop s's hold on K (wiped with the last); s->have = 0.  Accepts an unloaded
 * or freed secret.  A secret never freed is not leaked twice: loads of the
 * same token share K. */
void hs_secret_free(struct hs_secret *s);
/* MAC over label || a || b (both HS_NONCE_BYTES); s must be loaded (have). */
void hs_auth_mac(const struct hs_secret *s, const char *label, const uint8_t *a, const uint8_t *b,
		 uint8_t mac[HS_MAC_BYTES]);
/* 1 if mac (of mac_len bytes) is the right one, in constant time. */
int hs_auth_check(const struct hs_secret *s, const char *label, const uint8_t *a, const uint8_t *b,
		  const uint8_t *mac, size_t mac_len);
void hs_random(void *buf, size_t len);

/* Blocking frame I/O with a deadline (ms).  recv: -ETIMEDOUT, -ECONNRESET at
 * EOF, HP_EPROTO for a bad length or undecodable message. */
int hs_wire_send(int fd, const hs_msg *m, int timeout_ms);
int hs_wire_recv(int fd, hs_msg **out, int timeout_ms);
/* Decode one frame body (no length prefix); NULL if malformed. */
hs_msg *hs_wire_decode(const uint8_t *buf, size_t len);
void hs_wire_free(hs_msg *m);
/* A Reply message (status, message) ready to send; fields may be added. */
void hs_reply_init(hs_msg *m, Hpdlf__Store__Reply *r, uint64_t seq, int status, const char *text);

/* "host:port" -> parts; port 0 allowed only if allow_zero. */
int hs_split_hostport(const char *where, char *host, size_t hostlen, unsigned *port, int allow_zero);
/* TCP connect with a timeout; returns the fd (blocking, TCP_NODELAY). */
int hs_tcp_connect(const char *where, int timeout_ms);
/* Listening socket bound exactly to host:port; *bound gets "host:port". */
int hs_tcp_listen(const char *where, char *bound, size_t len);
/* 1 if name is a valid tensor name (1..255 printable bytes, no '/'). */
int hs_name_ok(const char *name);
uint64_t hs_now_ms(void);

#endif
