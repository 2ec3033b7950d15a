/* Small operators: the window functions (HannWindow, HammingWindow,
 * BlackmanWindow; size must be a compile-time constant), CastLike,
 * Det (LU with partial pivoting in double), BitShift (broadcasting,
 * unsigned integers) and MelWeightMatrix; the placeholders of deferred If
 * and Loop. */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/shape_util.h"
#include "kernels/train_util.h"
#include "kernels/index_impl.h"

static int is_float(enum hp_dtype t)
{
	return t == HP_F32 || t == HP_F64 || t == HP_F16 || t == HP_BF16;
}

/* ---- windows ------------------------------------------------------------- */

static int window_prepare(struct hp_graph *g, struct hp_node *n)
{
	int64_t size = 0;
	int cnt = 0, rc = hpks_const_ints(g, n, 0, "size", &size, 1, &cnt);
	enum hp_dtype t = (enum hp_dtype)hp_attr_int(n, "output_datatype", HP_F32); /* ONNX codes */
	struct hp_shape s = { 1, { size } };

	if (rc < 0)
		return rc;
	if (cnt != 1 || size < 0)
		return hp_node_error(g, n, HP_ESHAPE, "size must be one non-negative integer");
	if (!hp_dtype_size(t) || t == HP_STRING || t == HP_BOOL)
		return hp_node_error(g, n, HP_EUNSUPPORTED, "output_datatype %s is not supported", hp_dtype_name(t));
	hpks_set_out(g, n, 0, t, &s);
	return 0;
}

static int window_run(const struct hp_node *n, const struct hp_kargs *a)
{
	struct hp_tensor *y = &a->out[0];
	int64_t size = y->shape.dims[0], N = hp_attr_int(n, "periodic", 1) ? size : size - 1;

	for (int64_t i = 0; i < size; i++) {
		double x = N > 0 ? 2 * M_PI * (double)i / (double)N : 0, v;
		if (!strcmp(n->op_type, "HannWindow"))
			v = 0.5 - 0.5 * cos(x);
		else if (!strcmp(n->op_type, "HammingWindow"))
			v = 25.0 / 46 - 21.0 / 46 * cos(x);
		else
			v = 0.42 - 0.5 * cos(x) + 0.08 * cos(2 * x);
		hpks_put_f(y->data, y->dtype, i, v);
	}
	return 0;
}

/* ---- CastLike(input, target_type) ------------------------------------------ */

static int castlike_prepare(struct hp_graph *g, struct hp_node *n)
{
	const struct hp_value *x = hpks_in(g, n, 0), *like = hpks_in(g, n, 1);

	if (!is_float(like->dtype) && !is_float(x->dtype) && like->dtype != x->dtype)
		return hp_node_error(g, n, HP_EUNSUPPORTED, "integer to integer CastLike (%s to %s) is not supported",
				     hp_dtype_name(x->dtype), hp_dtype_name(like->dtype));
	if (!hp_dtype_size(x->dtype) || !hp_dtype_size(like->dtype) || x->dtype == HP_STRING || like->dtype == HP_STRING)
		return hp_node_error(g, n, HP_EUNSUPPORTED, "%s to %s is not supported", hp_dtype_name(x->dtype),
				     hp_dtype_name(like->dtype));
	hpks_set_out(g, n, 0, like->dtype, &x->shape);
	return 0;
}

static int castlike_run(const struct hp_node *n, const struct hp_kargs *a)
{
	const struct hp_tensor *x = &a->in[0];
	struct hp_tensor *y = &a->out[0];
	int64_t cnt = hp_shape_numel(&x->shape);

	(void)n;
	if (x->dtype == y->dtype) {
		hpks_copy_bytes(y->data, x->data, hp_tensor_bytes(x));
		return 0;
	}
	for (int64_t i = 0; i < cnt; i++) {
		double v = hpks_get_f(x->data, x->dtype, i);
		if (y->dtype == HP_BOOL)
			((uint8_t *)y->data)[i] = v != 0;
		else
			hpks_put_f(y->data, y->dtype, i, v);
	}
	return 0;
}

/* ---- Det([..., M, M]) ------------------------------------------------------- */

static int det_prepare(struct hp_graph *g, struct hp_node *n)
{
	const struct hp_value *x = hpks_in(g, n, 0);
	struct hp_shape s = x->shape;
	int r = s.rank;

	if (!is_float(x->dtype) || r < 2 || s.dims[r - 1] != s.dims[r - 2])
		return hp_node_error(g, n, HP_ESHAPE, "input must be float [..., M, M]");
	s.rank -= 2;
	hpks_set_out(g, n, 0, x->dtype, &s);
	n->workspace = (size_t)(x->shape.dims[r - 1] * x->shape.dims[r - 1] + 1) * sizeof(double);
	return 0;
}

static double det_lu(double *m, int64_t k)
{
	double det = 1;

	for (int64_t c = 0; c < k; c++) {
		int64_t piv = c;
		for (int64_t r = c + 1; r < k; r++)
			if (fabs(m[r * k + c]) > fabs(m[piv * k + c]))
				piv = r;
		if (m[piv * k + c] == 0)
			return 0;
		if (piv != c) {
			for (int64_t j = 0; j < k; j++) {
				double t = m[c * k + j];
				m[c * k + j] = m[piv * k + j], m[piv * k + j] = t;
			}
			det = -det;
		}
		det *= m[c * k + c];
		for (int64_t r = c + 1; r < k; r++) {
			double f = m[r * k + c] / m[c * k + c];
			for (int64_t j = c; j < k; j++)
				m[r * k + j] -= f * m[c * k + j];
		}
	}
	return det;
}

static int det_run(const struct hp_node *n, const struct hp_kargs *a)
{
	const struct hp_tensor *x = &a->in[0];
	int64_t k = x->shape.dims[x->shape.rank - 1], cnt = hp_shape_numel(&a->out[0].shape);
	double *m = a->ws;

	(void)n;
	for (int64_t b = 0; b < cnt; b++) {
		for (int64_t i = 0; i < k * k; i++)
			m[i] = hpks_get_f(x->data, x->dtype, b * k * k + i);
		hpks_put_f(a->out[0].data, x->dtype, b, det_lu(m, k));
	}
	return 0;
}

/* ---- BitShift(X, Y; direction) ---------------------------------------------- */

static int bitshift_prepare(struct hp_graph *g, struct hp_node *n)
{
	const struct hp_value *x = hpks_in(g, n, 0), *y = hpks_in(g, n, 1);
	const char *dir = hp_attr_string(n, "direction", "");
	struct hp_shape s;
	int rc;

	if (x->dtype != y->dtype || (x->dtype != HP_U8 && x->dtype != HP_U16 && x->dtype != HP_U32 && x->dtype != HP_U64))
		return hp_node_error(g, n, HP_EUNSUPPORTED, "inputs must be one unsigned integer dtype");
	if (strcmp(dir, "LEFT") && strcmp(dir, "RIGHT"))
		return hp_node_error(g, n, HP_EMODEL, "direction '%s' is not LEFT or RIGHT", dir);
	if ((rc = tk_broadcast(g, n, &x->shape, &y->shape, &s)) < 0)
		return rc;
	hpks_set_out(g, n, 0, x->dtype, &s);
	return 0;
}

static uint64_t ldu(const void *d, enum hp_dtype t, int64_t i)
{
	switch (t) {
	case HP_U8: return ((const uint8_t *)d)[i];
	case HP_U16: return ((const uint16_t *)d)[i];
	case HP_U32: return ((const uint32_t *)d)[i];
	default: return ((const uint64_t *)d)[i];
	}
}

static int bitshift_run(const struct hp_node *n, const struct hp_kargs *a)
{
	const struct hp_tensor *x = &a->in[0], *y = &a->in[1];
	struct hp_tensor *z = &a->out[0];
	int left = !strcmp(hp_attr_string(n, "direction", ""), "LEFT");
	int64_t sx[HP_MAX_RANK], sy[HP_MAX_RANK], cnt = hp_shape_numel(&z->shape);
	unsigned bits = 8 * (unsigned)hp_dtype_size(x->dtype);

	tk_bcast_strides(&z->shape, &x->shape, sx);
	tk_bcast_strides(&z->shape, &y->shape, sy);
	for (int64_t i = 0; i < cnt; i++) {
		uint64_t v = ldu(x->data, x->dtype, tk_offset(&z->shape, sx, i));
		uint64_t s = ldu(y->data, y->dtype, tk_offset(&z->shape, sy, i));
		v = s >= bits ? 0 : left ? v << s : v >> s;
		hpki_put_i(z->data, z->dtype, i, (int64_t)v);
	}
	return 0;
}

/* ---- MelWeightMatrix(num_mel_bins, dft_length, sample_rate, lower_edge_hertz,
 * upper_edge_hertz) -> [dft_length / 2 + 1, num_mel_bins] ------------------
 * Folds (every input must be constant: they set the shape); the triangle
 * filters as ONNX's reference builds them, the mel edges in float32 like it. */

static int mel_fill(const double *in, double *w, int64_t bins, int64_t mels)
{
	float lo = (float)(2595 * log10f(1 + (float)in[3] / 700)), hi = (float)(2595 * log10f(1 + (float)in[4] / 700));
	float step = (hi - lo) / (float)(mels + 2); /* float32, as the reference computes it */
	int64_t *f = malloc((size_t)(mels + 2) * sizeof *f);

	if (!f)
		return -ENOMEM;
	for (int64_t i = 0; i < mels + 2; i++) {
		double hz = 700 * (pow(10, ((double)i * step + lo) / 2595) - 1);
		f[i] = (int64_t)floor((in[1] + 1) * hz / in[2]);
	}
	for (int64_t i = 0; i < mels; i++) {
		int64_t l = f[i], c = f[i + 1], h = f[i + 2];
		if (c == l && c >= 0 && c < bins)
			w[c * mels + i] = 1;
		for (int64_t j = l; c != l && j <= c; j++)
			if (j >= 0 && j < bins)
				w[j * mels + i] = (double)(j - l) / (double)(c - l);
		for (int64_t j = c; h > c && j < h; j++)
			if (j >= 0 && j < bins)
				w[j * mels + i] = (double)(h - j) / (double)(h - c);
	}
	free(f);
	return 0;
}

static int mel_prepare(struct hp_graph *g, struct hp_node *n)
{
	enum hp_dtype t = (enum hp_dtype)hp_attr_int(n, "output_datatype", HP_F32);
	double in[5], *w;
	void *out;
	int64_t bins, mels;

	for (int i = 0; i < 5; i++) {
		const struct hp_value *v = hpks_in(g, n, i);
		if (hp_shape_numel(&v->shape) != 1 || !v->data)
			return hp_node_error(g, n, v->data ? HP_ESHAPE : HP_ENOTCONST,
					     "input %d must be a compile-time constant scalar (the inputs set the shape)", i);
		in[i] = hpks_get_f(v->data, v->dtype, 0);
	}
	mels = (int64_t)in[0], bins = (int64_t)in[1] / 2 + 1;
	if (mels < 1 || bins < 1 || in[2] <= 0 || (t != HP_F32 && t != HP_F64))
		return hp_node_error(g, n, HP_EMODEL, "num_mel_bins, dft_length, sample_rate or output_datatype is not valid");
	w = calloc((size_t)(bins * mels), sizeof *w);
	out = malloc((size_t)(bins * mels) * hp_dtype_size(t));
	if (!w || !out || mel_fill(in, w, bins, mels) < 0) {
		free(w), free(out);
		return hp_node_error(g, n, -ENOMEM, "out of memory");
	}
	for (int64_t i = 0; i < bins * mels; i++)
		hpks_put_f(out, t, i, w[i]);
	free(w);
	hpks_set_out(g, n, 0, t, &(struct hp_shape){ 2, { bins, mels } });
	hpks_set_out_data(g, n, 0, out);
	return 0;
}

static int mel_run(const struct hp_node *n, const struct hp_kargs *a)
{
	(void)a;
	return hp_node_error(NULL, n, HP_EINTERNAL, "runs only folded");
}

#define OP(var, nm, lo, hi, prep, rn)                                                                 \
	static const struct hp_op var = { .domain = "", .name = nm, .min_inputs = lo, .max_inputs = hi,  \
					  .min_outputs = 1, .max_outputs = 1, .prepare = prep, .run = rn }

OP(op_hann, "HannWindow", 1, 1, window_prepare, window_run);
OP(op_hamming, "HammingWindow", 1, 1, window_prepare, window_run);
OP(op_blackman, "BlackmanWindow", 1, 1, window_prepare, window_run);
OP(op_castlike, "CastLike", 2, 2, castlike_prepare, castlike_run);
OP(op_det, "Det", 1, 1, det_prepare, det_run);
OP(op_bitshift, "BitShift", 2, 2, bitshift_prepare, bitshift_run);
OP(op_mel, "MelWeightMatrix", 5, 5, mel_prepare, mel_run);

/* ---- deferred If / Loop (ai.hpdlf) -------------------------------------------
 * The importer's placeholder for control flow decided at shape inference
 * (onnx/control_defer.c); hp_graph_infer folds it when its condition or trip
 * count is known.  Reaching prepare means it is not: refused with the reason. */

static int deferred_prepare(struct hp_graph *g, struct hp_node *n)
{
	int cond = !strcmp(n->op_type, "If");
	int trip = !cond && n->ninputs > 0 && n->inputs[0] >= 0 && !g->values[n->inputs[0]].data;

	return hp_error(HP_EUNSUPPORTED, "%s: %s '%s': the %s is computed at run time; hpdlf needs it constant (it %s)",
			g->path, n->op_type, n->name, trip ? "trip count" : "condition",
			cond ? "inlines the subgraph of the branch taken" : "unrolls the loop body subgraph");
}

static const struct hp_op op_deferred_if = {
	.domain = "ai.hpdlf", .name = "If", .min_inputs = 1, .max_inputs = 1 << 20, .min_outputs = 0,
	.max_outputs = 1 << 20, .prepare = deferred_prepare, .run = NULL,
};
static const struct hp_op op_deferred_loop = {
	.domain = "ai.hpdlf", .name = "Loop", .min_inputs = 0, .max_inputs = 1 << 20, .min_outputs = 0,
	.max_outputs = 1 << 20, .prepare = deferred_prepare, .run = NULL,
};

const struct hp_op *const hp_ops_misc[] = {
	&op_hann, &op_hamming, &op_blackman, &op_castlike, &op_det, &op_bitshift, &op_mel,
	&op_deferred_if, &op_deferred_loop, NULL,
};
