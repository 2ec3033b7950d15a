/* Cast between the numeric types (as numpy's astype: float -> int truncates
 * toward zero, then wraps to the target width; anything -> bool is != 0).
 * To bfloat16: before opset 19 the upper 16 bits of the float32 (truncation,
 * as ONNX's reference and backend tests do), from opset 19 round to
 * nearest even (the spec says so from then on); NaN stays a quiet NaN. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/shape_util.h"

static int is_float(enum hp_dtype t)
{
	return t == HP_F32 || t == HP_F64 || t == HP_F16 || t == HP_BF16;
}

static int64_t trunc_sat(double d)
{
	if (isnan(d))
		return INT64_MIN;
	if (d >= 9223372036854775807.0)
		return INT64_MAX;
	if (d <= -9223372036854775808.0)
		return INT64_MIN;
	return (int64_t)d;
}

static void put_int(void *dst, enum hp_dtype t, int64_t i, int64_t k)
{
	switch (t) {
	case HP_I64: case HP_U64: ((int64_t *)dst)[k] = i; break;
	case HP_I32: case HP_U32: ((uint32_t *)dst)[k] = (uint32_t)(uint64_t)i; break;
	case HP_I16: case HP_U16: ((uint16_t *)dst)[k] = (uint16_t)(uint64_t)i; break;
	case HP_BOOL: ((uint8_t *)dst)[k] = i != 0; break;
	default: ((uint8_t *)dst)[k] = (uint8_t)(uint64_t)i; break;
	}
}

/* float32 -> bfloat16 keeping the upper half (NaN: quiet, never inf). */
static uint16_t bf16_trunc(float f)
{
	uint32_t x;

	memcpy(&x, &f, 4);
	if ((x & 0x7fffffff) > 0x7f800000)
		return (uint16_t)((x >> 16) | 0x40);
	return (uint16_t)(x >> 16);
}

static uint16_t to_bf16(float f, int rne)
{
	return rne ? hpks_f32_to_bf16(f) : bf16_trunc(f);
}

static void put_float(void *dst, enum hp_dtype t, double f, int64_t k, int rne)
{
	switch (t) {
	case HP_F32: ((float *)dst)[k] = (float)f; break;
	case HP_F64: ((double *)dst)[k] = f; break;
	case HP_F16: ((uint16_t *)dst)[k] = hpks_f32_to_f16((float)f); break;
	case HP_BF16: ((uint16_t *)dst)[k] = to_bf16((float)f, rne); break;
	case HP_BOOL: ((uint8_t *)dst)[k] = f != 0; break;
	default: put_int(dst, t, trunc_sat(f), k); break;
	}
}

struct cast_job {
	const void *src;
	void *dst;
	enum hp_dtype from, to;
	int rne; /* bfloat16 rounds to nearest even (else truncates) */
};

static void cast_range(void *arg, int64_t b, int64_t e, int tid)
{
	const struct cast_job *j = arg;

	(void)tid;
	if (j->from == HP_F32 && j->to == HP_F16) {
		for (int64_t k = b; k < e; k++)
			((uint16_t *)j->dst)[k] = hpks_f32_to_f16(((const float *)j->src)[k]);
	} else if (j->from == HP_F16 && j->to == HP_F32) {
		for (int64_t k = b; k < e; k++)
			((float *)j->dst)[k] = hpks_f16_to_f32(((const uint16_t *)j->src)[k]);
	} else if (j->from == HP_F32 && j->to == HP_BF16) {
		for (int64_t k = b; k < e; k++)
			((uint16_t *)j->dst)[k] = to_bf16(((const float *)j->src)[k], j->rne);
	} else if (j->from == HP_F32 && j->to == HP_F64) {
		for (int64_t k = b; k < e; k++)
			((double *)j->dst)[k] = ((const float *)j->src)[k];
	} else if (j->from == HP_F64 && j->to == HP_F32) {
		for (int64_t k = b; k < e; k++)
			((float *)j->dst)[k] = (float)((const double *)j->src)[k];
	} else if (is_float(j->from)) {
		for (int64_t k = b; k < e; k++)
			put_float(j->dst, j->to, hpks_get_f(j->src, j->from, k), k, j->rne);
	} else if (j->to == HP_F32 && j->from != HP_U64) {
		for (int64_t k = b; k < e; k++)
			((float *)j->dst)[k] = (float)hpks_get_i(j->src, j->from, k);
	} else if (is_float(j->to)) {
		for (int64_t k = b; k < e; k++)
			put_float(j->dst, j->to, hpks_get_f(j->src, j->from, k), k, j->rne);
	} else {
		for (int64_t k = b; k < e; k++)
			put_int(j->dst, j->to, hpks_get_i(j->src, j->from, k), k);
	}
}

static int cast_prepare(struct hp_graph *g, struct hp_node *n)
{
	const struct hp_value *x = hpks_in(g, n, 0);
	int64_t to = hp_attr_int(n, "to", -1);

	if (!hp_dtype_size(x->dtype) || !hp_dtype_size((enum hp_dtype)to))
		return hp_node_error(g, n, HP_EUNSUPPORTED, "cast from %s to type %lld is not supported",
				     hp_dtype_name(x->dtype), (long long)to);
	if (!(n->priv = malloc(sizeof(int))))
		return hp_node_error(g, n, -ENOMEM, "out of memory");
	*(int *)n->priv = g->opset >= 19;
	hpks_set_out(g, n, 0, (enum hp_dtype)to, &x->shape);
	return 0;
}

static int cast_run(const struct hp_node *n, const struct hp_kargs *a)
{
	struct cast_job j = { a->in[0].data, a->out[0].data, a->in[0].dtype, a->out[0].dtype, *(const int *)n->priv };
	int64_t cnt = hp_shape_numel(&a->in[0].shape);

	if (j.from == j.to) {
		hpks_copy_bytes(j.dst, j.src, hp_tensor_bytes(&a->in[0]));
		return 0;
	}
	hp_parallel_for(a->pool, cnt, 65536, cast_range, &j);
	return 0;
}

const struct hp_op hpks_op_cast = {
	.domain = "", .name = "Cast", .min_inputs = 1, .max_inputs = 1, .min_outputs = 1, .max_outputs = 1,
	.prepare = cast_prepare, .run = cast_run,
};
