/* What a split candidate came to, remembered for the process (split_memo.h):
 * --plan builds the step split for one byte once for the run, once for its
 * smallest budget and again in every probe of the floor search below it,
 * and each build tries the same band counts. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "hpdlf/tensor.h"
#include "exec/split_memo.h"

/* 8 bytes a step, each word multiplied in and folded (as FNV-1a, a word
 * wide): a training graph of 30,000 nodes hashes in about a millisecond */
#define MIX_K 0x100000001b3ull

static uint64_t mix_w(uint64_t h, uint64_t w)
{
	h = (h ^ w) * MIX_K;
	return h ^ (h >> 29);
}

static uint64_t mix(uint64_t h, const void *p, size_t n)
{
	const unsigned char *b = p;
	uint64_t w;
	size_t i = 0;

	for (; i + 8 <= n; i += 8) {
		memcpy(&w, b + i, 8);
		h = mix_w(h, w);
	}
	w = n;
	for (; i < n; i++)
		w = (w << 8) | b[i];
	return mix_w(h, w);
}

static uint64_t mix_i(uint64_t h, int64_t v)
{
	return mix_w(h, (uint64_t)v);
}

static uint64_t mix_s(uint64_t h, const char *s)
{
	return s ? mix(h, s, strlen(s) + 1) : mix_i(h, -1);
}

/* Constant data up to this size is hashed (shape tensors, axes, small
 * constants: what shape inference reads); larger tensors are weights,
 * whose values no plan depends on, and their shape and blob are hashed. */
#define DATA_HASHED 4096

static uint64_t hash_attr(uint64_t h, const struct hp_attr *a)
{
	h = mix_s(h, a->name);
	h = mix_i(h, a->type);
	switch (a->type) {
	case HP_ATTR_FLOAT:
		return mix(h, &a->f, sizeof a->f);
	case HP_ATTR_INT:
		return mix_i(h, a->i);
	case HP_ATTR_STRING:
		return mix(mix_i(h, (int64_t)a->slen), a->s, a->s ? a->slen : 0);
	case HP_ATTR_INTS:
		return mix(mix_i(h, a->n), a->ints, a->ints ? (size_t)a->n * sizeof *a->ints : 0);
	case HP_ATTR_FLOATS:
		return mix(mix_i(h, a->n), a->floats, a->floats ? (size_t)a->n * sizeof *a->floats : 0);
	case HP_ATTR_STRINGS:
		h = mix_i(h, a->n);
		for (int i = 0; i < a->n; i++)
			h = mix_s(h, a->strings[i]);
		return h;
	case HP_ATTR_TENSOR: {
		size_t n = hp_tensor_bytes(&a->t);
		h = mix_i(h, a->t.dtype);
		h = mix_i(h, a->t.shape.rank);
		for (int d = 0; d < a->t.shape.rank && d < HP_MAX_RANK; d++)
			h = mix_i(h, a->t.shape.dims[d]);
		return a->t.data && n <= DATA_HASHED ? mix(h, a->t.data, n) : mix_i(h, (int64_t)n);
	}
	}
	return h;
}

/* Two 32-bit fields in one word (each kept whole: the pair is told
 * apart from any other), so that a value or node takes fewer steps. */
static uint64_t pair(int64_t lo, int64_t hi)
{
	return (uint64_t)(uint32_t)lo | (uint64_t)(uint32_t)hi << 32;
}

static uint64_t hash_value(uint64_t h, const struct hp_value *v)
{
	struct hp_tensor t = { .dtype = v->dtype, .shape = v->shape };
	size_t n = v->shape.rank >= 0 ? hp_tensor_bytes(&t) : 0;
	uint32_t named = 0; /* the dims with a dim_param, whose names follow */

	for (int d = 0; d < HP_MAX_RANK; d++)
		named |= (uint32_t)(v->dim_param[d] != NULL) << d;
	h = mix_s(h, v->name);
	h = mix_w(h, pair(v->kind, v->dtype));
	h = mix_w(h, pair(v->shape.rank, named));
	for (int d = 0; d < v->shape.rank && d < HP_MAX_RANK; d++)
		h = mix_i(h, v->shape.dims[d]);
	for (int d = 0; named && d < HP_MAX_RANK; d++)
		if (v->dim_param[d])
			h = mix_s(h, v->dim_param[d]);
	h = mix_w(h, pair(v->data != NULL, v->src.kind));
	if (v->data && n <= DATA_HASHED)
		h = mix(h, v->data, n);
	h = mix_w(h, pair(v->src.file, v->producer));
	h = mix_i(h, (int64_t)v->src.offset);
	h = mix_i(h, (int64_t)v->src.length);
	h = mix_w(h, pair(v->nconsumers, v->is_output));
	h = mix_w(h, pair(v->trainable, v->next));
	h = mix_w(h, pair(v->part_of, 0));
	return mix_i(h, (int64_t)v->part_offset);
}

static uint64_t hash_node(uint64_t h, const struct hp_node *n)
{
	h = mix_s(h, n->name);
	h = mix_s(h, n->op_type);
	h = mix_s(h, n->domain);
	h = mix_w(h, pair(n->ninputs, n->noutputs));
	h = mix(h, n->inputs, (size_t)n->ninputs * sizeof *n->inputs);
	h = mix(h, n->outputs, (size_t)n->noutputs * sizeof *n->outputs);
	h = mix_i(h, (int64_t)n->workspace);
	h = mix_w(h, pair(n->folded, n->sched));
	h = mix_i(h, n->nattrs);
	for (int a = 0; a < n->nattrs; a++)
		h = hash_attr(h, &n->attrs[a]);
	return h;
}

uint64_t hp_split_graph_hash(const struct hp_graph *g)
{
	uint64_t h = 0xcbf29ce484222325ull;

	h = mix_i(h, g->opset);
	h = mix_i(h, g->nvalues);
	for (int v = 0; v < g->nvalues; v++)
		h = hash_value(h, &g->values[v]);
	h = mix_i(h, g->nnodes);
	for (int i = 0; i < g->nnodes; i++)
		h = hash_node(h, &g->nodes[i]);
	h = mix_i(h, g->ninputs);
	h = mix(h, g->inputs, (size_t)g->ninputs * sizeof *g->inputs);
	h = mix_i(h, g->noutputs);
	h = mix(h, g->outputs, (size_t)g->noutputs * sizeof *g->outputs);
	return h ? h : 1; /* 0: no memo */
}

struct cut_entry {
	uint64_t ctx, cut, graph;
	int k, lean, ahead, rejoin;
	struct hp_split_info bands; /* what the band pass reported */
};

struct memo_entry {
	uint64_t ctx, graph, budget;
	int any_below; /* valid at every budget below info.min_after, and (the
			* lean pass found nothing to change: the graph is the
			* same at every budget) without a predicted time above */
	int floor;     /* info.min_after is a floor only (hp_split_memo_floor_add) */
	struct hp_split_info info;
};

/* Entries are a few dozen per budget searched; past the cap, no more are
 * kept (candidates are then built again, as without the memo). */
#define MEMO_CAP 8192

static pthread_mutex_t memo_lock = PTHREAD_MUTEX_INITIALIZER;
static struct memo_entry *memo;
static int nmemo, memo_cap;
static struct cut_entry *cuts;
static int ncuts, cuts_cap;

/* Array a (n entries used of *cap, each sz bytes) with room for one more,
 * or NULL (a stays as it is) at MEMO_CAP or out of memory. */
static void *grow(void *a, int n, int *cap, size_t sz)
{
	if (n < *cap)
		return a;
	if (*cap >= MEMO_CAP)
		return NULL;
	int c = *cap ? 2 * *cap : 64;
	void *m = realloc(a, (size_t)c * sz);
	if (m)
		*cap = c;
	return m;
}

int hp_split_memo_cut_find(uint64_t ctx, int k, int lean, int ahead, int rejoin, uint64_t cut, uint64_t *graph,
			   struct hp_split_info *bands)
{
	int found = 0;

	if (!ctx)
		return 0;
	pthread_mutex_lock(&memo_lock);
	for (int i = ncuts - 1; i >= 0 && !found; i--) {
		const struct cut_entry *e = &cuts[i];
		if (e->ctx == ctx && e->k == k && e->lean == lean && e->ahead == ahead && e->rejoin == rejoin &&
		    e->cut == cut) {
			*graph = e->graph;
			bands->nsplit = e->bands.nsplit;
			bands->axis = e->bands.axis;
			bands->ahead = e->bands.ahead;
			bands->rejoined = e->bands.rejoined;
			found = 1;
		}
	}
	pthread_mutex_unlock(&memo_lock);
	return found;
}

void hp_split_memo_cut_add(uint64_t ctx, int k, int lean, int ahead, int rejoin, uint64_t cut, uint64_t graph,
			   const struct hp_split_info *bands)
{
	if (!ctx)
		return;
	pthread_mutex_lock(&memo_lock);
	struct cut_entry *m = grow(cuts, ncuts, &cuts_cap, sizeof *cuts);
	if (m)
		(cuts = m)[ncuts++] = (struct cut_entry){ .ctx = ctx, .cut = cut, .graph = graph, .k = k, .lean = lean,
						    .ahead = ahead, .rejoin = rejoin, .bands = *bands };
	pthread_mutex_unlock(&memo_lock);
}

int hp_split_memo_find(uint64_t ctx, uint64_t graph, uint64_t budget, int want_ms, struct hp_split_info *out)
{
	int found = 0;

	if (!ctx)
		return 0;
	pthread_mutex_lock(&memo_lock);
	for (int i = nmemo - 1; i >= 0 && !found; i--) {
		const struct memo_entry *e = &memo[i];
		if (e->ctx != ctx || e->graph != graph || e->floor)
			continue;
		if (e->budget == budget && (!want_ms || e->info.ms >= 0 || e->info.min_after > budget)) {
			*out = e->info;
			found = 1;
		} else if (e->any_below && (budget < e->info.min_after || !want_ms)) {
			*out = e->info;
			out->ms = -1;
			found = 1;
		}
	}
	pthread_mutex_unlock(&memo_lock);
	return found;
}

void hp_split_memo_add(uint64_t ctx, uint64_t graph, uint64_t budget, int any_below, const struct hp_split_info *info)
{
	if (!ctx)
		return;
	pthread_mutex_lock(&memo_lock);
	struct memo_entry *m = grow(memo, nmemo, &memo_cap, sizeof *memo);
	if (m)
		(memo = m)[nmemo++] = (struct memo_entry){ .ctx = ctx, .graph = graph, .budget = budget,
						     .any_below = any_below, .info = *info };
	pthread_mutex_unlock(&memo_lock);
}

int hp_split_memo_floor_find(uint64_t ctx, uint64_t graph, uint64_t *floor)
{
	int found = 0;

	if (!ctx)
		return 0;
	pthread_mutex_lock(&memo_lock);
	for (int i = 0; i < nmemo; i++) {
		const struct memo_entry *e = &memo[i];
		if (e->ctx == ctx && e->graph == graph && e->floor && (!found || e->info.min_after > *floor)) {
			*floor = e->info.min_after;
			found = 1;
		}
	}
	pthread_mutex_unlock(&memo_lock);
	return found;
}

void hp_split_memo_floor_add(uint64_t ctx, uint64_t graph, uint64_t floor)
{
	if (!ctx)
		return;
	pthread_mutex_lock(&memo_lock);
	struct memo_entry *m = grow(memo, nmemo, &memo_cap, sizeof *memo);
	if (m)
		(memo = m)[nmemo++] = (struct memo_entry){ .ctx = ctx, .graph = graph, .floor = 1,
						     .info = { .min_after = floor, .ms = -1 } };
	pthread_mutex_unlock(&memo_lock);
}
