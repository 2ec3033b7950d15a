/* The fused operators' epilogue, y = act(y + addend) (fused_impl.h), and
 * the GELU forms.  Element-wise and parallel over fixed ranges: the bits
 * do not depend on the thread count. */
#include <string.h>

#include "kernels/eltwise_impl.h"
#include "kernels/fused_impl.h"
#include "kernels/sigmoid512.h"

static const char *const act_names[] = {
	[HP_EPI_NONE] = "", [HP_EPI_RELU] = "Relu", [HP_EPI_CLIP] = "Clip", [HP_EPI_SIGMOID] = "Sigmoid",
	[HP_EPI_HSWISH] = "HardSwish", [HP_EPI_GELU] = "Gelu", [HP_EPI_GELU_TANH] = "GeluTanh", [HP_EPI_SILU] = "Silu",
};

int hp_epi_act_of(const char *name)
{
	for (int i = 0; i < (int)(sizeof act_names / sizeof act_names[0]); i++)
		if (!strcmp(name, act_names[i]))
			return i;
	return -1;
}

int hp_epi_add_of(const struct hp_shape *ys, const struct hp_shape *a, struct hp_epi *e)
{
	int off = ys->rank - a->rank, p = -1, q = -1;

	if (off < 0)
		return -1;
	for (int i = 0; i < a->rank; i++) {
		if (a->dims[i] == 1 && ys->dims[off + i] != 1)
			continue;
		if (a->dims[i] != ys->dims[off + i] || (q >= 0 && q != off + i))
			return -1; /* not a broadcast, or two separate varying ranges */
		if (p < 0)
			p = off + i;
		q = off + i + 1;
	}
	e->mid = 1;
	e->inner = 1;
	if (p < 0) {
		e->add = HP_EPI_ADD_SCALAR;
		return 0;
	}
	for (int i = p; i < q; i++)
		e->mid *= ys->dims[i];
	for (int i = q; i < ys->rank; i++)
		e->inner *= ys->dims[i];
	/* inner > 1: the addend repeats along trailing axes (a [1, C, 1, 1] bias
	 * on a batch of one spans as many elements as y but holds only C) */
	e->add = e->inner == 1 && e->mid == hp_shape_numel(ys) ? HP_EPI_ADD_FULL : HP_EPI_ADD_MID;
	return 0;
}

/* As kernels/eltwise_unary.c computes them. */
static inline float sat01(float t)
{
	t = t < 0.0f ? 0.0f : t;
	return t > 1.0f ? 1.0f : t;
}

#define CLIP(v, lo, hi) ((v) < (lo) ? ((lo) > (hi) ? (hi) : (lo)) : (v) > (hi) ? (hi) : (v))

/* Inline, so that the loops below vectorize as eltwise_unary.c's do. */
static inline float gelu_erf(float x)
{
	return 0.5f * x * (1.0f + hpk_erff(x * 0.70710678118654752f));
}

static inline float gelu_tanh(float x)
{
	return 0.5f * x * (1.0f + hpk_tanhf(0.79788456080286536f * (x + 0.044715f * x * x * x)));
}

#define ACT_LOOP(NAME, EXPR)                                                  \
	HPK_SIMD static void NAME(const struct hp_epi *e, float *y, int64_t n) \
	{                                                                     \
		const float lo = e->lo, hi = e->hi;                           \
		(void)lo;                                                     \
		(void)hi;                                                     \
		for (int64_t i = 0; i < n; i++) {                             \
			float v = y[i];                                       \
			y[i] = (EXPR);                                        \
		}                                                             \
	}

ACT_LOOP(act_relu, v < 0.0f ? 0.0f : v)
ACT_LOOP(act_clip, CLIP(v, lo, hi))
/* Sigmoid and SiLU: whole AVX-512 vectors by sigmoid512.c (the same
 * bits), the rest here. */
HPK_SIMD static void act_sigmoid(const struct hp_epi *e, float *y, int64_t n)
{
	(void)e;
	for (int64_t i = hpk_sigmoid512(y, y, n, 0); i < n; i++)
		y[i] = hpk_sigmoidf(y[i]);
}

ACT_LOOP(act_hswish, v * sat01(v * (1.0f / 6.0f) + 0.5f))
ACT_LOOP(act_gelu, gelu_erf(v))
ACT_LOOP(act_gelu_tanh, gelu_tanh(v))
/* A NaN v gives v: with both factors NaN, v * s would give whichever one
 * the compiler puts first (the Sigmoid and Mul nodes leave that open). */
HPK_SIMD static void act_silu(const struct hp_epi *e, float *y, int64_t n)
{
	(void)e;
	for (int64_t i = hpk_sigmoid512(y, y, n, 1); i < n; i++) {
		float v = y[i];
		y[i] = v != v ? v : v * hpk_sigmoidf(v);
	}
}

typedef void (*act_fn)(const struct hp_epi *e, float *y, int64_t n);
static const act_fn acts[] = {
	[HP_EPI_RELU] = act_relu, [HP_EPI_CLIP] = act_clip, [HP_EPI_SIGMOID] = act_sigmoid,
	[HP_EPI_HSWISH] = act_hswish, [HP_EPI_GELU] = act_gelu, [HP_EPI_GELU_TANH] = act_gelu_tanh,
	[HP_EPI_SILU] = act_silu,
};

struct epi_job {
	const struct hp_epi *e;
	float *y;
	const float *add;
};

/* y[b, end) += addend where it varies along `mid` with period inner:
 * contiguous segments of one addend value (inner > 1) or of consecutive
 * values (inner 1), so the inner loops vectorize. */
static void add_mid(const struct hp_epi *e, float *y, const float *add, int64_t b, int64_t end)
{
	for (int64_t i = b; i < end;) {
		int64_t r = i % e->inner, k = i / e->inner % e->mid, len;
		if (e->inner == 1) {
			len = e->mid - k < end - i ? e->mid - k : end - i;
			for (int64_t t = 0; t < len; t++)
				y[i + t] = y[i + t] + add[k + t];
		} else {
			const float a = add[k];
			len = e->inner - r < end - i ? e->inner - r : end - i;
			for (int64_t t = 0; t < len; t++)
				y[i + t] = y[i + t] + a;
		}
		i += len;
	}
}

/* The activation over y[0, n).  The transcendental ones take the last
 * n % 16 elements through a buffer of 16, so that they run in the loops'
 * vectors (the same operations, the same bits) rather than in their
 * scalar remainders: kernels call this per plane or per tile row, and
 * EfficientNet's SiLU epilogues on 3x3 and 6x6 planes had run mostly one
 * element at a time (a fused SiLU cost 4% more than the Sigmoid and Mul
 * nodes it replaced). */
static void act_span(const struct hp_epi *e, float *y, int64_t n)
{
	int64_t m = n / 16 * 16;
	float t[16] = { 0 };

	if (e->act < HP_EPI_SIGMOID || n == m) {
		acts[e->act](e, y, n);
		return;
	}
	if (m)
		acts[e->act](e, y, m);
	memcpy(t, y + m, (size_t)(n - m) * sizeof *t);
	acts[e->act](e, t, 16);
	memcpy(y + m, t, (size_t)(n - m) * sizeof *t);
}

/* Elements [b, e): the add, then the activation over the same range while
 * it is in cache. */
void hp_epi_span(const struct hp_epi *e, float *y, const float *addend, int64_t b, int64_t end)
{
	if (e->add == HP_EPI_ADD_FULL)
		for (int64_t i = b; i < end; i++)
			y[i] = y[i] + addend[i];
	else if (e->add == HP_EPI_ADD_SCALAR)
		for (int64_t i = b; i < end; i++)
			y[i] = y[i] + addend[0];
	else if (e->add == HP_EPI_ADD_MID)
		add_mid(e, y, addend, b, end);
	if (e->act != HP_EPI_NONE)
		act_span(e, y + b, end - b);
}

static void epi_range(void *arg, int64_t b, int64_t end, int tid)
{
	const struct epi_job *j = arg;

	(void)tid;
	hp_epi_span(j->e, j->y, j->add, b, end);
}

void hp_epi_run(const struct hp_epi *e, float *y, const float *addend, int64_t n, struct hp_pool *pool)
{
	struct hp_epi c = *e;
	struct epi_job j = { .e = &c, .y = y, .add = addend };

	if (!addend) /* an omitted addend: the activation only */
		c.add = HP_EPI_ADD_NONE;
	if (c.act == HP_EPI_NONE && c.add == HP_EPI_ADD_NONE)
		return;
	hp_parallel_for(pool, n, HPK_GRAIN / 4, epi_range, &j);
}
