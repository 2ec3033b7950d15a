/* Checkpoints of asynchronous runs (asgd.h): every rank has a state of its
 * own, so every rank writes its own checkpoint, DIR/rank.R, as a job of
 * one rank would (the same format, commit record and generations), and
 * reads its own back on --resume.  No collective: a rank checkpoints at
 * its own pace and a lost peer stops nobody's checkpoints. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "hpdlf/error.h"
#include "exec/asgd.h"
#include "exec/train_ckpt.h"
#include "exec/train_internal.h"

int hp_asgd_ckpt(struct hp_trainer *t, int write)
{
	const char *top = t->o.checkpoint_dir;
	int rank = t->rank, nranks = t->nranks, rc;
	char dir[4096];

	if (write && mkdir(top, 0777) < 0 && errno != EEXIST)
		return hp_error(-errno, "%s: cannot create the checkpoint directory: %s", top, strerror(errno));
	if ((size_t)snprintf(dir, sizeof dir, "%s/rank.%d", top, rank) >= sizeof dir)
		return hp_error(HP_EUSAGE, "%s: checkpoint directory name too long", top);
	/* this rank as the one rank of its checkpoint, for the write or read */
	t->o.checkpoint_dir = dir;
	t->rank = 0;
	t->nranks = 1;
	rc = write ? hp_ckpt_write(t) : hp_ckpt_read(t);
	t->o.checkpoint_dir = top;
	t->rank = rank;
	t->nranks = nranks;
	if (rc < 0)
		return hp_error_prefix(rc, "rank %d of %d (--sync async: its own checkpoint)", rank, nranks);
	return 0;
}
