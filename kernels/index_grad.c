/* Backward ops (ai.hpdlf) of the indexing and rearranging operators:
 *
 *   GatherElementsGrad(dY, indices) -> dX    attrs axis, x_shape
 *     dY added into dX at the places GatherElements read (also TopK's
 *     values: its Indices output are those places).
 *   ScatterGrad(dY, indices) -> (dData, dUpdates)   attrs mode ("elements"
 *     or "nd"), axis, reduction ("none" or "add"), updates_shape
 *     dData is dY, with the places written zeroed unless the scatter adds;
 *     dUpdates is dY read at those places (without add, only the update a
 *     place keeps, the last written there, gets it; the others get 0).
 *   PadGrad(dY) -> dX    attrs x_shape, mode (constant, reflect, edge,
 *     wrap, or tile for Tile), pads (begin then end, one per dim)
 *     every element of dY added to the input element the forward copied
 *     it from (none for Pad's constant border).
 *
 * Accumulation runs in element order on one thread (deterministic). */
#include <inttypes.h>
#include <string.h>

#include "hpdlf/error.h"
#include "kernels/index_impl.h"
#include "kernels/shape_util.h"
#include "kernels/train_util.h"

static int need_idx(struct hp_graph *g, const struct hp_node *n, int i)
{
	const struct hp_value *v = tk_in(g, n, i);

	if (!v || (v->dtype != HP_I64 && v->dtype != HP_I32))
		return hp_node_error(g, n, HP_EMODEL, "indices must be int64 or int32");
	return 0;
}

static int axis_of(struct hp_graph *g, const struct hp_node *n, int rank, int *axis)
{
	int64_t a = hp_attr_int(n, "axis", 0);

	a = a < 0 ? a + rank : a;
	if (a < 0 || a >= rank)
		return hp_node_error(g, n, HP_EMODEL, "axis out of range");
	*axis = (int)a;
	return 0;
}

/* Offset into a tensor of shape xs (strides st) of the element the entry at
 * multi-index idx of an elements-style indices tensor names; -1 if out of range. */
static int64_t elem_offset(const struct hp_shape *xs, const int64_t *st, const int64_t *idx, int axis, int64_t v)
{
	int64_t off = 0, dim = xs->dims[axis];

	if (v < -dim || v >= dim)
		return -1;
	for (int d = 0; d < xs->rank; d++)
		off += (d == axis ? (v < 0 ? v + dim : v) : idx[d]) * st[d];
	return off;
}

/* Offset of index tuple t (k entries) of ScatterND's indices; -1 if out of range. */
static int64_t tuple_offset(const struct hp_shape *xs, const int64_t *st, const struct hp_tensor *ix, int64_t t, int k)
{
	int64_t off = 0;

	for (int j = 0; j < k; j++) {
		int64_t v = hpks_get_i(ix->data, ix->dtype, t * k + j), dim = xs->dims[j];
		if (v < -dim || v >= dim)
			return -1;
		off += (v < 0 ? v + dim : v) * st[j];
	}
	return off;
}

/* ---- GatherElementsGrad ------------------------------------------------ */

static int geg_prepare(struct hp_graph *g, struct hp_node *n)
{
	const struct hp_value *dy = tk_in(g, n, 0), *ix = tk_in(g, n, 1);
	struct hp_shape xs;
	int rc, axis;

	if ((rc = tk_need_f32(g, n, 0, 0)) < 0 || (rc = need_idx(g, n, 1)) < 0 ||
	    (rc = tk_attr_shape(g, n, "x_shape", &xs, 1)) < 0 || (rc = axis_of(g, n, xs.rank, &axis)) < 0)
		return rc;
	if (!hp_shape_equal(&dy->shape, &ix->shape) || ix->shape.rank != xs.rank)
		return hp_node_error(g, n, HP_ESHAPE, "dY and indices must have one shape of the input's rank");
	tk_set_out(g, n, 0, HP_F32, &xs);
	return 0;
}

static int geg_run(const struct hp_node *n, const struct hp_kargs *a)
{
	const struct hp_tensor *ix = &a->in[1];
	const struct hp_shape *xs = &a->out[0].shape;
	int64_t st[HP_MAX_RANK], idx[HP_MAX_RANK] = { 0 }, cnt = hp_shape_numel(&ix->shape), axis = hp_attr_int(n, "axis", 0);
	const float *dy = a->in[0].data;
	float *dx = a->out[0].data;

	axis = axis < 0 ? axis + xs->rank : axis;
	memset(dx, 0, hp_tensor_bytes(&a->out[0]));
	hpks_strides(xs, st);
	for (int64_t i = 0; i < cnt; i++, hpki_next(idx, &ix->shape)) {
		int64_t off = elem_offset(xs, st, idx, (int)axis, hpks_get_i(ix->data, ix->dtype, i));
		if (off < 0)
			return hp_node_error(NULL, n, HP_EDATA, "index %" PRId64 " is out of range", i);
		dx[off] += dy[i];
	}
	return 0;
}

const struct hp_op tk_op_gather_elements_grad = {
	.domain = TK_DOMAIN, .name = "GatherElementsGrad", .min_inputs = 2, .max_inputs = 2,
	.min_outputs = 1, .max_outputs = 1, .prepare = geg_prepare, .run = geg_run,
};

/* ---- ScatterGrad ------------------------------------------------------- */

static int sg_prepare(struct hp_graph *g, struct hp_node *n)
{
	const struct hp_value *dy = tk_in(g, n, 0);
	const char *mode = hp_attr_string(n, "mode", ""), *red = hp_attr_string(n, "reduction", "none");
	struct hp_shape us;
	int rc, axis;

	if ((rc = tk_need_f32(g, n, 0, 0)) < 0 || (rc = need_idx(g, n, 1)) < 0 ||
	    (rc = tk_attr_shape(g, n, "updates_shape", &us, 1)) < 0)
		return rc;
	if (strcmp(mode, "elements") && strcmp(mode, "nd"))
		return hp_node_error(g, n, HP_EMODEL, "mode must be elements or nd");
	if (strcmp(red, "none") && strcmp(red, "add"))
		return hp_node_error(g, n, HP_EUNSUPPORTED, "reduction '%s' has no gradient", red);
	if (!strcmp(mode, "elements") && (rc = axis_of(g, n, dy->shape.rank, &axis)) < 0)
		return rc;
	if (!strcmp(mode, "nd") && tk_in(g, n, 1)->shape.dims[tk_in(g, n, 1)->shape.rank - 1] < 1)
		return hp_node_error(g, n, HP_EUNSUPPORTED, "index tuples of no entries");
	tk_set_out(g, n, 0, HP_F32, &dy->shape);
	tk_set_out(g, n, 1, HP_F32, &us);
	if (strcmp(red, "add")) /* which update each place keeps */
		n->workspace = (size_t)hp_shape_numel(&dy->shape) * sizeof(int64_t);
	return 0;
}

/* Every (updates element, data offset) pair of the scatter, in the forward's
 * order.  Without `last`: dUpdates is dY at the place (reduction add).
 * Pass 1 (record): last[offset] = the update written last there, as the
 * forward overwrites; pass 2: only that update gets dY, and dData is zero
 * at the places written (reduction none). */
static int sg_each(const struct hp_node *n, const struct hp_kargs *a, int64_t *last, int record, float *dd, float *du)
{
	const struct hp_tensor *ix = &a->in[1], *dyt = &a->in[0];
	const struct hp_shape *xs = &dyt->shape;
	const float *dy = dyt->data;
	int64_t st[HP_MAX_RANK], idx[HP_MAX_RANK] = { 0 };
	int elements = !strcmp(hp_attr_string(n, "mode", ""), "elements");
	int k = elements ? 0 : (int)ix->shape.dims[ix->shape.rank - 1];
	int64_t slice = elements ? 1 : hpk_prod_dims(xs, k), cnt = hp_shape_numel(&ix->shape) / (elements ? 1 : k);
	int64_t axis = hp_attr_int(n, "axis", 0);

	axis = axis < 0 ? axis + xs->rank : axis;
	hpks_strides(xs, st);
	for (int64_t t = 0; t < cnt; t++) {
		int64_t off = elements ? elem_offset(xs, st, idx, (int)axis, hpks_get_i(ix->data, ix->dtype, t))
				       : tuple_offset(xs, st, ix, t, k);
		if (off < 0)
			return hp_node_error(NULL, n, HP_EDATA, "index %" PRId64 " is out of range", t);
		for (int64_t e = 0; e < slice; e++) {
			int64_t u = t * slice + e;
			if (record)
				last[off + e] = u;
			else if (du)
				du[u] = !last || last[off + e] == u ? dy[off + e] : 0;
		}
		if (elements)
			hpki_next(idx, &ix->shape);
	}
	for (int64_t i = 0; !record && last && dd && i < hp_shape_numel(xs); i++)
		if (last[i] >= 0)
			dd[i] = 0;
	return 0;
}

static int sg_run(const struct hp_node *n, const struct hp_kargs *a)
{
	float *dd = a->out[0].data, *du = a->nout > 1 ? a->out[1].data : NULL;
	int64_t *last = NULL, len = hp_shape_numel(&a->in[0].shape);
	int rc;

	if (dd)
		memcpy(dd, a->in[0].data, hp_tensor_bytes(&a->in[0]));
	if (strcmp(hp_attr_string(n, "reduction", "none"), "add")) {
		last = a->ws;
		for (int64_t i = 0; i < len; i++)
			last[i] = -1;
		if ((rc = sg_each(n, a, last, 1, NULL, NULL)) < 0)
			return rc;
	}
	return sg_each(n, a, last, 0, dd, du);
}

const struct hp_op tk_op_scatter_grad = {
	.domain = TK_DOMAIN, .name = "ScatterGrad", .min_inputs = 2, .max_inputs = 2,
	.min_outputs = 1, .max_outputs = 2, .prepare = sg_prepare, .run = sg_run,
};

/* ---- PadGrad (Pad, Tile) ----------------------------------------------- */

static int pg_mode(const char *m)
{
	return !strcmp(m, "tile") ? HPKS_PAD_TILE : hpks_pad_mode(m);
}

static int pg_prepare(struct hp_graph *g, struct hp_node *n)
{
	const struct hp_value *dy = tk_in(g, n, 0);
	const int64_t *pads;
	struct hp_shape xs;
	int rc, mode = pg_mode(hp_attr_string(n, "mode", "constant"));

	if ((rc = tk_need_f32(g, n, 0, 0)) < 0 || (rc = tk_attr_shape(g, n, "x_shape", &xs, 1)) < 0)
		return rc;
	if (mode < 0)
		return hp_node_error(g, n, HP_EMODEL, "unknown mode");
	if (dy->shape.rank != xs.rank || (mode != HPKS_PAD_TILE && hp_attr_ints(n, "pads", &pads) != 2 * xs.rank))
		return hp_node_error(g, n, HP_ESHAPE, "dY, x_shape and pads do not fit");
	for (int d = 0; d < xs.rank; d++)
		if (xs.dims[d] == 0 && dy->shape.dims[d] > 0)
			return hp_node_error(g, n, HP_ESHAPE, "dim %d of the input is empty", d);
	tk_set_out(g, n, 0, HP_F32, &xs);
	return 0;
}

static int pg_run(const struct hp_node *n, const struct hp_kargs *a)
{
	const struct hp_shape *ys = &a->in[0].shape, *xs = &a->out[0].shape;
	int mode = pg_mode(hp_attr_string(n, "mode", "constant"));
	int64_t st[HP_MAX_RANK], idx[HP_MAX_RANK] = { 0 }, cnt = hp_shape_numel(ys);
	const int64_t *pads = NULL;
	const float *dy = a->in[0].data;
	float *dx = a->out[0].data;

	if (mode != HPKS_PAD_TILE)
		hp_attr_ints(n, "pads", &pads);
	memset(dx, 0, hp_tensor_bytes(&a->out[0]));
	hpks_strides(xs, st);
	for (int64_t i = 0; i < cnt; i++, hpki_next(idx, ys)) {
		int64_t off = 0;
		for (int d = 0; d < xs->rank && off >= 0; d++) {
			int64_t j = mode == HPKS_PAD_TILE ? idx[d] % xs->dims[d]
							  : hpks_pad_src(mode, idx[d] - pads[d], xs->dims[d]);
			off = j < 0 ? -1 : off + j * st[d];
		}
		if (off >= 0)
			dx[off] += dy[i];
	}
	return 0;
}

const struct hp_op tk_op_pad_grad = {
	.domain = TK_DOMAIN, .name = "PadGrad", .min_inputs = 1, .max_inputs = 1,
	.min_outputs = 1, .max_outputs = 1, .prepare = pg_prepare, .run = pg_run,
};
