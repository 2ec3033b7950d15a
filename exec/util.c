/* Small executor utilities: option defaults (no file that uses them
 * needs a session). */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "exec/exec_internal.h"

void hp_exec_opts_init(struct hp_exec_opts *o, size_t size)
{
	memset(o, 0, size);
	o->size = size;
	o->seed = 1;
}

uint64_t hp_prof_now_ns(const struct hp_prof *p)
{
	struct timespec ts;

	if (!p)
		return 0;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

void hp_prof_add(struct hp_prof *p, int i, uint64_t t0_ns)
{
	if (!p)
		return;
	__atomic_fetch_add(&p->ns[i], hp_prof_now_ns(p) - t0_ns, __ATOMIC_RELAXED);
	__atomic_fetch_add(&p->calls[i], 1, __ATOMIC_RELAXED);
}

void hp_node_release(struct hp_node *n)
{
	if (n->op && n->op->release)
		n->op->release(n);
	else
		free(n->priv);
	n->priv = NULL;
}
