/* dtype and shape helpers, aligned tensor allocation. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hpdlf/error.h"
#include "hpdlf/tensor.h"

size_t hp_dtype_size(enum hp_dtype t)
{
	switch (t) {
	case HP_F32: case HP_I32: case HP_U32: return 4;
	case HP_U8: case HP_I8: case HP_BOOL: return 1;
	case HP_U16: case HP_I16: case HP_F16: case HP_BF16: return 2;
	case HP_I64: case HP_U64: case HP_F64: return 8;
	default: return 0;
	}
}

const char *hp_dtype_name(enum hp_dtype t)
{
	switch (t) {
	case HP_F32: return "float32";
	case HP_U8: return "uint8";
	case HP_I8: return "int8";
	case HP_U16: return "uint16";
	case HP_I16: return "int16";
	case HP_I32: return "int32";
	case HP_I64: return "int64";
	case HP_STRING: return "string";
	case HP_BOOL: return "bool";
	case HP_F16: return "float16";
	case HP_F64: return "float64";
	case HP_U32: return "uint32";
	case HP_U64: return "uint64";
	case HP_BF16: return "bfloat16";
	default: return "undefined";
	}
}

int64_t hp_shape_numel(const struct hp_shape *s)
{
	int64_t n = 1;
	int over = 0;

	for (int i = 0; i < s->rank; i++) {
		if (s->dims[i] < 0)
			return -1;
		if (s->dims[i] == 0)
			return 0;
		over |= __builtin_mul_overflow(n, s->dims[i], &n);
	}
	return over ? -1 : n;
}

int hp_shape_equal(const struct hp_shape *a, const struct hp_shape *b)
{
	if (a->rank != b->rank)
		return 0;
	for (int i = 0; i < a->rank; i++)
		if (a->dims[i] != b->dims[i])
			return 0;
	return 1;
}

char *hp_shape_str(const struct hp_shape *s, char *buf, size_t len)
{
	size_t o = 0;

	if (!len)
		return buf;
	buf[0] = 0;
	if (s->rank == 0) {
		snprintf(buf, len, "scalar");
		return buf;
	}
	for (int i = 0; i < s->rank && o < len; i++) {
		int w = s->dims[i] < 0 ? snprintf(buf + o, len - o, "%s?", i ? "x" : "")
				       : snprintf(buf + o, len - o, "%s%" PRId64, i ? "x" : "", s->dims[i]);
		if (w < 0)
			break;
		o += (size_t)w;
	}
	return buf;
}

int hp_shape_parse(const char *text, struct hp_shape *s)
{
	const char *p = text;

	memset(s, 0, sizeof *s);
	if (!strcmp(text, "scalar"))
		return 0;
	for (;;) {
		char *end;
		long long v;

		if (s->rank == HP_MAX_RANK)
			return hp_error(HP_EUSAGE, "shape '%s': more than %d dims", text, HP_MAX_RANK);
		errno = 0;
		v = strtoll(p, &end, 10);
		if (end == p || errno || v < 0)
			return hp_error(HP_EUSAGE, "shape '%s': expected dims like 1x3x224x224", text);
		s->dims[s->rank++] = v;
		if (!*end)
			return 0;
		if (*end != 'x' && *end != ',')
			return hp_error(HP_EUSAGE, "shape '%s': expected dims like 1x3x224x224", text);
		p = end + 1;
	}
}

int64_t hp_shape_bytes(const struct hp_shape *s, enum hp_dtype dtype)
{
	uint64_t n = hp_dtype_size(dtype);
	int over = 0;

	if (!n || s->rank < 0)
		return -1;
	for (int i = 0; i < s->rank; i++)
		if (s->dims[i] < 0)
			return -1;
	for (int i = 0; i < s->rank; i++) {
		if (s->dims[i] == 0)
			return 0;
		over |= __builtin_mul_overflow(n, (uint64_t)s->dims[i], &n);
	}
	return over || n > HP_TENSOR_MAX_BYTES ? -2 : (int64_t)n;
}

size_t hp_tensor_bytes(const struct hp_tensor *t)
{
	int64_t n = hp_shape_bytes(&t->shape, t->dtype);

	return n == -2 ? SIZE_MAX : n < 0 ? 0 : (size_t)n;
}

int hp_tensor_alloc(struct hp_tensor *t, enum hp_dtype dtype, const struct hp_shape *shape)
{
	size_t bytes;

	t->dtype = dtype;
	t->shape = *shape;
	t->data = NULL;
	int64_t b = hp_shape_bytes(shape, dtype);
	if (b == -1)
		return hp_error(HP_EUSAGE, "cannot allocate a tensor of unknown shape or dtype");
	if (b < 0) {
		char s[128];
		return hp_error(HP_ESHAPE, "a %s tensor of shape %s would exceed %" PRIu64 " TiB", hp_dtype_name(dtype),
				hp_shape_str(shape, s, sizeof s), HP_TENSOR_MAX_BYTES >> 40);
	}
	bytes = (size_t)b;
	/* Round up so vectorized tails may read a full cache line. */
	t->data = aligned_alloc(64, (bytes + 63) / 64 * 64 + 64);
	if (!t->data)
		return hp_error(-ENOMEM, "out of memory allocating %zu bytes", bytes);
	memset(t->data, 0, bytes);
	return 0;
}

void hp_tensor_free(struct hp_tensor *t)
{
	if (!t)
		return;
	free(t->data);
	t->data = NULL;
}
