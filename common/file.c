/* Opening user-named files: never block, never read what is not a file. */
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

#include "common/file.h"
#include "hpdlf/error.h"

static const char *kind_of(mode_t m)
{
	return S_ISFIFO(m) ? "a FIFO" : S_ISSOCK(m) ? "a socket" : S_ISCHR(m) ? "a character device"
	       : S_ISBLK(m) ? "a block device" : "not a regular file";
}

int hp_open_regular(const char *path, const char *what, int *fd, struct stat *st)
{
	const char *w = what ? what : "", *sep = what ? " " : "";
	int f = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK), flags;

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
