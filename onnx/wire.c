/* Protobuf wire-format walker and the schema filter (see wire.h). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "onnx/wire.h"

static int read_varint(struct pb_reader *r, uint64_t *out)
{
	uint64_t v = 0;

	for (int shift = 0; shift < 64; shift += 7) {
		uint8_t b;

		if (r->p >= r->end)
			return -1;
		b = *r->p++;
		if (shift == 63 && b > 1)
			return -1; /* more than 64 bits */
		v |= (uint64_t)(b & 0x7f) << shift;
		if (!(b & 0x80)) {
			*out = v;
			return 0;
		}
	}
	return -1;
}

/* Key and value (VARINT, FIXED*) or length (LEN) of the field at r->p;
 * r->p is left at the payload of a LEN field, after the field otherwise. */
static int read_header(struct pb_reader *r, struct pb_field *f, uint64_t *len)
{
	uint64_t key;

	if (read_varint(r, &key) < 0 || (key >> 3) == 0 || (key >> 3) > 0x1fffffff)
		return -1;
	f->num = (uint32_t)(key >> 3);
	f->wt = (enum pb_wire)(key & 7);
	f->data = NULL;
	f->len = 0;
	f->v = 0;
	*len = 0;
	switch (f->wt) {
	case PB_VARINT:
		return read_varint(r, &f->v);
	case PB_FIXED64:
	case PB_FIXED32: {
		size_t n = f->wt == PB_FIXED64 ? 8 : 4;
		if ((size_t)(r->end - r->p) < n)
			return -1;
		for (size_t i = 0; i < n; i++)
			f->v |= (uint64_t)r->p[i] << (8 * i);
		r->p += n;
		return 0;
	}
	case PB_LEN:
		return read_varint(r, len);
	default:
		return -1; /* groups (3, 4) and reserved wire types */
	}
}

int pb_next(struct pb_reader *r, struct pb_field *f)
{
	uint64_t len;

	if (r->p >= r->end)
		return 0;
	f->start = r->p;
	if (read_header(r, f, &len) < 0)
		return -1;
	if (f->wt == PB_LEN) {
		if (len > (uint64_t)(r->end - r->p))
			return -1;
		f->data = r->p;
		f->len = (size_t)len;
		r->p += len;
	}
	f->next = r->p;
	return 1;
}

/* What the filter does with a field: keep its bytes, drop it, or filter it
 * as a nested message of the given kind. */
enum { DROP = -2, KEEP = -1 };

static int rule(enum pb_msg kind, uint32_t num)
{
	switch (kind) {
	case PB_MSG_MODEL: /* ir_version, producer_name, _version, domain, model_version, opset_import */
		return num == 1 || num == 2 || num == 3 || num == 4 || num == 5 || num == 8 ? KEEP : DROP;
	case PB_MSG_GRAPH:
		if (num == 1)
			return PB_MSG_NODE;
		if (num == 11 || num == 12)
			return PB_MSG_VALUE_INFO;
		return num == 2 ? KEEP : DROP;
	case PB_MSG_NODE: /* input, output, name, op_type, domain; attribute */
		if (num == 5)
			return PB_MSG_ATTR;
		return num == 1 || num == 2 || num == 3 || num == 4 || num == 7 ? KEEP : DROP;
	case PB_MSG_ATTR: /* name, f, i, s, t, g (flat: kept whole), floats, ints, strings, type */
		return (num >= 1 && num <= 9) || num == 20 ? KEEP : DROP;
	case PB_MSG_VALUE_INFO:
		if (num == 2)
			return PB_MSG_TYPE;
		return num == 1 ? KEEP : DROP;
	case PB_MSG_TYPE: /* tensor_type only: sequences, maps, optionals recurse */
		return num == 1 ? KEEP : DROP;
	case PB_MSG_TENSOR:
		return num == 9 || num == 12 ? DROP : KEEP;
	}
	return DROP;
}

static int buf_put(struct pb_buf *b, const void *p, size_t n)
{
	if (b->cap - b->len < n) {
		size_t cap = b->cap ? b->cap : 256;
		void *q;

		while (cap - b->len < n)
			cap *= 2;
		q = realloc(b->p, cap);
		if (!q)
			return -ENOMEM;
		b->p = q;
		b->cap = cap;
	}
	if (n)
		memcpy(b->p + b->len, p, n);
	b->len += n;
	return 0;
}

static int buf_varint(struct pb_buf *b, uint64_t v)
{
	uint8_t tmp[10];
	size_t n = 0;

	do {
		tmp[n] = (uint8_t)(v & 0x7f);
		v >>= 7;
		if (v)
			tmp[n] |= 0x80;
		n++;
	} while (v);
	return buf_put(b, tmp, n);
}

void pb_buf_free(struct pb_buf *b)
{
	free(b->p);
	b->p = NULL;
	b->len = b->cap = 0;
}

/* Depth is bounded by the schema (graph > node > attribute > tensor). */
int pb_filter(const uint8_t *in, size_t len, enum pb_msg kind, struct pb_buf *out)
{
	struct pb_reader r = { in, in + len };
	struct pb_field f;
	int rc;

	while ((rc = pb_next(&r, &f)) > 0) {
		int what = rule(kind, f.num);
		struct pb_buf sub = { 0 };

		if (what == DROP)
			continue;
		if (what == KEEP || f.wt != PB_LEN) {
			/* a nested field with the wrong wire type is kept as is:
			 * protobuf-c rejects it with the whole message */
			if (buf_put(out, f.start, (size_t)(f.next - f.start)) < 0)
				return -ENOMEM;
			continue;
		}
		rc = pb_filter(f.data, f.len, (enum pb_msg)what, &sub);
		if (rc == 0)
			rc = buf_varint(out, (uint64_t)f.num << 3 | PB_LEN);
		if (rc == 0)
			rc = buf_varint(out, sub.len);
		if (rc == 0)
			rc = buf_put(out, sub.p, sub.len);
		pb_buf_free(&sub);
		if (rc < 0)
			return rc;
	}
	return rc;
}

static int pread_full(struct pb_src *s, uint64_t off, void *dst, size_t len)
{
	uint8_t *p = dst;

	while (len) {
		ssize_t r = pread(s->fd, p, len, (off_t)off);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0) {
			s->err = r < 0 ? -errno : -EIO; /* EIO: the file shrank under us */
			return -2;
		}
		p += r;
		len -= (size_t)r;
		off += (uint64_t)r;
	}
	return 0;
}

int pb_src_read(struct pb_src *s, uint64_t off, void *dst, size_t len)
{
	if (!len)
		return 0;
	if (off > s->size || s->size - off < len) {
		s->err = -EIO;
		return -2;
	}
	if (s->fd < 0) {
		memcpy(dst, s->mem + off, len);
		return 0;
	}
	if (off >= s->win_off && off - s->win_off + len <= s->win_len) {
		memcpy(dst, s->win + (off - s->win_off), len);
		return 0;
	}
	if (len > PB_WINDOW / 4)
		return pread_full(s, off, dst, len); /* big reads bypass the window */
	s->win_len = s->size - off < PB_WINDOW ? (size_t)(s->size - off) : PB_WINDOW;
	s->win_off = off;
	if (pread_full(s, off, s->win, s->win_len) < 0) {
		s->win_len = 0;
		return -2;
	}
	memcpy(dst, s->win, len);
	return 0;
}

int pb_src_next(struct pb_src *s, uint64_t *pos, uint64_t end, struct pb_sfield *f)
{
	uint8_t hdr[24]; /* key (<= 5 bytes) + varint or length (<= 10) */
	size_t n = end - *pos < sizeof hdr ? (size_t)(end - *pos) : sizeof hdr;
	struct pb_reader r = { hdr, hdr + n };
	struct pb_field mf;
	uint64_t len;

	if (*pos >= end)
		return 0;
	if (pb_src_read(s, *pos, hdr, n) < 0)
		return -2;
	if (read_header(&r, &mf, &len) < 0)
		return -1;
	f->num = mf.num;
	f->wt = mf.wt;
	f->v = mf.v;
	f->start = *pos;
	f->off = *pos + (uint64_t)(r.p - hdr);
	if (len > end - f->off)
		return -1;
	f->len = len;
	f->next = f->off + len;
	*pos = f->next;
	return 1;
}

int pb_src_append(struct pb_src *s, uint64_t off, uint64_t len, struct pb_buf *out)
{
	if (len > SIZE_MAX / 4)
		return -ENOMEM;
	if (out->cap - out->len < len) {
		size_t cap = out->cap ? out->cap : 256;
		void *q;

		while (cap - out->len < len)
			cap *= 2;
		if (!(q = realloc(out->p, cap)))
			return -ENOMEM;
		out->p = q;
		out->cap = cap;
	}
	if (pb_src_read(s, off, out->p + out->len, (size_t)len) < 0)
		return -2;
	out->len += (size_t)len;
	return 0;
}
