/* Checkpoints: DIR/checkpoint.hpck holds every run-to-run state value of
 * the training graph (weights, optimizer moments, running statistics, the
 * step counter) and the trainer's position (step, shuffle seed).
 *
 * Partitioned weights (split_weight.c) and their state are saved whole,
 * gathered from their parts, so a checkpoint loads at any partitioning.
 *
 * Layout: "HPDLFCK1" and a version at byte 0; tensors at 4096-aligned
 * offsets; a JSON index (names, dtypes, shapes, offsets, crc32c); a 32-byte
 * trailer ("HPDLFEND", index offset, length, crc32c, version).  A new
 * checkpoint is written to checkpoint.hpck.tmp, fsync'd and renamed over
 * the old one, then the directory is fsync'd: a crash at any point leaves
 * either the old or the new file whole, and a torn one is refused by its
 * trailer and checksums. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <json-c/json.h>

#include "hpdlf/error.h"
#include "exec/exec_internal.h"
#include "exec/split_weight.h"
#include "exec/train_internal.h"
#include "store/crc.h"

#define CK_MAGIC "HPDLFCK1"
#define CK_END "HPDLFEND"
#define CK_VERSION 1
#define CK_ALIGN 4096
#define CK_PIECE (4u << 20)

struct ck_io {
	int fd;
	const char *path;
	unsigned char *buf;    /* CK_PIECE bytes */
	uint64_t done, total;
	struct hp_trainer *t;
	char *unit;            /* per value: saved (hp_whole_state) */
};

static uint64_t vbytes(const struct hp_value *v)
{
	struct hp_tensor t = { .dtype = v->dtype, .shape = v->shape };

	return hp_tensor_bytes(&t);
}


static int pwrite_all(struct ck_io *io, const void *buf, size_t len, uint64_t off)
{
	const unsigned char *p = buf;

	while (len) {
		ssize_t w = pwrite(io->fd, p, len, (off_t)off);
		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0)
			return hp_error(-errno, "%s: write failed: %s", io->path, strerror(errno));
		p += w;
		len -= (size_t)w;
		off += (uint64_t)w;
	}
	return 0;
}

static int pread_all(struct ck_io *io, void *buf, size_t len, uint64_t off)
{
	unsigned char *p = buf;

	while (len) {
		ssize_t r = pread(io->fd, p, len, (off_t)off);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return r < 0 ? hp_error(-errno, "%s: read failed: %s", io->path, strerror(errno))
				     : hp_error(HP_ECORRUPT, "%s: truncated checkpoint", io->path);
		p += r;
		len -= (size_t)r;
		off += (uint64_t)r;
	}
	return 0;
}

static uint32_t crc_chain(uint32_t acc, uint32_t piece)
{
	uint32_t two[2] = { acc, piece };

	return hs_crc32c(two, sizeof two);
}

/* One value's bytes into the file at off; returns its checksum in *crc. */
static int write_value(struct ck_io *io, int v, uint64_t off, uint32_t *crc)
{
	uint64_t n = vbytes(&io->t->g->values[v]);

	*crc = 0;
	for (uint64_t at = 0; at < n;) {
		size_t len = n - at < CK_PIECE ? (size_t)(n - at) : CK_PIECE;
		int rc = hp_whole_read(io->t->s, v, at, len, io->buf);
		if (rc == 0)
			rc = pwrite_all(io, io->buf, len, off + at);
		if (rc < 0)
			return rc;
		*crc = crc_chain(*crc, hs_crc32c(io->buf, len));
		at += len;
		io->done += len;
		if (io->t->ckpt_progress)
			io->t->ckpt_progress(io->t->ckpt_arg, io->done, io->total);
	}
	return 0;
}

static json_object *shape_json(const struct hp_shape *s)
{
	json_object *a = json_object_new_array();

	for (int i = 0; i < s->rank; i++)
		json_object_array_add(a, json_object_new_int64(s->dims[i]));
	return a;
}

static json_object *header_json(const struct hp_trainer *t)
{
	json_object *o = json_object_new_object();

	json_object_object_add(o, "format", json_object_new_int(CK_VERSION));
	json_object_object_add(o, "model", json_object_new_string(t->model));
	json_object_object_add(o, "step", json_object_new_int64(t->step));
	json_object_object_add(o, "shuffle_seed", json_object_new_int64((int64_t)t->shuffle_seed));
	json_object_object_add(o, "shuffle", json_object_new_boolean(t->o.shuffle));
	json_object_object_add(o, "batch", json_object_new_int64(t->o.batch));
	json_object_object_add(o, "samples", json_object_new_int64(t->data.n));
	return o;
}

/* Data of every state value, then the index and the trailer. */
static int write_body(struct ck_io *io)
{
	const struct hp_graph *g = io->t->g;
	json_object *o = header_json(io->t), *list = json_object_new_array();
	unsigned char head[CK_ALIGN] = CK_MAGIC, tail[32] = CK_END;
	uint64_t off = CK_ALIGN;
	const char *idx;
	int rc = 0;

	head[8] = CK_VERSION;
	json_object_object_add(o, "tensors", list);
	for (int v = 0; v < g->nvalues; v++)
		if (io->unit[v])
			io->total += vbytes(&g->values[v]);
	for (int v = 0; v < g->nvalues && rc == 0; v++) {
		uint32_t crc;
		if (!io->unit[v])
			continue;
		rc = write_value(io, v, off, &crc);
		json_object *e = json_object_new_object();
		json_object_object_add(e, "name", json_object_new_string(g->values[v].name));
		json_object_object_add(e, "dtype", json_object_new_string(hp_dtype_name(g->values[v].dtype)));
		json_object_object_add(e, "shape", shape_json(&g->values[v].shape));
		json_object_object_add(e, "offset", json_object_new_int64((int64_t)off));
		json_object_object_add(e, "bytes", json_object_new_int64((int64_t)vbytes(&g->values[v])));
		json_object_object_add(e, "crc32c", json_object_new_int64(crc));
		json_object_array_add(list, e);
		off = (off + vbytes(&g->values[v]) + CK_ALIGN - 1) / CK_ALIGN * CK_ALIGN;
	}
	idx = json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN);
	uint64_t len = strlen(idx);
	uint32_t icrc = hs_crc32c(idx, len);
	memcpy(tail + 8, &off, 8);
	memcpy(tail + 16, &len, 8);
	memcpy(tail + 24, &icrc, 4);
	tail[28] = CK_VERSION;
	if (rc == 0)
		rc = pwrite_all(io, idx, len, off);
	if (rc == 0)
		rc = pwrite_all(io, tail, sizeof tail, off + len);
	if (rc == 0) /* the magic last: a file without it was never finished */
		rc = pwrite_all(io, head, sizeof head, 0);
	json_object_put(o);
	return rc;
}

static int fsync_dir(const char *dir)
{
	int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC), rc = 0;

	if (fd < 0)
		return hp_error(-errno, "%s: %s", dir, strerror(errno));
	if (fsync(fd) < 0 && errno != EINVAL)
		rc = hp_error(-errno, "%s: fsync: %s", dir, strerror(errno));
	close(fd);
	return rc;
}

void hp_trainer_set_checkpoint_progress(struct hp_trainer *t, hp_ckpt_progress_fn fn, void *arg)
{
	t->ckpt_progress = fn;
	t->ckpt_arg = arg;
}

int hp_ckpt_write(struct hp_trainer *t)
{
	const char *dir = t->o.checkpoint_dir;
	char tmp[4096], fin[4096];
	struct ck_io io = { .path = tmp, .t = t };
	int rc;

	if (mkdir(dir, 0777) < 0 && errno != EEXIST)
		return hp_error(-errno, "%s: cannot create the checkpoint directory: %s", dir, strerror(errno));
	snprintf(tmp, sizeof tmp, "%s/checkpoint.hpck.tmp", dir);
	snprintf(fin, sizeof fin, "%s/checkpoint.hpck", dir);
	io.fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
	if (io.fd < 0)
		return hp_error(-errno, "%s: %s", tmp, strerror(errno));
	io.buf = malloc(CK_PIECE);
	io.unit = hp_whole_state(t->g);
	rc = io.buf && io.unit ? write_body(&io) : hp_error(-ENOMEM, "out of memory");
	if (rc == 0 && fsync(io.fd) < 0)
		rc = hp_error(-errno, "%s: fsync: %s", tmp, strerror(errno));
	if (close(io.fd) < 0 && rc == 0)
		rc = hp_error(-errno, "%s: close: %s", tmp, strerror(errno));
	free(io.buf);
	free(io.unit);
	if (rc == 0 && rename(tmp, fin) < 0)
		rc = hp_error(-errno, "%s: rename: %s", fin, strerror(errno));
	if (rc == 0)
		rc = fsync_dir(dir);
	if (rc < 0)
		unlink(tmp);
	return rc < 0 ? hp_error_prefix(rc, "writing checkpoint at step %lld", (long long)t->step) : 0;
}

/* ---- reading ------------------------------------------------------------ */

static int64_t jint(json_object *o, const char *key);

/* Every byte of the header page and the trailer is defined: magic, version,
 * then zeros (head); magic, offset, length, crc32c, version, zeros (tail).
 * Anything else is a damaged or foreign file, never guessed at. */
static int check_frame(const struct ck_io *io, const unsigned char *head, const unsigned char *tail)
{
	if (memcmp(head, CK_MAGIC, 8) || memcmp(tail, CK_END, 8))
		return hp_error(HP_EFORMAT, "%s: not a complete hpdlf checkpoint", io->path);
	if (head[8] != CK_VERSION || tail[28] != CK_VERSION)
		return hp_error(HP_EFORMAT, "%s: checkpoint format %d/%d, this build reads %d", io->path, head[8],
				tail[28], CK_VERSION);
	for (size_t i = 9; i < CK_ALIGN; i++)
		if (head[i])
			return hp_error(HP_EFORMAT, "%s: checkpoint header byte %zu is %d, not 0", io->path, i, head[i]);
	for (size_t i = 29; i < 32; i++)
		if (tail[i])
			return hp_error(HP_EFORMAT, "%s: checkpoint trailer byte %zu is %d, not 0", io->path, i, tail[i]);
	return 0;
}

static int read_index(struct ck_io *io, json_object **out)
{
	unsigned char head[CK_ALIGN], tail[32];
	uint64_t off, len;
	uint32_t crc;
	off_t size = lseek(io->fd, 0, SEEK_END);
	char *idx;
	int rc;

	if (size < CK_ALIGN + 32)
		return hp_error(HP_ECORRUPT, "%s: truncated checkpoint", io->path);
	if ((rc = pread_all(io, head, sizeof head, 0)) < 0 || (rc = pread_all(io, tail, 32, (uint64_t)size - 32)) < 0)
		return rc;
	if ((rc = check_frame(io, head, tail)) < 0)
		return rc;
	memcpy(&off, tail + 8, 8);
	memcpy(&len, tail + 16, 8);
	memcpy(&crc, tail + 24, 4);
	if (off + len + 32 != (uint64_t)size || len > (256u << 20))
		return hp_error(HP_ECORRUPT, "%s: torn checkpoint (index does not end the file)", io->path);
	if (!(idx = calloc(1, len + 1)))
		return hp_error(-ENOMEM, "out of memory");
	rc = pread_all(io, idx, len, off);
	if (rc == 0 && hs_crc32c(idx, len) != crc)
		rc = hp_error(HP_ECORRUPT, "%s: checkpoint index checksum mismatch", io->path);
	if (rc == 0 && !(*out = json_tokener_parse(idx)))
		rc = hp_error(HP_ECORRUPT, "%s: checkpoint index is not JSON", io->path);
	if (rc == 0 && jint(*out, "format") != CK_VERSION) {
		rc = hp_error(HP_EFORMAT, "%s: checkpoint index format %lld, this build reads %d", io->path,
			      (long long)jint(*out, "format"), CK_VERSION);
		json_object_put(*out);
		*out = NULL;
	}
	free(idx);
	return rc;
}

static int64_t jint(json_object *o, const char *key)
{
	json_object *v;

	return json_object_object_get_ex(o, key, &v) ? json_object_get_int64(v) : -1;
}

/* Check entry e against value v and copy its bytes into the session. */
static int load_value(struct ck_io *io, json_object *e, int v)
{
	const struct hp_value *val = &io->t->g->values[v];
	json_object *dt = NULL, *sh = NULL;
	uint64_t n = vbytes(val), off = (uint64_t)jint(e, "offset");
	uint32_t crc = 0;
	int ok;

	json_object_object_get_ex(e, "dtype", &dt);
	json_object_object_get_ex(e, "shape", &sh);
	ok = dt && sh && !strcmp(json_object_get_string(dt), hp_dtype_name(val->dtype)) &&
	     (int)json_object_array_length(sh) == val->shape.rank && jint(e, "bytes") == (int64_t)n;
	for (int i = 0; ok && i < val->shape.rank; i++)
		ok = json_object_get_int64(json_object_array_get_idx(sh, (size_t)i)) == val->shape.dims[i];
	if (!ok)
		return hp_error(HP_EDATA, "%s: '%s' is %s %s in the checkpoint, the model has %s", io->path, val->name,
				dt ? json_object_get_string(dt) : "?", sh ? json_object_to_json_string(sh) : "?",
				hp_dtype_name(val->dtype));
	for (uint64_t at = 0; at < n;) {
		size_t len = n - at < CK_PIECE ? (size_t)(n - at) : CK_PIECE;
		int rc = pread_all(io, io->buf, len, off + at);
		if (rc == 0)
			rc = hp_whole_write(io->t->s, v, at, len, io->buf);
		if (rc < 0)
			return rc;
		crc = crc_chain(crc, hs_crc32c(io->buf, len));
		at += len;
	}
	if (crc != (uint32_t)jint(e, "crc32c"))
		return hp_error(HP_ECORRUPT, "%s: checksum mismatch in '%s'", io->path, val->name);
	return 0;
}

static int load_all(struct ck_io *io, json_object *idx)
{
	const struct hp_graph *g = io->t->g;
	json_object *list;
	int nstate = 0;

	if (!json_object_object_get_ex(idx, "tensors", &list) || !json_object_is_type(list, json_type_array))
		return hp_error(HP_ECORRUPT, "%s: checkpoint index without tensors", io->path);
	for (int v = 0; v < g->nvalues; v++)
		nstate += io->unit[v];
	if ((int)json_object_array_length(list) != nstate)
		return hp_error(HP_EDATA, "%s: %d tensors in the checkpoint, the training graph keeps %d (another model "
				"or optimizer?)", io->path, (int)json_object_array_length(list), nstate);
	for (size_t i = 0; i < json_object_array_length(list); i++) {
		json_object *e = json_object_array_get_idx(list, i), *nm;
		int v = json_object_object_get_ex(e, "name", &nm) ? hp_graph_find_value(g, json_object_get_string(nm)) : -1;
		if (v < 0 || !io->unit[v])
			return hp_error(HP_EDATA, "%s: tensor '%s' of the checkpoint is not state of this training graph",
					io->path, v < 0 && nm ? json_object_get_string(nm) : "?");
		int rc = load_value(io, e, v);
		if (rc < 0)
			return rc;
	}
	return 0;
}

int hp_ckpt_read(struct hp_trainer *t)
{
	char path[4096];
	struct ck_io io = { .path = path, .t = t };
	json_object *idx = NULL;
	int rc;

	snprintf(path, sizeof path, "%s/checkpoint.hpck", t->o.checkpoint_dir);
	io.fd = open(path, O_RDONLY | O_CLOEXEC);
	if (io.fd < 0 && errno == ENOENT && t->o.resume == 2)
		return 0; /* --resume-if-present: nothing yet, start at step 0 */
	if (io.fd < 0 && errno == ENOENT)
		return hp_error(HP_EUSAGE, "%s: no checkpoint to resume from (--resume-if-present starts from step 0 "
				"when there is none)", path);
	if (io.fd < 0)
		return hp_error(-errno, "%s: %s", path, strerror(errno));
	io.buf = malloc(CK_PIECE);
	io.unit = hp_whole_state(t->g);
	rc = io.buf && io.unit ? read_index(&io, &idx) : hp_error(-ENOMEM, "out of memory");
	if (rc == 0)
		rc = load_all(&io, idx);
	if (rc == 0) {
		t->step = jint(idx, "step");
		t->shuffle_seed = (uint64_t)jint(idx, "shuffle_seed");
		if (t->step < 0)
			rc = hp_error(HP_ECORRUPT, "%s: checkpoint without a step", path);
	}
	json_object_put(idx);
	free(io.buf);
	free(io.unit);
	close(io.fd);
	return rc;
}
