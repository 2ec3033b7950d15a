/* Checkpoints of a pipeline: one committed checkpoint of the whole model,
 * in the format a single rank writes (format 2 with one part), so that it
 * resumes at any P, P = 1 included (train_ckpt_load.c reads what a stage
 * holds of it).
 *
 *   stage s > 0 (pipeline 0)  sends rank 0 the list of its optimizer
 *                             graph's state tensors (JSON), then their
 *                             bytes in 4 MiB pieces, one at a time
 *   rank 0                    writes stage 0's state and each piece it
 *                             receives into DIR/ck.G/part.0.hpck, the
 *                             pieces' crc32c in its index (a tensor every
 *                             stage keeps, the Adam step, once)
 *   all                       one allreduce: did any rank fail?
 *   rank 0                    commits the record naming the part (the
 *                             rename, as for data parallelism), tells all
 *
 * No rank holds more than its stage and one piece; the messages run
 * between steps, when no micro-batch is in flight, so the tags of the
 * micro-batches are free.  Under --shard (pipe_shard.c) a stage's D
 * replicas each hold a slice of its optimizer state: the first replica's
 * pieces of those tensors are gathered from all of them, every replica
 * walking the same list of pieces. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "hpdlf/error.h"
#include "exec/comm.h"
#include "exec/exec_internal.h"
#include "exec/pipe.h"
#include "exec/split_weight.h"
#include "exec/train_ckpt.h"
#include "exec/train_internal.h"
#include "store/crc.h"

#define TAG_LIST 0
#define TAG_DATA 1

/* The trainer's graph and session become the optimizer's (whose state a
 * checkpoint holds) while the checkpoint code runs. */
struct swap {
	struct hp_graph *g;
	struct hp_session *s;
};

static void use_optimizer(struct hp_trainer *t, struct swap *w)
{
	w->g = t->g;
	w->s = t->s;
	t->g = t->pipe->go;
	t->s = t->pipe->so;
}

static void restore(struct hp_trainer *t, const struct swap *w)
{
	t->g = w->g;
	t->s = w->s;
}

/* Where the stage's other state lives (BatchNorm's running statistics,
 * Dropout's counter): the forward graph when the backward reads its
 * saved values (pipe_split.c), else the backward graph (w: the trainer's
 * own). */
static struct swap state_of(const struct hp_trainer *t, const struct swap *w)
{
	struct swap st = *w;

	if (t->pipe->split) {
		st.g = t->pipe->gf;
		st.s = t->pipe->sf;
	}
	return st;
}

static int blocking(int send, void *buf, size_t len, int peer, int tag)
{
	struct hp_comm_req *q;
	int rc = send ? hp_comm_isend(buf, len, peer, tag, &q) : hp_comm_irecv(buf, len, peer, tag, &q);

	return rc < 0 ? rc : hp_comm_req_wait(q);
}

static int listed(json_object *list, const char *name)
{
	for (size_t i = 0; i < json_object_array_length(list); i++)
		if (!strcmp(hp_ck_jstr(json_object_array_get_idx(list, i), "name"), name))
			return 1;
	return 0;
}

/* The state tensors of graph `which` (0: the optimizer's, t swapped to
 * it; 1: the backward's, BatchNorm's running statistics and Dropout's
 * counter) not listed yet: name, dtype, shape, elements, and where they
 * are here (graph, value index; not used by rank 0 for another's). */
static void list_graph(struct hp_trainer *t, int which, json_object *list)
{
	char *unit = t->g ? hp_whole_state(t->g) : NULL;
	struct hp_ckpt_view w;

	for (int v = 0; unit && v < t->g->nvalues; v++) {
		json_object *e;
		if (!unit[v] || hp_ckpt_view(t, v, &w) < 0 || listed(list, w.name))
			continue;
		e = json_object_new_object();
		json_object_object_add(e, "name", json_object_new_string(w.name));
		json_object_object_add(e, "dtype", json_object_new_string(hp_dtype_name(w.dtype)));
		json_object_object_add(e, "shape", hp_ck_shape_json(&w.shape));
		json_object_object_add(e, "elements", json_object_new_int64((int64_t)w.n));
		/* a slice's entry is its whole, gathered piece by piece */
		int64_t bytes = w.hi - w.lo == w.n ? (int64_t)hp_ckpt_vbytes(t, v) : (int64_t)(w.n * hp_dtype_size(w.dtype));
		json_object_object_add(e, "bytes", json_object_new_int64(bytes));
		if (w.hi - w.lo != w.n)
			json_object_object_add(e, "sliced", json_object_new_int(1));
		json_object_object_add(e, "graph", json_object_new_int(which));
		json_object_object_add(e, "value", json_object_new_int(v));
		json_object_array_add(list, e);
	}
	free(unit);
}

/* This stage's state: the optimizer graph's, then the backward graph's
 * (t swapped to the optimizer's on entry and exit). */
static json_object *state_list(struct hp_trainer *t, const struct swap *w)
{
	json_object *list = json_object_new_array();
	struct swap o;

	list_graph(t, 0, list);
	use_optimizer(t, &o);
	restore(t, w);
	list_graph(t, 1, list);
	restore(t, &o);
	return list;
}

/* Entry e is a slice of its tensor (hp_ck_jint: -1 for a missing key). */
static int sliced(json_object *e)
{
	return hp_ck_jint(e, "sliced") == 1;
}

/* Piece [at, at + n) of entry e's tensor of this stage (a slice's:
 * gathered from the replicas, collective). */
static int read_piece(struct hp_trainer *t, const struct swap *w, json_object *e, uint64_t at, size_t n, void *buf)
{
	struct hp_session *s = hp_ck_jint(e, "graph") ? w->s : t->s;

	if (sliced(e))
		return hp_pipe_gather_slice(s, (int)hp_ck_jint(e, "value"), (uint64_t)hp_ck_jint(e, "elements"), at, n,
					    buf);
	return hp_whole_read(s, (int)hp_ck_jint(e, "value"), at, n, buf);
}

json_object *hp_pipe_state_list(struct hp_trainer *t)
{
	struct swap w, st;
	json_object *list;

	use_optimizer(t, &w);
	st = state_of(t, &w);
	list = state_list(t, &st);
	restore(t, &w);
	return list;
}

int hp_pipe_state_read(struct hp_trainer *t, json_object *e, uint64_t at, size_t n, void *buf)
{
	struct swap w, st;
	int rc;

	if (sliced(e)) /* the export reads parameters, whole on every replica */
		return hp_error(HP_EUNSUPPORTED, "'%s' is sharded among the stage's replicas", hp_ck_jstr(e, "name"));
	use_optimizer(t, &w);
	st = state_of(t, &w);
	rc = read_piece(t, &st, e, at, n, buf);
	restore(t, &w);
	return rc;
}

/* Stage s > 0: the list, then every piece of every tensor, to rank 0. */
static int send_stage(struct hp_trainer *t, const struct swap *w, unsigned char *buf)
{
	json_object *list = state_list(t, w);
	const char *str = json_object_to_json_string(list);
	uint64_t len = strlen(str) + 1;
	int rc = blocking(1, &len, sizeof len, 0, TAG_LIST), bad = 0;

	if (rc == 0)
		rc = blocking(1, (void *)str, len, 0, TAG_LIST);
	for (size_t i = 0; rc == 0 && i < json_object_array_length(list); i++) {
		json_object *e = json_object_array_get_idx(list, i);
		uint64_t bytes = (uint64_t)hp_ck_jint(e, "bytes");
		for (uint64_t at = 0; rc == 0 && at < bytes; at += HP_CK_PIECE) {
			size_t n = bytes - at < HP_CK_PIECE ? (size_t)(bytes - at) : HP_CK_PIECE;
			/* a piece that cannot be read still goes (the protocol is
			 * fixed), and the allreduce after says this rank failed;
			 * read all the same: a slice's gather is collective */
			if (read_piece(t, w, e, at, n, buf) < 0)
				bad = 1;
			rc = blocking(1, buf, n, 0, TAG_DATA);
		}
	}
	json_object_put(list);
	return rc < 0 ? rc : bad ? -EIO : 0;
}

/* Rank 0's part file in the making. */
struct part {
	struct hp_trainer *t;
	const struct swap *w;           /* the trainer's own graph and session */
	struct hp_ckfile f;
	uint64_t off;
	json_object *entries, *tensors; /* the part's index entries, the record's tensors */
	unsigned char *buf;
	int failed;                     /* a local error: keep receiving, commit nothing */
};

static int seen(const struct part *p, const char *name)
{
	for (size_t i = 0; i < json_object_array_length(p->tensors); i++)
		if (!strcmp(hp_ck_jstr(json_object_array_get_idx(p->tensors, i), "name"), name))
			return 1;
	return 0;
}

static void add_entries(struct part *p, json_object *e, uint64_t off, json_object *crcs)
{
	json_object *x = json_object_new_object(), *r = json_object_new_object(), *sh = NULL;
	const char *keys[] = { "name", "dtype" };

	json_object_object_get_ex(e, "shape", &sh);
	for (int k = 0; k < 2; k++) {
		json_object_object_add(x, keys[k], json_object_new_string(hp_ck_jstr(e, keys[k])));
		json_object_object_add(r, keys[k], json_object_new_string(hp_ck_jstr(e, keys[k])));
	}
	json_object_object_add(x, "shape", json_object_get(sh));
	json_object_object_add(r, "shape", json_object_get(sh));
	json_object_object_add(x, "lo", json_object_new_int64(0));
	json_object_object_add(x, "hi", json_object_new_int64(hp_ck_jint(e, "elements")));
	json_object_object_add(x, "offset", json_object_new_int64((int64_t)off));
	json_object_object_add(x, "crc32c", crcs);
	json_object_object_add(r, "elements", json_object_new_int64(hp_ck_jint(e, "elements")));
	json_object_array_add(p->entries, x);
	json_object_array_add(p->tensors, r);
}

/* One tensor of stage `from` (0: read here, else received) into the part. */
static int take_tensor(struct part *p, int from, json_object *e)
{
	uint64_t bytes = (uint64_t)hp_ck_jint(e, "bytes");
	int dup = seen(p, hp_ck_jstr(e, "name")), rc = 0;
	json_object *crcs = json_object_new_array();

	for (uint64_t at = 0; rc == 0 && at < bytes; at += HP_CK_PIECE) {
		size_t n = bytes - at < HP_CK_PIECE ? (size_t)(bytes - at) : HP_CK_PIECE;
		if (from)
			rc = blocking(0, p->buf, n, from, TAG_DATA);
		else if (read_piece(p->t, p->w, e, at, n, p->buf) < 0) /* collective for a slice */
			p->failed = 1;
		if (rc == 0 && !dup && !p->failed && hp_ck_pwrite(&p->f, p->buf, n, p->off + at) < 0)
			p->failed = 1;
		json_object_array_add(crcs, json_object_new_int64(hs_crc32c(p->buf, n)));
	}
	if (dup || rc < 0) {
		json_object_put(crcs);
		return rc;
	}
	add_entries(p, e, p->off, crcs);
	p->off += (bytes + HP_CK_ALIGN - 1) / HP_CK_ALIGN * HP_CK_ALIGN;
	return 0;
}

static int take_stage(struct part *p, int from)
{
	json_object *list = NULL;
	uint64_t len = 0;
	char *str = NULL;
	int rc = 0;

	if (!from) {
		list = state_list(p->t, p->w);
	} else if ((rc = blocking(0, &len, sizeof len, from, TAG_LIST)) == 0) {
		if (!(str = calloc(1, len + 1)))
			return hp_error(-ENOMEM, "out of memory");
		rc = blocking(0, str, len, from, TAG_LIST);
		list = rc == 0 ? json_tokener_parse(str) : NULL;
		free(str);
		if (rc == 0 && !list)
			return hp_error(HP_EPROTO, "rank %d sent a checkpoint list that does not parse", from);
	}
	for (size_t i = 0; rc == 0 && list && i < json_object_array_length(list); i++)
		rc = take_tensor(p, from, json_object_array_get_idx(list, i));
	json_object_put(list);
	return rc;
}

static json_object *part_index(const struct part *p, uint64_t gen)
{
	json_object *o = json_object_new_object();

	json_object_object_add(o, "format", json_object_new_int(2));
	json_object_object_add(o, "part", json_object_new_int(0));
	json_object_object_add(o, "ranks", json_object_new_int(1));
	json_object_object_add(o, "generation", json_object_new_int64((int64_t)gen));
	json_object_object_add(o, "step", json_object_new_int64(p->t->step));
	json_object_object_add(o, "piece", json_object_new_int64(HP_CK_PIECE));
	json_object_object_add(o, "tensors", json_object_get(p->entries));
	return o;
}

/* The record: what train_ckpt_commit.c writes for one rank's part. */
static json_object *record(const struct part *p, uint64_t gen, uint64_t size, uint32_t icrc)
{
	json_object *o = hp_ckpt_record_head(p->t, 1, gen), *parts = json_object_new_array(),
		    *q = json_object_new_object();

	json_object_object_add(o, "tensors", json_object_get(p->tensors));
	json_object_object_add(q, "file", json_object_new_string("part.0.hpck"));
	json_object_object_add(q, "bytes", json_object_new_int64((int64_t)size));
	json_object_object_add(q, "index_crc32c", json_object_new_int64(icrc));
	json_object_array_add(parts, q);
	json_object_object_add(o, "parts", parts);
	return o;
}

/* Rank 0: every stage's state into the part, then its frame, synced. */
static int write_part(struct part *p, const char *gdir, uint64_t gen, uint64_t *size, uint32_t *icrc)
{
	char path[4200];
	json_object *idx;
	int rc = 0;

	snprintf(path, sizeof path, "%s/part.0.hpck", gdir);
	p->f.path = path;
	if ((p->f.fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666)) < 0)
		p->failed = 1; /* the stages' pieces are received all the same */
	for (int s = 0; s < p->t->pipe->P && rc == 0; s++)
		rc = take_stage(p, s);
	if (rc < 0 || p->failed) {
		if (p->f.fd >= 0)
			close(p->f.fd);
		return rc < 0 ? rc : hp_error(-EIO, "%s: the part could not be written", path);
	}
	idx = part_index(p, gen);
	rc = hp_ck_write_frame(&p->f, 2, HP_CK_PART, p->off, idx, icrc);
	json_object_put(idx);
	*size = (uint64_t)lseek(p->f.fd, 0, SEEK_END);
	if (rc == 0 && fsync(p->f.fd) < 0)
		rc = hp_error(-errno, "%s: fsync: %s", path, strerror(errno));
	close(p->f.fd);
	return rc < 0 ? rc : hp_ck_fsync_dir(gdir);
}

static int rank0(struct hp_trainer *t, const struct swap *w, unsigned char *buf, int *ok_out)
{
	struct part p = { .t = t, .w = w, .off = HP_CK_ALIGN, .buf = buf, .f = { .fd = -1 } };
	const char *dir = t->o.checkpoint_dir;
	char gdir[4096];
	uint64_t gen = 0, size = 0;
	uint32_t icrc = 0;
	double failed;
	int rc = hp_ckpt_prepare(dir, &gen), r2;

	p.failed = rc < 0;
	p.entries = json_object_new_array();
	p.tensors = json_object_new_array();
	snprintf(gdir, sizeof gdir, "%s/ck.%" PRIu64, dir, gen);
	r2 = write_part(&p, gdir, gen, &size, &icrc);
	rc = rc < 0 ? rc : r2;
	failed = rc < 0;
	if ((r2 = hp_comm_allreduce(&failed, 1, HP_F64)) < 0)
		rc = r2;
	if (rc == 0 && failed > 0)
		rc = hp_error(HP_EPROTO, "rank 0 of %d: %g rank(s) could not send their stage (their own message says "
			      "why): not committed", t->nranks, failed);
	if (rc == 0)
		rc = hp_ckpt_write_record(dir, record(&p, gen, size, icrc));
	if (rc == 0)
		hp_ckpt_sweep(dir, gen);
	json_object_put(p.entries);
	json_object_put(p.tensors);
	*ok_out = rc == 0;
	return rc;
}

/* A stage's other replicas: their slices to the first one's gathers, in
 * the order it reads the pieces. */
static int help_stage(struct hp_trainer *t, const struct swap *w, unsigned char *buf)
{
	json_object *list = state_list(t, w);
	int bad = 0;

	for (size_t i = 0; i < json_object_array_length(list); i++) {
		json_object *e = json_object_array_get_idx(list, i);
		uint64_t bytes = (uint64_t)hp_ck_jint(e, "bytes");
		for (uint64_t at = 0; sliced(e) && at < bytes; at += HP_CK_PIECE) {
			size_t n = bytes - at < HP_CK_PIECE ? (size_t)(bytes - at) : HP_CK_PIECE;
			if (read_piece(t, w, e, at, n, buf) < 0)
				bad = 1;
		}
	}
	json_object_put(list);
	return bad ? -EIO : 0;
}

int hp_pipe_ckpt_write(struct hp_trainer *t)
{
	struct hp_pipe *p = t->pipe;
	unsigned char *buf = malloc(HP_CK_PIECE);
	struct swap w;
	int32_t ok = 0;
	double failed;
	int rc, r2;

	if (!buf)
		return hp_error(-ENOMEM, "out of memory");
	use_optimizer(t, &w);
	struct swap st = state_of(t, &w);
	if (t->rank == 0) {
		rc = rank0(t, &st, buf, &ok);
	} else {
		rc = p->replica == 0 ? send_stage(t, &st, buf) : help_stage(t, &st, buf);
		if (rc == -EIO)
			rc = hp_error(-EIO, "rank %d: stage %d's state could not be read for the checkpoint", t->rank,
				      p->stage);
		failed = rc < 0;
		if ((r2 = hp_comm_allreduce(&failed, 1, HP_F64)) < 0)
			rc = r2;
	}
	restore(t, &w);
	free(buf);
	if ((r2 = hp_comm_bcast(&ok, sizeof ok, 0)) < 0)
		return r2;
	if (rc == 0 && !ok)
		rc = hp_error(HP_EPROTO, "rank %d of %d: rank 0 could not commit the checkpoint (its message says why)",
			      t->rank, t->nranks);
	return rc < 0 ? hp_error_prefix(rc, "writing checkpoint at step %lld", (long long)t->step) : 0;
}

/* Dropout's run counter of the forward graph follows the backward's (the
 * masks of a micro-batch's two forwards must agree). */
static int sync_counter(struct hp_trainer *t)
{
	struct hp_graph *gf = t->pipe->gf;
	int vb = hp_graph_find_value(t->g, "train.step"), vf = gf ? hp_graph_find_value(gf, "train.step") : -1;
	int64_t step;
	int rc;

	if (vb < 0 || vf < 0 || t->g->values[vb].next < 0)
		return 0;
	rc = hp_session_read_value(t->s, vb, 0, sizeof step, &step);
	return rc < 0 ? rc : hp_session_write_value(t->pipe->sf, vf, 0, sizeof step, &step);
}

int hp_pipe_ckpt_read(struct hp_trainer *t)
{
	uint64_t lo, step, seed;
	struct swap w;
	int rc = 0;

	if (t->pipe->so) {
		use_optimizer(t, &w);
		rc = hp_ckpt_read(t);
		restore(t, &w);
	}
	if (rc == 0) {
		/* the other state (state_of) */
		struct swap own = { t->g, t->s }, st = state_of(t, &own);
		restore(t, &st);
		rc = hp_ckpt_read(t);
		restore(t, &own);
	}
	if (rc == 0)
		rc = hp_pipe_sync_params(t->pipe, t->s);
	if (rc == 0)
		rc = sync_counter(t);
	/* a stage without parameters (no optimizer graph) learns where the
	 * run stands from the others: every rank that read has the same */
	if (rc == 0)
		rc = hp_comm_minmax_u64((uint64_t)t->step, &lo, &step);
	if (rc == 0)
		rc = hp_comm_minmax_u64(t->shuffle_seed, &lo, &seed);
	if (rc == 0 && !t->pipe->so) {
		t->step = (int64_t)step;
		t->shuffle_seed = seed;
	}
	return rc;
}
