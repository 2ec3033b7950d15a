/* Control-connection plumbing: frames, messages, MACs, sockets. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "store/remote/lazy.h" /* first: renames the loaded functions */
#include <sodium.h>

#include "hpdlf/error.h"
#include "store/remote/wire.h"

uint64_t hs_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

void hs_random(void *buf, size_t len)
{
	if (sodium_init() < 0)
		abort(); /* no entropy source: nothing secure can be done */
	randombytes_buf(buf, len);
}

/* Derived keys live in one table from sodium_malloc: guard pages, locked
 * (never swapped), MADV_DONTDUMP (never in a core file).  A slot per
 * distinct key, counted: loads of the same token share one, so a process
 * that loads it again and again (a stat poller, one store per command)
 * holds it once even where a caller never calls hs_secret_free.  The last
 * slot is scratch for hashing before the match is known. */
#define KEY_SLOTS 64
static pthread_mutex_t keys_mu = PTHREAD_MUTEX_INITIALIZER;
static unsigned char *keys;
static unsigned key_refs[KEY_SLOTS];

static unsigned char *key_slot(int i)
{
	return keys + (size_t)i * HS_KEY_BYTES;
}

/* K of token in a slot of the table; its address in *out. */
static int key_store(const char *path, const unsigned char *token, size_t len, const unsigned char **out)
{
	unsigned char *scratch;
	int i, hit = -1, empty = -1;

	pthread_mutex_lock(&keys_mu);
	if (!keys && !(keys = sodium_malloc((size_t)(KEY_SLOTS + 1) * HS_KEY_BYTES))) {
		pthread_mutex_unlock(&keys_mu);
		return hp_error(-ENOMEM, "token file %s: no memory for the key", path);
	}
	scratch = key_slot(KEY_SLOTS);
	crypto_generichash(scratch, HS_KEY_BYTES, token, len, NULL, 0);
	for (i = 0; i < KEY_SLOTS && hit < 0; i++) {
		if (key_refs[i] && !sodium_memcmp(key_slot(i), scratch, HS_KEY_BYTES))
			hit = i;
		else if (!key_refs[i] && empty < 0)
			empty = i;
	}
	if (hit < 0 && empty >= 0)
		memcpy(key_slot(hit = empty), scratch, HS_KEY_BYTES);
	sodium_memzero(scratch, HS_KEY_BYTES);
	if (hit >= 0) {
		key_refs[hit]++;
		*out = key_slot(hit);
	}
	pthread_mutex_unlock(&keys_mu);
	if (hit < 0)
		return hp_error(-ENOMEM, "token file %s: %d other tokens are in use in this process", path, KEY_SLOTS);
	return 0;
}

void hs_secret_free(struct hs_secret *s)
{
	uintptr_t at, base;

	if (!s)
		return;
	pthread_mutex_lock(&keys_mu);
	at = (uintptr_t)s->kmem;
	base = (uintptr_t)keys;
	if (keys && at >= base && at < base + (uintptr_t)KEY_SLOTS * HS_KEY_BYTES) {
		int i = (int)((at - base) / HS_KEY_BYTES);
		if (key_refs[i] && --key_refs[i] == 0)
			sodium_memzero(key_slot(i), HS_KEY_BYTES);
	}
	pthread_mutex_unlock(&keys_mu);
	s->have = 0;
	s->kmem = NULL;
}

#define TOKEN_MIN 16
#define TOKEN_MAX 4096
/* How to make a token only its owner can read (no window in which the
 * bytes sit in a file others can open, as with write-then-chmod). */
#define MAKE_TOKEN "make one: (umask 077; head -c 32 /dev/urandom > %s)"

static const char *file_kind(mode_t m)
{
	return S_ISDIR(m) ? "a directory" : S_ISFIFO(m) ? "a FIFO" : S_ISCHR(m) ? "a character device" :
	       S_ISBLK(m) ? "a block device" : S_ISSOCK(m) ? "a socket" : "a special file";
}

/* A file fit to hold the secret: regular (a symlink to one is fine: stat
 * and fstat see the target), TOKEN_MIN..TOKEN_MAX bytes, and no access for
 * group or others (an ACL granting any shows in the group bits). */
static int token_check(const char *path, const struct stat *sb)
{
	if (!S_ISREG(sb->st_mode))
		return hp_error(HP_EUSAGE, "token file %s is %s, not a regular file; " MAKE_TOKEN, path,
				file_kind(sb->st_mode), "~/.hpdlf-token");
	if (sb->st_mode & 077)
		return hp_error(HP_EUSAGE, "token file %s is open to group or others (mode %04o): chmod 600 %s "
				"(and make a new token if others could read it)", path, (unsigned)(sb->st_mode & 07777),
				path);
	if (sb->st_size < TOKEN_MIN || sb->st_size > TOKEN_MAX)
		return hp_error(HP_EUSAGE, "token file %s holds %lld bytes, not %d to %d; " MAKE_TOKEN, path,
				(long long)sb->st_size, TOKEN_MIN, TOKEN_MAX, path);
	return 0;
}

/* The token's bytes into buf (TOKEN_MAX), their count in *len.  stat
 * first, so a device is refused without being opened (opening one can
 * act: a tape rewinds); O_NONBLOCK, so a FIFO swapped in after the stat
 * cannot hang the open; fstat of what was opened decides. */
static int token_read(const char *path, unsigned char *buf, size_t *len)
{
	struct stat sb;
	size_t got = 0;
	ssize_t n = 1;
	int fd, rc;

	if (stat(path, &sb) < 0)
		return hp_error(-errno, "token file %s: %s", path, strerror(errno));
	if ((rc = token_check(path, &sb)) < 0)
		return rc;
	if ((fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY)) < 0)
		return hp_error(-errno, "token file %s: %s", path, strerror(errno));
	if (fstat(fd, &sb) < 0)
		rc = hp_error(-errno, "token file %s: %s", path, strerror(errno));
	else
		rc = token_check(path, &sb);
	while (rc == 0 && got < (size_t)sb.st_size && n > 0) {
		n = read(fd, buf + got, (size_t)sb.st_size - got);
		if (n < 0 && errno == EINTR)
			n = 1;
		else if (n > 0)
			got += (size_t)n;
	}
	close(fd);
	if (rc == 0 && got != (size_t)sb.st_size)
		rc = hp_error(-EIO, "token file %s: read %zu of its %lld bytes", path, got, (long long)sb.st_size);
	*len = got;
	return rc;
}

/* A token of one byte repeated (head -c 32 /dev/zero) is no secret. */
static int token_uniform(const unsigned char *buf, size_t len)
{
	size_t i = 1;

	while (i < len && buf[i] == buf[0])
		i++;
	return i == len;
}

int hs_secret_load(const char *path, struct hs_secret *s)
{
	unsigned char *buf;
	size_t len = 0;
	int rc;

	memset(s, 0, sizeof *s);
	if (!path || !*path)
		path = getenv("HPDLF_TOKEN_FILE");
	if (!path || !*path)
		return 0;
	if ((rc = hs_remote_libs_load()) < 0)
		return rc;
	if (sodium_init() < 0)
		return hp_error(HP_EINTERNAL, "libsodium cannot initialise");
	/* The raw token is guarded like K, and wiped by sodium_free. */
	if (!(buf = sodium_malloc(TOKEN_MAX)))
		return hp_error(-ENOMEM, "token file %s: no memory to read it", path);
	rc = token_read(path, buf, &len);
	if (rc == 0 && token_uniform(buf, len))
		rc = hp_error(HP_EUSAGE, "token file %s: its %zu bytes are all the same, no secret; " MAKE_TOKEN, path,
			      len, path);
	if (rc == 0)
		rc = key_store(path, buf, len, &s->kmem);
	sodium_free(buf);
	s->have = rc == 0;
	return rc;
}

static void mac_of(const struct hs_secret *s, const char *label, const uint8_t *a, const uint8_t *b,
		   uint8_t mac[HS_MAC_BYTES])
{
	uint8_t msg[16 + 2 * HS_NONCE_BYTES] = { 0 };

	snprintf((char *)msg, 16, "%s", label);
	memcpy(msg + 16, a, HS_NONCE_BYTES);
	memcpy(msg + 16 + HS_NONCE_BYTES, b, HS_NONCE_BYTES);
	crypto_auth(mac, msg, sizeof msg, s->kmem);
}

void hs_auth_mac(const struct hs_secret *s, const char *label, const uint8_t *a, const uint8_t *b,
		 uint8_t mac[HS_MAC_BYTES])
{
	mac_of(s, label, a, b, mac);
}

int hs_auth_check(const struct hs_secret *s, const char *label, const uint8_t *a, const uint8_t *b,
		  const uint8_t *mac, size_t mac_len)
{
	uint8_t want[HS_MAC_BYTES];

	if (!s->have || mac_len != HS_MAC_BYTES)
		return 0;
	mac_of(s, label, a, b, want);
	return sodium_memcmp(want, mac, HS_MAC_BYTES) == 0;
}

/* Wait for fd to be ready for `ev` until deadline (ms of hs_now_ms). */
static int wait_fd(int fd, short ev, uint64_t deadline)
{
	for (;;) {
		uint64_t now = hs_now_ms();
		struct pollfd p = { .fd = fd, .events = ev };
		int rc;

		if (now >= deadline)
			return -ETIMEDOUT;
		rc = poll(&p, 1, (int)(deadline - now));
		if (rc > 0)
			return 0;
		if (rc < 0 && errno != EINTR)
			return -errno;
	}
}

static int send_all(int fd, const uint8_t *p, size_t len, uint64_t deadline)
{
	while (len) {
		ssize_t n = send(fd, p, len, MSG_NOSIGNAL | MSG_DONTWAIT);
		if (n > 0) {
			p += n;
			len -= (size_t)n;
			continue;
		}
		if (n < 0 && errno != EAGAIN && errno != EINTR)
			return errno == EPIPE ? -ECONNRESET : -errno;
		int rc = wait_fd(fd, POLLOUT, deadline);
		if (rc < 0)
			return rc;
	}
	return 0;
}

static int recv_all(int fd, uint8_t *p, size_t len, uint64_t deadline)
{
	while (len) {
		ssize_t n = recv(fd, p, len, MSG_DONTWAIT);
		if (n > 0) {
			p += n;
			len -= (size_t)n;
			continue;
		}
		if (n == 0)
			return -ECONNRESET;
		if (errno != EAGAIN && errno != EINTR)
			return -errno;
		int rc = wait_fd(fd, POLLIN, deadline);
		if (rc < 0)
			return rc;
	}
	return 0;
}

int hs_wire_send(int fd, const hs_msg *m, int timeout_ms)
{
	size_t len = hpdlf__store__msg__get_packed_size(m);
	uint8_t *buf;
	int rc;

	if (len > HS_WIRE_MAX_FRAME)
		return hp_error(HP_EPROTO, "control message of %zu bytes exceeds the %u-byte limit", len,
				HS_WIRE_MAX_FRAME);
	buf = malloc(4 + len);
	if (!buf)
		return -ENOMEM;
	buf[0] = (uint8_t)(len >> 24);
	buf[1] = (uint8_t)(len >> 16);
	buf[2] = (uint8_t)(len >> 8);
	buf[3] = (uint8_t)len;
	hpdlf__store__msg__pack(m, buf + 4);
	rc = send_all(fd, buf, 4 + len, hs_now_ms() + (uint64_t)timeout_ms);
	free(buf);
	return rc;
}

hs_msg *hs_wire_decode(const uint8_t *buf, size_t len)
{
	hs_msg *m = hpdlf__store__msg__unpack(NULL, len, buf);

	if (m && m->body_case == HPDLF__STORE__MSG__BODY__NOT_SET) {
		hpdlf__store__msg__free_unpacked(m, NULL);
		return NULL;
	}
	return m;
}

void hs_wire_free(hs_msg *m)
{
	if (m)
		hpdlf__store__msg__free_unpacked(m, NULL);
}

int hs_wire_recv(int fd, hs_msg **out, int timeout_ms)
{
	uint64_t deadline = hs_now_ms() + (uint64_t)timeout_ms;
	uint8_t hdr[4], *buf;
	uint32_t len;
	int rc;

	rc = recv_all(fd, hdr, 4, deadline);
	if (rc < 0)
		return rc;
	len = (uint32_t)hdr[0] << 24 | (uint32_t)hdr[1] << 16 | (uint32_t)hdr[2] << 8 | hdr[3];
	if (len == 0 || len > HS_WIRE_MAX_FRAME)
		return hp_error(HP_EPROTO, "control frame of %u bytes (limit %u)", len, HS_WIRE_MAX_FRAME);
	buf = malloc(len);
	if (!buf)
		return -ENOMEM;
	rc = recv_all(fd, buf, len, deadline);
	if (rc == 0) {
		*out = hs_wire_decode(buf, len);
		if (!*out)
			rc = hp_error(HP_EPROTO, "undecodable control message (%u bytes)", len);
	}
	free(buf);
	return rc;
}

void hs_reply_init(hs_msg *m, Hpdlf__Store__Reply *r, uint64_t seq, int status, const char *text)
{
	hpdlf__store__msg__init(m);
	hpdlf__store__reply__init(r);
	m->seq = seq;
	m->body_case = HPDLF__STORE__MSG__BODY_REPLY;
	m->reply = r;
	r->status = status;
	r->message = (char *)(text ? text : "");
}

int hs_split_hostport(const char *where, char *host, size_t hostlen, unsigned *port, int allow_zero)
{
	const char *colon = strrchr(where, ':');
	char *end;
	unsigned long p;

	if (!colon || colon == where || (size_t)(colon - where) >= hostlen)
		return hp_error(HP_EUSAGE, "'%s' is not HOST:PORT", where);
	errno = 0;
	p = strtoul(colon + 1, &end, 10);
	if (errno || end == colon + 1 || *end || p > 65535 || (p == 0 && !allow_zero))
		return hp_error(HP_EUSAGE, "'%s': bad port", where);
	memcpy(host, where, (size_t)(colon - where));
	host[colon - where] = 0;
	if (host[0] == '[' && host[strlen(host) - 1] == ']') {
		memmove(host, host + 1, strlen(host));
		host[strlen(host) - 1] = 0;
	}
	*port = (unsigned)p;
	return 0;
}

static int resolve(const char *where, int passive, struct addrinfo **res, int allow_zero)
{
	char host[256], serv[16];
	unsigned port;
	struct addrinfo hints = { .ai_socktype = SOCK_STREAM, .ai_family = AF_UNSPEC };
	int rc;

	rc = hs_split_hostport(where, host, sizeof host, &port, allow_zero);
	if (rc < 0)
		return rc;
	snprintf(serv, sizeof serv, "%u", port);
	hints.ai_flags = passive ? AI_PASSIVE : 0;
	rc = getaddrinfo(host, serv, &hints, res);
	if (rc)
		return hp_error(-EHOSTUNREACH, "%s: cannot resolve '%s': %s", where, host, gai_strerror(rc));
	return 0;
}

int hs_tcp_connect(const char *where, int timeout_ms)
{
	struct addrinfo *res, *ai;
	uint64_t deadline = hs_now_ms() + (uint64_t)timeout_ms;
	int rc, fd = -1, err = ECONNREFUSED, one = 1;

	rc = resolve(where, 0, &res, 0);
	if (rc < 0)
		return rc;
	for (ai = res; ai; ai = ai->ai_next) {
		fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
		if (fd < 0)
			continue;
		if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0 ||
		    (errno == EINPROGRESS && wait_fd(fd, POLLOUT, deadline) == 0)) {
			socklen_t sl = sizeof err;
			getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &sl);
			if (err == 0)
				break;
		} else {
			err = errno == EINPROGRESS ? ETIMEDOUT : errno;
		}
		close(fd);
		fd = -1;
	}
	freeaddrinfo(res);
	if (fd < 0)
		return hp_error(-err, "daemon %s: cannot connect: %s", where, strerror(err));
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
	return fd;
}

static void sockname(int fd, char *bound, size_t len)
{
	struct sockaddr_storage ss;
	socklen_t sl = sizeof ss;
	char host[INET6_ADDRSTRLEN] = "?";
	unsigned port = 0;

	getsockname(fd, (struct sockaddr *)&ss, &sl);
	if (ss.ss_family == AF_INET) {
		struct sockaddr_in *s = (struct sockaddr_in *)&ss;
		inet_ntop(AF_INET, &s->sin_addr, host, sizeof host);
		port = ntohs(s->sin_port);
		snprintf(bound, len, "%s:%u", host, port);
	} else {
		struct sockaddr_in6 *s = (struct sockaddr_in6 *)&ss;
		inet_ntop(AF_INET6, &s->sin6_addr, host, sizeof host);
		port = ntohs(s->sin6_port);
		snprintf(bound, len, "[%s]:%u", host, port);
	}
}

int hs_tcp_listen(const char *where, char *bound, size_t len)
{
	struct addrinfo *res;
	int rc, fd, one = 1;

	rc = resolve(where, 1, &res, 1);
	if (rc < 0)
		return rc;
	fd = socket(res->ai_family, res->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0) {
		rc = hp_error(-errno, "listen %s: socket: %s", where, strerror(errno));
		goto out;
	}
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
	if (bind(fd, res->ai_addr, res->ai_addrlen) < 0 || listen(fd, 128) < 0) {
		rc = hp_error(-errno, "listen %s: %s", where, strerror(errno));
		close(fd);
		goto out;
	}
	sockname(fd, bound, len);
	rc = fd;
out:
	freeaddrinfo(res);
	return rc;
}

int hs_name_ok(const char *name)
{
	size_t n = name ? strlen(name) : 0;

	if (n == 0 || n > HS_NAME_MAX)
		return 0;
	for (size_t i = 0; i < n; i++)
		if ((unsigned char)name[i] < 0x21 || name[i] == '/' || (unsigned char)name[i] == 0x7f)
			return 0;
	return 1;
}
