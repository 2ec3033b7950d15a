/* Reductions: ReduceSum/Mean/Max/Min/Prod/L1/L2/SumSquare/LogSum/LogSumExp
 * and ArgMax/ArgMin.
 *
 * Axes come from input 1 (opset 13 ReduceSum, opset 18 all, and whatever the
 * importer converted) or from the `axes` attribute; empty means all axes,
 * or nothing with noop_with_empty_axes.  The input is viewed as alternating
 * groups of kept and reduced dims.  When the innermost group is reduced,
 * each output sums contiguous runs; when it is kept, rows of outputs
 * accumulate whole input rows (vectorized over the kept run).  Float sums
 * accumulate in double in a fixed order per output that does not depend on
 * the thread count. */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>

#include "kernels/eltwise_impl.h"

enum rop { R_SUM, R_MEAN, R_MAX, R_MIN, R_PROD, R_L1, R_L2, R_SUMSQ, R_LOGSUM, R_LOGSUMEXP };

/* What is accumulated per element (R_EXP: exp(x - shift)). */
enum racc { A_SUM, A_SQ, A_ABS, A_PROD, A_MAX, A_MIN, A_EXP };

static const struct {
	const char *name;
	enum rop op;
	enum racc acc;
	int ints; /* also for int32/int64 */
} rops[] = {
	{ "ReduceSum", R_SUM, A_SUM, 1 },       { "ReduceMean", R_MEAN, A_SUM, 1 },
	{ "ReduceMax", R_MAX, A_MAX, 1 },       { "ReduceMin", R_MIN, A_MIN, 1 },
	{ "ReduceProd", R_PROD, A_PROD, 1 },    { "ReduceL1", R_L1, A_ABS, 1 },
	{ "ReduceL2", R_L2, A_SQ, 0 },          { "ReduceSumSquare", R_SUMSQ, A_SQ, 1 },
	{ "ReduceLogSum", R_LOGSUM, A_SUM, 0 }, { "ReduceLogSumExp", R_LOGSUMEXP, A_EXP, 0 },
};

#define KBLOCK 256 /* kept columns accumulated together */

struct rplan {
	enum rop op;
	enum racc acc;
	enum hp_dtype t;
	int noop;                   /* copy: no axes and noop_with_empty_axes */
	int64_t count;              /* reduced elements per output */
	int inner_red;              /* innermost group reduced (else kept) */
	int64_t inner;              /* its length */
	int nk, nr;                 /* other kept / reduced groups, outer first */
	int64_t ks[HP_MAX_RANK], kst[HP_MAX_RANK];
	int64_t rs[HP_MAX_RANK], rst[HP_MAX_RANK];
	int64_t nout, R;            /* products of ks and rs */
	int64_t nchunks;            /* > 0: each output reduced in RCHUNK pieces (split path) */
};

/* Few outputs over many elements (a full reduction) split each output's
 * elements into chunks of RCHUNK, reduced in parallel into partials that
 * are then combined in chunk order.  The partition depends on the shape
 * only, so the result is the same bits on any thread count. */
#define RCHUNK 65536
#define SPLIT_MAX_OUT 16

/* ---- prepare -------------------------------------------------------- */

/* Reduced-axis mask from input 1 or the attribute; -1 in *mask if empty. */
static int read_axes(const struct hp_graph *g, const struct hp_node *n, int rank, unsigned *mask, int *empty)
{
	const struct hp_value *av = hpk_in(g, n, 1);
	const int64_t *axes = NULL;
	int na = 0, ax, rc;

	if (av) {
		if (av->dtype != HP_I64 || av->shape.rank > 1)
			return hp_node_error(g, n, HP_ESHAPE, "axes must be a 1-D int64 tensor");
		if (!av->data)
			return hp_node_error(g, n, HP_EUNSUPPORTED, "axes input '%s' is not a constant", av->name);
		axes = av->data;
		na = (int)hp_shape_numel(&av->shape);
	} else {
		na = hp_attr_ints(n, "axes", &axes);
		na = na < 0 ? 0 : na;
	}
	*mask = 0;
	*empty = na == 0;
	for (int i = 0; i < na; i++) {
		if ((rc = hpk_axis(g, n, axes[i], rank, &ax)) < 0)
			return rc;
		if (*mask & (1u << ax))
			return hp_node_error(g, n, HP_EMODEL, "axis %d is repeated in axes", ax);
		*mask |= 1u << ax;
	}
	return 0;
}

/* Merge dims into alternating kept/reduced groups (size-1 dims vanish). */
static void plan_groups(struct rplan *p, const struct hp_shape *s, unsigned mask)
{
	int64_t gs[HP_MAX_RANK], st = 1;
	int gr[HP_MAX_RANK], ng = 0;

	for (int d = 0; d < s->rank; d++) {
		int red = (mask >> d) & 1;
		if (s->dims[d] == 1)
			continue;
		if (ng && gr[ng - 1] == red) {
			gs[ng - 1] *= s->dims[d];
			continue;
		}
		gs[ng] = s->dims[d];
		gr[ng++] = red;
	}
	if (ng == 0) {
		gs[0] = 1;
		gr[ng++] = 1;
	}
	p->inner_red = gr[ng - 1];
	p->inner = gs[ng - 1];
	p->count = p->nout = p->R = 1;
	st = gs[ng - 1];
	for (int i = ng - 2; i >= 0; i--) {
		if (gr[i]) {
			p->rs[p->nr] = gs[i];
			p->rst[p->nr++] = st;
		} else {
			p->ks[p->nk] = gs[i];
			p->kst[p->nk++] = st;
		}
		st *= gs[i];
	}
	/* collected innermost first: reverse to outer first */
	for (int i = 0; i < p->nk / 2; i++) {
		int64_t a = p->ks[i], b = p->kst[i];
		p->ks[i] = p->ks[p->nk - 1 - i], p->kst[i] = p->kst[p->nk - 1 - i];
		p->ks[p->nk - 1 - i] = a, p->kst[p->nk - 1 - i] = b;
	}
	for (int i = 0; i < p->nr / 2; i++) {
		int64_t a = p->rs[i], b = p->rst[i];
		p->rs[i] = p->rs[p->nr - 1 - i], p->rst[i] = p->rst[p->nr - 1 - i];
		p->rs[p->nr - 1 - i] = a, p->rst[p->nr - 1 - i] = b;
	}
	p->nout = hpk_prod(p->ks, 0, p->nk);
	p->R = hpk_prod(p->rs, 0, p->nr);
	p->count = p->R * (p->inner_red ? p->inner : 1);
}

static int reduce_prepare(struct hp_graph *g, struct hp_node *n)
{
	const struct hp_value *x = hpk_in(g, n, 0);
	struct hp_value *y = hpk_out(g, n, 0);
	int keep = (int)hp_attr_int(n, "keepdims", 1), empty = 1, rc, r = 0;
	unsigned mask = 0;
	struct rplan *p;
	size_t k = 0;

	while (k < sizeof rops / sizeof rops[0] && strcmp(rops[k].name, n->op_type))
		k++;
	if (k == sizeof rops / sizeof rops[0])
		return hp_node_error(g, n, HP_EINTERNAL, "not a reduction");
	if (x->dtype != HP_F32 && x->dtype != HP_F64 && !(rops[k].ints && (x->dtype == HP_I32 || x->dtype == HP_I64)))
		return hp_node_error(g, n, HP_EUNSUPPORTED, "input dtype %s is not supported", hp_dtype_name(x->dtype));
	if ((rc = read_axes(g, n, x->shape.rank, &mask, &empty)) < 0)
		return rc;
	if (!(p = calloc(1, sizeof *p)))
		return hp_node_error(g, n, -ENOMEM, "out of memory");
	n->priv = p;
	p->op = rops[k].op;
	p->acc = rops[k].acc;
	p->t = x->dtype;
	if (empty && hp_attr_int(n, "noop_with_empty_axes", 0))
		p->noop = 1;
	else if (empty)
		mask = (1u << x->shape.rank) - 1;
	if (!p->noop)
		plan_groups(p, &x->shape, mask);
	if (!p->noop && p->t == HP_F32 && p->inner_red && p->nout <= SPLIT_MAX_OUT && p->count >= 2 * RCHUNK) {
		p->nchunks = (p->count + RCHUNK - 1) / RCHUNK;
		n->workspace = (size_t)(p->nout * p->nchunks) * sizeof(double);
	}
	y->dtype = x->dtype;
	for (int d = 0; d < x->shape.rank; d++) {
		if (p->noop || !((mask >> d) & 1))
			y->shape.dims[r++] = x->shape.dims[d];
		else if (keep)
			y->shape.dims[r++] = 1;
	}
	y->shape.rank = r;
	return 0;
}

/* ---- float accumulation --------------------------------------------- */

typedef int32_t ri4 __attribute__((vector_size(16)));

static inline double pick_max(double a, double b) { return b > a || b != b ? b : a; } /* NaN sticks */
static inline double pick_min(double a, double b) { return b < a || b != b ? b : a; }

static double acc_init(enum racc a)
{
	return a == A_PROD ? 1.0 : a == A_MAX ? -INFINITY : a == A_MIN ? INFINITY : 0.0;
}

static double combine(enum racc a, double acc, double part)
{
	switch (a) {
	case A_PROD: return acc * part;
	case A_MAX: return pick_max(acc, part);
	case A_MIN: return pick_min(acc, part);
	default: return acc + part;
	}
}

static double sum_abs(const float *x, int64_t n)
{
	hpk_d4 lo = { 0 }, hi = { 0 };
	const ri4 m = { 0x7fffffff, 0x7fffffff, 0x7fffffff, 0x7fffffff };
	double l[8];
	int64_t i = 0;

	for (; i + 8 <= n; i += 8) {
		hpk_f4 a, b;
		memcpy(&a, x + i, sizeof a);
		memcpy(&b, x + i + 4, sizeof b);
		lo += __builtin_convertvector((hpk_f4)((ri4)a & m), hpk_d4);
		hi += __builtin_convertvector((hpk_f4)((ri4)b & m), hpk_d4);
	}
	memcpy(l, &lo, sizeof lo);
	memcpy(l + 4, &hi, sizeof hi);
	for (int k = 0; i < n; i++, k++)
		l[k] += fabsf(x[i]);
	return ((l[0] + l[4]) + (l[1] + l[5])) + ((l[2] + l[6]) + (l[3] + l[7]));
}

/* Max (or min) of a run, NaN-propagating, eight lanes. */
static double run_extreme(const float *x, int64_t n, int is_min)
{
	hpk_f8 m;
	double r = is_min ? INFINITY : -INFINITY;
	int64_t i = 0;

	for (int k = 0; k < 8; k++)
		m[k] = (float)r;
	for (; i + 8 <= n; i += 8) {
		hpk_f8 v;
		memcpy(&v, x + i, sizeof v);
		hpk_i8 take = (is_min ? v < m : v > m) | (v != v);
		m = (hpk_f8)(((hpk_i8)v & take) | ((hpk_i8)m & ~take));
	}
	for (int k = 0; k < 8; k++)
		r = is_min ? pick_min(r, m[k]) : pick_max(r, m[k]);
	for (; i < n; i++)
		r = is_min ? pick_min(r, x[i]) : pick_max(r, x[i]);
	return r;
}

/* Partial of one contiguous run of n elements. */
static double run_acc(enum racc a, const float *x, int64_t n, float shift)
{
	float buf[KBLOCK];
	double s = 0;

	switch (a) {
	case A_SUM: return hpk_sum_f(x, n);
	case A_SQ: return hpk_sumsq_f(x, 0.0f, n);
	case A_ABS: return sum_abs(x, n);
	case A_MAX: return run_extreme(x, n, 0);
	case A_MIN: return run_extreme(x, n, 1);
	case A_PROD:
		s = 1;
		for (int64_t i = 0; i < n; i++)
			s *= x[i];
		return s;
	case A_EXP:
		for (int64_t i = 0; i < n; i += KBLOCK) {
			int64_t w = n - i < KBLOCK ? n - i : KBLOCK;
			for (int64_t k = 0; k < w; k++)
				buf[k] = hpk_expf(x[i + k] - shift);
			s += hpk_sum_f(buf, w);
		}
		return s;
	}
	return 0;
}

/* acc[j] op= x[j] for one input row of w kept columns. */
static void row_acc(enum racc a, double *acc, const float *x, int w, const float *shift)
{
	switch (a) {
	case A_SUM: for (int j = 0; j < w; j++) acc[j] += x[j]; break;
	case A_SQ: for (int j = 0; j < w; j++) acc[j] += (double)x[j] * x[j]; break;
	case A_ABS: for (int j = 0; j < w; j++) acc[j] += fabsf(x[j]); break;
	case A_PROD: for (int j = 0; j < w; j++) acc[j] *= x[j]; break;
	case A_MAX: for (int j = 0; j < w; j++) acc[j] = pick_max(acc[j], x[j]); break;
	case A_MIN: for (int j = 0; j < w; j++) acc[j] = pick_min(acc[j], x[j]); break;
	case A_EXP: for (int j = 0; j < w; j++) acc[j] += hpk_expf(x[j] - shift[j]); break;
	}
}

/* LogSumExp's shift: the max, or 0 where it is not finite (all -inf, inf, NaN). */
static inline float lse_shift(float m)
{
	return isfinite(m) ? m : 0.0f;
}

static float finish(const struct rplan *p, enum racc a, double v, float shift)
{
	if (p->op == R_LOGSUMEXP && a == A_MAX)
		return (float)v; /* first pass: the max */
	switch (p->op) {
	case R_MEAN: return (float)(v / (double)p->count);
	case R_L2: return (float)sqrt(v);
	case R_LOGSUM: return (float)log(v);
	case R_LOGSUMEXP: return (float)(shift + log(v));
	default: return (float)v;
	}
}

struct fjob {
	const struct rplan *p;
	enum racc a;
	const float *x;
	float *y;
	int64_t nkb; /* kept-column blocks per output row (inner kept) */
	double *part; /* split path: nout * nchunks partials (workspace) */
};

/* Offset of kept index o (outer groups) or reduced index r. */
static int64_t offset(int64_t idx, int ng, const int64_t *size, const int64_t *stride)
{
	int64_t off = 0;

	for (int i = ng - 1; i >= 0; i--) {
		off += idx % size[i] * stride[i];
		idx /= size[i];
	}
	return off;
}

HPK_SIMD static void f32_inner_reduced(void *arg, int64_t b, int64_t e, int tid)
{
	const struct fjob *j = arg;
	const struct rplan *p = j->p;

	(void)tid;
	if (p->nk <= 1 && p->R == 1) { /* a global pool's shape: each output one run, o kst[0] apart */
		int64_t st = p->nk ? p->kst[0] : 0;
		for (int64_t o = b; o < e; o++) {
			float shift = j->a == A_EXP ? lse_shift(j->y[o]) : 0.0f;
			double acc = combine(j->a, acc_init(j->a), run_acc(j->a, j->x + o * st, p->inner, shift));
			j->y[o] = finish(p, j->a, acc, shift);
		}
		return;
	}
	for (int64_t o = b; o < e; o++) {
		int64_t base = offset(o, p->nk, p->ks, p->kst);
		float shift = j->a == A_EXP ? lse_shift(j->y[o]) : 0.0f;
		double acc = acc_init(j->a);
		for (int64_t r = 0; r < p->R; r++)
			acc = combine(j->a, acc, run_acc(j->a, j->x + base + offset(r, p->nr, p->rs, p->rst), p->inner, shift));
		j->y[o] = finish(p, j->a, acc, shift);
	}
}

HPK_SIMD static void f32_inner_kept(void *arg, int64_t b, int64_t e, int tid)
{
	const struct fjob *j = arg;
	const struct rplan *p = j->p;
	double acc[KBLOCK];
	float shift[KBLOCK];

	(void)tid;
	for (int64_t u = b; u < e; u++) {
		int64_t o = u / j->nkb, c0 = u % j->nkb * KBLOCK;
		int w = (int)(p->inner - c0 < KBLOCK ? p->inner - c0 : KBLOCK);
		int64_t base = offset(o, p->nk, p->ks, p->kst) + c0;
		float *y = j->y + o * p->inner + c0;
		for (int c = 0; c < w; c++) {
			acc[c] = acc_init(j->a);
			shift[c] = j->a == A_EXP ? lse_shift(y[c]) : 0.0f;
		}
		for (int64_t r = 0; r < p->R; r++)
			row_acc(j->a, acc, j->x + base + offset(r, p->nr, p->rs, p->rst), w, shift);
		for (int c = 0; c < w; c++)
			y[c] = finish(p, j->a, acc[c], shift[c]);
	}
}

/* Partial of chunk u % nchunks of output u / nchunks: the pieces of the
 * runs it overlaps, in order. */
HPK_SIMD static void f32_chunks(void *arg, int64_t b, int64_t e, int tid)
{
	const struct fjob *j = arg;
	const struct rplan *p = j->p;

	(void)tid;
	for (int64_t u = b; u < e; u++) {
		int64_t o = u / p->nchunks, lo = u % p->nchunks * RCHUNK;
		int64_t hi = lo + RCHUNK < p->count ? lo + RCHUNK : p->count, base = offset(o, p->nk, p->ks, p->kst);
		float shift = j->a == A_EXP ? lse_shift(j->y[o]) : 0.0f;
		double acc = acc_init(j->a);
		while (lo < hi) {
			int64_t r = lo / p->inner, i = lo % p->inner;
			int64_t len = p->inner - i < hi - lo ? p->inner - i : hi - lo;
			const float *run = j->x + base + offset(r, p->nr, p->rs, p->rst) + i;
			acc = combine(j->a, acc, run_acc(j->a, run, len, shift));
			lo += len;
		}
		j->part[u] = acc;
	}
}

static void reduce_split(const struct rplan *p, struct fjob *j, struct hp_pool *pool)
{
	hp_parallel_for(pool, p->nout * p->nchunks, 1, f32_chunks, j);
	for (int64_t o = 0; o < p->nout; o++) {
		double acc = acc_init(j->a);
		float shift = j->a == A_EXP ? lse_shift(j->y[o]) : 0.0f;
		for (int64_t c = 0; c < p->nchunks; c++)
			acc = combine(j->a, acc, j->part[o * p->nchunks + c]);
		j->y[o] = finish(p, j->a, acc, shift);
	}
}

static void reduce_f32(const struct rplan *p, enum racc a, const float *x, float *y, double *ws,
		       struct hp_pool *pool)
{
	struct fjob j = { .p = p, .a = a, .x = x, .y = y, .part = ws };
	int64_t units, cost;

	if (p->nchunks) {
		reduce_split(p, &j, pool);
		return;
	}
	if (p->inner_red) {
		units = p->nout;
		cost = p->count;
		hp_parallel_for(pool, units, HPK_GRAIN / (cost + 1) + 1, f32_inner_reduced, &j);
		return;
	}
	j.nkb = (p->inner + KBLOCK - 1) / KBLOCK;
	units = p->nout * j.nkb;
	cost = p->R * (p->inner < KBLOCK ? p->inner : KBLOCK);
	hp_parallel_for(pool, units, HPK_GRAIN / (cost + 1) + 1, f32_inner_kept, &j);
}

/* ---- integers (shape arithmetic: small, scalar, wrapping) ------------ */

static int64_t ld(const void *x, enum hp_dtype t, int64_t i)
{
	return t == HP_I32 ? ((const int32_t *)x)[i] : ((const int64_t *)x)[i];
}

static int64_t iacc(enum racc a, int64_t acc, int64_t v)
{
	switch (a) {
	case A_PROD: return (int64_t)((uint64_t)acc * (uint64_t)v);
	case A_MAX: return v > acc ? v : acc;
	case A_MIN: return v < acc ? v : acc;
	case A_ABS: return (int64_t)((uint64_t)acc + (uint64_t)(v < 0 ? -(uint64_t)v : (uint64_t)v));
	case A_SQ: return (int64_t)((uint64_t)acc + (uint64_t)v * (uint64_t)v);
	default: return (int64_t)((uint64_t)acc + (uint64_t)v);
	}
}

static void reduce_int(const struct rplan *p, const void *x, void *y)
{
	int64_t nin = p->inner_red ? p->inner : 1, nkept = p->inner_red ? 1 : p->inner;

	for (int64_t o = 0; o < p->nout; o++)
		for (int64_t c = 0; c < nkept; c++) {
			int64_t base = offset(o, p->nk, p->ks, p->kst) + c;
			int64_t acc = p->acc == A_PROD ? 1 : p->acc == A_MAX ? INT64_MIN : p->acc == A_MIN ? INT64_MAX : 0;
			if (p->t == HP_I32 && (p->acc == A_MAX || p->acc == A_MIN))
				acc = p->acc == A_MAX ? INT32_MIN : INT32_MAX;
			for (int64_t r = 0; r < p->R; r++)
				for (int64_t i = 0; i < nin; i++)
					acc = iacc(p->acc, acc, ld(x, p->t, base + offset(r, p->nr, p->rs, p->rst) + i));
			if (p->op == R_MEAN)
				acc = p->count ? acc / p->count : 0;
			if (p->t == HP_I32)
				((int32_t *)y)[o * nkept + c] = (int32_t)acc;
			else
				((int64_t *)y)[o * nkept + c] = acc;
		}
}

/* ---- float64 (ONNX's tests and rare models: plain scalar loops) ------- */

static double dacc(enum racc a, double acc, double v, double shift)
{
	switch (a) {
	case A_PROD: return acc * v;
	case A_MAX: return pick_max(acc, v);
	case A_MIN: return pick_min(acc, v);
	case A_ABS: return acc + fabs(v);
	case A_SQ: return acc + v * v;
	case A_EXP: return acc + exp(v - shift);
	default: return acc + v;
	}
}

/* One output (kept offset base): the max first for LogSumExp's shift. */
static double reduce_one_f64(const struct rplan *p, const double *x, int64_t base, int64_t nin)
{
	double shift = 0, acc;

	if (p->op == R_LOGSUMEXP) {
		shift = -INFINITY;
		for (int64_t r = 0; r < p->R; r++)
			for (int64_t i = 0; i < nin; i++)
				shift = pick_max(shift, x[base + offset(r, p->nr, p->rs, p->rst) + i]);
		shift = isinf(shift) ? 0 : shift;
	}
	acc = acc_init(p->acc);
	for (int64_t r = 0; r < p->R; r++)
		for (int64_t i = 0; i < nin; i++)
			acc = dacc(p->acc, acc, x[base + offset(r, p->nr, p->rs, p->rst) + i], shift);
	switch (p->op) {
	case R_MEAN: return acc / (double)p->count;
	case R_L2: return sqrt(acc);
	case R_LOGSUM: return log(acc);
	case R_LOGSUMEXP: return shift + log(acc);
	default: return acc;
	}
}

static void reduce_f64(const struct rplan *p, const double *x, double *y)
{
	int64_t nin = p->inner_red ? p->inner : 1, nkept = p->inner_red ? 1 : p->inner;

	for (int64_t o = 0; o < p->nout; o++)
		for (int64_t c = 0; c < nkept; c++)
			y[o * nkept + c] = reduce_one_f64(p, x, offset(o, p->nk, p->ks, p->kst) + c, nin);
}

/* Reductions over nothing give the identity (sum 0, prod 1, max -inf, ...). */
static void fill_empty(const struct rplan *p, void *y, int64_t n)
{
	for (int64_t i = 0; i < n; i++) {
		double v = acc_init(p->acc);
		if (p->t == HP_F32)
			((float *)y)[i] = finish(p, p->acc, v, 0.0f);
		else if (p->t == HP_F64)
			((double *)y)[i] = finish(p, p->acc, v, 0.0f);
		else if (p->t == HP_I32)
			((int32_t *)y)[i] = v > INT32_MAX ? INT32_MAX : v < INT32_MIN ? INT32_MIN : (int32_t)v;
		else
			((int64_t *)y)[i] = v > 9.2e18 ? INT64_MAX : v < -9.2e18 ? INT64_MIN : (int64_t)v;
	}
}

static int reduce_run(const struct hp_node *n, const struct hp_kargs *a)
{
	const struct rplan *p = n->priv;
	const void *x = a->in[0].data;
	void *y = a->out[0].data;

	if (p->noop) {
		if (x != y)
			memcpy(y, x, hp_tensor_bytes(&a->in[0]));
		return 0;
	}
	if (hp_shape_numel(&a->in[0].shape) == 0) {
		fill_empty(p, y, hp_shape_numel(&a->out[0].shape));
		return 0;
	}
	if (p->t == HP_F64) {
		reduce_f64(p, x, y);
		return 0;
	}
	if (p->t != HP_F32) {
		reduce_int(p, x, y);
		return 0;
	}
	if (p->op == R_LOGSUMEXP)
		reduce_f32(p, A_MAX, x, y, a->ws, a->pool);
	reduce_f32(p, p->acc, x, y, a->ws, a->pool);
	return 0;
}

static double reduce_flops(const struct hp_graph *g, const struct hp_node *n)
{
	const struct rplan *p = n->priv;
	const struct hp_value *x = hpk_in(g, n, 0);
	double per = p && (p->op == R_LOGSUMEXP) ? 10 : p && p->acc == A_SQ ? 2 : 1;

	return x ? per * (double)hp_shape_numel(&x->shape) : 0;
}

/* ---- ArgMax / ArgMin ------------------------------------------------ */

struct argp {
	int is_min, last;
	enum hp_dtype t;
	int64_t outer, len, inner;
};

static int arg_prepare(struct hp_graph *g, struct hp_node *n)
{
	const struct hp_value *x = hpk_in(g, n, 0);
	struct hp_value *y = hpk_out(g, n, 0);
	int keep = (int)hp_attr_int(n, "keepdims", 1), ax, rc, r = 0;
	struct argp *p;

	if (x->dtype != HP_F32 && x->dtype != HP_I32 && x->dtype != HP_I64)
		return hp_node_error(g, n, HP_EUNSUPPORTED, "input dtype %s is not supported", hp_dtype_name(x->dtype));
	if ((rc = hpk_axis(g, n, hp_attr_int(n, "axis", 0), x->shape.rank, &ax)) < 0)
		return rc;
	if (x->shape.rank && x->shape.dims[ax] == 0)
		return hp_node_error(g, n, HP_ESHAPE, "cannot take %s over an empty axis", n->op_type);
	if (!(p = calloc(1, sizeof *p)))
		return hp_node_error(g, n, -ENOMEM, "out of memory");
	n->priv = p;
	p->is_min = !strcmp(n->op_type, "ArgMin");
	p->last = (int)hp_attr_int(n, "select_last_index", 0);
	p->t = x->dtype;
	p->outer = hpk_prod(x->shape.dims, 0, ax);
	p->len = x->shape.rank ? x->shape.dims[ax] : 1;
	p->inner = hpk_prod(x->shape.dims, ax + 1, x->shape.rank);
	y->dtype = HP_I64;
	for (int d = 0; d < x->shape.rank; d++)
		if (d != ax || keep)
			y->shape.dims[r++] = d == ax ? 1 : x->shape.dims[d];
	y->shape.rank = r;
	return 0;
}

static double ldf(const void *x, enum hp_dtype t, int64_t i)
{
	return t == HP_F32 ? ((const float *)x)[i] : (double)ld(x, t, i);
}

/* v replaces the best so far: strictly better, or equal with
 * select_last_index; a NaN wins over numbers (as numpy's argmax). */
static inline int better(const struct argp *p, double v, double best)
{
	if (v != v)
		return best == best || p->last;
	if (best != best)
		return 0;
	return p->is_min ? (v < best || (p->last && v == best)) : (v > best || (p->last && v == best));
}

struct ajob {
	const struct argp *p;
	const void *x;
	int64_t *y;
};

static void arg_range(void *arg, int64_t b, int64_t e, int tid)
{
	const struct ajob *j = arg;
	const struct argp *p = j->p;

	(void)tid;
	for (int64_t o = b; o < e; o++)
		for (int64_t i = 0; i < p->inner; i++) {
			int64_t base = o * p->len * p->inner + i, at = 0;
			double best = ldf(j->x, p->t, base);
			for (int64_t k = 1; k < p->len; k++) {
				double v = ldf(j->x, p->t, base + k * p->inner);
				if (better(p, v, best)) {
					best = v;
					at = k;
				}
			}
			j->y[o * p->inner + i] = at;
		}
}

static int arg_run(const struct hp_node *n, const struct hp_kargs *a)
{
	struct ajob j = { .p = n->priv, .x = a->in[0].data, .y = a->out[0].data };

	hp_parallel_for(a->pool, j.p->outer, HPK_GRAIN / (j.p->len * j.p->inner + 1) + 1, arg_range, &j);
	return 0;
}

#define REDUCE_OP(VAR, NAME)                                                                          \
	static const struct hp_op VAR = { .domain = "", .name = NAME, .min_inputs = 1, .max_inputs = 2,  \
					  .min_outputs = 1, .max_outputs = 1, .prepare = reduce_prepare, \
					  .run = reduce_run, .flops = reduce_flops }

REDUCE_OP(op_sum, "ReduceSum");
REDUCE_OP(op_mean, "ReduceMean");
REDUCE_OP(op_max, "ReduceMax");
REDUCE_OP(op_min, "ReduceMin");
REDUCE_OP(op_prod, "ReduceProd");
REDUCE_OP(op_l1, "ReduceL1");
REDUCE_OP(op_l2, "ReduceL2");
REDUCE_OP(op_sumsq, "ReduceSumSquare");
REDUCE_OP(op_logsum, "ReduceLogSum");
REDUCE_OP(op_lse, "ReduceLogSumExp");

static const struct hp_op op_argmax = { .domain = "", .name = "ArgMax", .min_inputs = 1, .max_inputs = 1,
					.min_outputs = 1, .max_outputs = 1, .prepare = arg_prepare, .run = arg_run };
static const struct hp_op op_argmin = { .domain = "", .name = "ArgMin", .min_inputs = 1, .max_inputs = 1,
					.min_outputs = 1, .max_outputs = 1, .prepare = arg_prepare, .run = arg_run };

const struct hp_op *const hp_ops_reduce[] = {
	&op_sum, &op_mean, &op_max, &op_min, &op_prod, &op_l1, &op_l2, &op_sumsq, &op_logsum, &op_lse,
	&op_argmax, &op_argmin, NULL,
};
