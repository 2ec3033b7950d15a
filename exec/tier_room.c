/* Room below DRAM, checked before a run out of core writes anything there.
 *
 * The plan knows the most its run holds on the tiers at once (plan_foot.c:
 * the state once, plus the activations it swaps; a run measured the same
 * within a page, --plan's "tier footprint").  A local tier lives in a file
 * whose file system may hold less: without this check the run found out at
 * the first write-back that did not fit, after loading the model and maybe
 * hours of steps, with "write to nvme0 failed: No space left on device".
 * Now it stops before its first write with one line naming the tier, its
 * file system's free bytes and the plan's need.
 *
 * Room is counted per file system (tiers sharing one share its free
 * bytes): what is free there (to root, its reserved blocks too), plus
 * what the tier files there hold now (a run resets them), each tier no
 * more than its SIZE.  A run short of it by more than the prediction's
 * margin (ROOM_SLACK) is refused with exit status 1; inside the margin it
 * is warned.  One that passes may still meet a disk that others fill. Remote
 * tiers and block devices are not counted: a run with one is not checked. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "hpdlf/error.h"
#include "hpdlf/exec.h"
#include "hpdlf/store.h"
#include "exec/plan.h"
#include "exec/tier_room.h"

/* A shortfall of at most this much only warns (the prediction's margin). */
#define ROOM_SLACK(peak) ((peak) / 32 + (64u << 10))

struct fsroom {
	dev_t dev;
	uint64_t free, held, cap;  /* cap: the sum of its tiers' SIZEs, UINT64_MAX: some unbounded */
	char where[PATH_MAX];
};

/* The file system of a tier's file: the file when it exists, else its
 * directory.  0: counted; 1: not a file tier we can count (skip the check). */
static int tier_fs(const struct hs_tier_spec *sp, struct fsroom *r)
{
	const char *dir = getenv("TMPDIR");
	char path[PATH_MAX];
	struct stat sb;
	struct statvfs vf;

	if (sp->tier || (sp->kind != HS_TIER_NVME && sp->kind != HS_TIER_PMEM))
		return 1;
	if (sp->path && sp->path[0]) {
		snprintf(path, sizeof path, "%s", sp->path);
		if (stat(path, &sb) == 0) {
			if (!S_ISREG(sb.st_mode))
				return 1; /* a device: its size is the store's to check */
			r->held = (uint64_t)sb.st_blocks * 512;
		} else {
			char *slash = strrchr(path, '/');
			if (slash == path)
				slash[1] = 0;
			else if (slash)
				*slash = 0;
			else
				snprintf(path, sizeof path, ".");
		}
	} else { /* the anonymous spill file: tier_uring.c's open_spill */
		snprintf(path, sizeof path, "%s", dir && dir[0] ? dir : "/tmp");
	}
	if (statvfs(path, &vf) != 0 || stat(path, &sb) != 0)
		return 1; /* the store says what is wrong with the path */
	r->dev = sb.st_dev;
	r->free = (uint64_t)(geteuid() == 0 ? vf.f_bfree : vf.f_bavail) * vf.f_frsize;
	r->cap = sp->size ? sp->size : UINT64_MAX;
	if (sp->path && sp->path[0])
		snprintf(r->where, sizeof r->where, "%s", sp->path);
	else
		snprintf(r->where, sizeof r->where, "the spill file in %s (%s)", path, dir && dir[0] ? "$TMPDIR" : "no $TMPDIR");
	return 0;
}

int hp_tier_room_check(const struct hp_graph *g, const struct hp_plan *p, const struct hp_exec_opts *o)
{
	struct hs_tier_spec deflt = { .kind = HS_TIER_NVME };
	const struct hs_tier_spec *specs = &deflt;
	struct fsroom fs[HS_MAX_TIERS], one;
	int ntiers = 1, nfs = 0, rc;
	uint64_t state, swapped, peak, room = 0;
	char a[32], b[32], c[32], d[32];

	if (o->size >= offsetof(struct hp_exec_opts, tiers) + sizeof o->tiers && o->ntiers > 0) {
		specs = o->tiers;
		ntiers = o->ntiers < HS_MAX_TIERS ? o->ntiers : HS_MAX_TIERS;
	}
	for (int k = 0; k < ntiers; k++) {
		memset(&one, 0, sizeof one);
		if (tier_fs(&specs[k], &one))
			return 0;
		int f = 0;
		while (f < nfs && fs[f].dev != one.dev)
			f++;
		if (f == nfs) {
			fs[nfs++] = one;
			continue;
		}
		fs[f].held += one.held;
		fs[f].cap = fs[f].cap == UINT64_MAX || one.cap == UINT64_MAX ? UINT64_MAX : fs[f].cap + one.cap;
	}
	if ((rc = hp_plan_footprint_of(g, p, &state, &swapped, &peak)) < 0)
		return rc;
	for (int f = 0; f < nfs; f++) {
		uint64_t r = fs[f].free + fs[f].held;
		room += r < fs[f].cap ? r : fs[f].cap;
	}
	if (peak <= room)
		return 0;
	int capped = 1; /* the SIZEs given bind, not the file systems */
	for (int f = 0; f < nfs; f++)
		capped &= fs[f].cap < fs[f].free + fs[f].held;
	const char *what = capped ? (ntiers > 1 ? "their SIZEs leave" : "its SIZE leaves")
				  : nfs > 1 ? "their file systems have" : "its file system has";
	const char *fix = !capped ? "free space there or add a --tier on a larger file system"
			  : ntiers > 1 ? "give the tiers larger SIZEs" : "give the tier a larger SIZE";
	char where[PATH_MAX + 32];
	if (ntiers > 1)
		snprintf(where, sizeof where, "%s and %d more tier%s", fs[0].where, ntiers - 1, ntiers == 2 ? "" : "s");
	else
		snprintf(where, sizeof where, "%s", fs[0].where);
	hp_format_size(peak, a, sizeof a);
	hp_format_size(state, b, sizeof b);
	hp_format_size(swapped, c, sizeof c);
	hp_format_size(room, d, sizeof d);
	/* the footprint is a prediction, measured within a page or two of a
	 * run's: a shortfall inside that margin is said, not refused */
	if (peak - room <= ROOM_SLACK(peak)) {
		hp_log(HP_LOG_WARN, "%s: the plan holds up to %s below DRAM at once, %s room for %s: the run may "
		       "run out of space (%s, or raise --budget)", where, a, what, d, fix);
		return 0;
	}
	return hp_error(-ENOSPC,
			"%s: the plan holds up to %s below DRAM at once (state %s, swapped values %s), but %s "
			"room for %s: %s, or raise --budget (less is swapped)", where, a, b, c, what, d, fix);
}
