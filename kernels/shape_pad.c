/* Expand, Tile and Pad: copies through per-dimension offset tables built at
 * prepare time (the shapes are static), so run is one hpks_copy_run. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/checked.h"
#include "kernels/shape_util.h"

/* priv of these ops: the copy descriptor at the head of its table block */
static int table_run(const struct hp_node *n, const struct hp_kargs *a)
{
	hpks_copy_run(n->priv, a->in[0].data, a->out[0].data, a->pool);
	return 0;
}

static int finish(struct hp_graph *g, struct hp_node *n, struct hpks_copy *c, void *blk,
		  const struct hp_value *x, const struct hp_shape *s)
{
	hpks_copy_finish(c);
	memcpy(blk, c, sizeof *c);
	n->priv = blk;
	hpks_set_out(g, n, 0, x->dtype, s);
	return 0;
}

static int expand_prepare(struct hp_graph *g, struct hp_node *n)
{
	const struct hp_value *x = hpks_in(g, n, 0);
	int64_t sh[HP_MAX_RANK], xs[HP_MAX_RANK];
	int cnt, rc, r, xr = x->shape.rank;
	struct hp_shape s;
	struct hpks_copy c;
	void *blk;

	if ((rc = hpks_const_ints(g, n, 1, "shape", sh, HP_MAX_RANK, &cnt)) < 0)
		return rc;
	if (hp_shape_numel(&x->shape) < 0)
		return hp_node_error(g, n, HP_ESHAPE, "the input's shape is not known");
	r = cnt > xr ? cnt : xr;
	s.rank = r;
	for (int d = 0; d < r; d++) {
		int64_t a = d - (r - xr) >= 0 ? x->shape.dims[d - (r - xr)] : 1;
		int64_t b = d - (r - cnt) >= 0 ? sh[d - (r - cnt)] : 1;
		if (b < 0 || b > HP_DIM_MAX) /* found by fuzz_struct: -2 wrapped the copy tables */
			return hp_node_error(g, n, HP_ESHAPE, "shape[%d] = %lld is not a dimension", d - (r - cnt),
					     (long long)b);
		if (a != b && a != 1 && b != 1)
			return hp_node_error(g, n, HP_ESHAPE, "cannot broadcast dim %lld to %lld", (long long)a,
					     (long long)b);
		s.dims[d] = a == 1 ? b : a;
	}
	if (hp_shape_bytes(&s, x->dtype) == -2)
		return hp_node_error(g, n, HP_ESHAPE, "the shape makes an output beyond any tensor");
	hpks_strides(&x->shape, xs);
	if (!(blk = hpks_copy_alloc(&c, r, s.dims, hp_dtype_size(x->dtype), sizeof c)))
		return hpks_copy_error(g, n);
	for (int d = 0; d < r; d++) {
		int xd = d - (r - xr);
		for (int64_t i = 0; i < s.dims[d]; i++)
			c.off[d][i] = xd >= 0 && x->shape.dims[xd] != 1 ? i * xs[xd] : 0;
	}
	if (r == 0)
		c.off[0][0] = 0;
	return finish(g, n, &c, blk, x, &s);
}

static int tile_prepare(struct hp_graph *g, struct hp_node *n)
{
	const struct hp_value *x = hpks_in(g, n, 0);
	int64_t rep[HP_MAX_RANK], xs[HP_MAX_RANK];
	int cnt, rc, r = x->shape.rank;
	struct hp_shape s = x->shape;
	struct hpks_copy c;
	void *blk;

	if ((rc = hpks_const_ints(g, n, 1, "repeats", rep, HP_MAX_RANK, &cnt)) < 0)
		return rc;
	if (cnt != r)
		return hp_node_error(g, n, HP_ESHAPE, "repeats has %d entries, input rank is %d", cnt, r);
	for (int d = 0; d < r; d++) {
		int over = 0;
		if (rep[d] < 0)
			return hp_node_error(g, n, HP_ESHAPE, "repeats[%d] = %lld is negative", d, (long long)rep[d]);
		s.dims[d] = hp_ck_mul(s.dims[d], rep[d], &over);
		if (over || s.dims[d] > HP_DIM_MAX)
			return hp_node_error(g, n, HP_ESHAPE, "repeats[%d] = %lld makes dim %d beyond any tensor", d,
					     (long long)rep[d], d);
	}
	if (hp_shape_bytes(&s, x->dtype) == -2)
		return hp_node_error(g, n, HP_ESHAPE, "repeats make an output beyond any tensor");
	hpks_strides(&x->shape, xs);
	if (!(blk = hpks_copy_alloc(&c, r, s.dims, hp_dtype_size(x->dtype), sizeof c)))
		return hpks_copy_error(g, n);
	for (int d = 0; d < r; d++)
		for (int64_t i = 0; i < s.dims[d]; i++)
			c.off[d][i] = (i % x->shape.dims[d]) * xs[d];
	if (r == 0)
		c.off[0][0] = 0;
	return finish(g, n, &c, blk, x, &s);
}

int hpks_pad_mode(const char *m)
{
	return !strcmp(m, "constant") ? HPKS_PAD_CONSTANT : !strcmp(m, "reflect") ? HPKS_PAD_REFLECT
	       : !strcmp(m, "edge") ? HPKS_PAD_EDGE : !strcmp(m, "wrap") ? HPKS_PAD_WRAP : -1;
}

int64_t hpks_pad_src(int mode, int64_t j, int64_t dim)
{
	if (j >= 0 && j < dim)
		return j;
	switch (mode) {
	case HPKS_PAD_CONSTANT:
		return -1;
	case HPKS_PAD_EDGE:
		return j < 0 ? 0 : dim - 1;
	case HPKS_PAD_WRAP:
		return ((j % dim) + dim) % dim;
	default: {
		int64_t per = 2 * (dim - 1);
		if (dim == 1)
			return 0;
		j = ((j % per) + per) % per;
		return j >= dim ? per - j : j;
	}
	}
}

static int pad_params(struct hp_graph *g, struct hp_node *n, int r, int64_t *pb, int64_t *pe)
{
	int64_t p[2 * HP_MAX_RANK], axes[HP_MAX_RANK];
	int cnt = 0, na = 0, rc;

	rc = hpks_ints_input_or_attr(g, n, 1, "pads", p, 2 * HP_MAX_RANK, &cnt);
	if (rc == 0)
		rc = hpks_ints_input_or_attr(g, n, 99, "paddings", p, 2 * HP_MAX_RANK, &cnt);
	if (rc <= 0)
		return rc < 0 ? rc : hp_node_error(g, n, HP_EMODEL, "needs 'pads'");
	if (hpks_in(g, n, 3)) {
		if ((rc = hpks_const_ints(g, n, 3, "axes", axes, HP_MAX_RANK, &na)) < 0)
			return rc;
	} else {
		for (na = 0; na < r; na++)
			axes[na] = na;
	}
	if (cnt != 2 * na)
		return hp_node_error(g, n, HP_ESHAPE, "pads has %d entries, expected %d", cnt, 2 * na);
	for (int d = 0; d < r; d++)
		pb[d] = pe[d] = 0;
	for (int i = 0; i < na; i++) {
		int ax;
		if ((rc = hpks_axis(g, n, axes[i], r, &ax)) < 0)
			return rc;
		pb[ax] = p[i];
		pe[ax] = p[i + na];
	}
	return 0;
}

static int pad_fill(struct hp_graph *g, struct hp_node *n, const struct hp_value *x, struct hpks_copy *c)
{
	const struct hp_value *cv = hpks_in(g, n, 2);

	memset(c->fill, 0, sizeof c->fill);
	if (cv && cv->data) {
		if (cv->dtype != x->dtype)
			return hp_node_error(g, n, HP_ESHAPE, "constant_value is %s, data is %s",
					     hp_dtype_name(cv->dtype), hp_dtype_name(x->dtype));
		memcpy(c->fill, cv->data, hp_dtype_size(x->dtype));
	} else if (!cv) {
		hpks_put_f(c->fill, x->dtype, 0, hp_attr_float(n, "value", 0.0f));
	}
	return 0;
}

static int pad_prepare(struct hp_graph *g, struct hp_node *n)
{
	const struct hp_value *x = hpks_in(g, n, 0);
	const char *ms = hp_attr_string(n, "mode", "constant");
	int r = x->shape.rank, rc, mode;
	int64_t pb[HP_MAX_RANK], pe[HP_MAX_RANK], xs[HP_MAX_RANK];
	struct hp_shape s = x->shape;
	struct hpks_copy c;
	void *blk;

	mode = hpks_pad_mode(ms);
	if (mode < 0)
		return hp_node_error(g, n, HP_EUNSUPPORTED, "mode '%s' is not supported", ms);
	if ((rc = pad_params(g, n, r, pb, pe)) < 0)
		return rc;
	for (int d = 0; d < r; d++) {
		int over = 0;
		if (pb[d] < -x->shape.dims[d] || pe[d] < -x->shape.dims[d]) /* i - pb overflowed (fuzz_struct) */
			return hp_node_error(g, n, HP_ESHAPE, "pads %lld, %lld crop more than dim %d's %lld", (long long)pb[d],
					     (long long)pe[d], d, (long long)x->shape.dims[d]);
		s.dims[d] = hp_ck_add(hp_ck_add(s.dims[d], pb[d], &over), pe[d], &over);
		if (over || s.dims[d] > HP_DIM_MAX)
			return hp_node_error(g, n, HP_ESHAPE, "pads %lld+%lld make dim %d beyond any tensor",
					     (long long)pb[d], (long long)pe[d], d);
		if (s.dims[d] < 0)
			return hp_node_error(g, n, HP_ESHAPE, "pads make dim %d negative", d);
		if (mode != HPKS_PAD_CONSTANT && x->shape.dims[d] == 0 && s.dims[d] > 0)
			return hp_node_error(g, n, HP_ESHAPE, "cannot %s-pad an empty dim %d", ms, d);
	}
	if (hp_shape_bytes(&s, x->dtype) == -2)
		return hp_node_error(g, n, HP_ESHAPE, "pads make an output beyond any tensor");
	hpks_strides(&x->shape, xs);
	if (!(blk = hpks_copy_alloc(&c, r, s.dims, hp_dtype_size(x->dtype), sizeof c)))
		return hpks_copy_error(g, n);
	for (int d = 0; d < r; d++)
		for (int64_t i = 0; i < s.dims[d]; i++) {
			int64_t j = hpks_pad_src(mode, i - pb[d], x->shape.dims[d]);
			c.off[d][i] = j < 0 ? -1 : j * xs[d];
		}
	if (r == 0)
		c.off[0][0] = 0;
	if ((rc = pad_fill(g, n, x, &c)) < 0) {
		free(blk);
		return rc;
	}
	return finish(g, n, &c, blk, x, &s);
}

static int pad_run(const struct hp_node *n, const struct hp_kargs *a)
{
	struct hpks_copy c = *(const struct hpks_copy *)n->priv;

	if (a->nin > 2 && a->in[2].data)
		memcpy(c.fill, a->in[2].data, c.esize);
	hpks_copy_run(&c, a->in[0].data, a->out[0].data, a->pool);
	return 0;
}

#define OP(var, nm, lo, hi, prep, rn)                                                                  \
	const struct hp_op var = { .domain = "", .name = nm, .min_inputs = lo, .max_inputs = hi,         \
				   .min_outputs = 1, .max_outputs = 1, .prepare = prep, .run = rn }

OP(hpks_op_expand, "Expand", 2, 2, expand_prepare, table_run);
OP(hpks_op_tile, "Tile", 2, 2, tile_prepare, table_run);
OP(hpks_op_pad, "Pad", 1, 4, pad_prepare, pad_run);
