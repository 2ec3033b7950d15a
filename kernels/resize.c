/* Resize (opsets 10, 11, 13+) and Upsample (7, 9): nearest, n-linear and
 * cubic interpolation on any axes, as separable per-axis tap tables built at
 * prepare time.  Each output element is sum over tap combinations of the
 * product of per-axis weights times the input element (the ONNX reference's
 * nested 1-D interpolation, written out). */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/ops.h"
#include "kernels/shape_util.h"

enum { M_NEAREST, M_LINEAR, M_CUBIC };
enum { C_HALF, C_PYTORCH, C_ALIGN, C_ASYM, C_CROP, C_TFNN };
enum { N_PREFER_FLOOR, N_PREFER_CEIL, N_FLOOR, N_CEIL, N_SIMPLE };

#define MAX_COMBOS 1024

struct axis_tab {
	int taps;                 /* 1, 2 or 4 */
	int64_t *off;             /* [out * taps] input element offsets */
	double *w;                /* [out * taps] weights (NULL when taps == 1) */
	unsigned char *outside;   /* [out] tf_crop_and_resize extrapolation, or NULL */
};

struct rs_priv {
	int rank, any_outside;
	enum hp_dtype dtype;
	int64_t out[HP_MAX_RANK];
	size_t es;
	float extrap;
	struct axis_tab ax[HP_MAX_RANK];
};

struct rs_cfg {
	int mode, coord, nearest, exclude;
	double a;
	double scale[HP_MAX_RANK], roi[2 * HP_MAX_RANK];
};

static int lookup(const char *s, const char *const *names, int n)
{
	for (int i = 0; i < n; i++)
		if (!strcmp(s, names[i]))
			return i;
	return -1;
}

static int rs_attrs(const struct hp_graph *g, const struct hp_node *n, int legacy, struct rs_cfg *c)
{
	static const char *const modes[] = { "nearest", "linear", "cubic", "bilinear" };
	static const char *const coords[] = { "half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric",
					      "tf_crop_and_resize", "tf_half_pixel_for_nn" };
	static const char *const nms[] = { "round_prefer_floor", "round_prefer_ceil", "floor", "ceil" };
	const char *m = hp_attr_string(n, "mode", "nearest");
	const char *ct = hp_attr_string(n, "coordinate_transformation_mode", legacy ? "asymmetric" : "half_pixel");
	const char *nm = hp_attr_string(n, "nearest_mode", legacy ? "" : "round_prefer_floor");

	c->mode = lookup(m, modes, 4);
	c->mode = c->mode == 3 ? M_LINEAR : c->mode;
	c->coord = lookup(ct, coords, 6);
	c->nearest = legacy && !hp_node_attr(n, "nearest_mode") ? N_SIMPLE : lookup(nm, nms, 4);
	c->a = hp_attr_float(n, "cubic_coeff_a", -0.75f);
	c->exclude = (int)hp_attr_int(n, "exclude_outside", 0);
	if (c->mode < 0 || c->coord < 0 || c->nearest < 0)
		return hp_node_error(g, n, HP_EUNSUPPORTED, "mode '%s', coordinate_transformation_mode '%s', nearest_mode '%s': not supported",
				     m, ct, nm);
	if (legacy && c->mode == M_CUBIC)
		return hp_node_error(g, n, HP_EUNSUPPORTED, "cubic mode needs opset 11");
	return 0;
}

/* Input coordinate of output index x along one axis; *outside for crop. */
static double rs_coord(const struct rs_cfg *c, int d, double x, int64_t in, double out_len, int *outside)
{
	double s = c->scale[d], r0 = c->roi[d], r1 = c->roi[d + HP_MAX_RANK], xo;

	*outside = 0;
	switch (c->coord) {
	case C_HALF: return (x + 0.5) / s - 0.5;
	case C_PYTORCH: return out_len > 1 ? (x + 0.5) / s - 0.5 : 0;
	case C_ALIGN: return out_len == 1 ? 0 : x * (double)(in - 1) / (out_len - 1);
	case C_ASYM: return x / s;
	case C_TFNN: return (x + 0.5) / s;
	default:
		xo = out_len == 1 ? (r1 - r0) * (double)(in - 1) / 2 : x * (r1 - r0) * (double)(in - 1) / (out_len - 1);
		xo += r0 * (double)(in - 1);
		*outside = xo < 0 || xo > (double)(in - 1);
		return xo;
	}
}

static int64_t nearest_index(const struct rs_cfg *c, int d, double xo)
{
	double fl = floor(xo), r = xo - fl;

	if (r == 0)
		return (int64_t)fl;
	switch (c->nearest) {
	case N_PREFER_FLOOR: return (int64_t)fl + (r > 0.5);
	case N_PREFER_CEIL: return (int64_t)fl + (r >= 0.5);
	case N_FLOOR: return (int64_t)fl;
	case N_CEIL: return (int64_t)fl + 1;
	default: return c->scale[d] < 1 ? (int64_t)ceil(xo) : (int64_t)fl; /* opset < 11 */
	}
}

static void cubic_coeffs(double r, double A, double *w)
{
	double t0 = r + 1, t3 = 2 - r, u = 1 - r;

	w[0] = ((A * t0 - 5 * A) * t0 + 8 * A) * t0 - 4 * A;
	w[1] = ((A + 2) * r - (A + 3)) * r * r + 1;
	w[2] = ((A + 2) * u - (A + 3)) * u * u + 1;
	w[3] = ((A * t3 - 5 * A) * t3 + 8 * A) * t3 - 4 * A;
}

static int64_t clampi(int64_t i, int64_t n)
{
	return i < 0 ? 0 : i >= n ? n - 1 : i;
}

/* Taps of output x along axis d: indices (unclamped by the caller's
 * exclusion) and weights. */
static int rs_taps(const struct rs_cfg *c, int d, int64_t x, int64_t in, double out_len, int64_t *idx,
		   double *w, int *outside)
{
	double xo = rs_coord(c, d, (double)x, in, out_len, outside), fl = floor(xo), r = xo - fl;
	int t = c->mode == M_NEAREST ? 1 : c->mode == M_LINEAR ? 2 : 4;

	if (c->mode == M_NEAREST) {
		idx[0] = clampi(nearest_index(c, d, xo), in);
		w[0] = 1;
		return 1;
	}
	if (c->mode == M_LINEAR) {
		idx[0] = (int64_t)fl;
		idx[1] = (int64_t)fl + 1;
		w[0] = 1 - r;
		w[1] = r;
	} else {
		double sum = 0;
		cubic_coeffs(r, c->a, w);
		for (int k = 0; k < 4; k++) {
			idx[k] = (int64_t)fl - 1 + k;
			if (c->exclude && (idx[k] < 0 || idx[k] >= in))
				w[k] = 0;
			sum += w[k];
		}
		for (int k = 0; c->exclude && k < 4; k++)
			w[k] /= sum;
	}
	for (int k = 0; k < t; k++)
		idx[k] = clampi(idx[k], in);
	return t;
}

/* Build the table of axis d; collapse to one tap when every output picks a
 * single input element with weight 1 (nearest, or unscaled axes). */
static void rs_axis(const struct rs_cfg *c, int d, int64_t in, int64_t out, double out_len, int64_t stride,
		    struct axis_tab *a, int *any_outside)
{
	int single = 1;

	for (int64_t x = 0; x < out; x++) {
		int64_t idx[4];
		double w[4];
		int outside, nz = 0, t = rs_taps(c, d, x, in, out_len, idx, w, &outside);
		a->taps = t;
		for (int k = 0; k < t; k++) {
			a->off[x * 4 + k] = idx[k] * stride;
			a->w[x * 4 + k] = w[k];
			nz += w[k] != 0;
		}
		single &= nz == 1 && (w[0] == 1 || (t > 1 && w[1] == 1) || (t > 2 && (w[2] == 1 || w[3] == 1)));
		a->outside[x] = (unsigned char)outside;
		*any_outside |= outside;
	}
	if (single && a->taps > 1) {
		for (int64_t x = 0; x < out; x++)
			for (int k = 0; k < a->taps; k++)
				if (a->w[x * 4 + k] == 1) {
					a->off[x * 4] = a->off[x * 4 + k];
					a->w[x * 4] = 1;
					break;
				}
		a->taps = 1;
	}
}

static int rs_inputs(struct hp_graph *g, struct hp_node *n, const struct hp_value *x, int legacy,
		     struct rs_cfg *c, struct hp_shape *os)
{
	int is, isz, ir, cnt = 0, rank = x->shape.rank, rc, f64 = 0;
	double v[2 * HP_MAX_RANK];
	int64_t sz[HP_MAX_RANK];
	const struct hp_value *sv, *zv;

	is = legacy ? 1 : 2;
	isz = legacy ? -1 : 3;
	ir = legacy ? -1 : 1;
	for (int d = 0; d < rank; d++) {
		c->roi[d] = 0;
		c->roi[d + HP_MAX_RANK] = 1;
	}
	if (ir >= 0 && c->coord == C_CROP && hpks_in(g, n, ir) && hp_shape_numel(&hpks_in(g, n, ir)->shape) > 0) {
		if ((rc = hpks_const_floats(g, n, ir, "roi", v, 2 * HP_MAX_RANK, &cnt)) < 0)
			return rc;
		if (cnt != 2 * rank)
			return hp_node_error(g, n, HP_ESHAPE, "roi has %d values, expected %d", cnt, 2 * rank);
		for (int d = 0; d < rank; d++) {
			c->roi[d] = v[d];
			c->roi[d + HP_MAX_RANK] = v[d + rank];
		}
	}
	sv = hpks_in(g, n, is);
	zv = isz >= 0 ? hpks_in(g, n, isz) : NULL;
	if (zv && hp_shape_numel(&zv->shape) > 0) {
		if (sv && hp_shape_numel(&sv->shape) > 0)
			return hp_node_error(g, n, HP_EMODEL, "both scales and sizes are given");
		if ((rc = hpks_const_ints(g, n, isz, "sizes", sz, HP_MAX_RANK, &cnt)) < 0)
			return rc;
		if (cnt != rank)
			return hp_node_error(g, n, HP_ESHAPE, "sizes has %d values for rank %d", cnt, rank);
		for (int d = 0; d < rank; d++) {
			if (sz[d] < 0)
				return hp_node_error(g, n, HP_ESHAPE, "sizes[%d] = %lld", d, (long long)sz[d]);
			os->dims[d] = sz[d];
			c->scale[d] = x->shape.dims[d] ? (double)sz[d] / (double)x->shape.dims[d] : 1;
		}
		return 0;
	}
	if (sv && hp_shape_numel(&sv->shape) > 0) {
		if ((rc = hpks_const_floats(g, n, is, "scales", v, HP_MAX_RANK, &cnt)) < 0)
			return rc;
		f64 = sv->dtype == HP_F64;
	} else {
		const struct hp_attr *a = hp_node_attr(n, "scales");
		if (!a || a->type != HP_ATTR_FLOATS)
			return hp_node_error(g, n, HP_EMODEL, "needs scales or sizes");
		cnt = a->n < HP_MAX_RANK ? a->n : HP_MAX_RANK;
		for (int d = 0; d < cnt; d++)
			v[d] = a->floats[d];
	}
	if (cnt != rank)
		return hp_node_error(g, n, HP_ESHAPE, "scales has %d values for rank %d", cnt, rank);
	for (int d = 0; d < rank; d++) {
		if (!(v[d] > 0))
			return hp_node_error(g, n, HP_ESHAPE, "scales[%d] = %g must be positive", d, v[d]);
		c->scale[d] = v[d];
		/* the product in the scales' precision, as ONNX Runtime computes it:
		 * exporters write float32 scales = size / dim and rely on
		 * dim * scale rounding back to size (3 * (7/3.f) is 7, not 6.99..) */
		os->dims[d] = f64 ? (int64_t)floor((double)x->shape.dims[d] * v[d])
				  : (int64_t)floorf((float)x->shape.dims[d] * (float)v[d]);
	}
	return 0;
}

static int rs_prepare(struct hp_graph *g, struct hp_node *n)
{
	const struct hp_value *x = hpks_in(g, n, 0);
	/* The input layout tells the form: (X, scales) or Upsample is opset <= 10;
	 * (X, roi, scales, sizes) is 11+, also what the importer rewrites
	 * Upsample and Resize-10 into, whatever the graph's opset. */
	int legacy = !strcmp(n->op_type, "Upsample") || n->ninputs <= 2, rc, rank = x->shape.rank;
	struct rs_cfg c;
	struct hp_shape os = x->shape;
	struct rs_priv *p;
	int64_t st[HP_MAX_RANK], total = 0;
	char *mem;

	if ((rc = rs_attrs(g, n, legacy, &c)) < 0 || (rc = rs_inputs(g, n, x, legacy, &c, &os)) < 0)
		return rc;
	if (c.mode != M_NEAREST && x->dtype != HP_F32)
		return hp_node_error(g, n, HP_EUNSUPPORTED, "%s interpolation of %s (float32 only)",
				     c.mode == M_LINEAR ? "linear" : "cubic", hp_dtype_name(x->dtype));
	if (!hp_dtype_size(x->dtype) || x->dtype == HP_STRING)
		return hp_node_error(g, n, HP_EUNSUPPORTED, "type %s", hp_dtype_name(x->dtype));
	for (int d = 0; d < rank; d++)
		total += os.dims[d];
	p = calloc(1, sizeof *p + (size_t)total * (4 * sizeof(int64_t) + 4 * sizeof(double) + 1) + 8);
	if (!p)
		return -ENOMEM;
	p->rank = rank;
	p->es = hp_dtype_size(x->dtype);
	p->dtype = x->dtype;
	p->extrap = hp_attr_float(n, "extrapolation_value", 0.0f);
	memcpy(p->out, os.dims, sizeof p->out);
	hpks_strides(&x->shape, st);
	mem = (char *)(p + 1);
	for (int d = 0; d < rank; d++) {
		p->ax[d].off = (int64_t *)mem;
		p->ax[d].w = (double *)(mem + (size_t)os.dims[d] * 4 * sizeof(int64_t));
		mem += (size_t)os.dims[d] * 4 * (sizeof(int64_t) + sizeof(double));
		p->ax[d].taps = 1;
		if (x->shape.dims[d] == 0 && os.dims[d] > 0) {
			free(p);
			return hp_node_error(g, n, HP_ESHAPE, "cannot resize an empty dim %d to %lld", d,
					     (long long)os.dims[d]);
		}
	}
	for (int d = 0; d < rank; d++) {
		double out_len = c.scale[d] * (double)x->shape.dims[d];
		p->ax[d].outside = (unsigned char *)mem;
		mem += os.dims[d];
		rs_axis(&c, d, x->shape.dims[d], os.dims[d], out_len, st[d], &p->ax[d], &p->any_outside);
	}
	{
		int64_t combos = 1;
		for (int d = 0; d + 1 < rank; d++)
			combos *= p->ax[d].taps;
		if (combos > MAX_COMBOS) {
			free(p);
			return hp_node_error(g, n, HP_EUNSUPPORTED, "%lld interpolation taps per output row (at most %d)",
					     (long long)combos, MAX_COMBOS);
		}
	}
	n->priv = p;
	hpks_set_out(g, n, 0, x->dtype, &os);
	return 0;
}

struct rs_job {
	const struct rs_priv *p;
	const char *x;
	char *y;
};

static void put_elem(char *dst, const char *src, size_t es)
{
	switch (es) {
	case 1: *dst = *src; break;
	case 2: memcpy(dst, src, 2); break;
	case 4: memcpy(dst, src, 4); break;
	case 8: memcpy(dst, src, 8); break;
	default: memcpy(dst, src, es); break;
	}
}

/* Combine the outer axes' taps of one output row into (offset, weight) pairs. */
static int rs_combos(const struct rs_priv *p, const int64_t *idx, int64_t *coff, double *cw, int *outside)
{
	int nc = 1;

	coff[0] = 0;
	cw[0] = 1;
	*outside = 0;
	for (int d = 0; d + 1 < p->rank; d++) {
		const struct axis_tab *a = &p->ax[d];
		int64_t o = idx[d] * 4;
		*outside |= a->outside[idx[d]];
		if (a->taps == 1) {
			for (int c = 0; c < nc; c++)
				coff[c] += a->off[o];
			continue;
		}
		for (int c = nc - 1; c >= 0; c--) { /* expand in place from the end */
			int64_t b = coff[c];
			double w = cw[c];
			for (int k = a->taps - 1; k >= 0; k--) {
				coff[c * a->taps + k] = b + a->off[o + k];
				cw[c * a->taps + k] = w * a->w[o + k];
			}
		}
		nc *= a->taps;
	}
	return nc;
}

static void rs_row(const struct rs_priv *p, const char *x, char *y, const int64_t *idx)
{
	const struct axis_tab *L = &p->ax[p->rank - 1];
	int64_t coff[MAX_COMBOS], ow, OW = p->out[p->rank - 1];
	double cw[MAX_COMBOS];
	int outside, nc = rs_combos(p, idx, coff, cw, &outside), T = L->taps;
	const float *xf = (const float *)x;
	float *yf = (float *)y;

	if (outside) {
		for (ow = 0; ow < OW; ow++)
			hpks_put_f(y, p->dtype, ow, p->extrap);
		return;
	}
	if (nc == 1 && T == 1 && p->es == 4 && !p->any_outside) {
		for (ow = 0; ow < OW; ow++)
			yf[ow] = xf[coff[0] + L->off[ow * 4]];
		return;
	}
	if (nc == 1 && T == 1) { /* nearest: a gather, any dtype */
		for (ow = 0; ow < OW; ow++)
			if (L->outside[ow])
				hpks_put_f(y, p->dtype, ow, p->extrap);
			else
				put_elem(y + ow * p->es, x + (coff[0] + L->off[ow * 4]) * (int64_t)p->es, p->es);
		return;
	}
	if (T == 2 && !p->any_outside) { /* n-linear: the common case, kept tight */
		for (ow = 0; ow < OW; ow++) {
			const float *x0 = xf + L->off[ow * 4], *x1 = xf + L->off[ow * 4 + 1];
			double w0 = L->w[ow * 4], w1 = L->w[ow * 4 + 1], acc = 0;
			for (int c = 0; c < nc; c++)
				acc += cw[c] * (w0 * x0[coff[c]] + w1 * x1[coff[c]]);
			yf[ow] = (float)acc;
		}
		return;
	}
	for (ow = 0; ow < OW; ow++) {
		const int64_t *lo = L->off + ow * 4;
		const double *lw = L->w + ow * 4;
		double acc = 0;
		if (L->outside[ow]) {
			yf[ow] = p->extrap;
			continue;
		}
		for (int c = 0; c < nc; c++) {
			double part = 0;
			for (int k = 0; k < T; k++)
				part += lw[k] * xf[coff[c] + lo[k]];
			acc += cw[c] * part;
		}
		yf[ow] = (float)acc;
	}
}

/* Horizontal passes of n-linear rows, kept while consecutive output rows
 * read the same input rows (an upscale by 16 reads each input row for 16
 * output rows): row key's h[ow] = w0 x0 + w1 x1 in double, the value
 * rs_row's n-linear loop computes inside its sum, so each output element is
 * the same expression of the same doubles, rounded once: bitwise rs_row. */
struct rs_hcache {
	int slots;
	int64_t key[2 * 8];
	unsigned char used[2 * 8];
	double *h; /* [slots][OW] */
};

#define RS_HCACHE_COMBOS 8

/* Row key's horizontal pass, from the cache or computed into a slot no
 * combination of the current row has claimed (used). */
static const double *rs_hrow(const struct rs_priv *p, struct rs_hcache *hc, const float *x, int64_t key)
{
	const struct axis_tab *L = &p->ax[p->rank - 1];
	int64_t OW = p->out[p->rank - 1];
	int s, v = -1;
	double *h;

	for (s = 0; s < hc->slots; s++)
		if (hc->key[s] == key) {
			hc->used[s] = 1;
			return hc->h + s * OW;
		}
	for (s = 0; s < hc->slots && v < 0; s++)
		if (!hc->used[s])
			v = s;
	hc->key[v] = key;
	hc->used[v] = 1;
	h = hc->h + v * OW;
	for (int64_t ow = 0; ow < OW; ow++)
		h[ow] = L->w[ow * 4] * x[key + L->off[ow * 4]] + L->w[ow * 4 + 1] * x[key + L->off[ow * 4 + 1]];
	return h;
}

static void rs_row_cached(const struct rs_priv *p, struct rs_hcache *hc, const float *x, float *y, const int64_t *idx)
{
	int64_t coff[MAX_COMBOS], OW = p->out[p->rank - 1];
	double cw[MAX_COMBOS];
	const double *h[RS_HCACHE_COMBOS];
	int outside, nc = rs_combos(p, idx, coff, cw, &outside);

	memset(hc->used, 0, sizeof hc->used);
	for (int c = 0; c < nc; c++)
		h[c] = rs_hrow(p, hc, x, coff[c]);
	if (nc == 2) {
		for (int64_t ow = 0; ow < OW; ow++)
			y[ow] = (float)(0.0 + cw[0] * h[0][ow] + cw[1] * h[1][ow]);
		return;
	}
	for (int64_t ow = 0; ow < OW; ow++) {
		double acc = 0;
		for (int c = 0; c < nc; c++)
			acc += cw[c] * h[c][ow];
		y[ow] = (float)acc;
	}
}

/* The cache for rows [b, e) of p, or slots 0 when rs_row must run: not
 * n-linear on the last axis, extrapolated, or more combinations than it holds. */
static void rs_hcache_init(const struct rs_priv *p, int64_t rows, struct rs_hcache *hc)
{
	int64_t nc = 1, OW = p->out[p->rank - 1];

	hc->slots = 0;
	hc->h = NULL;
	for (int d = 0; d + 1 < p->rank; d++)
		nc *= p->ax[d].taps;
	if (p->ax[p->rank - 1].taps != 2 || p->any_outside || p->es != 4 || nc > RS_HCACHE_COMBOS || rows < 2 ||
	    !(hc->h = malloc((size_t)(2 * nc * OW) * sizeof *hc->h)))
		return;
	hc->slots = (int)(2 * nc);
	for (int s = 0; s < hc->slots; s++)
		hc->key[s] = -1;
}

static void rs_rows(void *arg, int64_t b, int64_t e, int tid)
{
	const struct rs_job *j = arg;
	const struct rs_priv *p = j->p;
	int r = p->rank - 1;
	int64_t idx[HP_MAX_RANK], rem = b, rowb = p->out[r] * (int64_t)p->es;
	struct rs_hcache hc;

	(void)tid;
	for (int d = r - 1; d >= 0; d--) {
		idx[d] = rem % p->out[d];
		rem /= p->out[d];
	}
	rs_hcache_init(p, e - b, &hc);
	for (int64_t row = b; row < e; row++) {
		if (hc.slots)
			rs_row_cached(p, &hc, (const float *)j->x, (float *)(j->y + row * rowb), idx);
		else
			rs_row(p, j->x, j->y + row * rowb, idx);
		for (int d = r - 1; d >= 0; d--) {
			if (++idx[d] < p->out[d])
				break;
			idx[d] = 0;
		}
	}
	free(hc.h);
}

static int rs_run(const struct hp_node *n, const struct hp_kargs *a)
{
	const struct rs_priv *p = n->priv;
	struct rs_job j = { p, a->in[0].data, a->out[0].data };
	int64_t rows = 1;

	if (p->rank == 0) {
		memcpy(j.y, j.x, p->es);
		return 0;
	}
	for (int d = 0; d < p->rank - 1; d++)
		rows *= p->out[d];
	if (rows && p->out[p->rank - 1])
		hp_parallel_for(a->pool, rows, 1 + 8192 / (p->out[p->rank - 1] + 1), rs_rows, &j);
	return 0;
}

static double rs_flops(const struct hp_graph *g, const struct hp_node *n)
{
	const struct rs_priv *p = n->priv;
	double taps = 1, cnt = 1;

	(void)g;
	if (!p)
		return 0;
	for (int d = 0; d < p->rank; d++) {
		taps *= p->ax[d].taps;
		cnt *= (double)p->out[d];
	}
	return taps > 1 ? 2 * taps * cnt : cnt;
}

static const struct hp_op op_resize = {
	.domain = "", .name = "Resize", .min_inputs = 1, .max_inputs = 4, .min_outputs = 1, .max_outputs = 1,
	.prepare = rs_prepare, .run = rs_run, .flops = rs_flops,
};
static const struct hp_op op_upsample = {
	.domain = "", .name = "Upsample", .min_inputs = 1, .max_inputs = 2, .min_outputs = 1, .max_outputs = 1,
	.prepare = rs_prepare, .run = rs_run, .flops = rs_flops,
};

const struct hp_op *const hp_ops_resize[] = { &op_resize, &op_upsample, NULL };
