/* Backing files of read-only tensors: one read-only file tier per file
 * (tier_uring.h), shared by every tensor backed by it, so weights and
 * datasets are read through the same submit path as the lower tiers. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "hpdlf/error.h"
#include "store/store_internal.h"
#include "store/tier_uring.h"

/* The file at path, opened once per store (lock held). */
int hs_file_get(struct hs_store *st, const char *path, struct hs_file **out)
{
	struct hs_file *f;
	struct stat sb;
	int rc;

	if (stat(path, &sb) < 0)
		return hp_error(-errno, "%s: cannot open the backing file: %s", path, strerror(errno));
	for (f = st->files; f; f = f->next) {
		if (f->dev == sb.st_dev && f->ino == sb.st_ino) {
			f->refs++;
			*out = f;
			return 0;
		}
	}
	f = calloc(1, sizeof *f);
	if (!f)
		return -ENOMEM;
	rc = hs_tier_file_open(path, &f->tier);
	if (rc < 0) {
		free(f);
		return rc;
	}
	f->dev = sb.st_dev;
	f->ino = sb.st_ino;
	f->size = hs_tier_file_size(f->tier);
	f->direct = hs_tier_file_direct(f->tier);
	f->refs = 1;
	f->next = st->files;
	st->files = f;
	*out = f;
	return 0;
}

/* Drop a reference (lock held).  The last one moves the file to the
 * closing list: its tier is closed by hs_files_reap, without the lock,
 * since closing waits for completions that take it. */
void hs_file_put(struct hs_store *st, struct hs_file *f)
{
	struct hs_file **p;

	if (!f || --f->refs > 0)
		return;
	for (p = &st->files; *p && *p != f; p = &(*p)->next)
		;
	if (*p)
		*p = f->next;
	f->next = st->files_closing;
	st->files_closing = f;
}

/* Close the files no tensor uses any more (lock NOT held). */
void hs_files_reap(struct hs_store *st)
{
	struct hs_file *f;

	pthread_mutex_lock(&st->mu);
	f = st->files_closing;
	st->files_closing = NULL;
	pthread_mutex_unlock(&st->mu);
	while (f) {
		struct hs_file *next = f->next;
		f->tier->ops->close(f->tier);
		free(f);
		f = next;
	}
}
