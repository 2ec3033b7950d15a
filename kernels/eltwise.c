/* The element-wise operator table: unary (eltwise_unary.c) and broadcasting
 * (eltwise_binary.c) operators.  Ops whose output has the input's dtype and
 * shape may run in place (out[0] aliasing in[0]). */
#include "kernels/eltwise_impl.h"

#define UNARY(VAR, NAME, MAXIN, FLAGS)                                                           \
	static const struct hp_op VAR = { .domain = "", .name = NAME, .min_inputs = 1,           \
					  .max_inputs = MAXIN, .min_outputs = 1, .max_outputs = 1, \
					  .flags = FLAGS, .prepare = hpk_unary_prepare,            \
					  .run = hpk_unary_run, .flops = hpk_unary_flops }

#define BINARY(VAR, NAME, MININ, MAXIN, FLAGS)                                                    \
	static const struct hp_op VAR = { .domain = "", .name = NAME, .min_inputs = MININ,        \
					  .max_inputs = MAXIN, .min_outputs = 1, .max_outputs = 1,  \
					  .flags = FLAGS, .prepare = hpk_binary_prepare,            \
					  .run = hpk_binary_run, .flops = hpk_binary_flops }

#define IP HP_OP_INPLACE

UNARY(op_relu, "Relu", 1, IP);
UNARY(op_leaky, "LeakyRelu", 1, IP);
UNARY(op_sigmoid, "Sigmoid", 1, IP);
UNARY(op_tanh, "Tanh", 1, IP);
UNARY(op_hsig, "HardSigmoid", 1, IP);
UNARY(op_hswish, "HardSwish", 1, IP);
UNARY(op_erf, "Erf", 1, IP);
UNARY(op_exp, "Exp", 1, IP);
UNARY(op_log, "Log", 1, IP);
UNARY(op_neg, "Neg", 1, IP);
UNARY(op_abs, "Abs", 1, IP);
UNARY(op_sqrt, "Sqrt", 1, IP);
UNARY(op_recip, "Reciprocal", 1, IP);
UNARY(op_floor, "Floor", 1, IP);
UNARY(op_ceil, "Ceil", 1, IP);
UNARY(op_round, "Round", 1, IP);
UNARY(op_elu, "Elu", 1, IP);
UNARY(op_selu, "Selu", 1, IP);
UNARY(op_softplus, "Softplus", 1, IP);
UNARY(op_softsign, "Softsign", 1, IP);
UNARY(op_thrrelu, "ThresholdedRelu", 1, IP);
UNARY(op_sign, "Sign", 1, IP);
UNARY(op_sin, "Sin", 1, IP);
UNARY(op_cos, "Cos", 1, IP);
UNARY(op_clip, "Clip", 3, IP);
UNARY(op_not, "Not", 1, IP);
UNARY(op_isnan, "IsNaN", 1, 0);
UNARY(op_isinf, "IsInf", 1, 0);
UNARY(op_tan, "Tan", 1, IP);
UNARY(op_asin, "Asin", 1, IP);
UNARY(op_acos, "Acos", 1, IP);
UNARY(op_atan, "Atan", 1, IP);
UNARY(op_sinh, "Sinh", 1, IP);
UNARY(op_cosh, "Cosh", 1, IP);
UNARY(op_asinh, "Asinh", 1, IP);
UNARY(op_acosh, "Acosh", 1, IP);
UNARY(op_atanh, "Atanh", 1, IP);
UNARY(op_celu, "Celu", 1, IP);
UNARY(op_shrink, "Shrink", 1, IP);

/* In place is safe for broadcasting ops too: element i of out[0] is written
 * only after element i of in[0] (same shape when aliased) was read. */
BINARY(op_add, "Add", 2, 2, IP);
BINARY(op_sub, "Sub", 2, 2, IP);
BINARY(op_mul, "Mul", 2, 2, IP);
BINARY(op_div, "Div", 2, 2, IP);
BINARY(op_pow, "Pow", 2, 2, IP);
BINARY(op_mod, "Mod", 2, 2, IP);
BINARY(op_prelu, "PRelu", 2, 2, IP);
BINARY(op_equal, "Equal", 2, 2, 0);
BINARY(op_less, "Less", 2, 2, 0);
BINARY(op_greater, "Greater", 2, 2, 0);
BINARY(op_le, "LessOrEqual", 2, 2, 0);
BINARY(op_ge, "GreaterOrEqual", 2, 2, 0);
BINARY(op_and, "And", 2, 2, IP);
BINARY(op_or, "Or", 2, 2, IP);
BINARY(op_xor, "Xor", 2, 2, IP);
BINARY(op_max, "Max", 1, HPK_MAX_VARIADIC, IP);
BINARY(op_min, "Min", 1, HPK_MAX_VARIADIC, IP);
BINARY(op_sum, "Sum", 1, HPK_MAX_VARIADIC, IP);
BINARY(op_mean, "Mean", 1, HPK_MAX_VARIADIC, IP);
BINARY(op_where, "Where", 3, 3, 0);

const struct hp_op *const hp_ops_eltwise[] = {
	&op_relu, &op_leaky, &op_sigmoid, &op_tanh, &op_hsig, &op_hswish, &op_erf, &op_exp,
	&op_log, &op_neg, &op_abs, &op_sqrt, &op_recip, &op_floor, &op_ceil, &op_round,
	&op_elu, &op_selu, &op_softplus, &op_softsign, &op_thrrelu, &op_sign, &op_sin, &op_cos,
	&op_clip, &op_not, &op_isnan, &op_isinf,
	&op_add, &op_sub, &op_mul, &op_div, &op_pow, &op_mod, &op_prelu, &op_equal, &op_less,
	&op_greater, &op_le, &op_ge, &op_and, &op_or, &op_xor, &op_max, &op_min, &op_sum,
	&op_mean, &op_where,
	&op_tan, &op_asin, &op_acos, &op_atan, &op_sinh, &op_cosh, &op_asinh, &op_acosh, &op_atanh,
	&op_celu, &op_shrink,
	NULL,
};
