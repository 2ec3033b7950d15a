/* The planner's eviction candidates (plan_heap.h): a binary heap. */
#include <errno.h>
#include <stdlib.h>

#include "exec/plan_heap.h"

/* a goes before b: the later next use, then the smaller value */
static int before(const struct hp_vent *a, const struct hp_vent *b)
{
	return a->nu > b->nu || (a->nu == b->nu && a->v < b->v);
}

int hp_vheap_push(struct hp_vheap *h, int nu, int v)
{
	int i;

	if (h->n == h->cap) {
		int cap = h->cap ? 2 * h->cap : 1024;
		void *q = realloc(h->e, (size_t)cap * sizeof *h->e);
		if (!q)
			return -ENOMEM;
		h->e = q;
		h->cap = cap;
	}
	struct hp_vent x = { nu, v };
	for (i = h->n++; i > 0 && before(&x, &h->e[(i - 1) / 2]); i = (i - 1) / 2)
		h->e[i] = h->e[(i - 1) / 2];
	h->e[i] = x;
	return 0;
}

void hp_vheap_pop(struct hp_vheap *h)
{
	struct hp_vent x;
	int i = 0;

	if (!h->n)
		return;
	x = h->e[--h->n];
	for (;;) {
		int c = 2 * i + 1;
		if (c >= h->n)
			break;
		if (c + 1 < h->n && before(&h->e[c + 1], &h->e[c]))
			c++;
		if (!before(&h->e[c], &x))
			break;
		h->e[i] = h->e[c];
		i = c;
	}
	h->e[i] = x;
}

void hp_vheap_free(struct hp_vheap *h)
{
	free(h->e);
	h->e = NULL;
	h->n = h->cap = 0;
}
