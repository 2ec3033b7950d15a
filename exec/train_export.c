/* ONNX export of the trained model: the trained initializers (weights,
 * running statistics; a partitioned weight gathered whole from its parts)
 * read from the trainer's session and handed to onnx/export.c, which
 * writes them into a copy of the original model. */
#include <errno.h>
#include <stdlib.h>

#include "hpdlf/error.h"
#include "exec/pipe.h"
#include "exec/split_weight.h"
#include "exec/train_internal.h"
#include "onnx/export.h"

static int read_whole(void *arg, int v, uint64_t at, size_t len, void *dst)
{
	return hp_whole_read(arg, v, at, len, dst);
}

int hp_trainer_export_onnx(struct hp_trainer *t, const char *path, int external)
{
	struct onnx_export x = { .g = t->g, .model = t->model, .read = read_whole, .arg = t->s,
				 .external = external };
	char *whole;
	int rc;

	if (t->pipe) /* collective: rank 0 writes, reading the stages' tensors */
		return hp_pipe_export(t, path, external);

	if (!t->s)
		return hp_error(HP_EUSAGE, "%s: this trainer was built with graph_only: it holds no weights", path);
	if (t->o.shard == HP_SHARD_PARAMETERS && t->nranks > 1)
		return hp_error(HP_EUSAGE, "%s: with --shard parameters no rank holds the whole weights to export", path);
	if (!(whole = hp_whole_state(t->g)))
		return hp_error(-ENOMEM, "out of memory");
	x.whole = whole;
	rc = onnx_export_model(path, &x);
	free(whole);
	return rc;
}
