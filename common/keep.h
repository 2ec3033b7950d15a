/* What loading libpsm (through libfabric, by the remote tier or by
 * MPI_Init) changes in the process: its constructors pin the calling
 * thread to one core and take SEGV, BUS, ILL, ABRT, FPE, INT and TERM
 * (a SIGTERM then exits 1 instead of 143; a crash dumps no core).  Save
 * the affinity and those handlers before such a load, put them back after:
 *
 *   struct hp_keep k;
 *   hp_keep_save(&k);
 *   dlopen(...) or MPI_Init(...);
 *   hp_keep_restore(&k);
 *
 * hp_keep_save also sets IPATH_NO_BACKTRACE and HFI_NO_BACKTRACE (when
 * unset), so that libpsm takes no signal at all: a signal arriving during
 * the load itself then still meets the process's own handlers.
 *
 * The signal list is that of tools/crash_signals.c. */
#ifndef HPDLF_COMMON_KEEP_H
#define HPDLF_COMMON_KEEP_H

#include <sched.h>
#include <signal.h>

#define HP_KEEP_NSIGNALS 7

struct hp_keep {
	cpu_set_t cpus;
	int have_cpus;
	struct sigaction sa[HP_KEEP_NSIGNALS];
};

void hp_keep_save(struct hp_keep *k);
void hp_keep_restore(const struct hp_keep *k);

#endif
