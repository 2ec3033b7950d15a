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

/* Microseconds one small request costs beyond its bytes: NSMALL one-chunk
 * tensors written back and read in one at a time, as the runtime issues
 * the loads and write-backs of small values. */
#define NSMALL 32
static int small_ops(struct hs_store *st, uint64_t chunk, struct hp_speed_tier *out)
{
	struct hs_tensor_info ti = { .bytes = chunk, .dtype = HP_U8, .shape = { 1, { (int64_t)chunk } } };
	struct hs_tensor *t[NSMALL] = { 0 };
	struct hs_prefetch *pf;
	double t0, tw = 0, tr;
	void *p;
	int rc = 0, n = 0;

	for (; n < NSMALL && rc == 0; n++) {
		if ((rc = hs_tensor_create(st, &ti, &t[n])) < 0 || (rc = hs_pin(t[n], 0, HS_ALL, HS_PIN_OVERWRITE, &p)) < 0)
			break;
		memset(p, n + 1, chunk);
		hs_unpin(t[n], 0, HS_ALL);
		t0 = now_s();
		rc = hs_evict(t[n], 0, HS_ALL, 0);
		tw += now_s() - t0;
	}
	t0 = now_s();
	for (int i = 0; i < n && rc == 0; i++)
		if ((rc = hs_prefetch(t[i], 0, HS_ALL, &pf)) == 0)
			rc = hs_prefetch_wait(pf);
	tr = now_s() - t0;
	for (int i = 0; i < n; i++)
		if (t[i])
			hs_tensor_drop(t[i]);
	if (rc < 0)
		return rc;
	out->write_lat_us = tw / NSMALL * 1e6 - (double)chunk / out->write_MBps;
	out->read_lat_us = tr / NSMALL * 1e6 - (double)chunk / out->read_MBps;
	out->write_lat_us = out->write_lat_us > 0.1 ? out->write_lat_us : 0.1;
	out->read_lat_us = out->read_lat_us > 0.1 ? out->read_lat_us : 0.1;
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
	snprintf(key, sizeof key, "tier kind=%d dir=%s dev=%llu chunk=%llu version=%s", (int)spec->kind, dir,
		 (unsigned long long)sb.st_dev, (unsigned long long)chunk_size, HPDLF_VERSION);
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
