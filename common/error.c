/* Error codes, thread-local messages and the log sink. */
#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "hpdlf/error.h"

#define MSG_MAX 1024

static _Thread_local char last_msg[MSG_MAX];

static hp_log_fn log_fn;
static void *log_arg;
static int log_max = -1;

const char *hp_strerror(int err)
{
	switch (err) {
	case HP_OK: return "success";
	case HP_EMODEL: return "bad model";
	case HP_EUNSUPPORTED: return "unsupported";
	case HP_ESHAPE: return "shape mismatch";
	case HP_EDATA: return "bad data";
	case HP_EBUDGET: return "budget too small";
	case HP_ECORRUPT: return "corrupt data";
	case HP_EFORMAT: return "wrong format or version";
	case HP_EAUTH: return "authentication refused";
	case HP_EPROTO: return "protocol error";
	case HP_EUSAGE: return "bad usage";
	case HP_EINTERNAL: return "internal error";
	case HP_ECANCELED: return "interrupted";
	case HP_EBUDGET_OP: return "budget too small for one operator";
	case HP_ENOTCONST: return "input must be a compile-time constant";
	}
	if (err < 0 && err > -4096)
		return strerror(-err);
	return "unknown error";
}

const char *hp_errmsg(void)
{
	return last_msg;
}

/* Length of the well-formed UTF-8 sequence at s (n bytes left) and its code
 * point, or 0: overlong forms, surrogates and code points past U+10FFFF are
 * not text a terminal should be handed. */
static size_t utf8_seq(const unsigned char *s, size_t n, uint32_t *cp)
{
	static const uint32_t least[5] = { 0, 0, 0x80, 0x800, 0x10000 };
	size_t len = s[0] >= 0xf0 ? 4 : s[0] >= 0xe0 ? 3 : 2;
	uint32_t c = s[0] & (0x7fu >> len);

	if (s[0] < 0xc2 || s[0] > 0xf4 || len > n)
		return 0;
	for (size_t i = 1; i < len; i++) {
		if ((s[i] & 0xc0) != 0x80)
			return 0;
		c = c << 6 | (s[i] & 0x3f);
	}
	if (c < least[len] || c > 0x10ffff || (c >= 0xd800 && c <= 0xdfff))
		return 0;
	*cp = c;
	return len;
}

/* Code points that break a line or reorder what a terminal shows: C1
 * controls (0x9b is CSI), the line and paragraph separators, bidi marks,
 * embeddings, overrides and isolates. */
static int unsafe_cp(uint32_t c)
{
	return c <= 0x9f || c == 0x200e || c == 0x200f || (c >= 0x2028 && c <= 0x202e) ||
	       (c >= 0x2066 && c <= 0x2069);
}

/* The text for the character at s (n bytes left) in out; *used gets the
 * bytes it takes.  Backslash stays as it is: escaping is then idempotent, so
 * a message that quotes another (hp_error_prefix) is not escaped twice. */
static size_t escape_one(const unsigned char *s, size_t n, char out[8], size_t *used)
{
	static const char named[32] = { ['\n'] = 'n', ['\t'] = 't', ['\r'] = 'r', [0x1b] = 'e' };
	uint32_t cp;
	size_t len;

	*used = 1;
	if (s[0] >= 0x20 && s[0] < 0x7f) {
		out[0] = (char)s[0];
		return 1;
	}
	if (s[0] < 0x20 && named[s[0]])
		return (size_t)snprintf(out, 8, "\\%c", named[s[0]]);
	if (s[0] < 0x80 || !(len = utf8_seq(s, n, &cp)))
		return (size_t)snprintf(out, 8, "\\x%02x", s[0]);
	*used = len;
	if (unsafe_cp(cp))
		return (size_t)snprintf(out, 8, "\\u%04x", (unsigned)cp);
	memcpy(out, s, len);
	return len;
}

char *hp_escape(const char *src, char *buf, size_t len)
{
	const unsigned char *s = (const unsigned char *)(src ? src : "");
	size_t n = strlen((const char *)s), o = 0;

	if (!len)
		return buf;
	for (size_t i = 0, used; i < n; i += used) {
		char one[8];
		size_t k = escape_one(s + i, n - i, one, &used);
		if (o + k >= len)
			break; /* whole characters and escapes only */
		memcpy(buf + o, one, k);
		o += k;
	}
	buf[o] = 0;
	return buf;
}

/* Drop a multibyte character that truncation to buf's size cut in two,
 * which would otherwise end a long message in \xNN bytes. */
static void drop_cut_char(char *buf)
{
	size_t end = strlen(buf), lead = end;
	uint32_t cp;

	while (lead > 0 && end - lead < 4 && ((unsigned char)buf[lead - 1] & 0xc0) == 0x80)
		lead--;
	if (lead > 0 && (unsigned char)buf[lead - 1] >= 0xc0 &&
	    !utf8_seq((unsigned char *)buf + lead - 1, end - lead + 1, &cp))
		buf[lead - 1] = 0;
}

static void format_msg(char *buf, size_t len, const char *fmt, va_list ap)
{
	int n = vsnprintf(buf, len, fmt, ap);

	if (n < 0)
		buf[0] = 0;
	else if ((size_t)n >= len)
		drop_cut_char(buf);
}

/* Every message is escaped once formatted: names from models and strings
 * from network peers reach them, and a message is always one line. */
int hp_verror(int err, const char *fmt, va_list ap)
{
	char raw[MSG_MAX];

	format_msg(raw, sizeof raw, fmt, ap);
	hp_escape(raw, last_msg, sizeof last_msg);
	return err;
}

int hp_error(int err, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	hp_verror(err, fmt, ap);
	va_end(ap);
	return err;
}

int hp_error_prefix(int err, const char *fmt, ...)
{
	char old[MSG_MAX], pre[MSG_MAX], raw[MSG_MAX];
	va_list ap;

	memcpy(old, last_msg, sizeof old);
	va_start(ap, fmt);
	format_msg(pre, sizeof pre, fmt, ap);
	va_end(ap);
	if ((size_t)snprintf(raw, sizeof raw, "%s: %s", pre, old[0] ? old : hp_strerror(err)) >= sizeof raw)
		drop_cut_char(raw);
	hp_escape(raw, last_msg, sizeof last_msg);
	return err;
}

int hp_exit_status(int err)
{
	switch (err) {
	case HP_EMODEL:
	case HP_EUNSUPPORTED:
	case HP_ESHAPE:
	case HP_EDATA:
	case HP_EUSAGE:
	case HP_EFORMAT:
	case HP_EBUDGET:
	case HP_EBUDGET_OP:
	case HP_ENOTCONST:
	case -ENOENT:
	case -EACCES:
	case -EISDIR:
	case -ENOTDIR:
		return 2;
	default:
		return 1;
	}
}

void hp_log_set(hp_log_fn fn, void *arg, int max_level)
{
	log_fn = fn;
	log_arg = arg;
	log_max = fn ? max_level : -1;
}

void hp_log(int level, const char *fmt, ...)
{
	char raw[MSG_MAX], buf[MSG_MAX];
	va_list ap;

	if (!log_fn || level > log_max)
		return;
	va_start(ap, fmt);
	format_msg(raw, sizeof raw, fmt, ap);
	va_end(ap);
	log_fn(level, hp_escape(raw, buf, sizeof buf), log_arg);
}
