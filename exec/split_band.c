/* The band pass of operator splitting (see split.h): chains of ops that
 * compute each row of the split axis from a window of rows of their input
 * are rewritten band by band. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hpdlf/error.h"
#include "hpdlf/kernels.h"
#include "exec/exec_internal.h"
#include "exec/split.h"
#include "kernels/band.h"

enum band_kind {
	BK_NONE = 0,   /* not banded: a barrier */
	BK_ROWS,       /* output row r from input rows r (elementwise, channel ops) */
	BK_WINDOW,     /* Conv, pooling: a window of input rows, halos */
	BK_UPSAMPLE,   /* ConvTranspose with kernel == stride: rows [r/s, ...) */
	BK_RNN,        /* RNN, GRU, LSTM with layout 1: batch entries, every output */
};

/* How a value is cut: bands [lo[i], lo[i+1]) of the axis, value val[i]. */
struct band {
	int n;                 /* 0: whole */
	int64_t *lo;
	int *val;
};

/* Geometry of a window op on the split axis. */
struct window {
	int64_t k, s, d, pl, ph;
	int sp, nsp;           /* spatial index of the axis, spatial dims */
};

struct bp {
	struct hp_graph *g;
	int k, axis, training, lean;
	int rejoin;            /* join the bands back before ops whose weights outweigh
				* their banded inputs (see rejoin_here) */
	int nrejoined;         /* ops kept whole so */
	uint64_t target;
	struct band *b;        /* per original value */
	char *whole;           /* per original value: its whole form exists */
	char *cut_read;        /* per original value: read cut by a node cut for its own need */
	char *param;           /* per original value: a trainable parameter or folded from one
				* (a PyTorch GroupNorm's Unsqueeze of its weight): autodiff
				* unfolds those after the split, and the gradient reaches the
				* weight through them */
	int ahead;             /* cut the producers of those values too */
	int nahead;            /* nodes cut only for that */
	int nvals;
	int seq;
	int nsplit;
	int band;              /* sched hint of the nodes emitted now (band + 1, 0: none) */
};

static const char *const rows_ops[] = { "Relu", "LeakyRelu", "Sigmoid", "Tanh", "Clip", "Elu", "Selu",
					"HardSigmoid", "Softplus", "Neg", "Abs", "Exp", "Identity", "Add", "Sub",
					"Mul", "Div", "Max", "Min", "Pow", "Sqrt", "Erf", "Gelu", "HardSwish", NULL };

static int in_list(const char *op, const char *const *l)
{
	for (; *l; l++)
		if (!strcmp(op, *l))
			return 1;
	return 0;
}

/* RNN, GRU, LSTM of the ONNX domain. */
static int is_rnn(const struct hp_node *n)
{
	return !n->domain[0] && (!strcmp(n->op_type, "LSTM") || !strcmp(n->op_type, "GRU") || !strcmp(n->op_type, "RNN"));
}

static const struct hp_shape *shape_of(const struct bp *p, int v)
{
	return &p->g->values[v].shape;
}

static uint64_t vbytes(const struct hp_graph *g, int v)
{
	struct hp_tensor t = { .dtype = g->values[v].dtype, .shape = g->values[v].shape };

	return hp_tensor_bytes(&t);
}

/* The planner's need of one unsplit node: distinct inputs, outputs, scratch. */
static uint64_t node_need(const struct hp_graph *g, const struct hp_node *n)
{
	uint64_t need = (n->workspace + 4095) / 4096 * 4096;

	for (int j = 0; j < n->ninputs; j++) {
		int v = n->inputs[j], dup = 0;
		for (int i = 0; i < j; i++)
			dup |= n->inputs[i] == v;
		if (v >= 0 && !dup && g->values[v].kind != HP_VALUE_CONSTANT)
			need += (vbytes(g, v) + 4095) / 4096 * 4096;
	}
	for (int o = 0; o < n->noutputs; o++)
		if (n->outputs[o] >= 0)
			need += (vbytes(g, n->outputs[o]) + 4095) / 4096 * 4096;
	return need;
}

/* The same for a training step: a node's gradient holds its output's
 * gradient beside the inputs and outputs its forward held (Relu's
 * UnaryGrad: dY, Y, dX), so the node's need counts its outputs twice.
 * Without it the cut followed the forward alone, and a backward node
 * larger than every forward one bounded the smallest budget (a 3-channel
 * stem whose convolution needed little workspace left its Relu's
 * gradient whole: 416 KiB where cut bands needed 376). */
static uint64_t train_need(const struct bp *p, const struct hp_node *n)
{
	uint64_t need = node_need(p->g, n);

	/* a recurrent node's RNNGrad holds every input's gradient too, and
	 * its weights' sums in double (kernels/rnn_grad.c) */
	if (p->training && is_rnn(n))
		return 3 * need;

	if (p->training)
		for (int o = 0; o < n->noutputs; o++)
			if (n->outputs[o] >= 0)
				need += (vbytes(p->g, n->outputs[o]) + 4095) / 4096 * 4096;
	return need;
}

static int attr_at(const struct hp_node *n, const char *name, int i, int64_t dflt)
{
	const int64_t *v;
	int c = hp_attr_ints(n, name, &v);

	return c > i ? (int)v[i] : (int)dflt;
}

/* Window geometry on the axis; -1 if the op cannot be banded there. */
static int window_geom(const struct bp *p, const struct hp_node *n, struct window *w)
{
	const struct hp_shape *x = shape_of(p, n->inputs[0]);
	const char *ap = hp_attr_string(n, "auto_pad", "NOTSET");

	w->nsp = x->rank - 2;
	w->sp = p->axis - 2;
	if (w->nsp < 1 || (strcmp(ap, "NOTSET") && strcmp(ap, "")))
		return -1;
	if (p->axis == 0)
		return 0; /* samples are independent */
	if (!strcmp(n->op_type, "Conv")) {
		const struct hp_shape *wt = shape_of(p, n->inputs[1]);
		w->k = wt->dims[2 + w->sp];
	} else {
		/* ceil_mode: the last window may reach past the pads; a band's
		 * own pads (window_rows) then reach as far, which MaxPool ignores
		 * as it ignores pads, and AveragePool too where it does not count
		 * pads (count_include_pad 0); counting them, it would divide by
		 * more than the whole node does */
		if (hp_attr_int(n, "ceil_mode", 0) &&
		    (strcmp(n->op_type, "MaxPool") && hp_attr_int(n, "count_include_pad", 0)))
			return -1;
		w->k = attr_at(n, "kernel_shape", w->sp, -1);
	}
	w->s = attr_at(n, "strides", w->sp, 1);
	w->d = attr_at(n, "dilations", w->sp, 1);
	w->pl = attr_at(n, "pads", w->sp, 0);
	w->ph = attr_at(n, "pads", w->sp + w->nsp, 0);
	return w->k > 0 && w->s > 0 && w->d > 0 && w->pl < (w->k - 1) * w->d + 1 ? 0 : -1;
}

/* ConvTranspose whose output rows on the axis come from one input row each. */
static int upsample_ok(const struct bp *p, const struct hp_node *n)
{
	const struct hp_shape *wt = shape_of(p, n->inputs[1]);
	int sp = p->axis - 2, nsp = wt->rank - 2;

	if (hp_node_attr(n, "output_shape") || nsp < 1)
		return 0;
	if (p->axis == 0)
		return 1;
	return wt->dims[2 + sp] == attr_at(n, "strides", sp, 1) && attr_at(n, "dilations", sp, 1) == 1 &&
	       attr_at(n, "pads", sp, 0) == 0 && attr_at(n, "pads", sp + nsp, 0) == 0 &&
	       attr_at(n, "output_padding", sp, 0) == 0 && strcmp(hp_attr_string(n, "auto_pad", "NOTSET"), "SAME_UPPER") &&
	       strcmp(hp_attr_string(n, "auto_pad", "NOTSET"), "SAME_LOWER");
}

/* Input j of a rows op: 1 banded like the output, 0 broadcast without the
 * axis (passed whole), -1 neither. */
static int rows_input(const struct bp *p, const struct hp_node *n, int j)
{
	const struct hp_shape *y = shape_of(p, n->outputs[0]);
	int v = n->inputs[j];
	const struct hp_shape *x;
	int at;

	if (v < 0)
		return 0;
	x = shape_of(p, v);
	at = p->axis - (y->rank - x->rank);
	/* training: the gradient of an input broadcast along the axis sums
	 * over it, and band partials added up would not be that sum's bits */
	if ((at < 0 || x->dims[at] == 1) && p->training &&
	    (p->g->values[v].kind != HP_VALUE_CONSTANT || (v < p->nvals && p->param[v])))
		return -1;
	if (at < 0 || x->dims[at] == 1)
		return y->dims[p->axis] == 1 ? -1 : 0;
	if (x->rank != y->rank || x->dims[at] != y->dims[p->axis] || p->g->values[v].kind == HP_VALUE_CONSTANT)
		return -1;
	return 1;
}

static int norm_axis(int64_t a, int rank)
{
	return (int)(a < 0 ? a + rank : a);
}

/* Squeeze, Unsqueeze whose axes (an attribute, or a constant input) leave
 * the batch axis 0 in place: output entry r from input entry r. */
static int squeeze_rows(const struct bp *p, const struct hp_node *n)
{
	const int64_t *ax = NULL;
	int na = hp_attr_ints(n, "axes", &ax);
	int rank = shape_of(p, !strcmp(n->op_type, "Squeeze") ? n->inputs[0] : n->outputs[0])->rank;

	if (p->axis != 0)
		return 0;
	if (na <= 0 && n->ninputs > 1 && n->inputs[1] >= 0) {
		const struct hp_value *v = &p->g->values[n->inputs[1]];
		if ((v->kind != HP_VALUE_CONSTANT && v->kind != HP_VALUE_INITIALIZER) || v->trainable || !v->data ||
		    v->dtype != HP_I64 || v->shape.rank != 1)
			return 0;
		ax = v->data;
		na = (int)v->shape.dims[0];
	}
	if (na <= 0)
		return 0; /* Squeeze of every 1: the batch may be one */
	for (int i = 0; i < na; i++)
		if (norm_axis(ax[i], rank) == 0)
			return 0;
	return 1;
}

/* Reshape to a constant shape whose first entry 0 copies the batch axis
 * 0 (allowzero 0): output entry r from input entry r. */
static int reshape_rows(const struct bp *p, const struct hp_node *n)
{
	const struct hp_value *v = n->ninputs > 1 && n->inputs[1] >= 0 ? &p->g->values[n->inputs[1]] : NULL;

	return p->axis == 0 && v && (v->kind == HP_VALUE_CONSTANT || v->kind == HP_VALUE_INITIALIZER) && !v->trainable &&
	       v->data && v->dtype == HP_I64 && v->shape.rank == 1 && v->shape.dims[0] >= 1 &&
	       ((const int64_t *)v->data)[0] == 0 && !hp_attr_int(n, "allowzero", 0);
}

/* What kind of banding node n allows on the axis. */
static enum band_kind kind_of(const struct bp *p, const struct hp_node *n)
{
	const char *op = n->op_type;
	struct window w;
	int rank;

	if (n->folded || n->domain[0] || n->ninputs < 1 || n->inputs[0] < 0)
		return BK_NONE;
	/* batch entries run alone (kernels/rnn.c): with layout 1 the batch is
	 * axis 0 of X, sequence_lens, the initial states and every output */
	if (is_rnn(n))
		return p->axis == 0 && hp_attr_int(n, "layout", 0) == 1 ? BK_RNN : BK_NONE;
	if (n->noutputs != 1)
		return BK_NONE;
	if (!strcmp(op, "Squeeze") || !strcmp(op, "Unsqueeze"))
		return squeeze_rows(p, n) ? BK_ROWS : BK_NONE;
	if (!strcmp(op, "Reshape"))
		return reshape_rows(p, n) ? BK_ROWS : BK_NONE;
	rank = shape_of(p, n->outputs[0])->rank;
	if (rank <= p->axis || (p->axis > 0 && rank < 3))
		return BK_NONE;
	if (!strcmp(op, "Conv") || !strcmp(op, "MaxPool") || !strcmp(op, "AveragePool"))
		return window_geom(p, n, &w) == 0 ? BK_WINDOW : BK_NONE;
	if (!strcmp(op, "ConvTranspose"))
		return upsample_ok(p, n) ? BK_UPSAMPLE : BK_NONE;
	if (!strcmp(op, "BatchNormalization"))
		return p->training ? BK_NONE : BK_ROWS;
	if (!strcmp(op, "Concat"))
		return norm_axis(hp_attr_int(n, "axis", 0), rank) != p->axis ? BK_ROWS : BK_NONE;
	if (!strcmp(op, "Softmax") || !strcmp(op, "LogSoftmax")) {
		int a = norm_axis(hp_attr_int(n, "axis", p->g->opset >= 13 ? -1 : 1), rank);
		return (p->g->opset >= 13 ? a != p->axis : a > p->axis) ? BK_ROWS : BK_NONE;
	}
	/* inference: products by a weight and Flatten cut along the batch
	 * rows, so a chain need not be joined back before its classifier */
	if (!strcmp(op, "Gemm") || !strcmp(op, "MatMul"))
		return !p->training && p->axis == 0 && hp_node_rows_exact(p->g, n) ? BK_ROWS : BK_NONE;
	if (!strcmp(op, "Flatten"))
		return !p->training && p->axis == 0 &&
			       norm_axis(hp_attr_int(n, "axis", 1), shape_of(p, n->inputs[0])->rank) >= 1 ? BK_ROWS : BK_NONE;
	if (!in_list(op, rows_ops))
		return BK_NONE;
	for (int j = 0; j < n->ninputs; j++)
		if (rows_input(p, n, j) < 0)
			return BK_NONE;
	return rows_input(p, n, 0) == 1 ? BK_ROWS : BK_NONE;
}

/* Inputs of n cut along the axis (the others are passed whole). */
static int banded_input(const struct bp *p, const struct hp_node *n, enum band_kind k, int j)
{
	if (n->inputs[j] < 0)
		return 0;
	if (k == BK_RNN) /* X, sequence_lens, initial_h, initial_c */
		return j == 0 || j == 4 || j == 5 || j == 6;
	if (!strcmp(n->op_type, "Squeeze") || !strcmp(n->op_type, "Unsqueeze") || !strcmp(n->op_type, "Reshape"))
		return j == 0;
	if (k == BK_WINDOW || k == BK_UPSAMPLE || !strcmp(n->op_type, "BatchNormalization") ||
	    !strcmp(n->op_type, "Gemm") || !strcmp(n->op_type, "MatMul") || !strcmp(n->op_type, "Flatten"))
		return j == 0;
	if (!strcmp(n->op_type, "Concat") || !strcmp(n->op_type, "Softmax") || !strcmp(n->op_type, "LogSoftmax"))
		return 1;
	return rows_input(p, n, j) == 1;
}

/* ---- building ---- */

static int new_value(struct bp *p, const char *base, const char *what, int like, const struct hp_shape *s)
{
	char name[512];

	snprintf(name, sizeof name, "%s/%s%d", base, what, p->seq++);
	return hp_graph_add_value(p->g, name, HP_VALUE_ACTIVATION, p->g->values[like].dtype, s);
}

static int const_i64(struct bp *p, int64_t x)
{
	struct hp_shape s = { 1, { 1 } };
	char name[64];
	int v;

	snprintf(name, sizeof name, "split/c%d", p->seq++);
	v = hp_graph_add_value(p->g, name, HP_VALUE_CONSTANT, HP_I64, &s);
	if (v < 0)
		return v;
	p->g->values[v].data = malloc(sizeof x);
	if (!p->g->values[v].data)
		return hp_error(-ENOMEM, "out of memory");
	memcpy(p->g->values[v].data, &x, sizeof x);
	p->g->values[v].src.kind = HP_BLOB_MEMORY;
	return v;
}

static int add_node(struct bp *p, const char *base, const char *op, int nin, const int *in, int out)
{
	char name[512];

	int node;

	snprintf(name, sizeof name, "%s/%s%d", base, op, p->seq++);
	node = hp_graph_add_node(p->g, name, op, nin, in, 1, &out);
	if (node >= 0)
		p->g->nodes[node].sched = p->band;
	return node;
}

/* Rows [a, b) on the axis of value v (a band or a whole value). */
static int slice_rows(struct bp *p, int v, int64_t a, int64_t b)
{
	struct hp_shape s = *shape_of(p, v);
	int in[4] = { v, const_i64(p, a), const_i64(p, b), const_i64(p, p->axis) }, out, rc;

	if (a == 0 && b == s.dims[p->axis])
		return v;
	for (int i = 1; i < 4; i++)
		if (in[i] < 0)
			return in[i];
	s.dims[p->axis] = b - a;
	out = new_value(p, p->g->values[v].name, "rows", v, &s);
	if (out < 0)
		return out;
	rc = add_node(p, p->g->values[v].name, "Slice", 4, in, out);
	return rc < 0 ? rc : out;
}

static int concat_rows(struct bp *p, int n, const int *parts, int out, const char *base)
{
	struct hp_attr a = { .name = "axis", .type = HP_ATTR_INT, .i = p->axis };
	int node;

	if (out < 0) {
		struct hp_shape s = *shape_of(p, parts[0]);
		s.dims[p->axis] = 0;
		for (int i = 0; i < n; i++)
			s.dims[p->axis] += shape_of(p, parts[i])->dims[p->axis];
		out = new_value(p, base, "cat", parts[0], &s);
		if (out < 0)
			return out;
	}
	node = add_node(p, base, "Concat", n, parts, out);
	if (node < 0)
		return node;
	node = hp_graph_add_attr(p->g, node, &a);
	return node < 0 ? node : out;
}

/* A value holding rows [a, b) of original value v. */
static int rows_of(struct bp *p, int v, int64_t a, int64_t b)
{
	const struct band *bd = &p->b[v];
	int parts[bd->n + 1], np = 0;

	if (!bd->n)
		return slice_rows(p, v, a, b);
	for (int i = 0; i < bd->n; i++) {
		int64_t lo = bd->lo[i], hi = bd->lo[i + 1];
		int64_t x = a > lo ? a : lo, y = b < hi ? b : hi;
		if (x >= y)
			continue;
		parts[np] = slice_rows(p, bd->val[i], x - lo, y - lo);
		if (parts[np] < 0)
			return parts[np];
		np++;
	}
	if (np == 1)
		return parts[0];
	return concat_rows(p, np, parts, -1, p->g->values[v].name);
}

/* The whole form of original value v: Concat of its bands, into v itself. */
static int make_whole(struct bp *p, int v)
{
	int rc;

	if (v < 0 || v >= p->nvals || !p->b[v].n || p->whole[v])
		return 0;
	rc = concat_rows(p, p->b[v].n, p->b[v].val, v, p->g->values[v].name);
	if (rc >= 0)
		p->whole[v] = 1;
	return rc < 0 ? rc : 0;
}

/* Output bounds from the reference input's bands: scaled by the size ratio
 * (same rows, pooled rows, upsampled rows), empty bands dropped. */
static int out_bounds(const struct bp *p, int64_t sin, const int64_t *lo, int n, int64_t sout, int64_t *olo)
{
	int m = 0;

	olo[m++] = 0;
	for (int i = 1; i <= n; i++) {
		int64_t x = lo[i] * sout / sin;
		if (x > olo[m - 1])
			olo[m++] = x;
	}
	olo[m - 1] = sout;
	(void)p;
	return m - 1;
}

/* Input rows [*a, *b) and the pads on the axis for output rows [olo, ohi). */
static void window_rows(const struct window *w, int64_t sin, int64_t olo, int64_t ohi, int64_t *a, int64_t *b,
			int64_t *pl, int64_t *ph)
{
	int64_t x = olo * w->s - w->pl, y = (ohi - 1) * w->s - w->pl + (w->k - 1) * w->d + 1;

	*pl = x < 0 ? -x : 0;
	*ph = y > sin ? y - sin : 0;
	*a = x < 0 ? 0 : x;
	*b = y > sin ? sin : y;
}

/* Copy n's attributes to node `to`, with the pads on the axis replaced. */
static int copy_attrs(struct bp *p, const struct hp_node *n, int to, const struct window *w, int64_t pl, int64_t ph)
{
	for (int i = 0; i < n->nattrs; i++) {
		int rc;
		if (w && p->axis > 0 && !strcmp(n->attrs[i].name, "pads"))
			continue;
		rc = hp_graph_add_attr(p->g, to, &n->attrs[i]);
		if (rc < 0)
			return rc;
	}
	if (w && p->axis > 0) {
		int64_t pads[2 * HP_MAX_RANK];
		for (int i = 0; i < 2 * w->nsp; i++)
			pads[i] = attr_at(n, "pads", i, 0);
		pads[w->sp] = pl;
		pads[w->sp + w->nsp] = ph;
		struct hp_attr a = { .name = "pads", .type = HP_ATTR_INTS, .n = 2 * w->nsp, .ints = pads };
		return hp_graph_add_attr(p->g, to, &a);
	}
	return 0;
}

/* The bands of the reference input of n (*ref; a fresh cut of k bands if
 * it is whole). */
static int ref_bands(struct bp *p, const struct hp_node *n, enum band_kind kind, int *ref, int64_t **lo, int *owned)
{
	int64_t s;
	int m = 0;

	*ref = -1;
	for (int j = 0; j < n->ninputs && *ref < 0; j++)
		if (banded_input(p, n, kind, j) && p->b[n->inputs[j]].n)
			*ref = n->inputs[j];
	*owned = *ref < 0;
	if (*ref >= 0) {
		*lo = p->b[*ref].lo;
		return p->b[*ref].n;
	}
	for (int j = 0; j < n->ninputs && *ref < 0; j++)
		if (banded_input(p, n, kind, j))
			*ref = n->inputs[j];
	s = shape_of(p, *ref)->dims[p->axis];
	*lo = malloc((size_t)(p->k + 1) * sizeof **lo);
	if (!*lo)
		return -ENOMEM;
	(*lo)[m++] = 0;
	for (int i = 1; i <= p->k; i++)
		if (i * s / p->k > (*lo)[m - 1])
			(*lo)[m++] = i * s / p->k;
	return m - 1;
}

/* Inputs of band [olo, ohi) of n into in[]; pads of a window op. */
static int band_inputs(struct bp *p, const struct hp_node *n, enum band_kind kind, int64_t olo, int64_t ohi,
		       int *in, const struct window *w, int64_t *pl, int64_t *ph)
{
	for (int j = 0; j < n->ninputs; j++) {
		int v = n->inputs[j];
		int64_t a = olo, b = ohi, sin = v >= 0 ? shape_of(p, v)->dims[p->axis] : 0;
		if (!banded_input(p, n, kind, j)) {
			int rc = make_whole(p, v);
			if (rc < 0)
				return rc;
			in[j] = v;
			continue;
		}
		if (kind == BK_WINDOW && p->axis > 0)
			window_rows(w, sin, olo, ohi, &a, &b, pl, ph);
		else if (kind == BK_UPSAMPLE) {
			int64_t s = shape_of(p, n->outputs[0])->dims[p->axis] / sin;
			a = olo / s;
			b = ohi / s;
		}
		in[j] = rows_of(p, v, a, b);
		if (in[j] < 0)
			return in[j];
	}
	return 0;
}

/* Whether every inner bound is a multiple of `align`. */
static int aligned(const int64_t *olo, int n, int64_t align)
{
	for (int i = 1; i < n; i++)
		if (olo[i] % align)
			return 0;
	return 1;
}

static int64_t widest(const int64_t *olo, int n)
{
	int64_t w = 0;

	for (int i = 0; i < n; i++)
		w = olo[i + 1] - olo[i] > w ? olo[i + 1] - olo[i] : w;
	return w;
}

/* k bands of s rows as even as bounds at multiples of `align` allow (fewer
 * when rounding merges some), on a larger power-of-two multiple where the
 * even bounds already are one (so later pooled layers find them aligned). */
static int even_bounds(int k, int64_t s, int64_t align, int64_t *olo)
{
	int64_t q = align;
	int m = 0, all;

	do {
		all = 1;
		for (int i = 1; i < k; i++)
			all &= (i * s + k / 2) / k % (2 * q) == 0;
		if (all)
			q *= 2;
	} while (all && q < s);
	olo[m++] = 0;
	for (int i = 1; i < k; i++) {
		int64_t x = ((i * s + k / 2) / k + q / 2) / q * q;
		if (x > olo[m - 1] && x < s)
			olo[m++] = x;
	}
	olo[m] = s;
	return m;
}

/* Band i of window op n (Conv, pooling; node `node`) in a training graph
 * cut in rows: where
 * its rows lie in the whole, for the exact data gradient
 * (split_grad.c): group (the first band's output), i, bands, axis, output
 * rows [lo, hi), input rows read [a, b), input and output rows, n's pads
 * on the axis. */
static int tag_band(struct bp *p, const struct hp_node *n, int node, const struct window *w, int i, int64_t hout)
{
	const struct band *bd = &p->b[n->outputs[0]];
	int64_t sin = shape_of(p, n->inputs[0])->dims[p->axis], t[HP_BAND_TAG_N], pl, ph;

	t[0] = bd->val[0];
	t[1] = i;
	t[2] = bd->n;
	t[3] = p->axis;
	t[4] = bd->lo[i];
	t[5] = bd->lo[i + 1];
	window_rows(w, sin, t[4], t[5], &t[6], &t[7], &pl, &ph);
	t[8] = sin;
	t[9] = hout;
	t[10] = w->pl;
	t[11] = w->ph;
	struct hp_attr a = { .name = "hpdlf_band", .type = HP_ATTR_INTS, .n = HP_BAND_TAG_N, .ints = t };
	return hp_graph_add_attr(p->g, node, &a);
}

/* Rewrite n into the bands [olo[i], olo[i + 1]) of its output; its output
 * becomes a banded value.  path >= 0: the conv path the bands must keep. */
static int emit_bands(struct bp *p, const struct hp_node *n, enum band_kind kind, const int64_t *olo, int nb,
		      int path)
{
	int y = n->outputs[0], in[n->ninputs + 1];
	struct hp_shape ys = *shape_of(p, y);
	struct band *bd = &p->b[y];
	struct hp_attr pa = { .name = "hpdlf_path", .type = HP_ATTR_INT, .i = path };
	struct hp_attr lean = { .name = "hpdlf_lean", .type = HP_ATTR_INT, .i = 1 };
	struct hp_attr narrow = { .name = "hpdlf_narrow", .type = HP_ATTR_INT, .i = 1 };
	struct hp_attr unit = { .name = "hpdlf_unit_axis", .type = HP_ATTR_INT, .i = p->axis };
	struct window w;
	int64_t hout = ys.dims[p->axis];

	if (kind == BK_WINDOW && window_geom(p, n, &w) < 0)
		return HP_EINTERNAL;
	bd->lo = malloc((size_t)(nb + 2) * sizeof *bd->lo);
	bd->val = malloc((size_t)(nb + 1) * sizeof *bd->val);
	if (!bd->lo || !bd->val)
		return -ENOMEM;
	memcpy(bd->lo, olo, (size_t)(nb + 1) * sizeof *bd->lo);
	bd->n = nb;
	for (int i = 0; i < bd->n; i++) {
		int64_t pl = 0, ph = 0;
		int rc, node;
		p->band = i + 1; /* depth first: band i through as many layers as its halos allow */
		rc = band_inputs(p, n, kind, bd->lo[i], bd->lo[i + 1], in, &w, &pl, &ph);
		if (rc < 0)
			return rc;
		ys.dims[p->axis] = bd->lo[i + 1] - bd->lo[i];
		bd->val[i] = new_value(p, p->g->values[y].name, "band", y, &ys);
		if (bd->val[i] < 0)
			return bd->val[i];
		node = add_node(p, n->name, n->op_type, n->ninputs, in, bd->val[i]);
		if (node < 0)
			return node;
		rc = copy_attrs(p, n, node, kind == BK_WINDOW ? &w : NULL, pl, ph);
		if (rc >= 0 && path >= 0)
			rc = hp_graph_add_attr(p->g, node, &pa);
		if (rc >= 0 && p->lean && (kind == BK_WINDOW || kind == BK_UPSAMPLE))
			rc = hp_graph_add_attr(p->g, node, &lean);
		/* inference: narrower KxK blocks too (kernels/conv_kxk.c) */
		if (rc >= 0 && p->lean && !p->training && kind == BK_WINDOW)
			rc = hp_graph_add_attr(p->g, node, &narrow);
		if (rc >= 0 && p->training && (kind == BK_WINDOW || kind == BK_UPSAMPLE))
			rc = hp_graph_add_attr(p->g, node, &unit);
		if (rc >= 0 && p->training && kind == BK_WINDOW && p->axis > 0)
			rc = tag_band(p, n, node, &w, i, hout);
		if (rc < 0)
			return rc;
	}
	p->band = 0;
	p->nsplit++;
	return 0;
}

/* A recurrent node (BK_RNN) in the bands [olo[i], olo[i + 1]) of its
 * batch: each band's node writes those entries of every output, and
 * carries hpdlf_rnn_band { first entry, end, batch } (its RNNGrad chains
 * the weight sums, split_rnn.c). */
static int emit_rnn(struct bp *p, const struct hp_node *n, const int64_t *olo, int nb)
{
	int in[n->ninputs + 1], out[n->noutputs + 1];
	int64_t whole = olo[nb];

	for (int o = 0; o < n->noutputs; o++) {
		struct band *bd = &p->b[n->outputs[o] >= 0 ? n->outputs[o] : 0];
		if (n->outputs[o] < 0)
			continue;
		bd->lo = malloc((size_t)(nb + 2) * sizeof *bd->lo);
		bd->val = malloc((size_t)(nb + 1) * sizeof *bd->val);
		if (!bd->lo || !bd->val)
			return -ENOMEM;
		memcpy(bd->lo, olo, (size_t)(nb + 1) * sizeof *bd->lo);
		bd->n = nb;
	}
	for (int i = 0; i < nb; i++) {
		int64_t t[3] = { olo[i], olo[i + 1], whole };
		struct hp_attr tag = { .name = "hpdlf_rnn_band", .type = HP_ATTR_INTS, .n = 3, .ints = t };
		char name[512];
		int rc, node;
		p->band = i + 1;
		rc = band_inputs(p, n, BK_RNN, olo[i], olo[i + 1], in, NULL, NULL, NULL);
		if (rc < 0)
			return rc;
		for (int o = 0; o < n->noutputs; o++) {
			struct hp_shape ys;
			out[o] = -1;
			if (n->outputs[o] < 0)
				continue;
			ys = *shape_of(p, n->outputs[o]);
			ys.dims[0] = olo[i + 1] - olo[i];
			out[o] = p->b[n->outputs[o]].val[i] = new_value(p, p->g->values[n->outputs[o]].name, "band",
								       n->outputs[o], &ys);
			if (out[o] < 0)
				return out[o];
		}
		snprintf(name, sizeof name, "%s/%s%d", n->name, n->op_type, p->seq++);
		node = hp_graph_add_node(p->g, name, n->op_type, n->ninputs, in, n->noutputs, out);
		if (node < 0)
			return node;
		p->g->nodes[node].sched = p->band;
		rc = copy_attrs(p, n, node, NULL, 0, 0);
		if (rc >= 0)
			rc = hp_graph_add_attr(p->g, node, &tag);
		if (rc < 0)
			return rc;
	}
	p->band = 0;
	p->nsplit++;
	return 0;
}

static int push_node(struct hp_graph *g, const struct hp_node *n)
{
	if (g->nnodes == g->nodes_cap) {
		int cap = g->nodes_cap ? 2 * g->nodes_cap : 64;
		void *q = realloc(g->nodes, (size_t)cap * sizeof *g->nodes);
		if (!q)
			return hp_error(-ENOMEM, "out of memory growing the graph");
		g->nodes = q;
		g->nodes_cap = cap;
	}
	g->nodes[g->nnodes++] = *n;
	return 0;
}

static void drop_node(struct hp_node *n)
{
	hp_node_release(n);
	for (int i = 0; i < n->nattrs; i++) {
		struct hp_attr *a = &n->attrs[i];
		free(a->name), free(a->s), free(a->ints), free(a->floats), free(a->t.data);
		for (int k = 0; a->strings && k < a->n; k++)
			free(a->strings[k]);
		free(a->strings);
	}
	free(n->attrs), free(n->name), free(n->op_type), free(n->domain), free(n->inputs), free(n->outputs);
}

/* The output bounds of n's bands: its reference input's, scaled, when they
 * are multiples of `align`, else an even cut at such multiples.  Returns
 * the band count (< 2: keep n whole). */
static int pick_bounds(struct bp *p, struct hp_node *n, enum band_kind kind, int64_t align, int64_t **olo)
{
	int nb, owned, ref, m, y = n->outputs[0];
	int64_t *lo, sout;

	for (int o = 1; y < 0 && o < n->noutputs; o++) /* a recurrent node may omit Y */
		y = n->outputs[o];
	sout = shape_of(p, y)->dims[p->axis];

	nb = ref_bands(p, n, kind, &ref, &lo, &owned);
	if (nb < 0)
		return hp_error(nb, "out of memory");
	*olo = malloc((size_t)(nb + p->k + 2) * sizeof **olo);
	if (!*olo) {
		if (owned)
			free(lo);
		return hp_error(-ENOMEM, "out of memory");
	}
	m = out_bounds(p, shape_of(p, ref)->dims[p->axis], lo, nb, sout, *olo);
	if (owned)
		free(lo);
	/* cut again when the bands are not aligned, or much coarser than k
	 * even bands (a coarse cut upstream, e.g. by an op with large tiles,
	 * would otherwise hold every later layer to it) */
	if (!aligned(*olo, m, align) || widest(*olo, m) > 2 * ((sout + p->k - 1) / p->k))
		m = even_bounds(p->k, sout, align, *olo);
	return m;
}

/* In the rejoining pass: whether node n, which has banded inputs but fits
 * the target whole, is better kept whole.  An op whose weights (the
 * initializers it reads) take at least as many bytes as its banded inputs
 * reads them once per band out of core, where they are rarely resident at
 * a tight budget, for activations a Concat joins back in one copy: the deep
 * layers of a ResNet at batch 32 cut in 2 bands read 9-MiB weights twice
 * (95 MiB of loads for 47 MiB of state an iteration).  An op without
 * weights whose other inputs are whole already (the residual Add after a
 * convolution kept whole) joins too, rather than cutting a whole value
 * into bands again.  Everything after a joined op stays whole unless it
 * needs more than the target.  Inference only: in training the joins'
 * gradients are cut again (ConcatGrad) and a value read both banded and
 * whole sums two gradients (GradSum), which the 3-D U-Net at a quarter of
 * its peak then wrote below DRAM (test band-zero). */
static int rejoin_here(const struct bp *p, const struct hp_node *n, enum band_kind kind)
{
	uint64_t w = 0, a = 0;
	int whole_in = 0;

	if (!p->rejoin || p->training || train_need(p, n) > p->target)
		return 0;
	for (int j = 0; j < n->ninputs; j++) {
		int v = n->inputs[j];
		if (v < 0)
			continue;
		if (banded_input(p, n, kind, j) && p->b[v].n > 0)
			a += vbytes(p->g, v);
		else if (banded_input(p, n, kind, j))
			whole_in = 1;
		else if (p->g->values[v].kind == HP_VALUE_INITIALIZER)
			w += vbytes(p->g, v);
	}
	return w ? w >= a : whole_in;
}

/* One original node: banded, or kept with whole inputs.  A Conv whose
 * tiles would not fall alike in its bands stays whole (bitwise results). */
static int rewrite_node(struct bp *p, struct hp_node *n)
{
	enum band_kind kind = kind_of(p, n);
	int banded = 0, nb, rc, path = -1, ahead = 0;
	int64_t *olo, align = 1;

	if (kind == BK_WINDOW || kind == BK_UPSAMPLE)
		align = hp_node_band_align(p->g, n, p->axis, p->training, &path);
	if (align < 1)
		kind = BK_NONE;
	for (int j = 0; kind != BK_NONE && j < n->ninputs; j++)
		banded |= banded_input(p, n, kind, j) && p->b[n->inputs[j]].n > 0;
	if (banded && rejoin_here(p, n, kind)) {
		banded = 0;
		kind = BK_NONE;
		p->nrejoined++;
	}
	if (kind != BK_NONE && !banded && train_need(p, n) <= p->target)
		ahead = p->ahead && p->cut_read[n->outputs[0]];
	if (kind != BK_NONE && (banded || train_need(p, n) > p->target || ahead) &&
	    p->g->values[n->inputs[0]].kind != HP_VALUE_CONSTANT) {
		nb = pick_bounds(p, n, kind, align, &olo);
		if (nb < 0)
			return nb;
		rc = nb < 2 ? 1 : kind == BK_RNN ? emit_rnn(p, n, olo, nb) : emit_bands(p, n, kind, olo, nb, path);
		free(olo);
		if (rc <= 0) {
			if (rc == 0) {
				drop_node(n);
				p->nahead += ahead;
			}
			return rc;
		}
	}
	for (int j = 0; j < n->ninputs; j++)
		if ((rc = make_whole(p, n->inputs[j])) < 0)
			return rc;
	if ((rc = push_node(p->g, n)) < 0 || !p->lean || n->domain[0] ||
	    (strcmp(n->op_type, "Conv") && strcmp(n->op_type, "ConvTranspose")))
		return rc;
	/* whole convolutions too get workspace for one worker */
	rc = hp_graph_add_attr(p->g, p->g->nnodes - 1, &(struct hp_attr){ .name = "hpdlf_lean", .type = HP_ATTR_INT, .i = 1 });
	if (rc >= 0 && !p->training)
		rc = hp_graph_add_attr(p->g, p->g->nnodes - 1,
				       &(struct hp_attr){ .name = "hpdlf_narrow", .type = HP_ATTR_INT, .i = 1 });
	return rc < 0 ? rc : 0;
}

/* With `ahead`: the values a node cut for its own need (above the target)
 * reads in bands; their producers are cut too where they can be.  Cutting
 * only from the first node whose need is above the target left a producer
 * below it whole, and each band of its reader sliced the whole output,
 * which a tight plan evicts between bands and reads again: the 3-D U-Net
 * of bench_ooc_targets.py at half its peak kept its first Conv whole (1 MiB
 * in, 16 MiB out) and read that output 5 times a run, 80 of the 121.6 MiB
 * the run read (18.0 MiB with it cut).  One level back only. */
static void mark_cut_reads(struct bp *p, struct hp_node *nodes, int n)
{
	for (int i = 0; i < n; i++) {
		struct hp_node *c = &nodes[i];
		enum band_kind kind = kind_of(p, c);
		int path;
		if (kind == BK_NONE || train_need(p, c) <= p->target ||
		    p->g->values[c->inputs[0]].kind == HP_VALUE_CONSTANT)
			continue;
		if ((kind == BK_WINDOW || kind == BK_UPSAMPLE) && hp_node_band_align(p->g, c, p->axis, p->training, &path) < 1)
			continue;
		for (int j = 0; j < c->ninputs; j++)
			if (banded_input(p, c, kind, j) && c->inputs[j] < p->nvals)
				p->cut_read[c->inputs[j]] = 1;
	}
}

/* Training cuts where the weight gradients' sums have their units
 * (hp_filter_unit_axis: batch items, or with a batch of one the planes of
 * the first spatial axis), so that the chain of band gradients adds what
 * the whole kernel adds; a 1-D batch of one is not cut (returns the rank:
 * no op has that axis). */
static int pick_axis(const struct hp_graph *g, int k, int training)
{
	for (int i = 0; i < g->ninputs; i++) {
		const struct hp_shape *s = &g->values[g->inputs[i]].shape;
		if (s->rank >= 3 && training) {
			int a = (int)hp_filter_unit_axis(s->dims[0]);
			return a == 2 && s->rank < 4 ? s->rank : a;
		}
		if (s->rank >= 3)
			return s->dims[0] >= k ? 0 : 2;
	}
	return 0;
}

/* p->param: trainable parameters, then the outputs of folded nodes that
 * read one (nodes in order). */
static void mark_params(struct bp *p, const struct hp_node *nodes, int n)
{
	for (int v = 0; v < p->nvals; v++)
		p->param[v] = p->g->values[v].trainable && p->g->values[v].kind == HP_VALUE_INITIALIZER;
	for (int i = 0; i < n; i++) {
		int from = 0;
		for (int j = 0; nodes[i].folded && j < nodes[i].ninputs; j++)
			from |= nodes[i].inputs[j] >= 0 && nodes[i].inputs[j] < p->nvals && p->param[nodes[i].inputs[j]];
		for (int o = 0; from && o < nodes[i].noutputs; o++)
			if (nodes[i].outputs[o] >= 0 && nodes[i].outputs[o] < p->nvals)
				p->param[nodes[i].outputs[o]] = 1;
	}
}

int hp_split_band_axis(const struct hp_graph *g, int k, int training)
{
	return pick_axis(g, k, training);
}

int hp_split_band_barriers(const struct hp_graph *g, int k, int training, char *barrier)
{
	struct bp p = { .g = (struct hp_graph *)g, .k = k, .training = training, .nvals = g->nvalues };

	p.axis = pick_axis(g, k, training);
	if (!(p.param = calloc((size_t)p.nvals + 1, 1)))
		return hp_error(-ENOMEM, "out of memory splitting the graph");
	mark_params(&p, g->nodes, g->nnodes);
	for (int i = 0; i < g->nnodes; i++)
		barrier[i] = kind_of(&p, &g->nodes[i]) == BK_NONE;
	free(p.param);
	return 0;
}

int hp_split_bands(struct hp_graph *g, int k, int training, int lean, int ahead, uint64_t target, int *nsplit,
		   int *axis, int *nahead, int *rejoined)
{
	struct bp p = { .g = g, .k = k, .training = training, .lean = lean, .ahead = ahead,
			.rejoin = rejoined != NULL, .target = target, .nvals = g->nvalues };
	struct hp_node *old = g->nodes;
	int nold = g->nnodes, rc = 0, i;

	p.axis = pick_axis(g, k, training);
	p.b = calloc((size_t)p.nvals + 1, sizeof *p.b);
	p.whole = calloc((size_t)p.nvals + 1, 1);
	p.cut_read = calloc((size_t)p.nvals + 1, 1);
	p.param = calloc((size_t)p.nvals + 1, 1);
	if (!p.b || !p.whole || !p.cut_read || !p.param) {
		free(p.b), free(p.whole), free(p.cut_read), free(p.param);
		return hp_error(-ENOMEM, "out of memory splitting the graph");
	}
	mark_params(&p, old, nold);
	if (ahead)
		mark_cut_reads(&p, old, nold);
	g->nodes = NULL;
	g->nnodes = g->nodes_cap = 0;
	for (i = 0; i < nold && rc >= 0; i++)
		rc = rewrite_node(&p, &old[i]);
	for (int o = 0; o < g->noutputs && rc >= 0; o++)
		rc = make_whole(&p, g->outputs[o]);
	for (int v = 0; v < p.nvals && rc >= 0; v++)
		if (g->values[v].next >= 0 && (rc = make_whole(&p, v)) >= 0)
			rc = make_whole(&p, g->values[v].next);
	for (; i < nold; i++) /* not reached after an error */
		drop_node(&old[i]);
	free(old);
	for (int v = 0; v < p.nvals; v++)
		free(p.b[v].lo), free(p.b[v].val);
	free(p.b);
	free(p.whole);
	free(p.cut_read);
	free(p.param);
	*nsplit = p.nsplit;
	*axis = p.axis;
	if (rejoined)
		*rejoined = p.nrejoined;
	if (nahead)
		*nahead = p.nahead;
	return rc < 0 ? rc : hp_graph_finalize(g);
}
