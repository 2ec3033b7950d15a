/* Graph building, a small executor and the central-difference gradient
 * check shared by the autodiff tests (test_autodiff.c, test_autodiff_ext.c). */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "ad_harness.h"
#include "hpdlf/error.h"
#include "hpdlf/kernels.h"

/* ---- graph building -------------------------------------------------- */

struct hp_shape shp(int rank, ...)
{
	struct hp_shape s = { .rank = rank };
	va_list ap;

	va_start(ap, rank);
	for (int i = 0; i < rank; i++)
		s.dims[i] = va_arg(ap, int);
	va_end(ap);
	return s;
}

int value(struct hp_graph *g, const char *name, enum hp_value_kind kind, enum hp_dtype dt, struct hp_shape s)
{
	int v = hp_graph_add_value(g, name, kind, dt, &s);

	assert_true(v >= 0);
	if (kind == HP_VALUE_INPUT) {
		g->inputs = realloc(g->inputs, (size_t)(g->ninputs + 1) * sizeof(int));
		g->inputs[g->ninputs++] = v;
	}
	return v;
}

/* Float initializer filled from a fixed LCG, trainable. */
int param(struct hp_graph *g, const char *name, struct hp_shape s, unsigned seed, float lo, float hi)
{
	int v = value(g, name, HP_VALUE_INITIALIZER, HP_F32, s);
	int64_t n = hp_shape_numel(&s);
	float *d = malloc((size_t)n * sizeof *d);
	uint64_t x = seed * 2654435761u + 1;

	for (int64_t i = 0; i < n; i++) {
		x = x * 6364136223846793005ull + 1442695040888963407ull;
		d[i] = lo + (hi - lo) * (float)((double)(x >> 11) / 9007199254740992.0);
	}
	g->values[v].data = d;
	g->values[v].src.kind = HP_BLOB_MEMORY;
	g->values[v].trainable = 1;
	return v;
}

int const_i64(struct hp_graph *g, const char *name, int n, const int64_t *vals)
{
	int v = value(g, name, HP_VALUE_CONSTANT, HP_I64, shp(1, n));
	int64_t *d = malloc((size_t)n * sizeof *d);

	memcpy(d, vals, (size_t)n * sizeof *d);
	g->values[v].data = d;
	g->values[v].src.kind = HP_BLOB_MEMORY;
	return v;
}

int act(struct hp_graph *g, const char *name)
{
	return hp_graph_add_value(g, name, HP_VALUE_ACTIVATION, HP_UNDEFINED, NULL);
}

int node(struct hp_graph *g, const char *op, int nin, const int *in, int out, int nattrs,
		const struct hp_attr *a)
{
	int k = hp_graph_add_node(g, op, op, nin, in, 1, &out);

	assert_true(k >= 0);
	for (int i = 0; i < nattrs; i++)
		assert_int_equal(hp_graph_add_attr(g, k, &a[i]), 0);
	return out;
}

void set_output(struct hp_graph *g, int v)
{
	g->outputs = realloc(g->outputs, (size_t)(g->noutputs + 1) * sizeof(int));
	g->outputs[g->noutputs++] = v;
}

/* ---- a small executor -------------------------------------------------- */


static size_t vbytes(const struct hp_value *v)
{
	struct hp_tensor t = { .dtype = v->dtype, .shape = v->shape };

	return hp_tensor_bytes(&t);
}

void mini_init(struct mini *m, struct hp_graph *g)
{
	m->g = g;
	m->buf = calloc((size_t)g->nvalues, sizeof *m->buf);
	for (int v = 0; v < g->nvalues; v++) {
		const struct hp_value *val = &g->values[v];
		if (val->kind != HP_VALUE_INITIALIZER && val->kind != HP_VALUE_INPUT)
			continue;
		m->buf[v] = calloc(1, vbytes(val) + 8);
		if (val->data)
			memcpy(m->buf[v], val->data, vbytes(val));
	}
}

void *mini_data(struct mini *m, int v)
{
	return m->buf[v] ? m->buf[v] : m->g->values[v].data;
}

void mini_run(struct mini *m)
{
	struct hp_graph *g = m->g;

	for (int i = 0; i < g->nnodes; i++) {
		const struct hp_node *n = &g->nodes[i];
		struct hp_tensor in[n->ninputs + 1], out[n->noutputs + 1];
		struct hp_kargs a = { .nin = n->ninputs, .nout = n->noutputs, .in = in, .out = out };
		if (n->folded)
			continue;
		for (int j = 0; j < n->ninputs; j++) {
			int v = n->inputs[j];
			in[j] = (struct hp_tensor){ 0 };
			if (v >= 0)
				in[j] = (struct hp_tensor){ g->values[v].dtype, g->values[v].shape, mini_data(m, v) };
		}
		for (int o = 0; o < n->noutputs; o++) {
			int v = n->outputs[o];
			out[o] = (struct hp_tensor){ 0 };
			if (v < 0)
				continue;
			if (!m->buf[v])
				m->buf[v] = calloc(1, vbytes(&g->values[v]) + 8);
			out[o] = (struct hp_tensor){ g->values[v].dtype, g->values[v].shape, m->buf[v] };
		}
		a.ws_size = n->workspace;
		a.ws = n->workspace ? aligned_alloc(64, (n->workspace + 63) / 64 * 64) : NULL;
		if (n->op->run(n, &a) < 0)
			fail_msg("node %s: %s", n->name, hp_errmsg());
		free(a.ws);
	}
}

void mini_carry(struct mini *m)
{
	for (int v = 0; v < m->g->nvalues; v++) {
		int nx = m->g->values[v].next;
		if (nx >= 0) {
			void *t = m->buf[v];
			m->buf[v] = m->buf[nx];
			m->buf[nx] = t;
		}
	}
}

void mini_free(struct mini *m)
{
	for (int v = 0; v < m->g->nvalues; v++)
		free(m->buf[v]);
	free(m->buf);
}

float loss_of(struct mini *m)
{
	mini_run(m);
	return *(float *)mini_data(m, hp_graph_find_value(m->g, "loss"));
}

/* The update node of parameter p (input 0), or NULL. */
const struct hp_node *update_of(const struct hp_graph *g, int p)
{
	for (int i = 0; i < g->nnodes; i++)
		if (strstr(g->nodes[i].op_type, "Update") && g->nodes[i].inputs[0] == p)
			return &g->nodes[i];
	return NULL;
}

/* Each trainable parameter's gradient against central differences of the
 * loss in float32 (h = 1e-2 keeps rounding noise below the tolerance). */
void check_gradients(struct mini *m, int nparams)
{
	struct hp_graph *g = m->g;
	int checked = 0;

	for (int p = 0; p < g->nvalues; p++) {
		const struct hp_node *u;
		if (!g->values[p].trainable)
			continue;
		u = update_of(g, p);
		assert_non_null(u);
		mini_run(m);
		int64_t n = hp_shape_numel(&g->values[p].shape);
		float *w = m->buf[p], *grad = malloc((size_t)n * sizeof *grad);
		double err = 0, scale = 1e-3;
		memcpy(grad, mini_data(m, u->inputs[1]), (size_t)n * sizeof *grad);
		for (int64_t i = 0; i < n; i++) {
			float s = w[i], h = 1e-2f;
			w[i] = s + h;
			double lp = loss_of(m);
			w[i] = s - h;
			double lm = loss_of(m);
			w[i] = s;
			double fd = (lp - lm) / (2.0 * h);
			err = fmax(err, fabs(fd - grad[i]));
			scale = fmax(scale, fabs(fd));
		}
		if (!(err / scale < 2e-2))
			fail_msg("gradient of '%s': error %.3g (scale %.3g)", g->values[p].name, err, scale);
		free(grad);
		checked++;
	}
	assert_int_equal(checked, nparams);
}

void fill_inputs(struct mini *m, const char *name, unsigned seed, float lo, float hi)
{
	int v = hp_graph_find_value(m->g, name);
	const struct hp_value *val = &m->g->values[v];
	int64_t n = hp_shape_numel(&val->shape);
	uint64_t x = seed;

	for (int64_t i = 0; i < n; i++) {
		x = x * 6364136223846793005ull + 1442695040888963407ull;
		double u = (double)(x >> 11) / 9007199254740992.0;
		if (val->dtype == HP_F32)
			((float *)m->buf[v])[i] = (float)(lo + (hi - lo) * u);
		else
			((int64_t *)m->buf[v])[i] = (int64_t)(lo + (hi - lo) * u);
	}
}

int const_f32(struct hp_graph *g, const char *name, int n, const float *vals)
{
	int v = value(g, name, HP_VALUE_CONSTANT, HP_F32, shp(1, n));
	float *d = malloc((size_t)n * sizeof *d);

	memcpy(d, vals, (size_t)n * sizeof *d);
	g->values[v].data = d;
	g->values[v].src.kind = HP_BLOB_MEMORY;
	return v;
}

struct hp_attr str_attr(const char *name, const char *s)
{
	return (struct hp_attr){ .name = (char *)name, .type = HP_ATTR_STRING, .s = (char *)s, .slen = strlen(s) };
}
