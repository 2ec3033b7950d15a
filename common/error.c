/* Error codes, thread-local messages and the log sink. */
#include <errno.h>
#include <stdarg.h>
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
	}
	if (err < 0 && err > -4096)
		return strerror(-err);
	return "unknown error";
}

const char *hp_errmsg(void)
{
	return last_msg;
}

int hp_verror(int err, const char *fmt, va_list ap)
{
	vsnprintf(last_msg, sizeof last_msg, fmt, ap);
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
	char old[MSG_MAX], pre[MSG_MAX];
	va_list ap;

	memcpy(old, last_msg, sizeof old);
	va_start(ap, fmt);
	vsnprintf(pre, sizeof pre, fmt, ap);
	va_end(ap);
	snprintf(last_msg, sizeof last_msg, "%s: %s", pre, old[0] ? old : hp_strerror(err));
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
	char buf[MSG_MAX];
	va_list ap;

	if (!log_fn || level > log_max)
		return;
	va_start(ap, fmt);
	vsnprintf(buf, sizeof buf, fmt, ap);
	va_end(ap);
	log_fn(level, buf, log_arg);
}
