/* --plot: memory per tier and I/O bandwidth over time, as an SVG 1.1 file,
 * from a Chrome trace (hpdlf-exec --trace) or a --log-json file.
 *
 * Trace input: counter events ("ph":"C") whose name mentions memory,
 * resident, tier or bytes give the memory series (one per counter, or one per
 * argument when a counter carries several, e.g. {"name":"memory","args":
 * {"dram":B,"nvme":B}}); spans ("ph":"X") on the I/O lane (tid 100) or of an
 * I/O category give the bandwidth, from their "bytes" argument when present,
 * else as the fraction of time the lane was busy.  Log input: one object per
 * line with "ms" per step and "tiers":{NAME:{"used":B,"bytes_read":B,
 * "bytes_written":B}} (cumulative counters). */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <json-c/json.h>

#include "hpdlf/error.h"
#include "tools/inspect.h"
#include "tools/inspect_svg.h"

#define MAX_SERIES PLOT_MAX_SERIES
#define NBINS 160

struct pt {
	double t, v;            /* seconds, value */
};
struct series {
	char label[64];
	struct pt *p;
	int n, cap;
};
struct plot {
	struct series mem[MAX_SERIES];
	int nmem;
	double bw[2][NBINS];    /* read, write: bytes (or busy seconds) per bin */
	struct { double t0, t1, bytes; int dir; } *io;
	int nio, capio, io_bytes; /* io_bytes: spans carry bytes */
	struct series bwlog[2]; /* log input: bandwidth points */
	struct series loss;     /* log input: the training loss per step */
	int from_log;
	double tmin, tmax;
};

static int add_pt(struct series *s, double t, double v)
{
	if (s->n == s->cap) {
		int cap = s->cap ? 2 * s->cap : 64;
		struct pt *p = realloc(s->p, (size_t)cap * sizeof *p);
		if (!p)
			return -ENOMEM;
		s->p = p;
		s->cap = cap;
	}
	s->p[s->n++] = (struct pt){ t, v };
	return 0;
}

static struct series *mem_series(struct plot *pl, const char *label)
{
	for (int i = 0; i < pl->nmem; i++)
		if (!strcmp(pl->mem[i].label, label))
			return &pl->mem[i];
	if (pl->nmem == MAX_SERIES)
		return NULL;
	snprintf(pl->mem[pl->nmem].label, sizeof pl->mem[0].label, "%s", label);
	return &pl->mem[pl->nmem++];
}

static void span_time(struct plot *pl, double t0, double t1)
{
	if (t0 < pl->tmin)
		pl->tmin = t0;
	if (t1 > pl->tmax)
		pl->tmax = t1;
}

static int is_mem_counter(const char *name)
{
	static const char *words[] = { "memory", "resident", "tier", "bytes" };

	for (size_t i = 0; i < sizeof words / sizeof words[0]; i++)
		if (strcasestr(name, words[i]))
			return 1;
	return 0;
}

/* 0 read, 1 write, -1 not I/O. */
static int io_dir(const char *cat, const char *name, int tid)
{
	static const char *rd[] = { "load", "read", "prefetch", "promot" };
	static const char *wr[] = { "write", "evict", "store", "demot", "spill" };

	for (int pass = 0; pass < 2; pass++) {
		const char *s = pass ? name : cat;
		for (size_t i = 0; s && i < sizeof rd / sizeof rd[0]; i++)
			if (strcasestr(s, rd[i]))
				return 0;
		for (size_t i = 0; s && i < sizeof wr / sizeof wr[0]; i++)
			if (strcasestr(s, wr[i]))
				return 1;
	}
	return tid == 100 ? 0 : -1;
}

static const char *jstr(json_object *o, const char *k)
{
	json_object *v;

	return json_object_object_get_ex(o, k, &v) && json_object_is_type(v, json_type_string) ?
		json_object_get_string(v) : NULL;
}

static int jnum(json_object *o, const char *k, double *out)
{
	json_object *v;

	if (!json_object_object_get_ex(o, k, &v) ||
	    !(json_object_is_type(v, json_type_int) || json_object_is_type(v, json_type_double)))
		return 0;
	*out = json_object_get_double(v);
	return 1;
}

static int trace_counter(struct plot *pl, json_object *e, const char *name, double t)
{
	json_object *args;
	char label[64];
	int single;

	if (!is_mem_counter(name) || !json_object_object_get_ex(e, "args", &args) ||
	    !json_object_is_type(args, json_type_object))
		return 0;
	single = json_object_object_length(args) == 1;
	json_object_object_foreach(args, k, v) {
		struct series *s;
		if (!(json_object_is_type(v, json_type_int) || json_object_is_type(v, json_type_double)))
			continue;
		if (single && !strcmp(k, "value"))
			snprintf(label, sizeof label, "%s", name);
		else
			snprintf(label, sizeof label, "%s: %s", name, k);
		if (!(s = mem_series(pl, label)))
			continue;
		if (add_pt(s, t, json_object_get_double(v)) < 0)
			return -ENOMEM;
		span_time(pl, t, t);
	}
	return 0;
}

static int trace_span(struct plot *pl, json_object *e, double t)
{
	const char *cat = jstr(e, "cat"), *name = jstr(e, "name");
	double dur = 0, tid = 0, bytes = -1;
	json_object *args;
	int dir;

	jnum(e, "dur", &dur);
	jnum(e, "tid", &tid);
	span_time(pl, t, t + dur / 1e6);
	if ((dir = io_dir(cat, name, (int)tid)) < 0)
		return 0;
	if (json_object_object_get_ex(e, "args", &args) && jnum(args, "bytes", &bytes))
		pl->io_bytes = 1;
	if (pl->nio == pl->capio) {
		int cap = pl->capio ? 2 * pl->capio : 256;
		void *p = realloc(pl->io, (size_t)cap * sizeof *pl->io);
		if (!p)
			return -ENOMEM;
		pl->io = p;
		pl->capio = cap;
	}
	pl->io[pl->nio].t0 = t;
	pl->io[pl->nio].t1 = t + dur / 1e6;
	pl->io[pl->nio].bytes = bytes;
	pl->io[pl->nio++].dir = dir;
	return 0;
}

static int load_trace(struct plot *pl, json_object *events)
{
	size_t n = json_object_array_length(events);

	for (size_t i = 0; i < n; i++) {
		json_object *e = json_object_array_get_idx(events, i);
		const char *ph = jstr(e, "ph"), *name = jstr(e, "name");
		double ts;
		int rc = 0;
		if (!ph || !jnum(e, "ts", &ts))
			continue;
		if (!strcmp(ph, "C") && name)
			rc = trace_counter(pl, e, name, ts / 1e6);
		else if (!strcmp(ph, "X"))
			rc = trace_span(pl, e, ts / 1e6);
		if (rc < 0)
			return rc;
	}
	return 0;
}

/* What the lines of a --log-json file carry (docs/hpdlf-exec.md, LOG
 * SCHEMA): from schema 1 per-step rates beside cumulative counters; before
 * it, training lines (those with "samples_per_s") held per-step deltas
 * and inference lines cumulative counters. */
enum log_counters { LOG_CUMULATIVE, LOG_DELTAS, LOG_RATES };

struct log_state {
	double clock;           /* seconds: the sum of the step times so far */
	double prev[2];         /* cumulative bytes read, written at the last line */
	int have_prev;
};

static enum log_counters log_kind(json_object *o)
{
	double schema, x;

	if (jnum(o, "schema", &schema) && schema >= 1)
		return LOG_RATES;
	return jnum(o, "samples_per_s", &x) ? LOG_DELTAS : LOG_CUMULATIVE;
}

/* Bytes/s of the step from t0 to t1 by direction, from one line's tiers. */
static int log_rates(json_object *tiers, enum log_counters kind, struct log_state *ls, double dt, double out[2])
{
	static const char *cum[2] = { "bytes_read", "bytes_written" }, *per[2] = { "read_bytes_per_s", "write_bytes_per_s" };
	double sum[2] = { 0, 0 }, b;
	int any = 0;

	json_object_object_foreach(tiers, k, v) {
		(void)k;
		for (int d = 0; d < 2; d++)
			if (jnum(v, kind == LOG_RATES ? per[d] : cum[d], &b)) {
				sum[d] += b;
				any = 1;
			}
	}
	if (!any)
		return 0;
	for (int d = 0; d < 2 && kind != LOG_RATES; d++) {
		/* a counter that went back is a restarted process (a resumed run
		 * appending to its log): its count starts from zero again */
		double delta = kind == LOG_DELTAS ? sum[d] : sum[d] >= ls->prev[d] ? sum[d] - ls->prev[d] : sum[d];
		ls->prev[d] = sum[d];
		out[d] = delta / dt;
	}
	if (kind == LOG_RATES)
		out[0] = sum[0], out[1] = sum[1];
	any = kind != LOG_CUMULATIVE || ls->have_prev; /* the first cumulative line has no interval */
	ls->have_prev = 1;
	return any;
}

/* One --log-json line: memory per tier at the end of the step, bandwidth
 * over it (drawn from its start), the loss when there is one. */
static int log_line(struct plot *pl, json_object *o, struct log_state *ls)
{
	json_object *tiers;
	double ms, t0 = ls->clock, bw[2], loss, budget;

	if (!jnum(o, "ms", &ms) && !jnum(o, "time_ms", &ms))
		return 0;
	ls->clock += ms / 1e3;
	span_time(pl, t0, ls->clock);
	if (jnum(o, "loss", &loss) && isfinite(loss) && add_pt(&pl->loss, ls->clock, loss) < 0)
		return -ENOMEM;
	if (jnum(o, "budget_bytes", &budget) && budget > 0) {
		struct series *s = mem_series(pl, "budget");
		if (s && add_pt(s, ls->clock, budget) < 0)
			return -ENOMEM;
	}
	if (!json_object_object_get_ex(o, "tiers", &tiers) || !json_object_is_type(tiers, json_type_object))
		return 0;
	json_object_object_foreach(tiers, k, v) {
		double used;
		struct series *s = jnum(v, "used", &used) ? mem_series(pl, k) : NULL;
		if (s && add_pt(s, ls->clock, used) < 0)
			return -ENOMEM;
	}
	if (ls->clock > t0 && log_rates(tiers, log_kind(o), ls, ls->clock - t0, bw) &&
	    (add_pt(&pl->bwlog[0], t0, bw[0]) < 0 || add_pt(&pl->bwlog[1], t0, bw[1]) < 0))
		return -ENOMEM;
	return 0;
}

static int load_log(struct plot *pl, char *text, const char *path)
{
	struct log_state ls = { 0 };
	int lineno = 0, rc = 0;

	pl->from_log = 1;
	pl->tmin = 0;
	for (char *save = NULL, *line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		json_object *o = json_tokener_parse(line);
		lineno++;
		if (!o || !json_object_is_type(o, json_type_object)) {
			json_object_put(o);
			return hp_error(HP_EFORMAT, "%s:%d: neither a Chrome trace nor a JSON object per line", path,
					lineno);
		}
		rc = log_line(pl, o, &ls);
		json_object_put(o);
		if (rc < 0)
			return rc;
	}
	return 0;
}

int insp_read_file(const char *path, char **out)
{
	FILE *f = fopen(path, "r");
	size_t len = 0, cap = 1 << 16;
	char *buf = malloc(cap + 2);

	if (!f || !buf) {
		int e = f ? ENOMEM : errno;
		free(buf);
		if (f)
			fclose(f);
		/* An input that cannot be opened is the caller's mistake. */
		return hp_error(e == ENOMEM ? -ENOMEM : HP_EUSAGE, "%s: %s", path, strerror(e));
	}
	for (size_t r; (r = fread(buf + len, 1, cap - len, f)) > 0;) {
		len += r;
		if (len == cap) {
			char *nb = realloc(buf, (cap *= 2) + 2);
			if (!nb) {
				free(buf);
				fclose(f);
				return -ENOMEM;
			}
			buf = nb;
		}
	}
	fclose(f);
	buf[len] = 0;
	*out = buf;
	return 0;
}

/* A trace cut short (the process died) lacks its closing bracket. */
static json_object *parse_trace(char *text)
{
	json_object *root = json_tokener_parse(text);
	size_t len = strlen(text);

	if (root || text[strspn(text, " \t\r\n")] != '[')
		return root;
	while (len && strchr(" \t\r\n,", text[len - 1]))
		len--;
	text[len] = ']';
	text[len + 1] = 0;
	return json_tokener_parse(text);
}

static int load(struct plot *pl, const char *path)
{
	char *text;
	json_object *root, *events = NULL;
	int rc = insp_read_file(path, &text);

	if (rc < 0)
		return rc;
	pl->tmin = INFINITY;
	pl->tmax = -INFINITY;
	root = parse_trace(text);
	if (root && json_object_is_type(root, json_type_array))
		events = root;
	else if (root && json_object_is_type(root, json_type_object))
		json_object_object_get_ex(root, "traceEvents", &events);
	if (events && json_object_is_type(events, json_type_array)) {
		rc = load_trace(pl, events);
	} else {
		json_object_put(root);
		root = NULL;
		free(text);
		if ((rc = insp_read_file(path, &text)) < 0)
			return rc;
		rc = load_log(pl, text, path);
	}
	json_object_put(root);
	free(text);
	if (rc < 0)
		return rc;
	if (!(pl->tmax > pl->tmin) && !pl->nmem && !pl->nio)
		return hp_error(HP_EDATA, "%s: no events with time stamps to plot", path);
	if (!pl->nmem && !pl->nio && !pl->bwlog[0].n && !pl->loss.n)
		return hp_error(HP_EDATA,
				"%s: no memory counters and no I/O in this %s (memory needs counter events or "
				"per-tier \"used\" fields; see hpdlf-store-inspect(1), PLOT INPUT)", path,
				pl->from_log ? "log" : "trace");
	return 0;
}

/* Spread each span's bytes (or busy time) over the bins it covers. */
static void bin_io(struct plot *pl)
{
	double w = (pl->tmax - pl->tmin) / NBINS;

	for (int i = 0; i < pl->nio; i++) {
		double a = pl->io[i].t0 - pl->tmin, b = pl->io[i].t1 - pl->tmin, len = b - a;
		double amount = pl->io_bytes ? (pl->io[i].bytes > 0 ? pl->io[i].bytes : 0) : len;
		if (len <= 0) {
			int k = (int)(a / w);
			pl->bw[pl->io[i].dir][k < 0 ? 0 : k >= NBINS ? NBINS - 1 : k] += amount;
			continue;
		}
		for (int k = (int)(a / w); k < NBINS && k * w < b; k++) {
			double lo = fmax(a, k * w), hi = fmin(b, (k + 1) * w);
			if (hi > lo && k >= 0)
				pl->bw[pl->io[i].dir][k] += amount * (hi - lo) / len;
		}
	}
	for (int d = 0; d < 2; d++)
		for (int k = 0; k < NBINS; k++)
			pl->bw[d][k] /= w; /* bytes/s, or busy fraction */
}

static int cmp_pt(const void *a, const void *b)
{
	double x = ((const struct pt *)a)->t, y = ((const struct pt *)b)->t;

	return (x > y) - (x < y);
}

int insp_plot(const char *in_path, const char *svg_path, const char *title)
{
	struct plot pl;
	struct plot_view v;
	FILE *f;
	int rc;

	memset(&pl, 0, sizeof pl);
	if ((rc = load(&pl, in_path)) < 0)
		goto out;
	if (!(pl.tmax > pl.tmin))
		pl.tmax = pl.tmin + 1;
	if (!pl.from_log)
		bin_io(&pl);
	memset(&v, 0, sizeof v);
	v.title = title ? title : in_path;
	v.t0 = pl.tmin;
	v.t1 = pl.tmax;
	for (int i = 0; i < pl.nmem; i++) {
		qsort(pl.mem[i].p, (size_t)pl.mem[i].n, sizeof *pl.mem[i].p, cmp_pt);
		v.mem[i].label = pl.mem[i].label;
		v.mem[i].p = (const struct plot_point *)pl.mem[i].p;
		v.mem[i].n = pl.mem[i].n;
	}
	v.nmem = pl.nmem;
	v.io_kind = pl.from_log ? (pl.bwlog[0].n ? IO_BYTES : IO_NONE) :
		    !pl.nio ? IO_NONE : pl.io_bytes ? IO_BYTES : IO_BUSY;
	for (int d = 0; d < 2; d++) {
		if (pl.from_log) {
			v.bw[d].p = (const struct plot_point *)pl.bwlog[d].p;
			v.bw[d].n = pl.bwlog[d].n;
		} else {
			v.bins[d] = pl.bw[d];
			v.nbins = NBINS;
		}
	}
	v.loss = (struct plot_line){ "loss", (const struct plot_point *)pl.loss.p, pl.loss.n };
	if (!(f = fopen(svg_path, "w"))) {
		rc = hp_error(-errno, "%s: %s", svg_path, strerror(errno));
		goto out;
	}
	insp_svg_write(f, &v);
	if (fclose(f) != 0)
		rc = hp_error(-errno, "%s: write failed: %s", svg_path, strerror(errno));
out:
	for (int i = 0; i < pl.nmem; i++)
		free(pl.mem[i].p);
	free(pl.bwlog[0].p);
	free(pl.bwlog[1].p);
	free(pl.loss.p);
	free(pl.io);
	return rc;
}
