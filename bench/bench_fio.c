/* fio as the disk reference of the benchmarks; see bench_fio.h. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <json-c/json.h>

#include "bench_fio.h"

static char *slurp(FILE *f)
{
	char *text = NULL;
	size_t len = 0;
	FILE *m = open_memstream(&text, &len);
	int c;

	if (!m)
		return NULL;
	while ((c = fgetc(f)) != EOF)
		fputc(c, m);
	fclose(m);
	return text;
}

double hp_bench_fio(const char *dir, const char *rw, const char *bs, uint64_t size, unsigned qd, int want_iops)
{
	char cmd[2048];
	FILE *f;
	json_object *o, *jobs, *v;
	char *text;
	double r = -1;

	snprintf(cmd, sizeof cmd,
		 "fio --name=hpdlf --filename='%s/hpdlf-bench-fio.dat' --rw=%s --bs=%s --size=%" PRIu64
		 " --ioengine=io_uring --direct=1 --iodepth=%u --numjobs=1 %s --output-format=json 2>/dev/null",
		 dir, rw, bs, size, qd, want_iops ? "--number_ios=100000" : "");
	if (!(f = popen(cmd, "r")))
		return -1;
	text = slurp(f);
	if (pclose(f) != 0 || !text) {
		free(text);
		return -1;
	}
	o = json_tokener_parse(strchr(text, '{') ? strchr(text, '{') : text);
	if (o && json_object_object_get_ex(o, "jobs", &jobs) && json_object_array_length(jobs) > 0) {
		json_object *j = json_object_array_get_idx(jobs, 0), *d;
		if (json_object_object_get_ex(j, strstr(rw, "read") ? "read" : "write", &d) &&
		    json_object_object_get_ex(d, want_iops ? "iops" : "bw_bytes", &v))
			r = want_iops ? json_object_get_double(v) : json_object_get_double(v) / 1e6;
	}
	json_object_put(o);
	free(text);
	return r;
}

void hp_bench_fio_cleanup(const char *dir)
{
	char path[4200];

	snprintf(path, sizeof path, "%s/hpdlf-bench-fio.dat", dir);
	unlink(path);
}
