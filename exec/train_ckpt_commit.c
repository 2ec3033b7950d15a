/* Writing a checkpoint with N ranks (format 2, train_ckpt_parts.c):
 *
 *   rank 0   reads the current commit record, removes parts directories
 *            it does not name (left by a crash mid-write), creates
 *            DIR/ck.G for a new generation G; broadcasts G
 *   each     writes and syncs its part in DIR/ck.G
 *   all      one allreduce: every part durable (and its size and index
 *            checksum, for the record)
 *   rank 0   writes the commit record naming ck.G and renames it over
 *            DIR/checkpoint.hpck (synced: the commit); broadcasts success
 *   rank 0   removes the previous generation's parts
 *
 * Every rank returns the same success or failure: a rank whose part failed
 * says why, the others that the checkpoint was not committed. */
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
#include "exec/split_weight.h"
#include "exec/train_ckpt.h"
#include "exec/train_internal.h"

/* The generation the current commit record names (0: none, format 1, or
 * an unreadable record, which cannot be resumed from either). */
static uint64_t committed_gen(const char *dir)
{
	char path[4096];
	struct hp_ckfile f = { .path = path };
	json_object *idx = NULL;
	int version = 0, kind = 0;
	uint64_t size, gen = 0;
	uint32_t crc;

	snprintf(path, sizeof path, "%s/checkpoint.hpck", dir);
	if ((f.fd = open(path, O_RDONLY | O_CLOEXEC)) < 0)
		return 0;
	if (hp_ck_read_frame(&f, &version, &kind, &idx, &crc, &size) == 0 && version == 2 && kind == HP_CK_COMMIT)
		gen = hp_ck_jint(idx, "generation") > 0 ? (uint64_t)hp_ck_jint(idx, "generation") : 0;
	json_object_put(idx);
	close(f.fd);
	return gen;
}

static void remove_parts_dir(const char *dir, const char *name)
{
	char path[4096], file[4400];
	struct dirent *e;
	DIR *d;

	snprintf(path, sizeof path, "%s/%s", dir, name);
	if (!(d = opendir(path)))
		return;
	while ((e = readdir(d)))
		if (!strncmp(e->d_name, "part.", 5)) {
			snprintf(file, sizeof file, "%s/%s", path, e->d_name);
			unlink(file);
		}
	closedir(d);
	rmdir(path);
}

/* Remove the parts directories DIR/ck.G but `keep`'s; the highest G seen. */
uint64_t hp_ckpt_sweep(const char *dir, uint64_t keep)
{
	uint64_t top = 0, g;
	struct dirent *e;
	char end;
	DIR *d = opendir(dir);

	if (!d)
		return 0;
	while ((e = readdir(d))) {
		if (sscanf(e->d_name, "ck.%" SCNu64 "%c", &g, &end) != 1)
			continue;
		top = g > top ? g : top;
		if (g != keep)
			remove_parts_dir(dir, e->d_name);
	}
	closedir(d);
	return top;
}

/* Rank 0: a new generation's directory. */
int hp_ckpt_prepare(const char *dir, uint64_t *gen)
{
	char gdir[4096];
	uint64_t cur, top;

	if (mkdir(dir, 0777) < 0 && errno != EEXIST)
		return hp_error(-errno, "%s: cannot create the checkpoint directory: %s", dir, strerror(errno));
	cur = committed_gen(dir);
	top = hp_ckpt_sweep(dir, cur);
	*gen = (top > cur ? top : cur) + 1;
	snprintf(gdir, sizeof gdir, "%s/ck.%" PRIu64, dir, *gen);
	if (mkdir(gdir, 0777) < 0)
		return hp_error(-errno, "%s: %s", gdir, strerror(errno));
	return hp_ck_fsync_dir(dir);
}

/* Every rank's part durable?  One allreduce also brings each part's size
 * and index checksum to rank 0 (exact in doubles: both below 2^53).
 * *failed: parts that failed, the same on every rank (or -1: the
 * collective itself failed, the job is broken). */
static int all_durable(const struct hp_trainer *t, int rc, uint64_t size, uint32_t icrc, double *info, int *failed)
{
	int r2;

	info[0] = rc < 0;
	info[1 + 2 * t->rank] = (double)size;
	info[2 + 2 * t->rank] = icrc;
	*failed = -1;
	/* one writer (an asynchronous rank's own checkpoint, asgd_ckpt.c): no collective */
	if (t->nranks > 1 && (r2 = hp_comm_allreduce(info, 1 + 2 * (size_t)t->nranks, HP_F64)) < 0)
		return r2;
	*failed = (int)info[0];
	if (rc < 0)
		return rc;
	if (*failed)
		return hp_error(HP_EPROTO, "rank %d of %d: %d rank(s) could not write their part (their own message "
				"says why): not committed", t->rank, t->nranks, *failed);
	return 0;
}

/* The wholes (train_ckpt_view.c) of the state values; NULL on error. */
static json_object *commit_tensors(const struct hp_trainer *t)
{
	const struct hp_graph *g = t->g;
	json_object *list = json_object_new_array();
	char *unit = hp_whole_state(g);
	struct hp_ckpt_view w;

	for (int v = 0; list && unit && v < g->nvalues; v++) {
		if (!unit[v])
			continue;
		if (hp_ckpt_view(t, v, &w) < 0) {
			json_object_put(list);
			list = NULL;
			break;
		}
		json_object *e = json_object_new_object();
		json_object_object_add(e, "name", json_object_new_string(w.name));
		json_object_object_add(e, "dtype", json_object_new_string(hp_dtype_name(w.dtype)));
		json_object_object_add(e, "shape", hp_ck_shape_json(&w.shape));
		json_object_object_add(e, "elements", json_object_new_int64((int64_t)w.n));
		json_object_array_add(list, e);
	}
	free(unit);
	return list;
}

json_object *hp_ckpt_record_head(const struct hp_trainer *t, int ranks, uint64_t gen)
{
	json_object *o = json_object_new_object();
	char name[64];

	json_object_object_add(o, "format", json_object_new_int(2));
	json_object_object_add(o, "model", json_object_new_string(t->model));
	json_object_object_add(o, "step", json_object_new_int64(t->step));
	json_object_object_add(o, "shuffle_seed", json_object_new_int64((int64_t)t->shuffle_seed));
	json_object_object_add(o, "shuffle", json_object_new_boolean(t->o.shuffle));
	json_object_object_add(o, "batch", json_object_new_int64(t->o.batch));
	json_object_object_add(o, "samples", json_object_new_int64(t->data.n));
	json_object_object_add(o, "ranks", json_object_new_int(ranks));
	json_object_object_add(o, "generation", json_object_new_int64((int64_t)gen));
	snprintf(name, sizeof name, "ck.%" PRIu64, gen);
	json_object_object_add(o, "parts_dir", json_object_new_string(name));
	return o;
}

static json_object *commit_json(const struct hp_trainer *t, uint64_t gen, const double *info)
{
	json_object *o = hp_ckpt_record_head(t, t->nranks, gen), *parts = json_object_new_array();
	char name[64];

	json_object_object_add(o, "tensors", commit_tensors(t));
	for (int r = 0; r < t->nranks; r++) {
		json_object *p = json_object_new_object();
		snprintf(name, sizeof name, "part.%d.hpck", r);
		json_object_object_add(p, "file", json_object_new_string(name));
		json_object_object_add(p, "bytes", json_object_new_int64((int64_t)info[1 + 2 * r]));
		json_object_object_add(p, "index_crc32c", json_object_new_int64((int64_t)info[2 + 2 * r]));
		json_object_array_add(parts, p);
	}
	json_object_object_add(o, "parts", parts);
	return o;
}

/* Rank 0: the record to a temporary file, synced, renamed over the old. */
static int commit(const struct hp_trainer *t, const char *dir, uint64_t gen, const double *info)
{
	return hp_ckpt_write_record(dir, commit_json(t, gen, info));
}

int hp_ckpt_write_record(const char *dir, json_object *o)
{
	char tmp[4096], fin[4096];
	struct hp_ckfile f = { .path = tmp };
	uint32_t crc;
	int rc;

	snprintf(tmp, sizeof tmp, "%s/checkpoint.hpck.tmp", dir);
	snprintf(fin, sizeof fin, "%s/checkpoint.hpck", dir);
	if ((f.fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666)) < 0) {
		json_object_put(o);
		return hp_error(-errno, "%s: %s", tmp, strerror(errno));
	}
	rc = hp_ck_write_frame(&f, 2, HP_CK_COMMIT, HP_CK_ALIGN, o, &crc);
	if (rc == 0 && fsync(f.fd) < 0)
		rc = hp_error(-errno, "%s: fsync: %s", tmp, strerror(errno));
	if (close(f.fd) < 0 && rc == 0)
		rc = hp_error(-errno, "%s: close: %s", tmp, strerror(errno));
	if (rc == 0 && rename(tmp, fin) < 0)
		rc = hp_error(-errno, "%s: rename: %s", fin, strerror(errno));
	if (rc == 0)
		rc = hp_ck_fsync_dir(dir);
	if (rc < 0)
		unlink(tmp);
	json_object_put(o);
	return rc;
}

/* Rank 0 prepares and says the generation (0: it failed) to all. */
static int start(const struct hp_trainer *t, uint64_t *gen)
{
	int rc = t->rank == 0 ? hp_ckpt_prepare(t->o.checkpoint_dir, gen) : 0, r2;

	if (t->rank == 0 && rc < 0)
		*gen = 0;
	if (t->nranks > 1 && (r2 = hp_comm_bcast(gen, sizeof *gen, 0)) < 0)
		return r2;
	if (rc == 0 && !*gen)
		rc = hp_error(HP_EPROTO, "rank %d of %d: rank 0 could not start the checkpoint (its message says why)",
			      t->rank, t->nranks);
	return rc;
}

/* Parts, the collective, rank 0's commit, its outcome to every rank. */
static int write_all(struct hp_trainer *t, uint64_t gen)
{
	const char *dir = t->o.checkpoint_dir;
	char gdir[4096];
	double *info = calloc(1 + 2 * (size_t)t->nranks, sizeof *info);
	uint64_t size = 0;
	uint32_t icrc = 0;
	int32_t ok;
	int rc, failed;

	if (!info)
		return hp_error(-ENOMEM, "out of memory");
	snprintf(gdir, sizeof gdir, "%s/ck.%" PRIu64, dir, gen);
	rc = hp_ckpt_write_part(t, gdir, gen, &size, &icrc);
	rc = all_durable(t, rc, size, icrc, info, &failed);
	if (failed == 0 && t->rank == 0)
		rc = commit(t, dir, gen, info);
	free(info);
	ok = rc == 0;
	if (failed == 0 && t->nranks > 1) { /* otherwise every rank knows already */
		int r2 = hp_comm_bcast(&ok, sizeof ok, 0);
		if (r2 < 0)
			return r2;
		if (rc == 0 && !ok)
			rc = hp_error(HP_EPROTO, "rank %d of %d: rank 0 could not commit the checkpoint (its message says "
				      "why)", t->rank, t->nranks);
	}
	if (rc == 0 && t->rank == 0)
		hp_ckpt_sweep(dir, gen); /* the previous generation's parts */
	return rc;
}

int hp_ckpt_write(struct hp_trainer *t)
{
	uint64_t gen = 0;
	int rc = start(t, &gen);

	if (rc == 0)
		rc = write_all(t, gen);
	return rc < 0 ? hp_error_prefix(rc, "writing checkpoint at step %lld", (long long)t->step) : 0;
}
