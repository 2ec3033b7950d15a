#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hpdlf/error.h"
#include "tests/kernels/harness.h"

struct hp_attr kt_int(const char *name, int64_t v)
{
	return (struct hp_attr){ .name = (char *)name, .type = HP_ATTR_INT, .i = v };
}

struct hp_attr kt_float(const char *name, float v)
{
	return (struct hp_attr){ .name = (char *)name, .type = HP_ATTR_FLOAT, .f = v };
}

struct hp_attr kt_string(const char *name, const char *s)
{
	return (struct hp_attr){ .name = (char *)name, .type = HP_ATTR_STRING, .s = (char *)s, .slen = strlen(s) };
}

struct hp_attr kt_ints(const char *name, int n, const int64_t *v)
{
	return (struct hp_attr){ .name = (char *)name, .type = HP_ATTR_INTS, .n = n, .ints = (int64_t *)v };
}

struct hp_attr kt_floats(const char *name, int n, const float *v)
{
	return (struct hp_attr){ .name = (char *)name, .type = HP_ATTR_FLOATS, .n = n, .floats = (float *)v };
}

static int add_inputs(struct hp_graph *g, const struct kt_case *c, int *ids)
{
	char name[32];

	g->inputs = calloc((size_t)c->nin + 1, sizeof(int));
	for (int i = 0; i < c->nin; i++) {
		const struct hp_tensor *t = &c->in[i];
		int constant = (c->const_mask >> i) & 1;
		if (!t->data) {
			ids[i] = -1;
			continue;
		}
		snprintf(name, sizeof name, "in%d", i);
		ids[i] = hp_graph_add_value(g, name, constant ? HP_VALUE_CONSTANT : HP_VALUE_INPUT, t->dtype,
					    &t->shape);
		if (ids[i] < 0)
			return ids[i];
		if (constant) {
			size_t b = hp_tensor_bytes(t);
			struct hp_value *v = &g->values[ids[i]];
			v->data = malloc(b ? b : 1);
			memcpy(v->data, t->data, b);
			v->src.kind = HP_BLOB_MEMORY;
		} else {
			g->inputs[g->ninputs++] = ids[i];
		}
	}
	return 0;
}

static int run_node(struct hp_graph *g, const struct kt_case *c, struct hp_tensor *out)
{
	struct hp_node *n = &g->nodes[0];
	struct hp_tensor in[c->nin + 1];
	struct hp_kargs a = { .nin = c->nin, .in = in, .nout = c->nout, .out = out, .pool = c->pool };
	int rc;

	for (int i = 0; i < c->nin; i++)
		in[i] = c->in[i];
	for (int o = 0; o < c->nout; o++) {
		const struct hp_value *v = &g->values[n->outputs[o]];
		rc = hp_tensor_alloc(&out[o], v->dtype, &v->shape);
		if (rc < 0)
			return rc;
		if (v->data)
			memcpy(out[o].data, v->data, hp_tensor_bytes(&out[o]));
	}
	if (n->folded)
		return 0;
	/* Poison outputs so a kernel that forgets to write an element fails. */
	for (int o = 0; o < c->nout; o++)
		memset(out[o].data, 0xa5, hp_tensor_bytes(&out[o]));
	a.ws_size = n->workspace;
	a.ws = n->workspace ? aligned_alloc(64, (n->workspace + 63) / 64 * 64) : NULL;
	rc = n->op->run(n, &a);
	free(a.ws);
	return rc;
}

int kt_run(const struct kt_case *c, struct hp_tensor *out)
{
	struct hp_graph *g = hp_graph_new("test");
	int ids[c->nin + 1], oids[c->nout + 1], rc, node;
	char name[32];

	memset(out, 0, (size_t)c->nout * sizeof *out);
	if (!g)
		return -1;
	if (c->opset)
		g->opset = c->opset;
	rc = add_inputs(g, c, ids);
	if (rc < 0)
		goto out;
	g->outputs = calloc((size_t)c->nout + 1, sizeof(int));
	for (int o = 0; o < c->nout; o++) {
		snprintf(name, sizeof name, "out%d", o);
		oids[o] = hp_graph_add_value(g, name, HP_VALUE_ACTIVATION, HP_UNDEFINED, NULL);
		g->outputs[g->noutputs++] = oids[o];
	}
	node = hp_graph_add_node(g, "node0", c->op, c->nin, ids, c->nout, oids);
	if (node < 0) {
		rc = node;
		goto out;
	}
	if (c->domain) {
		free(g->nodes[node].domain);
		g->nodes[node].domain = strdup(c->domain);
	}
	for (int i = 0; i < c->nattrs; i++)
		if ((rc = hp_graph_add_attr(g, node, &c->attrs[i])) < 0)
			goto out;
	rc = hp_graph_finalize(g);
	if (rc == 0)
		rc = hp_graph_infer(g);
	if (rc == 0)
		rc = run_node(g, c, out);
out:
	if (rc < 0)
		for (int o = 0; o < c->nout; o++)
			hp_tensor_free(&out[o]);
	hp_graph_free(g);
	return rc;
}

struct hp_tensor kt_tensor(enum hp_dtype dt, int rank, const int64_t *dims)
{
	struct hp_tensor t;
	struct hp_shape s = { .rank = rank };

	memcpy(s.dims, dims, (size_t)rank * sizeof *dims);
	if (hp_tensor_alloc(&t, dt, &s) < 0)
		abort();
	return t;
}

void kt_fill_random(struct hp_tensor *t, unsigned seed, float lo, float hi)
{
	int64_t n = hp_shape_numel(&t->shape);
	uint64_t x = seed * 6364136223846793005ull + 1442695040888963407ull;

	for (int64_t i = 0; i < n; i++) {
		x = x * 6364136223846793005ull + 1442695040888963407ull;
		double u = (double)(x >> 11) / (double)(1ull << 53);
		if (t->dtype == HP_F32)
			((float *)t->data)[i] = (float)(lo + (hi - lo) * u);
		else if (t->dtype == HP_I64)
			((int64_t *)t->data)[i] = (int64_t)floor(lo + (hi - lo) * u);
		else if (t->dtype == HP_F64)
			((double *)t->data)[i] = lo + (hi - lo) * u;
	}
}

double kt_rel_err(const struct hp_tensor *a, const struct hp_tensor *b)
{
	int64_t n = hp_shape_numel(&b->shape);
	double err = 0, scale = 1;

	if (!hp_shape_equal(&a->shape, &b->shape) || a->dtype != b->dtype)
		return -1;
	for (int64_t i = 0; i < n; i++) {
		double x = ((const float *)a->data)[i], y = ((const float *)b->data)[i];
		if (isnan(x) != isnan(y))
			return INFINITY;
		if (!isnan(x) && fabs(x - y) > err)
			err = fabs(x - y);
		if (fabs(y) > scale)
			scale = fabs(y);
	}
	return err / scale;
}
