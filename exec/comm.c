/* Ranks over MPI.  MPI is initialised only when a launcher started this
 * process (comm_env.c), once, and every call runs under one mutex: the
 * task net's I/O threads reduce gradient buckets while the main thread
 * reduces the loss, and MPI_THREAD_SERIALIZED asks for no more than that. */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include <mpi.h>

#include "hpdlf/error.h"
#include "common/keep.h"
#include "exec/comm.h"
#include "exec/comm_wait.h"
#include "exec/comm_watch.h"

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static int inited, finalized, rank, size = 1;
/* A second communicator for collectives the compute workers issue
 * (--sync-bn statistics) while a bucket's reduction is in flight on an I/O
 * thread: each communicator keeps its own order on every rank. */
static MPI_Comm side = MPI_COMM_NULL;
/* Pipeline stages' point-to-point messages (tags of their own, never
 * mixed with a collective's) and the group of a stage's replicas, whose
 * gradients --pipeline with data parallelism sums (hp_comm_group_split). */
static MPI_Comm p2p = MPI_COMM_NULL, group = MPI_COMM_NULL;
/* The group's own second communicator (--sync-bn's sums with --pipeline,
 * issued by compute workers) and this rank's place in the group. */
static MPI_Comm group_side = MPI_COMM_NULL;
static int group_rank, group_size = 1;

static int mpi_fail(int err, const char *what)
{
	char msg[MPI_MAX_ERROR_STRING];
	int len = 0;

	MPI_Error_string(err, msg, &len);
	msg[len < (int)sizeof msg ? len : (int)sizeof msg - 1] = 0;
	return hp_error(HP_EPROTO, "rank %d of %d: %s failed: %s (a peer rank is lost or disagrees)", rank, size,
			what, msg);
}

int hp_comm_init(void)
{
	int r, n, provided, rc = 0, err;
	struct hp_keep keep;

	if (!hp_comm_env(&r, &n))
		return 0;
	pthread_mutex_lock(&mu);
	if (inited)
		goto out;
	/* A rank waiting in a collective busy-polls by default: that thread
	 * takes a core from the compute workers (one owner of the cores) and,
	 * with ranks sharing cores, starves the store's io_uring workers until
	 * the peer it waits for stalls too (seen: 2 ranks on 2 cores hanging
	 * out of core).  Yield while idle unless the user chose otherwise. */
	setenv("OMPI_MCA_mpi_yield_when_idle", "1", 0);
	/* MPI_Init may load libfabric (Open MPI's ofi components) and with it
	 * libpsm, after the programs set their handlers (common/keep.h) */
	hp_keep_save(&keep);
	err = MPI_Init_thread(NULL, NULL, MPI_THREAD_SERIALIZED, &provided);
	hp_keep_restore(&keep);
	if (err != MPI_SUCCESS) {
		rc = hp_error(HP_EPROTO, "rank %d: MPI_Init_thread failed (code %d)", r, err);
		goto out;
	}
	/* errors come back as codes, so a lost peer is a message naming us */
	MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &size);
	if (MPI_Comm_dup(MPI_COMM_WORLD, &side) == MPI_SUCCESS)
		MPI_Comm_set_errhandler(side, MPI_ERRORS_RETURN);
	if (MPI_Comm_dup(MPI_COMM_WORLD, &p2p) == MPI_SUCCESS)
		MPI_Comm_set_errhandler(p2p, MPI_ERRORS_RETURN);
	inited = 1;
	if (provided < MPI_THREAD_SERIALIZED)
		rc = hp_error(HP_EUNSUPPORTED, "rank %d: MPI gives thread level %d, hpdlf needs SERIALIZED", rank,
			      provided);
out:
	pthread_mutex_unlock(&mu);
	return rc;
}

void hp_comm_lock(void)
{
	pthread_mutex_lock(&mu);
}

void hp_comm_unlock(void)
{
	pthread_mutex_unlock(&mu);
}

int hp_comm_rank(void)
{
	return rank;
}

int hp_comm_size(void)
{
	return size;
}

static int allreduce_on(MPI_Comm comm, void *buf, size_t count, enum hp_dtype dt);

int hp_comm_allreduce(void *buf, size_t count, enum hp_dtype dt)
{
	return allreduce_on(MPI_COMM_WORLD, buf, count, dt);
}

int hp_comm_allreduce_side(double *buf, size_t count)
{
	if (size > 1 && side == MPI_COMM_NULL)
		return hp_error(HP_EPROTO, "rank %d of %d: no second communicator (MPI_Comm_dup failed)", rank, size);
	return allreduce_on(side, buf, count, HP_F64);
}

/* MPI counts are ints: big buffers go in pieces of at most 1 G elements. */
static int allreduce_on(MPI_Comm comm, void *buf, size_t count, enum hp_dtype dt)
{
	MPI_Datatype t = dt == HP_F64 ? MPI_DOUBLE : MPI_FLOAT;
	size_t esz = dt == HP_F64 ? 8 : 4;
	int err = MPI_SUCCESS;

	if (dt != HP_F32 && dt != HP_F64)
		return hp_error(HP_EINTERNAL, "allreduce of %s: only float32 and float64", hp_dtype_name(dt));
	if (size == 1 || !count)
		return 0;
	pthread_mutex_lock(&mu);
	hp_comm_watch_enter("allreduce");
	for (size_t off = 0; off < count && err == MPI_SUCCESS; off += 1u << 30) {
		size_t k = count - off < (1u << 30) ? count - off : (1u << 30);
		MPI_Request req;
		/* nonblocking, waited for asleep: an early rank leaves the core to
		 * the others' work (comm_wait.c) */
		err = MPI_Iallreduce(MPI_IN_PLACE, (char *)buf + off * esz, (int)k, t, MPI_SUM, comm, &req);
		if (err == MPI_SUCCESS)
			err = hp_comm_wait(&req, &mu);
	}
	hp_comm_watch_leave();
	pthread_mutex_unlock(&mu);
	return err == MPI_SUCCESS ? 0 : mpi_fail(err, "allreduce");
}

int hp_comm_minmax_u64(uint64_t v, uint64_t *min, uint64_t *max)
{
	uint64_t in[2] = { v, ~v }, out[2];
	int err;

	if (size == 1) {
		*min = *max = v;
		return 0;
	}
	pthread_mutex_lock(&mu);
	hp_comm_watch_enter("allreduce");
	err = MPI_Allreduce(in, out, 2, MPI_UINT64_T, MPI_MAX, MPI_COMM_WORLD);
	hp_comm_watch_leave();
	pthread_mutex_unlock(&mu);
	if (err != MPI_SUCCESS)
		return mpi_fail(err, "allreduce");
	*max = out[0];
	*min = ~out[1];
	return 0;
}

int hp_comm_bcast(void *buf, size_t bytes, int root)
{
	int err = MPI_SUCCESS;

	if (size == 1)
		return 0;
	pthread_mutex_lock(&mu);
	hp_comm_watch_enter("broadcast");
	for (size_t off = 0; off < bytes && err == MPI_SUCCESS; off += 1u << 30) {
		size_t k = bytes - off < (1u << 30) ? bytes - off : (1u << 30);
		err = MPI_Bcast((char *)buf + off, (int)k, MPI_BYTE, root, MPI_COMM_WORLD);
	}
	hp_comm_watch_leave();
	pthread_mutex_unlock(&mu);
	return err == MPI_SUCCESS ? 0 : mpi_fail(err, "broadcast");
}

int hp_comm_barrier(void)
{
	int err;

	if (size == 1)
		return 0;
	pthread_mutex_lock(&mu);
	hp_comm_watch_enter("barrier");
	err = MPI_Barrier(MPI_COMM_WORLD);
	hp_comm_watch_leave();
	pthread_mutex_unlock(&mu);
	return err == MPI_SUCCESS ? 0 : mpi_fail(err, "barrier");
}

/* nothing moves while a peer is late: long sleeps cost no bandwidth */
#define ARRIVE_WAIT_MAX_NS 500000L

static int arrive_on(MPI_Comm comm)
{
	MPI_Request req;
	int err;

	pthread_mutex_lock(&mu);
	hp_comm_watch_enter("arrival barrier before a bucket's collective");
	err = MPI_Ibarrier(comm, &req);
	if (err == MPI_SUCCESS)
		err = hp_comm_wait_cap(&req, &mu, ARRIVE_WAIT_MAX_NS);
	hp_comm_watch_leave();
	pthread_mutex_unlock(&mu);
	return err == MPI_SUCCESS ? 0 : mpi_fail(err, "barrier");
}

int hp_comm_arrive(void)
{
	return size == 1 ? 0 : arrive_on(MPI_COMM_WORLD);
}

void hp_comm_finalize(void)
{
	/* --sync async: the watchdog watches on through MPI_Finalize, which
	 * waits for every rank: a peer lost meanwhile ends this process there
	 * (comm_watch.h) */
	int late = hp_comm_watch_tolerant();

	if (!late)
		hp_comm_watch_stop(); /* a goodbye first: this rank is done, not lost */
	pthread_mutex_lock(&mu);
	if (inited && !finalized && side != MPI_COMM_NULL)
		MPI_Comm_free(&side);
	if (inited && !finalized && p2p != MPI_COMM_NULL)
		MPI_Comm_free(&p2p);
	if (inited && !finalized && group != MPI_COMM_NULL)
		MPI_Comm_free(&group);
	if (inited && !finalized && group_side != MPI_COMM_NULL)
		MPI_Comm_free(&group_side);
	if (inited && !finalized)
		MPI_Finalize();
	finalized = 1;
	pthread_mutex_unlock(&mu);
	if (late)
		hp_comm_watch_stop();
}

/* Reduce-scatter of float32 over comm (this rank `me` of it, n ranks):
 * send holds every rank's block in rank order (counts[q] elements for
 * rank q), recv gets this rank's block summed. */
static int reduce_scatter_on(MPI_Comm comm, int me, int n, const float *send, float *recv, const int *counts)
{
	int err;

	if (n == 1) {
		memcpy(recv, send, (size_t)counts[0] * sizeof *recv);
		return 0;
	}
	MPI_Request req;
	pthread_mutex_lock(&mu);
	/* nonblocking, waited for asleep like allreduce_on (comm_wait.c) */
	hp_comm_watch_enter("reduce-scatter");
	err = MPI_Ireduce_scatter(send, recv, counts, MPI_FLOAT, MPI_SUM, comm, &req);
	if (err == MPI_SUCCESS)
		err = hp_comm_wait(&req, &mu);
	hp_comm_watch_leave();
	pthread_mutex_unlock(&mu);
	(void)me;
	return err == MPI_SUCCESS ? 0 : mpi_fail(err, "reduce-scatter");
}

/* All-gather of float32 blocks of counts[q] elements at displs[q]. */
static int allgatherv_on(MPI_Comm comm, int me, int n, const float *send, float *recv, const int *counts,
			 const int *displs)
{
	int err;

	if (n == 1) {
		memcpy(recv + displs[0], send, (size_t)counts[0] * sizeof *recv);
		return 0;
	}
	MPI_Request req;
	pthread_mutex_lock(&mu);
	hp_comm_watch_enter("all-gather");
	err = MPI_Iallgatherv(send, counts[me], MPI_FLOAT, recv, counts, displs, MPI_FLOAT, comm, &req);
	if (err == MPI_SUCCESS)
		err = hp_comm_wait(&req, &mu);
	hp_comm_watch_leave();
	pthread_mutex_unlock(&mu);
	return err == MPI_SUCCESS ? 0 : mpi_fail(err, "all-gather");
}

int hp_comm_reduce_scatter(const float *send, float *recv, const int *counts)
{
	return reduce_scatter_on(MPI_COMM_WORLD, rank, size, send, recv, counts);
}

int hp_comm_allgatherv(const float *send, float *recv, const int *counts, const int *displs)
{
	return allgatherv_on(MPI_COMM_WORLD, rank, size, send, recv, counts, displs);
}

/* A pipeline message's wait sleeps at most this long between tests
 * (comm_wait.h). */
#define P2P_WAIT_MAX_NS 200000L

struct hp_comm_req {
	MPI_Request r;
	const char *what; /* for the message of a failed wait */
};

/* One nonblocking message of bytes to or from peer (MPI counts are ints:
 * a boundary of 2 GiB or more is refused, never cut silently). */
static int p2p_start(void *buf, size_t bytes, int peer, int tag, int send, struct hp_comm_req **out)
{
	struct hp_comm_req *q;
	int err;

	*out = NULL;
	if (bytes > (size_t)INT32_MAX)
		return hp_error(HP_EUNSUPPORTED, "rank %d: a pipeline message of %zu bytes (at most 2 GiB: use more "
				"--micro-batches)", rank, bytes);
	if (p2p == MPI_COMM_NULL)
		return hp_error(HP_EPROTO, "rank %d of %d: no point-to-point communicator", rank, size);
	if (!(q = calloc(1, sizeof *q)))
		return hp_error(-ENOMEM, "out of memory");
	q->what = send ? "pipeline send" : "pipeline receive";
	pthread_mutex_lock(&mu);
	err = send ? MPI_Isend(buf, (int)bytes, MPI_BYTE, peer, tag, p2p, &q->r)
		   : MPI_Irecv(buf, (int)bytes, MPI_BYTE, peer, tag, p2p, &q->r);
	pthread_mutex_unlock(&mu);
	if (err != MPI_SUCCESS) {
		free(q);
		return mpi_fail(err, send ? "MPI_Isend" : "MPI_Irecv");
	}
	*out = q;
	return 0;
}

int hp_comm_isend(const void *buf, size_t bytes, int peer, int tag, struct hp_comm_req **out)
{
	return p2p_start((void *)buf, bytes, peer, tag, 1, out);
}

int hp_comm_irecv(void *buf, size_t bytes, int peer, int tag, struct hp_comm_req **out)
{
	return p2p_start(buf, bytes, peer, tag, 0, out);
}

int hp_comm_req_wait(struct hp_comm_req *q)
{
	int err;

	if (!q)
		return 0;
	pthread_mutex_lock(&mu);
	/* the watchdog's deadline covers a peer that never sends */
	hp_comm_watch_enter(q->what);
	err = hp_comm_wait_cap(&q->r, &mu, P2P_WAIT_MAX_NS);
	hp_comm_watch_leave();
	pthread_mutex_unlock(&mu);
	if (err != MPI_SUCCESS)
		return mpi_fail(err, q->what);
	free(q);
	return 0;
}

int hp_comm_group_split(int color, int key)
{
	int err;

	if (size == 1)
		return 0;
	pthread_mutex_lock(&mu);
	hp_comm_watch_enter("communicator split");
	if (group != MPI_COMM_NULL)
		MPI_Comm_free(&group);
	if (group_side != MPI_COMM_NULL)
		MPI_Comm_free(&group_side);
	err = MPI_Comm_split(MPI_COMM_WORLD, color, key, &group);
	if (err == MPI_SUCCESS) {
		MPI_Comm_set_errhandler(group, MPI_ERRORS_RETURN);
		MPI_Comm_rank(group, &group_rank);
		MPI_Comm_size(group, &group_size);
		err = MPI_Comm_dup(group, &group_side);
	}
	if (err == MPI_SUCCESS)
		MPI_Comm_set_errhandler(group_side, MPI_ERRORS_RETURN);
	hp_comm_watch_leave();
	pthread_mutex_unlock(&mu);
	return err == MPI_SUCCESS ? 0 : mpi_fail(err, "MPI_Comm_split");
}

int hp_comm_group_rank(void)
{
	return group == MPI_COMM_NULL ? rank : group_rank;
}

int hp_comm_group_size(void)
{
	return group == MPI_COMM_NULL ? size : group_size;
}

int hp_comm_group_reduce_scatter(const float *send, float *recv, const int *counts)
{
	if (group == MPI_COMM_NULL)
		return hp_comm_reduce_scatter(send, recv, counts);
	return reduce_scatter_on(group, group_rank, group_size, send, recv, counts);
}

int hp_comm_group_allgatherv(const float *send, float *recv, const int *counts, const int *displs)
{
	if (group == MPI_COMM_NULL)
		return hp_comm_allgatherv(send, recv, counts, displs);
	return allgatherv_on(group, group_rank, group_size, send, recv, counts, displs);
}

int hp_comm_group_arrive(void)
{
	if (group == MPI_COMM_NULL)
		return hp_comm_arrive();
	return group_size == 1 ? 0 : arrive_on(group);
}

int hp_comm_group_allreduce_side(double *buf, size_t count)
{
	if (group_side == MPI_COMM_NULL || group_size == 1)
		return group == MPI_COMM_NULL ? hp_comm_allreduce_side(buf, count) : 0;
	return allreduce_on(group_side, buf, count, HP_F64);
}

int hp_comm_group_allreduce(float *buf, size_t count)
{
	int err = MPI_SUCCESS, gs = 1;

	if (group == MPI_COMM_NULL || !count)
		return 0;
	MPI_Comm_size(group, &gs);
	if (gs == 1)
		return 0;
	pthread_mutex_lock(&mu);
	hp_comm_watch_enter("allreduce");
	for (size_t off = 0; off < count && err == MPI_SUCCESS; off += 1u << 30) {
		size_t k = count - off < (1u << 30) ? count - off : (1u << 30);
		MPI_Request req;
		err = MPI_Iallreduce(MPI_IN_PLACE, buf + off, (int)k, MPI_FLOAT, MPI_SUM, group, &req);
		if (err == MPI_SUCCESS)
			err = hp_comm_wait(&req, &mu);
	}
	hp_comm_watch_leave();
	pthread_mutex_unlock(&mu);
	return err == MPI_SUCCESS ? 0 : mpi_fail(err, "allreduce");
}
