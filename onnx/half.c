/* Half precision: float16 and bfloat16 models are computed in float32.
 *
 * Weights and graph inputs keep their type and bytes (a float16 weight is
 * streamed from the file like any other, at half the size); a Cast to
 * float32 the importer adds is what nodes read (the alias table of struct
 * imp).  Small constants (Constant nodes, ConstantOfShape's value) are
 * widened in place at import.  Cast nodes to a half type become casts to
 * float32, and a graph output declared half gets a final Cast to its
 * declared type, so callers see the model's types at its boundary. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hpdlf/error.h"
#include "onnx/normalize.h"

static int is_half(enum hp_dtype t)
{
	return t == HP_F16 || t == HP_BF16;
}

static float f16_to_f32(uint16_t h)
{
	uint32_t sign = (uint32_t)(h & 0x8000) << 16, e = (h >> 10) & 0x1f, m = h & 0x3ff, bits;
	float f;

	if (e == 0x1f) {
		bits = sign | 0x7f800000u | (m << 13); /* inf, NaN */
	} else if (e) {
		bits = sign | ((e + 112) << 23) | (m << 13);
	} else {
		f = (float)m * (1.0f / 16777216.0f); /* subnormal: m * 2^-24 */
		return sign ? -f : f;
	}
	memcpy(&f, &bits, 4);
	return f;
}

void imp_half_to_f32(enum hp_dtype dt, const uint16_t *src, float *dst, uint64_t n)
{
	for (uint64_t i = 0; i < n; i++) {
		uint32_t bits = (uint32_t)src[i] << 16;
		if (dt == HP_F16)
			dst[i] = f16_to_f32(src[i]);
		else
			memcpy(&dst[i], &bits, 4);
	}
}

/* float32 -> float16, rounding to nearest even (overflow to infinity). */
static uint16_t f32_to_f16(float f)
{
	uint32_t x, m, h, rem, mid, sign;
	int32_t e;

	memcpy(&x, &f, 4);
	sign = (x >> 16) & 0x8000;
	e = (int32_t)((x >> 23) & 0xff) - 127 + 15;
	m = x & 0x7fffff;
	if (((x >> 23) & 0xff) == 0xff)
		return (uint16_t)(sign | 0x7c00 | (m ? 0x200 : 0));
	if (e >= 31)
		return (uint16_t)(sign | 0x7c00);
	if (e <= 0) { /* subnormal or zero */
		int shift = 14 - e;
		if (shift > 24)
			return (uint16_t)sign;
		m |= 0x800000;
		h = m >> shift;
		rem = m & ((1u << shift) - 1);
		mid = 1u << (shift - 1);
	} else {
		h = ((uint32_t)e << 10) | (m >> 13);
		rem = m & 0x1fff;
		mid = 0x1000;
	}
	if (rem > mid || (rem == mid && (h & 1)))
		h++; /* a carry into the exponent is the right result, up to infinity */
	return (uint16_t)(sign | h);
}

void imp_f32_to_half(enum hp_dtype dt, const float *src, uint16_t *dst, uint64_t n)
{
	for (uint64_t i = 0; i < n; i++) {
		uint32_t x;
		memcpy(&x, &src[i], 4);
		if (dt == HP_F16)
			dst[i] = f32_to_f16(src[i]);
		else if ((x & 0x7fffffff) > 0x7f800000)
			dst[i] = (uint16_t)((x >> 16) | 0x40); /* NaN stays NaN */
		else
			dst[i] = (uint16_t)((x + 0x7fff + ((x >> 16) & 1)) >> 16);
	}
}

int imp_tensor_widen(struct imp *im, struct hp_tensor *t, const char *what)
{
	int64_t n = hp_shape_numel(&t->shape);
	float *f;

	if (!is_half(t->dtype))
		return 0;
	if (n < 0 || !(f = malloc((size_t)n * sizeof *f + 1)))
		return hp_error(-ENOMEM, "%s: %s: out of memory widening to float32", im->g->path, what);
	imp_half_to_f32(t->dtype, t->data, f, (uint64_t)n);
	free(t->data);
	t->data = f;
	t->dtype = HP_F32;
	return 0;
}

static int set_alias(struct imp *im, int from, int to)
{
	if (from >= im->alias_cap) {
		int cap = from + 256;
		int *a = realloc(im->alias, (size_t)cap * sizeof *a);
		if (!a)
			return hp_error(-ENOMEM, "out of memory");
		memset(a + im->alias_cap, 0, (size_t)(cap - im->alias_cap) * sizeof *a);
		im->alias = a;
		im->alias_cap = cap;
	}
	im->alias[from] = to + 1;
	return 0;
}

static int widen_value(struct imp *im, int v);

int imp_resolve(struct imp *im, int v)
{
	const struct hp_value *val = v >= 0 ? &im->g->values[v] : NULL;

	if (v >= 0 && v < im->alias_cap && im->alias[v])
		return im->alias[v] - 1;
	if (!val || !is_half(val->dtype) || (val->kind != HP_VALUE_INPUT && val->kind != HP_VALUE_INITIALIZER))
		return v;
	return widen_value(im, v);
}

static int cast_node(struct imp *im, const char *name, int in, int out, enum hp_dtype to)
{
	struct hp_attr a = { .name = (char *)"to", .type = HP_ATTR_INT, .i = to };
	int node = hp_graph_add_node(im->g, name, "Cast", 1, &in, 1, &out);

	return node < 0 ? node : hp_graph_add_attr(im->g, node, &a);
}

static int widen_value(struct imp *im, int v)
{
	char base[256], name[320];
	int w, rc;

	snprintf(base, sizeof base, "%s", im->g->values[v].name);
	imp_fresh_name(im, base, "float32", name, sizeof name);
	w = imp_add_value(im, name, HP_VALUE_ACTIVATION, HP_UNDEFINED, NULL);
	if (w < 0)
		return w;
	if ((rc = cast_node(im, name, v, w, HP_F32)) < 0 || (rc = set_alias(im, v, w)) < 0)
		return rc;
	return w;
}

int imp_narrow_output(struct imp *im, int v, enum hp_dtype declared)
{
	struct hp_value *val = &im->g->values[v];
	char name[320], *base, *renamed;
	int out, rc;

	if (!is_half(declared) || val->kind != HP_VALUE_ACTIVATION)
		return v;
	imp_fresh_name(im, val->name, "float32", name, sizeof name);
	base = val->name; /* the declared name, whatever its length */
	if (!(renamed = strdup(name)))
		return hp_error(-ENOMEM, "out of memory");
	/* the value computed in float32 takes a new name; the declared one is
	 * the Cast's (the hash keeps the old slot: lookups by the old name now
	 * miss it, as they must) */
	val->name = renamed;
	out = imp_add_value(im, base, HP_VALUE_ACTIVATION, HP_UNDEFINED, NULL);
	rc = out < 0 ? out : cast_node(im, base, v, out, declared);
	free(base);
	return rc < 0 ? rc : out;
}

/* Cast to float16/bfloat16 inside the graph: to float32, which every
 * kernel computes in (a declared half output gets its Cast at the end). */
int imp_cast_half(struct imp *im, struct imp_node *n, const struct imp_rule *r)
{
	int a = imp_find_attr(n, "to");

	(void)im;
	(void)r;
	if (a >= 0 && n->attrs[a].type == HP_ATTR_INT && is_half((enum hp_dtype)n->attrs[a].i))
		n->attrs[a].i = HP_F32;
	return 0;
}

int imp_const_of_shape_half(struct imp *im, struct imp_node *n, const struct imp_rule *r)
{
	int a = imp_find_attr(n, "value");

	(void)r;
	if (a < 0 || n->attrs[a].type != HP_ATTR_TENSOR)
		return 0;
	return imp_tensor_widen(im, &n->attrs[a].t, n->name);
}
