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

int hp_ckpt_check_entry(const char *path, json_object *e, const struct hp_ckpt_view *v)
{
	const struct hp_ckpt_view w = *v;
	json_object *dt = NULL, *sh = NULL;
	int ok;

	json_object_object_get_ex(e, "dtype", &dt);
	json_object_object_get_ex(e, "shape", &sh);
	ok = dt && sh && json_object_is_type(sh, json_type_array) &&
	     !strcmp(json_object_get_string(dt), hp_dtype_name(w.dtype)) &&
	     (int)json_object_array_length(sh) == w.shape.rank;
	for (int i = 0; ok && i < w.shape.rank; i++)
		ok = json_object_get_int64(json_object_array_get_idx(sh, (size_t)i)) == w.shape.dims[i];
	if (!ok)
		return hp_error(HP_EDATA, "%s: '%s' is %s %s in the checkpoint, the model has %s", path, w.name,
				dt ? json_object_get_string(dt) : "?", sh ? json_object_to_json_string(sh) : "?",
				hp_dtype_name(w.dtype));
	return 0;
}

/* The state value whose whole is named nm (-1: none); views[v].name is
 * set for the state values. */
static int find_whole(const struct hp_graph *g, const struct hp_ckpt_view *views, const char *nm)
{
	int v = hp_graph_find_value(g, nm);

	if (v >= 0 && views[v].name && !strcmp(views[v].name, nm))
		return v;
	for (v = 0; v < g->nvalues; v++)
		if (views[v].name && !strcmp(views[v].name, nm))
			return v;
	return -1;
}

/* *out: the value entry e loads, or -1 when it is another pipeline
 * stage's tensor (a stage holds some of the checkpoint). */
static int map_entry(const struct hp_trainer *t, const char *path, json_object *e, const struct hp_ckpt_view *views,
		     char *seen, int *out)
{
	const char *nm = hp_ck_jstr(e, "name");
	int v = nm ? find_whole(t->g, views, nm) : -1;

	*out = -1;
	if (v < 0 && nm && t->pipe)
		return 0;
	if (v < 0 || seen[v])
		return hp_error(HP_EDATA, "%s: tensor '%s' of the checkpoint is not state of this training graph%s", path,
				nm ? nm : "?", v >= 0 && seen[v] ? " (listed twice)" : "");
	seen[v] = 1;
	*out = v;
	return 0;
}

/* views[v] of every state value (unit[v]); the others' name NULL. */
static int state_views(const struct hp_trainer *t, const char *unit, struct hp_ckpt_view *views, int *nstate)
{
	int rc = 0;

	*nstate = 0;
	for (int v = 0; v < t->g->nvalues && rc == 0; v++)
		if (unit[v]) {
			rc = hp_ckpt_view(t, v, &views[v]);
			++*nstate;
		}
	return rc;
}

int hp_ckpt_map_tensors(const struct hp_trainer *t, const char *path, json_object *idx, int **out, int *count,
			struct hp_ckpt_view **vout)
{
	const struct hp_graph *g = t->g;
	char *unit = hp_whole_state(g), *seen = calloc((size_t)g->nvalues + 1, 1);
	struct hp_ckpt_view *views = calloc((size_t)g->nvalues + 1, sizeof *views);
	json_object *list;
	int nstate = 0, n = 0, rc = 0, *map = NULL;

	if (!unit || !seen || !views) {
		rc = hp_error(-ENOMEM, "out of memory");
		goto out;
	}
	if ((rc = state_views(t, unit, views, &nstate)) < 0)
		goto out;
	if (!json_object_object_get_ex(idx, "tensors", &list) || !json_object_is_type(list, json_type_array)) {
		rc = hp_error(HP_ECORRUPT, "%s: checkpoint index without tensors", path);
		goto out;
	}
	n = (int)json_object_array_length(list);
	if (t->pipe && n >= nstate) {
		/* a pipeline stage holds some of the tensors: all of its own must be there */
	} else if (n != nstate) {
		rc = hp_error(HP_EDATA, "%s: %d tensors in the checkpoint, the training graph keeps %d (another model "
			      "or optimizer?)", path, n, nstate);
		goto out;
	}
	if (!(map = calloc((size_t)n + 1, sizeof *map)))
		rc = hp_error(-ENOMEM, "out of memory");
	for (int i = 0; i < n && rc == 0; i++) {
		json_object *e = json_object_array_get_idx(list, (size_t)i);
		if ((rc = map_entry(t, path, e, views, seen, &map[i])) == 0 && map[i] >= 0)
			rc = hp_ckpt_check_entry(path, e, &views[map[i]]);
	}
	for (int v = 0; rc == 0 && t->pipe && v < g->nvalues; v++)
		if (unit[v] && !seen[v])
			rc = hp_error(HP_EDATA, "%s: the checkpoint has no '%s' (another model or optimizer?)", path,
				      views[v].name);
out:
	free(unit);
	free(seen);
	if (rc < 0 || !vout)
		free(views);
	if (vout)
		*vout = rc < 0 ? NULL : views;
	if (rc < 0)
		free(map);
	*out = rc < 0 ? NULL : map;
	*count = rc < 0 ? 0 : n;
	return rc < 0 ? rc : 0;
}

/* Entry e's bytes into value v, checked against its crc32c: all of the
 * whole is read for its checksum, the range v holds of it kept. */
static int load_value(struct hp_trainer *t, const struct hp_ckfile *f, json_object *e, int v,
		      const struct hp_ckpt_view *view, unsigned char *buf)
{
	const struct hp_ckpt_view w = *view;
	uint64_t esz = hp_dtype_size(t->g->values[v].dtype), off = (uint64_t)hp_ck_jint(e, "offset"), n, a, b;
	uint32_t crc = 0;
	int rc;

	n = w.n * esz;
	a = w.lo * esz;
	b = w.hi * esz;
	if (w.lo == 0 && w.hi == w.n)
		n = hp_ckpt_vbytes(t, v); /* whole: also types without a fixed element size */
	if (hp_ck_jint(e, "bytes") != (int64_t)n)
		return hp_error(HP_EDATA, "%s: '%s' has %lld bytes in the checkpoint, the model %llu", f->path, w.name,
				(long long)hp_ck_jint(e, "bytes"), (unsigned long long)n);
	if (w.lo == 0 && w.hi == w.n)
		b = n;
	for (uint64_t at = 0; at < n;) {
		size_t len = n - at < HP_CK_PIECE ? (size_t)(n - at) : HP_CK_PIECE;
		uint64_t x = at > a ? at : a, y = at + len < b ? at + len : b;
		rc = hp_ck_pread(f, buf, len, off + at);
		if (rc == 0 && x < y)
			rc = hp_whole_write(t->s, v, x - a, y - x, buf + (x - at));
		if (rc < 0)
			return rc;
		crc = hp_ck_crc_chain(crc, hs_crc32c(buf, len));
		at += len;
	}
	if (crc != (uint32_t)hp_ck_jint(e, "crc32c"))
		return hp_error(HP_ECORRUPT, "%s: checksum mismatch in '%s'", f->path, w.name);
	return 0;
}

int hp_ckpt_load_whole(struct hp_trainer *t, const struct hp_ckfile *f, json_object *idx)
{
	unsigned char *buf = malloc(HP_CK_PIECE);
	json_object *list = NULL;
	struct hp_ckpt_view *views = NULL;
	int *map = NULL, n = 0, rc;

	rc = buf ? hp_ckpt_map_tensors(t, f->path, idx, &map, &n, &views) : hp_error(-ENOMEM, "out of memory");
	json_object_object_get_ex(idx, "tensors", &list);
	for (int i = 0; i < n && rc == 0; i++)
		if (map[i] >= 0) /* -1: another pipeline stage's */
			rc = load_value(t, f, json_object_array_get_idx(list, (size_t)i), map[i], &views[map[i]], buf);
	free(map);
	free(views);
	free(buf);
	return rc;
}
