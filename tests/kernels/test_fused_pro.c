/* FusedConv's prologue (kernels/fused.c input 5, kernels/conv_pw.c
 * hp_pw_forward_pro): an inference BatchNormalization and a Relu applied
 * to X as the 1x1 conv packs it.  Checked against plain double loops
 * (tolerance), bitwise against the unfused nodes (BatchNormalization,
 * Relu, then the FusedConv without prologue: what exec/fuse_pro.c
 * replaces), bitwise between 1 and 2 threads and between the AVX2 and
 * AVX-512 tiles.  Shapes: a block's panels packed once for all of K (16x16,
 * 8x8 and 4x4 planes) and per k chunk (K past the workers' buffers),
 * ragged columns and rows, a batch of two, no Relu, a full addend. */
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
#include "kernels/conv_impl.h"
#include "tests/kernels/harness.h"

struct pcase {
	int64_t n, c, h, w, m;
	int relu;        /* the Relu between BatchNorm and Conv */
	const char *act; /* the conv's epilogue */
	int add;         /* a full addend */
};

struct pin {
	struct hp_tensor x, w, b, add, scale, bias, mean, var, p;
};

static const float EPS = 1e-5f;

/* The inputs, and P as exec/fuse_pro.c computes it. */
static void make(const struct pcase *c, struct pin *t)
{
	int64_t xd[4] = { c->n, c->c, c->h, c->w }, wd[4] = { c->m, c->c, 1, 1 }, yd[4] = { c->n, c->m, c->h, c->w };
	int64_t cd[1] = { c->c }, md[1] = { c->m }, pd[2] = { 3, c->c };
	float *p;

	t->x = kt_tensor(HP_F32, 4, xd);
	t->w = kt_tensor(HP_F32, 4, wd);
	t->b = kt_tensor(HP_F32, 1, md);
	t->add = kt_tensor(HP_F32, 4, yd);
	t->scale = kt_tensor(HP_F32, 1, cd);
	t->bias = kt_tensor(HP_F32, 1, cd);
	t->mean = kt_tensor(HP_F32, 1, cd);
	t->var = kt_tensor(HP_F32, 1, cd);
	t->p = kt_tensor(HP_F32, 2, pd);
	kt_fill_random(&t->x, 21, -2, 3);
	kt_fill_random(&t->w, 22, -0.5f, 0.5f);
	kt_fill_random(&t->b, 23, -1, 1);
	kt_fill_random(&t->add, 24, -1, 1);
	kt_fill_random(&t->scale, 25, -1.5f, 1.5f);
	kt_fill_random(&t->bias, 26, -1, 1);
	kt_fill_random(&t->mean, 27, -1, 1);
	kt_fill_random(&t->var, 28, 0.2f, 2);
	p = t->p.data;
	for (int64_t k = 0; k < c->c; k++) {
		double v = ((float *)t->var.data)[k];
		p[k] = ((float *)t->mean.data)[k];
		p[c->c + k] = (float)(((float *)t->scale.data)[k] / sqrt(v + EPS));
		p[2 * c->c + k] = ((float *)t->bias.data)[k];
	}
}

static void drop(struct pin *t)
{
	struct hp_tensor *all[] = { &t->x, &t->w, &t->b, &t->add, &t->scale, &t->bias, &t->mean, &t->var, &t->p };

	for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
		hp_tensor_free(all[i]);
}

static struct hp_tensor run1(const char *domain, const char *op, int nin, const struct hp_tensor *in, unsigned cmask,
			     int nattrs, const struct hp_attr *at, struct hp_pool *pool)
{
	struct kt_case k = { .domain = domain, .op = op, .nin = nin, .in = in, .const_mask = cmask, .nattrs = nattrs,
			     .attrs = at, .nout = 1, .pool = pool };
	struct hp_tensor y;

	if (kt_run(&k, &y) < 0)
		fail_msg("%s: %s", op, hp_errmsg());
	return y;
}

/* The fused node: X, W, B, addend?, (no W^T), P. */
static struct hp_tensor fused(const struct pcase *c, const struct pin *t, struct hp_pool *pool)
{
	struct hp_tensor in[6] = { t->x, t->w, t->b, { 0 }, { 0 }, t->p };
	struct hp_attr at[2] = { kt_string("activation", c->act), kt_int("prologue_relu", c->relu) };

	if (c->add)
		in[3] = t->add;
	return run1("ai.hpdlf", "FusedConv", 6, in, 0x26, 2, at, pool);
}

/* BatchNormalization, Relu?, FusedConv: the nodes fuse_pro.c replaces. */
static struct hp_tensor unfused(const struct pcase *c, const struct pin *t, struct hp_pool *pool)
{
	struct hp_tensor bn_in[5] = { t->x, t->scale, t->bias, t->mean, t->var }, cv_in[4] = { { 0 }, t->w, t->b, { 0 } };
	struct hp_attr eps = kt_float("epsilon", EPS), act = kt_string("activation", c->act);
	struct hp_tensor z = run1(NULL, "BatchNormalization", 5, bn_in, 0x1e, 1, &eps, pool), r, y;

	if (c->relu) {
		r = run1(NULL, "Relu", 1, &z, 0, 0, NULL, pool);
		hp_tensor_free(&z);
		z = r;
	}
	cv_in[0] = z;
	if (c->add)
		cv_in[3] = t->add;
	y = run1("ai.hpdlf", "FusedConv", 4, cv_in, 0x6, 1, &act, pool);
	hp_tensor_free(&z);
	return y;
}

/* act(b + sum_k W pro(x) + add) in double, pro in double too. */
static struct hp_tensor reference(const struct pcase *c, const struct pin *t, const struct hp_tensor *like)
{
	struct hp_tensor y = kt_tensor(HP_F32, 4, like->shape.dims);
	const float *x = t->x.data, *w = t->w.data, *p = t->p.data;
	int64_t s = c->h * c->w;

	for (int64_t n = 0; n < c->n; n++)
		for (int64_t m = 0; m < c->m; m++)
			for (int64_t j = 0; j < s; j++) {
				double v = ((float *)t->b.data)[m];
				for (int64_t k = 0; k < c->c; k++) {
					double u = ((double)x[(n * c->c + k) * s + j] - p[k]) * p[c->c + k] + p[2 * c->c + k];
					v += (double)w[m * c->c + k] * (c->relu && u < 0 ? 0 : u);
				}
				int64_t at = (n * c->m + m) * s + j;
				if (c->add)
					v += ((float *)t->add.data)[at];
				((float *)y.data)[at] = (float)(!strcmp(c->act, "Relu") && v < 0 ? 0 : v);
			}
	return y;
}

static void pcase_run(const struct pcase *c, struct hp_pool *pool)
{
	struct pin t;

	make(c, &t);
	struct hp_tensor u = unfused(c, &t, NULL), f1 = fused(c, &t, NULL), f2 = fused(c, &t, pool);
	struct hp_tensor ref = reference(c, &t, &u);
	double err = kt_rel_err(&f1, &ref);

	if (err < 0 || err > 1e-5)
		fail_msg("%lldx%lldx%lldx%lld -> %lld: rel err %g against the loops", (long long)c->n, (long long)c->c,
			 (long long)c->h, (long long)c->w, (long long)c->m, err);
	if (memcmp(f1.data, u.data, hp_tensor_bytes(&u)))
		fail_msg("C %lld at %lldx%lld: the prologue differs from BatchNorm, Relu, Conv", (long long)c->c,
			 (long long)c->h, (long long)c->w);
	if (memcmp(f1.data, f2.data, hp_tensor_bytes(&u)))
		fail_msg("C %lld at %lldx%lld: 1 and 2 threads differ", (long long)c->c, (long long)c->h, (long long)c->w);
	hp_pw_set_avx2(1);
	struct hp_tensor f3 = fused(c, &t, pool);
	hp_pw_set_avx2(0);
	if (memcmp(f1.data, f3.data, hp_tensor_bytes(&u)))
		fail_msg("C %lld at %lldx%lld: AVX2 and AVX-512 tiles differ", (long long)c->c, (long long)c->h,
			 (long long)c->w);
	hp_tensor_free(&u);
	hp_tensor_free(&f1);
	hp_tensor_free(&f2);
	hp_tensor_free(&f3);
	hp_tensor_free(&ref);
	drop(&t);
}

static void test_fused_pro(void **state)
{
	static const struct pcase cases[] = {
		/* DenseNet-121 at 64x64: block 1's bottleneck, Relu epilogue (two column blocks) */
		{ 1, 96, 16, 16, 128, 1, "Relu", 0 },
		/* K past a worker's buffer for the whole block: packed per k chunk */
		{ 1, 320, 16, 16, 40, 1, "", 0 },
		/* block 2 and 3, and transition 3 (planes read in place without a prologue) */
		{ 1, 512, 8, 8, 128, 1, "Relu", 0 },
		{ 1, 1024, 4, 4, 64, 1, "", 0 },
		/* a batch of two, ragged rows */
		{ 2, 200, 4, 4, 20, 1, "Relu", 0 },
		/* ragged columns (35: two panels and a tail), no Relu, a full addend */
		{ 1, 64, 5, 7, 30, 0, "Relu", 1 },
		/* a tail of 1 past 3 panels (7x7) */
		{ 1, 72, 7, 7, 16, 1, "", 0 },
		/* DenseNet-121 at 96x96: block 2's fifth bottleneck (144 columns, evened blocks 80 + 64,
		 * hp_conv_even_block) and block 3's last bottleneck (K past the
		 * buffer, 22 micro-tiles: one unit a thread) */
		{ 1, 256, 12, 12, 128, 1, "Relu", 0 },
		{ 1, 992, 6, 6, 128, 1, "Relu", 0 },
	};
	struct hp_pool *pool;

	(void)state;
	if (!hp_pw_available())
		skip();
	assert_int_equal(hp_pool_create(2, &pool), 0);
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
		pcase_run(&cases[i], pool);
	hp_pool_destroy(pool);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_fused_pro),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
