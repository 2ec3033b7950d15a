/* Training's parameters (train_params.c): float Constant tensors in
 * parameter slots promoted to initializers, --freeze applied, counted. */
#ifndef HPDLF_EXEC_TRAIN_PARAMS_H
#define HPDLF_EXEC_TRAIN_PARAMS_H

#include "hpdlf/graph.h"
#include "hpdlf/train.h"

/* On the forward graph before autodiff.  HP_EUSAGE for a pattern that
 * matches no parameter. */
int hp_train_params(struct hp_graph *g, const char *const *patterns, int npatterns, struct hp_param_counts *pc);

#endif
