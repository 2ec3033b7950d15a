/* Without MPI or without the remote tier there are no daemon mailboxes
 * (comm_mbox.h): asgd.c asks for them only when the store has daemons. */
#include "hpdlf/error.h"
#include "exec/comm_mbox.h"

int hp_mbox_open_store(struct hs_tier *daemons, size_t nfloats, struct hp_mbox **out)
{
	(void)daemons;
	(void)nfloats;
	*out = NULL;
	return hp_error(HP_EUNSUPPORTED, "asynchronous-SGD mailboxes in the store's daemons need MPI and the remote "
			"tier (libfabric, libsodium)");
}
