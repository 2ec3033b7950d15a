/* Internal to kernels/: RNN, GRU and LSTM (rnn.c: attributes, shapes, the
 * op table; rnn_run.c: activations and the recurrence). */
#ifndef HPDLF_KERNELS_RNN_IMPL_H
#define HPDLF_KERNELS_RNN_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include "hpdlf/graph.h"

struct rnn_act {
	int kind;
	int nparams;       /* how many of alpha, beta the activation takes */
	float alpha, beta;
};

struct rnn_priv {
	int gates;         /* 1 RNN, 3 GRU, 4 LSTM */
	int ndir, reverse, layout, lbr, input_forget;
	int nact;          /* activations per direction */
	struct rnn_act act[6];
	float clip;        /* INFINITY: none */
	int64_t seq, batch, input, hidden;
};

/* Attributes and input checks of a recurrent node whose forward inputs
 * (X, W, R, B, sequence_lens, initial_h, initial_c, P) start at input
 * `base` (0: the ONNX op; 3: RNNGrad after dY, dY_h, dY_c); op is
 * "RNN", "GRU" or "LSTM".  *out is n->priv. */
int hpkr_prepare(struct hp_graph *g, struct hp_node *n, const char *op, int base, struct rnn_priv **out);
/* An activation and its derivative at x. */
double hpkr_act(const struct rnn_act *a, double x);
double hpkr_dact(const struct rnn_act *a, double x);
/* Parse an ONNX activation name (with its default alpha/beta); -1 if unknown. */
int hpkr_act_parse(const char *name, struct rnn_act *a);
void hpkr_set_outputs(struct hp_graph *g, const struct hp_node *n, const struct rnn_priv *p);
size_t hpkr_workspace(const struct rnn_priv *p);
int hpkr_run(const struct hp_node *n, const struct hp_kargs *a);

#endif
