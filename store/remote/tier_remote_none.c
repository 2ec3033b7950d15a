/* Built without libfabric or libsodium: the remote tier is refused with a
 * clear message. */
#include "hpdlf/error.h"
#include "store/remote/remote.h"

int hs_tier_remote_open_spec(const struct hs_remote_spec *r, const char *name, struct hs_tier **out)
{
	(void)r;
	(void)out;
	return hp_error(HP_EUNSUPPORTED, "%s: hpdlf was built without libfabric/libsodium (the remote tier needs both)",
			name);
}
