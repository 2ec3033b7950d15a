/* Graph IR construction, lookup by name, topological order and destruction. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "hpdlf/error.h"
#include "hpdlf/graph.h"
#include "graph/sort.h"

static char *dupstr(const char *s)
{
	return strdup(s ? s : "");
}

struct hp_graph *hp_graph_new(const char *name)
{
	struct hp_graph *g = calloc(1, sizeof *g);

	if (!g)
		return NULL;
	g->path = dupstr(name);
	g->producer = dupstr("");
	g->opset = 17;
	if (!g->path || !g->producer) {
		hp_graph_free(g);
		return NULL;
	}
	return g;
}

static void attr_clear(struct hp_attr *a)
{
	free(a->name);
	free(a->s);
	free(a->ints);
	free(a->floats);
	if (a->strings)
		for (int i = 0; i < a->n; i++)
			free(a->strings[i]);
	free(a->strings);
	free(a->t.data);
}

static void node_clear(struct hp_node *n)
{
	if (n->op && n->op->release)
		n->op->release(n);
	else
		free(n->priv);
	free(n->name);
	free(n->op_type);
	free(n->domain);
	free(n->inputs);
	free(n->outputs);
	for (int i = 0; i < n->nattrs; i++)
		attr_clear(&n->attrs[i]);
	free(n->attrs);
}

void hp_graph_remove_node(struct hp_graph *g, int i)
{
	node_clear(&g->nodes[i]);
	memmove(&g->nodes[i], &g->nodes[i + 1], (size_t)(g->nnodes - i - 1) * sizeof g->nodes[0]);
	g->nnodes--;
}

void hp_graph_free(struct hp_graph *g)
{
	if (!g)
		return;
	for (int i = 0; i < g->nnodes; i++)
		node_clear(&g->nodes[i]);
	for (int i = 0; i < g->nvalues; i++) {
		free(g->values[i].name);
		free(g->values[i].data);
		for (int d = 0; d < HP_MAX_RANK; d++)
			free(g->values[i].dim_param[d]);
	}
	for (int i = 0; i < g->nfiles; i++) {
		/* an unlinked file the graph holds open (hp_fz_spill in
		 * exec/fuse_util.c), never the model's own path, files[0] */
		char *end = NULL;
		long fd = i > 0 && !strncmp(g->files[i], "/proc/self/fd/", 14) ? strtol(g->files[i] + 14, &end, 10) : -1;
		if (fd > 2 && end && !*end)
			close((int)fd);
		free(g->files[i]);
	}
	free(g->files);
	free(g->nodes);
	free(g->values);
	free(g->inputs);
	free(g->outputs);
	free(g->path);
	free(g->producer);
	free(g);
}

int hp_graph_find_value(const struct hp_graph *g, const char *name)
{
	/* Linear: graphs are looked up by name only at import and on the command line. */
	for (int i = 0; i < g->nvalues; i++)
		if (!strcmp(g->values[i].name, name))
			return i;
	return -1;
}

int hp_graph_add_value(struct hp_graph *g, const char *name, enum hp_value_kind kind,
		       enum hp_dtype dtype, const struct hp_shape *shape)
{
	struct hp_value *v;
	/* a copy first: callers pass another value's shape, which the
	 * realloc below may move (exec/train_dp.c's buckets read freed memory
	 * at a regnet's 300th parameter) */
	struct hp_shape sh = { .rank = -1 };

	if (shape)
		sh = *shape;
	if (g->nvalues == g->values_cap) {
		int cap = g->values_cap ? 2 * g->values_cap : 64;
		void *p = realloc(g->values, (size_t)cap * sizeof *g->values);
		if (!p)
			return hp_error(-ENOMEM, "out of memory growing the graph");
		g->values = p;
		g->values_cap = cap;
	}
	v = &g->values[g->nvalues];
	memset(v, 0, sizeof *v);
	v->name = dupstr(name);
	if (!v->name)
		return hp_error(-ENOMEM, "out of memory");
	v->kind = kind;
	v->dtype = dtype;
	v->shape = sh; /* rank -1 without a shape: unknown */
	v->producer = -1;
	v->next = -1;
	v->part_of = -1;
	return g->nvalues++;
}

int hp_graph_add_node(struct hp_graph *g, const char *name, const char *op_type, int ninputs,
		      const int *inputs, int noutputs, const int *outputs)
{
	struct hp_node *n;

	if (g->nnodes == g->nodes_cap) {
		int cap = g->nodes_cap ? 2 * g->nodes_cap : 64;
		void *p = realloc(g->nodes, (size_t)cap * sizeof *g->nodes);
		if (!p)
			return hp_error(-ENOMEM, "out of memory growing the graph");
		g->nodes = p;
		g->nodes_cap = cap;
	}
	n = &g->nodes[g->nnodes];
	memset(n, 0, sizeof *n);
	n->name = dupstr(name);
	n->op_type = dupstr(op_type);
	n->domain = dupstr("");
	n->inputs = calloc((size_t)(ninputs ? ninputs : 1), sizeof(int));
	n->outputs = calloc((size_t)(noutputs ? noutputs : 1), sizeof(int));
	if (!n->name || !n->op_type || !n->domain || !n->inputs || !n->outputs) {
		node_clear(n);
		return hp_error(-ENOMEM, "out of memory");
	}
	n->ninputs = ninputs;
	n->noutputs = noutputs;
	if (ninputs)
		memcpy(n->inputs, inputs, (size_t)ninputs * sizeof(int));
	if (noutputs)
		memcpy(n->outputs, outputs, (size_t)noutputs * sizeof(int));
	return g->nnodes++;
}

static int copy_attr(struct hp_attr *d, const struct hp_attr *s)
{
	memset(d, 0, sizeof *d);
	d->type = s->type;
	d->i = s->i;
	d->f = s->f;
	d->n = s->n;
	d->slen = s->slen;
	d->name = dupstr(s->name);
	if (!d->name)
		return -ENOMEM;
	if (s->s) {
		d->s = malloc(s->slen + 1);
		if (!d->s)
			return -ENOMEM;
		memcpy(d->s, s->s, s->slen);
		d->s[s->slen] = 0;
	}
	if (s->ints && s->n) {
		d->ints = malloc((size_t)s->n * sizeof *d->ints);
		if (!d->ints)
			return -ENOMEM;
		memcpy(d->ints, s->ints, (size_t)s->n * sizeof *d->ints);
	}
	if (s->floats && s->n) {
		d->floats = malloc((size_t)s->n * sizeof *d->floats);
		if (!d->floats)
			return -ENOMEM;
		memcpy(d->floats, s->floats, (size_t)s->n * sizeof *d->floats);
	}
	if (s->strings && s->n) {
		d->strings = calloc((size_t)s->n, sizeof *d->strings);
		if (!d->strings)
			return -ENOMEM;
		for (int i = 0; i < s->n; i++)
			if (!(d->strings[i] = dupstr(s->strings[i])))
				return -ENOMEM;
	}
	d->t.dtype = s->t.dtype;
	d->t.shape = s->t.shape;
	if (s->t.data) {
		size_t b = hp_tensor_bytes(&s->t);
		d->t.data = malloc(b ? b : 1);
		if (!d->t.data)
			return -ENOMEM;
		memcpy(d->t.data, s->t.data, b);
	}
	return 0;
}

int hp_graph_add_attr(struct hp_graph *g, int node, const struct hp_attr *a)
{
	struct hp_node *n = &g->nodes[node];
	void *p = realloc(n->attrs, (size_t)(n->nattrs + 1) * sizeof *n->attrs);

	if (!p)
		return hp_error(-ENOMEM, "out of memory");
	n->attrs = p;
	if (copy_attr(&n->attrs[n->nattrs], a) < 0) {
		attr_clear(&n->attrs[n->nattrs]);
		return hp_error(-ENOMEM, "out of memory");
	}
	n->nattrs++;
	return 0;
}

/* Recompute producers and consumer counts from the node lists. */
static int link_values(struct hp_graph *g)
{
	for (int v = 0; v < g->nvalues; v++) {
		g->values[v].producer = -1;
		g->values[v].nconsumers = 0;
	}
	for (int i = 0; i < g->nnodes; i++) {
		struct hp_node *n = &g->nodes[i];
		for (int o = 0; o < n->noutputs; o++) {
			int v = n->outputs[o];
			if (v < 0)
				continue;
			if (v >= g->nvalues)
				return hp_error(HP_EINTERNAL, "node '%s': bad output index", n->name);
			if (g->values[v].producer >= 0)
				return hp_error(HP_EMODEL, "%s: value '%s' is produced by two nodes ('%s' and '%s')",
						g->path, g->values[v].name, g->nodes[g->values[v].producer].name, n->name);
			g->values[v].producer = i;
		}
		for (int j = 0; j < n->ninputs; j++) {
			int v = n->inputs[j];
			if (v >= g->nvalues)
				return hp_error(HP_EINTERNAL, "node '%s': bad input index", n->name);
			if (v >= 0)
				g->values[v].nconsumers++;
		}
	}
	for (int i = 0; i < g->noutputs; i++)
		g->values[g->outputs[i]].is_output = 1;
	return 0;
}

/* Kahn's algorithm over a consumer CSR.  Ready nodes wait in a min-heap
 * keyed (sched hint, time they became ready): without hints that is FIFO,
 * which keeps the model's order; hints let split operators run band by
 * band.  Reproducible either way. */
struct ready {
	int64_t *key; /* sched << 32 | sequence */
	int *node, n;
};

/* (hint, sequence) as one key; hints may be negative (run first). */
static int64_t sched_key(int sched, int64_t seq)
{
	return (int64_t)sched * ((int64_t)1 << 32) + seq;
}

static void ready_push(struct ready *r, int64_t key, int node)
{
	int i = r->n++;

	while (i > 0 && r->key[(i - 1) / 2] > key) {
		r->key[i] = r->key[(i - 1) / 2];
		r->node[i] = r->node[(i - 1) / 2];
		i = (i - 1) / 2;
	}
	r->key[i] = key;
	r->node[i] = node;
}

static int ready_pop(struct ready *r)
{
	int top = r->node[0], i = 0;
	int64_t key = r->key[--r->n];
	int node = r->node[r->n];

	for (;;) {
		int c = 2 * i + 1;
		if (c >= r->n)
			break;
		if (c + 1 < r->n && r->key[c + 1] < r->key[c])
			c++;
		if (r->key[c] >= key)
			break;
		r->key[i] = r->key[c];
		r->node[i] = r->node[c];
		i = c;
	}
	r->key[i] = key;
	r->node[i] = node;
	return top;
}

/* The node that writes value v's next version and reads v itself (an
 * optimizer update: W -> W'), or -1. */
static int next_writer(const struct hp_graph *g, int v)
{
	int b = g->values[v].next, u = b >= 0 ? g->values[b].producer : -1;

	for (int j = 0; u >= 0 && j < g->nodes[u].ninputs; j++)
		if (g->nodes[u].inputs[j] == v)
			return u;
	return -1;
}

/* The graph's edges laid out flat for topo_sort_with: each node's inputs
 * and outputs, and the producers and hints it reads per edge.  Each pass
 * over g->nodes[i].inputs missed the cache on a separately allocated
 * array; the sort made five such passes (a third of its time, the 63,000
 * nodes of the 10,001-node MLP's 1-byte training step). */
struct flat {
	int *in_start, *in;   /* node i's inputs: in[in_start[i] .. in_start[i + 1]) */
	int *out_start, *out; /* its outputs, likewise */
	int *prod, *sched;    /* values[v].producer, nodes[i].sched */
};

static void flat_free(struct flat *f)
{
	free(f->in_start);
	free(f->in);
	free(f->out_start);
	free(f->out);
	free(f->prod);
	free(f->sched);
}

/* sched (may be NULL): the hints to sort by in place of the nodes' own. */
static int flat_build(const struct hp_graph *g, const int *sched, int nedges, struct flat *f)
{
	int nout = 0;

	for (int i = 0; i < g->nnodes; i++)
		nout += g->nodes[i].noutputs;
	f->in_start = malloc(((size_t)g->nnodes + 1) * sizeof *f->in_start);
	f->in = malloc(((size_t)nedges + 1) * sizeof *f->in);
	f->out_start = malloc(((size_t)g->nnodes + 1) * sizeof *f->out_start);
	f->out = malloc(((size_t)nout + 1) * sizeof *f->out);
	f->prod = malloc(((size_t)g->nvalues + 1) * sizeof *f->prod);
	f->sched = malloc(((size_t)g->nnodes + 1) * sizeof *f->sched);
	if (!f->in_start || !f->in || !f->out_start || !f->out || !f->prod || !f->sched)
		return hp_error(-ENOMEM, "out of memory sorting the graph");
	f->in_start[0] = f->out_start[0] = 0;
	for (int i = 0; i < g->nnodes; i++) {
		const struct hp_node *n = &g->nodes[i];
		memcpy(f->in + f->in_start[i], n->inputs, (size_t)n->ninputs * sizeof *n->inputs);
		memcpy(f->out + f->out_start[i], n->outputs, (size_t)n->noutputs * sizeof *n->outputs);
		f->in_start[i + 1] = f->in_start[i] + n->ninputs;
		f->out_start[i + 1] = f->out_start[i] + n->noutputs;
		f->sched[i] = sched ? sched[i] : n->sched;
	}
	for (int v = 0; v < g->nvalues; v++)
		f->prod[v] = g->values[v].producer;
	return 0;
}

/* The waits of topo_sort_with as edges reader -> writer: indeg[writer]
 * counted, each reader's writers in (*xstart)[i] .. (*xstart)[i + 1] of
 * *xadj; *nanti their number (0: none, nothing allocated but *writer). */
static int anti_edges(const struct hp_graph *g, const struct flat *f, int *indeg, int **writer, int **xstart,
		      int **xadj, int *nanti)
{
	int *w = *writer = malloc(((size_t)g->nvalues + 1) * sizeof *w), n = 0;

	if (!w)
		return hp_error(-ENOMEM, "out of memory sorting the graph");
	for (int v = 0; v < g->nvalues; v++) {
		w[v] = g->values[v].next >= 0 ? next_writer(g, v) : -1;
		if (w[v] >= 0 && f->sched[w[v]] == HP_SCHED_EAGER)
			w[v] = -1;
	}
	for (int i = 0; i < g->nnodes; i++)
		for (int k = f->in_start[i]; k < f->in_start[i + 1]; k++) {
			int v = f->in[k];
			n += v >= 0 && w[v] >= 0 && w[v] != i;
		}
	if (!(*nanti = n))
		return 0;
	*xstart = calloc((size_t)g->nnodes + 2, sizeof **xstart);
	*xadj = malloc((size_t)n * sizeof **xadj);
	if (!*xstart || !*xadj)
		return hp_error(-ENOMEM, "out of memory sorting the graph");
	for (int i = 0; i < g->nnodes; i++)
		for (int k = f->in_start[i]; k < f->in_start[i + 1]; k++) {
			int v = f->in[k];
			if (v >= 0 && w[v] >= 0 && w[v] != i) {
				(*xstart)[i + 1]++;
				indeg[w[v]]++;
			}
		}
	for (int i = 0; i < g->nnodes; i++)
		(*xstart)[i + 1] += (*xstart)[i];
	for (int i = 0, j = 0; i < g->nnodes; i++)
		for (int k = f->in_start[i]; k < f->in_start[i + 1]; k++) {
			int v = f->in[k];
			if (v >= 0 && w[v] >= 0 && w[v] != i)
				(*xadj)[j++] = w[v];
		}
	return 0;
}

/* anti: a node writing a value's next version (next_writer) waits for
 * every other reader of the value (unless hinted HP_SCHED_EAGER), so
 * that the version it replaces is dead when it runs and its bytes may
 * take the new one (exec/plan.c's in-place update: W' over W; without
 * the wait ResNet-18's stage-4 update ran between its Conv's filter and
 * data gradients, holding W, dW and W' at once).  Order only: no value
 * changes. */
static int sort_queue(const struct hp_graph *g, const int *sched, int anti, int *queue)
{
	int *indeg, *start, *adj, *fill, tail = 0, rc = 0, nedges = 0, nanti = 0;
	int *xstart = NULL, *xadj = NULL, *writer = NULL;
	struct ready rd = { 0 };
	struct flat f = { 0 };
	int64_t seq = 0;

	indeg = calloc((size_t)g->nnodes + 1, sizeof *indeg);
	start = calloc((size_t)g->nvalues + 1, sizeof *start);
	fill = calloc((size_t)g->nvalues + 1, sizeof *fill);
	for (int i = 0; i < g->nnodes; i++)
		nedges += g->nodes[i].ninputs;
	adj = calloc((size_t)nedges + 1, sizeof *adj);
	rd.key = malloc(((size_t)g->nnodes + 1) * sizeof *rd.key);
	rd.node = malloc(((size_t)g->nnodes + 1) * sizeof *rd.node);
	if (!indeg || !start || !fill || !adj || !rd.key || !rd.node) {
		rc = hp_error(-ENOMEM, "out of memory sorting the graph");
		goto out;
	}
	if ((rc = flat_build(g, sched, nedges, &f)) < 0)
		goto out;
	for (int i = 0; i < g->nnodes; i++)
		for (int k = f.in_start[i]; k < f.in_start[i + 1]; k++) {
			int v = f.in[k];
			if (v >= 0 && f.prod[v] >= 0) {
				indeg[i]++;
				start[v + 1]++;
			}
		}
	for (int v = 0; v < g->nvalues; v++)
		start[v + 1] += start[v];
	for (int i = 0; i < g->nnodes; i++)
		for (int k = f.in_start[i]; k < f.in_start[i + 1]; k++) {
			int v = f.in[k];
			if (v >= 0 && f.prod[v] >= 0)
				adj[start[v] + fill[v]++] = i;
		}
	if (anti && (rc = anti_edges(g, &f, indeg, &writer, &xstart, &xadj, &nanti)) < 0)
		goto out;
	for (int i = 0; i < g->nnodes; i++)
		if (!indeg[i])
			ready_push(&rd, sched_key(f.sched[i], seq++), i);
	while (rd.n) {
		int i = ready_pop(&rd);
		queue[tail++] = i;
		for (int o = f.out_start[i]; o < f.out_start[i + 1]; o++) {
			int v = f.out[o];
			if (v < 0)
				continue;
			for (int k = start[v]; k < start[v + 1]; k++)
				if (--indeg[adj[k]] == 0)
					ready_push(&rd, sched_key(f.sched[adj[k]], seq++), adj[k]);
		}
		for (int k = nanti ? xstart[i] : 0; k < (nanti ? xstart[i + 1] : 0); k++)
			if (--indeg[xadj[k]] == 0)
				ready_push(&rd, sched_key(f.sched[xadj[k]], seq++), xadj[k]);
	}
	if (tail != g->nnodes && nanti) {
		rc = 1; /* a reader depends on the new version: sort without the waits */
		goto out;
	}
	if (tail != g->nnodes) {
		for (int i = 0; i < g->nnodes; i++)
			if (indeg[i]) {
				rc = hp_error(HP_EMODEL, "%s: graph has a cycle or a missing producer (node '%s' (%s))",
					      g->path, g->nodes[i].name, g->nodes[i].op_type);
				goto out;
			}
	}
out:
	flat_free(&f);
	free(indeg);
	free(start);
	free(fill);
	free(adj);
	free(rd.key);
	free(rd.node);
	free(writer);
	free(xstart);
	free(xadj);
	return rc;
}

/* The order of sort_queue with the waits, or without them where a reader
 * depends on the new version. */
static int sort_order(const struct hp_graph *g, const int *sched, int *queue)
{
	int rc = sort_queue(g, sched, 1, queue);

	return rc == 1 ? sort_queue(g, sched, 0, queue) : rc;
}

static int topo_sort(struct hp_graph *g)
{
	int *queue = malloc(((size_t)g->nnodes + 1) * sizeof *queue);
	int *at = malloc(((size_t)g->nnodes + 1) * sizeof *at);
	struct hp_node *sorted = malloc(((size_t)g->nnodes + 1) * sizeof *sorted);
	int rc = queue && at && sorted ? sort_order(g, NULL, queue) : hp_error(-ENOMEM, "out of memory sorting the graph");

	if (rc == 0) {
		for (int i = 0; i < g->nnodes; i++)
			sorted[i] = g->nodes[queue[i]];
		if (g->nnodes)
			memcpy(g->nodes, sorted, (size_t)g->nnodes * sizeof *sorted);
		/* the producers renumbered as link_values would find them again
		 * (the nodes moved, their edges did not: consumer counts stay) */
		for (int i = 0; i < g->nnodes; i++)
			at[queue[i]] = i;
		for (int v = 0; v < g->nvalues; v++)
			if (g->values[v].producer >= 0)
				g->values[v].producer = at[g->values[v].producer];
	}
	free(queue);
	free(at);
	free(sorted);
	return rc;
}

/* g's producers, consumer counts and output flags are as link_values
 * would leave them (a graph changed since hp_graph_finalize may not be). */
static int linked(const struct hp_graph *g)
{
	int *prod = malloc(((size_t)g->nvalues + 1) * sizeof *prod);
	int *cons = calloc((size_t)g->nvalues + 1, sizeof *cons), ok = prod && cons;

	for (int v = 0; ok && v < g->nvalues; v++)
		prod[v] = -1;
	for (int i = 0; ok && i < g->nnodes; i++) {
		const struct hp_node *n = &g->nodes[i];
		for (int o = 0; ok && o < n->noutputs; o++) {
			int v = n->outputs[o];
			if (v >= 0 && (ok = v < g->nvalues && prod[v] < 0))
				prod[v] = i;
		}
		for (int j = 0; ok && j < n->ninputs; j++)
			if ((ok = n->inputs[j] < g->nvalues) && n->inputs[j] >= 0)
				cons[n->inputs[j]]++;
	}
	for (int v = 0; ok && v < g->nvalues; v++)
		ok = g->values[v].producer == prod[v] && g->values[v].nconsumers == cons[v];
	for (int i = 0; ok && i < g->noutputs; i++)
		ok = g->values[g->outputs[i]].is_output;
	free(prod);
	free(cons);
	return ok;
}

int hp_graph_sort_order(const struct hp_graph *g, const int *sched, int *order)
{
	if (!linked(g))
		return 1;
	return sort_order(g, sched, order);
}

int hp_graph_finalize(struct hp_graph *g)
{
	int rc = link_values(g);

	if (rc < 0)
		return rc;
	/* topo_sort leaves the producers linked (the one pass over every
	 * node's edges above found any bad index) */
	return topo_sort(g);
}
