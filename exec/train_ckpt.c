/* Checkpoints of format 1: DIR/checkpoint.hpck holding every run-to-run
 * state value of the training graph whole (weights, optimizer moments,
 * running statistics, the step counter) at 4096-aligned offsets, each with
 * its crc32c, and the trainer's position (step, shuffle seed) in the index.
 * This build writes format 2 (per-rank parts, train_ckpt_parts.c) and loads
 * both: a format-1 checkpoint resumes at any number of ranks, every rank
 * reading the whole tensors.
 *
 * Partitioned weights (split_weight.c) and their state are kept whole,
 * gathered from their parts, so a checkpoint loads at any partitioning. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "hpdlf/error.h"
#include "exec/exec_internal.h"
#include "exec/split_weight.h"
#include "exec/train_ckpt.h"
#include "exec/train_internal.h"
#include "store/crc.h"

uint64_t hp_ckpt_vbytes(const struct hp_trainer *t, int v)
{
	struct hp_tensor x = { .dtype = t->g->values[v].dtype, .shape = t->g->values[v].shape };

	return hp_tensor_bytes(&x);
}

int hp_ckpt_check_entry(const struct hp_trainer *t, const char *path, json_object *e, int v)
{
	const struct hp_value *val = &t->g->values[v];
	json_object *dt = NULL, *sh = NULL;
	int ok;

	json_object_object_get_ex(e, "dtype", &dt);
	json_object_object_get_ex(e, "shape", &sh);
	ok = dt && sh && json_object_is_type(sh, json_type_array) &&
	     !strcmp(json_object_get_string(dt), hp_dtype_name(val->dtype)) &&
	     (int)json_object_array_length(sh) == val->shape.rank;
	for (int i = 0; ok && i < val->shape.rank; i++)
		ok = json_object_get_int64(json_object_array_get_idx(sh, (size_t)i)) == val->shape.dims[i];
	if (!ok)
		return hp_error(HP_EDATA, "%s: '%s' is %s %s in the checkpoint, the model has %s", path, val->name,
				dt ? json_object_get_string(dt) : "?", sh ? json_object_to_json_string(sh) : "?",
				hp_dtype_name(val->dtype));
	return 0;
}

static int map_entry(const struct hp_trainer *t, const char *path, json_object *e, const char *unit, char *seen)
{
	const char *nm = hp_ck_jstr(e, "name");
	int v = nm ? hp_graph_find_value(t->g, nm) : -1;

	if (v < 0 || !unit[v] || seen[v])
		return hp_error(HP_EDATA, "%s: tensor '%s' of the checkpoint is not state of this training graph%s", path,
				nm ? nm : "?", v >= 0 && seen[v] ? " (listed twice)" : "");
	seen[v] = 1;
	return v;
}

int hp_ckpt_map_tensors(const struct hp_trainer *t, const char *path, json_object *idx, int **out, int *count)
{
	const struct hp_graph *g = t->g;
	char *unit = hp_whole_state(g), *seen = calloc((size_t)g->nvalues + 1, 1);
	json_object *list;
	int nstate = 0, n = 0, rc = 0, *map = NULL;

	if (!unit || !seen) {
		rc = hp_error(-ENOMEM, "out of memory");
		goto out;
	}
	if (!json_object_object_get_ex(idx, "tensors", &list) || !json_object_is_type(list, json_type_array)) {
		rc = hp_error(HP_ECORRUPT, "%s: checkpoint index without tensors", path);
		goto out;
	}
	for (int v = 0; v < g->nvalues; v++)
		nstate += unit[v];
	if ((n = (int)json_object_array_length(list)) != nstate) {
		rc = hp_error(HP_EDATA, "%s: %d tensors in the checkpoint, the training graph keeps %d (another model "
			      "or optimizer?)", path, n, nstate);
		goto out;
	}
	if (!(map = calloc((size_t)n + 1, sizeof *map)))
		rc = hp_error(-ENOMEM, "out of memory");
	for (int i = 0; i < n && rc == 0; i++) {
		json_object *e = json_object_array_get_idx(list, (size_t)i);
		if ((rc = map_entry(t, path, e, unit, seen)) >= 0)
			map[i] = rc;
		rc = rc < 0 ? rc : hp_ckpt_check_entry(t, path, e, map[i]);
	}
out:
	free(unit);
	free(seen);
	if (rc < 0)
		free(map);
	*out = rc < 0 ? NULL : map;
	*count = rc < 0 ? 0 : n;
	return rc < 0 ? rc : 0;
}

/* Entry e's bytes into value v, checked against its crc32c. */
static int load_value(struct hp_trainer *t, const struct hp_ckfile *f, json_object *e, int v, unsigned char *buf)
{
	uint64_t n = hp_ckpt_vbytes(t, v), off = (uint64_t)hp_ck_jint(e, "offset");
	uint32_t crc = 0;

	if (hp_ck_jint(e, "bytes") != (int64_t)n)
		return hp_error(HP_EDATA, "%s: '%s' has %lld bytes in the checkpoint, the model %llu", f->path,
				t->g->values[v].name, (long long)hp_ck_jint(e, "bytes"), (unsigned long long)n);
	for (uint64_t at = 0; at < n;) {
		size_t len = n - at < HP_CK_PIECE ? (size_t)(n - at) : HP_CK_PIECE;
		int rc = hp_ck_pread(f, buf, len, off + at);
		if (rc == 0)
			rc = hp_whole_write(t->s, v, at, len, buf);
		if (rc < 0)
			return rc;
		crc = hp_ck_crc_chain(crc, hs_crc32c(buf, len));
		at += len;
	}
	if (crc != (uint32_t)hp_ck_jint(e, "crc32c"))
		return hp_error(HP_ECORRUPT, "%s: checksum mismatch in '%s'", f->path, t->g->values[v].name);
	return 0;
}

int hp_ckpt_load_whole(struct hp_trainer *t, const struct hp_ckfile *f, json_object *idx)
{
	unsigned char *buf = malloc(HP_CK_PIECE);
	json_object *list = NULL;
	int *map = NULL, n = 0, rc;

	rc = buf ? hp_ckpt_map_tensors(t, f->path, idx, &map, &n) : hp_error(-ENOMEM, "out of memory");
	json_object_object_get_ex(idx, "tensors", &list);
	for (int i = 0; i < n && rc == 0; i++)
		rc = load_value(t, f, json_object_array_get_idx(list, (size_t)i), map[i], buf);
	free(map);
	free(buf);
	return rc;
}
