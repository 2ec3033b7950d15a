/* Local targets: the statistics pages of hpdlf processes on this node, read
 * through hs_statpage_read(), and the figures derived from two reads. */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "hpdlf/error.h"
#include "tools/inspect.h"

#define PAGE_PREFIX "hpdlf-store."

double insp_mono_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

const char *insp_state_name(enum insp_state s)
{
	switch (s) {
	case INSP_LIVE: return "live";
	case INSP_STALE: return "stale";
	case INSP_MISSING: return "missing";
	default: return "error";
	}
}

static int is_pid_name(const char *s)
{
	if (!*s || strlen(s) > 9)
		return 0;
	for (; *s; s++)
		if (!isdigit((unsigned char)*s))
			return 0;
	return 1;
}

static int cmp_pid(const void *a, const void *b)
{
	pid_t x = ((const struct insp_target *)a)->pid, y = ((const struct insp_target *)b)->pid;

	return (x > y) - (x < y);
}

/* Every name of a page in this user's page directory ("hpdlf-store.<pid>"),
 * sorted by PID.  Listing opens nothing: what sits under each name is
 * judged when it is read (hs_statpage_read never follows a link nor waits on
 * a FIFO).  No directory yet: no pages. */
int insp_scan_local(struct insp_target **list, int *n)
{
	char dir[PATH_MAX];
	struct insp_target *v = NULL;
	struct dirent *e;
	DIR *d = NULL;
	int cnt = 0, cap = 0, dfd, rc;

	*list = NULL;
	*n = 0;
	rc = hs_statpage_dir(dir, sizeof dir, &dfd);
	if (rc == -ENOENT)
		return 0;
	if (rc < 0)
		return rc;
	if (!(d = fdopendir(dfd))) {
		rc = hp_error(-errno, "%s: %s", dir, strerror(errno));
		close(dfd);
		return rc;
	}
	while ((e = readdir(d))) {
		const char *p = e->d_name;
		if (strncmp(p, PAGE_PREFIX, strlen(PAGE_PREFIX)) != 0 || !is_pid_name(p + strlen(PAGE_PREFIX)))
			continue;
		if (cnt == cap) {
			struct insp_target *nv = realloc(v, (size_t)(cap = cap ? 2 * cap : 8) * sizeof *v);
			if (!nv) {
				free(v);
				closedir(d);
				return -ENOMEM;
			}
			v = nv;
		}
		memset(&v[cnt], 0, sizeof v[cnt]);
		v[cnt].kind = INSP_LOCAL;
		v[cnt].pid = (pid_t)atol(p + strlen(PAGE_PREFIX));
		snprintf(v[cnt].spec, sizeof v[cnt].spec, "%ld", (long)v[cnt].pid);
		cnt++;
	}
	closedir(d);
	if (cnt)
		qsort(v, (size_t)cnt, sizeof *v, cmp_pid);
	*list = v;
	*n = cnt;
	return 0;
}

const char *insp_local_dir(void)
{
	static char dir[PATH_MAX];

	if (!dir[0] && hs_statpage_dir(dir, sizeof dir, NULL) == HP_EUSAGE)
		snprintf(dir, sizeof dir, "$HPDLF_STATS_DIR");
	return dir;
}

/* CLOCK_REALTIME nanoseconds at which `pid` started, 0 if unknown: its
 * start in clock ticks after boot (/proc/PID/stat field 22), carried over
 * from CLOCK_BOOTTIME (10 ms resolution, unlike btime's whole seconds). */
static uint64_t proc_start_ns(pid_t pid)
{
	char path[64], line[1024];
	unsigned long long ticks = 0;
	struct timespec boot, real;
	double hz = (double)sysconf(_SC_CLK_TCK), age;
	FILE *f;
	int ok = 0;

	snprintf(path, sizeof path, "/proc/%ld/stat", (long)pid);
	if (!(f = fopen(path, "r")))
		return 0;
	if (fgets(line, sizeof line, f)) {
		char *p = strrchr(line, ')'); /* the command name may hold spaces */
		ok = p && sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %*u %*u %*d %*d %*d %*d %*d %*d %llu",
				 &ticks) == 1;
	}
	fclose(f);
	if (!ok || hz <= 0 || clock_gettime(CLOCK_BOOTTIME, &boot) < 0 || clock_gettime(CLOCK_REALTIME, &real) < 0)
		return 0;
	age = (double)boot.tv_sec + (double)boot.tv_nsec / 1e9 - (double)ticks / hz;
	return (uint64_t)(((double)real.tv_sec + (double)real.tv_nsec / 1e9 - age) * 1e9);
}

/* The NUL-separated strings of /proc/PID/FILE into buf (at most len - 1
 * bytes, NUL-terminated); their length, 0 when unreadable. */
static size_t proc_strings(pid_t pid, const char *file, char *buf, size_t len)
{
	char path[64];
	FILE *f;
	size_t n;

	snprintf(path, sizeof path, "/proc/%ld/%s", (long)pid, file);
	if (!(f = fopen(path, "r")))
		return 0;
	n = fread(buf, 1, len - 1, f);
	fclose(f);
	buf[n] = 0;
	return n;
}

/* Who the process is, for Prometheus labels that outlive its PID. */
static void read_ident(struct insp_target *t)
{
	static const char *ranks[] = { "OMPI_COMM_WORLD_RANK=", "PMIX_RANK=", "PMI_RANK=", "SLURM_PROCID=" };
	static char buf[1 << 16];
	size_t n = proc_strings(t->pid, "environ", buf, sizeof buf);

	t->ident_read = 1;
	for (size_t i = 0; i < n; i += strlen(buf + i) + 1) {
		if (!t->job[0] && !strncmp(buf + i, "SLURM_JOB_ID=", 13))
			snprintf(t->job, sizeof t->job, "%s", buf + i + 13);
		for (size_t k = 0; k < sizeof ranks / sizeof ranks[0]; k++)
			if (!t->rank[0] && !strncmp(buf + i, ranks[k], strlen(ranks[k])))
				snprintf(t->rank, sizeof t->rank, "%s", buf + i + strlen(ranks[k]));
	}
	n = proc_strings(t->pid, "cmdline", buf, sizeof buf);
	for (size_t i = 0; i < n && !t->model[0]; i += strlen(buf + i) + 1) {
		size_t l = strlen(buf + i);
		const char *base = strrchr(buf + i, '/');
		if (l > 5 && !strcmp(buf + i + l - 5, ".onnx"))
			snprintf(t->model, sizeof t->model, "%.*s", (int)(l - 5 - (base ? (size_t)(base + 1 - (buf + i)) : 0)),
				 base ? base + 1 : buf + i);
	}
}

static void read_local(struct insp_target *t)
{
	struct hs_statpage_info info;
	int rc;

	memset(&info, 0, sizeof info);
	t->tens.size = sizeof t->tens;
	rc = hs_statpage_read_tensors(t->pid, &info, &t->tens);
	t->rc = rc;
	t->err[0] = 0;
	if (rc == 0 || rc == -ESRCH) {
		if (t->state == INSP_LIVE && t->cur.pid == info.pid && t->cur_t > 0) {
			t->prev = t->cur;
			t->prev_t = t->cur_t;
			t->have_prev = 1;
		}
		t->cur = info;
		t->cur_t = insp_mono_s();
	}
	struct hs_statpage_job jb;
	if ((rc == 0 || rc == -ESRCH) && !t->ident_read && hs_statpage_read_job(t->pid, &jb) == 0 && jb.job[0] &&
	    jb.rank >= 0) {
		/* the page knows its job: better than /proc (also for a gone process) */
		snprintf(t->job, sizeof t->job, "%s", jb.job);
		snprintf(t->rank, sizeof t->rank, "%d", (int)jb.rank);
		t->nranks = jb.nranks;
	}
	if (rc == 0) {
		t->state = INSP_LIVE;
		if (!t->start_ns)
			t->start_ns = proc_start_ns(t->pid);
		if (!t->ident_read)
			read_ident(t);
		return;
	}
	snprintf(t->err, sizeof t->err, "%s", hp_errmsg()[0] ? hp_errmsg() : hp_strerror(rc));
	if (rc == -ESRCH) {
		t->state = INSP_STALE;
		t->have_prev = 0;
	} else if (rc == -ENOENT) {
		t->state = INSP_MISSING;
		snprintf(t->err, sizeof t->err,
			 "pid %ld: no statistics page in %s (no hpdlf process of this user with a store runs as "
			 "this PID, or it publishes none)", (long)t->pid, insp_local_dir());
	} else {
		t->state = INSP_ERROR;
	}
}

void insp_read(struct insp_target *t)
{
	if (t->kind == INSP_LOCAL) {
		read_local(t);
		return;
	}
	insp_read_remote(t);
}

static double ratio(uint64_t a, uint64_t b)
{
	return b ? (double)a / (double)b : -1;
}

static double pct(const struct hs_tier_stats *s, double q)
{
	uint64_t n = 0;

	for (int i = 0; i < HS_LAT_BUCKETS; i++)
		n += s->lat_hist[i];
	return n ? hs_lat_percentile(s, q) : -1;
}

void insp_tier_view(const struct insp_target *t, int tier, struct insp_tier_view *v)
{
	const struct hs_tier_stats *s = &t->cur.stats.tier[tier];

	v->hit_ratio = ratio(s->hits, s->hits + s->misses);
	v->prefetch_hit_rate = ratio(s->prefetch_hits, s->prefetches);
	v->p50 = pct(s, 0.5);
	v->p99 = pct(s, 0.99);
	v->p999 = pct(s, 0.999);
	v->read_now = v->write_now = v->read_avg = v->write_avg = -1;
	if (t->state == INSP_LIVE && t->have_prev && t->cur_t > t->prev_t &&
	    tier < t->prev.stats.ntiers) {
		const struct hs_tier_stats *p = &t->prev.stats.tier[tier];
		/* the counters hold as of the page's own timestamps: the owner may
		 * have published late (a loaded machine) or not at all (idle) */
		uint64_t u0 = t->prev.updated_ns, u1 = t->cur.updated_ns;
		double dt = u0 && u1 >= u0 ? (double)(u1 - u0) / 1e9 : t->cur_t - t->prev_t;
		v->read_now = s->bytes_read > p->bytes_read && dt > 0 ? (double)(s->bytes_read - p->bytes_read) / dt : 0;
		v->write_now = s->bytes_written > p->bytes_written && dt > 0 ?
			(double)(s->bytes_written - p->bytes_written) / dt : 0;
	}
	if (t->start_ns && t->cur.updated_ns > t->start_ns) {
		double up = (double)(t->cur.updated_ns - t->start_ns) / 1e9;
		v->read_avg = (double)s->bytes_read / up;
		v->write_avg = (double)s->bytes_written / up;
	}
	if (t->job_sum && t->sum_rates) {
		/* a job's sum: its members' rates added (insp_group_jobs) */
		v->read_now = t->sum_rates[tier].read_now;
		v->write_now = t->sum_rates[tier].write_now;
		v->read_avg = t->sum_rates[tier].read_avg;
		v->write_avg = t->sum_rates[tier].write_avg;
	}
}
