/* Deferred control flow (control_defer.c), for hp_graph_infer: an If or
 * Loop the importer could not fold yet is a placeholder node that is
 * folded once its condition or trip count is a constant. */
#ifndef HPDLF_ONNX_CONTROL_H
#define HPDLF_ONNX_CONTROL_H

#include "hpdlf/graph.h"

/* Is n such a placeholder? */
int imp_is_deferred(const struct hp_node *n);
/* Fold placeholder g->nodes[node] into the graph if its condition or trip
 * count is known now (then the graph is re-sorted): 1 folded, 0 not yet,
 * or an error (a body condition that does not fold, a malformed body). */
int imp_expand_deferred(struct hp_graph *g, int node);

#endif
