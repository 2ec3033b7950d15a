/* The index family's table: scatter/gather (index_scatter.c), OneHot,
 * EyeLike, CumSum, TopK (index_misc.c), depth/space and sequence
 * rearrangements (index_space.c). */
#include "kernels/ops.h"
#include "kernels/index_impl.h"

const struct hp_op *const hp_ops_index[] = {
	&hpki_op_scatter_elements, &hpki_op_scatter, &hpki_op_scatter_nd, &hpki_op_gather_nd,
	&hpki_op_onehot, &hpki_op_eyelike, &hpki_op_cumsum, &hpki_op_topk,
	&hpki_op_depth_to_space, &hpki_op_space_to_depth, &hpki_op_compress, &hpki_op_reverse_sequence,
	NULL,
};
