/* Operator normalization: every default-domain node leaves the importer in
 * the form of the newest opset, so kernels see one signature.  Attributes
 * that later opsets turned into inputs become constant values (HP_VALUE_
 * CONSTANT with data, named "NODE:ATTR") placed at their input slot.
 *
 * | op                          | opsets | attribute(s)          | becomes                                   |
 * |-----------------------------|--------|-----------------------|-------------------------------------------|
 * | Split                       | < 13   | split (ints)          | input 1, int64 [n]                        |
 * | Squeeze, Unsqueeze          | < 13   | axes (ints)           | input 1, int64 [n]                        |
 * | ReduceSum                   | < 13   | axes (ints)           | input 1, int64 [n]                        |
 * | ReduceMean, ReduceMax,      | all    | axes (ints)           | input 1, int64 [n] (ONNX moved it only in |
 * |  ReduceMin, ReduceProd,     | (<18)  |                       |  opset 18; converted so that every Reduce*|
 * |  ReduceL1, ReduceL2,        |        |                       |  takes axes as optional input 1)          |
 * |  ReduceLogSum(Exp),         |        |                       |                                           |
 * |  ReduceSumSquare            |        |                       |                                           |
 * | Clip                        | < 11   | min, max (float)      | inputs 1, 2: float32 scalars              |
 * | Pad                         | < 11   | pads (ints), value    | input 1 int64 [2r], input 2 float32 scalar|
 * | Slice                       | < 10   | starts, ends, axes    | inputs 1, 2, 3: int64 [n]                 |
 * | Dropout                     | < 12   | ratio (float)         | input 1: float32 scalar                   |
 * | TopK                        | < 10   | k (int)               | input 1: int64 [1]                        |
 * | Upsample                    | 7..9   | scales (7: attribute; | Resize(X, roi omitted, scales):           |
 * |                             |        |  9: input 1)          |  coordinate_transformation_mode=asymmetric|
 * |                             |        |                       |  nearest_mode=floor, mode kept            |
 * |                             |        |                       |  ("bilinear" -> "linear")                 |
 * | Resize                      | 10     | inputs (X, scales)    | (X, roi omitted, scales), attributes as   |
 * |                             |        |                       |  for Upsample                             |
 * | BatchNormalization          | < 9    | spatial, is_test,     | dropped (spatial=0, per-activation        |
 * |                             |        |  consumed_inputs      |  statistics, is refused)                  |
 * | Cast                        | all    | to                    | stays an attribute                        |
 *
 * An absent attribute leaves its input omitted (-1), which means the op's
 * default.  Scalars that ONNX types like X (Clip min/max, Pad value, Dropout
 * ratio) are float32: kernels convert them to X's type.  Upsample and
 * Resize-10 computed source coordinates as x_out / scale and took the
 * nearest pixel by truncation; the attributes above say exactly that.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "hpdlf/error.h"
#include "onnx/import.h"

static int find_attr(const struct imp_node *n, const char *name)
{
	for (int i = 0; i < n->nattrs; i++)
		if (!n->drop[i] && !strcmp(n->attrs[i].name, name))
			return i;
	return -1;
}

static int node_err(struct imp *im, const struct imp_node *n, int err, const char *what, const char *attr)
{
	return hp_error(err, "%s: node '%s' (%s): %s '%s'", im->g->path, n->name, n->op_type, what, attr);
}

/* Put constant `v` at input slot `slot` (slots in between stay omitted). */
static int set_slot(struct imp *im, struct imp_node *n, int slot, int v, const char *attr)
{
	if (slot < n->ninputs && n->inputs[slot] >= 0)
		return node_err(im, n, HP_EMODEL, "has both an input and the attribute", attr);
	if (slot >= n->inputs_cap)
		return node_err(im, n, HP_EINTERNAL, "no input slot for", attr);
	while (n->ninputs <= slot)
		n->inputs[n->ninputs++] = -1;
	n->inputs[slot] = v;
	return 0;
}

/* Attribute `attr` (INTS, or INT as a one-element list) -> int64 input. */
static int ints_to_input(struct imp *im, struct imp_node *n, const char *attr, int slot)
{
	int a = find_attr(n, attr), v;
	const struct hp_attr *at;
	struct hp_shape s = { 1, { 0 } };
	char name[320];
	int64_t *data;

	if (a < 0)
		return 0;
	at = &n->attrs[a];
	if (at->type != HP_ATTR_INTS && at->type != HP_ATTR_INT)
		return node_err(im, n, HP_EMODEL, "expects a list of ints in attribute", attr);
	s.dims[0] = at->type == HP_ATTR_INT ? 1 : at->n;
	data = malloc((size_t)s.dims[0] * sizeof *data + 1);
	if (!data)
		return hp_error(-ENOMEM, "out of memory");
	if (at->type == HP_ATTR_INT)
		data[0] = at->i;
	else if (at->n)
		memcpy(data, at->ints, (size_t)at->n * sizeof *data);
	imp_fresh_name(im, n->name, attr, name, sizeof name);
	v = imp_add_constant(im, name, HP_I64, &s, data);
	if (v < 0)
		return v;
	n->drop[a] = 1;
	return set_slot(im, n, slot, v, attr);
}

/* Attribute `attr` (FLOAT, or INT) -> float32 scalar input. */
static int float_to_input(struct imp *im, struct imp_node *n, const char *attr, int slot)
{
	int a = find_attr(n, attr), v;
	struct hp_shape s = { 0 };
	char name[320];
	float *data;

	if (a < 0)
		return 0;
	if (n->attrs[a].type != HP_ATTR_FLOAT && n->attrs[a].type != HP_ATTR_INT)
		return node_err(im, n, HP_EMODEL, "expects a float in attribute", attr);
	if (!(data = malloc(sizeof *data)))
		return hp_error(-ENOMEM, "out of memory");
	*data = n->attrs[a].type == HP_ATTR_FLOAT ? n->attrs[a].f : (float)n->attrs[a].i;
	imp_fresh_name(im, n->name, attr, name, sizeof name);
	v = imp_add_constant(im, name, HP_F32, &s, data);
	if (v < 0)
		return v;
	n->drop[a] = 1;
	return set_slot(im, n, slot, v, attr);
}

/* FLOATS attribute -> float32 [n] input. */
static int floats_to_input(struct imp *im, struct imp_node *n, const char *attr, int slot)
{
	int a = find_attr(n, attr), v;
	struct hp_shape s = { 1, { 0 } };
	char name[320];
	float *data;

	if (a < 0)
		return 0;
	if (n->attrs[a].type != HP_ATTR_FLOATS)
		return node_err(im, n, HP_EMODEL, "expects a list of floats in attribute", attr);
	s.dims[0] = n->attrs[a].n;
	if (!(data = malloc((size_t)n->attrs[a].n * sizeof *data + 1)))
		return hp_error(-ENOMEM, "out of memory");
	if (n->attrs[a].n)
		memcpy(data, n->attrs[a].floats, (size_t)n->attrs[a].n * sizeof *data);
	imp_fresh_name(im, n->name, attr, name, sizeof name);
	v = imp_add_constant(im, name, HP_F32, &s, data);
	if (v < 0)
		return v;
	n->drop[a] = 1;
	return set_slot(im, n, slot, v, attr);
}

static int add_string_attr(struct imp_node *n, const char *name, const char *value)
{
	struct hp_attr a = { .type = HP_ATTR_STRING, .slen = strlen(value) };
	int i = find_attr(n, name);

	if (i >= 0)
		n->drop[i] = 1; /* ours replaces it */
	a.name = strdup(name);
	a.s = strdup(value);
	if (!a.name || !a.s) {
		free(a.name);
		free(a.s);
		return hp_error(-ENOMEM, "out of memory");
	}
	i = imp_node_add_attr(n, &a);
	if (i < 0) {
		free(a.name);
		free(a.s);
	}
	return i;
}

/* Upsample (7..9) and Resize-10 -> Resize-13 (X, roi, scales). */
static int to_resize(struct imp *im, struct imp_node *n)
{
	int m = find_attr(n, "mode"), rc, nearest = 1;

	if (n->ninputs > 2)
		return node_err(im, n, HP_EMODEL, "has more than 2 inputs for opset", "<11");
	if (n->ninputs == 2) {
		n->inputs[2] = n->inputs[1];
		n->inputs[1] = -1;
		n->ninputs = 3;
	} else {
		rc = floats_to_input(im, n, "scales", 2);
		if (rc < 0)
			return rc;
	}
	if (m >= 0 && n->attrs[m].type == HP_ATTR_STRING) {
		nearest = !strcmp(n->attrs[m].s, "nearest");
		if (!strcmp(n->attrs[m].s, "bilinear") && (rc = add_string_attr(n, "mode", "linear")) < 0)
			return rc;
	}
	strcpy(n->op_type, "Resize");
	rc = add_string_attr(n, "coordinate_transformation_mode", "asymmetric");
	if (rc == 0 && nearest)
		rc = add_string_attr(n, "nearest_mode", "floor");
	return rc;
}

static int batchnorm(struct imp *im, struct imp_node *n)
{
	int a = find_attr(n, "spatial");

	if (a >= 0 && n->attrs[a].type == HP_ATTR_INT && n->attrs[a].i == 0)
		return node_err(im, n, HP_EUNSUPPORTED, "per-activation statistics are not supported:", "spatial=0");
	if (a >= 0)
		n->drop[a] = 1;
	if ((a = find_attr(n, "is_test")) >= 0)
		n->drop[a] = 1;
	if ((a = find_attr(n, "consumed_inputs")) >= 0)
		n->drop[a] = 1;
	return 0;
}

static int is_reduce_moved_in_18(const char *op)
{
	static const char *const ops[] = {
		"ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1",
		"ReduceL2", "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare",
	};

	for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++)
		if (!strcmp(op, ops[i]))
			return 1;
	return 0;
}

int imp_normalize(struct imp *im, struct imp_node *n)
{
	const char *op = n->op_type;
	int64_t opset = im->g->opset;
	int rc = 0;

	if (!strcmp(op, "Split") && opset < 13)
		return ints_to_input(im, n, "split", 1);
	if ((!strcmp(op, "Squeeze") || !strcmp(op, "Unsqueeze") || !strcmp(op, "ReduceSum")) && opset < 13)
		return ints_to_input(im, n, "axes", 1);
	if (is_reduce_moved_in_18(op))
		return ints_to_input(im, n, "axes", 1);
	if (!strcmp(op, "Clip") && opset < 11) {
		rc = float_to_input(im, n, "min", 1);
		return rc < 0 ? rc : float_to_input(im, n, "max", 2);
	}
	if (!strcmp(op, "Pad") && opset < 11) {
		rc = ints_to_input(im, n, "pads", 1);
		return rc < 0 ? rc : float_to_input(im, n, "value", 2);
	}
	if (!strcmp(op, "Slice") && opset < 10) {
		rc = ints_to_input(im, n, "starts", 1);
		if (rc == 0)
			rc = ints_to_input(im, n, "ends", 2);
		return rc < 0 ? rc : ints_to_input(im, n, "axes", 3);
	}
	if (!strcmp(op, "Dropout") && opset < 12)
		return float_to_input(im, n, "ratio", 1);
	if (!strcmp(op, "TopK") && opset < 10)
		return ints_to_input(im, n, "k", 1);
	if (!strcmp(op, "Upsample") || (!strcmp(op, "Resize") && opset == 10))
		return to_resize(im, n);
	if (!strcmp(op, "BatchNormalization") && opset < 9)
		return batchnorm(im, n);
	return 0;
}
