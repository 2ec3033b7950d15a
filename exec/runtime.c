/* Out-of-core runtime: every managed value is a store tensor.  The plan is
 * compiled into a task net (net.c) whose transitions call back here: a
 * kernel pins its inputs and outputs (already resident: the net loaded
 * them), a load prefetches, a write-back or eviction hs_evict()s, a drop
 * frees the tensor.  The net hands out the budget so that the store never
 * has to evict on its own; the store stays the authority on residency, so a
 * mistaken plan only costs time, never data. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "hpdlf/error.h"
#include "hpdlf/store.h"
#include "exec/exec_internal.h"
#include "exec/net.h"
#include "exec/plan.h"
#include "exec/trace.h"

static uint64_t vbytes(const struct hp_graph *g, int v)
{
	struct hp_tensor t = { .dtype = g->values[v].dtype, .shape = g->values[v].shape };

	return hp_tensor_bytes(&t);
}

static int managed(const struct hp_graph *g, int v)
{
	return v >= 0 && g->values[v].kind != HP_VALUE_CONSTANT;
}

/* A tensor of `bytes`: the last one dropped of that size when there is one
 * (discarded, its DRAM frames most likely still mapped in it: no remapping),
 * else a new one.  Sizes repeat (activations, their gradients), so in
 * steady state every run reuses the tensors of the one before. */
static int take_tensor(struct hp_session *s, const struct hs_tensor_info *ti, struct hs_tensor **out)
{
	struct hs_tensor_info had;

	*out = NULL;
	pthread_mutex_lock(&s->spare_mu);
	for (int k = s->nspare - 1; k >= 0; k--) {
		hs_tensor_get_info(s->spare[k], &had);
		if (had.bytes == ti->bytes) {
			*out = s->spare[k];
			memmove(&s->spare[k], &s->spare[k + 1], (size_t)(s->nspare - k - 1) * sizeof *s->spare);
			s->nspare--;
			break;
		}
	}
	pthread_mutex_unlock(&s->spare_mu);
	return *out ? 0 : hs_tensor_create(s->store, ti, out);
}

/* The contents of t are dead: discard them (never written back) and keep
 * the tensor for the next value of its size. */
static int give_back(struct hp_session *s, struct hs_tensor *t)
{
	int rc = hs_tensor_discard(t, 0, HS_ALL);

	pthread_mutex_lock(&s->spare_mu);
	if (rc == 0 && s->nspare == s->capspare) {
		int cap = s->capspare ? 2 * s->capspare : 64;
		struct hs_tensor **a = realloc(s->spare, (size_t)cap * sizeof *a);
		if (a) {
			s->spare = a;
			s->capspare = cap;
		}
	}
	if (rc == 0 && s->nspare < s->capspare) {
		s->spare[s->nspare++] = t;
		t = NULL;
	}
	pthread_mutex_unlock(&s->spare_mu);
	if (t)
		hs_tensor_drop(t);
	return rc;
}

static int new_tensor(struct hp_session *s, int v)
{
	const struct hp_value *val = &s->g->values[v];
	struct hs_tensor_info ti = { .bytes = vbytes(s->g, v), .dtype = val->dtype, .shape = val->shape };

	if (!ti.bytes)
		ti.bytes = 1; /* empty tensors still get an identity */
	return take_tensor(s, &ti, &s->ten[v]);
}

/* Write `src` (or zeros) into value v's tensor, creating it. */
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

/* Copy raw bytes from a file into the store one chunk at a time, writing
 * each below DRAM at once: weights that are not 4 KiB aligned in their
 * file (embedded raw_data) never sit in DRAM whole, nor in the page cache. */
static int stream_initializer(struct hp_session *s, int v, const char *path, uint64_t off)
{
	uint64_t bytes = vbytes(s->g, v), cs = hs_chunk_size(s->store), done = 0;
	int fd = open(path, O_RDONLY | O_CLOEXEC), rc = 0;

	if (fd < 0)
		return hp_error(-errno, "%s: %s", path, strerror(errno));
	rc = new_tensor(s, v);
	for (uint64_t i = 0; rc == 0 && done < bytes; i++) {
		uint64_t len = bytes - done < cs ? bytes - done : cs;
		void *p;
		ssize_t got;
		rc = hs_pin(s->ten[v], i, 1, HS_PIN_OVERWRITE, &p);
		if (rc < 0)
			break;
		got = pread(fd, p, len, (off_t)(off + done));
		hs_unpin(s->ten[v], i, 1);
		if (got != (ssize_t)len)
			rc = hp_error(got < 0 ? -errno : -EIO, "%s: short read of initializer '%s'", path,
				      s->g->values[v].name);
		else if ((rc = hs_evict(s->ten[v], i, 1, HS_TIER_ANY)) > 0)
			rc = 0;
		posix_fadvise(fd, (off_t)(off + done), (off_t)len, POSIX_FADV_DONTNEED);
		done += len;
	}
	close(fd);
	return rc;
}

/* Weights are paged from the model's own files when they lie there 4 KiB
 * aligned (external data); otherwise streamed into the store once. */
static int place_initializer(struct hp_session *s, int v)
{
	const struct hp_graph *g = s->g;
	const struct hp_value *val = &g->values[v];
	struct hs_tensor_info ti = { .bytes = vbytes(g, v), .dtype = val->dtype, .shape = val->shape };
	int rc;

	if (val->data)
		rc = fill_tensor(s, v, val->data);
	else if (val->src.kind == HP_BLOB_NONE)
		rc = fill_tensor(s, v, NULL);
	else if (val->src.kind == HP_BLOB_FILE && val->src.length < ti.bytes)
		return hp_error(HP_EMODEL, "%s: initializer '%s' holds %llu bytes, its shape needs %llu", g->path,
				val->name, (unsigned long long)val->src.length, (unsigned long long)ti.bytes);
	else if (val->src.kind == HP_BLOB_FILE && val->next < 0 && val->src.offset % 4096 == 0 && ti.bytes) {
		rc = hs_tensor_create_backed(s->store, &ti, g->files[val->src.file], val->src.offset, &s->ten[v]);
		return rc < 0 ? hp_error_prefix(rc, "initializer '%s'", val->name) : 0;
	} else if (val->src.kind == HP_BLOB_FILE)
		return stream_initializer(s, v, g->files[val->src.file], val->src.offset);
	else
		return hp_error(HP_EINTERNAL, "initializer '%s' has no bytes", val->name);
	if (rc == 0 && (rc = hs_evict(s->ten[v], 0, HS_ALL, HS_TIER_ANY)) > 0)
		rc = 0;
	return rc;
}

static int open_store(struct hp_session *s)
{
	struct hs_store_opts so;
	int rc;

	hs_store_opts_init(&so, sizeof so);
	so.budget = s->layout.budget;
	so.chunk_size = s->layout.chunk;
	so.stats_page = 1;
	if (s->opts.size >= offsetof(struct hp_exec_opts, tiers) + sizeof s->opts.tiers && s->opts.ntiers > 0) {
		if (s->opts.ntiers > HS_MAX_TIERS)
			return hp_error(HP_EUSAGE, "at most %d tiers", HS_MAX_TIERS);
		so.ntiers = s->opts.ntiers;
		memcpy(so.tiers, s->opts.tiers, (size_t)so.ntiers * sizeof *so.tiers);
		so.reset = 1; /* a run's tensors are scratch: never resume a stale tier file */
	}
	rc = hs_store_open(&so, &s->store);
	return rc < 0 ? hp_error_prefix(rc, "opening the tensor store") : 0;
}

/* One kernel scratch buffer per compute worker, pinned for the session
 * (the plan reserved it: opts.workspace). */
static int create_scratch(struct hp_session *s, int workers)
{
	uint64_t bytes = hp_plan_max_workspace(s->g);
	struct hs_tensor_info ti = { .bytes = bytes, .dtype = HP_U8, .shape = { 1, { (int64_t)bytes } } };
	int rc;

	if (!bytes)
		return 0;
	s->scratch = calloc((size_t)workers, sizeof *s->scratch);
	s->scratch_ptr = calloc((size_t)workers, sizeof *s->scratch_ptr);
	if (!s->scratch || !s->scratch_ptr)
		return hp_error(-ENOMEM, "out of memory");
	s->nscratch = workers;
	for (int w = 0; w < workers; w++) {
		rc = hs_tensor_create(s->store, &ti, &s->scratch[w]);
		if (rc == 0 && (rc = hs_pin(s->scratch[w], 0, HS_ALL, HS_PIN_OVERWRITE, &s->scratch_ptr[w])) < 0) {
			hs_tensor_drop(s->scratch[w]);
			s->scratch[w] = NULL;
		}
		if (rc < 0)
			return hp_error_prefix(rc, "kernel scratch (%llu bytes)", (unsigned long long)bytes);
	}
	return 0;
}

static void name_lanes(struct hp_session *s, int workers, int nio)
{
	char name[64];

	for (int w = 0; w < workers; w++) {
		snprintf(name, sizeof name, "compute worker %d", w);
		hp_trace_lane(s->trace, HP_LANE_COMPUTE + w, name);
	}
	for (int q = 0; q < nio; q++) {
		snprintf(name, sizeof name, "I/O queue %d (loads, write-backs)", q);
		hp_trace_lane(s->trace, HP_LANE_IO + q, name);
	}
}

int hp_rt_create(struct hp_session *s)
{
	const struct hp_graph *g = s->g;
	struct hp_plan_opts po;
	int workers = s->layout.workers, nio = s->opts.io_threads > 0 ? s->opts.io_threads : 4;
	int rc;

	pthread_mutex_init(&s->spare_mu, NULL);
	hp_plan_default_opts(&s->layout, &po);
	rc = hp_plan_build(g, &po, &s->plan);
	if (rc < 0)
		return rc;
	rc = open_store(s);
	if (rc < 0)
		return rc;
	s->ten = calloc((size_t)g->nvalues + 1, sizeof *s->ten);
	if (!s->ten)
		return hp_error(-ENOMEM, "out of memory");
	for (int v = 0; v < g->nvalues; v++)
		if (g->values[v].kind == HP_VALUE_INITIALIZER && s->plan->last_use[v] >= 0 &&
		    (rc = place_initializer(s, v)) < 0)
			return rc;
	rc = po.workspace ? create_scratch(s, workers) : 0;
	if (rc == 0)
		rc = hp_net_create(s, workers, nio, &s->net);
	if (rc == 0 && s->trace)
		name_lanes(s, workers, nio);
	return rc;
}

/* ---- transitions ---- */

/* "resident bytes" per tier, for the trace's memory track. */
static void trace_resident(struct hp_session *s)
{
	struct hs_store_stats st;
	const char *keys[HS_MAX_TIERS + 1];
	double vals[HS_MAX_TIERS + 1];

	if (!s->trace || hs_store_stats(s->store, &st) < 0)
		return;
	keys[0] = "dram";
	vals[0] = (double)st.resident;
	for (int i = 1; i < st.ntiers; i++) {
		keys[i] = st.tier[i].name;
		vals[i] = (double)st.tier[i].used;
	}
	hp_trace_counters(s->trace, "resident bytes", hp_trace_now_us(s->trace), st.ntiers, keys, vals);
}

static int pin_io(struct hp_session *s, const struct hp_node *n, struct hp_tensor *in, struct hp_tensor *out)
{
	const struct hp_graph *g = s->g;
	int rc;

	for (int j = 0; j < n->ninputs; j++) {
		int v = n->inputs[j];
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

/* Per-kernel scratch (tight budgets): a store tensor of exactly this node's
 * size for the kernel's duration, counted with its step like the net does. */
static int pin_workspace(struct hp_session *s, const struct hp_node *n, struct hs_tensor **t, void **p)
{
	struct hs_tensor_info ti = { .bytes = n->workspace, .dtype = HP_U8, .shape = { 1, { (int64_t)n->workspace } } };
	int rc = take_tensor(s, &ti, t);

	if (rc == 0 && (rc = hs_pin(*t, 0, HS_ALL, HS_PIN_OVERWRITE, p)) < 0) {
		hs_tensor_drop(*t);
		*t = NULL;
	}
	return rc < 0 ? hp_node_error(s->g, n, rc, "workspace of %zu bytes: %s", n->workspace, hp_errmsg()) : 0;
}

int hp_rt_fire_kernel(struct hp_session *s, int step, int worker, struct hp_pool *pool, int lane)
{
	const struct hp_node *n = &s->g->nodes[s->plan->node[step]];
	struct hp_tensor in[n->ninputs + 1], out[n->noutputs + 1];
	struct hp_kargs a = { .nin = n->ninputs, .in = in, .nout = n->noutputs, .out = out,
			      .ws_size = n->workspace, .pool = pool };
	struct hs_tensor *ws = NULL;
	int rc;

	int inplace = hp_plan_inplace(s->g, s->plan, step);

	memset(in, 0, sizeof in);
	memset(out, 0, sizeof out);
	if (inplace)
		s->ten[n->outputs[0]] = s->ten[n->inputs[0]];
	rc = pin_io(s, n, in, out);
	if (rc == 0 && n->workspace && s->nscratch)
		a.ws = s->scratch_ptr[worker];
	else if (rc == 0 && n->workspace)
		rc = pin_workspace(s, n, &ws, &a.ws);
	if (rc == 0 && !(inplace && (n->op->flags & HP_OP_ALIAS))) {
		double u0 = hp_trace_now_us(s->trace);
		rc = n->op->run(n, &a);
		if (s->trace)
			hp_trace_span(s->trace, lane, n->op_type, n->name, u0, hp_trace_now_us(s->trace));
	}
	if (ws) {
		int r2 = hs_unpin(ws, 0, HS_ALL);
		r2 = r2 < 0 ? r2 : give_back(s, ws);
		rc = rc < 0 ? rc : r2;
	}
	unpin_io(s, n, in, out);
	if (inplace)
		s->ten[n->inputs[0]] = NULL;
	return rc;
}

static const char *io_name(int kind)
{
	return kind == HP_TR_LOAD ? "load" : kind == HP_TR_WRITEBACK ? "write-back" : kind == HP_TR_EVICT ? "evict" : "drop";
}

static uint64_t io_bytes(struct hp_session *s, int v, uint64_t first, uint64_t nchunks)
{
	uint64_t b = vbytes(s->g, v), cs = hs_chunk_size(s->store);

	if (!nchunks)
		return b;
	b = b > first * cs ? b - first * cs : 0;
	return b < nchunks * cs ? b : nchunks * cs;
}

int hp_rt_fire_io(struct hp_session *s, int kind, int v, uint64_t first, uint64_t nchunks, int lane)
{
	struct hs_tensor *t = s->ten[v];
	struct hs_prefetch *h;
	double u0 = hp_trace_now_us(s->trace);
	int rc = 0;

	if (!t)
		return 0; /* not written yet (an input or output before the first run) */
	if (kind == HP_TR_LOAD) {
		rc = hs_prefetch(t, first, nchunks ? nchunks : HS_ALL, &h);
		if (rc == 0)
			rc = hs_prefetch_wait(h);
	} else if (kind == HP_TR_DROP) {
		s->ten[v] = NULL;
		rc = give_back(s, t);
	} else if ((rc = hs_evict(t, 0, HS_ALL, HS_TIER_ANY)) > 0) {
		rc = 0;
	}
	if (rc < 0)
		return hp_error_prefix(rc, "%s of '%s'", io_name(kind), s->g->values[v].name);
	if (s->trace) {
		if (kind != HP_TR_DROP)
			hp_trace_span_bytes(s->trace, lane, io_name(kind), s->g->values[v].name, u0,
					    hp_trace_now_us(s->trace), io_bytes(s, v, first, nchunks));
		trace_resident(s);
	}
	return 0;
}

/* ---- runs ---- */

int hp_rt_run(struct hp_session *s)
{
	const struct hp_graph *g = s->g;
	struct hs_store_stats a, b;
	uint64_t wa = 0, wb = 0;
	int rc;

	hs_store_stats(s->store, &a);
	rc = hp_net_run(s->net);
	hs_store_stats(s->store, &b);
	for (int i = 1; i < a.ntiers; i++) {
		wa += a.tier[i].bytes_written;
		wb += b.tier[i].bytes_written;
	}
	s->run_written = wb - wa;
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
	int rc = fill_tensor(s, v, data);

	if (rc == 0)
		hp_net_note_resident(s->net, v);
	return rc;
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
	hp_net_destroy(s->net);
	s->net = NULL;
	if (s->ten)
		for (int v = 0; v < s->g->nvalues; v++)
			if (s->ten[v])
				hs_tensor_drop(s->ten[v]);
	for (int k = 0; k < s->nspare; k++)
		hs_tensor_drop(s->spare[k]);
	free(s->ten);
	free(s->spare);
	s->spare = NULL;
	s->nspare = s->capspare = 0;
	for (int w = 0; w < s->nscratch; w++)
		if (s->scratch[w]) {
			hs_unpin(s->scratch[w], 0, HS_ALL);
			hs_tensor_drop(s->scratch[w]);
		}
	free(s->scratch);
	free(s->scratch_ptr);
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
