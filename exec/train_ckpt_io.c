/* Checkpoint files: positioned I/O, the frame (train_ckpt_io.h), JSON bits. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "hpdlf/error.h"
#include "exec/train_ckpt_io.h"
#include "store/crc.h"

#define CK_MAGIC "HPDLFCK1"
#define CK_END "HPDLFEND"
#define CK_MAX_VERSION 2

int hp_ck_pwrite(const struct hp_ckfile *f, const void *buf, size_t len, uint64_t off)
{
	const unsigned char *p = buf;

	while (len) {
		ssize_t w = pwrite(f->fd, p, len, (off_t)off);
		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0)
			return hp_error(-errno, "%s: write failed: %s", f->path, strerror(errno));
		p += w;
		len -= (size_t)w;
		off += (uint64_t)w;
	}
	return 0;
}

int hp_ck_pread(const struct hp_ckfile *f, void *buf, size_t len, uint64_t off)
{
	unsigned char *p = buf;

	while (len) {
		ssize_t r = pread(f->fd, p, len, (off_t)off);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return r < 0 ? hp_error(-errno, "%s: read failed: %s", f->path, strerror(errno))
				     : hp_error(HP_ECORRUPT, "%s: truncated checkpoint", f->path);
		p += r;
		len -= (size_t)r;
		off += (uint64_t)r;
	}
	return 0;
}

uint32_t hp_ck_crc_chain(uint32_t acc, uint32_t piece)
{
	uint32_t two[2] = { acc, piece };

	return hs_crc32c(two, sizeof two);
}

int hp_ck_fsync_dir(const char *dir)
{
	int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC), rc = 0;

	if (fd < 0)
		return hp_error(-errno, "%s: %s", dir, strerror(errno));
	if (fsync(fd) < 0 && errno != EINVAL)
		rc = hp_error(-errno, "%s: fsync: %s", dir, strerror(errno));
	close(fd);
	return rc;
}

int hp_ck_write_frame(const struct hp_ckfile *f, int version, int kind, uint64_t off, json_object *idx,
		      uint32_t *icrc)
{
	unsigned char head[HP_CK_ALIGN] = CK_MAGIC, tail[32] = CK_END;
	const char *s = json_object_to_json_string_ext(idx, JSON_C_TO_STRING_PLAIN);
	uint64_t len = strlen(s);
	int rc;

	*icrc = hs_crc32c(s, len);
	head[8] = (unsigned char)version;
	head[9] = (unsigned char)kind;
	memcpy(tail + 8, &off, 8);
	memcpy(tail + 16, &len, 8);
	memcpy(tail + 24, icrc, 4);
	tail[28] = (unsigned char)version;
	if ((rc = hp_ck_pwrite(f, s, len, off)) < 0 || (rc = hp_ck_pwrite(f, tail, sizeof tail, off + len)) < 0)
		return rc;
	return hp_ck_pwrite(f, head, sizeof head, 0); /* the magic last */
}

/* Every byte of the header page and the trailer is defined: anything else
 * is a damaged or foreign file. */
static int check_frame(const struct hp_ckfile *f, const unsigned char *head, const unsigned char *tail)
{
	if (memcmp(head, CK_MAGIC, 8) || memcmp(tail, CK_END, 8))
		return hp_error(HP_EFORMAT, "%s: not a complete hpdlf checkpoint", f->path);
	if (head[8] != tail[28] || head[8] < 1 || head[8] > CK_MAX_VERSION)
		return hp_error(HP_EFORMAT, "%s: checkpoint format %d/%d, this build reads 1 and 2", f->path, head[8],
				tail[28]);
	if (head[8] == 1 ? head[9] != HP_CK_WHOLE : head[9] != HP_CK_COMMIT && head[9] != HP_CK_PART)
		return hp_error(HP_EFORMAT, "%s: checkpoint header byte 9 is %d, no kind of format %d", f->path,
				head[9], head[8]);
	for (size_t i = 10; i < HP_CK_ALIGN; i++)
		if (head[i])
			return hp_error(HP_EFORMAT, "%s: checkpoint header byte %zu is %d, not 0", f->path, i, head[i]);
	for (size_t i = 29; i < 32; i++)
		if (tail[i])
			return hp_error(HP_EFORMAT, "%s: checkpoint trailer byte %zu is %d, not 0", f->path, i, tail[i]);
	return 0;
}

static int parse_index(const struct hp_ckfile *f, uint64_t off, uint64_t len, uint32_t crc, json_object **out)
{
	char *s = calloc(1, len + 1);
	int rc;

	if (!s)
		return hp_error(-ENOMEM, "out of memory");
	rc = hp_ck_pread(f, s, len, off);
	if (rc == 0 && hs_crc32c(s, len) != crc)
		rc = hp_error(HP_ECORRUPT, "%s: checkpoint index checksum mismatch", f->path);
	if (rc == 0 && !(*out = json_tokener_parse(s)))
		rc = hp_error(HP_ECORRUPT, "%s: checkpoint index is not JSON", f->path);
	free(s);
	return rc;
}

int hp_ck_read_frame(const struct hp_ckfile *f, int *version, int *kind, json_object **idx, uint32_t *icrc,
		     uint64_t *size)
{
	unsigned char head[HP_CK_ALIGN], tail[32];
	off_t end = lseek(f->fd, 0, SEEK_END);
	uint64_t off, len;
	int rc;

	*idx = NULL;
	if (end < HP_CK_ALIGN + 32)
		return hp_error(HP_ECORRUPT, "%s: truncated checkpoint", f->path);
	if ((rc = hp_ck_pread(f, head, sizeof head, 0)) < 0 ||
	    (rc = hp_ck_pread(f, tail, 32, (uint64_t)end - 32)) < 0 || (rc = check_frame(f, head, tail)) < 0)
		return rc;
	memcpy(&off, tail + 8, 8);
	memcpy(&len, tail + 16, 8);
	memcpy(icrc, tail + 24, 4);
	if (off + len + 32 != (uint64_t)end || len > (256u << 20))
		return hp_error(HP_ECORRUPT, "%s: torn checkpoint (index does not end the file)", f->path);
	if ((rc = parse_index(f, off, len, *icrc, idx)) < 0)
		return rc;
	*version = head[8];
	*kind = head[9];
	*size = (uint64_t)end;
	if (hp_ck_jint(*idx, "format") != *version) {
		rc = hp_error(HP_EFORMAT, "%s: checkpoint index format %lld in a format %d frame", f->path,
			      (long long)hp_ck_jint(*idx, "format"), *version);
		json_object_put(*idx);
		*idx = NULL;
	}
	return rc;
}

int64_t hp_ck_jint(json_object *o, const char *key)
{
	json_object *v;

	return o && json_object_object_get_ex(o, key, &v) ? json_object_get_int64(v) : -1;
}

const char *hp_ck_jstr(json_object *o, const char *key)
{
	json_object *v;

	return o && json_object_object_get_ex(o, key, &v) && json_object_is_type(v, json_type_string)
		       ? json_object_get_string(v)
		       : NULL;
}

json_object *hp_ck_shape_json(const struct hp_shape *s)
{
	json_object *a = json_object_new_array();

	for (int i = 0; i < s->rank; i++)
		json_object_array_add(a, json_object_new_int64(s->dims[i]));
	return a;
}
