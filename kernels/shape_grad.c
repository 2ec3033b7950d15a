/* Backward of shape ops, reductions, Gather and Resize (domain ai.hpdlf).
 * Shapes and resolved constants come as attributes (x_shape, axes, ...) so
 * the backward holds no forward activation it does not need. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "hpdlf/error.h"
#include "kernels/eltwise_impl.h"
#include "kernels/shape_util.h"
#include "kernels/train_util.h"

static int store_priv(struct hp_graph *g, struct hp_node *n, const void *p, size_t size)
{
	if (!(n->priv = malloc(size)))
		return hp_node_error(g, n, -ENOMEM, "out of memory");
	memcpy(n->priv, p, size);
	return 0;
}

static int norm_axis(int64_t *axis, int rank)
{
	if (*axis < 0)
		*axis += rank;
	return *axis >= 0 && *axis < rank ? 0 : -1;
}

/* ---- ReshapeGrad(dY) -> dX with shape attr `shape` (Reshape, Flatten,
 * Squeeze, Unsqueeze, Identity): a copy under X's shape. */

static int reshape_prepare(struct hp_graph *g, struct hp_node *n)
{
	const struct hp_value *dy = tk_in(g, n, 0);
	struct hp_shape s;
	int rc = tk_attr_shape(g, n, "shape", &s, 1);

	if (rc < 0)
		return rc;
	if (!dy || hp_shape_numel(&s) != hp_shape_numel(&dy->shape))
		return hp_node_error(g, n, HP_ESHAPE, "shape does not have dY's element count");
	tk_set_out(g, n, 0, dy->dtype, &s);
	return 0;
}

static int reshape_run(const struct hp_node *n, const struct hp_kargs *a)
{
	(void)n;
	if (a->out[0].data != a->in[0].data)
		memcpy(a->out[0].data, a->in[0].data, hp_tensor_bytes(&a->out[0]));
	return 0;
}

const struct hp_op tk_op_reshape_grad = {
	.domain = TK_DOMAIN, .name = "ReshapeGrad", .min_inputs = 1, .max_inputs = 1,
	.min_outputs = 1, .max_outputs = 1, .flags = HP_OP_INPLACE,
	.prepare = reshape_prepare, .run = reshape_run,
};

/* ---- TransposeGrad(dY) -> dX  (attr perm: the forward's) ---------------- */

/* dX = Transpose(dY) under the inverse of the forward's perm, through
 * Transpose's own plan (tiled 2-D and batched 2-D cases, copy tables for
 * the rest) instead of an index computation per element: the weight
 * transposes of exported Linear layers made this 30% of a BERT step. */
static int transpose_prepare(struct hp_graph *g, struct hp_node *n)
{
	const struct hp_value *dy = tk_in(g, n, 0);
	const int64_t *perm;
	int np = hp_attr_ints(n, "perm", &perm), seen[HP_MAX_RANK] = { 0 }, inv[HP_MAX_RANK];
	int rc = tk_need_f32(g, n, 0, 0);

	if (rc < 0)
		return rc;
	if (np != dy->shape.rank)
		return hp_node_error(g, n, HP_EMODEL, "perm must list %d axes", dy->shape.rank);
	for (int k = 0; k < np; k++) {
		if (perm[k] < 0 || perm[k] >= np || seen[perm[k]]++)
			return hp_node_error(g, n, HP_EMODEL, "perm is not a permutation");
		inv[perm[k]] = k;
	}
	return hpks_transpose_plan(g, n, inv);
}

const struct hp_op tk_op_transpose_grad = {
	.domain = TK_DOMAIN, .name = "TransposeGrad", .min_inputs = 1, .max_inputs = 1,
	.min_outputs = 1, .max_outputs = 1, .prepare = transpose_prepare, .run = hpks_transpose_run,
};

/* ---- ConcatGrad(dY) -> dX1?, ..., dXk?  (attrs axis, sizes) --------------
 * ---- SplitGrad(dY1?, ..., dYk?) -> dX  (attrs axis, sizes, x_shape) -----
 * Both move slabs between a whole tensor and its pieces along `axis`. */

struct slabs {
	int64_t outer, inner, total;
	int k;
	int64_t sizes[];
};

static int slabs_init(struct hp_graph *g, struct hp_node *n, const struct hp_shape *whole, int k)
{
	const int64_t *sz;
	int ns = hp_attr_ints(n, "sizes", &sz);
	int64_t axis = hp_attr_int(n, "axis", 0), sum = 0;
	struct slabs *p;

	if (norm_axis(&axis, whole->rank) < 0)
		return hp_node_error(g, n, HP_EMODEL, "axis out of range");
	if (ns != k)
		return hp_node_error(g, n, HP_EMODEL, "sizes must list %d pieces", k);
	if (!(p = calloc(1, sizeof *p + (size_t)k * sizeof p->sizes[0])))
		return hp_node_error(g, n, -ENOMEM, "out of memory");
	p->outer = p->inner = 1;
	for (int i = 0; i < whole->rank; i++)
		if (i != axis)
			*(i < axis ? &p->outer : &p->inner) *= whole->dims[i];
	p->total = whole->dims[axis];
	p->k = k;
	for (int i = 0; i < k; i++)
		sum += p->sizes[i] = sz[i];
	n->priv = p;
	if (sum != p->total)
		return hp_node_error(g, n, HP_ESHAPE, "sizes add up to %lld, the axis has %lld", (long long)sum,
				     (long long)p->total);
	for (int i = 0; i < k; i++) {
		struct hp_shape s = *whole;
		s.dims[axis] = sz[i];
		if (n->noutputs == k)
			tk_set_out(g, n, i, HP_F32, &s);
		else if (tk_in(g, n, i) && !hp_shape_equal(&tk_in(g, n, i)->shape, &s))
			return hp_node_error(g, n, HP_ESHAPE, "piece %d does not have its slab's shape", i);
	}
	return 0;
}

/* Copy piece i to (to_whole) or from the whole tensor; NULL piece: zeros. */
static void slab_move(const struct slabs *p, float *whole, float *piece, int i, int to_whole)
{
	int64_t off = 0, sz = p->sizes[i];

	for (int j = 0; j < i; j++)
		off += p->sizes[j];
	for (int64_t o = 0; o < p->outer; o++) {
		float *w = whole + (o * p->total + off) * p->inner, *q = piece ? piece + o * sz * p->inner : NULL;
		size_t bytes = (size_t)(sz * p->inner) * sizeof(float);
		if (!to_whole)
			memcpy(q, w, bytes);
		else if (q)
			memcpy(w, q, bytes);
		else
			memset(w, 0, bytes);
	}
}

static int concat_prepare(struct hp_graph *g, struct hp_node *n)
{
	int rc = tk_need_f32(g, n, 0, 0);

	return rc < 0 ? rc : slabs_init(g, n, &tk_in(g, n, 0)->shape, n->noutputs);
}

static int concat_run(const struct hp_node *n, const struct hp_kargs *a)
{
	for (int i = 0; i < n->noutputs; i++)
		if (a->out[i].data)
			slab_move(n->priv, a->in[0].data, a->out[i].data, i, 0);
	return 0;
}

const struct hp_op tk_op_concat_grad = {
	.domain = TK_DOMAIN, .name = "ConcatGrad", .min_inputs = 1, .max_inputs = 1,
	.min_outputs = 1, .max_outputs = 1 << 16, .prepare = concat_prepare, .run = concat_run,
};

static int split_prepare(struct hp_graph *g, struct hp_node *n)
{
	struct hp_shape xs;
	int rc = tk_attr_shape(g, n, "x_shape", &xs, 1);

	for (int i = 0; rc == 0 && i < n->ninputs; i++)
		rc = tk_need_f32(g, n, i, 1);
	if (rc < 0 || (rc = slabs_init(g, n, &xs, n->ninputs)) < 0)
		return rc;
	tk_set_out(g, n, 0, HP_F32, &xs);
	return 0;
}

static int split_run(const struct hp_node *n, const struct hp_kargs *a)
{
	for (int i = 0; i < n->ninputs; i++)
		slab_move(n->priv, a->out[0].data, a->in[i].data, i, 1);
	return 0;
}

const struct hp_op tk_op_split_grad = {
	.domain = TK_DOMAIN, .name = "SplitGrad", .min_inputs = 1, .max_inputs = 1 << 16,
	.min_outputs = 1, .max_outputs = 1, .prepare = split_prepare, .run = split_run,
};

/* ---- SliceGrad(dY) -> dX  (attrs x_shape, starts, ends, axes?, steps?: the
 * forward's constant inputs, clamped here as ONNX Slice does) ------------ */

struct slice_priv {
	struct hp_shape xs;
	int64_t start[HP_MAX_RANK], step[HP_MAX_RANK];
};

static int64_t clamp64(int64_t v, int64_t lo, int64_t hi)
{
	return v < lo ? lo : v > hi ? hi : v;
}

static int slice_prepare(struct hp_graph *g, struct hp_node *n)
{
	struct slice_priv p;
	struct hp_shape ys;
	const int64_t *st, *en, *ax = NULL, *sp = NULL;
	int k = hp_attr_ints(n, "starts", &st), ke = hp_attr_ints(n, "ends", &en), rc;
	int ka = hp_attr_ints(n, "axes", &ax), ks = hp_attr_ints(n, "steps", &sp);

	if ((rc = tk_need_f32(g, n, 0, 0)) < 0 || (rc = tk_attr_shape(g, n, "x_shape", &p.xs, 1)) < 0)
		return rc;
	if (k < 0 || ke != k || (ka >= 0 && ka != k) || (ks >= 0 && ks != k))
		return hp_node_error(g, n, HP_EMODEL, "starts/ends/axes/steps lengths differ");
	ys = p.xs;
	for (int i = 0; i < p.xs.rank; i++) {
		p.start[i] = 0;
		p.step[i] = 1;
	}
	for (int i = 0; i < k; i++) {
		int64_t a = ka >= 0 ? ax[i] : i, step = ks >= 0 ? sp[i] : 1, d, s, e;
		if (norm_axis(&a, p.xs.rank) < 0 || step == 0)
			return hp_node_error(g, n, HP_EMODEL, "bad axis or zero step in slice %d", i);
		d = p.xs.dims[a];
		s = st[i] < 0 ? st[i] + d : st[i];
		e = en[i] < 0 ? en[i] + d : en[i];
		s = step > 0 ? clamp64(s, 0, d) : clamp64(s, 0, d - 1);
		e = step > 0 ? clamp64(e, 0, d) : clamp64(e, -1, d - 1);
		p.start[a] = s;
		p.step[a] = step;
		ys.dims[a] = step > 0 ? (e > s ? (e - s + step - 1) / step : 0) : (s > e ? (s - e - step - 1) / -step : 0);
	}
	if (!hp_shape_equal(&ys, &tk_in(g, n, 0)->shape))
		return hp_node_error(g, n, HP_ESHAPE, "dY does not have the slice's shape");
	tk_set_out(g, n, 0, HP_F32, &p.xs);
	return store_priv(g, n, &p, sizeof p);
}

/* Elements of dY that lie contiguous in dX: the inner axes the slice takes
 * whole with step 1, times the next axis's extent if it steps by 1 (a band
 * of rows is one run per plane, not one offset computation per element). */
static int64_t slice_run_len(const struct slice_priv *p, const struct hp_shape *ys)
{
	int64_t run = 1;

	for (int d = ys->rank - 1; d >= 0 && p->step[d] == 1; d--) {
		run *= ys->dims[d];
		if (ys->dims[d] != p->xs.dims[d])
			break;
	}
	return run > 0 ? run : 1;
}

static int slice_run(const struct hp_node *n, const struct hp_kargs *a)
{
	const struct slice_priv *p = n->priv;
	const struct hp_shape *ys = &a->in[0].shape;
	int64_t xst[HP_MAX_RANK], st[HP_MAX_RANK], base = 0, len = hp_shape_numel(ys);
	const float *dy = a->in[0].data;
	float *dx = a->out[0].data;

	tk_strides(&p->xs, xst);
	for (int i = 0; i < p->xs.rank; i++) {
		base += p->start[i] * xst[i];
		st[i] = p->step[i] * xst[i];
	}
	memset(dx, 0, hp_tensor_bytes(&a->out[0]));
	int64_t run = slice_run_len(p, ys);
	for (int64_t i = 0; i < len; i += run)
		memcpy(dx + base + tk_offset(ys, st, i), dy + i, (size_t)run * sizeof *dx);
	return 0;
}

const struct hp_op tk_op_slice_grad = {
	.domain = TK_DOMAIN, .name = "SliceGrad", .min_inputs = 1, .max_inputs = 1,
	.min_outputs = 1, .max_outputs = 1, .prepare = slice_prepare, .run = slice_run,
};

/* ---- GatherGrad(dY, indices) -> dX  (attrs axis, x_shape): rows of dY are
 * added into the rows they were gathered from, in index order. */

static int gather_prepare(struct hp_graph *g, struct hp_node *n)
{
	const struct hp_value *dy = tk_in(g, n, 0), *ix = tk_in(g, n, 1);
	int64_t axis = hp_attr_int(n, "axis", 0);
	struct hp_shape xs, ys;
	int rc;

	if ((rc = tk_need_f32(g, n, 0, 0)) < 0 || (rc = tk_attr_shape(g, n, "x_shape", &xs, 1)) < 0)
		return rc;
	if (!ix || (ix->dtype != HP_I64 && ix->dtype != HP_I32))
		return hp_node_error(g, n, HP_EMODEL, "indices must be int64 or int32");
	if (norm_axis(&axis, xs.rank) < 0 || xs.rank - 1 + ix->shape.rank > HP_MAX_RANK)
		return hp_node_error(g, n, HP_EMODEL, "axis out of range");
	ys.rank = 0;
	for (int i = 0; i < xs.rank; i++) {
		if (i == axis)
			for (int j = 0; j < ix->shape.rank; j++)
				ys.dims[ys.rank++] = ix->shape.dims[j];
		else
			ys.dims[ys.rank++] = xs.dims[i];
	}
	if (!hp_shape_equal(&ys, &dy->shape))
		return hp_node_error(g, n, HP_ESHAPE, "dY does not have Gather's output shape");
	tk_set_out(g, n, 0, HP_F32, &xs);
	return 0;
}

static int gather_run(const struct hp_node *n, const struct hp_kargs *a)
{
	const struct hp_shape *xs = &a->out[0].shape, *is = &a->in[1].shape;
	int64_t axis = hp_attr_int(n, "axis", 0), outer = 1, inner = 1, ni = hp_shape_numel(is), d;
	const float *dy = a->in[0].data;
	float *dx = a->out[0].data;

	norm_axis(&axis, xs->rank);
	for (int i = 0; i < xs->rank; i++)
		if (i != axis)
			*(i < axis ? &outer : &inner) *= xs->dims[i];
	d = xs->dims[axis];
	memset(dx, 0, hp_tensor_bytes(&a->out[0]));
	for (int64_t j = 0; j < ni; j++) {
		int64_t k = a->in[1].dtype == HP_I64 ? ((const int64_t *)a->in[1].data)[j]
						     : ((const int32_t *)a->in[1].data)[j];
		if (k < -d || k >= d)
			return hp_error(HP_EDATA, "node '%s' (GatherGrad): index %lld out of range [%lld, %lld)",
					n->name, (long long)k, (long long)-d, (long long)d);
		k = k < 0 ? k + d : k;
		for (int64_t o = 0; o < outer; o++) {
			const float *src = dy + (o * ni + j) * inner;
			float *dst = dx + (o * d + k) * inner;
			for (int64_t i = 0; i < inner; i++)
				dst[i] += src[i];
		}
	}
	return 0;
}

const struct hp_op tk_op_gather_grad = {
	.domain = TK_DOMAIN, .name = "GatherGrad", .min_inputs = 2, .max_inputs = 2,
	.min_outputs = 1, .max_outputs = 1, .prepare = gather_prepare, .run = gather_run,
};

/* ---- ReduceGrad(dY) -> dX = scale * dY broadcast back  (attrs x_shape,
 * axes: reduced axes, none = all; scale: 1 for ReduceSum, 1/n for Mean) --- */

static int reduce_prepare(struct hp_graph *g, struct hp_node *n)
{
	const struct hp_value *dy = tk_in(g, n, 0);
	struct hp_shape xs, ks;
	const int64_t *ax;
	int na = hp_attr_ints(n, "axes", &ax), rc;

	if ((rc = tk_need_f32(g, n, 0, 0)) < 0 || (rc = tk_attr_shape(g, n, "x_shape", &xs, 1)) < 0)
		return rc;
	ks = xs;
	for (int i = 0; i < (na >= 0 ? na : xs.rank); i++) {
		int64_t a = na >= 0 ? ax[i] : i;
		if (norm_axis(&a, xs.rank) < 0)
			return hp_node_error(g, n, HP_EMODEL, "axis %lld out of range", (long long)a);
		ks.dims[a] = 1;
	}
	if (hp_shape_numel(&ks) != hp_shape_numel(&dy->shape))
		return hp_node_error(g, n, HP_ESHAPE, "dY does not have the reduced shape");
	tk_set_out(g, n, 0, HP_F32, &xs);
	return store_priv(g, n, &ks, sizeof ks);
}

/* dX = dY * scale along one segment of the broadcast walk: dY contiguous
 * (s = 1) or one element spread over the segment (s = 0, a reduced inner
 * axis such as LayerNorm's ReduceMean). */
HPK_SIMD static void reduce_seg(const void *ctx, char *const *p, const int64_t *s, int64_t n)
{
	const float scale = *(const float *)ctx, *dy = (const float *)p[1];
	float *dx = (float *)p[0];

	if (s[1] == 0) {
		float v = dy[0] * scale;
		for (int64_t i = 0; i < n; i++)
			dx[i] = v;
	} else {
		for (int64_t i = 0; i < n; i++)
			dx[i] = dy[i] * scale;
	}
}

/* A broadcast copy: the coalesced walk in parallel ranges instead of an
 * index computed per element; no sums, so the bits are the same for any
 * thread count. */
static int reduce_run(const struct hp_node *n, const struct hp_kargs *a)
{
	float scale = hp_attr_float(n, "scale", 1);
	struct hp_tensor dy = { HP_F32, *(const struct hp_shape *)n->priv, a->in[0].data };
	const struct hp_tensor *in[1] = { &dy };
	const void *data[1] = { dy.data };
	struct hpk_bcast b;

	hpk_bcast_plan(&b, &a->out[0].shape, in, 1, sizeof(float));
	hpk_bcast_run(a->pool, &b, a->out[0].data, data, reduce_seg, &scale);
	return 0;
}

const struct hp_op tk_op_reduce_grad = {
	.domain = TK_DOMAIN, .name = "ReduceGrad", .min_inputs = 1, .max_inputs = 1,
	.min_outputs = 1, .max_outputs = 1, .prepare = reduce_prepare, .run = reduce_run,
};

/* ---- ResizeGrad(dY) -> dX  (attrs x_shape, mode nearest|linear,
 * coordinate_transformation_mode, nearest_mode, scales?) -----------------
 * Resize is separable: output index o of an axis reads at most two input
 * indices with weights; the backward scatters dY with the same weights. */

struct rz_tap {
	int32_t i0, i1;
	float w0, w1;
};

struct rz_priv {
	struct hp_shape xs, ys;
	int64_t off[HP_MAX_RANK];   /* start of each axis' taps in tap[] */
	struct rz_tap tap[];
};

static double rz_coord(const char *ctm, double o, double scale, int64_t in, int64_t out)
{
	if (!strcmp(ctm, "asymmetric"))
		return o / scale;
	if (!strcmp(ctm, "align_corners"))
		return out > 1 ? o * (double)(in - 1) / (double)(out - 1) : 0;
	if (!strcmp(ctm, "pytorch_half_pixel"))
		return out > 1 ? (o + 0.5) / scale - 0.5 : 0;
	return (o + 0.5) / scale - 0.5; /* half_pixel */
}

static int64_t rz_nearest(const char *nm, double x)
{
	if (!strcmp(nm, "floor"))
		return (int64_t)floor(x);
	if (!strcmp(nm, "ceil"))
		return (int64_t)ceil(x);
	if (!strcmp(nm, "round_prefer_ceil"))
		return (int64_t)floor(x + 0.5);
	return x - floor(x) == 0.5 ? (int64_t)floor(x) : (int64_t)floor(x + 0.5);
}

static void rz_axis(const struct hp_node *n, struct rz_tap *t, int64_t in, int64_t out, double scale)
{
	const char *mode = hp_attr_string(n, "mode", "nearest");
	const char *ctm = hp_attr_string(n, "coordinate_transformation_mode", "half_pixel");
	const char *nm = hp_attr_string(n, "nearest_mode", "round_prefer_floor");

	for (int64_t o = 0; o < out; o++) {
		double x = rz_coord(ctm, (double)o, scale, in, out);
		if (!strcmp(mode, "nearest")) {
			int64_t i = clamp64(rz_nearest(nm, x), 0, in - 1);
			t[o] = (struct rz_tap){ (int32_t)i, (int32_t)i, 1.0f, 0.0f };
			continue;
		}
		x = x < 0 ? 0 : x > (double)(in - 1) ? (double)(in - 1) : x;
		int64_t i0 = (int64_t)floor(x), i1 = i0 + 1 < in ? i0 + 1 : in - 1;
		t[o] = (struct rz_tap){ (int32_t)i0, (int32_t)i1, (float)(1 - (x - (double)i0)), (float)(x - (double)i0) };
	}
}

static int resize_prepare(struct hp_graph *g, struct hp_node *n)
{
	const struct hp_value *dy = tk_in(g, n, 0);
	const char *mode = hp_attr_string(n, "mode", "nearest");
	const float *sc = NULL;
	int nsc = -1, rc;
	struct hp_shape xs;
	struct rz_priv *p;
	int64_t taps = 0;
	const struct hp_attr *sa = hp_node_attr(n, "scales");

	if ((rc = tk_need_f32(g, n, 0, 0)) < 0 || (rc = tk_attr_shape(g, n, "x_shape", &xs, 1)) < 0)
		return rc;
	if (strcmp(mode, "nearest") && strcmp(mode, "linear"))
		return hp_node_error(g, n, HP_EUNSUPPORTED, "no gradient for Resize mode '%s'", mode);
	if (!strcmp(hp_attr_string(n, "coordinate_transformation_mode", ""), "tf_crop_and_resize"))
		return hp_node_error(g, n, HP_EUNSUPPORTED, "no gradient for tf_crop_and_resize");
	if (sa && sa->type == HP_ATTR_FLOATS) {
		sc = sa->floats;
		nsc = sa->n;
	}
	if (dy->shape.rank != xs.rank || (nsc >= 0 && nsc != xs.rank))
		return hp_node_error(g, n, HP_ESHAPE, "dY, x_shape and scales ranks differ");
	for (int i = 0; i < xs.rank; i++)
		taps += dy->shape.dims[i];
	if (!(p = calloc(1, sizeof *p + (size_t)taps * sizeof p->tap[0])))
		return hp_node_error(g, n, -ENOMEM, "out of memory");
	p->xs = xs;
	p->ys = dy->shape;
	for (int i = 0, off = 0; i < xs.rank; i++) {
		double s = sc ? sc[i] : (double)p->ys.dims[i] / (double)xs.dims[i];
		p->off[i] = off;
		rz_axis(n, p->tap + off, xs.dims[i], p->ys.dims[i], s);
		off += (int)p->ys.dims[i];
	}
	n->priv = p;
	tk_set_out(g, n, 0, HP_F32, &xs);
	return 0;
}

static int resize_run(const struct hp_node *n, const struct hp_kargs *a)
{
	const struct rz_priv *p = n->priv;
	int r = p->xs.rank;
	int64_t len = hp_shape_numel(&p->ys), xst[HP_MAX_RANK];
	const float *dy = a->in[0].data;
	float *dx = a->out[0].data;

	tk_strides(&p->xs, xst);
	memset(dx, 0, hp_tensor_bytes(&a->out[0]));
	for (int64_t i = 0; i < len; i++) {
		const struct rz_tap *t[HP_MAX_RANK];
		int64_t rem = i;
		for (int d = r - 1; d >= 0; d--) {
			t[d] = p->tap + p->off[d] + rem % p->ys.dims[d];
			rem /= p->ys.dims[d];
		}
		for (int combo = 0; combo < (1 << r); combo++) {
			double w = dy[i];
			int64_t off = 0;
			for (int d = 0; d < r && w != 0; d++) {
				int hi = (combo >> d) & 1;
				w *= hi ? t[d]->w1 : t[d]->w0;
				off += (hi ? t[d]->i1 : t[d]->i0) * xst[d];
			}
			if (w != 0)
				dx[off] += (float)w;
		}
	}
	return 0;
}

const struct hp_op tk_op_resize_grad = {
	.domain = TK_DOMAIN, .name = "ResizeGrad", .min_inputs = 1, .max_inputs = 1,
	.min_outputs = 1, .max_outputs = 1, .prepare = resize_prepare, .run = resize_run,
};
