/* Affinity and signal handlers kept across a library load (keep.h). */
#include "common/keep.h"

static const int kept_signals[HP_KEEP_NSIGNALS] = { SIGSEGV, SIGBUS, SIGILL, SIGABRT, SIGFPE, SIGINT, SIGTERM };

void hp_keep_save(struct hp_keep *k)
{
	k->have_cpus = sched_getaffinity(0, sizeof k->cpus, &k->cpus) == 0;
	for (int i = 0; i < HP_KEEP_NSIGNALS; i++)
		sigaction(kept_signals[i], NULL, &k->sa[i]);
}

void hp_keep_restore(const struct hp_keep *k)
{
	if (k->have_cpus)
		sched_setaffinity(0, sizeof k->cpus, &k->cpus);
	for (int i = 0; i < HP_KEEP_NSIGNALS; i++)
		sigaction(kept_signals[i], &k->sa[i], NULL);
}
