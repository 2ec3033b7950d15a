/* If, Loop and Scan: control flow folded away on import.
 *
 * hpdlf plans a static graph (memory, paging, bands), so a subgraph is not
 * run by an interpreter: when the condition or trip count is a constant of
 * the model (a Constant node, or scalar integer arithmetic and comparisons
 * of constants such as a loop's i < n), the chosen branch is
 * inlined, or the body unrolled, into the parent graph.  Scan's length is
 * the declared size of its scan inputs.  Each inlined copy's local names get
 * a fresh prefix; names a subgraph does not define are outer-scope
 * references, looked up through the enclosing copies' names (a scope chain,
 * so nested control flow sees its parents' renamed values).  An If or Loop
 * whose condition or trip count is not known yet is deferred to shape
 * inference (control_defer.c); what would need the decision at run time is
 * refused then, with one error naming the node and the reason.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hpdlf/error.h"
#include "onnx/import.h"

/* Unrolling stops being sensible somewhere: nodes an unrolled Loop or Scan
 * may add. */
#define MAX_UNROLLED_NODES (1 << 18)

struct imp_scope {
	struct imp_scope *up;
	int n, cap;
	char **from, **to;
};

static const char *scope_map(const struct imp_scope *s, const char *name)
{
	for (; s; s = s->up)
		for (int i = s->n - 1; i >= 0; i--)
			if (!strcmp(s->from[i], name))
				return s->to[i];
	return name;
}

static int scope_put(struct imp_scope *s, const char *from, const char *to)
{
	if (s->n == s->cap) {
		int cap = s->cap ? 2 * s->cap : 16;
		char **f = realloc(s->from, (size_t)cap * sizeof *f), **t;

		if (f)
			s->from = f;
		t = f ? realloc(s->to, (size_t)cap * sizeof *t) : NULL;
		if (!t)
			return hp_error(-ENOMEM, "out of memory");
		s->to = t;
		s->cap = cap;
	}
	s->from[s->n] = strdup(from);
	s->to[s->n] = strdup(to);
	if (!s->from[s->n] || !s->to[s->n]) {
		free(s->from[s->n]);
		free(s->to[s->n]);
		return hp_error(-ENOMEM, "out of memory");
	}
	s->n++;
	return 0;
}

static void scope_free(struct imp_scope *s)
{
	for (int i = 0; i < s->n; i++) {
		free(s->from[i]);
		free(s->to[i]);
	}
	free(s->from);
	free(s->to);
}

const char *imp_scope_map(const struct imp *im, const char *name)
{
	return scope_map(im->scope, name);
}

struct imp_scope *imp_scope_new(void)
{
	return calloc(1, sizeof(struct imp_scope));
}

int imp_scope_bind(struct imp_scope *s, const char *from, const char *to)
{
	return scope_put(s, from, to);
}

void imp_scope_free(struct imp_scope *s)
{
	if (s)
		scope_free(s);
	free(s);
}

/* ---- constants ------------------------------------------------------------ */

/* The producer of v among the nodes added so far, or -1. */
static int producer_of(const struct hp_graph *g, int v)
{
	for (int n = g->nnodes - 1; n >= 0; n--)
		for (int o = 0; o < g->nodes[n].noutputs; o++)
			if (g->nodes[n].outputs[o] == v)
				return n;
	return -1;
}

static int const_at(const struct hp_graph *g, int v, int64_t *out, int depth);

/* Scalar integer and boolean arithmetic a loop's condition is typically
 * made of (i < n, not done, i + 1 == n), folded here. */
static int fold_op(const char *op, int64_t a, int64_t b, int64_t *out)
{
	static const char *const ops[] = { "Add", "Sub", "Mul", "Equal", "Less", "Greater", "LessOrEqual",
					   "GreaterOrEqual", "And", "Or", "Xor" };
	const int64_t r[] = { a + b, a - b, a * b, a == b, a < b, a > b, a <= b, a >= b, a && b, a || b, !a != !b };

	for (size_t k = 0; k < sizeof ops / sizeof *ops; k++)
		if (!strcmp(op, ops[k])) {
			*out = r[k];
			return 1;
		}
	return 0;
}

/* Cast's target type. */
static int64_t cast_to(const struct hp_node *n)
{
	for (int i = 0; i < n->nattrs; i++)
		if (!strcmp(n->attrs[i].name, "to"))
			return n->attrs[i].i;
	return 0;
}

/* v's producer folded from its constant scalar inputs. */
static int fold_node(const struct hp_graph *g, int v, int64_t *out, int depth)
{
	const struct hp_node *n;
	int p = producer_of(g, v);
	int64_t a, b = 0;

	if (p < 0)
		return 0;
	n = &g->nodes[p];
	if (n->ninputs < 1 || n->ninputs > 2 || !const_at(g, n->inputs[0], &a, depth + 1) ||
	    (n->ninputs == 2 && !const_at(g, n->inputs[1], &b, depth + 1)))
		return 0;
	if (n->ninputs == 1) {
		/* Cast to an integer or bool keeps the value (bool: non-zero) */
		if (!strcmp(n->op_type, "Not"))
			*out = !a;
		else if (!strcmp(n->op_type, "Identity"))
			*out = a;
		else if (!strcmp(n->op_type, "Cast"))
			*out = cast_to(n) == HP_BOOL ? a != 0 : a;
		else
			return 0;
		return 1;
	}
	return fold_op(n->op_type, a, b, out);
}

static int const_at(const struct hp_graph *g, int v, int64_t *out, int depth)
{
	const struct hp_value *val = v >= 0 ? &g->values[v] : NULL;

	if (!val || depth > 64)
		return 0;
	if (val->kind == HP_VALUE_CONSTANT && val->data && hp_shape_numel(&val->shape) == 1) {
		if (val->dtype == HP_I64)
			*out = *(const int64_t *)val->data;
		else if (val->dtype == HP_I32)
			*out = *(const int32_t *)val->data;
		else if (val->dtype == HP_BOOL || val->dtype == HP_U8)
			*out = *(const uint8_t *)val->data != 0;
		else
			return 0;
		return 1;
	}
	return val->kind == HP_VALUE_ACTIVATION && fold_node(g, v, out, depth);
}

/* The value of scalar (one-element) integer or bool v if the model fixes
 * it: a constant, or scalar arithmetic of constants (fold_op).  1: *out
 * set; 0: known only at run time. */
static int const_scalar(const struct hp_graph *g, int v, int64_t *out)
{
	return const_at(g, v, out, 0);
}

static int new_const(struct imp *im, const char *base, const char *suffix, enum hp_dtype dt, int64_t x)
{
	struct hp_shape scalar = { .rank = 0 };
	char name[320];
	void *data = malloc(8);

	if (!data)
		return hp_error(-ENOMEM, "out of memory");
	if (dt == HP_BOOL)
		*(uint8_t *)data = x != 0;
	else
		*(int64_t *)data = x;
	imp_fresh_name(im, base, suffix, name, sizeof name);
	return imp_add_constant(im, name, dt, &scalar, data);
}

/* ---- inlining ------------------------------------------------------------- */

/* Node input i's value, or -1 when omitted. */
static int node_input(struct imp *im, const Onnx__NodeProto *np, size_t i)
{
	if (i >= np->n_input || !np->input[i] || !*np->input[i])
		return -1;
	return imp_find(im, np->input[i]);
}

/* A subgraph initializer: a constant (its bytes are embedded in the node). */
static int body_initializer(struct imp *im, const Onnx__TensorProto *t, const char *to)
{
	struct imp_raw raw = { .present = t->has_raw_data, .p = t->raw_data.data ? t->raw_data.data : (const uint8_t *)"",
			       .len = t->raw_data.len };
	struct hp_tensor x = { 0 };
	int rc = imp_tensor_load(im, t, &raw, to, &x);

	if (rc == 0 && (rc = imp_tensor_widen(im, &x, to)) < 0)
		free(x.data); /* half precision is computed in float32 */
	return rc < 0 ? rc : imp_add_constant(im, to, x.dtype, &x.shape, x.data);
}

/* Local names of body: inputs bound to `bind` (parent value names),
 * initializers and node outputs to fresh names under prefix. */
static int bind_locals(struct imp *im, const Onnx__GraphProto *body, const char *prefix, const char *const *bind,
		       struct imp_scope *s)
{
	char name[320];
	int rc = 0;

	for (size_t i = 0; rc == 0 && i < body->n_input; i++)
		rc = scope_put(s, body->input[i]->name ? body->input[i]->name : "", bind[i]);
	for (size_t i = 0; rc == 0 && i < body->n_initializer; i++) {
		imp_fresh_name(im, prefix, body->initializer[i]->name ? body->initializer[i]->name : "init", name,
			       sizeof name);
		rc = body_initializer(im, body->initializer[i], name);
		rc = rc < 0 ? rc : scope_put(s, body->initializer[i]->name ? body->initializer[i]->name : "", name);
	}
	for (size_t i = 0; rc == 0 && i < body->n_node; i++)
		for (size_t o = 0; rc == 0 && o < body->node[i]->n_output; o++) {
			const char *local = body->node[i]->output[o];
			if (!local || !*local)
				continue;
			imp_fresh_name(im, prefix, local, name, sizeof name);
			rc = imp_add_value(im, name, HP_VALUE_ACTIVATION, HP_UNDEFINED, NULL);
			rc = rc < 0 ? rc : scope_put(s, local, name);
		}
	return rc < 0 ? rc : 0;
}

/* A copy of body node np with its names mapped through scope s. */
static int add_body_node(struct imp *im, const Onnx__NodeProto *np, const char *prefix, size_t index,
			 struct imp_scope *s)
{
	Onnx__NodeProto copy = *np;
	char **in = calloc(np->n_input + 1, sizeof *in), **out = calloc(np->n_output + 1, sizeof *out);
	char name[320];
	int rc = -ENOMEM;

	if (!in || !out)
		goto done;
	for (size_t i = 0; i < np->n_input; i++)
		in[i] = (char *)(np->input[i] && *np->input[i] ? scope_map(s, np->input[i]) : "");
	for (size_t o = 0; o < np->n_output; o++)
		out[o] = (char *)(np->output[o] && *np->output[o] ? scope_map(s, np->output[o]) : "");
	if (np->name && *np->name)
		snprintf(name, sizeof name, "%s/%s", prefix, np->name);
	else
		snprintf(name, sizeof name, "%s/%.60s_%zu", prefix, np->op_type ? np->op_type : "", index);
	copy.input = in;
	copy.output = out;
	copy.name = name;
	im->scope = s; /* nested subgraphs resolve their outer names through ours */
	rc = imp_add_node(im, &copy, index);
	im->scope = s->up;
done:
	free(in);
	free(out);
	return rc == -ENOMEM ? hp_error(rc, "out of memory") : rc;
}

/* Inline one copy of body; outs[k] receives the value of body output k. */
static int inline_body(struct imp *im, const Onnx__GraphProto *body, const char *prefix, const char *const *bind,
		       int *outs)
{
	struct imp_scope s = { .up = im->scope };
	int rc = bind_locals(im, body, prefix, bind, &s);

	for (size_t i = 0; rc == 0 && i < body->n_node; i++)
		rc = add_body_node(im, body->node[i], prefix, i, &s);
	for (size_t k = 0; rc == 0 && k < body->n_output; k++) {
		const char *local = body->output[k]->name ? body->output[k]->name : "";
		if ((outs[k] = imp_find(im, scope_map(&s, local))) < 0)
			rc = hp_error(HP_EMODEL, "%s: %s: subgraph output '%s' is not defined", im->g->path, prefix, local);
	}
	scope_free(&s);
	return rc;
}

/* Declared node output `name` takes the value of src. */
static int connect(struct imp *im, const char *node, const char *name, int src)
{
	int dst = name && *name ? imp_find(im, name) : -1;
	char nn[320];

	if (dst < 0)
		return 0; /* an omitted output */
	if ((src = imp_resolve(im, src)) < 0)
		return src;
	snprintf(nn, sizeof nn, "%s/out:%s", node, name);
	return hp_graph_add_node(im->g, nn, "Identity", 1, &src, 1, &dst) < 0 ? -ENOMEM : 0;
}

/* A fresh activation value named after node (for stacking results). */
static int fresh_value(struct imp *im, const char *node, const char *suffix)
{
	char name[320];

	imp_fresh_name(im, node, suffix, name, sizeof name);
	return imp_add_value(im, name, HP_VALUE_ACTIVATION, HP_UNDEFINED, NULL);
}

/* Values vals[0..n) stacked along a new axis into value dst (in reverse
 * order when rev). */
static int stack(struct imp *im, const char *node, int dst, const int *vals, int n, int64_t axis, int rev)
{
	struct imp_node fake = { .name = node };
	struct hp_attr a = { .name = "axis", .type = HP_ATTR_INT, .i = axis };
	int ax = imp_const_i64(im, &fake, "axes", &axis, 1);
	int *parts = malloc((size_t)(n ? n : 1) * sizeof *parts), rc = ax, node_idx;
	char nn[320];

	if (!parts)
		return hp_error(-ENOMEM, "out of memory");
	for (int i = 0; rc >= 0 && i < n; i++) {
		int in[2] = { vals[rev ? n - 1 - i : i], ax };
		rc = parts[i] = imp_emit(im, &fake, "unsq", "Unsqueeze", 2, in, 0, NULL);
	}
	if (rc >= 0) {
		snprintf(nn, sizeof nn, "%s/stack:%s", node, im->g->values[dst].name);
		node_idx = hp_graph_add_node(im->g, nn, "Concat", n, parts, 1, &dst);
		rc = node_idx < 0 ? node_idx : hp_graph_add_attr(im->g, node_idx, &a);
	}
	free(parts);
	return rc < 0 ? rc : 0;
}

/* Declared output name stacked from vals (nothing when omitted). */
static int stack_out(struct imp *im, const char *node, const char *name, const int *vals, int n, int64_t axis,
		     int rev)
{
	int dst = name && *name ? imp_find(im, name) : -1;

	if (dst < 0)
		return 0;
	if (n == 0)
		return hp_error(HP_EUNSUPPORTED, "%s: '%s': a scan output of zero iterations is an empty tensor, not supported",
				im->g->path, node);
	return stack(im, node, dst, vals, n, axis, rev);
}

/* ---- If ------------------------------------------------------------------- */

static const Onnx__GraphProto *graph_attr(const Onnx__NodeProto *np, const char *name)
{
	for (size_t i = 0; i < np->n_attribute; i++)
		if (np->attribute[i]->name && !strcmp(np->attribute[i]->name, name))
			return np->attribute[i]->g;
	return NULL;
}

static int64_t int_attr(const Onnx__NodeProto *np, const char *name, int64_t def)
{
	for (size_t i = 0; i < np->n_attribute; i++)
		if (np->attribute[i]->name && !strcmp(np->attribute[i]->name, name))
			return np->attribute[i]->i;
	return def;
}

/* ints attribute `name` entry k, or def. */
static int64_t ints_attr(const Onnx__NodeProto *np, const char *name, size_t k, int64_t def)
{
	for (size_t i = 0; i < np->n_attribute; i++)
		if (np->attribute[i]->name && !strcmp(np->attribute[i]->name, name))
			return k < np->attribute[i]->n_ints ? np->attribute[i]->ints[k] : def;
	return def;
}

static int do_if(struct imp *im, const Onnx__NodeProto *np, const char *name)
{
	int64_t c;
	const Onnx__GraphProto *br;
	char prefix[300];
	int *outs, rc;

	if (!const_scalar(im->g, node_input(im, np, 0), &c))
		return imp_defer_control(im, np, name); /* hp_graph_infer may know it */
	br = graph_attr(np, c ? "then_branch" : "else_branch");
	if (!br || br->n_output != np->n_output)
		return hp_error(HP_EMODEL, "%s: If '%s': the %s branch is missing or has %zu outputs, not %zu", im->g->path,
				name, c ? "then" : "else", br ? br->n_output : 0, np->n_output);
	if (br->n_input)
		return hp_error(HP_EMODEL, "%s: If '%s': a branch has inputs", im->g->path, name);
	snprintf(prefix, sizeof prefix, "%s.%s", name, c ? "then" : "else");
	if (!(outs = calloc(br->n_output + 1, sizeof *outs)))
		return hp_error(-ENOMEM, "out of memory");
	rc = inline_body(im, br, prefix, NULL, outs);
	for (size_t k = 0; rc == 0 && k < np->n_output; k++)
		rc = connect(im, name, np->output[k], outs[k]);
	free(outs);
	return rc;
}

/* ---- Loop and Scan: unrolled ---------------------------------------------- */

/* The state of an unrolling: values carried from one iteration to the next
 * and each iteration's scan outputs. */
struct unroll {
	const char *name;
	const Onnx__GraphProto *body;
	int ncarry, nscan, iters, cap, serial;
	int lead_last;  /* the body reads the carried values first (Scan) */
	int *carry;    /* [ncarry] */
	int *scan;     /* [cap][nscan] */
	int *outs;     /* one iteration's body outputs */
};

static int unroll_init(struct imp *im, struct unroll *u, const char *name, const Onnx__GraphProto *body, int ncarry,
		       int nscan)
{
	memset(u, 0, sizeof *u);
	u->name = name;
	u->body = body;
	u->ncarry = ncarry;
	u->nscan = nscan;
	u->serial = im->serial++; /* names each unrolling apart */
	u->carry = calloc((size_t)ncarry + 1, sizeof *u->carry);
	u->outs = calloc(body->n_output + 1, sizeof *u->outs);
	return u->carry && u->outs ? 0 : hp_error(-ENOMEM, "out of memory");
}

static void unroll_free(struct unroll *u)
{
	free(u->carry);
	free(u->scan);
	free(u->outs);
}

/* One iteration: body inputs bound to lead[0..nlead) and the carried
 * values; body outputs from `skip` on are the new carried values, then the
 * scan outputs. */
static int unroll_step(struct imp *im, struct unroll *u, const int *lead, int nlead, int skip)
{
	const char **bind = calloc((size_t)(nlead + u->ncarry) + 1, sizeof *bind);
	char prefix[300];
	int rc;

	if (!bind)
		return hp_error(-ENOMEM, "out of memory");
	if (u->iters == u->cap) {
		int cap = u->cap ? 2 * u->cap : 8, *s = realloc(u->scan, (size_t)cap * (u->nscan + 1) * sizeof *s);
		if (!s) {
			free(bind);
			return hp_error(-ENOMEM, "out of memory");
		}
		u->scan = s;
		u->cap = cap;
	}
	/* Loop's body reads (iteration, condition, carried...), Scan's
	 * (carried..., slices...) */
	for (int i = 0; i < nlead; i++)
		bind[u->lead_last ? u->ncarry + i : i] = im->g->values[lead[i]].name;
	for (int i = 0; i < u->ncarry; i++)
		bind[u->lead_last ? i : nlead + i] = im->g->values[u->carry[i]].name;
	/* the same body may be unrolled more than once (Scan's batch entries) */
	snprintf(prefix, sizeof prefix, "%s.%d.it%d", u->name, u->serial, u->iters);
	rc = inline_body(im, u->body, prefix, bind, u->outs);
	for (int i = 0; rc == 0 && i < u->ncarry; i++)
		u->carry[i] = u->outs[skip + i];
	for (int k = 0; rc == 0 && k < u->nscan; k++)
		u->scan[u->iters * u->nscan + k] = u->outs[skip + u->ncarry + k];
	u->iters += rc == 0;
	free(bind);
	return rc;
}

/* Scan outputs k of every iteration, stacked on axis (reversed if rev). */
static int unroll_scan(struct imp *im, struct unroll *u, int k, const char *out, int64_t axis, int rev)
{
	int *vals = malloc((size_t)(u->iters + 1) * sizeof *vals), rc;

	if (!vals)
		return hp_error(-ENOMEM, "out of memory");
	for (int i = 0; i < u->iters; i++)
		vals[i] = u->scan[i * u->nscan + k];
	rc = stack_out(im, u->name, out, vals, u->iters, axis, rev);
	free(vals);
	return rc;
}

/* n iterations of body fit, and so does one more body in the graph as it
 * stands: the bound holds for the whole model, so loops nested in loop
 * bodies and many loops cannot multiply it (the fuzzer found 2 GiB). */
static int too_long(struct imp *im, const char *what, const char *name, int64_t n, const Onnx__GraphProto *body)
{
	if (n >= 0 && (uint64_t)n * (body->n_node + 1) <= MAX_UNROLLED_NODES &&
	    (uint64_t)im->g->nnodes + body->n_node + 1 <= MAX_UNROLLED_NODES)
		return 0;
	return hp_error(HP_EUNSUPPORTED, "%s: %s '%s': %" PRId64 " iterations of %zu nodes are too many to unroll (at most %d nodes "
			"in the whole model, %d there already)", im->g->path, what, name, n, body->n_node, MAX_UNROLLED_NODES,
			im->g->nnodes);
}

/* Loop's trip count and first condition, both constants (or absent);
 * 1 when one is not known yet. */
static int loop_bounds(struct imp *im, const Onnx__NodeProto *np, const char *name, int64_t *trip, int64_t *cond)
{
	int m = node_input(im, np, 0), c = node_input(im, np, 1);

	*trip = -1;
	*cond = 1;
	if ((m >= 0 && !const_scalar(im->g, m, trip)) || (c >= 0 && !const_scalar(im->g, c, cond)))
		return 1; /* decided when hp_graph_infer knows them */
	if (m < 0 && c < 0)
		return hp_error(HP_EUNSUPPORTED, "%s: Loop '%s': neither a trip count nor a condition: the loop never ends",
				im->g->path, name);
	return too_long(im, "Loop", name, *trip < 0 ? 0 : *trip, graph_attr(np, "body"));
}

/* The iterations: while the trip count lasts and the body's condition
 * (which must fold to a constant) holds. */
static int loop_iterate(struct imp *im, struct unroll *u, int64_t trip, int64_t cond)
{
	int64_t it;
	int rc = 0;

	for (it = 0; rc == 0 && cond && (trip < 0 || it < trip); it++) {
		int lead[2] = { new_const(im, u->name, "iter", HP_I64, it), new_const(im, u->name, "cond", HP_BOOL, 1) };
		if (lead[0] < 0 || lead[1] < 0)
			return lead[0] < 0 ? lead[0] : lead[1];
		if ((rc = too_long(im, "Loop", u->name, it + 1, u->body)) == 0)
			rc = unroll_step(im, u, lead, 2, 1);
		if (rc == 0 && !const_scalar(im->g, u->outs[0], &cond))
			rc = hp_error(HP_EUNSUPPORTED, "%s: Loop '%s': the body's condition is computed at run time; hpdlf needs it constant (it unrolls the loop body subgraph)",
				      im->g->path, u->name);
	}
	return rc;
}

static int do_loop(struct imp *im, const Onnx__NodeProto *np, const char *name)
{
	const Onnx__GraphProto *body = graph_attr(np, "body");
	int ncarry = np->n_input > 2 ? (int)np->n_input - 2 : 0, rc;
	int64_t trip, cond;
	struct unroll u;

	if (!body || body->n_input != (size_t)ncarry + 2 || body->n_output < (size_t)ncarry + 1 ||
	    np->n_output != body->n_output - 1)
		return hp_error(HP_EMODEL, "%s: Loop '%s': the body's inputs and outputs do not match the node's", im->g->path,
				name);
	if ((rc = loop_bounds(im, np, name, &trip, &cond)) != 0)
		return rc < 0 ? rc : imp_defer_control(im, np, name);
	rc = unroll_init(im, &u, name, body, ncarry, (int)body->n_output - 1 - ncarry);
	for (int i = 0; rc == 0 && i < ncarry; i++)
		if ((u.carry[i] = imp_find(im, np->input[2 + i])) < 0)
			rc = hp_error(HP_EMODEL, "%s: Loop '%s': loop-carried input %d is omitted", im->g->path, name, i);
	if (rc == 0)
		rc = loop_iterate(im, &u, trip, cond);
	for (int i = 0; rc == 0 && i < ncarry; i++)
		rc = connect(im, name, np->output[i], u.carry[i]);
	for (int k = 0; rc == 0 && k < u.nscan; k++)
		rc = unroll_scan(im, &u, k, np->output[ncarry + k], 0, 0);
	unroll_free(&u);
	return rc;
}

/* Scan's attribute names: opset 8 has one direction list and a batch axis. */
struct scan_attrs {
	const char *in_axes, *in_dirs, *out_axes, *out_dirs;
};

/* Slice t of scan input x along axis (from the end when rev). */
static int scan_slice(struct imp *im, const char *name, int x, int64_t axis, int64_t idx)
{
	struct imp_node fake = { .name = name };
	struct hp_attr a = { .name = (char *)"axis", .type = HP_ATTR_INT, .i = axis };
	int in[2] = { x, new_const(im, name, "t", HP_I64, idx) };

	return in[1] < 0 ? in[1] : imp_emit(im, &fake, "slice", "Gather", 2, in, 1, &a);
}

/* The scan of length L over xs[0..nx) from states st0: res gets the final
 * states then the stacked scan outputs. */
static int scan_core(struct imp *im, const Onnx__NodeProto *np, const char *name, const struct scan_attrs *sa,
		     const int *st0, const int *xs, int nx, int64_t L, int *res)
{
	const Onnx__GraphProto *body = graph_attr(np, "body");
	int n = (int)body->n_input - nx, rc, *lead = calloc((size_t)nx + 1, sizeof *lead);
	struct unroll u;

	rc = lead ? unroll_init(im, &u, name, body, n, (int)body->n_output - n) : hp_error(-ENOMEM, "out of memory");
	if (!lead)
		return rc;
	u.lead_last = 1;
	for (int i = 0; rc == 0 && i < n; i++)
		u.carry[i] = st0[i];
	for (int64_t t = 0; rc == 0 && t < L; t++) {
		for (int j = 0; rc >= 0 && j < nx; j++) {
			int64_t idx = sa->in_dirs && ints_attr(np, sa->in_dirs, (size_t)j, 0) ? L - 1 - t : t;
			int64_t ax = sa->in_axes ? ints_attr(np, sa->in_axes, (size_t)j, 0) : 0;
			rc = lead[j] = scan_slice(im, name, xs[j], ax, idx);
		}
		rc = rc < 0 ? rc : unroll_step(im, &u, lead, nx, 0);
	}
	for (int i = 0; rc == 0 && i < n; i++)
		res[i] = u.carry[i];
	for (int k = 0; rc == 0 && k < u.nscan; k++) {
		int *vals = malloc((size_t)(u.iters + 1) * sizeof *vals);
		if (!vals || (res[n + k] = fresh_value(im, name, "scan")) < 0) {
			rc = vals ? res[n + k] : hp_error(-ENOMEM, "out of memory");
			free(vals);
			break;
		}
		for (int i = 0; i < u.iters; i++)
			vals[i] = u.scan[i * u.nscan + k];
		rc = u.iters ? stack(im, name, res[n + k], vals, u.iters,
				     sa->out_axes ? ints_attr(np, sa->out_axes, (size_t)k, 0) : 0,
				     sa->out_dirs && ints_attr(np, sa->out_dirs, (size_t)k, 0))
			     : stack_out(im, name, "empty", vals, 0, 0, 0);
		free(vals);
	}
	unroll_free(&u);
	free(lead);
	return rc;
}

/* Dim `axis` of v's declared shape, or -1 when only the run knows it. */
static int64_t static_dim(const struct hp_graph *g, int v, int64_t axis)
{
	const struct hp_shape *s = &g->values[v].shape;

	if (g->values[v].kind == HP_VALUE_ACTIVATION || s->rank <= 0)
		return -1;
	if (axis < 0)
		axis += s->rank;
	return axis >= 0 && axis < s->rank ? s->dims[axis] : -1;
}

/* The node's inputs from `first` on, as values (all present). */
static int scan_inputs(struct imp *im, const Onnx__NodeProto *np, const char *name, size_t first, int *vals)
{
	for (size_t i = first; i < np->n_input; i++)
		if ((vals[i - first] = node_input(im, np, i)) < 0)
			return hp_error(HP_EMODEL, "%s: Scan '%s': input %zu is omitted", im->g->path, name, i);
	return 0;
}

static int scan_length(struct imp *im, const char *name, int x, int64_t axis, int64_t *L,
		       const Onnx__GraphProto *body)
{
	if ((*L = static_dim(im->g, x, axis)) < 0)
		return hp_error(HP_EUNSUPPORTED, "%s: Scan '%s': the sequence length is known only at run time; hpdlf needs the scan inputs' declared sizes (it unrolls the scan)",
				im->g->path, name);
	return too_long(im, "Scan", name, *L, body);
}

/* Opset 9 on: states, then scan inputs along their scan_input_axes. */
static int do_scan9(struct imp *im, const Onnx__NodeProto *np, const char *name, int nx)
{
	static const struct scan_attrs sa = { "scan_input_axes", "scan_input_directions", "scan_output_axes",
					      "scan_output_directions" };
	int n = (int)np->n_input - nx, *in = calloc(np->n_input + 1, sizeof *in);
	int *res = calloc(np->n_output + 1, sizeof *res), rc;
	int64_t L = 0;

	rc = in && res ? scan_inputs(im, np, name, 0, in) : hp_error(-ENOMEM, "out of memory");
	if (rc == 0 && nx > 0)
		rc = scan_length(im, name, in[n], ints_attr(np, "scan_input_axes", 0, 0), &L, graph_attr(np, "body"));
	if (rc == 0)
		rc = scan_core(im, np, name, &sa, in, in + n, nx, L, res);
	for (size_t o = 0; rc == 0 && o < np->n_output; o++)
		rc = connect(im, name, np->output[o], res[o]);
	free(in);
	free(res);
	return rc;
}

/* One batch entry b of an opset-8 Scan: res gets its outputs. */
static int scan8_entry(struct imp *im, const Onnx__NodeProto *np, const char *name, const int *in, int nin, int nx,
		       int64_t b, int64_t L, int *res)
{
	static const struct scan_attrs sa = { NULL, "directions", NULL, NULL };
	int *sl = calloc((size_t)nin + 1, sizeof *sl), rc = sl ? 0 : hp_error(-ENOMEM, "out of memory");

	for (int i = 0; rc >= 0 && i < nin; i++)
		rc = sl[i] = scan_slice(im, name, in[i], 0, b);
	if (rc >= 0)
		rc = scan_core(im, np, name, &sa, sl, sl + (nin - nx), nx, L, res);
	free(sl);
	return rc < 0 ? rc : 0;
}

/* Opset 8: sequence_lens, then states and scan inputs with a batch axis 0
 * and time axis 1; every batch entry is scanned on its own and restacked. */
static int do_scan8(struct imp *im, const Onnx__NodeProto *np, const char *name, int nx)
{
	int nin = (int)np->n_input - 1, nout = (int)np->n_output, rc;
	int *in = calloc((size_t)nin + 1, sizeof *in), *res = NULL;
	int64_t B, L = 0;

	if (!in)
		return hp_error(-ENOMEM, "out of memory");
	if (node_input(im, np, 0) >= 0)
		rc = hp_error(HP_EUNSUPPORTED, "%s: Scan '%s': sequence_lens is given; hpdlf unrolls only full-length scans",
			      im->g->path, name);
	else
		rc = scan_inputs(im, np, name, 1, in);
	if (rc == 0 && (B = static_dim(im->g, in[0], 0)) < 0)
		rc = hp_error(HP_EUNSUPPORTED, "%s: Scan '%s': the batch size is known only at run time", im->g->path, name);
	if (rc == 0 && nx > 0)
		rc = scan_length(im, name, in[nin - nx], 1, &L, graph_attr(np, "body"));
	if (rc == 0 && !(res = calloc((size_t)(B * nout) + 1, sizeof *res)))
		rc = hp_error(-ENOMEM, "out of memory");
	for (int64_t b = 0; rc == 0 && b < B; b++)
		rc = scan8_entry(im, np, name, in, nin, nx, b, L, res + b * nout);
	for (int o = 0; rc == 0 && o < nout; o++) {
		int *col = malloc((size_t)(B + 1) * sizeof *col);
		for (int64_t b = 0; col && b < B; b++)
			col[b] = res[b * nout + o];
		rc = col ? stack_out(im, name, np->output[o], col, (int)B, 0, 0) : hp_error(-ENOMEM, "out of memory");
		free(col);
	}
	free(in);
	free(res);
	return rc;
}

static int do_scan(struct imp *im, const Onnx__NodeProto *np, const char *name)
{
	const Onnx__GraphProto *body = graph_attr(np, "body");
	int64_t nx = int_attr(np, "num_scan_inputs", -1);
	int first = im->g->opset < 9;
	int64_t n = (int64_t)np->n_input - first - nx;

	if (!body || nx < 0 || n < 0 || body->n_input != (size_t)(n + nx) || body->n_output < (size_t)n ||
	    np->n_output != body->n_output)
		return hp_error(HP_EMODEL, "%s: Scan '%s': the body's inputs and outputs do not match the node's", im->g->path,
				name);
	return first ? do_scan8(im, np, name, (int)nx) : do_scan9(im, np, name, (int)nx);
}

int imp_is_control(const Onnx__NodeProto *np)
{
	const char *op = np->op_type ? np->op_type : "";

	return !strcmp(op, "If") || !strcmp(op, "Loop") || !strcmp(op, "Scan");
}

int imp_control(struct imp *im, const Onnx__NodeProto *np, const char *name)
{
	const char *op = np->op_type;

	if (!strcmp(op, "If"))
		return do_if(im, np, name);
	return !strcmp(op, "Loop") ? do_loop(im, np, name) : do_scan(im, np, name);
}
