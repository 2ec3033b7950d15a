/* hpdlf-exec's store tiers: --tier paths and the job's hpdlf-store daemons
 * (opened through the public hs_tier_open). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hpdlf/error.h"
#include "hpdlf/store.h"
#include "tools/exec_cli.h"

/* Daemons were asked for explicitly (--store, --hostfile, HPDLF_STORE), or
 * may be there because this is a Slurm job (then they are optional). */
static int wanted(const struct cli *c, int *optional)
{
	*optional = 0;
	if (c->store || c->hostfile || getenv("HPDLF_STORE"))
		return 1;
	*optional = getenv("SLURM_JOB_NODELIST") != NULL;
	return *optional;
}

/* Opened here, before the model loads, so a bad token file or absent
 * daemons stop the run at once (the store then owns the tier). */
static int open_remote(const struct cli *c, int optional, struct hs_tier **t)
{
	struct hs_tier_spec sp = { .kind = HS_TIER_REMOTE };
	int rc;

	sp.remote.daemons = c->store;
	sp.remote.hostfile = c->hostfile;
	sp.remote.token_file = c->token_file;
	sp.remote.replicas = c->replicas > 0 ? c->replicas : 1;
	sp.remote.optional = optional;
	rc = hs_tier_open(&sp, t);
	if (rc == 0 && !*t)
		fprintf(stderr, "hpdlf-exec: no hpdlf-store daemon of this Slurm job answered (%s); running with local tiers\n",
			hp_errmsg());
	return rc;
}

/* Demotion order: PMEM paths, then the daemons' DRAM, then NVMe paths (or
 * the default spill file when none is given). */
int exec_store_tiers(const struct cli *c, struct hs_tier_spec *specs, int *n)
{
	struct hs_tier_spec local[HS_MAX_TIERS];
	struct hs_tier *remote = NULL;
	int nlocal = 0, optional, rc, k = 0, has_nvme = 0;

	if ((rc = exec_parse_tiers(c, local, &nlocal)) != 0)
		return rc;
	*n = 0;
	if (!wanted(c, &optional)) {
		memcpy(specs, local, (size_t)nlocal * sizeof *specs);
		*n = nlocal;
		return 0;
	}
	rc = open_remote(c, optional, &remote);
	if (rc < 0) {
		fprintf(stderr, "hpdlf-exec: %s\n", hp_errmsg()[0] ? hp_errmsg() : hp_strerror(rc));
		return hp_exit_status(rc) == 2 ? 2 : 1;
	}
	for (int i = 0; i < nlocal; i++)
		if (local[i].kind == HS_TIER_PMEM)
			specs[k++] = local[i];
	if (remote)
		specs[k++] = (struct hs_tier_spec){ .kind = HS_TIER_REMOTE, .tier = remote };
	for (int i = 0; i < nlocal; i++)
		if (local[i].kind != HS_TIER_PMEM) {
			specs[k++] = local[i];
			has_nvme = 1;
		}
	if (!has_nvme && k < HS_MAX_TIERS)
		specs[k++] = (struct hs_tier_spec){ .kind = HS_TIER_NVME }; /* spill file in $TMPDIR */
	*n = k;
	return 0;
}
