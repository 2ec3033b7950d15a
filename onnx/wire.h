/* Protobuf wire-format walking for the ONNX importer and exporter (internal).
 *
 * The importer never hands a whole ModelProto to protobuf-c: initializer
 * bytes would be copied into RAM and nested graphs/types would recurse
 * without bound.  It walks the top levels of the file itself (pb_src: pread
 * through a small window, no mapping) to find the graph and initializer
 * ranges, reads every field except raw_data, and filters what it read
 * through a small schema (pb_filter) that keeps only the fields the importer
 * uses and drops every recursive field, so protobuf-c only ever unpacks
 * small, shallow messages.
 */
#ifndef HPDLF_ONNX_WIRE_H
#define HPDLF_ONNX_WIRE_H

#include <stddef.h>
#include <stdint.h>

enum pb_wire { PB_VARINT = 0, PB_FIXED64 = 1, PB_LEN = 2, PB_FIXED32 = 5 };

struct pb_reader {
	const uint8_t *p, *end;
};

struct pb_field {
	uint32_t num;
	enum pb_wire wt;
	uint64_t v;          /* VARINT / FIXED* value */
	const uint8_t *data; /* LEN payload */
	size_t len;
	const uint8_t *start, *next; /* whole field, key included */
};

/* Next field: 1 = got one, 0 = end of message, -1 = malformed. */
int pb_next(struct pb_reader *r, struct pb_field *f);

/* A model being walked: a file read with pread through a window, or a
 * caller's buffer. */
#define PB_WINDOW (64u << 10)

struct pb_src {
	int fd;              /* -1: read from mem */
	const uint8_t *mem;
	uint64_t size;
	uint8_t *win;        /* PB_WINDOW bytes of the file at win_off */
	uint64_t win_off;
	size_t win_len;
	int err;             /* -errno of the last failed read, 0 if none */
};

/* A field found by pb_src_next: positions are offsets into the source. */
struct pb_sfield {
	uint32_t num;
	enum pb_wire wt;
	uint64_t v;                /* VARINT / FIXED* value */
	uint64_t start, off, next; /* key, payload (LEN), end of field */
	uint64_t len;              /* LEN payload length */
};

/* Field at *pos within [*pos, end): 1 = got one (*pos advanced), 0 = end,
 * -1 = malformed, -2 = read error (s->err). */
int pb_src_next(struct pb_src *s, uint64_t *pos, uint64_t end, struct pb_sfield *f);
/* Copy bytes [off, off+len) of the source to dst: 0, or -2 on read error. */
int pb_src_read(struct pb_src *s, uint64_t off, void *dst, size_t len);

/* Messages the filter knows; everything not listed in its table is dropped. */
enum pb_msg {
	PB_MSG_MODEL,      /* graph (7) dropped: walked separately */
	PB_MSG_GRAPH,      /* initializer (5) and sparse_initializer (15) dropped */
	PB_MSG_NODE,
	PB_MSG_ATTR,       /* g, graphs, tp, tensors, sparse_* dropped (type still says) */
	PB_MSG_VALUE_INFO,
	PB_MSG_TYPE,       /* only tensor_type kept */
	PB_MSG_TENSOR,     /* top-level initializers: raw_data (9) and doc_string dropped */
};

struct pb_buf {
	uint8_t *p;
	size_t len, cap;
};

/* Append the fields of `kind` the importer uses from in[0..len) to out.
 * Returns 0, -1 if malformed, -ENOMEM. */
int pb_filter(const uint8_t *in, size_t len, enum pb_msg kind, struct pb_buf *out);
void pb_buf_free(struct pb_buf *b);
/* Append bytes [off, off+len) of the source: 0, -ENOMEM, or -2 (read error). */
int pb_src_append(struct pb_src *s, uint64_t off, uint64_t len, struct pb_buf *out);

#endif
