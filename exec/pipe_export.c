/* --export-onnx of a pipeline (pipe.h): rank 0 writes the whole model as
 * one rank's export would, with the exporter of onnx/export.c reading each
 * trained tensor from the stage that holds it.  Each stage's first
 * replica (ranks 1 .. P-1) sends rank 0 its state's list (the one its
 * checkpoint part would have), then answers rank 0's requests for pieces
 * until told to stop: no rank holds another stage's tensors whole, and
 * rank 0 holds one piece at a time. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "hpdlf/error.h"
#include "exec/autodiff.h"
#include "exec/comm.h"
#include "exec/pipe.h"
#include "exec/split_weight.h"
#include "exec/train_ckpt.h"
#include "exec/train_internal.h"
#include "onnx/export.h"

#define TAG_LIST 8
#define TAG_REQ 9
#define TAG_REPLY 10

static int blocking(int send, void *buf, size_t len, int peer, int tag)
{
	struct hp_comm_req *q;
	int rc = send ? hp_comm_isend(buf, len, peer, tag, &q) : hp_comm_irecv(buf, len, peer, tag, &q);

	return rc < 0 ? rc : hp_comm_req_wait(q);
}

/* A stage's first replica: the list, then pieces on request.  A request
 * {entry, at, len}; entry -1 ends it.  Each reply is a status word (0 or
 * the error) and the piece. */
static int serve(struct hp_trainer *t)
{
	json_object *list = hp_pipe_state_list(t);
	const char *str = json_object_to_json_string(list);
	uint64_t len = strlen(str) + 1;
	int64_t req[3];
	unsigned char *buf = malloc(HP_CK_PIECE + 8);
	int rc = buf ? 0 : hp_error(-ENOMEM, "out of memory");

	if (rc == 0 && (rc = blocking(1, &len, sizeof len, 0, TAG_LIST)) == 0)
		rc = blocking(1, (void *)str, len, 0, TAG_LIST);
	while (rc == 0 && (rc = blocking(0, req, sizeof req, 0, TAG_REQ)) == 0 && req[0] >= 0) {
		json_object *e = json_object_array_get_idx(list, (size_t)req[0]);
		int64_t st = e && req[2] <= HP_CK_PIECE ? 0 : -EINVAL;
		if (st == 0)
			st = hp_pipe_state_read(t, e, (uint64_t)req[1], (size_t)req[2], buf + 8);
		memcpy(buf, &st, 8);
		rc = blocking(1, buf, (size_t)(8 + (st == 0 ? req[2] : 0)), 0, TAG_REPLY);
	}
	json_object_put(list);
	free(buf);
	return rc;
}

/* Rank 0's view: the whole model's training graph, every stage's list. */
struct gather {
	struct hp_trainer *t;
	struct hp_graph *g;
	int P;
	json_object **lists;
	unsigned char *buf;
};

static int receive_lists(struct gather *x)
{
	int rc = 0;

	x->lists[0] = hp_pipe_state_list(x->t);
	for (int s = 1; s < x->P && rc == 0; s++) {
		uint64_t len;
		char *str;
		if ((rc = blocking(0, &len, sizeof len, s, TAG_LIST)) < 0)
			break;
		if (!(str = malloc(len + 1)))
			return hp_error(-ENOMEM, "out of memory");
		if ((rc = blocking(0, str, len, s, TAG_LIST)) == 0) {
			str[len] = 0;
			if (!(x->lists[s] = json_tokener_parse(str)))
				rc = hp_error(HP_EPROTO, "pipeline export: stage %d sent an unreadable list", s);
		}
		free(str);
	}
	return rc;
}

/* Bytes [at, at + len) of entry i of stage s, a piece at a time. */
static int read_remote(struct gather *x, int s, int64_t i, uint64_t at, size_t len, unsigned char *dst)
{
	int rc = 0;

	for (size_t done = 0; done < len && rc == 0;) {
		size_t n = len - done < HP_CK_PIECE ? len - done : HP_CK_PIECE;
		int64_t req[3] = { i, (int64_t)(at + done), (int64_t)n }, st;
		if ((rc = blocking(1, req, sizeof req, s, TAG_REQ)) < 0 ||
		    (rc = blocking(0, x->buf, 8 + n, s, TAG_REPLY)) < 0)
			break;
		memcpy(&st, x->buf, 8);
		if (st < 0)
			return hp_error((int)st, "pipeline export: stage %d could not read its tensor", s);
		memcpy(dst + done, x->buf + 8, n);
		done += n;
	}
	return rc;
}

/* The exporter's read: value v of the whole graph, from its stage. */
static int read_stage(void *arg, int v, uint64_t at, size_t len, void *dst)
{
	struct gather *x = arg;
	const char *name = x->g->values[v].name;

	for (int s = 0; s < x->P; s++)
		for (size_t i = 0; x->lists[s] && i < json_object_array_length(x->lists[s]); i++) {
			json_object *e = json_object_array_get_idx(x->lists[s], i);
			if (strcmp(hp_ck_jstr(e, "name"), name))
				continue;
			if (s == 0)
				return hp_pipe_state_read(x->t, e, at, len, dst);
			return read_remote(x, s, (int64_t)i, at, len, dst);
		}
	return hp_error(HP_EINTERNAL, "pipeline export: no stage holds '%s'", name);
}

/* Rank 0: the model as one rank trains it (the same state names as the
 * stages' graphs), exported with the stages' tensors; then every stage
 * is told to stop serving, whatever happened. */
static int write_model(struct hp_trainer *t, const char *path, int external)
{
	struct gather x = { .t = t, .P = t->pipe->P };
	int64_t stop[3] = { -1, 0, 0 };
	char *whole = NULL;
	int rc, r2;

	x.lists = calloc((size_t)x.P, sizeof *x.lists);
	x.buf = malloc(HP_CK_PIECE + 8);
	rc = x.lists && x.buf ? receive_lists(&x) : hp_error(-ENOMEM, "out of memory");
	if (rc == 0 && (rc = hp_pipe_model_copy(t, &x.g)) == 0 && (rc = hp_autodiff(x.g, &t->o.spec)) == 0)
		rc = (whole = hp_whole_state(x.g)) ? 0 : hp_error(-ENOMEM, "out of memory");
	if (rc == 0) {
		struct onnx_export ex = { .g = x.g, .model = t->model, .whole = whole, .read = read_stage, .arg = &x,
					  .external = external };
		rc = onnx_export_model(path, &ex);
	}
	for (int s = 1; s < x.P; s++)
		if ((r2 = blocking(1, stop, sizeof stop, s, TAG_REQ)) < 0 && rc == 0)
			rc = r2;
	for (int s = 0; x.lists && s < x.P; s++)
		json_object_put(x.lists[s]);
	free(x.lists);
	free(x.buf);
	free(whole);
	hp_graph_free(x.g);
	return rc;
}

int hp_pipe_export(struct hp_trainer *t, const char *path, int external)
{
	double failed;
	int rc = 0, r2;

	if (t->rank == 0)
		rc = write_model(t, path, external);
	else if (t->pipe->replica == 0)
		rc = serve(t);
	/* every rank learns whether the file was written */
	failed = rc < 0;
	if ((r2 = hp_comm_allreduce(&failed, 1, HP_F64)) < 0)
		return r2;
	if (rc == 0 && failed > 0)
		rc = hp_error(HP_EPROTO, "rank %d of %d: the pipeline's export to %s failed (rank 0 says why)", t->rank,
			      t->nranks, path);
	return rc;
}
