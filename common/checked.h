/* Checked int64 arithmetic for shapes, pads, strides, steps and ranges that
 * come from a model or a command line: each operation ORs its overflow into
 * *over, so a whole formula is computed first and judged once.  A result
 * computed after an overflow is meaningless and must not be used. */
#ifndef HPDLF_COMMON_CHECKED_H
#define HPDLF_COMMON_CHECKED_H

#include <stdint.h>

static inline int64_t hp_ck_add(int64_t a, int64_t b, int *over)
{
	int64_t r;

	*over |= __builtin_add_overflow(a, b, &r);
	return r;
}

static inline int64_t hp_ck_sub(int64_t a, int64_t b, int *over)
{
	int64_t r;

	*over |= __builtin_sub_overflow(a, b, &r);
	return r;
}

static inline int64_t hp_ck_mul(int64_t a, int64_t b, int *over)
{
	int64_t r;

	*over |= __builtin_mul_overflow(a, b, &r);
	return r;
}

/* A dim no tensor can have: beyond it even one byte per element exceeds
 * HP_TENSOR_MAX_BYTES (include/hpdlf/tensor.h). */
#define HP_DIM_MAX ((int64_t)1 << 47)

#endif
