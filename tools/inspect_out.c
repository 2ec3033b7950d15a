/* Output of hpdlf-store-inspect: a table per target (tiers as columns),
 * a versioned JSON document, and the Prometheus text exposition format. */
#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <json-c/json.h>

#include "hpdlf/error.h"
#include "hpdlf/tensor.h"
#include "tools/inspect.h"

const char insp_no_tensor_data[] =
	"per-tensor residency is not available: the statistics page (layout version 1) carries "
	"only per-tier counters, no per-tensor data (the process runs an older hpdlf; pages of "
	"version 2 have a tensor section)";

#define LABEL_W 20
#define COL_W 13

static double now_realtime_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static double age_s(const struct insp_target *t)
{
	return now_realtime_s() - (double)t->cur.updated_ns / 1e9;
}

/* A statistics page was read (daemon targets have their own output). */
static int has_data(const struct insp_target *t)
{
	return t->kind == INSP_LOCAL && (t->state == INSP_LIVE || t->state == INSP_STALE);
}

static int daemon_live(const struct insp_target *t)
{
	return t->kind == INSP_REMOTE && t->state == INSP_LIVE;
}

/* ---- table ---- */

enum cell { C_SIZE, C_COUNT, C_PCT, C_RATE, C_LAT };

static void cell(char *buf, size_t len, enum cell k, double v)
{
	char s[32];

	if (v < 0) {
		snprintf(buf, len, "-");
		return;
	}
	switch (k) {
	case C_SIZE: hp_format_size((uint64_t)v, buf, len); break;
	case C_COUNT: snprintf(buf, len, "%.0f", v); break;
	case C_PCT: snprintf(buf, len, "%.1f%%", 100 * v); break;
	case C_RATE: snprintf(buf, len, "%s/s", hp_format_size((uint64_t)v, s, sizeof s)); break;
	case C_LAT:
		if (v >= 1e6)
			snprintf(buf, len, "%.2f s", v / 1e6);
		else if (v >= 1e3)
			snprintf(buf, len, "%.2f ms", v / 1e3);
		else
			snprintf(buf, len, "%.0f us", v);
		break;
	}
}

#define TF(f) offsetof(struct hs_tier_stats, f)
#define VF(f) offsetof(struct insp_tier_view, f)
struct row {
	const char *label;
	enum cell kind;
	int derived;            /* off is into struct insp_tier_view (double) */
	size_t off;
};
static const struct row rows[] = {
	{ "capacity", C_SIZE, 0, TF(capacity) },     { "used", C_SIZE, 0, TF(used) },
	{ "chunks", C_COUNT, 0, TF(chunks) },        { "hits", C_COUNT, 0, TF(hits) },
	{ "misses", C_COUNT, 0, TF(misses) },        { "hit ratio", C_PCT, 1, VF(hit_ratio) },
	{ "evictions", C_COUNT, 0, TF(evictions) },  { "promotions", C_COUNT, 0, TF(promotions) },
	{ "demotions", C_COUNT, 0, TF(demotions) },  { "reads", C_COUNT, 0, TF(reads) },
	{ "writes", C_COUNT, 0, TF(writes) },        { "bytes read", C_SIZE, 0, TF(bytes_read) },
	{ "bytes written", C_SIZE, 0, TF(bytes_written) },
	{ "read now", C_RATE, 1, VF(read_now) },     { "write now", C_RATE, 1, VF(write_now) },
	{ "read average", C_RATE, 1, VF(read_avg) }, { "write average", C_RATE, 1, VF(write_avg) },
	{ "latency p50", C_LAT, 1, VF(p50) },        { "latency p99", C_LAT, 1, VF(p99) },
	{ "latency p99.9", C_LAT, 1, VF(p999) },     { "prefetches", C_COUNT, 0, TF(prefetches) },
	{ "prefetch hits", C_COUNT, 0, TF(prefetch_hits) },
	{ "prefetch hit rate", C_PCT, 1, VF(prefetch_hit_rate) },
	{ "late prefetches", C_COUNT, 0, TF(prefetch_late) },
	{ "errors", C_COUNT, 0, TF(errors) },        { "crc errors", C_COUNT, 0, TF(crc_errors) },
};

static double row_value(const struct row *r, const struct hs_tier_stats *s, const struct insp_tier_view *v)
{
	if (r->derived)
		return *(const double *)((const char *)v + r->off);
	return (double)*(const uint64_t *)((const char *)s + r->off);
}

/* The first line: the process, or for a job's sum (inspect_jobs.c) the
 * job; a rank of a job also names its job and rank. */
static void print_title(FILE *f, const struct insp_target *t)
{
	if (t->job_sum) {
		fprintf(f, "job %s: SUM of %d ranks%s, updated %.2f s ago\n", t->job, t->job_sum,
			t->state == INSP_LIVE ? "" : " (all gone, not live)", age_s(t));
		return;
	}
	char who[160];
	if (t->job[0] && t->rank[0] && t->nranks > 0)
		snprintf(who, sizeof who, "%s (pid %ld, job %s rank %s of %d)", t->spec, (long)t->cur.pid, t->job,
			 t->rank, t->nranks);
	else if (t->job[0] && t->rank[0])
		snprintf(who, sizeof who, "%s (pid %ld, job %s rank %s)", t->spec, (long)t->cur.pid, t->job, t->rank);
	else
		snprintf(who, sizeof who, "%s (pid %ld)", t->spec, (long)t->cur.pid);
	if (t->state == INSP_STALE)
		fprintf(f, "%s: STALE - the process is gone; last data written %.1f s ago, not live\n", who, age_s(t));
	else
		fprintf(f, "%s: live, updated %.2f s ago\n", who, age_s(t));
}

static void print_header(FILE *f, const struct insp_target *t)
{
	const struct hs_store_stats *s = &t->cur.stats;
	char a[32], b[32], c[32], d[32], e[32];

	print_title(f, t);
	fprintf(f, "  budget %s, resident %s, pinned %s, staging %s, chunk %s, %" PRIu64 " tensors\n",
		hp_format_size(s->budget, a, sizeof a), hp_format_size(s->resident, b, sizeof b),
		hp_format_size(s->pinned, c, sizeof c), hp_format_size(s->staging, d, sizeof d),
		hp_format_size(s->chunk_size, e, sizeof e), s->tensors);
}

static void print_one(FILE *f, const struct insp_target *t, const struct insp_opts *o)
{
	const struct hs_store_stats *s = &t->cur.stats;
	struct insp_tier_view v[HS_MAX_TIERS + 1];
	int nt = s->ntiers < 0 ? 0 : s->ntiers > HS_MAX_TIERS + 1 ? HS_MAX_TIERS + 1 : s->ntiers;
	char buf[40];

	print_header(f, t);
	fprintf(f, "  %-*s", LABEL_W, "tier");
	for (int k = 0; k < nt; k++) {
		char name[sizeof s->tier[k].name + 1];
		memcpy(name, s->tier[k].name, sizeof s->tier[k].name);
		name[sizeof s->tier[k].name] = 0;
		fprintf(f, "%*s", COL_W, name[0] ? name : "?");
		insp_tier_view(t, k, &v[k]);
	}
	fputc('\n', f);
	for (size_t r = 0; r < sizeof rows / sizeof rows[0]; r++) {
		fprintf(f, "  %-*s", LABEL_W, rows[r].label);
		for (int k = 0; k < nt; k++) {
			cell(buf, sizeof buf, rows[r].kind, row_value(&rows[r], &s->tier[k], &v[k]));
			fprintf(f, "%*s", COL_W, buf);
		}
		fputc('\n', f);
	}
	if (o->tensors)
		insp_tensors_table(f, t, o);
}

void insp_print_table(FILE *f, const struct insp_target *t, int n, const struct insp_opts *o)
{
	int first = 1;

	for (int i = 0; i < n; i++) {
		if (!has_data(&t[i]) && !daemon_live(&t[i]))
			continue;
		if (!first)
			fputc('\n', f);
		if (has_data(&t[i]))
			print_one(f, &t[i], o);
		else
			insp_daemon_table(f, &t[i]);
		first = 0;
	}
}

/* ---- JSON ---- */

static json_object *jnum(double v)
{
	return v < 0 ? NULL : json_object_new_double(v);
}

/* The counters of struct hs_tier_stats under their own names. */
#define JF(f) { #f, TF(f) }
static const struct { const char *key; size_t off; } json_fields[] = {
	JF(capacity), JF(used), JF(chunks), JF(reads), JF(writes), JF(bytes_read), JF(bytes_written),
	JF(hits), JF(misses), JF(evictions), JF(promotions), JF(demotions), JF(prefetches),
	JF(prefetch_hits), JF(prefetch_late), JF(errors), JF(crc_errors),
};

static json_object *json_tier(const struct insp_target *t, int k)
{
	const struct hs_tier_stats *s = &t->cur.stats.tier[k];
	struct insp_tier_view v;
	json_object *o = json_object_new_object(), *h = json_object_new_array();
	char name[sizeof s->name + 1];

	insp_tier_view(t, k, &v);
	memcpy(name, s->name, sizeof s->name);
	name[sizeof s->name] = 0;
	json_object_object_add(o, "index", json_object_new_int(k));
	json_object_object_add(o, "name", json_object_new_string(name));
	for (size_t r = 0; r < sizeof json_fields / sizeof json_fields[0]; r++)
		json_object_object_add(o, json_fields[r].key,
				       json_object_new_uint64(*(const uint64_t *)((const char *)s + json_fields[r].off)));
	json_object_object_add(o, "hit_ratio", jnum(v.hit_ratio));
	json_object_object_add(o, "prefetch_hit_rate", jnum(v.prefetch_hit_rate));
	json_object_object_add(o, "read_bytes_per_s_now", jnum(v.read_now));
	json_object_object_add(o, "write_bytes_per_s_now", jnum(v.write_now));
	json_object_object_add(o, "read_bytes_per_s_avg", jnum(v.read_avg));
	json_object_object_add(o, "write_bytes_per_s_avg", jnum(v.write_avg));
	json_object_object_add(o, "latency_us_p50", jnum(v.p50));
	json_object_object_add(o, "latency_us_p99", jnum(v.p99));
	json_object_object_add(o, "latency_us_p999", jnum(v.p999));
	for (int i = 0; i < HS_LAT_BUCKETS; i++)
		json_object_array_add(h, json_object_new_uint64(s->lat_hist[i]));
	json_object_object_add(o, "latency_log2us_histogram", h);
	return o;
}

static json_object *json_target(const struct insp_target *t, const struct insp_opts *o)
{
	json_object *j = json_object_new_object();
	const struct hs_store_stats *s = &t->cur.stats;

	json_object_object_add(j, "target", json_object_new_string(t->spec));
	json_object_object_add(j, "kind", json_object_new_string(t->job_sum ? "job_sum" :
								 t->kind == INSP_LOCAL ? "pid" : "daemon"));
	if (t->kind == INSP_LOCAL && !t->job_sum)
		json_object_object_add(j, "pid", json_object_new_int((int)t->pid));
	if (t->kind == INSP_LOCAL && t->job[0]) {
		json_object_object_add(j, "job", json_object_new_string(t->job));
		json_object_object_add(j, "rank", t->rank[0] && !t->job_sum ?
					json_object_new_int((int)strtol(t->rank, NULL, 10)) : NULL);
		json_object_object_add(j, "nranks", t->nranks > 0 ? json_object_new_int(t->nranks) : NULL);
	}
	if (t->job_sum)
		json_object_object_add(j, "ranks_summed", json_object_new_int(t->job_sum));
	json_object_object_add(j, "state", json_object_new_string(insp_state_name(t->state)));
	json_object_object_add(j, "error", t->err[0] ? json_object_new_string(t->err) : NULL);
	if (daemon_live(t))
		json_object_object_add(j, "daemon", insp_daemon_json(t));
	if (!has_data(t))
		return j;
	json_object_object_add(j, "page_version", json_object_new_int((int)t->cur.version));
	json_object_object_add(j, "updated_ns", json_object_new_uint64(t->cur.updated_ns));
	json_object_object_add(j, "age_s", json_object_new_double(age_s(t)));
	json_object_object_add(j, "budget", json_object_new_uint64(s->budget));
	json_object_object_add(j, "resident", json_object_new_uint64(s->resident));
	json_object_object_add(j, "pinned", json_object_new_uint64(s->pinned));
	json_object_object_add(j, "staging", json_object_new_uint64(s->staging));
	json_object_object_add(j, "chunk_size", json_object_new_uint64(s->chunk_size));
	json_object_object_add(j, "tensors", json_object_new_uint64(s->tensors));
	json_object *tiers = json_object_new_array();
	for (int k = 0; k < s->ntiers && k <= HS_MAX_TIERS; k++)
		json_object_array_add(tiers, json_tier(t, k));
	json_object_object_add(j, "tiers", tiers);
	if (o->tensors) {
		json_object *tr = insp_tensors_json(t, o);
		json_object_object_add(j, "tensor_residency", tr);
		if (!tr)
			json_object_object_add(j, "tensor_residency_note", json_object_new_string(insp_no_tensor_data));
	}
	return j;
}

int insp_print_json(FILE *f, const struct insp_target *t, int n, const struct insp_opts *o, int pretty)
{
	json_object *doc = json_object_new_object(), *arr = json_object_new_array();

	json_object_object_add(doc, "schema", json_object_new_string(INSPECT_JSON_SCHEMA));
	json_object_object_add(doc, "version", json_object_new_int(INSPECT_JSON_VERSION));
	json_object_object_add(doc, "time", json_object_new_double(now_realtime_s()));
	for (int i = 0; i < n; i++)
		json_object_array_add(arr, json_target(&t[i], o));
	json_object_object_add(doc, "targets", arr);
	fprintf(f, "%s\n", json_object_to_json_string_ext(doc, pretty ? JSON_C_TO_STRING_PRETTY : JSON_C_TO_STRING_PLAIN));
	json_object_put(doc);
	return 0;
}

/* ---- Prometheus text exposition format ---- */

static void label_value(FILE *f, const char *s)
{
	fputc('"', f);
	for (; *s; s++) {
		if (*s == '\\' || *s == '"')
			fprintf(f, "\\%c", *s);
		else if (*s == '\n')
			fputs("\\n", f);
		else
			fputc(*s, f);
	}
	fputc('"', f);
}

static void labels(FILE *f, const struct insp_target *t, int tier, const char *extra_k, const char *extra_v)
{
	/* job, model and rank when known: series to aggregate over a job's
	 * processes and across its requeues, whose PIDs change, so the PID
	 * (target) is left out then; a process without a job id keeps it,
	 * or two runs of one model would give the same series */
	int ident_only = t->kind == INSP_LOCAL && t->job[0] && t->rank[0];
	const char *ident[3][2] = { { "job", t->job }, { "model", t->model }, { "rank", t->rank } };
	const char *sep = "";

	fputc('{', f);
	if (!ident_only) {
		fputs("target=", f);
		label_value(f, t->spec);
		sep = ",";
	}
	for (int i = 0; t->kind == INSP_LOCAL && i < 3; i++)
		if (ident[i][1][0]) {
			fprintf(f, "%s%s=", sep, ident[i][0]);
			label_value(f, ident[i][1]);
			sep = ",";
		}
	if (tier >= 0) {
		char name[sizeof t->cur.stats.tier[0].name + 1];
		memcpy(name, t->cur.stats.tier[tier].name, sizeof name - 1);
		name[sizeof name - 1] = 0;
		fputs(",tier=", f);
		label_value(f, name);
		fprintf(f, ",tier_index=\"%d\"", tier);
	}
	if (extra_k) {
		fprintf(f, ",%s=", extra_k);
		label_value(f, extra_v);
	}
	fputc('}', f);
}

static void family(FILE *f, const char *name, const char *type, const char *help)
{
	fprintf(f, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

void insp_prom_family(FILE *f, const char *name, const char *type, const char *help)
{
	family(f, name, type, help);
}

void insp_prom_sample(FILE *f, const char *name, const char *target, const char *k1, const char *v1,
		      const char *k2, const char *v2, double val)
{
	fprintf(f, "%s{target=", name);
	label_value(f, target);
	if (k1) {
		fprintf(f, ",%s=", k1);
		label_value(f, v1);
	}
	if (k2) {
		fprintf(f, ",%s=", k2);
		label_value(f, v2);
	}
	fprintf(f, "} %.17g\n", val);
}

static void sample(FILE *f, const char *name, const struct insp_target *t, int tier, const char *k, const char *v,
		   double val)
{
	fputs(name, f);
	labels(f, t, tier, k, v);
	fprintf(f, " %.17g\n", val);
}

struct pfam {
	const char *name, *type, *help;
	int derived;
	size_t off;
};
static const struct pfam tier_fams[] = {
	{ "hpdlf_store_tier_capacity_bytes", "gauge", "Capacity of the tier.", 0, TF(capacity) },
	{ "hpdlf_store_tier_used_bytes", "gauge", "Bytes in use on the tier.", 0, TF(used) },
	{ "hpdlf_store_tier_chunks", "gauge", "Chunks held by the tier.", 0, TF(chunks) },
	{ "hpdlf_store_tier_reads_total", "counter", "Read requests.", 0, TF(reads) },
	{ "hpdlf_store_tier_writes_total", "counter", "Write requests.", 0, TF(writes) },
	{ "hpdlf_store_tier_read_bytes_total", "counter", "Bytes read from the tier.", 0, TF(bytes_read) },
	{ "hpdlf_store_tier_written_bytes_total", "counter", "Bytes written to the tier.", 0, TF(bytes_written) },
	{ "hpdlf_store_tier_hits_total", "counter", "Requests that found the chunk on the tier.", 0, TF(hits) },
	{ "hpdlf_store_tier_misses_total", "counter", "Requests that did not find the chunk on the tier.", 0, TF(misses) },
	{ "hpdlf_store_tier_evictions_total", "counter", "Chunks evicted.", 0, TF(evictions) },
	{ "hpdlf_store_tier_promotions_total", "counter", "Chunks moved up to this tier.", 0, TF(promotions) },
	{ "hpdlf_store_tier_demotions_total", "counter", "Chunks moved down from this tier.", 0, TF(demotions) },
	{ "hpdlf_store_tier_prefetches_total", "counter", "Prefetches issued.", 0, TF(prefetches) },
	{ "hpdlf_store_tier_prefetch_hits_total", "counter", "Prefetched chunks used before eviction.", 0,
	  TF(prefetch_hits) },
	{ "hpdlf_store_tier_prefetch_late_total", "counter", "Prefetches still in flight when needed.", 0,
	  TF(prefetch_late) },
	{ "hpdlf_store_tier_errors_total", "counter", "I/O errors.", 0, TF(errors) },
	{ "hpdlf_store_tier_crc_errors_total", "counter", "Checksum mismatches on read-back.", 0, TF(crc_errors) },
	{ "hpdlf_store_tier_hit_ratio", "gauge", "hits / (hits + misses).", 1, VF(hit_ratio) },
	{ "hpdlf_store_tier_prefetch_hit_ratio", "gauge", "prefetch hits / prefetches.", 1, VF(prefetch_hit_rate) },
	{ "hpdlf_store_tier_read_bytes_per_second", "gauge", "Read bandwidth over the last sampling interval.", 1,
	  VF(read_now) },
	{ "hpdlf_store_tier_write_bytes_per_second", "gauge", "Write bandwidth over the last sampling interval.", 1,
	  VF(write_now) },
};

static void prom_store(FILE *f, const struct insp_target *t, int n)
{
	static const struct { const char *name, *help; size_t off; } g[] = {
		{ "hpdlf_store_budget_bytes", "DRAM budget of the store.", offsetof(struct hs_store_stats, budget) },
		{ "hpdlf_store_resident_bytes", "Bytes resident in DRAM.", offsetof(struct hs_store_stats, resident) },
		{ "hpdlf_store_pinned_bytes", "Bytes pinned in DRAM.", offsetof(struct hs_store_stats, pinned) },
		{ "hpdlf_store_staging_bytes", "Staging buffer bytes.", offsetof(struct hs_store_stats, staging) },
		{ "hpdlf_store_chunk_size_bytes", "Chunk size.", offsetof(struct hs_store_stats, chunk_size) },
		{ "hpdlf_store_tensors", "Tensors in the store.", offsetof(struct hs_store_stats, tensors) },
	};

	family(f, "hpdlf_store_up", "gauge", "1 if the target is a live process or daemon, else 0.");
	for (int i = 0; i < n; i++)
		sample(f, "hpdlf_store_up", &t[i], -1, NULL, NULL, t[i].state == INSP_LIVE);
	family(f, "hpdlf_store_stale", "gauge", "1 if the data comes from the stale page of a dead process.");
	for (int i = 0; i < n; i++)
		sample(f, "hpdlf_store_stale", &t[i], -1, NULL, NULL, t[i].state == INSP_STALE);
	family(f, "hpdlf_store_page_age_seconds", "gauge", "Seconds since the target last updated its statistics.");
	for (int i = 0; i < n; i++)
		if (has_data(&t[i]))
			sample(f, "hpdlf_store_page_age_seconds", &t[i], -1, NULL, NULL, age_s(&t[i]));
	for (size_t k = 0; k < sizeof g / sizeof g[0]; k++) {
		family(f, g[k].name, "gauge", g[k].help);
		for (int i = 0; i < n; i++)
			if (has_data(&t[i]))
				sample(f, g[k].name, &t[i], -1, NULL, NULL,
				       (double)*(const uint64_t *)((const char *)&t[i].cur.stats + g[k].off));
	}
}

/* The log2 latency histogram of one tier as a Prometheus histogram in
 * seconds: bucket i holds requests of [2^i, 2^(i+1)) us (bucket 0 from 0,
 * the last one everything slower), so its `le` is 2^(i+1) us and the last
 * is +Inf.  The page keeps no sum: _sum is estimated with each request at
 * its bucket's middle (1 us in bucket 0). */
static void latency_histogram(FILE *f, const char *name, const struct insp_target *t, int tier)
{
	const uint64_t *h = t->cur.stats.tier[tier].lat_hist;
	char fam[96], le[32];
	uint64_t acc = 0;
	double sum = 0;

	snprintf(fam, sizeof fam, "%s_bucket", name);
	for (int i = 0; i < HS_LAT_BUCKETS; i++) {
		acc += h[i];
		sum += (double)h[i] * (i ? 1.5 * (double)(1ull << i) : 1.0) / 1e6;
		if (i == HS_LAT_BUCKETS - 1)
			snprintf(le, sizeof le, "+Inf");
		else
			snprintf(le, sizeof le, "%.10g", (double)(2ull << i) / 1e6); /* exact: at most 10 digits */
		sample(f, fam, t, tier, "le", le, (double)acc);
	}
	snprintf(fam, sizeof fam, "%s_sum", name);
	sample(f, fam, t, tier, NULL, NULL, sum);
	snprintf(fam, sizeof fam, "%s_count", name);
	sample(f, fam, t, tier, NULL, NULL, (double)acc);
}

void insp_print_prometheus(FILE *f, const struct insp_target *t, int n)
{
	const char *lname = "hpdlf_store_tier_latency_seconds";

	prom_store(f, t, n);
	insp_daemon_prometheus(f, t, n);
	for (size_t k = 0; k < sizeof tier_fams / sizeof tier_fams[0]; k++) {
		const struct pfam *p = &tier_fams[k];
		family(f, p->name, p->type, p->help);
		for (int i = 0; i < n; i++)
			for (int j = 0; has_data(&t[i]) && j < t[i].cur.stats.ntiers && j <= HS_MAX_TIERS; j++) {
				struct insp_tier_view v;
				double val;
				insp_tier_view(&t[i], j, &v);
				val = p->derived ? *(const double *)((const char *)&v + p->off) :
					(double)*(const uint64_t *)((const char *)&t[i].cur.stats.tier[j] + p->off);
				if (val >= 0)
					sample(f, p->name, &t[i], j, NULL, NULL, val);
			}
	}
	family(f, lname, "histogram", "Tier request latency (log2 buckets; _sum estimated at bucket middles).");
	for (int i = 0; i < n; i++)
		for (int j = 0; has_data(&t[i]) && j < t[i].cur.stats.ntiers && j <= HS_MAX_TIERS; j++)
			latency_histogram(f, lname, &t[i], j);
}
