/* TensorProto import: dtype/shape checks, where the bytes are (embedded
 * raw_data, typed fields, external files) and hp_graph_read_init(). */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/file.h"
#include "hpdlf/error.h"
#include "onnx/import.h"
#include "onnx/wire.h"

int imp_dtype_supported(int32_t dtype)
{
	switch (dtype) {
	case HP_F32: case HP_F64: case HP_I64: case HP_I32: case HP_I8: case HP_U8: case HP_BOOL:
	case HP_F16: case HP_BF16: case HP_I16: case HP_U16: case HP_U32: case HP_U64:
		return 1;
	}
	return 0;
}

const char *imp_dtype_name(int32_t dtype)
{
	static const char *const names[] = {
		[0] = "undefined", [8] = "string", [14] = "complex64", [15] = "complex128",
	};

	if (dtype >= 0 && dtype < (int32_t)(sizeof names / sizeof names[0]) && names[dtype])
		return names[dtype];
	if (dtype > 0 && dtype <= HP_BF16)
		return hp_dtype_name((enum hp_dtype)dtype);
	return "unknown";
}

int imp_tensor_desc(struct imp *im, const Onnx__TensorProto *t, const char *what, struct hp_tensor *desc)
{
	uint64_t n = 1;

	memset(desc, 0, sizeof *desc);
	if (!t->has_data_type || t->data_type == 0)
		return hp_error(HP_EMODEL, "%s: %s has no data_type", im->g->path, what);
	if (t->n_dims > HP_MAX_RANK)
		return hp_error(HP_EUNSUPPORTED, "%s: %s has rank %zu, more than the %d supported", im->g->path, what,
				t->n_dims, HP_MAX_RANK);
	desc->dtype = (enum hp_dtype)t->data_type;
	desc->shape.rank = (int)t->n_dims;
	for (size_t i = 0; i < t->n_dims; i++) {
		if (t->dims[i] < 0)
			return hp_error(HP_EMODEL, "%s: %s has negative dim %" PRId64, im->g->path, what, t->dims[i]);
		desc->shape.dims[i] = t->dims[i];
		/* the product of the nonzero dims: an empty tensor with absurd
		 * dims is refused too (element counts must fit int64 whatever
		 * the order they are multiplied in) */
		if (t->dims[i] && n > IMP_TENSOR_MAX / (uint64_t)t->dims[i])
			n = IMP_TENSOR_MAX; /* saturate: checked below */
		else if (t->dims[i])
			n *= (uint64_t)t->dims[i];
	}
	if (n * 8 >= IMP_TENSOR_MAX)
		return hp_error(HP_EMODEL, "%s: %s is too large (%" PRIu64 "+ elements)", im->g->path, what, n);
	return 0;
}

static int is_digits(const char *s)
{
	if (!*s)
		return 0;
	for (; *s; s++)
		if (*s < '0' || *s > '9')
			return 0;
	return 1;
}

/* A relative path that stays inside the model's directory. */
static int check_location(struct imp *im, const char *loc, const char *what)
{
	const char *p = loc;

	if (!*loc)
		return hp_error(HP_EMODEL, "%s: %s: external data location is empty", im->g->path, what);
	if (loc[0] == '/')
		return hp_error(HP_EMODEL, "%s: %s: external data location '%s' is an absolute path (must be relative to the model's directory)",
				im->g->path, what, loc);
	while (*p) {
		size_t n = strcspn(p, "/");
		if (n == 2 && p[0] == '.' && p[1] == '.')
			return hp_error(HP_EMODEL, "%s: %s: external data location '%s' leaves the model's directory ('..')",
					im->g->path, what, loc);
		p += n;
		p += *p == '/';
	}
	return 0;
}

/* Same check after symlinks: realpath(file) must be under realpath(dir). */
static int check_real(struct imp *im, const char *path, const char *what)
{
	char *rd = realpath(im->dir, NULL), *rf = realpath(path, NULL);
	int rc = 0;

	if (!rd || !rf) {
		rc = hp_error(-errno, "%s: %s: external data file '%s': %s", im->g->path, what, path, strerror(errno));
	} else {
		size_t n = strlen(rd);
		if (strncmp(rf, rd, n) || (rf[n] != '/' && strcmp(rd, "/")))
			rc = hp_error(HP_EMODEL, "%s: %s: external data file '%s' resolves outside the model's directory",
				      im->g->path, what, path);
	}
	free(rd);
	free(rf);
	return rc;
}

/* Index of the external file in g->files, adding it (checked, sized) once. */
static int file_index(struct imp *im, const char *loc, const char *what)
{
	struct hp_graph *g = im->g;
	size_t n = strlen(im->dir) + strlen(loc) + 2;
	char *path = malloc(n);
	struct stat st;
	void *p, *q;
	int rc;

	if (!path)
		return hp_error(-ENOMEM, "out of memory");
	snprintf(path, n, "%s/%s", im->dir, loc);
	for (int i = 1; i < g->nfiles; i++)
		if (!strcmp(g->files[i], path)) {
			free(path);
			return i;
		}
	if (stat(path, &st) < 0) {
		rc = errno == ENOENT ? hp_error(-ENOENT, "%s: %s: external data file '%s' not found", g->path, what, path)
				     : hp_error(-errno, "%s: %s: external data file '%s': %s", g->path, what, path,
						strerror(errno));
		goto fail;
	}
	if (!S_ISREG(st.st_mode)) {
		rc = hp_error(HP_EMODEL, "%s: %s: external data '%s' is not a regular file", g->path, what, path);
		goto fail;
	}
	rc = check_real(im, path, what);
	if (rc < 0)
		goto fail;
	p = realloc(g->files, (size_t)(g->nfiles + 1) * sizeof *g->files);
	if (p)
		g->files = p;
	q = realloc(im->file_size, (size_t)(g->nfiles + 1) * sizeof *im->file_size);
	if (q)
		im->file_size = q;
	if (!p || !q) {
		rc = hp_error(-ENOMEM, "out of memory");
		goto fail;
	}
	g->files[g->nfiles] = path;
	im->file_size[g->nfiles] = (uint64_t)st.st_size;
	return g->nfiles++;
fail:
	free(path);
	return rc;
}

static int ext_number(struct imp *im, const char *what, const char *key, const char *val, uint64_t *out)
{
	errno = 0;
	if (!is_digits(val) || (*out = strtoull(val, NULL, 10), errno))
		return hp_error(HP_EMODEL, "%s: %s: external data %s '%s' is not a byte count", im->g->path, what, key,
				val);
	return 0;
}

static int external(struct imp *im, const Onnx__TensorProto *t, const char *what, uint64_t bytes,
		    struct hp_blob *blob)
{
	const char *loc = NULL;
	uint64_t off = 0, length = bytes;
	int rc, fi;

	for (size_t i = 0; i < t->n_external_data; i++) {
		const char *k = t->external_data[i]->key ? t->external_data[i]->key : "";
		const char *v = t->external_data[i]->value ? t->external_data[i]->value : "";
		rc = 0;
		if (!strcmp(k, "location"))
			loc = v;
		else if (!strcmp(k, "offset"))
			rc = ext_number(im, what, k, v, &off);
		else if (!strcmp(k, "length"))
			rc = ext_number(im, what, k, v, &length);
		if (rc < 0)
			return rc;
	}
	if (!loc)
		return hp_error(HP_EMODEL, "%s: %s: external data without a location", im->g->path, what);
	rc = check_location(im, loc, what);
	if (rc < 0)
		return rc;
	if (!im->dir)
		return hp_error(HP_EUSAGE, "%s: %s: external data '%s' but the model was loaded from memory without a base directory",
				im->g->path, what, loc);
	fi = file_index(im, loc, what);
	if (fi < 0)
		return fi;
	if (length != bytes)
		return hp_error(HP_EMODEL, "%s: %s: external data length %" PRIu64 " in '%s', but %s needs %" PRIu64 " bytes",
				im->g->path, what, length, im->g->files[fi], what, bytes);
	if (off > im->file_size[fi] || im->file_size[fi] - off < bytes)
		return hp_error(HP_EMODEL, "%s: %s: needs bytes %" PRIu64 "..%" PRIu64 " of '%s', which has only %" PRIu64,
				im->g->path, what, off, off + bytes, im->g->files[fi], im->file_size[fi]);
	*blob = (struct hp_blob){ .kind = HP_BLOB_FILE, .file = fi, .offset = off, .length = bytes };
	return 0;
}

static int read_full(int fd, void *buf, size_t len, uint64_t off)
{
	char *p = buf;

	while (len) {
		ssize_t r = pread(fd, p, len, (off_t)off);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return -errno;
		if (r == 0)
			return -EIO;
		p += r;
		len -= (size_t)r;
		off += (uint64_t)r;
	}
	return 0;
}

/* `what` names the tensor in errors ("initializer 'w'"). */
static int read_blob(const struct hp_graph *g, const char *what, const struct hp_blob *b, void *dst,
		     uint64_t bytes)
{
	const char *path = g->files[b->file];
	int fd, rc;

	if (b->length < bytes)
		return hp_error(HP_EMODEL, "%s: %s: '%s' holds %" PRIu64 " bytes of it, %" PRIu64 " needed", g->path,
				what, path, b->length, bytes);
	struct stat st;
	rc = hp_open_regular(path, NULL, &fd, &st);
	if (rc < 0)
		return hp_error_prefix(rc, "%s: %s", g->path, what);
	rc = read_full(fd, dst, (size_t)bytes, b->offset);
	close(fd);
	if (rc == -EIO)
		return hp_error(HP_EMODEL, "%s: %s: '%s' ends before byte %" PRIu64, g->path, what, path,
				b->offset + bytes);
	if (rc < 0)
		return hp_error(rc, "%s: %s: reading '%s': %s", g->path, what, path, strerror(-rc));
	return 0;
}

/* The typed field for the dtype holds one value per element. */
static int typed_count(struct imp *im, const Onnx__TensorProto *t, const char *what, const struct hp_tensor *d,
		       uint64_t numel)
{
	const char *field;
	size_t have;

	switch (d->dtype) {
	case HP_F32: field = "float_data"; have = t->n_float_data; break;
	case HP_F64: field = "double_data"; have = t->n_double_data; break;
	case HP_I64: field = "int64_data"; have = t->n_int64_data; break;
	default: field = "int32_data"; have = t->n_int32_data; break;
	}
	if (have != numel)
		return hp_error(HP_EMODEL, "%s: %s has %zu values in %s, expected %" PRIu64 " (%s)", im->g->path, what,
				have, field, numel, hp_dtype_name(d->dtype));
	return 0;
}

/* Typed fields to the dtype's raw little-endian layout (the host's). */
static void typed(const Onnx__TensorProto *t, const struct hp_tensor *d, uint64_t numel, void *dst)
{
	switch (d->dtype) {
	case HP_F32: memcpy(dst, t->float_data, numel * 4); break;
	case HP_F64: memcpy(dst, t->double_data, numel * 8); break;
	case HP_I64: memcpy(dst, t->int64_data, numel * 8); break;
	case HP_I32: memcpy(dst, t->int32_data, numel * 4); break;
	case HP_F16: case HP_BF16: /* their bits, one per int32_data entry */
		for (uint64_t i = 0; i < numel; i++)
			((uint16_t *)dst)[i] = (uint16_t)t->int32_data[i];
		break;
	default:
		for (uint64_t i = 0; i < numel; i++)
			((uint8_t *)dst)[i] = (uint8_t)t->int32_data[i];
	}
}

int imp_tensor_bytes(struct imp *im, const Onnx__TensorProto *t, const struct imp_raw *raw, const char *what,
		     const struct hp_tensor *desc, int may_defer, struct hp_blob *blob, void **data)
{
	uint64_t numel = (uint64_t)hp_shape_numel(&desc->shape), bytes = numel * hp_dtype_size(desc->dtype);
	int external_data = t->has_data_location && t->data_location == ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL;
	int rc = 0;

	*data = NULL;
	memset(blob, 0, sizeof *blob);
	if (external_data) {
		rc = external(im, t, what, bytes, blob);
		if (rc < 0)
			return rc;
	} else if (raw->present) {
		if (raw->len != bytes)
			return hp_error(HP_EMODEL, "%s: %s has %" PRIu64 " bytes of raw_data, expected %" PRIu64 " (%s, %" PRIu64 " elements)",
					im->g->path, what, raw->len, bytes, hp_dtype_name(desc->dtype), numel);
		if (!raw->p)
			*blob = (struct hp_blob){ .kind = HP_BLOB_FILE, .file = 0, .offset = raw->off, .length = bytes };
	}
	if (blob->kind == HP_BLOB_FILE && may_defer && bytes > IMP_INLINE_MAX)
		return 0;
	if (!external_data && !raw->present && (rc = typed_count(im, t, what, desc, numel)) < 0)
		return rc; /* before allocating: the declared shape is not trusted */
	if (bytes > SIZE_MAX - 64 || !(*data = malloc(bytes ? (size_t)bytes : 1)))
		return hp_error(-ENOMEM, "%s: %s: out of memory (%" PRIu64 " bytes)", im->g->path, what, bytes);
	if (blob->kind == HP_BLOB_FILE && blob->file > 0)
		rc = read_blob(im->g, what, blob, *data, bytes);
	else if (raw->present && raw->p && bytes)
		memcpy(*data, raw->p, (size_t)bytes);
	else if (raw->present && bytes)
		rc = pb_src_read(&im->src, raw->off, *data, (size_t)bytes) < 0 ? imp_src_error(im, -2, what) : 0;
	else if (!raw->present && numel)
		typed(t, desc, numel, *data);
	if (rc < 0) {
		free(*data);
		*data = NULL;
		return rc;
	}
	*blob = (struct hp_blob){ .kind = HP_BLOB_MEMORY, .length = bytes };
	return 0;
}

int imp_tensor_load(struct imp *im, const Onnx__TensorProto *t, const struct imp_raw *raw, const char *what,
		    struct hp_tensor *out)
{
	struct hp_blob blob;
	int rc = imp_tensor_desc(im, t, what, out);

	if (rc < 0)
		return rc;
	if (!imp_dtype_supported(out->dtype))
		return hp_error(HP_EUNSUPPORTED, "%s: %s has dtype %s, not supported (" IMP_SUPPORTED_LIST ")", im->g->path,
				what, imp_dtype_name(out->dtype));
	return imp_tensor_bytes(im, t, raw, what, out, 0, &blob, &out->data);
}

static int add_initializer(struct imp *im, const Onnx__TensorProto *t, const struct imp_raw *raw)
{
	char what[300];
	struct hp_tensor desc;
	struct hp_value *v;
	struct hp_blob blob;
	void *data = NULL;
	int rc, idx;

	if (!t->name || !t->name[0])
		return hp_error(HP_EMODEL, "%s: an initializer has no name", im->g->path);
	snprintf(what, sizeof what, "initializer '%s'", t->name);
	rc = imp_tensor_desc(im, t, what, &desc);
	if (rc < 0)
		return rc;
	memset(&blob, 0, sizeof blob);
	/* unsupported dtypes are refused only if a node uses them (import.c) */
	if (imp_dtype_supported(desc.dtype)) {
		rc = imp_tensor_bytes(im, t, raw, what, &desc, 1, &blob, &data);
		if (rc < 0)
			return rc;
	}
	idx = imp_add_value(im, t->name, HP_VALUE_INITIALIZER, desc.dtype, &desc.shape);
	if (idx < 0) {
		free(data);
		return idx;
	}
	v = &im->g->values[idx];
	v->src = blob;
	v->data = data;
	/* half precision trains as float32 master weights (exec/autodiff_half.c) */
	v->trainable = desc.dtype == HP_F32 || desc.dtype == HP_F16 || desc.dtype == HP_BF16;
	return 0;
}

int imp_initializer(struct imp *im, uint64_t off, uint64_t len)
{
	struct pb_buf tb = { 0 };
	struct pb_sfield f;
	struct imp_raw raw = { 0 };
	Onnx__TensorProto *t = NULL;
	uint64_t pos = off;
	int rc;

	while ((rc = pb_src_next(&im->src, &pos, off + len, &f)) > 0) {
		if (f.num == 9 && f.wt == PB_LEN) /* raw_data: the last one wins, as in protobuf */
			raw = (struct imp_raw){ .present = 1, .off = f.off, .len = f.len,
						.p = im->src.fd < 0 ? im->src.mem + f.off : NULL };
		else if (f.num != 12 && (rc = pb_src_append(&im->src, f.start, f.next - f.start, &tb)) < 0)
			break; /* everything else but doc_string is small: read it */
	}
	if (rc == 0 && !(t = onnx__tensor_proto__unpack(NULL, tb.len, tb.p ? tb.p : (const uint8_t *)"")))
		rc = -1;
	pb_buf_free(&tb);
	if (rc < 0)
		return imp_src_error(im, rc, "initializer");
	rc = add_initializer(im, t, &raw);
	onnx__tensor_proto__free_unpacked(t, NULL);
	return rc;
}

int hp_graph_read_init(const struct hp_graph *g, int value, void *dst)
{
	const struct hp_value *v;
	struct hp_tensor desc;
	char what[300];
	uint64_t bytes;

	if (!g || value < 0 || value >= g->nvalues || !dst)
		return hp_error(HP_EUSAGE, "hp_graph_read_init: bad value index %d", value);
	v = &g->values[value];
	if (!imp_dtype_supported(v->dtype))
		return hp_error(HP_EUNSUPPORTED, "%s: value '%s' has dtype %s, not supported (" IMP_SUPPORTED_LIST ")",
				g->path, v->name, imp_dtype_name(v->dtype));
	desc = (struct hp_tensor){ .dtype = v->dtype, .shape = v->shape };
	if (hp_shape_numel(&v->shape) < 0)
		return hp_error(HP_EUSAGE, "%s: value '%s' has no concrete shape", g->path, v->name);
	bytes = hp_tensor_bytes(&desc);
	if (v->data) {
		memcpy(dst, v->data, (size_t)bytes);
		return 0;
	}
	snprintf(what, sizeof what, "initializer '%s'", v->name);
	if (v->src.kind == HP_BLOB_FILE && v->src.file >= 0 && v->src.file < g->nfiles)
		return read_blob(g, what, &v->src, dst, bytes);
	return hp_error(HP_EUSAGE, "%s: value '%s' has no stored bytes", g->path, v->name);
}
