/* The topological order hp_graph_finalize gives, asked for without
 * sorting: for rewrites that change only hints and need to know whether
 * the nodes would move (exec/remat.c's eager updates). */
#ifndef HPDLF_GRAPH_SORT_H
#define HPDLF_GRAPH_SORT_H

#include "hpdlf/graph.h"

/* order[k] (g->nnodes entries): the index of the node hp_graph_finalize
 * would put k-th were node i's hint sched[i] (NULL: its own); g is not
 * changed.  0, or 1 when g's producers and consumer counts are not as
 * finalize leaves them (order not set: only finalize tells), or a
 * negative error (a cycle, as finalize would report it). */
int hp_graph_sort_order(const struct hp_graph *g, const int *sched, int *order);

#endif
