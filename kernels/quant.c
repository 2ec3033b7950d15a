/* Quantization operators, computed exactly (integers in int64, scales in
 * double, rounding half to even as ONNX specifies):
 *   QuantizeLinear, DequantizeLinear (per tensor or per axis),
 *   DynamicQuantizeLinear (uint8), MatMulInteger, QLinearMatMul (2-D or
 *   batched with equal batch dims or a 2-D side), ConvInteger and
 *   QLinearConv (2-D: pads, strides, dilations, group; auto_pad NOTSET).
 * Naive loops: these serve models that carry a few quantized layers and
 * ONNX's conformance, not int8 throughput. */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/shape_util.h"
#include "kernels/index_impl.h"

/* quant_conv.c */
extern const struct hp_op hpkq_op_conv_integer, hpkq_op_qlinear_conv;

static double rnd_even(double v)
{
	return nearbyint(v); /* default rounding mode: ties to even */
}

static int64_t sat(enum hp_dtype t, double v)
{
	double lo = t == HP_U8 ? 0 : t == HP_I8 ? -128 : t == HP_I32 ? -2147483648.0 : 0;
	double hi = t == HP_U8 ? 255 : t == HP_I8 ? 127 : t == HP_I32 ? 2147483647.0 : 65535;

	return (int64_t)(v < lo ? lo : v > hi ? hi : v);
}

/* Element i's parameter of a per-tensor (1 element) or per-axis tensor. */
static double param_at(const struct hp_tensor *p, const struct hp_shape *s, int axis, int64_t i)
{
	int64_t k = hp_shape_numel(&p->shape), inner;

	if (!p->data)
		return 0;
	if (k == 1)
		return hpks_get_f(p->data, p->dtype, 0);
	inner = hpk_prod_dims(s, axis + 1);
	return hpks_get_f(p->data, p->dtype, i / inner % s->dims[axis]);
}

static int qaxis(const struct hp_graph *g, const struct hp_node *n, int *axis)
{
	const struct hp_value *x = hpks_in(g, n, 0), *sc = hpks_in(g, n, 1);
	int rc;

	*axis = 0;
	if (hp_shape_numel(&sc->shape) == 1) /* per tensor: axis unused */
		return 0;
	if ((rc = hpks_axis(g, n, hp_attr_int(n, "axis", 1), x->shape.rank ? x->shape.rank : 1, axis)) < 0)
		return rc;
	if (hp_shape_numel(&sc->shape) != 1 && (x->shape.rank == 0 || hp_shape_numel(&sc->shape) != x->shape.dims[*axis]))
		return hp_node_error(g, n, HP_ESHAPE, "scale must hold 1 or dims[axis] elements");
	return 0;
}

static int quant_prepare(struct hp_graph *g, struct hp_node *n)
{
	const struct hp_value *x = hpks_in(g, n, 0), *zp = hpks_in(g, n, 2);
	int q = !strcmp(n->op_type, "QuantizeLinear"), axis, rc = qaxis(g, n, &axis);
	enum hp_dtype t = q ? (zp ? zp->dtype : HP_U8) : HP_F32;

	if (rc < 0)
		return rc;
	if (q && t != HP_U8 && t != HP_I8)
		return hp_node_error(g, n, HP_EUNSUPPORTED, "zero point dtype %s is not supported", hp_dtype_name(t));
	hpks_set_out(g, n, 0, t, &x->shape);
	return 0;
}

static int quant_run(const struct hp_node *n, const struct hp_kargs *a)
{
	const struct hp_tensor *x = &a->in[0], *sc = &a->in[1];
	const struct hp_tensor none = { 0 }, *zp = a->nin > 2 && a->in[2].data ? &a->in[2] : &none;
	struct hp_tensor *y = &a->out[0];
	int q = !strcmp(n->op_type, "QuantizeLinear"), axis = (int)hp_attr_int(n, "axis", 1);
	int64_t cnt = hp_shape_numel(&x->shape);

	axis += axis < 0 ? x->shape.rank : 0;
	for (int64_t i = 0; i < cnt; i++) {
		double s = param_at(sc, &x->shape, axis, i), z = param_at(zp, &x->shape, axis, i);
		double v = hpks_get_f(x->data, x->dtype, i);
		/* float32 data divides in float32, as the reference does: the rounding of ties depends on it */
		double d = x->dtype == HP_F32 ? (double)((float)v / (float)s) : v / s;
		if (q)
			hpki_put_i(y->data, y->dtype, i, sat(y->dtype, rnd_even(d) + z));
		else
			((float *)y->data)[i] = (float)((v - z) * s);
	}
	return 0;
}

/* ---- DynamicQuantizeLinear(x) -> y uint8, y_scale, y_zero_point ---------- */

static int dql_prepare(struct hp_graph *g, struct hp_node *n)
{
	const struct hp_value *x = hpks_in(g, n, 0);
	struct hp_shape sc = { 0 };

	if (x->dtype != HP_F32)
		return hp_node_error(g, n, HP_EUNSUPPORTED, "input must be float32");
	hpks_set_out(g, n, 0, HP_U8, &x->shape);
	hpks_set_out(g, n, 1, HP_F32, &sc);
	hpks_set_out(g, n, 2, HP_U8, &sc);
	return 0;
}

static int dql_run(const struct hp_node *n, const struct hp_kargs *a)
{
	const float *x = a->in[0].data;
	int64_t cnt = hp_shape_numel(&a->in[0].shape);
	float lo = 0, hi = 0, s, z;

	(void)n;
	for (int64_t i = 0; i < cnt; i++)
		lo = x[i] < lo ? x[i] : lo, hi = x[i] > hi ? x[i] : hi;
	s = (hi - lo) / 255.0f;
	z = (float)sat(HP_U8, rnd_even((0 - lo) / (double)s));
	for (int64_t i = 0; i < cnt; i++)
		((uint8_t *)a->out[0].data)[i] = (uint8_t)sat(HP_U8, rnd_even(x[i] / s) + z);
	if (a->nout > 1 && a->out[1].data)
		*(float *)a->out[1].data = s;
	if (a->nout > 2 && a->out[2].data)
		*(uint8_t *)a->out[2].data = (uint8_t)z;
	return 0;
}

/* ---- MatMulInteger / QLinearMatMul ---------------------------------------- */

struct qmm {
	int qlinear;
	int a, b, azp, bzp; /* input slots */
};

static struct qmm qmm_slots(const struct hp_node *n)
{
	if (!strcmp(n->op_type, "QLinearMatMul"))
		return (struct qmm){ 1, 0, 3, 2, 5 };
	return (struct qmm){ 0, 0, 1, 2, 3 };
}

static int qmm_prepare(struct hp_graph *g, struct hp_node *n)
{
	struct qmm q = qmm_slots(n);
	const struct hp_value *A = hpks_in(g, n, q.a), *B = hpks_in(g, n, q.b), *yzp = hpks_in(g, n, 7);
	int ra = A->shape.rank, rb = B->shape.rank;
	struct hp_shape s = ra >= rb ? A->shape : B->shape;

	if (ra < 2 || rb < 2 || A->shape.dims[ra - 1] != B->shape.dims[rb - 2])
		return hp_node_error(g, n, HP_ESHAPE, "A [..., M, K] and B [..., K, N] do not match");
	if (ra > 2 && rb > 2 && (ra != rb || memcmp(A->shape.dims, B->shape.dims, (size_t)(ra - 2) * sizeof(int64_t))))
		return hp_node_error(g, n, HP_EUNSUPPORTED, "batch dims must be equal (or one side 2-D)");
	s.dims[s.rank - 2] = A->shape.dims[ra - 2];
	s.dims[s.rank - 1] = B->shape.dims[rb - 1];
	hpks_set_out(g, n, 0, q.qlinear ? (yzp ? yzp->dtype : HP_U8) : HP_I32, &s);
	return 0;
}

/* Zero point of row/column k for a per-tensor or per-row/column tensor. */
static int64_t zp_at(const struct hp_kargs *a, int slot, int64_t k)
{
	const struct hp_tensor *z = slot < a->nin && a->in[slot].data ? &a->in[slot] : NULL;

	return !z ? 0 : hp_shape_numel(&z->shape) == 1 ? hpks_get_i(z->data, z->dtype, 0) : hpks_get_i(z->data, z->dtype, k);
}

static int qmm_run(const struct hp_node *n, const struct hp_kargs *a)
{
	struct qmm q = qmm_slots(n);
	const struct hp_tensor *A = &a->in[q.a], *B = &a->in[q.b];
	struct hp_tensor *Y = &a->out[0];
	int ra = A->shape.rank, rb = B->shape.rank;
	int64_t M = A->shape.dims[ra - 2], K = A->shape.dims[ra - 1], N = B->shape.dims[rb - 1];
	int64_t batches = hp_shape_numel(&Y->shape) / (M && N ? M * N : 1);
	double scale = q.qlinear ? hpks_get_f(a->in[1].data, a->in[1].dtype, 0) * hpks_get_f(a->in[4].data, a->in[4].dtype, 0) /
				   hpks_get_f(a->in[6].data, a->in[6].dtype, 0) : 1;

	for (int64_t bt = 0; bt < batches; bt++)
		for (int64_t i = 0; i < M; i++)
			for (int64_t j = 0; j < N; j++) {
				int64_t acc = 0, ao = ra > 2 ? bt * M * K : 0, bo = rb > 2 ? bt * K * N : 0;
				for (int64_t k = 0; k < K; k++)
					acc += (hpks_get_i(A->data, A->dtype, ao + i * K + k) - zp_at(a, q.azp, i)) *
					       (hpks_get_i(B->data, B->dtype, bo + k * N + j) - zp_at(a, q.bzp, j));
				int64_t at = (bt * M + i) * N + j;
				if (q.qlinear)
					hpki_put_i(Y->data, Y->dtype, at, sat(Y->dtype, rnd_even(acc * scale) + zp_at(a, 7, 0)));
				else
					((int32_t *)Y->data)[at] = (int32_t)acc;
			}
	return 0;
}

#define OP(var, nm, lo, hi, olo, ohi, prep, rn)                                                        \
	static const struct hp_op var = { .domain = "", .name = nm, .min_inputs = lo, .max_inputs = hi,  \
					  .min_outputs = olo, .max_outputs = ohi, .prepare = prep, .run = rn }

OP(op_q, "QuantizeLinear", 2, 3, 1, 1, quant_prepare, quant_run);
OP(op_dq, "DequantizeLinear", 2, 3, 1, 1, quant_prepare, quant_run);
OP(op_dql, "DynamicQuantizeLinear", 1, 1, 1, 3, dql_prepare, dql_run);
OP(op_mmi, "MatMulInteger", 2, 4, 1, 1, qmm_prepare, qmm_run);
OP(op_qmm, "QLinearMatMul", 8, 8, 1, 1, qmm_prepare, qmm_run);

const struct hp_op *const hp_ops_quant[] = { &op_q, &op_dq, &op_dql, &op_mmi, &op_qmm, &hpkq_op_conv_integer,
					      &hpkq_op_qlinear_conv, NULL };
