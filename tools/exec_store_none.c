/* hpdlf-exec's store tiers without libfabric: --tier paths only. */
#include <stdio.h>
#include <stdlib.h>

#include "hpdlf/store.h"
#include "tools/exec_cli.h"

int exec_store_tiers(const struct cli *c, struct hs_tier_spec *specs, int *n)
{
	if (c->store || c->hostfile || getenv("HPDLF_STORE")) {
		fprintf(stderr, "hpdlf-exec: this build has no remote tier (libfabric/libsodium were not found)\n");
		return 2;
	}
	return exec_parse_tiers(c, specs, n);
}
