/* Output of daemon targets (HOST:PORT): a table, a "daemon" object in the
 * JSON document and hpdlf_store_daemon_* Prometheus families.
 *
 * A daemon lends memory that clients read and write one-sided (RMA): its CPU
 * never sees those bytes, so it reports extents, allocated bytes and control
 * requests, never client bandwidth.  docs/hpdlf-store-inspect.md */
#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <json-c/json.h>

#include "hpdlf/tensor.h"
#include "tools/inspect.h"

#define LABEL_W 20
#define COL_W 13
#define DF(f) offsetof(struct hs_remote_stat, f)
#define RF(f) offsetof(struct hs_remote_tier_stat, f)

static const char no_rma[] = "bytes read and written by clients are not observable: clients use one-sided "
			     "RMA, which bypasses the daemon's CPU";

static uint64_t dget(const struct hs_remote_stat *s, size_t off)
{
	return *(const uint64_t *)((const char *)s + off);
}

static uint64_t rget(const struct hs_remote_tier_stat *s, size_t off)
{
	return *(const uint64_t *)((const char *)s + off);
}

/* The control requests, as counted by the daemon. */
static const struct { const char *name; size_t off; } requests[] = {
	{ "alloc", DF(allocs) },   { "alloc_refused", DF(alloc_failures) }, { "free", DF(frees) },
	{ "publish", DF(publishes) }, { "lookup", DF(lookups) },          { "remove", DF(removes) },
	{ "list", DF(lists) },     { "stat", DF(stats) },
};

static uint64_t requests_total(const struct hs_remote_stat *s)
{
	uint64_t n = 0;

	for (size_t i = 0; i < sizeof requests / sizeof requests[0]; i++)
		n += dget(s, requests[i].off);
	return n;
}

/* Per second between the last two reads of the same daemon run; -1: unknown. */
static double rate(const struct insp_target *t, uint64_t now, uint64_t before)
{
	double dt = t->cur_t - t->prev_t;

	if (!t->have_prev || !(dt > 0) || t->dcur.stat_version < 2)
		return -1;
	return now >= before ? (double)(now - before) / dt : 0;
}

static double region_rate(const struct insp_target *t, int k, size_t off)
{
	if (k >= t->dprev.ntiers)
		return -1;
	return rate(t, rget(&t->dcur.tier[k], off), rget(&t->dprev.tier[k], off));
}

/* ---- table ---- */

static const struct { const char *label; int size; size_t off; } region_rows[] = {
	{ "capacity", 1, RF(capacity) },   { "used", 1, RF(used) },
	{ "extents", 0, RF(extents) },     { "named tensors", 0, RF(named) },
	{ "allocs", 0, RF(allocs) },       { "frees", 0, RF(frees) },
	{ "bytes allocated", 1, RF(bytes_allocated) }, { "bytes freed", 1, RF(bytes_freed) },
};

static void fmt_cell(char *buf, size_t len, int size, double v, const char *unit)
{
	char s[32];

	if (v < 0)
		snprintf(buf, len, "-");
	else if (size)
		snprintf(buf, len, "%s%s", hp_format_size((uint64_t)v, s, sizeof s), unit);
	else
		snprintf(buf, len, "%.*f%s", unit[0] ? 1 : 0, v, unit);
}

static void table_regions(FILE *f, const struct insp_target *t)
{
	const struct hs_remote_stat *s = &t->dcur;
	char buf[40];

	fprintf(f, "  %-*s", LABEL_W, "region");
	for (int k = 0; k < s->ntiers; k++)
		fprintf(f, "%*s", COL_W, s->tier[k].kind[0] ? s->tier[k].kind : "?");
	fputc('\n', f);
	for (size_t r = 0; r < sizeof region_rows / sizeof region_rows[0]; r++) {
		fprintf(f, "  %-*s", LABEL_W, region_rows[r].label);
		for (int k = 0; k < s->ntiers; k++) {
			fmt_cell(buf, sizeof buf, region_rows[r].size, (double)rget(&s->tier[k], region_rows[r].off), "");
			fprintf(f, "%*s", COL_W, buf);
		}
		fputc('\n', f);
	}
	static const struct { const char *label; int size; size_t off; } now[] = {
		{ "allocs now", 0, RF(allocs) }, { "frees now", 0, RF(frees) },
		{ "allocated now", 1, RF(bytes_allocated) }, { "freed now", 1, RF(bytes_freed) },
	};
	for (size_t r = 0; r < sizeof now / sizeof now[0]; r++) {
		fprintf(f, "  %-*s", LABEL_W, now[r].label);
		for (int k = 0; k < s->ntiers; k++) {
			fmt_cell(buf, sizeof buf, now[r].size, region_rate(t, k, now[r].off), "/s");
			fprintf(f, "%*s", COL_W, buf);
		}
		fputc('\n', f);
	}
}

void insp_daemon_table(FILE *f, const struct insp_target *t)
{
	const struct hs_remote_stat *s = &t->dcur;
	char a[32], b[32], c[32], d[32];
	double rq;

	fprintf(f, "%s (hpdlf-store daemon%s%s): live", t->spec, s->provider[0] ? ", provider " : "", s->provider);
	if (s->stat_version >= 2)
		fprintf(f, ", up %.1f s", (double)s->uptime_ms / 1e3);
	fprintf(f, "\n  capacity %s, used %s, %" PRIu64 " extents, %" PRIu64 " named tensors, rss %s\n",
		hp_format_size(s->capacity, a, sizeof a), hp_format_size(s->used, b, sizeof b), s->extents, s->named,
		hp_format_size(s->rss, c, sizeof c));
	if (s->stat_version < 2) {
		fprintf(f, "  %" PRIu64 " connections open (this one included); this daemon predates the "
			"request counters\n", s->clients);
		return;
	}
	fprintf(f, "  clients: %" PRIu64 " connected (%" PRIu64 " authenticated, this one included), %" PRIu64
		" connections since the start, %" PRIu64 " handshakes refused, %" PRIu64 " leases expired\n",
		s->clients, s->clients_ready, s->connections, s->auth_failures, s->leases_expired);
	fprintf(f, "  requests: alloc %" PRIu64 " (%" PRIu64 " refused), free %" PRIu64 ", publish %" PRIu64
		", lookup %" PRIu64 " (%" PRIu64 " missed), remove %" PRIu64 ", list %" PRIu64 ", stat %" PRIu64
		", errors %" PRIu64 "\n", s->allocs, s->alloc_failures, s->frees, s->publishes, s->lookups,
		s->lookup_misses, s->removes, s->lists, s->stats, s->errors);
	rq = rate(t, requests_total(s), requests_total(&t->dprev));
	fmt_cell(d, sizeof d, 0, rq, "/s");
	fprintf(f, "  allocated %s, freed %s (%" PRIu64 " extents at lease ends); requests now %s\n",
		hp_format_size(s->bytes_allocated, a, sizeof a), hp_format_size(s->bytes_freed, b, sizeof b),
		s->lease_frees, d);
	table_regions(f, t);
	fprintf(f, "  %s\n", no_rma);
}

/* ---- JSON ---- */

static json_object *jrate(double v)
{
	return v < 0 ? NULL : json_object_new_double(v);
}

static const struct { const char *key; size_t off; } json_counters[] = {
	{ "clients_ready", DF(clients_ready) }, { "connections", DF(connections) },
	{ "auth_failures", DF(auth_failures) }, { "leases_expired", DF(leases_expired) },
	{ "allocs", DF(allocs) },               { "alloc_failures", DF(alloc_failures) },
	{ "frees", DF(frees) },                 { "lease_frees", DF(lease_frees) },
	{ "bytes_allocated", DF(bytes_allocated) }, { "bytes_freed", DF(bytes_freed) },
	{ "publishes", DF(publishes) },         { "lookups", DF(lookups) },
	{ "lookup_misses", DF(lookup_misses) }, { "removes", DF(removes) },
	{ "lists", DF(lists) },                 { "stats", DF(stats) },
	{ "errors", DF(errors) },
};

static json_object *json_region(const struct insp_target *t, int k)
{
	const struct hs_remote_tier_stat *r = &t->dcur.tier[k];
	json_object *o = json_object_new_object();

	json_object_object_add(o, "index", json_object_new_int(k));
	json_object_object_add(o, "kind", json_object_new_string(r->kind));
	for (size_t i = 0; i < sizeof region_rows / sizeof region_rows[0]; i++) {
		const char *key = region_rows[i].off == RF(named) ? "named" : region_rows[i].label;
		char name[32];
		snprintf(name, sizeof name, "%s", key);
		for (char *p = name; *p; p++)
			if (*p == ' ')
				*p = '_';
		json_object_object_add(o, name, json_object_new_uint64(rget(r, region_rows[i].off)));
	}
	json_object_object_add(o, "allocs_per_s_now", jrate(region_rate(t, k, RF(allocs))));
	json_object_object_add(o, "frees_per_s_now", jrate(region_rate(t, k, RF(frees))));
	json_object_object_add(o, "bytes_allocated_per_s_now", jrate(region_rate(t, k, RF(bytes_allocated))));
	json_object_object_add(o, "bytes_freed_per_s_now", jrate(region_rate(t, k, RF(bytes_freed))));
	return o;
}

json_object *insp_daemon_json(const struct insp_target *t)
{
	const struct hs_remote_stat *s = &t->dcur;
	json_object *o = json_object_new_object(), *regs = json_object_new_array();
	int full = s->stat_version >= 2;

	json_object_object_add(o, "stat_version", json_object_new_int((int)s->stat_version));
	json_object_object_add(o, "provider", s->provider[0] ? json_object_new_string(s->provider) : NULL);
	json_object_object_add(o, "read_ns", json_object_new_uint64(t->read_ns));
	json_object_object_add(o, "uptime_s", full ? json_object_new_double((double)s->uptime_ms / 1e3) : NULL);
	json_object_object_add(o, "capacity", json_object_new_uint64(s->capacity));
	json_object_object_add(o, "used", json_object_new_uint64(s->used));
	json_object_object_add(o, "extents", json_object_new_uint64(s->extents));
	json_object_object_add(o, "named", json_object_new_uint64(s->named));
	json_object_object_add(o, "rss", json_object_new_uint64(s->rss));
	json_object_object_add(o, "clients", json_object_new_uint64(s->clients));
	for (size_t i = 0; i < sizeof json_counters / sizeof json_counters[0]; i++)
		json_object_object_add(o, json_counters[i].key,
				       full ? json_object_new_uint64(dget(s, json_counters[i].off)) : NULL);
	json_object_object_add(o, "client_bytes_read", NULL);
	json_object_object_add(o, "client_bytes_written", NULL);
	json_object_object_add(o, "client_bytes_note", json_object_new_string(no_rma));
	json_object_object_add(o, "requests_per_s_now", jrate(rate(t, requests_total(s), requests_total(&t->dprev))));
	json_object_object_add(o, "allocs_per_s_now", jrate(rate(t, s->allocs, t->dprev.allocs)));
	json_object_object_add(o, "bytes_allocated_per_s_now",
			       jrate(rate(t, s->bytes_allocated, t->dprev.bytes_allocated)));
	for (int k = 0; k < s->ntiers; k++)
		json_object_array_add(regs, json_region(t, k));
	json_object_object_add(o, "regions", regs);
	return o;
}

/* ---- Prometheus ---- */

static int up(const struct insp_target *t)
{
	return t->kind == INSP_REMOTE && t->state == INSP_LIVE;
}

static const struct { const char *name, *type, *help; size_t off; int v2; } daemon_fams[] = {
	{ "hpdlf_store_daemon_capacity_bytes", "gauge", "Memory the daemon lends.", DF(capacity), 0 },
	{ "hpdlf_store_daemon_used_bytes", "gauge", "Bytes allocated to clients now.", DF(used), 0 },
	{ "hpdlf_store_daemon_extents", "gauge", "Extents allocated now (named ones included).", DF(extents), 0 },
	{ "hpdlf_store_daemon_named_tensors", "gauge", "Named tensors held.", DF(named), 0 },
	{ "hpdlf_store_daemon_rss_bytes", "gauge", "Resident set size of the daemon.", DF(rss), 0 },
	{ "hpdlf_store_daemon_clients", "gauge", "Connections open now (the scraping one included).", DF(clients), 0 },
	{ "hpdlf_store_daemon_clients_authenticated", "gauge", "Authenticated connections open now.",
	  DF(clients_ready), 1 },
	{ "hpdlf_store_daemon_connections_total", "counter", "Connections accepted.", DF(connections), 1 },
	{ "hpdlf_store_daemon_auth_failures_total", "counter", "Handshakes refused.", DF(auth_failures), 1 },
	{ "hpdlf_store_daemon_leases_expired_total", "counter", "Clients dropped for silence.", DF(leases_expired), 1 },
	{ "hpdlf_store_daemon_lease_frees_total", "counter", "Extents freed at lease ends.", DF(lease_frees), 1 },
	{ "hpdlf_store_daemon_allocated_bytes_total", "counter", "Bytes allocated.", DF(bytes_allocated), 1 },
	{ "hpdlf_store_daemon_freed_bytes_total", "counter", "Bytes freed.", DF(bytes_freed), 1 },
	{ "hpdlf_store_daemon_lookup_misses_total", "counter", "Lookups of unknown names.", DF(lookup_misses), 1 },
	{ "hpdlf_store_daemon_request_errors_total", "counter", "Requests answered with an error.", DF(errors), 1 },
};

static const struct { const char *name, *type, *help; size_t off; } region_fams[] = {
	{ "hpdlf_store_daemon_region_capacity_bytes", "gauge", "Capacity of the region.", RF(capacity) },
	{ "hpdlf_store_daemon_region_used_bytes", "gauge", "Bytes allocated in the region.", RF(used) },
	{ "hpdlf_store_daemon_region_extents", "gauge", "Extents allocated in the region.", RF(extents) },
	{ "hpdlf_store_daemon_region_named_tensors", "gauge", "Named tensors in the region.", RF(named) },
	{ "hpdlf_store_daemon_region_allocs_total", "counter", "Extents handed out.", RF(allocs) },
	{ "hpdlf_store_daemon_region_frees_total", "counter", "Extents returned.", RF(frees) },
	{ "hpdlf_store_daemon_region_allocated_bytes_total", "counter", "Bytes allocated.", RF(bytes_allocated) },
	{ "hpdlf_store_daemon_region_freed_bytes_total", "counter", "Bytes freed.", RF(bytes_freed) },
};

static void prom_requests(FILE *f, const struct insp_target *t, int n)
{
	const char *name = "hpdlf_store_daemon_requests_total";

	insp_prom_family(f, name, "counter", "Control requests served, by request.");
	for (int i = 0; i < n; i++)
		for (size_t r = 0; up(&t[i]) && t[i].dcur.stat_version >= 2 && r < sizeof requests / sizeof requests[0];
		     r++)
			insp_prom_sample(f, name, t[i].spec, "request", requests[r].name, NULL, NULL,
					 (double)dget(&t[i].dcur, requests[r].off));
}

void insp_daemon_prometheus(FILE *f, const struct insp_target *t, int n)
{
	int any = 0;
	char idx[16];

	for (int i = 0; i < n; i++)
		any |= up(&t[i]);
	if (!any)
		return;
	insp_prom_family(f, "hpdlf_store_daemon_uptime_seconds", "gauge", "Seconds since the daemon started.");
	for (int i = 0; i < n; i++)
		if (up(&t[i]) && t[i].dcur.stat_version >= 2)
			insp_prom_sample(f, "hpdlf_store_daemon_uptime_seconds", t[i].spec, NULL, NULL, NULL, NULL,
					 (double)t[i].dcur.uptime_ms / 1e3);
	for (size_t k = 0; k < sizeof daemon_fams / sizeof daemon_fams[0]; k++) {
		insp_prom_family(f, daemon_fams[k].name, daemon_fams[k].type, daemon_fams[k].help);
		for (int i = 0; i < n; i++)
			if (up(&t[i]) && (!daemon_fams[k].v2 || t[i].dcur.stat_version >= 2))
				insp_prom_sample(f, daemon_fams[k].name, t[i].spec, NULL, NULL, NULL, NULL,
						 (double)dget(&t[i].dcur, daemon_fams[k].off));
	}
	prom_requests(f, t, n);
	for (size_t k = 0; k < sizeof region_fams / sizeof region_fams[0]; k++) {
		insp_prom_family(f, region_fams[k].name, region_fams[k].type, region_fams[k].help);
		for (int i = 0; i < n; i++)
			for (int j = 0; up(&t[i]) && j < t[i].dcur.ntiers; j++) {
				snprintf(idx, sizeof idx, "%d", j);
				insp_prom_sample(f, region_fams[k].name, t[i].spec, "region", t[i].dcur.tier[j].kind,
						 "region_index", idx, (double)rget(&t[i].dcur.tier[j], region_fams[k].off));
			}
	}
}
