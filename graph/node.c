/* Reading a node: its attributes by name, and errors that name it. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "hpdlf/error.h"
#include "hpdlf/graph.h"

const struct hp_attr *hp_node_attr(const struct hp_node *n, const char *name)
{
	for (int i = 0; i < n->nattrs; i++)
		if (!strcmp(n->attrs[i].name, name))
			return &n->attrs[i];
	return NULL;
}

int64_t hp_attr_int(const struct hp_node *n, const char *name, int64_t dflt)
{
	const struct hp_attr *a = hp_node_attr(n, name);

	return a && a->type == HP_ATTR_INT ? a->i : dflt;
}

float hp_attr_float(const struct hp_node *n, const char *name, float dflt)
{
	const struct hp_attr *a = hp_node_attr(n, name);

	if (a && a->type == HP_ATTR_FLOAT)
		return a->f;
	if (a && a->type == HP_ATTR_INT)
		return (float)a->i;
	return dflt;
}

const char *hp_attr_string(const struct hp_node *n, const char *name, const char *dflt)
{
	const struct hp_attr *a = hp_node_attr(n, name);

	return a && a->type == HP_ATTR_STRING ? a->s : dflt;
}

int hp_attr_ints(const struct hp_node *n, const char *name, const int64_t **v)
{
	const struct hp_attr *a = hp_node_attr(n, name);

	if (!a || a->type != HP_ATTR_INTS)
		return -1;
	*v = a->ints;
	return a->n;
}

int hp_node_error(const struct hp_graph *g, const struct hp_node *n, int err, const char *fmt, ...)
{
	char msg[768];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	return hp_error(err, "%s: node '%s' (%s): %s", g && g->path ? g->path : "model",
			n->name && n->name[0] ? n->name : "?", n->op_type, msg);
}
