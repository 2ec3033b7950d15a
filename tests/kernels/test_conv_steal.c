/* Conv kernels whose units a thread done early takes from a late one
 * (hp_conv_steal): the pointwise product (conv_pw.c: full panels read in
 * place on small planes, the tail panel shared by a thread's units; packed
 * panels on large ones), the depthwise kernels (conv_dwc.c's channel
 * blocks, conv_dw.c's planes over conv_dw3.c or its own padded rows) and
 * the im2col tiles (conv.c: MobileNetV2's 3-channel stem), the KxK chains
 * (conv_kxk.c) and products on evened column blocks (hp_conv_even_block), with and without
 * a fused epilogue (FusedConv: Clip, Relu, a full addend).
 *
 * Each case against plain double loops (tolerance), and bitwise: one
 * thread, two threads as they come, and two threads whose worker starts
 * late (hp_pool_set_steal_stall_us: by 30 us, or until the caller has
 * taken every unit) so that the caller runs units of the worker's share as
 * tid 0, each output still the one chain of its kernel.
 * The late-worker runs must have stolen units (hp_pool_stolen_units), or
 * the test would not test stealing. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "hpdlf/error.h"
#include "kernels/conv_impl.h"
#include "kernels/threadpool.h"
#include "tests/kernels/harness.h"

struct sc {
	const char *what;
	int64_t n, c, m, h, w, k, s, p, dil, group;
	const char *act;   /* NULL: Conv; else FusedConv with this activation ("" none) */
	int addend;        /* FusedConv: a full addend */
	int steals;        /* the node runs on two threads (big enough), so units must be stolen */
};

static const struct sc cases[] = {
	/* pointwise, planes of one column block: panels in place */
	{ "1x1 7x7 160->960 (MobileNetV2 expansion)", 1, 160, 960, 7, 7, 1, 1, 0, 1, 1, "Clip", 0, 1 },
	{ "1x1 7x7 960->160 + add (projection, K in 4 chunks)", 1, 960, 160, 7, 7, 1, 1, 0, 1, 1, "", 1, 1 },
	{ "1x1 11x11 96->100, batch 3 (tails of rows and columns)", 3, 96, 100, 11, 11, 1, 1, 0, 1, 1, NULL, 0, 1 },
	{ "1x1 3x3 2100->70 (tail panel too large to keep)", 1, 2100, 70, 3, 3, 1, 1, 0, 1, 1, "Relu", 0, 1 },
	/* pointwise, several column blocks: packed panels */
	{ "1x1 20x23 64->30, batch 2", 2, 64, 30, 20, 23, 1, 1, 0, 1, 1, "Relu", 1, 1 },
	{ "1x1 28x28 300->44", 1, 300, 44, 28, 28, 1, 1, 0, 1, 1, NULL, 0, 1 },
	/* column blocks evened (hp_conv_even_block): 144 columns as 80 + 64,
	 * 576 as six of 96, each thread's share whole blocks */
	{ "1x1 12x12 192->64 (GoogLeNet's inception 3a, blocks 80 + 64)", 1, 192, 64, 12, 12, 1, 1, 0, 1, 1, "Relu", 0, 1 },
	{ "3x3 12x12 32->96 (kxk, blocks 80 + 64)", 1, 32, 96, 12, 12, 3, 1, 1, 1, 1, "Relu", 0, 1 },
	{ "3x3 24x24 64->40 + add (kxk, six blocks of 96)", 1, 64, 40, 24, 24, 3, 1, 1, 1, 1, "", 1, 1 },
	{ "3x3 11x11 32->128 (kxk, one block cut in two: 64 + 57)", 1, 32, 128, 11, 11, 3, 1, 1, 1, 1, "Relu", 0, 1 },
	/* depthwise */
	{ "dw 7x7 s1 960 (channel blocks)", 1, 960, 960, 7, 7, 3, 1, 1, 1, 960, "Clip", 0, 1 },
	{ "dw 14x14 s2 100, batch 2 (channel blocks)", 2, 100, 100, 14, 14, 3, 2, 1, 1, 100, NULL, 0, 1 },
	{ "dw 57x56 s2 36 (channel blocks, wide rows)", 1, 36, 36, 57, 56, 3, 2, 1, 1, 36, "Relu", 0, 1 },
	{ "dw 41x43 s2 pad 2, 21 (wide rows, a partial block)", 1, 21, 21, 41, 43, 3, 2, 2, 1, 21, NULL, 0, 1 },
	{ "dw 20x21 s1 37 (rows of conv_dw3.c)", 1, 37, 37, 20, 21, 3, 1, 1, 1, 37, "Relu", 1, 1 },
	{ "dw 48x44 s1 64 (rows of conv_dw3.c, threads at once)", 1, 64, 64, 48, 44, 3, 1, 1, 1, 64, NULL, 0, 1 },
	{ "dw 18x18 s1 dil 2, 20 (padded rows)", 1, 20, 20, 18, 18, 3, 1, 2, 2, 20, NULL, 0, 1 },
	{ "dw 40x40 s1 dil 2, 64 (padded rows, threads at once)", 1, 64, 64, 40, 40, 3, 1, 2, 2, 64, NULL, 0, 1 },
	{ "dw 15x15 5x5 s1, multiplier 2 (taps one by one)", 1, 12, 24, 15, 15, 5, 1, 2, 1, 12, NULL, 0, 1 },
	/* im2col tiles */
	{ "3x3 s2 3->32 at 224 (MobileNetV2's stem)", 1, 3, 32, 224, 224, 3, 2, 1, 1, 1, "Clip", 0, 1 },
	{ "3x3 s2 3->16 at 121x117, batch 2", 2, 3, 16, 121, 117, 3, 2, 1, 1, 1, NULL, 0, 1 },
};

static int64_t odim(const struct sc *t, int64_t in)
{
	return (in + 2 * t->p - t->dil * (t->k - 1) - 1) / t->s + 1;
}

/* y = act(b + conv(x, w) + add) in double loops. */
static double *reference(const struct sc *t, const float *x, const float *w, const float *b, const float *add)
{
	int64_t oh = odim(t, t->h), ow = odim(t, t->w), cg = t->c / t->group, mg = t->m / t->group;
	double *y = calloc((size_t)(t->n * t->m * oh * ow), sizeof *y);

	for (int64_t n = 0; n < t->n; n++)
		for (int64_t m = 0; m < t->m; m++)
			for (int64_t i = 0; i < oh * ow; i++) {
				int64_t yo = (n * t->m + m) * oh * ow + i, g = m / mg;
				double v = b[m];
				for (int64_t c = 0; c < cg; c++)
					for (int64_t kh = 0; kh < t->k; kh++)
						for (int64_t kw = 0; kw < t->k; kw++) {
							int64_t ih = i / ow * t->s - t->p + kh * t->dil;
							int64_t iw = i % ow * t->s - t->p + kw * t->dil;
							if (ih < 0 || ih >= t->h || iw < 0 || iw >= t->w)
								continue;
							v += (double)w[((m * cg + c) * t->k + kh) * t->k + kw] *
							     x[((n * t->c + g * cg + c) * t->h + ih) * t->w + iw];
						}
				v += add ? add[yo] : 0;
				if (t->act && !strcmp(t->act, "Relu"))
					v = v < 0 ? 0 : v;
				if (t->act && !strcmp(t->act, "Clip"))
					v = v < 0 ? 0 : v > 6 ? 6 : v;
				y[yo] = v;
			}
	return y;
}

static void run(const struct sc *t, const struct hp_tensor *in, struct hp_pool *pool, struct hp_tensor *out)
{
	int64_t pads[4] = { t->p, t->p, t->p, t->p }, st[2] = { t->s, t->s }, dl[2] = { t->dil, t->dil };
	int64_t ks[2] = { t->k, t->k };
	struct hp_attr a[8] = { kt_ints("strides", 2, st), kt_ints("pads", 4, pads), kt_ints("dilations", 2, dl),
				kt_int("group", t->group), kt_ints("kernel_shape", 2, ks) };
	int na = 5;

	if (t->act) {
		a[na++] = kt_string("activation", t->act);
		a[na++] = kt_float("clip_min", 0);
		a[na++] = kt_float("clip_max", 6);
	}
	struct kt_case c = { .domain = t->act ? "ai.hpdlf" : NULL, .op = t->act ? "FusedConv" : "Conv",
			     .nin = t->addend ? 4 : 3, .in = in, .const_mask = 2u, .nattrs = na, .attrs = a,
			     .nout = 1, .pool = pool };
	if (kt_run(&c, out) < 0)
		fail_msg("%s: %s", t->what, hp_errmsg());
}

static void check_ref(const struct sc *t, const struct hp_tensor *y, const double *ref)
{
	int64_t n = hp_shape_numel(&y->shape);
	const float *p = y->data;
	double big = 1;

	for (int64_t i = 0; i < n; i++)
		big = fabs(ref[i]) > big ? fabs(ref[i]) : big;
	for (int64_t i = 0; i < n; i++)
		if (!(fabs(p[i] - ref[i]) <= 1e-5 * big * sqrt((double)(t->c / t->group * t->k * t->k))))
			fail_msg("%s: element %lld is %.9g, loops give %.9g", t->what, (long long)i, p[i], ref[i]);
}

static void same_bits(const struct sc *t, const struct hp_tensor *a, const struct hp_tensor *b, const char *how)
{
	if (memcmp(a->data, b->data, (size_t)hp_shape_numel(&a->shape) * sizeof(float)))
		fail_msg("%s: %s changes the bits", t->what, how);
}

static void check_case(const struct sc *t, int ci, struct hp_pool *pool)
{
	int64_t xd[4] = { t->n, t->c, t->h, t->w }, wd[4] = { t->m, t->c / t->group, t->k, t->k }, bd[1] = { t->m };
	int64_t yd[4] = { t->n, t->m, odim(t, t->h), odim(t, t->w) };
	struct hp_tensor in[4] = { kt_tensor(HP_F32, 4, xd), kt_tensor(HP_F32, 4, wd), kt_tensor(HP_F32, 1, bd),
				   kt_tensor(HP_F32, 4, yd) };
	struct hp_tensor one, two;
	double *ref;

	for (int i = 0; i < 4; i++)
		kt_fill_random(&in[i], 100 * ci + i, i == 1 ? -0.3f : -2, i == 1 ? 0.3f : 2);
	ref = reference(t, in[0].data, in[1].data, in[2].data, t->addend ? in[3].data : NULL);
	run(t, in, NULL, &one);
	check_ref(t, &one, ref);
	for (int rep = 0; rep < 12; rep++) {
		/* a worker late by nothing, by a part of the node, until the
		 * caller has taken every unit */
		static const int64_t stall_us[] = { 0, 30, -1 };
		uint64_t stolen = hp_pool_stolen_units();
		hp_pool_set_steal_stall_us(stall_us[rep % 3]);
		run(t, in, pool, &two);
		hp_pool_set_steal_stall_us(0);
		same_bits(t, &one, &two, rep % 3 ? "a late worker" : "a pool of 2");
		if (rep % 3 == 2 && t->steals && hp_pool_stolen_units() == stolen)
			fail_msg("%s: no unit was stolen from a late worker", t->what);
		hp_tensor_free(&two);
	}
	hp_tensor_free(&one);
	for (int i = 0; i < 4; i++)
		hp_tensor_free(&in[i]);
	free(ref);
}

static void test_steal(void **state)
{
	struct hp_pool *pool;

	(void)state;
	assert_int_equal(hp_pool_create(2, &pool), 0);
	for (int i = 0; i < (int)(sizeof cases / sizeof cases[0]); i++)
		check_case(&cases[i], i, pool);
	hp_pool_destroy(pool);
}

/* The evened widths: an even number of blocks of whole panels where a
 * node has few, KX_NB/PW_NB's 128 columns elsewhere. */
static void test_even_block(void **state)
{
	(void)state;
	assert_int_equal(hp_conv_even_block(144, 128, 16, 1, 0), 80);   /* 128 + 16 -> 80 + 64 */
	assert_int_equal(hp_conv_even_block(576, 128, 16, 1, 0), 96);   /* 5 blocks -> 6 of 96 */
	assert_int_equal(hp_conv_even_block(529, 128, 16, 1, 0), 96);   /* 34 panels: 6 blocks */
	assert_int_equal(hp_conv_even_block(256, 128, 16, 1, 0), 128);  /* already 2 equal ones */
	assert_int_equal(hp_conv_even_block(100, 128, 16, 1, 0), 128);  /* one block: cut by rows */
	assert_int_equal(hp_conv_even_block(144, 128, 16, 4, 0), 128);  /* 8 blocks with the batch */
	assert_int_equal(hp_conv_even_block(4096, 128, 16, 1, 0), 128);
	/* one block cut in two where asked (kxk): 121 columns, 8 panels */
	assert_int_equal(hp_conv_even_block(121, 128, 16, 1, 1), 64);
	assert_int_equal(hp_conv_even_block(81, 128, 16, 1, 1), 48);   /* 6 panels */
	assert_int_equal(hp_conv_even_block(49, 128, 16, 1, 1), 128);  /* 4 panels: by rows */
	assert_int_equal(hp_conv_even_block(121, 128, 16, 2, 1), 128); /* a batch of 2 */
}

/* hp_conv_par_threads: the threads from HP_CONV_PAR_MIN_FLOPS; from
 * HP_CONV_PAR_MIN_POLLING only while no worker sleeps; else one. */
static void test_par_threads(void **state)
{
	struct hp_pool *pool;
	int tries;

	(void)state;
	assert_int_equal(hp_pool_create(2, &pool), 0);
	for (tries = 0; tries < 2000 && hp_pool_polling(pool); tries++) {
		struct timespec t = { 0, 1000000 };
		nanosleep(&t, NULL);
	}
	assert_false(hp_pool_polling(pool));
	assert_int_equal(hp_conv_par_threads(pool, 2, HP_CONV_PAR_MIN_FLOPS), 2);
	assert_int_equal(hp_conv_par_threads(pool, 2, HP_CONV_PAR_MIN_POLLING), 1); /* asleep */
	assert_int_equal(hp_conv_par_threads(pool, 2, 1e4), 1);
	assert_int_equal(hp_conv_par_threads(NULL, 1, 1e4), 1);
	hp_pool_destroy(pool);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_even_block),
		cmocka_unit_test(test_par_threads),
		cmocka_unit_test(test_steal),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
