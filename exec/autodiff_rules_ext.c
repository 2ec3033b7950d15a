/* Gradient rules of the recurrent, indexing and rearranging operators:
 * RNN, GRU, LSTM (one RNNGrad node recomputing the forward), GatherElements
 * and TopK (dY added back at the indices), ScatterElements and ScatterND
 * (data: dY with the written places zeroed; updates: dY read at them),
 * Tile, Pad (every mode), Einsum, and Cast between float32 values.  Called from autodiff_rules.c's
 * dispatch; uses only autodiff_emit.c. */
#include <stdio.h>
#include <string.h>

#include "hpdlf/error.h"
#include "exec/autodiff_internal.h"

#define MAXA 16

static int in_at(const struct hp_node *n, int i)
{
	return i < n->ninputs ? n->inputs[i] : -1;
}

/* RNNGrad reads dY, dY_h, dY_c and every forward input; output k is the
 * gradient of forward input k. */
static int r_rnn(struct ad *ad, const struct hp_node *n, const int *dy)
{
	struct hp_attr a[MAXA];
	int in[11], want[8], na = 0;

	if (n->nattrs >= MAXA)
		return ad_no_grad(ad, n, "too many attributes");
	a[na++] = ad_str("op", n->op_type);
	for (int k = 0; k < n->nattrs; k++)
		a[na++] = n->attrs[k];
	for (int k = 0; k < 3; k++)
		in[k] = k < n->noutputs && n->outputs[k] >= 0 ? dy[k] : -1;
	for (int k = 0; k < 8; k++) {
		in[3 + k] = in_at(n, k);
		want[k] = k == 4 || in_at(n, k) < 0 ? -1 : k;
	}
	if (in[0] < 0 && in[1] < 0 && in[2] < 0)
		return 0;
	return ad_emit_to(ad, n, "RNNGrad", 11, in, 8, want, na, a);
}

static struct hp_shape shape_of(const struct ad *ad, int v)
{
	return ad->g->values[v].shape;
}

/* Emit ai.onnx op `op` whose one output is a contribution to forward input k. */
static int emit_onnx_to(struct ad *ad, const struct hp_node *n, const char *op, int nin, const int *in, int k,
			int nattrs, const struct hp_attr *a)
{
	int out[1] = { 1 }, rc;

	if (!ad_needs(ad, n, k))
		return 0;
	rc = ad_emit(ad, op, 0, n->name, nin, in, 1, out, nattrs, a);
	return rc < 0 ? rc : ad_contrib(ad, n->inputs[k], out[0]);
}

/* Cast between float32 values (a model's float16 casts are float32 ones
 * here, onnx/half.c): the gradient passes unchanged. */
static int r_cast(struct ad *ad, const struct hp_node *n, const int *dy)
{
	if (ad->g->values[n->inputs[0]].dtype != HP_F32 || ad->g->values[n->outputs[0]].dtype != HP_F32)
		return ad_no_grad(ad, n, "only a Cast from float32 to float32 (or half precision) passes a gradient");
	return ad_contrib(ad, n->inputs[0], dy[0]);
}

static int r_gather_elements(struct ad *ad, const struct hp_node *n, const int *dy)
{
	struct hp_shape xs = shape_of(ad, n->inputs[0]);
	struct hp_attr a[2] = { ad_int("axis", hp_attr_int(n, "axis", 0)), ad_shape("x_shape", &xs) };
	int in[2] = { dy[0], n->inputs[1] }, want[1] = { 0 };

	return ad_emit_to(ad, n, "GatherElementsGrad", 2, in, 1, want, 2, a);
}

/* TopK's values: dY back at the places its Indices output names. */
static int r_topk(struct ad *ad, const struct hp_node *n, const int *dy)
{
	struct hp_shape xs = shape_of(ad, n->inputs[0]);
	struct hp_attr a[2] = { ad_int("axis", hp_attr_int(n, "axis", -1)), ad_shape("x_shape", &xs) };
	int in[2] = { dy[0], n->noutputs > 1 ? n->outputs[1] : -1 }, want[1] = { 0 };

	if (dy[0] < 0)
		return 0;
	if (in[1] < 0)
		return ad_no_grad(ad, n, "TopK's Indices output is omitted");
	return ad_emit_to(ad, n, "GatherElementsGrad", 2, in, 1, want, 2, a);
}

static int r_scatter(struct ad *ad, const struct hp_node *n, const int *dy)
{
	const char *red = hp_attr_string(n, "reduction", "none");
	struct hp_shape us = shape_of(ad, n->inputs[2]);
	struct hp_attr a[4] = { ad_str("mode", strcmp(n->op_type, "ScatterND") ? "elements" : "nd"),
				ad_int("axis", hp_attr_int(n, "axis", 0)), ad_str("reduction", red),
				ad_shape("updates_shape", &us) };
	int in[2] = { dy[0], n->inputs[1] }, want[2] = { 0, 2 };

	if (strcmp(red, "none") && strcmp(red, "add"))
		return ad_no_grad(ad, n, "only reduction none and add are differentiable");
	return ad_emit_to(ad, n, "ScatterGrad", 2, in, 2, want, 4, a);
}

static int r_tile(struct ad *ad, const struct hp_node *n, const int *dy)
{
	struct hp_shape xs = shape_of(ad, n->inputs[0]);
	struct hp_attr a[2] = { ad_str("mode", "tile"), ad_shape("x_shape", &xs) };
	int want[1] = { 0 };

	return ad_emit_to(ad, n, "PadGrad", 1, dy, 1, want, 2, a);
}

/* Pad: the begin and end pads of every dim from the constant pads and axes. */
static int r_pad(struct ad *ad, const struct hp_node *n, const int *dy)
{
	struct hp_shape xs = shape_of(ad, n->inputs[0]);
	int64_t p[2 * HP_MAX_RANK], axes[HP_MAX_RANK], full[2 * HP_MAX_RANK] = { 0 };
	int r = xs.rank, np = in_at(n, 1) >= 0 ? ad_const_ints(ad, n->inputs[1], p, 2 * HP_MAX_RANK) : -1, na = r;
	int want[1] = { 0 };

	if (ad_needs(ad, n, 2))
		return ad_no_grad(ad, n, "the constant_value input is not differentiable");
	if (np < 0)
		return ad_no_grad(ad, n, "pads must be constant");
	if (in_at(n, 3) >= 0 && (na = ad_const_ints(ad, n->inputs[3], axes, HP_MAX_RANK)) < 0)
		return ad_no_grad(ad, n, "axes must be constant");
	for (int i = 0; in_at(n, 3) < 0 && i < r; i++)
		axes[i] = i;
	if (np != 2 * na)
		return ad_no_grad(ad, n, "pads do not fit the axes");
	for (int i = 0; i < na; i++) {
		int64_t ax = axes[i] < 0 ? axes[i] + r : axes[i];
		if (ax < 0 || ax >= r)
			return ad_no_grad(ad, n, "axis out of range");
		full[ax] = p[i];
		full[r + ax] = p[na + i];
	}
	struct hp_attr a[3] = { ad_str("mode", hp_attr_string(n, "mode", "constant")), ad_shape("x_shape", &xs),
				ad_ints("pads", 2 * r, full) };
	return ad_emit_to(ad, n, "PadGrad", 1, dy, 1, want, 3, a);
}

/* ---- Einsum: dA_k = Einsum("out,others->term_k")(dY, others) ----------- */

#define EQ_TERMS 9
#define EQ_LEN 64

struct eq {
	int nt;                        /* input terms */
	char t[EQ_TERMS][EQ_LEN];      /* input terms, then t[nt]: the output */
};

static int is_letter(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

static int nletters(const char *t)
{
	int k = 0;

	for (; *t; t++)
		k += is_letter(*t);
	return k;
}

/* The output of an equation without "->": the ellipsis if any term has
 * one, then the letters seen once, a-z then A-Z (as kernels/einsum.c). */
static void implicit_out(struct eq *q)
{
	static const char order[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ";
	char *o = q->t[q->nt];
	int ell = 0, len = 0;

	for (int i = 0; i < q->nt; i++)
		ell |= strstr(q->t[i], "...") != NULL;
	if (ell)
		len = snprintf(o, EQ_LEN, "...");
	for (const char *c = order; *c && len < EQ_LEN - 1; c++) {
		int cnt = 0;
		for (int i = 0; i < q->nt; i++)
			for (const char *p = q->t[i]; *p; p++)
				cnt += *p == *c;
		if (cnt == 1)
			o[len++] = *c;
	}
	o[len] = 0;
}

static int parse_eq(const char *e, int nin, struct eq *q)
{
	char buf[EQ_TERMS * EQ_LEN], *arrow, *tok, *save;
	size_t len = 0;

	for (; *e && len < sizeof buf - 1; e++)
		if (*e != ' ')
			buf[len++] = *e;
	buf[len] = 0;
	if (nin >= EQ_TERMS || *e)
		return -1;
	memset(q, 0, sizeof *q);
	if ((arrow = strstr(buf, "->")))
		*arrow = 0;
	for (tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		if (q->nt >= nin || strlen(tok) >= EQ_LEN)
			return -1;
		strcpy(q->t[q->nt++], tok);
	}
	if (buf[0] == ',' || q->nt != nin || (arrow && strlen(arrow + 2) >= EQ_LEN))
		return -1;
	if (arrow)
		strcpy(q->t[nin], arrow + 2);
	else
		implicit_out(q);
	return 0;
}

/* Why operand k's gradient is not an Einsum of dY and the others, or NULL. */
static const char *einsum_refusal(const struct ad *ad, const struct hp_node *n, const struct eq *q, int k)
{
	const char *t = q->t[k], *o = q->t[q->nt];

	for (const char *c = t; *c; c++) {
		int elsewhere = 0;
		if (!is_letter(*c))
			continue;
		if (strchr(c + 1, *c))
			return "a repeated label (diagonal) in an operand";
		for (int j = 0; j <= q->nt; j++)
			elsewhere |= j != k && strchr(q->t[j], *c) != NULL;
		if (!elsewhere)
			return "a label summed within one operand";
	}
	if (strstr(t, "...")) {
		struct hp_shape xs = shape_of(ad, n->inputs[k]), ys = shape_of(ad, n->outputs[0]);
		int ek = xs.rank - nletters(t), eo = ys.rank - nletters(o);
		const char *po = strstr(o, "...");
		if (!po || ek != eo)
			return "ellipsis dims that broadcast or are summed";
		int xo = (int)(strstr(t, "...") - t), yo = (int)(po - o);
		for (int d = 0; d < ek; d++)
			if (xs.dims[xo + d] != ys.dims[yo + d])
				return "ellipsis dims that broadcast or are summed";
	}
	return NULL;
}

static int r_einsum(struct ad *ad, const struct hp_node *n, const int *dy)
{
	struct eq q;
	char eqn[EQ_TERMS * EQ_LEN + 8];
	const char *why;
	int in[EQ_TERMS], rc;

	if (parse_eq(hp_attr_string(n, "equation", ""), n->ninputs, &q) < 0)
		return ad_no_grad(ad, n, "equation not understood");
	for (int k = 0; k < q.nt; k++) {
		int len, m = 1;
		if (!ad_needs(ad, n, k))
			continue;
		if ((why = einsum_refusal(ad, n, &q, k)))
			return ad_no_grad(ad, n, why);
		in[0] = dy[0];
		len = snprintf(eqn, sizeof eqn, "%s", q.t[q.nt]);
		for (int j = 0; j < q.nt; j++)
			if (j != k) {
				len += snprintf(eqn + len, sizeof eqn - (size_t)len, ",%s", q.t[j]);
				in[m++] = n->inputs[j];
			}
		snprintf(eqn + len, sizeof eqn - (size_t)len, "->%s", q.t[k]);
		struct hp_attr a[1] = { ad_str("equation", eqn) };
		if ((rc = emit_onnx_to(ad, n, "Einsum", m, in, k, 1, a)) < 0)
			return rc;
	}
	return 0;
}

struct rule {
	const char *op;
	int (*fn)(struct ad *ad, const struct hp_node *n, const int *dy);
};

static const struct rule rules[] = {
	{ "RNN", r_rnn }, { "GRU", r_rnn }, { "LSTM", r_rnn }, { "GatherElements", r_gather_elements },
	{ "TopK", r_topk }, { "ScatterElements", r_scatter }, { "Scatter", r_scatter }, { "ScatterND", r_scatter },
	{ "Tile", r_tile }, { "Pad", r_pad }, { "Einsum", r_einsum }, { "Cast", r_cast }, { "CastLike", r_cast },
};

int ad_has_rule_ext(const char *op)
{
	for (size_t i = 0; i < sizeof rules / sizeof rules[0]; i++)
		if (!strcmp(rules[i].op, op))
			return 1;
	return 0;
}

int ad_rule_ext(struct ad *ad, const struct hp_node *n, const int *dy)
{
	for (size_t i = 0; i < sizeof rules / sizeof rules[0]; i++)
		if (!strcmp(rules[i].op, n->op_type))
			return rules[i].fn(ad, n, dy);
	return 1;
}
