/* Internal to kernels/: shared pieces of the element-wise, softmax, reduce
 * and normalization families — the broadcast engine, vectorizable exp/tanh,
 * axis and attribute helpers.  Symbols are hpk_* (not exported). */
#ifndef HPDLF_KERNELS_ELTWISE_IMPL_H
#define HPDLF_KERNELS_ELTWISE_IMPL_H

/* Kernels here never read FP exception flags: without trapping math GCC may
 * if-convert float selects (clamps in exp, Relu-like ternaries) into SIMD. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("no-trapping-math")
#endif

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "hpdlf/error.h"
#include "kernels/ops.h"
#include "kernels/typegen.h"

/* Compute-bound loops get AVX2/AVX-512 clones picked at load time (ifunc).
 * ISO C mode keeps FP contraction off, so every clone rounds exactly like
 * the SSE2 default: results are the same bits on every x86-64 machine. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && defined(__linux__)
#define HPK_SIMD __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define HPK_SIMD
#endif

/* Items per parallel range: below this a tensor runs on the calling thread.
 * A share must outweigh waking a worker (tens of microseconds, more on a
 * loaded machine): 32768 floats of an element-wise op take ~5 us, so a
 * LeNet's 64K-element Relu ran slower on two threads than on one. */
#define HPK_GRAIN 131072

/* ---- broadcast engine ------------------------------------------------- */

#define HPK_BC_MAXIN 3
#define HPK_MAX_VARIADIC 64 /* inputs of Sum, Max, ... */

/* An output of `rank` coalesced dims; operand k (0 = output, 1.. = inputs)
 * advances strides[k][d] elements per step of dim d (0 where broadcast). */
struct hpk_bcast {
	int nops; /* output + inputs */
	int rank; /* >= 1 */
	int64_t numel;
	int64_t dims[HP_MAX_RANK];
	int64_t strides[HPK_BC_MAXIN + 1][HP_MAX_RANK];
	size_t elsize[HPK_BC_MAXIN + 1];
};

/* Inner loop over n elements: p[k] is operand k at the segment start;
 * s[k] (k >= 1) is 0 (broadcast scalar over the segment) or 1 (contiguous).
 * The output (p[0]) is always contiguous. */
typedef void (*hpk_seg_fn)(const void *ctx, char *const *p, const int64_t *s, int64_t n);

/* NumPy multidirectional broadcast of nin shapes into *out.  Returns 0, or
 * HP_ESHAPE with a message naming the node and the shapes. */
int hpk_bcast_shape(const struct hp_graph *g, const struct hp_node *n, const struct hp_shape *const *in,
		    int nin, struct hp_shape *out);
/* Plan operands broadcast to `out` (each input must broadcast to it). */
void hpk_bcast_plan(struct hpk_bcast *b, const struct hp_shape *out, const struct hp_tensor *const *in, int nin,
		    size_t out_elsize);
/* Run fn over the whole output, in parallel ranges. */
void hpk_bcast_run(struct hp_pool *pool, const struct hpk_bcast *b, void *out, const void *const *in,
		   hpk_seg_fn fn, const void *ctx);

/* ---- helpers ---------------------------------------------------------- */

static inline const struct hp_value *hpk_in(const struct hp_graph *g, const struct hp_node *n, int i)
{
	return i < n->ninputs && n->inputs[i] >= 0 ? &g->values[n->inputs[i]] : NULL;
}

static inline struct hp_value *hpk_out(struct hp_graph *g, const struct hp_node *n, int i)
{
	return i < n->noutputs && n->outputs[i] >= 0 ? &g->values[n->outputs[i]] : NULL;
}

static inline const struct hp_value *hpk_cout(const struct hp_graph *g, const struct hp_node *n, int i)
{
	return i < n->noutputs && n->outputs[i] >= 0 ? &g->values[n->outputs[i]] : NULL;
}

/* Normalize axis into [0, rank) (rank 0 accepts -1/0 as 0); HP_EMODEL if out of range. */
int hpk_axis(const struct hp_graph *g, const struct hp_node *n, int64_t axis, int rank, int *out);

static inline int64_t hpk_prod(const int64_t *d, int from, int to)
{
	int64_t p = 1;

	for (int i = from; i < to; i++)
		p *= d[i];
	return p;
}

/* ---- operator entry points shared by the op tables ------------------- */

int hpk_unary_prepare(struct hp_graph *g, struct hp_node *n);
int hpk_unary_run(const struct hp_node *n, const struct hp_kargs *a);
double hpk_unary_flops(const struct hp_graph *g, const struct hp_node *n);
int hpk_binary_prepare(struct hp_graph *g, struct hp_node *n);
int hpk_binary_run(const struct hp_node *n, const struct hp_kargs *a);
double hpk_binary_flops(const struct hp_graph *g, const struct hp_node *n);

/* ---- vectorizable math (plain C the compiler turns into SIMD) ---------- */

/* exp(x) to ~2 ulp: Cephes polynomial after n = round(x / ln 2), 2^n built
 * in the exponent bits; underflow below FLT_MIN gives 0, overflow +inf. */
static inline float hpk_expf(float x)
{
	float xc = x < -87.33654f ? -87.33654f : x;
	float t, n, r, p, s, y;
	uint32_t k, sb;
	int32_t e;

	xc = xc > 88.72283f ? 88.72283f : xc;
	t = xc * 1.44269504088896341f + 12582912.0f; /* 1.5 * 2^23: rounds to integer */
	n = t - 12582912.0f;
	memcpy(&k, &t, sizeof k);
	e = (int32_t)(k - 0x4B400000u);
	r = xc - n * 0.693359375f;
	r = r - n * -2.12194440e-4f;
	p = 1.9875691500e-4f;
	p = p * r + 1.3981999507e-3f;
	p = p * r + 8.3334519073e-3f;
	p = p * r + 4.1665795894e-2f;
	p = p * r + 1.6666665459e-1f;
	p = p * r + 5.0000001201e-1f;
	y = p * r * r + r + 1.0f;
	y *= e > 127 ? 2.0f : 1.0f; /* 2^128 is not a float: split one factor 2 off */
	e = e > 127 ? 127 : e;
	sb = (uint32_t)(e + 127) << 23;
	memcpy(&s, &sb, sizeof s);
	y *= s;
	y = x < -87.33654f ? 0.0f : y;
	return x > 88.72283f ? INFINITY : y;
}

static inline float hpk_sigmoidf(float x)
{
	return 1.0f / (1.0f + hpk_expf(-x));
}

/* tanh: odd polynomial near 0 (no cancellation), 1 - 2/(e^2|x|+1) beyond. */
static inline float hpk_tanhf(float x)
{
	float a = x < 0 ? -x : x, z = x * x, p, q;

	p = -5.70498872745e-3f;
	p = p * z + 2.06390887954e-2f;
	p = p * z - 5.37397155531e-2f;
	p = p * z + 1.33314422036e-1f;
	p = p * z - 3.33332819422e-1f;
	p = p * z * x + x;
	q = 1.0f - 2.0f / (hpk_expf(2.0f * a) + 1.0f);
	q = x < 0 ? -q : q;
	return a < 0.625f ? p : q;
}

/* erf: x P(x^2) / Q(x^2) on |x| <= 4 (erf(4) is 1 in float), a rational
 * fit of degree 5 over 5 in x^2 (relative error 2.5e-8 in exact
 * arithmetic, 3.8e-7 evaluated in float).  No exp and one division: 3.6x
 * faster than the erfc form (1 - t e^(q(t) - x^2), t = 1/(1 + |x|/2)) it
 * replaced, whose error was 1.9e-7; GELU's Erf was 15% of a GPT-2-style
 * inference.  Both Horner chains are positive sums, so well conditioned. */
static inline float hpk_erff(float x)
{
	float a = x < -4.0f ? -4.0f : x > 4.0f ? 4.0f : x, z = a * a, p, q, r;

	p = 1.986869627e-06f;
	p = p * z + 2.845698584e-04f;
	p = p * z + 3.883251911e-03f;
	p = p * z + 5.310142878e-02f;
	p = p * z + 1.935418832e-01f;
	p = p * z + 1.128379139e+00f;
	q = 3.742132619e-05f;
	q = q * z + 1.185561491e-03f;
	q = q * z + 1.520704349e-02f;
	q = q * z + 1.153487800e-01f;
	q = q * z + 5.048545839e-01f;
	q = q * z + 1.0f;
	r = a * p / q;
	r = r > 1.0f ? 1.0f : r;
	return r < -1.0f ? -1.0f : r;
}

/* ---- fixed-order vector reductions ------------------------------------
 * GCC vector extensions pin the lane count (8) whatever the ISA, so sums
 * and maxima come out bit-identical on SSE2, AVX2 and AVX-512. */

typedef float hpk_f4 __attribute__((vector_size(16)));
typedef float hpk_f8 __attribute__((vector_size(32)));
typedef double hpk_d4 __attribute__((vector_size(32)));
typedef int32_t hpk_i8 __attribute__((vector_size(32)));

/* Sum of n floats accumulated in double, eight lanes then a fixed tree. */
static inline double hpk_sum_f(const float *x, int64_t n)
{
	hpk_d4 lo = { 0 }, hi = { 0 };
	double l[8];
	int64_t i = 0;

	for (; i + 8 <= n; i += 8) {
		hpk_f4 a, b;
		memcpy(&a, x + i, sizeof a);
		memcpy(&b, x + i + 4, sizeof b);
		lo += __builtin_convertvector(a, hpk_d4);
		hi += __builtin_convertvector(b, hpk_d4);
	}
	memcpy(l, &lo, sizeof lo);
	memcpy(l + 4, &hi, sizeof hi);
	for (int k = 0; i < n; i++, k++)
		l[k] += x[i];
	return ((l[0] + l[4]) + (l[1] + l[5])) + ((l[2] + l[6]) + (l[3] + l[7]));
}

/* Sum of squares of (x - c) in double (variance, L2). */
static inline double hpk_sumsq_f(const float *x, float c, int64_t n)
{
	hpk_d4 lo = { 0 }, hi = { 0 };
	double l[8];
	int64_t i = 0;

	for (; i + 8 <= n; i += 8) {
		hpk_f4 a, b;
		memcpy(&a, x + i, sizeof a);
		memcpy(&b, x + i + 4, sizeof b);
		hpk_d4 da = __builtin_convertvector(a, hpk_d4) - c, db = __builtin_convertvector(b, hpk_d4) - c;
		lo += da * da;
		hi += db * db;
	}
	memcpy(l, &lo, sizeof lo);
	memcpy(l + 4, &hi, sizeof hi);
	for (int k = 0; i < n; i++, k++)
		l[k] += ((double)x[i] - c) * ((double)x[i] - c);
	return ((l[0] + l[4]) + (l[1] + l[5])) + ((l[2] + l[6]) + (l[3] + l[7]));
}

/* Largest of n >= 1 floats (NaN ignored unless every element is NaN... as -inf). */
static inline float hpk_max_f(const float *x, int64_t n)
{
	hpk_f8 m = { -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY };
	float r = -INFINITY;
	int64_t i = 0;

	for (; i + 8 <= n; i += 8) {
		hpk_f8 v;
		memcpy(&v, x + i, sizeof v);
		hpk_i8 gt = v > m;
		m = (hpk_f8)(((hpk_i8)v & gt) | ((hpk_i8)m & ~gt));
	}
	for (int k = 0; k < 8; k++)
		r = m[k] > r ? m[k] : r;
	for (; i < n; i++)
		r = x[i] > r ? x[i] : r;
	return r;
}

#endif
