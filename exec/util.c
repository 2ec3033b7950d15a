/* Small executor utilities. */
#include <unistd.h>

#include "exec/exec_internal.h"

int hp_exec_online_cpus(void)
{
	long n = sysconf(_SC_NPROCESSORS_ONLN);

	return n > 0 ? (int)n : 1;
}
