/* ONNX writing: the original ModelProto copied field by field, with every
 * initializer that training changed (weights, running statistics)
 * re-encoded from the caller's current values, inline as raw_data or as
 * external data in FILE.data.  Running statistics that
 * training gave storage of their own (autodiff_untie.c: an exporter had
 * merged them with a parameter) become initializers of their own: the
 * Identity nodes that made them go and BatchNorm nodes that shared a
 * parameter read the new name.  Constant nodes whose tensors trained as
 * parameters (exec/train_params.c) go, their values appended as
 * initializers of the same name.  The graph's length prefix is
 * computed before its bytes are streamed, so no weight is held in memory
 * whole (the caller's read gives a value a piece at a time); the file is
 * written under a temporary name and renamed. */
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "hpdlf/error.h"
#include "onnx/export.h"
#include "onnx/import.h"
#include "onnx/wire.h"

#define EX_PIECE (4u << 20)
#define EX_INLINE_MAX (1ull << 30)

struct ex {
	const struct onnx_export *x;
	const struct hp_graph *g;
	const char *unit;           /* x->whole */
	FILE *out, *data;           /* the model, the external data (or NULL) */
	const char *path;
	char *data_name;            /* location written in the model */
	uint64_t data_off;
	unsigned char *buf;
	char *in_model;             /* per value: an initializer of the original graph
				     * (1 + its declared ONNX data type) */
	int err;
};

static size_t varint_len(uint64_t v)
{
	size_t n = 1;

	while (v >= 0x80) {
		v >>= 7;
		n++;
	}
	return n;
}

static void put_varint(struct ex *e, uint64_t v)
{
	while (v >= 0x80) {
		fputc((int)(v & 0x7f) | 0x80, e->out);
		v >>= 7;
	}
	fputc((int)v, e->out);
}

static void put_key(struct ex *e, uint32_t num, int wt)
{
	put_varint(e, (uint64_t)num << 3 | (uint64_t)wt);
}

static void put_bytes(struct ex *e, uint32_t num, const void *p, size_t len)
{
	put_key(e, num, PB_LEN);
	put_varint(e, len);
	fwrite(p, 1, len, e->out);
}

static size_t len_field(uint32_t num, size_t len)
{
	return varint_len((uint64_t)num << 3) + varint_len(len) + len;
}

static uint64_t vbytes(const struct hp_value *v)
{
	struct hp_tensor t = { .dtype = v->dtype, .shape = v->shape };

	return hp_tensor_bytes(&t);
}

/* The type value v is written in: its own, except that a float16/bfloat16
 * weight of the model trained as float32 (exec/autodiff_half.c) goes back
 * in its declared type. */
static enum hp_dtype out_dtype(const struct ex *e, int v)
{
	int decl = e->in_model[v] ? e->in_model[v] - 1 : 0;

	if (e->g->values[v].dtype == HP_F32 && (decl == HP_F16 || decl == HP_BF16))
		return (enum hp_dtype)decl;
	return e->g->values[v].dtype;
}

static uint64_t obytes(const struct ex *e, int v)
{
	struct hp_tensor t = { .dtype = out_dtype(e, v), .shape = e->g->values[v].shape };

	return hp_tensor_bytes(&t);
}

/* A trained initializer of the model (weights, running statistics): state
 * that came from the file, not optimizer state created by autodiff. */
static int trained_value(const struct hp_graph *g, const char *unit, const uint8_t *name, size_t len)
{
	char buf[1024];

	if (len >= sizeof buf)
		return -1;
	memcpy(buf, name, len);
	buf[len] = 0;
	int v = hp_graph_find_value(g, buf);
	if (v < 0 || !unit[v] || g->values[v].kind != HP_VALUE_INITIALIZER ||
	    g->values[v].src.kind == HP_BLOB_NONE)
		return -1;
	return v;
}

/* Value index of TensorProto `t` if training changed it, else -1. */
static int tensor_value(const struct hp_graph *g, const char *unit, const uint8_t *t, size_t len)
{
	struct pb_reader r = { t, t + len };
	struct pb_field f;

	while (pb_next(&r, &f) == 1)
		if (f.num == 8 && f.wt == PB_LEN)
			return trained_value(g, unit, f.data, f.len);
	return -1;
}

static char dec_buf[32];

static const char *dec(uint64_t v)
{
	snprintf(dec_buf, sizeof dec_buf, "%llu", (unsigned long long)v);
	return dec_buf;
}

static size_t entry_len(const char *k, const char *v)
{
	return len_field(1, strlen(k)) + len_field(2, strlen(v));
}

/* The encoded TensorProto of value v (data at external offset `off`). */
static size_t tensor_len(const struct ex *e, int v, uint64_t off)
{
	const struct hp_value *val = &e->g->values[v];
	size_t n = 0, bytes = obytes(e, v);

	for (int i = 0; i < val->shape.rank; i++)
		n += 1 + varint_len((uint64_t)val->shape.dims[i]);
	n += 1 + varint_len((uint64_t)out_dtype(e, v)) + len_field(8, strlen(val->name));
	if (!e->data)
		return n + len_field(9, bytes);
	n += len_field(13, entry_len("location", e->data_name)) + len_field(13, entry_len("offset", dec(off)));
	n += len_field(13, entry_len("length", dec(bytes))) + 2;
	return n;
}

static void put_entry(struct ex *e, const char *k, const char *v)
{
	put_key(e, 13, PB_LEN);
	put_varint(e, entry_len(k, v));
	put_bytes(e, 1, k, strlen(k));
	put_bytes(e, 2, v, strlen(v));
}

/* A float32 value written as float16/bfloat16, in pieces. */
static int copy_narrowed(struct ex *e, int v, FILE *f)
{
	uint64_t n = vbytes(&e->g->values[v]);
	uint16_t *h = malloc(EX_PIECE / 2);
	int rc = h ? 0 : hp_error(-ENOMEM, "out of memory");

	for (uint64_t at = 0; rc == 0 && at < n;) {
		size_t len = n - at < EX_PIECE ? (size_t)(n - at) : EX_PIECE;
		if ((rc = e->x->read(e->x->arg, v, at, len, e->buf)) < 0)
			break;
		imp_f32_to_half(out_dtype(e, v), (const float *)e->buf, h, len / 4);
		if (fwrite(h, 2, len / 4, f) != len / 4)
			rc = hp_error(-EIO, "%s: write failed", e->path);
		at += len;
	}
	free(h);
	return rc;
}

/* The value's bytes from the session into f, in pieces. */
static int copy_value(struct ex *e, int v, FILE *f)
{
	uint64_t n = vbytes(&e->g->values[v]);

	if (out_dtype(e, v) != e->g->values[v].dtype)
		return copy_narrowed(e, v, f);
	for (uint64_t at = 0; at < n;) {
		size_t len = n - at < EX_PIECE ? (size_t)(n - at) : EX_PIECE;
		int rc = e->x->read(e->x->arg, v, at, len, e->buf);
		if (rc < 0)
			return rc;
		if (fwrite(e->buf, 1, len, f) != len)
			return hp_error(-EIO, "%s: write failed", e->path);
		at += len;
	}
	return 0;
}

static int put_tensor(struct ex *e, int v)
{
	const struct hp_value *val = &e->g->values[v];
	uint64_t bytes = obytes(e, v), off = (e->data_off + 4095) / 4096 * 4096;

	put_key(e, 5, PB_LEN);
	put_varint(e, tensor_len(e, v, off));
	for (int i = 0; i < val->shape.rank; i++) {
		put_key(e, 1, PB_VARINT);
		put_varint(e, (uint64_t)val->shape.dims[i]);
	}
	put_key(e, 2, PB_VARINT);
	put_varint(e, (uint64_t)out_dtype(e, v));
	put_bytes(e, 8, val->name, strlen(val->name));
	if (!e->data) {
		put_key(e, 9, PB_LEN);
		put_varint(e, bytes);
		return copy_value(e, v, e->out);
	}
	put_entry(e, "location", e->data_name);
	put_entry(e, "offset", dec(off));
	put_entry(e, "length", dec(bytes));
	put_key(e, 14, PB_VARINT);
	put_varint(e, 1); /* EXTERNAL */
	while (e->data_off < off) {
		fputc(0, e->data);
		e->data_off++;
	}
	e->data_off += bytes;
	return copy_value(e, v, e->data);
}

/* Value index of a string field's name, or -1. */
static int name_value(const struct hp_graph *g, const uint8_t *name, size_t len)
{
	char buf[1024];

	if (len >= sizeof buf)
		return -1;
	memcpy(buf, name, len);
	buf[len] = 0;
	return hp_graph_find_value(g, buf);
}

static int str_is(const struct pb_field *f, const char *s)
{
	return f->len == strlen(s) && !memcmp(f->data, s, f->len);
}

/* What training made of NodeProto nd: 0 kept as is, 1 dropped (an Identity
 * whose output became a statistic of its own), 2 re-encoded: *bn is the
 * training graph's BatchNorm whose statistic inputs got new names. */
static int node_fate(const struct hp_graph *g, const uint8_t *nd, size_t len, int *bn)
{
	struct pb_reader r = { nd, nd + len };
	struct pb_field f;
	int identity = 0, batchnorm = 0, constant = 0, out = -2;

	while (pb_next(&r, &f) == 1) {
		if (f.num == 4 && f.wt == PB_LEN) {
			identity = str_is(&f, "Identity");
			batchnorm = str_is(&f, "BatchNormalization");
			constant = str_is(&f, "Constant");
		}
		if (f.num == 2 && f.wt == PB_LEN && out == -2)
			out = name_value(g, f.data, f.len);
	}
	if (out < 0)
		return 0;
	if (identity)
		return g->values[out].producer < 0;
	/* a Constant training made a parameter: its trained value is appended
	 * as an initializer of the same name */
	if (constant)
		return g->values[out].kind == HP_VALUE_INITIALIZER && g->values[out].next >= 0;
	*bn = g->values[out].producer;
	if (!batchnorm || *bn < 0 || g->nodes[*bn].ninputs < 5)
		return 0;
	r = (struct pb_reader){ nd, nd + len };
	for (int k = 0; pb_next(&r, &f) == 1;)
		if (f.num == 1 && f.wt == PB_LEN && k++ >= 3 && k <= 5 && g->nodes[*bn].inputs[k - 1] >= 0 &&
		    !str_is(&f, g->values[g->nodes[*bn].inputs[k - 1]].name))
			return 2;
	return 0;
}

/* NodeProto nd with BatchNorm bn's statistic input names: its size, and
 * the bytes if write. */
static size_t put_node(struct ex *e, const uint8_t *nd, size_t len, int bn, int write)
{
	const struct hp_graph *g = e->g;
	struct pb_reader r = { nd, nd + len };
	struct pb_field f;
	size_t n = 0;

	for (int k = 0; pb_next(&r, &f) == 1;) {
		const char *name = NULL;
		if (f.num == 1 && f.wt == PB_LEN && k++ >= 3 && k <= 5 && g->nodes[bn].inputs[k - 1] >= 0)
			name = g->values[g->nodes[bn].inputs[k - 1]].name;
		n += name ? len_field(1, strlen(name)) : (size_t)(f.next - f.start);
		if (write && name)
			put_bytes(e, 1, name, strlen(name));
		else if (write)
			fwrite(f.start, 1, (size_t)(f.next - f.start), e->out);
	}
	return n;
}

/* Trained initializers the original graph does not hold (split running
 * statistics), appended after its fields. */
static int new_tensors(struct ex *e, int write, uint64_t *off, uint64_t *n)
{
	const struct hp_graph *g = e->g;
	int rc;

	for (int v = 0; v < g->nvalues; v++) {
		/* blocks of partitioned weights go out whole, under their whole's name */
		if (e->in_model[v] || !e->unit[v] || g->values[v].next < 0 || g->values[v].kind != HP_VALUE_INITIALIZER ||
		    g->values[v].src.kind == HP_BLOB_NONE)
			continue;
		if (write && (rc = put_tensor(e, v)) < 0)
			return rc;
		*n += len_field(5, tensor_len(e, v, *off));
		*off = (*off + obytes(e, v) + 4095) / 4096 * 4096;
	}
	return 0;
}

/* Walk GraphProto g[0..len): size (write = 0) or write it. */
static int graph_pass(struct ex *e, const uint8_t *gp, size_t len, int write, uint64_t *size)
{
	struct pb_reader r = { gp, gp + len };
	struct pb_field f;
	uint64_t off = (e->data_off + 4095) / 4096 * 4096, n = 0;
	int rc, v;

	while ((rc = pb_next(&r, &f)) == 1) {
		int fate = 0, bn = -1;
		v = f.num == 5 && f.wt == PB_LEN ? tensor_value(e->g, e->unit, f.data, f.len) : -1;
		if (f.num == 1 && f.wt == PB_LEN)
			fate = node_fate(e->g, f.data, f.len, &bn);
		if (fate == 1)
			continue;
		if (fate == 2) {
			size_t nl = put_node(e, f.data, f.len, bn, 0);
			if (write) {
				put_key(e, 1, PB_LEN);
				put_varint(e, nl);
				put_node(e, f.data, f.len, bn, 1);
			}
			n += len_field(1, nl);
			continue;
		}
		if (v < 0) {
			n += (uint64_t)(f.next - f.start);
			if (write)
				fwrite(f.start, 1, (size_t)(f.next - f.start), e->out);
			continue;
		}
		if (write && (rc = put_tensor(e, v)) < 0)
			return rc;
		n += len_field(5, tensor_len(e, v, off));
		off = (off + obytes(e, v) + 4095) / 4096 * 4096;
	}
	if (rc < 0)
		return hp_error(HP_EMODEL, "%s: malformed graph", e->x->model);
	if ((rc = new_tensors(e, write, &off, &n)) < 0)
		return rc;
	*size = n;
	return 0;
}

/* Which values the original graph holds as initializers, and their types. */
static int mark_in_model(struct ex *e, const uint8_t *gp, size_t len)
{
	struct pb_reader r = { gp, gp + len }, t;
	struct pb_field f, tf;

	while (pb_next(&r, &f) == 1) {
		if (f.num != 5 || f.wt != PB_LEN)
			continue;
		int v = -1, dt = 0;
		t = (struct pb_reader){ f.data, f.data + f.len };
		while (pb_next(&t, &tf) == 1) {
			if (tf.num == 8 && tf.wt == PB_LEN)
				v = name_value(e->g, tf.data, tf.len);
			if (tf.num == 2 && tf.wt == PB_VARINT && tf.v < 100)
				dt = (int)tf.v;
		}
		if (v >= 0)
			e->in_model[v] = (char)(1 + dt);
	}
	return 0;
}

static int model_pass(struct ex *e, const uint8_t *m, size_t len)
{
	struct pb_reader r = { m, m + len };
	struct pb_field f;
	uint64_t glen = 0;
	int rc;

	while ((rc = pb_next(&r, &f)) == 1) {
		if (f.num != 7 || f.wt != PB_LEN) {
			fwrite(f.start, 1, (size_t)(f.next - f.start), e->out);
			continue;
		}
		uint64_t save = e->data_off;
		mark_in_model(e, f.data, f.len);
		if ((rc = graph_pass(e, f.data, f.len, 0, &glen)) < 0)
			return rc;
		e->data_off = save;
		put_key(e, 7, PB_LEN);
		put_varint(e, glen);
		if ((rc = graph_pass(e, f.data, f.len, 1, &glen)) < 0)
			return rc;
	}
	return rc < 0 ? hp_error(HP_EMODEL, "%s: malformed model", e->x->model) : 0;
}

static uint64_t trained_bytes(const struct hp_graph *g, const char *unit)
{
	uint64_t n = 0;

	for (int v = 0; v < g->nvalues; v++)
		if (unit[v] && g->values[v].kind == HP_VALUE_INITIALIZER &&
		    g->values[v].src.kind != HP_BLOB_NONE)
			n += vbytes(&g->values[v]);
	return n;
}

static int open_outputs(struct ex *e, const char *tmp, const char *dtmp, int external)
{
	if (!(e->out = fopen(tmp, "wb")))
		return hp_error(-errno, "%s: %s", tmp, strerror(errno));
	if (!external)
		return 0;
	if (!(e->data = fopen(dtmp, "wb")))
		return hp_error(-errno, "%s: %s", dtmp, strerror(errno));
	return 0;
}

static int finish(FILE *f, const char *tmp, const char *final, int rc)
{
	if (!f)
		return rc;
	if (fflush(f) != 0 || fsync(fileno(f)) < 0) {
		if (rc == 0)
			rc = hp_error(-errno, "%s: %s", tmp, strerror(errno));
	}
	if (fclose(f) != 0 && rc == 0)
		rc = hp_error(-errno, "%s: %s", tmp, strerror(errno));
	if (rc == 0 && rename(tmp, final) < 0)
		rc = hp_error(-errno, "%s: %s", final, strerror(errno));
	if (rc < 0)
		unlink(tmp);
	return rc;
}

int onnx_export_model(const char *path, const struct onnx_export *x)
{
	char tmp[4096], dpath[4096], dtmp[4096], base[4096];
	const struct hp_graph *g = x->g;
	struct ex e = { .x = x, .g = g, .unit = x->whole, .path = path };
	struct stat st;
	void *m = MAP_FAILED;
	int fd, rc, external = x->external;

	external |= trained_bytes(g, e.unit) > EX_INLINE_MAX;
	snprintf(tmp, sizeof tmp, "%s.tmp", path);
	snprintf(dpath, sizeof dpath, "%s.data", path);
	snprintf(dtmp, sizeof dtmp, "%s.data.tmp", path);
	snprintf(base, sizeof base, "%s", dpath);
	e.data_name = basename(base);
	if ((fd = open(g->files[0], O_RDONLY | O_CLOEXEC)) < 0)
		return hp_error(-errno, "%s: %s", g->files[0], strerror(errno));
	if (fstat(fd, &st) == 0 && st.st_size > 0)
		m = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
	close(fd);
	if (m == MAP_FAILED)
		return hp_error(-EIO, "%s: cannot map the model", g->files[0]);
	e.buf = malloc(EX_PIECE);
	e.in_model = calloc((size_t)g->nvalues + 1, 1);
	rc = e.buf && e.in_model ? open_outputs(&e, tmp, dtmp, external) : hp_error(-ENOMEM, "out of memory");
	if (rc == 0)
		rc = model_pass(&e, m, (size_t)st.st_size);
	if (rc == 0 && (ferror(e.out) || (e.data && ferror(e.data))))
		rc = hp_error(-EIO, "%s: write failed", path);
	rc = finish(e.data, dtmp, dpath, rc);
	rc = finish(e.out, tmp, path, rc);
	munmap(m, (size_t)st.st_size);
	free(e.buf);
	free(e.in_model);
	return rc < 0 ? hp_error_prefix(rc, "--export-onnx %s", path) : 0;
}
