/* Internal: names built piece by piece into a fixed buffer, truncated
 * exactly as snprintf truncates (the first len - 1 characters of the whole,
 * always terminated).  The autodiff, the weight split and the recompute
 * search name every node and value they add, 150,000 names and more for
 * the 10,001-node MLP's --plan, and glibc's snprintf parsing its format for
 * each took 5% of that run's CPU. */
#ifndef HPDLF_COMMON_NAME_H
#define HPDLF_COMMON_NAME_H

#include <stddef.h>
#include <string.h>

struct hp_name {
	char *buf;
	size_t len, pos; /* pos: characters kept, at most len - 1 */
};

static inline void hp_name_init(struct hp_name *b, char *buf, size_t len)
{
	b->buf = buf;
	b->len = len;
	b->pos = 0;
	if (len)
		buf[0] = 0;
}

static inline void hp_name_mem(struct hp_name *b, const char *s, size_t l)
{
	size_t room = b->len ? b->len - 1 - b->pos : 0;

	if (l > room)
		l = room;
	memcpy(b->buf + b->pos, s, l);
	b->pos += l;
	if (b->len)
		b->buf[b->pos] = 0;
}

/* "%s" */
static inline void hp_name_str(struct hp_name *b, const char *s)
{
	hp_name_mem(b, s, strlen(s));
}

/* "%d" */
static inline void hp_name_int(struct hp_name *b, int v)
{
	char t[16];
	int i = (int)sizeof t;
	unsigned u = v < 0 ? 0u - (unsigned)v : (unsigned)v;

	do {
		t[--i] = (char)('0' + u % 10);
		u /= 10;
	} while (u);
	if (v < 0)
		t[--i] = '-';
	hp_name_mem(b, t + i, sizeof t - (size_t)i);
}

#endif
