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
 * shapes must be inferred. */
int64_t hp_node_band_align(struct hp_graph *g, struct hp_node *n, int axis, int *path);

/* The axis the weight gradients' sums (ConvGradFilter, BiasGrad) take
 * their units on by default: 0 (batch items) for a batch of two or more,
 * else 2 (planes of the first spatial axis).  Training graphs are cut on
 * this axis, and the band nodes say so to their gradients (attribute
 * hpdlf_unit_axis), so that the chain of band gradients sums in the
 * whole kernel's order. */
int64_t hp_filter_unit_axis(int64_t batch);

#endif
