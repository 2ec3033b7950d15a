/* hpdlf error codes, last-error messages and logging.
 *
 *   int rc = hp_graph_load("model.onnx", &g);
 *   if (rc < 0)
 *           fprintf(stderr, "%s\n", hp_errmsg());   // "model.onnx: node 'conv3' (Conv): ..."
 *
 * Every library function returns 0 (or a non-negative count) on success and a
 * negative number on failure: -errno for system errors, or one of the HP_E*
 * codes below (all < -1000).  The failing function records a message saying
 * what and where in thread-local storage; hp_errmsg() returns it.  Libraries
 * never print: log lines go to the callback installed with hp_log_set().
 * Messages and log lines are one line of printable text: names from models
 * and strings from network peers in them are escaped (see hp_escape).
 */
#ifndef HPDLF_ERROR_H
#define HPDLF_ERROR_H

#include <stdarg.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

enum hp_status {
	HP_OK = 0,
	HP_EMODEL = -1001,       /* malformed or inconsistent model */
	HP_EUNSUPPORTED = -1002, /* unknown op or unsupported attribute value */
	HP_ESHAPE = -1003,       /* shape or dtype mismatch */
	HP_EDATA = -1004,        /* bad input data file (.npy, .npz) */
	HP_EBUDGET = -1005,      /* memory budget cannot hold the working set */
	HP_ECORRUPT = -1006,     /* checksum mismatch / torn data */
	HP_EFORMAT = -1007,      /* file of the wrong format or version */
	HP_EAUTH = -1008,        /* authentication refused */
	HP_EPROTO = -1009,       /* protocol violation */
	HP_EUSAGE = -1010,       /* bad argument from the caller */
	HP_EINTERNAL = -1011,    /* a bug: an invariant did not hold */
	HP_ECANCELED = -1012,    /* interrupted by the user */
	HP_EBUDGET_OP = -1013,   /* budget smaller than one operator needs at once
				  * (hp_exec_min_budget() says what works) */
	HP_ENOTCONST = -1014,    /* an input must be a compile-time constant (bind it) */
};

/* Name of a status code (HP_E* or -errno). Never NULL. */
const char *hp_strerror(int err);

/* The message recorded by the last failing call on this thread ("" if none). */
const char *hp_errmsg(void);

/* Record a message for `err` and return `err`, so callers can write
 * `return hp_error(HP_EMODEL, "%s: node '%s': ...", ...)`. */
int hp_error(int err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int hp_verror(int err, const char *fmt, va_list ap);

/* Prefix the current message with more context: "CTX: old message". */
int hp_error_prefix(int err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Copy src into buf (len bytes, terminated if len > 0) as one line of
 * printable text: control bytes become \n, \t, \r, \e or \xNN; C1 controls,
 * line separators and bidi overrides \uNNNN; bytes that are not UTF-8 \xNN;
 * other UTF-8 text stays as it is.  Cuts only between whole characters or
 * escapes.  Backslashes are kept, so escaping twice changes nothing.
 * Returns buf, for printing a name: printf("%s", hp_escape(name, b, sizeof b)). */
char *hp_escape(const char *src, char *buf, size_t len);

/* Status for a program's exit code: 2 for bad usage/model/data, else 1. */
int hp_exit_status(int err);

enum hp_log_level { HP_LOG_ERROR = 0, HP_LOG_WARN = 1, HP_LOG_INFO = 2, HP_LOG_DEBUG = 3 };

typedef void (*hp_log_fn)(int level, const char *msg, void *arg);

/* Install a log sink (NULL restores the default, which drops everything). */
void hp_log_set(hp_log_fn fn, void *arg, int max_level);
void hp_log(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#ifdef __cplusplus
}
#endif
#endif
