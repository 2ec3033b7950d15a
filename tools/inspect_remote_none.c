/* Daemon targets in a build without the remote tier (no libfabric or
 * libsodium): say so. */
#include <stdio.h>

#include "hpdlf/error.h"
#include "tools/inspect.h"

void insp_read_remote(struct insp_target *t)
{
	t->state = INSP_ERROR;
	t->rc = HP_EUNSUPPORTED;
	snprintf(t->err, sizeof t->err,
		 "%s: remote targets need the hpdlf-store daemon support, which this build of "
		 "hpdlf-store-inspect does not have (built without libfabric or libsodium)", t->spec);
}
