/* Case generator of the structure-aware fuzzer (fuzz_struct.h): ONNX
 * models written with a minimal protobuf writer (field numbers of
 * onnx.proto), --shape texts and .npy files, all from a case's bytes. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_struct.h"

uint8_t fz_byte(struct fz_rd *r)
{
	return r->at < r->n ? r->p[r->at++] : 0;
}

int64_t fz_int(struct fz_rd *r)
{
	static const int64_t ext[] = {
		0, 1, -1, 2, 3, -2, 7, 16, 255, 65536, INT32_MAX, (int64_t)1 << 31, -((int64_t)1 << 31),
		(int64_t)1 << 32, (int64_t)1 << 40, (int64_t)1 << 56, (int64_t)1 << 62, INT64_MAX, INT64_MAX - 1,
		INT64_MIN, INT64_MIN + 1, -((int64_t)1 << 62),
	};
	uint8_t b = fz_byte(r);

	if (b < 205)
		return (int64_t)(b % 7) - 2;
	return ext[fz_byte(r) % (sizeof ext / sizeof *ext)];
}

/* ---- protobuf writer ---- */

static void put(struct fz_buf *b, const void *p, size_t n)
{
	if (b->n + n > b->cap) {
		size_t cap = (b->n + n) * 2 + 64;
		uint8_t *q = realloc(b->p, cap);
		if (!q)
			abort();
		b->p = q;
		b->cap = cap;
	}
	if (n)
		memcpy(b->p + b->n, p, n);
	b->n += n;
}

static void varint(struct fz_buf *b, uint64_t v)
{
	uint8_t c;

	while (v >= 0x80) {
		c = (uint8_t)(v | 0x80);
		put(b, &c, 1);
		v >>= 7;
	}
	c = (uint8_t)v;
	put(b, &c, 1);
}

static void f_varint(struct fz_buf *b, int field, uint64_t v)
{
	varint(b, (uint64_t)field << 3);
	varint(b, v);
}

static void f_bytes(struct fz_buf *b, int field, const void *p, size_t n)
{
	varint(b, (uint64_t)field << 3 | 2);
	varint(b, n);
	put(b, p, n);
}

static void f_str(struct fz_buf *b, int field, const char *s)
{
	f_bytes(b, field, s, strlen(s));
}

/* Embed message m as field `field` of b, and free m. */
static void f_msg(struct fz_buf *b, int field, struct fz_buf *m)
{
	f_bytes(b, field, m->p, m->n);
	free(m->p);
	memset(m, 0, sizeof *m);
}

/* ---- ONNX pieces (TensorProto, AttributeProto, ValueInfoProto) ---- */

static void tensor_i64(struct fz_buf *t, const char *name, const int64_t *v, int n, int scalar)
{
	if (!scalar)
		f_varint(t, 1, (uint64_t)n);
	f_varint(t, 2, 7); /* INT64 */
	f_str(t, 8, name);
	f_bytes(t, 9, v, (size_t)n * 8);
}

/* A float weight: dims drawn, bytes for them when few (or a few short). */
static void tensor_f32(struct fz_rd *r, struct fz_buf *t, const char *name, int rank)
{
	int64_t numel = 1;
	int over = 0;

	for (int i = 0; i < rank; i++) {
		uint8_t b = fz_byte(r);
		int64_t d = b < 220 ? 1 + b % 3 : fz_int(r);
		f_varint(t, 1, (uint64_t)d);
		over |= d < 0 || __builtin_mul_overflow(numel, d, &numel);
	}
	f_varint(t, 2, 1); /* FLOAT */
	f_str(t, 8, name);
	size_t bytes = !over && numel <= 4096 ? (size_t)numel * 4 : 16;
	if (fz_byte(r) < 16 && bytes >= 4)
		bytes -= 4; /* a payload shorter than its shape */
	float *w = calloc(bytes / 4 + 1, 4);
	for (size_t k = 0; w && k < bytes / 4; k++)
		w[k] = (float)((int)(k % 7) - 3) / 8.0f;
	f_bytes(t, 9, w, bytes);
	free(w);
}

static int int_list(struct fz_rd *r, int64_t *v)
{
	int n = fz_byte(r) % 9;

	for (int i = 0; i < n; i++)
		v[i] = fz_int(r);
	return n;
}

static void attr(struct fz_rd *r, struct fz_buf *node, const char *name, int one)
{
	struct fz_buf a = { 0 };
	int64_t v[8];

	f_str(&a, 1, name);
	if (one) {
		f_varint(&a, 3, (uint64_t)fz_int(r));
		f_varint(&a, 20, 2); /* INT */
	} else {
		int n = int_list(r, v);
		for (int i = 0; i < n; i++)
			f_varint(&a, 8, (uint64_t)v[i]);
		f_varint(&a, 20, 7); /* INTS */
	}
	f_msg(node, 5, &a);
}

/* ValueInfoProto of a tensor: elem type, dims (rank < 0: no shape; a dim
 * of INT64_MIN: symbolic). */
static void value_info(struct fz_buf *g, int field, const char *name, int elem, const int64_t *dims, int rank)
{
	struct fz_buf shape = { 0 }, tt = { 0 }, ty = { 0 }, vi = { 0 };

	for (int i = 0; i < rank; i++) {
		struct fz_buf d = { 0 };
		if (dims[i] == INT64_MIN)
			f_str(&d, 2, "N");
		else
			f_varint(&d, 1, (uint64_t)dims[i]);
		f_msg(&shape, 1, &d);
	}
	f_varint(&tt, 1, (uint64_t)elem);
	if (rank >= 0)
		f_msg(&tt, 2, &shape);
	f_msg(&ty, 1, &tt);
	f_str(&vi, 1, name);
	f_msg(&vi, 2, &ty);
	f_msg(g, field, &vi);
}

/* ---- models ---- */

struct recipe {
	const char *op;
	const char *extra;      /* per extra input: i int64 list, s int64 scalar, f float weight, x x again */
	int use_x, nout;
	const char *attrs;      /* names; '=' before one: a single int */
};

static const struct recipe recipes[] = {
	{ "Reshape", "i", 1, 1, "" }, { "Expand", "i", 1, 1, "" }, { "Tile", "i", 1, 1, "" },
	{ "Pad", "i", 1, 1, "" }, { "Slice", "iiii", 1, 1, "" }, { "ConstantOfShape", "i", 0, 1, "" },
	{ "Range", "sss", 0, 1, "" }, { "Conv", "f", 1, 1, "pads strides dilations kernel_shape =group" },
	{ "ConvTranspose", "f", 1, 1, "pads strides output_padding dilations =group" },
	{ "MaxPool", "", 1, 1, "kernel_shape pads strides dilations =ceil_mode" },
	{ "AveragePool", "", 1, 1, "kernel_shape pads strides =ceil_mode =count_include_pad" },
	{ "Gather", "i", 1, 1, "=axis" }, { "Transpose", "", 1, 1, "perm" }, { "Flatten", "", 1, 1, "=axis" },
	{ "Unsqueeze", "i", 1, 1, "" }, { "Squeeze", "i", 1, 1, "" }, { "ReduceSum", "i", 1, 1, "=keepdims" },
	{ "Concat", "x", 1, 1, "=axis" }, { "Split", "i", 1, 2, "=axis" }, { "TopK", "i", 1, 2, "=axis" },
	{ "MatMul", "f", 1, 1, "" }, { "Gemm", "f", 1, 1, "=transA =transB" }, { "Softmax", "", 1, 1, "=axis" },
	{ "CumSum", "s", 1, 1, "" }, { "DepthToSpace", "", 1, 1, "=blocksize" },
	{ "SpaceToDepth", "", 1, 1, "=blocksize" }, { "ReduceMean", "", 1, 1, "axes =keepdims" },
	{ "ArgMax", "", 1, 1, "=axis =keepdims" }, { "GlobalAveragePool", "", 1, 1, "" },
	{ "Shape", "", 1, 1, "=start =end" }, { "Trilu", "s", 1, 1, "=upper" },
};

/* Extra input k: an initializer, or (int64 ones, sometimes) a Constant node. */
static void extra_input(struct fz_rd *r, struct fz_buf *g, char kind, const char *name, int xrank)
{
	struct fz_buf t = { 0 };
	int64_t v[8];

	if (kind == 'f') {
		tensor_f32(r, &t, name, fz_byte(r) < 200 ? xrank : 1 + fz_byte(r) % 4);
		f_msg(g, 5, &t);
		return;
	}
	int n = kind == 's' ? 1 : int_list(r, v);
	if (kind == 's')
		v[0] = fz_int(r);
	tensor_i64(&t, name, v, n, kind == 's');
	if (fz_byte(r) < 192) {
		f_msg(g, 5, &t); /* initializer */
		return;
	}
	struct fz_buf node = { 0 }, a = { 0 };
	f_str(&node, 2, name);
	f_str(&node, 4, "Constant");
	f_str(&a, 1, "value");
	f_msg(&a, 5, &t);
	f_varint(&a, 20, 4); /* TENSOR */
	f_msg(&node, 5, &a);
	f_msg(g, 1, &node);
}

static void add_attrs(struct fz_rd *r, struct fz_buf *node, const char *attrs)
{
	char names[128], *save = NULL;

	snprintf(names, sizeof names, "%s", attrs);
	for (char *a = strtok_r(names, " ", &save); a; a = strtok_r(NULL, " ", &save))
		if (fz_byte(r) < 224) /* sometimes left to its default */
			attr(r, node, a[0] == '=' ? a + 1 : a, a[0] == '=');
}

static int graph_input(struct fz_rd *r, struct fz_buf *g)
{
	int64_t dims[4];
	int rank = 1 + fz_byte(r) % 4;

	for (int i = 0; i < rank; i++) {
		uint8_t b = fz_byte(r);
		dims[i] = b < 215 ? 1 + b % 4 : b < 235 ? fz_int(r) : INT64_MIN;
	}
	value_info(g, 11, "x", 1, dims, rank);
	return rank;
}

void fz_model(struct fz_rd *r, struct fz_buf *out)
{
	const struct recipe *rc = &recipes[fz_byte(r) % (sizeof recipes / sizeof *recipes)];
	struct fz_buf g = { 0 }, node = { 0 }, op = { 0 };
	char name[16];
	int xrank = 0;

	if (rc->use_x) {
		xrank = graph_input(r, &g);
		f_str(&node, 1, "x");
	}
	for (int k = 0; rc->extra[k]; k++) {
		snprintf(name, sizeof name, "c%d", k);
		if (rc->extra[k] != 'x')
			extra_input(r, &g, rc->extra[k], name, xrank);
		f_str(&node, 1, rc->extra[k] == 'x' ? "x" : name);
	}
	f_str(&node, 2, "y");
	if (rc->nout > 1)
		f_str(&node, 2, "y2");
	f_str(&node, 3, "n0");
	f_str(&node, 4, rc->op);
	add_attrs(r, &node, rc->attrs);
	f_msg(&g, 1, &node);
	f_str(&g, 2, "fuzz");
	value_info(&g, 12, "y", fz_byte(r) < 200 ? 1 : 7, NULL, -1);
	if (rc->nout > 1)
		value_info(&g, 12, "y2", fz_byte(r) < 128 ? 1 : 7, NULL, -1);
	f_varint(out, 1, 8); /* ir_version */
	f_str(&op, 1, "");
	f_varint(&op, 2, 13 + fz_byte(r) % 6);
	f_msg(out, 8, &op);
	f_msg(out, 7, &g);
}

/* ---- --shape texts and .npy files ---- */

void fz_shape_text(struct fz_rd *r, char *text, size_t len)
{
	int n = 1 + fz_byte(r) % 4;
	size_t l = 0;

	text[0] = 0;
	for (int i = 0; i < n && l < len; i++) {
		uint8_t b = fz_byte(r);
		int64_t d = b < 160 ? 1 + b % 4 : fz_int(r);
		l += (size_t)snprintf(text + l, len - l, "%s%" PRId64, i ? "x" : "", d);
	}
}

static void npy_header(struct fz_rd *r, char *h, size_t len, int64_t *numel, size_t *esize)
{
	static const char *descr[] = { "<f4", "<i8", "<f2", "|b1", "<f8", "<i4", "|u1", ">f4", "<c8" };
	static const size_t sizes[] = { 4, 8, 2, 1, 8, 4, 1, 4, 8 };
	int d = fz_byte(r) % 9, n = fz_byte(r) % 4, over = 0;
	size_t l = (size_t)snprintf(h, len, "{'descr': '%s', 'fortran_order': %s, 'shape': (", descr[d],
				    fz_byte(r) < 32 ? "True" : "False");

	*numel = 1;
	for (int i = 0; i < n; i++) {
		int64_t v = fz_int(r);
		over |= v < 0 || __builtin_mul_overflow(*numel, v, numel);
		l += (size_t)snprintf(h + l, len - l, "%" PRId64 "%s", v, n == 1 || i + 1 < n ? ", " : "");
	}
	snprintf(h + l, len - l, "), }");
	*esize = sizes[d];
	if (over)
		*numel = -1;
}

void fz_npy(struct fz_rd *r, struct fz_buf *out)
{
	char h[512];
	int64_t numel;
	size_t esize;

	npy_header(r, h, sizeof h - 80, &numel, &esize);
	size_t hl = strlen(h), total = (10 + hl + 1 + 63) / 64 * 64;
	memset(h + hl, ' ', total - 10 - hl - 1);
	h[total - 10 - 1] = '\n';
	uint8_t head[10] = { 0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, (uint8_t)(total - 10), (uint8_t)((total - 10) >> 8) };
	put(out, head, 10);
	put(out, h, total - 10);
	size_t data = numel >= 0 && numel <= 4096 ? (size_t)numel * esize : fz_byte(r) % 64;
	if (fz_byte(r) < 32 && data)
		data--; /* cut short */
	uint8_t *z = calloc(1, data + 1);
	put(out, z, data);
	free(z);
}

void fz_case_bytes(uint64_t seed, long index, uint8_t *buf)
{
	uint64_t x = seed * 0x9e3779b97f4a7c15ull ^ ((uint64_t)index + 1) * 0xbf58476d1ce4e5b9ull;

	for (int i = 0; i < FZ_CASE_BYTES; i++) {
		x ^= x >> 12;
		x ^= x << 25;
		x ^= x >> 27;
		buf[i] = (uint8_t)((x * 0x2545f4914f6cdd1dull) >> 56);
	}
}
