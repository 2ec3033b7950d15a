/* Split candidates remembered by their graph (split.c): a candidate is the
 * graph cut into bands, then inferred, finished (autodiff) and measured;
 * the band cut is cheap, the rest is most of planning a big net.  The
 * same cut graph under the same finish (ctx: the hash of the unsplit
 * graph finished, which carries the trainer's options) comes to the same
 * figures, so its figures are looked up instead of built again; only the
 * candidate kept is built. */
#ifndef HPDLF_EXEC_SPLIT_MEMO_H
#define HPDLF_EXEC_SPLIT_MEMO_H

#include <stdint.h>

#include "hpdlf/graph.h"
#include "exec/split.h"

/* A hash of everything a candidate's figures depend on: values (names,
 * kinds, shapes, small constant data), nodes (ops, edges, attributes,
 * workspace, hints); never 0. */
uint64_t hp_split_graph_hash(const struct hp_graph *g);

/* The figures of cut graph `graph` under ctx at `budget` (1: found):
 * an entry of that budget (with want_ms, one with its predicted time
 * where it fits), or one whose lean pass found nothing to change (its
 * graph is then the same at every budget), valid at every budget below
 * its min_after and, without want_ms, above it too (its ms is then -1:
 * not predicted).  Floors (hp_split_memo_floor_add) are not figures.
 * ctx 0: never found. */
int hp_split_memo_find(uint64_t ctx, uint64_t graph, uint64_t budget, int want_ms, struct hp_split_info *out);
void hp_split_memo_add(uint64_t ctx, uint64_t graph, uint64_t budget, int any_below,
		       const struct hp_split_info *info);

/* A floor under the smallest budget of cut graph `graph` under ctx
 * (split.c's cut_floor), for candidates not finished (1: found, the
 * largest remembered). */
int hp_split_memo_floor_find(uint64_t ctx, uint64_t graph, uint64_t *floor);
void hp_split_memo_floor_add(uint64_t ctx, uint64_t graph, uint64_t floor);

/* The hash of g cut by a recipe (hp_split_bands' arguments) under ctx,
 * whose forward graph it includes, and what the band pass reported
 * (nsplit, axis, ahead, rejoined of *bands; the rest is left); graph 0:
 * the cut left the graph as it was (a rejoin that joined nothing back). */
int hp_split_memo_cut_find(uint64_t ctx, int k, int lean, int ahead, int rejoin, uint64_t cut, uint64_t *graph,
			   struct hp_split_info *bands);
void hp_split_memo_cut_add(uint64_t ctx, int k, int lean, int ahead, int rejoin, uint64_t cut, uint64_t graph,
			   const struct hp_split_info *bands);

#endif
