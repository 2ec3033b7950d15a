/* Test helper: hpdlf-store daemons on 127.0.0.1 free ports, started and
 * stopped by the tests, with a token made for the run. */
#ifndef HPDLF_TESTS_REMOTE_DAEMONS_H
#define HPDLF_TESTS_REMOTE_DAEMONS_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define TD_MAX 4

struct td_daemon {
	pid_t pid;
	char addr[64];          /* 127.0.0.1:PORT */
	char log[512];          /* its stderr */
	char port_file[512];
};

struct td_env {
	const char *exe;        /* the hpdlf-store program */
	char dir[256];          /* scratch directory of this run */
	char token[512];        /* token file */
	char bad_token[512];    /* another token */
	int n;
	struct td_daemon d[TD_MAX];
	char list[TD_MAX * 64]; /* "a,b,c" */
};

/* Scratch dir and tokens; exe from argv[1] or $HPDLF_STORE_EXE. */
int td_init(struct td_env *e, int argc, char **argv);
void td_cleanup(struct td_env *e);
/* Start daemon i with `dram` bytes and extra arguments (NULL-terminated). */
int td_start(struct td_env *e, int i, const char *dram, const char *const *extra);
int td_start_n(struct td_env *e, int n, const char *dram);
/* SIGKILL (sig 9) or SIGTERM; waits for the exit and returns its status. */
int td_stop(struct td_env *e, int i, int sig);
void td_stop_all(struct td_env *e);
/* 1 if the daemon's log contains text. */
int td_log_has(const struct td_env *e, int i, const char *text);
/* Run the hpdlf-store program with args; returns its exit status, stderr in err. */
int td_run(const struct td_env *e, const char *const *args, char *err, size_t errlen);
/* Deterministic test data (splitmix64 stream). */
void td_fill(void *buf, size_t len, uint64_t seed);
uint64_t td_now_ms(void);

#endif
