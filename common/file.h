/* Opening the files a user names (models, external data, .npy/.npz) without
 * ever blocking on something that is not a file. */
#ifndef HPDLF_COMMON_FILE_H
#define HPDLF_COMMON_FILE_H

#include <sys/stat.h>

/* Open path read-only, O_NONBLOCK (a FIFO or a device never blocks the open)
 * and fstat it: 0 and *fd (blocking mode restored) with *st, or an error
 * naming the file: -ENOENT/-EACCES/-EISDIR as the system says, HP_EUSAGE
 * for anything that is not a regular file (FIFO, socket, /dev/zero).
 * `what` starts the message ("model", "input"), may be NULL. */
int hp_open_regular(const char *path, const char *what, int *fd, struct stat *st);

/* A file this process received open (fd, read-only) under the name path:
 * hp_open_regular(path) then duplicates fd instead of opening the file
 * again, so that trials started by one parent (hpdlf-exec --tune) read one
 * open file, one copy of its pages.  0, or -ENOSPC past a few files. */
int hp_file_share(const char *path, int fd);
/* The fd shared under path, or -1. */
int hp_file_shared(const char *path);

#endif
