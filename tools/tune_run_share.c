/* One copy of the data for all trials: the runner opens the training and
 * validation files once; its trials inherit the open files (the fds stay
 * open across exec) and learn which fd is which path from
 * HPDLF_SHARED_FILES ("FD:PATH" lines).  In a trial every open of such a
 * path duplicates the inherited fd (common/file.h) and the data is mapped
 * from it: the page cache holds the one copy all trials read, the files
 * are opened once on the whole node. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/file.h"
#include "hpdlf/error.h"
#include "tools/exec_cli.h"
#include "tools/tune_run.h"

#define SHARE_ENV "HPDLF_SHARED_FILES"

static int share_one(const char *path, char *env, size_t len, uint64_t *bytes)
{
	struct stat st;
	int fd;

	if (!path || hp_file_shared(path) >= 0)
		return 0;
	if (strchr(path, '\n'))
		return hp_error(HP_EUSAGE, "%s: a data path with a newline cannot be shared with the trials", path);
	if ((fd = open(path, O_RDONLY)) < 0) /* no O_CLOEXEC: the trials inherit it */
		return hp_error(-errno, "%s: %s", path, strerror(errno));
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
		close(fd);
		return hp_error(HP_EUSAGE, "%s: not a regular file", path);
	}
	*bytes += (uint64_t)st.st_size;
	snprintf(env + strlen(env), len - strlen(env), "%d:%s\n", fd, path);
	return hp_file_share(path, fd);
}

int tune_share_open(const struct cli *c, uint64_t *bytes)
{
	const char *paths[4] = { c->data, c->labels, c->val_data, c->val_labels };
	char env[4 * 4200] = "";
	int rc = 0;

	*bytes = 0;
	for (int i = 0; rc == 0 && i < 4; i++)
		rc = share_one(paths[i], env, sizeof env, bytes);
	if (rc == 0 && setenv(SHARE_ENV, env, 1) < 0)
		rc = hp_error(-errno, "setenv: %s", strerror(errno));
	return rc;
}

int tune_share_from_env(void)
{
	const char *env = getenv(SHARE_ENV);
	char *copy, *line, *save = NULL;

	if (!env || !*env)
		return 0;
	if (!(copy = strdup(env)))
		return 2;
	for (line = strtok_r(copy, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		char *colon = strchr(line, ':'), *end;
		long fd = strtol(line, &end, 10);
		if (!colon || end != colon || fd < 0 || fcntl((int)fd, F_GETFD) < 0) {
			fprintf(stderr, "hpdlf-exec: %s: '%s' is no open FD:PATH\n", SHARE_ENV, line);
			free(copy);
			return 2;
		}
		fcntl((int)fd, F_SETFD, FD_CLOEXEC); /* this trial's own children do not need it */
		if (hp_file_share(colon + 1, (int)fd) < 0) {
			fprintf(stderr, "hpdlf-exec: %s\n", hp_errmsg());
			free(copy);
			return 2;
		}
	}
	free(copy);
	return 0;
}
