/* In-core session: runs the inferred graph node by node with liveness-based
 * buffer lifetimes.  The out-of-core runtime (task net + store) replaces the
 * memory management here; kernels and the API stay the same. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "hpdlf/error.h"
#include "hpdlf/exec.h"
#include "hpdlf/kernels.h"
#include "exec/exec_internal.h"
#include "exec/plan.h"
#include "exec/trace.h"

void hp_exec_opts_init(struct hp_exec_opts *o, size_t size)
{
	memset(o, 0, size);
	o->size = size;
	o->seed = 1;
}

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

static void *buf_alloc(struct hp_session *s, size_t bytes)
{
	void *p = aligned_alloc(64, (bytes + 63) / 64 * 64 + 64);

	if (p) {
		s->cur_bytes += bytes;
		if (s->cur_bytes > s->peak_bytes)
			s->peak_bytes = s->cur_bytes;
	}
	return p;
}

static void buf_release(struct hp_session *s, int v)
{
	if (!s->buf[v])
		return;
	free(s->buf[v]);
	s->buf[v] = NULL;
	s->cur_bytes -= value_bytes(&s->g->values[v]);
}

/* Last schedule position using each value; graph outputs live to the end. */
static int compute_lifetimes(struct hp_session *s)
{
	const struct hp_graph *g = s->g;

	s->last_use = malloc((size_t)g->nvalues * sizeof *s->last_use);
	s->buf = calloc((size_t)g->nvalues, sizeof *s->buf);
	if (!s->last_use || !s->buf)
		return hp_error(-ENOMEM, "out of memory");
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
			if (n->inputs[j] >= 0 && s->last_use[n->inputs[j]] < i)
				s->last_use[n->inputs[j]] = i;
		if (n->workspace > s->ws_size)
			s->ws_size = n->workspace;
	}
	return 0;
}

/* Weights stay resident across runs in core: load each one used. */
static int load_weights(struct hp_session *s)
{
	const struct hp_graph *g = s->g;

	for (int v = 0; v < g->nvalues; v++) {
		const struct hp_value *val = &g->values[v];
		int rc;

		if (val->kind != HP_VALUE_INITIALIZER || s->last_use[v] < 0)
			continue;
		s->buf[v] = buf_alloc(s, value_bytes(val));
		if (!s->buf[v])
			return hp_error(-ENOMEM, "out of memory loading initializer '%s' (%zu bytes)", val->name,
					value_bytes(val));
		if (val->data) {
			/* materialized at import; copied so training can update it */
			memcpy(s->buf[v], val->data, value_bytes(val));
			continue;
		}
		if (val->src.kind == HP_BLOB_NONE) {
			memset(s->buf[v], 0, value_bytes(val)); /* fresh optimizer state */
			continue;
		}
		rc = hp_graph_read_init(g, v, s->buf[v]);
		if (rc < 0)
			return rc;
	}
	return 0;
}

/* Tensor bytes the in-core schedule holds at its high-water mark. */
static size_t simulate_peak(const struct hp_session *s)
{
	const struct hp_graph *g = s->g;
	size_t cur = 0, peak;

	for (int v = 0; v < g->nvalues; v++) {
		const struct hp_value *val = &g->values[v];
		if ((val->kind == HP_VALUE_INITIALIZER && s->last_use[v] >= 0) ||
		    val->kind == HP_VALUE_INPUT)
			cur += value_bytes(val);
	}
	peak = cur;
	for (int i = 0; i < g->nnodes; i++) {
		const struct hp_node *n = &g->nodes[i];
		if (n->folded)
			continue;
		for (int o = 0; o < n->noutputs; o++)
			if (n->outputs[o] >= 0)
				cur += value_bytes(&g->values[n->outputs[o]]);
		if (cur + s->ws_size > peak)
			peak = cur + s->ws_size;
		for (int j = 0; j < n->ninputs; j++) {
			int v = n->inputs[j];
			if (v >= 0 && s->last_use[v] == i && g->values[v].kind == HP_VALUE_ACTIVATION)
				cur -= value_bytes(&g->values[v]);
		}
		for (int o = 0; o < n->noutputs; o++)
			if (n->outputs[o] >= 0 && s->last_use[n->outputs[o]] < 0)
				cur -= value_bytes(&g->values[n->outputs[o]]);
	}
	return peak;
}

int hp_session_create(struct hp_graph *g, const struct hp_exec_opts *o, struct hp_session **out)
{
	struct hp_exec_opts def;
	struct hp_session *s;
	int rc;

	*out = NULL;
	if (!o) {
		hp_exec_opts_init(&def, sizeof def);
		o = &def;
	}
	s = calloc(1, sizeof *s);
	if (!s)
		return hp_error(-ENOMEM, "out of memory");
	s->g = g;
	memcpy(&s->opts, o, o->size < sizeof s->opts ? o->size : sizeof s->opts);
	s->threads = o->threads > 0 ? o->threads : hp_exec_online_cpus();
	rc = hp_pool_create(s->threads, &s->pool);
	if (rc < 0)
		goto fail;
	hp_blas_set_threads(s->threads);
	rc = compute_lifetimes(s);
	if (rc < 0)
		goto fail;
	if (o->trace_path && (rc = hp_trace_open(o->trace_path, &s->trace)) < 0)
		goto fail;
	if (s->ws_size && !(s->ws = aligned_alloc(64, (s->ws_size + 63) / 64 * 64))) {
		rc = hp_error(-ENOMEM, "out of memory for %zu bytes of kernel workspace", s->ws_size);
		goto fail;
	}
	if (o->budget) {
		/* out of core: the store holds every tensor under the budget */
		rc = hp_rt_create(s);
		if (rc < 0)
			goto fail;
		goto done;
	}
	s->peak_bytes = simulate_peak(s);
	s->cur_bytes = 0;
	rc = load_weights(s);
	if (rc < 0)
		goto fail;
	s->weight_bytes = s->cur_bytes;
done:
	for (int i = 0; i < g->nnodes; i++)
		if (!g->nodes[i].folded && g->nodes[i].op->flops)
			s->flops += g->nodes[i].op->flops(g, &g->nodes[i]);
	*out = s;
	return 0;
fail:
	hp_session_destroy(s);
	return rc;
}

void hp_session_destroy(struct hp_session *s)
{
	if (!s)
		return;
	if (s->store)
		hp_rt_destroy(s);
	if (s->buf)
		for (int v = 0; v < s->g->nvalues; v++)
			free(s->buf[v]);
	free(s->buf);
	free(s->last_use);
	free(s->ws);
	hp_pool_destroy(s->pool);
	hp_trace_close(s->trace);
	free(s);
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
	if (t->dtype != val->dtype || !hp_shape_equal(&t->shape, &val->shape))
		return hp_error(HP_ESHAPE, "%s: input '%s' must be %s %s, got %s %s", g->path, name,
				hp_dtype_name(val->dtype), hp_shape_str(&val->shape, want, sizeof want),
				hp_dtype_name(t->dtype), hp_shape_str(&t->shape, got, sizeof got));
	if (s->store)
		return hp_rt_set_input(s, v, t->data);
	if (!s->buf[v] && !(s->buf[v] = buf_alloc(s, value_bytes(val))))
		return hp_error(-ENOMEM, "out of memory for input '%s'", name);
	memcpy(s->buf[v], t->data, value_bytes(val));
	return 0;
}

static const void *value_data(const struct hp_session *s, int v)
{
	return s->buf[v] ? s->buf[v] : s->g->values[v].data;
}

static int run_node(struct hp_session *s, int i)
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
		if (!s->buf[v] && !(s->buf[v] = buf_alloc(s, value_bytes(&g->values[v]))))
			return hp_node_error(g, n, -ENOMEM, "out of memory for output '%s'", g->values[v].name);
		out[o].data = s->buf[v];
	}
	return n->op->run(n, &a);
}

int hp_session_run(struct hp_session *s)
{
	const struct hp_graph *g = s->g;
	double t0 = now_ms();

	if (s->store) {
		int rc = hp_rt_run(s);
		s->last_ms = now_ms() - t0;
		return rc;
	}
	for (int i = 0; i < g->nnodes; i++) {
		const struct hp_node *n = &g->nodes[i];
		int rc;

		if (n->folded)
			continue;
		double u0 = hp_trace_now_us(s->trace);
		rc = run_node(s, i);
		if (rc < 0)
			return rc;
		if (s->trace)
			hp_trace_span(s->trace, HP_LANE_COMPUTE, n->op_type, n->name, u0, hp_trace_now_us(s->trace));
		/* Free what this node was the last user of (never inputs or weights:
		 * they are needed by the next run). */
		for (int j = 0; j < n->ninputs; j++) {
			int v = n->inputs[j];
			if (v >= 0 && s->last_use[v] == i && g->values[v].kind == HP_VALUE_ACTIVATION)
				buf_release(s, v);
		}
		for (int o = 0; o < n->noutputs; o++) {
			int v = n->outputs[o];
			if (v >= 0 && s->last_use[v] < 0)
				buf_release(s, v); /* unused optional output */
		}
	}
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
	s->last_ms = now_ms() - t0;
	return 0;
}

int hp_session_get_output(struct hp_session *s, const char *name, struct hp_tensor *out)
{
	const struct hp_graph *g = s->g;
	int v = hp_graph_find_value(g, name);
	const void *src;
	int rc;

	memset(out, 0, sizeof *out);
	if (v < 0 || !g->values[v].is_output)
		return hp_error(HP_EUSAGE, "%s: the model has no output named '%s'", g->path, name);
	if (s->store) {
		rc = hp_tensor_alloc(out, g->values[v].dtype, &g->values[v].shape);
		if (rc == 0 && (rc = hp_rt_get_output(s, v, out->data)) < 0)
			hp_tensor_free(out);
		return rc;
	}
	src = value_data(s, v);
	if (!src)
		return hp_error(HP_EUSAGE, "%s: output '%s' is not computed yet (run first)", g->path, name);
	rc = hp_tensor_alloc(out, g->values[v].dtype, &g->values[v].shape);
	if (rc < 0)
		return rc;
	memcpy(out->data, src, hp_tensor_bytes(out));
	return 0;
}

void hp_session_stats(const struct hp_session *s, struct hp_run_stats *st)
{
	st->ms = s->last_ms;
	st->flops = s->flops;
	st->peak_bytes = s->store ? hp_rt_peak(s) : s->peak_bytes + s->ws_size;
}
