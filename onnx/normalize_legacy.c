/* Normalization rules that need the input's rank or a dimension, unknown
 * at import: they add small shape-arithmetic nodes (Shape, Size, Slice,
 * Concat, ...) that constant folding turns into constants as soon as the
 * shapes are known, so the rewritten operator sees plain constant inputs. */
#include <stdint.h>
#include <string.h>

#include "hpdlf/error.h"
#include "onnx/normalize.h"

static int emit1(struct imp *im, const struct imp_node *n, const char *suffix, const char *op, int a)
{
	return a < 0 ? a : imp_emit(im, n, suffix, op, 1, &a, 0, NULL);
}

static int emit2(struct imp *im, const struct imp_node *n, const char *suffix, const char *op, int a, int b)
{
	int in[2] = { a, b };

	return a < 0 ? a : b < 0 ? b : imp_emit(im, n, suffix, op, 2, in, 0, NULL);
}

static int concat(struct imp *im, const struct imp_node *n, const char *suffix, int nin, const int *in)
{
	struct hp_attr axis = { .name = (char *)"axis", .type = HP_ATTR_INT, .i = 0 };

	return imp_emit(im, n, suffix, "Concat", nin, in, 1, &axis);
}

static int scalar(struct imp *im, const struct imp_node *n, const char *suffix, int64_t v)
{
	return imp_const_i64(im, n, suffix, &v, -1);
}

static int vec1(struct imp *im, const struct imp_node *n, const char *suffix, int64_t v)
{
	return imp_const_i64(im, n, suffix, &v, 1);
}

/* Input `bslot` reshaped so that its dims line up with input `aslot`'s from
 * dim `axis` on: B.shape + [1] * (rank(A) - axis - rank(B)) (the opset < 7
 * broadcast, where NumPy's would align trailing dims). */
static int align_at(struct imp *im, struct imp_node *n, int aslot, int bslot, int64_t axis)
{
	int64_t one = 1;
	int a = n->inputs[aslot], b = n->inputs[bslot], sb, nb, cnt, ones, shape, v;
	struct hp_attr value = { .name = (char *)"value", .type = HP_ATTR_TENSOR,
				 .t = { HP_I64, { 1, { 1 } }, &one } };

	if (a < 0 || b < 0)
		return imp_node_err(im, n, HP_EMODEL, "needs both inputs for", "broadcast");
	sb = emit1(im, n, "bshape", "Shape", b);
	nb = sb < 0 ? sb : emit1(im, n, "brank", "Size", sb);
	if (axis >= 0) {
		int na = emit1(im, n, "arank", "Size", emit1(im, n, "ashape", "Shape", a));
		cnt = emit2(im, n, "pad", "Sub", emit2(im, n, "rest", "Sub", na, nb), scalar(im, n, "axis", axis));
	} else {
		cnt = emit2(im, n, "pad", "Sub", scalar(im, n, "axis", -axis), nb);
	}
	cnt = emit2(im, n, "pad1", "Reshape", cnt, vec1(im, n, "one", 1));
	ones = cnt < 0 ? cnt : imp_emit(im, n, "ones", "ConstantOfShape", 1, &cnt, 1, &value);
	if (ones < 0)
		return ones;
	shape = concat(im, n, "bshape2", 2, (int[]){ sb, ones });
	v = emit2(im, n, "aligned", "Reshape", b, shape);
	if (v < 0)
		return v;
	n->inputs[bslot] = v;
	return 0;
}

int imp_legacy_broadcast(struct imp *im, struct imp_node *n, const struct imp_rule *r)
{
	int b = imp_find_attr(n, "broadcast"), ax = imp_find_attr(n, "axis"), on = b >= 0 && n->attrs[b].i;
	int64_t axis = ax >= 0 ? n->attrs[ax].i : 0;

	(void)r;
	if (b >= 0)
		n->drop[b] = 1;
	if (ax >= 0)
		n->drop[ax] = 1;
	/* equal shapes, or B matching A's trailing dims: what NumPy does too */
	return on && ax >= 0 ? align_at(im, n, 0, 1, axis) : 0;
}

/* PRelu < 7: a slope [C] is per channel (dim 1), as broadcast at axis 1. */
int imp_legacy_slope(struct imp *im, struct imp_node *n, const struct imp_rule *r)
{
	(void)r;
	return align_at(im, n, 0, 1, 1);
}

/* Split-18 num_outputs without split sizes: chunks of ceil(d / k), the last
 * one smaller when d does not divide. */
int imp_split_num_outputs(struct imp *im, struct imp_node *n, const struct imp_rule *r)
{
	int a = imp_find_attr(n, r->attr), x = n->inputs[0], ax = imp_find_attr(n, "axis"), d, chunk, last, v;
	int64_t k, axis = ax >= 0 ? n->attrs[ax].i : 0, end;
	int in[64];

	if (a < 0)
		return 0;
	k = n->attrs[a].i;
	n->drop[a] = 1;
	if (n->ninputs > 1 && n->inputs[1] >= 0)
		return 0;
	if (k != n->noutputs || k < 1 || k > 64)
		return imp_node_err(im, n, HP_EMODEL, "has a num_outputs other than its output count (or above 64):",
				    "num_outputs");
	end = axis == -1 ? INT64_MAX : axis + 1;
	d = imp_emit(im, n, "dim", "Slice", 3,
		     (int[]){ emit1(im, n, "shape", "Shape", x), vec1(im, n, "start", axis), vec1(im, n, "end", end) },
		     0, NULL);
	chunk = emit2(im, n, "chunk", "Div", emit2(im, n, "dk", "Add", d, vec1(im, n, "km1", k - 1)),
		      vec1(im, n, "k", k));
	last = emit2(im, n, "last", "Sub", d, emit2(im, n, "rest", "Mul", chunk, vec1(im, n, "km1", k - 1)));
	if (last < 0)
		return last;
	for (int i = 0; i < k; i++)
		in[i] = i < k - 1 ? chunk : last;
	v = concat(im, n, "split", (int)k, in);
	return v < 0 ? v : imp_set_slot(im, n, 1, v, "num_outputs");
}

/* Tile-1 (input, tiles, axis) -> Tile(input, repeats): repeats is `tiles`
 * at `axis` and 1 elsewhere. */
int imp_tile_v1(struct imp *im, struct imp_node *n, const struct imp_rule *r)
{
	int x = n->ninputs > 0 ? n->inputs[0] : -1, t = n->ninputs > 1 ? n->inputs[1] : -1;
	int axis = n->ninputs > 2 ? n->inputs[2] : -1, rank, idx, rep;

	(void)r;
	if (x < 0 || t < 0 || axis < 0)
		return imp_node_err(im, n, HP_EMODEL, "needs its three inputs", "input, tiles, axis");
	rank = emit1(im, n, "rank", "Size", emit1(im, n, "shape", "Shape", x));
	idx = rank < 0 ? rank
		       : imp_emit(im, n, "dims", "Range", 3, (int[]){ scalar(im, n, "zero", 0), rank, scalar(im, n, "step", 1) },
				  0, NULL);
	rep = emit2(im, n, "at", "Equal", idx, axis);
	rep = rep < 0 ? rep : imp_emit(im, n, "repeats", "Where", 3, (int[]){ rep, t, scalar(im, n, "one", 1) }, 0, NULL);
	if (rep < 0)
		return rep;
	n->inputs[1] = rep;
	n->ninputs = 2;
	return 0;
}

/* GroupNormalization-18 scale/bias [G] -> opset 21's [C]: each group's
 * value repeated C/G times. */
static int per_channel(struct imp *im, struct imp_node *n, int slot, int64_t groups, int target)
{
	int s = n->inputs[slot], e, v;

	if (s < 0)
		return 0;
	e = emit2(im, n, "grouped", "Reshape", s, imp_const_i64(im, n, "g1", (int64_t[]){ groups, 1 }, 2));
	e = emit2(im, n, "expanded", "Expand", e, target);
	v = emit2(im, n, "channels", "Reshape", e, vec1(im, n, "flat", -1));
	if (v < 0)
		return v;
	n->inputs[slot] = v;
	return 0;
}

int imp_groupnorm_per_group(struct imp *im, struct imp_node *n, const struct imp_rule *r)
{
	int a = imp_find_attr(n, "num_groups"), c, tgt, rc;
	int64_t groups;

	(void)r;
	if (a < 0 || n->attrs[a].i < 1 || n->ninputs < 3 || n->inputs[0] < 0)
		return imp_node_err(im, n, HP_EMODEL, "needs inputs X, scale, bias and the attribute", "num_groups");
	groups = n->attrs[a].i;
	c = imp_emit(im, n, "C", "Slice", 3,
		     (int[]){ emit1(im, n, "shape", "Shape", n->inputs[0]), vec1(im, n, "one", 1), vec1(im, n, "two", 2) },
		     0, NULL);
	tgt = concat(im, n, "target", 2,
		     (int[]){ vec1(im, n, "G", groups), emit2(im, n, "CperG", "Div", c, vec1(im, n, "G", groups)) });
	if (tgt < 0)
		return tgt;
	rc = per_channel(im, n, 1, groups, tgt);
	return rc < 0 ? rc : per_channel(im, n, 2, groups, tgt);
}
