/* DFT (opset 17: axis, inverse, onesided, dft_length as a constant input),
 * STFT (frame_step and frame_length constants, optional window, onesided)
 * and MaxUnpool.  The transforms are direct O(n^2) sums in double: exact
 * for the short signals models use them on, not an FFT. */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/shape_util.h"

struct dpriv {
	int axis, inverse, onesided;
	int64_t len, step;   /* DFT length; STFT frame_length and frame_step */
};

static int new_dpriv(const struct hp_graph *g, struct hp_node *n, struct dpriv **p)
{
	if (!(*p = calloc(1, sizeof **p)))
		return hp_node_error(g, n, -ENOMEM, "out of memory");
	n->priv = *p;
	return 0;
}

static int opt_const(const struct hp_graph *g, const struct hp_node *n, int i, const char *what, int64_t *v)
{
	int cnt = 0, rc;

	if (!hpks_in(g, n, i))
		return 0;
	rc = hpks_const_ints(g, n, i, what, v, 1, &cnt);
	return rc < 0 ? rc : cnt == 1 ? 0 : hp_node_error(g, n, HP_ESHAPE, "%s must be one integer", what);
}

/* ---- DFT(input [..., n, 1|2], dft_length?) -------------------------------- */

static int dft_prepare(struct hp_graph *g, struct hp_node *n)
{
	const struct hp_value *x = hpks_in(g, n, 0);
	struct hp_shape s = x->shape;
	struct dpriv *p;
	int r = s.rank, rc = new_dpriv(g, n, &p);

	if (rc == 0)
		rc = hpks_axis(g, n, hp_attr_int(n, "axis", 1), r - 1, &p->axis);
	if (rc < 0)
		return rc;
	if ((x->dtype != HP_F32 && x->dtype != HP_F64) || r < 2 || (s.dims[r - 1] != 1 && s.dims[r - 1] != 2))
		return hp_node_error(g, n, HP_ESHAPE, "input must be float [..., n, 1 or 2]");
	p->len = s.dims[p->axis];
	if ((rc = opt_const(g, n, 1, "dft_length", &p->len)) < 0)
		return rc;
	p->inverse = (int)hp_attr_int(n, "inverse", 0);
	p->onesided = (int)hp_attr_int(n, "onesided", 0);
	s.dims[p->axis] = p->onesided ? p->len / 2 + 1 : p->len;
	s.dims[r - 1] = 2;
	hpks_set_out(g, n, 0, x->dtype, &s);
	return 0;
}

static int dft_run(const struct hp_node *n, const struct hp_kargs *a)
{
	const struct dpriv *p = n->priv;
	const struct hp_tensor *x = &a->in[0];
	struct hp_tensor *y = &a->out[0];
	int r = x->shape.rank;
	int64_t cin = x->shape.dims[r - 1], nin = x->shape.dims[p->axis], nout = y->shape.dims[p->axis];
	int64_t inner = 1, outer = 1;
	double sign = p->inverse ? 1 : -1, scale = p->inverse ? 1.0 / (double)p->len : 1;

	for (int d = p->axis + 1; d < r - 1; d++)
		inner *= x->shape.dims[d];
	for (int d = 0; d < p->axis; d++)
		outer *= x->shape.dims[d];
	for (int64_t o = 0; o < outer; o++)
		for (int64_t i = 0; i < inner; i++)
			for (int64_t k = 0; k < nout; k++) {
				double re = 0, im = 0;
				for (int64_t t = 0; t < p->len && t < nin; t++) {
					int64_t at = ((o * nin + t) * inner + i) * cin;
					double xr = hpks_get_f(x->data, x->dtype, at), xi = cin == 2 ? hpks_get_f(x->data, x->dtype, at + 1) : 0;
					double ang = sign * 2 * M_PI * (double)((k * t) % p->len) / (double)p->len;
					re += xr * cos(ang) - xi * sin(ang);
					im += xr * sin(ang) + xi * cos(ang);
				}
				int64_t at = ((o * nout + k) * inner + i) * 2;
				hpks_put_f(y->data, y->dtype, at, re * scale);
				hpks_put_f(y->data, y->dtype, at + 1, im * scale);
			}
	return 0;
}

/* ---- STFT(signal [B, L, 1|2], frame_step, window?, frame_length?) -------- */

static int stft_prepare(struct hp_graph *g, struct hp_node *n)
{
	const struct hp_value *x = hpks_in(g, n, 0), *w = hpks_in(g, n, 2);
	struct dpriv *p;
	int rc = new_dpriv(g, n, &p);
	struct hp_shape s;

	if (rc == 0)
		rc = opt_const(g, n, 1, "frame_step", &p->step);
	p->len = w ? hp_shape_numel(&w->shape) : 0;
	if (rc == 0)
		rc = opt_const(g, n, 3, "frame_length", &p->len);
	if (rc < 0)
		return rc;
	if ((x->dtype != HP_F32 && x->dtype != HP_F64) || x->shape.rank != 3 || x->shape.dims[2] > 2 || p->step < 1 ||
	    p->len < 1 || p->len > x->shape.dims[1] || (w && hp_shape_numel(&w->shape) != p->len))
		return hp_node_error(g, n, HP_ESHAPE, "signal [B, L, 1|2], frame_step >= 1 and a frame length <= L "
				     "(the window's) are needed");
	p->onesided = (int)hp_attr_int(n, "onesided", 1);
	s = (struct hp_shape){ 4, { x->shape.dims[0], (x->shape.dims[1] - p->len) / p->step + 1,
				    p->onesided ? p->len / 2 + 1 : p->len, 2 } };
	hpks_set_out(g, n, 0, x->dtype, &s);
	return 0;
}

static int stft_run(const struct hp_node *n, const struct hp_kargs *a)
{
	const struct dpriv *p = n->priv;
	const struct hp_tensor *x = &a->in[0], *w = a->nin > 2 && a->in[2].data ? &a->in[2] : NULL;
	struct hp_tensor *y = &a->out[0];
	int64_t B = y->shape.dims[0], F = y->shape.dims[1], K = y->shape.dims[2], L = x->shape.dims[1], c = x->shape.dims[2];

	for (int64_t b = 0; b < B; b++)
		for (int64_t f = 0; f < F; f++)
			for (int64_t k = 0; k < K; k++) {
				double re = 0, im = 0;
				for (int64_t t = 0; t < p->len; t++) {
					int64_t at = (b * L + f * p->step + t) * c;
					double wt = w ? hpks_get_f(w->data, w->dtype, t) : 1;
					double xr = wt * hpks_get_f(x->data, x->dtype, at);
					double xi = c == 2 ? wt * hpks_get_f(x->data, x->dtype, at + 1) : 0;
					double ang = -2 * M_PI * (double)((k * t) % p->len) / (double)p->len;
					re += xr * cos(ang) - xi * sin(ang);
					im += xr * sin(ang) + xi * cos(ang);
				}
				hpks_put_f(y->data, y->dtype, ((b * F + f) * K + k) * 2, re);
				hpks_put_f(y->data, y->dtype, ((b * F + f) * K + k) * 2 + 1, im);
			}
	return 0;
}

/* ---- MaxUnpool(X, I, output_shape?) ---------------------------------------- */

static int unpool_prepare(struct hp_graph *g, struct hp_node *n)
{
	const struct hp_value *x = hpks_in(g, n, 0), *ix = hpks_in(g, n, 1);
	const int64_t *ks, *st, *pd;
	int r = x->shape.rank, nk = hp_attr_ints(n, "kernel_shape", &ks), ns = hp_attr_ints(n, "strides", &st);
	int np = hp_attr_ints(n, "pads", &pd), cnt = 0, rc;
	struct hp_shape s = x->shape;

	if (r < 3 || nk != r - 2 || (ns >= 0 && ns != nk) || (np >= 0 && np != 2 * nk) || !hp_shape_equal(&ix->shape, &x->shape))
		return hp_node_error(g, n, HP_ESHAPE, "kernel_shape/strides/pads do not fit X, or I differs from X in shape");
	for (int d = 0; d < nk; d++)
		s.dims[2 + d] = (x->shape.dims[2 + d] - 1) * (ns > 0 ? st[d] : 1) + ks[d] - (np > 0 ? pd[d] + pd[nk + d] : 0);
	struct hp_shape *dflt = malloc(sizeof *dflt); /* the shape the indices count in */
	if (!dflt)
		return hp_node_error(g, n, -ENOMEM, "out of memory");
	*dflt = s;
	n->priv = dflt;
	if (hpks_in(g, n, 2)) {
		int64_t os[HP_MAX_RANK];
		if ((rc = hpks_const_ints(g, n, 2, "output_shape", os, HP_MAX_RANK, &cnt)) < 0)
			return rc;
		if (cnt != r)
			return hp_node_error(g, n, HP_ESHAPE, "output_shape has %d values for rank %d", cnt, r);
		memcpy(s.dims, os, sizeof(int64_t) * (size_t)r);
	}
	hpks_set_out(g, n, 0, x->dtype, &s);
	return 0;
}

static int unpool_run(const struct hp_node *n, const struct hp_kargs *a)
{
	const struct hp_tensor *x = &a->in[0], *ix = &a->in[1];
	const struct hp_shape *ds = n->priv;
	struct hp_tensor *y = &a->out[0];
	int64_t cnt = hp_shape_numel(&x->shape), per_x = x->shape.dims[0] * x->shape.dims[1];
	int64_t px = per_x ? cnt / per_x : 1, pd = per_x ? hp_shape_numel(ds) / per_x : 1;
	size_t es = hp_dtype_size(x->dtype);

	memset(y->data, 0, hp_tensor_bytes(y));
	for (int64_t i = 0; i < cnt; i++) {
		/* indices count in the N*C*spatial tensor of the default output shape,
		 * as MaxPool gave them; a given output_shape keeps their coordinates */
		int64_t k = hpks_get_i(ix->data, ix->dtype, i), plane = i / (px ? px : 1), off = 0, mul = 1, loc;
		if (k < plane * pd || k >= (plane + 1) * pd)
			return hp_node_error(NULL, n, HP_EDATA, "index %" PRId64 " is outside its plane", k);
		loc = k - plane * pd;
		for (int d = ds->rank - 1; d >= 2; d--) {
			int64_t c = loc % ds->dims[d];
			loc /= ds->dims[d];
			if (c >= y->shape.dims[d])
				return hp_node_error(NULL, n, HP_EDATA, "index %" PRId64 " falls outside output_shape", k);
			off += c * mul;
			mul *= y->shape.dims[d];
		}
		memcpy((char *)y->data + (size_t)(plane * mul + off) * es, (const char *)x->data + (size_t)i * es, es);
	}
	return 0;
}

#define OP(var, nm, lo, hi, prep, rn)                                                                 \
	static const struct hp_op var = { .domain = "", .name = nm, .min_inputs = lo, .max_inputs = hi,  \
					  .min_outputs = 1, .max_outputs = 1, .prepare = prep, .run = rn }

OP(op_dft, "DFT", 1, 2, dft_prepare, dft_run);
OP(op_stft, "STFT", 2, 4, stft_prepare, stft_run);
OP(op_unpool, "MaxUnpool", 2, 3, unpool_prepare, unpool_run);

const struct hp_op *const hp_ops_spectral[] = { &op_dft, &op_stft, &op_unpool, NULL };
