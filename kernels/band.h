/* Where the band splitter (exec/split_band.c) may cut a node's output so
 * that each band computes bit for bit what the node computes whole;
 * implemented by the kernels that know their tiling (kernels/conv.c). */
#ifndef HPDLF_KERNELS_BAND_H
#define HPDLF_KERNELS_BAND_H

#include <stdint.h>

#include "hpdlf/graph.h"

/* Bands of node n's output on ONNX axis `axis` (0: batch, 2: first
 * spatial) compute bit for bit what n computes whole when every band starts
 * at a multiple of the returned row count and the band nodes carry
 * attribute hpdlf_path = *path (when *path >= 0: the kernel path n chose,
 * which a band's smaller extent could change).  -1: no band does; 1 for
 * every op whose elements do not depend on where a band starts.  n's input
 * shapes must be inferred.  Inference (training 0): a ConvTranspose on
 * convt_fma.c's path (one chain per output whatever the band) may start a
 * band at any input row; training keeps its column tiles, which its
 * gradients' cuts count on. */
int64_t hp_node_band_align(struct hp_graph *g, struct hp_node *n, int axis, int training, int *path);

/* Whether a Gemm or MatMul node n computes each row of its output on axis
 * 0 (A's rows, or its batch) the same whatever rows run beside it: alpha 1
 * on a CPU where the product runs as FMA chains over k from beta C
 * (kernels/gemm.c fma_ok), A not transposed, B a rank-2 constant weight, C
 * (Gemm) without rows of its own.  Inference only: the weight's gradient
 * sums over the rows. */
int hp_node_rows_exact(const struct hp_graph *g, const struct hp_node *n);

/* Whether a Conv node n (ungrouped, shapes inferred) runs a path that
 * computes every output channel by the same chain whatever channels run
 * beside it: hpdlf's own 1x1, kxk and dot tiles (tests/exec/
 * check_wsplit_bitwise.py), not sgemm (OpenBLAS's per-element sums depend
 * on M: a 24-channel 3-D conv cut in blocks of 8 moved 896 outputs by an
 * ulp) nor the stems' grouped tiles.  *path: the path, for the blocks to
 * keep (attribute hpdlf_path); -1 when n does not parse. */
int hp_conv_channels_exact(struct hp_graph *g, struct hp_node *n, int *path);

/* The axis the weight gradients' sums (ConvGradFilter, BiasGrad) take
 * their units on by default: 0 (batch items) for a batch of two or more,
 * else 2 (planes of the first spatial axis).  Training graphs are cut on
 * this axis, and the band nodes say so to their gradients (attribute
 * hpdlf_unit_axis), so that the chain of band gradients sums in the
 * whole kernel's order. */
int64_t hp_filter_unit_axis(int64_t batch);

/* The paths of ConvGradData (attribute hpdlf_path of its bands).  A
 * KxK band's (kernels/conv_grad.c: stride 1 on conv_kxk.c's tiles), a
 * PHASE band's (strided, kernels/conv_grad_phase.c), a PW band's (1x1
 * stride 1 on conv_pw.c's tiles) or a TINY band's (conv_grad_tiny.c)
 * holds in its bits from HP_CGD_PATH_BITS up 1 + the path it replaces,
 * whose cuts it keeps. */
enum { HP_CGD_PATH_DW = 0, HP_CGD_PATH_FLIP = 1, HP_CGD_PATH_CONVT = 2, HP_CGD_PATH_GRP = 3, HP_CGD_PATH_KXK = 4,
       HP_CGD_PATH_PHASE = 5, HP_CGD_PATH_PW = 6, HP_CGD_PATH_TINY = 7 };
#define HP_CGD_PATH_BITS 4
#define HP_CGD_PATH_MASK ((1 << HP_CGD_PATH_BITS) - 1)

/* How the dX of a ConvGradData can be cut in rows of axis `axis` so that
 * each cut is bit for bit the whole's: given all the dY rows its rows
 * need, a cut of X rows starting at a multiple of xalign, from dY rows
 * cut at multiples of yalign (or the ends), with hpdlf_path = path, is
 * the whole's when a cut node reports the same path, alignments and
 * tiles. */
struct hp_cgd_bands {
	int path;              /* in: the path to keep (-1: free); out: taken */
	int64_t xalign, yalign;
	int64_t tiles;         /* the tiling along the axis (compare only) */
};

/* For ConvGradData node n's kind (its strides, dilations, group and W)
 * with X shape x, dY shape dy and pads (2 per spatial dim): 0, or -1 when
 * no cut in rows is bitwise. */
int hp_conv_data_bands(struct hp_graph *g, const struct hp_node *n, const struct hp_shape *x,
		       const struct hp_shape *dy, const int64_t *pads, int axis, struct hp_cgd_bands *b);

#endif
