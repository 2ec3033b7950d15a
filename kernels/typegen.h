/* Internal to kernels/: type-generic instantiation of loops over the numeric
 * dtypes, so one macro body yields a loop per type (no copy-paste) and a
 * table indexed by enum hp_dtype picks it.
 *
 *   #define DEF(A, S, T, D, W, LO, HI) static void A##_##S(T *x) { ... }
 *   HPK_NUM(DEF, neg)                                   // neg_i8 ... neg_f64
 *   static const fn tbl[HPK_NDTYPES] = { HPK_NUM(HPK_FN_ENTRY, neg) };
 *
 * X(A, S, T, D, W, LO, HI): A is passed through (a loop family's name), S
 * the name suffix, T the C type, D the hp_dtype, W the type integer
 * arithmetic wraps in (unsigned and at least as wide as unsigned int, so
 * uint16 products never overflow a promoted int; the type itself for
 * floats), LO/HI the type's range. */
#ifndef HPDLF_KERNELS_TYPEGEN_H
#define HPDLF_KERNELS_TYPEGEN_H

#include <float.h>
#include <stdint.h>

#include "hpdlf/tensor.h"

#define HPK_SINT(X, A)                                                   \
	X(A, i8, int8_t, HP_I8, uint32_t, INT8_MIN, INT8_MAX)            \
	X(A, i16, int16_t, HP_I16, uint32_t, INT16_MIN, INT16_MAX)       \
	X(A, i32, int32_t, HP_I32, uint32_t, INT32_MIN, INT32_MAX)       \
	X(A, i64, int64_t, HP_I64, uint64_t, INT64_MIN, INT64_MAX)

#define HPK_UINT(X, A)                                                   \
	X(A, u8, uint8_t, HP_U8, uint32_t, 0, UINT8_MAX)                 \
	X(A, u16, uint16_t, HP_U16, uint32_t, 0, UINT16_MAX)             \
	X(A, u32, uint32_t, HP_U32, uint32_t, 0, UINT32_MAX)             \
	X(A, u64, uint64_t, HP_U64, uint64_t, 0, UINT64_MAX)

#define HPK_FLT(X, A)                                                    \
	X(A, f32, float, HP_F32, float, -FLT_MAX, FLT_MAX)               \
	X(A, f64, double, HP_F64, double, -DBL_MAX, DBL_MAX)

#define HPK_INT(X, A) HPK_SINT(X, A) HPK_UINT(X, A)
#define HPK_NUM(X, A) HPK_INT(X, A) HPK_FLT(X, A)

/* Tables indexed by enum hp_dtype (HP_BF16 = 16 is the largest code). */
#define HPK_NDTYPES 17
#define HPK_FN_ENTRY(A, S, T, D, W, LO, HI) [D] = A##_##S,

/* One scalar of any numeric dtype; members are named by the suffixes. */
union hpk_scalar {
	float f32;
	double f64;
	int8_t i8;
	int16_t i16;
	int32_t i32;
	int64_t i64;
	uint8_t u8;
	uint16_t u16;
	uint32_t u32;
	uint64_t u64;
};

#endif
