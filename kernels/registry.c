/* The operator table: every family's ops, looked up by domain and name. */
#include <pthread.h>
#include <stdlib.h>
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
static short by_name[MAX_OPS]; /* indices into all_ops sorted by name, table order among equals */
static int nall_ops;
static pthread_once_t once = PTHREAD_ONCE_INIT;

static int cmp_name(const void *a, const void *b)
{
	short x = *(const short *)a, y = *(const short *)b;
	int c = strcmp(all_ops[x]->name, all_ops[y]->name);

	return c ? c : x - y;
}

static void gather(void)
{
	for (size_t f = 0; f < sizeof families / sizeof families[0]; f++)
		for (const struct hp_op *const *o = families[f]; *o && nall_ops < MAX_OPS; o++)
			all_ops[nall_ops++] = *o;
	for (int i = 0; i < nall_ops; i++)
		by_name[i] = (short)i;
	qsort(by_name, (size_t)nall_ops, sizeof *by_name, cmp_name);
}

static int same_domain(const char *a, const char *b)
{
	if (!a || !strcmp(a, "ai.onnx"))
		a = "";
	if (!b || !strcmp(b, "ai.onnx"))
		b = "";
	return !strcmp(a, b);
}

/* Binary search on the name (graph passes look ops up per node, many
 * times: a linear scan of strcmp was 1-2% of a short out-of-core run). */
const struct hp_op *hp_op_find(const char *domain, const char *name)
{
	int lo = 0, hi;

	pthread_once(&once, gather);
	hi = nall_ops;
	while (lo < hi) { /* the first op named `name` or after it */
		int mid = lo + (hi - lo) / 2;
		if (strcmp(all_ops[by_name[mid]]->name, name) < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	for (int i = lo; i < nall_ops && !strcmp(all_ops[by_name[i]]->name, name); i++)
		if (same_domain(all_ops[by_name[i]]->domain, domain))
			return all_ops[by_name[i]];
	return NULL;
}

const struct hp_op *const *hp_op_list(int *count)
{
	pthread_once(&once, gather);
	*count = nall_ops;
	return all_ops;
}
