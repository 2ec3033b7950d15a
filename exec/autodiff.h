/* Training graph construction: loss, backward pass and optimizer updates
 * appended to an inferred forward graph.
 *
 *   struct hp_train_spec t;
 *   hp_train_spec_init(&t, sizeof t);
 *   t.loss = HP_LOSS_CROSS_ENTROPY;      // logits = first graph output
 *   t.optimizer = HP_OPT_ADAM;
 *   t.lr = 1e-3;
 *   if (hp_autodiff(g, &t) < 0) die(hp_errmsg());
 *   // g now has an input "labels" and an output "loss"; each run of a
 *   // session over g is one training step (weights move through value.next).
 *
 * Backward tensors, saved activations, gradients and optimizer state are
 * ordinary values and nodes of g, so the executor plans and pages them like
 * any other tensor.  A parameter's update node depends only on its complete
 * gradient (plus its own state), so it can run as soon as that gradient is.
 */
#ifndef HPDLF_EXEC_AUTODIFF_H
#define HPDLF_EXEC_AUTODIFF_H

#include <stddef.h>
#include <stdint.h>

#include "hpdlf/graph.h"

#ifdef __cplusplus
extern "C" {
#endif

enum hp_loss_kind {
	HP_LOSS_CROSS_ENTROPY = 1, /* mean softmax CE: logits [N,C,...], int64 labels [N,...] */
	HP_LOSS_MSE = 2,           /* mean squared error against a float target of the output's shape */
	HP_LOSS_OUTPUT = 3,        /* minimize a scalar the graph computes (output:NAME) */
};

enum hp_optimizer_kind {
	HP_OPT_SGD = 1,
	HP_OPT_ADAM = 2,
	HP_OPT_ADAMW = 3,
};

struct hp_train_spec {
	size_t size;                  /* sizeof the struct the caller knows (growth) */
	enum hp_loss_kind loss;
	const char *output;           /* value the loss reads (OUTPUT: the scalar); NULL: first graph output */
	const char *labels;           /* name of the labels/target input added; NULL: "labels" */
	int64_t ignore_index;         /* cross-entropy label to skip (torch default -100) */
	enum hp_optimizer_kind optimizer;
	double lr, momentum, weight_decay; /* weight_decay < 0: the optimizer's torch default */
	int nesterov;
	double beta1, beta2, eps;     /* Adam/AdamW */
	uint64_t seed;                /* Dropout masks */
};

/* Defaults: cross-entropy, SGD, lr 0.01, no momentum, torch's default decay,
 * betas 0.9/0.999, eps 1e-8, seed 1. */
void hp_train_spec_init(struct hp_train_spec *s, size_t size);

/* Rewrite g (inferred) into one training step: BatchNormalization uses batch
 * statistics and updates its running statistics, Dropout draws a seeded
 * mask; then loss, backward and optimizer updates, and g is re-inferred.
 * Errors: HP_EUSAGE (bad spec, unknown output), HP_EUNSUPPORTED (an op on
 * the gradient path has no gradient; the message names node and op). */
int hp_autodiff(struct hp_graph *g, const struct hp_train_spec *spec);

#ifdef __cplusplus
}
#endif
#endif
