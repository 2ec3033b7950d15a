/* --tensors: the per-tensor section of a statistics page (layout version
 * 2) as a table or JSON, sorted (--sort bytes|name|tier) and cut to the
 * first N (--top N).  A version-1 page (an older hpdlf) has no section:
 * insp_no_tensor_data says so. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

#include "hpdlf/tensor.h"
#include "tools/inspect.h"

#define NAME_W 32
#define COL_W 10

static const struct hs_store_stats *sort_stats; /* qsort has no argument */

static int ntiers_of(const struct hs_store_stats *s)
{
	return s->ntiers < 0 ? 0 : s->ntiers > HS_MAX_TIERS + 1 ? HS_MAX_TIERS + 1 : s->ntiers;
}

/* The place holding most of the tensor: a tier index, then ntiers for its
 * backing file, ntiers + 1 for "nowhere yet" (sorting: DRAM first). */
static int main_place(const struct hs_page_tensor *p, int nt)
{
	int best = nt + 1;
	uint64_t most = p->none_bytes;

	if (p->file_bytes > most || (p->file_bytes && p->file_bytes == most))
		best = nt, most = p->file_bytes;
	for (int k = nt - 1; k >= 0; k--)
		if (p->tier_bytes[k] && p->tier_bytes[k] >= most)
			best = k, most = p->tier_bytes[k];
	return best;
}

static const char *place_name(const struct hs_store_stats *s, int place, char *buf, size_t len)
{
	int nt = ntiers_of(s);

	if (place == nt)
		return "file";
	if (place > nt)
		return "unwritten";
	snprintf(buf, len, "%.*s", (int)sizeof s->tier[place].name, s->tier[place].name);
	return buf;
}

static int by_bytes(const struct hs_page_tensor *a, const struct hs_page_tensor *b)
{
	return a->bytes != b->bytes ? (a->bytes < b->bytes) - (a->bytes > b->bytes) : (a->id > b->id) - (a->id < b->id);
}

static int cmp_bytes(const void *x, const void *y)
{
	return by_bytes(*(const struct hs_page_tensor *const *)x, *(const struct hs_page_tensor *const *)y);
}

static int cmp_name(const void *x, const void *y)
{
	const struct hs_page_tensor *a = *(const struct hs_page_tensor *const *)x, *b = *(const struct hs_page_tensor *const *)y;
	int c = strcmp(a->name, b->name);

	return c ? c : by_bytes(a, b);
}

static int cmp_tier(const void *x, const void *y)
{
	const struct hs_page_tensor *a = *(const struct hs_page_tensor *const *)x, *b = *(const struct hs_page_tensor *const *)y;
	int nt = ntiers_of(sort_stats), pa = main_place(a, nt), pb = main_place(b, nt);

	return pa != pb ? (pa > pb) - (pa < pb) : by_bytes(a, b);
}

/* A tensor the runtime keeps for the next value of its size: its value is
 * dead (exec/runtime.c labels it so). */
static int is_spare(const struct hs_page_tensor *p)
{
	return !strcmp(p->name, "(free)");
}

/* The listed tensors in the asked order, at most o->top; their count.
 * spares: leave the runtime's spare tensors out (the table sums them up
 * in one line instead of letting them take the top rows). */
static int ordered(const struct insp_target *t, const struct insp_opts *o, const struct hs_page_tensor **v,
		   int spares)
{
	int n = 0;

	for (uint64_t i = 0; i < t->tens.ntensors; i++)
		if (spares || !is_spare(&t->tens.tensor[i]))
			v[n++] = &t->tens.tensor[i];
	sort_stats = &t->cur.stats;
	qsort(v, (size_t)n, sizeof *v, o->sort == INSP_SORT_NAME ? cmp_name : o->sort == INSP_SORT_TIER ? cmp_tier : cmp_bytes);
	return o->top > 0 && o->top < n ? o->top : n;
}

static void row(FILE *f, const struct insp_target *t, const struct hs_page_tensor *p)
{
	const struct hs_store_stats *s = &t->cur.stats;
	char b[32], nm[24], name[NAME_W + 1];
	size_t l = strlen(p->name);

	if (!p->name[0])
		snprintf(name, sizeof name, "#%" PRIu64, p->id);
	else if (l > NAME_W) /* keep the end: layer names differ there */
		snprintf(name, sizeof name, "~%s", p->name + l - (NAME_W - 1));
	else
		snprintf(name, sizeof name, "%s", p->name);
	fprintf(f, "  %-*s%*s", NAME_W, name, COL_W, hp_format_size(p->bytes, b, sizeof b));
	for (int k = 0; k < ntiers_of(s); k++)
		fprintf(f, "%*s", COL_W, p->tier_bytes[k] ? hp_format_size(p->tier_bytes[k], b, sizeof b) : "-");
	fprintf(f, "%*s", COL_W, p->file_bytes ? hp_format_size(p->file_bytes, b, sizeof b) : "-");
	fprintf(f, "%*s", COL_W, p->none_bytes ? hp_format_size(p->none_bytes, b, sizeof b) : "-");
	fprintf(f, "%*s", COL_W, p->pinned ? hp_format_size(p->pinned, b, sizeof b) : "-");
	if (p->last_use)
		snprintf(b, sizeof b, "%" PRIu64, t->tens.tick - p->last_use);
	fprintf(f, "%*s  %s\n", COL_W, p->last_use ? b : "never", place_name(s, main_place(p, ntiers_of(s)), nm, sizeof nm));
}

/* One line for the spare tensors the page lists, if any. */
static void spare_line(FILE *f, const struct insp_target *t)
{
	uint64_t n = 0, bytes = 0;
	char b[32];

	for (uint64_t i = 0; i < t->tens.ntensors; i++)
		if (is_spare(&t->tens.tensor[i])) {
			n++;
			bytes += t->tens.tensor[i].bytes;
		}
	if (n)
		fprintf(f, "  + %" PRIu64 " spare tensor%s in the page's list (kept for reuse, no value): %s\n", n,
			n == 1 ? "" : "s", hp_format_size(bytes, b, sizeof b));
}

void insp_tensors_table(FILE *f, const struct insp_target *t, const struct insp_opts *o)
{
	const struct hs_store_stats *s = &t->cur.stats;
	const struct hs_page_tensor *v[HS_PAGE_TENSORS];
	int n;

	if (t->cur.version < 2) {
		fprintf(f, "  tensors: %s\n", insp_no_tensor_data);
		return;
	}
	n = ordered(t, o, v, 0);
	fprintf(f, "  tensors: %d shown of %" PRIu64 " (the page holds the %d largest); by %s\n", n, s->tensors,
		HS_PAGE_TENSORS, o->sort == INSP_SORT_NAME ? "name" : o->sort == INSP_SORT_TIER ? "tier" : "bytes");
	fprintf(f, "  %-*s%*s", NAME_W, "name", COL_W, "bytes");
	for (int k = 0; k < ntiers_of(s); k++)
		fprintf(f, "%*.*s", COL_W, (int)sizeof s->tier[k].name, s->tier[k].name);
	fprintf(f, "%*s%*s%*s%*s  %s\n", COL_W, "file", COL_W, "unwritten", COL_W, "pinned", COL_W, "idle", "tier");
	for (int i = 0; i < n; i++)
		row(f, t, v[i]);
	spare_line(f, t);
}

static json_object *tensor_json(const struct insp_target *t, const struct hs_page_tensor *p)
{
	const struct hs_store_stats *s = &t->cur.stats;
	json_object *j = json_object_new_object(), *tiers = json_object_new_object();
	char nm[24];

	json_object_object_add(j, "name", json_object_new_string(p->name));
	json_object_object_add(j, "id", json_object_new_uint64(p->id));
	json_object_object_add(j, "bytes", json_object_new_uint64(p->bytes));
	json_object_object_add(j, "chunks", json_object_new_uint64(p->chunks));
	for (int k = 0; k < ntiers_of(s); k++)
		json_object_object_add(tiers, place_name(s, k, nm, sizeof nm), json_object_new_uint64(p->tier_bytes[k]));
	json_object_object_add(j, "tier_bytes", tiers);
	json_object_object_add(j, "file_bytes", json_object_new_uint64(p->file_bytes));
	json_object_object_add(j, "unwritten_bytes", json_object_new_uint64(p->none_bytes));
	json_object_object_add(j, "pinned", json_object_new_uint64(p->pinned));
	json_object_object_add(j, "last_use", json_object_new_uint64(p->last_use));
	json_object_object_add(j, "idle_pins", p->last_use ? json_object_new_uint64(t->tens.tick - p->last_use) : NULL);
	json_object_object_add(j, "tier", json_object_new_string(place_name(s, main_place(p, ntiers_of(s)), nm, sizeof nm)));
	return j;
}

/* The "tensor_residency" array (NULL for a version-1 page). */
json_object *insp_tensors_json(const struct insp_target *t, const struct insp_opts *o)
{
	const struct hs_page_tensor *v[HS_PAGE_TENSORS];
	json_object *a;
	int n;

	if (t->cur.version < 2)
		return NULL;
	a = json_object_new_array();
	n = ordered(t, o, v, 1);
	for (int i = 0; i < n; i++)
		json_object_array_add(a, tensor_json(t, v[i]));
	return a;
}
