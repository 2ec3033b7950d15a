/* Default placement policy: evict the chunk whose next use is farthest
 * (Belady with the caller's hints); chunks without a hint count as farthest
 * and among them the least recently used goes first; among chunks with the
 * same hint (a tensor's chunks share one) clean ones go first, as they are
 * dropped without I/O, then the least recently used. */
#include "hpdlf/store.h"

static int better(const struct hs_candidate *a, const struct hs_candidate *b)
{
	if (a->next_use != b->next_use)
		return a->next_use > b->next_use;
	if (a->next_use != HS_NO_HINT && a->dirty != b->dirty)
		return !a->dirty;
	return a->last_use < b->last_use;
}

static long default_victim(void *arg, const struct hs_candidate *c, size_t n)
{
	long best = -1;

	(void)arg;
	for (size_t i = 0; i < n; i++)
		if (best < 0 || better(&c[i], &c[best]))
			best = (long)i;
	return best;
}

const struct hs_policy hs_policy_default = {
	.name = "belady-lru",
	.victim = default_victim,
	.arg = 0,
};
