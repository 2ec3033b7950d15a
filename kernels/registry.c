/* The operator table: every family's ops, looked up by domain and name. */
#include <pthread.h>
#include <string.h>

#include "kernels/ops.h"

static const struct hp_op *const *const families[] = {
	hp_ops_conv, hp_ops_gemm, hp_ops_pool, hp_ops_eltwise, hp_ops_norm,
	hp_ops_softmax, hp_ops_shape, hp_ops_reduce, hp_ops_resize, hp_ops_mask, hp_ops_train,
	hp_ops_loss, hp_ops_index, hp_ops_rnn, hp_ops_norm_extra,
	hp_ops_nms, hp_ops_einsum, hp_ops_misc, hp_ops_quant,
	hp_ops_grid_sample, hp_ops_unique, hp_ops_spectral,
	hp_ops_tfidf, hp_ops_roi_align,
	hp_ops_fused,
};

#define MAX_OPS 512

static const struct hp_op *all_ops[MAX_OPS];
static int nall_ops;
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void gather(void)
{
	for (size_t f = 0; f < sizeof families / sizeof families[0]; f++)
		for (const struct hp_op *const *o = families[f]; *o && nall_ops < MAX_OPS; o++)
			all_ops[nall_ops++] = *o;
}

static int same_domain(const char *a, const char *b)
{
	if (!a || !strcmp(a, "ai.onnx"))
		a = "";
	if (!b || !strcmp(b, "ai.onnx"))
		b = "";
	return !strcmp(a, b);
}

const struct hp_op *hp_op_find(const char *domain, const char *name)
{
	pthread_once(&once, gather);
	for (int i = 0; i < nall_ops; i++)
		if (!strcmp(all_ops[i]->name, name) && same_domain(all_ops[i]->domain, domain))
			return all_ops[i];
	return NULL;
}

const struct hp_op *const *hp_op_list(int *count)
{
	pthread_once(&once, gather);
	*count = nall_ops;
	return all_ops;
}
