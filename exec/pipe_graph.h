/* Pipeline stages over the model graph (internal to exec/): which values
 * cross each cut, and the graphs one stage runs.
 *
 * A partition is `int bounds[P + 1]` over the MODEL graph (imported, the
 * input's batch fixed, parameters promoted: hp_pipe_model_prepare), whose
 * nodes are topologically sorted: 0 = bounds[0] < ... < bounds[P] = nnodes,
 * stage s runs forward nodes [bounds[s], bounds[s + 1]) with their backward
 * and their parameters' optimizer.  A value produced before a cut (or a
 * graph input) and read after it crosses that cut: a value read several
 * stages later crosses every cut on its way (each stage in between
 * forwards it, and adds its own gradient to the one it passes back). */
#ifndef HPDLF_EXEC_PIPE_GRAPH_H
#define HPDLF_EXEC_PIPE_GRAPH_H

#include <stdint.h>

#include "hpdlf/graph.h"
#include "hpdlf/train.h"

/* The values crossing cut c, between stage c and stage c + 1. */
struct hp_pipe_cut {
	int n;            /* values, ascending model value indices */
	int *vals;
	char *grad;       /* per value: its gradient goes back (float, not a graph input) */
	int ngrad;        /* how many do */
	uint64_t bytes;   /* of the values at the graph's batch (one micro-batch at run time) */
	uint64_t grad_bytes;
};

/* Check a partition: bounds strictly increasing from 0 to nnodes, and no
 * trainable parameter read in two stages (tied weights would train as two
 * copies): HP_EUSAGE naming it. */
int hp_pipe_check_bounds(const struct hp_graph *model, int P, const int *bounds);
/* cuts[0 .. P-2]; loss_value (-1: none) counts as read by the last stage.
 * Free with hp_pipe_cuts_free. */
int hp_pipe_boundaries(const struct hp_graph *model, int P, const int *bounds, int loss_value,
		       struct hp_pipe_cut *cuts);
void hp_pipe_cuts_free(struct hp_pipe_cut *cuts, int ncuts);
/* The bounds --pipeline-cuts names: P - 1 node names (an unnamed node by
 * its first output's name), each the last node of its stage.  HP_EUSAGE
 * for an unknown name ("no node named"), a wrong count or an order that
 * leaves a stage empty. */
int hp_pipe_bounds_from_names(const struct hp_graph *model, int P, const char *const *names, int nnames,
			      int *bounds);
/* The trainable float parameters stage s reads, ascending (calloc'd). */
int hp_pipe_stage_params(const struct hp_graph *model, const int *bounds, int s, int **params, int *count);

/* One stage's graph made of a prepared copy g of the model (consumed:
 * nodes of other stages removed, the values of cut s - 1 become inputs,
 * those of cut s outputs; for the last stage the loss value the only
 * output).  params_as_inputs: the stage's parameters become inputs too
 * (the forward and backward graphs, which take them from the optimizer's
 * graph after each step; nodes folded from them run again).  Finalized
 * and inferred. */
int hp_pipe_stage_cut(struct hp_graph *g, int P, const int *bounds, int s, const struct hp_pipe_cut *cuts,
		      int loss_value, int params_as_inputs);

#endif
