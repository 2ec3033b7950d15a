/* A bucket's reduction (the AllReduce node of kernels/comm_op.c) run
 * through the job's communicator.  The sum is MPI's, over a fixed rank
 * count and fixed piece sizes, then scaled by 1/ranks here: the same bits
 * on every rank and in every run with that many ranks.
 *
 * MPI never sees store memory: the gradients are packed into a staging
 * buffer of this module's own.  Store tensors live in frames the store
 * moves with mremap and registers with io_uring; MPI's single-copy paths
 * (CMA's process_vm_readv between local ranks, RDMA registration caches
 * between nodes) must not read pages that move under them (seen here: a
 * local peer's process_vm_readv spinning inside an allreduce). */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "hpdlf/error.h"
#include "hpdlf/graph.h"
#include "exec/comm.h"

#define STAGE_FLOATS ((size_t)1 << 20) /* 4 MiB: at the link's bandwidth, not more memory */

static pthread_mutex_t stage_mu = PTHREAD_MUTEX_INITIALIZER;
static float *stage;

int hp_comm_is_allreduce(const struct hp_node *n)
{
	return !strcmp(n->op_type, "AllReduce") && !strcmp(n->domain, "ai.hpdlf");
}

/* Walk the bucket's gradients as one concatenated array: copy [off, off +
 * k) between it and buf (to_buf: gather the inputs, else scatter the
 * outputs scaled by s). */
static void move(const struct hp_kargs *a, size_t off, size_t k, float *buf, int to_buf, float s)
{
	size_t base = 0;

	for (int i = 1; i < a->nin && k; i++) {
		size_t len = (size_t)hp_shape_numel(&a->in[i].shape);
		if (off >= base + len) {
			base += len;
			continue;
		}
		size_t from = off - base, m = len - from < k ? len - from : k;
		if (to_buf) {
			memcpy(buf, (const float *)a->in[i].data + from, m * sizeof *buf);
		} else {
			float *y = (float *)a->out[i].data + from;
			for (size_t j = 0; j < m; j++)
				y[j] = buf[j] * s;
		}
		buf += m;
		off += m;
		k -= m;
		base += len;
	}
}

static int reduce_staged(const struct hp_kargs *a, size_t total, float s)
{
	int rc = 0;

	for (size_t off = 0; off < total && rc == 0; off += STAGE_FLOATS) {
		size_t k = total - off < STAGE_FLOATS ? total - off : STAGE_FLOATS;
		move(a, off, k, stage, 1, s);
		if ((rc = hp_comm_allreduce(stage, k, HP_F32)) == 0)
			move(a, off, k, stage, 0, s);
	}
	return rc;
}

int hp_comm_run_allreduce(const struct hp_node *n, const struct hp_kargs *a)
{
	float s = 1.0f / (float)hp_attr_int(n, "ranks", 1);
	size_t total = 0;
	int rc;

	if (a->out[0].data)
		*(float *)a->out[0].data = 0;
	for (int i = 1; i < a->nin; i++)
		total += (size_t)hp_shape_numel(&a->in[i].shape);
	pthread_mutex_lock(&stage_mu);
	if (!stage && !(stage = malloc(STAGE_FLOATS * sizeof *stage))) {
		pthread_mutex_unlock(&stage_mu);
		return hp_error(-ENOMEM, "node '%s' (AllReduce): no memory for its staging buffer", n->name);
	}
	rc = reduce_staged(a, total, s);
	pthread_mutex_unlock(&stage_mu);
	return rc < 0 ? hp_error_prefix(rc, "node '%s' (AllReduce)", n->name) : 0;
}
