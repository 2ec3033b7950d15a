/* The pipeline's partition until the planner chooses one (pipe_even.c). */
#ifndef HPDLF_EXEC_PIPE_EVEN_H
#define HPDLF_EXEC_PIPE_EVEN_H

#include "hpdlf/graph.h"

/* bounds[0..P] (pipe_graph.h) balancing parameter bytes and node count. */
int hp_pipe_even(const struct hp_graph *model, int P, int *bounds);

#endif
