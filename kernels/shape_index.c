/* Data-movement operators: Transpose, Concat, Split, Slice, Gather,
 * GatherElements.  All are type-agnostic byte copies. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/checked.h"
#include "kernels/eltwise_impl.h" /* HPK_SIMD */
#include "kernels/shape_util.h"
#include "kernels/threadpool.h"

/* ---- Transpose ----------------------------------------------------------- */

enum { TR_COPY, TR_TABLE, TR_BLOCKED };

struct tr_priv {
	int kind;
	int64_t b, m, nn;         /* TR_BLOCKED: [b, m, nn] -> [b, nn, m] */
	size_t es;
	struct hpks_copy c;       /* TR_TABLE */
};

static int read_perm(const struct hp_graph *g, const struct hp_node *n, int rank, int *perm)
{
	const int64_t *p;
	int np = hp_attr_ints(n, "perm", &p), seen[HP_MAX_RANK] = { 0 };

	if (np < 0) {
		for (int i = 0; i < rank; i++)
			perm[i] = rank - 1 - i;
		return 0;
	}
	if (np != rank)
		return hp_node_error(g, n, HP_ESHAPE, "perm has %d entries, input has rank %d", np, rank);
	for (int i = 0; i < rank; i++) {
		if (p[i] < 0 || p[i] >= rank || seen[p[i]]++)
			return hp_node_error(g, n, HP_ESHAPE, "perm is not a permutation of 0..%d", rank - 1);
		perm[i] = (int)p[i];
	}
	return 0;
}

/* Drop unit dims and merge input dims that stay adjacent in the output:
 * returns the reduced rank, its input dims and permutation. */
static int tr_reduce(const struct hp_shape *s, const int *perm, int rank, int64_t *dims, int *rperm)
{
	int newidx[HP_MAX_RANK], op[HP_MAX_RANK], gs[HP_MAX_RANK], ge[HP_MAX_RANK], nk = 0, no = 0, ng = 0;
	int64_t kd[HP_MAX_RANK];

	for (int i = 0; i < rank; i++)
		if (s->dims[i] != 1) {
			newidx[i] = nk;
			kd[nk++] = s->dims[i];
		}
	for (int i = 0; i < rank; i++)
		if (s->dims[perm[i]] != 1)
			op[no++] = newidx[perm[i]];
	for (int j = 0; j < no; j++) {
		if (j == 0 || op[j] != op[j - 1] + 1)
			gs[ng++] = op[j];
		ge[ng - 1] = op[j];
	}
	for (int j = 0; j < ng; j++) {
		rperm[j] = 0;
		for (int k = 0; k < ng; k++)
			rperm[j] += gs[k] < gs[j];
	}
	for (int j = 0; j < ng; j++) {
		dims[rperm[j]] = 1;
		for (int i = gs[j]; i <= ge[j]; i++)
			dims[rperm[j]] *= kd[i];
	}
	return ng;
}

static int transpose_prepare(struct hp_graph *g, struct hp_node *n)
{
	int perm[HP_MAX_RANK], rc;

	if ((rc = read_perm(g, n, hpks_in(g, n, 0)->shape.rank, perm)) < 0)
		return rc;
	return hpks_transpose_plan(g, n, perm);
}

int hpks_transpose_plan(struct hp_graph *g, struct hp_node *n, const int *perm)
{
	const struct hp_value *x = hpks_in(g, n, 0);
	int rank = x->shape.rank, rperm[HP_MAX_RANK], r;
	int64_t rd[HP_MAX_RANK], od[HP_MAX_RANK], st[HP_MAX_RANK];
	struct hp_shape out = { .rank = rank }, red;
	struct tr_priv *p;

	for (int i = 0; i < rank; i++)
		out.dims[i] = x->shape.dims[perm[i]];
	hpks_set_out(g, n, 0, x->dtype, &out);
	r = tr_reduce(&x->shape, perm, rank, rd, rperm);
	if (r <= 1 || hp_shape_numel(&x->shape) == 0) {
		p = calloc(1, sizeof *p);
		if (!p)
			return -ENOMEM;
		p->kind = TR_COPY;
		n->priv = p;
		return 0;
	}
	if ((r == 2 && rperm[0] == 1) || (r == 3 && rperm[0] == 0 && rperm[1] == 2)) {
		p = calloc(1, sizeof *p);
		if (!p)
			return -ENOMEM;
		p->kind = TR_BLOCKED;
		p->b = r == 3 ? rd[0] : 1;
		p->m = rd[r - 2];
		p->nn = rd[r - 1];
		p->es = hp_dtype_size(x->dtype);
		n->priv = p;
		return 0;
	}
	red.rank = r;
	memcpy(red.dims, rd, sizeof rd);
	hpks_strides(&red, st);
	for (int j = 0; j < r; j++)
		od[j] = rd[rperm[j]];
	{
		struct hpks_copy c;
		p = hpks_copy_alloc(&c, r, od, hp_dtype_size(x->dtype), sizeof *p);
		if (!p)
			return hpks_copy_error(g, n);
		for (int j = 0; j < r; j++)
			for (int64_t i = 0; i < od[j]; i++)
				c.off[j][i] = i * st[rperm[j]];
		hpks_copy_finish(&c);
		p->kind = TR_TABLE;
		p->c = c;
	}
	n->priv = p;
	return 0;
}

struct tr_job {
	const struct tr_priv *p;
	const char *src;
	char *dst;
	int64_t tm, tn;           /* tiles along m and nn */
};

#define TILE 32

#define TR_TILE(T)                                                                      \
	for (int64_t i = i0; i < i1; i++)                                               \
		for (int64_t j = j0; j < j1; j++)                                       \
			((T *)d)[j * p->m + i] = ((const T *)s)[i * p->nn + j]

typedef float tr_f8 __attribute__((vector_size(32)));
typedef int32_t tr_i8 __attribute__((vector_size(32)));

/* An 8x8 block of 4-byte elements: rows of s (stride ls) become rows of d
 * (stride ld), in registers (unpack, then 2x2 and 4x4 shuffles) instead
 * of 64 scattered stores, which made the weight transposes of a BERT-style
 * training step 15% of its time. */
static inline __attribute__((always_inline)) void tr_8x8(const float *s, int64_t ls, float *d, int64_t ld)
{
	static const int col[4] = { 0, 2, 1, 3 }; /* the column pair of u[q] (and + 4) */
	tr_f8 r[8], t[8], u[8];

	for (int k = 0; k < 8; k++)
		memcpy(&r[k], s + k * ls, sizeof r[k]);
	for (int k = 0; k < 8; k += 2) { /* t: pairs of rows interleaved */
		t[k] = __builtin_shuffle(r[k], r[k + 1], (tr_i8){ 0, 8, 1, 9, 4, 12, 5, 13 });
		t[k + 1] = __builtin_shuffle(r[k], r[k + 1], (tr_i8){ 2, 10, 3, 11, 6, 14, 7, 15 });
	}
	for (int k = 0; k < 8; k += 4) /* u: columns c and c + 4 of four rows */
		for (int q = 0; q < 2; q++) {
			u[k + q] = __builtin_shuffle(t[k + q], t[k + q + 2], (tr_i8){ 0, 1, 8, 9, 4, 5, 12, 13 });
			u[k + q + 2] = __builtin_shuffle(t[k + q], t[k + q + 2], (tr_i8){ 2, 3, 10, 11, 6, 7, 14, 15 });
		}
	for (int q = 0; q < 4; q++) {
		tr_f8 lo = __builtin_shuffle(u[q], u[q + 4], (tr_i8){ 0, 1, 2, 3, 8, 9, 10, 11 });
		tr_f8 hi = __builtin_shuffle(u[q], u[q + 4], (tr_i8){ 4, 5, 6, 7, 12, 13, 14, 15 });
		memcpy(d + col[q] * ld, &lo, sizeof lo);
		memcpy(d + (col[q] + 4) * ld, &hi, sizeof hi);
	}
}

/* A whole TILE x TILE tile of 4-byte elements, as 8x8 blocks. */
HPK_SIMD static void tr_tile32(const float *s, int64_t ls, float *d, int64_t ld)
{
	for (int i = 0; i < TILE; i += 8)
		for (int j = 0; j < TILE; j += 8)
			tr_8x8(s + i * ls + j, ls, d + j * ld + i, ld);
}

static void tr_tiles(void *arg, int64_t b, int64_t e, int tid)
{
	const struct tr_job *jb = arg;
	const struct tr_priv *p = jb->p;
	size_t plane = (size_t)(p->m * p->nn) * p->es;

	(void)tid;
	for (int64_t t = b; t < e; t++) {
		int64_t bi = t / (jb->tm * jb->tn), r = t % (jb->tm * jb->tn);
		int64_t i0 = (r / jb->tn) * TILE, j0 = (r % jb->tn) * TILE;
		int64_t i1 = i0 + TILE < p->m ? i0 + TILE : p->m, j1 = j0 + TILE < p->nn ? j0 + TILE : p->nn;
		const char *s = jb->src + bi * plane;
		char *d = jb->dst + bi * plane;
		if (p->es == 4 && i1 - i0 == TILE && j1 - j0 == TILE) {
			tr_tile32((const float *)s + i0 * p->nn + j0, p->nn, (float *)d + j0 * p->m + i0, p->m);
			continue;
		}
		switch (p->es) {
		case 1: TR_TILE(uint8_t); break;
		case 2: TR_TILE(uint16_t); break;
		case 4: TR_TILE(uint32_t); break;
		case 8: TR_TILE(uint64_t); break;
		default:
			for (int64_t i = i0; i < i1; i++)
				for (int64_t j = j0; j < j1; j++)
					memcpy(d + (j * p->m + i) * p->es, s + (i * p->nn + j) * p->es, p->es);
		}
	}
}

int hpks_transpose_run(const struct hp_node *n, const struct hp_kargs *a)
{
	const struct tr_priv *p = n->priv;

	if (p->kind == TR_COPY) {
		hpks_copy_bytes(a->out[0].data, a->in[0].data, hp_tensor_bytes(&a->in[0]));
	} else if (p->kind == TR_TABLE) {
		hpks_copy_run(&p->c, a->in[0].data, a->out[0].data, a->pool);
	} else {
		struct tr_job j = { p, a->in[0].data, a->out[0].data, (p->m + TILE - 1) / TILE,
				    (p->nn + TILE - 1) / TILE };
		hp_parallel_for(a->pool, p->b * j.tm * j.tn, 16, tr_tiles, &j);
	}
	return 0;
}

/* ---- Concat / Split ---------------------------------------------------- */

static int concat_prepare(struct hp_graph *g, struct hp_node *n)
{
	const struct hp_value *x0 = hpks_in(g, n, 0);
	const struct hp_attr *at = hp_node_attr(n, "axis");
	struct hp_shape s = x0->shape;
	int axis, rc;

	if (!at)
		return hp_node_error(g, n, HP_EMODEL, "attribute 'axis' is required");
	if ((rc = hpks_axis(g, n, at->i, s.rank, &axis)) < 0)
		return rc;
	s.dims[axis] = 0;
	for (int i = 0; i < n->ninputs; i++) {
		const struct hp_value *x = hpks_in(g, n, i);
		if (!x)
			return hp_node_error(g, n, HP_EMODEL, "input %d is missing", i);
		if (x->dtype != x0->dtype || x->shape.rank != s.rank)
			return hp_node_error(g, n, HP_ESHAPE, "input %d ('%s') differs in dtype or rank", i, x->name);
		for (int d = 0; d < s.rank; d++)
			if (d != axis && x->shape.dims[d] != s.dims[d])
				return hp_node_error(g, n, HP_ESHAPE, "input %d ('%s') has dim %d = %lld, expected %lld",
						     i, x->name, d, (long long)x->shape.dims[d], (long long)s.dims[d]);
		if (x->shape.dims[axis] > HP_DIM_MAX - s.dims[axis]) /* the sum overflowed (fuzz_struct) */
			return hp_node_error(g, n, HP_ESHAPE, "inputs make axis %d beyond any tensor", axis);
		s.dims[axis] += x->shape.dims[axis];
	}
	n->priv = malloc(sizeof(int));
	if (!n->priv)
		return -ENOMEM;
	*(int *)n->priv = axis;
	hpks_set_out(g, n, 0, x0->dtype, &s);
	return 0;
}

/* Pieces along `axis`: full tensor t[k] of outer x (dim_k * inner) bytes. */
struct cat_job {
	int np;
	const struct hp_tensor *t;
	char *whole;
	size_t *chunk, row;       /* bytes per outer index of piece k and of the whole */
	int split;
};

/* Bytes [b, e) of the whole tensor, to (Concat) or from (Split) the pieces
 * they lie in. */
static void cat_range(void *arg, int64_t b, int64_t e, int tid)
{
	const struct cat_job *j = arg;
	size_t at = (size_t)b, end = (size_t)e;

	(void)tid;
	while (at < end) {
		size_t o = at / j->row, off = at % j->row, start = 0;
		int k = 0;
		while (off >= start + j->chunk[k])
			start += j->chunk[k++];
		size_t len = start + j->chunk[k] - off < end - at ? start + j->chunk[k] - off : end - at;
		if (j->t[k].data) {
			char *piece = (char *)j->t[k].data + o * j->chunk[k] + (off - start), *w = j->whole + at;
			memcpy(j->split ? piece : w, j->split ? w : piece, len);
		}
		at += len;
	}
}

/* Copies below this many bytes run on the caller alone: the U-Net's
 * 1 MiB Concat takes about 36 us on one thread, where a worker's wake-up
 * without polling costs the caller 10 us and more (far more when the guest
 * puts the worker on the caller's vCPU) and saves at most half. */
#define CAT_PAR_MIN (2 << 20)
/* Bytes per stolen unit. */
#define CAT_UNIT (64 << 10)

/* The whole tensor in units of CAT_UNIT bytes, stolen (hp_parallel_steal):
 * a copy's bytes are the same whoever moves them, and a worker woken late
 * leaves its units to the caller (fixed halves by batch item made the
 * caller wait for the worker's whole half). */
static void cat_split(const struct hp_tensor *whole, const struct hp_tensor *t, int np, int axis, int split,
		      struct hp_pool *pool)
{
	size_t chunk[np + 1], es = hp_dtype_size(whole->dtype), inner = es;
	int64_t outer = 1, bytes;
	struct cat_job j = { np, t, whole->data, chunk, 0, split };

	for (int d = 0; d < axis; d++)
		outer *= whole->shape.dims[d];
	for (int d = axis + 1; d < whole->shape.rank; d++)
		inner *= (size_t)whole->shape.dims[d];
	for (int k = 0; k < np; k++) {
		chunk[k] = (size_t)t[k].shape.dims[axis] * inner;
		j.row += chunk[k];
	}
	bytes = outer * (int64_t)j.row;
	if (bytes <= 0)
		return;
	if (bytes < CAT_PAR_MIN)
		cat_range(&j, 0, bytes, 0);
	else
		hp_parallel_steal(pool, bytes, CAT_UNIT, hp_pool_size(pool), cat_range, &j);
}

static int concat_run(const struct hp_node *n, const struct hp_kargs *a)
{
	cat_split(&a->out[0], a->in, a->nin, *(const int *)n->priv, 0, a->pool);
	return 0;
}

static int split_prepare(struct hp_graph *g, struct hp_node *n)
{
	const struct hp_value *x = hpks_in(g, n, 0);
	int64_t sp[64], total = 0, no = n->noutputs, dim;
	int axis, rc, cnt = 0;
	struct hp_shape s = x->shape;

	if ((rc = hpks_axis(g, n, hp_attr_int(n, "axis", 0), s.rank, &axis)) < 0)
		return rc;
	dim = s.dims[axis];
	rc = hpks_ints_input_or_attr(g, n, 1, "split", sp, 64, &cnt);
	if (rc < 0)
		return rc;
	if (rc == 0) {
		int64_t k = hp_attr_int(n, "num_outputs", 0), part;
		if (k && k != no)
			return hp_node_error(g, n, HP_ESHAPE, "num_outputs = %lld but %lld outputs", (long long)k,
					     (long long)no);
		if (!k && dim % no)
			return hp_node_error(g, n, HP_ESHAPE, "dim %lld does not split into %lld equal parts",
					     (long long)dim, (long long)no);
		part = (dim + no - 1) / no;
		cnt = (int)no;
		for (int i = 0; i < cnt; i++)
			sp[i] = dim - i * part < part ? (dim - i * part > 0 ? dim - i * part : 0) : part;
	}
	if (cnt != no)
		return hp_node_error(g, n, HP_ESHAPE, "split has %d entries for %lld outputs", cnt, (long long)no);
	for (int i = 0; i < cnt; i++) {
		if (sp[i] < 0)
			return hp_node_error(g, n, HP_ESHAPE, "split[%d] = %lld is negative", i, (long long)sp[i]);
		if (sp[i] > dim - total) /* before the sum overflows (fuzz_struct: INT64_MAX parts) */
			return hp_node_error(g, n, HP_ESHAPE, "split sums to more than axis %d's %lld", axis,
					     (long long)dim);
		total += sp[i];
	}
	if (total != dim)
		return hp_node_error(g, n, HP_ESHAPE, "split sums to %lld, axis %d has %lld", (long long)total, axis,
				     (long long)dim);
	for (int i = 0; i < cnt; i++) {
		s.dims[axis] = sp[i];
		hpks_set_out(g, n, i, x->dtype, &s);
	}
	n->priv = malloc(sizeof(int64_t) * (size_t)(cnt + 1));
	if (!n->priv)
		return -ENOMEM;
	((int64_t *)n->priv)[0] = axis;
	memcpy((int64_t *)n->priv + 1, sp, (size_t)cnt * sizeof *sp);
	return 0;
}

static int split_run(const struct hp_node *n, const struct hp_kargs *a)
{
	const int64_t *p = n->priv;
	struct hp_tensor t[a->nout + 1];

	for (int k = 0; k < a->nout; k++) {
		t[k] = a->out[k];
		t[k].shape = a->in[0].shape;
		t[k].shape.dims[p[0]] = p[1 + k];
	}
	cat_split(&a->in[0], t, a->nout, (int)p[0], 1, a->pool);
	return 0;
}

/* ---- Slice ------------------------------------------------------------- */

/* ONNX clamping: start/end adjusted by dim when negative, then clamped to
 * [0, dim] (step > 0) or [0, dim-1] / [-1, dim-1] (step < 0). */
static int64_t slice_len(int64_t dim, int64_t *start, int64_t end, int64_t step)
{
	int64_t s = *start, e = end;

	if (s < 0)
		s += dim;
	if (e < 0)
		e += dim;
	if (step > 0) {
		s = s < 0 ? 0 : s > dim ? dim : s;
		e = e < 0 ? 0 : e > dim ? dim : e;
	} else {
		s = s < 0 ? 0 : s > dim - 1 ? dim - 1 : s;
		e = e < -1 ? -1 : e > dim - 1 ? dim - 1 : e;
	}
	*start = s;
	/* ceil(span / |step|) as 1 + (span - 1) / |step|: no sum nor -step that
	 * could overflow (a step may be INT64_MIN) */
	if (step > 0)
		return e > s ? 1 + (e - s - 1) / step : 0;
	return s > e ? 1 - (s - e - 1) / step : 0;
}

static int slice_params(const struct hp_graph *g, const struct hp_node *n, int rank, int64_t *st, int64_t *en,
			int64_t *ax, int64_t *sp, int *cnt)
{
	int c[4] = { 0 }, rc;
	const char *names[4] = { "starts", "ends", "axes", "steps" };
	int64_t *dst[4] = { st, en, ax, sp };

	for (int k = 0; k < 4; k++) {
		rc = hpks_ints_input_or_attr(g, n, k + 1, names[k], dst[k], HP_MAX_RANK, &c[k]);
		if (rc < 0)
			return rc;
		if (rc == 0 && k < 2)
			return hp_node_error(g, n, HP_EMODEL, "needs '%s'", names[k]);
		if (rc == 0)
			c[k] = -1;
	}
	if (c[1] != c[0] || (c[2] >= 0 && c[2] != c[0]) || (c[3] >= 0 && c[3] != c[0]))
		return hp_node_error(g, n, HP_ESHAPE, "starts, ends, axes, steps differ in length");
	for (int i = 0; i < c[0]; i++) {
		if (c[2] < 0)
			ax[i] = i;
		if (c[3] < 0)
			sp[i] = 1;
		if (ax[i] < -rank || ax[i] >= rank)
			return hp_node_error(g, n, HP_ESHAPE, "axis %lld out of range", (long long)ax[i]);
		if (ax[i] < 0)
			ax[i] += rank;
		if (sp[i] == 0)
			return hp_node_error(g, n, HP_ESHAPE, "step 0");
		for (int j = 0; j < i; j++)
			if (ax[j] == ax[i])
				return hp_node_error(g, n, HP_ESHAPE, "axis %lld repeated", (long long)ax[i]);
	}
	*cnt = c[0];
	return 0;
}

static int slice_prepare(struct hp_graph *g, struct hp_node *n)
{
	const struct hp_value *x = hpks_in(g, n, 0);
	int64_t st[HP_MAX_RANK], en[HP_MAX_RANK], ax[HP_MAX_RANK], sp[HP_MAX_RANK];
	int64_t b[HP_MAX_RANK], step[HP_MAX_RANK], xs[HP_MAX_RANK];
	int cnt = 0, rc, rank = x->shape.rank;
	struct hp_shape s = x->shape;
	struct hpks_copy c;
	void *blk;

	if ((rc = slice_params(g, n, rank, st, en, ax, sp, &cnt)) < 0)
		return rc;
	for (int d = 0; d < rank; d++) {
		b[d] = 0;
		step[d] = 1;
	}
	for (int i = 0; i < cnt; i++) {
		int d = (int)ax[i];
		b[d] = st[i];
		step[d] = sp[i];
		s.dims[d] = slice_len(x->shape.dims[d], &b[d], en[i], sp[i]);
	}
	hpks_set_out(g, n, 0, x->dtype, &s);
	hpks_strides(&x->shape, xs);
	blk = hpks_copy_alloc(&c, rank, s.dims, hp_dtype_size(x->dtype), sizeof c);
	if (!blk)
		return hpks_copy_error(g, n);
	for (int d = 0; d < rank; d++)
		for (int64_t i = 0; i < s.dims[d]; i++)
			c.off[d][i] = (b[d] + i * step[d]) * xs[d];
	if (rank == 0)
		c.off[0][0] = 0;
	hpks_copy_finish(&c);
	memcpy(blk, &c, sizeof c);
	n->priv = blk;
	return 0;
}

static int copy_table_run(const struct hp_node *n, const struct hp_kargs *a)
{
	hpks_copy_run(n->priv, a->in[0].data, a->out[0].data, a->pool);
	return 0;
}

/* ---- Gather, GatherElements ------------------------------------------- */

static int gather_prepare(struct hp_graph *g, struct hp_node *n)
{
	const struct hp_value *x = hpks_in(g, n, 0), *ix = hpks_in(g, n, 1);
	int axis, rc;
	struct hp_shape s = { 0 };

	if ((rc = hpks_axis(g, n, hp_attr_int(n, "axis", 0), x->shape.rank, &axis)) < 0)
		return rc;
	if (ix->dtype != HP_I64 && ix->dtype != HP_I32)
		return hp_node_error(g, n, HP_ESHAPE, "indices must be int32 or int64, not %s", hp_dtype_name(ix->dtype));
	if (x->shape.rank - 1 + ix->shape.rank > HP_MAX_RANK)
		return hp_node_error(g, n, HP_EUNSUPPORTED, "output rank exceeds %d", HP_MAX_RANK);
	for (int d = 0; d < axis; d++)
		s.dims[s.rank++] = x->shape.dims[d];
	for (int d = 0; d < ix->shape.rank; d++)
		s.dims[s.rank++] = ix->shape.dims[d];
	for (int d = axis + 1; d < x->shape.rank; d++)
		s.dims[s.rank++] = x->shape.dims[d];
	hpks_set_out(g, n, 0, x->dtype, &s);
	n->priv = malloc(sizeof(int));
	if (!n->priv)
		return -ENOMEM;
	*(int *)n->priv = axis;
	return 0;
}

static int check_indices(const struct hp_node *n, const struct hp_tensor *ix, int64_t dim)
{
	int64_t cnt = hp_shape_numel(&ix->shape);

	for (int64_t i = 0; i < cnt; i++) {
		int64_t k = hpks_get_i(ix->data, ix->dtype, i);
		if (k < -dim || k >= dim)
			return hp_node_error(NULL, n, HP_EDATA, "index %lld (element %lld of the indices) is out of range [-%lld, %lld)",
					     (long long)k, (long long)i, (long long)dim, (long long)dim);
	}
	return 0;
}

struct gather_job {
	const char *src;
	char *dst;
	const struct hp_tensor *ix;
	int64_t nidx, dim;
	size_t inner;
};

static void gather_range(void *arg, int64_t b, int64_t e, int tid)
{
	const struct gather_job *j = arg;

	(void)tid;
	for (int64_t t = b; t < e; t++) {
		int64_t o = t / j->nidx, k = hpks_get_i(j->ix->data, j->ix->dtype, t % j->nidx);
		if (k < 0)
			k += j->dim;
		memcpy(j->dst + (size_t)t * j->inner, j->src + (size_t)(o * j->dim + k) * j->inner, j->inner);
	}
}

static int gather_run(const struct hp_node *n, const struct hp_kargs *a)
{
	const struct hp_tensor *x = &a->in[0];
	int axis = *(const int *)n->priv, rc;
	struct gather_job j = { x->data, a->out[0].data, &a->in[1], hp_shape_numel(&a->in[1].shape),
				x->shape.dims[axis], hp_dtype_size(x->dtype) };
	int64_t outer = 1;

	if ((rc = check_indices(n, &a->in[1], j.dim)) < 0)
		return rc;
	for (int d = 0; d < axis; d++)
		outer *= x->shape.dims[d];
	for (int d = axis + 1; d < x->shape.rank; d++)
		j.inner *= (size_t)x->shape.dims[d];
	if (j.nidx && j.inner)
		hp_parallel_for(a->pool, outer * j.nidx, 1 + (int64_t)(65536 / j.inner), gather_range, &j);
	return 0;
}

static int gel_prepare(struct hp_graph *g, struct hp_node *n)
{
	const struct hp_value *x = hpks_in(g, n, 0), *ix = hpks_in(g, n, 1);
	int axis, rc;

	if ((rc = hpks_axis(g, n, hp_attr_int(n, "axis", 0), x->shape.rank, &axis)) < 0)
		return rc;
	if (ix->dtype != HP_I64 && ix->dtype != HP_I32)
		return hp_node_error(g, n, HP_ESHAPE, "indices must be int32 or int64");
	if (ix->shape.rank != x->shape.rank)
		return hp_node_error(g, n, HP_ESHAPE, "indices rank %d differs from data rank %d", ix->shape.rank,
				     x->shape.rank);
	hpks_set_out(g, n, 0, x->dtype, &ix->shape);
	n->priv = malloc(sizeof(int));
	if (!n->priv)
		return -ENOMEM;
	*(int *)n->priv = axis;
	return 0;
}

static int gel_run(const struct hp_node *n, const struct hp_kargs *a)
{
	const struct hp_tensor *x = &a->in[0], *ix = &a->in[1];
	int axis = *(const int *)n->priv, r = x->shape.rank, rc;
	int64_t xs[HP_MAX_RANK], idx[HP_MAX_RANK] = { 0 }, cnt = hp_shape_numel(&ix->shape);
	size_t es = hp_dtype_size(x->dtype);

	if ((rc = check_indices(n, ix, x->shape.dims[axis])) < 0)
		return rc;
	hpks_strides(&x->shape, xs);
	for (int64_t t = 0; t < cnt; t++) {
		int64_t k = hpks_get_i(ix->data, ix->dtype, t), off = 0;
		if (k < 0)
			k += x->shape.dims[axis];
		for (int d = 0; d < r; d++)
			off += (d == axis ? k : idx[d]) * xs[d];
		memcpy((char *)a->out[0].data + (size_t)t * es, (const char *)x->data + (size_t)off * es, es);
		for (int d = r - 1; d >= 0; d--) {
			if (++idx[d] < ix->shape.dims[d])
				break;
			idx[d] = 0;
		}
	}
	return 0;
}

#define OP(var, nm, lo, hi, olo, ohi, prep, rn)                                                        \
	const struct hp_op var = { .domain = "", .name = nm, .min_inputs = lo, .max_inputs = hi,         \
				   .min_outputs = olo, .max_outputs = ohi, .prepare = prep, .run = rn }

OP(hpks_op_transpose, "Transpose", 1, 1, 1, 1, transpose_prepare, hpks_transpose_run);
OP(hpks_op_concat, "Concat", 1, 4096, 1, 1, concat_prepare, concat_run);
OP(hpks_op_split, "Split", 1, 2, 1, 64, split_prepare, split_run);
OP(hpks_op_slice, "Slice", 1, 5, 1, 1, slice_prepare, copy_table_run);
OP(hpks_op_gather, "Gather", 2, 2, 1, 1, gather_prepare, gather_run);
OP(hpks_op_gather_elements, "GatherElements", 2, 2, 1, 1, gel_prepare, gel_run);
