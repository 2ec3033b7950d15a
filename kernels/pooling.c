/* Pooling: MaxPool (with Indices), AveragePool, LpPool over 1..3 spatial
 * dims, and the Global* variants.  Spatial dims are handled as 3-D with
 * leading unit dims; work is split over the N*C planes. */

/* No kernel here reads FP exception flags: let GCC if-convert the max
 * selects of the row path into SIMD (as eltwise_impl.h does). */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("no-trapping-math")
#endif

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/checked.h"
#include "kernels/ops.h"
#include "kernels/pool_simd.h"
#include "kernels/shape_util.h"
#include "kernels/threadpool.h"
#include "kernels/typegen.h"

/* Elements of the per-thread row buffer of the row path (on the stack):
 * a window wider than this (kernel extent with dilation) takes the
 * per-output path. */
#define ROWBUF 2048

enum pool_kind { P_MAX, P_AVG, P_LP };

struct pool_p {
	int kind;
	int64_t planes, c;                 /* N*C, C */
	int64_t in[3], out[3], k[3], s[3], dl[3], pb[3], pe[3];
	int count_include_pad, storage_order, lp;
	int fast2;                         /* max, kernel = stride = 2, no pad: fast path */
	int rows;                          /* max/avg without Indices: row path */
	int64_t wblock;                    /* output columns per row-path block */
	int32_t *foff;                     /* flat path (flat_tables): tap offsets, or NULL */
	uint16_t *fmask;                   /* its lane masks, per tap and chunk of a period */
	int64_t ftaps, fper;
	double *hcnt;                      /* average: divisor factor of each output column */
	enum hp_dtype t;
	/* per dim and output index: valid tap range [lo, hi) and taps inside the
	 * padded extent (count_include_pad divisor) */
	int64_t *lo[3], *hi[3], *cnt_pad[3];
};

static int pool_kind_of(const struct hp_node *n)
{
	return strstr(n->op_type, "Max") ? P_MAX : strstr(n->op_type, "Lp") ? P_LP : P_AVG;
}

/* Output size and begin/end pads of one spatial dim. */
static int pool_dim(const struct hp_graph *g, const struct hp_node *n, const char *ap, int ceil_mode,
		    int64_t in, int64_t k, int64_t s, int64_t dl, int64_t *pb, int64_t *pe, int64_t *out)
{
	int over = 0;
	int64_t dk = hp_ck_add(hp_ck_mul(k - 1, dl, &over), 1, &over), o = 0;

	if (!strcmp(ap, "SAME_UPPER") || !strcmp(ap, "SAME_LOWER")) {
		int64_t total;
		o = hp_ck_add(in, s - 1, &over) / s;
		total = hp_ck_sub(hp_ck_add(hp_ck_mul(o - 1, s, &over), dk, &over), in, &over);
		if (total < 0)
			total = 0;
		*pb = ap[5] == 'U' ? total / 2 : total - total / 2;
		*pe = total - *pb;
	} else if (!strcmp(ap, "VALID")) {
		*pb = *pe = 0;
		o = in >= dk ? (in - dk) / s + 1 : 0;
	} else if (!strcmp(ap, "NOTSET") || !ap[0]) {
		int64_t span = hp_ck_sub(hp_ck_add(hp_ck_add(in, *pb, &over), *pe, &over), dk, &over);
		o = span < 0 ? 0 : ceil_mode ? hp_ck_add(span, s - 1, &over) / s + 1 : span / s + 1;
		if (ceil_mode && o > 0 && hp_ck_mul(o - 1, s, &over) >= hp_ck_add(in, *pb, &over))
			o--; /* the last window would start in the end padding */
	} else {
		return hp_node_error(g, n, HP_EUNSUPPORTED, "auto_pad '%s' is not supported", ap);
	}
	if (over || o > HP_DIM_MAX)
		return hp_node_error(g, n, HP_ESHAPE, "input dim %lld, kernel %lld, stride %lld, dilation %lld, "
				     "pads %lld+%lld give an output dim beyond any tensor", (long long)in, (long long)k,
				     (long long)s, (long long)dl, (long long)*pb, (long long)*pe);
	if (o < 1)
		return hp_node_error(g, n, HP_ESHAPE, "input dim %lld is too small for kernel %lld (dilation %lld)",
				     (long long)in, (long long)k, (long long)dl);
	*out = o;
	return 0;
}

static int get_list(const struct hp_graph *g, const struct hp_node *n, const char *name, int want,
		    int64_t dflt, int64_t *v)
{
	const int64_t *a;
	int na = hp_attr_ints(n, name, &a);

	for (int i = 0; i < want; i++)
		v[i] = dflt;
	if (na < 0)
		return 0;
	if (na != want)
		return hp_node_error(g, n, HP_ESHAPE, "%s has %d values, expected %d", name, na, want);
	for (int i = 0; i < want; i++) {
		if (a[i] < (strcmp(name, "pads") ? 1 : 0))
			return hp_node_error(g, n, HP_ESHAPE, "%s[%d] = %lld is invalid", name, i, (long long)a[i]);
		v[i] = a[i];
	}
	return 0;
}

/* Attributes into p (spatial dims right-aligned into 3). */
static int pool_attrs(const struct hp_graph *g, const struct hp_node *n, const struct hp_value *x,
		      struct pool_p *p)
{
	int64_t k[3], s[3], dl[3], pads[6];
	const int64_t *ks;
	int nsp = hp_attr_ints(n, "kernel_shape", &ks), rc, off;
	const char *ap = hp_attr_string(n, "auto_pad", "NOTSET");

	if (nsp < 1 || nsp > 3 || nsp != x->shape.rank - 2)
		return hp_node_error(g, n, nsp < 0 ? HP_EMODEL : HP_EUNSUPPORTED,
				     "kernel_shape has %d dims for input rank %d (1..3 spatial dims supported)", nsp,
				     x->shape.rank);
	if ((rc = get_list(g, n, "kernel_shape", nsp, 1, k)) < 0 || (rc = get_list(g, n, "strides", nsp, 1, s)) < 0 ||
	    (rc = get_list(g, n, "dilations", nsp, 1, dl)) < 0 || (rc = get_list(g, n, "pads", 2 * nsp, 0, pads)) < 0)
		return rc;
	off = 3 - nsp;
	for (int d = 0; d < 3; d++) {
		p->in[d] = p->out[d] = p->k[d] = p->s[d] = p->dl[d] = 1;
		p->pb[d] = p->pe[d] = 0;
	}
	for (int d = 0; d < nsp; d++) {
		int D = d + off;
		p->in[D] = x->shape.dims[2 + d];
		p->k[D] = k[d];
		p->s[D] = s[d];
		p->dl[D] = dl[d];
		p->pb[D] = pads[d];
		p->pe[D] = pads[d + nsp];
		rc = pool_dim(g, n, ap, (int)hp_attr_int(n, "ceil_mode", 0), p->in[D], k[d], s[d], dl[d], &p->pb[D],
			      &p->pe[D], &p->out[D]);
		if (rc < 0)
			return rc;
	}
	return 0;
}

static void pool_tables(struct pool_p *p, int64_t *mem)
{
	for (int d = 0; d < 3; d++) {
		p->lo[d] = mem;
		p->hi[d] = mem + p->out[d];
		p->cnt_pad[d] = mem + 2 * p->out[d];
		mem += 3 * p->out[d];
		for (int64_t o = 0; o < p->out[d]; o++) {
			int64_t st = o * p->s[d] - p->pb[d], lo = p->k[d], hi = 0, cp = 0;
			for (int64_t j = 0; j < p->k[d]; j++) {
				int64_t pos = st + j * p->dl[d];
				if (pos >= 0 && pos < p->in[d]) {
					lo = j < lo ? j : lo;
					hi = j + 1;
				}
				cp += pos < p->in[d] + p->pe[d];
			}
			p->lo[d][o] = lo < hi ? lo : 0;
			p->hi[d][o] = lo < hi ? hi : 0;
			p->cnt_pad[d][o] = cp;
		}
	}
}

/* Stride-1 float32 MaxPool whose output planes are the input planes'
 * size (3x3 pad 1, GoogLeNet's branch pools) runs over all planes as one
 * flat row by masked loads (AVX-512): output i takes input i + off[tap]
 * where the tap lies inside its plane.  Why: planes of 2x2 to 8x8 spent
 * their time in the row path's per-row work, 7 ns an output. */
#define FLAT_TAPS 64

static int64_t gcd64(int64_t a, int64_t b)
{
	while (b) {
		int64_t t = a % b;
		a = b;
		b = t;
	}
	return a;
}

/* Entries of the flat path's mask table, 0 where the path does not apply. */
static int64_t flat_entries(const struct pool_p *p)
{
	int64_t P = p->in[0] * p->in[1] * p->in[2], taps = p->k[0] * p->k[1] * p->k[2], per = P / gcd64(P, 16);

	if (p->kind != P_MAX || p->t != HP_F32 || !p->rows || p->fast2 || P > INT32_MAX || taps > FLAT_TAPS ||
	    taps * per > (1 << 16))
		return 0;
	for (int d = 0; d < 3; d++)
		if (p->s[d] != 1 || p->out[d] != p->in[d])
			return 0;
	return taps * per;
}

/* Offsets and lane masks of every tap (w tap outermost, then d, h: the
 * row path's order) over one period of 16-output chunks. */
static void flat_tables(struct pool_p *p, int32_t *off, uint16_t *mask)
{
	int64_t P = p->in[0] * p->in[1] * p->in[2], t = 0;

	p->foff = off;
	p->fmask = mask;
	p->ftaps = p->k[0] * p->k[1] * p->k[2];
	p->fper = P / gcd64(P, 16);
	for (int64_t c = 0; c < p->k[2]; c++)
		for (int64_t a = 0; a < p->k[0]; a++)
			for (int64_t b = 0; b < p->k[1]; b++, t++) {
				int64_t dd = a * p->dl[0] - p->pb[0], dh = b * p->dl[1] - p->pb[1], dw = c * p->dl[2] - p->pb[2];
				off[t] = (int32_t)((dd * p->in[1] + dh) * p->in[2] + dw);
				for (int64_t ci = 0; ci < p->fper; ci++) {
					uint16_t m = 0;
					for (int l = 0; l < 16; l++) {
						int64_t i = (ci * 16 + l) % P, w = i % p->in[2] + dw;
						int64_t h = i / p->in[2] % p->in[1] + dh, d = i / p->in[2] / p->in[1] + dd;
						if (d >= 0 && d < p->in[0] && h >= 0 && h < p->in[1] && w >= 0 && w < p->in[2])
							m |= (uint16_t)(1u << l);
					}
					mask[t * p->fper + ci] = m;
				}
			}
}

/* Which path runs and which dtypes each takes: the row path (max over
 * float32/float64/int8/uint8, average over float32), else the per-output
 * path (float32: LpPool, MaxPool with Indices, very wide windows). */
static int pool_rows_setup(const struct hp_graph *g, const struct hp_node *n, struct pool_p *p)
{
	int64_t ext = (p->k[2] - 1) * p->dl[2] + 1;
	int idx = n->noutputs > 1 && n->outputs[1] >= 0;
	int max_type = p->t == HP_F32 || p->t == HP_F64 || p->t == HP_I8 || p->t == HP_U8;

	p->rows = !idx && p->kind != P_LP && ext <= ROWBUF && (p->kind == P_MAX ? max_type : p->t == HP_F32);
	p->wblock = p->rows ? (ROWBUF - ext) / p->s[2] + 1 : 0;
	if (!p->rows && p->t != HP_F32)
		return hp_node_error(g, n, HP_EUNSUPPORTED, "%s of %s%s", n->op_type, hp_dtype_name(p->t),
				     idx ? " with the Indices output (float32 only)"
				     : p->kind == P_MAX && max_type ? ": window wider than the row buffer"
								    : " is not supported");
	return 0;
}

static int pool_prepare(struct hp_graph *g, struct hp_node *n)
{
	const struct hp_value *x = hpks_in(g, n, 0);
	struct pool_p tmp = { .kind = pool_kind_of(n) }, *p;
	struct hp_shape os = x->shape;
	int rc, nsp = x->shape.rank - 2;
	size_t ntab, nflat;

	if ((rc = pool_attrs(g, n, x, &tmp)) < 0)
		return rc;
	tmp.planes = x->shape.dims[0] * x->shape.dims[1];
	tmp.c = x->shape.dims[1];
	tmp.count_include_pad = (int)hp_attr_int(n, "count_include_pad", 0);
	tmp.storage_order = (int)hp_attr_int(n, "storage_order", 0);
	tmp.lp = (int)hp_attr_int(n, "p", 2);
	tmp.fast2 = tmp.kind == P_MAX && !(n->noutputs > 1 && n->outputs[1] >= 0);
	tmp.t = x->dtype;
	tmp.fast2 &= x->dtype == HP_F32;
	if ((rc = pool_rows_setup(g, n, &tmp)) < 0)
		return rc;
	for (int d = 0; d < 3; d++) {
		int unit = tmp.k[d] == 1 && tmp.s[d] == 1 && d < 3 - nsp;
		tmp.fast2 &= unit || (tmp.k[d] == 2 && tmp.s[d] == 2 && tmp.dl[d] == 1 && !tmp.pb[d] &&
				      tmp.out[d] == tmp.in[d] / 2);
		if (d >= 3 - nsp)
			os.dims[2 + d - (3 - nsp)] = tmp.out[d];
	}
	ntab = 3 * (size_t)(tmp.out[0] + tmp.out[1] + tmp.out[2]);
	nflat = (size_t)flat_entries(&tmp);
	p = calloc(1, sizeof *p + sizeof(int64_t) * ntab + sizeof(double) * (size_t)tmp.out[2] +
			      (nflat ? sizeof(int32_t) * FLAT_TAPS : 0) + sizeof(uint16_t) * nflat);
	if (!p)
		return -ENOMEM;
	*p = tmp;
	pool_tables(p, (int64_t *)(p + 1));
	p->hcnt = (double *)((int64_t *)(p + 1) + ntab);
	for (int64_t ow = 0; ow < p->out[2]; ow++)
		p->hcnt[ow] = (double)(p->count_include_pad ? p->cnt_pad[2][ow] : p->hi[2][ow] - p->lo[2][ow]);
	ntab += (size_t)p->out[2];
	if (nflat) {
		int32_t *off = (int32_t *)((int64_t *)(p + 1) + ntab);
		flat_tables(p, off, (uint16_t *)(off + FLAT_TAPS));
	}
	n->priv = p;
	hpks_set_out(g, n, 0, x->dtype, &os);
	hpks_set_out(g, n, 1, HP_I64, &os);
	return 0;
}

/* NaN-skipping max that compiles to maxps: m = v > m ? v : m from -inf. */
static inline float vmax(float v, float m)
{
	return v > m ? v : m;
}

/* MaxPool with kernel = stride = 2 on every pooled dim (1 on unit dims). */
static void max2_plane(const struct pool_p *p, const float *x, float *y)
{
	int64_t H = p->in[1], W = p->in[2], OW = p->out[2];
	int kd = (int)p->k[0], kh = (int)p->k[1], kw = (int)p->k[2];

	for (int64_t od = 0; od < p->out[0]; od++)
		for (int64_t oh = 0; oh < p->out[1]; oh++) {
			const float *r[4];
			int nr = 0;
			float *yo = y + (od * p->out[1] + oh) * OW;
			for (int a = 0; a < kd; a++)
				for (int b = 0; b < kh; b++)
					r[nr++] = x + ((od * kd + a) * H + oh * kh + b) * W;
			if (nr == 4 && kw == 2) {
				const float *r0 = r[0], *r1 = r[1], *r2 = r[2], *r3 = r[3];
				for (int64_t ow = 0; ow < OW; ow++) {
					float m = vmax(r0[2 * ow], -INFINITY);
					m = vmax(r0[2 * ow + 1], m);
					m = vmax(r1[2 * ow], m);
					m = vmax(r1[2 * ow + 1], m);
					m = vmax(r2[2 * ow], m);
					m = vmax(r2[2 * ow + 1], m);
					m = vmax(r3[2 * ow], m);
					yo[ow] = vmax(r3[2 * ow + 1], m);
				}
				continue;
			}
			int64_t ow = nr == 2 && kw == 2 ? hp_pool_max2_rows(r[0], r[1], yo, OW) : 0;
			for (; ow < OW; ow++) {
				float m = -INFINITY;
				for (int q = 0; q < nr; q++)
					for (int c = 0; c < kw; c++)
						m = vmax(r[q][ow * kw + c], m);
				yo[ow] = m;
			}
		}
}

/* Spatial index of input position (d, h, w) as the Indices output wants. */
static int64_t spatial_index(const struct pool_p *p, int64_t d, int64_t h, int64_t w)
{
	if (p->storage_order)
		return d + h * p->in[0] + w * p->in[0] * p->in[1];
	return (d * p->in[1] + h) * p->in[2] + w;
}

#define WINDOW_LOOP(BODY)                                                                        \
	for (int64_t a = p->lo[0][od]; a < p->hi[0][od]; a++) {                                  \
		int64_t d = sd + a * p->dl[0];                                                   \
		for (int64_t b = p->lo[1][oh]; b < p->hi[1][oh]; b++) {                          \
			int64_t h = sh + b * p->dl[1];                                           \
			const float *row = x + (d * p->in[1] + h) * p->in[2];                    \
			for (int64_t c = p->lo[2][ow]; c < p->hi[2][ow]; c++) {                  \
				int64_t w = sw + c * p->dl[2];                                   \
				float v = row[w];                                                \
				BODY;                                                            \
			}                                                                        \
		}                                                                                \
	}

static float window(const struct pool_p *p, const float *x, int64_t od, int64_t oh, int64_t ow, int64_t *arg)
{
	int64_t sd = od * p->s[0] - p->pb[0], sh = oh * p->s[1] - p->pb[1], sw = ow * p->s[2] - p->pb[2];
	int64_t cnt;
	double acc = 0;
	float m = -INFINITY;

	if (p->kind == P_MAX && !arg) {
		WINDOW_LOOP(m = vmax(v, m));
		return m;
	}
	if (p->kind == P_MAX) {
		int64_t best = -1;
		/* first maximum wins; NaN is skipped */
		WINDOW_LOOP(if (best < 0 || v > m) {
			m = v != v ? -INFINITY : v;
			best = spatial_index(p, d, h, w);
		});
		*arg = best;
		return m;
	}
	if (p->kind == P_LP) {
		if (p->lp == 2)
			WINDOW_LOOP(acc += (double)v * v)
		else
			WINDOW_LOOP(acc += pow(fabs(v), p->lp))
		return (float)(p->lp == 2 ? sqrt(acc) : pow(acc, 1.0 / p->lp));
	}
	WINDOW_LOOP(acc += v);
	if (p->count_include_pad)
		cnt = p->cnt_pad[0][od] * p->cnt_pad[1][oh] * p->cnt_pad[2][ow];
	else
		cnt = (p->hi[0][od] - p->lo[0][od]) * (p->hi[1][oh] - p->lo[1][oh]) * (p->hi[2][ow] - p->lo[2][ow]);
	return cnt ? (float)(acc / (double)cnt) : 0.f;
}

/* ---- row path ----------------------------------------------------------
 * Per output row (od, oh), the window's valid input rows are reduced column
 * by column into a row buffer (contiguous, vectorizable), then each output
 * takes its taps along w from the buffer.  Max is exact in any order; the
 * average sums rows then taps in double, a fixed order. */

typedef void (*vrow_fn)(void *buf, const void *row, int64_t n, int first);
typedef void (*hrow_fn)(const struct pool_p *p, const void *buf, int64_t wa, int64_t o0, int64_t o1, void *y,
			int64_t od, int64_t oh);

/* Max from INIT (-inf: NaN is skipped, an all-padding window gives INIT). */
#define DEF_MAXROW(S, T, INIT)                                                                        \
	static void vmax_##S(void *vb, const void *vr, int64_t n, int first)                           \
	{                                                                                              \
		T *b = vb;                                                                             \
		const T *r = vr;                                                                       \
		if (first) {                                                                           \
			for (int64_t i = 0; i < n; i++)                                                \
				b[i] = r[i] > (T)(INIT) ? r[i] : (T)(INIT);                            \
			return;                                                                        \
		}                                                                                      \
		for (int64_t i = 0; i < n; i++)                                                        \
			b[i] = r[i] > b[i] ? r[i] : b[i];                                              \
	}                                                                                              \
	static void hmax_##S(const struct pool_p *p, const void *vb, int64_t wa, int64_t o0, int64_t o1, \
			     void *vy, int64_t od, int64_t oh)                                         \
	{                                                                                              \
		const T *b = vb;                                                                       \
		T *y = vy;                                                                             \
		int none = p->lo[0][od] == p->hi[0][od] || p->lo[1][oh] == p->hi[1][oh];               \
		for (int64_t ow = o0; ow < o1; ow++) {                                                 \
			int64_t st = ow * p->s[2] - p->pb[2] - wa;                                     \
			T m = (T)(INIT);                                                               \
			for (int64_t c = none ? 0 : p->lo[2][ow]; c < (none ? 0 : p->hi[2][ow]); c++) \
				m = b[st + c * p->dl[2]] > m ? b[st + c * p->dl[2]] : m;               \
			y[ow] = m;                                                                     \
		}                                                                                      \
	}

DEF_MAXROW(f32, float, -INFINITY)
DEF_MAXROW(f64, double, -INFINITY)
DEF_MAXROW(i8, int8_t, INT8_MIN)
DEF_MAXROW(u8, uint8_t, 0)

static void vsum_f32(void *vb, const void *vr, int64_t n, int first)
{
	double *b = vb;
	const float *r = vr;

	if (first) {
		for (int64_t i = 0; i < n; i++)
			b[i] = r[i];
		return;
	}
	for (int64_t i = 0; i < n; i++)
		b[i] += r[i];
}

static void havg_f32(const struct pool_p *p, const void *vb, int64_t wa, int64_t o0, int64_t o1, void *vy,
		     int64_t od, int64_t oh)
{
	const double *b = vb;
	float *y = vy;
	int64_t nrows = (p->hi[0][od] - p->lo[0][od]) * (p->hi[1][oh] - p->lo[1][oh]);
	int64_t cpad = p->cnt_pad[0][od] * p->cnt_pad[1][oh];

	for (int64_t ow = o0; ow < o1; ow++) {
		int64_t st = ow * p->s[2] - p->pb[2] - wa;
		int64_t cnt = p->count_include_pad ? cpad * p->cnt_pad[2][ow] : nrows * (p->hi[2][ow] - p->lo[2][ow]);
		double acc = 0;
		for (int64_t c = nrows ? p->lo[2][ow] : 0; c < (nrows ? p->hi[2][ow] : 0); c++)
			acc += b[st + c * p->dl[2]];
		y[ow] = cnt ? (float)(acc / (double)cnt) : 0.f;
	}
}

struct rowfns {
	vrow_fn v;
	hrow_fn h;
};

static struct rowfns rowfns_of(const struct pool_p *p)
{
	if (p->kind == P_AVG)
		return (struct rowfns){ vsum_f32, havg_f32 };
	switch (p->t) {
	case HP_F64: return (struct rowfns){ vmax_f64, hmax_f64 };
	case HP_I8: return (struct rowfns){ vmax_i8, hmax_i8 };
	case HP_U8: return (struct rowfns){ vmax_u8, hmax_u8 };
	default: return (struct rowfns){ vmax_f32, hmax_f32 };
	}
}

static void rows_plane(const struct pool_p *p, const char *x, char *y)
{
	double buf[ROWBUF];
	struct rowfns f = rowfns_of(p);
	size_t z = hp_dtype_size(p->t);
	int64_t W = p->in[2], OW = p->out[2], ext = (p->k[2] - 1) * p->dl[2] + 1;

	for (int64_t od = 0; od < p->out[0]; od++)
		for (int64_t oh = 0; oh < p->out[1]; oh++) {
			char *yr = y + (size_t)((od * p->out[1] + oh) * OW) * z;
			int64_t sd = od * p->s[0] - p->pb[0], sh = oh * p->s[1] - p->pb[1];
			for (int64_t o0 = 0; o0 < OW; o0 += p->wblock) {
				int64_t o1 = o0 + p->wblock < OW ? o0 + p->wblock : OW;
				int64_t wa = o0 * p->s[2] - p->pb[2], wb = (o1 - 1) * p->s[2] - p->pb[2] + ext;
				int first = 1;
				wa = wa < 0 ? 0 : wa;
				wb = wb > W ? W : wb;
				for (int64_t a = p->lo[0][od]; a < p->hi[0][od] && wb > wa; a++)
					for (int64_t b = p->lo[1][oh]; b < p->hi[1][oh]; b++, first = 0) {
						int64_t d = sd + a * p->dl[0], h = sh + b * p->dl[1];
						f.v(buf, x + (size_t)((d * p->in[1] + h) * W + wa) * z, wb - wa, first);
					}
				f.h(p, buf, wa, o0, o1, yr, od, oh);
			}
		}
}

/* Room past ROWBUF for the whole vectors the SIMD passes load beyond a
 * block's last tap. */
#define ROWPAD 32
/* Output rows shorter than this stay on the scalar taps: below half a
 * vector the SIMD passes' calls cost more than they save (SqueezeNet's
 * 11x11 planes, 5 outputs a row, ran 25% slower). */
#define ROWS_MIN_OW 8

static int rows_maxs(const struct pool_p *p)
{
	return p->kind == P_MAX && p->t == HP_F32 && (p->s[2] == 1 || p->s[2] == 2) && p->out[2] >= ROWS_MIN_OW &&
	       hp_pool_isa();
}

/* Float32 MaxPool with w stride 1 or 2 (rows_maxs): the row buffer holds
 * the window rows' column maxima over the block's whole window extent and
 * -inf where that lies in the padding, so every output takes all k taps
 * by SIMD (a -inf tap selects as a skipped one does: -inf > m is never
 * true) and no edge needs scalar code. */
static void rows_plane_maxs(const struct pool_p *p, const float *x, float *y)
{
	double bufd[ROWBUF + ROWPAD];
	float *buf = (float *)bufd;
	int64_t W = p->in[2], OW = p->out[2], s = p->s[2], dl = p->dl[2], ext = (p->k[2] - 1) * dl + 1;

	for (int64_t od = 0; od < p->out[0]; od++)
		for (int64_t oh = 0; oh < p->out[1]; oh++) {
			float *yr = y + (od * p->out[1] + oh) * OW;
			int64_t sd = od * p->s[0] - p->pb[0], sh = oh * p->s[1] - p->pb[1];
			if (p->lo[0][od] == p->hi[0][od] || p->lo[1][oh] == p->hi[1][oh]) {
				for (int64_t ow = 0; ow < OW; ow++)
					yr[ow] = -INFINITY;
				continue;
			}
			for (int64_t o0 = 0; o0 < OW; o0 += p->wblock) {
				int64_t o1 = o0 + p->wblock < OW ? o0 + p->wblock : OW, j;
				int64_t ra = o0 * s - p->pb[2], rb = (o1 - 1) * s - p->pb[2] + ext;
				int64_t wa = ra < 0 ? 0 : ra, wb = rb > W ? W : rb;
				int first = 1;
				wb = wb > wa ? wb : wa;
				for (int64_t i = ra; i < wa; i++)
					buf[i - ra] = -INFINITY;
				for (int64_t i = wb > ra ? wb : ra; i < rb; i++)
					buf[i - ra] = -INFINITY;
				for (int64_t a = p->lo[0][od]; a < p->hi[0][od] && wb > wa; a++)
					for (int64_t b = p->lo[1][oh]; b < p->hi[1][oh]; b++, first = 0) {
						const float *r = x + ((sd + a * p->dl[0]) * p->in[1] + sh + b * p->dl[1]) * W + wa;
						int64_t i = hp_pool_vmax_f32(buf + wa - ra, r, wb - wa, first);
						vmax_f32(buf + wa - ra + i, r + i, wb - wa - i, first);
					}
				j = hp_pool_hmax_f32(buf, yr + o0, o1 - o0, (int)s, (int)p->k[2], (int)dl);
				for (; j < o1 - o0; j++) {
					float m = -INFINITY;
					for (int64_t c = 0; c < p->k[2]; c++)
						m = vmax(buf[j * s + c * dl], m);
					yr[o0 + j] = m;
				}
			}
		}
}

struct pool_job {
	const struct pool_p *p;
	const void *x;
	void *y;
	int64_t *idx;
};

static void pool_planes(void *arg, int64_t b, int64_t e, int tid)
{
	const struct pool_job *j = arg;
	const struct pool_p *p = j->p;
	int64_t ip = p->in[0] * p->in[1] * p->in[2], op = p->out[0] * p->out[1] * p->out[2];
	size_t z = hp_dtype_size(p->t);

	struct hp_pool_plane pg = { .lo = { p->lo[0], p->lo[1] }, .hi = { p->hi[0], p->hi[1] },
				    .include_pad = p->count_include_pad, .cpad = { p->cnt_pad[0], p->cnt_pad[1] },
				    .hcnt = p->hcnt };
	int planes_simd = p->rows && !p->fast2 && p->t == HP_F32 && p->kind != P_LP;

	(void)tid;
	if (p->foff && hp_pool_fmax_f32(j->x, j->y, b * ip, e * ip, p->foff, p->fmask, p->ftaps, p->fper))
		return;
	for (int d = 0; d < 3; d++) {
		pg.in[d] = p->in[d], pg.out[d] = p->out[d], pg.k[d] = p->k[d];
		pg.s[d] = p->s[d], pg.dl[d] = p->dl[d], pg.pb[d] = p->pb[d];
	}
	for (int64_t pl = b; pl < e; pl++) {
		const float *x;
		float *y;
		if (planes_simd && (p->kind == P_MAX ? hp_pool_plane_max_f32 : hp_pool_plane_avg_f32)(
					   &pg, (const float *)j->x + pl * ip, (float *)j->y + pl * op))
			continue;
		if (p->rows && !p->fast2 && rows_maxs(p)) {
			rows_plane_maxs(p, (const float *)j->x + pl * ip, (float *)j->y + pl * op);
			continue;
		}
		if (p->rows && !p->fast2) {
			rows_plane(p, (const char *)j->x + (size_t)(pl * ip) * z, (char *)j->y + (size_t)(pl * op) * z);
			continue;
		}
		x = (const float *)j->x + pl * ip;
		y = (float *)j->y + pl * op;
		if (p->fast2) {
			max2_plane(p, x, y);
			continue;
		}
		for (int64_t od = 0, o = 0; od < p->out[0]; od++)
			for (int64_t oh = 0; oh < p->out[1]; oh++)
				for (int64_t ow = 0; ow < p->out[2]; ow++, o++) {
					int64_t arg = 0;
					y[o] = window(p, x, od, oh, ow, j->idx ? &arg : NULL);
					if (j->idx)
						j->idx[pl * op + o] = pl * ip + arg;
				}
	}
}

/* Window taps (outputs x kernel volume) below which a pooling node runs
 * on the caller alone: about 0.1 ms (the U-Net's 2x2 MaxPool of 2x16x128
 * x128, 524K taps, took 47 us on one thread), where a worker's wake-up
 * without polling costs the caller 10 us and more, and far more when the
 * guest puts the worker on the caller's vCPU. */
#define POOL_PAR_MIN_TAPS (1 << 20)
/* From this many taps while the pool's workers poll for jobs
 * (hp_pool_polling: a hand-off of about 0.5 us): GoogLeNet's and
 * SqueezeNet's MaxPools at batch 1 (35-190K taps, 3-45 us) had run on the
 * caller alone at 2 threads, 10-14% of those inferences. */
#define POOL_PAR_MIN_POLLING_TAPS (1 << 15)
/* Outputs per stolen unit of planes. */
#define POOL_UNIT 4096

/* Planes are independent and each is computed whole by one call, so the
 * units (runs of planes of about POOL_UNIT outputs, by the shape alone)
 * are stolen (hp_parallel_steal): a worker woken late leaves its units to
 * the caller instead of holding it up for its whole share. */
static int pool_run(const struct hp_node *n, const struct hp_kargs *a)
{
	const struct pool_p *p = n->priv;
	struct pool_job j = { p, a->in[0].data, a->out[0].data, a->nout > 1 ? a->out[1].data : NULL };
	int64_t op = p->out[0] * p->out[1] * p->out[2], taps = p->planes * op * p->k[0] * p->k[1] * p->k[2];

	if ((taps < POOL_PAR_MIN_TAPS && !(taps >= POOL_PAR_MIN_POLLING_TAPS && hp_pool_polling(a->pool))) ||
	    p->planes < 2) {
		pool_planes(&j, 0, p->planes, 0);
		return 0;
	}
	hp_parallel_steal(a->pool, p->planes, 1 + POOL_UNIT / (op + 1), hp_pool_size(a->pool), pool_planes, &j);
	return 0;
}

static double pool_flops(const struct hp_graph *g, const struct hp_node *n)
{
	const struct pool_p *p = n->priv;

	(void)g;
	return p ? (double)p->planes * (double)(p->out[0] * p->out[1] * p->out[2]) *
			   (double)(p->k[0] * p->k[1] * p->k[2])
		 : 0;
}

/* ---- Global pools ------------------------------------------------------ */

static int global_prepare(struct hp_graph *g, struct hp_node *n)
{
	const struct hp_value *x = hpks_in(g, n, 0);
	struct hp_shape s = x->shape;

	if (x->dtype != HP_F32)
		return hp_node_error(g, n, HP_EUNSUPPORTED, "input type %s (float32 only)", hp_dtype_name(x->dtype));
	if (s.rank < 2)
		return hp_node_error(g, n, HP_ESHAPE, "input rank %d < 2", s.rank);
	for (int d = 2; d < s.rank; d++)
		s.dims[d] = 1;
	hpks_set_out(g, n, 0, x->dtype, &s);
	return 0;
}

struct global_job {
	const float *x;
	float *y;
	int64_t plane;
	int kind, p;
};

static void global_planes(void *arg, int64_t b, int64_t e, int tid)
{
	const struct global_job *j = arg;

	(void)tid;
	if (j->kind == P_AVG)
		b += hp_pool_gavg_f32(j->x + b * j->plane, j->y + b, e - b, j->plane);
	for (int64_t pl = b; pl < e; pl++) {
		const float *x = j->x + pl * j->plane;
		double acc = 0;
		float m = -INFINITY;
		for (int64_t i = 0; i < j->plane; i++) {
			if (j->kind == P_MAX)
				m = vmax(x[i], m);
			else if (j->kind == P_AVG)
				acc += x[i];
			else
				acc += j->p == 2 ? (double)x[i] * x[i] : pow(fabs(x[i]), j->p);
		}
		j->y[pl] = j->kind == P_MAX ? m
			 : j->kind == P_AVG ? (float)(acc / (double)j->plane)
					    : (float)(j->p == 2 ? sqrt(acc) : pow(acc, 1.0 / j->p));
	}
}

static int global_run(const struct hp_node *n, const struct hp_kargs *a)
{
	const struct hp_shape *s = &a->in[0].shape;
	struct global_job j = { a->in[0].data, a->out[0].data, 1, pool_kind_of(n), (int)hp_attr_int(n, "p", 2) };

	for (int d = 2; d < s->rank; d++)
		j.plane *= s->dims[d];
	hp_parallel_for(a->pool, s->dims[0] * s->dims[1], 1 + 16384 / (j.plane + 1), global_planes, &j);
	return 0;
}

#define POOL_OP(var, nm, nout)                                                                    \
	static const struct hp_op var = { .domain = "", .name = nm, .min_inputs = 1, .max_inputs = 1, \
					  .min_outputs = 1, .max_outputs = nout, .prepare = pool_prepare, \
					  .run = pool_run, .flops = pool_flops }
#define GLOBAL_OP(var, nm)                                                                        \
	static const struct hp_op var = { .domain = "", .name = nm, .min_inputs = 1, .max_inputs = 1, \
					  .min_outputs = 1, .max_outputs = 1, .prepare = global_prepare,  \
					  .run = global_run }

POOL_OP(op_maxpool, "MaxPool", 2);
POOL_OP(op_avgpool, "AveragePool", 1);
POOL_OP(op_lppool, "LpPool", 1);
GLOBAL_OP(op_gmax, "GlobalMaxPool");
GLOBAL_OP(op_gavg, "GlobalAveragePool");
GLOBAL_OP(op_glp, "GlobalLpPool");

const struct hp_op *const hp_ops_pool[] = {
	&op_maxpool, &op_avgpool, &op_lppool, &op_gmax, &op_gavg, &op_glp, NULL,
};
