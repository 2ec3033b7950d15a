/* Operators of issue 19 against naive double references written from the
 * ONNX formulas, on shapes and attributes ONNX's node tests do not cover:
 * GroupNormalization (opset 18 per-group and opset 21 per-channel scale),
 * LRN with even and odd sizes, Einsum (batched matmul, transpose, trace
 * with broadcast ellipsis), TopK over a long axis with ties (both
 * directions), CumSum reverse exclusive, bidirectional LSTM with sequence
 * lengths (outputs past a length are zero, Y_h is the last valid step). */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "hpdlf/error.h"
#include "hpdlf/kernels.h"
#include "tests/kernels/harness.h"

static float at(const struct hp_tensor *t, int64_t i)
{
	return ((const float *)t->data)[i];
}

static void expect_close(const struct hp_tensor *y, const double *want, int64_t n, double tol, const char *what)
{
	assert_int_equal(hp_shape_numel(&y->shape), n);
	for (int64_t i = 0; i < n; i++)
		if (!(fabs(at(y, i) - want[i]) <= tol * fmax(1, fabs(want[i]))))
			fail_msg("%s: element %lld is %.9g, expected %.9g", what, (long long)i, at(y, i), want[i]);
}

static void test_group_norm(void **state)
{
	int64_t dims[4] = { 2, 6, 3, 4 }, C = 6, G = 3, inner = 12;
	(void)state;
	for (int per_channel = 0; per_channel < 2; per_channel++) {
		int64_t k = per_channel ? C : G;
		struct hp_tensor in[3] = { kt_tensor(HP_F32, 4, dims), kt_tensor(HP_F32, 1, &k), kt_tensor(HP_F32, 1, &k) }, y;
		struct hp_attr a[2] = { kt_int("num_groups", G), kt_float("epsilon", 1e-3f) };
		struct kt_case c = { .op = "GroupNormalization", .nin = 3, .in = in, .nattrs = 2, .attrs = a, .nout = 1 };
		double want[2 * 6 * 12];
		kt_fill_random(&in[0], 1, -3, 5);
		kt_fill_random(&in[1], 2, 0.5f, 2);
		kt_fill_random(&in[2], 3, -1, 1);
		for (int64_t b = 0; b < 2; b++)
			for (int64_t g = 0; g < G; g++) {
				double m = 0, v = 0, cnt = (double)(C / G * inner);
				for (int64_t e = 0; e < C / G * inner; e++)
					m += at(&in[0], (b * C + g * (C / G)) * inner + e) / cnt;
				for (int64_t e = 0; e < C / G * inner; e++) {
					double d = at(&in[0], (b * C + g * (C / G)) * inner + e) - m;
					v += d * d / cnt;
				}
				for (int64_t e = 0; e < C / G * inner; e++) {
					int64_t i = (b * C + g * (C / G)) * inner + e, ch = per_channel ? g * (C / G) + e / inner : g;
					want[i] = (at(&in[0], i) - m) / sqrt(v + 1e-3) * at(&in[1], ch) + at(&in[2], ch);
				}
			}
		assert_int_equal(kt_run(&c, &y), 0);
		expect_close(&y, want, 2 * 6 * 12, 1e-5, per_channel ? "GroupNorm per channel" : "GroupNorm per group");
		hp_tensor_free(&y);
		for (int i = 0; i < 3; i++)
			hp_tensor_free(&in[i]);
	}
}

static void test_lrn(void **state)
{
	int64_t dims[4] = { 2, 7, 3, 2 }, C = 7, inner = 6;
	(void)state;
	for (int size = 2; size <= 5; size += 3) {
		struct hp_tensor x = kt_tensor(HP_F32, 4, dims), y;
		struct hp_attr a[4] = { kt_int("size", size), kt_float("alpha", 0.3f), kt_float("beta", 0.6f),
					kt_float("bias", 1.5f) };
		struct kt_case c = { .op = "LRN", .nin = 1, .in = &x, .nattrs = 4, .attrs = a, .nout = 1 };
		double want[2 * 7 * 6];
		kt_fill_random(&x, 4, -2, 2);
		for (int64_t b = 0; b < 2; b++)
			for (int64_t ch = 0; ch < C; ch++)
				for (int64_t i = 0; i < inner; i++) {
					double sq = 0;
					for (int64_t k = ch - (size - 1) / 2; k <= ch + size / 2; k++) /* floor / ceil of (size-1)/2 */
						if (k >= 0 && k < C)
							sq += pow(at(&x, (b * C + k) * inner + i), 2);
					int64_t e = (b * C + ch) * inner + i;
					want[e] = at(&x, e) / pow(1.5 + 0.3 / size * sq, 0.6);
				}
		assert_int_equal(kt_run(&c, &y), 0);
		expect_close(&y, want, 2 * 7 * 6, 1e-5, "LRN");
		hp_tensor_free(&y);
		hp_tensor_free(&x);
	}
}

/* Einsums of the batched-product form (kernels/einsum.c einsum_matmul):
 * attention's two products, a broadcast ellipsis, a broadcast batch label,
 * an outer product, a full contraction and an implicit output, each
 * against loops written out here in double. */
static void run_einsum(const char *eqs, struct hp_tensor *a, struct hp_tensor *b, const double *want, int64_t n,
		       int rank)
{
	struct hp_tensor in[2] = { *a, *b }, y;
	struct hp_attr eq = kt_string("equation", eqs);
	struct kt_case c = { .op = "Einsum", .nin = 2, .in = in, .nattrs = 1, .attrs = &eq, .nout = 1 };

	assert_int_equal(kt_run(&c, &y), 0);
	assert_int_equal(y.shape.rank, rank);
	assert_int_equal(hp_shape_numel(&y.shape), n);
	expect_close(&y, want, n, 1e-6, eqs);
	hp_tensor_free(&y);
}

static void test_einsum_products(void **state)
{
	enum { B = 2, Q = 5, K = 4, H = 3, D = 6 };
	int64_t qd[4] = { B, Q, H, D }, kd[4] = { B, K, H, D }, sd[4] = { B, H, Q, K };
	int64_t e1[4] = { 2, 1, 3, 4 }, e2[2] = { 4, 5 }, b1[3] = { 1, 3, 4 }, b2[3] = { 2, 4, 2 }, v1[1] = { 7 },
		v2[1] = { 9 };
	struct hp_tensor q = kt_tensor(HP_F32, 4, qd), k = kt_tensor(HP_F32, 4, kd), s = kt_tensor(HP_F32, 4, sd);
	struct hp_tensor x = kt_tensor(HP_F32, 4, e1), w = kt_tensor(HP_F32, 2, e2), u = kt_tensor(HP_F32, 3, b1);
	struct hp_tensor t = kt_tensor(HP_F32, 3, b2), o1 = kt_tensor(HP_F32, 1, v1), o2 = kt_tensor(HP_F32, 1, v2);
	static double want[B * Q * H * D + 64];

	(void)state;
	kt_fill_random(&q, 11, -1, 1);
	kt_fill_random(&k, 12, -1, 1);
	kt_fill_random(&s, 13, -1, 1);
	kt_fill_random(&x, 14, -1, 1);
	kt_fill_random(&w, 15, -1, 1);
	kt_fill_random(&u, 16, -1, 1);
	kt_fill_random(&t, 17, -1, 1);
	kt_fill_random(&o1, 18, -1, 1);
	kt_fill_random(&o2, 19, -1, 1);
	/* scores: bqhd,bkhd->bhqk */
	memset(want, 0, sizeof want);
	for (int b = 0; b < B; b++)
		for (int h = 0; h < H; h++)
			for (int i = 0; i < Q; i++)
				for (int j = 0; j < K; j++)
					for (int d = 0; d < D; d++)
						want[((b * H + h) * Q + i) * K + j] += (double)at(&q, ((b * Q + i) * H + h) * D + d) *
										     at(&k, ((b * K + j) * H + h) * D + d);
	run_einsum("bqhd,bkhd->bhqk", &q, &k, want, B * H * Q * K, 4);
	/* weighted values: bhqk,bkhd->bqhd */
	memset(want, 0, sizeof want);
	for (int b = 0; b < B; b++)
		for (int h = 0; h < H; h++)
			for (int i = 0; i < Q; i++)
				for (int d = 0; d < D; d++)
					for (int j = 0; j < K; j++)
						want[((b * Q + i) * H + h) * D + d] += (double)at(&s, ((b * H + h) * Q + i) * K + j) *
										     at(&k, ((b * K + j) * H + h) * D + d);
	run_einsum("bhqk,bkhd->bqhd", &s, &k, want, B * Q * H * D, 4);
	/* a broadcast ellipsis against a matrix: ...ij,jk->...ik, x [2,1,3,4] */
	memset(want, 0, sizeof want);
	for (int e = 0; e < 2; e++)
		for (int i = 0; i < 3; i++)
			for (int j = 0; j < 5; j++)
				for (int l = 0; l < 4; l++)
					want[(e * 3 + i) * 5 + j] += (double)at(&x, (e * 3 + i) * 4 + l) * at(&w, l * 5 + j);
	run_einsum("...ij,jk->...ik", &x, &w, want, 2 * 3 * 5, 4);
	/* a batch label of size 1 in one operand (broadcast): bij,bjk->bik, u [1,3,4], t [2,4,2] */
	memset(want, 0, sizeof want);
	for (int b = 0; b < 2; b++)
		for (int i = 0; i < 3; i++)
			for (int j = 0; j < 2; j++)
				for (int l = 0; l < 4; l++)
					want[(b * 3 + i) * 2 + j] += (double)at(&u, i * 4 + l) * at(&t, (b * 4 + l) * 2 + j);
	run_einsum("bij,bjk->bik", &u, &t, want, 2 * 3 * 2, 3);
	/* an outer product, implicit output (i,j -> ij) */
	for (int i = 0; i < 7; i++)
		for (int j = 0; j < 9; j++)
			want[i * 9 + j] = (double)at(&o1, i) * at(&o2, j);
	run_einsum("i,j", &o1, &o2, want, 63, 2);
	/* a full contraction: bqhd,bqhd-> over q with itself */
	want[0] = 0;
	for (int e = 0; e < B * Q * H * D; e++)
		want[0] += (double)at(&q, e) * at(&q, e);
	run_einsum("bqhd,bqhd->", &q, &q, want, 1, 0);
	hp_tensor_free(&q), hp_tensor_free(&k), hp_tensor_free(&s), hp_tensor_free(&x), hp_tensor_free(&w);
	hp_tensor_free(&u), hp_tensor_free(&t), hp_tensor_free(&o1), hp_tensor_free(&o2);
}

static void test_einsum(void **state)
{
	int64_t ad[3] = { 2, 3, 4 }, bd[3] = { 2, 4, 5 }, td[4] = { 2, 1, 3, 3 };
	struct hp_tensor in[2] = { kt_tensor(HP_F32, 3, ad), kt_tensor(HP_F32, 3, bd) }, y, t = kt_tensor(HP_F32, 4, td);
	struct hp_attr eq = kt_string("equation", "bij,bjk->bki");
	struct kt_case c = { .op = "Einsum", .nin = 2, .in = in, .nattrs = 1, .attrs = &eq, .nout = 1 };
	double want[40] = { 0 }, tr[2] = { 0 };

	(void)state;
	kt_fill_random(&in[0], 5, -1, 1);
	kt_fill_random(&in[1], 6, -1, 1);
	for (int b = 0; b < 2; b++)
		for (int i = 0; i < 3; i++)
			for (int k = 0; k < 5; k++)
				for (int j = 0; j < 4; j++)
					want[(b * 5 + k) * 3 + i] += (double)at(&in[0], (b * 3 + i) * 4 + j) * at(&in[1], (b * 4 + j) * 5 + k);
	assert_int_equal(kt_run(&c, &y), 0);
	assert_int_equal(y.shape.rank, 3);
	assert_int_equal(y.shape.dims[1], 5);
	expect_close(&y, want, 30, 1e-6, "Einsum bij,bjk->bki");
	hp_tensor_free(&y);
	/* trace of each matrix, implicit output: "...ii" keeps the ellipsis */
	eq = kt_string("equation", "...ii");
	c = (struct kt_case){ .op = "Einsum", .nin = 1, .in = &t, .nattrs = 1, .attrs = &eq, .nout = 1 };
	kt_fill_random(&t, 7, -1, 1);
	for (int b = 0; b < 2; b++)
		for (int i = 0; i < 3; i++)
			tr[b] += at(&t, b * 9 + i * 4);
	assert_int_equal(kt_run(&c, &y), 0);
	assert_int_equal(y.shape.rank, 2);
	expect_close(&y, tr, 2, 1e-6, "Einsum ...ii");
	hp_tensor_free(&y);
	for (int i = 0; i < 2; i++)
		hp_tensor_free(&in[i]);
	hp_tensor_free(&t);
}

/* TopK over 200 values in 17 distinct levels (ties everywhere), K = 9. */
static void test_topk_ties(void **state)
{
	int64_t xd[2] = { 3, 200 }, kd[1] = { 1 };
	(void)state;
	for (int largest = 0; largest < 2; largest++) {
		struct hp_tensor in[2] = { kt_tensor(HP_F32, 2, xd), kt_tensor(HP_I64, 1, kd) }, out[2];
		struct hp_attr a = kt_int("largest", largest);
		struct kt_case c = { .op = "TopK", .nin = 2, .in = in, .const_mask = 2, .nattrs = 1, .attrs = &a, .nout = 2 };
		*(int64_t *)in[1].data = 9;
		for (int64_t i = 0; i < 600; i++)
			((float *)in[0].data)[i] = (float)((i * 37 + 11) % 17);
		assert_int_equal(kt_run(&c, out), 0);
		for (int64_t r = 0; r < 3; r++) { /* naive: pick the best remaining, lowest index on ties */
			char used[200] = { 0 };
			for (int k = 0; k < 9; k++) {
				int64_t best = -1;
				for (int64_t i = 0; i < 200; i++) {
					float v = at(&in[0], r * 200 + i), bv = best < 0 ? 0 : at(&in[0], r * 200 + best);
					if (!used[i] && (best < 0 || (largest ? v > bv : v < bv)))
						best = i;
				}
				used[best] = 1;
				assert_int_equal(((int64_t *)out[1].data)[r * 9 + k], best);
				assert_true(at(&out[0], r * 9 + k) == at(&in[0], r * 200 + best));
			}
		}
		for (int i = 0; i < 2; i++) {
			hp_tensor_free(&out[i]);
			hp_tensor_free(&in[i]);
		}
	}
}

static void test_cumsum_reverse_exclusive(void **state)
{
	int64_t xd[3] = { 2, 5, 3 }, ad[1] = { 1 };
	struct hp_tensor in[2] = { kt_tensor(HP_F32, 3, xd), kt_tensor(HP_I64, 1, ad) }, y;
	struct hp_attr a[2] = { kt_int("reverse", 1), kt_int("exclusive", 1) };
	struct kt_case c = { .op = "CumSum", .nin = 2, .in = in, .const_mask = 2, .nattrs = 2, .attrs = a, .nout = 1 };
	double want[30];

	(void)state;
	*(int64_t *)in[1].data = -2; /* axis 1 */
	kt_fill_random(&in[0], 8, -1, 1);
	for (int b = 0; b < 2; b++)
		for (int j = 0; j < 3; j++)
			for (int i = 0; i < 5; i++) {
				double s = 0;
				for (int k = i + 1; k < 5; k++)
					s += at(&in[0], (b * 5 + k) * 3 + j);
				want[(b * 5 + i) * 3 + j] = s;
			}
	assert_int_equal(kt_run(&c, &y), 0);
	expect_close(&y, want, 30, 1e-6, "CumSum");
	hp_tensor_free(&y);
	hp_tensor_free(&in[0]);
	hp_tensor_free(&in[1]);
}

/* Naive bidirectional LSTM (no peepholes, no bias), the ONNX equations. */
static void lstm_ref(const struct hp_tensor *in, const int64_t *lens, double *Y, double *Yh)
{
	const int64_t S = 4, B = 2, I = 3, H = 2;

	memset(Y, 0, sizeof(double) * S * 2 * B * H);
	for (int d = 0; d < 2; d++)
		for (int64_t b = 0; b < B; b++) {
			double h[2] = { 0 }, c[2] = { 0 };
			for (int64_t s = 0; s < lens[b]; s++) {
				int64_t t = d ? lens[b] - 1 - s : s;
				double gsum[8], nh[2];
				for (int r = 0; r < 4 * H; r++) {
					gsum[r] = 0;
					for (int i = 0; i < I; i++)
						gsum[r] += at(&in[0], (t * B + b) * I + i) * at(&in[1], (d * 4 * H + r) * I + i);
					for (int i = 0; i < H; i++)
						gsum[r] += h[i] * at(&in[2], (d * 4 * H + r) * H + i);
				}
				for (int j = 0; j < H; j++) {
					double ig = 1 / (1 + exp(-gsum[j])), og = 1 / (1 + exp(-gsum[H + j]));
					double fg = 1 / (1 + exp(-gsum[2 * H + j])), cg = tanh(gsum[3 * H + j]);
					c[j] = fg * c[j] + ig * cg;
					nh[j] = og * tanh(c[j]);
				}
				memcpy(h, nh, sizeof h);
				for (int j = 0; j < H; j++)
					Y[((t * 2 + d) * B + b) * H + j] = h[j];
			}
			for (int j = 0; j < H; j++)
				Yh[(d * B + b) * H + j] = h[j];
		}
}

static void test_lstm_bidirectional_lengths(void **state)
{
	int64_t xd[3] = { 4, 2, 3 }, wd[3] = { 2, 8, 3 }, rd[3] = { 2, 8, 2 }, ld[1] = { 2 }, lens[2] = { 3, 1 };
	struct hp_tensor in[5] = { kt_tensor(HP_F32, 3, xd), kt_tensor(HP_F32, 3, wd), kt_tensor(HP_F32, 3, rd), { 0 },
				   kt_tensor(HP_I32, 1, ld) }, out[2];
	struct hp_attr a[2] = { kt_string("direction", "bidirectional"), kt_int("hidden_size", 2) };
	struct kt_case c = { .op = "LSTM", .nin = 5, .in = in, .nattrs = 2, .attrs = a, .nout = 2 };
	double Y[32], Yh[8];

	(void)state;
	kt_fill_random(&in[0], 9, -1, 1);
	kt_fill_random(&in[1], 10, -1, 1);
	kt_fill_random(&in[2], 11, -1, 1);
	((int32_t *)in[4].data)[0] = 3;
	((int32_t *)in[4].data)[1] = 1;
	lstm_ref(in, lens, Y, Yh);
	assert_int_equal(kt_run(&c, out), 0);
	expect_close(&out[0], Y, 32, 1e-5, "LSTM Y");
	expect_close(&out[1], Yh, 8, 1e-5, "LSTM Y_h");
	for (int i = 0; i < 2; i++)
		hp_tensor_free(&out[i]);
	for (int i = 0; i < 5; i++)
		hp_tensor_free(&in[i]);
}

/* hp_op_find (a binary search on names) finds every op of the table under
 * its own domain and "ai.onnx" for the default one, as a linear scan of
 * hp_op_list does, and nothing for names that are not there. */
static void test_op_find_all(void **state)
{
	int n;
	const struct hp_op *const *all = hp_op_list(&n);
	static const char *absent[] = { "", "A", "Zzzz", "relu", "Conv2", "ConvX", "~" };

	(void)state;
	assert_true(n > 100);
	for (int i = 0; i < n; i++) {
		const char *d = all[i]->domain ? all[i]->domain : "";
		const struct hp_op *first = NULL;
		for (int j = 0; j < n && !first; j++) { /* the first of the table: linear */
			const char *e = all[j]->domain ? all[j]->domain : "";
			if (!strcmp(all[j]->name, all[i]->name) &&
			    !strcmp(!strcmp(d, "ai.onnx") ? "" : d, !strcmp(e, "ai.onnx") ? "" : e))
				first = all[j];
		}
		assert_ptr_equal(hp_op_find(d, all[i]->name), first);
		if (!*d)
			assert_ptr_equal(hp_op_find("ai.onnx", all[i]->name), first);
	}
	for (size_t k = 0; k < sizeof absent / sizeof absent[0]; k++)
		assert_null(hp_op_find("", absent[k]));
	assert_null(hp_op_find("no.such.domain", "Relu"));
	assert_non_null(hp_op_find(NULL, "Relu"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_group_norm),
		cmocka_unit_test(test_lrn),
		cmocka_unit_test(test_einsum),
		cmocka_unit_test(test_einsum_products),
		cmocka_unit_test(test_topk_ties),
		cmocka_unit_test(test_cumsum_reverse_exclusive),
		cmocka_unit_test(test_lstm_bidirectional_lengths),
		cmocka_unit_test(test_op_find_all),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
