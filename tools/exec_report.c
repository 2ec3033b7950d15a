/* One sample of a run after each step and its --log-json line: the same
 * keys for inference and training (schema EXEC_LOG_SCHEMA), cumulative
 * counters and per-step rates side by side, so that a reader never has to
 * guess which of the two a figure is. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <json-c/json.h>

#include "hpdlf/exec.h"
#include "hpdlf/store.h"
#include "exec/budget.h"
#include "kernels/blas.h"
#include "tools/exec_report.h"

static double mono_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Resident set size now (ru_maxrss is only the peak). */
static uint64_t rss_now(void)
{
	unsigned long long size = 0, res = 0;
	FILE *f = fopen("/proc/self/statm", "r");

	if (!f)
		return 0;
	if (fscanf(f, "%llu %llu", &size, &res) != 2)
		res = 0;
	fclose(f);
	return (uint64_t)res * (uint64_t)sysconf(_SC_PAGESIZE);
}

void exec_sampler_init(struct exec_sampler *sp, struct hp_session *s)
{
	struct hs_store_stats st;

	memset(sp, 0, sizeof *sp);
	sp->t0 = mono_s();
	if (hp_session_store_stats(s, &st) < 0)
		return;
	for (int i = 0; i < st.ntiers && i <= HS_MAX_TIERS; i++) {
		sp->read[i] = st.tier[i].bytes_read;
		sp->written[i] = st.tier[i].bytes_written;
	}
}

/* Bytes per second of a counter that went from prev to now in ms. */
static double rate(uint64_t now, uint64_t prev, double ms)
{
	return now >= prev && ms > 0 ? (double)(now - prev) / (ms / 1e3) : 0;
}

void exec_sample_fill(struct exec_sampler *sp, struct hp_session *s, struct exec_sample *x)
{
	struct hs_store_stats st;
	struct hp_run_stats rs;
	struct hp_run_info ri = { .size = sizeof ri };

	x->time_s = mono_s() - sp->t0;
	x->rss = rss_now();
	x->stall_ms = hp_session_run_info(s, &ri) == 0 && ri.transitions ? ri.stall_ms : 0;
	x->ntiers = 0;
	if (hp_session_store_stats(s, &st) < 0) {
		hp_session_stats(s, &rs); /* in core every tensor stays allocated */
		x->resident = rs.peak_bytes;
		return;
	}
	x->resident = st.resident;
	struct hs_readahead_stats ra = { .size = sizeof ra };
	x->has_ahead = hp_session_readahead_stats(s, &ra) == 0;
	x->ahead_bytes = ra.bytes;
	x->ahead_taken = ra.taken;
	x->ahead_lost = ra.lost;
	x->ntiers = st.ntiers <= HS_MAX_TIERS + 1 ? st.ntiers : HS_MAX_TIERS + 1;
	for (int i = 0; i < x->ntiers; i++) {
		const struct hs_tier_stats *t = &st.tier[i];
		struct exec_tier_sample *o = &x->tier[i];
		snprintf(o->name, sizeof o->name, "%s", i ? t->name : "dram");
		o->used = i ? t->used : st.resident;
		o->bytes_read = t->bytes_read;
		o->bytes_written = t->bytes_written;
		o->bytes_kept = i ? hp_session_tier_kept(s, i - 1) : 0;
		o->read_per_s = rate(t->bytes_read, sp->read[i], x->ms);
		o->write_per_s = rate(t->bytes_written, sp->written[i], x->ms);
		sp->read[i] = t->bytes_read;
		sp->written[i] = t->bytes_written;
	}
}

/* JSON has no NaN nor infinity: a non-finite figure is null. */
static json_object *jnum(double v)
{
	return isfinite(v) ? json_object_new_double(v) : NULL;
}

static void add_int(json_object *o, const char *k, int64_t v)
{
	json_object_object_add(o, k, json_object_new_int64(v));
}

static json_object *tiers_json(const struct exec_sample *x)
{
	json_object *tiers = json_object_new_object();

	for (int i = 0; i < x->ntiers; i++) {
		const struct exec_tier_sample *t = &x->tier[i];
		json_object *j = json_object_new_object();
		add_int(j, "used", (int64_t)t->used);
		add_int(j, "bytes_read", (int64_t)t->bytes_read);
		add_int(j, "bytes_written", (int64_t)t->bytes_written);
		add_int(j, "bytes_kept", (int64_t)t->bytes_kept);
		json_object_object_add(j, "read_bytes_per_s", jnum(t->read_per_s));
		json_object_object_add(j, "write_bytes_per_s", jnum(t->write_per_s));
		json_object_object_add(tiers, t->name, j);
	}
	return tiers;
}

int exec_log_write(FILE *f, const struct exec_sample *x)
{
	json_object *o = json_object_new_object();
	int rc = 0;

	add_int(o, "schema", EXEC_LOG_SCHEMA);
	json_object_object_add(o, "mode", json_object_new_string(x->mode));
	add_int(o, "step", x->step);
	add_int(o, "steps", x->total);
	json_object_object_add(o, "time_s", jnum(x->time_s));
	json_object_object_add(o, "ms", jnum(x->ms));
	json_object_object_add(o, "gflops", jnum(x->ms > 0 ? x->flops / x->ms / 1e6 : 0));
	json_object_object_add(o, "stall_ms", jnum(x->stall_ms));
	add_int(o, "resident_bytes", (int64_t)x->resident);
	add_int(o, "budget_bytes", (int64_t)x->budget);
	add_int(o, "rss_bytes", (int64_t)x->rss);
	json_object_object_add(o, "tiers", tiers_json(x));
	if (x->has_ahead && !strcmp(x->mode, "train")) {
		add_int(o, "bytes_read_ahead", (int64_t)x->ahead_bytes);
		add_int(o, "bytes_read_ahead_taken", (int64_t)x->ahead_taken);
		add_int(o, "bytes_read_ahead_lost", (int64_t)x->ahead_lost);
	}
	if (x->has_loss) {
		json_object_object_add(o, "loss", jnum(x->loss));
		json_object_object_add(o, "lr", jnum(x->lr));
		add_int(o, "epoch", x->epoch);
		json_object_object_add(o, "samples_per_s", jnum(x->ms > 0 ? (double)x->samples / x->ms * 1e3 : 0));
		json_object_object_add(o, "checkpoint", json_object_new_boolean(x->checkpointed));
	}
	if (x->has_val) {
		json_object_object_add(o, "val_loss", jnum(x->val_loss));
		if (!isnan(x->val_accuracy))
			json_object_object_add(o, "val_accuracy", jnum(x->val_accuracy));
	}
	if (x->asgd_json)
		json_object_object_add(o, "asgd", json_tokener_parse(x->asgd_json));
	if (fprintf(f, "%s\n", json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN)) < 0 || fflush(f))
		rc = -EIO;
	json_object_put(o);
	return rc;
}

void exec_print_rss_budget(FILE *f, uint64_t rss, uint64_t budget)
{
	char b[32], pb[32];

	if (!budget)
		return;
	hp_format_size(budget, b, sizeof b);
	if (budget >= HP_BUDGET_PROCESS_FROM) {
		fprintf(f, " vs budget %s (%.0f%%)", b, 100.0 * (double)rss / (double)budget);
		return;
	}
	hp_format_size(HP_BUDGET_PROCESS_FROM, pb, sizeof pb);
	if (hp_budget_overhead() + HP_BUDGET_PROCESS_FROM / 4 >= HP_BUDGET_PROCESS_FROM) {
		/* --store's libfabric stack: the overhead alone is near or
		 * above 64 MiB, and comes on top of the tensors */
		char o[32];
		hp_format_size(hp_budget_overhead(), o, sizeof o);
		fprintf(f, " (budget %s bounds tensors; below %s the process's fixed overhead of %s comes on top)", b,
			pb, o);
		return;
	}
	fprintf(f, " (budget %s bounds tensors; below %s the process stays under %s: %.0f%%)", b, pb, pb,
		100.0 * (double)rss / (double)HP_BUDGET_PROCESS_FROM);
}

void exec_blas_json(struct json_object *o)
{
	struct hp_blas_seen b;

	hp_blas_seen(&b);
	json_object_object_add(o, "blas_buffer_bound_bytes", json_object_new_int64((int64_t)hp_budget_blas_bound()));
	json_object_object_add(o, "blas_call_bytes_max", json_object_new_int64((int64_t)b.call_bytes));
	json_object_object_add(o, "blas_calls", json_object_new_int64((int64_t)b.calls));
	json_object_object_add(o, "blas_threaded_calls", json_object_new_int64((int64_t)b.threaded_calls));
}
