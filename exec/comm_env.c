/* Launcher detection: the environment mpirun, srun or a PMI launcher gives
 * its processes, read without loading or initialising MPI; and the job's
 * link figures (set once at start-up, read by the planner). */
#include <stdlib.h>

#include "exec/comm.h"

static int env_int(const char *name, int *out)
{
	const char *s = getenv(name);
	char *end;
	long v;

	if (!s || !*s)
		return 0;
	v = strtol(s, &end, 10);
	if (*end || v < 0 || v > 1 << 24)
		return 0;
	*out = (int)v;
	return 1;
}

/* Open MPI's mpirun, a PMIx server, a PMI-1/2 launcher (MPICH's hydra),
 * then Slurm's srun: one task under srun is a plain process (sbatch's
 * own shell sets SLURM_NTASKS too). */
int hp_comm_env(int *rank, int *size)
{
	int r = 0, n = 0;

	if (env_int("OMPI_COMM_WORLD_SIZE", &n) && env_int("OMPI_COMM_WORLD_RANK", &r))
		goto found;
	if (env_int("PMIX_RANK", &r)) {
		n = 0;
		if (!env_int("PMIX_SIZE", &n))
			env_int("OMPI_COMM_WORLD_SIZE", &n);
		goto found;
	}
	if (env_int("PMI_SIZE", &n) && env_int("PMI_RANK", &r))
		goto found;
	if (env_int("SLURM_NTASKS", &n) && n > 1 && env_int("SLURM_PROCID", &r))
		goto found;
	*rank = 0;
	*size = 1;
	return 0;
found:
	*rank = r;
	*size = n; /* 0: the launcher did not say; MPI will */
	return 1;
}

static double link_GBps, link_lat_us;

void hp_comm_link_set(double GBps, double lat_us)
{
	link_GBps = GBps;
	link_lat_us = lat_us;
}

double hp_comm_link(double *lat_us)
{
	*lat_us = link_lat_us;
	return link_GBps;
}
