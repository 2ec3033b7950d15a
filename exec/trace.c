/* Chrome trace writer: events are streamed to the file as they come, so a
 * long run never holds its trace in memory. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "hpdlf/error.h"
#include "exec/trace.h"

struct hp_trace {
	FILE *f;
	char *path;
	double t0;
	int first;
	int refs;                   /* hp_trace_ref's holders, and the opener */
	pthread_mutex_t mu;
};

static double mono_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static void put_string(FILE *f, const char *s)
{
	fputc('"', f);
	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;
		if (c == '"' || c == '\\')
			fprintf(f, "\\%c", c);
		else if (c < 0x20)
			fprintf(f, "\\u%04x", c);
		else
			fputc(c, f);
	}
	fputc('"', f);
}

static void lane_name(struct hp_trace *t, int lane, const char *name)
{
	fprintf(t->f, "%s{\"ph\":\"M\",\"pid\":%d,\"tid\":%d,\"name\":\"thread_name\",\"args\":{\"name\":", t->first ? "" : ",\n",
		(int)getpid(), lane);
	put_string(t->f, name);
	fprintf(t->f, "}}");
	t->first = 0;
}

void hp_trace_lane(struct hp_trace *t, int lane, const char *name)
{
	if (!t)
		return;
	pthread_mutex_lock(&t->mu);
	lane_name(t, lane, name);
	pthread_mutex_unlock(&t->mu);
}

int hp_trace_open(const char *path, struct hp_trace **out)
{
	struct hp_trace *t = calloc(1, sizeof *t);

	*out = NULL;
	if (!t)
		return -ENOMEM;
	t->f = fopen(path, "w");
	if (!t->f) {
		int e = errno;
		free(t);
		return hp_error(-e, "%s: %s", path, strerror(e));
	}
	t->path = strdup(path);
	t->t0 = mono_us();
	t->first = 1;
	t->refs = 1;
	pthread_mutex_init(&t->mu, NULL);
	fprintf(t->f, "[\n");
	lane_name(t, HP_LANE_COMPUTE, "compute worker 0");
	*out = t;
	return 0;
}

double hp_trace_now_us(const struct hp_trace *t)
{
	return t ? mono_us() - t->t0 : 0;
}

void hp_trace_span(struct hp_trace *t, int lane, const char *cat, const char *name, double begin_us, double end_us)
{
	if (!t)
		return;
	pthread_mutex_lock(&t->mu);
	fprintf(t->f, ",\n{\"ph\":\"X\",\"pid\":%d,\"tid\":%d,\"ts\":%.3f,\"dur\":%.3f,\"cat\":", (int)getpid(), lane,
		begin_us, end_us > begin_us ? end_us - begin_us : 0);
	put_string(t->f, cat);
	fprintf(t->f, ",\"name\":");
	put_string(t->f, name);
	fputc('}', t->f);
	pthread_mutex_unlock(&t->mu);
}

void hp_trace_span_bytes(struct hp_trace *t, int lane, const char *cat, const char *name, double begin_us,
			 double end_us, uint64_t bytes)
{
	if (!t)
		return;
	pthread_mutex_lock(&t->mu);
	fprintf(t->f, ",\n{\"ph\":\"X\",\"pid\":%d,\"tid\":%d,\"ts\":%.3f,\"dur\":%.3f,\"cat\":", (int)getpid(), lane,
		begin_us, end_us > begin_us ? end_us - begin_us : 0);
	put_string(t->f, cat);
	fprintf(t->f, ",\"name\":");
	put_string(t->f, name);
	fprintf(t->f, ",\"args\":{\"bytes\":%llu}}", (unsigned long long)bytes);
	pthread_mutex_unlock(&t->mu);
}

void hp_trace_counters(struct hp_trace *t, const char *name, double at_us, int n, const char *const *keys,
		       const double *vals)
{
	if (!t)
		return;
	pthread_mutex_lock(&t->mu);
	fprintf(t->f, ",\n{\"ph\":\"C\",\"pid\":%d,\"ts\":%.3f,\"name\":", (int)getpid(), at_us);
	put_string(t->f, name);
	fprintf(t->f, ",\"args\":{");
	for (int i = 0; i < n; i++) {
		fprintf(t->f, "%s", i ? "," : "");
		put_string(t->f, keys[i]);
		fprintf(t->f, ":%.0f", vals[i]);
	}
	fprintf(t->f, "}}");
	pthread_mutex_unlock(&t->mu);
}

void hp_trace_counter(struct hp_trace *t, const char *name, double at_us, double value)
{
	if (!t)
		return;
	pthread_mutex_lock(&t->mu);
	fprintf(t->f, ",\n{\"ph\":\"C\",\"pid\":%d,\"ts\":%.3f,\"name\":", (int)getpid(), at_us);
	put_string(t->f, name);
	fprintf(t->f, ",\"args\":{\"value\":%.0f}}", value);
	pthread_mutex_unlock(&t->mu);
}

struct hp_trace *hp_trace_ref(struct hp_trace *t)
{
	if (t) {
		pthread_mutex_lock(&t->mu);
		t->refs++;
		pthread_mutex_unlock(&t->mu);
	}
	return t;
}

int hp_trace_close(struct hp_trace *t)
{
	int rc = 0, last;

	if (!t)
		return 0;
	pthread_mutex_lock(&t->mu);
	last = --t->refs == 0;
	pthread_mutex_unlock(&t->mu);
	if (!last)
		return 0;
	fprintf(t->f, "\n]\n");
	if (fclose(t->f) != 0)
		rc = hp_error(-errno, "%s: write failed: %s", t->path, strerror(errno));
	pthread_mutex_destroy(&t->mu);
	free(t->path);
	free(t);
	return rc;
}
