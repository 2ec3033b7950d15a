/* Out-of-core executor: every managed value is a store tensor.  The plan is
 * turned into the task net's plan order (net.c) and the net fires the ops
 * defined here: a kernel pins its inputs and outputs (already resident: the
 * net loaded them), a load prefetches, a write-back or eviction
 * hs_evict()s, a drop frees the tensor.  The net hands out the budget so
 * that the store never has to evict on its own; the store stays the
 * authority on residency, so a mistaken plan only costs time, never data. */
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "hpdlf/error.h"
#include "hpdlf/store.h"
#include "exec/comm.h"
#include "exec/comm_thread.h"
#include "exec/exec_internal.h"
#include "exec/net.h"
#include "exec/plan.h"
#include "exec/tier_room.h"
#include "exec/remat.h"
#include "exec/trace.h"
#include "store/tier_uring.h"
#include "kernels/blas.h"

/* The out-of-core executor's state (the session's common part is not
 * used here but through these copies): named `s` in this file. */
struct hp_rt {
	const struct hp_graph *g;
	struct hp_exec_opts opts;
	struct hp_budget_layout layout; /* the session's */
	int threads;
	struct hp_trace *trace;
	double pin_trace_us;         /* pins traced from this long (trace_pin) */
	struct hp_prof *prof;        /* the session's, or NULL */
	struct hs_store *store;
	struct hs_tensor **ten;      /* per value; the task net orders all access */
	struct hs_tensor **spare;    /* dead values' tensors, discarded (contents gone, frames kept) */
	int nspare, capspare;        /* a stack: the last one dropped is taken first */
	pthread_mutex_t spare_mu;
	struct hp_plan *plan;
	struct hp_net *net;
	int workers, nio;
	struct hp_pool **pools;      /* per compute worker; [0] is the session's with one worker */
	int own_pool0;
	uint64_t run_written;        /* bytes written below DRAM by the last run */
	struct hs_tensor **scratch;  /* per compute worker: kernel workspace, pinned */
	void **scratch_ptr;
	int nscratch;
	/* The state's previous version (a value whose `next` the run writes:
	 * weights, moments, running statistics): the steps that read it in a
	 * run, and how many have yet to in this one.  At 0 its tensor is
	 * discarded, so its copies below DRAM make room for the new version
	 * at once instead of at the run's end: the tiers hold the state about
	 * once, not its two versions (issue 17). */
	int *sreaders;
	atomic_int *sleft;
	atomic_int sreleased;        /* discarded so far in this run */
	int state_gone;              /* a run failed after discarding some: the state is torn */
	struct out_snap *snap;       /* per graph output (g->outputs' order): small ones' bytes */
	int *snap_of;                /* per value: its slot in snap if a small graph output, else -1 */
	uint64_t run_gen;            /* runs started */
	/* hp_session_set_ahead: called once in the next run, after step
	 * ahead_step - 1 (0: before the first; nsteps: after the last) */
	hp_ahead_fn ahead_fn;
	void *ahead_arg;
	int ahead_step;
	uint64_t ahead_room;
	atomic_int ahead_done;
};

/* A graph output of at most SNAP_BYTES (a training step's loss) is copied
 * aside after each step that writes it (the last one, in plan order,
 * leaves its final bytes: a value is not written after its last writer),
 * and the caller's read after the run takes that copy while the value is
 * still held.  Under a tight budget the plan writes the loss back and
 * evicts it: reading it after the run was a synchronous load, a
 * submission and a wait (lenet at a quarter: 50-300 us at the end of a
 * ~3 ms step). */
#define SNAP_BYTES 64

struct out_snap {
	uint64_t gen;                /* run_gen of the run that wrote b; 0: none */
	unsigned char b[SNAP_BYTES];
};

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
static int take_tensor(struct hp_rt *s, const struct hs_tensor_info *ti, struct hs_tensor **out)
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
static int give_back(struct hp_rt *s, struct hs_tensor *t)
{
	int rc = hs_tensor_discard(t, 0, HS_ALL);

	hs_tensor_set_label(t, "(free)"); /* its value is dead: not listed under its name */
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

static int new_tensor(struct hp_rt *s, int v)
{
	const struct hp_value *val = &s->g->values[v];
	struct hs_tensor_info ti = { .bytes = vbytes(s->g, v), .dtype = val->dtype, .shape = val->shape };

	if (!ti.bytes)
		ti.bytes = 1; /* empty tensors still get an identity */
	int rc = take_tensor(s, &ti, &s->ten[v]);
	if (rc == 0) /* hpdlf-store-inspect --tensors lists it by its value's name */
		hs_tensor_set_label(s->ten[v], val->name);
	return rc;
}

/* Write `src` (or zeros) into value v's tensor, creating it. */
static int fill_tensor(struct hp_rt *s, int v, const void *src)
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
static int stream_initializer(struct hp_rt *s, int v, const char *path, uint64_t off)
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
static int place_initializer(struct hp_rt *s, int v)
{
	const struct hp_graph *g = s->g;
	const struct hp_value *val = &g->values[v];
	struct hs_tensor_info ti = { .bytes = vbytes(g, v), .dtype = val->dtype, .shape = val->shape };
	int rc;

	if (val->data)
		rc = fill_tensor(s, v, val->data);
	else if (val->src.kind == HP_BLOB_NONE) {
		/* zeros (optimizer state): a chunk never written reads as zeros
		 * at its first pin, so nothing is written (an Adam run wrote
		 * twice the parameter bytes of zeros below DRAM before step 0) */
		rc = new_tensor(s, v);
		if (rc == 0)
			hs_tensor_set_label(s->ten[v], val->name);
		return rc < 0 ? hp_error_prefix(rc, "value '%s'", val->name) : 0;
	} else if (val->src.kind == HP_BLOB_FILE && val->src.length < ti.bytes)
		return hp_error(HP_EMODEL, "%s: initializer '%s' holds %llu bytes, its shape needs %llu", g->path,
				val->name, (unsigned long long)val->src.length, (unsigned long long)ti.bytes);
	else if (val->src.kind == HP_BLOB_FILE && val->next < 0 && val->src.offset % 4096 == 0 && ti.bytes) {
		rc = hs_tensor_create_backed(s->store, &ti, g->files[val->src.file], val->src.offset, &s->ten[v]);
		if (rc == 0)
			hs_tensor_set_label(s->ten[v], val->name);
		return rc < 0 ? hp_error_prefix(rc, "initializer '%s'", val->name) : 0;
	} else if (val->src.kind == HP_BLOB_FILE)
		return stream_initializer(s, v, g->files[val->src.file], val->src.offset);
	else
		return hp_error(HP_EINTERNAL, "initializer '%s' has no bytes", val->name);
	if (rc == 0 && (rc = hs_evict(s->ten[v], 0, HS_ALL, HS_TIER_ANY)) > 0)
		rc = 0;
	return rc;
}

static int open_store(struct hp_rt *s)
{
	struct hs_store_opts so;
	int rc;

	hs_store_opts_init(&so, sizeof so);
	so.budget = s->layout.budget;
	so.chunk_size = s->layout.chunk;
	so.stats_page = 1;
	so.keep_clean = 1; /* a write-back read again soon after costs no read */
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
static int create_scratch(struct hp_rt *s, int workers)
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

static void name_lanes(struct hp_rt *s, int workers, int nio)
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
	for (int q = 0; !nio && q < 4; q++) { /* inline I/O: the batches in flight */
		snprintf(name, sizeof name, "I/O in flight %d (issued by compute worker 0)", q);
		hp_trace_lane(s->trace, HP_LANE_IO + q, name);
	}
}

/* Per compute worker a kernel thread pool: the session's with one worker;
 * with several, each kernel gets its share of the threads (OpenBLAS
 * threads are process-wide), so the cores are never oversubscribed. */
static int create_pools(struct hp_rt *s, struct hp_pool *pool)
{
	int per = s->threads / s->workers > 0 ? s->threads / s->workers : 1, rc;

	s->pools = calloc((size_t)s->workers, sizeof *s->pools);
	if (!s->pools)
		return hp_error(-ENOMEM, "out of memory");
	s->pools[0] = pool;
	if (s->workers == 1)
		return 0;
	hp_blas_threads(per);
	s->own_pool0 = 1;
	s->pools[0] = NULL;
	for (int w = 0; w < s->workers; w++)
		if ((rc = hp_pool_create(per, &s->pools[w])) < 0)
			return rc;
	return 0;
}

/* Upper bound of the plan order's length: the prologue, the plan's
 * actions, the kernels and a drop per kernel input and output. */
static int order_bound(const struct hp_rt *s)
{
	const struct hp_plan *p = s->plan;
	int n = s->g->nvalues + p->nacts + p->nsteps;

	for (int k = 0; k < p->nsteps; k++)
		n += s->g->nodes[p->node[k]].ninputs + s->g->nodes[p->node[k]].noutputs;
	return n;
}

/* --sync-bn: kernels issuing collectives of their own (attribute sync,
 * kernels/norm_sync.c). */
static int syncs(const struct hp_node *n)
{
	return !strcmp(n->domain, "ai.hpdlf") && hp_attr_int(n, "sync", 0) != 0;
}

static int graph_syncs(const struct hp_graph *g)
{
	for (int i = 0; i < g->nnodes; i++)
		if (!g->nodes[i].folded && syncs(&g->nodes[i]))
			return 1;
	return 0;
}

/* over: room for the step's outputs (net.h's hp_net_entry.over), kept
 * until the net is built; the number of them used. */
static int add_kernel_entry(const struct hp_rt *s, int k, struct hp_net_entry *e, int sync, int *over)
{
	const struct hp_node *nd = &s->g->nodes[s->plan->node[k]];
	int inplace = hp_plan_inplace(s->g, s->plan, k), extra = 0;

	*e = (struct hp_net_entry){ .kind = HP_TR_KERNEL, .step = k, .nin = nd->ninputs, .in = nd->inputs,
				    .nout = nd->noutputs, .out = nd->outputs, .inplace = (uint8_t)inplace };
	for (int o = 0; o < nd->noutputs && !hp_comm_is_allreduce(nd); o++) {
		over[o] = o == 0 && inplace ? -1 : hp_plan_inplace_src(s->g, s->plan, k, o);
		extra |= over[o] >= 0;
	}
	if (extra)
		e->over = over;
	if (!s->nscratch) /* scratch per kernel, else the workers' own */
		e->workspace = (nd->workspace + 4095) / 4096 * 4096;
	/* a bucket's reduction fires on an I/O thread (no workspace: it packs
	 * into the communicator's staging buffer), its sums over the gradients
	 * when they die there */
	if (hp_comm_is_allreduce(nd)) {
		e->kind = HP_TR_COMM;
		e->inplace = (uint8_t)hp_plan_comm_inplace(s->g, s->plan, k);
	}
	if (hp_remat_is_copy(nd)) /* a forward kernel run again for the backward (remat.h) */
		e->kind = HP_TR_RECOMPUTE;
	/* --sync-bn: the workers would take the BatchNorm kernels in any order
	 * their inputs allow, which differs between ranks; their collectives
	 * and the buckets' go in the plan's order, one after another, the same
	 * on every rank (a rank blocked in a statistics sum never holds back a
	 * bucket its peer waits for) */
	e->ordered = (uint8_t)(sync && (syncs(nd) || e->kind == HP_TR_COMM));
	return extra ? nd->noutputs : 0;
}

/* The slot of v among the graph's small outputs (SNAP_BYTES), or -1. */
static int snap_slot(const struct hp_rt *s, int v)
{
	return s->snap_of && v >= 0 && v < s->g->nvalues ? s->snap_of[v] : -1;
}

/* After step k wrote its outputs (their chunks resident: the net starts
 * no write-back of them before the step completes): the small graph
 * outputs' bytes, copied aside. */
static int snap_outputs(struct hp_rt *s, const struct hp_node *n)
{
	for (int o = 0; o < n->noutputs; o++) {
		int v = n->outputs[o], k = snap_slot(s, v);
		void *p;
		if (k < 0 || !s->ten[v])
			continue;
		int rc = hs_pin(s->ten[v], 0, HS_ALL, HS_PIN_READ, &p);
		if (rc < 0)
			return hp_error_prefix(rc, "value '%s'", s->g->values[v].name);
		memcpy(s->snap[k].b, p, vbytes(s->g, v));
		hs_unpin(s->ten[v], 0, HS_ALL);
		s->snap[k].gen = s->run_gen;
	}
	return 0;
}

/* Count the steps reading each value of the state's previous version
 * (a step reading it twice is one reader). */
static int count_state_readers(struct hp_rt *s)
{
	const struct hp_graph *g = s->g;

	s->sreaders = calloc((size_t)g->nvalues + 1, sizeof *s->sreaders);
	s->sleft = calloc((size_t)g->nvalues + 1, sizeof *s->sleft);
	s->snap = calloc((size_t)g->noutputs + 1, sizeof *s->snap);
	s->snap_of = malloc(((size_t)g->nvalues + 1) * sizeof *s->snap_of);
	if (!s->sreaders || !s->sleft || !s->snap || !s->snap_of)
		return hp_error(-ENOMEM, "out of memory");
	for (int v = 0; v < g->nvalues; v++)
		s->snap_of[v] = -1;
	for (int k = 0; k < g->noutputs; k++) {
		int v = g->outputs[k];
		if (v >= 0 && managed(g, v) && vbytes(g, v) <= SNAP_BYTES)
			s->snap_of[v] = k;
	}
	for (int k = 0; k < s->plan->nsteps; k++) {
		const struct hp_node *nd = &g->nodes[s->plan->node[k]];
		for (int j = 0; j < nd->ninputs; j++) {
			int v = nd->inputs[j], dup = 0;
			for (int i = 0; i < j; i++)
				dup |= nd->inputs[i] == v;
			if (!dup && v >= 0 && hp_plan_state_released(g, v))
				s->sreaders[v]++;
		}
	}
	return 0;
}

/* Step k read what it needed (lock-free: workers call it at once): the
 * state it was the last reader of this run is dead, discard it. */
static int state_read_done(struct hp_rt *s, int k)
{
	const struct hp_node *nd = &s->g->nodes[s->plan->node[k]];
	int rc = 0;

	for (int j = 0; j < nd->ninputs && rc == 0; j++) {
		int v = nd->inputs[j], dup = 0;
		for (int i = 0; i < j; i++)
			dup |= nd->inputs[i] == v;
		if (dup || v < 0 || !s->sreaders[v] || atomic_fetch_sub(&s->sleft[v], 1) != 1 || !s->ten[v])
			continue;
		atomic_fetch_add(&s->sreleased, 1);
		rc = hs_tensor_discard(s->ten[v], 0, HS_ALL);
		if (rc < 0)
			rc = hp_error_prefix(rc, "discarding the previous version of '%s'", s->g->values[v].name);
	}
	return rc;
}

/* The plan as the net's plan order: the prologue (persistent values the
 * steady state does not keep resident are written back first, then those
 * it does are loaded), then per step its I/O, its kernel and the drops
 * after it (inputs at their last use, outputs nobody reads). */
static int plan_order(const struct hp_rt *s, struct hp_net_entry *e, int *over)
{
	const struct hp_graph *g = s->g;
	const struct hp_plan *p = s->plan;
	int n = 0, sync = graph_syncs(g);

	for (int pass = 0; pass < 2; pass++)
		for (int v = 0; v < g->nvalues; v++)
			if (p->last_use[v] == p->nsteps && managed(g, v) && p->start_resident[v] == pass)
				e[n++] = (struct hp_net_entry){ .kind = pass ? HP_TR_LOAD : HP_TR_WRITEBACK,
								.reconcile = 1, .value = v };
	for (int k = 0; k < p->nsteps; k++) {
		const struct hp_node *nd = &g->nodes[p->node[k]];
		for (int a = p->act_begin[k]; a < p->act_begin[k + 1]; a++) {
			int act = p->acts[a].act;
			e[n++] = (struct hp_net_entry){ .value = p->acts[a].value,
							.kind = act == HP_ACT_LOAD ? HP_TR_LOAD
								: act == HP_ACT_WRITEBACK ? HP_TR_WRITEBACK : HP_TR_EVICT };
		}
		over += add_kernel_entry(s, k, &e[n++], sync, over);
		for (int j = 0; j < nd->ninputs; j++)
			if (managed(g, nd->inputs[j]) && p->last_use[nd->inputs[j]] == k)
				e[n++] = (struct hp_net_entry){ .kind = HP_TR_DROP, .value = nd->inputs[j] };
		for (int o = 0; o < nd->noutputs; o++)
			if (managed(g, nd->outputs[o]) && p->last_use[nd->outputs[o]] < 0)
				e[n++] = (struct hp_net_entry){ .kind = HP_TR_DROP, .value = nd->outputs[o] };
	}
	return n;
}

static int rt_fire_kernel(void *arg, int step, int worker, int lane);
static void fire_ahead(struct hp_rt *s, int lane, uint64_t room);
static int rt_fire_io(void *arg, int kind, int v, uint64_t first, uint64_t nchunks, int lane);
static void rt_fire_io_batch(void *arg, struct hp_net_io *ios, int n, int lane);
static void *rt_start_io_batch(void *arg, struct hp_net_io *ios, int n, int lane);
static int rt_io_batch_done(void *arg, void *h, struct hp_net_io *ios, int n, int wait);
static void rt_io_plug(void *arg, int on);
static int rt_fire_comm(void *arg, int step, int lane);

static const struct hp_net_ops rt_net_ops = { .fire_kernel = rt_fire_kernel, .fire_io = rt_fire_io,
					      .fire_comm = rt_fire_comm, .fire_recompute = rt_fire_kernel,
					      .fire_io_batch = rt_fire_io_batch, .start_io_batch = rt_start_io_batch,
					      .io_batch_done = rt_io_batch_done, .io_plug = rt_io_plug };

/* A write-back part's least size (hp_net_desc.wb_part): a transition and
 * an I/O thread's wake-up each, where a few parts of a large tensor are
 * what lets a load start early. */
#define WB_PART (512u << 10)

/* Values' budget bytes (4 KiB pages, at least one; constants are not
 * managed) and chunk counts (tensors that exist now may load and be
 * written back in parts). */
static int create_net(struct hp_rt *s)
{
	const struct hp_graph *g = s->g;
	size_t nv = (size_t)g->nvalues + 1;
	struct hp_net_desc d = { .nvalues = g->nvalues, .chunk = hs_chunk_size(s->store), .budget = s->layout.budget,
				 .reserved = s->nscratch ? s->layout.workspace : 0,
				 .trace = s->trace, .workers = s->workers, .io_threads = s->nio, .wb_part = WB_PART };
	uint64_t *vsize = calloc(nv, sizeof *vsize);
	uint32_t *nch = calloc(nv, sizeof *nch);
	struct hp_net_entry *e = malloc((size_t)order_bound(s) * sizeof *e + sizeof *e);
	int *over = malloc((size_t)order_bound(s) * sizeof *over + sizeof *over);
	int rc;

	if (!vsize || !nch || !e || !over) {
		rc = hp_error(-ENOMEM, "out of memory");
		goto out;
	}
	for (int v = 0; v < g->nvalues; v++) {
		uint64_t b = (vbytes(g, v) + 4095) / 4096 * 4096;
		vsize[v] = managed(g, v) ? (b ? b : 4096) : 0;
		nch[v] = s->ten[v] ? (uint32_t)hs_tensor_nchunks(s->ten[v]) : 1;
	}
	d.vsize = vsize;
	d.nchunks = nch;
	d.entries = e;
	d.nentries = plan_order(s, e, over);
	rc = hp_net_create(&d, &rt_net_ops, s, &s->net);
out:
	free(vsize);
	free(nch);
	free(e);
	free(over);
	return rc;
}

/* Tensors below this budget (chunks of at most 64 KiB: small values and
 * short kernels) have their I/O issued and reaped by the one compute
 * worker between kernels (net.h: no I/O threads).  On a few cores the
 * wake-ups of I/O threads cost more than the overlap they give: lenet
 * trained at 25% of its peak spent more CPU in futex and scheduling than
 * in its kernels.  Larger budgets keep I/O threads: their kernels run long
 * enough that loads must start while one runs. */
#define INLINE_IO_BELOW (4ull << 20)

static int io_threads(const struct hp_rt *s)
{
	if (s->opts.io_threads > 0)
		return s->opts.io_threads;
	for (int i = 0; i < s->g->nnodes; i++)
		if (!s->g->nodes[i].folded && hp_comm_is_allreduce(&s->g->nodes[i]))
			return 4; /* reductions fire on I/O threads */
	return s->workers == 1 && s->layout.budget < INLINE_IO_BELOW ? 0 : 4;
}

/* Pins and unpins of at least this long get a span on the compute lane
 * ("pin", "unpin"): under a budget they make room for a kernel's tensors
 * (compaction copies, mremaps, waits for the store's lock) on the
 * critical path, where neither "stall" nor the kernel's span shows it;
 * the short ones, most of them, would only swell the trace.
 * HPDLF_TRACE_PIN_US sets another threshold (0: every pin). */
#define PIN_TRACE_US 50.0

static double pin_trace_us(void)
{
	const char *e = getenv("HPDLF_TRACE_PIN_US");
	char *end;
	double us = e && *e ? strtod(e, &end) : -1;

	return us >= 0 && *end == '\0' ? us : PIN_TRACE_US;
}

static int rt_create(struct hp_session *ss)
{
	const struct hp_graph *g = ss->g;
	struct hp_plan_opts po;
	struct hp_rt *s = calloc(1, sizeof *s);
	int rc;

	if (!s)
		return hp_error(-ENOMEM, "out of memory");
	ss->state = s;
	s->g = g;
	s->opts = ss->opts;
	s->layout = ss->layout;
	s->threads = ss->threads;
	s->trace = ss->trace;
	s->pin_trace_us = pin_trace_us();
	s->prof = ss->prof;
	s->workers = s->layout.workers;
	s->nio = io_threads(s);
	pthread_mutex_init(&s->spare_mu, NULL);
	hp_plan_default_opts(&s->layout, &po);
	rc = hp_plan_build(g, &po, &s->plan);
	if (rc == 0) /* before the store writes anything below DRAM */
		rc = hp_tier_room_check(g, s->plan, &s->opts);
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
	rc = po.workspace ? create_scratch(s, s->workers) : 0;
	if (rc == 0)
		rc = count_state_readers(s);
	if (rc == 0)
		rc = create_pools(s, ss->pool);
	if (rc == 0)
		rc = create_net(s);
	if (rc == 0 && s->trace)
		name_lanes(s, s->workers, s->nio);
	return rc;
}

/* ---- transitions ---- */

/* "resident bytes" per tier, for the trace's memory track. */
static void trace_resident(struct hp_rt *s)
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

static int pin_inputs(struct hp_rt *s, const struct hp_node *n, struct hp_tensor *in)
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
	return 0;
}

static int pin_outputs(struct hp_rt *s, const struct hp_node *n, struct hp_tensor *out)
{
	const struct hp_graph *g = s->g;
	int rc;

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

/* A kernel's inputs and outputs pinned.  The outputs first, unless one is
 * its input (in place): frames for them are taken while the inputs, resident
 * but not pinned yet, can still be moved by compaction (store/compact.c)
 * to leave the outputs a run of free pages, instead of the pins of the
 * inputs cutting the pool's free pages apart (each output then mapped into
 * its range, an mremap each way). */
static int pin_io(struct hp_rt *s, const struct hp_node *n, struct hp_tensor *in, struct hp_tensor *out, int inplace)
{
	int rc;

	if (inplace)
		return (rc = pin_inputs(s, n, in)) < 0 ? rc : pin_outputs(s, n, out);
	return (rc = pin_outputs(s, n, out)) < 0 ? rc : pin_inputs(s, n, in);
}

static void unpin_io(struct hp_rt *s, const struct hp_node *n, const struct hp_tensor *in,
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
static int pin_workspace(struct hp_rt *s, const struct hp_node *n, struct hs_tensor **t, void **p)
{
	struct hs_tensor_info ti = { .bytes = n->workspace, .dtype = HP_U8, .shape = { 1, { (int64_t)n->workspace } } };
	int rc = take_tensor(s, &ti, t);

	if (rc == 0)
		hs_tensor_set_label(*t, "(kernel workspace)");
	if (rc == 0 && (rc = hs_pin(*t, 0, HS_ALL, HS_PIN_OVERWRITE, p)) < 0) {
		hs_tensor_drop(*t);
		*t = NULL;
	}
	return rc < 0 ? hp_node_error(s->g, n, rc, "workspace of %zu bytes: %s", n->workspace, hp_errmsg()) : 0;
}

/* The outputs of step k written over an input's tensor (hp_plan_inplace_src)
 * take that tensor now; the number of them.  An update writing the state
 * over its previous version leaves no whole version behind if the run
 * fails from here on (state_torn). */
static int take_inplace(struct hp_rt *s, int k, int *src)
{
	const struct hp_node *n = &s->g->nodes[s->plan->node[k]];
	int any = 0;

	for (int o = 0; o < n->noutputs; o++) {
		src[o] = hp_plan_inplace_src(s->g, s->plan, k, o);
		if (src[o] < 0)
			continue;
		any++;
		s->ten[n->outputs[o]] = s->ten[n->inputs[src[o]]];
		if (hp_plan_state_released(s->g, n->inputs[src[o]]))
			atomic_fetch_add(&s->sreleased, 1);
	}
	return any;
}

static void trace_pin(struct hp_rt *s, int lane, const char *what, const struct hp_node *n, double from_us)
{
	double to_us = hp_trace_now_us(s->trace);

	if (s->trace && to_us - from_us >= s->pin_trace_us)
		hp_trace_span(s->trace, lane, what, n->name, from_us, to_us);
}

static int rt_fire_kernel(void *arg, int step, int worker, int lane)
{
	struct hp_rt *s = arg;
	const struct hp_node *n = &s->g->nodes[s->plan->node[step]];
	struct hp_tensor in[n->ninputs + 1], out[n->noutputs + 1];
	struct hp_kargs a = { .nin = n->ninputs, .in = in, .nout = n->noutputs, .out = out,
			      .ws_size = n->workspace, .pool = s->pools[worker] };
	struct hs_tensor *ws = NULL;
	int src[n->noutputs + 1], rc = 0;

	memset(in, 0, sizeof in);
	memset(out, 0, sizeof out);
	int inplace = take_inplace(s, step, src);
	/* the scratch first, then the outputs, then the inputs (pin_io): the
	 * largest tensors of a kernel at tight budgets (LeNet at 25%: scratch
	 * of 25 pages, activations of 16, in a pool of 64) find a run of free
	 * pages while compaction can still move the resident inputs aside;
	 * taken after the inputs' pins, which fix their chunks where they lie,
	 * the scratch rarely found one and was mapped chunk by chunk into its
	 * range and home again, several kernels a step */
	double w0 = hp_trace_now_us(s->trace);
	if (n->workspace && s->nscratch)
		a.ws = s->scratch_ptr[worker];
	else if (n->workspace)
		rc = pin_workspace(s, n, &ws, &a.ws);
	if (rc == 0)
		rc = pin_io(s, n, in, out, inplace);
	trace_pin(s, lane, "pin", n, w0);
	if (rc == 0 && !(src[0] == 0 && (n->op->flags & HP_OP_ALIAS))) {
		double u0 = hp_trace_now_us(s->trace);
		uint64_t p0 = hp_prof_now_ns(s->prof);
		rc = n->op->run(n, &a);
		hp_prof_add(s->prof, (int)(n - s->g->nodes), p0);
		if (s->trace)
			hp_trace_span(s->trace, lane, n->op_type, n->name, u0, hp_trace_now_us(s->trace));
	}
	w0 = hp_trace_now_us(s->trace);
	if (ws) {
		int r2 = hs_unpin(ws, 0, HS_ALL);
		r2 = r2 < 0 ? r2 : give_back(s, ws);
		rc = rc < 0 ? rc : r2;
	}
	unpin_io(s, n, in, out);
	for (int o = 0; o < n->noutputs; o++)
		if (src[o] >= 0)
			s->ten[n->inputs[src[o]]] = NULL;
	if (rc == 0)
		rc = snap_outputs(s, n);
	trace_pin(s, lane, "unpin", n, w0);
	if (rc == 0 && step + 1 == s->ahead_step)
		fire_ahead(s, lane, s->ahead_room);
	return rc < 0 ? rc : state_read_done(s, step);
}

/* The caller's read-ahead, once a run (hp_session_set_ahead); at the end
 * again, with the store's room, if it found none where the plan had. */
static void fire_ahead(struct hp_rt *s, int lane, uint64_t room)
{
	double u0 = hp_trace_now_us(s->trace);

	if (!s->ahead_fn || atomic_exchange(&s->ahead_done, 1))
		return;
	if (!s->ahead_fn(s->ahead_arg, room))
		atomic_store(&s->ahead_done, 0);
	if (s->trace)
		hp_trace_span(s->trace, lane, "read-ahead", "data", u0, hp_trace_now_us(s->trace));
}

/* A bucket's reduction, on an I/O thread while backward goes on. */
static int rt_fire_comm(void *arg, int step, int lane)
{
	struct hp_rt *s = arg;
	const struct hp_node *n = &s->g->nodes[s->plan->node[step]];
	struct hp_tensor in[n->ninputs + 1], out[n->noutputs + 1];
	struct hp_kargs a = { .nin = n->ninputs, .in = in, .nout = n->noutputs, .out = out };
	double u0 = hp_trace_now_us(s->trace);
	int inplace = hp_plan_comm_inplace(s->g, s->plan, step), rc;

	memset(in, 0, sizeof in);
	memset(out, 0, sizeof out);
	for (int i = 1; inplace && i < n->ninputs; i++) /* each sum over its gradient */
		s->ten[n->outputs[i]] = s->ten[n->inputs[i]];
	rc = pin_io(s, n, in, out, 1); /* inputs first, as always for reductions */
	if (rc == 0 && hp_comm_thread_enabled()) /* the comm thread issues it, in the chain's order */
		rc = hp_comm_thread_run(n, &a, s->trace);
	else if (rc == 0)
		rc = hp_comm_run_allreduce(n, &a);
	if (s->trace && !hp_comm_thread_enabled())
		hp_trace_span(s->trace, lane, n->op_type, n->name, u0, hp_trace_now_us(s->trace));
	unpin_io(s, n, in, out);
	for (int i = 1; inplace && i < n->ninputs; i++)
		s->ten[n->inputs[i]] = NULL;
	if (rc == 0)
		rc = snap_outputs(s, n);
	return rc < 0 ? rc : state_read_done(s, step);
}

static const char *io_name(int kind)
{
	return kind == HP_TR_LOAD ? "load" : kind == HP_TR_WRITEBACK ? "write-back" : kind == HP_TR_EVICT ? "evict" : "drop";
}

static uint64_t io_bytes(struct hp_rt *s, int v, uint64_t first, uint64_t nchunks)
{
	uint64_t b = vbytes(s->g, v), cs = hs_chunk_size(s->store);

	if (!nchunks)
		return b;
	b = b > first * cs ? b - first * cs : 0;
	return b < nchunks * cs ? b : nchunks * cs;
}

static int rt_fire_io(void *arg, int kind, int v, uint64_t first, uint64_t nchunks, int lane)
{
	struct hp_rt *s = arg;
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
	} else if ((rc = hs_evict(t, first, nchunks ? nchunks : HS_ALL, HS_TIER_ANY)) > 0) {
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

/* Loads and write-backs the net found ready together, in flight: the
 * loads' reads are submitted first (hs_prefetch_many), then the
 * write-backs' writes (hs_evict_start); rt_io_batch_done reaps them. */
struct rt_flight {
	struct hs_prefetch *ld, *wb;
	int rl, rw, fl, fw, nl, nw, lane;
	double u0;
};

static int rt_io_batch_done(void *arg, void *h, struct hp_net_io *ios, int n, int wait);

static void *rt_start_io_batch(void *arg, struct hp_net_io *ios, int n, int lane)
{
	struct hp_rt *s = arg;
	struct hs_range ld[n], wb[n];
	struct rt_flight *f = calloc(1, sizeof *f);

	if (!f) {
		for (int k = 0; k < n; k++)
			ios[k].rc = hp_error(-ENOMEM, "out of memory");
		return NULL;
	}
	*f = (struct rt_flight){ .fl = -1, .fw = -1, .lane = lane, .u0 = hp_trace_now_us(s->trace) };
	for (int k = 0; k < n; k++) {
		struct hs_tensor *t = s->ten[ios[k].value];
		ios[k].rc = 0;
		if (!t)
			continue; /* not written yet (an input or output before the first run) */
		if (ios[k].kind == HP_TR_LOAD) {
			f->fl = f->fl < 0 ? k : f->fl;
			ld[f->nl++] = (struct hs_range){ t, ios[k].first, ios[k].nchunks ? ios[k].nchunks : HS_ALL };
		} else {
			f->fw = f->fw < 0 ? k : f->fw;
			wb[f->nw++] = (struct hs_range){ t, ios[k].first, ios[k].nchunks ? ios[k].nchunks : HS_ALL };
		}
	}
	hs_tier_uring_plug(1); /* the reads and writes in one io_uring_enter */
	if (f->nl)
		f->rl = hs_prefetch_many(ld, (size_t)f->nl, &f->ld);
	if (f->nw && (f->rw = hs_evict_start(wb, (size_t)f->nw, HS_TIER_ANY, &f->wb)) > 0)
		f->rw = 0;
	hs_tier_uring_plug(0);
	if (f->ld || f->wb)
		return f;
	rt_io_batch_done(arg, f, ios, n, 1);
	return NULL;
}

/* Each io's status (the batch's first failure names its value), its
 * trace span; f is freed. */
static int rt_io_batch_done(void *arg, void *h, struct hp_net_io *ios, int n, int wait)
{
	struct hp_rt *s = arg;
	struct rt_flight *f = h;

	if (!wait && ((f->ld && !hs_prefetch_poll(f->ld)) || (f->wb && !hs_prefetch_poll(f->wb))))
		return 0;
	if (f->ld)
		f->rl = hs_prefetch_wait(f->ld);
	if (f->rl < 0)
		f->rl = hp_error_prefix(f->rl, "load of '%s' (with %d more)", s->g->values[ios[f->fl].value].name, f->nl - 1);
	if (f->wb && (f->rw = hs_prefetch_wait(f->wb)) > 0)
		f->rw = 0;
	if (f->rl >= 0 && f->rw < 0)
		f->rw = hp_error_prefix(f->rw, "write-back of '%s' (with %d more)", s->g->values[ios[f->fw].value].name,
					f->nw - 1);
	for (int k = 0; k < n; k++) {
		if (!s->ten[ios[k].value])
			continue;
		ios[k].rc = ios[k].kind == HP_TR_LOAD ? f->rl : f->rw;
		if (s->trace)
			hp_trace_span_bytes(s->trace, f->lane, io_name(ios[k].kind), s->g->values[ios[k].value].name, f->u0,
					    hp_trace_now_us(s->trace), io_bytes(s, ios[k].value, ios[k].first, ios[k].nchunks));
	}
	if (s->trace)
		trace_resident(s);
	free(f);
	return 1;
}

static void rt_io_plug(void *arg, int on)
{
	(void)arg;
	hs_tier_uring_plug(on);
}

/* The same batch on an I/O thread, waited for: what each does is what
 * rt_fire_io does for it alone. */
static void rt_fire_io_batch(void *arg, struct hp_net_io *ios, int n, int lane)
{
	void *h = rt_start_io_batch(arg, ios, n, lane);

	if (h)
		rt_io_batch_done(arg, h, ios, n, 1);
}

/* ---- the executor's ops (session.c) ---- */

/* A tensor whose every copy below DRAM was lost (a daemon died; under the
 * store's lock): what its value allows.  Values nodes produce are written
 * by the next run before it reads them; weights that no run updates are
 * still in the model (its memory or its file); anything else (inputs,
 * state) is lost. */
static int rt_lost(void *arg, const struct hs_tensor *t, struct hs_source *src)
{
	struct hp_rt *s = arg;
	const struct hp_graph *g = s->g;

	for (int v = 0; v < g->nvalues; v++) {
		const struct hp_value *val = &g->values[v];
		if (s->ten[v] != t)
			continue;
		if (val->kind == HP_VALUE_ACTIVATION)
			return HS_LOST_DROP;
		if (val->kind != HP_VALUE_INITIALIZER || val->next >= 0)
			return HS_LOST_FAIL;
		if (val->data)
			src->mem = val->data;
		else if (val->src.kind == HP_BLOB_FILE)
			*src = (struct hs_source){ .path = g->files[val->src.file], .offset = val->src.offset };
		return src->mem || src->path ? HS_LOST_REFILL : HS_LOST_FAIL;
	}
	return HS_LOST_FAIL;
}

static void recover_opts(struct hp_rt *s, struct hs_recover_opts *ro)
{
	hs_recover_opts_init(ro, sizeof *ro);
	ro->lost = rt_lost;
	ro->arg = s;
}

/* A read after the run failed as a daemon died: the store's verdict names
 * the daemon and every value lost when something else is lost too; else
 * the read's own error (it names the value). */
static int verdict(struct hp_rt *s, int rc)
{
	struct hs_recover_opts ro;
	char why[512];

	snprintf(why, sizeof why, "%s", hp_errmsg());
	recover_opts(s, &ro);
	int rc2 = hs_store_recover(s->store, &ro, NULL);
	return rc2 < 0 ? rc2 : hp_error(rc, "%s", why);
}

/* After a run failed with part of the state discarded (state_read_done),
 * neither version of it is whole. */
static int state_torn(const struct hp_rt *s)
{
	if (!s->state_gone)
		return 0;
	return hp_error(HP_EUSAGE, "%s: a run failed after it had updated part of the training state: the state is "
			"lost (resume from a checkpoint)", s->g->path);
}

static int rt_run(struct hp_session *ss)
{
	struct hp_rt *s = ss->state;
	const struct hp_graph *g = s->g;
	struct hs_store_stats a, b;
	uint64_t wa = 0, wb = 0;
	int rc;

	/* copies lost below DRAM (a daemon died): put back what can be, stop
	 * now if something cannot, not at the step that finally reads it */
	struct hs_recover_opts ro;
	recover_opts(s, &ro);
	if ((rc = state_torn(s)) < 0 || (rc = hs_store_recover(s->store, &ro, NULL)) < 0)
		return rc;
	for (int v = 0; v < g->nvalues; v++)
		atomic_store(&s->sleft[v], s->sreaders[v]);
	atomic_store(&s->sreleased, 0);
	hs_store_stats(s->store, &a);
	s->run_gen++;
	if (s->ahead_fn && s->ahead_step == 0)
		fire_ahead(s, 0, s->ahead_room);
	rc = hp_net_run(s->net);
	if (rc == 0 && s->ahead_fn)
		fire_ahead(s, 0, UINT64_MAX); /* its step never came (a reduction's), or had no room after all */
	s->ahead_fn = NULL;
	/* the state's previous version is partly gone, its next one not
	 * complete: nothing is left to continue from but a checkpoint */
	s->state_gone = rc < 0 && atomic_load(&s->sreleased) > 0;
	/* a daemon died during the run with chunks it needed: the store's
	 * verdict names what is lost.  (The run is not run again in place:
	 * the task net is not re-runnable after a failure; a run stopped that
	 * way hung.  Training resumes from its checkpoint.) */
	if (rc == -EHOSTDOWN)
		rc = verdict(s, rc);
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
			/* the old state is dead (the next run writes its update
			 * anew): free its copies below DRAM, so that the tiers hold
			 * the state once, not the state and its previous version */
			if (t && (rc = hs_tensor_discard(t, 0, HS_ALL)) < 0)
				return hp_error_prefix(rc, "value '%s'", g->values[nx].name);
		}
	}
	return 0;
}

static int rt_set_input(struct hp_session *ss, int v, const void *data)
{
	struct hp_rt *s = ss->state;
	int rc = fill_tensor(s, v, data);

	if (rc == 0)
		hp_net_note_resident(s->net, v);
	return rc;
}

static int rt_get_output(struct hp_session *ss, int v, void *dst)
{
	struct hp_rt *s = ss->state;
	void *p;
	int rc = state_torn(s);

	if (rc < 0)
		return rc;
	if (!s->ten[v])
		return hp_error(HP_EUSAGE, "%s: output '%s' is not computed yet (run first)", s->g->path,
				s->g->values[v].name);
	rc = hs_pin(s->ten[v], 0, HS_ALL, HS_PIN_READ, &p);
	if (rc == -EHOSTDOWN)
		return verdict(s, rc);
	if (rc < 0)
		return rc;
	memcpy(dst, p, vbytes(s->g, v));
	return hs_unpin(s->ten[v], 0, HS_ALL);
}

/* Copy a chunk at a time through pins of the value's tensor (constants
 * stay in the graph). */
static int rt_copy(struct hp_session *ss, int v, uint64_t offset, uint64_t len, void *mem, int write)
{
	struct hp_rt *s = ss->state;
	uint64_t cs = hs_chunk_size(s->store);
	unsigned char *m = mem;

	if (state_torn(s) < 0)
		return state_torn(s);
	if (!managed(s->g, v)) {
		if (write)
			return hp_error(HP_EUSAGE, "%s: value '%s' cannot be written (not owned by the session)",
					s->g->path, s->g->values[v].name);
		if (!s->g->values[v].data)
			return hp_error(HP_EUSAGE, "%s: value '%s' is not held by the session", s->g->path,
					s->g->values[v].name);
		memcpy(mem, (const unsigned char *)s->g->values[v].data + offset, len);
		return 0;
	}
	if (!s->ten[v])
		return hp_error(HP_EUSAGE, "%s: value '%s' is not held by the session", s->g->path, s->g->values[v].name);
	int k = snap_slot(s, v);
	if (k >= 0 && write)
		s->snap[k].gen = 0;
	if (k >= 0 && !write && s->run_gen && s->snap[k].gen == s->run_gen && offset + len <= vbytes(s->g, v)) {
		memcpy(mem, s->snap[k].b + offset, len); /* the last run's bytes, copied aside (SNAP_BYTES) */
		return 0;
	}
	while (len) {
		uint64_t c = offset / cs, in = offset - c * cs, n = cs - in < len ? cs - in : len;
		unsigned char *p;
		int rc = hs_pin(s->ten[v], c, 1, write ? HS_PIN_WRITE : HS_PIN_READ, (void **)&p);
		if (rc == -EHOSTDOWN) /* a daemon died with it (a checkpoint's read): the store's verdict */
			return verdict(s, hp_error_prefix(rc, "value '%s'", s->g->values[v].name));
		if (rc < 0)
			return hp_error_prefix(rc, "value '%s'", s->g->values[v].name);
		if (write)
			memcpy(p + in, m, n);
		else
			memcpy(m, p + in, n);
		hs_unpin(s->ten[v], c, 1);
		m += n;
		offset += n;
		len -= n;
	}
	return 0;
}

static void rt_stats(const struct hp_session *ss, struct hp_run_info *r, uint64_t *peak)
{
	const struct hp_rt *s = ss->state;
	struct hp_net_stats st;

	*peak = s->plan->peak_bytes;
	if (!r)
		return;
	hp_net_stats(s->net, &st);
	r->kernel_ms = st.busy_ms;
	r->stall_ms = st.stall_ms;
	r->kernels = st.fired[HP_TR_KERNEL] + st.fired[HP_TR_RECOMPUTE];
	r->loads = st.fired[HP_TR_LOAD];
	r->writebacks = st.fired[HP_TR_WRITEBACK];
	r->evictions = st.fired[HP_TR_EVICT];
	r->drops = st.fired[HP_TR_DROP];
	r->workers = s->opts.workers > 0 ? s->opts.workers : 1;
	r->io_threads = s->nio;
	r->transitions = hp_net_transitions(s->net);
	r->bytes_loaded = st.bytes_loaded;
	r->bytes_written = s->run_written;
	r->tier_peak = hs_store_tier_peak(s->store, HS_TIER_ANY);
}

static void rt_destroy(struct hp_session *ss)
{
	struct hp_rt *s = ss->state;

	if (!s)
		return;
	hp_net_destroy(s->net);
	s->net = NULL;
	for (int w = s->own_pool0 ? 0 : 1; s->pools && w < s->workers; w++)
		hp_pool_destroy(s->pools[w]);
	free(s->pools);
	if (s->ten)
		for (int v = 0; v < s->g->nvalues; v++)
			if (s->ten[v])
				hs_tensor_drop(s->ten[v]);
	for (int k = 0; k < s->nspare; k++)
		hs_tensor_drop(s->spare[k]);
	free(s->ten);
	free(s->spare);
	free(s->sreaders);
	free(s->sleft);
	free(s->snap);
	free(s->snap_of);
	for (int w = 0; w < s->nscratch; w++)
		if (s->scratch[w]) {
			hs_unpin(s->scratch[w], 0, HS_ALL);
			hs_tensor_drop(s->scratch[w]);
		}
	free(s->scratch);
	free(s->scratch_ptr);
	hp_plan_free(s->plan);
	hs_store_close(s->store);
	pthread_mutex_destroy(&s->spare_mu);
	free(s);
	ss->state = NULL;
}

const struct hp_executor hp_exec_ooc = {
	.name = "out of core",
	.create = rt_create,
	.set_input = rt_set_input,
	.run = rt_run,
	.get_output = rt_get_output,
	.copy = rt_copy,
	.stats = rt_stats,
	.destroy = rt_destroy,
};

struct hs_store *hp_session_store(const struct hp_session *ss)
{
	return ss->ex == &hp_exec_ooc ? ((const struct hp_rt *)ss->state)->store : NULL;
}

int hp_session_set_ahead(struct hp_session *ss, uint64_t bytes, hp_ahead_fn fn, void *arg)
{
	struct hp_rt *s = ss->ex == &hp_exec_ooc ? ss->state : NULL;
	const struct hp_plan *p = s ? s->plan : NULL;
	int k = 0;

	if (!s)
		return hp_error(HP_EUNSUPPORTED, "read-ahead: the session runs in core");
	if (p && p->room_from)
		while (k < p->nsteps && p->room_from[k] < bytes)
			k++;
	s->ahead_fn = fn;
	s->ahead_arg = arg;
	s->ahead_step = p ? k : 0;
	/* after the last step nothing of this run needs room: what the store
	 * has free then (the next run's loads come after the gathers) */
	s->ahead_room = p && p->room_from && k < p->nsteps ? p->room_from[k] : UINT64_MAX;
	atomic_store(&s->ahead_done, 0);
	return 0;
}

uint64_t hp_session_tier_kept(const struct hp_session *s, int tier)
{
	return hs_store_tier_kept(hp_session_store(s), tier);
}

int hp_session_readahead_stats(const struct hp_session *s, struct hs_readahead_stats *out)
{
	struct hs_store *st = hp_session_store(s);

	return st ? hs_store_readahead_stats(st, out) : -ENOENT;
}

int hp_session_frame_stats(const struct hp_session *s, struct hs_frame_stats *out)
{
	struct hs_store *st = hp_session_store(s);

	if (!st)
		return -ENOENT;
	return hs_store_frame_stats(st, out);
}

int hp_session_store_stats(const struct hp_session *s, struct hs_store_stats *out)
{
	struct hs_store *st = hp_session_store(s);

	if (!st)
		return -ENOENT;
	return hs_store_stats(st, out);
}
