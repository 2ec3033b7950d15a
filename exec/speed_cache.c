/* Cache files of the speed model: one small text file per key, ending with
 * a checksum of everything before it, replaced atomically.  Anything that
 * does not parse exactly is treated as absent. */
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "exec/speed.h"
#include "store/crc.h"
#include "exec/speed_version.h"
#include "exec/speed_rev.h"

#define MAGIC "hpdlf-speed 2" /* 2: crc32c file checksum */
#define MAX_FILE 4096

int hp_speed_recalibrate_env(void)
{
	const char *e = getenv("HPDLF_RECALIBRATE");

	return e && *e && strcmp(e, "0") != 0;
}

void hp_speed_machine_key(int threads, char *buf, size_t len)
{
	char line[256], model[128] = "unknown";
	FILE *f = fopen("/proc/cpuinfo", "r");

	while (f && fgets(line, sizeof line, f)) {
		char *c = strchr(line, ':');
		if (!strncmp(line, "model name", 10) && c) {
			snprintf(model, sizeof model, "%s", c + 2);
			model[strcspn(model, "\n")] = 0;
			break;
		}
	}
	if (f)
		fclose(f);
	snprintf(buf, len, "cpu=%s threads=%d version=%s rev=%s", model, threads, HPDLF_VERSION, HPDLF_SPEED_REV);
}

/* $XDG_CACHE_HOME/hpdlf, else ~/.cache/hpdlf (created); -1: neither. */
static int cache_dir(char *dir, size_t len)
{
	const char *x = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
	char base[400];

	if (x && x[0] == '/')
		snprintf(base, sizeof base, "%s", x);
	else if (home && home[0] == '/')
		snprintf(base, sizeof base, "%s/.cache", home);
	else
		return -1;
	mkdir(base, 0700);
	if ((size_t)snprintf(dir, len, "%s/hpdlf", base) >= len)
		return -1;
	if (mkdir(dir, 0700) < 0 && errno != EEXIST)
		return -1;
	return 0;
}

int hp_speed_cache_path(const char *kind, const char *key, char *path, size_t len)
{
	char dir[440];

	if (cache_dir(dir, sizeof dir) < 0)
		return -1;
	int n = snprintf(path, len, "%s/%s-%08x", dir, kind, (unsigned)hs_crc32c(key, strlen(key)));

	return n >= 0 && (size_t)n < len ? 0 : -1;
}

struct aged {
	char name[256];
	long long mtime;
};

static int older(const void *a, const void *b)
{
	const struct aged *x = a, *y = b;

	return x->mtime < y->mtime ? -1 : x->mtime > y->mtime ? 1 : strcmp(x->name, y->name);
}

/* The cache files of `kind` in dir: a malloc'ed array, *n entries. */
static struct aged *list_kind(const char *dir, const char *kind, int *n)
{
	DIR *d = opendir(dir);
	struct aged *a = NULL;
	struct dirent *e;
	size_t klen = strlen(kind);
	int cap = 0;
	char path[700];
	struct stat st;

	*n = 0;
	while (d && (e = readdir(d))) {
		if (strncmp(e->d_name, kind, klen) || e->d_name[klen] != '-' || strchr(e->d_name, '.'))
			continue;
		snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
		if (stat(path, &st) < 0 || !S_ISREG(st.st_mode))
			continue;
		if (*n == cap) {
			void *q = realloc(a, (size_t)(cap = cap ? 2 * cap : 64) * sizeof *a);
			if (!q)
				break;
			a = q;
		}
		snprintf(a[*n].name, sizeof a[*n].name, "%s", e->d_name);
		a[(*n)++].mtime = (long long)st.st_mtime;
	}
	if (d)
		closedir(d);
	return a;
}

void hp_speed_cache_prune(const char *kind, int keep)
{
	char dir[440], path[700];
	int n;
	struct aged *a;

	if (keep < 4 || cache_dir(dir, sizeof dir) < 0 || !(a = list_kind(dir, kind, &n)))
		return;
	if (n > keep) {
		qsort(a, (size_t)n, sizeof *a, older);
		for (int i = 0; i < n - keep * 3 / 4; i++) {
			snprintf(path, sizeof path, "%s/%s", dir, a[i].name);
			unlink(path);
		}
	}
	free(a);
}

/* The file's text up to its checksum line, and whether that checksum holds. */
static int check_sum(char *buf, size_t n)
{
	char *sum;
	unsigned want;

	buf[n] = 0;
	sum = strstr(buf, "\nsum ");
	if (!sum || sscanf(sum + 5, "%x", &want) != 1)
		return -1;
	if (hs_crc32c(buf, (size_t)(sum + 1 - buf)) != want)
		return -1;
	sum[1] = 0;
	return 0;
}

int hp_speed_cache_read(const char *path, const char *key, double *v, int n)
{
	char buf[MAX_FILE + 1], *line, *save = NULL;
	FILE *f = fopen(path, "r");
	size_t got;
	int i = 0;

	if (!f)
		return -1;
	got = fread(buf, 1, MAX_FILE, f);
	fclose(f);
	if (got == 0 || got == MAX_FILE || check_sum(buf, got) < 0)
		return -1;
	line = strtok_r(buf, "\n", &save);
	if (!line || strcmp(line, MAGIC) != 0)
		return -1;
	line = strtok_r(NULL, "\n", &save);
	if (!line || strncmp(line, "key ", 4) != 0 || strcmp(line + 4, key) != 0)
		return -1;
	while ((line = strtok_r(NULL, "\n", &save))) {
		char *end;
		double x = strtod(line, &end);
		if (end == line || *end || i == n || !isfinite(x) || x <= 0)
			return -1;
		v[i++] = x;
	}
	return i == n ? 0 : -1;
}

void hp_speed_cache_write(const char *path, const char *key, const double *v, int n)
{
	char buf[MAX_FILE], tmp[600];
	size_t len;
	FILE *f;
	int fd;

	len = (size_t)snprintf(buf, sizeof buf, "%s\nkey %s\n", MAGIC, key);
	for (int i = 0; i < n && len < sizeof buf; i++)
		len += (size_t)snprintf(buf + len, sizeof buf - len, "%.9g\n", v[i]);
	if (len + 32 >= sizeof buf || (size_t)snprintf(tmp, sizeof tmp, "%s.XXXXXX", path) >= sizeof tmp)
		return;
	len += (size_t)snprintf(buf + len, sizeof buf - len, "sum %08x\n", (unsigned)hs_crc32c(buf, len));
	fd = mkstemp(tmp);
	if (fd < 0)
		return;
	f = fdopen(fd, "w");
	if (!f) {
		close(fd);
		unlink(tmp);
		return;
	}
	int bad = fwrite(buf, 1, len, f) != len;
	if (fclose(f) != 0 || bad || rename(tmp, path) != 0)
		unlink(tmp);
}
