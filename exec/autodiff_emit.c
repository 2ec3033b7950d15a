/* The helpers gradient rules (autodiff_rules.c) and the driver
 * (autodiff.c) use to append nodes and record contributions: a leaf of
 * their own, so that the rules never call back into the file that calls
 * them. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hpdlf/error.h"
#include "common/name.h"
#include "exec/autodiff_internal.h"

struct hp_attr ad_int(const char *name, int64_t v)
{
	return (struct hp_attr){ .name = (char *)name, .type = HP_ATTR_INT, .i = v };
}

struct hp_attr ad_float(const char *name, float v)
{
	return (struct hp_attr){ .name = (char *)name, .type = HP_ATTR_FLOAT, .f = v };
}

struct hp_attr ad_str(const char *name, const char *s)
{
	return (struct hp_attr){ .name = (char *)name, .type = HP_ATTR_STRING, .s = (char *)s, .slen = strlen(s) };
}

struct hp_attr ad_ints(const char *name, int n, const int64_t *v)
{
	return (struct hp_attr){ .name = (char *)name, .type = HP_ATTR_INTS, .n = n, .ints = (int64_t *)v };
}

struct hp_attr ad_shape(const char *name, const struct hp_shape *s)
{
	return ad_ints(name, s->rank, s->dims);
}

int ad_copy_attr(const struct hp_node *n, const char *name, struct hp_attr *out)
{
	const struct hp_attr *a = hp_node_attr(n, name);

	if (!a)
		return 0;
	*out = *a;
	return 1;
}

int ad_new_value(struct ad *ad, const char *name, enum hp_value_kind kind, enum hp_dtype dt,
		     const struct hp_shape *s)
{
	char buf[256];
	struct hp_name b;

	hp_name_init(&b, buf, sizeof buf); /* "%s#%d" */
	hp_name_str(&b, name);
	hp_name_mem(&b, "#", 1);
	hp_name_int(&b, ad->counter++);
	return hp_graph_add_value(ad->g, buf, kind, dt, s);
}

int ad_emit(struct ad *ad, const char *op, int internal, const char *hint, int nin, const int *in, int nout,
	    int *out, int nattrs, const struct hp_attr *attrs)
{
	char name[256];
	struct hp_name b;
	int node, rc;

	for (int o = 0; o < nout; o++) {
		if (!out[o]) {
			out[o] = -1;
			continue;
		}
		hp_name_init(&b, name, sizeof name); /* "%s/%s.%d" */
		hp_name_str(&b, hint);
		hp_name_mem(&b, "/", 1);
		hp_name_str(&b, op);
		hp_name_mem(&b, ".", 1);
		hp_name_int(&b, o);
		out[o] = ad_new_value(ad, name, HP_VALUE_ACTIVATION, HP_UNDEFINED, NULL);
		if (out[o] < 0)
			return out[o];
	}
	hp_name_init(&b, name, sizeof name); /* "%s/%s#%d" */
	hp_name_str(&b, hint);
	hp_name_mem(&b, "/", 1);
	hp_name_str(&b, op);
	hp_name_mem(&b, "#", 1);
	hp_name_int(&b, ad->counter++);
	node = hp_graph_add_node(ad->g, name, op, nin, in, nout, out);
	if (node < 0)
		return node;
	ad->g->nodes[node].sched = ad->sched;
	if (internal) {
		char *d = strdup("ai.hpdlf");
		if (!d)
			return hp_error(-ENOMEM, "out of memory");
		free(ad->g->nodes[node].domain);
		ad->g->nodes[node].domain = d;
	}
	for (int i = 0; i < nattrs; i++)
		if ((rc = hp_graph_add_attr(ad->g, node, &attrs[i])) < 0)
			return rc;
	return node;
}

int ad_contrib(struct ad *ad, int v, int gv)
{
	if (v < 0 || v >= ad->nv0 || gv < 0 || !ad->need[v])
		return 0;
	if (ad->ncontrib[v] == ad->capcontrib[v]) {
		int cap = ad->capcontrib[v] ? 2 * ad->capcontrib[v] : 2;
		int *p = realloc(ad->contrib[v], (size_t)cap * sizeof *p);
		if (!p)
			return hp_error(-ENOMEM, "out of memory");
		ad->contrib[v] = p;
		ad->capcontrib[v] = cap;
	}
	ad->contrib[v][ad->ncontrib[v]++] = gv;
	return 0;
}

int ad_needs(const struct ad *ad, const struct hp_node *n, int i)
{
	return i < n->ninputs && n->inputs[i] >= 0 && n->inputs[i] < ad->nv0 && ad->need[n->inputs[i]];
}

/* Emit op with the given inputs; outputs requested for inputs `want[o]` of
 * the forward node (-1: not requested), whose gradients they become. */
int ad_emit_to(struct ad *ad, const struct hp_node *n, const char *op, int nin, const int *in, int nout,
	       const int *want, int nattrs, const struct hp_attr *a)
{
	int out[nout + 1], rc, any = 0;

	for (int o = 0; o < nout; o++) {
		out[o] = want[o] >= 0 && ad_needs(ad, n, want[o]);
		any |= out[o];
	}
	if (!any)
		return 0;
	rc = ad_emit(ad, op, 1, n->name, nin, in, nout, out, nattrs, a);
	for (int o = 0; rc >= 0 && o < nout; o++)
		if (out[o] >= 0)
			rc = ad_contrib(ad, n->inputs[want[o]], out[o]);
	return rc < 0 ? rc : 0;
}

/* Constant integer input as int64 (int32 converted); count or -1. */
int ad_const_ints(const struct ad *ad, int v, int64_t *dst, int max)
{
	const struct hp_value *val = v >= 0 ? &ad->g->values[v] : NULL;
	int64_t k = val ? hp_shape_numel(&val->shape) : 0;

	if (!val || !val->data || (val->dtype != HP_I64 && val->dtype != HP_I32) || k > max)
		return -1;
	for (int64_t i = 0; i < k; i++)
		dst[i] = val->dtype == HP_I64 ? ((const int64_t *)val->data)[i] : ((const int32_t *)val->data)[i];
	return (int)k;
}

int ad_no_grad(struct ad *ad, const struct hp_node *n, const char *why)
{
	return hp_node_error(ad->g, n, HP_EUNSUPPORTED, "cannot differentiate: %s", why);
}
