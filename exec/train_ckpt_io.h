/* Checkpoint files (internal to exec/train_ckpt*.c): positioned I/O that
 * names the file in its errors, and the frame every checkpoint file has.
 *
 * Frame: a 4096-byte header page ("HPDLFCK1", the format version at byte 8,
 * the kind at byte 9, zeros), the data, a JSON index, then a 32-byte
 * trailer ("HPDLFEND", index offset, index length, crc32c of the index,
 * the version at byte 28, zeros).  The header is written last, so a file
 * without its magic was never finished; every other header and trailer
 * byte is defined, so a damaged or foreign file is refused, never guessed.
 *
 * Version 1 (one file, DIR/checkpoint.hpck, the tensors whole): kind 0.
 * Version 2: DIR/checkpoint.hpck is the commit record (kind 1, no data,
 * the index names the parts) and each rank's part (kind 2) holds its
 * slices (exec/shard.h) of every state tensor. */
#ifndef HPDLF_EXEC_TRAIN_CKPT_IO_H
#define HPDLF_EXEC_TRAIN_CKPT_IO_H

#include <stddef.h>
#include <stdint.h>

#include <json-c/json.h>

#include "hpdlf/tensor.h"

#define HP_CK_ALIGN 4096
#define HP_CK_PIECE (4u << 20)

enum { HP_CK_WHOLE = 0, HP_CK_COMMIT = 1, HP_CK_PART = 2 };

struct hp_ckfile {
	int fd;
	const char *path;
};

int hp_ck_pwrite(const struct hp_ckfile *f, const void *buf, size_t len, uint64_t off);
int hp_ck_pread(const struct hp_ckfile *f, void *buf, size_t len, uint64_t off);
/* The checksum of a sequence of pieces: crc32c of (acc, crc of the piece). */
uint32_t hp_ck_crc_chain(uint32_t acc, uint32_t piece);
int hp_ck_fsync_dir(const char *dir);
/* Index idx at off (past the data), the trailer, then the header page of
 * `version` and `kind`; *icrc gets the index's crc32c. */
int hp_ck_write_frame(const struct hp_ckfile *f, int version, int kind, uint64_t off, json_object *idx,
		      uint32_t *icrc);
/* Check the frame of f and parse its index (version 1 or 2; the index's
 * "format" must be the version).  *size: the file's length. */
int hp_ck_read_frame(const struct hp_ckfile *f, int *version, int *kind, json_object **idx, uint32_t *icrc,
		     uint64_t *size);
/* o[key] as an integer; -1 when absent. */
int64_t hp_ck_jint(json_object *o, const char *key);
const char *hp_ck_jstr(json_object *o, const char *key);
json_object *hp_ck_shape_json(const struct hp_shape *s);

#endif
