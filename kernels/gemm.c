/* Gemm, MatMul and MatMulAcc (domain ai.hpdlf: Y = C + A B, the reduction
 * blocks of a partitioned MatMul).  With alpha 1 on a CPU with AVX2 and
 * FMA: the own product of gemm_fma.h, each output one FMA chain over k
 * from beta C, so the results depend on no tiling, thread count or cut of
 * the weight splitter.  Otherwise over OpenBLAS cblas_sgemm, in the fixed
 * tiling of gemm_tile.h: the tiles of a product run on the pool's
 * threads, each tile one sgemm per K tile with BLAS on one thread, so the
 * results depend neither on the thread count nor on how the weight
 * splitter cut the product (its blocks issue the same calls).  The path
 * depends on alpha and the CPU only, so a product's blocks take its path.
 * MatMul with an unbatched B folds A's batch dims into M. */
#include <cblas.h>
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "hpdlf/error.h"
#include "kernels/band.h"
#include "kernels/blas.h"
#include "kernels/gemm_fma.h"
#include "kernels/gemm_panels.h"
#include "kernels/fused_impl.h"
#include "kernels/gemm_tile.h"
#include "kernels/ops.h"

/* ---- tiling ----------------------------------------------------------- */

static int64_t pow2_in(int64_t x, int64_t lo, int64_t hi)
{
	int64_t p = lo;

	while (p < hi && p * 2 <= x)
		p *= 2;
	return p;
}

/* About 8 tiles along N and K (cuts of an eighth of a weight), within
 * bounds that keep the repacking of operands per call cheap: measured on
 * one core, a 512x2048x2048 product costs +1..5% in tiles of 256 columns
 * (+5..8% in 128), K tiles accumulated with beta 1 cost ~nothing, row
 * tiles of 256 +2%.  Small products pay ~1.4x on a few microseconds. */
void hp_gemm_tiles(int64_t m, int64_t n, int64_t k, struct hp_gemm_tiles *t)
{
	t->mb = pow2_in(m / 8, 256, 1024);
	t->nb = pow2_in(n / 8, 32, 256);
	t->kb = pow2_in(k / 8, 64, 256);
}

int hp_gemm_node_tiles(const struct hp_node *n, int64_t m, int64_t nn, int64_t k, struct hp_gemm_tiles *t)
{
	const int64_t *v;
	int c = hp_attr_ints(n, HP_GEMM_TILE_ATTR, &v);

	if (c < 0) {
		hp_gemm_tiles(m, nn, k, t);
		return 0;
	}
	if (c != 3 || v[0] < 1 || v[1] < 1 || v[2] < 1)
		return HP_EMODEL;
	*t = (struct hp_gemm_tiles){ .mb = v[0], .nb = v[1], .kb = v[2] };
	return 0;
}

static int node_tiles(struct hp_graph *g, struct hp_node *n, int64_t m, int64_t nn, int64_t k,
		      struct hp_gemm_tiles *t)
{
	if (hp_gemm_node_tiles(n, m, nn, k, t) < 0)
		return hp_node_error(g, n, HP_EMODEL, "attribute %s must be 3 positive ints", HP_GEMM_TILE_ATTR);
	return 0;
}

/* ---- tiled product ---------------------------------------------------- */

#define GEMM_PAR_MIN_FLOPS 4e6
#define GEMM_GRAD_PAR_MIN_FLOPS 2e6

struct mm_batch {
	int nb;                      /* output batch dims */
	int64_t bdims[HP_MAX_RANK];  /* output batch shape */
	int64_t astr[HP_MAX_RANK];   /* element strides of A / B per batch dim (0: broadcast) */
	int64_t bstr[HP_MAX_RANK];
};

/* Y = beta C + alpha op(A) op(B) over nprob problems of m x n x k. */
struct gjob {
	int ta, tb;
	int64_t m, n, k, lda, ldb;
	float alpha, beta;          /* beta scales C */
	const float *a, *b, *c;     /* c NULL: no C, the first K tile overwrites Y */
	float *y;
	int64_t cs0, cs1, cprob;    /* C strides over Y's rows, columns and problems */
	struct hp_gemm_tiles t;
	int64_t mt, nt;             /* tiles per problem */
	int64_t nprob;
	const struct mm_batch *bt;  /* offsets of A and B per problem (NULL: one problem) */
	const struct hp_epi *epi;   /* fused epilogue on each tile after its last K tile (NULL: none) */
	const float *addend;        /* its addend, indexed as Y */
	const float *bpk;           /* B packed once (HP_GEMM_PACKED_ATTR; FMA product only), else NULL */
};

static void prob_offsets(const struct mm_batch *bt, int64_t p, int64_t *ao, int64_t *bo)
{
	*ao = *bo = 0;
	for (int d = bt->nb - 1; d >= 0; d--) {
		int64_t idx = p % bt->bdims[d];
		p /= bt->bdims[d];
		*ao += idx * bt->astr[d];
		*bo += idx * bt->bstr[d];
	}
}

static int64_t min64(int64_t a, int64_t b)
{
	return a < b ? a : b;
}

/* A tile of Y (from row i0, column j0) before its K tiles: beta C, or
 * zeros, and every K tile adds with beta 1.  The same bits as beta 0 on
 * the first K tile (OpenBLAS clears C in a pass of its own, then adds),
 * but OpenBLAS's clearing pass was 6% of a GPT-2-style inference on 1 and
 * on 2 threads (sgemm_beta, slow on what the arena's buffer held before). */
static void tile_init(const struct gjob *j, int64_t p, int64_t i0, int64_t j0, int64_t mi, int64_t nj, float *y)
{
	const float *c = j->c;

	if (!c) {
		for (int64_t i = 0; i < mi; i++)
			memset(y + i * j->n, 0, (size_t)nj * sizeof *y);
		return;
	}
	c += p * j->cprob + i0 * j->cs0 + j0 * j->cs1;
	for (int64_t i = 0; i < mi; i++)
		for (int64_t jj = 0; jj < nj; jj++)
			y[i * j->n + jj] = j->beta * c[i * j->cs0 + jj * j->cs1];
}

static void tile_run(const struct gjob *j, int64_t tile)
{
	int64_t per = j->mt * j->nt, p = tile / per, r = tile % per, ao = 0, bo = 0;
	int64_t i0 = r / j->nt * j->t.mb, j0 = r % j->nt * j->t.nb;
	int64_t mi = min64(j->t.mb, j->m - i0), nj = min64(j->t.nb, j->n - j0);
	float *y = j->y + p * j->m * j->n + i0 * j->n + j0;

	if (j->bt)
		prob_offsets(j->bt, p, &ao, &bo);
	tile_init(j, p, i0, j0, mi, nj, y);
	for (int64_t k0 = 0; k0 < j->k; k0 += j->t.kb) {
		int64_t kk = min64(j->t.kb, j->k - k0);
		const float *a = j->a + ao + (j->ta ? k0 * j->lda + i0 : i0 * j->lda + k0);
		const float *b = j->b + bo + (j->tb ? j0 * j->ldb + k0 : k0 * j->ldb + j0);
		hp_sgemm(j->ta ? CblasTrans : CblasNoTrans, j->tb ? CblasTrans : CblasNoTrans,
			    (int)mi, (int)nj, (int)kk, j->alpha, a, (int)j->lda, b, (int)j->ldb,
			    1.0f, y, (int)j->n);
	}
	/* the epilogue while the tile is in cache; element-wise, so the bits
	 * are those of a pass over the whole output */
	for (int64_t i = 0; j->epi && i < mi; i++) {
		int64_t at = p * j->m * j->n + (i0 + i) * j->n + j0;
		hp_epi_span(j->epi, j->y, j->addend, at, at + nj);
	}
}

static void tiles_range(void *arg, int64_t begin, int64_t end, int tid)
{
	(void)tid;
	for (int64_t t = begin; t < end; t++)
		tile_run(arg, t);
}

static void gjob_run(struct gjob *j, struct hp_pool *pool)
{
	if (j->m == 0 || j->n == 0 || j->nprob == 0)
		return;
	j->mt = (j->m + j->t.mb - 1) / j->t.mb;
	j->nt = (j->n + j->t.nb - 1) / j->t.nb;
	/* waking the pool costs more than it saves on small products (with
	 * a pool that slept between kernels, a 64x256x256 layer took 0.13 ms
	 * alone and 0.145 on 2 threads, and the bar was 16 MFLOP); since the
	 * pool polls between kernels (threadpool.c), GPT-2-style's 256x128x128
	 * products (8 MFLOP) gain: 6.03 -> 5.80 ms per inference on 2 threads,
	 * and the test mlp and LeNet are unchanged */
	if (2.0 * (double)j->nprob * (double)j->m * (double)j->n * (double)j->k < GEMM_PAR_MIN_FLOPS)
		pool = NULL;
	/* BLAS on one thread while tiles run: a threaded call would round
	 * differently from a serial one. */
	hp_blas_serial_enter();
	hp_parallel_for(pool, j->nprob * j->mt * j->nt, 1, tiles_range, j);
	hp_blas_serial_leave();
}

/* ---- the own FMA product (gemm_fma.h) -------------------------------- */

/* Whether job j runs as FMA chains instead of OpenBLAS's tiles: a CPU
 * with AVX2 and FMA and alpha 1 (a chain from beta C has no place for
 * alpha).  Independent of the extents, so the blocks of a split product
 * and its bands take the same path as the whole. */
static int fma_ok(const struct gjob *j)
{
	return j->alpha == 1.0f && hp_fma_gemm_ok();
}

static int weight_like(const struct hp_graph *g, int v)
{
	return v >= 0 && (g->values[v].kind == HP_VALUE_INITIALIZER || g->values[v].kind == HP_VALUE_CONSTANT) &&
	       g->values[v].shape.rank == 2;
}

int hp_node_rows_exact(const struct hp_graph *g, const struct hp_node *n)
{
	int gemm = !strcmp(n->op_type, "Gemm");
	const struct hp_value *a;

	if (n->domain[0] || (!gemm && strcmp(n->op_type, "MatMul")) || n->ninputs < 2 || n->inputs[0] < 0 ||
	    !hp_fma_gemm_ok())
		return 0;
	a = &g->values[n->inputs[0]];
	if (a->dtype != HP_F32 || a->shape.rank < 2 || !weight_like(g, n->inputs[1]))
		return 0;
	if (!gemm)
		return 1;
	if (hp_attr_float(n, "alpha", 1.0f) != 1.0f || hp_attr_int(n, "transA", 0))
		return 0;
	/* C broadcast over the rows: passed whole to every band */
	return n->ninputs < 3 || n->inputs[2] < 0 || g->values[n->inputs[2]].shape.rank < 2 ||
	       g->values[n->inputs[2]].shape.dims[0] == 1;
}

static void fma_run(const struct gjob *j, const int64_t *aoff, const int64_t *boff, struct hp_pool *pool)
{
	struct hp_fma_prod p = {
		.m = j->m, .n = j->n, .k = j->k, .nprob = j->nprob, .a = j->a, .b = j->b, .c = j->c,
		.ra = j->ta ? 1 : j->lda, .rk = j->ta ? j->lda : 1,
		.sk = j->tb ? 1 : j->ldb, .sj = j->tb ? j->ldb : 1,
		.aoff = aoff, .boff = boff, .cs0 = j->cs0, .cs1 = j->cs1, .cprob = j->cprob, .beta = j->beta,
		.y = j->y, .epi = j->epi, .addend = j->addend, .bpk = j->bpk,
	};

	if (j->bpk) /* one B for every problem: no offsets */
		p.b = NULL, p.boff = NULL;
	hp_fma_gemm(&p, pool);
}

/* MatMul's problems with their operands' offsets: 0, or -ENOMEM (then
 * OpenBLAS's tiles run: the same results within rounding, other bits). */
static int fma_matmul(const struct gjob *j, struct hp_pool *pool)
{
	int64_t *off = NULL;

	if (j->bt) {
		if (!(off = malloc((size_t)(2 * j->nprob) * sizeof *off)))
			return -ENOMEM;
		for (int64_t q = 0; q < j->nprob; q++)
			prob_offsets(j->bt, q, &off[q], &off[j->nprob + q]);
	}
	fma_run(j, off, off ? off + j->nprob : NULL, pool);
	free(off);
	return 0;
}

/* ---- tiled product for the gradients (gemm_tile.h) ---------------------- */

struct tjob {
	const struct hp_gemm_call *c;
	int64_t mt, nt;
};

static void tiled_one(const struct hp_gemm_call *c, int64_t i0, int64_t j0)
{
	int64_t mi = min64(c->t.mb, c->m - i0), nj = min64(c->t.nb, c->n - j0), kt = (c->k + c->t.kb - 1) / c->t.kb;
	float *y = c->y + i0 * c->ldy + j0;

	if (!c->accumulate) /* zeros and beta 1, as tile_init */
		for (int64_t i = 0; i < mi; i++)
			memset(y + i * c->ldy, 0, (size_t)nj * sizeof *y);
	for (int64_t s = 0; s < kt; s++) {
		int64_t k0 = (c->reverse_k ? kt - 1 - s : s) * c->t.kb, kk = min64(c->t.kb, c->k - k0);
		const float *a = c->a + (c->ta ? k0 * c->lda + i0 : i0 * c->lda + k0);
		const float *b = c->b + (c->tb ? j0 * c->ldb + k0 : k0 * c->ldb + j0);
		hp_sgemm(c->ta ? CblasTrans : CblasNoTrans, c->tb ? CblasTrans : CblasNoTrans, (int)mi,
			    (int)nj, (int)kk, c->alpha, a, (int)c->lda, b, (int)c->ldb, 1.0f, y,
			    (int)c->ldy);
	}
}

static void tiled_range(void *arg, int64_t begin, int64_t end, int tid)
{
	const struct tjob *j = arg;

	(void)tid;
	for (int64_t t = begin; t < end; t++)
		tiled_one(j->c, t / j->nt * j->c->t.mb, t % j->nt * j->c->t.nb);
}

void hp_gemm_tiled(const struct hp_gemm_call *c, struct hp_pool *pool)
{
	struct tjob j = { .c = c };

	if (c->m == 0 || c->n == 0)
		return;
	j.mt = (c->m + c->t.mb - 1) / c->t.mb;
	j.nt = (c->n + c->t.nb - 1) / c->t.nb;
	/* a training step's products: the pool is awake for the step, so
	 * smaller ones than an inference's pay (GPT-2-style gradients of
	 * 256x128x128 ran 12% slower on one thread than OpenBLAS's two) */
	if (2.0 * (double)c->m * (double)c->n * (double)c->k < GEMM_GRAD_PAR_MIN_FLOPS || j.mt * j.nt < 2)
		pool = NULL;
	hp_blas_serial_enter();
	hp_parallel_for(pool, j.mt * j.nt, 1, tiled_range, &j);
	hp_blas_serial_leave();
}

/* ---- B packed once (HP_GEMM_PACKED_ATTR) --------------------------------- */

/* B as the product sees it when the node's input B is packed (exec's
 * inference pass, fuse_pack.c): [K, N] from [ceil(N / 16), K, 16].  0 when
 * not packed, 1 when packed, or an error. */
static int packed_b(struct hp_graph *g, struct hp_node *n, const struct hp_shape *bs, struct hp_shape *lb)
{
	int64_t pn = hp_attr_int(n, HP_GEMM_PACKED_ATTR, 0);
	char s[96];

	if (pn <= 0)
		return 0;
	if (bs->rank != 3 || bs->dims[2] != 16 || bs->dims[0] != (pn + 15) / 16 ||
	    hp_attr_float(n, "alpha", 1.0f) != 1.0f || !hp_fma_gemm_ok())
		return hp_node_error(g, n, HP_EMODEL, "B %s is not %s = %" PRId64 " columns packed for this CPU's "
				     "product (alpha 1, AVX2 and FMA)", hp_shape_str(bs, s, sizeof s),
				     HP_GEMM_PACKED_ATTR, pn);
	*lb = (struct hp_shape){ .rank = 2, .dims = { bs->dims[1], pn } };
	return 1;
}

/* ---- Gemm ------------------------------------------------------------- */

struct gemm_p {
	int64_t m, n, k;
	int ta, tb;
	float alpha, beta;
	int64_t cs0, cs1; /* C strides over rows and columns (0: broadcast) */
	int has_c;
	int packed;          /* B packed once (HP_GEMM_PACKED_ATTR) */
	struct hp_gemm_tiles t;
	struct tk_panels pk; /* pack_b (gemm_panels.h): op(B) packed once */
};

static int gemm_c_strides(struct hp_graph *g, struct hp_node *n, struct gemm_p *p, const struct hp_shape *c)
{
	int64_t d0 = 1, d1 = 1;
	char s[96];

	if (c->rank > 2)
		goto bad;
	if (c->rank == 2)
		d0 = c->dims[0];
	if (c->rank >= 1)
		d1 = c->dims[c->rank - 1];
	if ((d0 != 1 && d0 != p->m) || (d1 != 1 && d1 != p->n))
		goto bad;
	p->cs1 = d1 == 1 ? 0 : 1;
	p->cs0 = d0 == 1 ? 0 : d1;
	return 0;
bad:
	return hp_node_error(g, n, HP_ESHAPE, "C has shape %s, not broadcastable to [%" PRId64 ", %" PRId64 "]",
			     hp_shape_str(c, s, sizeof s), p->m, p->n);
}

static int gemm_prepare(struct hp_graph *g, struct hp_node *n)
{
	const struct hp_value *a = &g->values[n->inputs[0]], *b = &g->values[n->inputs[1]];
	struct hp_value *y = &g->values[n->outputs[0]];
	struct hp_shape bsh = b->shape;
	struct gemm_p *p;
	char as[96], bs[96];
	int64_t kb;
	int rc, packed;

	if (a->dtype != HP_F32 || b->dtype != HP_F32)
		return hp_node_error(g, n, HP_EUNSUPPORTED, "only float32 is supported");
	if ((packed = packed_b(g, n, &b->shape, &bsh)) < 0)
		return packed;
	if (a->shape.rank != 2 || bsh.rank != 2)
		return hp_node_error(g, n, HP_ESHAPE, "A %s and B %s must be matrices",
				     hp_shape_str(&a->shape, as, sizeof as), hp_shape_str(&b->shape, bs, sizeof bs));
	if (!(p = calloc(1, sizeof *p)))
		return hp_node_error(g, n, -ENOMEM, "out of memory");
	p->packed = packed;
	p->ta = hp_attr_int(n, "transA", 0) != 0;
	p->tb = !packed && hp_attr_int(n, "transB", 0) != 0; /* packed: op(B) */
	p->alpha = hp_attr_float(n, "alpha", 1.0f);
	p->beta = hp_attr_float(n, "beta", 1.0f);
	p->m = a->shape.dims[p->ta ? 1 : 0];
	p->k = a->shape.dims[p->ta ? 0 : 1];
	kb = bsh.dims[p->tb ? 1 : 0];
	p->n = bsh.dims[p->tb ? 0 : 1];
	n->priv = p;
	if (kb != p->k)
		return hp_node_error(g, n, HP_ESHAPE,
				     "inner dims differ: A %s (transA=%d) and B %s (transB=%d) give K %" PRId64
				     " and %" PRId64,
				     hp_shape_str(&a->shape, as, sizeof as), p->ta, hp_shape_str(&b->shape, bs, sizeof bs),
				     p->tb, p->k, kb);
	if ((rc = node_tiles(g, n, p->m, p->n, p->k, &p->t)) < 0)
		return rc;
	p->has_c = n->ninputs > 2 && n->inputs[2] >= 0;
	if (p->has_c) {
		const struct hp_value *c = &g->values[n->inputs[2]];
		if (c->dtype != HP_F32)
			return hp_node_error(g, n, HP_EUNSUPPORTED, "C must be float32");
		if ((rc = gemm_c_strides(g, n, p, &c->shape)) < 0)
			return rc;
	}
	y->dtype = HP_F32;
	y->shape.rank = 2;
	y->shape.dims[0] = p->m;
	y->shape.dims[1] = p->n;
	return 0;
}

/* pack_b (gemm_panels.h): Y = beta C, then += alpha op(A) op(B) by the
 * packed copy of op(B), made again when the epoch or B moved.  0, or
 * -ENOMEM (then the tiled product runs instead). */
static int gemm_panels(struct gemm_p *p, const struct hp_kargs *a, int64_t epoch)
{
	const float *c = p->has_c && a->nin > 2 ? a->in[2].data : NULL, *x = a->in[0].data;
	float *y = a->out[0].data;
	int64_t lda = p->ta ? p->m : p->k, ldb = p->tb ? p->k : p->n;
	int rc = tk_panels_pack(&p->pk, a->in[1].data, p->tb ? 1 : ldb, p->tb ? ldb : 1, p->k, p->n, epoch);

	if (rc < 0)
		return rc;
	for (int64_t i = 0; c && i < p->m; i++)
		for (int64_t jj = 0; jj < p->n; jj++)
			y[i * p->n + jj] = p->beta * c[i * p->cs0 + jj * p->cs1];
	return tk_panels_mul(&p->pk, x, p->ta ? 1 : lda, p->ta ? lda : 1, p->m, p->alpha, y, p->n, c != NULL,
			     a->pool);
}

/* The product, and with e the fused epilogue in its tiles (fused.c). */
int hp_gemm_run_epi(const struct hp_node *n, const struct hp_kargs *a, const struct hp_epi *e, const float *addend)
{
	const struct gemm_p *p = n->priv;
	int64_t epoch = hp_attr_int(n, "pack_b", 0);
	struct gjob j = {
		.ta = p->ta, .tb = p->tb, .m = p->m, .n = p->n, .k = p->k,
		.lda = p->ta ? p->m : p->k, .ldb = p->tb ? p->k : p->n,
		.alpha = p->alpha, .beta = p->beta,
		.a = a->in[0].data, .b = a->in[1].data, .c = p->has_c && a->nin > 2 ? a->in[2].data : NULL,
		.y = a->out[0].data, .cs0 = p->cs0, .cs1 = p->cs1, .t = p->t, .nprob = 1,
		.epi = e, .addend = addend, .bpk = p->packed ? a->in[1].data : NULL,
	};

	if (p->packed) { /* prepare checked alpha 1 and the CPU */
		fma_run(&j, NULL, NULL, a->pool);
		return 0;
	}
	if (epoch > 0 && p->m <= TK_PANEL_MAX_ROWS && tk_panels_ok() && gemm_panels(n->priv, a, epoch) == 0) {
		if (e)
			hp_epi_run(e, a->out[0].data, addend, p->m * p->n, a->pool);
		return 0;
	}
	if (fma_ok(&j)) {
		fma_run(&j, NULL, NULL, a->pool);
		return 0;
	}
	gjob_run(&j, a->pool);
	return 0;
}

static int gemm_run(const struct hp_node *n, const struct hp_kargs *a)
{
	return hp_gemm_run_epi(n, a, NULL, NULL);
}

static void gemm_release(struct hp_node *n)
{
	struct gemm_p *p = n->priv;

	if (p)
		tk_panels_free(&p->pk);
	free(p);
}

static double gemm_flops(const struct hp_graph *g, const struct hp_node *n)
{
	const struct gemm_p *p = n->priv;

	(void)g;
	return p ? 2.0 * p->m * p->n * p->k : 0;
}

/* ---- MatMul, MatMulAcc ------------------------------------------------ */

struct matmul_p {
	int64_t m, n, k;
	struct mm_batch bt;
	int64_t batch;
	int fold;                    /* B unbatched, A contiguous: one product of batch*m rows */
	int acc;                     /* MatMulAcc: Y = C + A B, C of Y's shape */
	int packed;                  /* B packed once (HP_GEMM_PACKED_ATTR) */
	struct hp_gemm_tiles t;
};

/* Batch strides of an operand with batch dims d[0..r) aligned right to nb. */
static void batch_strides(const int64_t *d, int r, int nb, int64_t mat, int64_t *str)
{
	int64_t s = mat;

	for (int i = nb - 1; i >= 0; i--) {
		int j = i - (nb - r);
		int64_t dim = j >= 0 ? d[j] : 1;
		str[i] = dim == 1 ? 0 : s;
		s *= dim;
	}
}

static int matmul_batch(struct hp_graph *g, struct hp_node *n, struct matmul_p *p, const struct hp_shape *as,
			const struct hp_shape *bs, int na, int nbb)
{
	char s1[96], s2[96];

	p->bt.nb = na > nbb ? na : nbb;
	p->batch = 1;
	for (int i = 0; i < p->bt.nb; i++) {
		int ia = i - (p->bt.nb - na), ib = i - (p->bt.nb - nbb);
		int64_t da = ia >= 0 ? as->dims[ia] : 1, db = ib >= 0 ? bs->dims[ib] : 1;
		if (da != db && da != 1 && db != 1)
			return hp_node_error(g, n, HP_ESHAPE, "batch dims of A %s and B %s do not broadcast",
					     hp_shape_str(as, s1, sizeof s1), hp_shape_str(bs, s2, sizeof s2));
		p->bt.bdims[i] = da == 1 ? db : da;
		p->batch *= p->bt.bdims[i];
	}
	batch_strides(as->dims, na, p->bt.nb, p->m * p->k, p->bt.astr);
	batch_strides(bs->dims, nbb, p->bt.nb, p->k * p->n, p->bt.bstr);
	p->fold = nbb == 0;
	for (int i = 0; i < na && p->fold; i++)
		p->fold = p->bt.bdims[p->bt.nb - na + i] == as->dims[i];
	return 0;
}

static int matmul_shapes(struct hp_graph *g, struct hp_node *n, struct matmul_p *p, const struct hp_shape *as,
			 const struct hp_shape *bs, struct hp_shape *ys)
{
	int ra = as->rank, rb = bs->rank, rc;
	int64_t kb;
	char s1[96], s2[96];

	if (ra < 1 || rb < 1)
		return hp_node_error(g, n, HP_ESHAPE, "MatMul of a scalar (A %s, B %s)", hp_shape_str(as, s1, sizeof s1),
				     hp_shape_str(bs, s2, sizeof s2));
	p->m = ra == 1 ? 1 : as->dims[ra - 2];
	p->k = as->dims[ra - 1];
	kb = rb == 1 ? bs->dims[0] : bs->dims[rb - 2];
	p->n = rb == 1 ? 1 : bs->dims[rb - 1];
	if (kb != p->k)
		return hp_node_error(g, n, HP_ESHAPE, "inner dims differ: A %s, B %s (%" PRId64 " vs %" PRId64 ")",
				     hp_shape_str(as, s1, sizeof s1), hp_shape_str(bs, s2, sizeof s2), p->k, kb);
	if ((rc = matmul_batch(g, n, p, as, bs, ra > 2 ? ra - 2 : 0, rb > 2 ? rb - 2 : 0)) < 0)
		return rc;
	ys->rank = 0;
	for (int i = 0; i < p->bt.nb; i++)
		ys->dims[ys->rank++] = p->bt.bdims[i];
	if (ra > 1)
		ys->dims[ys->rank++] = p->m;
	if (rb > 1)
		ys->dims[ys->rank++] = p->n;
	return node_tiles(g, n, p->fold ? p->batch * p->m : p->m, p->n, p->k, &p->t);
}

static int matmul_prepare(struct hp_graph *g, struct hp_node *n)
{
	const struct hp_value *a = &g->values[n->inputs[0]], *b = &g->values[n->inputs[1]];
	struct hp_value *y = &g->values[n->outputs[0]];
	struct matmul_p *p;
	int rc;

	if (a->dtype != HP_F32 || b->dtype != HP_F32)
		return hp_node_error(g, n, HP_EUNSUPPORTED, "only float32 is supported (A %s, B %s)",
				     hp_dtype_name(a->dtype), hp_dtype_name(b->dtype));
	if (!(p = calloc(1, sizeof *p)))
		return hp_node_error(g, n, -ENOMEM, "out of memory");
	n->priv = p;
	y->dtype = HP_F32;
	struct hp_shape bsh = b->shape;
	if ((rc = packed_b(g, n, &b->shape, &bsh)) < 0)
		return rc;
	p->packed = rc;
	if ((rc = matmul_shapes(g, n, p, &a->shape, &bsh, &y->shape)) < 0 || n->ninputs < 3 || n->inputs[2] < 0)
		return rc;
	const struct hp_value *c = &g->values[n->inputs[2]];
	char s1[96], s2[96];
	p->acc = 1;
	if (c->dtype != HP_F32 || !hp_shape_equal(&c->shape, &y->shape))
		return hp_node_error(g, n, HP_ESHAPE, "C (%s %s) must be float32 of Y's shape %s",
				     hp_dtype_name(c->dtype), hp_shape_str(&c->shape, s1, sizeof s1),
				     hp_shape_str(&y->shape, s2, sizeof s2));
	return 0;
}

int hp_matmul_run_epi(const struct hp_node *n, const struct hp_kargs *ka, const struct hp_epi *e,
		      const float *addend)
{
	const struct matmul_p *p = n->priv;
	struct gjob j = {
		.m = p->fold ? p->batch * p->m : p->m, .n = p->n, .k = p->k, .lda = p->k, .ldb = p->n,
		.alpha = 1.0f, .beta = 1.0f, .a = ka->in[0].data, .b = ka->in[1].data,
		.c = p->acc ? ka->in[2].data : NULL, .y = ka->out[0].data, .t = p->t,
		.nprob = p->fold ? 1 : p->batch, .bt = p->fold ? NULL : &p->bt, .epi = e, .addend = addend,
		.bpk = p->packed ? ka->in[1].data : NULL,
	};

	if (hp_shape_numel(&ka->out[0].shape) == 0) /* empty: a batch of 0 beside dims up to 2^62 (fuzz_struct) */
		return 0;
	j.cs0 = j.n;
	j.cs1 = 1;
	j.cprob = j.m * j.n;
	if (p->packed) /* only the FMA product reads a packed B */
		return fma_matmul(&j, ka->pool) == 0 ? 0 : hp_error(-ENOMEM, "out of memory");
	if (fma_ok(&j) && fma_matmul(&j, ka->pool) == 0)
		return 0;
	gjob_run(&j, ka->pool);
	return 0;
}

static int matmul_run(const struct hp_node *n, const struct hp_kargs *ka)
{
	return hp_matmul_run_epi(n, ka, NULL, NULL);
}

static double matmul_flops(const struct hp_graph *g, const struct hp_node *n)
{
	const struct matmul_p *p = n->priv;

	(void)g;
	return p ? 2.0 * p->batch * p->m * p->n * p->k : 0;
}

static const struct hp_op op_gemm = {
	.domain = "",
	.name = "Gemm",
	.min_inputs = 2,
	.max_inputs = 3,
	.min_outputs = 1,
	.max_outputs = 1,
	.prepare = gemm_prepare,
	.run = gemm_run,
	.release = gemm_release,
	.flops = gemm_flops,
};

static const struct hp_op op_matmul = {
	.domain = "",
	.name = "MatMul",
	.min_inputs = 2,
	.max_inputs = 2,
	.min_outputs = 1,
	.max_outputs = 1,
	.prepare = matmul_prepare,
	.run = matmul_run,
	.flops = matmul_flops,
};

/* MatMulAcc(A, B, C) = C + A B: block j > 0 of a MatMul cut along the
 * reduction, accumulating into block j - 1's result in the whole's tiles. */
static const struct hp_op op_matmul_acc = {
	.domain = "ai.hpdlf",
	.name = "MatMulAcc",
	.min_inputs = 3,
	.max_inputs = 3,
	.min_outputs = 1,
	.max_outputs = 1,
	.prepare = matmul_prepare,
	.run = matmul_run,
	.flops = matmul_flops,
};

const struct hp_op *const hp_ops_gemm[] = { &op_gemm, &op_matmul, &op_matmul_acc, NULL };
