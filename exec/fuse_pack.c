/* Constant weights of matrix products packed once, in core: B of a
 * MatMul, Gemm, FusedMatMul or FusedGemm that only that node reads, a
 * 2-D float initializer, becomes an initializer holding op(B) in the
 * panels the FMA product reads (kernels/gemm_fma.h, HP_GEMM_PACKED_ATTR).
 * Without it every inference packed every weight again for every column
 * block (8% of a BERT-style inference, 6% of a GPT-2-style one, 37% of a
 * ConvNeXt's whose late stages multiply 4-16 rows by 3072-column
 * weights).  Packing moves values, so each output keeps its chain and its
 * bits; it runs only where nothing is split (a packed B cannot be cut into
 * row bands or blocks).  At most PACK_MAX_BYTES of weights are packed: the
 * packed copies live in the graph's memory. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hpdlf/error.h"
#include "exec/fuse_internal.h"
#include "kernels/gemm_fma.h"

#define PACK_MAX_BYTES (1ull << 30)

static int is_product(const struct hp_node *n)
{
	return hp_fz_is(n, "MatMul") || hp_fz_is(n, "Gemm") ||
	       (!strcmp(n->domain, "ai.hpdlf") && (!strcmp(n->op_type, "FusedMatMul") || !strcmp(n->op_type, "FusedGemm")));
}

/* Node i's B packs: what it multiplies by, K x N of op(B), fits the cap. */
static int packable(const struct hp_graph *g, int i, uint64_t left, int64_t *k, int64_t *n, int *tb)
{
	const struct hp_node *nd = &g->nodes[i];
	int b = nd->ninputs > 1 ? nd->inputs[1] : -1;
	const struct hp_value *bv;

	if (!is_product(nd) || nd->folded || b < 0 || hp_attr_int(nd, HP_GEMM_PACKED_ATTR, 0) > 0 ||
	    hp_attr_int(nd, "pack_b", 0) != 0 || hp_attr_float(nd, "alpha", 1.0f) != 1.0f)
		return 0;
	bv = &g->values[b];
	if (!hp_fz_const(g, b) || hp_fz_user_fed(g, b) || bv->is_output || bv->shape.rank != 2 ||
	    hp_fz_only_reader(g, b) != i || g->values[nd->outputs[0]].dtype != HP_F32)
		return 0;
	*tb = strstr(nd->op_type, "Gemm") && hp_attr_int(nd, "transB", 0) != 0;
	*k = bv->shape.dims[*tb ? 1 : 0];
	*n = bv->shape.dims[*tb ? 0 : 1];
	return *k > 0 && *n > 0 && (uint64_t)hp_fma_packed_floats(*k, *n) * sizeof(float) <= left;
}

/* A new in-memory initializer beside B holding it packed (dst). */
static int add_packed(struct hp_graph *g, int b, int64_t k, int64_t n, int tb, float *dst)
{
	struct hp_shape s = { .rank = 3, .dims = { (n + 15) / 16, k, 16 } };
	const float *x = g->values[b].data;
	float *own = NULL;

	if (!x && (!(own = malloc((size_t)(k * n) * sizeof *own + 1)) || hp_graph_read_init(g, b, own) < 0)) {
		free(own);
		free(dst);
		return hp_error(-ENOMEM, "cannot read '%s' to pack it", g->values[b].name);
	}
	hp_fma_pack_b(x ? x : own, tb ? 1 : n, tb ? k : 1, k, n, dst);
	free(own);
	return hp_fz_memory_init(g, g->values[b].name, ".packed", &s, dst);
}

static int pack_one(struct hp_graph *g, int i, int64_t k, int64_t n, int tb, struct hp_fuse_report *r)
{
	size_t bytes = (size_t)hp_fma_packed_floats(k, n) * sizeof(float);
	float *dst = aligned_alloc(64, (bytes + 63) / 64 * 64); /* the panels' vectors on their lines */
	int b = g->nodes[i].inputs[1], v, rc;
	char line[512];

	if (!dst)
		return hp_error(-ENOMEM, "out of memory packing '%s'", g->values[b].name);
	if ((v = add_packed(g, b, k, n, tb, dst)) < 0)
		return v;
	if ((rc = hp_fz_attr_int(g, i, HP_GEMM_PACKED_ATTR, n)) < 0)
		return rc;
	snprintf(line, sizeof line, "weight '%s' of %s '%s' packed once (%lld x %lld)", g->values[b].name,
		 g->nodes[i].op_type, g->nodes[i].name, (long long)k, (long long)n);
	g->nodes[i].inputs[1] = v;
	hp_fz_note(r, "Packed weights", line);
	return 0;
}

int hp_fuse_pack_weights(struct hp_graph *g, struct hp_fuse_report *r)
{
	uint64_t left = PACK_MAX_BYTES;
	int64_t k, n;
	int tb, any = 0, rc;

	if (!hp_fma_gemm_ok())
		return 0;
	for (int i = 0; i < g->nnodes; i++) {
		if (!packable(g, i, left, &k, &n, &tb))
			continue;
		left -= (uint64_t)hp_fma_packed_floats(k, n) * sizeof(float);
		if ((rc = pack_one(g, i, k, n, tb, r)) < 0)
			return rc;
		any = 1;
	}
	return any;
}
