/* Gradient rules of the recurrent, indexing and rearranging operators:
 * RNN, GRU, LSTM (one RNNGrad node recomputing the forward), GatherElements
 * and TopK (dY added back at the indices), ScatterElements and ScatterND
 * (data: dY with the written places zeroed; updates: dY read at them),
 * Tile, Pad (every mode) and Einsum.  Called from autodiff_rules.c's
 * dispatch; uses only autodiff_emit.c. */
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

struct rule {
	const char *op;
	int (*fn)(struct ad *ad, const struct hp_node *n, const int *dy);
};

static const struct rule rules[] = {
	{ "RNN", r_rnn }, { "GRU", r_rnn }, { "LSTM", r_rnn },
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
