/* Affinity and signal handlers kept across a library load (keep.h). */
#include "common/keep.h"

#include <stdlib.h>

static const int kept_signals[HP_KEEP_NSIGNALS] = { SIGSEGV, SIGBUS, SIGILL, SIGABRT, SIGFPE, SIGINT, SIGTERM };

/* libpsm_infinipath (IPATH_) and libpsm2 (HFI_) install their handlers
 * only when these are unset: set, the signals never leave ours, also
 * during the ~0.2 s the constructor sleeps inside dlopen or MPI_Init, where
 * hp_keep_restore comes too late (a SIGTERM there exited 1).  A value
 * already in the environment is kept. */
static void keep_psm_away(void)
{
	static const char *const vars[] = { "IPATH_NO_BACKTRACE", "HFI_NO_BACKTRACE" };

	for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++)
		if (!getenv(vars[i]))
			setenv(vars[i], "1", 0);
}

void hp_keep_save(struct hp_keep *k)
{
	keep_psm_away();
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
