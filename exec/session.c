/* Sessions: the public calls check their arguments and hand over to one of
 * two executors behind struct hp_executor (exec_internal.h): the in-core
 * one here runs the inferred graph node by node with liveness-based buffer
 * lifetimes; the out-of-core one (runtime.c: task net + store) replaces the
 * memory management.  Kernels and the API stay the same. */
#include <errno.h>
#include <stddef.h>
#include <malloc.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "hpdlf/error.h"
#include "hpdlf/exec.h"
#include "hpdlf/kernels.h"
#include "hpdlf/store.h"
#include "common/cpus.h"
#include "exec/compile.h"
#include "exec/comm.h"
#include "exec/comm_thread.h"
#include "exec/exec_internal.h"
#include "exec/trace.h"
#include "kernels/blas.h"

/* The in-core executor's state: named `s` in its functions below. */
struct hp_core {
	const struct hp_graph *g;
	struct hp_pool *pool;
	struct hp_trace *trace;
	struct hp_prof *prof;
	void **buf;            /* per value: run-time buffer or NULL */
	unsigned char *arena;  /* every activation at a planned offset */
	uint64_t arena_size;
	unsigned char *owned;  /* per value: buf[v] was malloc'd (inputs, weights, state) */
	int *last_use;         /* per value: last schedule position using it, -1 unused */
	int *order, *pos;      /* the schedule (comm_order.c) and each node's position in it */
	char *deferred;        /* per node: reads a reduction's sums (comm_order.c) */
	char *cat_skip;        /* per node: a Concat whose inputs are written into its output (merge_concat) */
	char *cat_dst;         /* per value: such a Concat's output (its bytes never move) */
	uint64_t *ticket;      /* per node: its collective on the comm thread, 0 none */
	uint64_t waited;       /* every ticket up to this one completed */
	int overlap;           /* collectives go to the comm thread */
	void *ws;
	size_t ws_size;
	size_t cur_bytes, peak_bytes, weight_bytes;
};

static double now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static size_t value_bytes(const struct hp_value *v)
{
	struct hp_tensor t = { .dtype = v->dtype, .shape = v->shape };

	return hp_tensor_bytes(&t);
}

/* A buffer the session owns outright (inputs, weights, run-to-run state). */
static void *buf_alloc(struct hp_core *s, int v, size_t bytes)
{
	void *p = aligned_alloc(64, (bytes + 63) / 64 * 64 + 64);

	if (p) {
		s->cur_bytes += bytes;
		s->owned[v] = 1;
	}
	return p;
}

/* Last schedule position using each value; graph outputs live to the end. */
static int compute_lifetimes(struct hp_core *s)
{
	const struct hp_graph *g = s->g;

	s->last_use = malloc((size_t)g->nvalues * sizeof *s->last_use);
	s->buf = calloc((size_t)g->nvalues, sizeof *s->buf);
	s->owned = calloc((size_t)g->nvalues + 1, 1);
	s->order = malloc(((size_t)g->nnodes + 1) * sizeof *s->order);
	s->pos = malloc(((size_t)g->nnodes + 1) * sizeof *s->pos);
	s->deferred = malloc((size_t)g->nnodes + 1);
	s->ticket = calloc((size_t)g->nnodes + 1, sizeof *s->ticket);
	s->cat_skip = calloc((size_t)g->nnodes + 1, 1);
	s->cat_dst = calloc((size_t)g->nvalues + 1, 1);
	if (!s->last_use || !s->buf || !s->owned || !s->order || !s->pos || !s->deferred || !s->ticket || !s->cat_skip ||
	    !s->cat_dst)
		return hp_error(-ENOMEM, "out of memory");
	s->overlap = hp_comm_thread_enabled();
	hp_comm_run_order(g, s->deferred, s->order);
	for (int k = 0; k < g->nnodes; k++)
		s->pos[s->order[k]] = k;
	for (int v = 0; v < g->nvalues; v++)
		s->last_use[v] = g->values[v].is_output ? g->nnodes : -1;
	for (int v = 0; v < g->nvalues; v++)
		if (g->values[v].next >= 0) {
			s->last_use[g->values[v].next] = g->nnodes;
			s->last_use[v] = g->nnodes;
		}
	for (int i = 0; i < g->nnodes; i++) {
		const struct hp_node *n = &g->nodes[i];
		if (n->folded)
			continue;
		for (int j = 0; j < n->ninputs; j++)
			if (n->inputs[j] >= 0 && s->last_use[n->inputs[j]] < s->pos[i])
				s->last_use[n->inputs[j]] = s->pos[i];
		if (n->workspace > s->ws_size)
			s->ws_size = n->workspace;
	}
	hp_comm_keep_inputs(g, s->last_use);
	return 0;
}

/* Values computed by the schedule each run; everything else (inputs,
 * weights, constants, state carried between runs) lives outside the arena. */
static int in_arena(const struct hp_graph *g, const char *is_state, int v)
{
	const struct hp_value *val = &g->values[v];

	return val->kind == HP_VALUE_ACTIVATION && !val->data && val->producer >= 0 && !is_state[v];
}

/* The root of v's group of values sharing bytes; *at (if given) gets v's
 * byte offset in the root's bytes.  Not compressed: a Concat's inputs
 * hang off its output at their offsets (merge_concat), and the groups
 * are chains of a few in-place ops. */
static int find_root(const int *up, const uint64_t *off, int v, uint64_t *at)
{
	uint64_t o = 0;

	while (up[v] != v) {
		o += off[v];
		v = up[v];
	}
	if (at)
		*at = o;
	return v;
}

/* An output may take its input's bytes when the op allows it and the
 * input dies at this node: same size, activations on both sides. */
static void merge_inplace(struct hp_core *s, const char *is_state, int *up, const uint64_t *off, int i)
{
	const struct hp_graph *g = s->g;
	const struct hp_node *n = &g->nodes[i];
	int a, b;

	if (!(n->op->flags & (HP_OP_INPLACE | HP_OP_ALIAS)) || n->ninputs < 1 || n->noutputs < 1)
		return;
	a = n->inputs[0];
	b = n->outputs[0];
	if (a < 0 || b < 0 || !in_arena(g, is_state, a) || !in_arena(g, is_state, b) || s->last_use[a] != s->pos[i])
		return;
	if (value_bytes(&g->values[a]) != value_bytes(&g->values[b]) || g->values[a].dtype != g->values[b].dtype)
		return;
	for (int j = 1; j < n->ninputs; j++)
		if (n->inputs[j] == a && !(n->op->flags & HP_OP_INPLACE))
			return;
	up[find_root(up, off, b, NULL)] = find_root(up, off, a, NULL);
}

/* Input j of Concat node i may be written straight into the output at
 * byte offset `at`: an activation of its own bytes (a group at offset 0,
 * not already some Concat's slice) that dies at the Concat, of the
 * output's dtype; `at` keeps kernels' 64-byte alignment. */
static int cat_input_fits(const struct hp_core *s, const char *is_state, const int *up, const uint64_t *off,
			  const char *sliced, int i, int j, uint64_t at)
{
	const struct hp_graph *g = s->g;
	const struct hp_node *n = &g->nodes[i];
	int a = n->inputs[j], r;
	uint64_t base;

	if (a < 0 || !in_arena(g, is_state, a) || s->last_use[a] != s->pos[i] || at % 64 ||
	    g->values[a].dtype != g->values[n->outputs[0]].dtype)
		return 0;
	r = find_root(up, off, a, &base);
	if (base || sliced[r] || r == find_root(up, off, n->outputs[0], NULL))
		return 0;
	for (int k = 0; k < j; k++) /* Concat(x, x): x cannot lie in two places */
		if (n->inputs[k] >= 0 && find_root(up, off, n->inputs[k], NULL) == r)
			return 0;
	return 1;
}

/* A Concat along an axis with nothing outside it (batch 1 along the
 * channels, as SqueezeNet's fire modules and GoogLeNet's inception blocks
 * run) whose inputs die at it: each input's producer writes into its slice
 * of the output, and the Concat copies nothing.  At 2 threads the copy
 * read slices that the other core had written, 22 us a SqueezeNet Concat
 * against 2.5 us on one thread.  The same bytes are computed either way. */
static void merge_concat(struct hp_core *s, const char *is_state, int *up, uint64_t *off, char *sliced, int i)
{
	const struct hp_graph *g = s->g;
	const struct hp_node *n = &g->nodes[i];
	int b = n->noutputs == 1 ? n->outputs[0] : -1, rank, axis;
	uint64_t at = 0, base;

	if (strcmp(n->op_type, "Concat") || b < 0 || !in_arena(g, is_state, b) || n->ninputs < 1)
		return;
	rank = g->values[b].shape.rank;
	axis = (int)hp_attr_int(n, "axis", 0);
	axis += axis < 0 ? rank : 0;
	if (axis < 0 || axis >= rank)
		return;
	for (int d = 0; d < axis; d++)
		if (g->values[b].shape.dims[d] != 1)
			return;
	for (int j = 0; j < n->ninputs; j++) {
		if (!cat_input_fits(s, is_state, up, off, sliced, i, j, at))
			return;
		at += value_bytes(&g->values[n->inputs[j]]);
	}
	if (find_root(up, off, b, &base) != b || base || at != value_bytes(&g->values[b]))
		return;
	at = 0;
	for (int j = 0; j < n->ninputs; j++) {
		int r = find_root(up, off, n->inputs[j], NULL);
		up[r] = b;
		off[r] = at;
		sliced[r] = 1;
		at += value_bytes(&g->values[n->inputs[j]]);
	}
	s->cat_skip[i] = 1;
	s->cat_dst[b] = 1;
}

/* Plan the arena: one item per group of values sharing bytes in place. */
static int plan_arena(struct hp_core *s)
{
	const struct hp_graph *g = s->g;
	int nv = g->nvalues, rc = -ENOMEM;
	int *up = malloc((size_t)(nv + 1) * sizeof *up), *item = malloc((size_t)(nv + 1) * sizeof *item);
	uint64_t *off = calloc((size_t)nv + 1, sizeof *off), at;
	char *is_state = calloc((size_t)nv + 1, 1), *sliced = calloc((size_t)nv + 1, 1);
	struct hp_arena_item *it = calloc((size_t)nv + 1, sizeof *it);
	int nit = 0;

	if (!up || !item || !off || !is_state || !sliced || !it)
		goto out;
	for (int v = 0; v < nv; v++) {
		up[v] = v;
		item[v] = -1;
		if (g->values[v].next >= 0)
			is_state[v] = is_state[g->values[v].next] = 1;
	}
	for (int i = 0; i < g->nnodes; i++)
		if (!g->nodes[i].folded)
			merge_inplace(s, is_state, up, off, i);
	for (int k = 0; k < g->nnodes; k++) /* in schedule order: a Concat's output may be a later one's slice */
		if (!g->nodes[s->order[k]].folded)
			merge_concat(s, is_state, up, off, sliced, s->order[k]);
	for (int v = 0; v < nv; v++) {
		int r, start, end;
		if (!in_arena(g, is_state, v))
			continue;
		r = find_root(up, off, v, &at);
		start = s->pos[g->values[v].producer];
		end = s->last_use[v] < start ? start : s->last_use[v];
		if (item[r] < 0) {
			item[r] = nit++;
			it[item[r]] = (struct hp_arena_item){ value_bytes(&g->values[v]), start, end, 0 };
		}
		struct hp_arena_item *x = &it[item[r]];
		if (start < x->start)
			x->start = start;
		if (end > x->end)
			x->end = end;
		if (at + value_bytes(&g->values[v]) > x->size)
			x->size = at + value_bytes(&g->values[v]);
	}
	rc = hp_arena_place(it, nit, 64, &s->arena_size);
	if (rc < 0)
		goto out;
	s->arena = aligned_alloc(64, s->arena_size + 64);
	if (!s->arena) {
		rc = hp_error(-ENOMEM, "out of memory for the %llu-byte tensor arena", (unsigned long long)s->arena_size);
		goto out;
	}
	for (int v = 0; v < nv; v++)
		if (in_arena(g, is_state, v)) {
			int r = find_root(up, off, v, &at);
			s->buf[v] = s->arena + it[item[r]].offset + at;
		}
	rc = 0;
out:
	if (rc == -ENOMEM && !hp_errmsg()[0])
		hp_error(rc, "out of memory planning the tensor arena");
	free(up), free(item), free(off), free(is_state), free(sliced), free(it);
	return rc;
}

/* Weights stay resident across runs in core: load each one used, and give
 * run-to-run state its own buffers (their pointers swap after each run). */
static int load_weights(struct hp_core *s)
{
	const struct hp_graph *g = s->g;
	char *is_state = calloc((size_t)g->nvalues + 1, 1);
	int rc = 0;

	if (!is_state)
		return hp_error(-ENOMEM, "out of memory");
	for (int v = 0; v < g->nvalues; v++)
		if (g->values[v].next >= 0)
			is_state[v] = is_state[g->values[v].next] = 1;
	for (int v = 0; v < g->nvalues && rc == 0; v++) {
		const struct hp_value *val = &g->values[v];
		int state = is_state[v];

		if (s->buf[v] || s->last_use[v] < 0 || val->kind == HP_VALUE_INPUT ||
		    (val->kind != HP_VALUE_INITIALIZER && !state))
			continue;
		s->buf[v] = buf_alloc(s, v, value_bytes(val));
		if (!s->buf[v])
			rc = hp_error(-ENOMEM, "out of memory loading initializer '%s' (%zu bytes)", val->name,
				      value_bytes(val));
		else if (val->kind != HP_VALUE_INITIALIZER)
			continue; /* computed each run */
		else if (val->data)
			memcpy(s->buf[v], val->data, value_bytes(val)); /* copied: training updates it */
		else if (val->src.kind == HP_BLOB_NONE)
			memset(s->buf[v], 0, value_bytes(val)); /* fresh optimizer state */
		else
			rc = hp_graph_read_init(g, v, s->buf[v]);
	}
	free(is_state);
	return rc;
}

/* ---- the in-core executor ---- */

static void core_destroy(struct hp_session *ss)
{
	struct hp_core *s = ss->state;

	if (!s)
		return;
	if (s->buf)
		for (int v = 0; v < s->g->nvalues; v++)
			if (s->owned[v])
				free(s->buf[v]);
	free(s->buf);
	free(s->owned);
	free(s->arena);
	free(s->last_use);
	free(s->order);
	free(s->pos);
	free(s->deferred);
	free(s->ticket);
	free(s->cat_skip);
	free(s->cat_dst);
	free(s->ws);
	free(s);
	ss->state = NULL;
}

static int core_create(struct hp_session *ss)
{
	const struct hp_graph *g = ss->g;
	struct hp_core *s = calloc(1, sizeof *s);
	int rc;

	if (!s)
		return hp_error(-ENOMEM, "out of memory");
	ss->state = s;
	s->g = g;
	s->pool = ss->pool;
	s->trace = ss->trace;
	s->prof = ss->prof;
	rc = compute_lifetimes(s);
	if (rc < 0)
		return rc;
	if (s->ws_size && !(s->ws = aligned_alloc(64, (s->ws_size + 63) / 64 * 64)))
		return hp_error(-ENOMEM, "out of memory for %zu bytes of kernel workspace", s->ws_size);
	s->cur_bytes = 0;
	rc = load_weights(s);
	if (rc == 0)
		rc = plan_arena(s);
	if (rc < 0)
		return rc;
	s->weight_bytes = s->cur_bytes;
	for (int i = 0; i < g->ninputs; i++)
		s->weight_bytes += value_bytes(&g->values[g->inputs[i]]);
	s->peak_bytes = s->weight_bytes + s->arena_size;
	return 0;
}

static int core_set_input(struct hp_session *ss, int v, const void *data)
{
	struct hp_core *s = ss->state;
	const struct hp_value *val = &s->g->values[v];

	/* an input bound in place (hp_session_bind_input) gets its own copy again */
	if (!s->owned[v] && !(s->buf[v] = buf_alloc(s, v, value_bytes(val))))
		return hp_error(-ENOMEM, "out of memory for input '%s'", val->name);
	memcpy(s->buf[v], data, value_bytes(val));
	return 0;
}

static const void *value_data(const struct hp_core *s, int v)
{
	return s->buf[v] ? s->buf[v] : s->g->values[v].data;
}

/* Every output the node writes is empty: it has nothing to compute, and
 * its other dims may be anything up to 2^63 beside the 0, which kernels'
 * index arithmetic (rows * cols...) need not survive (fuzz_struct found
 * three that did not). */
static int outputs_empty(const struct hp_tensor *out, int n)
{
	int any = 0;

	for (int o = 0; o < n; o++) {
		if (!out[o].data)
			continue;
		if (hp_shape_numel(&out[o].shape) != 0)
			return 0;
		any = 1;
	}
	return any;
}

static int run_node(struct hp_core *s, int i)
{
	const struct hp_graph *g = s->g;
	const struct hp_node *n = &g->nodes[i];
	struct hp_tensor in[n->ninputs + 1], out[n->noutputs + 1];
	struct hp_kargs a = { .nin = n->ninputs, .in = in, .nout = n->noutputs, .out = out,
			      .ws = s->ws, .ws_size = n->workspace, .pool = s->pool };

	for (int j = 0; j < n->ninputs; j++) {
		int v = n->inputs[j];
		in[j] = (struct hp_tensor){ 0 };
		if (v < 0)
			continue;
		in[j].dtype = g->values[v].dtype;
		in[j].shape = g->values[v].shape;
		in[j].data = (void *)value_data(s, v);
		if (!in[j].data)
			return hp_node_error(g, n, HP_EUSAGE, "input '%s' was not set", g->values[v].name);
	}
	for (int o = 0; o < n->noutputs; o++) {
		int v = n->outputs[o];
		out[o] = (struct hp_tensor){ 0 };
		if (v < 0)
			continue;
		out[o].dtype = g->values[v].dtype;
		out[o].shape = g->values[v].shape;
		out[o].data = s->buf[v];
		if (!out[o].data)
			return hp_node_error(g, n, HP_EINTERNAL, "output '%s' has no buffer", g->values[v].name);
	}
	/* An aliasing op (Reshape, Identity...) placed on its input's bytes has
	 * nothing to do. */
	if ((n->op->flags & HP_OP_ALIAS) && n->ninputs && n->noutputs && in[0].data == out[0].data)
		return 0;
	if (s->cat_skip[i]) /* its inputs were written in place (merge_concat) */
		return 0;
	if (hp_comm_is_allreduce(n))
		return s->overlap ? hp_comm_thread_submit(n, &a, s->trace, &s->ticket[i]) : hp_comm_run_allreduce(n, &a);
	if (outputs_empty(out, n->noutputs))
		return 0;
	return n->op->run(n, &a);
}

/* Before node i: the collectives whose outputs it reads have completed
 * (not for a collective's token: the thread keeps their order). */
static int await_inputs(struct hp_core *s, int i)
{
	const struct hp_node *n = &s->g->nodes[i];
	uint64_t need = 0;

	for (int j = hp_comm_is_allreduce(n) ? 1 : 0; j < n->ninputs; j++) {
		int v = n->inputs[j], p = v >= 0 ? s->g->values[v].producer : -1;
		if (p >= 0 && s->ticket[p] > need)
			need = s->ticket[p];
	}
	if (need <= s->waited)
		return 0;
	s->waited = need;
	return hp_comm_thread_wait(need);
}

/* The end of a run, failed or not: no collective still uses its buffers. */
static int drain(struct hp_core *s, int rc)
{
	int r2;

	if (!s->overlap)
		return rc;
	r2 = hp_comm_thread_drain();
	memset(s->ticket, 0, (size_t)s->g->nnodes * sizeof *s->ticket);
	s->waited = 0;
	return rc < 0 ? rc : r2;
}

static int core_run(struct hp_session *ss)
{
	struct hp_core *s = ss->state;
	const struct hp_graph *g = s->g;

	for (int k = 0; k < g->nnodes; k++) {
		int i = s->order[k], rc = 0;
		const struct hp_node *n = &g->nodes[i];

		if (n->folded)
			continue;
		if (s->overlap)
			rc = await_inputs(s, i);
		double u0 = hp_trace_now_us(s->trace);
		uint64_t p0 = hp_prof_now_ns(s->prof);
		if (rc == 0)
			rc = run_node(s, i);
		if (rc < 0)
			return drain(s, rc);
		hp_prof_add(s->prof, i, p0);
		if (s->trace && !s->ticket[i]) /* a queued collective's span is the comm thread's */
			hp_trace_span(s->trace, HP_LANE_COMPUTE, n->op_type, n->name, u0, hp_trace_now_us(s->trace));
	}
	int rc = drain(s, 0);
	if (rc < 0)
		return rc;
	/* Carry state to the next run: the updated value's buffer becomes the
	 * state's, and the old one is reused for the next update. */
	for (int v = 0; v < g->nvalues; v++) {
		int nx = g->values[v].next;
		if (nx >= 0) {
			void *t = s->buf[v];
			s->buf[v] = s->buf[nx];
			s->buf[nx] = t;
		}
	}
	return 0;
}

static int core_get_output(struct hp_session *ss, int v, void *dst)
{
	struct hp_core *s = ss->state;
	const void *src = value_data(s, v);

	if (!src)
		return hp_error(HP_EUSAGE, "%s: output '%s' is not computed yet (run first)", s->g->path,
				s->g->values[v].name);
	memcpy(dst, src, value_bytes(&s->g->values[v]));
	return 0;
}

static int core_copy(struct hp_session *ss, int v, uint64_t offset, uint64_t len, void *mem, int write)
{
	struct hp_core *s = ss->state;
	const unsigned char *src;

	if (write) {
		if (!s->buf[v] || !s->owned[v])
			return hp_error(HP_EUSAGE, "%s: value '%s' cannot be written (not owned by the session)",
					s->g->path, s->g->values[v].name);
		memcpy((unsigned char *)s->buf[v] + offset, mem, len);
		return 0;
	}
	src = value_data(s, v);
	if (!src)
		return hp_error(HP_EUSAGE, "%s: value '%s' is not held by the session", s->g->path, s->g->values[v].name);
	memcpy(mem, src + offset, len);
	return 0;
}

static void core_stats(const struct hp_session *ss, struct hp_run_info *info, uint64_t *peak)
{
	const struct hp_core *s = ss->state;

	(void)info; /* kernel time is not measured in core */
	*peak = s->peak_bytes + s->ws_size;
}

const struct hp_executor hp_exec_incore = {
	.name = "in core",
	.create = core_create,
	.set_input = core_set_input,
	.run = core_run,
	.get_output = core_get_output,
	.copy = core_copy,
	.stats = core_stats,
	.destroy = core_destroy,
};

/* A graph output computed each run that no in-place op shares bytes with
 * (its producer's own output, no state): its arena bytes can move. */
static int movable_output(const struct hp_core *s, int v)
{
	const struct hp_value *val = &s->g->values[v];

	if (val->kind != HP_VALUE_ACTIVATION || !val->is_output || val->next >= 0 || val->producer < 0 || val->data ||
	    s->cat_dst[v])
		return 0;
	for (int u = 0; u < s->g->nvalues; u++)
		if (s->g->values[u].next == v)
			return 0;
	return !(s->g->nodes[val->producer].op->flags & (HP_OP_INPLACE | HP_OP_ALIAS));
}

int hp_session_bind_value(struct hp_session *ss, int v, void *data)
{
	struct hp_core *s = ss->state;

	if (ss->ex != &hp_exec_incore)
		return hp_error(HP_EUNSUPPORTED, "%s: only an in-core session reads an input in place", ss->g->path);
	if (v < 0 || v >= s->g->nvalues || (s->g->values[v].kind != HP_VALUE_INPUT && !movable_output(s, v)))
		return hp_error(HP_EUSAGE, "%s: value %d is neither an input nor an output of its own", ss->g->path, v);
	if (s->owned[v]) {
		free(s->buf[v]);
		s->owned[v] = 0;
	}
	s->buf[v] = data;
	return 0;
}

const void *hp_session_value_ptr(const struct hp_session *ss, int v)
{
	const struct hp_core *s = ss->state;

	if (ss->ex != &hp_exec_incore || v < 0 || v >= s->g->nvalues)
		return NULL;
	return value_data(s, v);
}

/* ---- the public calls ---- */

static int session_new(struct hp_graph *g, const struct hp_exec_opts *o, struct hp_trace *shared,
		       struct hp_session **out)
{
	struct hp_exec_opts def;
	struct hp_budget_layout layout;
	struct hp_session *s;
	int rc;

	*out = NULL;
	if (!o) {
		hp_exec_opts_init(&def, sizeof def);
		o = &def;
	}
	if ((rc = hp_compile(g, o, &layout)) < 0)
		return rc;
	/* Building and planning the graph freed more heap than the run keeps;
	 * glibc holds such pages resident until trimmed.  Give them back
	 * before the store's pool is touched, and again once the session is
	 * made, so that they never sit beside the tensors (training an
	 * EfficientNet-B0 at a 64 MiB budget peaked at 72.6 MiB without). */
	malloc_trim(0);
	s = calloc(1, sizeof *s);
	if (!s)
		return hp_error(-ENOMEM, "out of memory");
	s->g = g;
	s->layout = layout;
	memcpy(&s->opts, o, o->size < sizeof s->opts ? o->size : sizeof s->opts);
	s->threads = o->threads > 0 ? o->threads : hp_cpus_online();
	rc = hp_pool_create(s->threads, &s->pool);
	if (rc < 0)
		goto fail;
	hp_blas_threads(s->threads);
	if (shared)
		s->trace = hp_trace_ref(shared);
	else if (o->trace_path && (rc = hp_trace_open(o->trace_path, &s->trace)) < 0)
		goto fail;
	if (s->trace && !shared) {
		hp_trace_lane(s->trace, HP_LANE_RUN, "session runs");
		hp_trace_lane(s->trace, HP_LANE_DATA, "training data"); /* a trainer's batches, between the runs */
	}
	if (o->size >= offsetof(struct hp_exec_opts, profile) + sizeof o->profile && o->profile) {
		s->prof = calloc(1, sizeof *s->prof);
		if (!s->prof || !(s->prof->ns = calloc((size_t)g->nnodes + 1, sizeof *s->prof->ns)) ||
		    !(s->prof->calls = calloc((size_t)g->nnodes + 1, sizeof *s->prof->calls))) {
			rc = hp_error(-ENOMEM, "out of memory");
			goto fail;
		}
	}
	/* out of core: the store holds every tensor under the budget */
	s->ex = o->budget ? &hp_exec_ooc : &hp_exec_incore;
	rc = s->ex->create(s);
	if (rc < 0)
		goto fail;
	for (int i = 0; i < g->nnodes; i++)
		if (!g->nodes[i].folded && g->nodes[i].op->flops)
			s->flops += g->nodes[i].op->flops(g, &g->nodes[i]);
	malloc_trim(0);
	*out = s;
	return 0;
fail:
	hp_session_destroy(s);
	return rc;
}

int hp_session_create(struct hp_graph *g, const struct hp_exec_opts *o, struct hp_session **out)
{
	return session_new(g, o, NULL, out);
}

int hp_session_create_traced(struct hp_graph *g, const struct hp_exec_opts *o, struct hp_trace *trace,
			     struct hp_session **out)
{
	return session_new(g, o, trace, out);
}

void hp_session_destroy(struct hp_session *s)
{
	if (!s)
		return;
	if (s->ex)
		s->ex->destroy(s);
	hp_pool_destroy(s->pool);
	hp_trace_close(s->trace);
	if (s->prof) {
		free(s->prof->ns);
		free(s->prof->calls);
		free(s->prof);
	}
	free(s);
}

int hp_session_profile(const struct hp_session *s, struct hp_node_profile *out, int cap)
{
	const struct hp_graph *g = s->g;
	int n = 0;

	if (!s->prof)
		return hp_error(HP_EUSAGE, "the session was created without profiling (hp_exec_opts.profile)");
	for (int i = 0; i < g->nnodes; i++) {
		uint64_t calls = __atomic_load_n(&s->prof->calls[i], __ATOMIC_RELAXED);
		if (!calls)
			continue;
		if (n < cap) {
			const struct hp_node *nd = &g->nodes[i];
			out[n] = (struct hp_node_profile){ .node = i, .calls = calls,
							   .total_ms = (double)__atomic_load_n(&s->prof->ns[i], __ATOMIC_RELAXED) / 1e6,
							   .flops = nd->op->flops ? nd->op->flops(g, nd) : 0 };
		}
		n++;
	}
	return n;
}

int hp_session_set_input(struct hp_session *s, const char *name, const struct hp_tensor *t)
{
	const struct hp_graph *g = s->g;
	int v = hp_graph_find_value(g, name);
	const struct hp_value *val;
	char want[128], got[128];

	if (v < 0 || g->values[v].kind != HP_VALUE_INPUT)
		return hp_error(HP_EUSAGE, "%s: the model has no input named '%s'", g->path, name);
	val = &g->values[v];
	if (!val->nconsumers && !val->is_output)
		return 0; /* no node reads it: nothing to copy */
	/* .npy has no bfloat16: uint16 arrays carry its bits */
	int bits = val->dtype == HP_BF16 && t->dtype == HP_U16;
	if ((t->dtype != val->dtype && !bits) || !hp_shape_equal(&t->shape, &val->shape))
		return hp_error(HP_ESHAPE, "%s: input '%s' must be %s %s, got %s %s", g->path, name,
				hp_dtype_name(val->dtype), hp_shape_str(&val->shape, want, sizeof want),
				hp_dtype_name(t->dtype), hp_shape_str(&t->shape, got, sizeof got));
	return s->ex->set_input(s, v, t->data);
}

int hp_session_run(struct hp_session *s)
{
	double t0 = now_ms(), u0 = s->trace ? hp_trace_now_us(s->trace) : 0;
	int rc = s->ex->run(s);

	s->last_ms = now_ms() - t0;
	/* out of core a training step also waits outside its runs (the next
	 * batch read from a paged data set): the runs' spans show the gaps */
	if (s->trace)
		hp_trace_span(s->trace, HP_LANE_RUN, "run", s->g->path ? s->g->path : "run", u0, hp_trace_now_us(s->trace));
	return rc;
}

int hp_session_get_output(struct hp_session *s, const char *name, struct hp_tensor *out)
{
	const struct hp_graph *g = s->g;
	int v = hp_graph_find_value(g, name);
	int rc;

	memset(out, 0, sizeof *out);
	if (v < 0 || !g->values[v].is_output)
		return hp_error(HP_EUSAGE, "%s: the model has no output named '%s'", g->path, name);
	rc = hp_tensor_alloc(out, g->values[v].dtype, &g->values[v].shape);
	if (rc == 0 && (rc = s->ex->get_output(s, v, out->data)) < 0)
		hp_tensor_free(out);
	return rc;
}

void hp_session_stats(const struct hp_session *s, struct hp_run_stats *st)
{
	uint64_t peak;

	s->ex->stats(s, NULL, &peak);
	st->ms = s->last_ms;
	st->flops = s->flops;
	st->peak_bytes = peak;
}

int hp_session_run_info(const struct hp_session *s, struct hp_run_info *info)
{
	struct hp_run_info r = { .size = sizeof r, .ms = s->last_ms, .workers = 1 };
	size_t n = info->size < sizeof r ? info->size : sizeof r;
	uint64_t peak;

	if (info->size < offsetof(struct hp_run_info, transitions) + sizeof(int))
		return hp_error(HP_EUSAGE, "hp_session_run_info: set info->size");
	s->ex->stats(s, &r, &peak);
	memcpy(info, &r, n);
	info->size = n;
	return 0;
}

static int value_range(const struct hp_session *s, int v, uint64_t offset, uint64_t len)
{
	const struct hp_graph *g = s->g;

	if (v < 0 || v >= g->nvalues)
		return hp_error(HP_EUSAGE, "%s: no value %d", g->path, v);
	if (offset > value_bytes(&g->values[v]) || len > value_bytes(&g->values[v]) - offset)
		return hp_error(HP_EUSAGE, "%s: value '%s': bytes [%llu, +%llu) outside its %zu bytes", g->path,
				g->values[v].name, (unsigned long long)offset, (unsigned long long)len,
				value_bytes(&g->values[v]));
	return 0;
}

int hp_session_read_value(struct hp_session *s, int v, uint64_t offset, uint64_t len, void *dst)
{
	int rc = value_range(s, v, offset, len);

	return rc < 0 ? rc : s->ex->copy(s, v, offset, len, dst, 0);
}

int hp_session_write_value(struct hp_session *s, int v, uint64_t offset, uint64_t len, const void *src)
{
	int rc = value_range(s, v, offset, len);

	return rc < 0 ? rc : s->ex->copy(s, v, offset, len, (void *)src, 1);
}
