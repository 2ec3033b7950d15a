/* FusedMatMul and FusedGemm (kernels/fused.c) apply their epilogue,
 * act(y + addend), inside the product's tiles (kernels/gemm.c).  Checked
 * against plain double loops (tolerance), bitwise against the plain
 * MatMul/Gemm node followed by the epilogue as one pass over the whole
 * output (hp_epi_run: what the fused node did before, and what the unfused
 * Add and activation nodes compute), and bitwise between 1 and 2 threads.
 * Shapes: several K tiles, ragged N tiles, batches folded into M and
 * batched products, addends as a bias row, a full tensor and a scalar. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "hpdlf/error.h"
#include "kernels/eltwise_impl.h"
#include "kernels/fused_impl.h"
#include "kernels/sigmoid512.h"
#include "tests/kernels/harness.h"

struct fcase {
	const char *op;         /* MatMul or Gemm */
	int ra, rb;
	int64_t ad[4], bd[4];
	int tb;                 /* Gemm: transB */
	int radd;               /* addend rank; 0 with add_scalar: scalar, -1: none */
	int64_t addd[4];
	const char *act;        /* "", Relu, Gelu, Sigmoid, ... */
};

static double ref_act(const char *act, double v)
{
	if (!strcmp(act, "Relu"))
		return v < 0 ? 0 : v;
	if (!strcmp(act, "Gelu"))
		return 0.5 * v * (1 + erf(v / sqrt(2.0)));
	if (!strcmp(act, "Sigmoid"))
		return 1 / (1 + exp(-v));
	return v;
}

static int64_t numel(int r, const int64_t *d)
{
	int64_t n = 1;

	for (int i = 0; i < r; i++)
		n *= d[i];
	return n;
}

/* Y = act(A B + addend) in double; A [..., M, K] (batch dims of A and B
 * equal or B unbatched), B [..., K, N] or, for Gemm with transB, [N, K]. */
static struct hp_tensor reference(const struct fcase *c, const struct hp_tensor *a, const struct hp_tensor *b,
				  const struct hp_tensor *add, const struct hp_tensor *shape)
{
	struct hp_tensor y = kt_tensor(HP_F32, shape->shape.rank, shape->shape.dims);
	const float *pa = a->data, *pb = b->data, *pd = add ? add->data : NULL;
	float *py = y.data;
	int64_t m = c->ad[c->ra - 2], k = c->ad[c->ra - 1], n = shape->shape.dims[shape->shape.rank - 1];
	int64_t nprob = numel(c->ra - 2, c->ad), bprob = c->rb > 2 ? numel(c->rb - 2, c->bd) : 1;
	int64_t tot = numel(shape->shape.rank, shape->shape.dims);

	for (int64_t p = 0; p < nprob; p++)
		for (int64_t i = 0; i < m; i++)
			for (int64_t j = 0; j < n; j++) {
				double s = 0;
				const float *bb = pb + (bprob > 1 ? p * k * n : 0);
				for (int64_t t = 0; t < k; t++)
					s += (double)pa[(p * m + i) * k + t] * (c->tb ? bb[j * k + t] : bb[t * n + j]);
				int64_t at = (p * m + i) * n + j, an = add ? (int64_t)hp_tensor_bytes(add) / 4 : 0;
				if (add)
					s += pd[an == tot ? at : an == n ? j : 0];
				py[at] = (float)ref_act(c->act, s);
			}
	return y;
}

static struct hp_tensor run(const struct fcase *c, int fused, struct hp_tensor *in, int nin, struct hp_pool *pool)
{
	struct hp_attr at[2] = { kt_string("activation", c->act), kt_int("transB", c->tb) };
	char op[32];
	struct kt_case k = { .op = op, .nin = nin, .in = in, .nout = 1, .pool = pool, .attrs = at };
	struct hp_tensor y;

	snprintf(op, sizeof op, "%s%s", fused ? "Fused" : "", c->op);
	if (fused) {
		k.domain = "ai.hpdlf";
		k.nattrs = 1 + (c->op[0] == 'G');
	} else {
		k.attrs = at + 1;
		k.nattrs = c->op[0] == 'G';
	}
	if (kt_run(&k, &y) < 0)
		fail_msg("%s: %s", op, hp_errmsg());
	return y;
}

static void fcase_run(const struct fcase *c, struct hp_pool *pool)
{
	int gemm = c->op[0] == 'G';
	struct hp_tensor in[4] = { 0 }, add = { 0 }, *addp = NULL;
	int nin;

	in[0] = kt_tensor(HP_F32, c->ra, c->ad);
	in[1] = kt_tensor(HP_F32, c->rb, c->bd);
	kt_fill_random(&in[0], 11, -1, 1);
	kt_fill_random(&in[1], 12, -1, 1);
	if (c->radd >= 0) {
		add = kt_tensor(HP_F32, c->radd, c->addd);
		kt_fill_random(&add, 13, -1, 1);
		addp = &add;
	}
	nin = gemm ? 3 : 2; /* Gemm's C omitted: the addend is input 3 */
	in[nin] = add;
	struct hp_tensor whole = run(c, 0, in, 2, NULL);
	struct hp_tensor f1 = run(c, 1, in, addp ? nin + 1 : nin, NULL);
	struct hp_tensor f2 = run(c, 1, in, addp ? nin + 1 : nin, pool);
	struct hp_tensor ref = reference(c, &in[0], &in[1], addp, &whole);
	struct hp_epi e = { .add = HP_EPI_ADD_NONE };
	int act = hp_epi_act_of(c->act);

	assert_true(act >= 0);
	e.act = (enum hp_epi_act)act;
	if (addp)
		assert_int_equal(hp_epi_add_of(&whole.shape, &add.shape, &e), 0);
	hp_epi_run(&e, whole.data, addp ? add.data : NULL, hp_shape_numel(&whole.shape), NULL);
	double err = kt_rel_err(&f1, &ref);
	if (err < 0 || err > 1e-5)
		fail_msg("%s %s: rel err %g against the loops", c->op, c->act, err);
	if (memcmp(f1.data, whole.data, hp_tensor_bytes(&whole)))
		fail_msg("%s %s: fused differs from the product then the epilogue", c->op, c->act);
	if (memcmp(f1.data, f2.data, hp_tensor_bytes(&whole)))
		fail_msg("%s %s: 1 and 2 threads differ", c->op, c->act);
	hp_tensor_free(&whole);
	hp_tensor_free(&f1);
	hp_tensor_free(&f2);
	hp_tensor_free(&ref);
	hp_tensor_free(&in[0]);
	hp_tensor_free(&in[1]);
	if (addp)
		hp_tensor_free(&add);
}

static void test_fused_tiles(void **state)
{
	static const struct fcase cases[] = {
		/* GPT-2-style MLP: batch folded into 256 rows, bias row, GELU */
		{ "MatMul", 3, 2, { 4, 64, 128 }, { 128, 512 }, 0, 1, { 512 }, "Gelu" },
		/* several K tiles, ragged N tiles, full addend (a residual) */
		{ "MatMul", 2, 2, { 300, 333 }, { 333, 70 }, 0, 2, { 300, 70 }, "" },
		/* batched (not folded): one product per batch item */
		{ "MatMul", 3, 3, { 3, 40, 50 }, { 3, 50, 90 }, 0, 3, { 3, 40, 90 }, "Relu" },
		/* activation only, no addend */
		{ "MatMul", 2, 2, { 64, 256 }, { 256, 256 }, 0, -1, { 0 }, "Sigmoid" },
		/* Gemm with transB, scalar addend */
		{ "Gemm", 2, 2, { 200, 150 }, { 260, 150 }, 1, 0, { 0 }, "Relu" },
		{ "Gemm", 2, 2, { 256, 512 }, { 512, 128 }, 0, 1, { 128 }, "Gelu" },
	};
	struct hp_pool *pool;

	(void)state;
	assert_int_equal(hp_pool_create(2, &pool), 0);
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
		fcase_run(&cases[i], pool);
	hp_pool_destroy(pool);
}

/* SiLU's epilogue: v * sigmoid(v) as the Sigmoid and Mul nodes compute
 * it, and a NaN v (either sign, any payload) given back as is, in the
 * vector loop and in a span's last n % 16 alike. */
static void test_silu_nan(void **state)
{
	const uint32_t nans[] = { 0x7fc00000u, 0xffc00000u, 0x7fc12345u, 0xffd00001u };
	struct hp_epi e = { .act = HP_EPI_SILU, .add = HP_EPI_ADD_NONE };
	float y[37], x[37];

	(void)state;
	assert_int_equal(hp_epi_act_of("Silu"), HP_EPI_SILU);
	for (int i = 0; i < 37; i++) {
		x[i] = (float)(i - 18) * 0.7f;
		if (i % 9 == 4)
			memcpy(&x[i], &nans[i / 9 % 4], sizeof x[i]);
	}
	memcpy(y, x, sizeof y);
	hp_epi_run(&e, y, NULL, 37, NULL);
	for (int i = 0; i < 37; i++) {
		float want = x[i];
		if (i % 9 != 4) {
			float s = 1.0f / (1.0f + expf(-x[i]));
			want = x[i] * s;
			if (fabsf(y[i] - want) > 1e-6f * (1 + fabsf(want)))
				fail_msg("silu(%g) = %g, want %g", (double)x[i], (double)y[i], (double)want);
		} else if (memcmp(&y[i], &want, sizeof want)) {
			fail_msg("silu of NaN %08x gave other bits", nans[i / 9 % 4]);
		}
	}
}

/* sigmoid512.c bitwise hpk_sigmoidf (and x * that for SiLU) over a
 * stride through all float bit patterns and the edges of its clamps and
 * of the 2^128 split (vectors with and without such lanes), NaN in giving
 * NaN (SiLU: the input itself). */
static void test_sigmoid512(void **state)
{
	static const float edges[] = { 0.0f, -0.0f, 1e-40f, -1e-40f, 87.33654f, -87.33654f, 88.72283f, -88.72283f,
				       88.0f, -88.0f, 88.5f, -88.5f, 87.4f, -87.4f, 100.0f, -100.0f, 1.0f, -1.0f };
	enum { N = 4096 };
	static float x[N], y[N];
	uint64_t u = 0;

	(void)state;
	for (int pass = 0; u < (1ull << 32); pass++) {
		int n = 0;
		for (; n < N && u < (1ull << 32); n++, u += 1048573) {
			uint32_t b = (uint32_t)u;
			memcpy(&x[n], &b, sizeof b);
		}
		for (int i = 0; i < (int)(sizeof edges / sizeof edges[0]) && pass == 0; i++) {
			x[16 * i] = edges[i];
			x[16 * i + 1] = nextafterf(edges[i], INFINITY);
			x[16 * i + 2] = nextafterf(edges[i], -INFINITY);
		}
		n = n / 16 * 16;
		for (int silu = 0; silu < 2; silu++) {
			if (hpk_sigmoid512(x, y, n, silu) == 0)
				skip();
			for (int i = 0; i < n; i++) {
				volatile float v = x[i], s = 1.0f / (1.0f + hpk_expf(-v));
				float want = silu ? v * s : s;
				if (v != v ? !(silu ? !memcmp(&y[i], &x[i], 4) : y[i] != y[i]) : !!memcmp(&y[i], &want, 4))
					fail_msg("%s(%a) = %a, want %a", silu ? "silu" : "sigmoid", (double)x[i],
						 (double)y[i], (double)want);
			}
		}
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_fused_tiles),
		cmocka_unit_test(test_silu_nan),
		cmocka_unit_test(test_sigmoid512),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
