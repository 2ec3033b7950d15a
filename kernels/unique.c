/* Unique(X; sorted, axis) -> (Y, indices, inverse_indices, counts).
 * The output length depends on the values: like NonZero, the op folds when
 * X is a compile-time constant and is refused with HP_ENOTCONST otherwise.
 * Slices along `axis` (single elements without it) compare element by
 * element as doubles; sorted output orders them lexicographically, else by
 * first occurrence. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/shape_util.h"

struct useq {
	const struct hp_value *x;
	int64_t outer, dim, inner; /* slice s = x[o, s, i] over (o, i) */
};

static int slice_cmp(const struct useq *u, int64_t a, int64_t b)
{
	for (int64_t o = 0; o < u->outer; o++)
		for (int64_t i = 0; i < u->inner; i++) {
			double va = hpks_get_f(u->x->data, u->x->dtype, (o * u->dim + a) * u->inner + i);
			double vb = hpks_get_f(u->x->data, u->x->dtype, (o * u->dim + b) * u->inner + i);
			if (va != vb)
				return va < vb ? -1 : 1;
		}
	return 0;
}

/* first[k]: first occurrence of unique slice k (in output order); inv[s]. */
static int64_t uniq(const struct useq *u, int sorted, int64_t *first, int64_t *inv, int64_t *cnt)
{
	int64_t nu = 0;

	for (int64_t s = 0; s < u->dim; s++) {
		int64_t k = 0;
		while (k < nu && slice_cmp(u, first[k], s))
			k++;
		if (k == nu) {
			if (sorted) { /* insert in order */
				for (k = 0; k < nu && slice_cmp(u, first[k], s) < 0; k++)
					;
				memmove(first + k + 1, first + k, (size_t)(nu - k) * sizeof *first);
				memmove(cnt + k + 1, cnt + k, (size_t)(nu - k) * sizeof *cnt);
				for (int64_t t = 0; t < s; t++)
					inv[t] += inv[t] >= k;
			}
			first[k] = s, cnt[k] = 0, nu++;
		}
		inv[s] = k;
		cnt[k]++;
	}
	return nu;
}

static int unique_fold(struct hp_graph *g, struct hp_node *n, const struct useq *u, int axis)
{
	int64_t *first = malloc((size_t)(u->dim + 1) * sizeof *first), *inv = malloc((size_t)(u->dim + 1) * sizeof *inv);
	int64_t *cnt = malloc((size_t)(u->dim + 1) * sizeof *cnt), nu;
	size_t es = hp_dtype_size(u->x->dtype) * (size_t)u->inner;
	struct hp_shape ys = axis >= 0 ? u->x->shape : (struct hp_shape){ 1, { 0 } }, ks = { 1, { 0 } };
	char *y;

	if (!first || !inv || !cnt) {
		free(first), free(inv), free(cnt);
		return hp_node_error(g, n, -ENOMEM, "out of memory");
	}
	nu = uniq(u, (int)hp_attr_int(n, "sorted", 1), first, inv, cnt);
	ys.dims[axis >= 0 ? axis : 0] = nu;
	ks.dims[0] = nu;
	y = malloc((size_t)(u->outer * nu) * es + 1);
	for (int64_t o = 0; y && o < u->outer; o++)
		for (int64_t k = 0; k < nu; k++)
			memcpy(y + (size_t)(o * nu + k) * es, (const char *)u->x->data + (size_t)(o * u->dim + first[k]) * es, es);
	hpks_set_out(g, n, 0, u->x->dtype, &ys);
	hpks_set_out_data(g, n, 0, y);
	hpks_set_out(g, n, 1, HP_I64, &ks);
	hpks_set_out_data(g, n, 1, first);
	hpks_set_out(g, n, 2, HP_I64, &(struct hp_shape){ 1, { u->dim } });
	hpks_set_out_data(g, n, 2, inv);
	hpks_set_out(g, n, 3, HP_I64, &ks);
	hpks_set_out_data(g, n, 3, cnt);
	return y ? 0 : hp_node_error(g, n, -ENOMEM, "out of memory");
}

static int unique_prepare(struct hp_graph *g, struct hp_node *n)
{
	const struct hp_value *x = hpks_in(g, n, 0);
	struct useq u = { x, 1, hp_shape_numel(&x->shape), 1 };
	int axis = -1, rc;

	if (hp_node_attr(n, "axis")) {
		if ((rc = hpks_axis(g, n, hp_attr_int(n, "axis", 0), x->shape.rank, &axis)) < 0)
			return rc;
		u.dim = x->shape.dims[axis];
		for (int d = 0; d < axis; d++)
			u.outer *= x->shape.dims[d];
		for (int d = axis + 1; d < x->shape.rank; d++)
			u.inner *= x->shape.dims[d];
	}
	if (!hp_dtype_size(x->dtype) || x->dtype == HP_STRING)
		return hp_node_error(g, n, HP_EUNSUPPORTED, "dtype %s is not supported", hp_dtype_name(x->dtype));
	if (!x->data)
		return hp_node_error(g, n, HP_ENOTCONST, "X must be a compile-time constant: the number of unique "
				     "values sets the output shapes");
	return unique_fold(g, n, &u, axis);
}

static int unique_run(const struct hp_node *n, const struct hp_kargs *a)
{
	(void)a;
	return hp_node_error(NULL, n, HP_EINTERNAL, "runs only folded");
}

static const struct hp_op op_unique = {
	.domain = "", .name = "Unique", .min_inputs = 1, .max_inputs = 1, .min_outputs = 1, .max_outputs = 4,
	.prepare = unique_prepare, .run = unique_run,
};

const struct hp_op *const hp_ops_unique[] = { &op_unique, NULL };
