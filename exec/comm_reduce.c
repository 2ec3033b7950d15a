/* A bucket's reduction (the AllReduce node of kernels/comm_op.c) run
 * through the job's communicator.  The sum is MPI's, over a fixed rank
 * count and fixed buffers, then scaled by 1/ranks here: the same bits on
 * every rank and in every run with that many ranks. */
#include <string.h>

#include "hpdlf/error.h"
#include "hpdlf/graph.h"
#include "exec/comm.h"

int hp_comm_is_allreduce(const struct hp_node *n)
{
	return !strcmp(n->op_type, "AllReduce") && !strcmp(n->domain, "ai.hpdlf");
}

static size_t bucket_floats(const struct hp_kargs *a)
{
	size_t k = 0;

	for (int i = 1; i < a->nin; i++)
		k += (size_t)hp_shape_numel(&a->in[i].shape);
	return k;
}

static void scale(float *dst, const float *src, size_t k, float s)
{
	for (size_t j = 0; j < k; j++)
		dst[j] = src[j] * s;
}

int hp_comm_run_allreduce(const struct hp_node *n, const struct hp_kargs *a)
{
	float s = 1.0f / (float)hp_attr_int(n, "ranks", 1);
	size_t total = bucket_floats(a), off = 0;
	float *ws = a->ws;
	int rc = 0;

	if (a->out[0].data)
		*(float *)a->out[0].data = 0;
	if (ws && a->ws_size >= total * sizeof *ws) {
		for (int i = 1; i < a->nin; i++) {
			size_t k = (size_t)hp_shape_numel(&a->in[i].shape);
			memcpy(ws + off, a->in[i].data, k * sizeof *ws);
			off += k;
		}
		if ((rc = hp_comm_allreduce(ws, total, HP_F32)) < 0)
			return hp_error_prefix(rc, "node '%s' (AllReduce)", n->name);
		off = 0;
		for (int i = 1; i < a->nin; i++) {
			size_t k = (size_t)hp_shape_numel(&a->in[i].shape);
			scale(a->out[i].data, ws + off, k, s);
			off += k;
		}
		return 0;
	}
	for (int i = 1; i < a->nin && rc == 0; i++) {
		size_t k = (size_t)hp_shape_numel(&a->in[i].shape);
		if (a->out[i].data != a->in[i].data)
			memcpy(a->out[i].data, a->in[i].data, k * sizeof(float));
		rc = hp_comm_allreduce(a->out[i].data, k, HP_F32);
		scale(a->out[i].data, a->out[i].data, k, s);
	}
	return rc < 0 ? hp_error_prefix(rc, "node '%s' (AllReduce)", n->name) : 0;
}
