/* Honest crashes for the programs.  Debian's libfabric links libinfinipath
 * and libpsm2, whose load-time constructors catch SEGV, BUS, ILL, ABRT, INT
 * and TERM: a crash then prints a bogus "Backtrace", writes *.btr files into
 * the working directory, runs atexit handlers on a corrupt heap and exits 1
 * (our run-time-failure status), with no core dump.  A constructor of the
 * executable runs after those of the libraries it links, so here every
 * such signal gets its default disposition back before main(): a crash
 * dumps core and ends with status 128+N, and the programs install their own
 * INT/TERM handlers afterwards where they want them.  The library itself
 * never touches signal dispositions. */
#include <signal.h>
#include <stddef.h>

__attribute__((constructor)) static void hp_tool_default_signals(void)
{
	static const int sigs[] = { SIGSEGV, SIGBUS, SIGILL, SIGABRT, SIGFPE, SIGINT, SIGTERM };
	struct sigaction dfl = { .sa_handler = SIG_DFL }, old;

	for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++)
		if (sigaction(sigs[i], NULL, &old) == 0 && old.sa_handler != SIG_DFL && old.sa_handler != SIG_IGN)
			sigaction(sigs[i], &dfl, NULL);
}
