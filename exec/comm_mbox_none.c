/* Mailboxes without MPI: one process is the whole job and has no peer to
 * exchange with (comm_mbox.h). */
#include "hpdlf/error.h"
#include "exec/comm_mbox.h"

int hp_mbox_open(size_t nfloats, struct hp_mbox **out)
{
	(void)nfloats;
	*out = NULL;
	return hp_error(HP_EUNSUPPORTED, "asynchronous SGD across ranks needs MPI (built without it)");
}

int hp_mbox_put(struct hp_mbox *m, int peer, int64_t step, const float *state)
{
	(void)m;
	(void)step;
	(void)state;
	return hp_error(HP_EINTERNAL, "no mailbox of rank %d without MPI", peer);
}

int hp_mbox_take(struct hp_mbox *m, int from, float *dst, struct hp_mbox_msg *msg)
{
	(void)m;
	(void)from;
	(void)dst;
	(void)msg;
	return 0;
}

void hp_mbox_close(struct hp_mbox *m)
{
	(void)m;
}
