/* Test helper: start and stop hpdlf-store daemons on loopback ports. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "daemons.h"

uint64_t td_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

void td_fill(void *buf, size_t len, uint64_t seed)
{
	uint8_t *p = buf;
	uint64_t x = seed;

	for (size_t i = 0; i < len; i += 8) {
		uint64_t z = (x += 0x9e3779b97f4a7c15ull);
		z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
		z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
		z ^= z >> 31;
		memcpy(p + i, &z, len - i < 8 ? len - i : 8);
	}
}

static int write_token(const char *path, uint64_t seed)
{
	uint8_t key[32];
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);

	td_fill(key, sizeof key, seed ^ (uint64_t)getpid() ^ (uint64_t)time(NULL));
	if (fd < 0 || write(fd, key, sizeof key) != (ssize_t)sizeof key)
		return -1;
	return close(fd);
}

int td_init(struct td_env *e, int argc, char **argv)
{
	const char *tmp = getenv("TMPDIR");

	memset(e, 0, sizeof *e);
	e->exe = argc > 1 ? argv[1] : getenv("HPDLF_STORE_EXE");
	if (!e->exe) {
		fprintf(stderr, "usage: %s PATH/TO/hpdlf-store\n", argv[0]);
		return -1;
	}
	snprintf(e->dir, sizeof e->dir, "%s/hpdlf-remote-XXXXXX", tmp ? tmp : "/tmp");
	if (!mkdtemp(e->dir))
		return -1;
	snprintf(e->token, sizeof e->token, "%s/token", e->dir);
	snprintf(e->bad_token, sizeof e->bad_token, "%s/bad-token", e->dir);
	signal(SIGPIPE, SIG_IGN);
	return write_token(e->token, 1) || write_token(e->bad_token, 2) ? -1 : 0;
}

static void rm_dir(const char *dir)
{
	char cmd[600];

	snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
	if (system(cmd) != 0)
		fprintf(stderr, "cannot remove %s\n", dir);
}

void td_cleanup(struct td_env *e)
{
	td_stop_all(e);
	if (e->dir[0] && !getenv("TD_KEEP"))
		rm_dir(e->dir);
}

static int wait_port(struct td_daemon *d)
{
	for (int k = 0; k < 500; k++) {
		FILE *f = fopen(d->port_file, "r");
		int st;
		if (f) {
			int ok = fscanf(f, "%63s", d->addr) == 1;
			fclose(f);
			if (ok)
				return 0;
		}
		if (waitpid(d->pid, &st, WNOHANG) == d->pid) {
			d->pid = 0;
			return -1;
		}
		usleep(10000);
	}
	return -1;
}

static void update_list(struct td_env *e)
{
	size_t n = 0;

	e->list[0] = 0;
	for (int i = 0; i < e->n; i++)
		n += (size_t)snprintf(e->list + n, sizeof e->list - n, "%s%s", n ? "," : "", e->d[i].addr);
}

int td_start(struct td_env *e, int i, const char *dram, const char *const *extra)
{
	struct td_daemon *d = &e->d[i];
	const char *argv[32] = { e->exe, "--listen", "127.0.0.1:0", "--dram", dram, "--token-file", e->token,
				 "--port-file", d->port_file, "--lease-ms", "1500", "--log-level", "debug" };
	int argc = 13;

	snprintf(d->port_file, sizeof d->port_file, "%s/port.%d", e->dir, i);
	snprintf(d->log, sizeof d->log, "%s/daemon.%d.log", e->dir, i);
	argv[8] = d->port_file;
	unlink(d->port_file);
	for (int k = 0; extra && extra[k] && argc < 31; k++)
		argv[argc++] = extra[k];
	argv[argc] = NULL;
	d->pid = fork();
	if (d->pid < 0)
		return -1;
	if (d->pid == 0) {
		int fd = open(d->log, O_WRONLY | O_CREAT | O_APPEND, 0600);
		dup2(fd, 2);
		dup2(fd, 1);
		execv(e->exe, (char *const *)argv);
		_exit(127);
	}
	if (i >= e->n)
		e->n = i + 1;
	if (wait_port(d) < 0) {
		fprintf(stderr, "daemon %d did not start; its log %s:\n", i, d->log);
		return -1;
	}
	update_list(e);
	return 0;
}

int td_start_n(struct td_env *e, int n, const char *dram)
{
	for (int i = 0; i < n; i++)
		if (td_start(e, i, dram, NULL) < 0)
			return -1;
	return 0;
}

int td_stop(struct td_env *e, int i, int sig)
{
	struct td_daemon *d = &e->d[i];
	int st = 0;

	if (d->pid <= 0)
		return -1;
	kill(d->pid, sig);
	while (waitpid(d->pid, &st, 0) < 0 && errno == EINTR)
		;
	d->pid = 0;
	return st;
}

void td_stop_all(struct td_env *e)
{
	for (int i = 0; i < e->n; i++)
		if (e->d[i].pid > 0)
			td_stop(e, i, SIGKILL);
	e->n = 0;
	e->list[0] = 0;
}

int td_log_has(const struct td_env *e, int i, const char *text)
{
	FILE *f = fopen(e->d[i].log, "r");
	char line[1024];
	int found = 0;

	if (!f)
		return 0;
	while (!found && fgets(line, sizeof line, f))
		found = strstr(line, text) != NULL;
	fclose(f);
	return found;
}

int td_run(const struct td_env *e, const char *const *args, char *err, size_t errlen)
{
	char path[600];
	const char *argv[32] = { e->exe };
	int argc = 1, st = 0;
	pid_t pid;

	snprintf(path, sizeof path, "%s/run.err", e->dir);
	for (int k = 0; args[k] && argc < 31; k++)
		argv[argc++] = args[k];
	argv[argc] = NULL;
	pid = fork();
	if (pid == 0) {
		int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
		dup2(fd, 2);
		execv(e->exe, (char *const *)argv);
		_exit(127);
	}
	while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
		;
	if (err) {
		FILE *f = fopen(path, "r");
		size_t n = f ? fread(err, 1, errlen - 1, f) : 0;
		err[n] = 0;
		if (f)
			fclose(f);
	}
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}
