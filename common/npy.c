/* NumPy .npy files (format 1.0-3.0, little-endian, C order). */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/file.h"
#include "hpdlf/error.h"
#include "hpdlf/tensor.h"

#define NPY_HDR_MAX (1 << 20)

static const struct {
	const char *descr;
	enum hp_dtype dtype;
} npy_types[] = {
	{ "<f4", HP_F32 }, { "<f8", HP_F64 }, { "<f2", HP_F16 }, { "|u1", HP_U8 }, { "|i1", HP_I8 },
	{ "<u2", HP_U16 }, { "<i2", HP_I16 }, { "<i4", HP_I32 }, { "<i8", HP_I64 }, { "|b1", HP_BOOL },
	{ "<u4", HP_U32 }, { "<u8", HP_U64 },
};

static int read_full(int fd, void *buf, size_t len, uint64_t off)
{
	char *p = buf;

	while (len) {
		ssize_t r = pread(fd, p, len, (off_t)off);
		if (r < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (r == 0)
			return -EIO;
		p += r;
		len -= (size_t)r;
		off += (uint64_t)r;
	}
	return 0;
}

/* Find "'key':" in the header dict and return a pointer past it. */
static const char *dict_value(const char *hdr, const char *key)
{
	char pat[32];
	const char *p;

	snprintf(pat, sizeof pat, "'%s'", key);
	p = strstr(hdr, pat);
	if (!p)
		return NULL;
	p += strlen(pat);
	while (*p == ' ')
		p++;
	if (*p != ':')
		return NULL;
	p++;
	while (*p == ' ')
		p++;
	return p;
}

static int parse_header(const char *path, const char *hdr, enum hp_dtype *dtype, struct hp_shape *shape)
{
	const char *d = dict_value(hdr, "descr"), *f = dict_value(hdr, "fortran_order"),
		   *s = dict_value(hdr, "shape");
	char descr[16] = "";
	size_t i;

	if (!d || !f || !s || *d != '\'' || *s != '(')
		return hp_error(HP_EDATA, "%s: malformed .npy header", path);
	for (i = 0; d[1 + i] && d[1 + i] != '\'' && i + 1 < sizeof descr; i++)
		descr[i] = d[1 + i];
	if (!strncmp(f, "True", 4))
		return hp_error(HP_EDATA, "%s: Fortran-order arrays are not supported (save with np.ascontiguousarray)", path);
	if (descr[0] == '=')
		descr[0] = '<';
	*dtype = HP_UNDEFINED;
	for (i = 0; i < sizeof npy_types / sizeof npy_types[0]; i++)
		if (!strcmp(descr, npy_types[i].descr) ||
		    (descr[0] == '<' && npy_types[i].descr[0] == '|' && !strcmp(descr + 1, npy_types[i].descr + 1)))
			*dtype = npy_types[i].dtype;
	if (*dtype == HP_UNDEFINED)
		return hp_error(HP_EDATA, "%s: unsupported .npy dtype '%s'", path, descr);
	memset(shape, 0, sizeof *shape);
	for (s++;;) {
		char *end;
		long long v;

		while (*s == ' ' || *s == ',')
			s++;
		if (*s == ')')
			break;
		if (shape->rank == HP_MAX_RANK)
			return hp_error(HP_EDATA, "%s: more than %d dimensions", path, HP_MAX_RANK);
		errno = 0;
		v = strtoll(s, &end, 10);
		if (end == s || errno || v < 0)
			return hp_error(HP_EDATA, "%s: malformed shape in .npy header", path);
		shape->dims[shape->rank++] = v;
		s = end;
		while (*s == 'L')
			s++;
	}
	return 0;
}

static int npy_open(const char *path, int *fd, enum hp_dtype *dtype, struct hp_shape *shape,
		    uint64_t *data_off, uint64_t *file_size)
{
	unsigned char pre[12];
	uint64_t hlen, hoff;
	char *hdr;
	off_t size;
	int rc;

	struct stat st;
	rc = hp_open_regular(path, NULL, fd, &st);
	if (rc < 0)
		return rc;
	size = st.st_size;
	if (size < 10 || read_full(*fd, pre, size >= 12 ? 12 : 10, 0) < 0 ||
	    memcmp(pre, "\x93NUMPY", 6)) {
		rc = hp_error(HP_EDATA, "%s: not a .npy file", path);
		goto fail;
	}
	if (pre[6] == 1) {
		hlen = pre[8] | (uint64_t)pre[9] << 8;
		hoff = 10;
	} else if (pre[6] == 2 || pre[6] == 3) {
		hlen = pre[8] | (uint64_t)pre[9] << 8 | (uint64_t)pre[10] << 16 | (uint64_t)pre[11] << 24;
		hoff = 12;
	} else {
		rc = hp_error(HP_EDATA, "%s: unsupported .npy version %d", path, pre[6]);
		goto fail;
	}
	if (hlen > NPY_HDR_MAX || hoff + hlen > (uint64_t)size) {
		rc = hp_error(HP_EDATA, "%s: truncated .npy header", path);
		goto fail;
	}
	hdr = malloc(hlen + 1);
	if (!hdr) {
		rc = -ENOMEM;
		goto fail;
	}
	rc = read_full(*fd, hdr, hlen, hoff);
	hdr[hlen] = 0;
	if (rc == 0)
		rc = parse_header(path, hdr, dtype, shape);
	free(hdr);
	if (rc == 0 && hp_shape_bytes(shape, *dtype) == -2) {
		char sh[128];
		rc = hp_error(HP_EDATA, "%s: header shape %s would exceed %" PRIu64 " TiB", path,
			      hp_shape_str(shape, sh, sizeof sh), HP_TENSOR_MAX_BYTES >> 40);
	}
	if (rc < 0)
		goto fail;
	*data_off = hoff + hlen;
	*file_size = (uint64_t)size;
	return 0;
fail:
	close(*fd);
	*fd = -1;
	return rc;
}

int hp_npy_header(const char *path, enum hp_dtype *dtype, struct hp_shape *shape, uint64_t *data_offset)
{
	uint64_t size;
	int fd, rc;

	rc = npy_open(path, &fd, dtype, shape, data_offset, &size);
	if (rc < 0)
		return rc;
	close(fd);
	struct hp_tensor t = { .dtype = *dtype, .shape = *shape };
	if (*data_offset + hp_tensor_bytes(&t) > size)
		return hp_error(HP_EDATA, "%s: truncated: header promises %zu data bytes, file has %" PRIu64,
				path, hp_tensor_bytes(&t), size - *data_offset);
	return 0;
}

int hp_npy_read(const char *path, struct hp_tensor *t)
{
	uint64_t off, size;
	enum hp_dtype dtype;
	struct hp_shape shape;
	int fd, rc;

	memset(t, 0, sizeof *t);
	rc = npy_open(path, &fd, &dtype, &shape, &off, &size);
	if (rc < 0)
		return rc;
	/* the file must hold the bytes before any are allocated: a header
	 * promising 2^40 floats in a file of 100 bytes is refused at once,
	 * not after zeroing a terabyte (found by fuzz_struct) */
	struct hp_tensor want = { .dtype = dtype, .shape = shape };
	uint64_t need = hp_tensor_bytes(&want);
	if (need != SIZE_MAX && (off > size || need > size - off)) { /* SIZE_MAX: alloc says why */
		rc = hp_error(HP_EDATA, "%s: truncated: header promises %" PRIu64 " data bytes, file has %" PRIu64, path,
			      need, off > size ? 0 : size - off);
		goto out;
	}
	rc = hp_tensor_alloc(t, dtype, &shape);
	if (rc < 0)
		goto out;
	rc = read_full(fd, t->data, hp_tensor_bytes(t), off);
	if (rc < 0) {
		hp_error(rc, "%s: read failed: %s", path, hp_strerror(rc));
		hp_tensor_free(t);
	}
out:
	close(fd);
	return rc;
}

int hp_npy_write(const char *path, const struct hp_tensor *t)
{
	char hdr[256 + HP_MAX_RANK * 24], dims[HP_MAX_RANK * 24] = "";
	const char *descr = NULL;
	size_t o = 0, hl;
	FILE *f;

	for (size_t i = 0; i < sizeof npy_types / sizeof npy_types[0]; i++)
		if (npy_types[i].dtype == t->dtype)
			descr = npy_types[i].descr;
	if (!descr)
		return hp_error(HP_EUSAGE, "%s: cannot write dtype %s to .npy", path, hp_dtype_name(t->dtype));
	for (int i = 0; i < t->shape.rank; i++)
		o += (size_t)snprintf(dims + o, sizeof dims - o, "%" PRId64 ",%s", t->shape.dims[i],
				      i + 1 < t->shape.rank ? " " : "");
	if (t->shape.rank > 1)
		dims[o - 1] = 0; /* (2, 3) not (2, 3,) */
	hl = (size_t)snprintf(hdr + 10, sizeof hdr - 10, "{'descr': '%s', 'fortran_order': False, 'shape': (%s), }",
			      descr, dims);
	while ((10 + hl + 1) % 64)
		hdr[10 + hl++] = ' ';
	hdr[10 + hl++] = '\n';
	memcpy(hdr, "\x93NUMPY\x01\x00", 8);
	hdr[8] = (char)(hl & 0xff);
	hdr[9] = (char)(hl >> 8);
	f = fopen(path, "wb");
	if (!f)
		return hp_error(-errno, "%s: %s", path, strerror(errno));
	if (fwrite(hdr, 1, 10 + hl, f) != 10 + hl ||
	    fwrite(t->data, 1, hp_tensor_bytes(t), f) != hp_tensor_bytes(t)) {
		int e = errno ? errno : EIO;
		fclose(f);
		return hp_error(-e, "%s: write failed: %s", path, strerror(e));
	}
	if (fclose(f) != 0)
		return hp_error(-errno, "%s: write failed: %s", path, strerror(errno));
	return 0;
}
