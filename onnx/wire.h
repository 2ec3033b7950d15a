/* Protobuf wire-format walking for the ONNX importer (internal).
 *
 * The importer never hands a whole ModelProto to protobuf-c: initializer
 * bytes would be copied into RAM and nested graphs/types would recurse
 * without bound.  It walks the top-level wire format itself to find the
 * graph and initializer ranges, and filters everything else through a small
 * schema (pb_filter) that keeps only the fields the importer reads and drops
 * every recursive field, so protobuf-c only ever unpacks small, flat-enough
 * messages.
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

#endif
