/* Trilu and NonZero: the masks exporters build for attention (torch.triu at
 * opset 14+, torch.arange at opset 9 as ConstantOfShape -> NonZero).
 *
 * Trilu keeps the upper (upper=1: j - i >= k) or lower (j - i <= k) triangle
 * of every matrix in the last two dims and zeroes the rest; k is input 1
 * (int64 scalar, default 0), read at run time.
 *
 * NonZero's output shape [rank, count] depends on its input's values, so it
 * is supported only when that input is a compile-time constant: prepare
 * computes the indices and the node folds (as Shape does). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/ops.h"
#include "kernels/shape_util.h"

static int trilu_prepare(struct hp_graph *g, struct hp_node *n)
{
	const struct hp_value *x = hpks_in(g, n, 0), *k = hpks_in(g, n, 1);

	if (x->shape.rank < 2)
		return hp_node_error(g, n, HP_ESHAPE, "input has rank %d, needs at least 2", x->shape.rank);
	if (!hp_dtype_size(x->dtype))
		return hp_node_error(g, n, HP_EUNSUPPORTED, "type %s", hp_dtype_name(x->dtype));
	if (k && (k->dtype != HP_I64 || hp_shape_numel(&k->shape) != 1))
		return hp_node_error(g, n, HP_ESHAPE, "k must be one int64, is %s with %lld elements",
				     hp_dtype_name(k->dtype), (long long)hp_shape_numel(&k->shape));
	hpks_set_out(g, n, 0, x->dtype, &x->shape);
	return 0;
}

struct trilu_job {
	const char *x;
	char *y;
	int64_t rows, cols, k;
	size_t es;
	int upper;
};

/* Rows [b, e) over all matrices: row r is row r % rows of matrix r / rows. */
static void trilu_rows(void *arg, int64_t b, int64_t e, int tid)
{
	const struct trilu_job *j = arg;

	(void)tid;
	for (int64_t r = b; r < e; r++) {
		int64_t i = r % j->rows, lo, hi; /* kept columns: [lo, hi) */
		size_t off = (size_t)r * (size_t)j->cols * j->es;

		lo = j->upper ? i + j->k : 0;
		hi = j->upper ? j->cols : i + j->k + 1;
		lo = lo < 0 ? 0 : lo > j->cols ? j->cols : lo;
		hi = hi < lo ? lo : hi > j->cols ? j->cols : hi;
		memset(j->y + off, 0, (size_t)lo * j->es);
		memcpy(j->y + off + (size_t)lo * j->es, j->x + off + (size_t)lo * j->es, (size_t)(hi - lo) * j->es);
		memset(j->y + off + (size_t)hi * j->es, 0, (size_t)(j->cols - hi) * j->es);
	}
}

static int trilu_run(const struct hp_node *n, const struct hp_kargs *a)
{
	const struct hp_tensor *x = &a->in[0];
	int r = x->shape.rank;
	struct trilu_job j = { .x = x->data, .y = a->out[0].data, .rows = x->shape.dims[r - 2],
			       .cols = x->shape.dims[r - 1], .es = hp_dtype_size(x->dtype),
			       .upper = hp_attr_int(n, "upper", 1) != 0 };
	int64_t nrows = j.cols ? hp_shape_numel(&x->shape) / j.cols : 0;

	if (nrows == 0) /* empty: its other dims may be anything up to 2^63 (fuzz_struct) */
		return 0;
	if (a->nin > 1 && a->in[1].data)
		j.k = *(const int64_t *)a->in[1].data;
	/* |k| beyond the matrix keeps or clears everything; clamping avoids overflow */
	j.k = j.k > j.cols + j.rows ? j.cols + j.rows : j.k < -(j.cols + j.rows) ? -(j.cols + j.rows) : j.k;
	hp_parallel_for(a->pool, nrows, 1 + 65536 / (j.cols + 1), trilu_rows, &j);
	return 0;
}

static int64_t nonzero_count(const void *x, enum hp_dtype dt, int64_t cnt)
{
	int64_t nz = 0;

	for (int64_t i = 0; i < cnt; i++)
		nz += hpks_get_f(x, dt, i) != 0;
	return nz;
}

/* out[d * nz + m] = coordinate d of the m-th nonzero element, row-major order. */
static void nonzero_fill(const void *x, enum hp_dtype dt, const struct hp_shape *s, int64_t nz, int64_t *out)
{
	int64_t st[HP_MAX_RANK], cnt = hp_shape_numel(s), m = 0;

	hpks_strides(s, st);
	for (int64_t i = 0; i < cnt; i++) {
		if (hpks_get_f(x, dt, i) == 0)
			continue;
		for (int d = 0; d < s->rank; d++)
			out[d * nz + m] = (i / st[d]) % s->dims[d];
		m++;
	}
}

static int nonzero_prepare(struct hp_graph *g, struct hp_node *n)
{
	const struct hp_value *x = hpks_in(g, n, 0);
	struct hp_shape s = { .rank = 2 };
	int64_t cnt = hp_shape_numel(&x->shape), *d;

	if (!hp_dtype_size(x->dtype))
		return hp_node_error(g, n, HP_EUNSUPPORTED, "type %s", hp_dtype_name(x->dtype));
	if (!x->data)
		return hp_node_error(g, n, HP_ENOTCONST,
				     "input '%s' must be a compile-time constant (the output shape depends on its values)",
				     x->name);
	s.dims[0] = x->shape.rank;
	s.dims[1] = nonzero_count(x->data, x->dtype, cnt);
	hpks_set_out(g, n, 0, HP_I64, &s);
	d = malloc((size_t)(s.dims[0] * s.dims[1]) * sizeof *d + 1);
	if (!d)
		return hp_node_error(g, n, -ENOMEM, "out of memory");
	nonzero_fill(x->data, x->dtype, &x->shape, s.dims[1], d);
	hpks_set_out_data(g, n, 0, d);
	return 0;
}

/* Only reached when the constant input was re-bound: same values, same shape. */
static int nonzero_run(const struct hp_node *n, const struct hp_kargs *a)
{
	const struct hp_tensor *x = &a->in[0];

	(void)n;
	if (nonzero_count(x->data, x->dtype, hp_shape_numel(&x->shape)) != a->out[0].shape.dims[1])
		return hp_error(HP_ESHAPE, "NonZero: the input changed since compile time");
	nonzero_fill(x->data, x->dtype, &x->shape, a->out[0].shape.dims[1], a->out[0].data);
	return 0;
}

static const struct hp_op op_trilu = {
	.domain = "", .name = "Trilu", .min_inputs = 1, .max_inputs = 2, .min_outputs = 1, .max_outputs = 1,
	.prepare = trilu_prepare, .run = trilu_run,
};
static const struct hp_op op_nonzero = {
	.domain = "", .name = "NonZero", .min_inputs = 1, .max_inputs = 1, .min_outputs = 1, .max_outputs = 1,
	.prepare = nonzero_prepare, .run = nonzero_run,
};

const struct hp_op *const hp_ops_mask[] = { &op_trilu, &op_nonzero, NULL };
