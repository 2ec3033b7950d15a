/* hpdlf-exec --tier: parsing nvme=PATH[:SIZE] / pmem=PATH[:SIZE], the
 * tier files a run leaves (removed or truncated at exit), and the tiers'
 * summary of a run (stderr and --stats-json). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <fcntl.h>
#include <unistd.h>

#include <json-c/json.h>

#include "hpdlf/error.h"
#include "hpdlf/exec.h"
#include "hpdlf/store.h"
#include "hpdlf/tensor.h"
#include "tools/exec_cli.h"

/* --tier files hold only this run's scratch (the store opens them with
 * reset: nothing in them is named or committed), so none outlives the run
 * at its full size (a 64G sparse file left on a node's scratch disk per
 * job): a file the run created is removed at exit, a regular file that
 * existed is truncated to zero bytes, and says so.  Devices are left as
 * they are.  Armed only once the store may have opened them
 * (exec_tiers_opened): a usage error leaves a given file untouched.  Done
 * by atexit, so also after SIGINT/SIGTERM/SIGUSR1 (they end the run through
 * exit); a second signal, which kills at once, leaves the files. */
static struct tier_file {
	char path[4096];
	int created;
} tier_files[16];
static int ntier_files, tiers_armed, tiers_quiet, tiers_atexit;

/* Removes the tier files the run created, truncates those it was given
 * (saying so); async-signal-safe (write, no stdio): at exit and from the
 * signal handler alike. */
static void tidy_tier_files(void)
{
	for (int i = 0; tiers_armed && i < ntier_files; i++) {
		struct stat sb;
		if (fstatat(AT_FDCWD, tier_files[i].path, &sb, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISREG(sb.st_mode))
			continue;
		if (tier_files[i].created) {
			unlink(tier_files[i].path);
		} else if (sb.st_size && truncate(tier_files[i].path, 0) == 0 && !tiers_quiet) {
			static const char a[] = "hpdlf-exec: --tier ", b[] = ": truncated to 0 bytes (it held this run's "
									 "scratch only)\n";
			if (write(2, a, sizeof a - 1) < 0 || write(2, tier_files[i].path, strlen(tier_files[i].path)) < 0 ||
			    write(2, b, sizeof b - 1) < 0)
				continue;
		}
	}
	tiers_armed = 0;
}

void exec_tiers_opened(int quiet)
{
	if (ntier_files && !tiers_atexit)
		tiers_atexit = atexit(tidy_tier_files) == 0;
	tiers_armed = 1;
	tiers_quiet = quiet;
}

void exec_tiers_tidy(void)
{
	tidy_tier_files();
}

static void note_tier_file(const char *path)
{
	struct stat sb;
	int exists = lstat(path, &sb) == 0;

	if (ntier_files == 16 || (!exists && errno != ENOENT))
		return;
	tier_files[ntier_files].created = !exists;
	snprintf(tier_files[ntier_files++].path, sizeof tier_files[0].path, "%s", path);
}

/* nvme=PATH[:SIZE] or pmem=PATH[:SIZE]: what follows the last ':' must be a
 * size; a path that holds ':' is given with one more ':' at its end
 * ("nvme=/scratch/a:b:" is the path /scratch/a:b at the default size). */
static int parse_tier(const char *arg, struct hs_tier_spec *t)
{
	const char *eq = strchr(arg, '='), *colon;
	static char paths[16][4096];
	static int used;
	uint64_t size = 0;
	size_t len;

	memset(t, 0, sizeof *t);
	if (!eq || !eq[1])
		return exec_usage_error("--tier: expected nvme=PATH[:SIZE] or pmem=PATH[:SIZE], got '%s'", arg);
	if (!strncmp(arg, "nvme=", 5))
		t->kind = HS_TIER_NVME;
	else if (!strncmp(arg, "pmem=", 5))
		t->kind = HS_TIER_PMEM;
	else
		return exec_usage_error("--tier: unknown tier kind in '%s' (nvme= or pmem=)", arg);
	len = strlen(eq + 1);
	colon = strrchr(eq + 1, ':');
	if (colon && colon[1] && hp_parse_size(colon + 1, &size) < 0)
		return exec_usage_error("--tier: %s (a path holding ':' ends with one more ':')", hp_errmsg());
	if (colon)
		len = (size_t)(colon - (eq + 1));
	if (!len || len >= sizeof paths[0] || used == 16)
		return exec_usage_error("--tier: bad path in '%s'", arg);
	memcpy(paths[used], eq + 1, len);
	paths[used][len] = 0;
	t->path = paths[used++];
	t->size = size;
	note_tier_file(t->path);
	return 0;
}

int exec_parse_tiers(const struct cli *c, struct hs_tier_spec *specs, int *n)
{
	int rc;

	*n = 0;
	if ((rc = exec_check_tier_files(c)) != 0)
		return rc;
	if (c->ntiers > HS_MAX_TIERS) {
		fprintf(stderr, "hpdlf-exec: at most %d --tier options\n", HS_MAX_TIERS);
		return 2;
	}
	for (int i = 0; i < c->ntiers; i++) {
		if ((rc = parse_tier(c->tiers[i], &specs[i])) != 0)
			return rc;
		(*n)++;
	}
	return 0;
}

/* The --stats-json "tiers" (one object per tier, DRAM included, the keys
 * of a --log-json tier) and, apart from them, the "prefetch" counters. */
static void tier_stats_json(const struct hs_store_stats *st, json_object *o)
{
	json_object *tiers = json_object_new_object(), *pf = json_object_new_object();
	uint64_t n = 0, hits = 0, late = 0;

	for (int i = 0; i < st->ntiers; i++) {
		const struct hs_tier_stats *t = &st->tier[i];
		json_object *j = json_object_new_object();
		n += t->prefetches;
		hits += t->prefetch_hits;
		late += t->prefetch_late;
		json_object_object_add(j, "used", json_object_new_int64((int64_t)(i ? t->used : st->resident)));
		json_object_object_add(j, "bytes_read", json_object_new_int64((int64_t)t->bytes_read));
		json_object_object_add(j, "bytes_written", json_object_new_int64((int64_t)t->bytes_written));
		json_object_object_add(tiers, i ? t->name : "dram", j);
	}
	json_object_object_add(pf, "prefetches", json_object_new_int64((int64_t)n));
	json_object_object_add(pf, "hits", json_object_new_int64((int64_t)hits));
	json_object_object_add(pf, "late", json_object_new_int64((int64_t)late));
	json_object_object_add(pf, "hit_rate", json_object_new_double(n ? (double)hits / (double)n : 0));
	json_object_object_add(o, "tiers", tiers);
	json_object_object_add(o, "prefetch", pf);
}

/* Bytes moved per tier and the prefetch hit rate, out of core; into the
 * --stats-json document `o` (as "tiers" and "prefetch") when given. */
void exec_tier_summary(struct hp_session *s, const struct cli *c, json_object *o)
{
	struct hs_store_stats st;
	char a[32], b[32], u[32];
	uint64_t pf = 0, pfh = 0, late = 0;

	if (hp_session_store_stats(s, &st) < 0) {
		if (o) /* in core: the same keys, nothing below DRAM */
			json_object_object_add(o, "tiers", json_object_new_object());
		return;
	}
	for (int i = 0; i < st.ntiers; i++) {
		const struct hs_tier_stats *t = &st.tier[i];
		pf += t->prefetches;
		pfh += t->prefetch_hits;
		late += t->prefetch_late;
		if (i == 0 || c->quiet)
			continue;
		fprintf(stderr, "hpdlf-exec:   tier %-8s read %s, written %s, holds %s\n", t->name,
			hp_format_size(t->bytes_read, a, sizeof a), hp_format_size(t->bytes_written, b, sizeof b),
			hp_format_size(t->used, u, sizeof u));
	}
	if (!c->quiet)
		fprintf(stderr, "hpdlf-exec:   prefetches %llu, hits %llu (%.0f%%), late %llu\n", (unsigned long long)pf,
			(unsigned long long)pfh, pf ? 100.0 * (double)pfh / (double)pf : 0.0, (unsigned long long)late);
	/* the footprint: the most the tiers held at once, not what is left */
	struct hp_run_info ri = { .size = sizeof ri };
	int peak = st.ntiers > 1 && hp_session_run_info(s, &ri) == 0;
	if (peak && !c->quiet)
		fprintf(stderr, "hpdlf-exec:   tiers below DRAM held at most %s at once\n",
			hp_format_size(ri.tier_peak, u, sizeof u));
	if (o && peak)
		json_object_object_add(o, "tier_peak_bytes", json_object_new_int64((int64_t)ri.tier_peak));
	if (o && peak) { /* requests, not bytes: what small values cost is their count */
		json_object *rq = json_object_new_object();
		uint64_t rd = 0, wr = 0;
		for (int i = 1; i < st.ntiers; i++) {
			rd += st.tier[i].reads;
			wr += st.tier[i].writes;
		}
		json_object_object_add(rq, "reads", json_object_new_int64((int64_t)rd));
		json_object_object_add(rq, "writes", json_object_new_int64((int64_t)wr));
		json_object_object_add(o, "io_requests", rq);
		json_object_object_add(o, "io_threads", json_object_new_int(ri.io_threads));
	}
	if (o)
		tier_stats_json(&st, o);
	struct hs_frame_stats fs = { .size = sizeof fs };
	if (o && hp_session_frame_stats(s, &fs) == 0) { /* what paging cost in CPU beside the bytes */
		json_object *fr = json_object_new_object();
		json_object_object_add(fr, "mremaps", json_object_new_int64((int64_t)fs.mremaps));
		json_object_object_add(fr, "compactions", json_object_new_int64((int64_t)fs.compactions));
		json_object_object_add(fr, "slides", json_object_new_int64((int64_t)fs.slides));
		json_object_object_add(fr, "compact_bytes", json_object_new_int64((int64_t)fs.compact_bytes));
		json_object_object_add(o, "frames", fr);
	}
}
