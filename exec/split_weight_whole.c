/* Whole values of partitioned weights read and written through a session:
 * a partitioned value's bytes live in its parts (split_weight.c), which the
 * session holds.  Apart from split_weight.c, which the compile step calls
 * before any session exists, so that no file calls back into its caller. */
#include <stdint.h>

#include "hpdlf/error.h"
#include "exec/exec_internal.h"
#include "exec/split_weight.h"

static uint64_t vbytes(const struct hp_graph *g, int v)
{
	struct hp_tensor t = { .dtype = g->values[v].dtype, .shape = g->values[v].shape };

	return hp_tensor_bytes(&t);
}

/* Copy [at, at + len) of v through its parts; HP_EINTERNAL if the parts
 * do not cover it. */
static int through_parts(struct hp_session *s, int v, uint64_t at, uint64_t len, void *buf, int write)
{
	const struct hp_graph *g = s->g;
	uint64_t covered = 0;

	for (int p = 0; p < g->nvalues; p++) {
		if (g->values[p].part_of != v)
			continue;
		uint64_t b = g->values[p].part_offset, e = b + vbytes(g, p);
		uint64_t lo = at > b ? at : b, hi = at + len < e ? at + len : e;
		if (lo >= hi)
			continue;
		unsigned char *q = (unsigned char *)buf + (lo - at);
		int rc = write ? hp_session_write_value(s, p, lo - b, hi - lo, q)
			       : hp_session_read_value(s, p, lo - b, hi - lo, q);
		if (rc < 0)
			return rc;
		covered += hi - lo;
	}
	if (covered != len)
		return hp_error(HP_EINTERNAL, "value '%s': its parts hold %llu of bytes [%llu, +%llu)", g->values[v].name,
				(unsigned long long)covered, (unsigned long long)at, (unsigned long long)len);
	return 0;
}

static int has_parts(const struct hp_graph *g, int v)
{
	for (int p = 0; p < g->nvalues; p++)
		if (g->values[p].part_of == v)
			return 1;
	return 0;
}

int hp_whole_read(struct hp_session *s, int v, uint64_t at, uint64_t len, void *dst)
{
	if (!has_parts(s->g, v))
		return hp_session_read_value(s, v, at, len, dst);
	return through_parts(s, v, at, len, dst, 0);
}

int hp_whole_write(struct hp_session *s, int v, uint64_t at, uint64_t len, const void *src)
{
	if (!has_parts(s->g, v))
		return hp_session_write_value(s, v, at, len, src);
	return through_parts(s, v, at, len, (void *)src, 1);
}
