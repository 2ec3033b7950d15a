/* Checkpoints of format 2, written by every rank at once.  Each rank r of
 * N writes its slice, elements [n*r/N, n*(r+1)/N) (exec/shard.h), of every
 * run-to-run state tensor (weights, optimizer moments and step counter,
 * running statistics) to DIR/ck.G/part.r.hpck and syncs it; one collective
 * confirms that every part is durable; only then rank 0 writes the commit
 * record DIR/checkpoint.hpck (the step, the shuffle seed, the tensors, and
 * per part its size and index checksum) to a temporary file, syncs it and
 * renames it over the previous record.  The rename is the commit: a crash
 * before it leaves the previous record current, naming the previous
 * generation's parts, which stay until the new record is durable.
 *
 * Each part is framed like every checkpoint file (train_ckpt_io.h): its
 * slices at 4096-aligned offsets, a crc32c per 4 MiB piece of a slice (a
 * reader at another N checks just the pieces it reads), the index, the
 * trailer.  The directory must be one file system all ranks share.
 *
 * The tensors are the wholes an unsharded run keeps (train_ckpt_view.c):
 * under --shard a rank's slice of a parameter's optimizer state (or of
 * the parameter itself) is exactly its part of that whole, so a
 * checkpoint resumes under any --shard mode and number of ranks. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "hpdlf/error.h"
#include "exec/comm.h"
#include "exec/shard.h"
#include "exec/split_weight.h"
#include "exec/train_ckpt.h"
#include "exec/train_internal.h"
#include "store/crc.h"

struct part {
	struct hp_trainer *t;
	struct hp_ckfile f;
	unsigned char *buf; /* HP_CK_PIECE bytes */
	char *unit;         /* per value: state kept (hp_whole_state) */
	uint64_t done, total;
};

/* Elements [lo, hi) of v's whole (v holding it from element base on) into
 * the file at off, a crc32c per piece. */
static int write_slice(struct part *p, int v, uint64_t base, uint64_t lo, uint64_t hi, uint64_t off,
		       json_object *crcs)
{
	uint64_t esz = hp_dtype_size(p->t->g->values[v].dtype), at = lo * esz, end = hi * esz;

	for (uint64_t pos = at; pos < end;) {
		size_t len = end - pos < HP_CK_PIECE ? (size_t)(end - pos) : HP_CK_PIECE;
		int rc = hp_whole_read(p->t->s, v, pos - base * esz, len, p->buf);
		if (rc == 0)
			rc = hp_ck_pwrite(&p->f, p->buf, len, off + (pos - at));
		if (rc < 0)
			return rc;
		json_object_array_add(crcs, json_object_new_int64(hs_crc32c(p->buf, len)));
		pos += len;
		p->done += len;
		if (p->t->ckpt_progress)
			p->t->ckpt_progress(p->t->ckpt_arg, p->done, p->total);
	}
	return 0;
}

/* v's whole (hp_ckpt_view) and this rank's partition slice [*lo, *hi) of
 * it, which v must hold: the whole under --shard none, and under a
 * sharded mode v's slice is that very partition. */
static int part_range(const struct hp_trainer *t, int v, struct hp_ckpt_view *w, uint64_t *lo, uint64_t *hi)
{
	const struct hp_value *val = &t->g->values[v];
	int64_t k = hp_shape_numel(&val->shape);
	int rc;

	if (k < 0 || !hp_dtype_size(val->dtype) || hp_ckpt_vbytes(t, v) != (uint64_t)k * hp_dtype_size(val->dtype))
		return hp_error(HP_EUNSUPPORTED, "state '%s' (%s): no fixed element size to cut into parts", val->name,
				hp_dtype_name(val->dtype));
	if ((rc = hp_ckpt_view(t, v, w)) < 0)
		return rc;
	hp_shard_range(w->n, t->rank, t->nranks, lo, hi);
	if (*lo < w->lo || *hi > w->hi)
		return hp_error(HP_EINTERNAL, "state '%s' holds [%llu, %llu) of '%s', not this rank's part [%llu, %llu)",
				val->name, (unsigned long long)w->lo, (unsigned long long)w->hi, w->name,
				(unsigned long long)*lo, (unsigned long long)*hi);
	return 0;
}

static json_object *slice_entry(const struct hp_ckpt_view *w, uint64_t lo, uint64_t hi, uint64_t off, json_object *crcs)
{
	json_object *e = json_object_new_object();

	json_object_object_add(e, "name", json_object_new_string(w->name));
	json_object_object_add(e, "dtype", json_object_new_string(hp_dtype_name(w->dtype)));
	json_object_object_add(e, "shape", hp_ck_shape_json(&w->shape));
	json_object_object_add(e, "lo", json_object_new_int64((int64_t)lo));
	json_object_object_add(e, "hi", json_object_new_int64((int64_t)hi));
	json_object_object_add(e, "offset", json_object_new_int64((int64_t)off));
	json_object_object_add(e, "crc32c", crcs);
	return e;
}

static json_object *part_header(const struct hp_trainer *t, uint64_t gen)
{
	json_object *o = json_object_new_object();

	json_object_object_add(o, "format", json_object_new_int(2));
	json_object_object_add(o, "part", json_object_new_int(t->rank));
	json_object_object_add(o, "ranks", json_object_new_int(t->nranks));
	json_object_object_add(o, "generation", json_object_new_int64((int64_t)gen));
	json_object_object_add(o, "step", json_object_new_int64(t->step));
	json_object_object_add(o, "piece", json_object_new_int64(HP_CK_PIECE));
	return o;
}

/* This rank's slices of every state value, then the index and trailer. */
static int write_body(struct part *p, uint64_t gen, uint32_t *icrc)
{
	const struct hp_graph *g = p->t->g;
	json_object *idx = part_header(p->t, gen), *list = json_object_new_array();
	struct hp_ckpt_view w;
	uint64_t off = HP_CK_ALIGN, lo, hi;
	int rc = 0;

	json_object_object_add(idx, "tensors", list);
	for (int v = 0; v < g->nvalues && rc == 0; v++)
		if (p->unit[v] && (rc = part_range(p->t, v, &w, &lo, &hi)) == 0)
			p->total += (hi - lo) * hp_dtype_size(g->values[v].dtype);
	for (int v = 0; v < g->nvalues && rc == 0; v++) {
		json_object *crcs;
		if (!p->unit[v] || (rc = part_range(p->t, v, &w, &lo, &hi)) < 0)
			continue;
		crcs = json_object_new_array();
		rc = write_slice(p, v, w.lo, lo, hi, off, crcs);
		json_object_array_add(list, slice_entry(&w, lo, hi, off, crcs));
		off += ((hi - lo) * hp_dtype_size(g->values[v].dtype) + HP_CK_ALIGN - 1) / HP_CK_ALIGN * HP_CK_ALIGN;
	}
	if (rc == 0)
		rc = hp_ck_write_frame(&p->f, 2, HP_CK_PART, off, idx, icrc);
	json_object_put(idx);
	return rc;
}

int hp_ckpt_write_part(struct hp_trainer *t, const char *gdir, uint64_t gen, uint64_t *size, uint32_t *icrc)
{
	char path[4096];
	struct part p = { .t = t, .f = { .path = path } };
	int rc;

	snprintf(path, sizeof path, "%s/part.%d.hpck", gdir, t->rank);
	if ((p.f.fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666)) < 0)
		return hp_error(-errno, "%s: %s", path, strerror(errno));
	p.buf = malloc(HP_CK_PIECE);
	p.unit = hp_whole_state(t->g);
	rc = p.buf && p.unit ? write_body(&p, gen, icrc) : hp_error(-ENOMEM, "out of memory");
	*size = (uint64_t)lseek(p.f.fd, 0, SEEK_END);
	if (rc == 0 && fsync(p.f.fd) < 0)
		rc = hp_error(-errno, "%s: fsync: %s", path, strerror(errno));
	if (close(p.f.fd) < 0 && rc == 0)
		rc = hp_error(-errno, "%s: close: %s", path, strerror(errno));
	free(p.buf);
	free(p.unit);
	return rc < 0 ? rc : hp_ck_fsync_dir(gdir);
}

void hp_trainer_set_checkpoint_progress(struct hp_trainer *t, hp_ckpt_progress_fn fn, void *arg)
{
	t->ckpt_progress = fn;
	t->ckpt_arg = arg;
}
