/* Building blocks of the normalization rules (normalize.c): attributes
 * found, set and dropped on a node on its way into the graph, constants
 * and the small helper nodes a rewrite adds (shape arithmetic that folds at
 * compile time once input shapes are known). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hpdlf/error.h"
#include "onnx/import.h"

int imp_find_attr(const struct imp_node *n, const char *name)
{
	for (int i = 0; i < n->nattrs; i++)
		if (!n->drop[i] && !strcmp(n->attrs[i].name, name))
			return i;
	return -1;
}

int imp_node_err(struct imp *im, const struct imp_node *n, int err, const char *what, const char *detail)
{
	return hp_error(err, "%s: node '%s' (%s): %s '%s'", im->g->path, n->name, n->op_type, what, detail);
}

int imp_set_slot(struct imp *im, struct imp_node *n, int slot, int v, const char *attr)
{
	if (slot < n->ninputs && n->inputs[slot] >= 0)
		return imp_node_err(im, n, HP_EMODEL, "has both an input and the attribute", attr);
	if (slot >= n->inputs_cap)
		return imp_node_err(im, n, HP_EINTERNAL, "no input slot for", attr);
	while (n->ninputs <= slot)
		n->inputs[n->ninputs++] = -1;
	n->inputs[slot] = v;
	return 0;
}

int imp_const_i64(struct imp *im, const struct imp_node *n, const char *suffix, const int64_t *vals, int count)
{
	struct hp_shape s = { count < 0 ? 0 : 1, { count < 0 ? 1 : count } };
	int64_t *data = malloc((size_t)(count < 0 ? 1 : count) * sizeof *data + 1);
	char name[320];

	if (!data)
		return hp_error(-ENOMEM, "out of memory");
	memcpy(data, vals, (size_t)(count < 0 ? 1 : count) * sizeof *data);
	imp_fresh_name(im, n->name, suffix, name, sizeof name);
	return imp_add_constant(im, name, HP_I64, &s, data);
}

int imp_emit(struct imp *im, const struct imp_node *n, const char *suffix, const char *op, int nin, const int *in,
	     int nattrs, const struct hp_attr *attrs)
{
	char name[320];
	int v, node, rc;

	int *ins = malloc((size_t)(nin ? nin : 1) * sizeof *ins);

	if (!ins)
		return hp_error(-ENOMEM, "out of memory");
	for (int i = 0; i < nin; i++)
		if ((ins[i] = in[i] < -1 ? in[i] : imp_resolve(im, in[i])) < -1) {
			rc = ins[i]; /* an error making that input */
			free(ins);
			return rc;
		}
	imp_fresh_name(im, n->name, suffix, name, sizeof name);
	v = imp_add_value(im, name, HP_VALUE_ACTIVATION, HP_UNDEFINED, NULL);
	node = v < 0 ? v : hp_graph_add_node(im->g, name, op, nin, ins, 1, &v);
	free(ins);
	if (node < 0)
		return node;
	for (int i = 0; i < nattrs; i++)
		if ((rc = hp_graph_add_attr(im->g, node, &attrs[i])) < 0)
			return rc;
	return v;
}

/* Replace or append attribute a (ownership of its allocations moves). */
static int put_attr(struct imp_node *n, struct hp_attr *a)
{
	int i = imp_find_attr(n, a->name), rc;

	if (i >= 0)
		n->drop[i] = 1; /* ours replaces it */
	rc = imp_node_add_attr(n, a);
	if (rc < 0) {
		free(a->name);
		free(a->s);
	}
	return rc;
}

int imp_set_int_attr(struct imp_node *n, const char *name, int64_t v)
{
	struct hp_attr a = { .type = HP_ATTR_INT, .i = v, .name = strdup(name) };

	return a.name ? put_attr(n, &a) : hp_error(-ENOMEM, "out of memory");
}

int imp_set_float_attr(struct imp_node *n, const char *name, float v)
{
	struct hp_attr a = { .type = HP_ATTR_FLOAT, .f = v, .name = strdup(name) };

	return a.name ? put_attr(n, &a) : hp_error(-ENOMEM, "out of memory");
}

int imp_set_string_attr(struct imp_node *n, const char *name, const char *v)
{
	struct hp_attr a = { .type = HP_ATTR_STRING, .slen = strlen(v), .name = strdup(name), .s = strdup(v) };

	if (!a.name || !a.s) {
		free(a.name);
		free(a.s);
		return hp_error(-ENOMEM, "out of memory");
	}
	return put_attr(n, &a);
}
