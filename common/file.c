/* Opening user-named files: never block, never read what is not a file. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/file.h"
#include "hpdlf/error.h"

static const char *kind_of(mode_t m)
{
	return S_ISFIFO(m) ? "a FIFO" : S_ISSOCK(m) ? "a socket" : S_ISCHR(m) ? "a character device"
	       : S_ISBLK(m) ? "a block device" : "not a regular file";
}

/* Files a parent opened once for its children (hp_file_share): few, set
 * once at start-up before any thread, read-only after. */
#define MAX_SHARED 8
static struct {
	char *path;
	int fd;
} shared[MAX_SHARED];
static int nshared;

int hp_file_share(const char *path, int fd)
{
	if (nshared == MAX_SHARED)
		return hp_error(-ENOSPC, "%s: more than %d shared files", path, MAX_SHARED);
	if (!(shared[nshared].path = strdup(path)))
		return hp_error(-ENOMEM, "out of memory");
	shared[nshared++].fd = fd;
	return 0;
}

int hp_file_shared(const char *path)
{
	for (int i = 0; i < nshared; i++)
		if (!strcmp(shared[i].path, path))
			return shared[i].fd;
	return -1;
}

int hp_open_regular(const char *path, const char *what, int *fd, struct stat *st)
{
	const char *w = what ? what : "", *sep = what ? " " : "";
	int s = hp_file_shared(path);
	int f = s >= 0 ? fcntl(s, F_DUPFD_CLOEXEC, 0) : open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK), flags;

	*fd = -1;
	if (f < 0)
		return hp_error(-errno, "%s%s%s: %s", w, sep, path, strerror(errno));
	if (fstat(f, st) < 0) {
		int e = errno;
		close(f);
		return hp_error(-e, "%s%s%s: %s", w, sep, path, strerror(e));
	}
	if (S_ISDIR(st->st_mode)) {
		close(f);
		return hp_error(-EISDIR, "%s%s%s: is a directory", w, sep, path);
	}
	if (!S_ISREG(st->st_mode)) {
		close(f);
		return hp_error(HP_EUSAGE, "%s%s%s: is %s, not a regular file", w, sep, path, kind_of(st->st_mode));
	}
	flags = fcntl(f, F_GETFL);
	if (flags >= 0)
		fcntl(f, F_SETFL, flags & ~O_NONBLOCK);
	*fd = f;
	return 0;
}
