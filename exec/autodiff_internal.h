/* Internal to exec/autodiff*.c: the state of one differentiation and the
 * helpers (autodiff_emit.c) gradient rules use to append nodes. */
#ifndef HPDLF_EXEC_AUTODIFF_INTERNAL_H
#define HPDLF_EXEC_AUTODIFF_INTERNAL_H

#include "exec/autodiff.h"
#include "hpdlf/graph.h"
#include "exec/exec_internal.h"

struct ad {
	struct hp_graph *g;
	const struct hp_train_spec *spec;
	int nv0;              /* values of the forward graph (contributions are tracked for these) */
	char *need;           /* per forward value: a gradient flows to a trainable parameter */
	int **contrib;        /* per forward value: gradient contributions (value indices) */
	int *ncontrib, *capcontrib;
	int step;             /* the step counter (int64 state), -1 until needed */
	int step_next;
	int counter;          /* for unique names */
	int sched;            /* sched hint of the nodes emitted now: the forward node's */
	const struct hp_ad_ext *ext; /* a pipeline stage's seeds and outputs, or NULL */
	int *prod;            /* per value: the last node of [0, prod_nodes) that outputs it, or -1 */
	int prod_nodes, prod_cap;
};

/* Attribute constructors (emit copies them). */
struct hp_attr ad_int(const char *name, int64_t v);
struct hp_attr ad_float(const char *name, float v);
struct hp_attr ad_str(const char *name, const char *s);
struct hp_attr ad_ints(const char *name, int n, const int64_t *v);
struct hp_attr ad_shape(const char *name, const struct hp_shape *s);

/* A new value named `name#N` (N unique within this differentiation). */
int ad_new_value(struct ad *ad, const char *name, enum hp_value_kind kind, enum hp_dtype dt,
		 const struct hp_shape *s);
/* Append node `op` (domain ai.hpdlf if internal, else "") reading in[0..nin).
 * For each output o, out[o] = 1 asks for a new value (named after `hint`),
 * 0 leaves it omitted; on return out[o] is the value index or -1. */
int ad_emit(struct ad *ad, const char *op, int internal, const char *hint, int nin, const int *in, int nout,
	    int *out, int nattrs, const struct hp_attr *attrs);
/* Record gv as a gradient contribution to forward value v (ignored unless needed). */
int ad_contrib(struct ad *ad, int v, int gv);
/* Does forward input slot i of n need a gradient? */
int ad_needs(const struct ad *ad, const struct hp_node *n, int i);
/* Copy an attribute of the forward node if present (for passing through). */
int ad_copy_attr(const struct hp_node *n, const char *name, struct hp_attr *out);

/* Emit internal op `op` reading in[0..nin); output o is requested when
 * forward input want[o] (-1: none) needs a gradient, and becomes a
 * contribution to it.  0 or an error. */
int ad_emit_to(struct ad *ad, const struct hp_node *n, const char *op, int nin, const int *in, int nout,
	       const int *want, int nattrs, const struct hp_attr *a);
/* Constant integer value v as int64 (int32 converted); count or -1. */
int ad_const_ints(const struct ad *ad, int v, int64_t *dst, int max);
/* Refuse to differentiate node n (HP_EUNSUPPORTED naming it). */
int ad_no_grad(struct ad *ad, const struct hp_node *n, const char *why);

/* The gradient rule of forward node n (a copy: g->nodes may move while
 * emitting), given dy[o], the gradient of each output (-1: none). */
int ad_rule(struct ad *ad, const struct hp_node *n, const int *dy);
/* Whether ai.onnx operator `op` has a gradient rule (docs/operators.md). */
int ad_has_rule(const char *op);
/* The rules of autodiff_rules_ext.c (recurrent, indexing, Einsum, Pad,
 * Tile, TopK): the rule's result, or 1 when `op` has none there. */
int ad_rule_ext(struct ad *ad, const struct hp_node *n, const int *dy);
int ad_has_rule_ext(const char *op);

/* Give every BatchNorm running statistic storage of its own (autodiff_untie.c):
 * an Identity alias or an initializer shared with another use becomes a new
 * initializer holding the same bytes; so does a trainable parameter reached
 * through Identity (an exporter's merge of equal initializers). */
int ad_untie_stats(struct hp_graph *g);

/* Trainable float16/bfloat16 initializers become float32 master weights
 * read directly instead of through their Cast (autodiff_half.c). */
int ad_widen_half(struct hp_graph *g);

#endif
