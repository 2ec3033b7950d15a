/* Resuming: DIR/checkpoint.hpck is either a whole checkpoint (format 1,
 * train_ckpt.c) or the commit record of per-rank parts (format 2,
 * train_ckpt_parts.c).  Parts load at any number of ranks: this rank reads
 * the elements it holds of each state tensor (all of them under --shard
 * none, its slice where a --shard mode keeps one: hp_ckpt_view) from
 * whichever parts hold them, part w of the writers' Nw holding
 * [n*w/Nw, n*(w+1)/Nw) (exec/shard.h), checking the crc32c of every 4 MiB
 * piece it reads and that each part is the one the record committed. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "hpdlf/error.h"
#include "exec/shard.h"
#include "exec/split_weight.h"
#include "exec/train_ckpt.h"
#include "exec/train_internal.h"
#include "store/crc.h"

struct load {
	struct hp_trainer *t;
	json_object *commit;   /* the record's index */
	int *map, n;           /* record entry -> value */
	struct hp_ckpt_view *views; /* per value: its whole, the range held */
	int nw;                /* ranks that wrote the parts */
	struct hp_ckfile f;    /* the part being read */
	char path[4096];
	unsigned char *buf;    /* one piece */
};

/* Elements [a, b) of the slice [lo, hi) entry e holds, into value v: the
 * pieces that cover them, each checked. */
static int read_range(struct load *l, json_object *e, int v, uint64_t base, uint64_t lo, uint64_t a, uint64_t b)
{
	uint64_t esz = hp_dtype_size(l->t->g->values[v].dtype), off = (uint64_t)hp_ck_jint(e, "offset");
	uint64_t from = (a - lo) * esz, to = (b - lo) * esz, slice = ((uint64_t)hp_ck_jint(e, "hi") - lo) * esz;
	json_object *crcs = NULL;

	json_object_object_get_ex(e, "crc32c", &crcs);
	for (uint64_t p = from / HP_CK_PIECE; p * HP_CK_PIECE < to; p++) {
		uint64_t s = p * HP_CK_PIECE, len = slice - s < HP_CK_PIECE ? slice - s : HP_CK_PIECE;
		uint64_t x = from > s ? from : s, y = to < s + len ? to : s + len;
		int rc = hp_ck_pread(&l->f, l->buf, (size_t)len, off + s);
		if (rc < 0)
			return rc;
		if (!crcs || p >= json_object_array_length(crcs) ||
		    hs_crc32c(l->buf, len) != (uint32_t)json_object_get_int64(json_object_array_get_idx(crcs, p)))
			return hp_error(HP_ECORRUPT, "%s: checksum mismatch in '%s' (bytes %llu..%llu of its slice)",
					l->path, l->t->g->values[v].name, (unsigned long long)s,
					(unsigned long long)(s + len));
		if ((rc = hp_whole_write(l->t->s, v, (lo - base) * esz + x, y - x, l->buf + (x - s))) < 0)
			return rc;
	}
	return 0;
}

/* Entry i of part w: the record's tensor, the partition's slice. */
static int part_entry(struct load *l, json_object *e, int i, int w)
{
	int v = l->map[i], rc;
	struct hp_ckpt_view h;
	uint64_t lo, hi, a, b;
	const char *nm = hp_ck_jstr(e, "name");

	if (v < 0)
		return 0; /* another pipeline stage's tensor */
	h = l->views[v]; /* [h.lo, h.hi): what this rank holds */
	hp_shard_range(h.n, w, l->nw, &lo, &hi);
	if (!nm || strcmp(nm, h.name) || hp_ck_jint(e, "lo") != (int64_t)lo || hp_ck_jint(e, "hi") != (int64_t)hi)
		return hp_error(HP_ECORRUPT, "%s: entry %d ('%s') is not slice [%llu, %llu) of '%s' (part %d of %d)",
				l->path, i, nm ? nm : "?", (unsigned long long)lo, (unsigned long long)hi, h.name, w,
				l->nw);
	if ((rc = hp_ckpt_check_entry(l->path, e, &h)) < 0)
		return rc;
	a = h.lo > lo ? h.lo : lo;
	b = h.hi < hi ? h.hi : hi;
	return a < b ? read_range(l, e, v, h.lo, lo, a, b) : 0;
}

/* Part w's frame and header: the file the record committed, of this
 * checkpoint's generation and writers. */
static int part_header(struct load *l, int w, json_object *rec, json_object **idx)
{
	int version, kind, rc;
	uint64_t size;
	uint32_t icrc;

	if ((rc = hp_ck_read_frame(&l->f, &version, &kind, idx, &icrc, &size)) < 0)
		return rc;
	if (kind != HP_CK_PART || size != (uint64_t)hp_ck_jint(rec, "bytes") ||
	    icrc != (uint32_t)hp_ck_jint(rec, "index_crc32c"))
		return hp_error(HP_ECORRUPT, "%s: not the part the checkpoint committed (size %llu, index crc32c %u; the "
				"record says %lld, %lld)", l->path, (unsigned long long)size, icrc,
				(long long)hp_ck_jint(rec, "bytes"), (long long)hp_ck_jint(rec, "index_crc32c"));
	if (hp_ck_jint(*idx, "part") != w || hp_ck_jint(*idx, "ranks") != l->nw ||
	    hp_ck_jint(*idx, "generation") != hp_ck_jint(l->commit, "generation") ||
	    hp_ck_jint(*idx, "step") != hp_ck_jint(l->commit, "step") || hp_ck_jint(*idx, "piece") != HP_CK_PIECE)
		return hp_error(HP_ECORRUPT, "%s: part header (part, ranks, generation, step, piece) does not match the "
				"commit record", l->path);
	return 0;
}

static int load_part(struct load *l, int w, json_object *rec)
{
	const char *dir = hp_ck_jstr(l->commit, "parts_dir"), *file = hp_ck_jstr(rec, "file");
	json_object *idx = NULL, *list = NULL;
	int rc;

	snprintf(l->path, sizeof l->path, "%s/%s/%s", l->t->o.checkpoint_dir, dir ? dir : "?", file ? file : "?");
	if (!dir || !file || strchr(dir, '/') || strchr(file, '/'))
		return hp_error(HP_ECORRUPT, "%s: part %d of the commit record has no plain file name", l->path, w);
	if ((l->f.fd = open(l->path, O_RDONLY | O_CLOEXEC)) < 0)
		return hp_error(errno == ENOENT ? HP_ECORRUPT : -errno, "%s: part %d of %d of the checkpoint: %s (the "
				"checkpoint directory must be one file system all ranks share)", l->path, w, l->nw,
				strerror(errno));
	rc = part_header(l, w, rec, &idx);
	if (rc == 0 && (!json_object_object_get_ex(idx, "tensors", &list) ||
			!json_object_is_type(list, json_type_array) || (int)json_object_array_length(list) != l->n))
		rc = hp_error(HP_ECORRUPT, "%s: the part does not list the record's %d tensors", l->path, l->n);
	for (int i = 0; i < l->n && rc == 0; i++)
		rc = part_entry(l, json_object_array_get_idx(list, (size_t)i), i, w);
	json_object_put(idx);
	close(l->f.fd);
	return rc;
}

/* A format-2 commit record: every part in turn (one open at a time). */
static int load_parts(struct hp_trainer *t, const char *path, json_object *commit)
{
	struct load l = { .t = t, .commit = commit, .f = { .path = l.path } };
	json_object *parts = NULL;
	int rc;

	l.nw = (int)hp_ck_jint(commit, "ranks");
	if (!json_object_object_get_ex(commit, "parts", &parts) || !json_object_is_type(parts, json_type_array) ||
	    l.nw < 1 || (int)json_object_array_length(parts) != l.nw)
		return hp_error(HP_ECORRUPT, "%s: commit record without its %d parts", path, l.nw);
	if ((rc = hp_ckpt_map_tensors(t, path, commit, &l.map, &l.n, &l.views)) < 0)
		return rc;
	if (!(l.buf = malloc(HP_CK_PIECE)))
		rc = hp_error(-ENOMEM, "out of memory");
	for (int w = 0; w < l.nw && rc == 0; w++)
		rc = load_part(&l, w, json_object_array_get_idx(parts, (size_t)w));
	free(l.buf);
	free(l.map);
	free(l.views);
	return rc;
}

static int open_record(struct hp_trainer *t, struct hp_ckfile *f)
{
	if ((f->fd = open(f->path, O_RDONLY | O_CLOEXEC)) >= 0)
		return 1;
	if (errno == ENOENT && t->o.resume == 2)
		return 0; /* --resume-if-present: nothing yet, start at step 0 */
	if (errno == ENOENT)
		return hp_error(HP_EUSAGE, "%s: no checkpoint to resume from (--resume-if-present starts from step 0 "
				"when there is none)", f->path);
	return hp_error(-errno, "%s: %s", f->path, strerror(errno));
}

/* What the checkpoint was written with against this run: a changed batch,
 * data set size or shuffling still resumes (parameters and optimizer state
 * do not depend on them) but the run no longer continues the one that was
 * interrupted (other steps see other samples): said once, by rank 0.  A
 * record without the field (older) says nothing. */
static void warn_changed(const struct hp_trainer *t, json_object *idx, const char *path)
{
	int64_t batch = hp_ck_jint(idx, "batch"), samples = hp_ck_jint(idx, "samples");
	json_object *sh;

	if (t->rank != 0)
		return;
	if (batch > 0 && batch != t->o.batch)
		hp_log(HP_LOG_WARN, "%s: written with --batch %lld, resumed with --batch %lld: training continues from "
		       "step %lld but no longer as the interrupted run would have (other samples per step)", path,
		       (long long)batch, (long long)t->o.batch, (long long)hp_ck_jint(idx, "step"));
	if (samples > 0 && samples != (int64_t)t->data.n)
		hp_log(HP_LOG_WARN, "%s: written with a data set of %lld samples, resumed with %lld: the epoch order "
		       "differs from the interrupted run's", path, (long long)samples, (long long)t->data.n);
	if (json_object_object_get_ex(idx, "shuffle", &sh) && json_object_get_boolean(sh) != !!t->o.shuffle)
		hp_log(HP_LOG_WARN, "%s: written with shuffling %s, resumed with it %s", path,
		       json_object_get_boolean(sh) ? "on" : "off", t->o.shuffle ? "on" : "off");
}

int hp_ckpt_read(struct hp_trainer *t)
{
	char path[4096];
	struct hp_ckfile f = { .path = path };
	json_object *idx = NULL;
	int version = 0, kind = 0, rc;
	uint64_t size;
	uint32_t icrc;

	snprintf(path, sizeof path, "%s/checkpoint.hpck", t->o.checkpoint_dir);
	if ((rc = open_record(t, &f)) <= 0)
		return rc;
	rc = hp_ck_read_frame(&f, &version, &kind, &idx, &icrc, &size);
	if (rc == 0 && version == 2 && kind != HP_CK_COMMIT)
		rc = hp_error(HP_EFORMAT, "%s: a checkpoint part, not a commit record", path);
	if (rc == 0)
		rc = version == 1 ? hp_ckpt_load_whole(t, &f, idx) : load_parts(t, path, idx);
	if (rc == 0) {
		t->step = hp_ck_jint(idx, "step");
		t->shuffle_seed = (uint64_t)hp_ck_jint(idx, "shuffle_seed");
		if (t->step < 0)
			rc = hp_error(HP_ECORRUPT, "%s: checkpoint without a step", path);
		else
			warn_changed(t, idx, path);
	}
	json_object_put(idx);
	close(f.fd);
	return rc;
}
