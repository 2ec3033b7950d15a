/* Tier bandwidth probe: a store like the run's (same tier kind and
 * directory, same chunk size) writes a 64 MiB tensor below and reads it
 * back, the way the runtime evicts and prefetches.  See speed.h. */
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "hpdlf/error.h"
#include "exec/speed.h"
#include "exec/speed_rev.h"
#include "exec/speed_version.h"

#define PROBE_BYTES (64ull << 20)
/* The development machine's disk under fio (DESIGN.md) when nothing is measured. */
#define DEFAULT_READ_MBPS 2200.0
#define DEFAULT_WRITE_MBPS 1500.0
#define DEFAULT_LAT_US 100.0

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* The directory the tier's file lives in ($TMPDIR or /tmp for the spill file). */
static void tier_dir(const struct hs_tier_spec *spec, char *dir, size_t len)
{
	const char *tmp = getenv("TMPDIR");
	char copy[4096];

	if (spec->path) {
		snprintf(copy, sizeof copy, "%s", spec->path);
		snprintf(dir, len, "%s", dirname(copy));
	} else {
		snprintf(dir, len, "%s", tmp && *tmp ? tmp : "/tmp");
	}
}

/* Microseconds one small request costs beyond its bytes, as the runtime
 * issues them: NSMALL one-chunk tensors written back one request each
 * (hs_evict_start), all in flight, then read in the same way (hs_prefetch),
 * the time of each batch over NSMALL less the bytes' time at the measured
 * bandwidth; the median of NROUNDS batches (a shared disk's stalls hit
 * single batches).  What a request costs is mostly the submission and its
 * completion (a system call, a virtual disk's notification), which the
 * runtime pays on the thread that computes. */
#define NSMALL 32
#define NROUNDS 5
static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

static int small_batch(struct hs_tensor **t, int n, uint64_t chunk, int round, double *tw, double *tr)
{
	struct hs_prefetch *h[NSMALL] = { 0 };
	double t0;
	void *p;
	int rc = 0, rc2;

	for (int i = 0; i < n && rc == 0; i++)
		if ((rc = hs_pin(t[i], 0, HS_ALL, HS_PIN_OVERWRITE, &p)) == 0) {
			memset(p, round * n + i + 1, chunk);
			hs_unpin(t[i], 0, HS_ALL);
		}
	if (rc < 0)
		return rc;
	t0 = now_s();
	for (int i = 0; i < n && rc == 0; i++) {
		struct hs_range r = { t[i], 0, HS_ALL };
		rc = hs_evict_start(&r, 1, HS_TIER_ANY, &h[i]);
		rc = rc < 0 ? rc : 0; /* else the chunks evicted at once (clean: none here) */
	}
	for (int i = 0; i < n; i++)
		if (h[i] && (rc2 = hs_prefetch_wait(h[i])) < 0 && rc == 0)
			rc = rc2;
	*tw = now_s() - t0;
	if (rc < 0)
		return rc;
	memset(h, 0, sizeof h);
	t0 = now_s();
	for (int i = 0; i < n && rc == 0; i++)
		rc = hs_prefetch(t[i], 0, HS_ALL, &h[i]);
	for (int i = 0; i < n; i++)
		if (h[i] && (rc2 = hs_prefetch_wait(h[i])) < 0 && rc == 0)
			rc = rc2;
	*tr = now_s() - t0;
	return rc;
}

static int small_ops(struct hs_store *st, uint64_t chunk, struct hp_speed_tier *out)
{
	struct hs_tensor_info ti = { .bytes = chunk, .dtype = HP_U8, .shape = { 1, { (int64_t)chunk } } };
	struct hs_tensor *t[NSMALL] = { 0 };
	double w[NROUNDS], r[NROUNDS];
	/* all in DRAM at once: at most the probe's budget (big chunks: fewer) */
	int rc = 0, n = PROBE_BYTES / chunk < NSMALL ? (int)(PROBE_BYTES / chunk) : NSMALL;

	n = n > 0 ? n : 1;
	for (int i = 0; i < n && rc == 0; i++)
		rc = hs_tensor_create(st, &ti, &t[i]);
	for (int k = 0; k < NROUNDS && rc == 0; k++) {
		double tw, tr;
		if ((rc = small_batch(t, n, chunk, k, &tw, &tr)) == 0) {
			w[k] = tw / n * 1e6 - (double)chunk / out->write_MBps;
			r[k] = tr / n * 1e6 - (double)chunk / out->read_MBps;
		}
	}
	for (int i = 0; i < NSMALL; i++)
		if (t[i])
			hs_tensor_drop(t[i]);
	if (rc < 0)
		return rc;
	qsort(w, NROUNDS, sizeof w[0], cmp_double);
	qsort(r, NROUNDS, sizeof r[0], cmp_double);
	out->write_lat_us = w[NROUNDS / 2] > 0.1 ? w[NROUNDS / 2] : 0.1;
	out->read_lat_us = r[NROUNDS / 2] > 0.1 ? r[NROUNDS / 2] : 0.1;
	return 0;
}

static int write_read(struct hs_store *st, uint64_t bytes, double *wr, double *rd)
{
	struct hs_tensor_info ti = { .bytes = bytes, .dtype = HP_U8, .shape = { 1, { (int64_t)bytes } } };
	struct hs_tensor *t = NULL;
	struct hs_prefetch *pf;
	double t0;
	void *p;
	int rc;

	if ((rc = hs_tensor_create(st, &ti, &t)) < 0 || (rc = hs_pin(t, 0, HS_ALL, HS_PIN_OVERWRITE, &p)) < 0)
		goto out;
	for (uint64_t i = 0; i < bytes / 8; i++)
		((uint64_t *)p)[i] = i * 0x9E3779B97F4A7C15ull;
	hs_unpin(t, 0, HS_ALL);
	t0 = now_s();
	if ((rc = hs_evict(t, 0, HS_ALL, 0)) < 0)
		goto out;
	*wr = (double)bytes / (now_s() - t0) / 1e6;
	t0 = now_s();
	if ((rc = hs_prefetch(t, 0, HS_ALL, &pf)) < 0 || (rc = hs_prefetch_wait(pf)) < 0)
		goto out;
	*rd = (double)bytes / (now_s() - t0) / 1e6;
out:
	if (t)
		hs_tensor_drop(t);
	return rc;
}

/* Probe a fresh file next to the tier's (never the user's file itself). */
static int probe(const struct hs_tier_spec *spec, uint64_t chunk, struct hp_speed_tier *out)
{
	struct hs_store_opts so;
	struct hs_store *st = NULL;
	char dir[4096], path[4200] = "";
	int rc;

	hs_store_opts_init(&so, sizeof so);
	so.chunk_size = chunk;
	so.budget = PROBE_BYTES + 4 * chunk;
	so.ntiers = 1;
	so.tiers[0].kind = spec->kind;
	so.tiers[0].size = 2 * PROBE_BYTES;
	so.reset = 1;
	if (spec->path) {
		int fd;
		tier_dir(spec, dir, sizeof dir);
		snprintf(path, sizeof path, "%s/.hpdlf-probe-XXXXXX", dir);
		if ((fd = mkstemp(path)) < 0)
			return -errno;
		close(fd);
		so.tiers[0].path = path;
	}
	rc = hs_store_open(&so, &st);
	if (rc == 0)
		rc = write_read(st, PROBE_BYTES, &out->write_MBps, &out->read_MBps);
	if (rc == 0)
		rc = small_ops(st, chunk, out);
	hs_store_close(st);
	if (path[0])
		unlink(path);
	return rc;
}

void hp_speed_tier_get(const struct hs_tier_spec *spec, uint64_t chunk_size, int recalibrate,
		       struct hp_speed_tier *out)
{
	char key[4400], dir[4096];
	double rec[4];
	struct stat sb;

	memset(out, 0, sizeof *out);
	out->read_MBps = DEFAULT_READ_MBPS;
	out->write_MBps = DEFAULT_WRITE_MBPS;
	out->read_lat_us = out->write_lat_us = DEFAULT_LAT_US;
	/* named as the store names the first tier below DRAM */
	snprintf(out->name, sizeof out->name, "%s", spec->tier ? "remote" : spec->kind == HS_TIER_PMEM ? "pmem0" : "nvme0");
	if (spec->tier)
		return; /* opened by the caller: nothing to probe with */
	tier_dir(spec, dir, sizeof dir);
	if (stat(dir, &sb) < 0)
		return;
	snprintf(key, sizeof key, "tier kind=%d dir=%s dev=%llu chunk=%llu version=%s rev=%s", (int)spec->kind, dir,
		 (unsigned long long)sb.st_dev, (unsigned long long)chunk_size, HPDLF_VERSION, HPDLF_SPEED_REV);
	if (hp_speed_cache_path("tier", key, out->cache, sizeof out->cache) < 0)
		out->cache[0] = 0;
	int never = recalibrate < 0; /* the cached figures or the defaults */

	recalibrate = !never && (recalibrate || hp_speed_recalibrate_env());
	if (!recalibrate && out->cache[0] && hp_speed_cache_read(out->cache, key, rec, 4) == 0) {
		out->read_MBps = rec[0];
		out->write_MBps = rec[1];
		out->read_lat_us = rec[2];
		out->write_lat_us = rec[3];
		out->src = HP_SPEED_CACHED;
		return;
	}
	if (never)
		return;
	if (probe(spec, chunk_size, out) < 0) {
		out->read_MBps = DEFAULT_READ_MBPS;
		out->write_MBps = DEFAULT_WRITE_MBPS;
		out->read_lat_us = out->write_lat_us = DEFAULT_LAT_US;
		hp_error(0, "%s", "");
		return;
	}
	out->src = HP_SPEED_MEASURED;
	rec[0] = out->read_MBps;
	rec[1] = out->write_MBps;
	rec[2] = out->read_lat_us;
	rec[3] = out->write_lat_us;
	if (out->cache[0])
		hp_speed_cache_write(out->cache, key, rec, 4);
}
