/* Ranks without MPI (built with -Dmpi=disabled or without Open MPI): one
 * process is the whole job; under a launcher, say why it cannot join. */
#include <string.h>

#include "hpdlf/error.h"
#include "exec/comm.h"

int hp_comm_init(void)
{
	int r, n;

	if (hp_comm_env(&r, &n) && n != 1)
		return hp_error(HP_EUNSUPPORTED, "rank %d of %d: this hpdlf-exec was built without MPI "
				"(meson -Dmpi=enabled with libopenmpi-dev); it cannot train across ranks", r, n);
	return 0;
}

int hp_comm_rank(void)
{
	return 0;
}

int hp_comm_size(void)
{
	return 1;
}

int hp_comm_allreduce(void *buf, size_t count, enum hp_dtype dt)
{
	(void)buf;
	(void)count;
	(void)dt;
	return 0;
}

int hp_comm_allreduce_side(double *buf, size_t count)
{
	(void)buf;
	(void)count;
	return 0;
}

int hp_comm_minmax_u64(uint64_t v, uint64_t *min, uint64_t *max)
{
	*min = *max = v;
	return 0;
}

int hp_comm_bcast(void *buf, size_t bytes, int root)
{
	(void)buf;
	(void)bytes;
	(void)root;
	return 0;
}

int hp_comm_barrier(void)
{
	return 0;
}

int hp_comm_arrive(void)
{
	return 0;
}

void hp_comm_finalize(void)
{
}

int hp_comm_reduce_scatter(const float *send, float *recv, const int *counts)
{
	memcpy(recv, send, (size_t)counts[0] * sizeof *recv);
	return 0;
}

int hp_comm_allgatherv(const float *send, float *recv, const int *counts, const int *displs)
{
	memcpy(recv + displs[0], send, (size_t)counts[0] * sizeof *recv);
	return 0;
}

int hp_comm_isend(const void *buf, size_t bytes, int peer, int tag, struct hp_comm_req **out)
{
	(void)buf;
	(void)bytes;
	(void)tag;
	*out = NULL;
	return hp_error(HP_EUNSUPPORTED, "no rank %d to send to: built without MPI", peer);
}

int hp_comm_irecv(void *buf, size_t bytes, int peer, int tag, struct hp_comm_req **out)
{
	(void)buf;
	(void)bytes;
	(void)tag;
	*out = NULL;
	return hp_error(HP_EUNSUPPORTED, "no rank %d to receive from: built without MPI", peer);
}

int hp_comm_req_wait(struct hp_comm_req *q)
{
	(void)q;
	return 0;
}

int hp_comm_group_split(int color, int key)
{
	(void)color;
	(void)key;
	return 0;
}

int hp_comm_group_allreduce(float *buf, size_t count)
{
	(void)buf;
	(void)count;
	return 0;
}

int hp_comm_group_rank(void)
{
	return 0;
}

int hp_comm_group_size(void)
{
	return 1;
}

int hp_comm_group_reduce_scatter(const float *send, float *recv, const int *counts)
{
	return hp_comm_reduce_scatter(send, recv, counts);
}

int hp_comm_group_allgatherv(const float *send, float *recv, const int *counts, const int *displs)
{
	return hp_comm_allgatherv(send, recv, counts, displs);
}

int hp_comm_group_arrive(void)
{
	return 0;
}

int hp_comm_group_allreduce_side(double *buf, size_t count)
{
	(void)buf;
	(void)count;
	return 0;
}
