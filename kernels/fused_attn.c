/* FusedAttention (ai.hpdlf): softmax(scale * Q Kt [+ mask]) V in one kernel
 * that never holds more than a BT x BS tile of the scores (online softmax,
 * as flash attention: a running maximum and denominator per row, the
 * accumulated output rescaled when the maximum grows).
 *
 *   inputs  Q, K, V, mask?   read through permutations qperm, kperm, vperm
 *           (absorbed Transposes): logical Q [..., T, D], Kt [..., D, S],
 *           V [..., S, Dv], batch dims broadcast (size 1: stride 0)
 *   attrs   scale (float), mask_kind 0 none | 1 added (float, broadcast to
 *           [..., T, S]) | 2 Where (bool cond; where cond == mask_when the
 *           score is mask_fill)
 *   output  [..., T, Dv], or that permuted by operm (an absorbed Transpose
 *           of the result, e.g. heads back beside each other: [B, T, H, Dv])
 *
 * Work items are (batch, block of BT rows), each done by one slot in a
 * fixed order: the bits depend on nothing but the shapes (not on the
 * thread count).  Tiles are read in place when their rows are contiguous
 * and packed into the slot's workspace otherwise, so any strides work.  Denominators accumulate in double. */
#include <cblas.h>
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/blas.h"
#include "kernels/eltwise_impl.h"
#include "kernels/gemm_fma.h"

#define BT 64
#define BS 64
#define SLOTS 8
#define MAXB (HP_MAX_RANK - 2)

struct operand {
	const char *what;
	int64_t d0, d1;            /* logical last two dims */
	int64_t s0, s1;            /* their strides */
	int64_t bd[MAXB], bs[MAXB]; /* logical batch dims and strides */
};

struct attn_p {
	int nb;                    /* batch dims of the output */
	int64_t bdims[MAXB], batch;
	int64_t t, s, d, dv;
	struct operand q, k, v, m; /* m: the mask as [..., T, S] */
	float scale, fill;
	int mask_kind, when;
	int64_t ostr[HP_MAX_RANK];  /* output strides of the natural [..., T, Dv] dims */
	size_t slot_floats;
};

/* Logical view of input value x through perm (identity when absent). */
static int view(const struct hp_shape *x, const int64_t *perm, int np, struct operand *o, int *rank)
{
	int64_t st[HP_MAX_RANK], s = 1, dims[HP_MAX_RANK], str[HP_MAX_RANK];
	int r = x->rank;

	if (r < 2 || (np && np != r))
		return -1;
	for (int i = r - 1; i >= 0; i--) {
		st[i] = s;
		s *= x->dims[i];
	}
	for (int i = 0; i < r; i++) {
		int p = np ? (int)perm[i] : i;
		if (p < 0 || p >= r)
			return -1;
		dims[i] = x->dims[p];
		str[i] = dims[i] == 1 ? 0 : st[p];
	}
	o->d0 = dims[r - 2];
	o->d1 = dims[r - 1];
	o->s0 = str[r - 2];
	o->s1 = str[r - 1];
	for (int i = 0; i < r - 2; i++) {
		o->bd[i] = dims[i];
		o->bs[i] = str[i];
	}
	*rank = r;
	return 0;
}

/* Right-align an operand's batch dims to nb output batch dims. */
static void align(struct operand *o, int r, int nb)
{
	int have = r - 2;
	int64_t bd[MAXB], bs[MAXB];

	for (int i = 0; i < nb; i++) {
		int j = i - (nb - have);
		bd[i] = j >= 0 ? o->bd[j] : 1;
		bs[i] = j >= 0 ? o->bs[j] : 0;
	}
	memcpy(o->bd, bd, sizeof bd);
	memcpy(o->bs, bs, sizeof bs);
}

static int operands(struct hp_graph *g, struct hp_node *n, struct attn_p *p, int rk[4])
{
	static const char *const pn[3] = { "qperm", "kperm", "vperm" };
	struct operand *o[4] = { &p->q, &p->k, &p->v, &p->m };
	int nops = p->mask_kind ? 4 : 3;

	for (int i = 0; i < nops; i++) {
		const int64_t *perm = NULL;
		int np = i < 3 ? hp_attr_ints(n, pn[i], &perm) : 0;
		np = np < 0 ? 0 : np; /* absent: identity */
		if (view(&g->values[n->inputs[i]].shape, perm, np, o[i], &rk[i]) < 0)
			return hp_node_error(g, n, HP_ESHAPE, "input %d: rank below 2 or a bad permutation", i);
		if (rk[i] - 2 > p->nb)
			p->nb = rk[i] - 2;
	}
	for (int i = 0; i < nops; i++)
		align(o[i], rk[i], p->nb);
	p->batch = 1;
	for (int b = 0; b < p->nb; b++) {
		p->bdims[b] = 1;
		for (int i = 0; i < nops; i++)
			if (o[i]->bd[b] != 1) {
				if (p->bdims[b] != 1 && p->bdims[b] != o[i]->bd[b])
					return hp_node_error(g, n, HP_ESHAPE, "batch dims do not broadcast");
				p->bdims[b] = o[i]->bd[b];
			}
		p->batch *= p->bdims[b];
	}
	return 0;
}

/* Output shape ys and the strides of the natural dims, through operm. */
static int out_layout(struct hp_graph *g, struct hp_node *n, struct attn_p *p, struct hp_shape *ys)
{
	const int64_t *perm = NULL;
	int r = p->nb + 2, np = hp_attr_ints(n, "operm", &perm), seen = 0;

	if (np < 0) /* absent */
		np = 0;
	int64_t nat[HP_MAX_RANK], st = 1;

	memcpy(nat, p->bdims, (size_t)p->nb * sizeof(int64_t));
	nat[p->nb] = p->t;
	nat[p->nb + 1] = p->dv;
	if (np && np != r)
		return hp_node_error(g, n, HP_EMODEL, "operm has %d entries for a rank-%d output", np, r);
	ys->rank = r;
	for (int i = 0; i < r; i++) {
		int j = np ? (int)perm[i] : i;
		if (j < 0 || j >= r || (seen >> j & 1))
			return hp_node_error(g, n, HP_EMODEL, "operm is not a permutation");
		seen |= 1 << j;
		ys->dims[i] = nat[j];
	}
	for (int i = r - 1; i >= 0; i--) {
		p->ostr[np ? (int)perm[i] : i] = st;
		st *= ys->dims[i];
	}
	return 0;
}

static int attn_prepare(struct hp_graph *g, struct hp_node *n)
{
	struct attn_p *p = calloc(1, sizeof *p);
	struct hp_value *y = &g->values[n->outputs[0]];
	int rk[4], rc;

	if (!p)
		return hp_node_error(g, n, -ENOMEM, "out of memory");
	n->priv = p;
	p->mask_kind = (int)hp_attr_int(n, "mask_kind", 0);
	p->scale = hp_attr_float(n, "scale", 1.0f);
	p->fill = hp_attr_float(n, "mask_fill", -INFINITY);
	p->when = hp_attr_int(n, "mask_when", 1) != 0;
	if (p->mask_kind < 0 || p->mask_kind > 2 || (p->mask_kind && (n->ninputs < 4 || n->inputs[3] < 0)))
		return hp_node_error(g, n, HP_EMODEL, "mask_kind %d without its mask input", p->mask_kind);
	for (int i = 0; i < 3 + (p->mask_kind != 0); i++)
		if (g->values[n->inputs[i]].dtype != (i == 3 && p->mask_kind == 2 ? HP_BOOL : HP_F32))
			return hp_node_error(g, n, HP_EUNSUPPORTED, "input %d has the wrong dtype", i);
	if ((rc = operands(g, n, p, rk)) < 0)
		return rc;
	p->t = p->q.d0;
	p->d = p->q.d1;
	p->s = p->k.d1;
	p->dv = p->v.d1;
	if (p->k.d0 != p->d || p->v.d0 != p->s || (p->mask_kind && ((p->m.d0 != 1 && p->m.d0 != p->t) ||
								   (p->m.d1 != 1 && p->m.d1 != p->s))))
		return hp_node_error(g, n, HP_ESHAPE, "Q, K, V and the mask do not agree");
	if ((rc = out_layout(g, n, p, &y->shape)) < 0)
		return rc;
	y->dtype = HP_F32;
	p->slot_floats = (size_t)(BT * p->d + BS * p->d + BS * p->dv + BT * BS + BT * p->dv + 3 * BT) + 16; /* mx: BT floats, l: BT doubles */
	n->workspace = (size_t)SLOTS * p->slot_floats * sizeof(float);
	return 0;
}

/* Element offset of batch index b (of the output's batch) in operand o. */
static int64_t batch_off(const struct attn_p *p, const struct operand *o, int64_t b)
{
	int64_t off = 0;

	for (int i = p->nb - 1; i >= 0; i--) {
		off += (b % p->bdims[i]) * o->bs[i];
		b /= p->bdims[i];
	}
	return off;
}

struct attn_job {
	const struct attn_p *p;
	const struct hp_kargs *a;
	float *ws;
	int64_t items, slots;
};

struct tile {
	float *qb, *kb, *vb, *sb, *acc, *mx;
	double *l;
	int64_t t0, nt, b;
};

static void mask_tile(const struct attn_p *p, const struct attn_job *j, struct tile *w, int64_t s0, int64_t ns)
{
	const struct operand *o = &p->m;
	int64_t off = batch_off(p, o, w->b);

	for (int64_t r = 0; r < w->nt; r++) {
		float *row = w->sb + r * BS;
		int64_t base = off + (o->d0 == 1 ? 0 : (w->t0 + r) * o->s0);
		if (p->mask_kind == 1) {
			const float *m = (const float *)j->a->in[3].data + base;
			for (int64_t c = 0; c < ns; c++)
				row[c] += m[(s0 + c) * o->s1];
		} else {
			const uint8_t *m = (const uint8_t *)j->a->in[3].data + base;
			for (int64_t c = 0; c < ns; c++)
				if ((m[(s0 + c) * o->s1] != 0) == p->when)
					row[c] = p->fill;
		}
	}
}

/* row[c] = exp(row[c] - m): vectorized like the Softmax kernel's. */
HPK_SIMD static void exp_shift(float *row, int64_t n, float m)
{
	for (int64_t c = 0; c < n; c++)
		row[c] = hpk_expf(row[c] - m);
}

HPK_SIMD static void scale_row(float *x, int64_t n, float a)
{
	for (int64_t c = 0; c < n; c++)
		x[c] *= a;
}

/* Rows' running maximum and denominator after one tile; the tile turns
 * into exp(score - max) and the accumulated output is rescaled.  Maxima
 * and sums in kernels/eltwise_impl.h's fixed lane order (sums in double). */
static void online_softmax(const struct attn_p *p, struct tile *w, int64_t ns)
{
	for (int64_t r = 0; r < w->nt; r++) {
		float *row = w->sb + r * BS, m = w->mx[r], mt = hpk_max_f(row, ns), mn = mt > m ? mt : m, corr;
		if (mn == -INFINITY) { /* all masked so far: nothing to add */
			memset(row, 0, (size_t)ns * sizeof *row);
			continue;
		}
		corr = m == -INFINITY ? 0.0f : hpk_expf(m - mn);
		exp_shift(row, ns, mn);
		w->l[r] = w->l[r] * corr + hpk_sum_f(row, ns);
		w->mx[r] = mn;
		if (corr != 1.0f)
			scale_row(w->acc + r * p->dv, p->dv, corr);
	}
}

/* An operand tile read in place when its rows are contiguous (the usual
 * case, Transposes absorbed or not), else packed into buf: the matrix and
 * its leading dimension.  Row r, column c is x[r * rs + c * cs]. */
static const float *tile_of(const float *x, int64_t rs, int64_t cs, int64_t nr, int64_t nc, float *buf, int *ld)
{
	if (cs == 1 && rs >= nc && rs <= INT32_MAX) {
		*ld = (int)rs;
		return x;
	}
	for (int64_t r = 0; r < nr; r++)
		for (int64_t c = 0; c < nc; c++)
			buf[r * nc + c] = x[r * rs + c * cs];
	*ld = (int)nc;
	return buf;
}

/* The tile's scores, scale Q Kt: with AVX2+FMA each a chain of FMAs
 * over d (gemm_fma.h) then scaled, else one sgemm (zeros and beta 1: the
 * bits of beta 0 without OpenBLAS's clearing pass, gemm.c).  At GPT-2-
 * and BERT-style heads (64 x 64 x 32) sgemm's per-call packing and
 * dispatch outweighed the product. */
static void scores(const struct attn_p *p, struct tile *w, const float *qt, int ldq, const float *kt, int ldk,
		   int64_t ns)
{
	if (hp_fma_gemm_ok()) {
		/* a BS-wide row stride: the scores' rows land at sb + r * BS */
		struct hp_fma_prod f = { .m = w->nt, .n = ns, .k = p->d, .nprob = 1, .a = qt, .ra = ldq, .rk = 1,
					 .b = kt, .sk = 1, .sj = ldk, .beta = 1, .y = w->sb, .ldy = BS };
		hp_fma_gemm(&f, NULL);
		for (int64_t r = 0; r < w->nt; r++)
			scale_row(w->sb + r * BS, ns, p->scale);
		return;
	}
	memset(w->sb, 0, (size_t)(w->nt * BS) * sizeof *w->sb);
	hp_sgemm(CblasNoTrans, CblasTrans, (int)w->nt, (int)ns, (int)p->d, p->scale, qt, ldq, kt,
		    ldk, 1.0f, w->sb, BS);
}

/* acc += P V over the tile's ns keys: FMA chains continuing from acc (its
 * rows rescaled by online_softmax), else sgemm with beta 1. */
static void accumulate(const struct attn_p *p, struct tile *w, const float *vt, int ldv, int64_t ns)
{
	if (hp_fma_gemm_ok()) {
		struct hp_fma_prod f = { .m = w->nt, .n = p->dv, .k = ns, .nprob = 1, .a = w->sb, .ra = BS, .rk = 1,
					 .b = vt, .sk = ldv, .sj = 1, .c = w->acc, .cs0 = p->dv, .cs1 = 1, .beta = 1,
					 .y = w->acc };
		hp_fma_gemm(&f, NULL);
		return;
	}
	hp_sgemm(CblasNoTrans, CblasNoTrans, (int)w->nt, (int)p->dv, (int)ns, 1.0f, w->sb, BS, vt,
		    ldv, 1.0f, w->acc, (int)p->dv);
}

static void attn_item(const struct attn_job *j, int64_t item, struct tile *w)
{
	const struct attn_p *p = j->p;
	const float *q = j->a->in[0].data, *k = j->a->in[1].data, *v = j->a->in[2].data, *qt, *kt, *vt;
	int64_t rb = (p->t + BT - 1) / BT;
	int ldq, ldk, ldv;
	float *y;

	w->b = item / rb;
	w->t0 = item % rb * BT;
	w->nt = p->t - w->t0 < BT ? p->t - w->t0 : BT;
	q += batch_off(p, &p->q, w->b);
	k += batch_off(p, &p->k, w->b);
	v += batch_off(p, &p->v, w->b);
	qt = tile_of(q + w->t0 * p->q.s0, p->q.s0, p->q.s1, w->nt, p->d, w->qb, &ldq);
	memset(w->acc, 0, (size_t)(w->nt * p->dv) * sizeof *w->acc);
	for (int64_t r = 0; r < w->nt; r++) {
		w->mx[r] = -INFINITY;
		w->l[r] = 0;
	}
	for (int64_t s0 = 0; s0 < p->s; s0 += BS) {
		int64_t ns = p->s - s0 < BS ? p->s - s0 : BS;
		/* K's rows (keys) are Kt's columns */
		kt = tile_of(k + s0 * p->k.s1, p->k.s1, p->k.s0, ns, p->d, w->kb, &ldk);
		vt = tile_of(v + s0 * p->v.s0, p->v.s0, p->v.s1, ns, p->dv, w->vb, &ldv);
		scores(p, w, qt, ldq, kt, ldk, ns);
		if (p->mask_kind)
			mask_tile(p, j, w, s0, ns);
		online_softmax(p, w, ns);
		accumulate(p, w, vt, ldv, ns);
	}
	int64_t off = 0, b = w->b, rs = p->ostr[p->nb], es = p->ostr[p->nb + 1];
	for (int i = p->nb - 1; i >= 0; i--) {
		off += (b % p->bdims[i]) * p->ostr[i];
		b /= p->bdims[i];
	}
	y = (float *)j->a->out[0].data + off + w->t0 * rs;
	for (int64_t r = 0; r < w->nt; r++)
		for (int64_t e = 0; e < p->dv; e++)
			y[r * rs + e * es] = (float)(w->acc[r * p->dv + e] / w->l[r]);
}

/* Slot `slot` runs items [slot * items / slots, (slot + 1) * items / slots). */
static void attn_slots(void *arg, int64_t b, int64_t e, int tid)
{
	const struct attn_job *j = arg;
	const struct attn_p *p = j->p;

	(void)tid;
	for (int64_t s = b; s < e; s++) {
		float *base = j->ws + s * (int64_t)p->slot_floats;
		struct tile w = { .qb = base };
		w.kb = w.qb + BT * p->d;
		w.vb = w.kb + BS * p->d;
		w.sb = w.vb + BS * p->dv;
		w.acc = w.sb + BT * BS;
		w.mx = w.acc + BT * p->dv;
		w.l = (double *)(((uintptr_t)(w.mx + BT) + 7) & ~(uintptr_t)7);
		for (int64_t i = s * j->items / j->slots; i < (s + 1) * j->items / j->slots; i++)
			attn_item(j, i, &w);
	}
}

static int attn_run(const struct hp_node *n, const struct hp_kargs *a)
{
	const struct attn_p *p = n->priv;
	struct attn_job j = { .p = p, .a = a, .ws = a->ws };

	j.items = p->batch * ((p->t + BT - 1) / BT);
	if (j.items == 0 || p->dv == 0)
		return 0;
	j.slots = j.items < SLOTS ? j.items : SLOTS;
	/* BLAS on one thread while the slots run, as kernels/gemm.c's tiles */
	hp_blas_serial_enter();
	hp_parallel_for(a->pool, j.slots, 1, attn_slots, &j);
	hp_blas_serial_leave();
	return 0;
}

static double attn_flops(const struct hp_graph *g, const struct hp_node *n)
{
	const struct attn_p *p = n->priv;

	(void)g;
	return p ? (double)p->batch * p->t * p->s * (2.0 * p->d + 2.0 * p->dv + 8) : 0;
}

const struct hp_op hp_op_fused_attention = {
	.domain = "ai.hpdlf", .name = "FusedAttention", .min_inputs = 3, .max_inputs = 4, .min_outputs = 1,
	.max_outputs = 1, .prepare = attn_prepare, .run = attn_run, .flops = attn_flops,
};
