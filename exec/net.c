/* The task net: compiled from the plan, fired by workers.  See net.h. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "hpdlf/error.h"
#include "exec/net.h"
#include "exec/trace.h"

enum { CL_COMPUTE = 0, CL_IO = 1, CL_ANY = 2 };
enum { ST_WAIT = 0, ST_READY, ST_RUNNING, ST_DONE };

struct tr {
	uint8_t kind;
	uint8_t reconcile;      /* prologue: need/release depend on what is held */
	int value;              /* LOAD/WRITEBACK/EVICT/DROP */
	uint32_t first, nchunks; /* LOAD: chunk range (nchunks 0: all) */
	int step;               /* KERNEL/RECOMPUTE/COMM: handed to its fire op */
	int64_t need, release;  /* budget tokens taken when granted / given back when fired */
	int out_begin, nout;    /* KERNEL/RECOMPUTE/COMM: values it makes resident, in outs[] */
	int unheld;             /* in place: the input whose bytes it took over, else -1 */
	int nunheld;            /* COMM in place, or a kernel's `over`: the inputs it took
				 * over, in outs[] after its outputs */
	int ndeps;
	int succ_begin;         /* successors: succ[succ_begin .. tr[i+1].succ_begin) */
};

struct heap {
	int *a;
	int n;
};

/* A batch of I/O in flight without an I/O thread (inline I/O). */
#define MAX_FLIGHTS 32
struct flight {
	void *h;
	int deferred;           /* not started yet: write-backs only (launch) */
	uint64_t born;          /* kernels fired when it was deferred */
	int m;
	int idx[HP_NET_IO_BATCH];
	struct hp_net_io io[HP_NET_IO_BATCH];
};

/* A thread's own wake-up: it waits alone on cv until a waker takes it off
 * its class's idle stack and sets woken (wake_one).  Each wake-up goes to
 * one thread that is waiting, and is counted off idle at once.  (One
 * condition variable per class, signalled again while the threads it had
 * woken had not run yet, made pthread_cond_signal wait for them to leave
 * its group: ResNet-18 trained at half its peak, 4 I/O threads on 2 busy
 * cores, its compute worker spent 14-79 ms a step of 150-350 in
 * make_ready's signals, and was switched out ~180 times a step there.) */
struct waiter {
	pthread_cond_t cv;
	int woken;
};

struct hp_net {
	const struct hp_net_ops *ops;
	void *arg;
	struct hp_trace *trace;
	int nvalues;
	uint64_t budget;
	int ntr, nsucc, nouts;
	struct tr *tr;
	int *succ;
	int *outs;              /* the transitions' outputs (tr.out_begin, tr.nout) */
	uint64_t *vsize;        /* per value: budget bytes (0: not managed) */
	char *held;             /* per value: resident as far as the net's tokens go */
	/* run state, under mu */
	pthread_mutex_t mu;
	struct waiter *wt;      /* per thread: compute workers, then I/O threads */
	int *idle_at[2];        /* idle compute workers, idle I/O threads: their waiters, a stack */
	int idle[2];            /* how many wait on each, not woken yet */
	int waking[2];          /* how many were woken and have not run yet */
	int *pend, npend;       /* waiters woken under mu, signalled once it is released (unlock) */
	int *deps_left;
	char *state;
	int64_t *need;
	int64_t free_tokens;
	int grant, ndone, nrunning, err, gen, quit;
	int kcur;               /* lowest kernel transition not done yet */
	char errmsg[512];
	struct heap ready[3];
	/* workers */
	int nworkers, nio;
	int inline_io;          /* no I/O threads: the compute worker issues I/O (net.h) */
	struct flight *fl;      /* its batches in flight, oldest first */
	int nfl;
	uint64_t kfired;        /* kernels the inline worker fired (deferred write-backs' age) */
	uint64_t reserved;      /* budget held apart: the workers' kernel scratch */
	pthread_t *threads;
	int nthreads;
	struct hp_net_stats st;
	double run_t0;
};

static double now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* ---- a min-heap of transition indices (fire in plan order) ---- */

static void heap_push(struct heap *h, int x)
{
	int i = h->n++;

	while (i > 0 && h->a[(i - 1) / 2] > x) {
		h->a[i] = h->a[(i - 1) / 2];
		i = (i - 1) / 2;
	}
	h->a[i] = x;
}

static int heap_pop(struct heap *h)
{
	int top = h->a[0], x = h->a[--h->n], i = 0;

	for (;;) {
		int c = 2 * i + 1;
		if (c >= h->n)
			break;
		if (c + 1 < h->n && h->a[c + 1] < h->a[c])
			c++;
		if (h->a[c] >= x)
			break;
		h->a[i] = h->a[c];
		i = c;
	}
	if (h->n)
		h->a[i] = x;
	return top;
}

/* ---- compiling the plan order ---- */

struct builder {
	struct hp_net *n;
	const struct hp_net_desc *d;
	int cap, capouts;
	int *efrom, *eto, nedges, capedges;
	int *maker, *remover;   /* per value: transition index or -1 */
	int *maker_first;       /* a load split in parts: maker_first..maker */
	int **readers, *nreaders, *capreaders;
	char *res;              /* residency as the walk goes */
	int last_ordered;       /* the latest ordered transition, -1 */
	int at;                 /* the entry being added */
};

static int managed(const struct hp_net *n, int v)
{
	return v >= 0 && v < n->nvalues && n->vsize[v] > 0;
}

static int edge(struct builder *b, int from, int to)
{
	if (from < 0 || from == to)
		return 0;
	if (b->nedges == b->capedges) {
		int cap = b->capedges ? 2 * b->capedges : 1024;
		int *f = realloc(b->efrom, (size_t)cap * sizeof *f), *t;
		if (!f)
			return -ENOMEM;
		b->efrom = f;
		t = realloc(b->eto, (size_t)cap * sizeof *t);
		if (!t)
			return -ENOMEM;
		b->eto = t;
		b->capedges = cap;
	}
	b->efrom[b->nedges] = from;
	b->eto[b->nedges++] = to;
	return 0;
}

static int add_reader(struct builder *b, int v, int t)
{
	if (b->nreaders[v] == b->capreaders[v]) {
		int cap = b->capreaders[v] ? 2 * b->capreaders[v] : 4;
		int *r = realloc(b->readers[v], (size_t)cap * sizeof *r);
		if (!r)
			return -ENOMEM;
		b->readers[v] = r;
		b->capreaders[v] = cap;
	}
	b->readers[v][b->nreaders[v]++] = t;
	return 0;
}

static int new_tr(struct builder *b, int kind, int v, int step)
{
	struct hp_net *n = b->n;

	if (n->ntr == b->cap) {
		int cap = 2 * b->cap;
		struct tr *t = realloc(n->tr, ((size_t)cap + 1) * sizeof *t);
		if (!t)
			return -ENOMEM;
		n->tr = t;
		b->cap = cap;
	}
	n->tr[n->ntr] = (struct tr){ .kind = (uint8_t)kind, .value = v, .step = step, .unheld = -1 };
	return n->ntr++;
}

/* Arcs from whatever last made v resident (all parts of a split load). */
static int arcs_made(struct builder *b, int t, int v)
{
	int rc = 0;

	if (b->maker[v] < 0)
		return 0;
	for (int k = b->maker_first[v]; k <= b->maker[v] && rc == 0; k++)
		rc = edge(b, k, t);
	return rc;
}

static void set_maker(struct builder *b, int v, int first, int last)
{
	b->maker_first[v] = first;
	b->maker[v] = last;
	b->nreaders[v] = 0;
}

/* v leaves DRAM (write-back, eviction, drop): after it was made resident
 * and after every kernel that read it since. */
static int arcs_remove(struct builder *b, int t, int v)
{
	int rc = arcs_made(b, t, v);

	for (int i = 0; i < b->nreaders[v] && rc == 0; i++)
		rc = edge(b, b->readers[v][i], t);
	b->nreaders[v] = 0;
	b->remover[v] = t;
	if (b->res[v])
		b->n->tr[t].release = (int64_t)b->n->vsize[v];
	b->res[v] = 0;
	return rc;
}

/* A load of a large tensor is split in chunk ranges, one per I/O queue:
 * the store reads a file-backed tensor one chunk at a time per call. */
static int add_load(struct builder *b, int v)
{
	uint64_t nch = b->d->nchunks && b->d->nchunks[v] ? b->d->nchunks[v] : 1, cs = b->d->chunk;
	int q = b->n->nio > 0 ? b->n->nio : 1; /* inline I/O: one submission reads them all */
	int parts = nch >= 2 && !b->res[v] ? (nch < (uint64_t)q ? (int)nch : q) : 1;
	int first = b->n->ntr, rc = 0;
	uint64_t at = 0;

	for (int k = 0; k < parts && rc == 0; k++) {
		uint64_t n = nch / (uint64_t)parts + ((uint64_t)k < nch % (uint64_t)parts);
		int t = new_tr(b, HP_TR_LOAD, v, 0);
		if (t < 0)
			return t;
		if (parts > 1) {
			uint64_t end = (at + n) * cs < b->n->vsize[v] ? (at + n) * cs : b->n->vsize[v];
			b->n->tr[t].first = (uint32_t)at;
			b->n->tr[t].nchunks = (uint32_t)n;
			b->n->tr[t].need = (int64_t)(end - at * cs);
		} else if (!b->res[v]) {
			b->n->tr[t].need = (int64_t)b->n->vsize[v];
		}
		at += n;
		rc = edge(b, b->remover[v], t);
	}
	b->res[v] = 1;
	set_maker(b, v, first, b->n->ntr - 1);
	return rc;
}

/* A write-back of a large resident tensor is split in chunk ranges too,
 * written one after another (each part after the one before it), each
 * giving back its own bytes when it lands: a load granted the room it
 * frees starts once the first parts are out instead of after the whole
 * tensor.  (ResNet-18 trained at 25% of its peak: 9.c1's 4.5-MiB weight
 * load waited for 9.c2's whole 9-MiB gradient write-back, with only 2-3
 * ms of kernels between.)  Parts written side by side would share the
 * device and land together, freeing nothing early; so would parts in
 * one batch, which completes as a whole (batchable leaves them out).
 * Parts are at least d->wb_part bytes: smaller ones are not worth a
 * transition each.  The chunks are counted from the value's size, not
 * d->nchunks: a gradient's tensor is made by the first run, after the net
 * (its nchunks is 1), and every tensor is cut in chunks of d->chunk. */
static uint64_t wb_chunks(const struct builder *b, int v)
{
	return b->d->chunk ? (b->n->vsize[v] + b->d->chunk - 1) / b->d->chunk : 1;
}

/* A load comes after the write-back at entry `at` before the next kernel:
 * the planner put it there for the room the write-back frees, and it
 * waits for it.  Only such write-backs are split: a part's freed frames
 * are less than the load's tensor, which then finds no run of frames
 * whole and is mapped in pieces (ResNet-18 trained at 50%, every large
 * write-back split: 46% more mremaps and 2-5% more CPU, no stall to
 * save). */
static int load_follows(const struct builder *b)
{
	for (int i = b->at + 1; i < b->d->nentries; i++) {
		const struct hp_net_entry *e = &b->d->entries[i];
		if (e->kind == HP_TR_LOAD && !e->reconcile)
			return 1;
		if (e->kind == HP_TR_KERNEL || e->kind == HP_TR_RECOMPUTE || e->kind == HP_TR_COMM)
			return 0;
	}
	return 0;
}

static int wb_parts(const struct builder *b, int v)
{
	uint64_t nch = wb_chunks(b, v);
	uint64_t parts = b->d->wb_part ? b->n->vsize[v] / b->d->wb_part : 1;

	if (b->n->nio < 1 || !b->res[v] || nch < 2 || !load_follows(b)) /* inline I/O: one submission writes it all */
		return 1;
	parts = parts < nch ? parts : nch;
	parts = parts < (uint64_t)b->n->nio ? parts : (uint64_t)b->n->nio;
	return parts > 1 ? (int)parts : 1;
}

static int add_writeback(struct builder *b, int v)
{
	uint64_t nch = wb_chunks(b, v), cs = b->d->chunk, at = 0;
	int parts = wb_parts(b, v), t = -1, rc = 0;

	for (int k = 0; k < parts && rc == 0; k++) {
		uint64_t n = nch / (uint64_t)parts + ((uint64_t)k < nch % (uint64_t)parts);
		uint64_t end = (at + n) * cs < b->n->vsize[v] ? (at + n) * cs : b->n->vsize[v];
		int prev = t;
		t = new_tr(b, HP_TR_WRITEBACK, v, 0);
		if (t < 0)
			return t;
		if (parts > 1) {
			b->n->tr[t].first = (uint32_t)at;
			b->n->tr[t].nchunks = (uint32_t)n;
		}
		if (k == 0) {
			rc = arcs_remove(b, t, v);
		} else {
			rc = edge(b, prev, t);
			b->remover[v] = t;
		}
		if (parts > 1)
			b->n->tr[t].release = (int64_t)(end - at * cs);
		at += n;
	}
	return rc;
}

static int add_io(struct builder *b, int kind, int v)
{
	int t;

	if (kind == HP_TR_LOAD)
		return add_load(b, v);
	if (kind == HP_TR_WRITEBACK)
		return add_writeback(b, v);
	t = new_tr(b, kind, v, 0);
	return t < 0 ? t : arcs_remove(b, t, v);
}

static int add_out(struct builder *b, int v)
{
	struct hp_net *n = b->n;

	if (n->nouts == b->capouts) {
		int cap = b->capouts ? 2 * b->capouts : 256;
		int *o = realloc(n->outs, (size_t)cap * sizeof *o);
		if (!o)
			return -ENOMEM;
		n->outs = o;
		b->capouts = cap;
	}
	n->outs[n->nouts++] = v;
	return 0;
}

/* In place: transition t writes value `out` over `in`, after every other
 * reader of it; in's budget passes to out. */
static int take_over(struct builder *b, int t, int in, int out)
{
	int rc = arcs_made(b, t, in);

	for (int i = 0; i < b->nreaders[in] && rc == 0; i++)
		rc = edge(b, b->readers[in][i], t);
	b->nreaders[in] = 0;
	b->remover[in] = t;
	b->res[in] = 0;
	b->res[out] = 1;
	set_maker(b, out, t, t);
	return rc;
}

/* A kernel (or a recompute, or a communication): reads its inputs where
 * they were made resident, writes its outputs after their last readers. */
static int add_kernel(struct builder *b, const struct hp_net_entry *e)
{
	struct hp_net *n = b->n;
	int t = new_tr(b, e->kind, -1, e->step), rc = 0;

	if (t < 0)
		return t;
	n->tr[t].need = n->tr[t].release = (int64_t)e->workspace;
	n->tr[t].out_begin = n->nouts;
	if (e->ordered) {
		rc = edge(b, b->last_ordered, t);
		b->last_ordered = t;
	}
	for (int j = 0; j < e->nin && rc == 0; j++) {
		int v = e->in[j];
		if (!managed(n, v))
			continue;
		rc = arcs_made(b, t, v);
		if (rc == 0 && (b->nreaders[v] == 0 || b->readers[v][b->nreaders[v] - 1] != t))
			rc = add_reader(b, v, t);
	}
	if (e->inplace && rc == 0 && e->kind != HP_TR_COMM) {
		rc = take_over(b, t, e->in[0], e->out[0]);
		n->tr[t].unheld = e->in[0];
	}
	for (int i = 1; e->inplace && e->kind == HP_TR_COMM && i < e->nin && rc == 0; i++)
		rc = take_over(b, t, e->in[i], e->out[i]);
	for (int o = 0; e->over && o < e->nout && rc == 0; o++)
		if (e->over[o] >= 0)
			rc = take_over(b, t, e->in[e->over[o]], e->out[o]);
	for (int o = 0; o < e->nout && rc == 0; o++) {
		int v = e->out[o];
		if (!managed(n, v))
			continue;
		rc = add_out(b, v);
		if (rc < 0 || b->maker[v] == t)
			continue;
		rc = edge(b, b->remover[v], t);
		for (int i = 0; i < b->nreaders[v] && rc == 0; i++)
			rc = edge(b, b->readers[v][i], t);
		if (!b->res[v])
			n->tr[t].need += (int64_t)n->vsize[v];
		b->res[v] = 1;
		set_maker(b, v, t, t);
	}
	n->tr[t].nout = n->nouts - n->tr[t].out_begin;
	for (int i = 1; e->inplace && e->kind == HP_TR_COMM && i < e->nin && rc == 0; i++, n->tr[t].nunheld++)
		rc = add_out(b, e->in[i]);
	for (int o = 0; e->over && o < e->nout && rc == 0; o++)
		if (e->over[o] >= 0) {
			rc = add_out(b, e->in[e->over[o]]);
			n->tr[t].nunheld++;
		}
	return rc;
}

/* Prologue: persistent values the steady state does not keep resident are
 * written back, those it does are loaded; no arcs (the previous run is
 * over), their tokens depend on what is held when a run starts. */
static int add_reconcile(struct builder *b, const struct hp_net_entry *e)
{
	int v = e->value, t = new_tr(b, e->kind, v, 0);

	if (t < 0)
		return t;
	b->n->tr[t].reconcile = 1;
	if (e->kind == HP_TR_LOAD)
		set_maker(b, v, t, t);
	else
		b->remover[v] = t;
	b->res[v] = e->kind == HP_TR_LOAD;
	return 0;
}

static int add_entry(struct builder *b, const struct hp_net_entry *e)
{
	switch (e->kind) {
	case HP_TR_KERNEL:
	case HP_TR_RECOMPUTE:
	case HP_TR_COMM:
		return add_kernel(b, e);
	case HP_TR_DROP:
		return managed(b->n, e->value) && b->res[e->value] ? add_io(b, HP_TR_DROP, e->value) : 0;
	default:
		return e->reconcile ? add_reconcile(b, e) : add_io(b, e->kind, e->value);
	}
}

/* Successor lists (CSR) and static in-degrees from the edge list. */
static int build_csr(struct builder *b)
{
	struct hp_net *n = b->n;
	int *fill;

	n->succ = malloc(((size_t)b->nedges + 1) * sizeof *n->succ);
	fill = calloc((size_t)n->ntr + 2, sizeof *fill);
	if (!n->succ || !fill) {
		free(fill);
		return -ENOMEM;
	}
	for (int e = 0; e < b->nedges; e++) {
		fill[b->efrom[e] + 1]++;
		n->tr[b->eto[e]].ndeps++;
	}
	for (int i = 0; i < n->ntr; i++)
		fill[i + 1] += fill[i];
	for (int i = 0; i <= n->ntr; i++)
		n->tr[i].succ_begin = fill[i];
	for (int e = 0; e < b->nedges; e++)
		n->succ[fill[b->efrom[e]]++] = b->eto[e];
	n->nsucc = b->nedges;
	free(fill);
	return 0;
}

static void builder_free(struct builder *b, int nv)
{
	free(b->efrom);
	free(b->eto);
	free(b->maker);
	free(b->maker_first);
	free(b->remover);
	if (b->readers)
		for (int v = 0; v < nv; v++)
			free(b->readers[v]);
	free(b->readers);
	free(b->nreaders);
	free(b->capreaders);
	free(b->res);
}

static int compile(struct hp_net *n, const struct hp_net_desc *d)
{
	size_t nv = (size_t)d->nvalues + 1;
	struct builder b = { .n = n, .d = d, .cap = d->nentries + 64, .last_ordered = -1 };
	int rc = -ENOMEM;

	n->tr = malloc(((size_t)b.cap + 1) * sizeof *n->tr);
	b.maker = malloc(nv * sizeof *b.maker);
	b.maker_first = malloc(nv * sizeof *b.maker_first);
	b.remover = malloc(nv * sizeof *b.remover);
	b.readers = calloc(nv, sizeof *b.readers);
	b.nreaders = calloc(nv, sizeof *b.nreaders);
	b.capreaders = calloc(nv, sizeof *b.capreaders);
	b.res = calloc(nv, 1);
	if (!n->tr || !b.maker || !b.maker_first || !b.remover || !b.readers || !b.nreaders || !b.capreaders || !b.res)
		goto out;
	for (int v = 0; v < d->nvalues; v++)
		b.maker[v] = b.maker_first[v] = b.remover[v] = -1;
	rc = 0;
	for (int i = 0; i < d->nentries && rc == 0; i++)
		b.at = i, rc = add_entry(&b, &d->entries[i]);
	if (rc == 0)
		rc = build_csr(&b);
out:
	builder_free(&b, d->nvalues);
	return rc < 0 ? hp_error(rc, "out of memory compiling the task net") : 0;
}

/* ---- firing ---- */

static int is_compute(int kind)
{
	return kind == HP_TR_KERNEL || kind == HP_TR_RECOMPUTE;
}

static int tr_class(const struct tr *t)
{
	return is_compute(t->kind) ? CL_COMPUTE : t->kind == HP_TR_DROP ? CL_ANY : CL_IO;
}

/* Wake the thread of class cls that went idle last (its caches are the
 * warmest), if one is idle (lock held).  It is signalled when the lock is
 * released (unlock): signalled under it, it ran on the waker's core
 * only to wait for the lock the waker still held, and woke again at the
 * unlock (two switches, where one will do). */
static void wake_one(struct hp_net *n, int cls)
{
	int k;

	if (!n->idle[cls])
		return;
	k = n->idle_at[cls][--n->idle[cls]];
	n->wt[k].woken = 1;
	n->waking[cls]++;
	n->st.wakes[cls]++;
	n->pend[n->npend++] = k;
}

/* Release the lock, then signal the waiters woken under it.  A waiter that
 * woke by itself meanwhile, ran and waits again takes the signal as a
 * spurious wake-up (woken is 0 again). */
static void unlock(struct hp_net *n)
{
	int k[n->npend + 1], m = n->npend;

	if (m)
		memcpy(k, n->pend, (size_t)m * sizeof *k);
	n->npend = 0;
	pthread_mutex_unlock(&n->mu);
	for (int j = 0; j < m; j++)
		pthread_cond_signal(&n->wt[k[j]].cv);
}

/* The waiters woken under the lock signalled now, before the caller waits
 * (lock held). */
static void signal_pending(struct hp_net *n)
{
	for (int j = 0; j < n->npend; j++)
		pthread_cond_signal(&n->wt[n->pend[j]].cv);
	n->npend = 0;
}

static void wake_class(struct hp_net *n, int cls)
{
	while (n->idle[cls])
		wake_one(n, cls);
}

static int batchable(const struct hp_net *n, int i);

/* Make transition i ready and wake one idle thread that may fire it
 * (lock held).  A drop, or I/O before the next kernel while every I/O
 * thread is busy, wakes a compute worker when one idles (it would wait for
 * it anyway), else an I/O thread: only threads with work are woken.  A
 * load or write-back made ready while an I/O thread woken before has not
 * run yet wakes nobody: that thread takes it in its batch (fire_batch),
 * and a thread woken for each had found the heap empty, a context switch
 * each that took a core from the kernels (ResNet-18 trained at 25% of its
 * peak on 2 cores: ~750 more switches a step than in core).  A thread
 * that leaves I/O behind in the heap wakes the next (share it). */
static void make_ready(struct hp_net *n, int i)
{
	int cls = tr_class(&n->tr[i]);

	n->state[i] = ST_READY;
	heap_push(&n->ready[cls], i);
	if (cls == CL_IO && n->waking[CL_IO] && batchable(n, i))
		return; /* the I/O thread woken before takes it in its batch */
	if (cls == CL_ANY || (cls == CL_IO && i < n->kcur && !n->idle[CL_IO]))
		cls = n->idle[CL_COMPUTE] ? CL_COMPUTE : CL_IO;
	wake_one(n, cls);
}

static void wake_all(struct hp_net *n)
{
	wake_class(n, CL_COMPUTE);
	wake_class(n, CL_IO);
}

/* Grant budget tokens in plan order as far as they go (lock held).  A
 * transition that needs none is granted even when the tokens are below
 * zero: a run starts below zero when the inputs set before it (the next
 * batch) sit beside values the previous run left resident, and the
 * prologue's write-backs that give those back need nothing (an LSTM whose
 * smallest budget is its input's first Slice stopped at step 1 with
 * "-4096 are free"). */
static void grant_more(struct hp_net *n)
{
	while (n->grant < n->ntr && !n->err) {
		int i = n->grant;
		if (n->need[i] > 0 && n->need[i] > n->free_tokens)
			break;
		n->free_tokens -= n->need[i];
		if (n->deps_left[i] == 0)
			make_ready(n, i);
		n->grant++;
	}
}

static int run_done(const struct hp_net *n)
{
	return n->ndone == n->ntr || (n->err && n->nrunning == 0);
}

static void complete(struct hp_net *n, int i, int rc)
{
	const struct tr *t = &n->tr[i];

	n->state[i] = ST_DONE;
	n->ndone++;
	n->nrunning--;
	if (rc < 0 && !n->err) {
		n->err = rc;
		snprintf(n->errmsg, sizeof n->errmsg, "%s", hp_errmsg()[0] ? hp_errmsg() : hp_strerror(rc));
	}
	n->free_tokens += !t->reconcile ? t->release
				 : (t->kind != HP_TR_LOAD && n->held[t->value] ? (int64_t)n->vsize[t->value] : 0);
	if (t->value < 0) {
		for (int o = 0; o < t->nout; o++)
			n->held[n->outs[t->out_begin + o]] = 1;
		if (t->unheld >= 0)
			n->held[t->unheld] = 0;
		for (int k = 0; k < t->nunheld; k++)
			n->held[n->outs[t->out_begin + t->nout + k]] = 0;
	} else {
		n->held[t->value] = t->kind == HP_TR_LOAD;
	}
	for (int k = t->succ_begin; k < n->tr[i + 1].succ_begin; k++) {
		int j = n->succ[k];
		if (--n->deps_left[j] == 0 && j < n->grant && n->state[j] == ST_WAIT)
			make_ready(n, j);
	}
	while (n->kcur < n->ntr && (!is_compute(n->tr[n->kcur].kind) || n->state[n->kcur] == ST_DONE))
		n->kcur++;
	grant_more(n);
	if (run_done(n)) /* the calling thread returns */
		wake_class(n, CL_COMPUTE);
}

static int fire(struct hp_net *n, int i, int worker, int cls)
{
	const struct tr *t = &n->tr[i];
	int lane = cls == CL_COMPUTE ? HP_LANE_COMPUTE + worker : HP_LANE_IO + worker;

	switch (t->kind) {
	case HP_TR_KERNEL:
		return n->ops->fire_kernel(n->arg, t->step, worker, lane);
	case HP_TR_RECOMPUTE:
		return n->ops->fire_recompute(n->arg, t->step, worker, lane);
	case HP_TR_COMM:
		return n->ops->fire_comm(n->arg, t->step, lane);
	default:
		return n->ops->fire_io(n->arg, t->kind, t->value, t->first, t->nchunks, lane);
	}
}

/* The heap a worker takes its next transition from, NULL if none (lock
 * held).  Drops go to whichever thread is free first.  A compute worker
 * with no kernel ready fires the loads and write-backs that come before
 * the next kernel itself when no I/O thread is free to: they are on the
 * critical path.  (Loads split in parts stay spread over the I/O threads.) */
static struct heap *pick(struct hp_net *n, int cls)
{
	struct heap *k = &n->ready[cls], *any = &n->ready[CL_ANY], *io = &n->ready[CL_IO];

	if (n->err)
		return NULL;
	if (cls == CL_IO)
		return any->n && (!io->n || any->a[0] < io->a[0]) ? any : io->n ? io : NULL;
	if (n->inline_io && io->n) /* submitted at once, in flight while kernels run */
		return io;
	if (any->n && (!k->n || any->a[0] < k->a[0]))
		return any;
	if (k->n)
		return k;
	if (io->n && io->a[0] < n->kcur && !n->idle[CL_IO])
		return io;
	return NULL;
}

/* A load or write-back that may join a batch (not the prologue's
 * reconciliation, whose needs depend on what is resident). */
static int batchable(const struct hp_net *n, int i)
{
	const struct tr *t = &n->tr[i];

	return n->ops->fire_io_batch && (t->kind == HP_TR_LOAD || (t->kind == HP_TR_WRITEBACK && !t->nchunks)) &&
	       !t->reconcile;
}

/* Fire i with the batchable transitions next in h (lock held on entry and
 * exit, released while they run).  Small chunks are where this pays: one
 * thread waking, one submission and one wait for many requests at the
 * device's queue depth, where one each kept ~4 in flight (lenet under a
 * tight budget: ~300 I/O transitions of <= 16 KiB a step, two thirds of
 * them ready while another was). */
static void fire_batch(struct hp_net *n, struct heap *h, int i, int worker, int cls)
{
	struct hp_net_io io[HP_NET_IO_BATCH];
	int idx[HP_NET_IO_BATCH], m = 0;

	idx[m++] = i;
	while (m < HP_NET_IO_BATCH && h->n && batchable(n, h->a[0]))
		idx[m++] = heap_pop(h);
	if (h->n && !n->waking[CL_IO]) /* more than one batch, or behind another kind: share it */
		wake_one(n, CL_IO);
	for (int k = 0; k < m; k++) {
		const struct tr *t = &n->tr[idx[k]];
		io[k] = (struct hp_net_io){ .kind = t->kind, .value = t->value, .first = t->first,
					    .nchunks = t->nchunks };
		n->state[idx[k]] = ST_RUNNING;
		n->nrunning++;
	}
	unlock(n);
	n->ops->fire_io_batch(n->arg, io, m, cls == CL_COMPUTE ? HP_LANE_COMPUTE + worker : HP_LANE_IO + worker);
	pthread_mutex_lock(&n->mu);
	for (int k = 0; k < m; k++) {
		n->st.fired[io[k].kind]++;
		if (io[k].kind == HP_TR_LOAD && io[k].rc == 0)
			n->st.bytes_loaded += (uint64_t)n->need[idx[k]];
		complete(n, idx[k], io[k].rc);
	}
}

/* Flight f is done: its transitions complete (lock held). */
static void land(struct hp_net *n, struct flight *f)
{
	for (int k = 0; k < f->m; k++) {
		n->st.fired[f->io[k].kind]++;
		if (f->io[k].kind == HP_TR_LOAD && f->io[k].rc == 0)
			n->st.bytes_loaded += (uint64_t)n->need[f->idx[k]];
		complete(n, f->idx[k], f->io[k].rc);
	}
}

/* Start the deferred flights, oldest first, under one plug (ops->io_plug:
 * their requests in one submission), landing any that finished at once
 * (lock held on entry and exit, released while starting). */
static void launch(struct hp_net *n)
{
	int any = 0, k = 0;

	for (int i = 0; i < n->nfl; i++)
		any |= n->fl[i].deferred;
	if (!any)
		return;
	unlock(n);
	if (n->ops->io_plug)
		n->ops->io_plug(n->arg, 1);
	for (int i = 0; i < n->nfl; i++) {
		struct flight *f = &n->fl[i];
		/* traced on the I/O lanes, one per batch in flight (their spans
		 * run from the submission to the reaping, across kernels) */
		if (f->deferred)
			f->h = n->ops->start_io_batch(n->arg, f->io, f->m, HP_LANE_IO + i);
	}
	if (n->ops->io_plug)
		n->ops->io_plug(n->arg, 0);
	pthread_mutex_lock(&n->mu);
	for (int i = 0; i < n->nfl; i++) {
		struct flight *f = &n->fl[i];
		if (f->deferred) {
			f->deferred = 0;
			if (!f->h) {
				land(n, f);
				continue;
			}
		}
		if (k != i)
			n->fl[k] = *f;
		k++;
	}
	n->nfl = k;
}

/* Poll the flights (wait: start the deferred ones and wait for the
 * oldest), landing those done (lock held on entry and exit, released
 * while polling).  Only the one compute worker of inline I/O calls this:
 * nobody else touches the flights. */
static void reap(struct hp_net *n, int wait, int worker)
{
	int k = 0;

	if (wait)
		launch(n); /* nothing else to do: what is waited for must be on its way */
	for (int i = 0; i < n->nfl; i++) {
		struct flight *f = &n->fl[i];
		if (f->deferred) {
			if (k != i)
				n->fl[k] = *f;
			k++;
			continue;
		}
		double t0 = now_ms(), u0 = hp_trace_now_us(n->trace);
		int w = wait && i == 0;
		unlock(n);
		int done = n->ops->io_batch_done(n->arg, f->h, f->io, f->m, w);
		pthread_mutex_lock(&n->mu);
		if (w) { /* the worker had nothing else to do */
			n->st.stall_ms += now_ms() - t0;
			if (n->trace)
				hp_trace_span(n->trace, HP_LANE_COMPUTE + worker, "stall", "stall", u0,
					      hp_trace_now_us(n->trace));
		}
		if (done)
			land(n, f);
		else if (k != i)
			n->fl[k++] = *f;
		else
			k++;
	}
	n->nfl = k;
}

/* Inline I/O: start i with the batchable transitions next in h, in flight
 * until reap lands it (lock held on entry and exit).  With ops->io_plug, a
 * batch of write-backs only waits (deferred) for the next batch with a
 * load, for the worker to wait, or DEFER_KERNELS kernels, and goes with
 * them in one submission: lenet at a quarter of its peak wrote back ~20
 * tiny gradients a step one io_uring_enter each, a device notify each.
 * Only small batches wait (DEFER_BYTES): a request's fixed cost is worth
 * saving there, while a large write-back's bandwidth and the budget it
 * frees are not worth delaying.  Nothing outside the net knows of a
 * deferred write-back: its value stays resident and dirty, its transition
 * running. */
#define DEFER_KERNELS 2
#define DEFER_BYTES (64u << 10)

static void start_batch(struct hp_net *n, struct heap *h, int i, int worker)
{
	struct flight *f;
	int wb_only = 1;
	uint64_t bytes = 0;

	while (n->nfl == MAX_FLIGHTS)
		reap(n, 1, worker);
	f = &n->fl[n->nfl];
	f->m = 0;
	f->idx[f->m++] = i;
	while (f->m < HP_NET_IO_BATCH && h->n && batchable(n, h->a[0]))
		f->idx[f->m++] = heap_pop(h);
	for (int k = 0; k < f->m; k++) {
		const struct tr *t = &n->tr[f->idx[k]];
		f->io[k] = (struct hp_net_io){ .kind = t->kind, .value = t->value, .first = t->first,
					       .nchunks = t->nchunks };
		wb_only &= t->kind == HP_TR_WRITEBACK;
		bytes += n->vsize[t->value];
		n->state[f->idx[k]] = ST_RUNNING;
		n->nrunning++;
	}
	f->h = NULL;
	f->deferred = 1;
	f->born = n->kfired;
	n->nfl++;
	if (!wb_only || bytes > DEFER_BYTES || !n->ops->io_plug)
		launch(n);
}

/* Before the inline worker fires a kernel: start deferred write-backs
 * that have waited DEFER_KERNELS kernels (lock held). */
static void launch_aged(struct hp_net *n)
{
	for (int i = 0; i < n->nfl; i++)
		if (n->fl[i].deferred && n->kfired - n->fl[i].born >= DEFER_KERNELS) {
			launch(n);
			return;
		}
}

/* A worker's loop (lock held on entry and exit): for one run (the calling
 * thread), or until the net is destroyed (the others: they sleep between
 * runs, and are woken one at a time as transitions of their class become
 * ready). */
/* Nothing runs, nothing is ready and the run is not done: the next grant
 * needs more tokens than can ever be free (values held from outside the
 * plan took them), so no transition will fire again.  The run ends with
 * an error instead of every worker sleeping forever. */
static int stuck(struct hp_net *n)
{
	if (n->nrunning || n->err || run_done(n))
		return 0;
	for (int c = 0; c < 3; c++)
		if (n->ready[c].n)
			return 0;
	n->err = HP_EBUDGET;
	snprintf(n->errmsg, sizeof n->errmsg,
		 "the planned run cannot go on: its transition %d of %d needs %lld bytes of the budget and %lld are free (%llu "
		 "of the %llu given are held apart or by values kept from before the run); this is a planning "
		 "error: please report it, and give a larger --budget meanwhile",
		 n->grant, n->ntr, (long long)(n->grant < n->ntr ? n->need[n->grant] : 0), (long long)n->free_tokens,
		 (unsigned long long)(n->budget - (uint64_t)(n->free_tokens > 0 ? n->free_tokens : 0)),
		 (unsigned long long)n->budget);
	return 1;
}

static void work(struct hp_net *n, int cls, int worker, int forever)
{
	while (forever ? !n->quit : !run_done(n)) {
		if (n->nfl && (reap(n, 0, worker), !forever && run_done(n)))
			break; /* its last flights landed */
		struct heap *h = pick(n, cls);
		if (!h && n->nfl) {
			reap(n, 1, worker);
			continue;
		}
		if (!h && !forever && stuck(n))
			break;
		if (!h) {
			double t0 = now_ms(), u0 = hp_trace_now_us(n->trace);
			int gen = n->gen;
			struct waiter *me = &n->wt[cls == CL_COMPUTE ? worker : n->nworkers + worker];
			me->woken = 0;
			n->idle_at[cls][n->idle[cls]++] = (int)(me - n->wt);
			signal_pending(n);
			while (!me->woken)
				pthread_cond_wait(&me->cv, &n->mu);
			n->waking[cls]--;
			if (cls == CL_COMPUTE && gen == n->gen) {
				n->st.stall_ms += now_ms() - t0;
				if (n->trace) /* where the compute worker waited */
					hp_trace_span(n->trace, HP_LANE_COMPUTE + worker, "stall", "stall", u0,
						      hp_trace_now_us(n->trace));
			}
			continue;
		}
		int i = heap_pop(h), rc;
		if (batchable(n, i) && n->inline_io) {
			start_batch(n, h, i, worker);
			continue;
		}
		if (batchable(n, i)) {
			fire_batch(n, h, i, worker, cls);
			continue;
		}
		if (h->n && (h != &n->ready[cls] || cls == CL_IO) && !n->waking[CL_IO])
			wake_one(n, CL_IO); /* more I/O: share it */
		if (n->inline_io && is_compute(n->tr[i].kind)) {
			launch_aged(n);
			n->kfired++;
		}
		n->state[i] = ST_RUNNING;
		n->nrunning++;
		unlock(n);
		double t0 = now_ms();
		rc = fire(n, i, worker, is_compute(n->tr[i].kind) ? CL_COMPUTE : cls);
		pthread_mutex_lock(&n->mu);
		n->st.fired[n->tr[i].kind]++;
		if (n->tr[i].kind == HP_TR_LOAD && rc == 0)
			n->st.bytes_loaded += (uint64_t)n->need[i];
		if (is_compute(n->tr[i].kind))
			n->st.busy_ms += now_ms() - t0;
		complete(n, i, rc);
	}
}

struct wargs {
	struct hp_net *n;
	int cls, worker;
};

static void *worker_main(void *arg)
{
	struct wargs *w = arg;
	struct hp_net *n = w->n;

	pthread_mutex_lock(&n->mu);
	work(n, w->cls, w->worker, 1);
	unlock(n);
	free(w);
	return NULL;
}

int hp_net_run(struct hp_net *n)
{
	int64_t held = 0;

	pthread_mutex_lock(&n->mu);
	memset(&n->st, 0, sizeof n->st);
	for (int v = 0; v < n->nvalues; v++)
		if (n->held[v])
			held += (int64_t)n->vsize[v];
	n->free_tokens = (int64_t)n->budget - (int64_t)n->reserved - held;
	for (int i = 0; i < n->ntr; i++) {
		const struct tr *t = &n->tr[i];
		n->deps_left[i] = t->ndeps;
		n->state[i] = ST_WAIT;
		n->need[i] = t->need;
		if (t->reconcile)
			n->need[i] = t->kind == HP_TR_LOAD && !n->held[t->value] ? (int64_t)n->vsize[t->value] : 0;
	}
	n->grant = n->ndone = n->nrunning = n->err = n->kcur = 0;
	while (n->kcur < n->ntr && !is_compute(n->tr[n->kcur].kind))
		n->kcur++;
	n->errmsg[0] = 0;
	for (int c = 0; c < 3; c++)
		n->ready[c].n = 0;
	n->gen++;
	grant_more(n);
	work(n, CL_COMPUTE, 0, 0);
	/* every worker is back waiting once run_done holds and nothing runs */
	int err = n->err;
	unlock(n);
	if (err)
		return hp_error(err, "%s", n->errmsg);
	return 0;
}

void hp_net_note_resident(struct hp_net *n, int v)
{
	pthread_mutex_lock(&n->mu);
	n->held[v] = 1;
	unlock(n);
}

/* Under the lock: a compute worker woken by the end of a run still adds
 * its wait to stall_ms after hp_net_run returned. */
void hp_net_stats(const struct hp_net *n, struct hp_net_stats *out)
{
	pthread_mutex_t *mu = (pthread_mutex_t *)&n->mu;

	pthread_mutex_lock(mu);
	*out = n->st;
	pthread_mutex_unlock(mu);
}

int hp_net_transitions(const struct hp_net *n)
{
	return n->ntr;
}

static int start_threads(struct hp_net *n)
{
	n->threads = calloc((size_t)(n->nworkers + n->nio), sizeof *n->threads);
	if (!n->threads)
		return -ENOMEM;
	for (int k = 0; k < n->nworkers - 1 + n->nio; k++) {
		struct wargs *w = malloc(sizeof *w);
		int compute = k < n->nworkers - 1, rc;
		if (!w)
			return -ENOMEM;
		*w = (struct wargs){ n, compute ? CL_COMPUTE : CL_IO, compute ? k + 1 : k - (n->nworkers - 1) };
		rc = pthread_create(&n->threads[n->nthreads], NULL, worker_main, w);
		if (rc) {
			free(w);
			return hp_error(-rc, "cannot start a task-net worker thread");
		}
		n->nthreads++;
	}
	return 0;
}

/* The description names only values it has and ops the caller gave. */
static int check_desc(const struct hp_net_desc *d, const struct hp_net_ops *ops)
{
	if (!ops || !ops->fire_kernel || !ops->fire_io || d->nvalues < 0 || d->nentries < 0 || !d->vsize)
		return hp_error(HP_EINTERNAL, "task net: incomplete description or ops");
	for (int i = 0; i < d->nentries; i++) {
		const struct hp_net_entry *e = &d->entries[i];
		int io = e->kind != HP_TR_KERNEL && e->kind != HP_TR_RECOMPUTE && e->kind != HP_TR_COMM;
		if (e->kind >= HP_TR_NKINDS || (e->kind == HP_TR_COMM && !ops->fire_comm) ||
		    (e->kind == HP_TR_RECOMPUTE && !ops->fire_recompute))
			return hp_error(HP_EINTERNAL, "task net: entry %d: kind %d has no fire op", i, e->kind);
		if (io && (e->value < 0 || e->value >= d->nvalues))
			return hp_error(HP_EINTERNAL, "task net: entry %d: no value %d", i, e->value);
		for (int j = 0; !io && j < e->nin + e->nout; j++) {
			int v = j < e->nin ? e->in[j] : e->out[j - e->nin];
			int pair = e->inplace && e->kind != HP_TR_COMM && (j == 0 || j == e->nin);
			if (v >= d->nvalues || (pair && (v < 0 || !d->vsize[v])))
				return hp_error(HP_EINTERNAL, "task net: entry %d: bad value %d", i, v);
		}
		if (e->inplace && (e->nin < 1 || e->nout < 1 || (e->kind == HP_TR_COMM && e->nin != e->nout)))
			return hp_error(HP_EINTERNAL, "task net: entry %d: in place without input and output", i);
		for (int j = 1; e->inplace && e->kind == HP_TR_COMM && j < e->nin; j++)
			if (e->in[j] < 0 || e->out[j] < 0 || !d->vsize[e->in[j]] || !d->vsize[e->out[j]])
				return hp_error(HP_EINTERNAL, "task net: entry %d: bad value in place", i);
		for (int o = 0; e->over && o < e->nout; o++)
			if (e->over[o] >= e->nin || (e->over[o] >= 0 && (e->kind == HP_TR_COMM || e->out[o] < 0 ||
					   e->in[e->over[o]] < 0 || !d->vsize[e->out[o]] || !d->vsize[e->in[e->over[o]]])))
				return hp_error(HP_EINTERNAL, "task net: entry %d: bad value in place", i);
	}
	return 0;
}

int hp_net_create(const struct hp_net_desc *d, const struct hp_net_ops *ops, void *arg, struct hp_net **out)
{
	struct hp_net *n;
	size_t nv = (size_t)d->nvalues + 1;
	int rc = check_desc(d, ops);

	*out = NULL;
	if (rc < 0)
		return rc;
	n = calloc(1, sizeof *n);
	if (!n)
		return hp_error(-ENOMEM, "out of memory");
	n->ops = ops;
	n->arg = arg;
	n->trace = d->trace;
	n->nvalues = d->nvalues;
	n->budget = d->budget;
	n->reserved = d->reserved;
	n->nworkers = d->workers < 1 ? 1 : d->workers;
	n->inline_io = d->io_threads == 0 && n->nworkers == 1 && ops->start_io_batch && ops->io_batch_done &&
		       ops->fire_io_batch;
	n->nio = n->inline_io ? 0 : d->io_threads < 1 ? 1 : d->io_threads;
	pthread_mutex_init(&n->mu, NULL);
	n->wt = calloc((size_t)(n->nworkers + n->nio), sizeof *n->wt);
	n->idle_at[CL_COMPUTE] = malloc((size_t)n->nworkers * sizeof(int));
	n->idle_at[CL_IO] = malloc((size_t)(n->nio + 1) * sizeof(int));
	n->pend = malloc((size_t)(n->nworkers + n->nio) * sizeof(int));
	if (!n->wt || !n->idle_at[CL_COMPUTE] || !n->idle_at[CL_IO] || !n->pend) {
		free(n->wt);
		n->wt = NULL;
		rc = hp_error(-ENOMEM, "out of memory");
		goto fail;
	}
	for (int k = 0; k < n->nworkers + n->nio; k++)
		pthread_cond_init(&n->wt[k].cv, NULL);
	n->vsize = malloc(nv * sizeof *n->vsize);
	n->held = calloc(nv, 1);
	if (!n->vsize || !n->held) {
		rc = hp_error(-ENOMEM, "out of memory");
		goto fail;
	}
	memcpy(n->vsize, d->vsize, (size_t)d->nvalues * sizeof *n->vsize);
	rc = compile(n, d);
	if (rc < 0)
		goto fail;
	n->deps_left = malloc(((size_t)n->ntr + 1) * sizeof *n->deps_left);
	n->state = malloc((size_t)n->ntr + 1);
	n->need = malloc(((size_t)n->ntr + 1) * sizeof *n->need);
	for (int c = 0; c < 3; c++)
		n->ready[c].a = malloc(((size_t)n->ntr + 1) * sizeof(int));
	n->fl = n->inline_io ? malloc(MAX_FLIGHTS * sizeof *n->fl) : NULL;
	if (!n->deps_left || !n->state || !n->need || !n->ready[0].a || !n->ready[1].a || !n->ready[2].a ||
	    (n->inline_io && !n->fl)) {
		rc = hp_error(-ENOMEM, "out of memory");
		goto fail;
	}
	rc = start_threads(n);
	if (rc < 0)
		goto fail;
	*out = n;
	return 0;
fail:
	hp_net_destroy(n);
	return rc;
}

void hp_net_destroy(struct hp_net *n)
{
	if (!n)
		return;
	pthread_mutex_lock(&n->mu);
	n->quit = 1;
	wake_all(n);
	unlock(n);
	for (int k = 0; k < n->nthreads; k++)
		pthread_join(n->threads[k], NULL);
	pthread_mutex_destroy(&n->mu);
	for (int k = 0; n->wt && k < n->nworkers + n->nio; k++)
		pthread_cond_destroy(&n->wt[k].cv);
	free(n->wt);
	free(n->idle_at[CL_COMPUTE]);
	free(n->idle_at[CL_IO]);
	free(n->pend);
	free(n->threads);
	free(n->tr);
	free(n->succ);
	free(n->outs);
	free(n->vsize);
	free(n->held);
	free(n->deps_left);
	free(n->state);
	free(n->need);
	for (int c = 0; c < 3; c++)
		free(n->ready[c].a);
	free(n->fl);
	free(n);
}
