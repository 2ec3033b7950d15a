#include "util.h"

#include <dirent.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

const char *const cfg_names[CFG_N] = { "dram", "dram+pmem", "dram+nvme", "dram+pmem+nvme" };

static char disk_dir[512], shm_dir[512];

static const char *make_dir(char *buf, const char *base)
{
	if (!buf[0]) {
		snprintf(buf, 512, "%s/hpdlf-store-test-XXXXXX", base);
		if (!mkdtemp(buf)) {
			perror(buf);
			exit(1);
		}
	}
	return buf;
}

const char *tu_disk_dir(void)
{
	const char *t = getenv("TMPDIR");

	return make_dir(disk_dir, t && t[0] ? t : "/tmp");
}

const char *tu_shm_dir(void)
{
	return make_dir(shm_dir, "/dev/shm");
}

static void rm_dir(char *dir)
{
	DIR *d;
	struct dirent *e;

	if (!dir[0] || !(d = opendir(dir)))
		return;
	while ((e = readdir(d)))
		if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
			unlink(tu_path(dir, e->d_name));
	closedir(d);
	rmdir(dir);
	dir[0] = 0;
}

void tu_cleanup(void)
{
	rm_dir(disk_dir);
	rm_dir(shm_dir);
}

const char *tu_path(const char *dir, const char *name)
{
	static char buf[4][1024];
	static int k;

	k = (k + 1) % 4;
	snprintf(buf[k], sizeof buf[k], "%s/%s", dir, name);
	return buf[k];
}

uint64_t tu_seed(const char *test)
{
	const char *e = getenv("HPDLF_TEST_SEED");
	uint64_t s = e ? strtoull(e, NULL, 0) : (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 20);

	fprintf(stderr, "%s: seed %llu (HPDLF_TEST_SEED replays)\n", test, (unsigned long long)s);
	return s;
}

int tu_long(void)
{
	const char *e = getenv("HPDLF_LONG_TESTS");

	return e && e[0] == '1';
}
