/* Checkpoints inside exec/ (the trainer calls hp_ckpt_write/hp_ckpt_read,
 * train_internal.h):
 *   train_ckpt_commit.c writing: the protocol, rank 0's commit record
 *   train_ckpt_parts.c  writing: one rank's part
 *   train_ckpt_load.c   reading: the commit record, then the parts (any N)
 *   train_ckpt.c        format 1 (one file, tensors whole): loading, and
 *                       the checks every format shares
 *   train_ckpt_io.c     the file frame and positioned I/O
 *   train_ckpt_view.c   the whole tensor each state value is (a slice of)
 *                       under --shard, and the range of it this rank holds */
#ifndef HPDLF_EXEC_TRAIN_CKPT_H
#define HPDLF_EXEC_TRAIN_CKPT_H

#include <stdint.h>

#include <json-c/json.h>

#include "exec/train_ckpt_io.h"

struct hp_trainer;

/* State value v as a checkpoint sees it: the whole logical tensor (the
 * name, dtype and shape an unsharded run has) and the elements [lo, hi)
 * of its n that v holds (all of them unless v is a --shard slice). */
struct hp_ckpt_view {
	const char *name;
	enum hp_dtype dtype;
	struct hp_shape shape;
	uint64_t n, lo, hi;
};

int hp_ckpt_view(const struct hp_trainer *t, int v, struct hp_ckpt_view *out);
/* Every state value of the training graph has a view (at start-up, so a
 * run that could not checkpoint stops before training): HP_EUSAGE where
 * --shard slices a block of a weight --budget partitioned. */
int hp_ckpt_check_views(const struct hp_trainer *t);

/* Bytes of value v of the training graph. */
uint64_t hp_ckpt_vbytes(const struct hp_trainer *t, int v);
/* Entry e (name, dtype, shape) of the index at `path` against the whole
 * v of a state value (hp_ckpt_view): HP_EDATA naming both when they
 * differ. */
int hp_ckpt_check_entry(const char *path, json_object *e, const struct hp_ckpt_view *v);
/* The value index of each entry of idx's "tensors" (the state values of
 * the training graph by their wholes' names, each once, all of them);
 * *out calloc'd.  vout (may be NULL): each state value's view, by value
 * index, calloc'd. */
int hp_ckpt_map_tensors(const struct hp_trainer *t, const char *path, json_object *idx, int **out, int *count,
			struct hp_ckpt_view **vout);
/* This rank's part of generation gen, gdir/part.RANK.hpck, synced with its
 * directory entry; its size and index checksum for the commit record. */
int hp_ckpt_write_part(struct hp_trainer *t, const char *gdir, uint64_t gen, uint64_t *size, uint32_t *icrc);
/* Rank 0 of a writing job: a new generation's directory DIR/ck.G (parts
 * directories a crash left removed); then, once committed, the previous
 * generation's removed (hp_ckpt_sweep keeps `keep`'s).  The commit: record
 * o (consumed) to a temporary file, synced, renamed over DIR/checkpoint.hpck. */
int hp_ckpt_prepare(const char *dir, uint64_t *gen);
uint64_t hp_ckpt_sweep(const char *dir, uint64_t keep);
int hp_ckpt_write_record(const char *dir, json_object *o);
/* A commit record's fields before its tensors and parts (format 2): the
 * model, step, shuffle, batch, samples, ranks, generation and parts
 * directory (train_ckpt_commit.c; the pipeline's record too). */
json_object *hp_ckpt_record_head(const struct hp_trainer *t, int ranks, uint64_t gen);
/* Load a format-1 checkpoint (its frame read into idx): every tensor whole
 * on every rank, whatever the number of ranks that wrote it. */
int hp_ckpt_load_whole(struct hp_trainer *t, const struct hp_ckfile *f, json_object *idx);

#endif
