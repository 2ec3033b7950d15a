/* The task net: compiled from the plan, fired by workers.  See net.h. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "hpdlf/error.h"
#include "hpdlf/store.h"
#include "exec/exec_internal.h"
#include "exec/net.h"
#include "exec/plan.h"
#include "exec/trace.h"
#include "kernels/blas.h"

enum { CL_COMPUTE = 0, CL_IO = 1, CL_ANY = 2 };
enum { ST_WAIT = 0, ST_READY, ST_RUNNING, ST_DONE };

struct tr {
	uint8_t kind;
	uint8_t reconcile;      /* prologue: need/release depend on what is held */
	int value;              /* LOAD/WRITEBACK/EVICT/DROP */
	uint32_t first, nchunks; /* LOAD: chunk range (nchunks 0: all) */
	int step;               /* KERNEL: its step; others: the step they precede */
	int64_t need, release;  /* budget tokens taken when granted / given back when fired */
	int ndeps;
	int succ_begin;         /* successors: succ[succ_begin .. tr[i+1].succ_begin) */
};

struct heap {
	int *a;
	int n;
};

struct hp_net {
	struct hp_session *s;
	int ntr, nsucc;
	struct tr *tr;
	int *succ;
	uint64_t *vsize;        /* per value: budget bytes */
	char *held;             /* per value: resident as far as the net's tokens go */
	/* run state, under mu */
	pthread_mutex_t mu;
	pthread_cond_t cv[2];   /* idle compute workers, idle I/O threads */
	int idle[2];            /* how many wait on each */
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
	struct hp_pool **pools; /* per compute worker; [0] is the session's with one worker */
	int own_pool0;
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

/* ---- compiling the plan ---- */

struct builder {
	struct hp_net *n;
	const struct hp_graph *g;
	const struct hp_plan *p;
	int cap;
	int *efrom, *eto, nedges, capedges;
	int *maker, *remover;   /* per value: transition index or -1 */
	int *maker_first;       /* a load split in parts: maker_first..maker */
	int **readers, *nreaders, *capreaders;
	char *res;              /* residency as the walk goes */
};

static int managed(const struct hp_graph *g, int v)
{
	return v >= 0 && g->values[v].kind != HP_VALUE_CONSTANT;
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
	n->tr[n->ntr] = (struct tr){ .kind = (uint8_t)kind, .value = v, .step = step };
	return n->ntr++;
}

/* v leaves DRAM (write-back, eviction, drop): after it was made resident
 * and after every kernel that read it since. */
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
static int add_load(struct builder *b, int v, int step)
{
	struct hs_tensor *ten = b->n->s->ten[v];
	uint64_t nch = ten ? hs_tensor_nchunks(ten) : 1, cs = hs_chunk_size(b->n->s->store);
	int parts = nch >= 2 && !b->res[v] ? (nch < (uint64_t)b->n->nio ? (int)nch : b->n->nio) : 1;
	int first = b->n->ntr, rc = 0;
	uint64_t at = 0;

	for (int k = 0; k < parts && rc == 0; k++) {
		uint64_t n = nch / (uint64_t)parts + ((uint64_t)k < nch % (uint64_t)parts);
		int t = new_tr(b, HP_TR_LOAD, v, step);
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

static int add_io(struct builder *b, int kind, int v, int step)
{
	int t;

	if (kind == HP_TR_LOAD)
		return add_load(b, v, step);
	t = new_tr(b, kind, v, step);
	return t < 0 ? t : arcs_remove(b, t, v);
}

static int add_kernel(struct builder *b, int step)
{
	const struct hp_node *nd = &b->g->nodes[b->p->node[step]];
	int t = new_tr(b, HP_TR_KERNEL, -1, step), rc = 0;

	if (t < 0)
		return t;
	if (!b->n->reserved) { /* scratch per kernel, else the workers' own */
		int64_t ws = (int64_t)((nd->workspace + 4095) / 4096 * 4096);
		b->n->tr[t].need = ws;
		b->n->tr[t].release = ws;
	}
	for (int j = 0; j < nd->ninputs && rc == 0; j++) {
		int v = nd->inputs[j];
		if (!managed(b->g, v))
			continue;
		rc = arcs_made(b, t, v);
		if (rc == 0 && (b->nreaders[v] == 0 || b->readers[v][b->nreaders[v] - 1] != t))
			rc = add_reader(b, v, t);
	}
	if (hp_plan_inplace(b->g, b->p, step)) {
		/* writes over input 0: after every other reader of it; its
		 * budget passes to output 0 */
		int a = nd->inputs[0];
		rc = arcs_made(b, t, a);
		for (int i = 0; i < b->nreaders[a] && rc == 0; i++)
			rc = edge(b, b->readers[a][i], t);
		b->nreaders[a] = 0;
		b->remover[a] = t;
		b->res[a] = 0;
		b->res[nd->outputs[0]] = 1;
		set_maker(b, nd->outputs[0], t, t);
	}
	for (int o = 0; o < nd->noutputs && rc == 0; o++) {
		int v = nd->outputs[o];
		if (!managed(b->g, v) || (o == 0 && b->maker[v] == t))
			continue;
		rc = edge(b, b->remover[v], t);
		for (int i = 0; i < b->nreaders[v] && rc == 0; i++)
			rc = edge(b, b->readers[v][i], t);
		if (!b->res[v])
			b->n->tr[t].need += (int64_t)b->n->vsize[v];
		b->res[v] = 1;
		set_maker(b, v, t, t);
	}
	return rc;
}

/* Drops after kernel `step`: inputs at their last use, outputs nobody reads. */
static int add_drops(struct builder *b, int step)
{
	const struct hp_node *nd = &b->g->nodes[b->p->node[step]];
	int rc = 0;

	for (int j = 0; j < nd->ninputs && rc == 0; j++) {
		int v = nd->inputs[j];
		if (managed(b->g, v) && b->p->last_use[v] == step && b->res[v])
			rc = add_io(b, HP_TR_DROP, v, step);
	}
	for (int o = 0; o < nd->noutputs && rc == 0; o++) {
		int v = nd->outputs[o];
		if (managed(b->g, v) && b->p->last_use[v] < 0 && b->res[v])
			rc = add_io(b, HP_TR_DROP, v, step);
	}
	return rc;
}

/* Prologue: persistent values the steady state does not keep resident are
 * written back first, then those it does are loaded. */
static int add_prologue(struct builder *b)
{
	const struct hp_plan *p = b->p;
	int rc = 0;

	for (int pass = 0; pass < 2 && rc == 0; pass++)
		for (int v = 0; v < b->g->nvalues && rc == 0; v++) {
			int t;
			if (p->last_use[v] != p->nsteps || !managed(b->g, v) || p->start_resident[v] != pass)
				continue;
			t = new_tr(b, pass ? HP_TR_LOAD : HP_TR_WRITEBACK, v, 0);
			if (t < 0)
				return t;
			b->n->tr[t].reconcile = 1;
			if (pass)
				set_maker(b, v, t, t);
			else
				b->remover[v] = t;
			b->res[v] = (char)pass;
		}
	return rc;
}

static int build_walk(struct builder *b)
{
	const struct hp_plan *p = b->p;
	int rc = add_prologue(b);

	for (int s = 0; s < p->nsteps && rc == 0; s++) {
		for (int a = p->act_begin[s]; a < p->act_begin[s + 1] && rc == 0; a++) {
			const struct hp_plan_act_rec *x = &p->acts[a];
			int kind = x->act == HP_ACT_LOAD ? HP_TR_LOAD : x->act == HP_ACT_WRITEBACK ? HP_TR_WRITEBACK
												  : HP_TR_EVICT;
			rc = add_io(b, kind, x->value, s);
		}
		if (rc == 0)
			rc = add_kernel(b, s);
		if (rc == 0)
			rc = add_drops(b, s);
	}
	return rc;
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

static int compile(struct hp_net *n)
{
	const struct hp_graph *g = n->s->g;
	const struct hp_plan *p = n->s->plan;
	size_t nv = (size_t)g->nvalues + 1;
	struct builder b = { .n = n, .g = g, .p = p, .cap = 4 * p->nsteps + 64 };
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
	for (int v = 0; v < g->nvalues; v++)
		b.maker[v] = b.maker_first[v] = b.remover[v] = -1;
	rc = build_walk(&b);
	if (rc == 0)
		rc = build_csr(&b);
out:
	builder_free(&b, g->nvalues);
	return rc < 0 ? hp_error(rc, "out of memory compiling the task net") : 0;
}

/* ---- firing ---- */

static int tr_class(const struct tr *t)
{
	return t->kind == HP_TR_KERNEL ? CL_COMPUTE : t->kind == HP_TR_DROP ? CL_ANY : CL_IO;
}

/* Make transition i ready and wake one idle thread that may fire it
 * (lock held).  A drop, or I/O before the next kernel while every I/O
 * thread is busy, wakes a compute worker when one idles (it would wait for
 * it anyway), else an I/O thread: only threads with work are woken. */
static void make_ready(struct hp_net *n, int i)
{
	int cls = tr_class(&n->tr[i]);

	n->state[i] = ST_READY;
	heap_push(&n->ready[cls], i);
	if (cls == CL_ANY || (cls == CL_IO && i < n->kcur && !n->idle[CL_IO]))
		cls = n->idle[CL_COMPUTE] ? CL_COMPUTE : CL_IO;
	if (n->idle[cls])
		pthread_cond_signal(&n->cv[cls]);
}

static void wake_all(struct hp_net *n)
{
	pthread_cond_broadcast(&n->cv[CL_COMPUTE]);
	pthread_cond_broadcast(&n->cv[CL_IO]);
}

/* Grant budget tokens in plan order as far as they go (lock held). */
static void grant_more(struct hp_net *n)
{
	while (n->grant < n->ntr && !n->err) {
		int i = n->grant;
		if (n->need[i] > n->free_tokens)
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
	n->free_tokens += t->kind == HP_TR_KERNEL || !t->reconcile ? t->release
				 : (t->kind != HP_TR_LOAD && n->held[t->value] ? (int64_t)n->vsize[t->value] : 0);
	if (t->kind == HP_TR_KERNEL) {
		const struct hp_graph *g = n->s->g;
		const struct hp_node *nd = &g->nodes[n->s->plan->node[t->step]];
		for (int o = 0; o < nd->noutputs; o++)
			if (managed(g, nd->outputs[o]))
				n->held[nd->outputs[o]] = 1;
		if (hp_plan_inplace(g, n->s->plan, t->step))
			n->held[nd->inputs[0]] = 0;
	} else {
		n->held[t->value] = t->kind == HP_TR_LOAD;
	}
	for (int k = t->succ_begin; k < n->tr[i + 1].succ_begin; k++) {
		int j = n->succ[k];
		if (--n->deps_left[j] == 0 && j < n->grant && n->state[j] == ST_WAIT)
			make_ready(n, j);
	}
	while (n->kcur < n->ntr && (n->tr[n->kcur].kind != HP_TR_KERNEL || n->state[n->kcur] == ST_DONE))
		n->kcur++;
	grant_more(n);
	if (run_done(n)) /* the calling thread returns */
		pthread_cond_broadcast(&n->cv[CL_COMPUTE]);
}

static int fire(struct hp_net *n, int i, int worker, int cls)
{
	const struct tr *t = &n->tr[i];
	int lane = cls == CL_COMPUTE ? HP_LANE_COMPUTE + worker : HP_LANE_IO + worker;

	if (t->kind == HP_TR_KERNEL)
		return hp_rt_fire_kernel(n->s, t->step, worker, n->pools[worker], lane);
	return hp_rt_fire_io(n->s, t->kind, t->value, t->first, t->nchunks, lane);
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
	if (any->n && (!k->n || any->a[0] < k->a[0]))
		return any;
	if (k->n)
		return k;
	if (io->n && io->a[0] < n->kcur && !n->idle[CL_IO])
		return io;
	return NULL;
}

/* A worker's loop (lock held on entry and exit): for one run (the calling
 * thread), or until the net is destroyed (the others: they sleep between
 * runs, and are woken one at a time as transitions of their class become
 * ready). */
static void work(struct hp_net *n, int cls, int worker, int forever)
{
	while (forever ? !n->quit : !run_done(n)) {
		struct heap *h = pick(n, cls);
		if (!h) {
			double t0 = now_ms(), u0 = hp_trace_now_us(n->s->trace);
			int gen = n->gen;
			n->idle[cls]++;
			pthread_cond_wait(&n->cv[cls], &n->mu);
			n->idle[cls]--;
			if (cls == CL_COMPUTE && gen == n->gen) {
				n->st.stall_ms += now_ms() - t0;
				if (n->s->trace) /* where the compute worker waited */
					hp_trace_span(n->s->trace, HP_LANE_COMPUTE + worker, "stall", "stall", u0,
						      hp_trace_now_us(n->s->trace));
			}
			continue;
		}
		int i = heap_pop(h), rc;
		if (h->n && h != &n->ready[cls] && n->idle[CL_IO])
			pthread_cond_signal(&n->cv[CL_IO]); /* more I/O: share it */
		n->state[i] = ST_RUNNING;
		n->nrunning++;
		pthread_mutex_unlock(&n->mu);
		double t0 = now_ms();
		rc = fire(n, i, worker, n->tr[i].kind == HP_TR_KERNEL ? CL_COMPUTE : cls);
		pthread_mutex_lock(&n->mu);
		n->st.fired[n->tr[i].kind]++;
		if (n->tr[i].kind == HP_TR_LOAD && rc == 0)
			n->st.bytes_loaded += (uint64_t)n->need[i];
		if (n->tr[i].kind == HP_TR_KERNEL)
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
	pthread_mutex_unlock(&n->mu);
	free(w);
	return NULL;
}

int hp_net_run(struct hp_net *n)
{
	int64_t held = 0;

	pthread_mutex_lock(&n->mu);
	memset(&n->st, 0, sizeof n->st);
	for (int v = 0; v < n->s->g->nvalues; v++)
		if (n->held[v])
			held += (int64_t)n->vsize[v];
	n->free_tokens = (int64_t)n->s->layout.budget - (int64_t)n->reserved - held;
	for (int i = 0; i < n->ntr; i++) {
		const struct tr *t = &n->tr[i];
		n->deps_left[i] = t->ndeps;
		n->state[i] = ST_WAIT;
		n->need[i] = t->need;
		if (t->reconcile)
			n->need[i] = t->kind == HP_TR_LOAD && !n->held[t->value] ? (int64_t)n->vsize[t->value] : 0;
	}
	n->grant = n->ndone = n->nrunning = n->err = n->kcur = 0;
	while (n->kcur < n->ntr && n->tr[n->kcur].kind != HP_TR_KERNEL)
		n->kcur++;
	n->errmsg[0] = 0;
	for (int c = 0; c < 3; c++)
		n->ready[c].n = 0;
	n->gen++;
	grant_more(n);
	work(n, CL_COMPUTE, 0, 0);
	/* every worker is back waiting once run_done holds and nothing runs */
	int err = n->err;
	pthread_mutex_unlock(&n->mu);
	if (err)
		return hp_error(err, "%s", n->errmsg);
	return 0;
}

void hp_net_note_resident(struct hp_net *n, int v)
{
	pthread_mutex_lock(&n->mu);
	n->held[v] = 1;
	pthread_mutex_unlock(&n->mu);
}

void hp_net_stats(const struct hp_net *n, struct hp_net_stats *out)
{
	*out = n->st;
}

int hp_net_transitions(const struct hp_net *n)
{
	return n->ntr;
}

static int start_threads(struct hp_net *n, int per_worker)
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
		if (compute && (rc = hp_pool_create(per_worker, &n->pools[k + 1])) < 0) {
			free(w);
			return rc;
		}
		rc = pthread_create(&n->threads[n->nthreads], NULL, worker_main, w);
		if (rc) {
			free(w);
			return hp_error(-rc, "cannot start a task-net worker thread");
		}
		n->nthreads++;
	}
	return 0;
}

int hp_net_create(struct hp_session *s, int workers, int io_threads, struct hp_net **out)
{
	const struct hp_graph *g = s->g;
	struct hp_net *n = calloc(1, sizeof *n);
	size_t nv = (size_t)g->nvalues + 1;
	int rc;

	*out = NULL;
	if (!n)
		return hp_error(-ENOMEM, "out of memory");
	n->s = s;
	n->nworkers = workers < 1 ? 1 : workers;
	n->reserved = s->nscratch ? s->layout.workspace : 0;
	n->nio = io_threads < 1 ? 1 : io_threads;
	pthread_mutex_init(&n->mu, NULL);
	pthread_cond_init(&n->cv[0], NULL);
	pthread_cond_init(&n->cv[1], NULL);
	n->vsize = calloc(nv, sizeof *n->vsize);
	n->held = calloc(nv, 1);
	n->pools = calloc((size_t)n->nworkers, sizeof *n->pools);
	if (!n->vsize || !n->held || !n->pools) {
		rc = hp_error(-ENOMEM, "out of memory");
		goto fail;
	}
	for (int v = 0; v < g->nvalues; v++) {
		struct hp_tensor t = { .dtype = g->values[v].dtype, .shape = g->values[v].shape };
		uint64_t b = (hp_tensor_bytes(&t) + 4095) / 4096 * 4096;
		n->vsize[v] = b ? b : 4096;
	}
	rc = compile(n);
	if (rc < 0)
		goto fail;
	n->deps_left = malloc(((size_t)n->ntr + 1) * sizeof *n->deps_left);
	n->state = malloc((size_t)n->ntr + 1);
	n->need = malloc(((size_t)n->ntr + 1) * sizeof *n->need);
	for (int c = 0; c < 3; c++)
		n->ready[c].a = malloc(((size_t)n->ntr + 1) * sizeof(int));
	if (!n->deps_left || !n->state || !n->need || !n->ready[0].a || !n->ready[1].a || !n->ready[2].a) {
		rc = hp_error(-ENOMEM, "out of memory");
		goto fail;
	}
	int per = s->threads / n->nworkers > 0 ? s->threads / n->nworkers : 1;
	n->pools[0] = s->pool;
	/* Several workers share the cores: each kernel gets its share (OpenBLAS
	 * threads are process-wide), so the cores are never oversubscribed. */
	if (n->nworkers > 1) {
		hp_blas_threads(per);
		if ((rc = hp_pool_create(per, &n->pools[0])) < 0)
			goto fail;
		n->own_pool0 = 1;
	}
	rc = start_threads(n, per);
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
	pthread_mutex_unlock(&n->mu);
	for (int k = 0; k < n->nthreads; k++)
		pthread_join(n->threads[k], NULL);
	for (int w = n->own_pool0 ? 0 : 1; n->pools && w < n->nworkers; w++)
		hp_pool_destroy(n->pools[w]);
	pthread_mutex_destroy(&n->mu);
	pthread_cond_destroy(&n->cv[0]);
	pthread_cond_destroy(&n->cv[1]);
	free(n->threads);
	free(n->pools);
	free(n->tr);
	free(n->succ);
	free(n->vsize);
	free(n->held);
	free(n->deps_left);
	free(n->state);
	free(n->need);
	for (int c = 0; c < 3; c++)
		free(n->ready[c].a);
	free(n);
}
