/* Room below DRAM for a plan, checked before a run writes there (tier_room.c). */
#ifndef HPDLF_EXEC_TIER_ROOM_H
#define HPDLF_EXEC_TIER_ROOM_H

#include "hpdlf/graph.h"

struct hp_plan;
struct hp_exec_opts;

/* -ENOSPC with one line naming the tier's file and both sizes when the
 * local file tiers' file systems (free bytes plus what the tier files hold
 * now, each tier at most its SIZE) have less room than the most the plan
 * holds below DRAM at once; 0 when they have, or when a tier is remote or a
 * device (not counted here). */
int hp_tier_room_check(const struct hp_graph *g, const struct hp_plan *p, const struct hp_exec_opts *o);

#endif
