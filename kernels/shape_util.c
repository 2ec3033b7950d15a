/* Helpers shared by the shape, pooling and resize families. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/shape_util.h"

const struct hp_value *hpks_in(const struct hp_graph *g, const struct hp_node *n, int i)
{
	if (i >= n->ninputs || n->inputs[i] < 0)
		return NULL;
	return &g->values[n->inputs[i]];
}

void hpks_set_out(struct hp_graph *g, const struct hp_node *n, int o, enum hp_dtype dt,
		  const struct hp_shape *s)
{
	struct hp_value *v;

	if (o >= n->noutputs || n->outputs[o] < 0)
		return;
	v = &g->values[n->outputs[o]];
	v->dtype = dt;
	v->shape = *s;
}

void hpks_set_out_data(struct hp_graph *g, const struct hp_node *n, int o, void *data)
{
	struct hp_value *v;

	if (o >= n->noutputs || n->outputs[o] < 0) {
		free(data);
		return;
	}
	v = &g->values[n->outputs[o]];
	free(v->data);
	v->data = data;
	v->kind = HP_VALUE_CONSTANT;
	v->src.kind = HP_BLOB_MEMORY;
}

/* Input i as a compile-time constant of at most max elements whose dtype
 * `ok` accepts (`kind` names the accepted types in the message). */
static int const_input(const struct hp_graph *g, const struct hp_node *n, int i, const char *what, int max,
		       int (*ok)(enum hp_dtype), const char *kind, const struct hp_value **out, int64_t *num)
{
	const struct hp_value *x = hpks_in(g, n, i);

	if (!x)
		return hp_node_error(g, n, HP_EMODEL, "input %d (%s) is missing", i, what);
	if (!x->data)
		return hp_node_error(g, n, HP_ENOTCONST,
				     "input %d (%s, '%s') must be a compile-time constant (it sets the output shape)",
				     i, what, x->name);
	if (!ok(x->dtype))
		return hp_node_error(g, n, HP_ESHAPE, "input %d (%s) must be %s, not %s", i, what, kind,
				     hp_dtype_name(x->dtype));
	*num = hp_shape_numel(&x->shape);
	if (*num > max)
		return hp_node_error(g, n, HP_EUNSUPPORTED, "input %d (%s) has %lld elements, at most %d supported",
				     i, what, (long long)*num, max);
	*out = x;
	return 0;
}

static int is_index_type(enum hp_dtype t)
{
	return t == HP_I64 || t == HP_I32;
}

static int is_float_type(enum hp_dtype t)
{
	return t == HP_F32 || t == HP_F64 || t == HP_F16;
}

int hpks_const_ints(const struct hp_graph *g, const struct hp_node *n, int i, const char *what,
		    int64_t *v, int max, int *count)
{
	const struct hp_value *x = NULL;
	int64_t num = 0;
	int rc = const_input(g, n, i, what, max, is_index_type, "int64 or int32", &x, &num);

	if (rc < 0)
		return rc;
	for (int64_t k = 0; k < num; k++)
		v[k] = hpks_get_i(x->data, x->dtype, k);
	*count = (int)num;
	return 0;
}

int hpks_const_floats(const struct hp_graph *g, const struct hp_node *n, int i, const char *what,
		      double *v, int max, int *count)
{
	const struct hp_value *x = NULL;
	int64_t num = 0;
	int rc = const_input(g, n, i, what, max, is_float_type, "floating point", &x, &num);

	if (rc < 0)
		return rc;
	for (int64_t k = 0; k < num; k++)
		v[k] = hpks_get_f(x->data, x->dtype, k);
	*count = (int)num;
	return 0;
}

int hpks_ints_input_or_attr(const struct hp_graph *g, const struct hp_node *n, int i, const char *attr,
			    int64_t *v, int max, int *count)
{
	const int64_t *a;
	int na, rc;

	if (hpks_in(g, n, i)) {
		rc = hpks_const_ints(g, n, i, attr, v, max, count);
		return rc < 0 ? rc : 1;
	}
	na = hp_attr_ints(n, attr, &a);
	if (na < 0)
		return 0;
	if (na > max)
		return hp_node_error(g, n, HP_EUNSUPPORTED, "attribute %s has %d values, at most %d supported", attr,
				     na, max);
	memcpy(v, a, (size_t)na * sizeof *v);
	*count = na;
	return 1;
}

int hpks_axis(const struct hp_graph *g, const struct hp_node *n, int64_t axis, int rank, int *out)
{
	if (axis < -rank || axis >= rank)
		return hp_node_error(g, n, HP_ESHAPE, "axis %lld is out of range for rank %d", (long long)axis,
				     rank);
	*out = (int)(axis < 0 ? axis + rank : axis);
	return 0;
}

double hpks_get_f(const void *data, enum hp_dtype dt, int64_t idx)
{
	switch (dt) {
	case HP_F32: return ((const float *)data)[idx];
	case HP_F64: return ((const double *)data)[idx];
	case HP_F16: return hpks_f16_to_f32(((const uint16_t *)data)[idx]);
	case HP_BF16: return hpks_bf16_to_f32(((const uint16_t *)data)[idx]);
	case HP_U64: return (double)((const uint64_t *)data)[idx];
	default: return (double)hpks_get_i(data, dt, idx);
	}
}

int64_t hpks_get_i(const void *data, enum hp_dtype dt, int64_t idx)
{
	switch (dt) {
	case HP_I64: return ((const int64_t *)data)[idx];
	case HP_I32: return ((const int32_t *)data)[idx];
	case HP_I16: return ((const int16_t *)data)[idx];
	case HP_I8: return ((const int8_t *)data)[idx];
	case HP_U8: case HP_BOOL: return ((const uint8_t *)data)[idx];
	case HP_U16: return ((const uint16_t *)data)[idx];
	case HP_U32: return ((const uint32_t *)data)[idx];
	case HP_U64: return (int64_t)((const uint64_t *)data)[idx];
	default: {
		double d = hpks_get_f(data, dt, idx);
		return isnan(d) ? 0 : d >= 9.2e18 ? INT64_MAX : d <= -9.2e18 ? INT64_MIN : (int64_t)d;
	}
	}
}

void hpks_put_f(void *data, enum hp_dtype dt, int64_t idx, double v)
{
	int64_t i = isnan(v) ? 0 : v >= 9.2e18 ? INT64_MAX : v <= -9.2e18 ? INT64_MIN : (int64_t)v;

	switch (dt) {
	case HP_F32: ((float *)data)[idx] = (float)v; break;
	case HP_F64: ((double *)data)[idx] = v; break;
	case HP_F16: ((uint16_t *)data)[idx] = hpks_f32_to_f16((float)v); break;
	case HP_BF16: ((uint16_t *)data)[idx] = hpks_f32_to_bf16((float)v); break;
	case HP_BOOL: ((uint8_t *)data)[idx] = v != 0; break;
	case HP_I64: case HP_U64: ((int64_t *)data)[idx] = i; break;
	case HP_I32: case HP_U32: ((uint32_t *)data)[idx] = (uint32_t)(uint64_t)i; break;
	case HP_I16: case HP_U16: ((uint16_t *)data)[idx] = (uint16_t)(uint64_t)i; break;
	default: ((uint8_t *)data)[idx] = (uint8_t)(uint64_t)i; break;
	}
}

float hpks_f16_to_f32(uint16_t h)
{
	uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ff, bits;
	float f;

	if (exp == 0x1f) {
		bits = sign | 0x7f800000 | (man << 13);
	} else if (exp) {
		bits = sign | ((exp + 112) << 23) | (man << 13);
	} else {
		f = ldexpf((float)man, -24);
		return sign ? -f : f;
	}
	memcpy(&f, &bits, 4);
	return f;
}

uint16_t hpks_f32_to_f16(float f)
{
	uint32_t x, sign, man;
	int exp;

	memcpy(&x, &f, 4);
	sign = (x >> 16) & 0x8000;
	exp = (int)((x >> 23) & 0xff);
	man = x & 0x7fffff;
	if (exp == 0xff)
		return (uint16_t)(sign | 0x7c00 | (man ? 0x200 | (man >> 13) : 0));
	exp -= 112;
	if (exp >= 0x1f)
		return (uint16_t)(sign | 0x7c00);
	if (exp <= 0) {
		/* subnormal half: shift the full mantissa, round to nearest even */
		uint32_t m = man | 0x800000, shift = (uint32_t)(14 - exp), r, half;
		if (shift > 24)
			return (uint16_t)sign;
		r = m >> shift;
		half = 1u << (shift - 1);
		if ((m & ((half << 1) - 1)) > half || ((m & ((half << 1) - 1)) == half && (r & 1)))
			r++;
		return (uint16_t)(sign | r);
	}
	{
		uint32_t r = ((uint32_t)exp << 10) | (man >> 13), rem = man & 0x1fff;
		if (rem > 0x1000 || (rem == 0x1000 && (r & 1)))
			r++; /* may carry into the exponent, up to infinity: correct */
		return (uint16_t)(sign | r);
	}
}

float hpks_bf16_to_f32(uint16_t h)
{
	uint32_t bits = (uint32_t)h << 16;
	float f;

	memcpy(&f, &bits, 4);
	return f;
}

uint16_t hpks_f32_to_bf16(float f)
{
	uint32_t x;

	memcpy(&x, &f, 4);
	if ((x & 0x7fffffff) > 0x7f800000)
		return (uint16_t)((x >> 16) | 0x40);
	x += 0x7fff + ((x >> 16) & 1);
	return (uint16_t)(x >> 16);
}

void hpks_strides(const struct hp_shape *s, int64_t *st)
{
	int64_t m = 1;

	for (int d = s->rank - 1; d >= 0; d--) {
		st[d] = m;
		/* saturated: only an empty tensor (a 0 beside dims up to 2^63)
		 * or one not known yet gets here with a product beyond int64,
		 * and nothing is indexed through its strides (fuzz_struct) */
		if (__builtin_mul_overflow(m, s->dims[d], &m))
			m = INT64_MAX;
	}
}

void hpks_copy_bytes(void *dst, const void *src, size_t n)
{
	if (dst != src && n)
		memmove(dst, src, n);
}

int hpks_copy_error(const struct hp_graph *g, const struct hp_node *n)
{
	if (errno != E2BIG)
		return -ENOMEM;
	return hp_node_error(g, n, HP_ESHAPE, "an output dimension beyond %llu elements: more than its copy "
			     "tables take", (unsigned long long)HPKS_TABLE_MAX);
}

void *hpks_copy_alloc(struct hpks_copy *c, int rank, const int64_t *dims, size_t esize, size_t extra)
{
	size_t total = 0, head = (extra + 15) / 16 * 16;
	char *blk;

	memset(c, 0, sizeof *c);
	if (rank == 0) {
		static const int64_t one = 1;
		rank = 1;
		dims = &one;
	}
	c->rank = rank;
	c->esize = esize;
	for (int d = 0; d < rank; d++) {
		c->dims[d] = dims[d];
		if (dims[d] < 0 || (uint64_t)dims[d] > HPKS_TABLE_MAX)
			total = HPKS_TABLE_MAX + 1; /* never a wrapped sum */
		else
			total += (size_t)dims[d] + 1;
	}
	if (total > HPKS_TABLE_MAX) { /* hpks_copy_error says so */
		errno = E2BIG;
		return NULL;
	}
	blk = calloc(1, head + total * sizeof(int64_t));
	if (!blk)
		return NULL;
	total = 0;
	for (int d = 0; d < rank; d++) {
		c->off[d] = (int64_t *)(blk + head) + total;
		total += (size_t)dims[d] + 1;
	}
	return blk;
}

void hpks_copy_finish(struct hpks_copy *c)
{
	const int64_t *o = c->off[c->rank - 1];

	int64_t n = c->dims[c->rank - 1], lo = 0, hi;

	c->inner_contig = 1;
	for (int64_t i = 0; i < n; i++)
		if (o[i] < 0 || o[i] != o[0] + i)
			c->inner_contig = 0;
	/* constant padding: fill, one contiguous run, fill */
	while (lo < n && o[lo] < 0)
		lo++;
	hi = lo;
	while (hi < n && o[hi] >= 0 && o[hi] == o[lo] + (hi - lo))
		hi++;
	c->inner_lo = c->inner_hi = -1;
	if (lo < hi) {
		int64_t i = hi;
		while (i < n && o[i] < 0)
			i++;
		if (i == n) {
			c->inner_lo = lo;
			c->inner_hi = hi;
		}
	}
}

struct copy_job {
	const struct hpks_copy *c;
	const char *src;
	char *dst;
};

static void copy_elems(const struct hpks_copy *c, const char *src, char *dst, const int64_t *o, int64_t n)
{
	size_t es = c->esize;

	for (int64_t i = 0; i < n; i++) {
		const void *s = o[i] < 0 ? (const void *)c->fill : src + o[i] * (int64_t)es;
		switch (es) {
		case 1: dst[i] = *(const char *)s; break;
		case 2: memcpy(dst + 2 * i, s, 2); break;
		case 4: memcpy(dst + 4 * i, s, 4); break;
		case 8: memcpy(dst + 8 * i, s, 8); break;
		default: memcpy(dst + (size_t)i * es, s, es); break;
		}
	}
}

static void fill_elems(const struct hpks_copy *c, char *dst, int64_t n)
{
	for (int64_t i = 0; i < n; i++)
		memcpy(dst + (size_t)i * c->esize, c->fill, c->esize);
}

static void copy_rows(void *arg, int64_t begin, int64_t end, int tid)
{
	const struct copy_job *j = arg;
	const struct hpks_copy *c = j->c;
	int r = c->rank - 1;
	int64_t idx[HP_MAX_RANK], inner = c->dims[r], rem = begin;
	size_t rowb = (size_t)inner * c->esize;

	(void)tid;
	for (int d = r - 1; d >= 0; d--) {
		idx[d] = rem % c->dims[d];
		rem /= c->dims[d];
	}
	for (int64_t row = begin; row < end; row++) {
		int64_t base = 0;
		int fill = 0;
		char *dst = j->dst + (size_t)row * rowb;
		for (int d = 0; d < r; d++) {
			int64_t o = c->off[d][idx[d]];
			fill |= o < 0;
			base += o;
		}
		if (fill)
			fill_elems(c, dst, inner);
		else if (c->inner_contig)
			memcpy(dst, j->src + (base + c->off[r][0]) * (int64_t)c->esize, rowb);
		else if (c->inner_lo >= 0) {
			size_t es = c->esize;
			fill_elems(c, dst, c->inner_lo);
			memcpy(dst + c->inner_lo * es, j->src + (base + c->off[r][c->inner_lo]) * (int64_t)es,
			       (size_t)(c->inner_hi - c->inner_lo) * es);
			fill_elems(c, dst + c->inner_hi * es, inner - c->inner_hi);
		} else
			copy_elems(c, j->src + base * (int64_t)c->esize, dst, c->off[r], inner);
		for (int d = r - 1; d >= 0; d--) {
			if (++idx[d] < c->dims[d])
				break;
			idx[d] = 0;
		}
	}
}

void hpks_copy_run(const struct hpks_copy *c, const void *src, void *dst, struct hp_pool *pool)
{
	struct copy_job j = { c, src, dst };
	int64_t rows = 1, inner = c->dims[c->rank - 1];

	for (int d = 0; d < c->rank - 1; d++)
		rows *= c->dims[d];
	if (rows == 0 || inner == 0)
		return;
	hp_parallel_for(pool, rows, 1 + (int64_t)(32768 / ((size_t)inner * c->esize + 1)), copy_rows, &j);
}
