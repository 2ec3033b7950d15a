/* hpdlf-exec's sink for the library's log lines (hp_log): the library never
 * prints, so without a sink its warnings (a daemon declared dead, redundancy
 * lost, a spill file without O_DIRECT, no statistics page) were dropped.
 * Warnings and errors go to stderr as "hpdlf-exec: warning: ..."; the
 * environment variable HPDLF_LOG_LEVEL (error, warn, info, debug) changes
 * the threshold. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hpdlf/error.h"
#include "tools/exec_cli.h"

/* as printed, and as HPDLF_LOG_LEVEL names them */
static const char *const level_names[] = { "error", "warning", "info", "debug" };
static const char *const level_env[] = { "error", "warn", "info", "debug" };

static void exec_log_sink(int level, const char *msg, void *arg)
{
	(void)arg;
	fprintf(stderr, "hpdlf-exec: %s: %s\n", level_names[level < 0 ? 0 : level > 3 ? 3 : level], msg);
}

int exec_log_init(void)
{
	const char *env = getenv("HPDLF_LOG_LEVEL");
	int level = HP_LOG_WARN;

	if (env && *env) {
		for (level = 0; level < 4 && strcmp(env, level_env[level]); level++)
			;
		if (level == 4) {
			fprintf(stderr, "hpdlf-exec: HPDLF_LOG_LEVEL='%s': expected error, warn, info or debug\n", env);
			return 2;
		}
	}
	hp_log_set(exec_log_sink, NULL, level);
	return 0;
}
