/* Declared types and shapes of a model's outputs and value_info, checked
 * against what inference computed (internal; hpdlf-exec calls it after
 * hp_graph_infer). */
#ifndef HPDLF_ONNX_DECLARED_H
#define HPDLF_ONNX_DECLARED_H

#include "hpdlf/graph.h"

/* 0 when every graph output and value_info entry the model file declares
 * agrees with g's inferred dtype and shape (unknown and symbolic dims agree
 * with anything; names inference no longer has are skipped); else
 * HP_EMODEL naming the value, the node that computes it and both types. */
int hp_onnx_check_declared(const char *path, const struct hp_graph *g);

#endif
