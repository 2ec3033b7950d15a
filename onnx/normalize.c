/* Operator normalization: every default-domain node leaves the importer in
 * the form of the newest opset hpdlf knows (21), so kernels see one
 * signature whatever opset (1..21) the model was written at.  Attributes
 * that later opsets turned into inputs become constant values (HP_VALUE_
 * CONSTANT with data, named "NODE:ATTR") placed at their input slot; changed
 * defaults are written out; changed semantics are rewritten, sometimes with
 * small helper nodes (shape arithmetic that folds at compile time).
 *
 * One table, `rules`, holds every version change; a rule applies to the
 * nodes of its operator ("*": all) when the model's opset is in [lo, hi].
 * Several rules of one operator apply in table order.  A new operator's
 * version history plugs in as more lines.
 *
 * | op                          | opsets | change                                | normalized to                                |
 * |-----------------------------|--------|---------------------------------------|----------------------------------------------|
 * | every operator              | 1..6   | consumed_inputs (legacy in-place)     | dropped                                      |
 * | Add Sub Mul Div Pow And Or  | 1..6   | broadcast=1 + axis: B aligned to A at | B reshaped to B.shape + [1]*(rank A - axis - |
 * |  Xor Equal Greater Less     |        |  axis (no axis: suffix = NumPy)       |  rank B) (Shape/Size/ConstantOfShape/Reshape)|
 * | Gemm                        | 1..6   | broadcast                             | dropped (C broadcasts unidirectionally)      |
 * | PRelu                       | 1..6   | slope [C] is per channel (axis 1)     | slope reshaped to [C, 1, ...] as above       |
 * | Cast                        | 1..5   | to is a string ("FLOAT")              | to = TensorProto data type                   |
 * | Concat                      | 1..3   | axis optional, default 1              | axis = 1 written out                         |
 * | Reshape                     | 1..4   | shape (ints)                          | input 1, int64 [n]                           |
 * | Pad                         | 1      | paddings                              | pads                                         |
 * | Pad                         | 1..10  | pads (ints), value (float)            | input 1 int64 [2r], input 2 float32 scalar   |
 * | Split                       | 1..12  | split (ints)                          | input 1, int64 [n]                           |
 * | Split                       | 18..   | num_outputs (uneven: last is smaller) | input 1 computed (Shape/Slice/Div/Concat)    |
 * | Squeeze, Unsqueeze, ReduceSum| 1..12 | axes (ints)                           | input 1, int64 [n]                           |
 * | ReduceMean/Max/Min/Prod/L1/ | 1..17  | axes (ints)                           | input 1, int64 [n]                           |
 * |  L2/LogSum/LogSumExp/SumSq  |        |                                       |                                              |
 * | Clip                        | 1..10  | min, max (float)                      | inputs 1, 2: float32 scalars                 |
 * | Slice                       | 1..9   | starts, ends, axes                    | inputs 1, 2, 3: int64 [n]                    |
 * | Dropout                     | 1..6   | is_test                               | dropped (inference is the identity)          |
 * | Dropout                     | 1..11  | ratio (float)                         | input 1: float32 scalar                      |
 * | TopK                        | 1..9   | k (int)                               | input 1: int64 [1]                           |
 * | Upsample                    | 1..6   | height_scale, width_scale             | scales [1, 1, h, w], then as below           |
 * | Upsample                    | 7..    | scales (7: attribute; 9: input 1)     | Resize(X, roi omitted, scales):              |
 * |                             |        |                                       |  coordinate_transformation_mode=asymmetric,  |
 * |                             |        |                                       |  nearest_mode=floor, "bilinear" -> "linear"  |
 * | Resize                      | 10     | inputs (X, scales)                    | as Upsample                                  |
 * | Resize                      | 18..   | antialias, axes, keep_aspect_ratio_   | defaults dropped; other values refused       |
 * |                             |        |  policy                               |                                              |
 * | BatchNormalization          | 1..8   | spatial, is_test, consumed_inputs     | dropped (spatial=0 is refused)               |
 * | LpPool, GlobalLpPool        | 1      | p is a float                          | p int                                        |
 * | Selu                        | 1..5   | defaults alpha 1.6732, gamma 1.0507   | written out                                  |
 * | Tile                        | 1..5   | (input, tiles, axis)                  | repeats = [1..tiles at axis..1] (Where)      |
 * | Scatter                     | 9..10  | renamed at 11                         | ScatterElements                              |
 * | RNN, GRU, LSTM              | 1..6   | output_sequence                       | dropped                                      |
 * | Cast                        | 19..   | saturate (float8 targets only)        | dropped                                      |
 * | CastLike                    | 15..   | (X, like): like gives only a type     | Cast(X, to) when like's type is known        |
 * | GroupNormalization          | 18..20 | scale, bias per group [G]             | per channel [C] (opset 21: each repeated C/G)|
 * | Softmax, LogSoftmax, Hardmax| 1..12  | input coerced to 2-D at axis (def. 1) | kept: the kernels read g->opset (softmax.c)  |
 *
 * Half precision (half.c): Cast to float16/bfloat16 becomes Cast to float32
 * and ConstantOfShape's half value a float32 one, since everything inside
 * the graph is computed in float32.
 *
 * An absent attribute leaves its input omitted (-1), which means the op's
 * default.  Scalars that ONNX types like X (Clip min/max, Pad value, Dropout
 * ratio) are float32: kernels convert them to X's type.  Upsample and
 * Resize-10 computed source coordinates as x_out / scale and took the
 * nearest pixel by truncation; the attributes above say exactly that.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "hpdlf/error.h"
#include "onnx/import.h"
#include "onnx/normalize.h"

/* Attribute `attr` (INTS, or INT as a one-element list) -> int64 input. */
static int ints_to_input(struct imp *im, struct imp_node *n, const struct imp_rule *r)
{
	int a = imp_find_attr(n, r->attr), v;
	const struct hp_attr *at;

	if (a < 0)
		return 0;
	at = &n->attrs[a];
	if (at->type != HP_ATTR_INTS && at->type != HP_ATTR_INT)
		return imp_node_err(im, n, HP_EMODEL, "expects a list of ints in attribute", r->attr);
	v = imp_const_i64(im, n, r->attr, at->type == HP_ATTR_INT ? &at->i : at->ints,
			  at->type == HP_ATTR_INT ? 1 : at->n);
	if (v < 0)
		return v;
	n->drop[a] = 1;
	return imp_set_slot(im, n, r->arg, v, r->attr);
}

/* A new float32 constant [count] (rank 0 when count < 0). */
static int const_f32(struct imp *im, const struct imp_node *n, const char *suffix, const float *vals, int count)
{
	struct hp_shape s = { count < 0 ? 0 : 1, { count < 0 ? 1 : count } };
	float *data = malloc((size_t)(count < 0 ? 1 : count) * sizeof *data + 1);
	char name[320];

	if (!data)
		return hp_error(-ENOMEM, "out of memory");
	memcpy(data, vals, (size_t)(count < 0 ? 1 : count) * sizeof *data);
	imp_fresh_name(im, n->name, suffix, name, sizeof name);
	return imp_add_constant(im, name, HP_F32, &s, data);
}

/* Attribute `attr` (FLOAT, or INT) -> float32 scalar input. */
static int float_to_input(struct imp *im, struct imp_node *n, const struct imp_rule *r)
{
	int a = imp_find_attr(n, r->attr), v;
	float f;

	if (a < 0)
		return 0;
	if (n->attrs[a].type != HP_ATTR_FLOAT && n->attrs[a].type != HP_ATTR_INT)
		return imp_node_err(im, n, HP_EMODEL, "expects a float in attribute", r->attr);
	f = n->attrs[a].type == HP_ATTR_FLOAT ? n->attrs[a].f : (float)n->attrs[a].i;
	v = const_f32(im, n, r->attr, &f, -1);
	if (v < 0)
		return v;
	n->drop[a] = 1;
	return imp_set_slot(im, n, r->arg, v, r->attr);
}

/* FLOATS attribute -> float32 [n] input. */
static int floats_to_input(struct imp *im, struct imp_node *n, const char *attr, int slot)
{
	int a = imp_find_attr(n, attr), v;

	if (a < 0)
		return 0;
	if (n->attrs[a].type != HP_ATTR_FLOATS)
		return imp_node_err(im, n, HP_EMODEL, "expects a list of floats in attribute", attr);
	v = const_f32(im, n, attr, n->attrs[a].floats, n->attrs[a].n);
	if (v < 0)
		return v;
	n->drop[a] = 1;
	return imp_set_slot(im, n, slot, v, attr);
}

static int drop(struct imp *im, struct imp_node *n, const struct imp_rule *r)
{
	int a = imp_find_attr(n, r->attr);

	(void)im;
	if (a >= 0)
		n->drop[a] = 1;
	return 0;
}

static int rename_attr(struct imp *im, struct imp_node *n, const struct imp_rule *r)
{
	int a = imp_find_attr(n, r->attr);
	char *name;

	if (a < 0)
		return 0;
	if (!(name = strdup(r->to)))
		return hp_error(-ENOMEM, "out of memory");
	(void)im;
	free(n->attrs[a].name);
	n->attrs[a].name = name;
	return 0;
}

static int rename_op(struct imp *im, struct imp_node *n, const struct imp_rule *r)
{
	(void)im;
	snprintf(n->op_type, sizeof n->op_type, "%s", r->to);
	return 0;
}

static int default_int(struct imp *im, struct imp_node *n, const struct imp_rule *r)
{
	(void)im;
	return imp_find_attr(n, r->attr) >= 0 ? 0 : imp_set_int_attr(n, r->attr, r->arg);
}

static int default_float(struct imp *im, struct imp_node *n, const struct imp_rule *r)
{
	(void)im;
	return imp_find_attr(n, r->attr) >= 0 ? 0 : imp_set_float_attr(n, r->attr, r->f);
}

/* A FLOAT attribute that became INT (LpPool's p). */
static int float_to_int(struct imp *im, struct imp_node *n, const struct imp_rule *r)
{
	int a = imp_find_attr(n, r->attr);

	(void)im;
	if (a >= 0 && n->attrs[a].type == HP_ATTR_FLOAT) {
		n->attrs[a].type = HP_ATTR_INT;
		n->attrs[a].i = (int64_t)n->attrs[a].f;
	}
	return 0;
}

/* Cast-1..5: `to` named the type ("FLOAT", "INT64"). */
static int cast_to_name(struct imp *im, struct imp_node *n, const struct imp_rule *r)
{
	static const char *const names[] = {
		[1] = "FLOAT", [2] = "UINT8", [3] = "INT8", [4] = "UINT16", [5] = "INT16", [6] = "INT32",
		[7] = "INT64", [8] = "STRING", [9] = "BOOL", [10] = "FLOAT16", [11] = "DOUBLE", [12] = "UINT32",
		[13] = "UINT64", [14] = "COMPLEX64", [15] = "COMPLEX128",
	};
	int a = imp_find_attr(n, "to");

	(void)r;
	if (a < 0 || n->attrs[a].type != HP_ATTR_STRING)
		return 0;
	for (int t = 1; t < (int)(sizeof names / sizeof names[0]); t++)
		if (!strcasecmp(n->attrs[a].s, names[t]))
			return imp_set_int_attr(n, "to", t);
	return imp_node_err(im, n, HP_EMODEL, "has an unknown type in attribute 'to':", n->attrs[a].s);
}

/* CastLike(X, like) reads only like's type: Cast(X, to) when that type is
 * known at import (a graph input, initializer or constant). */
static int cast_like(struct imp *im, struct imp_node *n, const struct imp_rule *r)
{
	int like = n->ninputs == 2 ? n->inputs[1] : -1, rc;
	const struct hp_value *v = like >= 0 ? &im->g->values[like] : NULL;

	(void)r;
	if (!v || v->dtype == HP_UNDEFINED || v->kind == HP_VALUE_ACTIVATION)
		return 0; /* left to a CastLike kernel */
	if ((rc = imp_set_int_attr(n, "to", v->dtype)) < 0)
		return rc;
	n->ninputs = 1;
	strcpy(n->op_type, "Cast");
	return 0;
}

/* Upsample-1: height_scale and width_scale of an NCHW input. */
static int upsample_v1(struct imp *im, struct imp_node *n, const struct imp_rule *r)
{
	int h = imp_find_attr(n, "height_scale"), w = imp_find_attr(n, "width_scale"), v;
	float s[4] = { 1, 1, 1, 1 };

	(void)r;
	if (h < 0 || w < 0)
		return imp_node_err(im, n, HP_EMODEL, "needs the attributes", "height_scale, width_scale");
	s[2] = n->attrs[h].f;
	s[3] = n->attrs[w].f;
	n->drop[h] = n->drop[w] = 1;
	v = const_f32(im, n, "scales", s, 4);
	return v < 0 ? v : imp_set_slot(im, n, 1, v, "scales");
}

/* Upsample (7..) and Resize-10 -> Resize-13 (X, roi, scales). */
static int to_resize(struct imp *im, struct imp_node *n, const struct imp_rule *r)
{
	int m = imp_find_attr(n, "mode"), rc, nearest = 1;

	(void)r;
	if (n->ninputs > 2)
		return imp_node_err(im, n, HP_EMODEL, "has more than 2 inputs for opset", "<11");
	if (n->ninputs == 2) {
		n->inputs[2] = n->inputs[1];
		n->inputs[1] = -1;
		n->ninputs = 3;
	} else if ((rc = floats_to_input(im, n, "scales", 2)) < 0) {
		return rc;
	}
	if (m >= 0 && n->attrs[m].type == HP_ATTR_STRING) {
		nearest = !strcmp(n->attrs[m].s, "nearest");
		if (!strcmp(n->attrs[m].s, "bilinear") && (rc = imp_set_string_attr(n, "mode", "linear")) < 0)
			return rc;
	}
	strcpy(n->op_type, "Resize");
	rc = imp_set_string_attr(n, "coordinate_transformation_mode", "asymmetric");
	if (rc == 0 && nearest)
		rc = imp_set_string_attr(n, "nearest_mode", "floor");
	return rc;
}

/* Resize-18/19 attributes: their defaults mean Resize-13; others are refused. */
static int resize_18(struct imp *im, struct imp_node *n, const struct imp_rule *r)
{
	int a = imp_find_attr(n, "antialias"), k = imp_find_attr(n, "keep_aspect_ratio_policy");
	int x = imp_find_attr(n, "axes");

	(void)r;
	if (a >= 0 && n->attrs[a].i != 0)
		return imp_node_err(im, n, HP_EUNSUPPORTED, "is not supported with", "antialias=1");
	if (k >= 0 && n->attrs[k].type == HP_ATTR_STRING && strcmp(n->attrs[k].s, "stretch"))
		return imp_node_err(im, n, HP_EUNSUPPORTED, "is not supported with keep_aspect_ratio_policy",
				    n->attrs[k].s);
	for (int i = 0; x >= 0 && i < n->attrs[x].n; i++)
		if (n->attrs[x].ints[i] != i)
			return imp_node_err(im, n, HP_EUNSUPPORTED, "is not supported with", "axes other than 0, 1, ...");
	if (a >= 0)
		n->drop[a] = 1;
	if (k >= 0)
		n->drop[k] = 1;
	if (x >= 0)
		n->drop[x] = 1;
	return 0;
}

static int batchnorm(struct imp *im, struct imp_node *n, const struct imp_rule *r)
{
	int a = imp_find_attr(n, "spatial");

	(void)r;
	if (a >= 0 && n->attrs[a].type == HP_ATTR_INT && n->attrs[a].i == 0)
		return imp_node_err(im, n, HP_EUNSUPPORTED, "per-activation statistics are not supported:",
				    "spatial=0");
	if (a >= 0)
		n->drop[a] = 1;
	if ((a = imp_find_attr(n, "is_test")) >= 0)
		n->drop[a] = 1;
	return 0;
}

#define REDUCE18(OP) { OP, 1, 17, ints_to_input, "axes", 1, NULL, 0 }
#define BCAST(OP) { OP, 1, 6, imp_legacy_broadcast, NULL, 0, NULL, 0 }

static const struct imp_rule rules[] = {
	{ "*", 1, 6, drop, "consumed_inputs", 0, NULL, 0 },
	BCAST("Add"), BCAST("Sub"), BCAST("Mul"), BCAST("Div"), BCAST("Pow"), BCAST("And"), BCAST("Or"),
	BCAST("Xor"), BCAST("Equal"), BCAST("Greater"), BCAST("Less"),
	{ "Gemm", 1, 6, drop, "broadcast", 0, NULL, 0 },
	{ "PRelu", 1, 6, imp_legacy_slope, NULL, 0, NULL, 0 },
	{ "Cast", 1, 5, cast_to_name, NULL, 0, NULL, 0 },
	{ "Concat", 1, 3, default_int, "axis", 1, NULL, 0 },
	{ "Reshape", 1, 4, ints_to_input, "shape", 1, NULL, 0 },
	{ "Pad", 1, 1, rename_attr, "paddings", 0, "pads", 0 },
	{ "Pad", 1, 10, ints_to_input, "pads", 1, NULL, 0 },
	{ "Pad", 1, 10, float_to_input, "value", 2, NULL, 0 },
	{ "Split", 1, 12, ints_to_input, "split", 1, NULL, 0 },
	{ "Split", 18, IMP_OPSET_MAX, imp_split_num_outputs, "num_outputs", 0, NULL, 0 },
	{ "Squeeze", 1, 12, ints_to_input, "axes", 1, NULL, 0 },
	{ "Unsqueeze", 1, 12, ints_to_input, "axes", 1, NULL, 0 },
	{ "ReduceSum", 1, 12, ints_to_input, "axes", 1, NULL, 0 },
	REDUCE18("ReduceMean"), REDUCE18("ReduceMax"), REDUCE18("ReduceMin"), REDUCE18("ReduceProd"),
	REDUCE18("ReduceL1"), REDUCE18("ReduceL2"), REDUCE18("ReduceLogSum"), REDUCE18("ReduceLogSumExp"),
	REDUCE18("ReduceSumSquare"),
	{ "Clip", 1, 10, float_to_input, "min", 1, NULL, 0 },
	{ "Clip", 1, 10, float_to_input, "max", 2, NULL, 0 },
	{ "Slice", 1, 9, ints_to_input, "starts", 1, NULL, 0 },
	{ "Slice", 1, 9, ints_to_input, "ends", 2, NULL, 0 },
	{ "Slice", 1, 9, ints_to_input, "axes", 3, NULL, 0 },
	{ "Dropout", 1, 6, drop, "is_test", 0, NULL, 0 },
	{ "Dropout", 1, 11, float_to_input, "ratio", 1, NULL, 0 },
	{ "TopK", 1, 9, ints_to_input, "k", 1, NULL, 0 },
	{ "Upsample", 1, 6, upsample_v1, NULL, 0, NULL, 0 },
	{ "Upsample", 1, IMP_OPSET_MAX, to_resize, NULL, 0, NULL, 0 },
	{ "Resize", 10, 10, to_resize, NULL, 0, NULL, 0 },
	{ "Resize", 18, IMP_OPSET_MAX, resize_18, NULL, 0, NULL, 0 },
	{ "BatchNormalization", 1, 8, batchnorm, NULL, 0, NULL, 0 },
	{ "LpPool", 1, 1, float_to_int, "p", 0, NULL, 0 },
	{ "GlobalLpPool", 1, 1, float_to_int, "p", 0, NULL, 0 },
	{ "Selu", 1, 5, default_float, "alpha", 0, NULL, 1.6732f },
	{ "Selu", 1, 5, default_float, "gamma", 0, NULL, 1.0507f },
	{ "Tile", 1, 5, imp_tile_v1, NULL, 0, NULL, 0 },
	{ "Scatter", 1, 10, rename_op, NULL, 0, "ScatterElements", 0 },
	{ "RNN", 1, 6, drop, "output_sequence", 0, NULL, 0 },
	{ "GRU", 1, 6, drop, "output_sequence", 0, NULL, 0 },
	{ "LSTM", 1, 6, drop, "output_sequence", 0, NULL, 0 },
	{ "Cast", 19, IMP_OPSET_MAX, drop, "saturate", 0, NULL, 0 },
	{ "CastLike", 19, IMP_OPSET_MAX, drop, "saturate", 0, NULL, 0 },
	{ "CastLike", 15, IMP_OPSET_MAX, cast_like, NULL, 0, NULL, 0 },
	{ "Cast", 1, IMP_OPSET_MAX, imp_cast_half, NULL, 0, NULL, 0 },
	{ "ConstantOfShape", 1, IMP_OPSET_MAX, imp_const_of_shape_half, NULL, 0, NULL, 0 },
	{ "GroupNormalization", 18, 20, imp_groupnorm_per_group, NULL, 0, NULL, 0 },
	{ NULL, 0, 0, NULL, NULL, 0, NULL, 0 },
};

int imp_normalize(struct imp *im, struct imp_node *n)
{
	int64_t opset = im->g->opset;

	for (const struct imp_rule *r = rules; r->op; r++) {
		int rc;
		if (opset < r->lo || opset > r->hi || (strcmp(r->op, "*") && strcmp(r->op, n->op_type)))
			continue;
		if ((rc = r->fn(im, n, r)) < 0)
			return rc;
	}
	return 0;
}
