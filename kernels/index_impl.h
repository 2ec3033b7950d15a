/* Internal to kernels/: the index and data-rearrangement family
 * (index_scatter.c, index_misc.c, index_space.c; table in index_ops.c). */
#ifndef HPDLF_KERNELS_INDEX_IMPL_H
#define HPDLF_KERNELS_INDEX_IMPL_H

#include <stdint.h>

#include "hpdlf/graph.h"
#include "hpdlf/tensor.h"

extern const struct hp_op hpki_op_scatter_elements, hpki_op_scatter, hpki_op_scatter_nd, hpki_op_gather_nd;
extern const struct hp_op hpki_op_onehot, hpki_op_eyelike, hpki_op_cumsum, hpki_op_topk;
extern const struct hp_op hpki_op_depth_to_space, hpki_op_space_to_depth, hpki_op_compress,
	hpki_op_reverse_sequence;

/* Store integer v as element i of an integer dtype t (truncating). */
static inline void hpki_put_i(void *data, enum hp_dtype t, int64_t i, int64_t v)
{
	switch (t) {
	case HP_I64: case HP_U64: ((int64_t *)data)[i] = v; break;
	case HP_I32: case HP_U32: ((int32_t *)data)[i] = (int32_t)v; break;
	case HP_I16: case HP_U16: ((int16_t *)data)[i] = (int16_t)v; break;
	default: ((int8_t *)data)[i] = (int8_t)v; break;
	}
}

/* Advance a row-major multi-index over shape s. */
static inline void hpki_next(int64_t *idx, const struct hp_shape *s)
{
	for (int d = s->rank - 1; d >= 0; d--) {
		if (++idx[d] < s->dims[d])
			return;
		idx[d] = 0;
	}
}

/* Product of dims [from, rank). */
static inline int64_t hpk_prod_dims(const struct hp_shape *s, int from)
{
	int64_t p = 1;

	for (int d = from; d < s->rank; d++)
		p *= s->dims[d];
	return p;
}

#endif
