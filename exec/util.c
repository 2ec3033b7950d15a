/* Small executor utilities: option defaults (no file that uses them
 * needs a session), the CPU count. */
#include <string.h>
#include <unistd.h>

#include "exec/exec_internal.h"

int hp_exec_online_cpus(void)
{
	long n = sysconf(_SC_NPROCESSORS_ONLN);

	return n > 0 ? (int)n : 1;
}

void hp_exec_opts_init(struct hp_exec_opts *o, size_t size)
{
	memset(o, 0, size);
	o->size = size;
	o->seed = 1;
}
