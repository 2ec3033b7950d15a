/* Helpers shared by the fusion passes (fuse_internal.h). */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "hpdlf/error.h"
#include "exec/exec_internal.h"
#include "exec/fuse_internal.h"

int hp_fz_is(const struct hp_node *n, const char *op)
{
	return !strcmp(n->op_type, op) && (!n->domain[0] || !strcmp(n->domain, "ai.onnx"));
}

int hp_fz_producer(const struct hp_graph *g, int v, const char *op)
{
	int p = v >= 0 ? g->values[v].producer : -1;

	return p >= 0 && hp_fz_is(&g->nodes[p], op) ? p : -1;
}

int hp_fz_only_reader(const struct hp_graph *g, int v)
{
	if (v < 0 || g->values[v].is_output || g->values[v].nconsumers != 1)
		return -1;
	for (int i = 0; i < g->nnodes; i++)
		for (int j = 0; j < g->nodes[i].ninputs; j++)
			if (g->nodes[i].inputs[j] == v)
				return i;
	return -1;
}

int hp_fz_const(const struct hp_graph *g, int v)
{
	const struct hp_value *x = v >= 0 ? &g->values[v] : NULL;

	if (!x || x->dtype != HP_F32)
		return 0;
	if (x->data)
		return x->kind == HP_VALUE_INITIALIZER || x->kind == HP_VALUE_CONSTANT;
	return x->kind == HP_VALUE_INITIALIZER && x->src.kind == HP_BLOB_FILE;
}

int hp_fz_user_fed(const struct hp_graph *g, int v)
{
	for (int i = 0; i < g->ninputs; i++)
		if (g->inputs[i] == v)
			return 1;
	return 0;
}

/* A new untrained initializer named base + suffix (made unique). */
static int new_init_of(struct hp_graph *g, const char *base, const char *suffix, enum hp_dtype dt,
		       const struct hp_shape *s)
{
	char name[512];
	int v;

	snprintf(name, sizeof name, "%s%s", base, suffix);
	for (int i = 1; hp_graph_find_value(g, name) >= 0; i++)
		snprintf(name, sizeof name, "%s%s#%d", base, suffix, i);
	if ((v = hp_graph_add_value(g, name, HP_VALUE_INITIALIZER, dt, s)) >= 0)
		g->values[v].trainable = 0;
	return v;
}

static int new_init(struct hp_graph *g, const char *base, const char *suffix, const struct hp_shape *s)
{
	return new_init_of(g, base, suffix, HP_F32, s);
}

int hp_fz_i64_init(struct hp_graph *g, const char *base, const char *suffix, const int64_t *v, int n)
{
	struct hp_shape s = { .rank = 1, .dims = { n } };
	int64_t *d = malloc((size_t)(n > 0 ? n : 1) * sizeof *d);
	int i;

	if (!d)
		return hp_error(-ENOMEM, "out of memory");
	memcpy(d, v, (size_t)n * sizeof *d);
	if ((i = new_init_of(g, base, suffix, HP_I64, &s)) < 0) {
		free(d);
		return i;
	}
	g->values[i].data = d;
	g->values[i].src = (struct hp_blob){ .kind = HP_BLOB_MEMORY, .length = (uint64_t)n * sizeof *d };
	return i;
}

int hp_fz_file_init(struct hp_graph *g, const char *base, const char *suffix, const struct hp_shape *s, int file,
		    uint64_t at)
{
	int v = new_init(g, base, suffix, s);

	if (v >= 0)
		g->values[v].src = (struct hp_blob){ .kind = HP_BLOB_FILE, .file = file, .offset = at,
						     .length = (uint64_t)hp_shape_numel(s) * 4 };
	return v;
}

int hp_fz_memory_init(struct hp_graph *g, const char *base, const char *suffix, const struct hp_shape *s, float *data)
{
	int v = new_init(g, base, suffix, s);

	if (v < 0) {
		free(data);
		return v;
	}
	g->values[v].data = data;
	g->values[v].src = (struct hp_blob){ .kind = HP_BLOB_MEMORY, .length = (uint64_t)hp_shape_numel(s) * 4 };
	return v;
}

int hp_fz_scalar(const struct hp_graph *g, int v, double *x)
{
	const struct hp_value *c = v >= 0 ? &g->values[v] : NULL;
	float f;

	if (!hp_fz_const(g, v) || hp_shape_numel(&c->shape) != 1)
		return 0;
	if (c->data)
		f = *(const float *)c->data;
	else if (hp_graph_read_init(g, v, &f) < 0)
		return 0;
	*x = f;
	return 1;
}

int hp_fz_near(double x, double want)
{
	return fabs(x - want) <= 1e-6 * fabs(want);
}

int hp_fz_other(const struct hp_node *n, int v)
{
	if (n->ninputs != 2)
		return -1;
	if (n->inputs[0] == v && n->inputs[1] != v)
		return n->inputs[1];
	if (n->inputs[1] == v && n->inputs[0] != v)
		return n->inputs[0];
	return -1;
}

int hp_fz_add_node(struct hp_graph *g, const char *name, const char *op, int hpdlf, int nin, const int *in, int out)
{
	int i = hp_graph_add_node(g, name, op, nin, in, 1, &out);

	if (i < 0 || !hpdlf)
		return i;
	free(g->nodes[i].domain);
	if (!(g->nodes[i].domain = strdup("ai.hpdlf")))
		return hp_error(-ENOMEM, "out of memory");
	return i;
}

int hp_fz_set_op(struct hp_node *n, const char *op)
{
	char *t = strdup(op), *d = strdup("ai.hpdlf");

	if (!t || !d) {
		free(t);
		free(d);
		return hp_error(-ENOMEM, "out of memory");
	}
	hp_node_release(n);
	n->op = NULL;
	free(n->op_type);
	free(n->domain);
	n->op_type = t;
	n->domain = d;
	return 0;
}

int hp_fz_attr_int(struct hp_graph *g, int node, const char *name, int64_t v)
{
	struct hp_attr a = { .name = (char *)name, .type = HP_ATTR_INT, .i = v };

	return hp_graph_add_attr(g, node, &a);
}

int hp_fz_attr_float(struct hp_graph *g, int node, const char *name, float v)
{
	struct hp_attr a = { .name = (char *)name, .type = HP_ATTR_FLOAT, .f = v };

	return hp_graph_add_attr(g, node, &a);
}

int hp_fz_attr_str(struct hp_graph *g, int node, const char *name, const char *v)
{
	struct hp_attr a = { .name = (char *)name, .type = HP_ATTR_STRING, .s = (char *)v, .slen = strlen(v) };

	return hp_graph_add_attr(g, node, &a);
}

int hp_fz_attr_ints(struct hp_graph *g, int node, const char *name, const int64_t *v, int n)
{
	struct hp_attr a = { .name = (char *)name, .type = HP_ATTR_INTS, .ints = (int64_t *)v, .n = n };

	return hp_graph_add_attr(g, node, &a);
}

static int cmp_desc(const void *a, const void *b)
{
	return *(const int *)b - *(const int *)a;
}

void hp_fz_remove(struct hp_graph *g, int *nodes, int n)
{
	qsort(nodes, (size_t)n, sizeof *nodes, cmp_desc);
	for (int i = 0; i < n; i++)
		if (nodes[i] >= 0 && (i == 0 || nodes[i] != nodes[i - 1]))
			hp_graph_remove_node(g, nodes[i]);
}

/* Whether any node reads value v. */
static int read_by_any(const struct hp_graph *g, int v)
{
	for (int i = 0; i < g->nnodes; i++)
		for (int j = 0; j < g->nodes[i].ninputs; j++)
			if (g->nodes[i].inputs[j] == v)
				return 1;
	return 0;
}

void hp_fz_remove_dead(struct hp_graph *g)
{
	for (int i = g->nnodes - 1; i >= 0; i--) {
		const struct hp_node *n = &g->nodes[i];
		int dead = hp_fz_is(n, "Transpose") || hp_fz_is(n, "Reshape");
		for (int o = 0; o < n->noutputs && dead; o++)
			dead = n->outputs[o] < 0 || (!g->values[n->outputs[o]].is_output && !read_by_any(g, n->outputs[o]));
		if (dead)
			hp_graph_remove_node(g, i);
	}
}

static int pattern_slot(struct hp_fuse_report *r, const char *pattern)
{
	char **p;
	int *c;

	for (int i = 0; i < r->npatterns; i++)
		if (!strcmp(r->patterns[i], pattern))
			return i;
	if (!(p = realloc(r->patterns, (size_t)(r->npatterns + 1) * sizeof *p)))
		return -1;
	r->patterns = p;
	if (!(c = realloc(r->counts, (size_t)(r->npatterns + 1) * sizeof *c)))
		return -1;
	r->counts = c;
	if (!(p[r->npatterns] = strdup(pattern)))
		return -1;
	c[r->npatterns] = 0;
	return r->npatterns++;
}

void hp_fz_note(struct hp_fuse_report *r, const char *pattern, const char *line)
{
	int s = pattern_slot(r, pattern);
	char **l;

	if (s >= 0)
		r->counts[s]++;
	r->nfused++;
	if (!(l = realloc(r->lines, (size_t)r->nfused * sizeof *l))) {
		r->nfused--;
		return;
	}
	r->lines = l;
	l[r->nfused - 1] = strdup(line);
}

int hp_fz_spill(struct hp_graph *g, int *fd, uint64_t *at)
{
	const char *tmp = getenv("TMPDIR");
	char path[64], tpl[4200];
	struct stat st;
	char **p;

	for (int i = g->nfiles - 1; i > 0; i--) /* the graph's own, made earlier */
		if (!strncmp(g->files[i], "/proc/self/fd/", 14) && fstat(*fd = atoi(g->files[i] + 14), &st) == 0) {
			*at = ((uint64_t)st.st_size + 4095) / 4096 * 4096;
			return i;
		}
	snprintf(tpl, sizeof tpl, "%s", tmp && *tmp ? tmp : "/tmp");
	if ((*fd = open(tpl, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600)) < 0) {
		snprintf(tpl, sizeof tpl, "%s/hpdlf-const-XXXXXX", tmp && *tmp ? tmp : "/tmp");
		if ((*fd = mkostemp(tpl, O_CLOEXEC)) < 0)
			return hp_error(-errno, "folding weights under a budget: cannot create a file in %s: %s",
					tmp && *tmp ? tmp : "/tmp", strerror(errno));
		unlink(tpl);
	}
	snprintf(path, sizeof path, "/proc/self/fd/%d", *fd);
	if (!(p = realloc(g->files, (size_t)(g->nfiles + 1) * sizeof *g->files)) || !(p[g->nfiles] = strdup(path))) {
		if (p)
			g->files = p;
		close(*fd);
		return hp_error(-ENOMEM, "out of memory");
	}
	g->files = p;
	*at = 0;
	return g->nfiles++;
}

int hp_fz_read_at(int fd, const char *path, const struct hp_value *x, uint64_t at, void *dst, size_t len)
{
	ssize_t got = pread(fd, dst, len, (off_t)(x->src.offset + at));

	if (got == (ssize_t)len)
		return 0;
	return hp_error(got < 0 ? -errno : -EIO, "%s: initializer '%s': %s", path, x->name,
			got < 0 ? strerror(errno) : "short read");
}

int hp_fz_write_at(int fd, uint64_t at, const void *src, size_t len, const char *what)
{
	for (size_t done = 0; done < len;) {
		ssize_t w = pwrite(fd, (const char *)src + done, len - done, (off_t)(at + done));
		if (w <= 0)
			return hp_error(w < 0 ? -errno : -ENOSPC, "folding '%s' under a budget: writing it to $TMPDIR: %s",
					what, w < 0 ? strerror(errno) : "no space");
		done += (size_t)w;
	}
	return 0;
}

int hp_fz_past_identity(const struct hp_graph *g, int v)
{
	for (int hops = 0; hops < 16 && v >= 0; hops++) {
		int p = hp_fz_producer(g, v, "Identity");
		if (p < 0 || g->nodes[p].ninputs != 1 || g->nodes[p].inputs[0] < 0)
			break;
		v = g->nodes[p].inputs[0];
	}
	return v;
}

const float *hp_fz_load_f32(const struct hp_graph *g, int v, float **own)
{
	*own = NULL;
	if (g->values[v].data)
		return g->values[v].data;
	if (!(*own = malloc((size_t)hp_shape_numel(&g->values[v].shape) * sizeof **own + 1)))
		return NULL;
	if (hp_graph_read_init(g, v, *own) < 0) {
		free(*own);
		return *own = NULL;
	}
	return *own;
}

int hp_fz_new_value(struct hp_graph *g, int like, const char *what)
{
	char name[512];

	snprintf(name, sizeof name, "%s.%s", g->values[like].name, what);
	for (int i = 1; hp_graph_find_value(g, name) >= 0; i++)
		snprintf(name, sizeof name, "%s.%s#%d", g->values[like].name, what, i);
	return hp_graph_add_value(g, name, HP_VALUE_ACTIVATION, HP_UNDEFINED, NULL);
}
