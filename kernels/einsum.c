/* Einsum: any equation of ONNX's grammar (letters, one "..." per term,
 * repeated letters for diagonals, implicit output when "->" is absent:
 * the letters seen once, in alphabetical order, after the ellipsis dims),
 * over float32/float64/int32/int64 operands that broadcast on their
 * ellipsis dims.  Evaluated as one loop over every label's values with a
 * double accumulator per output element: exact to the reference's
 * rounding, and O(product of all label sizes) -- a general fallback, not a
 * replacement for MatMul on large products. */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/shape_util.h"

#define EMAXIN 8
#define ELL 52 /* labels 0..51 are letters; ellipsis dims follow */
#define NLAB (ELL + HP_MAX_RANK)

struct epriv {
	int nin, nout_lab, nlab;
	int lab[EMAXIN][HP_MAX_RANK]; /* label of each operand dim */
	int rank[EMAXIN];
	int out[HP_MAX_RANK];         /* output labels */
	int used[NLAB];               /* dense list of labels, nlab of them */
	int64_t size[NLAB];
};

static int letter(char c)
{
	return c >= 'a' && c <= 'z' ? c - 'a' : c >= 'A' && c <= 'Z' ? 26 + c - 'A' : -1;
}

/* Parse one term of rank `rank` into labels; E is the ellipsis rank of all. */
static int parse_term(const char *t, size_t len, int rank, int E, int *lab, int *nl)
{
	int n = 0, ell = -1;

	for (size_t i = 0; i < len; i++) {
		if (t[i] == ' ')
			continue;
		if (t[i] == '.' && i + 3 <= len && !strncmp(t + i, "...", 3)) {
			if (ell >= 0)
				return -1;
			ell = n;
			i += 2;
			continue;
		}
		if (letter(t[i]) < 0 || n >= HP_MAX_RANK)
			return -1;
		lab[n++] = letter(t[i]);
	}
	int e = ell >= 0 ? (rank < 0 ? E : rank - n) : 0;
	if (e < 0 || (rank >= 0 && n + e != rank) || n + e > HP_MAX_RANK)
		return -1;
	if (ell >= 0) { /* insert ellipsis labels, right-aligned against E */
		memmove(lab + ell + e, lab + ell, (size_t)(n - ell) * sizeof *lab);
		for (int k = 0; k < e; k++)
			lab[ell + k] = ELL + E - e + k;
	}
	*nl = n + e;
	return 0;
}

static int terms(const char *eq, const char **start, size_t *len, const char **out)
{
	const char *arrow = strstr(eq, "->"), *p = eq;
	int k = 0;

	*out = arrow ? arrow + 2 : NULL;
	for (;;) {
		const char *c = strchr(p, ','), *end = arrow ? arrow : eq + strlen(eq);
		if (!c || c > end)
			c = end;
		if (k == EMAXIN)
			return -1;
		start[k] = p, len[k++] = (size_t)(c - p);
		if (c == end)
			return k;
		p = c + 1;
	}
}

/* Implicit output: ellipsis dims, then letters used exactly once, sorted. */
static void implicit_out(struct epriv *p, int E)
{
	int count[ELL] = { 0 };

	p->nout_lab = 0;
	for (int k = 0; k < E; k++)
		p->out[p->nout_lab++] = ELL + k;
	for (int i = 0; i < p->nin; i++)
		for (int d = 0; d < p->rank[i]; d++)
			if (p->lab[i][d] < ELL)
				count[p->lab[i][d]]++;
	for (int l = 0; l < ELL && p->nout_lab < HP_MAX_RANK; l++)
		if (count[l] == 1)
			p->out[p->nout_lab++] = l;
}

static int label_sizes(const struct hp_graph *g, struct hp_node *n, struct epriv *p)
{
	for (int l = 0; l < NLAB; l++)
		p->size[l] = -1;
	for (int i = 0; i < p->nin; i++)
		for (int d = 0; d < p->rank[i]; d++) {
			int l = p->lab[i][d];
			int64_t s = hpks_in(g, n, i)->shape.dims[d];
			if (p->size[l] < 0 || p->size[l] == 1)
				p->size[l] = s;
			else if (s != 1 && s != p->size[l])
				return hp_node_error(g, n, HP_ESHAPE, "label sizes %" PRId64 " and %" PRId64 " disagree",
						     p->size[l], s);
		}
	p->nlab = 0;
	for (int l = 0; l < NLAB; l++)
		if (p->size[l] >= 0)
			p->used[p->nlab++] = l;
	return 0;
}

static int einsum_parse(const struct hp_graph *g, struct hp_node *n, struct epriv *p)
{
	const char *eq = hp_attr_string(n, "equation", ""), *st[EMAXIN], *out;
	size_t len[EMAXIN];
	int nt = terms(eq, st, len, &out), E = 0;

	if (nt != n->ninputs)
		return hp_node_error(g, n, HP_EMODEL, "equation '%s' has %d terms for %d inputs", eq, nt, n->ninputs);
	p->nin = nt;
	for (int i = 0; i < nt; i++) { /* each term's ellipsis rank, then the common one */
		int r = hpks_in(g, n, i)->shape.rank, e = 0;
		if (parse_term(st[i], len[i], r, r, p->lab[i], &p->rank[i]) < 0)
			return hp_node_error(g, n, HP_EMODEL, "term %d of '%s' does not fit rank %d", i, eq, r);
		for (int d = 0; d < p->rank[i]; d++)
			e += p->lab[i][d] >= ELL;
		E = e > E ? e : E;
	}
	for (int i = 0; i < nt; i++)
		parse_term(st[i], len[i], hpks_in(g, n, i)->shape.rank, E, p->lab[i], &p->rank[i]);
	if (!out)
		implicit_out(p, E);
	else if (parse_term(out, strlen(out), -1, E, p->out, &p->nout_lab) < 0)
		return hp_node_error(g, n, HP_EMODEL, "output term of '%s' is not valid", eq);
	return label_sizes(g, n, p);
}

static int einsum_prepare(struct hp_graph *g, struct hp_node *n)
{
	const struct hp_value *x = hpks_in(g, n, 0);
	struct hp_shape s = { 0 };
	struct epriv *p = calloc(1, sizeof *p);
	int rc;

	if (!p)
		return hp_node_error(g, n, -ENOMEM, "out of memory");
	n->priv = p;
	for (int i = 0; i < n->ninputs; i++)
		if (!hpks_in(g, n, i) || hpks_in(g, n, i)->dtype != x->dtype)
			return hp_node_error(g, n, HP_ESHAPE, "every input must be present and of one dtype");
	if (x->dtype != HP_F32 && x->dtype != HP_F64 && x->dtype != HP_I32 && x->dtype != HP_I64)
		return hp_node_error(g, n, HP_EUNSUPPORTED, "dtype %s is not supported", hp_dtype_name(x->dtype));
	if ((rc = einsum_parse(g, n, p)) < 0)
		return rc;
	s.rank = p->nout_lab;
	for (int d = 0; d < s.rank; d++) {
		if (p->size[p->out[d]] < 0)
			return hp_node_error(g, n, HP_EMODEL, "output label %d appears in no input", p->out[d]);
		s.dims[d] = p->size[p->out[d]];
	}
	hpks_set_out(g, n, 0, x->dtype, &s);
	return 0;
}

/* Strides per label for operand i (0 where broadcast or absent). */
static void label_strides(const struct epriv *p, const struct hp_tensor *t, int i, int64_t *ls)
{
	int64_t st[HP_MAX_RANK];

	memset(ls, 0, NLAB * sizeof *ls);
	hpks_strides(&t->shape, st);
	for (int d = 0; d < p->rank[i]; d++)
		if (t->shape.dims[d] != 1)
			ls[p->lab[i][d]] += st[d];
}

static int einsum_run(const struct hp_node *n, const struct hp_kargs *a)
{
	const struct epriv *p = n->priv;
	int64_t (*ls)[NLAB] = malloc(sizeof(int64_t[EMAXIN + 1][NLAB])), val[NLAB] = { 0 }, total = 1, ost[HP_MAX_RANK];
	double *acc = calloc((size_t)hp_shape_numel(&a->out[0].shape) + 1, sizeof *acc);
	enum hp_dtype t = a->in[0].dtype;

	if (!ls || !acc) {
		free(ls);
		free(acc);
		return hp_node_error(NULL, n, -ENOMEM, "out of memory");
	}
	for (int i = 0; i < p->nin; i++)
		label_strides(p, &a->in[i], i, ls[i]);
	hpks_strides(&a->out[0].shape, ost);
	memset(ls[EMAXIN], 0, sizeof ls[EMAXIN]);
	for (int d = 0; d < p->nout_lab; d++)
		ls[EMAXIN][p->out[d]] = ost[d];
	for (int k = 0; k < p->nlab; k++)
		total *= p->size[p->used[k]];
	for (int64_t it = 0; it < total; it++) {
		double prod = 1;
		int64_t oo = 0;
		for (int i = 0; i < p->nin; i++) {
			int64_t off = 0;
			for (int k = 0; k < p->nlab; k++)
				off += val[p->used[k]] * ls[i][p->used[k]];
			prod *= hpks_get_f(a->in[i].data, t, off);
		}
		for (int k = 0; k < p->nlab; k++)
			oo += val[p->used[k]] * ls[EMAXIN][p->used[k]];
		acc[oo] += prod;
		for (int k = p->nlab - 1; k >= 0; k--) { /* next label combination */
			if (++val[p->used[k]] < p->size[p->used[k]])
				break;
			val[p->used[k]] = 0;
		}
	}
	for (int64_t e = 0; e < hp_shape_numel(&a->out[0].shape); e++)
		hpks_put_f(a->out[0].data, t, e, acc[e]);
	free(ls);
	free(acc);
	return 0;
}

static const struct hp_op op_einsum = {
	.domain = "", .name = "Einsum", .min_inputs = 1, .max_inputs = EMAXIN, .min_outputs = 1,
	.max_outputs = 1, .prepare = einsum_prepare, .run = einsum_run,
};

const struct hp_op *const hp_ops_einsum[] = { &op_einsum, NULL };
