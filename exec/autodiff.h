/* Training graph construction (internal include): the declarations are
 * public in hpdlf/train.h (hp_train_spec, hp_autodiff). */
#ifndef HPDLF_EXEC_AUTODIFF_H
#define HPDLF_EXEC_AUTODIFF_H

#include "hpdlf/train.h"

/* What a pipeline stage differentiates (exec/pipe_graph.c): instead of the
 * loss (nseed > 0), seed_grad[k] is the gradient of seed_value[k] (a
 * graph input each, fed with what the next stage sends back), and the
 * gradients of wrt[] (graph inputs: the stage's boundary inputs and its
 * parameters) become graph outputs, wrt_grad[k] (-1: none reaches it).
 * Parameters given as inputs get no optimizer update: the stage's
 * optimizer graph updates them from the accumulated gradients, built with
 * seeds (parameter, its gradient as an input) and no forward nodes.
 * forward_only: the stage's forward graph, rewritten as a training step's
 * forward is (the same node order, so the same Dropout seeds).
 * node_offset: where the stage's nodes start in the model, so that a
 * Dropout node's seed is the one it has in a 1-rank training graph.
 * fwd_values (out, may be NULL): the values the forward part of the graph
 * has before the gradient nodes are added; a node whose outputs are all
 * below it is a forward node (the final sort interleaves them). */
struct hp_ad_ext {
	int forward_only;     /* just the training-mode rewrite (BatchNorm, Dropout) */
	int nseed;
	const int *seed_value, *seed_grad;
	int nwrt;
	const int *wrt;
	int *wrt_grad;
	int *fwd_values;
	int node_offset;      /* the graph's node 0 is the model's node node_offset (Dropout's seeds) */
};
int hp_autodiff_ext(struct hp_graph *g, const struct hp_train_spec *spec, const struct hp_ad_ext *x);

/* Nodes constant folding computed from the values marked in live (an
 * nvalues + 1 array, freed here) run again: their outputs become
 * activations.  f32_only: only nodes with a float output. */
int hp_unfold_from(struct hp_graph *g, char *live, int f32_only);

#endif
