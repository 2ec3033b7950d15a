/* Out-of-core runtime: every managed value is a store tensor; the plan's
 * loads are issued as asynchronous prefetches ahead of the kernels that need
 * them, its evictions write back live dirty values, next-use hints steer the
 * store's own eviction, and values are dropped at their last use.  The store
 * enforces the budget; the plan only decides when I/O happens. */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "hpdlf/error.h"
#include "hpdlf/store.h"
#include "exec/exec_internal.h"
#include "exec/plan.h"
#include "exec/trace.h"

static double now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static uint64_t vbytes(const struct hp_graph *g, int v)
{
	struct hp_tensor t = { .dtype = g->values[v].dtype, .shape = g->values[v].shape };

	return hp_tensor_bytes(&t);
}

static int managed(const struct hp_graph *g, int v)
{
	return v >= 0 && g->values[v].kind != HP_VALUE_CONSTANT;
}

static int new_tensor(struct hp_session *s, int v)
{
	const struct hp_value *val = &s->g->values[v];
	struct hs_tensor_info ti = { .bytes = vbytes(s->g, v), .dtype = val->dtype, .shape = val->shape };

	if (!ti.bytes)
		ti.bytes = 1; /* empty tensors still get an identity */
	return hs_tensor_create(s->store, &ti, &s->ten[v]);
}

/* Write `src` (or zeros) into a fresh tensor for value v. */
static int fill_tensor(struct hp_session *s, int v, const void *src)
{
	void *p;
	int rc = s->ten[v] ? 0 : new_tensor(s, v);

	if (rc == 0)
		rc = hs_pin(s->ten[v], 0, HS_ALL, HS_PIN_OVERWRITE, &p);
	if (rc < 0)
		return hp_error_prefix(rc, "value '%s'", s->g->values[v].name);
	if (src)
		memcpy(p, src, vbytes(s->g, v));
	else
		memset(p, 0, vbytes(s->g, v));
	return hs_unpin(s->ten[v], 0, HS_ALL);
}

/* Weights are paged from the model's own files when they lie there;
 * otherwise copied into the store once. */
static int place_initializer(struct hp_session *s, int v)
{
	const struct hp_graph *g = s->g;
	const struct hp_value *val = &g->values[v];
	struct hs_tensor_info ti = { .bytes = vbytes(g, v), .dtype = val->dtype, .shape = val->shape };
	void *tmp;
	int rc;

	if (val->data)
		return fill_tensor(s, v, val->data);
	if (val->src.kind == HP_BLOB_NONE)
		return fill_tensor(s, v, NULL);
	if (val->src.kind == HP_BLOB_FILE && val->next < 0) {
		rc = hs_tensor_create_backed(s->store, &ti, g->files[val->src.file], val->src.offset, &s->ten[v]);
		return rc < 0 ? hp_error_prefix(rc, "initializer '%s'", val->name) : 0;
	}
	/* Trainable weights get a writable copy, streamed in one pin. */
	rc = new_tensor(s, v);
	if (rc == 0)
		rc = hs_pin(s->ten[v], 0, HS_ALL, HS_PIN_OVERWRITE, &tmp);
	if (rc < 0)
		return hp_error_prefix(rc, "initializer '%s'", val->name);
	rc = hp_graph_read_init(g, v, tmp);
	hs_unpin(s->ten[v], 0, HS_ALL);
	if (rc == 0)
		rc = hs_evict(s->ten[v], 0, HS_ALL, HS_TIER_ANY) < 0 ? -EIO : 0;
	return rc;
}

static void *io_thread(void *arg);

int hp_rt_create(struct hp_session *s)
{
	const struct hp_graph *g = s->g;
	struct hs_store_opts so;
	struct hp_plan_opts po = { 0 };
	int rc;

	hs_store_opts_init(&so, sizeof so);
	so.budget = s->opts.budget;
	/* small budgets get small chunks so paging stays fine-grained */
	while (so.chunk_size > 65536 && so.chunk_size * 16 > so.budget)
		so.chunk_size /= 2;
	so.stats_page = 1;
	rc = hs_store_open(&so, &s->store);
	if (rc < 0)
		return hp_error_prefix(rc, "opening the tensor store");
	po.budget = s->opts.budget;
	po.align = 4096;
	po.workspace = 0;
	po.gflops = hp_exec_measure_gflops(s->threads);
	po.read_MBps = 2200;
	po.write_MBps = 1500;
	rc = hp_plan_build(g, &po, &s->plan);
	if (rc < 0)
		return rc;
	s->ten = calloc((size_t)g->nvalues + 1, sizeof *s->ten);
	if (!s->ten)
		return hp_error(-ENOMEM, "out of memory");
	pthread_mutex_init(&s->io_mu, NULL);
	pthread_cond_init(&s->io_cv, NULL);
	s->io_posted = s->io_done = -1;
	rc = pthread_create(&s->io_tid, NULL, io_thread, s);
	if (rc)
		return hp_error(-rc, "cannot start the I/O engine thread");
	s->io_started = 1;
	if (s->ws_size) {
		struct hs_tensor_info ti = { .bytes = s->ws_size, .dtype = HP_U8, .shape = { 1, { (int64_t)s->ws_size } } };
		rc = hs_tensor_create(s->store, &ti, &s->ws_tensor);
		if (rc < 0)
			return rc;
	}
	for (int v = 0; v < g->nvalues; v++)
		if (g->values[v].kind == HP_VALUE_INITIALIZER && s->plan->last_use[v] >= 0 &&
		    (rc = place_initializer(s, v)) < 0)
			return rc;
	return 0;
}

/* ---- the I/O engine ---------------------------------------------------
 * One thread executes the plan's acts of step s once the compute thread has
 * posted s (the plan placed them against the memory state after step s-1's
 * releases).  Loads are asynchronous prefetches; the thread waits for them
 * in order, which keeps them a serial queue as the plan's time model
 * assumes, while the compute thread runs the kernels.  Pins never depend
 * on the engine: the store reads whatever is not resident yet. */

struct io_load {
	int value;
	struct hs_prefetch *h;
	double t0;
};

static void io_step(struct hp_session *s, int step, struct io_load *loads)
{
	const struct hp_plan *p = s->plan;
	int nl = 0;

	for (int a = p->act_begin[step]; a < p->act_begin[step + 1]; a++) {
		const struct hp_plan_act_rec *x = &p->acts[a];
		struct hs_tensor *t;
		double t0 = hp_trace_now_us(s->trace);

		pthread_mutex_lock(&s->io_mu);
		t = s->ten[x->value];
		pthread_mutex_unlock(&s->io_mu);
		if (!t)
			continue;
		if (x->act == HP_ACT_LOAD) {
			struct hs_prefetch *h;
			if (hs_prefetch(t, 0, HS_ALL, &h) == 0)
				loads[nl++] = (struct io_load){ x->value, h, t0 };
			continue;
		}
		/* best effort: a failed eviction leaves the choice to the store */
		hs_evict(t, 0, HS_ALL, x->act == HP_ACT_WRITEBACK ? HS_TIER_ANY : HS_TIER_NONE);
		if (s->trace && x->act == HP_ACT_WRITEBACK)
			hp_trace_span(s->trace, HP_LANE_IO, "write-back", s->g->values[x->value].name, t0,
				      hp_trace_now_us(s->trace));
	}
	for (int i = 0; i < nl; i++) {
		hs_prefetch_wait(loads[i].h); /* a failed prefetch is retried by the pin */
		if (s->trace)
			hp_trace_span(s->trace, HP_LANE_IO, "load", s->g->values[loads[i].value].name, loads[i].t0,
				      hp_trace_now_us(s->trace));
	}
}

static void *io_thread(void *arg)
{
	struct hp_session *s = arg;
	struct io_load *loads = calloc((size_t)s->plan->nacts + 1, sizeof *loads);

	pthread_mutex_lock(&s->io_mu);
	for (;;) {
		while (s->io_posted == s->io_done && !s->io_quit)
			pthread_cond_wait(&s->io_cv, &s->io_mu);
		if (s->io_posted == s->io_done)
			break; /* quit with nothing pending */
		int step = s->io_done + 1;
		pthread_mutex_unlock(&s->io_mu);
		if (loads && step >= 0 && step < s->plan->nsteps)
			io_step(s, step, loads);
		pthread_mutex_lock(&s->io_mu);
		s->io_done = step;
		pthread_cond_broadcast(&s->io_cv);
	}
	pthread_mutex_unlock(&s->io_mu);
	free(loads);
	return NULL;
}

static void io_post(struct hp_session *s, int step)
{
	pthread_mutex_lock(&s->io_mu);
	s->io_posted = step;
	pthread_cond_broadcast(&s->io_cv);
	pthread_mutex_unlock(&s->io_mu);
}

/* Wait until the engine has finished every posted step (end of a run). */
static void io_drain(struct hp_session *s)
{
	pthread_mutex_lock(&s->io_mu);
	while (s->io_done != s->io_posted)
		pthread_cond_wait(&s->io_cv, &s->io_mu);
	pthread_mutex_unlock(&s->io_mu);
}

/* Next use of v after `step` in schedule time, for the store's policy;
 * values kept for the next run count as used after this run's last step. */
static void hint_next(struct hp_session *s, int v, int step)
{
	int nu = hp_plan_next_use(s->plan, v, step);

	if (nu < HP_PLAN_NEVER)
		hs_hint(s->ten[v], nu);
	else
		hs_hint(s->ten[v], s->plan->last_use[v] >= s->plan->nsteps ? (int64_t)s->plan->nsteps + 1 : HS_NO_HINT);
}

static int pin_io(struct hp_session *s, const struct hp_node *n, struct hp_tensor *in, struct hp_tensor *out)
{
	const struct hp_graph *g = s->g;
	int rc;

	for (int j = 0; j < n->ninputs; j++) {
		int v = n->inputs[j];
		in[j] = (struct hp_tensor){ 0 };
		if (v < 0)
			continue;
		in[j].dtype = g->values[v].dtype;
		in[j].shape = g->values[v].shape;
		if (!managed(g, v)) {
			in[j].data = g->values[v].data;
			continue;
		}
		if (!s->ten[v])
			return hp_node_error(g, n, HP_EUSAGE, "input '%s' was not set", g->values[v].name);
		rc = hs_pin(s->ten[v], 0, HS_ALL, HS_PIN_READ, &in[j].data);
		if (rc < 0)
			return hp_error_prefix(rc, "%s: node '%s' (%s): input '%s'", g->path, n->name, n->op_type,
					       g->values[v].name);
	}
	for (int o = 0; o < n->noutputs; o++) {
		int v = n->outputs[o];
		out[o] = (struct hp_tensor){ 0 };
		if (v < 0)
			continue;
		out[o].dtype = g->values[v].dtype;
		out[o].shape = g->values[v].shape;
		if (!s->ten[v] && (rc = new_tensor(s, v)) < 0)
			return rc;
		rc = hs_pin(s->ten[v], 0, HS_ALL, HS_PIN_OVERWRITE, &out[o].data);
		if (rc < 0)
			return hp_error_prefix(rc, "%s: node '%s' (%s): output '%s'", g->path, n->name, n->op_type,
					       g->values[v].name);
	}
	return 0;
}

static void unpin_io(struct hp_session *s, const struct hp_node *n, const struct hp_tensor *in,
		     const struct hp_tensor *out)
{
	for (int j = 0; j < n->ninputs; j++)
		if (managed(s->g, n->inputs[j]) && in[j].data)
			hs_unpin(s->ten[n->inputs[j]], 0, HS_ALL);
	for (int o = 0; o < n->noutputs; o++)
		if (n->outputs[o] >= 0 && out[o].data)
			hs_unpin(s->ten[n->outputs[o]], 0, HS_ALL);
}

/* The engine may be reading the tensor: it is unlinked under the engine's
 * lock and dropped when no prefetch holds it (-EBUSY while pinned by one). */
static void drop_value(struct hp_session *s, int v)
{
	struct hs_tensor *t;

	pthread_mutex_lock(&s->io_mu);
	t = s->ten[v];
	s->ten[v] = NULL;
	pthread_mutex_unlock(&s->io_mu);
	if (t)
		hs_tensor_drop(t);
}

static int run_step(struct hp_session *s, int step)
{
	const struct hp_graph *g = s->g;
	const struct hp_node *n = &g->nodes[s->plan->node[step]];
	struct hp_tensor in[n->ninputs + 1], out[n->noutputs + 1];
	struct hp_kargs a = { .nin = n->ninputs, .in = in, .nout = n->noutputs, .out = out,
			      .ws_size = n->workspace, .pool = s->pool };
	int rc;

	io_post(s, step);
	rc = pin_io(s, n, in, out);
	if (rc == 0 && n->workspace)
		rc = hs_pin(s->ws_tensor, 0, HS_ALL, HS_PIN_OVERWRITE, &a.ws);
	if (rc == 0) {
		double t0 = now_ms(), u0 = hp_trace_now_us(s->trace);
		rc = n->op->run(n, &a);
		s->kernel_ms += now_ms() - t0;
		if (s->trace)
			hp_trace_span(s->trace, HP_LANE_COMPUTE, n->op_type, n->name, u0, hp_trace_now_us(s->trace));
	}
	if (a.ws)
		hs_unpin(s->ws_tensor, 0, HS_ALL);
	unpin_io(s, n, in, out);
	if (rc < 0)
		return rc;
	for (int j = 0; j < n->ninputs; j++) {
		int v = n->inputs[j];
		if (managed(g, v) && s->ten[v]) {
			if (s->plan->last_use[v] == step)
				drop_value(s, v);
			else
				hint_next(s, v, step);
		}
	}
	for (int o = 0; o < n->noutputs; o++) {
		int v = n->outputs[o];
		if (v >= 0 && s->ten[v]) {
			if (s->plan->last_use[v] < 0)
				drop_value(s, v);
			else
				hint_next(s, v, step);
		}
	}
	return 0;
}

int hp_rt_run(struct hp_session *s)
{
	const struct hp_graph *g = s->g;
	int rc = 0;

	pthread_mutex_lock(&s->io_mu);
	s->io_posted = s->io_done = -1;
	pthread_mutex_unlock(&s->io_mu);
	for (int step = 0; step < s->plan->nsteps && rc == 0; step++)
		rc = run_step(s, step);
	io_drain(s);
	if (rc < 0)
		return rc;
	for (int v = 0; v < g->nvalues; v++) {
		int nx = g->values[v].next;
		if (nx >= 0) {
			struct hs_tensor *t = s->ten[v];
			s->ten[v] = s->ten[nx];
			s->ten[nx] = t;
		}
	}
	return 0;
}

int hp_rt_set_input(struct hp_session *s, int v, const void *data)
{
	return fill_tensor(s, v, data);
}

int hp_rt_get_output(struct hp_session *s, int v, void *dst)
{
	void *p;
	int rc;

	if (!s->ten[v])
		return hp_error(HP_EUSAGE, "%s: output '%s' is not computed yet (run first)", s->g->path,
				s->g->values[v].name);
	rc = hs_pin(s->ten[v], 0, HS_ALL, HS_PIN_READ, &p);
	if (rc < 0)
		return rc;
	memcpy(dst, p, vbytes(s->g, v));
	return hs_unpin(s->ten[v], 0, HS_ALL);
}

void hp_rt_destroy(struct hp_session *s)
{
	if (s->io_started) {
		pthread_mutex_lock(&s->io_mu);
		s->io_quit = 1;
		pthread_cond_broadcast(&s->io_cv);
		pthread_mutex_unlock(&s->io_mu);
		pthread_join(s->io_tid, NULL);
		pthread_mutex_destroy(&s->io_mu);
		pthread_cond_destroy(&s->io_cv);
	}
	if (s->ten)
		for (int v = 0; v < s->g->nvalues; v++)
			if (s->ten[v])
				drop_value(s, v);
	if (s->ws_tensor)
		hs_tensor_drop(s->ws_tensor);
	free(s->ten);
	hp_plan_free(s->plan);
	hs_store_close(s->store);
}

uint64_t hp_rt_peak(const struct hp_session *s)
{
	return s->plan->peak_bytes;
}

int hp_session_store_stats(const struct hp_session *s, struct hs_store_stats *out)
{
	if (!s->store)
		return -ENOENT;
	return hs_store_stats(s->store, out);
}
