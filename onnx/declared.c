/* A model whose outputs (or value_info) declare a type or shape other than
 * what its nodes compute is inconsistent: ONNX Runtime refuses a type that
 * differs, and a consumer of the declared shape would read the wrong bytes.
 * The importer keeps no declarations (the public graph has no room for
 * them), so this walks the file's graph once more, message by message
 * (graph fields 12 and 13 are small ValueInfoProtos), after inference. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/file.h"
#include "hpdlf/error.h"
#include "onnx/declared.h"
#include "onnx/wire.h"

struct decl {
	char name[256];
	int64_t elem;           /* 0: not declared */
	int rank;               /* -1: no shape */
	int64_t dims[HP_MAX_RANK]; /* -1: symbolic or unknown */
};

static void copy_str(char *dst, size_t cap, const uint8_t *p, size_t len)
{
	if (len >= cap)
		len = cap - 1;
	memcpy(dst, p, len);
	dst[len] = 0;
}

/* TensorShapeProto: dims (1), each a Dimension with dim_value (1). */
static void parse_shape(struct decl *d, const uint8_t *p, size_t len)
{
	struct pb_reader r = { p, p + len };
	struct pb_field f;

	d->rank = 0;
	while (pb_next(&r, &f) == 1) {
		if (f.num != 1 || f.wt != PB_LEN)
			continue;
		struct pb_reader dr = { f.data, f.data + f.len };
		struct pb_field df;
		int64_t v = -1;
		while (pb_next(&dr, &df) == 1)
			if (df.num == 1 && df.wt == PB_VARINT && (int64_t)df.v > 0)
				v = (int64_t)df.v; /* 0 and negative: taken as unknown */
		if (d->rank == HP_MAX_RANK) {
			d->rank = -1; /* beyond any rank: the importer said so already */
			return;
		}
		d->dims[d->rank++] = v;
	}
}

/* ValueInfoProto: name (1), type (2) -> tensor_type (1) -> elem_type (1), shape (2). */
static void parse_vi(struct decl *d, const uint8_t *p, size_t len)
{
	struct pb_reader r = { p, p + len };
	struct pb_field f, t, tt;

	memset(d, 0, sizeof *d);
	d->rank = -1;
	while (pb_next(&r, &f) == 1) {
		if (f.num == 1 && f.wt == PB_LEN)
			copy_str(d->name, sizeof d->name, f.data, f.len);
		if (f.num != 2 || f.wt != PB_LEN)
			continue;
		struct pb_reader tr = { f.data, f.data + f.len };
		while (pb_next(&tr, &t) == 1) {
			if (t.num != 1 || t.wt != PB_LEN)
				continue;
			struct pb_reader ttr = { t.data, t.data + t.len };
			while (pb_next(&ttr, &tt) == 1) {
				if (tt.num == 1 && tt.wt == PB_VARINT)
					d->elem = (int64_t)tt.v;
				else if (tt.num == 2 && tt.wt == PB_LEN)
					parse_shape(d, tt.data, tt.len);
			}
		}
	}
}

static void dims_text(char *buf, size_t len, const int64_t *dims, int rank)
{
	size_t l = 0;

	buf[0] = 0;
	for (int i = 0; i < rank && l < len; i++) {
		if (dims[i] < 0)
			l += (size_t)snprintf(buf + l, len - l, "%s?", i ? "x" : "");
		else
			l += (size_t)snprintf(buf + l, len - l, "%s%" PRId64, i ? "x" : "", dims[i]);
	}
	if (rank == 0)
		snprintf(buf, len, "scalar");
}

/* Inputs without symbolic dims: then every declared dim must hold.  (With
 * symbolic inputs an exporter may have written the example's size into an
 * output's dims; ONNX Runtime only warns of that, and so the shape check
 * here then compares ranks only.) */
static int all_static(const struct hp_graph *g)
{
	for (int i = 0; i < g->ninputs; i++)
		for (int d = 0; d < HP_MAX_RANK; d++)
			if (g->values[g->inputs[i]].dim_param[d])
				return 0;
	return 1;
}

/* The declaration d against g's value (0: agrees or unknown). */
static int compare(const char *path, const struct hp_graph *g, const struct decl *d)
{
	int v = hp_graph_find_value(g, d->name), bad = 0, dims = all_static(g);
	char want[160], got[160];

	if (v < 0 || g->values[v].dtype == HP_UNDEFINED)
		return 0;
	const struct hp_value *val = &g->values[v];
	bad = d->elem && d->elem != (int64_t)val->dtype;
	if (d->rank >= 0 && val->shape.rank >= 0) {
		bad |= d->rank != val->shape.rank;
		for (int i = 0; dims && !bad && i < d->rank; i++)
			bad |= d->dims[i] >= 0 && val->shape.dims[i] >= 0 && d->dims[i] != val->shape.dims[i];
	}
	if (!bad)
		return 0;
	dims_text(want, sizeof want, d->dims, d->rank < 0 ? 0 : d->rank);
	dims_text(got, sizeof got, val->shape.dims, val->shape.rank);
	const struct hp_node *n = val->producer >= 0 ? &g->nodes[val->producer] : NULL;
	return hp_error(HP_EMODEL, "%s: '%s' is declared %s %s but %s%s%s computes %s %s", path, d->name,
			d->elem ? hp_dtype_name((enum hp_dtype)d->elem) : "(any type)", d->rank < 0 ? "(any shape)" : want,
			n ? "node '" : "the model", n ? n->name : "", n ? "'" : "", hp_dtype_name(val->dtype), got);
}

/* The graph message at [off, off + len): its outputs and value_info. */
static int walk_graph(struct pb_src *s, const char *path, const struct hp_graph *g, uint64_t off, uint64_t len)
{
	uint8_t buf[16384];
	struct pb_sfield f;
	uint64_t pos = off;
	int rc;

	while ((rc = pb_src_next(s, &pos, off + len, &f)) > 0) {
		if ((f.num != 12 && f.num != 13) || f.wt != PB_LEN || f.len > sizeof buf)
			continue;
		if (pb_src_read(s, f.off, buf, (size_t)f.len) < 0)
			return hp_error(s->err ? s->err : -EIO, "%s: reading the model", path);
		struct decl d;
		parse_vi(&d, buf, (size_t)f.len);
		if ((rc = compare(path, g, &d)) < 0)
			return rc;
	}
	return rc < 0 ? hp_error(HP_EMODEL, "%s: truncated or corrupt protobuf (graph)", path) : 0;
}

int hp_onnx_check_declared(const char *path, const struct hp_graph *g)
{
	struct pb_src s;
	struct pb_sfield f;
	struct stat st;
	uint64_t pos = 0;
	int fd, rc;

	if (!path || hp_open_regular(path, NULL, &fd, &st) < 0)
		return 0; /* loaded from a buffer, or gone: the load said what it had to */
	s = (struct pb_src){ .fd = fd, .size = (uint64_t)st.st_size, .win = malloc(PB_WINDOW) };
	rc = s.win ? 0 : -ENOMEM;
	while (rc == 0 && (rc = pb_src_next(&s, &pos, s.size, &f)) > 0) {
		rc = 0;
		if (f.num == 7 && f.wt == PB_LEN)
			rc = walk_graph(&s, path, g, f.off, f.len);
	}
	free(s.win);
	close(fd);
	return rc < -2 ? rc : 0; /* -1, -2: the load read the same bytes without a complaint */
}
